"""Token cache layout, ledgers and the reader other modules use (`open_token_cache`).

Layout of one side (``DIR/documents`` or ``DIR/queries``)::

    chunks/chunk-000000.parquet   ID: uint64, TOKEN_ID_LIST: large_list<uint16|uint32>
    ids/chunk-000000.parquet      ID: uint64, STRING_ID: string      (the id map, same row order)
    shards/ledger-00000-of-00001.json   per-shard progress (chunks done, finished flag, fingerprint)
    ledger.json                   merged ledger, written once every shard has finished
    skipped.jsonl                 rows left out under --on-error skip (file, line, reason)

Chunk ``c`` holds rows ``[c * rows_per_chunk, (c + 1) * rows_per_chunk)`` of the input (after skipped
rows); shard ``i`` of ``n`` writes the chunks with ``c % n == i``. Reading the chunks in index order gives
the input order, whatever the number of shards or workers.

Example::

    cache = open_token_cache("runs/scifact/tokens", "documents")
    len(cache), cache.ids[:2], cache.token_dtype
    for ids, lists in cache.iter_chunks(): ...
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property

import numpy as np

from embedctl.data.formats import (
    TOKEN_CACHE_FORMAT,
    check_records,
    join,
    read_checked_parquet,
    read_json_file,
    token_lists_of,
)
from embedctl.errors import EmbedctlError, InputError
from embedctl.util.fs import url_to_fs

SIDES = ("documents", "queries")
LEDGER = "ledger.json"


def chunk_name(c: int) -> str:
    return f"chunk-{c:06d}.parquet"


def shard_ledger_name(index: int, count: int) -> str:
    return f"ledger-{index:05d}-of-{count:05d}.json"


REBUILD_HINT = ("rerun the same `embedctl pretokenize` command: it rebuilds missing or damaged chunks "
                "(`embedctl data inspect --verify PATH` checks every file's sha256)")


def chunk_files(key: str, stats: dict) -> dict[str, dict]:
    """The files of one ledger chunk entry, relative to the side folder -> ``{"bytes", "sha256"}`` as
    recorded when written (an older ledger without records: ``{}``, checked for presence only)."""
    c = int(key)
    recorded = stats.get("files") or {}
    return {name: recorded.get(name, {}) for name in (f"chunks/{chunk_name(c)}", f"ids/{chunk_name(c)}")}


def ledger_files(ledger: dict) -> dict[str, dict]:
    """Every file a (shard or merged) ledger lists, relative to the side folder."""
    out: dict[str, dict] = {}
    for key, stats in ledger.get("chunks", {}).items():
        out.update(chunk_files(key, stats))
    return out


def damaged_chunks(fs, side_path: str, ledger: dict, full: bool = False) -> dict[str, list[str]]:
    """Chunk keys of ``ledger`` whose files are missing or differ from their records -> the problems
    (one listing for all sizes; with ``full`` every file's sha256 too)."""
    problems = check_records(fs, side_path, ledger_files(ledger), full=full)
    out: dict[str, list[str]] = {}
    for key, stats in ledger.get("chunks", {}).items():
        paths = tuple(join(side_path, name) + ":" for name in chunk_files(key, stats))
        mine = [p for p in problems if p.startswith(paths)]
        if mine:
            out[key] = mine
    return out


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def fingerprint_diff(old: dict, new: dict) -> list[str]:
    """Human-readable differences between two fingerprints, e.g. ``tokenizer.doc_max_length: 256 -> 128``."""
    a, b = flatten(old), flatten(new)
    return [f"{k}: {a.get(k, '(absent)')!r} -> {b.get(k, '(absent)')!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def shard_ledgers(fs, side_path: str) -> dict[str, dict]:
    """All shard ledgers of a side folder, by file name."""
    folder = join(side_path, "shards")
    if not fs.exists(folder):
        return {}
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(folder, detail=False))
    return {n: read_json_file(fs, join(folder, n)) for n in names if n.startswith("ledger-") and n.endswith(".json")}


def merge_ledgers(ledgers: list[dict]) -> dict | None:
    """The merged ledger when every shard of one consistent cache has finished, else None."""
    if not ledgers:
        return None
    first = ledgers[0]
    n = first["num_shards"]
    if any(led["fingerprint"] != first["fingerprint"] or led["num_shards"] != n for led in ledgers):
        return None
    done = {led["shard_index"] for led in ledgers if led.get("finished")}
    if done != set(range(n)):
        return None
    chunks: dict[str, dict] = {}
    for led in ledgers:
        chunks.update(led["chunks"])
    merged = {k: v for k, v in first.items() if k not in ("chunks", "shard_index")}
    merged.update(chunks=dict(sorted(chunks.items())), shard_index=None, finished=True)
    if len(chunks) != first["num_chunks"]:
        return None
    return merged


def resolve_side_path(url: str, side: str | None) -> tuple[object, str, str]:
    """(fs, side folder path, side name) for a cache root + side, or a side folder itself."""
    fs, path = url_to_fs(url)
    path = path.rstrip("/")
    looks_like_side = fs.exists(join(path, LEDGER)) or fs.exists(join(path, "shards"))
    if side is None:
        if looks_like_side:
            return fs, path, path.rsplit("/", 1)[-1]
        present = [s for s in SIDES if fs.exists(join(path, s))]
        if len(present) != 1:
            raise InputError(f"say which side to open: found {present or 'no'} sides in the token cache", path=url)
        side = present[0]
    if fs.exists(join(path, side)):
        return fs, join(path, side), side
    if looks_like_side:
        return fs, path, side
    raise InputError(f"no `{side}` token cache here", path=url,
                     hint=f"run `embedctl pretokenize` on the {side} first (a BEIR folder writes both sides)")


class TokenCache:
    """A finished token cache side: ids, token lists and the ledger (read-only, lazy)."""

    def __init__(self, fs, path: str, side: str, ledger: dict, url: str):
        self.fs, self.path, self.side, self.ledger, self.url = fs, path, side, ledger, url
        self.chunk_indices = sorted(int(k) for k in ledger["chunks"])

    @property
    def fingerprint(self) -> dict:
        return self.ledger["fingerprint"]

    @property
    def token_dtype(self) -> str:
        return self.ledger["token_dtype"]

    @property
    def model(self) -> dict:
        """The model settings the ids were made with (enough to rebuild the TextTokenizer)."""
        return self.ledger.get("model", {})

    def require_tokenizer(self, tokenizer) -> None:
        """Fail unless ``tokenizer`` (a TextTokenizer) makes exactly the ids this cache holds.

        Indexing or mining from cached ids with another model's tokenizer would silently give wrong
        vectors; this names what differs instead.
        """
        want = self.fingerprint["tokenizer"]
        have = tokenizer.fingerprint()
        if want != have:
            diff = fingerprint_diff(want, have)
            raise EmbedctlError(
                f"the token cache {self.url} ({self.side}) was made with another tokenizer or settings: "
                + "; ".join(diff[:6]),
                hint="use the model settings the cache was built with, or rebuild it with `embedctl pretokenize --overwrite`",
            )

    def __len__(self) -> int:
        return int(self.ledger["num_rows"])

    def _chunk(self, kind: str, c: int, columns=None):
        """One chunk file, read once and checked against the sha256 its ledger records before it is parsed
        (a same-size corruption would otherwise give wrong tokens): ~1.6 GB/s, a small part of the work of
        the readers (bench/bench_read_checks.py). An older ledger without records is read unchecked."""
        rel = f"{kind}/{chunk_name(c)}"
        return read_checked_parquet(self.fs, join(self.path, rel), self._records.get(rel) or {}, columns,
                                    hint=REBUILD_HINT)

    @cached_property
    def _records(self) -> dict[str, dict]:
        return ledger_files(self.ledger)

    def verify(self, full: bool = True) -> list[str]:
        """Problems with the files the ledger lists: missing, another size, with ``full`` another sha256."""
        return check_records(self.fs, self.path, ledger_files(self.ledger), full=full)

    @cached_property
    def int_ids(self) -> np.ndarray:
        """uint64 ids in cache order."""
        parts = [self._chunk("ids", c, ["ID"]).column("ID").to_numpy() for c in self.chunk_indices]
        return np.concatenate(parts).astype(np.uint64) if parts else np.zeros(0, np.uint64)

    @cached_property
    def ids(self) -> list[str]:
        """Original string ids in cache order."""
        out: list[str] = []
        for c in self.chunk_indices:
            out += self._chunk("ids", c, ["STRING_ID"]).column("STRING_ID").to_pylist()
        return out

    def first_ids(self, n: int) -> list[str]:
        """The first ``n`` string ids (reads only the chunks needed)."""
        out: list[str] = []
        for c in self.chunk_indices:
            if len(out) >= n:
                break
            out += self._chunk("ids", c, ["STRING_ID"]).column("STRING_ID").to_pylist()
        return out[:n]

    def iter_chunks(self) -> Iterator[tuple[np.ndarray, list[np.ndarray]]]:
        """(uint64 ids, token id arrays) per chunk, in chunk order."""
        for c in self.chunk_indices:
            t = self._chunk("chunks", c)
            yield t.column("ID").to_numpy().astype(np.uint64), token_lists_of(t.column("TOKEN_ID_LIST"))

    def token_lists(self) -> Iterator[np.ndarray]:
        """Token id arrays (special tokens, prefix and markers included, no padding) in cache order."""
        for _, lists in self.iter_chunks():
            yield from lists

    def lengths(self) -> np.ndarray:
        """Token count of every row, in cache order."""
        out = [np.diff(self._chunk("chunks", c).column("TOKEN_ID_LIST").combine_chunks().offsets.to_numpy())
               for c in self.chunk_indices]
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    def load(self) -> tuple[list[str], list[np.ndarray]]:
        """(string ids, token arrays) for the whole side, in memory."""
        return self.ids, list(self.token_lists())


def open_token_cache(url: str, side: str | None = None) -> TokenCache:
    """Open a finished token cache side (``url`` = cache root or a side folder; local or fsspec URL).

    An unfinished cache (or shards that disagree) raises InputError saying how far it got.
    """
    fs, path, side = resolve_side_path(url, side)
    ledger = read_json_file(fs, join(path, LEDGER)) if fs.exists(join(path, LEDGER)) else None
    if ledger is None:
        shards = list(shard_ledgers(fs, path).values())
        ledger = merge_ledgers(shards)
        if ledger is None and not shards:
            raise InputError(f"no `{side}` token cache here (no {join(path, LEDGER)})", path=url,
                             hint=f"write it with `embedctl pretokenize --input SRC --output {url} --side {side}` "
                                  "(a BEIR folder as input writes both sides)")
        if ledger is None:
            done = sum(1 for s in shards if s.get("finished"))
            total = shards[0]["num_shards"] if shards else "?"
            raise InputError(f"the `{side}` token cache is not finished ({done} of {total} shards finished)",
                             path=url, hint="rerun the same `embedctl pretokenize` command(s): they resume where they stopped")
    if ledger.get("format") != TOKEN_CACHE_FORMAT:
        raise InputError(f"not an embedctl token cache (format {ledger.get('format')!r})", path=url)
    cache = TokenCache(fs, path, side, ledger, url)
    problems = cache.verify(full=False)  # cheap: presence and size of every chunk, from one listing
    if problems:
        raise InputError(f"the `{side}` token cache is damaged: " + "; ".join(problems[:5])
                         + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""), path=url, hint=REBUILD_HINT)
    return cache
