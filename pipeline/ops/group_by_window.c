/* group_by_window: tf.data's group_by_window(key_func, reduce_func, window_size) with the
 * reduce its documentation uses, batching each key's window. Every input element goes to
 * the window of its key (an int64 from the key function); a window that reaches its size is
 * stacked into one element (sl__stack) and returned at once. At the end of the input the
 * windows still open are flushed one by one in ascending key order, as tf.data's iterator
 * does (it keeps its groups in a std::map): range(10), key x % 2, window 5 gives
 * [0 2 4 6 8] then [1 3 5 7 9].
 *
 * The machinery is shared with bucket_by_sequence_length (sl__ds_group, internal.h), which
 * gives each key its own window size and its own (padded) reduce.
 *
 * Workload: a few to thousands of keys; the open windows are a sorted array searched by
 * binary search, each holding its elements (moved in, never copied) until it is stacked.
 * Errors: the input's pass through; the key function's error consumes that element; a
 * reduce that fails (shapes that differ) consumes the window. */
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    sl__group_spec spec;
} grp_ds;

typedef struct {
    int64_t key;
    sl_element *elems;
    int n, cap;
} grp_win;

typedef struct {
    sl_iter base;
    sl_iter *in;
    grp_win *wins; /* open windows, ascending key */
    int nwins, capwins;
    bool in_ended;
} grp_it;

static int64_t window_of(const sl__group_spec *sp, int64_t key) {
    return sp->window_of ? sp->window_of(sp->ctx, key) : sp->window;
}

static void win_free(grp_win *w) {
    for (int i = 0; i < w->n; i++) sl_element_clear(&w->elems[i]);
    free(w->elems);
}

/* Reduce window i, remove it. */
static sl_status flush(grp_it *g, int i, sl_element *out) {
    const sl__group_spec *sp = &((const grp_ds *)g->base.ds)->spec;
    grp_win w = g->wins[i];
    memmove(g->wins + i, g->wins + i + 1, (size_t)(g->nwins - i - 1) * sizeof *g->wins);
    g->nwins--;
    bool partial = w.n < window_of(sp, w.key);
    sl_status s;
    if (sp->reduce) {
        s = sp->reduce(sp->ctx, &g->base, w.key, w.elems, w.n, partial, out);
    } else {
        sl_batch_opts o = sl_batch_opts_default(w.n);
        s = sl__stack(w.elems, w.n, &o, g->base.ds->label, out);
    }
    win_free(&w);
    return s;
}

/* Room for one more element in w, growing from 4 (many keys with small windows must not
 * each hold 16 empty elements, as sl__elems_reserve would give), never past its size. */
static sl_status reserve(grp_win *w, int64_t size) {
    if (w->n < w->cap) return SL_OK;
    int64_t ncap = w->cap ? (int64_t)w->cap * 2 : 4;
    if (ncap > size) ncap = size;
    if (ncap <= w->n) ncap = w->n + 1;
    sl_element *a = realloc(w->elems, sizeof *a * (size_t)ncap);
    if (!a) return SL_ENOMEM;
    for (int64_t i = w->cap; i < ncap; i++) sl_element_init(&a[i]);
    w->elems = a;
    w->cap = (int)ncap;
    return SL_OK;
}

/* The window of key (made when missing): its index, or -1 when memory ran out. */
static int find_win(grp_it *g, int64_t key) {
    int lo = 0, hi = g->nwins;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (g->wins[mid].key < key) lo = mid + 1;
        else hi = mid;
    }
    if (lo < g->nwins && g->wins[lo].key == key) return lo;
    if (g->nwins == g->capwins) {
        int ncap = g->capwins ? g->capwins * 2 : 8;
        grp_win *nw = realloc(g->wins, (size_t)ncap * sizeof *nw);
        if (!nw) return -1;
        g->wins = nw;
        g->capwins = ncap;
    }
    memmove(g->wins + lo + 1, g->wins + lo, (size_t)(g->nwins - lo) * sizeof *g->wins);
    g->wins[lo] = (grp_win){.key = key};
    g->nwins++;
    return lo;
}

static sl_status grp_next(sl_iter *it, sl_element *out) {
    grp_it *g = (grp_it *)it;
    const sl__group_spec *sp = &((const grp_ds *)it->ds)->spec;
    while (!g->in_ended) {
        sl_element e;
        sl_element_init(&e);
        sl_status s = sl__iter_next(g->in, &e);
        if (s == SL_END) {
            g->in_ended = true;
            break;
        }
        if (s) return s;
        int64_t key = 0;
        if ((s = sp->key(sp->ctx, &e, &key))) {
            sl_element_clear(&e);
            sl__op_err_prefix(it);
            return s;
        }
        int64_t size = window_of(sp, key);
        if (size < 1) {
            sl_element_clear(&e);
            return sl__op_err(it, SL_EINVAL, "key %lld has no window", (long long)key);
        }
        int i = find_win(g, key);
        if (i < 0 || reserve(&g->wins[i], size)) {
            sl_element_clear(&e);
            return sl__op_err(it, SL_ENOMEM, "out of memory keeping the window of key %lld", (long long)key);
        }
        grp_win *w = &g->wins[i];
        sl_element_move(&w->elems[w->n++], &e);
        if (w->n >= size) return flush(g, i, out);
    }
    while (g->nwins > 0) {
        sl_status s = flush(g, 0, out);
        if (s != SL_END) return s; /* SL_END: the reduce dropped a partial window */
    }
    return SL_END;
}

static void grp_close(sl_iter *it) {
    grp_it *g = (grp_it *)it;
    for (int i = 0; i < g->nwins; i++) win_free(&g->wins[i]);
    free(g->wins);
    sl__iter_close(g->in);
}

static const sl_iter_vt grp_it_vt = {.next = grp_next, .close = grp_close};

static sl_status grp_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    grp_it *g = sl__iter_new(sizeof *g, &grp_it_vt, ds, ctx, seed);
    if (!g) return SL_ENOMEM;
    sl_status s = sl__iter_input(ds, 0, ctx, seed, 0, &g->in);
    if (s) {
        sl__iter_close(&g->base);
        return s;
    }
    *out = &g->base;
    return SL_OK;
}

static void grp_destroy(sl_dataset *ds) {
    grp_ds *d = (grp_ds *)ds;
    if (d->spec.free_ctx) d->spec.free_ctx(d->spec.ctx, NULL);
}

static int64_t grp_card(const sl_dataset *ds) {
    return sl_dataset_cardinality(ds->inputs[0]) == 0 ? 0 : SL_UNKNOWN_CARD;
}

static const sl_ds_vt grp_vt = {.name = "group_by_window", .make_iter = grp_make, .destroy = grp_destroy,
                                .cardinality = grp_card};
static const sl_ds_vt bucket_vt = {.name = "bucket_by_sequence_length", .make_iter = grp_make,
                                   .destroy = grp_destroy, .cardinality = grp_card};

sl_status sl__ds_group(sl_dataset *in, const sl__group_spec *spec, sl_dataset **out) {
    *out = NULL;
    bool bucket = spec->op && strcmp(spec->op, "bucket_by_sequence_length") == 0;
    grp_ds *d = sl__ds_new(sizeof *d, bucket ? &bucket_vt : &grp_vt, &in, 1);
    if (!d) {
        sl_status s = sl_errcode() ? sl_errcode() : SL_ENOMEM;
        if (spec->free_ctx) spec->free_ctx(spec->ctx, NULL);
        return s;
    }
    d->spec = *spec;
    *out = &d->base;
    return SL_OK;
}

sl_status sl_ds_group_by_window_owned(sl_dataset *in, sl_key_fn key, void *ctx, sl_free_fn free_ctx,
                                      int64_t window_size, sl_dataset **out) {
    *out = NULL;
    sl_status s = SL_OK;
    if (!key) s = sl_err(SL_EINVAL, "group_by_window: a key function is required");
    else if (window_size < 1 || window_size > (1 << 24))
        s = sl_err(SL_EINVAL, "group_by_window: window_size %lld must be 1..16777216", (long long)window_size);
    if (s) {
        if (free_ctx) free_ctx(ctx, NULL);
        return s;
    }
    sl__group_spec sp = {.op = "group_by_window", .key = key, .ctx = ctx, .free_ctx = free_ctx, .window = window_size};
    return sl__ds_group(in, &sp, out);
}

sl_status sl_ds_group_by_window(sl_dataset *in, sl_key_fn key, void *ctx, int64_t window_size, sl_dataset **out) {
    return sl_ds_group_by_window_owned(in, key, ctx, NULL, window_size, out);
}
