// The CUDA backend's convolutions through cuDNN (a build with SLUICE_HAVE_CUDNN): forward
// (conv_gemm), backward data (conv_input_grad) and backward filter (conv_kernel_grad) in
// NHWC, float32, the sl_backend_ops members of those names (train/backend.h). Without cuDNN
// in the build, or where cuDNN could not be opened, the members answer SL_EUNSUPPORTED and
// the wrappers run im2col / col2im + cuBLAS as before.
//
// Per shape (the op, the geometry, the output channels, the room in the caller's scratch)
// the descriptors and the algorithm are made once and kept (a small table, oldest replaced
// when full): the first algorithm of cuDNN's heuristic list that is deterministic, succeeds
// and whose workspace fits in the scratch beside the kernel's transposed copy. Nothing is
// allocated: the caller's scratch (the im2col buffer the model plans) holds the kernel in
// cuDNN's K x R x S x C layout (ours is R x S x C x K, TensorFlow's HWIO) and the workspace.
// Math is FMA (no TF32: the CPU reference's float32). Geometries cuDNN cannot express
// (padding larger below than above, as "same" gives on some strided shapes), 16-bit
// precision (whose GEMM rounding the im2col path implements) and sizes over 2^31 elements
// are SL_EUNSUPPORTED, so the wrapper's way runs.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/backend_cuda_priv.cuh"

#if SLUICE_HAVE_CUDNN
#include <cudnn.h>

#define CKD(call)                                                                         \
    do {                                                                                  \
        cudnnStatus_t ck_d_ = (call);                                                     \
        if (ck_d_ != CUDNN_STATUS_SUCCESS)                                                \
            return sl_err(SL_EIO, "cuDNN error: %s: %s (%s:%d)", #call,                   \
                          cudnnGetErrorString(ck_d_), __FILE__, __LINE__);                \
    } while (0)

enum { DNN_FWD = 0, DNN_BWD_DATA, DNN_BWD_FILTER };
enum { DNN_KEY = 14, DNN_PLANS = 32, DNN_ALGOS = 16 };

typedef struct dnn_plan {
    bool used;
    int key[DNN_KEY]; // op, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, oc, scratch KiB (capped)
    unsigned long long age;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t f;
    cudnnConvolutionDescriptor_t conv;
    int algo;
    size_t ws; // the algorithm's workspace in bytes
} dnn_plan;

struct cu_dnn {
    cudnnHandle_t h;
    dnn_plan plans[DNN_PLANS];
    unsigned long long clock;
    unsigned long long calls; // convolutions run through cuDNN (tests)
};

static void plan_clear(dnn_plan *p) {
    if (p->x) cudnnDestroyTensorDescriptor(p->x);
    if (p->y) cudnnDestroyTensorDescriptor(p->y);
    if (p->f) cudnnDestroyFilterDescriptor(p->f);
    if (p->conv) cudnnDestroyConvolutionDescriptor(p->conv);
    memset(p, 0, sizeof *p);
}

sl_status sl__cu_dnn_open(cuda_backend *cb) {
    cu_dnn *d = (cu_dnn *)calloc(1, sizeof *d);
    if (!d) return sl_err(SL_ENOMEM, "CUDA backend: out of memory for cuDNN's plans");
    cudnnStatus_t st = cudnnCreate(&d->h);
    if (st != CUDNN_STATUS_SUCCESS) {
        // a library that does not match the driver or the GPU: convolutions stay on cuBLAS
        fprintf(stderr, "warning: CUDA backend: cuDNN could not be opened (%s); convolutions run as im2col + cuBLAS\n",
                cudnnGetErrorString(st));
        free(d);
        return SL_OK;
    }
    cb->dnn = d;
    CKD(cudnnSetStream(d->h, cb->compute));
    return SL_OK;
}

void sl__cu_dnn_close(cuda_backend *cb) {
    cu_dnn *d = cb->dnn;
    if (!d) return;
    for (int i = 0; i < DNN_PLANS; i++) plan_clear(&d->plans[i]);
    cudnnDestroy(d->h);
    free(d);
    cb->dnn = NULL;
}

extern "C" unsigned long long sl__cu_dnn_calls(sl_backend *b) { return CB(b)->dnn ? CB(b)->dnn->calls : 0; }

// The kernel's transpose: out[j][i] = a[i][j] (+ beta * out[j][i] where beta != 0), a rows x cols.
static __global__ void k_transpose(const float *a, int rows, int cols, float beta, float *out) {
    size_t total = (size_t)rows * cols;
    GRID_STRIDE(i, total) {
        int r = (int)(i / (size_t)cols), c = (int)(i % (size_t)cols);
        size_t o = (size_t)c * rows + r;
        out[o] = beta == 0.0f ? a[i] : a[i] + beta * out[o];
    }
}

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

// The first of cuDNN's `got` heuristic answers that succeeds, is deterministic and needs at
// most `room` bytes of workspace: *algo and *ws (*algo stays -1 when none does). One body for
// the three ops' perf structs, which differ only in their algorithm's enum.
template <typename Perf> static void pick_algo(const Perf *perf, int got, size_t room, int *algo, size_t *ws) {
    for (int i = 0; i < got && *algo < 0; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC &&
            perf[i].memory <= room) {
            *algo = (int)perf[i].algo;
            *ws = perf[i].memory;
        }
}

// A shape cuDNN does not take, remembered as such (algo -1, no descriptors): the next call
// with it is refused without asking cuDNN again.
static sl_status refuse(cu_dnn *d, dnn_plan *p, const int *key) {
    plan_clear(p);
    memcpy(p->key, key, sizeof p->key);
    p->used = true;
    p->age = ++d->clock;
    p->algo = -1;
    return SL_EUNSUPPORTED;
}

// The plan for `op` on this geometry: made on first use, then kept. SL_EUNSUPPORTED where
// cuDNN cannot take it (kept as a refusal).
static sl_status plan_for(cuda_backend *cb, int op, int n, int h, int w, int c, int kh, int kw, int stride,
                          int pad_top, int pad_left, int oh, int ow, int oc, size_t room, dnn_plan **out) {
    cu_dnn *d = cb->dnn;
    size_t kib = room >> 10;
    int key[DNN_KEY] = {op, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, oc,
                        kib > (size_t)INT32_MAX ? INT32_MAX : (int)kib};
    dnn_plan *p = NULL, *oldest = &d->plans[0];
    for (int i = 0; i < DNN_PLANS && !p; i++) {
        dnn_plan *q = &d->plans[i];
        if (q->used && !memcmp(q->key, key, sizeof key)) p = q;
        else if (!q->used || (oldest->used && q->age < oldest->age)) oldest = q;
    }
    if (p) {
        p->age = ++d->clock;
        *out = p;
        return p->algo < 0 ? SL_EUNSUPPORTED : SL_OK;
    }
    p = oldest;
    plan_clear(p);
    CKD(cudnnCreateTensorDescriptor(&p->x));
    CKD(cudnnCreateTensorDescriptor(&p->y));
    CKD(cudnnCreateFilterDescriptor(&p->f));
    CKD(cudnnCreateConvolutionDescriptor(&p->conv));
    CKD(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, n, c, h, w));
    CKD(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, n, oc, oh, ow));
    CKD(cudnnSetFilter4dDescriptor(p->f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, oc, c, kh, kw));
    CKD(cudnnSetConvolution2dDescriptor(p->conv, pad_top, pad_left, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                        CUDNN_DATA_FLOAT));
    CKD(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH));
    int on = 0, oc2 = 0, oh2 = 0, ow2 = 0;
    CKD(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->f, &on, &oc2, &oh2, &ow2));
    if (on != n || oc2 != oc || oh2 != oh || ow2 != ow) // padding below or right larger than above or left
        return refuse(d, p, key);
    size_t kbytes = align256((size_t)kh * kw * c * oc * sizeof(float));
    size_t ws_room = room > kbytes ? room - kbytes : 0;
    int got = 0, algo = -1;
    size_t ws = 0;
    if (op == DNN_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[DNN_ALGOS];
        CKD(cudnnGetConvolutionForwardAlgorithm_v7(d->h, p->x, p->f, p->conv, p->y, DNN_ALGOS, &got, perf));
        pick_algo(perf, got, ws_room, &algo, &ws);
    } else if (op == DNN_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[DNN_ALGOS];
        CKD(cudnnGetConvolutionBackwardDataAlgorithm_v7(d->h, p->f, p->y, p->conv, p->x, DNN_ALGOS, &got, perf));
        pick_algo(perf, got, ws_room, &algo, &ws);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[DNN_ALGOS];
        CKD(cudnnGetConvolutionBackwardFilterAlgorithm_v7(d->h, p->x, p->y, p->conv, p->f, DNN_ALGOS, &got, perf));
        pick_algo(perf, got, ws_room, &algo, &ws);
    }
    if (algo < 0) return refuse(d, p, key); // no deterministic algorithm fits the scratch
    memcpy(p->key, key, sizeof key);
    p->used = true;
    p->age = ++d->clock;
    p->algo = algo;
    p->ws = ws;
    *out = p;
    return SL_OK;
}

// The plan for `op` and where its buffers lie in the caller's scratch: the kernel in cuDNN's
// layout (*wk, K x R x S x C floats) and then the algorithm's workspace (*ws, NULL when it
// needs none). SL_EUNSUPPORTED, nothing queued, where cuDNN does not take the call: cuDNN not
// open, 16-bit precision, no scratch, no images, sizes over int's, or the shape (plan_for).
static sl_status dnn_begin(cuda_backend *cb, int op, int n, int h, int w, int c, int kh, int kw, int stride,
                           int pad_top, int pad_left, int oh, int ow, int oc, float *scratch, size_t scratch_floats,
                           dnn_plan **p, float **wk, void **ws) {
    if (!cb->dnn || cb->prec != SL_BK_FP32 || !scratch || n <= 0) return SL_EUNSUPPORTED;
    size_t in = (size_t)n * h * w * c, outn = (size_t)n * oh * ow * oc, k = (size_t)kh * kw * c * oc;
    if (in > (size_t)INT32_MAX || outn > (size_t)INT32_MAX || k > (size_t)INT32_MAX) return SL_EUNSUPPORTED;
    sl_status s = plan_for(cb, op, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, oc,
                           scratch_floats * sizeof(float), p);
    if (s) return s;
    *wk = scratch;
    *ws = (*p)->ws ? (char *)scratch + align256(k * sizeof(float)) : NULL;
    return SL_OK;
}

sl_status sl__cu_conv_gemm(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw, int stride,
                           int pad_top, int pad_left, int oh, int ow, const float *W, int oc, float beta, float *y,
                           float *scratch, size_t scratch_floats) {
    ENTER(b);
    dnn_plan *p;
    float *wk;
    void *ws;
    sl_status s = dnn_begin(cb, DNN_FWD, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, oc, scratch,
                            scratch_floats, &p, &wk, &ws);
    if (s) return s;
    const int K = kh * kw * c;
    k_transpose<<<grid_for((size_t)K * oc), THREADS, 0, cb->compute>>>(W, K, oc, 0.0f, wk);
    CK_LAUNCH("conv_gemm (kernel layout)");
    const float one = 1.0f;
    CKD(cudnnConvolutionForward(cb->dnn->h, &one, p->x, x, p->f, wk, p->conv, (cudnnConvolutionFwdAlgo_t)p->algo, ws,
                                p->ws, &beta, p->y, y));
    cb->launches++;
    cb->dnn->calls++;
    return SL_OK;
}

sl_status sl__cu_conv_input_grad(sl_backend *b, const float *dy, int n, int h, int w, int c, int kh, int kw,
                                 int stride, int pad_top, int pad_left, int oh, int ow, const float *W, int oc,
                                 float beta, float *dx, float *scratch, size_t scratch_floats) {
    ENTER(b);
    dnn_plan *p;
    float *wk;
    void *ws;
    sl_status s = dnn_begin(cb, DNN_BWD_DATA, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, oc, scratch,
                            scratch_floats, &p, &wk, &ws);
    if (s) return s;
    const int K = kh * kw * c;
    k_transpose<<<grid_for((size_t)K * oc), THREADS, 0, cb->compute>>>(W, K, oc, 0.0f, wk);
    CK_LAUNCH("conv_input_grad (kernel layout)");
    const float one = 1.0f;
    CKD(cudnnConvolutionBackwardData(cb->dnn->h, &one, p->f, wk, p->y, dy, p->conv,
                                     (cudnnConvolutionBwdDataAlgo_t)p->algo, ws, p->ws, &beta, p->x, dx));
    cb->launches++;
    cb->dnn->calls++;
    return SL_OK;
}

sl_status sl__cu_conv_kernel_grad(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw,
                                  int stride, int pad_top, int pad_left, int oh, int ow, const float *dy, int oc,
                                  float beta, float *dW, float *scratch, size_t scratch_floats) {
    ENTER(b);
    dnn_plan *p;
    float *dwk; // cuDNN's gradient as K x R x S x C, then turned into dW's layout
    void *ws;
    sl_status s = dnn_begin(cb, DNN_BWD_FILTER, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, oc, scratch,
                            scratch_floats, &p, &dwk, &ws);
    if (s) return s;
    const int K = kh * kw * c;
    const float one = 1.0f, zero = 0.0f;
    CKD(cudnnConvolutionBackwardFilter(cb->dnn->h, &one, p->x, x, p->y, dy, p->conv,
                                       (cudnnConvolutionBwdFilterAlgo_t)p->algo, ws, p->ws, &zero, p->f, dwk));
    cb->launches++;
    cb->dnn->calls++;
    k_transpose<<<grid_for((size_t)K * oc), THREADS, 0, cb->compute>>>(dwk, oc, K, beta, dW);
    CK_LAUNCH("conv_kernel_grad (kernel layout)");
    return SL_OK;
}

#else // no cuDNN in this build: the table has no such members (backend_cuda.cu)

sl_status sl__cu_dnn_open(cuda_backend *cb) {
    (void)cb;
    return SL_OK;
}
void sl__cu_dnn_close(cuda_backend *cb) { (void)cb; }
extern "C" unsigned long long sl__cu_dnn_calls(sl_backend *b) {
    (void)b;
    return 0;
}

#endif
