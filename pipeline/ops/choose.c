/* choose_from_datasets: tf.data's directed mix. The choices dataset (the op's last input)
 * gives int64 indices; each one names the data input the next element is taken from. When
 * the chosen input is empty: with stop_on_empty the stream ends, otherwise the choice is
 * skipped (and once every input is empty the stream ends, as tf.data's does).
 *
 * Seek: the elements before a start position depend only on the choices and on when each
 * input runs out, so when every data input's length is known (or it is endless) the
 * choices before the start are read — only that small int64 stream, from 0 — counting
 * what each input gave and replaying the skips from the inputs' cardinalities; that same
 * choices iterator then goes on, and each input is opened at its count. A data input of
 * unknown length makes the dataset one that does not seek (its vtable is chosen at
 * creation).
 *
 * An element of the choices that is no int64 scalar, or an index outside 0..n-1, is an
 * error naming the choice's position and value; it consumes that choice. A data input's
 * error is returned as it is (it consumes that input element and the choice). */
#include <stdio.h>
#include <string.h>

#include "pipeline/internal.h"

typedef struct {
    sl_dataset base; /* inputs 0..n-1: the data; input n: the choices */
    int n;
    bool stop;       /* stop_on_empty_dataset */
} choose_ds;

typedef struct {
    sl_iter base;
    sl_iter *in[SL_DS_MAX_INPUTS]; /* the data inputs (NULL: never opened) */
    sl_iter *choices;
    bool empty[SL_DS_MAX_INPUTS];  /* found empty (stop_on_empty false) */
    int nempty;
    int64_t j;                     /* position in the choices of the next choice */
    bool done;
} choose_it;

/* The next choice into *c: SL_OK, SL_END when the choices end, or an error (the choices'
 * own, or a choice that is not an index of an input). Advances j past what it read. */
static sl_status next_choice(sl_iter *it, sl_iter *choices, int64_t *j, int n, int *c) {
    sl_element e;
    sl_element_init(&e);
    sl_status s = sl__iter_next(choices, &e);
    if (s) {
        if (s != SL_END) ++*j;
        return s;
    }
    int64_t at = (*j)++;
    int k = sl_element_find(&e, "value");
    if (k < 0 && e.n == 1) k = 0;
    if (k < 0 || e.t[k].dtype != SL_DT_I64 || e.t[k].rank != 0) {
        char what[128];
        if (k < 0) snprintf(what, sizeof what, "%d components and none named 'value'", e.n);
        else snprintf(what, sizeof what, "'%s' %s of rank %d", e.names[k], sl_dtype_name(e.t[k].dtype), e.t[k].rank);
        sl_element_clear(&e);
        s = sl__op_err(it, SL_EINVAL, "choice %lld is not an int64 scalar: %s", (long long)at, what);
        sl_err_hint("the choices are int64 scalars, one per element, as range makes (range 0 N | repeat)");
        return s;
    }
    int64_t v = *(const int64_t *)e.t[k].data;
    sl_element_clear(&e);
    if (v < 0 || v >= n) {
        s = sl__op_err(it, SL_EINVAL, "choice %lld is %lld, outside 0..%d (%d inputs)", (long long)at, (long long)v,
                       n - 1, n);
        sl_err_hint("a choice is the index of an input, 0 for the first");
        return s;
    }
    *c = (int)v;
    return SL_OK;
}

static sl_status choose_next(sl_iter *it, sl_element *out) {
    choose_it *h = (choose_it *)it;
    const choose_ds *d = (const choose_ds *)it->ds;
    for (;;) {
        if (h->done) return SL_END;
        int c;
        sl_status s = next_choice(it, h->choices, &h->j, d->n, &c);
        if (s == SL_END) h->done = true;
        if (s) return s;
        if (h->empty[c]) continue;
        s = sl__iter_next(h->in[c], out);
        if (s != SL_END) return s; /* an element, or the input's error */
        if (d->stop) {
            h->done = true;
            return SL_END;
        }
        h->empty[c] = true;
        if (++h->nempty == d->n) h->done = true;
    }
}

/* Read the choices up to output element `start` from h->choices (opened at 0), counting
 * what each input gives; an input runs out at its cardinality. Leaves h as a live iterator
 * would be at `start`, but for the data inputs, which the caller opens at counts. */
static sl_status replay(choose_it *h, const choose_ds *d, int64_t start, int64_t *counts) {
    int64_t card[SL_DS_MAX_INPUTS];
    for (int i = 0; i < d->n; i++) card[i] = sl_dataset_cardinality(d->base.inputs[i]);
    for (int64_t given = 0; given < start && !h->done;) {
        int c;
        sl_status s = next_choice(&h->base, h->choices, &h->j, d->n, &c);
        if (s == SL_END) h->done = true;
        else if (s) return s; /* what replaying the elements would meet too */
        else if (h->empty[c]) continue;
        else if (card[c] == SL_INFINITE || counts[c] < card[c]) {
            counts[c]++;
            given++;
        } else if (d->stop) {
            h->done = true;
        } else {
            h->empty[c] = true;
            if (++h->nempty == d->n) h->done = true;
        }
    }
    return SL_OK;
}

static void choose_close(sl_iter *it) {
    choose_it *h = (choose_it *)it;
    for (int i = 0; i < ((const choose_ds *)it->ds)->n; i++) sl__iter_close(h->in[i]);
    sl__iter_close(h->choices);
}

static const sl_iter_vt choose_it_vt = {.next = choose_next, .close = choose_close};

static sl_status choose_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    const choose_ds *d = (const choose_ds *)ds;
    choose_it *h = sl__iter_new(sizeof *h, &choose_it_vt, ds, ctx, seed);
    if (!h) return SL_ENOMEM;
    int64_t counts[SL_DS_MAX_INPUTS] = {0};
    sl_status s = sl__iter_input(ds, d->n, ctx, seed, (uint64_t)d->n, &h->choices);
    if (!s && h->base.start) s = replay(h, d, h->base.start, counts);
    for (int i = 0; i < d->n && !s && !h->done; i++)
        if (!h->empty[i]) s = sl__iter_input_at(ds, i, ctx, seed, (uint64_t)i, counts[i], &h->in[i]);
    if (s) {
        sl__iter_close(&h->base);
        return s;
    }
    *out = &h->base;
    return SL_OK;
}

static int64_t choose_card(const sl_dataset *ds) {
    const choose_ds *d = (const choose_ds *)ds;
    int64_t nc = sl_dataset_cardinality(ds->inputs[d->n]);
    if (nc == 0) return 0;
    for (int i = 0; i < d->n; i++)
        if (sl_dataset_cardinality(ds->inputs[i]) != SL_INFINITE) return SL_UNKNOWN_CARD;
    return nc; /* no input runs out: one element per choice */
}

static const sl_ds_vt choose_vt = {.name = "choose_from_datasets", .seek = true, .make_iter = choose_make,
                                   .cardinality = choose_card};
/* a data input of unknown length: when it runs out cannot be told without reading it */
static const sl_ds_vt choose_noseek_vt = {.name = "choose_from_datasets", .make_iter = choose_make,
                                          .cardinality = choose_card};

sl_status sl_ds_choose_from_datasets(sl_dataset *const *ins, int n, sl_dataset *choices, bool stop_on_empty_dataset,
                                     sl_dataset **out) {
    *out = NULL;
    if (!ins || n < 1 || n > SL_DS_MAX_INPUTS - 1)
        return sl_err(SL_EINVAL, "choose_from_datasets: %d inputs (must be 1..%d)", n, SL_DS_MAX_INPUTS - 1);
    if (!choices) return sl_err(SL_EINVAL, "choose_from_datasets: the choices dataset is NULL");
    sl_dataset *all[SL_DS_MAX_INPUTS];
    bool seek = true;
    for (int i = 0; i < n; i++) {
        all[i] = ins[i];
        if (ins[i] && sl_dataset_cardinality(ins[i]) == SL_UNKNOWN_CARD) seek = false;
    }
    all[n] = choices;
    choose_ds *d = sl__ds_new(sizeof *d, seek ? &choose_vt : &choose_noseek_vt, all, n + 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    d->n = n;
    d->stop = stop_on_empty_dataset;
    *out = &d->base;
    return SL_OK;
}
