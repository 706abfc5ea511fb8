/* IEEE half and bfloat16 conversion, once for every module: the ring's fp16 allreduce
 * (whole gradient arrays, with F16C where the CPU has it), cast, batch padding, checkpoints
 * and the stats tool's peek (single values). Round to nearest, ties to even; NaN stays a
 * quiet NaN. Workload: arrays of millions of floats per step on the ring's path. */
#include <string.h>

#include "sluice/util.h"

uint16_t sl_f16_from_f32(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return sl__f16_bits(x);
}

float sl_f32_from_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0) {
        if (m == 0) x = sign;
        else { /* subnormal: normalise */
            e = 113;
            while (!(m & 0x400u)) { m <<= 1; e--; }
            x = sign | (e << 23) | ((m & 0x3ffu) << 13);
        }
    } else if (e == 31) {
        x = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0); /* NaN comes out quiet, as F16C makes it */
    } else {
        x = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(const float *in, uint16_t *out, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) out[i] = sl_f16_from_f32(in[i]);
}
__attribute__((target("avx,f16c"))) static void f16_to_f32_f16c(const uint16_t *in, float *out, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))));
    for (; i < n; i++) out[i] = sl_f32_from_f16(in[i]);
}
#include <cpuid.h>
/* CPUID.1:ECX F16C (bit 29), AVX (28), OSXSAVE (27), and the OS saving YMM state (XCR0). */
static int probe_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    if (!(c & (1u << 29)) || !(c & (1u << 28)) || !(c & (1u << 27))) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6) == 6;
}
static int have_f16c(void) {
    static _Atomic int v = -1; /* every thread computes the same value */
    int x = v;
    if (x < 0) v = x = probe_f16c();
    return x;
}
#else
static int have_f16c(void) { return 0; }
#define f32_to_f16_f16c(a, b, c) ((void)0)
#define f16_to_f32_f16c(a, b, c) ((void)0)
#endif

/* Tests flip this to compare the portable path with F16C. */
int sl__f16c_off;

void sl_f32_to_f16(const float *in, uint16_t *out, size_t n) {
    if (!sl__f16c_off && have_f16c()) { f32_to_f16_f16c(in, out, n); return; }
    for (size_t i = 0; i < n; i++) out[i] = sl_f16_from_f32(in[i]);
}

void sl_f16_to_f32(const uint16_t *in, float *out, size_t n) {
    if (!sl__f16c_off && have_f16c()) { f16_to_f32_f16c(in, out, n); return; }
    for (size_t i = 0; i < n; i++) out[i] = sl_f32_from_f16(in[i]);
}

uint16_t sl_bf16_from_f32(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return sl__bf16_bits(x);
}
