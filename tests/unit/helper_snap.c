/* Helpers for the snapshot / save / load tests (helper_snap.h). */
#include "helper_snap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice/fn.h"
#include "helper_iter.h"

atomic_int sl_test_snap_calls;

static sl_status snap_fn(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    atomic_fetch_add(&sl_test_snap_calls, 1);
    int64_t v = sl_test_value(e);
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_I64, 0, NULL);
    if (s) return s;
    *(int64_t *)t.data = 2 * v;
    if ((s = sl_element_set(e, "value", &t))) return s;
    int64_t dims[2] = {2, 3};
    if ((s = sl_tensor_alloc(&t, SL_DT_F32, 2, dims))) return s;
    for (int i = 0; i < 6; i++) ((float *)t.data)[i] = v == 3 && i == 1 ? NAN : (float)v + 0.5f * (float)i;
    if ((s = sl_element_set(e, "mat", &t))) return s;
    int n = (int)(v % 5) + 1;
    sl_buf *b = sl_buf_new(sizeof(sl_bytes) + (size_t)n);
    if (!b) return SL_ENOMEM;
    uint8_t *txt = (uint8_t *)b->data + sizeof(sl_bytes);
    for (int i = 0; i < n; i++) txt[i] = (uint8_t)(v * 7 + i); /* any bytes, NUL included */
    ((sl_bytes *)b->data)->ptr = txt;
    ((sl_bytes *)b->data)->len = (size_t)n;
    t = SL_TENSOR_EMPTY;
    t.dtype = SL_DT_BYTES;
    t.data = b->data;
    t.buf = b;
    t.aux = sl_buf_ref(b);
    return sl_element_set(e, "name", &t);
}

sl_status sl_test_snap_upstream(int64_t n, int64_t batch, sl_dataset **out) {
    sl_dataset *m;
    sl_status s = sl_test_range_map(n, "snapfn", snap_fn, NULL, 1, &m);
    if (s || batch <= 0) {
        *out = s ? NULL : m;
        return s;
    }
    sl_batch_opts o = sl_batch_opts_default(batch);
    s = sl_ds_batch(m, &o, out);
    sl_dataset_unref(m);
    return s;
}

int sl_test_snap_collect(sl_dataset *ds, sl_element **out, int *n) {
    *out = NULL;
    *n = 0;
    sl_iter *it;
    sl_status s = sl_iter_create(ds, NULL, &it);
    if (s) return s;
    int cap = 0;
    for (;;) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            *out = realloc(*out, sizeof **out * (size_t)cap);
        }
        sl_element_init(&(*out)[*n]);
        s = sl_iter_next(it, &(*out)[*n]);
        if (s != SL_OK) break;
        (*n)++;
    }
    sl_iter_close(it);
    return s;
}

void sl_test_snap_free(sl_element *v, int n) {
    for (int i = 0; i < n; i++) sl_element_clear(&v[i]);
    free(v);
}

static bool same_tensor(const sl_tensor *a, const sl_tensor *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return false;
    if (a->dtype != SL_DT_BYTES) return memcmp(a->data, b->data, sl_tensor_nbytes(a)) == 0;
    const sl_bytes *x = a->data, *y = b->data;
    for (int64_t i = 0; i < sl_tensor_numel(a); i++)
        if (x[i].len != y[i].len || (x[i].len && memcmp(x[i].ptr, y[i].ptr, x[i].len))) return false;
    return true;
}

bool sl_test_snap_same(const sl_element *a, int na, const sl_element *b, int nb) {
    if (na != nb) return false;
    for (int i = 0; i < na; i++) {
        if (a[i].n != b[i].n) return false;
        for (int k = 0; k < a[i].n; k++) {
            int j = sl_element_find(&b[i], a[i].names[k]);
            if (j < 0 || !same_tensor(&a[i].t[k], &b[i].t[j])) return false;
        }
    }
    return true;
}

static int saved_fd = -1;
static char cap_path[64];

void sl_test_capture_start(void) {
    fflush(stderr);
    snprintf(cap_path, sizeof cap_path, "/tmp/sluice-capture-%ld.txt", (long)getpid());
    FILE *f = fopen(cap_path, "w");
    if (!f) return;
    saved_fd = dup(2);
    dup2(fileno(f), 2);
    fclose(f);
}

char *sl_test_capture_stop(void) {
    fflush(stderr);
    if (saved_fd >= 0) {
        dup2(saved_fd, 2);
        close(saved_fd);
        saved_fd = -1;
    }
    FILE *f = fopen(cap_path, "r");
    char *buf = calloc(1, 1 << 16);
    if (f && buf) {
        size_t n = fread(buf, 1, (1 << 16) - 1, f);
        buf[n] = 0;
    }
    if (f) fclose(f);
    unlink(cap_path);
    fputs(buf ? buf : "", stderr); /* keep it in the test's log */
    return buf;
}
