/* The CPU backend's team of worker threads (train/cpu_team.h). A step of a small model is
 * a few dozen parallel ops of tens to hundreds of microseconds each, so what one costs
 * beyond its work matters: on a virtual machine a futex wake or wait is several
 * microseconds, and a worker that has just been woken may not run for longer than its
 * part takes. So
 *   - the parts of an op are claimed, not assigned: the calling thread takes parts too and,
 *     when the workers are slow to start, does all of them itself instead of waiting;
 *   - a worker that finishes looks for the next op for SPIN_NS before it sleeps, and the
 *     calling thread waits for a part still running for SPIN_NS before it sleeps; sleeping
 *     and waking go through one mutex and two condition variables, and a wake-up is only
 *     sent to a thread that said it sleeps.
 * One op at a time: `state` packs the op's number (bits 32-63), its number of parts (16-31)
 * and the next unclaimed part (0-15); a claim is a compare-and-swap on it that only succeeds
 * while the snapshot's own op has an unclaimed part. The parts count must be in the same
 * word: checked against a separate field, a worker holding the finished op's state could
 * read the next op's larger count, written just before that op is published, and claim a
 * part against the old state — which the publication then resets, so the part ran twice.
 * The other description fields (function, context, items) are atomics read relaxed: a
 * claim that succeeds proves its op was unfinished from the snapshot to the claim, so the
 * caller had not begun writing the next op's fields, and the snapshot (acquire, in the
 * release sequence of the op's publication) made this op's visible. `done` counts the op's
 * finished parts. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "sluice/pool.h" /* sl_now_ns */
#include "train/cpu_team.h"

#define SPIN_NS 20000u

static _Thread_local bool inside; /* sl__team_inside */

bool sl__team_inside(void) { return inside; }

struct sl__team {
    int n; /* workers */
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t work;     /* a sleeping worker waits for a new op here */
    pthread_cond_t finished; /* the caller waits for the op's last part here */
    _Atomic uint64_t state;  /* op number << 32 | parts << 16 | next part */
    _Atomic(sl__range_fn) fn;
    _Atomic(void *) ctx;
    atomic_size_t items;
    atomic_int done;
    atomic_int sleepers;       /* workers asleep or about to be (then they re-check state) */
    atomic_bool caller_asleep; /* the caller waits on `finished` */
    atomic_bool busy;          /* an op is running: a second caller runs its op alone */
    atomic_bool stop;
};

static inline void spin_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Claim a part of the current op and run it; false if there is none to claim. */
static bool team_run_one(sl__team *t) {
    uint64_t st = atomic_load_explicit(&t->state, memory_order_acquire);
    for (;;) {
        uint32_t i = (uint32_t)(st & 0xffff);
        int parts = (int)((st >> 16) & 0xffff);
        if (i >= (uint32_t)parts) return false;
        sl__range_fn fn = atomic_load_explicit(&t->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&t->ctx, memory_order_relaxed);
        size_t n = atomic_load_explicit(&t->items, memory_order_relaxed);
        if (!atomic_compare_exchange_weak_explicit(&t->state, &st, st + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* st reloaded: another claim, or the next op */
        bool was = inside;
        inside = true;
        fn(ctx, n * i / (size_t)parts, n * (i + 1) / (size_t)parts);
        inside = was;
        if (atomic_fetch_add(&t->done, 1) + 1 == parts && atomic_load(&t->caller_asleep)) {
            pthread_mutex_lock(&t->mu);
            pthread_cond_signal(&t->finished);
            pthread_mutex_unlock(&t->mu);
        }
        return true;
    }
}

static bool team_has_work(sl__team *t) {
    uint64_t st = atomic_load(&t->state);
    return (st & 0xffff) < ((st >> 16) & 0xffff);
}

static void *team_worker(void *arg) {
    sl__team *t = arg;
    for (;;) {
        if (team_run_one(t)) continue;
        uint64_t t0 = sl_now_ns();
        for (int k = 1; !team_has_work(t) && !atomic_load_explicit(&t->stop, memory_order_relaxed); k++) {
            spin_pause();
            if (k % 64 == 0 && sl_now_ns() - t0 > SPIN_NS) break;
        }
        if (team_has_work(t)) continue;
        pthread_mutex_lock(&t->mu);
        atomic_fetch_add(&t->sleepers, 1);
        while (!atomic_load(&t->stop) && !team_has_work(t)) pthread_cond_wait(&t->work, &t->mu);
        atomic_fetch_sub(&t->sleepers, 1);
        bool stop = atomic_load(&t->stop);
        pthread_mutex_unlock(&t->mu);
        if (stop) return NULL;
    }
}

void sl__team_free(sl__team *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    atomic_store(&t->stop, true);
    pthread_cond_broadcast(&t->work);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->n; i++) pthread_join(t->th[i], NULL);
    pthread_cond_destroy(&t->work);
    pthread_cond_destroy(&t->finished);
    pthread_mutex_destroy(&t->mu);
    free(t->th);
    free(t);
}

sl_status sl__team_new(int workers, sl__team **out) {
    *out = NULL;
    sl__team *t = calloc(1, sizeof *t);
    if (!t || !(t->th = calloc((size_t)workers, sizeof *t->th))) {
        free(t);
        return sl_err(SL_ENOMEM, "cpu backend: out of memory for its %d worker threads", workers);
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->work, NULL);
    pthread_cond_init(&t->finished, NULL);
    for (; t->n < workers; t->n++)
        if (pthread_create(&t->th[t->n], NULL, team_worker, t) != 0) {
            int started = t->n;
            sl__team_free(t);
            return sl_err(SL_EIO, "cpu backend: cannot start worker thread %d of %d", started + 1, workers);
        }
    *out = t;
    return SL_OK;
}

bool sl__team_run(sl__team *t, int parts, size_t n, sl__range_fn fn, void *ctx) {
    if (atomic_exchange(&t->busy, true)) return false;
    /* the previous run is over (every part done): no one reads these but to fail a claim */
    atomic_store_explicit(&t->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&t->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&t->items, n, memory_order_relaxed);
    atomic_store_explicit(&t->done, 0, memory_order_relaxed);
    uint64_t op = (atomic_load_explicit(&t->state, memory_order_relaxed) >> 32) + 1;
    atomic_store(&t->state, op << 32 | (uint64_t)parts << 16); /* seq_cst: before the sleepers check */
    if (atomic_load(&t->sleepers) > 0) {
        pthread_mutex_lock(&t->mu);
        pthread_cond_broadcast(&t->work);
        pthread_mutex_unlock(&t->mu);
    }
    while (team_run_one(t)) {
    }
    if (atomic_load_explicit(&t->done, memory_order_acquire) < parts) {
        uint64_t t0 = sl_now_ns();
        for (int k = 1; atomic_load_explicit(&t->done, memory_order_acquire) < parts; k++) {
            spin_pause();
            if (k % 64 == 0 && sl_now_ns() - t0 > SPIN_NS) break;
        }
        if (atomic_load_explicit(&t->done, memory_order_acquire) < parts) {
            pthread_mutex_lock(&t->mu);
            atomic_store(&t->caller_asleep, true);
            while (atomic_load(&t->done) < parts) pthread_cond_wait(&t->finished, &t->mu);
            atomic_store(&t->caller_asleep, false);
            pthread_mutex_unlock(&t->mu);
        }
    }
    atomic_store_explicit(&t->busy, false, memory_order_release);
    return true;
}
