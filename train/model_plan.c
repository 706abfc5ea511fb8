/* Planning a model's layer graph (train/model_impl.h): each layer's inputs, output shape,
 * convolution geometry (TensorFlow's padding rule) and parameter offsets, the checkpoint
 * views in layer order, which layers need gradients and which consumer of a shared output
 * sets its gradient in backward; and the Keras-style summary.
 *
 * Workload: a few dozen layers, once per model; the effort goes into messages naming the
 * layer, its shapes and a hint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/model_impl.h"

static const char *kind_base(sl_layer_kind k) {
    switch (k) {
    case SL_LAYER_INPUT: return "input";
    case SL_LAYER_FLATTEN: return "flatten";
    case SL_LAYER_DENSE: return "dense";
    case SL_LAYER_CONV2D: return "conv2d";
    case SL_LAYER_MAXPOOL: return "max_pooling2d";
    case SL_LAYER_AVGPOOL: return "average_pooling2d";
    case SL_LAYER_DROPOUT: return "dropout";
    case SL_LAYER_BATCHNORM: return "batch_normalization";
    case SL_LAYER_RELU: return "relu";
    case SL_LAYER_TANH: return "tanh";
    case SL_LAYER_SIGMOID: return "sigmoid";
    case SL_LAYER_ADD: return "add";
    case SL_LAYER_CONCAT: return "concatenate";
    case SL_LAYER_GLOBAL_AVGPOOL: return "global_average_pooling2d";
    }
    return "layer";
}

static const char *kind_class(sl_layer_kind k) {
    switch (k) {
    case SL_LAYER_INPUT: return "InputLayer";
    case SL_LAYER_FLATTEN: return "Flatten";
    case SL_LAYER_DENSE: return "Dense";
    case SL_LAYER_CONV2D: return "Conv2D";
    case SL_LAYER_MAXPOOL: return "MaxPooling2D";
    case SL_LAYER_AVGPOOL: return "AveragePooling2D";
    case SL_LAYER_DROPOUT: return "Dropout";
    case SL_LAYER_BATCHNORM: return "BatchNormalization";
    case SL_LAYER_RELU: return "ReLU";
    case SL_LAYER_TANH: return "Activation";
    case SL_LAYER_SIGMOID: return "Activation";
    case SL_LAYER_ADD: return "Add";
    case SL_LAYER_CONCAT: return "Concatenate";
    case SL_LAYER_GLOBAL_AVGPOOL: return "GlobalAveragePooling2D";
    }
    return "Layer";
}


/* ---- shapes --------------------------------------------------------------------------- */

static sl_status geometry(const char *name, const char *what, int in_h, int in_w, int kh, int kw, int stride,
                          sl_padding pad, int *oh, int *ow, int *pt, int *pl) {
    if (pad == SL_PAD_SAME) {
        *oh = (in_h + stride - 1) / stride;
        *ow = (in_w + stride - 1) / stride;
        int th = (*oh - 1) * stride + kh - in_h, tw = (*ow - 1) * stride + kw - in_w;
        *pt = th > 0 ? th / 2 : 0;
        *pl = tw > 0 ? tw / 2 : 0;
    } else if (pad == SL_PAD_VALID) {
        if (kh > in_h || kw > in_w)
            return sl_err(SL_EINVAL, "%s: %s %dx%d larger than its %dx%d input", name, what, kh, kw, in_h, in_w);
        *oh = (in_h - kh) / stride + 1;
        *ow = (in_w - kw) / stride + 1;
        *pt = *pl = 0;
    } else {
        return sl_err(SL_EINVAL, "%s: unknown padding %d", name, (int)pad);
    }
    return SL_OK;
}

static void shape_str(const int64_t *d, int rank, char *out, size_t cap) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < rank && o < cap; i++) o += (size_t)snprintf(out + o, cap - o, i ? "x%lld" : "%lld", (long long)d[i]);
}

static sl_status add_view(sl_model *m, const char *lname, const char *suffix, size_t off, int rank,
                          const int64_t *dims) {
    pview *v = &m->pv[m->npv++];
    snprintf(v->name, sizeof v->name, "%s/%s", lname, suffix);
    v->off = off;
    v->rank = rank;
    for (int i = 0; i < 4; i++) v->dims[i] = i < rank ? dims[i] : 0;
    return SL_OK;
}

/* Work out every layer's shapes, geometry and parameter offsets. */
/* The shapes, sizes and parameter offsets while the layers are planned in order. */
typedef struct {
    char (*names)[32];    /* every spec's layer name (sl__model_layer_names) */
    int rank;
    int64_t shape[3];     /* the running output shape */
    size_t size;          /* its element count */
    size_t off;           /* trainable floats so far */
    size_t stat_floats;   /* batchnorm running statistics so far (after the trainable ones) */
} plan_state;

#define LAST_KIND SL_LAYER_GLOBAL_AVGPOOL

void sl__model_layer_names(const sl_layer_spec *specs, int n, char (*names)[32]) {
    int counts[LAST_KIND + 1] = {0};
    for (int i = 0; i < n; i++) {
        sl_layer_kind k = specs[i].kind;
        if (specs[i].name[0]) snprintf(names[i], 32, "%.31s", specs[i].name);
        else if (i == 0) snprintf(names[i], 32, "input");
        else if (k >= SL_LAYER_INPUT && k <= LAST_KIND) snprintf(names[i], 32, "%s_%d", kind_base(k), ++counts[k]);
        else snprintf(names[i], 32, "layer_%d", i);
    }
}

/* Source k of a layer as "8x8x16 (conv2d_3)" for messages. */
static void src_desc(const sl_model *m, int src, char *out, size_t cap) {
    char shp[64];
    if (src < 0) shape_str(m->in_shape, m->in_rank, shp, sizeof shp);
    else shape_str(m->L[src].shape, m->L[src].rank, shp, sizeof shp);
    snprintf(out, cap, "%s (%s)", shp, src < 0 ? m->in_name : m->L[src].name);
}

/* ADD / CONCAT: the output shape from the sources' (equal, or equal but the last
 * dimension). */
static sl_status plan_join(sl_model *m, int li, plan_state *p) {
    layer *l = &m->L[li];
    bool add = l->kind == SL_LAYER_ADD;
    if (l->nin < 2) {
        sl_err(SL_EINVAL, "model: layer %d (%s): %s needs at least two inputs, got %d", li + 1, l->name,
               add ? "add" : "concat", l->nin);
        sl_err_hint("name the outputs to join, e.g. `%s shortcut` (the previous layer's and shortcut's)",
                    add ? "add" : "concat");
        return SL_EINVAL;
    }
    int last = p->rank - 1;
    for (int k = 1; k < l->nin; k++) {
        int sk = l->src[k];
        int rank = sk < 0 ? m->in_rank : m->L[sk].rank;
        const int64_t *d = sk < 0 ? m->in_shape : m->L[sk].shape;
        bool ok = rank == p->rank;
        for (int i = 0; ok && i < rank; i++) ok = d[i] == p->shape[i] || (!add && i == last);
        if (!ok) {
            char a[96], b[96];
            src_desc(m, l->src[0], a, sizeof a);
            src_desc(m, sk, b, sizeof b);
            sl_err(SL_EINVAL, "model: layer %d (%s): %s of shapes that differ%s: %s and %s", li + 1, l->name,
                   add ? "add" : "concat", add ? "" : " in more than the last dimension", a, b);
            if (add) sl_err_hint("a shortcut that changes the shape needs a projection, e.g. `conv2d FILTERS kernel=1x1 stride=2 from=NAME`");
            else sl_err_hint("concat joins along the last (channel) dimension; bring the other dimensions to one size first (stride=2, a pool)");
            return SL_EINVAL;
        }
        if (!add) p->shape[last] += d[last];
    }
    return SL_OK;
}

/* Give layer l its weights and biases (l->nw and l->nb floats) at the plan's next offsets. */
static void place_params(layer *l, plan_state *p) {
    l->has_params = true;
    l->w_off = p->off;
    p->off += l->nw;
    l->b_off = p->off;
    p->off += l->nb;
}

/* A conv2d or pooling layer li (spec s) over the plan's h x w x c image (shp: its shape as
 * text): window, stride, padding, output size and, for conv2d, its kernel and bias. */
static sl_status plan_window(sl_model *m, int li, const sl_layer_spec *s, plan_state *p, const char *shp) {
    layer *l = &m->L[li];
    const char *nm = l->name;
    bool conv = s->kind == SL_LAYER_CONV2D;
    if (p->rank != 3) return sl_err(SL_EINVAL, "model: layer %d (%s): needs an image input h x w x c, got %s", li + 1, nm, shp);
    l->kh = s->kh;
    l->kw = s->kw ? s->kw : s->kh;
    if (l->kh <= 0 || l->kw <= 0) return sl_err(SL_EINVAL, "model: layer %d (%s): %s size %dx%d must be > 0", li + 1, nm, conv ? "kernel" : "pool", s->kh, s->kw);
    l->stride = s->stride ? s->stride : (conv ? 1 : l->kh);
    if (l->stride < 0) return sl_err(SL_EINVAL, "model: layer %d (%s): stride %d must be > 0", li + 1, nm, s->stride);
    if (!conv && l->kh != l->kw) return sl_err(SL_EINVAL, "model: layer %d (%s): pool window %dx%d must be square", li + 1, nm, l->kh, l->kw);
    l->h = (int)p->shape[0];
    l->w = (int)p->shape[1];
    l->c = (int)p->shape[2];
    char who[96];
    snprintf(who, sizeof who, "model: layer %d (%s)", li + 1, nm);
    sl_status st = geometry(who, conv ? "kernel" : "pool", l->h, l->w, l->kh, l->kw, l->stride, s->padding,
                            &l->oh, &l->ow, &l->pt, &l->pl);
    if (st) return st;
    if (conv) {
        if (s->filters <= 0) return sl_err(SL_EINVAL, "model: layer %d (%s): filters %d must be > 0", li + 1, nm, s->filters);
        if (s->activation < 0 || s->activation > 3) return sl_err(SL_EINVAL, "model: layer %d (%s): unknown activation %d", li + 1, nm, s->activation);
        l->act = (sl_act)s->activation;
        l->oc = s->filters;
        l->nw = (size_t)l->kh * l->kw * l->c * l->oc;
        l->nb = (size_t)l->oc;
        place_params(l, p);
        int64_t kd[4] = {l->kh, l->kw, l->c, l->oc}, bd[1] = {l->oc};
        add_view(m, nm, "kernel", l->w_off, 4, kd);
        add_view(m, nm, "bias", l->b_off, 1, bd);
    } else {
        l->oc = l->c;
    }
    p->shape[0] = l->oh;
    p->shape[1] = l->ow;
    p->shape[2] = l->oc;
    return SL_OK;
}

/* Layer li (spec s) after the ones before it. */
static sl_status plan_layer(sl_model *m, int li, const sl_layer_spec *s, plan_state *p) {
    layer *l = &m->L[li];
    l->kind = s->kind;
    if (s->kind < SL_LAYER_INPUT || s->kind > LAST_KIND) return sl_err(SL_EINVAL, "model: layer %d has unknown kind %d", li + 1, (int)s->kind);
    snprintf(l->name, sizeof l->name, "%s", p->names[li + 1]);
    if (strcmp(m->in_name, l->name) == 0) return sl_err(SL_EINVAL, "model: layer %d: name '%s' is used twice", li + 1, l->name);
    for (int j = 0; j < li; j++)
        if (strcmp(m->L[j].name, l->name) == 0) return sl_err(SL_EINVAL, "model: layer %d: name '%s' is used twice", li + 1, l->name);
    const char *nm = l->name;
    char shp[64];
    shape_str(p->shape, p->rank, shp, sizeof shp);
    l->in_size = p->size;
    if (l->nin != 1 && s->kind != SL_LAYER_ADD && s->kind != SL_LAYER_CONCAT)
        return sl_err(SL_EINVAL, "model: layer %d (%s): %s takes one input, got %d", li + 1, nm, kind_base(s->kind), l->nin);
    switch (s->kind) {
    case SL_LAYER_ADD:
    case SL_LAYER_CONCAT: {
        sl_status st = plan_join(m, li, p);
        if (st) return st;
        break;
    }
    case SL_LAYER_GLOBAL_AVGPOOL:
        if (p->rank != 3) return sl_err(SL_EINVAL, "model: layer %d (%s): needs an image input h x w x c, got %s", li + 1, nm, shp);
        l->hw = (int)(p->shape[0] * p->shape[1]);
        l->c = (int)p->shape[2];
        p->rank = 1;
        p->shape[0] = l->c;
        break;
    case SL_LAYER_INPUT:
        return sl_err(SL_EINVAL, "model: layer %d (%s): input must be the first layer only", li + 1, nm);
    case SL_LAYER_FLATTEN:
        p->rank = 1;
        p->shape[0] = (int64_t)p->size;
        break;
    case SL_LAYER_DENSE: {
        if (p->rank != 1) {
            sl_err(SL_EINVAL, "model: layer %d (%s): dense needs a vector input, got %s", li + 1, nm, shp);
            sl_err_hint("add a flatten layer before it");
            return SL_EINVAL;
        }
        if (s->units <= 0) return sl_err(SL_EINVAL, "model: layer %d (%s): units %d must be > 0", li + 1, nm, s->units);
        if (s->activation < 0 || s->activation > 3) return sl_err(SL_EINVAL, "model: layer %d (%s): unknown activation %d", li + 1, nm, s->activation);
        l->act = (sl_act)s->activation;
        l->nw = p->size * (size_t)s->units;
        l->nb = (size_t)s->units;
        place_params(l, p);
        int64_t kd[2] = {(int64_t)p->size, s->units}, bd[1] = {s->units};
        add_view(m, nm, "kernel", l->w_off, 2, kd);
        add_view(m, nm, "bias", l->b_off, 1, bd);
        p->shape[0] = s->units;
        break;
    }
    case SL_LAYER_CONV2D:
    case SL_LAYER_MAXPOOL:
    case SL_LAYER_AVGPOOL: {
        sl_status st = plan_window(m, li, s, p, shp);
        if (st) return st;
        break;
    }
    case SL_LAYER_DROPOUT:
        if (!(s->rate >= 0.0f && s->rate < 1.0f)) return sl_err(SL_EINVAL, "model: layer %d (%s): rate %g must be in [0, 1)", li + 1, nm, s->rate);
        l->rate = s->rate;
        break;
    case SL_LAYER_BATCHNORM: {
        l->momentum = s->momentum ? s->momentum : 0.01f;
        l->eps = s->eps ? s->eps : 1e-3f;
        if (!(l->momentum > 0.0f && l->momentum <= 1.0f)) return sl_err(SL_EINVAL, "model: layer %d (%s): momentum %g must be in (0, 1]", li + 1, nm, l->momentum);
        if (!(l->eps > 0.0f)) return sl_err(SL_EINVAL, "model: layer %d (%s): eps %g must be > 0", li + 1, nm, l->eps);
        l->c = (int)p->shape[p->rank - 1];
        l->nw = l->nb = (size_t)l->c;
        place_params(l, p);
        l->rm_off = p->stat_floats; /* relative until the trainable size is known */
        l->rv_off = p->stat_floats + (size_t)l->c;
        p->stat_floats += 2 * (size_t)l->c;
        break;
    }
    case SL_LAYER_RELU: l->act = SL_ACT_RELU; break;
    case SL_LAYER_TANH: l->act = SL_ACT_TANH; break;
    case SL_LAYER_SIGMOID: l->act = SL_ACT_SIGMOID; break;
    }
    l->rank = p->rank;
    p->size = 1;
    for (int i = 0; i < p->rank; i++) {
        l->shape[i] = p->shape[i];
        p->size *= (size_t)p->shape[i];
    }
    l->out_size = p->size;
    return SL_OK;
}

/* The parameter views in layer order, batchnorm's four tensors together (its running
 * statistics after the off trainable floats). */
static sl_status plan_views(sl_model *m, size_t off) {
    /* Views in layer order; batchnorm's four tensors together. */
    int nv = 0;
    pview *ordered = calloc((size_t)m->nl * 4 + 1, sizeof(pview));
    if (!ordered) return sl_err(SL_ENOMEM, "model: out of memory");
    int dense_conv_seen = 0;
    for (int li = 0; li < m->nl; li++) {
        layer *l = &m->L[li];
        if (l->kind == SL_LAYER_DENSE || l->kind == SL_LAYER_CONV2D) {
            ordered[nv++] = m->pv[dense_conv_seen++];
            ordered[nv++] = m->pv[dense_conv_seen++];
        } else if (l->kind == SL_LAYER_BATCHNORM) {
            l->rm_off += off;
            l->rv_off += off;
            int64_t d[1] = {l->c};
            const char *sfx[4] = {"gamma", "beta", "moving_mean", "moving_variance"};
            size_t offs[4] = {l->w_off, l->b_off, l->rm_off, l->rv_off};
            for (int k = 0; k < 4; k++) {
                pview *v = &ordered[nv++];
                snprintf(v->name, sizeof v->name, "%s/%s", l->name, sfx[k]);
                v->off = offs[k];
                v->rank = 1;
                v->dims[0] = d[0];
            }
        }
    }
    free(m->pv);
    m->pv = ordered;
    m->npv = nv;
    return SL_OK;
}

/* Layer li's inputs (spec s): the layer before it, or the earlier ones s->inputs names;
 * the running shape becomes the first one's. */
static sl_status plan_sources(sl_model *m, int li, const sl_layer_spec *s, plan_state *p) {
    layer *l = &m->L[li];
    if (s->ninputs < 0 || s->ninputs > SL_MODEL_MAX_INPUTS)
        return sl_err(SL_EINVAL, "model: layer %d (%s): %d inputs, at most %d", li + 1, p->names[li + 1], s->ninputs,
                      SL_MODEL_MAX_INPUTS);
    l->nin = s->ninputs ? s->ninputs : 1;
    for (int k = 0; k < l->nin; k++) {
        int idx = s->ninputs ? s->inputs[k] : li; /* spec indices: this layer is li + 1 */
        if (idx < 0 || idx > li) {
            sl_err(SL_EINVAL, "model: layer %d (%s): input %d is layer %d, which is not an earlier layer", li + 1,
                   p->names[li + 1], k + 1, idx);
            sl_err_hint("a layer reads the outputs of layers before it (0..%d)", li);
            return SL_EINVAL;
        }
        l->src[k] = idx - 1;
        if (idx - 1 != li - 1 || l->nin != 1) m->graph = true;
    }
    int s0 = l->src[0];
    p->rank = s0 < 0 ? m->in_rank : m->L[s0].rank;
    p->size = s0 < 0 ? m->in_size : m->L[s0].out_size;
    for (int i = 0; i < 3; i++) p->shape[i] = i >= p->rank ? 0 : s0 < 0 ? m->in_shape[i] : m->L[s0].shape[i];
    return SL_OK;
}

/* Mark each max pool whose backward can also take the ReLU gradient of the conv before it
 * (layer.relu_pool): windows that tile the input (stride == size), a ReLU conv as its only
 * input, and no other reader of that conv's output. */
static void plan_relu_pools(sl_model *m) {
    for (int li = 0; li < m->nl; li++) {
        layer *l = &m->L[li];
        int p = l->src[0];
        if (l->kind != SL_LAYER_MAXPOOL || l->nin != 1 || p < 0 || l->stride != l->kh || l->acc[0]) continue;
        const layer *pl = &m->L[p];
        if (pl->kind != SL_LAYER_CONV2D || pl->act != SL_ACT_RELU) continue;
        int readers = 0;
        for (int j = 0; j < m->nl; j++)
            for (int k = 0; k < m->L[j].nin; k++) readers += m->L[j].src[k] == p;
        if (readers == 1) l->relu_pool = m->L[p].dout_pre = true;
    }
}

/* After planning: every output but the last is used; which layers need gradients; which
 * consumer of each output sets its gradient in backward (the first one backward reaches:
 * the highest layer, then its lowest input) and which add to it. Flatten shares its input's
 * gradient buffer, so it counts as that buffer's owner's. */
static sl_status plan_graph(sl_model *m) {
    int *own = calloc((size_t)m->nl + 1, sizeof(int));
    bool *seen = calloc((size_t)m->nl + 1, sizeof(bool)); /* by owner + 1 (0: the model input) */
    if (!own || !seen) {
        free(own);
        free(seen);
        return sl_err(SL_ENOMEM, "model: out of memory");
    }
    for (int li = 0; li < m->nl; li++) {
        layer *l = &m->L[li];
        l->needs_grad = l->has_params;
        for (int k = 0; k < l->nin; k++) {
            int sk = l->src[k];
            if (sk >= 0) seen[sk] = true; /* used */
            if (sk >= 0 && m->L[sk].needs_grad) l->needs_grad = true;
        }
        own[li] = l->kind != SL_LAYER_FLATTEN ? li : l->src[0] < 0 ? -1 : own[l->src[0]];
    }
    sl_status st = SL_OK;
    for (int li = 0; li < m->nl - 1 && !st; li++)
        if (!seen[li]) {
            st = sl_err(SL_EINVAL, "model: layer %d (%s): its output is never used", li + 1, m->L[li].name);
            sl_err_hint("read it in a later layer (from=%s, add, concat) or remove it", m->L[li].name);
        }
    memset(seen, 0, ((size_t)m->nl + 1) * sizeof(bool));
    for (int li = m->nl - 1; li >= 0 && !st; li--) {
        layer *l = &m->L[li];
        if (l->kind == SL_LAYER_FLATTEN) continue;
        for (int k = 0; k < l->nin; k++) {
            int o = (l->src[k] < 0 ? -1 : own[l->src[k]]) + 1;
            l->acc[k] = seen[o];
            seen[o] = true;
        }
    }
    plan_relu_pools(m);
    free(own);
    free(seen);
    return st;
}

sl_status sl__model_plan(sl_model *m, const sl_layer_spec *specs, int n) {
    if (n < 2) return sl_err(SL_EINVAL, "model: needs an input layer and at least one dense layer (got %d layer%s)", n, n == 1 ? "" : "s");
    const sl_layer_spec *in = &specs[0];
    if (in->kind != SL_LAYER_INPUT) return sl_err(SL_EINVAL, "model: layer 0 must be input, got %s", kind_base(in->kind));
    if (in->rank < 1 || in->rank > 3) return sl_err(SL_EINVAL, "model: input rank %d must be 1..3", in->rank);
    m->in_rank = in->rank;
    m->in_size = 1;
    for (int i = 0; i < in->rank; i++) {
        if (in->shape[i] <= 0 || in->shape[i] > (1 << 24)) return sl_err(SL_EINVAL, "model: input dimension %d is %lld", i, (long long)in->shape[i]);
        m->in_shape[i] = in->shape[i];
        m->in_size *= (size_t)in->shape[i];
    }
    m->nl = n - 1;
    m->L = calloc((size_t)m->nl, sizeof(layer));
    m->pv = calloc((size_t)m->nl * 4 + 1, sizeof(pview));
    if (!m->L || !m->pv) return sl_err(SL_ENOMEM, "model: out of memory");
    char (*names)[32] = calloc((size_t)n, sizeof *names);
    if (!names) return sl_err(SL_ENOMEM, "model: out of memory");
    sl__model_layer_names(specs, n, names);
    snprintf(m->in_name, sizeof m->in_name, "%s", names[0]);
    plan_state p = {.names = names};
    sl_status st = SL_OK;
    for (int li = 0; li < m->nl && !st; li++) {
        if (!(st = plan_sources(m, li, &specs[li + 1], &p))) st = plan_layer(m, li, &specs[li + 1], &p);
    }
    free(names);
    if (st || (st = plan_graph(m))) return st;
    layer *last = &m->L[m->nl - 1];
    if (last->kind != SL_LAYER_DENSE || last->act != SL_ACT_NONE) {
        sl_err(SL_EINVAL, "model: the last layer (%s) must be dense with no activation: it gives the logits", last->name);
        sl_err_hint("end the model with `dense CLASSES` (softmax is part of the loss)");
        return SL_EINVAL;
    }
    m->classes = (int)last->shape[0];
    m->n_train = p.off;
    m->n_params = p.off + p.stat_floats;
    return plan_views(m, p.off);
}
sl_status sl_model_summary(const sl_model *m, char **out) {
    /* the first column is as wide as its longest "name (Class)", 34 at least (Keras') */
    int w = (int)strlen(m->in_name) + (int)strlen(" (InputLayer)");
    for (int li = 0; li < m->nl; li++) {
        int k = (int)(strlen(m->L[li].name) + strlen(kind_class(m->L[li].kind))) + 3;
        if (k > w) w = k;
    }
    if (w < 34) w = 34;
    size_t cap = 256 + (size_t)(m->nl + 1) * ((size_t)w + 96 + SL_MODEL_MAX_INPUTS * 34), o = 0;
    char *buf = malloc(cap);
    if (!buf) return sl_err(SL_ENOMEM, "model summary: out of memory");
    char shp[96], typ[128];
#define OUT(...) o += (size_t)snprintf(buf + o, cap - o, __VA_ARGS__)
    if (m->graph) OUT("%-*s %-22s %10s  %s\n", w, "Layer (type)", "Output Shape", "Param #", "Connected to");
    else OUT("%-*s %-22s %10s\n", w, "Layer (type)", "Output Shape", "Param #");
    size_t pos = 0;
    pos += (size_t)snprintf(shp + pos, sizeof shp - pos, "(None");
    for (int i = 0; i < m->in_rank; i++) pos += (size_t)snprintf(shp + pos, sizeof shp - pos, ", %lld", (long long)m->in_shape[i]);
    snprintf(shp + pos, sizeof shp - pos, ")");
    snprintf(typ, sizeof typ, "%s (InputLayer)", m->in_name);
    OUT("%-*s %-22s %10d\n", w, typ, shp, 0);
    size_t total = 0;
    for (int li = 0; li < m->nl; li++) {
        const layer *l = &m->L[li];
        pos = (size_t)snprintf(shp, sizeof shp, "(None");
        for (int i = 0; i < l->rank; i++) pos += (size_t)snprintf(shp + pos, sizeof shp - pos, ", %lld", (long long)l->shape[i]);
        snprintf(shp + pos, sizeof shp - pos, ")");
        snprintf(typ, sizeof typ, "%s (%s)", l->name, kind_class(l->kind));
        size_t np = l->nw + l->nb + (l->kind == SL_LAYER_BATCHNORM ? 2 * (size_t)l->c : 0);
        total += np;
        OUT("%-*s %-22s %10zu", w, typ, shp, np);
        for (int k = 0; m->graph && k < l->nin; k++)
            OUT("%s%s", k ? ", " : "  ", l->src[k] < 0 ? m->in_name : m->L[l->src[k]].name);
        OUT("\n");
    }
    OUT("Total params: %zu (trainable %zu)\n", total, m->n_train);
#undef OUT
    *out = buf;
    return SL_OK;
}

