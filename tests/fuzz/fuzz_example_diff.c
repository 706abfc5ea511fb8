/* Differential libFuzzer target: the fast path (sl_example_parse) against protobuf-c
 * (sl_example_parse_pb) on the same bytes. Aborts when they disagree on success, on the
 * feature list (keys, kinds, counts), on any value (floats compared bitwise), or on the
 * JSON they print. An accepted Example is also re-encoded with sl_exb_* and decoded again,
 * which must give the same features (checks the encoder). Seeds: tests/fuzz/seeds/example/. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/example.h"

static __attribute__((noreturn)) void die(const char *fmt, size_t i) {
    fprintf(stderr, "fuzz_example_diff: ");
    fprintf(stderr, fmt, i);
    fprintf(stderr, " (last error: %s)\n", sl_errmsg());
    abort();
}

static void *values(const sl_feature *f) {
    size_t n = f->count;
    void *v = malloc(n ? n * 16 : 1);
    sl_status s = SL_OK;
    if (f->kind == SL_FEAT_FLOAT) s = sl_feature_floats(f, v, n);
    else if (f->kind == SL_FEAT_INT64) s = sl_feature_int64s(f, v, n);
    else if (f->kind == SL_FEAT_BYTES) s = sl_feature_bytes(f, v, n);
    if (s) die("getter failed on feature %zu", 0);
    return v;
}

static void compare(const sl_example *a, const sl_example *b) {
    if (a->n != b->n) die("feature counts differ (%zu in the first)", a->n);
    for (size_t i = 0; i < a->n; i++) {
        const sl_feature *x = &a->f[i], *y = &b->f[i];
        if (x->key.len != y->key.len || (x->key.len && memcmp(x->key.ptr, y->key.ptr, x->key.len)))
            die("key of feature %zu differs", i);
        if (x->kind != y->kind) die("kind of feature %zu differs", i);
        if (x->count != y->count) die("count of feature %zu differs", i);
        if (x->kind == SL_FEAT_NONE || !x->count) continue;
        void *va = values(x), *vb = values(y);
        if (x->kind == SL_FEAT_BYTES) {
            for (size_t k = 0; k < x->count; k++) {
                const sl_bytes *p = (const sl_bytes *)va + k, *q = (const sl_bytes *)vb + k;
                if (p->len != q->len || (p->len && memcmp(p->ptr, q->ptr, p->len)))
                    die("a bytes value of feature %zu differs", i);
            }
        } else if (memcmp(va, vb, x->count * (x->kind == SL_FEAT_FLOAT ? 4 : 8))) {
            die("values of feature %zu differ", i);
        }
        free(va);
        free(vb);
    }
}

/* Re-encode with the builder (keys may not be empty there, nor hold a NUL byte: its keys
 * are C strings; so skip those Examples). */
static void reencode(const sl_example *ex) {
    sl_exb *b;
    if (sl_exb_new(&b)) die("sl_exb_new %zu", 0);
    char key[512];
    for (size_t i = 0; i < ex->n; i++) {
        const sl_feature *f = &ex->f[i];
        if (f->key.len == 0 || f->key.len >= sizeof key || f->kind == SL_FEAT_NONE ||
            memchr(f->key.ptr, 0, f->key.len)) {
            sl_exb_free(b);
            return;
        }
        memcpy(key, f->key.ptr, f->key.len);
        key[f->key.len] = 0;
        void *v = values(f);
        sl_status s = f->kind == SL_FEAT_FLOAT ? sl_exb_floats(b, key, v, f->count)
                    : f->kind == SL_FEAT_INT64 ? sl_exb_int64s(b, key, v, f->count)
                                               : sl_exb_bytes(b, key, v, f->count);
        free(v);
        if (s) die("builder rejected feature %zu", i);
    }
    uint8_t *out;
    size_t len;
    if (sl_exb_serialize(b, &out, &len)) die("serialize %zu", 0);
    sl_example back, back_pb;
    sl_example_init(&back);
    sl_example_init(&back_pb);
    if (sl_example_parse(&back, out, len) || sl_example_parse_pb(&back_pb, out, len))
        die("re-encoded Example does not parse (%zu bytes)", len);
    compare(ex, &back);
    compare(ex, &back_pb);
    sl_example_free(&back);
    sl_example_free(&back_pb);
    free(out);
    sl_exb_free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sl_example a, b;
    sl_example_init(&a);
    sl_example_init(&b);
    sl_status sa = sl_example_parse(&a, data, size);
    sl_status sb = sl_example_parse_pb(&b, data, size);
    if ((sa == SL_OK) != (sb == SL_OK)) {
        fprintf(stderr, "verdicts differ: fast %s, protobuf-c %s\n", sl_status_name(sa), sl_status_name(sb));
        abort();
    }
    if (sa == SL_OK) {
        compare(&a, &b);
        char *ja = NULL, *jb = NULL;
        if (sl_example_to_json(&a, &ja, NULL) || sl_example_to_json(&b, &jb, NULL)) die("to_json %zu", 0);
        if (strcmp(ja, jb)) die("JSON differs (%zu)", 0);
        free(ja);
        free(jb);
        reencode(&a);
    } else if (sa != SL_ECORRUPT || sb != SL_ECORRUPT) {
        die("unexpected status (%zu)", 0);
    }
    sl_example_free(&a);
    sl_example_free(&b);
    return 0;
}
