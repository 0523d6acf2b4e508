"""`embedctl index` driver: read the collection, keep its string ids, encode, build dense or PLAID.

Steps (each failing before the next, more expensive one):
1. read the collection into ``docs.parquet`` (pid order; duplicate ids and empty collections fail here);
2. load the encoder; pick the kind (``auto``: plaid for a ColBERT model, dense for a bi-encoder);
3. build: dense -> faiss over one vector per document; plaid -> ``build_plaid_index`` into ``plaid/``;
4. write run info and ``embedctl_index.json`` (last), rename ``.<name>.building`` to ``<name>``, update LATEST.
An interrupted build leaves only ``.<name>.building``; rerunning the same command resumes there.

Example::

    loaded = load_config(None, ["index.collection=corpus.jsonl"])
    summary = build_index(loaded)    # {"index": "indexes/corpus", "kind": "dense", "num_docs": 5183, ...}
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import Any

from embedctl.errors import ConfigError, EmbedctlError
from embedctl.index import meta as M
from embedctl.index.collection import open_collection

_SUFFIXES = (".gz", ".zst", ".bz2", ".xz", ".jsonl", ".json", ".tsv", ".txt", ".parquet", ".csv")
ENCODE_CHUNK = 512  # documents per encode call: bounded memory, a progress update every chunk


def default_name(collection: str) -> str:
    """Index name from the collection: ``data/lotte.tsv.gz`` -> ``lotte``; a folder -> its name."""
    name = collection.rstrip("/").rsplit("/", 1)[-1]
    changed = True
    while changed:
        changed = False
        for suffix in _SUFFIXES:
            if name.lower().endswith(suffix) and len(name) > len(suffix):
                name, changed = name[: -len(suffix)], True
    return name or "index"


def build_index(loaded: Any) -> dict[str, Any]:
    """Build the index described by ``loaded.cfg.index`` (+ ``model``); returns a summary dict."""
    cfg = loaded.cfg
    icfg = cfg.index
    if not icfg.collection:
        raise ConfigError(["`index.collection`: no collection given; pass --collection FILE "
                           "(ColBERT TSV, BEIR corpus.jsonl, parquet or a token cache folder)"])
    name = icfg.name or default_name(icfg.collection)
    root = Path(icfg.root)
    final, work = root / name, M.building_dir(root, name)
    _check_target(final, icfg.overwrite)
    plan = _plan(cfg)
    resumed = _prepare_work_dir(work, plan)
    started = time.perf_counter()
    try:  # failures before the build stage leave nothing behind (there is nothing worth resuming)
        collection = open_collection(icfg.collection, icfg.use_title)
        if not collection.needs_encoder_for_docs:  # check every row before loading the model
            num_docs = _docs(collection, work, None)
        from transformers.utils import logging as hf_logging

        from embedctl.models.encoder import load_encoder

        hf_logging.disable_progress_bar()  # our own progress bar follows
        encoder = load_encoder(cfg.model)
        kind = _resolve_kind(icfg.kind, encoder.kind)
        if collection.needs_encoder_for_docs:
            num_docs = _docs(collection, work, encoder)
        prepare_s = time.perf_counter() - started
        model = M.model_record(encoder, cfg.model.name_or_path)
    except BaseException:
        if not resumed:
            shutil.rmtree(work, ignore_errors=True)
        raise
    started = time.perf_counter()
    if kind == "dense":
        extra = {"dense": _build_dense(encoder, collection, work, icfg, num_docs)}
    else:
        extra = {"plaid": _build_plaid(encoder, collection, work, icfg)}
    build_s = time.perf_counter() - started

    from embedctl.runinfo import write_run_info
    from embedctl.util import atomic

    write_run_info(work, loaded, "index")
    metadata = M.new_metadata(kind, num_docs, icfg.collection, model, **extra,
                              timings={"prepare_s": round(prepare_s, 3), "build_s": round(build_s, 3)})
    atomic.write_json(work / M.META_FILE, metadata)
    (work / "build.json").unlink(missing_ok=True)
    for stray in work.rglob(".*.tmp"):  # temp files of writes killed mid-way in an earlier, resumed run
        stray.unlink(missing_ok=True)
    _swap_into_place(work, final)
    M.write_latest(root, name)
    return {"index": str(final), "kind": kind, "num_docs": num_docs, "model": cfg.model.name_or_path,
            "seconds": round(prepare_s + build_s, 2)}


def _check_target(final: Path, overwrite: bool) -> None:
    if final.exists() and not overwrite:
        what = "an index" if (final / M.META_FILE).is_file() else "a folder that is not an index"
        raise EmbedctlError(f"{final} already holds {what}; nothing was changed",
                            hint="pass --overwrite (index.overwrite=true) to replace it, or --name to pick another name")


def _plan(cfg: Any) -> dict[str, Any]:
    """What must match for a rerun to resume an interrupted build (everything that shapes the index)."""
    icfg = dataclasses.asdict(cfg.index)
    for key in ("name", "root", "overwrite"):
        icfg.pop(key, None)
    from embedctl.data.pretokenize import input_fingerprint

    # the collection's size and mtime (or ETag): an edited collection is never resumed from a stale copy
    return {"index": icfg, "model": dataclasses.asdict(cfg.model), "collection": input_fingerprint(cfg.index.collection)}


def _prepare_work_dir(work: Path, plan: dict[str, Any]) -> bool:
    """Create the build folder, or keep it when it holds an interrupted build of the same plan (True)."""
    plan_file = work / "build.json"
    if work.is_dir():
        try:
            same = json.loads(plan_file.read_text()) == json.loads(json.dumps(plan))
        except (OSError, ValueError):
            same = False
        if same:
            return True  # resume: keep docs.parquet and the builder's finished parts
        shutil.rmtree(work)
    work.mkdir(parents=True)
    from embedctl.util import atomic

    atomic.write_json(plan_file, plan)
    return False


def _docs(collection: Any, work: Path, encoder: Any) -> int:
    """docs.parquet from the collection (kept when resuming). Returns the number of documents."""
    docs_path = work / M.DOCS_FILE
    if docs_path.is_file():
        import pyarrow.parquet as pq

        return pq.ParquetFile(docs_path).metadata.num_rows
    return collection.write_docs(work, encoder)


def _resolve_kind(requested: str, model_kind: str) -> str:
    natural = "plaid" if model_kind == "colbert" else "dense"
    kind = natural if requested == "auto" else requested
    if kind != natural:
        raise ConfigError([f"`index.kind`: a {kind} index needs a "
                           f"{'ColBERT' if kind == 'plaid' else 'bi-encoder'} model, but model.kind is {model_kind!r}; "
                           f"use index.kind={natural} or a matching model.kind"])
    return kind


def _build_dense(encoder: Any, collection: Any, work: Path, icfg: Any, num_docs: int) -> dict[str, Any]:
    from embedctl.index.dense import DENSE_FILE, DenseBuilder

    builder = DenseBuilder(encoder.dim, icfg.dense_type, nlist=icfg.ivf_nlist, hnsw_m=icfg.hnsw_m,
                           hnsw_ef_construction=icfg.hnsw_ef_construction, seed=icfg.seed)
    started = time.perf_counter()
    with _progress(num_docs, "encoding") as advance:
        for items in collection.dense_batches(work, ENCODE_CHUNK):
            builder.add(encoder.encode_documents(items, batch_size=icfg.batch_size))
            advance(len(items))
    encode_s = time.perf_counter() - started
    started = time.perf_counter()
    params = builder.write(work / DENSE_FILE)
    return {**params, "encode_s": round(encode_s, 3), "faiss_s": round(time.perf_counter() - started, 3)}


def _build_plaid(encoder: Any, collection: Any, work: Path, icfg: Any) -> dict[str, Any]:
    from embedctl.index.plaid import build_plaid_index

    # the driver handles --overwrite at the folder level; inside the build folder PLAID must resume
    plaid_cfg = dataclasses.replace(icfg, overwrite=False)
    summary = dict(build_plaid_index(encoder, collection.plaid_items(work), work / "plaid", plaid_cfg) or {})
    summary.pop("index_dir", None)  # the build folder is renamed: keep no absolute paths
    return summary


def _swap_into_place(work: Path, final: Path) -> None:
    """Rename the finished build onto its name; an old index is removed only after the new one is in place."""
    old = final.with_name(f".{final.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        final.rename(old)
    work.rename(final)
    if old.exists():
        shutil.rmtree(old)


class _progress:
    """Rich progress bar on stderr with docs/s; ``with _progress(total, label) as advance: advance(n)``."""

    def __init__(self, total: int, label: str):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[rate]} docs/s"), TimeRemainingColumn(),
                                 console=Console(stderr=True), transient=True)
        self.total = total
        self.started = time.perf_counter()

    def __enter__(self):
        self.progress.__enter__()
        task = self.progress.add_task("", total=self.total, rate="-")

        def advance(n: int) -> None:
            done = self.progress.tasks[0].completed + n
            rate = done / max(time.perf_counter() - self.started, 1e-9)
            self.progress.update(task, advance=n, rate=f"{rate:.1f}")

        return advance

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)
