/* The CPU backend's batch normalization (train/backend.h batchnorm_forward,
 * batchnorm_backward) over rows x c NHWC activations, per channel: the batch statistics and
 * the backward sums in double, in fixed blocks of rows, then one pass applying them.
 *
 * Workload: the ResNet examples' batchnorm after every convolution, tens of MB per step. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <math.h>
#include <stdlib.h>

#include "train/backend_cpu_priv.h"

/* Per-channel sums over rows, in double, in BN_BLOCKS fixed blocks of rows (one partial row
 * of sums each, added in block order): threaded, yet the same bits for any thread count.
 * Channels are contiguous, so every inner loop runs along a row. */
#define BN_BLOCKS 16

enum { BN_SUM_X, BN_SUM_SQ, BN_SUM_DY };

typedef struct bn_ctx {
    const float *x, *dy;
    float *y, *dx;
    size_t rows;
    int c, mode;
    const double *mean;       /* BN_SUM_SQ */
    const float *smean, *sinv; /* BN_SUM_DY / backward: saved statistics */
    const float *scale, *shift; /* forward apply */
    const double *sdy, *sdyx; /* backward apply */
    const float *gamma;
    double *part;             /* [BN_BLOCKS][2c] */
} bn_ctx;

static void bn_sum_blocks(void *vc, size_t lo, size_t hi) {
    const bn_ctx *k = vc;
    const int c = k->c;
    for (size_t blk = lo; blk < hi; blk++) {
        double *p = k->part + blk * 2 * (size_t)c, *q = p + c;
        size_t r0 = k->rows * blk / BN_BLOCKS, r1 = k->rows * (blk + 1) / BN_BLOCKS;
        for (int j = 0; j < 2 * c; j++) p[j] = 0.0;
        for (size_t r = r0; r < r1; r++) {
            const float *x = k->x + r * c;
            if (k->mode == BN_SUM_X) {
                for (int j = 0; j < c; j++) p[j] += x[j];
            } else if (k->mode == BN_SUM_SQ) {
                for (int j = 0; j < c; j++) {
                    double d = x[j] - k->mean[j];
                    p[j] += d * d;
                }
            } else {
                const float *dy = k->dy + r * c;
                for (int j = 0; j < c; j++) {
                    p[j] += dy[j];
                    q[j] += dy[j] * (((double)x[j] - k->smean[j]) * k->sinv[j]);
                }
            }
        }
    }
}

/* Sum the blocks' partials into out[0..2c) in block order. */
static void bn_sums(cpu_backend *b, bn_ctx *k, double *out) {
    par_for(b, BN_BLOCKS, k->rows * (size_t)k->c * 2, bn_sum_blocks, k);
    for (int j = 0; j < 2 * k->c; j++) out[j] = 0.0;
    for (size_t blk = 0; blk < BN_BLOCKS; blk++)
        for (int j = 0; j < 2 * k->c; j++) out[j] += k->part[blk * 2 * (size_t)k->c + j];
}

static void bn_apply_rows(void *vc, size_t lo, size_t hi) {
    const bn_ctx *k = vc;
    const int c = k->c;
    for (size_t r = lo; r < hi; r++) {
        const float *x = k->x + r * c;
        float *y = k->y + r * c;
        for (int j = 0; j < c; j++) y[j] = x[j] * k->scale[j] + k->shift[j];
    }
}

static void bn_dx_rows(void *vc, size_t lo, size_t hi) {
    const bn_ctx *k = vc;
    const int c = k->c;
    const double inv_n = 1.0 / (double)k->rows;
    for (size_t r = lo; r < hi; r++) {
        const float *x = k->x + r * c, *dy = k->dy + r * c;
        float *dx = k->dx + r * c;
        for (int j = 0; j < c; j++) {
            double xh = ((double)x[j] - k->smean[j]) * k->sinv[j];
            double g = (double)k->gamma[j] * k->sinv[j];
            dx[j] += (float)(g * (dy[j] - k->sdy[j] * inv_n - xh * k->sdyx[j] * inv_n));
        }
    }
}

static sl_status cpu_batchnorm_forward(sl_backend *bb, const float *x, float *y, size_t rows, int c,
                                       const float *gamma, const float *beta, float *running_mean,
                                       float *running_var, float momentum, float eps, bool training,
                                       float *save_mean, float *save_invstd) {
    cpu_backend *b = (cpu_backend *)bb;
    if (c <= 0) return sl_err(SL_EINVAL, "batchnorm_forward: %d channels", c);
    if (training && rows == 0) return sl_err(SL_EINVAL, "batchnorm_forward: training on 0 rows");
    double *acc = malloc(((size_t)BN_BLOCKS + 2) * 2 * (size_t)c * sizeof(double));
    float *scale = malloc((size_t)c * 2 * sizeof(float));
    if (!acc || !scale) {
        free(acc);
        free(scale);
        return sl_err(SL_ENOMEM, "batchnorm_forward: out of memory");
    }
    double *mean = acc, *var = acc + 2 * (size_t)c; /* each [2c]: only the first c used */
    float *shift = scale + c;
    bn_ctx k = {.x = x, .y = y, .rows = rows, .c = c, .part = acc + 4 * (size_t)c};
    if (training) {
        k.mode = BN_SUM_X;
        bn_sums(b, &k, mean);
        for (int j = 0; j < c; j++) mean[j] /= (double)rows;
        k.mode = BN_SUM_SQ;
        k.mean = mean;
        bn_sums(b, &k, var);
        for (int j = 0; j < c; j++) {
            double v = var[j] / (double)rows;
            double unbiased = rows > 1 ? var[j] / (double)(rows - 1) : v;
            double inv = 1.0 / sqrt(v + eps);
            if (save_mean) save_mean[j] = (float)mean[j];
            if (save_invstd) save_invstd[j] = (float)inv;
            running_mean[j] = (float)((1.0 - momentum) * running_mean[j] + momentum * mean[j]);
            running_var[j] = (float)((1.0 - momentum) * running_var[j] + momentum * unbiased);
            scale[j] = (float)(gamma[j] * inv);
            shift[j] = (float)(beta[j] - mean[j] * gamma[j] * inv);
        }
    } else {
        for (int j = 0; j < c; j++) {
            double inv = 1.0 / sqrt((double)running_var[j] + eps);
            scale[j] = (float)(gamma[j] * inv);
            shift[j] = (float)(beta[j] - running_mean[j] * gamma[j] * inv);
        }
    }
    k.scale = scale;
    k.shift = shift;
    par_for(b, rows, 2 * rows * (size_t)c, bn_apply_rows, &k);
    free(acc);
    free(scale);
    return SL_OK;
}

static sl_status cpu_batchnorm_backward(sl_backend *bb, const float *x, const float *dy, size_t rows, int c,
                                        const float *gamma, const float *save_mean, const float *save_invstd,
                                        float *dx, float *dgamma, float *dbeta) {
    cpu_backend *b = (cpu_backend *)bb;
    if (c <= 0 || rows == 0) return sl_err(SL_EINVAL, "batchnorm_backward: %zu rows of %d channels", rows, c);
    double *acc = malloc(((size_t)BN_BLOCKS + 1) * 2 * (size_t)c * sizeof(double));
    if (!acc) return sl_err(SL_ENOMEM, "batchnorm_backward: out of memory");
    double *sums = acc; /* sum dy, then sum dy * xhat */
    bn_ctx k = {.x = x, .dy = dy, .dx = dx, .rows = rows, .c = c, .mode = BN_SUM_DY, .smean = save_mean,
                .sinv = save_invstd, .gamma = gamma, .part = acc + 2 * (size_t)c};
    bn_sums(b, &k, sums);
    for (int j = 0; j < c; j++) {
        dbeta[j] += (float)sums[j];
        dgamma[j] += (float)sums[c + j];
    }
    k.sdy = sums;
    k.sdyx = sums + c;
    par_for(b, rows, 4 * rows * (size_t)c, bn_dx_rows, &k);
    free(acc);
    return SL_OK;
}


/* This file's members of the backend's op table (train/backend_cpu.c). */
void sl__cpu_norm_ops(sl_backend_ops *o) {
    o->batchnorm_forward = cpu_batchnorm_forward, o->batchnorm_backward = cpu_batchnorm_backward;
}
