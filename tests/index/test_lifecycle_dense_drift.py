"""Dense indexes (flat, IVF, HNSW; the real `minilm` bi-encoder) live the same life as PLAID ones: add,
update, delete, compact; and PLAID drift: measured on every add, reported as a rebuild due or answered by
new centroids (index.drift_action=expand)."""

from __future__ import annotations

import numpy as np
import pytest
from support.lifecycle import COLBERT, INCREMENTAL, Searcher, corpus_lines, invoke, write_tsv

from embedctl.index import add_documents, compact_index, delete_documents, index_info
from embedctl.index.generations import open_generation
from embedctl.index.update import UpdateOptions

NEW = [("n1", "Sailors on long voyages got scurvy until lemons brought them vitamin C."),
       ("d4", "Document 4 now explains how penguins survive the Antarctic winter.")]
QUIET = UpdateOptions(progress=False)


@pytest.fixture(scope="module")
def searcher():
    return Searcher()


@pytest.mark.parametrize("dense_type,knobs", [("flat", []), ("ivf", ["index.ivf_nlist=2"]),
                                              ("hnsw", ["index.hnsw_m=8"])])
def test_dense_add_update_delete_compact(tmp_path, searcher, dense_type, knobs):
    coll = write_tsv(tmp_path / "c.tsv", corpus_lines(80))
    res = invoke("index", "--collection", str(coll), "--root", str(tmp_path / "idx"), "--name", "d",
                 "model.doc_max_length=48", f"index.dense_type={dense_type}", *knobs)
    assert res.exit_code == 0, res.output
    index = tmp_path / "idx" / "d"
    extra = ("search.nprobe=2",) if dense_type == "ivf" else ()
    searcher.session(index)  # loads the bi-encoder once for this index kind
    enc = searcher.encoder if searcher.encoder.kind == "biencoder" else None
    summary = add_documents(index, NEW, options=QUIET, encoder=enc)
    assert (summary["added"], summary["updated"], summary["segments"]) == (1, 1, 2)
    assert searcher.ids(index, "penguins in the antarctic winter", 1, *extra) == ["d4"]
    assert searcher.ids(index, "scurvy, lemons and vitamin C on voyages", 1, *extra) == ["n1"]
    delete_documents(index, ["n1", "d7"])
    every = searcher.ids(index, "document", 1000, *extra)  # k beyond the index
    assert "n1" not in every and "d7" not in every and every.count("d4") == 1
    if dense_type == "flat":
        assert len(every) == 79
    before = searcher.hits(index, "volcanoes and lava", 5, *extra)
    assert compact_index(index, options=QUIET)["segments"] == 1
    info = index_info(index, verify_files=True)
    assert (info["documents"], info["deleted"], info["segments"], info["verify"]) == (79, 0, 1, [])
    after = searcher.hits(index, "volcanoes and lava", 5, *extra)
    if dense_type != "hnsw":  # the same stored vectors (HNSW: a new graph, approximately the same)
        assert [i for i, _ in before] == [i for i, _ in after]
        np.testing.assert_allclose([s for _, s in before], [s for _, s in after], rtol=1e-5)
    searcher.encoder = None  # the next index may be another kind


def test_plaid_drift_is_reported_or_answered_with_new_centroids(tmp_path, searcher):
    coll = write_tsv(tmp_path / "c.tsv", corpus_lines(40))
    res = invoke("index", "--collection", str(coll), "--root", str(tmp_path / "idx"), "--name", "p", *COLBERT)
    assert res.exit_code == 0, res.output
    index = tmp_path / "idx" / "p"
    built = open_generation(index).codec["num_partitions"]
    far = [(f"f{i}", text) for i, text in enumerate([
        "Quantum chromodynamics describes gluons binding quarks.", "Baroque fugues weave several voices.",
        "Sourdough bread rises thanks to wild yeast.", "Glaciers carve fjords over millennia."] * 4)]
    far = [(f"f{i}", f"{text} Variation {i}.") for i, (_, text) in enumerate(far)]
    res = invoke("index", "add", "--index", str(index), "--collection", str(write_tsv(tmp_path / "far.tsv", far[:8])),
                 *INCREMENTAL)
    assert res.exit_code == 0, res.output
    assert "a rebuild is due" in res.stderr  # warn (the default): said, nothing else changed
    drift = index_info(index)["drift"]
    assert drift["action"] == "rebuild_due" and drift["ratio"] > drift["threshold"]
    assert open_generation(index).codec["num_partitions"] == built
    res = invoke("index", "add", "--index", str(index), "--collection", str(write_tsv(tmp_path / "far2.tsv", far[8:])),
                 "index.drift_action=expand", *INCREMENTAL)
    assert res.exit_code == 0, res.output
    assert "centroid(s) added" in res.stderr
    info = index_info(index, verify_files=True)
    assert info["drift"]["action"] == "expanded" and info["drift"]["ratio_after"] < info["drift"]["ratio"]
    assert info["num_partitions"] == built + info["drift"]["new_centroids"] and info["verify"] == []
    assert "f9" in searcher.ids(index, far[9][1], 3)
    assert compact_index(index, options=QUIET)["segments"] == 1  # the grown codec survives compaction
    assert index_info(index)["num_partitions"] == info["num_partitions"]
    assert "f9" in searcher.ids(index, far[9][1], 3)
