/* CRC32C (Castagnoli), as TFRecord framing uses it.
 *
 * Four implementations give identical answers: a portable slicing-by-8 table version, the
 * SSE4.2 crc32 instruction (three interleaved streams), and carry-less multiply folding
 * for long buffers on 128-bit (PCLMULQDQ) or AVX-512 (VPCLMULQDQ) registers. sl_crc32c picks the fastest the CPU has, once, at first use. */
#ifndef SLUICE_CRC32C_H
#define SLUICE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sl_crc32c_impl {
    SL_CRC32C_PORTABLE = 0,
    SL_CRC32C_SSE42 = 1,  /* crc32 instruction */
    SL_CRC32C_CLMUL = 2,  /* crc32 instruction + pclmulqdq folding */
    SL_CRC32C_VPCLMUL = 3, /* AVX-512 vpclmulqdq folding + crc32 instruction */
    SL_CRC32C_IMPL_COUNT
} sl_crc32c_impl;

/* Extend `crc` (0 to start) over n bytes. sl_crc32c(0, "123456789", 9) == 0xe3069283. */
uint32_t sl_crc32c(uint32_t crc, const void *data, size_t n);

/* The same with a named implementation; returns 0 and sets *ok = 0 if this CPU lacks it
 * (ok may be NULL). */
uint32_t sl_crc32c_with(sl_crc32c_impl impl, uint32_t crc, const void *data, size_t n, int *ok);

/* Whether this CPU can run `impl`. */
int sl_crc32c_available(sl_crc32c_impl impl);

/* Which implementation sl_crc32c uses, and its name ("portable", "sse4.2", "clmul",
 * "vpclmul"). */
sl_crc32c_impl sl_crc32c_active(void);
const char *sl_crc32c_impl_name(sl_crc32c_impl impl);

/* TFRecord's masking: rotate right by 15 bits, then add 0xa282ead8. */
static inline uint32_t sl_crc32c_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
static inline uint32_t sl_crc32c_unmask(uint32_t masked) {
    uint32_t rot = masked - 0xa282ead8u;
    return (rot >> 17) | (rot << 15);
}

#ifdef __cplusplus
}
#endif
#endif
