/* interleave: tf.data's interleave. Each input element becomes a dataset (through the
 * factory); cycle_length of them are open at once and block_length consecutive elements are
 * taken from each in turn. cycle 2, block 1 over [a1 a2 a3] and [b1 b2] gives a1 b1 a2 b2 a3.
 *
 * Workload: reading many TFRecord shards at once (cycle 4-64), so one slow file or disk
 * does not stall the stream, with records of bytes to MBs.
 *
 * Order (identical for every parallelism with deterministic = true): a cursor walks the
 * cycle positions. At an open input it takes the input's next element (block_length of
 * them, then it moves on); at an input's end it closes that input, moves on, and refills
 * the position at once with the next input element. Refilling at once (rather than when
 * the cursor comes back, as tf.data does) gives the same assignment of inputs to positions
 * and so the same output, and lets the workers start reading the new input early. An error
 * making an input (from the input stream, the factory or opening) is kept at its position
 * and returned when the cursor arrives there; the position is refilled on the next call.
 * An error from an open input is returned in order and that input goes on (the cursor does
 * not move: the error is not one of the block's elements). Input element k's iterator gets
 * stream seed child_seed(stream seed, k + 1).
 *
 * parallelism 0: everything in the caller's thread. parallelism >= 1 (SL_AUTO: threads for
 * the CPU budget, at most cycle_length, of which the tuner keeps P active): worker threads,
 * active thread t serving positions t, t+P, ...,
 * each keep a small ring of results per open position filled ahead; the consumer takes
 * from the cursor's ring (deterministic), or with deterministic = false from the first ring
 * at or after the cursor that has a result ready (tf.data's "sloppy" interleave). The
 * hand-off is per run of records, not per record: the consumer takes the ready rest of a
 * block under one lock, and a worker whose rings are all full sleeps until one of them has
 * drained to half.
 *
 * Seek (an iterator starting at element S > 0, deterministic order only): the input
 * elements are read and turned into datasets as the cursor would meet them, and the cursor
 * walk is replayed on their lengths alone (sl__ds_count: a TFRecord file's length from its
 * record index), a block at a time, until S elements are accounted for; then each open
 * position's input is made at the element it had reached (sl__iter_make_at: it must seek,
 * as TFRecord files do through their indexes). No record is read before S. An input whose
 * length cannot be known, an error on the way (making an input, reading the input
 * stream), or deterministic = false with parallelism: SL_EUNSUPPORTED, and the stream is
 * replayed (by the op above that seeks, or from the start).
 *
 * Locking: `mu` guards every slot's ring, `it`, `in_done`, `busy`, `want`, `active`,
 * `nbuffered` and `cancelled`.
 * Only the consumer opens and closes slot inputs, and only while no worker is using them
 * (`busy` false, `in_done` true or not yet handed out). Workers call their input without
 * the lock. */
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"
#include "sluice/pool.h"

typedef struct {
    sl_dataset base;
    sl_ds_factory factory;
    void *fctx;
    void (*fctx_free)(void *); /* owned fctx (sl__ds_interleave_own), else NULL */
    sl_interleave_opts o;
} il_ds;

typedef struct {
    sl_status status; /* SL_OK, SL_END or an error */
    sl_error err;
    long long bytes;  /* counted as buffered while in the ring */
    sl_element e;
} il_item;

typedef struct {
    sl_iter *it;        /* the open input, or NULL */
    int64_t index;      /* its input element index */
    bool in_done;       /* a worker got END or SL_ECANCELED from it: no more calls */
    bool busy;          /* a worker is inside it->next */
    il_item *ring;      /* parallel mode: rcap results */
    int head, count;
    bool pending;       /* consumer only: an error making this position's input waits here */
    sl_error pend_err;
} il_slot;

typedef struct il_it il_it;

typedef struct {
    il_it *il;
    int t;
} il_warg;

struct il_it {
    sl_iter base;
    sl_iter *in;           /* the input elements; consumer only */
    int cycle, block;
    bool parallel, deterministic;
    il_slot *slots;
    int rcap;
    /* consumer state */
    int cursor, block_idx, num_open, num_pending;
    bool in_ended;
    int64_t next_index;
    il_item *got;          /* parallel: results taken from the cursor's ring, not yet returned */
    int gothead, ngot;
    /* workers */
    pthread_mutex_t mu;
    pthread_cond_t cv_item; /* a result was added, or a worker stopped */
    pthread_cond_t cv_work; /* room in a ring, a new input, or cancel */
    pthread_cond_t cv_idle; /* for workers beyond `active`: parallelism changed, or cancel */
    bool cancelled;         /* guarded by mu */
    sl__cancel_hook hook;   /* wakes the consumer and the workers when the pipeline is closed */
    int want;               /* the slot the consumer waits on, or -1; guarded by mu */
    int active;             /* workers serving positions now (<= nthreads); guarded by mu */
    int nbuffered;          /* results in all rings; guarded by mu */
    int nthreads;
    pthread_t *threads;
    il_warg *wargs;
};

static void il_wake(void *arg) {
    il_it *il = arg;
    pthread_mutex_lock(&il->mu);
    pthread_cond_broadcast(&il->cv_item);
    pthread_cond_broadcast(&il->cv_work);
    pthread_cond_broadcast(&il->cv_idle);
    pthread_mutex_unlock(&il->mu);
}

/* ---- workers ---- */

static bool eligible_locked(const il_it *il, const il_slot *s) {
    return s->it && !s->in_done && !s->busy && s->count < il->rcap;
}

static void *il_worker(void *arg) {
    il_warg *wa = arg;
    il_it *il = wa->il;
    sl_op_stats *st = il->base.stats;
    sl__trace_thread_name("%s worker %d", il->base.node->label, wa->t + 1);
    pthread_mutex_lock(&il->mu);
    while (!il->cancelled) {
        /* the position the consumer waits on first, then the emptiest ring */
        int pick = -1, P = il->active;
        if (wa->t >= P) { /* not active now: sleep apart until the tuner says otherwise */
            pthread_cond_wait(&il->cv_idle, &il->mu);
            continue;
        }
        if (il->want >= 0 && il->want % P == wa->t && eligible_locked(il, &il->slots[il->want]))
            pick = il->want;
        bool full = false;
        if (pick < 0) {
            int best = il->rcap;
            for (int j = wa->t; j < il->cycle; j += P) {
                il_slot *c = &il->slots[j];
                if (c->it && !c->in_done && c->count >= il->rcap) full = true;
                if (eligible_locked(il, c) && c->count < best) {
                    best = c->count;
                    pick = j;
                }
            }
        }
        if (pick < 0) {
            uint64_t tb = full ? sl__now_fast() : 0;
            pthread_cond_wait(&il->cv_work, &il->mu);
            if (tb) atomic_fetch_add_explicit(&st->blocked_ns, (long long)(sl__now_fast() - tb), memory_order_relaxed);
            continue;
        }
        il_slot *s = &il->slots[pick];
        s->busy = true;
        sl_iter *sub = s->it;
        pthread_mutex_unlock(&il->mu);

        sl_element e;
        sl_element_init(&e);
        uint64_t t0 = sl__now_fast();
        sl_status rs = sl__iter_next(sub, &e);
        atomic_fetch_add_explicit(&st->wait_ns, (long long)(sl__now_fast() - t0), memory_order_relaxed);
        sl_error err;
        if (rs < 0) sl_err_save(&err);
        long long bytes = rs == SL_OK ? (long long)sl__element_bytes(&e) : 0;
        if (bytes) sl__stats_buffered_bytes(il->base.ctx, st, bytes);

        pthread_mutex_lock(&il->mu);
        il_item *item = &s->ring[(s->head + s->count) % il->rcap];
        item->status = rs;
        item->bytes = bytes;
        if (rs < 0) item->err = err;
        sl_element_move(&item->e, &e);
        s->count++;
        il->nbuffered++;
        atomic_store_explicit(&st->buffered, il->nbuffered, memory_order_relaxed);
        s->busy = false;
        if (rs == SL_END || rs == SL_ECANCELED) s->in_done = true;
        pthread_cond_broadcast(&il->cv_item);
    }
    pthread_mutex_unlock(&il->mu);
    return NULL;
}

/* ---- consumer ---- */

static void advance(il_it *il) {
    il->cursor = (il->cursor + 1) % il->cycle;
    il->block_idx = 0;
}

static void set_pending(il_it *il, il_slot *s) {
    sl__op_err_prefix(&il->base);
    sl_err_save(&s->pend_err);
    s->pending = true;
    il->num_pending++;
}

/* Give position j (empty, nothing pending) the next input element's dataset, if any. */
static void open_slot(il_it *il, int j) {
    il_slot *s = &il->slots[j];
    const il_ds *d = (const il_ds *)il->base.ds;
    if (il->in_ended) return;
    sl_element e;
    sl_element_init(&e);
    sl_status st = sl__iter_next(il->in, &e);
    if (st == SL_END) {
        il->in_ended = true;
        return;
    }
    int64_t index = il->next_index++;
    if (st < 0) { /* the input's error, unchanged: no prefix */
        sl_err_save(&s->pend_err);
        s->pending = true;
        il->num_pending++;
        return;
    }
    sl_dataset *ds = NULL;
    st = d->factory(d->fctx, &e, &ds);
    sl_element_clear(&e);
    if (st < 0 || !ds) {
        if (st >= 0) sl_err(SL_EINTERNAL, "the factory returned no dataset for input element %lld",
                            (long long)index);
        set_pending(il, s);
        return;
    }
    sl_iter *sub;
    st = sl__iter_make(&il->base, ds, sl__child_seed(il->base.seed, (uint64_t)index + 1), &sub);
    sl_dataset_unref(ds);
    if (st) {
        set_pending(il, s);
        return;
    }
    il->num_open++;
    if (!il->parallel) {
        s->it = sub;
        s->index = index;
        return;
    }
    pthread_mutex_lock(&il->mu);
    s->it = sub;
    s->index = index;
    s->in_done = false;
    pthread_cond_broadcast(&il->cv_work);
    pthread_mutex_unlock(&il->mu);
}

/* Close position j's input after its end (no worker uses it any more). */
static void close_slot(il_it *il, int j) {
    il_slot *s = &il->slots[j];
    sl_iter *sub;
    if (il->parallel) pthread_mutex_lock(&il->mu);
    sub = s->it;
    s->it = NULL;
    s->in_done = false;
    if (il->parallel) pthread_mutex_unlock(&il->mu);
    sl__iter_close(sub);
    il->num_open--;
}

/* Pop the oldest result of slot s (its error, if any, stays in out->err). mu held. */
static void pop_locked(il_it *il, il_slot *s, il_item *out) {
    il_item *item = &s->ring[s->head];
    out->status = item->status;
    if (item->status < 0) out->err = item->err;
    sl_element_move(&out->e, &item->e);
    out->bytes = item->bytes;
    item->bytes = 0;
    s->head = (s->head + 1) % il->rcap;
    s->count--;
    il->nbuffered--;
    atomic_store_explicit(&il->base.stats->buffered, il->nbuffered, memory_order_relaxed);
    /* a worker only sleeps while every ring it serves is full (or has no open input), so
     * it is woken when this one has drained to half: it then refills it in one run instead
     * of one record per wake-up (waking it at rcap - 1 cost a futex call and a context
     * switch per record) */
    if (s->count == il->rcap / 2) pthread_cond_broadcast(&il->cv_work);
}

/* Wait until position j's ring holds results, then move the ready ones into `got`: the rest
 * of the block (deterministic), else one; an error or the input's end is the last one
 * moved. SL_OK, or SL_ECANCELED (and *closed) when the pipeline was closed meanwhile. */
static sl_status fill_got(il_it *il, int j, bool *closed) {
    il_slot *s = &il->slots[j];
    uint64_t t0 = 0;
    pthread_mutex_lock(&il->mu);
    if (s->count == 0) {
        t0 = sl__now_fast();
        atomic_fetch_add_explicit(&il->base.stats->empty_hits, 1, memory_order_relaxed);
    }
    while (s->count == 0) {
        if (atomic_load_explicit(&il->base.ctx->cancelled, memory_order_relaxed)) {
            il->want = -1;
            pthread_mutex_unlock(&il->mu);
            *closed = true;
            if (t0) sl__stats_waited(sl__now_fast() - t0);
            return sl__op_err(&il->base, SL_ECANCELED, "iterator was closed");
        }
        il->want = j;
        pthread_cond_broadcast(&il->cv_work);
        sl_cond_wait_ms(&il->cv_item, &il->mu, sl__poll_ms);
    }
    il->want = -1;
    int max = il->deterministic ? il->block - il->block_idx : 1;
    long long bytes = 0;
    il->gothead = 0;
    while (il->ngot < max && s->count > 0) {
        il_item *item = &il->got[il->ngot++];
        sl_element_init(&item->e);
        pop_locked(il, s, item);
        bytes += item->bytes;
        if (item->status != SL_OK) break;
    }
    pthread_mutex_unlock(&il->mu);
    if (bytes) sl__stats_buffered_bytes(il->base.ctx, il->base.stats, -bytes);
    if (t0) sl__stats_waited(sl__now_fast() - t0);
    return SL_OK;
}

/* The next result from position j's input: directly, or from its ring (waiting). *closed
 * is set when the pipeline was closed while waiting: the result is then not the input's
 * (a worker may still be inside it). The results fill_got took under one lock are returned
 * first, without the lock; the cursor cannot leave the position before they are all
 * returned (a block ends with its last element, and an error or the input's end is the
 * last result taken). */
static sl_status take(il_it *il, int j, sl_element *out, bool *closed) {
    *closed = false;
    if (!il->parallel) return sl__iter_next(il->slots[j].it, out);
    if (il->ngot == 0) {
        sl_status st = fill_got(il, j, closed);
        if (st) return st;
    }
    il_item *item = &il->got[il->gothead++];
    il->ngot--;
    if (item->status < 0) sl_err_restore(&item->err);
    if (item->status == SL_OK) sl_element_move(out, &item->e);
    return item->status;
}

/* Non-deterministic: the first position at or after the cursor with something to return
 * now (a pending error or a result in its ring); -1 if none. */
static int ready_slot(il_it *il) {
    int found = -1;
    pthread_mutex_lock(&il->mu);
    for (int k = 0; k < il->cycle && found < 0; k++) {
        int j = (il->cursor + k) % il->cycle;
        il_slot *s = &il->slots[j];
        if (s->pending || (s->it && s->count > 0) || (!s->it && !il->in_ended)) found = j;
    }
    if (found < 0 && il->num_open > 0) { /* nothing ready: wait for any result */
        if (!atomic_load_explicit(&il->base.ctx->cancelled, memory_order_relaxed))
            sl_cond_wait_ms(&il->cv_item, &il->mu, sl__poll_ms);
    }
    pthread_mutex_unlock(&il->mu);
    return found;
}

static sl_status il_next(sl_iter *it, sl_element *out) {
    il_it *il = (il_it *)it;
    for (;;) {
        if (il->in_ended && il->num_open == 0 && il->num_pending == 0) return SL_END;
        if (il->parallel && !il->deterministic) {
            int j = ready_slot(il);
            if (j < 0) {
                if (atomic_load_explicit(&it->ctx->cancelled, memory_order_relaxed))
                    return sl__op_err(it, SL_ECANCELED, "iterator was closed");
                continue;
            }
            if (j != il->cursor) {
                il->cursor = j;
                il->block_idx = 0;
            }
        }
        int j = il->cursor;
        il_slot *s = &il->slots[j];
        if (s->pending) {
            s->pending = false;
            il->num_pending--;
            return sl_err_restore(&s->pend_err);
        }
        if (!s->it) {
            if (!il->in_ended) open_slot(il, j);
            else advance(il);
            continue;
        }
        bool closed;
        sl_status st = take(il, j, out, &closed);
        if (closed) return st;
        if (st == SL_OK) {
            if (++il->block_idx >= il->block) advance(il);
            return SL_OK;
        }
        if (st == SL_END || st == SL_ECANCELED) {
            close_slot(il, j);
            if (st == SL_ECANCELED) return st;
            open_slot(il, j);
            advance(il);
            continue;
        }
        return st; /* the input's error, in order; that input goes on */
    }
}

static void il_close(sl_iter *it) {
    il_it *il = (il_it *)it;
    sl__cancel_unregister(it->ctx, &il->hook);
    sl__tune_detach(it);
    if (il->parallel) {
        pthread_mutex_lock(&il->mu);
        il->cancelled = true;
        pthread_cond_broadcast(&il->cv_work);
        pthread_cond_broadcast(&il->cv_idle);
        pthread_cond_broadcast(&il->cv_item);
        pthread_mutex_unlock(&il->mu);
        for (int t = 0; t < il->nthreads; t++) pthread_join(il->threads[t], NULL);
    }
    if (il->slots) {
        for (int j = 0; j < il->cycle; j++) {
            il_slot *s = &il->slots[j];
            sl__iter_close(s->it);
            if (s->ring) {
                for (int k = 0; k < s->count; k++) {
                    il_item *item = &s->ring[(s->head + k) % il->rcap];
                    if (item->bytes) sl__stats_buffered_bytes(it->ctx, it->stats, -item->bytes);
                    sl_element_clear(&item->e);
                }
                free(s->ring);
            }
        }
        free(il->slots);
    }
    if (il->got) {
        for (int k = 0; k < il->ngot; k++) sl_element_clear(&il->got[il->gothead + k].e);
        free(il->got);
    }
    free(il->threads);
    free(il->wargs);
    sl__iter_close(il->in);
    if (il->parallel) {
        pthread_mutex_destroy(&il->mu);
        pthread_cond_destroy(&il->cv_item);
        pthread_cond_destroy(&il->cv_work);
        pthread_cond_destroy(&il->cv_idle);
    }
}

static const sl_iter_vt il_it_vt = {.next = il_next, .close = il_close};

/* The tuner's setter: workers t >= parallelism sleep; positions are dealt over the active. */
static void il_set_par(sl_iter *it, int p) {
    il_it *il = (il_it *)it;
    pthread_mutex_lock(&il->mu);
    if (p < 1) p = 1;
    if (p > il->nthreads) p = il->nthreads;
    il->active = p;
    atomic_store(&it->stats->parallelism, p);
    pthread_cond_broadcast(&il->cv_work);
    pthread_cond_broadcast(&il->cv_idle);
    pthread_mutex_unlock(&il->mu);
}
static const sl_tune_ops il_tune = {.set_parallelism = il_set_par};

/* ---- seek ---- */

typedef struct {
    sl_dataset *ds; /* the position's input, or NULL */
    int64_t index, len, used;
} sim_slot;

static sl_status no_seek(il_it *il, const char *why, int64_t index) {
    return sl__op_err(&il->base, SL_EUNSUPPORTED, "cannot start part-way: %s (input element %lld)", why,
                      (long long)index);
}

/* Position j takes the next input element's dataset (as open_slot, without opening it). */
static sl_status sim_open(il_it *il, sim_slot *sl, int j, int *nopen) {
    const il_ds *d = (const il_ds *)il->base.ds;
    sl_element e;
    sl_element_init(&e);
    sl_status st = sl__iter_next(il->in, &e);
    if (st == SL_END) {
        il->in_ended = true;
        return SL_OK;
    }
    int64_t index = il->next_index++;
    if (st < 0) return no_seek(il, "the input stream gave an error", index);
    sl_dataset *ds = NULL;
    st = d->factory(d->fctx, &e, &ds);
    sl_element_clear(&e);
    if (st < 0 || !ds) return no_seek(il, "making its dataset failed", index);
    int64_t len = sl__ds_count(ds);
    if (len == SL_INFINITE) len = INT64_MAX;
    if (len < 0) {
        sl_dataset_unref(ds);
        return no_seek(il, "its length cannot be known", index);
    }
    sl[j] = (sim_slot){ds, index, len, 0};
    (*nopen)++;
    return SL_OK;
}

/* Replay the cursor over the inputs' lengths up to element S, then open each position's
 * input where it stands. */
static sl_status il_seek(il_it *il, int64_t S) {
    if (il->parallel && !il->deterministic) return no_seek(il, "deterministic is off", 0);
    sim_slot *sl = calloc((size_t)il->cycle, sizeof *sl);
    if (!sl) return sl__op_err(&il->base, SL_ENOMEM, "out of memory");
    int nopen = 0;
    sl_status s = SL_OK;
    for (int j = 0; j < il->cycle && !il->in_ended && !s; j++) s = sim_open(il, sl, j, &nopen);
    int64_t produced = 0;
    while (!s && produced < S && !(il->in_ended && nopen == 0)) {
        int j = il->cursor;
        sim_slot *c = &sl[j];
        if (!c->ds) {
            if (!il->in_ended) s = sim_open(il, sl, j, &nopen);
            else advance(il);
            continue;
        }
        if (c->used < c->len) {
            int64_t n = il->block - il->block_idx;
            if (n > c->len - c->used) n = c->len - c->used;
            if (n > S - produced) n = S - produced;
            c->used += n;
            produced += n;
            il->block_idx += (int)n;
            if (il->block_idx >= il->block) advance(il);
            continue;
        }
        sl_dataset_unref(c->ds); /* its end: closed, the position refilled, the cursor on */
        c->ds = NULL;
        nopen--;
        s = sim_open(il, sl, j, &nopen);
        if (!s) advance(il);
    }
    for (int j = 0; j < il->cycle; j++) {
        if (!sl[j].ds) continue;
        if (!s) {
            sl_iter *sub;
            s = sl__iter_make_at(&il->base, sl[j].ds, sl__child_seed(il->base.seed, (uint64_t)sl[j].index + 1),
                                 sl[j].used, &sub);
            if (!s) {
                il->slots[j].it = sub;
                il->slots[j].index = sl[j].index;
                il->num_open++;
            }
        }
        sl_dataset_unref(sl[j].ds);
    }
    free(sl);
    return s;
}

static sl_status il_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    const il_ds *d = (const il_ds *)ds;
    il_it *il = sl__iter_new(sizeof *il, &il_it_vt, ds, ctx, seed);
    if (!il) return SL_ENOMEM;
    il->cycle = d->o.cycle_length == SL_AUTO ? ctx->ncpu : d->o.cycle_length;
    if (il->cycle < 1) il->cycle = 1;
    il->block = d->o.block_length;
    il->deterministic = d->o.deterministic;
    /* auto: threads for twice the CPU budget (at most the cycle), the budget's worth active */
    int par = d->o.parallelism == SL_AUTO ? 2 * ctx->ncpu : d->o.parallelism;
    if (par > il->cycle) par = il->cycle;
    int active = d->o.parallelism == SL_AUTO && ctx->ncpu < par ? ctx->ncpu : par;
    if (d->o.parallelism == SL_AUTO && atomic_load(&il->base.stats->parallelism) > 0 &&
        atomic_load(&il->base.stats->parallelism) < par)
        active = atomic_load(&il->base.stats->parallelism); /* where the tuner left it */
    il->active = active;
    il->parallel = par > 0;
    if (il->parallel) {
        pthread_mutex_init(&il->mu, NULL);
        sl_cond_init_mono(&il->cv_item);
        sl_cond_init_mono(&il->cv_work);
        sl_cond_init_mono(&il->cv_idle);
        sl__cancel_register(ctx, &il->hook, il_wake, il);
    }
    il->want = -1;
    il->rcap = il->block < 2 ? 2 : il->block > 16 ? 16 : il->block;
    sl_status s;
    if (!(il->slots = calloc((size_t)il->cycle, sizeof *il->slots))) goto nomem;
    if (il->parallel) {
        for (int j = 0; j < il->cycle; j++)
            if (!(il->slots[j].ring = calloc((size_t)il->rcap, sizeof(il_item)))) goto nomem;
        if (!(il->got = calloc((size_t)il->rcap, sizeof *il->got)) ||
            !(il->threads = calloc((size_t)par, sizeof *il->threads)) ||
            !(il->wargs = calloc((size_t)par, sizeof *il->wargs)))
            goto nomem;
    }
    atomic_store(&il->base.stats->parallelism, active);
    atomic_store(&il->base.stats->threads, par);
    atomic_store(&il->base.stats->buffer, il->parallel ? il->rcap * il->cycle : 0);
    s = sl__iter_input(ds, 0, ctx, seed, 0, &il->in);
    if (s) goto fail;
    if (il->base.start > 0) {
        if ((s = il_seek(il, il->base.start))) goto fail;
    } else { /* fill the cycle in position order, as the cursor's first round would */
        for (int j = 0; j < il->cycle && !il->in_ended; j++) open_slot(il, j);
    }
    if (il->parallel) {
        il->nthreads = par;
        for (int t = 0; t < par; t++) {
            il->wargs[t].il = il;
            il->wargs[t].t = t;
            if (pthread_create(&il->threads[t], NULL, il_worker, &il->wargs[t]) != 0) {
                il->nthreads = t;
                s = sl_err(SL_EIO, "op '%s': could not start worker thread %d", ds->label, t + 1);
                goto fail;
            }
        }
    }
    if (il->parallel) sl__tune_attach(&il->base, d->o.parallelism == SL_AUTO, false, par, &il_tune);
    *out = &il->base;
    return SL_OK;
nomem:
    s = sl_err(SL_ENOMEM, "op '%s': out of memory for a cycle of %d", ds->label, il->cycle);
fail:
    sl__iter_close(&il->base);
    return s;
}

static void il_destroy(sl_dataset *ds) {
    il_ds *d = (il_ds *)ds;
    if (d->fctx_free) d->fctx_free(d->fctx);
}

static const sl_ds_vt il_vt = {.name = "interleave", .seek = true, .make_iter = il_make, .destroy = il_destroy};

sl_interleave_opts sl_interleave_opts_default(void) {
    sl_interleave_opts o = {.cycle_length = SL_AUTO, .block_length = 1, .parallelism = SL_AUTO,
                            .deterministic = true};
    return o;
}

static sl_status il_new(sl_dataset *in, sl_ds_factory factory, void *ctx, const sl_interleave_opts *opts,
                        il_ds **out) {
    *out = NULL;
    sl_interleave_opts o = opts ? *opts : sl_interleave_opts_default();
    if (!factory) return sl_err(SL_EINVAL, "interleave: factory is NULL");
    if (o.cycle_length != SL_AUTO && (o.cycle_length < 1 || o.cycle_length > 4096))
        return sl_err(SL_EINVAL, "interleave: cycle_length %d must be 1..4096 or auto", o.cycle_length);
    if (o.block_length < 1)
        return sl_err(SL_EINVAL, "interleave: block_length %d must be >= 1", o.block_length);
    if (o.parallelism != SL_AUTO && (o.parallelism < 0 || o.parallelism > 256))
        return sl_err(SL_EINVAL, "interleave: parallelism %d must be 0..256 or auto", o.parallelism);
    il_ds *d = sl__ds_new(sizeof *d, &il_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    d->factory = factory;
    d->fctx = ctx;
    d->o = o;
    sl__ds_param(&d->base, (uint64_t)o.cycle_length);
    sl__ds_param(&d->base, (uint64_t)o.block_length);
    sl__ds_param(&d->base, o.deterministic);
    *out = d;
    return SL_OK;
}

sl_status sl_ds_interleave(sl_dataset *in, sl_ds_factory factory, void *ctx,
                           const sl_interleave_opts *opts, sl_dataset **out) {
    il_ds *d;
    sl_status s = il_new(in, factory, ctx, opts, &d);
    *out = s ? NULL : &d->base;
    return s;
}

sl_status sl__ds_interleave_own(sl_dataset *in, sl_ds_factory factory, void *ctx,
                                void (*ctx_free)(void *), const sl_interleave_opts *opts,
                                sl_dataset **out) {
    il_ds *d;
    sl_status s = il_new(in, factory, ctx, opts, &d);
    *out = NULL;
    if (s) {
        if (ctx_free) ctx_free(ctx);
        return s;
    }
    d->fctx_free = ctx_free;
    *out = &d->base;
    return SL_OK;
}
