// The CUDA backend's column reductions and the ops made of them: bias_grad and batch
// normalization (forward and backward), each a sum over the rows of every column.
// Deterministic like the rest of the backend (train/backend_cuda.cu): the rows are added in
// a fixed order, in double, whatever the scheduling, so every run gives the same bits.
//
// Workload: the trainer's dense and convolution layers, one reduction per bias gradient
// and two per batchnorm pass, over batches of 32..1024 rows (times the image cells for a
// convolution's channels).
#include <stdint.h>

#include "train/backend_cuda_priv.cuh"

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

sl_status sl__cu_bias_grad(sl_backend *b, float *db, const float *dy, size_t rows, size_t cols) {
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

sl_status sl__cu_batchnorm_forward(sl_backend *b, const float *x, float *y, size_t rows, int c,
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

sl_status sl__cu_batchnorm_backward(sl_backend *b, const float *x, const float *dy, size_t rows, int c,
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
