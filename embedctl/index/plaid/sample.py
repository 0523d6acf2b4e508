"""The k-means sample: seeded pids, encoded once in groups, spilled to disk as float16 and reused.

The sample's vectors train k-means and the codec, and are later compressed into their chunks without
being encoded a second time. Groups of ``GROUP_DOCS`` sample documents are written under the build
folder's ``_work/`` as ``sample.{g}.doclens.npy`` then ``sample.{g}.f16.npy`` (temp name + rename), so a
killed run re-encodes only the unfinished groups, and a resumed index is bit-identical (the spill is reused,
not re-encoded). A group counts as spilled when both files exist (the one file-presence rule of a build;
everything else is recorded in the build ledger, embedctl.index.ledger).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from embedctl.index.plaid import kmeans
from embedctl.index.plaid.ivf import ranges_index
from embedctl.util.io import load_npy, save_npy
from embedctl.util.memory import scratch_empty

GROUP_DOCS = 1024


def sample_pids(num_docs: int, seed: int, size: int | None = None) -> np.ndarray:
    """Sorted seeded sample of pids (int64); all pids when the sample covers the collection."""
    n = kmeans.sample_size(num_docs) if size is None else int(min(size, num_docs))
    if n >= num_docs:
        return np.arange(num_docs, dtype=np.int64)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(num_docs, size=n, replace=False)).astype(np.int64)


def to_float16(vecs: np.ndarray) -> np.ndarray:
    """float16 copy of float32 vectors, rounded to nearest as numpy does.

    Converted by torch (F16C instructions), several times faster than numpy's scalar float16 path: the
    spill converts every sample vector once each way (0.76 s -> 0.11 s per 815k x 128 on 2 Zen 3 cores)."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(vecs, dtype=np.float32)).to(torch.float16).numpy()


def float16_rounded(vecs: np.ndarray) -> np.ndarray:
    """float32 vectors rounded to the nearest float16 (what the spill stores): every document is compressed
    from this representation, sampled or not, so its codes and residuals never depend on the sample."""
    import torch

    half = torch.from_numpy(np.ascontiguousarray(vecs, dtype=np.float32)).to(torch.float16)
    return half.to(torch.float32).numpy()


def float16_into(out: np.ndarray, src: np.ndarray) -> None:
    """Write float16 ``src`` into float32 ``out`` (same shape) through torch (exact; see ``to_float16``)."""
    import torch

    torch.from_numpy(out).copy_(torch.from_numpy(np.ascontiguousarray(src)))


class SampleSpill:
    """Sample vectors on disk: float16 group files plus doclens; read back by pid ranges."""

    def __init__(self, work: Path, pids: np.ndarray):
        self.work, self.pids = work, pids
        self.num_groups = (len(pids) + GROUP_DOCS - 1) // GROUP_DOCS
        self._doclens: np.ndarray | None = None
        self._offsets: np.ndarray | None = None
        self._buffer: np.ndarray | None = None  # doc_vectors' float32 rows, reused

    def _paths(self, g: int) -> tuple[Path, Path]:
        return self.work / f"sample.{g:05d}.doclens.npy", self.work / f"sample.{g:05d}.f16.npy"

    def done(self, g: int) -> bool:
        return all(p.is_file() for p in self._paths(g))

    def fill(self, docs: Sequence, encode: Callable[[list], tuple[np.ndarray, np.ndarray]],
             on_reused: Callable[[int], None] = lambda n: None, groups: Iterable[int] | None = None) -> None:
        """Encode every unfinished group of sample documents and spill it (``on_reused(n)`` for the ``n``
        documents of each group already on disk: ``encode`` reports its own progress).

        A group's files are written (temp name, fsync, rename) on one background thread while the next group
        is encoded, so the disk wait hides behind the encoder; at most one write is pending (memory stays two
        groups), and every write has landed, or raised here, before this returns."""
        from concurrent.futures import ThreadPoolExecutor

        self.work.mkdir(parents=True, exist_ok=True)
        pending = None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="spill") as writer:
            for g in range(self.num_groups) if groups is None else groups:  # groups: this rank's (embedctl.util.ranks)
                group = self.pids[g * GROUP_DOCS:(g + 1) * GROUP_DOCS]
                if not self.done(g):
                    vecs, doclens = encode([docs[int(p)] for p in group])
                    lens, half = np.asarray(doclens, dtype=np.int32), to_float16(vecs)
                    if pending is not None:
                        pending.result()  # re-raises a failed write
                    pending = writer.submit(self._write_group, g, lens, half)
                else:
                    on_reused(len(group))
            if pending is not None:
                pending.result()

    def _write_group(self, g: int, doclens: np.ndarray, half: np.ndarray) -> None:
        lens_path, vec_path = self._paths(g)
        save_npy(lens_path, doclens)
        save_npy(vec_path, half)  # written last: both files present means the group is done

    @property
    def doclens(self) -> np.ndarray:
        if self._doclens is None:
            parts = [load_npy(self._paths(g)[0], mmap=False, what="sample spill") for g in range(self.num_groups)]
            self._doclens = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
            self._offsets = np.concatenate([[0], np.cumsum(self._doclens)])
        return self._doclens

    @property
    def offsets(self) -> np.ndarray:
        """Start of each sample document's vectors in the concatenated sample (int64 [n + 1])."""
        _ = self.doclens
        return self._offsets

    @property
    def num_embeddings(self) -> int:
        return int(self.offsets[-1])

    def rows(self, idx: np.ndarray, buffer: np.ndarray | None = None) -> np.ndarray:
        """float32 [len(idx), dim] for sorted global sample-vector indices (read group by group into one array: the
        leading rows of ``buffer`` when it is a float32 [>= len(idx), dim] array, else a new one)."""
        idx = np.asarray(idx, dtype=np.int64)
        group_start = self.offsets[np.minimum(np.arange(self.num_groups + 1) * GROUP_DOCS, len(self.pids))]
        bounds = np.searchsorted(idx, group_start)
        out: np.ndarray | None = None
        for g in range(self.num_groups):
            lo, hi = bounds[g], bounds[g + 1]
            if hi > lo:
                arr = np.load(self._paths(g)[1], mmap_mode="c", allow_pickle=False)  # writable view: torch reads it
                if out is None and buffer is not None and buffer.shape[0] >= len(idx) and \
                        buffer.shape[1:] == arr.shape[1:] and buffer.dtype == np.float32:
                    out = buffer[:len(idx)]
                elif out is None:
                    out = scratch_empty((len(idx), arr.shape[1]), np.float32)
                local = idx[lo:hi] - group_start[g]
                contiguous = local[-1] - local[0] == hi - lo - 1  # sorted and unique: a plain slice, no gather
                float16_into(out[lo:hi], arr[local[0]:local[-1] + 1] if contiguous else arr[local])
                del arr
        return out if out is not None else np.zeros((0, 0), np.float32)

    def doc_vectors(self, sample_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectors (float32, concatenated) and doclens of sample documents given by sorted sample indices. The
        vectors live in one buffer reused by the next call (a chunk compresses them at once): a fresh array per
        group of documents paid for its pages' first touch, up to ~0.1 s of a SciFact build on this project's VM."""
        lens = self.doclens[sample_idx]
        idx = ranges_index(self.offsets[sample_idx], lens)
        vecs = self.rows(idx, self._buffer)
        if vecs.size and (self._buffer is None or len(vecs) > len(self._buffer)):
            self._buffer = vecs  # rows() made a new array, larger than the buffer: it becomes the buffer
        return vecs, lens
