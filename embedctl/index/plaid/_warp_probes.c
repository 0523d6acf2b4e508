/* WARP's probes per query token, part of the PLAID search kernels (setup.py builds it into
 * embedctl/index/plaid/_search_kernels with _search_kernels.c, _warp_kernels.c and _search_amx.c): how many of
 * each token's best cells it probes, and its score for a vector outside them; and the selection of the best
 * candidates between stages (embedctl_top_positions, below). The reference is
 * embedctl/index/plaid/reference.py warp_probes (embedctl/search/warp.py says why): the same
 * counts and the same scores (each a value of the scores, copied). Here because that reference is a dozen numpy
 * calls on a [32, 33] array: ~25 us a query with the data in cache, ~0.07 ms of a search's p50 on one core of a
 * 2-core AMX host (the stages before and after evict the interpreter's data; a /tmp harness, the two ways
 * alternating over 300 SciFact queries). */
#include <stdlib.h>

#include "_search_common.h"

int embedctl_warp_probes(const int64_t *ordered, int64_t lq, int64_t m, const int64_t *cell_sizes, int64_t num_c,
                         const float *st_t, double want, int64_t least, int64_t most, int64_t *ncells, float *miss,
                         float *cell_scores);
int64_t embedctl_top_positions(const float *scores, int64_t len, int64_t n, int64_t *out);

/* ordered int64 [lq, m]: each token's best cells, best first (ids checked against num_c: -2); cell_sizes int64
 * [num_c]; st_t float32 [num_c, lq] (the centroid scores as the kernels hold them). Token q probes n cells:
 * 1 + how many of the running sums of its first `most` cells' sizes stay below `want`, then at least `least`
 * and at most `most` (1 <= least <= most <= m, else -1). Its score outside them, miss[q], is that of its first
 * unprobed cell, ordered[q, min(n, m - 1)], or its lowest over every cell where n reaches m (the cells are all
 * probed: a tiny index). cell_scores float32 [lq, m] (or NULL): the scores of each token's cells, st_t[ordered[q,
 * j], q], for embedctl_warp_scores (gathered here, where the rows were just read, instead of by numpy's fancy
 * indexing: ~15 us of a search's p50 on that host). Returns 0. */
int embedctl_warp_probes(const int64_t *ordered, int64_t lq, int64_t m, const int64_t *cell_sizes, int64_t num_c,
                         const float *st_t, double want, int64_t least, int64_t most, int64_t *ncells, float *miss,
                         float *cell_scores) {
    if (lq < 1 || lq > MAX_LQ || m < 1 || num_c < 1 || least < 1 || least > most || most > m) return -1;
    for (int64_t i = 0; i < lq * m; i++)
        if ((uint64_t)ordered[i] >= (uint64_t)num_c) return -2;
    for (int64_t q = 0; q < lq; q++) {
        const int64_t *cells = ordered + q * m;
        int64_t sum = 0, below = 0;
        for (int64_t j = 0; j < most; j++) {  /* every one counted, as the reference's count_nonzero */
            sum += cell_sizes[cells[j]];
            below += (double)sum < want;
        }
        const int64_t n = below + 1 < least ? least : below + 1 > most ? most : below + 1;
        if (cell_scores)
            for (int64_t j = 0; j < m; j++) cell_scores[q * m + j] = st_t[cells[j] * lq + q];
        ncells[q] = n;
        if (n < m) {
            miss[q] = st_t[cells[n] * lq + q];
            continue;
        }
        float lowest = st_t[q];
        for (int64_t c = 1; c < num_c; c++) lowest = st_t[c * lq + q] < lowest ? st_t[c * lq + q] : lowest;
        miss[q] = lowest;
    }
    return 0;
}

/* The min-heap h[0 .. n - 1] with h[i] replaced, restored (the smallest at h[0]). */
static inline void sift_down(float *h, int64_t n, int64_t i) {
    const float x = h[i];
    for (;;) {
        int64_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && h[child + 1] < h[child]) child++;
        if (!(h[child] < x)) break;
        h[i] = h[child];
        i = child;
    }
    h[i] = x;
}

/* reference.top_positions: the positions of the n largest of scores[0 .. len - 1] (1 <= n < len, else -1), NaN
 * counted as -inf, a tie at the n-th largest value to the earlier positions, into out int64 [n] ascending.
 * Returns n, or -2 out of memory.
 *
 * The n largest values so far in a min-heap: its top is the n-th largest seen, and a score replaces it only when
 * above it (n ln(len / n) times in random order: ~190 of a WARP search's ~4,200 estimates at k=10). A group of 16
 * scores none of which is above the top is skipped after one comparison each (the compiler's vector compare, no
 * branch a score), and so, with the n-th largest value v known, is a group of 16 below v in the pass that writes
 * the positions. Every value above v is in the heap at the end (the top only rises, and only it leaves), so the
 * heap counts them, and the ties at v go to the earlier positions. The first version selected v among a copy of
 * every score (Hoare's selection, a mispredicted branch a comparison): 14-16 us for those estimates at n = 40 and
 * 29-40 at n = 200, where the reference (numpy's partition and its Python) took 12-15 and 14-19. This one, 4,500
 * scores: 6.5 us at n = 10, 8.6 at 40, 9.9 at 64, 12.0 at 100 (the reference 12.0), 18.6 at 200 (13.7): the
 * sifts grow with n, so the native backend calls it up to n = 64 (NativeBackend.top_positions; one core of a
 * 2-core AMX host, in-process medians of 400 calls). */
int64_t embedctl_top_positions(const float *scores, int64_t len, int64_t n, int64_t *out) {
    if (n < 1 || n >= len) return -1;
    float *heap = malloc((size_t)n * sizeof *heap);
    if (!heap) return -2;
    for (int64_t i = 0; i < n; i++) heap[i] = scores[i] == scores[i] ? scores[i] : -INFINITY;
    for (int64_t i = n / 2; i-- > 0;) sift_down(heap, n, i);
    int64_t i = n;
    for (; i < len; i++) {
        if (i % 16 == 0 && i + 16 <= len) { /* a group of 16 none above the top: skipped at once */
            int any = 0;
            for (int j = 0; j < 16; j++) any |= scores[i + j] > heap[0]; /* NaN: never above */
            if (!any) {
                i += 15;
                continue;
            }
        }
        if (scores[i] > heap[0]) {
            heap[0] = scores[i];
            sift_down(heap, n, 0);
        }
    }
    const float v = heap[0]; /* the n-th largest */
    int64_t above = 0;
    for (int64_t j = 0; j < n; j++) above += heap[j] > v;
    free(heap);
    int64_t ties = n - above, w = 0;
    for (i = 0; i < len && w < n; i++) {
        if (v > -INFINITY && i % 16 == 0 && i + 16 <= len) { /* a group of 16 below v: skipped at once */
            int any = 0;
            for (int j = 0; j < 16; j++) any |= scores[i + j] >= v; /* NaN (-inf here): never */
            if (!any) {
                i += 15;
                continue;
            }
        }
        const float x = scores[i] == scores[i] ? scores[i] : -INFINITY;
        if (x > v || (x == v && ties-- > 0)) out[w++] = i;
    }
    return w;
}
