"""Inverted file: for every centroid, the sorted unique pids having at least one vector assigned to it.

Stored as ``ivf.npy`` (pids, concatenated centroid by centroid) and ``ivf_lengths.npy`` (int32 [C]).
Built with sorts and bincounts over (centroid, pid) keys: no Python loop over pids or centroids.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def embedding_pids(doclens: np.ndarray, pid_offset: int = 0) -> np.ndarray:
    """pid of every vector: doclens [3, 1] -> [0, 0, 0, 1] (+ pid_offset), int64."""
    return np.repeat(np.arange(pid_offset, pid_offset + len(doclens), dtype=np.int64), np.asarray(doclens, np.int64))


def unique_pairs(codes: np.ndarray, doclens: np.ndarray, pid_offset: int, num_docs: int) -> np.ndarray:
    """Sorted unique keys ``code * num_docs + pid`` of one chunk (int64)."""
    keys = np.asarray(codes, dtype=np.int64) * num_docs + embedding_pids(doclens, pid_offset)
    keys.sort()  # sort + neighbour test: several times faster than numpy 2's hash-based np.unique here
    return keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if len(keys) else keys


def build_ivf(chunks: Iterable[tuple[np.ndarray, np.ndarray, int]], num_partitions: int, num_docs: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """IVF from per-chunk (codes [E_i], doclens [n_i], pid_offset).

    Returns (ivf [sum of lengths] int32 (int64 when num_docs >= 2^31), ivf_lengths int32 [num_partitions]).
    Example: codes [0, 1, 0 | 1] with doclens [3 | 1] -> ivf [0, 0, 1], lengths [1, 2].
    """
    parts = [unique_pairs(c, d, off, num_docs) for c, d, off in chunks]
    keys = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    keys.sort(kind="stable")  # chunks hold disjoint pid ranges, so keys are already unique
    codes = keys // num_docs
    pid_dtype = np.int32 if num_docs < 2**31 else np.int64
    ivf = (keys - codes * num_docs).astype(pid_dtype)
    lengths = np.bincount(codes, minlength=num_partitions).astype(np.int32)
    return ivf, lengths


def ranges_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + n)`` for each (s, n), vectorised: ([5, 0], [2, 3]) -> [5, 6, 0, 1, 2]."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    shift = np.repeat(np.asarray(starts, dtype=np.int64) - (ends - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift
