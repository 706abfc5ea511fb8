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
 * Blocks (top level, beside models): `block NAME(PARAM, PARAM=DEFAULT) { layers }`, used in
 * a model as `NAME ARGS [PARAM=VALUE] [name=INSTANCE]` (below).
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
#include "train/internal.h"

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

/* ---- blocks: `block NAME(PARAM, PARAM=DEFAULT) { layers }` used in a model as a statement
 * `NAME ARG... [PARAM=VALUE] [name=INSTANCE]`. The block's layers are copied into the model
 * with every identifier argument that names a parameter replaced by its value; inside, `in`
 * names the layer before the instance (the block's input) and local names are prefixed
 * with the instance's name ("s2b1_main"); the last layer is named after the instance, so
 * later layers read the block's output by that name. Instances may nest (8 deep). */

#define BLOCK_DEPTH 8
#define BLOCK_PARAMS 16
#define MAX_LAYERS 100000

/* A model statement after block expansion: spec i comes from xs[i]. */
typedef struct xstmt {
    sl_cfg_stmt st;    /* the statement; inside a block, its arguments with parameters replaced */
    char prefix[32];   /* the instance's name inside a block ("" at the model's level) */
    int in_spec;       /* inside a block: the layer before the instance (what `in` names) */
    bool last;         /* the last layer of an instance: named after it */
} xstmt;

typedef struct expander {
    const sl_cfg *cfg;
    const sl_cfg_stmt *root;
    int nroot;
    xstmt *xs;
    int n, cap;
    sl_cfg_arg **owned; /* the substituted argument arrays */
    int nowned, capowned;
    int *counts;        /* instances of each root statement (block) so far: default names */
} expander;

static void expander_free(expander *e) {
    for (int i = 0; i < e->nowned; i++) free(e->owned[i]);
    free(e->owned);
    free(e->xs);
    free(e->counts);
}

/* The block definition named `name`, or NULL; *idx its root index. A malformed definition
 * is an error (SL_EINVAL at it), reported when any block is looked up. */
static sl_status find_block(expander *e, const char *name, const sl_cfg_stmt **out, int *idx) {
    *out = NULL;
    for (int i = 0; i < e->nroot; i++) {
        const sl_cfg_stmt *d = &e->root[i];
        if (strcmp(d->name, "block") != 0) continue;
        const sl_cfg_value *v = sl_cfg_pos(d, 0);
        bool ok = v && (v->kind == SL_CV_CALL || v->kind == SL_CV_IDENT) && d->has_body && d->nbody > 0 &&
                  sl_cfg_npos(d) == 1 && (v->kind == SL_CV_IDENT || v->nargs <= BLOCK_PARAMS);
        for (int k = 0; ok && v->kind == SL_CV_CALL && k < v->nargs; k++)
            ok = v->args[k].key ? v->args[k].sep == '=' : v->args[k].v.kind == SL_CV_IDENT;
        if (!ok) {
            sl_cfg_err(e->cfg, d->loc, SL_EINVAL, "block: expected `block NAME(PARAM, PARAM=DEFAULT) { layers }`");
            sl_err_hint("e.g. block basic(filters, stride=1) { conv2d filters kernel=3x3 stride=stride padding=same; "
                        "add in }; at most %d parameters", BLOCK_PARAMS);
            return SL_EINVAL;
        }
        for (int k = 0; k < NDEFS; k++)
            if (strcmp(v->text, DEFS[k].name) == 0) {
                sl_cfg_err(e->cfg, v->loc, SL_EINVAL, "block '%s': a layer has that name", v->text);
                sl_err_hint("name the block otherwise, e.g. '%s_block'", v->text);
                return SL_EINVAL;
            }
        if (!*out && strcmp(v->text, name) == 0) {
            *out = d;
            *idx = i;
        }
    }
    return SL_OK;
}

static const char *param_name(const sl_cfg_arg *a) { return a->key ? a->key : a->v.text; }

/* Statement s with identifier arguments that name a parameter (pnames[0..np)) replaced by
 * their values; the copy's arguments are owned by e. */
static sl_status substitute(expander *e, const sl_cfg_stmt *s, const char *const *pnames, const sl_cfg_value *vals,
                            int np, sl_cfg_stmt *out) {
    *out = *s;
    if (np == 0 || s->nargs == 0) return SL_OK;
    if (e->nowned == e->capowned) {
        int cap = e->capowned ? 2 * e->capowned : 64;
        sl_cfg_arg **o = realloc(e->owned, (size_t)cap * sizeof *o);
        if (!o) return sl_err(SL_ENOMEM, "model: out of memory");
        e->owned = o;
        e->capowned = cap;
    }
    sl_cfg_arg *args = malloc((size_t)s->nargs * sizeof *args);
    if (!args) return sl_err(SL_ENOMEM, "model: out of memory");
    e->owned[e->nowned++] = args;
    for (int i = 0; i < s->nargs; i++) {
        args[i] = s->args[i];
        if (args[i].v.kind != SL_CV_IDENT) continue;
        for (int k = 0; k < np; k++)
            if (strcmp(args[i].v.text, pnames[k]) == 0) args[i].v = vals[k];
    }
    out->args = args;
    return SL_OK;
}

static sl_status expand_body(expander *e, const sl_cfg_stmt *body, int nbody, const char *prefix, int in_spec,
                             const char *const *pnames, const sl_cfg_value *vals, int np, int depth);

/* Instance statement s (arguments already substituted) of block d: bind its arguments to
 * the parameters and expand the body. */
static sl_status expand_instance(expander *e, const sl_cfg_stmt *s, const sl_cfg_stmt *d, int didx,
                                 const char *prefix, int depth) {
    const sl_cfg_value *sig = sl_cfg_pos(d, 0);
    int np = sig->kind == SL_CV_CALL ? sig->nargs : 0;
    const char *pnames[BLOCK_PARAMS];
    sl_cfg_value vals[BLOCK_PARAMS];
    bool bound[BLOCK_PARAMS] = {false};
    char usage[256];
    size_t o = (size_t)snprintf(usage, sizeof usage, "%s", s->name);
    for (int k = 0; k < np; k++) {
        pnames[k] = param_name(&sig->args[k]);
        o += (size_t)snprintf(usage + (o < sizeof usage ? o : sizeof usage), o < sizeof usage ? sizeof usage - o : 0,
                              sig->args[k].key ? " [%s=%s]" : " %s%s", pnames[k],
                              sig->args[k].key ? (sig->args[k].v.text ? sig->args[k].v.text : "...") : "");
    }
    if (depth >= BLOCK_DEPTH) {
        sl_cfg_err(e->cfg, s->loc, SL_EINVAL, "block '%s': blocks nest more than %d deep", s->name, BLOCK_DEPTH);
        sl_err_hint("a block that uses itself never ends");
        return SL_EINVAL;
    }
    const sl_cfg_value *iname = NULL;
    for (int i = 0, pi = 0; i < s->nargs; i++) {
        const sl_cfg_arg *a = &s->args[i];
        int k = -1;
        if (a->key && strcmp(a->key, "name") == 0) {
            iname = &a->v;
            continue;
        }
        if (a->key) {
            for (int j = 0; j < np; j++)
                if (strcmp(pnames[j], a->key) == 0) k = j;
        } else {
            k = pi++ < np ? pi - 1 : -2;
        }
        if (k < 0 || a->v.kind == SL_CV_PIPE) {
            sl_cfg_err(e->cfg, a->key && a->kloc.line ? a->kloc : a->v.loc, SL_EINVAL, "%s: %s", s->name,
                       a->key ? "no such parameter" : k == -2 ? "more arguments than parameters" : "unexpected '|'");
            sl_err_hint("usage: %s [name=NAME]", usage);
            return SL_EINVAL;
        }
        vals[k] = a->v;
        bound[k] = true;
    }
    for (int k = 0; k < np; k++) {
        if (bound[k]) continue;
        if (!sig->args[k].key) {
            sl_cfg_err(e->cfg, s->loc, SL_EINVAL, "%s: missing argument '%s'", s->name, pnames[k]);
            sl_err_hint("usage: %s [name=NAME]", usage);
            return SL_EINVAL;
        }
        vals[k] = sig->args[k].v;
    }
    char inst[32];
    const char *w = NULL;
    if (iname && sl_cfg_word(e->cfg, iname, &w)) return SL_EINVAL;
    int len = w ? snprintf(inst, sizeof inst, "%s%s%s", prefix, prefix[0] ? "_" : "", w)
                : snprintf(inst, sizeof inst, "%s_%d", s->name, ++e->counts[didx]);
    if (len >= (int)sizeof inst || (w && (!w[0] || strchr(w, '/')))) {
        return sl_cfg_err(e->cfg, iname ? iname->loc : s->loc, SL_EINVAL,
                          "%s: instance name '%s%s%s' must be 1..%zu characters without '/'", s->name, prefix,
                          prefix[0] ? "_" : "", w ? w : s->name, sizeof inst - 1);
    }
    const sl_cfg_stmt *lastst = &d->body[d->nbody - 1];
    const sl_cfg_stmt *dummy;
    int di;
    if (find_block(e, lastst->name, &dummy, &di)) return SL_EINVAL;
    if (dummy) {
        sl_cfg_err(e->cfg, lastst->loc, SL_EINVAL, "block '%s': its last statement must be a layer, found block '%s'",
                   sig->text, lastst->name);
        sl_err_hint("the last layer gives the block's output and is named after the instance; end with e.g. `relu`");
        return SL_EINVAL;
    }
    return expand_body(e, d->body, d->nbody, inst, e->n - 1, pnames, vals, np, depth + 1);
}

static sl_status expand_body(expander *e, const sl_cfg_stmt *body, int nbody, const char *prefix, int in_spec,
                             const char *const *pnames, const sl_cfg_value *vals, int np, int depth) {
    for (int i = 0; i < nbody; i++) {
        sl_cfg_stmt st;
        sl_status s = substitute(e, &body[i], pnames, vals, np, &st);
        const sl_cfg_stmt *d;
        int didx;
        if (!s) s = find_block(e, st.name, &d, &didx);
        if (s) return s;
        if (d) {
            if ((s = expand_instance(e, &st, d, didx, prefix, depth))) return s;
            continue;
        }
        if (e->n >= MAX_LAYERS) return sl_cfg_err(e->cfg, st.loc, SL_EINVAL, "model: more than %d layers", MAX_LAYERS);
        if (e->n == e->cap) {
            int cap = e->cap ? 2 * e->cap : 64;
            xstmt *x = realloc(e->xs, (size_t)cap * sizeof *x);
            if (!x) return sl_err(SL_ENOMEM, "model: out of memory");
            e->xs = x;
            e->cap = cap;
        }
        xstmt *x = &e->xs[e->n++];
        memset(x, 0, sizeof *x);
        x->st = st;
        snprintf(x->prefix, sizeof x->prefix, "%s", prefix);
        x->in_spec = in_spec;
        x->last = prefix[0] && i == nbody - 1;
    }
    return SL_OK;
}

/* Inside an instance: layer names prefixed with the instance's, the last one the
 * instance's own. */
static sl_status name_in_block(const sl_cfg *cfg, const xstmt *x, sl_layer_spec *sp) {
    if (!x->prefix[0]) return SL_OK;
    char full[80];
    if (x->last) snprintf(full, sizeof full, "%s", x->prefix);
    else if (sp->name[0]) snprintf(full, sizeof full, "%s_%s", x->prefix, sp->name);
    else return SL_OK;
    if (strlen(full) >= sizeof sp->name) {
        const sl_cfg_value *v = sl_cfg_opt(&x->st, "name");
        sl_cfg_err(cfg, v ? v->loc : x->st.loc, SL_EINVAL, "%s: layer name '%s' is longer than %zu characters",
                   x->st.name, full, sizeof sp->name - 1);
        sl_err_hint("shorten the instance's name (name=) or this layer's");
        return SL_EINVAL;
    }
    snprintf(sp->name, sizeof sp->name, "%s", full);
    return SL_OK;
}

/* The spec index of the layer that v (expanded statement i's reference) names: an earlier
 * one's. Inside an instance a name is first the instance's local one, then `in`, then the
 * model's. names are the n layers' names; cand has room for n pointers. */
static sl_status resolve_ref(const sl_cfg *cfg, const xstmt *xs, int i, int n, char (*names)[32],
                             const char **cand, const sl_cfg_value *v, int *out) {
    const char *w;
    if (sl_cfg_word(cfg, v, &w)) return SL_EINVAL;
    const char *body_name = xs[i].st.name;
    if (xs[i].prefix[0]) {
        char local[80];
        snprintf(local, sizeof local, "%s_%s", xs[i].prefix, w);
        for (int j = 0; j < i; j++)
            if (strcmp(names[j], local) == 0) {
                *out = j;
                return SL_OK;
            }
        if (strcmp(w, "in") == 0) {
            *out = xs[i].in_spec;
            return SL_OK;
        }
    }
    for (int j = 0; j < n; j++) {
        if (strcmp(names[j], w) != 0) continue;
        if (j < i) {
            *out = j;
            return SL_OK;
        }
        sl_cfg_err(cfg, v->loc, SL_EINVAL, "%s: '%s' is %s", body_name, w, j == i ? "this layer itself" : "a later layer");
        if (j > i) sl_err_hint("a layer reads only the layers above it; '%s' is at line %d", w, xs[j].st.loc.line);
        else sl_err_hint("name a layer above this one");
        return SL_EINVAL;
    }
    for (int j = 0; j < i; j++) cand[j] = names[j];
    char list[256];
    join(cand, i, list, sizeof list);
    sl_cfg_err(cfg, v->loc, SL_EINVAL, "%s: no layer named '%s' above this one", body_name, w);
    const char *sug = sl_suggest(w, cand, i);
    if (sug) sl_err_hint("did you mean '%s'? (layers above: %s)", sug, list);
    else if (xs[i].prefix[0]) sl_err_hint("in a block: its own layers' names, `in` (the block's input), or the model's");
    else sl_err_hint("layers above: %s (unnamed layers are named Keras style: conv2d_1, add_1, ...)", list);
    return SL_EINVAL;
}

/* from= and the names of add / concat into the specs' input indices. */
static sl_status resolve_inputs(const sl_cfg *cfg, const xstmt *xs, int n, sl_layer_spec *specs) {
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
        const sl_cfg_stmt *st = &xs[i].st;
        sl_layer_spec *sp = &specs[i];
        const sl_cfg_value *v = sl_cfg_opt(st, "from");
        if (v) {
            sp->ninputs = 1;
            s = resolve_ref(cfg, xs, i, n, names, cand, v, &sp->inputs[0]);
        } else if (sp->kind == SL_LAYER_ADD || sp->kind == SL_LAYER_CONCAT) {
            int np = sl_cfg_npos(st), k = 0;
            if (np == 1) sp->inputs[k++] = i - 1;
            for (int a = 0; a < np && !s; a++) s = resolve_ref(cfg, xs, i, n, names, cand, sl_cfg_pos(st, a), &sp->inputs[k++]);
            sp->ninputs = k;
        }
    }
    free(names);
    free(cand);
    return s;
}

/* sl_model_create's "model: ..." message at the statement of the layer it names. */
static void at_statement(const sl_cfg *cfg, sl_cfg_loc loc) {
    char msg[1024], hint[512] = "";
    snprintf(msg, sizeof msg, "%s", sl_errmsg() + strlen("model: "));
    char *h = strstr(msg, "\n---> HINT: ");
    if (h) {
        snprintf(hint, sizeof hint, "%s", h + strlen("\n---> HINT: "));
        *h = 0;
    }
    sl_cfg_err(cfg, loc, SL_EINVAL, "%s", msg);
    if (hint[0]) sl_err_hint("%s", hint);
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
    expander e = {.cfg = cfg, .root = root, .nroot = nroot};
    e.counts = calloc((size_t)nroot + 1, sizeof(int));
    sl_status s = e.counts ? SL_OK : sl_err(SL_ENOMEM, "model '%s': out of memory", mname);
    if (!s) s = expand_body(&e, blk->body, blk->nbody, "", -1, NULL, NULL, 0, 0);
    int n = e.n;
    const xstmt *xs = e.xs;
    sl_layer_spec *specs = s ? NULL : calloc((size_t)n, sizeof *specs);
    if (!s && !specs) s = sl_err(SL_ENOMEM, "model '%s': out of memory", mname);
    for (int i = 0; i < n && !s; i++) {
        s = build_spec(cfg, &xs[i].st, &specs[i]);
        if (!s) s = name_in_block(cfg, &xs[i], &specs[i]);
    }
    if (!s && specs[0].kind != SL_LAYER_INPUT) {
        s = sl_cfg_err(cfg, xs[0].st.loc, SL_EINVAL, "model '%s': the first layer must be input, found '%s'", mname,
                       xs[0].st.name);
        sl_err_hint("start the model with the shape of one example, e.g. `input 28x28x1`");
    }
    for (int i = 1; i < n && !s; i++)
        if (specs[i].kind == SL_LAYER_INPUT) {
            s = sl_cfg_err(cfg, xs[i].st.loc, SL_EINVAL, "model '%s': input must come first, and only once", mname);
        }
    if (!s) s = resolve_inputs(cfg, xs, n, specs);
    if (!s) {
        s = sl_model_create(specs, n, opts, out);
        int li;
        /* Shape errors name the layer ("model: layer 3 (conv2d_1): ..."): show them at
         * the statement of that layer, keeping the hint. */
        if (s == SL_EINVAL && sscanf(sl_errmsg(), "model: layer %d", &li) == 1 && li >= 0 && li < n)
            at_statement(cfg, xs[li].st.loc);
        else if (s == SL_EINVAL && strncmp(sl_errmsg(), "model: the last layer", 21) == 0)
            at_statement(cfg, xs[n - 1].st.loc);
    }
    expander_free(&e);
    free(specs);
    return s;
}
