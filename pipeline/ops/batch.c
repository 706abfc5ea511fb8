/* batch: stack consecutive elements along a new leading dimension (optionally padded).
 * A batch over a map becomes a fused map_batch (unless padded), so mapped elements go
 * straight into their batch slots. An input error mid-batch is returned at once and the
 * elements gathered so far stay for the next call: nothing is lost. A row whose bytes were
 * lost to a file that shrank after its record was read fails the batch with SL_EIO naming
 * that row's record (sl_element_check); the batch's other rows go with it. */
#include <stdlib.h>

#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    sl_batch_opts opts;
} batch_ds;

typedef struct {
    sl_iter base;
    sl_iter *in;
    sl_element *pend; /* gathered elements: grows up to opts.size */
    int cap;
    int n;            /* gathered so far */
    bool in_ended;
    bool planned;     /* the batch's memory plan was checked (at the first element) */
} batch_it;

sl_batch_opts sl_batch_opts_default(int64_t size) {
    sl_batch_opts o = {.size = size, .parallelism = SL_AUTO, .deterministic = true};
    return o;
}

static sl_status batch_next(sl_iter *it, sl_element *out) {
    batch_it *b = (batch_it *)it;
    const sl_batch_opts *o = &((const batch_ds *)it->ds)->opts;
    while (!b->in_ended && b->n < o->size) {
        sl_status s = sl__elems_reserve(&b->pend, &b->cap, b->n + 1);
        if (s) return s;
        s = sl__iter_next(b->in, &b->pend[b->n]);
        if (s == SL_END) {
            b->in_ended = true;
        } else if (s) {
            return s;
        } else if (!b->planned) { /* the stacked batch is a copy of `size` elements like this one */
            b->planned = true;
            if ((s = sl__buffer_fits(it, "batch", o->size, sl__element_bytes(&b->pend[0]),
                                     "a smaller `batch N`, or smaller elements (resize or crop before batching)"))) {
                sl_element_clear(&b->pend[0]);
                return s;
            }
            b->n++;
        } else {
            b->n++;
        }
    }
    if (b->n == 0 || (b->n < o->size && o->drop_remainder)) {
        for (int i = 0; i < b->n; i++) sl_element_clear(&b->pend[i]);
        b->n = 0;
        return SL_END;
    }
    sl_status s = sl__stack(b->pend, b->n, o, it->ds->label, out);
    /* after the copy: a row whose source bytes left with a shrunk file was copied as zeros */
    for (int i = 0; i < b->n && !s; i++)
        if ((s = sl_element_check(&b->pend[i]))) sl_element_clear(out);
    for (int i = 0; i < b->n; i++) sl_element_clear(&b->pend[i]);
    b->n = 0;
    return s;
}

static void batch_close(sl_iter *it) {
    batch_it *b = (batch_it *)it;
    if (b->pend)
        for (int i = 0; i < b->n; i++) sl_element_clear(&b->pend[i]);
    free(b->pend);
    sl__iter_close(b->in);
}

static const sl_iter_vt batch_it_vt = {.next = batch_next, .close = batch_close};

static sl_status batch_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    batch_it *b = sl__iter_new(sizeof *b, &batch_it_vt, ds, ctx, seed);
    if (!b) return SL_ENOMEM;
    int64_t at; /* batch k starts at input element k * size */
    if (__builtin_mul_overflow(b->base.start, ((batch_ds *)ds)->opts.size, &at)) at = INT64_MAX;
    sl_status s = sl__iter_input_at(ds, 0, ctx, seed, 0, at, &b->in);
    if (s) {
        sl__iter_close(&b->base);
        return s;
    }
    *out = &b->base;
    return SL_OK;
}

static int64_t batch_card(const sl_dataset *ds) {
    return sl__batch_card(ds->inputs[0], &((const batch_ds *)ds)->opts);
}

static const sl_ds_vt batch_vt = {.name = "batch", .seek = true, .make_iter = batch_make, .cardinality = batch_card};

sl_status sl_ds_batch(sl_dataset *in, const sl_batch_opts *opts, sl_dataset **out) {
    *out = NULL;
    if (!opts || opts->size < 1 || opts->size > (1 << 24))
        return sl_err(SL_EINVAL, "batch: size must be 1..16777216");
    sl_fn *fn;
    int par;
    bool det;
    if (!opts->padded && in && sl__ds_as_map(in, &fn, &par, &det)) {
        sl_batch_opts o = *opts;
        o.parallelism = par;
        o.deterministic = det;
        sl_status s = sl_ds_map_batch(in->inputs[0], fn, &o, out);
        if (!s) sl__map_batch_set_fn_site(*out, in->label, in->where);
        return s;
    }
    batch_ds *d = sl__ds_new(sizeof *d, &batch_vt, &in, 1);
    if (!d) return sl_errcode();
    d->opts = *opts;
    *out = &d->base;
    return SL_OK;
}
