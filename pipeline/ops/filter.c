/* filter: keep the elements for which a predicate holds. */
#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    sl_pred_fn pred;
    void *ctx;
    sl_free_fn free_ctx; /* sl_ds_filter_owned: releases ctx with the dataset */
} filter_ds;

typedef struct {
    sl_iter base;
    sl_iter *in;
} filter_it;

static sl_status filter_next(sl_iter *it, sl_element *out) {
    filter_it *f = (filter_it *)it;
    const filter_ds *d = (const filter_ds *)it->ds;
    for (;;) {
        sl_status s = sl__iter_next(f->in, out);
        if (s) return s;
        int keep = d->pred(d->ctx, out);
        if (keep > 0) return SL_OK;
        sl_element_clear(out);
        if (keep < 0) {
            sl__op_err_prefix(it);
            return keep;
        }
    }
}

static void filter_close(sl_iter *it) { sl__iter_close(((filter_it *)it)->in); }

static const sl_iter_vt filter_it_vt = {.next = filter_next, .close = filter_close};

static sl_status filter_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    filter_it *f = sl__iter_new(sizeof *f, &filter_it_vt, ds, ctx, seed);
    if (!f) return SL_ENOMEM;
    sl_status s = sl__iter_input(ds, 0, ctx, seed, 0, &f->in);
    if (s) {
        sl__iter_close(&f->base);
        return s;
    }
    *out = &f->base;
    return SL_OK;
}

static int64_t filter_card(const sl_dataset *ds) {
    int64_t n = sl_dataset_cardinality(ds->inputs[0]);
    return n == 0 ? 0 : (n == SL_INFINITE ? SL_INFINITE : SL_UNKNOWN_CARD);
}

static void filter_destroy(sl_dataset *ds) {
    filter_ds *d = (filter_ds *)ds;
    if (d->free_ctx) d->free_ctx(d->ctx, NULL);
}

static const sl_ds_vt filter_vt = {.name = "filter", .make_iter = filter_make, .destroy = filter_destroy,
                                   .cardinality = filter_card};

sl_status sl_ds_filter(sl_dataset *in, sl_pred_fn pred, void *ctx, sl_dataset **out) {
    *out = NULL;
    if (!pred) return sl_err(SL_EINVAL, "filter: predicate is NULL");
    filter_ds *d = sl__ds_new(sizeof *d, &filter_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    d->pred = pred;
    d->ctx = ctx;
    *out = &d->base;
    return SL_OK;
}

sl_status sl_ds_filter_owned(sl_dataset *in, sl_pred_fn pred, void *ctx, sl_free_fn free_ctx,
                             sl_dataset **out) {
    sl_status s = sl_ds_filter(in, pred, ctx, out);
    if (s) {
        if (free_ctx) free_ctx(ctx, NULL);
        return s;
    }
    ((filter_ds *)*out)->free_ctx = free_ctx;
    return SL_OK;
}
