/* decode_raw: reinterpret a bytes scalar as a little-endian tensor of a fixed dtype and
 * shape (tf.io.decode_raw with a reshape). At most one dimension may be -1: it takes
 * whatever count the byte length gives (which must then be a whole multiple).
 *
 * Zero-copy: the result is a view of the bytes, holding a reference to the buffer they
 * live in (usually the TFRecord chunk), when their address suits the dtype's alignment.
 * Bytes inside a record are often not aligned for dtypes wider than one byte (a proto's
 * length prefix has no padding); those are copied into a fresh aligned tensor.
 *
 * A scale of the same component right after a uint8 decode_raw is absorbed (plan): the
 * bytes go through scale's table straight into the float32 result, which under a fused
 * map_batch is the element's slot of the batch (sl__fn_out_alloc): no uint8 view is made
 * and nothing is copied. The values are scale's, bit for bit.
 *
 * Workload: once per record, e.g. a 784-byte MNIST image or a float32 feature vector. */
#include <stdio.h>
#include <string.h>

#include "pipeline/fn/image.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "decode_raw assumes a little-endian host (add a byte-swapping copy for this one)"
#endif

typedef struct {
    sl_fn base;
    char comp[SL_NAME_MAX];
    sl_dtype dtype;
    int rank;
    int64_t dims[SL_MAX_RANK];
    int wild;      /* index of the -1 dimension, or -1 */
    int64_t known; /* product of the other dimensions */
} raw_fn;

static sl_status raw_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const raw_fn *f = (const raw_fn *)fn;
    sl_bytes b;
    const sl_tensor *in;
    sl_status s = sl__fn_bytes_input(fn, e, f->comp, "decode_raw needs one byte string", &b, &in);
    if (s) return s;
    char d[96];
    size_t es = sl_dtype_size(f->dtype);
    int64_t dims[SL_MAX_RANK];
    memcpy(dims, f->dims, sizeof dims);
    sl_tensor shape = {.dtype = f->dtype, .rank = f->rank};
    memcpy(shape.dims, f->dims, sizeof dims);
    size_t unit = (size_t)f->known * es;
    if (f->wild >= 0) {
        if (unit == 0 || b.len % unit != 0)
            return sl_err(SL_EINVAL, "'%s' holds %zu bytes, not a whole number of %s "
                          "(%zu bytes each)", f->comp, b.len,
                          sl_tensor_describe(&shape, d, sizeof d), unit);
        dims[f->wild] = (int64_t)(b.len / unit);
    } else if (b.len != unit) {
        return sl_err(SL_EINVAL, "'%s' holds %zu bytes but %s needs %zu", f->comp, b.len,
                      sl_tensor_describe(&shape, d, sizeof d), unit);
    }
    sl_tensor out;
    const sl_fn *next = sl__fn_absorbed(call, 1, NULL);
    const char *scomp;
    const float *lut;
    if (next && sl__fn_as_scale(next, &scomp, &lut)) { /* decode_raw | scale, fused (plan) */
        if ((s = sl__fn_out_alloc(call, f->comp, &out, SL_DT_F32, f->rank, dims))) return s;
        float *o = out.data;
        for (size_t i = 0; i < b.len; i++) o[i] = lut[b.ptr[i]];
        if ((s = sl_element_set(e, f->comp, &out))) sl_tensor_release(&out);
        return s;
    }
    const sl_buf *a = in->aux;
    bool inside = a && b.ptr >= (const uint8_t *)a->data &&
                  b.ptr + b.len <= (const uint8_t *)a->data + a->size;
    if (inside && (uintptr_t)b.ptr % es == 0) {
        s = sl_tensor_view(&out, in->aux, b.ptr, b.len, f->dtype, f->rank, dims);
    } else {
        s = sl_tensor_alloc(&out, f->dtype, f->rank, dims);
        if (!s && b.len) memcpy(out.data, b.ptr, b.len);
    }
    if (s) return s;
    if ((s = sl_element_set(e, f->comp, &out))) sl_tensor_release(&out);
    return s;
}

/* Absorb a scale of the same component right after, when the bytes are uint8. */
static int raw_plan(sl_fn *fn, sl_fn *const *downstream, int n) {
    const raw_fn *f = (const raw_fn *)fn;
    const char *comp;
    const float *lut;
    return n >= 1 && f->dtype == SL_DT_U8 && sl__fn_as_scale(downstream[0], &comp, &lut) &&
                   strcmp(comp, f->comp) == 0
               ? 1
               : 0;
}

static const sl_fn_vt raw_vt = {.name = "decode_raw", .apply = raw_apply, .plan = raw_plan};

sl_status sl_fn_decode_raw(const char *comp, sl_dtype dtype, int rank, const int64_t *dims,
                           sl_fn **out) {
    *out = NULL;
    if (!comp || !*comp || strlen(comp) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "decode_raw: component name must be 1..%d characters",
                      SL_NAME_MAX - 1);
    if (!sl__dtype_is_int(dtype) && !sl__dtype_is_float(dtype))
        return sl_err(SL_EINVAL, "decode_raw: dtype %s is not a fixed-size number type",
                      sl_dtype_name(dtype));
    if (rank < 0 || rank > SL_MAX_RANK || (rank > 0 && !dims))
        return sl_err(SL_EINVAL, "decode_raw: rank %d must be 0..%d", rank, SL_MAX_RANK);
    int wild = -1;
    int64_t known = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] == -1 && wild < 0) {
            wild = i;
        } else if (dims[i] < 0) {
            return sl_err(SL_EINVAL, "decode_raw: dimension %d is %lld; dimensions must be >= 0, "
                          "with at most one -1", i, (long long)dims[i]);
        } else {
            if (dims[i] && known > INT64_MAX / 16 / dims[i])
                return sl_err(SL_EINVAL, "decode_raw: the shape is too large");
            known *= dims[i];
        }
    }
    raw_fn *f = sl__fn_new(sizeof *f, &raw_vt, "decode_raw");
    if (!f) return SL_ENOMEM;
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    f->dtype = dtype;
    f->rank = rank;
    for (int i = 0; i < rank; i++) f->dims[i] = dims[i];
    f->wild = wild;
    f->known = known;
    *out = &f->base;
    return SL_OK;
}
