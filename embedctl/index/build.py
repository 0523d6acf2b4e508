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

import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.data.pretokenize import input_fingerprint
from embedctl.errors import ConfigError, EmbedctlError, NotImplementedYet, note_partial_output
from embedctl.index import meta as M
from embedctl.index.collection import MemoryCollection, open_collection
from embedctl.index.docs import DocTable, collection_sha256
from embedctl.index.files import DIGESTS_FILE, IDS_FILE, PLAID_DIR
from embedctl.index.generations import base_file_records
from embedctl.index.idtable import id_table
from embedctl.index.kinds import BuildJob, index_kind, kind_for
from embedctl.index.kinds.base import with_encoder
from embedctl.index.ledger import BuildLedger, finish_build, normalized, open_build, request_of
from embedctl.index.lexical import segment_texts, write_lexical
from embedctl.index.passages import PassageSpec
from embedctl.index.ranked import follow_build, prepared_message
from embedctl.models.encoder import load_encoder
from embedctl.models.hub import BUNDLED_ALIASES, resolve_model_path
from embedctl.runinfo import write_run_info
from embedctl.util.fs import folder_name_problem, refuse_output_in_inputs
from embedctl.util.io import load_npy, save_npy
from embedctl.util.lock import WriterLock
from embedctl.util.progress import Progress
from embedctl.util.ranks import Ranks

_SUFFIXES = (".gz", ".zst", ".bz2", ".xz", ".jsonl", ".json", ".tsv", ".txt", ".parquet", ".csv")


def default_name(collection: str) -> str:
    """Index name from the collection: ``data/lotte.tsv.gz`` -> ``lotte``; a folder -> its name."""
    name = collection.rstrip("/").rsplit("/", 1)[-1]
    if name in ("", ".", "..") and "://" not in collection:  # `--collection ..`: the folder's own name
        name = Path(os.path.abspath(collection)).name
    changed = True
    while changed:
        changed = False
        for suffix in _SUFFIXES:
            if name.lower().endswith(suffix) and len(name) > len(suffix):
                name, changed = name[: -len(suffix)], True
    name = name.lstrip(".")  # `.hidden.tsv`: a dot-name is embedctl's own (`.<name>.building`)
    return name if name and folder_name_problem(name) is None else "index"


@dataclass
class BuildInputs:
    """What one build reads: from a loaded config (:func:`inputs_from_config`, what ``embedctl index`` and
    ``embedctl.Index.build`` build), or from a caller holding an encoder and documents in memory
    (:func:`embedctl.index.plaid_indexer.build_plaid_index`: tests and the engine benches). Either way the
    one driver below writes the same folder: documents, id table, the kind's arrays, metadata."""

    final: Path
    """The index folder (``index.root``/``index.name``)."""
    icfg: Any
    """The index settings (IndexConfig)."""
    request: dict[str, Any]
    """What shapes the index: the build ledger's request (embedctl.index.ledger.request_of)."""
    open_collection: Callable[[], Any]
    """Opens the documents (TextCollection, TokenCacheCollection or MemoryCollection of embedctl.index.collection)."""
    load_encoder: Callable[[], Any]
    model_record: Callable[[Any], dict[str, Any]]
    """What the metadata records of the loaded encoder (search reloads it from this)."""
    model_name: str | None = None
    collection_name: str | None = None
    engine: dict[str, Any] = field(default_factory=dict)
    """PLAID engine overrides (tests, benches): ``sample_docs``, ``kmeans_points_per_centroid``, ``device``."""
    loaded: Any = None
    """The loaded config: its run info is saved beside the index."""
    keep_complete: bool = False
    """An index already built from the same request is kept (and reported ``already_complete``), not refused."""
    progress: bool = True
    kind: str | None = None
    """The index kind regardless of the encoder's kind (build_plaid_index: encoders without a model kind)."""


def inputs_from_config(loaded: Any) -> BuildInputs:
    """The build ``loaded.cfg.index`` (+ ``model``) describes."""
    cfg = loaded.cfg
    icfg = cfg.index
    if not icfg.collection:
        raise ConfigError(["`index.collection`: no collection given; pass --collection FILE "
                           "(ColBERT TSV, BEIR corpus.jsonl, parquet or a token cache folder)"])

    def encoder() -> Any:
        return load_encoder(cfg.model)  # `auto` is resolved again once the build's size is known

    # the collection's size and mtime (or ETag): an edited collection is never resumed from a stale copy
    request = request_of(icfg, M.model_settings(cfg.model), input_fingerprint(icfg.collection))
    final = Path(icfg.root) / (icfg.name or default_name(icfg.collection))
    model_dir = Path(cfg.model.name_or_path)  # an index is never written into what it reads
    refuse_output_in_inputs(str(final), "index.root/index.name",
                            {"--collection": icfg.collection, "--model": str(model_dir) if model_dir.is_dir() else None})
    return BuildInputs(final=final, icfg=icfg,
                       request=request,
                       open_collection=lambda: open_collection(icfg.collection, icfg.use_title,
                                                               PassageSpec.of_config(icfg)),
                       load_encoder=encoder, model_record=lambda enc: M.model_record(enc, cfg.model.name_or_path),
                       model_name=cfg.model.name_or_path, collection_name=icfg.collection, loaded=loaded)


def build_index(loaded: Any, ranks: Ranks | None = None) -> dict[str, Any]:
    """Build the index described by ``loaded.cfg.index`` (+ ``model``); returns a summary dict."""
    return run_build(inputs_from_config(loaded), ranks)


def run_build(inputs: BuildInputs, ranks: Ranks | None = None) -> dict[str, Any]:
    """The one build driver: returns ``{index, kind, num_docs, model, seconds, metadata, already_complete}``.

    Holds the index's writer lock (a second writer waits ``index.lock_wait_s`` or is refused). A refused run
    leaves nothing behind (not even an ``index.root`` it created). With several ``ranks``
    (embedctl.util.ranks) rank 0 runs this driver and the others encode chunks (embedctl.index.ranked)."""
    ranks = ranks or Ranks.single()
    if not ranks.is_lead:  # rank 0 holds the lock and the ledger; this rank encodes the chunks it claims
        return follow_build(inputs, ranks)
    root = inputs.final.parent
    created_root = not root.exists()
    try:
        with WriterLock(inputs.final, what="index", wait_s=float(getattr(inputs.icfg, "lock_wait_s", 0.0))):
            summary = _build_locked(inputs, ranks)
            ranks.publish("done")
            return summary
    finally:
        if created_root and root.is_dir() and not any(root.iterdir()):
            root.rmdir()


def _build_locked(inputs: BuildInputs, ranks: Ranks) -> dict[str, Any]:
    icfg, final, request = inputs.icfg, inputs.final, inputs.request
    overwrite = bool(getattr(icfg, "overwrite", False))
    started = time.perf_counter()
    kept = _check_target(final, overwrite, request if inputs.keep_complete else None)
    if kept is not None:
        ranks.publish("prepared", prepared_message(final, final, "complete"))
        return _summary(inputs, kept, started, already_complete=True)
    # an index folder that is a symlink is rebuilt where it points (the link stays, LATEST names it)
    target = final.resolve() if final.is_symlink() else final
    folder = M.building_dir(target.parent, target.name)
    ledger, state = open_build(folder, request)
    if state == "complete":  # an earlier run wrote everything and was stopped before the rename
        ranks.publish("prepared", prepared_message(folder, final, "complete"))
        finish_build(folder, target, None)
        M.write_latest(final.parent, final.name)
        return _summary(inputs, M.read_metadata(final), started)
    try:  # failures before the build stage leave nothing behind (there is nothing worth resuming)
        collection = inputs.open_collection()
        if not collection.needs_encoder_for_docs:  # check every row before loading the model
            digests = _documents(collection, folder, ledger, None)
        encoder = inputs.load_encoder()
        kind = index_kind(inputs.kind) if inputs.kind else kind_for(icfg.kind, encoder.kind)
        if collection.needs_encoder_for_docs:
            digests = _documents(collection, folder, ledger, encoder)
        model = inputs.model_record(encoder)
        num_docs = int(ledger.documents["num_docs"])
        if getattr(encoder, "backend_asked", None) == "auto":  # for this many documents (encode_backends.AUTO)
            encoder.use_backend("auto", texts=num_docs)
        ledger.keep_encode_backend(encoder)
        icfg = ledger.keep_assign_precision(icfg)
        plan = kind.plan(icfg, encoder, num_docs, inputs.engine)
    except BaseException:
        if state == "fresh":
            shutil.rmtree(folder, ignore_errors=True)
        raise
    prepare_s = time.perf_counter() - started
    ledger.use_model(model)
    ledger.use_backend(backend_record(plan, encoder), overwrite)
    ranks.publish("prepared", prepared_message(folder, final, "complete" if kind.already_built(ledger, folder)
                                               else kind.name))
    build_started = time.perf_counter()
    try:  # from here on the build folder is worth resuming: a failure keeps it and says where it is
        with Progress(num_docs, "encoding", unit="docs", enabled=inputs.progress) as bar:
            job = BuildJob(encoder, collection, folder, icfg, ledger, digests, bar, ranks, inputs.engine)
            section, timings, run = kind.build(job, plan)
        build_s = time.perf_counter() - build_started

        if inputs.loaded is not None:
            write_run_info(folder, inputs.loaded, "index")
        _write_id_table(folder)
        lexical_side = None
        if not kind.encodes or (getattr(icfg, "lexical", False) and getattr(collection, "has_text", False)):
            lexical_started = time.perf_counter()  # BM25 over the encoder's texts (embedctl.index.lexical)
            lexical_side, _ = write_lexical(folder, "", segment_texts(folder / M.DOCS_FILE))
            timings = {**timings, "lexical_s": round(time.perf_counter() - lexical_started, 3)}
        metadata = M.new_metadata(kind.name, num_docs, inputs.collection_name, model, request=ledger.request,
                                  backend=ledger.backend, **{kind.name: section}, build=run,
                                  timings={"prepare_s": round(prepare_s, 3), "build_s": round(build_s, 3), **timings})
        if lexical_side is not None:
            metadata["lexical_side"] = lexical_side
        spec = PassageSpec.of_config(icfg)
        if spec is not None:  # rows are passages (embedctl.index.passages): what they were cut to, for `index info`
            metadata["passages"] = {"tokens": spec.size(encoder.tokenizer.text_budget("document")),
                                    "overlap": spec.overlap}
        metadata["files"] = base_file_records(folder, metadata)  # size + sha256 of every file: `index info --verify`
        finish_build(folder, target, metadata)
    except BaseException as err:
        note_partial_output(err, folder)
        raise
    M.write_latest(final.parent, final.name)
    return _summary(inputs, metadata, started)


def backend_record(plan: Any, encoder: Any) -> dict[str, str]:
    """The build's backend record: the kind's arithmetic (``name``, ``precision``) and, for encoders that
    have one, the encode backend (``encoder``: embedctl.models.encode_backends)."""
    return with_encoder(plan.backend_record, encoder)


def _summary(inputs: BuildInputs, metadata: dict[str, Any], started: float, already_complete: bool = False
             ) -> dict[str, Any]:
    return {"index": str(inputs.final), "kind": metadata["kind"], "num_docs": metadata["num_docs"],
            "model": inputs.model_name, "seconds": round(time.perf_counter() - started, 2), "metadata": metadata,
            "already_complete": already_complete}


def _write_id_table(folder: Path) -> None:
    """ids.npy: the id table of the base segment (embedctl.index.idtable), so deletes and updates find a
    document without reading docs.parquet."""
    table = DocTable(folder / M.DOCS_FILE)
    save_npy(folder / IDS_FILE, id_table(table.ids_of(np.arange(len(table)))))


def _check_target(final: Path, overwrite: bool, keep_request: dict[str, Any] | None) -> dict[str, Any] | None:
    """Refuse to build over an existing folder unless ``overwrite``; with ``keep_request``, an index built
    from that same request is kept: its metadata is returned (None: build)."""
    if not final.exists():
        return None
    is_index = (final / M.META_FILE).is_file()
    if overwrite:
        if is_index or not final.is_dir() or not any(final.iterdir()):
            return None if final.is_dir() else _refuse_not_a_folder(final)
        raise EmbedctlError(f"{final} is not an index embedctl wrote (no {M.META_FILE} in it): --overwrite replaces "
                            "only an index, never another folder; nothing was changed",
                            hint="choose another --name (or --root), or remove that folder yourself if it is "
                                 "not needed")
    if keep_request is not None and is_index:
        meta = M.read_metadata(final)
        if meta.get("request") == normalized(keep_request):
            return meta
        raise EmbedctlError(f"{final} holds an index built from another collection or settings",
                            hint="set index.overwrite=true to replace it, or choose another index.name")
    what = "an index" if is_index else "a folder that is not an index"
    raise EmbedctlError(f"{final} already holds {what}; nothing was changed",
                        hint="pass --overwrite (index.overwrite=true) to replace it, or --name to pick another name")


def _refuse_not_a_folder(final: Path) -> None:
    raise EmbedctlError(f"{final} is a file, not an index folder; nothing was changed",
                        hint="choose another --name (or --root)", exit_code=2)


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


def build_plaid_index(encoder: Any, docs: Sequence[str] | Sequence[Sequence[int]] | Iterable, out_dir: str | Path,
                      index_cfg: Any, *, progress: bool = True, sample_docs: int | None = None,
                      device: str | None = None, kmeans_points_per_centroid: int | None = None,
                      ranks: Ranks | None = None) -> dict[str, Any]:
    """Encode ``docs`` (texts or token-id lists; ids ``"0"`` .. ``"N-1"`` in order) with ``encoder`` and build a
    PLAID index at ``out_dir`` through the one driver (:func:`run_build`): the folder `embedctl index` writes
    (documents, id table, ``plaid/``, metadata), so it can be searched, added to and deleted from.

    For tests and the engine benches, whose encoders need no model folder: ``encoder`` has ``dim`` and
    ``encode_documents(items, batch_size=...) -> (vectors [sum(doclens), dim], doclens [n])``. ``index_cfg``:
    an IndexConfig. ``sample_docs`` overrides the k-means sample size, ``kmeans_points_per_centroid`` the
    key of that name, ``device`` the backend's device. A complete index with the same request is kept
    (``already_complete``); another one is refused unless ``index_cfg.overwrite``. Returns the PLAID figures
    (sizes, timings, resumed chunks). ``ranks``: every rank calls this with the same arguments.

    >>> build_plaid_index(enc, ["a text", "another"], "indexes/x", IndexConfig(nbits=2))["num_docs"]  # doctest: +SKIP
    2
    """
    started = time.perf_counter()
    if PassageSpec.of_config(index_cfg) is not None:
        raise NotImplementedYet("build_plaid_index indexes its documents as given: index.passages is not "
                                "supported there", hint="build with `embedctl index` / embedctl.Index.build, "
                                "or set index.passages=false")
    collection = MemoryCollection(docs)
    points = kmeans_points_per_centroid or getattr(index_cfg, "kmeans_points_per_centroid", None)
    request = request_of(index_cfg, model_identity(encoder), collection.fingerprint(),
                         engine={"sample_docs": sample_docs, "kmeans_points_per_centroid": points})
    inputs = BuildInputs(final=Path(out_dir), icfg=index_cfg, request=request, open_collection=lambda: collection,
                         load_encoder=lambda: encoder, model_record=model_identity, keep_complete=True,
                         progress=progress, kind="plaid",
                         engine={"sample_docs": sample_docs, "kmeans_points_per_centroid": kmeans_points_per_centroid,
                                 "device": device})
    out = run_build(inputs, ranks)
    if "metadata" not in out:  # a rank other than 0
        return out
    return plaid_summary(inputs.final, out["metadata"], started, out["already_complete"])


def plaid_summary(final: Path, meta: dict[str, Any], started: float, already_complete: bool = False) -> dict[str, Any]:
    """What build_plaid_index returns: the index's figures, its size, and this run's facts."""
    p = meta["plaid"]
    size = sum(f.stat().st_size for f in (final / PLAID_DIR).iterdir() if f.is_file())
    run = {"resumed_chunks": p["num_chunks"], "encoded_docs": 0} if already_complete else meta.get("build", {})
    timings = {} if already_complete else dict(meta.get("timings", {}))
    return {"index_dir": str(final), "num_docs": p["num_docs"], "num_chunks": p["num_chunks"],
            "num_partitions": p["num_partitions"], "num_embeddings": p["num_embeddings"], "avg_doclen": p["avg_doclen"],
            "nbits": p["nbits"], "dim": p["dim"], "bytes": size, "bytes_per_vector": size / max(1, p["num_embeddings"]),
            "resumed_chunks": run.get("resumed_chunks", 0), "already_complete": already_complete,
            "encoded_docs": run.get("encoded_docs", 0), "backend": meta.get("backend"),
            "timings": {**timings, "total_s": time.perf_counter() - started}}


def model_identity(encoder: Any) -> dict[str, Any]:
    """What identifies an encoder without a model folder: its settings and tokenizer fingerprint when it has them."""
    out: dict[str, Any] = {"dim": int(encoder.dim), "kind": getattr(encoder, "kind", None)}
    cfg = getattr(encoder, "model_cfg", None)
    if cfg is not None:
        out["model_cfg"] = M.model_settings(cfg)
    tok = getattr(encoder, "tokenizer", None)
    if tok is not None and hasattr(tok, "fingerprint"):
        out["tokenizer"] = tok.fingerprint()
    name = getattr(cfg, "name_or_path", None) if cfg is not None else None
    if isinstance(name, str) and (name in BUNDLED_ALIASES or Path(name).expanduser().is_dir()):
        try:  # a model folder: its weights too, so a resume never mixes two checkpoints saved at one path
            out["weights"] = M.weights_signature(resolve_model_path(name))
        except EmbedctlError:
            pass
    return out
