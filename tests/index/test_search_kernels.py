"""The optional C kernels (embedctl/index/plaid/_search_kernels.c) against their numpy/torch versions."""

import shutil

import numpy as np
import pytest
import torch

from embedctl.index.plaid import search_kernels as kernels

needs_kernels = pytest.mark.skipif(not kernels.available(), reason="C kernels not built (no compiler at install)")


def test_kernels_are_built_where_a_compiler_exists():
    assert kernels.available() or shutil.which("cc") is None, "pip install -e . should have built _kernels"



@needs_kernels
def test_array_arguments_are_checked_as_ndpointer_checked_them(tmp_path):
    """The kernels' array arguments (embedctl.native.array_arg): C-contiguous arrays of the declared dtype only
    (memory maps and read-only arrays too); another dtype, a strided view or a list refused, naming the
    argument, before any C runs."""
    import ctypes

    from embedctl.native import array_arg

    nib = np.ones((1, 2, 16, 1), np.float32)
    out = np.memmap(tmp_path / "lut.bin", dtype=np.float32, mode="w+", shape=(1, 256, 1))
    kernels._library().embedctl_byte_lut(nib, 1, 1, out)
    assert np.all(out == 2.0)
    nib.setflags(write=False)
    kernels._library().embedctl_byte_lut(nib, 1, 1, out)
    lut = kernels._library().embedctl_byte_lut
    for bad, why in ((nib.astype(np.float64), "float64 array"), (np.ones((2, 2, 16, 2), np.float32)[:, :, :, 0],
                                                                 "not C-contiguous"), ([1.0], "list")):
        with pytest.raises(ctypes.ArgumentError, match=f"argument 1.*{why}"):
            lut(bad, 1, 1, out)
    assert array_arg(np.int64).__name__ == "array_arg(int64)"
    # the address passed is the array's own, however it was obtained: a view at an offset, read-only, empty
    arg, base = array_arg(np.float32), np.arange(10, dtype=np.float32)
    frozen = base[2:].copy()
    frozen.setflags(write=False)
    for a in (base, base[3:], base[3:3], frozen, out.reshape(-1)[1:]):
        assert arg.from_param(a).value == (a.ctypes.data or None)


def _scores(num_c=300, lq=32, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, size=(lq, num_c)).astype(np.float32)


@needs_kernels
def test_segment_maxsum_matches_numpy():
    ST = _scores()
    rng = np.random.default_rng(1)
    counts = rng.integers(0, 9, size=50).astype(np.int64)
    codes = rng.integers(0, ST.shape[1], size=int(counts.sum())).astype(np.int32)
    got = kernels.segment_maxsum(np.ascontiguousarray(ST.T), codes, counts)
    starts = np.cumsum(counts) - counts
    for d, (s, n) in enumerate(zip(starts, counts, strict=True)):
        if n == 0:
            assert got[d] == -np.inf
        else:
            np.testing.assert_allclose(got[d], ST[:, codes[s:s + n]].max(axis=1).sum(), rtol=1e-6)


@needs_kernels
def test_scatter_max_rows_matches_numpy():
    ST = _scores(seed=2)
    rng = np.random.default_rng(3)
    cents = rng.integers(0, ST.shape[1], size=400)
    slots = rng.integers(-1, 20, size=400)
    got = kernels.scatter_max_rows(np.ascontiguousarray(ST.T), cents, slots, 20)
    want = np.full((20, ST.shape[0]), -np.inf, np.float32)
    for c, s in zip(cents, slots, strict=True):
        if s >= 0:
            want[s] = np.maximum(want[s], ST[:, c])
    np.testing.assert_array_equal(got, want)


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_maxsim_matches_torch(dtype):
    ST = _scores(seed=4)
    rng = np.random.default_rng(5)
    lens = rng.integers(1, 12, size=30).astype(np.int64)
    n = int(lens.sum())
    codes = rng.integers(0, ST.shape[1], size=n).astype(np.int32)
    norms = rng.uniform(0.8, 1.2, size=n).astype(np.float32)
    sims = torch.from_numpy(rng.normal(scale=0.2, size=(n, ST.shape[0])).astype(np.float32)).to(dtype)
    got = kernels.maxsim(sims, np.ascontiguousarray(ST.T), codes, norms, lens)
    full = (torch.from_numpy(ST[:, codes]) + sims.float().T) / torch.from_numpy(norms)
    starts = np.cumsum(lens) - lens
    want = np.maximum.reduceat(full.numpy(), starts, axis=1).sum(axis=0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@needs_kernels
@pytest.mark.parametrize("nbits", [1, 2, 4])
@pytest.mark.parametrize("lq", [32, 7])
def test_maxsim_from_packed_bytes_matches_decode_then_matmul(nbits, lq):
    from embedctl.index.plaid.codec import decode_table

    ST = _scores(lq=lq, seed=6)
    dim = 64
    rng = np.random.default_rng(7)
    table = decode_table(np.sort(rng.normal(scale=0.05, size=2 ** nbits)).astype(np.float32), nbits)
    per = table.shape[1]
    lens = rng.integers(1, 12, size=25).astype(np.int64)
    n = int(lens.sum())
    packed = rng.integers(0, 256, size=(n, dim // per), dtype=np.uint8)
    codes = rng.integers(0, ST.shape[1], size=n).astype(np.int32)
    norms = rng.uniform(0.8, 1.2, size=n).astype(np.float32)
    Q = rng.normal(size=(lq, dim)).astype(np.float32)
    residuals = table[packed].reshape(n, dim)  # byte b decodes to dims b*per .. b*per + per - 1
    lut = np.einsum("vt,btq->bvq", table, Q.T.reshape(dim // per, per, lq))
    got = kernels.maxsim_lut(lut, packed, np.ascontiguousarray(ST.T), codes, norms, lens)
    want = kernels.maxsim(torch.from_numpy(residuals @ Q.T), np.ascontiguousarray(ST.T), codes, norms, lens)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@needs_kernels
@pytest.mark.parametrize("scale", [0.1, 1e-4, 1e-6, 3e4])  # normal, subnormal float16, and past its largest
def test_float16_table_is_the_float32_table_rounded_to_nearest_even(scale):
    nibbles = (np.random.default_rng(3).standard_normal((32, 16, 2, 16)) * scale).astype(np.float32)
    with np.errstate(over="ignore"):
        want = kernels.byte_lut(nibbles).astype(np.float16)  # numpy rounds to nearest even too
    for plain in (False, True):  # the AVX-512 conversion (where it runs) and the plain C one
        got = kernels.byte_lut16(nibbles, plain=plain)
        assert got.dtype == np.float16 and np.array_equal(got.view(np.uint16), want.view(np.uint16))


def _maxsim_in_order(lut16, packed, st_t, codes, norms, lens):
    """The fp16 table's MaxSim as the kernel sums it: float32 additions of the widened entries in byte order,
    (centroid part + residual part) times the reciprocal of the norm, the maxima summed over q in order."""
    out, j = [], 0
    for n in lens:
        best = None
        for t in range(j, j + n):
            acc = np.zeros(lut16.shape[2], np.float32)
            for b in range(packed.shape[1]):
                acc += lut16[b, packed[t, b]].astype(np.float32)
            inv = np.float32(1.0) / np.float32(max(norms[t], np.float32(1e-12)))
            value = (st_t[codes[t]] + acc) * inv
            best = value if best is None else np.maximum(best, value)
        total = np.float32(0.0)
        for v in best:
            total = np.float32(total + v)
        out.append(total)
        j += n
    return np.array(out, np.float32)


@needs_kernels
@pytest.mark.parametrize("lq", [32, 7])  # 32: the AVX-512 path where it runs; 7: the plain one
def test_maxsim_with_the_float16_table_sums_as_the_float32_one(lq):
    from embedctl.index.plaid.codec import decode_table

    ST = _scores(lq=lq, seed=8)
    dim, nbits = 64, 2
    rng = np.random.default_rng(9)
    table = decode_table(np.sort(rng.normal(scale=0.05, size=2 ** nbits)).astype(np.float32), nbits)
    lens = rng.integers(1, 12, size=20).astype(np.int64)
    lens[4] = 300  # longer than one tile of the in-place kernel
    n = int(lens.sum())
    packed = rng.integers(0, 256, size=(n, dim // 4), dtype=np.uint8)
    codes = rng.integers(0, ST.shape[1], size=n).astype(np.int32)
    norms = rng.uniform(0.8, 1.2, size=n).astype(np.float32)
    Q = rng.normal(size=(lq, dim)).astype(np.float32)
    lut = np.einsum("vt,btq->bvq", table, Q.T.reshape(dim // 4, 4, lq)).astype(np.float32)
    lut16, st_t = lut.astype(np.float16), np.ascontiguousarray(ST.T)
    want = _maxsim_in_order(lut16, packed, st_t, codes, norms, lens)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    pids = np.arange(len(lens), dtype=np.int64)
    for threads in (1, 2):
        np.testing.assert_array_equal(kernels.maxsim_lut(lut16, packed, st_t, codes, norms, lens, threads=threads),
                                      want)
        np.testing.assert_array_equal(
            kernels.maxsim_lut_docs(lut16, packed, st_t, codes, norms, offsets, pids, threads=threads), want)
    exact = kernels.maxsim_lut(lut, packed, st_t, codes, norms, lens)  # the float32 table: within the rounding
    bound = lq * (dim // 4) * float(np.abs(lut).max()) * 2.0 ** -11 / float(norms.min())
    assert 0 < np.abs(want - exact).max() <= bound


@needs_kernels
def test_bad_arguments_are_refused_before_the_c_code():
    ST_t = np.ascontiguousarray(_scores().T)
    with pytest.raises(ValueError, match="centroid ids"):
        kernels.segment_maxsum(ST_t, np.array([0, 300], np.int32), np.array([2]))
    with pytest.raises(ValueError, match="counts sum"):
        kernels.segment_maxsum(ST_t, np.array([0, 1], np.int32), np.array([3]))
    with pytest.raises(ValueError, match="slots"):
        kernels.scatter_max_rows(ST_t, np.array([0]), np.array([5]), 3)
    with pytest.raises(ValueError, match="lens"):
        kernels.maxsim(torch.zeros(2, 32), ST_t, np.array([0, 1], np.int32), np.ones(2, np.float32), np.array([3]))
    with pytest.raises(ValueError, match="lut must be"):
        kernels.maxsim_lut(np.zeros((4, 256, 32), np.float32), np.zeros((2, 5), np.uint8), ST_t,
                           np.array([0, 1], np.int32), np.ones(2, np.float32), np.array([2]))
    with pytest.raises(ValueError, match="one row per token"):
        kernels.maxsim_lut(np.zeros((4, 256, 32), np.float32), np.zeros((2, 4), np.uint8), ST_t,
                           np.array([0, 1], np.int32), np.ones(2, np.float32), np.array([3]))


@needs_kernels
@pytest.mark.parametrize("seed", range(6))
def test_top_positions_are_the_reference_positions(seed):
    """The C selection between PLAID's stages (embedctl_top_positions) against reference.top_positions: the n
    largest, a tie at the n-th value to the earlier positions, NaN counted as -inf; many ties (a few distinct
    values), all equal, -inf and NaN, ascending (every score replaces the heap's top) and descending, n from 1 to
    len - 1; the native backend's choice (the C heap up to TOP_HEAP_MAX, the reference beyond) the same."""
    from embedctl.index.plaid.native_backend import TOP_HEAP_MAX, NativeBackend
    from embedctl.index.plaid.reference import top_positions

    rng = np.random.default_rng(seed)
    backend = NativeBackend()
    for _ in range(60):
        size = int(rng.integers(2, 3000))
        kind = rng.integers(0, 6)
        scores = (rng.normal(size=size) if kind == 0 else rng.integers(0, 5, size=size) if kind == 1
                  else np.zeros(size) if kind == 2 else rng.choice([np.nan, -np.inf, 1.0, 0.5], size=size)
                  if kind == 3 else np.sort(rng.normal(size=size)) if kind == 4 else -np.sort(rng.normal(size=size)))
        scores = scores.astype(np.float32)
        for n in {1, size - 1, int(rng.integers(1, size)), min(TOP_HEAP_MAX, size - 1),
                  min(TOP_HEAP_MAX + 1, size - 1)}:
            want = top_positions(scores, n)
            got = kernels.top_positions(scores, n)
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(backend.top_positions(scores, n), want)
            assert len(got) == n and np.all(np.diff(got) > 0)
            finite = np.where(np.isnan(scores), -np.inf, scores)
            assert finite[got].min() >= np.delete(finite, got).max()  # nothing left out beats a kept one
    with pytest.raises(ValueError, match="need 1 <= n"):
        kernels.top_positions(np.zeros(5, np.float32), 5)
