/* concatenate: tf.data's a.concatenate(b), every element of a then every element of b.
 * Datasets carry no element spec, so compatibility (the same component names with the same
 * dtypes; shapes may differ, as tf.data relaxes them) is checked on the elements: each of
 * b's against a's first, which an iterator that starts inside b reads from a once. The
 * first mismatch is an error naming both and ends the stream.
 *
 * Workload: a pass-through; the check compares at most SL_ELEM_MAX names per element of b. */
#include <stdio.h>
#include <string.h>

#include "pipeline/internal.h"

typedef struct {
    int n; /* -1: not known yet; -2: a is empty, nothing to compare with */
    char names[SL_ELEM_MAX][SL_NAME_MAX];
    sl_dtype dt[SL_ELEM_MAX];
} elem_sig;

typedef struct {
    sl_iter base;
    sl_iter *in[2];
    int cur;          /* the input being read */
    int64_t b_pos;    /* elements of b given so far (position in b) */
    elem_sig sig;     /* a's first element */
    bool broken;      /* a mismatch was reported: nothing more */
} concat_it;

static void sig_of(const sl_element *e, elem_sig *s) {
    s->n = e->n;
    for (int i = 0; i < e->n; i++) {
        snprintf(s->names[i], SL_NAME_MAX, "%s", e->names[i]);
        s->dt[i] = e->t[i].dtype;
    }
}

static bool sig_matches(const elem_sig *s, const sl_element *e) {
    if (s->n != e->n) return false;
    for (int i = 0; i < s->n; i++) {
        int c = sl_element_find(e, s->names[i]);
        if (c < 0 || e->t[c].dtype != s->dt[i]) return false;
    }
    return true;
}

static const char *sig_text(const elem_sig *s, char *buf, size_t cap) {
    size_t len = (size_t)snprintf(buf, cap, "{");
    for (int i = 0; i < s->n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s: %s", i ? ", " : "", s->names[i], sl_dtype_name(s->dt[i]));
    if (len < cap) snprintf(buf + len, cap - len, "}");
    return buf;
}

/* a's first element's signature, read from a fresh iterator over a (the iterator started
 * inside b). An empty a leaves it unknown (nothing to compare with). */
static sl_status peek_a(concat_it *c) {
    sl_iter *a;
    sl_status s = sl__iter_input(c->base.ds, 0, c->base.ctx, c->base.seed, 0, &a);
    if (s) return s;
    sl_element e;
    sl_element_init(&e);
    s = sl__iter_next(a, &e);
    if (s == SL_OK) sig_of(&e, &c->sig);
    else if (s == SL_END) c->sig.n = -2;
    sl_element_clear(&e);
    sl__iter_close(a);
    return s == SL_END ? SL_OK : s;
}

static sl_status concat_next(sl_iter *it, sl_element *out) {
    concat_it *c = (concat_it *)it;
    if (c->broken) return SL_END;
    if (c->cur == 0) {
        sl_status s = sl__iter_next(c->in[0], out);
        if (s != SL_END) {
            if (s == SL_OK && c->sig.n < 0) sig_of(out, &c->sig);
            return s;
        }
        sl__iter_close(c->in[0]);
        c->in[0] = NULL;
        c->cur = 1;
        if (c->sig.n < 0) c->sig.n = -2; /* a gave nothing */
        if ((s = sl__iter_input(it->ds, 1, it->ctx, it->seed, 1, &c->in[1]))) return s;
    }
    sl_status s = sl__iter_next(c->in[1], out);
    if (s) return s;
    if (c->sig.n == -1 && sl_dataset_cardinality(it->ds->inputs[0]) != 0 && (s = peek_a(c))) {
        sl_element_clear(out);
        return s;
    }
    if (c->sig.n >= 0 && !sig_matches(&c->sig, out)) {
        elem_sig got;
        char want_s[1200], got_s[1200];
        sig_of(out, &got);
        sl_element_clear(out);
        c->broken = true;
        sl__op_err(it, SL_EINVAL, "element %lld of input 1 has %s, input 0's elements have %s", (long long)c->b_pos,
                   sig_text(&got, got_s, sizeof got_s), sig_text(&c->sig, want_s, sizeof want_s));
        sl_err_hint("both datasets must have the same component names and dtypes: rename or cast with a map first");
        return SL_EINVAL;
    }
    c->b_pos++;
    return SL_OK;
}

static void concat_close(sl_iter *it) {
    concat_it *c = (concat_it *)it;
    sl__iter_close(c->in[0]);
    sl__iter_close(c->in[1]);
}

static const sl_iter_vt concat_it_vt = {.next = concat_next, .close = concat_close};

static sl_status concat_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    concat_it *c = sl__iter_new(sizeof *c, &concat_it_vt, ds, ctx, seed);
    if (!c) return SL_ENOMEM;
    c->sig.n = -1;
    int64_t at = c->base.start, na = sl_dataset_cardinality(ds->inputs[0]);
    sl_status s;
    if (at > 0 && na == SL_UNKNOWN_CARD) {
        s = sl_err(SL_EUNSUPPORTED, "op '%s' (concatenate) cannot start at element %lld: its first input's length "
                   "is unknown", ds->label, (long long)at);
    } else if (at == 0 || na == SL_INFINITE || at < na) {
        s = sl__iter_input_at(ds, 0, ctx, seed, 0, at, &c->in[0]);
    } else {
        c->cur = 1;
        c->b_pos = at - na;
        s = sl__iter_input_at(ds, 1, ctx, seed, 1, at - na, &c->in[1]);
    }
    if (s) {
        sl__iter_close(&c->base);
        return s;
    }
    *out = &c->base;
    return SL_OK;
}

static int64_t concat_card(const sl_dataset *ds) {
    int64_t a = sl_dataset_cardinality(ds->inputs[0]), b = sl_dataset_cardinality(ds->inputs[1]);
    if (a == SL_INFINITE || b == SL_INFINITE) return SL_INFINITE;
    if (a < 0 || b < 0) return SL_UNKNOWN_CARD;
    return a + b; /* checked at creation */
}

static const sl_ds_vt concat_vt = {.name = "concatenate", .seek = true, .make_iter = concat_make,
                                   .cardinality = concat_card};

sl_status sl_ds_concatenate(sl_dataset *a, sl_dataset *b, sl_dataset **out) {
    *out = NULL;
    if (!a || !b) return sl_err(SL_EINVAL, "concatenate: input %s is NULL", a ? "b" : "a");
    int64_t na = sl_dataset_cardinality(a), nb = sl_dataset_cardinality(b), sum;
    if (na >= 0 && nb >= 0 && __builtin_add_overflow(na, nb, &sum)) {
        sl_err(SL_ERANGE, "concatenate: %lld + %lld elements is past 2^63-1", (long long)na, (long long)nb);
        sl_err_hint("take fewer elements from one of them first");
        return SL_ERANGE;
    }
    sl_dataset *ins[2] = {a, b};
    sl_dataset *d = sl__ds_new(sizeof *d, &concat_vt, ins, 2);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    *out = d;
    return SL_OK;
}
