/* PLAID centroid-interaction kernels, built at install time (setup.py, optional) and called through ctypes
 * by embedctl/index/plaid/search_kernels.py (the native PLAID backend). Plain C99, no Python API: when no
 * compiler is available the extension is skipped and the reference backend (reference.py) runs instead.
 *
 * st_t is the query's centroid-score matrix transposed, float32 [C, lq] row-major: the lq scores of one
 * centroid are contiguous, so each code costs one short, vectorisable row max.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_LQ 4096

/* gcc on x86-64 Linux: one copy per instruction set, picked at load time; elsewhere the plain version. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define CLONES
#endif

/* out[d] = sum_q max over the codes of segment d of st_t[code, q]; segment d holds counts[d] consecutive
 * entries of codes; an empty segment gives -INFINITY. Sums run q = 0, 1, ... like numpy's sum over axis 0. */
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
        const float *row = st_t + (int64_t)codes[pos] * lq;
        for (int64_t q = 0; q < lq; q++) best[q] = row[q];
        for (int64_t j = 1; j < n; j++) {
            row = st_t + (int64_t)codes[pos + j] * lq;
            for (int64_t q = 0; q < lq; q++) best[q] = row[q] > best[q] ? row[q] : best[q];
        }
        float total = 0.0f;
        for (int64_t q = 0; q < lq; q++) total += best[q];
        out[d] = total;
        pos += n;
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

/* One document token j in a MaxSim: best[q] = max(best[q], (centroid_part[q] + residual_part[q]) / norm), or
 * the value itself for the document's first token (first != 0). Shared by both MaxSim entry points. */
static inline void fold_token(float *best, int first, const float *centroid_part, const float *residual_part,
                              float norm, int64_t lq) {
    norm = norm > 1e-12f ? norm : 1e-12f;
    if (first) {
        for (int64_t q = 0; q < lq; q++) best[q] = (centroid_part[q] + residual_part[q]) / norm;
        return;
    }
    for (int64_t q = 0; q < lq; q++) {
        const float value = (centroid_part[q] + residual_part[q]) / norm;
        best[q] = value > best[q] ? value : best[q];
    }
}

static inline float sum_q(const float *best, int64_t lq) {  /* q = 0, 1, ... like numpy's sum over axis 0 */
    float total = 0.0f;
    for (int64_t q = 0; q < lq; q++) total += best[q];
    return total;
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

/* MaxSim straight from packed residual bytes, with no decoded vectors: lut is float32 [nbytes, 256, lq],
 *   lut[b, v, q] = Q[q] . (the residual values that byte value v decodes to at byte position b),
 * so Q[q] . residual_j = sum_b lut[b, packed[j, b], q] (nbytes * lq additions instead of dim * lq
 * multiply-adds, and no [n, dim] array written and read back). Then, as embedctl_maxsim:
 *   out[d] = sum_q max over the tokens j of document d of (st_t[codes[j], q] + Q[q] . residual_j) / max(norm_j, 1e-12).
 * Sums over b and q run in index order: the same input gives the same bits on every call. */
CLONES
int embedctl_maxsim_lut(const float *lut, int64_t nbytes, const uint8_t *packed, const float *st_t, int64_t lq,
                        const int32_t *codes, const float *norms, const int64_t *lens, int64_t num_docs, float *out) {
    float best[MAX_LQ], acc[MAX_LQ];
    if (lq < 1 || lq > MAX_LQ || nbytes < 1) return -1;
    int64_t j = 0;
    for (int64_t d = 0; d < num_docs; d++) {
        if (lens[d] < 1) return -2;
        for (int64_t t = 0; t < lens[d]; t++, j++) {
            lut_row_sums(lut, packed + j * nbytes, nbytes, lq, acc);
            fold_token(best, t == 0, st_t + (int64_t)codes[j] * lq, acc, norms[j], lq);
        }
        out[d] = sum_q(best, lq);
    }
    return 0;
}
