/* Fused nearest-centroid search on 8-bit integer products with AVX-512 VNNI (`vpdpbusd`), part of the optional
 * PLAID indexing kernels (setup.py builds it into embedctl/index/plaid/_kernels with _kernels.c).
 *
 * Why: one `vpdpbusd` does 64 multiply-adds (unsigned x signed bytes, four products per int32 lane), twice the
 * 16-bit kernel's `vpdpwssd` (_kernels_vnni.c). 8 bits leave a wider rounding bound (~0.02 on unit vectors at
 * dimension 128 against ~3.5e-4), but nearest centroids are far apart: on SciFact's ColBERT vectors a window
 * of 0.05 below a row's best holds 2.3 centroids on average (30 at most of 5,000 rows), so the candidates
 * within twice the bound stay few, and each is rescored exactly in double precision (_nearest_scan.h). The
 * answer is the exact argmax (the first column on ties), as from every other kernel.
 *
 * Rounding: a row x is scaled by s_x = 127 / max_i |x_i|, the centroids by one s_c = 127 / max |c_ji|, both
 * rounded (so x^ = q_x / s_x, c^ = q_c / s_c). The int32 sum q_x . q_c is exact, so the approximate score
 * x^ . c^ differs from x . c by at most
 *   |x . (c - c^)| + |(x - x^) . c^| <= |x| E_c + |x - x^| C^,   E_c = max_j |c_j - c^_j|, C^ = max_j |c^_j|
 * (Cauchy-Schwarz; E_c and C^ computed once in float64 by kernels.pack_for_i8, |x| and |x - x^| per row here),
 * plus float32 rounding of the conversion, the product and the bias (covered with 1e-6 relative).
 * `vpdpbusd` needs unsigned bytes on one side: a row is stored as q_x + 128 and 128 sum_i q_c,ji (``offsets``)
 * is subtracted from each sum before conversion.
 *
 * Compiled for x86-64 with gcc >= 8 or clang >= 8 (function-level target attribute); the CPU test is
 * embedctl_vnni_ready() (_kernels_vnni.c). Elsewhere the entry point exists and reports "unavailable".
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if !defined(EMBEDCTL_PORTABLE) && defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 8) || \
                            (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 8))
#define EMBEDCTL_I8 1
#include <immintrin.h>
#endif

int64_t embedctl_nearest_i8(const float *x, int64_t n, int64_t dim, const int8_t *packed, const int32_t *offsets,
                            int64_t c, int64_t c_pad, int64_t dim_pad, float centroid_scale, double centroid_err,
                            double centroid_max, const float *cent, const float *scan_bias, const float *bias,
                            const int64_t *hints, int64_t *out, float *best);

#ifndef EMBEDCTL_I8
int64_t embedctl_nearest_i8(const float *x, int64_t n, int64_t dim, const int8_t *packed, const int32_t *offsets,
                            int64_t c, int64_t c_pad, int64_t dim_pad, float centroid_scale, double centroid_err,
                            double centroid_max, const float *cent, const float *scan_bias, const float *bias,
                            const int64_t *hints, int64_t *out, float *best) {
    (void)x; (void)n; (void)dim; (void)packed; (void)offsets; (void)c; (void)c_pad; (void)dim_pad;
    (void)centroid_scale; (void)centroid_err; (void)centroid_max; (void)cent; (void)scan_bias; (void)bias;
    (void)hints; (void)out; (void)best;
    return -3;
}
#else

#define CAP 64           /* the 8-bit bound keeps a few more candidates than the 16-bit one */
#define ROWS 8           /* rows per register tile: 8 x 32 int32 sums in 16 registers */
#define PANEL 16         /* centroids per packed panel (one register of int32 sums) */
#define SUPER_ROWS 64    /* rows sharing one pass over the centroids (8 KB of byte rows at D = 128) */
#define Q8 127.0
#include "_nearest_scan.h"
#include "_vnni_tile.h"

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))

/* Row i of the block: bytes q_x + 128, the scale back to score units, the rounding bound. Eight components at a
 * time in double precision (one at a time, the kernel took 5-8% longer on SciFact's vectors): the same bytes as
 * rounding each component alone, the sums in another order (the bound's 1.0001 covers that). */
TARGET static void quantize_row8(const float *xr, int64_t dim, int64_t dim_pad, float centroid_scale,
                                 double centroid_err, double centroid_max, uint8_t *xq, struct row_state *s) {
    const int64_t wide = dim / 8 * 8;
    __m512d sq8 = _mm512_setzero_pd(), max8 = _mm512_setzero_pd(), miss8 = _mm512_setzero_pd();
    for (int64_t d = 0; d < wide; d += 8) {
        const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(xr + d));
        sq8 = _mm512_fmadd_pd(v, v, sq8);
        max8 = _mm512_max_pd(max8, _mm512_abs_pd(v));
    }
    double sq = _mm512_reduce_add_pd(sq8), amax = _mm512_reduce_max_pd(max8), miss = 0.0;
    for (int64_t d = wide; d < dim; d++) {
        sq += (double)xr[d] * xr[d];
        amax = fabs((double)xr[d]) > amax ? fabs((double)xr[d]) : amax;
    }
    const double scale = amax > 0.0 ? Q8 / amax : 0.0, unit = amax / Q8;  /* 1 / scale (0 for a zero row) */
    const __m512d scale8 = _mm512_set1_pd(scale), unit8 = _mm512_set1_pd(unit), hi = _mm512_set1_pd(Q8),
                  lo = _mm512_set1_pd(-Q8), offset = _mm512_set1_pd(128.0);
    for (int64_t d = 0; d < wide; d += 8) {
        const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(xr + d));
        __m512d q = _mm512_roundscale_pd(_mm512_mul_pd(v, scale8), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm512_min_pd(_mm512_max_pd(q, lo), hi);
        const __m512d gap = _mm512_fnmadd_pd(q, unit8, v);  /* |x - x^| to ~1e-16 relative: the 1.0001 covers it */
        miss8 = _mm512_fmadd_pd(gap, gap, miss8);
        const __m256i ints = _mm512_cvtpd_epi32(_mm512_add_pd(q, offset));  /* exact: integers in 1..255 */
        const __m128i bytes = _mm512_cvtepi32_epi8(_mm512_castsi256_si512(ints));  /* the low 8 lanes kept */
        memcpy(xq + d, &bytes, 8);
    }
    miss += _mm512_reduce_add_pd(miss8);
    for (int64_t d = wide; d < dim; d++) {
        double v = nearbyint((double)xr[d] * scale);
        v = v > Q8 ? Q8 : (v < -Q8 ? -Q8 : v);
        const double gap = (double)xr[d] - v * unit;
        miss += gap * gap;
        xq[d] = (uint8_t)(int)(v + 128.0);
    }
    for (int64_t d = dim; d < dim_pad; d++) xq[d] = 128;  /* zero after the offset; c is zero there too */
    const double norm = sqrt(sq);
    s->inv_scale = scale > 0.0 ? (float)(1.0 / (scale * (double)centroid_scale)) : 0.0f;
    s->err = (float)((norm * centroid_err + sqrt(miss) * centroid_max + 1e-6 * norm * centroid_max) * 1.0001);
    s->top = -INFINITY;
    s->count = s->overflow = 0;
}

/* One row's 16 scores (int32 sums less the offsets) against the row's threshold. */
TARGET static inline void scan_panel(__m512i sums, __m512i offset, __m512 bias, struct row_state *s,
                                     float *threshold, int64_t c0, int64_t c) {
    const __m512 exact_sums = _mm512_cvtepi32_ps(_mm512_sub_epi32(sums, offset));
    const __m512 v = _mm512_add_ps(_mm512_mul_ps(exact_sums, _mm512_set1_ps(s->inv_scale)), bias);
    __mmask16 hits = _mm512_cmp_ps_mask(v, _mm512_set1_ps(*threshold), _CMP_GE_OQ);
    if (!hits) return;
    float values[PANEL];
    _mm512_storeu_ps(values, v);
    push_hits(s, threshold, hits, values, c0, c);
}

/* Rows rb..rb+7 against the two panels at c0: uint8 rows (q + 128) and int8 centroids, 4 dimensions per step. */
VNNI_TILE(tile, uint8_t, int8_t, 4, _mm512_dpbusd_epi32)

/* x float32 [n, dim]; packed: the centroids times centroid_scale, rounded to int8, zero-padded to [c_pad, dim_pad]
 * (c_pad % 32 == 0, dim_pad % 4 == 0) and laid out as [c_pad / 16][dim_pad / 4][16][4] (panel, dimension quad,
 * centroid, quad member); every |c_ji| * centroid_scale <= 127. offsets int32 [c_pad]: 128 times each padded
 * centroid's sum of int8 components. centroid_err, centroid_max: E_c and C^ of the header. scan_bias float32
 * [c_pad]: added to each approximate score (0 or the bias; -inf on padding); bias float32 [c] or NULL: added to
 * exact scores. hints int64 [n] or NULL: a likely best column per row (-1: none; seed_row), which changes only the
 * speed. out int64 [n] (the argmax), best float32 [n] or NULL. Returns the number of exactly rescored columns, or -1
 * bad sizes, -2 out of memory, -3 no AVX-512 VNNI build. */
TARGET int64_t embedctl_nearest_i8(const float *x, int64_t n, int64_t dim, const int8_t *packed,
                                   const int32_t *offsets, int64_t c, int64_t c_pad, int64_t dim_pad,
                                   float centroid_scale, double centroid_err, double centroid_max, const float *cent,
                                   const float *scan_bias, const float *bias, const int64_t *hints, int64_t *out,
                                   float *best) {
    if (n < 0 || c < 1 || dim < 1 || c_pad < c || c_pad % (2 * PANEL) || dim_pad < dim || dim_pad % 4 ||
        dim_pad > 65536 || !(centroid_scale > 0.0f) || !(centroid_err >= 0.0) || !(centroid_max >= 0.0))
        return -1;
    const int64_t quads = dim_pad / 4;
    uint8_t *xq = calloc((size_t)SUPER_ROWS * (size_t)dim_pad, 1);
    struct row_state *state = malloc(SUPER_ROWS * sizeof *state);
    float threshold[SUPER_ROWS];
    if (!xq || !state) { free(xq); free(state); return -2; }
    int64_t rescored = 0;
    __m512i acc[ROWS][2];
    for (int64_t r0 = 0; r0 < n; r0 += SUPER_ROWS) {
        const int64_t rows = n - r0 < SUPER_ROWS ? n - r0 : SUPER_ROWS;
        const int64_t padded_rows = (rows + ROWS - 1) / ROWS * ROWS;
        for (int64_t i = 0; i < rows; i++) {
            quantize_row8(x + (r0 + i) * dim, dim, dim_pad, centroid_scale, centroid_err, centroid_max,
                          xq + i * dim_pad, &state[i]);
            threshold[i] = -INFINITY;
            if (hints)
                seed_row(&state[i], &threshold[i], x + (r0 + i) * dim, cent, bias, hints[r0 + i], c, dim);
        }
        memset(xq + rows * dim_pad, 128, (size_t)(padded_rows - rows) * (size_t)dim_pad);
        for (int64_t c0 = 0; c0 < c_pad; c0 += 2 * PANEL) {
            const int8_t *panel0 = packed + (c0 / PANEL) * quads * 4 * PANEL, *panel1 = panel0 + quads * 4 * PANEL;
            const __m512 bias0 = _mm512_loadu_ps(scan_bias + c0), bias1 = _mm512_loadu_ps(scan_bias + c0 + PANEL);
            const __m512i off0 = _mm512_loadu_si512((const void *)(offsets + c0));
            const __m512i off1 = _mm512_loadu_si512((const void *)(offsets + c0 + PANEL));
            for (int64_t rb = 0; rb < padded_rows; rb += ROWS) {
                tile(xq + rb * dim_pad, dim_pad, panel0, panel1, quads, acc);
                const int64_t last = rows - rb < ROWS ? rows - rb : ROWS;
                for (int64_t r = 0; r < last; r++) {
                    scan_panel(acc[r][0], off0, bias0, &state[rb + r], &threshold[rb + r], c0, c);
                    scan_panel(acc[r][1], off1, bias1, &state[rb + r], &threshold[rb + r], c0 + PANEL, c);
                }
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
