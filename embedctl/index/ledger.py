"""The build ledger: the one record of an index build in progress, owned by the builder.

An index is built in ``<index.root>/.<name>.building/`` and renamed onto ``<name>`` when complete (the
Python entry point ``build_plaid_index(..., out_dir)`` does the same beside ``out_dir``). That folder holds
``ledger.json``: a :class:`BuildLedger`, rewritten whole (``embedctl.util.io.write_json``: temp name, fsync,
rename) after every stage, so a process killed at any instant leaves either the old or the new ledger.
It records

- ``request``: everything that shapes the index (the index keys of ``IndexConfig.SHAPING``, an allow-list:
  where the index goes, the backend keys and the arguments of later operations never count; the effective
  model config or identity; the collection's fingerprint);
- ``backend``: ``{name, precision}`` of the PLAID backend that does the arithmetic (dense: faiss, fp32), and
  ``encoder``: the encode backend (``model.encoder_backend`` resolved: embedctl.models.encode_backends);
- ``model``: the loaded encoder's identity (tokenizer fingerprint, weights signature);
- ``documents``: ``{num_docs, sha256}`` once ``docs.parquet`` and ``_work/doc_digests.npy`` are in place;
- ``plaid_plan``: once k-means and the codec are trained and their arrays renamed into place (partitions,
  sample sizes, estimates);
- ``plaid_chunks``: every finished chunk (passage_offset, num_passages, embedding_offset, num_embeddings, and
  the size + sha256 of its arrays, checked in full before a resume trusts the chunk);
- ``dense``: the faiss parameters once ``dense.faiss`` is in place.

Rules:

- A rerun with the same request resumes: recorded stages are never redone, and, every choice being
  seeded, the index ends byte-identical to an uninterrupted build.
- A different request, an unreadable ledger or a folder without one (foreign, or from another version)
  is never mixed in: the folder is emptied and the build starts fresh.
- A resume whose backend differs from the recorded one is refused (:class:`BackendMismatch`, naming both
  and the keys that select the recorded one), unless ``index.overwrite``: then everything after the
  documents stage starts over. A changed model identity (same settings, other weights or tokenizer files)
  starts over after the documents stage too.
- A PLAID chunk counts as finished only once its four arrays are renamed into place AND the ledger records
  it; arrays without a record (killed in between) are rewritten, a record whose arrays are missing is
  redone.
- The exception is the k-means sample spill, ``_work/sample.{g}.doclens.npy`` and ``_work/sample.{g}.f16.npy``
  (embedctl.index.plaid.sample): a group counts as spilled when both files exist, the vectors renamed
  last. Groups are written by a background thread while the next group encodes, and the spill is only
  an input to the codec and to the chunks, which the ledger does record.
- Several ranks (embedctl.util.ranks; ``torchrun ... embedctl index``): rank 0 alone writes ``ledger.json``.
  Each rank, after a chunk's arrays are renamed into place, writes that chunk's record to
  ``_work/chunks/{i}.json`` (a fragment, per chunk and not per rank, so any world size can resume it);
  rank 0 merges the fragments into the ledger before the IVF. A chunk counts as finished when its arrays
  are in place AND the ledger or its fragment records it.
- When the index is complete, ``embedctl_index.json`` is written (its ``request`` equal to the ledger's),
  then the ledger and ``_work/`` are deleted and the folder is renamed into place. A folder found with
  that metadata and no ledger only needed the rename: :func:`open_build` reports it as ``complete``.

Example::

    ledger, state = open_build(folder, request)          # state: "fresh" | "resume" | "complete"
    ledger.use_backend({"name": "native", "precision": "int16"}, overwrite=False)
    if ledger.documents is None:
        ledger.record_documents(num_docs, sha256)
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embedctl.config.sections.index import IndexConfig
from embedctl.errors import ConfigError, EmbedctlError
from embedctl.index import meta as M
from embedctl.index.files import CHUNK_FRAGMENTS, DIGESTS_FILE, LEDGER_FILE, WORK_DIR  # noqa: F401 - ledger names
from embedctl.util.io import read_json, write_json

FORMAT = "embedctl-build-ledger"
FORMAT_VERSION = 1
DENSE_BACKEND = {"name": "faiss", "precision": "fp32"}
# what selects the backend (index.backend, index.assign_precision) is compared through `backend`, not the
# request, so a resume can name it explicitly; only the index.* keys of IndexConfig.SHAPING are the request


class BackendMismatch(EmbedctlError):
    """A resume on another backend than the one the unfinished build was started with."""


@dataclass
class ChunkRecord:
    """A finished PLAID chunk: pids ``passage_offset .. + num_passages``, vectors ``embedding_offset .. +
    num_embeddings`` of the whole index."""

    index: int
    passage_offset: int
    num_passages: int
    embedding_offset: int
    num_embeddings: int
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    """size + sha256 of the chunk's arrays as written: a resume re-reads them before trusting the chunk."""

    def public(self) -> dict[str, int]:
        """The chunk's entry in the index metadata (``chunks`` of the plaid section)."""
        return {"passage_offset": self.passage_offset, "num_passages": self.num_passages,
                "embedding_offset": self.embedding_offset, "num_embeddings": self.num_embeddings}


@dataclass
class BuildLedger:
    request: dict[str, Any]
    backend: dict[str, str] | None = None
    model: dict[str, Any] | None = None
    documents: dict[str, Any] | None = None
    plaid_plan: dict[str, Any] | None = None
    plaid_chunks: list[ChunkRecord] = field(default_factory=list)
    dense: dict[str, Any] | None = None
    folder: Path | None = field(default=None, compare=False, repr=False)

    # -- persistence --------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        body = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "folder"}
        body["plaid_chunks"] = [dataclasses.asdict(c) for c in self.plaid_chunks]
        return {"format": FORMAT, "format_version": FORMAT_VERSION, **normalized(body)}

    @classmethod
    def from_json(cls, obj: dict[str, Any], folder: Path) -> BuildLedger:
        if obj.get("format") != FORMAT or obj.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"not a {FORMAT} version {FORMAT_VERSION}")
        names = {f.name for f in dataclasses.fields(cls)} - {"folder"}
        body = {k: v for k, v in obj.items() if k in names}
        body["plaid_chunks"] = [ChunkRecord(**c) for c in body.get("plaid_chunks", [])]
        return cls(**body, folder=folder)

    @classmethod
    def load(cls, folder: Path) -> BuildLedger | None:
        """The ledger in ``folder``; None when absent, unreadable or of another format."""
        try:
            return cls.from_json(read_json(folder / LEDGER_FILE, what="build ledger"), folder)
        except (FileNotFoundError, EmbedctlError, ValueError, TypeError):
            return None

    def commit(self) -> None:
        assert self.folder is not None
        write_json(self.folder / LEDGER_FILE, self.to_json())

    # -- stages -------------------------------------------------------------------------------------
    def record_documents(self, num_docs: int, sha256: str) -> None:
        self.documents = {"num_docs": int(num_docs), "sha256": sha256}
        self.commit()

    def use_model(self, identity: dict[str, Any]) -> None:
        """Record the encoder's identity; another one than recorded restarts the stages after the documents."""
        identity = normalized(identity)
        if self.model == identity:
            return
        if self.model is not None:
            self.restart_after_documents()
        self.model = identity
        self.commit()

    def use_backend(self, record: dict[str, str], overwrite: bool = False) -> None:
        """Record the backend, or check it against the recorded one (refused unless ``overwrite``)."""
        record = normalized(record)
        if self.backend is not None and "encoder" not in self.backend and record.get("encoder") == "reference":
            self.backend = {**self.backend, "encoder": "reference"}  # a ledger from before the encode backend
        if self.backend is not None and "encoder_threads" not in self.backend and "encoder_threads" in record and \
                {k: v for k, v in record.items() if k != "encoder_threads"} == self.backend:
            # a ledger from before the thread count was recorded (bf16 on AMX): resumed as before, now recorded
            self.backend = {**self.backend, "encoder_threads": record["encoder_threads"]}
        if self.backend == record:
            return
        if self.backend is not None:
            if not overwrite:
                raise BackendMismatch(
                    f"{self.folder} holds an unfinished build started on backend {describe_backend(self.backend)}; "
                    f"this run selects {describe_backend(record)}, whose bytes would differ",
                    hint=f"rerun with {backend_keys(self.backend)} to resume it, or pass --overwrite "
                         "(index.overwrite=true) to start it over")
            self.restart_after_documents()
        self.backend = record
        self.commit()

    def keep_encode_backend(self, encoder: Any) -> None:
        """An ``encoder`` whose backend ``auto`` chose encodes with the one this unfinished build recorded (a
        build started before ``auto`` changed, or on another rank, resumes instead of being refused); one that
        cannot run here is left as it is (:meth:`use_backend` then refuses, naming the key)."""
        if self.backend is None or getattr(encoder, "backend_asked", None) != "auto":
            return
        recorded = self.backend.get("encoder") or "reference"  # a ledger from before the encode backend
        if recorded != encoder.backend_name:
            try:
                encoder.use_backend(recorded)
            except ConfigError:
                return

    def keep_assign_precision(self, icfg: Any) -> Any:
        """``icfg`` with ``assign_precision`` set to the one this unfinished build recorded, when it asked ``auto``
        and this CPU runs the recorded one (a build started before ``auto`` changed, or on another rank, resumes
        instead of being refused); otherwise ``icfg`` unchanged (:meth:`use_backend` then decides)."""
        recorded = (self.backend or {}).get("precision")
        if (getattr(icfg, "assign_precision", None) != "auto" or (self.backend or {}).get("name") != "native"
                or not dataclasses.is_dataclass(icfg)):
            return icfg
        from embedctl.index.plaid import native_backend  # the PLAID engine, only for a native PLAID build

        if not native_backend.available() or recorded not in native_backend.runnable_precisions("index"):
            return icfg
        return dataclasses.replace(icfg, assign_precision=recorded)

    def record_plan(self, plan: dict[str, Any]) -> None:
        self.plaid_plan = normalized(plan)
        self.commit()

    def record_chunk(self, chunk: ChunkRecord) -> None:
        """Called after the chunk's arrays are renamed into place: from now on it is finished."""
        self.plaid_chunks = sorted([c for c in self.plaid_chunks if c.index != chunk.index] + [chunk],
                                   key=lambda c: c.index)
        self.commit()

    def record_chunks(self, chunks: list[ChunkRecord]) -> None:
        """Record several finished chunks in one commit (rank 0 merging the ranks' fragments)."""
        done = {c.index: c for c in self.plaid_chunks}
        done.update({c.index: c for c in chunks})
        self.plaid_chunks = [done[i] for i in sorted(done)]
        self.commit()

    def finished_chunk(self, index: int) -> ChunkRecord | None:
        return next((c for c in self.plaid_chunks if c.index == index), None)

    def record_dense(self, params: dict[str, Any]) -> None:
        self.dense = normalized(params)
        self.commit()

    def restart_after_documents(self) -> None:
        """Forget and delete everything after the documents stage (docs.parquet and the digests stay)."""
        assert self.folder is not None
        keep = {LEDGER_FILE, M.DOCS_FILE, WORK_DIR}
        for path in self.folder.iterdir():
            if path.name not in keep:
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        work = self.folder / WORK_DIR
        if work.is_dir():
            for path in work.iterdir():
                if path.name != Path(DIGESTS_FILE).name:
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
        self.model, self.plaid_plan, self.plaid_chunks, self.dense = None, None, [], None


def write_chunk_fragment(folder: Path, chunk: ChunkRecord) -> None:
    """A rank's record of a finished chunk (after its arrays are in place); rank 0 merges it."""
    write_json(folder / CHUNK_FRAGMENTS / f"{chunk.index:06d}.json", dataclasses.asdict(chunk))


def read_chunk_fragment(folder: Path, index: int) -> ChunkRecord | None:
    try:
        return ChunkRecord(**read_json(folder / CHUNK_FRAGMENTS / f"{index:06d}.json", what="chunk record"))
    except (FileNotFoundError, EmbedctlError, TypeError):
        return None


def open_build(folder: Path, request: dict[str, Any]) -> tuple[BuildLedger, str]:
    """Prepare the build folder for ``request``: ``"resume"`` (its ledger has the same request), ``"complete"``
    (only the rename into place was left), else ``"fresh"`` (the folder emptied, a new ledger written)."""
    request = normalized(request)
    if folder.is_dir():
        ledger = BuildLedger.load(folder)
        if ledger is not None and ledger.request == request:
            return ledger, "resume"
        if ledger is None and _finished_metadata_request(folder) == request:
            return BuildLedger(request=request, folder=folder), "complete"
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    ledger = BuildLedger(request=request, folder=folder)
    ledger.commit()
    return ledger, "fresh"


def finish_build(folder: Path, final: Path, metadata: dict[str, Any] | None) -> None:
    """Write the index metadata (the completion mark; None when it is already there), drop the ledger and
    the build-only files, then rename the folder onto ``final`` (an old index there is removed only after)."""
    if metadata is not None:
        write_json(folder / M.META_FILE, M.seal(metadata))
    (folder / LEDGER_FILE).unlink(missing_ok=True)
    shutil.rmtree(folder / WORK_DIR, ignore_errors=True)
    for stray in folder.rglob(".*.tmp"):  # temp files of writes killed mid-way in an earlier, resumed run
        stray.unlink(missing_ok=True)
    old = final.with_name(f".{final.name}.old")
    _remove(old)
    if final.exists() or final.is_symlink():
        final.rename(old)
    folder.rename(final)
    _remove(old)


def _remove(path: Path) -> None:
    """Remove a folder, a file or a symlink (never what a symlink points to)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def request_of(index_cfg: Any, model: dict[str, Any], collection: dict[str, Any], **more: Any) -> dict[str, Any]:
    """The request: the index settings that shape the index (``IndexConfig.SHAPING``), the model and the
    collection fingerprint; ``more`` adds engine-level overrides (e.g. a sample size)."""
    settings = {key: getattr(index_cfg, key) for key in IndexConfig.SHAPING if hasattr(index_cfg, key)}
    extra = {k: v for k, v in more.items() if v is not None}
    return normalized({"index": settings, "model": model, "collection": collection, **extra})


def describe_backend(record: dict[str, Any]) -> str:
    n = record.get("encoder_threads")
    threads = f" on {n} thread{'' if n == 1 else 's'}" if n else ""
    encoder = f" (encoder {record['encoder']}{threads})" if record.get("encoder") else ""
    return f"{record.get('name')}/{record.get('precision')}{encoder}"


def backend_keys(record: dict[str, str]) -> str:
    """The settings that select ``record`` again: index.backend, and index.assign_precision where it is one
    of that key's values (the reference and torch backends have a fixed arithmetic)."""
    keys = f"index.backend={record.get('name')}"
    if record.get("precision") in ("fp32", "int16", "int8", "bf16") and record.get("name") == "native":
        keys += f" index.assign_precision={record.get('precision')}"
    if record.get("encoder"):
        keys += f" model.encoder_backend={record['encoder']}"
    if record.get("encoder_threads"):  # the bf16 encoder on AMX: its bits depend on the thread count
        keys += f" index.threads={record['encoder_threads']}"
    return keys


def normalized(obj: Any) -> Any:
    """JSON round trip (sorted keys, tuples as lists): compares equal to what was saved."""
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def _finished_metadata_request(folder: Path) -> Any:
    try:
        return read_json(folder / M.META_FILE, what="index metadata").get("request")
    except (FileNotFoundError, EmbedctlError, AttributeError):
        return None
