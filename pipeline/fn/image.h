/* Private to pipeline/fn/: what the image functions share — reading an image tensor's
 * shape, the bilinear resampler, the crop geometry of random_resized_crop, center_crop
 * and resize, which decode_jpeg also uses when it absorbs one of them (so both paths
 * choose the same rectangle from the same seed), and the row operations of random_flip and
 * normalize, which decode_jpeg runs on each row it makes when it absorbs them. */
#ifndef SLUICE_PIPELINE_FN_IMAGE_H
#define SLUICE_PIPELINE_FN_IMAGE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "pipeline/internal.h"

/* An image tensor's height, width and channels: rank 3 [h, w, c], or rank 2 [h, w] (one
 * channel). SL_EINVAL naming fn and comp for any other rank or an empty image. */
sl_status sl__image_shape(const sl_fn *fn, const char *comp, const sl_tensor *t, int64_t *h,
                          int64_t *w, int64_t *c);

/* A uint8 resample's rounding of each result to nearest. The 2-tap weights of an axis are l
 * and 1 - l with l in [0, 1], so a blend of uint8 samples lies in [0, 255 * (1 + 2^-22)];
 * the antialiased ones are >= 0 and sum to 1 within a few float ulps (a blend below
 * 255.5 + 1e-4): either way v + 0.5 truncates to 0..255, no clamp needed, and the loops that
 * call it stay branch-free (they vectorize). */
static inline uint8_t sl__round_u8(float v) { return (uint8_t)(int32_t)(v + 0.5f); }

/* n results of a uint8 resample rounded into o: the resampler's store. */
static inline void sl__row_round_u8(const float *v, int64_t n, uint8_t *o) {
    for (int64_t i = 0; i < n; i++) o[i] = sl__round_u8(v[i]);
}

/* Where the rows of a uint8 resample go when they are not written into an image: each
 * output row, as soon as it is made, to row(ctx, y, v), y from 0 to dh - 1 in order, v its
 * dw x c results in float before the rounding (the uint8 row is sl__row_round_u8 of them;
 * valid during the call only). With mirror, each row comes mirrored left-right: the
 * resampler runs random_flip's row operation (sl__row_flip) on its column tables, so output
 * column x is computed exactly as column dw - 1 - x would have been. */
typedef struct sl__row_sink {
    void (*row)(void *ctx, int64_t y, const float *v);
    void *ctx;
    bool mirror;
} sl__row_sink;

/* Bilinear resampling with half-pixel centers (PyTorch's align_corners=False), 2-tap, or
 * antialiased when `antialias` (PIL's and torchvision's antialias=True bilinear). The
 * source is an sh x sw x c image whose rows are `stride` elements apart; the continuous
 * region [ry, ry+rh) x [rx, rx+rw) of it (in pixel-edge coordinates, so (0, 0, sh, sw) is
 * the whole image) is resampled onto dh x dw x c: into dst (contiguous), or, for uint8 with
 * a sink (dst NULL), row by row to the sink.
 * 2-tap: output pixel (y, x) samples source row ry + (y + 0.5) * rh / dh - 0.5 (clamped
 * below at 0 and above at sh - 1), likewise for columns; every value is computed in float as
 *   wy0 * (wx0 * a + wx1 * b) + wy1 * (wx0 * c + wx1 * d)
 * Antialiased: where the region shrinks along an axis (rh > dh, rw > dw), each output
 * sample is a normalized triangle-weighted mean of the source samples within rh / dh
 * (rw / dw) of its centre, the filter widened by the scale factor, clipped at the source's
 * edges (no padding); an axis that grows or keeps its size is plain bilinear as above, and
 * when neither axis shrinks this is exactly the 2-tap resampler. Computed in float; uint8
 * results are rounded to nearest (clamped to 0..255). Returns SL_OK or SL_ENOMEM (scratch
 * for the tables; a sink may have had some of the rows). */
sl_status sl__resample_u8(bool antialias, const uint8_t *src, int64_t sh, int64_t sw, int64_t c,
                          int64_t stride, double ry, double rx, double rh, double rw, uint8_t *dst,
                          int64_t dh, int64_t dw, const sl__row_sink *sink);
sl_status sl__resample_f32(bool antialias, const float *src, int64_t sh, int64_t sw, int64_t c,
                           int64_t stride, double ry, double rx, double rh, double rw, float *dst,
                           int64_t dh, int64_t dw);

/* The resampler by kind: 2-tap or antialiased, into a uint8 or a float32 image, with the
 * arguments of sl__resample_u8 / sl__resample_f32 from src to dw. */
#define sl__resize_u8(...) sl__resample_u8(false, __VA_ARGS__, NULL)
#define sl__resize_aa_u8(...) sl__resample_u8(true, __VA_ARGS__, NULL)
#define sl__resize_f32(...) sl__resample_f32(false, __VA_ARGS__)
#define sl__resize_aa_f32(...) sl__resample_f32(true, __VA_ARGS__)

/* Does this CPU run AVX2 (asked once)? Always false where the AVX2 paths are not built. */
bool sl__cpu_has_avx2(void);

/* What decode_jpeg and the geometry functions begin with. */
typedef struct sl__image_fn {
    sl_fn base;
    char comp[SL_NAME_MAX]; /* the component they work on */
    int64_t max_pixels;     /* larger images (decode_jpeg) or outputs (the others) are refused */
} sl__image_fn;

/* A new function of `size` bytes that begins with an sl__image_fn: vtable vt, named
 * vt->name, on component comp, max_pixels SL_FN_MAX_PIXELS_DEFAULT, all else zero.
 * SL_EINVAL naming vt->name when comp is not 1..SL_NAME_MAX - 1 characters; SL_ENOMEM. */
sl_status sl__image_fn_new(size_t size, const sl_fn_vt *vt, const char *comp, sl__image_fn **out);

/* ---- crop geometry ---- */

typedef struct sl__rect {
    int64_t y, x, h, w;
} sl__rect;

typedef enum sl__geom_kind {
    SL__GEOM_RANDOM_RESIZED_CROP = 1,
    SL__GEOM_CENTER_CROP,
    SL__GEOM_RESIZE,
} sl__geom_kind;

/* random_resized_crop, center_crop and resize embed this as their only fields: the crop
 * (and resize) is all they do. */
typedef struct sl__geom_fn {
    sl__image_fn im;                 /* component; outputs over max_pixels are refused */
    sl__geom_kind kind;
    int64_t height, width;           /* the output size (center_crop: at most this) */
    int64_t shorter;                 /* resize only: > 0 = the shorter side to this, keep aspect */
    bool antialias;                  /* antialiased resampling when shrinking (default true) */
    double scale_lo, scale_hi;       /* random_resized_crop only */
    double ratio_lo, ratio_hi;
} sl__geom_fn;

/* fn as a crop/resize function (random_resized_crop, center_crop and resize: their apply is
 * sl__geom_apply), or NULL if it is another kind of function. */
const sl__geom_fn *sl__as_geom(const sl_fn *fn);

/* torchvision's RandomResizedCrop.get_params on an H x W image, drawing from a generator
 * seeded with `seed`. */
sl__rect sl__rrc_rect(int64_t H, int64_t W, double scale_lo, double scale_hi, double ratio_lo,
                      double ratio_hi, uint64_t seed);

/* The central h x w rectangle (each clamped to the image), offsets rounded like
 * torchvision's CenterCrop: round((H - h) / 2), ties to even. */
sl__rect sl__center_rect(int64_t H, int64_t W, int64_t h, int64_t w);

/* torchvision's Resize(n) output size for an H x W image: the shorter side becomes n, the
 * longer int(n * long / short) (a square gives n x n). */
void sl__shorter_size(int64_t H, int64_t W, int64_t n, int64_t *oh, int64_t *ow);

/* What g does to an H x W image called with `seed`: the source rectangle it reads and the
 * output size (*oh x *ow; equal to the rectangle's size when there is no resize). */
void sl__geom_plan(const sl__geom_fn *g, int64_t H, int64_t W, uint64_t seed, sl__rect *r,
                   int64_t *oh, int64_t *ow);

/* The apply of the three geometry functions: crop component g->im.comp to the planned
 * rectangle and resize it to the planned size (a shared view when nothing changes). */
sl_status sl__geom_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call);

/* Validate the shared constructor arguments and allocate the function. */
sl_status sl__geom_new(const sl_fn_vt *vt, sl__geom_kind kind, const char *comp, int height,
                       int width, sl__geom_fn **out);

/* decode_jpeg: allow (the default) or forbid DCT-scaled decoding when it absorbs a crop or
 * resize (sl_fn_set_dct_scaling). Forbidden, the fused path decodes the crop at full size
 * and gives exactly the pixels of decode-then-crop-then-resize (tests compare the two).
 * Call before the function is used: functions are immutable once shared. */
void sl__fn_decode_jpeg_set_dct_scaling(sl_fn *fn, bool allow);

/* An oh x ow output of fn over `max` pixels: SL_ERANGE naming comp, the size, the limit
 * and how to raise it; SL_OK otherwise. */
sl_status sl__check_pixels(const sl_fn *fn, const char *comp, int64_t oh, int64_t ow, int64_t max);

/* Is fn a scale? Then the component it scales and its table of the 256 uint8 results (for
 * decode_raw, which absorbs a scale of its uint8 output). */
bool sl__fn_as_scale(const sl_fn *fn, const char **comp, const float **lut);

/* ---- what decode_jpeg also absorbs after a crop or resize ---- */

/* Is fn random_flip of component comp? */
bool sl__is_flip_of(const sl_fn *fn, const char *comp);

/* The flips random_flip fn makes when called with `seed` (its draws, in its order). */
void sl__flip_draw(const sl_fn *fn, uint64_t seed, bool *fh, bool *fv);

/* What a normalize does to uint8 values: lut[(c % nl) * 256 + v] is its result for value v
 * of channel c, (v / 255 - mean[c % nl]) / std[c % nl] (or (v - mean) / std without scale),
 * each operation in float. */
typedef struct sl__norm_u8 {
    const float *lut;        /* nl x 256 */
    int nl;                  /* the means (and stds) given: 1 (for all channels) or one each */
    const float *mean, *std; /* nl each */
    bool scale;              /* uint8 values are divided by 255 first */
} sl__norm_u8;

/* fn as normalize of component comp applied to uint8 pixels with `channels` channels, or NULL
 * when fn is not normalize of comp, or when its means do not fit `channels` (normalize itself
 * then fails: it must run). */
const sl__norm_u8 *sl__normalize_u8_of(const sl_fn *fn, const char *comp, int channels);

/* The row operations of random_flip and normalize: each function's work written once, here,
 * and run both by the function itself over its image and by decode_jpeg on each row of its
 * fused result (an sl__row_sink), so that the fused values are the function's own. Inline:
 * they are the inner loops of the fused path. */

/* random_flip's row order: row y of an h-row image flipped top-bottom when fv is row
 * sl__flip_row(y, h, fv) of the image before (and goes there: the mirror undoes itself). */
static inline int64_t sl__flip_row(int64_t y, int64_t h, bool fv) { return fv ? h - 1 - y : y; }

/* random_flip on one row: w pixels of px bytes from src to dst (not overlapping), the last
 * pixel first when fh, as they are otherwise. */
static inline void sl__row_flip(const uint8_t *src, uint8_t *dst, int64_t w, size_t px, bool fh) {
    if (!fh) {
        memcpy(dst, src, px * (size_t)w);
    } else if (px == 3) {
        for (int64_t x = 0; x < w; x++) {
            const uint8_t *sp = src + (size_t)(w - 1 - x) * 3;
            dst[3 * x] = sp[0];
            dst[3 * x + 1] = sp[1];
            dst[3 * x + 2] = sp[2];
        }
    } else {
        for (int64_t x = 0; x < w; x++) memcpy(dst + (size_t)x * px, src + (size_t)(w - 1 - x) * px, px);
    }
}

/* normalize on n uint8 values with c channels (value i is of channel i % c) into float32. */
static inline void sl__row_normalize_u8(const uint8_t *x, int64_t n, int64_t c, const sl__norm_u8 *p,
                                        float *o) {
    const float *lut = p->lut;
    if (p->nl == 1) {
        for (int64_t i = 0; i < n; i++) o[i] = lut[x[i]];
    } else if (c == 3) {
        const float *l0 = lut, *l1 = lut + 256, *l2 = lut + 512;
        for (int64_t i = 0; i + 2 < n; i += 3) {
            o[i] = l0[x[i]];
            o[i + 1] = l1[x[i + 1]];
            o[i + 2] = l2[x[i + 2]];
        }
    } else {
        for (int64_t i = 0; i < n; i++) o[i] = lut[(i % c) * 256 + x[i]];
    }
}

/* sl__row_normalize_u8 of the uint8 row sl__row_round_u8(v, n) (a sink's row: c is 1 or 3),
 * without that row: the same floats, by normalize's own arithmetic 8 values at a time where
 * the CPU has AVX2 (pipeline/fn/normalize.c). */
void sl__row_normalize_rounded(const float *v, int64_t n, int64_t c, const sl__norm_u8 *p, float *o);

/* ---- numbers (pipeline/fn/cast.c) ---- */

/* Integer types (bool included), floating types. */
bool sl__dtype_is_int(sl_dtype dt);
bool sl__dtype_is_float(sl_dtype dt);
/* Element i of a numeric array as int64 (integer types) or double (any numeric type). */
int64_t sl__num_get_i64(const void *data, sl_dtype dt, int64_t i);
double sl__num_get_f64(const void *data, sl_dtype dt, int64_t i);
/* Convert n numbers from src (dtype sd) to dst (dtype dd), saturating when dd is an integer
 * type (NaN gives 0; float to integer truncates toward zero, as C and tf.cast do). */
void sl__num_convert(const void *src, sl_dtype sd, void *dst, sl_dtype dd, int64_t n);

/* A numeric (non-bytes, valid) dtype? SL_EINVAL naming comp and its shape if not. */
sl_status sl__need_numeric(const char *comp, const sl_tensor *t);

/* The input of a function on numbers: component comp of e, or NULL with *s set (the errors
 * of sl__fn_component, then of sl__need_numeric). */
const sl_tensor *sl__fn_numeric_input(const sl_fn *fn, const sl_element *e, const char *comp,
                                      sl_status *s);
/* The same for an image: also its height, width and channels (sl__image_shape's rules and
 * errors, checked before the dtype). */
const sl_tensor *sl__fn_image_input(const sl_fn *fn, const sl_element *e, const char *comp,
                                    int64_t *h, int64_t *w, int64_t *c, sl_status *s);

#endif
