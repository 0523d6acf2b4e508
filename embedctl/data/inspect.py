"""`embedctl data inspect PATH`: schema, counts, token-length histogram, relevance counts, a decoded example.

PATH is a token cache (root or one side) or a pre-batched folder, local or fsspec URL.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from embedctl.config.sections.model import ModelConfig
from embedctl.data.batches import read_batch, read_metadata
from embedctl.data.formats import DAMAGED_HINT, batch_files, check_records, join
from embedctl.data.token_cache import REBUILD_HINT, SIDES, ledger_files, open_token_cache, resolve_side_path
from embedctl.errors import InputError
from embedctl.models.tokenization import TextTokenizer
from embedctl.util.console import printable, stdout_console
from embedctl.util.fs import url_to_fs


def _tokenizer(model: dict):
    """The TextTokenizer a cache was made with, or None when it cannot be loaded here."""
    names = {f.name for f in dataclasses.fields(ModelConfig)}
    try:
        return TextTokenizer(ModelConfig(**{k: v for k, v in model.items() if k in names}))
    except Exception:
        return None


def _histogram(console, title: str, lengths: np.ndarray, bins: int = 10) -> None:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("tokens", justify="right")
    table.add_column("count", justify="right")
    table.add_column("", min_width=30)
    if len(lengths) == 0:
        console.print(table)
        return
    counts, edges = np.histogram(lengths, bins=min(bins, max(1, int(lengths.max() - lengths.min()) + 1)))
    top = max(1, int(counts.max()))
    for c, lo, hi in zip(counts, edges[:-1], edges[1:], strict=True):
        table.add_row(f"{int(lo)}-{int(hi)}", f"{int(c):,}", "█" * int(round(30 * c / top)))
    console.print(table)
    console.print(f"  min {int(lengths.min())}, mean {lengths.mean():.1f}, max {int(lengths.max())}", markup=False)


def _schema(console, fs, path: str) -> None:
    import pyarrow.parquet as pq

    with fs.open(path, "rb") as fh:
        schema = pq.read_schema(fh)
    console.print(f"[bold]{'/'.join(path.rsplit('/', 2)[-2:])}[/]")
    for f in schema:
        console.print(f"  {f.name}: {f.type}", markup=False)


def _decode(tok, ids) -> str:
    return tok.decode(ids) if tok is not None else " ".join(str(int(i)) for i in ids)


def _verified(console, url: str, problems: list[str], count: int, hint: str) -> None:
    """Report a full (sha256) check: the problems as an InputError, else how many files matched."""
    if problems:
        raise InputError(f"{len(problems)} of {count} files fail the sha256 check: " + "; ".join(problems[:5]),
                         path=url, hint=hint)
    console.print(f"verified: all {count} files match their recorded size and sha256", markup=False)


def inspect_cache(console, url: str, verify: bool = False) -> None:
    fs, path = url_to_fs(url)
    sides = [s for s in SIDES if fs.exists(join(path, s))] or [None]
    for side in sides:
        _, side_path, side_name = resolve_side_path(url, side)
        cache = open_token_cache(url, side)
        led = cache.ledger
        if verify:
            _verified(console, f"{url} ({side_name})", cache.verify(full=True), len(ledger_files(led)), REBUILD_HINT)
        console.rule(f"token cache: {side_name}")
        console.print(f"rows {len(cache):,}  chunks {led['num_chunks']}  shards {led['num_shards']}  dtype {cache.token_dtype}"
                      f"  skipped {led.get('skipped', 0)}  finished {led['finished']}", markup=False)
        tokfp = cache.fingerprint["tokenizer"]
        console.print(f"model {cache.model.get('name_or_path')} ({tokfp.get('kind')}), max lengths query "
                      f"{tokfp.get('query_max_length')} / doc {tokfp.get('doc_max_length')}", markup=False)
        first = sorted(led["chunks"])[0]
        _schema(console, fs, join(side_path, "chunks", f"chunk-{first}.parquet"))
        _schema(console, fs, join(side_path, "ids", f"chunk-{first}.parquet"))
        _histogram(console, "token lengths", cache.lengths())
        tok = _tokenizer(cache.model)
        ids, lists = next(cache.iter_chunks())
        first_id = cache.first_ids(1)[0]  # not cache.ids: that reads the whole id map
        console.print(f"example {first_id!r} (uint64 {int(ids[0])}):", markup=False)
        console.print("  " + _decode(tok, lists[0]), markup=False)


def inspect_batches(console, url: str, meta: dict, verify: bool = False) -> None:
    fs, path = _fs(url)
    if verify:
        files = batch_files(meta["batches"])
        _verified(console, url, check_records(fs, path, files, full=True), len(files), DAMAGED_HINT)
    console.rule("pre-batched data")
    counts = meta.get("counts", {})
    console.print(f"batches {meta['num_batches']:,}  token dtype {meta.get('token_dtype')}  "
                  + "  ".join(f"{k} {v:,}" for k, v in counts.items()), markup=False)
    first = join(path, meta["batches"][0]["name"])
    for name in ("queries", "documents", "relations"):
        _schema(console, fs, join(first, f"{name}.parquet"))
    names = [b["name"] for b in meta["batches"]][:200]  # bounded: a sample of batches for the histograms
    batches = [read_batch(join(url.rstrip("/"), n)) for n in names]
    q_len = np.array([len(t) for b in batches for t in b.query_tokens])
    d_len = np.array([len(t) for b in batches for t in b.document_tokens])
    rel = np.concatenate([b.relevance[b.relevance != 0] for b in batches])
    sample = "" if len(names) == meta["num_batches"] else f" (first {len(names)} batches)"
    _histogram(console, f"query token lengths{sample}", q_len)
    _histogram(console, f"document token lengths{sample}", d_len)
    values, value_counts = np.unique(rel, return_counts=True)
    console.print("relevance counts: " + ", ".join(f"{int(v)}: {int(c):,}" for v, c in zip(values, value_counts, strict=True)),
                  markup=False)
    tok = _tokenizer(meta.get("model", {}))
    b = batches[0]
    console.print(f"example from {names[0]}:", markup=False)
    for qi in range(min(2, b.num_queries)):
        console.print(f"  query {int(b.query_ids[qi])}: {printable(_decode(tok, b.query_tokens[qi]))}", markup=False)
        for dj in np.flatnonzero(b.relevance[qi]):
            text = printable(_decode(tok, b.document_tokens[dj]))  # a document's escape sequences stay inert
            console.print(f"    [{int(b.relevance[qi, dj]):+d}] doc {int(b.document_ids[dj])}: "
                          f"{text[:300]}{'...' if len(text) > 300 else ''}", markup=False)


def _fs(url: str):
    return url_to_fs(url)


def inspect_path(url: str, console=None, verify: bool = False) -> None:
    """Print what is at ``url`` (token cache or pre-batched folder); ``verify`` checks every file's sha256
    against the records written with it (the cheap size check runs whenever a cache or folder is opened)."""
    console = console or stdout_console()
    fs, path = _fs(url)
    if not fs.exists(path):
        raise InputError("no such folder", path=url, hint="pass a token cache folder (e.g. cache/documents) or a "
                         "pre-batched folder, as written by `embedctl pretokenize` / `embedctl prebatch`")
    meta_path = join(path, "metadata.json")
    if fs.exists(meta_path):
        inspect_batches(console, url, read_metadata(url), verify)
    elif any(fs.exists(join(path, s)) for s in ("documents", "queries", "ledger.json", "shards")):
        inspect_cache(console, url, verify)
    else:
        raise InputError("neither a token cache nor a pre-batched folder", path=url,
                         hint="pass the --output folder of `embedctl pretokenize` or `embedctl prebatch`")
