"""PLAID numeric core: bit packing, residual codec, k-means sizing and determinism, IVF vs brute force."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from embedctl.errors import EmbedctlError
from embedctl.index.plaid import codec, kmeans
from embedctl.index.plaid.bf16 import is_bf16, on_bf16_grid
from embedctl.index.plaid.ivf import build_ivf, embedding_pids, ranges_index
from embedctl.index.plaid.reference import Backend


def unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_pack_unpack_round_trip(nbits):
    rng = np.random.default_rng(nbits)
    buckets = rng.integers(0, 1 << nbits, size=(37, 128), dtype=np.uint8)
    packed = codec.pack_bits(buckets, nbits)
    assert packed.dtype == np.uint8 and packed.shape == (37, 128 * nbits // 8)
    np.testing.assert_array_equal(codec.unpack_bits(packed, nbits), buckets)


def test_pack_layout_first_dimension_in_high_bits():
    assert codec.pack_bits(np.array([[3, 0, 1, 2]], np.uint8), 2)[0, 0] == 0b11_00_01_10
    assert codec.pack_bits(np.array([[1, 0, 0, 0, 0, 0, 0, 1]], np.uint8), 1)[0, 0] == 0b1000_0001
    assert codec.pack_bits(np.array([[0xA, 0x5]], np.uint8), 4)[0, 0] == 0xA5


@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_decode_table_matches_unpack(nbits):
    weights = np.arange(1 << nbits, dtype=np.float32) * 10
    table = codec.decode_table(weights, nbits)
    assert table.shape == (256, 8 // nbits)
    packed = np.arange(256, dtype=np.uint8)[:, None]
    np.testing.assert_array_equal(table, weights[codec.unpack_bits(packed, nbits)])


@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_codec_round_trip_error_bounded_by_bucket_width(nbits):
    rng = np.random.default_rng(0)
    x = unit(rng, 4000, 64)
    cent = kmeans.train_centroids(x, 32, niters=4, seed=0)
    c = codec.train_codec(cent, x[:1000], nbits)
    assert c.bucket_cutoffs.shape == ((1 << nbits) - 1,) and c.bucket_weights.shape == (1 << nbits,)
    assert np.all(np.diff(c.bucket_cutoffs) >= 0) and np.all(np.diff(c.bucket_weights) >= 0)
    codes, packed = c.compress(x)
    assert codes.dtype == np.int32 and packed.shape == (4000, 64 * nbits // 8)
    np.testing.assert_array_equal(codes, np.argmax(x @ cent.astype(np.float32).T, axis=1))
    res = x - cent.astype(np.float32)[codes]
    rec = c.decompress(codes, packed, normalize=False) - cent.astype(np.float32)[codes]
    b = np.searchsorted(c.bucket_cutoffs, res)
    # every decoded value is its bucket's weight, and each weight lies inside its own bucket
    np.testing.assert_allclose(rec, c.bucket_weights[b], atol=1e-6)
    np.testing.assert_array_equal(np.searchsorted(c.bucket_cutoffs, c.bucket_weights), np.arange(1 << nbits))
    edges = np.concatenate([[res.min()], c.bucket_cutoffs, [res.max()]])
    width = np.diff(edges)[b]
    assert np.all(np.abs(res - rec) <= width + 1e-6)
    cos = np.sum(c.decompress(codes, packed) * x, axis=1)
    cos_centroid = np.sum(cent.astype(np.float32)[codes] * x, axis=1)
    assert cos.mean() > cos_centroid.mean() + {1: 0.2, 2: 0.3, 4: 0.4}[nbits]


def test_bad_nbits_and_dims():
    with pytest.raises(EmbedctlError, match="1, 2 or 4"):
        codec.check_nbits(3, 128)
    with pytest.raises(EmbedctlError, match="whole number of bytes"):
        codec.check_nbits(1, 12)


def test_partition_and_sample_sizes():
    assert kmeans.num_partitions_for(815_632) == 8192
    assert kmeans.num_partitions_for(1_000) == 256  # 16 * sqrt(1000) = 506 -> 2^8
    assert kmeans.num_partitions_for(1_000, num_train_points=100) == 64
    assert kmeans.sample_size(5183) == 5183 and kmeans.sample_size(1_000_000) == 175_272
    assert codec.heldout_size(815_632) == 40_781 and codec.heldout_size(10**7) == 50_000


def test_kmeans_seeded_and_normalised():
    x = unit(np.random.default_rng(1), 3000, 32)
    a = kmeans.train_centroids(x, 64, niters=4, seed=7)
    b = kmeans.train_centroids(x, 64, niters=4, seed=7)
    assert a.dtype == np.float16 and a.shape == (64, 32)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a.astype(np.float32), axis=1), 1.0, atol=2e-3)


class _FaissDataset:
    """faiss.contrib.clustering's dataset interface over the reference backend's assignment."""

    def __init__(self, x):
        self.x, self.backend = x, Backend()

    def count(self):
        return len(self.x)

    def dim(self):
        return self.x.shape[1]

    def get_subset(self, indices):
        return self.x[indices]

    def assign_to(self, centroids, weights=None):
        return self.backend.kmeans_step(self.x, centroids)


@pytest.mark.parametrize("clumped", [False, True])
def test_kmeans_is_faiss_loop_draw_for_draw(clumped):
    """The same centroids as faiss's own k-means loop (the build no longer imports faiss for it), also when
    clusters empty out and are split (clumped: many copies of a few points)."""
    clustering = pytest.importorskip("faiss.contrib.clustering")
    rng = np.random.default_rng(3)
    x = unit(rng, 2000, 16)
    if clumped:
        x = np.repeat(x[:40], 50, axis=0)  # 40 distinct points, 64 clusters: empties every iteration
    with contextlib.redirect_stdout(io.StringIO()):  # faiss prints "preproc..."
        theirs = np.asarray(clustering.kmeans(64, _FaissDataset(x), niter=4, seed=9, verbose=False), np.float32)
    theirs /= np.maximum(np.linalg.norm(theirs, axis=1, keepdims=True), 1e-12)
    mine = kmeans.train_centroids(x, 64, niters=4, seed=9)
    np.testing.assert_array_equal(mine, on_bf16_grid(theirs).astype(np.float16))  # then rounded to bfloat16
    assert is_bf16(mine)


def test_bf16_values_stay_bf16_in_float16():
    """train_centroids stores bfloat16 values as float16: every one survives the conversion exactly, float16's
    subnormals (below 2^-14) included, and rounding twice changes nothing."""
    rng = np.random.default_rng(0)
    v = (rng.standard_normal(200_000) * np.exp2(rng.uniform(-30, 2, 200_000))).astype(np.float32)
    grid = on_bf16_grid(v)
    assert is_bf16(grid) and not is_bf16(v)
    assert is_bf16(grid.astype(np.float16))
    np.testing.assert_array_equal(on_bf16_grid(grid), grid)
    big = np.abs(v) >= 2.0 ** -14  # float16's normal range: the conversion is exact
    np.testing.assert_array_equal(grid.astype(np.float16)[big].astype(np.float32), grid[big])
    assert (np.abs(grid - v) <= np.abs(v) * 2.0 ** -8).all()  # half a unit in the 8th significant bit


def test_kmeans_splits_every_empty_cluster():
    counts = np.array([0, 6, 0, 1, 0], np.int64)
    cent = np.arange(10, dtype=np.float32).reshape(5, 2) + 1
    assert kmeans.split_empty_clusters(counts, cent, np.random.RandomState(0)) == 3
    assert counts.sum() == 7 and (counts > 0).all()
    assert len({tuple(row) for row in cent.tolist()}) == 5  # each split centroid moved apart from its source


def test_ranges_index():
    np.testing.assert_array_equal(ranges_index(np.array([5, 0]), np.array([2, 3])), [5, 6, 0, 1, 2])
    np.testing.assert_array_equal(ranges_index(np.array([4, 9, 1]), np.array([0, 1, 0])), [9])
    assert len(ranges_index(np.zeros(0, np.int64), np.zeros(0, np.int64))) == 0


def test_ivf_matches_brute_force_map():
    rng = np.random.default_rng(3)
    num_docs, k = 257, 40
    doclens = rng.integers(0, 30, size=num_docs)  # some documents have no vectors at all
    codes = rng.integers(0, k - 3, size=int(doclens.sum())).astype(np.int32)  # 3 empty centroids
    cut_docs = [0, 100, 101, 257]  # three chunks, one holding a single document
    offsets = np.concatenate([[0], np.cumsum(doclens)])
    chunks = [(codes[offsets[a]:offsets[b]], doclens[a:b], a) for a, b in zip(cut_docs, cut_docs[1:], strict=False)]
    ivf, lengths = build_ivf(chunks, k, num_docs)
    brute: dict[int, set[int]] = {c: set() for c in range(k)}
    for pid, code in zip(embedding_pids(doclens), codes, strict=True):
        brute[int(code)].add(int(pid))
    assert ivf.dtype == np.int32 and lengths.dtype == np.int32 and lengths.sum() == len(ivf)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for c in range(k):
        assert list(ivf[starts[c]:starts[c + 1]]) == sorted(brute[c])
