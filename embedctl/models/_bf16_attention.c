/* Self-attention of bfloat16 sequences of up to 512 tokens (a query: 32; a document: up to doc_max_length) in
 * one call, for the bf16 encode backend's fused query/key/value projection (embedctl/models/bf16_attention.py,
 * native_bert.FusedQKVAttention).
 *
 * torch's scaled_dot_product_attention spends ~50 us on a 32-token, 12-head MiniLM layer on one Zen 5 core,
 * almost all of it fixed cost (the arithmetic is ~0.8 M multiply-adds), and the views around it copy the output
 * once more; on a batch of 32 documents of 180 tokens its bfloat16 path runs at ~40 G multiply-adds a second
 * (a third of a document's encoding). This kernel takes the projection's output as it lies and writes the
 * attention output in the layout the next projection reads: ~12 us for the query layer, ~3x SDPA's speed for
 * the documents.
 *
 *   qkv  bfloat16 [B, L, 3, H, D]  (the fused projection's [B, L, 3 * H * D] output)
 *   keep uint8 [B, L] or NULL      (1: a key to attend to; NULL: all)
 *   out  bfloat16 [B, L, H, D]
 *   out[b, i, h] = sum_j softmax_j(q_i . k_j / sqrt(D), kept keys) v_j
 *
 * Arithmetic: q . k by vdpbf16ps (exact products of the bfloat16 inputs, float32 sums), the softmax in float32
 * (exp by Cody-Waite reduction and a degree-6 polynomial, within ~2 ulp of float32), p . v in float32
 * multiply-adds, the output rounded to bfloat16 (nearest, ties to even) as SDPA's is: within a bfloat16
 * rounding of SDPA's output (tests/models/test_bf16_attention.py). The same bits on any thread count (each
 * (sequence, head) is computed whole by one thread).
 *
 * Per (sequence, head): its keys gathered as bfloat16 pairs and its values widened to float32 into a scratch
 * (heap, ~40 KiB at 180 tokens), then the rows four at a time: scores against 64 keys at a time, the softmax
 * over the row, p . v with the four rows' sums side by side (one row alone waits on each multiply-add).
 *
 * Needs AVX-512 F/BW and AVX512_BF16 (embedctl_bf16_attention_ready() says at run time), L <= 512 and
 * D in {32, 64}; elsewhere the entry point returns -1 and the caller keeps SDPA. Compiled for x86-64 with gcc or
 * clang >= 10 (target attributes); elsewhere both entry points exist and report "unavailable".
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_LEN 512 /* tokens per sequence (BERT's positions) */

int embedctl_bf16_attention_ready(void);
int embedctl_bf16_attention(const uint16_t *qkv, int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                             const uint8_t *keep, uint16_t *out, int nthreads);

#if !defined(EMBEDCTL_PORTABLE) && defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 10) || \
                            (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10))
#include <immintrin.h>
#define TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define INLINE TARGET __attribute__((always_inline)) static inline

int embedctl_bf16_attention_ready(void) {
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

/* One (sequence, head)'s scratch (heap: ~40 KiB at len 180, dim 32): keys as bfloat16 pairs [D / 2][blocks of
 * 16 keys] (the second operand of vdpbf16ps: lane j holds key j's dims 2m, 2m + 1), values as float32 rows
 * [len][D], each key's additive mask (0, or -inf for a padding key and the lanes past len), and R rows' scores
 * then probabilities [R][blocks * 16]. */
struct head_scratch {
    __m512i *key_pairs;
    float *values, *bias, *scores;
};

static size_t scratch_bytes(int64_t len, int64_t dim) {
    const int64_t blocks = (len + 15) / 16;
    return (size_t)(64 * (dim / 2) * blocks + 4 * len * dim + 64 /* alignment after the values */ + 64 * blocks +
                    4 * 64 * blocks);
}

static struct head_scratch carve(void *base, int64_t len, int64_t dim) {
    const int64_t blocks = (len + 15) / 16;
    char *p = base;
    struct head_scratch s;
    s.key_pairs = (__m512i *)p;
    p += 64 * (dim / 2) * blocks;
    s.values = (float *)p;
    p += 4 * len * dim;
    p = (char *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
    s.bias = (float *)p;
    p += 64 * blocks;
    s.scores = (float *)p;
    return s;
}

INLINE void load_head(const uint16_t *qkv, int64_t len, int64_t heads, const int64_t dim, int64_t h,
                      const uint8_t *keep, int64_t blocks, const struct head_scratch *s) {
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
        _mm512_store_ps(s->bias + 16 * c, _mm512_mask_blend_ps(kept, _mm512_set1_ps(-INFINITY), _mm512_setzero_ps()));
        const __m512i offsets = _mm512_mullo_epi32(j, _mm512_set1_epi32((int)(row * 2))); /* bytes */
        for (int64_t m = 0; m < dim / 2; m++)
            s->key_pairs[m * blocks + c] =
                _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), present, offsets, keys + 2 * m, 1);
    }
    for (int64_t j = 0; j < len; j++) {
        const uint16_t *v = qkv + j * row + 2 * heads * dim + h * dim;
        for (int64_t c = 0; c < dim / 16; c++) _mm512_storeu_ps(s->values + j * dim + 16 * c, load_bf16(v + 16 * c));
    }
}

/* Scores of rows i0 .. i0 + R - 1 against key blocks c0 .. c0 + CB - 1, scaled and masked, into the scratch:
 * R x CB independent vdpbf16ps chains (one row alone waits on each one's latency). */
INLINE void score_chunk(const uint16_t *qkv, int64_t row, const int64_t dim, int64_t h, const struct head_scratch *s,
                        int64_t blocks, float scale, int64_t i0, const int R, int64_t c0, const int CB) {
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < CB; c++) acc[r][c] = _mm512_setzero_ps();
    for (int64_t m = 0; m < dim / 2; m++)
        for (int r = 0; r < R; r++) {
            const uint32_t *q = (const uint32_t *)(qkv + (i0 + r) * row + h * dim);
            const __m512bh pair = (__m512bh)_mm512_set1_epi32((int)q[m]);
            for (int c = 0; c < CB; c++)
                acc[r][c] = _mm512_dpbf16_ps(acc[r][c], pair, (__m512bh)s->key_pairs[m * blocks + c0 + c]);
        }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < CB; c++)
            _mm512_store_ps(s->scores + r * 16 * blocks + 16 * (c0 + c),
                            _mm512_add_ps(_mm512_mul_ps(acc[r][c], _mm512_set1_ps(scale)),
                                          _mm512_load_ps(s->bias + 16 * (c0 + c))));
}

/* Rows i0 .. i0 + R - 1: scores (key blocks 4 at a time), softmax in place, then p . v with R rows' sums side by
 * side. */
INLINE void attend_rows(const uint16_t *qkv, int64_t len, int64_t heads, const int64_t dim, int64_t h,
                        const struct head_scratch *s, int64_t blocks, float scale, int64_t i0, const int R,
                        uint16_t *out) {
    const int64_t row = 3 * heads * dim;
    int64_t c0 = 0;
    for (; c0 + 4 <= blocks; c0 += 4) score_chunk(qkv, row, dim, h, s, blocks, scale, i0, R, c0, 4);
    switch (blocks - c0) {
    case 3: score_chunk(qkv, row, dim, h, s, blocks, scale, i0, R, c0, 3); break;
    case 2: score_chunk(qkv, row, dim, h, s, blocks, scale, i0, R, c0, 2); break;
    case 1: score_chunk(qkv, row, dim, h, s, blocks, scale, i0, R, c0, 1); break;
    default: break;
    }
    float inv_sum[4];
    for (int r = 0; r < R; r++) {
        float *sc = s->scores + r * 16 * blocks;
        __m512 top = _mm512_set1_ps(-INFINITY);
        for (int64_t c = 0; c < blocks; c++) top = _mm512_max_ps(top, _mm512_load_ps(sc + 16 * c));
        const __m512 most = _mm512_set1_ps(_mm512_reduce_max_ps(top));
        __m512 sum = _mm512_setzero_ps();
        for (int64_t c = 0; c < blocks; c++) {
            const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_load_ps(sc + 16 * c), most));
            sum = _mm512_add_ps(sum, e);
            _mm512_store_ps(sc + 16 * c, e);
        }
        inv_sum[r] = 1.0f / _mm512_reduce_add_ps(sum);
    }
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int64_t c = 0; c < dim / 16; c++) acc[r][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < len; j++)
        for (int r = 0; r < R; r++) {
            const __m512 p = _mm512_set1_ps(s->scores[r * 16 * blocks + j]);
            for (int64_t c = 0; c < dim / 16; c++)
                acc[r][c] = _mm512_fmadd_ps(p, _mm512_loadu_ps(s->values + j * dim + 16 * c), acc[r][c]);
        }
    for (int r = 0; r < R; r++)
        for (int64_t c = 0; c < dim / 16; c++)
            store_bf16(out + ((i0 + r) * heads + h) * dim + 16 * c, _mm512_mul_ps(acc[r][c], _mm512_set1_ps(inv_sum[r])));
}

INLINE int attend_head_t(const uint16_t *qkv, int64_t len, int64_t heads, const int64_t dim, int64_t h,
                         const uint8_t *keep, uint16_t *out) {
    void *base = malloc(scratch_bytes(len, dim) + 64);
    if (base == NULL) return -3;
    const struct head_scratch s = carve((void *)(((uintptr_t)base + 63) & ~(uintptr_t)63), len, dim);
    const int64_t blocks = (len + 15) / 16;
    const float scale = 1.0f / sqrtf((float)dim);
    load_head(qkv, len, heads, dim, h, keep, blocks, &s);
    int64_t i = 0;
    for (; i + 4 <= len; i += 4) attend_rows(qkv, len, heads, dim, h, &s, blocks, scale, i, 4, out);
    for (; i < len; i++) attend_rows(qkv, len, heads, dim, h, &s, blocks, scale, i, 1, out);
    free(base);
    return 0;
}

/* One copy per head size, so that every loop over dims has a constant trip count. */
TARGET static int attend_head32(const uint16_t *qkv, int64_t len, int64_t heads, int64_t h, const uint8_t *keep,
                                uint16_t *out) {
    return attend_head_t(qkv, len, heads, 32, h, keep, out);
}
TARGET static int attend_head64(const uint16_t *qkv, int64_t len, int64_t heads, int64_t h, const uint8_t *keep,
                                uint16_t *out) {
    return attend_head_t(qkv, len, heads, 64, h, keep, out);
}

/* 0, or -1 (a shape outside len <= MAX_LEN, head_dim in {32, 64}; or a CPU without the instructions), -2 (a
 * sequence with no key kept: SDPA's answer there is NaN, left to it), -3 (no memory for the scratch).
 * nthreads > 1: the (sequence, head) pairs split across that many threads (OpenMP; ignored without it). */
int embedctl_bf16_attention(const uint16_t *qkv, int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                             const uint8_t *keep, uint16_t *out, int nthreads) {
    if (len < 1 || len > MAX_LEN || (head_dim != 32 && head_dim != 64) || heads < 1 || batch < 0 ||
        !embedctl_bf16_attention_ready())
        return -1;
    if (keep != NULL)
        for (int64_t b = 0; b < batch; b++) {
            int any = 0;
            for (int64_t j = 0; j < len; j++) any |= keep[b * len + j];
            if (!any) return -2;
        }
    int (*const attend)(const uint16_t *, int64_t, int64_t, int64_t, const uint8_t *, uint16_t *) =
        head_dim == 64 ? attend_head64 : attend_head32;
    const int64_t items = batch * heads, seq = len * heads * head_dim;
    int failed = 0;
    (void)nthreads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1 && items > 1) reduction(|: failed)
#endif
    for (int64_t t = 0; t < items; t++) {
        const int64_t b = t / heads, h = t % heads;
        failed |= attend(qkv + b * 3 * seq, len, heads, h, keep == NULL ? NULL : keep + b * len, out + b * seq) != 0;
    }
    return failed ? -3 : 0;
}

#else /* not x86-64 gcc/clang >= 10: no kernel, SDPA everywhere */
int embedctl_bf16_attention_ready(void) { return 0; }
int embedctl_bf16_attention(const uint16_t *qkv, int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                             const uint8_t *keep, uint16_t *out, int nthreads) {
    (void)qkv; (void)batch; (void)len; (void)heads; (void)head_dim; (void)keep; (void)out; (void)nthreads;
    return -1;
}
#endif
