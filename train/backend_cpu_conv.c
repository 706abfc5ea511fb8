/* The CPU backend's convolution ops (train/backend.h): im2col and col2im, and the products
 * without an im2col matrix (conv_gemm, conv_kernel_grad) on the AVX-512 GEMM's pointer-row
 * products (train/gemm_avx512.h: sl__gemm512_xw, sl__gemm512_xtd).
 *
 * im2col: rows of col are output pixels; for each kernel row the window's cells are one
 * contiguous run of kw * c floats of an NHWC input row, copied as such (clipped at the
 * image's edges). A layer whose runs are too short for the products below (an image model's
 * first layer: a few channels) takes this path, then the backend's GEMM.
 *
 * Without im2col: an output pixel's window is kh runs of kw * c adjacent floats, a fixed row
 * stride apart. So the product reads the windows where they lie, through a pointer per output
 * pixel, instead of copying each into a row of im2col's matrix (for the CNN's second
 * convolution 800 floats per pixel, 80 MB per batch, written and read back twice a step).
 * Where the padding puts windows partly outside the image, the chunk of images is first
 * copied into a zero-padded image in scratch (a few percent of im2col's matrix). Work is
 * split by whole 12-row tiles of the output, each row's sum computed by one thread in a fixed
 * order: the floats do not depend on the thread count.
 *
 * Taken wherever the CPU has AVX-512F and the inputs stay fp32, whatever GEMM the backend's
 * plain products use (sl_model_opts.cpu_gemm: the OpenBLAS an Intel CPU runs at full width
 * multiplies the dense layers, these the convolutions), for runs of at least 32 floats
 * (kw * c) and 24 output channels; elsewhere SL_EUNSUPPORTED and the model runs im2col + gemm. */
/* GCC's vectorizer at its full cost model for the copies and col2im's sums */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/backend_cpu_priv.h"
#include "train/gemm_avx512.h"

/* ---- im2col / col2im ----------------------------------------------------------------- */

typedef struct conv_ctx {
    const float *x;
    float *col;
    const float *ccol;
    float *dx;
    int n, h, w, c, kh, kw, stride, pt, pl, oh, ow;
} conv_ctx;

/* Work is split by output image row (image, oy), which keeps divisions out of the per-pixel
 * loop. */
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

/* im2col (x into col) or col2im (ccol added into dx): the geometry checked, then the work
 * split, im2col by output row, col2im by image (the windows of different images never touch
 * the same dx cells). */
static sl_status col_run(sl_backend *b, const char *op, const conv_ctx *k) {
    bool to_col = k->col != NULL;
    return window_run(b, op, k->n, k->h, k->w, k->c, k->kh, k->kw, k->stride, k->oh, k->ow,
                      to_col ? (size_t)k->n * k->oh : (size_t)k->n, (size_t)k->n * k->oh * k->ow * k->kh * k->kw * k->c,
                      to_col ? im2col_rows : col2im_images, (void *)k);
}

static sl_status cpu_im2col(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw, int stride,
                            int pad_top, int pad_left, int oh, int ow, float *col) {
    conv_ctx k = {.x = x, .col = col, .n = n, .h = h, .w = w, .c = c, .kh = kh, .kw = kw, .stride = stride,
                  .pt = pad_top, .pl = pad_left, .oh = oh, .ow = ow};
    return col_run(b, "im2col", &k);
}

static sl_status cpu_col2im(sl_backend *b, const float *col, int n, int h, int w, int c, int kh, int kw, int stride,
                            int pad_top, int pad_left, int oh, int ow, float *dx) {
    conv_ctx k = {.ccol = col, .dx = dx, .n = n, .h = h, .w = w, .c = c, .kh = kh, .kw = kw, .stride = stride,
                  .pt = pad_top, .pl = pad_left, .oh = oh, .ow = ow};
    return col_run(b, "col2im", &k);
}

/* ---- without im2col ------------------------------------------------------------------ */

#define MIN_RUN 32      /* kw * c: shorter runs leave the microkernel too few steps per tile */
#define MIN_CHANNELS 24 /* oc: sl__gemm512_worth's bound */
#define TILE 12         /* rows per microkernel tile (train/gemm_avx512.c MR) */

/* Where the windows lie: n images of hp x wp x c floats at base, and the pointer per pixel. */
typedef struct conv_rows {
    const float *x; /* the op's input */
    float *pad;     /* the zero-padded copy, or NULL: the windows lie in x */
    const float **rows;
    int n, h, w, c, kh, kw, s, pt, pl, oh, ow, hp, wp;
    size_t rstride; /* floats between kernel rows */
} conv_rows;

/* Image i's padded copy and its output pixels' pointers. */
static void rows_images(void *vc, size_t lo, size_t hi) {
    const conv_rows *g = vc;
    const size_t c = (size_t)g->c;
    for (size_t i = lo; i < hi; i++) {
        const float *base = g->x + i * g->h * g->w * c;
        if (g->pad) {
            float *d = g->pad + i * g->hp * g->wp * c;
            for (int py = 0; py < g->hp; py++) {
                float *drow = d + (size_t)py * g->wp * c;
                int iy = py - g->pt, x0 = g->pl, x1 = g->pl + g->w; /* image columns at px in [x0, x1) */
                if (x1 > g->wp) x1 = g->wp;
                if (iy < 0 || iy >= g->h || x0 >= x1) {
                    memset(drow, 0, (size_t)g->wp * c * sizeof(float));
                    continue;
                }
                memset(drow, 0, (size_t)x0 * c * sizeof(float));
                memcpy(drow + (size_t)x0 * c, g->x + ((i * g->h + iy) * g->w) * c, (size_t)(x1 - x0) * c * sizeof(float));
                memset(drow + (size_t)x1 * c, 0, (size_t)(g->wp - x1) * c * sizeof(float));
            }
            base = d;
        }
        const float **r = g->rows + i * g->oh * g->ow;
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++)
                *r++ = base + (size_t)oy * g->s * g->rstride + (size_t)ox * g->s * c;
    }
}

/* The rows of the product for x, in scratch: SL_OK, or SL_EUNSUPPORTED when this backend does
 * not take the geometry this way (nothing written). */
static sl_status rows_make(cpu_backend *b, const char *op, const float *x, int n, int h, int w, int c, int kh,
                           int kw, int stride, int pt, int pl, int oh, int ow, int oc, float *scratch,
                           size_t scratch_floats, conv_rows *g) {
    sl_status st = conv_check(op, n, h, w, c, kh, kw, stride, oh, ow);
    if (st) return st;
    if (b->prec != SL_BK_FP32 || !sl__gemm512_wanted() || (size_t)kw * c < MIN_RUN || oc < MIN_CHANNELS ||
        pt < 0 || pl < 0 || (size_t)kh * kw * c > INT32_MAX || (size_t)n * oh * ow > INT32_MAX)
        return sl_err(SL_EUNSUPPORTED, "%s: im2col and gemm for this geometry", op);
    *g = (conv_rows){.x = x, .n = n, .h = h, .w = w, .c = c, .kh = kh, .kw = kw, .s = stride, .pt = pt, .pl = pl,
                     .oh = oh, .ow = ow};
    g->hp = (oh - 1) * stride + kh;
    g->wp = (ow - 1) * stride + kw;
    bool inside = pt == 0 && pl == 0 && g->hp <= h && g->wp <= w;
    size_t nptr = (size_t)n * oh * ow, ptr_floats = (nptr * sizeof(float *) + sizeof(float) - 1) / sizeof(float);
    size_t pad_floats = inside ? 0 : (size_t)n * g->hp * g->wp * c;
    if (ptr_floats + pad_floats > scratch_floats)
        return sl_err(SL_EUNSUPPORTED, "%s: scratch of %zu floats below the %zu needed", op, scratch_floats,
                      ptr_floats + pad_floats);
    g->rows = (const float **)(void *)scratch; /* scratch is malloc's: aligned for pointers */
    g->pad = inside ? NULL : scratch + ptr_floats;
    g->rstride = (size_t)(inside ? w : g->wp) * c;
    par_for(b, (size_t)n, nptr * (size_t)kw * c / 4, rows_images, g);
    return SL_OK;
}

typedef struct conv_mul {
    const conv_rows *g;
    const float *in; /* W (xw) or dy (xtd) */
    float *out;
    int m, oc;
    float beta;
    atomic_int failed; /* a part's status (out of memory for the GEMM's buffers) */
} conv_mul;

static void xw_tiles(void *vc, size_t lo, size_t hi) {
    conv_mul *u = vc;
    int i0 = (int)lo * TILE, i1 = (int)hi * TILE < u->m ? (int)hi * TILE : u->m;
    const conv_rows *g = u->g;
    sl_status s = sl__gemm512_xw(i1 - i0, u->oc, g->kh, g->kw * g->c, g->rows + i0, g->rstride, u->in, u->oc, u->beta,
                                 u->out + (size_t)i0 * u->oc, u->oc);
    if (s) atomic_store(&u->failed, (int)s);
}

static void xtd_tiles(void *vc, size_t lo, size_t hi) {
    conv_mul *u = vc;
    const conv_rows *g = u->g;
    int K = g->kh * g->kw * g->c, r0 = (int)lo * TILE, r1 = (int)hi * TILE < K ? (int)hi * TILE : K;
    sl_status s = sl__gemm512_xtd(u->m, u->oc, g->kh, g->kw * g->c, g->rows, g->rstride, u->in, u->oc, r0, r1,
                                  u->beta, u->out, u->oc);
    if (s) atomic_store(&u->failed, (int)s);
}

static sl_status mul_result(conv_mul *u, const char *op) {
    int f = atomic_load(&u->failed);
    return f ? sl_err((sl_status)f, "%s: the product failed (out of memory for the GEMM's packing buffers)", op)
             : SL_OK;
}

static sl_status cpu_conv_gemm(sl_backend *bb, const float *x, int n, int h, int w, int c, int kh, int kw, int stride,
                               int pad_top, int pad_left, int oh, int ow, const float *W, int oc, float beta, float *y,
                               float *scratch, size_t scratch_floats) {
    cpu_backend *b = (cpu_backend *)bb;
    conv_rows g;
    sl_status st = rows_make(b, "conv_gemm", x, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, oc, scratch,
                             scratch_floats, &g);
    if (st) return st;
    conv_mul u = {.g = &g, .in = W, .out = y, .m = n * oh * ow, .oc = oc, .beta = beta};
    atomic_init(&u.failed, 0);
    size_t tiles = ((size_t)u.m + TILE - 1) / TILE;
    par_for(b, tiles, (size_t)u.m * oc * kh * kw * c / 16, xw_tiles, &u);
    return mul_result(&u, "conv_gemm");
}

static sl_status cpu_conv_kernel_grad(sl_backend *bb, const float *x, int n, int h, int w, int c, int kh, int kw,
                                      int stride, int pad_top, int pad_left, int oh, int ow, const float *dy, int oc,
                                      float beta, float *dW, float *scratch, size_t scratch_floats) {
    cpu_backend *b = (cpu_backend *)bb;
    conv_rows g;
    sl_status st = rows_make(b, "conv_kernel_grad", x, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, oc,
                             scratch, scratch_floats, &g);
    if (st) return st;
    conv_mul u = {.g = &g, .in = dy, .out = dW, .m = n * oh * ow, .oc = oc, .beta = beta};
    atomic_init(&u.failed, 0);
    size_t K = (size_t)kh * kw * c, tiles = (K + TILE - 1) / TILE;
    par_for(b, tiles, (size_t)u.m * oc * K / 16, xtd_tiles, &u);
    return mul_result(&u, "conv_kernel_grad");
}


/* This file's members of the backend's op table (train/backend_cpu.c). */
void sl__cpu_conv_ops(sl_backend_ops *o) {
    o->im2col = cpu_im2col, o->col2im = cpu_col2im;
    o->conv_gemm = cpu_conv_gemm, o->conv_kernel_grad = cpu_conv_kernel_grad;
}
