/* The parallel runner behind map and map_batch (see pipeline/internal.h for the model).
 *
 * Workload: units that take from ~10 us (parse a small Example) to ~10 ms (decode a batch
 * of JPEGs), 1 to 64 threads. One mutex guards the slots; the input has its own lock so
 * fetching the next unit's input overlaps with handing results to the consumer.
 *
 * Results are kept in `capacity` slots. A worker reserves a slot before fetching (so a
 * fetched unit always has somewhere to go), fills it when done, and the consumer frees it.
 * Deterministic mode returns the slot whose seq is next_out; otherwise any finished slot.
 *
 * Stats: a worker reads the clock three times per unit (fetch start, work start, work end):
 * fetch time is the op's time waiting on input, work time its busy time. About every 10 ms
 * a worker also samples one unit's thread CPU time and run-queue wait around its work
 * (samp_* in the stats): the tuner learns from them how much of the work needs a core. Time waiting for a
 * free slot is "blocked on output"; the consumer's waits for a result are its stall time.
 * The tuner may change the active workers (up to the threads started) and the capacity (up
 * to the slots allocated, 2 * nthreads + 2). */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pipeline/internal.h"
#include "sluice/pool.h"

#ifdef SL_STATS_OFF /* only to measure what the stats cost: no clock reads per unit */
#define sl__now_fast() ((uint64_t)0)
#endif

enum { SLOT_FREE = 0, SLOT_RESERVED, SLOT_DONE };

typedef struct slot {
    int state;        /* SLOT_*; guarded by mu */
    int64_t seq;
    long long bytes;  /* the result's tensor bytes, counted as buffered while DONE */
    sl_status status;
    sl_error err;     /* the unit's error, when status < 0 */
    sl_element e;
} slot;

struct sl_runner {
    const sl_runner_ops *ops;
    const sl_fn *fn; /* whose states the workers hold (NULL: none) */
    void *op;
    sl_iter *owner;         /* the op's iterator: for error labels and the context */
    pthread_mutex_t in_mu;  /* guards in, next_seq, in_ended; taken before mu */
    sl_iter *in;
    int64_t next_seq;       /* sequence number of the next unit fetched */
    bool in_ended;          /* guarded by in_mu (a copy in mu_ended for the consumer) */

    pthread_mutex_t mu;     /* guards everything below */
    pthread_cond_t cv_done; /* a slot became DONE, or the input ended, or cancel */
    pthread_cond_t cv_space;/* a slot became FREE, parallelism changed, or cancel */
    pthread_cond_t cv_idle; /* for workers beyond `active`: parallelism changed, or cancel */
    slot *slots;
    int nslots;             /* allocated */
    int capacity;           /* usable now (<= nslots) */
    int done;               /* slots DONE */
    int reserved;           /* slots RESERVED (units in flight) */
    int active;             /* workers allowed to run units now */
    int running;            /* workers currently holding a reservation */
    int64_t next_out;       /* deterministic: the seq to return next */
    int64_t end_seq;        /* the input ended before this seq (valid when mu_ended) */
    bool mu_ended;
    bool cancelled;
    sl__cancel_hook hook;   /* wakes the consumer and the workers when the pipeline is closed */
    bool deterministic;
    int nthreads;
    pthread_t *threads;
    struct worker_arg_s *args; /* one per thread, freed by stop */
    int nargs;
};

typedef struct worker_arg_s {
    sl_runner *r;
    void *tstate; /* per-thread state, made before the thread starts */
    void *job;    /* per-thread scratch for one unit */
} worker_arg;

int sl__poll_ms = 50;

static void runner_wake(void *arg) {
    sl_runner *r = arg;
    pthread_mutex_lock(&r->mu);
    pthread_cond_broadcast(&r->cv_done);
    pthread_cond_broadcast(&r->cv_space);
    pthread_cond_broadcast(&r->cv_idle);
    pthread_mutex_unlock(&r->mu);
}

#define SAMPLE_EVERY_NS 10000000ull

/* This thread's CPU time and run-queue wait (ns; the wait is 0 where
 * /proc/thread-self/schedstat is missing: then descheduled time reads as blocked) */
static void thread_times(uint64_t *cpu, uint64_t *rq) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    *cpu = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    *rq = 0;
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[96];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return;
    buf[n] = 0;
    unsigned long long run, wait;
    if (sscanf(buf, "%llu %llu", &run, &wait) == 2) *rq = wait;
}

static void *worker(void *arg) {
    worker_arg *wa = arg;
    sl_runner *r = wa->r;
    void *tstate = wa->tstate, *job = wa->job;
    sl_op_stats *st = r->owner->stats;
    sl_ictx *ctx = r->owner->ctx;
    const char *label = r->owner->node->label;
    int idx = (int)(wa - r->args);
    sl__trace_thread_name("%s worker %d", label, idx + 1);
    uint64_t next_sample = 0;

    pthread_mutex_lock(&r->mu);
    for (;;) {
        /* wait for room: a free slot (within capacity and the RAM budget) and an active
         * worker place; waiting with a place but no slot is "blocked on output" */
        uint64_t tb = 0;
        for (;;) {
            if (r->cancelled || r->mu_ended) break;
            if (idx >= r->active) { /* not wanted now: sleep apart, so cv_space signals reach
                                     * the active workers */
                pthread_cond_wait(&r->cv_idle, &r->mu);
                continue;
            }
            if (r->running >= r->active) {
                pthread_cond_wait(&r->cv_space, &r->mu);
                continue;
            }
            bool ram = sl__ram_full(r->owner, r->reserved);
            if (r->reserved < r->capacity && !ram) break;
            if (!tb) tb = sl__now_fast();
            if (ram) sl_cond_wait_ms(&r->cv_space, &r->mu, 5); /* bytes free up elsewhere too */
            else pthread_cond_wait(&r->cv_space, &r->mu);
        }
        if (tb) atomic_fetch_add_explicit(&st->blocked_ns, (long long)(sl__now_fast() - tb), memory_order_relaxed);
        if (r->cancelled || r->mu_ended) break;
        int k = 0;
        while (r->slots[k].state != SLOT_FREE) k++;
        slot *sl = &r->slots[k];
        sl->state = SLOT_RESERVED;
        r->reserved++;
        r->running++;
        pthread_mutex_unlock(&r->mu);

        /* fetch, in sequence order */
        uint64_t t0 = sl__now_fast();
        pthread_mutex_lock(&r->in_mu);
        atomic_fetch_add_explicit(&st->lockq_ns, (long long)(sl__now_fast() - t0), memory_order_relaxed);
        bool last = false, got = false;
        int64_t seq = r->next_seq;
        sl_status s;
        if (r->in_ended) {
            s = SL_END;
        } else {
            s = r->ops->fetch(r->op, r->in, seq, job, &last);
            if (s != SL_END) {
                r->next_seq++;
                got = true;
            }
            if (s == SL_END || last) r->in_ended = true;
        }
        bool ended_now = r->in_ended;
        pthread_mutex_unlock(&r->in_mu);

        uint64_t t1 = sl__now_fast();
        atomic_fetch_add_explicit(&st->wait_ns, (long long)(t1 - t0), memory_order_relaxed);
        sl_element out;
        sl_element_init(&out);
        long long bytes = 0;
        bool sample = got && s == SL_OK && t1 >= next_sample;
        uint64_t cpu0 = 0, rq0 = 0, cpu1, rq1;
        if (sample) thread_times(&cpu0, &rq0);
        uint64_t t1s = sample ? sl__now_fast() : t1;
        if (got && s == SL_OK) {
            s = r->ops->work(r->op, job, seq, tstate, &out);
            if (s < 0) sl_element_clear(&out);
            else bytes = (long long)sl__element_bytes(&out);
        }
        if (got && r->ops->job_clear) r->ops->job_clear(r->op, job);
        if (got) {
            uint64_t t2 = sl__now_fast();
            if (sample) {
                thread_times(&cpu1, &rq1);
                atomic_fetch_add_explicit(&st->samp_wall_ns, (long long)(t2 - t1s), memory_order_relaxed);
                atomic_fetch_add_explicit(&st->samp_cpu_ns, (long long)(cpu1 - cpu0), memory_order_relaxed);
                atomic_fetch_add_explicit(&st->samp_rq_ns, (long long)(rq1 - rq0), memory_order_relaxed);
                next_sample = t2 + SAMPLE_EVERY_NS;
            }
            atomic_fetch_add_explicit(&st->busy_ns, (long long)(t2 - t1), memory_order_relaxed);
            if (atomic_load_explicit(&ctx->trace, memory_order_relaxed))
                sl__trace_event(ctx, label, "work", t1, t2 - t1);
        }

        pthread_mutex_lock(&r->mu);
        r->running--;
        if (got) {
            sl->seq = seq;
            sl->status = s;
            if (s < 0) sl_err_save(&sl->err);
            sl_element_move(&sl->e, &out);
            sl->state = SLOT_DONE;
            sl->bytes = bytes;
            r->done++;
            atomic_store_explicit(&st->buffered, r->done, memory_order_relaxed);
            if (bytes) sl__stats_buffered_bytes(ctx, st, bytes);
        } else {
            sl->state = SLOT_FREE;
            r->reserved--;
        }
        if (ended_now && !r->mu_ended) {
            r->mu_ended = true;
            r->end_seq = seq + (got ? 1 : 0);
            pthread_cond_broadcast(&r->cv_space); /* idle workers may leave */
            pthread_cond_broadcast(&r->cv_idle);
        }
        pthread_cond_broadcast(&r->cv_done);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

sl_status sl__runner_start(const sl_runner_ops *ops, void *op, sl_iter *owner, sl_iter *in,
                           const sl_fn *fn, int nthreads, int parallelism, int capacity,
                           bool deterministic, int64_t first_seq, sl_runner **out) {
    *out = NULL;
    if (nthreads < 1) nthreads = 1;
    if (parallelism < 1 || parallelism > nthreads) parallelism = nthreads;
    if (capacity < parallelism) capacity = parallelism;
    int nslots = 2 * nthreads + 2 > capacity ? 2 * nthreads + 2 : capacity;
    sl_runner *r = calloc(1, sizeof *r);
    if (!r || !(r->slots = calloc((size_t)nslots, sizeof *r->slots)) ||
        !(r->threads = calloc((size_t)nthreads, sizeof *r->threads)) ||
        !(r->args = calloc((size_t)nthreads, sizeof *r->args))) {
        if (r) {
            free(r->slots);
            free(r->threads);
        }
        free(r);
        sl__iter_close(in);
        return sl_err(SL_ENOMEM, "out of memory starting %d workers", nthreads);
    }
    r->ops = ops;
    r->op = op;
    r->fn = fn;
    r->owner = owner;
    r->in = in;
    r->capacity = capacity;
    r->nslots = nslots;
    r->active = parallelism;
    r->deterministic = deterministic;
    r->next_seq = r->next_out = first_seq;
    pthread_mutex_init(&r->in_mu, NULL);
    pthread_mutex_init(&r->mu, NULL);
    sl_cond_init_mono(&r->cv_done);
    sl_cond_init_mono(&r->cv_space);
    sl_cond_init_mono(&r->cv_idle);
    sl__cancel_register(owner->ctx, &r->hook, runner_wake, r);
    atomic_store(&owner->stats->parallelism, parallelism);
    atomic_store(&owner->stats->buffer, capacity);
    atomic_store(&owner->stats->threads, nthreads);
    /* per-thread state first, so a failure is reported here and not by a lost worker */
    r->nargs = nthreads;
    for (int i = 0; i < nthreads; i++) {
        worker_arg *wa = &r->args[i];
        wa->r = r;
        wa->job = calloc(1, ops->job_size ? ops->job_size : 1);
        sl_status s = wa->job ? SL_OK : sl_err(SL_ENOMEM, "out of memory starting workers");
        sl_fn_states *fs = NULL;
        if (!s && fn) s = sl__fn_states_new(fn, &fs);
        wa->tstate = fs;
        if (s) {
            sl__runner_stop(r);
            return s;
        }
    }
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&r->threads[i], NULL, worker, &r->args[i]) != 0) {
            r->nthreads = i;
            sl__runner_stop(r);
            return sl_err(SL_EIO, "op '%s': could not start worker thread %d", owner->ds->label, i + 1);
        }
        r->nthreads = i + 1;
    }
    *out = r;
    return SL_OK;
}

/* A DONE slot to return now, or NULL. mu held. */
static slot *ready_locked(sl_runner *r) {
    for (int k = 0; k < r->nslots; k++) {
        slot *s = &r->slots[k];
        if (s->state == SLOT_DONE && (!r->deterministic || s->seq == r->next_out)) return s;
    }
    return NULL;
}

sl_status sl__runner_next(sl_runner *r, sl_element *out) {
    sl_ictx *ctx = r->owner->ctx;
    pthread_mutex_lock(&r->mu);
    slot *s;
    uint64_t tw = 0;
    for (;;) {
        s = ready_locked(r);
        if (s) break;
        if (r->mu_ended && r->reserved == 0) {
            pthread_mutex_unlock(&r->mu);
            return SL_END;
        }
        if (r->mu_ended && r->deterministic && r->next_out >= r->end_seq) {
            pthread_mutex_unlock(&r->mu);
            return SL_END;
        }
        if (r->cancelled || atomic_load_explicit(&ctx->cancelled, memory_order_relaxed)) {
            pthread_mutex_unlock(&r->mu);
            if (tw) sl__stats_waited(sl__now_fast() - tw);
            return sl_err(SL_ECANCELED, "op '%s': iterator was closed", r->owner->ds->label);
        }
        if (!tw) {
            tw = sl__now_fast();
            atomic_fetch_add_explicit(&r->owner->stats->empty_hits, 1, memory_order_relaxed);
        }
        pthread_cond_wait(&r->cv_done, &r->mu);
    }
    sl_status st = s->status;
    if (st >= 0) sl_element_move(out, &s->e);
    else sl_err_restore(&s->err);
    s->state = SLOT_FREE;
    r->reserved--;
    r->done--;
    long long bytes = s->bytes;
    s->bytes = 0;
    atomic_store_explicit(&r->owner->stats->buffered, r->done, memory_order_relaxed);
    r->next_out++;
    pthread_cond_signal(&r->cv_space);
    pthread_mutex_unlock(&r->mu);
    if (bytes) sl__stats_buffered_bytes(ctx, r->owner->stats, -bytes);
    if (tw) sl__stats_waited(sl__now_fast() - tw);
    return st;
}

void sl__runner_set_parallelism(sl_runner *r, int parallelism) {
    pthread_mutex_lock(&r->mu);
    if (parallelism < 1) parallelism = 1;
    if (parallelism > r->nthreads) parallelism = r->nthreads;
    r->active = parallelism;
    atomic_store(&r->owner->stats->parallelism, parallelism);
    pthread_cond_broadcast(&r->cv_space);
    pthread_cond_broadcast(&r->cv_idle);
    pthread_mutex_unlock(&r->mu);
}

void sl__runner_set_capacity(sl_runner *r, int capacity) {
    pthread_mutex_lock(&r->mu);
    if (capacity < 1) capacity = 1;
    if (capacity > r->nslots) capacity = r->nslots;
    r->capacity = capacity;
    atomic_store(&r->owner->stats->buffer, capacity);
    pthread_cond_broadcast(&r->cv_space);
    pthread_mutex_unlock(&r->mu);
}

void sl__runner_stop(sl_runner *r) {
    if (!r) return;
    sl__cancel_unregister(r->owner->ctx, &r->hook);
    pthread_mutex_lock(&r->mu);
    r->cancelled = true;
    pthread_cond_broadcast(&r->cv_space);
    pthread_cond_broadcast(&r->cv_idle);
    pthread_cond_broadcast(&r->cv_done);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < r->nthreads; i++) pthread_join(r->threads[i], NULL);
    for (int k = 0; k < r->nslots; k++) {
        if (r->slots[k].bytes) sl__stats_buffered_bytes(r->owner->ctx, r->owner->stats, -r->slots[k].bytes);
        sl_element_clear(&r->slots[k].e);
    }
    atomic_store(&r->owner->stats->buffered, 0);
    for (int i = 0; i < r->nargs; i++) {
        if (r->args[i].tstate) sl__fn_states_free(r->fn, r->args[i].tstate);
        if (r->args[i].job && r->ops->job_free) r->ops->job_free(r->op, r->args[i].job);
        free(r->args[i].job);
    }
    free(r->args);
    sl__iter_close(r->in);
    pthread_mutex_destroy(&r->in_mu);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv_done);
    pthread_cond_destroy(&r->cv_space);
    pthread_cond_destroy(&r->cv_idle);
    free(r->slots);
    free(r->threads);
    free(r);
}

/* ---- iterators driven by a runner ---- */

sl_status sl__runner_iter_next(sl_iter *it, sl_element *out) {
    return sl__runner_next(((sl__runner_iter *)it)->runner, out);
}

static void runner_iter_set_par(sl_iter *it, int p) {
    sl__runner_set_parallelism(((sl__runner_iter *)it)->runner, p);
}

static void runner_iter_set_buf(sl_iter *it, int b) {
    sl__runner_set_capacity(((sl__runner_iter *)it)->runner, b);
}

static const sl_tune_ops runner_iter_tune = {.set_parallelism = runner_iter_set_par,
                                             .set_buffer = runner_iter_set_buf};

sl_status sl__runner_iter_start(sl__runner_iter *it, const sl_runner_ops *ops, const sl_fn *fn,
                                int parallelism, int cap_mul, int cap_add, bool deterministic,
                                int64_t per_unit) {
    sl_iter *in, *self = &it->base;
    sl_status s = sl__iter_input_at(self->ds, 0, self->ctx, self->seed, 0, self->start * per_unit, &in);
    if (s) {
        sl__iter_close(self);
        return s;
    }
    bool aut = parallelism == SL_AUTO;
    int threads = aut ? 2 * self->ctx->ncpu : parallelism;
    int par = aut ? self->ctx->ncpu : threads, cap = cap_mul * par + cap_add;
    if (aut && atomic_load(&self->stats->parallelism) > 0) {
        par = atomic_load(&self->stats->parallelism);
        cap = atomic_load(&self->stats->buffer);
    }
    atomic_store(&self->node->auto_par, aut); /* before the workers: the RAM budget applies */
    atomic_store(&self->node->auto_buf, aut);
    s = sl__runner_start(ops, it, self, in, fn, threads, par, cap, deterministic, self->start, &it->runner);
    if (s) {
        sl__iter_close(self);
        return s;
    }
    sl__tune_attach(self, aut, aut, threads, &runner_iter_tune);
    return SL_OK;
}
