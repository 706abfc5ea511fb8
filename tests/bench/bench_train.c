/* Benchmark: end-to-end training throughput on Fashion-MNIST — TFRecord files -> the
 * config pipeline (parse_example, decode_raw, scale in parallel, cache, shuffle over the
 * whole set, batch, prefetch) -> the CPU backend's train step and optimizer — for the MLP
 * (784-256-128-10) and TensorFlow's tutorial CNN, beside PyTorch on the CPU with the data
 * already in memory (../shared/anchors/torch_fashion.py: the decoded float images in one
 * tensor, a random permutation per epoch; one thread-pool size for torch's OpenMP and
 * OpenBLAS, passive OpenMP waits, 20 untimed warm-up steps, then one epoch timed), with the
 * same batch (128), optimizer (SGD momentum 0.9, same lr) and threads (2). Sluice's
 * pipeline is the one tf.data's guide gives a set that fits in memory (bench_fashion.h,
 * bench_fashion_pipeline_opt): the first pass parses the TFRecords in parallel and caches
 * the images, later epochs shuffle and batch them — the anchor's work, with the records
 * still read and parsed once inside the run (before the first step, as the shuffle buffer
 * of 60,000 fills).
 *
 * Per model, REPS (3) alternating runs of each side (Sluice first on even rounds, the
 * anchor first on odd ones, so drift on a shared machine falls on both); printed: the
 * median and min-max examples/s of each side. Sluice's rate is timed between two steps of
 * the training loop through the trainer's exchange hook (sluice/train.h), so pipeline
 * waits, epoch boundaries and the optimizer are all inside it; no evaluation or checkpoints.
 *
 * The arithmetic ceiling, in the same run: each model's FLOPs per example (forward and
 * backward, counted from the layer shapes: 2 x multiply-adds of every dense and conv layer's
 * forward GEMM, its weight-gradient GEMM and, except the first layer, its input-gradient
 * GEMM; bias, activations, pooling and the optimizer are not counted), the sgemm rate on
 * THREADS threads (each a single-threaded sgemm on a slice of C, as the CPU backend runs
 * them, with Sluice's own GEMM on AVX-512F CPUs, train/gemm_avx512.h, unless SLUICE_CPU_GEMM
 * says blas, else OpenBLAS; the backend's measured choice keeps Sluice's on every shape it is
 * not 1.25x slower on) on exactly those GEMMs at batch 128 (the model's GEMM mix, each a
 * whole-batch GEMM: the CPU backend runs a convolution's products a few images at a time
 * and, on AVX-512F, without im2col, so a model can run faster than its mix), a large square
 * GEMM with OpenBLAS and with Sluice's GEMM (the faster is
 * this machine's sgemm rate), and the cores' FMA peak (THREADS threads of independent
 * FMAs, AVX2 and, where the CPU has it, AVX-512: the ceiling of any float32 GEMM, which
 * OpenBLAS reaches only with kernels of the widest vectors; the BLAS line says which kernels
 * it runs and whether OPENBLAS_CORETYPE chose them). Printed per model: achieved GFLOP/s =
 * FLOPs x examples/s, and its share of each rate (target for the CNN: >= 0.8 of the square).
 * The machine's speed drifts by tens of percent within minutes, so the faster square is
 * measured again right after each of Sluice's runs, and the share that counts is the median
 * of the rounds' shares, each run against its own square.
 *
 * Usage: bench_train [MLP_STEPS] [CNN_STEPS]   (defaults 1000 and 200 timed steps after 20
 * warm-up steps, as the anchor has). BENCH_QUICK=1: a smoke run (2 rounds, 200 / 10 steps,
 * a 1024 square, the CNN's anchor skipped: its epoch takes a minute). SLUICE_CPU_GEMM
 * (auto, blas, avx512) is the trainer's sl_train_opts.cpu_gemm, as sluice-train reads it. Data: see
 * bench_fashion.h. SLUICE_SHARED (default ../shared beside the sources) locates
 * the anchor. Ends with:
 *   RESULT bench_train ratio=R sluice=X anchor=Y unit=examples/s
 * where R is the worse of the two models' ratios of medians (sluice / anchor) and X, Y are
 * that model's medians. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice/config.h"
#include "sluice/pool.h"
#include "sluice/train.h"
#include "tests/bench/bench_fashion.h"
#include "train/gemm_avx512.h"

#define WORK BENCH_WORK
#define BATCH 128
#define THREADS 2
#define REPS 3
#define WARM 20

/* declared by OpenBLAS's cblas.h, but not by every cblas.h */
void openblas_set_num_threads(int num_threads);
char *openblas_get_config(void);
char *openblas_get_corename(void);

static int die(const char *what) {
    fprintf(stderr, "bench_train: %s: %s\n", what, sl_errmsg());
    return 1;
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

/* ---- FLOPs and the sgemm ceiling ---- */

/* One GEMM split along the longer of M and N into `parts` slices of C, each a
 * single-threaded OpenBLAS call: how the CPU backend runs its GEMMs on THREADS threads. */
typedef struct {
    const bench_gemm *g;
    const float *a, *b;
    float *c;
    int part, parts;
    bool own; /* Sluice's AVX-512 GEMM where the CPU backend runs it (parts of 24 x 24 and up) */
} gemm_slice;

static void run_slice(void *arg) {
    const gemm_slice *s = arg;
    const bench_gemm *x = s->g;
    bool split_n = x->n > x->m;
    int len = split_n ? x->n : x->m, i0 = (int)((long)len * s->part / s->parts),
        i1 = (int)((long)len * (s->part + 1) / s->parts);
    if (i0 >= i1) return;
    int lda = x->ta ? x->m : x->k, ldb = x->tb ? x->k : x->n, ldc = x->n, m = x->m, n = x->n;
    const float *a = s->a, *b = s->b;
    float *c = s->c;
    if (split_n) {
        b += x->tb ? (size_t)i0 * ldb : (size_t)i0;
        c += i0;
        n = i1 - i0;
    } else {
        a += x->ta ? (size_t)i0 : (size_t)i0 * lda;
        c += (size_t)i0 * ldc;
        m = i1 - i0;
    }
    if (s->own && sl__gemm512_worth(m, n) && !sl__gemm512(x->ta, x->tb, m, n, x->k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc))
        return;
    cblas_sgemm(CblasRowMajor, x->ta ? CblasTrans : CblasNoTrans, x->tb ? CblasTrans : CblasNoTrans, m, n, x->k, 1.0f,
                a, lda, b, ldb, 0.0f, c, ldc);
}

/* ---- the FMA peak: what the cores can do, whatever a BLAS does with it ---- */

typedef struct {
    int width; /* 256 or 512 bits */
    long iters;
    double out;
} fma_job;

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FMA12(f, v)                                                                                    \
    do {                                                                                               \
        v[0] = f(v[0], m, c), v[1] = f(v[1], m, c), v[2] = f(v[2], m, c), v[3] = f(v[3], m, c);       \
        v[4] = f(v[4], m, c), v[5] = f(v[5], m, c), v[6] = f(v[6], m, c), v[7] = f(v[7], m, c);       \
        v[8] = f(v[8], m, c), v[9] = f(v[9], m, c), v[10] = f(v[10], m, c), v[11] = f(v[11], m, c);   \
    } while (0)
/* 12 independent FMA chains (more than latency x ports on current cores); m ~ 1 keeps them finite */
__attribute__((target("avx2,fma"))) static double fma_loop256(long n) {
    __m256 v[12], m = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-4f);
    for (int i = 0; i < 12; i++) v[i] = _mm256_set1_ps((float)i);
    for (long i = 0; i < n; i++) FMA12(_mm256_fmadd_ps, v);
    for (int i = 1; i < 12; i++) v[0] = _mm256_add_ps(v[0], v[i]);
    return _mm256_cvtss_f32(v[0]);
}
__attribute__((target("avx512f"))) static double fma_loop512(long n) {
    __m512 v[12], m = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-4f);
    for (int i = 0; i < 12; i++) v[i] = _mm512_set1_ps((float)i);
    for (long i = 0; i < n; i++) FMA12(_mm512_fmadd_ps, v);
    for (int i = 1; i < 12; i++) v[0] = _mm512_add_ps(v[0], v[i]);
    return _mm512_reduce_add_ps(v[0]);
}
static bool fma_has(int width) {
    return width == 512 ? __builtin_cpu_supports("avx512f")
                        : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
static void fma_run(void *arg) {
    fma_job *j = arg;
    j->out = j->width == 512 ? fma_loop512(j->iters) : fma_loop256(j->iters);
}
#else
static bool fma_has(int width) {
    (void)width;
    return false;
}
static void fma_run(void *arg) { (void)arg; }
#endif

/* GFLOP/s of THREADS threads each running FMAs of `width` bits flat out (best of 3 passes
 * of ~0.2 s); 0 when the CPU lacks them. The ceiling of any float32 GEMM on these cores. */
static double fma_peak(sl_pool *pool, int width) {
    if (!fma_has(width)) return 0;
    long iters = 1L << 20;
    double best = 0;
    for (int rep = -1; rep < 3; rep++) {
        fma_job j[THREADS];
        double t0 = bench_now();
        for (int p = 0; p < THREADS; p++) {
            j[p] = (fma_job){width, iters, 0};
            if (p > 0) sl_pool_submit(pool, fma_run, &j[p]);
        }
        fma_run(&j[0]);
        sl_pool_wait(pool);
        double t = bench_now() - t0, r = 12.0 * (width / 32) * 2 * (double)iters * THREADS / t / 1e9;
        if (rep < 0) { /* calibrate to ~0.2 s a pass */
            iters = (long)((double)iters * 0.2 / (t > 1e-6 ? t : 1e-6));
            if (iters < 1) iters = 1;
        } else if (r > best) {
            best = r;
        }
        if (j[0].out == 12345.678) printf(" "); /* keeps the loops' results alive */
    }
    return best;
}

/* GFLOP/s of THREADS threads running the GEMMs `g` in turn (median of `reps` passes, each
 * at least `min_s` seconds); -1 when out of memory */
static double sgemm_rate(sl_pool *pool, const bench_gemm *g, int ng, int reps, double min_s, bool own) {
    size_t amax, bmax, cmax;
    bench_gemm_max(g, ng, &amax, &bmax, &cmax);
    float *a = malloc(amax * sizeof *a), *b = malloc(bmax * sizeof *b), *c = malloc(cmax * sizeof *c);
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return -1;
    }
    for (size_t i = 0; i < amax; i++) a[i] = (float)((i * 7919) % 1000) * 1e-3f;
    for (size_t i = 0; i < bmax; i++) b[i] = (float)((i * 104729) % 1000) * 1e-3f;
    memset(c, 0, cmax * sizeof *c);
    double flops = 0, r[8];
    for (int i = 0; i < ng; i++) flops += 2.0 * g[i].m * g[i].n * g[i].k;
    if (reps > 8) reps = 8;
    gemm_slice sl[THREADS];
    for (int rep = -1; rep < reps; rep++) { /* rep -1: warm-up (pages, caches) */
        double t0 = bench_now(), t;
        long passes = 0;
        do {
            for (int i = 0; i < ng; i++) {
                for (int p = 0; p < THREADS; p++) {
                    sl[p] = (gemm_slice){&g[i], a, b, c, p, THREADS, own};
                    if (p > 0) sl_pool_submit(pool, run_slice, &sl[p]);
                }
                run_slice(&sl[0]);
                sl_pool_wait(pool);
            }
            passes++;
            t = bench_now() - t0;
        } while (t < (rep < 0 ? min_s / 4 : min_s));
        if (rep >= 0) r[rep] = flops * passes / t / 1e9;
    }
    free(a), free(b), free(c);
    return bench_median(r, reps);
}

int main(int argc, char **argv) {
    const char *q = getenv("BENCH_QUICK");
    bool quick = q && *q && strcmp(q, "0");
    int reps = quick ? 2 : REPS;
    int64_t steps[2] = {argc > 1 ? atoll(argv[1]) : quick ? 200 : 1000, argc > 2 ? atoll(argv[2]) : quick ? 10 : 200};
    if (steps[0] < 1 || steps[1] < 1) {
        fprintf(stderr, "usage: bench_train [MLP_STEPS] [CNN_STEPS]\n");
        return 2;
    }
    char data[600];
    if (bench_fashion_data("bench_train", data, sizeof data)) return 1;
    const char *shared = getenv("SLUICE_SHARED");
    char sharedbuf[600];
    if (!shared) {
        snprintf(sharedbuf, sizeof sharedbuf, "%s/../shared", SLUICE_SRC_DIR);
        shared = sharedbuf;
    }
    printf("bench_train%s: batch %d, %d threads, CPU backend; data %s\n", quick ? " (quick)" : "", BATCH, THREADS,
           data);

    /* the sgemm ceiling first, while nothing else of ours runs. OpenBLAS single-threaded
     * per slice on THREADS threads of a pool: its own threads spin between calls, which on
     * a small shared machine measures the spinning, not the arithmetic */
    const char *kinds[2] = {"mlp", "cnn"};
    openblas_set_num_threads(1);
    sl_pool *pool;
    if (sl_pool_create(THREADS - 1, &pool)) return die("pool");
    int sq = quick ? 1024 : 2048;
    bench_gemm square = {sq, sq, sq, false, false};
    /* this machine's sgemm rate: the faster of OpenBLAS's and, where the CPU backend can run
     * it, Sluice's own AVX-512 GEMM (train/gemm_avx512.h) on the square; the models' GEMMs with
     * Sluice's unless SLUICE_CPU_GEMM pins OpenBLAS */
    const char *pin = getenv("SLUICE_CPU_GEMM");
    bool own = sl__gemm512_available() && !(pin && strcmp(pin, "blas") == 0);
    double sq_blas = sgemm_rate(pool, &square, 1, quick ? 3 : 5, quick ? 0.2 : 0.5, false);
    double sq_own = sl__gemm512_available() ? sgemm_rate(pool, &square, 1, quick ? 3 : 5, quick ? 0.2 : 0.5, true) : 0;
    double sq_rate = sq_own > sq_blas ? sq_own : sq_blas;
    double mix_rate[2], flops[2];
    for (int k = 0; k < 2; k++) {
        bench_gemm g[12];
        int ng = bench_model_gemms(k, BATCH, g);
        mix_rate[k] = sgemm_rate(pool, g, ng, quick ? 3 : 5, quick ? 0.2 : 0.5, own);
        flops[k] = bench_model_flops(k);
    }
    double peak256 = fma_peak(pool, 256), peak512 = fma_peak(pool, 512);
    double peak = peak512 > peak256 ? peak512 : peak256;
    bool own_faster = sq_own > sq_blas;
    if (sq_rate <= 0 || mix_rate[0] <= 0 || mix_rate[1] <= 0) {
        fprintf(stderr, "bench_train: out of memory for the sgemm measurement\n");
        return 1;
    }
    printf("sgemm, %d threads (median of %d): %dx%dx%d square: OpenBLAS %.1f GFLOP/s, Sluice's AVX-512 GEMM %.1f (0: "
           "not run on this machine); the models' GEMMs at batch %d as whole-batch GEMMs (%s): mlp %.1f, cnn "
           "%.1f GFLOP/s; the shares below are of the faster square, %.1f\n",
           THREADS, quick ? 3 : 5, sq, sq, sq, sq_blas, sq_own, BATCH, own ? "Sluice's GEMM" : "OpenBLAS", mix_rate[0],
           mix_rate[1], sq_rate);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("BLAS: %s; its kernels for %s (%s%s); FMA peak, %d threads: AVX2 %.1f, AVX-512 %.1f GFLOP/s "
           "(0: not on this CPU)\n",
           openblas_get_config(), openblas_get_corename(), ct ? "OPENBLAS_CORETYPE=" : "as it detects this CPU",
           ct ? ct : "", THREADS, peak256, peak512);
    printf("FLOPs per example (forward + backward, GEMM layers): mlp %.3f M, cnn %.2f M\n\n", flops[0] / 1e6,
           flops[1] / 1e6);
    fflush(stdout);

    double med_sl[2], med_an[2], ratio[2], med_share[2];
    for (int k = 0; k < 2; k++) {
        double sl[REPS] = {0}, an[REPS] = {0}, wait[REPS] = {0}, share[REPS] = {0};
        bool anchor = !(quick && k == 1);
        for (int r = 0; r < reps; r++) {
            for (int side = 0; side < 2; side++) {
                if ((side == 0) == (r % 2 == 0)) {
                    if (bench_train_run("bench_train", data, k, BATCH, "cpu", THREADS, WARM, steps[k], true, &sl[r], &wait[r])) return 1;
                    printf("  round %d sluice %s: %.0f examples/s (input wait %.1f%% of the whole run's step time, "
                           "the first pass's parse and cache fill included)\n",
                           r + 1, kinds[k], sl[r], 100 * wait[r]);
                    /* the faster square again, right after: the machine's speed drifts */
                    double sq_r = sgemm_rate(pool, &square, 1, 3, quick ? 0.2 : 0.5, own_faster);
                    if (sq_r <= 0) return die("square sgemm");
                    share[r] = flops[k] * sl[r] / 1e9 / sq_r;
                    printf("  round %d square sgemm right after: %.1f GFLOP/s; sluice %s at %.2f of it\n", r + 1, sq_r,
                           kinds[k], share[r]);
                } else if (anchor) {
                    if (run_anchor(shared, kinds[k], &an[r])) return 1;
                    printf("  round %d torch  %s: %.0f examples/s\n", r + 1, kinds[k], an[r]);
                }
                fflush(stdout);
            }
        }
        double sls[REPS], ans[REPS];
        memcpy(sls, sl, sizeof sl);
        memcpy(ans, an, sizeof an);
        med_sl[k] = bench_median(sls, reps);
        printf("%s: sluice %.0f examples/s (min %.0f, max %.0f; %lld steps after %d warm-up, median of %d)\n", kinds[k],
               med_sl[k], sls[0], sls[reps - 1], (long long)steps[k], WARM, reps);
        if (anchor) {
            med_an[k] = bench_median(ans, reps);
            ratio[k] = med_sl[k] / med_an[k];
            printf("%s: torch  %.0f examples/s (min %.0f, max %.0f; 1 epoch after %d warm-up, data in memory, median of %d)\n",
                   kinds[k], med_an[k], ans[0], ans[reps - 1], WARM, reps);
            printf("%s: ratio %.2f (medians)\n", kinds[k], ratio[k]);
        } else {
            med_an[k] = 0;
            ratio[k] = INFINITY;
            printf("%s: torch skipped (BENCH_QUICK)\n", kinds[k]);
        }
        double gf = flops[k] * med_sl[k] / 1e9;
        med_share[k] = bench_median(share, reps); /* sorts share */
        printf("%s: sluice achieves %.1f GFLOP/s = %.2f of the square sgemm rate measured first, %.2f [%.2f-%.2f] of the "
               "square measured after each run (median, min-max), %.2f of its own GEMMs' rate, %.2f of the FMA peak",
               kinds[k], gf, gf / sq_rate, med_share[k], share[0], share[reps - 1], gf / mix_rate[k],
               peak > 0 ? gf / peak : 0.0);
        if (anchor) printf("; torch %.1f GFLOP/s = %.2f", flops[k] * med_an[k] / 1e9, flops[k] * med_an[k] / 1e9 / sq_rate);
        printf("\n\n");
        fflush(stdout);
    }
    sl_pool_destroy(pool);
    int w = ratio[0] <= ratio[1] ? 0 : 1;
    printf("ratios: mlp %.2f, cnn %.2f (the worse: %s); cnn sgemm share %.2f (median of the rounds, each against the "
           "square right after it; %.2f against the square measured first; target >= 0.8)\n",
           ratio[0], ratio[1], kinds[w], med_share[1], flops[1] * med_sl[1] / 1e9 / sq_rate);
    printf("RESULT bench_train ratio=%.2f sluice=%.0f anchor=%.0f unit=examples/s\n", ratio[w], med_sl[w], med_an[w]);
    return 0;
}
