/* The CPU backend's elementwise and row ops (train/backend.h): fill, axpy, scale, bias and
 * its gradient, the activations and their gradients (bias and activation fused in one pass),
 * dropout, column copies and global average pooling (the graph joins), and the optimizers'
 * updates. Each is one pass over memory split by par_for; the sums that reduce (bias_grad,
 * sum_squares) run in a fixed order, so the floats do not depend on the thread count.
 *
 * Workload: bandwidth-bound passes over the MLP's and CNN's activations (up to a few MB per
 * op) and over the whole parameter buffer once per step. */
/* GCC's vectorizer at its full cost model (-O2's skips loops of unknown trip count or aliasing pointers) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/backend_cpu_priv.h"

typedef struct vec_ctx {
    float *x, *y, *z;
    const float *cx, *cy, *cz;
    float a, b2;
    size_t cols, ld;
    int act;
    bool set; /* act_bwd_range: overwrite dx instead of adding to it */
} vec_ctx;

static void fill_range(void *vc, size_t lo, size_t hi) {
    vec_ctx *c = vc;
    float v = c->a;
    float *x = c->x;
    if (v == 0.0f) memset(x + lo, 0, (hi - lo) * sizeof(float));
    else for (size_t i = lo; i < hi; i++) x[i] = v;
}

static sl_status cpu_fill(sl_backend *b, float *x, float v, size_t n) {
    vec_ctx c = {.x = x, .a = v};
    par_for((cpu_backend *)b, n, n, fill_range, &c);
    return SL_OK;
}

static void axpy_range(void *vc, size_t lo, size_t hi) {
    vec_ctx *c = vc;
    const float *x = c->cx;
    float *y = c->y, a = c->a;
    for (size_t i = lo; i < hi; i++) y[i] += a * x[i];
}

static sl_status cpu_axpy(sl_backend *b, size_t n, float alpha, const float *x, float *y) {
    vec_ctx c = {.cx = x, .y = y, .a = alpha};
    par_for((cpu_backend *)b, n, 2 * n, axpy_range, &c);
    return SL_OK;
}

static void scale_range(void *vc, size_t lo, size_t hi) {
    vec_ctx *c = vc;
    float *x = c->x, a = c->a;
    for (size_t i = lo; i < hi; i++) x[i] *= a;
}

static sl_status cpu_scale(sl_backend *b, size_t n, float alpha, float *x) {
    vec_ctx c = {.x = x, .a = alpha};
    par_for((cpu_backend *)b, n, n, scale_range, &c);
    return SL_OK;
}

static void bias_add_rows(void *vc, size_t lo, size_t hi) {
    vec_ctx *c = vc;
    size_t cols = c->cols;
    const float *bias = c->cx;
    for (size_t r = lo; r < hi; r++) {
        float *y = c->y + r * cols;
        for (size_t j = 0; j < cols; j++) y[j] += bias[j];
    }
}

static sl_status cpu_bias_add(sl_backend *b, float *y, const float *bias, size_t rows, size_t cols) {
    vec_ctx c = {.y = y, .cx = bias, .cols = cols};
    par_for((cpu_backend *)b, rows, rows * cols, bias_add_rows, &c);
    return SL_OK;
}

/* Column sums in blocks of rows: each block sums into its own row of partials, which are
 * then added in block order, so the result does not depend on the thread count. */
#define BG_BLOCKS 16

typedef struct bias_grad_ctx {
    const float *dy;
    size_t rows, cols;
    float *partial; /* [BG_BLOCKS][cols] */
} bias_grad_ctx;

static void bias_grad_blocks(void *vc, size_t lo, size_t hi) {
    bias_grad_ctx *c = vc;
    for (size_t blk = lo; blk < hi; blk++) {
        float *acc = c->partial + blk * c->cols;
        size_t r0 = c->rows * blk / BG_BLOCKS, r1 = c->rows * (blk + 1) / BG_BLOCKS;
        memset(acc, 0, c->cols * sizeof(float));
        for (size_t r = r0; r < r1; r++) {
            const float *d = c->dy + r * c->cols;
            for (size_t j = 0; j < c->cols; j++) acc[j] += d[j];
        }
    }
}

static sl_status cpu_bias_grad(sl_backend *bb, float *db, const float *dy, size_t rows, size_t cols) {
    cpu_backend *b = (cpu_backend *)bb;
    if (rows == 0 || cols == 0) return SL_OK;
    if (rows < 4 * BG_BLOCKS) {
        for (size_t r = 0; r < rows; r++)
            for (size_t j = 0; j < cols; j++) db[j] += dy[r * cols + j];
        return SL_OK;
    }
    float *partial = malloc(BG_BLOCKS * cols * sizeof(float));
    if (!partial) return sl_err(SL_ENOMEM, "bias_grad: out of memory");
    bias_grad_ctx c = {dy, rows, cols, partial};
    par_for(b, BG_BLOCKS, rows * cols, bias_grad_blocks, &c);
    for (size_t blk = 0; blk < BG_BLOCKS; blk++)
        for (size_t j = 0; j < cols; j++) db[j] += partial[blk * cols + j];
    free(partial);
    return SL_OK;
}

/* y[i] = act(X) for i in [lo, hi), X an expression of i: the one place the activations'
 * formulas are written, so act_forward and bias_act give the same floats. */
#define ACT_FWD(act, lo, hi, y, X)                                                      \
    switch (act) {                                                                      \
    case SL_ACT_NONE: for (size_t i = lo; i < hi; i++) y[i] = X; break;                 \
    case SL_ACT_RELU:                                                                   \
        for (size_t i = lo; i < hi; i++) {                                              \
            float t_ = X;                                                               \
            y[i] = t_ > 0.0f ? t_ : 0.0f;                                               \
        }                                                                               \
        break;                                                                          \
    case SL_ACT_TANH: for (size_t i = lo; i < hi; i++) y[i] = tanhf(X); break;          \
    case SL_ACT_SIGMOID: for (size_t i = lo; i < hi; i++) y[i] = 1.0f / (1.0f + expf(-(X))); break; \
    }

static void act_fwd_range(void *vc, size_t lo, size_t hi) {
    vec_ctx *c = vc;
    const float *x = c->cx;
    float *y = c->y;
    if (c->act == SL_ACT_NONE) {
        if (x != y) memcpy(y + lo, x + lo, (hi - lo) * sizeof(float));
        return;
    }
    ACT_FWD((sl_act)c->act, lo, hi, y, x[i])
}

static sl_status cpu_act_forward(sl_backend *b, sl_act act, const float *x, float *y, size_t n) {
    if (act < SL_ACT_NONE || act > SL_ACT_SIGMOID) return sl_err(SL_EINVAL, "act_forward: unknown activation %d", (int)act);
    vec_ctx c = {.cx = x, .y = y, .act = act};
    par_for((cpu_backend *)b, n, act == SL_ACT_RELU || act == SL_ACT_NONE ? 2 * n : 16 * n, act_fwd_range, &c);
    return SL_OK;
}

/* bias_add and act_forward in one pass: act(y + bias) by act_fwd_range's formulas. */
static void bias_act_rows(void *vc, size_t lo, size_t hi) {
    const vec_ctx *c = vc;
    const size_t cols = c->cols;
    const float *bias = c->cx;
    for (size_t r = lo; r < hi; r++) {
        float *y = c->y + r * cols;
        ACT_FWD((sl_act)c->act, 0, cols, y, y[i] + bias[i])
    }
}

static sl_status cpu_bias_act(sl_backend *b, sl_act act, float *y, const float *bias, size_t rows, size_t cols) {
    if (act < SL_ACT_NONE || act > SL_ACT_SIGMOID) return sl_err(SL_EINVAL, "bias_act: unknown activation %d", (int)act);
    vec_ctx c = {.y = y, .cx = bias, .cols = cols, .act = act};
    size_t n = rows * cols;
    par_for((cpu_backend *)b, rows, act == SL_ACT_RELU || act == SL_ACT_NONE ? 2 * n : 16 * n, bias_act_rows, &c);
    return SL_OK;
}

/* dx[i] ASSIGN the gradient through the activation: += accumulates (act_backward), "= 0.0f +"
 * overwrites with the very float 0 + g (act_backward_set: -0 becomes +0, as after a fill). */
#define ACT_BWD(ASSIGN)                                                                      \
    switch ((sl_act)c->act) {                                                                \
    case SL_ACT_NONE: for (size_t i = lo; i < hi; i++) dx[i] ASSIGN dy[i]; break;            \
    case SL_ACT_RELU: for (size_t i = lo; i < hi; i++) dx[i] ASSIGN(y[i] > 0.0f ? dy[i] : 0.0f); break; \
    case SL_ACT_TANH: for (size_t i = lo; i < hi; i++) dx[i] ASSIGN dy[i] * (1.0f - y[i] * y[i]); break; \
    case SL_ACT_SIGMOID: for (size_t i = lo; i < hi; i++) dx[i] ASSIGN dy[i] * y[i] * (1.0f - y[i]); break; \
    }

static void act_bwd_range(void *vc, size_t lo, size_t hi) {
    vec_ctx *c = vc;
    const float *y = c->cx, *dy = c->cy;
    float *dx = c->z;
    if (c->set) ACT_BWD(= 0.0f +)
    else ACT_BWD(+=)
}

static sl_status act_bwd(sl_backend *b, sl_act act, const float *y, const float *dy, float *dx, size_t n, bool set) {
    if (act < SL_ACT_NONE || act > SL_ACT_SIGMOID) return sl_err(SL_EINVAL, "act_backward: unknown activation %d", (int)act);
    vec_ctx c = {.cx = y, .cy = dy, .z = dx, .act = act, .set = set};
    par_for((cpu_backend *)b, n, 3 * n, act_bwd_range, &c);
    return SL_OK;
}

static sl_status cpu_act_backward(sl_backend *b, sl_act act, const float *y, const float *dy, float *dx, size_t n) {
    return act_bwd(b, act, y, dy, dx, n, false);
}

static sl_status cpu_act_backward_set(sl_backend *b, sl_act act, const float *y, const float *dy, float *dx,
                                      size_t n) {
    return act_bwd(b, act, y, dy, dx, n, true);
}

/* ---- graph joins ---------------------------------------------------------------------- */

typedef struct cols_ctx {
    float *dst;
    const float *src;
    size_t ld_dst, ld_src, cols;
    bool acc;
    int hw, c;
} cols_ctx;

static void copy_cols_rows(void *vc, size_t lo, size_t hi) {
    const cols_ctx *k = vc;
    for (size_t r = lo; r < hi; r++) {
        float *d = k->dst + r * k->ld_dst;
        const float *s = k->src + r * k->ld_src;
        if (k->acc)
            for (size_t j = 0; j < k->cols; j++) d[j] += s[j];
        else
            memcpy(d, s, k->cols * sizeof(float));
    }
}

static sl_status cpu_copy_cols(sl_backend *b, float *dst, size_t ld_dst, const float *src, size_t ld_src,
                               size_t rows, size_t cols, bool accumulate) {
    if (cols > ld_dst || cols > ld_src)
        return sl_err(SL_EINVAL, "copy_cols: %zu columns wider than the row strides %zu / %zu", cols, ld_dst, ld_src);
    cols_ctx k = {.dst = dst, .src = src, .ld_dst = ld_dst, .ld_src = ld_src, .cols = cols, .acc = accumulate};
    par_for((cpu_backend *)b, rows, rows * cols, copy_cols_rows, &k);
    return SL_OK;
}

static void gap_fwd_images(void *vc, size_t lo, size_t hi) {
    const cols_ctx *k = vc;
    const int c = k->c;
    float inv = 1.0f / (float)k->hw;
    for (size_t i = lo; i < hi; i++) {
        float *y = k->dst + i * (size_t)c;
        const float *x = k->src + i * (size_t)k->hw * c;
        for (int ch = 0; ch < c; ch++) y[ch] = 0.0f;
        for (int p = 0; p < k->hw; p++)
            for (int ch = 0; ch < c; ch++) y[ch] += x[(size_t)p * c + ch];
        for (int ch = 0; ch < c; ch++) y[ch] *= inv;
    }
}

static void gap_bwd_images(void *vc, size_t lo, size_t hi) {
    const cols_ctx *k = vc;
    const int c = k->c;
    float inv = 1.0f / (float)k->hw;
    for (size_t i = lo; i < hi; i++) {
        const float *dy = k->src + i * (size_t)c;
        float *dx = k->dst + i * (size_t)k->hw * c;
        for (int p = 0; p < k->hw; p++)
            for (int ch = 0; ch < c; ch++) dx[(size_t)p * c + ch] += dy[ch] * inv;
    }
}

static sl_status gap_run(sl_backend *b, const char *op, float *dst, const float *src, int n, int hw, int c,
                         sl__range_fn fn) {
    if (n < 0 || hw <= 0 || c <= 0) return sl_err(SL_EINVAL, "%s: bad shape n=%d hw=%d c=%d", op, n, hw, c);
    cols_ctx k = {.dst = dst, .src = src, .hw = hw, .c = c};
    par_for((cpu_backend *)b, (size_t)n, (size_t)n * hw * c, fn, &k);
    return SL_OK;
}

static sl_status cpu_gap_forward(sl_backend *b, const float *x, int n, int hw, int c, float *y) {
    return gap_run(b, "global_avgpool_forward", y, x, n, hw, c, gap_fwd_images);
}

static sl_status cpu_gap_backward(sl_backend *b, const float *dy, int n, int hw, int c, float *dx) {
    return gap_run(b, "global_avgpool_backward", dx, dy, n, hw, c, gap_bwd_images);
}

/* ---- dropout ------------------------------------------------------------------------- */

typedef struct drop_ctx {
    const float *x, *dy, *mask;
    float *y, *m, *dx;
    uint64_t thr, seed;
    float keep_scale;
} drop_ctx;

static void dropout_fwd_range(void *vc, size_t lo, size_t hi) {
    const drop_ctx *c = vc;
    for (size_t i = lo; i < hi; i++) {
        float m = (uint64_t)sl__bk_rand_u32(c->seed, i) >= c->thr ? c->keep_scale : 0.0f;
        c->m[i] = m;
        c->y[i] = c->x[i] * m;
    }
}

static sl_status cpu_dropout_forward(sl_backend *b, const float *x, float *y, float *mask, size_t n, float rate,
                                     uint64_t seed) {
    if (!(rate >= 0.0f && rate < 1.0f)) return sl_err(SL_EINVAL, "dropout: rate %g must be in [0, 1)", rate);
    drop_ctx c = {.x = x, .y = y, .m = mask, .thr = (uint64_t)((double)rate * 4294967296.0), .seed = seed,
                  .keep_scale = 1.0f / (1.0f - rate)};
    par_for((cpu_backend *)b, n, 8 * n, dropout_fwd_range, &c);
    return SL_OK;
}

static void dropout_bwd_range(void *vc, size_t lo, size_t hi) {
    const drop_ctx *c = vc;
    for (size_t i = lo; i < hi; i++) c->dx[i] += c->dy[i] * c->mask[i];
}

static sl_status cpu_dropout_backward(sl_backend *b, const float *dy, const float *mask, float *dx, size_t n) {
    drop_ctx c = {.dy = dy, .mask = mask, .dx = dx};
    par_for((cpu_backend *)b, n, 3 * n, dropout_bwd_range, &c);
    return SL_OK;
}

/* ---- optimizers ---------------------------------------------------------------------- */

typedef struct opt_ctx {
    float *p, *vel, *m, *v;
    const float *g;
    float lr, momentum, wd, b1, b2, eps;
    bool nesterov, decoupled;
    float bc1, bc2sqrt; /* Adam: 1 - b1^t and sqrt(1 - b2^t) */
} opt_ctx;

static void sgd_range(void *vc, size_t lo, size_t hi) {
    const opt_ctx *c = vc;
    float *p = c->p, *vel = c->vel;
    const float *g = c->g;
    const float lr = c->lr, mom = c->momentum, wd = c->wd;
    if (!vel) {
        for (size_t i = lo; i < hi; i++) p[i] -= lr * (g[i] + wd * p[i]);
        return;
    }
    if (c->nesterov) {
        for (size_t i = lo; i < hi; i++) {
            float gg = g[i] + wd * p[i];
            float v = mom * vel[i] + gg;
            vel[i] = v;
            p[i] -= lr * (gg + mom * v);
        }
    } else {
        for (size_t i = lo; i < hi; i++) {
            float v = mom * vel[i] + (g[i] + wd * p[i]);
            vel[i] = v;
            p[i] -= lr * v;
        }
    }
}

static sl_status cpu_sgd_step(sl_backend *b, float *p, const float *g, float *vel, size_t n, float lr,
                              float momentum, bool nesterov, float weight_decay) {
    opt_ctx c = {.p = p, .g = g, .vel = momentum != 0.0f ? vel : NULL, .lr = lr, .momentum = momentum,
                 .nesterov = nesterov, .wd = weight_decay};
    if (c.vel == NULL && momentum != 0.0f) return sl_err(SL_EINVAL, "sgd_step: momentum %g needs a velocity buffer", momentum);
    par_for((cpu_backend *)b, n, 4 * n, sgd_range, &c);
    return SL_OK;
}

static void adam_range(void *vc, size_t lo, size_t hi) {
    const opt_ctx *c = vc;
    float *p = c->p, *m = c->m, *v = c->v;
    const float *g = c->g;
    const float b1 = c->b1, b2 = c->b2, eps = c->eps, wd = c->wd;
    const float step = c->lr / c->bc1, bc2s = c->bc2sqrt;
    const float decay = c->decoupled ? 1.0f - c->lr * wd : 1.0f;
    const float l2 = c->decoupled ? 0.0f : wd;
    for (size_t i = lo; i < hi; i++) {
        float pi = p[i] * decay;
        float gg = g[i] + l2 * p[i];
        float mi = b1 * m[i] + (1.0f - b1) * gg;
        float vi = b2 * v[i] + (1.0f - b2) * gg * gg;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step * mi / (sqrtf(vi) / bc2s + eps);
    }
}

static sl_status cpu_adam_step(sl_backend *b, float *p, const float *g, float *m, float *v, size_t n, float lr,
                               float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t t) {
    if (t < 1) return sl_err(SL_EINVAL, "adam_step: step count %lld must be >= 1", (long long)t);
    opt_ctx c = {.p = p, .g = g, .m = m, .v = v, .lr = lr, .b1 = beta1, .b2 = beta2, .eps = eps,
                 .wd = weight_decay, .decoupled = decoupled,
                 .bc1 = (float)(1.0 - pow(beta1, (double)t)),
                 .bc2sqrt = (float)sqrt(1.0 - pow(beta2, (double)t))};
    par_for((cpu_backend *)b, n, 6 * n, adam_range, &c);
    return SL_OK;
}

static sl_status cpu_sum_squares(sl_backend *b, const float *x, size_t n, double *out_host) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    *out_host = s;
    return SL_OK;
}


/* This file's members of the backend's op table (train/backend_cpu.c). */
void sl__cpu_vec_ops(sl_backend_ops *o) {
    o->fill = cpu_fill, o->axpy = cpu_axpy, o->scale = cpu_scale;
    o->bias_add = cpu_bias_add, o->bias_grad = cpu_bias_grad, o->bias_act = cpu_bias_act;
    o->act_forward = cpu_act_forward, o->act_backward = cpu_act_backward;
    o->act_backward_set = cpu_act_backward_set;
    o->dropout_forward = cpu_dropout_forward, o->dropout_backward = cpu_dropout_backward;
    o->copy_cols = cpu_copy_cols;
    o->global_avgpool_forward = cpu_gap_forward, o->global_avgpool_backward = cpu_gap_backward;
    o->sgd_step = cpu_sgd_step, o->adam_step = cpu_adam_step, o->sum_squares = cpu_sum_squares;
}
