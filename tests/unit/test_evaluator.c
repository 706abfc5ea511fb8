/* train/evaluator.c: the sidecar evaluator's watch over a run folder — a checkpoint that
 * appears is evaluated once, with the trainer's own numbers for those parameters; a damaged
 * one is skipped with a warning naming it, one gone before it was read with a note, one written before it started is passed over; only the `finished` marker of its own job ends
 * the watch; a damaged final checkpoint, a vanished folder and a wait without checkpoints
 * are errors saying so; the marker's format round trip. Data: helper_points.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "sluice/config.h"
#include "sluice/train.h"
#include "helper_points.h"
#include "train/evaluator.h"
#include "test.h"

static char tmpdir[256];

static const char CONFIG[] = SL_TEST_POINTS_PIPELINES
    "model tiny {\n    input 4\n    dense 8 activation=relu\n    batchnorm\n    dense 2\n}\n"
    "train {\n    model tiny\n    data train\n    %s\n    backend cpu\n    threads 1\n    run_dir \"run\"\n}\n";

/* the config above with `eval_line`, parsed as TMP/e.sl */
static sl_status parse(const char *eval_line, sl_cfg **cfg) {
    char name[400];
    snprintf(name, sizeof name, "%s/e.sl", tmpdir);
    FILE *f = fopen(name, "w");
    if (!f) return SL_EIO;
    fprintf(f, CONFIG, eval_line);
    fclose(f);
    return sl_cfg_parse_file(name, cfg);
}

/* everything written to f so far */
static const char *text_of(FILE *f) {
    static char buf[8192];
    fflush(f);
    long end = ftell(f);
    rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fseek(f, end, SEEK_SET);
    return buf;
}

/* the checkpoint of `step` of the trainer's model into DIR */
static sl_status save(sl_trainer *t, const char *dir, int64_t step) {
    char path[600];
    snprintf(path, sizeof path, "%s/ckpt-%09lld.safetensors", dir, (long long)step);
    const sl_train_config *c = sl_trainer_config(t);
    sl_ckpt_position pos = {.step = step, .batch = step, .model_hash = c->model_hash, .batch_size = c->batch};
    return sl_train_save_checkpoint(path, sl_trainer_model(t), NULL, c->model, "e.sl", &pos);
}

/* a copy of checkpoint `from` as `step` with one byte of its last tensor flipped */
static int damaged_copy(const char *dir, int64_t from, int64_t step) {
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/ckpt-%09lld.safetensors", dir, (long long)from);
    snprintf(b, sizeof b, "%s/ckpt-%09lld.safetensors", dir, (long long)step);
    FILE *in = fopen(a, "rb"), *out = fopen(b, "wb");
    if (!in || !out) return -1;
    static unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, in);
    buf[n - 3] ^= 0x40;
    fwrite(buf, 1, n, out);
    fclose(in);
    return fclose(out);
}

static void rm_rf(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

TEST(test_watch) {
    char dir[400];
    snprintf(dir, sizeof dir, "%s/run", tmpdir);
    rm_rf(dir);
    sl_cfg *cfg;
    ASSERT_OK(parse("eval test", &cfg));
    /* a trainer of the same config makes the checkpoints and the reference numbers */
    sl_train_opts to = sl_train_opts_default();
    to.run_dir = dir;
    sl_trainer *t;
    ASSERT_OK(sl_trainer_create(cfg, &to, &t));
    FILE *con = tmpfile(), *warn = tmpfile();
    ASSERT(con && warn);
    sl__evaluator_opts eo = {.run_dir = dir, .job_id = 0x42, .console = con, .warn = warn, .device = -1};
    sl__evaluator *ev;
    ASSERT_OK(sl__evaluator_create(cfg, &eo, &ev));
    const sl__evaluator_stats *st = sl__evaluator_stats_get(ev);
    ASSERT_STREQ(st->run_dir, dir);
    bool done = true;
    ASSERT_OK(sl__evaluator_poll(ev, &done)); /* nothing yet */
    ASSERT(!done);
    ASSERT_EQ(st->evaluated, 0);

    /* a checkpoint appears: evaluated once, with the trainer's numbers (after an epoch of
     * training: the batchnorm running stats are not the initial ones) */
    ASSERT_OK(sl_trainer_run(t));
    /* one written before the evaluator started (an hour ago) is not new: passed over */
    ASSERT_OK(save(t, dir, 3));
    char path[600];
    snprintf(path, sizeof path, "%s/ckpt-000000003.safetensors", dir);
    struct timeval past[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    ASSERT_EQ(utimes(path, past), 0);
    ASSERT_OK(sl__evaluator_poll(ev, &done));
    ASSERT_EQ(st->evaluated, 0);
    char line[600];
    snprintf(line, sizeof line, "evaluator: watching %s for the chief's checkpoints\n"
             "evaluator: passing over 1 checkpoint in %s written before it started (up to step 3)\n", dir, dir);
    ASSERT_STREQ(text_of(con), line);
    ASSERT_OK(save(t, dir, 5));
    double loss, acc;
    ASSERT_OK(sl_trainer_evaluate(t, &loss, &acc));
    ASSERT_OK(sl__evaluator_poll(ev, &done));
    ASSERT_OK(sl__evaluator_poll(ev, &done));
    ASSERT(!done);
    ASSERT_EQ(st->evaluated, 1);
    ASSERT_EQ(st->last_step, 5);
    ASSERT(st->last_accuracy == acc && st->last_loss == loss);
    snprintf(line, sizeof line, "evaluator: checkpoint step 5: loss %.4f accuracy %.4f\n", loss, acc);
    ASSERT_STREQ(strchr(strchr(text_of(con), '\n') + 1, '\n') + 1, line);

    /* a damaged one: skipped with a warning naming it */
    ASSERT_EQ(damaged_copy(dir, 5, 7), 0);
    ASSERT_OK(sl__evaluator_poll(ev, &done));
    ASSERT_EQ(st->evaluated, 1);
    ASSERT_EQ(st->skipped, 1);
    char want[600];
    snprintf(want, sizeof want, "warning: evaluator: skipping damaged checkpoint %s/ckpt-000000007.safetensors: ", dir);
    ASSERT_CONTAINS(text_of(warn), want);
    ASSERT_CONTAINS(text_of(warn), "checksum");
    /* one gone between the listing and the read (a dangling link reads as removed): a note */
    snprintf(path, sizeof path, "%s/ckpt-000000008.safetensors", dir);
    ASSERT_EQ(symlink("nowhere", path), 0);
    ASSERT_OK(sl__evaluator_poll(ev, &done));
    ASSERT_EQ(st->evaluated, 1);
    ASSERT_EQ(st->skipped, 2);
    snprintf(want, sizeof want, "evaluator: checkpoint %s was removed (keep=) before it could be read: skipped\n", path);
    ASSERT_CONTAINS(text_of(warn), want);

    /* another job's marker does not end the watch; its own does */
    ASSERT_OK(save(t, dir, 9));
    ASSERT_OK(sl__run_finished_write(dir, 0x43, 9));
    ASSERT_OK(sl__evaluator_poll(ev, &done));
    ASSERT(!done);
    ASSERT_EQ(st->evaluated, 2);
    ASSERT_OK(sl__run_finished_write(dir, 0x42, 9));
    ASSERT_OK(sl__evaluator_poll(ev, &done));
    ASSERT(done);
    ASSERT_EQ(st->evaluated, 2);
    ASSERT_EQ(st->last_step, 9);

    /* a final checkpoint that is damaged is an error naming its step */
    ASSERT_EQ(damaged_copy(dir, 9, 11), 0);
    ASSERT_OK(sl__run_finished_write(dir, 0x42, 11));
    ASSERT_EQ(sl__evaluator_poll(ev, &done), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "evaluator: the final checkpoint (step 11) is damaged: ");

    /* the folder removed */
    rm_rf(dir);
    ASSERT_EQ(sl__evaluator_poll(ev, &done), SL_ENOTFOUND);
    snprintf(want, sizeof want, "evaluator: the run folder %s is gone", dir);
    ASSERT_CONTAINS(sl_errmsg(), want);
    sl__evaluator_free(ev);

    /* run: no checkpoint comes within wait_s */
    eo.wait_s = 0.3;
    eo.poll_s = 0.05;
    ASSERT_OK(sl__evaluator_create(cfg, &eo, &ev));
    ASSERT_EQ(sl__evaluator_run(ev), SL_ETIMEDOUT);
    snprintf(want, sizeof want, "evaluator: no checkpoint in %s after 0 s", dir);
    ASSERT_CONTAINS(sl_errmsg(), want);
    /* and a stop request ends it at once */
    volatile sig_atomic_t stop = 15;
    sl__evaluator_free(ev);
    eo.stop = &stop;
    ASSERT_OK(sl__evaluator_create(cfg, &eo, &ev));
    ASSERT_OK(sl__evaluator_run(ev));
    ASSERT(sl__evaluator_stats_get(ev)->stopped);
    ASSERT_EQ(sl__evaluator_stats_get(ev)->stop_value, 15);
    sl__evaluator_free(ev);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    fclose(con);
    fclose(warn);
}

TEST(test_marker) {
    char dir[400], path[500];
    snprintf(dir, sizeof dir, "%s/marker", tmpdir);
    mkdir(dir, 0777);
    uint64_t job = 0;
    int64_t step = 0;
    ASSERT(!sl__run_finished_read(dir, &job, &step));
    ASSERT_OK(sl__run_finished_write(dir, 0xabcdef0123456789ULL, 936));
    ASSERT(sl__run_finished_read(dir, &job, &step));
    ASSERT_U64(job, 0xabcdef0123456789ULL);
    ASSERT_EQ(step, 936);
    snprintf(path, sizeof path, "%s/finished", dir);
    FILE *f = fopen(path, "r");
    char line[100] = "";
    ASSERT(f && fgets(line, sizeof line, f));
    fclose(f);
    ASSERT_STREQ(line, "job abcdef0123456789 step 936\n");
    static const char *const bad[] = {"job 12 step 5", "job zz step 5\n", "step 5\n", "job 12 step -1\n",
                                      "job 12 step 5x\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ASSERT((f = fopen(path, "w")));
        fputs(bad[i], f);
        fclose(f);
        ASSERT(!sl__run_finished_read(dir, &job, &step));
    }
    /* more than the 127 bytes of a marker, or not a regular file: no marker, at once */
    ASSERT((f = fopen(path, "w")));
    fprintf(f, "job 12 step 5\n%0200d\n", 0);
    fclose(f);
    ASSERT(!sl__run_finished_read(dir, &job, &step));
    ASSERT_OK(sl__run_finished_clear(dir));
    ASSERT_EQ(mkfifo(path, 0600), 0);
    ASSERT(!sl__run_finished_read(dir, &job, &step)); /* a blocking open would hang here */
    ASSERT_OK(sl__run_finished_clear(dir));
    /* the parser alone: the line, what follows it ignored; cut anywhere it is refused */
    const char text[] = "job 00000000000000ff step 4680\nrest";
    ASSERT(sl__run_finished_parse(text, sizeof text - 1, &job, &step));
    ASSERT_U64(job, 0xff);
    ASSERT_EQ(step, 4680);
    for (size_t cut = 0; cut < 31; cut++) ASSERT(!sl__run_finished_parse(text, cut, &job, &step));
    ASSERT_OK(sl__run_finished_clear(dir));
    ASSERT(access(path, F_OK) != 0);
    ASSERT_OK(sl__run_finished_clear(dir)); /* none: fine */
    snprintf(path, sizeof path, "%s/nowhere", dir);
    ASSERT_EQ(sl__run_finished_write(path, 1, 1), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "cannot create ");
}

TEST(test_no_eval_pipeline) {
    sl_cfg *cfg;
    ASSERT_OK(parse("eval none", &cfg));
    sl__evaluator_opts eo = {.device = -1};
    sl__evaluator *ev = (sl__evaluator *)1;
    ASSERT_EQ(sl__evaluator_create(cfg, &eo, &ev), SL_EINVAL);
    ASSERT(ev == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "evaluator: the train block has no eval pipeline (`eval none`)");
    sl_cfg_free(cfg);
}

int main(void) {
    if (sl_test_points_tmpdir("evaluator", tmpdir, sizeof tmpdir)) return 1;
    RUN(test_watch);
    RUN(test_marker);
    RUN(test_no_eval_pipeline);
    rm_rf(tmpdir);
    TEST_MAIN_END();
}
