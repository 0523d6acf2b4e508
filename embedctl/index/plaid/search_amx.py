"""PLAID search on AMX tiles (embedctl/index/plaid/_search_amx.c, in the search kernels' library): a query's
centroid scores and the final MaxSim's residual parts as three bfloat16 products with float32 sums (each float32
value split into bfloat16 hi and lo: bf16.split_halves; two products for values that are bfloat16 values, which
have no lo). The native backend uses them at search.precision fp16 (and bf16, for the centroid scores) where
:func:`amx_available`; search_kernels checks every argument the same way.
"""

from __future__ import annotations

from functools import cache
from typing import NamedTuple

import numpy as np

from embedctl.index.plaid import search_kernels
from embedctl.index.plaid.bf16 import split_halves


@cache
def amx_available() -> bool:
    """:func:`centroid_scores_amx` can run here: the library was built with AMX, the CPU has AMX-BF16, and Linux
    granted this process the tile state."""
    lib = search_kernels.library()
    return lib is not None and bool(lib.embedctl_search_amx_ready())


class PackedBf16x2(NamedTuple):
    """Centroids split for :func:`centroid_scores_amx`: ``packed`` uint16 [C_pad, halves, dim_pad], each
    centroid's bfloat16 hi = bf16(v) then lo = bf16(v - hi) per dimension, zero-padded to C_pad (C rounded up to
    16) and dim_pad (dim rounded up to 32); ``num_c`` and ``dim`` the centroids' own. ``halves`` is 1 (hi alone)
    where every lo is 0: centroids that are bfloat16 values, as k-means stores them (kmeans.train_centroids); the
    kernel then reads half the bytes and runs two products instead of three, the same bits."""

    packed: np.ndarray
    num_c: int
    dim: int


def pack_bf16x2(centroids: np.ndarray) -> PackedBf16x2:
    """The centroids' bfloat16 halves for :func:`centroid_scores_amx` (once per index: 4 bytes a value, as many
    as the float32 centroids; 2 where the centroids are bfloat16 values: ``halves`` 1)."""
    centroids = np.asarray(centroids, np.float32)
    if centroids.ndim != 2 or not np.isfinite(centroids).all():
        raise ValueError(f"need finite float32 centroids [C, dim], got {centroids.shape}")
    num_c, dim = centroids.shape
    c_pad, d_pad = -(-num_c // 16) * 16, -(-dim // 32) * 32
    hi, lo = split_halves(centroids)
    packed = np.zeros((c_pad, 1 if lo is None else 2, d_pad), dtype=np.uint16)
    packed[:num_c, 0, :dim] = hi
    if lo is not None:
        packed[:num_c, 1, :dim] = lo
    return PackedBf16x2(packed, num_c, dim)


def centroid_scores_amx(p: PackedBf16x2, Q: np.ndarray, out: np.ndarray | None = None, threads: int = 1,
                        block_max: np.ndarray | None = None) -> np.ndarray:
    """float32 [C, Lq] ~ centroids @ Q^T on AMX tiles, as three bfloat16 products (hi x hi + hi x lo + lo x hi,
    float32 accumulators; _search_amx.c): each entry within ~2^-16 sum_d |c_d q_d| of the exact dot product,
    plus float32 accumulation (:func:`amx_err_bound`), not the fp32 kernel's bits. ``p`` from
    :func:`pack_bf16x2`; ``out`` and ``threads`` as search_kernels.centroid_scores (the same bits whatever the
    count). ``block_max``: a C-contiguous float32 [ceil(C / 16), Lq] to fill, as the scores are stored, with the
    maxima of their blocks of 16 rows (search_kernels.col_top_blocks' input). Only where
    :func:`amx_available`."""
    Q = np.ascontiguousarray(Q, np.float32)
    if Q.ndim != 2 or Q.shape[1] != p.dim or not 1 <= Q.shape[0] <= search_kernels.MAX_LQ:
        raise ValueError(f"need Q float32 [Lq, {p.dim}] with 1 <= Lq <= {search_kernels.MAX_LQ}, got {Q.shape}")
    shape = (p.num_c, Q.shape[0])
    out = search_kernels.scores_out(out, shape)
    lib = search_kernels.library()
    if block_max is None:
        code = lib.embedctl_centroid_scores_amx(p.packed, p.num_c, p.packed.shape[1], p.packed.shape[2], Q,
                                                Q.shape[0], p.dim, out, search_kernels.thread_count(threads))
    else:
        search_kernels.check_block_max(block_max, p.num_c, Q.shape[0])
        code = lib.embedctl_centroid_scores_amx_max(p.packed, p.num_c, p.packed.shape[1], p.packed.shape[2], Q,
                                                    Q.shape[0], p.dim, out, block_max,
                                                    search_kernels.thread_count(threads))
    if code == -2:
        raise MemoryError("embedctl_centroid_scores_amx: out of memory")
    if code != 0:
        raise RuntimeError(f"embedctl_centroid_scores_amx failed (code {code}: -3 is no AMX here)")
    return out


def residual_split(table: np.ndarray) -> np.ndarray:
    """uint16 [256, halves, per]: the bfloat16 hi and lo halves of each byte value's residual values (``table``:
    float32 [256, per], reference.decode_table) for :func:`maxsim_amx_docs`; halves 1 (hi alone) where every lo is
    0: bucket weights that are bfloat16 values, as the codec stores them (codec.train_codec), whose vectors the
    kernel then decodes to half the bytes for two products instead of three, the same bits."""
    table = np.asarray(table, np.float32)
    if table.ndim != 2 or table.shape[0] != 256 or table.shape[1] not in (1, 2, 4, 8) or \
            not np.isfinite(table).all():
        raise ValueError(f"need a finite float32 byte table [256, 8 / nbits], got {table.shape}")
    hi, lo = split_halves(table)
    return np.ascontiguousarray(hi[:, None, :] if lo is None else np.stack([hi, lo], axis=1))


def maxsim_amx_docs(split: np.ndarray, Q: np.ndarray, packed: np.ndarray, st_t: np.ndarray, codes: np.ndarray,
                    norms: np.ndarray, offsets: np.ndarray, pids: np.ndarray, threads: int = 1) -> np.ndarray:
    """search_kernels.maxsim_lut_docs's MaxSim with each residual part Q[q] . r computed on AMX tiles from the
    packed bytes (``split`` from :func:`residual_split`; the three bfloat16 products of :func:`centroid_scores_amx`,
    so within :func:`amx_err_bound` of r and Q), then folded as every MaxSim kernel folds. Q float32 [Lq, dim]; the
    other arguments as there -> float32 [len(pids)]. ``threads``: the documents split across that many threads (the
    same bits). Only where :func:`amx_available`."""
    Q = np.ascontiguousarray(Q, np.float32)
    split = np.ascontiguousarray(split, np.uint16)
    if split.ndim != 3 or split.shape[0] != 256 or split.shape[1] not in (1, 2) or packed.ndim != 2 or \
            Q.ndim != 2 or Q.shape[1] != packed.shape[1] * split.shape[2] or Q.shape[0] != st_t.shape[1]:
        raise ValueError(f"need split [256, 1 or 2, per], packed [n, B] and Q [Lq, B * per] with Lq the scores' "
                         f"columns, got {split.shape}, {packed.shape}, {Q.shape} and scores {st_t.shape}")
    st_t, packed, codes, norms, pids = search_kernels.rows_in_place(st_t, packed, codes, norms, offsets, pids)
    out = np.empty(len(pids), dtype=np.float32)
    lib = search_kernels.library()
    rc = lib.embedctl_maxsim_amx_docs(split, split.shape[1], split.shape[2], packed.shape[1], packed, st_t,
                                      st_t.shape[0], Q, Q.shape[0], codes, norms.ctypes.data,
                                      int(norms.dtype == np.float16), offsets, pids, len(pids), out,
                                      search_kernels.thread_count(threads))
    if rc == -5:
        raise MemoryError("embedctl_maxsim_amx_docs: out of memory")
    if rc != 0:
        raise ValueError(search_kernels.docs_error(rc, st_t))
    return out


def amx_err_bound(centroids: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """float32 [C, Lq]: a bound on |:func:`centroid_scores_amx` - <c, q>| per entry, in units of
    sum_d |c_d q_d| (bfloat16's unit roundoff is 2^-8): the split leaves v - hi - lo within 2^-16 |v|, so the
    dropped lo x lo and remainders are within ~3 * 2^-16 of |c_d q_d| each; the bfloat16 products are exact in
    float32 and the accumulators round once per addition, 3 * dim_pad additions of at most 2^-24 of the running
    magnitude each. A 3% margin on both for the second-order terms; 1e-30 for products flushed to zero."""
    d_pad = -(-centroids.shape[1] // 32) * 32
    mag = np.abs(np.asarray(centroids, np.float64)) @ np.abs(np.asarray(Q, np.float64)).T
    return (mag * 1.03 * (3 * 2.0 ** -16 + 3 * d_pad * 2.0 ** -24) + 1e-30).astype(np.float32)
