/* erase (torchvision's F.erase at a fixed box) and random_erasing (RandomErasing: a box of
 * random area and aspect at a random place, filled with a value or with noise), on uint8
 * and float32 images. The reference recipe (torchvision's classification references, the
 * timm recipes) applies RandomErasing after Normalize, to the float32 tensor, so float32 is
 * the main path. The output is a fresh tensor (a batch slot under a fused map_batch) holding
 * the input with the box filled; an image left unerased is the very tensor.
 *
 * Workload: once per training image, a 224 x 224 x 3 float32 or uint8 tensor. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pipeline/fn/image.h"

#define MAX_VALUES 16

typedef struct {
    sl_fn base;
    char comp[SL_NAME_MAX];
    bool random;          /* random_erasing; else erase at the fixed box */
    int i, j, h, w;       /* erase's box */
    double p, scale_lo, scale_hi, log_ratio_lo, log_ratio_hi;
    bool random_value;    /* noise instead of value */
    float value[MAX_VALUES];
    int nvalue;
} erase_fn;

/* A standard normal draw (Box-Muller; the first value of the pair). */
static float normal(sl_rng *r) {
    double u1 = 1.0 - sl__rng_double(r), u2 = sl__rng_double(r); /* u1 in (0, 1] */
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* uint8 of a fill value: rounded down and saturated (torchvision's cast) */
static uint8_t value_u8(float v) {
    if (!(v > 0)) return 0;
    if (v >= 255) return 255;
    return (uint8_t)v;
}

/* Fill the box (i, j, h, w) of the H x W x C image at px (dtype dt) in place: with the
 * values (one, or one per channel), or with noise drawn from rng when rng is non-NULL. */
static void fill_box(void *px, sl_dtype dt, int64_t W, int64_t C, int64_t i, int64_t j, int64_t h, int64_t w,
                     const float *value, int nvalue, sl_rng *rng) {
    for (int64_t y = i; y < i + h; y++) {
        int64_t base = (y * W + j) * C;
        for (int64_t k = 0; k < w * C; k++) {
            int64_t c = k % C;
            if (dt == SL_DT_U8) {
                uint8_t v = rng ? (uint8_t)sl__rng_below(rng, 256) : value_u8(value[nvalue == 1 ? 0 : c]);
                ((uint8_t *)px)[base + k] = v;
            } else {
                ((float *)px)[base + k] = rng ? normal(rng) : value[nvalue == 1 ? 0 : c];
            }
        }
    }
}

/* torchvision's RandomErasing.get_params on an H x W image: true and the box, or false when
 * no erasing happens (the p draw, or 10 tries that did not fit). */
static bool draw_box(const erase_fn *f, sl_rng *rng, int64_t H, int64_t W, int64_t *bi, int64_t *bj, int64_t *bh,
                     int64_t *bw) {
    if (!(sl__rng_double(rng) < f->p)) return false;
    double area = (double)H * (double)W;
    for (int t = 0; t < 10; t++) {
        double ea = area * (f->scale_lo + sl__rng_double(rng) * (f->scale_hi - f->scale_lo));
        double ar = exp(f->log_ratio_lo + sl__rng_double(rng) * (f->log_ratio_hi - f->log_ratio_lo));
        double hh = nearbyint(sqrt(ea * ar)), ww = nearbyint(sqrt(ea / ar)); /* Python's round */
        if (!(hh < (double)H && ww < (double)W)) continue;
        *bh = (int64_t)hh;
        *bw = (int64_t)ww;
        *bi = (int64_t)sl__rng_below(rng, (uint64_t)(H - *bh + 1));
        *bj = (int64_t)sl__rng_below(rng, (uint64_t)(W - *bw + 1));
        return true;
    }
    return false;
}

static sl_status erase_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const erase_fn *f = (const erase_fn *)fn;
    sl_status s = SL_OK;
    int64_t H, W, C;
    const sl_tensor *in = sl__fn_image_input(fn, e, f->comp, &H, &W, &C, &s);
    if (!in) return s;
    char d[128];
    if (in->dtype != SL_DT_U8 && in->dtype != SL_DT_F32) {
        sl_err(SL_EINVAL, "'%s' is %s; erasing takes uint8 or float32 images", f->comp,
               sl_tensor_describe(in, d, sizeof d));
        sl_err_hint("cast to float32 first");
        return SL_EINVAL;
    }
    if (!(f->random && f->random_value) && f->nvalue != 1 && f->nvalue != C) {
        sl_err(SL_EINVAL, "'%s' is %s: %lld channels, but %d fill values were given", f->comp,
               sl_tensor_describe(in, d, sizeof d), (long long)C, f->nvalue);
        sl_err_hint("give one value (for every channel) or one per channel");
        return SL_EINVAL;
    }
    sl_rng rng = {call->seed};
    int64_t bi = f->i, bj = f->j, bh = f->h, bw = f->w;
    if (f->random) {
        if (!draw_box(f, &rng, H, W, &bi, &bj, &bh, &bw)) return SL_OK;
    } else if (bi + bh > H || bj + bw > W) {
        sl_err(SL_EINVAL, "the box at row %" PRId64 ", column %" PRId64 " of %" PRId64 "x%" PRId64
               " does not fit '%s' (%s)", bi, bj, bh, bw, f->comp, sl_tensor_describe(in, d, sizeof d));
        sl_err_hint("the box must lie inside the image: i + h <= height, j + w <= width");
        return SL_EINVAL;
    }
    sl_tensor out;
    if ((s = sl__fn_out_alloc(call, f->comp, &out, in->dtype, in->rank, in->dims))) return s;
    memcpy(out.data, in->data, (size_t)(H * W * C) * sl_dtype_size(in->dtype));
    fill_box(out.data, in->dtype, W, C, bi, bj, bh, bw, f->value, f->nvalue, f->random && f->random_value ? &rng : NULL);
    if ((s = sl_element_set(e, f->comp, &out))) sl_tensor_release(&out);
    return s;
}

static const sl_fn_vt erase_vt = {.name = "erase", .apply = erase_apply};
static const sl_fn_vt random_erase_vt = {.name = "random_erasing", .apply = erase_apply};

static sl_status erase_new(const sl_fn_vt *vt, const char *comp, const float *value, int nvalue, bool need_value,
                           erase_fn **out) {
    *out = NULL;
    if (!comp || !*comp || strlen(comp) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "%s: component name must be 1..%d characters", vt->name, SL_NAME_MAX - 1);
    if (need_value && (!value || nvalue < 1 || nvalue > MAX_VALUES))
        return sl_err(SL_EINVAL, "%s: %d fill values: give 1..%d", vt->name, nvalue, MAX_VALUES);
    for (int k = 0; need_value && k < nvalue; k++)
        if (!isfinite(value[k])) return sl_err(SL_EINVAL, "%s: fill value %g is not finite", vt->name, value[k]);
    erase_fn *f = sl__fn_new(sizeof *f, vt, vt->name);
    if (!f) return SL_ENOMEM;
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    if (need_value) {
        memcpy(f->value, value, sizeof *value * (size_t)nvalue);
        f->nvalue = nvalue;
    }
    *out = f;
    return SL_OK;
}

sl_status sl_fn_erase(const char *comp, int i, int j, int h, int w, const float *value, int nvalue, sl_fn **out) {
    *out = NULL;
    if (i < 0 || j < 0 || h < 1 || w < 1)
        return sl_err(SL_EINVAL, "erase: the box at row %d, column %d of %dx%d needs i, j >= 0 and h, w >= 1", i, j, h,
                      w);
    erase_fn *f;
    sl_status s = erase_new(&erase_vt, comp, value, nvalue, true, &f);
    if (s) return s;
    f->i = i;
    f->j = j;
    f->h = h;
    f->w = w;
    *out = &f->base;
    return SL_OK;
}

sl_status sl_fn_random_erasing(const char *comp, double p, double scale_lo, double scale_hi, double ratio_lo,
                               double ratio_hi, const float *value, int nvalue, bool random_value, sl_fn **out) {
    *out = NULL;
    if (!(p >= 0 && p <= 1)) return sl_err(SL_EINVAL, "random_erasing: probability %g must be in [0, 1]", p);
    if (!(scale_lo > 0 && scale_lo <= scale_hi && scale_hi <= 1))
        return sl_err(SL_EINVAL, "random_erasing: scale [%g, %g] must have 0 < lo <= hi <= 1", scale_lo, scale_hi);
    if (!(ratio_lo > 0 && ratio_lo <= ratio_hi && isfinite(ratio_hi)))
        return sl_err(SL_EINVAL, "random_erasing: ratio [%g, %g] must have 0 < lo <= hi", ratio_lo, ratio_hi);
    erase_fn *f;
    sl_status s = erase_new(&random_erase_vt, comp, value, nvalue, !random_value, &f);
    if (s) return s;
    f->random = true;
    f->p = p;
    f->scale_lo = scale_lo;
    f->scale_hi = scale_hi;
    f->log_ratio_lo = log(ratio_lo);
    f->log_ratio_hi = log(ratio_hi);
    f->random_value = random_value;
    *out = &f->base;
    return SL_OK;
}
