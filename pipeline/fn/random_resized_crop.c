/* random_resized_crop: torchvision's RandomResizedCrop — a crop of random area fraction in
 * [scale_lo, scale_hi] and log-uniform aspect ratio in [ratio_lo, ratio_hi] (10 tries, then
 * a center crop clamped to the ratio range), bilinearly resized to height x width,
 * antialiased unless sl_fn_set_antialias(fn, false) (torchvision's antialias argument).
 *
 * Workload: once per training image, after decode. The crop is chosen by sl__rrc_rect
 * (pipeline/fn/image.c) from the call's seed, the same code decode_jpeg runs when it absorbs
 * this function, so the fused path reads the same rectangle. The draws, in order: per try
 * U(scale) then U(log ratio); on success randint for the top row, then for the left column. */
#include <math.h>

#include "pipeline/fn/image.h"

static const sl_fn_vt rrc_vt = {.name = "random_resized_crop", .apply = sl__geom_apply};

sl_status sl_fn_random_resized_crop(const char *comp, int height, int width, double scale_lo,
                                    double scale_hi, double ratio_lo, double ratio_hi, sl_fn **out) {
    *out = NULL;
    if (!(scale_lo > 0) || !(scale_lo <= scale_hi) || !isfinite(scale_hi))
        return sl_err(SL_EINVAL, "random_resized_crop: scale range [%g, %g] must satisfy "
                      "0 < lo <= hi", scale_lo, scale_hi);
    if (!(ratio_lo > 0) || !(ratio_lo <= ratio_hi) || !isfinite(ratio_hi))
        return sl_err(SL_EINVAL, "random_resized_crop: ratio range [%g, %g] must satisfy "
                      "0 < lo <= hi", ratio_lo, ratio_hi);
    sl__geom_fn *g;
    sl_status s = sl__geom_new(&rrc_vt, SL__GEOM_RANDOM_RESIZED_CROP, comp,
                               height, width, &g);
    if (s) return s;
    g->scale_lo = scale_lo;
    g->scale_hi = scale_hi;
    g->ratio_lo = ratio_lo;
    g->ratio_hi = ratio_hi;
    *out = &g->im.base;
    return SL_OK;
}
