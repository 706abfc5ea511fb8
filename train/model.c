/* Models on a backend: layer graphs (each layer reads the previous layer's output or named
 * earlier ones; ADD and CONCAT join branches), one allocation each for parameters, gradients
 * and activations, seeded initialisation, the memory plan, and the accessors. The layers'
 * shapes, parameter offsets and gradient flow are planned in model_plan.c; the train and eval
 * steps run in model_step.c.
 *
 * Workload: small image/vector classifiers (Fashion-MNIST MLP and CNN) trained step after
 * step at a fixed max_batch; the model allocates nothing per step. Every activation has its
 * own buffer [max_batch, size] and its gradient another, except flatten, which is a view of
 * its input (and shares its gradient). Convolutions run a few images at a time on the CPU
 * (see CONV_CHUNK_FLOATS), each chunk through its thread's im2col buffer, and the whole batch
 * at once on a GPU. Inputs go through SL_MODEL_STAGE_SLOTS staging slots named by explicit
 * handles (sl_model_stage). Every backend op goes through the wrappers of train/backend.h.
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
    m->slots = 1;
    const bool tasks = sl__be_has_tasks(m->bk);
    const int task_slots = tasks ? sl__be_task_slots(m->bk) : 1;
    for (int i = 0; tasks && i < m->nl; i++) {
        const layer *l = &m->L[i];
        size_t chunks = l->kind == SL_LAYER_CONV2D ? (B + (size_t)l->chunk - 1) / (size_t)l->chunk : 0;
        if (chunks > 1 && chunks * (l->nw + l->nb) > sw) sw = chunks * (l->nw + l->nb);
        int at_once = chunks < (size_t)task_slots ? (int)chunks : task_slots;
        if (at_once > m->slots) m->slots = at_once;
    }
    size_t sr = 0; /* a stride-1 conv's kernel turned, for its input gradient as a convolution */
    for (int i = 0; sl__be_turns_kernels(m->bk) && i < m->nl; i++) {
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
    case SL_BACKEND_CPU: return sl__backend_cpu_new_gemm(o->threads, o->cpu_gemm, out);
    case SL_BACKEND_CUDA: return sl__backend_cuda_new(o->cuda_device, out);
    case SL_BACKEND_AUTO: {
        sl_status s = sl__backend_cuda_new(o->cuda_device, out);
        if (s == SL_OK || s == SL_ENOMEM) return s;
        if (s != SL_EUNSUPPORTED) {
            snprintf(m->fallback, sizeof m->fallback, "%s", sl_errmsg());
            m->fallback[strcspn(m->fallback, "\n")] = 0; /* without the hint */
        }
        sl_err_clear();
        return sl__backend_cpu_new_gemm(o->threads, o->cpu_gemm, out);
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

static sl_status check_opts(const sl_model_opts *o) {
    if (o->max_batch <= 0) return sl_err(SL_EINVAL, "model: max_batch %d must be > 0", o->max_batch);
    if (o->threads < 0) return sl_err(SL_EINVAL, "model: threads %d must be >= 0 (0: all cores)", o->threads);
    if (!(o->label_smoothing >= 0.0f && o->label_smoothing < 1.0f))
        return sl_err(SL_EINVAL, "model: label_smoothing %g must be in [0, 1)", o->label_smoothing);
    if (!sl_precision_name(o->precision))
        return sl_err(SL_EINVAL, "model: unknown precision %d (SL_PRECISION_FP32, _BF16 or _FP16)", (int)o->precision);
    return SL_OK;
}

/* sl_model_create, on bk (handed over) or, bk NULL, on the backend opts asks for. */
static sl_status create(const sl_layer_spec *specs, int n, const sl_model_opts *opts, sl_backend *bk,
                        sl_model **out) {
    *out = NULL;
    sl_model_opts o = opts ? *opts : sl_model_opts_default();
    sl_status s = check_opts(&o);
    sl_model *m = s ? NULL : calloc(1, sizeof *m);
    if (!m) {
        sl__backend_free(bk);
        return s ? s : sl_err(SL_ENOMEM, "model: out of memory");
    }
    m->opts = o;
    m->bk = bk;
    if ((s = sl__model_plan(m, specs, n))) goto fail;
    if (!m->bk && (s = make_backend(m, &o, &m->bk))) goto fail;
    m->is_cpu = strcmp(sl__be_name(m->bk), "cpu") == 0;
    if (o.precision != SL_PRECISION_FP32 &&
        (s = sl__be_set_precision(m->bk, o.precision == SL_PRECISION_BF16 ? SL_BK_BF16 : SL_BK_FP16)))
        goto fail;
    size_t pbytes = m->n_params * sizeof(float);
    if ((s = plan_memory(m, &o, pbytes, carve(m, NULL)))) goto fail;
    if ((s = sl__be_alloc(m->bk, pbytes, (void **)&m->params)) ||
        (s = sl__be_alloc(m->bk, pbytes + SL__GRADS_SPARE * sizeof(float), (void **)&m->grads)))
        goto fail;
    size_t abytes = carve(m, NULL);
    if ((s = sl__be_alloc(m->bk, abytes, &m->act_mem))) goto fail;
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
        s = sl__be_to_device(m->bk, m->params, host, pbytes);
        free(host);
        if (s) goto fail;
    }
    if (!m->is_cpu) {
        for (int k = 0; k < NSLOTS; k++) {
            if ((s = sl__be_alloc(m->bk, (size_t)o.max_batch * m->in_size * sizeof(float), (void **)&m->x_dev[k])) ||
                (s = sl__be_alloc(m->bk, (size_t)o.max_batch * sizeof(int32_t), (void **)&m->y_dev[k])))
                goto fail;
        }
        for (int k = 0; k < NSLOTS; k++)
            if ((s = sl__be_host_alloc(m->bk, (size_t)o.max_batch * (m->in_size * sizeof(float) + sizeof(int32_t)), &m->stage[k])))
                goto fail;
    } else {
        for (int k = 0; k < NSLOTS; k++)
            if (!(m->slot_labels[k] = malloc((size_t)o.max_batch * sizeof(int32_t)))) {
                s = sl_err(SL_ENOMEM, "model: out of memory");
                goto fail;
            }
    }
    if ((s = sl__be_sync(m->bk))) goto fail;
    *out = m;
    return SL_OK;
fail:
    sl_model_free(m);
    return s;
}

sl_status sl_model_create(const sl_layer_spec *specs, int n, const sl_model_opts *opts, sl_model **out) {
    return create(specs, n, opts, NULL, out);
}

sl_status sl__model_create_on(const sl_layer_spec *specs, int n, const sl_model_opts *opts, sl_backend *bk,
                              sl_model **out) {
    return create(specs, n, opts, bk, out);
}

void sl_model_free(sl_model *m) {
    if (!m) return;
    if (m->bk) {
        sl__be_sync(m->bk);
        sl__be_free(m->bk, m->params);
        sl__be_free(m->bk, m->grads);
        sl__be_free(m->bk, m->act_mem);
        sl__be_free(m->bk, m->in_grad);
        for (int k = 0; k < NSLOTS; k++) {
            sl__be_free(m->bk, m->x_dev[k]);
            sl__be_free(m->bk, m->y_dev[k]);
        }
        for (int k = 0; k < NSLOTS; k++)
            if (m->stage[k]) sl__be_host_free(m->bk, m->stage[k]);
        sl__backend_free(m->bk);
    }
    for (int k = 0; k < NSLOTS; k++) free(m->slot_labels[k]);
    free(m->L);
    free(m->pv);
    free(m);
}

const char *sl_model_backend_name(const sl_model *m) { return sl__be_name(m->bk); }

sl_backend *sl__model_backend(sl_model *m) { return m->bk; }

uint64_t sl__model_launches(sl_model *m) { return sl__be_launches(m->bk); }

const char *sl__model_fallback(const sl_model *m) { return m->fallback[0] ? m->fallback : NULL; }

size_t sl__model_trainable(const sl_model *m) { return m->n_train; }

int sl_model_classes(const sl_model *m) { return m->classes; }

uint64_t sl__model_steps(const sl_model *m) { return m->steps; }

void sl__model_set_steps(sl_model *m, uint64_t steps) { m->steps = steps; }

const float *sl__model_input_grad(sl_model *m, bool on) {
    m->want_in_grad = on;
    if (!on) return NULL;
    if (!m->in_grad &&
        sl__be_alloc(m->bk, (size_t)m->opts.max_batch * m->in_size * sizeof(float), (void **)&m->in_grad)) {
        m->want_in_grad = false;
        return NULL;
    }
    return m->in_grad;
}

sl_status sl_model_zero_grads(sl_model *m) { return sl__be_fill(m->bk, m->grads, 0.0f, m->n_params); }

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
    return sl__be_to_host(m->bk, host, m->params, n * sizeof(float));
}

sl_status sl_model_set_params(sl_model *m, const float *host, size_t n) {
    if (n != m->n_params) return sl_err(SL_EINVAL, "model: set_params with %zu floats, the model has %zu", n, m->n_params);
    sl_status s = sl__be_to_device(m->bk, m->params, host, n * sizeof(float));
    return s ? s : sl__be_sync(m->bk);
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
