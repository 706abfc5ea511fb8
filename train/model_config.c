/* Models from the config language: `model NAME { ... }` -> layer specs -> sl_model_create.
 * The statements are specified in include/sluice/model.h:
 *
 *     input 28x28x1                  (or `input 784`)
 *     flatten
 *     dense UNITS [activation=relu|tanh|sigmoid|none]
 *     conv2d FILTERS kernel=5x5 [stride=1] [padding=same|valid] [activation=...]
 *     maxpool 2x2 [stride=2] [padding=valid|same]     avgpool likewise
 *     dropout RATE
 *     batchnorm [momentum=0.01] [eps=1e-3]
 *     relu | tanh | sigmoid
 *     global_avg_pool
 *     add NAME [NAME ...]            (one NAME: the previous layer's output plus NAME's)
 *     concat NAME [NAME ...]         (one NAME: the previous layer's output, then NAME's)
 * Every statement also takes name="..." (default: Keras style, "dense_1"), and every one
 * but input, add and concat takes from=NAME: its input is that earlier layer's output
 * instead of the previous one's. Names are resolved once every statement is read, so a
 * name that comes later is reported as such.
 *
 * Workload: a dozen statements read once at start-up; the effort goes into messages: each
 * mistake is reported at its spot (sl_cfg_err) with a hint, did-you-mean where a word was
 * misspelt, and shape errors found by sl_model_create are moved onto the statement of the
 * layer they name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/model.h"
#include "train/model_priv.h"

typedef struct layer_def {
    const char *name;
    sl_layer_kind kind;
    const char *usage;
    const char *opts[8]; /* allowed option keys, NULL-terminated */
    int min_pos, max_pos;
} layer_def;

static const layer_def DEFS[] = {
    {"input", SL_LAYER_INPUT, "input SHAPE (e.g. input 28x28x1)", {"name", NULL}, 1, 1},
    {"flatten", SL_LAYER_FLATTEN, "flatten [from=NAME]", {"name", "from", NULL}, 0, 0},
    {"dense", SL_LAYER_DENSE, "dense UNITS [activation=relu] [from=NAME]", {"activation", "name", "from", NULL}, 1, 1},
    {"conv2d", SL_LAYER_CONV2D,
     "conv2d FILTERS kernel=5x5 [stride=1] [padding=same|valid] [activation=relu] [from=NAME]",
     {"kernel", "stride", "padding", "activation", "name", "from", NULL}, 1, 1},
    {"maxpool", SL_LAYER_MAXPOOL, "maxpool 2x2 [stride=2] [padding=valid|same] [from=NAME]",
     {"stride", "padding", "name", "from", NULL}, 1, 1},
    {"avgpool", SL_LAYER_AVGPOOL, "avgpool 2x2 [stride=2] [padding=valid|same] [from=NAME]",
     {"stride", "padding", "name", "from", NULL}, 1, 1},
    {"dropout", SL_LAYER_DROPOUT, "dropout RATE (e.g. dropout 0.2) [from=NAME]", {"name", "from", NULL}, 1, 1},
    {"batchnorm", SL_LAYER_BATCHNORM, "batchnorm [momentum=0.01] [eps=1e-3] [from=NAME]",
     {"momentum", "eps", "name", "from", NULL}, 0, 0},
    {"relu", SL_LAYER_RELU, "relu [from=NAME]", {"name", "from", NULL}, 0, 0},
    {"tanh", SL_LAYER_TANH, "tanh [from=NAME]", {"name", "from", NULL}, 0, 0},
    {"sigmoid", SL_LAYER_SIGMOID, "sigmoid [from=NAME]", {"name", "from", NULL}, 0, 0},
    {"global_avg_pool", SL_LAYER_GLOBAL_AVGPOOL, "global_avg_pool [from=NAME]", {"name", "from", NULL}, 0, 0},
    {"add", SL_LAYER_ADD, "add NAME [NAME ...] (one NAME: the previous layer's output plus NAME's)", {"name", NULL},
     1, SL_MODEL_MAX_INPUTS},
    {"concat", SL_LAYER_CONCAT, "concat NAME [NAME ...] (one NAME: the previous layer's output, then NAME's)",
     {"name", NULL}, 1, SL_MODEL_MAX_INPUTS},
};
#define NDEFS ((int)(sizeof DEFS / sizeof DEFS[0]))

static const char *const ACTS[] = {"none", "relu", "tanh", "sigmoid", "linear"};
static const char *const PADS[] = {"valid", "same"};

static void join(const char *const *w, int n, char *out, size_t cap) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < n && o < cap; i++) o += (size_t)snprintf(out + o, cap - o, "%s%s", i ? ", " : "", w[i]);
}

static sl_status read_pos_int(const sl_cfg *cfg, const sl_cfg_stmt *s, const layer_def *d, int64_t min, int64_t max,
                              int *out) {
    const sl_cfg_value *v = sl_cfg_pos(s, 0);
    int64_t x;
    if (v->kind != SL_CV_NUMBER) {
        sl_cfg_err(cfg, v->loc, SL_EINVAL, "%s: expected a number, found '%s'", d->name, v->text ? v->text : "?");
        sl_err_hint("usage: %s", d->usage);
        return SL_EINVAL;
    }
    if (sl_cfg_int(cfg, v, min, max, &x)) return SL_EINVAL;
    *out = (int)x;
    return SL_OK;
}

/* A window: 5x5, 5 (square), or a 1-D shape. */
static sl_status read_window(const sl_cfg *cfg, const sl_cfg_value *v, const layer_def *d, const char *what, int *kh,
                             int *kw) {
    if (v->kind == SL_CV_NUMBER && v->is_int && v->inum >= 1 && v->inum <= 4096) {
        *kh = *kw = (int)v->inum;
        return SL_OK;
    }
    if (v->kind == SL_CV_SHAPE && v->ndims == 2 && v->dims[0] >= 1 && v->dims[1] >= 1 && v->dims[0] <= 4096 &&
        v->dims[1] <= 4096) {
        *kh = (int)v->dims[0];
        *kw = (int)v->dims[1];
        return SL_OK;
    }
    sl_cfg_err(cfg, v->loc, SL_EINVAL, "%s: %s must be HxW (e.g. 5x5) with sizes 1..4096, found '%s'", d->name, what,
               v->text ? v->text : "?");
    sl_err_hint("usage: %s", d->usage);
    return SL_EINVAL;
}

static sl_status read_choice(const sl_cfg *cfg, const sl_cfg_value *v, const char *what, const char *const *words,
                             int n, int *out) {
    const char *w = NULL;
    if (sl_cfg_word(cfg, v, &w)) return SL_EINVAL;
    for (int i = 0; i < n; i++)
        if (strcmp(w, words[i]) == 0) {
            *out = i;
            return SL_OK;
        }
    sl_cfg_err(cfg, v->loc, SL_EINVAL, "unknown %s '%s'", what, w);
    const char *sug = sl_suggest(w, words, n);
    char list[128];
    join(words, n, list, sizeof list);
    if (sug) sl_err_hint("did you mean '%s'? (%s: %s)", sug, what, list);
    else sl_err_hint("%s: %s", what, list);
    return SL_EINVAL;
}

/* A number in [lo, hi) or, with the flags, (lo, ...) / (..., hi]. */
static sl_status read_float(const sl_cfg *cfg, const sl_cfg_value *v, const char *what, double lo, double hi,
                            bool lo_open, bool hi_closed, float *out) {
    double x;
    if (sl_cfg_double(cfg, v, &x)) return SL_EINVAL;
    if (!(lo_open ? x > lo : x >= lo) || !(hi_closed ? x <= hi : x < hi))
        return sl_cfg_err(cfg, v->loc, SL_EINVAL, "%s %g must be in %c%g, %g%c", what, x, lo_open ? '(' : '[', lo, hi,
                          hi_closed ? ']' : ')');
    *out = (float)x;
    return SL_OK;
}

/* A layer statement's arguments against its definition: no '|', only its options, and
 * its number of positional arguments. SL_EINVAL with the spot and the usage otherwise. */
static sl_status check_args(const sl_cfg *cfg, const sl_cfg_stmt *s, const layer_def *d) {
    int npos = sl_cfg_npos(s);
    for (int i = 0; i < s->nargs; i++) {
        const sl_cfg_arg *a = &s->args[i];
        if (a->v.kind == SL_CV_PIPE) {
            sl_cfg_err(cfg, a->v.loc, SL_EINVAL, "%s: unexpected '|'", d->name);
            sl_err_hint("usage: %s", d->usage);
            return SL_EINVAL;
        }
        if (!a->key) continue;
        int nopt = 0;
        bool ok = false;
        while (d->opts[nopt]) ok |= strcmp(d->opts[nopt++], a->key) == 0;
        if (!ok) {
            /* point at the key: it sits just before `=` and the value */
            sl_cfg_loc kl = a->v.loc;
            int klen = (int)strlen(a->key);
            if (kl.col > klen + 1) kl.col -= klen + 1, kl.len = klen;
            sl_cfg_err(cfg, kl, SL_EINVAL, "%s: unknown option '%s'", d->name, a->key);
            const char *sug = sl_suggest(a->key, d->opts, nopt);
            if (sug) sl_err_hint("did you mean '%s'? (usage: %s)", sug, d->usage);
            else sl_err_hint("usage: %s", d->usage);
            return SL_EINVAL;
        }
    }
    if (npos < d->min_pos || npos > d->max_pos) {
        const sl_cfg_value *extra = npos > d->max_pos ? sl_cfg_pos(s, d->max_pos) : NULL;
        char range[48];
        snprintf(range, sizeof range, "%d to %d layer names", d->min_pos, d->max_pos);
        sl_cfg_err(cfg, extra ? extra->loc : s->loc, SL_EINVAL, "%s takes %s, found %d", d->name,
                   d->max_pos == 0 ? "no positional arguments" : d->max_pos == 1 ? "one positional argument" : range,
                   npos);
        sl_err_hint("usage: %s", d->usage);
        return SL_EINVAL;
    }
    return SL_OK;
}

static sl_status build_spec(const sl_cfg *cfg, const sl_cfg_stmt *s, sl_layer_spec *sp) {
    const layer_def *d = NULL;
    for (int i = 0; i < NDEFS; i++)
        if (strcmp(s->name, DEFS[i].name) == 0) d = &DEFS[i];
    if (!d) {
        const char *names[NDEFS];
        for (int i = 0; i < NDEFS; i++) names[i] = DEFS[i].name;
        sl_cfg_err(cfg, s->loc, SL_EINVAL, "unknown layer '%s'", s->name);
        const char *sug = sl_suggest(s->name, names, NDEFS);
        char list[160];
        join(names, NDEFS, list, sizeof list);
        if (sug) sl_err_hint("did you mean '%s'? (layers: %s)", sug, list);
        else sl_err_hint("layers: %s", list);
        return SL_EINVAL;
    }
    if (s->has_body) return sl_cfg_err(cfg, s->loc, SL_EINVAL, "%s: a layer takes no { } block", d->name);
    memset(sp, 0, sizeof *sp);
    sp->kind = d->kind;
    if (check_args(cfg, s, d)) return SL_EINVAL;
    const sl_cfg_value *v;
    if ((v = sl_cfg_opt(s, "name"))) {
        const char *w;
        if (sl_cfg_word(cfg, v, &w)) return SL_EINVAL;
        if (strlen(w) == 0 || strlen(w) >= sizeof sp->name || strchr(w, '/'))
            return sl_cfg_err(cfg, v->loc, SL_EINVAL, "%s: name '%s' must be 1..%zu characters without '/'", d->name, w,
                              sizeof sp->name - 1);
        snprintf(sp->name, sizeof sp->name, "%s", w);
    }
    switch (d->kind) {
    case SL_LAYER_INPUT: {
        v = sl_cfg_pos(s, 0);
        if (v->kind == SL_CV_NUMBER && v->is_int && v->inum >= 1) {
            sp->rank = 1;
            sp->shape[0] = v->inum;
        } else if (v->kind == SL_CV_SHAPE && v->ndims >= 1 && v->ndims <= 3) {
            sp->rank = v->ndims;
            for (int i = 0; i < v->ndims; i++) {
                if (v->dims[i] < 1) return sl_cfg_err(cfg, v->loc, SL_EINVAL, "input: dimension %d is %lld", i, (long long)v->dims[i]);
                sp->shape[i] = v->dims[i];
            }
        } else {
            sl_cfg_err(cfg, v->loc, SL_EINVAL, "input: expected the shape of one example (1 to 3 dimensions), found '%s'",
                       v->text ? v->text : "?");
            sl_err_hint("usage: %s", d->usage);
            return SL_EINVAL;
        }
        break;
    }
    case SL_LAYER_DENSE:
    case SL_LAYER_CONV2D: {
        int units;
        if (read_pos_int(cfg, s, d, 1, 1 << 24, &units)) return SL_EINVAL;
        if (d->kind == SL_LAYER_DENSE) sp->units = units;
        else sp->filters = units;
        int act = 0;
        if ((v = sl_cfg_opt(s, "activation")) && read_choice(cfg, v, "activation", ACTS, 5, &act)) return SL_EINVAL;
        sp->activation = act == 4 ? 0 : act;
        if (d->kind == SL_LAYER_DENSE) break;
        if (!(v = sl_cfg_opt(s, "kernel"))) {
            sl_cfg_err(cfg, s->loc, SL_EINVAL, "conv2d: missing kernel=");
            sl_err_hint("usage: %s", d->usage);
            return SL_EINVAL;
        }
        if (read_window(cfg, v, d, "kernel", &sp->kh, &sp->kw)) return SL_EINVAL;
        sp->padding = SL_PAD_VALID;
        goto stride_padding;
    }
    case SL_LAYER_MAXPOOL:
    case SL_LAYER_AVGPOOL:
        if (read_window(cfg, sl_cfg_pos(s, 0), d, "window", &sp->kh, &sp->kw)) return SL_EINVAL;
        if (sp->kh != sp->kw)
            return sl_cfg_err(cfg, sl_cfg_pos(s, 0)->loc, SL_EINVAL, "%s: window %dx%d must be square", d->name, sp->kh, sp->kw);
        sp->padding = SL_PAD_VALID;
    stride_padding:
        if ((v = sl_cfg_opt(s, "stride"))) {
            int64_t st;
            if (sl_cfg_int(cfg, v, 1, 4096, &st)) return SL_EINVAL;
            sp->stride = (int)st;
        }
        if ((v = sl_cfg_opt(s, "padding"))) {
            int p;
            if (read_choice(cfg, v, "padding", PADS, 2, &p)) return SL_EINVAL;
            sp->padding = p == 1 ? SL_PAD_SAME : SL_PAD_VALID;
        }
        break;
    case SL_LAYER_DROPOUT:
        if (read_float(cfg, sl_cfg_pos(s, 0), "dropout rate", 0.0, 1.0, false, false, &sp->rate)) return SL_EINVAL;
        break;
    case SL_LAYER_BATCHNORM:
        if ((v = sl_cfg_opt(s, "momentum")) && read_float(cfg, v, "momentum", 0.0, 1.0, true, true, &sp->momentum))
            return SL_EINVAL;
        if ((v = sl_cfg_opt(s, "eps")) && read_float(cfg, v, "eps", 0.0, 1.0, true, false, &sp->eps)) return SL_EINVAL;
        break;
    default:
        break;
    }
    return SL_OK;
}

/* The spec index of the layer that v (statement i's reference) names: an earlier one's. names
 * are the n layers' names; cand has room for n pointers. */
static sl_status resolve_ref(const sl_cfg *cfg, const sl_cfg_stmt *body, int i, int n, char (*names)[32],
                             const char **cand, const sl_cfg_value *v, int *out) {
    const char *w;
    if (sl_cfg_word(cfg, v, &w)) return SL_EINVAL;
    for (int j = 0; j < n; j++) {
        if (strcmp(names[j], w) != 0) continue;
        if (j < i) {
            *out = j;
            return SL_OK;
        }
        sl_cfg_err(cfg, v->loc, SL_EINVAL, "%s: '%s' is %s", body[i].name, w, j == i ? "this layer itself" : "a later layer");
        if (j > i) sl_err_hint("a layer reads only the layers above it; '%s' is at line %d", w, body[j].loc.line);
        else sl_err_hint("name a layer above this one");
        return SL_EINVAL;
    }
    for (int j = 0; j < i; j++) cand[j] = names[j];
    char list[256];
    join(cand, i, list, sizeof list);
    sl_cfg_err(cfg, v->loc, SL_EINVAL, "%s: no layer named '%s' above this one", body[i].name, w);
    const char *sug = sl_suggest(w, cand, i);
    if (sug) sl_err_hint("did you mean '%s'? (layers above: %s)", sug, list);
    else sl_err_hint("layers above: %s (unnamed layers are named Keras style: conv2d_1, add_1, ...)", list);
    return SL_EINVAL;
}

/* from= and the names of add / concat into the specs' input indices. */
static sl_status resolve_inputs(const sl_cfg *cfg, const sl_cfg_stmt *blk, sl_layer_spec *specs) {
    int n = blk->nbody;
    char (*names)[32] = calloc((size_t)n, sizeof *names);
    const char **cand = calloc((size_t)n, sizeof *cand);
    if (!names || !cand) {
        free(names);
        free(cand);
        return sl_err(SL_ENOMEM, "model: out of memory");
    }
    sl__model_layer_names(specs, n, names);
    sl_status s = SL_OK;
    for (int i = 1; i < n && !s; i++) {
        const sl_cfg_stmt *st = &blk->body[i];
        sl_layer_spec *sp = &specs[i];
        const sl_cfg_value *v = sl_cfg_opt(st, "from");
        if (v) {
            sp->ninputs = 1;
            s = resolve_ref(cfg, blk->body, i, n, names, cand, v, &sp->inputs[0]);
        } else if (sp->kind == SL_LAYER_ADD || sp->kind == SL_LAYER_CONCAT) {
            int np = sl_cfg_npos(st), k = 0;
            if (np == 1) sp->inputs[k++] = i - 1;
            for (int a = 0; a < np && !s; a++) s = resolve_ref(cfg, blk->body, i, n, names, cand, sl_cfg_pos(st, a), &sp->inputs[k++]);
            sp->ninputs = k;
        }
    }
    free(names);
    free(cand);
    return s;
}

sl_status sl_model_from_config(const sl_cfg *cfg, const char *name, const sl_model_opts *opts, sl_model **out) {
    *out = NULL;
    int nroot;
    const sl_cfg_stmt *root = sl_cfg_root(cfg, &nroot);
    const sl_cfg_stmt *blk = NULL;
    const char *names[64];
    int nnames = 0;
    for (int i = 0; i < nroot; i++) {
        if (strcmp(root[i].name, "model") != 0) continue;
        const sl_cfg_value *v = sl_cfg_pos(&root[i], 0);
        const char *mn = v && (v->kind == SL_CV_IDENT || v->kind == SL_CV_STRING) ? v->text : NULL;
        if (mn && nnames < 64) names[nnames++] = mn;
        if (!blk && (!name || (mn && strcmp(mn, name) == 0))) blk = &root[i];
    }
    if (!blk) {
        const char *file = sl_cfg_filename(cfg);
        if (nnames == 0) {
            sl_err(SL_ENOTFOUND, "%s: no model block%s%s%s", file ? file : "config", name ? " named '" : "",
                   name ? name : "", name ? "'" : "");
            sl_err_hint("add `model %s { input 28x28x1 ... dense 10 }`", name ? name : "NAME");
            return SL_ENOTFOUND;
        }
        char list[256];
        join(names, nnames, list, sizeof list);
        sl_err(SL_ENOTFOUND, "%s: no model named '%s'", file ? file : "config", name);
        const char *sug = sl_suggest(name, names, nnames);
        if (sug) sl_err_hint("did you mean '%s'? (models: %s)", sug, list);
        else sl_err_hint("models in this file: %s", list);
        return SL_ENOTFOUND;
    }
    const char *mname = sl_cfg_pos(blk, 0) ? sl_cfg_pos(blk, 0)->text : "";
    if (!blk->has_body || blk->nbody == 0) {
        sl_cfg_err(cfg, blk->loc, SL_EINVAL, "model '%s' has no layers", mname);
        sl_err_hint("model %s { input 28x28x1; flatten; dense 128 activation=relu; dense 10 }", mname);
        return SL_EINVAL;
    }
    sl_layer_spec *specs = calloc((size_t)blk->nbody, sizeof *specs);
    if (!specs) return sl_err(SL_ENOMEM, "model '%s': out of memory", mname);
    sl_status s = SL_OK;
    for (int i = 0; i < blk->nbody && !s; i++) s = build_spec(cfg, &blk->body[i], &specs[i]);
    if (!s && specs[0].kind != SL_LAYER_INPUT) {
        s = sl_cfg_err(cfg, blk->body[0].loc, SL_EINVAL, "model '%s': the first layer must be input, found '%s'", mname,
                       blk->body[0].name);
        sl_err_hint("start the model with the shape of one example, e.g. `input 28x28x1`");
    }
    for (int i = 1; i < blk->nbody && !s; i++)
        if (specs[i].kind == SL_LAYER_INPUT) {
            s = sl_cfg_err(cfg, blk->body[i].loc, SL_EINVAL, "model '%s': input must come first, and only once", mname);
        }
    if (!s) s = resolve_inputs(cfg, blk, specs);
    if (!s) {
        s = sl_model_create(specs, blk->nbody, opts, out);
        int li;
        /* Shape errors name the layer ("model: layer 3 (conv2d_1): ..."): show them at
         * the statement of that layer, keeping the hint. */
        if (s == SL_EINVAL && sscanf(sl_errmsg(), "model: layer %d", &li) == 1 && li >= 0 && li < blk->nbody) {
            char msg[1024], hint[512] = "";
            snprintf(msg, sizeof msg, "%s", sl_errmsg() + strlen("model: "));
            char *h = strstr(msg, "\n---> HINT: ");
            if (h) {
                snprintf(hint, sizeof hint, "%s", h + strlen("\n---> HINT: "));
                *h = 0;
            }
            sl_cfg_err(cfg, blk->body[li].loc, SL_EINVAL, "%s", msg);
            if (hint[0]) sl_err_hint("%s", hint);
        } else if (s == SL_EINVAL && strncmp(sl_errmsg(), "model: the last layer", 21) == 0) {
            char msg[1024], hint[512] = "";
            snprintf(msg, sizeof msg, "%s", sl_errmsg() + strlen("model: "));
            char *h = strstr(msg, "\n---> HINT: ");
            if (h) {
                snprintf(hint, sizeof hint, "%s", h + strlen("\n---> HINT: "));
                *h = 0;
            }
            sl_cfg_err(cfg, blk->body[blk->nbody - 1].loc, SL_EINVAL, "%s", msg);
            if (hint[0]) sl_err_hint("%s", hint);
        }
    }
    free(specs);
    return s;
}
