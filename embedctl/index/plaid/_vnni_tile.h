/* The register tile of the AVX-512 VNNI assignment kernels (_kernels_vnni.c: int16 rows and centroids in pairs
 * through vpdpwssd; _kernels_i8.c: uint8 rows and int8 centroids in quads through vpdpbusd), included by each
 * after it defines TARGET and ROWS (8) and PANEL (16).
 *
 * VNNI_TILE(name, row_t, panel_t, PER, DOT) defines
 *     static void name(const row_t *xq, int64_t dim_pad, const panel_t *panel0, const panel_t *panel1,
 *                      int64_t groups, __m512i sums[ROWS][2])
 * rows 0..7 of xq (dim_pad elements each) against the two panels (32 centroids, laid out [groups][PANEL][PER])
 * -> int32 sums [ROWS][2]: 16 accumulators in named registers (an array of them made gcc copy every register
 * each step); per group of PER elements (32 bits), two panel loads and 8 rows' groups broadcast from memory,
 * DOT (the accumulate intrinsic) once per row and panel. */
#ifndef EMBEDCTL_VNNI_TILE_H
#define EMBEDCTL_VNNI_TILE_H

#define VNNI_STEP(r, a0, a1, PER, DOT) do { \
        int32_t group; \
        memcpy(&group, xq + (r) * dim_pad + (PER) * k, sizeof group); \
        const __m512i xv = _mm512_set1_epi32(group); \
        a0 = DOT(a0, xv, b0); \
        a1 = DOT(a1, xv, b1); \
    } while (0)

#define VNNI_TILE(name, row_t, panel_t, PER, DOT) \
    TARGET static void name(const row_t *xq, int64_t dim_pad, const panel_t *panel0, const panel_t *panel1, \
                            int64_t groups, __m512i sums[ROWS][2]) { \
        __m512i a00 = _mm512_setzero_si512(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, \
                a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00, a60 = a00, a61 = a00, a70 = a00, a71 = a00; \
        for (int64_t k = 0; k < groups; k++) { \
            const __m512i b0 = _mm512_loadu_si512((const void *)(panel0 + k * (PER) * PANEL)); \
            const __m512i b1 = _mm512_loadu_si512((const void *)(panel1 + k * (PER) * PANEL)); \
            VNNI_STEP(0, a00, a01, PER, DOT); VNNI_STEP(1, a10, a11, PER, DOT); \
            VNNI_STEP(2, a20, a21, PER, DOT); VNNI_STEP(3, a30, a31, PER, DOT); \
            VNNI_STEP(4, a40, a41, PER, DOT); VNNI_STEP(5, a50, a51, PER, DOT); \
            VNNI_STEP(6, a60, a61, PER, DOT); VNNI_STEP(7, a70, a71, PER, DOT); \
        } \
        sums[0][0] = a00; sums[0][1] = a01; sums[1][0] = a10; sums[1][1] = a11; \
        sums[2][0] = a20; sums[2][1] = a21; sums[3][0] = a30; sums[3][1] = a31; \
        sums[4][0] = a40; sums[4][1] = a41; sums[5][0] = a50; sums[5][1] = a51; \
        sums[6][0] = a60; sums[6][1] = a61; sums[7][0] = a70; sums[7][1] = a71; \
    }

#endif
