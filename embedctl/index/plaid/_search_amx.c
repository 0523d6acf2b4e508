/* PLAID search on Intel AMX, part of the PLAID search kernels (setup.py builds it into
 * embedctl/index/plaid/_search_kernels with _search_kernels.c and _warp_kernels.c): a query's centroid scores
 * (embedctl_centroid_scores_amx) and the final MaxSim's residual parts (embedctl_maxsim_amx_docs, further down).
 *
 * out[c, q] = <centroids[c], Q[q]> as three bfloat16 tile products with float32 accumulators: each float32 value
 * v is split into hi = bf16(v) and lo = bf16(v - hi) (v - hi - lo is within 2^-16 |v|), and
 *     <c, q> ~ <c_hi, q_hi> + <c_hi, q_lo> + <c_lo, q_hi>
 * (the dropped <c_lo, q_lo> and the split's remainders: within ~3 * 2^-16 of |c_d q_d| per dimension; then the
 * float32 accumulators' roundings, as any float32 sum has: search_amx.amx_err_bound). The centroids' halves are
 * split once per index (search_amx.pack_bf16x2); the query's here, per call. Centroids that are bfloat16 values
 * (k-means rounds them so: kmeans.train_centroids) are packed without their lo (halves 1): <c_hi, q_hi> +
 * <c_hi, q_lo> from 2 bytes a value instead of 4, the same bits as with a lo of zeros; one core of a 2-core AMX
 * host, 16,384 x 128 centroids x 32 tokens: 0.31 ms against 0.65 (a /tmp harness, the packings alternating). The fp32 kernel
 * (embedctl_centroid_scores) runs one float32 fused multiply-add per product, 32 lanes x 2 ports a cycle at best:
 * on a 2-core AMX host one core took 0.95 ms for 16,384 centroids x 128 dims x 32 tokens where these tiles took
 * 0.51: 24,576 tile products (~5.3 ns each, measured alone: their issue rate, not their latency, whatever the
 * number of independent sums) and 8,192 tile loads of the centroids' rows (~38 ns each from L3 on that host, ~3
 * from L1). Tried and dropped (a /tmp harness of variants, one core; the fair comparisons interleave the calls in
 * random order): four sums (32 centroids x 32 tokens) with the operand tiles reloaded between the three
 * products, 0.68 ms; the rows of two k loaded before their products, the same time (0.99-1.02x); software
 * prefetch of the rows 1-4 blocks ahead, no better with the centroids in L3 (but kept for when they are not:
 * scores_range); the halves made on the fly from the index's float16 centroids (half the bytes to read, the same
 * bits), 1.14-1.19x the time with the centroids in L3 and 0.94-1.09x with the caches flushed between calls.
 */
#include "_amx_common.h" /* first: it defines _GNU_SOURCE (syscall) */

#include <stdlib.h>

#include "_search_common.h"

int embedctl_search_amx_ready(void);
int embedctl_centroid_scores_amx(const uint16_t *packed, int64_t num_c, int64_t halves, int64_t dim_pad,
                                 const float *q, int64_t lq, int64_t dim, float *out, int nthreads);
int embedctl_centroid_scores_amx_max(const uint16_t *packed, int64_t num_c, int64_t halves, int64_t dim_pad,
                                     const float *q, int64_t lq, int64_t dim, float *out, float *block_max,
                                     int nthreads);
int embedctl_maxsim_amx_docs(const uint16_t *split, int64_t halves, int64_t per, int64_t nbytes,
                             const uint8_t *packed, const float *st_t, int64_t num_c, const float *q, int64_t lq,
                             const int32_t *codes, const void *norms, int norms_f16, const int64_t *doc_offsets,
                             const int64_t *pids, int64_t num_docs, float *out, int nthreads);

#ifndef EMBEDCTL_AMX
int embedctl_search_amx_ready(void) { return 0; }
int embedctl_centroid_scores_amx(const uint16_t *packed, int64_t num_c, int64_t halves, int64_t dim_pad,
                                 const float *q, int64_t lq, int64_t dim, float *out, int nthreads) {
    (void)packed; (void)num_c; (void)halves; (void)dim_pad; (void)q; (void)lq; (void)dim; (void)out; (void)nthreads;
    return -3;
}
int embedctl_centroid_scores_amx_max(const uint16_t *packed, int64_t num_c, int64_t halves, int64_t dim_pad,
                                     const float *q, int64_t lq, int64_t dim, float *out, float *block_max,
                                     int nthreads) {
    (void)block_max;
    return embedctl_centroid_scores_amx(packed, num_c, halves, dim_pad, q, lq, dim, out, nthreads);
}
int embedctl_maxsim_amx_docs(const uint16_t *split, int64_t halves, int64_t per, int64_t nbytes,
                             const uint8_t *packed, const float *st_t, int64_t num_c, const float *q, int64_t lq,
                             const int32_t *codes, const void *norms, int norms_f16, const int64_t *doc_offsets,
                             const int64_t *pids, int64_t num_docs, float *out, int nthreads) {
    (void)split; (void)halves; (void)per; (void)nbytes; (void)packed; (void)st_t; (void)num_c; (void)q; (void)lq;
    (void)codes; (void)norms; (void)norms_f16; (void)doc_offsets; (void)pids; (void)num_docs; (void)out; (void)nthreads;
    return -4;
}
#else

#define BLOCK 16 /* centroids per A tile, and the unit the threads split */
#define PREFETCH_AHEAD 2 /* blocks of centroids: scores_range */

int embedctl_search_amx_ready(void) { return amx_ready_once(); }

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

/* Elements of one half of a query's B tiles (pack_query), and both halves in one buffer (hi, then lo at
 * hi + query_elems), or NULL when out of memory. */
static int64_t query_elems(int64_t lq, int64_t dim_pad) { return (lq + 15) / 16 * (dim_pad / 32) * 512; }

static uint16_t *query_tiles(const float *q, int64_t lq, int64_t dim, int64_t dim_pad) {
    const int64_t elems = query_elems(lq, dim_pad);
    uint16_t *q_hi = aligned_alloc(64, (size_t)(2 * elems) * sizeof *q_hi);
    if (q_hi) pack_query(q, lq, dim, dim_pad, (lq + 15) / 16, q_hi, q_hi + elems);
    return q_hi;
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

/* Tiles 0 (and 1 when two) = the sums over k of 16 rows (a: [16][halves][dim_pad] bfloat16, each row's hi then,
 * when halves is 2, its lo) against one (two) token tiles (bh / bl: their hi / lo B tiles, k_tiles each):
 * lo x hi + hi x lo + hi x hi per k, in that order; with one half (centroids that are bfloat16 values, lo all 0)
 * hi x lo + hi x hi, the same bits (the lo x hi product it skips adds +0). Tiles 2 / 3 hold the rows' hi / lo,
 * 4-7 the token tiles'. */
__attribute__((target("amx-tile,amx-bf16")))
static inline void pair_sums(const uint16_t *a, int64_t halves, int64_t dim_pad, const uint16_t *bh,
                             const uint16_t *bl, int64_t k_tiles, int two) {
    const int64_t stride = 2 * halves * dim_pad; /* bytes from one row's hi to the next's */
    _tile_zero(0);
    _tile_zero(1);
    if (halves == 1) {
        for (int64_t k = 0; k < k_tiles; k++) {
            _tile_loadd(2, a + k * 32, stride);
            _tile_loadd(4, bh + k * 512, 64);
            _tile_loadd(5, bl + k * 512, 64);
            _tile_dpbf16ps(0, 2, 5); /* hi x lo */
            _tile_dpbf16ps(0, 2, 4); /* hi x hi */
            if (two) {
                _tile_loadd(6, bh + (k_tiles + k) * 512, 64);
                _tile_loadd(7, bl + (k_tiles + k) * 512, 64);
                _tile_dpbf16ps(1, 2, 7);
                _tile_dpbf16ps(1, 2, 6);
            }
        }
        return;
    }
    if (two) {
        for (int64_t k = 0; k < k_tiles; k++) {
            _tile_loadd(2, a + k * 32, stride);
            _tile_loadd(3, a + dim_pad + k * 32, stride);
            _tile_loadd(4, bh + k * 512, 64);
            _tile_loadd(5, bl + k * 512, 64);
            _tile_loadd(6, bh + (k_tiles + k) * 512, 64);
            _tile_loadd(7, bl + (k_tiles + k) * 512, 64);
            /* the two sums' products alternate (no faster than one sum's three, then the other's: measured alone, a
             * tile product issues every ~5.3 ns whatever it waits on) */
            _tile_dpbf16ps(0, 3, 4); /* lo x hi */
            _tile_dpbf16ps(1, 3, 6);
            _tile_dpbf16ps(0, 2, 5); /* hi x lo */
            _tile_dpbf16ps(1, 2, 7);
            _tile_dpbf16ps(0, 2, 4); /* hi x hi */
            _tile_dpbf16ps(1, 2, 6);
        }
        return;
    }
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

/* Row block c / 16 of block_max [ceil(num_c / 16), lq]: per token, the largest of out's rows c .. c + 15 (those
 * that exist), read back while they are in L1 (embedctl_col_top_blocks' gate: a fused pass instead of another
 * read of the whole [num_c, lq] matrix). max(row, acc) from -inf keeps acc when a row is NaN (maxps returns its
 * second operand then): a block's maximum is that of its values other than NaN (-inf when all are NaN). */
__attribute__((target("avx512f")))
static void block_maxima(const float *out, int64_t c, int64_t num_c, int64_t lq, float *block_max) {
    const int64_t rows = num_c - c < 16 ? num_c - c : 16;
    for (int64_t n0 = 0; n0 < lq; n0 += 16) {
        const __mmask16 k = lq - n0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (lq - n0)) - 1);
        __m512 acc = _mm512_set1_ps(-INFINITY);
        for (int64_t i = 0; i < rows; i++) acc = _mm512_max_ps(_mm512_maskz_loadu_ps(k, out + (c + i) * lq + n0), acc);
        _mm512_mask_storeu_ps(block_max + (c / 16) * lq + n0, k, acc);
    }
}

/* Centroids [c0, c1) (c0 a multiple of 16); packed: [c_pad][halves][dim_pad] bfloat16 (each centroid's hi, then
 * its lo when halves is 2).
 * block_max (or NULL): each block's row of maxima (block_maxima) once its scores are stored. */
__attribute__((target("amx-tile,amx-bf16")))
static void scores_range(const uint16_t *packed, int64_t c0, int64_t c1, int64_t num_c, int64_t halves,
                         int64_t dim_pad, const uint16_t *q_hi, const uint16_t *q_lo, int64_t n_tiles, int64_t lq,
                         float *out, float *block_max) {
    struct tile_config cfg;
    full_tiles(&cfg);
    _tile_loadconfig(&cfg);
    const int64_t k_tiles = dim_pad / 32;
    float buf[256] __attribute__((aligned(64)));
    for (int64_t c = c0; c < c1; c += BLOCK) {
        /* the rows PREFETCH_AHEAD blocks on, requested now: the same time with the centroids in L3, but a query's
         * encoder (~21 MB of bfloat16 weights) leaves them out of this host's share of L3 (measured: the scores
         * take 0.6 ms after a sweep of up to 32 MB, 1.2-1.7 ms after 48-128 MB), and from memory the tile loads
         * alone wait on each row: one core of a 2-core AMX host, 16,384 x 128 centroids x 32 tokens after a 64 MB
         * sweep, 0.98-1.02 ms against 1.37-1.40 (2 blocks ahead; 4 no better, 8 worse); a SciFact query end to
         * end (text in, ids out, one thread) 0.93-0.97x (/tmp harnesses, the trees alternating) */
        if (c + PREFETCH_AHEAD * BLOCK < c1) {
            const char *ahead = (const char *)(packed + (c + PREFETCH_AHEAD * BLOCK) * halves * dim_pad);
            for (int64_t off = 0; off < BLOCK * 2 * halves * dim_pad; off += 64) __builtin_prefetch(ahead + off);
        }
        for (int64_t j = 0; j < n_tiles; j += 2) {
            const int two = j + 1 < n_tiles;
            pair_sums(packed + c * halves * dim_pad, halves, dim_pad, q_hi + j * k_tiles * 512,
                      q_lo + j * k_tiles * 512, k_tiles, two);
            STORE_TILE(0, j * 16);
            if (two) STORE_TILE(1, (j + 1) * 16);
        }
        if (block_max) block_maxima(out, c, num_c, lq, block_max);
    }
    _tile_release();
}

/* out float32 [num_c, lq]; packed from search_amx.pack_bf16x2 ([c_pad][halves][dim_pad], halves 2, or 1 where
 * the centroids are bfloat16 values; c_pad >= num_c rounded up to 16, dim_pad >= dim a multiple of 32, zero
 * padding); q float32 [lq, dim]. nthreads > 1: the centroids split in
 * ranges of whole blocks, one thread each (OpenMP; each thread configures its own tiles); the same bits. Returns
 * 0, or -1 bad sizes, -2 out of memory, -3 no AMX here. */
int embedctl_centroid_scores_amx(const uint16_t *packed, int64_t num_c, int64_t halves, int64_t dim_pad,
                                 const float *q, int64_t lq, int64_t dim, float *out, int nthreads) {
    return embedctl_centroid_scores_amx_max(packed, num_c, halves, dim_pad, q, lq, dim, out, NULL, nthreads);
}

/* embedctl_centroid_scores_amx, and (block_max not NULL) the maxima of out's blocks of 16 rows, float32
 * [ceil(num_c / 16), lq] (block_maxima): what embedctl_col_top_blocks selects each token's best cells from. */
int embedctl_centroid_scores_amx_max(const uint16_t *packed, int64_t num_c, int64_t halves, int64_t dim_pad,
                                     const float *q, int64_t lq, int64_t dim, float *out, float *block_max,
                                     int nthreads) {
    if (halves < 1 || halves > 2 || num_c < 1 || lq < 1 || lq > MAX_LQ || dim < 1 || dim_pad < dim || dim_pad % 32)
        return -1;
    if (!amx_ready_once()) return -3;
    uint16_t *q_hi = query_tiles(q, lq, dim, dim_pad);
    if (!q_hi) return -2;
    const uint16_t *q_lo = q_hi + query_elems(lq, dim_pad);
    const int64_t n_tiles = (lq + 15) / 16;
    const int64_t blocks = (num_c + BLOCK - 1) / BLOCK;
    const int64_t parts = OMP_HAVE && nthreads > 1 ? (nthreads < blocks ? nthreads : blocks) : 1;
    if (parts <= 1) {
        scores_range(packed, 0, num_c, num_c, halves, dim_pad, q_hi, q_lo, n_tiles, lq, out, block_max);
    } else {
        OMP_PRAGMA(omp parallel for num_threads(parts) schedule(static, 1))
        for (int64_t p = 0; p < parts; p++) {
            const int64_t lo = BLOCK * (p * blocks / parts), hi = BLOCK * ((p + 1) * blocks / parts);
            scores_range(packed, lo, hi < num_c ? hi : num_c, num_c, halves, dim_pad, q_hi, q_lo, n_tiles, lq,
                         out, block_max);
        }
    }
    free(q_hi);
    return 0;
}
/* The residual parts of a query's token similarities on AMX tiles, for the final MaxSim (search.precision fp16 on
 * a CPU with AMX): each document vector's residual r is decoded from its packed bytes straight into bfloat16 hi
 * and lo halves (split: [256][2][per] bfloat16, each byte value's per = 8 / nbits residual values' halves:
 * search_amx.residual_split), and Q . r = the same three products as the centroid scores, 16 vectors x 32
 * tokens a tile pair. Then, as every MaxSim entry point: per token (st_t[code, q] + Q[q] . r) * (1 / norm), its
 * maximum over the document's vectors, summed over q (fold_token, sum_q).
 * The float16-table kernel (embedctl_maxsim_lut_docs) sums nbytes table entries per (vector, token): 32 loads
 * from a 512 KB table at nbits 2. Documents pids[d] hold vectors doc_offsets[p] .. doc_offsets[p + 1] (>= 1 of
 * them, else -2) of codes, packed [*, nbytes] and norms (float16 bits when norms_f16); codes checked against num_c
 * (-3), every document before any is scored. nthreads > 1: the documents split in ranges, one thread each (the
 * same bits). Returns 0, -1 bad sizes, -2 / -3 as above, -4 no AMX here, -5 out of memory. */

/* One vector's residual halves into a tile row (hi at row, lo at row + dim_pad when halves is 2) from its nbytes
 * packed bytes (split: [256][halves][per]). */
static inline void decode_row(const uint16_t *split, int64_t halves, int64_t per, int64_t nbytes,
                              const uint8_t *bytes, uint16_t *row, int64_t dim_pad) {
    if (per == 4 && halves == 2) { /* nbits 2: 8 bytes of halves per byte value */
        for (int64_t b = 0; b < nbytes; b++) {
            const uint16_t *from = split + (int64_t)bytes[b] * 8;
            memcpy(row + b * 4, from, 8);
            memcpy(row + dim_pad + b * 4, from + 4, 8);
        }
        return;
    }
    for (int64_t b = 0; b < nbytes; b++) {
        const uint16_t *from = split + (int64_t)bytes[b] * halves * per;
        memcpy(row + b * per, from, (size_t)per * 2);
        if (halves == 2) memcpy(row + dim_pad + b * per, from + per, (size_t)per * 2);
    }
}

/* decode_row for nbits 2 (per = 4) and nbytes % 8 == 0, 32 dimensions a step: the 8 bytes widened to words, each
 * word repeated for its 4 dimensions (vpermw), shifted to its 2 bits (first dimension in the top bits), and the
 * 2-bit codes looked up among the 4 residual values' halves (vpermw again); the same halves as decode_row's
 * copies, ~6x fewer instructions than its 64 eight-byte copies a 128-dimension vector (decoding was the larger
 * part of this MaxSim's time). hi4 / lo4: lanes 0-3 the 4 values' hi / lo (lo written when halves is 2). */
__attribute__((target("avx512f,avx512bw")))
static void decode_row_2bit(const __m512i hi4, const __m512i lo4, int halves, int64_t nbytes, const uint8_t *bytes,
                            uint16_t *row, int64_t dim_pad) {
    const __m512i repeat = _mm512_set_epi16(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4, 3, 3, 3, 3, 2, 2, 2, 2,
                                            1, 1, 1, 1, 0, 0, 0, 0);
    const __m512i shifts = _mm512_set_epi16(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6,
                                            0, 2, 4, 6, 0, 2, 4, 6);
    const __m512i three = _mm512_set1_epi16(3);
    for (int64_t b = 0; b < nbytes; b += 8) {
        const __m128i eight = _mm_loadl_epi64((const __m128i *)(bytes + b));
        const __m512i words = _mm512_cvtepu8_epi16(_mm256_zextsi128_si256(eight));
        const __m512i codes =
            _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutexvar_epi16(repeat, words), shifts), three);
        _mm512_storeu_si512(row + b * 4, _mm512_permutexvar_epi16(codes, hi4));
        if (halves == 2) _mm512_storeu_si512(row + dim_pad + b * 4, _mm512_permutexvar_epi16(codes, lo4));
    }
}

struct maxsim_args {
    const uint16_t *split, *q_hi, *q_lo;
    int64_t halves, per, nbytes, num_c, lq, lq_pad, dim_pad, n_tiles;
    const uint8_t *packed;
    const float *st_t;
    const int32_t *codes;
    const void *norms;
    int norms_f16;
    const int64_t *doc_offsets, *pids;
    float *out;
};

/* Documents [d0, d1) as one stream of vectors, GROUP_ROWS at a time (across documents, so that every tile of rows
 * is whole but the stream's last): decoded into a, their sims [GROUP_ROWS][lq_pad] from the tiles, then folded in
 * order, each document's maxima summed when its last vector is folded. One tile of rows a group: on one core of a
 * 2-core AMX host, 40 SciFact documents (8,474 vectors) in 0.25-0.28 ms with groups of 16 or 32 vectors against
 * 0.32-0.37 with 64-256 (their decoded rows, 512 bytes each, no longer fit L1 beside the query's tiles); the
 * same bits whatever the group (a /tmp harness of the sizes, calls interleaved in random order). Rows past the
 * stream's end in a last tile keep stale values: not read. */
#ifndef GROUP_ROWS
#define GROUP_ROWS 16
#endif
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw")))
static int maxsim_range(const struct maxsim_args *m, int64_t d0, int64_t d1) {
    const int64_t k_tiles = m->dim_pad / 32, row_elems = m->halves * m->dim_pad;
    uint16_t *a = aligned_alloc(64, (size_t)(GROUP_ROWS * row_elems) * sizeof *a);
    float *sims = aligned_alloc(64, (size_t)(GROUP_ROWS * m->lq_pad) * sizeof *sims);
    float *best = malloc((size_t)m->lq * sizeof *best);
    int64_t *rows_at = malloc(GROUP_ROWS * sizeof *rows_at);
    if (!a || !sims || !best || !rows_at) { free(a); free(sims); free(best); free(rows_at); return -5; }
    memset(a, 0, (size_t)(GROUP_ROWS * row_elems) * sizeof *a); /* the padding past dim stays zero */
    struct tile_config cfg;
    full_tiles(&cfg);
    _tile_loadconfig(&cfg);
    const uint16_t *norms_h = (const uint16_t *)m->norms;
    const float *norms_f = (const float *)m->norms;
    /* nbits 2: the byte value whose four codes are all c (c * 0x55) holds value c's halves */
    const int two_bit = m->per == 4 && m->nbytes % 8 == 0;
    uint16_t values[2][32] = {{0}};
    for (int c = 0; two_bit && c < 4; c++)
        for (int h = 0; h < m->halves; h++) values[h][c] = m->split[((c * 0x55) * m->halves + h) * 4];
    const __m512i hi4 = _mm512_loadu_si512(values[0]), lo4 = _mm512_loadu_si512(values[1]);
    int64_t next_doc = d0, next_t = 0; /* the next vector to decode: document, position in it */
    int64_t fold_doc = d0, fold_t = 0; /* the next vector to fold */
    while (next_doc < d1) {
        int64_t rows = 0;
        while (rows < GROUP_ROWS && next_doc < d1) {
            const int64_t start = m->doc_offsets[m->pids[next_doc]], n = m->doc_offsets[m->pids[next_doc] + 1] - start;
            const int64_t take = n - next_t < GROUP_ROWS - rows ? n - next_t : GROUP_ROWS - rows;
            for (int64_t t = 0; t < take; t++) {
                const int64_t v = start + next_t + t;
                /* its centroid-score row (a random row of the [C, lq] scores), requested now, read at the fold */
                const float *st_row = m->st_t + (int64_t)m->codes[v] * m->lq;
                for (int64_t q = 0; q < m->lq; q += 16) __builtin_prefetch(st_row + q);
                if (two_bit)
                    decode_row_2bit(hi4, lo4, (int)m->halves, m->nbytes, m->packed + v * m->nbytes,
                                    a + (rows + t) * row_elems, m->dim_pad);
                else
                    decode_row(m->split, m->halves, m->per, m->nbytes, m->packed + v * m->nbytes,
                               a + (rows + t) * row_elems, m->dim_pad);
                rows_at[rows + t] = v;
            }
            rows += take;
            next_t += take;
            if (next_t == n) { next_doc++; next_t = 0; }
        }
        for (int64_t r0 = 0; r0 < rows; r0 += BLOCK)
            for (int64_t j = 0; j < m->n_tiles; j += 2) {
                const int two = j + 1 < m->n_tiles;
                pair_sums(a + r0 * row_elems, m->halves, m->dim_pad, m->q_hi + j * k_tiles * 512,
                          m->q_lo + j * k_tiles * 512, k_tiles, two);
                _tile_stored(0, sims + r0 * m->lq_pad + j * 16, m->lq_pad * 4);
                if (two) _tile_stored(1, sims + r0 * m->lq_pad + (j + 1) * 16, m->lq_pad * 4);
            }
        for (int64_t r = 0; r < rows; r++) {
            const int64_t v = rows_at[r];
            const float norm = m->norms_f16 ? half_to_float(norms_h[v]) : norms_f[v];
            fold_token(best, fold_t == 0, m->st_t + (int64_t)m->codes[v] * m->lq, sims + r * m->lq_pad, norm, m->lq);
            if (++fold_t == m->doc_offsets[m->pids[fold_doc] + 1] - m->doc_offsets[m->pids[fold_doc]]) {
                m->out[fold_doc++] = sum_q(best, m->lq);
                fold_t = 0;
            }
        }
    }
    _tile_release();
    free(a);
    free(sims);
    free(best);
    free(rows_at);
    return 0;
}

int embedctl_maxsim_amx_docs(const uint16_t *split, int64_t halves, int64_t per, int64_t nbytes,
                             const uint8_t *packed, const float *st_t, int64_t num_c, const float *q, int64_t lq,
                             const int32_t *codes, const void *norms, int norms_f16, const int64_t *doc_offsets,
                             const int64_t *pids, int64_t num_docs, float *out, int nthreads) {
    if (halves < 1 || halves > 2 || lq < 1 || lq > MAX_LQ || nbytes < 1 || (per != 1 && per != 2 && per != 4 && per != 8)) return -1;
    for (int64_t d = 0; d < num_docs; d++) {
        const int64_t start = doc_offsets[pids[d]], n = doc_offsets[pids[d] + 1] - start;
        if (n < 1) return -2;
        for (int64_t j = start; j < start + n; j++)
            if ((uint64_t)(int64_t)codes[j] >= (uint64_t)num_c) return -3;
    }
    if (!amx_ready_once()) return -4;
    if (num_docs == 0) return 0;
    const int64_t dim = nbytes * per, dim_pad = (dim + 31) / 32 * 32, n_tiles = (lq + 15) / 16;
    uint16_t *q_hi = query_tiles(q, lq, dim, dim_pad);
    if (!q_hi) return -5;
    const struct maxsim_args m = {split,   q_hi,          q_hi + query_elems(lq, dim_pad), halves,  per,
                                  nbytes,  num_c,         lq,                              n_tiles * 16, dim_pad,
                                  n_tiles, packed,        st_t,                            codes,   norms,
                                  norms_f16, doc_offsets, pids,                            out};
    const int64_t parts = OMP_HAVE && nthreads > 1 ? (nthreads < num_docs ? nthreads : num_docs) : 1;
    int failed = 0;
    if (parts <= 1) {
        failed = maxsim_range(&m, 0, num_docs);
    } else {
        OMP_PRAGMA(omp parallel for num_threads(parts) schedule(static, 1) reduction(| : failed))
        for (int64_t p = 0; p < parts; p++)
            failed |= maxsim_range(&m, p * num_docs / parts, (p + 1) * num_docs / parts);
    }
    free(q_hi);
    return failed ? -5 : 0;
}
#endif
