"""`embedctl index add | delete`: change an index without rebuilding it (a new generation per change).

- :func:`add_documents` encodes only the documents that are new or changed (an id already in the index
  with the same text is left alone, so rerunning an add is a no-op; with another text it is an update: the
  old row is tombstoned and the new one added) into a new segment, then commits. A PLAID index that is
  small, or has grown a lot since its codec was trained, is re-clustered instead: every live document and
  the new ones in one new segment with a new codec, as a fresh build (embedctl.index.recluster).
- :func:`delete_documents` looks each id up in the segments' id tables (embedctl.index.idtable: cost
  proportional to the ids, not to the index), writes one tombstone file per touched segment, then commits.

Both hold the index's writer lock (embedctl.util.lock: a second writer waits ``index.lock_wait_s`` seconds
or is refused), first delete what a killed writer left (embedctl.index.generations.collect_garbage), and
write every file before the commit file (embedctl.index.generations.commit): a kill -9 at any point
leaves the previous generation searchable, and rerunning the command ends with the same bytes as an
uninterrupted run (every step is deterministic and nothing records a time).

Example::

    add_documents("indexes/scifact", "new_docs.jsonl")     # {"added": 12, "updated": 1, "generation": 4, ...}
    delete_documents("indexes/scifact", ["doc-7", "nope"])  # {"deleted": 1, "unknown": ["nope"], ...}
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.data.sources import (
    TextRecord,
    beir_paths,
    flatten_fields,
    is_beir_folder,
    is_control_char,
    iter_texts,
    join_title,
)
from embedctl.errors import EmbedctlError, InputError, NotImplementedYet
from embedctl.index import meta as M
from embedctl.index.collection import is_token_cache
from embedctl.index.docs import DocTable, DocTableWriter
from embedctl.index.encoding import default_device, encode_with_progress
from embedctl.index.fields import FieldStore
from embedctl.index.files import FIELDS_FILE, IDS_FILE, segment_dir, tombstone_file
from embedctl.index.generations import (
    Generation,
    Segment,
    abandon_change,
    begin_change,
    check_no_lost_commit,
    collect_garbage,
    commit,
    commit_numbers,
    open_generation,
    record_files,
)
from embedctl.index.idtable import id_table, lookup_rows
from embedctl.index.kinds import index_kind
from embedctl.index.lexical import has_lexical, write_lexical, write_segment_lexical
from embedctl.index.merge import merge_small_segments, next_generation
from embedctl.index.passages import PassageSpec, Splitter
from embedctl.models.encoder import load_encoder
from embedctl.util.failpoints import failpoint
from embedctl.util.io import load_npy, save_npy
from embedctl.util.lock import WriterLock
from embedctl.util.progress import Progress


@dataclass
class UpdateOptions:
    """The arguments of a change: the index.* keys of the same names (operation keys, never part of the
    build's request; the ``recluster_*`` ones: embedctl.index.recluster), ``strict`` (delete: refuse unknown
    ids) and ``progress`` (show a bar)."""

    batch_size: int = 32
    drift_threshold: float = 1.5
    drift_action: str = "warn"
    lock_wait_s: float = 0.0
    recluster_below_docs: int = 1000
    recluster_add_ratio: float | None = 1.0
    merge_factor: int = 10
    strict: bool = False
    progress: bool = True

    @classmethod
    def from_config(cls, icfg: Any, progress: bool = True) -> UpdateOptions:
        ratio = icfg.recluster_add_ratio
        return cls(batch_size=int(icfg.batch_size), drift_threshold=float(icfg.drift_threshold),
                   drift_action=str(icfg.drift_action), lock_wait_s=float(icfg.lock_wait_s),
                   recluster_below_docs=int(icfg.recluster_below_docs),
                   recluster_add_ratio=None if ratio is None else float(ratio),
                   merge_factor=int(icfg.merge_factor), progress=progress)


def open_for_write(index_dir: Path) -> Generation:
    """The newest generation, after deleting what earlier killed writers left (call with the lock held)."""
    M.read_metadata(index_dir)  # a clear message when there is no index
    check_no_lost_commit(index_dir, (commit_numbers(index_dir) or [0])[-1])  # before the collection deletes them
    collect_garbage(index_dir)
    gen = open_generation(index_dir)
    begin_change(index_dir, gen.number + 1)
    if any(s.docs is None for s in gen.segments):
        raise EmbedctlError(f"{index_dir} has no documents table (docs.parquet): it was written by "
                            "build_plaid_index, whose documents have no string ids to add, delete or replace",
                            hint="build the index with `embedctl index --collection FILE`")
    return gen


def ensure_id_tables(gen: Generation) -> list[str]:
    """Give every segment an id table (an index built before them gets ``ids.npy`` now); returns new files."""
    written = []
    for seg in gen.segments:
        if seg.ids is None:
            rel = seg.rel(IDS_FILE)
            table = DocTable(gen.path(seg.docs))
            save_npy(gen.path(rel), id_table(table.ids_of(np.arange(len(table)))))
            seg.ids = rel
            written.append(rel)
    return written


def locate(gen: Generation, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every live row of each id: ``(which, segment index, local pid)`` int64 arrays, ``ids[which[j]]``
    having that row (one row per id, or a document's passages: embedctl.index.passages, in order)."""
    parts = []
    for s, seg in enumerate(gen.segments):
        which, local = lookup_rows(load_npy(gen.path(seg.ids), what="id table"), ids)
        if seg.deleted and len(local):
            live = ~np.isin(local, gen.deleted_rows(seg))
            which, local = which[live], local[live]
        parts.append((which, np.full(len(which), s, dtype=np.int64), local))
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    which, seg_of, local_of = (np.concatenate(p) for p in zip(*parts, strict=True))
    order = np.argsort(which, kind="stable")  # each id's rows together, segments in order
    return which[order], seg_of[order], local_of[order]


def write_tombstones(gen: Generation, seg_of: np.ndarray, local_of: np.ndarray) -> list[str]:
    """One tombstone file per touched segment (``deletes/<segment>.g<N>.npy``, sorted local pids)."""
    written = []
    for s in np.unique(seg_of[seg_of >= 0]):
        seg = gen.segments[int(s)]
        pids = np.unique(local_of[seg_of == s])
        rel = tombstone_file(seg.name, gen.number)
        save_npy(gen.path(rel), pids.astype(np.int64))
        seg.deletes.append(rel)
        seg.deleted += int(len(pids))
        written.append(rel)
    return written


def read_records(documents: str | Path | Iterable[Any]) -> list[TextRecord]:
    """The documents to add: a collection (TSV / JSONL / parquet / BEIR folder; bad rows and duplicate ids fail
    with file:line) or an iterable of ``(id, text)``, ``(id, title, text)`` or ``{"id", "text"[, "title"]}``
    dicts (any other key is a field, embedctl.data.sources.flatten_fields)."""
    if isinstance(documents, (str, Path)):
        url = str(documents)
        if is_token_cache(url):
            raise NotImplementedYet(f"{url}: adding from a token cache is not supported yet",
                                    hint="add the text collection (TSV, JSONL, parquet) instead")
        # an empty document is added as an empty text, as `embedctl index` indexes one
        return list(iter_texts(beir_paths(url)[0] if is_beir_folder(url) else url, on_error="fail", allow_empty=True))
    out, seen = [], set()
    for n, item in enumerate(documents, start=1):
        if isinstance(item, dict):
            extra = flatten_fields({k: v for k, v in item.items() if k not in ("_id", "id", "text", "title")})
            rec = TextRecord(id=str(item["id"]), text=str(item["text"]), title=item.get("title"), line=n,
                             fields=extra or None)
        elif len(item) == 2:
            rec = TextRecord(id=str(item[0]), text=str(item[1]), title=None, line=n)
        else:
            rec = TextRecord(id=str(item[0]), text=str(item[2]), title=item[1], line=n)
        if rec.id in seen:
            raise InputError(f"duplicate document id {rec.id!r} (item {n})", hint="give each document one id")
        if not rec.text:
            raise InputError(f"document {rec.id!r} (item {n}) has no text", hint="drop it or give it a text")
        seen.add(rec.id)
        out.append(rec)
    return out


def add_documents(index_dir: str | Path, documents: str | Path | Iterable[Any], *,
                  options: UpdateOptions | None = None, encoder: Any = None, loaded: Any = None) -> dict[str, Any]:
    """Add (or replace, by id) documents to the index at ``index_dir``; returns a summary (counts, time,
    generation, drift; ``recluster``: why and how it re-clustered, None when it did not). ``encoder``:
    defaults to the model the index records (checked unchanged)."""
    opts = options or UpdateOptions()
    index_dir = Path(index_dir)
    started = time.perf_counter()
    if loaded is not None:  # settings `index add` would not use (another model, lengths, kind): refused
        M.refuse_ignored_settings(loaded, M.read_metadata(index_dir), index_dir, "`embedctl index add`")
    records = read_records(documents)  # before the lock: bad input changes nothing
    if not records:
        raise InputError("no documents to add", hint="give a collection with at least one document")
    with WriterLock(index_dir, what="index", wait_s=opts.lock_wait_s):
        gen = open_for_write(index_dir)
        new = next_generation(gen)
        written = ensure_id_tables(new)
        use_title = bool(((gen.meta.get("request") or {}).get("index") or {}).get("use_title", True))
        ids = [r.id for r in records]
        kind = index_kind(gen.kind)
        spec = PassageSpec.of_metadata(gen.meta)
        if spec is not None and encoder is None:  # the split needs the index's tokenizer, whatever its kind
            encoder = _load_index_encoder(gen)
        rows_of = ([[r] for r in records] if spec is None  # what each record's rows must be
                   else Splitter.for_tokenizer(encoder.tokenizer, spec).split_many(records, use_title))
        which, seg_of, local_of = locate(new, ids)
        present = np.zeros(len(records), dtype=bool)
        present[which] = True
        changed = _changed(new, rows_of, which, seg_of, local_of, use_title)
        add = [row for rows, p, c in zip(rows_of, present, changed, strict=True) if not p or c for row in rows]
        replaced = changed[which] if len(which) else np.zeros(0, dtype=bool)  # the rows of updated records
        summary = {"index": str(index_dir), "kind": gen.kind, "added": int(np.sum(~present)),
                   "updated": int(np.sum(present & changed)), "unchanged": int(np.sum(present & ~changed))}
        if spec is not None:
            summary["passages"] = len(add)
        if not add:
            abandon_change(index_dir, new.number)
            gen, merged = merge_small_segments(gen, opts.merge_factor)  # one a killed add left due
            return {**summary, **_state(gen), "encoded_docs": 0,
                    "drift": None, "merged": merged, "changed": bool(merged),
                    "seconds": round(time.perf_counter() - started, 3)}
        if encoder is None and kind.encodes:
            encoder = _load_index_encoder(gen)
        lexical = has_lexical(gen)
        reason = kind.recluster_reason(gen, len(add), opts)
        recluster = None
        if reason is not None:  # new centroids for every live document and the new ones: one new segment
            done = kind.recluster(gen, new, add, (seg_of[replaced], local_of[replaced]), use_title, encoder, reason,
                                  opts, lambda n: failpoint(f"add:recluster-{n}"))
            new.segments, new.codec, recluster = [done.segment], done.codec, done.record
            written += done.files
            if lexical:  # the one new segment gets the lexical side of its documents
                written += write_segment_lexical(new, done.segment)
            drift, encoded_docs, encode_s = None, done.encoded_docs, done.encode_s
        else:
            texts = [join_title(r, use_title) for r in add]
            seg_dir = segment_dir(new.number)
            seg = Segment(name=Path(seg_dir).name, dir=seg_dir, rows=len(add), docs=f"{seg_dir}/{M.DOCS_FILE}",
                          ids=f"{seg_dir}/{IDS_FILE}")
            t = time.perf_counter()
            encoded, encoded_docs = None, 0
            if kind.encodes:
                with Progress(len(add), "encoding", unit="docs", enabled=opts.progress) as bar:
                    encoded = encode_with_progress(encoder, texts, opts.batch_size, bar)
                encoded_docs = len(add)
            encode_s = time.perf_counter() - t
            failpoint("add:encoded")
            dim = int(encoder.dim) if kind.encodes else 0
            drift, files = kind.write_segment(new, seg, encoded, dim, opts, failpoint)
            written += files + _write_docs(new, seg, add, use_title)
            if lexical:
                seg.lexical, files = write_lexical(new.index_dir, seg.dir, texts)
                written += files
            written += write_tombstones(new, seg_of[replaced], local_of[replaced])
            new.segments.append(seg)
        new.drift = drift
        failpoint("add:segment-written")
        record_files(new, written)
        commit(new, "add")
        failpoint("add:committed")
        collect_garbage(index_dir)
        new, merged = merge_small_segments(new, opts.merge_factor)  # the newest segments, when enough are small
    seconds = time.perf_counter() - started
    return {**summary, **_state(new), "encoded_docs": encoded_docs, "drift": drift, "recluster": recluster,
            "merged": merged, "changed": True, "encode_s": round(encode_s, 3),
            "docs_per_s": round(encoded_docs / max(encode_s, 1e-9), 1), "seconds": round(seconds, 3)}


def delete_documents(index_dir: str | Path, ids: Iterable[str], *, options: UpdateOptions | None = None
                     ) -> dict[str, Any]:
    """Tombstone the documents of ``ids``; unknown ids are reported (refused, changing nothing, when
    ``options.strict``). Returns a summary (deleted, unknown, generation)."""
    opts = options or UpdateOptions()
    index_dir = Path(index_dir)
    started = time.perf_counter()
    ids = list(dict.fromkeys(str(i) for i in ids))
    with WriterLock(index_dir, what="index", wait_s=opts.lock_wait_s):
        gen = open_for_write(index_dir)
        new = next_generation(gen)
        written = ensure_id_tables(new)
        which, seg_of, local_of = locate(new, ids)
        known = np.zeros(len(ids), dtype=bool)
        known[which] = True
        unknown = [i for i, k in zip(ids, known, strict=True) if not k]
        if unknown and opts.strict:
            shown = ", ".join(repr(i) for i in unknown[:10]) + (" ..." if len(unknown) > 10 else "")
            raise EmbedctlError(f"{len(unknown)} of {len(ids)} id(s) are not in the index {index_dir}: {shown}; "
                                "nothing was deleted", hint="drop --strict to delete the others")
        summary = {"index": str(index_dir), "kind": gen.kind, "requested": len(ids),
                   "deleted": int(known.sum()), "unknown": unknown}
        if not known.any():
            abandon_change(index_dir, new.number)
            return {**summary, **_state(gen), "changed": False, "seconds": round(time.perf_counter() - started, 3)}
        written += write_tombstones(new, seg_of, local_of)  # every row of each id (all its passages)
        failpoint("delete:tombstones-written")
        record_files(new, written)
        commit(new, "delete")
        failpoint("delete:committed")
        collect_garbage(index_dir)
    return {**summary, **_state(new), "changed": True, "seconds": round(time.perf_counter() - started, 3)}


def read_id_file(path: str | Path) -> list[str]:
    """Ids to delete, one per line (blank lines skipped; rows end at newlines only, as every id file
    embedctl writes). An id holding a control character is refused naming its line: no index holds one."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError("no such file", path=str(path), hint="pass --ids FILE with one id per line") from exc
    ids = []
    for number, line in enumerate(text.split("\n"), start=1):
        doc_id = line.removesuffix("\r").strip()
        bad = next((c for c in doc_id if is_control_char(c)), None)
        if bad is not None:
            raise InputError(f"the id {doc_id!r} holds a control character ({bad!r}); no index holds such an id",
                             path=str(path), line=number, hint="one id per line, as the collection spells it")
        if doc_id:
            ids.append(doc_id)
    return ids


# -- helpers --------------------------------------------------------------------------------------------
def _state(gen: Generation) -> dict[str, Any]:
    return {"generation": gen.number, "documents": gen.num_docs, "deleted_rows": gen.deleted,
            "segments": len(gen.segments)}


def _changed(gen: Generation, rows_of: list[list[TextRecord]], which: np.ndarray, seg_of: np.ndarray,
             local_of: np.ndarray, use_title: bool) -> np.ndarray:
    """True where an id already in the index now has other rows (another text, or passages, or other
    fields): an update; False elsewhere. ``rows_of``: each record's rows as they would be written."""
    out = np.zeros(len(rows_of), dtype=bool)
    stored: dict[int, list[tuple]] = {}
    for s in np.unique(seg_of):
        where = np.flatnonzero(seg_of == s)
        seg = gen.segments[int(s)]
        rows = DocTable(gen.path(seg.docs)).rows(local_of[where])
        fields = FieldStore(gen.path(seg.fields) if seg.fields else None, seg.rows).rows_of(local_of[where])
        for j, old_fields in zip(where, fields, strict=True):
            title, text = rows[int(local_of[j])]
            stored.setdefault(int(which[j]), []).append(((title or None), text, old_fields))
    for r, old in stored.items():
        new = [(((row.title or None) if use_title else None), row.text, row.fields or {}) for row in rows_of[r]]
        out[r] = old != new
    return out


def _write_docs(gen: Generation, seg: Segment, records: list[TextRecord], use_title: bool) -> list[str]:
    with DocTableWriter(gen.path(seg.docs)) as writer:
        for r in records:
            writer.add(r.id, r.title if use_title else None, r.text, r.fields)
    save_npy(gen.path(seg.ids), id_table([r.id for r in records]))
    seg.fields = f"{seg.dir}/{FIELDS_FILE}" if writer.has_fields else None
    return [seg.docs, seg.ids] + ([seg.fields] if seg.fields else [])


def _load_index_encoder(gen: Generation) -> Any:
    encoder = load_encoder(M.model_config(gen.meta, default_device()))
    M.check_model_unchanged(gen.meta, encoder, gen.index_dir)
    return encoder
