/* pipeline/fn/resize.c: exact outputs on small hand-made images (uint8 rounded, float32
 * not), the half-pixel resampler and the antialiased one against straightforward references
 * in double (PIL's / torchvision's formula), Resize(N) of the shorter side, and the pixel
 * limit (resize's own, the crops', and a resize fused into decode_jpeg). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "pipeline/fn/image.h" /* and pipeline/internal.h */
#include "sluice/fn.h"
#include "helper_fn.h"
#include "helper_jpeg.h"
#include "test.h"

/* The half-pixel formula, written out plainly in double. */
static double ref_sample(const double *src, int64_t sh, int64_t sw, int64_t c, int64_t y, int64_t x,
                         int64_t k, int64_t dh, int64_t dw) {
    double sy = ((double)y + 0.5) * (double)sh / (double)dh - 0.5;
    double sx = ((double)x + 0.5) * (double)sw / (double)dw - 0.5;
    if (sy < 0) sy = 0;
    if (sx < 0) sx = 0;
    int64_t y0 = (int64_t)sy, x0 = (int64_t)sx;
    if (y0 > sh - 1) y0 = sh - 1;
    if (x0 > sw - 1) x0 = sw - 1;
    int64_t y1 = y0 + (y0 < sh - 1), x1 = x0 + (x0 < sw - 1);
    double ly = y1 == y0 ? 0 : sy - (double)y0, lx = x1 == x0 ? 0 : sx - (double)x0;
#define AT(yy, xx) src[((yy) * sw + (xx)) * c + k]
    return (1 - ly) * ((1 - lx) * AT(y0, x0) + lx * AT(y0, x1)) +
           ly * ((1 - lx) * AT(y1, x0) + lx * AT(y1, x1));
#undef AT
}

TEST(test_resize_by_hand) {
    /* 2x2 -> 4x4: source coordinates -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to 1) */
    uint8_t px[4] = {0, 100, 200, 40};
    int64_t d2[2] = {2, 2};
    sl_fn *fn;
    ASSERT_OK(sl_fn_resize("image", 4, 4, &fn));
    ASSERT_STREQ(sl_fn_name(fn), "resize");
    sl_element e;
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 2, d2, px));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    const sl_tensor *t = sl_test_comp(&e, "image");
    ASSERT_SHAPE2(t, SL_DT_U8, 4, 4);
    /* rows: r0 = 0 25 75 100, r3 = 200 160 80 40, r1 = .75 r0 + .25 r3, r2 = .25 r0 + .75 r3
     * (58.75 -> 59, 76.25 -> 76, 126.25 -> 126, 78.75 -> 79) */
    uint8_t want[16] = {0, 25, 75, 100, 50, 59, 76, 85, 150, 126, 79, 55, 200, 160, 80, 40};
    ASSERT_MEMEQ(t->data, want, 16);
    sl_element_clear(&e);

    /* the same in float32: no rounding */
    float fpx[4] = {0, 100, 200, 40};
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_F32, 2, d2, fpx));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    float fwant[16] = {0, 25, 75, 100, 50, 58.75f, 76.25f, 85, 150, 126.25f, 78.75f, 55, 200, 160, 80, 40};
    ASSERT_MEMEQ(sl_test_comp(&e, "image")->data, fwant, sizeof fwant);
    sl_element_clear(&e);
    sl_fn_unref(fn);

    /* 1x4x1 -> 1x2x1 without antialias: source columns 0.5 and 2.5, the means of pairs */
    float row[4] = {0, 10, 20, 30};
    int64_t d3[3] = {1, 4, 1};
    ASSERT_OK(sl_fn_resize("image", 1, 2, &fn));
    ASSERT_OK(sl_fn_set_antialias(fn, false));
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_F32, 3, d3, row));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    t = sl_test_comp(&e, "image");
    ASSERT_EQ(t->rank, 3);
    ASSERT_EQ(t->dims[1], 2);
    ASSERT_EQ(t->dims[2], 1);
    ASSERT(((float *)t->data)[0] == 5.0f && ((float *)t->data)[1] == 25.0f);
    sl_element_clear(&e);
    /* with it (the default): a triangle of half-width 2 around 1.0 and 3.0, weights
     * (3, 3, 1)/7 and (1, 3, 3)/7: 50/7 and 160/7 */
    ASSERT_OK(sl_fn_set_antialias(fn, true));
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_F32, 3, d3, row));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    t = sl_test_comp(&e, "image");
    ASSERT(fabs(((float *)t->data)[0] - 50.0 / 7) < 1e-5 && fabs(((float *)t->data)[1] - 160.0 / 7) < 1e-5);
    sl_element_clear(&e);
    sl_fn_unref(fn);

    /* already the size: the very same buffer comes back */
    int64_t d4[3] = {3, 5, 3};
    ASSERT_OK(sl_fn_resize("image", 3, 5, &fn));
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, d4, NULL));
    void *before = e.t[0].data;
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT(e.t[0].data == before);
    sl_element_clear(&e);

    /* wrong dtype, wrong rank, missing component */
    int64_t d5[3] = {4, 4, 1};
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_I32, 3, d5, NULL));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "resize: 'image' is int32[4,4,1]; resizing needs uint8 or float32 pixels\n"
                              "---> HINT: decode the image first, or cast it to float32");
    sl_element_clear(&e);
    int64_t d6[1] = {16};
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 1, d6, NULL));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "resize: 'image' is uint8[16]; an image must be [height, width, channels] "
                              "or [height, width]");
    sl_element_clear(&e);
    sl_test_elem1(&e, "label", sl_test_tensor(SL_DT_U8, 1, d6, NULL));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "resize: no component 'image' (the element has: label)");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    ASSERT_EQ(sl_fn_resize("image", 0, 5, &fn), SL_EINVAL);
    ASSERT(fn == NULL);
    ASSERT_STREQ(sl_errmsg(), "resize: size 0x5 must be at least 1x1");
}

/* n random bytes (from rng) in *u, the same as floats u * scale + off in *f and as doubles in
 * *dv, and room for m outputs in *uo and *fo (all malloc'd; the caller frees them) */
static void random_image(sl_rng *rng, size_t n, size_t m, float scale, float off, uint8_t **u, uint8_t **uo,
                         float **f, float **fo, double **dv) {
    *u = malloc(n), *uo = malloc(m);
    *f = malloc(n * 4), *fo = malloc(m * 4);
    *dv = malloc(n * 8);
    for (size_t i = 0; i < n; i++) {
        (*u)[i] = (uint8_t)(sl__rng_u64(rng) & 0xff);
        (*f)[i] = (float)(*u)[i] * scale + off;
        (*dv)[i] = (*u)[i];
    }
}

/* Up- and downscales of random images, 1 and 3 channels, against ref_sample. The library
 * computes in float, the reference in double: uint8 results may differ by one level where
 * the exact value is within float rounding of a .5 (bilinear weights like 0.2 and 0.5 make
 * exact ties common: a few per thousand values here), float results by rounding only. */
TEST(test_resize_against_reference) {
    const int64_t cases[][5] = {{37, 23, 3, 13, 29}, {20, 31, 1, 50, 61}, {64, 48, 3, 224, 224},
                                {500, 375, 3, 224, 224}, {7, 9, 4, 7, 3}, {1, 1, 3, 5, 2}};
    sl_rng rng = {42};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int64_t sh = cases[ci][0], sw = cases[ci][1], c = cases[ci][2], dh = cases[ci][3], dw = cases[ci][4];
        size_t n = (size_t)(sh * sw * c), m = (size_t)(dh * dw * c);
        uint8_t *u, *uo;
        float *f, *fo;
        double *dv;
        random_image(&rng, n, m, 0.37f, -20.0f, &u, &uo, &f, &fo, &dv);
        ASSERT_OK(sl__resize_u8(u, sh, sw, c, sw * c, 0, 0, (double)sh, (double)sw, uo, dh, dw));
        ASSERT_OK(sl__resize_f32(f, sh, sw, c, sw * c, 0, 0, (double)sh, (double)sw, fo, dh, dw));
        int off_by_one = 0;
        for (int64_t y = 0; y < dh; y++)
            for (int64_t x = 0; x < dw; x++)
                for (int64_t k = 0; k < c; k++) {
                    double r = ref_sample(dv, sh, sw, c, y, x, k, dh, dw);
                    int got = uo[(y * dw + x) * c + k], exp = (int)floor(r + 0.5);
                    if (got != exp) {
                        off_by_one++;
                        ASSERT(fabs(r - floor(r) - 0.5) < 0.01); /* only next to a tie */
                        ASSERT_EQ(abs(got - exp), 1);
                    }
                    double rf = r * 0.37 - 20.0; /* linear: same weights */
                    ASSERT(fabs(fo[(y * dw + x) * c + k] - rf) < 1e-3);
                }
        if (off_by_one * 100 > (int)m) FAILF("case %zu: %d of %zu values off by one", ci, off_by_one, m);
        free(u); free(uo); free(f); free(fo); free(dv);
    }
}

/* ---- antialiased resampling ---- */

/* PIL's / torchvision's antialiased bilinear, written out plainly in double for one output
 * sample: the 2-D weights are the products of each axis' normalized triangle weights (half-
 * width = the scale factor when shrinking, 1 otherwise, i.e. plain bilinear, edges clamped). */
static void ref_axis_weights(int64_t d, int64_t dn, int64_t sn, double r0, double rn, double *w) {
    double scale = rn / (double)dn, support = scale > 1 ? scale : 1.0;
    double centre = r0 + ((double)d + 0.5) * scale, sum = 0;
    for (int64_t j = 0; j < sn; j++) {
        double x = fabs(((double)j + 0.5 - centre) / support);
        w[j] = x < 1 ? 1 - x : 0;
        if (support == 1.0) { /* bilinear with the coordinate clamped to [0, sn - 1] */
            double c = centre - 0.5;
            if (c < 0) c = 0;
            if (c > (double)(sn - 1)) c = (double)(sn - 1);
            x = fabs((double)j - c);
            w[j] = x < 1 ? 1 - x : 0;
        }
        sum += w[j];
    }
    for (int64_t j = 0; j < sn; j++) w[j] /= sum;
}

static double ref_aa_sample(const double *src, int64_t sh, int64_t sw, int64_t c, double ry, double rx,
                            double rh, double rw, int64_t y, int64_t x, int64_t k, int64_t dh, int64_t dw) {
    double *wy = malloc(sizeof(double) * (size_t)sh), *wx = malloc(sizeof(double) * (size_t)sw), v = 0;
    ref_axis_weights(y, dh, sh, ry, rh, wy);
    ref_axis_weights(x, dw, sw, rx, rw, wx);
    for (int64_t j = 0; j < sh; j++)
        if (wy[j] != 0)
            for (int64_t i = 0; i < sw; i++) v += wy[j] * wx[i] * src[(j * sw + i) * c + k];
    free(wy);
    free(wx);
    return v;
}

TEST(test_resize_antialias_by_hand) {
    /* 4x4 -> 2x2, pixel (y, x) = 40y + 10x. Each axis shrinks by 2: output 0 has its centre
     * at 1.0 and weights tri((j + 0.5 - 1) / 2) = (3, 3, 1, 0)/7 on j = 0..3, output 1 (centre
     * 3.0) has (0, 1, 3, 3)/7 (j = 4 is outside). A linear image gives its value at the
     * weights' centroids, 5/7 and 16/7: (40 + 10) * 5/7 = 35.71, 40 * 5/7 + 10 * 16/7 = 51.43,
     * 40 * 16/7 + 10 * 5/7 = 98.57, 50 * 16/7 = 114.29. */
    uint8_t px[16];
    float fpx[16];
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++) px[y * 4 + x] = (uint8_t)(40 * y + 10 * x), fpx[y * 4 + x] = 40.0f * y + 10.0f * x;
    int64_t d[2] = {4, 4};
    sl_fn *fn;
    ASSERT_OK(sl_fn_resize("image", 2, 2, &fn)); /* antialias is the default */
    sl_element e;
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 2, d, px));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    uint8_t want[4] = {36, 51, 99, 114};
    ASSERT_MEMEQ(sl_test_comp(&e, "image")->data, want, 4);
    sl_element_clear(&e);
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_F32, 2, d, fpx));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    const float *fo = sl_test_comp(&e, "image")->data;
    const double fwant[4] = {250.0 / 7, 360.0 / 7, 690.0 / 7, 800.0 / 7};
    for (int i = 0; i < 4; i++) ASSERT(fabs(fo[i] - fwant[i]) < 1e-4);
    sl_element_clear(&e);
    /* antialias=false: 2-tap at 0.5 and 2.5, i.e. means of 2x2 blocks: 25, 45, 105, 125 */
    ASSERT_OK(sl_fn_set_antialias(fn, false));
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 2, d, px));
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    uint8_t want2[4] = {25, 45, 105, 125};
    ASSERT_MEMEQ(sl_test_comp(&e, "image")->data, want2, 4);
    sl_element_clear(&e);
    sl_fn_unref(fn);

    /* a constant image stays exactly constant, whatever the factors */
    int64_t dc[3] = {37, 23, 3};
    uint8_t *cpx = malloc(37 * 23 * 3);
    memset(cpx, 201, 37 * 23 * 3);
    const int sizes[][2] = {{5, 7}, {1, 1}, {36, 2}, {60, 11}};
    for (int k = 0; k < 4; k++) {
        ASSERT_OK(sl_fn_resize("image", sizes[k][0], sizes[k][1], &fn));
        sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, dc, cpx));
        ASSERT_OK(sl_test_apply(fn, &e, 0));
        const uint8_t *o = sl_test_comp(&e, "image")->data;
        for (int i = 0; i < sizes[k][0] * sizes[k][1] * 3; i++) ASSERT_EQ(o[i], 201);
        sl_element_clear(&e);
        sl_fn_unref(fn);
    }
    free(cpx);

    /* growing in both axes: antialias changes nothing, bit for bit */
    int64_t du[3] = {5, 7, 3};
    uint8_t upx[105];
    sl_rng rng = {3};
    for (int i = 0; i < 105; i++) upx[i] = (uint8_t)sl__rng_u64(&rng);
    sl_fn *aa, *plain;
    ASSERT_OK(sl_fn_resize("image", 13, 11, &aa));
    ASSERT_OK(sl_fn_resize("image", 13, 11, &plain));
    ASSERT_OK(sl_fn_set_antialias(plain, false));
    sl_element e2;
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, du, upx));
    sl_test_elem1(&e2, "image", sl_test_tensor(SL_DT_U8, 3, du, upx));
    ASSERT_OK(sl_test_apply(aa, &e, 0));
    ASSERT_OK(sl_test_apply(plain, &e2, 0));
    ASSERT_MEMEQ(sl_test_comp(&e, "image")->data, sl_test_comp(&e2, "image")->data, 13 * 11 * 3);
    sl_element_clear(&e);
    sl_element_clear(&e2);
    sl_fn_unref(aa);
    sl_fn_unref(plain);

    /* only the crops and resize have the setting */
    sl_fn *flip;
    ASSERT_OK(sl_fn_random_flip("image", true, false, 0.5, &flip));
    ASSERT_EQ(sl_fn_set_antialias(flip, true), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "random_flip has no antialias setting (only resize, center_crop and "
                              "random_resized_crop have one)");
    ASSERT_EQ(sl_fn_set_dct_scaling(flip, true), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "random_flip has no dct_scaling setting (only decode_jpeg has one)");
    ASSERT_EQ(sl_fn_set_jpeg_speed(flip, true, false), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "random_flip has no dct_method or fancy_upscaling setting (only decode_jpeg has them)");
    ASSERT_EQ(sl_fn_set_jpeg_speed(NULL, true, false), SL_EINVAL);
    sl_fn_unref(flip);
    ASSERT_EQ(sl_fn_set_antialias(NULL, true), SL_EINVAL);
}

/* Shrinking, growing and mixed cases, whole images and fractional regions (as the fused JPEG
 * path asks for), 1, 3 and 4 channels, against ref_aa_sample. float32 results agree within
 * 1e-3 (of values up to 255); uint8 ones are the reference rounded, except within 1e-3 of a
 * tie, where they may be one level off. */
TEST(test_resize_antialias_against_reference) {
    /* sh, sw, c, dh, dw, and the region (ry, rx, rh, rw) in tenths; rh = 0: the whole image */
    const int64_t cases[][9] = {
        {37, 23, 3, 13, 29, 0, 0, 0, 0},    {64, 48, 3, 20, 20, 0, 0, 0, 0},
        {500, 375, 3, 224, 224, 0, 0, 0, 0}, {20, 31, 1, 50, 6, 0, 0, 0, 0},
        {9, 7, 4, 2, 3, 0, 0, 0, 0},         {100, 80, 3, 17, 23, 33, 51, 621, 702},
        {45, 60, 3, 45, 60, 0, 0, 0, 0},     {31, 33, 1, 3, 1, 0, 0, 0, 0},
    };
    sl_rng rng = {77};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int64_t sh = cases[ci][0], sw = cases[ci][1], c = cases[ci][2], dh = cases[ci][3], dw = cases[ci][4];
        double ry = cases[ci][5] / 10.0, rx = cases[ci][6] / 10.0, rh = cases[ci][7] / 10.0, rw = cases[ci][8] / 10.0;
        if (cases[ci][7] == 0) rh = (double)sh, rw = (double)sw;
        size_t n = (size_t)(sh * sw * c), m = (size_t)(dh * dw * c);
        uint8_t *u, *uo;
        float *f, *fo;
        double *dv;
        random_image(&rng, n, m, 1.0f, 0.0f, &u, &uo, &f, &fo, &dv);
        ASSERT_OK(sl__resize_aa_u8(u, sh, sw, c, sw * c, ry, rx, rh, rw, uo, dh, dw));
        ASSERT_OK(sl__resize_aa_f32(f, sh, sw, c, sw * c, ry, rx, rh, rw, fo, dh, dw));
        int off = 0;
        double worst = 0;
        for (int64_t y = 0; y < dh; y++)
            for (int64_t x = 0; x < dw; x++)
                for (int64_t k = 0; k < c; k++) {
                    double r = ref_aa_sample(dv, sh, sw, c, ry, rx, rh, rw, y, x, k, dh, dw);
                    double df = fabs(fo[(y * dw + x) * c + k] - r);
                    if (df > worst) worst = df;
                    int got = uo[(y * dw + x) * c + k], exp = (int)floor(r + 0.5);
                    if (got != exp) {
                        off++;
                        if (fabs(r - floor(r) - 0.5) >= 1e-3 || abs(got - exp) != 1)
                            FAILF("case %zu (%lld, %lld, %lld): got %d, reference %.6f", ci, (long long)y,
                                  (long long)x, (long long)k, got, r);
                    }
                }
        if (worst >= 1e-3) FAILF("case %zu: float32 off by %g", ci, worst);
        free(u); free(uo); free(f); free(fo); free(dv);
    }
}

/* torchvision's Resize(N): the shorter side to N, the longer int(N * long / short). */
TEST(test_resize_shorter) {
    const int64_t cases[][5] = {
        /* H, W, N -> oh, ow */
        {500, 375, 256, 341, 256}, /* portrait: 256 * 500 / 375 = 341.33 */
        {375, 500, 256, 256, 341}, /* landscape */
        {300, 300, 256, 256, 256}, /* square */
        {333, 500, 224, 224, 336}, /* 224 * 500 / 333 = 336.34 */
        {101, 37, 10, 27, 10},     /* 1010 / 37 = 27.30 */
        {20, 30, 64, 64, 96},      /* growing: exactly 96 */
        {7, 1, 3, 21, 3},          /* 21 exactly */
        {256, 320, 256, 256, 320}, /* already the size: passes through */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int64_t d[3] = {cases[k][0], cases[k][1], 3};
        sl_fn *fn;
        ASSERT_OK(sl_fn_resize_shorter("image", (int)cases[k][2], &fn));
        ASSERT_STREQ(sl_fn_name(fn), "resize");
        sl_element e;
        sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, d, NULL));
        memset(e.t[0].data, 9, sl_tensor_nbytes(&e.t[0]));
        void *before = e.t[0].data;
        ASSERT_OK(sl_test_apply(fn, &e, 0));
        const sl_tensor *t = sl_test_comp(&e, "image");
        if (t->dims[0] != cases[k][3] || t->dims[1] != cases[k][4] || t->dims[2] != 3)
            FAILF("%lldx%lld shorter=%lld: got %lldx%lld", (long long)cases[k][0], (long long)cases[k][1],
                  (long long)cases[k][2], (long long)t->dims[0], (long long)t->dims[1]);
        ASSERT(((const uint8_t *)t->data)[0] == 9);
        ASSERT((t->data == before) == (k == 7));
        sl_element_clear(&e);
        sl_fn_unref(fn);
    }
    sl_fn *fn = (sl_fn *)1;
    ASSERT_EQ(sl_fn_resize_shorter("image", 0, &fn), SL_EINVAL);
    ASSERT(fn == NULL);
    ASSERT_STREQ(sl_errmsg(), "resize: shorter side 0 must be at least 1");
    /* the pixel limit applies to the output it computes */
    ASSERT_OK(sl_fn_resize_shorter("image", 100, &fn));
    ASSERT_OK(sl_fn_set_max_pixels(fn, 100 * 150));
    int64_t d[3] = {10, 16, 1};
    sl_element e;
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, d, NULL));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_ERANGE); /* 100 x 160 */
    ASSERT(strstr(sl_errmsg(), "the output would be 100x160 (16000 pixels)") != NULL);
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

TEST(test_resize_pixel_limit) {
    /* a 2x2x3 image resized to 200000 x 200000 would be 120 GB: refused before allocating */
    int64_t dims[3] = {2, 2, 3};
    sl_fn *rs;
    ASSERT_OK(sl_fn_resize("image", 200000, 200000, &rs));
    sl_element e;
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, dims, NULL));
    ASSERT_EQ(sl_test_apply(rs, &e, 0), SL_ERANGE);
    ASSERT_STREQ(sl_errmsg(), "resize: 'image': the output would be 200000x200000 (40000000000 pixels), over resize's "
                              "limit of 89478485 pixels\n---> HINT: raise it with resize(image, ..., "
                              "max_pixels=40000000000) in the config (sl_fn_set_max_pixels in C), or ask for a smaller size");
    ASSERT_EQ(sl_test_comp(&e, "image")->dims[0], 2); /* left as it was */
    sl_fn_unref(rs);
    /* the limit is the function's: 10x10 passes at 100, not at 99; the crops have one too
     * (the image is resized to 10x10, then cropped to 5x5) */
    sl_fn *rrc, *cc, *sc;
    ASSERT_OK(sl_fn_resize("image", 10, 10, &rs));
    ASSERT_OK(sl_fn_center_crop("image", 5, 5, &cc));
    const struct { sl_fn *fn; int64_t side; } fits[2] = {{rs, 10}, {cc, 5}};
    for (int k = 0; k < 2; k++) {
        ASSERT_OK(sl_fn_set_max_pixels(fits[k].fn, fits[k].side * fits[k].side - 1));
        ASSERT_EQ(sl_test_apply(fits[k].fn, &e, 0), SL_ERANGE);
        ASSERT_OK(sl_fn_set_max_pixels(fits[k].fn, fits[k].side * fits[k].side));
        ASSERT_OK(sl_test_apply(fits[k].fn, &e, 0));
        ASSERT_EQ(sl_test_comp(&e, "image")->dims[0], fits[k].side);
    }
    sl_fn_unref(rs);
    ASSERT_OK(sl_fn_random_resized_crop("image", 8, 8, 0.5, 1, 0.75, 1.333, &rrc));
    ASSERT_OK(sl_fn_set_max_pixels(rrc, 63));
    ASSERT_EQ(sl_test_apply(rrc, &e, 5), SL_ERANGE);
    ASSERT_CONTAINS(sl_errmsg(), "random_resized_crop: 'image': the output would be 8x8 (64 pixels), over "
                                 "random_resized_crop's limit of 63 pixels");
    ASSERT_OK(sl_fn_scale("image", 2.0, &sc));
    ASSERT_EQ(sl_fn_set_max_pixels(sc, 100), SL_EINVAL); /* scale has no limit */
    ASSERT_STREQ(sl_errmsg(), "scale has no pixel limit (only decode_jpeg, resize, center_crop and "
                              "random_resized_crop have one)");
    sl_element_clear(&e);
    sl_fn_unref(sc);
    sl_fn_unref(cc);
    sl_fn_unref(rrc);

    /* fused into decode_jpeg, a resize keeps its limit */
    size_t len;
    uint8_t *small = sl_test_flat_jpeg(64, 64, &len);
    sl_fn *fns[2], *chain;
    ASSERT_OK(sl_fn_decode_jpeg("image", 0, &fns[0]));
    ASSERT_OK(sl_fn_resize("image", 200000, 200000, &fns[1]));
    ASSERT_OK(sl_fn_chain(fns, 2, &chain));
    sl_test_elem1(&e, "image", sl_test_bytes(small, len, 0));
    ASSERT_EQ(sl_test_apply(chain, &e, 0), SL_ERANGE);
    ASSERT(strncmp(sl_errmsg(), "decode_jpeg: 'image': the output would be 200000x200000 (40000000000 pixels), over "
                   "resize's limit of 89478485 pixels", 110) == 0);
    sl_element_clear(&e);
    sl_fn_unref(chain);
    sl_fn_unref(fns[0]);
    sl_fn_unref(fns[1]);
    free(small);
}

int main(void) {
    RUN(test_resize_by_hand);
    RUN(test_resize_against_reference);
    RUN(test_resize_antialias_by_hand);
    RUN(test_resize_antialias_against_reference);
    RUN(test_resize_shorter);
    RUN(test_resize_pixel_limit);
    TEST_MAIN_END();
}
