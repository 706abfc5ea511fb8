/* take: the first `count` elements of the input (all when count < 0). */
#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    int64_t count;
} take_ds;

typedef struct {
    sl_iter base;
    sl_iter *in;
    int64_t left;
} take_it;

static sl_status take_next(sl_iter *it, sl_element *out) {
    take_it *t = (take_it *)it;
    if (t->left == 0) return SL_END;
    sl_status s = sl__iter_next(t->in, out);
    if (s == SL_OK && t->left > 0) t->left--;
    return s;
}

static void take_close(sl_iter *it) { sl__iter_close(((take_it *)it)->in); }

static const sl_iter_vt take_it_vt = {.next = take_next, .close = take_close};

static sl_status take_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    take_it *t = sl__iter_new(sizeof *t, &take_it_vt, ds, ctx, seed);
    if (!t) return SL_ENOMEM;
    int64_t count = ((take_ds *)ds)->count, at = t->base.start;
    t->left = count < 0 ? count : count > at ? count - at : 0;
    sl_status s = t->left == 0 && at ? SL_OK : sl__iter_input_at(ds, 0, ctx, seed, 0, at, &t->in);
    if (s) {
        sl__iter_close(&t->base);
        return s;
    }
    *out = &t->base;
    return SL_OK;
}

static int64_t take_card(const sl_dataset *ds) {
    int64_t n = sl_dataset_cardinality(ds->inputs[0]), c = ((const take_ds *)ds)->count;
    if (c < 0) return n;
    if (n == SL_INFINITE) return c;
    if (n == SL_UNKNOWN_CARD) return SL_UNKNOWN_CARD;
    return n < c ? n : c;
}

static const sl_ds_vt take_vt = {.name = "take", .seek = true, .make_iter = take_make, .cardinality = take_card};

sl_status sl_ds_take(sl_dataset *in, int64_t count, sl_dataset **out) {
    *out = NULL;
    take_ds *d = sl__ds_new(sizeof *d, &take_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    d->count = count;
    sl__ds_param(&d->base, (uint64_t)count);
    *out = &d->base;
    return SL_OK;
}
