/* libFuzzer target for formats/jpeg.c: header, then (for images small enough to decode
 * quickly) a full decode, a scaled decode and a cropped decode, strict or lenient. Any
 * status is fine except a crash, a sanitizer report, or an unexpected code: outside bytes
 * may only produce SL_OK or SL_ECORRUPT. Seeds: tests/fuzz/seeds/jpeg/. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/jpeg.h"

/* Bounded so one input cannot take seconds or hundreds of MB. */
#define MAX_PIXELS (1024 * 1024)

static sl_jpeg_decoder *dec;

static void check(sl_status s, const char *what) {
    if (s != SL_OK && s != SL_ECORRUPT) {
        fprintf(stderr, "%s: unexpected status %d: %s\n", what, s, sl_errmsg());
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dec && sl_jpeg_decoder_new(&dec) != SL_OK)
        abort();
    /* the last byte steers the options; the rest is the file */
    uint8_t knob = size ? data[size - 1] : 0;
    sl_jpeg_decoder_set_lenient(dec, knob & 1);
    /* the speed settings (fast IDCT, merged chroma upsampling), each on every other input
     * length, so that a file and its one-byte-longer mutations reach both */
    sl_jpeg_decoder_set_speed(dec, size & 1, !((size >> 1) & 1));
    sl_jpeg_info info;
    sl_status s = sl_jpeg_header(dec, data, size, &info);
    check(s, "header");
    if (s)
        return 0;
    if (info.width <= 0 || info.height <= 0 || (int64_t)info.width * info.height > MAX_PIXELS)
        return 0;
    bool lenient = knob & 1;
    if (lenient && (int64_t)info.width * info.height > 256 * 256) {
        lenient = false; /* lenient decodes of big garbage are slow */
        sl_jpeg_decoder_set_lenient(dec, false);
    }
    int channels = (knob & 2) ? 1 : 3;
    size_t cap = (size_t)info.width * info.height * 3;
    uint8_t *out = malloc(cap);
    if (!out)
        return 0;
    int w, h;
    sl_status sd = sl_jpeg_decode(dec, data, size, channels, 8, out, cap, &w, &h);
    check(sd, "decode");
    /* a decode depends on its own bytes only: a decoder that has seen no image before gives
     * the same outcome and pixels (libjpeg keeps an image's tables for the next one) */
    sl_jpeg_decoder *fresh;
    uint8_t *again = malloc(cap);
    if (!again || sl_jpeg_decoder_new(&fresh) != SL_OK)
        abort();
    sl_jpeg_decoder_set_lenient(fresh, lenient);
    sl_jpeg_decoder_set_speed(fresh, size & 1, !((size >> 1) & 1));
    int w2, h2;
    sl_status sf = sl_jpeg_decode(fresh, data, size, channels, 8, again, cap, &w2, &h2);
    if (sf != sd || (sd == SL_OK && memcmp(out, again, (size_t)w * h * channels)))
        abort();
    sl_jpeg_decoder_free(fresh);
    free(again);
    int num = 1 + ((knob >> 2) & 7);
    check(sl_jpeg_decode(dec, data, size, 4 - channels, num, out, cap, &w, &h), "scaled");
    int sw, sh;
    sl_jpeg_scaled_size(info.width, info.height, num, &sw, &sh);
    int x = sw / 3, y = (sh * (knob >> 5)) / 8;
    int cw = sw - x > 1 ? (sw - x) / 2 + 1 : 1, ch = sh - y > 1 ? (sh - y) / 2 + 1 : 1;
    if (x + cw <= sw && y + ch <= sh) {
        sl_status sc = sl_jpeg_decode_crop(dec, data, size, channels, num, x, y, cw, ch, out, cap);
        check(sc, "crop");
        /* the same rectangle as a view: same outcome and, when it succeeds, the same pixels */
        const uint8_t *view;
        size_t stride;
        sl_status sv = sl_jpeg_decode_crop_view(dec, data, size, channels, num, x, y, cw, ch, &view, &stride);
        check(sv, "crop view");
        if ((sc == SL_OK) != (sv == SL_OK))
            abort();
        if (sv == SL_OK) /* out still holds the crop's pixels; view is the decoder's */
            for (int r = 0; r < ch; r++)
                if (memcmp(view + (size_t)r * stride, out + (size_t)r * cw * channels, (size_t)cw * channels))
                    abort();
    }
    free(out);
    return 0;
}
