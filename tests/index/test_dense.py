"""Dense faiss indexes (real faiss) against numpy brute force."""

from __future__ import annotations

import numpy as np
import pytest

from embedctl.errors import EmbedctlError
from embedctl.index.dense import DenseBuilder, DenseSearcher, default_nlist
from embedctl.search.retrievers import DenseRetriever


def _unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return _unit(rng, 3000, 32), _unit(rng, 25, 32)


def _exact(docs, queries, k):
    scores = queries @ docs.T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(scores, order, axis=1)


def _build(tmp_path, docs, dense_type, **kw):
    builder = DenseBuilder(docs.shape[1], dense_type, **kw)
    for start in range(0, len(docs), 700):  # added in batches, pids follow the running count
        builder.add(docs[start:start + 700])
    params = builder.write(tmp_path / f"{dense_type}.faiss")
    assert params["num_vectors"] == len(docs) and params["type"] == dense_type
    return DenseSearcher(tmp_path / f"{dense_type}.faiss"), params


def test_flat_equals_brute_force(tmp_path, data):
    docs, queries = data
    searcher, _ = _build(tmp_path, docs, "flat")
    scores, pids = searcher.search(queries, 10)
    want_pids, want_scores = _exact(docs, queries, 10)
    np.testing.assert_array_equal(pids, want_pids)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)
    assert pids.dtype == np.int64 and scores.dtype == np.float32


def test_ivf_probing_every_list_is_exact_and_seeded(tmp_path, data):
    docs, queries = data
    searcher, params = _build(tmp_path, docs, "ivf", nlist=16, seed=3)
    assert params["ivf_nlist"] == 16
    _, pids = searcher.search(queries, 10, nprobe=16)
    np.testing.assert_array_equal(pids, _exact(docs, queries, 10)[0])
    few = searcher.search(queries, 10, nprobe=1)[1]
    again = searcher.search(queries, 10, nprobe=1)[1]
    np.testing.assert_array_equal(few, again)  # nprobe applies per call, nothing sticky
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(few, _exact(docs, queries, 10)[0], strict=True)])
    assert 0.2 < recall <= 1.0


def test_hnsw_recall(tmp_path, data):
    docs, queries = data
    searcher, params = _build(tmp_path, docs, "hnsw", hnsw_m=16, hnsw_ef_construction=100)
    assert params["hnsw_m"] == 16
    _, pids = searcher.search(queries, 10, ef_search=256)
    exact = _exact(docs, queries, 10)[0]
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(pids, exact, strict=True)])
    assert recall >= 0.95


def test_fewer_documents_than_k_gives_fewer_hits(tmp_path, data):
    docs, queries = data
    builder = DenseBuilder(32, "flat")
    builder.add(docs[:4])
    builder.write(tmp_path / "idx" / "dense.faiss")

    class Cfg:
        nprobe = None
        hnsw_ef_search = None

    hits = DenseRetriever(tmp_path / "idx", Cfg()).search(queries[:2], 10)
    assert [len(p) for p, _ in hits] == [4, 4]
    assert all(np.all(np.diff(s) <= 0) for _, s in hits)


def test_errors(tmp_path, data):
    docs, queries = data
    with pytest.raises(EmbedctlError, match="shape"):
        DenseBuilder(16, "flat").add(docs[:3])
    with pytest.raises(EmbedctlError, match="dense_type"):
        DenseBuilder(32, "lsh")
    small = DenseBuilder(32, "ivf", nlist=50)
    small.add(docs[:10])
    with pytest.raises(EmbedctlError, match="more than the 10 documents"):
        small.write(tmp_path / "x.faiss")
    assert not (tmp_path / "x.faiss").exists()
    searcher, _ = _build(tmp_path, docs[:100], "flat")
    with pytest.raises(EmbedctlError, match="built with"):
        searcher.search(queries[:, :16], 5)
    with pytest.raises(EmbedctlError, match="missing"):
        DenseSearcher(tmp_path / "nope.faiss")


def test_default_nlist():
    assert default_nlist(10) == 1
    assert default_nlist(5183) == 132  # 39 points per list cap: 5183 // 39
    assert default_nlist(1_000_000) == 4000
