/* Fused nearest-centroid search on Intel AMX (bfloat16 tiles, float32 accumulators), part of the optional
 * PLAID indexing kernels (setup.py builds it into embedctl/index/plaid/_kernels with _kernels.c).
 *
 * Without fusion the bfloat16 score matrix [n, C] goes through memory twice (written by the GEMM, read by the
 * row maximum): 32 KB per vector at C=8192, more time than the arithmetic. Here each 32 x 32 block of scores
 * lives only in tile registers and a 4 KB buffer: the GEMM and the candidate scan run block by block, and
 * the few candidates within the rounding bound of a row's best are rescored exactly in double precision.
 * The answer is the exact argmax (the first column on ties), as the reference backend computes it.
 *
 * Compiled only for x86-64 Linux with gcc >= 11 or clang >= 12; embedctl_amx_ready() says at run time whether
 * the CPU has AMX-BF16 and the kernel granted this process the tile state. Elsewhere both entry points exist
 * and report "unavailable".
 */
#include "_amx_common.h" /* first: it defines _GNU_SOURCE (syscall) */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int64_t embedctl_nearest_amx(const float *x, int64_t n, int64_t dim, const uint16_t *packed, int64_t c,
                             int64_t c_pad, int64_t dim_pad, const float *cent, const float *scan_bias,
                             const float *bias, const float *err, const int64_t *hints, int64_t *out, float *best);
int embedctl_amx_ready(void);

#ifndef EMBEDCTL_AMX
int embedctl_amx_ready(void) { return 0; }
int64_t embedctl_nearest_amx(const float *x, int64_t n, int64_t dim, const uint16_t *packed, int64_t c,
                             int64_t c_pad, int64_t dim_pad, const float *cent, const float *scan_bias,
                             const float *bias, const float *err, const int64_t *hints, int64_t *out, float *best) {
    (void)x; (void)n; (void)dim; (void)packed; (void)c; (void)c_pad; (void)dim_pad; (void)cent;
    (void)scan_bias; (void)bias; (void)err; (void)hints; (void)out; (void)best;
    return -3;
}
#else

#define ROWS 32          /* rows per tile block: two A tiles of 16 */
#define COLS 32          /* centroids per tile block: two B tiles of 16 */
#define SUPER_ROWS 512   /* rows sharing one pass over the centroids (their state stays in cache) */
#define PANEL 512        /* centroids whose tiles stay in L2 while every row block of a super-block meets them */
#include "_nearest_scan.h"

int embedctl_amx_ready(void) { return amx_ready_once(); }

/* The 32 x 32 float32 scores of 32 rows (A: bfloat16 rows of dim_pad, each on its own cache line) against 32
 * centroids (b: their two B tiles of 16, k_tiles each) into scores [32][32]. */
__attribute__((target("amx-tile,amx-bf16")))
static inline void block_scores(const uint16_t *a, int64_t dim_pad, const uint16_t *b, int64_t k_tiles, float *scores) {
    const uint16_t *b1 = b + k_tiles * 512;
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (int64_t k = 0; k < k_tiles; k++) {
        _tile_loadd(4, a + k * 32, dim_pad * 2);
        _tile_loadd(5, a + 16 * dim_pad + k * 32, dim_pad * 2);
        _tile_loadd(6, b + k * 512, 64);
        _tile_loadd(7, b1 + k * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, scores, COLS * 4);
    _tile_stored(1, scores + 16, COLS * 4);
    _tile_stored(2, scores + 16 * COLS, COLS * 4);
    _tile_stored(3, scores + 16 * COLS + 16, COLS * 4);
}

/* x float32 [n, dim]; packed: centroids in bfloat16, zero-padded to [c_pad, dim_pad] (c_pad % 32 == 0,
 * dim_pad % 32 == 0) and laid out for the B tiles: [c_pad / 16][dim_pad / 32][16 dim pairs][16 centroids][2];
 * scan_bias float32 [c_pad]: added to each float32 tile score before the scan (0 or the bias; -inf on padding);
 * bias float32 [c] or NULL: added to exact scores; err float32 [n]: bound on |tile score - <x, c>|; hints int64
 * [n] or NULL: a likely best column per row (-1: none; seed_row), which changes only the speed.
 *
 * Blocking: SUPER_ROWS rows at a time, the centroids a PANEL at a time (256 KB of bfloat16 tiles at dim 128), each
 * 32-row block meeting the panel's 16 column blocks while its A tiles stay in L1. With 128 rows meeting all the
 * centroids column block by column block, the 2 MB of tiles (C = 8,192) streamed from L3 again for every 128 rows:
 * 16 KB a row. On a 2-core AMX host, one core, 32,768 SciFact vectors against 8,192 centroids: 2.1-2.2 us a row
 * against 2.3-2.8 (that layout's time moved with the host's load on its L3); 200,000 synthetic vectors on 2 threads
 * (bench/plaid_backends.py): 0.230 s against 0.261 (bench/results/x86_64-amx-2c/plaid_backends.json). A row still
 * meets its columns in order, so its pushes and its answer are the same.
 * Returns the number of exactly rescored columns, or -1 bad sizes, -2 out of memory, -3 no AMX. */
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw")))
int64_t embedctl_nearest_amx(const float *x, int64_t n, int64_t dim, const uint16_t *packed, int64_t c,
                             int64_t c_pad, int64_t dim_pad, const float *cent, const float *scan_bias,
                             const float *bias, const float *err, const int64_t *hints, int64_t *out, float *best) {
    if (n < 0 || c < 1 || dim < 1 || c_pad < c || c_pad % COLS || dim_pad < dim || dim_pad % 32) return -1;
    const int64_t k_tiles = dim_pad / 32;
    /* each A tile row (32 bfloat16) on one cache line */
    uint16_t *xb = aligned_alloc(64, (size_t)SUPER_ROWS * (size_t)dim_pad * sizeof *xb);
    struct row_state *state = malloc(SUPER_ROWS * sizeof *state);
    float threshold[SUPER_ROWS];
    if (!xb || !state) { free(xb); free(state); return -2; }
    struct tile_config cfg;
    full_tiles(&cfg);
    _tile_loadconfig(&cfg);
    float scores[ROWS * COLS] __attribute__((aligned(64)));
    int64_t rescored = 0;
    for (int64_t r0 = 0; r0 < n; r0 += SUPER_ROWS) {
        const int64_t rows = n - r0 < SUPER_ROWS ? n - r0 : SUPER_ROWS;
        const int64_t padded_rows = (rows + ROWS - 1) / ROWS * ROWS;
        memset(xb, 0, (size_t)padded_rows * (size_t)dim_pad * sizeof *xb);
        for (int64_t i = 0; i < rows; i++) {
            for (int64_t d = 0; d < dim; d++) xb[i * dim_pad + d] = to_bf16(x[(r0 + i) * dim + d]);
            state[i].top = -INFINITY;
            threshold[i] = -INFINITY;
            state[i].err = err[r0 + i];
            state[i].count = state[i].overflow = 0;
            if (hints) seed_row(&state[i], &threshold[i], x + (r0 + i) * dim, cent, bias, hints[r0 + i], c, dim);
        }
        for (int64_t p0 = 0; p0 < c_pad; p0 += PANEL) {
            const int64_t p1 = p0 + PANEL < c_pad ? p0 + PANEL : c_pad;
            for (int64_t rb = 0; rb < padded_rows; rb += ROWS) {
                const int64_t last = rows - rb < ROWS ? rows - rb : ROWS;
                for (int64_t c0 = p0; c0 < p1; c0 += COLS) {
                    block_scores(xb + rb * dim_pad, dim_pad, packed + (c0 / 16) * k_tiles * 512, k_tiles, scores);
                    const __m512 bias0 = _mm512_loadu_ps(scan_bias + c0), bias1 = _mm512_loadu_ps(scan_bias + c0 + 16);
                    for (int64_t i = 0; i < last; i++) {
                        const __m512 t = _mm512_set1_ps(threshold[rb + i]);
                        const __m512 v0 = _mm512_add_ps(_mm512_load_ps(scores + i * COLS), bias0);
                        const __m512 v1 = _mm512_add_ps(_mm512_load_ps(scores + i * COLS + 16), bias1);
                        uint32_t hits = (uint32_t)_mm512_cmp_ps_mask(v0, t, _CMP_GE_OQ) |
                                        ((uint32_t)_mm512_cmp_ps_mask(v1, t, _CMP_GE_OQ) << 16);
                        if (!hits) continue;
                        float v[COLS] __attribute__((aligned(64)));
                        _mm512_store_ps(v, v0);
                        _mm512_store_ps(v + 16, v1);
                        push_hits(&state[rb + i], &threshold[rb + i], hits, v, c0, c);
                    }
                }
            }
        }
        for (int64_t i = 0; i < rows; i++)
            rescored += finish_row(&state[i], threshold[i], x + (r0 + i) * dim, cent, bias, c, dim, &out[r0 + i],
                                   best ? &best[r0 + i] : NULL);
    }
    _tile_release();
    free(xb);
    free(state);
    return rescored;
}
#endif
