/* Tests for formats/crc32c.c: RFC 3720 B.4 vectors on every implementation this CPU has,
 * agreement between implementations on random lengths and misalignments, incremental ==
 * one-shot, and TFRecord's mask round trip. */
#include <stdint.h>

#include "sluice/crc32c.h"
#include "test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static int n_avail(void) {
    int n = 0;
    for (int i = 0; i < SL_CRC32C_IMPL_COUNT; i++) n += sl_crc32c_available(i);
    return n;
}

TEST(test_names_and_active) {
    ASSERT_STREQ(sl_crc32c_impl_name(SL_CRC32C_PORTABLE), "portable");
    ASSERT_STREQ(sl_crc32c_impl_name(SL_CRC32C_SSE42), "sse4.2");
    ASSERT_STREQ(sl_crc32c_impl_name(SL_CRC32C_CLMUL), "clmul");
    ASSERT_STREQ(sl_crc32c_impl_name(SL_CRC32C_VPCLMUL), "vpclmul");
    ASSERT_EQ(sl_crc32c_available(SL_CRC32C_PORTABLE), 1);
    ASSERT_EQ(sl_crc32c_available(SL_CRC32C_IMPL_COUNT), 0);
    sl_crc32c_impl a = sl_crc32c_active();
    ASSERT_EQ(sl_crc32c_available(a), 1);
    /* A CPU with the crc32 instruction uses it (alone, or with pclmulqdq on Intel); one with
     * AVX-512's vpclmulqdq folds with that, whatever the vendor. */
    if (sl_crc32c_available(SL_CRC32C_SSE42))
        ASSERT(a == SL_CRC32C_SSE42 || a == SL_CRC32C_CLMUL || a == SL_CRC32C_VPCLMUL);
    if (sl_crc32c_available(SL_CRC32C_VPCLMUL))
        ASSERT_EQ(a, SL_CRC32C_VPCLMUL);
    else if (__builtin_cpu_is("intel") && sl_crc32c_available(SL_CRC32C_CLMUL))
        ASSERT_EQ(a, SL_CRC32C_CLMUL);
    printf("  active: %s (%d implementations available)\n", sl_crc32c_impl_name(a), n_avail());
    int ok = 1;
    ASSERT_U64(sl_crc32c_with(SL_CRC32C_IMPL_COUNT, 0, "x", 1, &ok), 0);
    ASSERT_EQ(ok, 0);
}

TEST(test_rfc3720_vectors) {
    uint8_t zeros[32], ones[32], inc[32], dec[32];
    for (int i = 0; i < 32; i++) {
        zeros[i] = 0;
        ones[i] = 0xff;
        inc[i] = (uint8_t)i;
        dec[i] = (uint8_t)(31 - i);
    }
    static const uint8_t iscsi[48] = {
        0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
        0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    };
    int tested = 0;
    for (int impl = 0; impl < SL_CRC32C_IMPL_COUNT; impl++) {
        if (!sl_crc32c_available(impl)) {
            printf("  %s not available on this CPU\n", sl_crc32c_impl_name(impl));
            continue;
        }
        int ok = 0;
        ASSERT_U64(sl_crc32c_with(impl, 0, zeros, 32, &ok), 0x8a9136aa);
        ASSERT_EQ(ok, 1);
        ASSERT_U64(sl_crc32c_with(impl, 0, ones, 32, NULL), 0x62a8ab43);
        ASSERT_U64(sl_crc32c_with(impl, 0, inc, 32, NULL), 0x46dd794e);
        ASSERT_U64(sl_crc32c_with(impl, 0, dec, 32, NULL), 0x113fdb5c);
        ASSERT_U64(sl_crc32c_with(impl, 0, iscsi, 48, NULL), 0xd9963a56);
        ASSERT_U64(sl_crc32c_with(impl, 0, "123456789", 9, NULL), 0xe3069283);
        ASSERT_U64(sl_crc32c_with(impl, 0, "", 0, NULL), 0);
        ASSERT_U64(sl_crc32c_with(impl, 0x12345678, "", 0, NULL), 0x12345678);
        tested++;
    }
    ASSERT_EQ(tested, n_avail());
    ASSERT_U64(sl_crc32c(0, "123456789", 9), 0xe3069283);
}

/* Long buffers cross every block-size boundary of the fast paths (256 x 3, 8192 x 3, the
 * 11776-byte hybrid block, and the 1024-byte minimum and 256-byte steps of the AVX-512
 * folding). */
TEST(test_implementations_agree) {
    enum { MAX = 5000 + 64 };
    static uint8_t buf[MAX + 3 * 8192 * 2 + 100];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)rnd();
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = rnd() % 5001, mis = rnd() % 64;
        uint32_t seed = (iter & 1) ? rnd() : 0;
        uint32_t ref = sl_crc32c_with(SL_CRC32C_PORTABLE, seed, buf + mis, len, NULL);
        for (int impl = 1; impl < SL_CRC32C_IMPL_COUNT; impl++) {
            if (!sl_crc32c_available(impl)) continue;
            uint32_t got = sl_crc32c_with(impl, seed, buf + mis, len, NULL);
            if (got != ref) {
                FAILF("%s len %zu misalign %zu seed 0x%x: 0x%08x != portable 0x%08x",
                      sl_crc32c_impl_name(impl), len, mis, seed, got, ref);
                return;
            }
        }
        ASSERT_U64(sl_crc32c(seed, buf + mis, len), ref);
    }
    /* Long lengths around the three-stream and folding boundaries. */
    static const size_t longs[] = {1023, 1024, 1025, 1279, 1280, 1281, 1536 + 255, 4096 + 16, 11775, 11776, 11777,
                                   2 * 11776 + 5, 511, 512, 513, 767, 768, 769, 3 * 8192 - 1, 3 * 8192,
                                   3 * 8192 + 1, 3 * 8192 + 3 * 256 + 7, 6 * 8192 + 99,
                                   sizeof buf - 64};
    for (size_t k = 0; k < sizeof longs / sizeof longs[0]; k++)
        for (size_t mis = 0; mis < 9; mis++) {
            size_t len = longs[k];
            uint32_t ref = sl_crc32c_with(SL_CRC32C_PORTABLE, 0, buf + mis, len, NULL);
            for (int impl = 1; impl < SL_CRC32C_IMPL_COUNT; impl++) {
                if (!sl_crc32c_available(impl)) continue;
                ASSERT_U64(sl_crc32c_with(impl, 0, buf + mis, len, NULL), ref);
            }
        }
}

TEST(test_incremental_equals_one_shot) {
    static uint8_t buf[70000];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)rnd();
    for (int impl = 0; impl < SL_CRC32C_IMPL_COUNT; impl++) {
        if (!sl_crc32c_available(impl)) continue;
        uint32_t whole = sl_crc32c_with(impl, 0, buf, sizeof buf, NULL);
        ASSERT_U64(whole, sl_crc32c_with(SL_CRC32C_PORTABLE, 0, buf, sizeof buf, NULL));
        for (int iter = 0; iter < 200; iter++) {
            size_t pos = 0;
            uint32_t c = 0;
            while (pos < sizeof buf) {
                size_t n = rnd() % (iter < 100 ? 64 : 20000);
                if (n > sizeof buf - pos) n = sizeof buf - pos;
                c = sl_crc32c_with(impl, c, buf + pos, n, NULL);
                pos += n;
            }
            ASSERT_U64(c, whole);
        }
    }
    /* "123456789" split at every point. */
    for (size_t k = 0; k <= 9; k++)
        ASSERT_U64(sl_crc32c(sl_crc32c(0, "123456789", k), &"123456789"[k], 9 - k), 0xe3069283);
}

TEST(test_mask_round_trip) {
    /* TFRecord's masked CRC of an empty payload and of the 8-byte zero length. */
    ASSERT_U64(sl_crc32c_mask(0), 0xa282ead8u);
    ASSERT_U64(sl_crc32c_mask(sl_crc32c(0, "123456789", 9)),
               ((0xe3069283u >> 15) | (0xe3069283u << 17)) + 0xa282ead8u);
    for (int i = 0; i < 100000; i++) {
        uint32_t v = rnd() ^ (rnd() << 16);
        ASSERT_U64(sl_crc32c_unmask(sl_crc32c_mask(v)), v);
        ASSERT_U64(sl_crc32c_mask(sl_crc32c_unmask(v)), v);
    }
    ASSERT_U64(sl_crc32c_unmask(0xffffffffu), (((0xffffffffu - 0xa282ead8u) >> 17) |
                                                ((0xffffffffu - 0xa282ead8u) << 15)));
}

int main(void) {
    RUN(test_names_and_active);
    RUN(test_rfc3720_vectors);
    RUN(test_implementations_agree);
    RUN(test_incremental_equals_one_shot);
    RUN(test_mask_round_trip);
    TEST_MAIN_END();
}
