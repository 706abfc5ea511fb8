/* Element functions for the unit tests (see helper_fn.h). */
#include <stdlib.h>
#include <string.h>

#include "helper_fn.h"
#include "pipeline/internal.h"

sl_tensor sl_test_tensor(sl_dtype dt, int rank, const int64_t *dims, const void *vals) {
    sl_tensor t;
    if (sl_tensor_alloc(&t, dt, rank, dims)) abort();
    if (vals) memcpy(t.data, vals, sl_tensor_nbytes(&t));
    return t;
}

sl_tensor sl_test_bytes(const void *data, size_t len, size_t offset) {
    sl_buf *b = sl_buf_new(len + offset);
    if (!b) abort();
    memset(b->data, 0xee, offset);
    if (len) memcpy((uint8_t *)b->data + offset, data, len);
    sl_tensor t;
    if (sl_tensor_alloc(&t, SL_DT_BYTES, 0, NULL)) abort();
    *(sl_bytes *)t.data = (sl_bytes){(const uint8_t *)b->data + offset, len};
    t.aux = b;
    return t;
}

void sl_test_elem1(sl_element *e, const char *name, sl_tensor t) {
    sl_element_init(e);
    if (sl_element_set(e, name, &t)) abort();
}

sl_status sl_test_apply(sl_fn *fn, sl_element *e, uint64_t seed) {
    return sl__fn_apply(fn, e, seed, 0, NULL);
}

const sl_tensor *sl_test_comp(const sl_element *e, const char *name) {
    int i = sl_element_find(e, name);
    return i < 0 ? NULL : &e->t[i];
}

sl_feature_spec sl_test_spec(const char *name, sl_dtype dt, int rank, int64_t d0, int64_t d1, int64_t d2) {
    sl_feature_spec s = {.name = name, .dtype = dt, .rank = rank, .dims = {d0, d1, d2}};
    return s;
}

/* Whether T is like LIKE: its dtype and rank, and its dims where LIKE's are >= 0. */
static bool is_like(const sl_tensor *t, const sl_tensor *like) {
    if (t->dtype != like->dtype || t->rank != like->rank) return false;
    for (int d = 0; d < t->rank; d++)
        if (like->dims[d] >= 0 && t->dims[d] != like->dims[d]) return false;
    return true;
}

sl_status sl_test_pipe_bytes(sl_fn *fn, const sl_test_pipe *p, const char *name, const sl_tensor *like,
                             uint8_t **out, size_t *len) {
    sl_dataset *r = NULL, *m = NULL, *b = NULL;
    sl_iter *it = NULL;
    sl_status s;
    *out = NULL;
    *len = 0;
    if ((s = sl_ds_range(0, p->count, 1, &r)) || (s = sl_ds_map(r, fn, p->parallelism, true, &m))) goto done;
    if (p->batch > 0) {
        sl_batch_opts o = sl_batch_opts_default(p->batch);
        o.padded = !p->fused; /* padded batches are not fused with the map */
        if ((s = sl_ds_batch(m, &o, &b))) goto done;
        if (strcmp(sl_dataset_op(b), p->fused ? "map_batch" : "batch") != 0) {
            s = SL_EINTERNAL;
            goto done;
        }
    }
    sl_iter_opts io = sl_iter_opts_default();
    io.seed = p->seed;
    if ((s = sl_iter_create(b ? b : m, &io, &it))) goto done;
    sl_element e;
    sl_element_init(&e);
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        const sl_tensor *t = sl_test_comp(&e, name);
        size_t n = t ? sl_tensor_nbytes(t) : 0;
        uint8_t *grown = NULL;
        if (!t || (like && !is_like(t, like))) s = SL_EINTERNAL;
        else if (!(grown = realloc(*out, *len + n + 1))) s = SL_ENOMEM;
        if (s) {
            sl_element_clear(&e);
            goto done;
        }
        *out = grown;
        memcpy(*out + *len, t->data, n);
        *len += n;
        sl_element_clear(&e);
    }
    if (s == SL_END) s = SL_OK;
done:
    sl_iter_close(it);
    sl_dataset_unref(b);
    sl_dataset_unref(m);
    sl_dataset_unref(r);
    return s;
}
