/* JPEG through TurboJPEG (and libjpeg's API for cropped decoding).
 *
 * Corrupt or truncated input yields SL_ECORRUPT with TurboJPEG's reason, never an abort or
 * a longjmp out of the library. Warnings TurboJPEG can recover from (premature end of data
 * in the entropy stream) are errors too, unless the decoder is told to be lenient.
 *
 * A decoder is one TurboJPEG handle plus scratch space: create one per thread. */
#ifndef SLUICE_JPEG_H
#define SLUICE_JPEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_jpeg_info {
    int width, height;
    int components;   /* 1 (grayscale), 3 (YCbCr/RGB) or 4 (CMYK/YCCK) */
    int subsamp;      /* TurboJPEG TJSAMP_* value */
    int colorspace;   /* TurboJPEG TJCS_* value */
} sl_jpeg_info;

typedef struct sl_jpeg_decoder sl_jpeg_decoder;

sl_status sl_jpeg_decoder_new(sl_jpeg_decoder **out);
void sl_jpeg_decoder_free(sl_jpeg_decoder *d); /* NULL is a no-op */

/* Read the header only. SL_ECORRUPT if it is not a JPEG or the header is damaged. */
sl_status sl_jpeg_header(sl_jpeg_decoder *d, const uint8_t *data, size_t len, sl_jpeg_info *out);

/* Scaled size of a w x h image at scale num/8 (TurboJPEG rounds up: ceil(w*num/8)). */
void sl_jpeg_scaled_size(int w, int h, int num, int *sw, int *sh);

/* The smallest scale num/8 (num in 1..8) whose scaled image is still at least
 * target_w x target_h (so quality is not lost before a resize); 8 if none is smaller.
 * Targets <= 0 mean "no constraint" in that dimension. */
int sl_jpeg_pick_scale(int w, int h, int target_w, int target_h);

/* Decode to interleaved 8-bit pixels with `channels` = 1 (gray) or 3 (RGB) at scale num/8
 * (1..8, 8 = full size). out must hold sw*sh*channels bytes (cap is checked: SL_ERANGE). */
sl_status sl_jpeg_decode(sl_jpeg_decoder *d, const uint8_t *data, size_t len, int channels,
                         int scale_num, uint8_t *out, size_t cap, int *out_w, int *out_h);

/* Decode only the rectangle (x, y, w, h), given in scaled-image coordinates, at scale
 * num/8, using libjpeg's jpeg_crop_scanline / jpeg_skip_scanlines so that rows above and
 * below are skipped and columns outside are not color-converted. The result is exactly
 * the same pixels as a full decode at that scale cropped to the rectangle. out holds
 * w*h*channels bytes. SL_EINVAL if the rectangle is empty or outside the image. */
sl_status sl_jpeg_decode_crop(sl_jpeg_decoder *d, const uint8_t *data, size_t len, int channels,
                              int scale_num, int x, int y, int w, int h, uint8_t *out, size_t cap);

/* Encode 8-bit pixels (channels 1 or 3) at quality 1..100 with 4:2:0 subsampling for color
 * (grayscale for 1 channel). *out is malloc'd; the caller frees it. */
sl_status sl_jpeg_encode(const uint8_t *pixels, int w, int h, int channels, int quality,
                         uint8_t **out, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
