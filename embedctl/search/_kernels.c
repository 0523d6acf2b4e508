/* PLAID centroid-interaction kernels, built at install time (setup.py, optional) and called through ctypes
 * by embedctl/search/kernels.py. Plain C99, no Python API: when no compiler is available the extension is
 * skipped and the numpy/torch versions in embedctl/search/plaid.py run instead (same results).
 *
 * st_t is the query's centroid-score matrix transposed, float32 [C, lq] row-major: the lq scores of one
 * centroid are contiguous, so each code costs one short, vectorisable row max.
 */
#include <math.h>
#include <stdint.h>

#define MAX_LQ 4096

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

/* MaxSim of one query against m documents, from the residual part of each token similarity:
 * sims[j, q] = Q[q] . residual_j (token-major rows [n, lq], bfloat16 bits when is_bf16 else float32),
 * the centroid part st_t[codes[j], q] and the stored norm of the decompressed vector j:
 *   out[d] = sum_q max over the tokens j of document d of (st_t[codes[j], q] + sims[j, q]) / max(norm_j, 1e-12).
 * Documents hold lens[d] consecutive tokens (lens[d] >= 1). */
int embedctl_maxsim(const void *sims, int is_bf16, const float *st_t, int64_t lq, const int32_t *codes,
                    const float *norms, const int64_t *lens, int64_t num_docs, float *out) {
    float best[MAX_LQ], value[MAX_LQ];
    if (lq < 1 || lq > MAX_LQ) return -1;
    const uint16_t *sims_bf16 = (const uint16_t *)sims;
    const float *sims_f32 = (const float *)sims;
    int64_t j = 0;
    for (int64_t d = 0; d < num_docs; d++) {
        if (lens[d] < 1) return -2;
        for (int64_t t = 0; t < lens[d]; t++, j++) {
            const float *centroid_part = st_t + (int64_t)codes[j] * lq;
            const float norm = norms[j] > 1e-12f ? norms[j] : 1e-12f;
            if (is_bf16) {
                const uint16_t *row = sims_bf16 + j * lq;
                for (int64_t q = 0; q < lq; q++) {
                    union { uint32_t bits; float f; } u;
                    u.bits = (uint32_t)row[q] << 16;
                    value[q] = (centroid_part[q] + u.f) / norm;
                }
            } else {
                const float *row = sims_f32 + j * lq;
                for (int64_t q = 0; q < lq; q++) value[q] = (centroid_part[q] + row[q]) / norm;
            }
            if (t == 0) {
                for (int64_t q = 0; q < lq; q++) best[q] = value[q];
            } else {
                for (int64_t q = 0; q < lq; q++) best[q] = value[q] > best[q] ? value[q] : best[q];
            }
        }
        float total = 0.0f;
        for (int64_t q = 0; q < lq; q++) total += best[q];
        out[d] = total;
    }
    return 0;
}
