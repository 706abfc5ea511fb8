/* bucket_by_sequence_length: tf.data's bucket_by_sequence_length, which tf.data builds as
 * group_by_window over the bucket id with a padded_batch per bucket; here the same, on the
 * grouping machinery of group_by_window.c (sl__ds_group). Bucket i holds the lengths
 * boundaries[i-1] <= L < boundaries[i]; its window is batch_sizes[i]; its reduce stacks
 * the window padded as `batch N padded` pads (sl__stack), then, with
 * pad_to_bucket_boundary, widens the length component's dim 0 to boundaries[i] - 1 with
 * the pad value. End of input: open buckets in bucket order, partial ones dropped with
 * drop_remainder (tf.data's padded_batch drop_remainder inside each window). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"

#define MAX_BOUNDARIES 64

typedef struct {
    char comp[SL_NAME_MAX];  /* "" with a length function */
    sl_key_fn length;
    void *length_ctx;
    int nb;
    int64_t bound[MAX_BOUNDARIES];
    int64_t batch[MAX_BOUNDARIES + 1];
    double pad;
    bool to_boundary, no_padding, drop;
} bk_ctx;

static sl_status bk_key(void *ctx, const sl_element *e, int64_t *key) {
    const bk_ctx *b = ctx;
    int64_t len;
    if (b->length) {
        sl_status s = b->length(b->length_ctx, e, &len);
        if (s) return s;
    } else {
        int c = sl_element_find(e, b->comp);
        if (c < 0) return sl_err(SL_EINVAL, "no component '%s' to take the length of", b->comp);
        if (e->t[c].rank < 1) {
            char d[96];
            return sl_err(SL_EINVAL, "component '%s' is %s: its length is its dim 0, so it needs rank >= 1", b->comp,
                          sl_tensor_describe(&e->t[c], d, sizeof d));
        }
        len = e->t[c].dims[0];
    }
    if (len < 0) return sl_err(SL_EINVAL, "length %lld is negative", (long long)len);
    int i = 0;
    while (i < b->nb && len >= b->bound[i]) i++;
    if (b->to_boundary && i == b->nb) {
        sl_err(SL_EINVAL, "pad_to_bucket_boundary needs lengths < %lld: element of length %lld",
               (long long)b->bound[b->nb - 1], (long long)len);
        sl_err_hint("add a larger last boundary, or drop pad_to_bucket_boundary");
        return SL_EINVAL;
    }
    *key = i;
    return SL_OK;
}

static int64_t bk_window(void *ctx, int64_t key) { return ((const bk_ctx *)ctx)->batch[key]; }

/* Widen dim 1 of the stacked t (a batch of rows) to `to`, filling with v. */
static sl_status widen(sl_tensor *t, int64_t to, double v) {
    if (t->rank < 2 || t->dims[1] >= to) return SL_OK;
    int64_t dims[SL_MAX_RANK];
    memcpy(dims, t->dims, sizeof dims);
    dims[1] = to;
    sl_tensor w;
    sl_status s = sl_tensor_alloc(&w, t->dtype, t->rank, dims);
    if (s) return s;
    size_t inner = sl_dtype_size(t->dtype);
    for (int d = 2; d < t->rank; d++) inner *= (size_t)dims[d];
    sl__fill_value(w.data, t->dtype, v, (size_t)sl_tensor_numel(&w));
    if (t->dtype == SL_DT_BYTES) /* empty strings, pointing into the batch's string buffer as stacking does */
        for (int64_t i = 0; i < sl_tensor_numel(&w); i++)
            ((sl_bytes *)w.data)[i] = (sl_bytes){t->aux ? (const uint8_t *)t->aux->data : NULL, 0};
    for (int64_t r = 0; r < dims[0]; r++)
        memcpy((char *)w.data + (size_t)r * (size_t)to * inner, (const char *)t->data + (size_t)r * (size_t)t->dims[1] * inner,
               (size_t)t->dims[1] * inner);
    w.aux = sl_buf_ref(t->aux); /* byte strings keep pointing into the batch's string buffer */
    sl_tensor_release(t);
    *t = w;
    return SL_OK;
}

static sl_status bk_reduce(void *ctx, const sl_iter *it, int64_t key, const sl_element *elems, int n, bool partial,
                           sl_element *out) {
    const bk_ctx *b = ctx;
    if (partial && b->drop) return SL_END;
    sl_batch_opts o = sl_batch_opts_default(n);
    o.padded = !b->no_padding;
    o.pad_value = b->pad;
    sl_status s = sl__stack(elems, n, &o, it->ds->label, out);
    if (s || !b->to_boundary) return s;
    int c = sl_element_find(out, b->comp);
    if (c >= 0 && (s = widen(&out->t[c], b->bound[key] - 1, b->pad))) {
        sl_element_clear(out);
        return sl__op_err(it, s, "out of memory padding a batch to the bucket boundary");
    }
    return SL_OK;
}

static void bk_free(void *ctx, void *unused) {
    (void)unused;
    free(ctx);
}

sl_status sl_ds_bucket_by_sequence_length(sl_dataset *in, const sl_bucket_opts *opts, sl_dataset **out) {
    *out = NULL;
    const char *op = "bucket_by_sequence_length";
    if (!opts) return sl_err(SL_EINVAL, "%s: options are required", op);
    if (opts->nboundaries < 1 || opts->nboundaries > MAX_BOUNDARIES || !opts->boundaries || !opts->batch_sizes)
        return sl_err(SL_EINVAL, "%s: %d bucket boundaries: give 1..%d, and one batch size more", op, opts->nboundaries,
                      MAX_BOUNDARIES);
    for (int i = 0; i < opts->nboundaries; i++)
        if (opts->boundaries[i] < 1 || (i && opts->boundaries[i] <= opts->boundaries[i - 1]))
            return sl_err(SL_EINVAL, "%s: boundary %d is %lld: boundaries must be >= 1 and increasing", op, i,
                          (long long)opts->boundaries[i]);
    for (int i = 0; i <= opts->nboundaries; i++)
        if (opts->batch_sizes[i] < 1 || opts->batch_sizes[i] > (1 << 24))
            return sl_err(SL_EINVAL, "%s: batch size %d is %lld: it must be 1..16777216", op, i,
                          (long long)opts->batch_sizes[i]);
    bool has_comp = opts->component && opts->component[0];
    if (opts->component && strlen(opts->component) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "%s: component name too long", op);
    if (!has_comp && !opts->length) return sl_err(SL_EINVAL, "%s: give a length component or a length function", op);
    if (opts->pad_to_bucket_boundary && (opts->no_padding || !has_comp))
        return sl_err(SL_EINVAL, "%s: pad_to_bucket_boundary %s", op,
                      opts->no_padding ? "and no_padding exclude each other" : "needs the component to pad");
    if (!isfinite(opts->pad_value)) return sl_err(SL_EINVAL, "%s: the padding value must be finite", op);
    bk_ctx *b = calloc(1, sizeof *b);
    if (!b) return sl_err(SL_ENOMEM, "%s: out of memory", op);
    if (has_comp) strcpy(b->comp, opts->component);
    b->length = opts->length;
    b->length_ctx = opts->length_ctx;
    b->nb = opts->nboundaries;
    memcpy(b->bound, opts->boundaries, sizeof *b->bound * (size_t)b->nb);
    memcpy(b->batch, opts->batch_sizes, sizeof *b->batch * (size_t)(b->nb + 1));
    b->pad = opts->pad_value;
    b->to_boundary = opts->pad_to_bucket_boundary;
    b->no_padding = opts->no_padding;
    b->drop = opts->drop_remainder;
    sl__group_spec sp = {.op = op, .key = bk_key, .ctx = b, .free_ctx = bk_free, .window_of = bk_window,
                         .reduce = bk_reduce};
    return sl__ds_group(in, &sp, out);
}
