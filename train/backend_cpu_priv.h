/* Private to the CPU backend's files: the backend's state, its parallel loop (inline here, so
 * the files call one way only), the geometry check of the window ops, and how the op table
 * is put together: each file below fills in its own members (its sl__cpu_*_ops), once, in
 * backend_cpu.c, which holds the rest (memory, staging, tasks):
 *   backend_cpu_gemm.c  gemm, with its choice of kernels (sl_model_opts.cpu_gemm)
 *   backend_cpu_vec.c   elementwise and row ops: fill, axpy, bias, activations, dropout,
 *                       column copies, global average pooling, the optimizers
 *   backend_cpu_norm.c  batch normalization
 *   backend_cpu_loss.c  softmax cross-entropy
 *   backend_cpu_conv.c  im2col / col2im and the convolutions without im2col
 *   backend_cpu_pool.c  max and average pooling */
#ifndef SLUICE_TRAIN_BACKEND_CPU_PRIV_H
#define SLUICE_TRAIN_BACKEND_CPU_PRIV_H

#include "sluice/model.h"
#include "train/backend.h"
#include "train/cpu_team.h"

typedef struct cpu_backend {
    sl_backend base;
    int threads;
    sl__team *team; /* threads - 1 workers (train/cpu_team.h); NULL when single-threaded */
    sl_cpu_gemm gemm; /* the plain GEMMs' kernels (sluice/model.h); AVX512 only where AVX-512F runs */
    sl_status xent_status; /* softmax_xent_start's outcome, for softmax_xent_result */
    double xent_loss;
    int64_t xent_correct, xent_top5;
    char xent_msg[256];
    sl_bk_precision prec; /* set_precision: GEMM inputs rounded to bf16 / fp16 (emulated) */
    float *lp;            /* the rounded copies of a GEMM's A and B */
    size_t lp_cap;        /* floats */
} cpu_backend;

/* Run fn over [0, n) in up to b->threads contiguous parts (par_parts) when `work` (roughly,
 * floats touched) is large enough, on the backend's team (train/cpu_team.h: the calling
 * thread runs parts too, all of them when the workers do not come; inside a run_tasks task
 * the team is taken, so the loop runs alone). Returns when every part has. */
#define PAR_MIN_WORK ((size_t)1 << 16)
#define MAX_PARTS 64

static inline int par_parts(const cpu_backend *b, size_t n, size_t work) {
    int parts = b->threads < MAX_PARTS ? b->threads : MAX_PARTS;
    if ((size_t)parts > n) parts = (int)n;
    if (!b->team || parts <= 1 || work < PAR_MIN_WORK) return 1;
    if (work / (size_t)parts < PAR_MIN_WORK / 2) {
        parts = (int)(work / (PAR_MIN_WORK / 2));
        if (parts < 2) parts = 2;
    }
    return parts;
}

static inline void par_for(cpu_backend *b, size_t n, size_t work, sl__range_fn fn, void *ctx) {
    int parts = par_parts(b, n, work);
    if (parts <= 1) {
        if (n) fn(ctx, 0, n);
        return;
    }
    if (!sl__team_run(b->team, parts, n, fn, ctx)) fn(ctx, 0, n); /* the team is busy: alone */
}

/* SL_OK, or SL_EINVAL naming op and the geometry when a size is out of range. */
static inline sl_status conv_check(const char *op, int n, int h, int w, int c, int kh, int kw, int stride, int oh, int ow) {
    if (n < 0 || h <= 0 || w <= 0 || c <= 0 || kh <= 0 || kw <= 0 || stride <= 0 || oh <= 0 || ow <= 0)
        return sl_err(SL_EINVAL, "%s: bad geometry n=%d h=%d w=%d c=%d kernel %dx%d stride %d out %dx%d", op, n,
                      h, w, c, kh, kw, stride, oh, ow);
    return SL_OK;
}

/* A window op's geometry checked (conv_check: SL_EINVAL naming op, nothing run), then fn over
 * [0, items) by par_for with `work`: SL_OK when it ran. */
static inline sl_status window_run(sl_backend *b, const char *op, int n, int h, int w, int c, int kh, int kw,
                                   int stride, int oh, int ow, size_t items, size_t work, sl__range_fn fn,
                                   void *ctx) {
    sl_status st = conv_check(op, n, h, w, c, kh, kw, stride, oh, ow);
    if (!st) par_for((cpu_backend *)b, items, work, fn, ctx);
    return st;
}

/* Each file's members of the op table (what each computes: train/backend.h). conv's
 * conv_gemm and conv_kernel_grad multiply without im2col wherever the CPU has AVX-512F,
 * whatever b->gemm says (else SL_EUNSUPPORTED: the model runs im2col and gemm). */
void sl__cpu_gemm_ops(sl_backend_ops *o);
void sl__cpu_vec_ops(sl_backend_ops *o);
void sl__cpu_norm_ops(sl_backend_ops *o);
void sl__cpu_loss_ops(sl_backend_ops *o);
void sl__cpu_conv_ops(sl_backend_ops *o);
void sl__cpu_pool_ops(sl_backend_ops *o);

/* For tests (backend_cpu_gemm.c): how the process multiplies a shape under
 * SL_CPU_GEMM_AUTO: 1 Sluice's AVX-512 GEMM, 0 OpenBLAS, -1 not decided (not yet multiplied,
 * or a shape below 24 x 24, which OpenBLAS multiplies either way). */
int sl__cpu_gemm_choice(bool ta, bool tb, int m, int n, int k);

#endif
