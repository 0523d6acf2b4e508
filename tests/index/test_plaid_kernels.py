"""The PLAID indexing kernels of the native backend (embedctl/index/plaid/_kernels*.c): the AMX assignment,
compression and norms, and their argument checks (shared checks against the reference: test_backends.py)."""

import shutil

import numpy as np
import pytest
from support.assignhelpers import assert_exact as _assert_exact
from support.assignhelpers import assert_exact_on_near_ties
from support.assignhelpers import clustered as _clustered

from embedctl.index.plaid import codec as codec_mod
from embedctl.index.plaid import kernels
from embedctl.index.plaid.native_backend import NativeBackend
from embedctl.index.plaid.reference import Backend

needs_kernels = pytest.mark.skipif(not kernels.available(), reason="C kernels not built (no compiler at install)")


needs_amx = pytest.mark.skipif(not kernels.amx_available(), reason="no AMX on this CPU (or the kernel was built without it)")


def amx_nearest(x, c, bias=None):
    return NativeBackend("bf16").nearest(x, c, bias)[0]


def test_kernels_are_built_where_a_compiler_exists():
    assert kernels.available() or shutil.which("cc") is None, "pip install -e . should have built _kernels"


@needs_amx
@pytest.mark.parametrize("num_c", [7, 300, 1000, 2048])  # below one vector, ragged tails, whole blocks
def test_bf16_assignment_with_kernel_is_exact(num_c):
    x, c = _clustered(4000, num_c, seed=num_c)
    _assert_exact(amx_nearest(x, c), x, c)


@needs_amx
def test_bf16_assignment_pads_odd_dimensions():
    x, c = _clustered(1000, 100, dim=48, seed=9)  # 48: not a multiple of the 32-wide tiles
    _assert_exact(amx_nearest(x, c), x, c)


@needs_amx
def test_many_exact_ties_go_to_the_first_centroid():
    x, c = _clustered(300, 64, seed=10)
    c = np.concatenate([c[:5], np.repeat(c[5:6], 80, axis=0), c[6:]])  # 80 copies of one centroid
    got = amx_nearest(x, c)
    _assert_exact(got, x, c)
    assert not np.isin(got, np.arange(6, 85)).any(), "a copy after the first never wins"
    hinted = NativeBackend("bf16").nearest(x, c, hints=np.full(len(x), 84))[0]  # each row seeded at the last copy
    np.testing.assert_array_equal(hinted, got)


def _amx_call(x, c, bias=None, hints=None):
    """kernels.nearest_amx on all of x in one call (the backend splits rows into blocks of at most 8,192)."""
    packed, c_pad, d_pad = kernels.pack_for_amx(c)
    scan_bias = np.full(c_pad, -np.inf, np.float32)
    scan_bias[:len(c)] = 0.0 if bias is None else bias
    err = (np.linalg.norm(x, axis=1) * kernels.amx_err_factor(c, d_pad)).astype(np.float32)
    out, best = np.empty(len(x), np.int64), np.empty(len(x), np.float32)
    kernels.nearest_amx(x, packed, c_pad, d_pad, c, scan_bias, bias, err, out, best, hints)
    return out, best


@needs_amx
def test_one_call_over_several_row_and_centroid_blocks():
    """1,300 rows (the kernel's 512-row blocks: two whole, one ragged) against 1,100 centroids (its 512-centroid
    panels: two whole, one ragged), inner product and k-means' L2 bias, with right, wrong and absent hints: the
    reference's answers and exact scores."""
    x, c = _clustered(1300, 1100, seed=12)
    rng = np.random.default_rng(12)
    for bias in (None, (-0.5 * (c * c).sum(1)).astype(np.float32)):
        want, want_best = Backend().nearest(x, c, bias)
        for hints in (None, want.astype(np.int64), rng.integers(-1, len(c), len(x))):
            got, best = _amx_call(x, c, bias, hints)
            np.testing.assert_array_equal(got, want)
            np.testing.assert_allclose(best, want_best, rtol=0, atol=1e-6)


@needs_amx
def test_exact_scores_are_returned():
    x, c = _clustered(500, 256, seed=11)
    bias = (-0.5 * (c * c).sum(1)).astype(np.float32)
    codes, best = NativeBackend("bf16").nearest(x, c, bias)
    want = (x.astype(np.float64) * c[codes].astype(np.float64)).sum(1) + bias[codes]
    np.testing.assert_allclose(best, want, rtol=0, atol=1e-6)


@needs_amx
def test_bf16_assignment_with_kernel_is_exact_for_l2_and_near_ties():
    assert_exact_on_near_ties(NativeBackend("bf16").nearest, twin_distance=1e-4, min_scale=0.5)


@pytest.mark.skipif(not kernels.amx_available(), reason="no AMX on this CPU")
def test_amx_kernel_rejects_bad_arguments():
    x, c = _clustered(10, 40)
    packed, c_pad, d_pad = kernels.pack_for_amx(c)
    scan_bias, err, out = np.zeros(c_pad, np.float32), np.zeros(10, np.float32), np.empty(10, np.int64)
    with pytest.raises(ValueError, match="scan_bias"):
        kernels.nearest_amx(x, packed, c_pad, d_pad, c, scan_bias[:-1], None, err, out)
    with pytest.raises(ValueError, match="pack_for_amx"):
        kernels.nearest_amx(x, packed[:1], c_pad, d_pad, c, scan_bias, None, err, out)
    with pytest.raises(ValueError, match="hints"):
        kernels.nearest_amx(x, packed, c_pad, d_pad, c, scan_bias, None, err, out, hints=np.zeros(10, np.int32))
    with pytest.raises(ValueError, match="hints"):
        kernels.nearest_amx(x, packed, c_pad, d_pad, c, scan_bias, None, err, out, hints=np.zeros(9, np.int64))
    kernels.nearest_amx(x, packed, c_pad, d_pad, c, scan_bias, None, err, out)
    _assert_exact(out, x, c)


def _codec(nbits, seed=0):
    x, c = _clustered(3000, 128, dim=64, seed=seed)
    return codec_mod.train_codec(c.astype(np.float16), x[:1000], nbits), x


@needs_kernels
@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_compress_and_norms_kernel_match_torch(nbits):
    cd, x = _codec(nbits, seed=nbits)
    native = NativeBackend("int16" if kernels.i16_available() else "fp32")
    codes, packed = cd.compress(x, native)
    norms = cd.norms(codes, packed, native)
    codes_t, packed_t = cd.compress(x, Backend())
    norms_t = cd.norms(codes_t, packed_t, Backend())
    np.testing.assert_array_equal(codes, codes_t)
    np.testing.assert_array_equal(packed, packed_t)  # the same float32 arithmetic: bit-identical bytes
    np.testing.assert_allclose(norms.astype(np.float32), norms_t.astype(np.float32), rtol=1e-3)
    ref = np.linalg.norm(cd.decompress(codes, packed, normalize=False), axis=1)
    np.testing.assert_allclose(norms.astype(np.float32), ref, rtol=1e-3)


@needs_kernels
def test_compress_kernel_rejects_out_of_range_codes_and_shapes():
    cd, x = _codec(2)
    cf = cd.centroids_f32()
    bad = np.full(len(x), len(cf), np.int32)
    with pytest.raises(ValueError, match="codes outside"):
        kernels.compress(x, cf, bad, cd.bucket_cutoffs, 2)
    with pytest.raises(ValueError, match="disagree"):
        kernels.compress(x, cf, np.zeros(len(x) - 1, np.int32), cd.bucket_cutoffs, 2)
    with pytest.raises(ValueError, match="do not match"):
        kernels.decoded_norms(cf, np.zeros(3, np.int32), np.zeros((3, 5), np.uint8),
                              codec_mod.decode_table(cd.bucket_weights, 2), 2)
