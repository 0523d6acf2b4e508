"""Centroids for the PLAID codec: sample sizes, the number of partitions, and seeded faiss k-means."""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np

from embedctl.index.plaid import assign, kernels

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


def train_centroids(x: np.ndarray, k: int, *, niters: int = 4, seed: int = 0, gpu: bool | None = None,
                    precision: str = "fp32", device: str = "cpu") -> np.ndarray:
    """Seeded faiss k-means on float32 [n, dim] -> L2-normalised centroids float16 [k, dim].

    ``precision="fp32"`` runs faiss's C++ k-means (on a GPU when faiss has one). ``"bf16"`` and ``"int16"``
    run faiss's Python k-means (``faiss.contrib.clustering.kmeans``: the same algorithm — random init, L2
    assignment, means, splitting of empty clusters) with the assignment step done by :func:`assign.nearest`
    in bfloat16 or 16-bit integers (see embedctl/index/plaid/assign.py; ``int16`` without its kernel is fp32). Deterministic for a given input, seed, precision and machine.

    ``device`` (the indexer's, e.g. ``cuda``): faiss's GPU k-means when faiss has GPUs, else (the PyPI
    ``faiss-cpu`` wheel) the same Python k-means with the fp32 assignment in torch on that device.
    """
    import faiss

    x = np.ascontiguousarray(x, dtype=np.float32)
    gpu = use_gpu() if gpu is None else gpu
    if device != "cpu" and not gpu:
        cent = _contrib_kmeans(x, int(k), int(niters), int(seed), "fp32", torch_device=device)
    elif not gpu and (precision == "bf16" or (precision == "int16" and kernels.i16_available())):
        cent = _contrib_kmeans(x, int(k), int(niters), int(seed), precision)
    else:
        km = faiss.Kmeans(
            x.shape[1], int(k), niter=int(niters), seed=int(seed), gpu=gpu,
            verbose=False, max_points_per_centroid=max(256, len(x) // max(int(k), 1) + 1), min_points_per_centroid=1,
        )
        km.train(x)
        cent = km.centroids.astype(np.float32)
    cent /= np.maximum(np.linalg.norm(cent, axis=1, keepdims=True), 1e-12)
    return cent.astype(np.float16)


def _contrib_kmeans(x: np.ndarray, k: int, niters: int, seed: int, precision: str,
                    torch_device: str | None = None) -> np.ndarray:
    from faiss.contrib import clustering

    data = _KernelAssign(x, precision, torch_device)
    with contextlib.redirect_stdout(io.StringIO()):  # it prints "preproc..." whatever `verbose` says
        cent = clustering.kmeans(k, data, niter=niters, seed=seed, verbose=False)
    return np.asarray(cent, dtype=np.float32)


class _KernelAssign:
    """faiss.contrib.clustering's dataset interface: L2 assignment through :func:`assign.nearest` in bfloat16
    or 16-bit integers (exact with the C kernels), or in fp32 torch on ``torch_device``; exact fp32 sums."""

    def __init__(self, x: np.ndarray, precision: str, torch_device: str | None = None):
        self.x, self.precision, self.torch_device = x, precision, torch_device
        self.sq_norms = np.einsum("ij,ij->i", x, x, dtype=np.float64).astype(np.float32)

    def count(self) -> int:
        return self.x.shape[0]

    def dim(self) -> int:
        return self.x.shape[1]

    def get_subset(self, indices):
        return self.x[indices]

    def assign_to(self, centroids, weights=None):
        import torch

        cent = np.ascontiguousarray(centroids, dtype=np.float32)
        bias = -0.5 * (cent * cent).sum(axis=1)  # argmax <x, c> - |c|^2 / 2 = argmin |x - c|^2
        with torch.inference_mode():
            xt, ct = torch.from_numpy(self.x), torch.from_numpy(cent)
            if self.torch_device is None and (self.precision == "int16" or kernels.available()):
                codes, best = assign.nearest_exact(self.x, cent, self.precision, bias, x_norms=np.sqrt(self.sq_norms))
                dist = np.maximum(self.sq_norms - 2.0 * best, 0.0)  # |x - c|^2, the objective faiss reports
                idx = torch.from_numpy(codes.astype(np.int64))
            else:  # fp32 torch on the indexer's device, or bfloat16 torch without the C kernels
                codes = (assign.nearest_torch(self.x, cent, bias, self.torch_device) if self.torch_device is not None
                         else assign.nearest(self.x, cent, "bf16", bias=bias))
                idx = torch.from_numpy(codes.astype(np.int64))
                dist = (xt - ct.index_select(0, idx)).pow_(2).sum(dim=1).numpy()
            if weights is not None:
                xt = xt * torch.from_numpy(np.asarray(weights, np.float32)).unsqueeze(1)
            sums = torch.zeros(ct.shape, dtype=torch.float32).index_add_(0, idx, xt).numpy()
        return codes.astype(np.int64), dist, sums
