/* Self-attention of short bfloat16 sequences (a query: 32 tokens) in one call, for the bf16 encode backend's
 * fused query/key/value projection (embedctl/models/short_attention.py, native_bert.FusedQKVAttention).
 *
 * torch's scaled_dot_product_attention spends ~50 us on a 32-token, 12-head MiniLM layer on one Zen 5 core,
 * almost all of it fixed cost (the arithmetic is ~0.8 M multiply-adds), and the views around it copy the output
 * once more; this kernel takes the projection's output as it lies and writes the attention output in the
 * layout the next projection reads, in ~12 us.
 *
 *   qkv  bfloat16 [B, L, 3, H, D]  (the fused projection's [B, L, 3 * H * D] output)
 *   keep uint8 [B, L] or NULL      (1: a key to attend to; NULL: all)
 *   out  bfloat16 [B, L, H, D]
 *   out[b, i, h] = sum_j softmax_j(q_i . k_j / sqrt(D), kept keys) v_j
 *
 * Arithmetic: q . k by vdpbf16ps (exact products of the bfloat16 inputs, float32 sums), the softmax in float32
 * (exp by Cody-Waite reduction and a degree-6 polynomial, within ~2 ulp of float32), p . v in float32
 * multiply-adds, the output rounded to bfloat16 (nearest, ties to even) as SDPA's is: within a bfloat16
 * rounding of SDPA's output (tests/models/test_short_attention.py). The same bits on any thread count (each
 * (sequence, head) is computed whole by one thread).
 *
 * Needs AVX-512 F/BW and AVX512_BF16 (embedctl_short_attention_ready() says at run time), L <= 64 and
 * D in {32, 64}; elsewhere the entry point returns -1 and the caller keeps SDPA. Compiled for x86-64 with gcc or
 * clang >= 10 (target attributes); elsewhere both entry points exist and report "unavailable".
 */
#include <math.h>
#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_LEN 64 /* keys per sequence: 4 registers of scores */

int embedctl_short_attention_ready(void);
int embedctl_short_attention(const uint16_t *qkv, int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                             const uint8_t *keep, uint16_t *out, int nthreads);

#if defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 10) || \
                            (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10))
#include <immintrin.h>
#define TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define INLINE TARGET __attribute__((always_inline)) static inline

int embedctl_short_attention_ready(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
}

/* exp(x) for x <= 0 (a softmax after subtracting the row's maximum; -inf gives 0): x = n ln2 + r with ln2 in
 * two parts (Cody-Waite), exp(r) = 1 + r + r^2 P(r) (Cephes expf's polynomial), times 2^n. */
INLINE __m512 exp_nonpositive(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f)); /* exp(-87) ~ 1.6e-38: no subnormal results */
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

INLINE __m512 load_bf16(const uint16_t *p) { /* 16 bfloat16 -> float32 (exact) */
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

INLINE void store_bf16(uint16_t *p, __m512 v) { /* 16 float32 -> bfloat16, nearest, ties to even (finite inputs) */
    __m512i bits = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    bits = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), odd), 16);
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(bits));
}

/* One head's keys and values, laid out for the rows: keys as bfloat16 pairs [D / 2][blocks of 16 keys] (the
 * second operand of vdpbf16ps: lane j holds key j's dims 2m, 2m + 1), values as float32 rows, and each key's
 * additive mask (0, or -inf for a padding key and the lanes past len). */
struct head_state {
    __m512i key_pairs[32][MAX_LEN / 16];
    float values[MAX_LEN][64] __attribute__((aligned(64)));
    __m512 bias[MAX_LEN / 16];
};

INLINE void load_head(const uint16_t *qkv, int64_t len, int64_t heads, const int64_t dim, int64_t h,
                      const uint8_t *keep, const int64_t blocks, struct head_state *s) {
    const int64_t row = 3 * heads * dim;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const uint16_t *keys = qkv + heads * dim + h * dim;
    for (int64_t c = 0; c < blocks; c++) {
        const __m512i j = _mm512_add_epi32(lane, _mm512_set1_epi32((int)(16 * c)));
        const __mmask16 present = _mm512_cmplt_epi32_mask(j, _mm512_set1_epi32((int)len));
        __mmask16 kept = present;
        if (keep != NULL)
            for (int t = 0; t < 16 && 16 * c + t < len; t++)
                if (!keep[16 * c + t]) kept &= (__mmask16)~(1u << t);
        s->bias[c] = _mm512_mask_blend_ps(kept, _mm512_set1_ps(-INFINITY), _mm512_setzero_ps());
        const __m512i offsets = _mm512_mullo_epi32(j, _mm512_set1_epi32((int)(row * 2))); /* bytes */
        for (int64_t m = 0; m < dim / 2; m++)
            s->key_pairs[m][c] = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), present, offsets, keys + 2 * m, 1);
    }
    for (int64_t j = 0; j < len; j++) {
        const uint16_t *v = qkv + j * row + 2 * heads * dim + h * dim;
        for (int64_t c = 0; c < dim / 16; c++) _mm512_store_ps(&s->values[j][16 * c], load_bf16(v + 16 * c));
    }
}

/* Query rows i0 .. i0 + R - 1 of one head, side by side: R rows' multiply-add chains are independent, where one
 * row alone waits on each one's latency (4x faster for R = 4). */
INLINE void attend_rows(const uint16_t *qkv, int64_t len, int64_t heads, const int64_t dim, int64_t h,
                        const struct head_state *s, const int64_t blocks, float scale, int64_t i0, const int R,
                        uint16_t *out) {
    const int64_t row = 3 * heads * dim;
    __m512 scores[4][MAX_LEN / 16];
    for (int r = 0; r < R; r++)
        for (int64_t c = 0; c < blocks; c++) scores[r][c] = _mm512_setzero_ps();
    for (int64_t m = 0; m < dim / 2; m++)
        for (int r = 0; r < R; r++) {
            const uint32_t *q = (const uint32_t *)(qkv + (i0 + r) * row + h * dim);
            const __m512bh pair = (__m512bh)_mm512_set1_epi32((int)q[m]);
            for (int64_t c = 0; c < blocks; c++)
                scores[r][c] = _mm512_dpbf16_ps(scores[r][c], pair, (__m512bh)s->key_pairs[m][c]);
        }
    float probs[4][MAX_LEN] __attribute__((aligned(64)));
    __m512 inv_sum[4];
    for (int r = 0; r < R; r++) {
        __m512 top = _mm512_set1_ps(-INFINITY);
        for (int64_t c = 0; c < blocks; c++) {
            scores[r][c] = _mm512_add_ps(_mm512_mul_ps(scores[r][c], _mm512_set1_ps(scale)), s->bias[c]);
            top = _mm512_max_ps(top, scores[r][c]);
        }
        const __m512 most = _mm512_set1_ps(_mm512_reduce_max_ps(top));
        __m512 sum = _mm512_setzero_ps();
        for (int64_t c = 0; c < blocks; c++) {
            const __m512 e = exp_nonpositive(_mm512_sub_ps(scores[r][c], most));
            sum = _mm512_add_ps(sum, e);
            _mm512_store_ps(&probs[r][16 * c], e);
        }
        inv_sum[r] = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    }
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int64_t c = 0; c < dim / 16; c++) acc[r][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < len; j++)
        for (int r = 0; r < R; r++) {
            const __m512 p = _mm512_set1_ps(probs[r][j]);
            for (int64_t c = 0; c < dim / 16; c++)
                acc[r][c] = _mm512_fmadd_ps(p, _mm512_load_ps(&s->values[j][16 * c]), acc[r][c]);
        }
    for (int r = 0; r < R; r++)
        for (int64_t c = 0; c < dim / 16; c++)
            store_bf16(out + ((i0 + r) * heads + h) * dim + 16 * c, _mm512_mul_ps(acc[r][c], inv_sum[r]));
}

INLINE void attend_head_t(const uint16_t *qkv, int64_t len, int64_t heads, const int64_t dim, int64_t h,
                          const uint8_t *keep, const int64_t blocks, uint16_t *out) {
    struct head_state s;
    const float scale = 1.0f / sqrtf((float)dim);
    load_head(qkv, len, heads, dim, h, keep, blocks, &s);
    int64_t i = 0;
    for (; i + 4 <= len; i += 4) attend_rows(qkv, len, heads, dim, h, &s, blocks, scale, i, 4, out);
    for (; i < len; i++) attend_rows(qkv, len, heads, dim, h, &s, blocks, scale, i, 1, out);
}

/* One copy per (head_dim, blocks of 16 keys), so that every loop above has a constant trip count. */
#define ATTEND_HEAD(name, dim, blocks)                                                                             \
    TARGET static void name(const uint16_t *qkv, int64_t len, int64_t heads, int64_t h, const uint8_t *keep,     \
                            uint16_t *out) {                                                                      \
        attend_head_t(qkv, len, heads, dim, h, keep, blocks, out);                                                \
    }
ATTEND_HEAD(head32_1, 32, 1) ATTEND_HEAD(head32_2, 32, 2) ATTEND_HEAD(head32_3, 32, 3) ATTEND_HEAD(head32_4, 32, 4)
ATTEND_HEAD(head64_1, 64, 1) ATTEND_HEAD(head64_2, 64, 2) ATTEND_HEAD(head64_3, 64, 3) ATTEND_HEAD(head64_4, 64, 4)

typedef void (*attend_head_fn)(const uint16_t *, int64_t, int64_t, int64_t, const uint8_t *, uint16_t *);

/* 0, or -1 (a shape outside len <= 64, head_dim in {32, 64}; or a CPU without the instructions), -2 (a sequence
 * with no key kept: SDPA's answer there is NaN, left to it). nthreads > 1: the (sequence, head) pairs split
 * across that many threads (OpenMP; ignored without it). */
int embedctl_short_attention(const uint16_t *qkv, int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                             const uint8_t *keep, uint16_t *out, int nthreads) {
    static const attend_head_fn by_shape[2][4] = {{head32_1, head32_2, head32_3, head32_4},
                                                  {head64_1, head64_2, head64_3, head64_4}};
    if (len < 1 || len > MAX_LEN || (head_dim != 32 && head_dim != 64) || heads < 1 || batch < 0 ||
        !embedctl_short_attention_ready())
        return -1;
    if (keep != NULL)
        for (int64_t b = 0; b < batch; b++) {
            int any = 0;
            for (int64_t j = 0; j < len; j++) any |= keep[b * len + j];
            if (!any) return -2;
        }
    const attend_head_fn attend = by_shape[head_dim == 64][(len + 15) / 16 - 1];
    const int64_t items = batch * heads, seq = len * heads * head_dim;
    (void)nthreads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1 && items > 1)
#endif
    for (int64_t t = 0; t < items; t++) {
        const int64_t b = t / heads, h = t % heads;
        attend(qkv + b * 3 * seq, len, heads, h, keep == NULL ? NULL : keep + b * len, out + b * seq);
    }
    return 0;
}

#else /* not x86-64 gcc/clang >= 10: no kernel, SDPA everywhere */
int embedctl_short_attention_ready(void) { return 0; }
int embedctl_short_attention(const uint16_t *qkv, int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                             const uint8_t *keep, uint16_t *out, int nthreads) {
    (void)qkv; (void)batch; (void)len; (void)heads; (void)head_dim; (void)keep; (void)out; (void)nthreads;
    return -1;
}
#endif
