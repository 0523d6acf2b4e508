/* The bf16 encoder's products for a few rows (a query: 32 tokens) on AMX tiles, part of the bf16 encoder's kernel
 * library (setup.py builds it into embedctl/models/_bf16_attention with _bf16_attention.c and _bf16_norm.c; ctypes
 * front: embedctl/models/bf16_linear.py).
 *
 * out[r, j] = bf16(sum_k x[r, k] w[j, k] + bias[j]) (or its GELU): x bfloat16 [rows, k] (rows <= 256), w the weight
 * [n, k] laid out once as tiles (embedctl_bf16_linear_pack), bias bfloat16 [n] or NULL, the sums in float32 tile
 * accumulators (over k in steps of 32, ascending) and rounded once to bfloat16, nearest even (vcvtne2ps2bf16).
 * Why: for a query's 32 rows a product is a stream of its weight (~20 MB of bfloat16 a MiniLM query), and oneDNN's
 * packed product read it at ~10 GB/s on one core of a 2-core AMX host where tile loads of the same bytes, in the
 * order they lie, read ~12-14 GB/s (a /tmp harness; the encoder's A/B: bench/bf16_attention.py --fusion linear).
 * Each weight tile (16 outputs x 32 inputs, 1 KB) is read from memory once per call (again from the cache for each
 * further group of 32 rows); two of them share each pair of row tiles.
 * With gelu, the exact GELU of each sum before its rounding (gelu_erf), as oneDNN's post-op. */
#include "../index/plaid/_amx_common.h" /* first: it defines _GNU_SOURCE (syscall) */

#include <stdlib.h>

#define MAX_ROWS 256 /* rows a call takes (bf16_linear.MAX_ROWS: how many it is given) */

int embedctl_bf16_linear_ready(void);
int embedctl_bf16_linear(const uint16_t *x, int64_t rows, int64_t k, const uint16_t *w, int64_t n,
                         const uint16_t *bias, int gelu, uint16_t *out, int nthreads);
int embedctl_bf16_linear_pack(const uint16_t *weight, int64_t n, int64_t k, uint16_t *w);

/* w [n / 16][k / 32][16 input pairs][16 outputs][2] from weight [n, k] (row-major): the B tiles of the products,
 * each output block's tiles in input order (one stream a block). Returns 0, or -1 when n is not a multiple of 16
 * or k of 32. Plain C: once per weight. */
int embedctl_bf16_linear_pack(const uint16_t *weight, int64_t n, int64_t k, uint16_t *w) {
    if (n < 16 || k < 32 || n % 16 || k % 32) return -1;
    const int64_t k_tiles = k / 32;
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < k; i++)
            w[((((j / 16) * k_tiles + i / 32) * 16 + (i % 32) / 2) * 16 + j % 16) * 2 + i % 2] = weight[j * k + i];
    return 0;
}

#ifndef EMBEDCTL_AMX
int embedctl_bf16_linear_ready(void) { return 0; }
int embedctl_bf16_linear(const uint16_t *x, int64_t rows, int64_t k, const uint16_t *w, int64_t n,
                         const uint16_t *bias, int gelu, uint16_t *out, int nthreads) {
    (void)x; (void)rows; (void)k; (void)w; (void)n; (void)bias; (void)gelu; (void)out; (void)nthreads;
    return -3;
}
#else

/* AMX-BF16 and AVX512_BF16 (the rounding) here, and the tile state granted. */
int embedctl_bf16_linear_ready(void) {
    return amx_ready_once() && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vl");
}

/* Tiles: 0 / 1 the sums of row tile 0 / 1 for the first output block of a pair, 2 / 3 for the second; 4 / 5 the
 * row tiles of x; 6 / 7 the two weight tiles. A row tile holds up to 16 rows (the second one the rows past 16). */
__attribute__((target("amx-tile")))
static void configure(int64_t rows) {
    struct tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    const uint8_t first = (uint8_t)(rows < 16 ? rows : 16), second = (uint8_t)(rows > 16 ? rows - 16 : 0);
    const uint8_t tile_rows[8] = {first, second, first, second, first, second, 16, 16};
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = tile_rows[t];
        cfg.colsb[t] = tile_rows[t] ? 64 : 0;
    }
    _tile_loadconfig(&cfg);
}

/* e^x, x <= 0 (below -87: 0 or a subnormal, as expf): 2^(x log2 e) as 2^n 2^f, f in [-1/2, 1/2] by a degree-7
 * Taylor polynomial of e^(f ln 2) (truncation < 1e-8), within a few float32 ulps of expf. */
__attribute__((target("avx512f")))
static inline __m512 exp_nonpositive(__m512 x) {
    const __m512 y = _mm512_mul_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(1.44269504089f));
    const __m512 n = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_mul_ps(_mm512_sub_ps(y, n), _mm512_set1_ps(0.69314718056f));
    __m512 p = _mm512_set1_ps(1.98412698e-4f); /* 1/7! */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.38888889e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(8.33333333e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(4.16666667e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.66666667e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* GELU(v) = v / 2 (1 + erf(v / sqrt 2)), erf by Abramowitz and Stegun 7.1.26 (absolute error < 1.5e-7: the GELU
 * within ~1e-7 |v| of the exact one, far inside the bfloat16 rounding that follows, 2^-9 of the value). */
__attribute__((target("avx512f")))
static inline __m512 gelu_erf(__m512 v) {
    const __m512 z = _mm512_mul_ps(_mm512_abs_ps(v), _mm512_set1_ps(0.70710678119f));
    const __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(z, _mm512_set1_ps(0.3275911f),
                                                                          _mm512_set1_ps(1.0f)));
    __m512 p = _mm512_set1_ps(1.061405429f);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
    p = _mm512_mul_ps(p, t);
    const __m512 tail = _mm512_mul_ps(p, exp_nonpositive(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(z, z))));
    /* 1 + erf(v / sqrt 2): 2 - tail for v >= 0, tail for v < 0 (erf odd) */
    const __mmask16 negative = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 one_plus = _mm512_mask_mov_ps(_mm512_sub_ps(_mm512_set1_ps(2.0f), tail), negative, tail);
    return _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(0.5f)), one_plus);
}

/* count rows of sums [count][32] (two output blocks side by side; the second absent when width is 16) plus the
 * bias (and their GELU), rounded to bfloat16 into out's columns j0 .. j0 + width - 1. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
static void round_rows(const float *sums, int64_t count, const uint16_t *bias, int gelu, int64_t j0, int64_t width,
                       uint16_t *out, int64_t n) {
    const __mmask16 hi_keep = width == 32 ? (__mmask16)0xffff : 0;
    __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
    if (bias) {
        b0 = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(bias + j0))), 16));
        b1 = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(hi_keep, bias + j0 + 16)), 16));
    }
    for (int64_t r = 0; r < count; r++) {
        __m512 lo = _mm512_add_ps(_mm512_loadu_ps(sums + r * 32), b0);
        __m512 hi = _mm512_add_ps(_mm512_maskz_loadu_ps(hi_keep, sums + r * 32 + 16), b1);
        if (gelu) {
            lo = gelu_erf(lo);
            hi = gelu_erf(hi);
        }
        const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(hi, lo); /* lanes 0-15 from lo, 16-31 from hi */
        _mm512_mask_storeu_epi16(out + r * n + j0, width == 32 ? (__mmask32)0xffffffffu : (__mmask32)0xffffu, both);
    }
}

/* Output columns j0 .. j1 - 1 (multiples of 32, or n) of the product: their pairs of output blocks in order. */
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))
static void columns(const uint16_t *x, int64_t rows, int64_t k, const uint16_t *w, int64_t n, const uint16_t *bias,
                    int gelu, uint16_t *out, int64_t j0, int64_t j1) {
    const int64_t k_tiles = k / 32, stride = k * 2;
    float sums[32 * 32] __attribute__((aligned(64)));
    int64_t configured = 0;
    for (int64_t j = j0; j < j1; j += 32) {
        const int two_blocks = j + 16 < n;
        const uint16_t *w0 = w + (j / 16) * k_tiles * 512, *w1 = w0 + k_tiles * 512;
        /* the rows in groups of 32 (two row tiles), the pair's weight tiles read again from the cache after the
         * first group (the tiles are configured for a group's rows: a last, shorter group reconfigures them) */
        for (int64_t r0 = 0; r0 < rows; r0 += 32) {
            const int64_t group = rows - r0 < 32 ? rows - r0 : 32, two_row_tiles = group > 16;
            const uint16_t *xg = x + r0 * k;
            if (group != configured) {
                configure(group);
                configured = group;
            }
            _tile_zero(0);
            _tile_zero(2);
            if (two_row_tiles) {
                _tile_zero(1);
                _tile_zero(3);
            }
            for (int64_t t = 0; t < k_tiles; t++) {
                _tile_loadd(4, xg + t * 32, stride);
                _tile_loadd(6, w0 + t * 512, 64);
                _tile_dpbf16ps(0, 4, 6);
                if (two_blocks) {
                    _tile_loadd(7, w1 + t * 512, 64);
                    _tile_dpbf16ps(2, 4, 7);
                }
                if (two_row_tiles) {
                    _tile_loadd(5, xg + 16 * k + t * 32, stride);
                    _tile_dpbf16ps(1, 5, 6);
                    if (two_blocks) _tile_dpbf16ps(3, 5, 7);
                }
            }
            /* each block's sums into its 16 columns of a [group][32] buffer, then rounded with the bias */
            _tile_stored(0, sums, 128);
            if (two_blocks) _tile_stored(2, sums + 16, 128);
            if (two_row_tiles) {
                _tile_stored(1, sums + 16 * 32, 128);
                if (two_blocks) _tile_stored(3, sums + 16 * 32 + 16, 128);
            }
            round_rows(sums, group, bias, gelu, j, two_blocks ? 32 : 16, out + r0 * n, n);
        }
    }
    _tile_release();
}

/* gelu != 0: GELU (exact, erf) of each sum plus bias before its rounding (gelu_erf), as oneDNN's post-op applies
 * it (not its bits: its erf and exp are its own). Returns 0, or -1 bad sizes (rows outside 1 .. 256, k not a
 * multiple of 32, n not of 16), -3 no AMX here.
 * nthreads > 1: the output columns split in that many ranges of whole block pairs, one thread each (OpenMP; each
 * configures its own tiles; a range's weight is its own stream, so the threads read it side by side): the same
 * bits whatever the count. */
int embedctl_bf16_linear(const uint16_t *x, int64_t rows, int64_t k, const uint16_t *w, int64_t n,
                         const uint16_t *bias, int gelu, uint16_t *out, int nthreads) {
    if (rows < 1 || rows > MAX_ROWS || k < 32 || k % 32 || n < 16 || n % 16) return -1;
    if (!embedctl_bf16_linear_ready()) return -3;
    const int64_t pairs = (n + 31) / 32;
    const int64_t parts = nthreads > 1 ? (nthreads < pairs ? nthreads : pairs) : 1;
    if (parts <= 1) {
        columns(x, rows, k, w, n, bias, gelu, out, 0, n);
        return 0;
    }
#ifdef _OPENMP
#pragma omp parallel for num_threads((int)parts) schedule(static, 1)
#endif
    for (int64_t p = 0; p < parts; p++) {
        const int64_t j0 = 32 * (p * pairs / parts), j1 = 32 * ((p + 1) * pairs / parts);
        columns(x, rows, k, w, n, bias, gelu, out, j0, j1 < n ? j1 : n);
    }
    return 0;
}
#endif
