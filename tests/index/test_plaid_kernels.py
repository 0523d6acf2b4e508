"""The optional PLAID indexing kernels (embedctl/index/plaid/_kernels.c) against exact answers and torch."""

import shutil

import numpy as np
import pytest
import torch
from support.assignhelpers import assert_exact as _assert_exact
from support.assignhelpers import assert_exact_on_near_ties
from support.assignhelpers import clustered as _clustered
from support.assignhelpers import exact_argmax as _exact

from embedctl.index.plaid import assign, kernels
from embedctl.index.plaid import codec as codec_mod

needs_kernels = pytest.mark.skipif(not kernels.available(), reason="C kernels not built (no compiler at install)")


@pytest.fixture
def no_kernels(monkeypatch):
    """Run the torch fallbacks, as on a machine where the kernels could not be built."""
    monkeypatch.setenv("EMBEDCTL_NO_KERNELS", "1")
    kernels._library.cache_clear()
    yield
    monkeypatch.delenv("EMBEDCTL_NO_KERNELS")
    kernels._library.cache_clear()


@pytest.fixture(params=["amx", "gemm"])
def exact_path(request, monkeypatch):
    """Both exact bf16 paths: the fused AMX kernel (where the CPU has AMX) and torch GEMM + rescoring kernel."""
    if request.param == "amx" and not kernels.amx_available():
        pytest.skip("no AMX on this CPU (or the kernel was built without it)")
    if request.param == "gemm":
        monkeypatch.setenv("EMBEDCTL_NO_AMX", "1")
    kernels.amx_available.cache_clear()
    yield request.param
    monkeypatch.delenv("EMBEDCTL_NO_AMX", raising=False)
    kernels.amx_available.cache_clear()


def test_kernels_are_built_where_a_compiler_exists():
    assert kernels.available() or shutil.which("cc") is None, "pip install -e . should have built _kernels"


@needs_kernels
@pytest.mark.parametrize("num_c", [7, 300, 1000, 2048])  # below one vector, ragged tails, whole blocks
def test_bf16_assignment_with_kernel_is_exact(num_c, exact_path):
    x, c = _clustered(4000, num_c, seed=num_c)
    _assert_exact(assign.nearest(x, c, "bf16"), x, c)


@needs_kernels
def test_bf16_assignment_pads_odd_dimensions(exact_path):
    x, c = _clustered(1000, 100, dim=48, seed=9)  # 48: not a multiple of the 32-wide tiles
    _assert_exact(assign.nearest(x, c, "bf16"), x, c)


@needs_kernels
def test_many_exact_ties_go_to_the_first_centroid(exact_path):
    x, c = _clustered(300, 64, seed=10)
    c = np.concatenate([c[:5], np.repeat(c[5:6], 80, axis=0), c[6:]])  # 80 copies of one centroid
    got = assign.nearest(x, c, "bf16")
    _assert_exact(got, x, c)
    assert not np.isin(got, np.arange(6, 85)).any(), "a copy after the first never wins"


@needs_kernels
def test_exact_scores_are_returned(exact_path):
    x, c = _clustered(500, 256, seed=11)
    bias = (-0.5 * (c * c).sum(1)).astype(np.float32)
    codes, best = assign.nearest_exact_bf16(x, c, bias)
    want = (x.astype(np.float64) * c[codes].astype(np.float64)).sum(1) + bias[codes]
    np.testing.assert_allclose(best, want, rtol=0, atol=1e-6)


@needs_kernels
def test_bf16_assignment_with_kernel_is_exact_for_l2_and_near_ties(exact_path):
    assert_exact_on_near_ties("bf16", twin_distance=1e-4, min_scale=0.5)


@needs_kernels
def test_nearest_kernel_rescores_only_near_ties():
    x, c = _clustered(1000, 256, seed=3)
    scores = torch.from_numpy(x).bfloat16() @ torch.from_numpy(c).bfloat16().T
    out = np.empty(len(x), np.int64)
    err = (np.linalg.norm(x, axis=1) * 2.0 ** -6).astype(np.float32)
    rescored = kernels.nearest_bf16(scores.contiguous(), x, c, None, err, out)
    _assert_exact(out, x, c)
    assert len(x) <= rescored < 3 * len(x)


@pytest.mark.skipif(not kernels.amx_available(), reason="no AMX on this CPU")
def test_amx_kernel_rejects_bad_arguments():
    x, c = _clustered(10, 40)
    packed, c_pad, d_pad = kernels.pack_for_amx(c)
    scan_bias, err, out = np.zeros(c_pad, np.float32), np.zeros(10, np.float32), np.empty(10, np.int64)
    with pytest.raises(ValueError, match="scan_bias"):
        kernels.nearest_amx(x, packed, c_pad, d_pad, c, scan_bias[:-1], None, err, out)
    with pytest.raises(ValueError, match="pack_for_amx"):
        kernels.nearest_amx(x, packed[:1], c_pad, d_pad, c, scan_bias, None, err, out)
    kernels.nearest_amx(x, packed, c_pad, d_pad, c, scan_bias, None, err, out)
    _assert_exact(out, x, c)


@needs_kernels
def test_nearest_kernel_rejects_bad_arguments():
    x, c = _clustered(10, 40)
    scores = (torch.from_numpy(x) @ torch.from_numpy(c).T).bfloat16().contiguous()
    out, err = np.empty(10, np.int64), np.zeros(10, np.float32)
    with pytest.raises(ValueError, match="bfloat16"):
        kernels.nearest_bf16(scores.float(), x, c, None, err, out)
    with pytest.raises(ValueError, match="out must be"):
        kernels.nearest_bf16(scores, x, c, None, err, np.empty(9, np.int64))
    with pytest.raises(ValueError, match="float32"):
        kernels.nearest_bf16(scores, x.astype(np.float64), c, None, err, out)
    with pytest.raises(ValueError, match="bias"):
        kernels.nearest_bf16(scores, x, c, np.zeros(39, np.float32), err, out)


def test_bf16_assignment_without_kernel_is_near_exact(no_kernels):
    assert not kernels.available()
    x, c = _clustered(4000, 2048, seed=4)
    fast, exact = assign.nearest(x, c, "bf16"), _exact(x, c)
    assert (fast == exact).mean() >= 0.99
    loss = (x * c[exact]).sum(1) - (x * c[fast]).sum(1)
    assert loss.max() <= 0.005, "a different answer is only ever a near tie"


def _codec(nbits, seed=0):
    x, c = _clustered(3000, 128, dim=64, seed=seed)
    return codec_mod.train_codec(c.astype(np.float16), x[:1000], nbits), x


@needs_kernels
@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_compress_and_norms_kernel_match_torch(nbits, monkeypatch):
    cd, x = _codec(nbits, seed=nbits)
    codes, packed = cd.compress(x)
    norms = cd.norms(codes, packed)
    monkeypatch.setenv("EMBEDCTL_NO_KERNELS", "1")
    kernels._library.cache_clear()
    try:
        codes_t, packed_t = cd.compress(x)
        norms_t = cd.norms(codes_t, packed_t)
    finally:
        monkeypatch.delenv("EMBEDCTL_NO_KERNELS")
        kernels._library.cache_clear()
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
