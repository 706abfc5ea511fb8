/* CRC32C (Castagnoli), the checksum of TFRecord framing.
 *
 * Workload: every record read is checksummed twice (8-byte length, then the payload), so
 * both tiny buffers (8 bytes, millions per second) and long ones (100 KB to MBs of image
 * bytes at memory bandwidth) matter. Four implementations, identical answers:
 *   - portable slicing-by-8 tables (any CPU),
 *   - SSE4.2 crc32 instruction, three interleaved streams on long buffers (the instruction
 *     has a latency of 3 cycles and a throughput of 1, so three independent chains keep it
 *     busy), combined by multiplying by x^(8n) mod P with precomputed tables,
 *   - PCLMULQDQ folding of 64-byte blocks into 128-bit remainders on one part of each
 *     11.5 KB block while three crc32 chains run over the rest (the two use different
 *     execution units), the crc32 instruction doing the final reduction and short buffers,
 *   - VPCLMULQDQ on AVX-512 registers: four 64-byte accumulators fold 256 bytes an
 *     iteration (16 carry-less products at once), then fold into one 16-byte remainder
 *     that the crc32 instruction finishes. Its rate (~4x the three crc32 chains in cache)
 *     leaves a mapped file's checksum bound by memory, not by the CRC.
 * The choice is made once, at first use (pthread_once: ThreadSanitizer sees its ordering,
 * not glibc's C11 call_once's), from __builtin_cpu_supports (and the vendor: see
 * clmul_pays); the build needs no -msse4.2 because the fast paths carry target attributes.
 *
 * All internal state is the "raw" CRC (no pre/post inversion), so that CRC is linear over
 * GF(2): raw(s, A||B) = raw(s, A) * x^(8|B|) xor raw(0, B). Bits are reflected: bit 31 of
 * a 32-bit value is the coefficient of x^0, bit 0 that of x^31. */
#include "sluice/crc32c.h"
#include "sluice/util.h"

#include <stdint.h>
#include <string.h>
#include <pthread.h>

#if defined(__x86_64__)
#define SL_CRC_X86 1
#include <immintrin.h>
#include <nmmintrin.h>
#include <wmmintrin.h>
#endif

#define POLY 0x82f63b78u /* reflected Castagnoli polynomial */

static uint32_t tab8[8][256];      /* slicing-by-8 */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static sl_crc32c_impl active_impl; /* written once inside pthread_once */

/* ---- GF(2) arithmetic mod P, reflected ---------------------------------------------- */

/* a * b mod P. */
static uint32_t gf_mul(uint32_t a, uint32_t b) {
    uint32_t p = 0;
    for (int d = 0; d < 32; d++) {
        if (a & (0x80000000u >> d)) p ^= b;
        b = (b & 1) ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

/* x^n mod P, by square-and-multiply so init stays cheap for any n. */
static uint32_t gf_xpow(uint64_t n) {
    uint32_t result = 0x80000000u; /* x^0 */
    uint32_t sq = 0x40000000u;     /* x^1 */
    while (n) {
        if (n & 1) result = gf_mul(result, sq);
        sq = gf_mul(sq, sq);
        n >>= 1;
    }
    return result;
}

/* ---- portable ----------------------------------------------------------------------- */

static uint32_t crc_portable(uint32_t raw, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        raw = (raw >> 8) ^ tab8[0][(raw ^ *p++) & 0xff];
        n--;
    }
    while (n >= 8) {
        uint64_t w = sl_load_le64(p) ^ raw;
        raw = tab8[7][w & 0xff] ^ tab8[6][(w >> 8) & 0xff] ^ tab8[5][(w >> 16) & 0xff] ^
              tab8[4][(w >> 24) & 0xff] ^ tab8[3][(w >> 32) & 0xff] ^
              tab8[2][(w >> 40) & 0xff] ^ tab8[1][(w >> 48) & 0xff] ^ tab8[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) raw = (raw >> 8) ^ tab8[0][(raw ^ *p++) & 0xff];
    return raw;
}

#ifdef SL_CRC_X86
/* ---- SSE4.2 ------------------------------------------------------------------------- */

/* Block sizes of the three-stream loop: LONG for big buffers, SHORT for the rest. */
#define LONG_BLK 8192
#define SHORT_BLK 256
#define PREFETCH 1024 /* bytes ahead of each stream */

/* shift_tab[k][b][v]: raw CRC value (v << 8b) advanced over blk_k zero bytes, i.e. times
 * x^(8*blk) mod P, split per byte so a shift is four lookups. */
static uint32_t shift_long[4][256], shift_short[4][256];

static void make_shift(uint32_t t[4][256], size_t blk) {
    uint32_t m = gf_xpow(8 * (uint64_t)blk);
    for (int b = 0; b < 4; b++)
        for (uint32_t v = 0; v < 256; v++) t[b][v] = gf_mul(v << (8 * b), m);
}

static inline uint32_t shift(uint32_t t[4][256], uint32_t c) {
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
}

/* Loads are unaligned (memcpy): aligning first would cost a byte-wide step (3 cycles of
 * latency each) for up to 7 bytes, as much as the rest of a 100-byte record; the tail takes
 * 4-, 2- and 1-byte steps for the same reason. */
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t raw, const uint8_t *p,
                                                            size_t n) {
    uint64_t c0 = raw;
    while (n >= 3 * LONG_BLK) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *end = p + LONG_BLK;
        do {
            /* Buffers come from DRAM (a page cache mapping) more often than from cache:
             * the crc chains issue loads too slowly for the hardware prefetcher alone. */
            _mm_prefetch((const char *)p + PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)p + LONG_BLK + PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)p + 2 * LONG_BLK + PREFETCH, _MM_HINT_T0);
            for (int k = 0; k < 64; k += 8) {
                uint64_t a, b, c;
                memcpy(&a, p + k, 8);
                memcpy(&b, p + k + LONG_BLK, 8);
                memcpy(&c, p + k + 2 * LONG_BLK, 8);
                c0 = _mm_crc32_u64(c0, a);
                c1 = _mm_crc32_u64(c1, b);
                c2 = _mm_crc32_u64(c2, c);
            }
            p += 64;
        } while (p < end);
        c0 = shift(shift_long, (uint32_t)c0) ^ c1;
        c0 = shift(shift_long, (uint32_t)c0) ^ c2;
        p += 2 * LONG_BLK;
        n -= 3 * LONG_BLK;
    }
    while (n >= 3 * SHORT_BLK) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *end = p + SHORT_BLK;
        do {
            uint64_t a, b, c;
            memcpy(&a, p, 8);
            memcpy(&b, p + SHORT_BLK, 8);
            memcpy(&c, p + 2 * SHORT_BLK, 8);
            c0 = _mm_crc32_u64(c0, a);
            c1 = _mm_crc32_u64(c1, b);
            c2 = _mm_crc32_u64(c2, c);
            p += 8;
        } while (p < end);
        c0 = shift(shift_short, (uint32_t)c0) ^ c1;
        c0 = shift(shift_short, (uint32_t)c0) ^ c2;
        p += 2 * SHORT_BLK;
        n -= 3 * SHORT_BLK;
    }
    for (; n >= 8; p += 8, n -= 8) c0 = _mm_crc32_u64(c0, sl_load_le64(p));
    raw = (uint32_t)c0;
    if (n & 4) {
        raw = _mm_crc32_u32(raw, sl_load_le32(p));
        p += 4;
    }
    if (n & 2) {
        raw = _mm_crc32_u16(raw, sl_load_le16(p));
        p += 2;
    }
    if (n & 1) raw = _mm_crc32_u8(raw, *p);
    return raw;
}

/* ---- PCLMULQDQ folding -------------------------------------------------------------- */

/* A 16-byte block loaded little endian holds bits whose degree falls from 127 (bit 0) to
 * 0 (bit 127): its low qword L carries the high-degree half. Moving the block D bytes
 * further into the message multiplies it by x^(8D); L*x^(8D+64) + H*x^(8D) mod P is two
 * 64x32 carry-less products of < 96 bits, which fit in the block they are xored onto.
 * clmul of reflected operands yields the product one degree short (bit k is x^(126-k)), so
 * the constants are x^(8D+64-33) and x^(8D-33) placed in the low 32 bits (a 32-bit value
 * in the low half of a qword stands for the polynomial times x^32). */
static uint64_t fold64_lo, fold64_hi, fold16_lo, fold16_hi;

static void make_fold(size_t d, uint64_t *lo, uint64_t *hi) {
    *lo = gf_xpow(8 * (uint64_t)d + 64 - 33);
    *hi = gf_xpow(8 * (uint64_t)d - 33);
}

__attribute__((target("sse4.2,pclmul"))) static inline __m128i fold(__m128i x, __m128i k,
                                                                    __m128i next) {
    __m128i a = _mm_clmulepi64_si128(x, k, 0x00); /* L * k_lo */
    __m128i b = _mm_clmulepi64_si128(x, k, 0x11); /* H * k_hi */
    return _mm_xor_si128(_mm_xor_si128(a, b), next);
}

/* The hybrid block: one region folded by pclmulqdq while three crc32 chains run over the
 * other three, in the same loop, so both execution units are busy (pclmulqdq alone is only
 * as fast as three crc32 chains on Intel, and half as fast on AMD Zen). Each iteration
 * folds 64 bytes and feeds 40 bytes to each chain (the ratio suits both vendors). */
#define HY_ITERS 64
#define HY_FOLD (64 * HY_ITERS)                   /* 4096 */
#define HY_CRC (40 * HY_ITERS)                    /* 2560 per chain */
#define HY_BLK (HY_FOLD + 3 * HY_CRC)             /* 11776 */
static uint32_t shift_hy1[4][256], shift_hy2[4][256], shift_hy3[4][256];

__attribute__((target("sse4.2,pclmul"))) static uint32_t crc_clmul(uint32_t raw,
                                                                   const uint8_t *p,
                                                                   size_t n) {
    if (n < HY_BLK) return crc_sse42(raw, p, n);
    const __m128i k64 = _mm_set_epi64x((long long)fold64_hi, (long long)fold64_lo);
    const __m128i k16 = _mm_set_epi64x((long long)fold16_hi, (long long)fold16_lo);
    while (n >= HY_BLK) {
        const uint8_t *f = p, *a = p + HY_FOLD, *b = a + HY_CRC, *c = b + HY_CRC;
        __m128i x0 = _mm_loadu_si128((const __m128i *)f);
        __m128i x1 = _mm_loadu_si128((const __m128i *)(f + 16));
        __m128i x2 = _mm_loadu_si128((const __m128i *)(f + 32));
        __m128i x3 = _mm_loadu_si128((const __m128i *)(f + 48));
        /* The running state xors into the first four message bytes. */
        x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)raw));
        f += 64;
        uint64_t c1 = 0, c2 = 0, c3 = 0;
        for (int it = 0; it < HY_ITERS; it++) {
            _mm_prefetch((const char *)f + PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)a + PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)b + PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)c + PREFETCH, _MM_HINT_T0);
            if (it) {
                x0 = fold(x0, k64, _mm_loadu_si128((const __m128i *)f));
                x1 = fold(x1, k64, _mm_loadu_si128((const __m128i *)(f + 16)));
                x2 = fold(x2, k64, _mm_loadu_si128((const __m128i *)(f + 32)));
                x3 = fold(x3, k64, _mm_loadu_si128((const __m128i *)(f + 48)));
                f += 64;
            }
            for (int k = 0; k < 40; k += 8) {
                uint64_t wa, wb, wc;
                memcpy(&wa, a + k, 8);
                memcpy(&wb, b + k, 8);
                memcpy(&wc, c + k, 8);
                c1 = _mm_crc32_u64(c1, wa);
                c2 = _mm_crc32_u64(c2, wb);
                c3 = _mm_crc32_u64(c3, wc);
            }
            a += 40;
            b += 40;
            c += 40;
        }
        x1 = fold(x0, k16, x1);
        x2 = fold(x1, k16, x2);
        x3 = fold(x2, k16, x3);
        /* What is left is congruent to the folded region: checksum its 16 bytes from 0. */
        uint64_t cf = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x3));
        cf = _mm_crc32_u64(cf, (uint64_t)_mm_extract_epi64(x3, 1));
        raw = shift(shift_hy3, (uint32_t)cf) ^ shift(shift_hy2, (uint32_t)c1) ^
              shift(shift_hy1, (uint32_t)c2) ^ (uint32_t)c3;
        p += HY_BLK;
        n -= HY_BLK;
    }
    return crc_sse42(raw, p, n);
}

/* ---- VPCLMULQDQ on 512-bit registers ------------------------------------------------ */

/* Each 128-bit lane of a zmm register folds like `fold` above. */
#define WIDE_MIN 1024 /* shorter buffers: crc_sse42 (the setup and reduction cost ~40 cycles) */
static uint64_t fold256_lo, fold256_hi;

__attribute__((target("avx512f,vpclmulqdq"))) static inline __m512i fold512(__m512i x, __m512i k,
                                                                            __m512i next) {
    __m512i a = _mm512_clmulepi64_epi128(x, k, 0x00);
    __m512i b = _mm512_clmulepi64_epi128(x, k, 0x11);
    return _mm512_ternarylogic_epi64(a, b, next, 0x96); /* a ^ b ^ next */
}

__attribute__((target("avx512f,vpclmulqdq,sse4.2,pclmul"))) static uint32_t
crc_vpclmul(uint32_t raw, const uint8_t *p, size_t n) {
    if (n < WIDE_MIN) return crc_sse42(raw, p, n);
    const __m512i k256 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)fold256_hi, (long long)fold256_lo));
    const __m512i k64 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)fold64_hi, (long long)fold64_lo));
    const __m128i k16 = _mm_set_epi64x((long long)fold16_hi, (long long)fold16_lo);
    __m512i x0 = _mm512_loadu_si512(p);
    __m512i x1 = _mm512_loadu_si512(p + 64);
    __m512i x2 = _mm512_loadu_si512(p + 128);
    __m512i x3 = _mm512_loadu_si512(p + 192);
    /* The running state xors into the first four message bytes. */
    x0 = _mm512_xor_si512(x0, _mm512_inserti32x4(_mm512_setzero_si512(), _mm_cvtsi32_si128((int)raw), 0));
    p += 256;
    n -= 256;
    while (n >= 256) {
        x0 = fold512(x0, k256, _mm512_loadu_si512(p));
        x1 = fold512(x1, k256, _mm512_loadu_si512(p + 64));
        x2 = fold512(x2, k256, _mm512_loadu_si512(p + 128));
        x3 = fold512(x3, k256, _mm512_loadu_si512(p + 192));
        p += 256;
        n -= 256;
    }
    /* Four consecutive 64-byte accumulators into one, then its four lanes into one. */
    x1 = fold512(x0, k64, x1);
    x2 = fold512(x1, k64, x2);
    x3 = fold512(x2, k64, x3);
    __m128i r = _mm512_castsi512_si128(x3);
    r = fold(r, k16, _mm512_extracti32x4_epi32(x3, 1));
    r = fold(r, k16, _mm512_extracti32x4_epi32(x3, 2));
    r = fold(r, k16, _mm512_extracti32x4_epi32(x3, 3));
    /* What is left is congruent to the folded region: checksum its 16 bytes from 0. */
    uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(r));
    c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(r, 1));
    return crc_sse42((uint32_t)c, p, n);
}
#endif /* SL_CRC_X86 */

/* ---- selection ---------------------------------------------------------------------- */

static int cpu_has(sl_crc32c_impl impl) {
#ifdef SL_CRC_X86
    __builtin_cpu_init();
    switch (impl) {
    case SL_CRC32C_PORTABLE: return 1;
    case SL_CRC32C_SSE42: return __builtin_cpu_supports("sse4.2") != 0;
    case SL_CRC32C_CLMUL:
        return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul");
    case SL_CRC32C_VPCLMUL:
        return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul") &&
               __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
    default: return 0;
    }
#else
    return impl == SL_CRC32C_PORTABLE;
#endif
}

/* Whether the hybrid beats three crc32 chains. Intel issues one pclmulqdq per cycle on a
 * port of its own, so the hybrid adds the folding on top of the chains. AMD Zen issues
 * pclmulqdq at half that rate: on an EPYC, checksumming 100 KB records from DRAM (the
 * mmap workload) ran at ~9.5-12.7 GB/s hybrid against ~13-15 GB/s for the chains alone,
 * and level in cache, so there the chains win. */
static int clmul_pays(void) {
#ifdef SL_CRC_X86
    return __builtin_cpu_is("intel") != 0;
#else
    return 0;
#endif
}

static void init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        tab8[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            tab8[t][i] = (tab8[t - 1][i] >> 8) ^ tab8[0][tab8[t - 1][i] & 0xff];
#ifdef SL_CRC_X86
    make_shift(shift_long, LONG_BLK);
    make_shift(shift_short, SHORT_BLK);
    make_fold(64, &fold64_lo, &fold64_hi);
    make_fold(16, &fold16_lo, &fold16_hi);
    make_fold(256, &fold256_lo, &fold256_hi);
    make_shift(shift_hy1, HY_CRC);
    make_shift(shift_hy2, 2 * HY_CRC);
    make_shift(shift_hy3, 3 * HY_CRC);
#endif
    active_impl = cpu_has(SL_CRC32C_VPCLMUL)                 ? SL_CRC32C_VPCLMUL
                  : cpu_has(SL_CRC32C_CLMUL) && clmul_pays() ? SL_CRC32C_CLMUL
                  : cpu_has(SL_CRC32C_SSE42)               ? SL_CRC32C_SSE42
                                                           : SL_CRC32C_PORTABLE;
}

static uint32_t run_impl(sl_crc32c_impl impl, uint32_t crc, const void *data, size_t n) {
    uint32_t raw = ~crc;
    switch (impl) {
#ifdef SL_CRC_X86
    case SL_CRC32C_VPCLMUL: raw = crc_vpclmul(raw, data, n); break;
    case SL_CRC32C_CLMUL: raw = crc_clmul(raw, data, n); break;
    case SL_CRC32C_SSE42: raw = crc_sse42(raw, data, n); break;
#endif
    default: raw = crc_portable(raw, data, n); break;
    }
    return ~raw;
}

uint32_t sl_crc32c(uint32_t crc, const void *data, size_t n) {
    pthread_once(&init_once, init);
    if (n == 0) return crc;
    return run_impl(active_impl, crc, data, n);
}

uint32_t sl_crc32c_with(sl_crc32c_impl impl, uint32_t crc, const void *data, size_t n,
                        int *ok) {
    pthread_once(&init_once, init);
    if ((unsigned)impl >= SL_CRC32C_IMPL_COUNT || !cpu_has(impl)) {
        if (ok) *ok = 0;
        return 0;
    }
    if (ok) *ok = 1;
    if (n == 0) return crc;
    return run_impl(impl, crc, data, n);
}

int sl_crc32c_available(sl_crc32c_impl impl) {
    if ((unsigned)impl >= SL_CRC32C_IMPL_COUNT) return 0;
    return cpu_has(impl);
}

sl_crc32c_impl sl_crc32c_active(void) {
    pthread_once(&init_once, init);
    return active_impl;
}

const char *sl_crc32c_impl_name(sl_crc32c_impl impl) {
    switch (impl) {
    case SL_CRC32C_PORTABLE: return "portable";
    case SL_CRC32C_SSE42: return "sse4.2";
    case SL_CRC32C_CLMUL: return "clmul";
    case SL_CRC32C_VPCLMUL: return "vpclmul";
    default: return "unknown";
    }
}
