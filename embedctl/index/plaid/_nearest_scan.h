/* The candidate scan shared by the fused nearest-centroid kernels (_kernels_amx.c, _kernels_i16.c; _kernels.c
 * uses exact()): each row keeps its best approximate score and the columns within twice the approximation
 * bound of it, then the survivors are rescored exactly in double precision. Static functions: each kernel
 * file gets its own copy. */
#ifndef EMBEDCTL_NEAREST_SCAN_H
#define EMBEDCTL_NEAREST_SCAN_H
#include <math.h>
#include <stdint.h>

#ifndef CAP
#define CAP 32           /* candidates kept per row before compaction (a kernel with a wider bound sets more) */
#endif

/* Per-row running state: best approximate score so far, candidates in column order. The row's candidate
 * threshold (top - 2 err) lives in a separate dense array, the one value the scan reads for every block; it
 * becomes +inf when the candidate list overflows (the row is then rescored over all centroids).
 * ``inv_scale`` is the int16 kernel's factor from integer sums back to scores. */
struct row_state {
    float top, err, inv_scale;
    int count, overflow;
    int32_t cols[CAP];
    float values[CAP];
};

static inline void push(struct row_state *s, float *threshold, int32_t col, float v) {
    if (v > s->top) {
        s->top = v;
        *threshold = v - 2.0f * s->err - 1e-6f * (1.0f + fabsf(v));
    }
    if (s->count == CAP) {  /* drop candidates the higher threshold has ruled out */
        int k = 0;
        for (int i = 0; i < s->count; i++)
            if (s->values[i] >= *threshold) { s->cols[k] = s->cols[i]; s->values[k] = s->values[i]; k++; }
        s->count = k;
        if (k == CAP) { s->overflow = 1; *threshold = INFINITY; return; }
    }
    s->cols[s->count] = col;
    s->values[s->count++] = v;
}

/* The columns of one block of approximate scores that reached the row's threshold (bit l of ``hits``: column
 * c0 + l, score values[l]), pushed in column order; each is checked again, as a push may raise the threshold,
 * and padding columns (>= c) are skipped. */
static inline void push_hits(struct row_state *s, float *threshold, uint32_t hits, const float *values, int64_t c0,
                             int64_t c) {
    while (hits) {
        const int l = __builtin_ctz(hits);
        hits &= hits - 1;
        if (values[l] >= *threshold && c0 + l < c) push(s, threshold, (int32_t)(c0 + l), values[l]);
    }
}

static inline double exact(const float *xr, const float *cr, int64_t dim) {
    double part[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t d = 0;
    for (; d + 4 <= dim; d += 4)
        for (int k = 0; k < 4; k++) part[k] += (double)xr[d + k] * cr[d + k];
    for (; d < dim; d++) part[0] += (double)xr[d] * cr[d];
    return (part[0] + part[1]) + (part[2] + part[3]);
}

/* Start a row's scan from a likely best column ``hint`` (its previous k-means assignment; -1: none): the hint's exact
 * score less the row's bound is a floor under the row's best approximate score, so the threshold starts near its
 * final value instead of at -inf. The best approximate score is still pushed (it is above every threshold), so the
 * final threshold and the surviving candidates are the ones an unseeded scan ends with; far fewer columns are pushed
 * on the way (the int8 kernel's wide bound let ~16 per row through on SciFact's vectors, each push a branch the CPU
 * mispredicts; AMX's bfloat16 bound ~7 row blocks per row, 1.2 with hints: 3-5% of its time; the int16 kernel's
 * tight bound few, and it gained nothing measurable, so the int8 and AMX kernels seed, the int16 ones do not). */
static inline void seed_row(struct row_state *s, float *threshold, const float *xr, const float *cent,
                            const float *bias, int64_t hint, int64_t c, int64_t dim) {
    if (hint < 0 || hint >= c) return;
    const double e = exact(xr, cent + hint * dim, dim) + (bias ? (double)bias[hint] : 0.0);
    s->top = (float)(e - (double)s->err - 1e-6 * (1.0 + fabs(e)));  /* the 1e-6 covers the rounding to float */
    *threshold = s->top - 2.0f * s->err - 1e-6f * (1.0f + fabsf(s->top));
}

/* The exact argmax among a row's surviving candidates (all centroids if its candidate list overflowed). */
static inline int64_t finish_row(const struct row_state *s, float threshold, const float *xr, const float *cent,
                          const float *bias, int64_t c, int64_t dim, int64_t *arg, float *best) {
    double top = -INFINITY;
    int64_t count = 0;
    *arg = 0;
    for (int64_t i = 0; i < (s->overflow ? c : s->count); i++) {
        const int64_t col = s->overflow ? i : s->cols[i];
        if (!s->overflow && s->values[i] < threshold) continue;
        const double v = exact(xr, cent + col * dim, dim) + (bias ? (double)bias[col] : 0.0);
        count++;
        if (v > top) { top = v; *arg = col; }
    }
    if (best) *best = (float)top;
    return count;
}
#endif
