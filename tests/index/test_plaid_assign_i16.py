"""The fused 16-bit integer nearest-centroid kernel (embedctl/index/plaid/_kernels_i16.c on AVX2,
_kernels_vnni.c on AVX-512 VNNI; each test runs on every version this CPU has): exact answers against float64,
L2 bias, ties, ragged shapes, bad arguments, the two versions equal, and k-means on it (the native backend at
precision int16; tests/index/test_backends.py holds the checks shared by every backend)."""

import numpy as np
import pytest
from support.assignhelpers import assert_exact, assert_exact_on_near_ties, clustered

from embedctl.index.plaid import kernels, kmeans, reference
from embedctl.index.plaid.native_backend import NativeBackend, _nearest_i16

pytestmark = pytest.mark.skipif(not kernels.i16_available(), reason="int16 kernel not built or no AVX2")
INT16 = NativeBackend("int16")
ISAS = ["avx2"] + (["avx512"] if kernels.vnni_available() else [])


@pytest.fixture(params=ISAS)
def isa(request):
    return request.param


def nearest(x, c, bias=None, isa="auto"):
    return _nearest_i16(x, np.ascontiguousarray(c, np.float32), bias, isa=isa)[0]


@pytest.mark.parametrize(("n", "num_c", "dim"), [(4000, 7, 64), (4001, 300, 64), (1000, 2048, 128), (999, 100, 63),
                                                  (5, 16, 2), (3, 1, 64)])
def test_int16_assignment_is_exact(n, num_c, dim, isa):
    x, c = clustered(n, num_c, dim=dim, seed=num_c)
    got = nearest(x, c, isa=isa)
    assert got.dtype == np.int32 and got.shape == (n,)
    assert_exact(got, x, c)


def test_int16_is_exact_for_l2_near_ties_and_duplicates(isa):
    assert_exact_on_near_ties(lambda x, c, bias=None: _nearest_i16(x, c, bias, isa=isa), twin_distance=1e-5,
                              min_scale=0.3)


def test_many_exact_ties_go_to_the_first_centroid(isa):
    x, c = clustered(300, 64, seed=10)
    c = np.concatenate([c[:5], np.repeat(c[5:6], 80, axis=0), c[6:]])  # 80 copies: the candidate list overflows
    got = nearest(x, c, isa=isa)
    assert_exact(got, x, c)
    assert not np.isin(got, np.arange(6, 85)).any(), "a copy after the first never wins"


def test_unnormalised_and_zero_rows(isa):
    x, c = clustered(500, 200, seed=4)
    x = x * np.random.default_rng(5).uniform(0.01, 50.0, size=(len(x), 1)).astype(np.float32)
    x[7] = 0.0  # every score equal: the first centroid
    got = nearest(x, c * 3.0, isa=isa)
    assert_exact(got, x, c * 3.0)
    assert got[7] == 0


def test_exact_scores_and_few_rescored_columns(isa):
    x, c = clustered(2000, 256, seed=11)
    bias = (-0.5 * (c * c).sum(1)).astype(np.float32)
    codes, best = _nearest_i16(x, c, bias, isa=isa)
    want = (x.astype(np.float64) * c[codes].astype(np.float64)).sum(1) + bias[codes]
    np.testing.assert_allclose(best, want, rtol=0, atol=1e-6)
    packed, c_pad, d_pad, scale = kernels.pack_for_i16(c)
    scan_bias = np.zeros(c_pad, np.float32)
    scan_bias[len(c):] = -np.inf
    out = np.empty(len(x), np.int64)
    rescored = kernels.nearest_i16(x, packed, c_pad, d_pad, scale, c, scan_bias, None, out, isa=isa)
    assert_exact(out, x, c)
    assert len(x) <= rescored < 1.2 * len(x), "16-bit scores leave about one candidate per row"


def test_int16_kernel_rejects_bad_arguments(isa):
    x, c = clustered(10, 40)
    packed, c_pad, d_pad, scale = kernels.pack_for_i16(c)
    scan_bias, out = np.zeros(c_pad, np.float32), np.empty(10, np.int64)
    with pytest.raises(ValueError, match="scan_bias"):
        kernels.nearest_i16(x, packed, c_pad, d_pad, scale, c, scan_bias[:-1], None, out, isa=isa)
    with pytest.raises(ValueError, match="packed"):
        kernels.nearest_i16(x, packed[:1], c_pad, d_pad, scale, c, scan_bias, None, out, isa=isa)
    with pytest.raises(ValueError, match="x must be"):
        kernels.nearest_i16(x.astype(np.float64), packed, c_pad, d_pad, scale, c, scan_bias, None, out, isa=isa)
    with pytest.raises(ValueError, match="refused"):
        kernels.nearest_i16(x, packed, c_pad, d_pad, np.float32(0.0), c, scan_bias, None, out, isa=isa)
    with pytest.raises(ValueError, match="isa"):
        kernels.nearest_i16(x, packed, c_pad, d_pad, scale, c, scan_bias, None, out, isa="sse")


@pytest.mark.skipif(not kernels.vnni_available(), reason="no AVX-512 VNNI on this CPU")
def test_avx512_version_gives_the_avx2_answers_and_candidates():
    """Same rounding, same scan: equal codes, equal exact best scores, equal rescored counts; and it refuses
    panels it cannot take in pairs (c_pad not a multiple of 32)."""
    x, c = clustered(3001, 1000, dim=128, seed=21)
    bias = (-0.5 * (c * c).sum(1)).astype(np.float32)
    packed, c_pad, d_pad, scale = kernels.pack_for_i16(c)
    assert c_pad % 32 == 0
    scan_bias = np.full(c_pad, -np.inf, np.float32)
    scan_bias[:len(c)] = bias
    found = {}
    for isa in ("avx2", "avx512"):
        out, best = np.empty(len(x), np.int64), np.empty(len(x), np.float32)
        rescored = kernels.nearest_i16(x, packed, c_pad, d_pad, scale, c, scan_bias, bias, out, best, isa=isa)
        found[isa] = (out, best, rescored)
    np.testing.assert_array_equal(found["avx2"][0], found["avx512"][0])
    np.testing.assert_array_equal(found["avx2"][1], found["avx512"][1])
    assert found["avx2"][2] == found["avx512"][2]
    with pytest.raises(ValueError, match="refused"):  # 16 padding columns dropped: c_pad % 32 == 16
        kernels.nearest_i16(x, packed[:-1], c_pad - 16, d_pad, scale, c, scan_bias[:-16], None,
                            np.empty(len(x), np.int64), isa="avx512")


def test_kmeans_int16_is_seeded_and_as_good_as_fp32():  # the backend: the widest version this CPU has
    x, _ = clustered(8000, 64, seed=4)
    a = kmeans.train_centroids(x, 64, niters=4, seed=5, backend=INT16)
    np.testing.assert_array_equal(a, kmeans.train_centroids(x, 64, niters=4, seed=5, backend=INT16))
    assert a.shape == (64, 64) and a.dtype == np.float16

    def fit(cent):
        cent = cent.astype(np.float32)
        return (x * cent[reference.nearest(x, cent)[0]]).sum(1).mean()

    assert fit(a) >= fit(kmeans.train_centroids(x, 64, niters=4, seed=5, backend=NativeBackend("fp32"))) - 0.01
