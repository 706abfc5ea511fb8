/* rgb_to_grayscale (torchvision's F.rgb_to_grayscale) and random_grayscale (RandomGrayscale)
 * on uint8 images, through color.h's sl__rgb_to_gray_u8. The output is a fresh tensor (a
 * batch slot under a fused map_batch); the input is never written.
 *
 * Workload: once per training image (RandomGrayscale(p=0.2) in SimCLR-style recipes). */
#include <stdio.h>
#include <string.h>

#include "pipeline/fn/color.h"
#include "pipeline/fn/image.h"

typedef struct {
    sl_fn base;
    char comp[SL_NAME_MAX];
    int channels; /* 1 or 3 out; 0: as many as came in (random_grayscale) */
    double p;     /* random_grayscale's probability; 1 for rgb_to_grayscale */
} gray_fn;

static sl_status gray_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const gray_fn *f = (const gray_fn *)fn;
    sl_status s = SL_OK;
    int64_t H, W, C;
    const sl_tensor *in = sl__fn_image_input(fn, e, f->comp, &H, &W, &C, &s);
    if (!in) return s;
    char d[128];
    if (in->dtype != SL_DT_U8) {
        sl_err(SL_EINVAL, "'%s' is %s; grayscale takes uint8 images", f->comp, sl_tensor_describe(in, d, sizeof d));
        sl_err_hint("apply %s before normalize (or cast to uint8 first)", sl_fn_name(fn));
        return SL_EINVAL;
    }
    if (C != 1 && C != 3) {
        sl_err(SL_EINVAL, "'%s' is %s: %lld channels, but grayscale takes 1 or 3", f->comp,
               sl_tensor_describe(in, d, sizeof d), (long long)C);
        sl_err_hint("decode with channels=3 (RGB)");
        return SL_EINVAL;
    }
    if (f->p < 1) {
        sl_rng rng = {call->seed};
        if (!(sl__rng_double(&rng) < f->p)) return SL_OK;
    }
    /* a one-channel image stays one channel, also when 3 are asked for (torchvision's
     * expand to the input's shape) */
    int64_t oc = C == 1 ? 1 : (f->channels ? f->channels : C);
    int64_t dims[3] = {H, W, oc};
    int rank = in->rank == 2 && oc == 1 ? 2 : 3;
    sl_tensor out;
    if ((s = sl__fn_out_alloc(call, f->comp, &out, SL_DT_U8, rank, dims))) return s;
    uint8_t *o = out.data;
    int64_t npix = H * W;
    if (C == 1) {
        memcpy(o, in->data, (size_t)npix);
    } else if (oc == 1) {
        sl__rgb_to_gray_u8(in->data, npix, o);
    } else { /* gray into the last third, then spread forward: pixel i reads i >= its own */
        uint8_t *g = o + 2 * npix;
        sl__rgb_to_gray_u8(in->data, npix, g);
        for (int64_t i = 0; i < npix; i++) {
            uint8_t v = g[i];
            o[3 * i] = v;
            o[3 * i + 1] = v;
            o[3 * i + 2] = v;
        }
    }
    if ((s = sl_element_set(e, f->comp, &out))) sl_tensor_release(&out);
    return s;
}

static const sl_fn_vt gray_vt = {.name = "rgb_to_grayscale", .apply = gray_apply};
static const sl_fn_vt random_gray_vt = {.name = "random_grayscale", .apply = gray_apply};

static sl_status gray_new(const sl_fn_vt *vt, const char *comp, int channels, double p, sl_fn **out) {
    *out = NULL;
    if (!comp || !*comp || strlen(comp) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "%s: component name must be 1..%d characters", vt->name, SL_NAME_MAX - 1);
    gray_fn *f = sl__fn_new(sizeof *f, vt, vt->name);
    if (!f) return SL_ENOMEM;
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    f->channels = channels;
    f->p = p;
    *out = &f->base;
    return SL_OK;
}

sl_status sl_fn_rgb_to_grayscale(const char *comp, int num_output_channels, sl_fn **out) {
    *out = NULL;
    if (num_output_channels != 1 && num_output_channels != 3)
        return sl_err(SL_EINVAL, "rgb_to_grayscale: num_output_channels %d must be 1 or 3", num_output_channels);
    return gray_new(&gray_vt, comp, num_output_channels, 1.0, out);
}

sl_status sl_fn_random_grayscale(const char *comp, double p, sl_fn **out) {
    *out = NULL;
    if (!(p >= 0 && p <= 1)) return sl_err(SL_EINVAL, "random_grayscale: probability %g must be in [0, 1]", p);
    return gray_new(&random_gray_vt, comp, 0, p, out);
}
