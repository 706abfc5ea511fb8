/* Private to the CPU backend's files (train/backend_cpu.c, _pool.c, _conv.c): the backend's
 * state, its parallel loop (inline here, so the files call one way only), the geometry check
 * of the window ops, and the pooling and convolution ops that backend_cpu.c's op table names. */
#ifndef SLUICE_TRAIN_BACKEND_CPU_PRIV_H
#define SLUICE_TRAIN_BACKEND_CPU_PRIV_H

#include "train/backend.h"
#include "train/cpu_team.h"

typedef struct cpu_backend {
    sl_backend base;
    int threads;
    sl__team *team; /* threads - 1 workers (train/cpu_team.h); NULL when single-threaded */
    sl_status xent_status; /* softmax_xent_start's outcome, for softmax_xent_result */
    double xent_loss;
    int64_t xent_correct, xent_top5;
    char xent_msg[256];
    sl_bk_precision prec; /* set_precision: GEMM inputs rounded to bf16 / fp16 (emulated) */
    float *lp;            /* the rounded copies of a GEMM's A and B */
    size_t lp_cap;        /* floats */
} cpu_backend;

/* Run fn over [0, n) in up to b->threads contiguous parts when `work` (roughly, floats
 * touched) is large enough, on the backend's team (train/cpu_team.h: the calling thread
 * runs parts too, all of them when the workers do not come; inside a run_tasks task the team
 * is taken, so the loop runs alone). Returns when every part has. */
#define PAR_MIN_WORK ((size_t)1 << 16)
#define MAX_PARTS 64

static inline void par_for(cpu_backend *b, size_t n, size_t work, sl__range_fn fn, void *ctx) {
    int parts = b->threads;
    if (parts > MAX_PARTS) parts = MAX_PARTS;
    if ((size_t)parts > n) parts = (int)n;
    if (!b->team || parts <= 1 || work < PAR_MIN_WORK) {
        if (n) fn(ctx, 0, n);
        return;
    }
    if (work / (size_t)parts < PAR_MIN_WORK / 2) {
        parts = (int)(work / (PAR_MIN_WORK / 2));
        if (parts < 2) parts = 2;
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

/* The pooling ops (train/backend.h says what each computes), in backend_cpu_pool.c. */
sl_status sl__cpu_maxpool_forward(sl_backend *b, const float *x, int n, int h, int w, int c, int k, int s,
                                  int pad_top, int pad_left, int oh, int ow, float *y, int32_t *argmax);
sl_status sl__cpu_maxpool_backward(sl_backend *b, const float *dy, const int32_t *argmax, int n, int h, int w,
                                   int c, int k, int s, int pad_top, int pad_left, int oh, int ow, float *dx);
sl_status sl__cpu_maxpool_relu_backward_set(sl_backend *b, const float *dy, const float *pooled,
                                            const int32_t *argmax, int n, int h, int w, int c, int k, int s,
                                            int pad_top, int pad_left, int oh, int ow, float *dx);
sl_status sl__cpu_avgpool_forward(sl_backend *b, const float *x, int n, int h, int w, int c, int k, int s,
                                  int pad_top, int pad_left, int oh, int ow, float *y);
sl_status sl__cpu_avgpool_backward(sl_backend *b, const float *dy, int n, int h, int w, int c, int k, int s,
                                   int pad_top, int pad_left, int oh, int ow, float *dx);

/* Convolutions without im2col (backend_cpu_conv.c; train/backend.h says what each computes). */
sl_status sl__cpu_conv_gemm(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw, int stride,
                            int pad_top, int pad_left, int oh, int ow, const float *W, int oc, float beta, float *y,
                            float *scratch, size_t scratch_floats);
sl_status sl__cpu_conv_kernel_grad(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw,
                                   int stride, int pad_top, int pad_left, int oh, int ow, const float *dy, int oc,
                                   float beta, float *dW, float *scratch, size_t scratch_floats);

#endif
