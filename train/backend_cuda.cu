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
// the call, the error string and file:line (train/backend_cuda_priv.cuh). Convolution and
// pooling (global average pooling too) are in train/backend_cuda_conv.cu.
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

// A device buffer (*buf, *cap bytes) of at least `bytes`, grown by doubling.
static sl_status grow_device(void **buf, size_t *cap_io, size_t bytes) {
    if (bytes <= *cap_io) return SL_OK;
    size_t cap = *cap_io ? *cap_io : 4096;
    while (cap < bytes) cap *= 2;
    if (*buf) {
        // cudaFree waits for the device, so queued users of the old buffer are done.
        CK(cudaFree(*buf));
        *buf = NULL;
        *cap_io = 0;
    }
    CK(cudaMalloc(buf, cap));
    *cap_io = cap;
    return SL_OK;
}

static sl_status ensure_scratch(cuda_backend *cb, size_t bytes) {
    return grow_device(&cb->scratch, &cb->scratch_cap, bytes);
}

// ---------------------------------------------------------------------------------------
// memory

static void cu_destroy(sl_backend *b) {
    cuda_backend *cb = CB(b);
    if (!cb) return;
    cudaSetDevice(cb->device);
    if (cb->compute) cudaStreamSynchronize(cb->compute);
    if (cb->copy) cudaStreamSynchronize(cb->copy);
    if (cb->blas) cublasDestroy(cb->blas);
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
        CK(cudaEventCreateWithFlags(&cb->gdone[cb->ngev], cudaEventDisableTiming));
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

// ---- deterministic per-column reduction: out[c] = sum over r of f(r, c), in double ----
// Pass 1: block (32 columns x 8 row lanes) over one chunk of rows writes one partial per
// column; pass 2 adds the chunks' partials in chunk order. The order never depends on
// scheduling, so the same inputs give the same bits on every run. Double accumulation
// keeps the result within float rounding of the CPU reference (which also sums in double
// for batchnorm).

enum { RED_COLS = 32, RED_LANES = 8, RED_ROWS_PER_CHUNK = 512, RED_MAX_CHUNKS = 1024 };
// Doubles per column at the front of scratch that callers keep across col_reduce calls.
enum { RED_FRONT = 8 };

struct f_plain { // f = a[r][c]
    const float *a;
    __device__ double operator()(size_t r, size_t c, size_t cols) const { return (double)a[r * cols + c]; }
};
struct f_centered_sq { // f = (x[r][c] - mean[c])^2
    const float *x;
    const double *mean;
    __device__ double operator()(size_t r, size_t c, size_t cols) const {
        double d = (double)x[r * cols + c] - mean[c];
        return d * d;
    }
};
struct f_dy_xhat { // f = dy[r][c] * (x[r][c] - mean[c]) * invstd[c]
    const float *x, *dy, *mean, *invstd;
    __device__ double operator()(size_t r, size_t c, size_t cols) const {
        size_t i = r * cols + c;
        double xh = ((double)x[i] - (double)mean[c]) * (double)invstd[c];
        return (double)dy[i] * xh;
    }
};

template <typename F>
static __global__ void k_col_partial(F f, size_t rows, size_t cols, size_t rows_per_chunk, double *partial) {
    __shared__ double s[RED_LANES][RED_COLS + 1];
    size_t c = (size_t)blockIdx.x * RED_COLS + threadIdx.x;
    size_t r0 = (size_t)blockIdx.y * rows_per_chunk;
    size_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    double acc = 0.0;
    if (c < cols)
        for (size_t r = r0 + threadIdx.y; r < r1; r += RED_LANES) acc += f(r, c, cols);
    s[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        double t = 0.0;
        for (int l = 0; l < RED_LANES; l++) t += s[l][threadIdx.x];
        partial[(size_t)blockIdx.y * cols + c] = t;
    }
}

static __global__ void k_col_final(const double *partial, size_t chunks, size_t cols, double *out) {
    GRID_STRIDE(c, cols) {
        double t = 0.0;
        for (size_t g = 0; g < chunks; g++) t += partial[g * cols + c];
        out[c] = t;
    }
}

// Bytes of scratch a reduction over rows x cols needs, RED_FRONT doubles per column first.
static size_t col_reduce_scratch(size_t rows, size_t cols) {
    size_t chunks = (rows + RED_ROWS_PER_CHUNK - 1) / RED_ROWS_PER_CHUNK;
    if (chunks > RED_MAX_CHUNKS) chunks = RED_MAX_CHUNKS;
    if (chunks == 0) chunks = 1;
    return (RED_FRONT + chunks) * cols * sizeof(double);
}

// out must be in the front part of scratch or elsewhere; the partials follow the front.
// The caller has called ensure_scratch(col_reduce_scratch(rows, cols)).
template <typename F>
static sl_status col_reduce(cuda_backend *cb, F f, size_t rows, size_t cols, double *out) {
    size_t rpc = RED_ROWS_PER_CHUNK;
    size_t chunks = (rows + rpc - 1) / rpc;
    if (chunks > RED_MAX_CHUNKS) {
        rpc = (rows + RED_MAX_CHUNKS - 1) / RED_MAX_CHUNKS;
        chunks = (rows + rpc - 1) / rpc;
    }
    if (chunks == 0) chunks = 1;
    if ((cols + RED_COLS - 1) / RED_COLS > 0x7fffffffu)
        return sl_err(SL_EINVAL, "CUDA reduction over %zu columns is too wide", cols);
    double *partial = (double *)cb->scratch + RED_FRONT * cols;
    dim3 grid((unsigned)((cols + RED_COLS - 1) / RED_COLS), (unsigned)chunks);
    dim3 block(RED_COLS, RED_LANES);
    k_col_partial<F><<<grid, block, 0, cb->compute>>>(f, rows, cols, rpc, partial);
    CK_LAUNCH("col_partial");
    k_col_final<<<grid_for(cols), THREADS, 0, cb->compute>>>(partial, chunks, cols, out);
    CK_LAUNCH("col_final");
    return SL_OK;
}

static __global__ void k_add_double(float *dst, const double *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] += (float)src[i];
}

static sl_status cu_bias_grad(sl_backend *b, float *db, const float *dy, size_t rows, size_t cols) {
    ENTER(b);
    if (!rows || !cols) return SL_OK;
    sl_status s = ensure_scratch(cb, col_reduce_scratch(rows, cols));
    if (s) return s;
    double *sum = (double *)cb->scratch;
    f_plain f = {dy};
    if ((s = col_reduce(cb, f, rows, cols, sum))) return s;
    k_add_double<<<grid_for(cols), THREADS, 0, cb->compute>>>(db, sum, cols);
    CK_LAUNCH("bias_grad");
    return SL_OK;
}

static __global__ void k_act_forward(int act, const float *x, float *y, size_t n) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        switch (act) {
        case SL_ACT_RELU: v = v > 0.0f ? v : 0.0f; break;
        case SL_ACT_TANH: v = tanhf(v); break;
        case SL_ACT_SIGMOID: v = 1.0f / (1.0f + expf(-v)); break;
        default: break;
        }
        y[i] = v;
    }
}

static __global__ void k_act_backward(int act, const float *y, const float *dy, float *dx, size_t n) {
    GRID_STRIDE(i, n) {
        float v = y[i], d;
        switch (act) {
        case SL_ACT_RELU: d = v > 0.0f ? dy[i] : 0.0f; break;
        case SL_ACT_TANH: d = __fmul_rn(dy[i], 1.0f - __fmul_rn(v, v)); break;
        case SL_ACT_SIGMOID: d = __fmul_rn(__fmul_rn(dy[i], v), 1.0f - v); break;
        default: d = dy[i]; break;
        }
        dx[i] += d;
    }
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

// ---------------------------------------------------------------------------------------
// softmax cross-entropy: one warp per row, in double like the CPU reference; labels are
// checked first (SL_ERANGE leaves dlogits untouched), then one block sums the rows in
// order. Label smoothing: the target is t_on at the label plus t_off (smoothing / k)
// everywhere; t_off 0 takes the plain path, so its numbers are those of no smoothing.

static __global__ void k_xent_check(const int32_t *labels, int n, int k, int *first_bad) {
    // one block: the smallest bad row wins, whatever the thread order
    __shared__ int s[256];
    int bad = n;
    for (int r = threadIdx.x; r < n; r += blockDim.x)
        if ((labels[r] < 0 || labels[r] >= k) && r < bad) bad = r;
    s[threadIdx.x] = bad;
    __syncthreads();
    if (threadIdx.x == 0) {
        int b = n;
        for (int t = 0; t < (int)blockDim.x; t++) b = s[t] < b ? s[t] : b;
        *first_bad = b;
    }
}

static __global__ void k_xent_rows(const float *logits, const int32_t *labels, int n, int k, double t_on, double t_off,
                                   float grad_scale, float *dlogits, double *row_loss, int *row_ok,
                                   const int *first_bad) {
    int warp = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32);
    int lane = threadIdx.x & 31;
    if (warp >= n || *first_bad < n) return; // whole warps leave together
    const float *z = logits + (size_t)warp * k;
    int label = labels[warp];
    float zlab = z[label];
    // max with first-index tie break (the CPU's strict > scan), merged in a fixed order
    float mx = 0.0f;
    int mi = k;
    for (int j = lane; j < k; j += 32)
        if (mi == k || z[j] > mx) {
            mx = z[j];
            mi = j;
        }
    for (int off = 16; off > 0; off >>= 1) {
        float om = __shfl_xor_sync(0xffffffffu, mx, off);
        int oi = __shfl_xor_sync(0xffffffffu, mi, off);
        if (oi < k && (mi == k || om > mx || (om == mx && oi < mi))) {
            mx = om;
            mi = oi;
        }
    }
    double se = 0.0, zs = 0.0;
    int above = 0; // logits strictly greater than the label's (top-k)
    for (int j = lane; j < k; j += 32) {
        se += exp((double)z[j] - (double)mx);
        above += z[j] > zlab ? 1 : 0;
        if (t_off != 0.0) zs += (double)z[j] - (double)mx;
    }
    for (int sh = 16; sh > 0; sh >>= 1) {
        se += __shfl_xor_sync(0xffffffffu, se, sh);
        above += __shfl_xor_sync(0xffffffffu, above, sh);
        zs += __shfl_xor_sync(0xffffffffu, zs, sh);
    }
    if (dlogits) {
        float *d = dlogits + (size_t)warp * k;
        double inv = 1.0 / se;
        for (int j = lane; j < k; j += 32) {
            double p = exp((double)z[j] - (double)mx) * inv;
            d[j] = (float)((p - (j == label ? t_on : 0.0) - t_off) * (double)grad_scale);
        }
    }
    if (lane == 0) {
        double zl = (double)zlab - (double)mx;
        row_loss[warp] = t_off != 0.0 ? log(se) - (t_on * zl + t_off * zs) : log(se) - zl;
        row_ok[warp] = (mi == label ? 1 : 0) | (above < SL_TOPK && isfinite(zlab) ? 2 : 0);
    }
}

static __global__ void k_xent_sum(const double *row_loss, const int *row_ok, const int32_t *labels, int n,
                           const int *first_bad, struct host_result *o) {
    // Thread 0 adds the rows in order, the way the CPU does, so the loss sum matches it
    // bit for bit given equal row losses (a batch is at most a few thousand rows).
    if (threadIdx.x != 0) return;
    int bad = *first_bad;
    o->bad_row = bad < n ? bad : -1;
    o->bad_label = bad < n ? labels[bad] : 0;
    double tl = 0.0;
    long long tc = 0, t5 = 0;
    if (bad >= n)
        for (int r = 0; r < n; r++) {
            tl += row_loss[r];
            tc += row_ok[r] & 1;
            t5 += row_ok[r] >> 1;
        }
    o->sum = tl;
    o->count = tc;
    o->count5 = t5;
}

static sl_status cu_softmax_xent_start(sl_backend *b, const float *logits, const int32_t *labels, int n, int k,
                                       float smoothing, float grad_scale, float *dlogits) {
    ENTER(b);
    if (n < 0 || k <= 0) return sl_err(SL_EINVAL, "softmax_xent: bad size %d rows of %d logits", n, k);
    if (!(smoothing >= 0.0f && smoothing < 1.0f))
        return sl_err(SL_EINVAL, "softmax_xent: label smoothing %g is outside [0, 1)", smoothing);
    if (cb->xent_pending) return sl_err(SL_ESTATE, "softmax_xent_start: the previous result was not read");
    cb->xent_k = k;
    if (n == 0) {
        cb->res->sum = 0;
        cb->res->count = 0;
        cb->res->count5 = 0;
        cb->res->bad_row = -1;
        cb->xent_pending = true;
        CK(cudaEventRecord(cb->xent_done, cb->compute));
        return SL_OK;
    }
    sl_status s = ensure_scratch(cb, (size_t)n * (sizeof(double) + sizeof(int)) + sizeof(int));
    if (s) return s;
    double *row_loss = (double *)cb->scratch;
    int *row_ok = (int *)(row_loss + n);
    int *first_bad = row_ok + n;
    k_xent_check<<<1, 256, 0, cb->compute>>>(labels, n, k, first_bad);
    CK_LAUNCH("xent_check");
    size_t threads = (size_t)n * 32;
    unsigned blocks = (unsigned)((threads + THREADS - 1) / THREADS);
    k_xent_rows<<<blocks, THREADS, 0, cb->compute>>>(logits, labels, n, k, 1.0 - (double)smoothing,
                                                     (double)smoothing / k, grad_scale, dlogits, row_loss, row_ok,
                                                     first_bad);
    CK_LAUNCH("xent_rows");
    k_xent_sum<<<1, 32, 0, cb->compute>>>(row_loss, row_ok, labels, n, first_bad, cb->dres);
    CK_LAUNCH("xent_sum");
    // into pinned memory behind the step; softmax_xent_result waits for this event only
    CK(cudaMemcpyAsync(cb->res, cb->dres, sizeof(struct host_result), cudaMemcpyDeviceToHost, cb->compute));
    CK(cudaEventRecord(cb->xent_done, cb->compute));
    cb->xent_pending = true;
    return SL_OK;
}

static sl_status cu_softmax_xent_result(sl_backend *b, double *loss_sum_host, int64_t *correct_host,
                                        int64_t *top5_host) {
    ENTER(b);
    if (!cb->xent_pending) return sl_err(SL_ESTATE, "softmax_xent_result: no softmax_xent_start to wait for");
    cb->xent_pending = false;
    CK(cudaEventSynchronize(cb->xent_done));
    if (cb->res->bad_row >= 0)
        return sl_err(SL_ERANGE, "softmax_xent: label %d of row %d is outside 0..%d", cb->res->bad_label,
                      cb->res->bad_row, cb->xent_k - 1);
    if (loss_sum_host) *loss_sum_host = cb->res->sum;
    if (correct_host) *correct_host = cb->res->count;
    if (top5_host) *top5_host = cb->res->count5;
    return SL_OK;
}

static sl_status cu_softmax_xent(sl_backend *b, const float *logits, const int32_t *labels, int n, int k,
                                 float smoothing, float grad_scale, float *dlogits, double *loss_sum_host,
                                 int64_t *correct_host, int64_t *top5_host) {
    sl_status s = cu_softmax_xent_start(b, logits, labels, n, k, smoothing, grad_scale, dlogits);
    return s ? s : cu_softmax_xent_result(b, loss_sum_host, correct_host, top5_host);
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
// batch normalization, mirroring the CPU reference: per-channel statistics in double,
// then y = x * scale + shift with scale and shift rounded to float per channel.

// Scratch front (doubles, c each): [0] sums, [1] mean, [2] centred sums; floats after
// them: scale, shift.
static __global__ void k_bn_mean(int c, size_t rows, const double *sum, double *mean) {
    GRID_STRIDE(j, (size_t)c) mean[j] = sum[j] / (double)rows;
}

static __global__ void k_bn_train_stats(int c, size_t rows, const double *mean, const double *var_sum, const float *gamma,
                                 const float *beta, float momentum, float eps, float *running_mean,
                                 float *running_var, float *save_mean, float *save_invstd, float *scale,
                                 float *shift) {
    GRID_STRIDE(j, (size_t)c) {
        double v = var_sum[j] / (double)rows;
        double unbiased = rows > 1 ? var_sum[j] / (double)(rows - 1) : v;
        double inv = 1.0 / sqrt(v + (double)eps);
        if (save_mean) save_mean[j] = (float)mean[j];
        if (save_invstd) save_invstd[j] = (float)inv;
        running_mean[j] = (float)((1.0 - (double)momentum) * running_mean[j] + (double)momentum * mean[j]);
        running_var[j] = (float)((1.0 - (double)momentum) * running_var[j] + (double)momentum * unbiased);
        scale[j] = (float)((double)gamma[j] * inv);
        shift[j] = (float)((double)beta[j] - mean[j] * (double)gamma[j] * inv);
    }
}

static __global__ void k_bn_infer_stats(int c, const float *gamma, const float *beta, const float *running_mean,
                                 const float *running_var, float eps, float *scale, float *shift) {
    GRID_STRIDE(j, (size_t)c) {
        double inv = 1.0 / sqrt((double)running_var[j] + (double)eps);
        scale[j] = (float)((double)gamma[j] * inv);
        shift[j] = (float)((double)beta[j] - (double)running_mean[j] * (double)gamma[j] * inv);
    }
}

static __global__ void k_bn_apply(const float *x, float *y, size_t n, int c, const float *scale, const float *shift) {
    GRID_STRIDE(i, n) {
        int j = (int)(i % (size_t)c);
        y[i] = __fadd_rn(__fmul_rn(x[i], scale[j]), shift[j]);
    }
}

static sl_status cu_batchnorm_forward(sl_backend *b, const float *x, float *y, size_t rows, int c,
                                      const float *gamma, const float *beta, float *running_mean, float *running_var,
                                      float momentum, float eps, bool training, float *save_mean,
                                      float *save_invstd) {
    ENTER(b);
    if (c <= 0) return sl_err(SL_EINVAL, "batchnorm_forward: %d channels", c);
    if (training && rows == 0) return sl_err(SL_EINVAL, "batchnorm_forward: training on 0 rows");
    size_t n = rows * (size_t)c, cc = (size_t)c;
    sl_status s = ensure_scratch(cb, col_reduce_scratch(rows, cc));
    if (s) return s;
    double *sum = (double *)cb->scratch, *mean = sum + cc, *var_sum = sum + 2 * cc;
    float *scale = (float *)(sum + 3 * cc), *shift = scale + cc;
    if (training) {
        // Two passes (mean, then centred squares) like the CPU reference: no cancellation.
        f_plain fm = {x};
        if ((s = col_reduce(cb, fm, rows, cc, sum))) return s;
        k_bn_mean<<<grid_for(cc), THREADS, 0, cb->compute>>>(c, rows, sum, mean);
        CK_LAUNCH("batchnorm_mean");
        f_centered_sq fv = {x, mean};
        if ((s = col_reduce(cb, fv, rows, cc, var_sum))) return s;
        k_bn_train_stats<<<grid_for(cc), THREADS, 0, cb->compute>>>(c, rows, mean, var_sum, gamma, beta, momentum,
                                                                    eps, running_mean, running_var, save_mean,
                                                                    save_invstd, scale, shift);
        CK_LAUNCH("batchnorm_stats");
    } else {
        k_bn_infer_stats<<<grid_for(cc), THREADS, 0, cb->compute>>>(c, gamma, beta, running_mean, running_var, eps,
                                                                    scale, shift);
        CK_LAUNCH("batchnorm_stats");
    }
    if (!n) return SL_OK;
    k_bn_apply<<<grid_for(n), THREADS, 0, cb->compute>>>(x, y, n, c, scale, shift);
    CK_LAUNCH("batchnorm_apply");
    return SL_OK;
}

static __global__ void k_bn_bwd_params(int c, const double *sum_dy, const double *sum_dyx, float *dgamma, float *dbeta) {
    GRID_STRIDE(j, (size_t)c) {
        dbeta[j] += (float)sum_dy[j];
        dgamma[j] += (float)sum_dyx[j];
    }
}

static __global__ void k_bn_bwd_dx(const float *x, const float *dy, size_t n, int c, size_t rows, const float *gamma,
                            const float *mean, const float *invstd, const double *sum_dy, const double *sum_dyx,
                            float *dx) {
    const double inv_n = 1.0 / (double)rows;
    GRID_STRIDE(i, n) {
        int j = (int)(i % (size_t)c);
        double xh = ((double)x[i] - (double)mean[j]) * (double)invstd[j];
        double g = (double)gamma[j] * (double)invstd[j];
        dx[i] += (float)(g * ((double)dy[i] - sum_dy[j] * inv_n - xh * sum_dyx[j] * inv_n));
    }
}

static sl_status cu_batchnorm_backward(sl_backend *b, const float *x, const float *dy, size_t rows, int c,
                                       const float *gamma, const float *save_mean, const float *save_invstd,
                                       float *dx, float *dgamma, float *dbeta) {
    ENTER(b);
    if (c <= 0 || rows == 0) return sl_err(SL_EINVAL, "batchnorm_backward: %zu rows of %d channels", rows, c);
    size_t n = rows * (size_t)c, cc = (size_t)c;
    sl_status s = ensure_scratch(cb, col_reduce_scratch(rows, cc));
    if (s) return s;
    double *sum_dy = (double *)cb->scratch, *sum_dyx = sum_dy + cc;
    f_plain fd = {dy};
    if ((s = col_reduce(cb, fd, rows, cc, sum_dy))) return s;
    f_dy_xhat fx = {x, dy, save_mean, save_invstd};
    if ((s = col_reduce(cb, fx, rows, cc, sum_dyx))) return s;
    k_bn_bwd_params<<<grid_for(cc), THREADS, 0, cb->compute>>>(c, sum_dy, sum_dyx, dgamma, dbeta);
    CK_LAUNCH("batchnorm_backward_params");
    k_bn_bwd_dx<<<grid_for(n), THREADS, 0, cb->compute>>>(x, dy, n, c, rows, gamma, save_mean, save_invstd, sum_dy,
                                                          sum_dyx, dx);
    CK_LAUNCH("batchnorm_backward_dx");
    return SL_OK;
}

// ---------------------------------------------------------------------------------------
// optimizers: the CPU reference's formulas, operation for operation, with products
// rounded before they are added (no FMA) so both backends take the same steps.

static __global__ void k_sgd(float *p, const float *g, float *vel, size_t n, float lr, float momentum, int nesterov,
                      float wd) {
    GRID_STRIDE(i, n) {
        float gg = g[i] + __fmul_rn(wd, p[i]);
        if (!vel) {
            p[i] -= __fmul_rn(lr, gg);
            continue;
        }
        float v = __fmul_rn(momentum, vel[i]) + gg;
        vel[i] = v;
        p[i] -= __fmul_rn(lr, nesterov ? gg + __fmul_rn(momentum, v) : v);
    }
}

static __global__ void k_adam(float *p, const float *g, float *m, float *v, size_t n, float b1, float b2, float eps,
                       float step, float bc2s, float decay, float l2) {
    GRID_STRIDE(i, n) {
        float pi = __fmul_rn(p[i], decay);
        float gg = g[i] + __fmul_rn(l2, p[i]);
        float mi = __fmul_rn(b1, m[i]) + __fmul_rn(1.0f - b1, gg);
        float vi = __fmul_rn(b2, v[i]) + __fmul_rn(__fmul_rn(1.0f - b2, gg), gg);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - __fdiv_rn(__fmul_rn(step, mi), __fdiv_rn(__fsqrt_rn(vi), bc2s) + eps);
    }
}

static sl_status cu_sgd_step(sl_backend *b, float *p, const float *g, float *vel, size_t n, float lr,
                             float momentum, bool nesterov, float weight_decay) {
    ENTER(b);
    if (momentum != 0.0f && !vel)
        return sl_err(SL_EINVAL, "sgd_step: momentum %g needs a velocity buffer", (double)momentum);
    if (!n) return SL_OK;
    k_sgd<<<grid_for(n), THREADS, 0, cb->compute>>>(p, g, momentum != 0.0f ? vel : NULL, n, lr, momentum,
                                                    nesterov ? 1 : 0, weight_decay);
    CK_LAUNCH("sgd_step");
    return SL_OK;
}

static sl_status cu_adam_step(sl_backend *b, float *p, const float *g, float *m, float *v, size_t n, float lr,
                              float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t t) {
    ENTER(b);
    if (t < 1) return sl_err(SL_EINVAL, "adam_step: step count %lld must be >= 1", (long long)t);
    if (!n) return SL_OK;
    float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
    float bc2s = (float)sqrt(1.0 - pow((double)beta2, (double)t));
    float step = lr / bc1;
    float decay = decoupled ? 1.0f - lr * weight_decay : 1.0f;
    float l2 = decoupled ? 0.0f : weight_decay;
    k_adam<<<grid_for(n), THREADS, 0, cb->compute>>>(p, g, m, v, n, beta1, beta2, eps, step, bc2s, decay, l2);
    CK_LAUNCH("adam_step");
    return SL_OK;
}

// sum of squares: a fixed grid of blocks writes double partials, one block adds them.
enum { SSQ_BLOCKS = 256 };

static __global__ void k_ssq_partial(const float *x, size_t n, double *partial) {
    __shared__ double s[256];
    double acc = 0.0;
    GRID_STRIDE(i, n) {
        double v = x[i];
        acc += v * v;
    }
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int off = blockDim.x / 2; off > 0; off >>= 1) {
        if ((int)threadIdx.x < off) s[threadIdx.x] += s[threadIdx.x + off];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

static __global__ void k_ssq_final(const double *partial, int blocks, double *res) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        double t = 0.0;
        for (int i = 0; i < blocks; i++) t += partial[i];
        res[0] = t;
    }
}

static sl_status cu_sum_squares(sl_backend *b, const float *x, size_t n, double *out_host) {
    ENTER(b);
    *out_host = 0.0;
    if (!n) return SL_OK;
    sl_status s = ensure_scratch(cb, SSQ_BLOCKS * sizeof(double));
    if (s) return s;
    double *partial = (double *)cb->scratch;
    k_ssq_partial<<<SSQ_BLOCKS, 256, 0, cb->compute>>>(x, n, partial);
    CK_LAUNCH("sum_squares");
    k_ssq_final<<<1, 32, 0, cb->compute>>>(partial, SSQ_BLOCKS, &cb->dres[1].sum);
    CK_LAUNCH("sum_squares_final");
    CK(cudaMemcpyAsync(&cb->res[1].sum, &cb->dres[1].sum, sizeof(double), cudaMemcpyDeviceToHost, cb->compute));
    CK(cudaStreamSynchronize(cb->compute));
    *out_host = cb->res[1].sum;
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
    cu_bias_grad,
    cu_act_forward,
    cu_act_backward,
    sl__cu_im2col,
    sl__cu_col2im,
    sl__cu_maxpool_forward,
    sl__cu_maxpool_backward,
    sl__cu_avgpool_forward,
    sl__cu_avgpool_backward,
    cu_softmax_xent,
    cu_softmax_xent_start,
    cu_softmax_xent_result,
    cu_dropout_forward,
    cu_dropout_backward,
    cu_batchnorm_forward,
    cu_batchnorm_backward,
    cu_sgd_step,
    cu_adam_step,
    cu_sum_squares,
    cu_grads_out_reserve,
    cu_grads_out_start,
    cu_grads_out_wait,
    cu_copy_cols,
    sl__cu_gap_forward,
    sl__cu_gap_backward,
    cu_set_precision,
};

static sl_status cuda_init(cuda_backend *cb) {
    CK(cudaSetDevice(cb->device));
    CK(cudaStreamCreateWithFlags(&cb->compute, cudaStreamNonBlocking));
    // the copy stream at the highest priority: a staged copy never queues behind kernels
    int lo_prio = 0, hi_prio = 0;
    CK(cudaDeviceGetStreamPriorityRange(&lo_prio, &hi_prio));
    CK(cudaStreamCreateWithPriority(&cb->copy, cudaStreamNonBlocking, hi_prio));
    for (int i = 0; i < SL_BK_STAGE_SLOTS; i++) {
        CK(cudaEventCreateWithFlags(&cb->copied[i], cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&cb->freed[i], cudaEventDisableTiming));
    }
    CK(cudaEventCreateWithFlags(&cb->zeroed, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&cb->xent_done, cudaEventDisableTiming));
    CKB(cublasCreate(&cb->blas));
    CKB(cublasSetStream(cb->blas, cb->compute));
    // Full float32 GEMMs: TF32 would drift ~1e-3 from the CPU reference.
    CKB(cublasSetMathMode(cb->blas, CUBLAS_DEFAULT_MATH));
    CK(cudaMallocHost((void **)&cb->res, 2 * sizeof(struct host_result)));
    CK(cudaMalloc((void **)&cb->dres, 2 * sizeof(struct host_result)));
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
