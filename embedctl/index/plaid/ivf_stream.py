"""The inverted file written in two streaming passes over the chunks: memory is one chunk, not the index.

:func:`embedctl.index.plaid.ivf.build_ivf` sorts every (centroid, pid) pair of the index in memory (16
bytes per unique pair, twice while sorting: ~3 GB at 100M pairs). This writes the same two arrays, byte
for byte, holding one chunk's pairs at a time: pass 1 counts each centroid's pids chunk by chunk; pass 2
places each chunk's pids at its centroids' running write positions in a memory-mapped ``ivf.npy``. Chunks
hold increasing, disjoint pid ranges and a chunk's keys are sorted by (centroid, pid), so appending chunk
after chunk keeps every list sorted: the order the one global sort gives.

Example::

    total = write_ivf(lambda: per_chunk(), num_partitions, num_docs, out / "ivf.npy", out / "ivf_lengths.npy")
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from embedctl.index.plaid.ivf import unique_pairs
from embedctl.util import atomic
from embedctl.util.io import save_npy

Chunks = Callable[[], Iterable[tuple[np.ndarray, np.ndarray, int]]]


def write_ivf(chunks: Chunks, num_partitions: int, num_docs: int, ivf_path: Path, lengths_path: Path) -> int:
    """Write ``ivf.npy`` and ``ivf_lengths.npy`` (as build_ivf + save_npy would) from ``chunks()``, called
    twice, each call yielding (codes [E_i], doclens [n_i], pid_offset) in chunk order. Returns the entries."""
    lengths = np.zeros(num_partitions, dtype=np.int64)
    for codes, doclens, offset in chunks():
        keys = unique_pairs(codes, doclens, offset, num_docs)
        lengths += np.bincount(keys // num_docs, minlength=num_partitions)
    total = int(lengths.sum())
    pid_dtype = np.int32 if num_docs < 2**31 else np.int64
    if total == 0:
        save_npy(ivf_path, np.zeros(0, pid_dtype))
    else:
        cursor = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
        with atomic.atomic_path(ivf_path) as tmp:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=pid_dtype, shape=(total,))
            for codes, doclens, offset in chunks():
                keys = unique_pairs(codes, doclens, offset, num_docs)
                cent = keys // num_docs
                counts = np.bincount(cent, minlength=num_partitions)
                first = np.cumsum(counts) - counts  # where each centroid's run starts inside this chunk
                dest = cursor[cent] + (np.arange(len(keys), dtype=np.int64) - first[cent])
                out[dest] = (keys - cent * num_docs).astype(pid_dtype)
                cursor += counts
            out.flush()
            del out
    save_npy(lengths_path, lengths.astype(np.int32))
    return total
