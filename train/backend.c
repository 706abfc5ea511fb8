/* The wrappers around the backend vtable (train/backend.h), as ggml's ggml-backend.cpp wraps
 * its ggml_backend_i: the model, the optimizers and the trainer reach a backend only through
 * these. Each checks its arguments before the op runs, so a bad size, geometry or slot is the
 * same SL_EINVAL naming the op and the numbers on every backend (not a kernel that reads out of
 * bounds), and each optional member's fallback lives here once, with exactly the floats of the
 * op it stands in for: what a backend leaves NULL costs passes over memory, never a changed
 * bit. Called tens of times per train step; a check is a few comparisons. */
#include <stdint.h>

#include "train/backend.h"

/* A NULL buffer where there is work: SL_EINVAL naming the op, the buffer and the amount. */
#define NEED(op, p, count, unit)                                                                    \
    do {                                                                                            \
        if ((size_t)(count) != 0 && !(p))                                                           \
            return sl_err(SL_EINVAL, "%s: %s is NULL for %zu %s", op, #p, (size_t)(count), unit);   \
    } while (0)

static sl_status check_act(const char *op, sl_act act) {
    if ((int)act < (int)SL_ACT_NONE || (int)act > (int)SL_ACT_SIGMOID)
        return sl_err(SL_EINVAL, "%s: unknown activation %d", op, (int)act);
    return SL_OK;
}

/* The geometry every conv and pool op takes (backend.h, above the convolution wrappers). */
static sl_status check_geom(const char *op, int n, int h, int w, int c, int kh, int kw, int stride, int pt, int pl,
                            int oh, int ow) {
    bool ok = n >= 0 && h >= 1 && w >= 1 && c >= 1 && kh >= 1 && kw >= 1 && stride >= 1 && oh >= 1 && ow >= 1 &&
              pt >= 0 && pt < kh && pl >= 0 && pl < kw && (int64_t)(oh - 1) * stride - pt < h &&
              (int64_t)(ow - 1) * stride - pl < w;
    if (ok) return SL_OK;
    sl_err(SL_EINVAL, "%s: bad geometry: %d images %dx%dx%d, window %dx%d, stride %d, padding top %d left %d, "
           "output %dx%d", op, n, h, w, c, kh, kw, stride, pt, pl, oh, ow);
    sl_err_hint("sizes >= 1, padding below the window, and every output window starting inside the image");
    return SL_EINVAL;
}

/* A 1x1, stride-1, unpadded convolution: its input is its own im2col matrix. */
static bool conv_is_direct(int h, int w, int kh, int kw, int stride, int pt, int pl, int oh, int ow) {
    return kh == 1 && kw == 1 && stride == 1 && pt == 0 && pl == 0 && oh == h && ow == w;
}

static sl_status check_slot(const char *op, int slot) {
    if (slot < 0 || slot >= SL_BK_STAGE_SLOTS)
        return sl_err(SL_EINVAL, "%s: staging slot %d outside 0..%d", op, slot, SL_BK_STAGE_SLOTS - 1);
    return SL_OK;
}

const char *sl__be_name(const sl_backend *b) { return b->ops->name; }

void sl__backend_free(sl_backend *b) {
    if (b) b->ops->destroy(b);
}

/* ---- memory ---------------------------------------------------------------------------- */

sl_status sl__be_alloc(sl_backend *b, size_t bytes, void **out) {
    if (!out) return sl_err(SL_EINVAL, "alloc: out is NULL (%zu bytes)", bytes);
    return b->ops->alloc(b, bytes, out);
}

void sl__be_free(sl_backend *b, void *p) {
    if (p) b->ops->free(b, p);
}

sl_status sl__be_to_device(sl_backend *b, void *dst, const void *host_src, size_t bytes) {
    NEED("to_device", dst, bytes, "bytes");
    NEED("to_device", host_src, bytes, "bytes");
    return b->ops->to_device(b, dst, host_src, bytes);
}

sl_status sl__be_to_host(sl_backend *b, void *host_dst, const void *src, size_t bytes) {
    NEED("to_host", host_dst, bytes, "bytes");
    NEED("to_host", src, bytes, "bytes");
    return b->ops->to_host(b, host_dst, src, bytes);
}

sl_status sl__be_copy(sl_backend *b, void *dst, const void *src, size_t bytes) {
    NEED("copy", dst, bytes, "bytes");
    NEED("copy", src, bytes, "bytes");
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (bytes && d != s && (d < s ? s - d : d - s) < bytes)
        return sl_err(SL_EINVAL, "copy: %zu bytes between ranges %zu bytes apart (they overlap)", bytes,
                      (size_t)(d < s ? s - d : d - s));
    return b->ops->copy(b, dst, src, bytes);
}

sl_status sl__be_host_alloc(sl_backend *b, size_t bytes, void **out) {
    if (!out) return sl_err(SL_EINVAL, "host_alloc: out is NULL (%zu bytes)", bytes);
    return b->ops->host_alloc(b, bytes, out);
}

void sl__be_host_free(sl_backend *b, void *p) {
    if (p) b->ops->host_free(b, p);
}

sl_status sl__be_to_device_async(sl_backend *b, void *dst, const void *host_src, size_t bytes) {
    NEED("to_device_async", dst, bytes, "bytes");
    NEED("to_device_async", host_src, bytes, "bytes");
    return b->ops->to_device_async(b, dst, host_src, bytes);
}

sl_status sl__be_stage_begin(sl_backend *b, int slot) {
    sl_status s = check_slot("stage_begin", slot);
    return s ? s : b->ops->stage_begin(b, slot);
}

sl_status sl__be_stage_end(sl_backend *b, int slot) {
    sl_status s = check_slot("stage_end", slot);
    return s ? s : b->ops->stage_end(b, slot);
}

sl_status sl__be_stage_wait(sl_backend *b, int slot) {
    sl_status s = check_slot("stage_wait", slot);
    return s ? s : b->ops->stage_wait(b, slot);
}

sl_status sl__be_stage_release(sl_backend *b, int slot) {
    sl_status s = check_slot("stage_release", slot);
    return s ? s : b->ops->stage_release(b, slot);
}

sl_status sl__be_sync(sl_backend *b) { return b->ops->sync(b); }

uint64_t sl__be_launches(sl_backend *b) { return b->ops->launches(b); }

/* ---- dense math ------------------------------------------------------------------------ */

sl_status sl__be_gemm(sl_backend *b, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                      int lda, const float *bm, int ldb, float beta, float *c, int ldc) {
    if (m < 0 || n < 0 || k < 0) return sl_err(SL_EINVAL, "gemm: negative size %dx%dx%d", m, n, k);
    int wa = trans_a ? m : k, wb = trans_b ? k : n; /* the stored rows' widths */
    if (lda < wa || ldb < wb || ldc < n)
        return sl_err(SL_EINVAL, "gemm: row strides %d, %d, %d below the rows' widths %d, %d, %d (%dx%dx%d%s%s)", lda,
                      ldb, ldc, wa, wb, n, m, n, k, trans_a ? ", A transposed" : "", trans_b ? ", B transposed" : "");
    size_t mn = (size_t)m * (size_t)n, work = k ? mn : 0;
    NEED("gemm", c, mn, "outputs");
    NEED("gemm", a, work, "outputs");
    NEED("gemm", bm, work, "outputs");
    return b->ops->gemm(b, trans_a, trans_b, m, n, k, alpha, a, lda, bm, ldb, beta, c, ldc);
}

sl_status sl__be_fill(sl_backend *b, float *x, float v, size_t n) {
    NEED("fill", x, n, "floats");
    return b->ops->fill(b, x, v, n);
}

sl_status sl__be_axpy(sl_backend *b, size_t n, float alpha, const float *x, float *y) {
    NEED("axpy", x, n, "floats");
    NEED("axpy", y, n, "floats");
    return b->ops->axpy(b, n, alpha, x, y);
}

sl_status sl__be_scale(sl_backend *b, size_t n, float alpha, float *x) {
    NEED("scale", x, n, "floats");
    return b->ops->scale(b, n, alpha, x);
}

sl_status sl__be_bias_add(sl_backend *b, float *y, const float *bias, size_t rows, size_t cols) {
    NEED("bias_add", y, rows * cols, "floats");
    NEED("bias_add", bias, rows * cols, "floats");
    return b->ops->bias_add(b, y, bias, rows, cols);
}

sl_status sl__be_bias_grad(sl_backend *b, float *db, const float *dy, size_t rows, size_t cols) {
    NEED("bias_grad", db, cols, "floats");
    NEED("bias_grad", dy, rows * cols, "floats");
    return b->ops->bias_grad(b, db, dy, rows, cols);
}

sl_status sl__be_act_forward(sl_backend *b, sl_act act, const float *x, float *y, size_t n) {
    sl_status s = check_act("act_forward", act);
    if (s) return s;
    NEED("act_forward", x, n, "floats");
    NEED("act_forward", y, n, "floats");
    return b->ops->act_forward(b, act, x, y, n);
}

sl_status sl__be_act_backward(sl_backend *b, sl_act act, const float *y, const float *dy, float *dx, size_t n) {
    sl_status s = check_act("act_backward", act);
    if (s) return s;
    NEED("act_backward", y, n, "floats");
    NEED("act_backward", dy, n, "floats");
    NEED("act_backward", dx, n, "floats");
    return b->ops->act_backward(b, act, y, dy, dx, n);
}

sl_status sl__be_act_backward_set(sl_backend *b, sl_act act, const float *y, const float *dy, float *dx, size_t n) {
    sl_status s = check_act("act_backward_set", act);
    if (s) return s;
    NEED("act_backward_set", y, n, "floats");
    NEED("act_backward_set", dy, n, "floats");
    NEED("act_backward_set", dx, n, "floats");
    if (n && dx == dy) /* the fallback's fill would erase dy */
        return sl_err(SL_EINVAL, "act_backward_set: dx is dy (%zu floats): the gradient cannot be set in place", n);
    if (b->ops->act_backward_set) return b->ops->act_backward_set(b, act, y, dy, dx, n);
    s = b->ops->fill(b, dx, 0.0f, n);
    return s ? s : b->ops->act_backward(b, act, y, dy, dx, n);
}

sl_status sl__be_bias_act(sl_backend *b, sl_act act, float *y, const float *bias, size_t rows, size_t cols) {
    sl_status s = check_act("bias_act", act); /* before the fallback's bias_add touches y */
    if (s) return s;
    NEED("bias_act", y, rows * cols, "floats");
    NEED("bias_act", bias, rows * cols, "floats");
    if (b->ops->bias_act) return b->ops->bias_act(b, act, y, bias, rows, cols);
    s = b->ops->bias_add(b, y, bias, rows, cols);
    return s || act == SL_ACT_NONE ? s : b->ops->act_forward(b, act, y, y, rows * cols);
}

/* ---- convolution ----------------------------------------------------------------------- */

sl_status sl__be_im2col(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw, int stride,
                        int pad_top, int pad_left, int oh, int ow, float *col) {
    sl_status s = check_geom("im2col", n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow);
    if (s) return s;
    NEED("im2col", x, n, "images");
    NEED("im2col", col, n, "images");
    return b->ops->im2col(b, x, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, col);
}

sl_status sl__be_col2im(sl_backend *b, const float *col, int n, int h, int w, int c, int kh, int kw, int stride,
                        int pad_top, int pad_left, int oh, int ow, float *dx) {
    sl_status s = check_geom("col2im", n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow);
    if (s) return s;
    NEED("col2im", col, n, "images");
    NEED("col2im", dx, n, "images");
    return b->ops->col2im(b, col, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, dx);
}

/* The conv product wrappers' shared checks, and the floats of im2col's matrix they need
 * (0 for a direct convolution, whose input is the matrix). */
static sl_status check_conv(const char *op, const float *in, int n, int h, int w, int c, int kh, int kw, int stride,
                            int pt, int pl, int oh, int ow, const float *operand, int oc, const float *out) {
    sl_status s = check_geom(op, n, h, w, c, kh, kw, stride, pt, pl, oh, ow);
    if (s) return s;
    if (oc < 1) return sl_err(SL_EINVAL, "%s: %d output channels", op, oc);
    NEED(op, in, n, "images");
    NEED(op, operand, n, "images");
    NEED(op, out, n, "images");
    return SL_OK;
}

static sl_status check_col(const char *op, const float *scratch, size_t scratch_floats, int n, int oh, int ow,
                           int kh, int kw, int c) {
    size_t need = (size_t)n * oh * ow * ((size_t)kh * kw * c);
    if (scratch && scratch_floats >= need) return SL_OK;
    return sl_err(SL_EINVAL, "%s: scratch of %zu floats%s below the %zu of im2col's matrix (%d images, %dx%d out, "
                  "%dx%dx%d window)", op, scratch_floats, scratch ? "" : " (NULL)", need, n, oh, ow, kh, kw, c);
}

sl_status sl__be_conv_gemm(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw, int stride,
                           int pad_top, int pad_left, int oh, int ow, const float *W, int oc, float beta, float *y,
                           float *scratch, size_t scratch_floats) {
    sl_status s = check_conv("conv_gemm", x, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, W, oc, y);
    if (s) return s;
    const int K = kh * kw * c, rows = n * oh * ow;
    if (!conv_is_direct(h, w, kh, kw, stride, pad_top, pad_left, oh, ow)) {
        if (b->ops->conv_gemm) {
            s = b->ops->conv_gemm(b, x, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, W, oc, beta, y,
                                  scratch, scratch_floats);
            if (s != SL_EUNSUPPORTED) return s;
        }
        if ((s = check_col("conv_gemm", scratch, scratch_floats, n, oh, ow, kh, kw, c)) ||
            (s = b->ops->im2col(b, x, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, scratch)))
            return s;
        x = scratch;
    }
    return b->ops->gemm(b, false, false, rows, oc, K, 1.0f, x, K, W, oc, beta, y, oc);
}

sl_status sl__be_conv_kernel_grad(sl_backend *b, const float *x, int n, int h, int w, int c, int kh, int kw,
                                  int stride, int pad_top, int pad_left, int oh, int ow, const float *dy, int oc,
                                  float beta, float *dW, float *scratch, size_t scratch_floats) {
    sl_status s = check_conv("conv_kernel_grad", x, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, dy, oc, dW);
    if (s) return s;
    const int K = kh * kw * c, rows = n * oh * ow;
    if (!conv_is_direct(h, w, kh, kw, stride, pad_top, pad_left, oh, ow)) {
        if (b->ops->conv_kernel_grad) {
            s = b->ops->conv_kernel_grad(b, x, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, dy, oc, beta, dW,
                                         scratch, scratch_floats);
            if (s != SL_EUNSUPPORTED) return s;
        }
        if ((s = check_col("conv_kernel_grad", scratch, scratch_floats, n, oh, ow, kh, kw, c)) ||
            (s = b->ops->im2col(b, x, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, scratch)))
            return s;
        x = scratch;
    }
    return b->ops->gemm(b, true, false, K, oc, rows, 1.0f, x, K, dy, oc, beta, dW, oc);
}

sl_status sl__be_conv_input_grad(sl_backend *b, const float *dy, int n, int h, int w, int c, int kh, int kw,
                                 int stride, int pad_top, int pad_left, int oh, int ow, const float *W,
                                 const float *W_turned, int oc, bool accumulate, float *dx, float *scratch,
                                 size_t scratch_floats) {
    sl_status s = check_conv("conv_input_grad", dy, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, W, oc, dx);
    if (s) return s;
    const int K = kh * kw * c, rows = n * oh * ow;
    const float keep = accumulate ? 1.0f : 0.0f;
    if (conv_is_direct(h, w, kh, kw, stride, pad_top, pad_left, oh, ow))
        return b->ops->gemm(b, false, true, rows, K, oc, 1.0f, dy, oc, W, oc, keep, dx, K);
    if (b->ops->conv_input_grad) {
        s = b->ops->conv_input_grad(b, dy, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, W, oc, keep, dx,
                                    scratch, scratch_floats);
        if (s != SL_EUNSUPPORTED) return s;
    }
    if (W_turned && stride == 1 && b->ops->conv_gemm) {
        /* dx is the convolution of dy, padded kh-1-pt above and kw-1-pl left, with the kernel
         * turned: output h x w, oc channels in, c out */
        s = b->ops->conv_gemm(b, dy, n, oh, ow, oc, kh, kw, 1, kh - 1 - pad_top, kw - 1 - pad_left, h, w, W_turned, c,
                              keep, dx, scratch, scratch_floats);
        if (s != SL_EUNSUPPORTED) return s;
    }
    if ((s = check_col("conv_input_grad", scratch, scratch_floats, n, oh, ow, kh, kw, c)) ||
        (s = b->ops->gemm(b, false, true, rows, K, oc, 1.0f, dy, oc, W, oc, 0.0f, scratch, K)))
        return s;
    if (!accumulate && (s = b->ops->fill(b, dx, 0.0f, (size_t)n * h * w * c))) return s;
    return b->ops->col2im(b, scratch, n, h, w, c, kh, kw, stride, pad_top, pad_left, oh, ow, dx);
}

bool sl__be_turns_kernels(const sl_backend *b) { return b->ops->conv_gemm && !b->ops->conv_input_grad; }

/* ---- pooling --------------------------------------------------------------------------- */

sl_status sl__be_maxpool_forward(sl_backend *b, const float *x, int n, int h, int w, int c, int k, int s,
                                 int pad_top, int pad_left, int oh, int ow, float *y, int32_t *argmax) {
    sl_status st = check_geom("maxpool_forward", n, h, w, c, k, k, s, pad_top, pad_left, oh, ow);
    if (st) return st;
    NEED("maxpool_forward", x, n, "images");
    NEED("maxpool_forward", y, n, "images");
    NEED("maxpool_forward", argmax, n, "images");
    return b->ops->maxpool_forward(b, x, n, h, w, c, k, s, pad_top, pad_left, oh, ow, y, argmax);
}

sl_status sl__be_maxpool_backward(sl_backend *b, const float *dy, const int32_t *argmax, int n, int h, int w, int c,
                                  int k, int s, int pad_top, int pad_left, int oh, int ow, float *dx) {
    sl_status st = check_geom("maxpool_backward", n, h, w, c, k, k, s, pad_top, pad_left, oh, ow);
    if (st) return st;
    NEED("maxpool_backward", dy, n, "images");
    NEED("maxpool_backward", argmax, n, "images");
    NEED("maxpool_backward", dx, n, "images");
    return b->ops->maxpool_backward(b, dy, argmax, n, h, w, c, k, s, pad_top, pad_left, oh, ow, dx);
}

sl_status sl__be_avgpool_forward(sl_backend *b, const float *x, int n, int h, int w, int c, int k, int s,
                                 int pad_top, int pad_left, int oh, int ow, float *y) {
    sl_status st = check_geom("avgpool_forward", n, h, w, c, k, k, s, pad_top, pad_left, oh, ow);
    if (st) return st;
    NEED("avgpool_forward", x, n, "images");
    NEED("avgpool_forward", y, n, "images");
    return b->ops->avgpool_forward(b, x, n, h, w, c, k, s, pad_top, pad_left, oh, ow, y);
}

sl_status sl__be_avgpool_backward(sl_backend *b, const float *dy, int n, int h, int w, int c, int k, int s,
                                  int pad_top, int pad_left, int oh, int ow, float *dx) {
    sl_status st = check_geom("avgpool_backward", n, h, w, c, k, k, s, pad_top, pad_left, oh, ow);
    if (st) return st;
    NEED("avgpool_backward", dy, n, "images");
    NEED("avgpool_backward", dx, n, "images");
    return b->ops->avgpool_backward(b, dy, n, h, w, c, k, s, pad_top, pad_left, oh, ow, dx);
}

sl_status sl__be_maxpool_relu_backward_set(sl_backend *b, const float *dy, const float *pooled,
                                           const float *relu_out, const int32_t *argmax, int n, int h, int w, int c,
                                           int k, int s, int pad_top, int pad_left, int oh, int ow, float *dx,
                                           float *scratch) {
    const char *op = "maxpool_relu_backward_set";
    sl_status st = check_geom(op, n, h, w, c, k, k, s, pad_top, pad_left, oh, ow);
    if (st) return st;
    if (s != k) return sl_err(SL_EINVAL, "%s: stride %d is not the window %d: the windows overlap or leave gaps", op, s, k);
    NEED(op, dy, n, "images");
    NEED(op, pooled, n, "images");
    NEED(op, relu_out, n, "images");
    NEED(op, argmax, n, "images");
    NEED(op, dx, n, "images");
    NEED(op, scratch, n, "images");
    if (n && scratch == dx) return sl_err(SL_EINVAL, "%s: scratch is dx", op);
    if (b->ops->maxpool_relu_backward_set)
        return b->ops->maxpool_relu_backward_set(b, dy, pooled, argmax, n, h, w, c, k, s, pad_top, pad_left, oh, ow, dx);
    size_t nin = (size_t)n * h * w * c;
    if ((st = b->ops->fill(b, scratch, 0.0f, nin)) ||
        (st = b->ops->maxpool_backward(b, dy, argmax, n, h, w, c, k, s, pad_top, pad_left, oh, ow, scratch)))
        return st;
    return sl__be_act_backward_set(b, SL_ACT_RELU, relu_out, scratch, dx, nin);
}

/* ---- loss ------------------------------------------------------------------------------ */

static sl_status check_xent(const char *op, const float *logits, const int32_t *labels, int n, int k,
                            float smoothing) {
    if (n < 0 || k < 1) return sl_err(SL_EINVAL, "%s: %d rows of %d logits", op, n, k);
    if (!(smoothing >= 0.0f && smoothing < 1.0f))
        return sl_err(SL_EINVAL, "%s: label smoothing %g outside [0, 1)", op, smoothing);
    NEED(op, logits, n, "rows");
    NEED(op, labels, n, "rows");
    return SL_OK;
}

sl_status sl__be_softmax_xent(sl_backend *b, const float *logits, const int32_t *labels, int n, int k,
                              float smoothing, float grad_scale, float *dlogits, double *loss_sum_host,
                              int64_t *correct_host, int64_t *top5_host) {
    sl_status s = check_xent("softmax_xent", logits, labels, n, k, smoothing);
    return s ? s
             : b->ops->softmax_xent(b, logits, labels, n, k, smoothing, grad_scale, dlogits, loss_sum_host,
                                    correct_host, top5_host);
}

sl_status sl__be_softmax_xent_start(sl_backend *b, const float *logits, const int32_t *labels, int n, int k,
                                    float smoothing, float grad_scale, float *dlogits) {
    sl_status s = check_xent("softmax_xent_start", logits, labels, n, k, smoothing);
    return s ? s : b->ops->softmax_xent_start(b, logits, labels, n, k, smoothing, grad_scale, dlogits);
}

sl_status sl__be_softmax_xent_result(sl_backend *b, double *loss_sum_host, int64_t *correct_host,
                                     int64_t *top5_host) {
    return b->ops->softmax_xent_result(b, loss_sum_host, correct_host, top5_host);
}

/* ---- dropout, batch normalization ------------------------------------------------------ */

sl_status sl__be_dropout_forward(sl_backend *b, const float *x, float *y, float *mask, size_t n, float rate,
                                 uint64_t seed) {
    if (!(rate >= 0.0f && rate < 1.0f)) return sl_err(SL_EINVAL, "dropout_forward: rate %g outside [0, 1)", rate);
    NEED("dropout_forward", x, n, "floats");
    NEED("dropout_forward", y, n, "floats");
    NEED("dropout_forward", mask, n, "floats");
    return b->ops->dropout_forward(b, x, y, mask, n, rate, seed);
}

sl_status sl__be_dropout_backward(sl_backend *b, const float *dy, const float *mask, float *dx, size_t n) {
    NEED("dropout_backward", dy, n, "floats");
    NEED("dropout_backward", mask, n, "floats");
    NEED("dropout_backward", dx, n, "floats");
    return b->ops->dropout_backward(b, dy, mask, dx, n);
}

sl_status sl__be_batchnorm_forward(sl_backend *b, const float *x, float *y, size_t rows, int c, const float *gamma,
                                   const float *beta, float *running_mean, float *running_var, float momentum,
                                   float eps, bool training, float *save_mean, float *save_invstd) {
    if (c < 1) return sl_err(SL_EINVAL, "batchnorm_forward: %d channels", c);
    NEED("batchnorm_forward", x, rows, "rows");
    NEED("batchnorm_forward", y, rows, "rows");
    NEED("batchnorm_forward", gamma, rows, "rows");
    NEED("batchnorm_forward", beta, rows, "rows");
    NEED("batchnorm_forward", running_mean, rows, "rows");
    NEED("batchnorm_forward", running_var, rows, "rows");
    if (training) {
        NEED("batchnorm_forward", save_mean, rows, "rows");
        NEED("batchnorm_forward", save_invstd, rows, "rows");
    }
    return b->ops->batchnorm_forward(b, x, y, rows, c, gamma, beta, running_mean, running_var, momentum, eps, training,
                                     save_mean, save_invstd);
}

sl_status sl__be_batchnorm_backward(sl_backend *b, const float *x, const float *dy, size_t rows, int c,
                                    const float *gamma, const float *save_mean, const float *save_invstd, float *dx,
                                    float *dgamma, float *dbeta) {
    if (c < 1) return sl_err(SL_EINVAL, "batchnorm_backward: %d channels", c);
    NEED("batchnorm_backward", x, rows, "rows");
    NEED("batchnorm_backward", dy, rows, "rows");
    NEED("batchnorm_backward", gamma, rows, "rows");
    NEED("batchnorm_backward", save_mean, rows, "rows");
    NEED("batchnorm_backward", save_invstd, rows, "rows");
    NEED("batchnorm_backward", dx, rows, "rows");
    NEED("batchnorm_backward", dgamma, rows, "rows");
    NEED("batchnorm_backward", dbeta, rows, "rows");
    return b->ops->batchnorm_backward(b, x, dy, rows, c, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
}

/* ---- optimizers ------------------------------------------------------------------------ */

sl_status sl__be_sgd_step(sl_backend *b, float *p, const float *g, float *vel, size_t n, float lr, float momentum,
                          bool nesterov, float weight_decay) {
    NEED("sgd_step", p, n, "floats");
    NEED("sgd_step", g, n, "floats");
    if (momentum != 0.0f) NEED("sgd_step", vel, n, "floats");
    return b->ops->sgd_step(b, p, g, vel, n, lr, momentum, nesterov, weight_decay);
}

sl_status sl__be_adam_step(sl_backend *b, float *p, const float *g, float *m, float *v, size_t n, float lr,
                           float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t t) {
    if (t < 1) return sl_err(SL_EINVAL, "adam_step: step %lld must be >= 1", (long long)t);
    NEED("adam_step", p, n, "floats");
    NEED("adam_step", g, n, "floats");
    NEED("adam_step", m, n, "floats");
    NEED("adam_step", v, n, "floats");
    return b->ops->adam_step(b, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, decoupled, t);
}

sl_status sl__be_sum_squares(sl_backend *b, const float *x, size_t n, double *out_host) {
    if (!out_host) return sl_err(SL_EINVAL, "sum_squares: out_host is NULL");
    NEED("sum_squares", x, n, "floats");
    return b->ops->sum_squares(b, x, n, out_host);
}

/* ---- the bucketed gradient exchange ---------------------------------------------------- */

sl_status sl__be_grads_out_reserve(sl_backend *b, int n) {
    if (n < 0) return sl_err(SL_EINVAL, "grads_out_reserve: %d buckets", n);
    return b->ops->grads_out_reserve(b, n);
}

sl_status sl__be_grads_out_start(sl_backend *b, int k, void *host_dst, const void *src, size_t bytes) {
    if (k < 0) return sl_err(SL_EINVAL, "grads_out_start: bucket %d", k);
    NEED("grads_out_start", host_dst, bytes, "bytes");
    NEED("grads_out_start", src, bytes, "bytes");
    return b->ops->grads_out_start(b, k, host_dst, src, bytes);
}

sl_status sl__be_grads_out_wait(sl_backend *b, int k) {
    if (k < 0) return sl_err(SL_EINVAL, "grads_out_wait: bucket %d", k);
    return b->ops->grads_out_wait(b, k);
}

/* ---- graph joins ----------------------------------------------------------------------- */

sl_status sl__be_copy_cols(sl_backend *b, float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                           size_t cols, bool accumulate) {
    if (rows && (cols > ld_dst || cols > ld_src))
        return sl_err(SL_EINVAL, "copy_cols: %zu columns, row strides %zu (dst) and %zu (src)", cols, ld_dst, ld_src);
    NEED("copy_cols", dst, rows * cols, "floats");
    NEED("copy_cols", src, rows * cols, "floats");
    return b->ops->copy_cols(b, dst, ld_dst, src, ld_src, rows, cols, accumulate);
}

sl_status sl__be_global_avgpool_forward(sl_backend *b, const float *x, int n, int hw, int c, float *y) {
    if (n < 0 || hw < 1 || c < 1)
        return sl_err(SL_EINVAL, "global_avgpool_forward: %d images of %d cells x %d channels", n, hw, c);
    NEED("global_avgpool_forward", x, n, "images");
    NEED("global_avgpool_forward", y, n, "images");
    return b->ops->global_avgpool_forward(b, x, n, hw, c, y);
}

sl_status sl__be_global_avgpool_backward(sl_backend *b, const float *dy, int n, int hw, int c, float *dx) {
    if (n < 0 || hw < 1 || c < 1)
        return sl_err(SL_EINVAL, "global_avgpool_backward: %d images of %d cells x %d channels", n, hw, c);
    NEED("global_avgpool_backward", dy, n, "images");
    NEED("global_avgpool_backward", dx, n, "images");
    return b->ops->global_avgpool_backward(b, dy, n, hw, c, dx);
}

/* ---- mixed precision, tasks ------------------------------------------------------------ */

sl_status sl__be_set_precision(sl_backend *b, sl_bk_precision p) {
    if ((int)p < (int)SL_BK_FP32 || (int)p > (int)SL_BK_FP16)
        return sl_err(SL_EINVAL, "set_precision: unknown precision %d", (int)p);
    return b->ops->set_precision(b, p);
}

bool sl__be_has_tasks(const sl_backend *b) { return b->ops->run_tasks != NULL; }

int sl__be_task_slots(sl_backend *b) { return b->ops->task_slots ? b->ops->task_slots(b) : 1; }

sl_status sl__be_run_tasks(sl_backend *b, int n, int slots, sl_status (*fn)(void *ctx, int t, int slot), void *ctx) {
    if (n < 0 || slots < 1 || !fn)
        return sl_err(SL_EINVAL, "run_tasks: %d tasks on %d slots%s", n, slots, fn ? "" : ", fn NULL");
    if (b->ops->run_tasks) return b->ops->run_tasks(b, n, slots, fn, ctx);
    sl_status s = SL_OK;
    for (int t = 0; t < n && !s; t++) s = fn(ctx, t, 0);
    return s;
}
