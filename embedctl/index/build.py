"""`embedctl index` driver: read the collection, keep its string ids, encode, build dense or PLAID.

Steps (each failing before the next, more expensive one), in the build folder ``.<name>.building`` whose
build ledger (embedctl.index.ledger) records every finished stage:
1. read the collection into ``docs.parquet`` (pid order; duplicate ids and empty collections fail here),
   hashing each document's encoder input on the way (the fingerprint and PLAID's duplicate check);
2. load the encoder; pick the kind (``auto``: plaid for a ColBERT model, dense for a bi-encoder);
3. build: dense -> faiss over one vector per document; plaid -> :class:`PlaidIndexer` into ``plaid/``;
4. write run info and ``embedctl_index.json`` (last), drop the ledger, rename the folder to ``<name>``,
   update LATEST.
An interrupted build leaves only ``.<name>.building``; rerunning the same command resumes there (another
request starts it afresh; another backend is refused unless --overwrite).

Example::

    loaded = load_config(None, ["index.collection=corpus.jsonl"])
    summary = build_index(loaded)    # {"index": "indexes/corpus", "kind": "dense", "num_docs": 5183, ...}
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.data.pretokenize import input_fingerprint
from embedctl.errors import ConfigError, EmbedctlError
from embedctl.index import meta as M
from embedctl.index.collection import open_collection
from embedctl.index.dense import DENSE_FILE
from embedctl.index.docs import DocTable, collection_sha256
from embedctl.index.generations import IDS_FILE, base_file_records
from embedctl.index.idtable import id_table
from embedctl.index.ledger import (
    DENSE_BACKEND,
    DIGESTS_FILE,
    BuildLedger,
    finish_build,
    open_build,
    request_of,
)
from embedctl.index.plaid_indexer import PlaidIndexer, PlaidSettings, plaid_backend
from embedctl.index.ranked import dense_build, follow_build, prepared_message
from embedctl.models.encoder import load_encoder
from embedctl.runinfo import write_run_info
from embedctl.util.io import load_npy, save_npy
from embedctl.util.lock import WriterLock
from embedctl.util.progress import Progress
from embedctl.util.ranks import Ranks

_SUFFIXES = (".gz", ".zst", ".bz2", ".xz", ".jsonl", ".json", ".tsv", ".txt", ".parquet", ".csv")


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


def build_index(loaded: Any, ranks: Ranks | None = None) -> dict[str, Any]:
    """Build the index described by ``loaded.cfg.index`` (+ ``model``); returns a summary dict.

    Holds the index's writer lock (a second writer waits ``index.lock_wait_s`` or is refused). A refused run
    leaves nothing behind (not even an ``index.root`` it created). With several ``ranks``
    (embedctl.util.ranks) rank 0 runs this driver and the others encode chunks (embedctl.index.ranked)."""
    cfg = loaded.cfg
    icfg = cfg.index
    if not icfg.collection:
        raise ConfigError(["`index.collection`: no collection given; pass --collection FILE "
                           "(ColBERT TSV, BEIR corpus.jsonl, parquet or a token cache folder)"])
    ranks = ranks or Ranks.single()
    if not ranks.is_lead:  # rank 0 holds the lock and the ledger; this rank encodes the chunks it claims
        return follow_build(loaded, ranks)
    name = icfg.name or default_name(icfg.collection)
    root = Path(icfg.root)
    created_root = not root.exists()
    try:
        with WriterLock(root / name, what="index", wait_s=float(icfg.lock_wait_s)):
            summary = _build_locked(loaded, root, name, ranks)
            ranks.publish("done")
            return summary
    finally:
        if created_root and root.is_dir() and not any(root.iterdir()):
            root.rmdir()


def _build_locked(loaded: Any, root: Path, name: str, ranks: Ranks) -> dict[str, Any]:
    cfg = loaded.cfg
    icfg = cfg.index
    final = root / name
    _check_target(final, icfg.overwrite)
    # an index folder that is a symlink is rebuilt where it points (the link stays, LATEST names it)
    target = final.resolve() if final.is_symlink() else final
    folder = M.building_dir(target.parent, target.name)
    # the collection's size and mtime (or ETag): an edited collection is never resumed from a stale copy
    request = request_of(icfg, dataclasses.asdict(cfg.model), input_fingerprint(icfg.collection))
    started = time.perf_counter()
    ledger, state = open_build(folder, request)
    if state == "complete":  # an earlier run wrote everything and was stopped before the rename
        ranks.publish("prepared", prepared_message(folder, final, "complete"))
        finish_build(folder, target, None)
        M.write_latest(root, name)
        return _summary(final, M.read_metadata(final), cfg, started)
    try:  # failures before the build stage leave nothing behind (there is nothing worth resuming)
        collection = open_collection(icfg.collection, icfg.use_title)
        if not collection.needs_encoder_for_docs:  # check every row before loading the model
            digests = _documents(collection, folder, ledger, None)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # our own progress bar follows
        encoder = load_encoder(cfg.model)
        kind = _resolve_kind(icfg.kind, encoder.kind)
        if collection.needs_encoder_for_docs:
            digests = _documents(collection, folder, ledger, encoder)
        model = M.model_record(encoder, cfg.model.name_or_path)
        num_docs = int(ledger.documents["num_docs"])
        settings = PlaidSettings.resolve(icfg, encoder.dim, num_docs) if kind == "plaid" else None
        backend = plaid_backend(icfg) if kind == "plaid" else None
    except BaseException:
        if state == "fresh":
            shutil.rmtree(folder, ignore_errors=True)
        raise
    prepare_s = time.perf_counter() - started
    ledger.use_model(model)
    ledger.use_backend(backend.describe() if backend is not None else DENSE_BACKEND, bool(icfg.overwrite))
    ranks.publish("prepared", prepared_message(folder, final, "complete" if kind == "dense" and ledger.dense else kind))
    started = time.perf_counter()
    with Progress(num_docs, "encoding", unit="docs") as bar:
        if kind == "dense":
            section, timings, run = _build_dense(encoder, collection, folder, icfg, ledger, bar, ranks)
        else:
            indexer = PlaidIndexer(encoder, collection.plaid_items(folder), digests, folder, ledger, settings,
                                   backend, bar, ranks)
            section = indexer.run()
            timings, run = indexer.timings_record(), indexer.run_record()
    build_s = time.perf_counter() - started

    write_run_info(folder, loaded, "index")
    _write_id_table(folder)
    metadata = M.new_metadata(kind, num_docs, icfg.collection, model, request=ledger.request, backend=ledger.backend,
                              **{kind: section}, build=run,
                              timings={"prepare_s": round(prepare_s, 3), "build_s": round(build_s, 3), **timings})
    metadata["files"] = base_file_records(folder, metadata)  # size + sha256 of every file: `index info --verify`
    finish_build(folder, target, metadata)
    M.write_latest(root, name)
    return _summary(final, metadata, cfg, started - prepare_s)


def _summary(final: Path, metadata: dict[str, Any], cfg: Any, started: float) -> dict[str, Any]:
    return {"index": str(final), "kind": metadata["kind"], "num_docs": metadata["num_docs"],
            "model": cfg.model.name_or_path, "seconds": round(time.perf_counter() - started, 2)}


def _write_id_table(folder: Path) -> None:
    """ids.npy: the id table of the base segment (embedctl.index.idtable), so deletes and updates find a
    document without reading docs.parquet."""
    table = DocTable(folder / M.DOCS_FILE)
    save_npy(folder / IDS_FILE, id_table(table.ids_of(np.arange(len(table)))))


def _check_target(final: Path, overwrite: bool) -> None:
    if final.exists() and not overwrite:
        what = "an index" if (final / M.META_FILE).is_file() else "a folder that is not an index"
        raise EmbedctlError(f"{final} already holds {what}; nothing was changed",
                            hint="pass --overwrite (index.overwrite=true) to replace it, or --name to pick another name")


def _documents(collection: Any, folder: Path, ledger: BuildLedger, encoder: Any) -> np.ndarray:
    """docs.parquet and the documents' digests (kept when resuming); returns the digests (uint8 [N, 16])."""
    docs_path, digests_path = folder / M.DOCS_FILE, folder / DIGESTS_FILE
    if ledger.documents is not None and docs_path.is_file() and digests_path.is_file():
        if encoder is not None and hasattr(collection, "check_tokenizer"):
            collection.check_tokenizer(encoder)  # a token cache: the model's tokenization, every run
        return np.asarray(load_npy(digests_path, mmap=False, what="document digests"))
    digests = collection.write_docs(folder, encoder)
    save_npy(digests_path, digests)
    ledger.record_documents(len(digests), collection_sha256(digests))
    return digests


def _resolve_kind(requested: str, model_kind: str) -> str:
    natural = "plaid" if model_kind == "colbert" else "dense"
    kind = natural if requested == "auto" else requested
    if kind != natural:
        raise ConfigError([f"`index.kind`: a {kind} index needs a "
                           f"{'ColBERT' if kind == 'plaid' else 'bi-encoder'} model, but model.kind is {model_kind!r}; "
                           f"use index.kind={natural} or a matching model.kind"])
    return kind


def _build_dense(encoder: Any, collection: Any, folder: Path, icfg: Any, ledger: BuildLedger, bar: Progress,
                 ranks: Ranks) -> tuple[dict[str, Any], dict[str, float], dict[str, Any]]:
    """(dense section, timings, run facts); a dense index recorded in the ledger is kept."""
    if ledger.dense is not None and (folder / DENSE_FILE).is_file():
        bar.advance(int(ledger.documents["num_docs"]))
        return ledger.dense, {}, {"encoded_docs": 0, "resumed": True}
    started = time.perf_counter()
    builder, encoded = dense_build(encoder, collection, folder, icfg, bar, ranks)  # chunks of 512, any rank
    encode_s = time.perf_counter() - started
    started = time.perf_counter()
    params = builder.write(folder / DENSE_FILE)
    section = {**params, "encode_s": round(encode_s, 3), "faiss_s": round(time.perf_counter() - started, 3)}
    ledger.record_dense(section)
    return section, {}, {"encoded_docs": encoded, "resumed": False}
