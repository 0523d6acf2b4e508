"""`embedctl index compact | info`: merge an index's segments, and say what an index holds.

:func:`compact_index` writes the live documents of every segment, in order, into one new segment (PLAID:
their codes, residuals and norms copied as they are, in chunks of the build's ``chunk_size``, and a new
IVF; dense: the stored vectors read back into one faiss index of the same type) and commits it: the
tombstoned rows and the old segments are gone from the new generation, so size and speed are those of
a fresh build. Nothing is encoded again and the codec is kept (centroids grown by ``expand`` included).
:func:`index_info` reports documents, deleted rows, segments, bytes, version (the generation), model,
backend, the last drift measurement, whether it keeps a lexical side and its field names; ``verify=True`` re-reads every file against its sha256.

Example::

    compact_index("indexes/scifact")    # {"generation": 5, "segments": 1, "removed_rows": 130, ...}
    index_info("indexes/scifact")["documents"]
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from embedctl.errors import EmbedctlError
from embedctl.index import meta as M
from embedctl.index.fields import segment_fields
from embedctl.index.generations import (
    Generation,
    abandon_change,
    changed_after_commit,
    check_follows_parent,
    lost_commit_problems,
    open_generation,
    verify,
)
from embedctl.index.kinds import index_kind
from embedctl.index.lexical import has_lexical
from embedctl.index.merge import merge_run
from embedctl.index.passages import PassageSpec, live_documents
from embedctl.index.update import UpdateOptions, _state, open_for_write
from embedctl.util.lock import WriterLock


def compact_index(index_dir: str | Path, *, options: UpdateOptions | None = None) -> dict[str, Any]:
    """Merge every segment's live documents into one segment (no re-encoding); a no-op on an index of one
    segment without deletes. Returns a summary (rows removed, segments before, bytes before and after)."""
    opts = options or UpdateOptions()
    index_dir = Path(index_dir)
    started = time.perf_counter()
    with WriterLock(index_dir, what="index", wait_s=opts.lock_wait_s):
        gen = open_for_write(index_dir)
        before = {"segments_before": len(gen.segments), "bytes_before": generation_bytes(gen),
                  "removed_rows": gen.deleted}
        if len(gen.segments) == 1 and gen.deleted == 0:
            abandon_change(index_dir, gen.number + 1)
            return {"index": str(index_dir), "kind": gen.kind, **before, **_state(gen), "changed": False,
                    "seconds": round(time.perf_counter() - started, 3)}
        if gen.num_docs == 0:
            raise EmbedctlError(f"every document of {index_dir} is deleted: there is nothing to compact into",
                                hint="add documents first (`embedctl index add`), or build a new index")
        new = merge_run(gen, 0, len(gen.segments), command="compact")
    return {"index": str(index_dir), "kind": gen.kind, **before, **_state(new), "bytes": generation_bytes(new),
            "changed": True, "seconds": round(time.perf_counter() - started, 3)}


def generation_bytes(gen: Generation) -> int:
    """Bytes of the files the generation uses (its arrays, documents, id tables, tombstones, commit)."""
    total = 0
    for rel in gen.referenced() | {M.META_FILE}:
        path = gen.path(rel)
        if path.is_file():
            total += path.stat().st_size
    return total


def index_info(index_dir: str | Path, verify_files: bool = False) -> dict[str, Any]:
    """What the index holds (the JSON of `embedctl index info --json`): ``documents``, ``deleted``,
    ``segments``, ``bytes``, ``version`` and more (``warnings``: files of a later change than the newest
    commit, whose commit file was lost); ``verify_files`` adds ``verify`` (problems found by
    re-reading every file against its recorded sha256; empty when all is well)."""
    index_dir = Path(index_dir)
    gen = open_generation(index_dir, check=False)  # info reports what is wrong (--verify) instead of refusing
    meta = gen.meta
    on_disk = sum(p.stat().st_size for p in index_dir.rglob("*") if p.is_file())
    out: dict[str, Any] = {
        "index": str(index_dir), "kind": gen.kind, "documents": gen.num_docs, "deleted": gen.deleted,
        "segments": len(gen.segments), "bytes": generation_bytes(gen), "bytes_on_disk": on_disk,
        "version": gen.number, "last_change": gen.command,
        "model": (meta.get("model") or {}).get("name_or_path"), "backend": meta.get("backend"),
        "format": f"{meta['format']} {meta['format_version']}",
        "segment_list": [{"name": s.name, "rows": s.rows, "deleted": s.deleted} for s in gen.segments],
        "drift": gen.drift,
        "lexical": has_lexical(gen),
        "fields": sorted({name for s in gen.segments for name in segment_fields(gen, s).types()}),
        **index_kind(gen.kind).describe(gen),
    }
    if PassageSpec.of_metadata(meta) is not None:  # rows are passages: `documents` counts distinct ids
        out["passages"] = {**(meta.get("passages") or {}), "rows": gen.num_docs}
        out["documents"] = live_documents(gen)
    lost = lost_commit_problems(index_dir, gen.number)  # one listing: always said, never silently undone
    try:
        check_follows_parent(gen)
    except EmbedctlError as err:
        lost = [*lost, err.message]
    out["warnings"] = lost
    if verify_files:
        out["verify"] = verify(gen) + lost + changed_after_commit(gen)
    return out
