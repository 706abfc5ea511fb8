/* pipeline/fn/color.c, color_jitter.c, grayscale.c, rot90.c and random_erasing.c against
 * torchvision: every record of tests/data/torchvision/refs.bin (gen_refs.py; argv[1] names
 * another folder, as tests/python/test_torchvision_refs.py does with fresh images) run
 * through the element function and compared within 1 per value, the worst difference
 * printed per op. Then the random functions: the same bytes at map parallelism 1 and 4 and
 * fused into map_batch, draws that vary with the seed, and the error cases. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "helper_fn.h"
#include "helper_tvref.h"
#include "test.h"

static int g_argc;
static char **g_argv;

static const char *const MY_OPS[] = {"adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_hue",
                                     "rgb_to_grayscale", "rot90", "erase", "color_jitter"};
#define NMY ((int)(sizeof MY_OPS / sizeof MY_OPS[0]))

static sl_status adjust_by_index(int k, float f, sl_fn **fn) {
    switch (k) {
    case 0: return sl_fn_adjust_brightness("image", f, fn);
    case 1: return sl_fn_adjust_contrast("image", f, fn);
    case 2: return sl_fn_adjust_saturation("image", f, fn);
    default: return sl_fn_adjust_hue("image", f, fn);
    }
}

/* Record r's op as our function (a chain for color_jitter), or SL_ENOTSUP-like -1 when the
 * op is not one of this file's. */
static int make_fn(const sl_tvref *r, sl_fn **fn) {
    const float *p = r->params;
    const char *op = r->op;
    *fn = NULL;
    if (strcmp(op, "adjust_brightness") == 0) return sl_fn_adjust_brightness("image", p[0], fn);
    if (strcmp(op, "adjust_contrast") == 0) return sl_fn_adjust_contrast("image", p[0], fn);
    if (strcmp(op, "adjust_saturation") == 0) return sl_fn_adjust_saturation("image", p[0], fn);
    if (strcmp(op, "adjust_hue") == 0) return sl_fn_adjust_hue("image", p[0], fn);
    if (strcmp(op, "rgb_to_grayscale") == 0) return sl_fn_rgb_to_grayscale("image", (int)p[0], fn);
    if (strcmp(op, "rot90") == 0) return sl_fn_rot90("image", (int)p[0], fn);
    if (strcmp(op, "erase") == 0)
        return sl_fn_erase("image", (int)p[0], (int)p[1], (int)p[2], (int)p[3], p + 4, r->nparams - 4, fn);
    if (strcmp(op, "color_jitter") == 0) {
        sl_fn *f[4];
        for (int i = 0; i < 4; i++) {
            int k = (int)p[i];
            sl_status s = adjust_by_index(k, p[4 + k], &f[i]);
            if (s) return s;
        }
        sl_status s = sl_fn_chain(f, 4, fn);
        for (int i = 0; i < 4; i++) sl_fn_unref(f[i]);
        return s;
    }
    return -1000;
}

TEST(test_torchvision_refs) {
    const char *dir = sl_tvref_dir(g_argc, g_argv, SL_TEST_DATA "/torchvision");
    sl_tvrefs refs;
    ASSERT(sl_tvref_load(dir, &refs) == 0);
    int worst[NMY], count[NMY], exact[NMY];
    for (int k = 0; k < NMY; k++) worst[k] = count[k] = exact[k] = 0;
    for (int i = 0; i < refs.n; i++) {
        const sl_tvref *r = &refs.r[i];
        int k = 0;
        while (k < NMY && strcmp(MY_OPS[k], r->op) != 0) k++;
        if (k == NMY) continue; /* another file's op */
        sl_fn *fn;
        ASSERT_OK(make_fn(r, &fn));
        sl_element e;
        sl_test_elem1(&e, "image", sl_tvref_input(r));
        ASSERT_OK(sl_test_apply(fn, &e, 1));
        int d = sl_tvref_maxdiff(r, &e.t[0]);
        if (d > 1) FAILF("record %d: %s(%g...) differs from torchvision by %d", i, r->op, r->params[0], d);
        count[k]++;
        exact[k] += d == 0;
        if (d > worst[k]) worst[k] = d;
        sl_element_clear(&e);
        sl_fn_unref(fn);
    }
    for (int k = 0; k < NMY; k++) {
        printf("  %-18s %2d records, %2d exact, worst difference %d\n", MY_OPS[k], count[k], exact[k], worst[k]);
        ASSERT(count[k] > 0);
    }
    sl_tvref_free(&refs);
}

/* value v -> a synthetic 24x24x3 uint8 image (content depends on v) */
static sl_status synth_image(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)call;
    int64_t v = *(int64_t *)e->t[sl_element_find(e, "value")].data;
    bool f32 = ctx != NULL;
    int64_t d[3] = {24, 24, 3};
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, f32 ? SL_DT_F32 : SL_DT_U8, 3, d);
    if (s) return s;
    for (int i = 0; i < 24 * 24 * 3; i++) {
        uint8_t x = (uint8_t)(i * 7 + v * 31 + (i / 5) % 13);
        if (f32) ((float *)t.data)[i] = (float)x / 255.0f - 0.5f;
        else ((uint8_t *)t.data)[i] = x;
    }
    return sl_element_set(e, "image", &t);
}

/* range(0, 64) | map(synth, fn, parallel=par) | batch 8 (fused into map_batch or a padded
 * batch, which is not) with seed 99: the bytes. */
static sl_status run(sl_fn *fn, bool f32, int par, bool fused, uint8_t **out, size_t *len) {
    sl_fn *fns[2], *chain;
    sl_status s = sl_fn_custom("synth", synth_image, f32 ? (void *)1 : NULL, NULL, &fns[0]);
    if (s) return s;
    fns[1] = fn;
    s = sl_fn_chain(fns, 2, &chain);
    sl_fn_unref(fns[0]);
    if (s) return s;
    sl_test_pipe p = {.count = 64, .parallelism = par, .batch = 8, .fused = fused, .seed = 99};
    s = sl_test_pipe_bytes(chain, &p, "image", NULL, out, len);
    sl_fn_unref(chain);
    return s;
}

/* fn gives the same bytes at parallelism 1 and 4, unfused and fused into map_batch, and
 * not the unchanged images. */
static void check_deterministic(sl_fn *fn, bool f32, const char *what) {
    uint8_t *a = NULL, *b = NULL, *c = NULL, *id = NULL;
    size_t la, lb, lc, lid;
    sl_fn *none;
    ASSERT_OK(sl_fn_cast("image", f32 ? SL_DT_F32 : SL_DT_U8, &none));
    ASSERT_OK(run(fn, f32, 1, false, &a, &la));
    ASSERT_OK(run(fn, f32, 4, false, &b, &lb));
    ASSERT_OK(run(fn, f32, 4, true, &c, &lc));
    ASSERT_OK(run(none, f32, 1, false, &id, &lid));
    ASSERT_EQ(la, lb);
    ASSERT_EQ(la, lc);
    ASSERT_MEMEQ(a, b, la);
    ASSERT_MEMEQ(a, c, la);
    /* some elements changed, some maybe not: not the identity everywhere */
    if (la == lid) ASSERT(memcmp(a, id, la) != 0);
    printf("  %s: %zu bytes, the same at parallelism 1, 4 and fused\n", what, la);
    free(a);
    free(b);
    free(c);
    free(id);
    sl_fn_unref(none);
}

TEST(test_random_determinism) {
    sl_fn *fn;
    ASSERT_OK(sl_fn_color_jitter("image", 0.4, 0.4, 0.4, 0.1, &fn));
    check_deterministic(fn, false, "color_jitter");
    sl_fn_unref(fn);
    ASSERT_OK(sl_fn_random_grayscale("image", 0.5, &fn));
    check_deterministic(fn, false, "random_grayscale");
    sl_fn_unref(fn);
    ASSERT_OK(sl_fn_random_rot90("image", &fn));
    check_deterministic(fn, false, "random_rot90");
    sl_fn_unref(fn);
    const float zero = 0;
    ASSERT_OK(sl_fn_random_erasing("image", 0.5, 0.02, 0.33, 0.3, 3.3, &zero, 1, false, &fn));
    check_deterministic(fn, false, "random_erasing uint8");
    check_deterministic(fn, true, "random_erasing float32");
    sl_fn_unref(fn);
    ASSERT_OK(sl_fn_random_erasing("image", 1.0, 0.02, 0.33, 0.3, 3.3, NULL, 0, true, &fn));
    check_deterministic(fn, true, "random_erasing float32 random");
    sl_fn_unref(fn);
}

static sl_tensor img(int64_t h, int64_t w, int64_t c, sl_dtype dt) {
    int64_t d[3] = {h, w, c};
    sl_tensor t = sl_test_tensor(dt, 3, d, NULL);
    memset(t.data, 0, sl_tensor_nbytes(&t));
    for (int64_t i = 0; i < h * w * c; i++)
        if (dt == SL_DT_U8) ((uint8_t *)t.data)[i] = (uint8_t)(i * 13 + 5);
    return t;
}

TEST(test_color_jitter_semantics) {
    /* identity ranges: the very tensor back */
    sl_fn *fn;
    ASSERT_OK(sl_fn_color_jitter("image", 0, 0, 0, 0, &fn));
    sl_element e;
    sl_test_elem1(&e, "image", img(5, 4, 3, SL_DT_U8));
    void *before = e.t[0].data;
    ASSERT_OK(sl_test_apply(fn, &e, 3));
    ASSERT(e.t[0].data == before);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* brightness only, range [0.5, 0.5]: exactly adjust_brightness(0.5) */
    double lo[4] = {0.5, 1, 1, 0}, hi[4] = {0.5, 1, 1, 0};
    sl_fn *b;
    ASSERT_OK(sl_fn_color_jitter_ranges("image", lo, hi, &fn));
    ASSERT_OK(sl_fn_adjust_brightness("image", 0.5, &b));
    sl_element e2;
    sl_test_elem1(&e, "image", img(5, 4, 3, SL_DT_U8));
    sl_test_elem1(&e2, "image", img(5, 4, 3, SL_DT_U8));
    ASSERT_OK(sl_test_apply(fn, &e, 3));
    ASSERT_OK(sl_test_apply(b, &e2, 3));
    ASSERT_MEMEQ(e.t[0].data, e2.t[0].data, 60);
    ASSERT(((uint8_t *)e.t[0].data)[1] == (uint8_t)((18 * 0.5f))); /* 18 * 0.5 = 9 */
    sl_element_clear(&e);
    sl_element_clear(&e2);
    sl_fn_unref(fn);
    sl_fn_unref(b);
    /* bad ranges and factors */
    double blo[4] = {1, 1, 1, -0.6}, bhi[4] = {1, 1, 1, 0};
    ASSERT_EQ(sl_fn_color_jitter_ranges("image", blo, bhi, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "color_jitter: the hue range [-0.6, 0] must have -0.5 <= lo <= hi <= 0.5");
    ASSERT(fn == NULL);
    ASSERT_EQ(sl_fn_color_jitter("image", -1, 0, 0, 0, &fn), SL_EINVAL);
    ASSERT_EQ(sl_fn_adjust_hue("image", 0.7, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "adjust_hue: factor 0.7 must be in [-0.5, 0.5] (turns of the colour wheel)");
    ASSERT_EQ(sl_fn_adjust_contrast("image", -0.1, &fn), SL_EINVAL);
    ASSERT_EQ(sl_fn_rgb_to_grayscale("image", 2, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "rgb_to_grayscale: num_output_channels 2 must be 1 or 3");
    ASSERT_EQ(sl_fn_random_grayscale("image", 1.5, &fn), SL_EINVAL);
}

TEST(test_color_errors) {
    sl_fn *fn;
    sl_element e;
    /* wrong channels: 2 and 4 */
    ASSERT_OK(sl_fn_adjust_saturation("image", 1.5, &fn));
    sl_test_elem1(&e, "image", img(3, 3, 2, SL_DT_U8));
    ASSERT_EQ(sl_test_apply(fn, &e, 1), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "2 channels, but colour adjustments take 1 or 3");
    sl_element_clear(&e);
    /* float32: not a colour input */
    sl_test_elem1(&e, "image", img(3, 3, 3, SL_DT_F32));
    ASSERT_EQ(sl_test_apply(fn, &e, 1), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "colour adjustments take uint8 images");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    ASSERT_OK(sl_fn_rgb_to_grayscale("image", 3, &fn));
    sl_test_elem1(&e, "image", img(3, 3, 4, SL_DT_U8));
    ASSERT_EQ(sl_test_apply(fn, &e, 1), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "4 channels, but grayscale takes 1 or 3");
    sl_element_clear(&e);
    /* a missing component */
    sl_test_elem1(&e, "pixels", img(3, 3, 3, SL_DT_U8));
    ASSERT_EQ(sl_test_apply(fn, &e, 1), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "no component 'image'");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* hue and saturation leave one channel alone; the input buffer is never written */
    ASSERT_OK(sl_fn_adjust_hue("image", 0.3, &fn));
    sl_test_elem1(&e, "image", img(3, 3, 1, SL_DT_U8));
    uint8_t copy[9];
    memcpy(copy, e.t[0].data, 9);
    sl_tensor in;
    sl_tensor_share(&in, &e.t[0]);
    ASSERT_OK(sl_test_apply(fn, &e, 1));
    ASSERT_MEMEQ(e.t[0].data, copy, 9);
    ASSERT_MEMEQ(in.data, copy, 9);
    sl_tensor_release(&in);
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

TEST(test_rot90_and_grayscale) {
    /* rot90 k = 1 on a 2x3 one-channel image: counter-clockwise
     *   0 1 2      2 5
     *   3 4 5  ->  1 4
     *              0 3 */
    uint8_t px[6] = {0, 1, 2, 3, 4, 5}, want1[6] = {2, 5, 1, 4, 0, 3}, want2[6] = {5, 4, 3, 2, 1, 0},
            want3[6] = {3, 0, 4, 1, 5, 2};
    const uint8_t *wants[4] = {px, want1, want2, want3};
    int64_t d[2] = {2, 3};
    for (int k = -4; k <= 5; k++) {
        sl_fn *fn;
        ASSERT_OK(sl_fn_rot90("image", k, &fn));
        sl_element e;
        sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 2, d, px));
        ASSERT_OK(sl_test_apply(fn, &e, 0));
        int kk = ((k % 4) + 4) % 4;
        ASSERT_EQ(e.t[0].rank, 2);
        ASSERT_EQ(e.t[0].dims[0], kk % 2 ? 3 : 2);
        ASSERT_MEMEQ(e.t[0].data, wants[kk], 6);
        sl_element_clear(&e);
        sl_fn_unref(fn);
    }
    /* float32 and random_rot90's four outcomes */
    sl_fn *fn;
    ASSERT_OK(sl_fn_random_rot90("image", &fn));
    int seen[4] = {0};
    float fp[6] = {0, 1, 2, 3, 4, 5};
    for (uint64_t seed = 0; seed < 200; seed++) {
        sl_element e;
        sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_F32, 2, d, fp));
        ASSERT_OK(sl_test_apply(fn, &e, seed));
        const float *o = e.t[0].data;
        for (int k = 0; k < 4; k++) {
            bool eq = true;
            for (int i = 0; i < 6; i++) eq = eq && o[i] == (float)wants[k][i];
            if (eq && e.t[0].dims[0] == (k % 2 ? 3 : 2)) seen[k]++;
        }
        sl_element_clear(&e);
    }
    ASSERT_EQ(seen[0] + seen[1] + seen[2] + seen[3], 200);
    for (int k = 0; k < 4; k++) ASSERT(seen[k] > 30);
    sl_fn_unref(fn);
    /* random_grayscale: p = 1 gives rgb_to_grayscale with 3 channels; p = 0 the same tensor */
    sl_fn *g, *g3;
    ASSERT_OK(sl_fn_random_grayscale("image", 1.0, &g));
    ASSERT_OK(sl_fn_rgb_to_grayscale("image", 3, &g3));
    sl_element e, e2;
    sl_test_elem1(&e, "image", img(4, 5, 3, SL_DT_U8));
    sl_test_elem1(&e2, "image", img(4, 5, 3, SL_DT_U8));
    ASSERT_OK(sl_test_apply(g, &e, 8));
    ASSERT_OK(sl_test_apply(g3, &e2, 8));
    ASSERT_EQ(e.t[0].dims[2], 3);
    ASSERT_MEMEQ(e.t[0].data, e2.t[0].data, 60);
    const uint8_t *o = e.t[0].data, *in = e2.t[0].data;
    ASSERT(o[0] == o[1] && o[1] == o[2]);
    (void)in;
    sl_element_clear(&e);
    sl_element_clear(&e2);
    sl_fn_unref(g);
    sl_fn_unref(g3);
    ASSERT_OK(sl_fn_random_grayscale("image", 0.0, &g));
    sl_test_elem1(&e, "image", img(4, 5, 3, SL_DT_U8));
    void *before = e.t[0].data;
    ASSERT_OK(sl_test_apply(g, &e, 8));
    ASSERT(e.t[0].data == before);
    sl_element_clear(&e);
    sl_fn_unref(g);
}

/* The reference reader refuses a damaged file: every truncation, a wrong magic, version,
 * size field or trailer, and a record length running past the end. */
TEST(test_refs_corrupt) {
    const char *dir = SL_TEST_DATA "/torchvision";
    char path[4200];
    snprintf(path, sizeof path, "%s/refs.bin", dir);
    FILE *f = fopen(path, "rb");
    ASSERT(f != NULL);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n);
    ASSERT(fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    char tmp[] = "/tmp/sluice-tvref-XXXXXX";
    ASSERT(mkdtemp(tmp) != NULL);
    char out[4200];
    snprintf(out, sizeof out, "%s/refs.bin", tmp);
    /* the intact copy loads; then damage */
    long cuts[] = {0, 7, 24, 25, 100, n / 2, n - 9, n - 1};
    int offs[] = {0, 8, 16, 24, 24 + 1 + 17, -3};
    for (int k = -1; k < (int)(sizeof cuts / sizeof cuts[0]) + (int)(sizeof offs / sizeof offs[0]); k++) {
        long len = n;
        uint8_t *copy = malloc((size_t)n);
        memcpy(copy, buf, (size_t)n);
        if (k >= 0 && k < (int)(sizeof cuts / sizeof cuts[0])) {
            len = cuts[k];
        } else if (k >= 0) {
            int o = offs[k - (int)(sizeof cuts / sizeof cuts[0])];
            copy[o < 0 ? n + o : o] ^= 0x5a; /* magic, version, size, name length / nparams, trailer */
        }
        FILE *g = fopen(out, "wb");
        ASSERT(g != NULL);
        fwrite(copy, 1, (size_t)len, g);
        fclose(g);
        sl_tvrefs refs;
        int r = sl_tvref_load(tmp, &refs);
        if (k < 0) ASSERT_EQ(r, 0);
        else if (r == 0) FAILF("damage %d was not noticed", k);
        sl_tvref_free(&refs);
        free(copy);
    }
    remove(out);
    rmdir(tmp);
    free(buf);
}

int main(int argc, char **argv) {
    g_argc = argc;
    g_argv = argv;
    RUN(test_torchvision_refs);
    if (argc > 1) TEST_MAIN_END(); /* only the references of another folder */
    RUN(test_random_determinism);
    RUN(test_color_jitter_semantics);
    RUN(test_color_errors);
    RUN(test_rot90_and_grayscale);
    RUN(test_refs_corrupt);
    TEST_MAIN_END();
}
