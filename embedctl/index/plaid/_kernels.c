/* PLAID indexing kernels, built at install time (setup.py, optional) and called through ctypes by
 * embedctl/index/plaid/kernels.py for the native backend. Plain C99, no Python API: when no compiler is
 * available the extension is skipped and the reference backend (reference.py) runs instead (same results).
 * The nearest-centroid kernels are in _kernels_i16.c (AVX2) and _kernels_amx.c (AMX).
 *
 * - embedctl_compress: residual = vector - its centroid, bucket index per dimension, bit packing.
 * - embedctl_decoded_norms: L2 norm of centroid + decoded residual, from the codes and packed bytes.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* gcc on x86-64 Linux: one copy per instruction set, picked at load time (AVX-512 runs 32 int16 lanes per
 * instruction, the SSE2 baseline 8). Elsewhere the plain version, which compilers still vectorise. */
#if !defined(EMBEDCTL_PORTABLE) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define CLONES
#endif

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
