/* Element functions: what map applies to each element. A function reads components of the
 * element by name and writes (replaces or adds) components. Functions are immutable and
 * refcounted, like datasets; per-thread scratch (a JPEG decoder, say) lives in state the
 * map op creates for each of its threads.
 *
 * Images are uint8 or float32 tensors laid out [height, width, channels].
 *
 * A chain (sl_fn_chain) runs functions in order and lets each learn what comes after it:
 * decode_jpeg followed by random_resized_crop, center_crop or resize decodes only the crop
 * region (libjpeg's jpeg_crop_scanline / jpeg_skip_scanlines: the same pixels at a fraction
 * of the work) and, unless sl_fn_set_dct_scaling(fn, false), at the smallest DCT scale that
 * still covers the target size (close to, not equal to, the full-size pixels).
 *
 * Size limits: decode_jpeg, resize, center_crop and random_resized_crop refuse an image
 * over max_pixels (height x width; SL_FN_MAX_PIXELS_DEFAULT unless raised with
 * sl_fn_set_max_pixels, or `max_pixels=N` on the function in the config language) with
 * SL_ERANGE, before allocating it: a 10 MB JPEG can hold 30000 x 30000 pixels, and a typo
 * in a resize target can ask for tens of gigabytes. The message gives the size, the limit
 * and how to raise it.
 *
 * Errors name the element: map and map_batch prefix a function's error with the element's
 * origin (the file and the record's byte offset, see sl_origin), the op and the config
 * statement (FILE:LINE) that wrote the map, then the function's name:
 *   "data/a.tfrecord: byte 1234: op 'train/map' (job.sl:7): parse_example: ...".
 *
 * Randomness: random functions draw from a generator seeded by sl_fn_call.seed, which the
 * map op derives from the pipeline seed and the element's position, so results do not
 * depend on which thread ran the call. */
#ifndef SLUICE_FN_H
#define SLUICE_FN_H

#include <stdbool.h>
#include <stdint.h>

#include "sluice/status.h"
#include "sluice/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_fn sl_fn;

/* What one call knows besides the element. */
typedef struct sl_fn_call {
    uint64_t seed;     /* per element (and per function in a chain) */
    int64_t index;     /* the element's position in the map's input stream */
    void *state;       /* this thread's state for this function (NULL if it has none) */
} sl_fn_call;

sl_fn *sl_fn_ref(sl_fn *fn);   /* returns fn */
void sl_fn_unref(sl_fn *fn);   /* NULL is a no-op */
const char *sl_fn_name(const sl_fn *fn);

/* A user function. apply may replace or add components of *e; on failure it returns a
 * negative status with sl_err set and leaves *e in a state the caller can clear. `ctx` is
 * handed over: free_ctx(ctx, NULL) runs when the function is freed (free_ctx may be NULL). */
typedef sl_status (*sl_fn_apply)(void *ctx, sl_element *e, const sl_fn_call *call);
sl_status sl_fn_custom(const char *name, sl_fn_apply apply, void *ctx, sl_free_fn free_ctx,
                       sl_fn **out);

/* Run fns in order (each borrowed: a reference is taken), after letting each see the ones
 * downstream of it. A chain of one is that function. */
sl_status sl_fn_chain(sl_fn *const *fns, int n, sl_fn **out);

/* ---- the stock functions -------------------------------------------------------------- */

/* Pillow's default MAX_IMAGE_PIXELS: a quarter gigabyte of 24-bit pixels (about 9459 x 9459). */
#define SL_FN_MAX_PIXELS_DEFAULT ((int64_t)89478485)

/* Set the pixel limit (height x width, >= 1) of decode_jpeg (the image as its header
 * declares it, at full size: checked before decoding, also when a crop or resize is fused
 * into the decode), resize, center_crop or random_resized_crop (the output: checked before
 * allocating it). An image over the limit is SL_ERANGE. Call it after creating the function
 * and before sharing it with a map: functions are immutable once in use. Returns SL_OK, or
 * SL_EINVAL for max_pixels < 1 or another kind of function (a chain included). */
sl_status sl_fn_set_max_pixels(sl_fn *fn, int64_t max_pixels);

/* One feature to parse out of a serialized tf.train.Example. */
typedef struct sl_feature_spec {
    const char *name;        /* the feature key; also the output component unless `as` is set */
    const char *as;          /* output component name, or NULL */
    sl_dtype dtype;          /* SL_DT_BYTES, SL_DT_I64 or SL_DT_F32 */
    int rank;                /* 0: exactly one value (scalar); 1 with dims[0] = -1: any count */
    int64_t dims[SL_MAX_RANK]; /* fixed shape: the feature must hold exactly prod(dims) values */
    bool has_default;        /* a missing feature takes the default instead of failing */
    double default_num;      /* the default for numbers (every value) */
    const char *default_bytes; /* the default for bytes (NUL-terminated) */
} sl_feature_spec;

/* Parse component `input` (bytes scalar: a serialized Example; usually "record") into one
 * component per spec; `input` is removed from the element. Bytes outputs are zero-copy
 * views of the record. Errors: a missing feature without default, a wrong kind, or a wrong
 * value count is SL_EINVAL naming the feature (a missing one lists the features the record
 * has: "the record has: image (bytes), label (int64)"); a malformed Example is SL_ECORRUPT. */
sl_status sl_fn_parse_example(const char *input, const sl_feature_spec *specs, int n, sl_fn **out);

/* Decode a JPEG (bytes scalar component) in place to uint8 [h, w, channels]; channels 1
 * or 3 (0: as in the file, 1 or 3). Not a JPEG, or damaged: SL_ECORRUPT; more pixels than
 * the function's max_pixels (see sl_fn_set_max_pixels): SL_ERANGE, before decoding. */
sl_status sl_fn_decode_jpeg(const char *comp, int channels, sl_fn **out);

/* torchvision's RandomResizedCrop: a random area fraction in [scale_lo, scale_hi] and
 * aspect ratio in [ratio_lo, ratio_hi] (log-uniform), 10 tries then a center crop, then a
 * bilinear resize to height x width. Input uint8 or float32 [h, w, c]. */
sl_status sl_fn_random_resized_crop(const char *comp, int height, int width, double scale_lo,
                                    double scale_hi, double ratio_lo, double ratio_hi, sl_fn **out);

/* The central height x width region (the whole image where it is smaller: no padding). */
sl_status sl_fn_center_crop(const char *comp, int height, int width, sl_fn **out);

/* Bilinear resize to height x width (half-pixel centers, as torchvision's). Antialiased
 * unless sl_fn_set_antialias(fn, false) (see there). An output over max_pixels is
 * SL_ERANGE when applied (the same for the crops above). */
sl_status sl_fn_resize(const char *comp, int height, int width, sl_fn **out);

/* torchvision's Resize(shorter): the shorter side becomes `shorter`, the longer
 * int(shorter * long / short) (truncated, as torchvision computes it); a square image
 * becomes shorter x shorter. Otherwise as sl_fn_resize. SL_EINVAL for shorter < 1. */
sl_status sl_fn_resize_shorter(const char *comp, int shorter, sl_fn **out);

/* Antialiasing of resize, random_resized_crop and center_crop (tf.image.resize's name).
 * true (the default, as PIL and torchvision >= 0.17): where the image shrinks along an
 * axis by a factor s > 1, each output pixel is a triangle-weighted mean of the source pixels
 * within s of its centre (the bilinear filter widened by s; PIL's and torchvision's
 * antialias=True weights), so detail finer than the output grid is averaged instead of
 * aliased; it costs about s times the taps of 2-tap bilinear along that axis. false: 2-tap
 * bilinear (tf.image.resize's default, torchvision's antialias=False). Growing, both are
 * the same bilinear, bit for bit. center_crop never resamples: it accepts the setting and
 * is unaffected. Call before the function is used. Returns SL_OK, or SL_EINVAL for
 * another kind of function. */
sl_status sl_fn_set_antialias(sl_fn *fn, bool antialias);

/* decode_jpeg followed in a chain by random_resized_crop, center_crop or resize decodes at
 * a reduced DCT scale when one still covers the target (see sl_jpeg_pick_scale): allowed by
 * default. With allow = false it decodes the crop at full size, and the output equals the
 * unfused decode -> crop -> resize bit for bit. Returns SL_OK, or SL_EINVAL if fn is not
 * decode_jpeg. Call before the function is used. */
sl_status sl_fn_set_dct_scaling(sl_fn *fn, bool allow);

/* decode_jpeg's speed against fidelity (tf.io.decode_jpeg's dct_method and
 * fancy_upscaling; sl_jpeg_decoder_set_speed): fast_dct true is dct_method INTEGER_FAST
 * (libjpeg's fast integer IDCT), fancy_upscaling false doubles subsampled chroma by
 * repeating samples instead of filtering them. Defaults false, true: the accurate decode.
 * Either changes pixels by a few levels; the fused crop still equals decode -> crop under
 * the same settings. Returns SL_OK, or SL_EINVAL if fn is not decode_jpeg. Call before the
 * function is used. */
sl_status sl_fn_set_jpeg_speed(sl_fn *fn, bool fast_dct, bool fancy_upscaling);

/* torchvision's RandomCrop(size, padding=P): a height x width window at a uniformly random
 * place (top row, then left column, from the call's seed) in the image padded by `padding`
 * zero pixels on every side; pixels are copied (any numeric dtype, [h, w, c] or [h, w]).
 * SL_EINVAL here for a size outside 1..65535 or padding outside 0..65535, and when applied
 * for a window larger than the padded image (naming both). */
sl_status sl_fn_random_crop(const char *comp, int height, int width, int padding, sl_fn **out);

/* Mirror left-right (and/or top-bottom) with probability p. */
sl_status sl_fn_random_flip(const char *comp, bool horizontal, bool vertical, double p, sl_fn **out);

/* (x - mean[c]) / std[c] per channel, to float32; uint8 input is first scaled by 1/255 when
 * scale_uint8 (torchvision's ToTensor + Normalize). n = number of channels given (1 applies to all). */
sl_status sl_fn_normalize(const char *comp, const float *mean, const float *std, int n,
                          bool scale_uint8, sl_fn **out);

/* Convert to dtype (numbers saturate when the target is an integer type). */
sl_status sl_fn_cast(const char *comp, sl_dtype dtype, sl_fn **out);

/* x * factor, to float32. */
sl_status sl_fn_scale(const char *comp, double factor, sl_fn **out);

/* Reinterpret a bytes scalar as a tensor of dtype and shape (little endian); the byte count
 * must match exactly (SL_EINVAL naming both sizes). Zero-copy. */
sl_status sl_fn_decode_raw(const char *comp, sl_dtype dtype, int rank, const int64_t *dims,
                           sl_fn **out);

/* An integer scalar (or [n] vector) to float32 one-hot [depth] ([n, depth]); a value outside
 * 0..depth-1 is SL_ERANGE. */
sl_status sl_fn_one_hot(const char *comp, int depth, sl_fn **out);

#ifdef __cplusplus
}
#endif
#endif
