/* prefetch: a background thread pulls elements from the input into a bounded queue so the
 * consumer (the trainer, usually) finds the next batch ready. Errors are queued in order
 * like elements, so the consumer sees exactly the input's stream.
 *
 * The capacity (SL_AUTO: starts at 2, then the tuner's choice) lives in stats.buffer and may
 * be changed while running (set_buffer); the queue is a linked list so changing
 * it never moves queued elements. Workload: batches of KBs to tens of MBs, a few in the
 * queue. Stats: the producer's time inside the input is "waiting on input", its time on a
 * full queue "blocked on output"; the consumer's time on an empty queue is the stall.
 *
 * Locking: `mu` guards the queue, its counters, `done` and `cancelled`. The producer never
 * holds mu while calling the input. */
#include <errno.h>
#include <stdlib.h>

#include "pipeline/internal.h"
#include "sluice/pool.h"

typedef struct {
    sl_dataset base;
    int64_t buffer; /* SL_AUTO or >= 1 */
} pf_ds;

typedef struct qnode {
    struct qnode *next;
    sl_status status;
    sl_error err; /* when status < 0 */
    long long bytes; /* counted as buffered while queued */
    sl_element e;
} qnode;

typedef struct {
    sl_iter base;
    sl_iter *in;            /* used by the producer thread only (and closed after join) */
    pthread_mutex_t mu;
    pthread_cond_t cv_item; /* an item was queued, or the producer stopped */
    pthread_cond_t cv_room; /* an item was taken, capacity grew, or cancel */
    qnode *head, *tail;     /* guarded by mu */
    int count;              /* guarded by mu */
    int cap;                /* guarded by mu */
    bool done;              /* the producer stopped (END or cancellation); guarded by mu */
    bool cancelled;         /* guarded by mu */
    bool started;           /* the thread exists */
    pthread_t thread;
    sl__cancel_hook hook;   /* wakes both sides when the pipeline is closed */
} pf_it;

static void pf_wake(void *arg) {
    pf_it *p = arg;
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv_room);
    pthread_cond_broadcast(&p->cv_item);
    pthread_mutex_unlock(&p->mu);
}

#define PF_AUTO_BUFFER 2

static void *producer(void *arg) {
    pf_it *p = arg;
    sl_op_stats *st = p->base.stats;
    sl__trace_thread_name("%s producer", p->base.node->label);
    for (;;) {
        pthread_mutex_lock(&p->mu);
        uint64_t tb = 0;
        for (;;) {
            if (p->cancelled || atomic_load_explicit(&p->base.ctx->cancelled, memory_order_relaxed)) break;
            bool ram = sl__ram_full(&p->base, p->count);
            if (p->count < p->cap && !ram) break;
            if (!tb) tb = sl__now_fast();
            if (ram) sl_cond_wait_ms(&p->cv_room, &p->mu, 5); /* bytes free up elsewhere too */
            else pthread_cond_wait(&p->cv_room, &p->mu);
        }
        bool stop = p->cancelled || atomic_load_explicit(&p->base.ctx->cancelled, memory_order_relaxed);
        pthread_mutex_unlock(&p->mu);
        uint64_t t0 = sl__now_fast();
        if (tb) atomic_fetch_add_explicit(&st->blocked_ns, (long long)(t0 - tb), memory_order_relaxed);
        if (stop) break;

        qnode *n = calloc(1, sizeof *n);
        sl_status s;
        if (!n) {
            s = sl_err(SL_ENOMEM, "op '%s': out of memory queueing an element", p->base.ds->label);
        } else {
            sl_element_init(&n->e);
            s = sl__iter_next(p->in, &n->e);
            if (s == SL_OK) n->bytes = (long long)sl__element_bytes(&n->e);
        }
        atomic_fetch_add_explicit(&st->wait_ns, (long long)(sl__now_fast() - t0), memory_order_relaxed);
        bool last = s == SL_END || s == SL_ECANCELED || !n;
        pthread_mutex_lock(&p->mu);
        if (n && s != SL_END) {
            n->status = s;
            if (s < 0) sl_err_save(&n->err);
            if (p->tail) p->tail->next = n;
            else p->head = n;
            p->tail = n;
            p->count++;
            atomic_store(&p->base.stats->buffered, p->count);
            if (n->bytes) sl__stats_buffered_bytes(p->base.ctx, st, n->bytes);
        } else {
            free(n);
        }
        if (last) p->done = true;
        pthread_cond_broadcast(&p->cv_item);
        pthread_mutex_unlock(&p->mu);
        if (last) break;
    }
    pthread_mutex_lock(&p->mu);
    p->done = true;
    pthread_cond_broadcast(&p->cv_item);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static sl_status pf_next(sl_iter *it, sl_element *out) {
    pf_it *p = (pf_it *)it;
    uint64_t t0 = 0;
    pthread_mutex_lock(&p->mu);
    if (!p->head && !p->done) {
        t0 = sl__now_fast();
        atomic_fetch_add_explicit(&it->stats->empty_hits, 1, memory_order_relaxed);
    }
    while (!p->head && !p->done) {
        if (atomic_load_explicit(&it->ctx->cancelled, memory_order_relaxed)) break;
        /* timed, so a close of the whole pipeline from another thread is noticed */
        sl_cond_wait_ms(&p->cv_item, &p->mu, sl__poll_ms);
    }
    qnode *n = p->head;
    if (n) {
        p->head = n->next;
        if (!p->head) p->tail = NULL;
        p->count--;
        atomic_store(&it->stats->buffered, p->count);
        pthread_cond_signal(&p->cv_room);
    }
    bool done = p->done;
    pthread_mutex_unlock(&p->mu);
    if (n && n->bytes) sl__stats_buffered_bytes(it->ctx, it->stats, -n->bytes);
    if (t0) sl__stats_waited(sl__now_fast() - t0);
    if (!n) {
        if (done) return SL_END;
        return sl__op_err(it, SL_ECANCELED, "iterator was closed");
    }
    sl_status s = n->status;
    if (s >= 0) sl_element_move(out, &n->e);
    else sl_err_restore(&n->err);
    free(n);
    return s;
}

/* Change the queue's capacity (>= 1) while running: for autotune. `it` must be a prefetch
 * iterator. */
static void set_buffer(sl_iter *it, int buffer) {
    pf_it *p = (pf_it *)it;
    if (buffer < 1) buffer = 1;
    pthread_mutex_lock(&p->mu);
    p->cap = buffer;
    atomic_store(&it->stats->buffer, buffer);
    pthread_cond_broadcast(&p->cv_room);
    pthread_mutex_unlock(&p->mu);
}

static void pf_set_buf(sl_iter *it, int b) { set_buffer(it, b); }
static const sl_tune_ops pf_tune = {.set_buffer = pf_set_buf};

static void pf_close(sl_iter *it) {
    pf_it *p = (pf_it *)it;
    sl__cancel_unregister(it->ctx, &p->hook);
    sl__tune_detach(it);
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->cancelled = true;
        pthread_cond_broadcast(&p->cv_room);
        pthread_cond_broadcast(&p->cv_item);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    for (qnode *n = p->head, *nx; n; n = nx) {
        nx = n->next;
        if (n->bytes) sl__stats_buffered_bytes(it->ctx, it->stats, -n->bytes);
        sl_element_clear(&n->e);
        free(n);
    }
    sl__iter_close(p->in);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_item);
    pthread_cond_destroy(&p->cv_room);
}

static const sl_iter_vt pf_it_vt = {.next = pf_next, .close = pf_close};

static sl_status pf_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    const pf_ds *d = (const pf_ds *)ds;
    pf_it *p = sl__iter_new(sizeof *p, &pf_it_vt, ds, ctx, seed);
    if (!p) return SL_ENOMEM;
    pthread_mutex_init(&p->mu, NULL);
    sl_cond_init_mono(&p->cv_item);
    sl_cond_init_mono(&p->cv_room);
    sl__cancel_register(ctx, &p->hook, pf_wake, p);
    p->cap = d->buffer == SL_AUTO ? PF_AUTO_BUFFER : (int)d->buffer;
    if (d->buffer == SL_AUTO && atomic_load(&p->base.stats->buffer) > 0)
        p->cap = atomic_load(&p->base.stats->buffer); /* where the tuner left it (a later epoch) */
    atomic_store(&p->base.stats->buffer, p->cap);
    sl_status s = sl__iter_input_at(ds, 0, ctx, seed, 0, p->base.start, &p->in);
    if (s) {
        sl__iter_close(&p->base);
        return s;
    }
    atomic_store(&p->base.node->auto_buf, d->buffer == SL_AUTO); /* before the producer runs */
    if (pthread_create(&p->thread, NULL, producer, p) != 0) {
        sl__iter_close(&p->base);
        return sl_err(SL_EIO, "op '%s': could not start the prefetch thread", ds->label);
    }
    p->started = true;
    sl__tune_attach(&p->base, false, d->buffer == SL_AUTO, 1, &pf_tune);
    *out = &p->base;
    return SL_OK;
}

static int64_t pf_card(const sl_dataset *ds) { return sl_dataset_cardinality(ds->inputs[0]); }

static const sl_ds_vt pf_vt = {.name = "prefetch", .seek = true, .make_iter = pf_make, .cardinality = pf_card};

sl_status sl_ds_prefetch(sl_dataset *in, int64_t buffer, sl_dataset **out) {
    *out = NULL;
    if (buffer != SL_AUTO && (buffer < 1 || buffer > (1 << 20)))
        return sl_err(SL_EINVAL, "prefetch: buffer %lld must be 1..%d or auto", (long long)buffer, 1 << 20);
    pf_ds *d = sl__ds_new(sizeof *d, &pf_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    d->buffer = buffer;
    *out = &d->base;
    return SL_OK;
}
