/* mixup, cutmix and mixup_cutmix: torchvision's reference scripts' RandomMixup and
 * RandomCutmix (references/classification/transforms.py) and the recipe's RandomChoice of
 * the two, as batch functions (map after batch). Specified in include/sluice/fn.h.
 *
 * Draws from a generator seeded by the call's seed, in this order: mixup_cutmix's choice
 * (an integer 0 = mixup or 1 = cutmix), the p test (U[0,1) < p mixes), lambda ~ Beta(alpha,
 * alpha) as G1 / (G1 + G2) with G1, G2 ~ Gamma(alpha) (Marsaglia-Tsang, normals by
 * Box-Muller; alpha < 1 boosted by U^(1/alpha)), then cutmix's centre column, then row.
 *
 * Workload: once per batch (e.g. 256 x 224 x 224 x 3 float32): one pass over the images. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/fn/image.h"

typedef enum { MIX_MIXUP, MIX_CUTMIX, MIX_CHOICE } mix_kind;

typedef struct {
    sl_fn base;
    char image[SL_NAME_MAX], label[SL_NAME_MAX];
    mix_kind kind;
    double alpha, cut_alpha; /* mixup's (or cutmix's) alpha; cut_alpha: mixup_cutmix's cutmix */
    int num_classes;
    double p;
} mix_fn;

static double rng_open01(sl_rng *r) { return 1.0 - sl__rng_double(r); } /* (0, 1] */

static double rng_normal(sl_rng *r) {
    double u1 = rng_open01(r), u2 = sl__rng_double(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Gamma(a, 1), a > 0 (Marsaglia and Tsang 2000). */
static double rng_gamma(sl_rng *r, double a) {
    if (a < 1.0) {
        double boost = pow(rng_open01(r), 1.0 / a);
        return rng_gamma(r, a + 1.0) * boost;
    }
    double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = rng_normal(r);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        double u = rng_open01(r);
        if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
        if (log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v;
    }
}

/* Beta(a, a): torch._sample_dirichlet([a, a])[0]. */
static double rng_beta(sl_rng *r, double a) {
    double g1 = rng_gamma(r, a), g2 = rng_gamma(r, a);
    if (!(g1 + g2 > 0)) return 0.5; /* both underflowed (tiny alpha) */
    return g1 / (g1 + g2);
}

/* The label as float32 [n, k] (one-hot from int64 [n]) in *out, fresh. */
static sl_status label_matrix(const mix_fn *f, const sl_tensor *t, int64_t n, sl_tensor *out) {
    int64_t k = f->num_classes, dims[2] = {n, k};
    sl_status s;
    if ((s = sl_tensor_alloc(out, SL_DT_F32, 2, dims))) return s;
    float *o = out->data;
    if (t->dtype == SL_DT_F32) {
        memcpy(o, t->data, sizeof *o * (size_t)(n * k));
        return SL_OK;
    }
    memset(o, 0, sizeof *o * (size_t)(n * k));
    const int64_t *y = t->data;
    for (int64_t i = 0; i < n; i++) {
        if (y[i] < 0 || y[i] >= k) {
            sl_tensor_release(out);
            sl_err(SL_ERANGE, "label %lld of batch element %lld is not a class id 0..%lld", (long long)y[i],
                   (long long)i, (long long)(k - 1));
            sl_err_hint("num_classes=%lld: raise it if the labels have more classes", (long long)k);
            return SL_ERANGE;
        }
        o[i * k + y[i]] = 1.0f;
    }
    return SL_OK;
}

/* Rows i of lab become lam * row i + om * row i - 1 (row 0 with row n - 1). Going down from
 * the last row, row i - 1 is still unmixed when row i needs it; row 0's partner, the last
 * row, is kept first. SL_ENOMEM (lab unchanged) when that copy cannot be made. */
static sl_status mix_labels(float *lab, int64_t n, int64_t k, float lam, float om) {
    if (n < 1 || k < 1) return SL_OK;
    float *last = malloc(sizeof *last * (size_t)k);
    if (!last) return sl_err(SL_ENOMEM, "no memory for a label row of %lld classes", (long long)k);
    memcpy(last, lab + (n - 1) * k, sizeof *lab * (size_t)k);
    for (int64_t i = n - 1; i >= 0; i--) {
        const float *prev = i > 0 ? lab + (i - 1) * k : last;
        float *row = lab + i * k;
        for (int64_t j = 0; j < k; j++) row[j] = lam * row[j] + om * prev[j];
    }
    free(last);
    return SL_OK;
}

static sl_status mix_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const mix_fn *f = (const mix_fn *)fn;
    sl_status s = SL_OK;
    int li = sl__fn_component(fn, e, f->label, &s);
    if (li < 0) return s;
    int ii = sl__fn_component(fn, e, f->image, &s);
    if (ii < 0) return s;
    const sl_tensor *lt = &e->t[li], *it = &e->t[ii];
    bool ids = lt->dtype == SL_DT_I64 && lt->rank == 1;
    bool rows = lt->dtype == SL_DT_F32 && lt->rank == 2 && lt->dims[1] == f->num_classes;
    if (!ids && !rows) {
        sl_err(SL_EINVAL, "label '%s' is %s of rank %d; it must be int64 [N] or float32 [N, %d]", f->label,
               sl_dtype_name(lt->dtype), lt->rank, f->num_classes);
        sl_err_hint("apply it after batch: the labels of a batch are int64 [N]");
        return SL_EINVAL;
    }
    int64_t n = lt->dims[0];
    if ((it->dtype != SL_DT_F32 && it->dtype != SL_DT_U8) || it->rank < 1 || it->dims[0] != n) {
        sl_err(SL_EINVAL, "image '%s' must be float32 or uint8 [%lld, ...] (the label's batch), not %s of rank %d",
               f->image, (long long)n, sl_dtype_name(it->dtype), it->rank);
        sl_err_hint("apply it after batch, on the batched images");
        return SL_EINVAL;
    }
    if (f->kind != MIX_MIXUP && (it->rank < 3 || it->dims[1] < 1 || it->dims[2] < 1)) {
        sl_err(SL_EINVAL, "cutmix needs images [N, H, W, ...] with H, W >= 1; '%s' has rank %d", f->image, it->rank);
        sl_err_hint("apply it after batch, on images [N, H, W, C]");
        return SL_EINVAL;
    }
    sl_rng rng = {call->seed};
    mix_kind kind = f->kind;
    double alpha = f->alpha;
    if (kind == MIX_CHOICE) {
        kind = sl__rng_below(&rng, 2) ? MIX_CUTMIX : MIX_MIXUP;
        if (kind == MIX_CUTMIX) alpha = f->cut_alpha;
    }
    sl_tensor lab;
    if ((s = label_matrix(f, lt, n, &lab))) return s;
    bool mix = sl__rng_double(&rng) < f->p;
    sl_tensor img = {0};
    if (mix && n > 0) {
        double lambda = rng_beta(&rng, alpha);
        if ((s = sl_tensor_alloc(&img, it->dtype, it->rank, it->dims))) goto fail;
        int64_t per = sl_tensor_numel(it) / n; /* values per element */
        size_t esz = sl_dtype_size(it->dtype);
        if (kind == MIX_MIXUP) {
            float lam = (float)lambda, om = 1.0f - lam;
            for (int64_t i = 0; i < n; i++) {
                int64_t j = i > 0 ? i - 1 : n - 1;
                if (it->dtype == SL_DT_F32) {
                    const float *x = (const float *)it->data + i * per, *r = (const float *)it->data + j * per;
                    float *o = (float *)img.data + i * per;
                    for (int64_t q = 0; q < per; q++) o[q] = x[q] * lam + r[q] * om;
                } else {
                    const uint8_t *x = (const uint8_t *)it->data + i * per, *r = (const uint8_t *)it->data + j * per;
                    uint8_t *o = (uint8_t *)img.data + i * per;
                    for (int64_t q = 0; q < per; q++) {
                        float v = (float)x[q] * lam + (float)r[q] * om;
                        o[q] = (uint8_t)(int)(v < 0.0f ? 0.5f : (v > 255.0f ? 255.5f : v + 0.5f));
                    }
                }
            }
            if ((s = mix_labels(lab.data, n, f->num_classes, lam, om))) goto fail;
        } else {
            int64_t H = it->dims[1], W = it->dims[2], inner = per / (H * W); /* values per pixel */
            int64_t rx = (int64_t)sl__rng_below(&rng, (uint64_t)W), ry = (int64_t)sl__rng_below(&rng, (uint64_t)H);
            double rad = 0.5 * sqrt(1.0 - lambda);
            int64_t rw = (int64_t)(rad * (double)W), rh = (int64_t)(rad * (double)H);
            int64_t x1 = rx - rw < 0 ? 0 : rx - rw, y1 = ry - rh < 0 ? 0 : ry - rh;
            int64_t x2 = rx + rw > W ? W : rx + rw, y2 = ry + rh > H ? H : ry + rh;
            memcpy(img.data, it->data, (size_t)(n * per) * esz);
            size_t run = (size_t)((x2 - x1) * inner) * esz;
            for (int64_t i = 0; i < n && run > 0; i++) {
                int64_t j = i > 0 ? i - 1 : n - 1;
                for (int64_t y = y1; y < y2; y++) {
                    size_t off = (size_t)(((y * W + x1) * inner)) * esz;
                    memcpy((uint8_t *)img.data + (size_t)(i * per) * esz + off,
                           (const uint8_t *)it->data + (size_t)(j * per) * esz + off, run);
                }
            }
            float lam = (float)(1.0 - (double)((x2 - x1) * (y2 - y1)) / (double)(W * H)), om = 1.0f - lam;
            if ((s = mix_labels(lab.data, n, f->num_classes, lam, om))) goto fail;
        }
        if ((s = sl_element_set(e, f->image, &img))) goto fail;
        img.buf = NULL;
    }
    if ((s = sl_element_set(e, f->label, &lab))) {
        sl_tensor_release(&lab);
        return s;
    }
    return SL_OK;
fail:
    if (img.buf) sl_tensor_release(&img);
    sl_tensor_release(&lab);
    return s;
}

static const sl_fn_vt mixup_vt = {.name = "mixup", .apply = mix_apply};
static const sl_fn_vt cutmix_vt = {.name = "cutmix", .apply = mix_apply};
static const sl_fn_vt choice_vt = {.name = "mixup_cutmix", .apply = mix_apply};

static sl_status mix_new(const sl_fn_vt *vt, const char *image, const char *label, double alpha, double cut_alpha,
                         int num_classes, double p, mix_kind kind, sl_fn **out) {
    *out = NULL;
    const char *nm = vt->name;
    if (!image || !*image || strlen(image) >= SL_NAME_MAX || !label || !*label || strlen(label) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "%s: component names must be 1..%d characters", nm, SL_NAME_MAX - 1);
    if (!(alpha > 0) || !(cut_alpha > 0) || !isfinite(alpha) || !isfinite(cut_alpha)) {
        sl_err(SL_EINVAL, "%s: alpha must be > 0 (Beta(alpha, alpha))", nm);
        sl_err_hint("the recipe uses mixup alpha 0.2 and cutmix alpha 1.0");
        return SL_EINVAL;
    }
    if (!(p >= 0 && p <= 1)) return sl_err(SL_EINVAL, "%s: p %g must be in [0, 1]", nm, p);
    if (num_classes < 1 || num_classes > (1 << 24))
        return sl_err(SL_EINVAL, "%s: num_classes %d must be 1..%d", nm, num_classes, 1 << 24);
    mix_fn *f = sl__fn_new(sizeof *f, vt, nm);
    if (!f) return SL_ENOMEM;
    snprintf(f->image, sizeof f->image, "%s", image);
    snprintf(f->label, sizeof f->label, "%s", label);
    f->kind = kind;
    f->alpha = alpha;
    f->cut_alpha = cut_alpha;
    f->num_classes = num_classes;
    f->p = p;
    *out = &f->base;
    return SL_OK;
}

sl_status sl_fn_mixup(const char *image, const char *label, double alpha, int num_classes, double p, sl_fn **out) {
    return mix_new(&mixup_vt, image, label, alpha, alpha, num_classes, p, MIX_MIXUP, out);
}

sl_status sl_fn_cutmix(const char *image, const char *label, double alpha, int num_classes, double p, sl_fn **out) {
    return mix_new(&cutmix_vt, image, label, alpha, alpha, num_classes, p, MIX_CUTMIX, out);
}

sl_status sl_fn_mixup_cutmix(const char *image, const char *label, double mixup_alpha, double cutmix_alpha,
                             int num_classes, sl_fn **out) {
    return mix_new(&choice_vt, image, label, mixup_alpha, cutmix_alpha, num_classes, 1.0, MIX_CHOICE, out);
}
