/* pipeline/fn/center_crop.c: the centred window (offsets rounded half to even), a size
 * larger than the image keeping that dimension whole, int64 pixels. */
#include "pipeline/fn/image.h" /* and pipeline/internal.h */
#include "sluice/fn.h"
#include "helper_fn.h"
#include "test.h"

TEST(test_center_crop) {
    /* 4x5x1, crop 2x2: top round(1.0) = 1, left round(1.5) = 2 (ties to even) */
    uint8_t px[20];
    for (int i = 0; i < 20; i++) px[i] = (uint8_t)i;
    int64_t d[3] = {4, 5, 1};
    sl_fn *fn;
    ASSERT_OK(sl_fn_center_crop("image", 2, 2, &fn));
    sl_element e;
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, d, px));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_EQ(e.t[0].dims[0], 2);
    ASSERT_EQ(e.t[0].dims[1], 2);
    ASSERT_EQ(e.t[0].dims[2], 1);
    ASSERT_MEMEQ(e.t[0].data, ((uint8_t[]){7, 8, 12, 13}), 4);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* larger than the image in one dimension: that dimension is kept whole (no padding) */
    ASSERT_OK(sl_fn_center_crop("image", 10, 3, &fn));
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, d, px));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_EQ(e.t[0].dims[0], 4);
    ASSERT_EQ(e.t[0].dims[1], 3);
    ASSERT_MEMEQ(e.t[0].data, ((uint8_t[]){1, 2, 3, 6, 7, 8, 11, 12, 13, 16, 17, 18}), 12);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* offsets: round((10-3)/2) = round(3.5) = 4, round((9-4)/2) = round(2.5) = 2 */
    sl__rect r = sl__center_rect(10, 9, 3, 4);
    ASSERT_EQ(r.y, 4); ASSERT_EQ(r.x, 2); ASSERT_EQ(r.h, 3); ASSERT_EQ(r.w, 4);
    /* int64 pixels crop too (no resize needed) */
    int64_t big[20];
    for (int i = 0; i < 20; i++) big[i] = 1000000000000LL + i;
    int64_t d2[2] = {4, 5};
    ASSERT_OK(sl_fn_center_crop("image", 2, 2, &fn));
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_I64, 2, d2, big));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_EQ(((int64_t *)e.t[0].data)[3], 1000000000013LL);
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

int main(void) {
    RUN(test_center_crop);
    TEST_MAIN_END();
}
