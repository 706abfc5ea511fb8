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
 * resampler (antialiased or 2-tap, sl__resample_u8), sampling the same continuous
 * rectangle (mapped to the scaled image) that the unfused path samples.
 * The result differs from decode -> crop -> resize only through the DCT scaling: a scaled
 * decode is a block-wise low-passed, smaller image (what tf.image.decode_and_crop_jpeg plus
 * a scaled decode do), so pixels differ where the image has fine detail (a mean of up to
 * ~9 levels on detailed photos, test_fn) — and a 2-tap downscale aliases less than 2-tap
 * from full size would. With scaling forbidden (sl_fn_set_dct_scaling) or when no scale
 * below 8/8 covers the target, the output is bit-identical to the unfused chain.
 * Rows below the crop are never decoded (sl_jpeg_decode_crop stops after the crop's last
 * row), so damage there goes unnoticed, as with tf.image.decode_and_crop_jpeg; a
 * progressive file is read whole first, so any damage in it is still seen.
 *
 * After the crop it also absorbs a random_flip and a normalize of the same component that
 * follow directly (either order, at most one each; a normalize only when its means are
 * known to fit: channels 1 or 3, one mean or that many), through the functions' own row
 * operations (image.h): the resampler hands each row of the crop or resize to a row sink as
 * it makes it, mirrored left-right by random_flip's sl__row_flip on its column tables when
 * the flip draws that, and the sink puts it in the output row random_flip's sl__flip_row
 * names, rounded (sl__row_round_u8) or normalized (normalize's sl__row_normalize_rounded).
 * No intermediate image; the values are those of the functions run one after the other.
 * Under map_batch, the result is built in its batch slot (sl__fn_batch_slot), which spares
 * the batch copy.
 *
 * Workload: the most expensive function of an ImageNet-style pipeline (a 500x375 photo
 * cropped to ~40% of its area and resized to 224x224). Each map thread keeps a decoder
 * (which also holds the decoded crop: the resize reads it in place, sl_jpeg_decode_crop_view)
 * in its state.
 *
 * Speed: sl_fn_set_jpeg_speed (the config's dct_method= and fancy_upscaling=, as
 * tf.io.decode_jpeg names them) trades a few levels of fidelity for libjpeg's fast integer
 * IDCT and chroma doubled by repetition (sl_jpeg_decoder_set_speed), fused or not.
 *
 * Size limit: an image whose header declares more than max_pixels (width x height at full
 * size) is refused with SL_ERANGE right after the header is read, before any allocation,
 * fused or not (libjpeg's own buffers for a progressive file grow with the full size,
 * whatever the scale). A fused crop or resize also checks its output against its limit. */
#include <stdlib.h>
#include <string.h>

#include "pipeline/fn/image.h"
#include "sluice/jpeg.h"

typedef struct {
    sl__image_fn im;  /* component; images whose header declares over max_pixels are refused */
    int channels;     /* 0 (as in the file), 1 or 3 */
    bool dct_scaling; /* may decode at a smaller DCT scale when fused */
    bool fast_dct, fancy_upscaling; /* sl_fn_set_jpeg_speed */
} jpeg_fn;

typedef struct {
    sl_jpeg_decoder *dec;
} jpeg_state;

/* What the absorbed random_flip and normalize do to each row of the crop or resize. */
typedef struct {
    bool fh, fv;             /* random_flip's draws (both false: no flip) */
    const sl__norm_u8 *norm; /* normalize's (NULL: no normalize) */
    int64_t h, w, c;         /* the output */
    void *dst;               /* the output: float32 with a normalize, else uint8 */
} post_ops;

static sl_status jpeg_state_new(const sl_fn *fn, void **out) {
    jpeg_state *st = calloc(1, sizeof *st);
    if (!st) return sl_err(SL_ENOMEM, "decode_jpeg: out of memory for thread state");
    sl_status s = sl_jpeg_decoder_new(&st->dec);
    if (s) {
        free(st);
        return s;
    }
    sl_jpeg_decoder_set_max_pixels(st->dec, ((const jpeg_fn *)fn)->im.max_pixels);
    sl_jpeg_decoder_set_speed(st->dec, ((const jpeg_fn *)fn)->fast_dct, ((const jpeg_fn *)fn)->fancy_upscaling);
    *out = st;
    return SL_OK;
}

static void jpeg_state_free(const sl_fn *fn, void *p) {
    jpeg_state *st = p;
    if (!st) return;
    sl_jpeg_decoder_free(st->dec);
    free(st);
}

/* Row y of the crop or resize (its float results, already mirrored left-right when p->fh:
 * the sink asks for that) through the absorbed functions' row operations into its row of the
 * output: the resampler's sl__row_sink. */
static void post_row(void *ctx, int64_t y, const float *v) {
    const post_ops *p = ctx;
    int64_t n = p->w * p->c, oy = sl__flip_row(y, p->h, p->fv);
    if (p->norm)
        sl__row_normalize_rounded(v, n, p->c, p->norm, (float *)p->dst + oy * n);
    else
        sl__row_round_u8(v, n, (uint8_t *)p->dst + oy * n);
}

/* A new h x w x c tensor for the result, or the batch slot it will be copied into
 * (map_batch), which saves the copy. */
static sl_status out_tensor(const jpeg_fn *f, const sl_fn_call *call, sl_dtype dt, const int64_t *dims,
                            sl_tensor *out) {
    if (sl__fn_batch_slot(call, f->im.comp, dt, 3, dims, out)) return SL_OK;
    return sl_tensor_alloc(out, dt, 3, dims);
}

/* Decode, crop and resize as g would, then flip and normalize as p says, into *out. */
static sl_status fused(const jpeg_fn *f, jpeg_state *st, const sl_bytes *b, const sl_jpeg_info *info,
                       int ch, const sl__geom_fn *g, uint64_t gseed, post_ops *p,
                       const sl_fn_call *call, sl_tensor *out) {
    sl__rect r;
    int64_t oh, ow;
    sl__geom_plan(g, info->height, info->width, gseed, &r, &oh, &ow);
    sl_status s = sl__check_pixels(&g->im.base, g->im.comp, oh, ow, g->im.max_pixels);
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
    bool direct = !p->norm && !p->fh && !p->fv; /* the crop or resize is the result */
    if ((s = out_tensor(f, call, p->norm ? SL_DT_F32 : SL_DT_U8, dims, out))) return s;
    if (direct && num == 8 && oh == r.h && ow == r.w) { /* the crop, decoded straight into out */
        s = sl_jpeg_decode_crop(st->dec, b->ptr, b->len, ch, 8, (int)r.x, (int)r.y, (int)r.w,
                                (int)r.h, out->data, sl_tensor_nbytes(out));
    } else { /* the resampler reads the decoded rows where the decoder left them */
        const uint8_t *crop;
        size_t stride;
        double k = num / 8.0, ry = (double)r.y * k - (double)y0, rx = (double)r.x * k - (double)x0;
        p->h = oh;
        p->w = ow;
        p->c = ch;
        p->dst = out->data;
        sl__row_sink sink = {post_row, p, p->fh};
        if (!(s = sl_jpeg_decode_crop_view(st->dec, b->ptr, b->len, ch, num, (int)x0, (int)y0,
                                           (int)(x1 - x0), (int)(y1 - y0), &crop, &stride)))
            s = sl__resample_u8(g->antialias, crop, y1 - y0, x1 - x0, ch, (int64_t)stride, ry, rx,
                                (double)r.h * k, (double)r.w * k, direct ? out->data : NULL, oh,
                                ow, direct ? NULL : &sink);
    }
    if (s) sl_tensor_release(out);
    return s;
}

/* The flips and normalize absorbed after the crop (members 2, 3 of what this call does). */
static sl_status absorbed_post(const jpeg_fn *f, const sl_fn_call *call, int ch, post_ops *p) {
    *p = (post_ops){0};
    uint64_t seed;
    const sl_fn *m;
    for (int k = 2; (m = sl__fn_absorbed(call, k, &seed)) != NULL; k++) {
        if (sl__is_flip_of(m, f->im.comp))
            sl__flip_draw(m, seed, &p->fh, &p->fv);
        else if (!(p->norm = sl__normalize_u8_of(m, f->im.comp, ch)))
            return sl_err(SL_EINTERNAL, "decode_jpeg absorbed %s, which it cannot do", m->name);
    }
    return SL_OK;
}

static sl_status jpeg_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const jpeg_fn *f = (const jpeg_fn *)fn;
    sl_bytes b;
    sl_status s = sl__fn_bytes_input(fn, e, f->im.comp,
                                     "decode_jpeg needs one encoded image (a byte string)", &b, NULL);
    if (s) return s;
    jpeg_state local = {0}, *st = call->state;
    if (!st) {
        st = &local;
        if ((s = sl_jpeg_decoder_new(&local.dec))) return s;
        sl_jpeg_decoder_set_max_pixels(local.dec, f->im.max_pixels);
        sl_jpeg_decoder_set_speed(local.dec, f->fast_dct, f->fancy_upscaling);
    }
    sl_jpeg_info info;
    sl_tensor out = SL_TENSOR_EMPTY;
    if ((s = sl_jpeg_header(st->dec, b.ptr, b.len, &info))) goto done;
    int ch = f->channels ? f->channels : info.components == 1 ? 1 : 3;
    if ((int64_t)info.width * info.height > f->im.max_pixels) { /* refuse before allocating */
        s = sl_err(SL_ERANGE, "'%s': the JPEG is %dx%d (%lld pixels), over decode_jpeg's limit of %lld pixels",
                   f->im.comp, info.width, info.height, (long long)info.width * info.height,
                   (long long)f->im.max_pixels);
        double bytes = (double)info.width * info.height * ch;
        sl_err_hint("decoded, it would take %.0f %s; if the image is genuine, raise the limit with "
                    "decode_jpeg(%s, max_pixels=%lld) in the config (sl_fn_set_max_pixels in C)",
                    bytes < 1e6 ? bytes / 1e3 : bytes / 1e6, bytes < 1e6 ? "kB" : "MB", f->im.comp,
                    (long long)info.width * info.height);
        goto done;
    }
    uint64_t gseed = 0;
    const sl_fn *next = sl__fn_absorbed(call, 1, &gseed);
    const sl__geom_fn *g = next ? sl__as_geom(next) : NULL;
    if (g) {
        post_ops post;
        if ((s = absorbed_post(f, call, ch, &post)) || (s = fused(f, st, &b, &info, ch, g, gseed, &post, call, &out)))
            goto done;
    } else {
        int64_t dims[3] = {info.height, info.width, ch};
        int w, h;
        if ((s = sl_tensor_alloc(&out, SL_DT_U8, 3, dims))) goto done;
        if ((s = sl_jpeg_decode(st->dec, b.ptr, b.len, ch, 8, out.data, sl_tensor_nbytes(&out), &w, &h)))
            goto done;
    }
    s = sl_element_set(e, f->im.comp, &out);
done:
    sl_tensor_release(&out); /* empty after a successful set */
    if (s == SL_ECORRUPT) sl_err_prefix("'%s': ", f->im.comp);
    if (st == &local) sl_jpeg_decoder_free(local.dec);
    return s;
}

/* Absorb a crop or resize of the same component that comes right after, and then a
 * random_flip and a normalize of it that come right after that (at most one each, in either
 * order; a normalize only when it is known to fit the channels: channels 1 or 3, and one
 * mean or that many). */
static int jpeg_plan(sl_fn *fn, sl_fn *const *downstream, int n) {
    const jpeg_fn *f = (const jpeg_fn *)fn;
    if (n < 1) return 0;
    const sl__geom_fn *g = sl__as_geom(downstream[0]);
    if (!g || strcmp(g->im.comp, f->im.comp) != 0) return 0;
    int k = 1;
    bool flip = false, norm = false;
    for (; k < n; k++) {
        if (!flip && sl__is_flip_of(downstream[k], f->im.comp))
            flip = true;
        else if (!norm && f->channels && sl__normalize_u8_of(downstream[k], f->im.comp, f->channels))
            norm = true;
        else
            break;
    }
    return k;
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

sl_status sl_fn_set_jpeg_speed(sl_fn *fn, bool fast_dct, bool fancy_upscaling) {
    if (!fn) return sl_err(SL_EINVAL, "sl_fn_set_jpeg_speed: function is NULL");
    if (fn->vt != &jpeg_vt)
        return sl_err(SL_EINVAL, "%s has no dct_method or fancy_upscaling setting (only decode_jpeg has them)",
                      fn->name);
    ((jpeg_fn *)fn)->fast_dct = fast_dct;
    ((jpeg_fn *)fn)->fancy_upscaling = fancy_upscaling;
    return SL_OK;
}

/* For decode_jpeg and the geometry functions alike; here rather than in image.c so that
 * image.c calls nothing of decode_jpeg.c (which uses image.c's geometry). */
sl_status sl_fn_set_max_pixels(sl_fn *fn, int64_t max_pixels) {
    if (!fn) return sl_err(SL_EINVAL, "sl_fn_set_max_pixels: function is NULL");
    if (max_pixels < 1)
        return sl_err(SL_EINVAL, "%s: max_pixels %lld must be >= 1", fn->name, (long long)max_pixels);
    if (fn->vt != &jpeg_vt && !sl__as_geom(fn))
        return sl_err(SL_EINVAL, "%s has no pixel limit (only decode_jpeg, resize, center_crop and "
                      "random_resized_crop have one)", fn->name);
    ((sl__image_fn *)fn)->max_pixels = max_pixels; /* (each of them begins with one) */
    return SL_OK;
}

sl_status sl_fn_decode_jpeg(const char *comp, int channels, sl_fn **out) {
    *out = NULL;
    sl__image_fn *im;
    sl_status s = sl__image_fn_new(sizeof(jpeg_fn), &jpeg_vt, comp, &im);
    if (s) return s;
    if (channels != 0 && channels != 1 && channels != 3) {
        sl_fn_unref(&im->base);
        return sl_err(SL_EINVAL, "decode_jpeg: channels %d must be 0 (as in the file), 1 or 3",
                      channels);
    }
    jpeg_fn *f = (jpeg_fn *)im;
    f->channels = channels;
    f->dct_scaling = true;
    f->fancy_upscaling = true;
    *out = &im->base;
    return SL_OK;
}
