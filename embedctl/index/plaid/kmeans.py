"""Centroids for the PLAID codec: sample sizes, the number of partitions, and seeded faiss k-means."""

from __future__ import annotations

import math

import numpy as np

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


def use_gpu() -> bool:
    try:
        import faiss

        return faiss.get_num_gpus() > 0
    except Exception:  # faiss-cpu builds may lack the symbol
        return False


def train_centroids(x: np.ndarray, k: int, *, niters: int = 4, seed: int = 0, gpu: bool | None = None) -> np.ndarray:
    """Seeded faiss k-means on float32 [n, dim] -> L2-normalised centroids float16 [k, dim].

    Deterministic for a given input, seed and machine (faiss assigns exactly and sums per centroid).
    """
    import faiss

    x = np.ascontiguousarray(x, dtype=np.float32)
    km = faiss.Kmeans(
        x.shape[1], int(k), niter=int(niters), seed=int(seed), gpu=use_gpu() if gpu is None else gpu,
        verbose=False, max_points_per_centroid=max(256, len(x) // max(int(k), 1) + 1), min_points_per_centroid=1,
    )
    km.train(x)
    cent = km.centroids.astype(np.float32)
    cent /= np.maximum(np.linalg.norm(cent, axis=1, keepdims=True), 1e-12)
    return cent.astype(np.float16)
