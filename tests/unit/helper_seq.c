/* Datasets of given values for the sequence-op tests (see helper_seq.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/fn.h"
#include "helper_seq.h"

typedef struct {
    int kind; /* 0: i64 scalars, 1: strings, 2: rows */
    int n;
    int64_t *v;   /* kind 0, 2 */
    int *off;     /* kind 2: n + 1 offsets into v */
    char **s;     /* kind 1 */
    char name[64];
} table;

static void table_free(void *ctx, void *unused) {
    (void)unused;
    table *t = ctx;
    if (t->s)
        for (int i = 0; i < t->n; i++) free(t->s[i]);
    free(t->s);
    free(t->v);
    free(t->off);
    free(t);
}

static sl_status look_up(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)call;
    const table *t = ctx;
    int c = sl_element_find(e, "value");
    int64_t i = *(const int64_t *)e->t[c].data;
    sl_element_clear(e);
    sl_tensor x;
    sl_status s;
    if (t->kind == 0) {
        if ((s = sl_tensor_alloc(&x, SL_DT_I64, 0, NULL))) return s;
        *(int64_t *)x.data = t->v[i];
    } else if (t->kind == 2) {
        int64_t len = t->off[i + 1] - t->off[i];
        if ((s = sl_tensor_alloc(&x, SL_DT_I64, 1, &len))) return s;
        if (len) memcpy(x.data, t->v + t->off[i], (size_t)len * sizeof(int64_t));
    } else {
        size_t len = strlen(t->s[i]);
        if ((s = sl_tensor_alloc(&x, SL_DT_BYTES, 0, NULL))) return s;
        sl_buf *b = sl_buf_copy(t->s[i], len ? len : 1);
        if (!b) return sl_tensor_release(&x), SL_ENOMEM;
        x.aux = b;
        ((sl_bytes *)x.data)->ptr = b->data;
        ((sl_bytes *)x.data)->len = len;
    }
    if ((s = sl_element_set(e, t->kind == 1 ? t->name : "value", &x))) sl_tensor_release(&x);
    return s;
}

static sl_status from_table(table *t, sl_dataset **out) {
    sl_dataset *r = NULL;
    sl_fn *fn = NULL;
    *out = NULL;
    sl_status s = sl_fn_custom("look_up", look_up, t, table_free, &fn);
    if (s) return s;
    if (!(s = sl_ds_range(0, t->n, 1, &r))) s = sl_ds_map(r, fn, 1, true, out);
    sl_dataset_unref(r);
    sl_fn_unref(fn);
    return s;
}

sl_status sl_test_from_i64(const int64_t *v, int n, sl_dataset **out) {
    table *t = calloc(1, sizeof *t);
    t->n = n;
    t->v = malloc(sizeof *v * (size_t)(n + 1));
    memcpy(t->v, v, sizeof *v * (size_t)n);
    return from_table(t, out);
}

sl_status sl_test_from_strs(const char *const *s, int n, const char *name, sl_dataset **out) {
    table *t = calloc(1, sizeof *t);
    t->kind = 1;
    t->n = n;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->s = calloc((size_t)n + 1, sizeof *t->s);
    for (int i = 0; i < n; i++) t->s[i] = strdup(s[i]);
    return from_table(t, out);
}

sl_status sl_test_from_rows(const int64_t *flat, const int *lens, int n, sl_dataset **out) {
    table *t = calloc(1, sizeof *t);
    t->kind = 2;
    t->n = n;
    t->off = malloc(sizeof *t->off * (size_t)(n + 1));
    t->off[0] = 0;
    for (int i = 0; i < n; i++) t->off[i + 1] = t->off[i] + lens[i];
    t->v = malloc(sizeof *flat * (size_t)(t->off[n] + 1));
    memcpy(t->v, flat, sizeof *flat * (size_t)t->off[n]);
    return from_table(t, out);
}

int sl_test_vec(const sl_element *e, int64_t *out, int cap) {
    int c = sl_element_find(e, "value");
    if (c < 0 || e->t[c].dtype != SL_DT_I64) return -1;
    int n = (int)sl_tensor_numel(&e->t[c]);
    for (int i = 0; i < n && i < cap; i++) out[i] = ((const int64_t *)e->t[c].data)[i];
    return n;
}

int sl_test_vecs(sl_dataset *ds, int64_t start, char *buf, size_t cap) {
    sl_iter *it;
    size_t len = 0;
    buf[0] = 0;
    if (sl_iter_create_at(ds, NULL, start, &it)) return -1;
    sl_element e;
    sl_element_init(&e);
    int n = 0;
    sl_status s;
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        int64_t v[64];
        int k = sl_test_vec(&e, v, 64);
        bool vec = k >= 0 && e.t[sl_element_find(&e, "value")].rank > 0;
        if (len < cap) len += (size_t)snprintf(buf + len, cap - len, vec ? "[" : "");
        for (int i = 0; i < k && i < 64 && len < cap; i++)
            len += (size_t)snprintf(buf + len, cap - len, i ? " %lld" : "%lld", (long long)v[i]);
        if (len < cap) len += (size_t)snprintf(buf + len, cap - len, vec ? "] " : " ");
        sl_element_clear(&e);
        n++;
    }
    sl_iter_close(it);
    return s == SL_END ? n : -1;
}

/* A component as numpy prints it, on one line: "[0 1 2]", "[[1 2 3 4] [5 6 7 0]]". */
static void fmt_rows(const sl_tensor *t, int d, int64_t *k, char *buf, size_t cap, size_t *len) {
    *len += (size_t)snprintf(buf + *len, cap - *len, "[");
    for (int64_t i = 0; i < t->dims[d] && *len < cap; i++) {
        if (i) *len += (size_t)snprintf(buf + *len, cap - *len, " ");
        if (d + 1 < t->rank) {
            fmt_rows(t, d + 1, k, buf, cap, len);
        } else {
            long long v = t->dtype == SL_DT_I32 ? ((const int32_t *)t->data)[*k] : ((const int64_t *)t->data)[*k];
            (*k)++;
            *len += (size_t)snprintf(buf + *len, cap - *len, "%lld", v);
        }
    }
    if (*len < cap) *len += (size_t)snprintf(buf + *len, cap - *len, "]");
}

const char *sl_test_fmt(const sl_element *e, const char *comp, char *buf, size_t cap) {
    int c = sl_element_find(e, comp);
    if (c < 0) return "(missing)";
    size_t len = 0;
    int64_t k = 0;
    buf[0] = 0;
    if (e->t[c].rank == 0) snprintf(buf, cap, "%lld", (long long)*(const int64_t *)e->t[c].data);
    else fmt_rows(&e->t[c], 0, &k, buf, cap, &len);
    return buf;
}

/* Every element of ds, component comp formatted, joined with ", " into out. Returns the
 * status that ended the stream (SL_END when it ended). */
sl_status sl_test_read_all(sl_dataset *ds, const char *comp, char *out, size_t cap) {
    sl_iter *it;
    sl_element e;
    sl_element_init(&e);
    out[0] = 0;
    sl_status s = sl_iter_create(ds, NULL, &it);
    if (s) return s;
    size_t len = 0;
    char one[512];
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? ", " : "", sl_test_fmt(&e, comp, one, sizeof one));
        sl_element_clear(&e);
    }
    if (s == SL_END && sl_iter_next(it, &e) != SL_END) s = SL_EINTERNAL; /* SL_END must repeat */
    sl_iter_close(it);
    return s;
}
