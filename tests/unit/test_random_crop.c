/* random_crop (pipeline/fn/random_crop.c): every output is exactly one window of the
 * zero-padded image; over many seeds every window position occurs (the draws cover the
 * range) and no other; the same seed gives the same window; uint8 with 3 channels, float32
 * of rank 2; a window larger than the padded image and bad arguments are refused. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/fn/image.h" /* and pipeline/internal.h: sl__fn_apply */
#include "sluice/config.h"
#include "sluice/fn.h"
#include "sluice/from_config.h"
#include "test.h"

enum { H = 5, W = 4, C = 3, P = 2, CH = 6, CW = 5 };

/* pixel (y, x, c) of the padded image: 0 outside the image, else 1 + its index */
static uint8_t padded(int64_t y, int64_t x, int64_t c) {
    y -= P, x -= P;
    if (y < 0 || y >= H || x < 0 || x >= W) return 0;
    return (uint8_t)(1 + (y * W + x) * C + c);
}

/* the (top, left) whose window equals out, or -1 when none (or more than one) does */
static int find_window(const uint8_t *out) {
    int found = -1;
    for (int t = 0; t <= H + 2 * P - CH; t++)
        for (int l = 0; l <= W + 2 * P - CW; l++) {
            bool same = true;
            for (int y = 0; y < CH && same; y++)
                for (int x = 0; x < CW && same; x++)
                    for (int c = 0; c < C; c++)
                        if (out[(y * CW + x) * C + c] != padded(t + y, l + x, c)) same = false;
            if (same) {
                if (found >= 0) return -1;
                found = t * 16 + l;
            }
        }
    return found;
}

static sl_status crop(sl_fn *fn, sl_tensor in, uint64_t seed, sl_element *e) {
    sl_element_init(e);
    if (sl_element_set(e, "image", &in)) abort();
    return sl__fn_apply(fn, e, seed, 0, NULL);
}

TEST(test_windows) {
    uint8_t img[H * W * C];
    for (int i = 0; i < H * W * C; i++) img[i] = (uint8_t)(1 + i);
    int64_t d[3] = {H, W, C};
    sl_fn *fn;
    ASSERT_OK(sl_fn_random_crop("image", CH, CW, P, &fn));
    int seen[16 * 16] = {0};
    uint8_t first[CH * CW * C];
    for (uint64_t seed = 0; seed < 400; seed++) {
        sl_tensor in;
        ASSERT_OK(sl_tensor_alloc(&in, SL_DT_U8, 3, d));
        memcpy(in.data, img, sizeof img);
        sl_element e;
        ASSERT_OK(crop(fn, in, seed, &e));
        ASSERT_EQ(e.t[0].rank, 3);
        ASSERT_EQ(e.t[0].dims[0], CH);
        ASSERT_EQ(e.t[0].dims[1], CW);
        ASSERT_EQ(e.t[0].dims[2], C);
        int w = find_window(e.t[0].data);
        ASSERT(w >= 0);
        if (w >= 0) seen[w]++;
        if (seed == 0) memcpy(first, e.t[0].data, sizeof first);
        sl_element_clear(&e);
    }
    /* (H + 2P - CH + 1) x (W + 2P - CW + 1) = 4 x 4 positions, each drawn */
    int positions = 0;
    for (int i = 0; i < 256; i++) positions += seen[i] > 0;
    ASSERT_EQ(positions, 16);
    /* the same seed, the same window */
    sl_tensor in;
    ASSERT_OK(sl_tensor_alloc(&in, SL_DT_U8, 3, d));
    memcpy(in.data, img, sizeof img);
    sl_element e;
    ASSERT_OK(crop(fn, in, 0, &e));
    ASSERT_MEMEQ(e.t[0].data, first, sizeof first);
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

/* float32 [h, w]: padding 0 and the whole image is the image itself; padding 1, a 4x4
 * window of a 2x2 image is the image framed by zeros */
TEST(test_float_rank2) {
    float v[4] = {1.5f, -2, 3, 4.25f};
    int64_t d[2] = {2, 2};
    sl_fn *fn;
    ASSERT_OK(sl_fn_random_crop("image", 2, 2, 0, &fn));
    sl_tensor in;
    ASSERT_OK(sl_tensor_alloc(&in, SL_DT_F32, 2, d));
    memcpy(in.data, v, sizeof v);
    sl_element e;
    ASSERT_OK(crop(fn, in, 9, &e));
    ASSERT_EQ(e.t[0].rank, 2);
    ASSERT_MEMEQ(e.t[0].data, v, sizeof v);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    ASSERT_OK(sl_fn_random_crop("image", 4, 4, 1, &fn));
    ASSERT_OK(sl_tensor_alloc(&in, SL_DT_F32, 2, d));
    memcpy(in.data, v, sizeof v);
    ASSERT_OK(crop(fn, in, 3, &e));
    float want[16] = {0, 0, 0, 0, 0, 1.5f, -2, 0, 0, 3, 4.25f, 0, 0, 0, 0, 0};
    ASSERT_MEMEQ(e.t[0].data, want, sizeof want);
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

TEST(test_refused) {
    sl_fn *fn;
    ASSERT_EQ(sl_fn_random_crop("image", 0, 4, 0, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "random_crop: size 0x4 must be 1..65535 on each side");
    ASSERT_EQ(sl_fn_random_crop("image", 4, 4, -1, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "random_crop: padding -1 must be 0..65535");
    ASSERT_EQ(sl_fn_random_crop("", 4, 4, 0, &fn), SL_EINVAL);
    ASSERT_OK(sl_fn_random_crop("image", 9, 4, 2, &fn));
    int64_t d[3] = {4, 4, 1};
    sl_tensor in;
    ASSERT_OK(sl_tensor_alloc(&in, SL_DT_U8, 3, d));
    memset(in.data, 7, 16);
    sl_element e;
    ASSERT_EQ(crop(fn, in, 1, &e), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "a 9x4 window does not fit component 'image' of 4x4 padded by 2 (8x8)");
    ASSERT_EQ(e.t[0].dims[0], 4); /* the element is left as it was */
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

/* In the config language: random_crop(COMP, SIZE, padding=P) builds; a padding that is not
 * a number, or negative, is refused at its line and column with the usage as the hint. */
TEST(test_config) {
    const char *good = "pipeline p {\n  range 0 4\n  map random_crop(image, 28, padding=4)\n}\n";
    sl_cfg *cfg;
    ASSERT_OK(sl_cfg_parse(good, strlen(good), "rc.sl", &cfg));
    sl_pipeline_env env = sl_pipeline_env_default();
    sl_dataset *ds = NULL;
    ASSERT_OK(sl_pipeline_from_config(cfg, "p", &env, &ds));
    sl_dataset_unref(ds);
    sl_cfg_free(cfg);
    const char *bad[][2] = {
        {"pipeline p {\n  range 0 4\n  map random_crop(image, 28, padding=x)\n}\n",
         "rc.sl:3:38: expected an integer, found a word 'x'"},
        {"pipeline p {\n  range 0 4\n  map random_crop(image, 28, padding=-1)\n}\n", "rc.sl:3:38: "},
        {"pipeline p {\n  range 0 4\n  map random_crop(image)\n}\n", "rc.sl:3:"},
    };
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(sl_cfg_parse(bad[i][0], strlen(bad[i][0]), "rc.sl", &cfg));
        ds = NULL;
        ASSERT(sl_pipeline_from_config(cfg, "p", &env, &ds) != SL_OK);
        ASSERT(ds == NULL);
        ASSERT_CONTAINS(sl_errmsg(), bad[i][1]);
        ASSERT_CONTAINS(sl_errmsg(), "random_crop(COMP, SIZE, padding=0)");
        sl_cfg_free(cfg);
    }
}

int main(void) {
    RUN(test_windows);
    RUN(test_float_rank2);
    RUN(test_refused);
    RUN(test_config);
    TEST_MAIN_END();
}
