"""ctypes front for the PLAID search kernels (embedctl/index/plaid/_search_kernels.c, _warp_kernels.c and
_search_amx.c, one library), with a check of every argument.

Used by the native backend (embedctl/index/plaid/native_backend.py): the centroid interactions and the
final MaxSim. ``available()`` says whether the library was built at install time (a C compiler was
present); without it the reference backend runs.
"""

from __future__ import annotations

import ctypes
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.native import array_arg, load_library

_F32 = array_arg(np.float32)
_I32 = array_arg(np.int32)
_I64 = array_arg(np.int64)
_U8 = array_arg(np.uint8)
_U16 = array_arg(np.uint16)


@cache
def _library() -> ctypes.CDLL | None:
    lib = load_library(Path(__file__).parent, "_search_kernels")
    if lib is None:
        return None
    # the marker: built from these sources (_warp_kernels.c, _warp_probes.c, _search_kernels.c, _search_amx.c, one
    # library), so every entry below is there (the AMX ones as stubs where the compiler has no AMX); without it,
    # older sources
    if not hasattr(lib, "embedctl_search_kernels_v7"):  # built from older sources (a checkout updated in place)
        warnings.warn("the PLAID search kernels were built from an older source: searching with the reference "
                      "backend (same results, slower); rebuild them: pip install -e . (or python setup.py "
                      "build_ext --inplace)", RuntimeWarning, stacklevel=2)
        return None
    lib.embedctl_segment_maxsum.argtypes = [_F32, ctypes.c_int64, _I32, _I64, ctypes.c_int64, _F32]
    lib.embedctl_scatter_max_rows.argtypes = [_F32, ctypes.c_int64, _I64, _I64, ctypes.c_int64, _F32]
    lib.embedctl_maxsim.argtypes = [ctypes.c_void_p, ctypes.c_int, _F32, ctypes.c_int64, _I32, _F32, _I64,
                                    ctypes.c_int64, _F32]
    lib.embedctl_maxsim_lut.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, _U8, _F32, ctypes.c_int64,
                                        _I32, _F32, _I64, ctypes.c_int64, _F32, ctypes.c_int]
    lib.embedctl_doc_maxsum.argtypes = [_F32, ctypes.c_int64, ctypes.c_int64, _I32, _I64, _I64, ctypes.c_int64,
                                        _F32]
    lib.embedctl_maxsim_lut_docs.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, _U8, _F32, ctypes.c_int64,
                                             ctypes.c_int64, _I32, ctypes.c_void_p, ctypes.c_int, _I64, _I64,
                                             ctypes.c_int64, _F32, ctypes.c_int]
    lib.embedctl_byte_lut16.argtypes = [_F32, ctypes.c_int64, ctypes.c_int64, _U16, ctypes.c_int]
    lib.embedctl_byte_lut16.restype = None
    lib.embedctl_lut16_fast.argtypes = []
    lib.embedctl_lut16_fast.restype = ctypes.c_int
    lib.embedctl_row_top.argtypes = [_F32, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _I64]
    lib.embedctl_col_top.argtypes = [_F32, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _F32, _F32, _I64, _I64,
                                     ctypes.c_int, ctypes.c_int]
    lib.embedctl_col_top.restype = ctypes.c_int
    lib.embedctl_col_top_blocks.argtypes = [_F32, ctypes.c_int64, ctypes.c_int64, _F32, ctypes.c_int64, _F32, _F32,
                                            _I64, _I64, ctypes.c_int]
    lib.embedctl_col_top_blocks.restype = ctypes.c_int
    lib.embedctl_byte_lut.argtypes = [_F32, ctypes.c_int64, ctypes.c_int64, _F32]
    lib.embedctl_byte_lut.restype = None
    lib.embedctl_centroid_scores.argtypes = [_F32, ctypes.c_int64, ctypes.c_int64, _F32, ctypes.c_int64, _F32,
                                             ctypes.c_int, ctypes.c_int]
    lib.embedctl_centroid_scores.restype = None
    lib.embedctl_centroid_scores_max.argtypes = [_F32, ctypes.c_int64, ctypes.c_int64, _F32, ctypes.c_int64, _F32,
                                                 _F32, ctypes.c_int, ctypes.c_int]
    lib.embedctl_centroid_scores_max.restype = None
    lib.embedctl_centroid_scores_fast.argtypes = []
    lib.embedctl_centroid_scores_fast.restype = ctypes.c_int
    lib.embedctl_warp_scores.argtypes = [_F32, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _I64, _F32, _I64,
                                         ctypes.c_int64, _F32, _I64, _U8, ctypes.c_int64, _F32, _F32,
                                         _I32, _F32, ctypes.c_int64, _I64, _F32, ctypes.POINTER(ctypes.c_int),
                                         ctypes.POINTER(ctypes.c_int64), ctypes.c_int, ctypes.c_int]
    lib.embedctl_warp_scores.restype = ctypes.c_int64
    lib.embedctl_warp_probes.argtypes = [_I64, ctypes.c_int64, ctypes.c_int64, _I64, ctypes.c_int64, _F32,
                                         ctypes.c_double, ctypes.c_int64, ctypes.c_int64, _I64, _F32, _F32]
    lib.embedctl_warp_probes.restype = ctypes.c_int
    lib.embedctl_top_positions.argtypes = [_F32, ctypes.c_int64, ctypes.c_int64, _I64]
    lib.embedctl_top_positions.restype = ctypes.c_int64
    lib.embedctl_centroid_scores_amx.argtypes = [_U16, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _F32,
                                                 ctypes.c_int64, ctypes.c_int64, _F32, ctypes.c_int]
    lib.embedctl_centroid_scores_amx.restype = ctypes.c_int
    lib.embedctl_maxsim_amx_docs.argtypes = [_U16, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _U8, _F32,
                                             ctypes.c_int64, _F32, ctypes.c_int64, _I32, ctypes.c_void_p, ctypes.c_int,
                                             _I64, _I64, ctypes.c_int64, _F32, ctypes.c_int]
    lib.embedctl_maxsim_amx_docs.restype = ctypes.c_int
    lib.embedctl_centroid_scores_amx_max.argtypes = [_U16, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _F32,
                                                     ctypes.c_int64, ctypes.c_int64, _F32, _F32, ctypes.c_int]
    lib.embedctl_centroid_scores_amx_max.restype = ctypes.c_int
    lib.embedctl_search_amx_ready.argtypes = []
    lib.embedctl_search_amx_ready.restype = ctypes.c_int
    lib.embedctl_openmp.argtypes = []
    lib.embedctl_openmp.restype = ctypes.c_int
    for fn in (lib.embedctl_row_top, lib.embedctl_segment_maxsum, lib.embedctl_scatter_max_rows, lib.embedctl_maxsim,
               lib.embedctl_maxsim_lut, lib.embedctl_doc_maxsum, lib.embedctl_maxsim_lut_docs):
        fn.restype = ctypes.c_int
    return lib


def available() -> bool:
    return _library() is not None


def library() -> ctypes.CDLL | None:
    """The kernels' library with its argument types set (None where it was not built), for the AMX kernels' front
    (search_amx.py), which shares it."""
    return _library()


def segment_maxsum(st_t: np.ndarray, codes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """sum_q max over each segment's codes of st_t[code, q] -> float32 [len(counts)]; -inf when empty.

    st_t float32 [C, Lq] (C-contiguous), codes int32 in [0, C), counts int64 summing to len(codes).
    """
    st_t, codes, counts = _prepare(st_t, codes, np.int32), np.ascontiguousarray(codes, np.int32), \
        np.ascontiguousarray(counts, np.int64)
    if int(counts.sum()) != len(codes):
        raise ValueError(f"counts sum to {int(counts.sum())}, codes hold {len(codes)}")
    out = np.empty(len(counts), dtype=np.float32)
    if _library().embedctl_segment_maxsum(st_t, st_t.shape[1], codes, counts, len(counts), out) != 0:
        raise ValueError(f"query length {st_t.shape[1]} outside 1..4096")
    return out


def scatter_max_rows(st_t: np.ndarray, cents: np.ndarray, slots: np.ndarray, num_slots: int) -> np.ndarray:
    """out[s, q] = max over entries i with slots[i] == s of st_t[cents[i], q] -> float32 [num_slots, Lq]
    (-inf where no entry); entries with a negative slot are skipped."""
    st_t = _prepare(st_t, cents, np.int64)
    cents, slots = np.ascontiguousarray(cents, np.int64), np.ascontiguousarray(slots, np.int64)
    if len(cents) != len(slots) or (len(slots) and int(slots.max()) >= num_slots):
        raise ValueError("cents and slots must have one length and slots must be < num_slots")
    out = np.full((num_slots, st_t.shape[1]), -np.inf, dtype=np.float32)
    _library().embedctl_scatter_max_rows(st_t, st_t.shape[1], cents, slots, len(cents), out)
    return out


def maxsim(sims, st_t: np.ndarray, codes: np.ndarray, norms: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Per document: sum_q max over its tokens j of (st_t[codes[j], q] + sims[j, q]) / max(norms[j], 1e-12).

    sims: torch [n, Lq] float32 or bfloat16 (the residual part, token-major), st_t float32 [C, Lq],
    codes [n], norms [n], lens int64 [m] (each >= 1, summing to n) -> float32 [m].
    """
    import torch

    sims = sims.contiguous()
    is_bf16 = sims.dtype == torch.bfloat16
    if sims.dtype not in (torch.float32, torch.bfloat16) or sims.dim() != 2 or sims.shape[1] != st_t.shape[1]:
        raise ValueError(f"sims must be float32/bfloat16 [n, {st_t.shape[1]}], got {sims.dtype} {tuple(sims.shape)}")
    st_t = _prepare(st_t, codes, np.int32)
    codes, lens = np.ascontiguousarray(codes, np.int32), np.ascontiguousarray(lens, np.int64)
    norms = np.ascontiguousarray(norms, np.float32)
    if len(codes) != sims.shape[0] or len(norms) != len(codes) or int(lens.sum()) != len(codes) or \
            (len(lens) and int(lens.min()) < 1):
        raise ValueError("codes, norms and sims need one row per token, and lens (each >= 1) must sum to it")
    out = np.empty(len(lens), dtype=np.float32)
    _library().embedctl_maxsim(sims.data_ptr(), int(is_bf16), st_t, st_t.shape[1], codes, norms, lens, len(lens), out)
    return out


def maxsim_lut(lut: np.ndarray, packed: np.ndarray, st_t: np.ndarray, codes: np.ndarray, norms: np.ndarray,
               lens: np.ndarray, threads: int = 1) -> np.ndarray:
    """:func:`maxsim` with the residual part read from packed bytes through a per-query table, no decoding.

    lut float32 [B, 256, Lq] (``lut[b, v, q]`` = Q[q] . the residual values byte value v decodes to at byte
    position b), or that table rounded to float16 (search.precision fp16: the entries widened and summed in
    float32 in the same order), packed uint8 [n, B], st_t float32 [C, Lq], codes [n], norms [n], lens int64 [m]
    -> float32 [m]. ``threads``: the documents split across that many threads (the same bits).
    """
    lut = _table(lut)
    packed = np.ascontiguousarray(packed, np.uint8)
    _check_lut(lut, packed, st_t.shape[1])
    st_t = _prepare(st_t, codes, np.int32)
    codes, lens = np.ascontiguousarray(codes, np.int32), np.ascontiguousarray(lens, np.int64)
    norms = np.ascontiguousarray(norms, np.float32)
    if len(codes) != len(packed) or len(norms) != len(codes) or int(lens.sum()) != len(codes) or \
            (len(lens) and int(lens.min()) < 1):
        raise ValueError("codes, norms and packed need one row per token, and lens (each >= 1) must sum to it")
    out = np.empty(len(lens), dtype=np.float32)
    if _library().embedctl_maxsim_lut(lut.ctypes.data, int(lut.dtype == np.float16), lut.shape[0], packed, st_t,
                                      st_t.shape[1], codes, norms, lens, len(lens), out, thread_count(threads)) != 0:
        raise ValueError(f"query length {st_t.shape[1]} outside 1..4096")
    return out


def doc_maxsum(st_t: np.ndarray, doc_codes: np.ndarray, offsets: np.ndarray, pids: np.ndarray) -> np.ndarray:
    """:func:`segment_maxsum` of the documents ``pids``, their codes read in place from the CSR lists
    ``doc_codes[offsets[p]:offsets[p + 1]]`` (int32, int64 [num_docs + 1]) -> float32 [len(pids)]."""
    st_t = np.ascontiguousarray(st_t, dtype=np.float32)
    pids = _check_pids(pids, offsets, len(doc_codes))
    out = np.empty(len(pids), dtype=np.float32)
    rc = _library().embedctl_doc_maxsum(st_t, st_t.shape[0], st_t.shape[1], doc_codes, offsets, pids, len(pids), out)
    if rc != 0:
        raise ValueError(f"query length {st_t.shape[1]} outside 1..4096" if rc == -1 else
                         f"centroid ids outside [0, {st_t.shape[0]})")
    return out


def maxsim_lut_docs(lut: np.ndarray, packed: np.ndarray, st_t: np.ndarray, codes: np.ndarray, norms: np.ndarray,
                    offsets: np.ndarray, pids: np.ndarray, threads: int = 1) -> np.ndarray:
    """:func:`maxsim_lut` of the documents ``pids`` (each >= 1 vector), their vectors read in place: rows
    ``offsets[p]:offsets[p + 1]`` of ``codes`` int32 [n], ``packed`` uint8 [n, B] and ``norms`` float16 or
    float32 [n] (memory maps are fine: nothing is gathered) -> float32 [len(pids)]; the same bits (``lut`` float32
    or float16, as there). ``threads``: the documents split across that many threads (the same bits)."""
    lut = _table(lut)
    _check_lut(lut, packed, st_t.shape[1])
    st_t, packed, codes, norms, pids = rows_in_place(st_t, packed, codes, norms, offsets, pids)
    out = np.empty(len(pids), dtype=np.float32)
    rc = _library().embedctl_maxsim_lut_docs(lut.ctypes.data, int(lut.dtype == np.float16), lut.shape[0], packed,
                                             st_t, st_t.shape[0], st_t.shape[1], codes, norms.ctypes.data,
                                             int(norms.dtype == np.float16), offsets, pids, len(pids), out,
                                             thread_count(threads))
    if rc != 0:
        raise ValueError(docs_error(rc, st_t))
    return out


def rows_in_place(st_t, packed, codes, norms, offsets, pids):
    """The MaxSim kernels over documents read in place: their arrays as the C code reads them, pids checked."""
    if not (len(codes) == len(packed) == len(norms)) or norms.dtype not in (np.float16, np.float32):
        raise ValueError("codes, packed and norms (float16 or float32) need one row per vector")
    st_t = np.ascontiguousarray(st_t, dtype=np.float32)
    packed, codes, norms = (np.ascontiguousarray(packed), np.ascontiguousarray(codes, np.int32),
                            np.ascontiguousarray(norms))
    return st_t, packed, codes, norms, _check_pids(pids, offsets, len(codes))


def docs_error(rc: int, st_t: np.ndarray) -> str:
    return {-1: f"query length {st_t.shape[1]} outside 1..4096", -2: "a document without vectors",
            -3: f"centroid ids outside [0, {st_t.shape[0]})", -4: "no AMX on this CPU"}[rc]


MAX_TOP = 1024  # the kernel's limit on m
MAX_LQ = 4096  # query tokens (the kernels' limit)
# warp_scores' block records: after a block's B rows of bytes, 4 rows of norms (float32) and 4 of pids (int32)
RECORD_EXTRA_ROWS = 8


def row_top(st: np.ndarray, m: int) -> np.ndarray:
    """int64 [rows, m]: the m best columns of each row of float32 ``st`` [rows, cols], best first, an exact tie
    to the smaller column (numpy's stable argsort of -st, cut to m); 1 <= m <= min(cols, MAX_TOP)."""
    st = np.ascontiguousarray(st, dtype=np.float32)
    if st.ndim != 2 or not 1 <= m <= min(st.shape[1], MAX_TOP):
        raise ValueError(f"need a 2-D array and 1 <= m <= min(columns, {MAX_TOP}), got {st.shape} and m={m}")
    out = np.empty((st.shape[0], m), dtype=np.int64)
    if _library().embedctl_row_top(st, st.shape[0], st.shape[1], m, out) != 0:
        raise ValueError("scores must not be NaN")
    return out


def warp_scores(nibbles: np.ndarray, cells: np.ndarray, cell_scores: np.ndarray, ncells: np.ndarray, miss: np.ndarray,
                cell_offsets: np.ndarray, blocks: np.ndarray, scratch: Any, plain: bool = False, threads: int = 1
                ) -> tuple[np.ndarray, np.ndarray]:
    """WARP-style estimates (embedctl/index/plaid/_warp_kernels.c, embedctl_warp_scores): (pids int64 [n],
    float32 [n]) of the documents with a vector in some probed cell, pids ascending.

    nibbles float32 [Lq, B, 2, 16] (per token and byte position: the high nibble's table, then the low one's),
    cells int64 [Lq, m] (each token's cells, best first) and cell_scores float32 [Lq, m] (their centroid
    scores), of which ncells int64 [Lq] are probed, miss float32 [Lq]; the cell-ordered vectors
    (embedctl.search.warp.WarpLayout): cell_offsets int64 [C + 1] (multiples of 16), blocks uint8
    [N / 16, B + 8, 16] (a record per block of 16 vectors: their bytes position-major, then their norms float32
    and pids int32, -1 on padding); scratch: a :class:`embedctl.search.warp.WarpScratch` (best float32 [D] all
    -inf, total float32 [D] all 0 for D documents, left as found; its pair buffers grown here to the size the
    kernel reports when too small). The kernel checks the ids and offsets of the cells it reads (not all C
    offsets, on every query). ``plain``: the plain C block scores even where AVX-512 runs (the same bits).
    ``threads``: the tokens' scans split across that many threads, the folds on this one (the same bits; the
    pair buffers then hold every token's pairs).
    """
    num_c, lq = len(cell_offsets) - 1, len(cells)
    best, total = scratch.best, scratch.total
    nbytes = blocks.shape[1] - RECORD_EXTRA_ROWS if blocks.ndim == 3 else 0
    if nbytes < 1 or nibbles.shape != (lq, nbytes, 2, 16) or blocks.shape[2:] != (16,) or cells.ndim != 2 or \
            cell_scores.shape != cells.shape or ncells.shape != (lq,) or miss.shape != (lq,) or \
            cell_offsets.shape != (num_c + 1,) or int(cell_offsets[-1]) != 16 * len(blocks) or \
            len(total) != len(best) or \
            any(a.dtype != t or not a.flags.c_contiguous for a, t in (
                (nibbles, np.float32), (cell_scores, np.float32), (cells, np.int64), (ncells, np.int64),
                (miss, np.float32), (cell_offsets, np.int64), (blocks, np.uint8), (best, np.float32),
                (total, np.float32))):
        raise ValueError("warp_scores: arrays of the wrong shape, type or layout")
    out_pids = np.empty(len(best) + 1, dtype=np.int64)  # + 1: the kernel writes one slot past the last document
    out_scores = np.empty(len(best), dtype=np.float32)
    ascending, needed = ctypes.c_int(0), ctypes.c_int64(0)
    for _ in range(2):  # the pair buffers too small for this query's cells: grown to what the kernel says, again
        n = _library().embedctl_warp_scores(nibbles, nbytes, num_c, lq, cells, cell_scores, ncells, cells.shape[1],
                                            miss, cell_offsets, blocks, len(best), best, total,
                                            scratch.pids, scratch.scores, len(scratch.pids), out_pids, out_scores,
                                            ctypes.byref(ascending), ctypes.byref(needed), thread_count(threads),
                                            int(plain))
        if n != -6:
            break
        scratch.fit(needed.value)
    if n < 0:
        raise ValueError({-1: f"query length {lq} outside 1..4096", -2: "ncells outside [0, cells per token]",
                          -3: f"cell ids outside [0, {num_c})", -4: "document ids outside the scratch",
                          -5: "warp_scores: cell offsets must be non-decreasing multiples of 16"}[int(n)])
    pids, scores = out_pids[:n], out_scores[:n]
    if not ascending.value:  # the kernel listed few documents in first-seen order
        order = np.argsort(pids)
        pids, scores = pids[order], scores[order]
    return pids, scores


def warp_probes(st_t: np.ndarray, ordered: np.ndarray, cell_sizes: np.ndarray, want: float, least: int, most: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """reference.warp_probes in C (embedctl/index/plaid/_warp_probes.c: the same counts and scores) from the
    centroid scores as the kernels hold them, ``st_t`` float32 [C, Lq]; ``ordered`` int64 [Lq, m] (C-contiguous,
    ids checked), ``cell_sizes`` int64 [C] -> (int64 [Lq], float32 [Lq], and the cells' scores float32 [Lq, m]:
    st_t[ordered[q, j], q], :func:`warp_scores`' ``cell_scores``)."""
    lq, m = ordered.shape
    if st_t.shape != (len(cell_sizes), lq):
        raise ValueError(f"warp_probes: scores {st_t.shape} for {len(cell_sizes)} cells and {lq} tokens")
    ncells, miss, cell_scores = np.empty(lq, np.int64), np.empty(lq, np.float32), np.empty((lq, m), np.float32)
    rc = _library().embedctl_warp_probes(ordered, lq, m, cell_sizes, len(cell_sizes), st_t, want, least, most,
                                         ncells, miss, cell_scores)
    if rc != 0:
        raise ValueError({-1: f"warp_probes: need 1 <= least {least} <= most {most} <= {m} cells and 1..{MAX_LQ} "
                              f"tokens", -2: f"warp_probes: cell ids outside [0, {len(cell_sizes)})"}[rc])
    return ncells, miss, cell_scores


def top_positions(scores: np.ndarray, n: int) -> np.ndarray:
    """reference.top_positions in C for float32 ``scores`` (C-contiguous), 1 <= n < len(scores): the same
    positions."""
    out = np.empty(n, np.int64)
    got = _library().embedctl_top_positions(scores, len(scores), n, out)
    if got == -2:
        raise MemoryError("embedctl_top_positions: out of memory")
    if got != n:
        raise ValueError(f"top_positions: need 1 <= n < {len(scores)}, got {n}")
    return out


def openmp() -> bool:
    """Whether the kernels were built with OpenMP (else ``threads`` > 1 runs on the calling thread)."""
    return bool(_library().embedctl_openmp())


def thread_count(threads: int) -> int:
    """``threads`` as the kernels take it (>= 1, else ValueError)."""
    threads = int(threads)
    if threads < 1:
        raise ValueError(f"threads = {threads}: must be >= 1")
    return threads


def centroid_scores_fast() -> bool:
    """Whether :func:`centroid_scores` runs its AVX-512 version here (elsewhere its portable loop is slow)."""
    return bool(_library().embedctl_centroid_scores_fast())


def centroid_scores(centroids: np.ndarray, Q: np.ndarray, plain: bool = False, out: np.ndarray | None = None,
                    threads: int = 1, block_max: np.ndarray | None = None) -> np.ndarray:
    """float32 [C, Lq]: centroids [C, dim] @ Q [Lq, dim]^T, each entry one fused multiply-add chain over the dims
    in order (the same bits on every CPU; ``plain``: the portable C loop even where AVX-512 runs). ``out``: a
    float32 [C, Lq] buffer to write (a fresh 2 MiB array per query costs its page faults: ~0.1 ms).
    ``threads``: the centroids split across that many threads (the same bits). ``block_max``: a C-contiguous
    float32 [ceil(C / 16), Lq] to fill, as the scores are stored, with the maxima of their blocks of 16 rows
    (:func:`col_top_blocks`' input, as search_amx.centroid_scores_amx writes it)."""
    if centroids.ndim != 2 or Q.ndim != 2 or centroids.shape[1] != Q.shape[1] or centroids.dtype != np.float32 or \
            not centroids.flags.c_contiguous:
        raise ValueError(f"need C-contiguous float32 centroids [C, dim] and Q [Lq, dim], got {centroids.shape} and "
                         f"{Q.shape}")
    q_t = np.ascontiguousarray(np.asarray(Q, np.float32).T)
    shape = (centroids.shape[0], Q.shape[0])
    out = scores_out(out, shape)
    lib = _library()
    if block_max is None:
        lib.embedctl_centroid_scores(centroids, shape[0], centroids.shape[1], q_t, shape[1], out, thread_count(threads),
                                     int(plain))
        return out
    check_block_max(block_max, *shape)
    lib.embedctl_centroid_scores_max(centroids, shape[0], centroids.shape[1], q_t, shape[1], out, block_max,
                                     thread_count(threads), int(plain))
    return out


def check_block_max(block_max: np.ndarray, num_c: int, lq: int) -> None:
    """What the centroid-score kernels need of a block maxima buffer for [num_c, lq] scores (ValueError otherwise)."""
    if block_max.shape != (-(-num_c // 16), lq) or block_max.dtype != np.float32 or not block_max.flags.c_contiguous:
        raise ValueError(f"block_max must be C-contiguous float32 [{-(-num_c // 16)}, {lq}]")


def scores_out(out: np.ndarray | None, shape: tuple[int, int]) -> np.ndarray:
    """A centroid-score kernel's output: ``out`` when it is a C-contiguous float32 array of ``shape`` (a buffer to
    rewrite), a new one when None; anything else refused."""
    if out is None:
        return np.empty(shape, dtype=np.float32)
    if out.shape != shape or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous float32 {shape}")
    return out


def byte_lut(nibbles: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The MaxSim table float32 [B, 256, Lq] (lut[b, v, q] = Q[q] . the values byte v decodes to at position b)
    from the per-token nibble tables float32 [Lq, B, 2, 16] (:func:`warp_scores`'): hi[v >> 4] + lo[v & 15]."""
    nib_t, out = _table_from(nibbles, out, np.float32)
    _library().embedctl_byte_lut(nib_t, nib_t.shape[0], nib_t.shape[3], out)
    return out


def _table_from(nibbles: np.ndarray, out: np.ndarray | None, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """The byte table kernels' input and output: the nibble tables as float32 [B, 2, 16, Lq] and ``out`` when it is a
    [B, 256, Lq] ``dtype`` buffer to reuse (1 MiB in float32: page faults otherwise), else a new one."""
    if nibbles.ndim != 4 or nibbles.shape[2:] != (2, 16):
        raise ValueError(f"nibbles must be [Lq, B, 2, 16], got {nibbles.shape}")
    lq, nbytes = nibbles.shape[:2]
    nib_t = np.ascontiguousarray(nibbles.transpose(1, 2, 3, 0), dtype=np.float32)
    if out is None or out.shape != (nbytes, 256, lq) or out.dtype != dtype:
        out = np.empty((nbytes, 256, lq), dtype=dtype)
    return nib_t, out


def float16_table_fast() -> bool:
    """The float16 table's MaxSim runs its AVX-512 path on this CPU (elsewhere it gives the same bits, slowly:
    each entry widened in plain C)."""
    lib = _library()
    return bool(lib is not None and lib.embedctl_lut16_fast())


def byte_lut16(nibbles: np.ndarray, out: np.ndarray | None = None, plain: bool = False) -> np.ndarray:
    """:func:`byte_lut` rounded to float16, nearest even (search.precision fp16: half the table's bytes): float16
    [B, 256, Lq], each entry the float32 sum rounded once. ``plain``: the plain C version even where AVX-512 runs
    (the same bits)."""
    nib_t, out = _table_from(nibbles, out, np.float16)
    _library().embedctl_byte_lut16(nib_t, nib_t.shape[0], nib_t.shape[3], out.view(np.uint16), int(plain))
    return out


def _check_top_args(st_t: np.ndarray, m: int) -> None:
    """What :func:`col_top` and :func:`col_top_blocks` need of their scores and m (ValueError otherwise)."""
    if st_t.ndim != 2 or st_t.dtype != np.float32 or not st_t.flags.c_contiguous or \
            not 1 <= m <= min(st_t.shape[0], MAX_TOP):
        raise ValueError(f"need a C-contiguous float32 2-D array and 1 <= m <= min(rows, {MAX_TOP}), "
                         f"got {st_t.dtype} {st_t.shape} and m={m}")


def col_top(st_t: np.ndarray, m: int, plain: bool = False, threads: int = 1) -> np.ndarray:
    """:func:`row_top` of ``st_t.T`` without the transposed copy: int64 [cols, m], the m best rows of each column
    of float32 ``st_t`` [rows, cols] (C-contiguous), best first, an exact tie to the smaller row. ``plain``: the
    plain C version even where AVX-512 runs (the same answer). ``threads``: the columns split across that
    many threads, in whole groups of 16 (the same answer)."""
    _check_top_args(st_t, m)
    rows, cols = st_t.shape
    out = np.empty((cols, m), dtype=np.int64)
    vals = np.empty(max(cols * m, cols), dtype=np.float32)
    rc = _library().embedctl_col_top(st_t, rows, cols, m, vals, np.empty(cols, np.float32), np.empty(cols, np.int64),
                                     out, thread_count(threads), int(plain))
    if rc != 0:
        raise ValueError("scores must not be NaN")
    return out


def col_top_blocks(st_t: np.ndarray, block_max: np.ndarray, m: int, plain: bool = False) -> np.ndarray:
    """:func:`col_top` (the same answer) given ``block_max`` float32 [ceil(rows / 16), cols], the maxima of st_t's
    blocks of 16 rows (NaN passed over), as search_amx.centroid_scores_amx writes them with the scores: each
    column reads only the blocks whose maximum reaches its m-th best block maximum (_warp_kernels.c
    embedctl_col_top_blocks). The maxima must be those of ``st_t``: not checked here (computing them is the
    pass this saves); the tests check the kernel's against numpy's."""
    _check_top_args(st_t, m)
    rows, cols = st_t.shape
    if block_max.shape != (-(-rows // 16), cols):
        raise ValueError(f"block_max must be [{-(-rows // 16)}, {cols}], got {block_max.shape}")
    out = np.empty((cols, m), dtype=np.int64)
    vals = np.empty(max(cols * m, cols), dtype=np.float32)
    rc = _library().embedctl_col_top_blocks(st_t, rows, cols, block_max, m, vals, np.empty(cols, np.float32),
                                            np.empty(cols, np.int64), out, int(plain))
    if rc != 0:
        raise ValueError("scores must not be NaN")
    return out


def _table(lut: np.ndarray) -> np.ndarray:
    """A MaxSim table as the kernels read it: C-contiguous float16 as given, anything else float32."""
    lut = np.asarray(lut)
    return np.ascontiguousarray(lut, np.float16 if lut.dtype == np.float16 else np.float32)


def _check_lut(lut: np.ndarray, packed: np.ndarray, lq: int) -> None:
    if lut.ndim != 3 or lut.shape[1:] != (256, lq) or packed.ndim != 2 or packed.shape[1] != lut.shape[0]:
        raise ValueError(f"lut must be [B, 256, {lq}] and packed [n, B], got {lut.shape} and {packed.shape}")


def _check_pids(pids: np.ndarray, offsets: np.ndarray, rows: int) -> np.ndarray:
    """The C code trusts pids and offsets: pids within the offsets, the offsets within the rows."""
    if offsets.dtype != np.int64 or not offsets.flags.c_contiguous or offsets.ndim != 1 or len(offsets) < 1 or \
            int(offsets[-1]) > rows or int(offsets[0]) < 0:
        raise ValueError(f"offsets must be C-contiguous int64 [num_docs + 1] within {rows} rows")
    pids = np.ascontiguousarray(pids, np.int64)
    if len(pids) and (int(pids.min()) < 0 or int(pids.max()) >= len(offsets) - 1):
        raise ValueError(f"pids outside [0, {len(offsets) - 1})")
    return pids


def _prepare(st_t: np.ndarray, ids: np.ndarray, dtype) -> np.ndarray:
    """The C code trusts its indices: check them here (one min/max pass, small next to the kernel)."""
    st_t = np.ascontiguousarray(st_t, dtype=np.float32)
    if st_t.ndim != 2:
        raise ValueError(f"st_t must be [C, Lq], got shape {st_t.shape}")
    if len(ids) and (int(np.min(ids)) < 0 or int(np.max(ids)) >= st_t.shape[0]):
        raise ValueError(f"centroid ids outside [0, {st_t.shape[0]})")
    return st_t
