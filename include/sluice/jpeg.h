/* JPEG through TurboJPEG (and libjpeg's API for cropped decoding).
 *
 * Corrupt or truncated input yields SL_ECORRUPT with TurboJPEG's reason, never an abort or
 * a longjmp out of the library. Warnings TurboJPEG can recover from (premature end of data
 * in the entropy stream) are errors too, unless the decoder is told to be lenient.
 *
 * A decoder is one TurboJPEG handle plus scratch space: create one per thread. A decode
 * depends only on its own bytes and the decoder's settings, never on the images decoded
 * before it: a file that uses a quantization table it does not define is SL_ECORRUPT, and
 * one without its Huffman tables gets the standard ones (libjpeg would otherwise reuse the
 * last image's tables, JPEG's abbreviated streams).
 *
 * Size limit. A JPEG's header can declare up to 65500 x 65500 pixels in a few hundred
 * bytes, and a valid 10 MB file can hold a 30000 x 30000 image (900 million pixels: 2.7 GB
 * as RGB, more inside libjpeg for progressive files). So the decodes refuse, with
 * SL_ERANGE and before allocating anything, an image whose header declares more than the
 * decoder's max_pixels (width x height, at full size whatever the scale or crop asked
 * for), SL_JPEG_MAX_PIXELS_DEFAULT unless raised with sl_jpeg_decoder_set_max_pixels.
 * sl_jpeg_header has no limit: it only reads the header. */
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

/* Pillow's default MAX_IMAGE_PIXELS: a quarter gigabyte of 24-bit pixels (about 9459 x
 * 9459), far above any photo a training set holds. */
#define SL_JPEG_MAX_PIXELS_DEFAULT ((int64_t)89478485)

sl_status sl_jpeg_decoder_new(sl_jpeg_decoder **out);
void sl_jpeg_decoder_free(sl_jpeg_decoder *d); /* NULL is a no-op */

/* Lenient decoders accept recoverable damage (TurboJPEG / libjpeg warnings such as a
 * truncated entropy stream) and return SL_OK with the pixels they could recover (the rest
 * grey); strict ones (the default) return SL_ECORRUPT. */
void sl_jpeg_decoder_set_lenient(sl_jpeg_decoder *d, bool lenient);

/* Speed against fidelity, for every later decode (tf.io.decode_jpeg's dct_method and
 * fancy_upscaling): fast_dct uses libjpeg's fast integer IDCT (JDCT_IFAST, TurboJPEG's
 * TJFLAG_FASTDCT) instead of the accurate one; fancy_upsampling false doubles subsampled
 * chroma by repeating samples (merged with the colour conversion) instead of the smoothing
 * triangle filter (TJFLAG_FASTUPSAMPLE). Both change pixels by a few levels where chroma
 * or detail changes fast. Default: accurate, fancy (false, true). Full, scaled and cropped
 * decodes follow the same settings, so a crop still equals that rectangle of the full
 * decode. */
void sl_jpeg_decoder_set_speed(sl_jpeg_decoder *d, bool fast_dct, bool fancy_upsampling);

/* The most pixels (width x height as the header declares) the decodes accept; <= 0 means
 * SL_JPEG_MAX_PIXELS_DEFAULT. */
void sl_jpeg_decoder_set_max_pixels(sl_jpeg_decoder *d, int64_t max_pixels);
int64_t sl_jpeg_decoder_max_pixels(const sl_jpeg_decoder *d);

/* Read the header only. SL_ECORRUPT if it is not a JPEG or the header is damaged (*out is
 * zeroed then; the decoder stays usable for the next file). subsamp is -1 for a valid file
 * whose subsampling has no TJSAMP_* name. */
sl_status sl_jpeg_header(sl_jpeg_decoder *d, const uint8_t *data, size_t len, sl_jpeg_info *out);

/* Scaled size of a w x h image at scale num/8 (TurboJPEG rounds up: ceil(w*num/8)). */
void sl_jpeg_scaled_size(int w, int h, int num, int *sw, int *sh);

/* The smallest scale num/8, num in {1, 2, 4, 8}, whose scaled image is still at least
 * target_w x target_h (so the resize after it only shrinks or copies: no detail is made up);
 * 8 if none is smaller. Targets <= 0 mean "no constraint" in that dimension.
 * Only those four: libjpeg-turbo has SIMD IDCTs for them (4/8 and 2/8 luma, and 8x8 for the
 * 4:2:0 chroma, which it scales up by IDCT instead of upsampling), while for 3/8, 5/8, 6/8
 * and 7/8 it runs generic C IDCTs at that size for luma and twice it (10x10 .. 14x14) for
 * chroma, which are slower than decoding at full size. Measured (libjpeg-turbo 2.1.5,
 * x86-64, one core, a 540x358 quality-90 4:2:0 photo, CPU time per whole-image decode):
 * 8/8 960 us, 7/8 1510, 6/8 1330, 5/8 1200, 4/8 870, 3/8 890, 2/8 790, 1/8 740; entropy
 * decoding alone (every row skipped) 680 us. So for such photos the bulk of a decode is
 * the Huffman pass, which no scale avoids: what saves time is not decoding the rows below a
 * crop (sl_jpeg_decode_crop), and the IDCT, upsampling and color conversion of the columns
 * outside it. (sl_jpeg_decode and sl_jpeg_decode_crop accept any num 1..8.) */
int sl_jpeg_pick_scale(int w, int h, int target_w, int target_h);

/* Decode to interleaved 8-bit pixels with `channels` = 1 (gray) or 3 (RGB) at scale num/8
 * (1..8, 8 = full size). out must hold sw*sh*channels bytes (cap is checked: SL_ERANGE).
 * The pixels equal djpeg's defaults (islow IDCT, fancy upsampling, `djpeg -scale num/8`;
 * `-grayscale` for channels 1: the Y plane of a color image). CMYK/YCCK files are read as
 * Adobe (inverted) CMYK and converted to RGB (R = C*K/255, ...), and to gray from that RGB.
 * Errors: SL_EINVAL (arguments), SL_ECORRUPT (not a JPEG, damaged, or truncated: the
 * message has TurboJPEG's reason), SL_ERANGE (the image has more pixels than the decoder's
 * max_pixels: the message gives both and how to raise the limit; or cap too small),
 * SL_ENOMEM. On failure
 * *out_w and *out_h are 0 and out holds unspecified bytes. */
sl_status sl_jpeg_decode(sl_jpeg_decoder *d, const uint8_t *data, size_t len, int channels,
                         int scale_num, uint8_t *out, size_t cap, int *out_w, int *out_h);

/* Decode only the rectangle (x, y, w, h), given in scaled-image coordinates, at scale
 * num/8, using libjpeg's jpeg_crop_scanline / jpeg_skip_scanlines so that rows above and
 * below are skipped and columns outside are not color-converted. The result is exactly
 * the same pixels as a full decode at that scale cropped to the rectangle. out holds
 * w*h*channels bytes. SL_EINVAL if the rectangle is empty or outside the image. */
sl_status sl_jpeg_decode_crop(sl_jpeg_decoder *d, const uint8_t *data, size_t len, int channels,
                              int scale_num, int x, int y, int w, int h, uint8_t *out, size_t cap);

/* The rectangle of sl_jpeg_decode_crop, left where the decoder put it instead of copied
 * out: *px points at its top-left pixel and its rows are *stride bytes apart (the rows
 * decoded are a little wider than the rectangle). The pixels are the same as
 * sl_jpeg_decode_crop's and stay valid until the next call on d or sl_jpeg_decoder_free.
 * For a caller that reads them once (a resize), this saves a copy of the rectangle. Same
 * errors as sl_jpeg_decode_crop (no SL_ERANGE for a buffer); on failure *px is NULL and
 * *stride 0. */
sl_status sl_jpeg_decode_crop_view(sl_jpeg_decoder *d, const uint8_t *data, size_t len,
                                   int channels, int scale_num, int x, int y, int w, int h,
                                   const uint8_t **px, size_t *stride);
/* (Also: SL_ERANGE if cap < w*h*channels or the whole image is over max_pixels, SL_ECORRUPT
 * as for sl_jpeg_decode. Damage in the rows below the rectangle is not seen, since they are
 * never decoded: the decode stops after the rectangle's last row, as
 * tf.image.decode_and_crop_jpeg does. A progressive file is read whole before its first row
 * is made, so damage anywhere in it is an error.) */

/* Encode 8-bit pixels (channels 1 or 3) at quality 1..100 with 4:2:0 subsampling for color
 * (grayscale for 1 channel). *out is malloc'd; the caller frees it. */
sl_status sl_jpeg_encode(const uint8_t *pixels, int w, int h, int channels, int quality,
                         uint8_t **out, size_t *len);
/* Returns SL_OK, or SL_EINVAL (NULL, size outside 1..65500, channels, quality, subsamp),
 * SL_ENOMEM, SL_EINTERNAL; on failure *out is NULL and *len 0. */

/* Like sl_jpeg_encode with the chroma subsampling chosen: a TurboJPEG TJSAMP_* value other
 * than TJSAMP_GRAY (ignored for 1 channel, which is always grayscale). */
sl_status sl_jpeg_encode2(const uint8_t *pixels, int w, int h, int channels, int quality,
                          int subsamp, uint8_t **out, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
