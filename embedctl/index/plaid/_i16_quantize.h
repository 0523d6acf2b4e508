/* The int16 rounding shared by the fused 16-bit integer kernels (_kernels_i16.c on AVX2, _kernels_vnni.c on
 * AVX-512 VNNI): the scaling and the rounding bound are derived in _kernels_i16.c's header comment. Both kernels
 * quantize a row the same way, so they keep the same candidates and give the same answers. */
#ifndef EMBEDCTL_I16_QUANTIZE_H
#define EMBEDCTL_I16_QUANTIZE_H
#include <math.h>
#include <stdint.h>
#include "_nearest_scan.h"

#define QMAX 32767.0

/* Row i of the block: int16 components at norm 32767, the scale back to score units, the rounding bound. */
static void quantize_row(const float *xr, int64_t dim, int64_t dim_pad, double cmax, float centroid_scale,
                         int16_t *xq, struct row_state *s) {
    double sq = 0.0;
    for (int64_t d = 0; d < dim; d++) sq += (double)xr[d] * xr[d];
    const double norm = sqrt(sq), scale = norm > 0.0 ? QMAX / norm : 0.0, half = 0.5 * sqrt((double)dim_pad);
    for (int64_t d = 0; d < dim; d++) {
        double v = nearbyint((double)xr[d] * scale);
        xq[d] = (int16_t)(v > QMAX ? QMAX : (v < -QMAX ? -QMAX : v));
    }
    for (int64_t d = dim; d < dim_pad; d++) xq[d] = 0;
    s->inv_scale = norm > 0.0 ? (float)(1.0 / (scale * (double)centroid_scale)) : 0.0f;
    /* the bound of _kernels_i16.c, with 1e-6 relative for the float32 conversion, product and bias addition */
    s->err = (float)(norm * cmax * (half / QMAX * (2.0 + half / QMAX) + 1e-6) * 1.0001);
    s->top = -INFINITY;
    s->count = s->overflow = 0;
}
#endif
