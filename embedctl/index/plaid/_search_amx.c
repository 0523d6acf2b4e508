/* A query's centroid scores on Intel AMX, part of the PLAID search kernels (setup.py builds it into
 * embedctl/index/plaid/_search_kernels with _search_kernels.c and _warp_kernels.c).
 *
 * out[c, q] = <centroids[c], Q[q]> as three bfloat16 tile products with float32 accumulators: each float32 value
 * v is split into hi = bf16(v) and lo = bf16(v - hi) (v - hi - lo is within 2^-17 |v|), and
 *     <c, q> ~ <c_hi, q_hi> + <c_hi, q_lo> + <c_lo, q_hi>
 * (the dropped <c_lo, q_lo> and the split's remainders: within ~3 * 2^-16 of |c_d q_d| per dimension; then the
 * float32 accumulators' roundings, as any float32 sum has: search_kernels.amx_err_bound). The centroids' halves are
 * split once per index (search_kernels.pack_bf16x2); the query's here, per call. The fp32 kernel
 * (embedctl_centroid_scores) runs one float32 fused multiply-add per product, 32 lanes x 2 ports a cycle at best:
 * on a 2-core AMX host one core took 0.95 ms for 16,384 centroids x 128 dims x 32 tokens where these tiles took
 * 0.51 (31 us per 1,000 centroids whether they sat in L2 or L3: the tile arithmetic's time, not the reads).
 * Tried and dropped: four sums (32 centroids x 32 tokens) with the operand tiles reloaded between the three
 * products, 0.68 ms: the reloads cost more than the longer dependency chains.
 */
#include "_amx_common.h" /* first: it defines _GNU_SOURCE (syscall) */

#include <stdlib.h>

#include "_search_common.h"

int embedctl_search_amx_ready(void);
int embedctl_centroid_scores_amx(const uint16_t *packed, int64_t num_c, int64_t dim_pad, const float *q, int64_t lq,
                                 int64_t dim, float *out, int nthreads);

#ifndef EMBEDCTL_AMX
int embedctl_search_amx_ready(void) { return 0; }
int embedctl_centroid_scores_amx(const uint16_t *packed, int64_t num_c, int64_t dim_pad, const float *q, int64_t lq,
                                 int64_t dim, float *out, int nthreads) {
    (void)packed; (void)num_c; (void)dim_pad; (void)q; (void)lq; (void)dim; (void)out; (void)nthreads;
    return -3;
}
#else

#define BLOCK 16 /* centroids per A tile, and the unit the threads split */

int embedctl_search_amx_ready(void) { return amx_ready_here(); }

/* The query's halves as B tiles: [n_tiles][k_tiles][16 dim pairs][16 tokens][2] bfloat16 each, zero past lq and
 * dim. */
static void pack_query(const float *q, int64_t lq, int64_t dim, int64_t dim_pad, int64_t n_tiles, uint16_t *q_hi,
                       uint16_t *q_lo) {
    const int64_t k_tiles = dim_pad / 32;
    for (int64_t n = 0; n < n_tiles * 16; n++)
        for (int64_t d = 0; d < dim_pad; d++) {
            const float v = n < lq && d < dim ? q[n * dim + d] : 0.0f;
            const uint16_t hi = to_bf16(v);
            const int64_t at = (((n / 16) * k_tiles + d / 32) * 16 + (d % 32) / 2) * 32 + (n % 16) * 2 + d % 2;
            q_hi[at] = hi;
            q_lo[at] = to_bf16(v - from_bf16(hi));
        }
}

/* A tile of scores stored in a 16 x 16 buffer: its rows and columns that exist, into out [num_c, lq]. */
static void copy_partial(const float *buf, float *out, int64_t c, int64_t num_c, int64_t n0, int64_t lq) {
    for (int64_t i = 0; i < 16 && c + i < num_c; i++)
        for (int64_t j = 0; j < 16 && n0 + j < lq; j++) out[(c + i) * lq + n0 + j] = buf[i * 16 + j];
}

/* Tile t (16 centroids from c x 16 tokens from n0) into out: straight when whole, else through buf (a macro: the
 * tile number must be an immediate). */
#define STORE_TILE(t, n0)                                                                         \
    do {                                                                                          \
        if (c + 16 <= num_c && (n0) + 16 <= lq) {                                                 \
            _tile_stored(t, out + c * lq + (n0), lq * 4);                                         \
        } else {                                                                                  \
            _tile_stored(t, buf, 64);                                                             \
            copy_partial(buf, out, c, num_c, (n0), lq);                                           \
        }                                                                                         \
    } while (0)

/* Centroids [c0, c1) (c0 a multiple of 16): tiles 2 / 3 the centroids' hi / lo halves, 4 / 5 and 6 / 7 two token
 * tiles' hi / lo, 0 and 1 their sums. packed: [c_pad][2][dim_pad] bfloat16 (each centroid's hi then lo). */
__attribute__((target("amx-tile,amx-bf16")))
static void scores_range(const uint16_t *packed, int64_t c0, int64_t c1, int64_t num_c, int64_t dim_pad,
                         const uint16_t *q_hi, const uint16_t *q_lo, int64_t n_tiles, int64_t lq, float *out) {
    struct tile_config cfg;
    full_tiles(&cfg);
    _tile_loadconfig(&cfg);
    const int64_t k_tiles = dim_pad / 32, stride = 4 * dim_pad; /* bytes from one centroid's hi to the next's */
    float buf[256] __attribute__((aligned(64)));
    for (int64_t c = c0; c < c1; c += BLOCK) {
        const uint16_t *a = packed + c * 2 * dim_pad;
        for (int64_t j = 0; j < n_tiles; j += 2) {
            const int two = j + 1 < n_tiles;
            const uint16_t *bh = q_hi + j * k_tiles * 512, *bl = q_lo + j * k_tiles * 512;
            _tile_zero(0);
            _tile_zero(1);
            if (two) {
                for (int64_t k = 0; k < k_tiles; k++) {
                    _tile_loadd(2, a + k * 32, stride);
                    _tile_loadd(3, a + dim_pad + k * 32, stride);
                    _tile_loadd(4, bh + k * 512, 64);
                    _tile_loadd(5, bl + k * 512, 64);
                    _tile_loadd(6, bh + (k_tiles + k) * 512, 64);
                    _tile_loadd(7, bl + (k_tiles + k) * 512, 64);
                    /* the two sums' products alternate: each waits on its own previous one, not the other's */
                    _tile_dpbf16ps(0, 3, 4); /* lo x hi */
                    _tile_dpbf16ps(1, 3, 6);
                    _tile_dpbf16ps(0, 2, 5); /* hi x lo */
                    _tile_dpbf16ps(1, 2, 7);
                    _tile_dpbf16ps(0, 2, 4); /* hi x hi */
                    _tile_dpbf16ps(1, 2, 6);
                }
            } else {
                for (int64_t k = 0; k < k_tiles; k++) {
                    _tile_loadd(2, a + k * 32, stride);
                    _tile_loadd(3, a + dim_pad + k * 32, stride);
                    _tile_loadd(4, bh + k * 512, 64);
                    _tile_loadd(5, bl + k * 512, 64);
                    _tile_dpbf16ps(0, 3, 4);
                    _tile_dpbf16ps(0, 2, 5);
                    _tile_dpbf16ps(0, 2, 4);
                }
            }
            STORE_TILE(0, j * 16);
            if (two) STORE_TILE(1, (j + 1) * 16);
        }
    }
    _tile_release();
}

/* out float32 [num_c, lq]; packed from search_kernels.pack_bf16x2 ([c_pad][2][dim_pad], c_pad >= num_c rounded up
 * to 16, dim_pad >= dim a multiple of 32, zero padding); q float32 [lq, dim]. nthreads > 1: the centroids split in
 * ranges of whole blocks, one thread each (OpenMP; each thread configures its own tiles); the same bits. Returns
 * 0, or -1 bad sizes, -2 out of memory, -3 no AMX here. */
int embedctl_centroid_scores_amx(const uint16_t *packed, int64_t num_c, int64_t dim_pad, const float *q, int64_t lq,
                                 int64_t dim, float *out, int nthreads) {
    if (num_c < 1 || lq < 1 || lq > MAX_LQ || dim < 1 || dim_pad < dim || dim_pad % 32) return -1;
    static int ready = -1; /* asked once (cpuid is a VM exit under a hypervisor); a race only asks twice */
    if (ready < 0) ready = amx_ready_here();
    if (!ready) return -3;
    const int64_t n_tiles = (lq + 15) / 16, tile_elems = n_tiles * (dim_pad / 32) * 512;
    uint16_t *q_hi = aligned_alloc(64, (size_t)(2 * tile_elems) * sizeof *q_hi);
    if (!q_hi) return -2;
    uint16_t *q_lo = q_hi + tile_elems;
    pack_query(q, lq, dim, dim_pad, n_tiles, q_hi, q_lo);
    const int64_t blocks = (num_c + BLOCK - 1) / BLOCK;
    const int64_t parts = OMP_HAVE && nthreads > 1 ? (nthreads < blocks ? nthreads : blocks) : 1;
    if (parts <= 1) {
        scores_range(packed, 0, num_c, num_c, dim_pad, q_hi, q_lo, n_tiles, lq, out);
    } else {
        OMP_PRAGMA(omp parallel for num_threads(parts) schedule(static, 1))
        for (int64_t p = 0; p < parts; p++) {
            const int64_t lo = BLOCK * (p * blocks / parts), hi = BLOCK * ((p + 1) * blocks / parts);
            scores_range(packed, lo, hi < num_c ? hi : num_c, num_c, dim_pad, q_hi, q_lo, n_tiles, lq, out);
        }
    }
    free(q_hi);
    return 0;
}
#endif
