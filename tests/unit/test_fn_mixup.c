/* pipeline/fn/mixup.c: mixup, cutmix and mixup_cutmix on batches. Label rows sum to exactly
 * 1; mixup's images are lambda * x + (1 - lambda) * rolled, element by element, for the
 * lambda the labels carry; cutmix's copied box is a rectangle whose area gives the labels'
 * lambda; p = 0 leaves the images; Beta(alpha, alpha)'s mean and variance over many seeds;
 * the same bytes at map parallelism 1 and 4; the errors. */
#include <math.h>
#include <stdlib.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "sluice/util.h"
#include "helper_fn.h"
#include "test.h"

#define N 6
#define H 8
#define W 10
#define C 3
#define K 5

static const int64_t LABELS[N] = {0, 3, 1, 4, 2, 1}; /* each differs from the one before (rolled) */

/* A batch: image [N, H, W, C] of dt (random values), label int64 [N]. */
static void make_batch(sl_element *e, sl_dtype dt, uint64_t seed) {
    int64_t d[4] = {N, H, W, C}, dl[1] = {N};
    sl_tensor im = sl_test_tensor(dt, 4, d, NULL);
    uint64_t s = seed;
    for (int i = 0; i < N * H * W * C; i++) {
        uint64_t r = sl_splitmix64(&s);
        if (dt == SL_DT_F32) ((float *)im.data)[i] = (float)(r >> 40) / (float)(1 << 24);
        else ((uint8_t *)im.data)[i] = (uint8_t)(r >> 56);
    }
    sl_test_elem1(e, "image", im);
    sl_tensor lab = sl_test_tensor(SL_DT_I64, 1, dl, LABELS);
    if (sl_element_set(e, "label", &lab)) abort();
}

/* The label rows of e: each sums to exactly 1, holds lambda at its own class and 1 - lambda
 * at the previous element's; returns lambda (the same for all rows), or -1 on a failure. */
static float check_labels(const sl_element *e) {
    const sl_tensor *l = sl_test_comp(e, "label");
    if (!l || l->dtype != SL_DT_F32 || l->rank != 2 || l->dims[0] != N || l->dims[1] != K) return -1;
    const float *p = l->data;
    float lam = p[0 * K + LABELS[0]];
    for (int i = 0; i < N; i++) {
        float sum = 0;
        for (int k = 0; k < K; k++) sum += p[i * K + k];
        if (sum != 1.0f) return -1;
        int prev = i > 0 ? i - 1 : N - 1;
        if (p[i * K + LABELS[i]] != lam || p[i * K + LABELS[prev]] != 1.0f - lam) return -1;
    }
    return lam;
}

TEST(test_mixup_formula) {
    for (int u8 = 0; u8 < 2; u8++) {
        sl_dtype dt = u8 ? SL_DT_U8 : SL_DT_F32;
        sl_fn *fn;
        ASSERT_OK(sl_fn_mixup("image", "label", 0.2, K, 1.0, &fn));
        for (uint64_t seed = 1; seed <= 20; seed++) {
            sl_element e, orig;
            make_batch(&e, dt, seed);
            make_batch(&orig, dt, seed);
            ASSERT_OK(sl_test_apply(fn, &e, seed));
            float lam = check_labels(&e);
            ASSERT(lam >= 0 && lam <= 1);
            float om = 1.0f - lam;
            const sl_tensor *im = sl_test_comp(&e, "image"), *x = sl_test_comp(&orig, "image");
            ASSERT_EQ(im->dtype, dt);
            int per = H * W * C, bad = 0;
            for (int i = 0; i < N; i++) {
                int j = i > 0 ? i - 1 : N - 1;
                for (int q = 0; q < per; q++) {
                    if (u8) {
                        const uint8_t *a = x->data, *o = im->data;
                        float v = (float)a[i * per + q] * lam + (float)a[j * per + q] * om;
                        bad += o[i * per + q] != (uint8_t)(int)(v + 0.5f);
                    } else {
                        const float *a = x->data, *o = im->data;
                        bad += o[i * per + q] != a[i * per + q] * lam + a[j * per + q] * om;
                    }
                }
            }
            ASSERT_EQ(bad, 0);
            sl_element_clear(&e);
            sl_element_clear(&orig);
        }
        sl_fn_unref(fn);
    }
}

TEST(test_cutmix_box) {
    sl_fn *fn;
    ASSERT_OK(sl_fn_cutmix("image", "label", 1.0, K, 1.0, &fn));
    int boxes = 0;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        sl_element e, orig;
        make_batch(&e, SL_DT_F32, seed + 100);
        make_batch(&orig, SL_DT_F32, seed + 100);
        ASSERT_OK(sl_test_apply(fn, &e, seed));
        float lam = check_labels(&e);
        ASSERT(lam >= 0 && lam <= 1);
        const float *o = sl_test_comp(&e, "image")->data, *a = sl_test_comp(&orig, "image")->data;
        int per = H * W * C;
        int ref_area = -1;
        for (int i = 0; i < N; i++) {
            int j = i > 0 ? i - 1 : N - 1, area = 0, y0 = H, y1 = -1, x0 = W, x1 = -1;
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++) {
                    const float *p = o + i * per + (y * W + x) * C, *own = a + i * per + (y * W + x) * C,
                                *rol = a + j * per + (y * W + x) * C;
                    bool from_own = memcmp(p, own, sizeof(float) * C) == 0;
                    bool from_rol = memcmp(p, rol, sizeof(float) * C) == 0;
                    ASSERT(from_own != from_rol); /* every pixel is one or the other, wholly */
                    if (from_rol) {
                        area++;
                        if (y < y0) y0 = y;
                        if (y > y1) y1 = y;
                        if (x < x0) x0 = x;
                        if (x > x1) x1 = x;
                    }
                }
            if (area) ASSERT_EQ(area, (y1 - y0 + 1) * (x1 - x0 + 1)); /* a rectangle */
            if (ref_area < 0) ref_area = area;
            ASSERT_EQ(area, ref_area); /* the same box in every image */
        }
        ASSERT(lam == (float)(1.0 - (double)ref_area / (H * W)));
        boxes += ref_area > 0;
        sl_element_clear(&e);
        sl_element_clear(&orig);
    }
    printf("  %d of 40 batches got a non-empty box\n", boxes);
    ASSERT(boxes > 20);
    sl_fn_unref(fn);
}

TEST(test_p_zero_and_float_labels) {
    sl_fn *fn;
    ASSERT_OK(sl_fn_mixup("image", "label", 0.2, K, 0.0, &fn));
    sl_element e;
    make_batch(&e, SL_DT_F32, 3);
    void *before = sl_test_comp(&e, "image")->data;
    ASSERT_OK(sl_test_apply(fn, &e, 1));
    ASSERT(sl_test_comp(&e, "image")->data == before); /* not mixed: the very images */
    const float *l = sl_test_comp(&e, "label")->data;
    for (int i = 0; i < N; i++)
        for (int k = 0; k < K; k++) ASSERT(l[i * K + k] == (k == LABELS[i] ? 1.0f : 0.0f));
    sl_fn_unref(fn);
    /* the float [N, K] labels it made are accepted as input: mixing them again keeps sums 1 */
    ASSERT_OK(sl_fn_mixup("image", "label", 0.4, K, 1.0, &fn));
    ASSERT_OK(sl_test_apply(fn, &e, 9));
    l = sl_test_comp(&e, "label")->data;
    for (int i = 0; i < N; i++) {
        float s = 0;
        for (int k = 0; k < K; k++) s += l[i * K + k];
        ASSERT(fabsf(s - 1.0f) < 1e-6f);
    }
    sl_element_clear(&e);
    sl_fn_unref(fn);
}

/* lambda's distribution: mean 1/2 and variance 1 / (4 (2 alpha + 1)) (Beta(alpha, alpha)). */
TEST(test_beta_moments) {
    const double alphas[] = {0.2, 1.0, 4.0};
    for (int a = 0; a < 3; a++) {
        sl_fn *fn;
        ASSERT_OK(sl_fn_mixup("image", "label", alphas[a], K, 1.0, &fn));
        double sum = 0, sq = 0;
        int n = 2000;
        for (int s = 0; s < n; s++) {
            sl_element e;
            int64_t d[2] = {2, 1}, dl[1] = {2}, lab[2] = {0, 1};
            float px[2] = {0, 1};
            sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_F32, 2, d, px));
            sl_tensor lt = sl_test_tensor(SL_DT_I64, 1, dl, lab);
            ASSERT_OK(sl_element_set(&e, "label", &lt));
            ASSERT_OK(sl_test_apply(fn, &e, (uint64_t)s * 7919 + 1));
            double lam = ((const float *)sl_test_comp(&e, "label")->data)[0];
            sum += lam;
            sq += lam * lam;
            sl_element_clear(&e);
        }
        double mean = sum / n, var = sq / n - mean * mean, want = 1.0 / (4 * (2 * alphas[a] + 1));
        printf("  alpha %.1f: mean %.4f (0.5), variance %.4f (%.4f)\n", alphas[a], mean, var, want);
        ASSERT(fabs(mean - 0.5) < 0.03);
        ASSERT(fabs(var - want) < 0.15 * want);
        sl_fn_unref(fn);
    }
}

TEST(test_mixup_cutmix_choice) {
    sl_fn *fn;
    ASSERT_OK(sl_fn_mixup_cutmix("image", "label", 0.2, 1.0, K, &fn));
    int cut = 0, mix = 0;
    for (uint64_t seed = 1; seed <= 600; seed++) {
        sl_element e, orig;
        make_batch(&e, SL_DT_F32, seed);
        make_batch(&orig, SL_DT_F32, seed);
        ASSERT_OK(sl_test_apply(fn, &e, seed));
        float lam = check_labels(&e);
        ASSERT(lam >= 0 && lam <= 1);
        /* cutmix: every value is the element's own or its partner's */
        const float *o = sl_test_comp(&e, "image")->data, *a = sl_test_comp(&orig, "image")->data;
        int per = H * W * C, foreign = 0;
        for (int q = 0; q < per; q++)
            foreign += o[per + q] != a[per + q] && o[per + q] != a[q];
        if (foreign) mix++;
        else cut++;
        sl_element_clear(&e);
        sl_element_clear(&orig);
    }
    printf("  600 batches: %d mixup, %d cutmix (or lambda 1)\n", mix, cut);
    ASSERT(mix > 240 && cut > 240);
    sl_fn_unref(fn);
}

TEST(test_errors) {
    sl_fn *fn;
    ASSERT_EQ(sl_fn_mixup("image", "label", 0.0, K, 1.0, &fn), SL_EINVAL);
    ASSERT(fn == NULL);
    ASSERT_EQ(sl_fn_cutmix("image", "label", 1.0, 0, 1.0, &fn), SL_EINVAL);
    ASSERT_EQ(sl_fn_cutmix("image", "label", 1.0, K, 1.5, &fn), SL_EINVAL);
    ASSERT_EQ(sl_fn_mixup_cutmix("image", "", 0.2, 1.0, K, &fn), SL_EINVAL);
    ASSERT_OK(sl_fn_mixup("image", "label", 0.2, 3, 1.0, &fn));
    sl_element e;
    make_batch(&e, SL_DT_F32, 1); /* labels up to 4 with num_classes 3 */
    ASSERT_EQ(sl_test_apply(fn, &e, 1), SL_ERANGE);
    ASSERT(strstr(sl_errmsg(), "label 3 of batch element 1 is not a class id 0..2") != NULL);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* an image batch of another N, a label of another type */
    ASSERT_OK(sl_fn_cutmix("image", "label", 1.0, K, 1.0, &fn));
    int64_t d[4] = {N - 1, H, W, C}, dl[1] = {N};
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_F32, 4, d, NULL));
    float fl[N] = {0};
    sl_tensor lt = sl_test_tensor(SL_DT_F32, 1, dl, fl);
    ASSERT_OK(sl_element_set(&e, "label", &lt));
    ASSERT_EQ(sl_test_apply(fn, &e, 1), SL_EINVAL);
    ASSERT(strstr(sl_errmsg(), "must be int64 [N] or float32 [N, 5]") != NULL);
    sl_element_clear(&e);
    sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_F32, 4, d, NULL));
    lt = sl_test_tensor(SL_DT_I64, 1, dl, LABELS);
    ASSERT_OK(sl_element_set(&e, "label", &lt));
    ASSERT_EQ(sl_test_apply(fn, &e, 1), SL_EINVAL);
    ASSERT(strstr(sl_errmsg(), "must be float32 or uint8 [6, ...]") != NULL);
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* mixup_cutmix refuses images without H and W whichever it draws */
    ASSERT_OK(sl_fn_mixup_cutmix("image", "label", 0.2, 1.0, K, &fn));
    for (uint64_t seed = 0; seed < 4; seed++) {
        int64_t d2[2] = {N, 4};
        sl_test_elem1(&e, "image", sl_test_tensor(SL_DT_F32, 2, d2, NULL));
        lt = sl_test_tensor(SL_DT_I64, 1, dl, LABELS);
        ASSERT_OK(sl_element_set(&e, "label", &lt));
        ASSERT_EQ(sl_test_apply(fn, &e, seed), SL_EINVAL);
        sl_element_clear(&e);
    }
    sl_fn_unref(fn);
}

/* value v -> image uint8 [12, 10, 3] and label v % 7 */
static sl_status synth(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx;
    (void)call;
    int64_t v = *(int64_t *)e->t[sl_element_find(e, "value")].data;
    int64_t d[3] = {12, 10, 3};
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_U8, 3, d);
    if (s) return s;
    for (int i = 0; i < 360; i++) ((uint8_t *)t.data)[i] = (uint8_t)(i * 11 + v * 29);
    if ((s = sl_element_set(e, "image", &t))) {
        sl_tensor_release(&t);
        return s;
    }
    sl_tensor l;
    if ((s = sl_tensor_alloc(&l, SL_DT_I64, 0, NULL))) return s;
    *(int64_t *)l.data = v % 7;
    if ((s = sl_element_set(e, "label", &l))) sl_tensor_release(&l);
    return s;
}

/* range(0, 64) | map(synth) | batch 8 | map(fn, par) with seed 5: image and label bytes. */
static sl_status run(sl_fn *fn, int par, uint8_t **out, size_t *len) {
    sl_dataset *r = NULL, *m = NULL, *b = NULL, *mm = NULL;
    sl_iter *it = NULL;
    sl_fn *sf = NULL;
    sl_status s;
    *out = NULL;
    *len = 0;
    if ((s = sl_fn_custom("synth", synth, NULL, NULL, &sf)) || (s = sl_ds_range(0, 64, 1, &r)) ||
        (s = sl_ds_map(r, sf, 1, true, &m)))
        goto done;
    sl_batch_opts o = sl_batch_opts_default(8);
    if ((s = sl_ds_batch(m, &o, &b)) || (s = sl_ds_map(b, fn, par, true, &mm))) goto done;
    sl_iter_opts io = sl_iter_opts_default();
    io.seed = 5;
    if ((s = sl_iter_create(mm, &io, &it))) goto done;
    sl_element e;
    sl_element_init(&e);
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        for (int c = 0; c < 2; c++) {
            const sl_tensor *t = sl_test_comp(&e, c ? "label" : "image");
            size_t n = sl_tensor_nbytes(t);
            uint8_t *g = realloc(*out, *len + n);
            if (!g) abort();
            *out = g;
            memcpy(*out + *len, t->data, n);
            *len += n;
        }
        sl_element_clear(&e);
    }
    if (s == SL_END) s = SL_OK;
done:
    sl_iter_close(it);
    sl_dataset_unref(mm);
    sl_dataset_unref(b);
    sl_dataset_unref(m);
    sl_dataset_unref(r);
    sl_fn_unref(sf);
    return s;
}

TEST(test_deterministic) {
    sl_fn *fn;
    ASSERT_OK(sl_fn_mixup_cutmix("image", "label", 0.2, 1.0, 7, &fn));
    uint8_t *a, *b;
    size_t la, lb;
    ASSERT_OK(run(fn, 1, &a, &la));
    ASSERT_OK(run(fn, 4, &b, &lb));
    ASSERT_EQ(la, (size_t)8 * (8 * 360 + 8 * 7 * 4));
    ASSERT_EQ(la, lb);
    ASSERT_MEMEQ(a, b, la);
    printf("  mixup_cutmix: %zu bytes, the same at parallelism 1 and 4\n", la);
    free(a);
    free(b);
    sl_fn_unref(fn);
}

int main(void) {
    RUN(test_mixup_formula);
    RUN(test_cutmix_box);
    RUN(test_p_zero_and_float_labels);
    RUN(test_beta_moments);
    RUN(test_mixup_cutmix_choice);
    RUN(test_errors);
    RUN(test_deterministic);
    TEST_MAIN_END();
}
