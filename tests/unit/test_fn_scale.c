/* pipeline/fn/scale.c: x * factor as float32, for uint8 and int64 inputs. */
#include "sluice/fn.h"
#include "helper_fn.h"
#include "test.h"

TEST(test_scale) {
    sl_fn *fn;
    ASSERT_OK(sl_fn_scale("x", 0.5, &fn));
    uint8_t u[3] = {0, 2, 255};
    int64_t d[1] = {3};
    sl_element e;
    sl_test_elem1(&e, "x", sl_test_tensor(SL_DT_U8, 1, d, u));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_EQ(e.t[0].dtype, SL_DT_F32);
    ASSERT_MEMEQ(e.t[0].data, ((float[]){0, 1, 127.5f}), 12);
    sl_element_clear(&e);
    int64_t iv[2] = {-4, 1LL << 40};
    int64_t d2[1] = {2};
    sl_test_elem1(&e, "x", sl_test_tensor(SL_DT_I64, 1, d2, iv));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_MEMEQ(e.t[0].data, ((float[]){-2, 0x1p39f}), 8);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    ASSERT_OK(sl_fn_scale("x", 1.0 / 255, &fn));
    sl_test_elem1(&e, "x", sl_test_tensor(SL_DT_U8, 1, d, u));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT(((float *)e.t[0].data)[1] == (float)(2.0 / 255) && ((float *)e.t[0].data)[2] == 1.0f);
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

int main(void) {
    RUN(test_scale);
    TEST_MAIN_END();
}
