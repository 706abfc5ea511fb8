/* libFuzzer target for the compressed-gradient decoder (dist/compress.c, sluice/compress.h).
 * Input: byte 0 picks the codec the receiver expects (fp16, int8, sign, topk at 1%, 10% or
 * 100%), bytes 1-2 the element count (0..65535), the rest is the payload. Promises checked:
 * the decoder answers SL_OK or SL_ECORRUPT and nothing else; validation alone and decoding
 * agree; on SL_ECORRUPT the output is untouched; on SL_OK the payload had exactly
 * sl_compress_size bytes and every decoded value is finite; and a payload re-encoded from
 * fresh values always decodes. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/compress.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    static const sl_compress_spec specs[] = {
        {SL_COMPRESS_FP16, 0}, {SL_COMPRESS_INT8, 0},  {SL_COMPRESS_SIGN, 0},
        {SL_COMPRESS_TOPK, 0.01}, {SL_COMPRESS_TOPK, 0.1}, {SL_COMPRESS_TOPK, 1.0},
    };
    const sl_compress_spec *sp = &specs[data[0] % 6];
    size_t count = (size_t)data[1] | (size_t)data[2] << 8;
    const uint8_t *p = data + 3;
    size_t len = size - 3;
    float *acc = malloc((count ? count : 1) * sizeof *acc);
    for (size_t i = 0; i < count; i++) acc[i] = 0.5f;
    sl_status c = sl_compress_check(sp, p, len, count, "fuzz");
    sl_status s = sl_compress_decode_add(sp, p, len, count, acc, "fuzz");
    if (c != s) __builtin_trap();
    if (s != SL_OK && s != SL_ECORRUPT) __builtin_trap();
    if (s == SL_ECORRUPT) {
        for (size_t i = 0; i < count; i++)
            if (acc[i] != 0.5f) __builtin_trap();
    } else {
        if (len != sl_compress_size(sp, count)) __builtin_trap();
        for (size_t i = 0; i < count; i++)
            if (!isfinite(acc[i])) __builtin_trap();
        /* what decoded, encoded again, decodes again */
        size_t cap = sl_compress_size(sp, count), l2;
        uint8_t *buf = malloc(cap);
        if (sl_compress_encode(sp, acc, count, buf, cap, &l2) || l2 != cap ||
            sl_compress_check(sp, buf, l2, count, "again"))
            __builtin_trap();
        free(buf);
    }
    free(acc);
    return 0;
}
