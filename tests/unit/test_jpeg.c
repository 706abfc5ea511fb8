/* formats/jpeg.c: header, full and scaled decode against djpeg (same library, same default
 * settings, so pixels must match exactly), cropped decode against the full decode, scale
 * picking, encode, CMYK, and corrupt input (truncations, byte flips). Images are encoded
 * here from synthetic pixels, plus the two real JPEGs inside tfrecord_lite's test file. */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <turbojpeg.h>

#include "sluice/jpeg.h"
#include "helper_files.h"
#include "helper_jpeg.h"
#include "test.h"

#define TFR_IMAGES SL_TEST_SHARED "/data/tfrecord-samples/jongwook__tfrecord_lite/tests__images.tfrecord"

/* ---- helpers --------------------------------------------------------------------------- */

static uint32_t rng_state = 12345;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

/* Gradients with a little noise and a few hard edges: exercises chroma upsampling. */
static uint8_t *make_pixels(int w, int h, int ch, uint32_t seed) {
    uint8_t *p = malloc((size_t)w * h * ch);
    rng_state = seed | 1;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < ch; c++) {
                int v = (x * (c + 1) * 255) / (w > 1 ? w - 1 : 1) / 2 + (y * 255) / (h > 1 ? h - 1 : 1) / 2;
                if (((x / 7) + (y / 5) + c) % 4 == 0)
                    v = 255 - v;
                v += (int)(rnd() % 21) - 10;
                p[((size_t)y * w + x) * ch + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

typedef struct img {
    uint8_t *data;
    size_t len;
    char what[64];
} img;

static img encode_img(int w, int h, int ch, int subsamp, int q, uint32_t seed) {
    img r = {0};
    uint8_t *px = make_pixels(w, h, ch, seed);
    sl_status s = sl_jpeg_encode2(px, w, h, ch, q, subsamp, &r.data, &r.len);
    free(px);
    if (s)
        printf("  encode %dx%dx%d failed: %s\n", w, h, ch, sl_errmsg());
    snprintf(r.what, sizeof r.what, "%dx%dx%d sub%d q%d", w, h, ch, subsamp, q);
    return r;
}

/* End of the JPEG that starts at p[0] (SOI), by walking its marker segments and entropy
 * data, so that bytes following it inside a protobuf are not included. 0 if none. */
static size_t jpeg_extent(const uint8_t *p, size_t n) {
    if (n < 4 || p[0] != 0xFF || p[1] != 0xD8)
        return 0;
    size_t i = 2;
    for (;;) {
        while (i < n && p[i] == 0xFF && i + 1 < n && p[i + 1] == 0xFF)
            i++; /* fill bytes */
        if (i + 1 >= n || p[i] != 0xFF)
            return 0;
        uint8_t m = p[i + 1];
        if (m == 0xD9)
            return i + 2;
        if ((m >= 0xD0 && m <= 0xD7) || m == 0x01) {
            i += 2;
            continue;
        }
        if (i + 3 >= n)
            return 0;
        size_t seg = (size_t)p[i + 2] << 8 | p[i + 3];
        i += 2 + seg;
        if (m == 0xDA) { /* entropy-coded data up to the next non-RST marker */
            while (i + 1 < n && !(p[i] == 0xFF && p[i + 1] != 0 && !(p[i + 1] >= 0xD0 && p[i + 1] <= 0xD7)))
                i++;
        }
    }
}

/* The JPEGs in a TFRecord file: walk the framing (u64 len, u32 crc, data, u32 crc) and find
 * each record's first SOI. Returns the count (up to max). */
static int tfrecord_jpegs(const char *path, img *out, int max) {
    size_t n;
    uint8_t *f = sl_test_read_file(path, &n);
    if (!f)
        return -1;
    int k = 0;
    size_t off = 0;
    while (off + 12 <= n && k < max) {
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--)
            len = len << 8 | f[off + i];
        size_t d = off + 12;
        if (len > n - d)
            break;
        for (size_t i = d; i + 3 < d + len; i++)
            if (f[i] == 0xFF && f[i + 1] == 0xD8 && f[i + 2] == 0xFF) {
                size_t e = jpeg_extent(f + i, d + len - i);
                if (e) {
                    out[k].data = malloc(e);
                    memcpy(out[k].data, f + i, e);
                    out[k].len = e;
                    snprintf(out[k].what, sizeof out[k].what, "tfrecord image %d", k);
                    k++;
                }
                break;
            }
        off = d + len + 4;
    }
    free(f);
    return k;
}

/* Decode with djpeg into a malloc'd buffer; NULL on failure. */
static uint8_t *djpeg(const img *im, int channels, int num, int *w, int *h) {
    char in[64], cmd[256];
    snprintf(in, sizeof in, "/tmp/sl_test_jpeg_%d.jpg", (int)getpid());
    FILE *f = fopen(in, "wb");
    if (!f)
        return NULL;
    fwrite(im->data, 1, im->len, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "djpeg %s -scale %d/8 -pnm %s", channels == 1 ? "-grayscale" : "-rgb",
             num, in);
    FILE *p = popen(cmd, "r");
    if (!p)
        return NULL;
    char magic[3] = {0};
    int maxv = 0;
    uint8_t *px = NULL;
    if (fscanf(p, "%2s %d %d %d", magic, w, h, &maxv) == 4 && fgetc(p) != EOF && maxv == 255) {
        int c = strcmp(magic, "P6") == 0 ? 3 : strcmp(magic, "P5") == 0 ? 1 : 0;
        if (c == channels) {
            size_t need = (size_t)*w * *h * c;
            px = malloc(need);
            if (fread(px, 1, need, p) != need) {
                free(px);
                px = NULL;
            }
        }
    }
    pclose(p);
    unlink(in);
    return px;
}

static int have_djpeg(void) { return system("djpeg -version >/dev/null 2>&1") == 0; }

/* The image set for decode and crop checks: encoded here (odd sizes, all subsamplings)
 * plus the real ones when the shared data is present. */
static int image_set(img *set, int max) {
    static const struct { int w, h, ch, sub, q; } spec[] = {
        {213, 319, 3, TJSAMP_420, 90}, {213, 319, 1, TJSAMP_GRAY, 90},
        {64, 48, 3, TJSAMP_420, 75},   {97, 61, 3, TJSAMP_422, 85},
        {97, 61, 3, TJSAMP_444, 95},   {50, 77, 3, TJSAMP_440, 80},
        {83, 35, 3, TJSAMP_411, 80},   {1, 1, 3, TJSAMP_420, 90},
        {9, 17, 1, TJSAMP_GRAY, 50},   {300, 200, 3, TJSAMP_420, 92},
    };
    int k = 0;
    for (size_t i = 0; i < sizeof spec / sizeof spec[0] && k < max; i++)
        set[k++] = encode_img(spec[i].w, spec[i].h, spec[i].ch, spec[i].sub, spec[i].q,
                              (uint32_t)(i * 7919 + 1));
    /* cjpeg-made files with what the encoder above does not make: progressive, arithmetic,
     * restart markers, 3x1 sampling; and a YCCK file (CMYK) */
    static const char *seeds[] = {"c422_prog_33x20.jpg", "c444_arith_17x9.jpg",
                                  "c420_rst_33x20.jpg", "c311_33x20.jpg",
                                  "c420_prog_arith_33x20.jpg", "ycck_422_20x12.jpg"};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0] && k < max; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/tests/fuzz/seeds/jpeg/%s", SL_TEST_SRC, seeds[i]);
        set[k].data = sl_test_read_file(path, &set[k].len);
        if (!set[k].data) {
            printf("  missing %s\n", path);
            continue;
        }
        snprintf(set[k].what, sizeof set[k].what, "%s", seeds[i]);
        k++;
    }
    int t = tfrecord_jpegs(TFR_IMAGES, set + k, max - k);
    if (t > 0)
        k += t;
    return k;
}

static void free_set(img *set, int n) {
    for (int i = 0; i < n; i++)
        free(set[i].data);
}

/* ---- tests ----------------------------------------------------------------------------- */

TEST(test_header_encoded) {
    sl_jpeg_decoder *d;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    img a = encode_img(213, 319, 3, TJSAMP_420, 90, 1);
    img b = encode_img(213, 319, 1, TJSAMP_GRAY, 90, 2);
    img c = encode_img(97, 61, 3, TJSAMP_422, 90, 3);
    sl_jpeg_info in;
    ASSERT_OK(sl_jpeg_header(d, a.data, a.len, &in));
    ASSERT_EQ(in.width, 213);
    ASSERT_EQ(in.height, 319);
    ASSERT_EQ(in.components, 3);
    ASSERT_EQ(in.subsamp, TJSAMP_420);
    ASSERT_EQ(in.colorspace, TJCS_YCbCr);
    ASSERT_OK(sl_jpeg_header(d, b.data, b.len, &in));
    ASSERT_EQ(in.width, 213);
    ASSERT_EQ(in.height, 319);
    ASSERT_EQ(in.components, 1);
    ASSERT_EQ(in.subsamp, TJSAMP_GRAY);
    ASSERT_EQ(in.colorspace, TJCS_GRAY);
    ASSERT_OK(sl_jpeg_header(d, c.data, c.len, &in));
    ASSERT_EQ(in.subsamp, TJSAMP_422);
    /* 3x1 chroma sampling: valid, but TurboJPEG 2.1 has no name for it */
    size_t n311;
    uint8_t *j311 = sl_test_read_file(SL_TEST_SRC "/tests/fuzz/seeds/jpeg/c311_33x20.jpg", &n311);
    ASSERT(j311);
    ASSERT_OK(sl_jpeg_header(d, j311, n311, &in));
    free(j311);
    ASSERT_EQ(in.width, 33);
    ASSERT_EQ(in.height, 20);
    ASSERT_EQ(in.components, 3);
    ASSERT_EQ(in.subsamp, -1);
    ASSERT_EQ(in.colorspace, TJCS_YCbCr);
    free(a.data);
    free(b.data);
    free(c.data);
    sl_jpeg_decoder_free(d);
    sl_jpeg_decoder_free(NULL);
}

TEST(test_header_tfrecord_images) {
    img set[4];
    int n = tfrecord_jpegs(TFR_IMAGES, set, 4);
    if (n < 0)
        SKIP("%s not present", TFR_IMAGES);
    ASSERT_EQ(n, 2);
    sl_jpeg_decoder *d;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    sl_jpeg_info in;
    ASSERT_OK(sl_jpeg_header(d, set[0].data, set[0].len, &in));
    ASSERT_EQ(in.width, 320);
    ASSERT_EQ(in.height, 213);
    ASSERT_EQ(in.components, 3);
    ASSERT_OK(sl_jpeg_header(d, set[1].data, set[1].len, &in));
    ASSERT_EQ(in.width, 194);
    ASSERT_EQ(in.height, 239);
    ASSERT_EQ(in.components, 1);
    ASSERT_EQ(in.colorspace, TJCS_GRAY);
    sl_jpeg_decoder_free(d);
    free_set(set, n);
}

TEST(test_decode_matches_djpeg) {
    if (!have_djpeg())
        SKIP("djpeg (libjpeg-turbo-progs) not installed");
    img set[24];
    int n = image_set(set, 24);
    sl_jpeg_decoder *d;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    int compared = 0, cmyk = 0;
    for (int i = 0; i < n; i++) {
        sl_jpeg_info hi;
        ASSERT_OK(sl_jpeg_header(d, set[i].data, set[i].len, &hi));
        if (hi.components == 4) { /* djpeg cannot write CMYK as PNM: test_cmyk covers it */
            cmyk++;
            continue;
        }
        for (int ch = 1; ch <= 3; ch += 2)
            for (int num = 1; num <= 8; num++) {
                int rw = 0, rh = 0;
                uint8_t *ref = djpeg(&set[i], ch, num, &rw, &rh);
                if (!ref) {
                    FAILF("djpeg failed on %s", set[i].what);
                    goto out;
                }
                int sw, sh, ow, oh;
                sl_jpeg_info info;
                ASSERT_OK(sl_jpeg_header(d, set[i].data, set[i].len, &info));
                sl_jpeg_scaled_size(info.width, info.height, num, &sw, &sh);
                if (sw != rw || sh != rh) {
                    FAILF("%s scale %d/8: size %dx%d, djpeg %dx%d", set[i].what, num, sw, sh, rw, rh);
                    free(ref);
                    goto out;
                }
                size_t need = (size_t)sw * sh * ch;
                uint8_t *px = malloc(need);
                sl_status s = sl_jpeg_decode(d, set[i].data, set[i].len, ch, num, px, need, &ow, &oh);
                int same = s == SL_OK && ow == sw && oh == sh && memcmp(px, ref, need) == 0;
                if (!same)
                    FAILF("%s ch %d scale %d/8: status %d (%s), pixels differ from djpeg",
                          set[i].what, ch, num, s, sl_errmsg());
                free(px);
                free(ref);
                if (!same)
                    goto out;
                compared++;
            }
    }
    ASSERT_EQ(cmyk, 1);
    ASSERT_EQ(compared, (n - cmyk) * 16);
    ASSERT(n >= 16); /* 10 encoded + 6 cjpeg-made (+2 real when shared data is there) */
out:
    sl_jpeg_decoder_free(d);
    free_set(set, n);
}

/* Every rectangle kind: corners, odd offsets, one pixel, a row, a column, the whole image,
 * and ones that start exactly on and just after an iMCU boundary. */
static int rects_for(int sw, int sh, int r[][4], int max) {
    int k = 0;
#define ADD(X, Y, W, H)                                                                       \
    do {                                                                                     \
        int x_ = (X), y_ = (Y), w_ = (W), h_ = (H);                                          \
        if (k < max && x_ >= 0 && y_ >= 0 && w_ > 0 && h_ > 0 && x_ + w_ <= sw && y_ + h_ <= sh) { \
            r[k][0] = x_; r[k][1] = y_; r[k][2] = w_; r[k][3] = h_; k++; }                   \
    } while (0)
    ADD(0, 0, sw, sh);
    ADD(0, 0, 1, 1);
    ADD(sw - 1, sh - 1, 1, 1);
    ADD(1, 1, sw - 2, sh - 2);
    ADD(sw / 3 | 1, sh / 3 | 1, sw / 3, sh / 3);
    ADD(16, 16, 16, 16);
    ADD(15, 17, 3, 5);
    ADD(17, 15, sw - 17, sh - 15);
    ADD(8, 8, 9, 9);
    ADD(7, 9, 33, 1);
    ADD(5, 0, 1, sh);
    ADD(0, 13, sw, 3);
    ADD(31, 31, 2, 2);
    ADD(sw / 2, sh / 2, sw - sw / 2, sh - sh / 2);
#undef ADD
    return k;
}

TEST(test_crop_equals_full_decode_cropped) {
    img set[24];
    int n = image_set(set, 24);
    sl_jpeg_decoder *d;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    long checked = 0;
    for (int i = 0; i < n; i++) {
        sl_jpeg_info info;
        ASSERT_OK(sl_jpeg_header(d, set[i].data, set[i].len, &info));
        for (int ch = 1; ch <= 3; ch += 2)
            for (int num = 1; num <= 8; num++) {
                int sw, sh, ow, oh;
                sl_jpeg_scaled_size(info.width, info.height, num, &sw, &sh);
                uint8_t *full = malloc((size_t)sw * sh * ch);
                ASSERT_OK(sl_jpeg_decode(d, set[i].data, set[i].len, ch, num, full,
                                         (size_t)sw * sh * ch, &ow, &oh));
                int r[16][4];
                int nr = rects_for(sw, sh, r, 16);
                for (int j = 0; j < nr; j++) {
                    int x = r[j][0], y = r[j][1], w = r[j][2], h = r[j][3];
                    size_t need = (size_t)w * h * ch;
                    uint8_t *crop = malloc(need);
                    sl_status s = sl_jpeg_decode_crop(d, set[i].data, set[i].len, ch, num, x, y,
                                                      w, h, crop, need);
                    int bad_row = -1;
                    for (int yy = 0; s == SL_OK && yy < h && bad_row < 0; yy++)
                        if (memcmp(crop + (size_t)yy * w * ch,
                                   full + ((size_t)(y + yy) * sw + x) * ch, (size_t)w * ch) != 0)
                            bad_row = yy;
                    free(crop);
                    if (s != SL_OK || bad_row >= 0) {
                        FAILF("%s ch %d scale %d/8 crop %dx%d at (%d,%d): status %d (%s), "
                              "first differing row %d", set[i].what, ch, num, w, h, x, y, s,
                              sl_errmsg(), bad_row);
                        free(full);
                        goto out;
                    }
                    checked++;
                }
                free(full);
            }
    }
    ASSERT(checked > 1000);
out:
    sl_jpeg_decoder_free(d);
    free_set(set, n);
}

/* 300 random rectangles at random scales: the crop (and its view) equal that rectangle of
 * the full decode, with the decoder's speed settings `fast` (fast IDCT, no fancy chroma
 * upsampling) or the defaults. */
static void crop_random_rects(bool fast) {
    img set[3] = {encode_img(213, 319, 3, TJSAMP_420, 90, 77), encode_img(161, 123, 3, TJSAMP_422, 88, 78),
                  encode_img(131, 97, 1, TJSAMP_GRAY, 88, 79)};
    sl_jpeg_decoder *d;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    if (fast) sl_jpeg_decoder_set_speed(d, true, false);
    rng_state = 99;
    for (int it = 0; it < 300; it++) {
        img *im = &set[it % 3];
        int ch = (it / 3) % 2 ? 3 : 1, num = 1 + (int)(rnd() % 8);
        sl_jpeg_info info;
        ASSERT_OK(sl_jpeg_header(d, im->data, im->len, &info));
        int sw, sh;
        sl_jpeg_scaled_size(info.width, info.height, num, &sw, &sh);
        int x = (int)(rnd() % (unsigned)sw), y = (int)(rnd() % (unsigned)sh);
        int w = 1 + (int)(rnd() % (unsigned)(sw - x)), h = 1 + (int)(rnd() % (unsigned)(sh - y));
        uint8_t *full = malloc((size_t)sw * sh * ch), *crop = malloc((size_t)w * h * ch);
        ASSERT_OK(sl_jpeg_decode(d, im->data, im->len, ch, num, full, (size_t)sw * sh * ch, NULL, NULL));
        ASSERT_OK(sl_jpeg_decode_crop(d, im->data, im->len, ch, num, x, y, w, h, crop, (size_t)w * h * ch));
        /* the view: the same pixels, in rows at least as wide as the crop */
        const uint8_t *view;
        size_t stride;
        ASSERT_OK(sl_jpeg_decode_crop_view(d, im->data, im->len, ch, num, x, y, w, h, &view, &stride));
        ASSERT(view != NULL && stride >= (size_t)w * ch);
        for (int yy = 0; yy < h; yy++)
            if (memcmp(crop + (size_t)yy * w * ch, full + ((size_t)(y + yy) * sw + x) * ch, (size_t)w * ch) ||
                memcmp(view + (size_t)yy * stride, crop + (size_t)yy * w * ch, (size_t)w * ch)) {
                FAILF("%s ch %d num %d crop %dx%d at (%d,%d) row %d differs", im->what, ch, num, w, h, x, y, yy);
                it = 1 << 20;
                break;
            }
        free(full);
        free(crop);
    }
    sl_jpeg_decoder_free(d);
    free_set(set, 3);
}

TEST(test_crop_random_rects) { crop_random_rects(false); }

TEST(test_crop_random_rects_fast) { crop_random_rects(true); }

/* The speed settings change the pixels of a 4:2:0 image (not none of them, and on this
 * noise-like test image — the worst case for chroma upsampling — by under 16 levels on
 * average), and going back to the defaults gives the accurate decode bit for bit. */
TEST(test_speed_settings) {
    img im = encode_img(213, 319, 3, TJSAMP_420, 90, 81);
    sl_jpeg_decoder *d;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    size_t n = (size_t)213 * 319 * 3;
    uint8_t *acc = malloc(n), *fast = malloc(n), *again = malloc(n);
    ASSERT_OK(sl_jpeg_decode(d, im.data, im.len, 3, 8, acc, n, NULL, NULL));
    sl_jpeg_decoder_set_speed(d, true, false);
    ASSERT_OK(sl_jpeg_decode(d, im.data, im.len, 3, 8, fast, n, NULL, NULL));
    sl_jpeg_decoder_set_speed(d, false, true);
    ASSERT_OK(sl_jpeg_decode(d, im.data, im.len, 3, 8, again, n, NULL, NULL));
    ASSERT(memcmp(acc, again, n) == 0);
    double sum = 0;
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) {
        int df = abs((int)acc[i] - (int)fast[i]);
        sum += df;
        differ += df != 0;
    }
    printf("  fast decode: %zu of %zu samples differ, mean |difference| %.3f levels\n", differ, n, sum / (double)n);
    ASSERT(differ > 0);
    ASSERT(sum / (double)n < 16.0);
    free(acc), free(fast), free(again);
    sl_jpeg_decoder_free(d);
    free(im.data);
}

/* An image encoded by TurboJPEG with flags (TJFLAG_PROGRESSIVE: a progressive file). */
static img encode_flags(int w, int h, int subsamp, int flags, uint32_t seed) {
    img r = {0};
    uint8_t *px = make_pixels(w, h, 3, seed);
    tjhandle tc = tjInitCompress();
    unsigned char *jpg = NULL;
    unsigned long jlen = 0;
    if (tc && tjCompress2(tc, px, w, 0, h, TJPF_RGB, &jpg, &jlen, subsamp, 90, flags) == 0) {
        r.data = malloc(jlen);
        memcpy(r.data, jpg, jlen);
        r.len = jlen;
    }
    tjFree(jpg);
    if (tc)
        tjDestroy(tc);
    free(px);
    snprintf(r.what, sizeof r.what, "%dx%d sub%d flags %d", w, h, subsamp, flags);
    return r;
}

/* A cropped decode stops after the crop's last row (the rows below are never read): for
 * every last row, the image's last (partial) iMCU row included, the crop must equal the
 * full decode, at full and reduced scales, for every kind of file in the set (4:2:0, 4:2:2,
 * 4:4:4, 4:4:0, 4:1:1, gray, progressive, arithmetic, restart markers, 3x1, YCCK) plus
 * progressive 4:2:0 and 4:4:4 files of odd sizes. */
TEST(test_crop_every_last_row) {
    img set[26];
    int n = image_set(set, 24);
    set[n++] = encode_flags(61, 83, TJSAMP_420, TJFLAG_PROGRESSIVE, 31);
    set[n++] = encode_flags(45, 37, TJSAMP_444, TJFLAG_PROGRESSIVE, 32);
    sl_jpeg_decoder *d;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    static const int nums[4] = {8, 4, 3, 1};
    long checked = 0;
    for (int i = 0; i < n; i++) {
        ASSERT(set[i].data);
        sl_jpeg_info info;
        ASSERT_OK(sl_jpeg_header(d, set[i].data, set[i].len, &info));
        int ch = i % 2 ? 1 : 3;
        for (int k = 0; k < 4; k++) {
            int num = nums[k], sw, sh;
            sl_jpeg_scaled_size(info.width, info.height, num, &sw, &sh);
            uint8_t *full = malloc((size_t)sw * sh * ch), *crop = malloc((size_t)sw * sh * ch);
            ASSERT_OK(sl_jpeg_decode(d, set[i].data, set[i].len, ch, num, full, (size_t)sw * sh * ch, NULL, NULL));
            int x = sw / 4, w = sw / 2 > 0 ? sw / 2 : 1;
            for (int yend = 1; yend <= sh; yend++) {
                int h = 1 + yend % 7 < yend ? 1 + yend % 7 : yend, y = yend - h;
                sl_status s = sl_jpeg_decode_crop(d, set[i].data, set[i].len, ch, num, x, y, w, h, crop,
                                                  (size_t)sw * sh * ch);
                int bad = -1;
                for (int r = 0; s == SL_OK && r < h && bad < 0; r++)
                    if (memcmp(crop + (size_t)r * w * ch, full + ((size_t)(y + r) * sw + x) * ch, (size_t)w * ch))
                        bad = r;
                if (s != SL_OK || bad >= 0) {
                    FAILF("%s ch %d scale %d/8: crop %dx%d at (%d,%d): status %d (%s), first differing row %d",
                          set[i].what, ch, num, w, h, x, y, s, s ? sl_errmsg() : "", bad);
                    free(full);
                    free(crop);
                    goto out;
                }
                checked++;
            }
            free(full);
            free(crop);
        }
    }
    ASSERT(checked >= 2739); /* the tree's files alone (more with ../shared's TFRecord images) */
out:
    sl_jpeg_decoder_free(d);
    free_set(set, n);
}

/* The rows below a crop are never decoded, so damage there goes unnoticed (as with
 * tf.image.decode_and_crop_jpeg), while damage inside the crop or above it is still an
 * error for a strict decoder. A progressive file is read whole before its first row is
 * made, so damage anywhere fails every crop of it. */
TEST(test_crop_ignores_damage_below_it) {
    img seq = encode_flags(96, 128, TJSAMP_420, 0, 41), prog = encode_flags(96, 128, TJSAMP_420, TJFLAG_PROGRESSIVE, 41);
    ASSERT(seq.data && prog.data);
    sl_jpeg_decoder *d;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    uint8_t *full = malloc(96 * 128 * 3), *crop = malloc(96 * 128 * 3);
    ASSERT_OK(sl_jpeg_decode(d, seq.data, seq.len, 3, 8, full, 96 * 128 * 3, NULL, NULL));
    size_t cut = seq.len * 7 / 10;
    ASSERT_EQ(sl_jpeg_decode(d, seq.data, cut, 3, 8, crop, 96 * 128 * 3, NULL, NULL), SL_ECORRUPT);
    /* the top 16 rows (and the 16 below, which fancy upsampling reads) lie before the cut */
    ASSERT_OK(sl_jpeg_decode_crop(d, seq.data, cut, 3, 8, 8, 0, 80, 16, crop, 96 * 128 * 3));
    for (int y = 0; y < 16; y++)
        ASSERT_MEMEQ(crop + (size_t)y * 80 * 3, full + ((size_t)y * 96 + 8) * 3, 80 * 3);
    ASSERT_EQ(sl_jpeg_decode_crop(d, seq.data, cut, 3, 8, 8, 112, 80, 16, crop, 96 * 128 * 3), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "Premature end of JPEG file");
    ASSERT_EQ(sl_jpeg_decode_crop(d, seq.data, cut, 3, 8, 0, 0, 96, 128, crop, 96 * 128 * 3), SL_ECORRUPT);
    /* progressive: even the top rows fail */
    cut = prog.len * 7 / 10;
    ASSERT_OK(sl_jpeg_decode_crop(d, prog.data, prog.len, 3, 8, 8, 0, 80, 16, crop, 96 * 128 * 3));
    ASSERT_EQ(sl_jpeg_decode_crop(d, prog.data, cut, 3, 8, 8, 0, 80, 16, crop, 96 * 128 * 3), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "Premature end of JPEG file");
    /* and the decoder is still good */
    ASSERT_OK(sl_jpeg_decode_crop(d, seq.data, seq.len, 3, 8, 8, 112, 80, 16, crop, 96 * 128 * 3));
    for (int y = 0; y < 16; y++)
        ASSERT_MEMEQ(crop + (size_t)y * 80 * 3, full + ((size_t)(112 + y) * 96 + 8) * 3, 80 * 3);
    free(full);
    free(crop);
    free(seq.data);
    free(prog.data);
    sl_jpeg_decoder_free(d);
}

TEST(test_scaled_size_and_pick_scale) {
    int sw, sh;
    sl_jpeg_scaled_size(213, 319, 4, &sw, &sh);
    ASSERT_EQ(sw, 107);
    ASSERT_EQ(sh, 160);
    sl_jpeg_scaled_size(213, 319, 1, &sw, &sh);
    ASSERT_EQ(sw, 27);
    ASSERT_EQ(sh, 40);
    ASSERT_EQ(sl_jpeg_pick_scale(500, 375, 224, 224), 8);  /* 4/8: 250x188 < 224 high; 5/8..7/8 are not used */
    ASSERT_EQ(sl_jpeg_pick_scale(500, 375, 250, 0), 4);    /* 4/8 gives exactly 250 */
    ASSERT_EQ(sl_jpeg_pick_scale(500, 375, 251, 0), 8);
    ASSERT_EQ(sl_jpeg_pick_scale(500, 375, 125, 0), 2);    /* 2/8 gives 125 */
    ASSERT_EQ(sl_jpeg_pick_scale(500, 375, 126, 0), 4);    /* 3/8 is skipped */
    ASSERT_EQ(sl_jpeg_pick_scale(500, 375, 0, 0), 1);
    ASSERT_EQ(sl_jpeg_pick_scale(500, 375, 63, 47), 1);    /* 1/8: 63x47 */
    ASSERT_EQ(sl_jpeg_pick_scale(500, 375, 64, 47), 2);
    ASSERT_EQ(sl_jpeg_pick_scale(500, 375, 1000, 1000), 8);
    ASSERT_EQ(sl_jpeg_pick_scale(500, 375, 500, 375), 8);
    ASSERT_EQ(sl_jpeg_pick_scale(500, 375, 438, 0), 8);    /* 7/8 would give 438, but is not used */
    ASSERT_EQ(sl_jpeg_pick_scale(500, 375, 439, 0), 8);
    ASSERT_EQ(sl_jpeg_pick_scale(500, 375, 376, 0), 8);
}

TEST(test_errors) {
    sl_jpeg_decoder *d;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    sl_jpeg_info in;
    const uint8_t junk[] = "this is not a jpeg at all, just text";
    ASSERT_EQ(sl_jpeg_header(d, junk, sizeof junk, &in), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "jpeg");
    ASSERT_EQ(in.width, 0);
    ASSERT_EQ(sl_jpeg_header(d, junk, 0, &in), SL_ECORRUPT);
    const uint8_t png[] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d};
    ASSERT_EQ(sl_jpeg_header(d, png, sizeof png, &in), SL_ECORRUPT);
    const uint8_t soi_only[] = {0xFF, 0xD8, 0xFF};
    ASSERT_EQ(sl_jpeg_header(d, soi_only, sizeof soi_only, &in), SL_ECORRUPT);

    img a = encode_img(40, 30, 3, TJSAMP_420, 90, 5);
    uint8_t buf[40 * 30 * 3];
    int ow = -1, oh = -1;
    ASSERT_EQ(sl_jpeg_decode(d, a.data, a.len, 3, 8, buf, sizeof buf - 1, &ow, &oh), SL_ERANGE);
    ASSERT_EQ(ow, 0);
    ASSERT_CONTAINS(sl_errmsg(), "3600 bytes");
    ASSERT_OK(sl_jpeg_decode(d, a.data, a.len, 3, 8, buf, sizeof buf, &ow, &oh));
    ASSERT_EQ(ow, 40);
    ASSERT_EQ(oh, 30);
    ASSERT_EQ(sl_jpeg_decode(d, a.data, a.len, 1, 4, buf, 20 * 15 - 1, &ow, &oh), SL_ERANGE);
    ASSERT_OK(sl_jpeg_decode(d, a.data, a.len, 1, 4, buf, 20 * 15, &ow, &oh));
    ASSERT_EQ(sl_jpeg_decode(d, a.data, a.len, 2, 8, buf, sizeof buf, &ow, &oh), SL_EINVAL);
    ASSERT_EQ(sl_jpeg_decode(d, a.data, a.len, 3, 0, buf, sizeof buf, &ow, &oh), SL_EINVAL);
    ASSERT_EQ(sl_jpeg_decode(d, a.data, a.len, 3, 9, buf, sizeof buf, &ow, &oh), SL_EINVAL);
    ASSERT_EQ(sl_jpeg_decode_crop(d, a.data, a.len, 3, 8, 0, 0, 10, 10, buf, 299), SL_ERANGE);
    ASSERT_EQ(sl_jpeg_decode_crop(d, a.data, a.len, 3, 8, 35, 0, 6, 10, buf, sizeof buf), SL_EINVAL);
    ASSERT_EQ(sl_jpeg_decode_crop(d, a.data, a.len, 3, 8, 0, 0, 0, 10, buf, sizeof buf), SL_EINVAL);
    ASSERT_EQ(sl_jpeg_decode_crop(d, a.data, a.len, 3, 8, -1, 0, 5, 5, buf, sizeof buf), SL_EINVAL);
    ASSERT_EQ(sl_jpeg_decode_crop(d, a.data, a.len, 3, 4, 0, 10, 20, 6, buf, sizeof buf), SL_EINVAL);
    ASSERT_OK(sl_jpeg_decode_crop(d, a.data, a.len, 3, 4, 0, 10, 20, 5, buf, sizeof buf));

    uint8_t *enc;
    size_t n;
    ASSERT_EQ(sl_jpeg_encode(buf, 0, 5, 3, 90, &enc, &n), SL_EINVAL);
    ASSERT(enc == NULL);
    ASSERT_EQ(sl_jpeg_encode(buf, 5, 5, 3, 101, &enc, &n), SL_EINVAL);
    ASSERT_EQ(sl_jpeg_encode(buf, 5, 5, 4, 90, &enc, &n), SL_EINVAL);
    ASSERT_EQ(sl_jpeg_encode2(buf, 5, 5, 3, 90, TJSAMP_GRAY, &enc, &n), SL_EINVAL);
    free(a.data);
    sl_jpeg_decoder_free(d);
}

/* A truncated image: strict decoders fail with SL_ECORRUPT, lenient ones give pixels. */
TEST(test_truncated_strict_and_lenient) {
    img a = encode_img(64, 64, 3, TJSAMP_420, 90, 9);
    sl_jpeg_decoder *d;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    uint8_t px[64 * 64 * 3], ref[64 * 64 * 3];
    size_t cut = a.len * 2 / 3;
    ASSERT_EQ(sl_jpeg_decode(d, a.data, cut, 3, 8, px, sizeof px, NULL, NULL), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "Premature end of JPEG file");
    ASSERT_EQ(sl_jpeg_decode_crop(d, a.data, cut, 3, 8, 0, 40, 64, 24, px, sizeof px), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "Premature end of JPEG file");
    /* the handle is still good after errors */
    ASSERT_OK(sl_jpeg_decode(d, a.data, a.len, 3, 8, ref, sizeof ref, NULL, NULL));
    ASSERT_OK(sl_jpeg_decode_crop(d, a.data, a.len, 3, 8, 0, 0, 64, 64, px, sizeof px));
    ASSERT_MEMEQ(px, ref, sizeof px);
    sl_jpeg_decoder_set_lenient(d, true);
    ASSERT_OK(sl_jpeg_decode(d, a.data, cut, 3, 8, px, sizeof px, NULL, NULL));
    ASSERT_MEMEQ(px, ref, 64 * 16 * 3); /* the top rows decoded before the cut are right */
    ASSERT_OK(sl_jpeg_decode_crop(d, a.data, cut, 3, 8, 0, 40, 64, 24, px, sizeof px));
    free(a.data);
    sl_jpeg_decoder_free(d);
}

TEST(test_every_truncation) {
    img a = encode_img(24, 20, 3, TJSAMP_420, 80, 11);
    img g = encode_img(19, 9, 1, TJSAMP_GRAY, 80, 12);
    sl_jpeg_decoder *d;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    uint8_t px[24 * 20 * 3];
    img *ims[2] = {&a, &g};
    for (int k = 0; k < 2; k++) {
        img *im = ims[k];
        int ok = 0;
        for (size_t n = 0; n < im->len; n++) {
            uint8_t *copy = malloc(n ? n : 1); /* exact-size copy so ASan sees overreads */
            memcpy(copy, im->data, n);
            sl_jpeg_info in;
            sl_status s1 = sl_jpeg_header(d, copy, n, &in);
            sl_status s2 = sl_jpeg_decode(d, copy, n, 3, 8, px, sizeof px, NULL, NULL);
            sl_status s3 = sl_jpeg_decode(d, copy, n, 1, 2, px, sizeof px, NULL, NULL);
            sl_status s4 = sl_jpeg_decode_crop(d, copy, n, 3, 8, 3, 5, 7, 3, px, sizeof px);
            free(copy);
            if ((s1 && s1 != SL_ECORRUPT) || (s2 && s2 != SL_ECORRUPT) ||
                (s3 && s3 != SL_ECORRUPT) || (s4 && s4 != SL_ECORRUPT && s4 != SL_EINVAL)) {
                FAILF("%s truncated to %zu: %d %d %d %d", im->what, n, s1, s2, s3, s4);
                goto out;
            }
            ok += s2 == SL_OK;
        }
        /* strict: only the whole file (and, at most, cuts inside the final EOI) decode */
        ASSERT(ok <= 1);
    }
out:
    free(a.data);
    free(g.data);
    sl_jpeg_decoder_free(d);
}

TEST(test_random_byte_flips) {
    img a = encode_img(48, 40, 3, TJSAMP_420, 85, 13);
    sl_jpeg_decoder *d;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    uint8_t *px = malloc(48 * 40 * 3);
    rng_state = 4242;
    int n_ok = 0, n_corrupt = 0;
    for (int it = 0; it < 400; it++) {
        uint8_t *copy = malloc(a.len);
        memcpy(copy, a.data, a.len);
        int flips = 1 + (int)(rnd() % 3);
        for (int f = 0; f < flips; f++)
            copy[rnd() % a.len] ^= (uint8_t)(1u << (rnd() % 8));
        sl_jpeg_decoder_set_lenient(d, it % 4 == 3);
        sl_jpeg_info in;
        sl_status s = sl_jpeg_header(d, copy, a.len, &in);
        sl_status s2 = SL_OK, s3 = SL_OK, s4 = SL_OK;
        if (s == SL_OK && (size_t)in.width * in.height * 3 <= 48 * 40 * 3) {
            s2 = sl_jpeg_decode(d, copy, a.len, 3, 8, px, 48 * 40 * 3, NULL, NULL);
            s3 = sl_jpeg_decode(d, copy, a.len, 1, 3, px, 48 * 40 * 3, NULL, NULL);
            s4 = sl_jpeg_decode_crop(d, copy, a.len, 3, 8, 5, 7, 11, 13, px, 48 * 40 * 3);
        }
        free(copy);
        if ((s && s != SL_ECORRUPT) || (s2 && s2 != SL_ECORRUPT) || (s3 && s3 != SL_ECORRUPT) ||
            (s4 && s4 != SL_ECORRUPT && s4 != SL_EINVAL)) {
            FAILF("flip iteration %d: %d %d %d %d (%s)", it, s, s2, s3, s4, sl_errmsg());
            break;
        }
        n_ok += s2 == SL_OK;
        n_corrupt += s2 == SL_ECORRUPT || s == SL_ECORRUPT;
    }
    ASSERT(n_corrupt > 0);
    ASSERT(n_ok > 0);
    free(px);
    free(a.data);
    sl_jpeg_decoder_free(d);
}

/* CMYK (stored as Adobe-inverted YCCK by TurboJPEG): RGB = C*K/255 of the decoded CMYK. */
TEST(test_cmyk) {
    const int w = 37, h = 29;
    uint8_t *cmyk = make_pixels(w, h, 4, 21);
    tjhandle tc = tjInitCompress();
    unsigned char *jpg = NULL;
    unsigned long jlen = 0;
    ASSERT_EQ(tjCompress2(tc, cmyk, w, 0, h, TJPF_CMYK, &jpg, &jlen, TJSAMP_420, 90, 0), 0);
    tjDestroy(tc);
    sl_jpeg_decoder *d;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    sl_jpeg_info in;
    ASSERT_OK(sl_jpeg_header(d, jpg, jlen, &in));
    ASSERT_EQ(in.components, 4);
    ASSERT_EQ(in.colorspace, TJCS_YCCK);
    uint8_t *ref4 = malloc((size_t)w * h * 4), *rgb = malloc((size_t)w * h * 3);
    uint8_t *gray = malloc((size_t)w * h), *crop = malloc((size_t)w * h * 3);
    tjhandle td = tjInitDecompress();
    ASSERT_EQ(tjDecompress2(td, jpg, jlen, ref4, w, 0, h, TJPF_CMYK, 0), 0);
    tjDestroy(td);
    ASSERT_OK(sl_jpeg_decode(d, jpg, jlen, 3, 8, rgb, (size_t)w * h * 3, NULL, NULL));
    ASSERT_OK(sl_jpeg_decode(d, jpg, jlen, 1, 8, gray, (size_t)w * h, NULL, NULL));
    for (int i = 0; i < w * h; i++) {
        const uint8_t *p = ref4 + 4 * i;
        int r = (p[0] * p[3] + 127) / 255, g = (p[1] * p[3] + 127) / 255, b = (p[2] * p[3] + 127) / 255;
        ASSERT_EQ(rgb[3 * i], r);
        ASSERT_EQ(rgb[3 * i + 1], g);
        ASSERT_EQ(rgb[3 * i + 2], b);
        ASSERT_EQ(gray[i], (19595 * r + 38470 * g + 7471 * b + 32768) >> 16);
    }
    ASSERT_OK(sl_jpeg_decode_crop(d, jpg, jlen, 3, 8, 3, 5, 20, 11, crop, (size_t)w * h * 3));
    for (int y = 0; y < 11; y++)
        ASSERT_MEMEQ(crop + y * 20 * 3, rgb + ((y + 5) * w + 3) * 3, 20 * 3);
    const uint8_t *view;
    size_t stride;
    ASSERT_OK(sl_jpeg_decode_crop_view(d, jpg, jlen, 3, 8, 3, 5, 20, 11, &view, &stride));
    ASSERT_EQ(stride, 20 * 3); /* converted from CMYK into a compact buffer */
    for (int y = 0; y < 11; y++)
        ASSERT_MEMEQ(view + y * stride, rgb + ((y + 5) * w + 3) * 3, 20 * 3);
    /* a rectangle outside the image: an error, no pixels */
    ASSERT_EQ(sl_jpeg_decode_crop_view(d, jpg, jlen, 3, 8, 30, 5, 20, 11, &view, &stride), SL_EINVAL);
    ASSERT(view == NULL && stride == 0);
    ASSERT_CONTAINS(sl_errmsg(), "jpeg: crop 20x11 at (30, 5) is empty or outside the 37x29 image (scale 8/8)");
    tjFree(jpg);
    free(cmyk);
    free(ref4);
    free(rgb);
    free(gray);
    free(crop);
    sl_jpeg_decoder_free(d);
}

/* Encoded files are well-formed and decode close to the input: at quality 100 without
 * chroma subsampling the mean error is rounding only (< 1 level); 4:2:0 (the default)
 * loses the fine chroma detail of this busy pattern, so it only has a loose bound. */
TEST(test_encode_roundtrip_quality) {
    const int w = 33, h = 21;
    static const struct { int ch, sub; long max_mean_x100; } cases[] = {
        {3, TJSAMP_444, 100}, {1, TJSAMP_GRAY, 100}, {3, TJSAMP_420, 2000}};
    sl_jpeg_decoder *d;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    for (int c = 0; c < 3; c++) {
        int ch = cases[c].ch;
        uint8_t *px = make_pixels(w, h, ch, 31);
        uint8_t *enc;
        size_t n;
        if (cases[c].sub == TJSAMP_420)
            ASSERT_OK(sl_jpeg_encode(px, w, h, ch, 100, &enc, &n));
        else
            ASSERT_OK(sl_jpeg_encode2(px, w, h, ch, 100, cases[c].sub, &enc, &n));
        ASSERT(n > 100);
        ASSERT_EQ(enc[0], 0xFF);
        ASSERT_EQ(enc[1], 0xD8);
        ASSERT_EQ(enc[n - 2], 0xFF);
        ASSERT_EQ(enc[n - 1], 0xD9);
        sl_jpeg_info in;
        ASSERT_OK(sl_jpeg_header(d, enc, n, &in));
        ASSERT_EQ(in.subsamp, cases[c].sub);
        uint8_t *out = malloc((size_t)w * h * ch);
        ASSERT_OK(sl_jpeg_decode(d, enc, n, ch, 8, out, (size_t)w * h * ch, NULL, NULL));
        long err = 0;
        for (int i = 0; i < w * h * ch; i++)
            err += abs(out[i] - px[i]);
        long mean_x100 = err * 100 / (w * h * ch);
        free(enc);
        free(px);
        free(out);
        if (mean_x100 >= cases[c].max_mean_x100)
            FAILF("subsamp %d: mean abs error %ld/100 >= %ld/100", cases[c].sub, mean_x100,
                  cases[c].max_mean_x100);
    }
    sl_jpeg_decoder_free(d);
}


/* The decoder's pixel limit: refused with SL_ERANGE before decoding (whatever the scale or
 * crop), the message naming the size, the limit and how to raise it. */
TEST(test_max_pixels) {
    sl_jpeg_decoder *d;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    ASSERT_EQ(sl_jpeg_decoder_max_pixels(d), SL_JPEG_MAX_PIXELS_DEFAULT);
    size_t len;
    uint8_t *small = sl_test_flat_jpeg(64, 64, &len), buf[64 * 64];
    int w, h;
    ASSERT_OK(sl_jpeg_decode(d, small, len, 1, 8, buf, sizeof buf, &w, &h));
    ASSERT_EQ(w, 64);
    for (int i = 0; i < 64 * 64; i++)
        ASSERT_EQ(buf[i], 128);
    if (have_djpeg()) { /* and djpeg agrees it is a valid JPEG */
        img im = {small, len, "flat 64x64"};
        int dw, dh;
        uint8_t *ref = djpeg(&im, 1, 8, &dw, &dh);
        ASSERT(ref != NULL);
        ASSERT_EQ(memcmp(ref, buf, sizeof buf), 0);
        free(ref);
    }
    sl_jpeg_decoder_set_max_pixels(d, 4095);
    ASSERT_EQ(sl_jpeg_decode(d, small, len, 1, 8, buf, sizeof buf, &w, &h), SL_ERANGE);
    ASSERT_EQ(w, 0);
    ASSERT_STREQ(sl_errmsg(), "jpeg: the image is 64x64 (4096 pixels), over the decoder's limit of 4095 pixels\n"
                              "---> HINT: a header can claim a huge image in a few bytes; if the image is genuine, "
                              "raise the limit with sl_jpeg_decoder_set_max_pixels");
    ASSERT_EQ(sl_jpeg_decode_crop(d, small, len, 1, 8, 0, 0, 8, 8, buf, sizeof buf), SL_ERANGE);
    sl_jpeg_info info;
    ASSERT_OK(sl_jpeg_header(d, small, len, &info)); /* the header alone is always read */
    sl_jpeg_decoder_set_max_pixels(d, 4096);
    ASSERT_OK(sl_jpeg_decode(d, small, len, 1, 8, buf, sizeof buf, &w, &h));
    ASSERT_OK(sl_jpeg_decode_crop(d, small, len, 1, 8, 0, 0, 8, 8, buf, sizeof buf));
    sl_jpeg_decoder_set_max_pixels(d, 0); /* back to the default */
    ASSERT_EQ(sl_jpeg_decoder_max_pixels(d), SL_JPEG_MAX_PIXELS_DEFAULT);

    /* a valid 30000 x 30000 file: even a scaled decode or an 8x8 crop (cheap for a baseline
     * file, but libjpeg keeps full-size buffers for progressive ones) is refused by default */
    uint8_t *big = sl_test_flat_jpeg(30000, 30000, &len);
    ASSERT_OK(sl_jpeg_header(d, big, len, &info));
    ASSERT_EQ(info.width, 30000);
    ASSERT_EQ(info.components, 1);
    ASSERT_EQ(sl_jpeg_decode(d, big, len, 1, 1, buf, sizeof buf, &w, &h), SL_ERANGE);
    ASSERT_CONTAINS(sl_errmsg(), "jpeg: the image is 30000x30000 (900000000 pixels), over the decoder's limit of "
                                 "89478485 pixels\n---> HINT: ");
    ASSERT_EQ(sl_jpeg_decode_crop(d, big, len, 1, 8, 100, 100, 8, 8, buf, sizeof buf), SL_ERANGE);
    /* raised, the crop is decoded */
    sl_jpeg_decoder_set_max_pixels(d, 900000000);
    ASSERT_OK(sl_jpeg_decode_crop(d, big, len, 1, 8, 100, 100, 8, 8, buf, sizeof buf));
    ASSERT_EQ(buf[0], 128);
    free(big);
    free(small);
    sl_jpeg_decoder_free(d);
}

/* A damaged header (a JPEG cut inside its tables) must not leave the decoder stuck: the next
 * sound JPEG on the same decoder reads and decodes (TurboJPEG's handle kept its half-read
 * header state, so the next file failed as a '0 x 0 image'; decode_jpeg under
 * ignore_errors and convert images reuse one decoder across records). */
TEST(test_decoder_usable_after_damaged_header) {
    sl_jpeg_decoder *d;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    img a = encode_img(64, 48, 3, TJSAMP_420, 90, 7);
    sl_jpeg_info in;
    uint8_t *px = malloc(64 * 48 * 3);
    ASSERT(px);
    int bad = 0;
    for (size_t cut = 4; cut < a.len && cut < 400; cut += 7) {
        if (sl_jpeg_header(d, a.data, cut, &in) == SL_OK) continue;
        bad++;
        ASSERT_OK(sl_jpeg_header(d, a.data, a.len, &in));
        ASSERT_EQ(in.width, 64);
        ASSERT_EQ(in.height, 48);
        int ow = 0, oh = 0;
        ASSERT_OK(sl_jpeg_decode(d, a.data, a.len, 3, 8, px, 64 * 48 * 3, &ow, &oh));
        ASSERT_EQ(ow, 64);
        ASSERT_EQ(oh, 48);
    }
    ASSERT(bad > 10);
    free(px);
    free(a.data);
    sl_jpeg_decoder_free(d);
}


/* A progressive 4:2:0 file of the pixels (its Huffman tables optimized, as every
 * progressive file's are), malloc'd into *out. */
static sl_status encode_progressive(const uint8_t *px, int w, int h, int q, uint8_t **out, size_t *len) {
    tjhandle tj = tjInitCompress();
    if (!tj)
        return SL_ENOMEM;
    unsigned char *buf = NULL;
    unsigned long n = 0;
    int rc = tjCompress2(tj, px, w, 0, h, TJPF_RGB, &buf, &n, TJSAMP_420, q, TJFLAG_PROGRESSIVE);
    tjDestroy(tj);
    if (rc)
        return SL_EINTERNAL;
    *out = malloc(n);
    memcpy(*out, buf, n);
    *len = n;
    tjFree(buf);
    return SL_OK;
}

/* Copy of a.data without its DQT (what == 0xDB) or DHT (0xC4) segments before the first
 * SOS: an abbreviated file that leans on tables it does not carry. */
static img strip_segments(const img *a, int what) {
    img r = {malloc(a->len), 0, ""};
    snprintf(r.what, sizeof r.what, "%s without %02X", a->what, what);
    size_t i = 2;
    memcpy(r.data, a->data, 2);
    r.len = 2;
    while (i + 4 <= a->len && a->data[i] == 0xFF && a->data[i + 1] != 0xDA) {
        size_t seg = 2 + ((size_t)a->data[i + 2] << 8 | a->data[i + 3]);
        if (a->data[i + 1] != what) {
            memcpy(r.data + r.len, a->data + i, seg);
            r.len += seg;
        }
        i += seg;
    }
    memcpy(r.data + r.len, a->data + i, a->len - i);
    r.len += a->len - i;
    return r;
}

/* libjpeg keeps the tables of one image for the next (abbreviated streams): a file without
 * its own quantization tables must not be decoded with the last image's. Every decode of
 * the abbreviated file gives what it gives on a fresh decoder (an error here), whatever was
 * decoded before it, on the TurboJPEG path and on the crop path. A file without its Huffman
 * tables is decoded with the standard ones (libjpeg-turbo's rule for Motion-JPEG), never
 * with the last image's optimized ones. */
TEST(test_tables_never_carried_over) {
    sl_jpeg_decoder *d, *fresh;
    ASSERT_OK(sl_jpeg_decoder_new(&d));
    ASSERT_OK(sl_jpeg_decoder_new(&fresh));
    int w = 48, h = 32;
    uint8_t *px = malloc((size_t)w * h * 3), *ref = malloc((size_t)w * h * 3);
    ASSERT(px && ref);
    for (int prog = 0; prog < 2; prog++) {
        img a = encode_img(w, h, 3, TJSAMP_420, 50, 3);
        img b = encode_img(w, h, 3, TJSAMP_420, 95, 4);
        if (prog) { /* the same images, progressive: the crop path decodes them */
            uint8_t *pa = make_pixels(w, h, 3, 3), *pb = make_pixels(w, h, 3, 4);
            free(a.data);
            free(b.data);
            ASSERT_OK(encode_progressive(pa, w, h, 50, &a.data, &a.len));
            ASSERT_OK(encode_progressive(pb, w, h, 95, &b.data, &b.len));
            free(pa);
            free(pb);
        }
        img nq = strip_segments(&b, 0xDB);
        ASSERT(nq.len < b.len);
        int ow, oh;
        ASSERT_EQ(sl_jpeg_decode(fresh, nq.data, nq.len, 3, 8, px, (size_t)w * h * 3, &ow, &oh), SL_ECORRUPT);
        ASSERT_OK(sl_jpeg_decode(d, a.data, a.len, 3, 8, px, (size_t)w * h * 3, &ow, &oh));
        ASSERT_EQ(sl_jpeg_decode(d, nq.data, nq.len, 3, 8, px, (size_t)w * h * 3, &ow, &oh), SL_ECORRUPT);
        ASSERT_OK(sl_jpeg_decode_crop(d, a.data, a.len, 3, 8, 8, 8, 16, 16, px, (size_t)w * h * 3));
        ASSERT_EQ(sl_jpeg_decode_crop(d, nq.data, nq.len, 3, 8, 8, 8, 16, 16, px, (size_t)w * h * 3), SL_ECORRUPT);
        const uint8_t *view;
        size_t stride;
        ASSERT_OK(sl_jpeg_decode_crop(d, a.data, a.len, 3, 8, 8, 8, 16, 16, px, (size_t)w * h * 3));
        ASSERT_EQ(sl_jpeg_decode_crop_view(d, nq.data, nq.len, 3, 8, 8, 8, 16, 16, &view, &stride), SL_ECORRUPT);
        /* without Huffman tables: the standard ones, before and after an image with its own */
        img nh = strip_segments(&b, 0xC4);
        ASSERT(nh.len < b.len);
        sl_status sf = sl_jpeg_decode(fresh, nh.data, nh.len, 3, 8, ref, (size_t)w * h * 3, &ow, &oh);
        ASSERT_OK(sl_jpeg_decode(d, a.data, a.len, 3, 8, px, (size_t)w * h * 3, &ow, &oh));
        ASSERT_EQ(sl_jpeg_decode(d, nh.data, nh.len, 3, 8, px, (size_t)w * h * 3, &ow, &oh), sf);
        if (sf == SL_OK)
            ASSERT(memcmp(px, ref, (size_t)w * h * 3) == 0);
        free(a.data);
        free(b.data);
        free(nq.data);
        free(nh.data);
    }
    free(px);
    free(ref);
    sl_jpeg_decoder_free(d);
    sl_jpeg_decoder_free(fresh);
}

/* A lenient decode of a file where a fatal error follows a recoverable one (a fuzzer's
 * YCCK file): TurboJPEG reports such a failure as a warning, and the rows it never wrote
 * came from whatever the decoder's buffers held. The outcome and the pixels must not
 * depend on what the decoder decoded before: two decoders that each viewed a different
 * image first (filling their scratch buffers) agree. */
TEST(test_lenient_never_hands_out_unwritten_rows) {
    size_t n = 0;
    uint8_t *f = sl_test_read_file(SL_TEST_SRC "/tests/fuzz/seeds/jpeg/ycck_warning_then_error_20x12.jpg", &n);
    ASSERT(f && n > 100);
    uint8_t *out[2];
    sl_status st[2];
    for (int k = 0; k < 2; k++) {
        sl_jpeg_decoder *d;
        ASSERT_OK(sl_jpeg_decoder_new(&d));
        img pre = encode_img(64, 48, 3, TJSAMP_444, 90, 11 + 6 * k);
        const uint8_t *view;
        size_t stride;
        ASSERT_OK(sl_jpeg_decode_crop_view(d, pre.data, pre.len, 3, 8, 0, 0, 64, 48, &view, &stride));
        sl_jpeg_decoder_set_lenient(d, true);
        out[k] = calloc(20 * 12 * 3, 1);
        int w = 0, h = 0;
        st[k] = sl_jpeg_decode(d, f, n, 3, 8, out[k], 20 * 12 * 3, &w, &h);
        free(pre.data);
        sl_jpeg_decoder_free(d);
    }
    ASSERT_EQ(st[0], st[1]);
    if (st[0] == SL_OK)
        ASSERT(memcmp(out[0], out[1], 20 * 12 * 3) == 0);
    free(out[0]);
    free(out[1]);
    free(f);
}

int main(void) {
    RUN(test_header_encoded);
    RUN(test_decoder_usable_after_damaged_header);
    RUN(test_header_tfrecord_images);
    RUN(test_decode_matches_djpeg);
    RUN(test_crop_equals_full_decode_cropped);
    RUN(test_crop_random_rects);
    RUN(test_crop_random_rects_fast);
    RUN(test_speed_settings);
    RUN(test_crop_every_last_row);
    RUN(test_crop_ignores_damage_below_it);
    RUN(test_scaled_size_and_pick_scale);
    RUN(test_errors);
    RUN(test_truncated_strict_and_lenient);
    RUN(test_every_truncation);
    RUN(test_random_byte_flips);
    RUN(test_cmyk);
    RUN(test_encode_roundtrip_quality);
    RUN(test_max_pixels);
    RUN(test_tables_never_carried_over);
    RUN(test_lenient_never_hands_out_unwritten_rows);
    TEST_MAIN_END();
}
