/* pipeline/fn/normalize.c: (x / 255 - mean) / std per channel for uint8, without the scaling
 * for other types, one pair for every channel, channel counts that do not fit refused. */
#include "sluice/fn.h"
#include "helper_fn.h"
#include "test.h"

TEST(test_normalize) {
    const float mean[3] = {0.5f, 0.5f, 0.25f}, std[3] = {0.5f, 0.25f, 0.5f};
    sl_fn *fn;
    ASSERT_OK(sl_fn_normalize("image", mean, std, 3, true, &fn));
    uint8_t px[6] = {0, 255, 51, 255, 0, 128};
    int64_t d[3] = {1, 2, 3};
    sl_element e;
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, d, px));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    const sl_tensor *t = sl_test_comp(&e, "image");
    ASSERT_EQ(t->dtype, SL_DT_F32);
    ASSERT_EQ(t->dims[2], 3);
    const float *o = t->data;
    ASSERT(o[0] == -1.0f && o[1] == 2.0f && o[4] == -2.0f);
    ASSERT(o[2] == (51 / 255.0f - 0.25f) / 0.5f);
    ASSERT(o[3] == 1.0f);
    ASSERT(o[5] == (128 / 255.0f - 0.25f) / 0.5f);
    sl_element_clear(&e);
    /* float32 input is not scaled */
    float fx[3] = {1.5f, 0.5f, 0.25f};
    int64_t d1[1] = {3};
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_F32, 1, d1, fx));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    o = e.t[0].data;
    ASSERT(o[0] == 2.0f && o[1] == 0.0f && o[2] == 0.0f);
    sl_element_clear(&e);
    /* 2 channels for 3 values */
    int64_t d2[2] = {3, 2};
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 2, d2, px));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "normalize: 'image' is uint8[3,2]: 2 channels, but 3 means and stds were given");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* one pair applies to everything, without scaling */
    float m1 = 10, s1 = 2;
    ASSERT_OK(sl_fn_normalize("x", &m1, &s1, 1, false, &fn));
    int16_t iv[4] = {-10, 0, 10, 20};
    int64_t d4[2] = {2, 2};
    sl_test_elem1(&e, "x", sl_test_tensor(SL_DT_I16, 2, d4, iv));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_MEMEQ(e.t[0].data, ((float[]){-10, -5, 0, 5}), 16);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    float zero = 0;
    ASSERT_EQ(sl_fn_normalize("x", &m1, &zero, 1, false, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "normalize: channel 0 has mean 10 and std 0; std must be finite and non-zero");
}

int main(void) {
    RUN(test_normalize);
    TEST_MAIN_END();
}
