/* Stats snapshots of a running pipeline, their JSON form (written by the trainer into its
 * run folder, read back by `sluice-stats --from`), and the bottleneck verdict.
 *
 * Workload: a snapshot every second or so of a graph of 5-50 ops with up to 256 history
 * points each; files of tens of KB, read back with core's JSON reader (sluice/json.h). */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"
#include "sluice/file.h"
#include "sluice/json.h"
#include "sluice/pool.h"
#include "sluice/stats.h"

#define NS 1e-9

sl_status sl_iter_stats(const sl_iter *it, sl_stats **out) {
    *out = NULL;
    sl_ictx *ctx = it->ctx;
    sl_stats *st = calloc(1, sizeof *st);
    if (!st) return sl_err(SL_ENOMEM, "out of memory for stats");
    pthread_mutex_lock(&ctx->nodes_mu);
    int n = ctx->nnodes;
    sl_op_node **nodes = malloc(sizeof *nodes * (size_t)(n ? n : 1));
    if (nodes) memcpy(nodes, ctx->nodes, sizeof *nodes * (size_t)n);
    pthread_mutex_unlock(&ctx->nodes_mu);
    if (!nodes || !(st->ops = calloc((size_t)(n ? n : 1), sizeof *st->ops))) {
        free(nodes);
        sl_stats_free(st);
        return sl_err(SL_ENOMEM, "out of memory for stats");
    }
    st->wall_s = (double)(sl_now_ns() - ctx->start_ns) * NS;
    st->next_s = (double)atomic_load(&ctx->root_next_ns) * NS;
    st->cpu_budget = ctx->ncpu;
    st->thread_budget = atomic_load(&ctx->thread_budget); /* before the ops: see autotune.c */
    st->ram_budget = ctx->opts.ram_budget;
    st->buffered_bytes_peak = atomic_load(&ctx->buffered_bytes_peak);
    st->n = n;
    for (int i = 0; i < n; i++) {
        sl_op_node *nd = nodes[i];
        sl_op_stats *c = &nd->stats;
        sl_op_stat *o = &st->ops[i];
        o->id = nd->id;
        o->parent = nd->parent;
        snprintf(o->label, sizeof o->label, "%s", nd->label);
        snprintf(o->op, sizeof o->op, "%s", nd->op);
        o->elements = atomic_load(&c->elements);
        o->bytes = atomic_load(&c->bytes);
        o->errors = atomic_load(&c->errors);
        o->busy_s = (double)atomic_load(&c->busy_ns) * NS;
        o->wait_s = (double)atomic_load(&c->wait_ns) * NS;
        o->blocked_s = (double)atomic_load(&c->blocked_ns) * NS;
        o->stall_s = (double)atomic_load(&c->stall_ns) * NS;
        o->empty_hits = atomic_load(&c->empty_hits);
        o->parallelism = atomic_load(&c->parallelism);
        o->threads = atomic_load(&c->threads);
        o->buffer = atomic_load(&c->buffer);
        long long ns = atomic_load(&c->occ_samples);
        o->buffered_avg = ns ? (double)atomic_load(&c->occ_sum) / 1000.0 / (double)ns
                             : (double)atomic_load(&c->buffered);
        o->buffered_bytes_peak = atomic_load(&c->buffered_bytes_peak);
        pthread_mutex_lock(&nd->tune_mu);
        o->tuned = nd->auto_par || nd->auto_buf;
        if (nd->nhist && (o->hist = calloc((size_t)nd->nhist, sizeof *o->hist))) {
            o->nhist = nd->nhist;
            for (int k = 0; k < nd->nhist; k++) {
                o->hist[k].t = nd->hist[k].t_ms / 1000.0;
                o->hist[k].parallelism = nd->hist[k].parallelism;
                o->hist[k].buffer = nd->hist[k].buffer;
                o->hist[k].buffered = nd->hist[k].buffered;
            }
        }
        pthread_mutex_unlock(&nd->tune_mu);
    }
    st->elements = n ? st->ops[0].elements : 0;
    free(nodes);
    *out = st;
    return SL_OK;
}

void sl_stats_free(sl_stats *st) {
    if (!st) return;
    for (int i = 0; i < st->n && st->ops; i++) free(st->ops[i].hist);
    free(st->ops);
    free(st);
}

/* ---- writing ---- */

static void print_stats(const sl_stats *st, FILE *f) {
    fprintf(f, "{\"format\": \"sluice-stats\", \"version\": 1,\n \"wall_s\": %.6f, \"next_s\": %.6f, "
               "\"elements\": %lld, \"cpu_budget\": %d, \"thread_budget\": %d, \"ram_budget\": %lld, \"buffered_bytes_peak\": %lld,\n"
               " \"ops\": [",
            st->wall_s, st->next_s, (long long)st->elements, st->cpu_budget, st->thread_budget,
            (long long)st->ram_budget,
            (long long)st->buffered_bytes_peak);
    for (int i = 0; i < st->n; i++) {
        const sl_op_stat *o = &st->ops[i];
        fprintf(f, "%s\n  {\"id\": %d, \"parent\": %d, \"label\": ", i ? "," : "", o->id, o->parent);
        sl_json_fput_str(f, o->label);
        fprintf(f, ", \"op\": ");
        sl_json_fput_str(f, o->op);
        fprintf(f, ", \"elements\": %lld, \"bytes\": %lld, \"errors\": %lld, \"busy_s\": %.6f, \"wait_s\": %.6f, "
                   "\"blocked_s\": %.6f, \"stall_s\": %.6f, \"empty_hits\": %lld, \"parallelism\": %d, "
                   "\"threads\": %d, \"buffer\": %d, \"tuned\": %s, \"buffered_avg\": %.4f, "
                   "\"buffered_bytes_peak\": %lld,\n   \"history\": [",
                (long long)o->elements, (long long)o->bytes, (long long)o->errors, o->busy_s, o->wait_s,
                o->blocked_s, o->stall_s, (long long)o->empty_hits, o->parallelism, o->threads, o->buffer,
                o->tuned ? "true" : "false", o->buffered_avg, (long long)o->buffered_bytes_peak);
        for (int k = 0; k < o->nhist; k++)
            fprintf(f, "%s[%.3f, %d, %d, %.3f]", k ? ", " : "", o->hist[k].t, o->hist[k].parallelism,
                    o->hist[k].buffer, o->hist[k].buffered);
        fprintf(f, "]}");
    }
    fprintf(f, "\n ]}");
}

sl_status sl_stats_fprint(const sl_stats *st, FILE *f) {
    print_stats(st, f);
    return ferror(f) ? sl_err(SL_EIO, "cannot write stats") : SL_OK;
}

sl_status sl_stats_save(const sl_stats *st, const char *path) {
    char tmp[4200];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return sl_err(SL_EINVAL, "stats file '%s': path too long", path);
    /* an existing path must be a regular file: rename() would replace a device or a FIFO */
    sl_status s = sl_file_check_regular(path, "stats file");
    if (s && s != SL_ENOTFOUND) return s;
    FILE *f;
    if ((s = sl_file_fopen_write(tmp, "w", "stats file", &f))) return s;
    print_stats(st, f);
    fputc('\n', f);
    if ((s = sl_file_fclose_write(f, path, "cannot write stats"))) {
        remove(tmp);
        return s;
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return sl_err_at(SL_EIO, path, -1, "cannot write stats: %s", strerror(e));
    }
    return SL_OK;
}

sl_status sl_stats_write_json(const sl_iter *it, const char *path) {
    sl_stats *st;
    sl_status s = sl_iter_stats(it, &st);
    if (s) return s;
    s = sl_stats_save(st, path);
    sl_stats_free(st);
    return s;
}

/* ---- reading ---- */

/* The file comes from outside: it is read whole under a byte limit (sl_file_read_all refuses
 * FIFOs, devices and directories at once), and core's JSON reader is given a memory budget
 * proportional to its size, so no input, however hostile, makes the reader allocate more
 * than about JSON_MEM_FACTOR times the file's size. */
#define JSON_MEM_FACTOR 16
#define JSON_MEM_SLACK (1u << 20)
#define MAX_OPS 65536          /* graphs have tens of ops; the verdict loops are per op */

/* A number of the file (true counts as 1, as the writer's "tuned" does), 0 when absent. */
static double jnum(const sl_json *o, const char *key) {
    const sl_json *v = sl_json_get(o, key);
    return !v ? 0 : v->kind == SL_JSON_NUMBER ? v->num : v->kind == SL_JSON_BOOL ? v->b : 0;
}

/* A double as an integer in [lo, hi] (out-of-range values are clamped: a float-to-int
 * conversion out of range would be undefined). */
static int64_t clamp_num(double d, int64_t lo, int64_t hi) {
    if (!(d >= (double)lo)) return lo;
    if (d >= (double)hi) return hi;
    return (int64_t)d;
}

static int64_t jint(const sl_json *o, const char *key, int64_t lo, int64_t hi) { return clamp_num(jnum(o, key), lo, hi); }

static const char *jstr(const sl_json *o, const char *key) {
    const sl_json *v = sl_json_get(o, key);
    return v && v->kind == SL_JSON_STRING ? v->str : "?";
}

static void read_op(const sl_json *o, int i, sl_op_stat *d) {
    const sl_json *h = sl_json_get(o, "history");
    d->id = i;
    /* parents come first; anything else is not ours */
    d->parent = (int)jint(o, "parent", -1, INT_MAX);
    if (d->parent >= i) d->parent = -1;
    snprintf(d->label, sizeof d->label, "%s", jstr(o, "label"));
    snprintf(d->op, sizeof d->op, "%s", jstr(o, "op"));
    d->elements = jint(o, "elements", INT64_MIN, INT64_MAX);
    d->bytes = jint(o, "bytes", INT64_MIN, INT64_MAX);
    d->errors = jint(o, "errors", INT64_MIN, INT64_MAX);
    d->busy_s = jnum(o, "busy_s");
    d->wait_s = jnum(o, "wait_s");
    d->blocked_s = jnum(o, "blocked_s");
    d->stall_s = jnum(o, "stall_s");
    d->empty_hits = jint(o, "empty_hits", INT64_MIN, INT64_MAX);
    d->parallelism = (int)jint(o, "parallelism", INT_MIN, INT_MAX);
    d->threads = (int)jint(o, "threads", INT_MIN, INT_MAX);
    d->buffer = (int)jint(o, "buffer", INT_MIN, INT_MAX);
    d->tuned = jnum(o, "tuned") != 0;
    d->buffered_avg = jnum(o, "buffered_avg");
    d->buffered_bytes_peak = jint(o, "buffered_bytes_peak", INT64_MIN, INT64_MAX);
    if (!h || h->kind != SL_JSON_ARRAY || h->len == 0 || !(d->hist = calloc(h->len, sizeof *d->hist))) return;
    for (size_t k = 0; k < h->len; k++) {
        const sl_json *p = &h->items[k];
        if (p->kind != SL_JSON_ARRAY || p->len < 4) continue;
        bool nums = true;
        for (int m = 0; m < 4; m++) nums = nums && p->items[m].kind == SL_JSON_NUMBER;
        if (!nums) continue;
        sl_stats_sample *q = &d->hist[d->nhist++];
        q->t = p->items[0].num;
        q->parallelism = (int)clamp_num(p->items[1].num, INT_MIN, INT_MAX);
        q->buffer = (int)clamp_num(p->items[2].num, INT_MIN, INT_MAX);
        q->buffered = p->items[3].num;
    }
}

sl_status sl_stats_load(const char *path, sl_stats **out) {
    return sl_stats_load_max(path, SL_STATS_MAX_BYTES, out);
}

sl_status sl_stats_load_max(const char *path, uint64_t max_bytes, sl_stats **out) {
    *out = NULL;
    char *buf;
    size_t n;
    char hint[160];
    snprintf(hint, sizeof hint, "stats files are a few KB to a few MB; to read a larger one raise the limit "
                                "(sluice-stats --max-bytes N)");
    sl_status s = sl_file_read_all(path, "stats file", max_bytes, hint, &buf, &n);
    if (s) return s;
    char limit[48];
    snprintf(limit, sizeof limit, "%d times the file's size", JSON_MEM_FACTOR);
    /* label bytes that are not UTF-8 are written as they are, so they are read so too */
    sl_json_opts jo = {
        .what = path, .prefix = "not a sluice-stats file: ", .end_name = "the end of the file",
        .max_bytes = n > (SIZE_MAX - JSON_MEM_SLACK) / JSON_MEM_FACTOR ? SIZE_MAX : n * JSON_MEM_FACTOR + JSON_MEM_SLACK,
        .max_bytes_text = limit,
        .max_bytes_hint = "stats files are a few objects per op; this one is built to exhaust memory, or damaged",
        .flags = SL_JSON_RAW_BYTES};
    sl_json *root = NULL;
    s = sl_json_parse_opts(buf, n, &jo, &root);
    free(buf);
    if (s) return s;
    sl_stats *st = NULL;
    const sl_json *top = root, *wrapped = sl_json_get(root, "stats"); /* sluice-stats --json wraps it */
    if (wrapped && wrapped->kind == SL_JSON_OBJECT) top = wrapped;
    const sl_json *fmt = sl_json_get(top, "format"), *ops = sl_json_get(top, "ops");
    if (!fmt || fmt->kind != SL_JSON_STRING || strcmp(fmt->str, "sluice-stats") || jnum(top, "version") != 1 || !ops ||
        ops->kind != SL_JSON_ARRAY) {
        s = sl_err_at(SL_ECORRUPT, path, 0, "not a sluice-stats file: no \"format\": \"sluice-stats\", \"version\": 1 and \"ops\"");
        sl_err_hint("write it with sl_stats_write_json (or sluice-stats --json)");
        goto done;
    }
    if (ops->len > MAX_OPS) {
        s = sl_err_at(SL_ECORRUPT, path, -1, "not a sluice-stats file: %zu ops, more than %d", ops->len, MAX_OPS);
        goto done;
    }
    if (!(st = calloc(1, sizeof *st)) || !(st->ops = calloc(ops->len ? ops->len : 1, sizeof *st->ops))) {
        s = sl_err(SL_ENOMEM, "out of memory reading %s", path);
        goto done;
    }
    st->wall_s = jnum(top, "wall_s");
    st->next_s = jnum(top, "next_s");
    st->elements = jint(top, "elements", INT64_MIN, INT64_MAX);
    st->cpu_budget = (int)jint(top, "cpu_budget", 0, INT_MAX);
    st->thread_budget = (int)jint(top, "thread_budget", 0, INT_MAX);
    st->ram_budget = jint(top, "ram_budget", INT64_MIN, INT64_MAX);
    st->buffered_bytes_peak = jint(top, "buffered_bytes_peak", INT64_MIN, INT64_MAX);
    st->n = (int)ops->len;
    for (int i = 0; i < st->n; i++) read_op(&ops->items[i], i, &st->ops[i]);
done:
    sl_json_free(root);
    if (s) {
        sl_stats_free(st);
        return s;
    }
    *out = st;
    return SL_OK;
}

/* ---- shares and the verdict ---- */

/* The op's parallelism averaged over the run (autotune changes it), from its history. */
static double lanes(const sl_stats *st, const sl_op_stat *o) {
    if (o->parallelism <= 0) return 1;
    double sum = 0, span = 0;
    for (int k = 0; k < o->nhist; k++) {
        double t1 = k + 1 < o->nhist ? o->hist[k + 1].t : st->wall_s;
        if (t1 <= o->hist[k].t || o->hist[k].parallelism <= 0) continue;
        sum += o->hist[k].parallelism * (t1 - o->hist[k].t);
        span += t1 - o->hist[k].t;
    }
    return span > 0 ? sum / span : o->parallelism;
}

static double share(const sl_stats *st, const sl_op_stat *o, double t) {
    if (st->wall_s <= 0) return 0;
    double v = t / (st->wall_s * lanes(st, o));
    return v < 0 ? 0 : v > 1 ? 1 : v;
}

double sl_stats_busy(const sl_stats *st, const sl_op_stat *op) { return share(st, op, op->busy_s); }
double sl_stats_waiting(const sl_stats *st, const sl_op_stat *op) { return share(st, op, op->wait_s); }
double sl_stats_blocked(const sl_stats *st, const sl_op_stat *op) { return share(st, op, op->blocked_s); }

static bool is_source(const char *op) {
    return !strcmp(op, "tfrecord") || !strcmp(op, "range") || !strcmp(op, "list_files");
}

static void advise(const sl_stats *st, const sl_op_stat *o, char *out, size_t cap) {
    const char *op = o->op;
    if (!strcmp(op, "map") || !strcmp(op, "map_batch")) {
        if (o->tuned && o->parallelism >= st->cpu_budget)
            snprintf(out, cap, "it already runs on the whole CPU budget (%d): make its function cheaper "
                               "(decode at a reduced size, drop work), or give the pipeline more cores "
                               "(cpu_budget)", st->cpu_budget);
        else if (o->tuned)
            snprintf(out, cap, "autotune holds it at %d of %d cores: other ops need the rest; make its "
                               "function cheaper or raise cpu_budget", o->parallelism, st->cpu_budget);
        else
            snprintf(out, cap, "raise its parallelism (now %d; e.g. parallel=auto so autotune chooses, up "
                               "to %d cores), or make its function cheaper", o->parallelism, st->cpu_budget);
    } else if (!strcmp(op, "interleave") && o->parallelism > 0 && sl_stats_blocked(st, o) > 0.5) {
        snprintf(out, cap, "its readers are ahead (blocked on full buffers %.0f%% of the time): the cost is "
                           "handing records over one at a time on the consumer's side; a larger block "
                           "length, or fewer, larger records, lowers it", 100 * sl_stats_blocked(st, o));
    } else if (!strcmp(op, "interleave")) {
        snprintf(out, cap, "read more inputs at once: raise interleave's parallel (now %d%s) and cycle; "
                           "check the storage's read rate", o->parallelism, o->tuned ? ", chosen by autotune" : "; or auto");
    } else if (is_source(op)) {
        snprintf(out, cap, "the source cannot deliver faster: read several files at once (files with "
                           "interleave parallel=auto), use faster storage, or cache the records");
    } else if (!strcmp(op, "batch")) {
        snprintf(out, cap, "batching copies every element: put the batch right after a map so they fuse "
                           "(map_batch writes elements straight into the batch)");
    } else if (!strcmp(op, "shuffle")) {
        snprintf(out, cap, "the shuffle buffer moves elements one at a time: shuffle file names or "
                           "records before the expensive maps, or use a smaller buffer");
    } else if (!strcmp(op, "filter")) {
        snprintf(out, cap, "its predicate is slow and runs on one thread: filter earlier (before the "
                           "expensive ops) or move the test into a parallel map");
    } else {
        snprintf(out, cap, "this op runs on one thread: make it cheaper, or move its work into a map "
                           "with parallel=auto");
    }
}

int sl_stats_bottleneck(const sl_stats *st, sl_stats_verdict *v) {
    memset(v, 0, sizeof *v);
    v->op = SL_VERDICT_NONE;
    if (st->n == 0 || st->wall_s <= 0 || st->elements == 0) {
        snprintf(v->summary, sizeof v->summary, "no verdict: the pipeline produced nothing yet");
        return v->op;
    }
    double inside = st->next_s / st->wall_s;
    double rate = (double)st->elements / st->wall_s;
    if (inside < 0.15) {
        v->op = SL_VERDICT_CONSUMER;
        snprintf(v->summary, sizeof v->summary,
                 "the pipeline is not the bottleneck: input is ready, the consumer is slow");
        snprintf(v->evidence, sizeof v->evidence,
                 "the consumer spent %.0f%% of the time waiting inside next() (%.1f elements/s); "
                 "%.0f%% went to its own work between calls",
                 100 * inside, rate, 100 * (1 - inside));
        snprintf(v->advice, sizeof v->advice,
                 "speed up the consumer (the training step); the pipeline could even use fewer cores "
                 "(cpu_budget) to leave more to it");
        return v->op;
    }
    int best = -1;
    double bu = -1;
    for (int i = 0; i < st->n; i++) {
        double u = sl_stats_busy(st, &st->ops[i]);
        if (u >= bu - 1e-9) { /* ties: the later (nearer the source) op */
            bu = u;
            best = i;
        }
    }
    const sl_op_stat *o = &st->ops[best];
    if (bu < SL_STATS_SATURATED) {
        /* The consumer waits, yet no op's lanes are even half busy: no op's throughput is
         * the limit. The time goes to latency (the source waiting on storage, a chain of
         * single-threaded hand-offs with no buffer in between), not to work. */
        v->op = SL_VERDICT_UNSATURATED;
        snprintf(v->summary, sizeof v->summary, "no op is saturated");
        if (inside < 0.5) {
            snprintf(v->evidence, sizeof v->evidence,
                     "the busiest op, '%s' (%s), is busy %.0f%% of its lanes' time (under %.0f%%); the "
                     "consumer waited inside next() %.0f%% of the time and spent %.0f%% on its own work "
                     "between calls (%.1f elements/s): the consumer limits the throughput more than any op",
                     o->label, o->op, 100 * bu, 100 * SL_STATS_SATURATED, 100 * inside, 100 * (1 - inside), rate);
            snprintf(v->advice, sizeof v->advice,
                     "speed up the consumer (the training step) first; then a prefetch (buffer=auto) before "
                     "the consumer hides the rest of its wait; more threads for an op would not help");
        } else {
            int ahead = -1; /* an op whose producers sit on full buffers: the wait is downstream of it */
            for (int i = 0; i < st->n; i++)
                if (sl_stats_blocked(st, &st->ops[i]) > 0.5 &&
                    (ahead < 0 || sl_stats_blocked(st, &st->ops[i]) > sl_stats_blocked(st, &st->ops[ahead])))
                    ahead = i;
            if (ahead >= 0) {
                const sl_op_stat *a = &st->ops[ahead];
                snprintf(v->evidence, sizeof v->evidence,
                         "the busiest op, '%s' (%s), is busy %.0f%% of its lanes' time (under %.0f%%), yet the "
                         "consumer waited inside next() %.0f%% of the time (%.1f elements/s), while '%s' is "
                         "blocked on full buffers %.0f%% of the time: the time goes to handing elements over "
                         "one at a time between the ops above it, not to any op's work",
                         o->label, o->op, 100 * bu, 100 * SL_STATS_SATURATED, 100 * inside, rate, a->label,
                         100 * sl_stats_blocked(st, a));
                snprintf(v->advice, sizeof v->advice,
                         "fewer, larger elements between those ops: a larger interleave block, batch earlier, "
                         "or fuse maps into one; more threads would not help");
                return v->op;
            }
            snprintf(v->evidence, sizeof v->evidence,
                     "the busiest op, '%s' (%s), is busy %.0f%% of its lanes' time (under %.0f%%), yet the "
                     "consumer waited inside next() %.0f%% of the time (%.1f elements/s): the pipeline is "
                     "limited by latency (its source waiting on storage, or one-at-a-time hand-offs "
                     "between ops), not by any op's work",
                     o->label, o->op, 100 * bu, 100 * SL_STATS_SATURATED, 100 * inside, rate);
            snprintf(v->advice, sizeof v->advice,
                     "overlap the waits: add a prefetch (buffer=auto) before the consumer, read several "
                     "files at once (interleave parallel=auto); more threads for a busy op would not help");
        }
        return v->op;
    }
    v->op = best;
    snprintf(v->summary, sizeof v->summary, "bottleneck: op '%s' (%s)", o->label, o->op);
    char par[64] = "the time";
    if (o->parallelism > 1) snprintf(par, sizeof par, "its %d threads' time", o->parallelism);
    double second = 0;
    for (int i = 0; i < st->n; i++)
        if (i != best && sl_stats_busy(st, &st->ops[i]) > second) second = sl_stats_busy(st, &st->ops[i]);
    snprintf(v->evidence, sizeof v->evidence,
             "busy %.0f%% of %s, waiting on its input %.0f%%; the consumer waited inside next() "
             "%.0f%% of the time (%.1f elements/s); the next busiest op is at %.0f%%",
             100 * bu, par, 100 * sl_stats_waiting(st, o), 100 * inside, rate, 100 * second);
    advise(st, o, v->advice, sizeof v->advice);
    return v->op;
}
