/* flat_map: tf.data's flat_map. Each input element goes to the factory, which makes a
 * dataset; that dataset's elements are produced in order, then the next input element's.
 * It is interleave with a cycle of one, without threads: one inner iterator at a time, so
 * memory is one element plus what the inner dataset holds.
 *
 * Seeds: the dataset made for input element k is iterated with stream seed
 * child(seed, k + 1), so random ops inside it draw the same numbers run after run.
 * Errors: the factory's error (or a factory that makes nothing) is returned and consumes
 * that input element; an inner iterator's error is returned and the inner iterator goes on;
 * the input's errors pass through. */
#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    sl_ds_factory factory;
    void *ctx;
} fm_ds;

typedef struct {
    sl_iter base;
    sl_iter *in;
    sl_iter *cur; /* the current input element's dataset, or NULL */
    int64_t k;    /* input elements taken so far */
} fm_it;

static sl_status fm_next(sl_iter *it, sl_element *out) {
    fm_it *f = (fm_it *)it;
    const fm_ds *d = (const fm_ds *)it->ds;
    for (;;) {
        if (f->cur) {
            sl_status s = sl__iter_next(f->cur, out);
            if (s != SL_END) return s;
            sl__iter_close(f->cur);
            f->cur = NULL;
        }
        sl_element e;
        sl_element_init(&e);
        sl_status s = sl__iter_next(f->in, &e);
        if (s) return s;
        sl_dataset *ds = NULL;
        int64_t k = f->k++;
        s = d->factory(d->ctx, &e, &ds);
        sl_element_clear(&e);
        if (s) {
            sl_dataset_unref(ds);
            sl__op_err_prefix(it);
            return s;
        }
        if (!ds) return sl__op_err(it, SL_EINVAL, "the function made no dataset for input element %lld", (long long)k);
        s = sl__iter_make(it, ds, sl__child_seed(it->seed, (uint64_t)k + 1), &f->cur);
        sl_dataset_unref(ds);
        if (s) return s;
    }
}

static void fm_close(sl_iter *it) {
    fm_it *f = (fm_it *)it;
    sl__iter_close(f->cur);
    sl__iter_close(f->in);
}

static const sl_iter_vt fm_it_vt = {.next = fm_next, .close = fm_close};

static sl_status fm_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    fm_it *f = sl__iter_new(sizeof *f, &fm_it_vt, ds, ctx, seed);
    if (!f) return SL_ENOMEM;
    sl_status s = sl__iter_input(ds, 0, ctx, seed, 0, &f->in);
    if (s) {
        sl__iter_close(&f->base);
        return s;
    }
    *out = &f->base;
    return SL_OK;
}

static int64_t fm_card(const sl_dataset *ds) {
    return sl_dataset_cardinality(ds->inputs[0]) == 0 ? 0 : SL_UNKNOWN_CARD;
}

static const sl_ds_vt fm_vt = {.name = "flat_map", .make_iter = fm_make, .cardinality = fm_card};

sl_status sl_ds_flat_map(sl_dataset *in, sl_ds_factory factory, void *ctx, sl_dataset **out) {
    *out = NULL;
    if (!factory) return sl_err(SL_EINVAL, "flat_map: a factory function is required");
    fm_ds *d = sl__ds_new(sizeof *d, &fm_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    d->factory = factory;
    d->ctx = ctx;
    *out = &d->base;
    return SL_OK;
}
