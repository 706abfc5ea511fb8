/* Pipelines from the config language: map's functions. Each function is a table entry (name,
 * usage, parameters in positional order, how many are required) and a builder; a call's
 * arguments are bound to the parameters by position or name=value, and every mistake is
 * reported at its spot in the file with the function's usage as the hint. The functions are
 * specified in include/sluice/from_config.h.
 *
 * Workload: a few calls per pipeline, parsed once at start-up. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/from_config_priv.h"

#define MAX_PARAMS 8

typedef struct fn_def fn_def;
typedef sl_status (*fn_build_fn)(builder *b, const fn_def *f, const sl_cfg_value *call,
                                 const sl_cfg_value *const *args, sl_fn **out);

struct fn_def {
    const char *name;
    const char *usage;
    const char *params[MAX_PARAMS]; /* in positional order */
    int nreq;                       /* the first nreq are required */
    fn_build_fn build;
};

static sl_status fn_err(builder *b, const fn_def *f, sl_cfg_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static sl_status fn_err(builder *b, const fn_def *f, sl_cfg_loc loc, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sl_cfg_err(b->cfg, loc, SL_EINVAL, "%s: %s", f->name, msg);
    sl_err_hint("usage: %s", f->usage);
    return SL_EINVAL;
}

/* An image function's max_pixels=N (v NULL: the default) onto the new *fn; for a crop or
 * resize (size_v given) the target h x w must fit under it, which is checked here so that
 * a typo in a size is reported at its spot before anything runs. *fn is released on failure. */
static sl_status with_max_pixels(builder *b, const fn_def *f, const sl_cfg_value *v,
                                 const sl_cfg_value *size_v, int h, int w, sl_status st, sl_fn **fn) {
    if (st) return st;
    int64_t max = SL_FN_MAX_PIXELS_DEFAULT;
    if (v && (st = sl__fc_read_int(b, NULL, v, 1, (int64_t)1 << 40, &max))) goto fail;
    if (v && (st = sl_fn_set_max_pixels(*fn, max))) goto fail;
    if (size_v && (int64_t)h * w > max) {
        st = sl_cfg_err(b->cfg, size_v->loc, SL_ERANGE, "%s: the target %dx%d is %lld pixels, over the limit of %lld",
                        f->name, h, w, (long long)h * w, (long long)max);
        sl_err_hint("if you mean it, raise the limit: %s(..., max_pixels=%lld)", f->name, (long long)h * w);
        goto fail;
    }
    return SL_OK;
fail:
    sl_fn_unref(*fn);
    *fn = NULL;
    return st;
}

static sl_status fn_decode_jpeg(builder *b, const fn_def *f, const sl_cfg_value *call,
                                const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp;
    int64_t ch = 0;
    if (sl__fc_read_comp(b, a[0], &comp)) return sl_errcode();
    if (a[1]) {
        if (sl__fc_read_int(b, NULL, a[1], 0, 3, &ch)) return sl_errcode();
        if (ch == 2) return fn_err(b, f, a[1]->loc, "channels must be 0 (as in the file), 1 or 3");
    }
    bool dct = true, fancy = true, fast_dct = false;
    if (a[3] && sl__fc_read_bool(b, a[3], &dct)) return sl_errcode();
    if (a[4] && sl__fc_read_bool(b, a[4], &fancy)) return sl_errcode();
    if (a[5]) {
        const char *m;
        if (sl__fc_read_word(b, a[5], "a DCT method", &m)) return sl_errcode();
        if (strcmp(m, "INTEGER_FAST") == 0) fast_dct = true;
        else if (strcmp(m, "INTEGER_ACCURATE") != 0)
            return fn_err(b, f, a[5]->loc, "dct_method '%s' is not INTEGER_ACCURATE or INTEGER_FAST", m);
    }
    sl_status st = with_max_pixels(b, f, a[2], NULL, 0, 0, sl_fn_decode_jpeg(comp, (int)ch, out), out);
    if (!st && !dct) st = sl_fn_set_dct_scaling(*out, false);
    if (!st && (fast_dct || !fancy)) st = sl_fn_set_jpeg_speed(*out, fast_dct, fancy);
    if (st && *out) {
        sl_fn_unref(*out);
        *out = NULL;
    }
    return st;
}

/* antialias=BOOL (v NULL: the default, true) onto a crop or resize *fn, released on failure. */
static sl_status with_antialias(builder *b, const sl_cfg_value *v, sl_status st, sl_fn **fn) {
    if (st || !v) return st;
    bool aa = true;
    if ((st = sl__fc_read_bool(b, v, &aa)) || (st = sl_fn_set_antialias(*fn, aa))) {
        sl_fn_unref(*fn);
        *fn = NULL;
    }
    return st;
}

static sl_status fn_random_resized_crop(builder *b, const fn_def *f, const sl_cfg_value *call,
                                        const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp;
    int h, w;
    double slo = 0.08, shi = 1.0, rlo = 3.0 / 4, rhi = 4.0 / 3;
    if (sl__fc_read_comp(b, a[0], &comp) || sl__fc_read_size(b, a[1], &h, &w)) return sl_errcode();
    if (a[2] && sl__fc_read_range2(b, a[2], &slo, &shi)) return sl_errcode();
    if (a[2] && shi > 1) return fn_err(b, f, a[2]->loc, "scale is a fraction of the area: at most 1");
    if (a[3] && sl__fc_read_range2(b, a[3], &rlo, &rhi)) return sl_errcode();
    return with_antialias(b, a[5],
                          with_max_pixels(b, f, a[4], a[1], h, w,
                                          sl_fn_random_resized_crop(comp, h, w, slo, shi, rlo, rhi, out), out),
                          out);
}

static sl_status fn_center_crop(builder *b, const fn_def *f, const sl_cfg_value *call,
                                const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp;
    int h, w;
    if (sl__fc_read_comp(b, a[0], &comp) || sl__fc_read_size(b, a[1], &h, &w)) return sl_errcode();
    return with_antialias(b, a[3], with_max_pixels(b, f, a[2], a[1], h, w, sl_fn_center_crop(comp, h, w, out), out),
                          out);
}

static sl_status fn_resize(builder *b, const fn_def *f, const sl_cfg_value *call, const sl_cfg_value *const *a,
                           sl_fn **out) {
    const char *comp;
    int h, w;
    if (sl__fc_read_comp(b, a[0], &comp)) return sl_errcode();
    if (a[1] && a[4])
        return fn_err(b, f, a[4]->loc, "give SIZE or shorter=N, not both");
    if (!a[1] && !a[4])
        return fn_err(b, f, call->loc, "missing the size: SIZE (256 or 256x192) or shorter=N (keeps the aspect ratio)");
    if (a[4]) { /* torchvision's Resize(N): the shorter side to N */
        int64_t n;
        if (sl__fc_read_int(b, NULL, a[4], 1, 1 << 20, &n)) return sl_errcode();
        /* the output is at least N x N: refuse a target that cannot fit under the limit */
        return with_antialias(b, a[3],
                              with_max_pixels(b, f, a[2], a[4], (int)n, (int)n, sl_fn_resize_shorter(comp, (int)n, out),
                                              out),
                              out);
    }
    if (sl__fc_read_size(b, a[1], &h, &w)) return sl_errcode();
    return with_antialias(b, a[3], with_max_pixels(b, f, a[2], a[1], h, w, sl_fn_resize(comp, h, w, out), out), out);
}

static sl_status fn_random_flip(builder *b, const fn_def *f, const sl_cfg_value *call,
                                const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp;
    double p = 0.5;
    bool hz = true, vt = false;
    if (sl__fc_read_comp(b, a[0], &comp)) return sl_errcode();
    if (a[1]) {
        if (sl_cfg_double(b->cfg, a[1], &p)) return sl_errcode();
        if (p < 0 || p > 1) return fn_err(b, f, a[1]->loc, "p is a probability: 0 to 1");
    }
    if (a[2] && sl__fc_read_bool(b, a[2], &hz)) return sl_errcode();
    if (a[3] && sl__fc_read_bool(b, a[3], &vt)) return sl_errcode();
    return sl_fn_random_flip(comp, hz, vt, p, out);
}

static sl_status fn_random_crop(builder *b, const fn_def *f, const sl_cfg_value *call,
                                const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp;
    int h, w;
    int64_t pad = 0;
    if (sl__fc_read_comp(b, a[0], &comp) || sl__fc_read_size(b, a[1], &h, &w)) return sl_errcode();
    if (a[2] && sl__fc_read_int(b, NULL, a[2], 0, 65535, &pad)) return sl_errcode();
    return sl_fn_random_crop(comp, h, w, (int)pad, out);
}

static sl_status fn_normalize(builder *b, const fn_def *f, const sl_cfg_value *call,
                              const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp;
    double m[16], sd[16];
    int nm, ns;
    bool scale_u8 = true;
    if (sl__fc_read_comp(b, a[0], &comp) || sl__fc_read_numbers(b, a[1], true, m, 16, &nm) ||
        sl__fc_read_numbers(b, a[2], true, sd, 16, &ns))
        return SL_EINVAL;
    if (nm != ns)
        return fn_err(b, f, a[2]->loc, "mean has %d value%s but std has %d", nm, nm == 1 ? "" : "s", ns);
    float mf[16], sf[16];
    for (int i = 0; i < nm; i++) {
        if (sd[i] == 0) return fn_err(b, f, a[2]->loc, "std must not be 0");
        mf[i] = (float)m[i];
        sf[i] = (float)sd[i];
    }
    if (a[3] && sl__fc_read_bool(b, a[3], &scale_u8)) return sl_errcode();
    return sl_fn_normalize(comp, mf, sf, nm, scale_u8, out);
}

static sl_status fn_cast(builder *b, const fn_def *f, const sl_cfg_value *call, const sl_cfg_value *const *a,
                         sl_fn **out) {
    const char *comp;
    sl_dtype dt;
    if (sl__fc_read_comp(b, a[0], &comp) || sl__fc_read_dtype(b, a[1], false, &dt)) return sl_errcode();
    return sl_fn_cast(comp, dt, out);
}

static sl_status fn_scale(builder *b, const fn_def *f, const sl_cfg_value *call, const sl_cfg_value *const *a,
                          sl_fn **out) {
    const char *comp;
    double k;
    if (sl__fc_read_comp(b, a[0], &comp) || sl_cfg_double(b->cfg, a[1], &k)) return sl_errcode();
    return sl_fn_scale(comp, k, out);
}

/* A shape: 28x28x1, a count (rank 1), or a list of counts. */
static sl_status read_shape(builder *b, const sl_cfg_value *v, int *rank, int64_t *dims) {
    if (v->kind == SL_CV_SHAPE && v->ndims <= SL_MAX_RANK) {
        *rank = v->ndims;
        memcpy(dims, v->dims, sizeof *dims * (size_t)v->ndims);
        return SL_OK;
    }
    if (v->kind == SL_CV_NUMBER && v->is_int && v->inum >= 0) {
        *rank = 1;
        dims[0] = v->inum;
        return SL_OK;
    }
    if (v->kind == SL_CV_LIST && v->nargs <= SL_MAX_RANK) {
        for (int i = 0; i < v->nargs; i++) {
            const sl_cfg_value *x = &v->args[i].v;
            if (x->kind != SL_CV_NUMBER || !x->is_int || x->inum < 0) goto bad;
            dims[i] = x->inum;
        }
        *rank = v->nargs;
        return SL_OK;
    }
bad:
    sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "expected a shape, found '%s'", v->text);
    sl_err_hint("write a shape like 28x28x1 (at most %d dimensions) or a count like 784", SL_MAX_RANK);
    return SL_EINVAL;
}

static sl_status fn_decode_raw(builder *b, const fn_def *f, const sl_cfg_value *call,
                               const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp;
    sl_dtype dt;
    int rank;
    int64_t dims[SL_MAX_RANK];
    if (sl__fc_read_comp(b, a[0], &comp) || sl__fc_read_dtype(b, a[1], false, &dt) || read_shape(b, a[2], &rank, dims))
        return SL_EINVAL;
    return sl_fn_decode_raw(comp, dt, rank, dims, out);
}

static sl_status fn_one_hot(builder *b, const fn_def *f, const sl_cfg_value *call, const sl_cfg_value *const *a,
                            sl_fn **out) {
    const char *comp;
    int64_t depth;
    if (sl__fc_read_comp(b, a[0], &comp) || sl__fc_read_int(b, NULL, a[1], 1, 1 << 20, &depth)) return sl_errcode();
    return sl_fn_one_hot(comp, (int)depth, out);
}

/* parse_example(image: bytes, label: int64(default=0), box: float(4), input=record) */
static sl_status fn_parse_example(builder *b, const fn_def *f, const sl_cfg_value *call,
                                  const sl_cfg_value *const *unused, sl_fn **out) {
    sl_feature_spec specs[SL_ELEM_MAX];
    int n = 0;
    const char *input = "record";
    static const char *const types[] = {"bytes", "int64", "float"};
    static const char *const type_opts[] = {"default", "as"};
    for (int i = 0; i < call->nargs; i++) {
        const sl_cfg_arg *a = &call->args[i];
        if (!a->key)
            return fn_err(b, f, a->v.loc, "expected FEATURE: TYPE, found '%s'", a->v.text);
        if (a->sep == '=') {
            if (strcmp(a->key, "input") != 0) {
                sl_cfg_err(b->cfg, sl__fc_key_loc(a), SL_EINVAL, "parse_example: unknown option '%s'", a->key);
                sl_err_hint("features are written with a colon (%s: int64); the only option is input=COMPONENT", a->key);
                return SL_EINVAL;
            }
            if (sl__fc_read_comp(b, &a->v, &input)) return sl_errcode();
            continue;
        }
        if (n == SL_ELEM_MAX) return fn_err(b, f, a->v.loc, "at most %d features", SL_ELEM_MAX);
        sl_feature_spec *sp = &specs[n];
        memset(sp, 0, sizeof *sp);
        sp->name = a->key;
        const sl_cfg_value *tv = &a->v;
        if (tv->kind != SL_CV_IDENT && tv->kind != SL_CV_CALL)
            return fn_err(b, f, tv->loc, "expected a feature type (bytes, int64 or float), found '%s'", tv->text);
        sl_dtype dt = sl_dtype_from_name(tv->text);
        if (dt != SL_DT_BYTES && dt != SL_DT_I64 && dt != SL_DT_F32) {
            sl_cfg_err(b->cfg, tv->loc, SL_EINVAL, "parse_example: unknown feature type '%s'", tv->text);
            const char *sug = sl_suggest(tv->text, types, 3);
            if (sug) sl_err_hint("did you mean '%s'? (tf.train.Example holds bytes, int64 and float lists)", sug);
            else sl_err_hint("a feature is bytes, int64 or float (tf.train.Example's three kinds)");
            return SL_EINVAL;
        }
        sp->dtype = dt;
        if (tv->kind == SL_CV_CALL) {
            bool shaped = false;
            for (int k = 0; k < tv->nargs; k++) {
                const sl_cfg_arg *ta = &tv->args[k];
                const sl_cfg_value *x = &ta->v;
                if (!ta->key) {
                    if (shaped) return fn_err(b, f, x->loc, "feature '%s' has two shapes", a->key);
                    shaped = true;
                    if (x->kind == SL_CV_IDENT && strcmp(x->text, "*") == 0) {
                        sp->rank = 1;
                        sp->dims[0] = -1;
                    } else if (read_shape(b, x, &sp->rank, sp->dims)) {
                        return SL_EINVAL;
                    }
                } else if (strcmp(ta->key, "default") == 0) {
                    sp->has_default = true;
                    if (dt == SL_DT_BYTES) {
                        if (x->kind != SL_CV_STRING)
                            return fn_err(b, f, x->loc, "the default of a bytes feature is a string, found '%s'", x->text);
                        sp->default_bytes = x->text;
                    } else if (sl_cfg_double(b->cfg, x, &sp->default_num)) {
                        return SL_EINVAL;
                    }
                } else if (strcmp(ta->key, "as") == 0) {
                    if (sl__fc_read_comp(b, x, &sp->as)) return sl_errcode();
                } else {
                    sl_cfg_err(b->cfg, sl__fc_key_loc(ta), SL_EINVAL, "parse_example: unknown type option '%s'", ta->key);
                    const char *sug = sl_suggest(ta->key, type_opts, 2);
                    if (sug) sl_err_hint("did you mean '%s'?", sug);
                    else sl_err_hint("a type takes a shape, default=VALUE and as=NAME: int64(4, default=0)");
                    return SL_EINVAL;
                }
            }
        }
        n++;
    }
    if (n == 0) return fn_err(b, f, call->loc, "no features to parse");
    return sl_fn_parse_example(input, specs, n, out);
}

/* ---- colour, rotation, erasing, padding and box crops (pipeline/fn/color_jitter.c and its
 * siblings) ---- */

static sl_status fn_adjust(builder *b, const fn_def *f, const sl_cfg_value *call, const sl_cfg_value *const *a,
                           sl_fn **out) {
    const char *comp;
    double k;
    if (sl__fc_read_comp(b, a[0], &comp) || sl_cfg_double(b->cfg, a[1], &k)) return sl_errcode();
    bool hue = strcmp(f->name, "adjust_hue") == 0;
    if (hue ? !(k >= -0.5 && k <= 0.5) : !(k >= 0))
        return fn_err(b, f, a[1]->loc, "%s", hue ? "the hue factor is in [-0.5, 0.5]" : "the factor must be >= 0");
    if (hue) return sl_fn_adjust_hue(comp, k, out);
    if (strcmp(f->name, "adjust_brightness") == 0) return sl_fn_adjust_brightness(comp, k, out);
    if (strcmp(f->name, "adjust_contrast") == 0) return sl_fn_adjust_contrast(comp, k, out);
    return sl_fn_adjust_saturation(comp, k, out);
}

/* color_jitter(COMP, brightness=B, contrast=C, saturation=S, hue=H): each a number (as
 * torchvision's ColorJitter) or [lo, hi] */
static sl_status fn_color_jitter(builder *b, const fn_def *f, const sl_cfg_value *call,
                                 const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp;
    double lo[4] = {1, 1, 1, 0}, hi[4] = {1, 1, 1, 0};
    if (sl__fc_read_comp(b, a[0], &comp)) return sl_errcode();
    for (int k = 0; k < 4; k++) {
        const sl_cfg_value *v = a[1 + k];
        double x[2];
        int n;
        if (!v) continue;
        if (sl__fc_read_numbers(b, v, true, x, 2, &n)) return SL_EINVAL;
        double min = k == 3 ? -0.5 : 0, max = k == 3 ? 0.5 : 1e6;
        if (n == 1) {
            if (!(x[0] >= 0 && x[0] <= (k == 3 ? 0.5 : 1e6)))
                return fn_err(b, f, v->loc, "%s %g must be in [0, %g]", f->params[1 + k], x[0], k == 3 ? 0.5 : 1e6);
            lo[k] = k == 3 ? -x[0] : (1 - x[0] > 0 ? 1 - x[0] : 0);
            hi[k] = k == 3 ? x[0] : 1 + x[0];
        } else if (n == 2 && x[0] >= min && x[0] <= x[1] && x[1] <= max) {
            lo[k] = x[0];
            hi[k] = x[1];
        } else {
            return fn_err(b, f, v->loc, "%s is a number or [lo, hi] with %g <= lo <= hi <= %g", f->params[1 + k], min,
                          max);
        }
    }
    return sl_fn_color_jitter_ranges(comp, lo, hi, out);
}

static sl_status fn_rgb_to_grayscale(builder *b, const fn_def *f, const sl_cfg_value *call,
                                     const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp;
    int64_t ch = 1;
    if (sl__fc_read_comp(b, a[0], &comp)) return sl_errcode();
    if (a[1] && sl__fc_read_int(b, NULL, a[1], 1, 3, &ch)) return sl_errcode();
    if (ch == 2) return fn_err(b, f, a[1]->loc, "channels must be 1 or 3");
    return sl_fn_rgb_to_grayscale(comp, (int)ch, out);
}

/* A probability argument (v NULL: def) into *p. */
static sl_status read_p(builder *b, const fn_def *f, const sl_cfg_value *v, double def, double *p) {
    *p = def;
    if (!v) return SL_OK;
    if (sl_cfg_double(b->cfg, v, p)) return sl_errcode();
    if (!(*p >= 0 && *p <= 1)) return fn_err(b, f, v->loc, "p is a probability: 0 to 1");
    return SL_OK;
}

static sl_status fn_random_grayscale(builder *b, const fn_def *f, const sl_cfg_value *call,
                                     const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp;
    double p;
    if (sl__fc_read_comp(b, a[0], &comp) || read_p(b, f, a[1], 0.1, &p)) return sl_errcode();
    return sl_fn_random_grayscale(comp, p, out);
}

static sl_status fn_rot90(builder *b, const fn_def *f, const sl_cfg_value *call, const sl_cfg_value *const *a,
                          sl_fn **out) {
    const char *comp;
    int64_t k = 1;
    if (sl__fc_read_comp(b, a[0], &comp)) return sl_errcode();
    if (strcmp(f->name, "random_rot90") == 0) return sl_fn_random_rot90(comp, out);
    if (a[1] && sl__fc_read_int(b, NULL, a[1], -1000000, 1000000, &k)) return sl_errcode();
    return sl_fn_rot90(comp, (int)k, out);
}

/* value=N, value=[N, ...] or (when allow_random) value=random, into v[0..*n) / *random. */
static sl_status read_fill(builder *b, const fn_def *f, const sl_cfg_value *v, bool allow_random, float *vals, int *n,
                           bool *random) {
    *random = false;
    vals[0] = 0;
    *n = 1;
    if (!v) return SL_OK;
    if (allow_random && v->kind == SL_CV_IDENT && strcmp(v->text, "random") == 0) {
        *random = true;
        return SL_OK;
    }
    double d[16];
    if (sl__fc_read_numbers(b, v, true, d, 16, n)) return SL_EINVAL;
    if (*n < 1) return fn_err(b, f, v->loc, "value needs at least one number");
    for (int i = 0; i < *n; i++) vals[i] = (float)d[i];
    return SL_OK;
}

static sl_status fn_erase(builder *b, const fn_def *f, const sl_cfg_value *call, const sl_cfg_value *const *a,
                          sl_fn **out) {
    const char *comp;
    int64_t box[4];
    float vals[16];
    int n;
    bool random;
    if (sl__fc_read_comp(b, a[0], &comp)) return sl_errcode();
    for (int k = 0; k < 4; k++)
        if (sl__fc_read_int(b, NULL, a[1 + k], k < 2 ? 0 : 1, 1 << 20, &box[k])) return sl_errcode();
    if (read_fill(b, f, a[5], false, vals, &n, &random)) return SL_EINVAL;
    return sl_fn_erase(comp, (int)box[0], (int)box[1], (int)box[2], (int)box[3], vals, n, out);
}

static sl_status fn_random_erasing(builder *b, const fn_def *f, const sl_cfg_value *call,
                                   const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp;
    double p, slo = 0.02, shi = 0.33, rlo = 0.3, rhi = 3.3;
    float vals[16];
    int n;
    bool random;
    if (sl__fc_read_comp(b, a[0], &comp) || read_p(b, f, a[1], 0.5, &p)) return sl_errcode();
    if (a[2] && sl__fc_read_range2(b, a[2], &slo, &shi)) return sl_errcode();
    if (a[2] && shi > 1) return fn_err(b, f, a[2]->loc, "scale is a fraction of the area: at most 1");
    if (a[3] && sl__fc_read_range2(b, a[3], &rlo, &rhi)) return sl_errcode();
    if (read_fill(b, f, a[4], true, vals, &n, &random)) return SL_EINVAL;
    return sl_fn_random_erasing(comp, p, slo, shi, rlo, rhi, vals, n, random, out);
}

static sl_status fn_resize_with_pad(builder *b, const fn_def *f, const sl_cfg_value *call,
                                    const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp;
    int h, w;
    if (sl__fc_read_comp(b, a[0], &comp) || sl__fc_read_size(b, a[1], &h, &w)) return sl_errcode();
    if ((int64_t)h * w > SL_FN_MAX_PIXELS_DEFAULT)
        return fn_err(b, f, a[1]->loc, "the target %dx%d is over the limit of %lld pixels", h, w,
                      (long long)SL_FN_MAX_PIXELS_DEFAULT);
    return sl_fn_resize_with_pad(comp, h, w, out);
}

static sl_status fn_crop_to_bounding_box(builder *b, const fn_def *f, const sl_cfg_value *call,
                                         const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp;
    int64_t box[4];
    if (sl__fc_read_comp(b, a[0], &comp)) return sl_errcode();
    for (int k = 0; k < 4; k++)
        if (sl__fc_read_int(b, NULL, a[1 + k], k < 2 ? 0 : 1, 1 << 20, &box[k])) return sl_errcode();
    return sl_fn_crop_to_bounding_box(comp, (int)box[0], (int)box[1], (int)box[2], (int)box[3], out);
}

static sl_status fn_distorted_bbox_crop(builder *b, const fn_def *f, const sl_cfg_value *call,
                                        const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp, *boxes = NULL;
    double cov = 0.1, alo = 0.75, ahi = 1.33, arlo = 0.05, arhi = 1.0;
    int64_t attempts = 100;
    bool use_image = true;
    if (sl__fc_read_comp(b, a[0], &comp)) return sl_errcode();
    if (a[1] && sl__fc_read_comp(b, a[1], &boxes)) return sl_errcode();
    if (a[2]) {
        if (sl_cfg_double(b->cfg, a[2], &cov)) return sl_errcode();
        if (!(cov >= 0 && cov <= 1)) return fn_err(b, f, a[2]->loc, "min_object_covered is a fraction: 0 to 1");
    }
    if (a[3] && sl__fc_read_range2(b, a[3], &alo, &ahi)) return sl_errcode();
    if (a[4] && sl__fc_read_range2(b, a[4], &arlo, &arhi)) return sl_errcode();
    if (a[4] && arhi > 1) return fn_err(b, f, a[4]->loc, "area_range is a fraction of the area: at most 1");
    if (a[5] && sl__fc_read_int(b, NULL, a[5], 1, 100000, &attempts)) return sl_errcode();
    if (a[6] && sl__fc_read_bool(b, a[6], &use_image)) return sl_errcode();
    return sl_fn_distorted_bbox_crop(comp, boxes, cov, alo, ahi, arlo, arhi, (int)attempts, use_image, out);
}

static sl_status fn_rand_augment(builder *b, const fn_def *f, const sl_cfg_value *call,
                                 const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp;
    int64_t nops = 2, mag = 9, bins = 31;
    if (sl__fc_read_comp(b, a[0], &comp)) return sl_errcode();
    if (a[1] && sl__fc_read_int(b, NULL, a[1], 0, 16, &nops)) return sl_errcode();
    if (a[3] && sl__fc_read_int(b, NULL, a[3], 2, 1000, &bins)) return sl_errcode();
    if (a[2] && sl__fc_read_int(b, NULL, a[2], 0, 999, &mag)) return sl_errcode();
    if (mag >= bins)
        return fn_err(b, f, a[2] ? a[2]->loc : call->loc, "magnitude %lld is not a bin: 0..%lld", (long long)mag,
                      (long long)bins - 1);
    return sl_fn_rand_augment(comp, (int)nops, (int)mag, (int)bins, out);
}

static sl_status fn_trivial_augment(builder *b, const fn_def *f, const sl_cfg_value *call,
                                    const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp;
    int64_t bins = 31;
    if (sl__fc_read_comp(b, a[0], &comp)) return sl_errcode();
    if (a[1] && sl__fc_read_int(b, NULL, a[1], 2, 1000, &bins)) return sl_errcode();
    return sl_fn_trivial_augment(comp, (int)bins, out);
}

static sl_status fn_augment_op(builder *b, const fn_def *f, const sl_cfg_value *call,
                               const sl_cfg_value *const *a, sl_fn **out) {
    const char *comp, *op;
    double mag = 0;
    if (sl__fc_read_comp(b, a[0], &comp) || sl__fc_read_word(b, a[1], "an augment op", &op)) return sl_errcode();
    if (a[2] && sl_cfg_double(b->cfg, a[2], &mag)) return sl_errcode();
    sl_status st = sl_fn_augment_op(comp, op, mag, out);
    if (st) sl_err_prefix("%s:%d:%d: ", sl_cfg_filename(b->cfg), a[1]->loc.line, a[1]->loc.col);
    return st;
}

/* A probability or a positive alpha (v NULL: *x stays). */
static sl_status read_pos(builder *b, const fn_def *f, const sl_cfg_value *v, bool prob, double *x) {
    if (!v) return SL_OK;
    if (sl_cfg_double(b->cfg, v, x)) return sl_errcode();
    if (prob && !(*x >= 0 && *x <= 1)) return fn_err(b, f, v->loc, "p is a probability: 0 to 1");
    if (!prob && !(*x > 0)) return fn_err(b, f, v->loc, "alpha must be > 0 (lambda ~ Beta(alpha, alpha))");
    return SL_OK;
}

/* mixup / cutmix (image, label, alpha, num_classes, p) and mixup_cutmix (image, label,
 * mixup_alpha, cutmix_alpha, num_classes). */
static sl_status fn_mix(builder *b, const fn_def *f, const sl_cfg_value *call, const sl_cfg_value *const *a,
                        sl_fn **out) {
    const char *image, *label;
    bool choice = strcmp(f->name, "mixup_cutmix") == 0;
    double alpha = strcmp(f->name, "cutmix") == 0 ? 1.0 : 0.2, cut = 1.0, p = 1.0;
    int64_t k;
    const sl_cfg_value *kv = choice ? a[4] : a[3];
    if (sl__fc_read_comp(b, a[0], &image) || sl__fc_read_comp(b, a[1], &label)) return sl_errcode();
    if (!kv) return fn_err(b, f, call->loc, "missing num_classes=N (the labels are made one-hot over N classes)");
    if (sl__fc_read_int(b, NULL, kv, 1, 1 << 24, &k)) return sl_errcode();
    if (read_pos(b, f, a[2], false, &alpha)) return SL_EINVAL;
    if (choice) {
        if (read_pos(b, f, a[3], false, &cut)) return SL_EINVAL;
        return sl_fn_mixup_cutmix(image, label, alpha, cut, (int)k, out);
    }
    if (read_pos(b, f, a[4], true, &p)) return SL_EINVAL;
    return strcmp(f->name, "mixup") == 0 ? sl_fn_mixup(image, label, alpha, (int)k, p, out)
                                        : sl_fn_cutmix(image, label, alpha, (int)k, p, out);
}

static const fn_def FNS[] = {
    {"parse_example", "parse_example(FEATURE: bytes|int64|float[(SHAPE, default=V, as=NAME)], ..., input=record)",
     {0}, 0, fn_parse_example},
    {"decode_jpeg", "decode_jpeg(COMP, channels=0|1|3, max_pixels=89478485, dct_scaling=true, fancy_upscaling=true, "
                    "dct_method=INTEGER_ACCURATE|INTEGER_FAST)",
     {"comp", "channels", "max_pixels", "dct_scaling", "fancy_upscaling", "dct_method"}, 1, fn_decode_jpeg},
    {"random_resized_crop",
     "random_resized_crop(COMP, SIZE, scale=[0.08, 1], ratio=[0.75, 1.333], max_pixels=89478485, antialias=true)",
     {"comp", "size", "scale", "ratio", "max_pixels", "antialias"}, 2, fn_random_resized_crop},
    {"center_crop", "center_crop(COMP, SIZE, max_pixels=89478485, antialias=true)   SIZE: 224 or 224x200",
     {"comp", "size", "max_pixels", "antialias"}, 2, fn_center_crop},
    {"resize",
     "resize(COMP, SIZE, max_pixels=89478485, antialias=true) or resize(COMP, shorter=N, ...)   SIZE: 256 or 256x192",
     {"comp", "size", "max_pixels", "antialias", "shorter"}, 1, fn_resize},
    {"random_crop", "random_crop(COMP, SIZE, padding=0)   SIZE: 28 or 32x28; zeros around, then a random window",
     {"comp", "size", "padding"}, 2, fn_random_crop},
    {"random_flip", "random_flip(COMP, p=0.5, horizontal=true, vertical=false)",
     {"comp", "p", "horizontal", "vertical"}, 1, fn_random_flip},
    {"normalize", "normalize(COMP, mean=[...], std=[...], scale_uint8=true)",
     {"comp", "mean", "std", "scale_uint8"}, 3, fn_normalize},
    {"cast", "cast(COMP, DTYPE)", {"comp", "dtype"}, 2, fn_cast},
    {"scale", "scale(COMP, FACTOR)", {"comp", "factor"}, 2, fn_scale},
    {"decode_raw", "decode_raw(COMP, DTYPE, SHAPE)", {"comp", "dtype", "shape"}, 3, fn_decode_raw},
    {"one_hot", "one_hot(COMP, DEPTH)", {"comp", "depth"}, 2, fn_one_hot},
    {"rand_augment", "rand_augment(COMP, num_ops=2, magnitude=9, bins=31)   uint8 images",
     {"comp", "num_ops", "magnitude", "bins"}, 1, fn_rand_augment},
    {"trivial_augment", "trivial_augment(COMP, bins=31)   uint8 images", {"comp", "bins"}, 1, fn_trivial_augment},
    {"augment_op", "augment_op(COMP, OP, magnitude=0)   OP: ShearX, Rotate, Posterize, ... (torchvision's names)",
     {"comp", "op", "magnitude"}, 2, fn_augment_op},
    {"mixup", "mixup(IMAGE, LABEL, alpha=0.2, num_classes=N, p=1.0)   after batch",
     {"image", "label", "alpha", "num_classes", "p"}, 2, fn_mix},
    {"cutmix", "cutmix(IMAGE, LABEL, alpha=1.0, num_classes=N, p=1.0)   after batch",
     {"image", "label", "alpha", "num_classes", "p"}, 2, fn_mix},
    {"mixup_cutmix", "mixup_cutmix(IMAGE, LABEL, mixup_alpha=0.2, cutmix_alpha=1.0, num_classes=N)   after batch",
     {"image", "label", "mixup_alpha", "cutmix_alpha", "num_classes"}, 2, fn_mix},
    {"adjust_brightness", "adjust_brightness(COMP, FACTOR)   uint8; torchvision's F.adjust_brightness",
     {"comp", "factor"}, 2, fn_adjust},
    {"adjust_contrast", "adjust_contrast(COMP, FACTOR)   uint8; torchvision's F.adjust_contrast",
     {"comp", "factor"}, 2, fn_adjust},
    {"adjust_saturation", "adjust_saturation(COMP, FACTOR)   uint8; torchvision's F.adjust_saturation",
     {"comp", "factor"}, 2, fn_adjust},
    {"adjust_hue", "adjust_hue(COMP, FACTOR)   FACTOR in [-0.5, 0.5]; uint8; torchvision's F.adjust_hue",
     {"comp", "factor"}, 2, fn_adjust},
    {"color_jitter", "color_jitter(COMP, brightness=0, contrast=0, saturation=0, hue=0)   each N or [lo, hi]",
     {"comp", "brightness", "contrast", "saturation", "hue"}, 1, fn_color_jitter},
    {"rgb_to_grayscale", "rgb_to_grayscale(COMP, channels=1|3)", {"comp", "channels"}, 1, fn_rgb_to_grayscale},
    {"random_grayscale", "random_grayscale(COMP, p=0.1)", {"comp", "p"}, 1, fn_random_grayscale},
    {"rot90", "rot90(COMP, k=1)   counter-clockwise quarter turns, as tf.image.rot90", {"comp", "k"}, 1, fn_rot90},
    {"random_rot90", "random_rot90(COMP)   k uniform in 0..3", {"comp"}, 1, fn_rot90},
    {"erase", "erase(COMP, I, J, H, W, value=0|[v, ...])   the box at row I, column J", {"comp", "i", "j", "h", "w", "value"},
     5, fn_erase},
    {"random_erasing", "random_erasing(COMP, p=0.5, scale=[0.02, 0.33], ratio=[0.3, 3.3], value=0|[v, ...]|random)",
     {"comp", "p", "scale", "ratio", "value"}, 1, fn_random_erasing},
    {"resize_with_pad", "resize_with_pad(COMP, SIZE)   SIZE: 224 or 224x200; keep aspect, pad with zeros",
     {"comp", "size"}, 2, fn_resize_with_pad},
    {"crop_to_bounding_box", "crop_to_bounding_box(COMP, OFFSET_HEIGHT, OFFSET_WIDTH, TARGET_HEIGHT, TARGET_WIDTH)",
     {"comp", "offset_height", "offset_width", "target_height", "target_width"}, 5, fn_crop_to_bounding_box},
    {"distorted_bbox_crop",
     "distorted_bbox_crop(COMP, boxes=COMP, min_object_covered=0.1, aspect_ratio_range=[0.75, 1.33], "
     "area_range=[0.05, 1], max_attempts=100, use_image_if_no_bounding_boxes=true)",
     {"comp", "boxes", "min_object_covered", "aspect_ratio_range", "area_range", "max_attempts",
      "use_image_if_no_bounding_boxes"}, 1, fn_distorted_bbox_crop},
};
#define NFNS ((int)(sizeof FNS / sizeof FNS[0]))

static const fn_def *find_fn(const char *name) {
    for (int i = 0; i < NFNS; i++)
        if (strcmp(FNS[i].name, name) == 0) return &FNS[i];
    return NULL;
}

const char *sl__fc_fn_usage(const char *name) {
    const fn_def *f = find_fn(name);
    return f ? f->usage : NULL;
}

static void fn_names(const char **names) {
    for (int i = 0; i < NFNS; i++) names[i] = FNS[i].name;
}

sl_status sl__fc_unknown_fn(builder *b, const sl_cfg_value *v) {
    const char *names[NFNS];
    char list[512];
    fn_names(names);
    sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "unknown function '%s' in map", v->text);
    const char *sug = sl_suggest(v->text, names, NFNS);
    if (sug) sl_err_hint("did you mean '%s'?", sug);
    else sl_err_hint("the functions are %s", sl__fc_join(names, NFNS, list, sizeof list));
    return SL_EINVAL;
}

/* A call of none of the stock functions: the caller's own (env.find_fn), else unknown. */
static sl_status custom_fn(builder *b, const sl_cfg_value *call, sl_fn **out) {
    if (!b->env.find_fn) return sl__fc_unknown_fn(b, call);
    *out = NULL;
    sl_status s = b->env.find_fn(b->env.find_fn_ctx, call->text, out);
    if (s == SL_ENOTFOUND) return sl__fc_unknown_fn(b, call);
    if (s == SL_OK && !*out) s = sl_err(SL_EINTERNAL, "the function '%s' was found but not returned", call->text);
    if (s == SL_OK && call->nargs > 0) {
        sl_fn_unref(*out);
        *out = NULL;
        sl_cfg_err(b->cfg, call->args[0].key ? sl__fc_key_loc(&call->args[0]) : call->args[0].v.loc, SL_EINVAL,
                   "%s: the function is the caller's own and takes no arguments", call->text);
        sl_err_hint("write %s()", call->text);
        return SL_EINVAL;
    }
    if (s) {
        if (*out) sl_fn_unref(*out);
        *out = NULL;
        sl_err_prefix("%s:%d:%d: ", sl_cfg_filename(b->cfg), call->loc.line, call->loc.col);
    }
    return s;
}

/* Bind a call's arguments to f's parameters (by position, or name=value), then build. */
sl_status sl__fc_build_call(builder *b, const sl_cfg_value *call, sl_fn **out) {
    const fn_def *f = find_fn(call->text);
    if (!f) return custom_fn(b, call, out);
    if (f->build == fn_parse_example) return f->build(b, f, call, NULL, out);
    const sl_cfg_value *args[MAX_PARAMS] = {0};
    int np = 0;
    while (np < MAX_PARAMS && f->params[np]) np++;
    int pos = 0;
    for (int i = 0; i < call->nargs; i++) {
        const sl_cfg_arg *a = &call->args[i];
        int slot = -1;
        if (a->key) {
            for (int k = 0; k < np; k++)
                if (strcmp(f->params[k], a->key) == 0) slot = k;
            if (slot < 0) {
                sl_cfg_err(b->cfg, sl__fc_key_loc(a), SL_EINVAL, "%s: unknown parameter '%s'", f->name, a->key);
                const char *sug = sl_suggest(a->key, f->params, np);
                if (sug) sl_err_hint("did you mean '%s'?", sug);
                else sl_err_hint("usage: %s", f->usage);
                return SL_EINVAL;
            }
            if (a->sep == ':')
                return fn_err(b, f, sl__fc_key_loc(a), "write %s=VALUE (a colon is for parse_example's features)", a->key);
        } else {
            if (pos >= np) return fn_err(b, f, a->v.loc, "too many arguments (it takes %d)", np);
            slot = pos++;
        }
        if (args[slot]) return fn_err(b, f, a->key ? sl__fc_key_loc(a) : a->v.loc, "'%s' given twice", f->params[slot]);
        args[slot] = &a->v;
    }
    for (int k = 0; k < f->nreq; k++)
        if (!args[k]) return fn_err(b, f, call->loc, "missing argument '%s'", f->params[k]);
    sl_status s = f->build(b, f, call, args, out);
    if (s && !sl__fc_has_hint()) sl_err_hint("usage: %s", f->usage);
    if (s && s != SL_EINVAL && s != SL_ERANGE) /* the library refused: say where */
        sl_err_prefix("%s:%d:%d: ", sl_cfg_filename(b->cfg), call->loc.line, call->loc.col);
    return s;
}
