"""The ``native`` PLAID backend: the C kernels built at install (plain C, loaded with ctypes), on the CPU.

Nearest-centroid assignment (every k-means iteration and every compressed vector: ``argmax_c <x, c> + b_c``
over all C centroids, the largest CPU cost of indexing after encoding), by ``precision``:

- ``int16`` (CPUs with AVX2; embedctl/index/plaid/_kernels_i16.c): each vector is scaled to norm 32767 and
  the centroids by one common factor, both rounded to int16; ``vpmaddwd`` gives exact int32 sums, twice
  the multiply-adds per instruction of a float32 FMA. The rounding moves a score by at most ~3.5e-4 |x|
  max|c| at dim 128 (the bound is derived in the C file); the GEMM and a candidate scan are fused, and each
  row's candidates within twice the bound of its best are rescored exactly in double precision. Exact.
  On 2 AMD Zen 3 cores: 815k vectors x 8192 centroids in 9.4 s against 22.9 s for faiss fp32. Where the CPU
  has AVX-512 VNNI the same arithmetic runs on ``vpdpwssd`` (_kernels_vnni.c: 32 multiply-adds per
  instruction, the same candidates and answers): 2.1x the AVX2 kernel on one Zen 5 core (222 against 106
  GMAC/s, 65,536 SciFact vectors x 8,192 centroids).
- ``int8`` (CPUs with AVX-512 VNNI; embedctl/index/plaid/_kernels_i8.c): rows scaled by their largest
  component, centroids by one factor, both rounded to 8 bits; ``vpdpbusd`` does 64 multiply-adds per
  instruction. The bound is wider (|x| E_c + |x - x^| C^, ~0.02 on unit vectors at dim 128) but nearest
  centroids are far apart, so ~1.9 columns per row are rescored exactly in double precision. Exact. On one
  Zen 5 core 1.55x the int16 VNNI kernel (350 against 226 GMAC/s on the same 65,536 x 8,192).
- ``bf16`` (CPUs with AMX-BF16, Linux; embedctl/index/plaid/_kernels_amx.c): the GEMM on 32 x 32 AMX
  tiles with float32 accumulators, each tile scanned at once for candidates within twice the bfloat16
  rounding bound (2^-7 |x| |c|), candidates rescored exactly. Exact. On a 2-core AMX CPU k-means +
  compression of SciFact took 6.3 s against 13.8 s for a bfloat16 torch GEMM + C rescoring. That GEMM + C
  route (for CPUs with AVX512-BF16 but no AMX) was dropped: on such a CPU it assigned 200k x 8192 in 6.9 s
  against 3.6 s for int16 (2 cores), so int16 serves those CPUs.
- ``fp32``: no reduced-precision kernel: the reference's float64 scores (exact). faiss's fp32 search was
  measured no faster than that (21.9 s against 18.3 s for 200k x 8192 on 2 busy cores)
  and is not used.

Compression and the stored norms: one C pass each (kernels.compress / kernels.decoded_norms), identical
to the reference's arithmetic. Search: the centroid interactions and the final MaxSim in C
(embedctl/index/plaid/_search_kernels.c); MaxSim ``fp32`` sums Q . r from a per-query byte table
(no decoded vectors), ``fp16`` from that table rounded to float16 (the same float32 sums of entries each
rounded once: ~1e-5 on a token similarity; the table's loads from L2 were the stage's bound: with half the
bytes the kernel ran ~1.6x faster alone on one Zen 5 core, a whole search in 0.70-0.91x of fp32's time,
bench/search_precision.py), ``bf16`` decodes residuals straight to
bfloat16 and runs one bfloat16 GEMM (a token similarity moves by at most ~1e-3, measured max 8e-4 on SciFact).
On CPUs with AMX tiles, ``fp16`` computes Q . r on the tiles instead (search_amx.maxsim_amx_docs: each
vector's residual decoded straight into bfloat16 hi and lo halves, three bfloat16 products with float32 sums,
~1e-6 a token similarity, closer than the float16 table): on one core of a 2-core AMX host 40 SciFact documents
(8,474 vectors) in 0.29-0.30 ms against 0.53-0.58 through the float16 table (its ~0.1 ms of table building
included), 200 in 1.4-1.5 against 2.2-2.6; the query's centroid scores also run there at fp16 and bf16
(:meth:`NativeBackend.centroid_scores`).
``auto`` picks fp16 where the float16 table runs on AVX-512, fp32 elsewhere, bf16 nowhere: on AVX512-BF16 without
AMX the fp32 table was measured 2.3x faster than bf16 (bench/plaid_backends.py), and on a 2-core AMX host a whole
search 1.4-1.7x slower in bf16 than in fp32 or fp16 (bench/search_precision.py).
"""

from __future__ import annotations

import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from embedctl.errors import ConfigError
from embedctl.index.plaid import kernels, search_amx, search_kernels
from embedctl.index.plaid.reference import Backend, decode_table

FUSED_ROWS = 8192  # rows per call of the fused kernels and C passes (one thread each), at most: see _block_rows
MIN_BLOCK_ROWS = 256  # ... and at least, when more threads than blocks would otherwise idle
TOP_HEAP_MAX = 64  # the C selection of the n best (a heap) up to this n; numpy's partition beyond: top_positions


def available() -> bool:
    """Both kernel libraries were built at install (a C compiler was present)."""
    return kernels.available() and search_kernels.available()


NEEDS = {"bf16": "needs AMX-BF16", "int8": "needs AVX-512 VNNI", "int16": "needs AVX2"}


def index_precision(requested: str) -> str:
    """``auto`` -> ``bf16`` where the AMX kernel runs, else ``int8`` where AVX-512 VNNI runs, else ``int16`` where
    the AVX2 kernel runs, else ``fp32``; an explicit precision this CPU cannot run is refused."""
    if requested == "auto":
        return ("bf16" if kernels.amx_available() else "int8" if kernels.vnni_available()
                else "int16" if kernels.i16_available() else "fp32")
    runnable = runnable_precisions("index")
    if requested not in runnable:
        raise ConfigError([f"`index.assign_precision` = {requested}: this CPU cannot run it ({NEEDS[requested]}); "
                           f"use index.assign_precision=auto (here: {index_precision('auto')})"])
    return requested


def search_precision(requested: str) -> str:
    """``auto`` -> ``fp16`` where its table runs on AVX-512, else ``fp32``. Not ``bf16`` on CPUs with AMX tiles, as
    until stop 51: measured on a 2-core AMX host (one thread, SciFact minilm over all 5,183 documents,
    bench/results/x86_64-amx-2c/search_precision.json) a search took 1.41x fp32's time at k=10 and 1.67x at
    k=100 in bf16, 1.03x / 1.02x in fp16, whose scores also stay closer (2e-4 against 3e-3)."""
    if requested == "auto":
        return "fp16" if search_kernels.float16_table_fast() else "fp32"
    return requested


def runnable_precisions(purpose: str) -> list[str]:
    if purpose == "search":
        return ["fp32", "fp16", "bf16"]  # each runs anywhere (fp16 fast with AVX-512, bf16 with bfloat16 units)
    return (["fp32"] + (["int16"] if kernels.i16_available() else []) + (["int8"] if kernels.vnni_available() else [])
            + (["bf16"] if kernels.amx_available() else []))


class NativeBackend(Backend):
    """C kernels and faiss on the CPU; ``precision`` as in the module docstring."""

    name = "native"

    def __init__(self, precision: str = "fp32", device: str = "cpu"):
        super().__init__(precision, device)
        self._transpose_cache = threading.local()  # per thread: the queries of a batch run on several threads
        self._table_cache = threading.local()  # per thread: the last query's nibble tables (warp, then MaxSim)
        self._block_max_cache = threading.local()  # per thread: the last scores buffer and its block maxima
        self._probe_cache = threading.local()  # per thread: the last warp_probes' ST, cells and their scores

    # -- indexing -----------------------------------------------------------------------------------
    def nearest(self, x: np.ndarray, centroids: np.ndarray, bias: np.ndarray | None = None,
                hints: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        x = np.ascontiguousarray(x, dtype=np.float32)
        cent = np.ascontiguousarray(centroids, dtype=np.float32)
        bias = None if bias is None else np.ascontiguousarray(bias, np.float32)
        hints = None if hints is None else np.ascontiguousarray(hints, np.int64)
        if len(x) == 0:
            return np.zeros(0, np.int32), np.zeros(0, np.float32)
        if self.precision == "int16":  # hints: not used (its bound is tight: they gained nothing measurable)
            return _nearest_i16(x, cent, bias)
        if self.precision == "int8":
            return _nearest_i8(x, cent, bias, hints)
        if self.precision == "bf16":
            return _nearest_amx(x, cent, bias, hints)
        return super().nearest(x, cent, bias)

    def compress(self, emb, centroids, codes, cutoffs, nbits):
        return compress_rows(emb, centroids, codes, cutoffs, nbits)

    def decoded_norms(self, centroids, codes, packed, weights, nbits):
        return decoded_norms_rows(centroids, codes, packed, weights, nbits)

    # -- search -------------------------------------------------------------------------------------
    def search_tables(self, centroids, weights, nbits):
        table = decode_table(weights, nbits)
        dim = int(np.asarray(centroids).shape[1])
        bf16 = _multi_byte_table_bf16(table) if self.precision == "bf16" else None
        if bf16 is not None and (dim * nbits // 8) % bf16[1]:
            bf16 = None  # an odd number of residual bytes: the fp32 table
        split = search_amx.pack_bf16x2(centroids) if self.amx_centroid_scores() else None
        residual = search_amx.residual_split(table) if self.amx_maxsim() else None
        return {"table": table, "bf16": bf16, "dim": dim, "bf16x2": split, "residual_split": residual,
                "nibble_weights": nibble_weights(table)}

    def amx_centroid_scores(self) -> bool:
        """Whether this backend's centroid scores run on AMX tiles: precision fp16 or bf16 (already within a
        rounding of float16 or bfloat16 per token similarity, far wider than the tiles' ~1e-6) on a CPU where
        search_amx.amx_available(). fp32 keeps the fused multiply-add kernel: the same bits on every CPU."""
        return self.precision in ("fp16", "bf16") and search_amx.amx_available()

    def amx_maxsim(self) -> bool:
        """Whether the final MaxSim's residual parts run on AMX tiles (search_amx.maxsim_amx_docs): precision
        fp16 (whose float16 table they replace: ~1e-6 per token similarity against ~1e-5) where
        :meth:`amx_centroid_scores`; bf16 keeps its decode and bfloat16 GEMM, fp32 its float32 table."""
        return self.precision == "fp16" and self.amx_centroid_scores()

    def centroid_scores(self, centroids, Q, scratch=None, threads=1, tables=None):
        """With ``tables`` holding the centroids' bfloat16 halves (:meth:`search_tables`, where
        :meth:`amx_centroid_scores`), three bfloat16 products on AMX tiles (search_amx.centroid_scores_amx:
        within ~7e-5 sum_d |c_d q_d| of the exact scores at dim 128; at most 2.5e-6 from float64 over 300 SciFact
        queries x 16,384 centroids; one core of a 2-core AMX host: 0.51 ms against 0.95 for the fp32 kernel; two
        products from half the bytes, 0.31 ms, where the centroids are bfloat16 values, as k-means stores them).
        Else the C kernel where it runs its AVX-512 version (embedctl_centroid_scores: one fused multiply-add
        chain per score, ~2.4x torch's sgemm on one core; within ~2e-6 of float64, like torch's), torch's
        matmul elsewhere (the reference's). ``scratch``: a per-thread namespace whose buffer is written instead
        of a fresh array (valid until the next call on that thread), with the maxima of its blocks of 16 rows
        beside it (either C kernel writes them as it stores the scores; :meth:`row_top` reads them)."""
        split = tables.get("bf16x2") if tables else None
        if split is None and not search_kernels.centroid_scores_fast():
            return super().centroid_scores(centroids, Q, scratch, threads)
        shape = (len(centroids), len(Q))
        buf = getattr(scratch, "centroid_scores", None) if scratch is not None else None
        if scratch is not None and (buf is None or buf.shape != shape):
            buf = scratch.centroid_scores = np.empty(shape, dtype=np.float32)
        self._block_max_cache.last = None  # buf is rewritten below: its maxima, if any, are no longer its
        block_max = self._block_max_buffer(scratch, len(centroids), len(Q)) if buf is not None else None
        if split is not None:
            out = search_amx.centroid_scores_amx(split, Q, out=buf, threads=threads, block_max=block_max)
        else:
            out = search_kernels.centroid_scores(centroids, Q, out=buf, threads=threads, block_max=block_max)
        if block_max is not None:
            self._block_max_cache.last = (buf, block_max)
        return out.T

    @staticmethod
    def _block_max_buffer(scratch, num_c: int, lq: int) -> np.ndarray:
        """The thread's buffer for the scores' block maxima (search_kernels.col_top_blocks), which either C scores
        kernel writes."""
        shape = (-(-num_c // 16), lq)
        block_max = getattr(scratch, "block_max", None)
        if block_max is None or block_max.shape != shape:
            block_max = scratch.block_max = np.empty(shape, dtype=np.float32)
        return block_max

    def batch_centroid_scores(self, centroids, Q):
        """None: each search computes its own with the kernel, on its own thread (a batch matmul would give
        other bits than the kernel, and is not faster than one kernel call per query on every core)."""
        return None

    def row_top(self, ST, m, threads=1):
        """Exact (a selection: the same columns in the same order). For the scores this thread's last
        :meth:`centroid_scores` wrote (either kernel), from their block maxima (search_kernels.col_top_blocks, one
        thread: ~0.4x col_top's time on one for 16,384 centroids x 32 tokens; the same answer)."""
        if m > search_kernels.MAX_TOP:
            return super().row_top(ST, m)
        if not ST.flags.c_contiguous and ST.T.flags.c_contiguous and ST.dtype == np.float32:
            # centroid scores held as [C, Lq]: no transposed copy
            cached = getattr(self._block_max_cache, "last", None)
            if cached is not None and ST.base is cached[0]:
                return search_kernels.col_top_blocks(ST.T, cached[1], m)
            return search_kernels.col_top(ST.T, m, threads=threads)
        return search_kernels.row_top(ST, m)

    def segment_maxsum(self, ST, codes, counts):
        return search_kernels.segment_maxsum(self._transposed(ST), codes, counts)

    def scatter_max_rows(self, ST, cents, slots, num_slots):
        return search_kernels.scatter_max_rows(self._transposed(ST), cents, slots, num_slots)

    def maxsim(self, tables, Q, ST, codes, packed, norms, lens, threads=1):
        """fp32: within 1e-5 of the reference per document (the same terms summed in another order); fp16: the
        same sums over the table's entries rounded to float16 (a token similarity within 2^-11 of the sum of
        the magnitudes of the entries it adds, over its norm; ~1e-5 measured), or on AMX tiles where
        :meth:`amx_maxsim` (:meth:`maxsim_docs` over the rows as given: its bits); bf16: within ``2e-3 * Lq``
        (each token similarity within ~1e-3)."""
        import torch

        if tables.get("residual_split") is not None:  # the in-place kernel over the rows as given: the same bits
            offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)  # an empty document: refused there
            return self.maxsim_docs(tables, Q, ST, codes, packed, norms, offsets, np.arange(len(lens)), threads)
        if tables["bf16"] is None:  # fp32 / fp16: Q . r summed from a per-query byte table, no decoded vectors
            return search_kernels.maxsim_lut(self._residual_lut(tables, Q), packed, self._transposed(ST), codes,
                                             norms, lens, threads=threads)
        D = decode_bf16(tables["bf16"], packed, tables["dim"])
        return search_kernels.maxsim(D @ torch.from_numpy(Q).to(torch.bfloat16).T, self._transposed(ST), codes,
                                     norms, lens)

    def doc_maxsum(self, ST, doc_codes, offsets, pids):
        """Exact (the segment_maxsum kernel's arithmetic, the codes read in place)."""
        return search_kernels.doc_maxsum(self._transposed(ST), doc_codes, offsets, pids)

    def maxsim_docs(self, tables, Q, ST, codes, packed, norms, offsets, pids, threads=1):
        """fp32 and fp16: the bits of :meth:`maxsim` on the gathered rows (no gathered copies; fp16 on AMX tiles
        where :meth:`amx_maxsim`: search_amx.maxsim_amx_docs); bf16: the gather, then :meth:`maxsim`."""
        if tables["bf16"] is not None:
            return super().maxsim_docs(tables, Q, ST, codes, packed, norms, offsets, pids, threads)
        if tables.get("residual_split") is not None:
            return search_amx.maxsim_amx_docs(tables["residual_split"], Q, packed, self._transposed(ST), codes, norms,
                                              offsets, pids, threads=threads)
        return search_kernels.maxsim_lut_docs(self._residual_lut(tables, Q), packed, self._transposed(ST), codes,
                                              norms, offsets, pids, threads=threads)

    def top_positions(self, scores, n):
        """The reference's positions: in C (search_kernels.top_positions, a heap of the n best) for float32 scores
        and n <= TOP_HEAP_MAX, where it is the faster (a WARP pool at k=10: n = 40, 8.6 against 12.0 us); the
        reference's partition otherwise (n = 200: 13.7 against the heap's 18.6; _warp_probes.c)."""
        if scores.dtype != np.float32 or not scores.flags.c_contiguous or n > TOP_HEAP_MAX:
            return super().top_positions(scores, n)
        return search_kernels.top_positions(scores, n)

    def warp_probes(self, ST, ordered, cell_sizes, want, least, most):
        """The reference's counts and scores (search_kernels.warp_probes: one C call where numpy took a dozen);
        the probed cells' scores it gathers on the way are kept for this thread's :meth:`warp_scores` of the
        same ST and cells (the same objects)."""
        ordered = np.ascontiguousarray(ordered, np.int64)
        ncells, miss, cell_scores = search_kernels.warp_probes(
            self._transposed(ST), ordered, np.ascontiguousarray(cell_sizes, np.int64), float(want), int(least),
            int(most))
        self._probe_cache.last = (ST, ordered, cell_scores)
        return ncells, miss

    def warp_scores(self, tables, Q, ST, cells, ncells, miss, layout, scratch, threads=1):
        """fp32 whatever the precision (the estimates only choose stage 5's pool): the per-token nibble tables
        (embedctl_warp_scores); within ~1e-5 of the reference per document (the same terms summed in another
        order); pids ascending like the reference's."""
        cached = getattr(self._probe_cache, "last", None)
        if cached is not None and cached[0] is ST and cached[1] is cells:
            cell_scores = cached[2]
        else:
            cells = np.ascontiguousarray(cells, np.int64)
            cell_scores = ST[np.arange(len(cells))[:, None], cells]  # ~3 us less than take_along_axis
        return search_kernels.warp_scores(
            self._nibbles(tables, Q), cells, cell_scores, np.ascontiguousarray(ncells, np.int64),
            np.ascontiguousarray(miss, np.float32), layout.cell_offsets, layout.blocks, scratch, threads=threads)

    def _nibbles(self, tables, Q: np.ndarray) -> np.ndarray:
        """:func:`_nibble_tables` of Q, kept per thread for the last (Q, index tables) it saw: a query's warp stage
        and its MaxSim share them (PlaidSearcher.as_query gives every search its own copy of the query, so a
        caller reusing its array cannot make them stale)."""
        cached = getattr(self._table_cache, "last", None)
        if cached is None or cached[0] is not Q or cached[1] is not tables:
            cached = (Q, tables, _nibble_tables(tables["table"], Q, tables.get("nibble_weights")))
            self._table_cache.last = cached
        return cached[2]

    def _residual_lut(self, tables, Q: np.ndarray) -> np.ndarray:
        """float32 [B, 256, Lq]: lut[b, v, q] = Q[q] . the residual values byte value v decodes to at byte b (the
        MaxSim kernels' table), summed from the nibble tables (search_kernels.byte_lut); precision fp16: that
        table rounded to float16 (search_kernels.byte_lut16)."""
        cached = getattr(self._table_cache, "lut", None)  # this thread's last table, rewritten (page faults)
        if cached is not None and cached[0] is Q and cached[1] is tables:
            return cached[2]
        make = search_kernels.byte_lut16 if self.precision == "fp16" else search_kernels.byte_lut
        lut = make(self._nibbles(tables, Q), out=None if cached is None else cached[2])
        self._table_cache.lut = (Q, tables, lut)
        return lut

    def _transposed(self, ST: np.ndarray) -> np.ndarray:
        """ST.T as C-contiguous float32 [C, Lq] (the kernels' layout), kept per thread for the last ST it saw:
        the stages of one query share it (centroid scores are never modified in place); one slot shared by
        the threads of a batch would be replaced by each other's queries and recomputed at every stage."""
        cached = getattr(self._transpose_cache, "last", None)
        if cached is None or cached[0] is not ST:
            cached = (ST, np.ascontiguousarray(ST.T, dtype=np.float32))
            self._transpose_cache.last = cached
        return cached[1]


# -- assignment routes ------------------------------------------------------------------------------
def _nearest_i16(x: np.ndarray, cent: np.ndarray, bias: np.ndarray | None, isa: str = "auto"
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The fused 16-bit integer kernel (``isa`` as kernels.nearest_i16: AVX-512 VNNI where it runs, else AVX2; the
    same answers), one thread per torch thread, each taking blocks of rows (_block_rows)."""
    packed, c_pad, d_pad, scale = kernels.pack_for_i16(cent)
    scan_bias = _scan_bias(c_pad, len(cent), bias)
    return _in_row_blocks(len(x), lambda lo, hi, codes, best: kernels.nearest_i16(
        x[lo:hi], packed, c_pad, d_pad, scale, cent, scan_bias, bias, codes, best, isa=isa))


def _nearest_i8(x: np.ndarray, cent: np.ndarray, bias: np.ndarray | None, hints: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """The fused 8-bit AVX-512 VNNI kernel, one thread per torch thread, each taking blocks of rows (_block_rows).
    ``hints`` (int64 [n], a likely best centroid per row: the previous k-means assignment) start each row's scan
    there: the same answers, fewer candidates pushed on the way (a k-means step on SciFact ~10% faster here; the
    int16 kernel's tight bound leaves few to save: 1-3%, not measurably worth its exact score per row)."""
    packed = kernels.pack_for_i8(cent)
    scan_bias = _scan_bias(packed.c_pad, len(cent), bias)
    return _in_row_blocks(len(x), lambda lo, hi, codes, best: kernels.nearest_i8(
        x[lo:hi], packed, cent, scan_bias, bias, codes, best, _rows(hints, lo, hi)))


def _nearest_amx(x: np.ndarray, cent: np.ndarray, bias: np.ndarray | None, hints: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The fused AMX kernel (scores never leave the tiles; float32 accumulators, so the bias is added after
    the GEMM), one thread per torch thread, each taking blocks of rows (_block_rows). ``hints`` as
    :func:`_nearest_i8`'s (on one AMX core, SciFact vectors, hints 94% right: 3-5% of a call)."""
    packed, c_pad, d_pad = kernels.pack_for_amx(cent)
    scan_bias = _scan_bias(c_pad, len(cent), bias)
    factor = kernels.amx_err_factor(cent, d_pad)  # times a row's norm: its bound on |tile score - <x, c>|
    # each block's row norms on its own thread (over all rows at once, a serial pass: 0.2 s of a 1 s k-means on
    # 16 AMX cores); a row's norm does not depend on the block it is computed in
    return _in_row_blocks(len(x), lambda lo, hi, codes, best: kernels.nearest_amx(
        x[lo:hi], packed, c_pad, d_pad, cent, scan_bias, bias,
        (np.linalg.norm(x[lo:hi], axis=1) * factor).astype(np.float32), codes, best, _rows(hints, lo, hi)))


def _rows(a: np.ndarray | None, lo: int, hi: int) -> np.ndarray | None:
    """Rows lo..hi of an optional per-row array (a block's hints)."""
    return None if a is None else a[lo:hi]


def _scan_bias(c_pad: int, num_c: int, bias: np.ndarray | None) -> np.ndarray:
    """float32 [c_pad] added to the fused kernels' tile scores: the bias (or 0), -inf on the padding columns."""
    scan_bias = np.full(c_pad, -np.inf, np.float32)
    scan_bias[:num_c] = 0.0 if bias is None else bias
    return scan_bias


def _in_row_blocks(n: int, kernel) -> tuple[np.ndarray, np.ndarray]:
    """Run ``kernel(lo, hi, codes[lo:hi], best[lo:hi])`` over the blocks of :func:`_blocks_on_threads` -> (int32
    codes [n], float32 exact best scores [n])."""
    codes = np.empty(n, dtype=np.int64)
    best = np.empty(n, dtype=np.float32)
    _blocks_on_threads(n, lambda lo, hi: kernel(lo, hi, codes[lo:hi], best[lo:hi]))
    return codes.astype(np.int32), best


def compress_rows(emb, centroids, codes, cutoffs, nbits) -> np.ndarray:
    """The reference's compression (packed residual buckets) in one C pass over blocks of rows, on one thread per
    torch thread (each row on its own: the same bytes). Also the torch (GPU) backend's, where the kernels exist."""
    cent = np.ascontiguousarray(centroids, dtype=np.float32)
    return _row_blocks(len(emb), lambda lo, hi: kernels.compress(emb[lo:hi], cent, codes[lo:hi], cutoffs, nbits))


def decoded_norms_rows(centroids, codes, packed, weights, nbits) -> np.ndarray:
    """The stored norms (of the decompressed vectors) as :func:`compress_rows` runs: blocks of rows on threads."""
    cent, table = np.ascontiguousarray(centroids, dtype=np.float32), decode_table(weights, nbits)
    return _row_blocks(len(codes), lambda lo, hi: kernels.decoded_norms(cent, codes[lo:hi], packed[lo:hi], table,
                                                                        nbits))


def _row_blocks(n: int, kernel) -> np.ndarray:
    """``kernel(lo, hi)`` (an array of rows lo..hi) over the blocks of :func:`_blocks_on_threads`, their rows
    concatenated in order (one block: the kernel's own array)."""
    parts = _blocks_on_threads(n, kernel)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _block_rows(n: int, threads: int) -> int:
    """Rows per block for n rows on ``threads``: FUSED_ROWS, or fewer (down to MIN_BLOCK_ROWS) so that every
    thread gets about 4 blocks. Why: the compression's residual pass runs on 65,536 rows at a time (and until stop 50
    its assignment did too): 8 blocks of FUSED_ROWS, so on 16 threads half of them idled (stop 49 measured
    compression on 16 AMX cores only 2.2x faster than on 2). Each row's answer is computed alone: the same bytes
    whatever the blocks."""
    return int(max(MIN_BLOCK_ROWS, min(FUSED_ROWS, -(-n // (4 * max(1, threads))))))


def _blocks_on_threads(n: int, run) -> list:
    """``run(lo, hi)`` for each block of :func:`_block_rows` rows of n, on one thread per torch thread (ctypes
    releases the GIL) -> the results in block order; one block runs on the calling thread."""
    import torch

    threads = max(1, torch.get_num_threads())
    size = _block_rows(n, threads)
    if n <= size:
        return [run(0, n)]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda lo: run(lo, min(n, lo + size)), range(0, n, size)))


# -- search helpers ---------------------------------------------------------------------------------
def nibble_weights(table: np.ndarray) -> np.ndarray:
    """float32 [per, 32] for :func:`_nibble_tables` (once per index): columns 0-15 the residual values of the high
    nibble n (byte n << 4) in the rows of a byte's first half of dims, columns 16-31 those of the low nibble n in
    the rows of its second half, zeros elsewhere."""
    per = table.shape[1]
    half = per // 2
    nib = np.arange(16)
    weights = np.zeros((per, 32), dtype=np.float32)
    weights[:half, :16] = table[nib << 4, :half].T
    weights[half:, 16:] = table[nib, half:].T
    return weights


def _nibble_tables(table: np.ndarray, Q: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """float32 [Lq, B, 2, 16]: per token q and byte position b, Q[q] . the residual values the byte's high
    nibble (n << 4) decodes to, then those of its low nibble n. Bytes hold dims first-dim-most-significant
    (reference.pack_bits) and a nibble whole dims for nbits 1, 2, 4, so a byte's table entry is the sum of its
    two nibbles' entries. One 2-D product of the query's dims, a byte's per dims a row, with
    :func:`nibble_weights` (``weights``: precomputed for ``table``): its zeros add nothing, so the same sums as two
    products of the halves (the same bits on 300 SciFact queries), ~5 us where numpy's stacked products of the
    halves took ~30 (a batched torch matmul ~150)."""
    weights = nibble_weights(table) if weights is None else weights
    per = table.shape[1]
    Q = np.ascontiguousarray(Q, np.float32)
    return (Q.reshape(-1, per) @ weights).reshape(Q.shape[0], Q.shape[1] // per, 2, 16)


def _multi_byte_table_bf16(table: np.ndarray) -> tuple[np.ndarray, int] | None:
    """[256, per] float32 byte table -> (items, bytes per item) for decoding straight to bfloat16 with one
    numpy take: each item holds the decoded values of 1 byte (nbits 1: 8 values) or of a little-endian byte
    pair (nbits 2: 8 values, nbits 4: 4 values), first byte first, as one 16- or 8-byte scalar. None on
    big-endian machines (the fp32 table is used there)."""
    import torch

    if sys.byteorder != "little":  # byte pairs are read as little-endian uint16 keys
        return None
    per = table.shape[1]
    step = 1 if per == 8 else 2
    bf = torch.from_numpy(np.ascontiguousarray(table, dtype=np.float32)).to(torch.bfloat16).view(torch.int16).numpy()
    if step == 1:
        items = bf
    else:
        v = np.arange(65536)
        items = np.concatenate([bf[v & 255], bf[v >> 8]], axis=1)
    item_dtype = {16: np.complex128, 8: np.uint64}.get(items.shape[1] * 2)
    if item_dtype is None:
        return None
    return np.ascontiguousarray(items).view(item_dtype).ravel(), step


def decode_bf16(table_bf16: tuple[np.ndarray, int], packed: np.ndarray, dim: int):
    """Decode packed residuals uint8 [n, B] with a :func:`_multi_byte_table_bf16` table -> torch bfloat16 [n, dim]."""
    import torch

    items, step = table_bf16
    keys = np.ascontiguousarray(packed)
    if step == 2:
        keys = keys.view(np.uint16)  # little-endian: the low byte is the first byte
    out = np.take(items, keys)
    with warnings.catch_warnings():  # a read-only result of take is fine: torch only reads it
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(out.view(np.int16)).view(torch.bfloat16).view(len(packed), dim)
