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
 * tensors, name indices and origin, a quarter KB instead of 2.6 KB. */
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

static sl_status sh_next(sl_iter *it, sl_element *out) {
    sh_it *h = (sh_it *)it;
    const sh_ds *d = (const sh_ds *)it->ds;
    while (!h->in_ended && h->count < d->buffer) {
        if (h->count == h->cap) {
            int64_t ncap = h->cap ? h->cap * 2 : 64;
            if (ncap > d->buffer) ncap = d->buffer;
            sl__packed *nb = realloc(h->buf, (size_t)ncap * sizeof *nb);
            if (!nb) return sl__op_err(it, SL_ENOMEM, "out of memory growing the buffer to %lld elements",
                                       (long long)ncap);
            h->buf = nb;
            h->cap = ncap;
        }
        sl_element e;
        sl_element_init(&e);
        sl_status s = sl__iter_next(h->in, &e);
        if (s == SL_END) {
            h->in_ended = true;
            break;
        }
        if (s < 0) return s; /* the input's error, unchanged; the buffer stays */
        if (!h->planned) { /* `buffer` elements like the first one (fewer when the input has fewer) */
            h->planned = true;
            int64_t n = d->buffer, card = sl_dataset_cardinality(it->ds->inputs[0]);
            if (card >= 0 && card < n) n = card;
            sl_status ps = sl__buffer_fits(it, "shuffle buffer", n, sl__element_owned_bytes(&e),
                                           "a smaller `shuffle N` (shuffling the file order as well mixes nearly as "
                                           "much: list_files shuffle, interleave), or elements that are views of "
                                           "the records (decode later, after the shuffle)");
            if (ps) {
                sl_element_clear(&e);
                return ps;
            }
        }
        sl__packed *slot = &h->buf[h->count];
        if (!sl__pack(&h->names, &e, slot)) {
            sl_element_clear(&e);
            return sl__op_err(it, SL_ENOMEM, "out of memory buffering an element");
        }
        h->count++;
        sl__stats_buffered_bytes(it->ctx, it->stats, (long long)sl__packed_bytes(slot));
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

static sl_status sh_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    const sh_ds *d = (const sh_ds *)ds;
    sh_it *h = sl__iter_new(sizeof *h, &sh_it_vt, ds, ctx, seed);
    if (!h) return SL_ENOMEM;
    h->rng.s = sl__mix(d->seed, d->reshuffle ? seed : 0);
    atomic_store(&h->base.stats->buffer, d->buffer > 0x7fffffff ? 0x7fffffff : (int)d->buffer);
    sl_status s = sl__iter_input(ds, 0, ctx, seed, 0, &h->in);
    if (s) {
        sl__iter_close(&h->base);
        return s;
    }
    *out = &h->base;
    return SL_OK;
}

static int64_t sh_card(const sl_dataset *ds) { return sl_dataset_cardinality(ds->inputs[0]); }

static const sl_ds_vt sh_vt = {.name = "shuffle", .make_iter = sh_make, .cardinality = sh_card};

sl_status sl_ds_shuffle(sl_dataset *in, int64_t buffer, uint64_t seed, bool reshuffle_each_epoch,
                        sl_dataset **out) {
    *out = NULL;
    if (buffer < 1) return sl_err(SL_EINVAL, "shuffle: buffer %lld must be >= 1", (long long)buffer);
    sh_ds *d = sl__ds_new(sizeof *d, &sh_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    d->buffer = buffer;
    d->seed = seed;
    d->reshuffle = reshuffle_each_epoch;
    *out = &d->base;
    return SL_OK;
}
