/* core/half.c and the inline helpers of sluice/util.h: every half and bfloat16 value
 * round-trips through float exactly (NaNs stay NaNs of the same sign), exact values at the
 * edges (largest finite, subnormals, ties to even, overflow to infinity), the array calls
 * agree with the scalar ones, little-endian loads and stores, and splitmix64's reference
 * outputs. */
#include <math.h>
#include <stdbool.h>

#include "sluice/util.h"
#include "test.h"

/* the bits of a float and back (a union: C11 reads the other member as those bytes) */
static uint32_t fbits(float f) { return (union { float f; uint32_t u; }){.f = f}.u; }
static float bitsf(uint32_t x) { return (union { uint32_t u; float f; }){.u = x}.f; }

TEST(test_f16_all_round_trip) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sl_f32_from_f16((uint16_t)h);
        uint16_t back = sl_f16_from_f32(f);
        bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (nan) {
            /* NaN: still NaN, same sign, quiet bit set, payload kept */
            if (!isnan(f) || back != (uint16_t)(h | 0x200)) bad++;
        } else if (back != h) {
            if (bad++ < 5) FAILF("half 0x%04x -> %a -> 0x%04x", h, (double)f, back);
        }
    }
    ASSERT_EQ(bad, 0);
}

TEST(test_f16_exact_values) {
    struct { float f; uint16_t h; } cases[] = {
        {0.0f, 0x0000}, {-0.0f, 0x8000}, {1.0f, 0x3c00}, {-2.0f, 0xc000}, {0.5f, 0x3800},
        {65504.0f, 0x7bff}, {65519.0f, 0x7bff}, {65520.0f, 0x7c00}, {1e10f, 0x7c00},
        {-INFINITY, 0xfc00}, {INFINITY, 0x7c00}, {0x1p-14f, 0x0400}, {0x1p-24f, 0x0001},
        {0x1p-25f, 0x0000},        /* tie between 0 and the smallest subnormal: even (0) */
        {0x1.8p-24f, 0x0002},      /* 1.5 subnormal steps: tie, to even (2) */
        {0x1.4p-24f, 0x0001},      /* 1.25 steps: down */
        {1.0f + 0x1p-11f, 0x3c00}, /* tie: even mantissa (1.0) */
        {1.0f + 0x3p-11f, 0x3c02}, /* tie: even mantissa (up) */
        {1.0f / 3, 0x3555}, {0.1f, 0x2e66}, {-65504.0f, 0xfbff},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t h = sl_f16_from_f32(cases[i].f);
        if (h != cases[i].h) FAILF("%a -> 0x%04x, expected 0x%04x", (double)cases[i].f, h, cases[i].h);
    }
    ASSERT_EQ(sl_f16_from_f32(bitsf(0x7fc00000u)), 0x7e00);
    ASSERT_EQ(sl_f16_from_f32(bitsf(0xffc00000u)), 0xfe00);
    ASSERT(sl_f32_from_f16(0x7bff) == 65504.0f);
    ASSERT(sl_f32_from_f16(0x0001) == 0x1p-24f);
    ASSERT(sl_f32_from_f16(0x03ff) == 0x3ffp-24f);
    ASSERT(sl_f32_from_f16(0x3555) == 0x1.554p-2f);
    ASSERT_U64(fbits(sl_f32_from_f16(0x8000)), 0x80000000u);
    ASSERT_U64(fbits(sl_f32_from_f16(0xfc00)), 0xff800000u);
    ASSERT_U64(fbits(sl_f32_from_f16(0x7c01)), 0x7fc02000u); /* signalling NaN comes out quiet */
    ASSERT_U64(fbits(sl_f32_from_f16(0xfe00)), 0xffc00000u);
}

TEST(test_f16_arrays_match_scalar) {
    static uint16_t h[65536], h2[65536];
    static float f[65536];
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    for (int off = 0; off < 2; off++) {
        sl__f16c_off = off;
        sl_f16_to_f32(h, f, 65536);
        for (int i = 0; i < 65536; i++) {
            float want = sl_f32_from_f16((uint16_t)i);
            if (fbits(f[i]) != fbits(want)) { FAILF("f16c_off=%d: 0x%04x", off, i); break; }
        }
        sl_f32_to_f16(f, h2, 65536);
        for (int i = 0; i < 65536; i++)
            if (h2[i] != sl_f16_from_f32(f[i])) { FAILF("f16c_off=%d: back 0x%04x", off, i); break; }
    }
    sl__f16c_off = 0;
}

TEST(test_bf16) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sl_f32_from_bf16((uint16_t)h);
        uint16_t back = sl_bf16_from_f32(f);
        bool nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        if (nan ? back != (uint16_t)(h | 0x40) : back != h) bad++;
    }
    ASSERT_EQ(bad, 0);
    ASSERT_EQ(sl_bf16_from_f32(1.0f), 0x3f80);
    ASSERT_EQ(sl_bf16_from_f32(1.0f + 0x1p-8f), 0x3f80);  /* tie: even */
    ASSERT_EQ(sl_bf16_from_f32(1.0f + 0x3p-8f), 0x3f82);  /* tie: even (up) */
    ASSERT_EQ(sl_bf16_from_f32(1.0f + 0x1.8p-8f), 0x3f81); /* above the tie: up */
    ASSERT_EQ(sl_bf16_from_f32(bitsf(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to infinity */
    ASSERT_EQ(sl_bf16_from_f32(bitsf(0x7f800001u)), 0x7fc0); /* signalling NaN: quiet */
    ASSERT_EQ(sl_bf16_from_f32(-3.0f), 0xc040);
}

TEST(test_little_endian) {
    uint8_t b[11] = {0};
    sl_store_le64(b + 1, 0x0102030405060708ull);
    ASSERT_MEMEQ(b + 1, ((uint8_t[]){8, 7, 6, 5, 4, 3, 2, 1}), 8);
    ASSERT_U64(sl_load_le64(b + 1), 0x0102030405060708ull);
    ASSERT_U64(sl_load_le32(b + 1), 0x05060708u);
    ASSERT_EQ(sl_load_le16(b + 2), 0x0607);
    sl_store_le32(b + 3, 0xdeadbeefu);
    ASSERT_MEMEQ(b + 3, ((uint8_t[]){0xef, 0xbe, 0xad, 0xde}), 4);
    sl_store_le16(b + 9, 0xabcd);
    ASSERT_MEMEQ(b + 9, ((uint8_t[]){0xcd, 0xab}), 2);
}

TEST(test_splitmix64) {
    /* the reference generator's first outputs from seed 0 (Vigna's splitmix64.c) */
    uint64_t s = 0;
    ASSERT_U64(sl_splitmix64(&s), 0xe220a8397b1dcdafull);
    ASSERT_U64(sl_splitmix64(&s), 0x6e789e6aa1b965f4ull);
    ASSERT_U64(sl_splitmix64(&s), 0x06c45d188009454full);
    ASSERT_U64(s, 3 * SL_GOLDEN64);
    /* sl_mix2 is two rounds: pinned, since the pipeline's seeds (and so every shuffle
     * order in the tests) depend on it */
    ASSERT_U64(sl_mix2(0, 0), sl_mix64(sl_mix64(SL_GOLDEN64) + 0xd1b54a32d192ed03ull));
    ASSERT(sl_mix2(1, 2) != sl_mix2(2, 1));
}

int main(void) {
    RUN(test_f16_all_round_trip);
    RUN(test_f16_exact_values);
    RUN(test_f16_arrays_match_scalar);
    RUN(test_bf16);
    RUN(test_little_endian);
    RUN(test_splitmix64);
    TEST_MAIN_END();
}
