/* repeat: the input `count` times, or forever (SL_INFINITE). Each pass is a fresh input
 * iterator whose stream seed includes the epoch, so shuffles and random functions below
 * differ from epoch to epoch but are the same run after run. An input that ends with no
 * element on its first pass ends a forever-repeat too, instead of spinning. A count whose
 * product with the input's known cardinality is past 2^63-1 is refused at creation. */
#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    int64_t count;
} repeat_ds;

typedef struct {
    sl_iter base;
    sl_iter *in;
    uint64_t epoch; /* passes begun before this one: only compared with count, never past it */
    bool got_any; /* the current pass produced something */
} repeat_it;

static sl_status repeat_next(sl_iter *it, sl_element *out) {
    repeat_it *r = (repeat_it *)it;
    int64_t count = ((const repeat_ds *)it->ds)->count;
    for (;;) {
        if (!r->in) return SL_END;
        sl_status s = sl__iter_next(r->in, out);
        if (s != SL_END) {
            if (s == SL_OK || s != SL_ECANCELED) r->got_any = true;
            return s;
        }
        sl__iter_close(r->in);
        r->in = NULL;
        r->epoch++;
        if (!r->got_any || (count >= 0 && r->epoch >= (uint64_t)count)) return SL_END;
        r->got_any = false;
        s = sl__iter_input(it->ds, 0, it->ctx, it->seed, r->epoch, &r->in);
        if (s) return s;
    }
}

static void repeat_close(sl_iter *it) { sl__iter_close(((repeat_it *)it)->in); }

static const sl_iter_vt repeat_it_vt = {.next = repeat_next, .close = repeat_close};

static sl_status repeat_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    repeat_it *r = sl__iter_new(sizeof *r, &repeat_it_vt, ds, ctx, seed);
    if (!r) return SL_ENOMEM;
    int64_t count = ((repeat_ds *)ds)->count, at = r->base.start;
    if (at) { /* element k is element k % n of pass k / n, for an input of n */
        int64_t n = sl_dataset_cardinality(ds->inputs[0]);
        if (n == 0) { /* nothing to repeat: at its end */
            *out = &r->base;
            return SL_OK;
        }
        if (n == SL_UNKNOWN_CARD) {
            sl__iter_close(&r->base);
            return sl_err(SL_EUNSUPPORTED, "op '%s' (repeat) cannot start at element %lld: its input's length is "
                          "not known", ds->label, (long long)at);
        }
        if (n > 0) {
            r->epoch = (uint64_t)(at / n);
            at %= n;
        }
        if (count >= 0 && r->epoch >= (uint64_t)count) {
            *out = &r->base;
            return SL_OK;
        }
        r->got_any = true; /* the input gave elements on its first pass */
    }
    if (count != 0) {
        sl_status s = sl__iter_input_at(ds, 0, ctx, seed, r->epoch, at, &r->in);
        if (s) {
            sl__iter_close(&r->base);
            return s;
        }
    }
    *out = &r->base;
    return SL_OK;
}

static int64_t repeat_card(const sl_dataset *ds) {
    int64_t n = sl_dataset_cardinality(ds->inputs[0]), c = ((const repeat_ds *)ds)->count, total;
    if (c == 0 || n == 0) return 0;
    if (c < 0 || n == SL_INFINITE) return SL_INFINITE;
    if (n < 0) return n;
    /* a product past 2^63-1 was refused at creation */
    if (__builtin_mul_overflow(n, c, &total)) return SL_UNKNOWN_CARD;
    return total;
}

static const sl_ds_vt repeat_vt = {.name = "repeat", .seek = true, .make_iter = repeat_make, .cardinality = repeat_card};

sl_status sl_ds_repeat(sl_dataset *in, int64_t count, sl_dataset **out) {
    *out = NULL;
    if (count < 0 && count != SL_INFINITE && count != -1)
        return sl_err(SL_EINVAL, "repeat: count %lld must be >= 0, or -1 for forever", (long long)count);
    int64_t n = in && count > 0 ? sl_dataset_cardinality(in) : 0, total;
    if (n > 0 && __builtin_mul_overflow(n, count, &total)) {
        sl_err(SL_ERANGE, "repeat: %lld x %lld elements is past 2^63-1", (long long)count, (long long)n);
        sl_err_hint("take fewer elements first, or repeat forever (no count)");
        return SL_ERANGE;
    }
    repeat_ds *d = sl__ds_new(sizeof *d, &repeat_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    d->count = count < 0 ? -1 : count;
    sl__ds_param(&d->base, (uint64_t)d->count);
    *out = &d->base;
    return SL_OK;
}
