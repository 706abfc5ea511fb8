// Private to train/backend_cuda*.cu: the CUDA backend's state and the helpers every op
// uses (the checking macros CK/CKB/CK_LAUNCH, ENTER, grid-stride loops, the scratch
// buffer), and the ops that live outside backend_cuda.cu. backend_cuda.cu holds the
// backend's table and calls into backend_cuda_conv.cu (convolution and pooling),
// backend_cuda_reduce.cu (column reductions), backend_cuda_loss.cu (softmax cross-entropy),
// backend_cuda_optim.cu (optimizer steps) and backend_cuda_dnn.cu (convolutions through
// cuDNN), never the other way.
#ifndef SLUICE_TRAIN_BACKEND_CUDA_PRIV_CUH
#define SLUICE_TRAIN_BACKEND_CUDA_PRIV_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "sluice/status.h"
#include "train/backend.h"
}


#define CK(call)                                                                          \
    do {                                                                                  \
        cudaError_t ck_e_ = (call);                                                       \
        if (ck_e_ != cudaSuccess) {                                                       \
            (void)cudaGetLastError();                                                     \
            return sl_err(SL_EIO, "CUDA error: %s: %s (%s:%d)", #call,                    \
                          cudaGetErrorString(ck_e_), __FILE__, __LINE__);                 \
        }                                                                                 \
    } while (0)

#define CKB(call)                                                                         \
    do {                                                                                  \
        cublasStatus_t ck_s_ = (call);                                                    \
        if (ck_s_ != CUBLAS_STATUS_SUCCESS)                                               \
            return sl_err(SL_EIO, "cuBLAS error: %s: %s (%s:%d)", #call,                  \
                          cublasGetStatusString(ck_s_), __FILE__, __LINE__);              \
    } while (0)

// After a kernel launch: configuration errors show up here, faults at the next sync.
#define CK_LAUNCH(what)                                                                   \
    do {                                                                                  \
        cb->launches++;                                                                   \
        cudaError_t ck_e_ = cudaGetLastError();                                           \
        if (ck_e_ != cudaSuccess)                                                         \
            return sl_err(SL_EIO, "CUDA error: launching kernel %s: %s (%s:%d)", what,    \
                          cudaGetErrorString(ck_e_), __FILE__, __LINE__);                 \
    } while (0)

struct host_result {
    double sum;
    long long count;
    long long count5; // softmax_xent: rows with the label in the top SL_TOPK
    int bad_row;   // first row with a label outside 0..k-1, or -1
    int bad_label;
};

typedef struct cuda_backend {
    sl_backend base;
    int device;
    cudaStream_t compute;  // every op
    cudaStream_t copy;     // to_device_async
    cudaEvent_t copied[SL_BK_STAGE_SLOTS]; // after a slot's copies (copy stream)
    cudaEvent_t freed[SL_BK_STAGE_SLOTS];  // after the slot's last reader (compute stream)
    bool copied_rec[SL_BK_STAGE_SLOTS], freed_rec[SL_BK_STAGE_SLOTS];
    cudaEvent_t zeroed;    // after alloc's zero-fill (compute), waited on by copy
    cudaEvent_t xent_done; // after softmax_xent_start's copy of the result to res
    bool xent_pending;
    int xent_k;
    uint64_t launches;
    cublasHandle_t blas;
    void *scratch;         // device scratch for reductions; stream-ordered reuse
    size_t scratch_cap;
    sl_bk_precision prec;  // set_precision: GEMM inputs in bf16 / fp16
    void *lp;              // those GEMMs' 16-bit copies of A and B; stream-ordered reuse
    size_t lp_cap;
    struct host_result *res; // pinned, two: [0] softmax_xent's result, [1] sum_squares'
    struct host_result *dres; // device twin of res
    // bucketed gradient exchange: per bucket, "its backward is queued" (compute) and "its
    // copy to the host is done" (copy); grads_out_reserve sizes them
    cudaEvent_t *gready, *gdone;
    int ngev;
    struct cu_dnn *dnn;    // cuDNN's handle and plans (backend_cuda_dnn.cu); NULL without cuDNN
} cuda_backend;

static inline cuda_backend *CB(sl_backend *b) { return (cuda_backend *)b; }

#define ENTER(b)                                              \
    cuda_backend *cb = CB(b);                                 \
    CK(cudaSetDevice(cb->device))

static const int THREADS = 256;

// Grid for a grid-stride loop over n elements.
static inline unsigned grid_for(size_t n) {
    size_t g = (n + THREADS - 1) / THREADS;
    if (g > 65535u * 16u) g = 65535u * 16u;
    return (unsigned)(g ? g : 1);
}

#define GRID_STRIDE(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)blockDim.x * gridDim.x)

// A device buffer (*buf, *cap bytes) of at least `bytes`, grown by doubling. Out of device
// memory: SL_ENOMEM with the sizes, *buf NULL and *cap 0 (the old buffer freed).
static inline sl_status grow_device(void **buf, size_t *cap_io, size_t bytes) {
    if (bytes <= *cap_io) return SL_OK;
    size_t cap = *cap_io ? *cap_io : 4096;
    while (cap < bytes) cap *= 2;
    if (*buf) {
        // cudaFree waits for the device, so queued users of the old buffer are done.
        CK(cudaFree(*buf));
        *buf = NULL;
        *cap_io = 0;
    }
    cudaError_t e = cudaMalloc(buf, cap);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        *buf = NULL;
        sl_err(SL_ENOMEM, "CUDA: cannot allocate %zu bytes of scratch (for %zu needed)", cap, bytes);
        sl_err_hint("use a smaller batch size or model");
        return SL_ENOMEM;
    }
    CK(e);
    *cap_io = cap;
    return SL_OK;
}

static inline sl_status ensure_scratch(cuda_backend *cb, size_t bytes) {
    return grow_device(&cb->scratch, &cb->scratch_cap, bytes);
}

// ---- convolution and pooling (backend_cuda_conv.cu): the sl_backend_ops of the same
// names (train/backend.h) ----

sl_status sl__cu_im2col(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw, int stride,
                        int pad_top, int pad_left, int oh, int ow, float *col);
sl_status sl__cu_col2im(sl_backend *b, const float *col, int n, int h, int w, int c, int kh, int kw, int stride,
                        int pad_top, int pad_left, int oh, int ow, float *dx);
sl_status sl__cu_maxpool_forward(sl_backend *b, const float *x, int n, int h, int w, int c, int k, int s,
                                 int pad_top, int pad_left, int oh, int ow, float *y, int32_t *argmax);
sl_status sl__cu_maxpool_backward(sl_backend *b, const float *dy, const int32_t *argmax, int n, int h, int w,
                                  int c, int k, int s, int pad_top, int pad_left, int oh, int ow, float *dx);
sl_status sl__cu_maxpool_relu_backward_set(sl_backend *b, const float *dy, const float *pooled,
                                           const int32_t *argmax, int n, int h, int w, int c, int k, int s,
                                           int pad_top, int pad_left, int oh, int ow, float *dx);
sl_status sl__cu_avgpool_forward(sl_backend *b, const float *x, int n, int h, int w, int c, int k, int s,
                                 int pad_top, int pad_left, int oh, int ow, float *y);
sl_status sl__cu_avgpool_backward(sl_backend *b, const float *dy, int n, int h, int w, int c, int k, int s,
                                  int pad_top, int pad_left, int oh, int ow, float *dx);
sl_status sl__cu_gap_forward(sl_backend *b, const float *x, int n, int hw, int c, float *y);
sl_status sl__cu_gap_backward(sl_backend *b, const float *dy, int n, int hw, int c, float *dx);

// ---- convolutions through cuDNN (backend_cuda_dnn.cu): open / close its handle (open
// without cuDNN in the build, or with a cuDNN that cannot start, leaves cb->dnn NULL and
// returns SL_OK: a warning says why), and the sl_backend_ops members of the same names
// (SL_EUNSUPPORTED where cuDNN does not take the call); calls counts the convolutions run
// through cuDNN ----

sl_status sl__cu_dnn_open(cuda_backend *cb);
void sl__cu_dnn_close(cuda_backend *cb);
extern "C" unsigned long long sl__cu_dnn_calls(sl_backend *b);
#if SLUICE_HAVE_CUDNN
sl_status sl__cu_conv_gemm(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw, int stride,
                           int pad_top, int pad_left, int oh, int ow, const float *W, int oc, float beta, float *y,
                           float *scratch, size_t scratch_floats);
sl_status sl__cu_conv_input_grad(sl_backend *b, const float *dy, int n, int h, int w, int c, int kh, int kw,
                                 int stride, int pad_top, int pad_left, int oh, int ow, const float *W, int oc,
                                 float beta, float *dx, float *scratch, size_t scratch_floats);
sl_status sl__cu_conv_kernel_grad(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw,
                                  int stride, int pad_top, int pad_left, int oh, int ow, const float *dy, int oc,
                                  float beta, float *dW, float *scratch, size_t scratch_floats);
#endif

// ---- column reductions (backend_cuda_reduce.cu) ----

sl_status sl__cu_bias_grad(sl_backend *b, float *db, const float *dy, size_t rows, size_t cols);
sl_status sl__cu_batchnorm_forward(sl_backend *b, const float *x, float *y, size_t rows, int c,
                                   const float *gamma, const float *beta, float *running_mean, float *running_var,
                                   float momentum, float eps, bool training, float *save_mean,
                                   float *save_invstd);
sl_status sl__cu_batchnorm_backward(sl_backend *b, const float *x, const float *dy, size_t rows, int c,
                                    const float *gamma, const float *save_mean, const float *save_invstd,
                                    float *dx, float *dgamma, float *dbeta);

// ---- softmax cross-entropy (backend_cuda_loss.cu) ----

sl_status sl__cu_softmax_xent_start(sl_backend *b, const float *logits, const int32_t *labels, int n, int k,
                                    float smoothing, float grad_scale, float *dlogits);
sl_status sl__cu_softmax_xent_result(sl_backend *b, double *loss_sum_host, int64_t *correct_host,
                                     int64_t *top5_host);
sl_status sl__cu_softmax_xent(sl_backend *b, const float *logits, const int32_t *labels, int n, int k,
                              float smoothing, float grad_scale, float *dlogits, double *loss_sum_host,
                              int64_t *correct_host, int64_t *top5_host);

// ---- optimizer steps and the sum of squares (backend_cuda_optim.cu) ----

sl_status sl__cu_sgd_step(sl_backend *b, float *p, const float *g, float *vel, size_t n, float lr,
                          float momentum, bool nesterov, float weight_decay);
sl_status sl__cu_adam_step(sl_backend *b, float *p, const float *g, float *m, float *v, size_t n, float lr,
                           float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t t);
sl_status sl__cu_sum_squares(sl_backend *b, const float *x, size_t n, double *out_host);

#endif
