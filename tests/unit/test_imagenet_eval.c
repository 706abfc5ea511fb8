/* examples/imagenet_resnet.sl's validation pipeline against torchvision's evaluation
 * geometry, Resize(256) + CenterCrop(224): the shorter side becomes 256 and the longer
 * int(256 * long / short) (truncated), then the crop's top row is round((H - 224) / 2) and
 * its left column round((W - 224) / 2), Python's round (ties to even). The example's own
 * statements run (the config file, its `files` pointed at a TFRecord written here) on JPEGs
 * of several sizes: odd ones, a shorter side below 256, exactly 256 (no resize), and one
 * over 512 (where DCT scaling could apply). Each output must be float32 224x224x3 and equal,
 * to well under one pixel level, a reference built here from the formulas above: the same
 * decoder's full decode, the antialiased resampler called directly on the whole image at
 * the torchvision size, the crop at the torchvision offsets, and the normalization written
 * out. The pixels encode their coordinates (steep gradients), so a window one row or column
 * off differs by several levels. */
#include <math.h>
#include <stdint.h>

#include "pipeline/fn/image.h" /* sl__resize_aa_u8 */
#include "sluice/config.h"
#include "sluice/example.h"
#include "sluice/from_config.h"
#include "sluice/jpeg.h"
#include "sluice/pipeline.h"
#include "sluice/tfrecord.h"
#include "helper_files.h"
#include "test.h"

#define SIDE 256
#define CROP 224

static const int sizes[][2] = {
    /* H, W */
    {375, 500}, /* landscape: 256x341, left round(58.5) = 58 */
    {500, 375}, /* portrait: 341x256, top 58 */
    {257, 333}, /* odd: 256x331, left round(53.5) = 54 */
    {301, 257}, /* odd: 299x256, top round(37.5) = 38 */
    {256, 256}, /* already 256: no resize, crop at 16 */
    {256, 257}, /* no resize, left round(16.5) = 16 */
    {200, 300}, /* shorter side under 256: grows to 256x384 */
    {600, 520}, /* shorter side over 512: 295x256 */
    {333, 1000}, /* wide: 256x768 */
};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))

static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdev[3] = {0.229f, 0.224f, 0.225f};

/* Python's round(n / 2) for n >= 0: halves go to the even neighbour. */
static int64_t round_half_even_div2(int64_t n) {
    int64_t k = n / 2;
    if (n % 2 == 0) return k;
    return k % 2 == 0 ? k : k + 1;
}

/* torchvision's Resize(SIDE) output size: int(SIDE * long / short), exact in integers. */
static void tv_resize(int64_t H, int64_t W, int64_t *oh, int64_t *ow) {
    if (W <= H) {
        *ow = SIDE;
        *oh = SIDE * H / W;
    } else {
        *oh = SIDE;
        *ow = SIDE * W / H;
    }
}

/* An H x W RGB image of its coordinates: red 5 levels a column, green 5 a row, blue 3 for
 * each of both (each wrapping at 256). */
static uint8_t *gradient(int h, int w) {
    uint8_t *px = malloc((size_t)h * (size_t)w * 3);
    if (!px) abort();
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * (size_t)w + (size_t)x) * 3;
            p[0] = (uint8_t)(x * 5);
            p[1] = (uint8_t)(y * 5);
            p[2] = (uint8_t)((x + y) * 3);
        }
    return px;
}

/* The JPEGs (kept in jpg[], lengths in len[]) as Examples with TensorFlow's ImageNet feature
 * names, label k for the k-th, in one TFRecord file at PATH. */
static sl_status write_records(const char *path, uint8_t **jpg, size_t *len) {
    sl_tfr_writer *w;
    sl_tfr_write_opts o = sl_tfr_write_opts_default();
    sl_status s = sl_tfr_writer_open(path, &o, &w);
    if (s) return s;
    sl_exb *b = NULL;
    if (!s) s = sl_exb_new(&b);
    for (int k = 0; k < NSIZES && !s; k++) {
        uint8_t *px = gradient(sizes[k][0], sizes[k][1]);
        s = sl_jpeg_encode(px, sizes[k][1], sizes[k][0], 3, 90, &jpg[k], &len[k]);
        free(px);
        if (s) break;
        sl_exb_reset(b);
        sl_bytes enc = {jpg[k], len[k]};
        int64_t label = k;
        uint8_t *ser = NULL;
        size_t n = 0;
        if (!(s = sl_exb_bytes(b, "image/encoded", &enc, 1)) &&
            !(s = sl_exb_int64s(b, "image/class/label", &label, 1)) &&
            !(s = sl_exb_serialize(b, &ser, &n)))
            s = sl_tfr_writer_write(w, ser, n);
        free(ser);
    }
    sl_exb_free(b);
    sl_status c = sl_tfr_writer_close(w);
    return s ? s : c;
}

/* The reference output of image k: full decode, resize to torchvision's size, crop at its
 * offsets, normalize. Writes CROP*CROP*3 floats to out; the window into *top, *left. */
static sl_status reference(const uint8_t *jpg, size_t len, int k, float *out, int64_t *top, int64_t *left) {
    int64_t H = sizes[k][0], W = sizes[k][1], oh, ow;
    tv_resize(H, W, &oh, &ow);
    *top = round_half_even_div2(oh - CROP);
    *left = round_half_even_div2(ow - CROP);
    uint8_t *full = malloc((size_t)(H * W * 3)), *rs = malloc((size_t)(oh * ow * 3));
    sl_jpeg_decoder *d = NULL;
    sl_status s = full && rs ? sl_jpeg_decoder_new(&d) : SL_ENOMEM;
    int dw = 0, dh = 0;
    if (!s) s = sl_jpeg_decode(d, jpg, len, 3, 8, full, (size_t)(H * W * 3), &dw, &dh);
    if (!s && (dw != W || dh != H)) s = SL_EINTERNAL;
    if (!s && oh == H && ow == W) memcpy(rs, full, (size_t)(H * W * 3));
    else if (!s) s = sl__resize_aa_u8(full, H, W, 3, W * 3, 0, 0, (double)H, (double)W, rs, oh, ow);
    for (int64_t y = 0; y < CROP && !s; y++)
        for (int64_t x = 0; x < CROP; x++)
            for (int c = 0; c < 3; c++) {
                uint8_t v = rs[((*top + y) * ow + *left + x) * 3 + c];
                out[(y * CROP + x) * 3 + c] = ((float)v / 255.0f - mean[c]) / stdev[c];
            }
    sl_jpeg_decoder_free(d);
    free(full);
    free(rs);
    return s;
}

TEST(test_example_eval_matches_torchvision_geometry) {
    char dir[256], path[512], cfgpath[512], set[700];
    if (!sl_test_tmp_file(dir, sizeof dir, "sluice-imagenet-eval", path, sizeof path, "val.tfrecord"))
        SKIP("no temporary folder");
    uint8_t *jpg[NSIZES] = {0};
    size_t len[NSIZES] = {0};
    float *ref = malloc(CROP * CROP * 3 * sizeof(float));
    sl_cfg *cfg = NULL;
    sl_dataset *ds = NULL;
    sl_iter *it = NULL;
    sl_element e;
    sl_element_init(&e);
    ASSERT(ref != NULL);
    ASSERT_OK(write_records(path, jpg, len));
    snprintf(cfgpath, sizeof cfgpath, "%s/examples/imagenet_resnet.sl", SL_TEST_SRC);
    ASSERT_OK(sl_cfg_parse_file(cfgpath, &cfg));
    snprintf(set, sizeof set, "pipeline.validation.files=\"%s\"", path);
    ASSERT_OK(sl_cfg_set(cfg, set));
    ASSERT_OK(sl_pipeline_from_config(cfg, "validation", NULL, &ds));
    ASSERT_OK(sl_iter_create(ds, NULL, &it));
    ASSERT_OK(sl_iter_next(it, &e)); /* one batch: batch 250 is more than there are */
    int ii = sl_element_find(&e, "image"), li = sl_element_find(&e, "label");
    ASSERT(ii >= 0 && li >= 0);
    const sl_tensor *img = &e.t[ii], *lab = &e.t[li];
    ASSERT_EQ(img->dtype, SL_DT_F32);
    ASSERT_EQ(img->rank, 4);
    ASSERT_EQ(img->dims[0], NSIZES);
    ASSERT_EQ(img->dims[1], CROP);
    ASSERT_EQ(img->dims[2], CROP);
    ASSERT_EQ(img->dims[3], 3);
    ASSERT_EQ(lab->dims[0], NSIZES);
    /* a quarter of a level of the channel with the largest std: only equal pixels pass */
    const float tol = 0.25f / 255.0f / 0.229f;
    for (int k = 0; k < NSIZES; k++) {
        ASSERT_EQ(((const int64_t *)lab->data)[k], k);
        int64_t top, left;
        ASSERT_OK(reference(jpg[k], len[k], k, ref, &top, &left));
        const float *got = (const float *)img->data + (size_t)k * CROP * CROP * 3;
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < CROP * CROP * 3; i++)
            if (!(fabsf(got[i] - ref[i]) <= tol)) {
                if (first < 0) first = i;
                bad++;
            }
        if (bad)
            FAILF("%dx%d: %lld of %d values differ from Resize(256) + CenterCrop(224) at (%lld, %lld); "
                  "first at pixel (%lld, %lld) channel %lld: %g, expected %g",
                  sizes[k][0], sizes[k][1], (long long)bad, CROP * CROP * 3, (long long)top,
                  (long long)left, (long long)(first / 3 / CROP), (long long)(first / 3 % CROP),
                  (long long)(first % 3), (double)got[first], (double)ref[first]);
    }
    sl_element_clear(&e);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    sl_cfg_free(cfg);
    for (int k = 0; k < NSIZES; k++) free(jpg[k]);
    free(ref);
    sl_test_rm_rf(dir);
}

/* The reference's own formulas on the cases worked out by hand in the table above. */
TEST(test_torchvision_formulas) {
    int64_t oh, ow;
    tv_resize(375, 500, &oh, &ow);
    ASSERT_EQ(oh, 256); ASSERT_EQ(ow, 341);
    tv_resize(301, 257, &oh, &ow);
    ASSERT_EQ(oh, 299); ASSERT_EQ(ow, 256);
    tv_resize(333, 1000, &oh, &ow);
    ASSERT_EQ(oh, 256); ASSERT_EQ(ow, 768);
    ASSERT_EQ(round_half_even_div2(341 - CROP), 58); /* 58.5 */
    ASSERT_EQ(round_half_even_div2(331 - CROP), 54); /* 53.5 */
    ASSERT_EQ(round_half_even_div2(299 - CROP), 38); /* 37.5 */
    ASSERT_EQ(round_half_even_div2(257 - CROP), 16); /* 16.5 */
    ASSERT_EQ(round_half_even_div2(256 - CROP), 16);
}

int main(void) {
    RUN(test_torchvision_formulas);
    RUN(test_example_eval_matches_torchvision_geometry);
    TEST_MAIN_END();
}
