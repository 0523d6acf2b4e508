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
 * significant bits of byte 0. Bucket index = how many cutoffs the value exceeds (torch.bucketize, right=False).
 * Two versions, the same bytes (tests/index/test_backends.py): plain C, and AVX-512 for dims in multiples of 16,
 * which counts each residual's cutoffs with masked adds and packs 16 buckets at once (2.8x the plain one on
 * 100,000 vectors at dim 128, nbits 2, one core of a 2-core AMX host: 14 against 40 ms). */
CLONES
static void compress_plain(const float *emb, int64_t n, int64_t dim, const float *centroids, const int32_t *codes,
                           const float *cutoffs, int nbits, uint8_t *packed) {
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
}


#if !defined(EMBEDCTL_PORTABLE) && defined(__x86_64__) && defined(__GNUC__) && \
    (defined(__clang__) ? __clang_major__ >= 8 : __GNUC__ >= 8)
#include <immintrin.h>
#define HAVE_COMPRESS_512 1
__attribute__((target("avx512f,avx512bw,avx512vl")))
static void compress_512(const float *emb, int64_t n, int64_t dim, const float *centroids, const int32_t *codes,
                         const float *cutoffs, int nbits, uint8_t *packed) {
    const int num_cutoffs = (1 << nbits) - 1, per_byte = 8 / nbits;
    const int64_t bytes = dim * nbits / 8;
    __m512 cut[15];
    for (int k = 0; k < num_cutoffs; k++) cut[k] = _mm512_set1_ps(cutoffs[k]);
    int32_t shift[16];  /* lane l: its bucket's place in its byte (the group's first dimension highest) */
    for (int l = 0; l < 16; l++) shift[l] = nbits * (per_byte - 1 - l % per_byte);
    const __m512i shifts = _mm512_loadu_si512((const void *)shift), one = _mm512_set1_epi32(1);
    for (int64_t i = 0; i < n; i++) {
        const float *x = emb + i * dim, *cent = centroids + (int64_t)codes[i] * dim;
        uint8_t *row = packed + i * bytes;
        for (int64_t d = 0; d < dim; d += 16) {
            const __m512 residual = _mm512_sub_ps(_mm512_loadu_ps(x + d), _mm512_loadu_ps(cent + d));
            __m512i bucket = _mm512_setzero_si512();  /* > is false for NaN, as in the plain version */
            for (int k = 0; k < num_cutoffs; k++)
                bucket = _mm512_mask_add_epi32(bucket, _mm512_cmp_ps_mask(residual, cut[k], _CMP_GT_OQ), bucket, one);
            uint64_t half[2];  /* 16 bytes, each one bucket already in its place: OR each byte group into one */
            _mm_storeu_si128((__m128i *)half, _mm512_cvtepi32_epi8(_mm512_sllv_epi32(bucket, shifts)));
            for (int h = 0; h < 2; h++) {
                uint64_t v = half[h];
                for (int s = 1; s < per_byte; s *= 2) v |= v >> (8 * s);
                for (int j = 0; j < 8 / per_byte; j++)
                    row[(d + 8 * h) / per_byte + j] = (uint8_t)(v >> (8 * per_byte * j));
            }
        }
    }
}
#endif

/* plain != 0: the plain version wherever (tests check both) */
int embedctl_compress(const float *emb, int64_t n, int64_t dim, const float *centroids, const int32_t *codes,
                      const float *cutoffs, int nbits, uint8_t *packed, int plain) {
    if (nbits != 1 && nbits != 2 && nbits != 4) return -1;
    if ((dim * nbits) % 8 || dim > 4096) return -2;
#ifdef HAVE_COMPRESS_512
    if (!plain && dim % 16 == 0 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl")) {
        compress_512(emb, n, dim, centroids, codes, cutoffs, nbits, packed);
        return 0;
    }
#endif
    (void)plain;
    compress_plain(emb, n, dim, centroids, codes, cutoffs, nbits, packed);
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
