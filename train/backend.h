/* Private to train/: the compute backend behind the model. One vtable, two
 * implementations: backend_cpu.c (OpenBLAS + C loops, threaded) and backend_cuda.cu
 * (cuBLAS + our kernels). Every op has a CPU reference; on a GPU machine every CUDA op is
 * checked against it (tests/unit/test_backend_cuda.c). Callers go through the wrappers at the
 * end of this header (train/backend.c), never the vtable: the wrappers check arguments and
 * supply every optional member's fallback.
 *
 * Conventions for every op:
 *   - float32, row-major; images are NHWC (what the pipeline produces).
 *   - Pointers passed to ops are backend memory (device memory on CUDA, host memory on
 *     the CPU backend) unless the parameter says host.
 *   - Gradient outputs ACCUMULATE (dx += ..., dW += ...): the trainer zeroes the gradient
 *     buffer once per step, so layers whose output feeds several places just add up.
 *   - Ops return SL_OK or an error (CUDA/cuBLAS failures as SL_EIO naming the call and
 *     file:line); they run in order on the backend's compute stream, so an op may return
 *     before its result is ready: to_host and sync wait.
 *   - Random ops take a seed and use a counter-based generator (sl__bk_rand_u32 below) so
 *     CPU and CUDA give the same masks for the same seed. */
#ifndef SLUICE_TRAIN_BACKEND_H
#define SLUICE_TRAIN_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/status.h"
#include "sluice/util.h"

typedef struct sl_backend sl_backend;

/* Top-k accuracy's k, the same definition as sluice/model.h's (that header is C only, and
 * the CUDA sources include this one); were the two to differ, every file that includes
 * both (train/internal.h) would warn "SL_TOPK redefined". */
#define SL_TOPK 5

/* Input staging slots every backend has (stage_begin ... stage_release below). */
#define SL_BK_STAGE_SLOTS 3

typedef enum sl_act {
    SL_ACT_NONE = 0,
    SL_ACT_RELU,
    SL_ACT_TANH,
    SL_ACT_SIGMOID,
} sl_act;

/* What a backend's GEMMs compute in (set_precision below). FP32: float32 throughout (the
 * default). BF16 / FP16: mixed precision as autocast does it: each GEMM rounds its two
 * inputs to bfloat16 / IEEE half (round to nearest even; a half overflows to infinity)
 * and multiplies and accumulates in float32 into a float32 C. Every other op, and every
 * buffer (parameters, optimizer state, activations, gradients), stays float32. The model's
 * sl_precision (sluice/model.h) says the same, but this header is also compiled as CUDA C++,
 * which cannot include model.h (its tensors hold C11 atomics): sl_model_create maps one
 * to the other. */
typedef enum sl_bk_precision {
    SL_BK_FP32 = 0,
    SL_BK_BF16,
    SL_BK_FP16,
} sl_bk_precision;

typedef struct sl_backend_ops {
    const char *name; /* "cpu", "cuda" */
    void (*destroy)(sl_backend *b);

    /* ---- memory ---- */
    sl_status (*alloc)(sl_backend *b, size_t bytes, void **out); /* zero-filled */
    void (*free)(sl_backend *b, void *p);                         /* NULL is a no-op */
    sl_status (*to_device)(sl_backend *b, void *dst, const void *host_src, size_t bytes);
    sl_status (*to_host)(sl_backend *b, void *host_dst, const void *src, size_t bytes); /* waits */
    sl_status (*copy)(sl_backend *b, void *dst, const void *src, size_t bytes);        /* device to device */
    /* Input staging through numbered slots 0..SL_BK_STAGE_SLOTS-1 (pinned host buffers and a
     * copy stream of their own on CUDA, so the copy of batch k+1 overlaps step k). For slot s:
     *   stage_begin(s)    before refilling the slot: returns once the copies the slot's last
     *                     stage_end covered have read its host buffer (the host waits on that
     *                     slot's event only), and makes later copies wait (on the copy stream)
     *                     for the compute work that stage_release(s) marked as the slot's last
     *                     reader;
     *   to_device_async   a copy on the copy stream (host_src must stay unchanged until the
     *                     slot's next stage_begin returns);
     *   stage_end(s)      records the slot's event after the copies queued so far;
     *   stage_wait(s)     compute waits for that event: this slot's copies, not later slots';
     *   stage_release(s)  the compute work queued so far is the slot's last reader.
     * No device-wide synchronisation anywhere. The CPU backend copies at once; the rest are
     * no-ops there. */
    sl_status (*host_alloc)(sl_backend *b, size_t bytes, void **out);
    void (*host_free)(sl_backend *b, void *p);
    sl_status (*to_device_async)(sl_backend *b, void *dst, const void *host_src, size_t bytes);
    sl_status (*stage_begin)(sl_backend *b, int slot);
    sl_status (*stage_end)(sl_backend *b, int slot);
    sl_status (*stage_wait)(sl_backend *b, int slot);
    sl_status (*stage_release)(sl_backend *b, int slot);
    sl_status (*sync)(sl_backend *b); /* wait for all queued work */
    /* Kernel launches so far (cuBLAS calls and memsets count one each; the CPU backend
     * launches none and answers 0): tests hold a step to a launch budget. */
    uint64_t (*launches)(sl_backend *b);

    /* ---- dense math ---- */
    /* C = alpha * op(A) * op(B) + beta * C; op(A) is M x K, op(B) is K x N, C is M x N.
     * lda/ldb/ldc are the row strides of A, B, C as stored. */
    sl_status (*gemm)(sl_backend *b, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *bm, int ldb, float beta, float *c, int ldc);
    sl_status (*fill)(sl_backend *b, float *x, float v, size_t n);
    sl_status (*axpy)(sl_backend *b, size_t n, float alpha, const float *x, float *y); /* y += alpha x */
    sl_status (*scale)(sl_backend *b, size_t n, float alpha, float *x);               /* x *= alpha */
    /* y[r][c] += bias[c] for rows x cols */
    sl_status (*bias_add)(sl_backend *b, float *y, const float *bias, size_t rows, size_t cols);
    /* db[c] += sum over r of dy[r][c] */
    sl_status (*bias_grad)(sl_backend *b, float *db, const float *dy, size_t rows, size_t cols);
    /* y = act(x) (y may be x); dx += dy * act'(.) computed from the OUTPUT y */
    sl_status (*act_forward)(sl_backend *b, sl_act act, const float *x, float *y, size_t n);
    sl_status (*act_backward)(sl_backend *b, sl_act act, const float *y, const float *dy, float *dx, size_t n);

    /* ---- convolution (NHWC) as im2col + GEMM ----
     * col is [n*oh*ow, kh*kw*c] with the kernel window in (ky, kx, channel) order; pixels
     * outside the image read as 0. col2im adds each column entry back into dx. */
    sl_status (*im2col)(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw,
                        int stride, int pad_top, int pad_left, int oh, int ow, float *col);
    sl_status (*col2im)(sl_backend *b, const float *col, int n, int h, int w, int c, int kh, int kw,
                        int stride, int pad_top, int pad_left, int oh, int ow, float *dx);

    /* ---- pooling (NHWC, window k x k, stride s, padding as for conv; max ignores padded
     * cells) ---- argmax holds, per output, the flat input index chosen. */
    sl_status (*maxpool_forward)(sl_backend *b, const float *x, int n, int h, int w, int c, int k, int s,
                                 int pad_top, int pad_left, int oh, int ow, float *y, int32_t *argmax);
    /* dx[argmax[o]] += dy[o], each input's terms added in output order (deterministic: the
     * CUDA kernel gathers per input element over the windows that cover it, no atomics) */
    sl_status (*maxpool_backward)(sl_backend *b, const float *dy, const int32_t *argmax, int n, int h, int w,
                                  int c, int k, int s, int pad_top, int pad_left, int oh, int ow, float *dx);
    /* average over the window cells inside the image (count_include_pad = false) */
    sl_status (*avgpool_forward)(sl_backend *b, const float *x, int n, int h, int w, int c, int k, int s,
                                 int pad_top, int pad_left, int oh, int ow, float *y);
    sl_status (*avgpool_backward)(sl_backend *b, const float *dy, int n, int h, int w, int c, int k, int s,
                                  int pad_top, int pad_left, int oh, int ow, float *dx);

    /* ---- loss ----
     * Softmax cross-entropy over n rows of k logits with integer labels (backend memory,
     * int32), against the target t = (1 - smoothing) onehot + smoothing / k (label
     * smoothing, 0 <= smoothing < 1; 0: the one-hot label, with exactly the numbers of plain
     * cross-entropy). Writes dlogits = (softmax - t) * grad_scale (not accumulated: set), and
     * into HOST memory the summed loss -sum_j t_j log softmax_j over the rows, the number of
     * rows whose argmax (first maximum) equals the label, and top5: the rows where fewer
     * than SL_TOPK (5) logits are strictly greater than the label's and the label's is
     * finite (ties at the boundary count in, as tf.math.in_top_k). A label outside 0..k-1
     * is SL_ERANGE. dlogits may be NULL (evaluation); any host pointer may be NULL. */
    sl_status (*softmax_xent)(sl_backend *b, const float *logits, const int32_t *labels, int n, int k,
                              float smoothing, float grad_scale, float *dlogits, double *loss_sum_host,
                              int64_t *correct_host, int64_t *top5_host);
    /* The same in two halves, so that a step never waits in the middle: start queues it
     * (the loss sum and counts go to pinned host memory behind the compute stream, no wait);
     * result waits for that copy only (an event, not the device) and returns what
     * softmax_xent would have, SL_ERANGE for a bad label included. One start at a time:
     * result before the next start. */
    sl_status (*softmax_xent_start)(sl_backend *b, const float *logits, const int32_t *labels, int n, int k,
                                    float smoothing, float grad_scale, float *dlogits);
    sl_status (*softmax_xent_result)(sl_backend *b, double *loss_sum_host, int64_t *correct_host,
                                     int64_t *top5_host);

    /* ---- dropout: keep with probability 1 - rate, scale kept values by 1 / (1 - rate);
     * element i is kept iff sl__bk_rand_u32(seed, i) >= rate * 2^32. mask gets 0 or
     * 1/(1-rate) per element; backward: dx += dy * mask. */
    sl_status (*dropout_forward)(sl_backend *b, const float *x, float *y, float *mask, size_t n,
                                 float rate, uint64_t seed);
    sl_status (*dropout_backward)(sl_backend *b, const float *dy, const float *mask, float *dx, size_t n);

    /* ---- batch normalization over rows (N*H*W) per channel c ----
     * training: batch statistics (biased variance), running_mean/var updated as
     * r = (1 - momentum) r + momentum * batch (unbiased variance for running_var), save_mean
     * and save_invstd (1/sqrt(var + eps)) kept for backward. Inference: running stats. */
    sl_status (*batchnorm_forward)(sl_backend *b, const float *x, float *y, size_t rows, int c,
                                   const float *gamma, const float *beta, float *running_mean,
                                   float *running_var, float momentum, float eps, bool training,
                                   float *save_mean, float *save_invstd);
    sl_status (*batchnorm_backward)(sl_backend *b, const float *x, const float *dy, size_t rows, int c,
                                    const float *gamma, const float *save_mean, const float *save_invstd,
                                    float *dx, float *dgamma, float *dbeta);

    /* ---- optimizers, over whole flat buffers ----
     * SGD: g' = g + wd p; v = momentum v + g'; p -= lr (nesterov ? g' + momentum v : v)
     * (PyTorch's formulation; momentum 0 is plain SGD).
     * Adam/AdamW: m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2; mhat = m/(1-b1^t),
     * vhat = v/(1-b2^t); p -= lr mhat/(sqrt(vhat)+eps); with decoupled (AdamW) the decay is
     * p -= lr wd p (before the update) and g' = g; otherwise g' = g + wd p. t >= 1. */
    sl_status (*sgd_step)(sl_backend *b, float *p, const float *g, float *vel, size_t n, float lr,
                          float momentum, bool nesterov, float weight_decay);
    sl_status (*adam_step)(sl_backend *b, float *p, const float *g, float *m, float *v, size_t n, float lr,
                           float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t t);
    /* sum of squares of x into HOST *out (for gradient norms and tests) */
    sl_status (*sum_squares)(sl_backend *b, const float *x, size_t n, double *out_host);

    /* ---- the bucketed gradient exchange (train/strategy_ring.c) ----
     * grads_out_reserve(n): make buckets 0..n-1 usable (CUDA: one event each); call before
     *   any grads_out_start, on the thread that runs the steps, never while a wait runs.
     * grads_out_start(k, host_dst, src, bytes): behind the compute work queued so far (the
     *   bucket's last backward op), copy src (backend memory) into host_dst (host_alloc'd)
     *   and mark bucket k done after it; returns at once (CUDA: the copy runs on the copy
     *   stream, so later backward kernels overlap it).
     * grads_out_wait(k): the host waits for bucket k's copy only (no device-wide wait); may
     *   be called from another thread (the exchange thread), one caller per bucket.
     * The CPU backend copies at start when host_dst != src (in place: nothing) and its wait
     * returns at once. Ops added here, at the end, keep the CUDA table's order. */
    sl_status (*grads_out_reserve)(sl_backend *b, int n);
    sl_status (*grads_out_start)(sl_backend *b, int k, void *host_dst, const void *src, size_t bytes);
    sl_status (*grads_out_wait)(sl_backend *b, int k);

    /* ---- graph joins (concatenate, global average pooling) ----
     * copy_cols: a rows x cols block between row-strided matrices:
     *   dst[r * ld_dst + j] = (accumulate ? dst[r * ld_dst + j] : 0) + src[r * ld_src + j];
     * concatenation along the last dimension writes each input into its columns of the
     * output, and its backward takes each input's columns of the output gradient back out.
     * global_avgpool over NHWC x [n, hw, c] (hw = h * w cells): y[i][ch] = the mean over the
     * cells, summed in cell order; backward: dx[i][p][ch] += dy[i][ch] * (1 / hw). */
    sl_status (*copy_cols)(sl_backend *b, float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                           size_t cols, bool accumulate);
    sl_status (*global_avgpool_forward)(sl_backend *b, const float *x, int n, int hw, int c, float *y);
    sl_status (*global_avgpool_backward)(sl_backend *b, const float *dy, int n, int hw, int c, float *dx);

    /* ---- mixed precision ----
     * The precision of every later gemm on this backend (sl_bk_precision above). CUDA: the
     * inputs go through 16-bit scratch copies into cublasGemmEx (tensor cores, float32
     * accumulation). CPU: emulated, for tests and as the reference: the inputs are rounded
     * into float32 scratch copies (each value exactly a bfloat16 / half) and go through the
     * same sgemm; a product of two such values is exact in float32, so both backends agree
     * to the rounding of float32 accumulation. No speed-up on the CPU. SL_EINVAL for an
     * unknown value (the precision is then unchanged). */
    sl_status (*set_precision)(sl_backend *b, sl_bk_precision p);

    /* ---- optional (last, so positional initializers stay valid) ----
     * act_backward_set: dx = 0 + dy * act'(.) from the output y, overwriting dx: the same
     * floats as filling dx with 0 and calling act_backward, without reading dx. NULL:
     * sl__be_act_backward_set does exactly that fill and act_backward. */
    sl_status (*act_backward_set)(sl_backend *b, sl_act act, const float *y, const float *dy, float *dx,
                                  size_t n);
    /* maxpool_relu_backward_set: the gradient through a max pool whose windows do not
     * overlap (s == k) and on through the ReLU whose output the pool read, written over all
     * of dx (n*h*w*c floats): dx[argmax[o]] = 0 + dy[o] where pooled[o] (the pool's output,
     * which is the ReLU output at argmax[o]) is > 0, every other float 0. The same floats
     * as filling dx with 0, maxpool_backward and act_backward_set(SL_ACT_RELU, relu output,
     * dx, dx), in one pass that never reads the ReLU output. SL_EINVAL (dx untouched) for
     * s != k or a bad geometry. NULL: sl__be_maxpool_relu_backward_set runs those three,
     * through a scratch buffer and the ReLU output. */
    sl_status (*maxpool_relu_backward_set)(sl_backend *b, const float *dy, const float *pooled,
                                           const int32_t *argmax, int n, int h, int w, int c, int k, int s,
                                           int pad_top, int pad_left, int oh, int ow, float *dx);
    /* bias_act: y[r][j] = act(y[r][j] + bias[j]) in place: the same floats as bias_add and
     * then act_forward, in one pass. SL_EINVAL (y untouched) for an unknown act. NULL:
     * sl__be_bias_act runs the two. */
    sl_status (*bias_act)(sl_backend *b, sl_act act, float *y, const float *bias, size_t rows, size_t cols);
    /* task_slots: how many tasks run_tasks can run at once (>= 1). run_tasks: fn(ctx, t, slot)
     * once for every task t in [0, n), on up to min(slots, task_slots) of the backend's
     * threads, tasks claimed in order; slot (below that minimum) belongs to the thread, so two
     * tasks that run at the same time never share one, and the ops a task calls run on its
     * thread alone. SL_OK, or the error of the lowest-numbered task that failed (moved to the
     * calling thread; tasks not yet started are skipped). NULL: the model loops over the work
     * itself with every op threaded (sl__be_has_tasks), and sl__be_run_tasks runs the tasks one
     * after another on the calling thread. */
    int (*task_slots)(sl_backend *b);
    sl_status (*run_tasks)(sl_backend *b, int n, int slots, sl_status (*fn)(void *ctx, int t, int slot), void *ctx);
    /* Convolution products without the im2col matrix (geometry as im2col's; W and dW the
     * (kh*kw*c) x oc kernel as gemm meets it after im2col):
     *   conv_gemm:        y ((n*oh*ow) x oc) = beta * y + im2col(x) * W
     *   conv_kernel_grad: dW = beta * dW + im2col(x)^T * dy, dy (n*oh*ow) x oc
     * The windows are read where they lie in x, or in a zero-padded copy of it in scratch
     * (scratch_floats floats), which also holds a pointer per output pixel. The floats are
     * im2col + gemm's but for the order of the sums, and do not depend on the thread count.
     * SL_EUNSUPPORTED (nothing written) where the backend multiplies this geometry through
     * im2col and gemm instead: the wrapper then does so. SL_ENOMEM: y / dW undefined. NULL
     * (a backend without them): always im2col and gemm, in sl__be_conv_gemm and
     * sl__be_conv_kernel_grad. */
    sl_status (*conv_gemm)(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw, int stride,
                           int pad_top, int pad_left, int oh, int ow, const float *W, int oc, float beta, float *y,
                           float *scratch, size_t scratch_floats);
    sl_status (*conv_kernel_grad)(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw,
                                  int stride, int pad_top, int pad_left, int oh, int ow, const float *dy, int oc,
                                  float beta, float *dW, float *scratch, size_t scratch_floats);
    /* conv_input_grad: dx = beta * dx + the input gradient of the convolution (col2im of
     * dy * W^T), dy (n*oh*ow) x oc, W as conv_gemm's; scratch as conv_gemm's (workspace).
     * SL_EUNSUPPORTED (nothing written) where the backend computes this geometry through
     * gemm and col2im instead: the wrapper then does so. NULL: always the wrapper's way
     * (sl__be_conv_input_grad). */
    sl_status (*conv_input_grad)(sl_backend *b, const float *dy, int n, int h, int w, int c, int kh, int kw,
                                 int stride, int pad_top, int pad_left, int oh, int ow, const float *W, int oc,
                                 float beta, float *dx, float *scratch, size_t scratch_floats);
} sl_backend_ops;

struct sl_backend {
    const sl_backend_ops *ops;
};

/* The CPU backend with `threads` threads for its loops and OpenBLAS (0: all cores). */
sl_status sl__backend_cpu_new(int threads, sl_backend **out);
/* ... with its plain GEMMs' kernels chosen by gemm, an sl_cpu_gemm (sluice/model.h; an
 * unknown value is SL_EINVAL, *out NULL); sl__backend_cpu_new is this with SL_CPU_GEMM_AUTO. */
sl_status sl__backend_cpu_new_gemm(int threads, int gemm, sl_backend **out);

/* The CUDA backend on device `device`. SL_EUNSUPPORTED when this build has no CUDA or the
 * machine no GPU (the message says which). */
sl_status sl__backend_cuda_new(int device, sl_backend **out);

/* ---- the wrappers (train/backend.c) --------------------------------------------------
 * What the model, the optimizers and the trainer call instead of the vtable: one function
 * per op, the op's arguments, the op's result. Each checks its arguments first (SL_EINVAL
 * naming the op and the numbers, nothing written: sizes, strides, geometry, slots, NULL
 * buffers where there is work) and, where a member is optional, supplies the fallback once,
 * with the same floats as the op: a backend implements an optional member or leaves it NULL,
 * and no caller looks. A new fused op is a member here, its wrapper and the backends that
 * have it. */

/* The backend's name ("cpu", "cuda"). */
const char *sl__be_name(const sl_backend *b);
/* destroy; NULL is a no-op. */
void sl__backend_free(sl_backend *b);

/* ---- memory: out / host_dst / dst / src non-NULL where bytes > 0; copy's ranges apart ---- */
sl_status sl__be_alloc(sl_backend *b, size_t bytes, void **out);
void sl__be_free(sl_backend *b, void *p); /* NULL is a no-op */
sl_status sl__be_to_device(sl_backend *b, void *dst, const void *host_src, size_t bytes);
sl_status sl__be_to_host(sl_backend *b, void *host_dst, const void *src, size_t bytes);
sl_status sl__be_copy(sl_backend *b, void *dst, const void *src, size_t bytes);
sl_status sl__be_host_alloc(sl_backend *b, size_t bytes, void **out);
void sl__be_host_free(sl_backend *b, void *p); /* NULL is a no-op */
sl_status sl__be_to_device_async(sl_backend *b, void *dst, const void *host_src, size_t bytes);
/* slot in 0..SL_BK_STAGE_SLOTS-1 */
sl_status sl__be_stage_begin(sl_backend *b, int slot);
sl_status sl__be_stage_end(sl_backend *b, int slot);
sl_status sl__be_stage_wait(sl_backend *b, int slot);
sl_status sl__be_stage_release(sl_backend *b, int slot);
sl_status sl__be_sync(sl_backend *b);
uint64_t sl__be_launches(sl_backend *b);

/* ---- dense math: sizes >= 0, each row stride at least its stored row's width; act one of
 * sl_act's ---- */
sl_status sl__be_gemm(sl_backend *b, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                      int lda, const float *bm, int ldb, float beta, float *c, int ldc);
sl_status sl__be_fill(sl_backend *b, float *x, float v, size_t n);
sl_status sl__be_axpy(sl_backend *b, size_t n, float alpha, const float *x, float *y);
sl_status sl__be_scale(sl_backend *b, size_t n, float alpha, float *x);
sl_status sl__be_bias_add(sl_backend *b, float *y, const float *bias, size_t rows, size_t cols);
sl_status sl__be_bias_grad(sl_backend *b, float *db, const float *dy, size_t rows, size_t cols);
sl_status sl__be_act_forward(sl_backend *b, sl_act act, const float *x, float *y, size_t n);
sl_status sl__be_act_backward(sl_backend *b, sl_act act, const float *y, const float *dy, float *dx, size_t n);
/* act_backward_set; dx must not be dy. Without it: fill dx with 0, then act_backward. */
sl_status sl__be_act_backward_set(sl_backend *b, sl_act act, const float *y, const float *dy, float *dx, size_t n);
/* bias_act (SL_EINVAL, y untouched, for an unknown act on every backend). Without it:
 * bias_add, then act_forward in place unless act is SL_ACT_NONE. */
sl_status sl__be_bias_act(sl_backend *b, sl_act act, float *y, const float *bias, size_t rows, size_t cols);

/* ---- convolution. The geometry of every conv and pool wrapper: n >= 0 images h x w x c,
 * window kh x kw, stride >= 1, padding 0 <= pad_top < kh, 0 <= pad_left < kw, output
 * oh x ow >= 1 whose last window starts inside the image ((oh-1)*stride - pad_top < h, the
 * same across). ---- */
sl_status sl__be_im2col(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw, int stride,
                        int pad_top, int pad_left, int oh, int ow, float *col);
sl_status sl__be_col2im(sl_backend *b, const float *col, int n, int h, int w, int c, int kh, int kw, int stride,
                        int pad_top, int pad_left, int oh, int ow, float *dx);
/* conv_gemm: y = beta * y + im2col(x) * W. A 1x1, stride-1, unpadded convolution's input
 * is its own im2col: one gemm on x, the op never called. Else the op; without it, or where
 * it answers SL_EUNSUPPORTED: im2col into scratch (which must then hold n*oh*ow * kh*kw*c
 * floats, SL_EINVAL if not) and gemm. */
sl_status sl__be_conv_gemm(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw, int stride,
                           int pad_top, int pad_left, int oh, int ow, const float *W, int oc, float beta, float *y,
                           float *scratch, size_t scratch_floats);
/* conv_kernel_grad: dW = beta * dW + im2col(x)^T * dy, with conv_gemm's fallbacks. */
sl_status sl__be_conv_kernel_grad(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw,
                                  int stride, int pad_top, int pad_left, int oh, int ow, const float *dy, int oc,
                                  float beta, float *dW, float *scratch, size_t scratch_floats);
/* The input gradient of a convolution: dx (n*h*w*c floats) =
 * (accumulate ? dx : 0) + col2im(dy * W^T), dy (n*oh*ow) x oc. A 1x1, stride-1, unpadded
 * convolution: one gemm into dx. Else the backend's conv_input_grad where it has one and
 * takes the geometry (cuDNN); else, given W_turned (the kernel turned,
 * W_turned[ky][kx][o][ci] = W[kh-1-ky][kw-1-kx][ci][o]) and stride 1: conv_gemm of dy, padded
 * kh-1-pad_top and kw-1-pad_left, with W_turned (no col2im), where the backend has it and
 * takes the geometry; else gemm into scratch (n*oh*ow * kh*kw*c floats), dx filled with 0
 * unless accumulate, and col2im. */
sl_status sl__be_conv_input_grad(sl_backend *b, const float *dy, int n, int h, int w, int c, int kh, int kw,
                                 int stride, int pad_top, int pad_left, int oh, int ow, const float *W,
                                 const float *W_turned, int oc, bool accumulate, float *dx, float *scratch,
                                 size_t scratch_floats);
/* Whether sl__be_conv_input_grad can use a turned kernel: the backend has conv_gemm and no
 * conv_input_grad (the CPU backend, whose buffers are host memory, where the caller turns
 * them). */
bool sl__be_turns_kernels(const sl_backend *b);

/* ---- pooling (the geometry above, kh = kw = k, stride s) ---- */
sl_status sl__be_maxpool_forward(sl_backend *b, const float *x, int n, int h, int w, int c, int k, int s,
                                 int pad_top, int pad_left, int oh, int ow, float *y, int32_t *argmax);
sl_status sl__be_maxpool_backward(sl_backend *b, const float *dy, const int32_t *argmax, int n, int h, int w, int c,
                                  int k, int s, int pad_top, int pad_left, int oh, int ow, float *dx);
sl_status sl__be_avgpool_forward(sl_backend *b, const float *x, int n, int h, int w, int c, int k, int s,
                                 int pad_top, int pad_left, int oh, int ow, float *y);
sl_status sl__be_avgpool_backward(sl_backend *b, const float *dy, int n, int h, int w, int c, int k, int s,
                                  int pad_top, int pad_left, int oh, int ow, float *dx);
/* maxpool_relu_backward_set (SL_EINVAL, dx untouched, for s != k on every backend).
 * relu_out is the ReLU's output (the pool's input) and scratch n*h*w*c floats apart from dx:
 * the fallback, without the op, fills scratch with 0, runs maxpool_backward into it and
 * sl__be_act_backward_set(SL_ACT_RELU, relu_out, scratch, dx). */
sl_status sl__be_maxpool_relu_backward_set(sl_backend *b, const float *dy, const float *pooled,
                                           const float *relu_out, const int32_t *argmax, int n, int h, int w, int c,
                                           int k, int s, int pad_top, int pad_left, int oh, int ow, float *dx,
                                           float *scratch);

/* ---- loss: n >= 0 rows of k >= 1 logits, 0 <= smoothing < 1 ---- */
sl_status sl__be_softmax_xent(sl_backend *b, const float *logits, const int32_t *labels, int n, int k,
                              float smoothing, float grad_scale, float *dlogits, double *loss_sum_host,
                              int64_t *correct_host, int64_t *top5_host);
sl_status sl__be_softmax_xent_start(sl_backend *b, const float *logits, const int32_t *labels, int n, int k,
                                    float smoothing, float grad_scale, float *dlogits);
sl_status sl__be_softmax_xent_result(sl_backend *b, double *loss_sum_host, int64_t *correct_host,
                                     int64_t *top5_host);

/* ---- dropout (0 <= rate < 1), batch normalization (c >= 1) ---- */
sl_status sl__be_dropout_forward(sl_backend *b, const float *x, float *y, float *mask, size_t n, float rate,
                                 uint64_t seed);
sl_status sl__be_dropout_backward(sl_backend *b, const float *dy, const float *mask, float *dx, size_t n);
sl_status sl__be_batchnorm_forward(sl_backend *b, const float *x, float *y, size_t rows, int c, const float *gamma,
                                   const float *beta, float *running_mean, float *running_var, float momentum,
                                   float eps, bool training, float *save_mean, float *save_invstd);
sl_status sl__be_batchnorm_backward(sl_backend *b, const float *x, const float *dy, size_t rows, int c,
                                    const float *gamma, const float *save_mean, const float *save_invstd, float *dx,
                                    float *dgamma, float *dbeta);

/* ---- optimizers (vel may be NULL with momentum 0; adam's t >= 1) ---- */
sl_status sl__be_sgd_step(sl_backend *b, float *p, const float *g, float *vel, size_t n, float lr, float momentum,
                          bool nesterov, float weight_decay);
sl_status sl__be_adam_step(sl_backend *b, float *p, const float *g, float *m, float *v, size_t n, float lr,
                           float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t t);
sl_status sl__be_sum_squares(sl_backend *b, const float *x, size_t n, double *out_host);

/* ---- the bucketed gradient exchange (n, k >= 0) ---- */
sl_status sl__be_grads_out_reserve(sl_backend *b, int n);
sl_status sl__be_grads_out_start(sl_backend *b, int k, void *host_dst, const void *src, size_t bytes);
sl_status sl__be_grads_out_wait(sl_backend *b, int k);

/* ---- graph joins: copy_cols' cols within both row strides; global pools' hw, c >= 1 ---- */
sl_status sl__be_copy_cols(sl_backend *b, float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                           size_t cols, bool accumulate);
sl_status sl__be_global_avgpool_forward(sl_backend *b, const float *x, int n, int hw, int c, float *y);
sl_status sl__be_global_avgpool_backward(sl_backend *b, const float *dy, int n, int hw, int c, float *dx);

/* ---- mixed precision (SL_EINVAL for an unknown value, the precision unchanged) ---- */
sl_status sl__be_set_precision(sl_backend *b, sl_bk_precision p);

/* ---- tasks ----
 * has_tasks: whether the backend has run_tasks (a caller that would split its work
 * differently for it asks). task_slots: the op's answer, 1 without it. run_tasks (n >= 0,
 * slots >= 1, fn non-NULL): the op; without it fn(ctx, t, 0) for t = 0, 1, ... on the calling
 * thread, stopping at the first error, which it returns. */
bool sl__be_has_tasks(const sl_backend *b);
int sl__be_task_slots(sl_backend *b);
sl_status sl__be_run_tasks(sl_backend *b, int n, int slots, sl_status (*fn)(void *ctx, int t, int slot), void *ctx);

/* The counter-based generator dropout uses (splitmix64 of seed + i, high 32 bits), shared
 * by the CPU and CUDA code so both draw the same masks. */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline uint32_t sl__bk_rand_u32(uint64_t seed, uint64_t i) {
    return (uint32_t)(sl_mix64(seed + SL_GOLDEN64 * (i + 1)) >> 32);
}

#endif
