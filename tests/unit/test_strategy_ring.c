/* The ring strategy's hooks (sluice/strategy.h): one replica is a plain run, a ps task is
 * refused, and two replicas (threads of this process, over TCP on 127.0.0.1) leave start
 * with rank 0's parameters and exchange with the exact average of their gradients, with
 * equal hash logs, and a reply (sluice/step.h) that counts the replicas holding a next
 * batch. The trainer end to end is tests/integration/test_train_ring.sh. */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/cluster.h"
#include "sluice/config.h"
#include "sluice/model.h"
#include "sluice/example.h"
#include "sluice/strategy.h"
#include "sluice/tfevents.h"
#include "sluice/tfrecord.h"
#include "sluice/train.h"
#include "helper_points.h"
#include "test.h"

/* libzmq is not built with ThreadSanitizer: its lock-free queues between the I/O thread and
 * the caller are invisible to TSan (see tests/integration/tsan_zmq.supp). */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) { return "called_from_lib:libzmq.so\nrace:libzmq.so\n"; }

TEST(test_single_replica) {
    sl_cluster c;
    ASSERT_OK(sl_cluster_resolve(NULL, NULL, NULL, &c));
    ASSERT_EQ(c.world, 1);
    sl_train_hooks h;
    sl_strategy_ring *s;
    ASSERT_OK(sl_strategy_ring_create(&c, NULL, &h, &s));
    ASSERT_EQ(h.world_size, 1);
    ASSERT_EQ(h.rank, 0);
    ASSERT_EQ(h.is_chief, 1);
    ASSERT(h.start == NULL && h.exchange == NULL && h.finish == NULL);
    sl_strategy_ring_free(s);
    sl_cluster_free(&c);
}

TEST(test_ps_task_refused) {
    sl_cluster_args a = {.peers = "127.0.0.1:7000,127.0.0.1:7001", .ps = "127.0.0.1:7100", .task_type = "ps"};
    sl_cluster c;
    ASSERT_OK(sl_cluster_resolve(&a, NULL, NULL, &c));
    sl_train_hooks h;
    sl_strategy_ring *s = (sl_strategy_ring *)&c;
    ASSERT_EQ(sl_strategy_ring_create(&c, NULL, &h, &s), SL_EINVAL);
    ASSERT(s == NULL);
    ASSERT_EQ(h.world_size, 0);
    ASSERT_STREQ(sl_errmsg(),
                 "ring strategy: this process is ps 0, not a ring member (chief or worker)\n"
                 "---> HINT: strategy ring trains on chief and worker tasks only; ps tasks belong to `strategy ps`");
    sl_cluster_free(&c);
}

/* Ports of this process: 4 from 10000 + (pid % 500) * 4, in 10000..11999 (below the ps unit
 * tests' 12000.. and the integration scripts' 20000..: tests/integration/lib.sh's plan). */
static int test_port(int k) { return 10000 + (int)(getpid() % 500) * 4 + k; }

static const char MODEL[] = "model m {\n  input 4\n  dense 3\n}\n";

typedef struct rep {
    int rank;
    char peers[64];
    uint64_t seed;
    sl_status st;
    float params[32], grads[32];
    size_t np;
    char *log;
    size_t loglen;
    sl_step_reply reply;   /* the step's */
    char err[512];
} rep;

static void *replica(void *arg) {
    rep *r = arg;
    sl_cfg *cfg = NULL;
    sl_model *m = NULL;
    sl_optim *o = NULL;
    sl_cluster c = {0};
    sl_strategy_ring *s = NULL;
    FILE *log = open_memstream(&r->log, &r->loglen);
    sl_cluster_args a = {.peers = r->peers, .rank = r->rank, .has_rank = 1};
    sl_model_opts mo = sl_model_opts_default();
    mo.backend = SL_BACKEND_CPU;
    mo.threads = 1;
    mo.seed = r->seed;
    sl_optim_spec os = {.kind = SL_OPTIM_SGD, .momentum = 0.9f};
    sl_train_hooks h;
    sl_status st;
    if ((st = sl_cfg_parse(MODEL, strlen(MODEL), "m.sl", &cfg)) || (st = sl_model_from_config(cfg, "m", &mo, &m)) ||
        (st = sl_optim_create(m, &os, &o)) || (st = sl_cluster_resolve(&a, NULL, NULL, &c)))
        goto out;
    sl_strategy_ring_opts ro = {.timeout_s = 10, .hash_log = log};
    if ((st = sl_strategy_ring_create(&c, &ro, &h, &s))) goto out;
    int64_t step0 = 0;
    if ((st = h.start(h.ctx, m, o, &step0))) goto out;
    r->reply = (sl_step_reply){.applied = true};
    size_t np, ng;
    float *p = sl_model_params(m, &np);
    float *g = sl_model_grads(m, &ng);
    r->np = np;
    memcpy(r->params, p, np * sizeof *p);
    /* integer-valued gradients: rank 0 gives i, rank 1 gives 3i + 1; the average is exact */
    for (size_t i = 0; i < ng; i++) g[i] = r->rank == 0 ? (float)i : (float)(3 * i + 1);
    /* only rank 0 holds a next batch: both learn that one does, and end the epoch */
    sl_step rec = {.phase = SL_STEP_TRAIN, .model = m, .grads = g, .n = ng, .lr = 0.1f, .loss_scale = 1,
                   .holds_next = r->rank == 0, .cardinality = -1, .data = "train"};
    if ((st = h.exchange(h.ctx, &rec, &r->reply))) goto out;
    memcpy(r->grads, g, ng * sizeof *g);
    if (!st) st = sl_optim_step(o, 0.1f);
    st = h.finish(h.ctx, st);
out:
    if (st) snprintf(r->err, sizeof r->err, "%s", sl_errmsg());
    r->st = st;
    sl_strategy_ring_free(s);
    sl_cluster_free(&c);
    sl_optim_free(o);
    sl_model_free(m);
    sl_cfg_free(cfg);
    fclose(log);
    return NULL;
}

TEST(test_two_replicas) {
    rep r[2];
    memset(r, 0, sizeof r);
    int port = test_port(0);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        r[i].rank = i;
        r[i].seed = 1 + (uint64_t)i * 77; /* different initialisations: start must equalise them */
        snprintf(r[i].peers, sizeof r[i].peers, "127.0.0.1:%d,127.0.0.1:%d", port, port + 1);
        pthread_create(&th[i], NULL, replica, &r[i]);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++)
        if (r[i].st) FAILF("rank %d: %s", i, r[i].err);
    ASSERT_OK(r[0].st);
    ASSERT_OK(r[1].st);
    ASSERT_EQ(r[0].np, 15); /* dense 4 -> 3: kernel 12 + bias 3 */
    ASSERT(memcmp(r[0].params, r[1].params, r[0].np * sizeof(float)) == 0);
    for (size_t i = 0; i < r[0].np; i++) {
        ASSERT(r[0].grads[i] == (float)(2 * i) + 0.5f);
        ASSERT(r[1].grads[i] == r[0].grads[i]);
    }
    /* the has-data flag rode on the gradient: one replica of two holds a next batch */
    for (int i = 0; i < 2; i++) {
        const sl_step_reply *y = &r[i].reply;
        if (y->applied || !y->together || y->holding != 1 || !y->epoch_ends || y->stop)
            FAILF("rank %d: applied %d together %d holding %d epoch_ends %d stop %d", i, y->applied, y->together,
                  y->holding, y->epoch_ends, y->stop);
    }
    /* "step 0 params H" and the final "step 1 params H'", the same on both */
    ASSERT(r[0].log && r[1].log);
    ASSERT_STREQ(r[0].log, r[1].log);
    unsigned long long h0, h1;
    ASSERT_EQ(sscanf(r[0].log, "step 0 params %16llx\nstep 1 params %16llx\n", &h0, &h1), 2);
    ASSERT(h0 != h1);
    free(r[0].log);
    free(r[1].log);
}

/* ---- unequal shards: two trainers whose pipelines give 13 and 10 batches per epoch ---- */

static char tmpdir[256];


/* Each replica's pipeline: SL_TEST_POINTS_UNEVEN_PIPELINE. */
static const char UNEVEN[] = SL_TEST_POINTS_UNEVEN_PIPELINE
                             "model tiny {\n"
                             "%s"
                             "}\n"
                             "train {\n"
                             "    model tiny\n"
                             "    data train\n"
                             "    %s\n"
                             "    optimizer sgd lr=0.1 momentum=0.9\n"
                             "    schedule cosine%s\n"
                             "    backend %s\n"
                             "    threads 1\n"
                             "    seed 5\n"
                             "    strategy ring\n"
                             "}\n";

typedef struct trep {
    int rank, take;
    const char *length; /* "epochs 2" or "steps 25" */
    int fp16;           /* gradients as float16 on the wire */
    char peers[64];
    sl_status st;
    char err[512];
    sl_train_summary sum;
    float params[256];
    size_t np;
    int buckets;        /* sl_strategy_ring_buckets after the run */
    uint64_t reduced;
    char *log;
    size_t loglen;
    char *con;          /* rank 0's console (epoch lines) */
    size_t conlen;
} trep;

/* Settings of the next run_pair (the compression tests): the codec, --resume, one run
 * folder for both replicas (run0), and what follows `schedule cosine`. */
static sl_compress_spec pair_cs;
static bool pair_resume, pair_shared_run, pair_console; /* pair_console: rank 0's epoch lines into con */
static const char *pair_sched = "";
/* The bucketed exchange's bucket size (opts.bucket_bytes), and the model's layers. */
static size_t pair_bucket;
static const char TINY[] = "    input 4\n    dense 8 activation=relu\n    dense 2\n";
static const char *pair_model = TINY;

static void *train_replica(void *arg) {
    trep *r = arg;
    sl_cfg *cfg = NULL;
    sl_cluster c = {0};
    sl_strategy_ring *s = NULL;
    sl_trainer *t = NULL;
    FILE *log = open_memstream(&r->log, &r->loglen);
    FILE *con = r->rank == 0 && pair_console ? open_memstream(&r->con, &r->conlen) : NULL;
    char text[2048], name[400], run[400];
    /* SL_TEST_BACKEND=cuda runs the pairs on a GPU (tests/gpu: the bucketed exchange's copies) */
    const char *bk = getenv("SL_TEST_BACKEND");
    snprintf(text, sizeof text, UNEVEN, r->take, pair_model, r->length, pair_sched, bk && *bk ? bk : "cpu");
    snprintf(name, sizeof name, "%s/r%d.sl", tmpdir, r->rank);
    snprintf(run, sizeof run, "%s/run%d", tmpdir, pair_shared_run ? 0 : r->rank);
    FILE *f = fopen(name, "w");
    sl_status st = SL_EIO;
    if (!f) goto out;
    fputs(text, f);
    fclose(f);
    sl_cluster_args a = {.peers = r->peers, .rank = r->rank, .has_rank = 1};
    sl_train_hooks h;
    sl_strategy_ring_opts ro = {.timeout_s = 20, .hash_log = log, .ring = {.fp16 = r->fp16}, .compress = pair_cs,
                                .optim = {.kind = SL_OPTIM_SGD, .momentum = 0.9f}, /* as in UNEVEN */
                                .bucket_bytes = pair_bucket};
    if ((st = sl_cfg_parse_file(name, &cfg)) || (st = sl_cluster_resolve(&a, NULL, NULL, &c)) ||
        (st = sl_strategy_ring_create(&c, &ro, &h, &s)))
        goto out;
    sl_train_opts o = sl_train_opts_default();
    o.run_dir = run;
    o.overwrite = !pair_resume; /* the tests of this file reuse run0 and run1 */
    o.resume = pair_resume;
    o.console = con;
    o.hooks = &h;
    if ((st = sl_trainer_create(cfg, &o, &t))) {
        h.finish(h.ctx, st);
        goto out;
    }
    st = sl_trainer_run(t);
    r->sum = *sl_trainer_summary(t);
    r->buckets = sl_strategy_ring_buckets(s, &r->reduced);
    sl_model *m = sl_trainer_model(t);
    sl_model_params(m, &r->np);
    if (!st && r->np <= 256) st = sl_model_get_params(m, r->params, r->np);
out:
    if (st) snprintf(r->err, sizeof r->err, "%s", sl_errmsg());
    r->st = st;
    sl_trainer_free(t);
    sl_strategy_ring_free(s);
    sl_cluster_free(&c);
    sl_cfg_free(cfg);
    fclose(log);
    if (con) fclose(con);
    return NULL;
}

/* Run two replicas with takes[0], takes[1] batches per epoch; stderr (the warnings) into
 * *err (malloc'd). */
static void run_pair(trep *r, const int takes[2], const char *length, int fp16, int port, char **err) {
    memset(r, 0, 2 * sizeof *r);
    char path[400];
    snprintf(path, sizeof path, "%s/stderr", tmpdir);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        r[i].rank = i;
        r[i].take = takes[i];
        r[i].length = length;
        r[i].fp16 = fp16;
        snprintf(r[i].peers, sizeof r[i].peers, "127.0.0.1:%d,127.0.0.1:%d", port, port + 1);
        pthread_create(&th[i], NULL, train_replica, &r[i]);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    *err = NULL;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char *buf = calloc(1, 8192);
    if (buf) fread(buf, 1, 8191, f);
    fclose(f);
    *err = buf;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; s && *s; s++) n += *s == '\n';
    return n;
}

/* epochs 2 over 13 and 10 batches: both replicas take 10 steps per epoch (20 in all), end
 * with the same parameters (and the same cosine schedule: its length is 2 x 10 steps on
 * both), and rank 0 says so with the counts, at the start and after epoch 1 (not again
 * after epoch 2: the same counts). The old loop paired rank 0's batches 11-13 with rank 1's
 * next epoch and failed at the final barrier. */
TEST(test_unequal_shards_epochs) {
    trep r[2];
    char *err;
    run_pair(r, (const int[2]){13, 10}, "epochs 2", 0, test_port(0), &err);
    for (int i = 0; i < 2; i++)
        if (r[i].st) FAILF("rank %d: %s", i, r[i].err);
    ASSERT_OK(r[0].st);
    ASSERT_OK(r[1].st);
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(r[i].sum.steps, 20);
        ASSERT_EQ(r[i].sum.epochs_done, 2);
        ASSERT_EQ(r[i].sum.steps_per_epoch, 10);
    }
    ASSERT_EQ(r[0].np, 58); /* 4*8 + 8 + 8*2 + 2 */
    ASSERT_MEMEQ(r[0].params, r[1].params, r[0].np * sizeof(float));
    ASSERT(r[0].log && r[1].log);
    ASSERT_STREQ(r[0].log, r[1].log);
    ASSERT_EQ(count_lines(r[0].log), 21); /* steps 0..19 and the final 20 */
    ASSERT(err);
    ASSERT_STREQ(err, "warning: pipeline 'train': the replicas' shards give unequal batches per epoch (rank 0 13, "
                      "rank 1 10): every epoch ends at 10 steps on all replicas (3 batches of rank 0 unused per "
                      "epoch); give every replica as many batches to use all the data\n"
                      "warning: epoch 1: rank 1 ran out after 10 steps; rank 0 had 13: all replicas end the epoch "
                      "at 10 (3 batches of rank 0 unused); give every replica as many batches to use all the data\n");
    free(err);
    free(r[0].log);
    free(r[1].log);
}

/* steps 25 over 10 and 13 batches (the chief has fewer): epochs end together at 10 and 20,
 * the third stops at the step limit on both; the parameters are the same. With fp16 on the
 * wire, so the has-data flag also survives the rounding. The old loop ran 25 steps on both,
 * but rank 1's epochs were 13 steps long. */
TEST(test_unequal_shards_steps) {
    trep r[2];
    char *err;
    run_pair(r, (const int[2]){10, 13}, "steps 25", 1, test_port(2), &err);
    for (int i = 0; i < 2; i++)
        if (r[i].st) FAILF("rank %d: %s", i, r[i].err);
    ASSERT_OK(r[0].st);
    ASSERT_OK(r[1].st);
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(r[i].sum.steps, 25);
        ASSERT_EQ(r[i].sum.epochs_done, 2);
        ASSERT_EQ(r[i].sum.steps_per_epoch, 10);
    }
    ASSERT_MEMEQ(r[0].params, r[1].params, r[0].np * sizeof(float));
    ASSERT_STREQ(r[0].log, r[1].log);
    ASSERT_EQ(count_lines(r[0].log), 26);
    ASSERT(err);
    ASSERT_CONTAINS(err, "warning: epoch 1: rank 0 ran out after 10 steps; rank 1 had 13: all replicas end the epoch at "
                         "10 (3 batches of rank 1 unused)");
    ASSERT(!strstr(err, "epoch 2:"));
    free(err);
    free(r[0].log);
    free(r[1].log);
}

/* A replica whose pipeline is known to be empty (take 0) while the other has 13 batches:
 * both fail at the start with the same error, which names it. */
TEST(test_empty_shard) {
    trep r[2];
    char *err;
    run_pair(r, (const int[2]){13, 0}, "epochs 1", 0, test_port(0), &err);
    free(err);
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(r[i].st, SL_EINVAL);
        ASSERT_STREQ(r[i].err, "pipeline 'train': rank 1 has no batch in an epoch while rank 0 has 13: its shard is empty\n"
                               "---> HINT: give every replica data: at least as many files as replicas with `shard "
                               "file`, or `shard data`, and a batch no larger than a replica's shard");
        ASSERT_EQ(r[i].sum.steps, 0);
        free(r[i].log);
    }
}

/* ---- compression: identical replicas, residuals in checkpoints, exact resume ---- */

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* One codec: 20 steps straight (A), versus 7 steps with a checkpoint, then --resume to 20
 * (B): the replicas agree at every step in both, and B's final parameters equal A's bit for
 * bit, because each replica's residual went into its sidecar file at step 7 and came back.
 * Without rank 1's sidecar the resumed run warns and ends elsewhere: the residual matters. */
static void compressed_resume(const sl_compress_spec *cs, int port) {
    trep a[2], b[2], c[2];
    char *err;
    char cmd[600];
    pair_cs = *cs;
    pair_shared_run = true;
    pair_sched = " total=20";
    snprintf(cmd, sizeof cmd, "rm -rf '%s/run0'", tmpdir);
    ASSERT_EQ(system(cmd), 0);
    pair_resume = false;
    run_pair(a, (const int[2]){13, 13}, "steps 20", 0, port, &err);
    free(err);
    for (int i = 0; i < 2; i++)
        if (a[i].st) FAILF("A rank %d: %s", i, a[i].err);
    ASSERT_OK(a[0].st);
    ASSERT_OK(a[1].st);
    ASSERT_STREQ(a[0].log, a[1].log); /* identical replicas at every step */
    ASSERT_MEMEQ(a[0].params, a[1].params, a[0].np * sizeof(float));
    ASSERT_EQ(system(cmd), 0);
    run_pair(b, (const int[2]){13, 13}, "steps 7\n    checkpoint steps=7 keep=2", 0, port, &err);
    free(err);
    ASSERT_OK(b[0].st);
    ASSERT_OK(b[1].st);
    char path[600];
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof path, "%s/run0/replica-%d/residual-000000007.safetensors", tmpdir, r);
        ASSERT(file_exists(path));
    }
    pair_resume = true;
    run_pair(c, (const int[2]){13, 13}, "steps 20\n    checkpoint steps=7 keep=2", 0, port, &err);
    for (int i = 0; i < 2; i++)
        if (c[i].st) FAILF("B rank %d: %s", i, c[i].err);
    ASSERT_OK(c[0].st);
    ASSERT_OK(c[1].st);
    ASSERT(!err || !strstr(err, "zero residual"));
    free(err);
    ASSERT_EQ(c[0].sum.start_step, 7);
    ASSERT_EQ(c[0].sum.steps, 20);
    ASSERT_STREQ(c[0].log, c[1].log);
    ASSERT_MEMEQ(c[0].params, a[0].params, a[0].np * sizeof(float)); /* bit-identical to A */
    ASSERT_MEMEQ(c[1].params, a[0].params, a[0].np * sizeof(float));
    /* keep=2: steps 14 and 20 remain, 7 is gone, on both replicas */
    snprintf(path, sizeof path, "%s/run0/replica-1/residual-000000007.safetensors", tmpdir);
    ASSERT(!file_exists(path));
    snprintf(path, sizeof path, "%s/run0/replica-1/residual-000000020.safetensors", tmpdir);
    ASSERT(file_exists(path));
    for (int i = 0; i < 2; i++) free(a[i].log), free(b[i].log), free(c[i].log);

    /* the same resume without rank 1's residual: a warning, and other parameters */
    ASSERT_EQ(system(cmd), 0);
    pair_resume = false;
    run_pair(b, (const int[2]){13, 13}, "steps 7\n    checkpoint steps=7", 0, port, &err);
    free(err);
    ASSERT_OK(b[1].st);
    snprintf(path, sizeof path, "%s/run0/replica-1/residual-000000007.safetensors", tmpdir);
    ASSERT_EQ(unlink(path), 0);
    pair_resume = true;
    run_pair(c, (const int[2]){13, 13}, "steps 20\n    checkpoint steps=7", 0, port, &err);
    ASSERT_OK(c[1].st);
    ASSERT(err);
    ASSERT_CONTAINS(err, "warning: ring strategy: rank 1: ");
    ASSERT_CONTAINS(err, "residual-000000007.safetensors: no residual for rank 1 at step 7: starting compress=");
    free(err);
    ASSERT(memcmp(c[0].params, a[0].params, a[0].np * sizeof(float)) != 0);
    for (int i = 0; i < 2; i++) free(b[i].log), free(c[i].log);

    /* a damaged residual fails the resume on that replica, naming the file */
    ASSERT_EQ(system(cmd), 0);
    pair_resume = false;
    run_pair(b, (const int[2]){13, 13}, "steps 7\n    checkpoint steps=7", 0, port, &err);
    free(err);
    ASSERT_OK(b[1].st);
    int fd = open(path, O_WRONLY);
    ASSERT(fd >= 0);
    struct stat sb;
    fstat(fd, &sb);
    ASSERT_EQ(pwrite(fd, "\x55", 1, sb.st_size - 3), 1);
    close(fd);
    pair_resume = true;
    run_pair(c, (const int[2]){13, 13}, "steps 20\n    checkpoint steps=7", 0, port, &err);
    free(err);
    ASSERT_EQ(c[1].st, SL_ECORRUPT);
    ASSERT_CONTAINS(c[1].err, "ring strategy: rank 1: --resume: ");
    ASSERT_CONTAINS(c[1].err, "residual-000000007.safetensors");
    ASSERT(c[0].st != SL_OK);
    for (int i = 0; i < 2; i++) free(b[i].log), free(c[i].log);
    pair_resume = false;
    pair_shared_run = false;
    pair_sched = "";
    pair_cs = (sl_compress_spec){0};
}

/* The residual sidecar on its own: an exact round trip of float64 values, and each way it
 * can be wrong; a new run's folder refuses (or, with overwrite, removes) residual files. */
TEST(test_residual_files) {
    char dir[400], path[600];
    snprintf(dir, sizeof dir, "%s/resid", tmpdir);
    enum { N = 1000 };
    double r[N], back[N];
    for (int i = 0; i < N; i++) r[i] = (i - 500) * 1.0000001e-3 / 3;
    ASSERT_OK(sl_train_save_residual(dir, 1, 42, "int8", r, N, 0));
    sl_train_residual_path(dir, 1, 42, path, sizeof path);
    ASSERT_CONTAINS(path, "/resid/replica-1/residual-000000042.safetensors");
    ASSERT_OK(sl_train_load_residual(dir, 1, 42, "int8", back, N));
    ASSERT_MEMEQ(back, r, sizeof r);
    ASSERT_EQ(sl_train_load_residual(dir, 1, 43, "int8", back, N), SL_ENOTFOUND);
    ASSERT_CONTAINS(sl_errmsg(), "residual-000000043.safetensors: no residual for rank 1 at step 43");
    ASSERT_EQ(sl_train_load_residual(dir, 1, 42, "topk:0.01", back, N), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "the residual of compress=int8; this run uses compress=topk:0.01");
    ASSERT_EQ(sl_train_load_residual(dir, 1, 42, "int8", back, N - 1), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "the model's gradient has 999 float64 values");
    /* a residual of another rank copied in: refused by its metadata */
    char other[600];
    ASSERT_OK(sl_train_save_residual(dir, 0, 42, "int8", r, N, 0));
    sl_train_residual_path(dir, 0, 42, other, sizeof other);
    ASSERT_EQ(rename(other, path), 0);
    ASSERT_EQ(sl_train_load_residual(dir, 1, 42, "int8", back, N), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "not the residual of rank 1 at step 42");
    /* a flipped bit in the values: the checksum */
    ASSERT_OK(sl_train_save_residual(dir, 1, 42, "int8", r, N, 0));
    int fd = open(path, O_RDWR);
    ASSERT(fd >= 0);
    unsigned char c;
    struct stat sb;
    fstat(fd, &sb);
    ASSERT_EQ(pread(fd, &c, 1, sb.st_size - 100), 1);
    c ^= 4;
    ASSERT_EQ(pwrite(fd, &c, 1, sb.st_size - 100), 1);
    close(fd);
    memset(back, 0, sizeof back);
    ASSERT_EQ(sl_train_load_residual(dir, 1, 42, "int8", back, N), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "residual-000000042.safetensors");
    /* keep=2 removes the older ones of that replica */
    for (int st = 1; st <= 4; st++) ASSERT_OK(sl_train_save_residual(dir, 3, st, "sign", r, 10, 2));
    sl_train_residual_path(dir, 3, 2, path, sizeof path);
    ASSERT(!file_exists(path));
    sl_train_residual_path(dir, 3, 3, path, sizeof path);
    ASSERT(file_exists(path));
    /* a new run in that folder */
    ASSERT_EQ(sl_train_prepare_run_dir(dir, false, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "holds another run's files: 3 replica residual files"); /* ranks 1 (42), 3 (3, 4) */
    ASSERT_OK(sl_train_prepare_run_dir(dir, true, NULL));
    ASSERT(!file_exists(path));
    ASSERT_OK(sl_train_prepare_run_dir(dir, false, NULL));
}

/* The wire bytes per step, sent by rank 0 in each epoch, in the epoch line and as the
 * wire_bytes_per_step scalar of the train/ run: int8's payloads (24-byte header, one scale, 58 int8s,
 * the has-data int32: 90 bytes) against the float32 ring allreduce of 59 floats. */
static double wire_scalar(const char *run, int *count, double *first) {
    char path[700], train[500];
    snprintf(train, sizeof train, "%s/train", run); /* the train/ run's event files */
    DIR *d = opendir(train);
    struct dirent *de;
    double v = -1;
    *count = 0;
    while (d && (de = readdir(d)))
        if (strncmp(de->d_name, "events.out.tfevents.", 20) == 0) {
            snprintf(path, sizeof path, "%s/%s", train, de->d_name);
            sl_tfev_reader *r;
            if (sl_tfev_reader_open(path, &r)) break;
            sl_tfev_event ev;
            while (sl_tfev_reader_next(r, &ev) == SL_OK)
                if (ev.kind == SL_TFEV_SCALAR && strcmp(ev.text, "wire_bytes_per_step") == 0) {
                    if (first && !*count) *first = ev.value;
                    v = ev.value;
                    (*count)++;
                }
            sl_tfev_reader_close(r);
        }
    if (d) closedir(d);
    return v;
}

TEST(test_wire_bytes_reported) {
    trep r[2];
    char *err, run[400];
    double v[2];
    snprintf(run, sizeof run, "%s/run0", tmpdir);
    pair_console = true;
    for (int k = 0; k < 2; k++) {
        pair_cs = k ? (sl_compress_spec){SL_COMPRESS_INT8, 0} : (sl_compress_spec){0};
        run_pair(r, (const int[2]){10, 10}, "epochs 2", 0, test_port(0), &err);
        free(err);
        ASSERT_OK(r[0].st);
        ASSERT_OK(r[1].st);
        int n;
        v[k] = wire_scalar(run, &n, NULL);
        ASSERT_EQ(n, 2); /* one per epoch */
        ASSERT(r[0].con);
        ASSERT_CONTAINS(r[0].con, "epoch 2/2  step 20");
        char want[64];
        snprintf(want, sizeof want, "  wire %.1f KiB/step", v[k] / 1024);
        ASSERT_CONTAINS(r[0].con, want);
        for (int i = 0; i < 2; i++) free(r[i].log), free(r[i].con);
    }
    pair_cs = (sl_compress_spec){0};
    pair_console = false;
    printf("  wire bytes per step: float32 %.1f, int8 %.1f\n", v[0], v[1]);
    ASSERT(v[1] >= 90 && v[1] < 90 + 16); /* 90 per step, plus the epoch's small agreements */
    ASSERT(v[0] >= 236 && v[0] < 236 + 16); /* 30 + 29 floats: reduce-scatter and allgather */
}

/* During top-k's warm-up the payloads shrink step by step and each epoch's figure is what
 * was sent: topk(0.002, warmup=10) keeps 58 (all), 58, 58, 16 values of the 58 in stages of
 * steps 0-2, 3-4, 5-7, 8-9 (24 + 6 k + 4 bytes each: 8 x 376 + 2 x 124 = 3256 bytes in
 * epoch 1), then 9 (82 bytes a step in epoch 2). */
TEST(test_wire_bytes_topk_warmup) {
    trep r[2];
    char *err, run[400], want[64];
    snprintf(run, sizeof run, "%s/run0", tmpdir);
    pair_console = true;
    pair_cs = (sl_compress_spec){SL_COMPRESS_TOPK, 0.002, 10};
    run_pair(r, (const int[2]){10, 10}, "epochs 2", 0, test_port(0), &err);
    free(err);
    ASSERT_OK(r[0].st);
    ASSERT_OK(r[1].st);
    int n;
    double e1 = -1, e2 = wire_scalar(run, &n, &e1);
    ASSERT_EQ(n, 2);
    printf("  wire bytes per step, topk(0.002, warmup=10): epoch 1 %.1f, epoch 2 %.1f\n", e1, e2);
    ASSERT(e1 >= 325.6 && e1 < 325.6 + 16);
    ASSERT(e2 >= 82 && e2 < 82 + 16);
    ASSERT(r[0].con);
    snprintf(want, sizeof want, "step 10  loss");
    ASSERT_CONTAINS(r[0].con, want);
    snprintf(want, sizeof want, "  wire %.1f KiB/step", e1 / 1024);
    ASSERT_CONTAINS(r[0].con, want);
    snprintf(want, sizeof want, "  wire %.1f KiB/step", e2 / 1024);
    ASSERT_CONTAINS(r[0].con, want);
    ASSERT_STREQ(r[0].log, r[1].log); /* identical replicas through the warm-up */
    for (int i = 0; i < 2; i++) free(r[i].log), free(r[i].con);
    pair_cs = (sl_compress_spec){0};
    pair_console = false;
}

/* The bucketed exchange (opts.bucket_bytes): 25 steps over an epoch boundary (lockstep:
 * the has-data flag rides the tail), a model with 4 layers of parameters and batchnorm
 * running statistics (the tail also holds their zero gradient), with and without fp16 on
 * the wire. Each bucket is allreduced during backward on the strategy's exchange thread,
 * and the parameters after the run are bit for bit those of the unbucketed exchange --
 * with fp16 on 2 replicas a bucket reduced as a tensor of its own would round elsewhere
 * (test_ring: test_allreduce_range_identical). Buckets of 4 bytes: one per layer (4); of
 * 240 bytes (60 floats): dense_3 + dense_2 (14 + 54 floats), then batchnorm + dense_1 (16 +
 * 40); of 1 MiB: the whole gradient fits one, so the exchange stays unbucketed (0 in use). */
static const char DEEP[] = "    input 4\n    dense 8 activation=relu\n    batchnorm\n    dense 6 activation=relu\n"
                           "    dense 2\n";

TEST(test_bucketed_identical) {
    pair_model = DEEP;
    const size_t sizes[] = {0, 4, 240, 1 << 20};
    const int want_buckets[] = {0, 4, 2, 0};
    for (int fp16 = 0; fp16 <= 1; fp16++) {
        trep base[2];
        char *err;
        for (int k = 0; k < 4; k++) {
            trep r[2];
            pair_bucket = sizes[k];
            run_pair(r, (const int[2]){13, 13}, "steps 25", fp16, test_port(0), &err);
            free(err);
            for (int i = 0; i < 2; i++)
                if (r[i].st) FAILF("fp16 %d bucket %zu: rank %d: %s", fp16, sizes[k], i, r[i].err);
            ASSERT_OK(r[0].st);
            ASSERT_OK(r[1].st);
            ASSERT_EQ(r[0].np, 140); /* 40 + 16 + 54 + 14 trainable, 16 running statistics */
            for (int i = 0; i < 2; i++) {
                ASSERT_EQ(r[i].sum.steps, 25);
                ASSERT_EQ(r[i].buckets, want_buckets[k]);
                ASSERT_U64(r[i].reduced, 25u * (uint64_t)want_buckets[k]);
            }
            /* (the hash logs of the two ranks differ with batchnorm: each hashes its own running
             * statistics before the exchange averages them) */
            ASSERT_MEMEQ(r[0].params, r[1].params, r[0].np * sizeof(float));
            if (k == 0) {
                memcpy(base, r, sizeof r);
            } else {
                /* memcmp: the bucketed run's parameters and every step's hash are the unbucketed run's */
                ASSERT_MEMEQ(r[0].params, base[0].params, r[0].np * sizeof(float));
                ASSERT_STREQ(r[0].log, base[0].log);
                ASSERT_STREQ(r[1].log, base[1].log);
                free(r[0].log);
                free(r[1].log);
            }
        }
        free(base[0].log);
        free(base[1].log);
    }
    pair_bucket = 0;
    pair_model = TINY;
}

/* The epoch line reports the exchange time per step that stayed visible after backward. */
TEST(test_exchange_time_reported) {
    trep r[2];
    char *err;
    pair_console = true;
    pair_bucket = 4;
    pair_model = TINY;
    run_pair(r, (const int[2]){10, 10}, "epochs 1", 0, test_port(0), &err);
    pair_console = false;
    pair_bucket = 0;
    free(err);
    ASSERT_OK(r[0].st);
    ASSERT_OK(r[1].st);
    ASSERT_EQ(r[0].buckets, 2);
    ASSERT(r[0].con);
    ASSERT_CONTAINS(r[0].con, " ms/step  (");
    const char *x = strstr(r[0].con, "  exchange ");
    ASSERT(x != NULL);
    double ms = -1;
    ASSERT_EQ(sscanf(x, "  exchange %lf ms/step", &ms), 1);
    ASSERT(ms >= 0 && ms < 10000);
    for (int i = 0; i < 2; i++) {
        free(r[i].log);
        free(r[i].con);
    }
}

TEST(test_compressed_resume_int8) { compressed_resume(&(sl_compress_spec){SL_COMPRESS_INT8, 0}, test_port(0)); }
TEST(test_compressed_resume_topk) { compressed_resume(&(sl_compress_spec){SL_COMPRESS_TOPK, 0.01}, test_port(0)); }
/* top-k with DGC's warm-up over 8 steps, stages of 2 (k per bucket 1024, 256, 64, 16: the
 * model's 58 values, 58, 58, then 16; 9 from step 8): the checkpoint after steps 0-6 and
 * the resume at step 7 land inside the warm-up, with a residual (stage 3 left values
 * unsent), and the schedule goes on from the step, bit for bit */
TEST(test_compressed_resume_topk_warmup) {
    compressed_resume(&(sl_compress_spec){SL_COMPRESS_TOPK, 0.002, 8}, test_port(0));
}
TEST(test_compressed_resume_sign) { compressed_resume(&(sl_compress_spec){SL_COMPRESS_SIGN, 0}, test_port(0)); }

int main(void) {
    RUN(test_single_replica);
    RUN(test_ps_task_refused);
    RUN(test_two_replicas);
    if (sl_test_points_tmpdir("strategy-ring", tmpdir, sizeof tmpdir)) return 1;
    RUN(test_unequal_shards_epochs);
    RUN(test_unequal_shards_steps);
    RUN(test_empty_shard);
    RUN(test_residual_files);
    RUN(test_wire_bytes_reported);
    RUN(test_wire_bytes_topk_warmup);
    RUN(test_compressed_resume_int8);
    RUN(test_compressed_resume_topk);
    RUN(test_compressed_resume_topk_warmup);
    RUN(test_compressed_resume_sign);
    RUN(test_bucketed_identical);
    RUN(test_exchange_time_reported);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    TEST_MAIN_END();
}
