/* What the PLAID search kernels (_search_kernels.c, _warp_kernels.c, _search_amx.c: one library) share. */
#ifndef EMBEDCTL_SEARCH_COMMON_H
#define EMBEDCTL_SEARCH_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_LQ 4096 /* query tokens */
#define MAX_TOP 1024 /* the most columns (rows) a top-m selection keeps */

/* gcc on x86-64 Linux: one copy per instruction set, picked at load time; elsewhere (or with
 * -DEMBEDCTL_PORTABLE, which the tests compile with to check that build) the plain version. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__) && \
    !defined(EMBEDCTL_PORTABLE)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#define HAVE_AVX512_PATHS 1 /* functions with target("avx512f") and a run-time check of the CPU */
#include <immintrin.h>
#else
#define CLONES
#endif

/* OpenMP (setup.py builds with -fopenmp where the compiler has it): the kernels that split one query across
 * threads take a thread count; without OpenMP the pragmas are ignored and they run on the calling thread,
 * with the same results. */
#ifdef _OPENMP
#include <omp.h>
#define OMP_HAVE 1
#define OMP_THREAD_NUM() omp_get_thread_num()
#else
#define OMP_HAVE 0
#define OMP_THREAD_NUM() 0
#endif
#if defined(__x86_64__) || defined(__i386__)
#define SPIN_PAUSE() __builtin_ia32_pause() /* a spin-wait's pause: the other hyperthread keeps the core */
#else
#define SPIN_PAUSE() ((void)0)
#endif
#define OMP_PRAGMA(x) _Pragma(#x)

/* One document token j in a MaxSim: best[q] = max(best[q], (centroid_part[q] + residual_part[q]) * (1 / norm)),
 * or the value itself for the document's first token (first != 0). Shared by every MaxSim entry point. One
 * division per token, not lq: the vector divisions were 17% of the final stage's time (perf, SciFact); the
 * product is within an ulp of the quotient. */
static inline void fold_token(float *best, int first, const float *centroid_part, const float *residual_part,
                              float norm, int64_t lq) {
    const float inv = 1.0f / (norm > 1e-12f ? norm : 1e-12f);
    if (first) {
        for (int64_t q = 0; q < lq; q++) best[q] = (centroid_part[q] + residual_part[q]) * inv;
        return;
    }
    for (int64_t q = 0; q < lq; q++) {
        const float value = (centroid_part[q] + residual_part[q]) * inv;
        best[q] = value > best[q] ? value : best[q];
    }
}

static inline float sum_q(const float *best, int64_t lq) {  /* q = 0, 1, ... like numpy's sum over axis 0 */
    float total = 0.0f;
    for (int64_t q = 0; q < lq; q++) total += best[q];
    return total;
}

/* The value of rank k (0-based, ascending) among a[0 .. len - 1], which it permutes: Hoare's selection with a
 * median-of-three pivot (after a partition, a[lo .. j] <= pivot <= a[i .. hi] and the values between equal it). */
static inline float kth_smallest(float *a, int64_t len, int64_t k) {
    int64_t lo = 0, hi = len - 1;
    while (hi > lo) {
        const float x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi];
        const float pivot = x < y ? (y < z ? y : x < z ? z : x) : (x < z ? x : y < z ? z : y);
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) {
                const float t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return a[k];
    }
    return a[k];
}

/* The stored norms are float16: exact widening (a subnormal is its mantissa times 2^-24, exact in float). */
static inline float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    union { uint32_t bits; float f; } u;
    if (exp == 0) {
        u.f = (float)mant * 0x1p-24f;
        u.bits |= sign;
    } else {
        u.bits = sign | (exp == 0x1f ? 0x7f800000u | (mant << 13) : ((exp + 112u) << 23) | (mant << 13));
    }
    return u.f;
}

#endif
