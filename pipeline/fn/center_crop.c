/* center_crop: the central height x width region (torchvision's CenterCrop offsets,
 * round((H - h) / 2) with ties to even), or the whole extent in a dimension where the
 * image is smaller: no padding. Any fixed-size dtype; the result is a fresh copy (a
 * shared view when the image already fits). It never resamples: its antialias setting
 * (sl_fn_set_antialias, accepted like the other geometry functions') changes nothing.
 *
 * Workload: evaluation pipelines, once per image. decode_jpeg absorbs it when it follows
 * directly, and then decodes only the rectangle (sl__center_rect in image.c). */
#include "pipeline/fn/image.h"

static const sl_fn_vt center_crop_vt = {.name = "center_crop", .apply = sl__geom_apply};

sl_status sl_fn_center_crop(const char *comp, int height, int width, sl_fn **out) {
    *out = NULL;
    sl__geom_fn *g;
    sl_status s = sl__geom_new(&center_crop_vt, SL__GEOM_CENTER_CROP, comp, height, width, &g);
    if (s) return s;
    *out = &g->im.base;
    return SL_OK;
}
