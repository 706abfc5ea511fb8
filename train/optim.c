/* Optimizers over the model's flat parameter buffer: SGD (momentum, Nesterov, L2 weight
 * decay), Adam and AdamW, with PyTorch's update formulas (train/backend.h spells them out).
 * The state (SGD velocity, or Adam's m then v) is ONE backend allocation covering the
 * trainable prefix of the parameters; batchnorm running statistics, which sit after it,
 * are never touched (train/model.c's layout).
 *
 * Workload: one call per training step over a few million floats; the backend does the
 * elementwise pass, this file only keeps the step count and checks arguments. */
#include <math.h>
#include <stdlib.h>

#include "train/model_priv.h"

struct sl_optim {
    sl_model *model;
    sl_optim_spec spec;
    sl_backend *bk;
    size_t n;      /* trainable floats */
    float *state;  /* [n] velocity (SGD with momentum), or [2n] m then v (Adam), or NULL */
    size_t nstate;
    int64_t step;  /* steps taken */
};

static const char *kind_name(sl_optim_kind k) {
    return k == SL_OPTIM_SGD ? "sgd" : k == SL_OPTIM_ADAM ? "adam" : k == SL_OPTIM_ADAMW ? "adamw" : "?";
}

sl_status sl_optim_create(sl_model *m, const sl_optim_spec *spec, sl_optim **out) {
    *out = NULL;
    sl_optim_spec sp = *spec;
    const char *kn = kind_name(sp.kind);
    if (sp.kind != SL_OPTIM_SGD && sp.kind != SL_OPTIM_ADAM && sp.kind != SL_OPTIM_ADAMW)
        return sl_err(SL_EINVAL, "optimizer: unknown kind %d", (int)sp.kind);
    if (!(sp.weight_decay >= 0.0f) || !isfinite(sp.weight_decay))
        return sl_err(SL_EINVAL, "%s: weight_decay %g must be >= 0", kn, sp.weight_decay);
    if (sp.kind == SL_OPTIM_SGD) {
        if (!(sp.momentum >= 0.0f && sp.momentum < 1.0f)) return sl_err(SL_EINVAL, "sgd: momentum %g must be in [0, 1)", sp.momentum);
        if (sp.nesterov && sp.momentum == 0.0f) {
            sl_err(SL_EINVAL, "sgd: nesterov needs a momentum > 0");
            sl_err_hint("set momentum=0.9 (or drop nesterov)");
            return SL_EINVAL;
        }
    } else {
        if (sp.beta1 == 0.0f) sp.beta1 = 0.9f;
        if (sp.beta2 == 0.0f) sp.beta2 = 0.999f;
        if (sp.eps == 0.0f) sp.eps = 1e-8f;
        if (!(sp.beta1 > 0.0f && sp.beta1 < 1.0f)) return sl_err(SL_EINVAL, "%s: beta1 %g must be in [0, 1)", kn, sp.beta1);
        if (!(sp.beta2 > 0.0f && sp.beta2 < 1.0f)) return sl_err(SL_EINVAL, "%s: beta2 %g must be in [0, 1)", kn, sp.beta2);
        if (!(sp.eps > 0.0f)) return sl_err(SL_EINVAL, "%s: eps %g must be > 0", kn, sp.eps);
    }
    sl_optim *o = calloc(1, sizeof *o);
    if (!o) return sl_err(SL_ENOMEM, "%s: out of memory", kn);
    o->model = m;
    o->spec = sp;
    o->bk = sl__model_backend(m);
    o->n = sl__model_trainable(m);
    o->nstate = sp.kind == SL_OPTIM_SGD ? (sp.momentum != 0.0f ? o->n : 0) : 2 * o->n;
    if (o->nstate) {
        sl_status s = o->bk->ops->alloc(o->bk, o->nstate * sizeof(float), (void **)&o->state);
        if (s) {
            free(o);
            return s;
        }
    }
    *out = o;
    return SL_OK;
}

void sl_optim_free(sl_optim *o) {
    if (!o) return;
    if (o->state) o->bk->ops->free(o->bk, o->state);
    free(o);
}

sl_status sl_optim_step(sl_optim *o, float lr) {
    if (!(lr >= 0.0f) || !isfinite(lr)) return sl_err(SL_EINVAL, "%s: learning rate %g must be finite and >= 0", kind_name(o->spec.kind), lr);
    float *p = sl_model_params(o->model, NULL);
    const float *g = sl_model_grads(o->model, NULL);
    const sl_optim_spec *sp = &o->spec;
    sl_status s;
    if (sp->kind == SL_OPTIM_SGD) {
        s = o->bk->ops->sgd_step(o->bk, p, g, o->state, o->n, lr, sp->momentum, sp->nesterov, sp->weight_decay);
    } else {
        s = o->bk->ops->adam_step(o->bk, p, g, o->state, o->state + o->n, o->n, lr, sp->beta1, sp->beta2, sp->eps,
                                  sp->weight_decay, sp->kind == SL_OPTIM_ADAMW, o->step + 1);
    }
    if (s) return s;
    o->step++;
    return SL_OK;
}

float *sl_optim_state(sl_optim *o, size_t *n, int64_t *step) {
    if (n) *n = o->nstate;
    if (step) *step = o->step;
    return o->state;
}

sl_status sl_optim_get_state(sl_optim *o, float *host, size_t n) {
    if (n != o->nstate) return sl_err(SL_EINVAL, "%s: get_state for %zu floats, the state has %zu", kind_name(o->spec.kind), n, o->nstate);
    if (!n) return SL_OK;
    return o->bk->ops->to_host(o->bk, host, o->state, n * sizeof(float));
}

sl_status sl_optim_set_state(sl_optim *o, const float *host, size_t n, int64_t step) {
    if (n != o->nstate) return sl_err(SL_EINVAL, "%s: set_state with %zu floats, the state has %zu", kind_name(o->spec.kind), n, o->nstate);
    if (step < 0) return sl_err(SL_EINVAL, "%s: step count %lld must be >= 0", kind_name(o->spec.kind), (long long)step);
    if (n) {
        sl_status s = o->bk->ops->to_device(o->bk, o->state, host, n * sizeof(float));
        if (!s) s = o->bk->ops->sync(o->bk);
        if (s) return s;
    }
    o->step = step;
    return SL_OK;
}
