/* Optimizers over the model's flat parameter buffer: SGD (momentum, Nesterov, L2 weight
 * decay), Adam and AdamW, with PyTorch's update formulas (train/backend.h spells them out).
 * The state (SGD velocity, or Adam's m then v) is ONE backend allocation covering the
 * trainable prefix of the parameters; batchnorm running statistics, which sit after it,
 * are never touched (train/model.c's layout).
 *
 * decay_exclude: the trainable prefix is cut into runs of parameters that decay and runs
 * that do not (biases, batchnorm gamma/beta, found by their view names), and each step
 * calls the backend's update once per run, with weight_decay 0 on the excluded ones. The
 * update treats every float on its own, so a run gives exactly what the whole-buffer call
 * gives its floats; only the launches grow (two per layer at most).
 *
 * Workload: one call per training step over a few million floats; the backend does the
 * elementwise pass, this file only keeps the step count and checks arguments. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/internal.h"

struct sl_optim {
    sl_model *model;
    sl_optim_spec spec;
    sl_backend *bk;
    size_t n;      /* trainable floats */
    float *state;  /* [n] velocity (SGD with momentum), or [2n] m then v (Adam), or NULL */
    size_t nstate;
    int64_t step;  /* steps taken */
    /* decay_exclude: the contiguous runs of floats [run_lo[r], run_lo[r + 1]) that decay
     * (run_decays[r]) or not; run_lo[nruns] = n. nruns 0: one run, all decaying. */
    size_t *run_lo;
    bool *run_decays;
    int nruns;
};

/* decay_exclude's test of one view name ("dense_1/bias", "batch_normalization_1/gamma"). */
static bool excluded(const char *name, unsigned ex) {
    const char *sl = strrchr(name, '/');
    const char *leaf = sl ? sl + 1 : name;
    if ((ex & SL_DECAY_EXCLUDE_BIAS) && strcmp(leaf, "bias") == 0) return true;
    return (ex & SL_DECAY_EXCLUDE_BATCHNORM) && (strcmp(leaf, "gamma") == 0 || strcmp(leaf, "beta") == 0);
}

/* Floats [lo, hi) decay or not: a run of their own, or the previous run made longer. */
static void add_run(sl_optim *o, size_t lo, size_t hi, bool decays) {
    if (hi <= lo) return;
    if (o->nruns > 0 && o->run_decays[o->nruns - 1] == decays) {
        o->run_lo[o->nruns] = hi;
        return;
    }
    o->run_lo[o->nruns] = lo;
    o->run_decays[o->nruns] = decays;
    o->run_lo[++o->nruns] = hi;
}

/* The runs over [0, o->n) from the model's views. Trainable views come in offset order
 * (train/model.c's layout); a float that no view names decays. */
static sl_status plan_runs(sl_optim *o) {
    int nv = sl_model_param_count(o->model);
    size_t cap = (size_t)nv * 2 + 2;
    o->run_lo = malloc((cap + 1) * sizeof(size_t));
    o->run_decays = malloc(cap * sizeof(bool));
    if (!o->run_lo || !o->run_decays) return sl_err(SL_ENOMEM, "optimizer: out of memory");
    size_t pos = 0;
    for (int i = 0; i < nv; i++) {
        const char *name;
        size_t off, len = 1;
        int rank;
        int64_t dims[4];
        sl_status s = sl_model_param_info(o->model, i, &name, &off, &rank, dims);
        if (s) return s;
        for (int k = 0; k < rank; k++) len *= (size_t)dims[k];
        if (off < pos || off >= o->n) continue; /* running statistics (after the trainable prefix) */
        add_run(o, pos, off, true);
        pos = off + len < o->n ? off + len : o->n;
        add_run(o, off, pos, !excluded(name, o->spec.decay_exclude));
    }
    add_run(o, pos, o->n, true);
    return SL_OK;
}

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
    if (sp.decay_exclude & ~(SL_DECAY_EXCLUDE_BIAS | SL_DECAY_EXCLUDE_BATCHNORM))
        return sl_err(SL_EINVAL, "%s: decay_exclude 0x%x has unknown bits (SL_DECAY_EXCLUDE_BIAS, _BATCHNORM)", kn,
                      sp.decay_exclude);
    sl_optim *o = calloc(1, sizeof *o);
    if (!o) return sl_err(SL_ENOMEM, "%s: out of memory", kn);
    o->model = m;
    o->spec = sp;
    o->bk = sl__model_backend(m);
    o->n = sl__model_trainable(m);
    o->nstate = sp.kind == SL_OPTIM_SGD ? (sp.momentum != 0.0f ? o->n : 0) : 2 * o->n;
    sl_status s = SL_OK;
    if (sp.decay_exclude && sp.weight_decay > 0.0f) s = plan_runs(o);
    if (!s && o->nstate) s = sl__be_alloc(o->bk, o->nstate * sizeof(float), (void **)&o->state);
    if (s) {
        sl_optim_free(o);
        return s;
    }
    *out = o;
    return SL_OK;
}

void sl_optim_free(sl_optim *o) {
    if (!o) return;
    if (o->state) sl__be_free(o->bk, o->state);
    free(o->run_lo);
    free(o->run_decays);
    free(o);
}

sl_status sl_optim_step(sl_optim *o, float lr) {
    if (!(lr >= 0.0f) || !isfinite(lr)) return sl_err(SL_EINVAL, "%s: learning rate %g must be finite and >= 0", kind_name(o->spec.kind), lr);
    float *p = sl_model_params(o->model, NULL);
    const float *g = sl_model_grads(o->model, NULL);
    const sl_optim_spec *sp = &o->spec;
    size_t whole[2] = {0, o->n};
    const bool all[1] = {true};
    const size_t *run_lo = o->nruns ? o->run_lo : whole;
    const bool *run_decays = o->nruns ? o->run_decays : all;
    int nruns = o->nruns ? o->nruns : 1;
    for (int r = 0; r < nruns; r++) {
        size_t lo = run_lo[r], len = run_lo[r + 1] - lo;
        float wd = run_decays[r] ? sp->weight_decay : 0.0f;
        float *st = o->state ? o->state + lo : NULL;
        sl_status s;
        if (sp->kind == SL_OPTIM_SGD)
            s = sl__be_sgd_step(o->bk, p + lo, g + lo, st, len, lr, sp->momentum, sp->nesterov, wd);
        else
            s = sl__be_adam_step(o->bk, p + lo, g + lo, st, st + o->n, len, lr, sp->beta1, sp->beta2, sp->eps,
                                 wd, sp->kind == SL_OPTIM_ADAMW, o->step + 1);
        if (s) return s;
    }
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
    return sl__be_to_host(o->bk, host, o->state, n * sizeof(float));
}

sl_status sl_optim_set_state(sl_optim *o, const float *host, size_t n, int64_t step) {
    if (n != o->nstate) return sl_err(SL_EINVAL, "%s: set_state with %zu floats, the state has %zu", kind_name(o->spec.kind), n, o->nstate);
    if (step < 0) return sl_err(SL_EINVAL, "%s: step count %lld must be >= 0", kind_name(o->spec.kind), (long long)step);
    if (n) {
        sl_status s = sl__be_to_device(o->bk, o->state, host, n * sizeof(float));
        if (!s) s = sl__be_sync(o->bk);
        if (s) return s;
    }
    o->step = step;
    return SL_OK;
}
