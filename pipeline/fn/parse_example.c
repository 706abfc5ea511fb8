/* parse_example: a serialized tf.train.Example (bytes scalar component, usually "record")
 * into one component per feature spec, through sl_example_parse's zero-copy scanner.
 *
 * Workload: once per record on the map's worker threads; records of a few bytes to
 * megabytes (an encoded image), 2-20 features. Each thread keeps one sl_example in its
 * state and reuses its feature table, and carves outputs of up to PIECE bytes (a label, a
 * bytes scalar's view) from a slab in its state (sl__slab_piece), so a steady-state call
 * allocates only the larger output tensors. Bytes outputs are views: an SL_DT_BYTES tensor
 * whose sl_bytes point into the record, holding a reference to the record's buffer (its
 * aux), so an encoded JPEG goes from the TFRecord chunk to the decoder without a copy.
 *
 * Shapes: rank 0 wants exactly one value; a fixed shape (28x28x1) wants exactly prod(dims)
 * values; one dimension may be -1 and then takes count / prod(other dims) (the count must
 * be a whole multiple). A missing feature — or one whose Feature has no list set — takes
 * the spec's default when it has one: every value of a fixed shape is the default, and a
 * -1 dimension becomes 1. Otherwise it is SL_EINVAL naming the feature and listing the
 * features the record does have (name and kind), as are a wrong
 * kind and a wrong count; a malformed Example is SL_ECORRUPT with the byte offset. On any
 * error the element is left exactly as it was (outputs are built aside first). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/fn/image.h"
#include "sluice/example.h"

typedef struct {
    char *key;                 /* feature key (owned) */
    char out[SL_NAME_MAX];     /* output component */
    sl_dtype dtype;
    sl_feat_kind kind;         /* the list kind dtype needs */
    int rank;
    int64_t dims[SL_MAX_RANK];
    int wild;                  /* index of a -1 dimension, or -1 */
    int64_t known;             /* product of the other dimensions */
    bool has_default;
    double default_num;
    sl_buf *default_bytes;     /* the default string (bytes specs with a default) */
} spec;

/* A thread's state: the scanner's feature table, and the slab small outputs come from. */
#define PIECE 64
#define SLAB_PIECES 64
typedef struct {
    sl_example ex;
    sl_buf *slab; /* a reference, or NULL */
    int used;     /* pieces of it handed out */
} parse_state;

typedef struct {
    sl_fn base;
    char input[SL_NAME_MAX];
    int n;
    spec *specs;
} parse_fn;

static void describe_shape(const spec *sp, char *d, size_t cap) {
    size_t len = (size_t)snprintf(d, cap, "[");
    for (int i = 0; i < sp->rank && len < cap; i++)
        len += (size_t)snprintf(d + len, cap - len, i ? ",%lld" : "%lld", (long long)sp->dims[i]);
    if (len < cap) snprintf(d + len, cap - len, "]");
}

/* The spec's default as a tensor. */
static sl_status make_default(const spec *sp, sl_tensor *t) {
    int64_t dims[SL_MAX_RANK];
    memcpy(dims, sp->dims, sizeof dims);
    if (sp->wild >= 0) dims[sp->wild] = 1;
    sl_status s = sl_tensor_alloc(t, sp->dtype, sp->rank, dims);
    if (s) return s;
    int64_t n = sl_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        if (sp->dtype == SL_DT_I64) {
            ((int64_t *)t->data)[i] = (int64_t)sp->default_num;
        } else if (sp->dtype == SL_DT_F32) {
            ((float *)t->data)[i] = (float)sp->default_num;
        } else {
            ((sl_bytes *)t->data)[i] = (sl_bytes){sp->default_bytes->data, sp->default_bytes->size};
        }
    }
    if (sp->dtype == SL_DT_BYTES) t->aux = sl_buf_ref(sp->default_bytes);
    return SL_OK;
}

/* Bytes views whose record has no owning buffer (a tensor made by hand): copy the values
 * into one buffer of their own so the output does not point at memory nobody keeps. */
static sl_status own_bytes(sl_tensor *t) {
    sl_bytes *v = t->data;
    int64_t n = sl_tensor_numel(t);
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) total += v[i].len;
    sl_buf *b = sl_buf_new(total);
    if (!b) return SL_ENOMEM;
    size_t off = 0;
    for (int64_t i = 0; i < n; i++) {
        if (v[i].len) memcpy((uint8_t *)b->data + off, v[i].ptr, v[i].len);
        v[i].ptr = (const uint8_t *)b->data + off;
        off += v[i].len;
    }
    t->aux = b;
    return SL_OK;
}

/* "image (bytes), label (int64)": what the Example holds, for a missing feature's message
 * (cut short with "..." when long). */
static const char *list_features(const sl_example *ex, char *buf, size_t cap) {
    if (ex->n == 0) return "no features at all";
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; i < ex->n; i++) {
        const sl_feature *f = &ex->f[i];
        char one[128];
        int klen = f->key.len > 64 ? 64 : (int)f->key.len;
        int w = snprintf(one, sizeof one, "%s%.*s%s (%s)", i ? ", " : "", klen, (const char *)f->key.ptr,
                         klen < (int)f->key.len ? "..." : "", sl_feat_kind_name(f->kind));
        if (len + (size_t)w + sizeof ", ..." > cap) { /* no room for this one and the ellipsis */
            snprintf(buf + len, cap - len, ", ...");
            break;
        }
        memcpy(buf + len, one, (size_t)w + 1);
        len += (size_t)w;
    }
    return buf;
}

/* An output tensor: a piece of the thread's slab when it fits in one (st may be NULL),
 * else a fresh one. Fails as sl_tensor_alloc does. */
static sl_status out_alloc(parse_state *st, sl_tensor *t, sl_dtype dt, int rank, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < rank && n <= PIECE; i++)
        n = dims[i] < 0 || dims[i] > PIECE ? PIECE + 1 : n * dims[i];
    if (!st || n > PIECE || (size_t)n * sl_dtype_size(dt) > PIECE) return sl_tensor_alloc(t, dt, rank, dims);
    void *at = sl__slab_piece(&st->slab, &st->used, PIECE, SLAB_PIECES);
    if (!at) return SL_ENOMEM;
    return sl_tensor_view(t, st->slab, at, (size_t)n * sl_dtype_size(dt), dt, rank, dims);
}

/* One spec's output from the parsed Example. */
static sl_status parse_one(const spec *sp, const sl_example *ex, const sl_tensor *rec, parse_state *st,
                           sl_tensor *t) {
    const sl_feature *f = sl_example_get(ex, sp->key);
    if (!f || f->kind == SL_FEAT_NONE) {
        if (sp->has_default) return make_default(sp, t);
        char have[400];
        if (!f)
            return sl_err(SL_EINVAL, "feature '%s' is missing (and has no default); the record has: %s",
                          sp->key, list_features(ex, have, sizeof have));
        return sl_err(SL_EINVAL, "feature '%s' has no value list set (and has no default)", sp->key);
    }
    if (f->kind != sp->kind)
        return sl_err(SL_EINVAL, "feature '%s': expected %s, found %s", sp->key,
                      sl_feat_kind_name(sp->kind), sl_feat_kind_name(f->kind));
    int64_t dims[SL_MAX_RANK];
    memcpy(dims, sp->dims, sizeof dims);
    int64_t count = (int64_t)f->count;
    if (sp->wild < 0) {
        if (count != sp->known) {
            char d[128];
            describe_shape(sp, d, sizeof d);
            sl_err(SL_EINVAL, "feature '%s': expected %lld value%s, found %lld", sp->key,
                   (long long)sp->known, sp->known == 1 ? "" : "s", (long long)count);
            if (sp->rank > 0) sl_err_hint("the spec's shape %s holds %lld values", d, (long long)sp->known);
            return SL_EINVAL;
        }
    } else {
        if (sp->known == 0 ? count != 0 : count % sp->known != 0)
            return sl_err(SL_EINVAL, "feature '%s': expected a multiple of %lld values, found %lld",
                          sp->key, (long long)sp->known, (long long)count);
        dims[sp->wild] = sp->known ? count / sp->known : 0;
    }
    sl_status s = out_alloc(st, t, sp->dtype, sp->rank, dims);
    if (s) return s;
    if (sp->dtype == SL_DT_I64) s = sl_feature_int64s(f, t->data, (size_t)count);
    else if (sp->dtype == SL_DT_F32) s = sl_feature_floats(f, t->data, (size_t)count);
    else s = sl_feature_bytes(f, t->data, (size_t)count);
    if (!s && sp->dtype == SL_DT_BYTES) {
        if (rec->aux) t->aux = sl_buf_ref(rec->aux);
        else s = own_bytes(t);
    }
    if (s) {
        sl_err_prefix("feature '%s': ", sp->key);
        sl_tensor_release(t);
    }
    return s;
}

static void remove_component(sl_element *e, int i) {
    sl_tensor_release(&e->t[i]);
    for (int k = i + 1; k < e->n; k++) {
        memcpy(e->names[k - 1], e->names[k], SL_NAME_MAX);
        e->t[k - 1] = e->t[k];
    }
    e->n--;
}

static sl_status parse_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const parse_fn *p = (const parse_fn *)fn;
    sl_bytes b;
    const sl_tensor *rec;
    sl_status s = sl__fn_bytes_input(fn, e, p->input,
                                     "parse_example needs one serialized Example (a byte string)", &b, &rec);
    if (s) return s;
    int ci = (int)(rec - e->t);
    parse_state *st = call->state;
    sl_example local, *ex = st ? &st->ex : &local;
    if (!st) sl_example_init(ex);
    sl_tensor outs[SL_ELEM_MAX];
    int made = 0;
    if ((s = sl_example_parse(ex, b.ptr, b.len))) {
        sl_err_prefix("malformed Example in '%s': ", p->input);
        goto done;
    }
    for (; made < p->n; made++)
        if ((s = parse_one(&p->specs[made], ex, rec, st, &outs[made]))) goto done;
    /* all outputs made: replace the record by them */
    remove_component(e, ci);
    for (int i = 0; i < made; i++) {
        if (s) {
            sl_tensor_release(&outs[i]);
        } else if ((s = sl_element_set(e, p->specs[i].out, &outs[i]))) {
            sl_tensor_release(&outs[i]);
        }
    }
    made = 0;
done:
    for (int i = 0; i < made; i++) sl_tensor_release(&outs[i]);
    if (ex == &local) sl_example_free(ex);
    return s;
}

static sl_status parse_state_new(const sl_fn *fn, void **st) {
    parse_state *ps = calloc(1, sizeof *ps);
    if (!ps) return sl_err(SL_ENOMEM, "parse_example: out of memory for thread state");
    sl_example_init(&ps->ex);
    *st = ps;
    return SL_OK;
}

static void parse_state_free(const sl_fn *fn, void *st) {
    parse_state *ps = st;
    sl_example_free(&ps->ex);
    sl_buf_unref(ps->slab);
    free(ps);
}

static void parse_destroy(sl_fn *fn) {
    parse_fn *p = (parse_fn *)fn;
    for (int i = 0; i < p->n; i++) {
        free(p->specs[i].key);
        sl_buf_unref(p->specs[i].default_bytes);
    }
    free(p->specs);
}

static const sl_fn_vt parse_vt = {.name = "parse_example", .apply = parse_apply,
                                  .destroy = parse_destroy, .state_new = parse_state_new,
                                  .state_free = parse_state_free};

/* Check one spec and fill *sp (whose key and default are then owned by it). */
static sl_status take_spec(const sl_feature_spec *in, int i, spec *sp) {
    if (!in->name || !*in->name)
        return sl_err(SL_EINVAL, "parse_example: spec %d has no feature name", i);
    const char *out = in->as && *in->as ? in->as : in->name;
    if (strlen(out) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "parse_example: output name '%s' is longer than %d characters",
                      out, SL_NAME_MAX - 1);
    snprintf(sp->out, sizeof sp->out, "%s", out);
    sp->dtype = in->dtype;
    switch (in->dtype) {
    case SL_DT_BYTES: sp->kind = SL_FEAT_BYTES; break;
    case SL_DT_I64: sp->kind = SL_FEAT_INT64; break;
    case SL_DT_F32: sp->kind = SL_FEAT_FLOAT; break;
    default:
        sl_err(SL_EINVAL, "parse_example: feature '%s': dtype %s is not bytes, int64 or float32",
               in->name, sl_dtype_name(in->dtype));
        sl_err_hint("parse as int64 or float32, then cast");
        return SL_EINVAL;
    }
    if (in->rank < 0 || in->rank > SL_MAX_RANK)
        return sl_err(SL_EINVAL, "parse_example: feature '%s': rank %d must be 0..%d", in->name,
                      in->rank, SL_MAX_RANK);
    sp->rank = in->rank;
    sp->wild = -1;
    sp->known = 1;
    for (int k = 0; k < in->rank; k++) {
        int64_t d = in->dims[k];
        if (d == -1 && sp->wild < 0) {
            sp->wild = k;
        } else if (d < 0) {
            return sl_err(SL_EINVAL, "parse_example: feature '%s': dimension %d is %lld; "
                          "dimensions must be >= 0, with at most one -1", in->name, k, (long long)d);
        } else {
            if (d && sp->known > INT64_MAX / 16 / d)
                return sl_err(SL_EINVAL, "parse_example: feature '%s': the shape is too large", in->name);
            sp->known *= d;
        }
        sp->dims[k] = d;
    }
    sp->has_default = in->has_default;
    sp->default_num = in->default_num;
    if (in->has_default && in->dtype == SL_DT_BYTES) {
        const char *db = in->default_bytes ? in->default_bytes : "";
        if (!(sp->default_bytes = sl_buf_copy(db, strlen(db)))) return SL_ENOMEM;
    }
    if (!(sp->key = strdup(in->name))) return sl_err(SL_ENOMEM, "parse_example: out of memory");
    return SL_OK;
}

sl_status sl_fn_parse_example(const char *input, const sl_feature_spec *specs, int n, sl_fn **out) {
    *out = NULL;
    if (!input || !*input || strlen(input) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "parse_example: input component name must be 1..%d characters",
                      SL_NAME_MAX - 1);
    if (n < 1 || n > SL_ELEM_MAX || !specs)
        return sl_err(SL_EINVAL, "parse_example: %d feature specs given; need 1..%d", n, SL_ELEM_MAX);
    parse_fn *p = sl__fn_new(sizeof *p, &parse_vt, "parse_example");
    if (!p) return SL_ENOMEM;
    snprintf(p->input, sizeof p->input, "%s", input);
    if (!(p->specs = calloc((size_t)n, sizeof *p->specs))) {
        sl_fn_unref(&p->base);
        return sl_err(SL_ENOMEM, "parse_example: out of memory");
    }
    sl_status s = SL_OK;
    for (int i = 0; i < n && !s; i++) {
        p->n = i + 1; /* so destroy frees what this spec took */
        if ((s = take_spec(&specs[i], i, &p->specs[i]))) break;
        for (int k = 0; k < i; k++)
            if (strcmp(p->specs[k].out, p->specs[i].out) == 0) {
                s = sl_err(SL_EINVAL, "parse_example: two specs write component '%s'",
                           p->specs[i].out);
                sl_err_hint("give one of them another name with `as`");
            }
    }
    if (s) {
        sl_fn_unref(&p->base);
        return s;
    }
    *out = &p->base;
    return SL_OK;
}
