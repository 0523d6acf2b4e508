"""A PLAID add that re-clusters (embedctl.index.recluster; the real `minilm` as a ColBERT): when the rule
triggers and when not, a grown small index that re-clustered equals a fresh build of the same documents
(byte for byte and in its results), and the re-clustered codec serves later adds and compaction. kill -9
during a re-clustering add: tests/index/test_lifecycle_kill.py ("recluster")."""

from __future__ import annotations

import dataclasses

import pytest
from support.lifecycle import (
    COLBERT,
    Searcher,
    build_base,
    copy_index,
    corpus_lines,
    invoke,
    tree_digest,
    write_tsv,
)

from embedctl.index import add_documents, compact_index, delete_documents, index_info
from embedctl.index.generations import open_generation
from embedctl.index.kinds import KINDS
from embedctl.index.recluster import codec_counts, recluster_reason
from embedctl.index.update import UpdateOptions

NEW = [("n1", "Sailors on long voyages got scurvy until lemons brought them vitamin C."),
       ("d5", "Document 5 now talks about penguins in the Antarctic."),
       ("n2", "Bees dance to tell each other where the flowers are.")]
QUERIES = ["scurvy on long sea voyages", "penguins in the antarctic", "jazz improvisation", "Document 7 volcanoes"]
QUIET = UpdateOptions(progress=False)
OFF = dataclasses.replace(QUIET, recluster_below_docs=0, recluster_add_ratio=None)


@pytest.fixture(scope="module")
def work(module_tmp):
    return module_tmp("recluster")


@pytest.fixture(scope="module")
def base(work):
    return build_base(work)


@pytest.fixture(scope="module")
def searcher():
    return Searcher()


@pytest.fixture()
def index(base, tmp_path):
    return copy_index(base, tmp_path / "indexes" / "idx")


def test_the_rule_small_index_or_large_add_counted_since_training(index, searcher):
    gen = open_generation(index)
    assert codec_counts(gen) == (40, 0)
    assert "fewer than index.recluster_below_docs=1000" in recluster_reason(gen, 1, 1000, 1.0)
    assert recluster_reason(gen, 1, 40, 1.0) is None  # 40 documents: not fewer than 40
    assert recluster_reason(gen, 39, 0, 1.0) is None  # 39 added to a codec trained on 40
    assert "40 document(s) added since its centroids were trained on 40" in recluster_reason(gen, 40, 0, 1.0)
    assert recluster_reason(gen, 20, 0, 0.5) is not None and recluster_reason(gen, 10**6, 0, None) is None
    # adds that do not re-cluster count towards the next one: 30 now, then 10 more reach 1.0 x 40
    summary = add_documents(index, [(f"a{i}", f"Added text number {i} about tides.") for i in range(30)],
                            options=dataclasses.replace(OFF, recluster_add_ratio=1.0), encoder=searcher.encoder)
    assert summary["recluster"] is None and summary["segments"] == 2
    gen = open_generation(index)
    assert codec_counts(gen) == (40, 30) and gen.codec["added_docs"] == 30
    assert recluster_reason(gen, 9, 0, 1.0) is None and recluster_reason(gen, 10, 0, 1.0) is not None
    # through the CLI: the line says it re-clustered and why; the new codec starts counting afresh
    batch = NEW + [(f"b{i}", f"Batch text {i} about protein folding.") for i in range(7)]  # 9 new, 1 update
    res = invoke("index", "add", "--index", str(index), "--collection", str(write_tsv(index.parent / "b.tsv", batch)),
                 "index.recluster_below_docs=0")
    assert res.exit_code == 0, res.output
    assert "re-clustered: 40 document(s) added since its centroids were trained on 40" in res.stderr
    assert "79 documents, 1 segment(s)" in res.stderr
    gen = open_generation(index)
    assert codec_counts(gen) == (79, 0) and gen.deleted == 0 and len(gen.segments) == 1
    assert recluster_reason(gen, 78, 0, 1.0) is None and recluster_reason(gen, 79, 0, 1.0) is not None


def test_dense_indexes_never_recluster(index):
    gen = open_generation(index)
    assert KINDS["dense"].recluster_reason(gen, 10**6, QUIET) is None
    assert KINDS["plaid"].recluster_reason(gen, 10**6, QUIET) is not None


def test_a_grown_small_index_equals_a_fresh_build_of_its_documents(index, work, searcher):
    delete_documents(index, ["d7"])  # a tombstoned row, and an update (d5): neither is carried over
    summary = add_documents(index, NEW, options=QUIET, encoder=searcher.encoder)
    rc = summary["recluster"]
    assert "39 document(s), fewer than index.recluster_below_docs=1000" in rc["reason"]
    assert (rc["documents"], rc["encoded_docs"], summary["documents"], summary["segments"]) == (41, 41, 41, 1)
    assert summary["drift"] is None and index_info(index, verify_files=True)["verify"] == []
    # the same documents in the same order, built at once with the same settings
    rows = [r for r in corpus_lines() if r[0] not in ("d5", "d7")] + NEW
    coll = write_tsv(work / "fresh.tsv", rows)
    res = invoke("index", "--collection", str(coll), "--root", str(work / "indexes"), "--name", "fresh", *COLBERT)
    assert res.exit_code == 0, res.output
    fresh = work / "indexes" / "fresh"
    grown, built = tree_digest(index), tree_digest(fresh)
    arrays = sorted(k for k in built if k.startswith("plaid/"))
    assert len(arrays) == 10  # one chunk's four arrays, the codec's four, the IVF's two
    assert [k for k in arrays if grown[f"segments/g000002/{k}"] != built[k]] == []
    for query in QUERIES:
        for extra in ((), ("search.exhaustive=true",)):
            assert searcher.hits(index, query, 10, *extra) == searcher.hits(fresh, query, 10, *extra)


def test_the_new_codec_serves_later_adds_deletes_and_compaction(index, searcher):
    add_documents(index, NEW, options=QUIET, encoder=searcher.encoder)
    codec = open_generation(index).codec
    assert codec["files"]["centroids"] == "segments/g000001/plaid/centroids.npy"
    late = [("late", "Glaciers carve fjords over thousands of years.")]
    summary = add_documents(index, late, options=OFF, encoder=searcher.encoder)
    assert summary["recluster"] is None and summary["drift"]["ratio"] > 0  # measured against the new codec
    delete_documents(index, ["n2"])
    assert compact_index(index, options=QUIET)["segments"] == 1
    gen = open_generation(index)
    assert gen.codec["files"] == codec["files"] and codec_counts(gen) == (42, 1)
    assert index_info(index, verify_files=True)["verify"] == []
    assert "late" in searcher.ids(index, late[0][1], 3)  # (the untrained head ranks loosely: top 3)
    assert "n2" not in searcher.ids(index, NEW[2][1], 50, "search.exhaustive=true")
