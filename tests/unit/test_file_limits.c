/* A file-size limit (RLIMIT_FSIZE, the shell's `ulimit -f`) is a write error like a full
 * disk, in every writer of the library: the TFRecord writer, TensorBoard event files,
 * safetensors files and the trainer's checkpoints, stats files and traces, idx files, file
 * caches (a warning: the pass goes on from its input), CURVE key files, the ring strategy's
 * hash log, the run's `finished` marker and the evaluator's event file. Each test runs
 * in a forked child that ignores SIGXFSZ (at its default the kernel kills the process at
 * the limit) and sets the limit after its setup; the writer must return SL_EIO with
 * "PATH: write failed at byte LIMIT: File too large" (or, for stats and traces, "PATH:
 * cannot write ...: File too large (write failed at byte LIMIT)") and a hint naming the
 * limit in bytes, leave no temporary file, and leave an older file of that name as it was.
 * The limits fall inside a write(2), so each write first writes part (a short write) and
 * the next one fails: the offsets are the limits exactly. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sluice/cluster.h"
#include "sluice/config.h"
#include "sluice/idx.h"
#include "sluice/model.h"
#include "sluice/pipeline.h"
#include "sluice/safetensors.h"
#include "sluice/stats.h"
#include "sluice/strategy.h"
#include "sluice/tfevents.h"
#include "sluice/tfrecord.h"
#include "sluice/train.h"
#include "sluice/transport.h"
#include "helper_files.h"
#include "helper_iter.h"
#include "helper_points.h"
#include "train/evaluator.h"
#include "test.h"

/* libzmq is not built with ThreadSanitizer (tests/integration/tsan_zmq.supp) */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) { return "called_from_lib:libzmq.so\nrace:libzmq.so\n"; }

/* A test body: DIR is a new folder for its files, PATH = DIR/FILE (the FILE in_child was
 * given). */
typedef void (*body_fn)(const char *dir, const char *path);

/* Runs test body FN in a child with SIGXFSZ ignored, in a new folder /tmp/sluice-fsz-XXXXXX
 * that is removed after it; the test fails with the child. */
static void in_child(body_fn fn, const char *name, const char *file) {
    char dir[256], path[300];
    if (!sl_test_mkdtemp(dir, sizeof dir, "sluice-fsz")) {
        FAILF("mkdtemp: %s", strerror(errno));
        return;
    }
    snprintf(path, sizeof path, "%s/%s", dir, file);
    fflush(stdout);
    pid_t p = fork();
    if (p < 0) {
        FAILF("fork: %s", strerror(errno));
        sl_test_rm_rf(dir);
        return;
    }
    if (p == 0) {
        signal(SIGXFSZ, SIG_IGN);
        t_cur_failed = 0;
        fn(dir, path);
        fflush(stdout);
        _exit(t_cur_failed ? 1 : 0);
    }
    int st;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {
    }
    sl_test_rm_rf(dir);
    if (WIFSIGNALED(st)) FAILF("%s: killed by signal %d", name, WTERMSIG(st));
    else if (WEXITSTATUS(st) != 0) FAILF("%s failed (exit %d)", name, WEXITSTATUS(st));
}

/* From here on, writes past `bytes` fail with EFBIG. */
static int limit_to(rlim_t bytes) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) != 0) return -1;
    rl.rlim_cur = bytes;
    return setrlimit(RLIMIT_FSIZE, &rl);
}

static long long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* The entries of dir whose name contains `part` */
static int count_named(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strstr(de->d_name, part)) n++;
    closedir(d);
    return n;
}

/* The message's first line, then the hint that names the limit */
static int check_msg(const char *first_line, unsigned long long limit) {
    char hint[200];
    snprintf(hint, sizeof hint, "\n---> HINT: a file-size limit (ulimit -f) stops writes past %llu bytes", limit);
    if (strcmp(sl_test_errmsg_line(), first_line) != 0) {
        printf("  message:  \"%s\"\n  expected: \"%s\"\n", sl_errmsg(), first_line);
        return 0;
    }
    if (!strstr(sl_errmsg(), hint)) {
        printf("  message \"%s\" has no hint \"%s\"\n", sl_errmsg(), hint + 1);
        return 0;
    }
    return 1;
}

/* check_msg for the usual first line: "PATH: write failed at byte LIMIT: File too large" */
static int check_write(const char *path, unsigned long long limit) {
    char want[600];
    snprintf(want, sizeof want, "%s: write failed at byte %llu: File too large", path, limit);
    return check_msg(want, limit);
}

static void fill_noise(uint8_t *p, size_t n) {
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (uint8_t)(x >> 24);
    }
}

/* ---- TFRecord writer ---- */

static void tfrecord_body(const char *dir, const char *path) {
    uint8_t rec[200], *big = malloc(1 << 19);
    ASSERT(big);
    fill_noise(rec, sizeof rec);
    fill_noise(big, 1 << 19);
    ASSERT_EQ(limit_to(1000), 0);
    /* buffered records: the error comes at the close, which wrote what fitted */
    sl_tfr_writer *w;
    ASSERT_OK(sl_tfr_writer_open(path, NULL, &w));
    for (int i = 0; i < 10; i++) ASSERT_OK(sl_tfr_writer_write(w, rec, sizeof rec));
    ASSERT_EQ(sl_tfr_writer_close(w), SL_EIO);
    ASSERT(check_write(path, 1000));
    ASSERT_EQ(file_size(path), 1000);
    /* a record larger than the buffer is written at once: the error comes at once */
    ASSERT_OK(sl_tfr_writer_open(path, NULL, &w));
    ASSERT_EQ(sl_tfr_writer_write(w, big, 1 << 19), SL_EIO);
    ASSERT(check_write(path, 1000));
    ASSERT_EQ(sl_tfr_writer_write(w, rec, 1), SL_EIO); /* and again */
    ASSERT_EQ(sl_tfr_writer_close(w), SL_EIO);
    ASSERT(check_write(path, 1000));
    /* through deflate */
    sl_tfr_write_opts o = sl_tfr_write_opts_default();
    o.compression = SL_COMP_GZIP;
    ASSERT_OK(sl_tfr_writer_open(path, &o, &w));
    ASSERT_OK(sl_tfr_writer_write(w, big, 20000));
    ASSERT_EQ(sl_tfr_writer_close(w), SL_EIO);
    ASSERT(check_write(path, 1000));
    free(big);
}
TEST(test_tfrecord_writer) { in_child(tfrecord_body, "test_tfrecord_writer", "a.tfrecord"); }

/* ---- TensorBoard events ---- */

static void tfevents_body(const char *dir, const char *unused) {
    (void)unused; /* the writer names its file */
    sl_tfev_writer *w;
    ASSERT_OK(sl_tfev_open(dir, 1700000000.0, &w));
    const char *path = sl_tfev_path(w);
    long long before = file_size(path); /* the version record */
    ASSERT(before > 0 && before < 300);
    ASSERT_EQ(limit_to(300), 0);
    for (int i = 0; i < 20; i++) ASSERT_OK(sl_tfev_add_scalar(w, "loss", i + 1, 0.5f, 1700000001.0));
    ASSERT_EQ(sl_tfev_flush(w), SL_EIO);
    ASSERT(check_write(path, 300));
    /* the events of the failed flush are taken back whole: the file ends on a record */
    ASSERT_EQ(file_size(path), before);
    ASSERT_EQ(sl_tfev_add_scalar(w, "loss", 30, 0.5f, 0), SL_EIO);
    char saved[300];
    snprintf(saved, sizeof saved, "%s", path);
    ASSERT_EQ(sl_tfev_close(w), SL_EIO);
    ASSERT(check_write(saved, 300));
    sl_tfev_reader *r;
    ASSERT_OK(sl_tfev_reader_open(saved, &r));
    sl_tfev_event ev;
    ASSERT_OK(sl_tfev_reader_next(r, &ev));
    ASSERT_EQ(ev.kind, SL_TFEV_VERSION);
    ASSERT_EQ(sl_tfev_reader_next(r, &ev), SL_END);
    sl_tfev_reader_close(r);
}
TEST(test_tfevents_writer) { in_child(tfevents_body, "test_tfevents_writer", "events"); }

/* ---- safetensors ---- */

static sl_status write_st(const char *path, float v, const char *gen) {
    static float data[1000];
    for (int i = 0; i < 1000; i++) data[i] = v;
    sl_st_writer *w;
    int64_t dims = 1000;
    sl_status s = sl_st_writer_new(&w);
    if (s) return s;
    sl_st_writer_set_checksums(w, true);
    if (!(s = sl_st_writer_add(w, "x", SL_DT_F32, 1, &dims, data)) && !(s = sl_st_writer_set_meta(w, "gen", gen)))
        s = sl_st_writer_write(w, path);
    sl_st_writer_free(w);
    return s;
}

static void safetensors_body(const char *dir, const char *path) {
    ASSERT_OK(write_st(path, 1.0f, "old"));
    ASSERT(file_size(path) > 4000);
    ASSERT_EQ(limit_to(3000), 0);
    ASSERT_EQ(write_st(path, 2.0f, "new"), SL_EIO);
    ASSERT(check_write(path, 3000));
    ASSERT_EQ(sl_test_count_files(dir), 1); /* no PATH.tmp.* */
    sl_st_file *f;
    ASSERT_OK(sl_st_open(path, &f));
    ASSERT_OK(sl_st_verify(f, NULL));
    ASSERT_STREQ(sl_st_meta(f, "gen"), "old");
    sl_st_close(f);
}
TEST(test_safetensors_writer) { in_child(safetensors_body, "test_safetensors_writer", "m.safetensors"); }

/* ---- the trainer's checkpoints ---- */

static const char CONFIG[] =
    SL_TEST_POINTS_PIPELINES
    "model m {\n    input 4\n    dense 64 activation=relu\n    dense 2\n}\n"
    "train {\n    model m\n    data train\n    eval none\n    steps 10\n"
    "    optimizer adam lr=0.01\n    schedule constant\n"
    "    checkpoint steps=5 keep=1\n    backend cpu\n    threads 1\n    seed 3\n}\n";

static sl_status train(const char *dir, bool resume, const char *set1) {
    char name[400], run[400];
    snprintf(name, sizeof name, "%s/t.sl", dir);
    snprintf(run, sizeof run, "%s/run", dir);
    sl_cfg *cfg = NULL;
    sl_trainer *t = NULL;
    sl_status s = sl_test_write_text(name, CONFIG) ? SL_EIO : sl_cfg_parse_file(name, &cfg);
    if (!s && set1) s = sl_cfg_set(cfg, set1);
    sl_train_opts o = sl_train_opts_default();
    o.run_dir = run;
    o.resume = resume;
    if (!s) s = sl_trainer_create(cfg, &o, &t);
    if (!s) s = sl_trainer_run(t);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    return s;
}

static void checkpoint_body(const char *dir, const char *run) {
    char old[400], want[500];
    if (sl_test_write_points(dir)) {
        FAILF("no data: %s", sl_errmsg());
        return;
    }
    ASSERT_OK(train(dir, false, NULL)); /* ckpt-5 removed (keep=1), ckpt-10 kept */
    snprintf(old, sizeof old, "%s/ckpt-000000010.safetensors", run);
    size_t n0;
    uint8_t *before = sl_test_read_file(old, &n0);
    ASSERT(before && n0 > 4096);
    ASSERT_EQ(limit_to(4096), 0);
    ASSERT_EQ(train(dir, true, "train.steps=20"), SL_EIO);
    snprintf(want, sizeof want, "%s/ckpt-000000015.safetensors", run);
    ASSERT(check_write(want, 4096));
    ASSERT_EQ(count_named(run, ".tmp"), 0);
    ASSERT_EQ(count_named(run, "ckpt-"), 1);
    size_t n1;
    uint8_t *after = sl_test_read_file(old, &n1);
    ASSERT(after);
    ASSERT_EQ(n1, n0);
    ASSERT_MEMEQ(after, before, n0);
    sl_ckpt_position pos;
    ASSERT_OK(sl_train_check_checkpoint(old, NULL, &pos));
    ASSERT_EQ(pos.step, 10);
    free(before);
    free(after);
}
TEST(test_checkpoint) { in_child(checkpoint_body, "test_checkpoint", "run"); }

/* ---- stats and traces ---- */

static void stats_body(const char *dir, const char *path) {
    char tmp[320], want[500];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ASSERT_EQ(sl_test_write_text(path, "old\n"), 0);
    sl_op_stat ops[4] = {{0}};
    for (int i = 0; i < 4; i++) {
        snprintf(ops[i].label, sizeof ops[i].label, "op%d", i);
        snprintf(ops[i].op, sizeof ops[i].op, "map");
    }
    sl_stats st = {.n = 4, .ops = ops};
    ASSERT_EQ(limit_to(100), 0);
    ASSERT_EQ(sl_stats_save(&st, path), SL_EIO);
    snprintf(want, sizeof want, "%s: cannot write stats: File too large (write failed at byte 100)", path);
    ASSERT(check_msg(want, 100));
    ASSERT_EQ(file_size(tmp), -1);
    size_t n;
    char *got = (char *)sl_test_read_file(path, &n);
    ASSERT(got);
    ASSERT_STREQ(got, "old\n");
    free(got);
}
TEST(test_stats_save) { in_child(stats_body, "test_stats_save", "s.json"); }

static void trace_body(const char *dir, const char *path) {
    char want[500];
    sl_dataset *r;
    ASSERT_OK(sl_ds_range(0, 100, 1, &r));
    sl_iter *it;
    ASSERT_OK(sl_iter_create(r, NULL, &it));
    ASSERT_OK(sl_iter_trace(it, path, 0));
    sl_element e;
    sl_element_init(&e);
    for (int i = 0; i < 50; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        sl_element_clear(&e);
    }
    ASSERT_EQ(limit_to(500), 0);
    ASSERT_EQ(sl_iter_trace_end(it), SL_EIO);
    snprintf(want, sizeof want, "%s: cannot write the trace: File too large (write failed at byte 500)", path);
    ASSERT(check_msg(want, 500));
    ASSERT_EQ(file_size(path), -1); /* a cut-off trace does not parse: removed */
    /* sl_iter_trace_write: the same */
    ASSERT_EQ(sl_iter_trace_write(it, path), SL_EIO);
    ASSERT(check_msg(want, 500));
    ASSERT_EQ(file_size(path), -1);
    sl_iter_close(it);
    sl_dataset_unref(r);
}
TEST(test_trace) { in_child(trace_body, "test_trace", "t.json"); }

/* ---- idx files ---- */

static void idx_body(const char *dir, const char *path) {
    sl_tensor t, old;
    int64_t dims[1] = {3000};
    ASSERT_OK(sl_tensor_alloc(&t, SL_DT_U8, 1, dims));
    fill_noise(t.data, 3000); /* noise: gzip cannot make it smaller than the limit */
    dims[0] = 5;
    ASSERT_OK(sl_tensor_alloc(&old, SL_DT_U8, 1, dims));
    memcpy(old.data, "older", 5);
    ASSERT_OK(sl_idx_write(path, &old, false));
    ASSERT_EQ(limit_to(1000), 0);
    for (int gz = 0; gz < 2; gz++) {
        ASSERT_EQ(sl_idx_write(path, &t, gz), SL_EIO);
        ASSERT(check_write(path, 1000));
        /* no temporary file, and the older file as it was */
        ASSERT_EQ(sl_test_count_files(dir), 1);
        sl_tensor back;
        ASSERT_OK(sl_idx_read(path, &back));
        ASSERT_EQ(back.dims[0], 5);
        ASSERT_MEMEQ(back.data, "older", 5);
        sl_tensor_release(&back);
    }
    sl_tensor_release(&t);
    sl_tensor_release(&old);
}
TEST(test_idx_write) { in_child(idx_body, "test_idx_write", "x.idx"); }

/* ---- a file cache: the pass goes on from its input, with a warning; nothing is left ---- */

/* One pass over DS, whose values must be 0..n-1 in order: returns n when they are, -1 when
 * the pass failed or had another length, -2 - k when value k was wrong. */
static int64_t pass_values(sl_dataset *ds, int64_t n) {
    int64_t *v = malloc(sizeof *v * (size_t)n), k = 0;
    int got = v ? sl_test_values(ds, NULL, v, (int)n) : -1;
    while (got == n && k < n && v[k] == k) k++;
    free(v);
    return got != n ? -1 : k == n ? n : -2 - k;
}

static void cache_body(const char *dir, const char *path) {
    char logp[300], want[800];
    /* the warning goes to stderr: into a file here (a few hundred bytes, under the limit) */
    snprintf(logp, sizeof logp, "%s/stderr.txt", dir);
    FILE *log = freopen(logp, "w", stderr);
    ASSERT(log);
    setvbuf(stderr, NULL, _IONBF, 0);
    sl_dataset *r, *c;
    ASSERT_OK(sl_ds_range(0, 2000, 1, &r)); /* about 64 bytes an entry: 128 KB in all */
    ASSERT_OK(sl_ds_cache(r, path, &c));
    sl_dataset_unref(r); /* the cache holds it */
    ASSERT_EQ(limit_to(5000), 0);
    sl_err(SL_EINVAL, "an earlier error");
    ASSERT_EQ(pass_values(c, 2000), 2000);
    ASSERT_STREQ(sl_errmsg(), "an earlier error"); /* a pass that succeeds leaves it alone */
    /* neither the cache nor its temporary file: the next pass reads the input again */
    ASSERT_EQ(file_size(path), -1);
    ASSERT_EQ(sl_test_count_files(dir), 1);
    size_t n;
    char *got = (char *)sl_test_read_file(logp, &n);
    ASSERT(got);
    snprintf(want, sizeof want, "sluice warning: op 'cache': not caching to %s, this pass goes on uncached: %s.tmp.%ld.0: "
             "write failed at byte 5000: File too large\n---> HINT: a file-size limit (ulimit -f) stops writes past "
             "5000 bytes: raise it (ulimit -f unlimited) or write less\n", path, path, (long)getpid());
    if (strcmp(got, want) != 0) FAILF("stderr:\n%s\nexpected:\n%s", got, want);
    free(got);
    /* with the limit raised, the next pass writes the cache and the one after replays it */
    ASSERT_EQ(limit_to(RLIM_INFINITY), 0);
    ASSERT_EQ(pass_values(c, 2000), 2000);
    ASSERT(file_size(path) > 5000);
    ASSERT_EQ(pass_values(c, 2000), 2000);
    sl_dataset_unref(c);
}
TEST(test_cache_file) { in_child(cache_body, "test_cache_file", "c.cache"); }

/* ---- CURVE key files ---- */

static void keygen_body(const char *dir, const char *base) {
    char key[320], pub[320];
    snprintf(key, sizeof key, "%s.key", base);
    snprintf(pub, sizeof pub, "%s.pub", base);
    sl_status s = sl_curve_keygen(base);
    if (s == SL_EUNSUPPORTED) SKIP("libzmq has no CURVE");
    ASSERT_OK(s);
    size_t nk, np;
    uint8_t *k0 = sl_test_read_file(key, &nk), *p0 = sl_test_read_file(pub, &np);
    ASSERT(k0 && p0 && nk > 200 && np < 200);
    ASSERT_EQ(limit_to(200), 0);
    ASSERT_EQ(sl_curve_keygen(base), SL_EIO);
    ASSERT(check_write(key, 200));
    /* the older pair as it was (a new .key beside the old .pub would not match it) */
    ASSERT_EQ(sl_test_count_files(dir), 2);
    size_t nk1, np1;
    uint8_t *k1 = sl_test_read_file(key, &nk1), *p1 = sl_test_read_file(pub, &np1);
    ASSERT(k1 && p1 && nk1 == nk && np1 == np);
    ASSERT_MEMEQ(k1, k0, nk);
    ASSERT_MEMEQ(p1, p0, np);
    /* none before: none after */
    ASSERT_EQ(unlink(key), 0);
    ASSERT_EQ(unlink(pub), 0);
    ASSERT_EQ(sl_curve_keygen(base), SL_EIO);
    ASSERT(check_write(key, 200));
    ASSERT_EQ(sl_test_count_files(dir), 0);
    free(k0);
    free(p0);
    free(k1);
    free(p1);
}
TEST(test_curve_keygen) { in_child(keygen_body, "test_curve_keygen", "k"); }

/* ---- the ring strategy's hash log ---- */

/* Rank 0 of two whose peer never comes (port 1: nothing listens there, nothing is bound):
 * the exchange of step 0 logs the hash first, so it fails on the log before any message. */
static void hash_log_body(const char *dir, const char *path) {
    static const char MODEL[] = "model m {\n  input 4\n  dense 3\n}\n";
    sl_cfg *cfg;
    sl_model *m;
    ASSERT_OK(sl_cfg_parse(MODEL, strlen(MODEL), "m.sl", &cfg));
    sl_model_opts mo = sl_model_opts_default();
    mo.backend = SL_BACKEND_CPU;
    mo.threads = 1;
    ASSERT_OK(sl_model_from_config(cfg, "m", &mo, &m));
    const char *addrs[2] = {"127.0.0.1:0", "127.0.0.1:1"};
    sl_cluster c;
    memset(&c, 0, sizeof c);
    c.world = 2;
    c.ring_addrs = addrs;
    c.job_id = 1;
    FILE *log = fopen(path, "w");
    ASSERT(log);
    /* the transport path: rank 1 never exists, and creating the ring must not wait for it */
    sl_strategy_ring_opts ro = {.timeout_s = 2, .hash_log = log, .hash_log_name = path,
                                .ring = {.path = SL_RING_PATH_TCP}};
    sl_train_hooks h;
    sl_strategy_ring *s;
    ASSERT_OK(sl_strategy_ring_create(&c, &ro, &h, &s));
    ASSERT_EQ(limit_to(10), 0); /* a line is 31 bytes */
    sl_step rec = {.phase = SL_STEP_TRAIN, .model = m, .lr = 0.1f, .loss_scale = 1, .holds_next = true};
    rec.grads = sl_model_grads(m, &rec.n);
    sl_step_reply reply;
    sl_status st = h.exchange(h.ctx, &rec, &reply);
    ASSERT_EQ(st, SL_EIO);
    ASSERT(check_write(path, 10));
    ASSERT_OK(h.finish(h.ctx, st));
    sl_strategy_ring_free(s);
    fclose(log);
    ASSERT_EQ(file_size(path), 10);
    sl_model_free(m);
    sl_cfg_free(cfg);
}
TEST(test_hash_log) { in_child(hash_log_body, "test_hash_log", "h.0"); }

/* ---- the evaluator: the run marker, its event file ---- */

static void marker_body(const char *dir, const char *path) {
    ASSERT_OK(sl__run_finished_write(dir, 0x41, 5));
    ASSERT_EQ(limit_to(10), 0); /* the line is 28 bytes */
    ASSERT_EQ(sl__run_finished_write(dir, 0x42, 9), SL_EIO);
    ASSERT(check_write(path, 10));
    ASSERT_EQ(sl_test_count_files(dir), 1); /* no finished.tmp.* */
    uint64_t job;
    int64_t step;
    ASSERT(sl__run_finished_read(dir, &job, &step));
    ASSERT_EQ(job, 0x41);
    ASSERT_EQ(step, 5);
}
TEST(test_run_marker) { in_child(marker_body, "test_run_marker", "finished"); }

static const char EVAL_CONFIG[] =
    SL_TEST_POINTS_PIPELINES
    SL_TEST_POINTS_MODEL("m")
    "train {\n    model m\n    data train\n    eval test\n    backend cpu\n    threads 1\n}\n";

static void evaluator_body(const char *dir, const char *name) {
    char run[400], ckpt[500], evdir[500];
    if (sl_test_write_points(dir)) {
        FAILF("no data: %s", sl_errmsg());
        return;
    }
    snprintf(run, sizeof run, "%s/run", dir);
    snprintf(evdir, sizeof evdir, "%s/eval", run);
    ASSERT_EQ(mkdir(run, 0755), 0);
    sl_cfg *cfg;
    ASSERT_EQ(sl_test_write_text(name, EVAL_CONFIG), 0);
    ASSERT_OK(sl_cfg_parse_file(name, &cfg));
    sl_train_opts to = sl_train_opts_default();
    to.run_dir = run;
    sl_trainer *t;
    ASSERT_OK(sl_trainer_create(cfg, &to, &t));
    FILE *con = tmpfile();
    ASSERT(con);
    sl__evaluator_opts eo = {.run_dir = run, .job_id = 1, .console = con, .warn = con, .device = -1};
    sl__evaluator *ev;
    ASSERT_OK(sl__evaluator_create(cfg, &eo, &ev));
    snprintf(ckpt, sizeof ckpt, "%s/ckpt-000000005.safetensors", run);
    const sl_train_config *c = sl_trainer_config(t);
    sl_ckpt_position pos = {.step = 5, .batch = 5, .model_hash = c->model_hash, .batch_size = c->batch};
    ASSERT_OK(sl_train_save_checkpoint(ckpt, sl_trainer_model(t), NULL, c->model, "e.sl", &pos));
    /* newer than the evaluator for sure: file times tick coarser than its clock */
    struct timeval later[2] = {{time(NULL) + 60, 0}, {time(NULL) + 60, 0}};
    ASSERT_EQ(utimes(ckpt, later), 0);
    ASSERT_EQ(limit_to(20), 0); /* the event file's version record is longer */
    bool done;
    ASSERT_EQ(sl__evaluator_poll(ev, &done), SL_EIO);
    char first[600];
    snprintf(first, sizeof first, "%s", sl_test_errmsg_line());
    char head[600];
    snprintf(head, sizeof head, "evaluator: %s/events.out.tfevents.", evdir);
    if (strncmp(first, head, strlen(head)) != 0 || !strstr(first, ": write failed at byte 20: File too large"))
        FAILF("message \"%s\": expected \"%s...: write failed at byte 20: File too large\"", first, head);
    ASSERT(strstr(sl_errmsg(), "\n---> HINT: a file-size limit (ulimit -f) stops writes past 20 bytes"));
    ASSERT_EQ(sl_test_count_files(evdir), 0); /* the event file that could not start is removed */
    sl__evaluator_free(ev);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    fclose(con);
}
TEST(test_evaluator_events) { in_child(evaluator_body, "test_evaluator_events", "e.sl"); }

int main(void) {
    RUN(test_tfrecord_writer);
    RUN(test_tfevents_writer);
    RUN(test_safetensors_writer);
    RUN(test_checkpoint);
    RUN(test_stats_save);
    RUN(test_trace);
    RUN(test_idx_write);
    RUN(test_cache_file);
    RUN(test_curve_keygen);
    RUN(test_hash_log);
    RUN(test_run_marker);
    RUN(test_evaluator_events);
    TEST_MAIN_END();
}
