/* Pipelines from the config language: what the builders of pipeline/from_config*.c share.
 * Errors at a spot of the config with the op's usage as the hint, typed reads of statement
 * and call values, and putting a new dataset at the end of the graph being built (its
 * label and config statement). Calls nothing else of the from_config files.
 *
 * Workload: a few calls per statement, once at start-up. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/from_config_priv.h"

/* ---- messages ---- */

bool sl__fc_has_hint(void) { return strstr(sl_errmsg(), "---> HINT:") != NULL; }

void sl__fc_hint_usage(const op_def *d) {
    if (!sl__fc_has_hint()) sl_err_hint("usage: %s", d->usage);
}

/* An error at loc with the op's usage as the hint. */
sl_status sl__fc_err_usage(builder *b, const op_def *d, sl_cfg_loc loc, sl_status code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sl_cfg_err(b->cfg, loc, code, "%s", msg);
    if (d) sl_err_hint("usage: %s", d->usage);
    return code;
}

/* The spot of `key=value`: the key sits just before the value (written without spaces,
 * as options are). */
sl_cfg_loc sl__fc_key_loc(const sl_cfg_arg *a) {
    sl_cfg_loc loc = a->v.loc;
    int klen = (int)strlen(a->key);
    if (loc.line > 0 && loc.col > klen + 1) {
        loc.col -= klen + 1;
        loc.len += klen + 1;
    }
    return loc;
}

/* "a, b, c" into buf. */
const char *sl__fc_join(const char *const *words, int n, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, i ? ", %s" : "%s", words[i]);
    return buf;
}

/* A library call failed while building statement s: say where in the config (and which
 * statement, unless the op's message already starts with that name). */
sl_status sl__fc_construct_failed(builder *b, const sl_cfg_stmt *s, sl_status code) {
    const char *m = sl_errmsg();
    size_t k = strlen(s->name);
    if (strncmp(m, s->name, k) == 0 && m[k] == ':')
        sl_err_prefix("%s:%d:%d: ", sl_cfg_filename(b->cfg), s->loc.line, s->loc.col);
    else
        sl_err_prefix("%s:%d:%d: %s: ", sl_cfg_filename(b->cfg), s->loc.line, s->loc.col, s->name);
    return code;
}

/* ---- small typed readers ---- */

sl_status sl__fc_read_int(builder *b, const op_def *d, const sl_cfg_value *v, int64_t min, int64_t max,
                          int64_t *out) {
    sl_status s = sl_cfg_int(b->cfg, v, min, max, out);
    if (s && d) sl__fc_hint_usage(d);
    return s;
}

sl_status sl__fc_read_bool(builder *b, const sl_cfg_value *v, bool *out) {
    return sl_cfg_bool(b->cfg, v, out);
}

/* N or auto (SL_AUTO). */
sl_status sl__fc_read_int_or_auto(builder *b, const op_def *d, const sl_cfg_value *v, int64_t min,
                                  int64_t max, int *out) {
    if (sl_cfg_is_auto(v)) {
        *out = SL_AUTO;
        return SL_OK;
    }
    int64_t n;
    sl_status s = sl_cfg_int(b->cfg, v, min, max, &n);
    if (s) {
        if (v->kind != SL_CV_NUMBER) sl_err_hint("write a number or auto");
        else if (d) sl__fc_hint_usage(d);
        return s;
    }
    *out = (int)n;
    return SL_OK;
}

sl_status sl__fc_read_word(builder *b, const sl_cfg_value *v, const char *what, const char **out) {
    if (v->kind != SL_CV_IDENT && v->kind != SL_CV_STRING)
        return sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "expected %s, found '%s'", what, v->text);
    *out = v->text;
    return SL_OK;
}

/* A component name: a word or string shorter than SL_NAME_MAX. */
sl_status sl__fc_read_comp(builder *b, const sl_cfg_value *v, const char **out) {
    sl_status s = sl__fc_read_word(b, v, "a component name", out);
    if (!s && (strlen(*out) == 0 || strlen(*out) >= SL_NAME_MAX))
        s = sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "component names are 1 to %d characters long", SL_NAME_MAX - 1);
    return s;
}

static const char *const DTYPES[] = {"uint8", "int8", "uint16", "int16", "int32", "uint32", "int64",
                                     "float16", "bfloat16", "float32", "float64", "bool", "bytes"};

sl_status sl__fc_read_dtype(builder *b, const sl_cfg_value *v, bool allow_bytes, sl_dtype *out) {
    const char *w = "";
    if (sl__fc_read_word(b, v, "a dtype", &w)) return sl_errcode();
    sl_dtype dt = sl_dtype_from_name(w);
    if (dt == SL_DT_BYTES && !allow_bytes) {
        sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "a numeric dtype is needed here, not '%s'", w);
        sl_err_hint("byte strings come from parse_example; numbers are uint8, int32, int64, float32, ...");
        return SL_EINVAL;
    }
    if (dt == SL_DT_INVALID) {
        sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "unknown dtype '%s'", w);
        int n = (int)(sizeof DTYPES / sizeof DTYPES[0]) - (allow_bytes ? 0 : 1);
        const char *sug = sl_suggest(w, DTYPES, n);
        char list[256];
        if (sug) sl_err_hint("did you mean '%s'?", sug);
        else sl_err_hint("the dtypes are %s", sl__fc_join(DTYPES, n, list, sizeof list));
        return SL_EINVAL;
    }
    *out = dt;
    return SL_OK;
}

/* A size: 224 (square) or 224x200 (height x width). */
sl_status sl__fc_read_size(builder *b, const sl_cfg_value *v, int *h, int *w) {
    if (v->kind == SL_CV_NUMBER && v->is_int && v->inum >= 1 && v->inum <= 1 << 20) {
        *h = *w = (int)v->inum;
        return SL_OK;
    }
    if (v->kind == SL_CV_SHAPE && v->ndims == 2 && v->dims[0] >= 1 && v->dims[1] >= 1 &&
        v->dims[0] <= 1 << 20 && v->dims[1] <= 1 << 20) {
        *h = (int)v->dims[0];
        *w = (int)v->dims[1];
        return SL_OK;
    }
    sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "expected a size, found '%s'", v->text);
    sl_err_hint("write 224 for a square or 224x200 for height x width");
    return SL_EINVAL;
}

/* A list of numbers (or one number when allow_scalar) into out[0..cap). */
sl_status sl__fc_read_numbers(builder *b, const sl_cfg_value *v, bool allow_scalar, double *out, int cap,
                              int *n) {
    if (v->kind == SL_CV_NUMBER && allow_scalar) {
        out[0] = v->num;
        *n = 1;
        return SL_OK;
    }
    if (v->kind != SL_CV_LIST) {
        sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "expected a list of numbers like [0.5, 1], found '%s'", v->text);
        return SL_EINVAL;
    }
    if (v->nargs < 1 || v->nargs > cap)
        return sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "expected 1 to %d numbers, found %d", cap, v->nargs);
    for (int i = 0; i < v->nargs; i++)
        if (sl_cfg_double(b->cfg, &v->args[i].v, &out[i])) return sl_errcode();
    *n = v->nargs;
    return SL_OK;
}

sl_status sl__fc_read_range2(builder *b, const sl_cfg_value *v, double *lo, double *hi) {
    double x[2];
    int n;
    if (sl__fc_read_numbers(b, v, false, x, 2, &n)) return sl_errcode();
    if (n != 2 || x[0] > x[1] || x[0] <= 0) {
        sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "expected [low, high] with 0 < low <= high");
        return SL_EINVAL;
    }
    *lo = x[0];
    *hi = x[1];
    return SL_OK;
}

/* ---- building the graph ---- */

void sl__fc_label(builder *b, sl_dataset *ds, const char *op) {
    int k = 0;
    for (int i = 0; i < b->ncounts && !k; i++)
        if (strcmp(b->counts[i].op, op) == 0) k = ++b->counts[i].n;
    if (!k && b->ncounts < 24) {
        b->counts[b->ncounts].op = op;
        b->counts[b->ncounts++].n = k = 1;
    }
    char l[64];
    if (k > 1) snprintf(l, sizeof l, "%s/%s#%d", b->pname, op, k);
    else snprintf(l, sizeof l, "%s/%s", b->pname, op);
    sl_dataset_set_label(ds, l);
}

/* Replace b->ds with next (a new reference, or NULL after a failed constructor). */
sl_status sl__fc_chain(builder *b, const sl_cfg_stmt *s, sl_status st, sl_dataset *next, const char *op) {
    if (st) return sl__fc_construct_failed(b, s, st);
    sl_dataset_unref(b->ds);
    b->ds = next;
    sl__fc_label(b, next, op);
    /* errors met while running (a function failing on a record) name the statement */
    snprintf(next->where, sizeof next->where, "%s:%d", sl_cfg_filename(b->cfg), s->loc.line);
    return SL_OK;
}
