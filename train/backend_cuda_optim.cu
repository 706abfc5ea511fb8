// The CUDA backend's optimizer steps (SGD with momentum or Nesterov, Adam and AdamW) and
// the sum of squares that gradient clipping asks for.
//
// Workload: one step per parameter tensor per training step, tensors of a few to a few
// million floats.
#include <math.h>
#include <stdint.h>

#include "train/backend_cuda_priv.cuh"

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

sl_status sl__cu_sgd_step(sl_backend *b, float *p, const float *g, float *vel, size_t n, float lr,
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

sl_status sl__cu_adam_step(sl_backend *b, float *p, const float *g, float *m, float *v, size_t n, float lr,
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

sl_status sl__cu_sum_squares(sl_backend *b, const float *x, size_t n, double *out_host) {
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
