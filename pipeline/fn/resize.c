/* resize: bilinear resize to height x width, or (sl_fn_resize_shorter) the shorter side to N
 * keeping the aspect ratio as torchvision's Resize(N) does, with half-pixel centers
 * (PyTorch's align_corners=False); uint8 in gives uint8 out (rounded to nearest), float32
 * gives float32. Antialiased by default (sl_fn_set_antialias): shrinking, the bilinear
 * filter is widened by the scale factor (sl__resize_aa_u8 in image.c), as PIL and
 * torchvision's antialias=True do; without it, 2-tap bilinear (sl__resize_u8), which
 * aliases when shrinking by more than 2x. Both use precomputed tables and work row by row.
 *
 * Workload: the hot path of an image pipeline (e.g. 224 x 224 x 3 outputs). An image that
 * already has the size passes through untouched. decode_jpeg absorbs a resize that follows
 * it and decodes at the smallest DCT scale that still covers the target. */
#include "pipeline/fn/image.h"

static const sl_fn_vt resize_vt = {.name = "resize", .apply = sl__geom_apply};

sl_status sl_fn_resize(const char *comp, int height, int width, sl_fn **out) {
    *out = NULL;
    sl__geom_fn *g;
    sl_status s = sl__geom_new(&resize_vt, SL__GEOM_RESIZE, comp, height, width, &g);
    if (s) return s;
    *out = &g->im.base;
    return SL_OK;
}

sl_status sl_fn_resize_shorter(const char *comp, int shorter, sl_fn **out) {
    *out = NULL;
    if (shorter < 1) return sl_err(SL_EINVAL, "resize: shorter side %d must be at least 1", shorter);
    sl__geom_fn *g;
    sl_status s = sl__geom_new(&resize_vt, SL__GEOM_RESIZE, comp, shorter, shorter, &g);
    if (s) return s;
    g->shorter = shorter;
    *out = &g->im.base;
    return SL_OK;
}
