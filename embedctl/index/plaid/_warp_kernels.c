/* The kernels of PLAID search's first steps and of WARP-style candidate generation (issue 36), built into the
 * same library as _search_kernels.c (setup.py) and called through ctypes by
 * embedctl/index/plaid/search_kernels.py: centroid scores held as [C, lq], each token's best cells
 * (column-wise top-m), WARP's per-token scoring of the vectors of its cells (embedctl/search/warp.py), and the
 * MaxSim byte table summed from the per-token nibble tables. Plain C99 with AVX-512 paths chosen at run time;
 * every AVX-512 path has a plain twin giving the same bits (tested). */
#include <stdlib.h>

#include "_search_common.h"

/* WARP-style candidate scores (issue 36; Scheerer et al., "WARP", 2025): each query token q scores exactly,
 * for itself alone, every vector in its own probed cells, read from a cell-ordered copy of the index
 * (embedctl/search/warp.py): vector e of cell c scores (S[q, c] + residual_q(e)) / max(norm_e, 1e-12), where
 * residual_q(e) = Q[q] . the decoded residual of e = sum over byte positions b of hi[q, b, byte >> 4] +
 * lo[q, b, byte & 15] (tables [lq, nbytes, 2, 16]: the two nibbles of a byte hold whole dimensions for nbits
 * 1, 2 and 4, so a byte's 256-entry table splits into two of 16: one AVX-512 register each, read with one
 * permute for 16 vectors at once). A document's estimate is sum_q max(its best vector in q's cells, miss[q]),
 * miss[q] being q's score for a vector outside its cells; only vectors above miss[q] count. Out: the
 * ntouched documents with such a vector and their estimates, pids ascending (*ascending = 1) or in first-seen
 * order (0: few documents touched, see the end); returns ntouched, or < 0 on bad arguments.
 * cells [lq, max_cells]: each token's cells, best first, ncells[q] of them probed; cell_scores [lq, max_cells]
 * their centroid scores S[q, c] (gathered by the caller from the rows it just ranked: read here from the
 * [C, lq] matrix they were cache misses, a third of this function's time).
 * Layout: cells padded to whole blocks of 16 vectors (cell_offsets in vectors, multiples of 16); block j is one
 * record of RECORD_BYTES(nbytes) bytes (blocks uint8 [nblocks, nbytes + 8, 16]): the bytes of vectors 16j ..
 * 16j + 15 position-major, then their 16 norms (float32), then their 16 pids (int32; -1 on a padding vector).
 * Why one record: a cell is then one stream of bytes that its prefetch covers, where norms and pids in arrays of
 * their own were two more streams starting with misses in every cell (perf: ~a quarter of the scan's samples
 * waited on their loads): on one core of a 2-core AMX host, 300 SciFact queries, this scan 0.84-0.88x its time
 * with the three arrays (0.63-0.64 against 0.73-0.76 ms at k=10, 0.86-0.89 against 1.02 at k=100), the same bits;
 * prefetching two cells ahead, or each token's first cell, no better. plain != 0: the plain C block scores
 * whatever the CPU (tests: the same bits).
 * Per token, three steps (why: folding each kept vector into its document straight from the block's scores
 * read a vector store back lane by lane, and a stall on every such read was two thirds of this function's
 * time on Zen 5; the kept (pid, score) pairs now leave a block compressed, in one store each):
 *   1. scan: the scores of the token's vectors; those above miss[q] appended to buf_pids / buf_scores (in
 *      scan order; capacity buf_cap >= the padded vectors of the token's probed cells + 16, else -6);
 *   2. best[pid] = max(best[pid], score) over the pairs;
 *   3. per pair: its document's gain best[pid] - miss[q] (0 for a repeat: best is reset to -inf on first
 *      use) added to total[pid], the document listed on its first gain (total was 0); or, where the pairs
 *      are many for the documents, over every document at once (fold_dense: the same sums), the touched
 *      documents then read off total at the end.
 * Scratch, num_docs each, left as found: best float32 all -inf, total float32 all 0. The estimate is
 * ((0 + gain_q1) + gain_q2 + ...) + sum_q miss[q], tokens in order. */

/* The 16 scores of one block for one token ((base + residual sum) / max(norm, 1e-12), the residual sum taken
 * from the token's [nbytes, 2, 16] nibble tables in four chains (high and low nibbles, even and odd byte
 * positions, each over b in order; independent chains, so the adds overlap instead of waiting on each other),
 * added as (hi_even + hi_odd) + (lo_even + lo_odd)); those above floor and not padding appended, in lane
 * order, to pids_out / scores_out (room for 16): returns how many. Two versions, the same arithmetic in the
 * same order: AVX-512 (one vpermps per nibble for the 16 vectors, the kept lanes compressed) where the CPU
 * has it, plain C elsewhere. */
static inline int block_append_plain(const float *tables, const uint8_t *block, int64_t nbytes, float base,
                              const float *norms, const int32_t *pids, float floor, int32_t *pids_out,
                              float *scores_out) {
    int kept = 0;
    for (int i = 0; i < 16; i++) {
        float chain[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t b = 0; b < nbytes; b++) {
            const uint8_t byte = block[b * 16 + i];
            chain[b & 1] += tables[b * 32 + (byte >> 4)];
            chain[2 + (b & 1)] += tables[b * 32 + 16 + (byte & 15)];
        }
        const float norm = norms[i] > 1e-12f ? norms[i] : 1e-12f;
        const float score = (base + ((chain[0] + chain[1]) + (chain[2] + chain[3]))) / norm;
        if (score > floor && pids[i] >= 0) {
            pids_out[kept] = pids[i];
            scores_out[kept++] = score;
        }
    }
    return kept;
}

#ifdef HAVE_AVX512_PATHS
__attribute__((target("avx512f"))) static inline __m512 nibble_sum(__m512 acc, const float *tables,
                                                                  const uint8_t *bytes, int hi) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)bytes));
    const __m512i idx = hi ? _mm512_srli_epi32(v, 4) : _mm512_and_si512(v, _mm512_set1_epi32(15));
    return _mm512_add_ps(acc, _mm512_permutexvar_ps(idx, _mm512_loadu_ps(tables + (hi ? 0 : 16))));
}

__attribute__((target("avx512f"))) static inline int block_append_512(const float *tables, const uint8_t *block,
                                                                int64_t nbytes, float base, const float *norms,
                                                                const int32_t *pids, float floor, int32_t *pids_out,
                                                                float *scores_out) {
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
    const __m512i pidv = _mm512_loadu_si512((const void *)pids);
    const __mmask16 keep = _mm512_cmp_ps_mask(score, _mm512_set1_ps(floor), _CMP_GT_OQ) &
                           _mm512_cmp_epi32_mask(pidv, _mm512_setzero_si512(), _MM_CMPINT_NLT);
    /* compressed in registers, then one full store each (a compress straight to memory is slow on AMD) */
    _mm512_storeu_si512((void *)pids_out, _mm512_maskz_compress_epi32(keep, pidv));
    _mm512_storeu_ps(scores_out, _mm512_maskz_compress_ps(keep, score));
    return __builtin_popcount((unsigned)keep);
}
#endif

/* Bytes of one block's record: its residual bytes, then 16 norms and 16 pids (4 bytes each). */
#define RECORD_BYTES(nbytes) (((nbytes) + 8) * 16)

/* The vectors e0 .. e1 of one cell (whole blocks) through block_append, the pairs appended at pids_out /
 * scores_out: returns how many (one call per cell, the block loop inlined in each version). */
#define CELL_APPEND(name, block_append)                                                                         \
    static int64_t name(const float *tables, const uint8_t *blocks, int64_t nbytes, int64_t e0, int64_t e1,     \
                        float base, float floor, int32_t *pids_out, float *scores_out) {                        \
        int64_t n = 0;                                                                                          \
        for (int64_t e = e0; e < e1; e += 16) {                                                                 \
            const uint8_t *record = blocks + (e >> 4) * RECORD_BYTES(nbytes);                                   \
            n += block_append(tables, record, nbytes, base, (const float *)(record + nbytes * 16),             \
                              (const int32_t *)(record + nbytes * 16 + 64), floor, pids_out + n, scores_out + n); \
        }                                                                                                       \
        return n;                                                                                               \
    }
CELL_APPEND(cell_append_plain, block_append_plain)
#ifdef HAVE_AVX512_PATHS
__attribute__((target("avx512f"))) CELL_APPEND(cell_append_512, block_append_512)
#endif

typedef int64_t (*cell_append_fn)(const float *, const uint8_t *, int64_t, int64_t, int64_t, float, float, int32_t *,
                                  float *);

static cell_append_fn pick_cell_append(int plain) {
#ifdef HAVE_AVX512_PATHS
    if (!plain && __builtin_cpu_supports("avx512f")) return cell_append_512;
#endif
    (void)plain;
    return cell_append_plain;
}

/* The prefetches of a cell's first 4 KB of records (each cell starts with misses: a random place in a copy of the
 * index many times the cache; 2-16 KB measured alike). */
static inline void prefetch_cell(const int64_t *cell_offsets, int64_t c, const uint8_t *blocks, int64_t nbytes) {
    const int64_t start = (cell_offsets[c] >> 4) * RECORD_BYTES(nbytes);
    const int64_t span = ((cell_offsets[c + 1] - cell_offsets[c]) >> 4) * RECORD_BYTES(nbytes);
    for (int64_t off = 0; off < span && off < 4096; off += 64) __builtin_prefetch(blocks + start + off);
}

/* Step 1 for token q: its probed cells' vectors scored, those above miss[q] appended to pids_out / scores_out;
 * returns how many. */
static int64_t scan_token(cell_append_fn cell_append, const float *nibbles, int64_t nbytes, int64_t q,
                          const int64_t *cells, const float *cell_scores, const int64_t *ncells, int64_t max_cells,
                          const float *miss, const int64_t *cell_offsets, const uint8_t *blocks, int32_t *pids_out,
                          float *scores_out) {
    const float *tables = nibbles + q * nbytes * 32;
    int64_t n = 0;
    for (int64_t j = 0; j < ncells[q]; j++) {
        const int64_t c = cells[q * max_cells + j];
        if (j + 1 < ncells[q]) prefetch_cell(cell_offsets, cells[q * max_cells + j + 1], blocks, nbytes);
        n += cell_append(tables, blocks, nbytes, cell_offsets[c], cell_offsets[c + 1], cell_scores[q * max_cells + j],
                         miss[q], pids_out + n, scores_out + n);
    }
    return n;
}

/* Step 2 for one token's n pairs: each document's best. Returns 0, or -4 (a document id outside the scratch:
 * nothing of this token folded). */
CLONES static int fold_best(const int32_t *pids, const float *scores, int64_t n, int64_t num_docs, float *best) {
    int32_t worst = 0;
    for (int64_t i = 0; i < n; i++) worst = pids[i] > worst ? pids[i] : worst;
    if ((int64_t)worst >= num_docs) return -4;
    for (int64_t i = 0; i < n; i++) {
        const float v = scores[i], old = best[pids[i]];
        best[pids[i]] = v > old ? v : old;
    }
    return 0;
}

/* Step 3 pair by pair: a document's gain over floor added to total once, the document listed in out_pids on
 * its first gain. Returns the new ntouched. */
CLONES static int64_t fold_gains(const int32_t *pids, int64_t n, float floor, float *best, float *total,
                                 int64_t *out_pids, int64_t ntouched) {
    for (int64_t i = 0; i < n; i++) {  /* branch-free: repeats add 0 */
        const int32_t pid = pids[i];
        float gain = best[pid] - floor;  /* -inf on a repeat */
        gain = gain > 0.0f ? gain : 0.0f;
        best[pid] = -INFINITY;
        const float sum = total[pid];
        out_pids[ntouched] = pid;  /* kept only on a first gain: otherwise the next one overwrites it */
        ntouched += (sum == 0.0f) & (gain > 0.0f);
        total[pid] = sum + gain;
    }
    return ntouched;
}

/* Step 3 over every document at once: each one's gain best[pid] - floor (0 where it kept no vector of this
 * token: best is -inf there) added to total, best reset to -inf. The same sums in the same order as
 * fold_gains (a document without a gain adds +0, which leaves its total as it is), vectorised: ~1/16 of a
 * pair's cost a document, where fold_gains waits on a store to best or total per pair (perf: its loop was a
 * third of embedctl_warp_scores' time on all 5,183 SciFact documents). The touched documents are then read
 * off total. */
CLONES static void fold_dense(int64_t num_docs, float floor, float *best, float *total) {
    for (int64_t pid = 0; pid < num_docs; pid++) {
        float gain = best[pid] - floor;
        gain = gain > 0.0f ? gain : 0.0f;
        total[pid] = total[pid] + gain;
        best[pid] = -INFINITY;
    }
}

#ifndef DENSE_PER_PAIR /* step 3 over every document once they are at most this many times the token's pairs */
#define DENSE_PER_PAIR 8
#endif

/* Steps 2 and 3 for one token's n pairs (3 dense, *dense set to 1, when the documents are few for the pairs:
 * out_pids then lacks the documents this token touched first, and the caller lists them from total). Returns
 * the new ntouched, or -4 (a document id outside the scratch: nothing of this token folded). */
static int64_t fold_pairs(const int32_t *pids, const float *scores, int64_t n, float floor, int64_t num_docs,
                          float *best, float *total, int64_t *out_pids, int64_t ntouched, int *dense) {
    if (fold_best(pids, scores, n, num_docs, best) < 0) return -4;
    if (num_docs > DENSE_PER_PAIR * n) return fold_gains(pids, n, floor, best, total, out_pids, ntouched);
    fold_dense(num_docs, floor, best, total);
    *dense = 1;
    return ntouched;
}

/* A fold's error: the scratch left clean all the same (total all 0; best is clean after every fold). */
static void clear_totals(float *total, int64_t num_docs, const int64_t *out_pids, int64_t ntouched, int dense) {
    if (dense) {
        memset(total, 0, (size_t)num_docs * sizeof *total);
        return;
    }
    for (int64_t i = 0; i < ntouched; i++) total[out_pids[i]] = 0.0f;
}

/* Present in libraries built from this source (the Python side refuses an older build: the arguments of
 * embedctl_warp_scores and of the AMX centroid scores changed; embedctl_warp_probes and embedctl_top_positions
 * are new). */
int embedctl_search_kernels_v7(void) { return 1; }

/* 1 where the library was built with OpenMP (the thread counts are used), 0 where they are ignored. */
int embedctl_openmp(void) { return OMP_HAVE; }

/* nthreads > 1: the tokens' scans (step 1) run on that many threads (OpenMP), each token's pairs in its own
 * part of the buffers (buf_cap >= the sum over tokens of their probed padded vectors + 16, else -6 with that
 * sum in *needed), taken in
 * token order from a shared counter; one thread folds the tokens in order as their scans finish (scanning
 * the next one itself while it waits), so the folds overlap the other scans: the same bits as one thread,
 * which scans and folds token by token (buf_cap >= the most of one token + 16). */
CLONES
int64_t embedctl_warp_scores(const float *nibbles, int64_t nbytes, int64_t num_c, int64_t lq, const int64_t *cells,
                             const float *cell_scores, const int64_t *ncells, int64_t max_cells, const float *miss,
                             const int64_t *cell_offsets, const uint8_t *blocks, int64_t num_docs, float *best,
                             float *total, int32_t *buf_pids, float *buf_scores, int64_t buf_cap, int64_t *out_pids,
                             float *out_scores, int *ascending, int64_t *needed, int nthreads, int plain) {
    if (lq < 1 || lq > MAX_LQ || nbytes < 1 || max_cells < 1) return -1;
    int64_t start[MAX_LQ + 1], count[MAX_LQ];  /* each token's part of the buffers (threads), its pairs */
    int64_t most = 0;  /* the pairs one token can keep, + 16 (a block's full store) */
    start[0] = 0;
    for (int64_t q = 0; q < lq; q++) {  /* every argument checked before the scratch is touched */
        if (ncells[q] < 0 || ncells[q] > max_cells) return -2;
        int64_t need = 16;
        for (int64_t j = 0; j < ncells[q]; j++) {
            const int64_t c = cells[q * max_cells + j];
            if (c < 0 || c >= num_c) return -3;
            /* the cells it reads, not all C of them (cell_offsets[num_c], the vector count, checked by the caller) */
            const int64_t lo = cell_offsets[c], hi = cell_offsets[c + 1];
            if (lo < 0 || lo > hi || hi > cell_offsets[num_c] || lo % 16 || hi % 16) return -5;
            need += hi - lo;
        }
        most = need > most ? need : most;
        start[q + 1] = start[q] + need;
    }
    const int threaded = OMP_HAVE && nthreads > 1 && lq > 1;
    *needed = threaded ? start[lq] : most;
    if (*needed > buf_cap) return -6;  /* after every check: the caller grows the buffers to *needed */
    const cell_append_fn cell_append = pick_cell_append(plain);
    int64_t ntouched = 0;
    int dense = 0;  /* a token folded over every document: the touched ones are read off total at the end */
    if (threaded) {
        int64_t next = 0, status = 0;  /* the next token to scan; a fold's error */
        int done[MAX_LQ];  /* token q's pairs are in place (set after its scan, read by the folding thread) */
        for (int64_t q = 0; q < lq; q++) done[q] = 0;
        OMP_PRAGMA(omp parallel num_threads(nthreads))
        {
            const int folder = OMP_THREAD_NUM() == 0;
            for (int64_t q = 0; folder && q < lq; q++) {  /* the folding thread: tokens in order */
                while (!__atomic_load_n(&done[q], __ATOMIC_ACQUIRE)) {  /* not scanned yet: scan the next one */
                    const int64_t t = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
                    if (t >= lq) {
                        SPIN_PAUSE();
                        continue;
                    }
                    count[t] = scan_token(cell_append, nibbles, nbytes, t, cells, cell_scores, ncells, max_cells,
                                          miss, cell_offsets, blocks, buf_pids + start[t], buf_scores + start[t]);
                    __atomic_store_n(&done[t], 1, __ATOMIC_RELEASE);
                }
                if (status == 0) {
                    const int64_t now = fold_pairs(buf_pids + start[q], buf_scores + start[q], count[q], miss[q],
                                                   num_docs, best, total, out_pids, ntouched, &dense);
                    if (now < 0) status = now; else ntouched = now;
                }
            }
            for (;;) {  /* every other thread: scan tokens until none is left */
                if (folder) break;
                const int64_t t = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
                if (t >= lq) break;
                count[t] = scan_token(cell_append, nibbles, nbytes, t, cells, cell_scores, ncells, max_cells, miss,
                                      cell_offsets, blocks, buf_pids + start[t], buf_scores + start[t]);
                __atomic_store_n(&done[t], 1, __ATOMIC_RELEASE);
            }
        }
        if (status < 0) {  /* a bad document id: the scratch is left clean all the same */
            clear_totals(total, num_docs, out_pids, ntouched, dense);
            return status;
        }
    }
    for (int64_t q = 0; q < lq && !threaded; q++) {  /* one thread: scan, then fold, token by token */
        const int64_t n = scan_token(cell_append, nibbles, nbytes, q, cells, cell_scores, ncells, max_cells, miss,
                                     cell_offsets, blocks, buf_pids, buf_scores);
        const int64_t now = fold_pairs(buf_pids, buf_scores, n, miss[q], num_docs, best, total, out_pids, ntouched,
                                       &dense);
        if (now < 0) {  /* a bad document id: the scratch is left clean all the same */
            clear_totals(total, num_docs, out_pids, ntouched, dense);
            return now;
        }
        ntouched = now;
    }
    float base_total = 0.0f;
    for (int64_t q = 0; q < lq; q++) base_total += miss[q];
    /* many documents touched: read them off total in pid order (sorted for free, where a sort of the list
     * would cost the caller more than this pass, or a token folded densely); few: in first-seen order, for the
     * caller to sort */
    *ascending = dense || ntouched * 8 >= num_docs;
    if (*ascending) {
        int64_t n = 0;
        for (int64_t pid = 0; pid < num_docs; pid++) {
            out_pids[n] = pid;  /* kept only where touched (total > 0: every gain is) */
            n += total[pid] != 0.0f;
        }
        ntouched = n;
    }
    for (int64_t i = 0; i < ntouched; i++) {
        out_scores[i] = total[out_pids[i]] + base_total;
        total[out_pids[i]] = 0.0f;
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
 * least of the maxima of m blocks of rows), both passes reading whole rows: the floor pass is a max over
 * contiguous columns, the selection pass compares each row against every column's gate (the floor, then just
 * above the column's m-th best once it holds m) and inserts only the few that pass, in column order. Scratch:
 * vals float32 [cols, m], gate float32 [cols], count int64 [cols]; m <= min(rows, MAX_TOP) (-1 otherwise).
 * Two versions, the same answer (the inserts in the same order): AVX-512 (block maxima held in registers,
 * 64 columns at a time; a row's passing columns found by compares, one mask for the row) and plain C. */
static void col_floor_plain(const float *st_t, int64_t rows, int64_t cols, int64_t c_lo, int64_t c_hi, int64_t m,
                            float *most, float *gate) {  /* most: [c_hi - c_lo] scratch */
    for (int64_t b = 0; b < m; b++) {  /* the floor: min over blocks of the block's max, per column */
        const int64_t r0 = b * rows / m, r1 = (b + 1) * rows / m;
        for (int64_t c = c_lo; c < c_hi; c++) most[c - c_lo] = st_t[r0 * cols + c];
        for (int64_t r = r0 + 1; r < r1; r++) {
            const float *row = st_t + r * cols;
            for (int64_t c = c_lo; c < c_hi; c++) most[c - c_lo] = row[c] > most[c - c_lo] ? row[c] : most[c - c_lo];
        }
        for (int64_t c = c_lo; c < c_hi; c++) gate[c] = most[c - c_lo] < gate[c] ? most[c - c_lo] : gate[c];
    }
}

static void col_select_plain(const float *st_t, int64_t rows, int64_t cols, int64_t c_lo, int64_t c_hi, int64_t m,
                             float *vals, float *gate, int64_t *count, int64_t *idx) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = st_t + r * cols;
        int any = 0;
        for (int64_t c = c_lo; c < c_hi; c++) any |= row[c] >= gate[c];
        if (!any) continue;
        for (int64_t c = c_lo; c < c_hi; c++)
            if (row[c] >= gate[c]) top_insert(vals + c * m, idx + c * m, count + c, gate + c, m, row[c], r);
    }
}

#ifdef HAVE_AVX512_PATHS
__attribute__((target("avx512f"))) static inline __mmask16 tail_mask(int64_t left) {
    return left >= 16 ? (__mmask16)0xffff : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
}

/* top_insert for m <= TOP_INSERT_512 (the list in at most eight registers' worth of slots): the position from
 * compares (the values >= v, a prefix of the sorted list: ties after every equal value, as top_insert), then the
 * shift by one as masked stores of the slots p .. the list's end read one slot lower, highest chunk first (so
 * each reads what was there before). The same list as top_insert, without its loop's exit mispredicted on every
 * insert (~2/3 of col_top's inserts' time on 32-token queries over 16,384 centroids). */
#define TOP_INSERT_512 128
__attribute__((target("avx512f"))) static inline void top_insert_512(float *cv, int64_t *ci, int64_t *count,
                                                                    float *gate, int64_t m, float v, int64_t r) {
    const int64_t n = *count, last = n < m ? n : m - 1; /* the slot the list's end moves to (dropped when full) */
    const __m512 vv = _mm512_set1_ps(v);
    int64_t p = 0;
    for (int64_t i0 = 0; i0 < last; i0 += 16)
        p += __builtin_popcount((unsigned)_mm512_mask_cmp_ps_mask(tail_mask(last - i0),
                                                                 _mm512_maskz_loadu_ps(tail_mask(last - i0), cv + i0),
                                                                 vv, _CMP_GE_OQ));
    const __m512i lane16 = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int64_t i0 = last & ~(int64_t)15; i0 >= (p & ~(int64_t)15); i0 -= 16) { /* the chunks from p's on */
        const __m512i at = _mm512_add_epi32(lane16, _mm512_set1_epi32((int)i0));
        const __mmask16 write = _mm512_cmp_epi32_mask(at, _mm512_set1_epi32((int)p), _MM_CMPINT_NLT) &
                                _mm512_cmp_epi32_mask(at, _mm512_set1_epi32((int)last), _MM_CMPINT_LE);
        const __mmask16 here = _mm512_cmp_epi32_mask(at, _mm512_set1_epi32((int)p), _MM_CMPINT_EQ);
        const __m512 moved = _mm512_maskz_loadu_ps(write & ~here, cv + i0 - 1);
        _mm512_mask_storeu_ps(cv + i0, write, _mm512_mask_mov_ps(moved, here, vv));
    }
    const __m512i lane8 = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    for (int64_t i0 = last & ~(int64_t)7; i0 >= (p & ~(int64_t)7); i0 -= 8) {
        const __m512i at = _mm512_add_epi64(lane8, _mm512_set1_epi64(i0));
        const __mmask8 write = _mm512_cmp_epi64_mask(at, _mm512_set1_epi64(p), _MM_CMPINT_NLT) &
                               _mm512_cmp_epi64_mask(at, _mm512_set1_epi64(last), _MM_CMPINT_LE);
        const __mmask8 here = _mm512_cmp_epi64_mask(at, _mm512_set1_epi64(p), _MM_CMPINT_EQ);
        const __m512i moved = _mm512_maskz_loadu_epi64(write & ~here, ci + i0 - 1);
        _mm512_mask_storeu_epi64(ci + i0, write, _mm512_mask_mov_epi64(moved, here, _mm512_set1_epi64(r)));
    }
    if (n < m) *count = n + 1;
    if (*count == m) *gate = nextafterf(cv[m - 1], INFINITY);
}

__attribute__((target("avx512f"))) static inline void top_insert_any(float *cv, int64_t *ci, int64_t *count,
                                                                    float *gate, int64_t m, float v, int64_t r) {
    if (m <= TOP_INSERT_512)
        top_insert_512(cv, ci, count, gate, m, v, r);
    else
        top_insert(cv, ci, count, gate, m, v, r);
}

__attribute__((target("avx512f"))) static void col_floor_512(const float *st_t, int64_t rows, int64_t cols,
                                                              int64_t c_lo, int64_t c_hi, int64_t m, float *gate) {
    for (int64_t c0 = c_lo; c0 < c_hi; c0 += 64) {  /* 64 columns' block maxima in four registers */
        __mmask16 k[4];
        __m512 floor[4];
        for (int i = 0; i < 4; i++) {
            k[i] = tail_mask(c_hi - c0 - 16 * i);
            floor[i] = _mm512_set1_ps(INFINITY);
        }
        for (int64_t b = 0; b < m; b++) {
            const int64_t r0 = b * rows / m, r1 = (b + 1) * rows / m;
            __m512 most[4];
            for (int i = 0; i < 4; i++) most[i] = _mm512_maskz_loadu_ps(k[i], st_t + r0 * cols + c0 + 16 * i);
            for (int64_t r = r0 + 1; r < r1; r++)
                for (int i = 0; i < 4; i++)
                    most[i] = _mm512_max_ps(_mm512_maskz_loadu_ps(k[i], st_t + r * cols + c0 + 16 * i), most[i]);
            /* NaN as in the plain version: maxps/minps return their second operand when either is NaN, so a NaN
             * row leaves the maximum as it was, and a block started by a NaN leaves the floor as it was */
            for (int i = 0; i < 4; i++) floor[i] = _mm512_min_ps(most[i], floor[i]);
        }
        for (int i = 0; i < 4; i++) _mm512_mask_storeu_ps(gate + c0 + 16 * i, k[i], floor[i]);
    }
}

__attribute__((target("avx512f"))) static void col_select_512(const float *st_t, int64_t rows, int64_t cols,
                                                               int64_t c_lo, int64_t c_hi, int64_t m, float *vals,
                                                               float *gate, int64_t *count, int64_t *idx) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = st_t + r * cols;
        for (int64_t c0 = c_lo; c0 < c_hi; c0 += 16) {  /* >= is false for NaN, as in the plain version */
            const __mmask16 k = tail_mask(c_hi - c0);
            uint32_t pass = _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, row + c0),
                                                    _mm512_maskz_loadu_ps(k, gate + c0), _CMP_GE_OQ);
            for (; pass; pass &= pass - 1) {
                const int64_t c = c0 + __builtin_ctz(pass);
                top_insert_any(vals + c * m, idx + c * m, count + c, gate + c, m, row[c], r);
            }
        }
    }
}
#endif

/* Columns c_lo .. c_hi - 1's floors into gate (set to +inf before): AVX-512 where it runs and not plain, else the
 * plain version with most [c_hi - c_lo] as scratch (the same floors). */
static void col_floor(const float *st_t, int64_t rows, int64_t cols, int64_t c_lo, int64_t c_hi, int64_t m,
                      float *most, float *gate, int plain) {
#ifdef HAVE_AVX512_PATHS
    if (!plain && __builtin_cpu_supports("avx512f")) {
        col_floor_512(st_t, rows, cols, c_lo, c_hi, m, gate);
        return;
    }
#endif
    (void)plain;
    col_floor_plain(st_t, rows, cols, c_lo, c_hi, m, most, gate);
}

/* Columns c_lo .. c_hi - 1 of embedctl_col_top: their floor, then their selection (whole, independent of the
 * other columns: a part per thread). */
CLONES static void col_top_part(const float *st_t, int64_t rows, int64_t cols, int64_t c_lo, int64_t c_hi, int64_t m,
                         float *vals, float *gate, int64_t *count, int64_t *idx, int plain) {
    /* the plain floor's block maxima in these columns' own part of vals (their lists, filled after) */
    col_floor(st_t, rows, cols, c_lo, c_hi, m, vals + c_lo * m, gate, plain);
#ifdef HAVE_AVX512_PATHS
    if (!plain && __builtin_cpu_supports("avx512f")) {
        col_select_512(st_t, rows, cols, c_lo, c_hi, m, vals, gate, count, idx);
        return;
    }
#endif
    col_select_plain(st_t, rows, cols, c_lo, c_hi, m, vals, gate, count, idx);
}

/* nthreads > 1: the columns split into that many parts of whole 16-column groups, one thread each (OpenMP);
 * the same answer. */
int embedctl_col_top(const float *st_t, int64_t rows, int64_t cols, int64_t m, float *vals, float *gate,
                     int64_t *count, int64_t *idx, int nthreads, int plain) {
    if (m < 1 || m > rows || m > MAX_TOP || cols < 1) return -1;
    for (int64_t c = 0; c < cols; c++) {
        gate[c] = INFINITY;
        count[c] = 0;
    }
    const int64_t groups = (cols + 15) / 16, parts = OMP_HAVE && nthreads > 1 ? (nthreads < groups ? nthreads : groups) : 1;
    OMP_PRAGMA(omp parallel for num_threads(parts) schedule(static, 1) if (parts > 1))
    for (int64_t p = 0; p < parts; p++) {  /* only calls: see embedctl_centroid_scores */
        const int64_t c_lo = 16 * (p * groups / parts), c_hi = 16 * ((p + 1) * groups / parts);
        col_top_part(st_t, rows, cols, c_lo, c_hi < cols ? c_hi : cols, m, vals, gate, count, idx, plain);
    }
    for (int64_t c = 0; c < cols; c++)
        if (count[c] < m) return -2;  /* NaN scores */
    return 0;
}

/* embedctl_col_top_blocks' selection: block by block, the rows of each column whose block maximum reaches its
 * gate, in row order, inserted where they reach it (the gate rises as the list fills). Two versions, the same
 * inserts in the same order: AVX-512 (a block's passing columns from two compares, a column's 16 rows gathered
 * and compared at once, the inserts by top_insert_512) and plain C. */
static void blocks_select_plain(const float *st_t, int64_t rows, int64_t cols, const float *block_max, int64_t m,
                                float *vals, float *gate, int64_t *count, int64_t *idx) {
    for (int64_t b = 0; b < (rows + 15) / 16; b++) {
        const float *most = block_max + b * cols;
        const int64_t r1 = 16 * b + 16 < rows ? 16 * b + 16 : rows;
        for (int64_t c = 0; c < cols; c++) {
            if (!(most[c] >= gate[c])) continue;
            for (int64_t r = 16 * b; r < r1; r++) {
                const float v = st_t[r * cols + c];
                if (v >= gate[c]) top_insert(vals + c * m, idx + c * m, count + c, gate + c, m, v, r);
            }
        }
    }
}

#ifdef HAVE_AVX512_PATHS
__attribute__((target("avx512f"))) static void blocks_select_512(const float *st_t, int64_t rows, int64_t cols,
                                                                  const float *block_max, int64_t m, float *vals,
                                                                  float *gate, int64_t *count, int64_t *idx) {
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i row_step = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)cols)); /* a column's 16 rows */
    for (int64_t b = 0; b < (rows + 15) / 16; b++) {
        const float *most = block_max + b * cols;
        const __mmask16 in_block = tail_mask(rows - 16 * b);
        for (int64_t c0 = 0; c0 < cols; c0 += 16) {  /* >= is false for NaN, as in the plain version */
            const __mmask16 k = tail_mask(cols - c0);
            uint32_t pass = _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, most + c0),
                                                    _mm512_maskz_loadu_ps(k, gate + c0), _CMP_GE_OQ);
            for (; pass; pass &= pass - 1) {
                const int64_t c = c0 + __builtin_ctz(pass);
                const float *first = st_t + 16 * b * cols + c;
                const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), in_block, row_step, first, 4);
                uint32_t rows_in = _mm512_mask_cmp_ps_mask(in_block, v, _mm512_set1_ps(gate[c]), _CMP_GE_OQ);
                for (; rows_in; rows_in &= rows_in - 1) {  /* the gate may have risen since the compare */
                    const int i = __builtin_ctz(rows_in);
                    const float value = first[i * cols];
                    if (value >= gate[c])
                        top_insert_any(vals + c * m, idx + c * m, count + c, gate + c, m, value, 16 * b + i);
                }
            }
        }
    }
}
#endif

static void blocks_select(const float *st_t, int64_t rows, int64_t cols, const float *block_max, int64_t m,
                          float *vals, float *gate, int64_t *count, int64_t *idx, int plain) {
#ifdef HAVE_AVX512_PATHS
    if (!plain && __builtin_cpu_supports("avx512f") && cols * 16 <= INT32_MAX) {
        blocks_select_512(st_t, rows, cols, block_max, m, vals, gate, count, idx);
        return;
    }
#endif
    (void)plain;
    blocks_select_plain(st_t, rows, cols, block_max, m, vals, gate, count, idx);
}

/* block_gates' gathering: the values of block_max reaching their column's floor (in gate), appended per column
 * (room each; returns 1 when a column has more). AVX-512: a row's reaching columns from one compare per 16. */
#ifdef HAVE_AVX512_PATHS
__attribute__((target("avx512f"))) static int gather_reaching_512(const float *block_max, int64_t blocks,
                                                                   int64_t cols, const float *gate, int64_t room,
                                                                   float *gathered, int64_t *count) {
    for (int64_t b = 0; b < blocks; b++) {
        const float *row = block_max + b * cols;
        for (int64_t c0 = 0; c0 < cols; c0 += 16) {
            const __mmask16 k = tail_mask(cols - c0);
            uint32_t reach = _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, row + c0),
                                                     _mm512_maskz_loadu_ps(k, gate + c0), _CMP_GE_OQ);
            for (; reach; reach &= reach - 1) {
                const int64_t c = c0 + __builtin_ctz(reach);
                if (count[c] == room) return 1;
                gathered[c * room + count[c]++] = row[c];
            }
        }
    }
    return 0;
}
#endif

static int gather_reaching(const float *block_max, int64_t blocks, int64_t cols, const float *gate, int64_t room,
                           float *gathered, int64_t *count, int plain) {
#ifdef HAVE_AVX512_PATHS
    if (!plain && __builtin_cpu_supports("avx512f"))
        return gather_reaching_512(block_max, blocks, cols, gate, room, gathered, count);
#else
    (void)plain;
#endif
    for (int64_t b = 0; b < blocks; b++) {
        const float *row = block_max + b * cols;
        for (int64_t c = 0; c < cols; c++) {
            if (!(row[c] >= gate[c])) continue;
            if (count[c] == room) return 1;
            gathered[c * room + count[c]++] = row[c];
        }
    }
    return 0;
}

/* Each column's gate for embedctl_col_top_blocks: the m-th largest of its block maxima (block_max [blocks,
 * cols]), by value alone, so without the sorted lists embedctl_col_top keeps: its floor (the least of the maxima
 * of m groups of blocks: m maxima reach it, so the m-th largest does), the maxima reaching it gathered per column
 * (~3m of them on SciFact's scores), and the (count - m)-th smallest of those (kth_smallest). The same gate as the
 * m-th entry of embedctl_col_top's list over block_max, in ~1/4 of its time (its inserts: ~60% of the selection
 * on 16,384 centroids x 32 tokens). Returns 0; -1 where a column gathers more than GATE_ROOM * m maxima or fewer
 * than m (NaN scores), the caller then taking embedctl_col_top's list. count: scratch [cols]. */
#define GATE_ROOM 8
static int block_gates(const float *block_max, int64_t blocks, int64_t cols, int64_t m, float *gate, int64_t *count,
                       int plain) {
    const int64_t room = GATE_ROOM * m;
    float *gathered = malloc((size_t)(cols * room + cols) * sizeof *gathered);  /* + the plain floor's scratch */
    if (!gathered) return -1;
    for (int64_t c = 0; c < cols; c++) {
        gate[c] = INFINITY;
        count[c] = 0;
    }
    col_floor(block_max, blocks, cols, 0, cols, m, gathered + cols * room, gate, plain);
    int failed = gather_reaching(block_max, blocks, cols, gate, room, gathered, count, plain);
    for (int64_t c = 0; c < cols && !failed; c++) {
        failed = count[c] < m;
        if (!failed) gate[c] = kth_smallest(gathered + c * room, count[c], count[c] - m);
    }
    free(gathered);
    return failed ? -1 : 0;
}

/* embedctl_col_top given block_max float32 [ceil(rows / 16), cols], the maxima of st_t's blocks of 16 rows (NaN
 * passed over; written by embedctl_centroid_scores_amx_max as it stores the scores): the same answer, from the
 * few blocks that can hold a column's best. A column's gate is the m-th best of its block maxima (m different
 * rows reach it, so its m best values are at least it; block_gates, else embedctl_col_top's list over block_max,
 * 1/16 of the rows); then, block by block in row order, only the blocks whose maximum reaches the column's gate
 * are read, their rows in order (top_insert: the same inserts as embedctl_col_top's in the same order, so the
 * same ties). On 16,384 centroid
 * scores x 32 tokens, the two passes over the whole matrix (its floor, then the selection) were ~0.27 ms of a
 * ~2.2 ms search on one core; a column here reads ~40 blocks. Scratch and returns as embedctl_col_top, which
 * this falls back to with fewer than m blocks, or where the block maxima leave a column short (NaN scores). */
int embedctl_col_top_blocks(const float *st_t, int64_t rows, int64_t cols, const float *block_max, int64_t m,
                            float *vals, float *gate, int64_t *count, int64_t *idx, int plain) {
    const int64_t blocks = (rows + 15) / 16;
    if (m < 1 || m > rows || m > MAX_TOP || cols < 1) return -1;
    if (blocks < m || block_gates(block_max, blocks, cols, m, gate, count, plain) != 0) {
        if (blocks < m || embedctl_col_top(block_max, blocks, cols, m, vals, gate, count, idx, 1, plain) != 0)
            return embedctl_col_top(st_t, rows, cols, m, vals, gate, count, idx, 1, plain);
        for (int64_t c = 0; c < cols; c++)  /* idx holds the best blocks until the rows overwrite it */
            gate[c] = block_max[idx[c * m + m - 1] * cols + c];
    }
    for (int64_t c = 0; c < cols; c++) count[c] = 0;
    blocks_select(st_t, rows, cols, block_max, m, vals, gate, count, idx, plain);
    for (int64_t c = 0; c < cols; c++)
        if (count[c] < m) return embedctl_col_top(st_t, rows, cols, m, vals, gate, count, idx, 1, plain);
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

/* float -> float16 bits, rounded to nearest even (IEEE 754, as the F16C instruction and numpy round): a
 * magnitude below 2^-14 to a subnormal in units of 2^-24, one from 65520 up to infinity. */
static inline uint16_t float_to_half(float f) {
    union { float f; uint32_t u; } v = { f };
    const uint16_t sign = (uint16_t)((v.u >> 16) & 0x8000u);
    const uint32_t ax = v.u & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u);  /* NaN, infinity */
    if (ax >= 0x477ff000u) return sign | 0x7c00u;
    if (ax < 0x38800000u) {  /* a * 2^24 is exact; nearbyintf rounds half to even (the default mode) */
        const float a = f < 0.0f ? -f : f;
        return sign | (uint16_t)nearbyintf(a * 16777216.0f);
    }
    uint32_t h = (((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13);
    const uint32_t rest = ax & 0x1fffu;  /* the 13 bits dropped: above half up, exactly half to even */
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;  /* a carry moves into the exponent, as it should */
    return sign | (uint16_t)h;
}

#ifdef HAVE_AVX512_PATHS
__attribute__((target("avx512f"))) static void byte_lut16_512(const float *nib_t, int64_t nbytes, int64_t lq,
                                                              uint16_t *lut) {
    for (int64_t b = 0; b < nbytes; b++) {
        const float *hi = nib_t + b * 32 * lq, *lo = hi + 16 * lq;
        for (int64_t v = 0; v < 256; v++) {
            const float *h = hi + (v >> 4) * lq, *l = lo + (v & 15) * lq;
            uint16_t *out = lut + (b * 256 + v) * lq;
            for (int64_t q = 0; q < lq; q += 16) {
                const __m512 sum = _mm512_add_ps(_mm512_loadu_ps(h + q), _mm512_loadu_ps(l + q));
                _mm256_storeu_si256((__m256i *)(void *)(out + q),
                                    _mm512_cvtps_ph(sum, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            }
        }
    }
}
#endif

/* embedctl_byte_lut rounded to float16 (search.precision fp16): each entry h + l computed in float32 as there,
 * then rounded to nearest even -> lut uint16 [nbytes, 256, lq] (float16 bits). ``plain``: the plain C version
 * even where AVX-512 runs (the same bits). */
void embedctl_byte_lut16(const float *nib_t, int64_t nbytes, int64_t lq, uint16_t *lut, int plain) {
#ifdef HAVE_AVX512_PATHS
    if (!plain && lq % 16 == 0 && __builtin_cpu_supports("avx512f")) {
        byte_lut16_512(nib_t, nbytes, lq, lut);
        return;
    }
#else
    (void)plain;
#endif
    for (int64_t b = 0; b < nbytes; b++) {
        const float *hi = nib_t + b * 32 * lq, *lo = hi + 16 * lq;
        for (int64_t v = 0; v < 256; v++) {
            const float *h = hi + (v >> 4) * lq, *l = lo + (v & 15) * lq;
            uint16_t *out = lut + (b * 256 + v) * lq;
            for (int64_t q = 0; q < lq; q++) out[q] = float_to_half(h[q] + l[q]);
        }
    }
}

/* Centroid scores of one query held as [C, lq]: out[c, q] = sum_d centroids[c, d] * q_t[d, q], each sum one fused
 * multiply-add chain over d = 0 .. dim - 1 in order (fmaf: the same bits on every CPU, with or without
 * AVX-512). q_t float32 [dim, lq] (the query transposed), centroids float32 [C, dim], out float32 [C, lq]. The
 * AVX-512 version keeps 8 centroids x 32 tokens of sums in registers: on one Zen 5 core 8192 x 128 x 32 took
 * ~0.3 ms where MKL's sgemm took 0.66 ms and OpenBLAS's 0.6 (bench/plaid_search_floor.py). */
/* Row block b of block_max [ceil(num_c / 16), lq], columns n0 .. n1 - 1: per token, the largest of out's rows
 * 16 b .. 16 b + 15 (those below num_c) other than NaN (-inf when all are NaN), as _search_amx.c's block_maxima
 * (v > acc ? v : acc from -inf is maxps(v, acc): the same values); what embedctl_col_top_blocks selects each
 * token's best cells from. Called while the block's rows are in L1. */
static void block_maxima_plain(const float *out, int64_t b, int64_t num_c, int64_t lq, int64_t n0, int64_t n1,
                               float *block_max) {
    const int64_t c = 16 * b, rows = num_c - c < 16 ? num_c - c : 16;
    for (int64_t n = n0; n < n1; n++) {
        float acc = -INFINITY;
        for (int64_t i = 0; i < rows; i++) {
            const float v = out[(c + i) * lq + n];
            acc = v > acc ? v : acc;
        }
        block_max[b * lq + n] = acc;
    }
}

static void centroid_scores_plain(const float *centroids, int64_t num_c, int64_t dim, const float *q_t, int64_t lq,
                                  float *out, float *block_max) {
    for (int64_t c = 0; c < num_c; c++) {
        float *row = out + c * lq;
        for (int64_t q = 0; q < lq; q++) row[q] = 0.0f;
        for (int64_t d = 0; d < dim; d++) {  /* each row[q]'s chain still runs over d in order */
            const float w = centroids[c * dim + d];
            for (int64_t q = 0; q < lq; q++) row[q] = fmaf(w, q_t[d * lq + q], row[q]);
        }
        if (block_max && ((c + 1) % 16 == 0 || c + 1 == num_c)) block_maxima_plain(out, c / 16, num_c, lq, 0, lq, block_max);
    }
}

#define CS_ROWS 8 /* centroids per tile of the AVX-512 version (two tiles a block of 16, the unit the threads split) */
#ifdef HAVE_AVX512_PATHS
/* block_maxima_plain's AVX-512 twin, for the columns q0 .. q0 + 31 (masks m0, m1) the tile loop just wrote. */
__attribute__((target("avx512f"))) static void block_maxima_512(const float *out, int64_t b, int64_t num_c,
                                                                int64_t lq, int64_t q0, __mmask16 m0, __mmask16 m1,
                                                                float *block_max) {
    const int64_t c = 16 * b, rows = num_c - c < 16 ? num_c - c : 16;
    __m512 acc0 = _mm512_set1_ps(-INFINITY), acc1 = acc0;
    for (int64_t i = 0; i < rows; i++) {
        acc0 = _mm512_max_ps(_mm512_maskz_loadu_ps(m0, out + (c + i) * lq + q0), acc0);
        acc1 = _mm512_max_ps(_mm512_maskz_loadu_ps(m1, out + (c + i) * lq + q0 + 16), acc1);
    }
    _mm512_mask_storeu_ps(block_max + b * lq + q0, m0, acc0);
    _mm512_mask_storeu_ps(block_max + b * lq + q0 + 16, m1, acc1);
}

/* block_max (or NULL): each 16-row block's maxima (block_maxima_512) once its last row is stored. */
__attribute__((target("avx512f"))) static void centroid_scores_512(const float *centroids, int64_t num_c,
                                                                   int64_t dim, const float *q_t, int64_t lq,
                                                                   float *out, float *block_max) {
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
            if (block_max && (c + CS_ROWS) % 16 == 0) block_maxima_512(out, c / 16, num_c, lq, q0, m0, m1, block_max);
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
        if (block_max && num_c % 16) block_maxima_512(out, num_c / 16, num_c, lq, q0, m0, m1, block_max);  /* ragged */
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

static void centroid_scores_range(const float *centroids, int64_t num_c, int64_t dim, const float *q_t, int64_t lq,
                                  float *out, float *block_max, int plain) {
#ifdef HAVE_AVX512_PATHS
    if (!plain && __builtin_cpu_supports("avx512f")) {
        centroid_scores_512(centroids, num_c, dim, q_t, lq, out, block_max);
        return;
    }
#endif
    (void)plain;
    centroid_scores_plain(centroids, num_c, dim, q_t, lq, out, block_max);
}

/* nthreads > 1: the centroids split into that many ranges of whole blocks of 16 (each block's maxima then come
 * from one thread), one thread each (OpenMP); each score computed as on one. (The parallel loop only calls the
 * kernels: code inside an OpenMP region is compiled for the baseline CPU, whatever the target attributes around
 * it.) block_max (or NULL): float32 [ceil(num_c / 16), lq], the maxima of out's blocks of 16 rows, written as the
 * scores are (block_maxima_plain): embedctl_col_top_blocks' input, as the AMX scores kernel writes it. */
void embedctl_centroid_scores_max(const float *centroids, int64_t num_c, int64_t dim, const float *q_t, int64_t lq,
                                  float *out, float *block_max, int nthreads, int plain) {
    const int64_t blocks = (num_c + 15) / 16;
    const int64_t parts = OMP_HAVE && nthreads > 1 ? (nthreads < blocks ? nthreads : blocks) : 1;
    if (parts <= 1) {
        centroid_scores_range(centroids, num_c, dim, q_t, lq, out, block_max, plain);
        return;
    }
    OMP_PRAGMA(omp parallel for num_threads(parts) schedule(static, 1))
    for (int64_t p = 0; p < parts; p++) {
        const int64_t lo = 16 * (p * blocks / parts), hi = 16 * ((p + 1) * blocks / parts);
        centroid_scores_range(centroids + lo * dim, (hi < num_c ? hi : num_c) - lo, dim, q_t, lq, out + lo * lq,
                              block_max ? block_max + (lo / 16) * lq : NULL, plain);
    }
}

/* embedctl_centroid_scores_max without the block maxima. */
void embedctl_centroid_scores(const float *centroids, int64_t num_c, int64_t dim, const float *q_t, int64_t lq,
                              float *out, int nthreads, int plain) {
    embedctl_centroid_scores_max(centroids, num_c, dim, q_t, lq, out, NULL, nthreads, plain);
}
