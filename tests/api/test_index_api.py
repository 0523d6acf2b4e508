"""embedctl.Index and embedctl.Encoder (embedctl.api) on both kinds with the real `minilm`: every method,
its errors, versions and refresh, and that `import embedctl` stays free of torch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from support.lifecycle import COLBERT, corpus_lines, invoke, write_tsv

import embedctl
from embedctl.errors import EmbedctlError, InputError

KINDS = {"plaid": COLBERT, "dense": ["index.batch_size=16"]}


@pytest.fixture(scope="module", params=sorted(KINDS))
def built(request, module_tmp):
    work = module_tmp(f"api-{request.param}")
    coll = write_tsv(work / "corpus.tsv", corpus_lines())
    idx = embedctl.Index.build(coll, work / "indexes" / "idx", overrides=KINDS[request.param])
    return idx


def test_build_reports_and_opens_the_kind_the_model_asks_for(built):
    assert built.summary["num_docs"] == 40 and built.kind == built.summary["kind"]
    assert built.version == 0 and len(built) == 40
    timings = built.summary["metadata"]["timings"]  # the reported seconds cover every stage, BM25's too
    assert built.summary["seconds"] >= timings["prepare_s"] + timings["build_s"] + timings.get("lexical_s", 0)
    again = embedctl.Index.open(built.path)
    assert again.kind == built.kind and again.summary is None


def test_search_one_and_many_queries_return_hits_best_first(built):
    hits = built.search("Document 3 is about mitochondria in cells", k=5)
    assert len(hits) == 5 and all(isinstance(h, embedctl.Hit) for h in hits)
    # the five documents on mitochondria first (corpus_lines: one topic every 8), d3 among them; which of them is
    # first is within the codec's noise: their exact MaxSim (uncompressed vectors) ranks d19, d27, d3 within 0.3
    assert {h.id for h in hits} == {"d3", "d11", "d19", "d27", "d35"} and hits[0].title is None
    assert next(h for h in hits if h.id == "d3").text.startswith("Document 3")
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    many = built.search(["ocean tides and the moon", "jazz improvisation"], k=3)
    assert [len(m) for m in many] == [3, 3]
    assert many[0][0].id == built.search("ocean tides and the moon", k=1)[0].id
    assert built.search("volcanoes", k=2, text=False)[0].text is None
    # never more hits than documents (PLAID: only the candidates its probed centroids hold)
    assert len(built.search("anything", k=100)) == 40 if built.kind == "dense" else 0 < len(built.search("x", k=100)) <= 40


def test_batched_search_equals_one_at_a_time(built):
    queries = [f"{t}, part {i}" for i, t in enumerate(["protein folding", "faiss and dense vectors", "BM25"])]
    batched = built.search(queries, k=4)
    for query, hits in zip(queries, batched, strict=True):
        single = built.search(query, k=4)
        assert [h.id for h in hits] == [h.id for h in single]
        np.testing.assert_allclose([h.score for h in hits], [h.score for h in single], rtol=1e-5)


def test_bad_calls_fail_with_the_fix(built, tmp_path):
    with pytest.raises(EmbedctlError, match="search.k"):
        built.search("x", k=0)
    with pytest.raises(InputError, match="no tokens the model can read"):
        built.search("", k=3)
    with pytest.raises(EmbedctlError, match="no index at") as err:
        embedctl.Index.open(tmp_path / "nowhere")
    assert "embedctl index --collection" in err.value.hint
    with pytest.raises(EmbedctlError, match="no collection given"):
        embedctl.Index.build(None, tmp_path / "x")


def test_add_delete_compact_info_and_versions(built, tmp_path):
    idx = embedctl.Index.build(built.path.parent.parent / "corpus.tsv", tmp_path / "idx",
                               overrides=KINDS[built.kind])
    reader = embedctl.Index.open(idx.path)
    # a reader holds its version's files from its first search on (before it, a version two changes old is
    # collected: PLAID's re-clustering add, like compact, leaves the build's files unreferenced)
    reader.search("penguins", k=1)
    summary = idx.add([{"id": "n1", "text": "Penguins huddle together through the Antarctic winter."},
                       ("n2", "Sailors got scurvy until lemons brought them vitamin C.")])
    assert (summary["added"], idx.version, len(idx)) == (2, 1, 42)
    assert idx.search("penguins in the antarctic winter", k=1)[0].id == "n1"
    assert idx.add([("n1", "Penguins huddle together through the Antarctic winter.")])["changed"] is False
    deleted = idx.delete(["n2", "nope"])
    assert deleted["deleted"] == 1 and deleted["unknown"] == ["nope"] and idx.version == 2
    with pytest.raises(EmbedctlError, match="nothing was deleted"):
        idx.delete(["d1", "nope"], strict=True)
    assert idx.compact()["segments"] == 1 and idx.version == 3
    info = idx.info(verify=True)
    assert (info["documents"], info["deleted"], info["verify"]) == (41, 0, [])
    # a reader keeps its version until it refreshes, also for a change made by the CLI in another process
    assert (reader.version, len(reader)) == (0, 40)
    assert "n1" not in [h.id for h in reader.search("penguins", k=40)]
    res = invoke("index", "delete", "--index", str(idx.path), "--id", "d0")
    assert res.exit_code == 0, res.output
    assert reader.refresh() == 4 and len(reader) == 40
    assert reader.search("penguins in the antarctic winter", k=1)[0].id == "n1"
    assert "d0" not in [h.id for h in reader.search("Document 0", k=40)]


def test_indexes_of_one_model_share_an_encoder_and_others_are_refused(built):
    other = embedctl.Index.open(built.path, encoder=built.encoder)
    assert other.session.encoder is built.session.encoder
    assert [h.id for h in other.search("protein folding", k=3)] == [h.id for h in built.search("protein folding", k=3)]
    wrong = embedctl.Encoder.load("minilm", kind="colbert" if built.kind == "plaid" else "biencoder",
                                  overrides=["model.doc_max_length=20"])
    with pytest.raises(EmbedctlError, match="model.doc_max_length=20"):
        embedctl.Index.open(built.path, encoder=wrong)


def test_rank_file_ranks_every_query_in_file_order(built, tmp_path):
    queries = write_tsv(tmp_path / "q.tsv", [("q1", "protein folding"), ("q2", "volcanoes and lava")])
    ranked = built.rank_file(queries, k=3)
    assert [qid for qid, _ in ranked] == ["q1", "q2"] and all(len(h) == 3 for _, h in ranked)
    assert [h.id for h in ranked[1][1]] == [h.id for h in built.search("volcanoes and lava", k=3)]


def test_encoder_encodes_with_both_kinds():
    enc = embedctl.Encoder.load("minilm")
    assert enc.kind == "biencoder" and enc.encode_queries(["a question"]).shape == (1, enc.dim)
    assert enc.encode_documents(["one", "two"]).shape == (2, enc.dim)
    col = embedctl.Encoder.load("minilm", kind="colbert", overrides=["model.query_max_length=16"])
    assert col.encode_queries(["a question"]).shape == (1, 16, col.dim)
    docs = col.encode_documents(["a short text", "a somewhat longer text than the first one"])
    assert len(docs) == 2 and docs[0].shape[1] == col.dim and docs[1].shape[0] > docs[0].shape[0]


def test_import_embedctl_does_not_import_torch():
    code = "import sys, embedctl; embedctl.__version__; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
