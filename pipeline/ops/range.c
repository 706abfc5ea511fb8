/* range: integers start, start+step, ... as {"value": int64 scalar}. For tests and
 * synthetic input.
 *
 * The element count is Python's len(range(start, stop, step)), computed once at creation
 * in uint64 (the distance between two int64 values always fits), so every start/stop/step
 * is exact, INT64_MIN and INT64_MAX and a step of -2^63 included; a range of more than
 * 2^63-1 elements is refused there, since no cardinality could say it. The iterator counts
 * the elements left and steps in uint64, so it never computes past the int64 limits: the
 * step after the last element is never taken. */
#include "pipeline/internal.h"
#include "sluice/util.h"

typedef struct {
    sl_dataset base;
    int64_t start, step;
    int64_t count; /* elements, exact */
} range_ds;

typedef struct {
    sl_iter base;
    uint64_t next; /* the next value's bits */
    int64_t left;
} range_it;

static sl_status range_next(sl_iter *it, sl_element *out) {
    range_it *r = (range_it *)it;
    const range_ds *d = (const range_ds *)it->ds;
    if (r->left == 0) return SL_END;
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_I64, 0, NULL);
    if (s) return s;
    *(int64_t *)t.data = sl_i64_from_bits(r->next);
    r->left--;
    if (r->left > 0) r->next += (uint64_t)d->step; /* the next value is inside the range too */
    return sl_element_set(out, "value", &t);
}

static const sl_iter_vt range_it_vt = {.next = range_next};

static sl_status range_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    range_it *r = sl__iter_new(sizeof *r, &range_it_vt, ds, ctx, seed);
    if (!r) return SL_ENOMEM;
    const range_ds *d = (const range_ds *)ds;
    int64_t at = r->base.start < d->count ? r->base.start : d->count;
    /* element k is start + k * step, computed on the bits: it is inside the range */
    r->next = (uint64_t)d->start + (uint64_t)at * (uint64_t)d->step;
    r->left = d->count - at;
    *out = &r->base;
    return SL_OK;
}

static int64_t range_card(const sl_dataset *ds) { return ((const range_ds *)ds)->count; }

static const sl_ds_vt range_vt = {.name = "range", .seek = true, .make_iter = range_make, .cardinality = range_card};

/* len(range(start, stop, step)) for step != 0; up to 2^64-1. */
static uint64_t range_len(int64_t start, int64_t stop, int64_t step) {
    uint64_t dist, mag;
    if (step > 0) {
        if (stop <= start) return 0;
        dist = (uint64_t)stop - (uint64_t)start;
        mag = (uint64_t)step;
    } else {
        if (stop >= start) return 0;
        dist = (uint64_t)start - (uint64_t)stop;
        mag = 0 - (uint64_t)step; /* -2^63 gives 2^63 */
    }
    return (dist - 1) / mag + 1;
}

sl_status sl_ds_range(int64_t start, int64_t stop, int64_t step, sl_dataset **out) {
    *out = NULL;
    if (step == 0) return sl_err(SL_EINVAL, "range: step must not be 0");
    uint64_t n = range_len(start, stop, step);
    if (n > (uint64_t)INT64_MAX) {
        sl_err(SL_ERANGE, "range: start %lld stop %lld step %lld makes %llu elements, past 2^63-1", (long long)start,
               (long long)stop, (long long)step, (unsigned long long)n);
        sl_err_hint("split it into two ranges, or repeat one for an endless stream");
        return SL_ERANGE;
    }
    range_ds *d = sl__ds_new(sizeof *d, &range_vt, NULL, 0);
    if (!d) return SL_ENOMEM;
    d->start = start;
    d->step = step;
    d->count = (int64_t)n;
    sl__ds_param(&d->base, (uint64_t)start);
    sl__ds_param(&d->base, (uint64_t)step);
    sl__ds_param(&d->base, (uint64_t)n);
    *out = &d->base;
    return SL_OK;
}
