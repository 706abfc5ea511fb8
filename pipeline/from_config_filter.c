/* Pipelines from the config language: the filter statement, `filter COMPONENT OP NUMBER`,
 * and the comparison it shares with take_while (sl__fc_read_compare).
 * The comparison is parsed once into a filter_spec; the predicate evaluates it on every
 * element (the component must be a numeric scalar; integers are compared exactly, floats
 * as doubles).
 *
 * Workload: once per element of a filtered pipeline, so the predicate only reads the
 * scalar and compares. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/from_config_priv.h"
#include "sluice/util.h"

enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE };
static const char *const CMP_SYM[] = {"==", "!=", "<", "<=", ">", ">="};
static const char *const CMP_WORD[] = {"eq", "ne", "lt", "le", "gt", "ge"};

typedef struct filter_spec {
    char comp[SL_NAME_MAX];
    int op;
    double num;
    int64_t inum;
    bool is_int;
    char text[SL_NAME_MAX + 48]; /* "label < 5", for messages */
    char op_name[32];            /* the statement: "filter", "take_while" */
} filter_spec;

/* The value of a one-element numeric tensor: as an integer (*is_int) or a double. */
static bool scalar_value(const sl_tensor *t, int64_t *i, double *d, bool *is_int) {
    if (sl_tensor_numel(t) != 1) return false;
    const void *p = t->data;
    *is_int = true;
    switch (t->dtype) {
    case SL_DT_U8: *i = *(const uint8_t *)p; break;
    case SL_DT_I8: *i = *(const int8_t *)p; break;
    case SL_DT_U16: *i = *(const uint16_t *)p; break;
    case SL_DT_I16: *i = *(const int16_t *)p; break;
    case SL_DT_I32: *i = *(const int32_t *)p; break;
    case SL_DT_U32: *i = *(const uint32_t *)p; break;
    case SL_DT_I64: *i = *(const int64_t *)p; break;
    case SL_DT_BOOL: *i = *(const uint8_t *)p != 0; break;
    case SL_DT_F32: *is_int = false; *d = *(const float *)p; break;
    case SL_DT_F64: *is_int = false; *d = *(const double *)p; break;
    case SL_DT_F16: *is_int = false; *d = (double)sl_f32_from_f16(*(const uint16_t *)p); break;
    case SL_DT_BF16: {
        uint32_t bits = (uint32_t)*(const uint16_t *)p << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        *is_int = false;
        *d = f;
        break;
    }
    default: return false;
    }
    if (*is_int) *d = (double)*i;
    return true;
}

bool sl__fc_scalar_value(const sl_tensor *t, int64_t *i, double *d, bool *is_int) {
    return scalar_value(t, i, d, is_int);
}

static int filter_pred(void *ctx, const sl_element *e) {
    const filter_spec *f = ctx;
    int c = sl_element_find(e, f->comp);
    if (c < 0) {
        char have[512];
        size_t len = 0;
        have[0] = 0;
        for (int k = 0; k < e->n && len < sizeof have; k++)
            len += (size_t)snprintf(have + len, sizeof have - len, k ? ", %s" : "%s", e->names[k]);
        return sl_err(SL_EINVAL, "%s %s: no component '%s' (the element has: %s)", f->op_name, f->text, f->comp,
                      e->n ? have : "nothing");
    }
    int64_t iv = 0;
    double dv = 0;
    bool is_int;
    if (!scalar_value(&e->t[c], &iv, &dv, &is_int)) {
        char desc[96];
        return sl_err(SL_EINVAL, "%s %s: component '%s' is %s, not a single number", f->op_name, f->text, f->comp,
                      sl_tensor_describe(&e->t[c], desc, sizeof desc));
    }
    int cmp;
    if (is_int && f->is_int) cmp = iv < f->inum ? -1 : iv > f->inum;
    else if (isnan(dv)) return f->op == CMP_NE; /* NaN compares unequal to everything */
    else cmp = dv < f->num ? -1 : dv > f->num;
    switch (f->op) {
    case CMP_EQ: return cmp == 0;
    case CMP_NE: return cmp != 0;
    case CMP_LT: return cmp < 0;
    case CMP_LE: return cmp <= 0;
    case CMP_GT: return cmp > 0;
    default: return cmp >= 0;
    }
}

static void filter_free(void *ctx, void *unused) { free(ctx); }

sl_status sl__fc_read_compare(builder *b, const op_def *d, const sl_cfg_stmt *s, sl_pred_fn *pred, void **ctx,
                              sl_free_fn *free_ctx) {
    const char *comp;
    const sl_cfg_value *cv = sl_cfg_pos(s, 0), *ov = sl_cfg_pos(s, 1), *vv = sl_cfg_pos(s, 2);
    if (sl__fc_read_comp(b, cv, &comp)) return sl__fc_hint_usage(d), sl_errcode();
    int op = -1;
    if (ov->kind == SL_CV_IDENT || ov->kind == SL_CV_STRING)
        for (int i = 0; i < 6; i++)
            if (strcmp(ov->text, CMP_SYM[i]) == 0 || strcmp(ov->text, CMP_WORD[i]) == 0) op = i;
    if (op < 0) {
        sl_cfg_err(b->cfg, ov->loc, SL_EINVAL, "unknown comparison '%s'", ov->text);
        const char *sug = sl_suggest(ov->text, CMP_WORD, 6);
        if (sug) sl_err_hint("did you mean '%s'?", sug);
        else sl_err_hint("compare with == != < <= > >= or eq ne lt le gt ge: %s label < 5", d->name);
        return SL_EINVAL;
    }
    if (vv->kind != SL_CV_NUMBER)
        return sl__fc_err_usage(b, d, vv->loc, SL_EINVAL, "%s compares with a number, found '%s'", d->name, vv->text);
    filter_spec *f = calloc(1, sizeof *f);
    if (!f) return sl_err(SL_ENOMEM, "out of memory");
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    f->op = op;
    f->num = vv->num;
    f->inum = vv->inum;
    f->is_int = vv->is_int;
    snprintf(f->text, sizeof f->text, "%s %s %s", comp, CMP_SYM[op], vv->text);
    snprintf(f->op_name, sizeof f->op_name, "%s", d->name);
    *pred = filter_pred;
    *ctx = f;
    *free_ctx = filter_free;
    return SL_OK;
}

sl_status sl__fc_build_filter(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    sl_pred_fn pred;
    void *ctx;
    sl_free_fn free_ctx;
    sl_status st = sl__fc_read_compare(b, d, s, &pred, &ctx, &free_ctx);
    if (st) return st;
    sl_dataset *out;
    st = sl_ds_filter_owned(b->ds, pred, ctx, free_ctx, &out);
    return sl__fc_chain(b, s, st, out, "filter");
}
