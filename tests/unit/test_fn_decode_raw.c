/* pipeline/fn/decode_raw.c: a view of aligned bytes and a copy of unaligned ones, the -1
 * dimension, a scalar, and sizes that do not fit refused with both numbers. */
#include "sluice/fn.h"
#include "helper_fn.h"
#include "test.h"

TEST(test_decode_raw) {
    uint16_t vals[6] = {1, 2, 3, 0xffff, 5, 6};
    int64_t dims[2] = {2, 3};
    sl_fn *fn;
    ASSERT_OK(sl_fn_decode_raw("raw", SL_DT_U16, 2, dims, &fn));
    for (size_t offset = 0; offset < 2; offset++) {
        sl_element e;
        sl_test_elem1(&e, "raw", sl_test_bytes(vals, sizeof vals, offset));
        const uint8_t *src = ((sl_bytes *)e.t[0].data)->ptr;
        ASSERT_OK(sl_test_apply(fn, &e, 0));
        const sl_tensor *t = sl_test_comp(&e, "raw");
        ASSERT_SHAPE2(t, SL_DT_U16, 2, 3);
        ASSERT_MEMEQ(t->data, vals, sizeof vals);
        if (offset == 0) ASSERT(t->data == (const void *)src);  /* aligned: a view */
        else ASSERT(t->data != (const void *)src);              /* unaligned: copied */
        sl_element_clear(&e);
    }
    /* wrong size names both sizes */
    sl_element e;
    sl_test_elem1(&e, "raw", sl_test_bytes(vals, 11, 0));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "decode_raw: 'raw' holds 11 bytes but uint16[2,3] needs 12");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* a -1 dimension takes the count */
    int64_t wd[2] = {-1, 2};
    ASSERT_OK(sl_fn_decode_raw("raw", SL_DT_U8, 2, wd, &fn));
    sl_test_elem1(&e, "raw", sl_test_bytes("abcdef", 6, 1));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_EQ(e.t[0].dims[0], 3);
    ASSERT_MEMEQ(e.t[0].data, "abcdef", 6);
    sl_element_clear(&e);
    sl_test_elem1(&e, "raw", sl_test_bytes("abcde", 5, 0));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "decode_raw: 'raw' holds 5 bytes, not a whole number of uint8[-1,2] (2 bytes each)");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* a scalar float32 */
    float pi = 3.25f;
    ASSERT_OK(sl_fn_decode_raw("raw", SL_DT_F32, 0, NULL, &fn));
    sl_test_elem1(&e, "raw", sl_test_bytes(&pi, 4, 0));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_EQ(e.t[0].rank, 0);
    ASSERT(*(float *)e.t[0].data == 3.25f);
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

int main(void) {
    RUN(test_decode_raw);
    TEST_MAIN_END();
}
