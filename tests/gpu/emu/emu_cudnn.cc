// The emulated cuDNN for tests/gpu/emu (see include/cudnn.h): convolutions as reference
// loops, queued on the handle's stream like every emulated kernel, so a missing wait
// between them and the backend's own kernels shows up as a wrong result.
//
// What it checks, as cuDNN does or more strictly: every descriptor set before use, 4-d NHWC
// float32 tensors and filters, dilation 1, the tensors' sizes agreeing with the convolution
// (the output's with cudnnGetConvolution2dForwardOutputDim's answer), a workspace of at
// least the algorithm's size (and the whole of it written over when the call runs, so a
// workspace shorter than claimed is an ASan error), beta == 0 never reading the output.
// Its algorithms: the heuristic lists put a non-deterministic algorithm (which sums in an
// order that changes from call to call, so its floats differ between two runs) or one with
// a workspace first, so a backend that takes the first answer without looking at
// determinism or memory gives different bits run to run, or overruns its scratch.
#include <cudnn.h>
#include <cstdio>
#include <cstring>
#include <functional>

struct EmuDnn {
    cudaStream_t stream = nullptr;
};
struct EmuTensor {
    bool set = false;
    int n = 0, c = 0, h = 0, w = 0;
};
struct EmuFilter {
    bool set = false;
    int k = 0, c = 0, h = 0, w = 0;
};
struct EmuConv {
    bool set = false;
    int ph = 0, pw = 0, u = 1, v = 1;
    bool flip = false;
};

static long long calls;
static long long runs; // convolutions run so far: the non-deterministic order alternates with it
static int fail_create;

extern "C" {
long long emu_dnn_calls(void) { return calls; }
void emu_dnn_fail_create(int fail) { fail_create = fail; }
}

static cudnnStatus_t bad(const char *what) {
    fprintf(stderr, "emu cudnn: %s\n", what);
    return CUDNN_STATUS_BAD_PARAM;
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle) {
    if (fail_create) return CUDNN_STATUS_NOT_INITIALIZED;
    *handle = new EmuDnn;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
    delete handle;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t s) {
    handle->stream = s;
    return CUDNN_STATUS_SUCCESS;
}
const char *cudnnGetErrorString(cudnnStatus_t s) {
    switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    }
    return "CUDNN_STATUS_UNKNOWN";
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) { *d = new EmuTensor; return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) { delete d; return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format, cudnnDataType_t dt,
                                         int n, int c, int h, int w) {
    if (format != CUDNN_TENSOR_NHWC || dt != CUDNN_DATA_FLOAT) return bad("tensor: not NHWC float32");
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0) return bad("tensor: a dimension <= 0");
    *d = EmuTensor{true, n, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) { *d = new EmuFilter; return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) { delete d; return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t dt, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
    if (format != CUDNN_TENSOR_NHWC || dt != CUDNN_DATA_FLOAT) return bad("filter: not NHWC (KRSC) float32");
    if (k <= 0 || c <= 0 || h <= 0 || w <= 0) return bad("filter: a dimension <= 0");
    *d = EmuFilter{true, k, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) {
    *d = new EmuConv;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) { delete d; return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int u, int v, int dh,
                                              int dw, cudnnConvolutionMode_t mode, cudnnDataType_t ct) {
    if (ph < 0 || pw < 0 || u <= 0 || v <= 0) return bad("convolution: negative padding or stride <= 0");
    if (dh != 1 || dw != 1) return CUDNN_STATUS_NOT_SUPPORTED;
    if (ct != CUDNN_DATA_FLOAT) return bad("convolution: compute type not float32");
    *d = EmuConv{true, ph, pw, u, v, mode == CUDNN_CONVOLUTION};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) {
    if (m != CUDNN_DEFAULT_MATH && m != CUDNN_TENSOR_OP_MATH && m != CUDNN_FMA_MATH) return bad("math type");
    (void)d;
    return CUDNN_STATUS_SUCCESS;
}

static bool out_dims(const EmuConv *cv, const EmuTensor *x, const EmuFilter *f, int *oh, int *ow) {
    int hh = x->h + 2 * cv->ph - f->h, ww = x->w + 2 * cv->pw - f->w;
    if (hh < 0 || ww < 0) return false;
    *oh = hh / cv->u + 1;
    *ow = ww / cv->v + 1;
    return true;
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t cv,
                                                    const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t f,
                                                    int *n, int *c, int *h, int *w) {
    if (!cv->set || !x->set || !f->set) return bad("output dim: a descriptor not set");
    if (x->c != f->c) return bad("output dim: the input's channels are not the filter's");
    if (!out_dims(cv, x, f, h, w)) return bad("output dim: the filter is larger than the padded input");
    *n = x->n;
    *c = f->k;
    return CUDNN_STATUS_SUCCESS;
}

// Every descriptor set and consistent: x n x c x h x w, f k x c x r x s, y n x k x oh x ow.
static cudnnStatus_t check(const char *op, const EmuTensor *x, const EmuFilter *f, const EmuConv *cv,
                           const EmuTensor *y) {
    int oh, ow;
    if (!x->set || !f->set || !cv->set || !y->set) {
        fprintf(stderr, "emu cudnn %s: a descriptor not set\n", op);
        return CUDNN_STATUS_BAD_PARAM;
    }
    if (x->c != f->c || y->n != x->n || y->c != f->k || !out_dims(cv, x, f, &oh, &ow) || oh != y->h || ow != y->w) {
        fprintf(stderr,
                "emu cudnn %s: sizes disagree: x %dx%dx%dx%d filter %dx%dx%dx%d y %dx%dx%dx%d pad %d,%d stride %d,%d\n",
                op, x->n, x->h, x->w, x->c, f->k, f->h, f->w, f->c, y->n, y->h, y->w, y->c, cv->ph, cv->pw, cv->u,
                cv->v);
        return CUDNN_STATUS_BAD_PARAM;
    }
    return CUDNN_STATUS_SUCCESS;
}

static size_t fwd_ws(int algo, const EmuTensor *y) { return algo == 1 ? (size_t)y->n * y->h * y->w * 8 : 0; }
static size_t bwd_data_ws(int algo, const EmuTensor *x) { return algo == 1 ? (size_t)x->n * x->h * x->w * 4 + 64 : 0; }
static size_t bwd_filter_ws(int algo, const EmuFilter *f) {
    return algo == 1 ? (size_t)f->k * f->h * f->w * f->c * 8 : 0;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t f,
                                                     const cudnnConvolutionDescriptor_t cv,
                                                     const cudnnTensorDescriptor_t y, const int req, int *got,
                                                     cudnnConvolutionFwdAlgoPerf_t *perf) {
    cudnnStatus_t s = check("forward algorithm", x, f, cv, y);
    if (s) return s;
    int order[2] = {1, 0}; // the one with a workspace first
    *got = 0;
    for (int i = 0; i < 2 && i < req; i++) {
        cudnnConvolutionFwdAlgoPerf_t p = {};
        p.algo = (cudnnConvolutionFwdAlgo_t)order[i];
        p.memory = fwd_ws(order[i], y);
        p.determinism = CUDNN_DETERMINISTIC;
        perf[(*got)++] = p;
    }
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t, const cudnnFilterDescriptor_t f,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t cv,
                                                          const cudnnTensorDescriptor_t dx, const int req, int *got,
                                                          cudnnConvolutionBwdDataAlgoPerf_t *perf) {
    cudnnStatus_t s = check("backward data algorithm", dx, f, cv, dy);
    if (s) return s;
    int order[2] = {0, 1}; // the non-deterministic one first
    *got = 0;
    for (int i = 0; i < 2 && i < req; i++) {
        cudnnConvolutionBwdDataAlgoPerf_t p = {};
        p.algo = (cudnnConvolutionBwdDataAlgo_t)order[i];
        p.memory = bwd_data_ws(order[i], dx);
        p.determinism = order[i] == 0 ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC;
        perf[(*got)++] = p;
    }
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                            const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t cv,
                                                            const cudnnFilterDescriptor_t f, const int req, int *got,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
    cudnnStatus_t s = check("backward filter algorithm", x, f, cv, dy);
    if (s) return s;
    int order[3] = {0, 3, 1}; // two non-deterministic ones first
    *got = 0;
    for (int i = 0; i < 3 && i < req; i++) {
        cudnnConvolutionBwdFilterAlgoPerf_t p = {};
        p.algo = (cudnnConvolutionBwdFilterAlgo_t)order[i];
        p.memory = bwd_filter_ws(order[i], f);
        p.determinism = order[i] == 1 ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
        perf[(*got)++] = p;
    }
    return CUDNN_STATUS_SUCCESS;
}

// The geometry a queued call keeps (the descriptors may change or go after the call).
struct Geo {
    int n, h, w, c, k, r, s, oh, ow, ph, pw, u, v;
    bool flip;
};
static Geo geo(const EmuTensor *x, const EmuFilter *f, const EmuConv *cv, const EmuTensor *y) {
    return Geo{x->n, x->h, x->w, x->c, f->k, f->h, f->w, y->h, y->w, cv->ph, cv->pw, cv->u, cv->v, cv->flip};
}
static size_t xi(const Geo &g, int n, int y, int x, int c) { return (((size_t)n * g.h + y) * g.w + x) * g.c + c; }
static size_t yi(const Geo &g, int n, int y, int x, int k) { return (((size_t)n * g.oh + y) * g.ow + x) * g.k + k; }
// the filter tap (k, r, s, c), turned in CUDNN_CONVOLUTION mode
static size_t fi(const Geo &g, int k, int r, int s, int c) {
    if (g.flip) {
        r = g.r - 1 - r;
        s = g.s - 1 - s;
    }
    return (((size_t)k * g.r + r) * g.s + s) * g.c + c;
}

static void store(float *out, size_t i, double v, float alpha, float beta) {
    out[i] = beta == 0.0f ? (float)(alpha * v) : (float)(alpha * v + beta * out[i]);
}

// The reference loops, compiled optimised and without the sanitizers (the model tests push
// whole steps through them; ASan still sees the backend's buffers where they are checked).
// A deterministic algorithm sums in double in a fixed order; a non-deterministic one in
// float, its outer reduction loop run forwards or backwards as `rev` says (alternating from
// run to run), so its floats differ between two runs as a real one's may.
#define EMU_FAST __attribute__((optimize("O3"), no_sanitize("address", "undefined")))

EMU_FAST static void fwd_ref(Geo g, const float *X, const float *W, float *Y, float al, float be) {
    for (int n = 0; n < g.n; n++)
        for (int oy = 0; oy < g.oh; oy++)
            for (int ox = 0; ox < g.ow; ox++)
                for (int k = 0; k < g.k; k++) {
                    double a = 0;
                    for (int r = 0; r < g.r; r++) {
                        int iy = oy * g.u - g.ph + r;
                        if (iy < 0 || iy >= g.h) continue;
                        for (int q = 0; q < g.s; q++) {
                            int ix = ox * g.v - g.pw + q;
                            if (ix < 0 || ix >= g.w) continue;
                            for (int c = 0; c < g.c; c++) a += (double)X[xi(g, n, iy, ix, c)] * W[fi(g, k, r, q, c)];
                        }
                    }
                    store(Y, yi(g, n, oy, ox, k), a, al, be);
                }
}

EMU_FAST static void bwd_data_ref(Geo g, const float *W, const float *DY, float *DX, float al, float be, bool det,
                                  bool rev) {
    for (int n = 0; n < g.n; n++)
        for (int iy = 0; iy < g.h; iy++)
            for (int ix = 0; ix < g.w; ix++)
                for (int c = 0; c < g.c; c++) {
                    double a = 0;
                    float af = 0;
                    for (int ri = 0; ri < g.r; ri++) {
                        int r = rev ? g.r - 1 - ri : ri;
                        int ty = iy + g.ph - r;
                        if (ty < 0 || ty % g.u || ty / g.u >= g.oh) continue;
                        for (int q = 0; q < g.s; q++) {
                            int tx = ix + g.pw - q;
                            if (tx < 0 || tx % g.v || tx / g.v >= g.ow) continue;
                            for (int k = 0; k < g.k; k++) {
                                double t = (double)DY[yi(g, n, ty / g.u, tx / g.v, k)] * W[fi(g, k, r, q, c)];
                                a += t;
                                af += (float)t;
                            }
                        }
                    }
                    store(DX, xi(g, n, iy, ix, c), det ? a : (double)af, al, be);
                }
}

EMU_FAST static void bwd_filter_ref(Geo g, const float *X, const float *DY, float *DW, float al, float be, bool det,
                                    bool rev) {
    for (int k = 0; k < g.k; k++)
        for (int r = 0; r < g.r; r++)
            for (int q = 0; q < g.s; q++)
                for (int c = 0; c < g.c; c++) {
                    double a = 0;
                    float af = 0;
                    for (int ni = 0; ni < g.n; ni++) {
                        int n = rev ? g.n - 1 - ni : ni;
                        for (int oy = 0; oy < g.oh; oy++) {
                            int iy = oy * g.u - g.ph + r;
                            if (iy < 0 || iy >= g.h) continue;
                            for (int ox = 0; ox < g.ow; ox++) {
                                int ix = ox * g.v - g.pw + q;
                                if (ix < 0 || ix >= g.w) continue;
                                double t = (double)X[xi(g, n, iy, ix, c)] * DY[yi(g, n, oy, ox, k)];
                                a += t;
                                af += (float)t;
                            }
                        }
                    }
                    // in CUDNN_CONVOLUTION mode the tap (r, q) is the filter's turned one (fi)
                    store(DW, fi(g, k, r, q, c), det ? a : (double)af, al, be);
                }
}

static cudnnStatus_t workspace(const char *op, size_t need, void *ws, size_t have) {
    if (have < need || (need && !ws)) {
        fprintf(stderr, "emu cudnn %s: workspace of %zu bytes%s for an algorithm that needs %zu\n", op, have,
                ws ? "" : " (NULL)", need);
        return CUDNN_STATUS_BAD_PARAM;
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xD,
                                      const void *x, const cudnnFilterDescriptor_t wD, const void *w,
                                      const cudnnConvolutionDescriptor_t cv, cudnnConvolutionFwdAlgo_t algo, void *ws,
                                      size_t wss, const void *beta, const cudnnTensorDescriptor_t yD, void *y) {
    cudnnStatus_t s = check("forward", xD, wD, cv, yD);
    if (s) return s;
    if (algo != 0 && algo != 1) return bad("forward: unknown algorithm");
    if ((s = workspace("forward", fwd_ws(algo, yD), ws, wss))) return s;
    if (!x || !w || !y) return bad("forward: a NULL tensor");
    Geo g = geo(xD, wD, cv, yD);
    float al = *(const float *)alpha, be = *(const float *)beta;
    size_t need = fwd_ws(algo, yD);
    const float *X = (const float *)x, *W = (const float *)w;
    float *Y = (float *)y;
    calls++;
    emu_launch_check("cudnnConvolutionForward", dim3(1), dim3(1)); // one launch, as the backend counts it
    emu_enqueue_kernel("cudnnConvolutionForward", false, dim3(1), dim3(1), h->stream, [=] {
        if (need) memset(ws, 0x5A, need);
        runs++;
        fwd_ref(g, X, W, Y, al, be);
    });
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, const cudnnFilterDescriptor_t wD,
                                           const void *w, const cudnnTensorDescriptor_t dyD, const void *dy,
                                           const cudnnConvolutionDescriptor_t cv, cudnnConvolutionBwdDataAlgo_t algo,
                                           void *ws, size_t wss, const void *beta,
                                           const cudnnTensorDescriptor_t dxD, void *dx) {
    cudnnStatus_t s = check("backward data", dxD, wD, cv, dyD);
    if (s) return s;
    if (algo != 0 && algo != 1) return bad("backward data: unknown algorithm");
    if ((s = workspace("backward data", bwd_data_ws(algo, dxD), ws, wss))) return s;
    if (!w || !dy || !dx) return bad("backward data: a NULL tensor");
    Geo g = geo(dxD, wD, cv, dyD);
    float al = *(const float *)alpha, be = *(const float *)beta;
    size_t need = bwd_data_ws(algo, dxD);
    bool det = algo == 1;
    const float *W = (const float *)w, *DY = (const float *)dy;
    float *DX = (float *)dx;
    calls++;
    emu_launch_check("cudnnConvolutionBackwardData", dim3(1), dim3(1)); // one launch, as the backend counts it
    emu_enqueue_kernel("cudnnConvolutionBackwardData", false, dim3(1), dim3(1), h->stream, [=] {
        if (need) memset(ws, 0x5A, need);
        bool rev = (runs++ & 1) != 0;
        bwd_data_ref(g, W, DY, DX, al, be, det, rev);
    });
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xD,
                                             const void *x, const cudnnTensorDescriptor_t dyD, const void *dy,
                                             const cudnnConvolutionDescriptor_t cv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *ws, size_t wss,
                                             const void *beta, const cudnnFilterDescriptor_t dwD, void *dw) {
    cudnnStatus_t s = check("backward filter", xD, dwD, cv, dyD);
    if (s) return s;
    if (algo != 0 && algo != 1 && algo != 3) return bad("backward filter: unknown algorithm");
    if ((s = workspace("backward filter", bwd_filter_ws(algo, dwD), ws, wss))) return s;
    if (!x || !dy || !dw) return bad("backward filter: a NULL tensor");
    Geo g = geo(xD, dwD, cv, dyD);
    float al = *(const float *)alpha, be = *(const float *)beta;
    size_t need = bwd_filter_ws(algo, dwD);
    bool det = algo == 1;
    const float *X = (const float *)x, *DY = (const float *)dy;
    float *DW = (float *)dw;
    calls++;
    emu_launch_check("cudnnConvolutionBackwardFilter", dim3(1), dim3(1)); // one launch, as the backend counts it
    emu_enqueue_kernel("cudnnConvolutionBackwardFilter", false, dim3(1), dim3(1), h->stream, [=] {
        if (need) memset(ws, 0x5A, need);
        bool rev = (runs++ & 1) != 0;
        bwd_filter_ref(g, X, DY, DW, al, be, det, rev);
    });
    return CUDNN_STATUS_SUCCESS;
}
