/* scan: tf.data's scan, a map that carries a state from element to element. Each
 * iterator starts from a copy of the initial state (its tensors shared, not copied). The
 * state depends on every element before, so an iterator started part-way replays. */
#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    sl_element initial; /* references held */
    sl_scan_fn fn;
    void *ctx;
    sl_free_fn free_ctx;
} scan_ds;

typedef struct {
    sl_iter base;
    sl_iter *in;
    sl_element state;
} scan_it;

static void share_element(sl_element *dst, const sl_element *src) {
    sl_element_init(dst);
    for (int c = 0; c < src->n; c++) {
        sl_tensor t;
        sl_tensor_share(&t, &src->t[c]);
        if (sl_element_set(dst, src->names[c], &t)) sl_tensor_release(&t); /* cannot fail: src's names are valid */
    }
}

static sl_status scan_next(sl_iter *it, sl_element *out) {
    scan_it *s = (scan_it *)it;
    const scan_ds *d = (const scan_ds *)it->ds;
    sl_element in;
    sl_element_init(&in);
    sl_status st = sl__iter_next(s->in, &in);
    if (st) return st;
    sl_origin o = in.origin;
    st = d->fn(d->ctx, &s->state, &in, out);
    sl_element_clear(&in);
    if (st < 0) {
        sl_element_clear(out);
        sl__op_err_prefix(it);
        return st;
    }
    if (!out->origin.path) out->origin = o;
    return SL_OK;
}

static void scan_close(sl_iter *it) {
    scan_it *s = (scan_it *)it;
    sl_element_clear(&s->state);
    sl__iter_close(s->in);
}

static const sl_iter_vt scan_it_vt = {.next = scan_next, .close = scan_close};

static sl_status scan_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    scan_it *s = sl__iter_new(sizeof *s, &scan_it_vt, ds, ctx, seed);
    if (!s) return SL_ENOMEM;
    share_element(&s->state, &((scan_ds *)ds)->initial);
    sl_status st = sl__iter_input(ds, 0, ctx, seed, 0, &s->in);
    if (st) {
        sl__iter_close(&s->base);
        return st;
    }
    *out = &s->base;
    return SL_OK;
}

static int64_t scan_card(const sl_dataset *ds) { return sl_dataset_cardinality(ds->inputs[0]); }

static void scan_destroy(sl_dataset *ds) {
    scan_ds *d = (scan_ds *)ds;
    sl_element_clear(&d->initial);
    if (d->free_ctx) d->free_ctx(d->ctx, NULL);
}

static const sl_ds_vt scan_vt = {.name = "scan", .make_iter = scan_make, .destroy = scan_destroy,
                                 .cardinality = scan_card};

sl_status sl_ds_scan(sl_dataset *in, const sl_element *initial, sl_scan_fn fn, void *ctx, sl_free_fn free_ctx,
                     sl_dataset **out) {
    *out = NULL;
    scan_ds *d = fn ? sl__ds_new(sizeof *d, &scan_vt, &in, 1) : NULL;
    if (!d) {
        if (free_ctx) free_ctx(ctx, NULL);
        if (!fn) return sl_err(SL_EINVAL, "scan: function is NULL");
        return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    }
    if (initial) share_element(&d->initial, initial);
    d->fn = fn;
    d->ctx = ctx;
    d->free_ctx = free_ctx;
    *out = &d->base;
    return SL_OK;
}
