"""Centroids for the PLAID codec: sample sizes, the number of partitions, and seeded k-means on a backend."""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np

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
    """Seeded k-means on float32 [n, dim] -> L2-normalised centroids float16 [k, dim].

    faiss's k-means (``faiss.contrib.clustering.kmeans``: random init, L2 assignment, means, splitting of
    empty clusters) with the assignment step done by ``backend.kmeans_step`` (the reference backend when
    None). Deterministic for a given input, seed and backend; exact backends give the same centroids.
    """
    from faiss.contrib import clustering

    data = _BackendAssign(np.ascontiguousarray(x, dtype=np.float32), backend or Backend())
    with contextlib.redirect_stdout(io.StringIO()):  # it prints "preproc..." whatever `verbose` says
        cent = np.asarray(clustering.kmeans(int(k), data, niter=int(niters), seed=int(seed), verbose=False),
                          dtype=np.float32)
    cent /= np.maximum(np.linalg.norm(cent, axis=1, keepdims=True), 1e-12)
    return cent.astype(np.float16)


class _BackendAssign:
    """faiss.contrib.clustering's dataset interface, its assignment through a PLAID backend."""

    def __init__(self, x: np.ndarray, backend: Backend):
        self.x, self.backend = x, backend
        self.sq_norms = squared_norms(x)  # once for every iteration (each step would redo this serial pass)
        self.previous: np.ndarray | None = None  # the last assignment: a fast backend starts each row's search there

    def count(self) -> int:
        return self.x.shape[0]

    def dim(self) -> int:
        return self.x.shape[1]

    def get_subset(self, indices):
        return self.x[indices]

    def assign_to(self, centroids, weights=None):
        if weights is not None:  # faiss passes none here; weighted sums are not what k-means asks of us
            raise ValueError("weighted k-means is not supported")
        codes, dist, sums = self.backend.kmeans_step(self.x, centroids, self.sq_norms, self.previous)
        self.previous = codes
        return codes, dist, sums
