/* pipeline/fn/random_erasing.c: erase's fixed box exactly on float32 and uint8 (values cast
 * as torchvision casts them), random_erasing's boxes within torchvision's scale and ratio
 * ranges, p, noise fill, and the error cases. (The torchvision comparison of erase is in
 * test_fn_color.c with the other references.) */
#include <math.h>
#include <stdlib.h>

#include "sluice/fn.h"
#include "helper_fn.h"
#include "test.h"

static sl_tensor ones_f32(int64_t h, int64_t w, int64_t c) {
    int64_t d[3] = {h, w, c};
    sl_tensor t = sl_test_tensor(SL_DT_F32, 3, d, NULL);
    for (int64_t i = 0; i < h * w * c; i++) ((float *)t.data)[i] = 1.0f;
    return t;
}

TEST(test_erase_fixed_box) {
    const float v3[3] = {-1.5f, 0.25f, 2.0f};
    sl_fn *fn;
    ASSERT_OK(sl_fn_erase("image", 1, 2, 2, 3, v3, 3, &fn));
    sl_element e;
    sl_test_elem1(&e, "image", ones_f32(4, 6, 3));
    const void *in = e.t[0].data;
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT(e.t[0].data != in);
    const float *o = e.t[0].data;
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 6; x++)
            for (int c = 0; c < 3; c++) {
                bool inside = y >= 1 && y < 3 && x >= 2 && x < 5;
                ASSERT(o[(y * 6 + x) * 3 + c] == (inside ? v3[c] : 1.0f));
            }
    sl_element_clear(&e);
    /* uint8: values rounded down and saturated, as torchvision's cast */
    uint8_t px[2 * 2 * 3];
    memset(px, 77, sizeof px);
    int64_t d[3] = {2, 2, 3};
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, d, px));
    const uint8_t want[12] = {77, 77, 77, 77, 77, 77, 77, 77, 77, 0, 0, 255};
    const float vals[3] = {0.9f, -5.0f, 300.0f};
    sl_fn *f2;
    ASSERT_OK(sl_fn_erase("image", 1, 1, 1, 1, vals, 3, &f2));
    ASSERT_OK(sl_test_apply(f2, &e, 0));
    ASSERT_MEMEQ(e.t[0].data, want, 12);
    sl_element_clear(&e);
    sl_fn_unref(f2);
    /* errors: the box past the image, values for the wrong number of channels */
    sl_test_elem1(&e, "image", ones_f32(2, 6, 3));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "erase: the box at row 1, column 2 of 2x3 does not fit 'image' (float32[2,6,3])");
    ASSERT_CONTAINS(sl_errmsg(), "HINT: the box must lie inside the image");
    sl_element_clear(&e);
    sl_test_elem1(&e, "image", ones_f32(4, 6, 2));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "2 channels, but 3 fill values were given");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    ASSERT_EQ(sl_fn_erase("image", -1, 0, 1, 1, v3, 1, &fn), SL_EINVAL);
    ASSERT(fn == NULL);
    ASSERT_EQ(sl_fn_erase("image", 0, 0, 0, 1, v3, 1, &fn), SL_EINVAL);
    ASSERT_EQ(sl_fn_erase("image", 0, 0, 1, 1, v3, 0, &fn), SL_EINVAL);
    ASSERT_EQ(sl_fn_erase("image", 0, 0, 1, 1, v3, 17, &fn), SL_EINVAL);
    /* int32 images are refused */
    ASSERT_OK(sl_fn_erase("image", 0, 0, 1, 1, v3, 1, &fn));
    int32_t ip[4] = {1, 2, 3, 4};
    int64_t d2[2] = {2, 2};
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_I32, 2, d2, ip));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "erasing takes uint8 or float32 images");
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

TEST(test_random_erasing_boxes) {
    const float zero = 0;
    sl_fn *fn;
    ASSERT_OK(sl_fn_random_erasing("image", 1.0, 0.02, 0.33, 0.3, 3.3, &zero, 1, false, &fn));
    const int H = 60, W = 80;
    int erased = 0, distinct = 0;
    int64_t prev = -1;
    double area_sum = 0;
    for (uint64_t seed = 0; seed < 400; seed++) {
        sl_element e;
        sl_test_elem1(&e, "image", ones_f32(H, W, 3));
        ASSERT_OK(sl_test_apply(fn, &e, seed));
        const float *o = e.t[0].data;
        int y0 = H, y1 = -1, x0 = W, x1 = -1, zeros = 0;
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                if (o[(y * W + x) * 3] == 0) {
                    zeros++;
                    y0 = y < y0 ? y : y0, y1 = y > y1 ? y : y1, x0 = x < x0 ? x : x0, x1 = x > x1 ? x : x1;
                }
        if (zeros) {
            int bh = y1 - y0 + 1, bw = x1 - x0 + 1;
            ASSERT_EQ(zeros, bh * bw); /* a full rectangle, every channel */
            for (int i = 0; i < H * W * 3; i++) ASSERT(o[i] == 0 || o[i] == 1);
            double frac = (double)zeros / (H * W), ratio = (double)bh / bw;
            /* h = round(sqrt(A r)), w = round(sqrt(A / r)): within rounding of the ranges */
            ASSERT(frac > 0.02 * 0.7 && frac < 0.33 * 1.3);
            ASSERT(ratio > 0.3 * 0.7 && ratio < 3.3 * 1.4);
            ASSERT(bh < H && bw < W);
            erased++;
            area_sum += frac;
            int64_t key = ((int64_t)y0 * 1000 + x0) * 1000000 + bh * 1000 + bw;
            distinct += key != prev;
            prev = key;
        }
        sl_element_clear(&e);
    }
    ASSERT(erased >= 390); /* p = 1: only the rare 10 failed tries leave an image */
    ASSERT(distinct >= 380);
    ASSERT(area_sum / erased > 0.12 && area_sum / erased < 0.22); /* uniform area: mean 0.175 */
    sl_fn_unref(fn);
    /* p = 0: the very tensor; p = 0.5: about half */
    ASSERT_OK(sl_fn_random_erasing("image", 0.0, 0.02, 0.33, 0.3, 3.3, &zero, 1, false, &fn));
    sl_element e;
    sl_test_elem1(&e, "image", ones_f32(8, 8, 1));
    void *before = e.t[0].data;
    ASSERT_OK(sl_test_apply(fn, &e, 5));
    ASSERT(e.t[0].data == before);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    ASSERT_OK(sl_fn_random_erasing("image", 0.5, 0.02, 0.33, 0.3, 3.3, &zero, 1, false, &fn));
    int changed = 0;
    for (uint64_t seed = 0; seed < 400; seed++) {
        sl_test_elem1(&e, "image", ones_f32(20, 20, 1));
        before = e.t[0].data;
        ASSERT_OK(sl_test_apply(fn, &e, seed));
        changed += e.t[0].data != before;
        sl_element_clear(&e);
    }
    ASSERT(changed > 160 && changed < 240);
    sl_fn_unref(fn);
    /* value=random on float32: standard normal noise in the box */
    ASSERT_OK(sl_fn_random_erasing("image", 1.0, 0.3, 0.33, 1.0, 1.0, NULL, 0, true, &fn));
    sl_test_elem1(&e, "image", ones_f32(100, 100, 3));
    ASSERT_OK(sl_test_apply(fn, &e, 11));
    const float *o = e.t[0].data;
    double sum = 0, sq = 0;
    int n = 0;
    for (int i = 0; i < 100 * 100 * 3; i++)
        if (o[i] != 1.0f) {
            sum += o[i];
            sq += (double)o[i] * o[i];
            n++;
        }
    ASSERT(n > 8000); /* about 0.31 of 30000 values */
    double mean = sum / n, var = sq / n - mean * mean;
    ASSERT(fabs(mean) < 0.05 && fabs(var - 1) < 0.08);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* constructor errors */
    ASSERT_EQ(sl_fn_random_erasing("image", 1.5, 0.02, 0.33, 0.3, 3.3, &zero, 1, false, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "random_erasing: probability 1.5 must be in [0, 1]");
    ASSERT_EQ(sl_fn_random_erasing("image", 0.5, 0.4, 0.33, 0.3, 3.3, &zero, 1, false, &fn), SL_EINVAL);
    ASSERT_EQ(sl_fn_random_erasing("image", 0.5, 0.02, 0.33, 0, 3.3, &zero, 1, false, &fn), SL_EINVAL);
    ASSERT_EQ(sl_fn_random_erasing("image", 0.5, 0.02, 0.33, 0.3, 3.3, NULL, 0, false, &fn), SL_EINVAL);
    ASSERT(fn == NULL);
}

int main(void) {
    RUN(test_erase_fixed_box);
    RUN(test_random_erasing_boxes);
    TEST_MAIN_END();
}
