/* shuffle: tf.data's shuffle. Keep a buffer of up to `buffer` elements; each output is a
 * uniformly chosen buffered element, whose place the next input element takes; at the end
 * of the input the rest drain in random order. With buffer >= the input's size the output
 * is a uniformly random permutation.
 *
 * Seed: the generator starts from mix(seed, reshuffle_each_epoch ? stream seed : 0). Under
 * repeat each epoch's iterator has its own stream seed, so reshuffling gives a new order
 * per epoch; without it every epoch (and every run) has the same order.
 *
 * Input errors are returned as they arrive (the buffer is kept and the stream goes on).
 * Workload: buffers of 1k-100k elements (records or parsed examples); the buffer grows as
 * it fills so a large `buffer` over a short input costs nothing. The buffered bytes are
 * counted in the stats (and against the RAM budget autotune works with).
 *
 * The buffer is packed (sl__packed, pipeline/packed.c): a record's element keeps its
 * tensors, name indices and origin, a quarter KB instead of 2.6 KB.
 *
 * Seek (an iterator starting at output S > 0). Over an input that seeks the draws are
 * replayed on input positions alone (an array of the buffered positions, the
 * generator, the fill point: no element is read), which says exactly which input elements
 * are in the buffer at output S and where; those are then read back, sorted, from an input
 * iterator started at each run of them (a gap of up to REREAD_GAP elements is read through
 * rather than restarted), and the input continues at the fill point. So a resumed shuffle
 * reads about its buffer again, not the epoch. (An input of unknown length is taken as
 * endless for the replay, and its length found by probing starts when it turns out
 * shorter.) An input that cannot seek is replayed at this op instead: its elements pass through the buffer and the
 * first S outputs are dropped here, without running the ops above. Elements read to
 * rebuild the buffer, and those dropped, are counted in sl_iter_refilled. Input errors
 * met while rebuilding are returned from the iterator's creation. */
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    int64_t buffer;
    uint64_t seed;
    bool reshuffle;
} sh_ds;

typedef struct {
    sl_iter base;
    sl_iter *in;
    sl__packed *buf; /* count live elements, allocated up to cap */
    int64_t count, cap;
    bool in_ended;
    bool planned; /* the buffer's memory plan was checked (at its first element) */
    sl_rng rng;
    sl__pack_names names; /* the names packed elements use */
} sh_it;

/* Room for n buffered elements (n <= the buffer). */
static sl_status grow(sh_it *h, int64_t n) {
    const sh_ds *d = (const sh_ds *)h->base.ds;
    if (n <= h->cap) return SL_OK;
    int64_t ncap = h->cap ? h->cap * 2 : 64;
    while (ncap < n) ncap *= 2;
    if (ncap > d->buffer) ncap = d->buffer;
    sl__packed *nb = realloc(h->buf, (size_t)ncap * sizeof *nb);
    if (!nb)
        return sl__op_err(&h->base, SL_ENOMEM, "out of memory growing the buffer to %lld elements", (long long)ncap);
    memset(nb + h->cap, 0, (size_t)(ncap - h->cap) * sizeof *nb);
    h->buf = nb;
    h->cap = ncap;
    return SL_OK;
}

/* Put element e (taken) into buffer slot `slot` (< cap); the memory plan is checked at the
 * first element. On failure e is cleared. */
static sl_status put(sh_it *h, int64_t slot, sl_element *e) {
    sl_iter *it = &h->base;
    const sh_ds *d = (const sh_ds *)it->ds;
    if (!h->planned) { /* `buffer` elements like the first one (fewer when the input has fewer) */
        h->planned = true;
        int64_t n = d->buffer, card = sl_dataset_cardinality(it->ds->inputs[0]);
        if (card >= 0 && card < n) n = card;
        sl_status ps = sl__buffer_fits(it, "shuffle buffer", n, sl__element_owned_bytes(e),
                                       "a smaller `shuffle N` (shuffling the file order as well mixes nearly as "
                                       "much: list_files shuffle, interleave), or elements that are views of "
                                       "the records (decode later, after the shuffle)");
        if (ps) {
            sl_element_clear(e);
            return ps;
        }
    }
    if (!sl__pack(&h->names, e, &h->buf[slot])) {
        sl_element_clear(e);
        return sl__op_err(it, SL_ENOMEM, "out of memory buffering an element");
    }
    sl__stats_buffered_bytes(it->ctx, it->stats, (long long)sl__packed_bytes(&h->buf[slot]));
    return SL_OK;
}

static sl_status sh_next(sl_iter *it, sl_element *out) {
    sh_it *h = (sh_it *)it;
    const sh_ds *d = (const sh_ds *)it->ds;
    while (!h->in_ended && h->count < d->buffer) {
        sl_status s = grow(h, h->count + 1);
        if (s) return s;
        sl_element e;
        sl_element_init(&e);
        s = sl__iter_next(h->in, &e);
        if (s == SL_END) {
            h->in_ended = true;
            break;
        }
        if (s < 0) return s; /* the input's error, unchanged; the buffer stays */
        if ((s = put(h, h->count, &e))) return s;
        h->count++;
    }
    if (h->count == 0) return SL_END;
    int64_t k = (int64_t)sl__rng_below(&h->rng, (uint64_t)h->count);
    sl__stats_buffered_bytes(it->ctx, it->stats, -(long long)sl__packed_bytes(&h->buf[k]));
    sl__unpack(&h->names, &h->buf[k], out);
    h->count--;
    if (k != h->count) h->buf[k] = h->buf[h->count];
    atomic_store_explicit(&it->stats->buffered, (int)h->count, memory_order_relaxed);
    return SL_OK;
}

static void sh_close(sl_iter *it) {
    sh_it *h = (sh_it *)it;
    for (int64_t i = 0; i < h->count; i++) {
        sl__stats_buffered_bytes(it->ctx, it->stats, -(long long)sl__packed_bytes(&h->buf[i]));
        sl__packed_clear(&h->buf[i]);
    }
    free(h->buf);
    sl__iter_close(h->in);
}

static const sl_iter_vt sh_it_vt = {.next = sh_next, .close = sh_close};

#define REREAD_GAP 64 /* read through a gap of up to this many unneeded elements */

typedef struct {
    int64_t pos, slot;
} want;

static int by_pos(const void *a, const void *b) {
    int64_t x = ((const want *)a)->pos, y = ((const want *)b)->pos;
    return (x > y) - (x < y);
}

/* Seek by replay at this op: S outputs made and dropped (the input cannot seek, or its
 * length is unknown, so the draws cannot be replayed alone). */
static sl_status seek_replay(sh_it *h, int64_t S) {
    sl_ictx *ctx = h->base.ctx;
    sl_element e;
    sl_element_init(&e);
    for (int64_t j = 0; j < S; j++) {
        sl_status s = sh_next(&h->base, &e);
        if (s == SL_END) return SL_OK;
        if (s) return s;
        sl_element_clear(&e);
        atomic_fetch_add(&ctx->refilled, 1);
    }
    return SL_OK;
}

/* The draws of outputs [0, S) replayed on input positions over an input of `card`
 * elements (SL_INFINITE: endless): pos[0..*count) the positions buffered after them, *pin
 * the next input position to read, *ended whether the input is known to have ended. */
static void simulate(sl_rng *rng, int64_t S, int64_t B, int64_t card, int64_t *pos, int64_t *count, int64_t *pin,
                     bool *ended) {
    int64_t n = 0, p = 0;
    bool end = false;
    for (int64_t j = 0; j < S; j++) {
        while (!end && n < B) {
            if (card >= 0 && p == card) end = true;
            else pos[n++] = p++;
        }
        if (card >= 0 && p == card) end = true;
        if (n == 0) break; /* S is past the end */
        int64_t k = (int64_t)sl__rng_below(rng, (uint64_t)n);
        pos[k] = pos[--n];
    }
    *count = n;
    *pin = p;
    *ended = end;
}

/* Whether the input has an element at position p: 1 yes, 0 no, or an error. */
static sl_status probe(sh_it *h, sl_dataset *ds, uint64_t seed, int64_t p) {
    sl_iter *in;
    sl_status s = sl__iter_input_at(ds, 0, h->base.ctx, seed, 0, p, &in);
    if (s) return s;
    sl_element e;
    sl_element_init(&e);
    s = sl__iter_next(in, &e);
    sl_element_clear(&e);
    sl__iter_close(in);
    return s == SL_OK ? 1 : s == SL_END ? 0 : s;
}

static sl_status ended_early(sh_it *h, int64_t at, int64_t pin) {
    sl__op_err(&h->base, SL_EIO, "rebuilding the buffer at a start: the input ended at element %lld, before "
               "element %lld, which it had when its length was taken", (long long)at, (long long)pin - 1);
    sl_err_hint("the input changed while the iterator was being made (a file shrank?)");
    return SL_EIO;
}

/* Seek by replaying the draws on positions, then reading the buffered elements back. An
 * input of unknown length is taken as endless for the replay; when it has fewer elements
 * than the replay read, its length is found by probing (a binary search of starts) and the
 * draws are replayed again with it. */
static sl_status seek_draws(sh_it *h, sl_dataset *ds, uint64_t seed, int64_t S, int64_t card) {
    const sh_ds *d = (const sh_ds *)ds;
    sl_ictx *ctx = h->base.ctx;
    int64_t B = d->buffer;
    if (card >= 0 && card < B) B = card;
    int64_t *pos = malloc((size_t)(B ? B : 1) * sizeof *pos);
    if (!pos) return sl__op_err(&h->base, SL_ENOMEM, "out of memory replaying the draws of %lld elements", (long long)B);
    int64_t count, pin;
    bool ended;
    sl_rng rng0 = h->rng;
    simulate(&h->rng, S, B, card == SL_UNKNOWN_CARD ? SL_INFINITE : card, pos, &count, &pin, &ended);
    if (card == SL_UNKNOWN_CARD && pin > 0) {
        sl_status s = probe(h, ds, seed, pin - 1);
        if (s == 0) { /* fewer than pin elements: L with element L-1 present and L absent */
            int64_t lo = 0, hi = pin - 1; /* element lo-1 exists (or lo == 0), hi does not */
            while (lo < hi && s >= 0) {
                int64_t mid = lo + (hi - lo) / 2;
                if ((s = probe(h, ds, seed, mid)) == 1) lo = mid + 1;
                else if (s == 0) hi = mid;
            }
            if (s >= 0) {
                h->rng = rng0;
                simulate(&h->rng, S, B, lo, pos, &count, &pin, &ended);
                s = SL_OK;
            }
        }
        if (s < 0) {
            free(pos);
            return s;
        }
    }
    want *w = malloc((size_t)(count ? count : 1) * sizeof *w);
    sl_status s = grow(h, count);
    if (!w && !s) s = sl__op_err(&h->base, SL_ENOMEM, "out of memory sorting %lld positions", (long long)count);
    if (s) {
        free(pos);
        free(w);
        return s;
    }
    for (int64_t i = 0; i < count; i++) w[i] = (want){pos[i], i};
    free(pos);
    qsort(w, (size_t)count, sizeof *w, by_pos);
    /* read them back: `at` is the position of in's next element (-1: no iterator); every
     * slot counts from here (the ones not yet read are zeroed: clearing them is a no-op) */
    h->count = count;
    int64_t at = -1;
    sl_element e;
    sl_element_init(&e);
    for (int64_t i = 0; i <= count && !s; i++) {
        int64_t p = i < count ? w[i].pos : pin; /* the last stop: the fill point */
        if (i == count && ended) break;         /* nothing more to read: no input needed */
        if (at < 0 || p < at || p - at > REREAD_GAP) {
            sl__iter_close(h->in);
            h->in = NULL;
            if ((s = sl__iter_input_at(ds, 0, ctx, seed, 0, p, &h->in))) break;
            at = p;
        }
        while (at < p && !s) { /* read through the gap */
            s = sl__iter_next(h->in, &e);
            if (s == SL_END) s = ended_early(h, at, pin);
            sl_element_clear(&e);
            at++;
            atomic_fetch_add(&ctx->refilled, 1);
        }
        if (s || i == count) break;
        if ((s = sl__iter_next(h->in, &e))) {
            if (s == SL_END) s = ended_early(h, at, pin);
            break;
        }
        at++;
        if ((s = put(h, w[i].slot, &e))) break;
        atomic_fetch_add(&ctx->refilled, 1);
    }
    free(w);
    if (s) { /* nothing half-built is left: the caller may replay instead */
        for (int64_t i = 0; i < h->count; i++) {
            sl__stats_buffered_bytes(ctx, h->base.stats, -(long long)sl__packed_bytes(&h->buf[i]));
            sl__packed_clear(&h->buf[i]);
        }
        h->count = 0;
    }
    h->in_ended = ended;
    if (!s && count) atomic_store_explicit(&h->base.stats->buffered, (int)count, memory_order_relaxed);
    return s;
}

static sl_status sh_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    const sh_ds *d = (const sh_ds *)ds;
    sh_it *h = sl__iter_new(sizeof *h, &sh_it_vt, ds, ctx, seed);
    if (!h) return SL_ENOMEM;
    h->rng.s = sl__mix(d->seed, d->reshuffle ? seed : 0);
    atomic_store(&h->base.stats->buffer, d->buffer > 0x7fffffff ? 0x7fffffff : (int)d->buffer);
    int64_t S = h->base.start, card = sl_dataset_cardinality(ds->inputs[0]);
    sl_status s = SL_OK;
    if (S > 0 && ds->inputs[0]->vt->seek) {
        s = seek_draws(h, ds, seed, S, card);
        if (s == SL_EUNSUPPORTED) { /* an op below refused to seek after all (nothing is buffered) */
            sl_err_clear();
            sl__iter_close(h->in);
            h->in = NULL;
            h->rng.s = sl__mix(d->seed, d->reshuffle ? seed : 0);
            h->in_ended = false;
            s = SL_OK;
        } else if (!s) {
            *out = &h->base;
            return SL_OK;
        }
    }
    if (!s && !h->in) s = sl__iter_input(ds, 0, ctx, seed, 0, &h->in);
    if (!s && S > 0) s = seek_replay(h, S);
    if (s) {
        sl__iter_close(&h->base);
        return s;
    }
    *out = &h->base;
    return SL_OK;
}

static int64_t sh_card(const sl_dataset *ds) { return sl_dataset_cardinality(ds->inputs[0]); }

static const sl_ds_vt sh_vt = {.name = "shuffle", .seek = true, .make_iter = sh_make, .cardinality = sh_card};

sl_status sl_ds_shuffle(sl_dataset *in, int64_t buffer, uint64_t seed, bool reshuffle_each_epoch,
                        sl_dataset **out) {
    *out = NULL;
    if (buffer < 1) return sl_err(SL_EINVAL, "shuffle: buffer %lld must be >= 1", (long long)buffer);
    sh_ds *d = sl__ds_new(sizeof *d, &sh_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    d->buffer = buffer;
    d->seed = seed;
    d->reshuffle = reshuffle_each_epoch;
    sl__ds_param(&d->base, (uint64_t)buffer);
    sl__ds_param(&d->base, seed);
    sl__ds_param(&d->base, reshuffle_each_epoch);
    *out = &d->base;
    return SL_OK;
}
