/* skip: all but the first `count` elements of the input (nothing when count < 0; refused
 * over an endless input, where it would never return). */
#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    int64_t count;
} skip_ds;

typedef struct {
    sl_iter base;
    sl_iter *in;
    int64_t to_skip; /* < 0: skip everything */
} skip_it;

static sl_status skip_next(sl_iter *it, sl_element *out) {
    skip_it *k = (skip_it *)it;
    while (k->to_skip != 0) {
        sl_status s = sl__iter_next(k->in, out);
        if (s) return s; /* an error while skipping still counts as that element */
        sl_element_clear(out);
        if (k->to_skip > 0) k->to_skip--;
    }
    return sl__iter_next(k->in, out);
}

static void skip_close(sl_iter *it) { sl__iter_close(((skip_it *)it)->in); }

static const sl_iter_vt skip_it_vt = {.next = skip_next, .close = skip_close};

static sl_status skip_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    skip_it *k = sl__iter_new(sizeof *k, &skip_it_vt, ds, ctx, seed);
    if (!k) return SL_ENOMEM;
    int64_t count = ((skip_ds *)ds)->count, at = k->base.start;
    k->to_skip = count;
    if (count >= 0 && at) { /* element `at` of the output is element count + at of the input */
        if (__builtin_add_overflow(count, at, &at)) at = INT64_MAX;
        k->to_skip = 0;
    }
    sl_status s = sl__iter_input_at(ds, 0, ctx, seed, 0, count >= 0 ? at : 0, &k->in);
    if (s) {
        sl__iter_close(&k->base);
        return s;
    }
    *out = &k->base;
    return SL_OK;
}

static int64_t skip_card(const sl_dataset *ds) {
    int64_t n = sl_dataset_cardinality(ds->inputs[0]), c = ((const skip_ds *)ds)->count;
    if (n < 0) return n; /* endless stays endless (skipping all of it is refused at creation) */
    if (c < 0) return 0;
    return n > c ? n - c : 0;
}

static const sl_ds_vt skip_vt = {.name = "skip", .seek = true, .make_iter = skip_make, .cardinality = skip_card};

sl_status sl_ds_skip(sl_dataset *in, int64_t count, sl_dataset **out) {
    *out = NULL;
    if (count < 0 && in && sl_dataset_cardinality(in) == SL_INFINITE) {
        sl_err(SL_EINVAL, "skip: skipping all (count %lld) of an endless input never ends", (long long)count);
        sl_err_hint("give skip a count, or take before it");
        return SL_EINVAL;
    }
    skip_ds *d = sl__ds_new(sizeof *d, &skip_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    d->count = count;
    sl__ds_param(&d->base, (uint64_t)count);
    *out = &d->base;
    return SL_OK;
}
