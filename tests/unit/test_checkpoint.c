/* train/checkpoint.c and the checkpoint parts of train/trainer.c: checkpoints that prove
 * their own integrity (CRC32C checksums, consistent metadata, finite values), --resume
 * skipping damaged ones (naming them) down to an older good one, failing when none is
 * loadable, FIFOs and folders named like checkpoints, run folders of another run (refused,
 * or removed with overwrite; a failed removal is an error), and the message for a
 * non-finite loss right after a resume. `test_checkpoint --write-seeds DIR` writes the fuzz
 * seeds (tests/fuzz/seeds/checkpoint/). Data: the synthetic TFRecord file of
 * test_trainer.c (two classes of 4-float points) in a temporary folder. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sluice/config.h"
#include "sluice/example.h"
#include "sluice/safetensors.h"
#include "sluice/tfrecord.h"
#include "sluice/train.h"
#include "train/internal.h"
#include "helper_files.h"
#include "helper_points.h"
#include "test.h"

static char tmpdir[256];

static int write_data(void) { return sl_test_write_points(tmpdir); }

static const char CONFIG[] =
    SL_TEST_POINTS_PIPELINES
    SL_TEST_POINTS_MODEL("tiny")
    "train {\n"
    "    model tiny\n    data train\n    eval test\n    steps 20\n"
    "    optimizer adam lr=0.05\n    schedule constant\n"
    "    checkpoint steps=5 keep=0\n    backend cpu\n    threads 1\n    seed 3\n"
    "}\n";

static bool no_backend;

/* A trainer over CONFIG (+ --set overrides) in TMP/run. */
static sl_status trainer(const char *run, bool resume, bool overwrite, const char *set1, sl_cfg **cfg,
                         sl_trainer **t) {
    char name[400], dir[400];
    snprintf(name, sizeof name, "%s/t.sl", tmpdir);
    FILE *f = fopen(name, "w");
    if (!f) return SL_EIO;
    fputs(CONFIG, f);
    fclose(f);
    sl_status s = sl_cfg_parse_file(name, cfg);
    if (!s && set1) s = sl_cfg_set(*cfg, set1);
    if (s) return s;
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, run);
    sl_train_opts o = sl_train_opts_default();
    o.run_dir = dir;
    o.resume = resume;
    o.overwrite = overwrite;
    s = sl_trainer_create(*cfg, &o, t);
    if (s == SL_EUNSUPPORTED) no_backend = true;
    return s;
}

/* Train CONFIG (steps 20, a checkpoint every 5 steps) into TMP/run. */
static sl_status train_run(const char *run, const char *set1) {
    sl_cfg *cfg = NULL;
    sl_trainer *t = NULL;
    sl_status s = trainer(run, false, false, set1, &cfg, &t);
    if (!s) s = sl_trainer_run(t);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    return s;
}

/* TMP/name, in one of four static buffers (the fifth call reuses the first) */
static const char *in_tmp(const char *name) {
    static char p[4][600];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

static char *ckpt(const char *run, int step) {
    static char p[4][600];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s/ckpt-%09d.safetensors", tmpdir, run, step);
    return p[k];
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The file offset of tensor `name`'s data in a safetensors file. */
static int64_t data_offset(const char *path, const char *name) {
    size_t n;
    uint8_t *p = sl_test_read_file(path, &n);
    if (!p) return -1;
    uint64_t hl = le64(p);
    char key[300];
    snprintf(key, sizeof key, "\"%s\":{", name);
    p[8 + hl - 1] = 0;
    char *at = strstr((char *)p + 8, key);
    char *offs = at ? strstr(at, "\"data_offsets\":[") : NULL;
    int64_t r = offs ? 8 + (int64_t)hl + strtoll(offs + 16, NULL, 10) : -1;
    free(p);
    return r;
}

/* Rewrite the checkpoint src as dst through the safetensors writer with metadata key = value
 * (value NULL: drop the key; key NULL: no change), with or without checksums: a file whose
 * checksums agree with edited metadata, or an old-style one. */
static sl_status rewrite(const char *src, const char *dst, const char *key, const char *value, bool checksums) {
    sl_st_file *f;
    sl_st_writer *w;
    sl_status s = sl_st_open(src, &f);
    if (s) return s;
    if ((s = sl_st_writer_new(&w))) return s;
    sl_st_writer_set_checksums(w, checksums);
    sl_tensor ts[16];
    int nt = sl_st_count(f);
    for (int i = 0; i < nt && i < 16; i++) {
        ts[i] = SL_TENSOR_EMPTY;
        if (!s) s = sl_st_get(f, sl_st_name(f, i), &ts[i]);
        if (!s) s = sl_st_writer_add_tensor(w, sl_st_name(f, i), &ts[i]);
    }
    bool done = false;
    for (int i = 0; i < sl_st_meta_count(f) && !s; i++) {
        const char *k = sl_st_meta_key(f, i);
        if (strncmp(k, "crc32c", 6) == 0) continue;
        if (key && strcmp(k, key) == 0) {
            done = true;
            if (value) s = sl_st_writer_set_meta(w, k, value);
        } else {
            s = sl_st_writer_set_meta(w, k, sl_st_meta_value(f, i));
        }
    }
    if (!s && key && !done && value) s = sl_st_writer_set_meta(w, key, value);
    if (!s) s = sl_st_writer_write(w, dst);
    for (int i = 0; i < nt && i < 16; i++) sl_tensor_release(&ts[i]);
    sl_st_writer_free(w);
    sl_st_close(f);
    return s;
}

/* Replace `from` by `to` in the JSON header of path in place (the file keeps its checksums,
 * so they no longer match): what a hand edit does. */
static int edit_header(const char *path, const char *from, const char *to) {
    size_t n;
    uint8_t *p = sl_test_read_file(path, &n);
    if (!p) return -1;
    uint64_t hl = le64(p);
    char *h = malloc(hl + strlen(to) + 16);
    memcpy(h, p + 8, hl);
    h[hl] = 0;
    char *at = strstr(h, from);
    if (!at) {
        free(p);
        free(h);
        return -1;
    }
    char *out = malloc(hl + strlen(to) + 16);
    size_t k = (size_t)(at - h);
    memcpy(out, h, k);
    strcpy(out + k, to);
    strcat(out, at + strlen(from));
    size_t ol = strlen(out);
    while (ol > 0 && out[ol - 1] == ' ') ol--; /* re-pad to a multiple of 8 */
    while ((8 + ol) % 8) out[ol++] = ' ';
    FILE *f = fopen(path, "wb");
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(ol >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(out, 1, ol, f);
    fwrite(p + 8 + hl, 1, n - 8 - hl, f);
    fclose(f);
    free(p);
    free(h);
    free(out);
    return 0;
}

/* Capture stderr (the trainer's warnings) into a file while `body` runs. */
static int saved_stderr = -1;
static char errpath[400];
static void capture_begin(void) {
    fflush(stderr);
    snprintf(errpath, sizeof errpath, "%s/stderr.txt", tmpdir);
    int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    saved_stderr = dup(2);
    dup2(fd, 2);
    close(fd);
}
static char *capture_end(void) {
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    size_t n;
    char *s = (char *)sl_test_read_file(errpath, &n);
    if (s) s[n] = 0;
    return s;
}

/* The reference run: checkpoints at steps 5, 10, 15, 20 (16 batches per epoch). */
TEST(test_roundtrip_v2) {
    sl_status s = train_run("ref", NULL);
    if (no_backend) SKIP("no CPU backend in this build");
    ASSERT_OK(s);
    sl_ckpt_position pos;
    ASSERT_OK(sl_train_check_checkpoint(ckpt("ref", 20), NULL, &pos));
    ASSERT_EQ(pos.step, 20);
    ASSERT_EQ(pos.epoch, 1);
    ASSERT_EQ(pos.batch, 4);
    ASSERT_EQ(pos.steps_per_epoch, 16);
    ASSERT_EQ(pos.batch_size, 16);
    ASSERT_EQ(pos.optimizer_step, 20);
    ASSERT(pos.verified);
    sl_st_file *f;
    ASSERT_OK(sl_st_open(ckpt("ref", 20), &f));
    ASSERT_STREQ(sl_st_meta(f, "version"), "2");
    ASSERT_STREQ(sl_st_meta(f, "batch_size"), "16");
    ASSERT(sl_st_meta(f, "crc32c") != NULL);
    ASSERT_EQ(strlen(sl_st_meta(f, "crc32c:model/dense_1/kernel")), 8);
    ASSERT(sl_st_meta(f, "crc32c:optimizer/state") != NULL);
    sl_st_close(f);
}

/* The reproduction: the tensor bytes of a checkpoint zeroed. */
TEST(test_zeroed_tensor_bytes) {
    if (no_backend) SKIP("no CPU backend");
    const char *dst = in_tmp("zeroed.safetensors");
    size_t n;
    uint8_t *p = sl_test_read_file(ckpt("ref", 20), &n);
    ASSERT(p);
    uint64_t data = 8 + le64(p);
    memset(p + data, 0, n - data);
    ASSERT_EQ(sl_test_write_file(dst, p, n), 0);
    free(p);
    sl_ckpt_position pos = {.step = -7};
    ASSERT_EQ(sl_train_check_checkpoint(dst, NULL, &pos), SL_ECORRUPT);
    ASSERT_EQ(pos.step, -7);
    ASSERT_CONTAINS(sl_errmsg(), dst);
    ASSERT_CONTAINS(sl_errmsg(), "does not match its checksum");
    ASSERT_CONTAINS(sl_errmsg(), "recorded");
    /* the first tensor in the data section: the byte offset where its data begins */
    char where[64];
    snprintf(where, sizeof where, ": byte %llu: tensor \"", (unsigned long long)data);
    ASSERT_CONTAINS(sl_errmsg(), where);
    /* just one tensor zeroed: named, with its own offset */
    p = sl_test_read_file(ckpt("ref", 20), &n);
    int64_t off = data_offset(ckpt("ref", 20), "model/dense_1/kernel");
    ASSERT(off > 0);
    memset(p + off, 0, 4 * 8 * sizeof(float));
    ASSERT_EQ(sl_test_write_file(dst, p, n), 0);
    free(p);
    ASSERT_EQ(sl_train_check_checkpoint(dst, NULL, &pos), SL_ECORRUPT);
    snprintf(where, sizeof where, ": byte %lld: tensor \"model/dense_1/kernel\" (128 bytes", (long long)off);
    ASSERT_CONTAINS(sl_errmsg(), where);
}

/* Every single-bit flip anywhere in the file is caught (length, header, padding, data). */
TEST(test_every_flipped_bit) {
    if (no_backend) SKIP("no CPU backend");
    size_t n;
    uint8_t *p = sl_test_read_file(ckpt("ref", 20), &n);
    ASSERT(p);
    sl_ckpt_position pos;
    ASSERT_OK(sl_train_check_checkpoint_mem(p, n, "ref", NULL, &pos));
    int missed = 0;
    for (size_t i = 0; i < n; i++)
        for (int bit = 0; bit < 8; bit += 3) {
            p[i] ^= (uint8_t)(1u << bit);
            sl_status s = sl_train_check_checkpoint_mem(p, n, "flip", NULL, &pos);
            p[i] ^= (uint8_t)(1u << bit);
            if (s == SL_OK) {
                if (missed++ < 5) printf("  flip of bit %d at byte %zu not detected\n", bit, i);
            } else if (s != SL_ECORRUPT && s != SL_EUNSUPPORTED && s != SL_EINVAL) {
                printf("  byte %zu: %s\n", i, sl_errmsg());
                missed++;
            }
        }
    ASSERT_EQ(missed, 0);
    free(p);
}

static void put_params(sl_trainer *t, float v, size_t at) {
    size_t np;
    sl_model *m = sl_trainer_model(t);
    sl_model_params(m, &np);
    float *x = malloc(np * sizeof *x);
    sl_model_get_params(m, x, np);
    x[at] = v;
    sl_model_set_params(m, x, np);
    free(x);
}

/* Saved through the API (valid checksums): a NaN or Inf weight, a NaN optimizer state. */
TEST(test_nonfinite_values) {
    if (no_backend) SKIP("no CPU backend");
    sl_cfg *cfg;
    sl_trainer *t;
    ASSERT_OK(trainer("nf", false, false, NULL, &cfg, &t));
    sl_model *m = sl_trainer_model(t);
    sl_ckpt_position pos;
    ASSERT_OK(sl_train_check_checkpoint(ckpt("ref", 20), NULL, &pos));
    const char *path = in_tmp("nan.safetensors");
    const sl_ckpt_expect want = {.model_hash = sl_trainer_config(t)->model_hash, .batch_size = 16};
    /* NaN weight: index 3 of dense_1/kernel (the first parameters) */
    put_params(t, NAN, 3);
    ASSERT_OK(sl_train_save_checkpoint(path, m, NULL, "tiny", "t.sl", &pos));
    sl_ckpt_position got;
    ASSERT_EQ(sl_train_load_checkpoint(path, m, NULL, &want, &got), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), path);
    ASSERT_CONTAINS(sl_errmsg(), "tensor 'model/dense_1/kernel' holds NaN at index 3 (of 32)");
    put_params(t, INFINITY, 3);
    ASSERT_OK(sl_train_save_checkpoint(path, m, NULL, "tiny", "t.sl", &pos));
    ASSERT_EQ(sl_train_check_checkpoint(path, &want, &got), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "holds +Inf at index 3");
    put_params(t, 0.5f, 3);
    /* NaN in the optimizer state (Adam's m and v) */
    sl_optim *o;
    ASSERT_OK(sl_optim_create(m, &sl_trainer_config(t)->optim, &o));
    size_t ns;
    int64_t ostep;
    sl_optim_state(o, &ns, &ostep);
    ASSERT_EQ(ns, 2 * 58);
    float *st = calloc(ns, sizeof *st);
    st[70] = NAN;
    ASSERT_OK(sl_optim_set_state(o, st, ns, 20));
    ASSERT_OK(sl_train_save_checkpoint(path, m, o, "tiny", "t.sl", &pos));
    ASSERT_EQ(sl_train_load_checkpoint(path, m, o, &want, &got), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "tensor 'optimizer/state' holds NaN at index 70 (of 116)");
    /* finite again: loads */
    st[70] = 0.25f;
    ASSERT_OK(sl_optim_set_state(o, st, ns, 20));
    ASSERT_OK(sl_train_save_checkpoint(path, m, o, "tiny", "t.sl", &pos));
    ASSERT_OK(sl_train_load_checkpoint(path, m, o, &want, &got));
    ASSERT_EQ(got.step, 20);
    free(st);
    sl_optim_free(o);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
}

/* A checkpoint keeps the CPU GEMM each shape was multiplied with (metadata cpu_gemm), and
 * loading it gives a process the choices it has not made yet: the checkpoint is written by
 * a child process that chose a shape this one never met; a damaged cpu_gemm is not used
 * (a warning) and the checkpoint still loads. */
TEST(test_cpu_gemm_choices_kept) {
    if (no_backend) SKIP("no CPU backend");
    sl_cfg *cfg;
    sl_trainer *t;
    ASSERT_OK(trainer("gemm", false, false, NULL, &cfg, &t));
    sl_model *m = sl_trainer_model(t);
    sl_ckpt_position pos, got;
    ASSERT_OK(sl_train_check_checkpoint(ckpt("ref", 20), NULL, &pos));
    const char *path = in_tmp("gemm.safetensors");
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        int code = sl__cpu_gemm_choices_adopt("0,1,91,92,93,b", true, NULL) ||
                   sl_train_save_checkpoint(path, m, NULL, "tiny", "t.sl", &pos);
        _exit(code ? 1 : 0);
    }
    int wst = 0;
    ASSERT_EQ(waitpid(pid, &wst, 0), pid);
    ASSERT(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    sl_st_file *f;
    ASSERT_OK(sl_st_open(path, &f));
    ASSERT(sl_st_meta(f, "cpu_gemm") != NULL);
    ASSERT_CONTAINS(sl_st_meta(f, "cpu_gemm"), "0,1,91,92,93,b");
    sl_st_close(f);
    ASSERT_EQ(sl__cpu_gemm_choice(false, true, 91, 92, 93), -1);
    const sl_ckpt_expect want = {.model_hash = sl_trainer_config(t)->model_hash, .batch_size = 16};
    ASSERT_OK(sl_train_check_checkpoint(path, &want, &got)); /* checking alone adopts nothing */
    ASSERT_EQ(sl__cpu_gemm_choice(false, true, 91, 92, 93), -1);
    ASSERT_OK(sl_train_load_checkpoint(path, m, NULL, &want, &got));
    ASSERT_EQ(sl__cpu_gemm_choice(false, true, 91, 92, 93), 0);
    /* a damaged cpu_gemm (checksums recomputed): the checkpoint is sound and loads, the
     * choices are made anew (nothing of the damaged text adopted) */
    const char *dmg = in_tmp("gemm-damaged.safetensors");
    ASSERT_OK(rewrite(path, dmg, "cpu_gemm", "0,1,94,95,96,b;0,1,97", true));
    ASSERT_OK(sl_train_check_checkpoint(dmg, &want, &got));
    ASSERT_OK(sl_train_load_checkpoint(dmg, m, NULL, &want, &got));
    ASSERT_EQ(got.step, 20);
    ASSERT_EQ(sl__cpu_gemm_choice(false, true, 94, 95, 96), -1);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
}

/* The reproductions' metadata edits: by hand (checksums then disagree), and with the
 * checksums recomputed (the numbers then disagree with each other or with the config). */
TEST(test_metadata_edits) {
    if (no_backend) SKIP("no CPU backend");
    const char *dst = in_tmp("edit.safetensors");
    sl_ckpt_position pos;
    const sl_ckpt_expect want = {.batch_size = 16};
    static const struct {
        const char *from, *to;
    } hand[] = {{"\"batch\":\"4\"", "\"batch\":\"100000\""},
                {"\"step\":\"20\"", "\"step\":\"999999999999\""},
                {"\"epoch\":\"1\"", "\"epoch\":\"0\""},
                {"\"batch_size\":\"16\"", "\"batch_size\":\"32\""}};
    for (size_t i = 0; i < sizeof hand / sizeof hand[0]; i++) {
        size_t n;
        uint8_t *p = sl_test_read_file(ckpt("ref", 20), &n);
        ASSERT_EQ(sl_test_write_file(dst, p, n), 0);
        free(p);
        ASSERT_EQ(edit_header(dst, hand[i].from, hand[i].to), 0);
        ASSERT_EQ(sl_train_check_checkpoint(dst, &want, &pos), SL_ECORRUPT);
        ASSERT_CONTAINS(sl_errmsg(), "the header does not match its checksum");
        ASSERT_CONTAINS(sl_errmsg(), dst);
    }
    static const struct {
        const char *key, *value;
        sl_status code;
        const char *msg;
    } cases[] = {
        {"batch", "100000", SL_ECORRUPT, "inconsistent position: batch 100000 of an epoch of 16 batches"},
        {"step", "999999999999", SL_ECORRUPT, "step 999999999999 is not epoch 1 x 16 steps per epoch + batch 4"},
        {"epoch", "0", SL_ECORRUPT, "step 20 is not epoch 0 x 16 steps per epoch + batch 4"},
        {"epoch", "9223372036854775807", SL_ECORRUPT, "is not epoch 9223372036854775807 x 16"},
        {"steps_per_epoch", "0", SL_ECORRUPT, "expected epoch 0 and batch = step"},
        {"optimizer_step", "21", SL_ECORRUPT, "optimizer step 21 is past step 20"},
        {"optimizer_size", "5", SL_ECORRUPT, "'optimizer/state' has 116 values; metadata optimizer_size says 5"},
        {"step", "-20", SL_ECORRUPT, "'step' is '-20', not a count"},
        {"step", " 20", SL_ECORRUPT, "'step' is ' 20', not a count"},
        {"step", NULL, SL_ECORRUPT, "checkpoint metadata has no 'step'"},
        {"batch_size", NULL, SL_ECORRUPT, "has no 'batch_size'"},
        {"model_hash", "abc", SL_ECORRUPT, "'model_hash' is 'abc', not 16 hex digits"},
        {"version", "3", SL_EUNSUPPORTED, "checkpoint version '3' (this build reads versions 1 and 2)"},
        {"batch_size", "32", SL_EINVAL, "a global batch of 32; the config's batch is 16"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ASSERT_OK(rewrite(ckpt("ref", 20), dst, cases[i].key, cases[i].value, true));
        sl_status s = sl_train_check_checkpoint(dst, &want, &pos);
        if (s != cases[i].code || !strstr(sl_errmsg(), cases[i].msg)) printf("  case %zu: %s\n", i, sl_errmsg());
        ASSERT_EQ(s, cases[i].code);
        ASSERT_CONTAINS(sl_errmsg(), cases[i].msg);
        ASSERT_CONTAINS(sl_errmsg(), dst);
    }
    /* the data no longer has the recorded epoch length */
    ASSERT_OK(rewrite(ckpt("ref", 20), dst, NULL, NULL, true));
    ASSERT_EQ(sl_train_check_checkpoint(dst, &(sl_ckpt_expect){.steps_per_epoch = 12}, &pos), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "16 batches per epoch; the training pipeline now makes 12");
    /* a version 2 file without its checksums */
    ASSERT_OK(rewrite(ckpt("ref", 20), dst, NULL, NULL, false));
    ASSERT_EQ(sl_train_check_checkpoint(dst, &want, &pos), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "a version 2 checkpoint without its checksums");
    /* a version 1 file (before checksums and batch_size): loads, not verified */
    const char *v1 = in_tmp("v1.safetensors");
    ASSERT_OK(rewrite(ckpt("ref", 20), dst, "batch_size", NULL, false));
    ASSERT_OK(rewrite(dst, v1, "version", "1", false));
    ASSERT_OK(sl_train_check_checkpoint(v1, &want, &pos));
    ASSERT(!pos.verified);
    ASSERT_EQ(pos.batch_size, 0);
    ASSERT_EQ(pos.step, 20);
    /* ... whose metadata is still checked */
    ASSERT_OK(rewrite(v1, dst, "batch", "100000", false));
    ASSERT_EQ(sl_train_check_checkpoint(dst, &want, &pos), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "batch 100000 of an epoch of 16 batches");
}

/* Damaged newest checkpoints are skipped with a warning naming each; the older good one is
 * resumed. FIFOs and folders named like checkpoints are refused at once (no hang). */
TEST(test_resume_skips_damaged) {
    if (no_backend) SKIP("no CPU backend");
    char run[600], cmd[1400];
    snprintf(run, sizeof run, "%s/dmg", tmpdir);
    snprintf(cmd, sizeof cmd, "cp -r '%s/ref' '%s'", tmpdir, run);
    ASSERT_EQ(system(cmd), 0);
    /* step 20: tensor bytes zeroed; step 15: NaN weight with valid checksums */
    size_t n;
    uint8_t *p = sl_test_read_file(ckpt("dmg", 20), &n);
    uint64_t data = 8 + le64(p);
    memset(p + data, 0, n - data);
    ASSERT_EQ(sl_test_write_file(ckpt("dmg", 20), p, n), 0);
    free(p);
    const char *tmp = in_tmp("tmp.safetensors");
    p = sl_test_read_file(ckpt("dmg", 15), &n);
    int64_t off = data_offset(ckpt("dmg", 15), "model/dense_2/bias");
    ASSERT(off > 0);
    float nan = NAN;
    memcpy(p + off + 4, &nan, 4);
    ASSERT_EQ(sl_test_write_file(tmp, p, n), 0);
    free(p);
    ASSERT_OK(rewrite(tmp, ckpt("dmg", 15), NULL, NULL, true)); /* checksums over the NaN */
    /* a FIFO and a folder named like newer checkpoints */
    ASSERT_EQ(mkfifo(ckpt("dmg", 30), 0644), 0);
    ASSERT_EQ(mkdir(ckpt("dmg", 25), 0755), 0);
    sl_ckpt_position pos;
    ASSERT_EQ(sl_train_check_checkpoint(ckpt("dmg", 30), NULL, &pos), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "is a FIFO (named pipe), not a regular file");
    ASSERT_EQ(sl_train_check_checkpoint(ckpt("dmg", 25), NULL, &pos), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "is a directory, not a regular file");

    sl_cfg *cfg;
    sl_trainer *t;
    ASSERT_OK(trainer("dmg", true, false, "train.steps=24", &cfg, &t));
    capture_begin();
    sl_status s = sl_trainer_run(t);
    char *err = capture_end();
    ASSERT_OK(s);
    ASSERT(err);
    const sl_train_summary *sum = sl_trainer_summary(t);
    ASSERT_EQ(sum->start_step, 10);
    ASSERT_STREQ(sum->resumed_from, ckpt("dmg", 10));
    ASSERT_EQ(sum->steps, 24);
    char line[900];
    snprintf(line, sizeof line, "warning: skipping damaged checkpoint %s: safetensors file '%s': is a FIFO",
             ckpt("dmg", 30), ckpt("dmg", 30));
    ASSERT_CONTAINS(err, line);
    snprintf(line, sizeof line, "warning: skipping damaged checkpoint %s: ", ckpt("dmg", 25));
    ASSERT_CONTAINS(err, line);
    ASSERT_CONTAINS(err, "is a directory, not a regular file");
    snprintf(line, sizeof line, "warning: skipping damaged checkpoint %s: checkpoint %s: byte %llu: tensor \"",
             ckpt("dmg", 20), ckpt("dmg", 20), (unsigned long long)data);
    ASSERT_CONTAINS(err, line);
    snprintf(line, sizeof line, "warning: skipping damaged checkpoint %s: %s: tensor 'model/dense_2/bias' holds NaN at index 1",
             ckpt("dmg", 15), ckpt("dmg", 15));
    ASSERT_CONTAINS(err, line);
    free(err);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    unlink(ckpt("dmg", 30));
    rmdir(ckpt("dmg", 25));
}

/* A checkpoint of the previous version (no checksums, no batch_size) still resumes, with a
 * note that its contents cannot be verified. */
TEST(test_resume_version1) {
    if (no_backend) SKIP("no CPU backend");
    char run[600], tmp[600];
    snprintf(run, sizeof run, "%s/v1run", tmpdir);
    mkdir(run, 0755);
    snprintf(tmp, sizeof tmp, "%s/nobs.safetensors", tmpdir);
    ASSERT_OK(rewrite(ckpt("ref", 10), tmp, "batch_size", NULL, false));
    ASSERT_OK(rewrite(tmp, ckpt("v1run", 10), "version", "1", false));
    sl_cfg *cfg;
    sl_trainer *t;
    ASSERT_OK(trainer("v1run", true, false, "train.steps=12", &cfg, &t));
    capture_begin();
    sl_status s = sl_trainer_run(t);
    char *err = capture_end();
    ASSERT_OK(s);
    ASSERT_EQ(sl_trainer_summary(t)->start_step, 10);
    ASSERT_EQ(sl_trainer_summary(t)->steps, 12);
    char line[900];
    snprintf(line, sizeof line,
             "warning: checkpoint %s has no checksums (written by an earlier Sluice, version 1): loaded, but its "
             "contents cannot be verified",
             ckpt("v1run", 10));
    ASSERT(err);
    ASSERT_CONTAINS(err, line);
    free(err);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
}

/* --resume with no loadable checkpoint fails naming them, the model untouched. */
TEST(test_resume_none_loadable) {
    if (no_backend) SKIP("no CPU backend");
    const char *run = in_tmp("none");
    mkdir(run, 0755);
    for (int step = 5; step <= 10; step += 5) {
        size_t n;
        uint8_t *p = sl_test_read_file(ckpt("ref", step), &n);
        p[n - 3] ^= 0x40;
        ASSERT_EQ(sl_test_write_file(ckpt("none", step), p, n), 0);
        free(p);
    }
    sl_cfg *cfg;
    sl_trainer *t;
    ASSERT_OK(trainer("none", true, false, NULL, &cfg, &t));
    capture_begin();
    sl_status s = sl_trainer_run(t);
    free(capture_end());
    ASSERT_EQ(s, SL_ECORRUPT);
    char msg[1400];
    snprintf(msg, sizeof msg, "--resume: none of the 2 checkpoints in %s is loadable: %s, %s", run, ckpt("none", 10),
             ckpt("none", 5));
    ASSERT_CONTAINS(sl_errmsg(), msg);
    ASSERT_EQ(sl_trainer_summary(t)->steps, 0);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
}

/* A new run refuses a folder with another run's checkpoints or event files; overwrite
 * removes them; a removal that fails is an error naming the file and the reason. */
TEST(test_run_folder_of_another_run) {
    if (no_backend) SKIP("no CPU backend");
    char run[600], cmd[1400], p[700];
    snprintf(run, sizeof run, "%s/used", tmpdir);
    snprintf(cmd, sizeof cmd, "cp -r '%s/ref' '%s'", tmpdir, run);
    ASSERT_EQ(system(cmd), 0);
    /* a newer checkpoint of that run: a fresh run of 20 steps would otherwise keep it and a
     * later --resume would take it */
    ASSERT_OK(rewrite(ckpt("ref", 20), ckpt("used", 40), NULL, NULL, true));
    sl_cfg *cfg;
    sl_trainer *t;
    ASSERT_OK(trainer("used", false, false, NULL, &cfg, &t));
    ASSERT_EQ(sl_trainer_run(t), SL_EINVAL);
    snprintf(p, sizeof p, "run folder %s holds another run's files: 5 checkpoints (newest ckpt-000000040.safetensors)",
             run);
    ASSERT_CONTAINS(sl_errmsg(), p);
    ASSERT_CONTAINS(sl_errmsg(), "2 TensorBoard event files"); /* its train/ and eval/ runs */
    ASSERT_CONTAINS(sl_errmsg(), "--resume");
    ASSERT_CONTAINS(sl_errmsg(), "--overwrite");
    ASSERT_EQ(access(ckpt("used", 40), F_OK), 0); /* nothing removed */
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    /* event files alone are another run's too */
    const char *ev = in_tmp("evonly");
    mkdir(ev, 0755);
    snprintf(p, sizeof p, "%s/events.out.tfevents.1700000000.host", ev);
    ASSERT_EQ(sl_test_write_file(p, "x", 1), 0);
    ASSERT_EQ(sl_train_prepare_run_dir(ev, false, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "holds another run's files: 1 TensorBoard event file;");
    /* and ps shards */
    snprintf(p, sizeof p, "%s/ps-0", ev);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/ps-0/shard-000000000007.safetensors", ev);
    ASSERT_EQ(sl_test_write_file(p, "x", 1), 0);
    ASSERT_EQ(sl_train_prepare_run_dir(ev, false, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "1 TensorBoard event file, 1 ps shard checkpoint;");
    ASSERT_OK(sl_train_prepare_run_dir(ev, true, NULL));
    ASSERT(access(p, F_OK) != 0);
    ASSERT_OK(sl_train_prepare_run_dir(ev, false, NULL)); /* empty now */
    snprintf(p, sizeof p, "%s/missing", tmpdir);
    ASSERT_OK(sl_train_prepare_run_dir(p, false, NULL));
    /* a folder that cannot be listed does not look empty (a resume would start afresh) */
    char **none;
    snprintf(p, sizeof p, "%s/points.tfrecord", tmpdir); /* not a folder: ENOTDIR, even for root */
    ASSERT_EQ(sl_train_list_checkpoints(p, &none), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "cannot list ");
    ASSERT_CONTAINS(sl_errmsg(), strerror(ENOTDIR));
    ASSERT_EQ(sl_train_prepare_run_dir(p, false, NULL), SL_EIO);

    /* overwrite: the old files go, the new run's are the only ones */
    ASSERT_OK(trainer("used", false, true, NULL, &cfg, &t));
    ASSERT_OK(sl_trainer_run(t));
    ASSERT(access(ckpt("used", 40), F_OK) != 0);
    char **list;
    int n = sl_train_list_checkpoints(run, &list);
    ASSERT_EQ(n, 4);
    ASSERT_STREQ(list[0], ckpt("used", 20));
    sl_train_free_list(list, n);
    sl_trainer_free(t);
    sl_cfg_free(cfg);

    /* a removal that fails (a non-empty folder named like a checkpoint: unlink fails with
     * EISDIR, even for root) */
    snprintf(p, sizeof p, "%s/x", ckpt("used", 50));
    ASSERT_EQ(mkdir(ckpt("used", 50), 0755), 0);
    ASSERT_EQ(sl_test_write_file(p, "x", 1), 0);
    ASSERT_OK(trainer("used", false, true, NULL, &cfg, &t));
    ASSERT_EQ(sl_trainer_run(t), SL_EIO);
    snprintf(p, sizeof p, "cannot remove %s (an earlier run's file in the run folder): %s", ckpt("used", 50),
             strerror(EISDIR));
    ASSERT_CONTAINS(sl_errmsg(), p);
    ASSERT_EQ(sl_trainer_summary(t)->steps, 0);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
}

/* Parameters that pass every check but make the loss non-finite: the error names the
 * checkpoint, not the learning rate. */
TEST(test_nonfinite_loss_after_resume) {
    if (no_backend) SKIP("no CPU backend");
    char run[600], cmd[1400];
    snprintf(run, sizeof run, "%s/huge", tmpdir);
    mkdir(run, 0755);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", ckpt("ref", 10), ckpt("huge", 10));
    ASSERT_EQ(system(cmd), 0);
    sl_cfg *cfg;
    sl_trainer *t;
    ASSERT_OK(trainer("huge", true, false, NULL, &cfg, &t));
    sl_model *m = sl_trainer_model(t);
    size_t np;
    sl_model_params(m, &np);
    float *x = malloc(np * sizeof *x);
    for (size_t i = 0; i < np; i++) x[i] = 3e38f;
    ASSERT_OK(sl_model_set_params(m, x, np));
    free(x);
    sl_ckpt_position pos;
    ASSERT_OK(sl_train_check_checkpoint(ckpt("huge", 10), NULL, &pos));
    sl_optim *o;
    ASSERT_OK(sl_optim_create(m, &sl_trainer_config(t)->optim, &o));
    ASSERT_OK(sl_train_save_checkpoint(ckpt("huge", 10), m, o, "tiny", "t.sl", &pos));
    sl_optim_free(o);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    ASSERT_OK(trainer("huge", true, false, NULL, &cfg, &t));
    sl_status s = sl_trainer_run(t);
    ASSERT_EQ(s, SL_ERANGE);
    char msg[900];
    ASSERT_CONTAINS(sl_errmsg(), "step 10: the loss is ");
    snprintf(msg, sizeof msg, "nan: the parameters loaded from %s produce a non-finite loss", ckpt("huge", 10));
    if (!strstr(sl_errmsg(), msg)) printf("  %s\n", sl_errmsg());
    ASSERT_CONTAINS(sl_errmsg(), msg);
    ASSERT(strstr(sl_errmsg(), "lower the learning rate") == NULL);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
}

/* test_checkpoint --write-seeds DIR: the fuzz seeds of tests/fuzz/fuzz_checkpoint.c. */
static int write_seeds(const char *dir) {
    char p[700];
    struct {
        int step;
        const char *name, *key, *value;
        bool crc;
    } seeds[] = {{5, "v2_step5", NULL, NULL, true},
                 {20, "v2_step20", NULL, NULL, true},
                 {20, "v2_hash1234", "model_hash", "0000000000001234", true},
                 {5, "v1_step5", "version", "1", false},
                 {20, "v1_step20", "version", "1", false}};
    if (train_run("ref", NULL)) return 1;
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        snprintf(p, sizeof p, "%s/%s.safetensors", dir, seeds[i].name);
        if (rewrite(ckpt("ref", seeds[i].step), p, seeds[i].key, seeds[i].value, seeds[i].crc)) return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-test-checkpoint.%d", (int)getpid());
    mkdir(tmpdir, 0777);
    if (write_data()) {
        printf("cannot write test data: %s\n", sl_errmsg());
        return 1;
    }
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) {
        int rc = write_seeds(argv[2]);
        if (rc) printf("%s\n", sl_errmsg());
        sl_test_rm_rf(tmpdir);
        return rc;
    }
    RUN(test_roundtrip_v2);
    RUN(test_zeroed_tensor_bytes);
    RUN(test_every_flipped_bit);
    RUN(test_nonfinite_values);
    RUN(test_cpu_gemm_choices_kept);
    RUN(test_metadata_edits);
    RUN(test_resume_skips_damaged);
    RUN(test_resume_version1);
    RUN(test_resume_none_loadable);
    RUN(test_run_folder_of_another_run);
    RUN(test_nonfinite_loss_after_resume);
    sl_test_rm_rf(tmpdir);
    TEST_MAIN_END();
}
