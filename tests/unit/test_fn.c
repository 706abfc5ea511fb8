/* pipeline/fn/: the stock element functions — exact outputs on small hand-made tensors,
 * the resampler against a straightforward reference of the half-pixel formula,
 * parse_example on Examples built with sl_exb_*, random_resized_crop's crop distribution,
 * decode_jpeg fused with a crop/resize against the unfused chain, and the determinism of a
 * random augmentation pipeline across map parallelism. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>

#include "pipeline/fn/image.h" /* and pipeline/internal.h */
#include "sluice/example.h"
#include "sluice/fn.h"
#include "sluice/jpeg.h"
#include "sluice/pipeline.h"
#include "sluice/tfrecord.h"
#include "helper_jpeg.h"
#include "test.h"

/* ---- helpers ---- */

static sl_tensor tensor_of(sl_dtype dt, int rank, const int64_t *dims, const void *vals) {
    sl_tensor t;
    if (sl_tensor_alloc(&t, dt, rank, dims)) abort();
    if (vals) memcpy(t.data, vals, sl_tensor_nbytes(&t));
    return t;
}

/* A bytes scalar whose value lies `offset` bytes into its own buffer (the aux). */
static sl_tensor bytes_of(const void *data, size_t len, size_t offset) {
    sl_buf *b = sl_buf_new(len + offset);
    if (!b) abort();
    memset(b->data, 0xee, offset);
    if (len) memcpy((uint8_t *)b->data + offset, data, len);
    sl_tensor t;
    if (sl_tensor_alloc(&t, SL_DT_BYTES, 0, NULL)) abort();
    *(sl_bytes *)t.data = (sl_bytes){(const uint8_t *)b->data + offset, len};
    t.aux = b;
    return t;
}

static void elem1(sl_element *e, const char *name, sl_tensor t) {
    sl_element_init(e);
    if (sl_element_set(e, name, &t)) abort();
}

static sl_status apply(sl_fn *fn, sl_element *e, uint64_t seed) {
    return sl__fn_apply(fn, e, seed, 0, NULL);
}

static const sl_tensor *comp(const sl_element *e, const char *name) {
    int i = sl_element_find(e, name);
    return i < 0 ? NULL : &e->t[i];
}

/* ---- the resampler ---- */

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

/* t is a DT tensor of shape D0 x D1 */
#define ASSERT_SHAPE2(t, dt, d0, d1)  \
    do {                              \
        ASSERT_EQ((t)->dtype, dt);    \
        ASSERT_EQ((t)->rank, 2);      \
        ASSERT_EQ((t)->dims[0], d0);  \
        ASSERT_EQ((t)->dims[1], d1);  \
    } while (0)

TEST(test_resize_by_hand) {
    /* 2x2 -> 4x4: source coordinates -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to 1) */
    uint8_t px[4] = {0, 100, 200, 40};
    int64_t d2[2] = {2, 2};
    sl_fn *fn;
    ASSERT_OK(sl_fn_resize("image", 4, 4, &fn));
    ASSERT_STREQ(sl_fn_name(fn), "resize");
    sl_element e;
    elem1(&e, "image", tensor_of(SL_DT_U8, 2, d2, px));
    ASSERT_OK(apply(fn, &e, 0));
    const sl_tensor *t = comp(&e, "image");
    ASSERT_SHAPE2(t, SL_DT_U8, 4, 4);
    /* rows: r0 = 0 25 75 100, r3 = 200 160 80 40, r1 = .75 r0 + .25 r3, r2 = .25 r0 + .75 r3
     * (58.75 -> 59, 76.25 -> 76, 126.25 -> 126, 78.75 -> 79) */
    uint8_t want[16] = {0, 25, 75, 100, 50, 59, 76, 85, 150, 126, 79, 55, 200, 160, 80, 40};
    ASSERT_MEMEQ(t->data, want, 16);
    sl_element_clear(&e);

    /* the same in float32: no rounding */
    float fpx[4] = {0, 100, 200, 40};
    elem1(&e, "image", tensor_of(SL_DT_F32, 2, d2, fpx));
    ASSERT_OK(apply(fn, &e, 0));
    float fwant[16] = {0, 25, 75, 100, 50, 58.75f, 76.25f, 85, 150, 126.25f, 78.75f, 55, 200, 160, 80, 40};
    ASSERT_MEMEQ(comp(&e, "image")->data, fwant, sizeof fwant);
    sl_element_clear(&e);
    sl_fn_unref(fn);

    /* 1x4x1 -> 1x2x1 without antialias: source columns 0.5 and 2.5, the means of pairs */
    float row[4] = {0, 10, 20, 30};
    int64_t d3[3] = {1, 4, 1};
    ASSERT_OK(sl_fn_resize("image", 1, 2, &fn));
    ASSERT_OK(sl_fn_set_antialias(fn, false));
    elem1(&e, "image", tensor_of(SL_DT_F32, 3, d3, row));
    ASSERT_OK(apply(fn, &e, 0));
    t = comp(&e, "image");
    ASSERT_EQ(t->rank, 3);
    ASSERT_EQ(t->dims[1], 2);
    ASSERT_EQ(t->dims[2], 1);
    ASSERT(((float *)t->data)[0] == 5.0f && ((float *)t->data)[1] == 25.0f);
    sl_element_clear(&e);
    /* with it (the default): a triangle of half-width 2 around 1.0 and 3.0, weights
     * (3, 3, 1)/7 and (1, 3, 3)/7: 50/7 and 160/7 */
    ASSERT_OK(sl_fn_set_antialias(fn, true));
    elem1(&e, "image", tensor_of(SL_DT_F32, 3, d3, row));
    ASSERT_OK(apply(fn, &e, 0));
    t = comp(&e, "image");
    ASSERT(fabs(((float *)t->data)[0] - 50.0 / 7) < 1e-5 && fabs(((float *)t->data)[1] - 160.0 / 7) < 1e-5);
    sl_element_clear(&e);
    sl_fn_unref(fn);

    /* already the size: the very same buffer comes back */
    int64_t d4[3] = {3, 5, 3};
    ASSERT_OK(sl_fn_resize("image", 3, 5, &fn));
    elem1(&e, "image", tensor_of(SL_DT_U8, 3, d4, NULL));
    void *before = e.t[0].data;
    ASSERT_OK(apply(fn, &e, 0));
    ASSERT(e.t[0].data == before);
    sl_element_clear(&e);

    /* wrong dtype, wrong rank, missing component */
    int64_t d5[3] = {4, 4, 1};
    elem1(&e, "image", tensor_of(SL_DT_I32, 3, d5, NULL));
    ASSERT_EQ(apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "resize: 'image' is int32[4,4,1]; resizing needs uint8 or float32 pixels\n"
                              "---> HINT: decode the image first, or cast it to float32");
    sl_element_clear(&e);
    int64_t d6[1] = {16};
    elem1(&e, "image", tensor_of(SL_DT_U8, 1, d6, NULL));
    ASSERT_EQ(apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "resize: 'image' is uint8[16]; an image must be [height, width, channels] "
                              "or [height, width]");
    sl_element_clear(&e);
    elem1(&e, "label", tensor_of(SL_DT_U8, 1, d6, NULL));
    ASSERT_EQ(apply(fn, &e, 0), SL_EINVAL);
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
    elem1(&e, "image", tensor_of(SL_DT_U8, 2, d, px));
    ASSERT_OK(apply(fn, &e, 0));
    uint8_t want[4] = {36, 51, 99, 114};
    ASSERT_MEMEQ(comp(&e, "image")->data, want, 4);
    sl_element_clear(&e);
    elem1(&e, "image", tensor_of(SL_DT_F32, 2, d, fpx));
    ASSERT_OK(apply(fn, &e, 0));
    const float *fo = comp(&e, "image")->data;
    const double fwant[4] = {250.0 / 7, 360.0 / 7, 690.0 / 7, 800.0 / 7};
    for (int i = 0; i < 4; i++) ASSERT(fabs(fo[i] - fwant[i]) < 1e-4);
    sl_element_clear(&e);
    /* antialias=false: 2-tap at 0.5 and 2.5, i.e. means of 2x2 blocks: 25, 45, 105, 125 */
    ASSERT_OK(sl_fn_set_antialias(fn, false));
    elem1(&e, "image", tensor_of(SL_DT_U8, 2, d, px));
    ASSERT_OK(apply(fn, &e, 0));
    uint8_t want2[4] = {25, 45, 105, 125};
    ASSERT_MEMEQ(comp(&e, "image")->data, want2, 4);
    sl_element_clear(&e);
    sl_fn_unref(fn);

    /* a constant image stays exactly constant, whatever the factors */
    int64_t dc[3] = {37, 23, 3};
    uint8_t *cpx = malloc(37 * 23 * 3);
    memset(cpx, 201, 37 * 23 * 3);
    const int sizes[][2] = {{5, 7}, {1, 1}, {36, 2}, {60, 11}};
    for (int k = 0; k < 4; k++) {
        ASSERT_OK(sl_fn_resize("image", sizes[k][0], sizes[k][1], &fn));
        elem1(&e, "image", tensor_of(SL_DT_U8, 3, dc, cpx));
        ASSERT_OK(apply(fn, &e, 0));
        const uint8_t *o = comp(&e, "image")->data;
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
    elem1(&e, "image", tensor_of(SL_DT_U8, 3, du, upx));
    elem1(&e2, "image", tensor_of(SL_DT_U8, 3, du, upx));
    ASSERT_OK(apply(aa, &e, 0));
    ASSERT_OK(apply(plain, &e2, 0));
    ASSERT_MEMEQ(comp(&e, "image")->data, comp(&e2, "image")->data, 13 * 11 * 3);
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
        elem1(&e, "image", tensor_of(SL_DT_U8, 3, d, NULL));
        memset(e.t[0].data, 9, sl_tensor_nbytes(&e.t[0]));
        void *before = e.t[0].data;
        ASSERT_OK(apply(fn, &e, 0));
        const sl_tensor *t = comp(&e, "image");
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
    elem1(&e, "image", tensor_of(SL_DT_U8, 3, d, NULL));
    ASSERT_EQ(apply(fn, &e, 0), SL_ERANGE); /* 100 x 160 */
    ASSERT(strstr(sl_errmsg(), "the output would be 100x160 (16000 pixels)") != NULL);
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

/* ---- flip, crop, normalize, cast, scale ---- */

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
        elem1(&e, "image", tensor_of(SL_DT_U8, 3, d, px));
        ASSERT_OK(apply(fn, &e, 99));
        ASSERT_MEMEQ(e.t[0].data, cases[k].want, 12);
        sl_element_clear(&e);
        sl_fn_unref(fn);
    }
    /* p = 0: untouched, same buffer; float32 and rank 2 work too */
    sl_fn *fn;
    ASSERT_OK(sl_fn_random_flip("image", true, true, 0.0, &fn));
    sl_element e;
    elem1(&e, "image", tensor_of(SL_DT_U8, 3, d, px));
    void *before = e.t[0].data;
    ASSERT_OK(apply(fn, &e, 5));
    ASSERT(e.t[0].data == before);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    ASSERT_OK(sl_fn_random_flip("image", true, false, 1.0, &fn));
    float fl[6] = {1, 2, 3, 4, 5, 6}, flw[6] = {3, 2, 1, 6, 5, 4};
    int64_t d2[2] = {2, 3};
    elem1(&e, "image", tensor_of(SL_DT_F32, 2, d2, fl));
    ASSERT_OK(apply(fn, &e, 5));
    ASSERT_MEMEQ(e.t[0].data, flw, sizeof flw);
    ASSERT_MEMEQ(fl, ((float[]){1, 2, 3, 4, 5, 6}), sizeof fl); /* the input buffer is not written */
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* p = 0.5: about half flip, decided by the seed alone */
    ASSERT_OK(sl_fn_random_flip("image", true, false, 0.5, &fn));
    int flipped = 0;
    for (uint64_t seed = 0; seed < 1000; seed++) {
        elem1(&e, "image", tensor_of(SL_DT_F32, 2, d2, fl));
        ASSERT_OK(apply(fn, &e, seed));
        int f1 = ((float *)e.t[0].data)[0] == 3;
        sl_element_clear(&e);
        elem1(&e, "image", tensor_of(SL_DT_F32, 2, d2, fl));
        ASSERT_OK(apply(fn, &e, seed));
        ASSERT_EQ(((float *)e.t[0].data)[0] == 3, f1);
        sl_element_clear(&e);
        flipped += f1;
    }
    ASSERT(flipped > 430 && flipped < 570);
    sl_fn_unref(fn);
    ASSERT_EQ(sl_fn_random_flip("image", true, false, 1.5, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "random_flip: probability 1.5 must be in [0, 1]");
}

TEST(test_center_crop) {
    /* 4x5x1, crop 2x2: top round(1.0) = 1, left round(1.5) = 2 (ties to even) */
    uint8_t px[20];
    for (int i = 0; i < 20; i++) px[i] = (uint8_t)i;
    int64_t d[3] = {4, 5, 1};
    sl_fn *fn;
    ASSERT_OK(sl_fn_center_crop("image", 2, 2, &fn));
    sl_element e;
    elem1(&e, "image", tensor_of(SL_DT_U8, 3, d, px));
    ASSERT_OK(apply(fn, &e, 0));
    ASSERT_EQ(e.t[0].dims[0], 2);
    ASSERT_EQ(e.t[0].dims[1], 2);
    ASSERT_EQ(e.t[0].dims[2], 1);
    ASSERT_MEMEQ(e.t[0].data, ((uint8_t[]){7, 8, 12, 13}), 4);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* larger than the image in one dimension: that dimension is kept whole (no padding) */
    ASSERT_OK(sl_fn_center_crop("image", 10, 3, &fn));
    elem1(&e, "image", tensor_of(SL_DT_U8, 3, d, px));
    ASSERT_OK(apply(fn, &e, 0));
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
    elem1(&e, "image", tensor_of(SL_DT_I64, 2, d2, big));
    ASSERT_OK(apply(fn, &e, 0));
    ASSERT_EQ(((int64_t *)e.t[0].data)[3], 1000000000013LL);
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

TEST(test_normalize) {
    const float mean[3] = {0.5f, 0.5f, 0.25f}, std[3] = {0.5f, 0.25f, 0.5f};
    sl_fn *fn;
    ASSERT_OK(sl_fn_normalize("image", mean, std, 3, true, &fn));
    uint8_t px[6] = {0, 255, 51, 255, 0, 128};
    int64_t d[3] = {1, 2, 3};
    sl_element e;
    elem1(&e, "image", tensor_of(SL_DT_U8, 3, d, px));
    ASSERT_OK(apply(fn, &e, 0));
    const sl_tensor *t = comp(&e, "image");
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
    elem1(&e, "image", tensor_of(SL_DT_F32, 1, d1, fx));
    ASSERT_OK(apply(fn, &e, 0));
    o = e.t[0].data;
    ASSERT(o[0] == 2.0f && o[1] == 0.0f && o[2] == 0.0f);
    sl_element_clear(&e);
    /* 2 channels for 3 values */
    int64_t d2[2] = {3, 2};
    elem1(&e, "image", tensor_of(SL_DT_U8, 2, d2, px));
    ASSERT_EQ(apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "normalize: 'image' is uint8[3,2]: 2 channels, but 3 means and stds were given");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* one pair applies to everything, without scaling */
    float m1 = 10, s1 = 2;
    ASSERT_OK(sl_fn_normalize("x", &m1, &s1, 1, false, &fn));
    int16_t iv[4] = {-10, 0, 10, 20};
    int64_t d4[2] = {2, 2};
    elem1(&e, "x", tensor_of(SL_DT_I16, 2, d4, iv));
    ASSERT_OK(apply(fn, &e, 0));
    ASSERT_MEMEQ(e.t[0].data, ((float[]){-10, -5, 0, 5}), 16);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    float zero = 0;
    ASSERT_EQ(sl_fn_normalize("x", &m1, &zero, 1, false, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "normalize: channel 0 has mean 10 and std 0; std must be finite and non-zero");
}

TEST(test_cast_saturates) {
    float fx[7] = {-1.5f, 300.7f, NAN, 1e30f, -1e30f, 0.9f, 127.9f};
    int64_t d[1] = {7};
    struct { sl_dtype dt; int64_t want[7]; } cases[] = {
        {SL_DT_U8, {0, 255, 0, 255, 0, 0, 127}},
        {SL_DT_I8, {-1, 127, 0, 127, -128, 0, 127}},
        {SL_DT_U16, {0, 300, 0, 65535, 0, 0, 127}},
        {SL_DT_I32, {-1, 300, 0, INT32_MAX, INT32_MIN, 0, 127}},
        {SL_DT_U32, {0, 300, 0, UINT32_MAX, 0, 0, 127}},
        {SL_DT_I64, {-1, 300, 0, INT64_MAX, INT64_MIN, 0, 127}},
        {SL_DT_BOOL, {1, 1, 1, 1, 1, 1, 1}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        sl_fn *fn;
        ASSERT_OK(sl_fn_cast("x", cases[k].dt, &fn));
        sl_element e;
        elem1(&e, "x", tensor_of(SL_DT_F32, 1, d, fx));
        ASSERT_OK(apply(fn, &e, 0));
        ASSERT_EQ(e.t[0].dtype, cases[k].dt);
        for (int i = 0; i < 7; i++) {
            int64_t got = sl__num_get_i64(e.t[0].data, cases[k].dt, i);
            if (got != cases[k].want[i]) FAILF("cast to %s: value %d: %lld != %lld",
                                               sl_dtype_name(cases[k].dt), i, (long long)got,
                                               (long long)cases[k].want[i]);
        }
        sl_element_clear(&e);
        sl_fn_unref(fn);
    }
    /* integer to integer saturates exactly through int64 */
    int64_t iv[4] = {INT64_MAX, INT64_MIN, -129, 40000};
    int64_t d4[1] = {4};
    sl_fn *fn;
    ASSERT_OK(sl_fn_cast("x", SL_DT_I16, &fn));
    sl_element e;
    elem1(&e, "x", tensor_of(SL_DT_I64, 1, d4, iv));
    ASSERT_OK(apply(fn, &e, 0));
    ASSERT_MEMEQ(e.t[0].data, ((int16_t[]){32767, -32768, -129, 32767}), 8);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* to half precision (round to nearest even, overflow to infinity) and back */
    float hx[5] = {1.0f, 65504.0f, 70000.0f, -2.0f, 0x1p-24f};
    int64_t d5[1] = {5};
    ASSERT_OK(sl_fn_cast("x", SL_DT_F16, &fn));
    elem1(&e, "x", tensor_of(SL_DT_F32, 1, d5, hx));
    ASSERT_OK(apply(fn, &e, 0));
    ASSERT_MEMEQ(e.t[0].data, ((uint16_t[]){0x3c00, 0x7bff, 0x7c00, 0xc000, 0x0001}), 10);
    sl_fn_unref(fn);
    ASSERT_OK(sl_fn_cast("x", SL_DT_F32, &fn));
    ASSERT_OK(apply(fn, &e, 0));
    ASSERT_MEMEQ(e.t[0].data, ((float[]){1.0f, 65504.0f, INFINITY, -2.0f, 0x1p-24f}), 20);
    /* already float32: shared, not copied */
    void *before = e.t[0].data;
    ASSERT_OK(apply(fn, &e, 0));
    ASSERT(e.t[0].data == before);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    ASSERT_OK(sl_fn_cast("x", SL_DT_BF16, &fn));
    elem1(&e, "x", tensor_of(SL_DT_F32, 1, d5, hx));
    ASSERT_OK(apply(fn, &e, 0));
    ASSERT_EQ(((uint16_t *)e.t[0].data)[0], 0x3f80);
    ASSERT_EQ(((uint16_t *)e.t[0].data)[3], 0xc000);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* bytes cannot be cast; bytes is not a target */
    ASSERT_OK(sl_fn_cast("x", SL_DT_F32, &fn));
    elem1(&e, "x", bytes_of("ab", 2, 0));
    ASSERT_EQ(apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "cast: 'x' is bytes[], not numbers");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    ASSERT_EQ(sl_fn_cast("x", SL_DT_BYTES, &fn), SL_EINVAL);
}

TEST(test_scale) {
    sl_fn *fn;
    ASSERT_OK(sl_fn_scale("x", 0.5, &fn));
    uint8_t u[3] = {0, 2, 255};
    int64_t d[1] = {3};
    sl_element e;
    elem1(&e, "x", tensor_of(SL_DT_U8, 1, d, u));
    ASSERT_OK(apply(fn, &e, 0));
    ASSERT_EQ(e.t[0].dtype, SL_DT_F32);
    ASSERT_MEMEQ(e.t[0].data, ((float[]){0, 1, 127.5f}), 12);
    sl_element_clear(&e);
    int64_t iv[2] = {-4, 1LL << 40};
    int64_t d2[1] = {2};
    elem1(&e, "x", tensor_of(SL_DT_I64, 1, d2, iv));
    ASSERT_OK(apply(fn, &e, 0));
    ASSERT_MEMEQ(e.t[0].data, ((float[]){-2, 0x1p39f}), 8);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    ASSERT_OK(sl_fn_scale("x", 1.0 / 255, &fn));
    elem1(&e, "x", tensor_of(SL_DT_U8, 1, d, u));
    ASSERT_OK(apply(fn, &e, 0));
    ASSERT(((float *)e.t[0].data)[1] == (float)(2.0 / 255) && ((float *)e.t[0].data)[2] == 1.0f);
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

/* ---- decode_raw, one_hot ---- */

TEST(test_decode_raw) {
    uint16_t vals[6] = {1, 2, 3, 0xffff, 5, 6};
    int64_t dims[2] = {2, 3};
    sl_fn *fn;
    ASSERT_OK(sl_fn_decode_raw("raw", SL_DT_U16, 2, dims, &fn));
    for (size_t offset = 0; offset < 2; offset++) {
        sl_element e;
        elem1(&e, "raw", bytes_of(vals, sizeof vals, offset));
        const uint8_t *src = ((sl_bytes *)e.t[0].data)->ptr;
        ASSERT_OK(apply(fn, &e, 0));
        const sl_tensor *t = comp(&e, "raw");
        ASSERT_SHAPE2(t, SL_DT_U16, 2, 3);
        ASSERT_MEMEQ(t->data, vals, sizeof vals);
        if (offset == 0) ASSERT(t->data == (const void *)src);  /* aligned: a view */
        else ASSERT(t->data != (const void *)src);              /* unaligned: copied */
        sl_element_clear(&e);
    }
    /* wrong size names both sizes */
    sl_element e;
    elem1(&e, "raw", bytes_of(vals, 11, 0));
    ASSERT_EQ(apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "decode_raw: 'raw' holds 11 bytes but uint16[2,3] needs 12");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* a -1 dimension takes the count */
    int64_t wd[2] = {-1, 2};
    ASSERT_OK(sl_fn_decode_raw("raw", SL_DT_U8, 2, wd, &fn));
    elem1(&e, "raw", bytes_of("abcdef", 6, 1));
    ASSERT_OK(apply(fn, &e, 0));
    ASSERT_EQ(e.t[0].dims[0], 3);
    ASSERT_MEMEQ(e.t[0].data, "abcdef", 6);
    sl_element_clear(&e);
    elem1(&e, "raw", bytes_of("abcde", 5, 0));
    ASSERT_EQ(apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "decode_raw: 'raw' holds 5 bytes, not a whole number of uint8[-1,2] (2 bytes each)");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* a scalar float32 */
    float pi = 3.25f;
    ASSERT_OK(sl_fn_decode_raw("raw", SL_DT_F32, 0, NULL, &fn));
    elem1(&e, "raw", bytes_of(&pi, 4, 0));
    ASSERT_OK(apply(fn, &e, 0));
    ASSERT_EQ(e.t[0].rank, 0);
    ASSERT(*(float *)e.t[0].data == 3.25f);
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

TEST(test_one_hot) {
    sl_fn *fn;
    ASSERT_OK(sl_fn_one_hot("label", 5, &fn));
    int64_t three = 3;
    sl_element e;
    elem1(&e, "label", tensor_of(SL_DT_I64, 0, NULL, &three));
    ASSERT_OK(apply(fn, &e, 0));
    ASSERT_EQ(e.t[0].dtype, SL_DT_F32);
    ASSERT_EQ(e.t[0].rank, 1);
    ASSERT_EQ(e.t[0].dims[0], 5);
    ASSERT_MEMEQ(e.t[0].data, ((float[]){0, 0, 0, 1, 0}), 20);
    sl_element_clear(&e);
    uint8_t two[2] = {0, 4};
    int64_t d[1] = {2};
    elem1(&e, "label", tensor_of(SL_DT_U8, 1, d, two));
    ASSERT_OK(apply(fn, &e, 0));
    ASSERT_EQ(e.t[0].rank, 2);
    ASSERT_EQ(e.t[0].dims[1], 5);
    ASSERT_MEMEQ(e.t[0].data, ((float[]){1, 0, 0, 0, 0, 0, 0, 0, 0, 1}), 40);
    sl_element_clear(&e);
    int64_t five = 5, neg = -1;
    elem1(&e, "label", tensor_of(SL_DT_I64, 0, NULL, &five));
    ASSERT_EQ(apply(fn, &e, 0), SL_ERANGE);
    ASSERT_STREQ(sl_errmsg(), "one_hot: 'label' value 5 is outside 0..4 (depth 5)\n"
                              "---> HINT: check the label values in the data, or raise the one_hot depth");
    sl_element_clear(&e);
    elem1(&e, "label", tensor_of(SL_DT_I64, 0, NULL, &neg));
    ASSERT_EQ(apply(fn, &e, 0), SL_ERANGE);
    sl_element_clear(&e);
    float f = 1;
    elem1(&e, "label", tensor_of(SL_DT_F32, 0, NULL, &f));
    ASSERT_EQ(apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "one_hot: 'label' is float32[]; one_hot needs an integer scalar or vector");
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

/* ---- parse_example ---- */

/* A serialized Example with label=int64 7, image=bytes "abc" and "", x=float [1.5 2.5 3.5],
 * pix=784 floats, empty=a Feature with no list. */
static sl_tensor example_record(size_t offset) {
    sl_exb *b;
    if (sl_exb_new(&b)) abort();
    int64_t label = 7;
    sl_bytes img[2] = {{(const uint8_t *)"abc", 3}, {(const uint8_t *)"", 0}};
    float x[3] = {1.5f, 2.5f, 3.5f}, pix[784];
    for (int i = 0; i < 784; i++) pix[i] = (float)i / 4;
    if (sl_exb_int64s(b, "label", &label, 1) || sl_exb_bytes(b, "image", img, 2) ||
        sl_exb_floats(b, "x", x, 3) || sl_exb_floats(b, "pix", pix, 784) ||
        sl_exb_floats(b, "pix783", pix, 783))
        abort();
    uint8_t *data;
    size_t len;
    if (sl_exb_serialize(b, &data, &len)) abort();
    sl_tensor t = bytes_of(data, len, offset);
    free(data);
    sl_exb_free(b);
    return t;
}

static sl_feature_spec spec(const char *name, sl_dtype dt, int rank, int64_t d0, int64_t d1, int64_t d2) {
    sl_feature_spec s = {.name = name, .dtype = dt, .rank = rank, .dims = {d0, d1, d2}};
    return s;
}

TEST(test_parse_example) {
    sl_feature_spec specs[8] = {
        spec("label", SL_DT_I64, 0, 0, 0, 0),
        spec("image", SL_DT_BYTES, 1, -1, 0, 0),
        spec("x", SL_DT_F32, 1, -1, 0, 0),
        spec("pix", SL_DT_F32, 3, 28, 28, 1),
        spec("weight", SL_DT_F32, 0, 0, 0, 0),
        spec("tag", SL_DT_BYTES, 0, 0, 0, 0),
        spec("ids", SL_DT_I64, 1, 2, 0, 0),
        spec("label", SL_DT_I64, 1, -1, 0, 0),
    };
    specs[4].has_default = true; specs[4].default_num = 4.25;
    specs[5].has_default = true; specs[5].default_bytes = "none";
    specs[6].has_default = true; specs[6].default_num = -3;
    specs[7].as = "label_vec";
    sl_fn *fn;
    ASSERT_OK(sl_fn_parse_example("record", specs, 8, &fn));
    sl_fn_states *st;
    ASSERT_OK(sl__fn_states_new(fn, &st));
    for (int round = 0; round < 3; round++) { /* the thread state is reused */
        sl_element e;
        elem1(&e, "record", example_record((size_t)round));
        int64_t one = 1;
        sl_tensor keep = tensor_of(SL_DT_I64, 0, NULL, &one);
        ASSERT_OK(sl_element_set(&e, "keep", &keep));
        sl_buf *recbuf = sl_buf_ref(e.t[0].aux);
        ASSERT_OK(sl__fn_apply(fn, &e, 0, 0, round == 2 ? NULL : st));
        ASSERT_EQ(e.n, 9);
        ASSERT(comp(&e, "record") == NULL);
        ASSERT(comp(&e, "keep") != NULL);
        const sl_tensor *t = comp(&e, "label");
        ASSERT(t && t->dtype == SL_DT_I64 && t->rank == 0);
        ASSERT_EQ(*(int64_t *)t->data, 7);
        t = comp(&e, "image");
        ASSERT(t && t->dtype == SL_DT_BYTES && t->rank == 1 && t->dims[0] == 2);
        const sl_bytes *bv = t->data;
        ASSERT_EQ(bv[0].len, 3);
        ASSERT_MEMEQ(bv[0].ptr, "abc", 3);
        ASSERT_EQ(bv[1].len, 0);
        /* zero-copy: the bytes lie inside the record's buffer, which the output keeps alive */
        ASSERT(bv[0].ptr >= (const uint8_t *)recbuf->data &&
               bv[0].ptr + 3 <= (const uint8_t *)recbuf->data + recbuf->size);
        ASSERT(t->aux == recbuf);
        t = comp(&e, "x");
        ASSERT(t && t->rank == 1 && t->dims[0] == 3);
        ASSERT_MEMEQ(t->data, ((float[]){1.5f, 2.5f, 3.5f}), 12);
        t = comp(&e, "pix");
        ASSERT(t && t->rank == 3 && t->dims[0] == 28 && t->dims[1] == 28 && t->dims[2] == 1);
        ASSERT(((float *)t->data)[783] == 783 / 4.0f);
        t = comp(&e, "weight");
        ASSERT(t && t->dtype == SL_DT_F32 && t->rank == 0 && *(float *)t->data == 4.25f);
        t = comp(&e, "tag");
        ASSERT(t && t->dtype == SL_DT_BYTES && t->rank == 0);
        ASSERT_EQ(((sl_bytes *)t->data)->len, 4);
        ASSERT_MEMEQ(((sl_bytes *)t->data)->ptr, "none", 4);
        t = comp(&e, "ids");
        ASSERT(t && t->rank == 1 && t->dims[0] == 2);
        ASSERT_MEMEQ(t->data, ((int64_t[]){-3, -3}), 16);
        t = comp(&e, "label_vec");
        ASSERT(t && t->rank == 1 && t->dims[0] == 1 && *(int64_t *)t->data == 7);
        sl_element_clear(&e);
        /* the output was the last holder of the record besides us */
        ASSERT_EQ(atomic_load(&recbuf->refs), 1);
        sl_buf_unref(recbuf);
    }
    sl__fn_states_free(fn, st);
    sl_fn_unref(fn);
}

TEST(test_parse_example_errors) {
    struct { sl_feature_spec s; sl_status code; const char *msg; } cases[] = {
        {spec("label", SL_DT_F32, 0, 0, 0, 0), SL_EINVAL,
         "parse_example: feature 'label': expected float, found int64"},
        {spec("x", SL_DT_I64, 1, -1, 0, 0), SL_EINVAL,
         "parse_example: feature 'x': expected int64, found float"},
        {spec("label", SL_DT_BYTES, 0, 0, 0, 0), SL_EINVAL,
         "parse_example: feature 'label': expected bytes, found int64"},
        {spec("pix783", SL_DT_F32, 1, 784, 0, 0), SL_EINVAL,
         "parse_example: feature 'pix783': expected 784 values, found 783\n"
         "---> HINT: the spec's shape [784] holds 784 values"},
        {spec("x", SL_DT_F32, 0, 0, 0, 0), SL_EINVAL,
         "parse_example: feature 'x': expected 1 value, found 3"},
        {spec("x", SL_DT_F32, 2, -1, 2, 0), SL_EINVAL,
         "parse_example: feature 'x': expected a multiple of 2 values, found 3"},
        {spec("nope", SL_DT_F32, 0, 0, 0, 0), SL_EINVAL,
         "parse_example: feature 'nope' is missing (and has no default); the record has: "
         "label (int64), image (bytes), x (float), pix (float), pix783 (float)"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        sl_fn *fn;
        ASSERT_OK(sl_fn_parse_example("record", &cases[k].s, 1, &fn));
        sl_element e;
        elem1(&e, "record", example_record(0));
        ASSERT_EQ(apply(fn, &e, 0), cases[k].code);
        ASSERT_STREQ(sl_errmsg(), cases[k].msg);
        ASSERT_EQ(e.n, 1); /* left as it was */
        ASSERT(comp(&e, "record") != NULL);
        sl_element_clear(&e);
        sl_fn_unref(fn);
    }
    /* the brief's example: 'image' shaped 28x28x1 with 783 values */
    sl_exb *b;
    ASSERT_OK(sl_exb_new(&b));
    float pix[783] = {0};
    ASSERT_OK(sl_exb_floats(b, "image", pix, 783));
    uint8_t *data;
    size_t len;
    ASSERT_OK(sl_exb_serialize(b, &data, &len));
    sl_exb_free(b);
    sl_feature_spec s = spec("image", SL_DT_F32, 3, 28, 28, 1);
    sl_fn *fn;
    ASSERT_OK(sl_fn_parse_example("record", &s, 1, &fn));
    sl_element e;
    elem1(&e, "record", bytes_of(data, len, 0));
    free(data);
    ASSERT_EQ(apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "parse_example: feature 'image': expected 784 values, found 783\n"
                              "---> HINT: the spec's shape [28,28,1] holds 784 values");
    sl_element_clear(&e);
    /* not an Example at all */
    elem1(&e, "record", bytes_of("\xff\xff\xff", 3, 0));
    ASSERT_EQ(apply(fn, &e, 0), SL_ECORRUPT);
    ASSERT(strncmp(sl_errmsg(), "parse_example: malformed Example in 'record': ", 46) == 0);
    sl_element_clear(&e);
    /* not bytes */
    int64_t v = 1;
    elem1(&e, "record", tensor_of(SL_DT_I64, 0, NULL, &v));
    ASSERT_EQ(apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "parse_example: 'record' is int64[]; parse_example needs one serialized "
                              "Example (a byte string)");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* bad specs */
    sl_feature_spec two[2] = {spec("a", SL_DT_F32, 0, 0, 0, 0), spec("b", SL_DT_F32, 0, 0, 0, 0)};
    two[1].as = "a";
    ASSERT_EQ(sl_fn_parse_example("record", two, 2, &fn), SL_EINVAL);
    ASSERT(fn == NULL);
    ASSERT_STREQ(sl_errmsg(), "parse_example: two specs write component 'a'\n"
                              "---> HINT: give one of them another name with `as`");
    two[1] = spec("b", SL_DT_I32, 0, 0, 0, 0);
    ASSERT_EQ(sl_fn_parse_example("record", two, 2, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "parse_example: feature 'b': dtype int32 is not bytes, int64 or float32\n"
                              "---> HINT: parse as int64 or float32, then cast");
}

/* ---- random_resized_crop ---- */

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
        elem1(&e, "image", tensor_of(SL_DT_U8, 3, d, px));
        ASSERT_OK(apply(fn, &e, seed));
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

/* ---- determinism of a random augmentation pipeline ---- */

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

/* All batches of one run, concatenated. */
static sl_status run_pipeline(sl_fn *chain, int par, bool fused, uint8_t **out, size_t *len) {
    sl_dataset *r = NULL, *m = NULL, *b = NULL;
    sl_iter *it = NULL;
    sl_status s;
    *out = NULL;
    *len = 0;
    if ((s = sl_ds_range(0, 100, 1, &r))) goto done;
    if ((s = sl_ds_map(r, chain, par, true, &m))) goto done;
    sl_batch_opts o = sl_batch_opts_default(8);
    o.padded = !fused; /* padded batches are not fused with the map */
    if ((s = sl_ds_batch(m, &o, &b))) goto done;
    if (strcmp(sl_dataset_op(b), fused ? "map_batch" : "batch") != 0) { s = SL_EINTERNAL; goto done; }
    sl_iter_opts io = sl_iter_opts_default();
    io.seed = 1234;
    if ((s = sl_iter_create(b, &io, &it))) goto done;
    sl_element e;
    sl_element_init(&e);
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        const sl_tensor *t = comp(&e, "image");
        if (!t || t->dtype != SL_DT_F32 || t->rank != 4 || t->dims[1] != 32 || t->dims[2] != 32) {
            sl_element_clear(&e);
            s = SL_EINTERNAL;
            goto done;
        }
        size_t n = sl_tensor_nbytes(t);
        *out = realloc(*out, *len + n);
        memcpy(*out + *len, t->data, n);
        *len += n;
        sl_element_clear(&e);
    }
    if (s == SL_END) s = SL_OK;
done:
    sl_iter_close(it);
    sl_dataset_unref(b);
    sl_dataset_unref(m);
    sl_dataset_unref(r);
    return s;
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

/* ---- decode_jpeg ---- */

/* A smooth synthetic photo: gradients and low-frequency waves, a soft disc, gentle noise. */
static uint8_t *synth_photo(int w, int h, uint64_t seed) {
    uint8_t *p = malloc((size_t)w * h * 3);
    sl_rng rng = {seed};
    double fx = 2 + (double)(seed % 5), fy = 1 + (double)(seed % 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double u = (double)x / w, v = (double)y / h;
            double disc = hypot(u - 0.6, v - 0.4) < 0.2 ? 40 : 0;
            double base[3] = {
                90 + 80 * u + 40 * sin(fx * 3.1 * u + fy * 2.0 * v) + disc,
                60 + 100 * v + 30 * cos(fy * 2.7 * u - fx * 1.3 * v),
                150 - 70 * u * v + 35 * sin(4.0 * v + 2.5 * u) - disc,
            };
            for (int c = 0; c < 3; c++) {
                double n = base[c] + (double)(sl__rng_u64(&rng) % 7) - 3.0;
                p[((size_t)y * w + x) * 3 + c] = (uint8_t)(n < 0 ? 0 : n > 255 ? 255 : n);
            }
        }
    return p;
}

typedef struct {
    uint8_t *jpeg[4];
    size_t len[4];
} photo_set;

/* value v -> {"image": bytes} of one of the set's JPEGs (a view into the set) */
static sl_status jpeg_source(void *ctx, sl_element *e, const sl_fn_call *call) {
    const photo_set *ps = ctx;
    int64_t v = *(int64_t *)e->t[sl_element_find(e, "value")].data;
    sl_tensor t = bytes_of(ps->jpeg[v % 4], ps->len[v % 4], 0);
    return sl_element_set(e, "image", &t);
}

/* A decode that decode_jpeg's planning does not know: the unfused reference inside a chain
 * (keeping the crop at the same chain position, hence the same seed). */
static sl_status plain_decode(void *ctx, sl_element *e, const sl_fn_call *call) {
    int i = sl_element_find(e, "image");
    sl_bytes b = *(sl_bytes *)e->t[i].data;
    sl_jpeg_decoder *d;
    sl_status s = sl_jpeg_decoder_new(&d);
    if (s) return s;
    sl_jpeg_info info;
    sl_tensor t = SL_TENSOR_EMPTY;
    if (!(s = sl_jpeg_header(d, b.ptr, b.len, &info))) {
        int64_t dims[3] = {info.height, info.width, 3};
        int w, h;
        if (!(s = sl_tensor_alloc(&t, SL_DT_U8, 3, dims)))
            s = sl_jpeg_decode(d, b.ptr, b.len, 3, 8, t.data, sl_tensor_nbytes(&t), &w, &h);
    }
    sl_jpeg_decoder_free(d);
    if (!s) s = sl_element_set(e, "image", &t);
    sl_tensor_release(&t);
    return s;
}

/* The "image" components of range(0, count) | map(jpeg_source | fns) (parallelism 2),
 * batched by `batch` when > 0 (fused into map_batch, or not when !fused: a padded batch),
 * concatenated into *out (malloc'd, *len bytes). */
static sl_status jpeg_images(photo_set *ps, sl_fn *const *fns, int n, int count, int batch, bool fused,
                             uint8_t **out, size_t *len) {
    sl_fn *src = NULL, *chain = NULL, *all[8];
    sl_dataset *r = NULL, *m = NULL, *b = NULL;
    sl_iter *it = NULL;
    *out = NULL;
    *len = 0;
    sl_status s = sl_fn_custom("jpeg_source", jpeg_source, ps, NULL, &src);
    if (s) return s;
    all[0] = src;
    for (int i = 0; i < n && i < 7; i++) all[i + 1] = fns[i];
    if ((s = sl_fn_chain(all, n + 1, &chain)) || (s = sl_ds_range(0, count, 1, &r)) ||
        (s = sl_ds_map(r, chain, 2, true, &m)))
        goto done;
    if (batch > 0) {
        sl_batch_opts o = sl_batch_opts_default(batch);
        o.padded = !fused;
        if ((s = sl_ds_batch(m, &o, &b))) goto done;
        if (strcmp(sl_dataset_op(b), fused ? "map_batch" : "batch") != 0) { s = SL_EINTERNAL; goto done; }
    }
    if ((s = sl_iter_create(b ? b : m, NULL, &it))) goto done;
    sl_element e;
    sl_element_init(&e);
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        const sl_tensor *t = comp(&e, "image");
        size_t nb = sl_tensor_nbytes(t);
        uint8_t *grown = realloc(*out, *len + nb);
        if (!grown) {
            sl_element_clear(&e);
            s = SL_ENOMEM;
            goto done;
        }
        *out = grown;
        memcpy(*out + *len, t->data, nb);
        *len += nb;
        sl_element_clear(&e);
    }
    if (s == SL_END) s = SL_OK;
done:
    sl_iter_close(it);
    sl_dataset_unref(b);
    sl_dataset_unref(m);
    sl_dataset_unref(r);
    sl_fn_unref(chain);
    sl_fn_unref(src);
    return s;
}

/* Run chain [source, decode, geom] over 24 elements into out (24 images of oh x ow x 3). */
static sl_status run_jpeg(photo_set *ps, sl_fn *decode, sl_fn *geom, int64_t oh, int64_t ow,
                          uint8_t *out) {
    sl_fn *fns[2] = {decode, geom};
    uint8_t *all;
    size_t len;
    sl_status s = jpeg_images(ps, fns, 2, 24, 0, false, &all, &len);
    if (!s && len != (size_t)(24 * oh * ow * 3))
        s = sl_err(SL_EINTERNAL, "%zu bytes of images, not 24 of %lldx%lldx3", len, (long long)oh, (long long)ow);
    if (!s) memcpy(out, all, len);
    free(all);
    return s;
}

/* Four synthetic photos of ImageNet-like sizes, encoded at quality q (seeds from seed0). */
static sl_status photo_set_make(photo_set *ps, uint64_t seed0, int q) {
    const int sizes[4][2] = {{333, 250}, {500, 375}, {256, 256}, {640, 427}};
    for (int i = 0; i < 4; i++) {
        uint8_t *px = synth_photo(sizes[i][0], sizes[i][1], seed0 + (uint64_t)i);
        sl_status s = sl_jpeg_encode(px, sizes[i][0], sizes[i][1], 3, q, &ps->jpeg[i], &ps->len[i]);
        free(px);
        if (s) return s;
    }
    return SL_OK;
}

TEST(test_decode_jpeg_fused_vs_unfused) {
    photo_set ps;
    ASSERT_OK(photo_set_make(&ps, 1, 92));
    sl_fn *dec, *dec8, *plain;
    ASSERT_OK(sl_fn_decode_jpeg("image", 3, &dec));
    ASSERT_OK(sl_fn_decode_jpeg("image", 3, &dec8));
    sl__fn_decode_jpeg_set_dct_scaling(dec8, false);
    ASSERT_OK(sl_fn_custom("plain_decode", plain_decode, NULL, NULL, &plain));
    sl_fn *geoms[3];
    const int64_t out_hw[3][2] = {{64, 56}, {100, 90}, {60, 80}};
    ASSERT_OK(sl_fn_random_resized_crop("image", 64, 56, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &geoms[0]));
    ASSERT_OK(sl_fn_center_crop("image", 100, 90, &geoms[1]));
    ASSERT_OK(sl_fn_resize("image", 60, 80, &geoms[2]));
    /* both resamplers: antialiased (the default) and 2-tap; the fused path must match the
     * unfused chain exactly without DCT scaling, and within a mean of 3 levels with it */
    for (int gi = 0; gi < 6; gi++) {
        int g = gi % 3;
        bool aa = gi < 3;
        for (int k = 0; k < 3; k++) ASSERT_OK(sl_fn_set_antialias(geoms[k], aa));
        int64_t oh = out_hw[g][0], ow = out_hw[g][1];
        size_t n = (size_t)(24 * oh * ow * 3);
        uint8_t *ref = malloc(n), *f8 = malloc(n), *fs = malloc(n);
        ASSERT_OK(run_jpeg(&ps, plain, geoms[g], oh, ow, ref));
        ASSERT_OK(run_jpeg(&ps, dec8, geoms[g], oh, ow, f8));
        ASSERT_OK(run_jpeg(&ps, dec, geoms[g], oh, ow, fs));
        /* full-size fused decode: exactly the unfused pixels */
        ASSERT_MEMEQ(f8, ref, n);
        /* DCT-scaled: close to them */
        double worst = 0;
        size_t per = (size_t)(oh * ow * 3);
        int differing = 0;
        for (int k = 0; k < 24; k++) {
            double sum = 0;
            for (size_t i = 0; i < per; i++) sum += abs((int)fs[k * per + i] - (int)ref[k * per + i]);
            double mad = sum / (double)per;
            if (mad > worst) worst = mad;
            differing += memcmp(fs + k * per, ref + k * per, per) != 0;
        }
        printf("  %s (antialias %s): fused with DCT scaling: worst mean abs difference %.3f levels, %d of 24 "
               "images differ\n", sl_fn_name(geoms[g]), aa ? "on" : "off", worst, differing);
        ASSERT(worst < 3.0);
        if (g != 1) ASSERT(differing > 0); /* scaling did happen (center_crop never scales) */
        else ASSERT_EQ(differing, 0);
        free(ref); free(f8); free(fs);
    }
    /* plain decode matches the decoder's own output */
    sl_element e;
    elem1(&e, "image", bytes_of(ps.jpeg[0], ps.len[0], 3));
    ASSERT_OK(apply(dec, &e, 0));
    const sl_tensor *t = comp(&e, "image");
    ASSERT(t->dtype == SL_DT_U8 && t->rank == 3 && t->dims[0] == 250 && t->dims[1] == 333 && t->dims[2] == 3);
    sl_element e2;
    elem1(&e2, "image", bytes_of(ps.jpeg[0], ps.len[0], 0));
    ASSERT_OK(plain_decode(NULL, &e2, NULL));
    ASSERT_MEMEQ(t->data, e2.t[0].data, 250 * 333 * 3);
    sl_element_clear(&e);
    sl_element_clear(&e2);
    /* grayscale output */
    sl_fn *gray;
    ASSERT_OK(sl_fn_decode_jpeg("image", 1, &gray));
    elem1(&e, "image", bytes_of(ps.jpeg[2], ps.len[2], 0));
    ASSERT_OK(apply(gray, &e, 0));
    ASSERT_EQ(e.t[0].dims[2], 1);
    sl_element_clear(&e);
    sl_fn_unref(gray);
    /* not a JPEG, truncated JPEG: SL_ECORRUPT naming the function and the component, both
     * alone and fused */
    sl_fn *fns[2] = {dec, geoms[0]}, *fused;
    ASSERT_OK(sl_fn_chain(fns, 2, &fused));
    for (int k = 0; k < 2; k++) {
        sl_fn *fn = k ? fused : dec;
        elem1(&e, "image", bytes_of("hello, world", 12, 0));
        ASSERT_EQ(apply(fn, &e, 0), SL_ECORRUPT);
        ASSERT(strncmp(sl_errmsg(), "decode_jpeg: 'image': jpeg: ", 28) == 0);
        sl_element_clear(&e);
        elem1(&e, "image", bytes_of(ps.jpeg[1], ps.len[1] / 2, 0));
        ASSERT_EQ(apply(fn, &e, 0), k ? SL_ECORRUPT : SL_ECORRUPT);
        ASSERT(strncmp(sl_errmsg(), "decode_jpeg: 'image': jpeg: ", 28) == 0);
        sl_element_clear(&e);
    }
    sl_fn_unref(fused);
    int64_t one = 1;
    elem1(&e, "image", tensor_of(SL_DT_I64, 0, NULL, &one));
    ASSERT_EQ(apply(dec, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "decode_jpeg: 'image' is int64[]; decode_jpeg needs one encoded image (a byte string)");
    sl_element_clear(&e);
    for (int g = 0; g < 3; g++) sl_fn_unref(geoms[g]);
    sl_fn_unref(plain);
    sl_fn_unref(dec8);
    sl_fn_unref(dec);
    for (int i = 0; i < 4; i++) free(ps.jpeg[i]);
}

/* The first `max` values of bytes feature `key` in the TFRecord file at path (the real
 * JPEGs of the repository's test data) into ps from slot *n on. Returns SL_OK or an error. */
static sl_status repo_jpegs(const char *path, const char *key, photo_set *ps, int *n, int max) {
    sl_tfr_reader *r;
    sl_status s = sl_tfr_reader_open(path, NULL, &r);
    if (s) return s;
    sl_feature_spec spec = {.name = key, .as = "image", .dtype = SL_DT_BYTES};
    sl_fn *parse;
    if ((s = sl_fn_parse_example("record", &spec, 1, &parse))) {
        sl_tfr_reader_close(r);
        return s;
    }
    sl_record rec;
    for (int k = 0; k < max && *n < 4 && !(s = sl_tfr_reader_next(r, &rec)); k++) {
        sl_element e;
        elem1(&e, "record", bytes_of(rec.data, rec.len, 0));
        if (!(s = apply(parse, &e, 0))) {
            const sl_bytes *b = comp(&e, "image")->data;
            ps->jpeg[*n] = malloc(b->len);
            memcpy(ps->jpeg[*n], b->ptr, b->len);
            ps->len[(*n)++] = b->len;
        }
        sl_element_clear(&e);
        if (s) break;
    }
    if (s == SL_END) s = SL_OK;
    sl_fn_unref(parse);
    sl_tfr_reader_close(r);
    return s;
}

/* The fast path on real photos: the repository's test JPEGs (three 500x~370 PASCAL VOC
 * photos from TensorFlow's deeplab test data, and a 320x213 one from tfrecord_lite), fused
 * decode + crop/resize with and without DCT scaling, each resampler, against full decode
 * then crop then resize. Without DCT scaling the pixels are identical. With it they are a
 * differently low-passed image: a DCT-domain reduction per 8x8 block (sharper) instead of
 * the triangle filter (softer); no shift (the scaled pixels are centred where the
 * resampler expects them). Stated tolerance, from what these photos give (printed): every
 * image's mean absolute difference from the antialiased full-size result is under 10
 * levels (measured up to 8.8 on the most detailed photo; under 1 on smooth synthetic ones,
 * test_decode_jpeg_fused_vs_unfused), and with the 2-tap resampler the DCT-scaled result is
 * closer to the antialiased one than 2-tap from full size is (it aliases less). */
TEST(test_decode_jpeg_fused_on_repository_jpegs) {
    photo_set ps = {{0}, {0}};
    int n = 0;
    ASSERT_OK(repo_jpegs(SL_TEST_DATA "/tfrecord-samples/domj07__Tensorflow-Ion-Detetection/"
                         "models__research__deeplab__testing__pascal_voc_seg__val-00000-of-00001.tfrecord",
                         "image/encoded", &ps, &n, 3));
    ASSERT_OK(repo_jpegs(SL_TEST_DATA "/tfrecord-samples/jongwook__tfrecord_lite/tests__images.tfrecord", "image_raw",
                         &ps, &n, 1));
    ASSERT_EQ(n, 4);
    sl_fn *dec, *dec8, *plain, *geoms[3];
    ASSERT_OK(sl_fn_decode_jpeg("image", 3, &dec));
    ASSERT_OK(sl_fn_decode_jpeg("image", 3, &dec8));
    ASSERT_OK(sl_fn_set_dct_scaling(dec8, false));
    ASSERT_OK(sl_fn_custom("plain_decode", plain_decode, NULL, NULL, &plain));
    const int64_t out_hw[3][2] = {{96, 96}, {80, 120}, {150, 100}};
    ASSERT_OK(sl_fn_random_resized_crop("image", 96, 96, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &geoms[0]));
    ASSERT_OK(sl_fn_resize("image", 80, 120, &geoms[1]));
    ASSERT_OK(sl_fn_center_crop("image", 150, 100, &geoms[2]));
    for (int g = 0; g < 3; g++) {
        int64_t oh = out_hw[g][0], ow = out_hw[g][1];
        size_t per = (size_t)(oh * ow * 3), nb = 24 * per;
        /* [antialias][path]: path 0 = full decode then crop/resize, 1 = fused at full size,
         * 2 = fused with DCT scaling */
        uint8_t *out[2][3];
        for (int aa = 0; aa < 2; aa++) {
            ASSERT_OK(sl_fn_set_antialias(geoms[g], aa));
            sl_fn *paths[3] = {plain, dec8, dec};
            for (int p = 0; p < 3; p++) {
                out[aa][p] = malloc(nb);
                ASSERT_OK(run_jpeg(&ps, paths[p], geoms[g], oh, ow, out[aa][p]));
            }
            ASSERT_MEMEQ(out[aa][1], out[aa][0], nb); /* only the rows and columns needed: same pixels */
        }
        /* worst per-image mean abs difference between two of the outputs */
#define WORST(a, b, res)                                                                    \
        do {                                                                                \
            res = 0;                                                                        \
            for (int k = 0; k < 24; k++) {                                                  \
                double sum = 0;                                                             \
                for (size_t i = 0; i < per; i++) sum += abs((int)(a)[k * per + i] - (int)(b)[k * per + i]); \
                if (sum / (double)per > res) res = sum / (double)per;                       \
            }                                                                               \
        } while (0)
        double fast_aa, fast_2tap, fast2_vs_aa, tap2_vs_aa;
        WORST(out[1][2], out[1][0], fast_aa);   /* DCT + antialias vs full + antialias */
        WORST(out[0][2], out[0][0], fast_2tap); /* DCT + 2-tap vs full + 2-tap */
        WORST(out[0][2], out[1][0], fast2_vs_aa); /* DCT + 2-tap vs full + antialias */
        WORST(out[0][0], out[1][0], tap2_vs_aa);  /* full + 2-tap vs full + antialias */
        printf("  %s: worst mean abs difference (levels): DCT+antialias vs full+antialias %.2f, DCT+2-tap vs "
               "full+2-tap %.2f, DCT+2-tap vs full+antialias %.2f, full+2-tap vs full+antialias %.2f\n",
               sl_fn_name(geoms[g]), fast_aa, fast_2tap, fast2_vs_aa, tap2_vs_aa);
        if (g == 2) {
            ASSERT(fast_aa == 0 && fast_2tap == 0); /* center_crop never scales */
        } else {
            ASSERT(fast_aa > 0);
            /* the stated tolerance: the fast path stays closer to the antialiased full-size
             * result than plain 2-tap bilinear from full size does */
            if (!(fast_aa < 10.0)) FAILF("%s: DCT+antialias off by %.2f levels", sl_fn_name(geoms[g]), fast_aa);
            if (!(fast2_vs_aa < tap2_vs_aa))
                FAILF("%s: DCT+2-tap %.2f levels from the antialiased result, full+2-tap %.2f", sl_fn_name(geoms[g]),
                      fast2_vs_aa, tap2_vs_aa);
        }
#undef WORST
        for (int aa = 0; aa < 2; aa++)
            for (int p = 0; p < 3; p++) free(out[aa][p]);
    }
    for (int g = 0; g < 3; g++) sl_fn_unref(geoms[g]);
    sl_fn_unref(plain);
    sl_fn_unref(dec8);
    sl_fn_unref(dec);
    for (int i = 0; i < 4; i++) free(ps.jpeg[i]);
}

/* record -> parse_example -> decode_jpeg (+ absorbed random_resized_crop): the JPEG bytes
 * go from the record to the decoder as a view; a crop of another component is not
 * absorbed and still runs. */
TEST(test_parse_decode_chain) {
    uint8_t *px = synth_photo(120, 90, 9), *jpeg;
    size_t jlen;
    ASSERT_OK(sl_jpeg_encode(px, 120, 90, 3, 90, &jpeg, &jlen));
    free(px);
    sl_exb *b;
    ASSERT_OK(sl_exb_new(&b));
    sl_bytes jb = {jpeg, jlen};
    int64_t label = 4;
    ASSERT_OK(sl_exb_bytes(b, "image/encoded", &jb, 1));
    ASSERT_OK(sl_exb_int64s(b, "label", &label, 1));
    uint8_t *rec;
    size_t rlen;
    ASSERT_OK(sl_exb_serialize(b, &rec, &rlen));
    sl_exb_free(b);
    sl_feature_spec specs[2] = {spec("image/encoded", SL_DT_BYTES, 0, 0, 0, 0),
                                spec("label", SL_DT_I64, 0, 0, 0, 0)};
    specs[0].as = "image";
    sl_fn *fns[4];
    ASSERT_OK(sl_fn_parse_example("record", specs, 2, &fns[0]));
    ASSERT_OK(sl_fn_decode_jpeg("image", 0, &fns[1]));
    ASSERT_OK(sl_fn_random_resized_crop("image", 40, 40, 0.25, 1.0, 0.75, 4.0 / 3, &fns[2]));
    ASSERT_OK(sl_fn_one_hot("label", 10, &fns[3]));
    sl_fn *chain;
    ASSERT_OK(sl_fn_chain(fns, 4, &chain));
    sl_fn_states *st;
    ASSERT_OK(sl__fn_states_new(chain, &st));
    for (uint64_t seed = 0; seed < 4; seed++) {
        sl_element e;
        elem1(&e, "record", bytes_of(rec, rlen, 1));
        ASSERT_OK(sl__fn_apply(chain, &e, seed, 0, st));
        const sl_tensor *t = comp(&e, "image");
        ASSERT(t && t->dtype == SL_DT_U8 && t->rank == 3);
        ASSERT_EQ(t->dims[0], 40);
        ASSERT_EQ(t->dims[1], 40);
        ASSERT_EQ(t->dims[2], 3);
        t = comp(&e, "label");
        ASSERT(t && t->dims[0] == 10 && ((float *)t->data)[4] == 1.0f);
        sl_element_clear(&e);
    }
    sl__fn_states_free(chain, st);
    sl_fn_unref(chain);
    /* a crop of another component: decode_jpeg decodes in full, the crop runs by itself */
    sl_fn_unref(fns[2]);
    ASSERT_OK(sl_fn_center_crop("other", 10, 10, &fns[2]));
    ASSERT_OK(sl_fn_chain(fns, 3, &chain));
    sl_element e;
    elem1(&e, "record", bytes_of(rec, rlen, 0));
    ASSERT_EQ(apply(chain, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "center_crop: no component 'other' (the element has: image, label)");
    ASSERT_EQ(comp(&e, "image")->dims[0], 90); /* decoded whole before the crop failed */
    ASSERT_EQ(comp(&e, "image")->dims[1], 120);
    sl_element_clear(&e);
    sl_fn_unref(chain);
    for (int i = 0; i < 4; i++) sl_fn_unref(fns[i]);
    free(rec);
    free(jpeg);
}


/* decode_jpeg absorbs a random_flip and a normalize that follow its crop (in either order,
 * or one of them): the result must be the very floats (or bytes) the functions give when
 * they run by themselves on the fused crop, with their own seeds (member k of a chain is
 * called with sl__mix(seed, k)). Both channel counts, both resamplers, DCT scaling on and
 * off, one mean or one per channel, flips left-right and top-bottom, outputs mostly smaller
 * and mostly larger than the crop (both resize paths; 140 and 230 columns, so the
 * vectorized normalize also ends in a partial group). */
TEST(test_decode_jpeg_absorbs_flip_and_normalize) {
    photo_set ps;
    ASSERT_OK(photo_set_make(&ps, 11, 90));
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
    int flipped = 0, kept = 0, checked = 0;
    for (int cfg = 0; cfg < 128; cfg++) {
        int ch = cfg & 1 ? 1 : 3, post = (cfg >> 4) & 3; /* flip+norm, norm+flip, flip, norm */
        bool dct = cfg & 2, aa = cfg & 4, vertical = cfg & 8, big = cfg & 64;
        int oh = big ? 300 : 150, ow = big ? 230 : 140;
        int nl = (cfg & 1) || (cfg & 8) ? 1 : 3;
        sl_fn *f[4], *flip, *norm, *full, *crop;
        ASSERT_OK(sl_fn_decode_jpeg("image", ch, &f[0]));
        sl__fn_decode_jpeg_set_dct_scaling(f[0], dct);
        ASSERT_OK(sl_fn_random_resized_crop("image", oh, ow, 0.25, 1.0, 3.0 / 4, 4.0 / 3, &f[1]));
        ASSERT_OK(sl_fn_set_antialias(f[1], aa));
        ASSERT_OK(sl_fn_random_flip("image", true, vertical, 0.5, &flip));
        ASSERT_OK(sl_fn_normalize("image", mean, stdv, nl, true, &norm));
        f[2] = post == 1 || post == 3 ? norm : flip;
        f[3] = post == 1 ? flip : norm;
        int n = post < 2 ? 4 : 3;
        ASSERT_OK(sl_fn_chain(f, n, &full));
        ASSERT_OK(sl_fn_chain(f, 2, &crop));
        for (int k = 0; k < 12; k++) {
            uint64_t seed = (uint64_t)(cfg * 100 + k);
            sl_element a, b;
            elem1(&a, "image", bytes_of(ps.jpeg[k % 4], ps.len[k % 4], 0));
            elem1(&b, "image", bytes_of(ps.jpeg[k % 4], ps.len[k % 4], 0));
            ASSERT_OK(apply(full, &a, seed));
            ASSERT_OK(apply(crop, &b, seed));
            for (int m = 2; m < n; m++) ASSERT_OK(apply(f[m], &b, sl__mix(seed, (uint64_t)m)));
            const sl_tensor *ta = comp(&a, "image"), *tb = comp(&b, "image");
            ASSERT_EQ(ta->dtype, post == 2 ? SL_DT_U8 : SL_DT_F32);
            ASSERT_EQ(tb->dtype, ta->dtype);
            ASSERT(ta->rank == 3 && tb->rank == 3);
            for (int d = 0; d < 3; d++) ASSERT_EQ(ta->dims[d], tb->dims[d]);
            ASSERT_EQ(ta->dims[0], oh);
            ASSERT_EQ(ta->dims[1], ow);
            ASSERT_EQ(ta->dims[2], ch);
            if (memcmp(ta->data, tb->data, sl_tensor_nbytes(ta)) != 0) {
                FAILF("cfg %d (channels %d, dct %d, antialias %d, vertical %d, means %d, post %d) seed %llu: "
                      "fused differs", cfg, ch, dct, aa, vertical, nl, post, (unsigned long long)seed);
                return;
            }
            bool fh, fv;
            sl__flip_draw(flip, sl__mix(seed, (uint64_t)(f[2] == flip ? 2 : 3)), &fh, &fv);
            if (post != 3) (fh || fv) ? flipped++ : kept++;
            checked++;
            sl_element_clear(&a);
            sl_element_clear(&b);
        }
        sl_fn_unref(full);
        sl_fn_unref(crop);
        sl_fn_unref(f[0]);
        sl_fn_unref(f[1]);
        sl_fn_unref(flip);
        sl_fn_unref(norm);
    }
    ASSERT_EQ(checked, 128 * 12);
    ASSERT(flipped > 50 && kept > 50);

    /* a normalize whose means may not fit (channels as in the file) is not absorbed: a gray
     * JPEG meets normalize's own error */
    uint8_t gray[64 * 48];
    for (int i = 0; i < 64 * 48; i++) gray[i] = (uint8_t)(i * 7);
    uint8_t *gj;
    size_t glen;
    ASSERT_OK(sl_jpeg_encode(gray, 64, 48, 1, 90, &gj, &glen));
    sl_fn *g[3], *chain;
    ASSERT_OK(sl_fn_decode_jpeg("image", 0, &g[0]));
    ASSERT_OK(sl_fn_resize("image", 24, 32, &g[1]));
    ASSERT_OK(sl_fn_normalize("image", mean, stdv, 3, true, &g[2]));
    ASSERT_OK(sl_fn_chain(g, 3, &chain));
    sl_element e;
    elem1(&e, "image", bytes_of(gj, glen, 0));
    ASSERT_EQ(apply(chain, &e, 1), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "normalize: 'image' is uint8[24,32,1]: 1 channels, but 3 means and stds were given");
    sl_element_clear(&e);
    sl_fn_unref(chain);
    for (int i = 0; i < 3; i++) sl_fn_unref(g[i]);
    free(gj);
    for (int i = 0; i < 4; i++) free(ps.jpeg[i]);
}

/* Counts the images that arrive as views into a larger buffer (a batch slot). */
static sl_status slot_probe(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)call;
    const sl_tensor *t = &e->t[sl_element_find(e, "image")];
    if (t->buf && t->buf->size > sl_tensor_nbytes(t)) atomic_fetch_add((atomic_int *)ctx, 1);
    return SL_OK;
}

/* Under map_batch, decode_jpeg builds its fused result in the batch slot (from the second
 * element of each batch on): the batches equal map then batch, also when a function after
 * it replaces the image, and when the result is uint8 (no normalize). */
TEST(test_decode_jpeg_builds_in_batch_slot) {
    photo_set ps;
    ASSERT_OK(photo_set_make(&ps, 21, 90));
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
    atomic_int in_slot = 0;
    sl_fn *f[5];
    ASSERT_OK(sl_fn_decode_jpeg("image", 3, &f[0]));
    ASSERT_OK(sl_fn_random_resized_crop("image", 48, 40, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &f[1]));
    ASSERT_OK(sl_fn_random_flip("image", true, false, 0.5, &f[2]));
    ASSERT_OK(sl_fn_normalize("image", mean, stdv, 3, true, &f[3]));
    ASSERT_OK(sl_fn_custom("slot_probe", slot_probe, &in_slot, NULL, &f[4]));
    sl_fn *scale;
    ASSERT_OK(sl_fn_scale("image", 2.0, &scale));
    for (int variant = 0; variant < 3; variant++) {
        sl_fn *fns[5] = {f[0], f[1], f[2], f[3], f[4]};
        int n = 5;
        if (variant == 1) fns[4] = scale; /* replaces the image after the fused work */
        if (variant == 2) n = 3, fns[2] = f[4]; /* uint8 result: decode, crop, probe */
        uint8_t *a, *b;
        size_t la, lb;
        atomic_store(&in_slot, 0);
        ASSERT_OK(jpeg_images(&ps, fns, n, 40, 8, true, &a, &la));
        int slots = atomic_load(&in_slot);
        atomic_store(&in_slot, 0);
        ASSERT_OK(jpeg_images(&ps, fns, n, 40, 8, false, &b, &lb));
        ASSERT_EQ(atomic_load(&in_slot), 0);
        ASSERT_EQ(la, (size_t)40 * 48 * 40 * 3 * (variant == 2 ? 1 : 4));
        ASSERT_EQ(la, lb);
        ASSERT_MEMEQ(a, b, la);
        if (variant != 1) ASSERT_EQ(slots, 40 - 40 / 8); /* all but the first of each batch */
        free(a);
        free(b);
    }
    sl_fn_unref(scale);
    for (int i = 0; i < 5; i++) sl_fn_unref(f[i]);
    for (int i = 0; i < 4; i++) free(ps.jpeg[i]);
}

/* ---- pixel limits ---- */

/* A field of /proc/self/status in kB, -1 if unreadable. */
static long status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') v = strtol(line + kl + 1, NULL, 10);
    fclose(f);
    return v;
}

/* Reset the peak resident size (VmHWM) to the current one; false where the kernel cannot. */
static bool reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

TEST(test_decode_jpeg_pixel_limit) {
    /* the generator makes real JPEGs: a 64x64 one decodes to flat grey */
    size_t len;
    uint8_t *small = sl_test_flat_jpeg(64, 64, &len);
    sl_fn *dec;
    ASSERT_OK(sl_fn_decode_jpeg("image", 0, &dec));
    sl_element e;
    elem1(&e, "image", bytes_of(small, len, 3));
    ASSERT_OK(apply(dec, &e, 0));
    const sl_tensor *t = comp(&e, "image");
    ASSERT_EQ(t->rank, 3);
    ASSERT_EQ(t->dims[0] * t->dims[1] * t->dims[2], 64 * 64);
    for (int i = 0; i < 64 * 64; i++) ASSERT_EQ(((const uint8_t *)t->data)[i], 128);
    sl_element_clear(&e);
    sl_fn_unref(dec);

    /* a limit below its 4096 pixels refuses it, one at 4096 takes it */
    ASSERT_OK(sl_fn_decode_jpeg("image", 0, &dec));
    ASSERT_OK(sl_fn_set_max_pixels(dec, 4095));
    elem1(&e, "image", bytes_of(small, len, 0));
    ASSERT_EQ(apply(dec, &e, 0), SL_ERANGE);
    ASSERT_STREQ(sl_errmsg(), "decode_jpeg: 'image': the JPEG is 64x64 (4096 pixels), over decode_jpeg's limit of "
                              "4095 pixels\n---> HINT: decoded, it would take 4 kB; if the image is genuine, raise the "
                              "limit with decode_jpeg(image, max_pixels=4096) in the config (sl_fn_set_max_pixels in C)");
    ASSERT_EQ(e.t[0].dtype, SL_DT_BYTES); /* left as it was */
    ASSERT_OK(sl_fn_set_max_pixels(dec, 4096));
    ASSERT_OK(apply(dec, &e, 0));
    ASSERT_EQ(comp(&e, "image")->dtype, SL_DT_U8);
    sl_element_clear(&e);
    ASSERT_EQ(sl_fn_set_max_pixels(dec, 0), SL_EINVAL);
    sl_fn_unref(dec);

    /* a valid 30000 x 30000 JPEG (3.5 MB, 900 MB decoded) is refused by default, before
     * anything is allocated for it: the peak resident size hardly moves */
    uint8_t *big = sl_test_flat_jpeg(30000, 30000, &len);
    ASSERT(len < 4000000);
    sl_fn *fns[2];
    ASSERT_OK(sl_fn_decode_jpeg("image", 0, &dec));
    ASSERT_OK(sl_fn_resize("image", 224, 224, &fns[1]));
    fns[0] = dec;
    sl_fn *fused;
    ASSERT_OK(sl_fn_chain(fns, 2, &fused)); /* fused with a resize: refused all the same */
    bool peak_ok = reset_peak_rss();
    long rss0 = status_kb(peak_ok ? "VmHWM" : "VmRSS");
    for (int k = 0; k < 2; k++) {
        elem1(&e, "image", bytes_of(big, len, 0));
        ASSERT_EQ(apply(k ? fused : dec, &e, 0), SL_ERANGE);
        ASSERT(strncmp(sl_errmsg(), "decode_jpeg: 'image': the JPEG is 30000x30000 (900000000 pixels), over decode_jpeg's "
                       "limit of 89478485 pixels\n---> HINT: decoded, it would take 900 MB; if the image is genuine, "
                       "raise the limit with decode_jpeg(image, max_pixels=900000000)", 200) == 0);
        ASSERT_EQ(e.t[0].dtype, SL_DT_BYTES);
        sl_element_clear(&e);
    }
    long rss1 = status_kb(peak_ok ? "VmHWM" : "VmRSS");
    printf("  30000x30000 refused: %s grew by %ld kB\n", peak_ok ? "peak RSS" : "RSS", rss1 - rss0);
    /* a decode would take 900 MB; refusing takes a few MB (up to ~20 under TSan's shadow
     * memory), so 64 MB tells the two apart on every build */
    if (rss0 >= 0 && rss1 >= 0) ASSERT(rss1 - rss0 < 64 * 1024);
    free(big);
    free(small);
    sl_fn_unref(fused);
    sl_fn_unref(fns[1]);
    sl_fn_unref(dec);
}

TEST(test_resize_pixel_limit) {
    /* a 2x2x3 image resized to 200000 x 200000 would be 120 GB: refused before allocating */
    int64_t dims[3] = {2, 2, 3};
    sl_fn *rs;
    ASSERT_OK(sl_fn_resize("image", 200000, 200000, &rs));
    sl_element e;
    elem1(&e, "image", tensor_of(SL_DT_U8, 3, dims, NULL));
    ASSERT_EQ(apply(rs, &e, 0), SL_ERANGE);
    ASSERT_STREQ(sl_errmsg(), "resize: 'image': the output would be 200000x200000 (40000000000 pixels), over resize's "
                              "limit of 89478485 pixels\n---> HINT: raise it with resize(image, ..., "
                              "max_pixels=40000000000) in the config (sl_fn_set_max_pixels in C), or ask for a smaller size");
    ASSERT_EQ(comp(&e, "image")->dims[0], 2); /* left as it was */
    sl_fn_unref(rs);
    /* the limit is the function's: 10x10 passes at 100, not at 99; the crops have one too */
    ASSERT_OK(sl_fn_resize("image", 10, 10, &rs));
    ASSERT_OK(sl_fn_set_max_pixels(rs, 99));
    ASSERT_EQ(apply(rs, &e, 0), SL_ERANGE);
    ASSERT_OK(sl_fn_set_max_pixels(rs, 100));
    ASSERT_OK(apply(rs, &e, 0));
    ASSERT_EQ(comp(&e, "image")->dims[0], 10);
    sl_fn_unref(rs);
    sl_fn *rrc, *cc, *sc;
    ASSERT_OK(sl_fn_random_resized_crop("image", 8, 8, 0.5, 1, 0.75, 1.333, &rrc));
    ASSERT_OK(sl_fn_set_max_pixels(rrc, 63));
    ASSERT_EQ(apply(rrc, &e, 5), SL_ERANGE);
    ASSERT_CONTAINS(sl_errmsg(), "random_resized_crop: 'image': the output would be 8x8 (64 pixels), over "
                                 "random_resized_crop's limit of 63 pixels");
    ASSERT_OK(sl_fn_center_crop("image", 5, 5, &cc));
    ASSERT_OK(sl_fn_set_max_pixels(cc, 24));
    ASSERT_EQ(apply(cc, &e, 0), SL_ERANGE);
    ASSERT_OK(sl_fn_set_max_pixels(cc, 25));
    ASSERT_OK(apply(cc, &e, 0));
    ASSERT_EQ(comp(&e, "image")->dims[0], 5);
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
    elem1(&e, "image", bytes_of(small, len, 0));
    ASSERT_EQ(apply(chain, &e, 0), SL_ERANGE);
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
    RUN(test_random_flip);
    RUN(test_center_crop);
    RUN(test_normalize);
    RUN(test_cast_saturates);
    RUN(test_scale);
    RUN(test_decode_raw);
    RUN(test_one_hot);
    RUN(test_parse_example);
    RUN(test_parse_example_errors);
    RUN(test_random_resized_crop_distribution);
    RUN(test_determinism_across_parallelism);
    RUN(test_decode_jpeg_fused_vs_unfused);
    RUN(test_decode_jpeg_fused_on_repository_jpegs);
    RUN(test_parse_decode_chain);
    RUN(test_decode_jpeg_absorbs_flip_and_normalize);
    RUN(test_decode_jpeg_builds_in_batch_slot);
    RUN(test_decode_jpeg_pixel_limit);
    RUN(test_resize_pixel_limit);
    TEST_MAIN_END();
}
