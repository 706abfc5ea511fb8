/* pipeline/fn/cast.c: float to every integer type saturating (NaN to 0), integers through
 * int64, half precision and bfloat16 rounding, float32 to float32 shared, bytes refused. */
#include <math.h>
#include <stdint.h>

#include "pipeline/fn/image.h" /* and pipeline/internal.h */
#include "sluice/fn.h"
#include "helper_fn.h"
#include "test.h"

TEST(test_cast_saturates) {
    float fx[7] = {-1.5f, 300.7f, NAN, 1e30f, -1e30f, 0.9f, 127.9f};
    int64_t d[1] = {7};
    struct { sl_dtype dt; int64_t want[7]; } cases[] = {
        {SL_DT_U8, {0, 255, 0, 255, 0, 0, 127}},
        {SL_DT_I8, {-1, 127, 0, 127, -128, 0, 127}},
        {SL_DT_U16, {0, 300, 0, 65535, 0, 0, 127}},
        {SL_DT_I32, {-1, 300, 0, INT32_MAX, INT32_MIN, 0, 127}},
        {SL_DT_U32, {0, 300, 0, UINT32_MAX, 0, 0, 127}},
        {SL_DT_I64, {-1, 300, 0, INT64_MAX, INT64_MIN, 0, 127}},
        {SL_DT_BOOL, {1, 1, 1, 1, 1, 1, 1}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        sl_fn *fn;
        ASSERT_OK(sl_fn_cast("x", cases[k].dt, &fn));
        sl_element e;
        sl_test_elem1(&e, "x", sl_test_tensor(SL_DT_F32, 1, d, fx));
        ASSERT_OK(sl_test_apply(fn, &e, 0));
        ASSERT_EQ(e.t[0].dtype, cases[k].dt);
        for (int i = 0; i < 7; i++) {
            int64_t got = sl__num_get_i64(e.t[0].data, cases[k].dt, i);
            if (got != cases[k].want[i]) FAILF("cast to %s: value %d: %lld != %lld",
                                               sl_dtype_name(cases[k].dt), i, (long long)got,
                                               (long long)cases[k].want[i]);
        }
        sl_element_clear(&e);
        sl_fn_unref(fn);
    }
    /* integer to integer saturates exactly through int64 */
    int64_t iv[4] = {INT64_MAX, INT64_MIN, -129, 40000};
    int64_t d4[1] = {4};
    sl_fn *fn;
    ASSERT_OK(sl_fn_cast("x", SL_DT_I16, &fn));
    sl_element e;
    sl_test_elem1(&e, "x", sl_test_tensor(SL_DT_I64, 1, d4, iv));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_MEMEQ(e.t[0].data, ((int16_t[]){32767, -32768, -129, 32767}), 8);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* to half precision (round to nearest even, overflow to infinity) and back */
    float hx[5] = {1.0f, 65504.0f, 70000.0f, -2.0f, 0x1p-24f};
    int64_t d5[1] = {5};
    ASSERT_OK(sl_fn_cast("x", SL_DT_F16, &fn));
    sl_test_elem1(&e, "x", sl_test_tensor(SL_DT_F32, 1, d5, hx));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_MEMEQ(e.t[0].data, ((uint16_t[]){0x3c00, 0x7bff, 0x7c00, 0xc000, 0x0001}), 10);
    sl_fn_unref(fn);
    ASSERT_OK(sl_fn_cast("x", SL_DT_F32, &fn));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_MEMEQ(e.t[0].data, ((float[]){1.0f, 65504.0f, INFINITY, -2.0f, 0x1p-24f}), 20);
    /* already float32: shared, not copied */
    void *before = e.t[0].data;
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT(e.t[0].data == before);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    ASSERT_OK(sl_fn_cast("x", SL_DT_BF16, &fn));
    sl_test_elem1(&e, "x", sl_test_tensor(SL_DT_F32, 1, d5, hx));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_EQ(((uint16_t *)e.t[0].data)[0], 0x3f80);
    ASSERT_EQ(((uint16_t *)e.t[0].data)[3], 0xc000);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* bytes cannot be cast; bytes is not a target */
    ASSERT_OK(sl_fn_cast("x", SL_DT_F32, &fn));
    sl_test_elem1(&e, "x", sl_test_bytes("ab", 2, 0));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "cast: 'x' is bytes[], not numbers");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    ASSERT_EQ(sl_fn_cast("x", SL_DT_BYTES, &fn), SL_EINVAL);
}

int main(void) {
    RUN(test_cast_saturates);
    TEST_MAIN_END();
}
