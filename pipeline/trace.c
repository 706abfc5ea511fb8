/* Trace events of a running pipeline in Chrome's trace-event JSON (ph "X" complete events
 * with ts/dur in microseconds, pid, tid, name = the op's label; "M" thread_name metadata),
 * which Perfetto and chrome://tracing open.
 *
 * Workload: up to a few hundred thousand events a second from every pipeline thread. An
 * event takes a slot with one atomic add in a bounded array (later events are dropped and
 * counted) and publishes it with a release store, so writing the file while the pipeline
 * runs only shows finished events. Threads get small ids on first use and names from
 * sl__trace_thread_name (workers name themselves when they start). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/internal.h"
#include "sluice/file.h"
#include "sluice/json.h"
#include "sluice/log.h"
#include "sluice/pool.h"
#include "sluice/stats.h"

typedef struct {
    const char *name;   /* the node's label (lives as long as the context) */
    const char *cat;    /* a string literal */
    uint64_t ts, dur;   /* ns */
    int tid;
    atomic_int ready;   /* published */
} tev;

#define MAX_THREADS 512

typedef struct sl_trace {
    char *path;           /* the file sl_iter_trace opened, for messages; NULL without one */
    FILE *f;              /* opened by sl_iter_trace, written and closed by sl_iter_trace_end
                           * or at close; NULL once written */
    long long gen;        /* unique per trace: threads remember which one has their name */
    int64_t cap;
    atomic_llong n;       /* slots taken (may exceed cap: the excess was dropped) */
    atomic_ullong full_ns; /* when the first event was dropped (its end); 0: none dropped */
    tev *ev;
    uint64_t t0;
    pthread_mutex_t mu;   /* guards names, nnames */
    struct {
        int tid;
        char name[96];
    } names[MAX_THREADS];
    int nnames;
} sl_trace;

static atomic_int next_tid = 1;
static _Thread_local int tl_tid;
static _Thread_local char tl_name[96];
static _Thread_local long long tl_registered; /* the gen of the trace this thread's name is in */
static atomic_llong next_gen = 1;

void sl__trace_thread_name(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_name, sizeof tl_name, fmt, ap);
    va_end(ap);
}

static void register_thread(sl_trace *t) {
    if (!tl_tid) tl_tid = atomic_fetch_add(&next_tid, 1);
    pthread_mutex_lock(&t->mu);
    if (t->nnames < MAX_THREADS) {
        t->names[t->nnames].tid = tl_tid;
        snprintf(t->names[t->nnames].name, sizeof t->names[0].name, "%s",
                 tl_name[0] ? tl_name : "consumer");
        t->nnames++;
    }
    pthread_mutex_unlock(&t->mu);
    tl_registered = t->gen;
}

void sl__trace_event(sl_ictx *ctx, const char *label, const char *cat, uint64_t t0_ns, uint64_t dur_ns) {
    sl_trace *t = atomic_load_explicit(&ctx->trace, memory_order_acquire);
    if (!t) return;
    if (tl_registered != t->gen) register_thread(t);
    long long k = atomic_fetch_add_explicit(&t->n, 1, memory_order_relaxed);
    if (k >= t->cap) {
        if (k == t->cap) atomic_store_explicit(&t->full_ns, t0_ns + dur_ns, memory_order_relaxed);
        return;
    }
    tev *e = &t->ev[k];
    e->name = label;
    e->cat = cat;
    e->ts = t0_ns;
    e->dur = dur_ns;
    e->tid = tl_tid;
    atomic_store_explicit(&e->ready, 1, memory_order_release);
}

/* Write the events to f and close it; SL_EIO naming path, the reason and how far it got on
 * any failed write, flush or close (a full disk, a file-size limit), and the cut-off file,
 * which no trace viewer opens, removed. */
static sl_status write_trace(sl_trace *t, FILE *f, const char *path) {
    int pid = (int)getpid();
    long long n = atomic_load(&t->n);
    long long dropped = n > t->cap ? n - t->cap : 0;
    if (n > t->cap) n = t->cap;
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"dropped_events\": %lld}, \"traceEvents\": [\n",
            dropped);
    fprintf(f, "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"tid\": 0, \"ts\": 0, "
               "\"args\": {\"name\": \"sluice pipeline\"}}", pid);
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->nnames; i++) {
        fprintf(f, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, \"ts\": 0, "
                   "\"args\": {\"name\": ", pid, t->names[i].tid);
        sl_json_fput_str(f, t->names[i].name);
        fprintf(f, "}}");
    }
    pthread_mutex_unlock(&t->mu);
    for (long long k = 0; k < n; k++) {
        tev *e = &t->ev[k];
        if (!atomic_load_explicit(&e->ready, memory_order_acquire)) continue;
        uint64_t ts = e->ts > t->t0 ? e->ts - t->t0 : 0;
        fprintf(f, ",\n{\"ph\": \"X\", \"name\": ");
        sl_json_fput_str(f, e->name);
        fprintf(f, ", \"cat\": \"%s\", \"ts\": %.3f, \"dur\": %.3f, \"pid\": %d, \"tid\": %d}", e->cat,
                (double)ts / 1000.0, (double)e->dur / 1000.0, pid, e->tid);
    }
    fprintf(f, "\n]}\n");
    sl_status s = sl_file_fclose_write(f, path, "cannot write the trace");
    if (s) unlink(path);
    return s;
}

sl_status sl_iter_trace(sl_iter *it, const char *path, int64_t max_events) {
    if (!it) return sl_err(SL_EINVAL, "sl_iter_trace: iterator is NULL");
    sl_ictx *ctx = it->ctx;
    if (atomic_load(&ctx->trace)) return sl_err(SL_EINVAL, "sl_iter_trace: tracing is already on");
    /* open the file now: a path that cannot be written (or is a FIFO or a device) fails here,
     * before the pipeline runs, not after */
    FILE *f = NULL;
    if (path) {
        sl_status s = sl_file_fopen_write(path, "w", "trace file", &f);
        if (s) return s;
    }
    sl_trace *t = calloc(1, sizeof *t);
    if (max_events <= 0) max_events = 1000000;
    if (!t || !(t->ev = calloc((size_t)max_events, sizeof *t->ev)) || (path && !(t->path = strdup(path)))) {
        if (t) free(t->ev);
        free(t);
        if (f) fclose(f);
        return sl_err(SL_ENOMEM, "out of memory for %lld trace events", (long long)max_events);
    }
    t->f = f;
    t->cap = max_events;
    t->gen = atomic_fetch_add(&next_gen, 1);
    t->t0 = ctx->start_ns;
    pthread_mutex_init(&t->mu, NULL);
    sl_trace *none = NULL;
    if (!atomic_compare_exchange_strong(&ctx->trace, &none, t)) {
        pthread_mutex_destroy(&t->mu);
        if (t->f) fclose(t->f);
        free(t->path);
        free(t->ev);
        free(t);
        return sl_err(SL_EINVAL, "sl_iter_trace: tracing is already on");
    }
    return SL_OK;
}

sl_status sl_iter_trace_write(sl_iter *it, const char *path) {
    sl_trace *t = it ? atomic_load(&it->ctx->trace) : NULL;
    if (!t) return sl_err(SL_EINVAL, "sl_iter_trace_write: tracing is off (call sl_iter_trace first)");
    FILE *f;
    sl_status s = sl_file_fopen_write(path, "w", "trace file", &f);
    if (s) return s;
    return write_trace(t, f, path);
}

sl_status sl_iter_trace_end(sl_iter *it) {
    sl_trace *t = it ? atomic_load(&it->ctx->trace) : NULL;
    if (!t) return sl_err(SL_EINVAL, "sl_iter_trace_end: tracing is off (call sl_iter_trace first)");
    if (!t->f) return sl_err(SL_EINVAL, "sl_iter_trace_end: no trace file to write (no path given, or written already)");
    FILE *f = t->f;
    t->f = NULL; /* written once, here: close writes nothing more */
    return write_trace(t, f, t->path);
}

sl_status sl_iter_trace_info(const sl_iter *it, sl_trace_info *out) {
    if (!out) return sl_err(SL_EINVAL, "sl_iter_trace_info: out is NULL");
    memset(out, 0, sizeof *out);
    sl_trace *t = it ? atomic_load(&it->ctx->trace) : NULL;
    if (!t) return sl_err(SL_EINVAL, "sl_iter_trace_info: tracing is off (call sl_iter_trace first)");
    long long n = atomic_load(&t->n);
    uint64_t now = sl_now_ns();
    out->max_events = t->cap;
    out->recorded = n > t->cap ? t->cap : n;
    out->dropped = n > t->cap ? n - t->cap : 0;
    out->wall_s = now > t->t0 ? (double)(now - t->t0) / 1e9 : 0;
    out->covered_s = out->wall_s;
    uint64_t full = atomic_load_explicit(&t->full_ns, memory_order_relaxed);
    if (out->dropped > 0) {
        /* the thread that took the first slot past the cap may not have stored it yet */
        if (!full) full = now;
        out->covered_s = full > t->t0 ? (double)(full - t->t0) / 1e9 : 0;
        if (out->covered_s > out->wall_s) out->covered_s = out->wall_s;
    }
    return SL_OK;
}

void sl__trace_finish(sl_ictx *ctx) {
    sl_trace *t = atomic_exchange(&ctx->trace, NULL);
    if (!t) return;
    /* close cannot fail: a write error is logged (sl_iter_trace_end reports it instead) */
    if (t->f && write_trace(t, t->f, t->path)) SL_WARN("%s", sl_errmsg());
    pthread_mutex_destroy(&t->mu);
    free(t->path);
    free(t->ev);
    free(t);
}
