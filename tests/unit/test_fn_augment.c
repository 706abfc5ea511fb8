/* pipeline/fn/augment_ops.c and auto_augment.c against torchvision 0.14: every aug_OP record
 * of tests/data/torchvision/augment/refs.bin (gen_refs_augment.py; argv[1] names another
 * folder) run through augment_op at its magnitude and compared within 1 per value, the worst
 * difference printed per op; the magnitude tables of RandAugment and TrivialAugmentWide
 * against torchvision's. Then the policies: the same bytes at map parallelism 1 and 4 and
 * fused into map_batch, the draws vary with the seed, Identity-only leaves the buffer, the
 * errors, and the config entries. */
#include <math.h>
#include <stdlib.h>

#include "sluice/config.h"
#include "sluice/fn.h"
#include "sluice/from_config.h"
#include "sluice/pipeline.h"
#include "pipeline/fn/augment_ops.h"
#include "helper_fn.h"
#include "helper_tvref.h"
#include "test.h"

static int g_argc;
static char **g_argv;

TEST(test_torchvision_refs) {
    const char *dir = sl_tvref_dir(g_argc, g_argv, SL_TEST_DATA "/torchvision/augment");
    sl_tvrefs refs;
    ASSERT(sl_tvref_load(dir, &refs) == 0);
    int worst[SL__AUG_NOPS], count[SL__AUG_NOPS], exact[SL__AUG_NOPS];
    for (int k = 0; k < SL__AUG_NOPS; k++) worst[k] = count[k] = exact[k] = 0;
    for (int i = 0; i < refs.n; i++) {
        const sl_tvref *r = &refs.r[i];
        if (strncmp(r->op, "aug_", 4) != 0) continue;
        int k = sl__aug_op_from_name(r->op + 4);
        ASSERT(k >= 0);
        sl_fn *fn;
        ASSERT_OK(sl_fn_augment_op("image", r->op + 4, r->params[0], &fn));
        sl_element e;
        sl_test_elem1(&e, "image", sl_tvref_input(r));
        ASSERT_OK(sl_test_apply(fn, &e, 1));
        int d = sl_tvref_maxdiff(r, &e.t[0]);
        if (d > 1) FAILF("record %d: %s(%g) on %lldx%lldx%lld differs from torchvision by %d", i, r->op, r->params[0],
                         (long long)r->in_dims[0], (long long)r->in_dims[1], (long long)r->in_dims[2], d);
        count[k]++;
        exact[k] += d == 0;
        if (d > worst[k]) worst[k] = d;
        sl_element_clear(&e);
        sl_fn_unref(fn);
    }
    for (int k = 0; k < SL__AUG_NOPS; k++) {
        printf("  %-13s %2d records, %2d exact, worst difference %d\n", sl__aug_op_name(k), count[k], exact[k],
               worst[k]);
        ASSERT(count[k] > 0);
    }
    sl_tvref_free(&refs);
}

/* float32 values a and b at most one ulp apart */
static bool within_ulp(float a, float b) { return a == b || nextafterf(a, b) == b; }

TEST(test_magnitude_tables) {
    const char *dir = sl_tvref_dir(g_argc, g_argv, SL_TEST_DATA "/torchvision/augment");
    sl_tvrefs refs;
    ASSERT(sl_tvref_load(dir, &refs) == 0);
    int n = 0, same = 0;
    for (int i = 0; i < refs.n; i++) {
        const sl_tvref *r = &refs.r[i];
        bool ta = strcmp(r->op, "ta_table") == 0;
        if (!ta && strcmp(r->op, "ra_table") != 0) continue;
        int op = (int)r->params[0], bins = (int)r->params[3], first = (int)r->params[4];
        int64_t h = (int64_t)r->params[1], w = (int64_t)r->params[2];
        for (int j = 5; j < r->nparams; j++) {
            float got = sl__aug_magnitude(ta, op, first + j - 5, bins, h, w), want = r->params[j];
            if (!within_ulp(got, want))
                FAILF("%s %s bin %d (%lldx%lld): %.9g, torchvision %.9g", r->op, sl__aug_op_name(op), first + j - 5,
                      (long long)h, (long long)w, got, want);
            n++;
            same += got == want;
        }
    }
    printf("  %d magnitudes, %d equal, the rest one float32 ulp apart\n", n, same);
    ASSERT(n >= 3 * 11 * 31);
    sl_tvref_free(&refs);
}

/* Hand-checked kernel results: posterize, solarize, a translation by whole pixels. */
TEST(test_kernels) {
    uint8_t px[6] = {0, 17, 128, 200, 254, 255};
    sl__aug_posterize_u8(px, 6, 2);
    uint8_t post[6] = {0, 0, 128, 192, 192, 192};
    ASSERT_MEMEQ(px, post, 6);
    uint8_t sol[6] = {0, 100, 127, 128, 200, 255};
    sl__aug_solarize_u8(sol, 6, 128.0f);
    uint8_t solw[6] = {0, 100, 127, 127, 55, 0};
    ASSERT_MEMEQ(sol, solw, 6);
    /* 3x4 one channel, TranslateX by 1: columns move right, zeros come in */
    uint8_t im[12], tmp[12];
    for (int i = 0; i < 12; i++) im[i] = (uint8_t)(i + 1);
    sl__aug_apply(SL__AUG_TRANSLATE_X, 1.7, im, 3, 4, 1, tmp);
    uint8_t want[12] = {0, 1, 2, 3, 0, 5, 6, 7, 0, 9, 10, 11};
    ASSERT_MEMEQ(im, want, 12);
}

/* value v -> a synthetic 24x20x3 uint8 image */
static sl_status synth_image(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)call;
    (void)ctx;
    int64_t v = *(int64_t *)e->t[sl_element_find(e, "value")].data;
    int64_t d[3] = {24, 20, 3};
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_U8, 3, d);
    if (s) return s;
    for (int i = 0; i < 24 * 20 * 3; i++) ((uint8_t *)t.data)[i] = (uint8_t)(i * 7 + v * 31 + (i / 5) % 13);
    return sl_element_set(e, "image", &t);
}

static sl_status run(sl_fn *fn, int par, bool fused, uint64_t seed, uint8_t **out, size_t *len) {
    sl_fn *fns[2], *chain;
    sl_status s = sl_fn_custom("synth", synth_image, NULL, NULL, &fns[0]);
    if (s) return s;
    fns[1] = fn;
    s = sl_fn_chain(fns, 2, &chain);
    sl_fn_unref(fns[0]);
    if (s) return s;
    sl_test_pipe p = {.count = 48, .parallelism = par, .batch = 8, .fused = fused, .seed = seed};
    s = sl_test_pipe_bytes(chain, &p, "image", NULL, out, len);
    sl_fn_unref(chain);
    return s;
}

static void check_deterministic(sl_fn *fn, const char *what) {
    uint8_t *a = NULL, *b = NULL, *c = NULL, *o = NULL;
    size_t la, lb, lc, lo;
    ASSERT_OK(run(fn, 1, false, 99, &a, &la));
    ASSERT_OK(run(fn, 4, false, 99, &b, &lb));
    ASSERT_OK(run(fn, 4, true, 99, &c, &lc));
    ASSERT_OK(run(fn, 4, true, 100, &o, &lo));
    ASSERT_EQ(la, (size_t)48 * 24 * 20 * 3);
    ASSERT_EQ(la, lb);
    ASSERT_EQ(la, lc);
    ASSERT_EQ(la, lo);
    ASSERT_MEMEQ(a, b, la);
    ASSERT_MEMEQ(a, c, la);
    ASSERT(memcmp(a, o, la) != 0); /* another seed, other draws */
    printf("  %s: %zu bytes, the same at parallelism 1, 4 and fused\n", what, la);
    free(a);
    free(b);
    free(c);
    free(o);
}

TEST(test_policies_deterministic) {
    sl_fn *fn;
    ASSERT_OK(sl_fn_rand_augment("image", 2, 9, 31, &fn));
    check_deterministic(fn, "rand_augment(2, 9, 31)");
    sl_fn_unref(fn);
    ASSERT_OK(sl_fn_trivial_augment("image", 31, &fn));
    check_deterministic(fn, "trivial_augment(31)");
    sl_fn_unref(fn);
}

/* The policy applies the ops it draws: over many seeds every op of the 14 shows up as some
 * element's output (compared with augment_op at the drawn magnitude is what the refs do);
 * here: outputs vary, and Identity / num_ops = 0 leaves the very buffer. */
TEST(test_policy_semantics) {
    int64_t d[3] = {8, 6, 3};
    uint8_t px[144];
    for (int i = 0; i < 144; i++) px[i] = (uint8_t)(i * 37 + 11);
    sl_fn *fn;
    ASSERT_OK(sl_fn_rand_augment("image", 0, 9, 31, &fn));
    sl_element e;
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, d, px));
    void *before = e.t[0].data;
    ASSERT_OK(sl_test_apply(fn, &e, 5));
    ASSERT(e.t[0].data == before);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    ASSERT_OK(sl_fn_augment_op("image", "identity", 3.0, &fn));
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, d, px));
    before = e.t[0].data;
    ASSERT_OK(sl_test_apply(fn, &e, 5));
    ASSERT(e.t[0].data == before);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* trivial_augment over 200 seeds: the input buffer is never written, most outputs differ */
    ASSERT_OK(sl_fn_trivial_augment("image", 31, &fn));
    int changed = 0;
    for (uint64_t seed = 0; seed < 200; seed++) {
        sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, d, px));
        const uint8_t *in = e.t[0].data;
        uint8_t copy[144];
        memcpy(copy, in, 144);
        sl_tensor keep = e.t[0];
        sl_buf_ref(keep.buf);
        ASSERT_OK(sl_test_apply(fn, &e, seed));
        ASSERT_MEMEQ(keep.data, copy, 144);
        changed += memcmp(e.t[0].data, px, 144) != 0;
        sl_tensor_release(&keep);
        sl_element_clear(&e);
    }
    printf("  trivial_augment changed %d of 200 images\n", changed);
    ASSERT(changed > 120 && changed < 200);
    sl_fn_unref(fn);
}

TEST(test_errors) {
    sl_fn *fn;
    ASSERT_EQ(sl_fn_rand_augment("image", 2, 31, 31, &fn), SL_EINVAL);
    ASSERT(fn == NULL);
    ASSERT_STREQ(sl_errmsg(), "rand_augment: magnitude 31 must be a bin, 0..30\n"
                             "---> HINT: magnitude indexes the 31 magnitude bins (torchvision's default: 9 of 31)");
    ASSERT_EQ(sl_fn_rand_augment("image", 17, 9, 31, &fn), SL_EINVAL);
    ASSERT_EQ(sl_fn_trivial_augment("image", 1, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "trivial_augment: bins 1 must be 2..1000\n"
                             "---> HINT: torchvision's default is num_magnitude_bins=31");
    ASSERT_EQ(sl_fn_augment_op("image", "Shear", 0.1, &fn), SL_EINVAL);
    ASSERT(strncmp(sl_errmsg(), "augment_op: unknown op 'Shear'\n---> HINT: the ops are Identity, ShearX,", 64) == 0);
    ASSERT_EQ(sl_fn_augment_op("image", "Posterize", 9, &fn), SL_EINVAL);
    ASSERT_EQ(sl_fn_augment_op("image", "Rotate", NAN, &fn), SL_EINVAL);
    ASSERT_EQ(sl_fn_augment_op("", "Rotate", 1, &fn), SL_EINVAL);
    /* float32 images and 2 channels are refused when applied */
    ASSERT_OK(sl_fn_trivial_augment("image", 31, &fn));
    int64_t d[3] = {4, 4, 3}, d2[3] = {4, 4, 2};
    sl_element e;
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_F32, 3, d, NULL));
    memset(e.t[0].data, 0, 4 * 4 * 3 * 4);
    ASSERT_EQ(sl_test_apply(fn, &e, 1), SL_EINVAL);
    ASSERT(strstr(sl_errmsg(), "uint8 images of 1 or 3 channels") != NULL);
    sl_element_clear(&e);
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_U8, 3, d2, NULL));
    memset(e.t[0].data, 0, 4 * 4 * 2);
    ASSERT_EQ(sl_test_apply(fn, &e, 1), SL_EINVAL);
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

static sl_status build(const char *fn_text) {
    char text[512];
    snprintf(text, sizeof text, "pipeline p {\n    range 0 4\n    map %s\n}\n", fn_text);
    sl_cfg *c;
    sl_status s = sl_cfg_parse(text, strlen(text), "p.sl", &c);
    if (s) return s;
    sl_dataset *ds = NULL;
    s = sl_pipeline_from_config(c, "p", NULL, &ds);
    sl_dataset_unref(ds);
    sl_cfg_free(c);
    return s;
}

TEST(test_config) {
    ASSERT_OK(build("rand_augment(image)"));
    ASSERT_OK(build("rand_augment(image, num_ops=3, magnitude=5, bins=11)"));
    ASSERT_OK(build("trivial_augment(image, bins=31)"));
    ASSERT_OK(build("augment_op(image, Rotate, magnitude=30)"));
    ASSERT_OK(build("mixup(image, label, alpha=0.2, num_classes=10)"));
    ASSERT_OK(build("cutmix(image, label, num_classes=10, p=0.5)"));
    ASSERT_OK(build("mixup_cutmix(image, label, mixup_alpha=0.2, cutmix_alpha=1.0, num_classes=1000)"));
    ASSERT_EQ(build("rand_augment(image, magnitude=31)"), SL_EINVAL);
    ASSERT(strstr(sl_errmsg(), "magnitude 31 is not a bin: 0..30") != NULL);
    ASSERT_EQ(build("augment_op(image, Twist)"), SL_EINVAL);
    ASSERT(strstr(sl_errmsg(), "unknown op 'Twist'") != NULL);
    ASSERT_EQ(build("mixup(image, label)"), SL_EINVAL);
    ASSERT(strstr(sl_errmsg(), "missing num_classes=N") != NULL);
    ASSERT_EQ(build("cutmix(image, label, alpha=0, num_classes=3)"), SL_EINVAL);
}

int main(int argc, char **argv) {
    g_argc = argc;
    g_argv = argv;
    RUN(test_torchvision_refs);
    RUN(test_magnitude_tables);
    RUN(test_kernels);
    RUN(test_policies_deterministic);
    RUN(test_policy_semantics);
    RUN(test_errors);
    RUN(test_config);
    TEST_MAIN_END();
}
