/* window: tf.data's window(size, shift, stride, drop_remainder) followed by
 * flat_map(lambda w: w.batch(size)), the common use. Sluice elements are tuples of tensors,
 * not nested datasets, so each window is ONE element whose components are the window's
 * elements stacked along a new leading dimension (sl__stack, as batch does; shapes must
 * match).
 *
 * Window k is made of input elements k*shift + i*stride, i = 0..size-1, that exist. The
 * iterator keeps a buffer of the last (size-1)*stride+1 input elements (the span of one
 * window) as references, never copies: windows that share elements (shift < size) share
 * the buffered elements, and each element is copied only into the stacked outputs it is
 * part of. When shift is larger than the span, the elements between windows are read and
 * dropped without being buffered (their errors are dropped with them, as tf.data does).
 * At the end of the input the buffer drains by `shift` per window, giving the partial
 * windows tf.data gives (range(7).window(3, 1): ..., [4 5 6], [5 6], [6]), unless
 * drop_remainder, which ends the stream at the first window shorter than `size`.
 *
 * An input error while filling the buffer is returned at once and the buffer is kept: the
 * next call goes on filling it. Seeks: window k starts at input element k*shift. */
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    int64_t size, shift, stride, span; /* span: (size-1)*stride+1 input elements */
    bool drop;
} win_ds;

typedef struct {
    sl_iter base;
    sl_iter *in;
    sl_element **buf; /* buffered input elements, oldest first (pointers, so a shift moves 8 bytes each) */
    int64_t n, cap;
    sl_element *rows; /* shallow copies of one window's rows for sl__stack (no references taken) */
    int64_t skip;     /* input elements to drop before the next window (shift > span) */
    bool in_ended;
    bool planned;     /* the buffer's memory plan was checked (at the first element) */
} win_it;

static void drop_front(win_it *w, int64_t k) {
    for (int64_t i = 0; i < k; i++) {
        sl__stats_buffered_bytes(w->base.ctx, w->base.stats, -(long long)sl__element_bytes(w->buf[i]));
        sl_element_clear(w->buf[i]);
        free(w->buf[i]);
    }
    if (w->n > k) memmove(w->buf, w->buf + k, (size_t)(w->n - k) * sizeof *w->buf);
    w->n -= k;
    atomic_store_explicit(&w->base.stats->buffered, (int)w->n, memory_order_relaxed);
}

static sl_status win_next(sl_iter *it, sl_element *out) {
    win_it *w = (win_it *)it;
    const win_ds *d = (const win_ds *)it->ds;
    while (w->skip > 0 && !w->in_ended) {
        sl_element e;
        sl_element_init(&e);
        sl_status s = sl__iter_next(w->in, &e);
        if (s == SL_END) w->in_ended = true;
        sl_element_clear(&e);
        w->skip--;
    }
    while (!w->in_ended && w->n < d->span) {
        if (w->n == w->cap) {
            int64_t ncap = w->cap ? w->cap * 2 : 16;
            if (ncap > d->span) ncap = d->span;
            sl_element **nb = realloc(w->buf, (size_t)ncap * sizeof *nb);
            if (!nb) return sl__op_err(it, SL_ENOMEM, "out of memory buffering %lld elements", (long long)ncap);
            w->buf = nb;
            w->cap = ncap;
        }
        sl_element *e = malloc(sizeof *e);
        if (!e) return sl__op_err(it, SL_ENOMEM, "out of memory buffering an element");
        sl_element_init(e);
        sl_status s = sl__iter_next(w->in, e);
        if (s != SL_OK) {
            free(e);
            if (s == SL_END) {
                w->in_ended = true;
                break;
            }
            return s; /* the input's error; the buffer stays */
        }
        if (!w->planned) { /* the buffer, and the stacked window, of elements like this one */
            w->planned = true;
            if ((s = sl__buffer_fits(it, "window buffer", d->span + d->size, sl__element_owned_bytes(e),
                                     "a smaller window size or stride, or smaller elements"))) {
                sl_element_clear(e);
                free(e);
                return s;
            }
        }
        sl__stats_buffered_bytes(it->ctx, it->stats, (long long)sl__element_bytes(e));
        w->buf[w->n++] = e;
        atomic_store_explicit(&it->stats->buffered, (int)w->n, memory_order_relaxed);
    }
    if (w->n == 0 || (d->drop && w->n < d->span)) {
        drop_front(w, w->n);
        return SL_END;
    }
    int64_t k = 1 + (w->n - 1) / d->stride;
    if (!w->rows && !(w->rows = malloc((size_t)d->size * sizeof *w->rows)))
        return sl__op_err(it, SL_ENOMEM, "out of memory gathering a window of %lld", (long long)d->size);
    for (int64_t i = 0; i < k; i++) w->rows[i] = *w->buf[i * d->stride];
    sl_batch_opts o = sl_batch_opts_default(k);
    sl_status s = sl__stack(w->rows, (int)k, &o, it->ds->label, out);
    if (d->shift >= w->n) {
        w->skip = d->shift - w->n;
        drop_front(w, w->n);
    } else {
        drop_front(w, d->shift);
    }
    return s;
}

static void win_close(sl_iter *it) {
    win_it *w = (win_it *)it;
    if (w->buf) drop_front(w, w->n);
    free(w->buf);
    free(w->rows);
    sl__iter_close(w->in);
}

static const sl_iter_vt win_it_vt = {.next = win_next, .close = win_close};

static sl_status win_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    win_it *w = sl__iter_new(sizeof *w, &win_it_vt, ds, ctx, seed);
    if (!w) return SL_ENOMEM;
    int64_t at; /* window k starts at input element k * shift */
    if (__builtin_mul_overflow(w->base.start, ((win_ds *)ds)->shift, &at)) at = INT64_MAX;
    sl_status s = sl__iter_input_at(ds, 0, ctx, seed, 0, at, &w->in);
    if (s) {
        sl__iter_close(&w->base);
        return s;
    }
    *out = &w->base;
    return SL_OK;
}

static int64_t win_card(const sl_dataset *ds) {
    const win_ds *d = (const win_ds *)ds;
    int64_t n = sl_dataset_cardinality(ds->inputs[0]);
    if (n < 0) return n;
    if (d->drop) return n < d->span ? 0 : (n - d->span) / d->shift + 1;
    return n / d->shift + (n % d->shift != 0);
}

static const sl_ds_vt win_vt = {.name = "window", .seek = true, .make_iter = win_make, .cardinality = win_card};

sl_status sl_ds_window(sl_dataset *in, int64_t size, int64_t shift, int64_t stride, bool drop_remainder,
                       sl_dataset **out) {
    *out = NULL;
    if (size < 1 || size > (1 << 24))
        return sl_err(SL_EINVAL, "window: size %lld must be 1..16777216", (long long)size);
    if (shift == 0) shift = size; /* tf.data's shift=None */
    if (shift < 1) return sl_err(SL_EINVAL, "window: shift %lld must be >= 1 (0: the size)", (long long)shift);
    if (stride < 1) return sl_err(SL_EINVAL, "window: stride %lld must be >= 1", (long long)stride);
    int64_t span;
    if (__builtin_mul_overflow(size - 1, stride, &span) || span >= (1 << 30)) {
        sl_err(SL_ERANGE, "window: size %lld x stride %lld spans more than 2^30 input elements", (long long)size,
               (long long)stride);
        sl_err_hint("a window buffers (size-1)*stride+1 elements: use a smaller size or stride");
        return SL_ERANGE;
    }
    win_ds *d = sl__ds_new(sizeof *d, &win_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    d->size = size;
    d->shift = shift;
    d->stride = stride;
    d->span = span + 1;
    d->drop = drop_remainder;
    sl__ds_param(&d->base, (uint64_t)size);
    sl__ds_param(&d->base, (uint64_t)shift);
    sl__ds_param(&d->base, (uint64_t)stride);
    sl__ds_param(&d->base, drop_remainder);
    *out = &d->base;
    return SL_OK;
}
