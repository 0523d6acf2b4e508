"""Centroids for the PLAID codec: sample sizes, the number of partitions, and seeded k-means on a backend."""

from __future__ import annotations

import math

import numpy as np

from embedctl.index.plaid.bf16 import on_bf16_grid
from embedctl.index.plaid.reference import Backend, squared_norms

# k-means trains on at most this many sample vectors per centroid (seeded subsample). faiss's default is
# 256; with 4 iterations the cost is niter * points * C * dim, the largest CPU cost after encoding, and
# on SciFact 32 per centroid gives the same PLAID quality (bench/results, docs/index-format.md).
POINTS_PER_CENTROID = 32


def sample_size(num_docs: int) -> int:
    """Documents whose vectors train k-means and the codec: ~16 sqrt(120 N), at most N.

    >>> sample_size(5183), sample_size(100_000)
    (5183, 55426)
    """
    return int(min(num_docs, 1 + 16 * math.sqrt(120 * num_docs)))


def num_partitions_for(num_embeddings_est: float, num_train_points: int | None = None) -> int:
    """2^floor(log2(16 sqrt(E))), never more than the training points (faiss needs n >= k).

    >>> num_partitions_for(815_632)
    8192
    """
    k = 2 ** int(math.floor(math.log2(16 * math.sqrt(max(num_embeddings_est, 1.0)))))
    if num_train_points is not None:
        while k > 1 and k > num_train_points:
            k //= 2
    return max(1, k)


def kmeans_train_points(num_sample_embeddings: int, num_partitions: int, heldout: int,
                        per_centroid: int = POINTS_PER_CENTROID) -> int:
    """How many non-held-out vectors k-means trains on (capped at ``per_centroid`` per centroid)."""
    return int(min(num_sample_embeddings - heldout, per_centroid * num_partitions))


def train_centroids(x: np.ndarray, k: int, *, niters: int = 4, seed: int = 0, backend: Backend | None = None
                    ) -> np.ndarray:
    """Seeded k-means on float32 [n, dim] -> L2-normalised centroids rounded to bfloat16, stored float16 [k, dim].

    faiss's k-means as its Python loop (``faiss.contrib.clustering.kmeans``) runs it, draw for draw: k distinct
    random points as the first centroids, then per iteration the L2 assignment (``backend.kmeans_step``, the
    reference backend when None), each centroid the mean of its points, and every empty cluster filled by
    splitting a populated one (:func:`split_empty_clusters`). Here rather than through faiss so that a PLAID
    build does not load faiss (~0.2 s of a build on a 2-core host); tests/index/test_plaid_codec.py checks the
    same centroids as faiss's loop. Deterministic for a given input, seed and backend; exact backends give the
    same centroids.

    The normalised centroids are rounded to bfloat16 (8 significant bits), at most 2^-8 of each value where
    float16's own rounding moves it 2^-11: far below what the 1-4 bit residuals resolve. float16 holds them on
    the bfloat16 grid (exactly from 2^-17 up; smaller ones round to multiples of 2^-24, bfloat16 values too:
    ``bf16.is_bf16`` of the result is true). A query's centroid scores on AMX tiles then need no lo half
    (search_amx.pack_bf16x2): half the bytes read, two products instead of three, the same bits.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    backend = backend or Backend()
    sq_norms = squared_norms(x)  # once for every iteration (each step would redo this serial pass)
    rs = np.random.RandomState(int(seed))  # faiss's generator and order of draws: the same centroids
    cent = x[rs.choice(len(x), size=int(k), replace=False)]
    codes = None  # the last assignment: a fast backend starts each row's search there (hints)
    for _ in range(int(niters)):
        codes, _, sums = backend.kmeans_step(x, cent, sq_norms, codes)
        counts = np.bincount(codes, minlength=int(k))
        cent = sums / np.maximum(counts, 1).astype(np.float32)[:, None]
        split_empty_clusters(counts, cent, rs)
    cent = np.asarray(cent, dtype=np.float32)
    cent /= np.maximum(np.linalg.norm(cent, axis=1, keepdims=True), 1e-12)
    return on_bf16_grid(cent).astype(np.float16)


def split_empty_clusters(counts: np.ndarray, centroids: np.ndarray, rs: np.random.RandomState) -> int:
    """Give each empty cluster (``counts`` 0) half of a populated one, in place, as faiss does: the populated
    cluster j is drawn with probability proportional to counts[j] - 1, and its centroid c becomes c / f while
    the empty one's becomes c * f, f = 1 +- 1/1024 alternating over dimensions; the counts are split in
    half. Returns how many clusters were split."""
    k = len(counts)
    empty = np.flatnonzero(counts == 0)
    f = np.ones(centroids.shape[1], dtype=centroids.dtype)
    f[::2] += 1 / 1024.0
    f[1::2] -= 1 / 1024.0
    split = 0
    while len(empty):  # one pass unless the empty clusters outnumber those of two points or more
        weights = np.maximum(counts.astype(np.float64) - 1, 0)
        weights /= weights.sum()
        take = min(int(np.count_nonzero(weights)), len(empty))
        for ci, cj in zip(empty[:take], rs.choice(k, size=take, p=weights), strict=True):
            c = centroids[cj].copy()
            centroids[ci], centroids[cj] = c * f, c / f
            counts[ci] = counts[cj] // 2
            counts[cj] -= counts[ci]
            split += 1
        empty = empty[take:]
    return split
