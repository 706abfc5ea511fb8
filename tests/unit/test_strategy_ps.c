/* The parameter-server strategy (sluice/strategy.h): worker hooks and ps tasks as threads of
 * this process over TCP on 127.0.0.1. Two workers drive the hooks directly (start, exchange,
 * finish) against two ps tasks (sl_ps_task_run) with known gradients, and the result is
 * checked bit for bit against a local optimizer fed the same gradients in the same order:
 * SGD with momentum in async mode (pushes taken in turns, so the order is known; each at
 * lr / 2, train/strategy_ps.c says why) and Adam in sync mode (the mean of the two workers'
 * gradients each round, at lr). The shard checkpoints
 * must hold exactly the local optimizer's parameters and state, and a second run of the ps
 * tasks restores them (skipping a torn newer file), moves the rejoining workers' start step
 * past what they already pushed, and continues exactly where the first run stopped. Then
 * the trainer itself, two sync workers and two ps tasks as threads, on shards of 13 and 10
 * batches: every epoch ends together after 10 rounds of both (lockstep epochs), the workers
 * end identical, and the chief warns with the counts. The trainer end to end with
 * sluice-launch is an integration check (test_train_ps.sh). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <math.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sluice/cluster.h"
#include "sluice/config.h"
#include "sluice/example.h"
#include "sluice/model.h"
#include "sluice/ps.h"
#include "sluice/safetensors.h"
#include "sluice/strategy.h"
#include "sluice/tfrecord.h"
#include "sluice/train.h"
#include "sluice/util.h"
#include "helper_points.h"
#include "test.h"
#include "train/internal.h"

/* libzmq is not built with ThreadSanitizer (see tests/unit/test_strategy_ring.c). */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) { return "called_from_lib:libzmq.so\nrace:libzmq.so\n"; }

#define NW 2      /* workers */
#define NPS 2     /* ps tasks */
#define STEPS 3   /* pushes per worker in the first run */
#define MAXP 128  /* floats of the test model, with room */

static char tmpdir[256];

/* dense 6->5 (35), batchnorm 5 (gamma, beta: 10 trainable; running mean/var: 10 not),
 * dense 5->3 (18): 63 trainable floats of 73 */
static const char MODEL[] = "model m {\n  input 6\n  dense 5 activation=relu\n  batchnorm\n  dense 3\n}\n"
                            "pipeline train {\n  batch 4\n}\n";

/* Exactly representable gradients (multiples of 1/16 in [-0.5, 0.5]): sums and halves of
 * two are exact, so a sync round's mean has one right answer. */
static float grad_of(int worker, int64_t step, size_t i) {
    return (float)((int)((i * 7 + (size_t)step * 3 + (size_t)worker * 5) % 17) - 8) / 16.0f;
}

static float lr_of(int64_t step) { return 0.1f / (float)(1 + step); }

typedef struct scenario {
    char text[2048];
    char peers[64], ps[64];
    char run_dir[512];
    bool sync;
    int steps;            /* pushes per worker in this run */
    /* the turn gate (async: worker r pushes its k-th gradient at turn 2k + r) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, turn;
    bool failed;
    volatile int stop;    /* for the ps threads when a worker failed */
} scenario;

typedef struct worker {
    scenario *sc;
    int rank;
    sl_status st;
    char err[1024];
    int64_t start_step;         /* *step after the start hook */
    float joined[MAXP];         /* parameters after start */
    float after[8][MAXP];       /* parameters after each exchange */
    size_t np, nt;
    bool stats_kept;            /* running statistics untouched by the exchanges */
} worker;

typedef struct pstask {
    scenario *sc;
    int index;
    sl_status st;
    char err[1024];
    char *out;
    size_t outlen;
} pstask;

static bool gate_wait(scenario *sc, bool (*ready)(scenario *, int), int arg) {
    uint64_t dl = sl_now_ns() + 60000000000ull;
    pthread_mutex_lock(&sc->mu);
    int rc = 0;
    while (!sc->failed && !ready(sc, arg) && rc != ETIMEDOUT) rc = sl_cond_wait_until(&sc->cv, &sc->mu, dl);
    bool ok = !sc->failed && ready(sc, arg);
    pthread_mutex_unlock(&sc->mu);
    return ok;
}

static bool all_arrived(scenario *sc, int n) { return sc->arrived >= n; }
static bool my_turn(scenario *sc, int t) { return sc->turn == t; }

static void gate_bump(scenario *sc, int *field, bool fail) {
    pthread_mutex_lock(&sc->mu);
    if (field) (*field)++;
    if (fail) sc->failed = true;
    pthread_cond_broadcast(&sc->cv);
    pthread_mutex_unlock(&sc->mu);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    scenario *sc = w->sc;
    sl_cfg *cfg = NULL;
    sl_model *m = NULL;
    sl_optim *o = NULL;
    sl_cluster c = {0};
    sl_strategy_ps *s = NULL;
    sl_train_hooks h = {0};
    sl_train_config tc;
    sl_cluster_args a = {.peers = sc->peers, .ps = sc->ps, .rank = w->rank, .has_rank = 1};
    sl_status st;
    bool started = false;
    if ((st = sl_cfg_parse(sc->text, strlen(sc->text), "ps.sl", &cfg)) || (st = sl_train_config_parse(cfg, &tc)))
        goto out;
    sl_model_opts mo = sl_model_opts_default();
    mo.backend = SL_BACKEND_CPU;
    mo.threads = 1;
    mo.max_batch = 4;
    /* worker 1 starts from other values: joining must give it the chief's */
    mo.seed = tc.seed + (uint64_t)w->rank * 1000;
    if ((st = sl_model_from_config(cfg, "m", &mo, &m)) || (st = sl_optim_create(m, &tc.optim, &o)) ||
        (st = sl_cluster_resolve(&a, NULL, NULL, &c)))
        goto out;
    sl_strategy_ps_opts po = {.timeout_s = 5, .retry_s = 20};
    if ((st = sl_strategy_ps_create(&c, &tc, &po, &h, &s))) goto out;
    if (h.world_size != NW || h.rank != w->rank || h.is_chief != (w->rank == 0) || !h.start || !h.exchange ||
        !h.finish) {
        st = sl_err(SL_EINTERNAL, "hooks: world %d rank %d chief %d", h.world_size, h.rank, h.is_chief);
        goto out;
    }
    int64_t step = 0;
    if ((st = h.start(h.ctx, m, o, &step))) goto out;
    started = true;
    w->start_step = step;
    float *p = sl_model_params(m, &w->np);
    float *g = sl_model_grads(m, NULL);
    w->nt = sl__model_trainable(m);
    memcpy(w->joined, p, w->np * sizeof *p);
    /* running statistics are the worker's own: mark them, the exchanges must leave them */
    for (size_t i = w->nt; i < w->np; i++) p[i] = 0.25f * (float)(w->rank + 1) + (float)i;
    gate_bump(sc, &sc->arrived, false);
    if (!gate_wait(sc, all_arrived, NW)) {
        st = sl_err(SL_ETIMEDOUT, "waiting for the other worker to join");
        goto out;
    }
    for (int k = 0; k < sc->steps; k++) {
        int64_t sk = step + k;
        if (!sc->sync && !gate_wait(sc, my_turn, 2 * k + w->rank)) {
            st = sl_err(SL_ETIMEDOUT, "waiting for turn %d", 2 * k + w->rank);
            goto out;
        }
        for (size_t i = 0; i < w->np; i++) g[i] = i < w->nt ? grad_of(w->rank, sk, i) : 0.0f;
        sl_step rec = {.phase = SL_STEP_TRAIN, .model = m, .grads = g, .n = w->np, .lr = lr_of(sk), .loss_scale = 1,
                       .step = sk, .holds_next = true, .cardinality = -1, .data = "train"};
        sl_step_reply reply = {0};
        st = h.exchange(h.ctx, &rec, &reply);
        if (!st && !reply.applied) st = sl_err(SL_EINTERNAL, "exchange left applied false");
        /* sync: the round counted both workers' next batches; async: each worker alone */
        if (!st && reply.together != sc->sync)
            st = sl_err(SL_EINTERNAL, "sync %d: the reply's together is %d", sc->sync, reply.together);
        if (!st && sc->sync && (reply.holding != NW || reply.epoch_ends))
            st = sl_err(SL_EINTERNAL, "sync: holding %d, epoch_ends %d", reply.holding, reply.epoch_ends);
        if (st) goto out;
        memcpy(w->after[k], p, w->np * sizeof *p);
        if (!sc->sync) gate_bump(sc, &sc->turn, false);
    }
    w->stats_kept = true;
    for (size_t i = w->nt; i < w->np; i++)
        if (p[i] != 0.25f * (float)(w->rank + 1) + (float)i) w->stats_kept = false;
out:
    if (started) {
        sl_status fs = h.finish(h.ctx, st);
        if (!st) st = fs;
    }
    if (st) {
        snprintf(w->err, sizeof w->err, "%s", sl_errmsg());
        gate_bump(sc, NULL, true);
    }
    w->st = st;
    sl_strategy_ps_free(s);
    sl_cluster_free(&c);
    sl_optim_free(o);
    sl_model_free(m);
    sl_cfg_free(cfg);
    return NULL;
}

static void *ps_main(void *arg) {
    pstask *t = arg;
    scenario *sc = t->sc;
    sl_cfg *cfg = NULL;
    sl_cluster c = {0};
    FILE *con = open_memstream(&t->out, &t->outlen);
    sl_cluster_args a = {.peers = sc->peers, .ps = sc->ps, .task_type = "ps", .task_index = t->index};
    sl_status st;
    if (!(st = sl_cfg_parse(sc->text, strlen(sc->text), "ps.sl", &cfg)) && !(st = sl_cluster_resolve(&a, NULL, NULL, &c))) {
        sl_strategy_ps_opts po = {.timeout_s = 5, .ckpt_every_s = 0.05};
        st = sl_ps_task_run(cfg, &c, &po, con, &sc->stop);
    }
    if (st) snprintf(t->err, sizeof t->err, "%s", sl_errmsg());
    t->st = st;
    sl_cluster_free(&c);
    sl_cfg_free(cfg);
    fclose(con);
    return NULL;
}

/* A port base whose NW + NPS ports are free right now. */
static int free_ports(void) {
    unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL);
    for (int attempt = 0; attempt < 50; attempt++) {
        /* 12000..15999: below Linux's ephemeral ports (32768..60999, the source ports of
         * other tests' connections, which may take a port between this probe and the bind)
         * and apart from test_ps_server (16000..19999) and the integration scripts (20000..) */
        int base = 12000 + (int)(rand_r(&seed) % (4000 - NW - NPS));
        bool ok = true;
        for (int i = 0; i < NW + NPS && ok; i++) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)(base + i))};
            sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
            if (fd >= 0) close(fd);
        }
        if (ok) return base;
    }
    return 0;
}

/* One run of NPS ps threads and NW worker threads. */
static void run_cluster(scenario *sc, worker *w, pstask *t) {
    int base = free_ports();
    snprintf(sc->peers, sizeof sc->peers, "127.0.0.1:%d,127.0.0.1:%d", base, base + 1);
    snprintf(sc->ps, sizeof sc->ps, "127.0.0.1:%d,127.0.0.1:%d", base + 2, base + 3);
    sc->arrived = sc->turn = 0;
    sc->failed = false;
    sc->stop = 0;
    pthread_t pt[NPS], wt[NW];
    for (int j = 0; j < NPS; j++) {
        memset(&t[j], 0, sizeof t[j]);
        t[j].sc = sc;
        t[j].index = j;
        pthread_create(&pt[j], NULL, ps_main, &t[j]);
    }
    for (int i = 0; i < NW; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].sc = sc;
        w[i].rank = i;
        pthread_create(&wt[i], NULL, worker_main, &w[i]);
    }
    for (int i = 0; i < NW; i++) pthread_join(wt[i], NULL);
    if (w[0].st || w[1].st) __atomic_store_n(&sc->stop, 1, __ATOMIC_RELAXED); /* the ps tasks would wait for the chief's BYE */
    for (int j = 0; j < NPS; j++) pthread_join(pt[j], NULL);
}

/* The local reference: the same model (the chief's seed) and optimizer. */
typedef struct ref {
    sl_cfg *cfg;
    sl_model *m;
    sl_optim *o;
    size_t np, nt;
    sl_ps_plan *plan;
} ref;

static sl_status ref_open(const scenario *sc, ref *r) {
    memset(r, 0, sizeof *r);
    sl_train_config tc;
    sl_status st;
    if ((st = sl_cfg_parse(sc->text, strlen(sc->text), "ps.sl", &r->cfg)) || (st = sl_train_config_parse(r->cfg, &tc)))
        return st;
    sl_model_opts mo = sl_model_opts_default();
    mo.backend = SL_BACKEND_CPU;
    mo.threads = 1;
    mo.max_batch = 4;
    mo.seed = tc.seed;
    if ((st = sl_model_from_config(r->cfg, "m", &mo, &r->m)) || (st = sl_optim_create(r->m, &tc.optim, &r->o))) return st;
    sl_model_params(r->m, &r->np);
    r->nt = sl__model_trainable(r->m);
    /* the trainable tensors in flat order: the variables of the plan */
    size_t sizes[16];
    int nv = 0;
    size_t at = 0;
    while (at < r->nt) {
        for (int i = 0; i < sl_model_param_count(r->m); i++) {
            size_t off;
            int rank;
            int64_t dims[4];
            sl_model_param_info(r->m, i, NULL, &off, &rank, dims);
            if (off != at) continue;
            size_t len = 1;
            for (int d = 0; d < rank; d++) len *= (size_t)dims[d];
            sizes[nv++] = len;
            at += len;
            break;
        }
    }
    return sl_ps_plan_create(sizes, nv, NPS, 0, &r->plan);
}

static void ref_close(ref *r) {
    sl_ps_plan_free(r->plan);
    sl_optim_free(r->o);
    sl_model_free(r->m);
    sl_cfg_free(r->cfg);
}

/* One optimizer step on the given gradient of the trainable prefix. */
static sl_status ref_step(ref *r, const float *grad, float lr) {
    float *g = sl_model_grads(r->m, NULL);
    for (size_t i = 0; i < r->np; i++) g[i] = i < r->nt ? grad[i] : 0.0f;
    return sl_optim_step(r->o, lr);
}

/* The pushes of workers 0 and 1 for step s: in turn (async) or their mean (sync). */
static sl_status ref_round(ref *r, bool sync, int64_t s) {
    float g0[MAXP], g1[MAXP];
    for (size_t i = 0; i < r->nt; i++) {
        g0[i] = grad_of(0, s, i);
        g1[i] = grad_of(1, s, i);
    }
    if (!sync) {
        /* async: each push at lr / W, so a round of W pushes stands for one global step */
        sl_status st = ref_step(r, g0, lr_of(s) * 0.5f);
        return st ? st : ref_step(r, g1, lr_of(s) * 0.5f);
    }
    for (size_t i = 0; i < r->nt; i++) g0[i] = (g0[i] + g1[i]) * 0.5f;
    return ref_step(r, g0, lr_of(s));
}

/* The newest shard file of ps j (path into out), and how many there are. */
static int newest_shard(const char *run_dir, int j, char *out, size_t cap) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/ps-%d", run_dir, j);
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    long long best = -1;
    struct dirent *de;
    while ((de = readdir(d))) {
        long long v;
        char tail[64];
        if (sscanf(de->d_name, "shard-%12lld%63s", &v, tail) == 2 && strcmp(tail, ".safetensors") == 0) {
            n++;
            if (v > best) {
                best = v;
                snprintf(out, cap, "%s/%s", dir, de->d_name);
            }
        }
    }
    closedir(d);
    return n;
}

/* Check ps j's newest shard against the reference: params, optimizer state, metadata. */
static void check_shard(const ref *r, const scenario *sc, int j, int64_t version, int64_t ostep, const char *wsteps) {
    char path[800];
    int n = newest_shard(sc->run_dir, j, path, sizeof path);
    ASSERT(n >= 1);
    sl_st_file *f;
    ASSERT_OK(sl_st_open(path, &f));
    bool checksums = false; /* written with CRC32Cs, which the restore verifies */
    ASSERT_OK(sl_st_verify(f, &checksums));
    ASSERT(checksums);
    ASSERT_STREQ(sl_st_meta(f, "format"), "sluice-ps-shard");
    char buf[64];
    snprintf(buf, sizeof buf, "%" PRId64, version);
    ASSERT_STREQ(sl_st_meta(f, "version"), buf);
    snprintf(buf, sizeof buf, "%" PRId64, ostep);
    ASSERT_STREQ(sl_st_meta(f, "optimizer_step"), buf);
    snprintf(buf, sizeof buf, "%08" PRIx32, r->plan->hash);
    ASSERT_STREQ(sl_st_meta(f, "plan_hash"), buf);
    ASSERT_STREQ(sl_st_meta(f, "worker_steps"), wsteps);
    size_t len = r->plan->shard_len[j];
    float want[MAXP], flat[2 * MAXP];
    sl_tensor t = SL_TENSOR_EMPTY;
    ASSERT_OK(sl_st_get(f, "params", &t));
    ASSERT_EQ(sl_tensor_numel(&t), (int64_t)len);
    sl_ps_plan_gather(r->plan, j, sl_model_params(r->m, NULL), want);
    ASSERT_MEMEQ(t.data, want, len * sizeof(float));
    sl_tensor_release(&t);
    size_t ns;
    int64_t os;
    sl_optim_state(r->o, &ns, &os);
    ASSERT_EQ(os, ostep);
    ASSERT_OK(sl_optim_get_state(r->o, flat, ns));
    ASSERT_OK(sl_st_get(f, "optimizer/state", &t));
    /* velocity, or Adam's m then v: each packed like the parameters */
    size_t parts = ns / r->nt;
    ASSERT_EQ(sl_tensor_numel(&t), (int64_t)(parts * len));
    for (size_t k = 0; k < parts; k++) {
        sl_ps_plan_gather(r->plan, j, flat + k * r->nt, want);
        ASSERT_MEMEQ((const float *)t.data + k * len, want, len * sizeof(float));
    }
    sl_tensor_release(&t);
    sl_st_close(f);
    ASSERT(n <= 2); /* the last 2 are kept */
}

static void check_workers(worker *w, int nw) {
    for (int i = 0; i < nw; i++)
        if (w[i].st) FAILF("worker %d: %s", i, w[i].err);
}

static void check_ps(pstask *t) {
    for (int j = 0; j < NPS; j++)
        if (t[j].st) FAILF("ps %d: %s\n%s", j, t[j].err, t[j].out ? t[j].out : "");
}

/* The first run, then a second run of the same ps tasks and workers (restarted). */
static void two_runs(const char *name, const char *optimizer, bool sync) {
    scenario *sc = calloc(1, sizeof *sc);
    worker *w = calloc(NW, sizeof *w);
    pstask *t = calloc(NPS, sizeof *t);
    ref r;
    pthread_mutex_init(&sc->mu, NULL);
    sl_cond_init_mono(&sc->cv);
    snprintf(sc->run_dir, sizeof sc->run_dir, "%s/%s", tmpdir, name);
    snprintf(sc->text, sizeof sc->text,
             "%strain {\n  model m\n  data train\n  optimizer %s\n  strategy ps mode=%s\n  run_dir \"%s\"\n"
             "  backend cpu\n  threads 1\n  seed 5\n}\n",
             MODEL, optimizer, sync ? "sync" : "async", sc->run_dir);
    sc->sync = sync;
    sc->steps = STEPS;
    ASSERT_OK(ref_open(sc, &r));
    ASSERT(r.np < MAXP);

    run_cluster(sc, w, t);
    check_workers(w, NW);
    check_ps(t);
    if (t_cur_failed) goto out;
    for (int i = 0; i < NW; i++) {
        ASSERT_EQ(w[i].start_step, 0);
        ASSERT_EQ(w[i].np, 73);
        ASSERT_EQ(w[i].nt, 63);
        ASSERT(w[i].stats_kept);
        /* everyone starts from the chief's initialisation */
        ASSERT_MEMEQ(w[i].joined, sl_model_params(r.m, NULL), r.nt * sizeof(float));
    }
    for (int j = 0; j < NPS; j++) {
        char want[160];
        snprintf(want, sizeof want, "ps %d: serving %zu floats of 63 (plan %08" PRIx32 ") for 2 workers\n", j,
                 r.plan->shard_len[j], r.plan->hash);
        ASSERT_STREQ(t[j].out, want);
    }
    for (int k = 0; k < STEPS; k++) {
        if (sync) {
            ASSERT_OK(ref_round(&r, true, k));
            for (int i = 0; i < NW; i++) ASSERT_MEMEQ(w[i].after[k], sl_model_params(r.m, NULL), r.nt * sizeof(float));
        } else {
            float g[MAXP];
            for (int wi = 0; wi < NW; wi++) {
                for (size_t i = 0; i < r.nt; i++) g[i] = grad_of(wi, k, i);
                ASSERT_OK(ref_step(&r, g, lr_of(k) * 0.5f));
                /* the reply carries the parameters right after this push */
                ASSERT_MEMEQ(w[wi].after[k], sl_model_params(r.m, NULL), r.nt * sizeof(float));
            }
        }
    }
    int64_t updates = sync ? STEPS : NW * STEPS;
    for (int j = 0; j < NPS; j++) {
        check_shard(&r, sc, j, updates, updates, "2,2");
        free(t[j].out);
        t[j].out = NULL;
    }
    if (t_cur_failed) goto out;

    /* a torn newer file in ps 0's folder: the restore must skip it and take the newest good one */
    char good[800], torn[800];
    ASSERT(newest_shard(sc->run_dir, 0, good, sizeof good) >= 1);
    snprintf(torn, sizeof torn, "%s/ps-0/shard-999999999999.safetensors", sc->run_dir);
    {
        FILE *in = fopen(good, "rb"), *out = fopen(torn, "wb");
        ASSERT(in && out);
        char b[4096];
        size_t got = fread(b, 1, sizeof b, in);
        fwrite(b, 1, got / 2, out);
        fclose(in);
        fclose(out);
    }
    sc->steps = 1;
    run_cluster(sc, w, t);
    check_workers(w, NW);
    check_ps(t);
    if (t_cur_failed) goto out;
    char want[2048];
    /* the reader's reason follows: "PATH: byte N: what" */
    snprintf(want, sizeof want, "ps 0: skipping %s: %s: byte ", torn, torn);
    ASSERT(t[0].out && strncmp(t[0].out, want, strlen(want)) == 0);
    snprintf(want, sizeof want, "\nps 0: restored %s (version %" PRId64 ")\nps 0: serving ", good, updates);
    ASSERT_CONTAINS(t[0].out, want);
    ASSERT(t[1].out && strncmp(t[1].out, "ps 1: restored ", 15) == 0);
    for (int i = 0; i < NW; i++) {
        /* both pushed steps 0..2 before: they start at step 3, from the restored shards */
        ASSERT_EQ(w[i].start_step, STEPS);
        ASSERT_MEMEQ(w[i].joined, sl_model_params(r.m, NULL), r.nt * sizeof(float));
    }
    /* the restored optimizer state (and Adam's step count) continue exactly */
    ASSERT_OK(ref_round(&r, sync, STEPS));
    ASSERT_MEMEQ(w[1].after[0], sl_model_params(r.m, NULL), r.nt * sizeof(float));
    if (sync) ASSERT_MEMEQ(w[0].after[0], sl_model_params(r.m, NULL), r.nt * sizeof(float));
    updates += sync ? 1 : NW;
    /* the torn file outranks the new ones by name (and was kept as one of the last 2) */
    ASSERT_EQ(unlink(torn), 0);
    for (int j = 0; j < NPS; j++) check_shard(&r, sc, j, updates, updates, "3,3");
out:
    ref_close(&r);
    for (int j = 0; j < NPS; j++) free(t[j].out);
    pthread_mutex_destroy(&sc->mu);
    pthread_cond_destroy(&sc->cv);
    free(sc);
    free(w);
    free(t);
}

TEST(test_async_sgd_momentum) { two_runs("async", "sgd lr=0.1 momentum=0.9", false); }

TEST(test_sync_adam) { two_runs("sync", "adam lr=0.01", true); }

TEST(test_wrong_tasks) {
    sl_cfg *cfg;
    char text[1024];
    snprintf(text, sizeof text, "%strain {\n  model m\n  data train\n  strategy ps\n  run_dir \"%s/x\"\n}\n", MODEL,
             tmpdir);
    ASSERT_OK(sl_cfg_parse(text, strlen(text), "w.sl", &cfg));
    sl_train_config tc;
    ASSERT_OK(sl_train_config_parse(cfg, &tc));
    sl_train_hooks h;
    sl_strategy_ps *s = (sl_strategy_ps *)&h;
    /* a ps task has no trainer hooks */
    sl_cluster_args a = {.peers = "127.0.0.1:7000,127.0.0.1:7001", .ps = "127.0.0.1:7100", .task_type = "ps"};
    sl_cluster c;
    ASSERT_OK(sl_cluster_resolve(&a, NULL, NULL, &c));
    ASSERT_EQ(sl_strategy_ps_create(&c, &tc, NULL, &h, &s), SL_EINVAL);
    ASSERT(s == NULL);
    ASSERT_EQ(h.world_size, 0);
    ASSERT_STREQ(sl_errmsg(), "ps strategy: this process is ps 0, not a worker (chief or worker)\n"
                              "---> HINT: a ps task runs sl_ps_task_run, not the trainer");
    sl_cluster_free(&c);
    /* a worker is not a ps task */
    sl_cluster_args b = {.peers = "127.0.0.1:7000,127.0.0.1:7001", .ps = "127.0.0.1:7100", .rank = 1, .has_rank = 1};
    ASSERT_OK(sl_cluster_resolve(&b, NULL, NULL, &c));
    ASSERT_EQ(sl_ps_task_run(cfg, &c, NULL, NULL, NULL), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "ps task: this process is worker 1, not a ps task\n"
                              "---> HINT: chief and worker tasks train with `strategy ps` hooks (sl_strategy_ps_create)");
    sl_cluster_free(&c);
    /* no ps tasks in the cluster */
    sl_cluster_args d = {.peers = "127.0.0.1:7000,127.0.0.1:7001", .rank = 0, .has_rank = 1};
    ASSERT_OK(sl_cluster_resolve(&d, NULL, NULL, &c));
    ASSERT_EQ(sl_strategy_ps_create(&c, &tc, NULL, &h, &s), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "ps strategy: the cluster has no ps tasks");
    sl_cluster_free(&c);
    sl_cfg_free(cfg);
}

/* ---- unequal shards in sync mode: two trainers whose pipelines give 13 and 10 batches ---- */


/* Each worker's pipeline: SL_TEST_POINTS_UNEVEN_PIPELINE. The ps tasks read the same file
 * (take is theirs to ignore). */
static const char UNEVEN[] = SL_TEST_POINTS_UNEVEN_PIPELINE
                             "model tiny {\n"
                             "    input 4\n"
                             "    dense 8 activation=relu\n"
                             "    dense 2\n"
                             "}\n"
                             "train {\n"
                             "    model tiny\n"
                             "    data train\n"
                             "    %s\n"
                             "    optimizer sgd lr=0.1 momentum=0.9\n"
                             "    schedule cosine%s\n"
                             "    backend cpu\n"
                             "    threads 1\n"
                             "    seed 5\n"
                             "    strategy ps mode=sync%s\n"
                             "    run_dir \"%s/%s\"\n"
                             "}\n";

typedef struct uneven {
    const char *name;   /* run folder of the ps tasks, under tmpdir */
    const char *length; /* "epochs 2" or "steps 25" */
    int takes[NW];
    const char *sched, *strat; /* after `schedule cosine` and `strategy ps mode=sync` (NULL: nothing) */
    bool resume;        /* the workers resume from their run folders */
    int late_ms;        /* worker 1 starts this much after the others */
    char peers[64], ps[64];
    volatile int stop;
} uneven;

typedef struct trainer_job {
    uneven *u;
    int rank;           /* worker rank, or -1 - j for ps j */
    sl_status st;
    char err[1024];
    sl_train_summary sum;
    float params[64];
    size_t np;
} trainer_job;

static sl_status write_text(const uneven *u, int take, const char *file, char *path, size_t cap) {
    char text[2048];
    snprintf(text, sizeof text, UNEVEN, take, u->length, u->sched ? u->sched : "", u->strat ? u->strat : "", tmpdir,
             u->name);
    snprintf(path, cap, "%s/%s", tmpdir, file);
    FILE *f = fopen(path, "w");
    if (!f) return sl_err(SL_EIO, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
    return SL_OK;
}

static void *trainer_main(void *arg) {
    trainer_job *j = arg;
    uneven *u = j->u;
    sl_cfg *cfg = NULL;
    sl_cluster c = {0};
    sl_strategy_ps *s = NULL;
    sl_trainer *t = NULL;
    char file[64], path[600], run[600];
    snprintf(file, sizeof file, "%s-%d.sl", u->name, j->rank);
    sl_status st = write_text(u, j->rank >= 0 ? u->takes[j->rank] : 1, file, path, sizeof path);
    if (st || (st = sl_cfg_parse_file(path, &cfg))) goto out;
    if (j->rank < 0) {
        sl_cluster_args a = {.peers = u->peers, .ps = u->ps, .task_type = "ps", .task_index = -1 - j->rank};
        sl_strategy_ps_opts po = {.timeout_s = 10, .ckpt_every_s = 0.05};
        if (!(st = sl_cluster_resolve(&a, NULL, NULL, &c))) st = sl_ps_task_run(cfg, &c, &po, NULL, &u->stop);
        goto out;
    }
    sl_train_config tc;
    sl_cluster_args a = {.peers = u->peers, .ps = u->ps, .rank = j->rank, .has_rank = 1};
    sl_train_hooks h;
    sl_strategy_ps_opts po = {.timeout_s = 10, .retry_s = 30};
    if ((st = sl_train_config_parse(cfg, &tc)) || (st = sl_cluster_resolve(&a, NULL, NULL, &c)) ||
        (st = sl_strategy_ps_create(&c, &tc, &po, &h, &s)))
        goto out;
    /* sync mode answers by the lockstep rules (an epoch end after even steps: nothing to agree) */
    sl_step probe = {.phase = SL_STEP_EPOCH_END, .cardinality = -1, .data = "train"};
    sl_step_reply pr = {0};
    if ((st = h.exchange(h.ctx, &probe, &pr)) || !pr.together) {
        if (!st) st = sl_err(SL_EINTERNAL, "sync mode without lockstep epochs");
        goto out;
    }
    sl_train_opts o = sl_train_opts_default();
    if (j->rank == 1 && u->late_ms > 0) nanosleep(&(struct timespec){0, (long)u->late_ms * 1000000L}, NULL);
    snprintf(run, sizeof run, "%s/%s-w%d", tmpdir, u->name, j->rank);
    o.run_dir = run;
    o.hooks = &h;
    o.resume = u->resume;
    if ((st = sl_trainer_create(cfg, &o, &t))) {
        h.finish(h.ctx, st);
        goto out;
    }
    st = sl_trainer_run(t);
    j->sum = *sl_trainer_summary(t);
    sl_model *m = sl_trainer_model(t);
    sl_model_params(m, &j->np);
    if (!st && j->np <= 64) st = sl_model_get_params(m, j->params, j->np);
out:
    if (st) snprintf(j->err, sizeof j->err, "%s", sl_errmsg());
    j->st = st;
    sl_trainer_free(t);
    sl_strategy_ps_free(s);
    sl_cluster_free(&c);
    sl_cfg_free(cfg);
    return NULL;
}

/* NW workers and NPS ps tasks as threads; stderr (the warnings) into *err (malloc'd). */
static void run_uneven(uneven *u, trainer_job *w, trainer_job *p, char **err) {
    int base = free_ports();
    snprintf(u->peers, sizeof u->peers, "127.0.0.1:%d,127.0.0.1:%d", base, base + 1);
    snprintf(u->ps, sizeof u->ps, "127.0.0.1:%d,127.0.0.1:%d", base + 2, base + 3);
    u->stop = 0;
    char path[400];
    snprintf(path, sizeof path, "%s/%s.stderr", tmpdir, u->name);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    pthread_t pt[NPS], wt[NW];
    for (int j = 0; j < NPS; j++) {
        memset(&p[j], 0, sizeof p[j]);
        p[j].u = u;
        p[j].rank = -1 - j;
        pthread_create(&pt[j], NULL, trainer_main, &p[j]);
    }
    for (int i = 0; i < NW; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].u = u;
        w[i].rank = i;
        pthread_create(&wt[i], NULL, trainer_main, &w[i]);
    }
    for (int i = 0; i < NW; i++) pthread_join(wt[i], NULL);
    if (w[0].st || w[1].st) __atomic_store_n(&u->stop, 1, __ATOMIC_RELAXED); /* the ps tasks would wait for the chief's BYE */
    for (int j = 0; j < NPS; j++) pthread_join(pt[j], NULL);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    *err = NULL;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char *buf = calloc(1, 16384);
    if (buf && fread(buf, 1, 16383, f) == 0) buf[0] = 0;
    fclose(f);
    *err = buf;
}

/* The rounds every ps applied (its newest shard's version) and the workers' recorded steps. */
static void check_rounds(const uneven *u, int64_t version, const char *wsteps) {
    char run[600], path[800], want[32];
    snprintf(run, sizeof run, "%s/%s", tmpdir, u->name);
    snprintf(want, sizeof want, "%" PRId64, version);
    for (int j = 0; j < NPS; j++) {
        ASSERT(newest_shard(run, j, path, sizeof path) >= 1);
        sl_st_file *f;
        ASSERT_OK(sl_st_open(path, &f));
        ASSERT_STREQ(sl_st_meta(f, "version"), want);
        ASSERT_STREQ(sl_st_meta(f, "worker_steps"), wsteps);
        sl_st_close(f);
    }
}

/* epochs 2 over 13 and 10 batches, mode=sync: both workers take 10 steps per epoch (20 in
 * all, every one a round of both workers' real batches: the ps tasks applied 20 rounds),
 * end with the same parameters, and the chief warns with the counts, at the start and
 * after epoch 1. The old sync workers did not agree: worker 0 took 26 steps, the last 6
 * alone, pairing its batches 11-13 with worker 1's next epoch on the way. */
/* Compressed pushes (sign) in sync mode: two workers train 7 steps with a checkpoint; they
 * end identical, and each wrote its residual (one per ps shard, concatenated: all 58
 * values) beside the checkpoint, which loads back (test_sync_resume_exact resumes such a
 * run and compares it bit for bit). */
static void ps_compressed(const char *name, int steps, bool resume, trainer_job *w) {
    uneven u = {.name = name, .takes = {13, 13}, .sched = " total=20", .strat = " compress=sign", .resume = resume};
    char len[64];
    snprintf(len, sizeof len, "steps %d\n    checkpoint steps=7", steps);
    u.length = len;
    trainer_job p[NPS];
    char *err;
    run_uneven(&u, w, p, &err);
    for (int i = 0; i < NW; i++)
        if (w[i].st) printf("  %s worker %d: %s\n", name, i, w[i].err);
    for (int j = 0; j < NPS; j++)
        if (p[j].st) printf("  %s ps %d: %s\n", name, j, p[j].err);
    free(err);
}

TEST(test_sync_compressed_pushes) {
    trainer_job b[NW];
    ps_compressed("comp-b", 7, false, b);
    ASSERT_OK(b[0].st);
    ASSERT_OK(b[1].st);
    ASSERT_EQ(b[0].sum.steps, 7);
    ASSERT_MEMEQ(b[0].params, b[1].params, b[0].np * sizeof(float));
    for (int i = 0; i < NW; i++) {
        char run[600];
        snprintf(run, sizeof run, "%s/comp-b-w%d", tmpdir, i);
        double r[58];
        ASSERT_OK(sl_train_load_residual(run, i, 7, "sign", r, 58));
        double mag = 0;
        for (int k = 0; k < 58; k++) mag += fabs(r[k]);
        ASSERT(mag > 0); /* 1 bit per value leaves a residual */
        ASSERT_EQ(sl_train_load_residual(run, i, 7, "int8", r, 58), SL_EINVAL);
    }
}

/* Resume: 7 steps with a checkpoint at 7, then --resume (the workers from their checkpoints
 * and residuals, the ps tasks from their shards) to 20, equals 20 steps straight, bit for
 * bit: uncompressed, sign (1 bit: a large residual) and top-k. The resumed workers start
 * apart (worker 1 after worker 0 has joined and asked for its first sum): the restored ps
 * tasks must not form a round before both are back. */
/* A run of u named `name` that every worker and ps task must finish (what: for a failure). */
static void run_ok(uneven *u, const char *name, const char *length, trainer_job *w, const char *what) {
    trainer_job p[NPS];
    char *err;
    u->name = name;
    u->length = length;
    run_uneven(u, w, p, &err);
    free(err);
    for (int i = 0; i < NW; i++)
        if (w[i].st) FAILF("'%s' %s, worker %d: %s", u->strat, what, i, w[i].err);
    for (int j = 0; j < NPS; j++)
        if (p[j].st) FAILF("'%s' %s, ps %d: %s", u->strat, what, j, p[j].err);
}

static void ps_resume_codec(const char *codec, const char *straight, const char *resumed) {
    uneven u = {.sched = " total=20", .strat = codec, .takes = {13, 13}};
    trainer_job a[NW], b[NW];
    run_ok(&u, straight, "steps 20\n    checkpoint steps=7", a, "straight");
    run_ok(&u, resumed, "steps 7\n    checkpoint steps=7", b, "first 7 steps");
    if (t_cur_failed) return;
    u.resume = true;
    u.late_ms = 300;
    run_ok(&u, resumed, "steps 20\n    checkpoint steps=7", b, "resumed");
    if (t_cur_failed) return;
    for (int i = 0; i < NW; i++) {
        ASSERT_EQ(a[i].sum.steps, 20);
        ASSERT_EQ(b[i].sum.steps, 20);
        ASSERT_EQ(a[i].np, b[i].np);
        ASSERT_MEMEQ(a[i].params, b[i].params, a[i].np * sizeof(float));
    }
}

TEST(test_sync_resume_exact) {
    ps_resume_codec("", "res-none-a", "res-none-b");
    ps_resume_codec(" compress=sign", "res-sign-a", "res-sign-b");
    ps_resume_codec(" compress=topk(0.25)", "res-topk-a", "res-topk-b");
}

/* Ps j of run `to` restarts from the newest shard of run `from` (of another step). */
static void put_shard(const char *from, const char *to, int j) {
    char src[600], run[600], cmd[2000];
    snprintf(run, sizeof run, "%s/%s", tmpdir, from);
    ASSERT(newest_shard(run, j, src, sizeof src) >= 1);
    snprintf(cmd, sizeof cmd, "rm -f %s/%s/ps-%d/shard-* && cp %s %s/%s/ps-%d/", tmpdir, to, j, src, tmpdir, to, j);
    ASSERT_EQ(system(cmd), 0);
}

/* A resume whose ps shards are not of the chief's checkpoint step is refused by every
 * worker with the same error naming the mismatch (not trained on, not left waiting): ps 1's
 * shard of step 5 with ps 0's of step 7, then both of step 5 with the checkpoint of 7, then
 * (compressed: the residuals are of the checkpoint's step) both of 7 with the one of 5. */
static void resume_refused(uneven *u, const char *want) {
    trainer_job w[NW], p[NPS];
    char *err;
    run_uneven(u, w, p, &err);
    free(err);
    for (int i = 0; i < NW; i++) {
        ASSERT_EQ(w[i].st, SL_EINVAL);
        ASSERT_CONTAINS(w[i].err, want);
        ASSERT_EQ(w[i].sum.steps, 0);
    }
}

TEST(test_sync_resume_mismatch) {
    uneven u = {.sched = " total=20", .strat = " compress=sign", .takes = {13, 13}};
    trainer_job w[NW];
    run_ok(&u, "mis-5", "steps 5\n    checkpoint steps=5", w, "5 steps");
    run_ok(&u, "mis-7", "steps 7\n    checkpoint steps=7", w, "7 steps");
    if (t_cur_failed) return;
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cp -r %s/mis-5 %s/mis-5-shards && cp -r %s/mis-7 %s/mis-7-shards", tmpdir, tmpdir, tmpdir,
             tmpdir);
    ASSERT_EQ(system(cmd), 0);
    put_shard("mis-5-shards", "mis-7", 1);
    u.length = "steps 20\n    checkpoint steps=7";
    u.resume = true;
    resume_refused(&u, "start: the ps tasks' shards are of different steps: ps 0 "
                       "recorded worker 0's steps up to 6, ps 1 up to 4\n---> HINT: each ps task restores");
    put_shard("mis-5-shards", "mis-7", 0);
    resume_refused(&u, "start: the workers would start at different steps: worker 0 at step 7 (its checkpoint), "
                       "worker 1 at step 5 (the ps tasks recorded its steps up to 4)\n---> HINT: a synchronous run");
    /* shards of step 7 and the checkpoint of 5: both would move on to 7, without residuals */
    put_shard("mis-7-shards", "mis-5", 0);
    put_shard("mis-7-shards", "mis-5", 1);
    u.name = "mis-5";
    resume_refused(&u, "start: worker 0's checkpoint is of step 5, the ps tasks' shards of step 7: with compress=sign "
                       "its residual of step 7 is missing\n---> HINT: the ps tasks saved");
}

/* run_uneven, failing the test with each worker's and ps task's error; false when any failed. */
static bool run_uneven_ok(uneven *u, trainer_job *w, trainer_job *p, char **err) {
    run_uneven(u, w, p, err);
    for (int i = 0; i < NW; i++)
        if (w[i].st) FAILF("worker %d: %s", i, w[i].err);
    for (int j = 0; j < NPS; j++)
        if (p[j].st) FAILF("ps %d: %s", j, p[j].err);
    return !t_cur_failed;
}

TEST(test_sync_unequal_shards_epochs) {
    uneven u = {.name = "uneven-epochs", .length = "epochs 2", .takes = {13, 10}};
    trainer_job w[NW], p[NPS];
    char *err;
    if (!run_uneven_ok(&u, w, p, &err)) goto out;
    for (int i = 0; i < NW; i++) {
        ASSERT_EQ(w[i].sum.steps, 20);
        ASSERT_EQ(w[i].sum.epochs_done, 2);
        ASSERT_EQ(w[i].sum.steps_per_epoch, 10);
    }
    ASSERT_EQ(w[0].np, 58); /* 4*8 + 8 + 8*2 + 2 */
    ASSERT_MEMEQ(w[0].params, w[1].params, w[0].np * sizeof(float));
    check_rounds(&u, 20, "19,19");
    ASSERT(err);
    ASSERT_CONTAINS(err, "warning: pipeline 'train': the replicas' shards give unequal batches per epoch (rank 0 13, "
                         "rank 1 10): every epoch ends at 10 steps on all replicas (3 batches of rank 0 unused per "
                         "epoch); give every replica as many batches to use all the data\n");
    ASSERT_CONTAINS(err, "warning: epoch 1: rank 1 ran out after 10 steps; rank 0 had 13: all replicas end the epoch "
                         "at 10 (3 batches of rank 0 unused); give every replica as many batches to use all the data\n");
    ASSERT(!strstr(err, "epoch 2:"));
out:
    free(err);
}

/* steps 25 over 10 and 13 batches (the chief has fewer): the epochs end together at 10 and
 * 20 and the third stops at the step limit on both: 25 rounds of both workers. */
TEST(test_sync_unequal_shards_steps) {
    uneven u = {.name = "uneven-steps", .length = "steps 25", .takes = {10, 13}};
    trainer_job w[NW], p[NPS];
    char *err;
    if (!run_uneven_ok(&u, w, p, &err)) goto out;
    for (int i = 0; i < NW; i++) {
        ASSERT_EQ(w[i].sum.steps, 25);
        ASSERT_EQ(w[i].sum.epochs_done, 2);
        ASSERT_EQ(w[i].sum.steps_per_epoch, 10);
    }
    ASSERT_MEMEQ(w[0].params, w[1].params, w[0].np * sizeof(float));
    check_rounds(&u, 25, "24,24");
    ASSERT(err);
    ASSERT_CONTAINS(err, "warning: epoch 1: rank 0 ran out after 10 steps; rank 1 had 13: all replicas end the epoch at "
                         "10 (3 batches of rank 1 unused)");
out:
    free(err);
}

/* A worker whose pipeline is known to be empty while the other has 13 batches: both fail at
 * the start with the same error naming it (the agreement is a SUM round on ps 0). */
TEST(test_sync_empty_shard) {
    uneven u = {.name = "uneven-empty", .length = "epochs 1", .takes = {13, 0}};
    trainer_job w[NW], p[NPS];
    char *err;
    run_uneven(&u, w, p, &err);
    free(err);
    for (int i = 0; i < NW; i++) {
        ASSERT_EQ(w[i].st, SL_EINVAL);
        ASSERT_STREQ(w[i].err, "pipeline 'train': rank 1 has no batch in an epoch while rank 0 has 13: its shard is empty\n"
                               "---> HINT: give every replica data: at least as many files as replicas with `shard "
                               "file`, or `shard data`, and a batch no larger than a replica's shard");
        ASSERT_EQ(w[i].sum.steps, 0);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sl_ps_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_wrong_tasks);
    RUN(test_async_sgd_momentum);
    RUN(test_sync_adam);
    if (sl_test_write_points(tmpdir)) {
        printf("cannot write test data: %s\n", sl_errmsg());
        return 1;
    }
    RUN(test_sync_unequal_shards_epochs);
    RUN(test_sync_unequal_shards_steps);
    RUN(test_sync_empty_shard);
    RUN(test_sync_compressed_pushes);
    RUN(test_sync_resume_exact);
    RUN(test_sync_resume_mismatch);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    TEST_MAIN_END();
}
