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
 * The buffer is packed: an sl_element is 2.6 KB (room for 16 components) of which a record
 * uses a few lines, so a buffer of sl_elements is tens of MB and each random pick missed
 * the cache on several scattered lines. A buffered element of up to PACK_N components whose
 * names are in the iterator's small name table keeps only its tensors, name indices and
 * origin (a quarter KB, the lines adjacent); any other element is kept whole on the heap. */
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    int64_t buffer;
    uint64_t seed;
    bool reshuffle;
} sh_ds;

#define PACK_N 2
#define NAMES_MAX 32

typedef struct {
    sl_origin origin;
    int n;                  /* components; -1: `big` holds the element */
    uint8_t name[PACK_N];   /* indices into the iterator's names */
    union {
        sl_tensor t[PACK_N];
        sl_element *big;
    } u;
} packed;

typedef struct {
    sl_iter base;
    sl_iter *in;
    packed *buf; /* count live elements, allocated up to cap */
    int64_t count, cap;
    bool in_ended;
    sl_rng rng;
    int nnames;                           /* the names packed elements use */
    char names[NAMES_MAX][SL_NAME_MAX];
} sh_it;

/* Index of `name` in the table (added when new), or -1 when the table is full. */
static int name_index(sh_it *h, const char *name) {
    for (int i = 0; i < h->nnames; i++)
        if (strcmp(h->names[i], name) == 0) return i;
    if (h->nnames == NAMES_MAX) return -1;
    memcpy(h->names[h->nnames], name, SL_NAME_MAX);
    return h->nnames++;
}

/* Take e (left empty) into *p. SL_ENOMEM (e untouched) only for an element kept whole. */
static sl_status pack(sh_it *h, sl_element *e, packed *p) {
    int idx[PACK_N];
    bool fits = e->n <= PACK_N;
    for (int i = 0; fits && i < e->n; i++) fits = (idx[i] = name_index(h, e->names[i])) >= 0;
    p->origin = e->origin;
    if (!fits) {
        sl_element *big = malloc(sizeof *big);
        if (!big) return sl__op_err(&h->base, SL_ENOMEM, "out of memory buffering an element");
        sl_element_move(big, e);
        p->n = -1;
        p->u.big = big;
        return SL_OK;
    }
    p->n = e->n;
    for (int i = 0; i < e->n; i++) {
        p->name[i] = (uint8_t)idx[i];
        p->u.t[i] = e->t[i];
    }
    e->n = 0;
    e->origin = (sl_origin){0};
    return SL_OK;
}

/* *out (empty) takes the element p holds. */
static void unpack(const sh_it *h, const packed *p, sl_element *out) {
    if (p->n < 0) {
        sl_element_move(out, p->u.big);
        free(p->u.big);
        return;
    }
    out->n = p->n;
    for (int i = 0; i < p->n; i++) {
        memcpy(out->names[i], h->names[p->name[i]], SL_NAME_MAX);
        out->t[i] = p->u.t[i];
    }
    out->origin = p->origin;
}

static size_t packed_bytes(const packed *p) {
    return p->n < 0 ? sl__element_bytes(p->u.big) : sl__tensors_bytes(p->u.t, p->n);
}

static void packed_clear(packed *p) {
    if (p->n < 0) {
        sl_element_clear(p->u.big);
        free(p->u.big);
    } else {
        for (int i = 0; i < p->n; i++) sl_tensor_release(&p->u.t[i]);
    }
    p->n = 0;
}

static sl_status sh_next(sl_iter *it, sl_element *out) {
    sh_it *h = (sh_it *)it;
    const sh_ds *d = (const sh_ds *)it->ds;
    while (!h->in_ended && h->count < d->buffer) {
        if (h->count == h->cap) {
            int64_t ncap = h->cap ? h->cap * 2 : 64;
            if (ncap > d->buffer) ncap = d->buffer;
            packed *nb = realloc(h->buf, (size_t)ncap * sizeof *nb);
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
        packed *slot = &h->buf[h->count];
        if ((s = pack(h, &e, slot))) {
            sl_element_clear(&e);
            return s;
        }
        h->count++;
        sl__stats_buffered_bytes(it->ctx, it->stats, (long long)packed_bytes(slot));
    }
    if (h->count == 0) return SL_END;
    int64_t k = (int64_t)sl__rng_below(&h->rng, (uint64_t)h->count);
    sl__stats_buffered_bytes(it->ctx, it->stats, -(long long)packed_bytes(&h->buf[k]));
    unpack(h, &h->buf[k], out);
    h->count--;
    if (k != h->count) h->buf[k] = h->buf[h->count];
    atomic_store_explicit(&it->stats->buffered, (int)h->count, memory_order_relaxed);
    return SL_OK;
}

static void sh_close(sl_iter *it) {
    sh_it *h = (sh_it *)it;
    for (int64_t i = 0; i < h->count; i++) {
        sl__stats_buffered_bytes(it->ctx, it->stats, -(long long)packed_bytes(&h->buf[i]));
        packed_clear(&h->buf[i]);
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
