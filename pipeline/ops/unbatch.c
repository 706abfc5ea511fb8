/* unbatch: tf.data's unbatch, each element of B rows split into B elements along dim 0,
 * as zero-copy views of the input's buffers. Also the row helpers rebatch uses
 * (sl__rows_count, sl__rows_view: pipeline/internal.h).
 *
 * Workload: one view per component per row; no byte is copied. */
#include <stdio.h>

#include "pipeline/internal.h"

sl_status sl__rows_count(const sl_element *e, const char *label, int64_t *rows) {
    char d1[96], d2[96];
    if (e->n == 0) return sl_err(SL_EINVAL, "op '%s': the element has no components to split into rows", label);
    for (int c = 0; c < e->n; c++) {
        const sl_tensor *t = &e->t[c];
        if (t->rank < 1) {
            sl_err(SL_EINVAL, "op '%s': component '%s' is %s, a scalar: it has no rows to split", label, e->names[c],
                   sl_tensor_describe(t, d1, sizeof d1));
            sl_err_hint("unbatch and rebatch split every component along its first dimension: batch first");
            return SL_EINVAL;
        }
        if (t->dims[0] != e->t[0].dims[0]) {
            sl_err(SL_EINVAL, "op '%s': component '%s' is %s but component '%s' is %s: their first dimensions differ",
                   label, e->names[c], sl_tensor_describe(t, d1, sizeof d1), e->names[0],
                   sl_tensor_describe(&e->t[0], d2, sizeof d2));
            sl_err_hint("every component must have the same number of rows (the batch dimension)");
            return SL_EINVAL;
        }
    }
    *rows = e->t[0].dims[0];
    return SL_OK;
}

sl_status sl__rows_view(const sl_element *e, int64_t row, int64_t k, bool keep_dim, sl_element *out) {
    for (int c = 0; c < e->n; c++) {
        const sl_tensor *t = &e->t[c];
        int64_t inner = 1, dims[SL_MAX_RANK];
        for (int d = 1; d < t->rank; d++) inner *= t->dims[d];
        size_t row_bytes = (size_t)inner * sl_dtype_size(t->dtype);
        int rank = keep_dim ? t->rank : t->rank - 1;
        for (int d = 0; d < rank; d++) dims[d] = keep_dim ? t->dims[d] : t->dims[d + 1];
        if (keep_dim) dims[0] = k;
        sl_tensor v;
        sl_status s = sl_tensor_view(&v, t->buf, (const char *)t->data + (size_t)row * row_bytes, (size_t)k * row_bytes,
                                     t->dtype, rank, dims);
        if (!s) {
            v.aux = sl_buf_ref(t->aux);
            if ((s = sl_element_set(out, e->names[c], &v))) sl_tensor_release(&v);
        }
        if (s) {
            sl_element_clear(out);
            return s;
        }
    }
    out->origin = e->origin;
    return SL_OK;
}

typedef struct {
    sl_iter base;
    sl_iter *in;
    sl_element cur; /* the input element being split */
    int64_t rows, next;
} unbatch_it;

static sl_status unbatch_next(sl_iter *it, sl_element *out) {
    unbatch_it *u = (unbatch_it *)it;
    while (u->next >= u->rows) {
        sl_element_clear(&u->cur);
        u->rows = u->next = 0;
        sl_status s = sl__iter_next(u->in, &u->cur);
        if (s) return s;
        if ((s = sl__rows_count(&u->cur, it->ds->label, &u->rows))) {
            sl_element_clear(&u->cur);
            return s;
        }
    }
    sl_status s = sl__rows_view(&u->cur, u->next, 1, false, out);
    if (s) sl__op_err_prefix(it);
    u->next++;
    return s;
}

static void unbatch_close(sl_iter *it) {
    unbatch_it *u = (unbatch_it *)it;
    sl_element_clear(&u->cur);
    sl__iter_close(u->in);
}

static const sl_iter_vt unbatch_it_vt = {.next = unbatch_next, .close = unbatch_close};

static sl_status unbatch_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    unbatch_it *u = sl__iter_new(sizeof *u, &unbatch_it_vt, ds, ctx, seed);
    if (!u) return SL_ENOMEM;
    sl_element_init(&u->cur);
    sl_status s = sl__iter_input(ds, 0, ctx, seed, 0, &u->in);
    if (s) {
        sl__iter_close(&u->base);
        return s;
    }
    *out = &u->base;
    return SL_OK;
}

int64_t sl__rows_card(const sl_dataset *in) {
    int64_t n = sl_dataset_cardinality(in);
    return n == 0 || n == SL_INFINITE ? n : SL_UNKNOWN_CARD;
}

static int64_t unbatch_card(const sl_dataset *ds) { return sl__rows_card(ds->inputs[0]); }

static const sl_ds_vt unbatch_vt = {.name = "unbatch", .make_iter = unbatch_make, .cardinality = unbatch_card};

sl_status sl_ds_unbatch(sl_dataset *in, sl_dataset **out) {
    *out = NULL;
    sl_dataset *d = sl__ds_new(sizeof *d, &unbatch_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    *out = d;
    return SL_OK;
}
