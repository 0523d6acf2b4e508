"""Versions of an index: immutable segments, per-segment deletes and one commit file per generation.

An index folder starts as one build (``embedctl index``): generation 0, one segment named ``base`` whose
files are the build's (``docs.parquet``, ``ids.npy``, ``plaid/`` or ``dense.faiss``), described by
``embedctl_index.json``. Every later change (``embedctl index add | delete | compact``) writes new files
only (a new segment under ``segments/g<N>/``, tombstone files under ``deletes/``, codec files under
``codec/``) and then ONE commit file, ``commits/commit.<N>.json``, written atomically last (temp name,
fsync, rename). The generation of an index is its highest commit file (0 when there is none): a reader
opens one generation and maps its files, so a writer never disturbs it, and a writer killed at any point
leaves the previous generation complete. Files no longer referenced by the newest two generations are
deleted after each commit (and before each write: what a killed writer left is never mixed in).

A commit file holds (format ``embedctl-index-commit`` version 1): ``generation``, ``command``,
``kind``, ``num_docs`` (live documents), ``deleted`` (tombstoned rows), ``segments`` (in order; each
``name``, ``dir``, ``rows``, ``deleted``, ``deletes`` (tombstone files: sorted int64 local pids, their
union is the segment's deleted rows), ``ids`` (its id table, embedctl.index.idtable), ``docs`` and its
``plaid`` or ``dense`` description), ``codec`` (PLAID: the four codec files and ``num_partitions``),
``drift`` (the last add's measurement) and ``files``: every file's ``{bytes, sha256}``
(embedctl.util.io.file_record) by path relative to the index folder. Nothing in it depends on time, so
a rerun after kill -9 writes the same bytes as an uninterrupted run.

Example::

    gen = open_generation(Path("indexes/scifact"))
    gen.number, gen.num_docs, [s.name for s in gen.segments]    # 3, 5183, ["base", "g000002"]
    gen.deleted_rows(gen.segments[0])                             # int64 local pids tombstoned
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.errors import EmbedctlError
from embedctl.index import meta as M
from embedctl.index.files import (
    CODEC_DIR,
    CODEC_NAMES,
    COMMITS_DIR,
    DELETES_DIR,
    DENSE_FILE,
    FIELDS_FILE,
    IDS_FILE,
    IVF,
    IVF_LENGTHS,
    LEXICAL_DIR,
    LEXICAL_FILES,
    PLAID_DIR,
    SEGMENTS_DIR,
    commit_name,
    plaid_chunk_files,
)
from embedctl.util.atomic import write_text
from embedctl.util.io import check_files, check_records_content, file_record, load_npy, read_json, write_json

COMMIT_FORMAT = "embedctl-index-commit"
COMMIT_VERSION = 1
_COMMIT = re.compile(r"^commit\.(\d+)\.json$")
COMMIT_SEAL_KEY = "commit_sha256"  # embedctl.index.meta.seal of the commit's own content
# the change number in the names of the files a change writes (embedctl.index.files: segment_dir,
# tombstone_file, grown_codec_file)
_CHANGE_FILE = re.compile(r"^segments/g(\d{6})/|^(?:deletes|codec)/[^/]*\.g(\d{6})\.npy(?:\.[^/]*)?$")
# what writers own inside an index folder; anything else (run info, a user's notes) is never collected
_OWNED_TOP = {M.DOCS_FILE, IDS_FILE, DENSE_FILE, FIELDS_FILE}
_OWNED_DIRS = (PLAID_DIR, SEGMENTS_DIR, DELETES_DIR, CODEC_DIR, COMMITS_DIR, LEXICAL_DIR)
DAMAGED = "the index is damaged: rebuild it (`embedctl index ... --overwrite`) or restore the file"


@dataclass
class Segment:
    """One immutable part of an index: its rows are local pids 0..rows-1."""

    name: str
    dir: str                      # relative folder ("" for the base build)
    rows: int
    deleted: int = 0
    deletes: list[str] = field(default_factory=list)
    ids: str | None = None        # its id table (None: a base built before id tables, made on first change)
    docs: str | None = None       # its docs.parquet
    plaid: dict[str, Any] | None = None  # chunks, num_embeddings, ivf_entries, num_partitions
    dense: dict[str, Any] | None = None  # the faiss parameters, num_vectors
    fields: str | None = None     # its fields.parquet (None: no document of the segment has fields)
    lexical: dict[str, Any] | None = None  # its BM25 side (embedctl.index.lexical): tokenizer, vocabulary size

    def rel(self, name: str) -> str:
        return f"{self.dir}/{name}" if self.dir else name

    def to_json(self) -> dict[str, Any]:
        out = {"name": self.name, "dir": self.dir, "rows": self.rows, "deleted": self.deleted,
               "deletes": list(self.deletes), "ids": self.ids, "docs": self.docs}
        if self.plaid is not None:
            out["plaid"] = self.plaid
        if self.dense is not None:
            out["dense"] = self.dense
        if self.fields is not None:
            out["fields"] = self.fields
        if self.lexical is not None:
            out["lexical"] = self.lexical
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Segment:
        return cls(name=obj["name"], dir=obj["dir"], rows=int(obj["rows"]), deleted=int(obj.get("deleted", 0)),
                   deletes=list(obj.get("deletes", [])), ids=obj.get("ids"), docs=obj.get("docs"),
                   plaid=obj.get("plaid"), dense=obj.get("dense"), fields=obj.get("fields"),
                   lexical=obj.get("lexical"))

    def files(self) -> list[str]:
        """Every file of the segment (its arrays, documents, id table, tombstones), relative to the index."""
        out = [f for f in (self.docs, self.ids, self.fields) if f]
        if self.lexical is not None:
            out += [self.rel(f"{LEXICAL_DIR}/{n}") for n in LEXICAL_FILES]
        if self.plaid is not None:
            for i in range(len(self.plaid["chunks"])):
                out += [self.rel(f"{PLAID_DIR}/{n}") for n in plaid_chunk_files(i).values()]
            out += [self.rel(f"{PLAID_DIR}/{IVF}"), self.rel(f"{PLAID_DIR}/{IVF_LENGTHS}")]
        if self.dense is not None:
            out.append(self.rel(DENSE_FILE))
        return out + list(self.deletes)


@dataclass
class Generation:
    """One version of an index, as a reader sees it: its metadata, its commit and its segments."""

    index_dir: Path
    meta: dict[str, Any]                 # embedctl_index.json (the build's metadata)
    number: int
    segments: list[Segment]
    codec: dict[str, Any] | None         # PLAID: relative paths of the codec files, num_partitions
    files: dict[str, dict[str, Any]] | None  # path -> {bytes, sha256}; None: a base built before records
    drift: dict[str, Any] | None = None
    command: str = "build"
    parent_files: str | None = None      # files_digest of the version it was written over (None: older commits)

    @property
    def kind(self) -> str:
        return self.meta["kind"]

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.segments)

    @property
    def deleted(self) -> int:
        return sum(s.deleted for s in self.segments)

    @property
    def num_docs(self) -> int:
        return self.rows - self.deleted

    def path(self, rel: str) -> Path:
        return self.index_dir / rel

    def deleted_rows(self, segment: Segment) -> np.ndarray:
        """Sorted unique int64 local pids of ``segment`` that are tombstoned in this generation."""
        parts = [np.asarray(load_npy(self.path(f), mmap=False, what="tombstone file", hint=DAMAGED), np.int64)
                 for f in segment.deletes]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def live_mask(self, segment: Segment) -> np.ndarray:
        mask = np.ones(segment.rows, dtype=bool)
        mask[self.deleted_rows(segment)] = False
        return mask

    def referenced(self) -> set[str]:
        """Every file this generation needs (relative paths), its commit file included."""
        out: set[str] = set()
        for s in self.segments:
            out.update(s.files())
        if self.codec is not None:
            out.update(self.codec["files"].values())
        if self.number > 0:
            out.add(commit_name(self.number))
        return out

    def to_commit(self, command: str, parent_files: str | None) -> dict[str, Any]:
        return {"format": COMMIT_FORMAT, "format_version": COMMIT_VERSION, "generation": self.number,
                "command": command, "kind": self.kind, "num_docs": self.num_docs, "deleted": self.deleted,
                "segments": [s.to_json() for s in self.segments], "codec": self.codec, "drift": self.drift,
                "files": dict(sorted((self.files or {}).items())), "parent_files_sha256": parent_files}


def files_digest(files: dict[str, Any] | None) -> str | None:
    """sha256 of a version's file records (compact JSON, sorted keys): what a commit records of the version
    it was written over, so a commit file replaced by another version's copy (its number edited) cannot
    pass as the next version. Records hold no time: a rerun gives the same digest."""
    if files is None:
        return None
    import hashlib
    import json

    return hashlib.sha256(json.dumps(files, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def commit_numbers(index_dir: Path) -> list[int]:
    folder = index_dir / COMMITS_DIR
    if not folder.is_dir():
        return []
    return sorted(int(m.group(1)) for p in folder.iterdir() if (m := _COMMIT.match(p.name)))


def open_generation(index_dir: str | Path, number: int | None = None, check: bool = True) -> Generation:
    """The newest generation of the index at ``index_dir`` (or generation ``number``).

    With ``check`` (what search, `embedctl index add|delete|compact` and the API do), every file the
    generation references is read once against its recorded sha256 (:func:`check_content`), and files of a
    later change than the newest commit refuse the open (:func:`check_no_lost_commit`); the loaders then
    check each file's header, dtype and shape. Without it (`index info`, which reports instead), only the
    commit is read."""
    index_dir = Path(index_dir)
    meta = M.read_metadata(index_dir)
    numbers = commit_numbers(index_dir)
    newest = numbers[-1] if numbers else 0
    gen = _generation(index_dir, meta, newest if number is None else number)
    if check:
        check_no_lost_commit(index_dir, newest)
        check_follows_parent(gen)
        check_content(gen)
    return gen


def check_follows_parent(gen: Generation) -> None:
    """Refuse a commit that does not follow the version before it (its record of that version's files
    differs): a commit file overwritten by an older commit's copy with its number edited would otherwise
    silently undo a committed change. Commits written before the record, or whose parent was collected,
    pass."""
    if gen.number == 0 or gen.parent_files is None:
        return
    try:
        parent = _generation(gen.index_dir, gen.meta, gen.number - 1)
    except EmbedctlError:
        return  # the version before was collected (only the newest two are kept)
    if files_digest(parent.files) != gen.parent_files:
        raise EmbedctlError(f"{gen.index_dir / commit_name(gen.number)}: does not follow version {gen.number - 1} (it "
                            f"records other files for the version it was written over): it was replaced by "
                            "another version's commit file", hint=LOST_COMMIT_HINT)


def check_content(gen: Generation) -> None:
    """Refuse a generation one of whose files differs from its record (missing, another size, another
    sha256): a same-size corruption of an array would otherwise change search results silently. Every file
    listed in ``files`` is checked, whatever its kind (a new file type needs no code here)."""
    if gen.files is None:
        return  # built before file records: nothing to compare with (`index info --verify` says so)
    records = _referenced_records(gen)
    check_records_content(gen.index_dir, records, what=f"the index {gen.index_dir} (version {gen.number})",
                          hint=DAMAGED)


def _generation(index_dir: Path, meta: dict[str, Any], number: int) -> Generation:
    if number == 0:
        return base_generation(index_dir, meta)
    path = index_dir / commit_name(number)
    try:
        obj = read_json(path, what="index commit", hint=DAMAGED)
    except FileNotFoundError as exc:
        raise EmbedctlError(f"{path}: missing index commit", hint=DAMAGED) from exc
    if not isinstance(obj, dict) or obj.get("format") != COMMIT_FORMAT or obj.get("format_version") != COMMIT_VERSION:
        raise EmbedctlError(f"{path}: not an embedctl index commit of version {COMMIT_VERSION}",
                            hint="update embedctl, or rebuild the index (`embedctl index ... --overwrite`)")
    if M.seal_broken(obj, COMMIT_SEAL_KEY):  # commits from before the seal have none
        raise EmbedctlError(f"{path}: its content differs from the sha256 it was written with (edited or damaged)",
                            hint=DAMAGED)
    if obj.get("generation") != number:
        raise EmbedctlError(f"{path}: holds the commit of version {obj.get('generation')!r}, not {number}: it was "
                            "replaced by another version's commit file", hint=LOST_COMMIT_HINT)
    return Generation(index_dir=index_dir, meta=meta, number=int(obj["generation"]),
                      segments=[Segment.from_json(s) for s in obj["segments"]], codec=obj.get("codec"),
                      files=obj.get("files"), drift=obj.get("drift"), command=obj.get("command", "?"),
                      parent_files=obj.get("parent_files_sha256"))


def base_generation(index_dir: Path, meta: dict[str, Any]) -> Generation:
    """Generation 0: the build as ``embedctl_index.json`` describes it (one segment, ``base``)."""
    has_docs = (index_dir / M.DOCS_FILE).is_file()
    base = Segment(name="base", dir="", rows=int(meta["num_docs"]), docs=M.DOCS_FILE if has_docs else None,
                   ids=IDS_FILE if (index_dir / IDS_FILE).is_file() else None,
                   fields=FIELDS_FILE if (index_dir / FIELDS_FILE).is_file() else None,
                   lexical=meta.get("lexical_side"))
    codec = None
    if isinstance(meta.get("plaid"), dict):  # the kind's section describes its base segment
        p = meta["plaid"]
        base.plaid = {"chunks": p["chunks"], "num_embeddings": p["num_embeddings"], "ivf_entries": p["ivf_entries"],
                      "num_partitions": p["num_partitions"]}
        codec = {"num_partitions": int(p["num_partitions"]),
                 "files": {n: f"{PLAID_DIR}/{n}.npy" for n in CODEC_NAMES}}
    elif isinstance(meta.get("dense"), dict):
        base.dense = dict(meta["dense"])
    files = meta.get("files")
    return Generation(index_dir=index_dir, meta=meta, number=0, segments=[base], codec=codec, files=files)


def base_file_records(folder: Path, meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{path: {bytes, sha256}}`` of every file of a finished build in ``folder`` (its generation 0), for
    the ``files`` key of ``embedctl_index.json``."""
    gen = base_generation(folder, meta)
    return {name: file_record(folder / name) for name in sorted(gen.referenced())}


def record_files(gen: Generation, names: list[str] | set[str]) -> None:
    """Add the records of ``names`` (new files of a change) to ``gen.files``; on an index built before
    records, every file of the generation is recorded once now."""
    if gen.files is None:
        gen.files = {}
        names = set(names) | gen.referenced()
    else:  # a change's own copy: the records it starts from belong to the version it was opened on
        gen.files = dict(gen.files)
    for name in sorted(names):
        if name.startswith(f"{COMMITS_DIR}/"):
            continue
        gen.files[name] = file_record(gen.path(name))
    keep = gen.referenced()
    gen.files = {k: v for k, v in gen.files.items() if k in keep}


def commit(gen: Generation, command: str) -> Path:
    """Write ``gen``'s commit file (atomically: the moment the change becomes the index), then drop the
    change's pending mark (:func:`begin_change`)."""
    path = gen.index_dir / commit_name(gen.number)
    parent = _generation(gen.index_dir, gen.meta, gen.number - 1)
    write_json(path, M.seal(gen.to_commit(command, files_digest(parent.files)), COMMIT_SEAL_KEY))
    (gen.index_dir / pending_name(gen.number)).unlink(missing_ok=True)
    return path


def pending_name(number: int) -> str:
    return f"{COMMITS_DIR}/pending.{number}"


def begin_change(index_dir: Path, number: int) -> None:
    """Mark change ``number`` as being written (before any of its files): files of a generation above the
    newest commit are then a writer's, in progress or killed (collected by the next writer), and files
    without the mark are a committed change whose commit file was lost or rolled back."""
    write_text(index_dir / pending_name(number), "a change being written; its files are not committed yet\n")


def abandon_change(index_dir: Path, number: int) -> None:
    """A writer that found nothing to change (and wrote no file of change ``number``) drops its mark."""
    (index_dir / pending_name(number)).unlink(missing_ok=True)


def _generation_of(rel: str) -> int | None:
    """The change that wrote an owned file (``segments/g<N>/...``, ``deletes/*.g<N>.npy``, ``codec/*.g<N>.npy``,
    ``commits/commit.<N>.json``); None for the base build's files."""
    m = _CHANGE_FILE.search(rel)
    if m:
        return int(m.group(1) or m.group(2))
    m = _COMMIT.match(rel.rsplit("/", 1)[-1]) if rel.startswith(f"{COMMITS_DIR}/") else None
    return int(m.group(1)) if m else None


def newer_files(index_dir: Path, number: int) -> dict[int, list[str]]:
    """Owned files written by a change after generation ``number`` that no pending mark covers, by change:
    the trace of a committed change whose commit file is gone (deleted, or replaced by an older copy)."""
    out: dict[int, list[str]] = {}
    for rel in owned_files(index_dir):
        g = _generation_of(rel)
        if g is not None and g > number and not (index_dir / pending_name(g)).exists():
            out.setdefault(g, []).append(rel)
    return dict(sorted(out.items()))


def lost_commit_problems(index_dir: Path, number: int) -> list[str]:
    """What :func:`newer_files` finds, in words (one line per later change); empty when nothing is lost."""
    found = newer_files(index_dir, number)
    if found and (commit_numbers(index_dir) or [0])[-1] >= max(found):
        return []  # a writer committed while we looked: the files are its, and committed
    return [f"{index_dir}: files of change {g} ({', '.join(rels[:3])}{' ...' if len(rels) > 3 else ''}) are newer "
            f"than the newest commit ({number}): {commit_name(g)} was lost or replaced by an older copy"
            for g, rels in found.items()]


LOST_COMMIT_HINT = ("restore the lost commit file from a backup; to go back to the older version deliberately, "
                    "delete the listed files; or rebuild the index (`embedctl index ... --overwrite`)")


def check_no_lost_commit(index_dir: Path, number: int) -> None:
    """Refuse to open (or write) an index whose newest commit is older than files it holds: opening it would
    silently undo a committed change, and the next writer would delete that change's files."""
    problems = lost_commit_problems(index_dir, number)
    if problems:
        raise EmbedctlError("; ".join(problems), hint=LOST_COMMIT_HINT)


def collect_garbage(index_dir: Path) -> list[str]:
    """Delete what the newest two generations do not reference (files of older generations, and what a
    killed writer left: uncommitted segments, temp files); returns the deleted paths (relative)."""
    numbers = commit_numbers(index_dir)
    newest = numbers[-1] if numbers else 0
    meta = M.read_metadata(index_dir)
    keep: set[str] = set()
    for number in (newest, newest - 1):
        if number < 0:
            continue
        try:
            keep |= _generation(index_dir, meta, number).referenced()
        except EmbedctlError:
            continue  # the previous commit was collected already
    removed = []
    for rel in owned_files(index_dir):
        if rel not in keep:
            (index_dir / rel).unlink(missing_ok=True)
            removed.append(rel)
    for name in (SEGMENTS_DIR, DELETES_DIR, CODEC_DIR):
        _remove_empty_dirs(index_dir / name)
    return removed


def owned_files(index_dir: Path) -> list[str]:
    """The files writers of the index own (arrays, documents, id tables, tombstones, commits, temp files),
    as sorted paths relative to the index (``/``-separated). Listed with os.walk (names and entry types from
    the directory reads, no stat per file): every commit lists them twice or more, and a Path per file made
    this ~9 ms on an index of 56 segments (~730 files) against ~2 ms."""
    top = os.fspath(index_dir)
    out = [n for n in _OWNED_TOP if os.path.isfile(os.path.join(top, n))]
    with os.scandir(top) as entries:
        out += [e.name for e in entries if e.name.startswith(".") and e.name.endswith(".tmp") and e.is_file()]
    for name in _OWNED_DIRS:
        for root, _dirs, files in os.walk(os.path.join(top, name)):
            rel = os.path.relpath(root, top).replace(os.sep, "/")
            out += [f"{rel}/{f}" for f in files]  # files, links to files and broken links
            out += [f"{rel}/{d}" for d in _dirs if os.path.islink(os.path.join(root, d))]  # links to folders
    return sorted(out)


def _remove_empty_dirs(folder: Path) -> None:
    """Remove the folders under ``folder`` (and ``folder`` itself) that are empty, deepest first."""
    if not os.path.isdir(folder):
        return
    for root, dirs, files in os.walk(folder, topdown=False):
        if not files and all(not os.path.lexists(os.path.join(root, d)) for d in dirs):
            try:
                os.rmdir(root)
            except OSError:  # not empty after all (a writer of another process): left for the next collection
                pass


def verify(gen: Generation) -> list[str]:
    """Every problem with the generation's files: missing, another size, another sha256 (full read)."""
    if gen.files is None:
        return [f"{gen.index_dir}: built before file records; `embedctl index add|delete|compact` records them"]
    return check_files(gen.index_dir, _referenced_records(gen), full=True)


def _referenced_records(gen: Generation) -> dict[str, dict[str, Any]]:
    """The file records of the files ``gen`` needs (``files`` also lists those of earlier versions)."""
    referenced = gen.referenced()  # once: it walks every segment
    return {k: v for k, v in (gen.files or {}).items() if k in referenced}


def changed_after_commit(gen: Generation) -> list[str]:
    """Files of ``gen`` modified after its commit file (or, for version 0, its metadata) was written: a
    file replaced or edited in place since (a same-size edit keeps the size the commit records)."""
    mark = gen.path(commit_name(gen.number) if gen.number > 0 else M.META_FILE)
    if not mark.is_file():
        return []
    since = mark.stat().st_mtime_ns
    out = []
    for rel in sorted(gen.referenced()):
        path = gen.path(rel)
        if rel != commit_name(gen.number) and path.is_file() and path.stat().st_mtime_ns > since:
            out.append(f"{path}: modified after the commit it belongs to ({mark.name})")
    return out
