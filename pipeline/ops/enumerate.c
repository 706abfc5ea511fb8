/* enumerate: tf.data's enumerate(start), each element with an int64 scalar component (by
 * default "index") counting from start. Seeks: element k of the output is element k of the
 * input with start + k. */
#include <stdio.h>
#include <string.h>

#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    int64_t start;
    char name[SL_NAME_MAX];
} enum_ds;

typedef struct {
    sl_iter base;
    sl_iter *in;
    int64_t pos; /* position of the next element in the output */
} enum_it;

static sl_status enum_next(sl_iter *it, sl_element *out) {
    enum_it *e = (enum_it *)it;
    const enum_ds *d = (const enum_ds *)it->ds;
    sl_status s = sl__iter_next(e->in, out);
    if (s) return s;
    int64_t pos = e->pos++, index;
    if (sl_element_find(out, d->name) >= 0) {
        sl_element_clear(out);
        sl__op_err(it, SL_EINVAL, "the element already has a component '%s'", d->name);
        sl_err_hint("give the index another name: enumerate as=NAME (sl_ds_enumerate's name)");
        return SL_EINVAL;
    }
    if (__builtin_add_overflow(d->start, pos, &index)) {
        sl_element_clear(out);
        return sl__op_err(it, SL_ERANGE, "index %lld + %lld is past 2^63-1", (long long)d->start, (long long)pos);
    }
    sl_tensor t;
    if ((s = sl_tensor_alloc(&t, SL_DT_I64, 0, NULL))) {
        sl_element_clear(out);
        return s;
    }
    *(int64_t *)t.data = index;
    if ((s = sl_element_set(out, d->name, &t))) {
        sl_tensor_release(&t);
        sl_element_clear(out);
        sl__op_err_prefix(it);
    }
    return s;
}

static void enum_close(sl_iter *it) { sl__iter_close(((enum_it *)it)->in); }

static const sl_iter_vt enum_it_vt = {.next = enum_next, .close = enum_close};

static sl_status enum_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    enum_it *e = sl__iter_new(sizeof *e, &enum_it_vt, ds, ctx, seed);
    if (!e) return SL_ENOMEM;
    e->pos = e->base.start;
    sl_status s = sl__iter_input_at(ds, 0, ctx, seed, 0, e->base.start, &e->in);
    if (s) {
        sl__iter_close(&e->base);
        return s;
    }
    *out = &e->base;
    return SL_OK;
}

static int64_t enum_card(const sl_dataset *ds) { return sl_dataset_cardinality(ds->inputs[0]); }

static const sl_ds_vt enum_vt = {.name = "enumerate", .seek = true, .make_iter = enum_make, .cardinality = enum_card};

sl_status sl_ds_enumerate(sl_dataset *in, int64_t start, const char *name, sl_dataset **out) {
    *out = NULL;
    if (!name) name = "index";
    if (!*name || strlen(name) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "enumerate: component name '%.80s' must be 1..%d bytes", name, SL_NAME_MAX - 1);
    enum_ds *d = sl__ds_new(sizeof *d, &enum_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    d->start = start;
    sl__ds_param(&d->base, (uint64_t)start);
    snprintf(d->name, sizeof d->name, "%s", name);
    *out = &d->base;
    return SL_OK;
}
