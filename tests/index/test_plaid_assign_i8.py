"""The fused 8-bit integer nearest-centroid kernel (embedctl/index/plaid/_kernels_i8.c, AVX-512 VNNI): its rounding
bound holds, exact answers against float64 (near ties, duplicates, a candidate list that overflows, L2 bias,
zero and unnormalised rows, ragged shapes), equal to the 16-bit kernel, bad arguments refused, and k-means on it
(the native backend at precision int8; tests/index/test_backends.py holds the checks shared by every backend)."""

import numpy as np
import pytest
from support.assignhelpers import assert_exact, assert_exact_on_near_ties, clustered

from embedctl.index.plaid import kernels, kmeans
from embedctl.index.plaid.native_backend import NativeBackend

pytestmark = pytest.mark.skipif(not kernels.vnni_available(), reason="no AVX-512 VNNI on this CPU or build")
INT8 = NativeBackend("int8")


def nearest(x, c, bias=None):
    return INT8.nearest(x, c, bias)[0]


def approximate_scores(x, p, c):
    """The kernel's approximate scores, computed in float64 from the same roundings (q_x . q_c / (s_x s_c))."""
    amax = np.abs(x.astype(np.float64)).max(1, keepdims=True)
    scale = np.where(amax > 0, 127.0 / np.where(amax > 0, amax, 1.0), 0.0)
    qx = np.clip(np.rint(x * scale), -127, 127)
    qc = p.packed.transpose(0, 2, 1, 3).reshape(p.c_pad, p.d_pad)[:len(c), :x.shape[1]].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(scale > 0, (qx @ qc.T) / (scale * float(p.scale)), 0.0), qx / np.where(scale > 0, scale, 1)


def test_the_rounding_bound_holds():
    x, c = clustered(2000, 300, dim=128, seed=3)
    x[::7] *= 13.0  # unnormalised rows
    p = kernels.pack_for_i8(c)
    approx, rounded_x = approximate_scores(x, p, c)
    exact = x.astype(np.float64) @ c.astype(np.float64).T
    norm, miss = np.linalg.norm(x.astype(np.float64), axis=1), np.linalg.norm(x - rounded_x, axis=1)
    bound = norm * p.err + miss * p.norm_max
    assert (np.abs(approx - exact).max(1) <= bound).all()
    assert 0 < p.err < 0.05 and 0.9 < p.norm_max < 1.1


@pytest.mark.parametrize(("n", "num_c", "dim"), [(4000, 7, 64), (4001, 300, 64), (1000, 2048, 128), (999, 100, 63),
                                                  (5, 16, 2), (3, 1, 64), (200, 40, 130)])
def test_int8_assignment_is_exact(n, num_c, dim):
    x, c = clustered(n, num_c, dim=dim, seed=num_c)
    got = nearest(x, c)
    assert got.dtype == np.int32 and got.shape == (n,)
    assert_exact(got, x, c)


def test_int8_is_exact_for_l2_near_ties_and_duplicates():
    assert_exact_on_near_ties(INT8.nearest, twin_distance=1e-3, min_scale=0.3)


def test_many_exact_ties_overflow_the_candidates_and_go_to_the_first_centroid():
    x, c = clustered(300, 64, seed=10)
    c = np.concatenate([c[:5], np.repeat(c[5:6], 80, axis=0), c[6:]])  # 80 copies: more than the 64 kept
    got = nearest(x, c)
    assert_exact(got, x, c)
    assert not np.isin(got, np.arange(6, 85)).any(), "a copy after the first never wins"
    hinted = INT8.nearest(x, c, hints=np.full(len(x), 84))[0]  # seeded at the last copy
    np.testing.assert_array_equal(hinted, got)


def test_unstructured_vectors_with_many_candidates_stay_exact():
    """Gaussian noise, no clusters: many centroids fall inside the 8-bit bound and rows overflow to a full
    exact rescoring."""
    rng = np.random.default_rng(7)
    x, c = rng.normal(size=(500, 32)).astype(np.float32), rng.normal(size=(700, 32)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    assert_exact(nearest(x, c), x, c)


def test_unnormalised_and_zero_rows():
    x, c = clustered(500, 200, seed=4)
    x = x * np.random.default_rng(5).uniform(0.01, 50.0, size=(len(x), 1)).astype(np.float32)
    x[7] = 0.0  # every score equal: the first centroid
    got = nearest(x, c * 3.0)
    assert_exact(got, x, c * 3.0)
    assert got[7] == 0


def test_exact_scores_few_rescored_columns_and_the_16_bit_answers():
    x, c = clustered(3000, 1000, dim=128, seed=11)
    bias = (-0.5 * (c * c).sum(1)).astype(np.float32)
    codes, best = INT8.nearest(x, c, bias)
    want = (x.astype(np.float64) * c[codes].astype(np.float64)).sum(1) + bias[codes]
    np.testing.assert_allclose(best, want, rtol=0, atol=1e-6)
    codes16, best16 = NativeBackend("int16").nearest(x, c, bias)
    np.testing.assert_array_equal(codes, codes16)
    np.testing.assert_array_equal(best, best16)
    p = kernels.pack_for_i8(c)
    scan_bias = np.zeros(p.c_pad, np.float32)
    scan_bias[len(c):] = -np.inf
    out = np.empty(len(x), np.int64)
    rescored = kernels.nearest_i8(x, p, c, scan_bias, None, out)
    assert_exact(out, x, c)
    assert len(x) <= rescored < 3 * len(x), "clustered vectors leave a few candidates per row"


def test_int8_kernel_rejects_bad_arguments():
    x, c = clustered(10, 40)
    p = kernels.pack_for_i8(c)
    scan_bias, out = np.zeros(p.c_pad, np.float32), np.empty(10, np.int64)
    with pytest.raises(ValueError, match="scan_bias"):
        kernels.nearest_i8(x, p, c, scan_bias[:-1], None, out)
    with pytest.raises(ValueError, match="offsets"):
        kernels.nearest_i8(x, p._replace(offsets=p.offsets[:-1]), c, scan_bias, None, out)
    with pytest.raises(ValueError, match="x must be"):
        kernels.nearest_i8(x.astype(np.float64), p, c, scan_bias, None, out)
    with pytest.raises(ValueError, match="refused"):
        kernels.nearest_i8(x, p._replace(err=-1.0), c, scan_bias, None, out)
    with pytest.raises(ValueError, match="refused"):
        kernels.nearest_i8(x, p._replace(scale=np.float32(0.0)), c, scan_bias, None, out)
    with pytest.raises(ValueError, match="hints"):
        kernels.nearest_i8(x, p, c, scan_bias, None, out, hints=np.zeros(10, np.int32))
    with pytest.raises(ValueError, match="hints"):
        kernels.nearest_i8(x, p, c, scan_bias, None, out, hints=np.zeros(9, np.int64))


def test_kmeans_int8_gives_the_int16_centroids():
    x, _ = clustered(8000, 64, seed=4)
    a = kmeans.train_centroids(x, 64, niters=4, seed=5, backend=INT8)
    np.testing.assert_array_equal(a, kmeans.train_centroids(x, 64, niters=4, seed=5, backend=NativeBackend("int16")))


def test_real_colbert_vectors_against_the_reference(scifact):
    """Real inputs: the bundled model's ColBERT vectors of 60 SciFact documents, centroids trained on them by
    the reference backend; int8 (and int16, both versions) give the reference's exact nearest centroids, for
    inner product and for k-means' L2 bias."""
    import json

    from embedctl.config.sections.model import ModelConfig
    from embedctl.index.plaid.native_backend import _nearest_i16
    from embedctl.index.plaid.reference import Backend
    from embedctl.models.encoder import load_encoder

    with open(scifact / "corpus.jsonl", encoding="utf-8") as fh:
        texts = [" ".join(filter(None, (row.get("title"), row.get("text")))) for row in map(json.loads, fh)][:60]
    encoder = load_encoder(ModelConfig(kind="colbert", doc_max_length=128), device="cpu")
    vecs, _ = encoder.encode_documents(texts)
    x = np.ascontiguousarray(np.asarray(vecs, np.float32).astype(np.float16), np.float32)  # as the index stores
    c = kmeans.train_centroids(x, 256, niters=2, seed=1, backend=Backend()).astype(np.float32)
    bias = (-0.5 * (c.astype(np.float64) ** 2).sum(1)).astype(np.float32)
    for b in (None, bias):
        want = Backend().nearest(x, c, b)[0]
        assert_exact(want, x, c, b)
        np.testing.assert_array_equal(INT8.nearest(x, c, b)[0], want)
        for isa in ["avx2", "avx512"]:
            np.testing.assert_array_equal(_nearest_i16(x, c, b, isa=isa)[0], want)
