/* Fused nearest-centroid search on 16-bit integer products with AVX-512 VNNI (`vpdpwssd`), part of the
 * optional PLAID indexing kernels (setup.py builds it into embedctl/index/plaid/_kernels with _kernels.c).
 *
 * The same arithmetic as _kernels_i16.c (the AVX2 kernel): the same int16 rounding of rows and centroids
 * (_i16_quantize.h), exact int32 sums, the same candidate scan and exact double-precision rescoring
 * (_nearest_scan.h), so it keeps the same candidates and returns the same argmax and best scores. What differs
 * is the width: one `vpdpwssd` does 32 int16 multiply-adds into 16 int32 lanes, where AVX2 needs two
 * instructions (`vpmaddwd`, `vpaddd`) for 16. A register tile is 8 rows x 32 centroids (16 accumulators).
 *
 * The packed centroids are the AVX2 kernel's layout ([c_pad / 16][dim_pad / 2][16][2]); this kernel takes two
 * 16-centroid panels at a time, so c_pad must be a multiple of 32 (kernels.pack_for_i16 pads to 32).
 *
 * Compiled for x86-64 with gcc >= 8 or clang >= 8 (function-level target attribute); embedctl_vnni_ready() says
 * at run time whether the CPU has AVX-512 F/BW/VNNI. Elsewhere both entry points exist and report
 * "unavailable".
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if !defined(EMBEDCTL_PORTABLE) && defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 8) || \
                            (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 8))
#define EMBEDCTL_VNNI 1
#include <immintrin.h>
#endif

int64_t embedctl_nearest_vnni(const float *x, int64_t n, int64_t dim, const int16_t *packed, int64_t c,
                              int64_t c_pad, int64_t dim_pad, float centroid_scale, const float *cent,
                              const float *scan_bias, const float *bias, int64_t *out, float *best);
int embedctl_vnni_ready(void);

#ifndef EMBEDCTL_VNNI
int embedctl_vnni_ready(void) { return 0; }
int64_t embedctl_nearest_vnni(const float *x, int64_t n, int64_t dim, const int16_t *packed, int64_t c,
                              int64_t c_pad, int64_t dim_pad, float centroid_scale, const float *cent,
                              const float *scan_bias, const float *bias, int64_t *out, float *best) {
    (void)x; (void)n; (void)dim; (void)packed; (void)c; (void)c_pad; (void)dim_pad; (void)centroid_scale;
    (void)cent; (void)scan_bias; (void)bias; (void)out; (void)best;
    return -3;
}
#else

#define ROWS 8           /* rows per register tile: 8 x 32 int32 sums in 16 registers */
#define PANEL 16         /* centroids per packed panel (one register of int32 sums) */
#define SUPER_ROWS 64    /* rows sharing one pass over the centroids (16 KB of int16 rows at D = 128) */
#include "_nearest_scan.h"
#include "_vnni_tile.h"
#include "_i16_quantize.h"

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))

int embedctl_vnni_ready(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
}

/* One row's 16 scores (a register of int32 sums) against the row's threshold. */
TARGET static inline void scan_panel(__m512i sums, __m512 bias, struct row_state *s, float *threshold, int64_t c0,
                                     int64_t c) {
    /* a product then a sum, rounded as in the AVX2 kernel: the same candidates */
    const __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sums), _mm512_set1_ps(s->inv_scale)), bias);
    __mmask16 hits = _mm512_cmp_ps_mask(v, _mm512_set1_ps(*threshold), _CMP_GE_OQ);
    if (!hits) return;
    float values[PANEL];
    _mm512_storeu_ps(values, v);
    push_hits(s, threshold, hits, values, c0, c);
}

/* Rows rb..rb+7 of the block against the two panels at c0: int16 rows and centroids, 2 dimensions per step. */
VNNI_TILE(tile, int16_t, int16_t, 2, _mm512_dpwssd_epi32)

/* Arguments as embedctl_nearest_i16 (_kernels_i16.c), with c_pad % 32 == 0. Returns the number of exactly
 * rescored columns, or -1 bad sizes, -2 out of memory, -3 no AVX-512 VNNI build. */
TARGET int64_t embedctl_nearest_vnni(const float *x, int64_t n, int64_t dim, const int16_t *packed, int64_t c,
                                     int64_t c_pad, int64_t dim_pad, float centroid_scale, const float *cent,
                                     const float *scan_bias, const float *bias, int64_t *out, float *best) {
    if (n < 0 || c < 1 || dim < 1 || c_pad < c || c_pad % (2 * PANEL) || dim_pad < dim || dim_pad % 2 ||
        !(centroid_scale > 0.0f))
        return -1;
    const int64_t pairs = dim_pad / 2;
    const double cmax = QMAX / (double)centroid_scale;
    int16_t *xq = calloc((size_t)SUPER_ROWS * (size_t)dim_pad, sizeof *xq);
    struct row_state *state = malloc(SUPER_ROWS * sizeof *state);
    float threshold[SUPER_ROWS];
    if (!xq || !state) { free(xq); free(state); return -2; }
    int64_t rescored = 0;
    __m512i acc[ROWS][2];
    for (int64_t r0 = 0; r0 < n; r0 += SUPER_ROWS) {
        const int64_t rows = n - r0 < SUPER_ROWS ? n - r0 : SUPER_ROWS;
        const int64_t padded_rows = (rows + ROWS - 1) / ROWS * ROWS;
        for (int64_t i = 0; i < rows; i++) {
            quantize_row(x + (r0 + i) * dim, dim, dim_pad, cmax, centroid_scale, xq + i * dim_pad, &state[i]);
            threshold[i] = -INFINITY;
        }
        memset(xq + rows * dim_pad, 0, (size_t)(padded_rows - rows) * (size_t)dim_pad * sizeof *xq);
        for (int64_t c0 = 0; c0 < c_pad; c0 += 2 * PANEL) {
            const int16_t *panel0 = packed + (c0 / PANEL) * pairs * 2 * PANEL, *panel1 = panel0 + pairs * 2 * PANEL;
            const __m512 bias0 = _mm512_loadu_ps(scan_bias + c0), bias1 = _mm512_loadu_ps(scan_bias + c0 + PANEL);
            for (int64_t rb = 0; rb < padded_rows; rb += ROWS) {
                tile(xq + rb * dim_pad, dim_pad, panel0, panel1, pairs, acc);
                const int64_t last = rows - rb < ROWS ? rows - rb : ROWS;
                for (int64_t r = 0; r < last; r++) {
                    scan_panel(acc[r][0], bias0, &state[rb + r], &threshold[rb + r], c0, c);
                    scan_panel(acc[r][1], bias1, &state[rb + r], &threshold[rb + r], c0 + PANEL, c);
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
