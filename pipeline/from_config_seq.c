/* Pipelines from the config language: the sequence statements, tf.data's concatenate,
 * enumerate, unbatch, rebatch, take_while, scan and unique, and the source zip.
 *
 *   pipeline numbered {
 *       zip images labels prefix=true      # {"images.value", "labels.value"}
 *       enumerate start=1 as=step
 *       take_while step <= 100
 *   }
 *
 * concatenate and zip name other pipelines of the file, built and checked (no cycles) as
 * sample's are (sl__fc_build_pipelines, pipeline/from_config_mix.c). take_while shares
 * filter's comparison (sl__fc_read_compare). scan's built-ins are one C scan function over
 * a spec parsed here: the running value is int64 while every value and the initial are
 * integers, float64 otherwise.
 *
 * Workload: a few statements once at start-up; scan's function once per element. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/from_config_priv.h"

/* ---- concatenate, zip ---- */

sl_status sl__fc_build_concatenate(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    sl_dataset *ins[SL_DS_MAX_INPUTS];
    int n;
    sl_status st = sl__fc_build_pipelines(b, d, s, "concatenate", ins, &n);
    for (int i = 0; i < n && !st; i++) {
        sl_dataset *out = NULL;
        st = sl_ds_concatenate(b->ds, ins[i], &out);
        st = sl__fc_chain(b, s, st, out, "concatenate");
    }
    for (int i = 0; i < n; i++) sl_dataset_unref(ins[i]);
    return st;
}

/* zip prefix=true: each component of the pipeline named ctx becomes "NAME.COMPONENT". */
static sl_status prefix_apply(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)call;
    const char *p = ctx;
    for (int c = 0; c < e->n; c++) {
        char name[2 * SL_NAME_MAX];
        int len = snprintf(name, sizeof name, "%s.%s", p, e->names[c]);
        if (len >= SL_NAME_MAX)
            return sl_err(SL_EINVAL, "zip: component name '%s' is %d bytes, past %d", name, len, SL_NAME_MAX - 1);
        memcpy(e->names[c], name, (size_t)len + 1);
    }
    return SL_OK;
}

static void prefix_free(void *ctx, void *unused) {
    (void)unused;
    free(ctx);
}

static sl_status prefixed(builder *b, const sl_cfg_stmt *s, const char *name, sl_dataset **ds) {
    char *p = strdup(name);
    sl_fn *fn = NULL;
    sl_dataset *m = NULL;
    if (!p) return sl_err(SL_ENOMEM, "out of memory");
    sl_status st = sl_fn_custom("zip_prefix", prefix_apply, p, prefix_free, &fn);
    if (!st) st = sl_ds_map(*ds, fn, 1, true, &m);
    sl_fn_unref(fn);
    if (st) return sl__fc_construct_failed(b, s, st);
    sl_dataset_unref(*ds);
    *ds = m;
    return SL_OK;
}

sl_status sl__fc_build_zip(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    bool prefix = false;
    const sl_cfg_value *v = sl_cfg_opt(s, "prefix");
    if (v && sl__fc_read_bool(b, v, &prefix)) return sl_errcode();
    sl_dataset *ins[SL_DS_MAX_INPUTS], *out = NULL;
    int n;
    sl_status st = sl__fc_build_pipelines(b, d, s, "zip", ins, &n);
    for (int i = 0; i < n && prefix && !st; i++) st = prefixed(b, s, sl_cfg_pos(s, i)->text, &ins[i]);
    if (!st) {
        st = sl_ds_zip(ins, n, &out);
        b->src = SRC_MIX;
        b->materialised = true;
        st = sl__fc_chain(b, s, st, out, "zip");
    }
    for (int i = 0; i < n; i++) sl_dataset_unref(ins[i]);
    return st;
}

/* ---- enumerate, unbatch, rebatch, take_while, unique ---- */

sl_status sl__fc_build_enumerate(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    int64_t start = 0;
    const char *name = "index";
    const sl_cfg_value *v;
    if ((v = sl_cfg_opt(s, "start")) && sl__fc_read_int(b, d, v, INT64_MIN, INT64_MAX, &start)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "as")) && sl__fc_read_comp(b, v, &name)) return sl__fc_hint_usage(d), sl_errcode();
    sl_dataset *out = NULL;
    sl_status st = sl_ds_enumerate(b->ds, start, name, &out);
    return sl__fc_chain(b, s, st, out, "enumerate");
}

sl_status sl__fc_build_unbatch(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    (void)d;
    sl_dataset *out = NULL;
    sl_status st = sl_ds_unbatch(b->ds, &out);
    return sl__fc_chain(b, s, st, out, "unbatch");
}

sl_status sl__fc_build_rebatch(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    int64_t sizes[64];
    int n = 0;
    bool drop = false;
    const sl_cfg_value *v = sl_cfg_pos(s, 0);
    if (v->kind == SL_CV_LIST) {
        if (v->nargs < 1 || v->nargs > 64)
            return sl__fc_err_usage(b, d, v->loc, SL_EINVAL, "rebatch takes 1..64 batch sizes, found %d", v->nargs);
        for (n = 0; n < v->nargs; n++)
            if (sl__fc_read_int(b, d, &v->args[n].v, 1, 1 << 24, &sizes[n])) return sl_errcode();
    } else {
        if (sl__fc_read_int(b, d, v, 1, 1 << 24, &sizes[0])) return sl_errcode();
        n = 1;
    }
    if ((v = sl_cfg_pos(s, 1))) {
        if (v->kind != SL_CV_IDENT || strcmp(v->text, "drop_remainder") != 0)
            return sl__fc_err_usage(b, d, v->loc, SL_EINVAL, "unknown rebatch flag '%s'", v->text);
        drop = true;
    }
    if ((v = sl_cfg_opt(s, "drop_remainder")) && sl__fc_read_bool(b, v, &drop)) return sl_errcode();
    sl_dataset *out = NULL;
    sl_status st = sl_ds_rebatch(b->ds, sizes, n, drop, &out);
    return sl__fc_chain(b, s, st, out, "rebatch");
}

sl_status sl__fc_build_take_while(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    sl_pred_fn pred;
    void *ctx;
    sl_free_fn free_ctx;
    sl_status st = sl__fc_read_compare(b, d, s, &pred, &ctx, &free_ctx);
    if (st) return st;
    sl_dataset *out = NULL;
    st = sl_ds_take_while_owned(b->ds, pred, ctx, free_ctx, &out);
    return sl__fc_chain(b, s, st, out, "take_while");
}

sl_status sl__fc_build_unique(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    const char *comp = NULL;
    const sl_cfg_value *v = sl_cfg_pos(s, 0);
    if (v && sl__fc_read_comp(b, v, &comp)) return sl__fc_hint_usage(d), sl_errcode();
    sl_dataset *out = NULL;
    sl_status st = sl_ds_unique(b->ds, comp, &out);
    return sl__fc_chain(b, s, st, out, "unique");
}

/* ---- scan's built-ins ---- */

enum { SC_SUM, SC_PROD, SC_MIN, SC_MAX, SC_COUNT };
static const char *const SCAN_KIND[] = {"sum", "prod", "min", "max", "count"};

typedef struct scan_spec {
    char comp[SL_NAME_MAX];
    char as[SL_NAME_MAX];
    int kind;
    char text[2 * SL_NAME_MAX + 16]; /* "value sum", for messages */
} scan_spec;

/* Set component `name` of e (and, shared, "running" of state) to a new scalar. */
static sl_status put_running(sl_element *state, sl_element *e, const char *name, bool is_int, int64_t iv, double dv) {
    sl_tensor t, u;
    sl_status s = sl_tensor_alloc(&t, is_int ? SL_DT_I64 : SL_DT_F64, 0, NULL);
    if (s) return s;
    if (is_int) *(int64_t *)t.data = iv;
    else *(double *)t.data = dv;
    sl_tensor_share(&u, &t);
    if ((s = sl_element_set(state, "running", &u))) {
        sl_tensor_release(&u);
        sl_tensor_release(&t);
        return s;
    }
    if ((s = sl_element_set(e, name, &t))) sl_tensor_release(&t);
    return s;
}

static sl_status scan_builtin(void *ctx, sl_element *state, sl_element *in, sl_element *out) {
    const scan_spec *p = ctx;
    int64_t xi = 1, ri = 0;
    double xd = 1, rd = 0;
    bool x_int = true, r_int = true, have = false;
    int r = sl_element_find(state, "running");
    if (r >= 0) {
        have = true;
        sl__fc_scalar_value(&state->t[r], &ri, &rd, &r_int);
    }
    if (p->kind != SC_COUNT) {
        int c = sl_element_find(in, p->comp);
        char desc[96];
        if (c < 0) return sl_err(SL_EINVAL, "scan %s: no component '%s'", p->text, p->comp);
        if (!sl__fc_scalar_value(&in->t[c], &xi, &xd, &x_int))
            return sl_err(SL_EINVAL, "scan %s: component '%s' is %s, not a single number", p->text, p->comp,
                          sl_tensor_describe(&in->t[c], desc, sizeof desc));
    }
    bool is_int = x_int && r_int;
    if (!is_int && r_int) rd = (double)ri;
    if (!have) { /* min and max without initial= start at the first value */
        ri = xi;
        rd = xd;
    } else if (is_int) {
        bool over = false;
        switch (p->kind) {
        case SC_SUM: over = __builtin_add_overflow(ri, xi, &ri); break;
        case SC_PROD: over = __builtin_mul_overflow(ri, xi, &ri); break;
        case SC_COUNT: over = __builtin_add_overflow(ri, 1, &ri); break;
        case SC_MIN: ri = xi < ri ? xi : ri; break;
        default: ri = xi > ri ? xi : ri; break;
        }
        if (over) {
            sl_err(SL_ERANGE, "scan %s: the running value passes the int64 range", p->text);
            sl_err_hint("start from a float to scan in float64: initial=0.0");
            return SL_ERANGE;
        }
    } else {
        switch (p->kind) {
        case SC_SUM: rd += xd; break;
        case SC_PROD: rd *= xd; break;
        case SC_COUNT: rd += 1; break;
        case SC_MIN: rd = xd < rd ? xd : rd; break;
        default: rd = xd > rd ? xd : rd; break;
        }
    }
    sl_element_move(out, in);
    return put_running(state, out, p->as, is_int, ri, rd);
}

static void scan_spec_free(void *ctx, void *unused) {
    (void)unused;
    free(ctx);
}

sl_status sl__fc_build_scan(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    const char *comp, *as = NULL;
    const sl_cfg_value *kv = sl_cfg_pos(s, 1), *iv = sl_cfg_opt(s, "initial"), *v;
    if (sl__fc_read_comp(b, sl_cfg_pos(s, 0), &comp)) return sl__fc_hint_usage(d), sl_errcode();
    int kind = -1;
    if (kv->kind == SL_CV_IDENT)
        for (int i = 0; i < 5; i++)
            if (strcmp(kv->text, SCAN_KIND[i]) == 0) kind = i;
    if (kind < 0) {
        sl_cfg_err(b->cfg, kv->loc, SL_EINVAL, "unknown scan '%s'", kv->text);
        const char *sug = sl_suggest(kv->text, SCAN_KIND, 5);
        if (sug) sl_err_hint("did you mean '%s'?", sug);
        else sl_err_hint("scan keeps a running sum, prod, min, max or count: scan value sum");
        return SL_EINVAL;
    }
    if (iv && iv->kind != SL_CV_NUMBER)
        return sl__fc_err_usage(b, d, iv->loc, SL_EINVAL, "initial= is a number, found '%s'", iv->text);
    if ((v = sl_cfg_opt(s, "as")) && sl__fc_read_comp(b, v, &as)) return sl__fc_hint_usage(d), sl_errcode();
    scan_spec *p = calloc(1, sizeof *p);
    if (!p) return sl_err(SL_ENOMEM, "out of memory");
    snprintf(p->comp, sizeof p->comp, "%s", comp);
    snprintf(p->as, sizeof p->as, "%s", as ? as : comp);
    p->kind = kind;
    snprintf(p->text, sizeof p->text, "%s %s", comp, SCAN_KIND[kind]);
    /* the initial state: initial=, else sum 0, prod 1, count 0; min and max: the first value */
    sl_element init;
    sl_element_init(&init);
    sl_element scratch;
    sl_element_init(&scratch);
    sl_status st = SL_OK;
    if (iv) st = put_running(&init, &scratch, "x", iv->is_int, iv->inum, iv->num);
    else if (kind != SC_MIN && kind != SC_MAX) st = put_running(&init, &scratch, "x", true, kind == SC_PROD, 0);
    sl_element_clear(&scratch);
    sl_dataset *out = NULL;
    if (st) scan_spec_free(p, NULL);
    else st = sl_ds_scan(b->ds, &init, scan_builtin, p, scan_spec_free, &out);
    sl_element_clear(&init);
    return sl__fc_chain(b, s, st, out, "scan");
}
