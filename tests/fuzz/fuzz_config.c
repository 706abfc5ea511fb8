/* libFuzzer target for the config language: parse arbitrary bytes, walk the whole tree,
 * and apply the input's first line as a --set override to a fixed config (two pipelines,
 * so ambiguous paths are exercised too). Invariants checked on every accepted input: it
 * holds no NUL byte, and no statement or call has a key twice. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/config.h"

static size_t walk_value(const sl_cfg_value *v);

static size_t walk_args(const sl_cfg_arg *a, int n) {
    size_t sum = 0;
    for (int i = 0; i < n; i++) {
        sum += (a[i].key ? strlen(a[i].key) + (size_t)a[i].kloc.col : 0) + walk_value(&a[i].v);
        for (int j = 0; j < i && a[i].key; j++)
            if (a[j].key && strcmp(a[i].key, a[j].key) == 0) abort(); /* a repeated key got through */
    }
    return sum;
}

static size_t walk_value(const sl_cfg_value *v) {
    size_t sum = strlen(v->text) + (size_t)v->loc.line + (size_t)v->ndims;
    for (int i = 0; i < v->ndims; i++) sum += (size_t)v->dims[i];
    if (v->kind == SL_CV_NUMBER) sum += strlen(v->unit);
    return sum + walk_args(v->args, v->nargs);
}

static size_t walk(const sl_cfg_stmt *s, int n) {
    size_t sum = 0;
    for (int i = 0; i < n; i++) {
        sum += strlen(s[i].name) + walk_args(s[i].args, s[i].nargs) + (size_t)sl_cfg_npos(&s[i]);
        sum += walk(s[i].body, s[i].nbody);
    }
    return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sl_cfg *c;
    if (sl_cfg_parse((const char *)data, size, "fuzz.sl", &c) == SL_OK) {
        if (memchr(data, 0, size)) abort(); /* a NUL byte got through */
        int n;
        const sl_cfg_stmt *r = sl_cfg_root(c, &n);
        volatile size_t sink = walk(r, n);
        (void)sink;
        sl_cfg_free(c);
    }
    /* the first line (up to 200 bytes, no NULs) as an override */
    char line[201];
    size_t k = 0;
    while (k < size && k < 200 && data[k] != '\n' && data[k] != 0) { line[k] = (char)data[k]; k++; }
    line[k] = 0;
    static const char base[] = "pipeline train {\n shuffle 10 seed=1\n batch 4\n map f(x) | g(y=1)\n map h(x)\n}\n"
                               "pipeline test {\n batch 8\n}\ntrain {\n epochs 1\n}\n";
    if (sl_cfg_parse(base, sizeof base - 1, "base.sl", &c) == SL_OK) {
        sl_cfg_set(c, line);
        sl_cfg_set(c, line); /* twice: the first may have added what the second finds */
        int n;
        const sl_cfg_stmt *r = sl_cfg_root(c, &n);
        volatile size_t sink = walk(r, n);
        (void)sink;
        sl_cfg_free(c);
    }
    return 0;
}
