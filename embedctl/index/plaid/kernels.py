"""ctypes front for the PLAID indexing kernels (embedctl/index/plaid/_kernels*.c) of the native backend.

Nearest-centroid assignment (exact answers from AMX bfloat16 scores, 16-bit integer scores on AVX2 or AVX-512
VNNI, or 8-bit integer scores on AVX-512 VNNI), compression and the stored norms. ``available()`` says whether the
library was built at install time (a C compiler was present); ``amx_available()`` / ``i16_available()`` /
``vnni_available()`` whether this CPU runs those kernels (facts of the machine, so cached). Without the library
the reference backend runs (embedctl/index/plaid/reference.py).
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

from embedctl.native import array_arg, load_library

_F32 = array_arg(np.float32)
_I32 = array_arg(np.int32)
_U8 = array_arg(np.uint8)
_I64 = ctypes.c_int64


@cache
def _library() -> ctypes.CDLL | None:
    lib = load_library(Path(__file__).parent, "_kernels")
    if lib is None:
        return None
    ptr = ctypes.c_void_p
    lib.embedctl_nearest_amx.argtypes = [ptr, _I64, _I64, ptr, _I64, _I64, _I64, ptr, ptr, ptr, ptr, ptr, ptr, ptr]
    lib.embedctl_nearest_amx.restype = ctypes.c_int64
    lib.embedctl_amx_ready.argtypes = []
    lib.embedctl_amx_ready.restype = ctypes.c_int
    lib.embedctl_nearest_i16.argtypes = [ptr, _I64, _I64, ptr, _I64, _I64, _I64, ctypes.c_float, ptr, ptr, ptr, ptr,
                                         ptr]
    lib.embedctl_nearest_i16.restype = ctypes.c_int64
    lib.embedctl_i16_ready.argtypes = []
    lib.embedctl_i16_ready.restype = ctypes.c_int
    lib.embedctl_nearest_vnni.argtypes = lib.embedctl_nearest_i16.argtypes
    lib.embedctl_nearest_vnni.restype = ctypes.c_int64
    lib.embedctl_vnni_ready.argtypes = []
    lib.embedctl_vnni_ready.restype = ctypes.c_int
    lib.embedctl_nearest_i8.argtypes = [ptr, _I64, _I64, ptr, ptr, _I64, _I64, _I64, ctypes.c_float, ctypes.c_double,
                                        ctypes.c_double, ptr, ptr, ptr, ptr, ptr, ptr]
    lib.embedctl_nearest_i8.restype = ctypes.c_int64
    lib.embedctl_compress.argtypes = [_F32, _I64, _I64, _F32, _I32, _F32, ctypes.c_int, _U8, ctypes.c_int]
    lib.embedctl_decoded_norms.argtypes = [_F32, _I64, _I32, _U8, _I64, _F32, ctypes.c_int, _F32]
    for fn in (lib.embedctl_compress, lib.embedctl_decoded_norms):
        fn.restype = ctypes.c_int
    return lib


def available() -> bool:
    return _library() is not None


@cache
def amx_available() -> bool:
    """The fused AMX kernel can run here: the library was built with it, the CPU has AMX-BF16, and Linux
    granted this process the tile state."""
    return available() and bool(_library().embedctl_amx_ready())


def pack_for_amx(centroids: np.ndarray):
    """float32 [C, dim] -> (torch bfloat16 B-tile layout [C_pad / 16, dim_pad / 32, 16, 16, 2], C_pad, dim_pad):
    zero-padded to multiples of 32, element [j, k, p, n, t] = centroid 16 j + n, dimension 32 k + 2 p + t."""
    import torch

    num_c, dim = centroids.shape
    c_pad, d_pad = -(-num_c // 32) * 32, -(-dim // 32) * 32
    padded = torch.zeros(c_pad, d_pad, dtype=torch.bfloat16)
    padded[:num_c, :dim] = torch.from_numpy(np.ascontiguousarray(centroids, np.float32))
    return padded.view(c_pad // 16, 16, d_pad // 32, 16, 2).permute(0, 2, 3, 1, 4).contiguous(), c_pad, d_pad


def amx_err_factor(centroids: np.ndarray, d_pad: int) -> float:
    """What a row's norm is multiplied by to bound |bfloat16 tile score - <x, c>| for :func:`nearest_amx`'s ``err``:
    inputs rounded to bfloat16 (2^-7 |x| |c| over the sum), float32 sums over d_pad terms."""
    cmax = float(np.sqrt((np.asarray(centroids, np.float64) ** 2).sum(axis=1).max()))
    return cmax * (2.0 ** -7 + 2.0 ** -15 + d_pad * 2.0 ** -23)


def nearest_amx(x: np.ndarray, packed, c_pad: int, d_pad: int, centroids: np.ndarray, scan_bias: np.ndarray,
                bias: np.ndarray | None, err: np.ndarray, out: np.ndarray, best: np.ndarray | None = None,
                hints: np.ndarray | None = None) -> int:
    """The exact nearest centroid of each row of float32 ``x`` [n, dim] with the fused AMX kernel; returns how
    many columns were rescored. ``packed``, ``c_pad``, ``d_pad`` from :func:`pack_for_amx`; ``scan_bias``
    float32 [c_pad] (0 or the bias, -inf on padding); ``bias`` float32 [C] or None; ``err`` float32 [n]
    bounds |bfloat16 tile score - <x, c>| (each row's norm times :func:`amx_err_factor`); out int64 [n], best float32 [n] or None are written; ``hints`` int64
    [n] or None: a likely best centroid per row (-1: none), where each row's scan starts (only the speed
    changes: _nearest_scan.h's seed_row)."""
    n, dim = x.shape
    num_c = centroids.shape[0]
    arrays = [("x", x, (n, dim), np.float32), ("centroids", centroids, (num_c, dim), np.float32),
              ("scan_bias", scan_bias, (c_pad,), np.float32), ("err", err, (n,), np.float32),
              ("out", out, (n,), np.int64)]
    arrays += [("bias", bias, (num_c,), np.float32)] if bias is not None else []
    arrays += [("best", best, (n,), np.float32)] if best is not None else []
    arrays += [("hints", hints, (n,), np.int64)] if hints is not None else []
    _check_arrays(arrays)
    if tuple(packed.shape) != (c_pad // 16, d_pad // 32, 16, 16, 2) or not packed.is_contiguous():
        raise ValueError("packed must come from pack_for_amx(centroids)")
    ptr = (lambda a: None if a is None else a.ctypes.data)  # noqa: E731
    rescored = _library().embedctl_nearest_amx(ptr(x), n, dim, packed.data_ptr(), num_c, c_pad, d_pad,
                                               ptr(centroids), ptr(scan_bias), ptr(bias), ptr(err), ptr(hints),
                                               ptr(out), ptr(best))
    if rescored == -2:
        raise MemoryError("embedctl_nearest_amx: out of memory")
    if rescored < 0:
        raise ValueError(f"embedctl_nearest_amx refused its arguments (code {rescored})")
    return int(rescored)


@cache
def i16_available() -> bool:
    """The fused 16-bit integer kernel can run here: the library was built with it and the CPU has AVX2."""
    return available() and bool(_library().embedctl_i16_ready())


@cache
def vnni_available() -> bool:
    """The AVX-512 VNNI version of the 16-bit integer kernel can run here (AVX-512 F/BW/VNNI): the same answers as
    the AVX2 version, ~2x its multiply-adds per second (embedctl/index/plaid/_kernels_vnni.c)."""
    return i16_available() and bool(_library().embedctl_vnni_ready())


I16_MAX = 32767


def pack_for_i16(centroids: np.ndarray):
    """float32 [C, dim] -> (int16 panels [C_pad / 16, dim_pad / 2, 16, 2], C_pad, dim_pad, scale): the centroids
    times ``scale`` (largest norm -> 32767), rounded, zero-padded to C_pad = multiple of 32 (the AVX-512 kernel
    takes two panels at a time) and an even dim_pad; element [j, k, n, t] = centroid 16 j + n, dimension 2 k + t."""
    num_c, dim = centroids.shape
    c_pad, d_pad = -(-num_c // 32) * 32, dim + dim % 2
    cent64 = np.asarray(centroids, np.float64)
    cmax = float(np.sqrt((cent64 ** 2).sum(axis=1)).max()) if num_c else 0.0
    scale = np.float32(I16_MAX / cmax) if cmax > 0 else np.float32(1.0)
    q = np.zeros((c_pad, d_pad), np.int16)
    q[:num_c, :dim] = np.clip(np.rint(cent64 * float(scale)), -I16_MAX, I16_MAX)
    return np.ascontiguousarray(q.reshape(c_pad // 16, 16, d_pad // 2, 2).transpose(0, 2, 1, 3)), c_pad, d_pad, scale


def nearest_i16(x: np.ndarray, packed: np.ndarray, c_pad: int, d_pad: int, scale: np.float32, centroids: np.ndarray,
                scan_bias: np.ndarray, bias: np.ndarray | None, out: np.ndarray, best: np.ndarray | None = None,
                isa: str = "auto") -> int:
    """The exact nearest centroid of each row of float32 ``x`` [n, dim] with the fused 16-bit integer kernel;
    returns how many columns were rescored. ``packed``, ``c_pad``, ``d_pad``, ``scale`` from
    :func:`pack_for_i16`; ``scan_bias`` float32 [c_pad] (0 or the bias, -inf on padding); ``bias`` float32 [C] or
    None; out int64 [n], best float32 [n] or None are written. The kernel computes each row's rounding bound.
    ``isa``: ``avx512`` (VNNI), ``avx2``, or ``auto`` (avx512 where :func:`vnni_available`); the same answers."""
    if isa not in ("auto", "avx512", "avx2"):
        raise ValueError(f"isa must be auto, avx512 or avx2, got {isa!r}")
    wide = vnni_available() if isa == "auto" else isa == "avx512"
    if wide and not vnni_available():
        raise ValueError("isa='avx512': this CPU or build has no AVX-512 VNNI kernel")
    n, dim = x.shape
    num_c = centroids.shape[0]
    arrays = [("x", x, (n, dim), np.float32), ("centroids", centroids, (num_c, dim), np.float32),
              ("scan_bias", scan_bias, (c_pad,), np.float32), ("out", out, (n,), np.int64),
              ("packed", packed, (c_pad // 16, d_pad // 2, 16, 2), np.int16)]
    arrays += [("bias", bias, (num_c,), np.float32)] if bias is not None else []
    arrays += [("best", best, (n,), np.float32)] if best is not None else []
    _check_arrays(arrays)
    ptr = (lambda a: None if a is None else a.ctypes.data)  # noqa: E731
    kernel = _library().embedctl_nearest_vnni if wide else _library().embedctl_nearest_i16
    rescored = kernel(ptr(x), n, dim, ptr(packed), num_c, c_pad, d_pad, float(scale), ptr(centroids), ptr(scan_bias),
                      ptr(bias), ptr(out), ptr(best))
    if rescored == -2:
        raise MemoryError(f"{kernel.__name__}: out of memory")
    if rescored < 0:
        raise ValueError(f"{kernel.__name__} refused its arguments (code {rescored})")
    return int(rescored)


I8_MAX = 127


class PackedI8(NamedTuple):
    """The centroids for the 8-bit kernel (:func:`pack_for_i8`)."""

    packed: np.ndarray  # int8 [c_pad / 16, dim_pad / 4, 16, 4]: centroid 16 j + n, dimension 4 k + t
    offsets: np.ndarray  # int32 [c_pad]: 128 * each centroid's sum of int8 components
    c_pad: int
    d_pad: int
    scale: np.float32  # s_c: largest |component| -> 127
    err: float  # E_c = max_j |c_j - c^_j| (c^ = int8 / s_c), float64
    norm_max: float  # C^ = max_j |c^_j|


def pack_for_i8(centroids: np.ndarray) -> PackedI8:
    """float32 [C, dim] -> the 8-bit kernel's centroids: times s_c (largest |component| -> 127), rounded, zero-padded
    to C_pad = multiple of 32 and dim_pad = multiple of 4, with the rounding's E_c and C^ (_kernels_i8.c)."""
    num_c, dim = centroids.shape
    c_pad, d_pad = -(-num_c // 32) * 32, -(-dim // 4) * 4
    cent64 = np.asarray(centroids, np.float64)
    amax = float(np.abs(cent64).max()) if num_c else 0.0
    scale = np.float32(I8_MAX / amax) if amax > 0 else np.float32(1.0)
    q = np.zeros((c_pad, d_pad), np.int8)
    q[:num_c, :dim] = np.clip(np.rint(cent64 * float(scale)), -I8_MAX, I8_MAX)
    rounded = q[:num_c, :dim].astype(np.float64) / float(scale)
    err = float(np.sqrt(((cent64 - rounded) ** 2).sum(axis=1)).max()) if num_c else 0.0
    norm_max = float(np.sqrt((rounded ** 2).sum(axis=1)).max()) if num_c else 0.0
    offsets = (128 * q.astype(np.int32).sum(axis=1)).astype(np.int32)
    packed = np.ascontiguousarray(q.reshape(c_pad // 16, 16, d_pad // 4, 4).transpose(0, 2, 1, 3))
    return PackedI8(packed, offsets, c_pad, d_pad, scale, err, norm_max)


def nearest_i8(x: np.ndarray, p: PackedI8, centroids: np.ndarray, scan_bias: np.ndarray, bias: np.ndarray | None,
               out: np.ndarray, best: np.ndarray | None = None, hints: np.ndarray | None = None) -> int:
    """The exact nearest centroid of each row of float32 ``x`` [n, dim] with the fused 8-bit AVX-512 VNNI kernel
    (needs :func:`vnni_available`); returns how many columns were rescored. ``p`` from :func:`pack_for_i8`;
    ``scan_bias``, ``bias``, ``out``, ``best`` as :func:`nearest_i16`; ``hints`` int64 [n] or None: a likely best
    centroid per row (-1: none), where each row's scan starts (only the speed changes: _nearest_scan.h's seed_row)."""
    if not vnni_available():
        raise ValueError("the 8-bit kernel needs AVX-512 VNNI, which this CPU or build lacks")
    n, dim = x.shape
    num_c = centroids.shape[0]
    arrays = [("x", x, (n, dim), np.float32), ("centroids", centroids, (num_c, dim), np.float32),
              ("scan_bias", scan_bias, (p.c_pad,), np.float32), ("out", out, (n,), np.int64),
              ("packed", p.packed, (p.c_pad // 16, p.d_pad // 4, 16, 4), np.int8),
              ("offsets", p.offsets, (p.c_pad,), np.int32)]
    arrays += [("bias", bias, (num_c,), np.float32)] if bias is not None else []
    arrays += [("best", best, (n,), np.float32)] if best is not None else []
    arrays += [("hints", hints, (n,), np.int64)] if hints is not None else []
    _check_arrays(arrays)
    ptr = (lambda a: None if a is None else a.ctypes.data)  # noqa: E731
    rescored = _library().embedctl_nearest_i8(ptr(x), n, dim, ptr(p.packed), ptr(p.offsets), num_c, p.c_pad, p.d_pad,
                                              float(p.scale), p.err, p.norm_max, ptr(centroids), ptr(scan_bias),
                                              ptr(bias), ptr(hints), ptr(out), ptr(best))
    if rescored == -2:
        raise MemoryError("embedctl_nearest_i8: out of memory")
    if rescored < 0:
        raise ValueError(f"embedctl_nearest_i8 refused its arguments (code {rescored})")
    return int(rescored)


def compress(emb: np.ndarray, centroids: np.ndarray, codes: np.ndarray, cutoffs: np.ndarray, nbits: int,
             plain: bool = False) -> np.ndarray:
    """float32 emb [n, dim], float32 centroids [C, dim], int32 codes [n], float32 cutoffs [2^nbits - 1]
    -> packed bucket indices of the residuals, uint8 [n, dim * nbits / 8]. ``plain``: the plain C version even
    where the AVX-512 one runs (the same bytes; tests)."""
    emb, centroids = np.ascontiguousarray(emb, np.float32), _checked_centroids(centroids, codes)
    codes, cutoffs = np.ascontiguousarray(codes, np.int32), np.ascontiguousarray(cutoffs, np.float32)
    n, dim = emb.shape
    if centroids.shape[1] != dim or len(codes) != n or len(cutoffs) != (1 << nbits) - 1:
        raise ValueError("emb, centroids, codes and cutoffs disagree in shape")
    packed = np.empty((n, dim * nbits // 8), dtype=np.uint8)
    if _library().embedctl_compress(emb, n, dim, centroids, codes, cutoffs, int(nbits), packed, int(plain)) != 0:
        raise ValueError(f"nbits {nbits} with dimension {dim}: need nbits in 1, 2, 4 and whole bytes per vector")
    return packed


def decoded_norms(centroids: np.ndarray, codes: np.ndarray, packed: np.ndarray, table: np.ndarray,
                  nbits: int) -> np.ndarray:
    """|centroid[code] + decoded residual| per vector -> float32 [n]; ``table`` float32 [256, 8 / nbits]
    is the codec's byte decode table."""
    centroids = _checked_centroids(centroids, codes)
    codes, packed = np.ascontiguousarray(codes, np.int32), np.ascontiguousarray(packed, np.uint8)
    table = np.ascontiguousarray(table, np.float32)
    dim = centroids.shape[1]
    if packed.shape != (len(codes), dim * nbits // 8) or table.shape != (256, 8 // nbits):
        raise ValueError("packed or table do not match the codes, the dimension and nbits")
    out = np.empty(len(codes), dtype=np.float32)
    if _library().embedctl_decoded_norms(centroids, dim, codes, packed, len(codes), table, int(nbits), out) != 0:
        raise ValueError(f"nbits {nbits} with dimension {dim}: need nbits in 1, 2, 4 and whole bytes per vector")
    return out


def _check_arrays(arrays) -> None:
    """The C code trusts its array arguments: (name, array, shape, dtype) each C-contiguous as stated."""
    for name, a, shape, dtype in arrays:
        if a.shape != shape or a.dtype != dtype or not a.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous {np.dtype(dtype).name} {shape}, got {a.dtype} {a.shape}")


def _checked_centroids(centroids: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The C code trusts its indices: check them here (one min/max pass, small next to the kernel)."""
    centroids = np.ascontiguousarray(centroids, np.float32)
    if centroids.ndim != 2:
        raise ValueError(f"centroids must be [C, dim], got shape {centroids.shape}")
    if len(codes) and (int(np.min(codes)) < 0 or int(np.max(codes)) >= len(centroids)):
        raise ValueError(f"codes outside [0, {len(centroids)})")
    return centroids
