/* cast: convert a component to another dtype. Integer targets saturate (300 -> uint8 255,
 * -1 -> 0, NaN -> 0, 1e30 -> int32 2147483647); float to integer truncates toward zero,
 * as C and tf.cast do; bool targets are x != 0 (NaN is true). Integers convert to integers exactly
 * through int64, floats through double (float16 and bfloat16 round to nearest even from
 * the float32 value). Casting to the dtype the component already has shares it.
 *
 * Also the number helpers the other functions use (sl__num_*): element loads and the
 * conversion loop. Workload: once per element on whole images (uint8 -> float32 is the
 * common case and has its own loop). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pipeline/fn/image.h"

typedef struct {
    sl_fn base;
    char comp[SL_NAME_MAX];
    sl_dtype dtype;
} cast_fn;

/* ---- loads and stores ---- */

bool sl__dtype_is_int(sl_dtype dt) {
    switch (dt) {
    case SL_DT_U8: case SL_DT_I8: case SL_DT_U16: case SL_DT_I16: case SL_DT_I32:
    case SL_DT_U32: case SL_DT_I64: case SL_DT_BOOL:
        return true;
    default:
        return false;
    }
}

bool sl__dtype_is_float(sl_dtype dt) {
    return dt == SL_DT_F16 || dt == SL_DT_BF16 || dt == SL_DT_F32 || dt == SL_DT_F64;
}

sl_status sl__need_numeric(const char *comp, const sl_tensor *t) {
    if (sl__dtype_is_int(t->dtype) || sl__dtype_is_float(t->dtype)) return SL_OK;
    char d[96];
    return sl_err(SL_EINVAL, "'%s' is %s, not numbers", comp, sl_tensor_describe(t, d, sizeof d));
}

const sl_tensor *sl__fn_numeric_input(const sl_fn *fn, const sl_element *e, const char *comp,
                                      sl_status *s) {
    int ci = sl__fn_component(fn, e, comp, s);
    if (ci < 0) return NULL;
    return (*s = sl__need_numeric(comp, &e->t[ci])) ? NULL : &e->t[ci];
}

int64_t sl__num_get_i64(const void *data, sl_dtype dt, int64_t i) {
    switch (dt) {
    case SL_DT_U8: return ((const uint8_t *)data)[i];
    case SL_DT_I8: return ((const int8_t *)data)[i];
    case SL_DT_U16: return ((const uint16_t *)data)[i];
    case SL_DT_I16: return ((const int16_t *)data)[i];
    case SL_DT_I32: return ((const int32_t *)data)[i];
    case SL_DT_U32: return ((const uint32_t *)data)[i];
    case SL_DT_I64: return ((const int64_t *)data)[i];
    case SL_DT_BOOL: return ((const uint8_t *)data)[i] != 0;
    default: return (int64_t)sl__num_get_f64(data, dt, i);
    }
}

double sl__num_get_f64(const void *data, sl_dtype dt, int64_t i) {
    switch (dt) {
    case SL_DT_F16: return sl_f32_from_f16(((const uint16_t *)data)[i]);
    case SL_DT_BF16: return sl_f32_from_bf16(((const uint16_t *)data)[i]);
    case SL_DT_F32: return ((const float *)data)[i];
    case SL_DT_F64: return ((const double *)data)[i];
    default: return (double)sl__num_get_i64(data, dt, i);
    }
}

static void int_range(sl_dtype dt, int64_t *lo, int64_t *hi) {
    switch (dt) {
    case SL_DT_U8: *lo = 0; *hi = UINT8_MAX; return;
    case SL_DT_I8: *lo = INT8_MIN; *hi = INT8_MAX; return;
    case SL_DT_U16: *lo = 0; *hi = UINT16_MAX; return;
    case SL_DT_I16: *lo = INT16_MIN; *hi = INT16_MAX; return;
    case SL_DT_I32: *lo = INT32_MIN; *hi = INT32_MAX; return;
    case SL_DT_U32: *lo = 0; *hi = UINT32_MAX; return;
    case SL_DT_BOOL: *lo = 0; *hi = 1; return;
    default: *lo = INT64_MIN; *hi = INT64_MAX; return;
    }
}

static void put_int(void *dst, sl_dtype dt, int64_t i, int64_t v) {
    switch (dt) {
    case SL_DT_U8: ((uint8_t *)dst)[i] = (uint8_t)v; return;
    case SL_DT_I8: ((int8_t *)dst)[i] = (int8_t)v; return;
    case SL_DT_U16: ((uint16_t *)dst)[i] = (uint16_t)v; return;
    case SL_DT_I16: ((int16_t *)dst)[i] = (int16_t)v; return;
    case SL_DT_I32: ((int32_t *)dst)[i] = (int32_t)v; return;
    case SL_DT_U32: ((uint32_t *)dst)[i] = (uint32_t)v; return;
    case SL_DT_BOOL: ((uint8_t *)dst)[i] = v != 0; return;
    default: ((int64_t *)dst)[i] = v; return;
    }
}

static void put_float(void *dst, sl_dtype dt, int64_t i, double v) {
    switch (dt) {
    case SL_DT_F16: ((uint16_t *)dst)[i] = sl_f16_from_f32((float)v); return;
    case SL_DT_BF16: ((uint16_t *)dst)[i] = sl_bf16_from_f32((float)v); return;
    case SL_DT_F32: ((float *)dst)[i] = (float)v; return;
    default: ((double *)dst)[i] = v; return;
    }
}

/* double -> integer type, saturating; NaN -> 0; truncation toward zero. */
static int64_t sat_from_double(double v, sl_dtype dt) {
    if (dt == SL_DT_BOOL) return v != 0; /* NaN is true, as in tf.cast */
    if (isnan(v)) return 0;
    int64_t lo, hi;
    int_range(dt, &lo, &hi);
    if (dt == SL_DT_I64) { /* 2^63 is not representable as int64: compare in double */
        if (v >= 0x1p63) return INT64_MAX;
        if (v < -0x1p63) return INT64_MIN;
        return (int64_t)v;
    }
    if (v <= (double)lo) return lo;
    if (v >= (double)hi) return hi;
    return (int64_t)v;
}

void sl__num_convert(const void *src, sl_dtype sd, void *dst, sl_dtype dd, int64_t n) {
    if (sd == SL_DT_U8 && dd == SL_DT_F32) {
        const uint8_t *s = src;
        float *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = (float)s[i];
        return;
    }
    if (sd == SL_DT_F32 && dd == SL_DT_U8) {
        const float *s = src;
        uint8_t *d = dst;
        for (int64_t i = 0; i < n; i++) {
            float v = s[i];
            d[i] = v >= 255.0f ? 255 : v > 0.0f ? (uint8_t)v : 0; /* NaN fails both: 0 */
        }
        return;
    }
    bool di = sl__dtype_is_int(dd);
    if (sl__dtype_is_int(sd)) {
        int64_t lo, hi;
        int_range(dd, &lo, &hi);
        for (int64_t i = 0; i < n; i++) {
            int64_t v = sl__num_get_i64(src, sd, i);
            if (di) {
                if (dd == SL_DT_BOOL) v = v != 0;
                put_int(dst, dd, i, v < lo ? lo : v > hi ? hi : v);
            } else {
                put_float(dst, dd, i, (double)v);
            }
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            double v = sl__num_get_f64(src, sd, i);
            if (di) put_int(dst, dd, i, sat_from_double(v, dd));
            else put_float(dst, dd, i, v);
        }
    }
}

/* ---- the function ---- */

static sl_status cast_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const cast_fn *f = (const cast_fn *)fn;
    sl_status s = SL_OK;
    const sl_tensor *in = sl__fn_numeric_input(fn, e, f->comp, &s);
    if (!in) return s;
    if (in->dtype == f->dtype) return SL_OK;
    sl_tensor out; /* straight into the batch under a fused map_batch */
    if ((s = sl__fn_out_alloc(call, f->comp, &out, f->dtype, in->rank, in->dims))) return s;
    sl__num_convert(in->data, in->dtype, out.data, f->dtype, sl_tensor_numel(in));
    if ((s = sl_element_set(e, f->comp, &out))) sl_tensor_release(&out);
    return s;
}

static const sl_fn_vt cast_vt = {.name = "cast", .apply = cast_apply};

sl_status sl_fn_cast(const char *comp, sl_dtype dtype, sl_fn **out) {
    *out = NULL;
    if (!comp || !*comp || strlen(comp) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "cast: component name must be 1..%d characters", SL_NAME_MAX - 1);
    if (!sl__dtype_is_int(dtype) && !sl__dtype_is_float(dtype))
        return sl_err(SL_EINVAL, "cast: cannot cast to %s; the target must be a numeric dtype",
                      sl_dtype_name(dtype));
    cast_fn *f = sl__fn_new(sizeof *f, &cast_vt, "cast");
    if (!f) return SL_ENOMEM;
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    f->dtype = dtype;
    *out = &f->base;
    return SL_OK;
}
