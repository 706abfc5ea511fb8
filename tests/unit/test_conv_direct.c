/* The CPU backend's convolution products without im2col (train/backend.h conv_gemm,
 * conv_kernel_grad; train/backend_cpu_conv.c on train/gemm_avx512.h's pointer-row products)
 * against im2col's matrix (the backend's im2col, itself tested against a reference) times
 * the kernel in double precision: stride 1 and 2, SAME and VALID padding (the windows read
 * in place, and through the zero-padded copy), row counts off the 12-row tile, output
 * channels off the 32-column panel, runs longer than the 256-float k block, beta 0 over NaN
 * and beta 1; one thread and two give the same bits; the geometries it declines
 * (SL_EUNSUPPORTED, nothing written); and whatever GEMM the backend's plain products use
 * (sl_model_opts.cpu_gemm: OpenBLAS pinned, as SLUICE_CPU_GEMM=blas asks), the convolutions
 * still run without im2col, to the same bits. Without AVX-512F every call must decline: that
 * is what is checked there. */
#include <math.h>

#include "test.h"
#include "train/backend.h"
#include "train/backend_cpu_priv.h"
#include "train/gemm_avx512.h"

static uint32_t rng = 99;
static float rnd(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

/* n floats: random in [-1, 1), or all `fill` (NaN: beta 0 must not read them), or a copy of src */
static float *floats(size_t n, bool random, float fill, const float *src) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = src ? src[i] : random ? rnd() : fill;
    return p;
}
#define RAND(n) floats((n), true, 0.0f, NULL)

typedef struct cgeo {
    int n, h, w, c, kh, kw, s, pt, pl, oh, ow, oc;
} cgeo;

static const cgeo CGEOS[] = {
    {3, 14, 14, 32, 5, 5, 1, 2, 2, 14, 14, 64}, /* the CNN's second convolution, SAME */
    {2, 9, 11, 16, 3, 3, 2, 1, 1, 5, 6, 24},    /* stride 2, padded: 60 rows, 5 tiles */
    {2, 8, 8, 8, 5, 5, 1, 0, 0, 4, 4, 40},      /* VALID: windows read in place; 40 channels */
    {1, 7, 6, 48, 1, 3, 1, 0, 1, 7, 6, 33},     /* one kernel row, runs of 144, 33 channels */
    {1, 6, 6, 100, 3, 3, 1, 1, 1, 6, 6, 70},    /* runs of 300: past one 256-float k block */
};

#define NG (sizeof CGEOS / sizeof CGEOS[0])

static size_t scratch_for(const cgeo *g) {
    size_t hp = (size_t)(g->oh - 1) * g->s + g->kh, wp = (size_t)(g->ow - 1) * g->s + g->kw;
    return (size_t)g->n * g->oh * g->ow * 2 + (size_t)g->n * hp * wp * g->c;
}

static bool direct_expected(void) {
    return sl__gemm512_available();
}

/* y = beta * y0 + im2col(x) W and dW = beta * dW0 + im2col(x)^T dy, in double */
static void ref_products(sl_backend *b, const cgeo *g, const float *x, const float *W, const float *dy,
                         const float *y0, const float *dw0, float beta, double *y, double *dw) {
    size_t M = (size_t)g->n * g->oh * g->ow, K = (size_t)g->kh * g->kw * g->c, N = (size_t)g->oc;
    float *col = malloc(M * K * sizeof(float));
    b->ops->im2col(b, x, g->n, g->h, g->w, g->c, g->kh, g->kw, g->s, g->pt, g->pl, g->oh, g->ow, col);
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double s = beta * (double)y0[i * N + j];
            for (size_t k = 0; k < K; k++) s += (double)col[i * K + k] * W[k * N + j];
            y[i * N + j] = s;
        }
    for (size_t k = 0; k < K; k++)
        for (size_t j = 0; j < N; j++) {
            double s = beta * (double)dw0[k * N + j];
            for (size_t i = 0; i < M; i++) s += (double)col[i * K + k] * dy[i * N + j];
            dw[k * N + j] = s;
        }
    free(col);
}

static double worst(const float *a, const double *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (1.0 + fabs(b[i]));
        if (!(d <= m)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

TEST(test_products_match_im2col) {
    if (!direct_expected()) SKIP("no AVX-512F on this CPU");
    float *first_y[NG][2] = {{0}}, *first_w[NG][2] = {{0}};
    for (int threads = 1; threads <= 2; threads++) {
        sl_backend *b = NULL;
        ASSERT_OK(sl__backend_cpu_new(threads, &b));
        for (size_t gi = 0; gi < NG; gi++) {
            const cgeo *g = &CGEOS[gi];
            size_t nx = (size_t)g->n * g->h * g->w * g->c, M = (size_t)g->n * g->oh * g->ow,
                   K = (size_t)g->kh * g->kw * g->c, N = (size_t)g->oc, ns = scratch_for(g);
            rng = 99 + (uint32_t)gi;
            float *x = RAND(nx), *W = RAND(K * N), *dy = RAND(M * N), *y0 = RAND(M * N), *dw0 = RAND(K * N),
                  *scratch = floats(ns, false, NAN, NULL); /* every float read is written first */
            double *yr = malloc(M * N * sizeof(double)), *dwr = malloc(K * N * sizeof(double));
            for (int bi = 0; bi < 2; bi++) {
                float beta = (float)bi;
                ref_products(b, g, x, W, dy, y0, dw0, beta, yr, dwr);
                float *y = floats(M * N, false, NAN, bi ? y0 : NULL), *dw = floats(K * N, false, NAN, bi ? dw0 : NULL);
                ASSERT_OK(b->ops->conv_gemm(b, x, g->n, g->h, g->w, g->c, g->kh, g->kw, g->s, g->pt, g->pl, g->oh, g->ow,
                                            W, g->oc, beta, y, scratch, ns));
                ASSERT_OK(b->ops->conv_kernel_grad(b, x, g->n, g->h, g->w, g->c, g->kh, g->kw, g->s, g->pt, g->pl,
                                                   g->oh, g->ow, dy, g->oc, beta, dw, scratch, ns));
                double ey = worst(y, yr, M * N), ew = worst(dw, dwr, K * N);
                if (ey > 4e-5 || ew > 4e-5) FAILF("geo %zu beta %d threads %d: errors %g, %g", gi, bi, threads, ey, ew);
                if (threads == 1) {
                    first_y[gi][bi] = y, first_w[gi][bi] = dw;
                    continue;
                }
                ASSERT_MEMEQ(first_y[gi][bi], y, M * N * sizeof(float));
                ASSERT_MEMEQ(first_w[gi][bi], dw, K * N * sizeof(float));
                free(y), free(dw), free(first_y[gi][bi]), free(first_w[gi][bi]);
            }
            free(x), free(W), free(dy), free(y0), free(dw0), free(scratch), free(yr), free(dwr);
        }
        sl__backend_free(b);
    }
}

/* Declined, nothing written: runs below 32 floats, fewer than 24 output channels, the
 * scratch too small, bf16 inputs; a bad geometry is SL_EINVAL. */
TEST(test_declines) {
    sl_backend *b = NULL;
    ASSERT_OK(sl__backend_cpu_new(2, &b));
    const cgeo ok = CGEOS[0], narrow = {1, 6, 6, 4, 3, 3, 1, 1, 1, 6, 6, 32}, few = {1, 6, 6, 16, 3, 3, 1, 1, 1, 6, 6, 16};
    const cgeo *cases[] = {&ok, &narrow, &few, &ok, &ok};
    for (int k = 0; k < 5; k++) {
        const cgeo *g = cases[k];
        size_t nx = (size_t)g->n * g->h * g->w * g->c, M = (size_t)g->n * g->oh * g->ow,
               K = (size_t)g->kh * g->kw * g->c, N = (size_t)g->oc, ns = scratch_for(g);
        float *x = RAND(nx), *W = RAND(K * N), *y = RAND(M * N), *dw = RAND(K * N), *scratch = floats(ns, false, NAN, NULL); /* every float read is written first */
        float *y0 = floats(M * N, false, 0.0f, y), *dw0 = floats(K * N, false, 0.0f, dw);
        if (k == 3) ns = (size_t)g->n * g->oh * g->ow; /* room for half the pointers */
        if (k == 4) ASSERT_OK(b->ops->set_precision(b, SL_BK_BF16));
        sl_status want = k == 0 && direct_expected() ? SL_OK : SL_EUNSUPPORTED;
        ASSERT_EQ(b->ops->conv_gemm(b, x, g->n, g->h, g->w, g->c, g->kh, g->kw, g->s, g->pt, g->pl, g->oh, g->ow, W,
                                    g->oc, 0.0f, y, scratch, ns), want);
        ASSERT_EQ(b->ops->conv_kernel_grad(b, x, g->n, g->h, g->w, g->c, g->kh, g->kw, g->s, g->pt, g->pl, g->oh,
                                           g->ow, y0, g->oc, 0.0f, dw, scratch, ns), want);
        if (want) {
            ASSERT_MEMEQ(y, y0, M * N * sizeof(float));
            ASSERT_MEMEQ(dw, dw0, K * N * sizeof(float));
        }
        ASSERT_OK(b->ops->set_precision(b, SL_BK_FP32));
        ASSERT_EQ(b->ops->conv_gemm(b, x, g->n, g->h, 0, g->c, g->kh, g->kw, g->s, g->pt, g->pl, g->oh, g->ow, W,
                                    g->oc, 0.0f, y, scratch, ns), SL_EINVAL);
        free(x), free(W), free(y), free(dw), free(scratch), free(y0), free(dw0);
    }
    sl__backend_free(b);
}

/* The plain GEMMs pinned to OpenBLAS (what SLUICE_CPU_GEMM=blas asks through sluice-train,
 * the choice OpenBLAS's AVX-512 kernels win on an Intel CPU): conv_gemm and conv_kernel_grad
 * still multiply without im2col (SL_OK, not SL_EUNSUPPORTED: the im2col path), to the very
 * floats of the backend pinned to Sluice's GEMM and of the measuring one (auto). */
TEST(test_blas_keeps_direct_convs) {
    if (!direct_expected()) SKIP("no AVX-512F on this CPU");
    const sl_cpu_gemm kinds[3] = {SL_CPU_GEMM_BLAS, SL_CPU_GEMM_AVX512, SL_CPU_GEMM_AUTO};
    sl_backend *b[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) ASSERT_OK(sl__backend_cpu_new_gemm(2, kinds[i], &b[i]));
    for (size_t gi = 0; gi < NG; gi++) {
        const cgeo *g = &CGEOS[gi];
        size_t nx = (size_t)g->n * g->h * g->w * g->c, M = (size_t)g->n * g->oh * g->ow,
               K = (size_t)g->kh * g->kw * g->c, N = (size_t)g->oc, ns = scratch_for(g);
        rng = 7 + (uint32_t)gi;
        float *x = RAND(nx), *W = RAND(K * N), *dy = RAND(M * N), *scratch = floats(ns, false, NAN, NULL);
        float *y[3], *dw[3];
        for (int i = 0; i < 3; i++) {
            y[i] = floats(M * N, false, NAN, NULL), dw[i] = floats(K * N, false, NAN, NULL);
            sl_status s1 = b[i]->ops->conv_gemm(b[i], x, g->n, g->h, g->w, g->c, g->kh, g->kw, g->s, g->pt, g->pl,
                                                g->oh, g->ow, W, g->oc, 0.0f, y[i], scratch, ns);
            sl_status s2 = b[i]->ops->conv_kernel_grad(b[i], x, g->n, g->h, g->w, g->c, g->kh, g->kw, g->s, g->pt,
                                                       g->pl, g->oh, g->ow, dy, g->oc, 0.0f, dw[i], scratch, ns);
            if (s1 != SL_OK || s2 != SL_OK)
                FAILF("geo %zu, gemm choice %d: conv_gemm %d, conv_kernel_grad %d (SL_EUNSUPPORTED %d: im2col)", gi,
                      (int)kinds[i], s1, s2, SL_EUNSUPPORTED);
        }
        for (int i = 1; i < 3 && !t_cur_failed; i++) {
            ASSERT_MEMEQ(y[0], y[i], M * N * sizeof(float));
            ASSERT_MEMEQ(dw[0], dw[i], K * N * sizeof(float));
        }
        for (int i = 0; i < 3; i++) free(y[i]), free(dw[i]);
        free(x), free(W), free(dy), free(scratch);
        if (t_cur_failed) break;
    }
    for (int i = 0; i < 3; i++) sl__backend_free(b[i]);
}

int main(void) {
    RUN(test_products_match_im2col);
    RUN(test_declines);
    RUN(test_blas_keeps_direct_convs);
    TEST_MAIN_END();
}
