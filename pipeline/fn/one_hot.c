/* one_hot: an integer scalar class id to float32 [depth] (a [n] vector of ids to
 * [n, depth]), 1 at the id and 0 elsewhere. An id outside 0..depth-1 is SL_ERANGE naming
 * the value (tf.one_hot would silently give all zeros; a label out of range is almost
 * always a data or config bug, so it is reported).
 *
 * Workload: once per element on the label; tiny. */
#include <stdio.h>
#include <string.h>

#include "pipeline/fn/image.h"

typedef struct {
    sl_fn base;
    char comp[SL_NAME_MAX];
    int depth;
} onehot_fn;

static sl_status onehot_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const onehot_fn *f = (const onehot_fn *)fn;
    sl_status s = SL_OK;
    int ci = sl__fn_component(fn, e, f->comp, &s);
    if (ci < 0) return s;
    const sl_tensor *in = &e->t[ci];
    char d[96];
    if (!sl__dtype_is_int(in->dtype) || in->rank > 1)
        return sl_err(SL_EINVAL, "'%s' is %s; one_hot needs an integer scalar or vector", f->comp,
                      sl_tensor_describe(in, d, sizeof d));
    int64_t n = sl_tensor_numel(in);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = sl__num_get_i64(in->data, in->dtype, i);
        if (v < 0 || v >= f->depth) {
            s = sl_err(SL_ERANGE, "'%s' value %lld is outside 0..%d (depth %d)", f->comp,
                       (long long)v, f->depth - 1, f->depth);
            sl_err_hint("check the label values in the data, or raise the one_hot depth");
            return s;
        }
    }
    int64_t dims[2] = {n, f->depth};
    sl_tensor out;
    if (in->rank == 0) s = sl_tensor_alloc(&out, SL_DT_F32, 1, dims + 1);
    else s = sl_tensor_alloc(&out, SL_DT_F32, 2, dims);
    if (s) return s;
    float *o = out.data;
    memset(o, 0, sizeof(float) * (size_t)(n * f->depth));
    for (int64_t i = 0; i < n; i++) o[i * f->depth + sl__num_get_i64(in->data, in->dtype, i)] = 1.0f;
    if ((s = sl_element_set(e, f->comp, &out))) sl_tensor_release(&out);
    return s;
}

static const sl_fn_vt onehot_vt = {.name = "one_hot", .apply = onehot_apply};

sl_status sl_fn_one_hot(const char *comp, int depth, sl_fn **out) {
    *out = NULL;
    if (!comp || !*comp || strlen(comp) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "one_hot: component name must be 1..%d characters", SL_NAME_MAX - 1);
    if (depth < 1 || depth > (1 << 24))
        return sl_err(SL_EINVAL, "one_hot: depth %d must be 1..%d", depth, 1 << 24);
    onehot_fn *f = sl__fn_new(sizeof *f, &onehot_vt, "one_hot");
    if (!f) return SL_ENOMEM;
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    f->depth = depth;
    *out = &f->base;
    return SL_OK;
}
