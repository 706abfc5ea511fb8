/* The colour functions: adjust_brightness, adjust_contrast, adjust_saturation and
 * adjust_hue at fixed factors (torchvision's F.adjust_*) and color_jitter (torchvision's
 * ColorJitter: the four in a random order, factors uniform in their ranges), all on uint8
 * images of 1 or 3 channels, through the kernels of color.h. The output is a fresh tensor
 * (a batch slot under a fused map_batch) holding a copy of the input that the kernels then
 * adjust in place; the input is never written.
 *
 * Workload: once per training image, usually a 224 x 224 x 3 crop. */
#include <stdio.h>
#include <string.h>

#include "pipeline/fn/color.h"
#include "pipeline/fn/image.h"

enum { BRIGHTNESS, CONTRAST, SATURATION, HUE };

static const char *const FACTOR_NAMES[4] = {"brightness", "contrast", "saturation", "hue"};

typedef struct {
    sl_fn base;
    char comp[SL_NAME_MAX];
    int kind;     /* BRIGHTNESS .. HUE */
    float factor; /* as torchvision sees it: a float32 */
} adjust_fn;

typedef struct {
    sl_fn base;
    char comp[SL_NAME_MAX];
    double lo[4], hi[4]; /* each factor's range */
    bool on[4];          /* the range is not the identity: the adjustment is drawn and applied */
} jitter_fn;

static void adjust(int kind, uint8_t *px, int64_t npix, int64_t c, float f) {
    switch (kind) {
    case BRIGHTNESS: sl__adjust_brightness_u8(px, npix, c, f); break;
    case CONTRAST: sl__adjust_contrast_u8(px, npix, c, f); break;
    case SATURATION: sl__adjust_saturation_u8(px, npix, c, f); break;
    default: sl__adjust_hue_u8(px, npix, c, f); break;
    }
}

/* The output tensor of a colour function: a copy of comp's uint8 image of 1 or 3 channels
 * in *out, its pixels and channels in *npix and *c. SL_EINVAL naming the component for
 * another dtype or channel count. */
static sl_status color_out(const sl_fn *fn, const sl_element *e, const char *comp, const sl_fn_call *call,
                           sl_tensor *out, int64_t *npix, int64_t *c) {
    sl_status s = SL_OK;
    int64_t H, W;
    const sl_tensor *in = sl__fn_image_input(fn, e, comp, &H, &W, c, &s);
    if (!in) return s;
    char d[128];
    if (in->dtype != SL_DT_U8) {
        sl_err(SL_EINVAL, "'%s' is %s; colour adjustments take uint8 images", comp,
               sl_tensor_describe(in, d, sizeof d));
        sl_err_hint("apply %s before normalize (or cast to uint8 first)", sl_fn_name(fn));
        return SL_EINVAL;
    }
    if (*c != 1 && *c != 3) {
        sl_err(SL_EINVAL, "'%s' is %s: %lld channels, but colour adjustments take 1 or 3", comp,
               sl_tensor_describe(in, d, sizeof d), (long long)*c);
        sl_err_hint("decode with channels=3 (RGB) or 1 (grayscale)");
        return SL_EINVAL;
    }
    if ((s = sl__fn_out_alloc(call, comp, out, SL_DT_U8, in->rank, in->dims))) return s;
    *npix = H * W;
    memcpy(out->data, in->data, (size_t)(*npix * *c));
    return SL_OK;
}

static sl_status adjust_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const adjust_fn *f = (const adjust_fn *)fn;
    sl_tensor out;
    int64_t npix, c;
    sl_status s = color_out(fn, e, f->comp, call, &out, &npix, &c);
    if (s) return s;
    adjust(f->kind, out.data, npix, c, f->factor);
    if ((s = sl_element_set(e, f->comp, &out))) sl_tensor_release(&out);
    return s;
}

static const sl_fn_vt adjust_vts[4] = {
    {.name = "adjust_brightness", .apply = adjust_apply},
    {.name = "adjust_contrast", .apply = adjust_apply},
    {.name = "adjust_saturation", .apply = adjust_apply},
    {.name = "adjust_hue", .apply = adjust_apply},
};

static sl_status check_comp(const char *name, const char *comp) {
    if (!comp || !*comp || strlen(comp) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "%s: component name must be 1..%d characters", name, SL_NAME_MAX - 1);
    return SL_OK;
}

static sl_status adjust_new(int kind, const char *comp, double factor, sl_fn **out) {
    const char *name = adjust_vts[kind].name;
    *out = NULL;
    sl_status s = check_comp(name, comp);
    if (s) return s;
    if (kind == HUE ? !(factor >= -0.5 && factor <= 0.5) : !(factor >= 0 && factor <= 1e6))
        return sl_err(SL_EINVAL, "%s: factor %g must be in %s", name, factor,
                      kind == HUE ? "[-0.5, 0.5] (turns of the colour wheel)" : "[0, 1e6] (1 is the identity)");
    adjust_fn *f = sl__fn_new(sizeof *f, &adjust_vts[kind], name);
    if (!f) return SL_ENOMEM;
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    f->kind = kind;
    f->factor = (float)factor;
    *out = &f->base;
    return SL_OK;
}

sl_status sl_fn_adjust_brightness(const char *comp, double factor, sl_fn **out) {
    return adjust_new(BRIGHTNESS, comp, factor, out);
}
sl_status sl_fn_adjust_contrast(const char *comp, double factor, sl_fn **out) {
    return adjust_new(CONTRAST, comp, factor, out);
}
sl_status sl_fn_adjust_saturation(const char *comp, double factor, sl_fn **out) {
    return adjust_new(SATURATION, comp, factor, out);
}
sl_status sl_fn_adjust_hue(const char *comp, double hue_factor, sl_fn **out) {
    return adjust_new(HUE, comp, hue_factor, out);
}

/* ---- color_jitter ---- */

static sl_status jitter_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const jitter_fn *f = (const jitter_fn *)fn;
    sl_rng rng = {call->seed};
    int order[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; i--) { /* torch.randperm(4)'s role: a uniform permutation */
        int j = (int)sl__rng_below(&rng, (uint64_t)i + 1);
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    float factor[4] = {0};
    for (int k = 0; k < 4; k++)
        if (f->on[k]) factor[k] = (float)(f->lo[k] + sl__rng_double(&rng) * (f->hi[k] - f->lo[k]));
    if (!f->on[0] && !f->on[1] && !f->on[2] && !f->on[3]) return SL_OK;
    sl_tensor out;
    int64_t npix, c;
    sl_status s = color_out(fn, e, f->comp, call, &out, &npix, &c);
    if (s) return s;
    for (int i = 0; i < 4; i++)
        if (f->on[order[i]]) adjust(order[i], out.data, npix, c, factor[order[i]]);
    if ((s = sl_element_set(e, f->comp, &out))) sl_tensor_release(&out);
    return s;
}

static const sl_fn_vt jitter_vt = {.name = "color_jitter", .apply = jitter_apply};

sl_status sl_fn_color_jitter_ranges(const char *comp, const double lo[4], const double hi[4], sl_fn **out) {
    *out = NULL;
    sl_status s = check_comp("color_jitter", comp);
    if (s) return s;
    for (int k = 0; k < 4; k++) {
        double min = k == HUE ? -0.5 : 0, max = k == HUE ? 0.5 : 1e6;
        if (!(lo[k] >= min && lo[k] <= hi[k] && hi[k] <= max))
            return sl_err(SL_EINVAL, "color_jitter: the %s range [%g, %g] must have %g <= lo <= hi <= %g",
                          FACTOR_NAMES[k], lo[k], hi[k], min, max);
    }
    jitter_fn *f = sl__fn_new(sizeof *f, &jitter_vt, "color_jitter");
    if (!f) return SL_ENOMEM;
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    for (int k = 0; k < 4; k++) {
        double id = k == HUE ? 0 : 1;
        f->lo[k] = lo[k];
        f->hi[k] = hi[k];
        f->on[k] = !(lo[k] == id && hi[k] == id);
    }
    *out = &f->base;
    return SL_OK;
}

sl_status sl_fn_color_jitter(const char *comp, double brightness, double contrast, double saturation,
                             double hue, sl_fn **out) {
    *out = NULL;
    double v[3] = {brightness, contrast, saturation}, lo[4], hi[4];
    for (int k = 0; k < 3; k++) {
        if (!(v[k] >= 0 && v[k] <= 1e6))
            return sl_err(SL_EINVAL, "color_jitter: %s %g must be in [0, 1e6]", FACTOR_NAMES[k], v[k]);
        lo[k] = 1 - v[k] > 0 ? 1 - v[k] : 0;
        hi[k] = 1 + v[k];
    }
    if (!(hue >= 0 && hue <= 0.5)) return sl_err(SL_EINVAL, "color_jitter: hue %g must be in [0, 0.5]", hue);
    lo[3] = -hue;
    hi[3] = hue;
    return sl_fn_color_jitter_ranges(comp, lo, hi, out);
}
