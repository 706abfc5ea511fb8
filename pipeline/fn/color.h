/* Private to pipeline/fn/: torchvision's colour kernels on uint8 images (torchvision 0.14
 * transforms/functional_tensor.py), shared by color_jitter, grayscale and the augment
 * policies (RandAugment, TrivialAugmentWide). Every kernel is bit-for-bit the tensor op:
 * float32 arithmetic in torchvision's order, results clamped to [0, 255] and converted to
 * uint8 by truncation (torchvision's _blend: (ratio * img1 + (1 - ratio) * img2)
 * .clamp(0, 255).to(uint8)).
 *
 * Layout: interleaved HWC, npix = height * width pixels of c channels (c = 1 or 3), modified
 * in place. A c an op does not adjust (saturation and hue: c != 3, contrast: c not 1 or 3;
 * see each below) leaves the pixels as they are; callers check the channels first and
 * report the error. The factors are float32, as torchvision's tensors see them; (1 - f)
 * is computed in double from that float, as Python does, then rounded to float32. */
#ifndef SLUICE_PIPELINE_FN_COLOR_H
#define SLUICE_PIPELINE_FN_COLOR_H

#include <stdint.h>

/* F.adjust_brightness: _blend(img, zeros, factor) = clamp(factor * v, 0, 255) truncated.
 * Any c (every value alike). factor >= 0. */
void sl__adjust_brightness_u8(uint8_t *px, int64_t npix, int64_t c, float factor);

/* F.adjust_contrast: _blend(img, mean, factor) with mean the float32 mean of the uint8
 * grayscale image (sl__rgb_to_gray_u8 for c = 3, the values themselves for c = 1), one mean
 * for the whole image. factor >= 0. */
void sl__adjust_contrast_u8(uint8_t *px, int64_t npix, int64_t c, float factor);

/* F.adjust_saturation: _blend(img, gray, factor) per pixel, gray the uint8 grayscale value
 * of that pixel. For c = 1 the image is left unchanged (torchvision returns it as is).
 * factor >= 0. */
void sl__adjust_saturation_u8(uint8_t *px, int64_t npix, int64_t c, float factor);

/* F.adjust_hue: RGB -> HSV (torchvision's _rgb2hsv on v / 255 in float32), h = fmod(h +
 * hue_factor, 1), HSV -> RGB (_hsv2rgb), then * 255 and truncated to uint8. c = 3 only; for
 * c = 1 the image is left unchanged (torchvision returns grayscale images as they are).
 * hue_factor in [-0.5, 0.5]. */
void sl__adjust_hue_u8(uint8_t *px, int64_t npix, int64_t c, float hue_factor);

/* F.rgb_to_grayscale: gray = (0.2989 r + 0.587 g + 0.114 b) in float32, truncated to uint8
 * (no clamp needed: the weights sum to 0.9999). rgb holds npix interleaved RGB pixels; gray
 * gets npix values. gray may be rgb itself (in place: value i is written after pixel i is
 * read and before the later pixels, which lie beyond it, are); otherwise they must not
 * overlap. */
void sl__rgb_to_gray_u8(const uint8_t *rgb, int64_t npix, uint8_t *gray);

#endif
