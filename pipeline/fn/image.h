/* Private to pipeline/fn/: what the image functions share — reading an image tensor's
 * shape, the bilinear resampler, and the crop geometry of random_resized_crop, center_crop
 * and resize, which decode_jpeg also uses when it absorbs one of them (so both paths
 * choose the same rectangle from the same seed). */
#ifndef SLUICE_PIPELINE_FN_IMAGE_H
#define SLUICE_PIPELINE_FN_IMAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "pipeline/internal.h"

/* An image tensor's height, width and channels: rank 3 [h, w, c], or rank 2 [h, w] (one
 * channel). SL_EINVAL naming fn and comp for any other rank or an empty image. */
sl_status sl__image_shape(const sl_fn *fn, const char *comp, const sl_tensor *t, int64_t *h,
                          int64_t *w, int64_t *c);

/* Bilinear resampling with half-pixel centers (PyTorch's align_corners=False, no
 * antialias). The source is an sh x sw x c image whose rows are `stride` elements apart;
 * the continuous region [ry, ry+rh) x [rx, rx+rw) of it (in pixel-edge coordinates, so
 * (0, 0, sh, sw) is the whole image) is resampled onto dh x dw x c (contiguous). Output
 * pixel (y, x) samples source row ry + (y + 0.5) * rh / dh - 0.5 (clamped below at 0 and
 * above at sh - 1), likewise for columns; every value is computed in float as
 *   wy0 * (wx0 * a + wx1 * b) + wy1 * (wx0 * c + wx1 * d)
 * and uint8 results are rounded to nearest (clamped to 0..255). Returns SL_OK or
 * SL_ENOMEM (scratch for the tables). */
sl_status sl__resize_u8(const uint8_t *src, int64_t sh, int64_t sw, int64_t c, int64_t stride,
                        double ry, double rx, double rh, double rw, uint8_t *dst, int64_t dh,
                        int64_t dw);
sl_status sl__resize_f32(const float *src, int64_t sh, int64_t sw, int64_t c, int64_t stride,
                         double ry, double rx, double rh, double rw, float *dst, int64_t dh,
                         int64_t dw);

/* Antialiased resampling (PIL's and torchvision's antialias=True bilinear): where the region
 * shrinks along an axis (rh > dh, rw > dw), each output sample is a normalized triangle-
 * weighted mean of the source samples within rh / dh (rw / dw) of its centre, the filter
 * widened by the scale factor, clipped at the source's edges (no padding); an axis that
 * grows or keeps its size is plain bilinear as above. When neither axis shrinks this is
 * exactly sl__resize_u8 / sl__resize_f32. Computed in float (uint8 rounded to nearest).
 * Returns SL_OK or SL_ENOMEM. */
sl_status sl__resize_aa_u8(const uint8_t *src, int64_t sh, int64_t sw, int64_t c, int64_t stride,
                           double ry, double rx, double rh, double rw, uint8_t *dst, int64_t dh,
                           int64_t dw);
sl_status sl__resize_aa_f32(const float *src, int64_t sh, int64_t sw, int64_t c, int64_t stride,
                            double ry, double rx, double rh, double rw, float *dst, int64_t dh,
                            int64_t dw);

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
    sl_fn base;
    sl__geom_kind kind;
    char comp[SL_NAME_MAX];
    int64_t height, width;           /* the output size (center_crop: at most this) */
    int64_t shorter;                 /* resize only: > 0 = the shorter side to this, keep aspect */
    bool antialias;                  /* antialiased resampling when shrinking (default true) */
    double scale_lo, scale_hi;       /* random_resized_crop only */
    double ratio_lo, ratio_hi;
    int64_t max_pixels;              /* outputs over this many pixels are refused */
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

/* The apply of the three geometry functions: crop component g->comp to the planned
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

/* The resampler g uses for a region of rh x rw onto oh x ow (antialiased when g says so). */
sl_status sl__geom_resize_u8(const sl__geom_fn *g, const uint8_t *src, int64_t sh, int64_t sw,
                             int64_t c, int64_t stride, double ry, double rx, double rh, double rw,
                             uint8_t *dst, int64_t dh, int64_t dw);

/* Where a uint8 resize's results go when decode_jpeg absorbed a normalize after it: each
 * uint8 result (rounded as sl__resize_u8 rounds it) through normalize's table (lut and nl
 * as for sl__normalize_u8) into dst, a dh x dw x c float32 image, mirrored left-right when
 * fh and top-bottom when fv: the very floats that the resize, random_flip and normalize
 * give one after another, without the uint8 image between them. */
typedef struct sl__u8_post {
    const float *lut; /* normalize's table, nl means */
    int nl;
    const float *mean, *std; /* normalize's nl means and stds */
    bool scale;       /* normalize divides uint8 values by 255 first */
    bool fh, fv;      /* mirror left-right, top-bottom */
    float *dst;       /* dh x dw x c, contiguous */
} sl__u8_post;

/* sl__geom_resize_u8 with the results going through post (not NULL) instead of into a
 * uint8 image. Returns SL_OK or SL_ENOMEM (dst then partly written). */
sl_status sl__geom_resize_post(const sl__geom_fn *g, const uint8_t *src, int64_t sh, int64_t sw,
                               int64_t c, int64_t stride, double ry, double rx, double rh,
                               double rw, const sl__u8_post *post, int64_t dh, int64_t dw);

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

/* Copy an H x W image of px-byte pixels from src to dst (not overlapping), mirrored
 * left-right when fh and top-bottom when fv. */
void sl__flip_copy(const void *src, void *dst, int64_t H, int64_t W, size_t px, bool fh, bool fv);

/* fn as normalize of component comp applied to uint8 pixels with `channels` channels: its
 * table of results, lut[(c % *n) * 256 + v] for value v of channel c, with *n (1, or
 * `channels`) the number of means it was given. NULL when fn is not normalize of comp, or
 * when its means do not fit `channels` (normalize itself then fails: it must run). */
const float *sl__normalize_lut(const sl_fn *fn, const char *comp, int channels, int *n);

/* The means and stds (n each, as sl__normalize_lut says) of normalize fn, and whether it
 * divides uint8 values by 255 first: its table holds (v / 255 - mean) / std (or
 * (v - mean) / std), each operation in float. fn must be a normalize. */
void sl__normalize_params(const sl_fn *fn, const float **mean, const float **std, bool *scale);

/* n uint8 values with c channels through normalize's table (lut and nl as above) into
 * float32 (what normalize does to a uint8 image). */
void sl__normalize_u8(const uint8_t *src, int64_t n, int64_t c, const float *lut, int nl, float *dst);

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
