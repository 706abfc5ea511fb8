/* dist/ps_server.c and dist/ps_client.c: in-process clusters (threads over TCP on
 * 127.0.0.1) of workers and ps tasks with an apply callback doing p -= lr * g on
 * integer-valued multiples of 1/8, so every expected parameter is exact whatever order the
 * pushes arrive in. Covers async and sync training (with the has-data counts and SUM rounds
 * of lockstep epochs, a dead and an out-of-phase worker among them), a worker joining before the chief's
 * INIT, the staleness bound, heartbeats, dead workers (connection closed, silence), a
 * restarted worker (resume step), a restarted ps (restored shard, clients retrying across
 * the restart), checkpoints, retried pushes applied once (raw frames), a client re-sending
 * the same seq to a fake ps that came back and ignoring a stale answer, a raw ZeroMQ
 * DEALER sending garbage that the server drops and counts while serving a real client, and
 * a CURVE client whose key is not allowed; a restored sync ps waiting for every worker. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "sluice/compress.h"
#include "sluice/ps.h"
#include "test.h"

/* libzmq is not built with ThreadSanitizer: its lock-free queues between the I/O thread and
 * the caller are invisible to TSan, which then reports the handover of every message. With
 * CURVE the I/O thread decrypts into the message through libsodium, so it joins the list. */
#if defined(__SANITIZE_THREAD__)
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) {
    return "called_from_lib:libzmq.so\nrace:libzmq.so\ncalled_from_lib:libsodium.so\nrace:libsodium.so\n";
}
#endif

#define LR 0.5f

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A free TCP port on 127.0.0.1 (every task must know every other task's address before it
 * connects, and the servers are created before the workers). Taken in turn from 16000..19999,
 * from a random start, probing each with a bind: below Linux's ephemeral ports (32768..),
 * which other tests' connections take as source ports between a probe and the real bind,
 * and apart from test_strategy_ps (12000..15999) and the integration scripts (20000..). */
static int free_port(void) {
    static int next = -1;
    if (next < 0) next = (int)(((unsigned)getpid() * 2654435761u) % 4000);
    for (int tries = 0; tries < 4000; tries++) {
        int port = 16000 + next;
        next = (next + 1) % 4000;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return -1;
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok) return port;
    }
    return -1;
}

typedef struct cluster {
    int nw, np;
    char buf[16][32];
    const char *addrs[16];
} cluster;

static void cluster_init(cluster *c, int nw, int np) {
    c->nw = nw;
    c->np = np;
    for (int i = 0; i < nw + np; i++) {
        snprintf(c->buf[i], sizeof c->buf[i], "127.0.0.1:%d", free_port());
        c->addrs[i] = c->buf[i];
    }
}

/* the gradient of worker w at step s, float i, and the initial parameters */
static float grad_of(int w, int64_t s, size_t i) { return (float)((w + 1) * (s + 1) + (int)(i % 4)) * 0.25f; }
static float init_of(size_t i) { return (float)(i % 1000) * 0.5f; }

/* ---- servers ---- */

typedef struct srv {
    sl_ps_server *s;
    pthread_t t;
    sl_status st;
    char msg[1024];
    size_t n;
    int saves;
    int64_t save_versions[64];
    int64_t last_steps[8];
    float *saved;       /* the last saved shard */
    volatile int stop;
    sl_ps_server_stats stats;
} srv;

static sl_status apply_sgd(void *ctx, float *params, const float *grad, size_t n, float lr) {
    (void)ctx;
    for (size_t i = 0; i < n; i++) params[i] -= lr * grad[i];
    return SL_OK;
}

static sl_status save_cb(void *ctx, const float *params, size_t n, const sl_ps_shard_state *st) {
    srv *v = ctx;
    if (v->saves < 64) v->save_versions[v->saves] = st->version;
    v->saves++;
    for (int i = 0; i < st->nworkers && i < 8; i++) v->last_steps[i] = st->worker_steps[i];
    if (!v->saved) v->saved = malloc((n ? n : 1) * sizeof(float));
    memcpy(v->saved, params, n * sizeof(float));
    v->n = n;
    return SL_OK;
}

static void *srv_main(void *arg) {
    srv *v = arg;
    v->st = sl_ps_server_run(v->s);
    snprintf(v->msg, sizeof v->msg, "%s", v->st ? sl_errmsg() : "");
    sl_ps_server_get_stats(v->s, &v->stats);
    return NULL;
}

static uint64_t test_job; /* the job id of the servers and workers a test starts (0: none) */
static uint64_t raw_job;  /* the job id raw_frame puts in its headers */

static int srv_start(srv *v, cluster *c, int j, const sl_ps_plan *plan, const sl_ps_server_opts *o,
                     const float *init, const sl_ps_shard_state *ist) {
    sl_ps_server_ops ops = {.ctx = v, .apply = apply_sgd, .save = save_cb};
    sl_ps_server_opts oo = o ? *o : (sl_ps_server_opts){.staleness = -1};
    oo.stop = &v->stop;
    sl_tp_opts to = {.timeout_s = 5, .max_msg = 1 << 20, .job_id = test_job};
    if (sl_ps_server_create(c->addrs, c->nw, j, plan, &to, &ops, &oo, init, ist, &v->s)) return -1;
    return pthread_create(&v->t, NULL, srv_main, v) ? -1 : 0;
}

static void srv_done(srv *v) {
    sl_ps_server_free(v->s);
    free(v->saved);
}

/* ---- workers ---- */

typedef struct wjob {
    cluster *c;
    const sl_ps_plan *plan;
    int w;
    sl_ps_client_opts co;
    int64_t from, nsteps;      /* pushes steps from .. from+nsteps-1 */
    int pause_ms;              /* between steps */
    int pause_at, pause_long_ms; /* one long pause before step pause_at (0: none) */
    int no_bye;                /* leave without BYE (free the client) */
    pthread_barrier_t *after_join;
    int sync_check;            /* sync: each reply equals the mean-of-all-workers expectation */
    atomic_llong *started;     /* [nw] staleness test: the step each worker is pushing */
    int stale_k;
    int64_t max_lead;          /* the most this worker's finished step led another's started */
    atomic_int *hold;          /* wait while set before pushing step hold_at */
    int64_t hold_at;
    atomic_int *phase;         /* set to 1 when the pushes before hold_at are done */
    sl_compress_spec cs;       /* pushes compressed with error feedback (kind none: float32) */
    uint64_t sent;             /* result: payload bytes the client sent */
    /* results */
    sl_status st;
    char msg[1024];
    int64_t resume;
    float *params;
    int bad;                   /* first mismatching step + 1 */
    double took;
} wjob;

static void *worker_main(void *arg) {
    wjob *j = arg;
    size_t n = j->plan->total;
    float *g = malloc(n * sizeof(float));
    j->params = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) j->params[i] = j->w == 0 ? init_of(i) : 0.0f;
    sl_ps_client *c = NULL;
    double t0 = now_s();
    sl_tp_opts to = {.timeout_s = 5, .job_id = test_job};
    j->st = sl_ps_client_create(j->c->addrs, j->c->nw, j->w, j->plan, test_job ? &to : NULL, &j->co, &c);
    if (!j->st && j->cs.kind) j->st = sl_ps_client_set_compress(c, &j->cs);
    if (!j->st) j->st = sl_ps_client_join(c, j->params, &j->resume);
    if (j->after_join) pthread_barrier_wait(j->after_join);
    for (int64_t s = j->from; s < j->from + j->nsteps && !j->st; s++) {
        if (j->hold && s == j->hold_at) {
            atomic_store(j->phase, 1);
            while (atomic_load(j->hold)) sleep_ms(5);
        }
        if (j->pause_at && s == j->pause_at) sleep_ms(j->pause_long_ms);
        for (size_t i = 0; i < n; i++) g[i] = grad_of(j->w, s, i);
        if (j->started) atomic_store(&j->started[j->w], s);
        j->st = sl_ps_client_push_pull(c, g, s, LR, j->params);
        if (j->st) break;
        if (j->started)
            for (int v = 0; v < j->c->nw; v++) {
                int64_t lead = s - atomic_load(&j->started[v]);
                if (v != j->w && lead > j->max_lead) j->max_lead = lead;
            }
        if (j->sync_check && !j->bad) {
            /* after round s every worker has p = init - lr * sum_t mean_w grad(w, t) */
            for (size_t i = 0; i < n && !j->bad; i++) {
                double p = init_of(i);
                for (int64_t t = 0; t <= s; t++) {
                    double m = 0;
                    for (int w = 0; w < j->c->nw; w++) m += grad_of(w, t, i);
                    p -= LR * (m / j->c->nw);
                }
                if (j->params[i] != (float)p) j->bad = (int)s + 1;
            }
        }
        if (j->pause_ms) sleep_ms(j->pause_ms);
    }
    if (!j->st && !j->no_bye) j->st = sl_ps_client_bye(c);
    if (j->st) snprintf(j->msg, sizeof j->msg, "%s", sl_errmsg());
    j->took = now_s() - t0;
    if (c) j->sent = sl_ps_client_sent_bytes(c);
    sl_ps_client_free(c);
    free(g);
    return NULL;
}

static sl_ps_plan *test_plan(int np) {
    size_t sizes[4] = {3000, 5, 2000, 1};
    sl_ps_plan *p;
    return sl_ps_plan_create(sizes, 4, np, 1000, &p) ? NULL : p;
}

/* init - lr / alive * sum of grad(w, s) over the given pushes: pushes[w] = {from, count};
 * alive: the cluster's workers less the dead (an async push's rate is lr / alive) */
static void expect_async(const sl_ps_plan *p, int nw, const int64_t (*pushes)[2], float *out, int alive) {
    for (size_t i = 0; i < p->total; i++) {
        double v = init_of(i);
        for (int w = 0; w < nw; w++)
            for (int64_t s = pushes[w][0]; s < pushes[w][0] + pushes[w][1]; s++) v -= (LR / alive) * grad_of(w, s, i);
        out[i] = (float)v;
    }
}

/* the servers' last saved shards, put together */
static void saved_flat(const sl_ps_plan *p, srv *v, float *flat) {
    for (int j = 0; j < p->nps; j++) sl_ps_plan_scatter(p, j, v[j].saved, flat);
}

#define CHECK_WORKER(j) do { if ((j).st) { FAILF("worker %d: %d %s", (j).w, (j).st, (j).msg); return; } } while (0)
#define CHECK_SRV(v) do { if ((v).st) { FAILF("server: %d %s", (v).st, (v).msg); return; } } while (0)

/* cluster_init(C, NW, NP), the test plan over NP ps tasks into *P, and the NP servers V
 * (zeroed first) started with the options O (NULL: async, no staleness bound). Returns 0, or
 * -1 when the plan or a server could not be made. */
static int start_ps(cluster *c, int nw, int np, const sl_ps_server_opts *o, sl_ps_plan **p, srv *v) {
    cluster_init(c, nw, np);
    memset(v, 0, (size_t)np * sizeof *v);
    if (!(*p = test_plan(np))) return -1;
    for (int k = 0; k < np; k++)
        if (srv_start(&v[k], c, k, *p, o, NULL, NULL)) return -1;
    return 0;
}

/* Runs the NW (at most 8) workers JOBS to their end, then waits for the NP servers V. */
static void run_all(wjob *jobs, int nw, srv *v, int np) {
    pthread_t t[8];
    for (int w = 0; w < nw; w++) pthread_create(&t[w], NULL, worker_main, &jobs[w]);
    for (int w = 0; w < nw; w++) pthread_join(t[w], NULL);
    for (int k = 0; k < np; k++) pthread_join(v[k].t, NULL);
}

/* Frees the parameters of the NW workers JOBS, the NP servers V and the plan P. */
static void free_all(wjob *jobs, int nw, srv *v, int np, sl_ps_plan *p) {
    for (int w = 0; w < nw; w++) free(jobs[w].params);
    for (int k = 0; k < np; k++) srv_done(&v[k]);
    sl_ps_plan_free(p);
}

/* Both sync workers JOBS and the two servers V ended well, every reply a worker had was the
 * mean-of-both expectation, both ended with the same parameters, and each server took
 * PUSHES pushes and applied APPLIED rounds. */
static void check_sync_pair(const wjob *jobs, const srv *v, const sl_ps_plan *p, uint64_t pushes, uint64_t applied) {
    for (int w = 0; w < 2; w++) CHECK_WORKER(jobs[w]);
    for (int k = 0; k < 2; k++) CHECK_SRV(v[k]);
    ASSERT_EQ(jobs[0].bad, 0);
    ASSERT_EQ(jobs[1].bad, 0);
    ASSERT_MEMEQ(jobs[0].params, jobs[1].params, p->total * sizeof(float));
    for (int k = 0; k < 2; k++) {
        ASSERT_EQ(v[k].stats.pushes, pushes);
        ASSERT_EQ(v[k].stats.applied, applied);
    }
}

/* Worker 0 (J) and the server V ended well, and both hold the parameters of J's 3 pushes
 * alone (at the rate of 2 workers: worker 1 never came). */
static void check_chief_alone(const wjob *j, const srv *v, const sl_ps_plan *p) {
    CHECK_WORKER(*j);
    CHECK_SRV(*v);
    float *want = malloc(p->total * sizeof(float));
    int64_t pushes[1][2] = {{0, 3}};
    expect_async(p, 1, pushes, want, 2);
    ASSERT_MEMEQ(j->params, want, p->total * sizeof(float));
    ASSERT_MEMEQ(v->saved, want, p->total * sizeof(float));
    free(want);
}

/* The parameters after NROUNDS sync rounds of workers 0 and 1: the mean of both gradients
 * in the rounds before BOTH, worker 0's alone in the others. */
static void expect_sync(const sl_ps_plan *p, int nrounds, int both, float *out) {
    for (size_t i = 0; i < p->total; i++) {
        double x = init_of(i);
        for (int s = 0; s < nrounds; s++) x -= LR * (s < both ? (grad_of(0, s, i) + grad_of(1, s, i)) / 2 : grad_of(0, s, i));
        out[i] = (float)x;
    }
}

TEST(test_async_two_by_two) {
    cluster c;
    sl_ps_plan *p;
    srv v[2];
    ASSERT_EQ(start_ps(&c, 2, 2, &(sl_ps_server_opts){.staleness = -1, .ckpt_every_s = 0.1}, &p, v), 0);
    wjob jobs[2];
    pthread_t t[2];
    /* worker 0 pushes its last step only once worker 1 is done, so it is the one whose
     * replies carry the final parameters of both shards (the slower worker is not always
     * the last one on a loaded machine) */
    atomic_int hold, phase;
    atomic_init(&hold, 1);
    atomic_init(&phase, 0);
    for (int w = 0; w < 2; w++) {
        jobs[w] = (wjob){.c = &c, .plan = p, .w = w, .co = {.retry_s = 20}, .nsteps = 10, .pause_ms = 20 * (w + 1)};
        if (w == 0) jobs[w].hold = &hold, jobs[w].hold_at = 9, jobs[w].phase = &phase;
        pthread_create(&t[w], NULL, worker_main, &jobs[w]);
    }
    pthread_join(t[1], NULL);
    atomic_store(&hold, 0);
    pthread_join(t[0], NULL);
    for (int k = 0; k < 2; k++) pthread_join(v[k].t, NULL);
    for (int w = 0; w < 2; w++) CHECK_WORKER(jobs[w]);
    for (int k = 0; k < 2; k++) CHECK_SRV(v[k]);
    ASSERT_EQ(jobs[0].resume, -1);
    ASSERT_EQ(jobs[1].resume, -1);
    float *want = malloc(p->total * sizeof(float)), *got = malloc(p->total * sizeof(float));
    int64_t pushes[2][2] = {{0, 10}, {0, 10}};
    expect_async(p, 2, pushes, want, 2);
    saved_flat(p, v, got);
    ASSERT_MEMEQ(got, want, p->total * sizeof(float));
    /* the worker that pushed last holds exactly the final parameters */
    ASSERT_MEMEQ(jobs[0].params, want, p->total * sizeof(float));
    for (int k = 0; k < 2; k++) {
        ASSERT_EQ(v[k].stats.pushes, 20);
        ASSERT_EQ(v[k].stats.applied, 20);
        ASSERT_EQ(v[k].stats.version, 20);
        ASSERT_EQ(v[k].stats.dropped, 0);
        ASSERT_EQ(v[k].stats.rejected, 0);
        /* periodic checkpoints while training, and one at the end with the final version */
        ASSERT(v[k].saves >= 2);
        ASSERT_EQ(v[k].save_versions[(v[k].saves < 64 ? v[k].saves : 64) - 1], 20);
        /* periodic ones only when the version moved; the final one may repeat the last */
        for (int i = 1; i + 1 < v[k].saves && i < 64; i++) ASSERT(v[k].save_versions[i] > v[k].save_versions[i - 1]);
        ASSERT_EQ(v[k].last_steps[0], 9);
        ASSERT_EQ(v[k].last_steps[1], 9);
    }
    free(want); free(got);
    free_all(jobs, 2, v, 2, p);
}

typedef struct join_job {
    sl_ps_client *c;
    float *flat;
    int64_t resume;
    sl_status st;
    char msg[1024];
} join_job;

static void *join_main(void *arg) {
    join_job *j = arg;
    j->st = sl_ps_client_join(j->c, j->flat, &j->resume);
    snprintf(j->msg, sizeof j->msg, "%s", j->st ? sl_errmsg() : "");
    return NULL;
}

TEST(test_join_waits_for_chief) {
    cluster c;
    sl_ps_plan *p;
    srv v[2];
    ASSERT_EQ(start_ps(&c, 2, 2, NULL, &p, v), 0);
    size_t n = p->total;
    float *init = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) init[i] = init_of(i);
    /* worker 1 joins first: the ps tasks answer UNINIT until the chief's INIT comes */
    sl_ps_client_opts co = {.retry_s = 20};
    join_job j1 = {.flat = calloc(n, sizeof(float)), .resume = 7};
    ASSERT_OK(sl_ps_client_create(c.addrs, 2, 1, p, NULL, &co, &j1.c));
    pthread_t t;
    pthread_create(&t, NULL, join_main, &j1);
    sleep_ms(400);
    sl_ps_client *chief;
    float *cflat = malloc(n * sizeof(float));
    memcpy(cflat, init, n * sizeof(float));
    int64_t resume = 7;
    ASSERT_OK(sl_ps_client_create(c.addrs, 2, 0, p, NULL, &co, &chief));
    ASSERT_OK(sl_ps_client_join(chief, cflat, &resume));
    pthread_join(t, NULL);
    if (j1.st) { FAILF("worker 1 join: %s", j1.msg); return; }
    ASSERT_EQ(resume, -1);
    ASSERT_EQ(j1.resume, -1);
    ASSERT_MEMEQ(cflat, init, n * sizeof(float));
    ASSERT_MEMEQ(j1.flat, init, n * sizeof(float));
    for (size_t i = 0; i < n; i++) g[i] = grad_of(0, 0, i);
    ASSERT_OK(sl_ps_client_push_pull(chief, g, 0, LR, cflat));
    int64_t pushes[2][2] = {{0, 1}, {0, 0}};
    expect_async(p, 2, pushes, want, 2);
    ASSERT_MEMEQ(cflat, want, n * sizeof(float));
    ASSERT_OK(sl_ps_client_pull(j1.c, j1.flat));
    ASSERT_MEMEQ(j1.flat, want, n * sizeof(float));
    ASSERT_OK(sl_ps_client_bye(j1.c));
    sl_ps_client_free(j1.c);
    /* a restarted chief (no BYE) rejoins: the ps's parameters win over its own */
    sl_ps_client_free(chief);
    ASSERT_OK(sl_ps_client_create(c.addrs, 2, 0, p, NULL, &co, &chief));
    memcpy(cflat, init, n * sizeof(float));
    ASSERT_OK(sl_ps_client_join(chief, cflat, &resume));
    ASSERT_EQ(resume, 0);
    ASSERT_MEMEQ(cflat, want, n * sizeof(float));
    ASSERT_OK(sl_ps_client_bye(chief));
    sl_ps_client_free(chief);
    for (int k = 0; k < 2; k++) {
        pthread_join(v[k].t, NULL);
        CHECK_SRV(v[k]);
        ASSERT_EQ(v[k].stats.applied, 1);
        ASSERT_EQ(v[k].stats.pulls >= 1, 1);
    }
    free(init); free(g); free(want); free(cflat); free(j1.flat);
    for (int k = 0; k < 2; k++) srv_done(&v[k]);
    /* without a chief, a worker's join gives up and says why */
    sl_ps_plan *p1;
    srv w;
    ASSERT_EQ(start_ps(&c, 2, 1, NULL, &p1, &w), 0);
    co.retry_s = 0.8;
    sl_ps_client *lone;
    float *fl = calloc(p1->total, sizeof(float));
    ASSERT_OK(sl_ps_client_create(c.addrs, 2, 1, p1, NULL, &co, &lone));
    ASSERT_EQ(sl_ps_client_join(lone, fl, &resume), SL_ETIMEDOUT);
    char want_msg[200];
    snprintf(want_msg, sizeof want_msg, "worker 1: ps 0 (%s) has no parameters after 0.8 s of join (the chief, worker 0, "
             "did not initialise it)", c.addrs[2]);
    ASSERT_STREQ(sl_errmsg(), want_msg);
    sl_ps_client_free(lone);
    __atomic_store_n(&w.stop, 1, __ATOMIC_RELAXED);
    pthread_join(w.t, NULL);
    ASSERT_EQ(w.st, SL_ECANCELED);
    free(fl);
    srv_done(&w);
    sl_ps_plan_free(p1);
    sl_ps_plan_free(p);
}

TEST(test_sync_rounds) {
    cluster c;
    sl_ps_plan *p;
    srv v[2];
    ASSERT_EQ(start_ps(&c, 2, 2, &(sl_ps_server_opts){.sync = true, .staleness = -1}, &p, v), 0);
    pthread_barrier_t b;
    pthread_barrier_init(&b, NULL, 2);
    wjob jobs[2];
    for (int w = 0; w < 2; w++)
        jobs[w] = (wjob){.c = &c, .plan = p, .w = w, .co = {.retry_s = 20}, .nsteps = 6, .pause_ms = w ? 30 : 0,
                         .after_join = &b, .sync_check = 1};
    run_all(jobs, 2, v, 2);
    pthread_barrier_destroy(&b);
    check_sync_pair(jobs, v, p, 12, 6); /* one mean per round */
    if (t_cur_failed) return;
    for (int k = 0; k < 2; k++) ASSERT_EQ(v[k].stats.version, 6);
    free_all(jobs, 2, v, 2, p);
}

/* ---- sync rounds: the has-data counts and SUM rounds (lockstep epochs) ---- */

typedef struct flag_job {
    cluster *c;
    const sl_ps_plan *plan;
    int w;
    pthread_barrier_t *all, *two;
    sl_status st;
    char msg[1024];
    int have[4], lack[4];       /* the counts of rounds 0..3 */
    int32_t sum1[3], sum2[3], sum3[3];
    uint8_t took1[3], took2[3], took3[3];
} flag_job;

static void *flag_main(void *arg) {
    flag_job *j = arg;
    size_t n = j->plan->total;
    float *g = malloc(n * sizeof(float)), *params = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) params[i] = init_of(i);
    sl_ps_client *c = NULL;
    sl_ps_client_opts co = {.retry_s = 20};
    sl_status st = sl_ps_client_create(j->c->addrs, j->c->nw, j->w, j->plan, NULL, &co, &c);
    if (!st) st = sl_ps_client_join(c, params, NULL);
    pthread_barrier_wait(j->all);
#define PUSH(s, more, k)                                                                            \
    do {                                                                                            \
        for (size_t i = 0; i < n; i++) g[i] = grad_of(j->w, s, i);                                  \
        if (!st) st = sl_ps_client_push_pull_more(c, g, s, LR, params, more, &j->have[k], &j->lack[k]); \
    } while (0)
    /* round 0: all have a next batch; round 1: worker 2 has none */
    PUSH(0, true, 0);
    PUSH(1, j->w != 2, 1);
    /* every worker's count in its own slot */
    j->sum1[j->w] = j->w + 1;
    if (!st) st = sl_ps_client_sum(c, j->sum1, 3, 3, j->took1);
    pthread_barrier_wait(j->all);
    if (j->w == 2) goto out; /* it dies: its connection closes, no BYE */
    PUSH(2, true, 2);
    j->sum2[j->w] = 10 * (j->w + 1);
    if (!st) st = sl_ps_client_sum(c, j->sum2, 3, 5, j->took2);
    pthread_barrier_wait(j->two);
    /* out of phase (a restarted worker): worker 0 sums while worker 1 waits in round 3 */
    if (j->w == 0) {
        j->sum3[0] = 7;
        if (!st) st = sl_ps_client_sum(c, j->sum3, 3, 6, j->took3);
    }
    PUSH(3, true, 3);
#undef PUSH
    if (!st) st = sl_ps_client_bye(c);
out:
    if (st) snprintf(j->msg, sizeof j->msg, "%s", sl_errmsg());
    j->st = st;
    sl_ps_client_free(c);
    free(g);
    free(params);
    return NULL;
}

/* Three sync workers on two ps: every worker of a round reads the same has-data counts
 * (3/0, then 2/1 when worker 2 has no next batch); a SUM round adds every worker's counts
 * and names who took part; a dead worker is left out of the later rounds and sums (2/0,
 * took part 1,1,0); a worker that sums while another waits in a step round gets its own
 * counts back (took part 1,0,0) and then joins that round. */
TEST(test_sync_has_data_and_sums) {
    cluster c;
    sl_ps_plan *p;
    srv v[2];
    ASSERT_EQ(start_ps(&c, 3, 2, &(sl_ps_server_opts){.sync = true, .staleness = -1, .dead_after_s = 30}, &p, v), 0);
    pthread_barrier_t all, two;
    pthread_barrier_init(&all, NULL, 3);
    pthread_barrier_init(&two, NULL, 2);
    flag_job jobs[3];
    pthread_t t[3];
    for (int w = 0; w < 3; w++) {
        jobs[w] = (flag_job){.c = &c, .plan = p, .w = w, .all = &all, .two = &two};
        pthread_create(&t[w], NULL, flag_main, &jobs[w]);
    }
    for (int w = 0; w < 3; w++) pthread_join(t[w], NULL);
    for (int k = 0; k < 2; k++) pthread_join(v[k].t, NULL);
    pthread_barrier_destroy(&all);
    pthread_barrier_destroy(&two);
    for (int w = 0; w < 3; w++)
        if (jobs[w].st) FAILF("worker %d: %d %s", w, jobs[w].st, jobs[w].msg);
    for (int k = 0; k < 2; k++) CHECK_SRV(v[k]);
    if (t_cur_failed) return;
    for (int w = 0; w < 3; w++) {
        ASSERT_EQ(jobs[w].have[0], 3);
        ASSERT_EQ(jobs[w].lack[0], 0);
        ASSERT_EQ(jobs[w].have[1], 2);
        ASSERT_EQ(jobs[w].lack[1], 1);
        ASSERT(jobs[w].sum1[0] == 1 && jobs[w].sum1[1] == 2 && jobs[w].sum1[2] == 3);
        ASSERT(jobs[w].took1[0] == 1 && jobs[w].took1[1] == 1 && jobs[w].took1[2] == 1);
    }
    for (int w = 0; w < 2; w++) {
        ASSERT_EQ(jobs[w].have[2], 2);
        ASSERT_EQ(jobs[w].lack[2], 0);
        ASSERT(jobs[w].sum2[0] == 10 && jobs[w].sum2[1] == 20 && jobs[w].sum2[2] == 0);
        ASSERT(jobs[w].took2[0] == 1 && jobs[w].took2[1] == 1 && jobs[w].took2[2] == 0);
        ASSERT_EQ(jobs[w].have[3], 2);
        ASSERT_EQ(jobs[w].lack[3], 0);
    }
    ASSERT(jobs[0].sum3[0] == 7 && jobs[0].sum3[1] == 0 && jobs[0].sum3[2] == 0);
    ASSERT(jobs[0].took3[0] == 1 && jobs[0].took3[1] == 0 && jobs[0].took3[2] == 0);
    for (int k = 0; k < 2; k++) {
        ASSERT_EQ(v[k].stats.applied, 4); /* rounds 0..3, each once */
        ASSERT_EQ(v[k].stats.dropped, 0);
    }
    free_all(NULL, 0, v, 2, p);
}

/* FAILF for each of the NW workers JOBS and the server V that ended with an error. Returns
 * 0 when none did, else -1. */
static int ended_well(const wjob *jobs, int nw, const srv *v) {
    int bad = 0;
    for (int w = 0; w < nw; w++)
        if (jobs[w].st) {
            FAILF("worker %d: %d %s", jobs[w].w, jobs[w].st, jobs[w].msg);
            bad = 1;
        }
    if (v->st) {
        FAILF("server: %d %s", v->st, v->msg);
        bad = 1;
    }
    return bad ? -1 : 0;
}

/* What async_late and restored_sync leave: the workers (their parameters to free), the
 * server (to free with srv_done), the seconds from the server's start, and the plan's length
 * in floats (the plan itself is freed). */
typedef struct ps_run {
    wjob jobs[2];
    srv v;
    double took;
    size_t total;
} ps_run;

/* Async, a worker that starts after the chief has finished: the ps waits for it (up to
 * dead_after_s after its start), takes its pushes and ends at its BYE. The old server ended
 * at the chief's BYE, and worker 1's join went unanswered until its retry_s (3 s here) ran
 * out. With the worker never coming, the ps ends dead_after_s after its start, not before. */
static int async_late(int late, ps_run *r) {
    wjob *jobs = r->jobs;
    srv *v = &r->v;
    cluster c;
    sl_ps_plan *p;
    sl_ps_server_opts o = {.staleness = -1, .dead_after_s = late ? 5.0 : 0.8};
    double t0 = now_s();
    if (start_ps(&c, 2, 1, &o, &p, v)) return -1;
    r->total = p->total;
    pthread_t t;
    for (int w = 0; w < 1 + late; w++) {
        jobs[w] = (wjob){.c = &c, .plan = p, .w = w, .co = {.retry_s = 3}, .nsteps = 3};
        if (w) sleep_ms(500); /* the chief has said BYE by now */
        pthread_create(&t, NULL, worker_main, &jobs[w]);
        pthread_join(t, NULL);
    }
    pthread_join(v->t, NULL);
    r->took = now_s() - t0;
    sl_ps_plan_free(p);
    return ended_well(jobs, 1 + late, v);
}

TEST(test_async_late_worker_served) {
    ps_run r;
    ASSERT_EQ(async_late(1, &r), 0);
    ASSERT_EQ(r.v.stats.pushes, 6);
    ASSERT_EQ(r.v.stats.applied, 6);
    ASSERT_EQ(r.v.last_steps[0], 2);
    ASSERT_EQ(r.v.last_steps[1], 2);
    sl_ps_plan *p = test_plan(1);
    float *want = malloc(r.total * sizeof(float));
    int64_t pushes[2][2] = {{0, 3}, {0, 3}};
    expect_async(p, 2, pushes, want, 2);
    ASSERT_MEMEQ(r.v.saved, want, r.total * sizeof(float));
    ASSERT_MEMEQ(r.jobs[1].params, want, r.total * sizeof(float)); /* it pushed last */
    free(want);
    free_all(r.jobs, 2, &r.v, 1, p);
}

TEST(test_async_never_joined_worker) {
    ps_run r;
    ASSERT_EQ(async_late(0, &r), 0);
    ASSERT_EQ(r.v.stats.pushes, 3);
    ASSERT(r.took >= 0.8); /* it waited for worker 1 */
    ASSERT(r.took < 4.0);  /* and gave it up */
    free(r.jobs[0].params);
    srv_done(&r.v);
}

/* A fresh sync ps forms no round before every worker has joined: worker 1 starts 600 ms
 * after the chief, and every round is still the mean of both. The old server took the
 * chief's pushes alone (here all 4, after which the chief said BYE and the ps tasks ended
 * before worker 1 could join); with 2 ps, a worker that joined one ps before the other
 * could leave a SUM on ps 0 waiting for a chief stuck in a step round on ps 1. */
TEST(test_sync_first_round_waits_for_all) {
    cluster c;
    sl_ps_plan *p;
    srv v[2];
    ASSERT_EQ(start_ps(&c, 2, 2, &(sl_ps_server_opts){.sync = true, .staleness = -1}, &p, v), 0);
    wjob jobs[2];
    pthread_t t[2];
    for (int w = 0; w < 2; w++) {
        jobs[w] = (wjob){.c = &c, .plan = p, .w = w, .co = {.retry_s = 20}, .nsteps = 4, .sync_check = 1};
        if (w) sleep_ms(600);
        pthread_create(&t[w], NULL, worker_main, &jobs[w]);
    }
    for (int w = 0; w < 2; w++) pthread_join(t[w], NULL);
    for (int k = 0; k < 2; k++) pthread_join(v[k].t, NULL);
    check_sync_pair(jobs, v, p, 8, 4);
    if (t_cur_failed) return;
    free_all(jobs, 2, v, 2, p);
}

/* A restored sync ps (version 3, both workers at step 2) forms no round before every
 * worker is back: with worker 1 starting 400 ms late, rounds 3..5 are the mean of both (the
 * old server took the chief's alone, and ended at its BYE before worker 1 could join). With
 * worker 1 never coming back, the ps waits dead_after_s (1.5 s) from its start, then goes on
 * with the chief alone. */
static int restored_sync(int late_ms, ps_run *r) {
    wjob *jobs = r->jobs;
    srv *v = &r->v;
    cluster c;
    cluster_init(&c, 2, 1);
    sl_ps_plan *p = test_plan(1);
    r->total = p->total;
    memset(v, 0, sizeof *v);
    float *shard = malloc(p->total * sizeof(float));
    for (size_t i = 0; i < p->total; i++) shard[i] = 1.0f;
    int64_t steps[2] = {2, 2};
    sl_ps_shard_state ist = {.version = 3, .worker_steps = steps, .nworkers = 2};
    sl_ps_server_opts o = {.sync = true, .staleness = -1, .dead_after_s = 1.5};
    if (srv_start(v, &c, 0, p, &o, shard, &ist)) return -1;
    double t0 = now_s();
    pthread_t t[2];
    int nw = late_ms >= 0 ? 2 : 1;
    for (int w = 0; w < nw; w++) {
        jobs[w] = (wjob){.c = &c, .plan = p, .w = w, .co = {.retry_s = 20, .heartbeat_s = 0.2}, .from = 3, .nsteps = 3};
        if (w) sleep_ms(late_ms);
        pthread_create(&t[w], NULL, worker_main, &jobs[w]);
    }
    for (int w = 0; w < nw; w++) pthread_join(t[w], NULL);
    r->took = now_s() - t0;
    pthread_join(v->t, NULL);
    free(shard);
    sl_ps_plan_free(p);
    return ended_well(jobs, nw, v);
}

TEST(test_restored_sync_waits_for_all) {
    ps_run r;
    ASSERT_EQ(restored_sync(400, &r), 0);
    ASSERT_EQ(r.jobs[0].resume, 2);
    ASSERT_EQ(r.jobs[1].resume, 2);
    ASSERT_MEMEQ(r.jobs[0].params, r.jobs[1].params, r.total * sizeof(float)); /* (the plan is freed) */
    ASSERT_EQ(r.v.stats.pushes, 6);
    ASSERT_EQ(r.v.stats.applied, 3); /* one mean per round */
    ASSERT_EQ(r.v.stats.version, 6);
    for (int w = 0; w < 2; w++) free(r.jobs[w].params);
    srv_done(&r.v);
    ASSERT_EQ(restored_sync(-1, &r), 0);
    ASSERT(r.took >= 1.5);
    ASSERT_EQ(r.v.stats.pushes, 3);
    ASSERT_EQ(r.v.stats.applied, 3);
    ASSERT_EQ(r.v.stats.version, 6);
    free(r.jobs[0].params);
    srv_done(&r.v);
}

/* A SUM to a ps in async mode is refused with the reason (the configs disagree on the
 * mode); bad arguments are refused before anything is sent. */
TEST(test_sum_needs_sync) {
    cluster c;
    sl_ps_plan *p;
    srv v;
    ASSERT_EQ(start_ps(&c, 1, 1, NULL, &p, &v), 0);
    float *params = malloc(p->total * sizeof(float));
    for (size_t i = 0; i < p->total; i++) params[i] = init_of(i);
    sl_ps_client *cl;
    sl_ps_client_opts co = {.retry_s = 20};
    ASSERT_OK(sl_ps_client_create(c.addrs, 1, 0, p, NULL, &co, &cl));
    ASSERT_OK(sl_ps_client_join(cl, params, NULL));
    int32_t x[2] = {4, 5};
    ASSERT_EQ(sl_ps_client_sum(cl, x, 2, 1, NULL), SL_EINVAL);
    char want[400];
    snprintf(want, sizeof want,
             "worker 0: ps 0 (%s) rejected sum: ps 0 runs async rounds: a SUM needs `strategy ps mode=sync` on the ps "
             "tasks too\n---> HINT: every worker and ps must plan the same model over the same number of ps tasks",
             c.addrs[1]);
    ASSERT_STREQ(sl_errmsg(), want);
    ASSERT(x[0] == 4 && x[1] == 5); /* unchanged */
    ASSERT_EQ(sl_ps_client_sum(cl, x, 0, 1, NULL), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "worker 0: a sum of 0 counts with tag 1 (need 1..65536 counts, tag < 0x10000)");
    ASSERT_EQ(sl_ps_client_sum(cl, x, 2, 0x10000, NULL), SL_EINVAL);
    /* an async push's counts are 0/0 (the flag is ignored) */
    int have = -1, lack = -1;
    ASSERT_OK(sl_ps_client_push_pull_more(cl, params, 0, LR, params, false, &have, &lack));
    ASSERT_EQ(have, 0);
    ASSERT_EQ(lack, 0);
    ASSERT_OK(sl_ps_client_bye(cl));
    sl_ps_client_free(cl);
    pthread_join(v.t, NULL);
    CHECK_SRV(v);
    ASSERT_EQ(v.stats.dropped, 0);
    free(params);
    free_all(NULL, 0, &v, 1, p);
}

/* Fast worker 0 and slow worker 1 under staleness bound k: returns worker 0's max lead. */
static int64_t run_stale(int k, int *failed) {
    cluster c;
    cluster_init(&c, 2, 1);
    size_t sizes[1] = {64};
    sl_ps_plan *p;
    *failed = 1;
    if (sl_ps_plan_create(sizes, 1, 1, 0, &p)) return -1;
    srv v;
    memset(&v, 0, sizeof v);
    sl_ps_server_opts o = {.staleness = k};
    if (srv_start(&v, &c, 0, p, &o, NULL, NULL)) return -1;
    pthread_barrier_t b;
    pthread_barrier_init(&b, NULL, 2);
    atomic_llong started[2];
    atomic_init(&started[0], -1);
    atomic_init(&started[1], -1);
    wjob jobs[2];
    for (int w = 0; w < 2; w++)
        jobs[w] = (wjob){.c = &c, .plan = p, .w = w, .co = {.retry_s = 20}, .nsteps = 12, .pause_ms = w ? 40 : 0,
                         .after_join = &b, .started = started, .stale_k = k, .max_lead = INT64_MIN};
    run_all(jobs, 2, &v, 1);
    pthread_barrier_destroy(&b);
    *failed = jobs[0].st || jobs[1].st || v.st || v.stats.applied != 24;
    if (*failed) printf("  k=%d: worker %d %s / %d %s / server %d %s, applied %llu\n", k, jobs[0].st, jobs[0].msg,
                        jobs[1].st, jobs[1].msg, v.st, v.msg, (unsigned long long)v.stats.applied);
    free_all(jobs, 2, &v, 1, p);
    return jobs[0].max_lead;
}

TEST(test_staleness_bound) {
    int failed;
    /* the fast worker's step s returns only once the slow one has started step s - k */
    ASSERT_EQ(run_stale(0, &failed) <= 0, 1);
    ASSERT_EQ(failed, 0);
    ASSERT_EQ(run_stale(1, &failed) <= 1, 1);
    ASSERT_EQ(failed, 0);
    /* without a bound the fast worker runs ahead: the check above can fail */
    ASSERT(run_stale(-1, &failed) > 2);
    ASSERT_EQ(failed, 0);
}

TEST(test_dead_worker_releases_sync_round) {
    cluster c;
    sl_ps_plan *p;
    srv v;
    ASSERT_EQ(start_ps(&c, 2, 1, &(sl_ps_server_opts){.sync = true, .staleness = -1, .dead_after_s = 30}, &p, &v), 0);
    pthread_barrier_t b;
    pthread_barrier_init(&b, NULL, 2);
    wjob jobs[2];
    /* worker 1 does two rounds and vanishes without BYE (its client is freed) */
    jobs[0] = (wjob){.c = &c, .plan = p, .w = 0, .co = {.retry_s = 20}, .nsteps = 6, .after_join = &b};
    jobs[1] = (wjob){.c = &c, .plan = p, .w = 1, .co = {.retry_s = 20}, .nsteps = 2, .after_join = &b, .no_bye = 1};
    run_all(jobs, 2, &v, 1);
    pthread_barrier_destroy(&b);
    for (int w = 0; w < 2; w++) CHECK_WORKER(jobs[w]);
    CHECK_SRV(v);
    /* its closed connection, not dead_after_s (30 s), released worker 0's third round */
    ASSERT(jobs[0].took < 10);
    ASSERT_EQ(v.stats.applied, 6);
    ASSERT_EQ(v.stats.pushes, 8);
    /* rounds 0, 1: mean of both; rounds 2..5: worker 0 alone */
    float *want = malloc(p->total * sizeof(float));
    expect_sync(p, 6, 2, want);
    ASSERT_MEMEQ(v.saved, want, p->total * sizeof(float));
    ASSERT_MEMEQ(jobs[0].params, want, p->total * sizeof(float));
    ASSERT_EQ(v.last_steps[1], 1);
    free(want);
    free_all(jobs, 2, &v, 1, p);
}

/* A raw DEALER that claims worker `w` on the server's inbox, under a routing id of the
 * transport's form "r<w>.<16 hex digits>" (a fixed nonce: a stand-in for a real worker). */
static void *raw_dealer(void *ctx, const char *server_ep, int w) {
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    char id[32], ep[64];
    snprintf(id, sizeof id, "r%d.00000000000000%02x", w, w & 0xff);
    snprintf(ep, sizeof ep, "tcp://%s", server_ep);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_ROUTING_ID, id, strlen(id));
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_connect(s, ep);
    return s;
}

/* Send a transport header (type, sender w, tensor, step) and payload p[0..n). */
static void raw_frame(void *s, int type, int w, int tensor, uint64_t step, const void *p, size_t n) {
    sl_msg_hdr h = {.type = (uint16_t)type, .dtype = SL_DT_U8, .sender = (uint32_t)w, .tensor = (uint32_t)tensor,
                    .step = step, .length = n, .job = raw_job};
    uint8_t hb[SL_MSG_HDR_SIZE];
    sl_msg_encode(&h, hb);
    zmq_send(s, hb, sizeof hb, ZMQ_SNDMORE);
    zmq_send(s, p, n, 0);
}

TEST(test_silent_worker_and_heartbeats) {
    cluster c;
    sl_ps_plan *p;
    srv v;
    ASSERT_EQ(start_ps(&c, 3, 1, &(sl_ps_server_opts){.sync = true, .staleness = -1, .dead_after_s = 1.0}, &p, &v), 0);
    /* worker 2 is a raw socket that says HELLO and then nothing: live, then dead by silence */
    void *zctx = zmq_ctx_new();
    void *raw = raw_dealer(zctx, sl_ps_server_endpoint(v.s), 2);
    uint8_t pre[SL_PS_PREFIX];
    sl_ps_frame f = {.plan_hash = p->hash, .seq = 1};
    sl_ps_frame_encode_prefix(&f, pre);
    raw_frame(raw, SL_MSG_HELLO, 2, 0, 0, pre, sizeof pre);
    sleep_ms(100);
    /* worker 1 pauses 2.5 s (> dead_after_s) before step 2, but its heartbeats keep it live:
     * every round still takes the mean of workers 0 and 1 (worker 2's silence ends it) */
    pthread_barrier_t b;
    pthread_barrier_init(&b, NULL, 2);
    wjob jobs[2];
    for (int w = 0; w < 2; w++)
        jobs[w] = (wjob){.c = &c, .plan = p, .w = w, .co = {.retry_s = 20, .heartbeat_s = 0.2}, .nsteps = 4,
                         .after_join = &b};
    jobs[1].pause_at = 2;
    jobs[1].pause_long_ms = 2500;
    run_all(jobs, 2, &v, 1);
    pthread_barrier_destroy(&b);
    zmq_close(raw);
    zmq_ctx_term(zctx);
    for (int w = 0; w < 2; w++) CHECK_WORKER(jobs[w]);
    CHECK_SRV(v);
    ASSERT(jobs[0].took > 2.4);
    ASSERT_EQ(v.stats.applied, 4);
    float *want = malloc(p->total * sizeof(float));
    expect_sync(p, 4, 4, want);
    ASSERT_MEMEQ(v.saved, want, p->total * sizeof(float));
    ASSERT_MEMEQ(jobs[0].params, want, p->total * sizeof(float));
    ASSERT_MEMEQ(jobs[1].params, want, p->total * sizeof(float));
    ASSERT_EQ(v.last_steps[2], -1);
    free(want);
    free_all(jobs, 2, &v, 1, p);
}

TEST(test_restarted_worker_resumes) {
    cluster c;
    sl_ps_plan *p;
    srv v[2];
    ASSERT_EQ(start_ps(&c, 2, 2, NULL, &p, v), 0);
    /* the chief pushes 3 steps, then waits (client alive) until worker 1 has lived twice */
    atomic_int hold;
    atomic_init(&hold, 1);
    atomic_int phase;
    atomic_init(&phase, 0);
    wjob chief = {.c = &c, .plan = p, .w = 0, .co = {.retry_s = 20, .heartbeat_s = 0.2}, .nsteps = 4,
                  .hold = &hold, .hold_at = 3, .phase = &phase};
    pthread_t tc, t1;
    pthread_create(&tc, NULL, worker_main, &chief);
    /* worker 1's first life starts after the chief's pushes, so none of them sees it dead */
    while (!atomic_load(&phase)) sleep_ms(5);
    wjob first = {.c = &c, .plan = p, .w = 1, .co = {.retry_s = 20}, .nsteps = 5, .no_bye = 1};
    pthread_create(&t1, NULL, worker_main, &first);
    pthread_join(t1, NULL);
    CHECK_WORKER(first);
    ASSERT_EQ(first.resume, -1);
    wjob second = {.c = &c, .plan = p, .w = 1, .co = {.retry_s = 20}, .from = 5, .nsteps = 2};
    pthread_create(&t1, NULL, worker_main, &second);
    pthread_join(t1, NULL);
    atomic_store(&hold, 0);
    pthread_join(tc, NULL);
    for (int k = 0; k < 2; k++) pthread_join(v[k].t, NULL);
    CHECK_WORKER(second);
    CHECK_WORKER(chief);
    for (int k = 0; k < 2; k++) CHECK_SRV(v[k]);
    ASSERT_EQ(second.resume, 4); /* the last step its first life pushed */
    float *want = malloc(p->total * sizeof(float)), *got = malloc(p->total * sizeof(float));
    int64_t pushes[2][2] = {{0, 4}, {0, 7}};
    expect_async(p, 2, pushes, want, 2);
    saved_flat(p, v, got);
    ASSERT_MEMEQ(got, want, p->total * sizeof(float));
    for (int k = 0; k < 2; k++) {
        ASSERT_EQ(v[k].stats.applied, 11);
        ASSERT_EQ(v[k].last_steps[0], 3);
        ASSERT_EQ(v[k].last_steps[1], 6);
    }
    free(want); free(got);
    free(chief.params); free(first.params); free(second.params);
    free_all(NULL, 0, v, 2, p);
}

TEST(test_restarted_server) {
    cluster c;
    sl_ps_plan *p;
    srv v[2], again;
    memset(&again, 0, sizeof again);
    ASSERT_EQ(start_ps(&c, 1, 2, NULL, &p, v), 0);
    atomic_int hold;
    atomic_init(&hold, 1);
    atomic_int phase;
    atomic_init(&phase, 0);
    wjob chief = {.c = &c, .plan = p, .w = 0, .co = {.retry_s = 20}, .nsteps = 6, .hold = &hold, .hold_at = 3,
                  .phase = &phase};
    pthread_t tc;
    pthread_create(&tc, NULL, worker_main, &chief);
    while (!atomic_load(&phase)) sleep_ms(5);
    /* ps 0 stops (saving version 3) while the chief is about to push step 3 */
    __atomic_store_n(&v[0].stop, 1, __ATOMIC_RELAXED);
    pthread_join(v[0].t, NULL);
    ASSERT_EQ(v[0].st, SL_ECANCELED);
    ASSERT_EQ(v[0].saves, 2); /* right after the chief's INIT, and when stopped */
    ASSERT_EQ(v[0].save_versions[0], 0);
    ASSERT_EQ(v[0].save_versions[1], 3);
    ASSERT_EQ(v[0].last_steps[0], 2);
    float *shard = malloc(p->shard_len[0] * sizeof(float));
    memcpy(shard, v[0].saved, p->shard_len[0] * sizeof(float));
    srv_done(&v[0]);
    atomic_store(&hold, 0);
    sleep_ms(700); /* the chief's push to ps 0 goes unanswered meanwhile */
    int64_t steps[1] = {2};
    sl_ps_shard_state st = {.version = 3, .worker_steps = steps, .nworkers = 1};
    ASSERT_EQ(srv_start(&again, &c, 0, p, NULL, shard, &st), 0);
    pthread_join(tc, NULL);
    pthread_join(again.t, NULL);
    pthread_join(v[1].t, NULL);
    CHECK_WORKER(chief);
    CHECK_SRV(again);
    CHECK_SRV(v[1]);
    ASSERT(chief.took > 0.7);
    float *want = malloc(p->total * sizeof(float)), *got = malloc(p->total * sizeof(float));
    int64_t pushes[1][2] = {{0, 6}};
    expect_async(p, 1, pushes, want, 1);
    v[0] = again;
    saved_flat(p, v, got);
    ASSERT_MEMEQ(got, want, p->total * sizeof(float));
    ASSERT_MEMEQ(chief.params, want, p->total * sizeof(float));
    ASSERT_EQ(again.stats.version, 6); /* 3 restored + 3 applied after the restart */
    ASSERT_EQ(again.stats.applied, 3);
    /* 3, or 4 when the client re-sent step 3 after seeing the connection come back */
    ASSERT(again.stats.pushes == 3 || again.stats.pushes == 4);
    ASSERT_EQ(again.last_steps[0], 5);
    ASSERT_EQ(v[1].stats.applied, 6);
    free(shard); free(want); free(got); free(chief.params);
    srv_done(&again);
    srv_done(&v[1]);
    sl_ps_plan_free(p);
}

TEST(test_garbage_dropped_server_serves_on) {
    cluster c;
    sl_ps_plan *p;
    srv v;
    /* worker 1 never joins: the ps waits dead_after_s for it after the chief's BYE */
    ASSERT_EQ(start_ps(&c, 2, 1, &(sl_ps_server_opts){.staleness = -1, .dead_after_s = 1.5}, &p, &v), 0);
    size_t n = p->shard_len[0];
    void *zctx = zmq_ctx_new();
    void *raw = raw_dealer(zctx, sl_ps_server_endpoint(v.s), 1);
    void *anon = zmq_socket(zctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(anon, ZMQ_LINGER, &zero, sizeof zero);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://%s", sl_ps_server_endpoint(v.s));
    zmq_connect(anon, ep);
    uint8_t *buf = calloc(SL_PS_PREFIX + 4 * (n + 1), 1);
    sl_ps_frame f = {.plan_hash = p->hash, .seq = 9, .value = 0, .lr = 0.5f};
    sl_ps_frame_encode_prefix(&f, buf);
    size_t push_len = SL_PS_PREFIX + 4 * n;
    int dropped = 0;
    zmq_send(raw, "garbage", 7, 0); /* one frame */
    dropped++;
    uint8_t hb[SL_MSG_HDR_SIZE];
    sl_msg_hdr h = {.type = SL_MSG_PUSH, .dtype = SL_DT_U8, .sender = 1, .length = push_len};
    sl_msg_encode(&h, hb);
    zmq_send(raw, hb, 20, ZMQ_SNDMORE); /* truncated header */
    zmq_send(raw, buf, push_len, 0);
    dropped++;
    zmq_send(raw, hb, sizeof hb, ZMQ_SNDMORE); /* header length disagrees with the payload */
    zmq_send(raw, buf, push_len - 4, 0);
    dropped++;
    zmq_send(anon, hb, sizeof hb, ZMQ_SNDMORE); /* no routing id: not a rank */
    zmq_send(anon, buf, push_len, 0);
    dropped++;
    raw_frame(raw, SL_MSG_PUSH, 1, 0, 0, buf, push_len + 4); /* oversized: one float too many */
    dropped++;
    buf[0] ^= 0xff; /* a valid header, then a bad ps prefix (magic) */
    raw_frame(raw, SL_MSG_PUSH, 1, 0, 0, buf, push_len);
    buf[0] ^= 0xff;
    dropped++;
    raw_frame(raw, SL_MSG_PUSH, 1, 0, 5, buf, push_len); /* header step 5, prefix step 0 */
    dropped++;
    raw_frame(raw, SL_MSG_PUSH, 1, 3, 0, buf, push_len); /* for ps 3 */
    dropped++;
    sl_ps_frame rf = {.plan_hash = p->hash, .seq = 9};
    uint8_t rpre[SL_PS_PREFIX];
    sl_ps_frame_encode_prefix(&rf, rpre);
    raw_frame(raw, SL_MSG_REPLY, 1, 0, 0, rpre, sizeof rpre); /* a REPLY: wrong type for a server */
    dropped++;
    float nan = NAN;
    memcpy(buf + SL_PS_PREFIX + 8, &nan, 4);
    raw_frame(raw, SL_MSG_PUSH, 1, 0, 0, buf, push_len); /* a NaN gradient */
    dropped++;
    memset(buf + SL_PS_PREFIX + 8, 0, 4);
    /* the has-data pair: 2 is no flag value, and a push cannot both have and lack a batch */
    sl_ps_frame ff = f;
    ff.have = 2;
    sl_ps_frame_encode_prefix(&ff, buf);
    raw_frame(raw, SL_MSG_PUSH, 1, 0, 0, buf, push_len);
    dropped++;
    ff.have = ff.lack = 1;
    sl_ps_frame_encode_prefix(&ff, buf);
    raw_frame(raw, SL_MSG_PUSH, 1, 0, 0, buf, push_len);
    dropped++;
    ff = (sl_ps_frame){.plan_hash = p->hash, .seq = 10, .value = 0x10000}; /* a SUM tag out of range */
    sl_ps_frame_encode_prefix(&ff, buf);
    raw_frame(raw, SL_MSG_SUM, 1, 0, 0, buf, SL_PS_PREFIX + 4);
    dropped++;
    ff.value = 1;
    sl_ps_frame_encode_prefix(&ff, buf);
    raw_frame(raw, SL_MSG_SUM, 1, 0, 0, buf, SL_PS_PREFIX); /* a SUM of no counts */
    dropped++;
    buf[30] = 1; /* frame version 1 */
    raw_frame(raw, SL_MSG_PULL, 1, 0, 0, buf, SL_PS_PREFIX);
    dropped++;
    sl_ps_frame_encode_prefix(&f, buf);
    rf.plan_hash ^= 1;
    sl_ps_frame_encode_prefix(&rf, rpre);
    raw_frame(raw, SL_MSG_PULL, 1, 0, 0, rpre, sizeof rpre); /* another plan: rejected, not dropped */
    static uint8_t big[2 << 20];
    raw_frame(raw, SL_MSG_PUSH, 1, 0, 0, big, sizeof big); /* over max_msg: ZeroMQ drops the link */
    sleep_ms(500);
    /* a real client still joins, pushes and pulls correctly */
    wjob j = {.c = &c, .plan = p, .w = 0, .co = {.retry_s = 20}, .nsteps = 3};
    run_all(&j, 1, &v, 1);
    zmq_close(raw);
    zmq_close(anon);
    zmq_ctx_term(zctx);
    check_chief_alone(&j, &v, p);
    if (t_cur_failed) return;
    ASSERT_EQ(v.stats.dropped, dropped);
    ASSERT_EQ(v.stats.rejected, 1);
    ASSERT_EQ(v.stats.applied, 3);
    ASSERT_EQ(v.stats.pushes, 3);
    free(buf);
    free_all(&j, 1, &v, 1, p);
}

TEST(test_other_job_cannot_alter_ps) {
    /* tasks of another job (leftovers on the same ports, sharing the plan) speak for worker
     * 1 and for the chief: a HELLO, a PUSH of huge gradients, a PULL and a BYE each. None of
     * it may reach the ps: the chief trains alone and its parameters are exact. */
    test_job = 0x0b5e55ed0b5e55edull;
    cluster c;
    sl_ps_plan *p;
    srv v;
    /* worker 1 never joins: the ps waits dead_after_s for it after the chief's BYE */
    ASSERT_EQ(start_ps(&c, 2, 1, &(sl_ps_server_opts){.staleness = -1, .dead_after_s = 1.5}, &p, &v), 0);
    size_t n = p->shard_len[0];
    void *zctx = zmq_ctx_new();
    void *raw[2] = {raw_dealer(zctx, sl_ps_server_endpoint(v.s), 0), raw_dealer(zctx, sl_ps_server_endpoint(v.s), 1)};
    uint8_t *buf = calloc(SL_PS_PREFIX + 4 * n, 1);
    sl_ps_frame f = {.plan_hash = p->hash, .seq = 1, .value = 0, .lr = 0.5f};
    sl_ps_frame_encode_prefix(&f, buf);
    for (size_t i = 0; i < n; i++) {
        float big = 1e6f;
        memcpy(buf + SL_PS_PREFIX + 4 * i, &big, 4);
    }
    sl_ps_frame pf = {.plan_hash = p->hash, .seq = 2};
    uint8_t pre[SL_PS_PREFIX];
    sl_ps_frame_encode_prefix(&pf, pre);
    raw_job = test_job ^ 0x10;
    int dropped = 0;
    for (int w = 0; w < 2; w++) {
        raw_frame(raw[w], SL_MSG_HELLO, w, 0, 0, pre, sizeof pre);
        raw_frame(raw[w], SL_MSG_PUSH, w, 0, 0, buf, SL_PS_PREFIX + 4 * n);
        raw_frame(raw[w], SL_MSG_PULL, w, 0, 0, pre, sizeof pre);
        raw_frame(raw[w], SL_MSG_BYE, w, 0, 0, pre, sizeof pre);
        dropped += 4;
    }
    raw_job = 0;
    sleep_ms(300);
    wjob j = {.c = &c, .plan = p, .w = 0, .co = {.retry_s = 20}, .nsteps = 3};
    run_all(&j, 1, &v, 1);
    zmq_close(raw[0]);
    zmq_close(raw[1]);
    zmq_ctx_term(zctx);
    test_job = 0;
    check_chief_alone(&j, &v, p);
    if (t_cur_failed) return;
    ASSERT_EQ(v.stats.dropped, dropped);
    ASSERT_EQ(v.stats.applied, 3);
    ASSERT_EQ(v.stats.pushes, 3);
    free(buf);
    free_all(&j, 1, &v, 1, p);
}

/* A ROUTER inbox bound on ADDR (a worker's or a ps's), as the transport's own would be.
 * Returns it, or NULL when the bind failed. */
static void *raw_inbox(void *zctx, const char *addr) {
    void *in = zmq_socket(zctx, ZMQ_ROUTER);
    char ep[64];
    int zero = 0;
    snprintf(ep, sizeof ep, "tcp://%s", addr);
    zmq_setsockopt(in, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(in, ep) == 0) return in;
    zmq_close(in);
    return NULL;
}

/* One ps frame received on the raw inbox IN within 5 s (routing id, header, payload; a
 * message of other parts is not one): the payload copied into BUF (CAP bytes) and decoded
 * into *F against HASH and SHARD floats (0, 0: not checked). Returns the header's type, -1
 * for a message that is not such a frame, -2 when nothing came. */
static int raw_recv(void *in, uint64_t hash, size_t shard, uint8_t *buf, size_t cap, sl_ps_frame *f) {
    int to = 5000, n = 0, more = 1, type = -1;
    zmq_setsockopt(in, ZMQ_RCVTIMEO, &to, sizeof to);
    zmq_msg_t part[3];
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, in, 0) == -1) {
            zmq_msg_close(&m);
            for (int i = 0; i < n; i++) zmq_msg_close(&part[i]);
            return -2;
        }
        more = zmq_msg_more(&m);
        if (n < 3) { zmq_msg_init(&part[n]); zmq_msg_move(&part[n++], &m); }
        zmq_msg_close(&m);
    }
    sl_msg_hdr h;
    size_t len = n == 3 ? zmq_msg_size(&part[2]) : 0;
    if (n == 3 && sl_msg_decode(zmq_msg_data(&part[1]), zmq_msg_size(&part[1]), &h) == SL_OK && len <= cap) {
        memcpy(buf, zmq_msg_data(&part[2]), len);
        if (sl_ps_frame_decode(&h, buf, len, hash, shard, f) == SL_OK) type = h.type;
    }
    for (int i = 0; i < n; i++) zmq_msg_close(&part[i]);
    return type;
}

/* Receive one REPLY on the raw inbox `in` (a ROUTER bound on a worker's address). */
static int raw_reply(void *in, const sl_ps_plan *p, sl_ps_frame *f, float *data) {
    static _Alignas(8) uint8_t buf[1 << 16];
    if (raw_recv(in, p->hash, p->shard_len[0], buf, sizeof buf, f) < 0 || f->type != SL_MSG_REPLY) return -1;
    if (f->n) memcpy(data, f->data, f->n * sizeof(float));
    return 0;
}

/* Worker 1 as raw ZeroMQ beside a chief that is a real client. */
typedef struct raw_worker {
    sl_ps_client *chief;
    void *zctx, *out, *in; /* worker 1's context, DEALER to the ps, ROUTER inbox */
} raw_worker;

/* The chief joins (its parameters init_of, in FLAT), then worker 1's DEALER says HELLO (seq
 * 100) to server V and its ROUTER inbox, bound on worker 1's address, takes the reply (into
 * *R; the parameters into GOT). Returns 0, or -1 (after saying why) when a step failed. */
static int raw_worker_open(raw_worker *rw, cluster *c, srv *v, const sl_ps_plan *p, float *flat, uint8_t *buf,
                           sl_ps_frame *r, float *got) {
    sl_ps_client_opts co = {.retry_s = 20};
    int64_t resume;
    for (size_t i = 0; i < p->total; i++) flat[i] = init_of(i);
    memset(rw, 0, sizeof *rw);
    if (sl_ps_client_create(c->addrs, 2, 0, p, NULL, &co, &rw->chief) || sl_ps_client_join(rw->chief, flat, &resume)) {
        printf("  chief: %s\n", sl_errmsg());
        return -1;
    }
    rw->zctx = zmq_ctx_new();
    rw->out = raw_dealer(rw->zctx, sl_ps_server_endpoint(v->s), 1);
    if (!(rw->in = raw_inbox(rw->zctx, c->addrs[1]))) {
        printf("  worker 1's inbox %s: %s\n", c->addrs[1], zmq_strerror(zmq_errno()));
        return -1;
    }
    sl_ps_frame f = {.plan_hash = p->hash, .seq = 100};
    sl_ps_frame_encode_prefix(&f, buf);
    raw_frame(rw->out, SL_MSG_HELLO, 1, 0, 0, buf, SL_PS_PREFIX);
    if (raw_reply(rw->in, p, r, got)) {
        printf("  no reply to worker 1's HELLO\n");
        return -1;
    }
    return 0;
}

/* Worker 1 says BYE (BUF: room for the prefix). */
static void raw_worker_bye(raw_worker *rw, const sl_ps_plan *p, uint8_t *buf) {
    sl_ps_frame f = {.plan_hash = p->hash};
    sl_ps_frame_encode_prefix(&f, buf);
    raw_frame(rw->out, SL_MSG_BYE, 1, 0, 0, buf, SL_PS_PREFIX);
}

/* The chief says BYE and is freed, server V ends, worker 1's sockets are closed. Returns
 * the status of the chief's BYE. */
static sl_status raw_worker_end(raw_worker *rw, srv *v) {
    sl_status st = sl_ps_client_bye(rw->chief);
    sl_ps_client_free(rw->chief);
    pthread_join(v->t, NULL);
    zmq_close(rw->out);
    zmq_close(rw->in);
    zmq_ctx_term(rw->zctx);
    return st;
}

TEST(test_retried_push_applied_once) {
    cluster c;
    sl_ps_plan *p;
    srv v;
    ASSERT_EQ(start_ps(&c, 2, 1, NULL, &p, &v), 0);
    size_t n = p->total;
    float *flat = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
    uint8_t *buf = malloc(SL_PS_PREFIX + 4 * n);
    /* worker 1 is raw ZeroMQ: a DEALER to the ps and a ROUTER inbox for its replies */
    raw_worker rw;
    sl_ps_frame f, r;
    ASSERT_EQ(raw_worker_open(&rw, &c, &v, p, flat, buf, &r, got), 0);
    ASSERT_U64(r.seq, 100);
    ASSERT_EQ(r.value, -1);
    ASSERT_EQ(r.status, SL_PS_OK);
    ASSERT_MEMEQ(got, flat, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float g = grad_of(1, 0, i);
        memcpy(buf + SL_PS_PREFIX + 4 * i, &g, 4);
    }
    int64_t pushes[2][2] = {{0, 0}, {0, 1}};
    expect_async(p, 2, pushes, want, 2);
    /* the push, its retry (same seq), and a retry across a restart (new seq, same step) */
    uint64_t seqs[3] = {101, 101, 102};
    for (int k = 0; k < 3; k++) {
        f = (sl_ps_frame){.plan_hash = p->hash, .seq = seqs[k], .value = 0, .lr = LR};
        sl_ps_frame_encode_prefix(&f, buf);
        raw_frame(rw.out, SL_MSG_PUSH, 1, 0, 0, buf, SL_PS_PREFIX + 4 * n);
        ASSERT_EQ(raw_reply(rw.in, p, &r, got), 0);
        ASSERT_U64(r.seq, seqs[k]);
        ASSERT_EQ(r.value, 1); /* version: applied once */
        ASSERT_MEMEQ(got, want, n * sizeof(float));
    }
    raw_worker_bye(&rw, p, buf);
    ASSERT_OK(sl_ps_client_pull(rw.chief, flat));
    ASSERT_MEMEQ(flat, want, n * sizeof(float));
    ASSERT_OK(raw_worker_end(&rw, &v));
    CHECK_SRV(v);
    ASSERT_EQ(v.stats.pushes, 3);
    ASSERT_EQ(v.stats.applied, 1);
    ASSERT_EQ(v.stats.dropped, 0);
    ASSERT_EQ(v.last_steps[1], 0);
    free(flat); free(got); free(want); free(buf);
    free_all(NULL, 0, &v, 1, p);
}

/* Compressed pushes (int8, top-k 1%): one worker, two ps tasks, 10 async steps. The servers
 * apply exactly what the worker's error feedback sent: replayed here with one residual per
 * shard, the final parameters match bit for bit; and the worker sent a fraction of the
 * float32 bytes. */
TEST(test_compressed_pushes) {
    const sl_compress_spec specs[2] = {{SL_COMPRESS_INT8, 0}, {SL_COMPRESS_TOPK, 0.01}};
    for (int k = 0; k < 2; k++) {
        cluster c;
        sl_ps_plan *p;
        srv v[2];
        ASSERT_EQ(start_ps(&c, 1, 2, &(sl_ps_server_opts){.staleness = -1, .compress = specs[k]}, &p, v), 0);
        wjob job = {.c = &c, .plan = p, .w = 0, .co = {.retry_s = 20}, .nsteps = 10, .cs = specs[k]};
        run_all(&job, 1, v, 2);
        CHECK_WORKER(job);
        for (int j = 0; j < 2; j++) CHECK_SRV(v[j]);
        size_t n = p->total;
        float *want = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
        float *sh = malloc(n * sizeof(float)), *sent = malloc(n * sizeof(float)), *pk = malloc(n * sizeof(float));
        size_t cap = sl_compress_size(&specs[k], n), len;
        unsigned char *buf = malloc(cap);
        for (int j = 0; j < 2; j++) {
            sl_compress_ef *ef;
            size_t m = p->shard_len[j];
            ASSERT_OK(sl_compress_ef_create(&specs[k], m, &ef));
            for (size_t i = 0; i < n; i++) want[i] = init_of(i);
            sl_ps_plan_gather(p, j, want, pk);
            for (int64_t s = 0; s < 10; s++) {
                for (size_t i = 0; i < n; i++) g[i] = grad_of(0, s, i);
                sl_ps_plan_gather(p, j, g, sh);
                ASSERT_OK(sl_compress_ef_step(ef, sh, m, buf, cap, &len, sent));
                for (size_t i = 0; i < m; i++) pk[i] -= LR * sent[i];
            }
            sl_compress_ef_free(ef);
            ASSERT_EQ(v[j].n, m);
            ASSERT_MEMEQ(v[j].saved, pk, m * sizeof(float));
            ASSERT_EQ(v[j].stats.applied, 10);
            ASSERT_EQ(v[j].stats.dropped, 0);
        }
        saved_flat(p, v, got);
        ASSERT_MEMEQ(job.params, got, n * sizeof(float));
        /* the INIT (4 n bytes) and ten pushes; float32 pushes would be 10 x 4 n bytes */
        ASSERT(job.sent < (uint64_t)(4 * n + (k == 0 ? 10 * n * 3 / 2 : 10 * n / 2) + 4096)); /* INIT: 4 n */
        free(want), free(g), free(got), free(sh), free(sent), free(pk), free(buf);
        free_all(&job, 1, v, 2, p);
    }
}

/* A compressed push that does not validate, or of another codec, is answered REJECT naming
 * the worker and step (and not taken as applied: the corrected push with the same seq is
 * then applied). Worker 1 is raw ZeroMQ, as above. */
TEST(test_compressed_push_refused) {
    cluster c;
    sl_ps_plan *p;
    srv v;
    sl_compress_spec tk = {SL_COMPRESS_TOPK, 0.01}, i8 = {SL_COMPRESS_INT8, 0};
    ASSERT_EQ(start_ps(&c, 2, 1, &(sl_ps_server_opts){.staleness = -1, .compress = tk}, &p, &v), 0);
    size_t n = p->total;
    float *flat = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    size_t cap = SL_PS_PREFIX + sl_compress_size(&i8, n), len;
    uint8_t *buf = malloc(cap);
    raw_worker rw;
    sl_ps_frame f, r;
    ASSERT_EQ(raw_worker_open(&rw, &c, &v, p, flat, buf, &r, got), 0);
    for (size_t i = 0; i < n; i++) g[i] = grad_of(1, 0, i);
    /* top-k of the shard, its first offset pushed past the chunk */
    f = (sl_ps_frame){.plan_hash = p->hash, .seq = 101, .value = 0, .lr = LR, .codec = SL_COMPRESS_TOPK};
    sl_ps_frame_encode_prefix(&f, buf);
    ASSERT_OK(sl_compress_encode(&tk, g, n, buf + SL_PS_PREFIX, cap - SL_PS_PREFIX, &len));
    uint8_t save0 = buf[SL_PS_PREFIX + 24], save1 = buf[SL_PS_PREFIX + 25];
    buf[SL_PS_PREFIX + 24] = 0xff;
    buf[SL_PS_PREFIX + 25] = 0xff;
    raw_frame(rw.out, SL_MSG_PUSH, 1, 0, 0, buf, SL_PS_PREFIX + len);
    ASSERT_EQ(raw_reply(rw.in, p, &r, got), 0);
    ASSERT_U64(r.seq, 101);
    ASSERT_EQ(r.status, SL_PS_REJECT);
    char why[1024];
    snprintf(why, sizeof why, "%.*s", (int)r.n_reason, r.reason);
    ASSERT_CONTAINS(why, "ps 0: worker 1, step 0: compressed gradient: byte 24: chunk 0: index 65535 is past the chunk's 4096 values");
    /* the same seq, repaired: applied */
    buf[SL_PS_PREFIX + 24] = save0;
    buf[SL_PS_PREFIX + 25] = save1;
    raw_frame(rw.out, SL_MSG_PUSH, 1, 0, 0, buf, SL_PS_PREFIX + len);
    ASSERT_EQ(raw_reply(rw.in, p, &r, got), 0);
    ASSERT_EQ(r.status, SL_PS_OK);
    ASSERT_EQ(r.value, 1);
    /* another codec than the ps's */
    f = (sl_ps_frame){.plan_hash = p->hash, .seq = 102, .value = 1, .lr = LR, .codec = SL_COMPRESS_INT8};
    sl_ps_frame_encode_prefix(&f, buf);
    ASSERT_OK(sl_compress_encode(&i8, g, n, buf + SL_PS_PREFIX, cap - SL_PS_PREFIX, &len));
    raw_frame(rw.out, SL_MSG_PUSH, 1, 0, 1, buf, SL_PS_PREFIX + len);
    ASSERT_EQ(raw_reply(rw.in, p, &r, got), 0);
    ASSERT_EQ(r.status, SL_PS_REJECT);
    snprintf(why, sizeof why, "%.*s", (int)r.n_reason, r.reason);
    ASSERT_STREQ(why, "ps 0: worker 1's push for step 1 is compressed with int8; this ps takes topk:0.01");
    raw_worker_bye(&rw, p, buf);
    ASSERT_OK(raw_worker_end(&rw, &v));
    CHECK_SRV(v);
    ASSERT_EQ(v.stats.applied, 1);
    ASSERT_EQ(v.stats.dropped, 1);
    ASSERT_EQ(v.stats.rejected, 1);
    free(flat), free(got), free(g), free(buf);
    free_all(NULL, 0, &v, 1, p);
}

/* A fake ps for client tests: receive on ROUTER `in` until a frame of `type` comes (others,
 * such as heartbeats, are skipped). Returns 0 with *f decoded (data copied to buf). */
static int fake_recv(void *in, int type, sl_ps_frame *f, uint8_t *buf, size_t cap) {
    for (int tries = 0; tries < 100; tries++) {
        int got = raw_recv(in, 0, 0, buf, cap, f);
        if (got == -2) return -1;
        if (got == type) return 0;
    }
    return -1;
}

static void fake_reply(void *out, const sl_ps_plan *p, uint64_t seq, int64_t value, const float *shard) {
    size_t n = p->shard_len[0];
    uint8_t *b = malloc(SL_PS_PREFIX + 4 * n);
    sl_ps_frame f = {.plan_hash = p->hash, .seq = seq, .value = value};
    sl_ps_frame_encode_prefix(&f, b);
    memcpy(b + SL_PS_PREFIX, shard, 4 * n);
    raw_frame(out, SL_MSG_REPLY, 1, 0, 0, b, SL_PS_PREFIX + 4 * n);
    free(b);
}

typedef struct client_job {
    cluster *c;
    const sl_ps_plan *p;
    float *flat;
    sl_status st;
    char msg[1024];
    double took;
} client_job;

static void *client_main(void *arg) {
    client_job *j = arg;
    sl_ps_client *cl = NULL;
    sl_ps_client_opts co = {.retry_s = 20};
    int64_t resume;
    size_t n = j->p->total;
    float *g = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) g[i] = 1.0f;
    j->st = sl_ps_client_create(j->c->addrs, 1, 0, j->p, NULL, &co, &cl);
    if (!j->st) j->st = sl_ps_client_join(cl, j->flat, &resume);
    double t0 = now_s();
    if (!j->st) j->st = sl_ps_client_push_pull(cl, g, 0, LR, j->flat);
    j->took = now_s() - t0;
    if (j->st) snprintf(j->msg, sizeof j->msg, "%s", sl_errmsg());
    sl_ps_client_free(cl);
    free(g);
    return NULL;
}

TEST(test_client_resends_same_seq) {
    cluster c;
    cluster_init(&c, 1, 1);
    sl_ps_plan *p = test_plan(1);
    size_t n = p->total;
    void *zctx = zmq_ctx_new();
    void *in = raw_inbox(zctx, c.addrs[1]);
    ASSERT(in);
    void *out = raw_dealer(zctx, c.addrs[0], 1); /* the fake ps is rank 1 */
    float *p0 = malloc(n * sizeof(float)), *p1 = malloc(n * sizeof(float)), *bad = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { p0[i] = 1.0f; p1[i] = 2.0f; bad[i] = 3.0f; }
    uint8_t *buf = malloc(SL_PS_PREFIX + 4 * n);
    client_job j = {.c = &c, .p = p, .flat = calloc(n, sizeof(float))};
    pthread_t t;
    pthread_create(&t, NULL, client_main, &j);
    sl_ps_frame f;
    ASSERT_EQ(fake_recv(in, SL_MSG_HELLO, &f, buf, SL_PS_PREFIX + 4 * n), 0);
    fake_reply(out, p, f.seq, -1, p0);
    /* the push arrives; a stale answer (an earlier seq) must be ignored; then the ps
     * "restarts" without answering: the client sends the same request again */
    ASSERT_EQ(fake_recv(in, SL_MSG_PUSH, &f, buf, SL_PS_PREFIX + 4 * n), 0);
    uint64_t seq = f.seq;
    ASSERT_EQ(f.value, 0);
    ASSERT(f.lr == LR);
    fake_reply(out, p, seq - 1, 99, bad);
    zmq_close(in);
    sleep_ms(300);
    in = raw_inbox(zctx, c.addrs[1]);
    ASSERT(in);
    ASSERT_EQ(fake_recv(in, SL_MSG_PUSH, &f, buf, SL_PS_PREFIX + 4 * n), 0);
    ASSERT_U64(f.seq, seq);
    ASSERT_EQ(f.value, 0);
    fake_reply(out, p, seq, 1, p1);
    pthread_join(t, NULL);
    zmq_close(in);
    zmq_close(out);
    zmq_ctx_term(zctx);
    if (j.st) { FAILF("client: %d %s", j.st, j.msg); return; }
    ASSERT_MEMEQ(j.flat, p1, n * sizeof(float));
    ASSERT(j.took < 4.5); /* the connection coming back, not the 5 s resend timer, re-sent it */
    free(p0); free(p1); free(bad); free(buf); free(j.flat);
    sl_ps_plan_free(p);
}

TEST(test_errors) {
    cluster c;
    cluster_init(&c, 1, 1);
    sl_ps_plan *p = test_plan(1), *other;
    size_t sz[1] = {7};
    ASSERT_OK(sl_ps_plan_create(sz, 1, 1, 0, &other));
    sl_ps_server *s = (sl_ps_server *)1;
    sl_ps_server_ops ops = {.apply = apply_sgd};
    ASSERT_EQ(sl_ps_server_create(c.addrs, 1, 1, p, NULL, &ops, NULL, NULL, NULL, &s), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "ps server: ps 1 of 1 with 1 workers is out of range");
    ASSERT(s == NULL);
    sl_ps_server_ops none = {0};
    ASSERT_EQ(sl_ps_server_create(c.addrs, 1, 0, p, NULL, &none, NULL, NULL, NULL, &s), SL_EINVAL);
    sl_ps_client *cl = (sl_ps_client *)1;
    ASSERT_EQ(sl_ps_client_create(c.addrs, 1, 1, p, NULL, NULL, &cl), SL_EINVAL);
    ASSERT(cl == NULL);
    /* a worker with another model is rejected; the server's shard is untouched */
    srv v;
    memset(&v, 0, sizeof v);
    ASSERT_EQ(srv_start(&v, &c, 0, p, NULL, NULL, NULL), 0);
    sl_ps_client_opts co = {.retry_s = 3};
    ASSERT_OK(sl_ps_client_create(c.addrs, 1, 0, other, NULL, &co, &cl));
    float flat[7] = {0};
    int64_t resume;
    ASSERT_EQ(sl_ps_client_join(cl, flat, &resume), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "worker 0: ps 0 (");
    ASSERT_CONTAINS(sl_errmsg(), ") rejected join: ps 0: plan hash 0x");
    /* bad arguments fail before anything is sent */
    float g[7] = {0, 0, NAN, 0, 0, 0, 0};
    ASSERT_EQ(sl_ps_client_push_pull(cl, g, 0, 0.1f, flat), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "worker 0: gradient float 2 is nan (a ps only takes finite values)");
    ASSERT_EQ(sl_ps_client_push_pull(cl, flat, -1, 0.1f, flat), SL_EINVAL);
    sl_ps_client_free(cl);
    __atomic_store_n(&v.stop, 1, __ATOMIC_RELAXED);
    pthread_join(v.t, NULL);
    ASSERT_EQ(v.st, SL_ECANCELED);
    ASSERT_EQ(v.stats.rejected, 1);
    ASSERT_EQ(v.stats.applied, 0);
    ASSERT_EQ(v.saves, 0); /* never initialised: nothing to save */
    srv_done(&v);
    /* nobody answers: the join gives up after retry_s, naming the ps */
    cluster_init(&c, 1, 1);
    co.retry_s = 0.5;
    ASSERT_OK(sl_ps_client_create(c.addrs, 1, 0, p, NULL, &co, &cl));
    float *fl = calloc(p->total, sizeof(float));
    char want[160];
    snprintf(want, sizeof want, "worker 0: no answer from ps 0 (%s) to join in 0.5 s", c.addrs[1]);
    ASSERT_EQ(sl_ps_client_join(cl, fl, &resume), SL_ETIMEDOUT);
    ASSERT_CONTAINS(sl_errmsg(), want);
    sl_ps_client_free(cl);
    free(fl);
    sl_ps_plan_free(other);
    sl_ps_plan_free(p);
}

TEST(test_curve_stranger_refused) {
    if (!zmq_has("curve")) SKIP("libzmq has no CURVE");
    char spub[41], ssec[41], ppub[41], psec[41], c0pub[41], c0sec[41], c1pub[41], c1sec[41];
    ASSERT_EQ(zmq_curve_keypair(spub, ssec), 0);
    ASSERT_EQ(zmq_curve_keypair(ppub, psec), 0);
    ASSERT_EQ(zmq_curve_keypair(c0pub, c0sec), 0);
    ASSERT_EQ(zmq_curve_keypair(c1pub, c1sec), 0);
    /* the ps and worker 0 are allowed; worker 1's key is not on the list */
    char allow[2][41];
    memcpy(allow[0], ppub, 41);
    memcpy(allow[1], c0pub, 41);
    sl_tp_curve cps = {.allow = allow, .nallow = 2}, cw0, cw1;
    memcpy(cps.server_public, spub, 41);
    memcpy(cps.server_secret, ssec, 41);
    cw0 = cw1 = cps;
    memcpy(cps.client_public, ppub, 41);
    memcpy(cps.client_secret, psec, 41);
    memcpy(cw0.client_public, c0pub, 41);
    memcpy(cw0.client_secret, c0sec, 41);
    memcpy(cw1.client_public, c1pub, 41);
    memcpy(cw1.client_secret, c1sec, 41);
    cluster c;
    cluster_init(&c, 2, 1);
    sl_ps_plan *p = test_plan(1);
    srv v;
    memset(&v, 0, sizeof v);
    sl_ps_server_ops ops = {.ctx = &v, .apply = apply_sgd, .save = save_cb};
    sl_ps_server_opts so = {.staleness = -1, .dead_after_s = 1.5, .stop = &v.stop}; /* worker 1 never joins */
    /* the intruder's transport timeout is 1 s: with 5 s, as the others', its pull (after the
     * failed push) waited out that send timeout twice, 10 s, before failing the same way */
    sl_tp_opts tps = {.timeout_s = 5, .curve = &cps}, tw0 = {.timeout_s = 5, .curve = &cw0},
               tw1 = {.timeout_s = 1, .curve = &cw1};
    ASSERT_OK(sl_ps_server_create(c.addrs, 2, 0, p, &tps, &ops, &so, NULL, NULL, &v.s));
    pthread_create(&v.t, NULL, srv_main, &v);
    size_t n = p->total;
    float *flat = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) flat[i] = init_of(i);
    sl_ps_client_opts co = {.retry_s = 10};
    sl_ps_client *chief = NULL, *intruder = NULL;
    int64_t resume = 0;
    ASSERT_OK(sl_ps_client_create(c.addrs, 2, 0, p, &tw0, &co, &chief));
    ASSERT_OK(sl_ps_client_join(chief, flat, &resume));
    for (int s = 0; s < 2; s++) {
        for (size_t i = 0; i < n; i++) g[i] = grad_of(0, s, i);
        ASSERT_OK(sl_ps_client_push_pull(chief, g, s, LR, flat));
    }
    /* a worker whose key is not allowed gets nowhere, and changes nothing (each request
     * gives up after retry_s: nothing can answer it, however long it waits) */
    co.retry_s = 0.5;
    ASSERT_OK(sl_ps_client_create(c.addrs, 2, 1, p, &tw1, &co, &intruder));
    float *mine = calloc(n, sizeof(float));
    sl_status st = sl_ps_client_join(intruder, mine, &resume);
    ASSERT(st == SL_ETIMEDOUT || st == SL_EPEER);
    ASSERT_CONTAINS(sl_errmsg(), "worker 1: ");
    for (size_t i = 0; i < n; i++) g[i] = 100.0f;
    ASSERT(sl_ps_client_push_pull(intruder, g, 0, LR, mine) < 0);
    ASSERT(sl_ps_client_pull(intruder, mine) < 0);
    for (size_t i = 0; i < n; i++) ASSERT(mine[i] == 0.0f); /* nothing pulled */
    sl_ps_client_free(intruder);
    int64_t pushes[1][2] = {{0, 2}};
    expect_async(p, 1, pushes, want, 2);
    ASSERT_OK(sl_ps_client_pull(chief, flat));
    ASSERT_MEMEQ(flat, want, n * sizeof(float));
    ASSERT_OK(sl_ps_client_bye(chief));
    sl_ps_client_free(chief);
    pthread_join(v.t, NULL);
    CHECK_SRV(v);
    ASSERT_EQ(v.stats.applied, 2);
    ASSERT_EQ(v.stats.pushes, 2);
    ASSERT_MEMEQ(v.saved, want, n * sizeof(float));
    free(flat); free(g); free(want); free(mine);
    srv_done(&v);
    sl_ps_plan_free(p);
}

int main(void) {
    RUN(test_async_two_by_two);
    RUN(test_join_waits_for_chief);
    RUN(test_sync_rounds);
    RUN(test_sync_has_data_and_sums);
    RUN(test_sum_needs_sync);
    RUN(test_sync_first_round_waits_for_all);
    RUN(test_async_late_worker_served);
    RUN(test_async_never_joined_worker);
    RUN(test_restored_sync_waits_for_all);
    RUN(test_staleness_bound);
    RUN(test_dead_worker_releases_sync_round);
    RUN(test_silent_worker_and_heartbeats);
    RUN(test_restarted_worker_resumes);
    RUN(test_restarted_server);
    RUN(test_garbage_dropped_server_serves_on);
    RUN(test_other_job_cannot_alter_ps);
    RUN(test_retried_push_applied_once);
    RUN(test_compressed_pushes);
    RUN(test_compressed_push_refused);
    RUN(test_client_resends_same_seq);
    RUN(test_errors);
    RUN(test_curve_stranger_refused);
    TEST_MAIN_END();
}
