"""The log merge policy after `index add` (embedctl.index.merge): which segments merge, and that a merged
index answers exactly as the same adds without merging, on real PLAID and dense indexes of the embedded
model (kill -9 inside a merge: tests/index/test_lifecycle_kill.py)."""

from __future__ import annotations

import numpy as np
import pytest
from support.lifecycle import Searcher, build_base, copy_index, write_tsv

from embedctl.index import add_documents, delete_documents, index_info
from embedctl.index.generations import open_generation
from embedctl.index.merge import merge_level, merge_plan
from embedctl.index.update import UpdateOptions

BATCHES = [[(f"n{b}-{i}", f"Added batch {b} document {i} is about {topic}.") for i, topic in
            enumerate(["sea otters and kelp", "vitamin C and scurvy", "glaciers melting"])] for b in range(7)]
QUERIES = ["vitamin C and scurvy", "sea otters", "glaciers", "faiss and dense vectors"]


@pytest.mark.parametrize("rows,factor,plan", [  # levels in base 3: 20 -> 2, 100 -> 4, 300 -> 5, 5000 -> 7
    ([5000, 20, 20, 20], 3, (1, 4)),           # three small ones of one level
    ([5000, 300, 20, 20], 3, None),            # two of level 2, one of level 5
    ([5000, 300, 300, 100, 20, 20], 3, None),  # no level has three
    ([5000, 300, 300, 300, 20], 3, (1, 5)),    # three of level 5 and the smaller one after them
    ([2000] + [20] * 9, 10, None),             # a big old segment never joins a merge of small ones
    ([2000] + [20] * 10, 10, (1, 11)),
    ([20, 20, 20], 1, None),                   # merging off
    ([20, 20, 20], 0, None),
    ([], 10, None),
])
def test_merge_plan(rows, factor, plan):
    assert merge_plan(rows, factor) == plan


def test_merge_levels():
    assert [merge_level(n, 10) for n in (0, 1, 9, 10, 99, 100, 2000)] == [0, 0, 0, 1, 1, 2, 3]


def _add(index, rows, work, name, factor):
    return add_documents(index, write_tsv(work / f"{name}.tsv", rows),
                         options=UpdateOptions(progress=False, recluster_below_docs=0, merge_factor=factor))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["plaid", "dense"])
def test_merged_index_answers_as_the_unmerged_one(tmp_path, kind):
    """Seven adds of three documents (a delete between them) with merge_factor 3 against merging off: four
    segments against eight, the same hits with the same scores, every file verified, deletes kept."""
    base = build_base(tmp_path, extra=() if kind == "plaid" else ("model.kind=biencoder",))
    merged, plain = copy_index(base, tmp_path / "merged"), copy_index(base, tmp_path / "plain")
    summaries = []
    for b, rows in enumerate(BATCHES):
        summaries.append(_add(merged, rows, tmp_path, f"m{b}", 3))
        _add(plain, rows, tmp_path, f"p{b}", 0)
        if b == 2:  # a deleted row inside segments that merge later: still gone after
            for index in (merged, plain):
                delete_documents(index, ["n1-0", "d3"])
    assert len(open_generation(plain).segments) == 1 + len(BATCHES)
    segments = open_generation(merged).segments
    # levels in base 3: three segments of 3 (level 1) -> 9, less the deleted n1-0 -> 8 (level 1 again): with
    # two more of 3 it makes three of level 1 -> 14; then two of 3 wait for a third
    assert [s.rows for s in segments] == [40, 14, 3, 3]
    assert [[m["segments"] for m in s["merged"]] for s in summaries] == [[], [], [3], [], [3], [], []]
    assert summaries[-1]["generation"] == open_generation(merged).number
    assert sum(s.deleted for s in segments[1:]) == 0  # the merged segments dropped their deleted rows
    for index in (merged, plain):
        info = index_info(index, verify_files=True)
        assert info["verify"] == [] and info["documents"] == 40 + 3 * len(BATCHES) - 2
    searcher = Searcher()
    for query in QUERIES:
        got, want = searcher.hits(merged, query, 10), searcher.hits(plain, query, 10)
        assert [h[0] for h in got] == [h[0] for h in want]
        np.testing.assert_allclose([h[1] for h in got], [h[1] for h in want], rtol=0, atol=1e-6)
        assert not {"n1-0", "d3"} & {h[0] for h in got}


@pytest.mark.slow
def test_an_add_with_nothing_new_still_merges_what_is_due(tmp_path):
    """A rerun add (nothing to encode) merges when a merge is due (as after a kill between an add's commit and
    its merge): the version after equals an uninterrupted add's."""
    base = build_base(tmp_path)
    for b in range(3):
        _add(base, BATCHES[b], tmp_path, f"a{b}", 0)  # three small segments, merging off
    assert len(open_generation(base).segments) == 4
    again = _add(base, BATCHES[2], tmp_path, "again", 3)
    assert again["encoded_docs"] == 0 and again["changed"] and again["merged"][0]["segments"] == 3
    assert len(open_generation(base).segments) == 2 and again["segments"] == 2
    assert index_info(base, verify_files=True)["verify"] == []
