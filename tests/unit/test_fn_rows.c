/* The row operations the image functions share with decode_jpeg's fused path
 * (pipeline/fn/image.h): a resample handed to a row sink gives, row by row and in order, the
 * floats that round (sl__row_round_u8) to the image it writes, and mirrored rows are the
 * image's rows through random_flip's sl__row_flip; sl__row_normalize_rounded gives exactly
 * normalize's floats for the rounded values, and those are normalize's own output on the
 * uint8 image; random_flip's output is its row operations applied row by row; decode_jpeg and
 * the geometry functions, made by one constructor, keep their argument errors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/fn/image.h" /* and pipeline/internal.h: sl__fn_apply */
#include "sluice/fn.h"
#include "helper_fn.h"
#include "test.h"

/* What a sink saw: each row rounded (and its count), in order. */
typedef struct {
    int64_t n;       /* values in a row */
    int64_t next;    /* the row expected next */
    int64_t out_of_order;
    uint8_t *rows;   /* dh x n: row y rounded */
} seen_rows;

static void keep_row(void *ctx, int64_t y, const float *v) {
    seen_rows *s = ctx;
    if (y != s->next) s->out_of_order++;
    s->next = y + 1;
    sl__row_round_u8(v, s->n, s->rows + y * s->n);
}

typedef struct {
    int64_t sh, sw;            /* source */
    double ry, rx, rh, rw;     /* region */
    int64_t dh, dw;            /* output */
} resample_case;

TEST(test_sink_rows_are_the_image) {
    static const resample_case cases[] = {
        {37, 53, 0, 0, 37, 53, 17, 21},         /* shrinking both ways */
        {9, 7, 0, 0, 9, 7, 23, 31},             /* growing both ways */
        {40, 6, 0, 0, 40, 6, 11, 19},           /* rows shrink, columns grow */
        {6, 40, 0, 0, 6, 40, 19, 11},           /* rows grow, columns shrink */
        {20, 24, 2, 3, 10, 12, 10, 12},         /* an integer window of the output's size */
        {31, 29, 1.75, 2.5, 20.5, 17.25, 13, 9} /* a fractional region */
    };
    sl_rng rng = {7};
    int checked = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int cfg = 0; cfg < 4; cfg++) {
            const resample_case *r = &cases[k];
            bool aa = cfg & 1;
            int64_t c = cfg & 2 ? 3 : 1, stride = r->sw * c + 5; /* rows with a gap after them */
            uint8_t *src = malloc((size_t)(r->sh * stride));
            for (int64_t i = 0; i < r->sh * stride; i++) src[i] = (uint8_t)sl__rng_u64(&rng);
            int64_t n = r->dw * c;
            uint8_t *want = malloc((size_t)(r->dh * n)), *got = malloc((size_t)(r->dh * n));
            ASSERT_OK(sl__resample_u8(aa, src, r->sh, r->sw, c, stride, r->ry, r->rx, r->rh, r->rw, want,
                                      r->dh, r->dw, NULL));
            for (int mirror = 0; mirror < 2; mirror++) {
                seen_rows s = {n, 0, 0, got};
                memset(got, 0xaa, (size_t)(r->dh * n));
                sl__row_sink sink = {keep_row, &s, mirror};
                ASSERT_OK(sl__resample_u8(aa, src, r->sh, r->sw, c, stride, r->ry, r->rx, r->rh, r->rw,
                                          NULL, r->dh, r->dw, &sink));
                ASSERT_EQ(s.out_of_order, 0);
                ASSERT_EQ(s.next, r->dh);
                for (int64_t y = 0; y < r->dh; y++) {
                    uint8_t flipped[64 * 3];
                    const uint8_t *w = want + y * n;
                    if (mirror) {
                        sl__row_flip(w, flipped, r->dw, (size_t)c, true);
                        w = flipped;
                    }
                    if (memcmp(got + y * n, w, (size_t)n) != 0) {
                        FAILF("case %zu (antialias %d, %lld channels, mirror %d): row %lld differs", k, aa,
                              (long long)c, mirror, (long long)y);
                        return;
                    }
                }
                checked++;
            }
            free(src);
            free(want);
            free(got);
        }
    ASSERT_EQ(checked, 6 * 4 * 2);
}

TEST(test_normalize_rounded_is_normalize) {
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
    static const int64_t lengths[] = {3, 24, 30, 96, 99, 672, 693};
    sl_rng rng = {11};
    float v[693], a[693], b[693];
    uint8_t u[693];
    for (int cfg = 0; cfg < 8; cfg++) {
        int64_t c = cfg & 1 ? 3 : 1;
        int nl = c == 3 && (cfg & 2) ? 3 : 1;
        bool scale = cfg & 4;
        sl_fn *fn;
        ASSERT_OK(sl_fn_normalize("image", mean, stdv, nl, scale, &fn));
        const sl__norm_u8 *p = sl__normalize_u8_of(fn, "image", (int)c);
        ASSERT(p != NULL);
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            int64_t n = lengths[li];
            for (int64_t i = 0; i < n; i++) {
                /* samples of a resample, and the values either side of a rounding boundary */
                double x = (double)(sl__rng_u64(&rng) % 25500) / 100.0;
                v[i] = i % 7 == 3 ? (float)(i % 255) + 0.5f : i % 7 == 5 ? (float)(i % 255) + 0.49999997f : (float)x;
            }
            sl__row_normalize_rounded(v, n, c, p, a);
            sl__row_round_u8(v, n, u);
            sl__row_normalize_u8(u, n, c, p, b);
            if (memcmp(a, b, sizeof(float) * (size_t)n) != 0) {
                FAILF("cfg %d (channels %lld, %d means, scale %d), %lld values: the rounded row differs", cfg,
                      (long long)c, nl, scale, (long long)n);
                return;
            }
            /* and those are normalize's own floats for the uint8 image */
            int64_t d[3] = {1, n / c, c};
            sl_element e;
            sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, d, u));
            ASSERT_OK(sl_test_apply(fn, &e, 0));
            const sl_tensor *t = sl_test_comp(&e, "image");
            ASSERT_EQ(t->dtype, SL_DT_F32);
            ASSERT_MEMEQ(t->data, a, sizeof(float) * (size_t)n);
            sl_element_clear(&e);
        }
        /* not normalize of that component, or means that do not fit: nothing to absorb */
        ASSERT(sl__normalize_u8_of(fn, "label", (int)c) == NULL);
        if (nl == 3) ASSERT(sl__normalize_u8_of(fn, "image", 1) == NULL);
        sl_fn_unref(fn);
    }
}

TEST(test_flip_is_its_rows) {
    sl_rng rng = {3};
    static const struct { sl_dtype dt; int64_t c; } kinds[] = {{SL_DT_U8, 3}, {SL_DT_U8, 1}, {SL_DT_F32, 3}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int dir = 1; dir < 4; dir++) {
            bool fh = dir & 1, fv = dir & 2;
            int64_t H = 5, W = 7, C = kinds[k].c, d[3] = {H, W, C};
            size_t px = (size_t)C * sl_dtype_size(kinds[k].dt), nb = (size_t)(H * W) * px;
            uint8_t img[5 * 7 * 12], want[5 * 7 * 12];
            for (size_t i = 0; i < nb; i++) img[i] = (uint8_t)sl__rng_u64(&rng);
            if (kinds[k].dt == SL_DT_F32) /* finite floats, whatever the bytes */
                for (size_t i = 0; i < nb / 4; i++) {
                    float f = (float)(img[4 * i] % 200) - 100.0f;
                    memcpy(img + 4 * i, &f, 4);
                }
            /* by hand: pixel (y, x) from (fv ? H-1-y : y, fh ? W-1-x : x) */
            for (int64_t y = 0; y < H; y++)
                for (int64_t x = 0; x < W; x++)
                    memcpy(want + (size_t)(y * W + x) * px,
                           img + (size_t)((fv ? H - 1 - y : y) * W + (fh ? W - 1 - x : x)) * px, px);
            sl_fn *fn;
            ASSERT_OK(sl_fn_random_flip("image", fh, fv, 1.0, &fn));
            sl_element e;
            sl_test_elem1(&e, "image", sl_test_tensor(kinds[k].dt, 3, d, img));
            ASSERT_OK(sl_test_apply(fn, &e, 1));
            ASSERT_MEMEQ(sl_test_comp(&e, "image")->data, want, nb);
            sl_element_clear(&e);
            sl_fn_unref(fn);
            /* the row operations alone */
            uint8_t rows[5 * 7 * 12];
            for (int64_t y = 0; y < H; y++)
                sl__row_flip(img + (size_t)(sl__flip_row(y, H, fv) * W) * px, rows + (size_t)(y * W) * px, W, px, fh);
            ASSERT_MEMEQ(rows, want, nb);
        }
}

TEST(test_image_fn_constructors) {
    char longname[SL_NAME_MAX + 1];
    memset(longname, 'x', SL_NAME_MAX);
    longname[SL_NAME_MAX] = 0;
    sl_fn *fn = (sl_fn *)1;
    ASSERT_EQ(sl_fn_decode_jpeg("", 3, &fn), SL_EINVAL);
    ASSERT(fn == NULL);
    ASSERT_STREQ(sl_errmsg(), "decode_jpeg: component name must be 1..63 characters");
    ASSERT_EQ(sl_fn_decode_jpeg("image", 2, &fn), SL_EINVAL);
    ASSERT(fn == NULL);
    ASSERT_STREQ(sl_errmsg(), "decode_jpeg: channels 2 must be 0 (as in the file), 1 or 3");
    ASSERT_EQ(sl_fn_center_crop(longname, 4, 4, &fn), SL_EINVAL);
    ASSERT(fn == NULL);
    ASSERT_STREQ(sl_errmsg(), "center_crop: component name must be 1..63 characters");
    ASSERT_EQ(sl_fn_random_resized_crop("image", 0, 5, 0.08, 1.0, 0.75, 4.0 / 3, &fn), SL_EINVAL);
    ASSERT(fn == NULL);
    ASSERT_STREQ(sl_errmsg(), "random_resized_crop: size 0x5 must be at least 1x1");
    /* each keeps its own component and pixel limit */
    sl_fn *dec, *crop;
    ASSERT_OK(sl_fn_decode_jpeg("image", 0, &dec));
    ASSERT_OK(sl_fn_center_crop("picture", 2, 2, &crop));
    ASSERT_OK(sl_fn_set_max_pixels(crop, 3));
    const sl__geom_fn *g = sl__as_geom(crop);
    ASSERT(g != NULL);
    ASSERT_STREQ(g->im.comp, "picture");
    ASSERT_EQ(g->im.max_pixels, 3);
    ASSERT_EQ(g->height, 2);
    ASSERT(sl__as_geom(dec) == NULL);
    ASSERT_OK(sl_fn_set_max_pixels(dec, 5));
    ASSERT_EQ(((const sl__image_fn *)dec)->max_pixels, 5);
    ASSERT_STREQ(((const sl__image_fn *)dec)->comp, "image");
    uint8_t px[3 * 3] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    int64_t d[3] = {3, 3, 1};
    sl_element e;
    sl_test_elem1(&e, "picture", sl_test_tensor(SL_DT_U8, 3, d, px));
    ASSERT_EQ(sl_test_apply(crop, &e, 0), SL_ERANGE); /* a 2x2 crop: 4 pixels, over 3 */
    sl_element_clear(&e);
    sl_fn_unref(dec);
    sl_fn_unref(crop);
}

int main(void) {
    RUN(test_sink_rows_are_the_image);
    RUN(test_normalize_rounded_is_normalize);
    RUN(test_flip_is_its_rows);
    RUN(test_image_fn_constructors);
    TEST_MAIN_END();
}
