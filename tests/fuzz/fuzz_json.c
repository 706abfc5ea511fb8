/* libFuzzer target for core/json.c's reader (sl_json_parse_opts), the one JSON reader of
 * TF_CONFIG, stats files and safetensors headers. The first two bytes choose the options
 * (keep duplicate keys, raw bytes, stop after one value, a memory budget of a multiple of the
 * input), the rest is the text. Outside bytes may only give SL_OK or SL_ECORRUPT (SL_ENOMEM
 * when the sanitizer's allocator says so), with *out NULL and a message naming a byte inside
 * the text; a tree that reads must hold what sluice/json.h promises (offsets inside the text,
 * strings without NULs of their stated length, finite numbers, exact integers), read the
 * same without the budget, and read back as the same tree once written with
 * sl_json_buf_put_tree (the same text when written again). Seeds: tests/fuzz/seeds/json/. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/json.h"

static void fail(const char *why) {
    fprintf(stderr, "fuzz_json: %s (%s)\n", why, sl_errmsg());
    abort();
}

/* What sluice/json.h promises of a value read from len bytes. */
static void check(const sl_json *v, size_t len, int depth) {
    if (v->offset >= len || depth > 64) fail("a value outside the text or too deep");
    switch (v->kind) {
    case SL_JSON_NULL:
    case SL_JSON_BOOL: break;
    case SL_JSON_NUMBER:
        if (!isfinite(v->num) || v->len == 0 || v->offset + v->len > len) fail("a bad number");
        if (v->is_int && v->i > -(1LL << 53) && v->i < (1LL << 53) && (double)v->i != v->num) fail("an integer that is not its double");
        break;
    case SL_JSON_STRING:
        if (!v->str || strlen(v->str) != v->len) fail("a string with a NUL or the wrong length");
        break;
    case SL_JSON_ARRAY:
    case SL_JSON_OBJECT:
        if (v->len && !v->items) fail("a container without its items");
        for (size_t i = 0; i < v->len; i++) {
            if (v->kind == SL_JSON_OBJECT) {
                size_t ko = sl_json_key_offset(v, i);
                if (!v->keys[i] || ko <= v->offset || ko >= v->items[i].offset) fail("a key out of place");
            }
            check(&v->items[i], len, depth + 1);
        }
        break;
    default: fail("an unknown kind");
    }
}

/* The tree as sl_json_buf_put_tree writes it (NULL when out of memory). */
static char *text_of(const sl_json *v) {
    sl_json_buf b = {0};
    sl_json_buf_put_tree(&b, v, 0);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    unsigned opt = data[0], mult = data[1];
    const char *text = (const char *)data + 2;
    size_t len = size - 2, end = SIZE_MAX;
    sl_json_opts o = {.what = "fuzz", .prefix = (opt & 16) ? "p: " : NULL, .base = (opt & 32) ? 8 : 0,
                      .flags = ((opt & 1) ? SL_JSON_KEEP_DUPLICATES : 0) | ((opt & 2) ? SL_JSON_RAW_BYTES : 0),
                      .end = (opt & 4) ? &end : NULL, .max_bytes = (opt & 8) ? len * (mult & 63) + 1 : 0};
    sl_json *j = (sl_json *)1;
    sl_status s = sl_json_parse_opts(text, len, &o, &j);
    if (s == SL_ENOMEM) return 0;
    if (s != SL_OK) {
        unsigned long long at;
        if (s != SL_ECORRUPT || j != NULL) fail("not SL_ECORRUPT, or *out not NULL");
        if (sscanf(sl_errmsg(), "fuzz: byte %llu:", &at) != 1 || at > len + (unsigned long long)o.base) fail("no byte offset in the text");
        if (o.end && end != SIZE_MAX) fail("*end set on failure");
        return 0;
    }
    if (o.end && (end > len || end <= j->offset)) fail("*end outside the text");
    check(j, len, 0);
    char *text1 = text_of(j);
    if (!text1) {
        sl_json_free(j);
        return 0;
    }
    if (o.max_bytes) { /* the budget only refuses: what reads under it reads the same without */
        size_t end2 = 0;
        sl_json_opts free_o = o;
        free_o.max_bytes = 0;
        free_o.end = o.end ? &end2 : NULL;
        sl_json *k;
        if (sl_json_parse_opts(text, len, &free_o, &k) != SL_OK) fail("reads under a budget, not without");
        char *t = text_of(k);
        if (t && strcmp(t, text1)) fail("a different tree without the budget");
        free(t);
        sl_json_free(k);
    }
    /* written back it reads as the same tree: the same text again */
    sl_json_opts back = {.what = "back", .flags = o.flags};
    sl_json *k;
    if (sl_json_parse_opts(text1, strlen(text1), &back, &k) != SL_OK) fail("what the writer wrote does not read back");
    char *text2 = text_of(k);
    if (text2 && strcmp(text1, text2)) fail("the tree written and read back differs");
    free(text2);
    free(text1);
    sl_json_free(k);
    sl_json_free(j);
    return 0;
}
