/* resize_with_pad: tf.image.resize_with_pad(image, height, width) — scale the image to fit
 * height x width keeping its aspect ratio, then pad with zeros to exactly that size (the
 * letterbox of detection pipelines). The geometry is TF's, in float32 as TF computes it
 * (image_ops_impl.py, _resize_image_with_pad_common); the resize is the 2-tap bilinear
 * resampler of image.h (half-pixel centres, no antialias: tf.image.resize's defaults). The
 * dtype is kept (uint8 rounded to nearest; TF returns float32). The output is a fresh tensor
 * (a batch slot under a fused map_batch: every image has the same output shape).
 *
 * Workload: once per image, a few hundred pixels on a side, to a fixed network input. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/fn/image.h"

typedef struct {
    sl_fn base;
    char comp[SL_NAME_MAX];
    int height, width;
} pad_fn;

static sl_status pad_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const pad_fn *f = (const pad_fn *)fn;
    sl_status s = SL_OK;
    int64_t H, W, C;
    const sl_tensor *in = sl__fn_image_input(fn, e, f->comp, &H, &W, &C, &s);
    if (!in) return s;
    char d[128];
    if (in->dtype != SL_DT_U8 && in->dtype != SL_DT_F32) {
        sl_err(SL_EINVAL, "'%s' is %s; resize_with_pad takes uint8 or float32 images", f->comp,
               sl_tensor_describe(in, d, sizeof d));
        sl_err_hint("cast to float32 first");
        return SL_EINVAL;
    }
    if ((s = sl__check_pixels(fn, f->comp, f->height, f->width, SL_FN_MAX_PIXELS_DEFAULT))) return s;
    /* TF's geometry, in float32 */
    float fh = (float)H, fw = (float)W, th = (float)f->height, tw = (float)f->width;
    float ratio = fmaxf(fw / tw, fh / th);
    float rhf = fh / ratio, rwf = fw / ratio;
    int64_t rh = (int64_t)floorf(rhf), rw = (int64_t)floorf(rwf);
    float padh = (th - rhf) / 2, padw = (tw - rwf) / 2;
    int64_t ph = (int64_t)floorf(padh), pw = (int64_t)floorf(padw);
    if (ph < 0) ph = 0;
    if (pw < 0) pw = 0;
    if (rh > f->height) rh = f->height;
    if (rw > f->width) rw = f->width;
    if (rh < 1 || rw < 1) {
        sl_err(SL_EINVAL, "'%s' (%s) would be resized to %" PRId64 "x%" PRId64 " to fit %dx%d", f->comp,
               sl_tensor_describe(in, d, sizeof d), rh, rw, f->height, f->width);
        sl_err_hint("the image is too thin for the target: crop it first");
        return SL_EINVAL;
    }
    size_t es = sl_dtype_size(in->dtype), px = (size_t)C * es;
    void *tmp = malloc((size_t)(rh * rw) * px);
    if (!tmp) return sl_err(SL_ENOMEM, "out of memory resizing '%s' to %" PRId64 "x%" PRId64, f->comp, rh, rw);
    if (in->dtype == SL_DT_U8)
        s = sl__resize_u8(in->data, H, W, C, W * C, 0, 0, (double)H, (double)W, tmp, rh, rw);
    else
        s = sl__resize_f32(in->data, H, W, C, W * C, 0, 0, (double)H, (double)W, tmp, rh, rw);
    sl_tensor out;
    int64_t dims[3] = {f->height, f->width, C};
    if (s || (s = sl__fn_out_alloc(call, f->comp, &out, in->dtype, in->rank, dims))) {
        free(tmp);
        return s;
    }
    uint8_t *o = out.data;
    size_t orow = (size_t)f->width * px;
    memset(o, 0, orow * (size_t)f->height); /* all zeros (also 0.0f), then the image */
    for (int64_t y = 0; y < rh && ph + y < f->height; y++) {
        int64_t n = rw < f->width - pw ? rw : f->width - pw;
        memcpy(o + (size_t)(ph + y) * orow + (size_t)pw * px, (const uint8_t *)tmp + (size_t)(y * rw) * px,
               (size_t)n * px);
    }
    free(tmp);
    if ((s = sl_element_set(e, f->comp, &out))) sl_tensor_release(&out);
    return s;
}

static const sl_fn_vt pad_vt = {.name = "resize_with_pad", .apply = pad_apply};

sl_status sl_fn_resize_with_pad(const char *comp, int height, int width, sl_fn **out) {
    *out = NULL;
    if (!comp || !*comp || strlen(comp) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "resize_with_pad: component name must be 1..%d characters", SL_NAME_MAX - 1);
    if (height < 1 || width < 1 || height > 65535 || width > 65535)
        return sl_err(SL_EINVAL, "resize_with_pad: size %dx%d must be 1..65535 on each side", height, width);
    pad_fn *f = sl__fn_new(sizeof *f, &pad_vt, "resize_with_pad");
    if (!f) return SL_ENOMEM;
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    f->height = height;
    f->width = width;
    *out = &f->base;
    return SL_OK;
}
