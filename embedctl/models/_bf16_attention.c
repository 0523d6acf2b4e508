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
 * On a CPU with AMX tiles the same attention runs on them by default (the second half of this file: q . k and
 * p . v as tile products, the weights rounded to bfloat16 before p . v as SDPA's bfloat16 path does): on one core
 * of a 2-core AMX host a batch of 32 documents of 180 tokens in 0.54-0.56x the AVX-512 path's time, a 32-token
 * query layer in 0.65x (bench/results/x86_64-amx-2c/bf16_attention_amx.json).
 *
 * Needs AVX-512 F/BW and AVX512_BF16 (embedctl_bf16_attention_ready() says at run time), L <= 512 and
 * D in {32, 64}; elsewhere the entry point returns -1 and the caller keeps SDPA. Compiled for x86-64 with gcc or
 * clang >= 10 (target attributes; the AMX half with gcc >= 11 or clang >= 12 on Linux, _amx_common.h); elsewhere
 * the entry points exist and report "unavailable".
 */
#include "../index/plaid/_amx_common.h" /* first: it defines _GNU_SOURCE (the AMX kernels' shared header) */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_LEN 512 /* tokens per sequence (BERT's positions) */

int embedctl_bf16_attention_ready(void);
int embedctl_bf16_attention_amx_ready(void);
int embedctl_bf16_attention(const uint16_t *qkv, int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                             const uint8_t *keep, uint16_t *out, int nthreads, int path);

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

#ifdef EMBEDCTL_AMX
/* The same attention on AMX tiles (CPUs with AMX-BF16; embedctl_bf16_attention picks it there unless told
 * otherwise): q . k and p . v as bfloat16 tile products with float32 sums, the softmax as above. Where the
 * AVX-512 path sums p . v in float32 from float32 probabilities, this one rounds each row's exps to bfloat16
 * first (as SDPA's own bfloat16 path does before its p . v product): each weight moves by at most 2^-9 of
 * itself, so an output by at most 2^-9 sum_j p_j |v_j| / sum_j p_j more (tests/models/test_bf16_attention.py).
 * The row's sum is of the float32 exps. One (sequence, head) whole on one thread: the same bits on any count.
 *
 * Per (sequence, head), at lp = len rounded up to 32 (padding keys masked, padding queries and values zero):
 * its queries copied to rows of dim bfloat16 (an A tile reads 16 rows of 32), its keys laid out as B tiles
 * [lp / 16][dim / 32][16 dim pairs][16 keys][2] and its values as B tiles [lp / 32][dim / 16][16 key pairs]
 * [16 dims][2]; then 32 query rows at a time: their scores (four accumulators: 2 row tiles x 2 key blocks),
 * the softmax row by row into bfloat16 exps, p . v (2 row tiles x 2 blocks of 16 dims), each output row
 * divided by its sum and rounded to bfloat16. Scratch ~0.3 KiB a key at dim 32 (heap). */
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16")))
#define AMX_INLINE AMX_TARGET __attribute__((always_inline)) static inline

/* 2^x for x <= 0 (-inf gives 2^-126): x = n + f, |f| <= 1/2, 2^f by its Taylor polynomial of degree 5 (relative
 * error < 3e-6, far below the bfloat16 rounding of the result: 2^-9), times 2^n. 11 instructions where
 * exp_nonpositive takes 15: the softmax was half of this path's time. */
AMX_INLINE __m512 exp2_nonpositive(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-126.0f));
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(1.3333558146e-3f);                  /* ln2^5 / 120 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076e-3f));  /* ln2^4 / 24 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108665e-2f));  /* ln2^3 / 6 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650696e-1f));  /* ln2^2 / 2 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718056e-1f));  /* ln2 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

struct amx_scratch {
    uint16_t *q, *kt, *vt, *p;
    float *bias, *s, *o;
};

static size_t amx_scratch_bytes(int64_t lp, int64_t dim) {
    return (size_t)(3 * 2 * lp * dim + 4 * lp + 32 * 4 * lp + 32 * 2 * lp + 32 * 4 * dim + 7 * 64);
}

static struct amx_scratch amx_carve(void *base, int64_t lp, int64_t dim) {
    char *p = (char *)(((uintptr_t)base + 63) & ~(uintptr_t)63);
    struct amx_scratch s;
#define TAKE(field, type, bytes) do { s.field = (type *)p; p += ((bytes) + 63) / 64 * 64; } while (0)
    TAKE(q, uint16_t, 2 * lp * dim);
    TAKE(kt, uint16_t, 2 * lp * dim);
    TAKE(vt, uint16_t, 2 * lp * dim);
    TAKE(bias, float, 4 * lp);
    TAKE(s, float, 32 * 4 * lp);
    TAKE(p, uint16_t, 32 * 2 * lp);
    TAKE(o, float, 32 * 4 * dim);
#undef TAKE
    return s;
}

/* The head's queries, keys and values in their tile layouts, and each key's additive mask. */
AMX_INLINE void amx_load_head(const uint16_t *qkv, int64_t len, int64_t lp, int64_t heads, const int64_t dim,
                              int64_t h, const uint8_t *keep, const struct amx_scratch *s) {
    const int64_t row = 3 * heads * dim;
    for (int64_t i = 0; i < lp; i++) s->bias[i] = i < len && (keep == NULL || keep[i]) ? 0.0f : -INFINITY;
    for (int64_t i = len / 32 * 32; i < lp; i++) {  /* a last block of fewer than 32 queries, padded with zeros */
        if (i < len) memcpy(s->q + i * dim, qkv + i * row + h * dim, (size_t)dim * 2);
        else memset(s->q + i * dim, 0, (size_t)dim * 2);
    }
    /* keys: word (dim pair) m of key 16 c + n -> kt[c][m / 16][m % 16][n], by one gather per (block, pair) */
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const uint16_t *keys = qkv + heads * dim + h * dim;
    uint32_t *kt = (uint32_t *)s->kt;
    for (int64_t c = 0; c < lp / 16; c++) {
        const __m512i j = _mm512_add_epi32(lane, _mm512_set1_epi32((int)(16 * c)));
        const __mmask16 present = _mm512_cmplt_epi32_mask(j, _mm512_set1_epi32((int)len));
        const __m512i offsets = _mm512_mullo_epi32(j, _mm512_set1_epi32((int)(row * 2))); /* bytes */
        for (int64_t m = 0; m < dim / 2; m++)
            _mm512_store_si512((void *)(kt + ((c * (dim / 32) + m / 16) * 16 + m % 16) * 16),
                               _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), present, offsets, keys + 2 * m, 1));
    }
    /* values: keys 2 t and 2 t + 1 of a 32-key block, 16 dims, interleaved -> vt[block][dims / 16][t] */
    const __m512i pairs = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                           22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const uint16_t *values = qkv + 2 * heads * dim + h * dim;
    for (int64_t a = 0; a < lp; a += 2) {
        for (int64_t d = 0; d < dim; d += 16) {
            const __m256i first = a < len ? _mm256_loadu_si256((const __m256i *)(values + a * row + d))
                                          : _mm256_setzero_si256();
            const __m256i second = a + 1 < len ? _mm256_loadu_si256((const __m256i *)(values + (a + 1) * row + d))
                                               : _mm256_setzero_si256();
            const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(first), second, 1);
            _mm512_store_si512((void *)(s->vt + (((a / 32) * (dim / 16) + d / 16) * 16 + (a % 32) / 2) * 32),
                               _mm512_permutexvar_epi16(pairs, both));
        }
    }
}

/* Query rows r0 .. r0 + 31 (those < len written): scores, softmax, p . v, output. */
AMX_INLINE void amx_attend_rows(const uint16_t *qkv, int64_t len, int64_t lp, int64_t heads, const int64_t dim,
                                int64_t h, const struct amx_scratch *s, float scale_log2e, int64_t r0, uint16_t *out) {
    const int64_t ksteps = dim / 32;
    /* 32 whole query rows are read where they lie; a last, shorter block from its padded copy */
    const int whole = r0 + 32 <= len;
    const uint16_t *q = whole ? qkv + r0 * 3 * heads * dim + h * dim : s->q + r0 * dim;
    const int64_t q_stride = (whole ? 3 * heads * dim : dim) * 2, q_next = (whole ? 3 * heads * dim : dim) * 16;
    for (int64_t c = 0; c < lp / 16; c += 2) {  /* scores of 32 rows x 32 keys */
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        for (int64_t k = 0; k < ksteps; k++) {
            _tile_loadd(4, q + 32 * k, q_stride);
            _tile_loadd(5, q + q_next + 32 * k, q_stride);
            _tile_loadd(6, s->kt + (c * ksteps + k) * 512, 64);
            _tile_loadd(7, s->kt + ((c + 1) * ksteps + k) * 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, s->s + 16 * c, lp * 4);
        _tile_stored(1, s->s + 16 * c + 16, lp * 4);
        _tile_stored(2, s->s + 16 * lp + 16 * c, lp * 4);
        _tile_stored(3, s->s + 16 * lp + 16 * c + 16, lp * 4);
    }
    const int64_t rows = len - r0 < 32 ? len - r0 : 32;
    float inv_sum[32];
    for (int64_t i = 0; i < 32; i++) {  /* softmax: exps in bfloat16, the float32 sum kept */
        float *sc = s->s + i * lp;
        uint16_t *pr = s->p + i * lp;
        if (i >= rows) {
            memset(pr, 0, (size_t)lp * 2);
            continue;
        }
        __m512 top = _mm512_set1_ps(-INFINITY);
        for (int64_t c = 0; c < lp; c += 16) {  /* scores in log2 units: exp(x) = 2^(x log2 e) */
            const __m512 v = _mm512_fmadd_ps(_mm512_load_ps(sc + c), _mm512_set1_ps(scale_log2e),
                                             _mm512_load_ps(s->bias + c));
            _mm512_store_ps(sc + c, v);
            top = _mm512_max_ps(top, v);
        }
        const __m512 most = _mm512_set1_ps(_mm512_reduce_max_ps(top));
        __m512 sum = _mm512_setzero_ps();
        for (int64_t c = 0; c < lp; c += 16) {
            const __m512 e = exp2_nonpositive(_mm512_sub_ps(_mm512_load_ps(sc + c), most));
            sum = _mm512_add_ps(sum, e);
            _mm256_store_si256((__m256i *)(pr + c), (__m256i)_mm512_cvtneps_pbh(e));
        }
        inv_sum[i] = 1.0f / _mm512_reduce_add_ps(sum);
    }
    for (int64_t d = 0; d < dim; d += 32) {  /* p . v: 32 rows x 32 dims */
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        for (int64_t kc = 0; kc < lp / 32; kc++) {
            _tile_loadd(4, s->p + 32 * kc, lp * 2);
            _tile_loadd(5, s->p + 16 * lp + 32 * kc, lp * 2);
            _tile_loadd(6, s->vt + (kc * (dim / 16) + d / 16) * 512, 64);
            _tile_loadd(7, s->vt + (kc * (dim / 16) + d / 16 + 1) * 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, s->o + d, dim * 4);
        _tile_stored(1, s->o + d + 16, dim * 4);
        _tile_stored(2, s->o + 16 * dim + d, dim * 4);
        _tile_stored(3, s->o + 16 * dim + d + 16, dim * 4);
    }
    for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < dim; c += 16)
            store_bf16(out + ((r0 + i) * heads + h) * dim + c,
                       _mm512_mul_ps(_mm512_loadu_ps(s->o + i * dim + c), _mm512_set1_ps(inv_sum[i])));
}

AMX_INLINE int amx_attend_head_t(const uint16_t *qkv, int64_t len, int64_t heads, const int64_t dim, int64_t h,
                                 const uint8_t *keep, uint16_t *out) {
    const int64_t lp = (len + 31) / 32 * 32;
    void *base = malloc(amx_scratch_bytes(lp, dim));
    if (base == NULL) return -3;
    const struct amx_scratch s = amx_carve(base, lp, dim);
    amx_load_head(qkv, len, lp, heads, dim, h, keep, &s);
    struct tile_config cfg;
    full_tiles(&cfg);
    _tile_loadconfig(&cfg);
    const float scale_log2e = (float)(1.4426950408889634 / sqrt((double)dim));  /* 1 / sqrt(D) in log2 units */
    for (int64_t r0 = 0; r0 < len; r0 += 32) amx_attend_rows(qkv, len, lp, heads, dim, h, &s, scale_log2e, r0, out);
    _tile_release();
    free(base);
    return 0;
}

AMX_TARGET static int amx_attend_head32(const uint16_t *qkv, int64_t len, int64_t heads, int64_t h,
                                        const uint8_t *keep, uint16_t *out) {
    return amx_attend_head_t(qkv, len, heads, 32, h, keep, out);
}
AMX_TARGET static int amx_attend_head64(const uint16_t *qkv, int64_t len, int64_t heads, int64_t h,
                                        const uint8_t *keep, uint16_t *out) {
    return amx_attend_head_t(qkv, len, heads, 64, h, keep, out);
}

static int amx_ready(void) { return amx_ready_once(); }
#else
static int amx_ready(void) { return 0; }
#endif

/* One copy per head size, so that every loop over dims has a constant trip count. */
TARGET static int attend_head32(const uint16_t *qkv, int64_t len, int64_t heads, int64_t h, const uint8_t *keep,
                                uint16_t *out) {
    return attend_head_t(qkv, len, heads, 32, h, keep, out);
}
TARGET static int attend_head64(const uint16_t *qkv, int64_t len, int64_t heads, int64_t h, const uint8_t *keep,
                                uint16_t *out) {
    return attend_head_t(qkv, len, heads, 64, h, keep, out);
}

/* 0, or -1 (a shape outside len <= MAX_LEN, head_dim in {32, 64}; or a CPU without the instructions, or
 * without AMX for path 2), -2 (a sequence with no key kept: SDPA's answer there is NaN, left to it), -3 (no
 * memory for the scratch). path: 0 AMX tiles where they run, else AVX-512; 1 AVX-512 (AVX512_BF16) only;
 * 2 AMX only. nthreads > 1: the (sequence, head) pairs split across that many threads (OpenMP; ignored
 * without it). */
int embedctl_bf16_attention(const uint16_t *qkv, int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                             const uint8_t *keep, uint16_t *out, int nthreads, int path) {
    if (len < 1 || len > MAX_LEN || (head_dim != 32 && head_dim != 64) || heads < 1 || batch < 0 ||
        path < 0 || path > 2 || !embedctl_bf16_attention_ready())
        return -1;
    const int tiles = path != 1 && amx_ready();
    if (path == 2 && !tiles) return -1;
    if (keep != NULL)
        for (int64_t b = 0; b < batch; b++) {
            int any = 0;
            for (int64_t j = 0; j < len; j++) any |= keep[b * len + j];
            if (!any) return -2;
        }
    int (*attend)(const uint16_t *, int64_t, int64_t, int64_t, const uint8_t *, uint16_t *) =
        head_dim == 64 ? attend_head64 : attend_head32;
#ifdef EMBEDCTL_AMX
    if (tiles) attend = head_dim == 64 ? amx_attend_head64 : amx_attend_head32;
#endif
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

/* 1 where embedctl_bf16_attention's path 0 runs on AMX tiles. */
int embedctl_bf16_attention_amx_ready(void) { return embedctl_bf16_attention_ready() && amx_ready(); }

#else /* not x86-64 gcc/clang >= 10: no kernel, SDPA everywhere */
int embedctl_bf16_attention_ready(void) { return 0; }
int embedctl_bf16_attention_amx_ready(void) { return 0; }
int embedctl_bf16_attention(const uint16_t *qkv, int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                             const uint8_t *keep, uint16_t *out, int nthreads, int path) {
    (void)qkv; (void)batch; (void)len; (void)heads; (void)head_dim; (void)keep; (void)out; (void)nthreads; (void)path;
    return -1;
}
#endif
