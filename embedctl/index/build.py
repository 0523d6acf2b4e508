"""`embedctl index` driver: read the collection, keep its string ids, encode, build dense or PLAID.

Steps (each failing before the next, more expensive one), in the build folder ``.<name>.building`` whose
build ledger (embedctl.index.ledger) records every finished stage:
1. read the collection into ``docs.parquet`` (pid order; duplicate ids and empty collections fail here),
   hashing each document's encoder input on the way (the fingerprint and PLAID's duplicate check);
2. load the encoder; pick the kind (embedctl.index.kinds; ``auto``: the kind that indexes the model);
3. build: the kind encodes and writes its base segment (dense: faiss over one vector per document;
   plaid: :class:`PlaidIndexer` into ``plaid/``);
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
from embedctl.index.docs import DocTable, collection_sha256
from embedctl.index.files import DIGESTS_FILE, IDS_FILE
from embedctl.index.generations import base_file_records
from embedctl.index.idtable import id_table
from embedctl.index.kinds import BuildJob, kind_for
from embedctl.index.ledger import BuildLedger, finish_build, open_build, request_of
from embedctl.index.ranked import follow_build, prepared_message
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
        kind = kind_for(icfg.kind, encoder.kind)
        if collection.needs_encoder_for_docs:
            digests = _documents(collection, folder, ledger, encoder)
        model = M.model_record(encoder, cfg.model.name_or_path)
        num_docs = int(ledger.documents["num_docs"])
        plan = kind.plan(icfg, encoder, num_docs)
    except BaseException:
        if state == "fresh":
            shutil.rmtree(folder, ignore_errors=True)
        raise
    prepare_s = time.perf_counter() - started
    ledger.use_model(model)
    ledger.use_backend(plan.backend_record, bool(icfg.overwrite))
    ranks.publish("prepared", prepared_message(folder, final, "complete" if kind.already_built(ledger, folder)
                                               else kind.name))
    started = time.perf_counter()
    with Progress(num_docs, "encoding", unit="docs") as bar:
        job = BuildJob(encoder, collection, folder, icfg, ledger, digests, bar, ranks)
        section, timings, run = kind.build(job, plan)
    build_s = time.perf_counter() - started

    write_run_info(folder, loaded, "index")
    _write_id_table(folder)
    metadata = M.new_metadata(kind.name, num_docs, icfg.collection, model, request=ledger.request,
                              backend=ledger.backend, **{kind.name: section}, build=run,
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
