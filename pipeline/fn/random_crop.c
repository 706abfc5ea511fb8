/* random_crop: a height x width window at a random place in the image padded by `padding`
 * pixels of zeros on every side — torchvision's RandomCrop(size, padding=P) with its
 * default fill 0, the CIFAR / Fashion-MNIST augmentation ("pad 4, crop 32"). The draws come
 * from the call's seed: first the top row in [0, H + 2P - height], then the left column in
 * [0, W + 2P - width], each uniform (sl__rng_below). No resampling: pixels are copied, so any
 * numeric dtype works and the values are exact. A window larger than the padded image is
 * SL_EINVAL naming both sizes (torchvision raises too; pad more or crop less). The output
 * is a fresh tensor; the input is never written.
 *
 * Workload: once per training image, usually a 28 x 28 or 32 x 32 image of 1-3 channels. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "pipeline/fn/image.h"

typedef struct {
    sl_fn base;
    char comp[SL_NAME_MAX];
    int height, width, padding;
} crop_fn;

static sl_status crop_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const crop_fn *f = (const crop_fn *)fn;
    sl_status s = SL_OK;
    int64_t H, W, C;
    const sl_tensor *in = sl__fn_image_input(fn, e, f->comp, &H, &W, &C, &s);
    if (!in) return s;
    int64_t P = f->padding, ph = H + 2 * P, pw = W + 2 * P;
    if (f->height > ph || f->width > pw) {
        sl_err(SL_EINVAL, "a %dx%d window does not fit component '%s' of %" PRId64 "x%" PRId64
               " padded by %d (%" PRId64 "x%" PRId64 ")", f->height, f->width, f->comp, H, W, f->padding, ph, pw);
        sl_err_hint("crop at most the padded size, or pad more with padding=P");
        return SL_EINVAL;
    }
    sl_rng rng = {call->seed};
    int64_t top = (int64_t)sl__rng_below(&rng, (uint64_t)(ph - f->height + 1));
    int64_t left = (int64_t)sl__rng_below(&rng, (uint64_t)(pw - f->width + 1));
    int64_t dims[3] = {f->height, f->width, C};
    sl_tensor out;
    if ((s = sl_tensor_alloc(&out, in->dtype, in->rank, dims))) return s;
    size_t px = (size_t)C * sl_dtype_size(in->dtype), srow = px * (size_t)W, drow = px * (size_t)f->width;
    const uint8_t *src = in->data;
    uint8_t *dst = out.data;
    /* the window's columns that fall on the image: [x0, x1) of the padded image */
    int64_t x0 = left > P ? left : P, x1 = left + f->width < P + W ? left + f->width : P + W;
    for (int64_t y = 0; y < f->height; y++) {
        uint8_t *dr = dst + (size_t)y * drow;
        int64_t sy = top + y - P; /* the image row, or outside it (padding) */
        if (sy < 0 || sy >= H || x0 >= x1) {
            memset(dr, 0, drow);
            continue;
        }
        size_t before = (size_t)(x0 - left) * px, n = (size_t)(x1 - x0) * px;
        memset(dr, 0, before);
        memcpy(dr + before, src + (size_t)sy * srow + (size_t)(x0 - P) * px, n);
        memset(dr + before + n, 0, drow - before - n);
    }
    if ((s = sl_element_set(e, f->comp, &out))) sl_tensor_release(&out);
    return s;
}

static const sl_fn_vt crop_vt = {.name = "random_crop", .apply = crop_apply};

sl_status sl_fn_random_crop(const char *comp, int height, int width, int padding, sl_fn **out) {
    *out = NULL;
    if (!comp || !*comp || strlen(comp) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "random_crop: component name must be 1..%d characters", SL_NAME_MAX - 1);
    if (height < 1 || width < 1 || height > 65535 || width > 65535)
        return sl_err(SL_EINVAL, "random_crop: size %dx%d must be 1..65535 on each side", height, width);
    if (padding < 0 || padding > 65535)
        return sl_err(SL_EINVAL, "random_crop: padding %d must be 0..65535", padding);
    crop_fn *f = sl__fn_new(sizeof *f, &crop_vt, "random_crop");
    if (!f) return SL_ENOMEM;
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    f->height = height;
    f->width = width;
    f->padding = padding;
    *out = &f->base;
    return SL_OK;
}
