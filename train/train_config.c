/* The `train { }` block of the config language -> sl_train_config (see sluice/train.h for
 * the statements). Every mistake is reported at the statement or value with sl_cfg_err and
 * a hint: the statement's usage, or "did you mean ...?" for an unknown name.
 * Workload: one block of a dozen statements, read once per run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/from_config.h"
#include "sluice/train.h"
#include "train/internal.h"

typedef struct {
    const char *name;
    const char *usage;
    const char *opts[10]; /* allowed keys, NULL-terminated */
} stmt_def;

static const stmt_def DEFS[] = {
    {"model", "model NAME            (a `model NAME { }` block)", {NULL}},
    {"data", "data PIPELINE [image=COMPONENT] [label=COMPONENT]", {"image", "label", NULL}},
    {"eval", "eval PIPELINE [every=EPOCHS | steps=N]   or   eval none", {"every", "steps", NULL}},
    {"epochs", "epochs N", {NULL}},
    {"steps", "steps N", {NULL}},
    {"optimizer", "optimizer sgd|adam|adamw lr=X [momentum=X] [nesterov=BOOL] [weight_decay=X]\n"
                  "          [decay_exclude=[bias, batchnorm]] [beta1=X] [beta2=X] [eps=X]",
     {"lr", "momentum", "nesterov", "weight_decay", "decay_exclude", "beta1", "beta2", "eps", NULL}},
    {"label_smoothing", "label_smoothing E      (0 <= E < 1: the loss's target is (1-E) onehot + E/classes; default 0)",
     {NULL}},
    {"schedule", "schedule constant | step every=N gamma=G | cosine [total=N] [min_lr=X]   [warmup=N]",
     {"warmup", "every", "gamma", "total", "min_lr", NULL}},
    {"checkpoint", "checkpoint every=EPOCHS | steps=N [keep=K]   or   checkpoint none",
     {"every", "steps", "keep", NULL}},
    {"run_dir", "run_dir \"PATH\"", {NULL}},
    {"backend", "backend auto|cpu|cuda", {NULL}},
    {"precision", "precision fp32|bf16|fp16   (GEMMs in bfloat16 / half with float32 accumulation and float32\n"
                  "          weights; fp16 with dynamic loss scaling; default fp32)", {NULL}},
    {"device", "device N             (the GPU to use; default: local rank % visible GPUs)", {NULL}},
    {"threads", "threads N            (CPU backend threads, 0: all cores)", {NULL}},
    {"seed", "seed N", {NULL}},
    {"log", "log [every=N] [layout=sluice|keras]   (TensorBoard train scalars every N steps; default: once per epoch;\n"
            "      layout=keras: Keras' TensorBoard callback's folders, tags and steps)", {"every", "layout", NULL}},
    {"bucket_mb", "bucket_mb MB         (strategy ring: gradient buckets of MB MiB allreduced during backward;\n"
                  "          0: off, one allreduce after backward; default 25)", {NULL}},
    {"strategy", "strategy none | ring | ps [mode=async|sync] [staleness=K]\n"
                 "          ring and ps: [compress=none|fp16|int8|sign|topk(F)]   (F: the fraction kept, e.g. topk(0.01))\n"
                 "          ring: [path=auto|shm|tcp]   (auto: shared memory when every replica is on one host)",
     {"mode", "staleness", "compress", "path", NULL}},
};
#define NDEFS ((int)(sizeof DEFS / sizeof DEFS[0]))

static const stmt_def *find_def(const char *name) {
    for (int i = 0; i < NDEFS; i++)
        if (strcmp(DEFS[i].name, name) == 0) return &DEFS[i];
    return NULL;
}

static sl_status usage_hint(sl_status s, const stmt_def *d) {
    sl_err_hint("usage: %s", d->usage);
    return s;
}

/* Unknown options and the arity of positionals. */
static sl_status check_stmt(const sl_cfg *cfg, const sl_cfg_stmt *s, const stmt_def *d, int min_pos,
                            int max_pos) {
    for (int i = 0; i < s->nargs; i++) {
        const sl_cfg_arg *a = &s->args[i];
        if (!a->key) continue;
        bool ok = false;
        int n = 0;
        while (d->opts[n]) {
            if (strcmp(d->opts[n], a->key) == 0) ok = true;
            n++;
        }
        if (!ok) {
            sl_cfg_err(cfg, a->v.loc, SL_EINVAL, "%s: unknown option '%s'", s->name, a->key);
            const char *sug = n ? sl_suggest(a->key, d->opts, n) : NULL;
            if (sug) sl_err_hint("did you mean '%s'? usage: %s", sug, d->usage);
            else usage_hint(0, d);
            return SL_EINVAL;
        }
    }
    if (s->has_body) {
        sl_cfg_err(cfg, s->loc, SL_EINVAL, "%s takes no { } block", s->name);
        return usage_hint(SL_EINVAL, d);
    }
    int np = sl_cfg_npos(s);
    if (np < min_pos) {
        sl_cfg_err(cfg, s->loc, SL_EINVAL, "%s needs %s", s->name, min_pos == 1 ? "a value" : "more values");
        return usage_hint(SL_EINVAL, d);
    }
    if (np > max_pos) {
        sl_cfg_err(cfg, sl_cfg_pos(s, max_pos)->loc, SL_EINVAL, "%s: unexpected value", s->name);
        return usage_hint(SL_EINVAL, d);
    }
    return SL_OK;
}

static sl_status read_word(const sl_cfg *cfg, const sl_cfg_value *v, char *dst, size_t cap) {
    const char *w;
    if (sl_cfg_word(cfg, v, &w)) return sl_errcode();
    if (strlen(w) >= cap) return sl_cfg_err(cfg, v->loc, SL_ERANGE, "'%s' is too long (at most %zu bytes)", w, cap - 1);
    memcpy(dst, w, strlen(w) + 1);
    return SL_OK;
}

static sl_status read_float(const sl_cfg *cfg, const sl_cfg_value *v, double min, double max, float *out) {
    double d;
    if (sl_cfg_double(cfg, v, &d)) return sl_errcode();
    if (!(d >= min && d <= max)) return sl_cfg_err(cfg, v->loc, SL_ERANGE, "%g is outside %g..%g", d, min, max);
    *out = (float)d;
    return SL_OK;
}

/* One of a fixed set of words; an unknown one gets "did you mean". */
static sl_status read_choice(const sl_cfg *cfg, const sl_cfg_value *v, const char *const *choices, int n,
                             int *out) {
    const char *w;
    if (sl_cfg_word(cfg, v, &w)) return sl_errcode();
    for (int i = 0; i < n; i++)
        if (strcmp(w, choices[i]) == 0) {
            *out = i;
            return SL_OK;
        }
    char list[256] = "";
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, i ? ", %s" : "%s", choices[i]);
    sl_cfg_err(cfg, v->loc, SL_EINVAL, "unknown value '%s' (expected one of: %s)", w, list);
    const char *sug = sl_suggest(w, choices, n);
    if (sug) sl_err_hint("did you mean '%s'?", sug);
    return SL_EINVAL;
}

/* every=N / steps=N (exclusive), into *e; `none`/`off` as the first positional clears. */
static sl_status read_every(const sl_cfg *cfg, const sl_cfg_stmt *s, const stmt_def *d, sl_train_every *e) {
    const sl_cfg_value *ev = sl_cfg_opt(s, "every"), *st = sl_cfg_opt(s, "steps");
    if (ev && st) {
        sl_cfg_err(cfg, st->loc, SL_EINVAL, "%s: give every=EPOCHS or steps=N, not both", s->name);
        return usage_hint(SL_EINVAL, d);
    }
    if (ev) {
        e->steps = 0;
        if (sl_cfg_int(cfg, ev, 1, INT32_MAX, &e->epochs)) return usage_hint(sl_errcode(), d);
    } else if (st) {
        e->epochs = 0;
        if (sl_cfg_int(cfg, st, 1, INT64_MAX / 2, &e->steps)) return usage_hint(sl_errcode(), d);
    }
    return SL_OK;
}

static bool is_none(const sl_cfg_value *v) {
    return v && v->kind == SL_CV_IDENT && (strcmp(v->text, "none") == 0 || strcmp(v->text, "off") == 0);
}

static const sl_cfg_stmt *find_block(const sl_cfg *cfg, const char *kind, const char *name) {
    int n;
    const sl_cfg_stmt *root = sl_cfg_root(cfg, &n);
    for (int i = 0; i < n; i++) {
        if (strcmp(root[i].name, kind) != 0 || !root[i].has_body) continue;
        const sl_cfg_value *v = sl_cfg_pos(&root[i], 0);
        if (v && (v->kind == SL_CV_IDENT || v->kind == SL_CV_STRING) && strcmp(v->text, name) == 0)
            return &root[i];
    }
    return NULL;
}

/* "a, b, c" of the names of `kind NAME { }` blocks, for hints. */
static void block_names(const sl_cfg *cfg, const char *kind, char *out, size_t cap) {
    int n;
    const sl_cfg_stmt *root = sl_cfg_root(cfg, &n);
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < n && len < cap; i++) {
        if (strcmp(root[i].name, kind) != 0 || !root[i].has_body) continue;
        const sl_cfg_value *v = sl_cfg_pos(&root[i], 0);
        if (!v || !v->text) continue;
        len += (size_t)snprintf(out + len, cap - len, len ? ", %s" : "%s", v->text);
    }
}

/* A named model/pipeline block must exist; its `batch N` (pipelines) into *batch. */
static sl_status check_block(const sl_cfg *cfg, const sl_cfg_stmt *at, const char *kind, const char *name,
                             int64_t *batch) {
    const sl_cfg_stmt *b = find_block(cfg, kind, name);
    if (!b) {
        char names[512];
        block_names(cfg, kind, names, sizeof names);
        sl_cfg_err(cfg, sl_cfg_pos(at, 0)->loc, SL_ENOTFOUND, "no `%s %s { }` block in this file", kind, name);
        if (names[0]) sl_err_hint("the %s blocks here are: %s", kind, names);
        else sl_err_hint("add a `%s %s { ... }` block", kind, name);
        return SL_ENOTFOUND;
    }
    if (!batch) return SL_OK;
    const sl_cfg_stmt *bs = NULL;
    for (int i = 0; i < b->nbody; i++)
        if (strcmp(b->body[i].name, "batch") == 0) bs = &b->body[i];
    const sl_cfg_value *v = bs ? sl_cfg_pos(bs, 0) : NULL;
    if (!v) {
        sl_cfg_err(cfg, b->loc, SL_EINVAL, "pipeline '%s' has no `batch N` statement: the trainer takes batches",
                   name);
        sl_err_hint("add e.g. `batch 128 drop_remainder` after the map");
        return SL_EINVAL;
    }
    return sl_cfg_int(cfg, v, 1, 1 << 24, batch);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) { return sl_fnv1a64(h, p, n); }

static uint64_t hash_value(uint64_t h, const sl_cfg_value *v) {
    h = fnv(h, &v->kind, sizeof v->kind);
    if (v->kind == SL_CV_NUMBER) h = fnv(h, &v->num, sizeof v->num);
    else if (v->text) h = fnv(h, v->text, strlen(v->text) + 1);
    for (int i = 0; i < v->nargs; i++) {
        if (v->args[i].key) h = fnv(h, v->args[i].key, strlen(v->args[i].key) + 1);
        h = hash_value(h, &v->args[i].v);
    }
    return h;
}

/* The hash of a statement tree: names, keys and values, not positions or comments, so
 * reformatting the block keeps the hash and changing a layer changes it. */
static uint64_t hash_stmt(uint64_t h, const sl_cfg_stmt *s) {
    h = fnv(h, s->name, strlen(s->name) + 1);
    for (int i = 0; i < s->nargs; i++) {
        if (s->args[i].key) h = fnv(h, s->args[i].key, strlen(s->args[i].key) + 1);
        h = hash_value(h, &s->args[i].v);
    }
    for (int i = 0; i < s->nbody; i++) h = hash_stmt(h, &s->body[i]);
    return fnv(h, "}", 1);
}

/* The definition `block NAME(PARAMS) { }` (or `block NAME { }`) named name, or NULL: the
 * first of that name, as the model's expansion takes it (train/model_config.c). */
static const sl_cfg_stmt *block_def(const sl_cfg *cfg, const char *name) {
    int n;
    const sl_cfg_stmt *root = sl_cfg_root(cfg, &n);
    for (int i = 0; i < n; i++) {
        const sl_cfg_value *v = sl_cfg_pos(&root[i], 0);
        if (strcmp(root[i].name, "block") == 0 && root[i].has_body && v &&
            (v->kind == SL_CV_CALL || v->kind == SL_CV_IDENT) && strcmp(v->text, name) == 0)
            return &root[i];
    }
    return NULL;
}

/* The model's hash: its block's statements, then the definition of every block it uses
 * (directly or inside another block), each once in the order of first use, so a change
 * inside a block used by the model (relu to sigmoid) changes the hash as the same change
 * in the model block does, and blocks the model does not use do not count. A model that
 * uses no block hashes as its block alone. `used` has room for `cap` definitions (the
 * config's top-level statements). */
static uint64_t hash_uses(const sl_cfg *cfg, uint64_t h, const sl_cfg_stmt *s, const sl_cfg_stmt **used, int *n,
                          int cap) {
    for (int i = 0; i < s->nbody; i++) {
        const sl_cfg_stmt *d = block_def(cfg, s->body[i].name);
        bool seen = !d;
        for (int k = 0; !seen && k < *n; k++) seen = used[k] == d;
        if (!seen && *n < cap) {
            used[(*n)++] = d;
            h = hash_stmt(h, d);
            h = hash_uses(cfg, h, d, used, n, cap); /* each definition once: the recursion ends */
        }
        h = hash_uses(cfg, h, &s->body[i], used, n, cap);
    }
    return h;
}

static uint64_t model_hash(const sl_cfg *cfg, const sl_cfg_stmt *model) {
    int nroot;
    sl_cfg_root(cfg, &nroot);
    const sl_cfg_stmt **used = calloc((size_t)nroot + 1, sizeof *used);
    if (!used) return 0; /* out of memory (0 is no hash: the caller fails) */
    int n = 0;
    uint64_t h = hash_uses(cfg, hash_stmt(0xcbf29ce484222325ULL, model), model, used, &n, nroot);
    free(used);
    return h;
}

static const char *const OPTIMS[] = {"sgd", "adam", "adamw"};
static const char *const SCHEDS[] = {"constant", "step", "cosine"};
static const char *const BACKENDS[] = {"auto", "cpu", "cuda"};
static const char *const STRATEGIES[] = {"none", "ring", "ps"};
static const char *const PRECISIONS[] = {"fp32", "bf16", "fp16"}; /* in sl_precision's order */

static const char *const DECAY_EXCLUDES[] = {"bias", "batchnorm"};

/* decay_exclude=bias | batchnorm | [bias, batchnorm] | none | [] into SL_DECAY_EXCLUDE_* bits. */
static sl_status read_decay_exclude(const sl_cfg *cfg, const sl_cfg_value *v, unsigned *out) {
    *out = 0;
    if (v->kind == SL_CV_IDENT && strcmp(v->text, "none") == 0) return SL_OK;
    int n = v->kind == SL_CV_LIST ? v->nargs : 1;
    for (int i = 0; i < n; i++) {
        const sl_cfg_value *w = v->kind == SL_CV_LIST ? &v->args[i].v : v;
        int k;
        if (w->kind != SL_CV_IDENT && w->kind != SL_CV_STRING) {
            sl_cfg_err(cfg, w->loc, SL_EINVAL, "decay_exclude takes the words bias and batchnorm");
            sl_err_hint("e.g. decay_exclude=[bias, batchnorm] (no decay on biases and batchnorm gamma/beta), "
                        "decay_exclude=bias, or decay_exclude=none");
            return SL_EINVAL;
        }
        if (read_choice(cfg, w, DECAY_EXCLUDES, 2, &k)) return sl_errcode();
        unsigned bit = k == 0 ? SL_DECAY_EXCLUDE_BIAS : SL_DECAY_EXCLUDE_BATCHNORM;
        if (*out & bit) {
            sl_cfg_err(cfg, w->loc, SL_EINVAL, "decay_exclude: '%s' is listed twice", DECAY_EXCLUDES[k]);
            sl_err_hint("list each of bias and batchnorm once");
            return SL_EINVAL;
        }
        *out |= bit;
    }
    return SL_OK;
}

static sl_status read_optimizer(const sl_cfg *cfg, const sl_cfg_stmt *s, const stmt_def *d, sl_train_config *c) {
    int k;
    if (read_choice(cfg, sl_cfg_pos(s, 0), OPTIMS, 3, &k)) return sl_errcode();
    sl_optim_spec o = {.kind = (sl_optim_kind)(SL_OPTIM_SGD + k)};
    const sl_cfg_value *v;
    if (!(v = sl_cfg_opt(s, "lr"))) {
        sl_cfg_err(cfg, s->loc, SL_EINVAL, "optimizer needs lr=");
        return usage_hint(SL_EINVAL, d);
    }
    if (read_float(cfg, v, 0, 100, &c->schedule.lr)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "momentum")) || (v = sl_cfg_opt(s, "nesterov"))) {
        if (o.kind != SL_OPTIM_SGD) {
            sl_cfg_err(cfg, v->loc, SL_EINVAL, "momentum and nesterov are options of sgd");
            return usage_hint(SL_EINVAL, d);
        }
    }
    if ((v = sl_cfg_opt(s, "beta1")) || (v = sl_cfg_opt(s, "beta2")) || (v = sl_cfg_opt(s, "eps"))) {
        if (o.kind == SL_OPTIM_SGD) {
            sl_cfg_err(cfg, v->loc, SL_EINVAL, "beta1, beta2 and eps are options of adam and adamw");
            return usage_hint(SL_EINVAL, d);
        }
    }
    if ((v = sl_cfg_opt(s, "momentum")) && read_float(cfg, v, 0, 0.999999, &o.momentum)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "nesterov")) && sl_cfg_bool(cfg, v, &o.nesterov)) return sl_errcode();
    if (o.nesterov && o.momentum == 0) {
        sl_cfg_err(cfg, v->loc, SL_EINVAL, "nesterov needs momentum > 0");
        return usage_hint(SL_EINVAL, d);
    }
    if ((v = sl_cfg_opt(s, "weight_decay")) && read_float(cfg, v, 0, 10, &o.weight_decay)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "decay_exclude")) && read_decay_exclude(cfg, v, &o.decay_exclude)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "beta1")) && read_float(cfg, v, 0, 0.999999, &o.beta1)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "beta2")) && read_float(cfg, v, 0, 0.999999999, &o.beta2)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "eps")) && read_float(cfg, v, 0, 1, &o.eps)) return sl_errcode();
    c->optim = o;
    return SL_OK;
}

static sl_status read_schedule(const sl_cfg *cfg, const sl_cfg_stmt *s, const stmt_def *d, sl_train_config *c) {
    int k;
    if (read_choice(cfg, sl_cfg_pos(s, 0), SCHEDS, 3, &k)) return sl_errcode();
    sl_schedule *sc = &c->schedule;
    float lr = sc->lr;
    *sc = (sl_schedule){.kind = (sl_sched_kind)k, .lr = lr, .gamma = 0.1f};
    const sl_cfg_value *v;
    if ((v = sl_cfg_opt(s, "warmup")) && sl_cfg_int(cfg, v, 0, INT64_MAX / 4, &sc->warmup)) return sl_errcode();
    const char *only_step[] = {"every", "gamma"}, *only_cos[] = {"total", "min_lr"};
    for (int i = 0; i < 2; i++) {
        if (sc->kind != SL_SCHED_STEP && (v = sl_cfg_opt(s, only_step[i]))) {
            sl_cfg_err(cfg, v->loc, SL_EINVAL, "%s= is an option of `schedule step`", only_step[i]);
            return usage_hint(SL_EINVAL, d);
        }
        if (sc->kind != SL_SCHED_COSINE && (v = sl_cfg_opt(s, only_cos[i]))) {
            sl_cfg_err(cfg, v->loc, SL_EINVAL, "%s= is an option of `schedule cosine`", only_cos[i]);
            return usage_hint(SL_EINVAL, d);
        }
    }
    if (sc->kind == SL_SCHED_STEP) {
        if (!(v = sl_cfg_opt(s, "every"))) {
            sl_cfg_err(cfg, s->loc, SL_EINVAL, "schedule step needs every=N (steps)");
            return usage_hint(SL_EINVAL, d);
        }
        if (sl_cfg_int(cfg, v, 1, INT64_MAX / 4, &sc->step_size)) return sl_errcode();
        if ((v = sl_cfg_opt(s, "gamma")) && read_float(cfg, v, 0, 1, &sc->gamma)) return sl_errcode();
    }
    if ((v = sl_cfg_opt(s, "total")) && sl_cfg_int(cfg, v, 1, INT64_MAX / 4, &sc->total)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "min_lr")) && read_float(cfg, v, 0, 100, &sc->min_lr)) return sl_errcode();
    return SL_OK;
}

static const char *const PS_MODES[] = {"async", "sync"};
static const char *const RING_PATHS[] = {"auto", "tcp", "shm"}; /* in sl_ring_path's order */

/* path= belongs to `strategy ring`: how the replicas reach each other (sluice/ring.h). */
static sl_status read_ring_path(const sl_cfg *cfg, const sl_cfg_stmt *s, sl_train_config *c) {
    c->ring_path = 0;
    const sl_cfg_value *v = sl_cfg_opt(s, "path");
    if (!v) return SL_OK;
    if (strcmp(c->strategy, "ring") != 0) {
        sl_cfg_err(cfg, v->loc, SL_EINVAL, "path= is an option of `strategy ring`, not of `strategy %s`", c->strategy);
        sl_err_hint("write `strategy ring path=...`, or drop the option");
        return SL_EINVAL;
    }
    int k;
    if (read_choice(cfg, v, RING_PATHS, 3, &k)) return sl_errcode();
    c->ring_path = k;
    return SL_OK;
}

/* mode= and staleness= belong to `strategy ps` alone: on ring or none they would be
 * silently meaningless. A later strategy statement (an override) resets them. */
static sl_status read_ps_options(const sl_cfg *cfg, const sl_cfg_stmt *s, const stmt_def *d, sl_train_config *c) {
    c->ps_sync = false;
    c->ps_staleness = -1;
    const sl_cfg_value *mv = sl_cfg_opt(s, "mode"), *kv = sl_cfg_opt(s, "staleness");
    if (strcmp(c->strategy, "ps") != 0 && (mv || kv)) {
        const sl_cfg_value *v = mv ? mv : kv;
        sl_cfg_err(cfg, v->loc, SL_EINVAL, "%s= is an option of `strategy ps`, not of `strategy %s`", mv ? "mode" : "staleness",
                   c->strategy);
        sl_err_hint("write `strategy ps %s=...`, or drop the option", mv ? "mode" : "staleness");
        return SL_EINVAL;
    }
    int k;
    if (mv) {
        if (read_choice(cfg, mv, PS_MODES, 2, &k)) return sl_errcode();
        c->ps_sync = k == 1;
    }
    if (kv) {
        int64_t st;
        if (sl_cfg_int(cfg, kv, 0, 1000000, &st)) return usage_hint(sl_errcode(), d);
        c->ps_staleness = (int)st;
    }
    return SL_OK;
}

static const char COMPRESS_CHOICES[] = "none, fp16, int8, sign, topk(F) (F in (0, 1], e.g. topk(0.01) or \"topk:0.01\")";

/* compress=none|fp16|int8|sign|topk(F), also "topk:F" as a string (a ':' cannot stand in a
 * bare word of the language). Only ring and ps exchange gradients; a later strategy
 * statement resets it. */
static sl_status read_compress(const sl_cfg *cfg, const sl_cfg_stmt *s, sl_train_config *c) {
    c->compress = (sl_compress_spec){0};
    const sl_cfg_value *v = sl_cfg_opt(s, "compress");
    if (!v) return SL_OK;
    if (strcmp(c->strategy, "none") == 0) {
        sl_cfg_err(cfg, v->loc, SL_EINVAL, "compress= is an option of `strategy ring` and `strategy ps`, not of "
                                           "`strategy none` (one replica sends no gradients)");
        sl_err_hint("write `strategy ring compress=...`, or drop the option");
        return SL_EINVAL;
    }
    char text[64];
    if (v->kind == SL_CV_CALL && v->text && strcmp(v->text, "topk") == 0) {
        if (v->nargs < 1 || v->nargs > 2 || v->args[0].key || v->args[0].v.kind != SL_CV_NUMBER) {
            sl_cfg_err(cfg, v->loc, SL_EINVAL, "compress=topk(F) takes one number, the fraction kept");
            sl_err_hint("e.g. compress=topk(0.01) keeps the largest 1%% of each bucket; the choices: %s",
                        COMPRESS_CHOICES);
            return SL_EINVAL;
        }
        int64_t w = 0; /* topk(F, warmup=W): DGC's sparsity warm-up over W steps (sluice/compress.h) */
        if (v->nargs == 2) {
            const sl_cfg_arg *a = &v->args[1];
            if (!a->key || strcmp(a->key, "warmup") != 0) {
                sl_cfg_err(cfg, a->key ? a->kloc : a->v.loc, SL_EINVAL, "compress=topk(F, ...): the second argument "
                                                                       "is warmup=STEPS");
                sl_err_hint("e.g. compress=topk(0.01, warmup=1800): 25%% -> 6.25%% -> 1.5625%% -> 1%% over 1800 steps");
                return SL_EINVAL;
            }
            if (sl_cfg_int(cfg, &a->v, 0, SL_COMPRESS_WARMUP_MAX, &w)) {
                sl_err_hint("warmup=STEPS: the warm-up's steps, an integer (0: none)");
                return sl_errcode();
            }
        }
        int l = snprintf(text, sizeof text, "topk:%.17g", v->args[0].v.num);
        if (w > 0) snprintf(text + l, sizeof text - (size_t)l, ",warmup=%lld", (long long)w);
    } else if ((v->kind == SL_CV_IDENT || v->kind == SL_CV_STRING) && v->text && strlen(v->text) < sizeof text) {
        snprintf(text, sizeof text, "%s", v->text);
    } else {
        sl_cfg_err(cfg, v->loc, SL_EINVAL, "compress= takes a codec name");
        sl_err_hint("the choices: %s", COMPRESS_CHOICES);
        return SL_EINVAL;
    }
    if (sl_compress_parse(text, &c->compress)) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", sl_errmsg());
        sl_cfg_err(cfg, v->loc, SL_EINVAL, "compress=%s: %s", text, msg);
        const char *sug = sl_suggest(text, (const char *const[]){"none", "fp16", "int8", "sign", "topk"}, 5);
        if (sug) sl_err_hint("did you mean '%s'? the choices: %s", sug, COMPRESS_CHOICES);
        else sl_err_hint("the choices: %s", COMPRESS_CHOICES);
        return SL_EINVAL;
    }
    if (c->compress.warmup > 0 && strcmp(c->strategy, "ring") != 0) {
        sl_cfg_err(cfg, v->kind == SL_CV_CALL ? v->args[1].kloc : v->loc, SL_EINVAL,
                   "warmup= is an option of `strategy ring` compress=topk(F, warmup=W)");
        sl_err_hint("the ps tasks decode every push with one k: drop warmup= under `strategy %s`", c->strategy);
        return SL_EINVAL;
    }
    return SL_OK;
}

/* the train block's defaults */
static void train_defaults(sl_train_config *c) {
    memset(c, 0, sizeof *c);
    c->eval_every.epochs = 1;
    c->epochs = 1;
    c->optim = (sl_optim_spec){.kind = SL_OPTIM_SGD, .momentum = 0.9f};
    c->schedule = (sl_schedule){.kind = SL_SCHED_CONSTANT, .lr = 0.01f, .gamma = 0.1f};
    c->ckpt_keep = 3;
    c->backend = SL_BACKEND_AUTO;
    c->device = -1;
    c->seed = 1;
    strcpy(c->strategy, "none");
    c->ps_staleness = -1;
    c->bucket_mb = 25;
    strcpy(c->image_key, "image");
    strcpy(c->label_key, "label");
}

/* The one train block of cfg into *tb. */
static sl_status find_train_block(const sl_cfg *cfg, const sl_cfg_stmt **out) {
    int n;
    const sl_cfg_stmt *root = sl_cfg_root(cfg, &n);
    const sl_cfg_stmt *tb = NULL;
    for (int i = 0; i < n; i++)
        if (strcmp(root[i].name, "train") == 0) {
            if (tb) {
                sl_cfg_err(cfg, root[i].loc, SL_EINVAL, "a second train block (one per file)");
                return SL_EINVAL;
            }
            tb = &root[i];
        }
    if (!tb) {
        sl_err(SL_ENOTFOUND, "%s: no `train { }` block", sl_cfg_filename(cfg));
        sl_err_hint("add one: train { model NAME; data PIPELINE; eval PIPELINE; epochs N; optimizer sgd lr=0.05 }");
        return SL_ENOTFOUND;
    }
    if (!tb->has_body || sl_cfg_npos(tb) > 0) {
        sl_cfg_err(cfg, tb->loc, SL_EINVAL, "train takes a { } block and no values");
        sl_err_hint("write: train { model NAME ... }");
        return SL_EINVAL;
    }
    *out = tb;
    return SL_OK;
}

/* The statements that later checks need, where they were. */
typedef struct {
    const sl_cfg_stmt *model, *data, *eval, *sched, *bucket, *optim, *precision;
} train_seen;

static sl_status read_checkpoint(const sl_cfg *cfg, const sl_cfg_stmt *s, const stmt_def *d, sl_train_config *c) {
    const sl_cfg_value *p0 = sl_cfg_pos(s, 0);
    if (is_none(p0)) {
        c->ckpt_every = (sl_train_every){0, 0};
        return SL_OK;
    }
    if (p0) {
        sl_cfg_err(cfg, p0->loc, SL_EINVAL, "checkpoint: unexpected value");
        return usage_hint(SL_EINVAL, d);
    }
    if (!sl_cfg_opt(s, "every") && !sl_cfg_opt(s, "steps")) c->ckpt_every = (sl_train_every){1, 0};
    sl_status st = read_every(cfg, s, d, &c->ckpt_every);
    const sl_cfg_value *v = sl_cfg_opt(s, "keep");
    int64_t keep;
    if (!st && v && !(st = sl_cfg_int(cfg, v, 0, 1000000, &keep))) c->ckpt_keep = (int)keep;
    return st;
}

static sl_status read_log(const sl_cfg *cfg, const sl_cfg_stmt *s, const stmt_def *d, sl_train_config *c) {
    const sl_cfg_value *p0 = sl_cfg_pos(s, 0), *v = sl_cfg_opt(s, "every");
    if (p0) {
        sl_cfg_err(cfg, p0->loc, SL_EINVAL, "log: unexpected value");
        return usage_hint(SL_EINVAL, d);
    }
    const sl_cfg_value *lv = sl_cfg_opt(s, "layout");
    if (!v && !lv) {
        sl_cfg_err(cfg, s->loc, SL_EINVAL, "log needs every=N (steps) or layout=keras");
        return usage_hint(SL_EINVAL, d);
    }
    sl_status st = v ? sl_cfg_int(cfg, v, 1, INT64_MAX / 4, &c->log_every) : SL_OK;
    static const char *const LAYOUTS[] = {"sluice", "keras"};
    int k = 0;
    if (!st && lv && !(st = read_choice(cfg, lv, LAYOUTS, 2, &k))) c->log_keras = k == 1;
    return st ? usage_hint(st, d) : SL_OK;
}

static sl_status read_bucket_mb(const sl_cfg *cfg, const sl_cfg_value *p0, sl_train_config *c) {
    double mb;
    if (sl_cfg_double(cfg, p0, &mb)) return sl_errcode();
    if (!(mb >= 0 && mb <= 4096))
        return sl_cfg_err(cfg, p0->loc, SL_ERANGE, "bucket_mb %g is outside 0..4096 (MiB; 0: off)", mb);
    if (mb > 0 && mb * 1048576.0 < 4.0)
        return sl_cfg_err(cfg, p0->loc, SL_ERANGE, "bucket_mb %g is less than one float (4 bytes)", mb);
    c->bucket_mb = mb;
    return SL_OK;
}

static sl_status read_label_smoothing(const sl_cfg *cfg, const sl_cfg_value *p0, sl_train_config *c) {
    double e;
    if (sl_cfg_double(cfg, p0, &e)) return sl_errcode();
    if (!(e >= 0 && e < 1)) {
        sl_cfg_err(cfg, p0->loc, SL_ERANGE, "label_smoothing %g is outside [0, 1)", e);
        sl_err_hint("the usual value is 0.1 (Keras' and PyTorch's label_smoothing); 0 turns it off");
        return SL_ERANGE;
    }
    c->label_smoothing = (float)e;
    return SL_OK;
}

/* One statement of the train block into *c (its definition d found); *seen notes it. */
static sl_status read_train_stmt(const sl_cfg *cfg, const sl_cfg_stmt *s, const stmt_def *d, sl_train_config *c,
                                 train_seen *seen) {
    const char *nm = s->name;
    int minpos = strcmp(nm, "checkpoint") == 0 || strcmp(nm, "log") == 0 ? 0 : 1;
    if (check_stmt(cfg, s, d, minpos, 1)) return sl_errcode();
    const sl_cfg_value *p0 = sl_cfg_pos(s, 0), *v;
    int64_t i64;
    int k;
    sl_status st = SL_OK;
    if (strcmp(nm, "model") == 0) {
        st = read_word(cfg, p0, c->model, sizeof c->model);
        seen->model = s;
    } else if (strcmp(nm, "data") == 0) {
        st = read_word(cfg, p0, c->data, sizeof c->data);
        if (!st && (v = sl_cfg_opt(s, "image"))) st = read_word(cfg, v, c->image_key, sizeof c->image_key);
        if (!st && (v = sl_cfg_opt(s, "label"))) st = read_word(cfg, v, c->label_key, sizeof c->label_key);
        seen->data = s;
    } else if (strcmp(nm, "eval") == 0) {
        seen->eval = NULL;
        if (is_none(p0)) {
            c->eval[0] = 0;
        } else {
            st = read_word(cfg, p0, c->eval, sizeof c->eval);
            if (!st) st = read_every(cfg, s, d, &c->eval_every);
            seen->eval = s;
        }
    } else if (strcmp(nm, "epochs") == 0) {
        st = sl_cfg_int(cfg, p0, 1, INT32_MAX, &c->epochs);
        c->steps = 0;
    } else if (strcmp(nm, "steps") == 0) {
        st = sl_cfg_int(cfg, p0, 1, INT64_MAX / 4, &c->steps);
        c->epochs = 0;
    } else if (strcmp(nm, "optimizer") == 0) {
        st = read_optimizer(cfg, s, d, c);
        seen->optim = s;
    } else if (strcmp(nm, "label_smoothing") == 0) {
        st = read_label_smoothing(cfg, p0, c);
    } else if (strcmp(nm, "schedule") == 0) {
        seen->sched = s;
    } else if (strcmp(nm, "checkpoint") == 0) {
        st = read_checkpoint(cfg, s, d, c);
    } else if (strcmp(nm, "run_dir") == 0) {
        st = read_word(cfg, p0, c->run_dir, sizeof c->run_dir);
    } else if (strcmp(nm, "backend") == 0) {
        if (!(st = read_choice(cfg, p0, BACKENDS, 3, &k)))
            c->backend = k == 0 ? SL_BACKEND_AUTO : k == 1 ? SL_BACKEND_CPU : SL_BACKEND_CUDA;
    } else if (strcmp(nm, "precision") == 0) {
        if (!(st = read_choice(cfg, p0, PRECISIONS, 3, &k))) c->precision = (sl_precision)k;
        seen->precision = s;
    } else if (strcmp(nm, "device") == 0) {
        if (!(st = sl_cfg_int(cfg, p0, 0, 65535, &i64))) c->device = (int)i64;
    } else if (strcmp(nm, "threads") == 0) {
        if (!(st = sl_cfg_int(cfg, p0, 0, 1024, &i64))) c->threads = (int)i64;
    } else if (strcmp(nm, "log") == 0) {
        st = read_log(cfg, s, d, c);
    } else if (strcmp(nm, "bucket_mb") == 0) {
        if (!(st = read_bucket_mb(cfg, p0, c))) seen->bucket = s;
    } else if (strcmp(nm, "seed") == 0) {
        if (!(st = sl_cfg_int(cfg, p0, 0, INT64_MAX, &i64))) c->seed = (uint64_t)i64;
    } else if (strcmp(nm, "strategy") == 0) {
        st = read_choice(cfg, p0, STRATEGIES, 3, &k);
        if (!st) {
            strcpy(c->strategy, STRATEGIES[k]);
            st = read_ps_options(cfg, s, d, c);
        }
        if (!st) st = read_compress(cfg, s, c);
        if (!st) st = read_ring_path(cfg, s, c);
    }
    if (st && !strstr(sl_errmsg(), "HINT")) usage_hint(st, d);
    return st;
}

/* What holds across statements: buckets with the strategy, the model and data named and
 * their blocks there; the derived values (schedule, run folder, model hash). */
static sl_status check_train(const sl_cfg *cfg, const sl_cfg_stmt *tb, const train_seen *seen, sl_train_config *c) {
    /* buckets overlap the float32 ring allreduce only */
    if (seen->bucket && c->bucket_mb > 0 && (strcmp(c->strategy, "ps") == 0 || c->compress.kind != SL_COMPRESS_NONE)) {
        sl_cfg_err(cfg, seen->bucket->loc, SL_EINVAL, "bucket_mb applies to `strategy ring` without compression (this "
                   "block has `strategy %s%s`)", c->strategy, c->compress.kind != SL_COMPRESS_NONE ? " compress=..." : "");
        sl_err_hint("remove bucket_mb, or write `bucket_mb 0`: ps and compressed exchanges send the gradient after "
                    "backward");
        return SL_EINVAL;
    }
    /* fp16's loss scaling decides to skip a step from the exchanged (averaged) gradient,
     * which every replica must see alike: not with the ps's own optimizer or compression */
    if (seen->precision && c->precision == SL_PRECISION_FP16 &&
        (strcmp(c->strategy, "ps") == 0 || c->compress.kind != SL_COMPRESS_NONE)) {
        sl_cfg_err(cfg, sl_cfg_pos(seen->precision, 0)->loc, SL_EINVAL,
                   "precision fp16 is not supported with `strategy %s%s`", c->strategy,
                   c->compress.kind != SL_COMPRESS_NONE ? " compress=..." : "");
        sl_err_hint("fp16's loss scaling needs the plain averaged gradient on every replica: use precision bf16 "
                    "(no loss scaling), or strategy none or ring without compress");
        return SL_EINVAL;
    }
    /* the ps tasks and the ring's momentum correction (topk/sign) decay every parameter */
    const sl_optim_spec *o = &c->optim;
    bool dgc = (c->compress.kind == SL_COMPRESS_TOPK || c->compress.kind == SL_COMPRESS_SIGN) &&
               o->kind == SL_OPTIM_SGD && o->momentum > 0 && !o->nesterov;
    if (seen->optim && o->decay_exclude && o->weight_decay > 0 && (strcmp(c->strategy, "ps") == 0 || dgc)) {
        sl_cfg_err(cfg, sl_cfg_opt(seen->optim, "decay_exclude")->loc, SL_EINVAL,
                   "decay_exclude is not supported with `strategy %s%s`", c->strategy,
                   dgc ? " compress=topk|sign" : "");
        sl_err_hint("%s applies weight_decay to every parameter: drop decay_exclude, or use strategy none or ring%s",
                    dgc ? "the ring's momentum correction" : "the parameter servers' optimizer",
                    dgc ? " without topk/sign" : "");
        return SL_EINVAL;
    }
    /* the schedule reads the optimizer's lr, wherever the two statements are */
    if (seen->sched && read_schedule(cfg, seen->sched, find_def("schedule"), c)) return sl_errcode();
    char names[512];
    if (!seen->model) {
        sl_cfg_err(cfg, tb->loc, SL_EINVAL, "the train block needs `model NAME`");
        block_names(cfg, "model", names, sizeof names);
        if (names[0]) sl_err_hint("the model blocks here are: %s", names);
        else sl_err_hint("add a `model NAME { input 28x28x1 ... }` block and name it in train");
        return SL_EINVAL;
    }
    if (!seen->data) {
        sl_cfg_err(cfg, tb->loc, SL_EINVAL, "the train block needs `data PIPELINE`");
        block_names(cfg, "pipeline", names, sizeof names);
        if (names[0]) sl_err_hint("the pipelines here are: %s", names);
        return SL_EINVAL;
    }
    if (check_block(cfg, seen->model, "model", c->model, NULL)) return sl_errcode();
    if (check_block(cfg, seen->data, "pipeline", c->data, &c->batch)) return sl_errcode();
    if (seen->eval && c->eval[0] && check_block(cfg, seen->eval, "pipeline", c->eval, &c->eval_batch))
        return sl_errcode();
    if (!c->run_dir[0]) snprintf(c->run_dir, sizeof c->run_dir, "runs/%s", c->model);
    c->model_hash = model_hash(cfg, find_block(cfg, "model", c->model));
    if (!c->model_hash) return sl_err(SL_ENOMEM, "train: out of memory hashing model '%s'", c->model);
    return SL_OK;
}

sl_status sl__train_total_steps(const sl_train_config *c, int64_t steps_per_epoch, int64_t *out) {
    *out = 0;
    if (c->steps > 0) {
        *out = c->steps;
    } else if (c->epochs > 0 && steps_per_epoch > 0 && __builtin_mul_overflow(c->epochs, steps_per_epoch, out)) {
        *out = 0;
        sl_err(SL_ERANGE, "train: %lld epochs x %lld steps per epoch is past 2^63-1", (long long)c->epochs,
               (long long)steps_per_epoch);
        sl_err_hint("train for `steps N` instead of `epochs N`");
        return SL_ERANGE;
    }
    return SL_OK;
}

sl_status sl_train_config_parse(const sl_cfg *cfg, sl_train_config *out) {
    sl_train_config c;
    train_defaults(&c);
    const sl_cfg_stmt *tb;
    sl_status st = find_train_block(cfg, &tb);
    if (st) return st;
    train_seen seen = {0};
    for (int i = 0; i < tb->nbody; i++) {
        const sl_cfg_stmt *s = &tb->body[i];
        const stmt_def *d = find_def(s->name);
        if (!d) {
            const char *names[NDEFS];
            for (int j = 0; j < NDEFS; j++) names[j] = DEFS[j].name;
            sl_cfg_err(cfg, s->loc, SL_EINVAL, "unknown train statement '%s'", s->name);
            const char *sug = sl_suggest(s->name, names, NDEFS);
            if (sug) sl_err_hint("did you mean '%s'?", sug);
            else sl_err_hint("the train statements are model, data, eval, epochs, steps, optimizer, "
                             "label_smoothing, schedule, checkpoint, log, run_dir, backend, precision, device, threads, "
                             "seed, strategy, bucket_mb");
            return SL_EINVAL;
        }
        if ((st = read_train_stmt(cfg, s, d, &c, &seen))) return st;
    }
    if ((st = check_train(cfg, tb, &seen, &c))) return st;
    *out = c;
    return SL_OK;
}
