"""The fused 16-bit integer nearest-centroid kernel (embedctl/index/plaid/_kernels_i16.c, AVX2): exact answers
against float64, L2 bias, ties, ragged shapes, bad arguments, and k-means on it (the native backend at
precision int16; tests/index/test_backends.py holds the checks shared by every backend)."""

import numpy as np
import pytest
from support.assignhelpers import assert_exact, assert_exact_on_near_ties, clustered

from embedctl.index.plaid import kernels, kmeans, reference
from embedctl.index.plaid.native_backend import NativeBackend

pytestmark = pytest.mark.skipif(not kernels.i16_available(), reason="int16 kernel not built or no AVX2")
INT16 = NativeBackend("int16")


def nearest(x, c, bias=None):
    return INT16.nearest(x, c, bias)[0]


@pytest.mark.parametrize(("n", "num_c", "dim"), [(4000, 7, 64), (4001, 300, 64), (1000, 2048, 128), (999, 100, 63),
                                                  (5, 16, 2), (3, 1, 64)])
def test_int16_assignment_is_exact(n, num_c, dim):
    x, c = clustered(n, num_c, dim=dim, seed=num_c)
    got = nearest(x, c)
    assert got.dtype == np.int32 and got.shape == (n,)
    assert_exact(got, x, c)


def test_int16_is_exact_for_l2_near_ties_and_duplicates():
    assert_exact_on_near_ties(INT16.nearest, twin_distance=1e-5, min_scale=0.3)


def test_many_exact_ties_go_to_the_first_centroid():
    x, c = clustered(300, 64, seed=10)
    c = np.concatenate([c[:5], np.repeat(c[5:6], 80, axis=0), c[6:]])  # 80 copies: the candidate list overflows
    got = nearest(x, c)
    assert_exact(got, x, c)
    assert not np.isin(got, np.arange(6, 85)).any(), "a copy after the first never wins"


def test_unnormalised_and_zero_rows():
    x, c = clustered(500, 200, seed=4)
    x = x * np.random.default_rng(5).uniform(0.01, 50.0, size=(len(x), 1)).astype(np.float32)
    x[7] = 0.0  # every score equal: the first centroid
    got = nearest(x, c * 3.0)
    assert_exact(got, x, c * 3.0)
    assert got[7] == 0


def test_exact_scores_and_few_rescored_columns():
    x, c = clustered(2000, 256, seed=11)
    bias = (-0.5 * (c * c).sum(1)).astype(np.float32)
    codes, best = INT16.nearest(x, c, bias)
    want = (x.astype(np.float64) * c[codes].astype(np.float64)).sum(1) + bias[codes]
    np.testing.assert_allclose(best, want, rtol=0, atol=1e-6)
    packed, c_pad, d_pad, scale = kernels.pack_for_i16(c)
    scan_bias = np.zeros(c_pad, np.float32)
    scan_bias[len(c):] = -np.inf
    out = np.empty(len(x), np.int64)
    rescored = kernels.nearest_i16(x, packed, c_pad, d_pad, scale, c, scan_bias, None, out)
    assert_exact(out, x, c)
    assert len(x) <= rescored < 1.2 * len(x), "16-bit scores leave about one candidate per row"


def test_int16_kernel_rejects_bad_arguments():
    x, c = clustered(10, 40)
    packed, c_pad, d_pad, scale = kernels.pack_for_i16(c)
    scan_bias, out = np.zeros(c_pad, np.float32), np.empty(10, np.int64)
    with pytest.raises(ValueError, match="scan_bias"):
        kernels.nearest_i16(x, packed, c_pad, d_pad, scale, c, scan_bias[:-1], None, out)
    with pytest.raises(ValueError, match="packed"):
        kernels.nearest_i16(x, packed[:1], c_pad, d_pad, scale, c, scan_bias, None, out)
    with pytest.raises(ValueError, match="x must be"):
        kernels.nearest_i16(x.astype(np.float64), packed, c_pad, d_pad, scale, c, scan_bias, None, out)
    with pytest.raises(ValueError, match="refused"):
        kernels.nearest_i16(x, packed, c_pad, d_pad, np.float32(0.0), c, scan_bias, None, out)


def test_kmeans_int16_is_seeded_and_as_good_as_fp32():
    x, _ = clustered(8000, 64, seed=4)
    a = kmeans.train_centroids(x, 64, niters=4, seed=5, backend=INT16)
    np.testing.assert_array_equal(a, kmeans.train_centroids(x, 64, niters=4, seed=5, backend=INT16))
    assert a.shape == (64, 64) and a.dtype == np.float16

    def fit(cent):
        cent = cent.astype(np.float32)
        return (x * cent[reference.nearest(x, cent)[0]]).sum(1).mean()

    assert fit(a) >= fit(kmeans.train_centroids(x, 64, niters=4, seed=5, backend=NativeBackend("fp32"))) - 0.01
