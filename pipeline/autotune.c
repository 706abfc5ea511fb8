/* Autotune: a background thread per root iterator that chooses every SL_AUTO parallelism
 * (map, map_batch, interleave) and buffer (prefetch, the runner's result slots) while the
 * pipeline runs, and samples buffer occupancy and the choices into each op's history.
 *
 * The model (tf.data's, simplified to what the stats measure): the graph is cut into
 * stages, each run by its own threads — the consumer's thread, a prefetch's producer, a
 * runner op's workers (lanes = parallelism) and its serial input fetch (lanes = 1), a
 * parallel interleave's readers (lanes = parallelism). An op's busy time over a window,
 * divided by the root's outputs in the window, is its work per output element; a stage's
 * work W is the sum over its ops. A runner's workers also run its serial fetch stage (F),
 * one unit each, so with L lanes they need (W + F) / L per output. The pipeline can deliver
 * at most
 *     X = min( cpu_budget / sum(W),  1 / W(serial stage),  L_max / (W + F)(tunable stage) )
 * outputs per unit time, and each tunable stage gets L = ceil(1.1 * X * (W + F)) lanes. If
 * that sums above the CPU budget, lanes are taken back from the stage with the most slack
 * while it keeps L >= X * (W + F), then from the largest. In that sum an interleave counts
 * the cores its readers need at X (not one per reader: a reader needing 0.6 of a core,
 * counted whole, cut a parse-heavy map_batch on 2 cores from 2 lanes to 1, ~20% slower),
 * a runner lane its share of a core (below).
 *
 * CPU budget and oversubscription: the budget counts cores kept busy. The tuner compares
 * the pipeline's busy wall time with the process's CPU time over the window: when other
 * processes deschedule its threads (a shared machine), each thread gets only 1/f of a core
 * (f in [1, 2], smoothed), so keeping `cpu_budget` cores busy takes cpu_budget x f threads
 * and X uses cpu_budget x f in place of cpu_budget. The thread budget round(cpu_budget x f)
 * (>= cpu_budget; in the stats as thread_budget) bounds the sum of tuned parallelism; auto
 * ops start 2 x cpu_budget threads (the idle ones sleep) to have room. On an idle machine,
 * or when the process does other CPU work (a trainer's step), f is 1 and the sum stays
 * within cpu_budget. Runner workers waiting in their fetch for an asynchronous input use
 * no core either: a runner whose workers spend a share q of their time so gets 1 / (1 - q)
 * (at most 2) times the lanes, each counted as 1 - q of a core, and the thread budget grows
 * by those lanes (to at most 2 x cpu_budget). Time queued for the input lock while another
 * worker fetches is left out of q: more lanes only lengthen that queue. One more exception: a parallel interleave whose readers need under half
 * a core (X * W < 0.5: they mostly wait on storage) keeps its one thread without counting.
 *
 * Work that blocks (a map whose function reads from storage or a remote service, or sleeps):
 * runner workers sample, about every 10 ms, one unit's thread CPU time and run-queue wait
 * around its work (runner.c). The rest of the unit's wall time was spent blocked in the
 * function and needs no core: a runner's work W splits into W x need (CPU, descheduled
 * included) and W x (1 - need) (blocked). X's CPU bound uses only the first part, the
 * lanes still come from all of W (so a stage that mostly waits gets many lanes), each lane
 * counts as need of a core against the budget, and those blocked lanes (floor of
 * L x (1 - need) per stage) are added to the thread budget's limit: with need 0.05, a map
 * waiting on I/O takes all its threads (2 x cpu_budget) while using a tenth of a core. A
 * runner whose one lane needs under half a core is not counted against the cores either,
 * as the light interleave above. The descheduling factor f leaves the blocked time out.
 *
 * Buffers: a map keeps 2L + 2 result slots (a map_batch L + 1: its results are batches); a
 * prefetch starts at 2 and doubles (up to 64) while its consumer finds it empty on more
 * than 10% of calls and its producer spent at least 10% of the window blocked on a full
 * buffer (the stream is bursty: a deeper buffer absorbs it).
 * RAM budget: the sum over tuned buffers of capacity x the op's mean element bytes, plus
 * the bytes held in untuned buffers (shuffle), must fit ram_budget; if not, prefetch
 * buffers shrink first, then slots, then parallelism. Buffered ops also refuse to take an
 * element while the pipeline's buffered bytes are at the budget (pipeline/dataset.c
 * sl__ram_full), unless their buffer is empty: so buffered bytes never exceed
 * ram_budget + one element per tuned buffered op + the units in flight in runner workers
 * (one per active worker). That is the stated constant.
 *
 * Schedule: the thread wakes every 20 ms to sample buffer occupancy; it re-optimizes every
 * 50 ms at first and backs off by 1.5x (to 1.5 s) each time nothing changes, returning to
 * 50 ms when a choice changes. It runs for every pipeline (for the history), tuning only
 * ops with SL_AUTO. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipeline/internal.h"
#include "sluice/pool.h"

#define MAX_NODES 256
#define SAMPLE_MS 20
#define TUNE_MIN_MS 50
#define TUNE_MAX_MS 1500
#define PF_MAX 64

struct sl_tuner {
    sl_ictx *ctx;
    pthread_t thread;
    pthread_mutex_t mu;   /* guards stop */
    pthread_cond_t cv;
    bool stop;
    /* tuner-thread only */
    long long prev_busy[MAX_NODES], prev_blocked[MAX_NODES], prev_hits[MAX_NODES], prev_elems[MAX_NODES];
    long long prev_occ_sum[MAX_NODES], prev_occ_n[MAX_NODES], prev_wait[MAX_NODES], prev_lockq[MAX_NODES];
    double idle_f[MAX_NODES]; /* runner: 1 / (1 - share of a worker's time idle in the fetch), smoothed */
    long long prev_sw[MAX_NODES], prev_sc[MAX_NODES], prev_sr[MAX_NODES];
    double need[MAX_NODES];   /* runner: share of its work's wall time that needs a core, smoothed (0: unknown) */
    long long prev_root;
    uint64_t prev_t;      /* when the current window started */
    uint64_t prev_cpu;    /* the process's CPU time then */
    double desched;       /* wall-busy / CPU time of the pipeline's threads, smoothed, in [1, 2] */
    int interval_ms;
};

/* ---- attach / detach ---- */

void sl__tune_attach(sl_iter *it, bool auto_par, bool auto_buf, int max_par, const sl_tune_ops *ops) {
    sl_op_node *n = it->node;
    pthread_mutex_lock(&n->tune_mu);
    n->target = it;
    n->tops = ops;
    n->auto_par = auto_par;
    n->auto_buf = auto_buf;
    n->max_par = max_par;
    if (n->nhist == 0) sl__node_sample_locked(it->ctx, n, 0);
    pthread_mutex_unlock(&n->tune_mu);
}

void sl__tune_detach(sl_iter *it) {
    sl_op_node *n = it->node;
    pthread_mutex_lock(&n->tune_mu);
    if (n->target == it) n->target = NULL;
    pthread_mutex_unlock(&n->tune_mu);
}

void sl__node_sample_locked(sl_ictx *ctx, sl_op_node *n, float buffered) {
    if (++n->hist_skip < n->hist_every && n->nhist > 0) return;
    n->hist_skip = 0;
    if (n->nhist == SL_OP_HISTORY) { /* keep every other point, record half as often */
        for (int k = 0; k < SL_OP_HISTORY / 2; k++) n->hist[k] = n->hist[2 * k + 1];
        n->nhist = SL_OP_HISTORY / 2;
        n->hist_every *= 2;
    }
    sl_op_sample *s = &n->hist[n->nhist++];
    uint64_t ms = (sl_now_ns() - ctx->start_ns) / 1000000;
    s->t_ms = ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
    int p = atomic_load(&n->stats.parallelism), b = atomic_load(&n->stats.buffer);
    s->parallelism = (int16_t)(p > INT16_MAX ? INT16_MAX : p);
    s->buffer = (int16_t)(b > INT16_MAX ? INT16_MAX : b);
    s->buffered = buffered;
}

/* ---- the model ---- */

enum { ST_SERIAL, ST_RUNNER, ST_INTERLEAVE };

typedef struct {
    int kind;
    int node;      /* the op whose threads run the stage (-1: the consumer) */
    double work;   /* ns of busy time per root output */
    double cpu_work; /* of it, the time that needs a core (a runner's work blocked in its function does not) */
    int lanes;     /* chosen */
} stage;

static bool is_runner(const sl_op_node *n) { return !strcmp(n->op, "map") || !strcmp(n->op, "map_batch"); }

typedef struct {
    int n;
    sl_op_node *nodes[MAX_NODES];
    int own[MAX_NODES], below[MAX_NODES], below_elem[MAX_NODES];
    stage st[3 * MAX_NODES + 1];
    int nst;
} model;

int sl__ctx_nodes(sl_ictx *ctx, sl_op_node **out, int cap) {
    pthread_mutex_lock(&ctx->nodes_mu);
    int n = ctx->nnodes;
    for (int i = 0; i < n && i < cap; i++) out[i] = ctx->nodes[i];
    pthread_mutex_unlock(&ctx->nodes_mu);
    return n;
}

static int new_stage(model *m, int kind, int node) {
    stage *s = &m->st[m->nst];
    s->kind = kind;
    s->node = node;
    s->work = 0;
    s->cpu_work = 0;
    s->lanes = 1;
    return m->nst++;
}

/* Assign every node's busy time to a stage (parents come before children). */
static void build_stages(model *m) {
    m->nst = 0;
    int consumer = new_stage(m, ST_SERIAL, -1);
    for (int i = 0; i < m->n; i++) {
        sl_op_node *n = m->nodes[i];
        int inherited = consumer;
        if (n->parent >= 0 && n->parent < i)
            inherited = n->input == -1 ? m->below_elem[n->parent] : m->below[n->parent];
        m->own[i] = inherited;
        m->below[i] = inherited;
        m->below_elem[i] = inherited;
        int threads = atomic_load(&n->stats.threads);
        if (is_runner(n)) {
            m->own[i] = new_stage(m, ST_RUNNER, i);
            m->below[i] = new_stage(m, ST_SERIAL, i);
        } else if (!strcmp(n->op, "prefetch")) {
            m->below[i] = new_stage(m, ST_SERIAL, i);
        } else if (!strcmp(n->op, "interleave") && threads > 0) {
            m->below_elem[i] = new_stage(m, ST_INTERLEAVE, i);
        }
    }
}

static bool tunable(const model *m, const stage *s) {
    if (s->kind == ST_SERIAL) return false;
    sl_op_node *n = m->nodes[s->node];
    return n->auto_par && n->max_par > 1;
}

/* Each node's counters since the last step into the d* arrays (and the tuner's previous
 * values); each node's busy time per root element onto its stage's work; the summed busy
 * time and the part of it blocked inside functions (no core needed) into *sumbusy and
 * *blocked_in_work. */
static void measure(struct sl_tuner *t, model *m, long long droot, long long *dbusy, long long *dblk,
                    long long *dhits, long long *delem, long long *dwait, long long *dlockq, double *sumbusy,
                    double *blocked_in_work) {
    for (int i = 0; i < m->n; i++) {
        sl_op_stats *c = &m->nodes[i]->stats;
        long long b = atomic_load(&c->busy_ns), k = atomic_load(&c->blocked_ns), h = atomic_load(&c->empty_hits),
                  e = atomic_load(&c->elements), w = atomic_load(&c->wait_ns);
        dbusy[i] = b - t->prev_busy[i];
        dwait[i] = w - t->prev_wait[i];
        t->prev_wait[i] = w;
        long long lq = atomic_load(&c->lockq_ns);
        dlockq[i] = lq - t->prev_lockq[i];
        t->prev_lockq[i] = lq;
        dblk[i] = k - t->prev_blocked[i];
        dhits[i] = h - t->prev_hits[i];
        delem[i] = e - t->prev_elems[i];
        t->prev_busy[i] = b;
        t->prev_blocked[i] = k;
        t->prev_hits[i] = h;
        t->prev_elems[i] = e;
        /* runner work blocked inside the function (I/O, sleeps): from the sampled units,
         * wall - CPU - run-queue wait. Such time needs no core */
        long long sw = atomic_load(&c->samp_wall_ns), sc = atomic_load(&c->samp_cpu_ns), sr = atomic_load(&c->samp_rq_ns);
        double dsw = (double)(sw - t->prev_sw[i]), need = (double)(sc - t->prev_sc[i] + sr - t->prev_sr[i]);
        t->prev_sw[i] = sw;
        t->prev_sc[i] = sc;
        t->prev_sr[i] = sr;
        if (dsw >= 2e6) { /* 2 ms of sampled work: enough to update */
            need = need / dsw;
            need = need < 0.02 ? 0.02 : need > 1 ? 1 : need;
            t->need[i] = t->need[i] > 0 ? 0.5 * t->need[i] + 0.5 * need : need;
        }
        double nd = t->need[i] > 0 ? t->need[i] : 1;
        m->st[m->own[i]].work += (double)dbusy[i] / (double)droot;
        m->st[m->own[i]].cpu_work += nd * (double)dbusy[i] / (double)droot;
        *sumbusy += (double)dbusy[i];
        *blocked_in_work += (1 - nd) * (double)dbusy[i];
    }
}

/* Each node's parallelism and buffer: the tuned stages' lanes, a runner's buffer from its
 * lanes, a prefetch's buffer doubled when the consumer often found it empty in a window in
 * which its producer also waited on a full one; everything else as it is now. */
static void choose(const model *m, const long long *dblk, const long long *dhits, const long long *delem,
                   double window, int *par, int *buf) {
    for (int i = 0; i < m->n; i++) {
        sl_op_node *n = m->nodes[i];
        par[i] = atomic_load(&n->stats.parallelism);
        buf[i] = atomic_load(&n->stats.buffer);
    }
    for (int k = 0; k < m->nst; k++) {
        const stage *s = &m->st[k];
        if (!tunable(m, s)) continue;
        par[s->node] = s->lanes;
        /* map: room for out-of-order results; map_batch's results are whole batches: one spare */
        if (s->kind == ST_RUNNER && m->nodes[s->node]->auto_buf)
            buf[s->node] = strcmp(m->nodes[s->node]->op, "map_batch") ? 2 * s->lanes + 2 : s->lanes + 1;
    }
    for (int i = 0; i < m->n; i++) {
        sl_op_node *n = m->nodes[i];
        if (strcmp(n->op, "prefetch") || !n->auto_buf || delem[i] <= 0) continue;
        /* the consumer often found it empty although the producer spent >= 10% of the window
         * blocked on a full buffer: bursts a deeper buffer would absorb */
        if (dhits[i] * 10 > delem[i] && (double)dblk[i] >= 0.1 * window && buf[i] < PF_MAX) buf[i] *= 2;
    }
}

/* The RAM budget: buffers shrink until the buffered bytes (each node's elements at their
 * mean size) fit ctx->opts.ram_budget: prefetches first, then runners down to their
 * parallelism, then runners to 1 (their parallelism with them). */
static void fit_ram(const sl_ictx *ctx, const model *m, int *par, int *buf) {
    double fixed = 0, tuned = 0, per[MAX_NODES];
    for (int i = 0; i < m->n; i++) {
        sl_op_node *n = m->nodes[i];
        long long e = atomic_load(&n->stats.elements);
        per[i] = e > 0 ? (double)atomic_load(&n->stats.bytes) / (double)e : 0;
        bool buffered = buf[i] > 0 && (n->auto_buf || n->auto_par);
        if (buffered) tuned += buf[i] * per[i];
        else fixed += (double)atomic_load(&n->stats.buffered_bytes);
    }
    double budget = (double)ctx->opts.ram_budget;
    for (int pass = 0; pass < 3 && fixed + tuned > budget; pass++) {
        for (int i = 0; i < m->n && fixed + tuned > budget; i++) {
            sl_op_node *n = m->nodes[i];
            if (!n->auto_buf || per[i] <= 0) continue;
            bool runner = is_runner(n);
            if (pass == 0 && !runner) { /* prefetch first */
                double over = fixed + tuned - budget;
                int drop = (int)ceil(over / per[i]);
                int nb = buf[i] - drop < 1 ? 1 : buf[i] - drop;
                tuned -= (buf[i] - nb) * per[i];
                buf[i] = nb;
            } else if (pass >= 1 && runner) {
                int minb = pass == 1 ? par[i] : 1;
                double over = fixed + tuned - budget;
                int drop = (int)ceil(over / per[i]);
                int nb = buf[i] - drop < minb ? minb : buf[i] - drop;
                if (nb < 1) nb = 1;
                tuned -= (buf[i] - nb) * per[i];
                buf[i] = nb;
                if (pass == 2 && n->auto_par && par[i] > nb) par[i] = nb;
            }
        }
    }
}

/* Hand the choices to the ops through their tune hooks, decreases first, so the sum never
 * passes the thread budget on the way. True if any changed. */
static bool apply(const model *m, const int *par, const int *buf) {
    bool changed = false;
    for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < m->n; i++) {
        sl_op_node *n = m->nodes[i];
        pthread_mutex_lock(&n->tune_mu);
        int cur = atomic_load(&n->stats.parallelism);
        if (n->target && n->tops && (pass == 0) == (par[i] < cur)) {
            if (n->auto_par && n->tops->set_parallelism && par[i] != cur) {
                n->tops->set_parallelism(n->target, par[i]);
                changed = true;
            }
            if (n->auto_buf && n->tops->set_buffer && buf[i] > 0 && buf[i] != atomic_load(&n->stats.buffer)) {
                n->tops->set_buffer(n->target, buf[i]);
                changed = true;
            }
        }
        pthread_mutex_unlock(&n->tune_mu);
    }
    return changed;
}

/* The throughput (root elements per ns) the budget of `cores` and the serial stages allow;
 * each stage's lane work (a runner's includes its serial fetch) into lanework[] and the
 * share of it that needs a core into cpuw[]. */
static double throughput(const model *m, double cores, double *lanework, double *cpuw) {
    double total = 0, x = INFINITY;
    for (int k = 0; k < m->nst; k++) total += m->st[k].cpu_work;
    for (int k = 0; k < m->nst; k++) {
        const stage *s = &m->st[k];
        lanework[k] = s->work;
        double lanecpu = s->cpu_work;
        if (s->kind == ST_RUNNER) {
            lanework[k] += m->st[m->below[s->node]].work;
            lanecpu += m->st[m->below[s->node]].cpu_work;
        }
        /* the share of a lane's time that needs a core */
        cpuw[k] = lanework[k] > 0 ? lanecpu / lanework[k] : 1;
        if (lanework[k] <= 0) continue;
        if (s->kind == ST_SERIAL) x = fmin(x, 1.0 / s->work);
        else if (!tunable(m, s)) x = fmin(x, atomic_load(&m->nodes[s->node]->stats.parallelism) / lanework[k]);
        else x = fmin(x, m->nodes[s->node]->max_par / lanework[k]);
    }
    if (total > 0) x = fmin(x, cores / total);
    return x;
}

/* Each stage's lane factor qf[] (see optimize): 1, or for a runner 1 / (1 - q) for the
 * share q of its workers' time spent idle at the input (capped at 2, smoothed in
 * t->idle_f): waiting inside the fetch for an asynchronous input, not queued for the input
 * lock while another worker fetches — that queue only grows with more lanes (on 2 cores a
 * parse-heavy map_batch ran 13% slower at 3 lanes than at 2, which it was given). */
static void idle_factors(struct sl_tuner *t, const model *m, long long droot, const long long *dbusy,
                         const long long *dwait, const long long *dlockq, double *qf) {
    for (int k = 0; k < m->nst; k++) {
        const stage *s = &m->st[k];
        qf[k] = 1;
        if (s->kind != ST_RUNNER) continue;
        int i = s->node;
        double tot = (double)(dwait[i] + dbusy[i]);
        double idle = (double)(dwait[i] - dlockq[i]) - m->st[m->below[i]].work * (double)droot;
        double q = tot > 0 && idle > 0 ? idle / tot : 0, f1 = q < 0.5 ? 1 / (1 - q) : 2;
        t->idle_f[i] = t->idle_f[i] > 0 ? 0.5 * t->idle_f[i] + 0.5 * f1 : f1;
        qf[k] = t->idle_f[i];
    }
}

/* The cores l lanes of stage s keep busy at throughput x: an interleave's readers what they
 * need at x (at most one each), a runner lane its share cpuw / qf of a core. */
static double stage_cores(const stage *s, int l, double x, double lanework, double cpuw, double qf) {
    if (s->kind == ST_INTERLEAVE && isfinite(x)) return fmin(l, x * lanework);
    return l * cpuw / qf;
}

/* One optimization step: returns true if any choice changed. */
static bool optimize(struct sl_tuner *t, model *m) {
    sl_ictx *ctx = t->ctx;
    m->n = sl__ctx_nodes(ctx, m->nodes, MAX_NODES);
    if (m->n > MAX_NODES) m->n = MAX_NODES;
    if (m->n == 0) return false;
    long long root = atomic_load(&m->nodes[0]->stats.elements);
    long long droot = root - t->prev_root;
    if (droot < 2) return false; /* not enough to measure: keep the window open */
    uint64_t tnow = sl_now_ns();
    double window = (double)(tnow - (t->prev_t ? t->prev_t : ctx->start_ns));
    t->prev_t = tnow;
    struct timespec cts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cts);
    uint64_t cpu_now = (uint64_t)cts.tv_sec * 1000000000u + (uint64_t)cts.tv_nsec;
    double dcpu = (double)(cpu_now - t->prev_cpu);
    t->prev_cpu = cpu_now;
    build_stages(m);
    long long dbusy[MAX_NODES], dblk[MAX_NODES], dhits[MAX_NODES], delem[MAX_NODES], dwait[MAX_NODES],
        dlockq[MAX_NODES];
    double sumbusy = 0, blocked_in_work = 0;
    measure(t, m, droot, dbusy, dblk, dhits, delem, dwait, dlockq, &sumbusy, &blocked_in_work);
    t->prev_root = root;
    /* how much less CPU the busy threads got than their busy wall time: > 1 when other
     * processes deschedule them. The budget counts cores kept busy, so it then takes more
     * threads to use it; anything else in the process using CPU only lowers this */
    double f = dcpu > 0 ? (sumbusy - blocked_in_work) / dcpu : 1;
    /* ... but not what the pipeline's own threads cause: with R of them busy on average on C
     * cores they get C / R of a core each even on an idle machine */
    double runnable = window > 0 ? (sumbusy - blocked_in_work) / window : 0, ncores = sl_cpu_count();
    if (runnable > ncores) f /= runnable / ncores;
    f = f < 1 ? 1 : f > 2 ? 2 : f;
    t->desched = t->desched > 0 ? 0.5 * t->desched + 0.5 * f : f;
    double cores = ctx->ncpu * t->desched;
    int tbudget = (int)lround(cores), tmax = 2 * ctx->ncpu;
    if (tbudget < ctx->ncpu) tbudget = ctx->ncpu;
    int old_tb = atomic_load(&ctx->thread_budget);

    /* the throughput the budget and the serial stages allow. A runner's workers also do its
     * serial fetch, one unit at a time each: with L workers a unit costs (fetch + work) / L,
     * and the fetch alone bounds it at 1 / fetch. */
    double lanework[3 * MAX_NODES + 1], cpuw[3 * MAX_NODES + 1];
    double x = throughput(m, cores, lanework, cpuw);
    /* A runner's workers take turns at the serial fetch. Its time is the serial stage's
     * work plus time that uses no core: queued for the input lock while another worker
     * fetches, or waiting for an asynchronous input (a parallel interleave's readers, a
     * prefetch). With a share q of a worker's time idle so, L workers keep L (1 - q) cores
     * busy: the stage needs qf = 1 / (1 - q) times the lanes and counts each lane as 1 / qf
     * of a core against the budget. qf is capped at 2 (the thread budget's limit), so the
     * lanes cannot run away when the input is the bottleneck and extra workers only wait. */
    double qf[3 * MAX_NODES + 1];
    idle_factors(t, m, droot, dbusy, dwait, dlockq, qf);
    int sum = 0, ntun = 0, waiting = 0;
    double eff = 0; /* cores the chosen lanes keep busy */
    bool light[3 * MAX_NODES + 1] = {0}; /* needs under half a core: its one thread is not counted */
    bool light1[3 * MAX_NODES + 1] = {0}; /* a runner's one lane needing under half a core: no core counted */
    for (int k = 0; k < m->nst; k++) {
        stage *s = &m->st[k];
        if (!tunable(m, s)) continue;
        ntun++;
        light[k] = s->kind == ST_INTERLEAVE && isfinite(x) && x * lanework[k] < 0.5;
        double need = isfinite(x) ? 1.1 * x * lanework[k] * qf[k] : 1;
        int l = (int)ceil(need - 1e-9);
        if (l < 1) l = 1;
        if (l > m->nodes[s->node]->max_par) l = m->nodes[s->node]->max_par;
        s->lanes = l;
        light1[k] = s->kind == ST_RUNNER && l == 1 && isfinite(x) && x * lanework[k] * cpuw[k] < 0.5;
        sum += light[k] ? 0 : l;
        eff += light[k] || light1[k] ? 0 : stage_cores(s, l, x, lanework[k], cpuw[k], qf[k]);
        /* lanes that mostly block inside their function (I/O) are threads, not cores */
        waiting += (int)floor(l * (1 - cpuw[k]) + 1e-9);
    }
    tmax += waiting;
    while (eff > tbudget + 1e-9 || sum > tmax) { /* take back from the stage with the most slack */
        int best = -1;
        double slack = 0;
        for (int k = 0; k < m->nst; k++) {
            stage *s = &m->st[k];
            if (!tunable(m, s) || s->lanes <= 1 || light[k]) continue;
            double sk = s->lanes - 1 - x * lanework[k] * qf[k]; /* slack after taking one */
            if (sk >= -1e-9 && (best < 0 || sk > slack)) {
                best = k;
                slack = sk;
            }
        }
        if (best < 0) { /* nobody has slack: shrink the biggest anyway, the budget is a limit */
            for (int k = 0; k < m->nst; k++)
                if (tunable(m, &m->st[k]) && !light[k] && m->st[k].lanes > 1 &&
                    (best < 0 || m->st[k].lanes > m->st[best].lanes))
                    best = k;
            if (best < 0) break;
        }
        const stage *b = &m->st[best];
        if (!light1[best])
            eff -= stage_cores(b, b->lanes, x, lanework[best], cpuw[best], qf[best]) -
                   stage_cores(b, b->lanes - 1, x, lanework[best], cpuw[best], qf[best]);
        m->st[best].lanes--;
        sum--;
    }
    /* the threads the lanes may run: the cores' worth, plus the queued and the blocked lanes */
    if (sum > tbudget) tbudget = sum > tmax ? tmax : sum;
    if (tbudget > old_tb) atomic_store(&ctx->thread_budget, tbudget); /* raise before the choices */

    /* parallelism and buffers per node */
    int par[MAX_NODES], buf[MAX_NODES];
    choose(m, dblk, dhits, delem, window, par, buf);
    fit_ram(ctx, m, par, buf);
    bool changed = apply(m, par, buf);
    if (tbudget < old_tb) atomic_store(&ctx->thread_budget, tbudget); /* lower after them */
    (void)ntun;
    return changed;
}

/* Append a history point to every node, with the mean occupancy since the last one. */
static void record(struct sl_tuner *t, model *m) {
    int n = sl__ctx_nodes(t->ctx, m->nodes, MAX_NODES);
    if (n > MAX_NODES) n = MAX_NODES;
    for (int i = 0; i < n; i++) {
        sl_op_node *nd = m->nodes[i];
        long long s = atomic_load(&nd->stats.occ_sum), c = atomic_load(&nd->stats.occ_samples);
        float occ = c > t->prev_occ_n[i] ? (float)((double)(s - t->prev_occ_sum[i]) / 1000.0 /
                                                   (double)(c - t->prev_occ_n[i]))
                                         : (float)atomic_load(&nd->stats.buffered);
        pthread_mutex_lock(&nd->tune_mu);
        sl__node_sample_locked(t->ctx, nd, occ);
        pthread_mutex_unlock(&nd->tune_mu);
        t->prev_occ_sum[i] = s;
        t->prev_occ_n[i] = c;
    }
}

static void sample_occupancy(sl_ictx *ctx, model *m) {
    int n = sl__ctx_nodes(ctx, m->nodes, MAX_NODES);
    if (n > MAX_NODES) n = MAX_NODES;
    for (int i = 0; i < n; i++) {
        sl_op_stats *c = &m->nodes[i]->stats;
        atomic_fetch_add_explicit(&c->occ_sum, 1000LL * atomic_load(&c->buffered), memory_order_relaxed);
        atomic_fetch_add_explicit(&c->occ_samples, 1, memory_order_relaxed);
    }
}

static void *tuner_main(void *arg) {
    struct sl_tuner *t = arg;
    sl__trace_thread_name("autotune");
    model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    bool any_auto = false;
    int since_tune = 0, since_record = 0;
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        sl_cond_wait_ms(&t->cv, &t->mu, SAMPLE_MS);
        if (t->stop) break;
        pthread_mutex_unlock(&t->mu);
        sample_occupancy(t->ctx, m);
        since_tune += SAMPLE_MS;
        since_record += SAMPLE_MS;
        if (since_tune >= t->interval_ms) {
            since_tune = 0;
            if (!any_auto) {
                int n = sl__ctx_nodes(t->ctx, m->nodes, MAX_NODES);
                for (int i = 0; i < n && i < MAX_NODES; i++) any_auto |= m->nodes[i]->auto_par || m->nodes[i]->auto_buf;
            }
            bool changed = any_auto && optimize(t, m);
            t->interval_ms = changed ? TUNE_MIN_MS : (int)fmin(t->interval_ms * 1.5, TUNE_MAX_MS);
        }
        /* the history: every 100 ms (thinned as it fills) */
        if (since_record >= 100) {
            since_record = 0;
            record(t, m);
        }
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    record(t, m);
    free(m);
    return NULL;
}

/* Before any data: share the CPU budget evenly among the auto-parallel ops, so the sum of
 * parallelism is within the budget from the start (each keeps its threads for growing; with
 * more such ops than cores, each has one and the thread budget is their number). */
static void initial_split(sl_ictx *ctx) {
    sl_op_node *nodes[MAX_NODES];
    atomic_store(&ctx->thread_budget, ctx->ncpu);
    int n = sl__ctx_nodes(ctx, nodes, MAX_NODES), nauto = 0;
    if (n > MAX_NODES) n = MAX_NODES;
    for (int i = 0; i < n; i++) nauto += nodes[i]->auto_par;
    if (nauto < 2) return;
    /* more auto ops than cores: each still runs one thread */
    atomic_store(&ctx->thread_budget, nauto > ctx->ncpu ? nauto : ctx->ncpu);
    int each = ctx->ncpu / nauto < 1 ? 1 : ctx->ncpu / nauto;
    for (int i = 0; i < n; i++) {
        sl_op_node *nd = nodes[i];
        pthread_mutex_lock(&nd->tune_mu);
        if (nd->auto_par && nd->target && nd->tops && nd->tops->set_parallelism &&
            atomic_load(&nd->stats.parallelism) > each) {
            nd->tops->set_parallelism(nd->target, each);
            if (nd->auto_buf && nd->tops->set_buffer && is_runner(nd)) nd->tops->set_buffer(nd->target, 2 * each + 2);
        }
        pthread_mutex_unlock(&nd->tune_mu);
    }
}

void sl__tuner_start(sl_ictx *ctx) {
    initial_split(ctx);
    struct sl_tuner *t = calloc(1, sizeof *t);
    if (!t) return;
    t->ctx = ctx;
    t->interval_ms = TUNE_MIN_MS;
    pthread_mutex_init(&t->mu, NULL);
    sl_cond_init_mono(&t->cv);
    if (pthread_create(&t->thread, NULL, tuner_main, t) != 0) {
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->cv);
        free(t);
        return;
    }
    ctx->tuner = t;
}

void sl__tuner_stop(sl_ictx *ctx) {
    struct sl_tuner *t = ctx->tuner;
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
    ctx->tuner = NULL;
}
