/* pipeline/fn/decode_jpeg.c: decode_jpeg fused with a crop or resize against the unfused
 * chain (bit for bit without DCT scaling, on synthetic and on the repository's photos;
 * within a stated tolerance with it), absorbing a flip and a normalize bit for bit,
 * parse_example's bytes decoded as a view, the fused result built in its batch slot, and
 * the pixel limit refusing a huge JPEG before anything is allocated for it. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "pipeline/fn/image.h" /* and pipeline/internal.h */
#include "sluice/example.h"
#include "sluice/fn.h"
#include "sluice/jpeg.h"
#include "sluice/pipeline.h"
#include "sluice/tfrecord.h"
#include "helper_fn.h"
#include "helper_jpeg.h"
#include "test.h"

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
    sl_tensor t = sl_test_bytes(ps->jpeg[v % 4], ps->len[v % 4], 0);
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
    *out = NULL;
    *len = 0;
    sl_status s = sl_fn_custom("jpeg_source", jpeg_source, ps, NULL, &src);
    if (s) return s;
    all[0] = src;
    for (int i = 0; i < n && i < 7; i++) all[i + 1] = fns[i];
    if (!(s = sl_fn_chain(all, n + 1, &chain))) {
        sl_test_pipe p = {.count = count, .parallelism = 2, .batch = batch, .fused = fused};
        s = sl_test_pipe_bytes(chain, &p, "image", NULL, out, len);
    }
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
    sl_test_elem1(&e, "image", sl_test_bytes(ps.jpeg[0], ps.len[0], 3));
    ASSERT_OK(sl_test_apply(dec, &e, 0));
    const sl_tensor *t = sl_test_comp(&e, "image");
    ASSERT(t->dtype == SL_DT_U8 && t->rank == 3 && t->dims[0] == 250 && t->dims[1] == 333 && t->dims[2] == 3);
    sl_element e2;
    sl_test_elem1(&e2, "image", sl_test_bytes(ps.jpeg[0], ps.len[0], 0));
    ASSERT_OK(plain_decode(NULL, &e2, NULL));
    ASSERT_MEMEQ(t->data, e2.t[0].data, 250 * 333 * 3);
    sl_element_clear(&e);
    sl_element_clear(&e2);
    /* grayscale output */
    sl_fn *gray;
    ASSERT_OK(sl_fn_decode_jpeg("image", 1, &gray));
    sl_test_elem1(&e, "image", sl_test_bytes(ps.jpeg[2], ps.len[2], 0));
    ASSERT_OK(sl_test_apply(gray, &e, 0));
    ASSERT_EQ(e.t[0].dims[2], 1);
    sl_element_clear(&e);
    sl_fn_unref(gray);
    /* not a JPEG, truncated JPEG: SL_ECORRUPT naming the function and the component, both
     * alone and fused */
    sl_fn *fns[2] = {dec, geoms[0]}, *fused;
    ASSERT_OK(sl_fn_chain(fns, 2, &fused));
    for (int k = 0; k < 2; k++) {
        sl_fn *fn = k ? fused : dec;
        sl_test_elem1(&e, "image", sl_test_bytes("hello, world", 12, 0));
        ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_ECORRUPT);
        ASSERT(strncmp(sl_errmsg(), "decode_jpeg: 'image': jpeg: ", 28) == 0);
        sl_element_clear(&e);
        sl_test_elem1(&e, "image", sl_test_bytes(ps.jpeg[1], ps.len[1] / 2, 0));
        ASSERT_EQ(sl_test_apply(fn, &e, 0), k ? SL_ECORRUPT : SL_ECORRUPT);
        ASSERT(strncmp(sl_errmsg(), "decode_jpeg: 'image': jpeg: ", 28) == 0);
        sl_element_clear(&e);
    }
    sl_fn_unref(fused);
    int64_t one = 1;
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_I64, 0, NULL, &one));
    ASSERT_EQ(sl_test_apply(dec, &e, 0), SL_EINVAL);
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
        sl_test_elem1(&e, "record", sl_test_bytes(rec.data, rec.len, 0));
        if (!(s = sl_test_apply(parse, &e, 0))) {
            const sl_bytes *b = sl_test_comp(&e, "image")->data;
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
    sl_feature_spec specs[2] = {sl_test_spec("image/encoded", SL_DT_BYTES, 0, 0, 0, 0),
                                sl_test_spec("label", SL_DT_I64, 0, 0, 0, 0)};
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
        sl_test_elem1(&e, "record", sl_test_bytes(rec, rlen, 1));
        ASSERT_OK(sl__fn_apply(chain, &e, seed, 0, st));
        const sl_tensor *t = sl_test_comp(&e, "image");
        ASSERT(t && t->dtype == SL_DT_U8 && t->rank == 3);
        ASSERT_EQ(t->dims[0], 40);
        ASSERT_EQ(t->dims[1], 40);
        ASSERT_EQ(t->dims[2], 3);
        t = sl_test_comp(&e, "label");
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
    sl_test_elem1(&e, "record", sl_test_bytes(rec, rlen, 0));
    ASSERT_EQ(sl_test_apply(chain, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "center_crop: no component 'other' (the element has: image, label)");
    ASSERT_EQ(sl_test_comp(&e, "image")->dims[0], 90); /* decoded whole before the crop failed */
    ASSERT_EQ(sl_test_comp(&e, "image")->dims[1], 120);
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
            sl_test_elem1(&a, "image", sl_test_bytes(ps.jpeg[k % 4], ps.len[k % 4], 0));
            sl_test_elem1(&b, "image", sl_test_bytes(ps.jpeg[k % 4], ps.len[k % 4], 0));
            ASSERT_OK(sl_test_apply(full, &a, seed));
            ASSERT_OK(sl_test_apply(crop, &b, seed));
            for (int m = 2; m < n; m++) ASSERT_OK(sl_test_apply(f[m], &b, sl__mix(seed, (uint64_t)m)));
            const sl_tensor *ta = sl_test_comp(&a, "image"), *tb = sl_test_comp(&b, "image");
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
    sl_test_elem1(&e, "image", sl_test_bytes(gj, glen, 0));
    ASSERT_EQ(sl_test_apply(chain, &e, 1), SL_EINVAL);
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
    sl_test_elem1(&e, "image", sl_test_bytes(small, len, 3));
    ASSERT_OK(sl_test_apply(dec, &e, 0));
    const sl_tensor *t = sl_test_comp(&e, "image");
    ASSERT_EQ(t->rank, 3);
    ASSERT_EQ(t->dims[0] * t->dims[1] * t->dims[2], 64 * 64);
    for (int i = 0; i < 64 * 64; i++) ASSERT_EQ(((const uint8_t *)t->data)[i], 128);
    sl_element_clear(&e);
    sl_fn_unref(dec);

    /* a limit below its 4096 pixels refuses it, one at 4096 takes it */
    ASSERT_OK(sl_fn_decode_jpeg("image", 0, &dec));
    ASSERT_OK(sl_fn_set_max_pixels(dec, 4095));
    sl_test_elem1(&e, "image", sl_test_bytes(small, len, 0));
    ASSERT_EQ(sl_test_apply(dec, &e, 0), SL_ERANGE);
    ASSERT_STREQ(sl_errmsg(), "decode_jpeg: 'image': the JPEG is 64x64 (4096 pixels), over decode_jpeg's limit of "
                              "4095 pixels\n---> HINT: decoded, it would take 4 kB; if the image is genuine, raise the "
                              "limit with decode_jpeg(image, max_pixels=4096) in the config (sl_fn_set_max_pixels in C)");
    ASSERT_EQ(e.t[0].dtype, SL_DT_BYTES); /* left as it was */
    ASSERT_OK(sl_fn_set_max_pixels(dec, 4096));
    ASSERT_OK(sl_test_apply(dec, &e, 0));
    ASSERT_EQ(sl_test_comp(&e, "image")->dtype, SL_DT_U8);
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
        sl_test_elem1(&e, "image", sl_test_bytes(big, len, 0));
        ASSERT_EQ(sl_test_apply(k ? fused : dec, &e, 0), SL_ERANGE);
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

int main(void) {
    RUN(test_decode_jpeg_fused_vs_unfused);
    RUN(test_decode_jpeg_fused_on_repository_jpegs);
    RUN(test_parse_decode_chain);
    RUN(test_decode_jpeg_absorbs_flip_and_normalize);
    RUN(test_decode_jpeg_builds_in_batch_slot);
    RUN(test_decode_jpeg_pixel_limit);
    TEST_MAIN_END();
}
