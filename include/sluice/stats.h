/* Pipeline stats, the bottleneck verdict, and traces: what every op of a running pipeline
 * did, what autotune chose, and which op limits the throughput.
 *
 * Stats are always on (their cost is a few clock reads per element per op; see the
 * README's "Finding the bottleneck" section for the measured overhead). A snapshot
 * (sl_iter_stats) copies the counters of every op of the running graph; it can be written
 * as JSON (sl_stats_save / sl_stats_write_json: the file the trainer keeps in its run
 * folder and `sluice-stats --from FILE` reads) and read back (sl_stats_load).
 *
 * Times are summed over an op's threads: a map running 4 workers flat out accrues 4 s of
 * busy time per second of wall time. The percentages the tools show divide by wall time
 * times the op's lanes: its parallelism for parallel ops (averaged over the run from its
 * history, as autotune changes it), 1 otherwise.
 *
 * Traces (sl_iter_trace) record one Chrome trace-event "complete" event per next() call
 * of every op and per unit of parallel work, in a bounded buffer, and write them as JSON
 * that opens in Perfetto (ui.perfetto.dev) or chrome://tracing. */
#ifndef SLUICE_STATS_H
#define SLUICE_STATS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sluice/pipeline.h"
#include "sluice/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One point of an op's history. */
typedef struct sl_stats_sample {
    double t;            /* seconds since the iterator was created */
    int parallelism;     /* chosen then (0: not a parallel op) */
    int buffer;          /* buffer capacity then (0: no buffer) */
    double buffered;     /* mean elements in the buffer since the previous point */
} sl_stats_sample;

/* One op (node) of the running graph. Every iterator an op made (one per epoch under
 * repeat, one per file under interleave) adds to the same counters. */
typedef struct sl_op_stat {
    int id;                 /* index in sl_stats.ops; the root is 0 */
    int parent;             /* the op that reads this one, -1 for the root */
    char label[64];         /* the dataset's label ("train/map") */
    char op[32];            /* the op ("map") */
    int64_t elements;       /* produced */
    int64_t bytes;          /* tensor bytes produced */
    int64_t errors;         /* errors returned */
    double busy_s;          /* the op's own work, all its threads together */
    double wait_s;          /* waiting on its input */
    double blocked_s;       /* producers blocked on a full output buffer */
    double stall_s;         /* its consumer waited for a result (async ops) */
    int64_t empty_hits;     /* next() found no result ready (async ops) */
    int parallelism;        /* now; 0: not a parallel op */
    int threads;            /* worker threads started (what parallelism can grow to) */
    int buffer;             /* buffer capacity now; 0: no buffer */
    bool tuned;             /* autotune owns its parallelism or buffer (SL_AUTO) */
    double buffered_avg;    /* time-averaged elements in the buffer */
    int64_t buffered_bytes_peak;
    int nhist;              /* history points, oldest first */
    sl_stats_sample *hist;
} sl_op_stat;

typedef struct sl_stats {
    double wall_s;          /* since the iterator was created */
    double next_s;          /* time the consumer spent inside sl_iter_next (waiting) */
    int64_t elements;       /* returned to the consumer (the root op's elements) */
    int cpu_budget;         /* cores the pipeline may use */
    int thread_budget;      /* threads autotune lets the tuned ops run now: cpu_budget, or up to
                             * twice that while other processes deschedule them, plus the lanes
                             * of maps whose work blocks (I/O) rather than computes (autotune.c) */
    int64_t ram_budget;     /* bytes of buffers autotune may use */
    int64_t buffered_bytes_peak; /* most bytes held in all buffers at once */
    int n;                  /* ops */
    sl_op_stat *ops;
} sl_stats;

/* A snapshot of it's stats into *out (free with sl_stats_free). Safe while other threads
 * run the pipeline; it may be called on any iterator of the pipeline (it reports the whole
 * graph). SL_ENOMEM with *out = NULL on failure. */
sl_status sl_iter_stats(const sl_iter *it, sl_stats **out);

void sl_stats_free(sl_stats *st); /* NULL is a no-op */

/* Write st as JSON to path (written to path.tmp, then renamed over path). SL_EINVAL at once
 * when path (or path.tmp) exists and is not a regular file: a rename would replace a device
 * or FIFO with the file. SL_EIO naming the path and the OS reason when a write, the close or
 * the rename fails (a full disk, say); path is then left as it was and path.tmp removed. A
 * failed write (a full disk or quota, a file-size limit) reads "PATH: cannot write stats:
 * REASON (write failed at byte N)" with a hint that says which (sluice/file.h). A file-size
 * limit (ulimit -f) kills a process that leaves SIGXFSZ at its default action before the
 * write can fail, leaving path.tmp (sluice/file.h). */
sl_status sl_stats_save(const sl_stats *st, const char *path);

/* The same JSON (without a trailing newline) to an open stream. SL_EIO on a write error. */
sl_status sl_stats_fprint(const sl_stats *st, FILE *f);

/* sl_iter_stats + sl_stats_save. */
sl_status sl_stats_write_json(const sl_iter *it, const char *path);

/* The default limit on a stats file's size for sl_stats_load: 64 MiB. The files the
 * library writes are a few KB to about 1 MB (50 ops with 256 history points each is about
 * 0.5 MB), so this is over 50 times the largest real one, while reading the largest file
 * it admits takes at most about 1 GiB of memory (the reader is bounded at 16 times the
 * file's size). */
#define SL_STATS_MAX_BYTES (64ull << 20)

/* Read a file written by sl_stats_save (sl_stats_load_max with SL_STATS_MAX_BYTES). The
 * file is read through sl_file_read_all (sluice/file.h). Results, *out NULL on failure:
 *   SL_ENOTFOUND  no such file;
 *   SL_EINVAL     at once, for a FIFO, socket, device (/dev/zero) or directory: "stats file
 *                 'PATH': is a character device, not a regular file";
 *   SL_ERANGE     a file over max_bytes: "stats file 'PATH': is N bytes, more than the limit
 *                 of M", with a hint naming sluice-stats --max-bytes;
 *   SL_EIO        another read error;
 *   SL_ECORRUPT   naming the byte offset, for a file that is not such JSON ("format":
 *                 "sluice-stats", "version": 1; also accepted inside a "stats" member, as
 *                 `sluice-stats --json` prints it), has text after it, more than 65536 ops,
 *                 or whose tree would take more than 16 times the file's size in memory
 *                 (so hostile input cannot make the reader allocate without bound).
 * Numbers out of their field's range are clamped; parent links that do not point to an
 * earlier op become -1. */
sl_status sl_stats_load(const char *path, sl_stats **out);
sl_status sl_stats_load_max(const char *path, uint64_t max_bytes, sl_stats **out);

/* An op's share of its lanes' time spent busy / waiting on input / blocked on output,
 * in [0, 1]: the time divided by wall time times lanes (the parallelism averaged over the
 * history, or 1). */
double sl_stats_busy(const sl_stats *st, const sl_op_stat *op);
double sl_stats_waiting(const sl_stats *st, const sl_op_stat *op);
double sl_stats_blocked(const sl_stats *st, const sl_op_stat *op);

/* What limits the pipeline's throughput. */
typedef struct sl_stats_verdict {
    int op;              /* index into st->ops of the bottleneck op; SL_VERDICT_CONSUMER when
                          * the pipeline is not the bottleneck; SL_VERDICT_NONE without data */
    char summary[256];   /* one line: "bottleneck: op 'train/map' (map)" */
    char evidence[512];  /* the numbers behind it */
    char advice[512];    /* what to try */
} sl_stats_verdict;

#define SL_VERDICT_CONSUMER (-1)
#define SL_VERDICT_NONE (-2)
#define SL_VERDICT_UNSATURATED (-3)

/* The busy share (sl_stats_busy) below which an op is not called the bottleneck: 0.5. */
#define SL_STATS_SATURATED 0.5

/* Decide the bottleneck. The consumer is the bottleneck when it spent less than 15% of
 * the wall time inside sl_iter_next (input was ready when it asked). Otherwise it is the op
 * with the highest busy share of its lanes (sl_stats_busy), ties going to the op nearer
 * the source, when that share is at least SL_STATS_SATURATED. When even the busiest op is
 * under it, no op's work limits the throughput (it is latency: the source waiting on
 * storage, unbuffered hand-offs): v->op is SL_VERDICT_UNSATURATED, v->summary exactly
 * "no op is saturated", and the evidence names the busiest op and its share and what the
 * numbers support: with the consumer inside next() under half the time, that the consumer
 * limits the throughput more than any op; otherwise that latency does. Returns v->op. */
int sl_stats_bottleneck(const sl_stats *st, sl_stats_verdict *v);

/* ---- traces ---- */

/* Start recording trace events for the whole pipeline of `it` (call on the root iterator),
 * at most max_events of them (<= 0: 1,000,000; about 40 bytes each); later events are
 * dropped and counted (sl_iter_trace_info tells how many, and how much of the run the trace
 * covers). With path non-NULL the file is opened (created or truncated) now,
 * through sl_file_fopen_write (a FIFO, socket, device or directory is refused at once with
 * SL_EINVAL; an unwritable path fails with SL_EIO or SL_ENOTFOUND), and the trace is
 * written there by sl_iter_trace_end or, failing that, when the iterator is closed (where a
 * write error can only be logged). SL_EINVAL if tracing is already on; SL_ENOMEM. */
sl_status sl_iter_trace(sl_iter *it, const char *path, int64_t max_events);

/* Write the events recorded so far to the file sl_iter_trace opened and close it, so that
 * the caller learns whether the write worked: SL_EIO naming the path and the reason when a
 * write, flush or close fails (a full disk, a file-size limit): "PATH: cannot write the
 * trace: REASON (write failed at byte N)" with a hint that says which (sluice/file.h); the
 * cut-off file, which no trace viewer opens, is then removed. Recording goes on, but close
 * writes nothing more. SL_EINVAL when tracing is off, or there is no file (no path given,
 * or already written). A file-size limit (ulimit -f) kills a process that leaves SIGXFSZ at
 * its default action before the write can fail (sluice/file.h). */
sl_status sl_iter_trace_end(sl_iter *it);

/* Write the events recorded so far to path (tracing goes on); path is opened as by
 * sl_iter_trace. SL_EINVAL when tracing is off; SL_EIO naming the path, as
 * sl_iter_trace_end (a cut-off file removed). */
sl_status sl_iter_trace_write(sl_iter *it, const char *path);

/* How much of the run the trace holds. A trace that filled its buffer keeps the first
 * max_events events, so it covers only the start of the run: tools should say so (sluice-stats
 * prints "sluice-stats: trace: N events dropped after the first M (the trace covers A s of
 * B s); raise --trace-max"), and the file notes the count as otherData.dropped_events. */
typedef struct sl_trace_info {
    int64_t max_events;  /* the buffer's capacity */
    int64_t recorded;    /* events kept (at most max_events) */
    int64_t dropped;     /* events past max_events, not recorded */
    double covered_s;    /* seconds since the iterator was created up to the end of the event
                          * that first did not fit (wall_s when none was dropped) */
    double wall_s;       /* seconds since the iterator was created, now */
} sl_trace_info;

/* The counts of the trace on it's pipeline into *out (zeroed first). SL_EINVAL when tracing
 * is off (or out is NULL). Safe while the pipeline runs; call it before sl_iter_close. */
sl_status sl_iter_trace_info(const sl_iter *it, sl_trace_info *out);

#ifdef __cplusplus
}
#endif
#endif
