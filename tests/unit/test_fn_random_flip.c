/* pipeline/fn/random_flip.c: each direction exactly, p = 0 leaves the very buffer, the
 * input buffer is never written, p = 0.5 flips about half the elements by the seed alone. */
#include "sluice/fn.h"
#include "helper_fn.h"
#include "test.h"

TEST(test_random_flip) {
    /* 2x3 image, 2 channels: pixel (y, x) = {10y + x, 100 + 10y + x} */
    uint8_t px[12], h[12], v[12], hv[12];
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < 3; x++) {
            int i = (y * 3 + x) * 2, ih = (y * 3 + 2 - x) * 2, iv = ((1 - y) * 3 + x) * 2,
                ihv = ((1 - y) * 3 + 2 - x) * 2;
            px[i] = (uint8_t)(10 * y + x); px[i + 1] = (uint8_t)(100 + 10 * y + x);
            h[ih] = px[i]; h[ih + 1] = px[i + 1];
            v[iv] = px[i]; v[iv + 1] = px[i + 1];
            hv[ihv] = px[i]; hv[ihv + 1] = px[i + 1];
        }
    int64_t d[3] = {2, 3, 2};
    struct { bool h, v; const uint8_t *want; } cases[] = {{true, false, h}, {false, true, v}, {true, true, hv}};
    for (int k = 0; k < 3; k++) {
        sl_fn *fn;
        ASSERT_OK(sl_fn_random_flip("image", cases[k].h, cases[k].v, 1.0, &fn));
        sl_element e;
        sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, d, px));
        ASSERT_OK(sl_test_apply(fn, &e, 99));
        ASSERT_MEMEQ(e.t[0].data, cases[k].want, 12);
        sl_element_clear(&e);
        sl_fn_unref(fn);
    }
    /* p = 0: untouched, same buffer; float32 and rank 2 work too */
    sl_fn *fn;
    ASSERT_OK(sl_fn_random_flip("image", true, true, 0.0, &fn));
    sl_element e;
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, d, px));
    void *before = e.t[0].data;
    ASSERT_OK(sl_test_apply(fn, &e, 5));
    ASSERT(e.t[0].data == before);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    ASSERT_OK(sl_fn_random_flip("image", true, false, 1.0, &fn));
    float fl[6] = {1, 2, 3, 4, 5, 6}, flw[6] = {3, 2, 1, 6, 5, 4};
    int64_t d2[2] = {2, 3};
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_F32, 2, d2, fl));
    ASSERT_OK(sl_test_apply(fn, &e, 5));
    ASSERT_MEMEQ(e.t[0].data, flw, sizeof flw);
    ASSERT_MEMEQ(fl, ((float[]){1, 2, 3, 4, 5, 6}), sizeof fl); /* the input buffer is not written */
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* p = 0.5: about half flip, decided by the seed alone */
    ASSERT_OK(sl_fn_random_flip("image", true, false, 0.5, &fn));
    int flipped = 0;
    for (uint64_t seed = 0; seed < 1000; seed++) {
        sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_F32, 2, d2, fl));
        ASSERT_OK(sl_test_apply(fn, &e, seed));
        int f1 = ((float *)e.t[0].data)[0] == 3;
        sl_element_clear(&e);
        sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_F32, 2, d2, fl));
        ASSERT_OK(sl_test_apply(fn, &e, seed));
        ASSERT_EQ(((float *)e.t[0].data)[0] == 3, f1);
        sl_element_clear(&e);
        flipped += f1;
    }
    ASSERT(flipped > 430 && flipped < 570);
    sl_fn_unref(fn);
    ASSERT_EQ(sl_fn_random_flip("image", true, false, 1.5, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "random_flip: probability 1.5 must be in [0, 1]");
}

int main(void) {
    RUN(test_random_flip);
    TEST_MAIN_END();
}
