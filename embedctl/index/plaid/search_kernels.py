"""ctypes front for the PLAID search kernels (embedctl/index/plaid/_search_kernels.c), with a check of every argument.

Used by the native backend (embedctl/index/plaid/native_backend.py): the centroid interactions and the
final MaxSim. ``available()`` says whether the library was built at install time (a C compiler was
present); without it the reference backend runs.
"""

from __future__ import annotations

import ctypes
import warnings
from functools import cache
from pathlib import Path

import numpy as np

from embedctl.native import load_library

_F32 = np.ctypeslib.ndpointer(np.float32, flags="C_CONTIGUOUS")
_I32 = np.ctypeslib.ndpointer(np.int32, flags="C_CONTIGUOUS")
_I64 = np.ctypeslib.ndpointer(np.int64, flags="C_CONTIGUOUS")
_U8 = np.ctypeslib.ndpointer(np.uint8, flags="C_CONTIGUOUS")


@cache
def _library() -> ctypes.CDLL | None:
    lib = load_library(Path(__file__).parent, "_search_kernels")
    if lib is None:
        return None
    if not hasattr(lib, "embedctl_row_top"):  # built from an older _search_kernels.c (a checkout updated in place)
        warnings.warn("the PLAID search kernels were built from an older source: searching with the reference "
                      "backend (same results, slower); rebuild them: pip install -e . (or python setup.py "
                      "build_ext --inplace)", RuntimeWarning, stacklevel=2)
        return None
    lib.embedctl_segment_maxsum.argtypes = [_F32, ctypes.c_int64, _I32, _I64, ctypes.c_int64, _F32]
    lib.embedctl_scatter_max_rows.argtypes = [_F32, ctypes.c_int64, _I64, _I64, ctypes.c_int64, _F32]
    lib.embedctl_maxsim.argtypes = [ctypes.c_void_p, ctypes.c_int, _F32, ctypes.c_int64, _I32, _F32, _I64,
                                    ctypes.c_int64, _F32]
    lib.embedctl_maxsim_lut.argtypes = [_F32, ctypes.c_int64, _U8, _F32, ctypes.c_int64, _I32, _F32, _I64,
                                        ctypes.c_int64, _F32]
    lib.embedctl_doc_maxsum.argtypes = [_F32, ctypes.c_int64, ctypes.c_int64, _I32, _I64, _I64, ctypes.c_int64,
                                        _F32]
    lib.embedctl_maxsim_lut_docs.argtypes = [_F32, ctypes.c_int64, _U8, _F32, ctypes.c_int64, ctypes.c_int64, _I32,
                                             ctypes.c_void_p, ctypes.c_int, _I64, _I64, ctypes.c_int64, _F32]
    lib.embedctl_row_top.argtypes = [_F32, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _I64]
    for fn in (lib.embedctl_row_top, lib.embedctl_segment_maxsum, lib.embedctl_scatter_max_rows, lib.embedctl_maxsim,
               lib.embedctl_maxsim_lut, lib.embedctl_doc_maxsum, lib.embedctl_maxsim_lut_docs):
        fn.restype = ctypes.c_int
    return lib


def available() -> bool:
    return _library() is not None


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
               lens: np.ndarray) -> np.ndarray:
    """:func:`maxsim` with the residual part read from packed bytes through a per-query table, no decoding.

    lut float32 [B, 256, Lq] (``lut[b, v, q]`` = Q[q] . the residual values byte value v decodes to at byte
    position b), packed uint8 [n, B], st_t float32 [C, Lq], codes [n], norms [n], lens int64 [m] -> float32 [m].
    """
    lut = np.ascontiguousarray(lut, np.float32)
    packed = np.ascontiguousarray(packed, np.uint8)
    if lut.ndim != 3 or lut.shape[1] != 256 or lut.shape[2] != st_t.shape[1] or packed.ndim != 2 or \
            packed.shape[1] != lut.shape[0]:
        raise ValueError(f"lut must be [B, 256, {st_t.shape[1]}] and packed [n, B], got {lut.shape} and {packed.shape}")
    st_t = _prepare(st_t, codes, np.int32)
    codes, lens = np.ascontiguousarray(codes, np.int32), np.ascontiguousarray(lens, np.int64)
    norms = np.ascontiguousarray(norms, np.float32)
    if len(codes) != len(packed) or len(norms) != len(codes) or int(lens.sum()) != len(codes) or \
            (len(lens) and int(lens.min()) < 1):
        raise ValueError("codes, norms and packed need one row per token, and lens (each >= 1) must sum to it")
    out = np.empty(len(lens), dtype=np.float32)
    if _library().embedctl_maxsim_lut(lut, lut.shape[0], packed, st_t, st_t.shape[1], codes, norms, lens,
                                      len(lens), out) != 0:
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
                    offsets: np.ndarray, pids: np.ndarray) -> np.ndarray:
    """:func:`maxsim_lut` of the documents ``pids`` (each >= 1 vector), their vectors read in place: rows
    ``offsets[p]:offsets[p + 1]`` of ``codes`` int32 [n], ``packed`` uint8 [n, B] and ``norms`` float16 or
    float32 [n] (memory maps are fine: nothing is gathered) -> float32 [len(pids)]; the same bits."""
    lut = np.ascontiguousarray(lut, np.float32)
    if lut.ndim != 3 or lut.shape[1] != 256 or lut.shape[2] != st_t.shape[1] or packed.ndim != 2 or \
            packed.shape[1] != lut.shape[0]:
        raise ValueError(f"lut must be [B, 256, {st_t.shape[1]}] and packed [n, B], got {lut.shape} and {packed.shape}")
    if not (len(codes) == len(packed) == len(norms)) or norms.dtype not in (np.float16, np.float32):
        raise ValueError("codes, packed and norms (float16 or float32) need one row per vector")
    st_t = np.ascontiguousarray(st_t, dtype=np.float32)
    packed, codes, norms = (np.ascontiguousarray(packed), np.ascontiguousarray(codes, np.int32),
                            np.ascontiguousarray(norms))
    pids = _check_pids(pids, offsets, len(codes))
    out = np.empty(len(pids), dtype=np.float32)
    rc = _library().embedctl_maxsim_lut_docs(lut, lut.shape[0], packed, st_t, st_t.shape[0], st_t.shape[1], codes,
                                             norms.ctypes.data, int(norms.dtype == np.float16), offsets, pids,
                                             len(pids), out)
    if rc != 0:
        raise ValueError({-1: f"query length {st_t.shape[1]} outside 1..4096", -2: "a document without vectors",
                          -3: f"centroid ids outside [0, {st_t.shape[0]})"}[rc])
    return out


MAX_TOP = 1024  # the kernel's limit on m


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
