/* shard: keep the elements at positions index, index+num, index+2*num, ... Placed on a
 * list of files it shards by file; on records, by data. Every replica still reads (and
 * drops) the others' elements when sharding by data: that is the price of data sharding. */
#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    int64_t num, index;
} shard_ds;

typedef struct {
    sl_iter base;
    sl_iter *in;
    int64_t phase; /* position of the next input element, modulo num */
} shard_it;

static sl_status shard_next(sl_iter *it, sl_element *out) {
    shard_it *s = (shard_it *)it;
    const shard_ds *d = (const shard_ds *)it->ds;
    for (;;) {
        sl_status st = sl__iter_next(s->in, out);
        if (st == SL_END) return st;
        bool ours = s->phase == d->index;
        s->phase = s->phase == d->num - 1 ? 0 : s->phase + 1;
        if (ours) return st;   /* an element or its error */
        sl_element_clear(out); /* another replica's (errors included) */
    }
}

static void shard_close(sl_iter *it) { sl__iter_close(((shard_it *)it)->in); }

static const sl_iter_vt shard_it_vt = {.next = shard_next, .close = shard_close};

static sl_status shard_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    shard_it *s = sl__iter_new(sizeof *s, &shard_it_vt, ds, ctx, seed);
    if (!s) return SL_ENOMEM;
    const shard_ds *d = (const shard_ds *)ds;
    int64_t at = 0; /* output element k is input element k * num + index */
    if (s->base.start) {
        if (__builtin_mul_overflow(s->base.start, d->num, &at) || __builtin_add_overflow(at, d->index, &at))
            at = INT64_MAX;
        s->phase = d->index;
    }
    sl_status st = sl__iter_input_at(ds, 0, ctx, seed, 0, at, &s->in);
    if (st) {
        sl__iter_close(&s->base);
        return st;
    }
    *out = &s->base;
    return SL_OK;
}

static int64_t shard_card(const sl_dataset *ds) {
    const shard_ds *d = (const shard_ds *)ds;
    int64_t n = sl_dataset_cardinality(ds->inputs[0]);
    if (n < 0) return n;
    return n / d->num + (n % d->num > d->index ? 1 : 0);
}

static const sl_ds_vt shard_vt = {.name = "shard", .seek = true, .make_iter = shard_make, .cardinality = shard_card};

sl_status sl_ds_shard(sl_dataset *in, int64_t num, int64_t index, sl_dataset **out) {
    *out = NULL;
    if (num < 1) return sl_err(SL_EINVAL, "shard: num %lld must be >= 1", (long long)num);
    if (index < 0 || index >= num)
        return sl_err(SL_EINVAL, "shard: index %lld must be in 0..%lld (num %lld)", (long long)index,
                      (long long)num - 1, (long long)num);
    shard_ds *d = sl__ds_new(sizeof *d, &shard_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    d->num = num;
    d->index = index;
    *out = &d->base;
    return SL_OK;
}
