/* pipeline/fn/crop_bbox.c: crop_to_bounding_box exactly and its range errors (as
 * tf.image.crop_to_bounding_box), and distorted_bbox_crop's samples: inside the image,
 * within TF's area and aspect constraints, covering min_object_covered of a box, the same
 * per seed at any map parallelism, and the errors on bad boxes. */
#include <stdlib.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "helper_fn.h"
#include "test.h"

/* an H x W x 1 int32 image whose pixel (y, x) is 1000 y + x: a crop tells where it was */
static sl_tensor coords(int64_t H, int64_t W) {
    int64_t d[3] = {H, W, 1};
    sl_tensor t = sl_test_tensor(SL_DT_I32, 3, d, NULL);
    for (int64_t y = 0; y < H; y++)
        for (int64_t x = 0; x < W; x++) ((int32_t *)t.data)[y * W + x] = (int32_t)(1000 * y + x);
    return t;
}

TEST(test_crop_to_bounding_box) {
    sl_fn *fn;
    ASSERT_OK(sl_fn_crop_to_bounding_box("image", 2, 3, 4, 5, &fn));
    sl_element e;
    sl_test_elem1(&e, "image", coords(6, 8));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_EQ(e.t[0].dims[0], 4);
    ASSERT_EQ(e.t[0].dims[1], 5);
    const int32_t *o = e.t[0].data;
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 5; x++) ASSERT_EQ(o[y * 5 + x], 1000 * (y + 2) + x + 3);
    sl_element_clear(&e);
    /* out of range: 2 + 4 > 5 rows */
    sl_test_elem1(&e, "image", coords(5, 8));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "crop_to_bounding_box: the box at row 2, column 3 of 4x5 does not fit 'image'");
    sl_element_clear(&e);
    sl_test_elem1(&e, "image", coords(6, 7)); /* 3 + 5 > 7 columns */
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* the whole image: the very tensor */
    ASSERT_OK(sl_fn_crop_to_bounding_box("image", 0, 0, 6, 8, &fn));
    sl_test_elem1(&e, "image", coords(6, 8));
    void *before = e.t[0].data;
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT(e.t[0].data == before);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    ASSERT_EQ(sl_fn_crop_to_bounding_box("image", -1, 0, 1, 1, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "crop_to_bounding_box: offsets -1, 0 must be >= 0");
    ASSERT_EQ(sl_fn_crop_to_bounding_box("image", 0, 0, 0, 1, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "crop_to_bounding_box: target 0x1 must be at least 1x1");
    ASSERT(fn == NULL);
}

/* The crop of an H x W coords image: its rectangle. */
static void crop_rect(const sl_tensor *t, int64_t W, int *y, int *x, int *h, int *w) {
    int32_t v = ((const int32_t *)t->data)[0];
    *y = v / 1000;
    *x = v % 1000;
    *h = (int)t->dims[0];
    *w = (int)t->dims[1];
    (void)W;
}

TEST(test_distorted_bbox_crop_whole_image) {
    sl_fn *fn;
    ASSERT_OK(sl_fn_distorted_bbox_crop("image", NULL, 0.1, 0.75, 1.33, 0.05, 1.0, 100, true, &fn));
    const int H = 300, W = 400;
    double area_sum = 0;
    int full = 0;
    for (uint64_t seed = 0; seed < 300; seed++) {
        sl_element e;
        sl_test_elem1(&e, "image", coords(H, W));
        ASSERT_OK(sl_test_apply(fn, &e, seed));
        int y, x, h, w;
        crop_rect(&e.t[0], W, &y, &x, &h, &w);
        ASSERT(y >= 0 && x >= 0 && y + h <= H && x + w <= W);
        const int32_t *o = e.t[0].data; /* a true crop: the last pixel is where it should be */
        ASSERT_EQ(o[h * w - 1], 1000 * (y + h - 1) + x + w - 1);
        double frac = (double)h * w / (H * W), ar = (double)w / h;
        /* the whole image is the box: covering 0.1 of it means at least 0.1 of the area */
        ASSERT(frac >= 0.1 - 1e-9 && frac <= 1.0);
        if (h == H && w == W) full++;
        else ASSERT(ar > 0.75 * 0.97 && ar < 1.33 * 1.03);
        area_sum += frac;
        sl_element_clear(&e);
    }
    ASSERT(full < 30);
    ASSERT(area_sum / 300 > 0.3 && area_sum / 300 < 0.7);
    sl_fn_unref(fn);
}

TEST(test_distorted_bbox_crop_boxes) {
    sl_fn *fn;
    /* one box, the bottom-right quarter; 0.9 of it covered */
    ASSERT_OK(sl_fn_distorted_bbox_crop("image", "bbox", 0.9, 0.75, 1.33, 0.05, 1.0, 100, true, &fn));
    const int H = 200, W = 200;
    float box[4] = {0.5f, 0.5f, 1.0f, 1.0f};
    int64_t bd[2] = {1, 4};
    int sampled = 0;
    for (uint64_t seed = 0; seed < 200; seed++) {
        sl_element e;
        sl_test_elem1(&e, "image", coords(H, W));
        sl_tensor bt = sl_test_tensor(SL_DT_F32, 2, bd, box);
        ASSERT_OK(sl_element_set(&e, "bbox", &bt));
        ASSERT_OK(sl_test_apply(fn, &e, seed));
        int y, x, h, w;
        crop_rect(&e.t[0], W, &y, &x, &h, &w);
        int iy = (y + h < H ? y + h : H) - (y > 100 ? y : 100), ix = (x + w < W ? x + w : W) - (x > 100 ? x : 100);
        double cov = iy > 0 && ix > 0 ? (double)iy * ix / (100.0 * 100.0) : 0;
        if (!(h == H && w == W)) {
            ASSERT(cov >= 0.9);
            sampled++;
        }
        sl_element_clear(&e);
    }
    ASSERT(sampled > 150);
    /* errors: a coordinate outside [0, 1], a box upside down, the wrong dtype or shape */
    float bad[4] = {0.5f, 0.5f, 1.5f, 1.0f}, flip[4] = {0.6f, 0.1f, 0.5f, 0.9f};
    const float *bads[2] = {bad, flip};
    const char *msgs[2] = {"box 0 of 'bbox' has coordinate 1.5 outside [0, 1]",
                           "box 0 of 'bbox' is (0.6, 0.1, 0.5, 0.9): ymin > ymax or xmin > xmax"};
    for (int k = 0; k < 2; k++) {
        sl_element e;
        sl_test_elem1(&e, "image", coords(10, 10));
        sl_tensor bt = sl_test_tensor(SL_DT_F32, 2, bd, bads[k]);
        ASSERT_OK(sl_element_set(&e, "bbox", &bt));
        ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
        ASSERT_CONTAINS(sl_errmsg(), msgs[k]);
        sl_element_clear(&e);
    }
    sl_element e;
    sl_test_elem1(&e, "image", coords(10, 10));
    int64_t d3[1] = {4};
    sl_tensor bt = sl_test_tensor(SL_DT_F32, 1, d3, box);
    ASSERT_OK(sl_element_set(&e, "bbox", &bt));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "bounding boxes are float32 [n, 4]");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* no boxes and no whole-image fallback */
    ASSERT_OK(sl_fn_distorted_bbox_crop("image", "bbox", 0.1, 0.75, 1.33, 0.05, 1.0, 100, false, &fn));
    sl_test_elem1(&e, "image", coords(10, 10));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "no bounding boxes in 'bbox' and use_image_if_no_boxes is off");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* constructor errors */
    ASSERT_EQ(sl_fn_distorted_bbox_crop("image", NULL, 1.1, 0.75, 1.33, 0.05, 1.0, 100, true, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "distorted_bbox_crop: min_object_covered 1.1 must be in [0, 1]");
    ASSERT_EQ(sl_fn_distorted_bbox_crop("image", NULL, 0.1, 0.75, 1.33, 0.0, 1.0, 100, true, &fn), SL_EINVAL);
    ASSERT_EQ(sl_fn_distorted_bbox_crop("image", NULL, 0.1, 0.75, 1.33, 0.05, 1.0, 0, true, &fn), SL_EINVAL);
    ASSERT(fn == NULL);
}

/* value v -> a 40x30 coords-like image */
static sl_status synth(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    sl_tensor t = coords(40, 30);
    return sl_element_set(e, "image", &t);
}

TEST(test_distorted_bbox_crop_determinism) {
    sl_fn *fns[2], *chain;
    ASSERT_OK(sl_fn_custom("synth", synth, NULL, NULL, &fns[0]));
    ASSERT_OK(sl_fn_distorted_bbox_crop("image", NULL, 0.1, 0.75, 1.33, 0.05, 1.0, 100, true, &fns[1]));
    ASSERT_OK(sl_fn_chain(fns, 2, &chain));
    uint8_t *a, *b;
    size_t la, lb;
    sl_test_pipe p = {.count = 50, .parallelism = 1, .seed = 7};
    ASSERT_OK(sl_test_pipe_bytes(chain, &p, "image", NULL, &a, &la));
    p.parallelism = 4;
    ASSERT_OK(sl_test_pipe_bytes(chain, &p, "image", NULL, &b, &lb));
    ASSERT_EQ(la, lb);
    ASSERT_MEMEQ(a, b, la);
    ASSERT(la < 50 * 40 * 30 * 4); /* something was cropped */
    free(a);
    free(b);
    sl_fn_unref(fns[0]);
    sl_fn_unref(fns[1]);
    sl_fn_unref(chain);
}

int main(void) {
    RUN(test_crop_to_bounding_box);
    RUN(test_distorted_bbox_crop_whole_image);
    RUN(test_distorted_bbox_crop_boxes);
    RUN(test_distorted_bbox_crop_determinism);
    TEST_MAIN_END();
}
