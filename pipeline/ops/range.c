/* range: integers start, start+step, ... as {"value": int64 scalar}. For tests and
 * synthetic input. */
#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    int64_t start, stop, step;
} range_ds;

typedef struct {
    sl_iter base;
    int64_t next;
} range_it;

static sl_status range_next(sl_iter *it, sl_element *out) {
    range_it *r = (range_it *)it;
    const range_ds *d = (const range_ds *)it->ds;
    if (d->step > 0 ? r->next >= d->stop : r->next <= d->stop) return SL_END;
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_I64, 0, NULL);
    if (s) return s;
    *(int64_t *)t.data = r->next;
    r->next += d->step;
    return sl_element_set(out, "value", &t);
}

static const sl_iter_vt range_it_vt = {.next = range_next};

static sl_status range_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    range_it *r = sl__iter_new(sizeof *r, &range_it_vt, ds, ctx, seed);
    if (!r) return SL_ENOMEM;
    r->next = ((range_ds *)ds)->start;
    *out = &r->base;
    return SL_OK;
}

static int64_t range_card(const sl_dataset *ds) {
    const range_ds *d = (const range_ds *)ds;
    if (d->step > 0) return d->stop > d->start ? (d->stop - d->start + d->step - 1) / d->step : 0;
    return d->stop < d->start ? (d->start - d->stop - d->step - 1) / -d->step : 0;
}

static const sl_ds_vt range_vt = {.name = "range", .make_iter = range_make, .cardinality = range_card};

sl_status sl_ds_range(int64_t start, int64_t stop, int64_t step, sl_dataset **out) {
    *out = NULL;
    if (step == 0) return sl_err(SL_EINVAL, "range: step must not be 0");
    range_ds *d = sl__ds_new(sizeof *d, &range_vt, NULL, 0);
    if (!d) return SL_ENOMEM;
    d->start = start;
    d->stop = stop;
    d->step = step;
    *out = &d->base;
    return SL_OK;
}
