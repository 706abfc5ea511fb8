/* rot90 and random_rot90: tf.image.rot90(image, k), counter-clockwise quarter turns (the
 * same as np.rot90 and torch.rot90 over the height and width axes). Pixels are copied
 * whole, so any numeric dtype works and values are exact. The output is a fresh tensor (a
 * batch slot under a fused map_batch); k = 0 leaves the very tensor.
 *
 * Workload: once per training image in rotation-invariant tasks (aerial, medical), and in
 * self-supervised rotation prediction; images are a few hundred pixels on a side. */
#include <stdio.h>
#include <string.h>

#include "pipeline/fn/image.h"

typedef struct {
    sl_fn base;
    char comp[SL_NAME_MAX];
    int k; /* 0..3; -1: drawn per call */
} rot_fn;

/* out[y][x] of the k-turn rotation (an oh x ow image) is in[sy][sx] of the H x W input. */
static void rotate(const uint8_t *src, uint8_t *dst, int64_t H, int64_t W, size_t px, int k) {
    int64_t oh = k % 2 ? W : H, ow = k % 2 ? H : W;
    for (int64_t y = 0; y < oh; y++)
        for (int64_t x = 0; x < ow; x++) {
            int64_t sy, sx;
            if (k == 1) sy = x, sx = W - 1 - y;
            else if (k == 2) sy = H - 1 - y, sx = W - 1 - x;
            else sy = H - 1 - x, sx = y;
            memcpy(dst + ((size_t)y * (size_t)ow + (size_t)x) * px, src + ((size_t)sy * (size_t)W + (size_t)sx) * px, px);
        }
}

static sl_status rot_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const rot_fn *f = (const rot_fn *)fn;
    sl_status s = SL_OK;
    int64_t H, W, C;
    const sl_tensor *in = sl__fn_image_input(fn, e, f->comp, &H, &W, &C, &s);
    if (!in) return s;
    int k = f->k;
    if (k < 0) {
        sl_rng rng = {call->seed};
        k = (int)sl__rng_below(&rng, 4);
    }
    if (k == 0) return SL_OK;
    int64_t dims[3] = {k % 2 ? W : H, k % 2 ? H : W, C};
    sl_tensor out;
    if ((s = sl__fn_out_alloc(call, f->comp, &out, in->dtype, in->rank, dims))) return s;
    rotate(in->data, out.data, H, W, (size_t)C * sl_dtype_size(in->dtype), k);
    if ((s = sl_element_set(e, f->comp, &out))) sl_tensor_release(&out);
    return s;
}

static const sl_fn_vt rot_vt = {.name = "rot90", .apply = rot_apply};
static const sl_fn_vt random_rot_vt = {.name = "random_rot90", .apply = rot_apply};

static sl_status rot_new(const sl_fn_vt *vt, const char *comp, int k, sl_fn **out) {
    *out = NULL;
    if (!comp || !*comp || strlen(comp) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "%s: component name must be 1..%d characters", vt->name, SL_NAME_MAX - 1);
    rot_fn *f = sl__fn_new(sizeof *f, vt, vt->name);
    if (!f) return SL_ENOMEM;
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    f->k = k;
    *out = &f->base;
    return SL_OK;
}

sl_status sl_fn_rot90(const char *comp, int k, sl_fn **out) { return rot_new(&rot_vt, comp, ((k % 4) + 4) % 4, out); }

sl_status sl_fn_random_rot90(const char *comp, sl_fn **out) { return rot_new(&random_rot_vt, comp, -1, out); }
