/* PLAID indexing kernels, built at install time (setup.py, optional) and called through ctypes by
 * embedctl/index/plaid/kernels.py. Plain C99, no Python API: when no compiler is available the extension is
 * skipped and the torch versions in assign.py / codec.py run instead (same results).
 *
 * - embedctl_nearest_bf16: the second half of nearest-centroid assignment (the first is a bfloat16 GEMM):
 *   the row maximum, then an exact rescoring of the few columns within the GEMM's rounding error of it.
 *   torch's CPU argmax over a bfloat16 row converts every element to float; here each bfloat16 bit pattern
 *   is mapped to an int16 that sorts like the value, so a row is one vectorised int16 max and one compare.
 * - embedctl_compress: residual = vector - its centroid, bucket index per dimension, bit packing.
 * - embedctl_decoded_norms: L2 norm of centroid + decoded residual, from the codes and packed bytes.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LANES 32
#define BLOCK 256          /* columns per block of the row maximum */

/* gcc on x86-64 Linux: one copy per instruction set, picked at load time (AVX-512 runs 32 int16 lanes per
 * instruction, the SSE2 baseline 8). Elsewhere the plain version, which compilers still vectorise. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define CLONES
#endif

/* bfloat16 bits -> int16 with the same order as the values (negative values: flip the magnitude bits). */
static inline int16_t order_key(uint16_t bits) {
    int16_t s = (int16_t)bits;
    return (int16_t)(s ^ ((s >> 15) & 0x7FFF));
}

static inline float bf16_value(int16_t key) {  /* inverse of order_key, to float */
    const uint32_t bits = (uint32_t)(uint16_t)(key ^ ((key >> 15) & 0x7FFF)) << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* A key at or below that of every bfloat16 value >= v (v truncated to bfloat16, then one step lower). */
static inline int16_t lower_key(float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    const int16_t k = order_key((uint16_t)(bits >> 16));
    return k > INT16_MIN ? (int16_t)(k - 1) : k;
}

#include "_nearest_scan.h"  /* exact(): <x, c> in double, a fixed summation order */

/* Pass 1 over a row: each full block's per-lane maxima (order keys) and the row's maximum key.
 * One pass because a score row does not stay in cache; pass 2 only revisits the blocks that can hold the
 * answer. m is a local array: int16 may alias the uint16 row, which would force a store per vector. */
static inline int16_t row_max_keys(const uint16_t *row, int64_t c, int16_t (*block_lanes)[LANES]) {
    const int64_t full_blocks = c / BLOCK;
    int16_t lane_max[LANES];
    for (int l = 0; l < LANES; l++) lane_max[l] = INT16_MIN;
    for (int64_t b = 0; b < full_blocks; b++) {
        int16_t m[LANES];
        for (int l = 0; l < LANES; l++) m[l] = INT16_MIN;
        for (int64_t j = b * BLOCK; j < (b + 1) * BLOCK; j += LANES)
            for (int l = 0; l < LANES; l++) {
                const int16_t k = order_key(row[j + l]);
                m[l] = k > m[l] ? k : m[l];
            }
        for (int l = 0; l < LANES; l++) {
            block_lanes[b][l] = m[l];
            lane_max[l] = m[l] > lane_max[l] ? m[l] : lane_max[l];
        }
    }
    int16_t best = INT16_MIN;
    for (int l = 0; l < LANES; l++) best = lane_max[l] > best ? lane_max[l] : best;
    for (int64_t j = full_blocks * BLOCK; j < c; j++) best = order_key(row[j]) > best ? order_key(row[j]) : best;
    return best;
}

/* Exact <x, cent[col]> + bias[col] for one candidate; keeps the best (the first on ties). */
static inline void rescore(const float *xr, const float *cent, const float *bias, int64_t col, int64_t dim,
                           double *best, int64_t *arg) {
    const double s = exact(xr, cent + col * dim, dim) + (bias ? (double)bias[col] : 0.0);
    if (s > *best) { *best = s; *arg = col; }
}

/* Nearest centroid from a bfloat16 score block, made exact by rescoring.
 *
 * scores[r, j] is a bfloat16 GEMM result approximating t[r, j] = <x[r], cent[j]> + bias[j] - offset (bias may
 * be NULL: zero; offset is any constant, which does not change the order), within err[r]: the caller's bound
 * for the rounding of the inputs and of the output. Every column whose score could still be the true maximum
 * (score >= max - 2 err) is rescored exactly in double precision from the float32 inputs; the largest wins,
 * the first one on ties. Typically one or two columns per row.
 * out[r]: the column; best[r] (if not NULL): its exact <x, c> + bias. Returns the total number of rescored
 * columns, -1 on bad sizes, -2 out of memory. */
CLONES
int64_t embedctl_nearest_bf16(const uint16_t *scores, int64_t n, int64_t c, const float *x, int64_t dim,
                              const float *cent, const float *bias, const float *err, int64_t *out, float *best) {
    if (c < 1 || dim < 1) return -1;
    const int64_t full_blocks = c / BLOCK;
    int16_t(*block_lanes)[LANES] = malloc((size_t)(full_blocks > 0 ? full_blocks : 1) * sizeof *block_lanes);
    if (!block_lanes) return -2;
    int64_t rescored = 0;
    for (int64_t r = 0; r < n; r++) {
        const uint16_t *row = scores + r * c;
        const float *xr = x + r * dim;
        const float top = bf16_value(row_max_keys(row, c, block_lanes));
        const int16_t threshold = lower_key(top - 2.0f * err[r] - 1e-6f * (1.0f + fabsf(top)));
        double best_exact = -INFINITY;
        int64_t arg = 0;
        for (int64_t j = 0; j < c; j += LANES) {
            const int64_t end = j + LANES < c ? j + LANES : c;
            if (j < full_blocks * BLOCK) {
                if (j % BLOCK == 0) {  /* skip whole blocks, then whole vectors, with no candidate */
                    int hit = 0;
                    for (int l = 0; l < LANES; l++) hit |= block_lanes[j / BLOCK][l] >= threshold;
                    if (!hit) { j += BLOCK - LANES; continue; }
                }
                int hit = 0;
                for (int l = 0; l < LANES; l++) hit |= order_key(row[j + l]) >= threshold;
                if (!hit) continue;
            }
            for (int64_t col = j; col < end; col++)
                if (order_key(row[col]) >= threshold) {
                    rescore(xr, cent, bias, col, dim, &best_exact, &arg);
                    rescored++;
                }
        }
        out[r] = arg;
        if (best) best[r] = (float)best_exact;
    }
    free(block_lanes);
    return rescored;
}

/* packed[i] = bucket indices of (emb[i] - centroids[codes[i]]), nbits each, first dimension in the most
 * significant bits of byte 0. Bucket index = how many cutoffs the value exceeds (torch.bucketize, right=False). */
CLONES
int embedctl_compress(const float *emb, int64_t n, int64_t dim, const float *centroids, const int32_t *codes,
                      const float *cutoffs, int nbits, uint8_t *packed) {
    if (nbits != 1 && nbits != 2 && nbits != 4) return -1;
    if ((dim * nbits) % 8 || dim > 4096) return -2;
    const int num_cutoffs = (1 << nbits) - 1, per_byte = 8 / nbits;
    const int64_t bytes = dim * nbits / 8;
    uint8_t bucket[4096];
    for (int64_t i = 0; i < n; i++) {
        const float *x = emb + i * dim, *cent = centroids + (int64_t)codes[i] * dim;
        for (int64_t d = 0; d < dim; d++) {
            const float residual = x[d] - cent[d];
            uint8_t b = 0;
            for (int k = 0; k < num_cutoffs; k++) b += residual > cutoffs[k];
            bucket[d] = b;
        }
        uint8_t *row = packed + i * bytes;
        for (int64_t byte = 0; byte < bytes; byte++) {
            uint8_t v = 0;
            for (int k = 0; k < per_byte; k++) v = (uint8_t)((v << nbits) | bucket[byte * per_byte + k]);
            row[byte] = v;
        }
    }
    return 0;
}

/* out[i] = |centroids[codes[i]] + decoded residual|, where byte value v of packed row i decodes to the
 * 8/nbits floats table[v * per_byte ...] (the codec's decode table). Sum of squares in double. */
int embedctl_decoded_norms(const float *centroids, int64_t dim, const int32_t *codes, const uint8_t *packed,
                           int64_t n, const float *table, int nbits, float *out) {
    if (nbits != 1 && nbits != 2 && nbits != 4) return -1;
    if ((dim * nbits) % 8) return -2;
    const int per_byte = 8 / nbits;
    const int64_t bytes = dim * nbits / 8;
    for (int64_t i = 0; i < n; i++) {
        const float *cent = centroids + (int64_t)codes[i] * dim;
        const uint8_t *row = packed + i * bytes;
        double sum = 0.0;
        for (int64_t byte = 0; byte < bytes; byte++) {
            const float *decoded = table + (int64_t)row[byte] * per_byte;
            for (int k = 0; k < per_byte; k++) {
                const float v = cent[byte * per_byte + k] + decoded[k];
                sum += (double)v * v;
            }
        }
        out[i] = (float)sqrt(sum);
    }
    return 0;
}
