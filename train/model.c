/* Models on a backend: layer graphs (each layer reads the previous layer's output or named
 * earlier ones; ADD and CONCAT join branches), layer shapes, one allocation each for
 * parameters, gradients and activations, seeded initialisation, and the forward/backward
 * passes of a train or eval step (softmax cross-entropy at the end). The layers' shapes,
 * parameter offsets and gradient flow are planned in model_plan.c.
 *
 * Workload: small image/vector classifiers (Fashion-MNIST MLP and CNN) trained step after
 * step at a fixed max_batch; the model allocates nothing per step. Every activation has its
 * own buffer [max_batch, size] and its gradient another, except flatten, which is a view of
 * its input (and shares its gradient). Layers run in array order, which is a topological
 * order (inputs come from earlier layers only); backward runs in reverse, so every
 * consumer of an output has added its part before that output's layer runs. The first
 * consumer in backward order SETS the gradient of an input, later ones ADD to it (an
 * output used by several layers gets the sum), so no gradient buffer is zeroed per step;
 * an input gradient is computed only where a layer upstream has parameters, or for the
 * model input when asked (sl__model_input_grad). Convolutions run a few
 * images at a time on the CPU (see CONV_CHUNK_FLOATS), the chunks at once, each through its
 * thread's im2col buffer (conv_pass), the whole batch at once on a GPU, and backward
 * recomputes the im2col. Where the backend multiplies without im2col (conv_gemm,
 * conv_kernel_grad) it does, reading the windows in place, and a stride-1 conv's input
 * gradient is then the convolution of its output gradient with the kernel turned (no col2im).
 * Where the backend has the fused
 * ops, bias and activation are one pass, and a max pool whose windows tile the output of a
 * ReLU conv read by it alone writes that conv's gradient before the ReLU (layer.relu_pool):
 * the same floats, two fewer passes over the largest activations. Inputs go through
 * SL_MODEL_STAGE_SLOTS staging slots named by explicit handles (sl_model_stage). Dropout masks come from (seed, train steps taken, layer index).
 * Parameter layout: all trainable tensors first (layer order: kernel then bias, gamma then
 * beta), then batchnorm running statistics, which no optimizer touches. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/util.h"
#include "train/model_impl.h"

sl_model_opts sl_model_opts_default(void) {
    return (sl_model_opts){.backend = SL_BACKEND_AUTO, .threads = 0, .cuda_device = 0, .seed = 0, .max_batch = 128};
}

const char *sl_precision_name(sl_precision p) {
    switch (p) {
    case SL_PRECISION_FP32: return "fp32";
    case SL_PRECISION_BF16: return "bf16";
    case SL_PRECISION_FP16: return "fp16";
    }
    return NULL;
}

/* ---- portable seeded random numbers (host only) ------------------------------------- */

static double unif01(uint64_t *s) { /* (0, 1] */
    return ((double)(sl_splitmix64(s) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

static void init_tensor(float *dst, size_t n, uint64_t seed, int tensor_index, bool he, size_t fan_in,
                        size_t fan_out) {
    uint64_t s = seed ^ (0x5a17ce0000000000ull + (uint64_t)tensor_index * 0x100000001b3ull);
    sl_splitmix64(&s);
    if (he) {
        double sd = sqrt(2.0 / (double)fan_in);
        for (size_t i = 0; i < n; i += 2) {
            double u1 = unif01(&s), u2 = unif01(&s);
            double r = sqrt(-2.0 * log(u1));
            dst[i] = (float)(sd * r * cos(2.0 * M_PI * u2));
            if (i + 1 < n) dst[i + 1] = (float)(sd * r * sin(2.0 * M_PI * u2));
        }
    } else {
        double lim = sqrt(6.0 / (double)(fan_in + fan_out));
        for (size_t i = 0; i < n; i++) dst[i] = (float)((2.0 * unif01(&s) - 1.0) * lim);
    }
}


static bool relu_follows(const sl_layer_spec *s, int i, int n) {
    if (s[i].activation == 1) return true;
    for (int j = i + 1; j < n; j++) {
        if (s[j].ninputs != 0) return false; /* reads another layer: not this one's chain */
        if (s[j].kind == SL_LAYER_RELU) return true;
        if (s[j].kind != SL_LAYER_DROPOUT && s[j].kind != SL_LAYER_BATCHNORM) return false;
    }
    return false;
}



#define CONV_CHUNK_FLOATS ((size_t)1 << 20) /* CPU: 4 MiB of im2col per pass (stays in cache) */
#define CONV_CHUNK_FLOATS_GPU ((size_t)1 << 26) /* GPU: 256 MiB per pass (x2 with its gradient) */

/* Carve per-layer buffers out of one allocation: pass base NULL to count bytes. */
static size_t carve(sl_model *m, char *base) {
    size_t at = 0, B = (size_t)m->opts.max_batch;
#define TAKE(ptr, type, count)                                    \
    do {                                                          \
        size_t bytes_ = ((size_t)(count) * sizeof(type) + 63) & ~(size_t)63; \
        if (base) (ptr) = (type *)(void *)(base + at);            \
        at += bytes_;                                             \
    } while (0)
    size_t sa = 0, sb = 0;
    for (int i = 0; i < m->nl; i++) {
        layer *l = &m->L[i];
        if (l->kind != SL_LAYER_FLATTEN) {
            TAKE(l->out, float, B * l->out_size);
            TAKE(l->dout, float, B * l->out_size);
        }
        if (B * l->out_size > sa) sa = B * l->out_size;
        switch (l->kind) {
        case SL_LAYER_CONV2D: {
            /* On the CPU convolutions run a few images at a time so that the im2col matrix
             * (kh*kw times the input) stays in cache between im2col, the GEMM and col2im
             * instead of streaming tens of MB through memory; on a GPU the whole batch (or
             * chunks of 256 MiB) goes through each kernel at once, since there launches
             * cost more than memory traffic. Backward recomputes it. */
            l->direct = l->kh == 1 && l->kw == 1 && l->stride == 1 && l->pt == 0 && l->pl == 0;
            size_t row_floats = (size_t)l->kh * l->kw * l->c, img_rows = (size_t)l->oh * l->ow;
            size_t imgs = (m->is_cpu ? CONV_CHUNK_FLOATS : CONV_CHUNK_FLOATS_GPU) / (row_floats * img_rows);
            if (imgs < 1) imgs = 1;
            if (imgs > B) imgs = B;
            l->chunk = (int)imgs;
            size_t ncol = imgs * img_rows * row_floats;
            if (!l->direct && ncol > sb) sb = ncol;
            break;
        }
        case SL_LAYER_MAXPOOL: TAKE(l->argmax, int32_t, B * l->out_size); break;
        case SL_LAYER_DROPOUT: TAKE(l->mask, float, B * l->out_size); break;
        case SL_LAYER_BATCHNORM:
            TAKE(l->save_mean, float, l->c);
            TAKE(l->save_invstd, float, l->c);
            break;
        default: break;
        }
    }
    /* The chunks of a convolution run at once on up to m->slots threads (conv_pass_run), each
     * with its own col and dcol (no more than the most chunks a layer has), and backward
     * gives each chunk its kernel and bias gradients (sw floats for the layer that needs most). */
    size_t sw = 0;
    const sl_backend_ops *ops = m->bk->ops;
    m->slots = 1;
    for (int i = 0; ops->run_tasks && i < m->nl; i++) {
        const layer *l = &m->L[i];
        size_t chunks = l->kind == SL_LAYER_CONV2D ? (B + (size_t)l->chunk - 1) / (size_t)l->chunk : 0;
        if (chunks > 1 && chunks * (l->nw + l->nb) > sw) sw = chunks * (l->nw + l->nb);
        int at_once = chunks < (size_t)ops->task_slots(m->bk) ? (int)chunks : ops->task_slots(m->bk);
        if (at_once > m->slots) m->slots = at_once;
    }
    size_t sr = 0; /* a stride-1 conv's kernel turned, for its input gradient as a convolution */
    for (int i = 0; ops->conv_gemm && i < m->nl; i++) {
        const layer *l = &m->L[i];
        if (l->kind == SL_LAYER_CONV2D && !l->direct && l->stride == 1 && l->nw > sr) sr = l->nw;
    }
    m->col_floats = sb;
    TAKE(m->scratch_a, float, sa);
    TAKE(m->col, float, sb * (size_t)m->slots);
    TAKE(m->dcol, float, sb * (size_t)m->slots);
    TAKE(m->wpart, float, sw);
    TAKE(m->wrot, float, sr);
#undef TAKE
    return at;
}

/* backend auto: the GPU when there is one and it opens; no GPU (SL_EUNSUPPORTED) is
 * silent, a GPU that fails to open (busy in exclusive-process mode, out of memory, a bad
 * device number) is kept in m->fallback for the caller to warn about. */
static sl_status make_backend(sl_model *m, const sl_model_opts *o, sl_backend **out) {
    switch (o->backend) {
    case SL_BACKEND_CPU: return sl__backend_cpu_new(o->threads, out);
    case SL_BACKEND_CUDA: return sl__backend_cuda_new(o->cuda_device, out);
    case SL_BACKEND_AUTO: {
        sl_status s = sl__backend_cuda_new(o->cuda_device, out);
        if (s == SL_OK || s == SL_ENOMEM) return s;
        if (s != SL_EUNSUPPORTED) {
            snprintf(m->fallback, sizeof m->fallback, "%s", sl_errmsg());
            m->fallback[strcspn(m->fallback, "\n")] = 0; /* without the hint */
        }
        sl_err_clear();
        return sl__backend_cpu_new(o->threads, out);
    }
    }
    return sl_err(SL_EINVAL, "model: unknown backend kind %d", (int)o->backend);
}

/* The memory plan (sluice/model.h, mem_limit): what the model will take in host memory,
 * against what the process can still take, before anything is allocated, so a model that
 * cannot fit is an error naming both sizes instead of a process the OOM killer ends. */
static sl_status plan_memory(const sl_model *m, const sl_model_opts *o, size_t pbytes, size_t abytes) {
    if (o->mem_limit < 0) return SL_OK;
    int64_t avail = o->mem_limit;
    char src[1200] = "mem_limit";
    if (avail == 0 && !sl_mem_available(&avail, src, sizeof src)) return SL_OK; /* nothing to plan against */
    double gbytes = (double)pbytes + SL__GRADS_SPARE * sizeof(float);
    double opt = (double)o->optimizer_floats * (double)m->n_train * sizeof(float);
    /* input staging: host buffers of whole batches on CUDA, the labels alone on the CPU */
    double stage = (double)NSLOTS * (double)o->max_batch * ((m->is_cpu ? 0.0 : (double)m->in_size * sizeof(float)) +
                                                            sizeof(int32_t));
    double need = m->is_cpu ? (double)pbytes + gbytes + opt + (double)abytes + stage : (double)pbytes + stage;
    if (need <= (double)avail) return SL_OK;
    char nb[32], ab[32], pb[32], gb[32], ob[32], actb[32];
    sl_mem_format(need, nb, sizeof nb);
    sl_mem_format((double)avail, ab, sizeof ab);
    sl_mem_format((double)pbytes, pb, sizeof pb);
    if (m->is_cpu) {
        sl_mem_format(gbytes, gb, sizeof gb);
        sl_mem_format(opt, ob, sizeof ob);
        sl_mem_format((double)abytes, actb, sizeof actb);
        sl_err(SL_ENOMEM, "model: needs %s of memory (%zu parameters: %s, gradients %s, optimizer state %s, "
               "activations at batch %d %s), more than the %s this process can still take (%s)",
               nb, m->n_params, pb, gb, ob, o->max_batch, actb, ab, src);
    } else {
        sl_err(SL_ENOMEM, "model: needs %s of host memory (initial values of %zu parameters: %s, input staging), "
               "more than the %s this process can still take (%s)", nb, m->n_params, pb, ab, src);
    }
    const layer *big = NULL;
    for (int i = 0; i < m->nl; i++)
        if (!big || m->L[i].nw + m->L[i].nb > big->nw + big->nb) big = &m->L[i];
    if (big && big->nw + big->nb > 0)
        sl_err_hint("the largest layer is %s with %zu parameters: make it smaller, or the batch%s", big->name,
                    big->nw + big->nb, m->is_cpu ? "; or train on a machine (or cgroup) with more memory" : "");
    else
        sl_err_hint("use a smaller batch or model");
    return SL_ENOMEM;
}

sl_status sl_model_create(const sl_layer_spec *specs, int n, const sl_model_opts *opts, sl_model **out) {
    *out = NULL;
    sl_model_opts o = opts ? *opts : sl_model_opts_default();
    if (o.max_batch <= 0) return sl_err(SL_EINVAL, "model: max_batch %d must be > 0", o.max_batch);
    if (o.threads < 0) return sl_err(SL_EINVAL, "model: threads %d must be >= 0 (0: all cores)", o.threads);
    if (!(o.label_smoothing >= 0.0f && o.label_smoothing < 1.0f))
        return sl_err(SL_EINVAL, "model: label_smoothing %g must be in [0, 1)", o.label_smoothing);
    if (!sl_precision_name(o.precision))
        return sl_err(SL_EINVAL, "model: unknown precision %d (SL_PRECISION_FP32, _BF16 or _FP16)", (int)o.precision);
    sl_model *m = calloc(1, sizeof *m);
    if (!m) return sl_err(SL_ENOMEM, "model: out of memory");
    m->opts = o;
    sl_status s = sl__model_plan(m, specs, n);
    if (s) goto fail;
    s = make_backend(m, &o, &m->bk);
    if (s) goto fail;
    m->is_cpu = strcmp(m->bk->ops->name, "cpu") == 0;
    const sl_backend_ops *ops = m->bk->ops;
    if (o.precision != SL_PRECISION_FP32 &&
        (s = ops->set_precision(m->bk, o.precision == SL_PRECISION_BF16 ? SL_BK_BF16 : SL_BK_FP16)))
        goto fail;
    size_t pbytes = m->n_params * sizeof(float);
    if ((s = plan_memory(m, &o, pbytes, carve(m, NULL)))) goto fail;
    if ((s = ops->alloc(m->bk, pbytes, (void **)&m->params)) ||
        (s = ops->alloc(m->bk, pbytes + SL__GRADS_SPARE * sizeof(float), (void **)&m->grads)))
        goto fail;
    size_t abytes = carve(m, NULL);
    if ((s = ops->alloc(m->bk, abytes, &m->act_mem))) goto fail;
    carve(m, m->act_mem);
    /* Initialise on the host so every backend starts from the same numbers (the CPU
     * backend's parameters are host memory, zero-filled: written in place, no second copy). */
    float *host = m->is_cpu ? m->params : calloc(m->n_params ? m->n_params : 1, sizeof(float));
    if (!host) {
        s = sl_err(SL_ENOMEM, "model: out of memory for %zu parameters", m->n_params);
        goto fail;
    }
    int ti = 0;
    for (int i = 0; i < m->nl; i++) {
        layer *l = &m->L[i];
        if (l->kind == SL_LAYER_DENSE || l->kind == SL_LAYER_CONV2D) {
            size_t fan_in = l->kind == SL_LAYER_DENSE ? l->in_size : (size_t)l->kh * l->kw * l->c;
            size_t fan_out = l->kind == SL_LAYER_DENSE ? l->nb : (size_t)l->kh * l->kw * l->oc;
            init_tensor(host + l->w_off, l->nw, o.seed, ti, relu_follows(specs, i + 1, n), fan_in, fan_out);
            ti += 2;
        } else if (l->kind == SL_LAYER_BATCHNORM) {
            for (int j = 0; j < l->c; j++) {
                host[l->w_off + j] = 1.0f;
                host[l->rv_off + j] = 1.0f;
            }
            ti += 4;
        }
    }
    if (!m->is_cpu) {
        s = ops->to_device(m->bk, m->params, host, pbytes);
        free(host);
        if (s) goto fail;
    }
    if (!m->is_cpu) {
        for (int k = 0; k < NSLOTS; k++) {
            if ((s = ops->alloc(m->bk, (size_t)o.max_batch * m->in_size * sizeof(float), (void **)&m->x_dev[k])) ||
                (s = ops->alloc(m->bk, (size_t)o.max_batch * sizeof(int32_t), (void **)&m->y_dev[k])))
                goto fail;
        }
        for (int k = 0; k < NSLOTS; k++)
            if ((s = ops->host_alloc(m->bk, (size_t)o.max_batch * (m->in_size * sizeof(float) + sizeof(int32_t)), &m->stage[k])))
                goto fail;
    } else {
        for (int k = 0; k < NSLOTS; k++)
            if (!(m->slot_labels[k] = malloc((size_t)o.max_batch * sizeof(int32_t)))) {
                s = sl_err(SL_ENOMEM, "model: out of memory");
                goto fail;
            }
    }
    if ((s = ops->sync(m->bk))) goto fail;
    *out = m;
    return SL_OK;
fail:
    sl_model_free(m);
    return s;
}

void sl_model_free(sl_model *m) {
    if (!m) return;
    if (m->bk) {
        const sl_backend_ops *ops = m->bk->ops;
        ops->sync(m->bk);
        ops->free(m->bk, m->params);
        ops->free(m->bk, m->grads);
        ops->free(m->bk, m->act_mem);
        ops->free(m->bk, m->in_grad);
        for (int k = 0; k < NSLOTS; k++) {
            ops->free(m->bk, m->x_dev[k]);
            ops->free(m->bk, m->y_dev[k]);
        }
        for (int k = 0; k < NSLOTS; k++)
            if (m->stage[k]) ops->host_free(m->bk, m->stage[k]);
        sl__backend_free(m->bk);
    }
    for (int k = 0; k < NSLOTS; k++) free(m->slot_labels[k]);
    free(m->L);
    free(m->pv);
    free(m);
}

const char *sl_model_backend_name(const sl_model *m) { return m->bk->ops->name; }

sl_backend *sl__model_backend(sl_model *m) { return m->bk; }

uint64_t sl__model_launches(sl_model *m) { return m->bk->ops->launches(m->bk); }

const char *sl__model_fallback(const sl_model *m) { return m->fallback[0] ? m->fallback : NULL; }

size_t sl__model_trainable(const sl_model *m) { return m->n_train; }

int sl_model_classes(const sl_model *m) { return m->classes; }

uint64_t sl__model_steps(const sl_model *m) { return m->steps; }

void sl__model_set_steps(sl_model *m, uint64_t steps) { m->steps = steps; }

const float *sl__model_input_grad(sl_model *m, bool on) {
    m->want_in_grad = on;
    if (!on) return NULL;
    if (!m->in_grad &&
        m->bk->ops->alloc(m->bk, (size_t)m->opts.max_batch * m->in_size * sizeof(float), (void **)&m->in_grad)) {
        m->want_in_grad = false;
        return NULL;
    }
    return m->in_grad;
}

/* ---- steps ---------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t a, uint64_t b) {
    uint64_t s = a ^ (b * 0xd1342543de82ef95ull);
    return sl_splitmix64(&s);
}

/* dx = dy through the activation's derivative (from its output y), overwriting dx: the
 * backend's act_backward_set where it has one, else a fill with 0 and act_backward. */
static sl_status act_grad(sl_model *m, sl_act act, const float *y, const float *dy, float *dx, size_t n) {
    const sl_backend_ops *ops = m->bk->ops;
    if (ops->act_backward_set) return ops->act_backward_set(m->bk, act, y, dy, dx, n);
    sl_status s = ops->fill(m->bk, dx, 0.0f, n);
    return s ? s : ops->act_backward(m->bk, act, y, dy, dx, n);
}

/* y = act(y + bias) over rows x cols: the backend's bias_act where it has one, else
 * bias_add and act_forward (the same floats). */
static sl_status bias_act(sl_model *m, sl_act act, float *y, const float *bias, size_t rows, size_t cols) {
    const sl_backend_ops *ops = m->bk->ops;
    if (ops->bias_act) return ops->bias_act(m->bk, act, y, bias, rows, cols);
    sl_status s = ops->bias_add(m->bk, y, bias, rows, cols);
    return s || act == SL_ACT_NONE ? s : ops->act_forward(m->bk, act, y, y, rows * cols);
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
    const float *wrot; /* backward, stride 1, a backend with conv_gemm: the kernel turned (turn_kernel) */
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

/* *x = im2col of its nb images into col, unless conv l is 1x1 (its input is the matrix). */
static sl_status im2col_of(sl_model *m, const layer *l, const float **x, int nb, float *col) {
    if (l->direct) return SL_OK;
    sl_status s = m->bk->ops->im2col(m->bk, *x, nb, l->h, l->w, l->c, l->kh, l->kw, l->stride, l->pt, l->pl, l->oh,
                                     l->ow, col);
    if (!s) *x = col;
    return s;
}

/* The products of nb images of conv l at x with im2col's matrix: the backend's op without it
 * where it takes the geometry, else im2col into col (or x itself for a 1x1 conv) and gemm.
 * conv_product: y = x * W (set); kernel_grad: dW = beta * dW + x^T * dy. */
static sl_status conv_product(sl_model *m, const layer *l, const float *x, int nb, float *y, float *col) {
    const sl_backend_ops *ops = m->bk->ops;
    const float *W = m->params + l->w_off;
    const int K = l->kh * l->kw * l->c, rows = nb * l->oh * l->ow;
    if (!l->direct && ops->conv_gemm) {
        sl_status s = ops->conv_gemm(m->bk, x, nb, l->h, l->w, l->c, l->kh, l->kw, l->stride, l->pt, l->pl, l->oh,
                                     l->ow, W, l->oc, 0.0f, y, col, m->col_floats);
        if (s != SL_EUNSUPPORTED) return s;
    }
    sl_status s = im2col_of(m, l, &x, nb, col);
    if (s) return s;
    return ops->gemm(m->bk, false, false, rows, l->oc, K, 1.0f, x, K, W, l->oc, 0.0f, y, l->oc);
}

static sl_status kernel_grad(sl_model *m, const layer *l, const float *x, int nb, const float *dy, float beta,
                             float *dW, float *col) {
    const sl_backend_ops *ops = m->bk->ops;
    const int K = l->kh * l->kw * l->c, rows = nb * l->oh * l->ow;
    if (!l->direct && ops->conv_kernel_grad) {
        sl_status s = ops->conv_kernel_grad(m->bk, x, nb, l->h, l->w, l->c, l->kh, l->kw, l->stride, l->pt, l->pl,
                                            l->oh, l->ow, dy, l->oc, beta, dW, col, m->col_floats);
        if (s != SL_EUNSUPPORTED) return s;
    }
    sl_status s = im2col_of(m, l, &x, nb, col);
    if (s) return s;
    return ops->gemm(m->bk, true, false, K, l->oc, rows, 1.0f, x, K, dy, l->oc, beta, dW, l->oc);
}

static sl_status conv_fwd_chunk(void *vc, int t, int slot) {
    const conv_pass *c = vc;
    sl_model *m = c->m;
    const layer *l = c->l;
    const int ohw = l->oh * l->ow, i0 = t * l->chunk;
    const int nb = c->B - i0 < l->chunk ? c->B - i0 : l->chunk;
    const size_t in_img = (size_t)l->h * l->w * l->c, out_img = (size_t)ohw * l->oc;
    float *y = l->out + i0 * out_img;
    sl_status s = conv_product(m, l, c->x + i0 * in_img, nb, y, m->col + (size_t)slot * m->col_floats);
    if (!s) s = bias_act(m, l->act, y, m->params + l->b_off, (size_t)nb * ohw, (size_t)l->oc);
    return s;
}

/* A chunk's pre-activation gradient, its bias and kernel gradients (kernel_grad), and (when
 * wanted) its input gradient: a convolution with the kernel turned (stride 1, a backend with
 * conv_gemm that takes it), else through col2im. */
static sl_status conv_bwd_chunk(void *vc, int t, int slot) {
    const conv_pass *c = vc;
    sl_model *m = c->m;
    const layer *l = c->l;
    const sl_backend_ops *ops = m->bk->ops;
    sl_backend *bk = m->bk;
    const int K = l->kh * l->kw * l->c, ohw = l->oh * l->ow, N = l->oc, i0 = t * l->chunk;
    const int nb = c->B - i0 < l->chunk ? c->B - i0 : l->chunk, rows = nb * ohw;
    const size_t in_img = (size_t)l->h * l->w * l->c, out_img = (size_t)ohw * N;
    float *col = m->col + (size_t)slot * m->col_floats, *dcol = m->dcol + (size_t)slot * m->col_floats;
    float *dW = m->grads + l->w_off;
    float beta = 1.0f; /* the kernel gradient: added to, or set in the chunk's own part */
    sl_status s = SL_OK;
    if (c->parts) {
        dW = m->wpart + (size_t)t * (l->nw + l->nb);
        beta = 0.0f;
        s = ops->fill(bk, dW + l->nw, 0.0f, l->nb);
    }
    float *db = dW + l->nw; /* the bias follows the kernel (place_params) */
    const float *dpre = l->dout + i0 * out_img;
    if (!s && l->act != SL_ACT_NONE && !(l->dout_pre && ops->maxpool_relu_backward_set)) {
        float *d = m->scratch_a + i0 * out_img;
        s = act_grad(m, l->act, l->out + i0 * out_img, dpre, d, (size_t)nb * out_img);
        dpre = d;
    }
    if (!s) s = ops->bias_grad(bk, db, dpre, (size_t)rows, (size_t)N);
    if (!s) s = kernel_grad(m, l, c->x + i0 * in_img, nb, dpre, beta, dW, col);
    if (s || !c->dx) return s;
    float *dxc = c->dx + i0 * in_img;
    const float *W = m->params + l->w_off;
    if (l->direct) return ops->gemm(bk, false, true, rows, K, N, 1.0f, dpre, N, W, N, c->acc ? 1.0f : 0.0f, dxc, K);
    if (c->wrot) { /* stride 1: dx is the convolution of dpre (padded kh-1-pt, kw-1-pl) with the kernel turned */
        s = ops->conv_gemm(bk, dpre, nb, l->oh, l->ow, N, l->kh, l->kw, 1, l->kh - 1 - l->pt, l->kw - 1 - l->pl, l->h,
                           l->w, c->wrot, l->c, c->acc ? 1.0f : 0.0f, dxc, dcol, m->col_floats);
        if (s != SL_EUNSUPPORTED) return s;
    }
    s = ops->gemm(bk, false, true, rows, K, N, 1.0f, dpre, N, W, N, 0.0f, dcol, K);
    if (!s && !c->acc) s = ops->fill(bk, dxc, 0.0f, (size_t)nb * in_img);
    if (!s) s = ops->col2im(bk, dcol, nb, l->h, l->w, l->c, l->kh, l->kw, l->stride, l->pt, l->pl, l->oh, l->ow, dxc);
    return s;
}

static sl_status conv_pass_run(sl_model *m, conv_pass *c, bool backward) {
    const sl_backend_ops *ops = m->bk->ops;
    const layer *l = c->l;
    const int n = (c->B + l->chunk - 1) / l->chunk;
    sl_status (*fn)(void *, int, int) = backward ? conv_bwd_chunk : conv_fwd_chunk;
    sl_status s = SL_OK;
    if (backward && c->dx && !l->direct && l->stride == 1 && ops->conv_gemm && m->wrot) {
        turn_kernel(l, m->params + l->w_off, m->wrot);
        c->wrot = m->wrot;
    }
    if (!ops->run_tasks || n < 2) {
        for (int t = 0; t < n && !s; t++) s = fn(c, t, 0);
        return s;
    }
    c->parts = backward;
    s = ops->run_tasks(m->bk, n, m->slots, fn, c); /* one at a time where m->slots is 1: the same floats */
    for (int t = 0; backward && t < n && !s; t++)
        s = ops->axpy(m->bk, l->nw + l->nb, 1.0f, m->wpart + (size_t)t * (l->nw + l->nb), m->grads + l->w_off);
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
    const sl_backend_ops *ops = m->bk->ops;
    size_t nout = (size_t)B * l->out_size, C = last_dim(m, (int)(l - m->L)), off = 0;
    sl_status s = SL_OK;
    for (int k = 0; k < l->nin && !s; k++) {
        const float *in = l->src[k] < 0 ? x : m->L[l->src[k]].out;
        if (l->kind == SL_LAYER_ADD) {
            s = k == 0 ? ops->copy(m->bk, l->out, in, nout * sizeof(float)) : ops->axpy(m->bk, nout, 1.0f, in, l->out);
        } else {
            size_t ck = last_dim(m, l->src[k]);
            s = ops->copy_cols(m->bk, l->out + off, C, in, ck, nout / C, ck, false);
            off += ck;
        }
    }
    return s;
}

/* The gradients of a join's inputs from its output's: set, or added where acc says. */
static sl_status join_backward(sl_model *m, const layer *l, float *const *dx, int B) {
    const sl_backend_ops *ops = m->bk->ops;
    size_t nout = (size_t)B * l->out_size, C = last_dim(m, (int)(l - m->L)), off = 0;
    sl_status s = SL_OK;
    for (int k = 0; k < l->nin && !s; k++) {
        size_t ck = last_dim(m, l->src[k]);
        if (dx[k] && l->kind == SL_LAYER_ADD)
            s = l->acc[k] ? ops->axpy(m->bk, nout, 1.0f, l->dout, dx[k]) : ops->copy(m->bk, dx[k], l->dout, nout * sizeof(float));
        else if (dx[k])
            s = ops->copy_cols(m->bk, dx[k], ck, l->dout + off, C, nout / C, ck, l->acc[k]);
        off += ck;
    }
    return s;
}

static sl_status forward(sl_model *m, const float *x, int B, bool training) {
    const sl_backend_ops *ops = m->bk->ops;
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
            s = ops->global_avgpool_forward(bk, in, B, l->hw, l->c, l->out);
            break;
        case SL_LAYER_FLATTEN:
            l->out = (float *)in; /* a view: its gradient buffer is resolved in backward */
            break;
        case SL_LAYER_DENSE:
            s = ops->gemm(bk, false, false, B, (int)l->nb, (int)l->in_size, 1.0f, in, (int)l->in_size, P + l->w_off,
                          (int)l->nb, 0.0f, l->out, (int)l->nb);
            if (!s) s = bias_act(m, l->act, l->out, P + l->b_off, (size_t)B, l->nb);
            break;
        case SL_LAYER_CONV2D:
            s = conv_forward(m, l, in, B);
            break;
        case SL_LAYER_MAXPOOL:
            s = ops->maxpool_forward(bk, in, B, l->h, l->w, l->c, l->kh, l->stride, l->pt, l->pl, l->oh, l->ow, l->out, l->argmax);
            break;
        case SL_LAYER_AVGPOOL:
            s = ops->avgpool_forward(bk, in, B, l->h, l->w, l->c, l->kh, l->stride, l->pt, l->pl, l->oh, l->ow, l->out);
            break;
        case SL_LAYER_DROPOUT:
            if (training && l->rate > 0.0f)
                s = ops->dropout_forward(bk, in, l->out, l->mask, nout, l->rate,
                                         mix64(mix64(m->opts.seed, m->steps), (uint64_t)li + 1));
            else
                s = ops->copy(bk, l->out, in, nout * sizeof(float));
            break;
        case SL_LAYER_BATCHNORM:
            s = ops->batchnorm_forward(bk, in, l->out, (size_t)B * (l->out_size / (size_t)l->c), l->c, P + l->w_off,
                                       P + l->b_off, m->params + l->rm_off, m->params + l->rv_off, l->momentum,
                                       l->eps, training, l->save_mean, l->save_invstd);
            break;
        case SL_LAYER_RELU:
        case SL_LAYER_TANH:
        case SL_LAYER_SIGMOID:
            s = ops->act_forward(bk, l->act, in, l->out, nout);
            break;
        }
    }
    return s;
}

/* dy is L[li].dout (already holding dLoss/dout); sets dx, or adds to it when acc (NULL: not
 * needed). */
static sl_status backward_layer(sl_model *m, int li, const float *x, float *dx, bool acc, int B) {
    const sl_backend_ops *ops = m->bk->ops;
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
        if (!acc) s = ops->fill(bk, dx, 0.0f, nin);
        if (!s) s = ops->global_avgpool_backward(bk, dy, B, l->hw, l->c, dx);
        break;
    case SL_LAYER_ADD:
    case SL_LAYER_CONCAT:
        break; /* join_backward */
    case SL_LAYER_DENSE: {
        const float *dpre = dy;
        if (l->act != SL_ACT_NONE) {
            s = act_grad(m, l->act, l->out, dy, m->scratch_a, nout);
            dpre = m->scratch_a;
        }
        int K = (int)l->in_size, N = (int)l->nb;
        if (!s) s = ops->bias_grad(bk, G + l->b_off, dpre, (size_t)B, (size_t)N);
        if (!s) s = ops->gemm(bk, true, false, K, N, B, 1.0f, x, K, dpre, N, 1.0f, G + l->w_off, N);
        if (!s && dx) s = ops->gemm(bk, false, true, B, K, N, 1.0f, dpre, N, P + l->w_off, N, acc ? 1.0f : 0.0f, dx, K);
        break;
    }
    case SL_LAYER_MAXPOOL:
        if (!dx) break;
        if (l->relu_pool && ops->maxpool_relu_backward_set) { /* also the conv's ReLU gradient */
            s = ops->maxpool_relu_backward_set(bk, dy, l->out, l->argmax, B, l->h, l->w, l->c, l->kh, l->stride,
                                               l->pt, l->pl, l->oh, l->ow, dx);
            break;
        }
        if (!acc) s = ops->fill(bk, dx, 0.0f, nin);
        if (!s) s = ops->maxpool_backward(bk, dy, l->argmax, B, l->h, l->w, l->c, l->kh, l->stride, l->pt, l->pl, l->oh,
                                          l->ow, dx);
        break;
    case SL_LAYER_AVGPOOL:
        if (!dx) break;
        if (!acc) s = ops->fill(bk, dx, 0.0f, nin);
        if (!s) s = ops->avgpool_backward(bk, dy, B, l->h, l->w, l->c, l->kh, l->stride, l->pt, l->pl, l->oh, l->ow, dx);
        break;
    case SL_LAYER_DROPOUT:
        if (!dx) break;
        if (l->rate > 0.0f) {
            if (!acc) s = ops->fill(bk, dx, 0.0f, nin);
            if (!s) s = ops->dropout_backward(bk, dy, l->mask, dx, nin);
        } else {
            s = acc ? ops->axpy(bk, nin, 1.0f, dy, dx) : ops->copy(bk, dx, dy, nin * sizeof(float));
        }
        break;
    case SL_LAYER_BATCHNORM: {
        float *dxx = dx ? dx : m->scratch_a; /* gamma/beta gradients need the pass anyway */
        if (!dx || !acc) s = ops->fill(bk, dxx, 0.0f, nin);
        if (!s) s = ops->batchnorm_backward(bk, x, dy, (size_t)B * (l->out_size / (size_t)l->c), l->c, P + l->w_off,
                                            l->save_mean, l->save_invstd, dxx, G + l->w_off, G + l->b_off);
        break;
    }
    case SL_LAYER_RELU:
    case SL_LAYER_TANH:
    case SL_LAYER_SIGMOID:
        if (!dx) break;
        if (!acc) s = act_grad(m, l->act, l->out, dy, dx, nin);
        else s = ops->act_backward(bk, l->act, l->out, dy, dx, nin);
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
    const sl_backend_ops *ops = m->bk->ops;
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
        if ((s = ops->stage_begin(m->bk, k))) return s;
        if ((s = convert_labels(m, labels, (int32_t *)(void *)(st + xb), what))) return s;
        memcpy(st, x->data, xb);
        if ((s = ops->to_device_async(m->bk, m->x_dev[k], st, xb)) ||
            (s = ops->to_device_async(m->bk, m->y_dev[k], st + xb, (size_t)B * sizeof(int32_t))) ||
            (s = ops->stage_end(m->bk, k)))
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
    sl_status s = m->bk->ops->stage_wait(m->bk, st->slot);
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
    const sl_backend_ops *ops = m->bk->ops;
    layer *last = &m->L[m->nl - 1];
    double loss = 0.0;
    int64_t correct = 0, top5 = 0;
    if ((s = forward(m, xd, B, true))) return s;
    m->steps++;
    /* the loss comes back behind the step: wait for it once backward is queued */
    if ((s = ops->softmax_xent_start(m->bk, last->out, yd, B, m->classes, m->opts.label_smoothing,
                                     grad_scale / (float)B, last->dout)))
        return s;
    s = backward(m, xd, B);
    if (!s) s = ops->stage_release(m->bk, st->slot);
    sl_status r = ops->softmax_xent_result(m->bk, &loss, &correct, &top5); /* always: one start, one result */
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
    const sl_backend_ops *ops = m->bk->ops;
    double loss = 0.0;
    int64_t correct = 0, top5 = 0;
    if ((s = forward(m, xd, B, false))) return s;
    if ((s = ops->softmax_xent_start(m->bk, m->L[m->nl - 1].out, yd, B, m->classes, m->opts.label_smoothing, 0.0f,
                                     NULL)))
        return s;
    s = ops->stage_release(m->bk, st->slot);
    sl_status r = ops->softmax_xent_result(m->bk, &loss, &correct, &top5);
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

sl_status sl_model_zero_grads(sl_model *m) { return m->bk->ops->fill(m->bk, m->grads, 0.0f, m->n_params); }

float *sl_model_params(sl_model *m, size_t *n) {
    if (n) *n = m->n_params;
    return m->params;
}

float *sl_model_grads(sl_model *m, size_t *n) {
    if (n) *n = m->n_params;
    return m->grads;
}

sl_status sl_model_get_params(sl_model *m, float *host, size_t n) {
    if (n != m->n_params) return sl_err(SL_EINVAL, "model: get_params for %zu floats, the model has %zu", n, m->n_params);
    return m->bk->ops->to_host(m->bk, host, m->params, n * sizeof(float));
}

sl_status sl_model_set_params(sl_model *m, const float *host, size_t n) {
    if (n != m->n_params) return sl_err(SL_EINVAL, "model: set_params with %zu floats, the model has %zu", n, m->n_params);
    sl_status s = m->bk->ops->to_device(m->bk, m->params, host, n * sizeof(float));
    return s ? s : m->bk->ops->sync(m->bk);
}

int sl_model_param_count(const sl_model *m) { return m->npv; }

sl_status sl_model_param_info(const sl_model *m, int i, const char **name, size_t *offset, int *rank, int64_t dims[4]) {
    if (i < 0 || i >= m->npv) return sl_err(SL_ERANGE, "model: parameter index %d outside 0..%d", i, m->npv - 1);
    const pview *v = &m->pv[i];
    if (name) *name = v->name;
    if (offset) *offset = v->off;
    if (rank) *rank = v->rank;
    if (dims)
        for (int k = 0; k < 4; k++) dims[k] = v->dims[k];
    return SL_OK;
}
