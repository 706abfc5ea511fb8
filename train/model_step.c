/* A model's train and eval steps (the model itself is built in model.c): staging a batch
 * into a slot, the forward pass in layer order, softmax cross-entropy, and the backward pass
 * in reverse, every op through the backend's wrappers (train/backend.h), which supply what a
 * backend lacks with the same floats.
 *
 * Layers run in array order, which is a topological order (inputs come from earlier layers
 * only); backward runs in reverse, so every consumer of an output has added its part before
 * that output's layer runs. The first consumer in backward order SETS the gradient of an
 * input, later ones ADD to it (an output used by several layers gets the sum), so no
 * gradient buffer is zeroed per step; an input gradient is computed only where a layer
 * upstream has parameters, or for the model input when asked (sl__model_input_grad).
 * Convolutions run a few images at a time on the CPU (the chunks model.c plans), the chunks
 * at once, each through its thread's im2col buffer (conv_pass), the whole batch at once on a
 * GPU, and backward recomputes the im2col. Where the backend multiplies without im2col it
 * does, reading the windows in place, and a stride-1 conv's input gradient is then the
 * convolution of its output gradient with the kernel turned (no col2im). Bias and activation
 * are one call, and a max pool whose windows tile the output of a ReLU conv read by it alone
 * writes that conv's gradient before the ReLU (layer.relu_pool): on a backend with the fused
 * ops, two fewer passes over the largest activations. Dropout masks come from (seed, train
 * steps taken, layer index). */
#include <stdio.h>
#include <string.h>

#include "sluice/util.h"
#include "train/model_impl.h"

static uint64_t mix64(uint64_t a, uint64_t b) {
    uint64_t s = a ^ (b * 0xd1342543de82ef95ull);
    return sl_splitmix64(&s);
}

/* One pass of a convolution over the batch, chunk by chunk (l->chunk images each). On a
 * backend with tasks (CPU threads) the chunks run at once, one per thread, each with its own
 * im2col buffers (slot) and its ops on that thread alone: no hand-off between threads inside
 * a chunk. Backward then gives chunk t its own kernel and bias gradients (m->wpart), added
 * into the model's in chunk order afterwards, so the floats do not depend on the thread
 * count (one thread runs the same tasks one after another). Without tasks (GPU) the chunks
 * run in turn and add into the model's gradients directly. */
typedef struct conv_pass {
    sl_model *m;
    const layer *l;
    const float *x; /* the layer's input */
    float *dx;      /* backward: its gradient, or NULL */
    bool acc;       /* backward: add to dx instead of setting it */
    int B;
    bool parts;     /* backward: chunk t's kernel and bias gradients go to m->wpart */
    const float *wrot; /* backward, stride 1, a backend that turns kernels: the kernel turned (turn_kernel) */
} conv_pass;

/* wr = the kernel turned for the input gradient of a stride-1 convolution as a convolution:
 * wr[ky][kx][o][ci] = W[kh-1-ky][kw-1-kx][ci][o] (host memory: backends with conv_gemm). */
static void turn_kernel(const layer *l, const float *W, float *wr) {
    const int kh = l->kh, kw = l->kw, c = l->c, oc = l->oc;
    for (int ky = 0; ky < kh; ky++)
        for (int kx = 0; kx < kw; kx++)
            for (int o = 0; o < oc; o++)
                for (int ci = 0; ci < c; ci++)
                    wr[(((size_t)ky * kw + kx) * oc + o) * c + ci] =
                        W[(((size_t)(kh - 1 - ky) * kw + (kw - 1 - kx)) * c + ci) * oc + o];
}

static sl_status conv_fwd_chunk(void *vc, int t, int slot) {
    const conv_pass *c = vc;
    sl_model *m = c->m;
    const layer *l = c->l;
    const int ohw = l->oh * l->ow, i0 = t * l->chunk;
    const int nb = c->B - i0 < l->chunk ? c->B - i0 : l->chunk;
    const size_t in_img = (size_t)l->h * l->w * l->c, out_img = (size_t)ohw * l->oc;
    float *y = l->out + i0 * out_img;
    sl_status s = sl__be_conv_gemm(m->bk, c->x + i0 * in_img, nb, l->h, l->w, l->c, l->kh, l->kw, l->stride, l->pt,
                                   l->pl, l->oh, l->ow, m->params + l->w_off, l->oc, 0.0f, y,
                                   m->col + (size_t)slot * m->col_floats, m->col_floats);
    if (!s) s = sl__be_bias_act(m->bk, l->act, y, m->params + l->b_off, (size_t)nb * ohw, (size_t)l->oc);
    return s;
}

/* A chunk's pre-activation gradient (unless the max pool after it wrote that: dout_pre), its
 * bias and kernel gradients, and (when wanted) its input gradient. */
static sl_status conv_bwd_chunk(void *vc, int t, int slot) {
    const conv_pass *c = vc;
    sl_model *m = c->m;
    const layer *l = c->l;
    sl_backend *bk = m->bk;
    const int ohw = l->oh * l->ow, N = l->oc, i0 = t * l->chunk;
    const int nb = c->B - i0 < l->chunk ? c->B - i0 : l->chunk, rows = nb * ohw;
    const size_t in_img = (size_t)l->h * l->w * l->c, out_img = (size_t)ohw * N;
    float *col = m->col + (size_t)slot * m->col_floats, *dcol = m->dcol + (size_t)slot * m->col_floats;
    float *dW = m->grads + l->w_off;
    float beta = 1.0f; /* the kernel gradient: added to, or set in the chunk's own part */
    sl_status s = SL_OK;
    if (c->parts) {
        dW = m->wpart + (size_t)t * (l->nw + l->nb);
        beta = 0.0f;
        s = sl__be_fill(bk, dW + l->nw, 0.0f, l->nb);
    }
    float *db = dW + l->nw; /* the bias follows the kernel (place_params) */
    const float *dpre = l->dout + i0 * out_img;
    if (!s && l->act != SL_ACT_NONE && !l->dout_pre) {
        float *d = m->scratch_a + i0 * out_img;
        s = sl__be_act_backward_set(bk, l->act, l->out + i0 * out_img, dpre, d, (size_t)nb * out_img);
        dpre = d;
    }
    const float *x = c->x + i0 * in_img;
    if (!s) s = sl__be_bias_grad(bk, db, dpre, (size_t)rows, (size_t)N);
    if (!s)
        s = sl__be_conv_kernel_grad(bk, x, nb, l->h, l->w, l->c, l->kh, l->kw, l->stride, l->pt, l->pl, l->oh, l->ow,
                                    dpre, N, beta, dW, col, m->col_floats);
    if (s || !c->dx) return s;
    return sl__be_conv_input_grad(bk, dpre, nb, l->h, l->w, l->c, l->kh, l->kw, l->stride, l->pt, l->pl, l->oh, l->ow,
                                  m->params + l->w_off, c->wrot, N, c->acc, c->dx + i0 * in_img, dcol, m->col_floats);
}

static sl_status conv_pass_run(sl_model *m, conv_pass *c, bool backward) {
    const layer *l = c->l;
    const int n = (c->B + l->chunk - 1) / l->chunk;
    sl_status (*fn)(void *, int, int) = backward ? conv_bwd_chunk : conv_fwd_chunk;
    sl_status s = SL_OK;
    if (backward && c->dx && !l->direct && l->stride == 1 && sl__be_turns_kernels(m->bk) && m->wrot) {
        turn_kernel(l, m->params + l->w_off, m->wrot);
        c->wrot = m->wrot;
    }
    if (!sl__be_has_tasks(m->bk) || n < 2) {
        for (int t = 0; t < n && !s; t++) s = fn(c, t, 0);
        return s;
    }
    c->parts = backward;
    s = sl__be_run_tasks(m->bk, n, m->slots, fn, c); /* one at a time where m->slots is 1: the same floats */
    for (int t = 0; backward && t < n && !s; t++)
        s = sl__be_axpy(m->bk, l->nw + l->nb, 1.0f, m->wpart + (size_t)t * (l->nw + l->nb), m->grads + l->w_off);
    return s;
}

static sl_status conv_forward(sl_model *m, const layer *l, const float *in, int B) {
    conv_pass c = {.m = m, .l = l, .x = in, .B = B};
    return conv_pass_run(m, &c, false);
}

static sl_status conv_backward(sl_model *m, const layer *l, const float *x, float *dx, bool acc, int B) {
    conv_pass c = {.m = m, .l = l, .x = x, .dx = dx, .acc = acc, .B = B};
    return conv_pass_run(m, &c, true);
}

/* Rows of the last dimension and its width, for source sk (-1: the model input). */
static size_t last_dim(const sl_model *m, int sk) {
    return (size_t)(sk < 0 ? m->in_shape[m->in_rank - 1] : m->L[sk].shape[m->L[sk].rank - 1]);
}

/* ADD: the first input copied, the others added; CONCAT: each input into its columns. */
static sl_status join_forward(sl_model *m, const layer *l, const float *x, int B) {
    size_t nout = (size_t)B * l->out_size, C = last_dim(m, (int)(l - m->L)), off = 0;
    sl_status s = SL_OK;
    for (int k = 0; k < l->nin && !s; k++) {
        const float *in = l->src[k] < 0 ? x : m->L[l->src[k]].out;
        if (l->kind == SL_LAYER_ADD) {
            s = k == 0 ? sl__be_copy(m->bk, l->out, in, nout * sizeof(float))
                       : sl__be_axpy(m->bk, nout, 1.0f, in, l->out);
        } else {
            size_t ck = last_dim(m, l->src[k]);
            s = sl__be_copy_cols(m->bk, l->out + off, C, in, ck, nout / C, ck, false);
            off += ck;
        }
    }
    return s;
}

/* The gradients of a join's inputs from its output's: set, or added where acc says. */
static sl_status join_backward(sl_model *m, const layer *l, float *const *dx, int B) {
    size_t nout = (size_t)B * l->out_size, C = last_dim(m, (int)(l - m->L)), off = 0;
    sl_status s = SL_OK;
    for (int k = 0; k < l->nin && !s; k++) {
        size_t ck = last_dim(m, l->src[k]);
        if (dx[k] && l->kind == SL_LAYER_ADD)
            s = l->acc[k] ? sl__be_axpy(m->bk, nout, 1.0f, l->dout, dx[k])
                          : sl__be_copy(m->bk, dx[k], l->dout, nout * sizeof(float));
        else if (dx[k])
            s = sl__be_copy_cols(m->bk, dx[k], ck, l->dout + off, C, nout / C, ck, l->acc[k]);
        off += ck;
    }
    return s;
}

static sl_status forward(sl_model *m, const float *x, int B, bool training) {
    sl_backend *bk = m->bk;
    sl_status s = SL_OK;
    for (int li = 0; li < m->nl && !s; li++) {
        layer *l = &m->L[li];
        const float *in = l->src[0] < 0 ? x : m->L[l->src[0]].out;
        size_t nout = (size_t)B * l->out_size;
        const float *P = m->params;
        switch (l->kind) {
        case SL_LAYER_INPUT: break;
        case SL_LAYER_ADD:
        case SL_LAYER_CONCAT:
            s = join_forward(m, l, x, B);
            break;
        case SL_LAYER_GLOBAL_AVGPOOL:
            s = sl__be_global_avgpool_forward(bk, in, B, l->hw, l->c, l->out);
            break;
        case SL_LAYER_FLATTEN:
            l->out = (float *)in; /* a view: its gradient buffer is resolved in backward */
            break;
        case SL_LAYER_DENSE:
            s = sl__be_gemm(bk, false, false, B, (int)l->nb, (int)l->in_size, 1.0f, in, (int)l->in_size, P + l->w_off,
                            (int)l->nb, 0.0f, l->out, (int)l->nb);
            if (!s) s = sl__be_bias_act(bk, l->act, l->out, P + l->b_off, (size_t)B, l->nb);
            break;
        case SL_LAYER_CONV2D:
            s = conv_forward(m, l, in, B);
            break;
        case SL_LAYER_MAXPOOL:
            s = sl__be_maxpool_forward(bk, in, B, l->h, l->w, l->c, l->kh, l->stride, l->pt, l->pl, l->oh, l->ow,
                                       l->out, l->argmax);
            break;
        case SL_LAYER_AVGPOOL:
            s = sl__be_avgpool_forward(bk, in, B, l->h, l->w, l->c, l->kh, l->stride, l->pt, l->pl, l->oh, l->ow,
                                       l->out);
            break;
        case SL_LAYER_DROPOUT:
            if (training && l->rate > 0.0f)
                s = sl__be_dropout_forward(bk, in, l->out, l->mask, nout, l->rate,
                                           mix64(mix64(m->opts.seed, m->steps), (uint64_t)li + 1));
            else
                s = sl__be_copy(bk, l->out, in, nout * sizeof(float));
            break;
        case SL_LAYER_BATCHNORM:
            s = sl__be_batchnorm_forward(bk, in, l->out, (size_t)B * (l->out_size / (size_t)l->c), l->c,
                                         P + l->w_off, P + l->b_off, m->params + l->rm_off, m->params + l->rv_off,
                                         l->momentum, l->eps, training, l->save_mean, l->save_invstd);
            break;
        case SL_LAYER_RELU:
        case SL_LAYER_TANH:
        case SL_LAYER_SIGMOID:
            s = sl__be_act_forward(bk, l->act, in, l->out, nout);
            break;
        }
    }
    return s;
}

/* dy is L[li].dout (already holding dLoss/dout); sets dx, or adds to it when acc (NULL: not
 * needed). */
static sl_status backward_layer(sl_model *m, int li, const float *x, float *dx, bool acc, int B) {
    sl_backend *bk = m->bk;
    layer *l = &m->L[li];
    const float *P = m->params;
    float *G = m->grads;
    const float *dy = l->dout;
    size_t nout = (size_t)B * l->out_size, nin = (size_t)B * l->in_size;
    sl_status s = SL_OK;
    switch (l->kind) {
    case SL_LAYER_INPUT:
    case SL_LAYER_FLATTEN:
        break;
    case SL_LAYER_CONV2D:
        s = conv_backward(m, l, x, dx, acc, B);
        break;
    case SL_LAYER_GLOBAL_AVGPOOL:
        if (!dx) break;
        if (!acc) s = sl__be_fill(bk, dx, 0.0f, nin);
        if (!s) s = sl__be_global_avgpool_backward(bk, dy, B, l->hw, l->c, dx);
        break;
    case SL_LAYER_ADD:
    case SL_LAYER_CONCAT:
        break; /* join_backward */
    case SL_LAYER_DENSE: {
        const float *dpre = dy;
        if (l->act != SL_ACT_NONE) {
            s = sl__be_act_backward_set(bk, l->act, l->out, dy, m->scratch_a, nout);
            dpre = m->scratch_a;
        }
        int K = (int)l->in_size, N = (int)l->nb;
        if (!s) s = sl__be_bias_grad(bk, G + l->b_off, dpre, (size_t)B, (size_t)N);
        if (!s) s = sl__be_gemm(bk, true, false, K, N, B, 1.0f, x, K, dpre, N, 1.0f, G + l->w_off, N);
        if (!s && dx)
            s = sl__be_gemm(bk, false, true, B, K, N, 1.0f, dpre, N, P + l->w_off, N, acc ? 1.0f : 0.0f, dx, K);
        break;
    }
    case SL_LAYER_MAXPOOL:
        if (!dx) break;
        if (l->relu_pool) { /* also the conv's ReLU gradient (the conv's dout_pre), x its ReLU output */
            s = sl__be_maxpool_relu_backward_set(bk, dy, l->out, x, l->argmax, B, l->h, l->w, l->c, l->kh, l->stride,
                                                 l->pt, l->pl, l->oh, l->ow, dx, m->scratch_a);
            break;
        }
        if (!acc) s = sl__be_fill(bk, dx, 0.0f, nin);
        if (!s)
            s = sl__be_maxpool_backward(bk, dy, l->argmax, B, l->h, l->w, l->c, l->kh, l->stride, l->pt, l->pl, l->oh,
                                        l->ow, dx);
        break;
    case SL_LAYER_AVGPOOL:
        if (!dx) break;
        if (!acc) s = sl__be_fill(bk, dx, 0.0f, nin);
        if (!s)
            s = sl__be_avgpool_backward(bk, dy, B, l->h, l->w, l->c, l->kh, l->stride, l->pt, l->pl, l->oh, l->ow, dx);
        break;
    case SL_LAYER_DROPOUT:
        if (!dx) break;
        if (l->rate > 0.0f) {
            if (!acc) s = sl__be_fill(bk, dx, 0.0f, nin);
            if (!s) s = sl__be_dropout_backward(bk, dy, l->mask, dx, nin);
        } else {
            s = acc ? sl__be_axpy(bk, nin, 1.0f, dy, dx) : sl__be_copy(bk, dx, dy, nin * sizeof(float));
        }
        break;
    case SL_LAYER_BATCHNORM: {
        float *dxx = dx ? dx : m->scratch_a; /* gamma/beta gradients need the pass anyway */
        if (!dx || !acc) s = sl__be_fill(bk, dxx, 0.0f, nin);
        if (!s)
            s = sl__be_batchnorm_backward(bk, x, dy, (size_t)B * (l->out_size / (size_t)l->c), l->c, P + l->w_off,
                                          l->save_mean, l->save_invstd, dxx, G + l->w_off, G + l->b_off);
        break;
    }
    case SL_LAYER_RELU:
    case SL_LAYER_TANH:
    case SL_LAYER_SIGMOID:
        if (!dx) break;
        if (!acc) s = sl__be_act_backward_set(bk, l->act, l->out, dy, dx, nin);
        else s = sl__be_act_backward(bk, l->act, l->out, dy, dx, nin);
        break;
    }
    return s;
}

static sl_status backward(sl_model *m, const float *x, int B) {
    /* Resolve flatten's gradient buffer: it shares the one of its input. */
    for (int li = 0; li < m->nl; li++) {
        layer *l = &m->L[li];
        if (l->kind == SL_LAYER_FLATTEN)
            l->dout = l->src[0] < 0 ? (m->want_in_grad ? m->in_grad : NULL) : m->L[l->src[0]].dout;
    }
    for (int li = m->nl - 1; li >= 0; li--) {
        layer *l = &m->L[li];
        if (l->kind == SL_LAYER_FLATTEN) continue;
        float *dx[SL_MODEL_MAX_INPUTS];
        for (int k = 0; k < l->nin; k++) {
            int sk = l->src[k];
            bool need = m->want_in_grad || (sk >= 0 && m->L[sk].needs_grad);
            dx[k] = !need ? NULL : sk < 0 ? m->in_grad : m->L[sk].dout;
        }
        const float *in = l->src[0] < 0 ? x : m->L[l->src[0]].out;
        sl_status s = l->nin > 1 ? join_backward(m, l, dx, B) : backward_layer(m, li, in, dx[0], l->acc[0], B);
        if (s) return s;
        if (l->has_params && m->ready_fn && (s = m->ready_fn(m->ready_ctx, l->w_off))) return s;
    }
    return SL_OK;
}

void sl__model_on_grads_ready(sl_model *m, sl__grads_ready_fn fn, void *ctx) {
    m->ready_fn = fn;
    m->ready_ctx = ctx;
}

int sl__model_grad_layers(const sl_model *m, size_t *lo, int cap) {
    int k = 0;
    for (int li = 0; li < m->nl; li++) {
        if (!m->L[li].has_params) continue;
        if (k < cap) lo[k] = m->L[li].w_off;
        k++;
    }
    return k;
}

static sl_status check_inputs(sl_model *m, const sl_tensor *x, const sl_tensor *labels, const char *what) {
    char got[128], want[96];
    size_t o = (size_t)snprintf(want, sizeof want, "float32[B");
    for (int i = 0; i < m->in_rank; i++) o += (size_t)snprintf(want + o, sizeof want - o, ",%lld", (long long)m->in_shape[i]);
    snprintf(want + o, sizeof want - o, "]");
    bool ok = x && x->dtype == SL_DT_F32 && x->rank == m->in_rank + 1 && x->data;
    for (int i = 0; ok && i < m->in_rank; i++) ok = x->dims[i + 1] == m->in_shape[i];
    if (!ok) {
        sl_err(SL_EINVAL, "%s: input is %s, the model expects %s", what, x ? sl_tensor_describe(x, got, sizeof got) : "NULL", want);
        if (x && x->dtype != SL_DT_F32) sl_err_hint("convert the images to float32 in the pipeline, e.g. `| scale(image, 1/255)`");
        return SL_EINVAL;
    }
    int64_t B = x->dims[0];
    if (B <= 0 || B > m->opts.max_batch)
        return sl_err(SL_EINVAL, "%s: batch of %lld examples, the model was built for 1..%d (max_batch)", what, (long long)B, m->opts.max_batch);
    if (!labels || (labels->dtype != SL_DT_I64 && labels->dtype != SL_DT_I32) || labels->rank != 1 ||
        labels->dims[0] != B || !labels->data) {
        sl_err(SL_EINVAL, "%s: labels are %s, expected int64[%lld] or int32[%lld]", what,
               labels ? sl_tensor_describe(labels, got, sizeof got) : "NULL", (long long)B, (long long)B);
        return SL_EINVAL;
    }
    return SL_OK;
}

/* Labels to int32 in dst, checking the range here where the example index is known. */
static sl_status convert_labels(sl_model *m, const sl_tensor *labels, int32_t *dst, const char *what) {
    int64_t B = labels->dims[0];
    for (int64_t i = 0; i < B; i++) {
        int64_t v = labels->dtype == SL_DT_I64 ? ((const int64_t *)labels->data)[i] : ((const int32_t *)labels->data)[i];
        if (v < 0 || v >= m->classes)
            return sl_err(SL_ERANGE, "%s: label %lld of example %lld is outside 0..%d", what, (long long)v, (long long)i, m->classes - 1);
        dst[i] = (int32_t)v;
    }
    return SL_OK;
}

static sl_status stage(sl_model *m, const sl_tensor *x, const sl_tensor *labels, const char *what, sl_staged *out) {
    out->slot = -1;
    out->id = 0;
    sl_status s = check_inputs(m, x, labels, what);
    if (s) return s;
    int k = m->next_slot;
    int64_t B = x->dims[0];
    m->slot_id[k] = 0; /* until it holds the new batch */
    if (m->is_cpu) {
        if (labels->dtype == SL_DT_I32) {
            for (int64_t i = 0; i < B; i++) {
                int32_t v = ((const int32_t *)labels->data)[i];
                if (v < 0 || v >= m->classes)
                    return sl_err(SL_ERANGE, "%s: label %d of example %lld is outside 0..%d", what, (int)v,
                                  (long long)i, m->classes - 1);
            }
            m->slot_y[k] = labels->data;
        } else {
            if ((s = convert_labels(m, labels, m->slot_labels[k], what))) return s;
            m->slot_y[k] = m->slot_labels[k];
        }
        m->slot_x[k] = x->data;
    } else {
        size_t xb = (size_t)B * m->in_size * sizeof(float);
        char *st = m->stage[k];
        /* the host buffer once this slot's last copies have read it; the copies below wait
         * (on the device) for the step that last read the slot */
        if ((s = sl__be_stage_begin(m->bk, k))) return s;
        if ((s = convert_labels(m, labels, (int32_t *)(void *)(st + xb), what))) return s;
        memcpy(st, x->data, xb);
        if ((s = sl__be_to_device_async(m->bk, m->x_dev[k], st, xb)) ||
            (s = sl__be_to_device_async(m->bk, m->y_dev[k], st + xb, (size_t)B * sizeof(int32_t))) ||
            (s = sl__be_stage_end(m->bk, k)))
            return s;
        m->slot_x[k] = m->x_dev[k];
        m->slot_y[k] = m->y_dev[k];
    }
    m->slot_b[k] = B;
    m->slot_id[k] = ++m->nstaged;
    m->next_slot = (k + 1) % NSLOTS;
    out->slot = k;
    out->id = m->slot_id[k];
    return SL_OK;
}

sl_status sl_model_stage(sl_model *m, const sl_tensor *x, const sl_tensor *labels, sl_staged *out) {
    return stage(m, x, labels, "stage", out);
}

/* The staged batch of handle st, after the step's wait for its copy. */
static sl_status take_staged(sl_model *m, const sl_staged *st, const char *what, const float **xd,
                             const int32_t **yd, int *B) {
    if (!st || st->slot < 0 || st->slot >= NSLOTS || st->id == 0 || m->slot_id[st->slot] != st->id) {
        sl_err(SL_ESTATE, "%s: staged batch %llu (slot %d) is %s", what, st ? (unsigned long long)st->id : 0ull,
               st ? st->slot : -1,
               st && st->id && st->id < m->nstaged && st->slot >= 0 && st->slot < NSLOTS ? "gone: its slot was refilled"
                                                                                         : "not a staged batch");
        sl_err_hint("a handle stays good until %d more batches are staged; stage the batch again", NSLOTS - 1);
        return SL_ESTATE;
    }
    sl_status s = sl__be_stage_wait(m->bk, st->slot);
    if (s) return s;
    *xd = m->slot_x[st->slot];
    *yd = m->slot_y[st->slot];
    *B = (int)m->slot_b[st->slot];
    return SL_OK;
}

sl_status sl_model_train_staged(sl_model *m, const sl_staged *st, float grad_scale, sl_step_result *res) {
    const float *xd;
    const int32_t *yd;
    int B;
    sl_status s = take_staged(m, st, "train step", &xd, &yd, &B);
    if (s) return s;
    layer *last = &m->L[m->nl - 1];
    double loss = 0.0;
    int64_t correct = 0, top5 = 0;
    if ((s = forward(m, xd, B, true))) return s;
    m->steps++;
    /* the loss comes back behind the step: wait for it once backward is queued */
    if ((s = sl__be_softmax_xent_start(m->bk, last->out, yd, B, m->classes, m->opts.label_smoothing,
                                       grad_scale / (float)B, last->dout)))
        return s;
    s = backward(m, xd, B);
    if (!s) s = sl__be_stage_release(m->bk, st->slot);
    sl_status r = sl__be_softmax_xent_result(m->bk, &loss, &correct, &top5); /* always: one start, one result */
    if (s) return s;
    if (r) return r;
    if (res) *res = (sl_step_result){.loss = loss / B, .correct = correct, .examples = B, .top5 = top5};
    return SL_OK;
}

sl_status sl_model_eval_staged(sl_model *m, const sl_staged *st, sl_step_result *res) {
    const float *xd;
    const int32_t *yd;
    int B;
    sl_status s = take_staged(m, st, "eval step", &xd, &yd, &B);
    if (s) return s;
    double loss = 0.0;
    int64_t correct = 0, top5 = 0;
    if ((s = forward(m, xd, B, false))) return s;
    if ((s = sl__be_softmax_xent_start(m->bk, m->L[m->nl - 1].out, yd, B, m->classes, m->opts.label_smoothing,
                                       0.0f, NULL)))
        return s;
    s = sl__be_stage_release(m->bk, st->slot);
    sl_status r = sl__be_softmax_xent_result(m->bk, &loss, &correct, &top5);
    if (s) return s;
    if (r) return r;
    if (res) *res = (sl_step_result){.loss = loss / B, .correct = correct, .examples = B, .top5 = top5};
    return SL_OK;
}

sl_status sl_model_train_step(sl_model *m, const sl_tensor *x, const sl_tensor *labels, float grad_scale,
                              sl_step_result *res) {
    sl_staged st;
    sl_status s = stage(m, x, labels, "train step", &st);
    return s ? s : sl_model_train_staged(m, &st, grad_scale, res);
}

sl_status sl_model_eval_step(sl_model *m, const sl_tensor *x, const sl_tensor *labels, sl_step_result *res) {
    sl_staged st;
    sl_status s = stage(m, x, labels, "eval step", &st);
    return s ? s : sl_model_eval_staged(m, &st, res);
}
