"""WARP-style candidate generation for PLAID search (issue 36; Scheerer et al., "WARP: An Efficient Engine
for Multi-Vector Retrieval", 2025), in place of PLAID's stages 2-4 (candidates, pruned and full centroid
interaction):

1. each query token q probes its best cells (the backend's warp_probes within :func:`probe_limits`: at most 32
   at k <= 10, WARP's nprobe, fewer once they hold that many cells' worth of vectors);
2. every vector in those cells is scored exactly *for that token alone*, straight from its packed residual
   bytes through the token's nibble tables (``(S[q, c] + sum_b hi[q, b, byte_b >> 4] + lo[q, b, byte_b & 15])
   / norm``: WARP's implicit decompression), read from a cell-ordered copy of the index (:class:`WarpLayout`);
3. a document's estimate is sum_q max(its best vector in q's cells, ``miss[q]``): ``miss[q]`` is the score of
   q's best unprobed cell, WARP's missing-similarity estimate for a vector q did not see; a document whose
   vectors there all score below it keeps it too (measured: the same or better nDCG@10 than taking the lower
   seen score, e.g. 0.9998 against 0.9976 of exhaustive on all 5,183 SciFact documents with minilm);
4. the best ``pool`` estimates (:func:`warp_pool`) go to stage 5, exact MaxSim on every vector of the
   document (embedctl/search/plaid.py ``rank``), which alone sets the returned scores.

Where PLAID prunes on centroid scores alone (a document's residuals never count before stage 5), the
estimate here already holds the exact token similarity of every vector it saw, so stage 5 needs a pool of
a few times k instead of ndocs / 4: measured on minilm as an untrained ColBERT (2,000 and 5,183 SciFact
documents) and on the trained ColBERT (2,000), bench/bench_budget.py; the table is in docs/evaluation.md.

The arithmetic of steps 1 and 2 is the backend's (reference: numpy, reference.warp_probes and warp_scores;
native: the C kernels embedctl_warp_probes and embedctl_warp_scores), the rest is here, the same for both.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from embedctl.index.plaid.search_kernels import RECORD_EXTRA_ROWS  # a block record's rows after its bytes

MIN_CELLS = 8  # a token probes at least this many cells (unless given search.ncells)
POOL_PER_K = 2  # stage 5 scores the best max(POOL_PER_K * k, POOL_LEAST) estimates ...
POOL_LEAST = 40  # ... at least this many
BLOCK = 16  # vectors per block: one AVX-512 register of scores


@dataclass
class WarpLayout:
    """The index's vectors grouped by cell (WARP's layout), tombstoned documents left out, each cell padded to
    whole blocks of BLOCK vectors: cell c holds vectors ``cell_offsets[c]:cell_offsets[c + 1]`` (multiples of
    BLOCK). Block j is one record ``blocks[j]`` uint8 [B + RECORD_EXTRA_ROWS, BLOCK]: its vectors' packed
    residual bytes position-major in rows 0 .. B - 1 (byte b of its BLOCK vectors side by side, what one SIMD
    load takes), then their norms (the stored float16 norms widened to float32, 1 on padding) and their pids
    (int32, -1 on padding), each BLOCK values in 4 rows (:attr:`norms`, :attr:`pids`). One record a block, so
    that a cell is one stream of bytes for the scan (embedctl_warp_scores). Within a cell, vectors in index
    order."""

    cell_offsets: np.ndarray
    blocks: np.ndarray
    num_docs: int
    cell_sizes: np.ndarray  # int64 [C]: live vectors per cell (without the padding)

    @cached_property
    def mean_cell_size(self) -> float:
        """Live vectors per non-empty cell (at least 1): :func:`probe_limits`' unit, once per layout."""
        return max(1.0, float(self.cell_sizes.sum()) / max(1, int(np.count_nonzero(self.cell_sizes))))

    @property
    def nbytes(self) -> int:
        """Packed residual bytes a vector (B)."""
        return self.blocks.shape[1] - RECORD_EXTRA_ROWS

    @cached_property
    def norms(self) -> np.ndarray:
        """float32 [N]: the vectors' norms, out of the records (a copy, made once: the reference reads it)."""
        return self._field(0, np.float32)

    @cached_property
    def pids(self) -> np.ndarray:
        """int32 [N]: the vectors' documents (-1 on padding), out of the records (a copy, made once)."""
        return self._field(4, np.int32)

    def _field(self, row: int, dtype: type) -> np.ndarray:
        rows = self.blocks[:, self.nbytes + row:self.nbytes + row + 4, :].reshape(len(self.blocks), 4 * BLOCK)
        return np.ascontiguousarray(rows).view(dtype).reshape(-1)

    def packed_rows(self) -> np.ndarray:
        """uint8 [N, B]: the vectors' packed residuals row by row (the reference reads them so)."""
        return self.blocks[:, :self.nbytes, :].transpose(0, 2, 1).reshape(-1, self.nbytes)

    @classmethod
    def build(cls, codes: list[np.ndarray], residuals: list[np.ndarray], norms: list[np.ndarray],
              doclens: np.ndarray, num_cells: int, deleted: np.ndarray | None) -> WarpLayout:
        """From the index's chunk arrays (codes int32 [n_i], residuals uint8 [n_i, B], norms float16 [n_i]; the
        chunks in vector order), ``doclens`` [num_docs] and the tombstones (bool [num_docs] or None)."""
        all_codes = np.concatenate([np.asarray(c) for c in codes]) if len(codes) != 1 else np.asarray(codes[0])
        vec_pids = np.repeat(np.arange(len(doclens), dtype=np.int32), np.asarray(doclens, np.int64))
        order = np.argsort(all_codes, kind="stable")  # by cell, index order within a cell
        if deleted is not None and deleted.any():
            order = order[~deleted[vec_pids[order]]]
        cell_of = all_codes[order].astype(np.int64)
        sizes = np.bincount(cell_of, minlength=num_cells).astype(np.int64)
        padded = -(-sizes // BLOCK) * BLOCK
        starts, padded_starts = np.cumsum(sizes) - sizes, np.cumsum(padded) - padded
        dest = padded_starts[cell_of] + (np.arange(len(order)) - starts[cell_of])  # each vector's padded slot
        total = int(padded.sum())
        nbytes = residuals[0].shape[1]
        rows = np.zeros((total, nbytes), dtype=np.uint8)
        rows[dest] = _take_rows(residuals, order)
        widened = np.ones(total, dtype=np.float32)
        widened[dest] = np.concatenate([np.asarray(n) for n in norms])[order] if len(norms) != 1 else \
            np.take(np.asarray(norms[0]), order)
        pids = np.full(total, -1, dtype=np.int32)
        pids[dest] = vec_pids[order]
        nblocks = total // BLOCK
        blocks = np.empty((nblocks, nbytes + RECORD_EXTRA_ROWS, BLOCK), dtype=np.uint8)
        blocks[:, :nbytes, :] = rows.reshape(nblocks, BLOCK, nbytes).transpose(0, 2, 1)
        blocks[:, nbytes:nbytes + 4, :] = widened.view(np.uint8).reshape(nblocks, 4, BLOCK)
        blocks[:, nbytes + 4:, :] = pids.view(np.uint8).reshape(nblocks, 4, BLOCK)
        return cls(np.concatenate([[0], np.cumsum(padded)]).astype(np.int64), blocks, len(doclens), sizes)

    def scratch(self, local: threading.local) -> WarpScratch:
        """The kernel's scratch, one per thread (the queries of a batch run on several)."""
        s = getattr(local, "warp", None)
        if s is None or len(s.best) != self.num_docs:
            s = local.warp = WarpScratch.for_docs(self.num_docs)
        return s


@dataclass
class WarpScratch:
    """The native kernel's working memory (embedctl_warp_scores): ``best`` float32 [D] all -inf and ``total``
    float32 [D] all 0 between calls (the kernel leaves them so: a document's best in the current token and
    its estimate so far), ``pids`` int32 / ``scores`` float32 [capacity]: one token's kept (document, score)
    pairs, grown by :meth:`fit` when a token's probed cells hold more vectors."""

    best: np.ndarray
    total: np.ndarray
    pids: np.ndarray
    scores: np.ndarray

    @classmethod
    def for_docs(cls, num_docs: int, capacity: int = 1 << 13) -> WarpScratch:
        return cls(np.full(num_docs, -np.inf, np.float32), np.zeros(num_docs, np.float32),
                   np.empty(capacity, np.int32), np.empty(capacity, np.float32))

    def fit(self, pairs: int) -> None:
        """Room for at least ``pairs`` pairs (doubling, so a growing need reallocates rarely)."""
        if pairs > len(self.pids):
            size = max(pairs, 2 * len(self.pids))
            self.pids, self.scores = np.empty(size, np.int32), np.empty(size, np.float32)


def _take_rows(residuals: list[np.ndarray], order: np.ndarray) -> np.ndarray:
    """Rows ``order`` (global vector numbers) of the chunks' packed residuals, as one uint8 [len(order), B]."""
    if len(residuals) == 1:
        return np.take(np.asarray(residuals[0]), order, axis=0)
    starts = np.concatenate([[0], np.cumsum([len(r) for r in residuals])])
    chunk = np.searchsorted(starts, order, side="right") - 1
    out = np.empty((len(order), residuals[0].shape[1]), dtype=np.uint8)
    for i, r in enumerate(residuals):
        rows = np.flatnonzero(chunk == i)
        out[rows] = np.take(np.asarray(r), order[rows] - starts[i], axis=0)
    return out


def probe_limits(width: int, layout: WarpLayout, k: int, ncells: int | None = None) -> tuple[float, int, int]:
    """(want, least, most) of the backend's warp_probes (reference.warp_probes) for each token's best ``width``
    cells: ``ncells`` when given; else its best :func:`probe_cells` (k) cells, or fewer once they hold that many
    cells' worth of vectors (that many times the index's mean cell size: a token whose best cells are large
    stops early), at least MIN_CELLS; at most width - 1 (one is left to estimate the unprobed) unless width is
    every cell."""
    every = width >= len(layout.cell_sizes)
    most = max(1, width if every else width - 1)
    if ncells is not None:
        n = max(1, min(int(ncells), most))
        return math.inf, n, n
    most = min(most, probe_cells(k))
    return probe_cells(k) * layout.mean_cell_size, min(MIN_CELLS, most), most


def probe_cells(k: int) -> int:
    """The most cells each query token probes (and the vectors it stops at: that many times the index's mean
    cell size): 32 at k <= 10 (WARP's nprobe), 48 at k <= 100, 64 above."""
    return 32 if k <= 10 else 48 if k <= 100 else 64


def cells_to_select(k: int, ncells: int | None, num_cells: int) -> int:
    """How many best cells per token to select for :func:`probe_limits`: its most, plus the first unprobed one."""
    return min(num_cells, (probe_cells(k) if ncells is None else max(1, int(ncells))) + 1)


def warp_pool(k: int) -> int:
    """Documents scored exactly (stage 5) after the estimates: max(POOL_PER_K * k, POOL_LEAST)."""
    return max(POOL_PER_K * k, POOL_LEAST)
