/* Benchmark: training throughput on one GPU against the GPU's own arithmetic bound, for
 * Fashion-MNIST's MLP (784-256-128-10) and TensorFlow's tutorial CNN (examples/fashion_cnn.sl)
 * at batch 128: TFRecord files -> the config pipeline (parse_example, decode_raw, scale,
 * shuffle, batch, prefetch) -> the CUDA backend's train step and optimizer (SGD momentum).
 *
 * The anchor is not another framework but the time the model's FLOPs need on this GPU:
 * each model's FLOPs per example (forward and backward, counted from the layer shapes as
 * bench_train counts them: 2 x multiply-adds of every dense and conv layer's forward GEMM,
 * its weight-gradient GEMM and, except the first layer, its input-gradient GEMM) over
 * cuBLAS's measured sgemm rate on a large square product (8192^3, float32 with TF32 off, as
 * the backend runs its GEMMs). anchor = rate / FLOPs = examples/s the arithmetic alone
 * allows; ratio = achieved / anchor (1.0 is the arithmetic bound; launches, the small
 * GEMMs' efficiency, the non-GEMM kernels and the input pipeline are the gap). The rate on
 * the model's own GEMMs at batch 128 (each timed alone, median of 5 passes) is printed too.
 *
 * Sluice's rate: REPS (3) runs per model, each WARM (50) untimed steps then STEPS timed
 * ones, timed on the host between two steps of the training loop through the trainer's
 * exchange hook (the step is asynchronous: over hundreds of steps the host and the device
 * rate agree, since the loss read-back bounds how far the host runs ahead); medians and
 * min-max printed, with the trainer's input-wait share over the whole run (warm-up and the
 * first epoch's pipeline start included).
 *
 * Usage: bench_train_gpu [MLP_STEPS] [CNN_STEPS]   (defaults 3000 and 1000). Data: see
 * bench_fashion.h. Needs a CUDA build and a GPU; without one it says so and exits 1. Ends:
 *   RESULT bench_train_gpu ratio=R sluice=X anchor=Y unit=examples/s
 * for the CNN (the MLP's line is printed above it). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice/config.h"
#include "sluice/cuda.h"
#include "sluice/train.h"
#include "tests/bench/bench_fashion.h"

#if SLUICE_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

#define BATCH 128
#define REPS 3
#define WARM 50
#define PROG "bench_train_gpu"

#if SLUICE_HAVE_CUDA
/* GFLOP/s of cuBLAS sgemm (TF32 off) on the GEMMs g, each timed alone with events: the
 * median over 5 passes of (all FLOPs / the sum of the GEMMs' times); -1 on a CUDA error */
static double sgemm_rate(const bench_gemm *g, int ng) {
    size_t amax, bmax, cmax;
    bench_gemm_max(g, ng, &amax, &bmax, &cmax);
    float *a = NULL, *b = NULL, *c = NULL, *host = NULL;
    cublasHandle_t blas = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double r[5], result = -1;
    size_t hmax = amax > bmax ? amax : bmax;
    if (!(host = malloc(hmax * sizeof *host))) return -1;
    for (size_t i = 0; i < hmax; i++) host[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f; /* not zeros */
    if (cudaMalloc((void **)&a, amax * sizeof *a) || cudaMalloc((void **)&b, bmax * sizeof *b) ||
        cudaMalloc((void **)&c, cmax * sizeof *c) || cudaMemcpy(a, host, amax * 4, cudaMemcpyHostToDevice) ||
        cudaMemcpy(b, host, bmax * 4, cudaMemcpyHostToDevice) || cudaEventCreate(&e0) || cudaEventCreate(&e1))
        goto out;
    if (cublasCreate(&blas) || cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH)) goto out;
    const float one = 1, zero = 0;
    for (int rep = -1; rep < 5; rep++) { /* rep -1: warm-up (cuBLAS picks its kernels) */
        double flops = 0, secs = 0;
        for (int i = 0; i < ng; i++) {
            const bench_gemm *x = &g[i];
            /* row-major C[m,n] = op(A) op(B) as column-major C^T = op(B)^T op(A)^T */
            int lda = x->ta ? x->m : x->k, ldb = x->tb ? x->k : x->n;
            int iters = 0;
            float ms = 0;
            if (cudaEventRecord(e0, 0)) goto out;
            do {
                if (cublasSgemm(blas, x->tb ? CUBLAS_OP_T : CUBLAS_OP_N, x->ta ? CUBLAS_OP_T : CUBLAS_OP_N, x->n, x->m,
                                x->k, &one, b, ldb, a, lda, &zero, c, x->n))
                    goto out;
                iters++;
                if (iters % 10 == 0 || (double)x->m * x->n * x->k > 1e10) {
                    if (cudaEventRecord(e1, 0) || cudaEventSynchronize(e1) || cudaEventElapsedTime(&ms, e0, e1))
                        goto out;
                }
            } while (ms < 20);
            flops += 2.0 * x->m * x->n * x->k * iters;
            secs += ms * 1e-3;
        }
        if (rep >= 0) r[rep] = flops / secs / 1e9;
    }
    result = bench_median(r, 5);
out:
    if (result < 0)
        fprintf(stderr, PROG ": sgemm measurement: CUDA error %s\n", cudaGetErrorString(cudaGetLastError()));
    if (blas) cublasDestroy(blas);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a), cudaFree(b), cudaFree(c);
    free(host);
    return result;
}
#endif

int main(int argc, char **argv) {
#if !SLUICE_HAVE_CUDA
    (void)argc, (void)argv;
    fprintf(stderr, PROG ": this build has no CUDA parts (configure with -DSLUICE_CUDA=ON where nvcc is)\n");
    return 1;
#else
    int64_t steps[2] = {argc > 1 ? atoll(argv[1]) : 3000, argc > 2 ? atoll(argv[2]) : 1000};
    if (steps[0] < 1 || steps[1] < 1) {
        fprintf(stderr, "usage: " PROG " [MLP_STEPS] [CNN_STEPS]\n");
        return 2;
    }
    int ndev = 0;
    char name[256] = "";
    if (sl_cuda_devices(&ndev, name, sizeof name) || ndev < 1) {
        fprintf(stderr, PROG ": no GPU: %s\n", ndev < 1 ? "the CUDA runtime sees no device" : sl_errmsg());
        return 1;
    }
    char data[600];
    if (bench_fashion_data(PROG, data, sizeof data)) return 1;
    printf(PROG ": %s, batch %d, CUDA backend; data %s\n", name, BATCH, data);
    bench_gemm square = {8192, 8192, 8192, false, false};
    double sq = sgemm_rate(&square, 1), mix[2], flops[2];
    for (int k = 0; k < 2; k++) {
        bench_gemm g[12];
        int ng = bench_model_gemms(k, BATCH, g);
        mix[k] = sgemm_rate(g, ng);
        flops[k] = bench_model_flops(k);
    }
    if (sq <= 0 || mix[0] <= 0 || mix[1] <= 0) return 1;
    printf("cuBLAS sgemm (float32, TF32 off; median of 5): 8192^3 square %.0f GFLOP/s; the models' GEMMs at batch %d: "
           "mlp %.0f, cnn %.0f GFLOP/s\n",
           sq, BATCH, mix[0], mix[1]);
    printf("FLOPs per example (forward + backward, GEMM layers): mlp %.3f M, cnn %.2f M\n\n", flops[0] / 1e6,
           flops[1] / 1e6);
    fflush(stdout);
    const char *kinds[2] = {"mlp", "cnn"};
    double med[2], anchor[2];
    for (int k = 0; k < 2; k++) {
        double r[REPS], w[REPS];
        for (int i = 0; i < REPS; i++) {
            if (bench_train_run(PROG, data, k, BATCH, "cuda", 0, WARM, steps[k], false, &r[i], &w[i])) return 1;
            printf("  run %d %s: %.0f examples/s (input wait %.1f%% of the whole run's step time)\n", i + 1, kinds[k],
                   r[i], 100 * w[i]);
            fflush(stdout);
        }
        med[k] = bench_median(r, REPS);
        anchor[k] = sq * 1e9 / flops[k];
        double gf = flops[k] * med[k] / 1e9;
        printf("%s: sluice %.0f examples/s (min %.0f, max %.0f; %lld steps after %d warm-up, median of %d); "
               "input wait (whole run) median %.1f%%\n",
               kinds[k], med[k], r[0], r[REPS - 1], (long long)steps[k], WARM, REPS, 100 * bench_median(w, REPS));
        printf("%s: %.0f GFLOP/s achieved = %.3f of the square sgemm rate (bound %.0f examples/s), %.3f of its own "
               "GEMMs' rate (bound %.0f examples/s)\n\n",
               kinds[k], gf, gf / sq, anchor[k], gf / mix[k], mix[k] * 1e9 / flops[k]);
        fflush(stdout);
    }
    printf("RESULT " PROG " ratio=%.3f sluice=%.0f anchor=%.0f unit=examples/s\n", med[1] / anchor[1], med[1],
           anchor[1]);
    return 0;
#endif
}
