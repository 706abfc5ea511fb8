/* libFuzzer target for formats/example*.c: sl_example_parse (the fast path) on outside
 * bytes, then every getter, lookup by key, to_json and to_text on what it accepted.
 * Outside bytes may only produce SL_OK or SL_ECORRUPT; on failure the example is empty;
 * a getter may not fail on an accepted Example (the parse validated every list).
 * Seeds: tests/fuzz/seeds/example/. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/example.h"

static __attribute__((noreturn)) void die(const char *what, sl_status s) {
    fprintf(stderr, "fuzz_example: %s: %s (%s)\n", what, sl_status_name(s), sl_errmsg());
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sl_example ex;
    sl_example_init(&ex);
    sl_status s = sl_example_parse(&ex, data, size);
    if (s != SL_OK && s != SL_ECORRUPT) die("parse", s);
    if (s != SL_OK) {
        if (ex.n != 0) die("failed parse left features", s);
        sl_example_free(&ex);
        return 0;
    }
    for (size_t i = 0; i < ex.n; i++) {
        const sl_feature *f = &ex.f[i];
        size_t n = f->count;
        if (f->kind == SL_FEAT_NONE && n) die("kind none with values", SL_OK);
        /* the key's exact bytes find this very feature; NUL-terminated, only a key without
         * a NUL inside finds it, and a key with one never finds another feature under its
         * part before the NUL (issue 11) */
        if (sl_example_get_n(&ex, f->key.ptr, f->key.len) != f) die("lookup", SL_OK);
        char *key = malloc(f->key.len + 1);
        memcpy(key, f->key.ptr, f->key.len);
        key[f->key.len] = 0;
        const sl_feature *g = sl_example_get(&ex, key);
        if (strlen(key) == f->key.len ? g != f : (g && g->key.len != strlen(key))) die("lookup by C string", SL_OK);
        free(key);
        void *v = malloc(n ? n * 16 : 1);
        if (f->kind == SL_FEAT_FLOAT) {
            if ((s = sl_feature_floats(f, v, n))) die("floats", s);
            if (n && sl_feature_floats(f, v, n - 1) != SL_ERANGE) die("floats cap", SL_OK);
            if (sl_feature_int64s(f, v, n) != SL_EINVAL) die("kind check", SL_OK);
        } else if (f->kind == SL_FEAT_INT64) {
            if ((s = sl_feature_int64s(f, v, n))) die("int64s", s);
        } else if (f->kind == SL_FEAT_BYTES) {
            if ((s = sl_feature_bytes(f, v, n))) die("bytes", s);
            volatile uint8_t sum = 0; /* touch every byte: ASan checks the views */
            for (size_t k = 0; k < n; k++) {
                const sl_bytes *b = (const sl_bytes *)v + k;
                if (!b->ptr) die("NULL view", SL_OK);
                for (size_t j = 0; j < b->len; j++) sum += b->ptr[j];
            }
            (void)sum;
        }
        free(v);
    }
    char *js = NULL, *txt = NULL;
    size_t jl = 0, tl = 0;
    if ((s = sl_example_to_json(&ex, &js, &jl))) die("to_json", s);
    if (strlen(js) != jl || js[0] != '{' || js[jl - 1] != '}') die("json shape", SL_OK);
    if ((s = sl_example_to_text(&ex, 3, &txt, &tl))) die("to_text", s);
    if (strlen(txt) != tl) die("text length", SL_OK);
    free(js);
    free(txt);
    sl_example_free(&ex);
    return 0;
}
