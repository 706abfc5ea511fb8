// The CUDA backend's convolution and pooling ops: im2col / col2im (a convolution is
// im2col + GEMM, train/backend_cuda.cu), max, average and global average pooling, forward
// and backward.
// Deterministic like the rest of the backend: col2im, maxpool_backward and
// avgpool_backward gather per input element in the CPU's order instead of scattering with
// atomics, so every run gives the same bits.
//
// Workload: the trainer's small CNNs (a few conv and pool layers on batches of 32..1024
// images of 28x28 to 224x224), one launch per op.
#include <stdint.h>
#include <stdlib.h>

#include "train/backend_cuda_priv.cuh"

// ---------------------------------------------------------------------------------------
// convolution as im2col + GEMM

struct conv_geom {
    int n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow;
};

static __global__ void k_im2col(const float *x, conv_geom g, float *col, size_t total) {
    GRID_STRIDE(i, total) {
        size_t t = i;
        int ch = (int)(t % g.c); t /= g.c;
        int kx = (int)(t % g.kw); t /= g.kw;
        int ky = (int)(t % g.kh); t /= g.kh;
        int ox = (int)(t % g.ow); t /= g.ow;
        int oy = (int)(t % g.oh); t /= g.oh;
        size_t ni = t;
        int iy = oy * g.stride - g.pad_top + ky;
        int ix = ox * g.stride - g.pad_left + kx;
        float v = 0.0f;
        if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) v = x[((ni * g.h + iy) * g.w + ix) * g.c + ch];
        col[i] = v;
    }
}

// Element i of an n x h x w x c (NHWC) tensor: its image, row, column and channel.
struct nhwc {
    size_t n;
    int y, x, c;
};

static __device__ nhwc nhwc_of(size_t i, int h, int w, int c) {
    nhwc e;
    e.c = (int)(i % c); i /= c;
    e.x = (int)(i % w); i /= w;
    e.y = (int)(i % h);
    e.n = i / h;
    return e;
}

// The output positions whose window covers input row iy, column ix: rows oy0..oy1 and
// columns ox0..ox1 (empty when a first is past its last); py, px are the input's position
// in the padded image (the window of output oy starts at padded row oy * stride).
struct cover {
    int py, px, oy0, oy1, ox0, ox1;
};

static __device__ cover covering(conv_geom g, int iy, int ix) {
    cover v;
    v.py = iy + g.pad_top;
    v.px = ix + g.pad_left;
    int ay = v.py - g.kh + 1, ax = v.px - g.kw + 1;
    v.oy0 = ay <= 0 ? 0 : (ay + g.stride - 1) / g.stride;
    v.ox0 = ax <= 0 ? 0 : (ax + g.stride - 1) / g.stride;
    v.oy1 = v.py / g.stride;
    v.ox1 = v.px / g.stride;
    if (v.oy1 > g.oh - 1) v.oy1 = g.oh - 1;
    if (v.ox1 > g.ow - 1) v.ox1 = g.ow - 1;
    return v;
}

// One thread per input element: visits the output positions whose window covers it in
// increasing (oy, ox) order, the order a sequential scatter over col rows would use.
static __global__ void k_col2im(const float *col, conv_geom g, float *dx, size_t total) {
    size_t kcols = (size_t)g.kh * g.kw * g.c;
    GRID_STRIDE(i, total) {
        nhwc e = nhwc_of(i, g.h, g.w, g.c);
        size_t ni = e.n;
        int iy = e.y, ix = e.x, ch = e.c;
        cover cv = covering(g, iy, ix);
        int py = cv.py, px = cv.px;
        float acc = dx[i];
        for (int oy = cv.oy0; oy <= cv.oy1; oy++) {
            int ky = py - oy * g.stride;
            for (int ox = cv.ox0; ox <= cv.ox1; ox++) {
                int kx = px - ox * g.stride;
                size_t row = (ni * g.oh + oy) * g.ow + ox;
                acc += col[row * kcols + ((size_t)ky * g.kw + kx) * g.c + ch];
            }
        }
        dx[i] = acc;
    }
}

static sl_status check_geom(const conv_geom *g, const char *op) {
    if (g->n < 0 || g->h <= 0 || g->w <= 0 || g->c <= 0 || g->kh <= 0 || g->kw <= 0 || g->stride <= 0 ||
        g->pad_top < 0 || g->pad_left < 0 || g->oh <= 0 || g->ow <= 0)
        return sl_err(SL_EINVAL, "%s: bad geometry n=%d h=%d w=%d c=%d k=%dx%d stride=%d pad=%d,%d out=%dx%d", op,
                      g->n, g->h, g->w, g->c, g->kh, g->kw, g->stride, g->pad_top, g->pad_left, g->oh, g->ow);
    return SL_OK;
}

sl_status sl__cu_im2col(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw, int stride,
                        int pad_top, int pad_left, int oh, int ow, float *col) {
    ENTER(b);
    conv_geom g = {n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow};
    if (check_geom(&g, "im2col")) return SL_EINVAL;
    size_t total = (size_t)n * oh * ow * kh * kw * c;
    if (!total) return SL_OK;
    k_im2col<<<grid_for(total), THREADS, 0, cb->compute>>>(x, g, col, total);
    CK_LAUNCH("im2col");
    return SL_OK;
}

sl_status sl__cu_col2im(sl_backend *b, const float *col, int n, int h, int w, int c, int kh, int kw, int stride,
                        int pad_top, int pad_left, int oh, int ow, float *dx) {
    ENTER(b);
    conv_geom g = {n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow};
    if (check_geom(&g, "col2im")) return SL_EINVAL;
    size_t total = (size_t)n * h * w * c;
    if (!total) return SL_OK;
    k_col2im<<<grid_for(total), THREADS, 0, cb->compute>>>(col, g, dx, total);
    CK_LAUNCH("col2im");
    return SL_OK;
}

// ---------------------------------------------------------------------------------------
// pooling (window k x k: kh = kw = k in conv_geom)

static __global__ void k_maxpool_fwd(const float *x, conv_geom g, float *y, int32_t *argmax, size_t total) {
    GRID_STRIDE(i, total) {
        nhwc e = nhwc_of(i, g.oh, g.ow, g.c);
        size_t ni = e.n;
        int oy = e.y, ox = e.x, ch = e.c;
        float best = -INFINITY;
        long long bi = -1;
        for (int ky = 0; ky < g.kh; ky++) {
            int iy = oy * g.stride - g.pad_top + ky;
            if (iy < 0 || iy >= g.h) continue;
            for (int kx = 0; kx < g.kw; kx++) {
                int ix = ox * g.stride - g.pad_left + kx;
                if (ix < 0 || ix >= g.w) continue;
                size_t xi = ((ni * g.h + iy) * g.w + ix) * g.c + ch;
                float v = x[xi];
                if (bi < 0 || v > best) {
                    best = v;
                    bi = (long long)xi;
                }
            }
        }
        // A window entirely in the padding (never produced by "same"/"valid") gives 0 and
        // no gradient.
        y[i] = bi < 0 ? 0.0f : best;
        argmax[i] = (int32_t)bi;
    }
}

// One thread per input element: the outputs whose window covers it, in increasing (oy, ox)
// order (the CPU's scatter order), add their gradient when they chose this element. One
// writer per element, no atomics: the same bits on every run, also for overlapping windows.
static __global__ void k_maxpool_bwd(const float *dy, const int32_t *argmax, conv_geom g, float *dx, size_t total) {
    GRID_STRIDE(i, total) {
        nhwc e = nhwc_of(i, g.h, g.w, g.c);
        size_t ni = e.n;
        int iy = e.y, ix = e.x, ch = e.c;
        cover cv = covering(g, iy, ix);
        float acc = dx[i];
        bool hit = false;
        for (int oy = cv.oy0; oy <= cv.oy1; oy++)
            for (int ox = cv.ox0; ox <= cv.ox1; ox++) {
                size_t o = ((ni * g.oh + oy) * g.ow + ox) * g.c + ch;
                if ((size_t)argmax[o] == i) {
                    acc += dy[o];
                    hit = true;
                }
            }
        if (hit) dx[i] = acc;
    }
}

// maxpool_relu_backward_set (windows that tile the input: s == k): one thread per input
// element, which lies in at most one window; it takes that window's gradient when the window
// chose it and the pooled value (the ReLU's output there) is > 0, else 0. The floats of the
// fallback (zero-fill, maxpool_backward, act_backward_set through the ReLU): 0 + (0 + g).
static __global__ void k_maxpool_relu_bwd_set(const float *dy, const float *pooled, const int32_t *argmax,
                                              conv_geom g, float *dx, size_t total) {
    GRID_STRIDE(i, total) {
        nhwc e = nhwc_of(i, g.h, g.w, g.c);
        int oy = (e.y + g.pad_top) / g.stride, ox = (e.x + g.pad_left) / g.stride;
        float v = 0.0f;
        if (oy < g.oh && ox < g.ow) {
            size_t o = ((e.n * g.oh + oy) * g.ow + ox) * g.c + e.c;
            if ((size_t)argmax[o] == i && pooled[o] > 0.0f) v = 0.0f + dy[o];
        }
        dx[i] = v;
    }
}

static __device__ int window_cells(conv_geom g, int oy, int ox) {
    int y0 = oy * g.stride - g.pad_top, x0 = ox * g.stride - g.pad_left;
    int y1 = y0 + g.kh, x1 = x0 + g.kw;
    if (y0 < 0) y0 = 0;
    if (x0 < 0) x0 = 0;
    if (y1 > g.h) y1 = g.h;
    if (x1 > g.w) x1 = g.w;
    int cy = y1 - y0, cx = x1 - x0;
    return cy > 0 && cx > 0 ? cy * cx : 0;
}

static __global__ void k_avgpool_fwd(const float *x, conv_geom g, float *y, size_t total) {
    GRID_STRIDE(i, total) {
        nhwc e = nhwc_of(i, g.oh, g.ow, g.c);
        size_t ni = e.n;
        int oy = e.y, ox = e.x, ch = e.c;
        float s = 0.0f;
        int cnt = 0;
        for (int ky = 0; ky < g.kh; ky++) {
            int iy = oy * g.stride - g.pad_top + ky;
            if (iy < 0 || iy >= g.h) continue;
            for (int kx = 0; kx < g.kw; kx++) {
                int ix = ox * g.stride - g.pad_left + kx;
                if (ix < 0 || ix >= g.w) continue;
                s += x[((ni * g.h + iy) * g.w + ix) * g.c + ch];
                cnt++;
            }
        }
        y[i] = cnt ? s * (1.0f / (float)cnt) : 0.0f;
    }
}

static __global__ void k_avgpool_bwd(const float *dy, conv_geom g, float *dx, size_t total) {
    GRID_STRIDE(i, total) {
        nhwc e = nhwc_of(i, g.h, g.w, g.c);
        size_t ni = e.n;
        int iy = e.y, ix = e.x, ch = e.c;
        cover cv = covering(g, iy, ix);
        float acc = dx[i];
        for (int oy = cv.oy0; oy <= cv.oy1; oy++)
            for (int ox = cv.ox0; ox <= cv.ox1; ox++) {
                int cnt = window_cells(g, oy, ox);
                if (cnt) acc += __fmul_rn(dy[((ni * g.oh + oy) * g.ow + ox) * g.c + ch], 1.0f / (float)cnt);
            }
        dx[i] = acc;
    }
}

sl_status sl__cu_maxpool_forward(sl_backend *b, const float *x, int n, int h, int w, int c, int k, int s,
                                 int pad_top, int pad_left, int oh, int ow, float *y, int32_t *argmax) {
    ENTER(b);
    conv_geom g = {n, h, w, c, k, k, s, pad_top, pad_left, oh, ow};
    if (check_geom(&g, "maxpool_forward")) return SL_EINVAL;
    size_t total = (size_t)n * oh * ow * c;
    if ((size_t)n * h * w * c > (size_t)INT32_MAX)
        return sl_err(SL_EUNSUPPORTED, "maxpool_forward: input of %zu floats is over 2^31 (int32 argmax)",
                      (size_t)n * h * w * c);
    if (!total) return SL_OK;
    k_maxpool_fwd<<<grid_for(total), THREADS, 0, cb->compute>>>(x, g, y, argmax, total);
    CK_LAUNCH("maxpool_forward");
    return SL_OK;
}

sl_status sl__cu_maxpool_backward(sl_backend *b, const float *dy, const int32_t *argmax, int n, int h, int w,
                                  int c, int k, int s, int pad_top, int pad_left, int oh, int ow, float *dx) {
    ENTER(b);
    conv_geom g = {n, h, w, c, k, k, s, pad_top, pad_left, oh, ow};
    if (check_geom(&g, "maxpool_backward")) return SL_EINVAL;
    size_t total = (size_t)n * h * w * c;
    if (!total) return SL_OK;
    if (total > (size_t)INT32_MAX)
        return sl_err(SL_EUNSUPPORTED, "maxpool_backward: input of %zu floats is over 2^31 (int32 argmax)", total);
    k_maxpool_bwd<<<grid_for(total), THREADS, 0, cb->compute>>>(dy, argmax, g, dx, total);
    CK_LAUNCH("maxpool_backward");
    return SL_OK;
}

sl_status sl__cu_maxpool_relu_backward_set(sl_backend *b, const float *dy, const float *pooled,
                                           const int32_t *argmax, int n, int h, int w, int c, int k, int s,
                                           int pad_top, int pad_left, int oh, int ow, float *dx) {
    ENTER(b);
    conv_geom g = {n, h, w, c, k, k, s, pad_top, pad_left, oh, ow};
    if (check_geom(&g, "maxpool_relu_backward_set")) return SL_EINVAL;
    if (s != k || (oh - 1) * s - pad_top >= h || (ow - 1) * s - pad_left >= w)
        return sl_err(SL_EINVAL, "maxpool_relu_backward_set: windows %dx%d stride %d padding %d,%d out %dx%d over %dx%d "
                      "do not tile the input", k, k, s, pad_top, pad_left, oh, ow, h, w);
    size_t total = (size_t)n * h * w * c;
    if (!total) return SL_OK;
    if (total > (size_t)INT32_MAX)
        return sl_err(SL_EUNSUPPORTED, "maxpool_relu_backward_set: input of %zu floats is over 2^31 (int32 argmax)",
                      total);
    k_maxpool_relu_bwd_set<<<grid_for(total), THREADS, 0, cb->compute>>>(dy, pooled, argmax, g, dx, total);
    CK_LAUNCH("maxpool_relu_backward_set");
    return SL_OK;
}

sl_status sl__cu_avgpool_forward(sl_backend *b, const float *x, int n, int h, int w, int c, int k, int s,
                                 int pad_top, int pad_left, int oh, int ow, float *y) {
    ENTER(b);
    conv_geom g = {n, h, w, c, k, k, s, pad_top, pad_left, oh, ow};
    if (check_geom(&g, "avgpool_forward")) return SL_EINVAL;
    size_t total = (size_t)n * oh * ow * c;
    if (!total) return SL_OK;
    k_avgpool_fwd<<<grid_for(total), THREADS, 0, cb->compute>>>(x, g, y, total);
    CK_LAUNCH("avgpool_forward");
    return SL_OK;
}

sl_status sl__cu_avgpool_backward(sl_backend *b, const float *dy, int n, int h, int w, int c, int k, int s,
                                  int pad_top, int pad_left, int oh, int ow, float *dx) {
    ENTER(b);
    conv_geom g = {n, h, w, c, k, k, s, pad_top, pad_left, oh, ow};
    if (check_geom(&g, "avgpool_backward")) return SL_EINVAL;
    size_t total = (size_t)n * h * w * c;
    if (!total) return SL_OK;
    k_avgpool_bwd<<<grid_for(total), THREADS, 0, cb->compute>>>(dy, g, dx, total);
    CK_LAUNCH("avgpool_backward");
    return SL_OK;
}

// ---------------------------------------------------------------------------------------
// global average pooling: one thread per (image, channel) sums the cells in the CPU's order

static __global__ void k_gap_fwd(const float *x, int hw, int c, float *y, size_t total) {
    GRID_STRIDE(i, total) {
        size_t ni = i / (size_t)c;
        int ch = (int)(i % (size_t)c);
        const float *xs = x + ni * (size_t)hw * c + ch;
        float s = 0.0f;
        for (int p = 0; p < hw; p++) s += xs[(size_t)p * c];
        y[i] = __fmul_rn(s, 1.0f / (float)hw);
    }
}

static __global__ void k_gap_bwd(const float *dy, int hw, int c, float *dx, size_t total) {
    GRID_STRIDE(i, total) {
        size_t ni = i / ((size_t)hw * c);
        int ch = (int)(i % (size_t)c);
        dx[i] += __fmul_rn(dy[ni * c + ch], 1.0f / (float)hw);
    }
}

sl_status sl__cu_gap_forward(sl_backend *b, const float *x, int n, int hw, int c, float *y) {
    ENTER(b);
    if (n < 0 || hw <= 0 || c <= 0)
        return sl_err(SL_EINVAL, "global_avgpool_forward: bad shape n=%d hw=%d c=%d", n, hw, c);
    size_t total = (size_t)n * c;
    if (!total) return SL_OK;
    k_gap_fwd<<<grid_for(total), THREADS, 0, cb->compute>>>(x, hw, c, y, total);
    CK_LAUNCH("global_avgpool_forward");
    return SL_OK;
}

sl_status sl__cu_gap_backward(sl_backend *b, const float *dy, int n, int hw, int c, float *dx) {
    ENTER(b);
    if (n < 0 || hw <= 0 || c <= 0)
        return sl_err(SL_EINVAL, "global_avgpool_backward: bad shape n=%d hw=%d c=%d", n, hw, c);
    size_t total = (size_t)n * hw * c;
    if (!total) return SL_OK;
    k_gap_bwd<<<grid_for(total), THREADS, 0, cb->compute>>>(dy, hw, c, dx, total);
    CK_LAUNCH("global_avgpool_backward");
    return SL_OK;
}
