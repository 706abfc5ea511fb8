// The CUDA backend: every op of train/backend.h on one GPU, for the trainer's
// workload (small CNNs and MLPs on batches of 32..1024 images, e.g. Fashion-MNIST).
//
// Work is queued in order on one compute stream; input staging uses a second stream (of
// the highest priority) and two events per staging slot: "copied", recorded after the
// slot's copies, which the step that reads the slot waits for (and nothing later), and
// "free", recorded on compute after that step, which the next copy into the slot waits for.
// Nothing in a step synchronises the device: the loss comes back through pinned memory and
// an event (softmax_xent_start / _result). Memory that alloc zero-fills on the compute
// stream is ordered before every later copy on the copy stream (an event), so a staged copy
// into a fresh buffer can never be overwritten by its zero-fill. GEMMs go to
// cuBLAS with TF32 off, so results stay within float rounding of the CPU reference. The
// other ops are plain kernels written to be deterministic: reductions run in a fixed
// order (per-block partials, then one ordered pass), col2im, avgpool_backward and
// maxpool_backward gather per input element (in output order, the CPU's order) instead of
// scattering with atomics, so every run gives the same bits. Every kernel launch, cuBLAS
// call and memset is counted (ops->launches) so tests can hold a step to a launch budget.
//
// Every CUDA and cuBLAS call goes through CK/CKB, which turn a failure into SL_EIO naming
// the call, the error string and file:line (train/backend_cuda_priv.cuh). This file holds
// the backend's table, memory, staging, GEMM and the elementwise ops; the others are in
// train/backend_cuda_conv.cu (convolution and pooling, global average pooling too),
// train/backend_cuda_reduce.cu (the column reductions: bias_grad, batchnorm),
// train/backend_cuda_loss.cu (softmax cross-entropy) and train/backend_cuda_optim.cu (the
// optimizer steps and sum_squares).
//
// Mixed precision (set_precision bf16 / fp16): GEMMs round their inputs into 16-bit
// scratch copies with a kernel and call cublasGemmEx (tensor cores, float32 accumulation
// and output); everything else stays float32.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/backend_cuda_priv.cuh"

// ---------------------------------------------------------------------------------------
// memory

// Events the host waits on (a staging slot's last copies, a gradient bucket's copy, the loss): the
// host thread sleeps until the device signals instead of spinning on a core the input
// pipeline's threads need.
#define HOST_WAITED (cudaEventDisableTiming | cudaEventBlockingSync)

static void cu_destroy(sl_backend *b) {
    cuda_backend *cb = CB(b);
    if (!cb) return;
    cudaSetDevice(cb->device);
    if (cb->compute) cudaStreamSynchronize(cb->compute);
    if (cb->copy) cudaStreamSynchronize(cb->copy);
    if (cb->blas) cublasDestroy(cb->blas);
    sl__cu_dnn_close(cb);
    for (int i = 0; i < SL_BK_STAGE_SLOTS; i++) {
        if (cb->copied[i]) cudaEventDestroy(cb->copied[i]);
        if (cb->freed[i]) cudaEventDestroy(cb->freed[i]);
    }
    for (int i = 0; i < cb->ngev; i++) {
        if (cb->gready[i]) cudaEventDestroy(cb->gready[i]);
        if (cb->gdone[i]) cudaEventDestroy(cb->gdone[i]);
    }
    free(cb->gready);
    free(cb->gdone);
    if (cb->zeroed) cudaEventDestroy(cb->zeroed);
    if (cb->xent_done) cudaEventDestroy(cb->xent_done);
    if (cb->compute) cudaStreamDestroy(cb->compute);
    if (cb->copy) cudaStreamDestroy(cb->copy);
    if (cb->scratch) cudaFree(cb->scratch);
    if (cb->lp) cudaFree(cb->lp);
    if (cb->dres) cudaFree(cb->dres);
    if (cb->res) cudaFreeHost(cb->res);
    (void)cudaGetLastError();
    free(cb);
}

static sl_status cu_alloc(sl_backend *b, size_t bytes, void **out) {
    *out = NULL;
    ENTER(b);
    void *p = NULL;
    size_t n = bytes ? bytes : 1;
    cudaError_t e = cudaMalloc(&p, n);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        sl_err(SL_ENOMEM, "CUDA: cannot allocate %zu bytes on device %d", bytes, cb->device);
        sl_err_hint("use a smaller batch size or model");
        return SL_ENOMEM;
    }
    CK(e);
    // Zero-fill on compute; the copy stream waits for it, so a staged copy into this buffer
    // (to_device_async) always lands after the zeros.
    cudaError_t z = cudaMemsetAsync(p, 0, n, cb->compute);
    if (z == cudaSuccess) z = cudaEventRecord(cb->zeroed, cb->compute);
    if (z == cudaSuccess) z = cudaStreamWaitEvent(cb->copy, cb->zeroed, 0);
    if (z != cudaSuccess) {
        cudaFree(p);
        CK(z);
    }
    cb->launches++;
    *out = p;
    return SL_OK;
}

static void cu_free(sl_backend *b, void *p) {
    if (!p) return;
    cuda_backend *cb = CB(b);
    cudaSetDevice(cb->device);
    cudaFree(p);
    (void)cudaGetLastError();
}

static sl_status cu_to_device(sl_backend *b, void *dst, const void *host_src, size_t bytes) {
    ENTER(b);
    if (!bytes) return SL_OK;
    CK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cb->compute));
    // The caller may reuse host_src (possibly pinned) as soon as we return.
    CK(cudaStreamSynchronize(cb->compute));
    return SL_OK;
}

static sl_status cu_to_host(sl_backend *b, void *host_dst, const void *src, size_t bytes) {
    ENTER(b);
    if (!bytes) return SL_OK;
    CK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cb->compute));
    CK(cudaStreamSynchronize(cb->compute));
    return SL_OK;
}

static sl_status cu_copy(sl_backend *b, void *dst, const void *src, size_t bytes) {
    ENTER(b);
    if (!bytes || dst == src) return SL_OK;
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cb->compute));
    return SL_OK;
}

static sl_status cu_host_alloc(sl_backend *b, size_t bytes, void **out) {
    *out = NULL;
    ENTER(b);
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return sl_err(SL_ENOMEM, "CUDA: cannot allocate %zu bytes of pinned host memory", bytes);
    }
    CK(e);
    memset(p, 0, bytes ? bytes : 1);
    *out = p;
    return SL_OK;
}

static void cu_host_free(sl_backend *b, void *p) {
    if (!p) return;
    cuda_backend *cb = CB(b);
    cudaSetDevice(cb->device);
    cudaFreeHost(p);
    (void)cudaGetLastError();
}

static sl_status cu_to_device_async(sl_backend *b, void *dst, const void *host_src, size_t bytes) {
    ENTER(b);
    if (!bytes) return SL_OK;
    CK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cb->copy));
    return SL_OK;
}

static sl_status check_slot(int slot) {
    if (slot < 0 || slot >= SL_BK_STAGE_SLOTS)
        return sl_err(SL_EINVAL, "staging slot %d outside 0..%d", slot, SL_BK_STAGE_SLOTS - 1);
    return SL_OK;
}

static sl_status cu_stage_begin(sl_backend *b, int slot) {
    ENTER(b);
    if (check_slot(slot)) return SL_EINVAL;
    // the host buffer is free once the slot's last copies have read it
    if (cb->copied_rec[slot]) CK(cudaEventSynchronize(cb->copied[slot]));
    // the device buffers are free once the slot's last reader has run
    if (cb->freed_rec[slot]) CK(cudaStreamWaitEvent(cb->copy, cb->freed[slot], 0));
    return SL_OK;
}

static sl_status cu_stage_end(sl_backend *b, int slot) {
    ENTER(b);
    if (check_slot(slot)) return SL_EINVAL;
    CK(cudaEventRecord(cb->copied[slot], cb->copy));
    cb->copied_rec[slot] = true;
    return SL_OK;
}

static sl_status cu_stage_wait(sl_backend *b, int slot) {
    ENTER(b);
    if (check_slot(slot)) return SL_EINVAL;
    if (cb->copied_rec[slot]) CK(cudaStreamWaitEvent(cb->compute, cb->copied[slot], 0));
    return SL_OK;
}

static sl_status cu_stage_release(sl_backend *b, int slot) {
    ENTER(b);
    if (check_slot(slot)) return SL_EINVAL;
    CK(cudaEventRecord(cb->freed[slot], cb->compute));
    cb->freed_rec[slot] = true;
    return SL_OK;
}

static uint64_t cu_launches(sl_backend *b) { return CB(b)->launches; }

// ---------------------------------------------------------------------------------------
// bucketed gradient exchange: a bucket's gradient goes to pinned host memory on the copy
// stream as soon as its backward kernels are queued; the exchange thread waits on that
// bucket's event only, while later layers' backward kernels keep the compute stream busy

static sl_status cu_grads_out_reserve(sl_backend *b, int n) {
    ENTER(b);
    if (n <= cb->ngev) return SL_OK;
    cudaEvent_t *r = (cudaEvent_t *)realloc(cb->gready, (size_t)n * sizeof *r);
    if (!r) return sl_err(SL_ENOMEM, "CUDA backend: out of memory for %d bucket events", n);
    cb->gready = r;
    cudaEvent_t *d = (cudaEvent_t *)realloc(cb->gdone, (size_t)n * sizeof *d);
    if (!d) return sl_err(SL_ENOMEM, "CUDA backend: out of memory for %d bucket events", n);
    cb->gdone = d;
    for (; cb->ngev < n; cb->ngev++) {
        cb->gready[cb->ngev] = cb->gdone[cb->ngev] = NULL;
        CK(cudaEventCreateWithFlags(&cb->gready[cb->ngev], cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&cb->gdone[cb->ngev], HOST_WAITED));
    }
    return SL_OK;
}

static sl_status cu_grads_out_start(sl_backend *b, int k, void *host_dst, const void *src, size_t bytes) {
    ENTER(b);
    if (k < 0 || k >= cb->ngev)
        return sl_err(SL_EINVAL, "CUDA backend: gradient bucket %d is not reserved (%d are)", k, cb->ngev);
    CK(cudaEventRecord(cb->gready[k], cb->compute));
    CK(cudaStreamWaitEvent(cb->copy, cb->gready[k], 0));
    if (bytes) CK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cb->copy));
    CK(cudaEventRecord(cb->gdone[k], cb->copy));
    return SL_OK;
}

static sl_status cu_grads_out_wait(sl_backend *b, int k) {
    ENTER(b); // the exchange thread's first CUDA call selects the device too
    if (k < 0 || k >= cb->ngev)
        return sl_err(SL_EINVAL, "CUDA backend: gradient bucket %d is not reserved (%d are)", k, cb->ngev);
    CK(cudaEventSynchronize(cb->gdone[k]));
    return SL_OK;
}

static sl_status cu_sync(sl_backend *b) {
    ENTER(b);
    CK(cudaStreamSynchronize(cb->copy));
    CK(cudaStreamSynchronize(cb->compute));
    return SL_OK;
}

// ---------------------------------------------------------------------------------------
// dense math

// Mixed precision (set_precision): a GEMM input's rows x cols block (row stride ld) as
// bf16 / fp16 bit patterns (round to nearest even, sluice/util.h), row stride ldo.
static __global__ void k_round16(const float *src, size_t ld, uint16_t *dst, size_t ldo, size_t rows, size_t cols,
                                 int fp16) {
    size_t n = rows * cols;
    GRID_STRIDE(i, n) {
        size_t r = i / cols, col = i % cols;
        uint32_t x;
        memcpy(&x, &src[r * ld + col], 4);
        dst[r * ldo + col] = fp16 ? sl__f16_bits(x) : sl__bf16_bits(x);
    }
}

static sl_status cu_set_precision(sl_backend *b, sl_bk_precision p) {
    if (p != SL_BK_FP32 && p != SL_BK_BF16 && p != SL_BK_FP16)
        return sl_err(SL_EINVAL, "set_precision: unknown precision %d", (int)p);
    CB(b)->prec = p;
    return SL_OK;
}

// cu_gemm in bf16 / fp16 (k > 0): both inputs rounded into 16-bit copies in cb->lp, their
// rows padded to 8 elements (16 bytes, as tensor cores want them), then one cublasGemmEx
// that multiplies on tensor cores and accumulates in float32 into the float32 C.
static sl_status gemm16(cuda_backend *cb, cublasOperation_t ob, cublasOperation_t oa, bool trans_a, bool trans_b,
                        int m, int n, int k, float alpha, const float *a, int lda, const float *bm, int ldb,
                        float beta, float *c, int ldc) {
    size_t ra = (size_t)(trans_a ? k : m), ca = (size_t)(trans_a ? m : k);
    size_t rb = (size_t)(trans_b ? n : k), cbc = (size_t)(trans_b ? k : n);
    size_t lda16 = (ca + 7) & ~(size_t)7, ldb16 = (cbc + 7) & ~(size_t)7;
    size_t abytes = (ra * lda16 * sizeof(uint16_t) + 255) & ~(size_t)255;
    sl_status s = grow_device(&cb->lp, &cb->lp_cap, abytes + rb * ldb16 * sizeof(uint16_t));
    if (s) return s;
    uint16_t *a16 = (uint16_t *)cb->lp, *b16 = (uint16_t *)((char *)cb->lp + abytes);
    int fp16 = cb->prec == SL_BK_FP16;
    k_round16<<<grid_for(ra * ca), THREADS, 0, cb->compute>>>(a, (size_t)lda, a16, lda16, ra, ca, fp16);
    CK_LAUNCH("gemm_round_a");
    k_round16<<<grid_for(rb * cbc), THREADS, 0, cb->compute>>>(bm, (size_t)ldb, b16, ldb16, rb, cbc, fp16);
    CK_LAUNCH("gemm_round_b");
    cudaDataType_t t16 = fp16 ? CUDA_R_16F : CUDA_R_16BF;
    CKB(cublasGemmEx(cb->blas, ob, oa, n, m, k, &alpha, b16, t16, (int)ldb16, a16, t16, (int)lda16, &beta, c,
                     CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    cb->launches++;
    return SL_OK;
}

static sl_status cu_gemm(sl_backend *b, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *bm, int ldb, float beta, float *c, int ldc) {
    ENTER(b);
    if (m < 0 || n < 0 || k < 0) return sl_err(SL_EINVAL, "gemm: negative size %dx%dx%d", m, n, k);
    if (m == 0 || n == 0) return SL_OK;
    // Row-major C (m x n) is column-major C^T (n x m): C^T = op(B)^T op(A)^T, so cuBLAS
    // gets B first. A row-major matrix with row stride ld is its transpose column-major
    // with the same ld, hence the op flags carry over unchanged.
    cublasOperation_t ob = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t oa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (k == 0) {
        // cuBLAS rejects k = 0 in some versions; C = beta C by hand.
        if (beta == 1.0f) return SL_OK;
        if (beta == 0.0f) {
            CK(cudaMemset2DAsync(c, (size_t)ldc * sizeof(float), 0, (size_t)n * sizeof(float), (size_t)m,
                                 cb->compute));
            cb->launches++;
            return SL_OK;
        }
        for (int r = 0; r < m; r++) CKB(cublasSscal(cb->blas, n, &beta, c + (size_t)r * ldc, 1));
        cb->launches += (uint64_t)m;
        return SL_OK;
    }
    if (cb->prec != SL_BK_FP32)
        return gemm16(cb, ob, oa, trans_a, trans_b, m, n, k, alpha, a, lda, bm, ldb, beta, c, ldc);
    CKB(cublasSgemm(cb->blas, ob, oa, n, m, k, &alpha, bm, ldb, a, lda, &beta, c, ldc));
    cb->launches++;
    return SL_OK;
}

static __global__ void k_fill(float *x, float v, size_t n) {
    GRID_STRIDE(i, n) x[i] = v;
}

static __global__ void k_axpy(size_t n, float alpha, const float *x, float *y) {
    GRID_STRIDE(i, n) y[i] += __fmul_rn(alpha, x[i]);
}

static __global__ void k_scale(size_t n, float alpha, float *x) {
    GRID_STRIDE(i, n) x[i] *= alpha;
}

static __global__ void k_bias_add(float *y, const float *bias, size_t rows, size_t cols) {
    size_t n = rows * cols;
    GRID_STRIDE(i, n) y[i] += bias[i % cols];
}

static sl_status cu_fill(sl_backend *b, float *x, float v, size_t n) {
    ENTER(b);
    if (!n) return SL_OK;
    k_fill<<<grid_for(n), THREADS, 0, cb->compute>>>(x, v, n);
    CK_LAUNCH("fill");
    return SL_OK;
}

static sl_status cu_axpy(sl_backend *b, size_t n, float alpha, const float *x, float *y) {
    ENTER(b);
    if (!n) return SL_OK;
    k_axpy<<<grid_for(n), THREADS, 0, cb->compute>>>(n, alpha, x, y);
    CK_LAUNCH("axpy");
    return SL_OK;
}

static sl_status cu_scale(sl_backend *b, size_t n, float alpha, float *x) {
    ENTER(b);
    if (!n) return SL_OK;
    k_scale<<<grid_for(n), THREADS, 0, cb->compute>>>(n, alpha, x);
    CK_LAUNCH("scale");
    return SL_OK;
}

// dst[r][j] (+)= src[r][j] over a rows x cols block of row-strided matrices (concatenation)
static __global__ void k_copy_cols(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t cols,
                                   bool acc, size_t total) {
    GRID_STRIDE(i, total) {
        size_t r = i / cols, j = i % cols;
        float v = src[r * ld_src + j];
        float *d = dst + r * ld_dst + j;
        *d = acc ? *d + v : v;
    }
}

static sl_status cu_copy_cols(sl_backend *b, float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                              size_t cols, bool accumulate) {
    ENTER(b);
    if (cols > ld_dst || cols > ld_src)
        return sl_err(SL_EINVAL, "copy_cols: %zu columns wider than the row strides %zu / %zu", cols, ld_dst, ld_src);
    if (!rows || !cols) return SL_OK;
    k_copy_cols<<<grid_for(rows * cols), THREADS, 0, cb->compute>>>(dst, ld_dst, src, ld_src, cols, accumulate,
                                                                   rows * cols);
    CK_LAUNCH("copy_cols");
    return SL_OK;
}

static sl_status cu_bias_add(sl_backend *b, float *y, const float *bias, size_t rows, size_t cols) {
    ENTER(b);
    if (!rows || !cols) return SL_OK;
    k_bias_add<<<grid_for(rows * cols), THREADS, 0, cb->compute>>>(y, bias, rows, cols);
    CK_LAUNCH("bias_add");
    return SL_OK;
}

// The activations and their gradients, one place for every kernel that applies them (the
// CPU's formulas, train/backend_cpu_vec.c): act_fwd1(v) of a pre-activation v; act_grad1(v, g)
// the gradient g taken back through the activation whose output is v.
static __device__ float act_fwd1(int act, float v) {
    switch (act) {
    case SL_ACT_RELU: return v > 0.0f ? v : 0.0f;
    case SL_ACT_TANH: return tanhf(v);
    case SL_ACT_SIGMOID: return 1.0f / (1.0f + expf(-v));
    default: return v;
    }
}

static __device__ float act_grad1(int act, float v, float g) {
    switch (act) {
    case SL_ACT_RELU: return v > 0.0f ? g : 0.0f;
    case SL_ACT_TANH: return __fmul_rn(g, 1.0f - __fmul_rn(v, v));
    case SL_ACT_SIGMOID: return __fmul_rn(__fmul_rn(g, v), 1.0f - v);
    default: return g;
    }
}

static __global__ void k_act_forward(int act, const float *x, float *y, size_t n) {
    GRID_STRIDE(i, n) y[i] = act_fwd1(act, x[i]);
}

static __global__ void k_act_backward(int act, const float *y, const float *dy, float *dx, size_t n) {
    GRID_STRIDE(i, n) dx[i] += act_grad1(act, y[i], dy[i]);
}

// The activation as an int, read from its bytes: the value comes from C code, and in C++
// loading an sl_act outside the enumerators' range would be undefined.
static int act_code(const sl_act *act) {
    int v = 0;
    memcpy(&v, act, sizeof *act < sizeof v ? sizeof *act : sizeof v);
    return v;
}

static sl_status check_act(int act) {
    if (act < SL_ACT_NONE || act > SL_ACT_SIGMOID) return sl_err(SL_EINVAL, "unknown activation %d", act);
    return SL_OK;
}

static sl_status cu_act_forward(sl_backend *b, sl_act act, const float *x, float *y, size_t n) {
    ENTER(b);
    int a = act_code(&act);
    if (check_act(a)) return SL_EINVAL;
    if (!n) return SL_OK;
    if (a == SL_ACT_NONE && x == y) return SL_OK;
    k_act_forward<<<grid_for(n), THREADS, 0, cb->compute>>>(a, x, y, n);
    CK_LAUNCH("act_forward");
    return SL_OK;
}

static sl_status cu_act_backward(sl_backend *b, sl_act act, const float *y, const float *dy, float *dx, size_t n) {
    ENTER(b);
    int a = act_code(&act);
    if (check_act(a)) return SL_EINVAL;
    if (!n) return SL_OK;
    k_act_backward<<<grid_for(n), THREADS, 0, cb->compute>>>(a, y, dy, dx, n);
    CK_LAUNCH("act_backward");
    return SL_OK;
}

// The fused forms (train/backend.h: bias_act, act_backward_set): the floats of the ops they
// replace. bias_act: bias_add's sum, then act_forward's formula; act_backward_set: the
// gradient added to 0.0f, as act_backward adds it to a zero-filled dx (-0 becomes +0).
static __global__ void k_bias_act(int act, float *y, const float *bias, size_t rows, size_t cols) {
    size_t n = rows * cols;
    GRID_STRIDE(i, n) y[i] = act_fwd1(act, __fadd_rn(y[i], bias[i % cols]));
}

static __global__ void k_act_backward_set(int act, const float *y, const float *dy, float *dx, size_t n) {
    GRID_STRIDE(i, n) dx[i] = 0.0f + act_grad1(act, y[i], dy[i]);
}

static sl_status cu_bias_act(sl_backend *b, sl_act act, float *y, const float *bias, size_t rows, size_t cols) {
    ENTER(b);
    int a = act_code(&act);
    if (check_act(a)) return SL_EINVAL;
    if (!rows || !cols) return SL_OK;
    k_bias_act<<<grid_for(rows * cols), THREADS, 0, cb->compute>>>(a, y, bias, rows, cols);
    CK_LAUNCH("bias_act");
    return SL_OK;
}

static sl_status cu_act_backward_set(sl_backend *b, sl_act act, const float *y, const float *dy, float *dx,
                                     size_t n) {
    ENTER(b);
    int a = act_code(&act);
    if (check_act(a)) return SL_EINVAL;
    if (!n) return SL_OK;
    k_act_backward_set<<<grid_for(n), THREADS, 0, cb->compute>>>(a, y, dy, dx, n);
    CK_LAUNCH("act_backward_set");
    return SL_OK;
}

// ---------------------------------------------------------------------------------------
// dropout

static __global__ void k_dropout_fwd(const float *x, float *y, float *mask, size_t n, uint64_t thr, float scale,
                              uint64_t seed) {
    GRID_STRIDE(i, n) {
        float m = (uint64_t)sl__bk_rand_u32(seed, i) >= thr ? scale : 0.0f;
        mask[i] = m;
        y[i] = x[i] * m;
    }
}

static __global__ void k_mul_acc(const float *dy, const float *mask, float *dx, size_t n) {
    GRID_STRIDE(i, n) dx[i] += __fmul_rn(dy[i], mask[i]);
}

static sl_status cu_dropout_forward(sl_backend *b, const float *x, float *y, float *mask, size_t n, float rate,
                                    uint64_t seed) {
    ENTER(b);
    if (!(rate >= 0.0f && rate < 1.0f)) return sl_err(SL_EINVAL, "dropout: rate %g must be in [0, 1)", (double)rate);
    if (!n) return SL_OK;
    // rate * 2^32 is exact in double (a float times a power of two), so the threshold and
    // the keep scale are the CPU's to the bit.
    uint64_t thr = (uint64_t)((double)rate * 4294967296.0);
    float scale = 1.0f / (1.0f - rate);
    k_dropout_fwd<<<grid_for(n), THREADS, 0, cb->compute>>>(x, y, mask, n, thr, scale, seed);
    CK_LAUNCH("dropout_forward");
    return SL_OK;
}

static sl_status cu_dropout_backward(sl_backend *b, const float *dy, const float *mask, float *dx, size_t n) {
    ENTER(b);
    if (!n) return SL_OK;
    k_mul_acc<<<grid_for(n), THREADS, 0, cb->compute>>>(dy, mask, dx, n);
    CK_LAUNCH("dropout_backward");
    return SL_OK;
}

// ---------------------------------------------------------------------------------------

static const sl_backend_ops cuda_ops = {
    "cuda",
    cu_destroy,
    cu_alloc,
    cu_free,
    cu_to_device,
    cu_to_host,
    cu_copy,
    cu_host_alloc,
    cu_host_free,
    cu_to_device_async,
    cu_stage_begin,
    cu_stage_end,
    cu_stage_wait,
    cu_stage_release,
    cu_sync,
    cu_launches,
    cu_gemm,
    cu_fill,
    cu_axpy,
    cu_scale,
    cu_bias_add,
    sl__cu_bias_grad,
    cu_act_forward,
    cu_act_backward,
    sl__cu_im2col,
    sl__cu_col2im,
    sl__cu_maxpool_forward,
    sl__cu_maxpool_backward,
    sl__cu_avgpool_forward,
    sl__cu_avgpool_backward,
    sl__cu_softmax_xent,
    sl__cu_softmax_xent_start,
    sl__cu_softmax_xent_result,
    cu_dropout_forward,
    cu_dropout_backward,
    sl__cu_batchnorm_forward,
    sl__cu_batchnorm_backward,
    sl__cu_sgd_step,
    sl__cu_adam_step,
    sl__cu_sum_squares,
    cu_grads_out_reserve,
    cu_grads_out_start,
    cu_grads_out_wait,
    cu_copy_cols,
    sl__cu_gap_forward,
    sl__cu_gap_backward,
    cu_set_precision,
    cu_act_backward_set,
    sl__cu_maxpool_relu_backward_set,
    cu_bias_act,
    NULL, // task_slots: the model runs a convolution on the whole batch at once
    NULL, // run_tasks
#if SLUICE_HAVE_CUDNN
    sl__cu_conv_gemm,
    sl__cu_conv_kernel_grad,
    sl__cu_conv_input_grad,
#endif
};

static sl_status cuda_init(cuda_backend *cb) {
    CK(cudaSetDevice(cb->device));
    CK(cudaStreamCreateWithFlags(&cb->compute, cudaStreamNonBlocking));
    // the copy stream at the highest priority: a staged copy never queues behind kernels
    int lo_prio = 0, hi_prio = 0;
    CK(cudaDeviceGetStreamPriorityRange(&lo_prio, &hi_prio));
    CK(cudaStreamCreateWithPriority(&cb->copy, cudaStreamNonBlocking, hi_prio));
    for (int i = 0; i < SL_BK_STAGE_SLOTS; i++) {
        CK(cudaEventCreateWithFlags(&cb->copied[i], HOST_WAITED));
        CK(cudaEventCreateWithFlags(&cb->freed[i], cudaEventDisableTiming));
    }
    CK(cudaEventCreateWithFlags(&cb->zeroed, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&cb->xent_done, HOST_WAITED));
    CKB(cublasCreate(&cb->blas));
    CKB(cublasSetStream(cb->blas, cb->compute));
    // Full float32 GEMMs: TF32 would drift ~1e-3 from the CPU reference.
    CKB(cublasSetMathMode(cb->blas, CUBLAS_DEFAULT_MATH));
    CK(cudaMallocHost((void **)&cb->res, 2 * sizeof(struct host_result)));
    CK(cudaMalloc((void **)&cb->dres, 2 * sizeof(struct host_result)));
    sl_status s = sl__cu_dnn_open(cb);
    if (s) return s;
    return ensure_scratch(cb, 1 << 16);
}

extern "C" sl_status sl__backend_cuda_new(int device, sl_backend **out) {
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        sl_err(SL_EUNSUPPORTED, "CUDA backend: no usable GPU (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
        sl_err_hint("this machine has no NVIDIA GPU or driver; use the CPU backend");
        return SL_EUNSUPPORTED;
    }
    if (count == 0) {
        sl_err(SL_EUNSUPPORTED, "CUDA backend: no CUDA device on this machine");
        sl_err_hint("use the CPU backend");
        return SL_EUNSUPPORTED;
    }
    if (device < 0 || device >= count)
        return sl_err(SL_EINVAL, "CUDA backend: device %d does not exist (this machine has %d)", device, count);
    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (!cb) return sl_err(SL_ENOMEM, "CUDA backend: out of memory");
    cb->base.ops = &cuda_ops;
    cb->device = device;
    sl_status s = cuda_init(cb);
    if (s) {
        cu_destroy(&cb->base);
        return s;
    }
    *out = &cb->base;
    return SL_OK;
}
