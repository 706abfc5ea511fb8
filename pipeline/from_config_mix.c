/* Pipelines from the config language: the sources that mix other pipelines of the same
 * file, `sample` (sl_ds_sample_from_datasets) and `choose` (sl_ds_choose_from_datasets).
 *
 *   pipeline mixed {
 *       sample web books weights=[0.7, 0.3] seed=1 stop_on_empty=false
 *       batch 64
 *   }
 *
 * Each named pipeline is built whole, with the environment the mixing one is built with,
 * through b->build_named (sl_pipeline_from_config, reached through the builder so that this
 * file does not call back into from_config.c). Before a name is built it is checked to be
 * a pipeline of the file other than this one that does not lead back to this one through
 * the sample, choose, zip and concatenate statements of the pipelines it reads (zip and
 * concatenate, pipeline/from_config_seq.c, build their names here too) (a -> b -> a): the walk is
 * over the config's text, so a cycle is reported at the name that closes it, and the
 * recursion that builds the names cannot go round for ever.
 *
 * Workload: a few statements once at start-up; the walk visits each pipeline at most
 * once per name checked. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/from_config_priv.h"

#define MAX_MIX SL_DS_MAX_INPUTS
#define MAX_NESTING 32 /* pipelines mixing pipelines that mix ...: each level is a builder on the stack */

/* How deep the pipelines being built on this thread are nested (0: the one asked for). */
static _Thread_local int nesting;

/* ---- the pipelines a pipeline reads ---- */

typedef struct {
    const sl_cfg_stmt *root;
    int nroot;
    bool *seen;          /* per root statement: its block was walked */
    const char *path[64]; /* the names on the way (the first 64) */
    int len;
} walk;

/* The name of a `pipeline NAME { }` statement, or NULL when s is not one. */
static const char *block_name(const sl_cfg_stmt *s) {
    if (strcmp(s->name, "pipeline") != 0 || !s->has_body) return NULL;
    const sl_cfg_value *v = sl_cfg_pos(s, 0);
    return v && (v->kind == SL_CV_IDENT || v->kind == SL_CV_STRING) ? v->text : NULL;
}

static bool is_block(const sl_cfg_stmt *s, const char *name) {
    const char *p = block_name(s);
    return p && strcmp(p, name) == 0;
}

static int block_index(const walk *w, const char *name) {
    for (int i = 0; i < w->nroot; i++)
        if (is_block(&w->root[i], name)) return i;
    return -1;
}

/* Is value v of statement s a pipeline name it reads? */
static bool names_pipeline(const sl_cfg_stmt *s, const sl_cfg_arg *a) {
    bool mixing = strcmp(s->name, "sample") == 0 || strcmp(s->name, "choose") == 0 || strcmp(s->name, "zip") == 0 ||
                  strcmp(s->name, "concatenate") == 0;
    bool word = a->v.kind == SL_CV_IDENT || a->v.kind == SL_CV_STRING;
    return mixing && word && (!a->key || strcmp(a->key, "by") == 0);
}

/* Does the block at root index `from` read `target`, directly or through others? The
 * names on the way are pushed on w->path. */
static bool reaches(walk *w, int from, const char *target) {
    if (w->len > MAX_NESTING + 2) return false; /* deeper is refused when built */
    if (w->seen[from]) return false;
    w->seen[from] = true;
    const sl_cfg_stmt *p = &w->root[from];
    for (int i = 0; i < p->nbody; i++) {
        const sl_cfg_stmt *s = &p->body[i];
        for (int k = 0; k < s->nargs; k++) {
            if (!names_pipeline(s, &s->args[k])) continue;
            const char *name = s->args[k].v.text;
            if (w->len < 64) w->path[w->len] = name;
            w->len++;
            if (strcmp(name, target) == 0) return true;
            int next = block_index(w, name);
            if (next >= 0 && reaches(w, next, target)) return true;
            w->len--;
        }
    }
    return false;
}

/* Check that the name at v may be read by b's pipeline (`how`: "sample", "choose from"),
 * then build it into *out. */
static sl_status build_named(builder *b, const op_def *d, const sl_cfg_value *v, const char *how, sl_dataset **out) {
    const char *name = NULL;
    if (sl__fc_read_word(b, v, "a pipeline name", &name)) return sl__fc_hint_usage(d), SL_EINVAL;
    if (strcmp(name, b->pname) == 0) {
        sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "pipeline '%s' cannot %s itself", name, how);
        sl_err_hint("name other pipelines of the file: %s mixes what they give", d->name);
        return SL_EINVAL;
    }
    walk w = {.root = sl_cfg_root(b->cfg, &w.nroot)};
    int k = block_index(&w, name);
    if (k < 0) {
        const char *names[64];
        char list[512];
        int n = 0;
        for (int i = 0; i < w.nroot && n < 64; i++)
            if (block_name(&w.root[i])) names[n++] = block_name(&w.root[i]);
        sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "no pipeline '%s' in %s", name, sl_cfg_filename(b->cfg));
        const char *sug = sl_suggest(name, names, n);
        if (sug) sl_err_hint("did you mean '%s'? (the pipelines are %s)", sug, sl__fc_join(names, n, list, sizeof list));
        else sl_err_hint("the pipelines are %s", sl__fc_join(names, n, list, sizeof list));
        return SL_EINVAL;
    }
    if (!(w.seen = calloc((size_t)w.nroot, sizeof *w.seen))) return sl_err(SL_ENOMEM, "out of memory");
    w.path[0] = b->pname;
    w.path[1] = name;
    w.len = 2;
    bool cycle = reaches(&w, k, b->pname);
    free(w.seen);
    if (cycle) {
        char chain[512];
        size_t len = 0;
        for (int i = 0; i < w.len && i < 64 && len < sizeof chain; i++)
            len += (size_t)snprintf(chain + len, sizeof chain - len, i ? " -> %s" : "%s", w.path[i]);
        sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "pipeline '%s' would read itself through '%s': %s", b->pname, name,
                   chain);
        sl_err_hint("a pipeline cannot read itself, directly or through the pipelines it mixes");
        return SL_EINVAL;
    }
    if (nesting >= MAX_NESTING) {
        sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "pipeline '%s' is nested %d deep in pipelines that mix others", name,
                   nesting + 1);
        sl_err_hint("mix at most %d levels deep", MAX_NESTING);
        return SL_EINVAL;
    }
    nesting++;
    sl_status st = b->build_named(b->cfg, name, &b->env, out);
    nesting--;
    return st;
}

/* The pipelines named by s's positional arguments into ins[0..*n). On failure those built
 * are released. */
static sl_status build_inputs(builder *b, const op_def *d, const sl_cfg_stmt *s, const char *how, sl_dataset **ins,
                              int *n) {
    *n = 0;
    for (int i = 0; i < sl_cfg_npos(s); i++) {
        sl_status st = build_named(b, d, sl_cfg_pos(s, i), how, &ins[i]);
        if (st) {
            for (int k = 0; k < i; k++) sl_dataset_unref(ins[k]);
            return st;
        }
        *n = i + 1;
    }
    return SL_OK;
}

sl_status sl__fc_build_pipelines(builder *b, const op_def *d, const sl_cfg_stmt *s, const char *how,
                                 sl_dataset **ins, int *n) {
    sl_status st = build_inputs(b, d, s, how, ins, n);
    if (st) *n = 0;
    return st;
}

/* weights=[...]: one finite number >= 0 per pipeline, not all 0. */
static sl_status read_weights(builder *b, const op_def *d, const sl_cfg_stmt *s, const sl_cfg_value *v, double *w) {
    int n = sl_cfg_npos(s), nw = 0;
    if (sl__fc_read_numbers(b, v, false, w, MAX_MIX, &nw)) return sl__fc_hint_usage(d), SL_EINVAL;
    if (nw != n)
        return sl__fc_err_usage(b, d, v->loc, SL_EINVAL, "%d pipelines but %d weights: one weight per pipeline", n, nw);
    bool any = false;
    for (int i = 0; i < n; i++) {
        if (!isfinite(w[i]) || w[i] < 0) {
            sl_cfg_err(b->cfg, v->args[i].v.loc, SL_EINVAL, "weight %g of '%s' must be finite and >= 0", w[i],
                       sl_cfg_pos(s, i)->text);
            sl_err_hint("weights are relative: [0.7, 0.3] and [7, 3] are the same mix");
            return SL_EINVAL;
        }
        any |= w[i] > 0;
    }
    if (!any) {
        sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "every weight is 0: nothing could be drawn");
        sl_err_hint("give at least one pipeline a positive weight");
        return SL_EINVAL;
    }
    return SL_OK;
}

/* The mixing op becomes the pipeline's source. */
static sl_status mixed(builder *b, const sl_cfg_stmt *s, sl_status st, sl_dataset *out, const char *op) {
    b->src = SRC_MIX;
    b->materialised = true;
    return sl__fc_chain(b, s, st, out, op);
}

sl_status sl__fc_build_sample(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    double w[MAX_MIX];
    bool stop = false;
    int64_t seed = (int64_t)sl__mix(b->env.seed, (uint64_t)b->stmt_index + 1); /* as shuffle's default */
    const sl_cfg_value *v;
    if ((v = sl_cfg_opt(s, "weights")) && read_weights(b, d, s, v, w)) return SL_EINVAL;
    if ((v = sl_cfg_opt(s, "seed")) && sl__fc_read_int(b, d, v, 0, INT64_MAX, &seed)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "stop_on_empty")) && sl__fc_read_bool(b, v, &stop)) return sl_errcode();
    sl_dataset *ins[MAX_MIX], *out = NULL;
    int n;
    sl_status st = build_inputs(b, d, s, "sample", ins, &n);
    if (st) return st;
    st = sl_ds_sample_from_datasets(ins, n, sl_cfg_opt(s, "weights") ? w : NULL, (uint64_t)seed, stop, &out);
    for (int i = 0; i < n; i++) sl_dataset_unref(ins[i]);
    return mixed(b, s, st, out, "sample");
}

sl_status sl__fc_build_choose(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    bool stop = true;
    const sl_cfg_value *by = sl_cfg_opt(s, "by"), *v;
    if (!by) return sl__fc_err_usage(b, d, s->loc, SL_EINVAL, "choose: missing by=PIPELINE (the choices)");
    if ((v = sl_cfg_opt(s, "stop_on_empty")) && sl__fc_read_bool(b, v, &stop)) return sl_errcode();
    sl_dataset *ins[MAX_MIX], *choices = NULL, *out = NULL;
    int n;
    sl_status st = build_inputs(b, d, s, "choose from", ins, &n);
    if (st) return st;
    st = build_named(b, d, by, "choose by", &choices);
    if (!st) {
        st = sl_ds_choose_from_datasets(ins, n, choices, stop, &out);
        st = mixed(b, s, st, out, "choose");
    }
    sl_dataset_unref(choices);
    for (int i = 0; i < n; i++) sl_dataset_unref(ins[i]);
    return st;
}
