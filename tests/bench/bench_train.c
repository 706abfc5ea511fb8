/* Benchmark: end-to-end training throughput on Fashion-MNIST — TFRecord files -> the
 * config pipeline (parse_example, decode_raw, scale, shuffle, batch, prefetch) -> the CPU
 * backend's train step and optimizer — for the MLP (784-256-128-10) and TensorFlow's
 * tutorial CNN, beside PyTorch on the CPU with the data already in memory
 * (../shared/anchors/torch_fashion.py), run in the same process run with the same batch
 * (128), optimizer (SGD momentum 0.9) and threads (2).
 *
 * Usage: bench_train [MLP_STEPS] [CNN_STEPS]   (defaults 1000 and 120, after 20 / 5 warm-up
 * steps). Sluice's rate is timed between two steps of the training loop through the
 * trainer's exchange hook (sluice/train.h), so pipeline waits, epoch boundaries and the
 * optimizer are all inside it; no evaluation or checkpoints. The anchor trains one epoch
 * (468 steps) and prints its own rate. Data: data/fashion/ of the source tree when
 * `bash scripts/main.sh` made it, else converted here into /tmp/sluice-bench/fashion.
 * SLUICE_SHARED (default ../shared beside the sources) locates the anchor. Ends with:
 *   RESULT bench_train ratio=R sluice=X anchor=Y unit=examples/s
 * where R is the worse of the two models' ratios (sluice / anchor) and X, Y are that
 * model's rates. */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "sluice/config.h"
#include "sluice/example.h"
#include "sluice/idx.h"
#include "sluice/tfrecord.h"
#include "sluice/train.h"

#define WORK "/tmp/sluice-bench"
#define BATCH 128
#define THREADS 2
#define FM "/usr/share/datasets/fashion-mnist"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int die(const char *what) {
    fprintf(stderr, "bench_train: %s: %s\n", what, sl_errmsg());
    return 1;
}

static int have(const char *pattern) {
    glob_t g;
    int n = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    globfree(&g);
    return n;
}

/* Fashion-MNIST idx -> 8 TFRecord shards per split, as sluice-record convert writes them. */
static int convert(const char *dir) {
    const char *splits[2][3] = {{"train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"},
                                {"test", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}};
    mkdir(WORK, 0777);
    mkdir(dir, 0777);
    sl_exb *b;
    if (sl_exb_new(&b)) return die("example builder");
    for (int s = 0; s < 2; s++) {
        char p[512];
        sl_tensor img = SL_TENSOR_EMPTY, lab = SL_TENSOR_EMPTY;
        snprintf(p, sizeof p, "%s/%s", FM, splits[s][1]);
        if (sl_idx_read(p, &img)) return die(p);
        snprintf(p, sizeof p, "%s/%s", FM, splits[s][2]);
        if (sl_idx_read(p, &lab)) return die(p);
        int64_t n = img.dims[0];
        for (int k = 0; k < 8; k++) {
            snprintf(p, sizeof p, "%s/%s-%05d-of-00008.tfrecord", dir, splits[s][0], k);
            sl_tfr_writer *w;
            if (sl_tfr_writer_open(p, NULL, &w)) return die(p);
            for (int64_t i = n * k / 8; i < n * (k + 1) / 8; i++) {
                sl_bytes im = {(const uint8_t *)img.data + i * 784, 784};
                int64_t y = ((const uint8_t *)lab.data)[i];
                uint8_t *rec;
                size_t len;
                sl_exb_reset(b);
                if (sl_exb_bytes(b, "image", &im, 1) || sl_exb_int64s(b, "label", &y, 1) ||
                    sl_exb_serialize(b, &rec, &len))
                    return die("serialize");
                sl_status st = sl_tfr_writer_write(w, rec, len);
                free(rec);
                if (st) return die(p);
            }
            if (sl_tfr_writer_close(w)) return die(p);
        }
        sl_tensor_release(&img);
        sl_tensor_release(&lab);
    }
    sl_exb_free(b);
    return 0;
}

static const char *MODELS[2] = {
    "model mlp {\n  input 28x28x1\n  flatten\n  dense 256 activation=relu\n  dense 128 activation=relu\n"
    "  dense 10\n}\n",
    "model cnn {\n  input 28x28x1\n  conv2d 32 kernel=5x5 padding=same activation=relu\n  maxpool 2x2\n"
    "  conv2d 64 kernel=5x5 padding=same activation=relu\n  maxpool 2x2\n  flatten\n"
    "  dense 1024 activation=relu\n  dense 10\n}\n",
};

typedef struct {
    int64_t from, to;  /* time the steps [from, to) */
    double t_from, t_to;
} timer_hook;

static sl_status on_step(void *ctx, sl_model *m, float *g, size_t n, int64_t step, float lr, bool *applied) {
    timer_hook *h = ctx;
    if (step == h->from) h->t_from = now();
    if (step == h->to) h->t_to = now();
    return SL_OK;
}

/* Sluice's examples/s for model k over `steps` timed steps after `warm`. */
static int run_sluice(const char *data, int k, int64_t warm, int64_t steps, double *rate, double *wait) {
    char text[4096];
    snprintf(text, sizeof text,
             "pipeline train {\n"
             "  files \"%s/train-*.tfrecord\"\n"
             "  interleave cycle=4 block=16 parallel=auto\n"
             "  shuffle 10000\n"
             "  map parse_example(image: bytes, label: int64) | decode_raw(image, uint8, 28x28x1)"
             " | scale(image, 1/255) parallel=auto\n"
             "  batch %d drop_remainder\n"
             "  prefetch auto\n"
             "}\n%s"
             "train {\n  model %s\n  data train\n  steps %lld\n  optimizer sgd lr=%s momentum=0.9\n"
             "  backend cpu\n  threads %d\n  seed 1\n  run_dir \"" WORK "/run\"\n}\n",
             data, BATCH, MODELS[k], k ? "cnn" : "mlp", (long long)(warm + steps + 1), k ? "0.02" : "0.05",
             THREADS);
    sl_cfg *cfg;
    if (sl_cfg_parse(text, strlen(text), "bench.sl", &cfg)) return die("config");
    timer_hook h = {.from = warm, .to = warm + steps};
    sl_train_hooks hooks = {.ctx = &h, .world_size = 1, .rank = 0, .is_chief = true, .exchange = on_step};
    sl_train_opts o = sl_train_opts_default();
    o.hooks = &hooks;
    sl_trainer *t;
    if (sl_trainer_create(cfg, &o, &t)) {
        sl_cfg_free(cfg);
        return die("trainer");
    }
    sl_status s = sl_trainer_run(t);
    if (!s) *wait = sl_trainer_summary(t)->input_wait;
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    if (s) return die("training");
    *rate = (double)steps * BATCH / (h.t_to - h.t_from);
    return 0;
}

static int run_anchor(const char *shared, const char *kind, double *rate) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/anchors/torch_fashion.py %s 1 %d %d 2>&1", shared, kind, BATCH,
             THREADS);
    FILE *p = popen(cmd, "r");
    if (!p) return die("popen");
    char line[512];
    *rate = 0;
    while (fgets(line, sizeof line, p)) {
        const char *e = strstr(line, " epochs, ");
        if (strncmp(line, "torch ", 6) == 0 && e) *rate = atof(e + 9);
        else fputs(line, stderr);
    }
    int rc = pclose(p);
    if (rc != 0 || *rate <= 0) {
        fprintf(stderr, "bench_train: anchor %s failed (exit %d)\n", kind, rc);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int64_t steps[2] = {argc > 1 ? atoll(argv[1]) : 1000, argc > 2 ? atoll(argv[2]) : 120};
    int64_t warm[2] = {20, 5};
    if (steps[0] < 1 || steps[1] < 1) {
        fprintf(stderr, "usage: bench_train [MLP_STEPS] [CNN_STEPS]\n");
        return 2;
    }
    char data[600];
    snprintf(data, sizeof data, "%s/data/fashion", SLUICE_SRC_DIR);
    char pat[700];
    snprintf(pat, sizeof pat, "%s/train-*-of-00008.tfrecord", data);
    if (have(pat) != 8) {
        snprintf(data, sizeof data, "%s/fashion", WORK);
        snprintf(pat, sizeof pat, "%s/train-*-of-00008.tfrecord", data);
        if (have(pat) != 8) {
            fprintf(stderr, "bench_train: converting Fashion-MNIST into %s\n", data);
            if (convert(data)) return 1;
        }
    }
    const char *shared = getenv("SLUICE_SHARED");
    char sharedbuf[600];
    if (!shared) {
        snprintf(sharedbuf, sizeof sharedbuf, "%s/../shared", SLUICE_SRC_DIR);
        shared = sharedbuf;
    }
    printf("bench_train: batch %d, %d threads, CPU backend; data %s\n", BATCH, THREADS, data);
    const char *kinds[2] = {"mlp", "cnn"};
    double sl[2], an[2], ratio[2], wait[2];
    for (int k = 0; k < 2; k++) {
        if (run_sluice(data, k, warm[k], steps[k], &sl[k], &wait[k])) return 1;
        printf("  sluice %s: %lld steps after %lld warm-up: %.0f examples/s (input wait %.1f%% of step time)\n",
               kinds[k], (long long)steps[k], (long long)warm[k], sl[k], 100 * wait[k]);
        fflush(stdout);
        if (run_anchor(shared, kinds[k], &an[k])) return 1;
        ratio[k] = sl[k] / an[k];
        printf("  torch  %s: 1 epoch, data in memory: %.0f examples/s\n", kinds[k], an[k]);
        printf("  ratio  %s: %.2f\n", kinds[k], ratio[k]);
        fflush(stdout);
    }
    int w = ratio[0] <= ratio[1] ? 0 : 1;
    printf("ratios: mlp %.2f, cnn %.2f (the worse: %s)\n", ratio[0], ratio[1], kinds[w]);
    printf("RESULT bench_train ratio=%.2f sluice=%.0f anchor=%.0f unit=examples/s\n", ratio[w], sl[w], an[w]);
    return 0;
}
