/* rejection_resample: tf.data's rejection_resample, as one filtering pass. The class of an
 * element is an integer scalar component; an element of class c is kept with probability
 * a_c = (t_c / p_c) / max_k (t_k / p_k), t the target and p the input's class distribution
 * (given, or estimated online as tf.data's _estimate_initial_dist_ds does: counts starting
 * at 10 per class, updated with each block of 32 elements, the block's estimate deciding
 * the block, so the iterator reads a block ahead). Then P(class c | kept) = t_c.
 *
 * tf.data mixes an unfiltered second pass over the input with the filtered one (weights
 * m = min ratio and 1 - m) to reject less; that reads the input twice and can yield one
 * element twice. Here the output is a subsequence of the input (pipeline.h says so).
 *
 * The draw for input element k: uniform from mix(mix(seed, stream seed), k). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"

#define BLOCK 32          /* tf.data's dist_estimation_batch_size */
#define SMOOTHING 10      /* tf.data's smoothing_constant */
#define MAX_CLASSES 1024

typedef struct {
    sl_dataset base;
    char comp[SL_NAME_MAX];
    int nc;
    double *target, *initial; /* normalised; initial NULL: estimated */
    uint64_t seed;
} rr_ds;

typedef struct {
    sl_iter base;
    sl_iter *in;
    sl_element blk[BLOCK]; /* the block being decided */
    int64_t cls[BLOCK];
    int nblk, iblk;
    bool ready;            /* blk is complete and accept[] holds its probabilities */
    bool in_ended;
    int64_t pos;           /* input elements decided so far */
    uint64_t draw_seed;
    int64_t *counts;       /* estimated: per class, smoothing included */
    double *accept;
} rr_it;

/* a_c for distribution p (not necessarily normalised: sum given) */
static void acceptance(const rr_ds *d, const double *p, double psum, double *a) {
    double mx = 0;
    for (int c = 0; c < d->nc; c++) {
        a[c] = d->target[c] / (p[c] / psum + FLT_MIN); /* tf.data adds float32's tiny */
        if (a[c] > mx) mx = a[c];
    }
    for (int c = 0; c < d->nc; c++) a[c] = mx > 0 ? a[c] / mx : 0;
}

static sl_status class_of(sl_iter *it, const sl_element *e, int64_t *out) {
    const rr_ds *d = (const rr_ds *)it->ds;
    int c = sl_element_find(e, d->comp);
    if (c < 0) return sl__op_err(it, SL_EINVAL, "no class component '%s'", d->comp);
    const sl_tensor *t = &e->t[c];
    int64_t v;
    if (t->rank == 0 && t->dtype == SL_DT_I64) v = *(const int64_t *)t->data;
    else if (t->rank == 0 && t->dtype == SL_DT_I32) v = *(const int32_t *)t->data;
    else {
        char desc[96];
        return sl__op_err(it, SL_EINVAL, "class component '%s' is %s: it must be an int64 or int32 scalar", d->comp,
                          sl_tensor_describe(t, desc, sizeof desc));
    }
    if (v < 0 || v >= d->nc)
        return sl__op_err(it, SL_EINVAL, "class %lld of component '%s' is outside 0..%d", (long long)v, d->comp,
                          d->nc - 1);
    *out = v;
    return SL_OK;
}

static sl_status rr_next(sl_iter *it, sl_element *out) {
    rr_it *r = (rr_it *)it;
    const rr_ds *d = (const rr_ds *)it->ds;
    int want = d->initial ? 1 : BLOCK;
    for (;;) {
        if (!r->ready) {
            while (r->nblk < want && !r->in_ended) {
                sl_element *e = &r->blk[r->nblk];
                sl_status s = sl__iter_next(r->in, e);
                if (s == SL_END) {
                    r->in_ended = true;
                    break;
                }
                if (s) return s; /* the block so far stays */
                if ((s = class_of(it, e, &r->cls[r->nblk]))) {
                    sl_element_clear(e);
                    return s;
                }
                r->nblk++;
            }
            if (r->nblk == 0) return SL_END;
            if (!d->initial) {
                int64_t sum = 0;
                for (int i = 0; i < r->nblk; i++) r->counts[r->cls[i]]++;
                double *p = malloc(sizeof *p * (size_t)d->nc);
                if (!p) return sl__op_err(it, SL_ENOMEM, "out of memory");
                for (int c = 0; c < d->nc; c++) sum += r->counts[c];
                for (int c = 0; c < d->nc; c++) p[c] = (double)r->counts[c];
                acceptance(d, p, (double)sum, r->accept);
                free(p);
            }
            r->ready = true;
            r->iblk = 0;
        }
        while (r->iblk < r->nblk) {
            int i = r->iblk++;
            sl_rng g = {sl__mix(r->draw_seed, (uint64_t)r->pos++)};
            if (sl__rng_double(&g) < r->accept[r->cls[i]]) {
                sl_element_move(out, &r->blk[i]);
                if (r->iblk == r->nblk) r->ready = false, r->nblk = 0;
                return SL_OK;
            }
            sl_element_clear(&r->blk[i]);
        }
        r->ready = false;
        r->nblk = 0;
    }
}

static void rr_close(sl_iter *it) {
    rr_it *r = (rr_it *)it;
    for (int i = r->ready ? r->iblk : 0; i < r->nblk; i++) sl_element_clear(&r->blk[i]);
    free(r->counts);
    free(r->accept);
    sl__iter_close(r->in);
}

static const sl_iter_vt rr_it_vt = {.next = rr_next, .close = rr_close};

static sl_status rr_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    const rr_ds *d = (const rr_ds *)ds;
    rr_it *r = sl__iter_new(sizeof *r, &rr_it_vt, ds, ctx, seed);
    if (!r) return SL_ENOMEM;
    for (int i = 0; i < BLOCK; i++) sl_element_init(&r->blk[i]);
    r->draw_seed = sl__mix(d->seed, seed);
    r->counts = calloc((size_t)d->nc, sizeof *r->counts);
    r->accept = calloc((size_t)d->nc, sizeof *r->accept);
    sl_status s = r->counts && r->accept ? SL_OK : sl_err(SL_ENOMEM, "rejection_resample: out of memory");
    if (!s) {
        for (int c = 0; c < d->nc; c++) r->counts[c] = SMOOTHING;
        if (d->initial) acceptance(d, d->initial, 1.0, r->accept);
        s = sl__iter_input(ds, 0, ctx, seed, 0, &r->in);
    }
    if (s) {
        sl__iter_close(&r->base);
        return s;
    }
    *out = &r->base;
    return SL_OK;
}

static void rr_destroy(sl_dataset *ds) {
    rr_ds *d = (rr_ds *)ds;
    free(d->target);
    free(d->initial);
}

static int64_t rr_card(const sl_dataset *ds) {
    return sl_dataset_cardinality(ds->inputs[0]) == 0 ? 0 : SL_UNKNOWN_CARD;
}

static const sl_ds_vt rr_vt = {.name = "rejection_resample", .make_iter = rr_make, .destroy = rr_destroy,
                               .cardinality = rr_card};

/* Check and normalise w (n weights) into a new array *out. */
static sl_status dist(const char *what, const double *w, int n, double **out) {
    double sum = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(w[i]) || w[i] < 0)
            return sl_err(SL_EINVAL, "rejection_resample: %s weight %d is %g: weights must be finite and >= 0", what, i,
                          w[i]);
        sum += w[i];
    }
    if (!(sum > 0)) return sl_err(SL_EINVAL, "rejection_resample: the %s weights sum to 0", what);
    if (!(*out = malloc(sizeof **out * (size_t)n))) return sl_err(SL_ENOMEM, "rejection_resample: out of memory");
    for (int i = 0; i < n; i++) (*out)[i] = w[i] / sum;
    return SL_OK;
}

sl_status sl_ds_rejection_resample(sl_dataset *in, const char *class_component, const double *target, int nclasses,
                                   const double *initial, uint64_t seed, sl_dataset **out) {
    *out = NULL;
    if (!class_component || !class_component[0] || strlen(class_component) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "rejection_resample: a class component name (1..%d characters) is required",
                      SL_NAME_MAX - 1);
    if (!target || nclasses < 1 || nclasses > MAX_CLASSES)
        return sl_err(SL_EINVAL, "rejection_resample: %d classes: give 1..%d target weights", nclasses, MAX_CLASSES);
    double *t = NULL, *p = NULL;
    sl_status s = dist("target", target, nclasses, &t);
    if (!s && initial) s = dist("initial", initial, nclasses, &p);
    if (s) {
        free(t);
        return s;
    }
    rr_ds *d = sl__ds_new(sizeof *d, &rr_vt, &in, 1);
    if (!d) {
        free(t);
        free(p);
        return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    }
    strcpy(d->comp, class_component);
    d->nc = nclasses;
    d->target = t;
    d->initial = p;
    d->seed = seed;
    *out = &d->base;
    return SL_OK;
}
