/* decode_jpeg: a JPEG (bytes scalar component) to uint8 [height, width, channels], in place.
 * channels 1 (gray) or 3 (RGB), or 0 for "as in the file" (gray stays gray, color and CMYK
 * become RGB). Anything that is not a decodable JPEG is SL_ECORRUPT with TurboJPEG's
 * reason.
 *
 * Fusion. When the function right after it in a chain is random_resized_crop, center_crop
 * or resize on the same component, plan() absorbs it and apply() does the work of both:
 * read the header, choose the crop rectangle exactly as that function would (the same code,
 * sl__geom_plan, drawing from the seed the chain would have given it — sl__fn_absorbed),
 * pick the smallest DCT scale num/8 at which the crop still covers the target size in both
 * dimensions (sl_jpeg_pick_scale on the crop size), decode only the crop region at that
 * scale (sl_jpeg_decode_crop), then resize it to the target with the absorbed function's
 * resampler (antialiased or 2-tap, sl__geom_resize_u8), sampling the same continuous
 * rectangle (mapped to the scaled image) that the unfused path samples.
 * The result differs from decode -> crop -> resize only through the DCT scaling: a scaled
 * decode is a block-wise low-passed, smaller image (what tf.image.decode_and_crop_jpeg plus
 * a scaled decode do), so pixels differ where the image has fine detail (a mean of up to
 * ~9 levels on detailed photos, test_fn) — and a 2-tap downscale aliases less than 2-tap
 * from full size would. With scaling forbidden (sl_fn_set_dct_scaling) or when no scale
 * below 8/8 covers the target, the output is bit-identical to the unfused chain.
 *
 * Workload: the most expensive function of an ImageNet-style pipeline (a 500x375 photo
 * cropped to ~40% of its area and resized to 224x224). Each map thread keeps a decoder and
 * a scratch buffer for the scaled crop in its state.
 *
 * Size limit: an image whose header declares more than max_pixels (width x height at full
 * size) is refused with SL_ERANGE right after the header is read, before any allocation,
 * fused or not (libjpeg's own buffers for a progressive file grow with the full size,
 * whatever the scale). A fused crop or resize also checks its output against its limit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/fn/image.h"
#include "sluice/jpeg.h"

typedef struct {
    sl_fn base;
    char comp[SL_NAME_MAX];
    int channels;     /* 0 (as in the file), 1 or 3 */
    bool dct_scaling; /* may decode at a smaller DCT scale when fused */
    int64_t max_pixels; /* images whose header declares more are refused */
} jpeg_fn;

typedef struct {
    sl_jpeg_decoder *dec;
    uint8_t *scratch; /* the decoded crop before the resize */
    size_t cap;
} jpeg_state;

static sl_status jpeg_state_new(const sl_fn *fn, void **out) {
    jpeg_state *st = calloc(1, sizeof *st);
    if (!st) return sl_err(SL_ENOMEM, "decode_jpeg: out of memory for thread state");
    sl_status s = sl_jpeg_decoder_new(&st->dec);
    if (s) {
        free(st);
        return s;
    }
    sl_jpeg_decoder_set_max_pixels(st->dec, ((const jpeg_fn *)fn)->max_pixels);
    *out = st;
    return SL_OK;
}

static void jpeg_state_free(const sl_fn *fn, void *p) {
    jpeg_state *st = p;
    if (!st) return;
    sl_jpeg_decoder_free(st->dec);
    free(st->scratch);
    free(st);
}

static sl_status grow(jpeg_state *st, size_t n) {
    if (n <= st->cap) return SL_OK;
    uint8_t *p = realloc(st->scratch, n);
    if (!p) return sl_err(SL_ENOMEM, "decode_jpeg: cannot allocate %zu bytes of scratch", n);
    st->scratch = p;
    st->cap = n;
    return SL_OK;
}

/* Decode, crop and resize as g would, into *out. */
static sl_status fused(const jpeg_fn *f, jpeg_state *st, const sl_bytes *b, const sl_jpeg_info *info,
                       int ch, const sl__geom_fn *g, uint64_t gseed, sl_tensor *out) {
    sl__rect r;
    int64_t oh, ow;
    sl__geom_plan(g, info->height, info->width, gseed, &r, &oh, &ow);
    sl_status s = sl__check_pixels(&g->base, g->comp, oh, ow, g->max_pixels);
    if (s) return s;
    int num = f->dct_scaling ? sl_jpeg_pick_scale((int)r.w, (int)r.h, (int)ow, (int)oh) : 8;
    int sw, sh;
    sl_jpeg_scaled_size(info->width, info->height, num, &sw, &sh);
    /* the scaled pixels that cover the crop: scaled pixel k covers [8k/num, 8(k+1)/num) */
    int64_t x0 = r.x * num / 8, y0 = r.y * num / 8;
    int64_t x1 = ((r.x + r.w) * num + 7) / 8, y1 = ((r.y + r.h) * num + 7) / 8;
    if (x1 > sw) x1 = sw;
    if (y1 > sh) y1 = sh;
    int64_t dims[3] = {oh, ow, ch};
    s = sl_tensor_alloc(out, SL_DT_U8, 3, dims);
    if (s) return s;
    if (num == 8 && oh == r.h && ow == r.w) {
        s = sl_jpeg_decode_crop(st->dec, b->ptr, b->len, ch, 8, (int)r.x, (int)r.y, (int)r.w,
                                (int)r.h, out->data, sl_tensor_nbytes(out));
    } else {
        size_t need = (size_t)((x1 - x0) * (y1 - y0) * ch);
        if (!(s = grow(st, need)))
            s = sl_jpeg_decode_crop(st->dec, b->ptr, b->len, ch, num, (int)x0, (int)y0,
                                    (int)(x1 - x0), (int)(y1 - y0), st->scratch, st->cap);
        if (!s) {
            double k = num / 8.0;
            s = sl__geom_resize_u8(g, st->scratch, y1 - y0, x1 - x0, ch, (x1 - x0) * ch,
                              (double)r.y * k - (double)y0, (double)r.x * k - (double)x0,
                              (double)r.h * k, (double)r.w * k, out->data, oh, ow);
        }
    }
    if (s) sl_tensor_release(out);
    return s;
}

static sl_status jpeg_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const jpeg_fn *f = (const jpeg_fn *)fn;
    sl_bytes b;
    sl_status s = sl__fn_bytes_input(fn, e, f->comp,
                                     "decode_jpeg needs one encoded image (a byte string)", &b, NULL);
    if (s) return s;
    jpeg_state local = {0}, *st = call->state;
    if (!st) {
        st = &local;
        if ((s = sl_jpeg_decoder_new(&local.dec))) return s;
        sl_jpeg_decoder_set_max_pixels(local.dec, f->max_pixels);
    }
    sl_jpeg_info info;
    sl_tensor out = SL_TENSOR_EMPTY;
    if ((s = sl_jpeg_header(st->dec, b.ptr, b.len, &info))) goto done;
    int ch = f->channels ? f->channels : info.components == 1 ? 1 : 3;
    if ((int64_t)info.width * info.height > f->max_pixels) { /* refuse before allocating */
        s = sl_err(SL_ERANGE, "'%s': the JPEG is %dx%d (%lld pixels), over decode_jpeg's limit of %lld pixels",
                   f->comp, info.width, info.height, (long long)info.width * info.height,
                   (long long)f->max_pixels);
        double bytes = (double)info.width * info.height * ch;
        sl_err_hint("decoded, it would take %.0f %s; if the image is genuine, raise the limit with "
                    "decode_jpeg(%s, max_pixels=%lld) in the config (sl_fn_set_max_pixels in C)",
                    bytes < 1e6 ? bytes / 1e3 : bytes / 1e6, bytes < 1e6 ? "kB" : "MB", f->comp,
                    (long long)info.width * info.height);
        goto done;
    }
    uint64_t gseed = 0;
    const sl_fn *next = sl__fn_absorbed(call, 1, &gseed);
    const sl__geom_fn *g = next ? sl__as_geom(next) : NULL;
    if (g) {
        if ((s = fused(f, st, &b, &info, ch, g, gseed, &out))) goto done;
    } else {
        int64_t dims[3] = {info.height, info.width, ch};
        int w, h;
        if ((s = sl_tensor_alloc(&out, SL_DT_U8, 3, dims))) goto done;
        if ((s = sl_jpeg_decode(st->dec, b.ptr, b.len, ch, 8, out.data, sl_tensor_nbytes(&out), &w, &h)))
            goto done;
    }
    s = sl_element_set(e, f->comp, &out);
done:
    sl_tensor_release(&out); /* empty after a successful set */
    if (s == SL_ECORRUPT) sl_err_prefix("'%s': ", f->comp);
    if (st == &local) {
        sl_jpeg_decoder_free(local.dec);
        free(local.scratch);
    }
    return s;
}

/* Absorb a crop or resize of the same component that comes right after. */
static int jpeg_plan(sl_fn *fn, sl_fn *const *downstream, int n) {
    const jpeg_fn *f = (const jpeg_fn *)fn;
    if (n < 1) return 0;
    const sl__geom_fn *g = sl__as_geom(downstream[0]);
    return g && strcmp(g->comp, f->comp) == 0 ? 1 : 0;
}

static const sl_fn_vt jpeg_vt = {.name = "decode_jpeg", .apply = jpeg_apply,
                                 .state_new = jpeg_state_new, .state_free = jpeg_state_free,
                                 .plan = jpeg_plan};

void sl__fn_decode_jpeg_set_dct_scaling(sl_fn *fn, bool allow) {
    if (fn && fn->vt == &jpeg_vt) ((jpeg_fn *)fn)->dct_scaling = allow;
}

sl_status sl_fn_set_dct_scaling(sl_fn *fn, bool allow) {
    if (!fn) return sl_err(SL_EINVAL, "sl_fn_set_dct_scaling: function is NULL");
    if (fn->vt != &jpeg_vt)
        return sl_err(SL_EINVAL, "%s has no dct_scaling setting (only decode_jpeg has one)", fn->name);
    ((jpeg_fn *)fn)->dct_scaling = allow;
    return SL_OK;
}

/* decode_jpeg's pixel limit (for sl_fn_set_max_pixels): false if fn is not decode_jpeg. */
static bool jpeg_set_max_pixels(sl_fn *fn, int64_t max_pixels) {
    if (!fn || fn->vt != &jpeg_vt) return false;
    ((jpeg_fn *)fn)->max_pixels = max_pixels;
    return true;
}

/* For decode_jpeg and the geometry functions alike; here rather than in image.c so that
 * image.c calls nothing of decode_jpeg.c (which uses image.c's geometry). */
sl_status sl_fn_set_max_pixels(sl_fn *fn, int64_t max_pixels) {
    if (!fn) return sl_err(SL_EINVAL, "sl_fn_set_max_pixels: function is NULL");
    if (max_pixels < 1)
        return sl_err(SL_EINVAL, "%s: max_pixels %lld must be >= 1", fn->name, (long long)max_pixels);
    if (jpeg_set_max_pixels(fn, max_pixels)) return SL_OK;
    sl__geom_fn *g = (sl__geom_fn *)sl__as_geom(fn);
    if (!g)
        return sl_err(SL_EINVAL, "%s has no pixel limit (only decode_jpeg, resize, center_crop and "
                      "random_resized_crop have one)", fn->name);
    g->max_pixels = max_pixels;
    return SL_OK;
}

sl_status sl_fn_decode_jpeg(const char *comp, int channels, sl_fn **out) {
    *out = NULL;
    if (!comp || !*comp || strlen(comp) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "decode_jpeg: component name must be 1..%d characters",
                      SL_NAME_MAX - 1);
    if (channels != 0 && channels != 1 && channels != 3)
        return sl_err(SL_EINVAL, "decode_jpeg: channels %d must be 0 (as in the file), 1 or 3",
                      channels);
    jpeg_fn *f = sl__fn_new(sizeof *f, &jpeg_vt, "decode_jpeg");
    if (!f) return SL_ENOMEM;
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    f->channels = channels;
    f->dct_scaling = true;
    f->max_pixels = SL_FN_MAX_PIXELS_DEFAULT;
    *out = &f->base;
    return SL_OK;
}
