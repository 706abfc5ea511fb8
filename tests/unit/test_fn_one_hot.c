/* pipeline/fn/one_hot.c: scalars and vectors, values outside 0..depth-1 and floats refused. */
#include "sluice/fn.h"
#include "helper_fn.h"
#include "test.h"

TEST(test_one_hot) {
    sl_fn *fn;
    ASSERT_OK(sl_fn_one_hot("label", 5, &fn));
    int64_t three = 3;
    sl_element e;
    sl_test_elem1(&e, "label", sl_test_tensor(SL_DT_I64, 0, NULL, &three));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_EQ(e.t[0].dtype, SL_DT_F32);
    ASSERT_EQ(e.t[0].rank, 1);
    ASSERT_EQ(e.t[0].dims[0], 5);
    ASSERT_MEMEQ(e.t[0].data, ((float[]){0, 0, 0, 1, 0}), 20);
    sl_element_clear(&e);
    uint8_t two[2] = {0, 4};
    int64_t d[1] = {2};
    sl_test_elem1(&e, "label", sl_test_tensor(SL_DT_U8, 1, d, two));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_EQ(e.t[0].rank, 2);
    ASSERT_EQ(e.t[0].dims[1], 5);
    ASSERT_MEMEQ(e.t[0].data, ((float[]){1, 0, 0, 0, 0, 0, 0, 0, 0, 1}), 40);
    sl_element_clear(&e);
    int64_t five = 5, neg = -1;
    sl_test_elem1(&e, "label", sl_test_tensor(SL_DT_I64, 0, NULL, &five));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_ERANGE);
    ASSERT_STREQ(sl_errmsg(), "one_hot: 'label' value 5 is outside 0..4 (depth 5)\n"
                              "---> HINT: check the label values in the data, or raise the one_hot depth");
    sl_element_clear(&e);
    sl_test_elem1(&e, "label", sl_test_tensor(SL_DT_I64, 0, NULL, &neg));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_ERANGE);
    sl_element_clear(&e);
    float f = 1;
    sl_test_elem1(&e, "label", sl_test_tensor(SL_DT_F32, 0, NULL, &f));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "one_hot: 'label' is float32[]; one_hot needs an integer scalar or vector");
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

int main(void) {
    RUN(test_one_hot);
    TEST_MAIN_END();
}
