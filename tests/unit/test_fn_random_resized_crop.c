/* pipeline/fn/random_resized_crop.c: the crop rectangles' distribution and torchvision's
 * fallback, the function equal to its rectangle cropped and resized, and a random
 * augmentation pipeline (crop, flip, normalize) giving the same bytes at every map
 * parallelism, fused with its batch or not. */
#include <stdlib.h>

#include "pipeline/fn/image.h" /* and pipeline/internal.h */
#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "helper_fn.h"
#include "test.h"

TEST(test_random_resized_crop_distribution) {
    const double lo = 0.08, hi = 1.0, rlo = 3.0 / 4, rhi = 4.0 / 3;
    int distinct = 0;
    sl__rect prev = {-1, -1, -1, -1};
    double area_sum = 0;
    for (uint64_t seed = 0; seed < 2000; seed++) {
        sl__rect r = sl__rrc_rect(480, 640, lo, hi, rlo, rhi, seed);
        ASSERT(r.y >= 0 && r.x >= 0 && r.h >= 1 && r.w >= 1);
        ASSERT(r.y + r.h <= 480 && r.x + r.w <= 640);
        double frac = (double)(r.h * r.w) / (480.0 * 640.0), ratio = (double)r.w / (double)r.h;
        ASSERT(frac >= lo * 0.97 && frac <= hi * 1.0001);
        ASSERT(ratio >= rlo * 0.97 && ratio <= rhi * 1.03);
        area_sum += frac;
        sl__rect again = sl__rrc_rect(480, 640, lo, hi, rlo, rhi, seed);
        ASSERT(memcmp(&r, &again, sizeof r) == 0); /* determined by the seed */
        if (memcmp(&r, &prev, sizeof r) != 0) distinct++;
        prev = r;
    }
    ASSERT(distinct >= 1990);
    /* mean accepted area fraction: near the uniform mean 0.54 (large draws are rejected
     * more often on a 4:3 image, so a bit lower) */
    ASSERT(area_sum / 2000 > 0.40 && area_sum / 2000 < 0.58);
    /* no try can fit a square of half the area into 10x1000: torchvision's fallback, the
     * whole height with the widest allowed ratio (1), centered */
    sl__rect f = sl__rrc_rect(10, 1000, 0.5, 1.0, 1.0, 1.0, 7);
    ASSERT_EQ(f.y, 0); ASSERT_EQ(f.h, 10); ASSERT_EQ(f.w, 10); ASSERT_EQ(f.x, 495);
    f = sl__rrc_rect(1000, 10, 0.5, 1.0, 2.0, 3.0, 7); /* too tall: full width, h = w / 2 */
    ASSERT_EQ(f.x, 0); ASSERT_EQ(f.w, 10); ASSERT_EQ(f.h, 5); ASSERT_EQ(f.y, 497);

    /* the function = that rectangle, cropped and resized */
    int64_t d[3] = {48, 64, 3};
    uint8_t *px = malloc(48 * 64 * 3);
    for (int i = 0; i < 48 * 64 * 3; i++) px[i] = (uint8_t)(i * 7 + i / 191);
    sl_fn *fn;
    ASSERT_OK(sl_fn_random_resized_crop("image", 32, 24, lo, hi, rlo, rhi, &fn));
    for (uint64_t seed = 0; seed < 20; seed++) {
        sl_element e;
        sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, d, px));
        ASSERT_OK(sl_test_apply(fn, &e, seed));
        ASSERT_EQ(e.t[0].dims[0], 32);
        ASSERT_EQ(e.t[0].dims[1], 24);
        ASSERT_EQ(e.t[0].dims[2], 3);
        sl__rect r = sl__rrc_rect(48, 64, lo, hi, rlo, rhi, seed);
        uint8_t want[32 * 24 * 3];
        ASSERT_OK(sl__resize_aa_u8(px + (r.y * 64 + r.x) * 3, r.h, r.w, 3, 64 * 3, 0, 0, (double)r.h,
                                (double)r.w, want, 32, 24));
        ASSERT_MEMEQ(e.t[0].data, want, sizeof want);
        sl_element_clear(&e);
    }
    free(px);
    sl_fn_unref(fn);
    ASSERT_EQ(sl_fn_random_resized_crop("image", 8, 8, 0.5, 0.2, rlo, rhi, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "random_resized_crop: scale range [0.5, 0.2] must satisfy 0 < lo <= hi");
}

/* value v -> a synthetic 64x48x3 uint8 image (content depends on v) */
static sl_status synth_image(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    int64_t v = *(int64_t *)e->t[sl_element_find(e, "value")].data;
    int64_t d[3] = {64, 48, 3};
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_U8, 3, d);
    if (s) return s;
    uint8_t *p = t.data;
    for (int y = 0; y < 64; y++)
        for (int x = 0; x < 48; x++)
            for (int c = 0; c < 3; c++)
                p[(y * 48 + x) * 3 + c] = (uint8_t)(y * 3 + x * 5 * (c + 1) + v * 17 + (x * y) % 7);
    return sl_element_set(e, "image", &t);
}

/* All batches of one run, concatenated: range(0, 100) | map(chain) | batch 8 with the
 * pipeline seed 1234, every image float32 [B, 32, 32, C]. */
static sl_status run_pipeline(sl_fn *chain, int par, bool fused, uint8_t **out, size_t *len) {
    sl_test_pipe p = {.count = 100, .parallelism = par, .batch = 8, .fused = fused, .seed = 1234};
    sl_tensor like = {.dtype = SL_DT_F32, .rank = 4, .dims = {-1, 32, 32, -1}};
    return sl_test_pipe_bytes(chain, &p, "image", &like, out, len);
}

TEST(test_determinism_across_parallelism) {
    sl_fn *fns[4];
    ASSERT_OK(sl_fn_custom("synth", synth_image, NULL, NULL, &fns[0]));
    ASSERT_OK(sl_fn_random_resized_crop("image", 32, 32, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &fns[1]));
    ASSERT_OK(sl_fn_random_flip("image", true, false, 0.5, &fns[2]));
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    ASSERT_OK(sl_fn_normalize("image", mean, std, 3, true, &fns[3]));
    sl_fn *chain;
    ASSERT_OK(sl_fn_chain(fns, 4, &chain));
    ASSERT_STREQ(sl_fn_name(chain), "synth|random_resized_crop|random_flip|normalize");
    uint8_t *ref = NULL;
    size_t ref_len = 0;
    const int pars[3] = {1, 2, 8};
    for (int k = 0; k < 3; k++)
        for (int rep = 0; rep < 2; rep++) {
            uint8_t *got;
            size_t len;
            ASSERT_OK(run_pipeline(chain, pars[k], true, &got, &len));
            ASSERT_EQ(len, 100 * 32 * 32 * 3 * 4);
            if (!ref) {
                ref = got;
                ref_len = len;
                continue;
            }
            ASSERT_EQ(len, ref_len);
            if (memcmp(got, ref, len) != 0) FAILF("parallelism %d run %d differs", pars[k], rep);
            free(got);
        }
    /* map then an unfused batch gives the same bytes */
    uint8_t *got;
    size_t len;
    ASSERT_OK(run_pipeline(chain, 3, false, &got, &len));
    ASSERT_EQ(len, ref_len);
    ASSERT_MEMEQ(got, ref, len);
    free(got);
    /* and the augmentation does vary: consecutive images are not the same crop */
    size_t img = 32 * 32 * 3 * 4;
    int same = 0;
    for (int i = 0; i + 1 < 100; i++) same += memcmp(ref + i * img, ref + (i + 1) * img, img) == 0;
    ASSERT_EQ(same, 0);
    free(ref);
    sl_fn_unref(chain);
    for (int i = 0; i < 4; i++) sl_fn_unref(fns[i]);
}

int main(void) {
    RUN(test_random_resized_crop_distribution);
    RUN(test_determinism_across_parallelism);
    TEST_MAIN_END();
}
