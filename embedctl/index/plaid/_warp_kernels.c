/* The kernels of PLAID search's first steps and of WARP-style candidate generation (issue 36), built into the
 * same library as _search_kernels.c (setup.py) and called through ctypes by
 * embedctl/index/plaid/search_kernels.py: centroid scores held as [C, lq], each token's best cells
 * (column-wise top-m), WARP's per-token scoring of the vectors of its cells (embedctl/search/warp.py), and the
 * MaxSim byte table summed from the per-token nibble tables. Plain C99 with AVX-512 paths chosen at run time;
 * every AVX-512 path has a plain twin giving the same bits (tested). */
#include "_search_common.h"

/* WARP-style candidate scores (issue 36; Scheerer et al., "WARP", 2025): each query token q scores exactly,
 * for itself alone, every vector in its own probed cells, read from a cell-ordered copy of the index
 * (embedctl/search/warp.py): vector e of cell c scores (S[q, c] + residual_q(e)) / max(norm_e, 1e-12), where
 * residual_q(e) = Q[q] . the decoded residual of e = sum over byte positions b of hi[q, b, byte >> 4] +
 * lo[q, b, byte & 15] (tables [lq, nbytes, 2, 16]: the two nibbles of a byte hold whole dimensions for nbits
 * 1, 2 and 4, so a byte's 256-entry table splits into two of 16: one AVX-512 register each, read with one
 * permute for 16 vectors at once). A document's estimate is sum_q max(its best vector in q's cells, miss[q]),
 * miss[q] being q's score for a vector outside its cells; only vectors above miss[q] are folded. Out: the
 * ntouched documents with such a vector (pids in first-seen order) and their estimates; returns ntouched, or
 * < 0 on bad arguments.
 * cells [lq, max_cells]: each token's cells, best first, ncells[q] of them probed; cell_scores [lq, max_cells]
 * their centroid scores S[q, c] (gathered by the caller from the rows it just ranked: read here from the
 * [C, lq] matrix they were cache misses, a third of this function's time).
 * Layout: cells padded to whole blocks of 16 vectors (cell_offsets in vectors, multiples of 16); block j holds
 * the bytes of vectors 16j .. 16j + 15 position-major (blocks uint8 [nblocks, nbytes, 16]); a padding vector
 * has pid -1. plain != 0: the plain C block scores whatever the CPU (tests: the same bits).
 * Scratch, num_docs each, all -1 between calls (left so on return): stamp int32 (the token that last saw a
 * document), seen int32 (its slot in out); best float32 (its best in the current token); token_docs int64
 * [num_docs + 1], like out_pids: the branch-free folds write one slot ahead. */

/* The 16 scores of one block for one token, and which of them to fold (above floor, not padding): (base +
 * residual sum) / max(norm, 1e-12), the residual sum taken from the token's [nbytes, 2, 16] nibble tables in
 * four chains (high and low nibbles, even and odd byte positions, each over b in order; independent chains,
 * so the adds overlap instead of waiting on each other), added as (hi_even + hi_odd) + (lo_even + lo_odd).
 * Two versions, the same arithmetic in the same order: AVX-512 (one vpermps per nibble for the 16 vectors)
 * where the CPU has it, plain C elsewhere. */
static uint32_t block_scores_plain(const float *tables, const uint8_t *block, int64_t nbytes, float base,
                                   const float *norms, const int32_t *pids, float floor, float *scores) {
    uint32_t keep = 0;
    for (int i = 0; i < 16; i++) {
        float chain[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t b = 0; b < nbytes; b++) {
            const uint8_t byte = block[b * 16 + i];
            chain[b & 1] += tables[b * 32 + (byte >> 4)];
            chain[2 + (b & 1)] += tables[b * 32 + 16 + (byte & 15)];
        }
        const float norm = norms[i] > 1e-12f ? norms[i] : 1e-12f;
        scores[i] = (base + ((chain[0] + chain[1]) + (chain[2] + chain[3]))) / norm;
        keep |= (uint32_t)(scores[i] > floor && pids[i] >= 0) << i;
    }
    return keep;
}

#ifdef HAVE_AVX512_PATHS
__attribute__((target("avx512f"))) static inline __m512 nibble_sum(__m512 acc, const float *tables,
                                                                  const uint8_t *bytes, int hi) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)bytes));
    const __m512i idx = hi ? _mm512_srli_epi32(v, 4) : _mm512_and_si512(v, _mm512_set1_epi32(15));
    return _mm512_add_ps(acc, _mm512_permutexvar_ps(idx, _mm512_loadu_ps(tables + (hi ? 0 : 16))));
}

__attribute__((target("avx512f"))) static uint32_t block_scores_512(const float *tables, const uint8_t *block,
                                                                    int64_t nbytes, float base, const float *norms,
                                                                    const int32_t *pids, float floor,
                                                                    float *scores) {
    __m512 hi0 = _mm512_setzero_ps(), hi1 = _mm512_setzero_ps(), lo0 = _mm512_setzero_ps(), lo1 = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nbytes; b += 2) {
        hi0 = nibble_sum(hi0, tables + b * 32, block + b * 16, 1);
        lo0 = nibble_sum(lo0, tables + b * 32, block + b * 16, 0);
        hi1 = nibble_sum(hi1, tables + (b + 1) * 32, block + (b + 1) * 16, 1);
        lo1 = nibble_sum(lo1, tables + (b + 1) * 32, block + (b + 1) * 16, 0);
    }
    if (b < nbytes) {  /* an odd count: the last position is even */
        hi0 = nibble_sum(hi0, tables + b * 32, block + b * 16, 1);
        lo0 = nibble_sum(lo0, tables + b * 32, block + b * 16, 0);
    }
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(hi0, hi1), _mm512_add_ps(lo0, lo1));
    const __m512 norm = _mm512_max_ps(_mm512_loadu_ps(norms), _mm512_set1_ps(1e-12f));
    const __m512 score = _mm512_div_ps(_mm512_add_ps(_mm512_set1_ps(base), sum), norm);
    _mm512_storeu_ps(scores, score);
    return (uint32_t)(_mm512_cmp_ps_mask(score, _mm512_set1_ps(floor), _CMP_GT_OQ) &
                      _mm512_cmp_epi32_mask(_mm512_loadu_si512((const void *)pids), _mm512_setzero_si512(),
                                            _MM_CMPINT_NLT));
}
#endif

typedef uint32_t (*block_scores_fn)(const float *, const uint8_t *, int64_t, float, const float *, const int32_t *,
                                    float, float *);

static block_scores_fn pick_block_scores(int plain) {
#ifdef HAVE_AVX512_PATHS
    if (!plain && __builtin_cpu_supports("avx512f")) return block_scores_512;
#endif
    (void)plain;
    return block_scores_plain;
}

/* One vector's score for token q into its document's best, without branches (whether the document was seen
 * in this token's cells is data, not a predictable branch): a first sight takes the value and lists the
 * document in token_docs. */
static inline void warp_fold(int32_t pid, float value, int32_t q, int32_t *stamp, float *best, int64_t *token_docs,
                             int64_t *nt) {
    const int fresh = stamp[pid] != q;
    const float old = best[pid];
    best[pid] = fresh || value > old ? value : old;
    stamp[pid] = q;
    token_docs[*nt] = pid;
    *nt += fresh;
}

CLONES
int64_t embedctl_warp_scores(const float *nibbles, int64_t nbytes, int64_t num_c, int64_t lq, const int64_t *cells,
                             const float *cell_scores, const int64_t *ncells, int64_t max_cells, const float *miss,
                             const int64_t *cell_offsets, const uint8_t *blocks, const float *norms,
                             const int32_t *vec_pids, int64_t num_docs, int32_t *stamp, int32_t *seen, float *best,
                             int64_t *token_docs, int64_t *out_pids, float *out_scores, int plain) {
    if (lq < 1 || lq > MAX_LQ || nbytes < 1 || max_cells < 1) return -1;
    for (int64_t q = 0; q < lq; q++) {  /* every argument checked before the scratch is touched */
        if (ncells[q] < 0 || ncells[q] > max_cells) return -2;
        for (int64_t j = 0; j < ncells[q]; j++) {
            const int64_t c = cells[q * max_cells + j];
            if (c < 0 || c >= num_c) return -3;
            /* the cells it reads, not all C of them (cell_offsets[num_c], the vector count, checked by the caller) */
            const int64_t lo = cell_offsets[c], hi = cell_offsets[c + 1];
            if (lo < 0 || lo > hi || hi > cell_offsets[num_c] || lo % 16 || hi % 16) return -5;
        }
    }
    const block_scores_fn block_scores = pick_block_scores(plain);
    int64_t ntouched = 0, nt = 0, status = 0;
    for (int64_t q = 0; q < lq && status == 0; q++) {
        const float *tables = nibbles + q * nbytes * 32;
        nt = 0;
        for (int64_t j = 0; j < ncells[q] && status == 0; j++) {
            const int64_t c = cells[q * max_cells + j];
            if (j + 1 < ncells[q]) {  /* the next cell's first blocks, pids and norms: each cell starts with misses */
                const int64_t next = cells[q * max_cells + j + 1];
                if (next >= 0 && next < num_c) {
                    const int64_t e1 = cell_offsets[next], span = (cell_offsets[next + 1] - e1) * nbytes;
                    for (int64_t off = 0; off < span && off < 2048; off += 64)
                        __builtin_prefetch(blocks + e1 * nbytes + off);
                    __builtin_prefetch(vec_pids + e1);
                    __builtin_prefetch(norms + e1);
                }
            }
            const float base = cell_scores[q * max_cells + j];
            for (int64_t e = cell_offsets[c]; e < cell_offsets[c + 1]; e += 16) {
                float scores[16];
                /* only the vectors scoring above miss[q] (and not padding) can change an estimate */
                uint32_t keep = block_scores(tables, blocks + (e >> 4) * nbytes * 16, nbytes, base, norms + e,
                                             vec_pids + e, miss[q], scores);
                for (; keep; keep &= keep - 1) {
                    const int i = __builtin_ctz(keep);
                    const int32_t pid = vec_pids[e + i];
                    if (pid >= num_docs) {
                        status = -4;
                        break;
                    }
                    warp_fold(pid, scores[i], (int32_t)q, stamp, best, token_docs, &nt);
                }
                if (status) break;
            }
        }
        if (status) break;
        /* the token's documents: their best replaces the estimate miss[q] that every other document keeps */
        for (int64_t i = 0; i < nt; i++) {  /* branch-free, as warp_fold: a first sight takes the next slot */
            const int64_t pid = token_docs[i];
            const int fresh = seen[pid] < 0;
            const int32_t slot = fresh ? (int32_t)ntouched : seen[pid];
            seen[pid] = slot;
            out_pids[ntouched] = pid;  /* kept only when fresh: otherwise the next fresh one overwrites it */
            out_scores[slot] = (fresh ? 0.0f : out_scores[slot]) + (best[pid] - miss[q]);
            ntouched += fresh;
        }
    }
    float base_total = 0.0f;
    for (int64_t q = 0; q < lq; q++) base_total += miss[q];
    for (int64_t i = 0; i < ntouched; i++) {
        out_scores[i] += base_total;
        stamp[out_pids[i]] = -1;
        seen[out_pids[i]] = -1;
    }
    if (status) {  /* a bad document id mid-way: the scratch is left clean all the same */
        for (int64_t i = 0; i < nt; i++) stamp[token_docs[i]] = -1;
        return status;
    }
    return ntouched;
}

/* Insert value v of row r into one column's sorted best list (cv, ci: count of m so far), after every equal
 * value (ties stay in row order, rows arriving in increasing order); once the list holds m, its gate is just
 * above the m-th value: only a strictly better one enters. */
static inline void top_insert(float *cv, int64_t *ci, int64_t *count, float *gate, int64_t m, float v, int64_t r) {
    const int64_t n = *count;
    int64_t p = n < m ? n : m - 1;
    while (p > 0 && cv[p - 1] < v) {
        cv[p] = cv[p - 1];
        ci[p] = ci[p - 1];
        p--;
    }
    cv[p] = v;
    ci[p] = r;
    if (n < m) *count = n + 1;
    if (*count == m) *gate = nextafterf(cv[m - 1], INFINITY);
}

/* embedctl_row_top of the transpose: the m best rows of each column of st_t [rows, cols] (float32, row-major:
 * a query's centroid scores as [C, lq]), best first, an exact tie to the smaller row -> idx int64 [cols, m]
 * (the same as embedctl_row_top on the [cols, rows] copy, without making it). Per column the same floor (the
 * least of the maxima of m blocks of rows), both passes reading whole rows: the floor pass is a vectorisable
 * max over contiguous columns, the selection pass compares each row against every column's gate (the floor,
 * then just above the column's m-th best once it holds m) and inserts only the few that pass. Scratch: vals
 * float32 [cols, m], gate float32 [cols], count int64 [cols]; m <= min(rows, MAX_TOP) (-1 otherwise). */
CLONES
int embedctl_col_top(const float *st_t, int64_t rows, int64_t cols, int64_t m, float *vals, float *gate,
                     int64_t *count, int64_t *idx) {
    if (m < 1 || m > rows || m > MAX_TOP || cols < 1) return -1;
    for (int64_t c = 0; c < cols; c++) {
        gate[c] = INFINITY;
        count[c] = 0;
    }
    for (int64_t b = 0; b < m; b++) {  /* the floor: min over blocks of the block's max, per column */
        const int64_t r0 = b * rows / m, r1 = (b + 1) * rows / m;
        float *most = vals;  /* scratch: the block's maxima (vals is rewritten below) */
        for (int64_t c = 0; c < cols; c++) most[c] = st_t[r0 * cols + c];
        for (int64_t r = r0 + 1; r < r1; r++) {
            const float *row = st_t + r * cols;
            for (int64_t c = 0; c < cols; c++) most[c] = row[c] > most[c] ? row[c] : most[c];
        }
        for (int64_t c = 0; c < cols; c++) gate[c] = most[c] < gate[c] ? most[c] : gate[c];
    }
    for (int64_t r = 0; r < rows; r++) {
        const float *row = st_t + r * cols;
        int any = 0;
        for (int64_t c = 0; c < cols; c++) any |= row[c] >= gate[c];
        if (!any) continue;
        for (int64_t c = 0; c < cols; c++)
            if (row[c] >= gate[c]) top_insert(vals + c * m, idx + c * m, count + c, gate + c, m, row[c], r);
    }
    for (int64_t c = 0; c < cols; c++)
        if (count[c] < m) return -2;  /* NaN scores */
    return 0;
}

/* The MaxSim kernels' byte table from the nibble tables: lut[b, v, q] = nib_t[b, 0, v >> 4, q] + nib_t[b, 1, v & 15, q]
 * (nib_t float32 [nbytes, 2, 16, lq]: per byte position, Q[q] . the values its high / low nibble decodes to;
 * a byte's dims split into two whole halves for nbits 1, 2, 4) -> lut float32 [nbytes, 256, lq]. 2 x 16
 * products per position instead of 256 (one query's table in ~0.03 ms where a batched torch matmul took 0.14). */
CLONES
void embedctl_byte_lut(const float *nib_t, int64_t nbytes, int64_t lq, float *lut) {
    for (int64_t b = 0; b < nbytes; b++) {
        const float *hi = nib_t + b * 32 * lq, *lo = hi + 16 * lq;
        for (int64_t v = 0; v < 256; v++) {
            const float *h = hi + (v >> 4) * lq, *l = lo + (v & 15) * lq;
            float *out = lut + (b * 256 + v) * lq;
            for (int64_t q = 0; q < lq; q++) out[q] = h[q] + l[q];
        }
    }
}

/* Centroid scores of one query held as [C, lq]: out[c, q] = sum_d centroids[c, d] * q_t[d, q], each sum one fused
 * multiply-add chain over d = 0 .. dim - 1 in order (fmaf: the same bits on every CPU, with or without
 * AVX-512). q_t float32 [dim, lq] (the query transposed), centroids float32 [C, dim], out float32 [C, lq]. The
 * AVX-512 version keeps 8 centroids x 32 tokens of sums in registers: on one Zen 5 core 8192 x 128 x 32 took
 * ~0.3 ms where MKL's sgemm took 0.66 ms and OpenBLAS's 0.6 (bench/plaid_search_floor.py). */
static void centroid_scores_plain(const float *centroids, int64_t num_c, int64_t dim, const float *q_t, int64_t lq,
                                  float *out) {
    for (int64_t c = 0; c < num_c; c++) {
        float *row = out + c * lq;
        for (int64_t q = 0; q < lq; q++) row[q] = 0.0f;
        for (int64_t d = 0; d < dim; d++) {  /* each row[q]'s chain still runs over d in order */
            const float w = centroids[c * dim + d];
            for (int64_t q = 0; q < lq; q++) row[q] = fmaf(w, q_t[d * lq + q], row[q]);
        }
    }
}

#ifdef HAVE_AVX512_PATHS
#define CS_ROWS 8
__attribute__((target("avx512f"))) static void centroid_scores_512(const float *centroids, int64_t num_c,
                                                                   int64_t dim, const float *q_t, int64_t lq,
                                                                   float *out) {
    for (int64_t q0 = 0; q0 < lq; q0 += 32) {
        const int64_t left = lq - q0;
        const __mmask16 m0 = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
        const __mmask16 m1 = left >= 32 ? 0xffff : left <= 16 ? 0 : (__mmask16)((1u << (left - 16)) - 1);
        int64_t c = 0;
        for (; c + CS_ROWS <= num_c; c += CS_ROWS) {
            __m512 a0[CS_ROWS], a1[CS_ROWS];
            for (int i = 0; i < CS_ROWS; i++) a0[i] = a1[i] = _mm512_setzero_ps();
            for (int64_t d = 0; d < dim; d++) {
                const __m512 x0 = _mm512_maskz_loadu_ps(m0, q_t + d * lq + q0);
                const __m512 x1 = _mm512_maskz_loadu_ps(m1, q_t + d * lq + q0 + 16);
                for (int i = 0; i < CS_ROWS; i++) {
                    const __m512 w = _mm512_set1_ps(centroids[(c + i) * dim + d]);
                    a0[i] = _mm512_fmadd_ps(w, x0, a0[i]);
                    a1[i] = _mm512_fmadd_ps(w, x1, a1[i]);
                }
            }
            for (int i = 0; i < CS_ROWS; i++) {
                _mm512_mask_storeu_ps(out + (c + i) * lq + q0, m0, a0[i]);
                _mm512_mask_storeu_ps(out + (c + i) * lq + q0 + 16, m1, a1[i]);
            }
        }
        for (; c < num_c; c++) {
            __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
            for (int64_t d = 0; d < dim; d++) {
                const __m512 w = _mm512_set1_ps(centroids[c * dim + d]);
                a0 = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m0, q_t + d * lq + q0), a0);
                a1 = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m1, q_t + d * lq + q0 + 16), a1);
            }
            _mm512_mask_storeu_ps(out + c * lq + q0, m0, a0);
            _mm512_mask_storeu_ps(out + c * lq + q0 + 16, m1, a1);
        }
    }
}
#endif

/* 1 where embedctl_centroid_scores runs its AVX-512 version: elsewhere fmaf may be a library call per
 * product (x86-64 without FMA), so the caller uses its BLAS instead (torch's matmul: other bits, as close). */
int embedctl_centroid_scores_fast(void) {
#ifdef HAVE_AVX512_PATHS
    return __builtin_cpu_supports("avx512f") ? 1 : 0;
#else
    return 0;
#endif
}

void embedctl_centroid_scores(const float *centroids, int64_t num_c, int64_t dim, const float *q_t, int64_t lq,
                              float *out, int plain) {
#ifdef HAVE_AVX512_PATHS
    if (!plain && __builtin_cpu_supports("avx512f")) {
        centroid_scores_512(centroids, num_c, dim, q_t, lq, out);
        return;
    }
#endif
    (void)plain;
    centroid_scores_plain(centroids, num_c, dim, q_t, lq, out);
}
