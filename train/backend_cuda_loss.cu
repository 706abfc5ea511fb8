// The CUDA backend's loss: softmax cross-entropy (with label smoothing and top-k counts),
// queued without a device sync (softmax_xent_start) and read back through pinned memory
// (softmax_xent_result), as train/backend_cuda.cu describes.
//
// Workload: one call per training or evaluation step, on the logits of a batch of
// 32..1024 rows of a few to a thousand classes.
#include <math.h>
#include <stdint.h>

#include "train/backend_cuda_priv.cuh"

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

sl_status sl__cu_softmax_xent_start(sl_backend *b, const float *logits, const int32_t *labels, int n, int k,
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

sl_status sl__cu_softmax_xent_result(sl_backend *b, double *loss_sum_host, int64_t *correct_host,
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

sl_status sl__cu_softmax_xent(sl_backend *b, const float *logits, const int32_t *labels, int n, int k,
                              float smoothing, float grad_scale, float *dlogits, double *loss_sum_host,
                              int64_t *correct_host, int64_t *top5_host) {
    sl_status s = sl__cu_softmax_xent_start(b, logits, labels, n, k, smoothing, grad_scale, dlogits);
    return s ? s : sl__cu_softmax_xent_result(b, loss_sum_host, correct_host, top5_host);
}
