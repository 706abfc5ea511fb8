/* The CPU backend: every op of train/backend.h on host memory. GEMMs go to OpenBLAS's
 * cblas_sgemm or train/gemm_avx512.c (sl__gemm512_wanted; parts of 24 x 24 and up), in bf16 /
 * fp16 mode on inputs rounded first, which emulates mixed precision for tests and as the
 * CUDA backend's reference; the other ops are plain C loops written so the compiler can
 * vectorize their inner dimension, split across the backend's own team of threads when they
 * are big enough to pay for the hand-off (a few tens of microseconds; see par_for). The
 * pooling ops live in train/backend_cpu_pool.c (train/backend_cpu_priv.h is what they share).
 *
 * Workload: Fashion-MNIST sized models (MLP 784-256-128-10, the TensorFlow tutorial CNN) at
 * batch 32..512 on a few cores. Per step the GEMMs dominate; im2col/col2im, pooling, bias,
 * activations and the optimizer are memory-bound passes that must stay at a few percent.
 * Threads: up to `threads` parts per op (GEMMs too: OpenBLAS runs single-threaded), claimed
 * by the calling thread and a team of threads - 1 workers. */
/* GCC's vectorizer at its full cost model (-O2's skips loops of unknown trip count or aliasing pointers) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/pool.h"
#include "train/backend.h"
#include "train/backend_cpu_priv.h"
#include "train/blas_priv.h"
#include "train/cpu_team.h"
#include "train/gemm_avx512.h"


/* ---- parallel loops ---------------------------------------------------------------- */

/* Tasks (run_tasks): one part per thread, each looping over tasks claimed from a counter;
 * the part number is the slot. In bf16 / fp16 mode the GEMMs share the rounding buffer
 * b->lp, so tasks then run one at a time. */
typedef struct task_run {
    sl_status (*fn)(void *ctx, int t, int slot);
    void *ctx;
    int n;
    atomic_int next;
    pthread_mutex_t mu;
    int err_task; /* the lowest failed task (n: none) and its error */
    sl_error err;
} task_run;

static void task_part(void *vc, size_t lo, size_t hi) {
    task_run *r = vc;
    for (size_t slot = lo; slot < hi; slot++)
        for (int t; (t = atomic_fetch_add(&r->next, 1)) < r->n;) {
            if (r->fn(r->ctx, t, (int)slot) == SL_OK) continue;
            pthread_mutex_lock(&r->mu);
            if (t < r->err_task) {
                r->err_task = t;
                sl_err_save(&r->err);
            }
            pthread_mutex_unlock(&r->mu);
            atomic_store(&r->next, r->n); /* skip the tasks not yet claimed */
        }
}

static int cpu_task_slots(sl_backend *bb) {
    cpu_backend *b = (cpu_backend *)bb;
    if (!b->team || b->prec != SL_BK_FP32) return 1;
    return b->threads < MAX_PARTS ? b->threads : MAX_PARTS;
}

static sl_status cpu_run_tasks(sl_backend *bb, int n, int slots, sl_status (*fn)(void *ctx, int t, int slot),
                               void *ctx) {
    cpu_backend *b = (cpu_backend *)bb;
    if (slots > cpu_task_slots(bb)) slots = cpu_task_slots(bb);
    task_run r = {.fn = fn, .ctx = ctx, .n = n, .err_task = n};
    atomic_init(&r.next, 0);
    pthread_mutex_init(&r.mu, NULL);
    if (slots < 2 || n < 2 || !sl__team_run(b->team, slots, (size_t)slots, task_part, &r))
        task_part(&r, 0, 1); /* alone, on slot 0 (the team is busy: nothing was claimed) */
    pthread_mutex_destroy(&r.mu);
    return r.err_task < n ? sl_err_restore(&r.err) : SL_OK;
}

/* ---- memory -------------------------------------------------------------------------- */

static void cpu_destroy(sl_backend *bb) {
    cpu_backend *b = (cpu_backend *)bb;
    sl__team_free(b->team);
    free(b->lp);
    free(b);
}

static sl_status cpu_alloc(sl_backend *b, size_t bytes, void **out) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded == 0) rounded = 64;
    void *p = aligned_alloc(64, rounded);
    if (!p) {
        *out = NULL;
        return sl_err(SL_ENOMEM, "cpu backend: out of memory allocating %zu bytes", bytes);
    }
    memset(p, 0, rounded);
    *out = p;
    return SL_OK;
}

static void cpu_free(sl_backend *b, void *p) { free(p); }

static sl_status cpu_memcpy(sl_backend *b, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memmove(dst, src, bytes);
    return SL_OK;
}

static sl_status cpu_nop(sl_backend *b) { return SL_OK; }

/* ---- dense math ---------------------------------------------------------------------- */

/* GEMMs are split across our own pool, each part a single-threaded call on a slice of C
 * (OpenBLAS's own workers spin for long after each call, taking a small machine's cores from
 * the loops between GEMMs and from the input pipeline), along the longer of M and N: the one
 * whose operand each part then packs only a slice of. */
typedef struct gemm_ctx {
    bool ta, tb, split_n, own; /* own: sl__gemm512 */
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *a, *b;
    float *c;
} gemm_ctx;

static void gemm_part(void *vc, size_t lo, size_t hi) {
    const gemm_ctx *g = vc;
    /* parts are whole blocks of 16 rows / columns (the last one may be short) */
    int i0 = (int)lo * 16, i1 = (int)hi * 16;
    int lim = g->split_n ? g->n : g->m;
    if (i1 > lim) i1 = lim;
    if (i0 >= i1) return;
    const float *a = g->a, *b = g->b;
    float *c = g->c;
    int m = g->m, n = g->n;
    if (g->split_n) {
        b += g->tb ? (size_t)i0 * g->ldb : (size_t)i0;
        c += i0;
        n = i1 - i0;
    } else {
        a += g->ta ? (size_t)i0 : (size_t)i0 * g->lda;
        c += (size_t)i0 * g->ldc;
        m = i1 - i0;
    }
    if (g->own && sl__gemm512_worth(m, n) &&
        !sl__gemm512(g->ta, g->tb, m, n, g->k, g->alpha, a, g->lda, b, g->ldb, g->beta, c, g->ldc))
        return; /* else (out of memory for its buffers) the BLAS */
    cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans, m, n, g->k,
                g->alpha, a, g->lda, b, g->ldb, g->beta, c, g->ldc);
}

/* A (stored ra x ca) and B (rb x cb) rounded into b->lp (below). */
static sl_status round_inputs(cpu_backend *b, const float **a, int *lda, size_t ra, size_t ca, const float **bm,
                              int *ldb, size_t rb, size_t cb);

static sl_status cpu_set_precision(sl_backend *bb, sl_bk_precision p) {
    if (p != SL_BK_FP32 && p != SL_BK_BF16 && p != SL_BK_FP16)
        return sl_err(SL_EINVAL, "set_precision: unknown precision %d", (int)p);
    ((cpu_backend *)bb)->prec = p;
    return SL_OK;
}

static sl_status cpu_gemm(sl_backend *bb, bool ta, bool tb, int m, int n, int k, float alpha,
                          const float *a, int lda, const float *bm, int ldb, float beta, float *c, int ldc) {
    cpu_backend *b = (cpu_backend *)bb;
    if (m < 0 || n < 0 || k < 0) return sl_err(SL_EINVAL, "gemm: negative size %dx%dx%d", m, n, k);
    if (m == 0 || n == 0) return SL_OK;
    if (k == 0) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return SL_OK;
    }
    if (b->prec != SL_BK_FP32) {
        sl_status s = round_inputs(b, &a, &lda, (size_t)(ta ? k : m), (size_t)(ta ? m : k), &bm, &ldb,
                                   (size_t)(tb ? n : k), (size_t)(tb ? k : n));
        if (s) return s;
    }
    gemm_ctx g = {ta, tb, n > m, sl__gemm512_wanted(), m, n, k, lda, ldb, ldc, alpha, beta, a, bm, c};
    size_t blocks = ((size_t)(g.split_n ? n : m) + 15) / 16;
    /* work in multiply-adds / 16: one part per thread once a GEMM is ~1M multiply-adds */
    par_for(b, blocks, (size_t)m * n * k / 16, gemm_part, &g);
    return SL_OK;
}

typedef struct vec_ctx {
    float *x, *y, *z;
    const float *cx, *cy, *cz;
    float a, b2;
    size_t cols, ld;
    int act;
    bool set; /* act_bwd_range: overwrite dx instead of adding to it */
} vec_ctx;

/* Mixed precision, emulated: a GEMM input's rows x cols block cx (row stride ld) rounded to
 * bf16 / fp16 (act: the sl_bk_precision) and back into y, a compact float matrix (row
 * stride cols). */
static void round_rows(void *vc, size_t lo, size_t hi) {
    const vec_ctx *r = vc;
    for (size_t i = lo; i < hi; i++) {
        const float *s = r->cx + i * r->ld;
        float *d = r->y + i * r->cols;
        if (r->act == SL_BK_BF16)
            for (size_t j = 0; j < r->cols; j++) d[j] = sl_f32_from_bf16(sl_bf16_from_f32(s[j]));
        else
            for (size_t j = 0; j < r->cols; j++) d[j] = sl_f32_from_f16(sl_f16_from_f32(s[j]));
    }
}

/* A (stored ra x ca) and B (rb x cb) rounded into b->lp: *a and *bm then point at the
 * copies, with row strides *lda = ca and *ldb = cb. */
static sl_status round_inputs(cpu_backend *b, const float **a, int *lda, size_t ra, size_t ca, const float **bm,
                              int *ldb, size_t rb, size_t cb) {
    size_t na = ra * ca, need = na + rb * cb;
    if (need > b->lp_cap) {
        float *p = malloc(need * sizeof(float));
        if (!p) return sl_err(SL_ENOMEM, "gemm: out of memory for %zu floats of rounded inputs", need);
        free(b->lp);
        b->lp = p;
        b->lp_cap = need;
    }
    vec_ctx ctx = {.cx = *a, .y = b->lp, .cols = ca, .ld = (size_t)*lda, .act = (int)b->prec};
    par_for(b, ra, na, round_rows, &ctx);
    ctx = (vec_ctx){.cx = *bm, .y = b->lp + na, .cols = cb, .ld = (size_t)*ldb, .act = (int)b->prec};
    par_for(b, rb, rb * cb, round_rows, &ctx);
    *a = b->lp;
    *lda = (int)ca;
    *bm = b->lp + na;
    *ldb = (int)cb;
    return SL_OK;
}

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

/* ---- im2col / col2im ----------------------------------------------------------------- */

typedef struct conv_ctx {
    const float *x;
    float *col;
    const float *ccol;
    float *dx;
    int n, h, w, c, kh, kw, stride, pt, pl, oh, ow;
} conv_ctx;

/* Rows of col are output pixels; for each kernel row ky the window's cells at kx..kx+kw-1
 * are consecutive pixels of one input row, so in NHWC they are one contiguous run of
 * kw*c floats (clipped at the image's left and right edges). Work is split by output
 * image row (image, oy), which keeps divisions out of the per-pixel loop. */
static bool im2col_rows_small(const conv_ctx *k, size_t lo, size_t hi);

static void im2col_rows(void *vc, size_t lo, size_t hi) {
    const conv_ctx *k = vc;
    const int c = k->c, kw = k->kw;
    const size_t kc = (size_t)kw * c, K = (size_t)k->kh * kc;
    if (im2col_rows_small(k, lo, hi)) return;
    for (size_t r = lo; r < hi; r++) {
        int oy = (int)(r % (size_t)k->oh);
        size_t img = r / (size_t)k->oh;
        float *dst = k->col + r * k->ow * K;
        const float *ximg = k->x + img * k->h * k->w * c;
        for (int ox = 0; ox < k->ow; ox++) {
            int ix0 = ox * k->stride - k->pl;
            int kx0 = ix0 < 0 ? -ix0 : 0;
            int kx1 = k->w - ix0 < kw ? k->w - ix0 : kw;
            if (kx1 < kx0) kx1 = kx0;
            const size_t len = (size_t)(kx1 - kx0) * c;
            for (int ky = 0; ky < k->kh; ky++, dst += kc) {
                int iy = oy * k->stride - k->pt + ky;
                if (iy < 0 || iy >= k->h || len == 0) {
                    memset(dst, 0, kc * sizeof(float));
                    continue;
                }
                if (kx0) memset(dst, 0, (size_t)kx0 * c * sizeof(float));
                const float *src = ximg + ((size_t)iy * k->w + ix0 + kx0) * c;
                float *d = dst + (size_t)kx0 * c;
                if (len <= 8) for (size_t j = 0; j < len; j++) d[j] = src[j];
                else memcpy(d, src, len * sizeof(float));
                if (kx1 < kw) memset(dst + (size_t)kx1 * c, 0, (size_t)(kw - kx1) * c * sizeof(float));
            }
        }
    }
}

/* Runs of at most SMALL_RUN floats (an image model's first layer: a few channels): per
 * output row its kh input rows are copied once into a window padded with zeros on both
 * sides, so each pixel's cells are plain copies without clipping, memset or per-pixel
 * bounds; the same floats as the general path. false (nothing written) for longer runs,
 * negative padding, or no memory for the window. */
#define SMALL_RUN 16
static bool im2col_rows_small(const conv_ctx *k, size_t lo, size_t hi) {
    const int c = k->c, s = k->stride;
    const size_t kc = (size_t)k->kw * c, K = (size_t)k->kh * kc;
    if (kc > SMALL_RUN || k->pt < 0 || k->pl < 0) return false;
    size_t pw = (size_t)k->pl + (size_t)k->w, need = (size_t)(k->ow - 1) * s + (size_t)k->kw; /* window pixels */
    if (need > pw) pw = need;
    const size_t row_f = pw * c, right = pw - (size_t)k->pl - (size_t)k->w;
    float *win = malloc((size_t)k->kh * row_f * sizeof(float));
    if (!win) return false;
    for (size_t r = lo; r < hi; r++) {
        int oy = (int)(r % (size_t)k->oh);
        const float *ximg = k->x + r / (size_t)k->oh * k->h * k->w * c;
        for (int ky = 0; ky < k->kh; ky++) {
            float *wr = win + (size_t)ky * row_f;
            int iy = oy * s - k->pt + ky;
            if (iy < 0 || iy >= k->h) {
                memset(wr, 0, row_f * sizeof(float));
                continue;
            }
            memset(wr, 0, (size_t)k->pl * c * sizeof(float));
            memcpy(wr + (size_t)k->pl * c, ximg + (size_t)iy * k->w * c, (size_t)k->w * c * sizeof(float));
            memset(wr + ((size_t)k->pl + k->w) * c, 0, right * c * sizeof(float));
        }
        float *dst = k->col + r * k->ow * K;
        for (int ox = 0; ox < k->ow; ox++) {
            const float *src = win + (size_t)ox * s * c;
            for (int ky = 0; ky < k->kh; ky++, dst += kc, src += row_f)
                for (size_t j = 0; j < kc; j++) dst[j] = src[j];
        }
    }
    free(win);
    return true;
}

static sl_status cpu_im2col(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw,
                            int stride, int pad_top, int pad_left, int oh, int ow, float *col) {
    sl_status s = conv_check("im2col", n, h, w, c, kh, kw, stride, oh, ow);
    if (s) return s;
    conv_ctx k = {.x = x, .col = col, .n = n, .h = h, .w = w, .c = c, .kh = kh, .kw = kw, .stride = stride,
                  .pt = pad_top, .pl = pad_left, .oh = oh, .ow = ow};
    size_t rows = (size_t)n * oh;
    par_for((cpu_backend *)b, rows, rows * ow * kh * kw * c, im2col_rows, &k);
    return SL_OK;
}

/* Split by image: the windows of different images never touch the same dx cells. */
static void col2im_images(void *vc, size_t lo, size_t hi) {
    const conv_ctx *k = vc;
    const size_t kc = (size_t)k->kw * k->c, K = (size_t)k->kh * kc;
    for (size_t img = lo; img < hi; img++) {
        for (int oy = 0; oy < k->oh; oy++) {
            for (int ox = 0; ox < k->ow; ox++) {
                const float *src = k->ccol + (((size_t)img * k->oh + oy) * k->ow + ox) * K;
                int ix0 = ox * k->stride - k->pl;
                int kx0 = ix0 < 0 ? -ix0 : 0;
                int kx1 = k->w - ix0 < k->kw ? k->w - ix0 : k->kw;
                if (kx1 <= kx0) continue;
                size_t len = (size_t)(kx1 - kx0) * k->c;
                for (int ky = 0; ky < k->kh; ky++, src += kc) {
                    int iy = oy * k->stride - k->pt + ky;
                    if (iy < 0 || iy >= k->h) continue;
                    float *d = k->dx + ((img * k->h + (size_t)iy) * k->w + ix0 + kx0) * k->c;
                    const float *s = src + (size_t)kx0 * k->c;
                    for (size_t j = 0; j < len; j++) d[j] += s[j];
                }
            }
        }
    }
}

static sl_status cpu_col2im(sl_backend *b, const float *col, int n, int h, int w, int c, int kh, int kw,
                            int stride, int pad_top, int pad_left, int oh, int ow, float *dx) {
    sl_status s = conv_check("col2im", n, h, w, c, kh, kw, stride, oh, ow);
    if (s) return s;
    conv_ctx k = {.ccol = col, .dx = dx, .n = n, .h = h, .w = w, .c = c, .kh = kh, .kw = kw, .stride = stride,
                  .pt = pad_top, .pl = pad_left, .oh = oh, .ow = ow};
    par_for((cpu_backend *)b, (size_t)n, (size_t)n * oh * ow * kh * kw * c, col2im_images, &k);
    return SL_OK;
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

/* ---- loss ---------------------------------------------------------------------------- */

typedef struct xent_ctx {
    const float *logits;
    const int32_t *labels;
    int k;
    double on, off;  /* the target: on at the label, off (smoothing / k) added everywhere */
    float scale;
    float *dlogits;
    double *row_loss;
    unsigned char *row_ok;  /* bit 0: argmax == label; bit 1: label in the top SL_TOPK */
} xent_ctx;

static void xent_rows(void *vc, size_t lo, size_t hi) {
    const xent_ctx *c = vc;
    const int k = c->k;
    for (size_t r = lo; r < hi; r++) {
        const float *z = c->logits + r * k;
        int arg = 0;
        float mx = z[0];
        for (int j = 1; j < k; j++)
            if (z[j] > mx) { mx = z[j]; arg = j; }
        int lab = c->labels[r];
        double sum = 0.0, zsum = 0.0;
        int above = 0; /* logits strictly greater than the label's */
        for (int j = 0; j < k; j++) {
            sum += exp((double)z[j] - mx);
            above += z[j] > z[lab];
        }
        double zl = (double)z[lab] - mx;
        if (c->off != 0.0) { /* smoothing: -sum_j t_j (z_j - mx - log sum) */
            for (int j = 0; j < k; j++) zsum += (double)z[j] - mx;
            c->row_loss[r] = log(sum) - (c->on * zl + c->off * zsum);
        } else {
            c->row_loss[r] = log(sum) - zl;
        }
        c->row_ok[r] = (unsigned char)((arg == lab) | ((above < SL_TOPK && isfinite(z[lab])) << 1));
        if (c->dlogits) {
            float *d = c->dlogits + r * k;
            double inv = 1.0 / sum;
            for (int j = 0; j < k; j++) {
                double p = exp((double)z[j] - mx) * inv;
                d[j] = (float)((p - (j == lab ? c->on : 0.0) - c->off) * c->scale);
            }
        }
    }
}

static sl_status cpu_softmax_xent(sl_backend *bb, const float *logits, const int32_t *labels, int n, int k,
                                  float smoothing, float grad_scale, float *dlogits, double *loss_sum_host,
                                  int64_t *correct_host, int64_t *top5_host) {
    if (n < 0 || k <= 0) return sl_err(SL_EINVAL, "softmax_xent: bad size %d rows of %d logits", n, k);
    if (!(smoothing >= 0.0f && smoothing < 1.0f))
        return sl_err(SL_EINVAL, "softmax_xent: label smoothing %g is outside [0, 1)", smoothing);
    for (int r = 0; r < n; r++)
        if (labels[r] < 0 || labels[r] >= k)
            return sl_err(SL_ERANGE, "softmax_xent: label %d of row %d is outside 0..%d", (int)labels[r], r, k - 1);
    double *row_loss = malloc((size_t)(n ? n : 1) * (sizeof(double) + 1));
    if (!row_loss) return sl_err(SL_ENOMEM, "softmax_xent: out of memory");
    xent_ctx c = {logits, labels, k, 1.0 - (double)smoothing, (double)smoothing / k, grad_scale, dlogits, row_loss,
                  (unsigned char *)(row_loss + n)};
    par_for((cpu_backend *)bb, (size_t)n, (size_t)n * k * 8, xent_rows, &c);
    double loss = 0.0;
    int64_t ok = 0, top = 0;
    for (int r = 0; r < n; r++) { /* fixed order: the sum does not depend on threads */
        loss += row_loss[r];
        ok += c.row_ok[r] & 1;
        top += c.row_ok[r] >> 1;
    }
    free(row_loss);
    if (loss_sum_host) *loss_sum_host = loss;
    if (correct_host) *correct_host = ok;
    if (top5_host) *top5_host = top;
    return SL_OK;
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

/* ---- batch normalization ------------------------------------------------------------- */

/* Per-channel sums over rows, in double, in BN_BLOCKS fixed blocks of rows (one partial row
 * of sums each, added in block order): threaded, yet the same bits for any thread count.
 * Channels are contiguous, so every inner loop runs along a row. */
#define BN_BLOCKS 16

enum { BN_SUM_X, BN_SUM_SQ, BN_SUM_DY };

typedef struct bn_ctx {
    const float *x, *dy;
    float *y, *dx;
    size_t rows;
    int c, mode;
    const double *mean;       /* BN_SUM_SQ */
    const float *smean, *sinv; /* BN_SUM_DY / backward: saved statistics */
    const float *scale, *shift; /* forward apply */
    const double *sdy, *sdyx; /* backward apply */
    const float *gamma;
    double *part;             /* [BN_BLOCKS][2c] */
} bn_ctx;

static void bn_sum_blocks(void *vc, size_t lo, size_t hi) {
    const bn_ctx *k = vc;
    const int c = k->c;
    for (size_t blk = lo; blk < hi; blk++) {
        double *p = k->part + blk * 2 * (size_t)c, *q = p + c;
        size_t r0 = k->rows * blk / BN_BLOCKS, r1 = k->rows * (blk + 1) / BN_BLOCKS;
        for (int j = 0; j < 2 * c; j++) p[j] = 0.0;
        for (size_t r = r0; r < r1; r++) {
            const float *x = k->x + r * c;
            if (k->mode == BN_SUM_X) {
                for (int j = 0; j < c; j++) p[j] += x[j];
            } else if (k->mode == BN_SUM_SQ) {
                for (int j = 0; j < c; j++) {
                    double d = x[j] - k->mean[j];
                    p[j] += d * d;
                }
            } else {
                const float *dy = k->dy + r * c;
                for (int j = 0; j < c; j++) {
                    p[j] += dy[j];
                    q[j] += dy[j] * (((double)x[j] - k->smean[j]) * k->sinv[j]);
                }
            }
        }
    }
}

/* Sum the blocks' partials into out[0..2c) in block order. */
static void bn_sums(cpu_backend *b, bn_ctx *k, double *out) {
    par_for(b, BN_BLOCKS, k->rows * (size_t)k->c * 2, bn_sum_blocks, k);
    for (int j = 0; j < 2 * k->c; j++) out[j] = 0.0;
    for (size_t blk = 0; blk < BN_BLOCKS; blk++)
        for (int j = 0; j < 2 * k->c; j++) out[j] += k->part[blk * 2 * (size_t)k->c + j];
}

static void bn_apply_rows(void *vc, size_t lo, size_t hi) {
    const bn_ctx *k = vc;
    const int c = k->c;
    for (size_t r = lo; r < hi; r++) {
        const float *x = k->x + r * c;
        float *y = k->y + r * c;
        for (int j = 0; j < c; j++) y[j] = x[j] * k->scale[j] + k->shift[j];
    }
}

static void bn_dx_rows(void *vc, size_t lo, size_t hi) {
    const bn_ctx *k = vc;
    const int c = k->c;
    const double inv_n = 1.0 / (double)k->rows;
    for (size_t r = lo; r < hi; r++) {
        const float *x = k->x + r * c, *dy = k->dy + r * c;
        float *dx = k->dx + r * c;
        for (int j = 0; j < c; j++) {
            double xh = ((double)x[j] - k->smean[j]) * k->sinv[j];
            double g = (double)k->gamma[j] * k->sinv[j];
            dx[j] += (float)(g * (dy[j] - k->sdy[j] * inv_n - xh * k->sdyx[j] * inv_n));
        }
    }
}

static sl_status cpu_batchnorm_forward(sl_backend *bb, const float *x, float *y, size_t rows, int c,
                                       const float *gamma, const float *beta, float *running_mean,
                                       float *running_var, float momentum, float eps, bool training,
                                       float *save_mean, float *save_invstd) {
    cpu_backend *b = (cpu_backend *)bb;
    if (c <= 0) return sl_err(SL_EINVAL, "batchnorm_forward: %d channels", c);
    if (training && rows == 0) return sl_err(SL_EINVAL, "batchnorm_forward: training on 0 rows");
    double *acc = malloc(((size_t)BN_BLOCKS + 2) * 2 * (size_t)c * sizeof(double));
    float *scale = malloc((size_t)c * 2 * sizeof(float));
    if (!acc || !scale) {
        free(acc);
        free(scale);
        return sl_err(SL_ENOMEM, "batchnorm_forward: out of memory");
    }
    double *mean = acc, *var = acc + 2 * (size_t)c; /* each [2c]: only the first c used */
    float *shift = scale + c;
    bn_ctx k = {.x = x, .y = y, .rows = rows, .c = c, .part = acc + 4 * (size_t)c};
    if (training) {
        k.mode = BN_SUM_X;
        bn_sums(b, &k, mean);
        for (int j = 0; j < c; j++) mean[j] /= (double)rows;
        k.mode = BN_SUM_SQ;
        k.mean = mean;
        bn_sums(b, &k, var);
        for (int j = 0; j < c; j++) {
            double v = var[j] / (double)rows;
            double unbiased = rows > 1 ? var[j] / (double)(rows - 1) : v;
            double inv = 1.0 / sqrt(v + eps);
            if (save_mean) save_mean[j] = (float)mean[j];
            if (save_invstd) save_invstd[j] = (float)inv;
            running_mean[j] = (float)((1.0 - momentum) * running_mean[j] + momentum * mean[j]);
            running_var[j] = (float)((1.0 - momentum) * running_var[j] + momentum * unbiased);
            scale[j] = (float)(gamma[j] * inv);
            shift[j] = (float)(beta[j] - mean[j] * gamma[j] * inv);
        }
    } else {
        for (int j = 0; j < c; j++) {
            double inv = 1.0 / sqrt((double)running_var[j] + eps);
            scale[j] = (float)(gamma[j] * inv);
            shift[j] = (float)(beta[j] - running_mean[j] * gamma[j] * inv);
        }
    }
    k.scale = scale;
    k.shift = shift;
    par_for(b, rows, 2 * rows * (size_t)c, bn_apply_rows, &k);
    free(acc);
    free(scale);
    return SL_OK;
}

static sl_status cpu_batchnorm_backward(sl_backend *bb, const float *x, const float *dy, size_t rows, int c,
                                        const float *gamma, const float *save_mean, const float *save_invstd,
                                        float *dx, float *dgamma, float *dbeta) {
    cpu_backend *b = (cpu_backend *)bb;
    if (c <= 0 || rows == 0) return sl_err(SL_EINVAL, "batchnorm_backward: %zu rows of %d channels", rows, c);
    double *acc = malloc(((size_t)BN_BLOCKS + 1) * 2 * (size_t)c * sizeof(double));
    if (!acc) return sl_err(SL_ENOMEM, "batchnorm_backward: out of memory");
    double *sums = acc; /* sum dy, then sum dy * xhat */
    bn_ctx k = {.x = x, .dy = dy, .dx = dx, .rows = rows, .c = c, .mode = BN_SUM_DY, .smean = save_mean,
                .sinv = save_invstd, .gamma = gamma, .part = acc + 2 * (size_t)c};
    bn_sums(b, &k, sums);
    for (int j = 0; j < c; j++) {
        dbeta[j] += (float)sums[j];
        dgamma[j] += (float)sums[c + j];
    }
    k.sdy = sums;
    k.sdyx = sums + c;
    par_for(b, rows, 4 * rows * (size_t)c, bn_dx_rows, &k);
    free(acc);
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

static void cpu_host_free(sl_backend *b, void *p) { free(p); }

static sl_status cpu_slot_nop(sl_backend *b, int slot) { return SL_OK; }

static uint64_t cpu_launches(sl_backend *b) { return 0; } /* no kernels on the CPU */

/* softmax_xent in two halves: the CPU computes at start and keeps the answer */
static sl_status cpu_xent_start(sl_backend *bb, const float *logits, const int32_t *labels, int n, int k,
                                float smoothing, float grad_scale, float *dlogits) {
    cpu_backend *b = (cpu_backend *)bb;
    b->xent_status = cpu_softmax_xent(bb, logits, labels, n, k, smoothing, grad_scale, dlogits, &b->xent_loss,
                                      &b->xent_correct, &b->xent_top5);
    if (b->xent_status) snprintf(b->xent_msg, sizeof b->xent_msg, "%s", sl_errmsg());
    return b->xent_status == SL_ERANGE ? SL_OK : b->xent_status; /* a bad label is the result's to report */
}

static sl_status cpu_xent_result(sl_backend *bb, double *loss_sum_host, int64_t *correct_host, int64_t *top5_host) {
    cpu_backend *b = (cpu_backend *)bb;
    if (b->xent_status) return sl_err(b->xent_status, "%s", b->xent_msg);
    if (loss_sum_host) *loss_sum_host = b->xent_loss;
    if (correct_host) *correct_host = b->xent_correct;
    if (top5_host) *top5_host = b->xent_top5;
    return SL_OK;
}

/* The bucketed exchange reduces the CPU gradient in place: nothing to copy or wait for. */
static sl_status cpu_grads_out_reserve(sl_backend *b, int n) {
    (void)b;
    (void)n;
    return SL_OK;
}
static sl_status cpu_grads_out_start(sl_backend *b, int k, void *host_dst, const void *src, size_t bytes) {
    (void)b;
    (void)k;
    if (host_dst != src && bytes) memcpy(host_dst, src, bytes);
    return SL_OK;
}
static sl_status cpu_grads_out_wait(sl_backend *b, int k) {
    (void)b;
    (void)k;
    return SL_OK;
}

static const sl_backend_ops CPU_OPS = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_device = cpu_memcpy,
    .to_host = cpu_memcpy,
    .copy = cpu_memcpy,
    .host_alloc = cpu_alloc,
    .host_free = cpu_host_free,
    .to_device_async = cpu_memcpy,
    .stage_begin = cpu_slot_nop,
    .stage_end = cpu_slot_nop,
    .stage_wait = cpu_slot_nop,
    .stage_release = cpu_slot_nop,
    .sync = cpu_nop,
    .launches = cpu_launches,
    .gemm = cpu_gemm,
    .fill = cpu_fill,
    .axpy = cpu_axpy,
    .scale = cpu_scale,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .act_forward = cpu_act_forward,
    .act_backward = cpu_act_backward,
    .im2col = cpu_im2col,
    .col2im = cpu_col2im,
    .maxpool_forward = sl__cpu_maxpool_forward,
    .maxpool_backward = sl__cpu_maxpool_backward,
    .avgpool_forward = sl__cpu_avgpool_forward,
    .avgpool_backward = sl__cpu_avgpool_backward,
    .softmax_xent = cpu_softmax_xent,
    .softmax_xent_start = cpu_xent_start,
    .softmax_xent_result = cpu_xent_result,
    .dropout_forward = cpu_dropout_forward,
    .dropout_backward = cpu_dropout_backward,
    .batchnorm_forward = cpu_batchnorm_forward,
    .batchnorm_backward = cpu_batchnorm_backward,
    .sgd_step = cpu_sgd_step,
    .adam_step = cpu_adam_step,
    .sum_squares = cpu_sum_squares,
    .grads_out_reserve = cpu_grads_out_reserve,
    .grads_out_start = cpu_grads_out_start,
    .grads_out_wait = cpu_grads_out_wait,
    .copy_cols = cpu_copy_cols,
    .global_avgpool_forward = cpu_gap_forward,
    .global_avgpool_backward = cpu_gap_backward,
    .set_precision = cpu_set_precision,
    .act_backward_set = cpu_act_backward_set,
    .maxpool_relu_backward_set = sl__cpu_maxpool_relu_backward_set,
    .bias_act = cpu_bias_act,
    .task_slots = cpu_task_slots,
    .run_tasks = cpu_run_tasks,
    .conv_gemm = sl__cpu_conv_gemm,
    .conv_kernel_grad = sl__cpu_conv_kernel_grad,
};

sl_status sl__backend_cpu_new(int threads, sl_backend **out) {
    *out = NULL;
    if (threads < 0) return sl_err(SL_EINVAL, "cpu backend: threads %d must be >= 0 (0: all cores)", threads);
    if (threads == 0) threads = sl_cpu_count();
    cpu_backend *b = calloc(1, sizeof *b);
    if (!b) return sl_err(SL_ENOMEM, "cpu backend: out of memory");
    b->base.ops = &CPU_OPS;
    b->threads = threads;
    if (threads > 1) {
        sl_status s = sl__team_new(threads - 1, &b->team);
        if (s) {
            free(b);
            return s;
        }
    }
    /* Our pool splits the GEMMs; each OpenBLAS call stays on the thread that makes it. */
    openblas_set_num_threads(1);
    *out = &b->base;
    return SL_OK;
}
