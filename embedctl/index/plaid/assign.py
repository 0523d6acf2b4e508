"""Nearest-centroid assignment, the largest CPU cost of PLAID indexing after encoding.

Every k-means iteration and every compressed vector needs ``argmax_c score(x, c)`` over all C centroids
(8192 for a million vectors): a [n, dim] x [dim, C] product followed by a row argmax.

Three precisions, all giving the exact nearest centroid where their kernel runs:

- ``fp32``: faiss exact search (blocked GEMM with the running argmax kept in cache).
- ``int16`` (CPUs with AVX2, needs the C kernel, embedctl/index/plaid/_kernels_i16.c): each vector is scaled
  to norm 32767 and the centroids by one common factor, both rounded to int16; ``vpmaddwd`` gives exact int32
  sums (no overflow: every partial sum is at most |x_q| |c_q| < 2^31), twice the multiply-adds per
  instruction of a float32 FMA. The rounding moves a score by at most ~3.5e-4 |x| max|c| at dim 128 (the
  bound is derived in the C file), so the GEMM and the candidate scan are fused as in the AMX kernel below
  and each row's candidates within twice the bound of its best are rescored exactly in double precision
  (about 1.01 per vector on SciFact ColBERT vectors). On 2 AMD Zen 3 cores (AVX2, no bfloat16 units) it
  assigns 815k vectors to 8192 centroids in 9.4 s against 22.9 s for faiss, and k-means (4 x 262k points)
  takes 14.6 s against 25.7 s. Without the kernel (or with ``EMBEDCTL_NO_I16=1``) ``int16`` is ``fp32``.
- ``bf16``: the scores come from the CPU's bfloat16 matrix units (AMX / AVX512-BF16: about 4x the fp32
  GEMM rate here). bfloat16 keeps 8 significant bits, so a score is within a computable bound of the exact
  one: 2^-7 |x| |c| from rounding the inputs (plus 2^-8 of the score where torch rounds the GEMM output to
  bfloat16 too). Three implementations, fastest first:

  1. Fused AMX kernel (embedctl/index/plaid/_kernels_amx.c; CPUs with AMX-BF16, Linux): the GEMM runs on
     32 x 32 tiles with float32 accumulators and each tile is scanned at once for candidates (scores within
     twice the bound of the row's best so far), so the [n, C] score matrix never goes through memory. On
     SciFact (815k vectors, 8192 centroids, 2 cores) k-means + compression took 6.3 s against 13.8 s for (2).
  2. torch bfloat16 GEMM + C kernel (embedctl/index/plaid/_kernels.c): the row maximum on int16 keys that
     sort like the bfloat16 values (several times faster than torch's bfloat16 argmax), then the
     candidates within twice the bound.
     On both (1) and (2) every candidate is rescored exactly (double precision, from the float32 inputs;
     1-2 centroids per vector on SciFact ColBERT vectors): the answer is the exact nearest centroid, the
     first one on an exact tie. It equals fp32 except where fp32's own rounding decides (1 vector in
     100,000 measured, by 1e-7).
  3. Without the C kernels (no compiler at install, or ``EMBEDCTL_NO_KERNELS=1``): each centroid row carries
     an extra column holding ``bias - offset`` (a second one holds that value's rounding error) and each
     vector two 1s, where ``offset`` is a typical best score measured exactly on a probe of rows: the
     winning scores come out of the GEMM near 0, where bfloat16 steps are 2^-12 or finer, and a two-level
     torch argmax picks the best. Measured on SciFact ColBERT vectors: 99.8% of vectors get the exact fp32
     answer; the others get a centroid at most 0.0015 below the best in score (mean loss 6e-7), which
     changes their residual by less than a bucket step.

  L2 assignment (k-means) passes ``bias = -|c|^2 / 2``. (1) adds it to the float32 tile scores; (2) and (3)
  put it into the GEMM as the offset columns (the row maximum must include it); rescoring adds it exactly.
  ``EMBEDCTL_NO_AMX=1`` skips (1).

``auto`` picks bf16 where the CPU has AMX or AVX512-BF16, else int16 where its kernel runs, else fp32 (on
CPUs without bfloat16 units a bfloat16 GEMM is slower than fp32).
"""

from __future__ import annotations

import warnings

import numpy as np

from embedctl.errors import EmbedctlError
from embedctl.index.plaid import kernels

PRECISIONS = ("auto", "fp32", "bf16", "int16")
ROWS_PER_BLOCK = 256   # score block [256, C] in bfloat16: 4 MiB at C=8192 (1024 rows measured slower)
PAD_TO = 32            # the two offset columns pad K to a multiple of 32 (AMX bf16 tile depth)
AMX_ROWS = 8192        # rows per call of the fused AMX / int16 kernels (one thread each)
GROUPS = 128           # two-level argmax: max over 128 strided groups of C/128 columns, then inside one


def resolve_precision(requested: str, device: str = "cpu", key: str = "index.assign_precision") -> str:
    """``auto`` -> ``bf16`` on CPUs with bfloat16 matrix instructions, else ``int16`` where the AVX2 kernel
    runs, else ``fp32``; GPUs use fp32."""
    if requested not in PRECISIONS:
        raise EmbedctlError(f"`{key}` = {requested!r}: expected one of {', '.join(PRECISIONS)}",
                            hint=f"use {key}=auto")
    if device != "cpu":
        return "fp32"
    if requested != "auto":
        return requested
    if cpu_has_fast_bf16():
        return "bf16"
    return "int16" if kernels.i16_available() else "fp32"


def cpu_has_fast_bf16() -> bool:
    import torch

    probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def nearest(x: np.ndarray, centroids: np.ndarray, precision: str = "fp32", bias: np.ndarray | None = None,
            device: str = "cpu") -> np.ndarray:
    """argmax_c (<x_i, centroid_c> + bias_c) for float32 [n, dim] against float32 [C, dim] -> int32 [n].

    ``bias`` (float32 [C]) turns inner product into L2: ``-|c|^2 / 2`` ranks like the nearest centroid.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    cent = np.ascontiguousarray(centroids, dtype=np.float32)
    if len(x) == 0:
        return np.zeros(0, dtype=np.int32)
    if device != "cpu":
        return nearest_torch(x, cent, bias, device)
    if precision == "bf16":
        return _nearest_bf16(x, cent, bias)
    if precision == "int16" and kernels.i16_available():  # else fp32: the same (exact) answer
        return nearest_exact_i16(x, cent, bias)[0]
    return _nearest_faiss(x, cent, bias)


def nearest_exact(x: np.ndarray, cent: np.ndarray, precision: str, bias: np.ndarray | None = None,
                  x_norms: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(int32 [n] exact nearest centroids, float32 [n] their exact scores ``<x, c> + bias``) through the C
    kernels: ``int16`` or ``bf16`` (needs :func:`kernels.i16_available` / :func:`kernels.available`)."""
    if precision == "int16":
        return nearest_exact_i16(x, cent, bias)
    return nearest_exact_bf16(x, cent, bias, x_norms=x_norms)


def nearest_exact_i16(x: np.ndarray, cent: np.ndarray,
                      bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The fused 16-bit integer kernel (embedctl/index/plaid/_kernels_i16.c, AVX2): exact int32 sums of the
    rounded vectors, a rounding bound per row, every centroid within twice the bound of a row's best rescored
    exactly in double precision. One thread per torch thread, each taking blocks of AMX_ROWS rows."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    cent = np.ascontiguousarray(cent, dtype=np.float32)
    bias32 = None if bias is None else np.ascontiguousarray(bias, np.float32)
    packed, c_pad, d_pad, scale = kernels.pack_for_i16(cent)
    scan_bias = _scan_bias(c_pad, len(cent), bias32)
    return _in_row_blocks(len(x), lambda lo, hi, codes, best: kernels.nearest_i16(
        x[lo:hi], packed, c_pad, d_pad, scale, cent, scan_bias, bias32, codes, best))


def _scan_bias(c_pad: int, num_c: int, bias: np.ndarray | None) -> np.ndarray:
    """float32 [c_pad] added to the fused kernels' tile scores: the bias (or 0), -inf on the padding columns."""
    scan_bias = np.full(c_pad, -np.inf, np.float32)
    scan_bias[:num_c] = 0.0 if bias is None else bias
    return scan_bias


def _in_row_blocks(n: int, kernel) -> tuple[np.ndarray, np.ndarray]:
    """Run a fused kernel ``kernel(lo, hi, codes[lo:hi], best[lo:hi])`` over blocks of AMX_ROWS rows, one
    thread per torch thread (ctypes releases the GIL) -> (int32 codes [n], float32 best scores [n])."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    codes = np.empty(n, dtype=np.int64)
    best = np.empty(n, dtype=np.float32)

    def run(lo: int) -> None:
        hi = min(n, lo + AMX_ROWS)
        kernel(lo, hi, codes[lo:hi], best[lo:hi])

    with ThreadPoolExecutor(max(1, torch.get_num_threads())) as pool:
        list(pool.map(run, range(0, n, AMX_ROWS)))
    return codes.astype(np.int32), best


def _nearest_faiss(x: np.ndarray, cent: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    import faiss

    if bias is not None:  # fold the bias into one extra dimension: [x, 1] . [c, bias]
        x = np.concatenate([x, np.ones((len(x), 1), np.float32)], axis=1)
        cent = np.concatenate([cent, bias.reshape(-1, 1).astype(np.float32)], axis=1)
    index = faiss.IndexFlatIP(cent.shape[1])
    index.add(cent)
    out = np.empty(len(x), dtype=np.int32)
    for lo in range(0, len(x), 1 << 16):
        _, ids = index.search(x[lo:lo + (1 << 16)], 1)
        out[lo:lo + len(ids)] = ids[:, 0]
    return out


def nearest_torch(x: np.ndarray, cent: np.ndarray, bias: np.ndarray | None, device: str) -> np.ndarray:
    import torch

    c = torch.from_numpy(cent).to(device)
    b = None if bias is None else torch.from_numpy(np.asarray(bias, np.float32)).to(device)
    out = np.empty(len(x), dtype=np.int32)
    with torch.inference_mode():
        for lo in range(0, len(x), 1 << 16):
            s = torch.from_numpy(x[lo:lo + (1 << 16)]).to(device) @ c.T
            if b is not None:
                s += b
            out[lo:lo + s.shape[0]] = s.argmax(dim=1).to(torch.int32).cpu().numpy()
    return out


def _nearest_bf16(x: np.ndarray, cent: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    if kernels.available():
        return nearest_exact_bf16(x, cent, bias)[0]
    return _nearest_bf16_offset(x, cent, bias)


def nearest_exact_bf16(x: np.ndarray, cent: np.ndarray, bias: np.ndarray | None = None,
                       x_norms: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The exact answer of :func:`nearest` from a bfloat16 GEMM and the C kernel's rescoring of near-ties
    -> (int32 [n] centroids, float32 [n] their exact scores ``<x, c> + bias``). Needs ``kernels.available()``;
    ``x_norms`` (float32 [n], |x| per row) saves recomputing them on every k-means iteration."""
    import torch

    x = np.ascontiguousarray(x, dtype=np.float32)
    cent = np.ascontiguousarray(cent, dtype=np.float32)
    n, dim = x.shape
    bias32 = None if bias is None else np.ascontiguousarray(bias, np.float32)
    if kernels.amx_available():
        return _nearest_amx(x, cent, bias32, x_norms)
    if bias32 is None:  # plain inner product: the GEMM needs no extra columns
        cols, extra = torch.from_numpy(cent).T.to(torch.bfloat16).contiguous(), 0.0
    else:  # the bias must be inside the GEMM for the row maximum to mean anything
        cols = _offset_columns(x, cent, bias32)
        shift = float((cols[dim].float() + cols[dim + 1].float()).abs().max())  # |bias - offset|
        # the output's rounding (2^-8 of |shift| more), the shift's own 16-bit rounding, its accumulation
        extra = shift * (2.0 ** -8 + 2.0 ** -15 + cols.shape[0] * 2.0 ** -23)
    width = cols.shape[0]
    # bound on |GEMM score - exact|: inputs rounded to bfloat16 (2^-8 relative each, so 2^-7 |x| |c| over
    # the sum), fp32 accumulation, the output rounded to bfloat16 (2^-8 |<x, c>| <= 2^-8 |x| |c|), + extra
    cmax = float(np.sqrt((cent.astype(np.float64) ** 2).sum(axis=1).max())) if len(cent) else 0.0
    norms = np.linalg.norm(x, axis=1) if x_norms is None else np.asarray(x_norms, np.float32)
    err = (norms * (cmax * (2.0 ** -7 + 2.0 ** -8 + 2.0 ** -15 + width * 2.0 ** -23)) + extra).astype(np.float32)
    codes = np.empty(n, dtype=np.int64)
    best = np.empty(n, dtype=np.float32)
    rows = torch.zeros(ROWS_PER_BLOCK, width, dtype=torch.bfloat16)
    if width > dim:
        rows[:, dim:dim + 2] = 1.0
    with warnings.catch_warnings():  # read-only (memory-mapped) input: it is only read
        warnings.simplefilter("ignore", UserWarning)
        xt = torch.from_numpy(x)
    with torch.inference_mode():
        for lo in range(0, n, ROWS_PER_BLOCK):
            hi = min(n, lo + ROWS_PER_BLOCK)
            rows[:hi - lo, :dim] = xt[lo:hi]
            scores = torch.mm(rows[:hi - lo], cols)
            kernels.nearest_bf16(scores, x[lo:hi], cent, bias32, err[lo:hi], codes[lo:hi], best[lo:hi])
    return codes.astype(np.int32), best


def _nearest_amx(x: np.ndarray, cent: np.ndarray, bias: np.ndarray | None,
                 x_norms: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The fused AMX kernel (scores never leave the tiles; float32 accumulators, so the bias is added after
    the GEMM), on one thread per torch thread, each taking blocks of AMX_ROWS rows."""
    packed, c_pad, d_pad = kernels.pack_for_amx(cent)
    scan_bias = _scan_bias(c_pad, len(cent), bias)
    # bound on |tile score - <x, c>|: inputs rounded to bfloat16 (2^-7 |x| |c| over the sum), float32 sums
    cmax = float(np.sqrt((cent.astype(np.float64) ** 2).sum(axis=1).max()))
    norms = np.linalg.norm(x, axis=1) if x_norms is None else np.asarray(x_norms, np.float32)
    err = (norms * (cmax * (2.0 ** -7 + 2.0 ** -15 + d_pad * 2.0 ** -23))).astype(np.float32)
    return _in_row_blocks(len(x), lambda lo, hi, codes, best: kernels.nearest_amx(
        x[lo:hi], packed, c_pad, d_pad, cent, scan_bias, bias, err[lo:hi], codes, best))


def _nearest_bf16_offset(x: np.ndarray, cent: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """Without the C kernel: offset columns and a two-level torch argmax (99.8% exact, see the top)."""
    import torch

    n, dim = x.shape
    cols = _offset_columns(x, cent, bias)
    width = cols.shape[0]
    groups = next((g for g in (GROUPS, 16) if len(cent) % g == 0 and len(cent) >= 4 * g), 1)
    out = torch.empty(n, dtype=torch.int64)
    rows = torch.zeros(ROWS_PER_BLOCK, width, dtype=torch.bfloat16)
    rows[:, dim:dim + 2] = 1.0
    with warnings.catch_warnings():  # read-only (memory-mapped) input: it is only read
        warnings.simplefilter("ignore", UserWarning)
        xt = torch.from_numpy(x)
    with torch.inference_mode():
        for lo in range(0, n, ROWS_PER_BLOCK):
            r = min(ROWS_PER_BLOCK, n - lo)
            rows[:r, :dim] = xt[lo:lo + r]
            out[lo:lo + r] = _argmax_rows(torch.mm(rows[:r], cols), groups)
    return out.numpy().astype(np.int32)


def _offset_columns(x: np.ndarray, cent: np.ndarray, bias: np.ndarray | None):
    """bfloat16 [width, C]: the centroids, then ``bias - offset`` in two columns (value and its rounding
    error, so per-centroid L2 biases keep ~16 bits instead of 8), zero-padded to a multiple of PAD_TO.
    Rows carry 1s in the two extra columns. The path without the C kernel."""
    import torch

    dim, num_c = x.shape[1], len(cent)
    bias = np.zeros(num_c, np.float32) if bias is None else np.asarray(bias, np.float32)
    shift = (bias - _typical_best_score(x, cent, bias)).astype(np.float32)
    width = -(-(dim + 2) // PAD_TO) * PAD_TO
    cols = torch.zeros(width, num_c, dtype=torch.bfloat16)
    cols[:dim] = torch.from_numpy(cent).T
    shift_t = torch.from_numpy(shift)
    cols[dim] = shift_t
    cols[dim + 1] = shift_t - cols[dim].float()
    return cols


def _argmax_rows(scores, groups: int):
    """Row argmax of [r, C] as two cheap passes: torch's CPU argmax over a long bfloat16 row is ~10x slower
    than a max. Column ``j + g * C/groups`` belongs to group ``g``; the max over groups picks a column
    ``j`` per row (the column holding the row's maximum), then the argmax over that column's ``groups``
    entries picks ``g``."""

    if groups == 1:
        return scores.float().argmax(dim=1)
    r, num_c = scores.shape
    width = num_c // groups
    view = scores.view(r, groups, width)
    j = view.amax(dim=1).float().argmax(dim=1)
    g = view.gather(2, j.view(r, 1, 1).expand(r, groups, 1)).squeeze(2).float().argmax(dim=1)
    return g * width + j


def _typical_best_score(x: np.ndarray, cent: np.ndarray, bias: np.ndarray, probe: int = 512) -> float:
    """Median exact best score of an evenly spaced probe of rows (deterministic for a given input)."""
    idx = np.linspace(0, len(x) - 1, num=min(probe, len(x))).astype(np.int64)
    scores = x[idx] @ cent.T + bias
    return float(np.median(scores.max(axis=1)))
