/* scale: x * factor, to float32, each value computed as (float)((double)x * factor).
 *
 * Workload: once per element, e.g. MNIST pixels * (1/255); uint8 input goes through a
 * table of the 256 possible results built when the function is made. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pipeline/fn/image.h"

typedef struct {
    sl_fn base;
    char comp[SL_NAME_MAX];
    double factor;
    float lut[256]; /* the result for each uint8 value */
} scale_fn;

static sl_status scale_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const scale_fn *f = (const scale_fn *)fn;
    sl_status s = SL_OK;
    const sl_tensor *in = sl__fn_numeric_input(fn, e, f->comp, &s);
    if (!in) return s;
    sl_tensor out; /* straight into the batch under a fused map_batch */
    if ((s = sl__fn_out_alloc(call, f->comp, &out, SL_DT_F32, in->rank, in->dims))) return s;
    int64_t n = sl_tensor_numel(in);
    float *o = out.data;
    if (in->dtype == SL_DT_U8) {
        const uint8_t *x = in->data;
        for (int64_t i = 0; i < n; i++) o[i] = f->lut[x[i]];
    } else if (in->dtype == SL_DT_F32) {
        const float *x = in->data;
        for (int64_t i = 0; i < n; i++) o[i] = (float)((double)x[i] * f->factor);
    } else {
        for (int64_t i = 0; i < n; i++)
            o[i] = (float)(sl__num_get_f64(in->data, in->dtype, i) * f->factor);
    }
    if ((s = sl_element_set(e, f->comp, &out))) sl_tensor_release(&out);
    return s;
}

static const sl_fn_vt scale_vt = {.name = "scale", .apply = scale_apply};

bool sl__fn_as_scale(const sl_fn *fn, const char **comp, const float **lut) {
    if (fn->vt != &scale_vt) return false;
    const scale_fn *f = (const scale_fn *)fn;
    *comp = f->comp;
    *lut = f->lut;
    return true;
}

sl_status sl_fn_scale(const char *comp, double factor, sl_fn **out) {
    *out = NULL;
    if (!comp || !*comp || strlen(comp) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "scale: component name must be 1..%d characters", SL_NAME_MAX - 1);
    if (!isfinite(factor))
        return sl_err(SL_EINVAL, "scale: factor %g must be finite", factor);
    scale_fn *f = sl__fn_new(sizeof *f, &scale_vt, "scale");
    if (!f) return SL_ENOMEM;
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    f->factor = factor;
    for (int v = 0; v < 256; v++) f->lut[v] = (float)((double)v * factor);
    *out = &f->base;
    return SL_OK;
}
