/* take_while: tf.data's take_while, the input's elements up to the first one for which a
 * predicate is false; the stream ends there without reading further. */
#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    sl_pred_fn pred;
    void *ctx;
    sl_free_fn free_ctx; /* sl_ds_take_while_owned: releases ctx with the dataset */
} tw_ds;

typedef struct {
    sl_iter base;
    sl_iter *in;
    bool done; /* the predicate was false once */
} tw_it;

static sl_status tw_next(sl_iter *it, sl_element *out) {
    tw_it *t = (tw_it *)it;
    const tw_ds *d = (const tw_ds *)it->ds;
    if (t->done) return SL_END;
    sl_status s = sl__iter_next(t->in, out);
    if (s) return s;
    int keep = d->pred(d->ctx, out);
    if (keep > 0) return SL_OK;
    sl_element_clear(out);
    if (keep < 0) {
        sl__op_err_prefix(it);
        return keep;
    }
    t->done = true;
    sl__iter_close(t->in); /* nothing more is read: let its buffers and threads go now */
    t->in = NULL;
    return SL_END;
}

static void tw_close(sl_iter *it) { sl__iter_close(((tw_it *)it)->in); }

static const sl_iter_vt tw_it_vt = {.next = tw_next, .close = tw_close};

static sl_status tw_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    tw_it *t = sl__iter_new(sizeof *t, &tw_it_vt, ds, ctx, seed);
    if (!t) return SL_ENOMEM;
    sl_status s = sl__iter_input(ds, 0, ctx, seed, 0, &t->in);
    if (s) {
        sl__iter_close(&t->base);
        return s;
    }
    *out = &t->base;
    return SL_OK;
}

static int64_t tw_card(const sl_dataset *ds) {
    return sl_dataset_cardinality(ds->inputs[0]) == 0 ? 0 : SL_UNKNOWN_CARD;
}

static void tw_destroy(sl_dataset *ds) {
    tw_ds *d = (tw_ds *)ds;
    if (d->free_ctx) d->free_ctx(d->ctx, NULL);
}

static const sl_ds_vt tw_vt = {.name = "take_while", .make_iter = tw_make, .destroy = tw_destroy,
                               .cardinality = tw_card};

sl_status sl_ds_take_while(sl_dataset *in, sl_pred_fn pred, void *ctx, sl_dataset **out) {
    *out = NULL;
    if (!pred) return sl_err(SL_EINVAL, "take_while: predicate is NULL");
    tw_ds *d = sl__ds_new(sizeof *d, &tw_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    d->pred = pred;
    d->ctx = ctx;
    *out = &d->base;
    return SL_OK;
}

sl_status sl_ds_take_while_owned(sl_dataset *in, sl_pred_fn pred, void *ctx, sl_free_fn free_ctx,
                                 sl_dataset **out) {
    sl_status s = sl_ds_take_while(in, pred, ctx, out);
    if (s) {
        if (free_ctx) free_ctx(ctx, NULL);
        return s;
    }
    ((tw_ds *)*out)->free_ctx = free_ctx;
    return SL_OK;
}
