"""A query's centroid scores on AMX tiles (search_kernels.centroid_scores_amx, _search_amx.c: three bfloat16
products with float32 sums), against float64 within its stated bound on random and real inputs, the same bits on
any thread count; and where the native backend uses it: search.precision fp16 or bf16 on a CPU with AMX, never
fp32 (whose kernel gives the same bits on every CPU)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support.synthetic import SyntheticEncoder

from embedctl.config.sections.index import IndexConfig
from embedctl.index.build import build_plaid_index
from embedctl.index.plaid import native_backend, search_kernels
from embedctl.index.plaid.native_backend import NativeBackend
from embedctl.search.plaid import PlaidSearcher

pytestmark = pytest.mark.skipif(not native_backend.available(), reason="the C kernels were not built")
amx = pytest.mark.skipif(not search_kernels.amx_available(), reason="no AMX-BF16 on this CPU")


def check(C: np.ndarray, Q: np.ndarray) -> np.ndarray:
    got = search_kernels.centroid_scores_amx(search_kernels.pack_bf16x2(C), Q)
    want = C.astype(np.float64) @ Q.astype(np.float64).T
    assert got.shape == (len(C), len(Q)) and got.dtype == np.float32
    assert (np.abs(got - want) <= search_kernels.amx_err_bound(C, Q)).all()
    return got


@amx
@pytest.mark.parametrize("num_c,dim,lq", [(16384, 128, 32), (1, 128, 1), (15, 128, 32), (17, 96, 16),
                                          (1000, 40, 33), (300, 128, 64), (48, 32, 5), (33, 200, 17)])
def test_random_scores_within_the_bound_and_the_same_bits_on_any_thread_count(num_c, dim, lq):
    """Ragged centroid blocks (16) and token tiles (16), dims that pad to 32, one and several token tile pairs;
    unnormalised rows of mixed magnitude (the bound is relative to sum_d |c_d q_d|)."""
    rng = np.random.default_rng(num_c + dim + lq)
    C = (rng.normal(size=(num_c, dim)) * rng.uniform(0.01, 3, size=(num_c, 1))).astype(np.float32)
    Q = rng.normal(size=(lq, dim)).astype(np.float32)
    got = check(C, Q)
    p = search_kernels.pack_bf16x2(C)
    for t in (2, 3):
        np.testing.assert_array_equal(search_kernels.centroid_scores_amx(p, Q, threads=t), got)
    out = np.full((num_c, lq), np.nan, np.float32)
    assert search_kernels.centroid_scores_amx(p, Q, out=out) is out
    np.testing.assert_array_equal(out, got)


@amx
def test_exact_where_the_halves_are_exact():
    """Values that are bfloat16 already (lo = 0) and small integer sums: every product and sum exact in float32, so
    the scores are the exact dot products; zero rows score 0."""
    rng = np.random.default_rng(3)
    C = rng.integers(-8, 9, size=(40, 64)).astype(np.float32)
    Q = rng.integers(-8, 9, size=(32, 64)).astype(np.float32)
    C[7] = 0
    np.testing.assert_array_equal(check(C, Q), (C.astype(np.int64) @ Q.astype(np.int64).T).astype(np.float32))


@amx
def test_real_colbert_vectors(scifact):
    """Real inputs: the bundled model's ColBERT vectors of 40 SciFact documents (float16 as an index stores them)
    as centroids, its query vectors of 8 queries: within the bound, and within 1e-5 of float64 (unit vectors)."""
    from embedctl.config.sections.model import ModelConfig
    from embedctl.models.encoder import load_encoder

    with open(scifact / "corpus.jsonl", encoding="utf-8") as fh:
        texts = [" ".join(filter(None, (row.get("title"), row.get("text")))) for row in map(json.loads, fh)][:40]
    with open(scifact / "queries.jsonl", encoding="utf-8") as fh:
        queries = [row["text"] for row in map(json.loads, fh)][:8]
    encoder = load_encoder(ModelConfig(kind="colbert", doc_max_length=128), device="cpu")
    vecs, _ = encoder.encode_documents(texts)
    C = np.ascontiguousarray(np.asarray(vecs, np.float32).astype(np.float16), np.float32)
    for Q in encoder.encode_queries(queries):
        Q = np.ascontiguousarray(Q, np.float32)
        got = check(C, Q)
        assert np.abs(got - C.astype(np.float64) @ Q.astype(np.float64).T).max() < 1e-5


@amx
def test_bad_arguments_are_refused():
    p = search_kernels.pack_bf16x2(np.ones((20, 64), np.float32))
    with pytest.raises(ValueError, match="Lq"):
        search_kernels.centroid_scores_amx(p, np.ones((4, 63), np.float32))
    with pytest.raises(ValueError, match="Lq"):
        search_kernels.centroid_scores_amx(p, np.ones((0, 64), np.float32))
    with pytest.raises(ValueError, match="out must be"):
        search_kernels.centroid_scores_amx(p, np.ones((4, 64), np.float32), out=np.empty((4, 20), np.float32))
    with pytest.raises(ValueError, match="threads"):
        search_kernels.centroid_scores_amx(p, np.ones((4, 64), np.float32), threads=0)
    with pytest.raises(ValueError, match="finite"):
        search_kernels.pack_bf16x2(np.array([[np.inf, 1.0]], np.float32))


def test_which_precisions_use_the_tiles():
    """fp16 and bf16 where the CPU has AMX; fp32 never (its kernel: the same bits on every CPU)."""
    assert not NativeBackend("fp32").amx_centroid_scores()
    for precision in ("fp16", "bf16"):
        assert NativeBackend(precision).amx_centroid_scores() == search_kernels.amx_available()


@pytest.fixture(scope="module")
def index(module_tmp):
    enc = SyntheticEncoder(dim=64, num_topics=96, mean_len=40)
    docs = [f"passage {i}" for i in range(400)]
    out = module_tmp("amx_scores") / "idx"
    build_plaid_index(enc, docs, out, IndexConfig(nbits=2), progress=False)
    return enc, docs, out


def test_a_searcher_scores_centroids_one_way_on_every_path(index):
    """An fp16 searcher's centroid scores (the search's own, and PlaidSearcher.centroid_scores that the filtered and
    PLAID paths read) come from one place: the tiles where the CPU has AMX (within their bound of float64), the fp32
    kernel elsewhere (its bits); its top 10 the fp32 searcher's on every query (a synthetic index: no near ties)."""
    enc, docs, out = index
    fp16, fp32 = PlaidSearcher(out, precision="fp16"), PlaidSearcher(out, precision="fp32")
    assert (fp16.tables["bf16x2"] is not None) == search_kernels.amx_available()
    assert fp32.tables["bf16x2"] is None
    for i in range(6):
        Q = fp16.as_query(enc.query_for(docs[i * 37], seed=i))
        ST = fp16.centroid_scores(Q)
        if search_kernels.amx_available():
            want = search_kernels.centroid_scores_amx(fp16.tables["bf16x2"], Q).T
            assert (np.abs(ST - fp32.centroid_scores(Q)) <= search_kernels.amx_err_bound(fp16.centroids, Q).T
                    + 1e-6).all()
        else:
            want = fp32.centroid_scores(Q)
        np.testing.assert_array_equal(ST, want)
        np.testing.assert_array_equal(fp16.search(Q, 10)[0], fp32.search(Q, 10)[0])
