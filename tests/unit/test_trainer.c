/* train/trainer.c (with trainer_step.c and trainer_report.c), train/train_config.c,
 * train/checkpoint.c, train/strategy_agree.c: the train block, checkpoints (round trip,
 * corruption, another model), resume bit-identical to an uninterrupted run, the exchange
 * hook and its step records (lockstep epochs with a simulated peer), and mixed precision
 * (bf16, fp16's loss scaling). Data: a small synthetic TFRecord file (two classes of
 * 4-float points) written to a temporary folder, so the test needs nothing else. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/config.h"
#include "sluice/example.h"
#include "sluice/job.h"
#include "sluice/safetensors.h"
#include "sluice/tfevents.h"
#include "sluice/tensor.h"
#include "sluice/tfrecord.h"
#include "sluice/train.h"
#include "helper_points.h"
#include "train/internal.h"
#include "sluice/ring.h"
#include "test.h"

static char tmpdir[256];

static void rm_rf(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}


static const char BASE[] =
    SL_TEST_POINTS_PIPELINES
    "model tiny {\n"
    "    input 4\n"
    "    dense 8 activation=relu\n"
    "    dense 2\n"
    "}\n";

/* text written to TMP/file and parsed from there (so relative paths find the data). */
static sl_status parse_text(const char *text, const char *file, sl_cfg **cfg) {
    char name[400];
    snprintf(name, sizeof name, "%s/%s", tmpdir, file);
    FILE *f = fopen(name, "w");
    if (!f) return SL_EIO;
    fputs(text, f);
    fclose(f);
    return sl_cfg_parse_file(name, cfg);
}

/* BASE + a train block with `body`, parsed as TMP/t.sl. */
static sl_status parse_with(const char *train_body, sl_cfg **cfg) {
    char text[4096];
    snprintf(text, sizeof text, "%strain {\n%s}\n", BASE, train_body);
    return parse_text(text, "t.sl", cfg);
}

/* A train block the config refuses: its code, and what the message says (the place, what is
 * wrong and, unless NULL, the hint). */
typedef struct {
    const char *body;
    int code;
    const char *where, *msg, *hint;
} config_case;

/* Each case's body after BASE is refused as it says (a failure prints the message). */
static void check_config_cases(const config_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        sl_cfg *cfg;
        ASSERT_OK(parse_with(cases[i].body, &cfg));
        sl_train_config c;
        sl_status s = sl_train_config_parse(cfg, &c);
        const char *m = sl_errmsg(), *hint = cases[i].hint ? cases[i].hint : "";
        if (s != cases[i].code || !strstr(m, cases[i].where) || !strstr(m, cases[i].msg) || !strstr(m, hint))
            printf("  case %zu: %s\n", i, m);
        ASSERT_EQ(s, cases[i].code);
        ASSERT_CONTAINS(m, cases[i].where);
        ASSERT_CONTAINS(m, cases[i].msg);
        ASSERT_CONTAINS(m, hint);
        sl_cfg_free(cfg);
    }
}

/* After make_trainer: skip the test (freeing cfg) when the build has no CPU backend. */
#define SKIP_WITHOUT_CPU(s, cfg)                                   \
    do {                                                           \
        if ((s) == SL_EUNSUPPORTED) {                              \
            sl_cfg_free(cfg);                                      \
            SKIP("no CPU backend in this build: %s", sl_errmsg()); \
        }                                                          \
    } while (0)

TEST(test_config_defaults_and_values) {
    sl_cfg *cfg;
    ASSERT_OK(parse_with("    model tiny\n    data train\n", &cfg));
    sl_train_config c;
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT_STREQ(c.model, "tiny");
    ASSERT_STREQ(c.data, "train");
    ASSERT_STREQ(c.eval, "");
    ASSERT_EQ(c.epochs, 1);
    ASSERT_EQ(c.steps, 0);
    ASSERT_EQ(c.batch, 16);
    ASSERT_EQ(c.optim.kind, SL_OPTIM_SGD);
    ASSERT(c.optim.momentum == 0.9f);
    ASSERT(c.schedule.lr == 0.01f);
    ASSERT_EQ(c.ckpt_every.epochs, 0);
    ASSERT_EQ(c.ckpt_every.steps, 0);
    ASSERT_STREQ(c.run_dir, "runs/tiny");
    ASSERT_STREQ(c.strategy, "none");
    ASSERT_STREQ(c.image_key, "image");
    sl_cfg_free(cfg);

    ASSERT_OK(parse_with("    model tiny\n    data train label=y\n    eval test steps=7\n    steps 40\n"
                         "    schedule step every=10 gamma=0.5 warmup=3\n"
                         "    optimizer adamw lr=0.003 weight_decay=0.01\n"
                         "    checkpoint steps=5 keep=2\n    run_dir \"r/x\"\n    backend cpu\n    seed 9\n"
                         "    threads 2\n",
                         &cfg));
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT_STREQ(c.label_key, "y");
    ASSERT_STREQ(c.eval, "test");
    ASSERT_EQ(c.eval_every.steps, 7);
    ASSERT_EQ(c.eval_every.epochs, 0);
    ASSERT_EQ(c.eval_batch, 32);
    ASSERT_EQ(c.steps, 40);
    ASSERT_EQ(c.epochs, 0);
    ASSERT_EQ(c.schedule.kind, SL_SCHED_STEP);
    ASSERT_EQ(c.schedule.step_size, 10);
    ASSERT_EQ(c.schedule.warmup, 3);
    ASSERT(c.schedule.gamma == 0.5f);
    ASSERT(c.schedule.lr == 0.003f); /* the schedule reads the optimizer's lr whatever the order */
    ASSERT_EQ(c.optim.kind, SL_OPTIM_ADAMW);
    ASSERT(c.optim.weight_decay == 0.01f);
    ASSERT_EQ(c.ckpt_every.steps, 5);
    ASSERT_EQ(c.ckpt_keep, 2);
    ASSERT_STREQ(c.run_dir, "r/x");
    ASSERT_EQ(c.backend, SL_BACKEND_CPU);
    ASSERT_EQ(c.seed, 9);
    ASSERT_EQ(c.threads, 2);
    /* --set: the last of epochs/steps wins, so an override switches the run's length */
    ASSERT_OK(sl_cfg_set(cfg, "train.epochs=3"));
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT_EQ(c.epochs, 3);
    ASSERT_EQ(c.steps, 0);
    sl_cfg_free(cfg);
}

/* Each mistake: the code, the place, the message and the hint. */
TEST(test_config_errors) {
    static const config_case cases[] = {
        {"    model tiny\n    data train\n    epocs 3\n", SL_EINVAL, "t.sl:20:5:", "unknown train statement 'epocs'",
         "did you mean 'epochs'?"},
        {"    model big\n    data train\n", SL_ENOTFOUND, "t.sl:18:11:", "no `model big { }` block",
         "the model blocks here are: tiny"},
        {"    model tiny\n    data trian\n", SL_ENOTFOUND, "t.sl:19:10:", "no `pipeline trian { }` block",
         "train, test"},
        {"    model tiny\n    data train\n    optimizer adam lr=0.1 momentum=0.9\n", SL_EINVAL, "t.sl:20:36:",
         "momentum and nesterov are options of sgd", "usage: optimizer"},
        {"    model tiny\n    data train\n    optimizer sgd\n", SL_EINVAL, "t.sl:20:5:", "optimizer needs lr=",
         "usage: optimizer"},
        {"    model tiny\n    data train\n    checkpoint every=1 steps=5\n", SL_EINVAL, "t.sl:20:30:",
         "give every=EPOCHS or steps=N, not both", "usage: checkpoint"},
        {"    model tiny\n    data train\n    backend gpu\n", SL_EINVAL, "t.sl:20:13:", "unknown value 'gpu'",
         "did you mean 'cpu'?"},
        {"    model tiny\n    data train\n    epochs 0\n", SL_ERANGE, "t.sl:20:12:", "", "usage: epochs N"},
        {"    data train\n", SL_EINVAL, "t.sl:17:1:", "the train block needs `model NAME`", "tiny"},
        {"    model tiny\n    data train\n    schedule step\n", SL_EINVAL, "t.sl:20:5:",
         "schedule step needs every=N", "usage: schedule"},
        {"    model tiny\n    data train\n    eval test evry=2\n", SL_EINVAL, "t.sl:20:20:", "unknown option 'evry'",
         "did you mean 'every'?"},
    };
    check_config_cases(cases, sizeof cases / sizeof cases[0]);
    /* no train block at all */
    sl_cfg *cfg;
    ASSERT_OK(sl_cfg_parse(BASE, strlen(BASE), "x.sl", &cfg));
    sl_train_config c;
    ASSERT_EQ(sl_train_config_parse(cfg, &c), SL_ENOTFOUND);
    ASSERT_CONTAINS(sl_errmsg(), "x.sl: no `train { }` block");
    sl_cfg_free(cfg);
}

TEST(test_list_checkpoints) {
    char dir[400], p[500];
    snprintf(dir, sizeof dir, "%s/list", tmpdir);
    mkdir(dir, 0777);
    const char *names[] = {"ckpt-000000010.safetensors", "ckpt-000000002.safetensors",
                           "ckpt-000000010.safetensors.tmp.77.1", "ckpt-x.safetensors", "events.out.tfevents.1",
                           "ckpt-000000100.safetensors"};
    for (int i = 0; i < 6; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        FILE *f = fopen(p, "w");
        ASSERT(f);
        fclose(f);
    }
    char **list;
    int n = sl_train_list_checkpoints(dir, &list);
    ASSERT_EQ(n, 3);
    snprintf(p, sizeof p, "%s/ckpt-000000100.safetensors", dir);
    ASSERT_STREQ(list[0], p);
    snprintf(p, sizeof p, "%s/ckpt-000000010.safetensors", dir);
    ASSERT_STREQ(list[1], p);
    snprintf(p, sizeof p, "%s/ckpt-000000002.safetensors", dir);
    ASSERT_STREQ(list[2], p);
    sl_train_free_list(list, n);
    snprintf(p, sizeof p, "%s/none", tmpdir);
    ASSERT_EQ(sl_train_list_checkpoints(p, &list), 0);
    ASSERT(list == NULL);
}

static sl_status make_trainer(const char *body, const char *run, bool resume, const sl_train_hooks *hooks,
                              sl_cfg **cfg, sl_trainer **t) {
    sl_status s = parse_with(body, cfg);
    if (s) return s;
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, run);
    sl_train_opts o = sl_train_opts_default();
    o.run_dir = dir;
    o.resume = resume;
    o.hooks = hooks;
    return sl_trainer_create(*cfg, &o, t);
}

static float *params_of(sl_trainer *t, size_t *n) {
    sl_model_params(sl_trainer_model(t), n);
    float *p = malloc(*n * sizeof *p);
    if (p && sl_model_get_params(sl_trainer_model(t), p, *n)) {
        free(p);
        return NULL;
    }
    return p;
}

#define STEPS_BODY(n)                                                                      \
    "    model tiny\n    data train\n    eval test\n    steps " #n "\n"                      \
    "    optimizer adam lr=0.05\n    schedule cosine warmup=4 total=40\n"                  \
    "    checkpoint steps=5 keep=2\n    backend cpu\n    threads 1\n    seed 3\n"

/* Training 40 steps at once, and 23 steps then --resume to 40, give bit-identical
 * parameters: the checkpoint holds the optimizer state and the data position. */
TEST(test_resume_bit_identical) {
    sl_cfg *cfg = NULL;
    sl_trainer *t = NULL;
    sl_status s = make_trainer(STEPS_BODY(40), "full", false, NULL, &cfg, &t);
    SKIP_WITHOUT_CPU(s, cfg);
    ASSERT_OK(s);
    ASSERT_OK(sl_trainer_run(t));
    const sl_train_summary *sum = sl_trainer_summary(t);
    ASSERT_EQ(sum->start_step, 0);
    ASSERT_EQ(sum->steps, 40);
    ASSERT_EQ(sum->steps_per_epoch, 16);
    if (!(sum->eval_accuracy > 0.85)) printf("  eval accuracy %f loss %f\n", sum->eval_accuracy, sum->eval_loss);
    ASSERT(sum->eval_accuracy > 0.85); /* a linearly separable problem */
    size_t n1;
    float *p1 = params_of(t, &n1);
    ASSERT(p1);
    ASSERT_EQ(n1, 4 * 8 + 8 + 8 * 2 + 2);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    char run[400];
    snprintf(run, sizeof run, "%s/full", tmpdir);
    char **list;
    int n = sl_train_list_checkpoints(run, &list);
    ASSERT_EQ(n, 2); /* keep=2: steps 40 and 35 */
    ASSERT_CONTAINS(list[0], "ckpt-000000040.safetensors");
    ASSERT_CONTAINS(list[1], "ckpt-000000035.safetensors");
    sl_train_free_list(list, n);

    /* the interrupted run: 23 steps (checkpoints at 5..20 and the final one at 23) */
    ASSERT_OK(make_trainer(STEPS_BODY(23), "part", false, NULL, &cfg, &t));
    ASSERT_OK(sl_trainer_run(t));
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    /* corrupt the newest: resume skips it and takes step 20 */
    snprintf(run, sizeof run, "%s/part/ckpt-000000023.safetensors", tmpdir);
    FILE *f = fopen(run, "r+b");
    ASSERT(f);
    ASSERT_EQ(fwrite("\xff\xff\xff\xff", 1, 4, f), 4);
    fclose(f);
    ASSERT_OK(make_trainer(STEPS_BODY(40), "part", true, NULL, &cfg, &t));
    ASSERT_OK(sl_trainer_run(t));
    sum = sl_trainer_summary(t);
    ASSERT_EQ(sum->start_step, 20);
    ASSERT_CONTAINS(sum->resumed_from, "ckpt-000000020.safetensors");
    ASSERT_EQ(sum->steps, 40);
    size_t n2;
    float *p2 = params_of(t, &n2);
    ASSERT(p2);
    ASSERT_EQ(n2, n1);
    ASSERT_MEMEQ(p1, p2, n1 * sizeof(float));
    free(p1);
    free(p2);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
}

TEST(test_checkpoint_load_errors) {
    sl_cfg *cfg = NULL;
    sl_trainer *t = NULL;
    sl_status s = make_trainer(STEPS_BODY(5), "ck", false, NULL, &cfg, &t);
    SKIP_WITHOUT_CPU(s, cfg);
    ASSERT_OK(s);
    ASSERT_OK(sl_trainer_run(t));
    sl_model *m = sl_trainer_model(t);
    size_t n;
    float *before = params_of(t, &n);
    ASSERT(before);
    char path[500];
    snprintf(path, sizeof path, "%s/ck/ckpt-000000005.safetensors", tmpdir);
    sl_ckpt_position pos;
    ASSERT_OK(sl_train_load_checkpoint(path, m, NULL, &(sl_ckpt_expect){.model_hash = sl_trainer_config(t)->model_hash}, &pos));
    ASSERT_EQ(pos.step, 5);
    ASSERT_EQ(pos.epoch, 0);
    ASSERT_EQ(pos.batch, 5);
    ASSERT_EQ(pos.optimizer_step, 5);
    /* the metadata and tensor names a Python reader sees */
    sl_st_file *sf;
    ASSERT_OK(sl_st_open(path, &sf));
    ASSERT_STREQ(sl_st_meta(sf, "format"), "sluice-checkpoint");
    ASSERT_STREQ(sl_st_meta(sf, "step"), "5");
    ASSERT_STREQ(sl_st_meta(sf, "model"), "tiny");
    sl_tensor k = SL_TENSOR_EMPTY;
    ASSERT_OK(sl_st_get(sf, "model/dense_1/kernel", &k));
    ASSERT_EQ(k.rank, 2);
    ASSERT_EQ(k.dims[0], 4);
    ASSERT_EQ(k.dims[1], 8);
    sl_tensor_release(&k);
    sl_st_close(sf);
    /* another model's hash: SL_EINVAL, the model untouched */
    ASSERT_EQ(sl_train_load_checkpoint(path, m, NULL, &(sl_ckpt_expect){.model_hash = 42}, &pos), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "checkpoint of another model");
    /* truncated: SL_ECORRUPT naming the file */
    char torn[520];
    snprintf(torn, sizeof torn, "%s/ck/ckpt-000000001.safetensors", tmpdir);
    FILE *in = fopen(path, "rb"), *out = fopen(torn, "wb");
    ASSERT(in && out);
    char buf[200];
    size_t got = fread(buf, 1, sizeof buf, in);
    fwrite(buf, 1, got, out);
    fclose(in);
    fclose(out);
    ASSERT_EQ(sl_train_load_checkpoint(torn, m, NULL, NULL, &pos), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "ckpt-000000001.safetensors");
    size_t n2;
    float *after = params_of(t, &n2);
    ASSERT(after);
    ASSERT_MEMEQ(before, after, n * sizeof(float));
    free(before);
    free(after);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
}

typedef struct {
    int starts, exchanges, finishes;
    int64_t start_step, last_step;
    size_t n;
} hook_log;

static sl_status h_start(void *ctx, sl_model *m, sl_optim *o, int64_t *step) {
    hook_log *h = ctx;
    h->starts++;
    h->start_step = *step;
    return SL_OK;
}

/* A parameter server that never changes anything: the loop must skip its optimizer step.
 * Its replicas train independently: every phase but the steps' leaves the reply as it came. */
static sl_status h_exchange(void *ctx, const sl_step *rec, sl_step_reply *out) {
    hook_log *h = ctx;
    if (rec->phase != SL_STEP_TRAIN) return SL_OK;
    h->exchanges++;
    h->last_step = rec->step;
    h->n = rec->n;
    out->applied = true;
    return SL_OK;
}

static sl_status h_finish(void *ctx, sl_status result) {
    ((hook_log *)ctx)->finishes++;
    return SL_OK;
}

/* Rank 1 of 2 (not the chief), every hook logging into log. */
static sl_train_hooks rank1_hooks(hook_log *log) {
    return (sl_train_hooks){.ctx = log, .world_size = 2, .rank = 1, .is_chief = false, .start = h_start,
                            .exchange = h_exchange, .finish = h_finish};
}

TEST(test_exchange_hook) {
    hook_log log = {0};
    sl_train_hooks hooks = rank1_hooks(&log);
    sl_cfg *cfg = NULL;
    sl_trainer *t = NULL;
    /* strategy none with 2 replicas is a mistake */
    ASSERT_EQ(make_trainer(STEPS_BODY(6), "hook", false, &hooks, &cfg, &t), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "2 replicas need a gradient exchange");
    sl_cfg_free(cfg);
    sl_status s = make_trainer(STEPS_BODY(6) "    strategy ps\n", "hook", false, &hooks, &cfg, &t);
    SKIP_WITHOUT_CPU(s, cfg);
    ASSERT_OK(s);
    /* the global batch 16 became 8 per replica */
    size_t n;
    float *before = params_of(t, &n);
    ASSERT(before);
    ASSERT_OK(sl_trainer_run(t));
    ASSERT_EQ(log.starts, 1);
    ASSERT_EQ(log.start_step, 0);
    ASSERT_EQ(log.exchanges, 6);
    ASSERT_EQ(log.last_step, 5);
    ASSERT_EQ(log.finishes, 1);
    ASSERT_EQ(log.n, n);
    ASSERT_EQ(sl_trainer_summary(t)->eval_accuracy, -1); /* not the chief: no evaluation */
    float *after = params_of(t, &n);
    ASSERT(after);
    ASSERT_MEMEQ(before, after, n * sizeof(float));
    free(before);
    free(after);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    /* not the chief: no run folder, no checkpoints */
    char dir[400];
    snprintf(dir, sizeof dir, "%s/hook", tmpdir);
    struct stat st;
    ASSERT_EQ(stat(dir, &st), -1);
}

/* The rows of the first batch of the trainer's training pipeline, or -1 (message printed). */
static int64_t first_batch_rows(sl_trainer *t) {
    sl_iter_opts io = sl_iter_opts_default();
    sl_iter *it;
    if (sl_iter_create(t->train_ds, &io, &it)) {
        printf("  iter_create: %s\n", sl_errmsg());
        return -1;
    }
    sl_element e;
    sl_element_init(&e);
    int64_t rows = -1;
    if (sl_iter_next(it, &e) == SL_OK) {
        int c = sl_element_find(&e, "image");
        if (c >= 0) rows = e.t[c].dims[0];
    } else {
        printf("  first batch: %s\n", sl_errmsg());
    }
    sl_element_clear(&e);
    sl_iter_close(it);
    return rows;
}

/* Two replicas: the pipeline's batch 16 is global, so each replica's batches have 8 rows;
 * the caller's config still says 16 afterwards, and a second trainer from the same config
 * gets 8 as well (the division is in the pipeline env, not written into cfg). */
TEST(test_replicas_leave_the_config_alone) {
    hook_log log = {0};
    sl_train_hooks hooks = rank1_hooks(&log);
    sl_cfg *cfg = NULL;
    sl_trainer *t1 = NULL, *t2 = NULL;
    sl_status s = make_trainer(STEPS_BODY(6) "    strategy ps\n", "twice", false, &hooks, &cfg, &t1);
    SKIP_WITHOUT_CPU(s, cfg);
    ASSERT_OK(s);
    sl_train_config c;
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT_EQ(c.batch, 16);
    ASSERT_EQ(sl_trainer_config(t1)->batch, 16);
    sl_train_opts o = sl_train_opts_default();
    o.hooks = &hooks;
    ASSERT_OK(sl_trainer_create(cfg, &o, &t2));
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT_EQ(c.batch, 16);
    ASSERT_EQ(first_batch_rows(t1), 8);
    ASSERT_EQ(first_batch_rows(t2), 8);
    sl_trainer_free(t1);
    sl_trainer_free(t2);
    /* a global batch that does not split: the trainer's own message, before any pipeline */
    hooks.world_size = 3;
    ASSERT_EQ(sl_trainer_create(cfg, &o, &t2), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "pipeline 'train': the global batch 16 is not a multiple of the 3 replicas");
    ASSERT(t2 == NULL);
    sl_cfg_free(cfg);
}

/* ---- lockstep epochs with a simulated second replica ---------------------------------- */

/* Rank 0 of 2 under the lockstep rules (train/strategy_agree.c), with a peer whose data
 * gives `peer_batches` batches per epoch (0: none). The rules' exchange adds the peer's
 * has-next flag; their allsum adds the peer's values: n == 2
 * (one value per replica: cardinality, first batch) gets peer_batches > 0 in the peer's
 * slot for the first batch and -1 (unknown) for the cardinality; n == 4 (the end counts) its
 * ran-out flag and batches. */
typedef struct {
    int peer_batches;
    int64_t epoch_steps;   /* steps since the last epoch start, as the peer sees them */
    int exchanges, allsums, finishes;
    sl_status finish_result;
    int32_t ends[4];       /* the last end counts the loop sent */
    /* stop requests (opts.stop): the peer asks (value SIGTERM) in exchange number
     * peer_stop_at (1-based, 0: never); this replica's flag is raised (SIGINT) while
     * exchange number own_stop_at runs, as a signal handler would */
    int peer_stop_at, own_stop_at;
    volatile sig_atomic_t *own_stop;
    bool peer_has, peer_stops; /* what the peer said in the last exchange */
    int stop_sums;             /* TAG_STOP sums (5) */
    int32_t stop_sent[4];      /* what the loop sent in the last one */
    sl__agree agree;           /* the rules, over p_step and p_allsum */
} peer_sim;

static sl_status p_step(void *ctx, const sl_step *rec, sl_step_reply *out, int *more) {
    peer_sim *p = ctx;
    p->exchanges++;
    p->epoch_steps++;
    out->applied = false;
    p->peer_has = p->epoch_steps < p->peer_batches;
    p->peer_stops = p->peer_stop_at > 0 && p->exchanges == p->peer_stop_at;
    *more += p->peer_has && !p->peer_stops; /* a stop request says "no next batch" */
    if (p->own_stop && p->exchanges == p->own_stop_at) *p->own_stop = SIGINT;
    return SL_OK;
}

/* The rules' gathers send each of their n values as two 32-bit words: the high halves in
 * words 0..n-1, the low halves in words n..2n-1 (train/strategy_agree.c). */
static size_t vals_n; /* n of the allsum being answered */
static int64_t val_get(const int32_t *w, size_t i) {
    return (int64_t)((uint64_t)(uint32_t)w[i] << 32 | (uint32_t)w[vals_n + i]);
}
static void val_set(int32_t *w, size_t i, int64_t x) {
    w[i] = (int32_t)(uint32_t)((uint64_t)x >> 32);
    w[vals_n + i] = (int32_t)(uint32_t)x;
}

static sl_status p_allsum(void *ctx, int32_t *w, size_t nw, uint32_t tag) {
    peer_sim *p = ctx;
    p->allsums++;
    size_t n = vals_n = nw / 2; /* values */
    if (tag == 5) { /* the stop agreement: per replica its real has-next flag, then its stop value */
        if (n != 4) return sl_err(SL_EINVAL, "stop agreement of %zu values, expected 4", n);
        for (int i = 0; i < 4; i++) p->stop_sent[i] = (int32_t)val_get(w, (size_t)i);
        p->stop_sums++;
        val_set(w, 1, p->peer_has);
        val_set(w, 3, p->peer_stops ? SIGTERM : 0);
    } else if (tag == 2) { /* the batches counted in an epoch */
        val_set(w, 1, p->peer_batches);
    } else if (n == 2 && val_get(w, 0) == 1) { /* the first batch (a cardinality would be -1 here: unknown) */
        val_set(w, 1, p->peer_batches > 0);
        p->epoch_steps = 0;
    } else if (n == 2) {
        val_set(w, 1, val_get(w, 0) < 0 ? -1 : p->peer_batches > 0);
        p->epoch_steps = 0;
    } else if (n == 4) {
        for (int i = 0; i < 4; i++) p->ends[i] = (int32_t)val_get(w, (size_t)i);
        val_set(w, 1, 1);                /* the peer ran out ... */
        val_set(w, 3, p->peer_batches); /* ... after its batches */
    }
    return SL_OK;
}

static sl_status p_exchange(void *ctx, const sl_step *rec, sl_step_reply *out) {
    peer_sim *p = ctx;
    return sl__agree_exchange(&p->agree, rec, out);
}

static sl_status p_finish(void *ctx, sl_status result) {
    peer_sim *p = ctx;
    p->finishes++;
    p->finish_result = result;
    sl__agree_free(&p->agree);
    return SL_OK;
}

/* The hooks of rank 0 (the chief) of 2 replicas in lockstep, the other simulated by p. */
static sl_train_hooks lockstep_hooks(peer_sim *p) {
    sl__agree_init(&p->agree, &(sl__agree_ops){.exchange = p_step, .sum = p_allsum}, p, 2, 0, true);
    return (sl_train_hooks){.ctx = p, .world_size = 2, .rank = 0, .is_chief = true, .finish = p_finish,
                            .exchange = p_exchange};
}

/* Capture what fn writes to stderr (the loop's warnings) into a malloc'd string. */
static char *stderr_of(sl_status (*fn)(sl_trainer *), sl_trainer *t, sl_status *st) {
    char path[400];
    snprintf(path, sizeof path, "%s/stderr", tmpdir);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    *st = fn(t);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    char *buf = calloc(1, 8192);
    if (f && buf) fread(buf, 1, 8191, f);
    if (f) fclose(f);
    return buf;
}

#define LOCKSTEP_BODY                                                                        \
    "    model tiny\n    data train\n    epochs 2\n    optimizer sgd lr=0.05\n    backend cpu\n" \
    "    threads 1\n    seed 3\n    strategy ring\n"

/* This replica has 32 batches per epoch, its peer 3: every epoch ends after 3 steps (6 in
 * all), and the warning (once: the counts do not change) names both. */
TEST(test_lockstep_peer_runs_out) {
    peer_sim p = {.peer_batches = 3};
    sl_train_hooks hooks = lockstep_hooks(&p);
    sl_cfg *cfg = NULL;
    sl_trainer *t = NULL;
    sl_status s = make_trainer(LOCKSTEP_BODY, "lockstep", false, &hooks, &cfg, &t);
    SKIP_WITHOUT_CPU(s, cfg);
    ASSERT_OK(s);
    char *err = stderr_of(sl_trainer_run, t, &s);
    ASSERT_OK(s);
    ASSERT_EQ(p.exchanges, 6);
    ASSERT_EQ(p.finishes, 1);
    ASSERT_OK(p.finish_result);
    const sl_train_summary *sum = sl_trainer_summary(t);
    ASSERT_EQ(sum->steps, 6);
    ASSERT_EQ(sum->epochs_done, 2);
    ASSERT_EQ(sum->steps_per_epoch, 3);
    /* this replica sent: not out (flag 0 in slot 0), its cardinality unknown (-1) */
    ASSERT_EQ(p.ends[0], 0);
    ASSERT_EQ(p.ends[2], -1);
    ASSERT(err);
    ASSERT_STREQ(err, "warning: epoch 1: rank 1 ran out after 3 steps; rank 0 had more: all replicas end the epoch at 3 "
                      "(the rest of rank 0's batches unused); give every replica as many batches to use all the data\n");
    free(err);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
}

/* A peer with no batch at all while this replica has some: every replica fails (the run's
 * error names the empty one) instead of running zero-step epochs. */
TEST(test_lockstep_peer_empty) {
    peer_sim p = {.peer_batches = 0};
    sl_train_hooks hooks = lockstep_hooks(&p);
    sl_cfg *cfg = NULL;
    sl_trainer *t = NULL;
    sl_status s = make_trainer(LOCKSTEP_BODY, "lockstep0", false, &hooks, &cfg, &t);
    SKIP_WITHOUT_CPU(s, cfg);
    ASSERT_OK(s);
    ASSERT_EQ(sl_trainer_run(t), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "pipeline 'train': rank 1 has no batch in epoch 1 while rank 0 has: its shard is empty\n"
                              "---> HINT: give every replica data: at least as many files as replicas with `shard "
                              "file`, or `shard data`, and a batch no larger than a replica's shard");
    ASSERT_EQ(p.exchanges, 0);
    ASSERT_EQ(p.finishes, 1);
    ASSERT_EQ(p.finish_result, SL_EINVAL);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
}

/* The rules' replies phase by phase, without a trainer: how many replicas hold a next
 * batch and the agreed epoch end, the counts warning after an uneven end (once), a stop
 * request of the peer with its rank and value, and the fewest batches counted. */
TEST(test_lockstep_replies) {
    peer_sim p = {.peer_batches = 2};
    lockstep_hooks(&p);
    float g[4] = {0};
    sl_step rec = {.phase = SL_STEP_TRAIN, .grads = g, .n = 4, .holds_next = true, .cardinality = -1, .data = "train"};
    sl_step_reply r = {0};
    ASSERT_OK(sl__agree_exchange(&p.agree, &rec, &r));
    ASSERT(r.together && !r.epoch_ends && !r.stop);
    ASSERT_EQ(r.holding, 2);
    ASSERT_EQ(p.stop_sums, 0); /* all hold one: nothing but the exchange */
    /* the peer is out after its second step: every replica ends the epoch, no stop */
    rec.step = rec.batches = 1;
    r = (sl_step_reply){0};
    ASSERT_OK(sl__agree_exchange(&p.agree, &rec, &r));
    ASSERT(r.together && r.epoch_ends && !r.stop);
    ASSERT_EQ(r.holding, 1);
    ASSERT_EQ(p.stop_sums, 1); /* fewer than all: was it a stop? */
    /* the epoch's end: the chief's warning with the counts, then not again for the same counts */
    sl_step end = {.phase = SL_STEP_EPOCH_END, .step = 2, .batches = 2, .cardinality = -1, .data = "train"};
    r = (sl_step_reply){0};
    ASSERT_OK(sl__agree_exchange(&p.agree, &end, &r));
    ASSERT_STREQ(r.warning, "epoch 1: rank 1 ran out after 2 steps; rank 0 had more: all replicas end the epoch at 2 (the "
                            "rest of rank 0's batches unused); give every replica as many batches to use all the data");
    int sums = p.allsums;
    r = (sl_step_reply){0};
    ASSERT_OK(sl__agree_exchange(&p.agree, &end, &r)); /* no uneven step since: no agreement at all */
    ASSERT_STREQ(r.warning, "");
    ASSERT_EQ(p.allsums, sums);
    /* the next epoch: both have a first batch; the peer asks to stop on the first step */
    sl_step ep = {.phase = SL_STEP_EPOCH, .step = 2, .epoch = 1, .holds_next = true, .cardinality = -1, .data = "train"};
    ASSERT_OK(sl__agree_exchange(&p.agree, &ep, &r));
    p.peer_stop_at = p.exchanges + 1;
    rec = (sl_step){.phase = SL_STEP_TRAIN, .grads = g, .n = 4, .step = 2, .epoch = 1, .holds_next = true,
                    .cardinality = -1, .data = "train"};
    r = (sl_step_reply){0};
    ASSERT_OK(sl__agree_exchange(&p.agree, &rec, &r));
    ASSERT(r.stop && !r.epoch_ends);
    ASSERT_EQ(r.stop_rank, 1);
    ASSERT_EQ(r.stop_value, SIGTERM);
    ASSERT_EQ(r.holding, 2); /* the real count: both hold a next batch */
    /* the steps per epoch: the fewest counted */
    sl_step cnt = {.phase = SL_STEP_COUNT, .batches = 7, .cardinality = -1, .data = "train"};
    r = (sl_step_reply){.steps_per_epoch = 7};
    ASSERT_OK(sl__agree_exchange(&p.agree, &cnt, &r));
    ASSERT_EQ(r.steps_per_epoch, 2);
    sl__agree_free(&p.agree);
}

/* `strategy ps mode= staleness=`: defaults, values, and the options refused elsewhere. */
TEST(test_config_strategy_ps) {
    sl_cfg *cfg;
    sl_train_config c;
    ASSERT_OK(parse_with("    model tiny\n    data train\n    strategy ps\n", &cfg));
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT_STREQ(c.strategy, "ps");
    ASSERT_EQ(c.ps_sync, 0);
    ASSERT_EQ(c.ps_staleness, -1);
    /* --set reaches the options of the statement */
    ASSERT_OK(sl_cfg_set(cfg, "train.strategy.mode=sync"));
    ASSERT_OK(sl_cfg_set(cfg, "train.strategy.staleness=0"));
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT_EQ(c.ps_sync, 1);
    ASSERT_EQ(c.ps_staleness, 0);
    sl_cfg_free(cfg);
    ASSERT_OK(parse_with("    model tiny\n    data train\n    strategy ps mode=async staleness=4\n", &cfg));
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT_EQ(c.ps_sync, 0);
    ASSERT_EQ(c.ps_staleness, 4);
    sl_cfg_free(cfg);
    ASSERT_OK(parse_with("    model tiny\n    data train\n    strategy ring\n", &cfg));
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT_STREQ(c.strategy, "ring");
    ASSERT_EQ(c.ps_sync, 0);
    ASSERT_EQ(c.ps_staleness, -1);
    ASSERT_EQ(c.ring_path, SL_RING_PATH_AUTO);
    ASSERT_OK(sl_cfg_set(cfg, "train.strategy.path=tcp"));
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT_EQ(c.ring_path, SL_RING_PATH_TCP);
    sl_cfg_free(cfg);
    ASSERT_OK(parse_with("    model tiny\n    data train\n    strategy ring path=shm\n", &cfg));
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT_EQ(c.ring_path, SL_RING_PATH_SHM);
    sl_cfg_free(cfg);
    static const config_case cases[] = {
        {"    model tiny\n    data train\n    strategy ring staleness=2\n", SL_EINVAL, "t.sl:20:29:",
         "staleness= is an option of `strategy ps`, not of `strategy ring`", "HINT: write `strategy ps staleness=...`"},
        {"    model tiny\n    data train\n    strategy none mode=sync\n", SL_EINVAL, "t.sl:20:24:",
         "mode= is an option of `strategy ps`, not of `strategy none`", "HINT: write `strategy ps mode=...`"},
        {"    model tiny\n    data train\n    strategy ps mode=fast\n", SL_EINVAL, "t.sl:20:22:",
         "unknown value 'fast' (expected one of: async, sync)", "HINT: "},
        {"    model tiny\n    data train\n    strategy ps staleness=-1\n", SL_ERANGE, "t.sl:20:27:", "",
         "usage: strategy none | ring | ps [mode=async|sync] [staleness=K]"},
        {"    model tiny\n    data train\n    strategy ps stalenes=1\n", SL_EINVAL, "t.sl:20:26:",
         "strategy: unknown option 'stalenes'", "did you mean 'staleness'?"},
        {"    model tiny\n    data train\n    strategy ps path=shm\n", SL_EINVAL, "t.sl:20:22:",
         "path= is an option of `strategy ring`, not of `strategy ps`", "HINT: write `strategy ring path=...`"},
        {"    model tiny\n    data train\n    strategy ring path=nvlink\n", SL_EINVAL, "t.sl:20:24:",
         "unknown value 'nvlink' (expected one of: auto, tcp, shm)", "HINT: "},
    };
    check_config_cases(cases, sizeof cases / sizeof cases[0]);
}

/* bucket_mb: default 25 MiB, 0 turns it off, fractions allowed; bad values and a bucket
 * size for an exchange that cannot use it are refused where they are written. */
TEST(test_config_bucket_mb) {
    sl_cfg *cfg;
    sl_train_config c;
    ASSERT_OK(parse_with("    model tiny\n    data train\n    strategy ring\n", &cfg));
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT(c.bucket_mb == 25);
    sl_cfg_free(cfg);
    ASSERT_OK(parse_with("    model tiny\n    data train\n    strategy ring\n    bucket_mb 0.5\n", &cfg));
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT(c.bucket_mb == 0.5);
    sl_cfg_free(cfg);
    /* 0 (off) goes with any strategy; the default does not make ps or compression fail */
    ASSERT_OK(parse_with("    model tiny\n    data train\n    strategy ps\n    bucket_mb 0\n", &cfg));
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT(c.bucket_mb == 0);
    sl_cfg_free(cfg);
    ASSERT_OK(parse_with("    model tiny\n    data train\n    strategy ring compress=int8\n", &cfg));
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    sl_cfg_free(cfg);
    static const config_case cases[] = {
        {"    model tiny\n    data train\n    bucket_mb -1\n", SL_ERANGE, "t.sl:20:15:",
         "bucket_mb -1 is outside 0..4096 (MiB; 0: off)", "usage: bucket_mb MB"},
        {"    model tiny\n    data train\n    bucket_mb 5000\n", SL_ERANGE, "t.sl:20:15:",
         "bucket_mb 5000 is outside 0..4096 (MiB; 0: off)", "usage: bucket_mb MB"},
        {"    model tiny\n    data train\n    bucket_mb 1e-9\n", SL_ERANGE, "t.sl:20:15:",
         "bucket_mb 1e-09 is less than one float (4 bytes)", "usage: bucket_mb MB"},
        {"    model tiny\n    data train\n    bucket_mb big\n", SL_EINVAL, "t.sl:20:15:", "", "usage: bucket_mb MB"},
        {"    model tiny\n    data train\n    bucket_mb\n", SL_EINVAL, "t.sl:20:5:", "", "usage: bucket_mb MB"},
        {"    model tiny\n    data train\n    bucket_mb 4\n    strategy ps\n", SL_EINVAL, "t.sl:20:5:",
         "bucket_mb applies to `strategy ring` without compression (this block has `strategy ps`)",
         "HINT: remove bucket_mb, or write `bucket_mb 0`"},
        {"    model tiny\n    data train\n    strategy ring compress=fp16\n    bucket_mb 4\n", SL_EINVAL, "t.sl:21:5:",
         "(this block has `strategy ring compress=...`)", "HINT: remove bucket_mb"},
        {"    model tiny\n    data train\n    bucket_md 4\n", SL_EINVAL, "t.sl:20:5:",
         "unknown train statement 'bucket_md'", "did you mean 'bucket_mb'?"},
    };
    check_config_cases(cases, sizeof cases / sizeof cases[0]);
}

/* ---- stop requests (opts.stop) and the progress line --------------------------------- */

/* A single-replica exchange hook that raises the stop flag while step `at` (0-based) runs,
 * as a SIGINT handler would. */
typedef struct {
    volatile sig_atomic_t *stop;
    int64_t at;
} stopper;

static sl_status stop_exchange(void *ctx, const sl_step *rec, sl_step_reply *out) {
    stopper *st = ctx;
    if (rec->phase == SL_STEP_TRAIN && rec->step == st->at) *st->stop = SIGINT;
    return SL_OK;
}

/* Stopped at step 12 of 40 (mid-epoch: 16 per epoch): a checkpoint of step 12, no final
 * evaluation, summary.stopped; a resume from it ends bit-identical to an uninterrupted run. */
TEST(test_stop_request) {
    volatile sig_atomic_t flag = 0;
    stopper st = {.stop = &flag, .at = 11};
    sl_train_hooks hooks = {.ctx = &st, .world_size = 1, .rank = 0, .is_chief = true, .exchange = stop_exchange};
    sl_cfg *cfg = NULL;
    sl_trainer *t = NULL;
    ASSERT_OK(parse_with(STEPS_BODY(40), &cfg));
    char dir[400];
    snprintf(dir, sizeof dir, "%s/stop", tmpdir);
    sl_train_opts o = sl_train_opts_default();
    o.run_dir = dir;
    o.hooks = &hooks;
    o.stop = &flag;
    char *text = NULL;
    size_t len = 0;
    FILE *con = open_memstream(&text, &len);
    ASSERT(con);
    o.console = con;
    o.progress = true; /* drawn into the stream: the first step's line is always drawn */
    sl_status s = sl_trainer_create(cfg, &o, &t);
    if (s == SL_EUNSUPPORTED) {
        fclose(con);
        free(text);
        sl_cfg_free(cfg);
        SKIP("no CPU backend in this build");
    }
    ASSERT_OK(s);
    ASSERT_OK(sl_trainer_run(t));
    fclose(con);
    const sl_train_summary *sum = sl_trainer_summary(t);
    ASSERT(sum->stopped);
    ASSERT_EQ(sum->steps, 12);
    ASSERT_EQ(sum->eval_accuracy, -1); /* no final evaluation */
    ASSERT_CONTAINS(text, "\r\033[Kstep 1/40 [>                       ]   2%  epoch 1  loss ");
    ASSERT_CONTAINS(text, "  eta ");
    ASSERT_CONTAINS(text, "\r\033[Kstop requested: stopping at step 12\n");
    ASSERT_EQ(sum->stop_value, SIGINT);
    ASSERT_EQ(sum->stop_rank, 0);
    ASSERT(!strstr(text, "test accuracy"));
    free(text);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    char **list;
    int n = sl_train_list_checkpoints(dir, &list);
    ASSERT(n >= 1);
    ASSERT_CONTAINS(list[0], "/ckpt-000000012.safetensors");
    sl_ckpt_position pos;
    ASSERT_OK(sl_train_check_checkpoint(list[0], NULL, &pos));
    ASSERT_EQ(pos.step, 12);
    ASSERT_EQ(pos.epoch, 0);
    ASSERT_EQ(pos.batch, 12);
    sl_train_free_list(list, n);

    /* resume to 40: the same parameters as 40 steps at once */
    ASSERT_OK(make_trainer(STEPS_BODY(40), "stop", true, NULL, &cfg, &t));
    ASSERT_OK(sl_trainer_run(t));
    ASSERT_EQ(sl_trainer_summary(t)->start_step, 12);
    ASSERT_EQ(sl_trainer_summary(t)->steps, 40);
    ASSERT(!sl_trainer_summary(t)->stopped);
    size_t n1, n2;
    float *p1 = params_of(t, &n1);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    ASSERT_OK(make_trainer(STEPS_BODY(40), "nostop", false, NULL, &cfg, &t));
    ASSERT_OK(sl_trainer_run(t));
    float *p2 = params_of(t, &n2);
    ASSERT(p1 && p2);
    ASSERT_EQ(n1, n2);
    ASSERT_MEMEQ(p1, p2, n1 * sizeof(float));
    free(p1);
    free(p2);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
}

/* The progress line: totals and the run's ETA in both modes, exact strings. */
TEST(test_progress_line) {
    char b[256];
    sl__train_progress_line(b, sizeof b, 1, 5, 12, 40, 52, 200, 0.12341, 0.9, 65.2);
    ASSERT_STREQ(b, "epoch 2/5 [=======>                ] 12/40  loss 0.1234  accuracy 0.9000  eta 1m05s");
    sl__train_progress_line(b, sizeof b, 2, 0, 5, 40, 120, 1000, 0.5, 0.75, 35.4);
    ASSERT_STREQ(b, "step 120/1000 [==>                     ]  12%  epoch 3  loss 0.5000  accuracy 0.7500  eta 35s");
    sl__train_progress_line(b, sizeof b, 24, 0, 40, 40, 1000, 1000, 0.5, 0.75, 0);
    ASSERT_STREQ(b, "step 1000/1000 [========================] 100%  epoch 25  loss 0.5000  accuracy 0.7500  eta 0s");
    sl__train_progress_line(b, sizeof b, 0, 5, 12, 40, 12, 200, 1, 0.5, 7384);
    ASSERT_STREQ(b, "epoch 1/5 [=======>                ] 12/40  loss 1.0000  accuracy 0.5000  eta 2h03m");
    /* the first epoch's length is not known yet: no total, no eta */
    sl__train_progress_line(b, sizeof b, 0, 5, 12, 0, 12, 0, 1, 0.5, -1);
    ASSERT_STREQ(b, "epoch 1  batch 12  loss 1.0000  accuracy 0.5000");
    /* steps mode, eta not measured yet: the total without an eta */
    sl__train_progress_line(b, sizeof b, 0, 0, 1, 0, 1, 40, 1, 0.5, -1);
    ASSERT_STREQ(b, "step 1/40 [>                       ]   2%  epoch 1  loss 1.0000  accuracy 0.5000");
    /* a short buffer: truncated, NUL-terminated, the full length returned */
    char small[8];
    int n = sl__train_progress_line(small, sizeof small, 0, 0, 1, 0, 1, 40, 1, 0.5, -1);
    ASSERT_STREQ(small, "step 1/");
    ASSERT_EQ(n, 80);
}

/* A trainer over cfg with run folder dir and console lines to con, run to its end: SL_OK
 * with *t to free, or the first error. */
static sl_status run_to_console(sl_cfg *cfg, const char *dir, FILE *con, sl_trainer **t) {
    sl_train_opts o = sl_train_opts_default();
    o.run_dir = dir;
    o.console = con;
    *t = NULL;
    sl_status s = sl_trainer_create(cfg, &o, t);
    return s ? s : sl_trainer_run(*t);
}

/* Issue 15: every evaluation gets one console line, steps mode included (it used to reach
 * TensorBoard only); the final evaluation at the last step is not repeated. */
static void test_eval_console_lines(void) {
    sl_cfg *cfg;
    ASSERT_OK(parse_with("    model tiny\n    data train\n    eval test steps=20\n    steps 60\n"
                         "    backend cpu\n    seed 3\n",
                         &cfg));
    char dir[400], con_path[400];
    snprintf(dir, sizeof dir, "%s/evalcon", tmpdir);
    snprintf(con_path, sizeof con_path, "%s/evalcon.txt", tmpdir);
    rm_rf(dir);
    FILE *con = fopen(con_path, "w+");
    ASSERT(con != NULL);
    sl_trainer *t;
    ASSERT_OK(run_to_console(cfg, dir, con, &t));
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    fflush(con);
    rewind(con);
    char line[512];
    int n = 0;
    int64_t steps[8];
    while (fgets(line, sizeof line, con)) {
        long long st;
        double l, a;
        if (sscanf(line, "eval  step %lld  loss %lf  accuracy %lf", &st, &l, &a) == 3) {
            if (n < 8) steps[n] = st;
            n++;
        }
    }
    fclose(con);
    ASSERT_EQ(n, 3);
    ASSERT_EQ(steps[0], 20);
    ASSERT_EQ(steps[1], 40);
    ASSERT_EQ(steps[2], 60);
}

/* Issue 15: `log every=N` writes the train scalars every N steps (not once per epoch). */
static void test_log_every_steps(void) {
    sl_cfg *cfg;
    ASSERT_OK(parse_with("    model tiny\n    data train\n    eval none\n    steps 60\n    log every=20\n"
                         "    backend cpu\n    seed 3\n",
                         &cfg));
    sl_train_config c;
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT_EQ(c.log_every, 20);
    char dir[400];
    snprintf(dir, sizeof dir, "%s/logevery", tmpdir);
    rm_rf(dir);
    sl_train_opts o = sl_train_opts_default();
    o.run_dir = dir;
    sl_trainer *t;
    ASSERT_OK(sl_trainer_create(cfg, &o, &t));
    ASSERT_OK(sl_trainer_run(t));
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    char sub[500];
    snprintf(sub, sizeof sub, "%s/train", dir); /* the train run (no eval/ without an eval pipeline) */
    DIR *dd = opendir(sub);
    ASSERT(dd != NULL);
    struct dirent *de;
    char ev[800] = "";
    while ((de = readdir(dd)))
        if (strncmp(de->d_name, "events.out.tfevents.", 20) == 0) snprintf(ev, sizeof ev, "%s/%s", sub, de->d_name);
    closedir(dd);
    ASSERT(ev[0] != 0);
    sl_tfev_reader *r;
    ASSERT_OK(sl_tfev_reader_open(ev, &r));
    sl_tfev_event e;
    int64_t loss_steps[8];
    int nloss = 0, nlr = 0, nscalar = 0;
    sl_status s;
    while ((s = sl_tfev_reader_next(r, &e)) == SL_OK) {
        if (e.kind != SL_TFEV_SCALAR) continue;
        nscalar++;
        if (strcmp(e.text, "loss") == 0 && nloss < 8) loss_steps[nloss++] = e.step;
        if (strcmp(e.text, "learning_rate") == 0) nlr++;
    }
    ASSERT_EQ(s, SL_END);
    sl_tfev_reader_close(r);
    ASSERT_EQ(nloss, 3);
    ASSERT_EQ(loss_steps[0], 20);
    ASSERT_EQ(loss_steps[1], 40);
    ASSERT_EQ(loss_steps[2], 60);
    ASSERT_EQ(nlr, 3);
    ASSERT_EQ(nscalar, 15); /* 5 train tags x 3 points, nothing per epoch */

    static const config_case cases[] = {
        {"    model tiny\n    data train\n    log every=0\n", SL_ERANGE, "t.sl:20:15:", "log [every=N]"},
        {"    model tiny\n    data train\n    log evry=5\n", SL_EINVAL, "t.sl:20:", "did you mean 'every'?"},
        {"    model tiny\n    data train\n    log\n", SL_EINVAL, "t.sl:20:5:", "log needs every=N (steps) or layout=keras"},
    };
    check_config_cases(cases, sizeof cases / sizeof cases[0]);
}


/* ---- lockstep stop requests: every replica stops at the same step ------------------- */

#define LOCKSTEP_STOP_BODY LOCKSTEP_BODY "    checkpoint steps=1000 keep=0\n"

/* Run LOCKSTEP_STOP_BODY on a simulated pair (peer sim p; flag: this replica's opts.stop)
 * into TMP/run; console text into *text (malloc'd). */
static sl_status run_pair(const char *run, bool resume, peer_sim *p, volatile sig_atomic_t *flag, sl_trainer **t,
                          sl_cfg **cfg, char **text, char **err) {
    sl_train_hooks hooks = lockstep_hooks(p);
    sl_status s = parse_with(LOCKSTEP_STOP_BODY, cfg);
    if (s) return s;
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, run);
    sl_train_opts o = sl_train_opts_default();
    o.run_dir = dir;
    o.resume = resume;
    o.hooks = &hooks; /* copied by the trainer */
    o.stop = flag;
    size_t len = 0;
    FILE *con = open_memstream(text, &len);
    if (!con) return SL_ENOMEM;
    o.console = con;
    s = sl_trainer_create(*cfg, &o, t);
    if (!s) {
        char *e = stderr_of(sl_trainer_run, *t, &s);
        if (err) *err = e;
        else free(e);
    }
    fclose(con);
    return s;
}

static void check_ckpt(const char *run, int64_t step, int64_t epoch, int64_t batch) {
    char **list;
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, run);
    int n = sl_train_list_checkpoints(dir, &list);
    ASSERT(n >= 1);
    char want[64];
    snprintf(want, sizeof want, "/ckpt-%09lld.safetensors", (long long)step);
    ASSERT_CONTAINS(list[0], want);
    sl_ckpt_position pos;
    ASSERT_OK(sl_train_check_checkpoint(list[0], NULL, &pos));
    ASSERT_EQ(pos.step, step);
    ASSERT_EQ(pos.epoch, epoch);
    ASSERT_EQ(pos.batch, batch);
    sl_train_free_list(list, n);
}

/* The peer (rank 1) asks to stop on its 5th step: this replica stops after the same step
 * (5), checkpoints it (epoch 0, batch 5), names rank 1 and its value; --resume then ends
 * bit-identical to a run never stopped. This replica's own flag, raised during step 7,
 * stops both after step 8 (the request rides the next exchange). */
TEST(test_lockstep_stop) {
    volatile sig_atomic_t flag = 0;
    peer_sim p = {.peer_batches = 1000, .peer_stop_at = 5};
    sl_cfg *cfg = NULL;
    sl_trainer *t = NULL;
    char *text = NULL;
    sl_status s = run_pair("lstop", false, &p, &flag, &t, &cfg, &text, NULL);
    if (s == SL_EUNSUPPORTED) {
        sl_trainer_free(t);
        sl_cfg_free(cfg);
        free(text);
        SKIP("no CPU backend in this build");
    }
    ASSERT_OK(s);
    const sl_train_summary *sum = sl_trainer_summary(t);
    ASSERT(sum->stopped);
    ASSERT_EQ(sum->steps, 5);
    ASSERT_EQ(sum->stop_rank, 1);
    ASSERT_EQ(sum->stop_value, SIGTERM);
    ASSERT_EQ(p.exchanges, 5);
    ASSERT_EQ(p.stop_sums, 1);
    ASSERT_EQ(p.stop_sent[0], 1); /* this replica holds batch 6 */
    ASSERT_EQ(p.stop_sent[2], 0); /* and asked nothing */
    ASSERT_OK(p.finish_result);
    ASSERT_CONTAINS(text, "stop requested (rank 1): all 2 replicas stop at step 5\n");
    ASSERT(!strstr(text, "test accuracy"));
    free(text);
    text = NULL;
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    check_ckpt("lstop", 5, 0, 5);

    /* resume: runs to the end (2 epochs of this replica's 32 batches) as if never stopped */
    peer_sim p2 = {.peer_batches = 1000};
    ASSERT_OK(run_pair("lstop", true, &p2, NULL, &t, &cfg, &text, NULL));
    ASSERT_EQ(sl_trainer_summary(t)->start_step, 5);
    ASSERT_EQ(sl_trainer_summary(t)->steps, 64);
    ASSERT(!sl_trainer_summary(t)->stopped);
    size_t n1, n2;
    float *p1 = params_of(t, &n1);
    free(text);
    text = NULL;
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    peer_sim p3 = {.peer_batches = 1000};
    ASSERT_OK(run_pair("lnostop", false, &p3, NULL, &t, &cfg, &text, NULL));
    ASSERT_EQ(sl_trainer_summary(t)->steps, 64);
    float *q = params_of(t, &n2);
    ASSERT(p1 && q);
    ASSERT_EQ(n1, n2);
    ASSERT_MEMEQ(p1, q, n1 * sizeof(float));
    free(p1);
    free(q);
    free(text);
    text = NULL;
    sl_trainer_free(t);
    sl_cfg_free(cfg);

    /* this replica's own request */
    peer_sim p4 = {.peer_batches = 1000, .own_stop_at = 7, .own_stop = &flag};
    flag = 0;
    ASSERT_OK(run_pair("lown", false, &p4, &flag, &t, &cfg, &text, NULL));
    sum = sl_trainer_summary(t);
    ASSERT(sum->stopped);
    ASSERT_EQ(sum->steps, 8);
    ASSERT_EQ(sum->stop_rank, 0);
    ASSERT_EQ(sum->stop_value, SIGINT);
    ASSERT_EQ(p4.stop_sums, 1);
    ASSERT_EQ(p4.stop_sent[0], 1);      /* it did hold a next batch ... */
    ASSERT_EQ(p4.stop_sent[2], SIGINT); /* ... and asked to stop */
    ASSERT_CONTAINS(text, "stop requested (rank 0): all 2 replicas stop at step 8\n");
    free(text);
    text = NULL;
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    check_ckpt("lown", 8, 0, 8);
}

/* A stop request on the step where the peer's data ends too: the epoch is complete (the
 * checkpoint's position is the next epoch's start), and the uneven warning still comes. */
TEST(test_lockstep_stop_at_epoch_end) {
    peer_sim p = {.peer_batches = 3, .peer_stop_at = 3};
    sl_cfg *cfg = NULL;
    sl_trainer *t = NULL;
    char *text = NULL, *err = NULL;
    sl_status s = run_pair("lstopend", false, &p, NULL, &t, &cfg, &text, &err);
    if (s == SL_EUNSUPPORTED) {
        sl_trainer_free(t);
        sl_cfg_free(cfg);
        free(text);
        free(err);
        SKIP("no CPU backend in this build");
    }
    ASSERT_OK(s);
    const sl_train_summary *sum = sl_trainer_summary(t);
    ASSERT(sum->stopped);
    ASSERT_EQ(sum->steps, 3);
    ASSERT_EQ(sum->epochs_done, 1);
    ASSERT_EQ(sum->stop_rank, 1);
    ASSERT_EQ(p.stop_sums, 1);
    ASSERT(err);
    ASSERT_CONTAINS(err, "warning: epoch 1: rank 1 ran out after 3 steps");
    ASSERT_CONTAINS(text, "stop requested (rank 1): all 2 replicas stop at step 3\n");
    free(text);
    free(err);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    check_ckpt("lstopend", 3, 1, 0);
}

/* ---- TensorBoard: RUN_DIR/train and RUN_DIR/eval ------------------------------------- */

/* Event files in dir, sorted by name (at most max); returns how many. */
static int event_files(const char *dir, char paths[][800], int max) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, "events.out.tfevents.", 20) == 0 && n < max)
            snprintf(paths[n++], 800, "%s/%s", dir, de->d_name);
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(paths[j - 1], paths[j]) > 0; j--) {
            char tmp[800];
            memcpy(tmp, paths[j], 800);
            memcpy(paths[j], paths[j - 1], 800);
            memcpy(paths[j - 1], tmp, 800);
        }
    return n;
}

typedef struct {
    char tag[48];
    int64_t step;
    float value;
} scalar_ev;

/* The scalars of one event file in order; returns how many (the file_version event first
 * is checked), or -1. */
static int read_scalars(const char *path, scalar_ev *out, int max) {
    sl_tfev_reader *r;
    if (sl_tfev_reader_open(path, &r)) return -1;
    sl_tfev_event e;
    int n = 0, i = 0;
    sl_status s;
    while ((s = sl_tfev_reader_next(r, &e)) == SL_OK) {
        if (i++ == 0 && (e.kind != SL_TFEV_VERSION || strcmp(e.text, SL_TFEV_FILE_VERSION) != 0)) break;
        if (e.kind != SL_TFEV_SCALAR || n >= max) continue;
        snprintf(out[n].tag, sizeof out[n].tag, "%s", e.text);
        out[n].step = e.step;
        out[n].value = e.value;
        n++;
    }
    sl_tfev_reader_close(r);
    return s == SL_END ? n : -1;
}

#define EVENTS_BODY                                                                                        \
    "    model tiny\n    data train\n    eval test every=1\n    epochs 2\n    optimizer sgd lr=0.05\n" \
    "    backend cpu\n    threads 1\n    seed 3\n"

/* Two TensorBoard runs with the same tags on the same step axis: train/ gets loss,
 * accuracy, learning_rate, examples_per_sec, input_wait_fraction at steps 16 and 32;
 * eval/ gets accuracy and loss at the same steps, the last ones equal to the summary's;
 * nothing at the top level. --resume adds one new file in each. */
TEST(test_event_runs) {
    sl_cfg *cfg = NULL;
    sl_trainer *t = NULL;
    char dir[400], sub[500];
    snprintf(dir, sizeof dir, "%s/events", tmpdir);
    sl_status s = make_trainer(EVENTS_BODY "    checkpoint every=1\n", "events", false, NULL, &cfg, &t);
    SKIP_WITHOUT_CPU(s, cfg);
    ASSERT_OK(s);
    ASSERT_OK(sl_trainer_run(t));
    const sl_train_summary *sum = sl_trainer_summary(t);
    ASSERT_EQ(sum->steps, 32);
    static char paths[4][800];
    ASSERT_EQ(event_files(dir, paths, 4), 0); /* none at the top level */
    snprintf(sub, sizeof sub, "%s/train", dir);
    ASSERT_EQ(event_files(sub, paths, 4), 1);
    scalar_ev ev[32];
    ASSERT_EQ(read_scalars(paths[0], ev, 32), 10);
    static const char *const train_tags[] = {"loss", "accuracy", "learning_rate", "examples_per_sec",
                                             "input_wait_fraction"};
    for (int i = 0; i < 10; i++) {
        ASSERT_STREQ(ev[i].tag, train_tags[i % 5]);
        ASSERT_EQ(ev[i].step, i < 5 ? 16 : 32);
    }
    ASSERT(ev[5].value == (float)sum->train_loss);
    ASSERT(ev[6].value == (float)sum->train_accuracy);
    ASSERT(ev[7].value == 0.05f);
    ASSERT(ev[8].value > 0);
    ASSERT(ev[9].value >= 0 && ev[9].value <= 1);
    snprintf(sub, sizeof sub, "%s/eval", dir);
    ASSERT_EQ(event_files(sub, paths, 4), 1);
    ASSERT_EQ(read_scalars(paths[0], ev, 32), 4);
    for (int i = 0; i < 4; i++) {
        ASSERT_STREQ(ev[i].tag, i % 2 ? "loss" : "accuracy");
        ASSERT_EQ(ev[i].step, i < 2 ? 16 : 32);
    }
    ASSERT(ev[2].value == (float)sum->eval_accuracy);
    ASSERT(ev[3].value == (float)sum->eval_loss);
    /* the same numbers as sl_trainer_evaluate on the final parameters */
    double el, ea;
    ASSERT_OK(sl_trainer_evaluate(t, &el, &ea));
    ASSERT(ev[2].value == (float)ea);
    ASSERT(ev[3].value == (float)el);
    sl_trainer_free(t);
    sl_cfg_free(cfg);

    /* --resume with one more epoch: a second file in each folder, with step 48 */
    ASSERT_OK(make_trainer(EVENTS_BODY "    checkpoint every=1\n    epochs 3\n", "events", true, NULL, &cfg, &t));
    ASSERT_OK(sl_trainer_run(t));
    ASSERT_EQ(sl_trainer_summary(t)->start_step, 32);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    snprintf(sub, sizeof sub, "%s/train", dir);
    ASSERT_EQ(event_files(sub, paths, 4), 2);
    int found = 0;
    for (int k = 0; k < 2; k++) {
        int n = read_scalars(paths[k], ev, 32);
        if (n == 5 && ev[0].step == 48 && strcmp(ev[0].tag, "loss") == 0) found++;
    }
    ASSERT_EQ(found, 1);
    snprintf(sub, sizeof sub, "%s/eval", dir);
    ASSERT_EQ(event_files(sub, paths, 4), 2);
    found = 0;
    for (int k = 0; k < 2; k++) {
        int n = read_scalars(paths[k], ev, 32);
        if (n == 2 && ev[0].step == 48 && strcmp(ev[0].tag, "accuracy") == 0) found++;
    }
    ASSERT_EQ(found, 1);

    /* without an eval pipeline: no eval/ folder */
    ASSERT_OK(make_trainer("    model tiny\n    data train\n    steps 3\n    backend cpu\n    threads 1\n", "noeval",
                           false, NULL, &cfg, &t));
    ASSERT_OK(sl_trainer_run(t));
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    snprintf(sub, sizeof sub, "%s/noeval/eval", tmpdir);
    struct stat sb;
    ASSERT_EQ(stat(sub, &sb), -1);
    snprintf(sub, sizeof sub, "%s/noeval/train", tmpdir);
    ASSERT_EQ(event_files(sub, paths, 4), 1);
}

/* `log layout=keras`: the folders, tags and steps of Keras' TensorBoard callback
 * (keras/src/callbacks/tensorboard.py: _log_epoch_metrics writes epoch_<name> by epoch into
 * train/ and, the val_ logs, validation/, with the learning rate as epoch_learning_rate;
 * on_test_end writes evaluation_<name>_vs_iterations at the optimizer's iterations into
 * validation/; on_train_batch_end writes batch_<name> at the global batch number when
 * update_freq=N divides it, its logs being the epoch's means so far). The golden lists are
 * Keras' for model.fit(epochs=2, validation_data=..., callbacks=[TensorBoard(update_freq=U)])
 * with metrics=["accuracy"], 16 steps an epoch. */
typedef struct {
    const char *tag;
    int64_t step;
} golden_ev;

static void check_golden(const char *dir, const char *run, const golden_ev *g, int n) {
    char sub[600];
    static char paths[4][800];
    static scalar_ev ev[64];
    snprintf(sub, sizeof sub, "%s/%s", dir, run);
    ASSERT_EQ(event_files(sub, paths, 4), 1);
    int got = read_scalars(paths[0], ev, 64);
    ASSERT_EQ(got, n);
    for (int i = 0; i < n && i < got; i++) {
        if (strcmp(ev[i].tag, g[i].tag) != 0 || ev[i].step != g[i].step)
            FAILF("%s event %d: %s at %lld, Keras writes %s at %lld", run, i, ev[i].tag, (long long)ev[i].step,
                  g[i].tag, (long long)g[i].step);
    }
}

TEST(test_event_runs_keras_layout) {
    sl_cfg *cfg = NULL;
    sl_trainer *t = NULL;
    char dir[400], sub[500];
    snprintf(dir, sizeof dir, "%s/keras", tmpdir);
    sl_status s = make_trainer(EVENTS_BODY "    log layout=keras\n", "keras", false, NULL, &cfg, &t);
    SKIP_WITHOUT_CPU(s, cfg);
    ASSERT_OK(s);
    ASSERT_OK(sl_trainer_run(t));
    const sl_train_summary *sum = sl_trainer_summary(t);
    ASSERT_EQ(sum->steps, 32);
    static const golden_ev train[] = {{"epoch_loss", 0}, {"epoch_accuracy", 0}, {"epoch_learning_rate", 0},
                                      {"epoch_loss", 1}, {"epoch_accuracy", 1}, {"epoch_learning_rate", 1}};
    static const golden_ev val[] = {{"evaluation_loss_vs_iterations", 16}, {"evaluation_accuracy_vs_iterations", 16},
                                    {"epoch_loss", 0}, {"epoch_accuracy", 0},
                                    {"evaluation_loss_vs_iterations", 32}, {"evaluation_accuracy_vs_iterations", 32},
                                    {"epoch_loss", 1}, {"epoch_accuracy", 1}};
    check_golden(dir, "train", train, 6);
    check_golden(dir, "validation", val, 8);
    snprintf(sub, sizeof sub, "%s/eval", dir);
    struct stat sb;
    ASSERT_EQ(stat(sub, &sb), -1); /* Keras has no eval/ */
    /* the values: the epoch's means, the final evaluation */
    static char paths[4][800];
    static scalar_ev ev[64];
    snprintf(sub, sizeof sub, "%s/validation", dir);
    ASSERT_EQ(event_files(sub, paths, 4), 1);
    ASSERT_EQ(read_scalars(paths[0], ev, 64), 8);
    ASSERT(ev[6].value == (float)sum->eval_loss);
    ASSERT(ev[7].value == (float)sum->eval_accuracy);
    sl_trainer_free(t);
    sl_cfg_free(cfg);

    /* update_freq=8: batch_loss and batch_accuracy at batches 8, 16, 24, 32, and the epoch
     * scalars as before */
    snprintf(dir, sizeof dir, "%s/keras8", tmpdir);
    ASSERT_OK(make_trainer(EVENTS_BODY "    log every=8 layout=keras\n", "keras8", false, NULL, &cfg, &t));
    ASSERT_OK(sl_trainer_run(t));
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    static const golden_ev train8[] = {{"batch_loss", 8},  {"batch_accuracy", 8},  {"batch_loss", 16},
                                       {"batch_accuracy", 16}, {"epoch_loss", 0},  {"epoch_accuracy", 0},
                                       {"epoch_learning_rate", 0}, {"batch_loss", 24}, {"batch_accuracy", 24},
                                       {"batch_loss", 32}, {"batch_accuracy", 32}, {"epoch_loss", 1},
                                       {"epoch_accuracy", 1}, {"epoch_learning_rate", 1}};
    check_golden(dir, "train", train8, 14);
    check_golden(dir, "validation", val, 8);
    /* the batch scalars are the epoch's means so far: at the epoch's last batch, its mean */
    snprintf(sub, sizeof sub, "%s/train", dir);
    ASSERT_EQ(event_files(sub, paths, 4), 1);
    ASSERT_EQ(read_scalars(paths[0], ev, 64), 14);
    ASSERT(ev[2].value == ev[4].value); /* batch_loss at 16 = epoch_loss of epoch 0 */
    ASSERT(ev[3].value == ev[5].value);

    static const config_case cases[] = {
        {"    model tiny\n    data train\n    log layout=kers\n", SL_EINVAL, "t.sl:20:16:", "unknown value 'kers' (expected one of: sluice, keras)"},
    };
    check_config_cases(cases, sizeof cases / sizeof cases[0]);
}

static void touch(const char *path) {
    FILE *f = fopen(path, "w");
    ASSERT(f);
    fclose(f);
}

/* A new run refuses a folder with another run's event files in train/, eval/ or (the old
 * layout) at the top; --overwrite removes them; a removal that fails names the file. */
TEST(test_run_dir_event_subfolders) {
    char run[400], p[600];
    snprintf(run, sizeof run, "%s/evsub", tmpdir);
    rm_rf(run);
    snprintf(p, sizeof p, "%s/train", run);
    ASSERT_EQ(mkdir(run, 0755), 0);
    ASSERT_EQ(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/train/events.out.tfevents.1700000000.host", run);
    touch(p);
    ASSERT_EQ(sl_train_prepare_run_dir(run, false, NULL), SL_EINVAL);
    char want[800];
    snprintf(want, sizeof want, "run folder %s holds another run's files: 1 TensorBoard event file;", run);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT_CONTAINS(sl_errmsg(), "--resume");
    ASSERT_EQ(access(p, F_OK), 0); /* nothing removed */
    /* eval/ and the old top-level layout count too */
    snprintf(p, sizeof p, "%s/eval", run);
    ASSERT_EQ(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/eval/events.out.tfevents.1700000000.host", run);
    touch(p);
    snprintf(p, sizeof p, "%s/events.out.tfevents.1600000000.host", run);
    touch(p);
    snprintf(p, sizeof p, "%s/train/notes.txt", run); /* not an event file: stays */
    touch(p);
    ASSERT_EQ(sl_train_prepare_run_dir(run, false, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "holds another run's files: 3 TensorBoard event files;");
    /* the trainer refuses it too, before training */
    sl_cfg *cfg = NULL;
    sl_trainer *t = NULL;
    sl_status s = make_trainer("    model tiny\n    data train\n    steps 2\n    backend cpu\n", "evsub", false, NULL, &cfg,
                               &t);
    if (s != SL_EUNSUPPORTED) {
        ASSERT_OK(s);
        ASSERT_EQ(sl_trainer_run(t), SL_EINVAL);
        ASSERT_CONTAINS(sl_errmsg(), "3 TensorBoard event files");
    }
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    char *text = NULL;
    size_t len = 0;
    FILE *con = open_memstream(&text, &len);
    ASSERT(con);
    ASSERT_OK(sl_train_prepare_run_dir(run, true, con));
    fclose(con);
    snprintf(want, sizeof want, "run folder %s: removing an earlier run's 3 TensorBoard event files (--overwrite)\n", run);
    ASSERT_STREQ(text, want);
    free(text);
    snprintf(p, sizeof p, "%s/train/events.out.tfevents.1700000000.host", run);
    ASSERT(access(p, F_OK) != 0);
    snprintf(p, sizeof p, "%s/eval/events.out.tfevents.1700000000.host", run);
    ASSERT(access(p, F_OK) != 0);
    snprintf(p, sizeof p, "%s/events.out.tfevents.1600000000.host", run);
    ASSERT(access(p, F_OK) != 0);
    snprintf(p, sizeof p, "%s/train/notes.txt", run);
    ASSERT_EQ(access(p, F_OK), 0);
    ASSERT_OK(sl_train_prepare_run_dir(run, false, NULL));
    /* a removal that fails (a folder by an event file's name: EISDIR, even for root) */
    snprintf(p, sizeof p, "%s/eval/events.out.tfevents.1700000001.host", run);
    ASSERT_EQ(mkdir(p, 0755), 0);
    ASSERT_EQ(sl_train_prepare_run_dir(run, true, NULL), SL_EIO);
    snprintf(want, sizeof want, "cannot remove %s (an earlier run's file in the run folder): %s", p, strerror(EISDIR));
    ASSERT_CONTAINS(sl_errmsg(), want);
    rm_rf(run);
}

/* sl_job_run (sluice/job.h): a plain run reports its role before it starts and its summary
 * after; the environment it is given (not the process's) decides: SLUICE_WORLD=2 over
 * `strategy none` is refused, SLUICE_RESTART=1 continues the run from its checkpoint. */
static int roles_seen;
static bool role_chief;

static void on_role(void *ctx, const sl_job_result *r) {
    (void)ctx;
    roles_seen++;
    role_chief = r->is_chief && !r->ps_task && !r->stop_together;
}

TEST(test_job_run) {
    sl_cfg *cfg = NULL;
    char dir[400];
    snprintf(dir, sizeof dir, "%s/job", tmpdir);
    ASSERT_OK(parse_with(STEPS_BODY(10), &cfg));
    const char *env[] = {"PATH=/usr/bin", NULL};
    sl_job_opts o = sl_job_opts_default();
    o.run_dir = dir;
    o.envp = env;
    o.on_role = on_role;
    sl_job_result r;
    roles_seen = 0;
    ASSERT_OK(sl_job_run(cfg, &o, &r));
    ASSERT_EQ(roles_seen, 1);
    ASSERT(role_chief);
    ASSERT(r.checkpoints);
    ASSERT_STREQ(r.run_dir, dir);
    ASSERT_EQ(r.summary.steps, 10);
    ASSERT_EQ(r.summary.start_step, 0);
    ASSERT(!r.summary.stopped);
    sl_cfg_free(cfg);

    /* sluice-launch -n 2 over strategy none: refused before anything runs */
    ASSERT_OK(parse_with(STEPS_BODY(20), &cfg));
    const char *world[] = {"SLUICE_WORLD=2", NULL};
    o.envp = world;
    roles_seen = 0;
    ASSERT_EQ(sl_job_run(cfg, &o, &r), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "this task is one of 2 replicas (SLUICE_WORLD, from sluice-launch) but the train "
                                 "block says strategy none");
    ASSERT_EQ(roles_seen, 0);

    /* a restarted task continues its run: from the checkpoint of step 10 to 20 */
    const char *restart[] = {"SLUICE_RESTART=1", NULL};
    o.envp = restart;
    ASSERT_OK(sl_job_run(cfg, &o, &r));
    ASSERT_EQ(r.summary.start_step, 10);
    ASSERT_EQ(r.summary.steps, 20);
    sl_cfg_free(cfg);
}

/* label_smoothing and decay_exclude in the train block: values, and each mistake at its
 * place with a hint. */
/* The train block `body` after BASE read into *c. */
static sl_status train_config_of(const char *body, sl_train_config *c) {
    sl_cfg *cfg;
    sl_status s = parse_with(body, &cfg);
    if (!s) s = sl_train_config_parse(cfg, c);
    sl_cfg_free(cfg);
    return s;
}

TEST(test_config_smoothing_decay_exclude) {
    sl_cfg *cfg;
    sl_train_config c;
    ASSERT_OK(train_config_of("    model tiny\n    data train\n", &c));
    ASSERT(c.label_smoothing == 0.0f);
    ASSERT_EQ(c.optim.decay_exclude, 0);
    ASSERT_OK(parse_with("    model tiny\n    data train\n    label_smoothing 0.1\n"
                         "    optimizer sgd lr=0.1 momentum=0.9 weight_decay=5e-4 decay_exclude=[bias, batchnorm]\n",
                         &cfg));
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT(c.label_smoothing == 0.1f);
    ASSERT(c.optim.weight_decay == 5e-4f);
    ASSERT_EQ(c.optim.decay_exclude, SL_DECAY_EXCLUDE_BIAS | SL_DECAY_EXCLUDE_BATCHNORM);
    /* the other spellings, through --set */
    static const struct {
        const char *set;
        unsigned bits;
    } sets[] = {{"train.optimizer.decay_exclude=batchnorm", SL_DECAY_EXCLUDE_BATCHNORM},
                {"train.optimizer.decay_exclude=\"bias\"", SL_DECAY_EXCLUDE_BIAS},
                {"train.optimizer.decay_exclude=[batchnorm, bias]", SL_DECAY_EXCLUDE_BIAS | SL_DECAY_EXCLUDE_BATCHNORM},
                {"train.optimizer.decay_exclude=none", 0},
                {"train.optimizer.decay_exclude=[]", 0}};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        ASSERT_OK(sl_cfg_set(cfg, sets[i].set));
        ASSERT_OK(sl_train_config_parse(cfg, &c));
        ASSERT_EQ(c.optim.decay_exclude, sets[i].bits);
    }
    ASSERT_OK(sl_cfg_set(cfg, "train.label_smoothing=0"));
    ASSERT_OK(sl_train_config_parse(cfg, &c));
    ASSERT(c.label_smoothing == 0.0f);
    sl_cfg_free(cfg);
    /* adam with topk over the ring: no momentum correction there, so it is accepted */
    ASSERT_OK(train_config_of("    model tiny\n    data train\n    strategy ring compress=topk(0.01)\n"
                              "    optimizer adamw lr=0.1 weight_decay=0.05 decay_exclude=bias\n",
                              &c));
    ASSERT_EQ(c.optim.decay_exclude, SL_DECAY_EXCLUDE_BIAS);
    static const config_case cases[] = {
        {"    model tiny\n    data train\n    label_smoothing 1\n", SL_ERANGE, "t.sl:20:21:",
         "label_smoothing 1 is outside [0, 1)", "the usual value is 0.1"},
        {"    model tiny\n    data train\n    label_smoothing -0.1\n", SL_ERANGE, "t.sl:20:21:",
         "label_smoothing -0.1 is outside [0, 1)", "0 turns it off"},
        {"    model tiny\n    data train\n    label_smoothing high\n", SL_EINVAL, "t.sl:20:21:",
         "expected a number, found", "usage: label_smoothing E"},
        {"    model tiny\n    data train\n    label_smoothing\n", SL_EINVAL, "t.sl:20:5:",
         "label_smoothing needs a value", "usage: label_smoothing E"},
        {"    model tiny\n    data train\n    label_smoothing 0.1 0.2\n", SL_EINVAL, "t.sl:20:25:",
         "label_smoothing: unexpected value", "usage: label_smoothing E"},
        {"    model tiny\n    data train\n    label_smothing 0.1\n", SL_EINVAL, "t.sl:20:5:",
         "unknown train statement 'label_smothing'", "did you mean 'label_smoothing'?"},
        {"    model tiny\n    data train\n    optimizer sgd lr=0.1 weight_decay=1e-4 decay_exclude=[bias, bn]\n",
         SL_EINVAL, "t.sl:20:65:", "unknown value 'bn' (expected one of: bias, batchnorm)", "usage: optimizer"},
        {"    model tiny\n    data train\n    optimizer sgd lr=0.1 weight_decay=1e-4 decay_exclude=biases\n",
         SL_EINVAL, "t.sl:20:58:", "unknown value 'biases'", "did you mean 'bias'?"},
        {"    model tiny\n    data train\n    optimizer sgd lr=0.1 decay_exclude=[bias, batchnorm, bias]\n",
         SL_EINVAL, "t.sl:20:58:", "decay_exclude: 'bias' is listed twice", "list each of bias and batchnorm once"},
        {"    model tiny\n    data train\n    optimizer sgd lr=0.1 decay_exclude=1\n", SL_EINVAL, "t.sl:20:40:",
         "decay_exclude takes the words bias and batchnorm", "decay_exclude=[bias, batchnorm]"},
        {"    model tiny\n    data train\n    optimizer sgd lr=0.1 decay_exclud=bias\n", SL_EINVAL, "t.sl:20:39:",
         "optimizer: unknown option 'decay_exclud'", "did you mean 'decay_exclude'?"},
        {"    model tiny\n    data train\n    optimizer sgd lr=0.1 weight_decay=1e-4 decay_exclude=bias\n"
         "    strategy ps\n",
         SL_EINVAL, "t.sl:20:58:", "decay_exclude is not supported with `strategy ps`",
         "the parameter servers' optimizer applies weight_decay to every parameter"},
        {"    model tiny\n    data train\n    strategy ring compress=sign\n"
         "    optimizer sgd lr=0.1 momentum=0.9 weight_decay=1e-4 decay_exclude=bias\n",
         SL_EINVAL, "t.sl:21:71:", "decay_exclude is not supported with `strategy ring compress=topk|sign`",
         "the ring's momentum correction applies weight_decay"},
    };
    check_config_cases(cases, sizeof cases / sizeof cases[0]);
}

/* input 2 -> dense 8 with a zero kernel: every example's logits are the bias, set here. */
static sl_model *bias_logits_model(float smoothing, const float bias[8]) {
    sl_layer_spec L[2] = {{.kind = SL_LAYER_INPUT, .rank = 1, .shape = {2}}, {.kind = SL_LAYER_DENSE, .units = 8}};
    sl_model_opts o = sl_model_opts_default();
    o.backend = SL_BACKEND_CPU;
    o.threads = 1;
    o.max_batch = 4;
    o.label_smoothing = smoothing;
    sl_model *m = NULL;
    if (sl_model_create(L, 2, &o, &m)) return NULL;
    float p[24] = {0};
    memcpy(p + 16, bias, 8 * sizeof(float)); /* kernel [2, 8], then bias */
    if (sl_model_set_params(m, p, 24)) {
        sl_model_free(m);
        return NULL;
    }
    return m;
}

/* The model's steps with label_smoothing 0.1 and top-5 counts, against numbers by hand:
 * logits (3, 1, 2, 2, 2, 2, 0, 2) for labels 0, 1, 2, 6: top-1 only row 0; top-5 rows 0 (3
 * is the maximum) and 2 (only 3 above 2), not 1 (six above) nor 6 (seven above). The loss
 * is LSE - sum_j t_j z_j per row with t = 0.9 onehot + 0.1/8, in train and eval steps. */
TEST(test_model_smoothing_top5) {
    const float b[8] = {3, 1, 2, 2, 2, 2, 0, 2};
    sl_model *m = bias_logits_model(0.1f, b);
    ASSERT(m);
    int64_t xd[2] = {4, 2}, yd[1] = {4};
    sl_tensor x = SL_TENSOR_EMPTY, y = SL_TENSOR_EMPTY;
    ASSERT_OK(sl_tensor_alloc(&x, SL_DT_F32, 2, xd));
    ASSERT_OK(sl_tensor_alloc(&y, SL_DT_I64, 1, yd));
    memset(x.data, 0, 8 * sizeof(float));
    const int64_t lab[4] = {0, 1, 2, 6};
    memcpy(y.data, lab, sizeof lab);
    double lse = 0, sumz = 0;
    for (int j = 0; j < 8; j++) lse += exp(b[j]), sumz += b[j];
    lse = log(lse);
    double want = lse - 0.9 * (3 + 1 + 2 + 0) / 4.0 - 0.1 / 8 * sumz;
    sl_step_result r = {0};
    ASSERT_OK(sl_model_eval_step(m, &x, &y, &r));
    ASSERT_EQ(r.examples, 4);
    ASSERT_EQ(r.correct, 1);
    ASSERT_EQ(r.top5, 2);
    ASSERT(fabs(r.loss - want) < 1e-9);
    ASSERT_OK(sl_model_zero_grads(m));
    r = (sl_step_result){0};
    ASSERT_OK(sl_model_train_step(m, &x, &y, 1.0f, &r));
    ASSERT_EQ(r.correct, 1);
    ASSERT_EQ(r.top5, 2);
    ASSERT(fabs(r.loss - want) < 1e-9);
    /* the bias gradient: the batch mean of softmax - t */
    const float *g = sl_model_grads(m, NULL);
    for (int j = 0; j < 8; j++) {
        double cnt = (j == 0) + (j == 1) + (j == 2) + (j == 6);
        double gj = exp(b[j] - lse) - 0.1 / 8 - 0.9 * cnt / 4;
        if (!(fabs(g[16 + j] - gj) < 1e-6)) FAILF("bias grad %d: %.9g, want %.9g", j, g[16 + j], gj);
    }
    sl_model_free(m);
    /* without smoothing: plain cross-entropy */
    m = bias_logits_model(0.0f, b);
    ASSERT(m);
    ASSERT_OK(sl_model_eval_step(m, &x, &y, &r));
    ASSERT(fabs(r.loss - (lse - 1.5)) < 1e-9);
    ASSERT_EQ(r.top5, 2);
    sl_model_free(m);
    ASSERT(bias_logits_model(1.0f, b) == NULL);
    ASSERT_STREQ(sl_errmsg(), "model: label_smoothing 1 must be in [0, 1)");
    sl_tensor_release(&x);
    sl_tensor_release(&y);
}

/* A model with more than 5 classes: the epoch line and the eval lines carry top5, the
 * train/ and eval/ runs a top5_accuracy scalar with the summary's values; label_smoothing
 * and decay_exclude train. (Models of 5 classes or fewer print and log no top5: the
 * 2-class runs above have exactly their old lines and tags.) */
TEST(test_top5_lines_and_scalars) {
    char text[4096], dir[400], con_path[400];
    snprintf(text, sizeof text,
             "%smodel wide {\n    input 4\n    dense 8 activation=relu\n    batchnorm\n    dense 8\n}\n"
             "train {\n    model wide\n    data train\n    eval test\n    epochs 2\n    label_smoothing 0.1\n"
             "    optimizer sgd lr=0.05 momentum=0.9 weight_decay=1e-3 decay_exclude=[bias, batchnorm]\n"
             "    backend cpu\n    threads 1\n    seed 3\n}\n",
             BASE);
    snprintf(dir, sizeof dir, "%s/wide", tmpdir);
    snprintf(con_path, sizeof con_path, "%s/wide.txt", tmpdir);
    sl_cfg *cfg;
    ASSERT_OK(parse_text(text, "wide.sl", &cfg));
    FILE *con = fopen(con_path, "w+");
    ASSERT(con != NULL);
    sl_trainer *t;
    ASSERT_OK(run_to_console(cfg, dir, con, &t));
    const sl_train_summary sum_copy = *sl_trainer_summary(t), *sum = &sum_copy; /* outlives t */
    ASSERT_EQ(sum->steps, 32);
    ASSERT(sum->train_top5_accuracy >= sum->train_accuracy && sum->train_top5_accuracy <= 1);
    ASSERT(sum->eval_top5_accuracy >= sum->eval_accuracy && sum->eval_top5_accuracy <= 1);
    fflush(con);
    rewind(con);
    char line[512];
    int epochs = 0, evals = 0;
    double last_eval_top5 = -1, last_train_top5 = -1;
    while (fgets(line, sizeof line, con)) {
        long long st;
        double l, a, t5, ea, et5;
        if (sscanf(line, "eval  step %lld  loss %lf  accuracy %lf  top5 %lf", &st, &l, &a, &t5) == 4) {
            evals++;
            last_eval_top5 = t5;
        }
        if (strncmp(line, "epoch ", 6) == 0) {
            const char *p = strstr(line, "  loss ");
            ASSERT(p != NULL);
            ASSERT_EQ(sscanf(p, "  loss %lf  accuracy %lf  top5 %lf", &l, &a, &t5), 3);
            last_train_top5 = t5;
            epochs++;
            if ((p = strstr(line, "  eval accuracy "))) {
                ASSERT_EQ(sscanf(p, "  eval accuracy %lf  eval top5 %lf", &ea, &et5), 2);
                last_eval_top5 = et5;
            }
        }
    }
    fclose(con);
    ASSERT_EQ(epochs, 2);
    ASSERT_EQ(evals, 0); /* every epoch's evaluation is on its epoch line */
    ASSERT(fabs(last_train_top5 - sum->train_top5_accuracy) <= 5e-5);
    ASSERT(fabs(last_eval_top5 - sum->eval_top5_accuracy) <= 5e-5);
    sl_trainer_free(t);
    /* the scalars: top5_accuracy after the others, with the summary's values */
    static char paths[4][800];
    char sub[500];
    scalar_ev ev[32];
    snprintf(sub, sizeof sub, "%s/train", dir);
    ASSERT_EQ(event_files(sub, paths, 4), 1);
    ASSERT_EQ(read_scalars(paths[0], ev, 32), 12);
    ASSERT_STREQ(ev[5].tag, "top5_accuracy");
    ASSERT_STREQ(ev[11].tag, "top5_accuracy");
    ASSERT_EQ(ev[11].step, 32);
    ASSERT(ev[11].value == (float)sum->train_top5_accuracy);
    snprintf(sub, sizeof sub, "%s/eval", dir);
    ASSERT_EQ(event_files(sub, paths, 4), 1);
    ASSERT_EQ(read_scalars(paths[0], ev, 32), 6); /* steps 16, 32 */
    static const char *const eval_tags[] = {"accuracy", "loss", "top5_accuracy"};
    for (int i = 0; i < 6; i++) ASSERT_STREQ(ev[i].tag, eval_tags[i % 3]);
    ASSERT_EQ(ev[5].step, 32);
    ASSERT(ev[5].value == (float)sum->eval_top5_accuracy);
    /* evaluations every 12 steps: lines of their own at 12, 24 and the final one at 32 */
    ASSERT_OK(sl_cfg_set(cfg, "train.eval=(test steps=12)"));
    snprintf(dir, sizeof dir, "%s/wide12", tmpdir);
    con = fopen(con_path, "w+");
    ASSERT(con != NULL);
    ASSERT_OK(run_to_console(cfg, dir, con, &t));
    fflush(con);
    rewind(con);
    int64_t at[4];
    while (fgets(line, sizeof line, con)) {
        long long st;
        double l, a, t5;
        if (sscanf(line, "eval  step %lld  loss %lf  accuracy %lf  top5 %lf", &st, &l, &a, &t5) == 4 && evals < 4)
            at[evals++] = st, last_eval_top5 = t5;
    }
    fclose(con);
    ASSERT_EQ(evals, 3);
    ASSERT_EQ(at[0], 12);
    ASSERT_EQ(at[1], 24);
    ASSERT_EQ(at[2], 32);
    ASSERT(fabs(last_eval_top5 - sl_trainer_summary(t)->eval_top5_accuracy) <= 5e-5);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
}

/* ---- mixed precision (`precision`): the statement and its errors, bf16 training on the CPU
 * backend (emulated) to about float32's loss, fp16's dynamic loss scaling: a non-finite
 * gradient skips the step (parameters unchanged) and halves the scale, a finite one is
 * divided by the scale before the optimizer, 2000 finite steps double it ---------------- */

#define HEAD "    model tiny\n    data train\n"

TEST(test_config_precision) {
    static const struct {
        const char *body;
        sl_precision want;
    } ok[] = {
        {HEAD, SL_PRECISION_FP32},
        {HEAD "    precision fp32\n", SL_PRECISION_FP32},
        {HEAD "    precision bf16\n", SL_PRECISION_BF16},
        {HEAD "    precision fp16\n    strategy ring\n", SL_PRECISION_FP16},
        {HEAD "    precision bf16\n    strategy ps\n", SL_PRECISION_BF16},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        sl_cfg *cfg;
        sl_train_config c;
        ASSERT_OK(parse_with(ok[i].body, &cfg));
        ASSERT_OK(sl_train_config_parse(cfg, &c));
        ASSERT_EQ(c.precision, ok[i].want);
        sl_cfg_free(cfg);
    }
    ASSERT_STREQ(sl_precision_name(SL_PRECISION_BF16), "bf16");
    ASSERT(sl_precision_name((sl_precision)9) == NULL);

    /* each mistake: the code, the place, the message and the hint */
    static const config_case bad[] = {
        {HEAD "    precision fp8\n", SL_EINVAL, "t.sl:20:15:",
         "unknown value 'fp8' (expected one of: fp32, bf16, fp16)", "HINT: usage: precision fp32|bf16|fp16"},
        {HEAD "    precision BF16\n", SL_EINVAL, "t.sl:20:15:",
         "unknown value 'BF16' (expected one of: fp32, bf16, fp16)", "HINT: usage: precision fp32|bf16|fp16"},
        {HEAD "    precision\n", SL_EINVAL, "t.sl:20:5:", "precision needs a value",
         "HINT: usage: precision fp32|bf16|fp16"},
        {HEAD "    precision bf16 fp16\n", SL_EINVAL, "t.sl:20:20:", "precision: unexpected value",
         "HINT: usage: precision fp32|bf16|fp16"},
        {HEAD "    precision fp16\n    strategy ps\n", SL_EINVAL, "t.sl:20:15:",
         "precision fp16 is not supported with `strategy ps`",
         "HINT: fp16's loss scaling needs the plain averaged gradient on every replica: use precision bf16 (no "
         "loss scaling), or strategy none or ring without compress"},
        {HEAD "    strategy ring compress=int8\n    precision fp16\n", SL_EINVAL, "t.sl:21:15:",
         "precision fp16 is not supported with `strategy ring compress=...`",
         "HINT: fp16's loss scaling needs the plain averaged gradient on every replica"},
    };
    check_config_cases(bad, sizeof bad / sizeof bad[0]);
}

#define TRAIN_BODY(prec)                                                                                   \
    HEAD "    eval test\n    steps 48\n    optimizer adam lr=0.05\n    checkpoint none\n    backend cpu\n" \
         "    threads 1\n    seed 3\n    precision " prec "\n"

/* The same run in fp32 and in bf16 (emulated on the CPU): other parameters (the mode is
 * on), about the same loss, and the startup line names the precision. */
TEST(test_bf16_trains_like_fp32) {
    sl_cfg *c32 = NULL, *c16 = NULL;
    sl_trainer *t32 = NULL, *t16 = NULL;
    char con_path[400], line[512] = "";
    snprintf(con_path, sizeof con_path, "%s/con.txt", tmpdir);
    FILE *con = fopen(con_path, "w+");
    ASSERT(con);
    char d32[400], d16[400];
    snprintf(d32, sizeof d32, "%s/fp32", tmpdir);
    snprintf(d16, sizeof d16, "%s/bf16", tmpdir);
    ASSERT_OK(parse_with(TRAIN_BODY("fp32"), &c32));
    ASSERT_OK(parse_with(TRAIN_BODY("bf16"), &c16));
    sl_status s32 = run_to_console(c32, d32, NULL, &t32);
    sl_status s16 = run_to_console(c16, d16, con, &t16);
    rewind(con);
    while (fgets(line, sizeof line, con) && strncmp(line, "model ", 6) != 0) {
    }
    fclose(con);
    size_t n32 = 0, n16 = 0;
    float *p32 = s32 ? NULL : params_of(t32, &n32);
    float *p16 = s16 ? NULL : params_of(t16, &n16);
    sl_train_summary a = {0}, b = {0};
    if (t32) a = *sl_trainer_summary(t32);
    if (t16) b = *sl_trainer_summary(t16);
    sl_trainer_free(t32);
    sl_trainer_free(t16);
    sl_cfg_free(c32);
    sl_cfg_free(c16);
    bool differ = p32 && p16 && n32 == n16 && memcmp(p32, p16, n32 * sizeof(float)) != 0;
    free(p32);
    free(p16);
    ASSERT_OK(s32);
    ASSERT_OK(s16);
    printf("  fp32: train loss %.5f eval loss %.5f accuracy %.4f; bf16: %.5f %.5f %.4f\n", a.train_loss, a.eval_loss,
           a.eval_accuracy, b.train_loss, b.eval_loss, b.eval_accuracy);
    ASSERT(differ);
    ASSERT(a.eval_accuracy > 0.85 && b.eval_accuracy > 0.85);
    ASSERT(fabs(b.eval_loss - a.eval_loss) <= 0.05 * a.eval_loss);
    ASSERT(fabs(b.train_loss - a.train_loss) <= 0.05 * a.train_loss);
    ASSERT(a.loss_scale == 1.0 && b.loss_scale == 1.0);
    ASSERT_EQ(b.skipped_steps, 0);
    ASSERT_CONTAINS(line, "model tiny on cpu (precision bf16, emulated): 58 parameters; ");
}

/* fp16: an exchange hook that makes the gradient of chosen steps infinite (as an fp16
 * overflow in some replica's backward would) and keeps what the loop showed it. */
typedef struct {
    uint64_t inf_steps; /* bit s: step s's gradient gets an infinity */
    int64_t watch;      /* this step's gradient and parameters are kept */
    float grads[64], params[64];
    size_t n;
    int exchanges;
} inf_hook;

static sl_status inf_exchange(void *ctx, const sl_step *rec, sl_step_reply *out) {
    inf_hook *h = ctx;
    if (rec->phase != SL_STEP_TRAIN) return SL_OK;
    h->exchanges++;
    int64_t step = rec->step;
    size_t n = rec->n;
    if (step < 64 && (h->inf_steps >> step & 1)) rec->grads[3] = INFINITY; /* CPU backend: host memory */
    if (step == h->watch && n <= 64) {
        h->n = n;
        memcpy(h->grads, rec->grads, n * sizeof(float));
        if (sl_model_get_params(rec->model, h->params, n)) return sl_errcode();
    }
    return SL_OK;
}

#define FP16_BODY(steps)                                                                                  \
    HEAD "    eval none\n    steps " #steps "\n    optimizer sgd lr=0.1 momentum=0\n    checkpoint none\n" \
         "    backend cpu\n    threads 1\n    seed 5\n    precision fp16\n"

TEST(test_fp16_loss_scale) {
    inf_hook h = {.inf_steps = 1, .watch = 1};
    sl_train_hooks hooks = {.ctx = &h, .world_size = 1, .rank = 0, .is_chief = true, .exchange = inf_exchange};
    /* one step, its gradient infinite: skipped, the parameters as they were, the scale halved */
    sl_cfg *cfg = NULL;
    sl_trainer *t = NULL;
    ASSERT_OK(make_trainer(FP16_BODY(1), "fp16a", false, &hooks, &cfg, &t));
    size_t n;
    float *before = params_of(t, &n);
    ASSERT(before);
    ASSERT_OK(sl_trainer_run(t));
    float *after = params_of(t, &n);
    ASSERT(after);
    ASSERT_EQ(n, 58);
    ASSERT_MEMEQ(before, after, n * sizeof(float));
    ASSERT(sl_trainer_summary(t)->loss_scale == 32768.0);
    ASSERT_EQ(sl_trainer_summary(t)->skipped_steps, 1);
    ASSERT_EQ(sl_trainer_summary(t)->steps, 1);
    free(before);
    free(after);
    sl_trainer_free(t);
    sl_cfg_free(cfg);

    /* two steps: the second, at scale 32768, updates with its gradient divided by the scale */
    h = (inf_hook){.inf_steps = 1, .watch = 1};
    ASSERT_OK(make_trainer(FP16_BODY(2), "fp16b", false, &hooks, &cfg, &t));
    ASSERT_OK(sl_trainer_run(t));
    after = params_of(t, &n);
    ASSERT(after);
    ASSERT_EQ(h.exchanges, 2);
    ASSERT_EQ(h.n, n);
    ASSERT(sl_trainer_summary(t)->loss_scale == 32768.0);
    ASSERT_EQ(sl_trainer_summary(t)->skipped_steps, 1);
    double gmax = 0;
    size_t moved = 0;
    for (size_t i = 0; i < sl__model_trainable(sl_trainer_model(t)); i++) {
        float want = h.params[i] - 0.1f * (h.grads[i] * (1.0f / 32768.0f)); /* sgd, momentum 0 */
        if (after[i] != want) FAILF("param %zu: %.9g, want %.9g", i, (double)after[i], (double)want);
        gmax = fmax(gmax, fabs(h.grads[i]));
        moved += after[i] != h.params[i];
    }
    ASSERT(gmax > 100); /* the gradient the exchange saw was the scaled one */
    ASSERT(moved > 10);
    free(after);
    sl_trainer_free(t);
    sl_cfg_free(cfg);

    /* every gradient infinite: 16 skips bring the scale to 1, the 17th stops the run */
    h = (inf_hook){.inf_steps = ~0ull, .watch = -1};
    ASSERT_OK(make_trainer(FP16_BODY(40), "fp16c", false, &hooks, &cfg, &t));
    ASSERT_EQ(sl_trainer_run(t), SL_ERANGE);
    ASSERT_CONTAINS(sl_errmsg(), "precision fp16: the gradient of step 17 is not finite even at loss scale 1");
    ASSERT_CONTAINS(sl_errmsg(), "HINT: the model's values overflow half precision (largest 65504): use precision "
                                 "bf16 or fp32");
    ASSERT_EQ(h.exchanges, 17);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
}

/* A real fp16 overflow, at the model: one dense layer 2 -> 2 with zero kernel and bias, so
 * the logits are 0 and the loss gradient for label 0 is (-0.5, 0.5); times the scale 2^18
 * that is -+131072, past half's largest (65504). fp16 rounds the backward GEMM's input to
 * infinity, so the kernel's gradient is infinite; fp32 and bf16 (2^17 is a bfloat16) give
 * exactly x_i * -+131072. The bias gradient is no GEMM: finite in every precision. */
TEST(test_fp16_overflow_in_backward) {
    const sl_precision ps[3] = {SL_PRECISION_FP32, SL_PRECISION_BF16, SL_PRECISION_FP16};
    for (int i = 0; i < 3; i++) {
        sl_layer_spec L[2] = {{.kind = SL_LAYER_INPUT, .rank = 1, .shape = {2}}, {.kind = SL_LAYER_DENSE, .units = 2}};
        sl_model_opts o = sl_model_opts_default();
        o.backend = SL_BACKEND_CPU;
        o.threads = 1;
        o.max_batch = 1;
        o.precision = ps[i];
        sl_model *m = NULL;
        ASSERT_OK(sl_model_create(L, 2, &o, &m));
        const float zero[6] = {0};
        int64_t xd[2] = {1, 2}, yd[1] = {1};
        sl_tensor x = SL_TENSOR_EMPTY, y = SL_TENSOR_EMPTY;
        sl_step_result r;
        sl_status s = sl_model_set_params(m, zero, 6);
        if (!s) s = sl_tensor_alloc(&x, SL_DT_F32, 2, xd);
        if (!s) s = sl_tensor_alloc(&y, SL_DT_I64, 1, yd);
        if (!s) {
            ((float *)x.data)[0] = 1.0f;
            ((float *)x.data)[1] = 0.5f;
            ((int64_t *)y.data)[0] = 0;
            s = sl_model_zero_grads(m);
        }
        if (!s) s = sl_model_train_step(m, &x, &y, 262144.0f, &r);
        size_t n = 0;
        float g[6];
        if (!s) memcpy(g, sl_model_grads(m, &n), sizeof g); /* CPU backend: host memory */
        sl_tensor_release(&x);
        sl_tensor_release(&y);
        sl_model_free(m);
        ASSERT_OK(s);
        ASSERT_EQ(n, 6);
        ASSERT(g[4] == -131072.0f && g[5] == 131072.0f); /* bias */
        if (ps[i] == SL_PRECISION_FP16) {
            ASSERT(isinf(g[0]) && g[0] < 0 && isinf(g[1]) && g[1] > 0);
            ASSERT(isinf(g[2]) && g[2] < 0 && isinf(g[3]) && g[3] > 0);
        } else {
            ASSERT(g[0] == -131072.0f && g[1] == 131072.0f && g[2] == -65536.0f && g[3] == 65536.0f);
        }
    }
}

/* The scale's arithmetic: halved per non-finite step, doubled after 2000 finite ones in a
 * row (a non-finite step starts the count again). */
TEST(test_loss_scale_update) {
    sl__loss_scaler ls = {.scale = SL__LOSS_SCALE_START};
    for (int i = 0; i < 1999; i++) sl__loss_scale_update(&ls, true);
    ASSERT(ls.scale == 65536.0f);
    sl__loss_scale_update(&ls, true);
    ASSERT(ls.scale == 131072.0f);
    ASSERT_EQ(ls.good, 0);
    for (int i = 0; i < 1500; i++) sl__loss_scale_update(&ls, true);
    sl__loss_scale_update(&ls, false);
    ASSERT(ls.scale == 65536.0f);
    ASSERT_EQ(ls.skipped, 1);
    for (int i = 0; i < 1999; i++) sl__loss_scale_update(&ls, true);
    ASSERT(ls.scale == 65536.0f); /* the count began again at the skip */
    sl__loss_scale_update(&ls, true);
    ASSERT(ls.scale == 131072.0f);
}

/* The model hash covers the `block` definitions the model uses: relu -> sigmoid inside a
 * block changes it (as the same change in the model block does), also in a block used inside
 * another block; reformatting, comments and blocks the model does not use do not; a
 * checkpoint of the block's other version is refused at --resume. */
static uint64_t hash_of(const char *blocks, const char *model) {
    char text[4096];
    snprintf(text, sizeof text,
             "%s%smodel m {\n%s}\ntrain {\n    model m\n    data train\n    steps 2\n    checkpoint steps=2\n"
             "    backend cpu\n    threads 1\n}\n",
             SL_TEST_POINTS_PIPELINES, blocks, model);
    sl_cfg *cfg;
    if (parse_text(text, "hash.sl", &cfg)) return 1;
    sl_train_config c;
    uint64_t h = sl_train_config_parse(cfg, &c) ? 2 : c.model_hash;
    sl_cfg_free(cfg);
    return h;
}

TEST(test_model_hash_covers_blocks) {
    const char *model = "    input 4\n    act 8\n    dense 2\n";
    const char *relu = "block act(n) {\n    dense n activation=relu\n}\n";
    uint64_t h = hash_of(relu, model);
    ASSERT(h > 2);
    ASSERT(hash_of("block act(n) {\n    dense n activation=sigmoid\n}\n", model) != h);
    ASSERT(hash_of("block act(n) {\n    dense n activation=relu\n    dense n\n}\n", model) != h);
    ASSERT(hash_of("block act(m) {\n    dense m activation=relu\n}\n", model) != h);
    /* the same statements written otherwise, and a block the model does not use */
    ASSERT_EQ(hash_of("# act\nblock   act(n)   {  dense n  activation=relu  }\n", model), h);
    char two[512];
    snprintf(two, sizeof two, "%sblock other(n) {\n    dense n activation=tanh\n}\n", relu);
    ASSERT_EQ(hash_of(two, model), h);
    /* nested: the inner block's change reaches the model through the outer one */
    const char *outer = "block outer(n) {\n    act n\n}\n";
    char a[512], b[512];
    snprintf(a, sizeof a, "%s%s", relu, outer);
    snprintf(b, sizeof b, "block act(n) {\n    dense n activation=sigmoid\n}\n%s", outer);
    const char *via = "    input 4\n    outer 8\n    dense 2\n";
    ASSERT(hash_of(a, via) != hash_of(b, via));
    ASSERT(hash_of(a, via) != h);
    /* --resume of the relu version's checkpoint with the sigmoid version: another model */
    char text[4096];
    const char *fmt = "%sblock act(n) {\n    dense n activation=%s\n}\nmodel m {\n%s}\ntrain {\n    model m\n"
                      "    data train\n    steps 2\n    checkpoint steps=2\n    backend cpu\n    threads 1\n}\n";
    char dir[400];
    snprintf(dir, sizeof dir, "%s/blockhash", tmpdir);
    for (int v = 0; v < 2; v++) {
        snprintf(text, sizeof text, fmt, SL_TEST_POINTS_PIPELINES, v ? "sigmoid" : "relu", model);
        sl_cfg *cfg;
        ASSERT_OK(parse_text(text, "blockhash.sl", &cfg));
        sl_train_opts o = sl_train_opts_default();
        o.run_dir = dir;
        o.resume = v == 1;
        sl_trainer *t = NULL;
        sl_status s = sl_trainer_create(cfg, &o, &t);
        SKIP_WITHOUT_CPU(s, cfg);
        ASSERT_OK(s);
        s = sl_trainer_run(t);
        if (v == 0) {
            ASSERT_OK(s);
        } else {
            ASSERT_EQ(s, SL_EINVAL);
            ASSERT_CONTAINS(sl_errmsg(), "checkpoint of another model");
        }
        sl_trainer_free(t);
        sl_cfg_free(cfg);
    }
}

/* on_epoch_end: called after each complete epoch, once its checkpoint is written, with the
 * epochs done and the global step; an error from it ends the run with that status, the
 * checkpoints written stay. plain_progress: the bar is redrawn after "\r" and padded with
 * blanks, never with an escape sequence (TERM=dumb). */
typedef struct {
    int calls;
    int64_t epochs[4], steps[4];
    int ckpts_at[4]; /* checkpoints in the run folder when the hook was called */
    const char *dir;
    int fail_at;     /* return SL_ECANCELED at this epoch; 0: never */
} epoch_log;

static sl_status log_epoch(void *ctx, int64_t epochs, int64_t step) {
    epoch_log *l = ctx;
    if (l->calls < 4) {
        l->epochs[l->calls] = epochs;
        l->steps[l->calls] = step;
        char **list;
        int n = sl_train_list_checkpoints(l->dir, &list);
        if (n > 0) sl_train_free_list(list, n);
        l->ckpts_at[l->calls] = n;
    }
    l->calls++;
    if (epochs == l->fail_at) return sl_err(SL_ECANCELED, "held too long");
    return SL_OK;
}

TEST(test_epoch_end_hook_and_plain_progress) {
    for (int fail_at = 0; fail_at <= 2; fail_at += 2) {
        sl_cfg *cfg = NULL;
        sl_trainer *t = NULL;
        ASSERT_OK(parse_with("    model tiny\n    data train\n    epochs 3\n    optimizer sgd lr=0.05\n"
                             "    checkpoint every=1 keep=5\n    backend cpu\n    threads 1\n    seed 1\n",
                             &cfg));
        char dir[400];
        snprintf(dir, sizeof dir, "%s/epoch_hook%d", tmpdir, fail_at);
        epoch_log l = {.dir = dir, .fail_at = fail_at};
        sl_train_opts o = sl_train_opts_default();
        o.run_dir = dir;
        o.on_epoch_end = log_epoch;
        o.ctx = &l;
        char *text = NULL;
        size_t len = 0;
        FILE *con = open_memstream(&text, &len);
        ASSERT(con);
        o.console = con;
        o.progress = o.plain_progress = true;
        sl_status s = sl_trainer_create(cfg, &o, &t);
        if (s == SL_EUNSUPPORTED) {
            fclose(con);
            free(text);
            sl_cfg_free(cfg);
            SKIP("no CPU backend in this build");
        }
        ASSERT_OK(s);
        s = sl_trainer_run(t);
        fclose(con);
        int64_t spe = sl_trainer_summary(t)->steps_per_epoch;
        ASSERT(spe > 0);
        if (fail_at) {
            ASSERT_EQ(s, SL_ECANCELED);
            ASSERT_CONTAINS(sl_errmsg(), "held too long");
            ASSERT_EQ(l.calls, 2);
        } else {
            ASSERT_OK(s);
            ASSERT_EQ(l.calls, 3);
        }
        for (int i = 0; i < l.calls && i < 3; i++) {
            ASSERT_EQ(l.epochs[i], i + 1);
            ASSERT_EQ(l.steps[i], (i + 1) * spe);
            ASSERT_EQ(l.ckpts_at[i], i + 1); /* the epoch's checkpoint is already there */
        }
        ASSERT(!strchr(text, '\033'));
        ASSERT_CONTAINS(text, "\repoch 1  batch 1  loss ");
        ASSERT_CONTAINS(text, "\repoch 2/3 [=>  ");
        free(text);
        sl_trainer_free(t);
        sl_cfg_free(cfg);
    }
}

int main(void) {
    if (sl_test_points_tmpdir("trainer", tmpdir, sizeof tmpdir)) return 1;
    RUN(test_config_defaults_and_values);
    RUN(test_config_errors);
    RUN(test_list_checkpoints);
    RUN(test_resume_bit_identical);
    RUN(test_checkpoint_load_errors);
    RUN(test_exchange_hook);
    RUN(test_replicas_leave_the_config_alone);
    RUN(test_lockstep_peer_runs_out);
    RUN(test_lockstep_peer_empty);
    RUN(test_lockstep_replies);
    RUN(test_config_strategy_ps);
    RUN(test_config_bucket_mb);
    RUN(test_stop_request);
    RUN(test_progress_line);
    RUN(test_epoch_end_hook_and_plain_progress);
    RUN(test_model_hash_covers_blocks);
    RUN(test_eval_console_lines);
    RUN(test_log_every_steps);
    RUN(test_lockstep_stop);
    RUN(test_lockstep_stop_at_epoch_end);
    RUN(test_event_runs);
    RUN(test_event_runs_keras_layout);
    RUN(test_run_dir_event_subfolders);
    RUN(test_job_run);
    RUN(test_config_smoothing_decay_exclude);
    RUN(test_model_smoothing_top5);
    RUN(test_top5_lines_and_scalars);
    RUN(test_config_precision);
    RUN(test_bf16_trains_like_fp32);
    RUN(test_fp16_loss_scale);
    RUN(test_fp16_overflow_in_backward);
    RUN(test_loss_scale_update);
    rm_rf(tmpdir);
    TEST_MAIN_END();
}
