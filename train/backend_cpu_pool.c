/* The CPU backend's pooling ops (train/backend.h): max and average pooling over NHWC
 * windows, forward and backward, and max pooling's backward fused with the gradient of the
 * ReLU before it. Split by output row (image, oy) across the backend's threads; channels are
 * the vectorized inner loop.
 *
 * Workload: the CNN's 2x2 pools over 28x28x32 and 14x14x64 activations at batch 128, where
 * each pass streams megabytes: one pass over dx instead of three (fill, scatter, ReLU
 * gradient) is what the fused op is for. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <stdbool.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "train/backend_cpu_priv.h"

typedef struct pool_ctx {
    const float *x, *dy;
    float *y, *dx;
    int32_t *argmax;
    int n, h, w, c, k, s, pt, pl, oh, ow;
} pool_ctx;

/* [*lo, *hi): the input rows (or columns) of output row (column) o's window, whose first
 * one is o * s - pad, clipped to [0, size). */
static inline void window_span(const pool_ctx *p, int o, int pad, int size, int *lo, int *hi) {
    int at = o * p->s - pad;
    *lo = at < 0 ? 0 : at;
    *hi = at + p->k < size ? at + p->k : size;
}

/* The window of output (r, ox), r an output row (image, oy): its image, and the input rows
 * [iy0, iy1) and columns [ix0, ix1) it covers, clipped to the image (empty: all padding). */
typedef struct window {
    size_t img;
    int iy0, iy1, ix0, ix1;
} window;

static inline window window_at(const pool_ctx *p, size_t r, int ox) {
    window v = {.img = r / (size_t)p->oh};
    window_span(p, (int)(r % (size_t)p->oh), p->pt, p->h, &v.iy0, &v.iy1);
    window_span(p, ox, p->pl, p->w, &v.ix0, &v.ix1);
    return v;
}

/* fn(p, window, o) for every output of output rows [lo, hi) (each an (image, oy)), o its
 * first float in y and argmax: the one walk over the windows of the forward pools. */
static inline void each_window(const pool_ctx *p, size_t lo, size_t hi,
                               void (*fn)(const pool_ctx *p, const window *v, size_t o)) {
    for (size_t r = lo; r < hi; r++)
        for (int ox = 0; ox < p->ow; ox++) {
            const window v = window_at(p, r, ox);
            fn(p, &v, (r * p->ow + ox) * (size_t)p->c);
        }
}

/* Output o's window v (each_window); channels are the vectorized inner loop. */
static void maxpool_window(const pool_ctx *p, const window *v, size_t o) {
    const int c = p->c;
    float *y = p->y + o;
    int32_t *am = p->argmax + o;
    if (v->iy0 >= v->iy1 || v->ix0 >= v->ix1) { /* a window entirely in the padding */
        for (int ch = 0; ch < c; ch++) { y[ch] = 0.0f; am[ch] = -1; }
        return;
    }
    /* up to 64 channels at a time in locals, a select per lane (4 lanes of SSE2 where there
     * is SSE2; compare-and-branch on random data mispredicted half the time), then stored
     * once */
    for (int c0 = 0; c0 < c; c0 += 64) {
        const int cn = c - c0 < 64 ? c - c0 : 64;
        float best[64];
        int32_t arg[64];
        size_t base = ((v->img * p->h + v->iy0) * p->w + v->ix0) * c + (size_t)c0;
        for (int ch = 0; ch < cn; ch++) {
            best[ch] = p->x[base + ch];
            arg[ch] = (int32_t)base + ch;
        }
        for (int iy = v->iy0; iy < v->iy1; iy++) {
            for (int ix = v->ix0; ix < v->ix1; ix++) {
                size_t idx = ((v->img * p->h + iy) * p->w + ix) * c + (size_t)c0;
                const float *xs = p->x + idx;
                const int32_t i0 = (int32_t)idx;
                int ch = 0;
#if defined(__SSE2__)
                for (; ch + 4 <= cn; ch += 4) { /* 4 lanes: (x > best) as C's > */
                    __m128 xv = _mm_loadu_ps(xs + ch), bv = _mm_loadu_ps(best + ch);
                    __m128 gt = _mm_cmpgt_ps(xv, bv);
                    _mm_storeu_ps(best + ch, _mm_or_ps(_mm_and_ps(gt, xv), _mm_andnot_ps(gt, bv)));
                    __m128i gi = _mm_castps_si128(gt);
                    __m128i iv = _mm_add_epi32(_mm_set1_epi32(i0 + ch), _mm_setr_epi32(0, 1, 2, 3));
                    __m128i av = _mm_loadu_si128((const __m128i *)(arg + ch));
                    _mm_storeu_si128((__m128i *)(arg + ch),
                                     _mm_or_si128(_mm_and_si128(gi, iv), _mm_andnot_si128(gi, av)));
                }
#endif
                for (; ch < cn; ch++) {
                    bool gt = xs[ch] > best[ch];
                    best[ch] = gt ? xs[ch] : best[ch];
                    arg[ch] = gt ? i0 + ch : arg[ch];
                }
            }
        }
        memcpy(y + c0, best, sizeof(float) * (size_t)cn);
        memcpy(am + c0, arg, sizeof(int32_t) * (size_t)cn);
    }
}

static void maxpool_rows(void *vc, size_t lo, size_t hi) { each_window(vc, lo, hi, maxpool_window); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define POOL512 1

/* maxpool_window for c a multiple of 16 on AVX-512F: 16 channels a vector, the running max
 * and its index in registers. The same comparisons in the same order (x > best, false for NaN
 * and ties: the first cell wins), so the same floats and indices. */
__attribute__((target("avx512f"))) static void maxpool_window512(const pool_ctx *p, const window *v, size_t o) {
    const int c = p->c;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    bool empty = v->iy0 >= v->iy1 || v->ix0 >= v->ix1; /* a window entirely in the padding */
    for (int c0 = 0; c0 < c; c0 += 16) {
        __m512 best = _mm512_setzero_ps();
        __m512i arg = _mm512_set1_epi32(-1);
        for (int iy = v->iy0; iy < v->iy1 && !empty; iy++)
            for (int ix = v->ix0; ix < v->ix1; ix++) {
                size_t idx = ((v->img * p->h + iy) * p->w + ix) * c + (size_t)c0;
                __m512 x = _mm512_loadu_ps(p->x + idx);
                __m512i at = _mm512_add_epi32(_mm512_set1_epi32((int32_t)idx), lane);
                if (iy == v->iy0 && ix == v->ix0) {
                    best = x, arg = at;
                    continue;
                }
                __mmask16 gt = _mm512_cmp_ps_mask(x, best, _CMP_GT_OQ);
                best = _mm512_mask_mov_ps(best, gt, x);
                arg = _mm512_mask_mov_epi32(arg, gt, at);
            }
        _mm512_storeu_ps(p->y + o + c0, best);
        _mm512_storeu_si512((void *)(p->argmax + o + c0), arg);
    }
}

__attribute__((target("avx512f"))) static void maxpool_rows512(void *vc, size_t lo, size_t hi) {
    each_window(vc, lo, hi, maxpool_window512);
}
#endif

static sl_status cpu_maxpool_forward(sl_backend *b, const float *x, int n, int h, int w, int c, int k, int s,
                                     int pad_top, int pad_left, int oh, int ow, float *y, int32_t *argmax) {
    sl_status st = conv_check("maxpool_forward", n, h, w, c, k, k, s, oh, ow);
    if (st) return st;
    if ((size_t)n * h * w * c > INT32_MAX) return sl_err(SL_EUNSUPPORTED, "maxpool_forward: input of %zu floats is over 2^31", (size_t)n * h * w * c);
    pool_ctx p = {.x = x, .y = y, .argmax = argmax, .n = n, .h = h, .w = w, .c = c, .k = k, .s = s,
                  .pt = pad_top, .pl = pad_left, .oh = oh, .ow = ow};
    size_t rows = (size_t)n * oh;
    sl__range_fn fn = maxpool_rows;
#ifdef POOL512
    if (c % 16 == 0 && __builtin_cpu_supports("avx512f")) fn = maxpool_rows512;
#endif
    par_for((cpu_backend *)b, rows, rows * ow * c * k * k, fn, &p);
    return SL_OK;
}

typedef struct scatter_ctx {
    const float *dy;
    const int32_t *argmax;
    float *dx;
} scatter_ctx;

static void maxpool_scatter(void *vc, size_t lo, size_t hi) {
    const scatter_ctx *c = vc;
    for (size_t i = lo; i < hi; i++) {
        int32_t a = c->argmax[i];
        if (a >= 0) c->dx[a] += c->dy[i];
    }
}

static sl_status cpu_maxpool_backward(sl_backend *b, const float *dy, const int32_t *argmax, int n, int h, int w,
                                      int c, int k, int s, int pad_top, int pad_left, int oh, int ow, float *dx) {
    (void)h, (void)w, (void)k, (void)s, (void)pad_top, (void)pad_left;
    if (n < 0 || c <= 0 || oh <= 0 || ow <= 0)
        return sl_err(SL_EINVAL, "maxpool_backward: bad geometry n=%d c=%d out=%dx%d", n, c, oh, ow);
    /* Different outputs may pick the same input when windows overlap, so the serial loop
     * (output order: the order the CUDA kernel's gather adds in) is one pass over ny values. */
    size_t ny = (size_t)n * oh * ow * c;
    scatter_ctx sc = {dy, argmax, dx};
    maxpool_scatter(&sc, 0, ny);
    return SL_OK;
}

/* One output row (image, oy) per index: the input rows its windows cover (the image's last
 * output row also takes every row below its windows) set to 0, then each output's gradient
 * written at its argmax where the pooled value is > 0. The windows do not overlap (s == k)
 * and an argmax lies in its own window's rows, so no two rows write the same float. */
static void maxpool_relu_bwd_rows(void *vc, size_t lo, size_t hi) {
    const pool_ctx *p = vc;
    const size_t row_floats = (size_t)p->w * p->c, out_floats = (size_t)p->ow * p->c;
    for (size_t r = lo; r < hi; r++) {
        window v = window_at(p, r, 0); /* its rows: those of every window of output row r */
        if (r % (size_t)p->oh == (size_t)p->oh - 1) v.iy1 = p->h;
        if (v.iy1 > v.iy0)
            memset(p->dx + (v.img * p->h + (size_t)v.iy0) * row_floats, 0,
                   (size_t)(v.iy1 - v.iy0) * row_floats * sizeof(float));
        const float *g = p->dy + r * out_floats, *pooled = p->x + r * out_floats;
        const int32_t *am = p->argmax + r * out_floats;
        for (size_t j = 0; j < out_floats; j++)
            if (pooled[j] > 0.0f && am[j] >= 0) p->dx[am[j]] = 0.0f + g[j];
    }
}

static sl_status cpu_maxpool_relu_backward_set(sl_backend *b, const float *dy, const float *pooled,
                                               const int32_t *argmax, int n, int h, int w, int c, int k, int s,
                                               int pad_top, int pad_left, int oh, int ow, float *dx) {
    sl_status st = conv_check("maxpool_relu_backward_set", n, h, w, c, k, k, s, oh, ow);
    if (st) return st;
    if (s != k || pad_top < 0 || pad_left < 0 || (oh - 1) * s - pad_top >= h || (ow - 1) * s - pad_left >= w)
        return sl_err(SL_EINVAL, "maxpool_relu_backward_set: windows %dx%d stride %d padding %d,%d out %dx%d over %dx%d "
                      "do not tile the input", k, k, s, pad_top, pad_left, oh, ow, h, w);
    pool_ctx p = {.x = pooled, .dy = dy, .dx = dx, .argmax = (int32_t *)argmax, .n = n, .h = h, .w = w, .c = c,
                  .k = k, .s = s, .pt = pad_top, .pl = pad_left, .oh = oh, .ow = ow};
    size_t rows = (size_t)n * oh;
    par_for((cpu_backend *)b, rows, (size_t)n * h * w * c, maxpool_relu_bwd_rows, &p);
    return SL_OK;
}

static void avgpool_window(const pool_ctx *p, const window *v, size_t o) {
    const int c = p->c;
    float *y = p->y + o;
    for (int ch = 0; ch < c; ch++) y[ch] = 0.0f;
    if (v->iy1 <= v->iy0 || v->ix1 <= v->ix0) return;
    for (int iy = v->iy0; iy < v->iy1; iy++)
        for (int ix = v->ix0; ix < v->ix1; ix++) {
            const float *xs = p->x + ((v->img * p->h + iy) * p->w + ix) * c;
            for (int ch = 0; ch < c; ch++) y[ch] += xs[ch];
        }
    float inv = 1.0f / (float)((v->iy1 - v->iy0) * (v->ix1 - v->ix0));
    for (int ch = 0; ch < c; ch++) y[ch] *= inv;
}

static void avgpool_fwd_rows(void *vc, size_t lo, size_t hi) { each_window(vc, lo, hi, avgpool_window); }

/* By image: overlapping windows of one image add into the same cells, but never across
 * images. */
static void avgpool_bwd_images(void *vc, size_t lo, size_t hi) {
    const pool_ctx *p = vc;
    const int c = p->c;
    for (size_t img = lo; img < hi; img++) {
        for (int oy = 0; oy < p->oh; oy++) {
            int iy0, iy1;
            window_span(p, oy, p->pt, p->h, &iy0, &iy1);
            for (int ox = 0; ox < p->ow; ox++) {
                int ix0, ix1;
                window_span(p, ox, p->pl, p->w, &ix0, &ix1);
                if (iy1 <= iy0 || ix1 <= ix0) continue;
                float inv = 1.0f / (float)((iy1 - iy0) * (ix1 - ix0));
                const float *dy = p->dy + ((img * p->oh + oy) * p->ow + ox) * c;
                for (int iy = iy0; iy < iy1; iy++)
                    for (int ix = ix0; ix < ix1; ix++) {
                        float *dx = p->dx + ((img * p->h + iy) * p->w + ix) * c;
                        for (int ch = 0; ch < c; ch++) dx[ch] += dy[ch] * inv;
                    }
            }
        }
    }
}

/* Average pooling forward (x into y, by output row) or backward (dy into dx, by image): the
 * geometry checked, then the work split. */
static sl_status avgpool_run(sl_backend *b, const char *op, const pool_ctx *p) {
    bool fwd = p->y != NULL;
    return window_run(b, op, p->n, p->h, p->w, p->c, p->k, p->k, p->s, p->oh, p->ow,
                      fwd ? (size_t)p->n * p->oh : (size_t)p->n, (size_t)p->n * p->oh * p->ow * p->c * p->k * p->k,
                      fwd ? avgpool_fwd_rows : avgpool_bwd_images, (void *)p);
}

static sl_status cpu_avgpool_forward(sl_backend *b, const float *x, int n, int h, int w, int c, int k, int s,
                                     int pad_top, int pad_left, int oh, int ow, float *y) {
    pool_ctx p = {.x = x, .y = y, .n = n, .h = h, .w = w, .c = c, .k = k, .s = s, .pt = pad_top,
                  .pl = pad_left, .oh = oh, .ow = ow};
    return avgpool_run(b, "avgpool_forward", &p);
}

static sl_status cpu_avgpool_backward(sl_backend *b, const float *dy, int n, int h, int w, int c, int k, int s,
                                      int pad_top, int pad_left, int oh, int ow, float *dx) {
    pool_ctx p = {.dy = dy, .dx = dx, .n = n, .h = h, .w = w, .c = c, .k = k, .s = s, .pt = pad_top,
                  .pl = pad_left, .oh = oh, .ow = ow};
    return avgpool_run(b, "avgpool_backward", &p);
}


/* This file's members of the backend's op table (train/backend_cpu.c). */
void sl__cpu_pool_ops(sl_backend_ops *o) {
    o->maxpool_forward = cpu_maxpool_forward, o->maxpool_backward = cpu_maxpool_backward;
    o->maxpool_relu_backward_set = cpu_maxpool_relu_backward_set;
    o->avgpool_forward = cpu_avgpool_forward, o->avgpool_backward = cpu_avgpool_backward;
}
