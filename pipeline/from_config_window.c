/* Pipelines from the config language: the statements that gather elements into windows
 * and groups, and resample them (tf.data's window, group_by_window,
 * bucket_by_sequence_length, rejection_resample; include/sluice/from_config.h has their
 * reference):
 *
 *   window SIZE [shift=N] [stride=N] [drop_remainder]
 *   group_by_window key=COMPONENT [modulo=N] window=N
 *   bucket_by_sequence_length COMPONENT boundaries=[3, 5] batch_sizes=[2, 2, 2] [pad=V]
 *       [pad_to_bucket_boundary] [no_padding] [drop_remainder]
 *   rejection_resample COMPONENT target=[0.5, 0.5] [initial=[...]] [seed=N]
 *
 * flat_map has no statement: its natural config uses are `window` (windows batched) and
 * `unbatch` (flat_map(from_tensor_slices)). Workload: once per statement at start-up. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/from_config_priv.h"

#define MAX_LIST 1024

/* Positional flags after the first argument: each must be one of `flags` (set in on[]). */
static sl_status read_flags(builder *b, const op_def *d, const sl_cfg_stmt *s, const char *const *flags, int nflags,
                            bool *on) {
    for (int i = 1; i < sl_cfg_npos(s); i++) {
        const sl_cfg_value *v = sl_cfg_pos(s, i);
        int k = -1;
        for (int f = 0; f < nflags && v->kind == SL_CV_IDENT; f++)
            if (strcmp(v->text, flags[f]) == 0) k = f;
        if (k < 0) {
            sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "unknown %s flag '%s'", d->name, v->text);
            const char *sug = v->kind == SL_CV_IDENT ? sl_suggest(v->text, flags, nflags) : NULL;
            if (sug) sl_err_hint("did you mean '%s'?", sug);
            else sl__fc_hint_usage(d);
            return SL_EINVAL;
        }
        on[k] = true;
    }
    for (int f = 0; f < nflags; f++) {
        const sl_cfg_value *v = sl_cfg_opt(s, flags[f]);
        if (v && sl__fc_read_bool(b, v, &on[f])) return sl_errcode();
    }
    return SL_OK;
}

/* A list of integers min..max, read at v. */
static sl_status read_ints(builder *b, const op_def *d, const sl_cfg_value *v, int64_t min, int64_t max, int64_t *out,
                           int cap, int *n) {
    double x[MAX_LIST];
    if (sl__fc_read_numbers(b, v, false, x, cap, n)) return sl__fc_hint_usage(d), sl_errcode();
    for (int i = 0; i < *n; i++) {
        if (x[i] != floor(x[i]) || x[i] < (double)min || x[i] > (double)max)
            return sl__fc_err_usage(b, d, v->args[i].v.loc, SL_EINVAL, "expected an integer %lld..%lld, found '%s'",
                                    (long long)min, (long long)max, v->args[i].v.text);
        out[i] = (int64_t)x[i];
    }
    return SL_OK;
}

sl_status sl__fc_build_window(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    static const char *const flags[] = {"drop_remainder"};
    int64_t size, shift = 0, stride = 1;
    bool drop = false;
    const sl_cfg_value *v;
    if (sl__fc_read_int(b, d, sl_cfg_pos(s, 0), 1, 1 << 24, &size)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "shift")) && sl__fc_read_int(b, d, v, 1, INT64_MAX, &shift)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "stride")) && sl__fc_read_int(b, d, v, 1, 1 << 30, &stride)) return sl_errcode();
    if (read_flags(b, d, s, flags, 1, &drop)) return sl_errcode();
    sl_dataset *out;
    sl_status st = sl_ds_window(b->ds, size, shift, stride, drop, &out);
    return sl__fc_chain(b, s, st, out, "window");
}

typedef struct {
    char comp[SL_NAME_MAX];
    int64_t modulo; /* 0: the value itself */
} key_spec;

static sl_status comp_key(void *ctx, const sl_element *e, int64_t *key) {
    const key_spec *k = ctx;
    int c = sl_element_find(e, k->comp);
    if (c < 0) return sl_err(SL_EINVAL, "key: no component '%s'", k->comp);
    const sl_tensor *t = &e->t[c];
    int64_t v;
    bool ok = t->rank == 0;
    if (ok) {
        switch (t->dtype) {
        case SL_DT_I64: v = *(const int64_t *)t->data; break;
        case SL_DT_I32: v = *(const int32_t *)t->data; break;
        case SL_DT_U32: v = *(const uint32_t *)t->data; break;
        case SL_DT_I16: v = *(const int16_t *)t->data; break;
        case SL_DT_U16: v = *(const uint16_t *)t->data; break;
        case SL_DT_I8: v = *(const int8_t *)t->data; break;
        case SL_DT_U8: case SL_DT_BOOL: v = *(const uint8_t *)t->data; break;
        default: ok = false;
        }
    }
    if (!ok) {
        char desc[96];
        return sl_err(SL_EINVAL, "key: component '%s' is %s: the key must be an integer scalar", k->comp,
                      sl_tensor_describe(t, desc, sizeof desc));
    }
    if (k->modulo > 0) { /* Python's (tf.data's) %: the result has the sign of the modulus */
        v %= k->modulo;
        if (v < 0) v += k->modulo;
    }
    *key = v;
    return SL_OK;
}

static void free_spec(void *ctx, void *unused) {
    (void)unused;
    free(ctx);
}

sl_status sl__fc_build_group_by_window(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    const sl_cfg_value *kv = sl_cfg_opt(s, "key"), *wv = sl_cfg_opt(s, "window"), *v;
    if (!kv || !wv)
        return sl__fc_err_usage(b, d, s->loc, SL_EINVAL, "group_by_window: missing %s=", !kv ? "key" : "window");
    const char *comp;
    int64_t window, modulo = 0;
    if (sl__fc_read_comp(b, kv, &comp)) return sl_errcode();
    if (sl__fc_read_int(b, d, wv, 1, 1 << 24, &window)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "modulo")) && sl__fc_read_int(b, d, v, 1, INT64_MAX, &modulo)) return sl_errcode();
    key_spec *k = calloc(1, sizeof *k);
    if (!k) return sl_err(SL_ENOMEM, "out of memory");
    snprintf(k->comp, sizeof k->comp, "%s", comp);
    k->modulo = modulo;
    sl_dataset *out;
    sl_status st = sl_ds_group_by_window_owned(b->ds, comp_key, k, free_spec, window, &out);
    return sl__fc_chain(b, s, st, out, "group_by_window");
}

sl_status sl__fc_build_bucket(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    static const char *const flags[] = {"pad_to_bucket_boundary", "no_padding", "drop_remainder"};
    const sl_cfg_value *bv = sl_cfg_opt(s, "boundaries"), *nv = sl_cfg_opt(s, "batch_sizes"), *v;
    if (!bv || !nv)
        return sl__fc_err_usage(b, d, s->loc, SL_EINVAL, "bucket_by_sequence_length: missing %s=",
                                !bv ? "boundaries" : "batch_sizes");
    const char *comp;
    if (sl__fc_read_comp(b, sl_cfg_pos(s, 0), &comp)) return sl_errcode();
    int64_t bounds[64], sizes[65];
    int nb, ns;
    bool on[3] = {false, false, false};
    if (read_ints(b, d, bv, 1, INT64_MAX, bounds, 64, &nb) || read_ints(b, d, nv, 1, 1 << 24, sizes, 65, &ns))
        return sl_errcode();
    for (int i = 1; i < nb; i++)
        if (bounds[i] <= bounds[i - 1])
            return sl__fc_err_usage(b, d, bv->args[i].v.loc, SL_EINVAL, "boundaries must increase: %lld after %lld",
                                    (long long)bounds[i], (long long)bounds[i - 1]);
    if (ns != nb + 1)
        return sl__fc_err_usage(b, d, nv->loc, SL_EINVAL, "%d batch sizes for %d boundaries: give one more than the "
                                "boundaries (%d)", ns, nb, nb + 1);
    if (read_flags(b, d, s, flags, 3, on)) return sl_errcode();
    sl_bucket_opts o = {.component = comp, .boundaries = bounds, .nboundaries = nb, .batch_sizes = sizes,
                        .pad_to_bucket_boundary = on[0], .no_padding = on[1], .drop_remainder = on[2]};
    if ((v = sl_cfg_opt(s, "pad")) && sl_cfg_double(b->cfg, v, &o.pad_value)) return sl_errcode();
    if (on[0] && on[1])
        return sl__fc_err_usage(b, d, s->loc, SL_EINVAL, "pad_to_bucket_boundary and no_padding exclude each other");
    sl_dataset *out;
    sl_status st = sl_ds_bucket_by_sequence_length(b->ds, &o, &out);
    return sl__fc_chain(b, s, st, out, "bucket_by_sequence_length");
}

sl_status sl__fc_build_rejection_resample(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    const sl_cfg_value *tv = sl_cfg_opt(s, "target"), *iv = sl_cfg_opt(s, "initial"), *v;
    if (!tv) return sl__fc_err_usage(b, d, s->loc, SL_EINVAL, "rejection_resample: missing target=");
    const char *comp;
    if (sl__fc_read_comp(b, sl_cfg_pos(s, 0), &comp)) return sl_errcode();
    double t[MAX_LIST], p[MAX_LIST];
    int nt, np = 0;
    if (sl__fc_read_numbers(b, tv, false, t, MAX_LIST, &nt)) return sl__fc_hint_usage(d), sl_errcode();
    if (iv) {
        if (sl__fc_read_numbers(b, iv, false, p, MAX_LIST, &np)) return sl__fc_hint_usage(d), sl_errcode();
        if (np != nt)
            return sl__fc_err_usage(b, d, iv->loc, SL_EINVAL, "initial has %d weights, target %d: give one per class", np,
                                    nt);
    }
    int64_t seed = (int64_t)sl__mix(b->env.seed, (uint64_t)b->stmt_index + 1); /* as shuffle's default */
    if ((v = sl_cfg_opt(s, "seed")) && sl__fc_read_int(b, d, v, 0, INT64_MAX, &seed)) return sl_errcode();
    sl_dataset *out;
    sl_status st = sl_ds_rejection_resample(b->ds, comp, t, nt, iv ? p : NULL, (uint64_t)seed, &out);
    return sl__fc_chain(b, s, st, out, "rejection_resample");
}
