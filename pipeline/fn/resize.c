/* resize: bilinear resize to height x width with half-pixel centers (PyTorch's
 * align_corners=False, antialias off); uint8 in gives uint8 out (rounded to nearest),
 * float32 gives float32. The resampler (sl__resize_u8 / sl__resize_f32 in image.c) uses
 * precomputed column and row tables and works row by row.
 *
 * Workload: the hot path of an image pipeline (e.g. 224 x 224 x 3 outputs). An image that
 * already has the size passes through untouched. Downscaling by large factors aliases, as
 * bilinear without antialias does; decode_jpeg absorbs a resize that follows it and
 * decodes at the smallest DCT scale that still covers the target, which avoids most of it. */
#include "pipeline/fn/image.h"

const sl_fn_vt sl__resize_vt = {.name = "resize", .apply = sl__geom_apply};

sl_status sl_fn_resize(const char *comp, int height, int width, sl_fn **out) {
    *out = NULL;
    sl__geom_fn *g;
    sl_status s = sl__geom_new(&sl__resize_vt, SL__GEOM_RESIZE, comp, height, width, &g);
    if (s) return s;
    *out = &g->base;
    return SL_OK;
}
