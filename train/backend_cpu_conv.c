/* The CPU backend's convolution products without an im2col matrix (train/backend.h:
 * conv_gemm, conv_kernel_grad), on the AVX-512 GEMM's pointer-row products
 * (train/gemm_avx512.h: sl__gemm512_xw, sl__gemm512_xtd).
 *
 * An output pixel's window in an NHWC image is kh runs of kw * c adjacent floats, one per
 * kernel row, a fixed row stride apart. So the product reads the windows where they lie,
 * through a pointer per output pixel, instead of copying each into a row of im2col's matrix
 * (for the CNN's second convolution 800 floats per pixel, 80 MB per batch, written and read
 * back twice a step). Where the padding puts windows partly outside the image, the chunk of
 * images is first copied into a zero-padded image in scratch (a few percent of im2col's
 * matrix). Work is split by whole 12-row tiles of the output, each row's sum computed by one
 * thread in a fixed order: the floats do not depend on the thread count.
 *
 * Taken where the CPU backend's GEMM is its own AVX-512 one and the inputs stay fp32, for
 * runs of at least 32 floats (kw * c) and 24 output channels; elsewhere SL_EUNSUPPORTED and
 * the model runs im2col + gemm. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "train/backend_cpu_priv.h"
#include "train/gemm_avx512.h"

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

sl_status sl__cpu_conv_gemm(sl_backend *bb, const float *x, int n, int h, int w, int c, int kh, int kw, int stride,
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

sl_status sl__cpu_conv_kernel_grad(sl_backend *bb, const float *x, int n, int h, int w, int c, int kh, int kw,
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
