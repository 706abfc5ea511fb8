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
                             * twice that while other processes deschedule them (autotune.c) */
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

/* Write st as JSON to path (written to path.tmp, then renamed). SL_EIO naming the path on
 * failure (no file is left at path). */
sl_status sl_stats_save(const sl_stats *st, const char *path);

/* The same JSON (without a trailing newline) to an open stream. SL_EIO on a write error. */
sl_status sl_stats_fprint(const sl_stats *st, FILE *f);

/* sl_iter_stats + sl_stats_save. */
sl_status sl_stats_write_json(const sl_iter *it, const char *path);

/* Read a file written by sl_stats_save. SL_ENOTFOUND / SL_EIO for an unreadable file,
 * SL_ECORRUPT naming the byte offset for one that is not such JSON ("format":
 * "sluice-stats", "version": 1; also accepted inside a "stats" member, as `sluice-stats
 * --json` prints it); *out NULL on failure. */
sl_status sl_stats_load(const char *path, sl_stats **out);

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

/* Decide the bottleneck. The consumer is the bottleneck when it spent less than 15% of
 * the wall time inside sl_iter_next (input was ready when it asked). Otherwise it is the op
 * with the highest busy share of its lanes (sl_stats_busy), ties going to the op nearer
 * the source. Returns v->op. */
int sl_stats_bottleneck(const sl_stats *st, sl_stats_verdict *v);

/* ---- traces ---- */

/* Start recording trace events for the whole pipeline of `it` (call on the root iterator),
 * at most max_events of them (<= 0: 1,000,000; about 40 bytes each); later events are
 * dropped and counted. With path non-NULL the trace is written there when the iterator is
 * closed. SL_EINVAL if tracing is already on; SL_ENOMEM. */
sl_status sl_iter_trace(sl_iter *it, const char *path, int64_t max_events);

/* Write the events recorded so far to path (tracing goes on). SL_EINVAL when tracing is
 * off; SL_EIO naming the path. */
sl_status sl_iter_trace_write(sl_iter *it, const char *path);

#ifdef __cplusplus
}
#endif
#endif
