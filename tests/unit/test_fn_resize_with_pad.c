/* pipeline/fn/resize_with_pad.c: TF's letterbox geometry (the resized size and the
 * padding offsets, worked by hand below from image_ops_impl.py's float32 formulas), the
 * resized pixels equal to the 2-tap resampler's, zeros around, float32 too, and errors. */
#include <stdlib.h>

#include "pipeline/fn/image.h" /* the resampler, to compare with */
#include "sluice/fn.h"
#include "helper_fn.h"
#include "test.h"

/* resize_with_pad of an H x W x C uint8 image to th x tw must place the rh x rw resize at
 * (py, px). */
static void check_u8(int H, int W, int C, int th, int tw, int rh, int rw, int py, int px) {
    int64_t d[3] = {H, W, C};
    uint8_t *src = malloc((size_t)(H * W * C));
    for (int i = 0; i < H * W * C; i++) src[i] = (uint8_t)(1 + (i * 37 + i / 7) % 250); /* never 0 */
    sl_fn *fn;
    ASSERT_OK(sl_fn_resize_with_pad("image", th, tw, &fn));
    sl_element e;
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, d, src));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_EQ(e.t[0].dims[0], th);
    ASSERT_EQ(e.t[0].dims[1], tw);
    ASSERT_EQ(e.t[0].dims[2], C);
    uint8_t *want = malloc((size_t)(rh * rw * C));
    ASSERT_OK(sl__resize_u8(src, H, W, C, W * C, 0, 0, (double)H, (double)W, want, rh, rw));
    const uint8_t *o = e.t[0].data;
    int bad = 0;
    for (int y = 0; y < th; y++)
        for (int x = 0; x < tw; x++)
            for (int c = 0; c < C; c++) {
                bool in = y >= py && y < py + rh && x >= px && x < px + rw;
                uint8_t w = in ? want[((y - py) * rw + (x - px)) * C + c] : 0;
                bad += o[(y * tw + x) * C + c] != w;
            }
    if (bad) FAILF("%dx%d -> %dx%d: %d values differ", H, W, th, tw, bad);
    free(want);
    free(src);
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

TEST(test_resize_with_pad_geometry) {
    /* ratio = max(W / tw, H / th) in float32; resized floor(H / ratio) x floor(W / ratio);
     * padding floor((t - H / ratio) / 2) */
    check_u8(40, 20, 1, 20, 20, 20, 10, 0, 5);  /* ratio 2: 20x10, 5 columns each side */
    check_u8(30, 40, 3, 64, 64, 48, 64, 8, 0);  /* ratio 0.625: 48x64, 8 rows above */
    check_u8(7, 5, 3, 4, 9, 4, 2, 0, 3);        /* ratio 1.75: 4x2 (2.857), 3.07 -> 3 */
    check_u8(16, 16, 3, 16, 16, 16, 16, 0, 0);  /* the same size: a copy */
    check_u8(3, 100, 3, 50, 50, 1, 50, 24, 0);  /* ratio 2: 1.5 -> 1 row at 24.25 -> 24 */
}

TEST(test_resize_with_pad_f32_and_errors) {
    float src[4 * 2] = {1, 2, 3, 4, 5, 6, 7, 8}; /* 4x2x1 */
    int64_t d[3] = {4, 2, 1};
    sl_fn *fn;
    ASSERT_OK(sl_fn_resize_with_pad("image", 4, 4, &fn)); /* ratio 1: columns 1..2 */
    sl_element e;
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_F32, 3, d, src));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    const float want[16] = {0, 1, 2, 0, 0, 3, 4, 0, 0, 5, 6, 0, 0, 7, 8, 0};
    ASSERT_EQ(e.t[0].dtype, SL_DT_F32);
    ASSERT_MEMEQ(e.t[0].data, want, sizeof want);
    sl_element_clear(&e);
    int16_t bad[8] = {0};
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_I16, 3, d, bad));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "resize_with_pad takes uint8 or float32 images");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* too thin for the target: 1 x 1000 into 10 x 10 gives 0 rows */
    ASSERT_OK(sl_fn_resize_with_pad("image", 10, 10, &fn));
    int64_t d2[3] = {1, 1000, 1};
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_F32, 3, d2, NULL));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "would be resized to 0x10 to fit 10x10");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    ASSERT_EQ(sl_fn_resize_with_pad("image", 0, 10, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "resize_with_pad: size 0x10 must be 1..65535 on each side");
    ASSERT(fn == NULL);
}

int main(void) {
    RUN(test_resize_with_pad_geometry);
    RUN(test_resize_with_pad_f32_and_errors);
    TEST_MAIN_END();
}
