/* PLAID centroid-interaction kernels, built at install time (setup.py, optional) and called through ctypes
 * by embedctl/index/plaid/search_kernels.py (the native PLAID backend). Plain C99, no Python API: when no
 * compiler is available the extension is skipped and the reference backend (reference.py) runs instead.
 *
 * st_t is the query's centroid-score matrix transposed, float32 [C, lq] row-major: the lq scores of one
 * centroid are contiguous, so each code costs one short, vectorisable row max.
 */
#include <stdlib.h>

#include "_search_common.h"

#define PREFETCH_AHEAD 8 /* codes: the rows of st_t are scattered over C * lq floats (1 MiB at C 8192) */

/* sum_q max over the n >= 1 codes of st_t[code, q], maxima in best (q = 0, 1, ... like numpy's sum over axis 0).
 * The row PREFETCH_AHEAD codes on is requested early: the reads are cache misses, and this halved the stage-4
 * time on SciFact (1.45 -> 0.73 ms a query, 2 busy Zen 5 cores). */
static inline float codes_maxsum(const float *st_t, int64_t lq, const int32_t *codes, int64_t n, float *best) {
    const float *row = st_t + (int64_t)codes[0] * lq;
    for (int64_t q = 0; q < lq; q++) best[q] = row[q];
    for (int64_t j = 1; j < n; j++) {
        if (j + PREFETCH_AHEAD < n) {
            const float *ahead = st_t + (int64_t)codes[j + PREFETCH_AHEAD] * lq;
            for (int64_t q = 0; q < lq; q += 16) __builtin_prefetch(ahead + q);
        }
        row = st_t + (int64_t)codes[j] * lq;
        for (int64_t q = 0; q < lq; q++) best[q] = row[q] > best[q] ? row[q] : best[q];
    }
    float total = 0.0f;
    for (int64_t q = 0; q < lq; q++) total += best[q];
    return total;
}

/* out[d] = sum_q max over the codes of segment d of st_t[code, q]; segment d holds counts[d] consecutive
 * entries of codes; an empty segment gives -INFINITY. Sums run q = 0, 1, ... like numpy's sum over axis 0. */
CLONES
int embedctl_segment_maxsum(const float *st_t, int64_t lq, const int32_t *codes, const int64_t *counts,
                            int64_t num_segments, float *out) {
    float best[MAX_LQ];
    if (lq < 1 || lq > MAX_LQ) return -1;
    int64_t pos = 0;
    for (int64_t d = 0; d < num_segments; d++) {
        const int64_t n = counts[d];
        if (n <= 0) {
            out[d] = -INFINITY;
            continue;
        }
        out[d] = codes_maxsum(st_t, lq, codes + pos, n, best);
        pos += n;
    }
    return 0;
}

/* embedctl_segment_maxsum over documents read in place from the index's CSR lists (no gathered copy): the
 * codes of document p are doc_codes[offsets[p] .. offsets[p + 1]), so out[d] is the centroid interaction of
 * pids[d]. Codes are checked against num_c (-3: one is outside [0, num_c)). */
CLONES
int embedctl_doc_maxsum(const float *st_t, int64_t num_c, int64_t lq, const int32_t *doc_codes,
                        const int64_t *offsets, const int64_t *pids, int64_t num_docs, float *out) {
    float best[MAX_LQ];
    if (lq < 1 || lq > MAX_LQ) return -1;
    for (int64_t d = 0; d < num_docs; d++) {
        const int64_t lo = offsets[pids[d]], n = offsets[pids[d] + 1] - lo;
        if (n <= 0) {
            out[d] = -INFINITY;
            continue;
        }
        for (int64_t j = 0; j < n; j++)
            if ((uint64_t)(int64_t)doc_codes[lo + j] >= (uint64_t)num_c) return -3;
        out[d] = codes_maxsum(st_t, lq, doc_codes + lo, n, best);
    }
    return 0;
}

/* For each entry i: out[slots[i], :] = max(out[slots[i], :], st_t[cents[i], :]); out is [num_slots, lq],
 * filled with -INFINITY by the caller. Entries with slots[i] < 0 are skipped. */
int embedctl_scatter_max_rows(const float *st_t, int64_t lq, const int64_t *cents, const int64_t *slots,
                              int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) {
        if (slots[i] < 0) continue;
        const float *row = st_t + cents[i] * lq;
        float *dst = out + slots[i] * lq;
        for (int64_t q = 0; q < lq; q++) dst[q] = row[q] > dst[q] ? row[q] : dst[q];
    }
    return 0;
}

/* MaxSim of one query against m documents, from the residual part of each token similarity:
 * sims[j, q] = Q[q] . residual_j (token-major rows [n, lq], bfloat16 bits when is_bf16 else float32),
 * the centroid part st_t[codes[j], q] and the stored norm of the decompressed vector j:
 *   out[d] = sum_q max over the tokens j of document d of (st_t[codes[j], q] + sims[j, q]) / max(norm_j, 1e-12).
 * Documents hold lens[d] consecutive tokens (lens[d] >= 1). */
int embedctl_maxsim(const void *sims, int is_bf16, const float *st_t, int64_t lq, const int32_t *codes,
                    const float *norms, const int64_t *lens, int64_t num_docs, float *out) {
    float best[MAX_LQ], widened[MAX_LQ];
    if (lq < 1 || lq > MAX_LQ) return -1;
    const uint16_t *sims_bf16 = (const uint16_t *)sims;
    const float *sims_f32 = (const float *)sims;
    int64_t j = 0;
    for (int64_t d = 0; d < num_docs; d++) {
        if (lens[d] < 1) return -2;
        for (int64_t t = 0; t < lens[d]; t++, j++) {
            const float *residual_part = sims_f32 + j * lq;
            if (is_bf16) {
                const uint16_t *row = sims_bf16 + j * lq;
                for (int64_t q = 0; q < lq; q++) {
                    union { uint32_t bits; float f; } u;
                    u.bits = (uint32_t)row[q] << 16;
                    widened[q] = u.f;
                }
                residual_part = widened;
            }
            fold_token(best, t == 0, st_t + (int64_t)codes[j] * lq, residual_part, norms[j], lq);
        }
        out[d] = sum_q(best, lq);
    }
    return 0;
}

/* acc[0..lq) = sum_b lut[b, bytes[b], :]. For lq = 32 (the usual query length) the 32 sums live in four
 * 8-float vector registers (gcc vector extensions: ymm in the AVX2 copy, xmm pairs in the baseline one). */
typedef float v8sf __attribute__((vector_size(32)));

static inline v8sf load8(const float *p) {
    v8sf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void lut_row_sums(const float *lut, const uint8_t *bytes, int64_t nbytes, int64_t lq, float *acc) {
    if (lq == 32) {
        v8sf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (int64_t b = 0; b < nbytes; b++) {
            const float *r = lut + ((b << 8) + bytes[b]) * 32;
            a0 += load8(r);
            a1 += load8(r + 8);
            a2 += load8(r + 16);
            a3 += load8(r + 24);
        }
        memcpy(acc, &a0, 32);
        memcpy(acc + 8, &a1, 32);
        memcpy(acc + 16, &a2, 32);
        memcpy(acc + 24, &a3, 32);
        return;
    }
    for (int64_t q = 0; q < lq; q++) acc[q] = 0.0f;
    for (int64_t b = 0; b < nbytes; b++) {
        const float *r = lut + ((b << 8) + bytes[b]) * lq;
        for (int64_t q = 0; q < lq; q++) acc[q] += r[q];
    }
}

static void lut16_add_tile(const uint16_t *lut, const uint8_t *bytes, int64_t nbytes, int64_t m, int64_t b0,
                           int64_t b1, int64_t lq, float *acc, int wide);  /* the float16 table, below */
static int lut16_wide(void);

/* MaxSim straight from packed residual bytes, with no decoded vectors: lut is float32 [nbytes, 256, lq] (or
 * lut16, the same table in float16: below),
 *   lut[b, v, q] = Q[q] . (the residual values that byte value v decodes to at byte position b),
 * so Q[q] . residual_j = sum_b lut[b, packed[j, b], q] (nbytes * lq additions instead of dim * lq
 * multiply-adds, and no [n, dim] array written and read back). Then, as embedctl_maxsim:
 *   out[d] = sum_q max over the tokens j of document d of (st_t[codes[j], q] + Q[q] . residual_j) / max(norm_j, 1e-12).
 * Sums over b and q run in index order: the same input gives the same bits on every call. */
CLONES static float doc_maxsim_rows(const float *lut, const uint16_t *lut16, int wide, int64_t nbytes,
                                    const uint8_t *packed, const float *st_t, int64_t lq, const int32_t *codes,
                                    const float *norms, int64_t j0, int64_t n) {
    float best[MAX_LQ], acc[MAX_LQ];
    for (int64_t t = 0, j = j0; t < n; t++, j++) {
        if (lut16) {
            memset(acc, 0, (size_t)lq * sizeof(float));
            lut16_add_tile(lut16, packed + j * nbytes, nbytes, 1, 0, nbytes, lq, acc, wide);
        } else {
            lut_row_sums(lut, packed + j * nbytes, nbytes, lq, acc);
        }
        fold_token(best, t == 0, st_t + (int64_t)codes[j] * lq, acc, norms[j], lq);
    }
    return sum_q(best, lq);
}

/* nthreads > 1: the documents split across that many threads (OpenMP), each scored as on one. lut_f16: ``lut``
 * is the float16 table (uint16 bits, [nbytes, 256, lq]) instead of the float32 one. */
int embedctl_maxsim_lut(const void *lut, int lut_f16, int64_t nbytes, const uint8_t *packed, const float *st_t,
                        int64_t lq, const int32_t *codes, const float *norms, const int64_t *lens, int64_t num_docs,
                        float *out, int nthreads) {
    if (lq < 1 || lq > MAX_LQ || nbytes < 1) return -1;
    for (int64_t d = 0; d < num_docs; d++)
        if (lens[d] < 1) return -2;
    const float *lut32 = lut_f16 ? NULL : (const float *)lut;
    const uint16_t *lut16 = lut_f16 ? (const uint16_t *)lut : NULL;
    const int wide = lut16 ? lut16_wide() : 0;
    int64_t *starts = OMP_HAVE && nthreads > 1 ? malloc((size_t)(num_docs > 0 ? num_docs : 1) * sizeof *starts) : NULL;
    if (starts == NULL) {  /* one thread (or no memory for the offsets): document by document */
        for (int64_t d = 0, j = 0; d < num_docs; j += lens[d], d++)
            out[d] = doc_maxsim_rows(lut32, lut16, wide, nbytes, packed, st_t, lq, codes, norms, j, lens[d]);
        return 0;
    }
    for (int64_t d = 0, j = 0; d < num_docs; j += lens[d], d++) starts[d] = j;
    /* the loop only calls: code inside an OpenMP region is compiled for the baseline CPU */
    OMP_PRAGMA(omp parallel for num_threads(nthreads) schedule(dynamic, 2))
    for (int64_t d = 0; d < num_docs; d++)
        out[d] = doc_maxsim_rows(lut32, lut16, wide, nbytes, packed, st_t, lq, codes, norms, starts[d], lens[d]);
    free(starts);
    return 0;
}

/* The float16 table (search.precision fp16): the float32 table's entries rounded to the nearest float16, half
 * its bytes. The table's loads from L2 bound the final stage (64 cache lines a vector at lq = 32); with half the
 * lines a SciFact vector took ~30 ns instead of ~49 (the kernel alone, timed on one Zen 5 core; bigger tiles
 * across documents, for reuse of the float32 table in cache, gained nothing). Each entry is widened exactly and
 * summed in float32 in the order of the float32 table's sums; the only difference is the entries' rounding (a
 * token similarity moves by at most 2^-11 sum_b |lut[b, v_b, q]| / norm). ``wide``: the AVX-512 path (the CPU
 * checked once per call); the plain one gives the same bits anywhere. */
static void lut16_add_plain(const uint16_t *lut, const uint8_t *bytes, int64_t b0, int64_t b1, int64_t lq,
                            float *acc) {
    for (int64_t b = b0; b < b1; b++) {
        const uint16_t *r = lut + ((b << 8) + bytes[b]) * lq;
        for (int64_t q = 0; q < lq; q++) acc[q] += half_to_float(r[q]);
    }
}

#ifdef HAVE_AVX512_PATHS
#define LOAD_HALF16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
/* lut16_add_plain for 4 tokens at lq = 32 (bytes of token i at bytes + i * stride, sums at acc + i * 32). */
__attribute__((target("avx512f"))) static void lut16_add_x4_512(const uint16_t *lut, const uint8_t *bytes,
                                                                int64_t stride, int64_t b0, int64_t b1, float *acc) {
    __m512 a0 = _mm512_loadu_ps(acc), a1 = _mm512_loadu_ps(acc + 16), c0 = _mm512_loadu_ps(acc + 32),
           c1 = _mm512_loadu_ps(acc + 48), e0 = _mm512_loadu_ps(acc + 64), e1 = _mm512_loadu_ps(acc + 80),
           f0 = _mm512_loadu_ps(acc + 96), f1 = _mm512_loadu_ps(acc + 112);
    for (int64_t b = b0; b < b1; b++) {
        const uint16_t *ra = lut + ((b << 8) + bytes[b]) * 32, *rc = lut + ((b << 8) + bytes[stride + b]) * 32;
        const uint16_t *re = lut + ((b << 8) + bytes[2 * stride + b]) * 32;
        const uint16_t *rf = lut + ((b << 8) + bytes[3 * stride + b]) * 32;
        a0 = _mm512_add_ps(a0, LOAD_HALF16(ra));
        a1 = _mm512_add_ps(a1, LOAD_HALF16(ra + 16));
        c0 = _mm512_add_ps(c0, LOAD_HALF16(rc));
        c1 = _mm512_add_ps(c1, LOAD_HALF16(rc + 16));
        e0 = _mm512_add_ps(e0, LOAD_HALF16(re));
        e1 = _mm512_add_ps(e1, LOAD_HALF16(re + 16));
        f0 = _mm512_add_ps(f0, LOAD_HALF16(rf));
        f1 = _mm512_add_ps(f1, LOAD_HALF16(rf + 16));
    }
    _mm512_storeu_ps(acc, a0);
    _mm512_storeu_ps(acc + 16, a1);
    _mm512_storeu_ps(acc + 32, c0);
    _mm512_storeu_ps(acc + 48, c1);
    _mm512_storeu_ps(acc + 64, e0);
    _mm512_storeu_ps(acc + 80, e1);
    _mm512_storeu_ps(acc + 96, f0);
    _mm512_storeu_ps(acc + 112, f1);
}

__attribute__((target("avx512f"))) static void lut16_add_512(const uint16_t *lut, const uint8_t *bytes, int64_t b0,
                                                             int64_t b1, float *acc) {
    __m512 a0 = _mm512_loadu_ps(acc), a1 = _mm512_loadu_ps(acc + 16);
    for (int64_t b = b0; b < b1; b++) {
        const uint16_t *r = lut + ((b << 8) + bytes[b]) * 32;
        a0 = _mm512_add_ps(a0, LOAD_HALF16(r));
        a1 = _mm512_add_ps(a1, LOAD_HALF16(r + 16));
    }
    _mm512_storeu_ps(acc, a0);
    _mm512_storeu_ps(acc + 16, a1);
}
#endif

/* The m tokens of a tile (token t's bytes at bytes + t * nbytes, its sums at acc + t * lq) through byte positions
 * b0 .. b1 - 1 of the float16 table. */
static void lut16_add_tile(const uint16_t *lut, const uint8_t *bytes, int64_t nbytes, int64_t m, int64_t b0,
                           int64_t b1, int64_t lq, float *acc, int wide) {
    int64_t t = 0;
#ifdef HAVE_AVX512_PATHS
    if (wide && lq == 32) {
        for (; t + 4 <= m; t += 4) lut16_add_x4_512(lut, bytes + t * nbytes, nbytes, b0, b1, acc + t * 32);
        for (; t < m; t++) lut16_add_512(lut, bytes + t * nbytes, b0, b1, acc + t * 32);
    }
#else
    (void)wide;
#endif
    for (; t < m; t++) lut16_add_plain(lut, bytes + t * nbytes, b0, b1, lq, acc + t * lq);
}

static int lut16_wide(void) {
#ifdef HAVE_AVX512_PATHS
    return __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

/* 1 where the float16 table's MaxSim runs its AVX-512 path (search.precision auto picks fp16 there). */
int embedctl_lut16_fast(void) { return lut16_wide(); }

typedef float v16sf __attribute__((vector_size(64)));

static inline v16sf load16(const float *p) {
    v16sf v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* acc[0..lq) += lut[b, bytes[b], :] for b = b0 .. b1 - 1 in order (acc zero before b0 = 0): the additions of
 * lut_row_sums, split into byte groups so that one group's slice of the table stays in cache while a tile of
 * tokens goes through it. */
static inline void lut_add_bytes(const float *lut, const uint8_t *bytes, int64_t b0, int64_t b1, int64_t lq,
                                 float *acc) {
    if (lq == 32) {
        v16sf a0 = load16(acc), a1 = load16(acc + 16);
        for (int64_t b = b0; b < b1; b++) {
            const float *r = lut + ((b << 8) + bytes[b]) * 32;
            a0 += load16(r);
            a1 += load16(r + 16);
        }
        memcpy(acc, &a0, 64);
        memcpy(acc + 16, &a1, 64);
        return;
    }
    for (int64_t b = b0; b < b1; b++) {
        const float *r = lut + ((b << 8) + bytes[b]) * lq;
        for (int64_t q = 0; q < lq; q++) acc[q] += r[q];
    }
}

/* lut_add_bytes for 4 tokens at once at lq = 32 (bytes of token i at bytes + i * stride, sums at acc + i * 32):
 * each token's additions stay in b order (the same bits), but the 4 tokens' chains are independent, so the
 * adds overlap instead of each waiting for the previous one's latency (one token alone is latency-bound). */
static inline void lut_add_bytes_x4(const float *lut, const uint8_t *bytes, int64_t stride, int64_t b0, int64_t b1,
                                    float *acc) {
    v16sf a0 = load16(acc), a1 = load16(acc + 16), c0 = load16(acc + 32), c1 = load16(acc + 48);
    v16sf e0 = load16(acc + 64), e1 = load16(acc + 80), f0 = load16(acc + 96), f1 = load16(acc + 112);
    for (int64_t b = b0; b < b1; b++) {
        const float *ra = lut + ((b << 8) + bytes[b]) * 32, *rc = lut + ((b << 8) + bytes[stride + b]) * 32;
        const float *re = lut + ((b << 8) + bytes[2 * stride + b]) * 32;
        const float *rf = lut + ((b << 8) + bytes[3 * stride + b]) * 32;
        a0 += load16(ra);
        a1 += load16(ra + 16);
        c0 += load16(rc);
        c1 += load16(rc + 16);
        e0 += load16(re);
        e1 += load16(re + 16);
        f0 += load16(rf);
        f1 += load16(rf + 16);
    }
    memcpy(acc, &a0, 64);
    memcpy(acc + 16, &a1, 64);
    memcpy(acc + 32, &c0, 64);
    memcpy(acc + 48, &c1, 64);
    memcpy(acc + 64, &e0, 64);
    memcpy(acc + 80, &e1, 64);
    memcpy(acc + 96, &f0, 64);
    memcpy(acc + 112, &f1, 64);
}

#ifndef TILE_FLOATS
#define TILE_FLOATS 8192 /* per tile of tokens: their lq sums each (32 KiB, in L1) */
#endif
#ifndef GROUP_BYTES /* byte positions per pass over a tile: 8 x 256 x lq floats of the table (256 KiB at lq 32) */
#define GROUP_BYTES 8
#endif

/* One document's MaxSim for embedctl_maxsim_lut_docs: its vectors start .. start + n - 1 (n >= 1, codes checked
 * by the caller), in tiles through the table a group of byte positions at a time. */
CLONES static float doc_maxsim_lut(const float *lut, const uint16_t *lut16, int wide, int64_t nbytes,
                                   const uint8_t *packed, const float *st_t, int64_t num_c, int64_t lq,
                                   const int32_t *codes, const void *norms, int norms_f16, int64_t start, int64_t n) {
    float best[MAX_LQ], acc[TILE_FLOATS];
    const int64_t tile = TILE_FLOATS / lq;
    const uint16_t *norms_h = (const uint16_t *)norms;
    const float *norms_f = (const float *)norms;
    for (int64_t t0 = 0; t0 < n; t0 += tile) {
        const int64_t m = n - t0 < tile ? n - t0 : tile;
        const uint8_t *bytes = packed + (start + t0) * nbytes;
        /* the tile's centroid-score rows, requested now, read after its table sums: each is a random row of
         * the [C, lq] scores (1-2 MiB), and waiting on them was a sixth of this function's time (perf) */
        for (int64_t t = 0; t < m; t++) {
            const int64_t code = codes[start + t0 + t];
            if ((uint64_t)code < (uint64_t)num_c)
                for (int64_t q = 0; q < lq; q += 16) __builtin_prefetch(st_t + code * lq + q);
        }
        memset(acc, 0, (size_t)(m * lq) * sizeof(float));
        for (int64_t g = 0; g < nbytes; g += GROUP_BYTES) {
            const int64_t g1 = g + GROUP_BYTES < nbytes ? g + GROUP_BYTES : nbytes;
            if (lut16) {
                lut16_add_tile(lut16, bytes, nbytes, m, g, g1, lq, acc, wide);
                continue;
            }
            int64_t t = 0;
            if (lq == 32)
                for (; t + 4 <= m; t += 4) lut_add_bytes_x4(lut, bytes + t * nbytes, nbytes, g, g1, acc + t * 32);
            for (; t < m; t++) lut_add_bytes(lut, bytes + t * nbytes, g, g1, lq, acc + t * lq);
        }
        for (int64_t t = 0; t < m; t++) {
            const int64_t j = start + t0 + t;
            const float norm = norms_f16 ? half_to_float(norms_h[j]) : norms_f[j];
            fold_token(best, t0 + t == 0, st_t + (int64_t)codes[j] * lq, acc + t * lq, norm, lq);
        }
    }
    return sum_q(best, lq);
}

/* embedctl_maxsim_lut over documents read in place from the index (no gathered copies): document pids[d] holds
 * the vectors doc_offsets[p] .. doc_offsets[p + 1] (>= 1 of them, else -2) of codes, packed [*, nbytes] and
 * norms (float16 bits when norms_f16, else float32). Same sums in the same order as embedctl_maxsim_lut, so
 * the same bits; its tokens go through the table in tiles, a group of byte positions at a time. Codes are
 * checked against num_c (-3), every document before any is scored. nthreads > 1: the documents split across
 * that many threads (OpenMP), each scored as on one. lut_f16: the float16 table, as embedctl_maxsim_lut. */
int embedctl_maxsim_lut_docs(const void *lut, int lut_f16, int64_t nbytes, const uint8_t *packed,
                             const float *st_t, int64_t num_c, int64_t lq, const int32_t *codes, const void *norms,
                             int norms_f16, const int64_t *doc_offsets, const int64_t *pids, int64_t num_docs,
                             float *out, int nthreads) {
    if (lq < 1 || lq > MAX_LQ || nbytes < 1) return -1;
    for (int64_t d = 0; d < num_docs; d++) {
        const int64_t start = doc_offsets[pids[d]], n = doc_offsets[pids[d] + 1] - start;
        if (n < 1) return -2;
        for (int64_t j = start; j < start + n; j++)
            if ((uint64_t)(int64_t)codes[j] >= (uint64_t)num_c) return -3;
    }
    const float *lut32 = lut_f16 ? NULL : (const float *)lut;
    const uint16_t *lut16 = lut_f16 ? (const uint16_t *)lut : NULL;
    const int wide = lut16 ? lut16_wide() : 0;
    /* the loop only calls: code inside an OpenMP region is compiled for the baseline CPU */
    OMP_PRAGMA(omp parallel for num_threads(nthreads) schedule(dynamic, 2) if (nthreads > 1))
    for (int64_t d = 0; d < num_docs; d++) {
        const int64_t start = doc_offsets[pids[d]];
        out[d] = doc_maxsim_lut(lut32, lut16, wide, nbytes, packed, st_t, num_c, lq, codes, norms, norms_f16,
                                start, doc_offsets[pids[d] + 1] - start);
    }
    return 0;
}

/* The m best columns of each row of st [rows, cols] (float32, row-major), best first, an exact tie to the
 * smaller column (numpy's stable argsort of -row, cut to m) -> idx int64 [rows, m]; m <= min(cols, MAX_TOP)
 * (-1 otherwise). Per row: the least of the maxima of m blocks of columns is at most the m-th best score (m
 * distinct columns reach it), so only the columns reaching it (a few percent) go, in column order, through
 * an insertion into the sorted list. */
CLONES
int embedctl_row_top(const float *st, int64_t rows, int64_t cols, int64_t m, int64_t *idx) {
    float vals[MAX_TOP];
    if (m < 1 || m > cols || m > MAX_TOP) return -1;
    for (int64_t r = 0; r < rows; r++) {
        const float *row = st + r * cols;
        int64_t *ids = idx + r * m;
        float floor_score = INFINITY;
        for (int64_t b = 0; b < m; b++) {
            const int64_t c0 = b * cols / m, c1 = (b + 1) * cols / m;
            float most = row[c0];
            for (int64_t c = c0 + 1; c < c1; c++) most = row[c] > most ? row[c] : most;
            floor_score = most < floor_score ? most : floor_score;
        }
        int64_t n = 0;
        for (int64_t c = 0; c < cols; c++) {
            const float v = row[c];
            if (!(v >= floor_score) || (n == m && !(v > vals[m - 1]))) continue;  /* a tie with the m-th: the smaller column stays */
            int64_t p = n < m ? n : m - 1;
            while (p > 0 && vals[p - 1] < v) {  /* after every equal score: ties stay in column order */
                vals[p] = vals[p - 1];
                ids[p] = ids[p - 1];
                p--;
            }
            vals[p] = v;
            ids[p] = c;
            if (n < m) n++;
        }
        if (n < m) return -2;  /* NaN scores */
    }
    return 0;
}
