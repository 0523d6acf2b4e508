/* The bf16 encoder's residual LayerNorm in one pass (embedctl/models/bf16_norm.py; built into the
 * _bf16_attention library with the attention kernel): BERT's "LayerNorm(dense(.) + residual)" after each
 * attention output and feed-forward product, from the product's bfloat16 output and the float32 residual to the
 * new float32 residual and its bfloat16 copy, the next product's input.
 *
 * Why: torch runs it as three passes over a [B, L, H] tensor (the add, promoting to float32; layer_norm; the
 * cast to bfloat16), ~28 bytes of memory traffic a value against 12 here; for a batch of 32 SciFact documents
 * (180 tokens, H 384) on one core of a 2-core AMX host 1.4-1.6 ms against 3.1-10.3 for torch's (a /tmp
 * harness and bench/bf16_attention.py --fusion norm, bf16_norm.json: torch's time differed between the two).
 *
 *   y    bfloat16 [rows, H]   the product's output (bias added)
 *   x    float32  [rows, H]   the residual, overwritten with LayerNorm(y + x) * weight + bias
 *   xb   bfloat16 [rows, H]   that result rounded to bfloat16 (nearest, ties to even), as torch's .to() rounds
 *
 * Arithmetic per row, in float32: h = y + x (exact conversion of y, one rounding as torch's add), mean and
 * variance in two passes over h held in registers (H <= 1024, a multiple of 16), (h - mean) / sqrt(var + eps)
 * times weight plus bias. torch sums the moments in another order: the results agree to a few float32 ulps, and
 * a bfloat16 copy may then round the other way (tests/models/test_bf16_norm.py). Rows are independent: the same
 * bits on any thread count. Needs AVX-512 F/BW and AVX512_BF16 (embedctl_bf16_attention_ready()).
 */
#include <math.h>
#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

int embedctl_residual_layer_norm(const uint16_t *y, float *x, int64_t rows, int64_t width, const float *weight,
                                 const float *bias, float eps, uint16_t *xb, int nthreads);

#if !defined(EMBEDCTL_PORTABLE) && defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 10) || \
                            (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10))
#include <immintrin.h>
#define TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

int embedctl_bf16_attention_ready(void);

TARGET static inline __m512 widen_bf16(const uint16_t *p) {  /* 16 bfloat16 -> float32 (exact) */
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

TARGET static void norm_row(const uint16_t *y, float *x, int64_t width, const float *weight, const float *bias,
                            float eps, uint16_t *xb) {
    __m512 h[64];
    const int64_t n = width / 16;
    __m512 sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i++) {
        h[i] = _mm512_add_ps(widen_bf16(y + 16 * i), _mm512_loadu_ps(x + 16 * i));
        sum = _mm512_add_ps(sum, h[i]);
    }
    const __m512 mean = _mm512_set1_ps(_mm512_reduce_add_ps(sum) / (float)width);
    __m512 squares = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i++) {
        const __m512 d = _mm512_sub_ps(h[i], mean);
        squares = _mm512_fmadd_ps(d, d, squares);
    }
    const __m512 scale = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(squares) / (float)width + eps));
    for (int64_t i = 0; i < n; i++) {
        const __m512 out = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_sub_ps(h[i], mean), scale),
                                           _mm512_loadu_ps(weight + 16 * i), _mm512_loadu_ps(bias + 16 * i));
        _mm512_storeu_ps(x + 16 * i, out);
        _mm256_storeu_si256((__m256i *)(xb + 16 * i), (__m256i)_mm512_cvtneps_pbh(out));
    }
}

/* 0, or -1 (width not a multiple of 16 in 16..1024, rows < 0, or a CPU without the instructions). nthreads > 1:
 * the rows split across that many threads (OpenMP; ignored without it). */
int embedctl_residual_layer_norm(const uint16_t *y, float *x, int64_t rows, int64_t width, const float *weight,
                                 const float *bias, float eps, uint16_t *xb, int nthreads) {
    if (rows < 0 || width < 16 || width > 1024 || width % 16 || !embedctl_bf16_attention_ready()) return -1;
    (void)nthreads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1 && rows > 64)
#endif
    for (int64_t r = 0; r < rows; r++)
        norm_row(y + r * width, x + r * width, width, weight, bias, eps, xb + r * width);
    return 0;
}
#else /* not x86-64 gcc/clang >= 10: no kernel, torch's three passes */
int embedctl_residual_layer_norm(const uint16_t *y, float *x, int64_t rows, int64_t width, const float *weight,
                                 const float *bias, float eps, uint16_t *xb, int nthreads) {
    (void)y; (void)x; (void)rows; (void)width; (void)weight; (void)bias; (void)eps; (void)xb; (void)nthreads;
    return -1;
}
#endif
