/* Fixed-size thread pool with a FIFO queue (a singly linked list guarded by one mutex),
 * plus the clock and CPU count. Tasks are short calls from the pipeline's parallel ops, a
 * few thousand per second per core, so one lock is not the bottleneck.
 * Shutdown: set stopping, broadcast, join; tasks queued before destroy still run. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "sluice/pool.h"

typedef struct task {
    struct task *next;
    sl_task_fn fn;
    void *arg;
} task;

struct sl_pool {
    pthread_mutex_t mu;
    pthread_cond_t work;    /* signalled when a task is queued or stopping is set */
    pthread_cond_t idle;    /* signalled when pending drops to 0 */
    task *head, *tail;      /* guarded by mu */
    int pending;            /* queued + running; guarded by mu */
    int stopping;           /* guarded by mu */
    int nthreads;
    pthread_t *threads;
};

static void *worker(void *arg) {
    sl_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->stopping) pthread_cond_wait(&p->work, &p->mu);
        task *t = p->head;
        if (!t) break; /* stopping and drained */
        p->head = t->next;
        if (!p->head) p->tail = NULL;
        pthread_mutex_unlock(&p->mu);
        t->fn(t->arg);
        free(t);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_broadcast(&p->idle);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

sl_status sl_pool_create(int nthreads, sl_pool **out) {
    *out = NULL;
    if (nthreads < 1 || nthreads > 1024)
        return sl_err(SL_EINVAL, "thread pool size %d outside 1..1024", nthreads);
    sl_pool *p = calloc(1, sizeof *p);
    if (!p) return sl_err(SL_ENOMEM, "out of memory creating a thread pool");
    p->threads = calloc((size_t)nthreads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return sl_err(SL_ENOMEM, "out of memory creating a thread pool");
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->idle, NULL);
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p) != 0) {
            p->nthreads = i;
            sl_pool_destroy(p);
            return sl_err(SL_EIO, "could not start thread %d of %d", i + 1, nthreads);
        }
    }
    p->nthreads = nthreads;
    *out = p;
    return SL_OK;
}

sl_status sl_pool_submit(sl_pool *p, sl_task_fn fn, void *arg) {
    task *t = malloc(sizeof *t);
    if (!t) return sl_err(SL_ENOMEM, "out of memory queueing a task");
    t->next = NULL;
    t->fn = fn;
    t->arg = arg;
    pthread_mutex_lock(&p->mu);
    if (p->stopping) {
        pthread_mutex_unlock(&p->mu);
        free(t);
        return sl_err(SL_ECANCELED, "thread pool is shutting down");
    }
    if (p->tail) p->tail->next = t;
    else p->head = t;
    p->tail = t;
    p->pending++;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
    return SL_OK;
}

void sl_pool_wait(sl_pool *p) {
    pthread_mutex_lock(&p->mu);
    while (p->pending) pthread_cond_wait(&p->idle, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

int sl_pool_size(const sl_pool *p) { return p->nthreads; }

void sl_pool_destroy(sl_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->idle);
    free(p->threads);
    free(p);
}

uint64_t sl_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int sl_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
