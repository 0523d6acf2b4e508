/* Fused nearest-centroid search on 16-bit integer products (AVX2 `vpmaddwd`), part of the optional PLAID
 * indexing kernels (setup.py builds it into embedctl/index/plaid/_kernels with _kernels.c). For CPUs without
 * bfloat16 matrix units, where the exact float32 GEMM is the largest cost of indexing after encoding.
 *
 * Why 16-bit integers: `vpmaddwd` multiplies 16 pairs of int16 and adds neighbouring products into 8 int32
 * lanes, 16 multiply-adds per instruction against 8 for a float32 FMA on the same AVX2 pipes, and the int32
 * sums are exact. Rounding each vector to 16 bits moves a score by at most a known bound (below), so every
 * centroid within twice that bound of a row's best is rescored exactly in double precision from the float32
 * inputs: the answer is the exact nearest centroid (the first column on ties), as from the AMX kernel.
 *
 * Scaling: each row x is scaled to norm 32767 (s_x = 32767 / |x|) and the centroids by one factor s_c with
 * max |c| * s_c <= 32767, then rounded. Every partial sum of a row's products is then at most
 * |x_q| |c_q| < 2^31 in magnitude (Cauchy-Schwarz), so the int32 lanes cannot overflow. The approximate
 * score is sum / (s_x s_c); with per-component rounding <= 1/2 on each side and dimension D,
 *   |approx - <x, c>| <= sqrt(D)/2 (|x| + sqrt(D)/(2 s_x)) / s_c + sqrt(D)/(2 s_x) |c|
 *                    = |x| cmax (sqrt(D)/2 / 32767) (2 + sqrt(D)/2 / 32767)      (cmax = 32767 / s_c)
 * plus float32 rounding of the conversion, covered with a margin. About 3.5e-4 |x| cmax for D = 128: on
 * ColBERT vectors one or two centroids per row are rescored.
 *
 * Compiled for x86-64 with gcc >= 8 or clang >= 8 (function-level target attribute); embedctl_i16_ready()
 * says at run time whether the CPU has AVX2. Elsewhere both entry points exist and report "unavailable".
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if !defined(EMBEDCTL_PORTABLE) && defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 8) || \
                            (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 8))
#define EMBEDCTL_I16 1
#include <immintrin.h>
#endif

int64_t embedctl_nearest_i16(const float *x, int64_t n, int64_t dim, const int16_t *packed, int64_t c,
                             int64_t c_pad, int64_t dim_pad, float centroid_scale, const float *cent,
                             const float *scan_bias, const float *bias, int64_t *out, float *best);
int embedctl_i16_ready(void);

#ifndef EMBEDCTL_I16
int embedctl_i16_ready(void) { return 0; }
int64_t embedctl_nearest_i16(const float *x, int64_t n, int64_t dim, const int16_t *packed, int64_t c,
                             int64_t c_pad, int64_t dim_pad, float centroid_scale, const float *cent,
                             const float *scan_bias, const float *bias, int64_t *out, float *best) {
    (void)x; (void)n; (void)dim; (void)packed; (void)c; (void)c_pad; (void)dim_pad; (void)centroid_scale;
    (void)cent; (void)scan_bias; (void)bias; (void)out; (void)best;
    return -3;
}
#else

#define ROWS 4           /* rows per register tile: 4 x 16 int32 sums in 8 registers */
#define COLS 16          /* centroids per panel (two 8-lane registers) */
#define SUPER_ROWS 64    /* rows sharing one pass over the centroids (16 KB of int16 rows at D = 128) */
#include "_nearest_scan.h"
#include "_i16_quantize.h"

int embedctl_i16_ready(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

__attribute__((target("avx2")))
static inline __m256i broadcast_pair(const int16_t *p) {  /* two int16 (one dimension pair) in every lane */
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* The scores of one row of a tile (two registers of int32 sums) against the row's threshold. */
__attribute__((target("avx2")))
static inline void scan_row(__m256i lo, __m256i hi, __m256 bias0, __m256 bias1, struct row_state *s,
                            float *threshold, int64_t c0, int64_t c) {
    const __m256 inv = _mm256_set1_ps(s->inv_scale), t = _mm256_set1_ps(*threshold);
    const __m256 v0 = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(lo), inv), bias0);
    const __m256 v1 = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(hi), inv), bias1);
    uint32_t hits = (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(v0, t, _CMP_GE_OQ)) |
                    ((uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(v1, t, _CMP_GE_OQ)) << 8);
    if (!hits) return;
    float v[COLS];
    _mm256_storeu_ps(v, v0);
    _mm256_storeu_ps(v + 8, v1);
    push_hits(s, threshold, hits, v, c0, c);
}

/* x float32 [n, dim]; packed: the centroids times centroid_scale, rounded to int16, zero-padded to
 * [c_pad, dim_pad] (c_pad % 16 == 0, dim_pad even) and laid out as [c_pad / 16][dim_pad / 2][16][2] (panel,
 * dimension pair, centroid, pair member); every centroid needs |c| * centroid_scale <= 32767.
 * scan_bias float32 [c_pad]: added to each approximate score before the scan (0 or the bias; -inf on padding);
 * bias float32 [c] or NULL: added to exact scores. out int64 [n] (the argmax), best float32 [n] or NULL.
 * Returns the number of exactly rescored columns, or -1 bad sizes, -2 out of memory, -3 no AVX2 build. */
__attribute__((target("avx2")))
int64_t embedctl_nearest_i16(const float *x, int64_t n, int64_t dim, const int16_t *packed, int64_t c,
                             int64_t c_pad, int64_t dim_pad, float centroid_scale, const float *cent,
                             const float *scan_bias, const float *bias, int64_t *out, float *best) {
    if (n < 0 || c < 1 || dim < 1 || c_pad < c || c_pad % COLS || dim_pad < dim || dim_pad % 2 ||
        !(centroid_scale > 0.0f))
        return -1;
    const int64_t pairs = dim_pad / 2;
    const double cmax = QMAX / (double)centroid_scale;
    int16_t *xq = calloc((size_t)SUPER_ROWS * (size_t)dim_pad, sizeof *xq);
    struct row_state *state = malloc(SUPER_ROWS * sizeof *state);
    float threshold[SUPER_ROWS];
    if (!xq || !state) { free(xq); free(state); return -2; }
    int64_t rescored = 0;
    for (int64_t r0 = 0; r0 < n; r0 += SUPER_ROWS) {
        const int64_t rows = n - r0 < SUPER_ROWS ? n - r0 : SUPER_ROWS;
        const int64_t padded_rows = (rows + ROWS - 1) / ROWS * ROWS;
        for (int64_t i = 0; i < rows; i++) {
            quantize_row(x + (r0 + i) * dim, dim, dim_pad, cmax, centroid_scale, xq + i * dim_pad, &state[i]);
            threshold[i] = -INFINITY;
        }
        memset(xq + rows * dim_pad, 0, (size_t)(padded_rows - rows) * (size_t)dim_pad * sizeof *xq);
        for (int64_t c0 = 0; c0 < c_pad; c0 += COLS) {
            const int16_t *panel = packed + (c0 / COLS) * pairs * 2 * COLS;
            const __m256 bias0 = _mm256_loadu_ps(scan_bias + c0), bias1 = _mm256_loadu_ps(scan_bias + c0 + 8);
            for (int64_t rb = 0; rb < padded_rows; rb += ROWS) {
                const int16_t *x0 = xq + rb * dim_pad, *x1 = x0 + dim_pad, *x2 = x1 + dim_pad, *x3 = x2 + dim_pad;
                __m256i a00 = _mm256_setzero_si256(), a01 = a00, a10 = a00, a11 = a00;
                __m256i a20 = a00, a21 = a00, a30 = a00, a31 = a00;
                for (int64_t k = 0; k < pairs; k++) {
                    const __m256i b0 = _mm256_loadu_si256((const __m256i *)(panel + k * 2 * COLS));
                    const __m256i b1 = _mm256_loadu_si256((const __m256i *)(panel + k * 2 * COLS + 16));
                    __m256i xv = broadcast_pair(x0 + 2 * k);
                    a00 = _mm256_add_epi32(a00, _mm256_madd_epi16(xv, b0));
                    a01 = _mm256_add_epi32(a01, _mm256_madd_epi16(xv, b1));
                    xv = broadcast_pair(x1 + 2 * k);
                    a10 = _mm256_add_epi32(a10, _mm256_madd_epi16(xv, b0));
                    a11 = _mm256_add_epi32(a11, _mm256_madd_epi16(xv, b1));
                    xv = broadcast_pair(x2 + 2 * k);
                    a20 = _mm256_add_epi32(a20, _mm256_madd_epi16(xv, b0));
                    a21 = _mm256_add_epi32(a21, _mm256_madd_epi16(xv, b1));
                    xv = broadcast_pair(x3 + 2 * k);
                    a30 = _mm256_add_epi32(a30, _mm256_madd_epi16(xv, b0));
                    a31 = _mm256_add_epi32(a31, _mm256_madd_epi16(xv, b1));
                }
                const int64_t last = rows - rb < ROWS ? rows - rb : ROWS;
                scan_row(a00, a01, bias0, bias1, &state[rb], &threshold[rb], c0, c);
                if (last > 1) scan_row(a10, a11, bias0, bias1, &state[rb + 1], &threshold[rb + 1], c0, c);
                if (last > 2) scan_row(a20, a21, bias0, bias1, &state[rb + 2], &threshold[rb + 2], c0, c);
                if (last > 3) scan_row(a30, a31, bias0, bias1, &state[rb + 3], &threshold[rb + 3], c0, c);
            }
        }
        for (int64_t i = 0; i < rows; i++)
            rescored += finish_row(&state[i], threshold[i], x + (r0 + i) * dim, cent, bias, c, dim, &out[r0 + i],
                                   best ? &best[r0 + i] : NULL);
    }
    free(xq);
    free(state);
    return rescored;
}
#endif
