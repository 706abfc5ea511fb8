/* Pipelines for the unit tests (see helper_iter.h). */
#include <string.h>

#include "helper_iter.h"

sl_status sl_test_open(sl_dataset *ds, sl_iter **it, sl_element *e) {
    sl_element_init(e);
    return sl_iter_create(ds, NULL, it);
}

int sl_test_drain(sl_iter *it) {
    sl_element e;
    sl_element_init(&e);
    int n = 0;
    while (sl_iter_next(it, &e) == SL_OK) {
        n++;
        sl_element_clear(&e);
    }
    sl_element_clear(&e);
    return n;
}

sl_status sl_test_next_drop(sl_iter *it) {
    sl_element e;
    sl_element_init(&e);
    sl_status s = sl_iter_next(it, &e);
    sl_element_clear(&e);
    return s;
}

int64_t sl_test_value(const sl_element *e) {
    int c = sl_element_find(e, "value");
    return c < 0 ? -999999 : *(const int64_t *)e->t[c].data;
}

int sl_test_values(sl_dataset *ds, const sl_iter_opts *opts, int64_t *out, int cap) {
    sl_iter *it;
    if (sl_iter_create(ds, opts, &it)) return -1;
    sl_element e;
    sl_element_init(&e);
    int n = 0;
    sl_status s;
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        int c = sl_element_find(&e, "value");
        bool scalar = c >= 0 && e.t[c].dtype == SL_DT_I64 && e.t[c].rank == 0;
        if (scalar && n < cap) out[n] = *(const int64_t *)e.t[c].data;
        sl_element_clear(&e);
        if (!scalar) {
            s = SL_EINVAL;
            break;
        }
        if (++n > cap) break;
    }
    sl_iter_close(it);
    return s == SL_OK || s == SL_END ? n : -1;
}

sl_status sl_test_fail_mod7(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    int64_t v = sl_test_value(e);
    if (v % 7 == 6) return sl_err(SL_EINVAL, "value %lld is unlucky", (long long)v);
    return SL_OK;
}

sl_status sl_test_append_digit(void *ctx, sl_element *e, const sl_fn_call *call) {
    int c = sl_element_find(e, "value");
    if (c < 0) return sl_err(SL_EINVAL, "append_digit: no component 'value'");
    int64_t *v = e->t[c].data;
    *v = *v * 10 + (ctx ? (int64_t)(intptr_t)ctx : (int64_t)(call->seed % 7));
    return SL_OK;
}

int sl_test_is_odd(void *ctx, const sl_element *e) {
    (void)ctx;
    return sl_test_value(e) % 2 == 1;
}

sl_status sl_test_range_map(int64_t n, const char *name, sl_fn_apply apply, void *ctx, int parallelism,
                            sl_dataset **out) {
    sl_dataset *r = NULL;
    sl_fn *fn = NULL;
    *out = NULL;
    sl_status s = sl_ds_range(0, n, 1, &r);
    if (!s) s = sl_fn_custom(name, apply, ctx, NULL, &fn);
    if (!s) s = sl_ds_map(r, fn, parallelism, true, out);
    sl_fn_unref(fn);
    sl_dataset_unref(r);
    return s;
}

sl_status sl_test_set_f32(sl_element *e, const char *name, int64_t n, int byte) {
    int64_t dims[1] = {n};
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_F32, 1, dims);
    if (s) return s;
    memset(t.data, byte, (size_t)n * 4);
    s = sl_element_set(e, name, &t);
    if (s) sl_tensor_release(&t);
    return s;
}
