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

/* ---- colour (torchvision's functional ops on uint8 tensors) ----------------------------
 * uint8 images only ([h, w, c] or [h, w]; other dtypes are SL_EINVAL: apply them before
 * normalize or cast), with c = 1 or 3 (others SL_EINVAL naming the shape). Each result is
 * bit for bit torchvision 0.14's tensor op (float32 arithmetic, clamped to 0..255 and
 * truncated, see pipeline/fn/color.h); the tests compare with stored torchvision outputs
 * (tests/data/torchvision). The output is a fresh tensor (straight into the batch under a
 * fused map_batch); the input buffer is never written. Constructors return SL_OK, or
 * SL_EINVAL (bad component name or factor; *out NULL) or SL_ENOMEM. */

/* F.adjust_brightness: v * factor. factor >= 0. */
sl_status sl_fn_adjust_brightness(const char *comp, double factor, sl_fn **out);
/* F.adjust_contrast: blend with the mean of the grayscale image (of the image itself for
 * c = 1). factor >= 0. */
sl_status sl_fn_adjust_contrast(const char *comp, double factor, sl_fn **out);
/* F.adjust_saturation: blend with each pixel's grayscale value. factor >= 0. A
 * one-channel image comes out as it went in (torchvision's behaviour). */
sl_status sl_fn_adjust_saturation(const char *comp, double factor, sl_fn **out);
/* F.adjust_hue: rotate the hue by hue_factor turns, hue_factor in [-0.5, 0.5]. A
 * one-channel image comes out as it went in (torchvision's behaviour). */
sl_status sl_fn_adjust_hue(const char *comp, double hue_factor, sl_fn **out);

/* torchvision's ColorJitter with explicit ranges: factor k (0 brightness, 1 contrast,
 * 2 saturation, 3 hue) is drawn uniform in [lo[k], hi[k]] (as a float32, as torchvision's
 * torch.empty(1).uniform_ does); a factor whose range is the identity ([1, 1] for the first
 * three, [0, 0] for hue) is not applied. Per call: first a random order of the four
 * (Fisher-Yates from the call's seed), then the factors in the order brightness, contrast,
 * saturation, hue (only those applied), then the adjustments in the drawn order. Ranges:
 * 0 <= lo <= hi for the first three, -0.5 <= lo <= hi <= 0.5 for hue, else SL_EINVAL.
 * Images with c = 1: brightness and contrast apply, saturation and hue do nothing. */
sl_status sl_fn_color_jitter_ranges(const char *comp, const double lo[4], const double hi[4], sl_fn **out);
/* ColorJitter(brightness, contrast, saturation, hue) with torchvision's scalar arguments:
 * the ranges [max(0, 1 - b), 1 + b] (likewise contrast and saturation) and [-hue, hue];
 * b, contrast, saturation >= 0, 0 <= hue <= 0.5. */
sl_status sl_fn_color_jitter(const char *comp, double brightness, double contrast, double saturation,
                             double hue, sl_fn **out);

/* F.rgb_to_grayscale(img, num_output_channels): 0.2989 r + 0.587 g + 0.114 b truncated to
 * uint8, one channel, or that value in each of 3 channels when num_output_channels is 3 (1
 * or 3, else SL_EINVAL). A one-channel image is copied as it is, with one channel also
 * when 3 are asked for (torchvision's behaviour). A rank 2 input gives a rank 2 output for
 * one channel. */
sl_status sl_fn_rgb_to_grayscale(const char *comp, int num_output_channels, sl_fn **out);
/* RandomGrayscale(p): with probability p (one U[0,1) draw from the seed, below p),
 * rgb_to_grayscale keeping the number of channels (3 in, 3 out); otherwise the image is
 * left as it is (the same tensor). p in [0, 1]. */
sl_status sl_fn_random_grayscale(const char *comp, double p, sl_fn **out);

/* ---- geometry ------------------------------------------------------------------------- */

/* tf.image.rot90(image, k): rotate counter-clockwise by k quarter turns (any k: taken
 * modulo 4; np.rot90 and torch.rot90 over (H, W) agree). Any numeric dtype, rank 2 or 3;
 * the output is [w, h, c] for odd k. k = 0 leaves the very tensor. */
sl_status sl_fn_rot90(const char *comp, int k, sl_fn **out);
/* rot90 by k uniform in {0, 1, 2, 3} (one sl__rng_below(4) draw from the seed). Images that
 * are not square change shape with k: batch them only when they are square. */
sl_status sl_fn_random_rot90(const char *comp, sl_fn **out);

/* F.erase(img, i, j, h, w, v): the box of rows i..i+h-1, columns j..j+w-1 set to `value`
 * (nvalue = 1: every channel; else one per channel, nvalue = c, checked per call). uint8
 * and float32 images (rank 2 or 3); for uint8 each value is rounded down and saturated to
 * 0..255 (torchvision's cast). A box not inside the image (i, j < 0, h, w < 1, i + h > H,
 * j + w > W) is SL_EINVAL at the call naming box and image; nvalue must be 1..16. */
sl_status sl_fn_erase(const char *comp, int i, int j, int h, int w, const float *value, int nvalue,
                      sl_fn **out);
/* torchvision's RandomErasing(p, scale, ratio, value). Per call, from the seed: one U[0,1)
 * draw, no erasing unless it is below p; then up to 10 tries of an area fraction U[scale_lo,
 * scale_hi] and a log-aspect U[log ratio_lo, log ratio_hi], h = round(sqrt(area * aspect)),
 * w = round(sqrt(area / aspect)) (ties to even, as Python's round); the first try with
 * h < H and w < W places the box at a row uniform in [0, H - h] and a column in [0, W - w]
 * (no try fits: unchanged, as torchvision). The box is filled with `value` (as sl_fn_erase),
 * or with random values when random_value (value ignored): standard normal for float32
 * (torchvision's value="random" on the normalized tensor), uniform 0..255 for uint8 (where
 * torchvision's cast of normal values is meaningless). An unerased image is the same
 * tensor. 0 <= p <= 1, 0 < scale_lo <= scale_hi <= 1, 0 < ratio_lo <= ratio_hi, else
 * SL_EINVAL. torchvision's defaults: 0.5, 0.02, 0.33, 0.3, 3.3, value 0. */
sl_status sl_fn_random_erasing(const char *comp, double p, double scale_lo, double scale_hi, double ratio_lo,
                               double ratio_hi, const float *value, int nvalue, bool random_value,
                               sl_fn **out);

/* tf.image.resize_with_pad(image, height, width) (bilinear, antialias=False): resized by
 * ratio = max(W / width, H / height) (float32) to floor(H / ratio) x floor(W / ratio) with
 * the 2-tap resampler (half-pixel centres, sl_fn_resize with antialias off), then placed at
 * row floor((height - H / ratio) / 2), column floor((width - W / ratio) / 2) of a zero
 * height x width image. uint8 (rounded to nearest) or float32; the dtype is kept (TF gives
 * float32). height, width 1..65535; an output over max_pixels is SL_ERANGE. */
sl_status sl_fn_resize_with_pad(const char *comp, int height, int width, sl_fn **out);

/* tf.image.crop_to_bounding_box(image, offset_height, offset_width, target_height,
 * target_width): rows offset_height.., columns offset_width.., any dtype; a box that is the
 * whole image leaves the very tensor (so does distorted_bbox_crop's fallback). Constructor:
 * offsets >= 0 and targets >= 1, else SL_EINVAL. Per call: a box that does not fit the
 * image (offset + target over the side) is SL_EINVAL naming box and image. */
sl_status sl_fn_crop_to_bounding_box(const char *comp, int offset_height, int offset_width, int target_height,
                                     int target_width, sl_fn **out);

/* The Inception crop: tf.image.sample_distorted_bounding_box then the crop, as TensorFlow's
 * kernel samples it (sample_distorted_bounding_box_op.cc): up to max_attempts tries of an
 * aspect ratio U[aspect_lo, aspect_hi] and a crop height uniform between the heights whose
 * area is area_lo and area_hi of the image (TF's GenerateRandomCrop: lrintf rounding, the
 * width-fitting correction), at a uniform position; the first crop covering at least
 * min_object_covered of one bounding box wins, none: the whole image. Bounding boxes come
 * from component `boxes` (float32 [n, 4] or [1, n, 4]: ymin, xmin, ymax, xmax in [0, 1],
 * ymin <= ymax, xmin <= xmax, else SL_EINVAL at the call) when boxes is non-NULL and the
 * element has it with n >= 1; otherwise the whole image is the one box when
 * use_image_if_no_boxes (else SL_EINVAL at the call). The random numbers are ours, not TF's
 * Philox. Any dtype. Constructor: 0 <= min_object_covered <= 1, 0 < aspect_lo <= aspect_hi,
 * 0 < area_lo <= area_hi <= 1, 1 <= max_attempts <= 100000, else SL_EINVAL. TF's Inception
 * defaults: 0.1, [0.75, 1.33], [0.05, 1.0], 100, true. */
sl_status sl_fn_distorted_bbox_crop(const char *comp, const char *boxes, double min_object_covered,
                                    double aspect_lo, double aspect_hi, double area_lo, double area_hi,
                                    int max_attempts, bool use_image_if_no_boxes, sl_fn **out);

/* ---- torchvision's classification recipe: augment policies and batch mixing ----------- */

/* torchvision 0.14's RandAugment(num_ops, magnitude, num_magnitude_bins=bins) on a uint8
 * [h, w, c] (or [h, w]) image, c 1 or 3, interpolation NEAREST, fill 0: num_ops times an op
 * drawn uniformly from Identity, ShearX, ShearY, TranslateX, TranslateY, Rotate, Brightness,
 * Color, Contrast, Sharpness, Posterize, Solarize, AutoContrast, Equalize, at bin `magnitude`
 * of torchvision's magnitude table (TranslateX/Y scale with the image: 150/331 of its width
 * or height at the last bin), the sign of a signed op drawn with probability 1/2. Each op's
 * pixels equal torchvision's within 1 per value (the geometric ops: exactly). Randomness
 * from the call's seed only. An image of another dtype or channel count fails when applied
 * with SL_EINVAL. Here: SL_EINVAL for bins outside 2..1000, num_ops outside 0..16, or
 * magnitude outside 0..bins - 1; *out is NULL on failure. */
sl_status sl_fn_rand_augment(const char *comp, int num_ops, int magnitude, int bins, sl_fn **out);

/* TrivialAugmentWide(num_magnitude_bins=bins): one op drawn uniformly from the 14 above, its
 * bin uniform over bins (TrivialAugmentWide's wide table: shear 0.99, translate 32 pixels,
 * rotate 135 degrees, colour factors 1 +- 0.99, posterize 8..2 bits), a signed op's sign
 * with probability 1/2. Otherwise as sl_fn_rand_augment; SL_EINVAL for bins outside 2..1000. */
sl_status sl_fn_trivial_augment(const char *comp, int bins, sl_fn **out);

/* One op of the policies at a fixed magnitude (torchvision's _apply_op(img, op, magnitude)):
 * op by torchvision's name (case-insensitive), magnitude as _apply_op takes it, signed: shear
 * factor (tan), translation in pixels (truncated), rotation in degrees counter-clockwise,
 * colour factor - 1, Posterize's bits, Solarize's threshold; ignored by Identity,
 * AutoContrast and Equalize. SL_EINVAL for an unknown op (the hint lists them), a magnitude
 * that is not finite, < -1 for a colour op, outside [0, 9) for Posterize, |shear| > 100. */
sl_status sl_fn_augment_op(const char *comp, const char *op, double magnitude, sl_fn **out);

/* Batch functions: apply them with map after batch. The image component is [N, ...]
 * (usually [N, H, W, C]) float32 or uint8, the label int64 [N] (class ids 0..num_classes-1,
 * made one-hot first) or float32 [N, num_classes]; the label becomes float32
 * [N, num_classes]. As torchvision's reference scripts' RandomMixup / RandomCutmix: with
 * probability p (else only the one-hot), lambda ~ Beta(alpha, alpha) (from two Gamma draws,
 * Marsaglia-Tsang, seeded by the call's seed); the batch is paired with itself rolled by one
 * (element i with i - 1, element 0 with N - 1).
 * mixup: image = lambda * image + (1 - lambda) * rolled (in float32; uint8 rounded to
 * nearest), label = lambda * label + (1 - lambda) * rolled label, with 1 - lambda computed
 * in float32 from the float32 lambda, so a one-hot row sums to exactly 1.
 * cutmix: a box centred at a uniform (x, y), half sides int(0.5 sqrt(1 - lambda) W) and
 * (... H), clipped to the image, is copied from the rolled images (dims 1 and 2 are H and W);
 * lambda becomes 1 - box area / (H W) and mixes the labels as above.
 * Errors when applied (SL_EINVAL): a missing component, a label of another dtype or shape,
 * an image whose first dimension is not the label's N, for cutmix and mixup_cutmix an image
 * of rank < 3 or an empty H or W (whatever the draw), a class id outside 0..num_classes-1
 * (SL_ERANGE). Here: SL_EINVAL for alpha <= 0, p outside [0, 1], num_classes < 1. */
sl_status sl_fn_mixup(const char *image, const char *label, double alpha, int num_classes, double p,
                      sl_fn **out);
sl_status sl_fn_cutmix(const char *image, const char *label, double alpha, int num_classes, double p,
                       sl_fn **out);
/* The recipe's RandomChoice([RandomMixup(p=1, mixup_alpha), RandomCutmix(p=1, cutmix_alpha)]):
 * each call first draws which one (1/2 each), then does it. */
sl_status sl_fn_mixup_cutmix(const char *image, const char *label, double mixup_alpha, double cutmix_alpha,
                             int num_classes, sl_fn **out);

#ifdef __cplusplus
}
#endif
#endif
