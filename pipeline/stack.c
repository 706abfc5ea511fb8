/* Stacking elements into batches (batch, padded batch and map_batch's final step). Every
 * element must have the same components with the same dtypes and ranks; shapes must be
 * equal unless padding, in which case each component is padded to the largest extent of
 * each dimension in the batch. Bytes components are copied into one buffer per batch so a
 * batch does not pin many records' memory. A batch's origin is unknown (it has many); an
 * element that does not fit is named by its own origin in the error. Also the number of
 * batches both batch ops report as their cardinality (sl__batch_card).
 *
 * Workload: once per batch, after every element was gathered. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"

void sl__fill_value(void *dst, sl_dtype dt, double v, size_t count) {
    if (v == 0.0 || dt == SL_DT_BYTES) {
        memset(dst, 0, count * sl_dtype_size(dt));
        return;
    }
    for (size_t i = 0; i < count; i++) {
        switch (dt) {
        case SL_DT_U8: ((uint8_t *)dst)[i] = (uint8_t)v; break;
        case SL_DT_I8: ((int8_t *)dst)[i] = (int8_t)v; break;
        case SL_DT_U16: ((uint16_t *)dst)[i] = (uint16_t)v; break;
        case SL_DT_I16: ((int16_t *)dst)[i] = (int16_t)v; break;
        case SL_DT_I32: ((int32_t *)dst)[i] = (int32_t)v; break;
        case SL_DT_U32: ((uint32_t *)dst)[i] = (uint32_t)v; break;
        case SL_DT_I64: ((int64_t *)dst)[i] = (int64_t)v; break;
        case SL_DT_F32: ((float *)dst)[i] = (float)v; break;
        case SL_DT_F64: ((double *)dst)[i] = v; break;
        case SL_DT_BOOL: ((uint8_t *)dst)[i] = v != 0; break;
        case SL_DT_F16: ((uint16_t *)dst)[i] = sl_f16_from_f32((float)v); break;
        case SL_DT_BF16: {
            float f = (float)v;
            uint32_t b;
            memcpy(&b, &f, 4);
            ((uint16_t *)dst)[i] = (uint16_t)(b >> 16);
            break;
        }
        default: break;
        }
    }
}

/* Copy a tensor of shape src_dims into a region of shape dst_dims (each >= src) at dst;
 * rows are contiguous in both. */
static void copy_padded(char *dst, const char *src, const int64_t *dst_dims, const int64_t *src_dims,
                        int rank, size_t esize) {
    if (rank == 0) {
        memcpy(dst, src, esize);
        return;
    }
    if (rank == 1) {
        memcpy(dst, src, (size_t)src_dims[0] * esize);
        return;
    }
    size_t dst_inner = esize, src_inner = esize;
    for (int i = 1; i < rank; i++) {
        dst_inner *= (size_t)dst_dims[i];
        src_inner *= (size_t)src_dims[i];
    }
    for (int64_t k = 0; k < src_dims[0]; k++)
        copy_padded(dst + (size_t)k * dst_inner, src + (size_t)k * src_inner, dst_dims + 1, src_dims + 1,
                    rank - 1, esize);
}

static const char *shape_str(const sl_tensor *t, char *buf, size_t cap) { return sl_tensor_describe(t, buf, cap); }

static sl_status stack_bytes(const sl_element *elems, int n, int c, const int *idx, const int64_t *dims,
                             int rank, sl_tensor *out) {
    /* total length of all strings */
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const sl_tensor *t = &elems[i].t[idx[i]];
        const sl_bytes *b = t->data;
        for (int64_t k = 0; k < sl_tensor_numel(t); k++) total += b[k].len;
    }
    int64_t bd[SL_MAX_RANK + 1];
    bd[0] = n;
    for (int i = 0; i < rank; i++) bd[i + 1] = dims[i];
    sl_status s = sl_tensor_alloc(out, SL_DT_BYTES, rank + 1, bd);
    if (s) return s;
    sl_buf *aux = sl_buf_new(total);
    if (!aux) {
        sl_tensor_release(out);
        return SL_ENOMEM;
    }
    out->aux = aux;
    sl_bytes *dst = out->data;
    int64_t per = 1;
    for (int i = 0; i < rank; i++) per *= dims[i];
    for (int64_t k = 0; k < per * n; k++) dst[k] = (sl_bytes){(const uint8_t *)aux->data, 0};
    uint8_t *w = aux->data;
    for (int i = 0; i < n; i++) {
        const sl_tensor *t = &elems[i].t[idx[i]];
        const sl_bytes *b = t->data;
        /* walk the source in row-major order, mapping to the padded destination index */
        int64_t cnt = sl_tensor_numel(t);
        for (int64_t k = 0; k < cnt; k++) {
            int64_t rem = k, off = 0, stride = 1;
            for (int d = t->rank - 1; d >= 0; d--) {
                int64_t coord = rem % t->dims[d];
                rem /= t->dims[d];
                off += coord * stride;
                stride *= dims[d];
            }
            if (b[k].len) memcpy(w, b[k].ptr, b[k].len);
            dst[(int64_t)i * per + off] = (sl_bytes){w, b[k].len};
            w += b[k].len;
        }
    }
    (void)c;
    return SL_OK;
}

/* Prefix the current error with where element e was read from, when known. */
static sl_status at_origin(const sl_element *e, sl_status code) {
    if (e->origin.path) sl_err_prefix("%s: byte %lld: ", e->origin.path, (long long)e->origin.offset);
    return code;
}

sl_status sl__stack(const sl_element *elems, int n, const sl_batch_opts *opts, const char *label,
                    sl_element *out) {
    char b1[128], b2[128];
    if (n < 1) return sl_err(SL_EINVAL, "op '%s': cannot stack an empty batch", label);
    const sl_element *first = &elems[0];
    for (int i = 1; i < n; i++)
        if (elems[i].n != first->n)
            return at_origin(&elems[i], sl_err(SL_EINVAL, "op '%s': element %d of the batch has %d components, "
                                               "the first has %d", label, i, elems[i].n, first->n));
    int *idx = malloc(sizeof *idx * (size_t)n);
    if (!idx) return sl_err(SL_ENOMEM, "out of memory batching");
    sl_status s = SL_OK;
    for (int c = 0; c < first->n && !s; c++) {
        const char *name = first->names[c];
        const sl_tensor *t0 = &first->t[c];
        int64_t dims[SL_MAX_RANK];
        if (t0->rank >= SL_MAX_RANK) {
            s = sl_err(SL_EINVAL, "op '%s': component '%s' has rank %d; a batch of it would exceed rank %d",
                       label, name, t0->rank, SL_MAX_RANK);
            break;
        }
        for (int d = 0; d < t0->rank; d++) dims[d] = t0->dims[d];
        bool same = true;
        for (int i = 0; i < n && !s; i++) {
            idx[i] = strcmp(elems[i].names[c], name) == 0 ? c : sl_element_find(&elems[i], name);
            if (idx[i] < 0) {
                s = sl_err(SL_EINVAL, "op '%s': element %d of the batch has no component '%s'", label, i, name);
                at_origin(&elems[i], s);
                break;
            }
            const sl_tensor *t = &elems[i].t[idx[i]];
            if (t->dtype != t0->dtype || t->rank != t0->rank) {
                s = sl_err(SL_EINVAL, "op '%s': component '%s' is %s in element 0 but %s in element %d of the batch",
                           label, name, shape_str(t0, b1, sizeof b1), shape_str(t, b2, sizeof b2), i);
                at_origin(&elems[i], s);
                break;
            }
            for (int d = 0; d < t->rank; d++) {
                if (t->dims[d] != dims[d]) same = false;
                if (t->dims[d] > dims[d]) dims[d] = t->dims[d];
            }
            if (!same && !opts->padded) {
                s = sl_err(SL_EINVAL, "op '%s': component '%s' is %s in element 0 but %s in element %d of the batch",
                           label, name, shape_str(t0, b1, sizeof b1), shape_str(t, b2, sizeof b2), i);
                sl_err_hint("use a padded batch (batch N padded) or resize/crop to one shape before batching");
                at_origin(&elems[i], s);
                break;
            }
        }
        if (s) break;
        sl_tensor bt;
        if (t0->dtype == SL_DT_BYTES) {
            s = stack_bytes(elems, n, c, idx, dims, t0->rank, &bt);
        } else {
            int64_t bd[SL_MAX_RANK];
            bd[0] = n;
            for (int d = 0; d < t0->rank; d++) bd[d + 1] = dims[d];
            s = sl_tensor_alloc(&bt, t0->dtype, t0->rank + 1, bd);
            if (!s) {
                size_t esize = sl_dtype_size(t0->dtype), per = esize;
                for (int d = 0; d < t0->rank; d++) per *= (size_t)dims[d];
                char *dst = bt.data;
                if (!same) sl__fill_value(dst, t0->dtype, opts->pad_value, per / esize * (size_t)n);
                for (int i = 0; i < n; i++) {
                    const sl_tensor *t = &elems[i].t[idx[i]];
                    if (same) memcpy(dst + per * (size_t)i, t->data, per);
                    else copy_padded(dst + per * (size_t)i, t->data, dims, t->dims, t->rank, esize);
                }
            }
        }
        if (!s) {
            s = sl_element_set(out, name, &bt);
            if (s) sl_tensor_release(&bt);
        }
    }
    free(idx);
    if (s) sl_element_clear(out);
    return s;
}

sl_status sl__elems_reserve(sl_element **arr, int *cap, int need) {
    if (need <= *cap) return SL_OK;
    int ncap = *cap ? *cap : 16;
    while (ncap < need) ncap = ncap > (1 << 29) ? need : ncap * 2;
    sl_element *a = realloc(*arr, sizeof *a * (size_t)ncap);
    if (!a) return sl_err(SL_ENOMEM, "out of memory gathering a batch of %d elements", need);
    for (int i = *cap; i < ncap; i++) sl_element_init(&a[i]);
    *arr = a;
    *cap = ncap;
    return SL_OK;
}

int64_t sl__batch_card(const sl_dataset *in, const sl_batch_opts *o) {
    int64_t n = sl_dataset_cardinality(in);
    if (n < 0) return n;
    return n / o->size + (!o->drop_remainder && n % o->size != 0); /* n + size - 1 could pass 2^63-1 */
}
