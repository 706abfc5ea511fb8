/* Fashion-MNIST for the training benchmarks (bench_train, bench_train_gpu): where the
 * 8-way TFRecord shards are (converted from Debian's idx files when they are missing), the
 * two models (MLP 784-256-128-10, TensorFlow's tutorial CNN), their FLOPs and GEMM shapes,
 * their pipeline, and one timed training run (the clock and the median serve the other
 * benchmarks too). Header-only (static functions): each benchmark is one .c file.
 *
 * Looked for, in order: data/fashion/ of the source tree (what `bash scripts/main.sh`
 * makes), then /tmp/sluice-bench/fashion; when neither holds 8 train shards they are
 * converted into the second from the idx files in $SLUICE_FASHION_SRC (default
 * /usr/share/datasets/fashion-mnist, package dataset-fashion-mnist), as
 * `sluice-record convert fashion-mnist --shards 8` writes them (records dealt to shards in
 * contiguous runs, features image: 784 bytes, label: int64). */
#ifndef SLUICE_BENCH_FASHION_H
#define SLUICE_BENCH_FASHION_H

#include <glob.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "sluice/example.h"
#include "sluice/idx.h"
#include "sluice/status.h"
#include "sluice/config.h"
#include "sluice/tfrecord.h"
#include "sluice/train.h"

#define BENCH_WORK "/tmp/sluice-bench"

/* files matching pattern */
static inline int bench_have(const char *pattern) {
    glob_t g;
    int n = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    globfree(&g);
    return n;
}

static inline int bench_fail(const char *prog, const char *what) {
    fprintf(stderr, "%s: %s: %s\n", prog, what, sl_errmsg());
    return 1;
}

/* idx -> 8 TFRecord shards per split in dir; 0 or 1 (printed) */
static inline int bench_fashion_convert(const char *prog, const char *dir) {
    const char *splits[2][3] = {{"train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"},
                                {"test", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}};
    const char *src = getenv("SLUICE_FASHION_SRC");
    if (!src || !*src) src = "/usr/share/datasets/fashion-mnist";
    mkdir(BENCH_WORK, 0777);
    mkdir(dir, 0777);
    sl_exb *b;
    if (sl_exb_new(&b)) return bench_fail(prog, "example builder");
    int rc = 1;
    for (int s = 0; s < 2; s++) {
        char p[700];
        sl_tensor img = SL_TENSOR_EMPTY, lab = SL_TENSOR_EMPTY;
        snprintf(p, sizeof p, "%s/%s", src, splits[s][1]);
        if (sl_idx_read(p, &img)) goto fail_p;
        snprintf(p, sizeof p, "%s/%s", src, splits[s][2]);
        if (sl_idx_read(p, &lab)) goto fail_p;
        int64_t n = img.dims[0];
        for (int k = 0; k < 8; k++) {
            snprintf(p, sizeof p, "%s/%s-%05d-of-00008.tfrecord", dir, splits[s][0], k);
            sl_tfr_writer *w;
            if (sl_tfr_writer_open(p, NULL, &w)) goto fail_p;
            for (int64_t i = n * k / 8; i < n * (k + 1) / 8; i++) {
                sl_bytes im = {(const uint8_t *)img.data + i * 784, 784};
                int64_t y = ((const uint8_t *)lab.data)[i];
                uint8_t *rec;
                size_t len;
                sl_exb_reset(b);
                if (sl_exb_bytes(b, "image", &im, 1) || sl_exb_int64s(b, "label", &y, 1) ||
                    sl_exb_serialize(b, &rec, &len)) {
                    sl_tfr_writer_close(w);
                    goto fail_p;
                }
                sl_status st = sl_tfr_writer_write(w, rec, len);
                free(rec);
                if (st) {
                    sl_tfr_writer_close(w);
                    goto fail_p;
                }
            }
            if (sl_tfr_writer_close(w)) goto fail_p;
        }
        sl_tensor_release(&img);
        sl_tensor_release(&lab);
        continue;
    fail_p:
        bench_fail(prog, p);
        sl_tensor_release(&img);
        sl_tensor_release(&lab);
        goto out;
    }
    rc = 0;
out:
    sl_exb_free(b);
    return rc;
}

/* the shards' folder into data (cap bytes), converting when needed; 0 or 1 (printed) */
static inline int bench_fashion_data(const char *prog, char *data, size_t cap) {
    char pat[700];
    snprintf(data, cap, "%s/data/fashion", SLUICE_SRC_DIR);
    snprintf(pat, sizeof pat, "%s/train-*-of-00008.tfrecord", data);
    if (bench_have(pat) == 8) return 0;
    snprintf(data, cap, "%s/fashion", BENCH_WORK);
    snprintf(pat, sizeof pat, "%s/train-*-of-00008.tfrecord", data);
    if (bench_have(pat) == 8) return 0;
    fprintf(stderr, "%s: converting Fashion-MNIST into %s\n", prog, data);
    return bench_fashion_convert(prog, data);
}

static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* sorts v; the median */
static inline double bench_median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- the two models ---- */

static const char *BENCH_MODELS[2] = {
    "model mlp {\n  input 28x28x1\n  flatten\n  dense 256 activation=relu\n  dense 128 activation=relu\n"
    "  dense 10\n}\n",
    "model cnn {\n  input 28x28x1\n  conv2d 32 kernel=5x5 padding=same activation=relu\n  maxpool 2x2\n"
    "  conv2d 64 kernel=5x5 padding=same activation=relu\n  maxpool 2x2\n  flatten\n"
    "  dense 1024 activation=relu\n  dense 10\n}\n",
};

/* A dense or conv layer as its forward GEMM at batch 1: rows per example (conv: output
 * pixels), N (outputs / out channels), K (inputs / kernel taps x in channels). */
typedef struct {
    int rows, n, k;
} bench_layer;

static const bench_layer BENCH_LAYERS[2][4] = {
    {{1, 256, 784}, {1, 128, 256}, {1, 10, 128}, {0, 0, 0}},
    {{28 * 28, 32, 5 * 5 * 1}, {14 * 14, 64, 5 * 5 * 32}, {1, 1024, 7 * 7 * 64}, {1, 10, 1024}},
};

/* FLOPs per example, forward + backward: 2 x the multiply-adds of each layer's forward GEMM,
 * its weight-gradient GEMM and, but for the first layer, its input-gradient GEMM */
static inline double bench_model_flops(int k) {
    double f = 0;
    for (int i = 0; i < 4 && BENCH_LAYERS[k][i].n; i++) {
        const bench_layer *l = &BENCH_LAYERS[k][i];
        f += 2.0 * l->rows * l->n * l->k * (i == 0 ? 2 : 3);
    }
    return f;
}

typedef struct {
    int m, n, k;
    bool ta, tb;
} bench_gemm;

/* The model's GEMMs at batch b (at most 12): forward C[M,N] = X[M,K] W[K,N]; weight gradient
 * dW[K,N] = X^T dY; input gradient dX[M,K] = dY W^T (not for the first layer). */
static inline int bench_model_gemms(int k, int b, bench_gemm *g) {
    int n = 0;
    for (int i = 0; i < 4 && BENCH_LAYERS[k][i].n; i++) {
        const bench_layer *l = &BENCH_LAYERS[k][i];
        int m = l->rows * b;
        g[n++] = (bench_gemm){m, l->n, l->k, false, false};
        g[n++] = (bench_gemm){l->k, l->n, m, true, false};
        if (i > 0) g[n++] = (bench_gemm){m, l->k, l->n, false, true};
    }
    return n;
}

/* The largest A (m x k), B (k x n) and C (m x n) of the GEMMs g, in elements */
static inline void bench_gemm_max(const bench_gemm *g, int ng, size_t *amax, size_t *bmax, size_t *cmax) {
    *amax = *bmax = *cmax = 0;
    for (int i = 0; i < ng; i++) {
        size_t a = (size_t)g[i].m * g[i].k, b = (size_t)g[i].k * g[i].n, c = (size_t)g[i].m * g[i].n;
        *amax = a > *amax ? a : *amax;
        *bmax = b > *bmax ? b : *bmax;
        *cmax = c > *cmax ? c : *cmax;
    }
}

/* ---- one timed training run ---- */

typedef struct {
    int64_t from, to; /* time the steps [from, to) */
    double t_from, t_to;
} bench_timer;

static inline sl_status bench_on_step(void *ctx, const sl_step *rec, sl_step_reply *reply) {
    (void)reply;
    bench_timer *h = ctx;
    if (rec->phase != SL_STEP_TRAIN) return SL_OK;
    if (rec->step == h->from) h->t_from = bench_now();
    if (rec->step == h->to) h->t_to = bench_now();
    return SL_OK;
}

/* The pipeline `train` over the shards in data (interleaved, shuffled, decoded and scaled in
 * parallel, batches of `batch`, prefetched; `shard auto` first when shard is set) into out
 * (cap bytes). Returns the length written, as snprintf does.
 * With `cached`, the pipeline tf.data's performance guide gives a data set that fits in
 * memory: parse, decode and scale in parallel on the first pass, keep the decoded images
 * (`cache`), and from then on shuffle them whole (`shuffle 60000`: a uniform permutation of
 * the 60,000 images each epoch) and batch — the work of a PyTorch loop over tensors held in
 * memory with a random permutation per epoch. */
static inline int bench_fashion_pipeline_opt(char *out, size_t cap, const char *data, int batch, bool shard,
                                             bool cached) {
    if (cached)
        return snprintf(out, cap,
                        "pipeline train {\n"
                        "  files \"%s/train-*.tfrecord\"\n%s"
                        "  interleave cycle=4 block=16 parallel=auto\n"
                        "  map parse_example(image: bytes, label: int64) | decode_raw(image, uint8, 28x28x1)"
                        " | scale(image, 1/255) parallel=auto\n"
                        "  cache\n"
                        "  shuffle 60000\n"
                        "  batch %d drop_remainder\n"
                        "  prefetch auto\n"
                        "}\n",
                        data, shard ? "  shard auto\n" : "", batch);
    return snprintf(out, cap,
                    "pipeline train {\n"
                    "  files \"%s/train-*.tfrecord\"\n%s"
                    "  interleave cycle=4 block=16 parallel=auto\n"
                    "  shuffle 10000\n"
                    "  map parse_example(image: bytes, label: int64) | decode_raw(image, uint8, 28x28x1)"
                    " | scale(image, 1/255) parallel=auto\n"
                    "  batch %d drop_remainder\n"
                    "  prefetch auto\n"
                    "}\n",
                    data, shard ? "  shard auto\n" : "", batch);
}

static inline int bench_fashion_pipeline(char *out, size_t cap, const char *data, int batch, bool shard) {
    return bench_fashion_pipeline_opt(out, cap, data, batch, shard, false);
}

/* Model k on the shards in data: `warm` untimed steps, then `steps` timed between two steps
 * of the loop (the trainer's exchange hook: pipeline waits, epoch boundaries and optimizer
 * steps inside), batch `batch`, SGD momentum 0.9, on `backend` ("cpu" with `threads`, or
 * "cuda"), the pipeline `cached` or not (bench_fashion_pipeline_opt); *rate examples/s,
 * *wait the run's input-wait share. 0 or 1 (printed). */
static inline int bench_train_run(const char *prog, const char *data, int k, int batch, const char *backend, int threads,
                           int64_t warm, int64_t steps, bool cached, double *rate, double *wait) {
    char text[4096], thr[32] = "";
    if (threads > 0) snprintf(thr, sizeof thr, "  threads %d\n", threads);
    int len = bench_fashion_pipeline_opt(text, sizeof text, data, batch, false, cached);
    snprintf(text + len, sizeof text - (size_t)len,
             "%s"
             "train {\n  model %s\n  data train\n  steps %lld\n  optimizer sgd lr=%s momentum=0.9\n"
             "  backend %s\n%s  seed 1\n  run_dir \"" BENCH_WORK "/run-%s\"\n}\n",
             BENCH_MODELS[k], k ? "cnn" : "mlp", (long long)(warm + steps + 1), k ? "0.02" : "0.05", backend, thr,
             backend);
    sl_cfg *cfg;
    if (sl_cfg_parse(text, strlen(text), "bench.sl", &cfg)) return bench_fail(prog, "config");
    bench_timer h = {.from = warm, .to = warm + steps};
    sl_train_hooks hooks = {.ctx = &h, .world_size = 1, .rank = 0, .is_chief = true, .exchange = bench_on_step};
    sl_train_opts o = sl_train_opts_default();
    o.hooks = &hooks;
    const char *gemm = getenv("SLUICE_CPU_GEMM"); /* the CPU backend's GEMM, as sluice-train reads it */
    if (gemm && *gemm && sl_cpu_gemm_parse(gemm, &o.cpu_gemm)) return bench_fail(prog, "SLUICE_CPU_GEMM");
    o.overwrite = true; /* each run replaces the last one's event file */
    sl_trainer *t;
    if (sl_trainer_create(cfg, &o, &t)) {
        sl_cfg_free(cfg);
        return bench_fail(prog, "trainer");
    }
    sl_status s = sl_trainer_run(t);
    if (!s) *wait = sl_trainer_summary(t)->input_wait;
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    if (s) return bench_fail(prog, "training");
    *rate = (double)steps * batch / (h.t_to - h.t_from);
    return 0;
}

#endif
