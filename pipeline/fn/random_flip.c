/* random_flip: mirror an image left-right and/or top-bottom, each with probability p.
 * The draws come from the call's seed: first U[0,1) for the horizontal flip (when
 * enabled), then one for the vertical flip (when enabled); a flip happens when the draw is
 * below p. A flipped image is a fresh tensor (buffers are read-only once made: the input
 * may be a view of a record or shared with another consumer); an unflipped one is left
 * as it is.
 *
 * Workload: once per training image, usually a 224 x 224 x 3 uint8 or float32 crop. Right
 * after decode_jpeg's crop it is done by decode_jpeg, which asks sl__flip_draw for the same
 * draws and runs the same row operations (sl__flip_row, sl__row_flip in image.h) on each
 * row it makes. */
#include <stdio.h>
#include <string.h>

#include "pipeline/fn/image.h"

typedef struct {
    sl_fn base;
    char comp[SL_NAME_MAX];
    bool horizontal, vertical;
    double p;
} flip_fn;

/* The H x W image of px-byte pixels at src flipped into dst (not overlapping): random_flip's
 * row operations over its rows. */
static void flip_image(const uint8_t *src, uint8_t *dst, int64_t H, int64_t W, size_t px, bool fh,
                       bool fv) {
    size_t row = px * (size_t)W;
    for (int64_t y = 0; y < H; y++)
        sl__row_flip(src + (size_t)sl__flip_row(y, H, fv) * row, dst + (size_t)y * row, W, px, fh);
}

static sl_status flip_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const flip_fn *f = (const flip_fn *)fn;
    sl_status s = SL_OK;
    int64_t H, W, C;
    const sl_tensor *in = sl__fn_image_input(fn, e, f->comp, &H, &W, &C, &s);
    if (!in) return s;
    bool fh, fv;
    sl__flip_draw(fn, call->seed, &fh, &fv);
    if (!fh && !fv) return SL_OK;
    sl_tensor out;
    if ((s = sl_tensor_alloc(&out, in->dtype, in->rank, in->dims))) return s;
    flip_image(in->data, out.data, H, W, (size_t)C * sl_dtype_size(in->dtype), fh, fv);
    if ((s = sl_element_set(e, f->comp, &out))) sl_tensor_release(&out);
    return s;
}

static const sl_fn_vt flip_vt = {.name = "random_flip", .apply = flip_apply};

bool sl__is_flip_of(const sl_fn *fn, const char *comp) {
    return fn && fn->vt == &flip_vt && strcmp(((const flip_fn *)fn)->comp, comp) == 0;
}

void sl__flip_draw(const sl_fn *fn, uint64_t seed, bool *fh, bool *fv) {
    const flip_fn *f = (const flip_fn *)fn;
    sl_rng rng = {seed};
    *fh = f->horizontal && sl__rng_double(&rng) < f->p;
    *fv = f->vertical && sl__rng_double(&rng) < f->p;
}

sl_status sl_fn_random_flip(const char *comp, bool horizontal, bool vertical, double p, sl_fn **out) {
    *out = NULL;
    if (!comp || !*comp || strlen(comp) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "random_flip: component name must be 1..%d characters",
                      SL_NAME_MAX - 1);
    if (!(p >= 0 && p <= 1))
        return sl_err(SL_EINVAL, "random_flip: probability %g must be in [0, 1]", p);
    if (!horizontal && !vertical)
        return sl_err(SL_EINVAL, "random_flip: neither horizontal nor vertical flipping is enabled");
    flip_fn *f = sl__fn_new(sizeof *f, &flip_vt, "random_flip");
    if (!f) return SL_ENOMEM;
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    f->horizontal = horizontal;
    f->vertical = vertical;
    f->p = p;
    *out = &f->base;
    return SL_OK;
}
