"""Merging segments: a run of adjacent segments rewritten as one, nothing encoded again.

Every ``index add`` writes one new segment, so an index that takes small adds all day (a server answering
``POST /documents``) would grow a segment per add; and what every commit and every version open does
(list the files, check them, join the segments' IVFs for the searcher) grows with the segments: on the
trained SciFact ColBERT index of bench/bench_serve.py an add of 20 documents cost 470 ms of CPU with 1
segment and 626 ms with 56. So after each add the newest segments are merged as Lucene's log merge policy
does (``index.merge_factor`` F, default 10): a segment of n live documents sits on level floor(log_F n);
when F or more of the newest segments are on level L (with only smaller ones after them), for the lowest
such L, they and those smaller ones become one segment (a level up), and the check runs again. With adds of
equal size the index holds at most F - 1 segments per level, about (F - 1) log_F N in all, and each document
is copied about log_F N times over the index's life. ``index compact`` merges every segment (and drops the
deleted rows of all of them).

:func:`merge_run` writes the merged segment (documents, id table, fields, the kind's arrays: PLAID codes,
residuals and norms copied as stored with a new IVF; dense vectors read back; the BM25 side over the
merged texts), then a commit whose segments are those before the run, the merged one, those after it;
the tombstones of the merged segments' deleted rows are dropped with them. Like every change it writes
its files first and the commit last (a kill -9 leaves the previous version), under the writer lock the
caller holds.

Example::

    merge_plan([5000, 20, 20, 20], factor=3)   # (1, 4): the three segments of 20 become one
    merge_plan([5000, 300, 20, 20], factor=3)  # None: two of level 2 (the 20s), 300 is on level 5
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.index import meta as M
from embedctl.index.docs import DocTableWriter, iter_doc_batches
from embedctl.index.fields import segment_fields
from embedctl.index.files import FIELDS_FILE, segment_dir
from embedctl.index.generations import (
    IDS_FILE,
    Generation,
    Segment,
    begin_change,
    collect_garbage,
    commit,
    record_files,
)
from embedctl.index.idtable import id_table
from embedctl.index.kinds import index_kind
from embedctl.index.lexical import has_lexical, write_segment_lexical
from embedctl.util.failpoints import failpoint
from embedctl.util.io import save_npy


def next_generation(gen: Generation) -> Generation:
    """A copy of ``gen`` numbered as the next version (the segments' records copied, not shared)."""
    out = copy.deepcopy(gen)
    out.number = gen.number + 1
    return out


def merge_level(documents: int, factor: int) -> int:
    """floor(log_factor(documents)); 0 below ``factor`` documents."""
    level = 0
    while documents >= factor:
        documents //= factor
        level += 1
    return level


def merge_plan(live_rows: list[int], factor: int) -> tuple[int, int] | None:
    """The run of segments to merge (``first``, ``last``: segments[first:last], the newest ones): for the
    lowest level L where the newest segments of level <= L (back to the first one above L) hold at least
    ``factor`` of level L itself; None when no merge is due or ``factor`` < 2 (merging off). Counting only
    level L keeps a large old segment out of a merge of small new ones. ``live_rows``: each segment's live
    documents, oldest first."""
    if factor < 2 or len(live_rows) < factor:
        return None
    levels = [merge_level(n, factor) for n in live_rows]
    for level in sorted(set(levels)):
        first = len(levels)
        while first > 0 and levels[first - 1] <= level:
            first -= 1
        if levels[first:].count(level) >= factor:
            return first, len(levels)
    return None


def merge_small_segments(gen: Generation, factor: int) -> tuple[Generation, list[dict[str, Any]]]:
    """Merge the newest segments of ``gen`` (the index's newest version, just committed or opened by the
    caller, who holds the writer lock) while :func:`merge_plan` asks for it: (the version after them, one
    ``{"segments", "documents", "generation"}`` per merge, in order). Each merge's version is the next one's
    start (the commit just written, not read back)."""
    merges = []
    while (plan := merge_plan([s.rows - s.deleted for s in gen.segments], factor)) is not None:
        if sum(s.rows - s.deleted for s in gen.segments[plan[0]:plan[1]]) == 0:
            break  # nothing live to merge: those segments go at the next compact
        begin_change(gen.index_dir, gen.number + 1)
        gen = merge_run(gen, *plan, command="merge")
        merges.append({"segments": plan[1] - plan[0], "documents": gen.segments[plan[0]].rows,
                       "generation": gen.number})
    return gen, merges


def merge_run(gen: Generation, first: int, last: int, command: str) -> Generation:
    """Write segments[first:last] of ``gen`` (its live rows, in order) as one segment and commit the version
    that holds it in their place (``begin_change`` of the next number already made); returns that version."""
    new = next_generation(gen)
    seg_dir = segment_dir(new.number)
    masks = [gen.live_mask(s) if first <= i < last else np.zeros(s.rows, dtype=bool)
             for i, s in enumerate(gen.segments)]
    rows = int(sum(int(m.sum()) for m in masks))
    seg = Segment(name=Path(seg_dir).name, dir=seg_dir, rows=rows, docs=f"{seg_dir}/{M.DOCS_FILE}",
                  ids=f"{seg_dir}/{IDS_FILE}")
    written = _merge_docs(gen, seg, masks)
    written += index_kind(gen.kind).merge_segments(gen, seg, masks, lambda n: failpoint(f"{command}:{n}"))
    if has_lexical(gen):  # BM25 over the merged documents: the statistics of one fresh segment again
        written += write_segment_lexical(gen, seg)
    new.segments = new.segments[:first] + [seg] + new.segments[last:]
    failpoint(f"{command}:segment-written")
    record_files(new, written)
    commit(new, command)
    failpoint(f"{command}:committed")
    collect_garbage(gen.index_dir)
    return new


def _merge_docs(gen: Generation, seg: Segment, masks: list[np.ndarray]) -> list[str]:
    """The live rows' documents, fields and ids (``masks``: the rows taken, per segment), in order."""
    ids: list[str] = []
    with DocTableWriter(gen.path(seg.docs)) as writer:
        for old, mask in zip(gen.segments, masks, strict=True):
            if not mask.any():
                continue
            fields = segment_fields(gen, old).all_rows()
            row = 0
            for batch_ids, titles, texts in iter_doc_batches(gen.path(old.docs)):
                for j, (doc_id, title, text) in enumerate(zip(batch_ids, titles, texts, strict=True)):
                    if mask[row + j]:
                        writer.add(doc_id, title, text, fields[row + j])
                        ids.append(doc_id)
                row += len(batch_ids)
    save_npy(gen.path(seg.ids), id_table(ids))
    seg.fields = f"{seg.dir}/{FIELDS_FILE}" if writer.has_fields else None
    return [seg.docs, seg.ids] + ([seg.fields] if seg.fields else [])
