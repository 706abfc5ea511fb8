/* rebatch: tf.data's rebatch(batch_size, drop_remainder), the rows of the input's batches
 * batched again into sizes[0], sizes[1], ... (cycled) rows, as unbatch then batch would
 * give. A batch inside one input element is a zero-copy slice of it; one that spans
 * elements is stacked (sl__stack) from row views of each, so no row is ever materialised
 * as an element of its own.
 *
 * Workload: one slice per output batch in the common case (input batches a multiple of the
 * output's); a copy of the batch's bytes when it spans input elements. */
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"

#define MAX_SIZES 64

typedef struct {
    sl_dataset base;
    int64_t sizes[MAX_SIZES];
    int n;
    bool drop_remainder;
} rebatch_ds;

typedef struct {
    sl_iter base;
    sl_iter *in;
    sl_element cur;     /* the input element rows are taken from */
    int64_t rows, next; /* its rows, the next row to take */
    int64_t k;          /* output batches given (picks the size) */
    sl_element *parts;  /* pieces of a batch that spans input elements */
    int nparts, cap;
    int64_t have;       /* rows in parts */
    bool in_ended;
} rebatch_it;

static void clear_parts(rebatch_it *r) {
    for (int i = 0; i < r->nparts; i++) sl_element_clear(&r->parts[i]);
    r->nparts = 0;
    r->have = 0;
}

/* Make sure cur has rows left (reading input elements as needed); SL_END at the end. */
static sl_status fill(rebatch_it *r) {
    while (r->next >= r->rows) {
        sl_element_clear(&r->cur);
        r->rows = r->next = 0;
        sl_status s = sl__iter_next(r->in, &r->cur);
        if (s) return s;
        if ((s = sl__rows_count(&r->cur, r->base.ds->label, &r->rows))) {
            sl_element_clear(&r->cur);
            return s;
        }
    }
    return SL_OK;
}

/* The rows gathered in parts (each part a slice with a leading dimension) as one batch. */
static sl_status stack_parts(rebatch_it *r, sl_element *out) {
    sl_element *rows = calloc((size_t)r->have, sizeof *rows);
    if (!rows) return sl_err(SL_ENOMEM, "out of memory rebatching");
    int64_t n = 0;
    sl_status s = SL_OK;
    for (int p = 0; p < r->nparts && !s; p++)
        for (int64_t i = 0; i < r->parts[p].t[0].dims[0] && !s; i++)
            s = sl__rows_view(&r->parts[p], i, 1, false, &rows[n++]);
    sl_batch_opts o = sl_batch_opts_default(r->have);
    if (!s) s = sl__stack(rows, (int)n, &o, r->base.ds->label, out);
    for (int64_t i = 0; i < n; i++) sl_element_clear(&rows[i]);
    free(rows);
    return s;
}

static sl_status rebatch_next(sl_iter *it, sl_element *out) {
    rebatch_it *r = (rebatch_it *)it;
    const rebatch_ds *d = (const rebatch_ds *)it->ds;
    int64_t want = d->sizes[r->k % d->n];
    while (r->have < want && !r->in_ended) {
        sl_status s = fill(r);
        if (s == SL_END) {
            r->in_ended = true;
            break;
        }
        if (s) return s; /* the rows gathered so far stay for the next call */
        int64_t take = r->rows - r->next;
        if (take > want - r->have) take = want - r->have;
        if (r->nparts == 0 && take == want) { /* the whole batch lies in cur: a slice */
            s = sl__rows_view(&r->cur, r->next, take, true, out);
            if (s) return sl__op_err_prefix(it), s;
            r->next += take;
            r->k++;
            return SL_OK;
        }
        if ((s = sl__elems_reserve(&r->parts, &r->cap, r->nparts + 1))) return s;
        if ((s = sl__rows_view(&r->cur, r->next, take, true, &r->parts[r->nparts]))) return sl__op_err_prefix(it), s;
        r->nparts++;
        r->next += take;
        r->have += take;
    }
    if (r->have == 0 || (r->have < want && d->drop_remainder)) {
        clear_parts(r);
        return SL_END;
    }
    sl_status s = r->nparts == 1 ? (sl_element_move(out, &r->parts[0]), SL_OK) : stack_parts(r, out);
    clear_parts(r);
    r->k++;
    return s;
}

static void rebatch_close(sl_iter *it) {
    rebatch_it *r = (rebatch_it *)it;
    if (r->parts) clear_parts(r);
    free(r->parts);
    sl_element_clear(&r->cur);
    sl__iter_close(r->in);
}

static const sl_iter_vt rebatch_it_vt = {.next = rebatch_next, .close = rebatch_close};

static sl_status rebatch_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    rebatch_it *r = sl__iter_new(sizeof *r, &rebatch_it_vt, ds, ctx, seed);
    if (!r) return SL_ENOMEM;
    sl_status s = sl__iter_input(ds, 0, ctx, seed, 0, &r->in);
    if (s) {
        sl__iter_close(&r->base);
        return s;
    }
    *out = &r->base;
    return SL_OK;
}

static int64_t rebatch_card(const sl_dataset *ds) { return sl__rows_card(ds->inputs[0]); }

static const sl_ds_vt rebatch_vt = {.name = "rebatch", .make_iter = rebatch_make, .cardinality = rebatch_card};

sl_status sl_ds_rebatch(sl_dataset *in, const int64_t *sizes, int n, bool drop_remainder, sl_dataset **out) {
    *out = NULL;
    if (!sizes || n < 1 || n > MAX_SIZES)
        return sl_err(SL_EINVAL, "rebatch: %d batch sizes (must be 1..%d)", n, MAX_SIZES);
    for (int i = 0; i < n; i++)
        if (sizes[i] < 1 || sizes[i] > (1 << 24))
            return sl_err(SL_EINVAL, "rebatch: batch size %d is %lld (must be 1..16777216)", i, (long long)sizes[i]);
    rebatch_ds *d = sl__ds_new(sizeof *d, &rebatch_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    memcpy(d->sizes, sizes, sizeof *sizes * (size_t)n);
    d->n = n;
    d->drop_remainder = drop_remainder;
    *out = &d->base;
    return SL_OK;
}
