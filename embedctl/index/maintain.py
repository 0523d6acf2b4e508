"""`embedctl index compact | info`: merge an index's segments, and say what an index holds.

:func:`compact_index` writes the live documents of every segment, in order, into one new segment (PLAID:
their codes, residuals and norms copied as they are, in chunks of the build's ``chunk_size``, and a new
IVF; dense: the stored vectors read back into one faiss index of the same type) and commits it: the
tombstoned rows and the old segments are gone from the new generation, so size and speed are those of
a fresh build. Nothing is encoded again and the codec is kept (centroids grown by ``expand`` included).
:func:`index_info` reports documents, deleted rows, segments, bytes, version (the generation), model,
backend and the last drift measurement; ``verify=True`` re-reads every file against its sha256.

Example::

    compact_index("indexes/scifact")    # {"generation": 5, "segments": 1, "removed_rows": 130, ...}
    index_info("indexes/scifact")["documents"]
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.errors import EmbedctlError
from embedctl.index import meta as M
from embedctl.index import plaid_segments as PS
from embedctl.index.dense_segments import reconstruct, write_dense_segment
from embedctl.index.docs import DocTableWriter, iter_doc_batches
from embedctl.index.generations import (
    DENSE_FILE,
    IDS_FILE,
    Generation,
    Segment,
    collect_garbage,
    commit,
    open_generation,
    record_files,
    segment_dir,
    verify,
)
from embedctl.index.idtable import id_table
from embedctl.index.plaid.ivf import ranges_index
from embedctl.index.plaid_files import open_plaid
from embedctl.index.update import UpdateOptions, _state, kill_point, next_generation, open_for_write
from embedctl.util.io import save_npy
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
            return {"index": str(index_dir), "kind": gen.kind, **before, **_state(gen), "changed": False,
                    "seconds": round(time.perf_counter() - started, 3)}
        if gen.num_docs == 0:
            raise EmbedctlError(f"every document of {index_dir} is deleted: there is nothing to compact into",
                                hint="add documents first (`embedctl index add`), or build a new index")
        new = next_generation(gen)
        seg_dir = segment_dir(new.number)
        seg = Segment(name=Path(seg_dir).name, dir=seg_dir, rows=gen.num_docs, docs=f"{seg_dir}/{M.DOCS_FILE}",
                      ids=f"{seg_dir}/{IDS_FILE}")
        masks = [gen.live_mask(s) for s in gen.segments]
        written = _merge_docs(gen, seg, masks)
        if gen.kind == "plaid":
            written += _merge_plaid(gen, seg)
        else:
            written += _merge_dense(gen, seg, masks)
        new.segments = [seg]
        kill_point("compact:segment-written")
        record_files(new, written)
        commit(new, "compact")
        kill_point("compact:committed")
        collect_garbage(index_dir)
    return {"index": str(index_dir), "kind": gen.kind, **before, **_state(new), "bytes": generation_bytes(new),
            "changed": True, "seconds": round(time.perf_counter() - started, 3)}


def _merge_docs(gen: Generation, seg: Segment, masks: list[np.ndarray]) -> list[str]:
    ids: list[str] = []
    with DocTableWriter(gen.path(seg.docs)) as writer:
        for old, mask in zip(gen.segments, masks, strict=True):
            row = 0
            for batch_ids, titles, texts in iter_doc_batches(gen.path(old.docs)):
                for j, (doc_id, title, text) in enumerate(zip(batch_ids, titles, texts, strict=True)):
                    if mask[row + j]:
                        writer.add(doc_id, title, text)
                        ids.append(doc_id)
                row += len(batch_ids)
    save_npy(gen.path(seg.ids), id_table(ids))
    return [seg.docs, seg.ids]


def _merge_plaid(gen: Generation, seg: Segment) -> list[str]:
    """Copy the live documents' codes, residuals and norms chunk by chunk (a build's chunk size)."""
    arrays = open_plaid(gen)
    live = np.flatnonzero(~arrays.deleted) if arrays.deleted is not None else np.arange(len(arrays.doclens))
    offsets = np.concatenate([[0], np.cumsum(arrays.doclens)]).astype(np.int64)
    chunk_size = int(gen.meta["plaid"].get("chunk_size") or 25_000)
    codec = PS.load_codec(gen)
    backend = PS.recorded_backend(gen.meta)

    def chunks():
        for lo in range(0, len(live), chunk_size):
            pids = live[lo:lo + chunk_size]
            lens = arrays.doclens[pids]
            idx = ranges_index(offsets[pids], lens)
            codes, packed, norms = _gather(arrays, idx)
            yield codes, packed, lens, norms  # copied as stored: nothing is encoded or compressed again

    seg.plaid, written = PS.write_plaid_segment(gen.index_dir, seg.dir, chunks(), codec, backend,
                                                lambda n: kill_point(f"compact:{n}"))
    return written


def _gather(arrays: Any, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """codes, packed residuals and norms of sorted global vector indices, across chunk files."""
    starts = arrays.chunk_emb_starts
    bounds = np.searchsorted(idx, starts)
    parts = []
    for i in range(len(arrays.codes)):
        lo, hi = bounds[i], bounds[i + 1]
        if hi > lo:
            local = idx[lo:hi] - starts[i]
            parts.append((np.take(arrays.codes[i], local), np.take(arrays.residuals[i], local, axis=0),
                          np.take(arrays.norms[i], local)))
    if not parts:
        nbytes = arrays.residuals[0].shape[1] if arrays.residuals else 0
        return np.zeros(0, np.int32), np.zeros((0, nbytes), np.uint8), np.zeros(0, np.float16)
    return tuple(np.concatenate(p) for p in zip(*parts, strict=True))  # type: ignore[return-value]


def _merge_dense(gen: Generation, seg: Segment, masks: list[np.ndarray]) -> list[str]:
    vectors = [reconstruct(gen.path(old.rel(DENSE_FILE)))[mask] for old, mask in zip(gen.segments, masks, strict=True)]
    seg.dense, rel = write_dense_segment(gen, seg.dir, np.concatenate(vectors))
    return [rel]


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
    ``segments``, ``bytes``, ``version`` and more; ``verify_files`` adds ``verify`` (problems found by
    re-reading every file against its recorded sha256; empty when all is well)."""
    index_dir = Path(index_dir)
    gen = open_generation(index_dir)
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
    }
    if gen.kind == "plaid":
        out["num_partitions"] = int(gen.codec["num_partitions"])
        out["built_partitions"] = int(meta["plaid"]["num_partitions"])
    if verify_files:
        out["verify"] = verify(gen)
    return out
