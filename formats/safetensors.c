/* safetensors files: crash-safe writer and strict, zero-copy reader (the trainer's
 * checkpoints: parameters, optimizer state and a few metadata strings).
 *
 * Workload: a checkpoint every few minutes of training, from kilobytes (an MLP) to a few
 * gigabytes, with tens to thousands of tensors; read once on --resume. So the writer
 * streams each borrowed tensor straight to the file (no staging copy), and the reader maps
 * the file and hands out views into the mapping.
 *
 * The header is read by core's JSON reader (sluice/json.h, under a memory budget of 16 times
 * the header), then held to what the format allows (objects, arrays of non-negative
 * integers, strings) and everything else refused, with the byte offset of the offending
 * token. A checkpoint that fails validation is never partly loaded: all checks run in
 * sl_st_open before any tensor is handed out.
 *
 * This file: the reader, the dtype names and the checksums both sides compute; the writer
 * is formats/safetensors_write.c. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/crc32c.h"
#include "sluice/file.h"
#include "sluice/json.h"
#include "formats/safetensors_priv.h"
#include "sluice/safetensors.h"
#include "sluice/util.h"

static const char TRUNC_HINT[] =
    "the file was cut short (an interrupted copy?); checkpoints written by Sluice are "
    "replaced atomically, so an older checkpoint in the same folder should load";

/* ---- dtypes ------------------------------------------------------------------------- */

static const struct { const char *name; sl_dtype dt; } dtype_map[] = {
    {"F64", SL_DT_F64}, {"F32", SL_DT_F32}, {"F16", SL_DT_F16}, {"BF16", SL_DT_BF16},
    {"I64", SL_DT_I64}, {"I32", SL_DT_I32}, {"I16", SL_DT_I16}, {"I8", SL_DT_I8},
    {"U32", SL_DT_U32}, {"U16", SL_DT_U16}, {"U8", SL_DT_U8},   {"BOOL", SL_DT_BOOL},
};

/* dtypes of the format that have no sl_dtype */
static const char *const unsupported_dtypes[] = {
    "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64",
};

const char *sl_st_dtype_name(sl_dtype dt) {
    for (size_t i = 0; i < sizeof dtype_map / sizeof dtype_map[0]; i++)
        if (dtype_map[i].dt == dt) return dtype_map[i].name;
    return NULL;
}

/* ---- shared helpers ----------------------------------------------------------------- */

bool sl__st_shape_nbytes(sl_dtype dt, int rank, const int64_t *dims, uint64_t *out) {
    uint64_t n = sl_dtype_size(dt);
    for (int i = 0; i < rank; i++) {
        uint64_t d = (uint64_t)dims[i];
        if (d && n > (uint64_t)INT64_MAX / d) return false;
        n *= d;
    }
    *out = n;
    return true;
}

/* ---- checksums (the format is in sluice/safetensors.h) ------------------------------ */

static int cmp_kv(const void *a, const void *b) { return strcmp(((const kv *)a)->k, ((const kv *)b)->k); }
static int cmp_tdesc(const void *a, const void *b) {
    return strcmp(((const tdesc *)a)->name, ((const tdesc *)b)->name);
}

bool sl__st_is_crc_key(const char *k) {
    return strcmp(k, SL_ST_CRC_HEADER) == 0 || strncmp(k, SL_ST_CRC_PREFIX, strlen(SL_ST_CRC_PREFIX)) == 0;
}

uint32_t sl__st_header_crc(kv *m, int nm, tdesc *t, int nt) {
    qsort(m, (size_t)nm, sizeof *m, cmp_kv);
    qsort(t, (size_t)nt, sizeof *t, cmp_tdesc);
    uint32_t c = 0;
    for (int i = 0; i < nm; i++) {
        if (strcmp(m[i].k, SL_ST_CRC_HEADER) == 0) continue;
        c = sl_crc32c(c, "M", 1);
        c = sl_crc32c(c, m[i].k, strlen(m[i].k) + 1);
        c = sl_crc32c(c, m[i].v, strlen(m[i].v) + 1);
    }
    for (int i = 0; i < nt; i++) {
        char dims[SL_MAX_RANK * 21 + 1];
        size_t len = 0;
        dims[0] = 0;
        for (int d = 0; d < t[i].rank; d++)
            len += (size_t)snprintf(dims + len, sizeof dims - len, d ? ",%lld" : "%lld", (long long)t[i].dims[d]);
        const char *dn = sl_st_dtype_name(t[i].dt);
        c = sl_crc32c(c, "T", 1);
        c = sl_crc32c(c, t[i].name, strlen(t[i].name) + 1);
        c = sl_crc32c(c, dn, strlen(dn) + 1);
        c = sl_crc32c(c, dims, len + 1);
    }
    return c;
}

/* 8 lowercase hex digits exactly. */
static bool parse_crc(const char *v, uint32_t *out) {
    uint32_t x = 0;
    for (int i = 0; i < 8; i++) {
        char ch = v[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0) return false;
        x = x << 4 | (uint32_t)d;
    }
    if (v[8]) return false;
    *out = x;
    return true;
}

/* ---- reader: the header ------------------------------------------------------------ */

typedef struct entry {
    const char *name;        /* in the header's tree */
    sl_dtype dt;
    int rank;
    int64_t dims[SL_MAX_RANK];
    uint64_t begin, end;
    int64_t at;     /* file offset of the name */
    int64_t off_at; /* file offset of data_offsets' '[' */
} entry;

typedef struct meta {
    const char *key, *val;   /* in the header's tree */
    int64_t at;
} meta;

struct sl_st_file {
    char *path;
    sl_buf *buf;             /* owns the mapping (or wraps borrowed memory) */
    const uint8_t *base;
    uint64_t size;
    uint64_t data_start;     /* 8 + header length */
    sl_json *hdr;            /* the header's JSON: names, keys and values point into it */
    entry *e;
    int n;
    int *by_name;            /* entry indices sorted by name */
    meta *m;
    int nmeta;
};

/* The header's bytes, for messages: offsets in the tree count from the header's first byte,
 * the file's from 8 bytes before it. */
typedef struct hdr {
    const char *s;
    size_t n;
    const char *path;
} hdr;

#define HOFF(pos) ((int64_t)(pos) + 8)
#define HDR_MEM_FACTOR 16 /* a header's tree takes 4 to 10 times its text */

static sl_status herr(const hdr *h, size_t pos, sl_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static sl_status herr(const hdr *h, size_t pos, sl_status code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sl_err_at(code, h->path, HOFF(pos), "%s", msg);
}

/* "'x'" or "byte 0xNN": the first byte of value v */
static const char *show(const hdr *h, const sl_json *v, char *tmp, size_t cap) {
    return sl_json_show(h->s, h->n, v->offset, NULL, tmp, cap);
}

/* A non-negative integer without sign, fraction or exponent, at most INT64_MAX. */
static sl_status header_uint(const hdr *h, const sl_json *v, const char *what, uint64_t *out) {
    char tmp[16];
    if (v->kind != SL_JSON_NUMBER || h->s[v->offset] == '-')
        return herr(h, v->offset, SL_ECORRUPT, "%s: expected a non-negative integer, found %s", what,
                    show(h, v, tmp, sizeof tmp));
    if (!v->is_int) {
        const char *lit = h->s + v->offset;
        bool frac = memchr(lit, '.', v->len) || memchr(lit, 'e', v->len) || memchr(lit, 'E', v->len);
        return frac ? herr(h, v->offset, SL_ECORRUPT, "%s: expected a non-negative integer, found a fraction", what)
                    : herr(h, v->offset, SL_ECORRUPT, "%s: integer too large", what);
    }
    *out = (uint64_t)v->i;
    return SL_OK;
}

/* [u, u, ...] into vals (at most max; more is SL_EUNSUPPORTED when max is SL_MAX_RANK). */
static sl_status header_uints(const hdr *h, const sl_json *v, const char *what, uint64_t *vals, int max, int *count) {
    char tmp[16];
    if (v->kind != SL_JSON_ARRAY)
        return herr(h, v->offset, SL_ECORRUPT, "malformed header JSON: expected '[', found %s", show(h, v, tmp, sizeof tmp));
    *count = 0;
    for (size_t k = 0; k < v->len; k++) {
        uint64_t x = 0;
        sl_status s = header_uint(h, &v->items[k], what, &x);
        if (s) return s;
        if (*count == max)
            return herr(h, v->offset, max == SL_MAX_RANK ? SL_EUNSUPPORTED : SL_ECORRUPT, "%s has more than %d entries",
                        what, max);
        vals[(*count)++] = x;
    }
    return SL_OK;
}

static sl_status header_meta(const hdr *h, const sl_json *v, sl_st_file *f) {
    char tmp[16];
    if (v->kind != SL_JSON_OBJECT)
        return herr(h, v->offset, SL_ECORRUPT, "malformed header JSON: expected '{' (metadata is an object of strings), found %s",
                    show(h, v, tmp, sizeof tmp));
    if (v->len && !(f->m = malloc(v->len * sizeof *f->m)))
        return sl_err(SL_ENOMEM, "%s: out of memory reading the header", h->path);
    for (size_t k = 0; k < v->len; k++) {
        if (v->items[k].kind != SL_JSON_STRING)
            return herr(h, v->items[k].offset, SL_ECORRUPT, "metadata \"%s\": the value must be a string", v->keys[k]);
        f->m[f->nmeta++] = (meta){v->keys[k], v->items[k].str, HOFF(sl_json_key_offset(v, k))};
    }
    return SL_OK;
}

static sl_status header_dtype(const hdr *h, const sl_json *v, const char *name, sl_dtype *dt) {
    char tmp[16];
    if (v->kind != SL_JSON_STRING)
        return herr(h, v->offset, SL_ECORRUPT, "malformed header JSON: expected a dtype (a string), found %s",
                    show(h, v, tmp, sizeof tmp));
    *dt = SL_DT_INVALID;
    for (size_t i = 0; i < sizeof dtype_map / sizeof dtype_map[0]; i++)
        if (strcmp(v->str, dtype_map[i].name) == 0) *dt = dtype_map[i].dt;
    if (*dt != SL_DT_INVALID) return SL_OK;
    for (size_t i = 0; i < sizeof unsupported_dtypes / sizeof unsupported_dtypes[0]; i++)
        if (strcmp(v->str, unsupported_dtypes[i]) == 0)
            return herr(h, v->offset, SL_EUNSUPPORTED, "tensor \"%s\": dtype %s is not supported", name, v->str);
    return herr(h, v->offset, SL_ECORRUPT, "tensor \"%s\": unknown dtype \"%.40s\"", name, v->str);
}

/* {"dtype": ..., "shape": [...], "data_offsets": [b, e]} in any order, each once. */
static sl_status header_entry(const hdr *h, const sl_json *v, entry *e) {
    char tmp[16];
    if (v->kind != SL_JSON_OBJECT)
        return herr(h, v->offset, SL_ECORRUPT, "malformed header JSON: expected '{' (a tensor entry), found %s",
                    show(h, v, tmp, sizeof tmp));
    static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
    bool have[3] = {false, false, false};
    for (size_t k = 0; k < v->len; k++) {
        const char *key = v->keys[k];
        const sl_json *x = &v->items[k];
        size_t at = sl_json_key_offset(v, k);
        int which = -1;
        for (int i = 0; i < 3; i++)
            if (strcmp(key, fields[i]) == 0) which = i;
        if (which < 0) return herr(h, at, SL_ECORRUPT, "tensor \"%s\": unknown field \"%.40s\"", e->name, key);
        if (have[which]) return herr(h, at, SL_ECORRUPT, "tensor \"%s\": field \"%s\" given twice", e->name, key);
        have[which] = true;
        sl_status s;
        if (which == 0) {
            s = header_dtype(h, x, e->name, &e->dt);
        } else if (which == 1) {
            uint64_t d[SL_MAX_RANK];
            s = header_uints(h, x, "shape", d, SL_MAX_RANK, &e->rank);
            for (int i = 0; !s && i < e->rank; i++) e->dims[i] = (int64_t)d[i];
        } else {
            uint64_t o[2];
            int cnt;
            s = header_uints(h, x, "data_offsets", o, 2, &cnt);
            if (!s && cnt != 2)
                s = herr(h, x->offset, SL_ECORRUPT, "tensor \"%s\": data_offsets must be [begin, end], found %d numbers",
                         e->name, cnt);
            e->begin = o[0];
            e->end = o[1];
            e->off_at = HOFF(x->offset);
        }
        if (s) return s;
    }
    for (int i = 0; i < 3; i++)
        if (!have[i]) return herr(h, v->offset, SL_ECORRUPT, "tensor \"%s\" has no \"%s\"", e->name, fields[i]);
    return SL_OK;
}

/* The header's JSON (core's reader, which keeps repeated keys for the checks here and in
 * validate), then each member as the format wants it, in the header's order. */
static sl_status parse_header(const hdr *h, sl_st_file *f) {
    if (h->n == 0 || h->s[0] != '{')
        return herr(h, 0, SL_ECORRUPT, "the header is not a JSON object (it must start with '{')");
    size_t end = 0;
    char limit[48];
    snprintf(limit, sizeof limit, "%d times the header's size", HDR_MEM_FACTOR);
    sl_json_opts jo = {
        .what = h->path, .prefix = "malformed header JSON: ", .base = 8, .end_name = "the end of the header",
        .max_bytes = h->n * HDR_MEM_FACTOR + (1u << 20), .max_bytes_text = limit,
        .max_bytes_hint = "a tensor's entry takes a few hundred bytes; this header is built to exhaust memory, or damaged",
        .flags = SL_JSON_KEEP_DUPLICATES, .end = &end};
    sl_status s = sl_json_parse_opts(h->s, h->n, &jo, &f->hdr);
    if (s) return s;
    const sl_json *root = f->hdr;
    if (!(f->e = calloc(root->len ? root->len : 1, sizeof *f->e)))
        return sl_err(SL_ENOMEM, "%s: out of memory reading the header", h->path);
    bool have_meta = false;
    for (size_t k = 0; k < root->len; k++) {
        size_t at = sl_json_key_offset(root, k);
        if (strcmp(root->keys[k], "__metadata__") == 0) {
            if (have_meta) return herr(h, at, SL_ECORRUPT, "\"__metadata__\" given twice");
            have_meta = true;
            s = header_meta(h, &root->items[k], f);
        } else {
            entry *e = &f->e[f->n++];
            e->name = root->keys[k];
            e->at = HOFF(at);
            s = header_entry(h, &root->items[k], e);
        }
        if (s) return s;
    }
    while (end < h->n && (h->s[end] == ' ' || h->s[end] == '\t' || h->s[end] == '\n' || h->s[end] == '\r')) end++;
    if (end < h->n)
        return herr(h, end, SL_ECORRUPT, "unexpected bytes after the header's JSON object (only space padding may follow)");
    return SL_OK;
}

/* ---- reader: validation ------------------------------------------------------------- */

static int cmp_name(const void *a, const void *b, void *ctx) {
    const sl_st_file *f = ctx;
    const entry *x = &f->e[*(const int *)a], *y = &f->e[*(const int *)b];
    int c = strcmp(x->name, y->name);
    return c ? c : (x->at > y->at) - (x->at < y->at);
}

static int cmp_offsets(const void *a, const void *b, void *ctx) {
    const sl_st_file *f = ctx;
    const entry *x = &f->e[*(const int *)a], *y = &f->e[*(const int *)b];
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return (x->at > y->at) - (x->at < y->at);
}

static int cmp_meta(const void *a, const void *b) {
    const meta *x = *(meta *const *)a, *y = *(meta *const *)b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->at > y->at) - (x->at < y->at);
}

static void sort_entries(sl_st_file *f, int *idx,
                         int (*cmp)(const void *, const void *, void *)) {
    qsort_r(idx, (size_t)f->n, sizeof *idx, cmp, f);
}

static sl_status validate(sl_st_file *f) {
    const char *path = f->path;
    uint64_t data_len = f->size - f->data_start;
    sl_status s = SL_OK;
    for (int i = 0; i < f->n; i++) {
        entry *e = &f->e[i];
        uint64_t nb;
        if (!sl__st_shape_nbytes(e->dt, e->rank, e->dims, &nb))
            return sl_err_at(SL_ECORRUPT, path, e->at, "tensor \"%s\": shape is too large", e->name);
        if (e->end < e->begin)
            return sl_err_at(SL_ECORRUPT, path, e->off_at,
                             "tensor \"%s\": data_offsets [%llu, %llu] end before they begin",
                             e->name, (unsigned long long)e->begin, (unsigned long long)e->end);
        if (e->end - e->begin != nb) {
            char shape[256] = "";
            size_t k = 0;
            for (int d = 0; d < e->rank && k < sizeof shape - 24; d++)
                k += (size_t)snprintf(shape + k, sizeof shape - k, d ? ", %lld" : "%lld",
                                      (long long)e->dims[d]);
            return sl_err_at(SL_ECORRUPT, path, e->off_at,
                             "tensor \"%s\": data_offsets [%llu, %llu] hold %llu bytes but shape "
                             "[%s] of %s needs %llu",
                             e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                             (unsigned long long)(e->end - e->begin), shape,
                             sl_st_dtype_name(e->dt), (unsigned long long)nb);
        }
        if (e->end > data_len) {
            s = sl_err_at(SL_ECORRUPT, path, e->off_at,
                          "tensor \"%s\": data_offsets [%llu, %llu] run past the end of the "
                          "data (%llu bytes)",
                          e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                          (unsigned long long)data_len);
            sl_err_hint("%s", TRUNC_HINT);
            return s;
        }
    }
    int *ord = malloc((size_t)(f->n ? f->n : 1) * sizeof *ord);
    f->by_name = malloc((size_t)(f->n ? f->n : 1) * sizeof *f->by_name);
    if (!ord || !f->by_name) {
        free(ord);
        return sl_err(SL_ENOMEM, "%s: out of memory reading the header", path);
    }
    for (int i = 0; i < f->n; i++) ord[i] = f->by_name[i] = i;
    sort_entries(f, f->by_name, cmp_name);
    for (int i = 1; i < f->n; i++) {
        const entry *a = &f->e[f->by_name[i - 1]], *b = &f->e[f->by_name[i]];
        if (strcmp(a->name, b->name) == 0) {
            s = sl_err_at(SL_ECORRUPT, path, b->at, "duplicate tensor name \"%s\"", b->name);
            goto out;
        }
    }
    sort_entries(f, ord, cmp_offsets);
    uint64_t pos = 0;
    const entry *prev = NULL;
    for (int i = 0; i < f->n; i++) {
        const entry *e = &f->e[ord[i]];
        if (e->begin < pos) {
            s = sl_err_at(SL_ECORRUPT, path, e->off_at,
                          "tensor \"%s\": data_offsets [%llu, %llu] overlap tensor \"%s\" [%llu, %llu]",
                          e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                          prev->name, (unsigned long long)prev->begin, (unsigned long long)prev->end);
            goto out;
        }
        if (e->begin > pos) {
            s = sl_err_at(SL_ECORRUPT, path, e->off_at,
                          "tensor \"%s\" begins at data byte %llu but the tensors before it end "
                          "at %llu: the data must be contiguous",
                          e->name, (unsigned long long)e->begin, (unsigned long long)pos);
            goto out;
        }
        if (e->end > pos) {
            pos = e->end;
            prev = e;
        } else if (!prev) {
            prev = e;
        }
    }
    if (pos != data_len) {
        s = sl_err_at(SL_ECORRUPT, path, (int64_t)(f->data_start + pos),
                      "%llu bytes after the last tensor's data: the tensors cover %llu of %llu "
                      "data bytes",
                      (unsigned long long)(data_len - pos), (unsigned long long)pos,
                      (unsigned long long)data_len);
        goto out;
    }
    if (f->nmeta > 1) {
        meta **mp = malloc((size_t)f->nmeta * sizeof *mp);
        if (!mp) {
            s = sl_err(SL_ENOMEM, "%s: out of memory reading the header", path);
            goto out;
        }
        for (int i = 0; i < f->nmeta; i++) mp[i] = &f->m[i];
        qsort(mp, (size_t)f->nmeta, sizeof *mp, cmp_meta);
        for (int i = 1; i < f->nmeta && !s; i++)
            if (strcmp(mp[i - 1]->key, mp[i]->key) == 0)
                s = sl_err_at(SL_ECORRUPT, path, mp[i]->at, "duplicate metadata key \"%s\"",
                              mp[i]->key);
        free(mp);
    }
out:
    free(ord);
    return s;
}

/* ---- reader: open, lookup, close ---------------------------------------------------- */

static sl_status verify_checksums(const sl_st_file *f, bool *present);

void sl_st_close(sl_st_file *f) {
    if (!f) return;
    free(f->e);
    free(f->m);
    free(f->by_name);
    sl_json_free(f->hdr);
    sl_buf_unref(f->buf);
    free(f->path);
    free(f);
}

/* Parse and validate over f->buf; frees f on failure. */
static sl_status open_buf(sl_st_file *f, sl_st_file **out) {
    sl_status s;
    const char *path = f->path;
    if (f->size < 8) {
        s = sl_err_at(SL_ECORRUPT, path, 0,
                      "file is %llu bytes, too short for the 8-byte header length",
                      (unsigned long long)f->size);
        sl_err_hint("%s", TRUNC_HINT);
        goto fail;
    }
    uint64_t hlen = sl_load_le64(f->base);
    if (hlen > f->size - 8) {
        s = sl_err_at(SL_ECORRUPT, path, 0,
                      "header length %llu runs past the end of the file (%llu bytes)",
                      (unsigned long long)hlen, (unsigned long long)f->size);
        sl_err_hint("%s", hlen > SL_ST_MAX_HEADER ? "this does not look like a safetensors file"
                                                  : TRUNC_HINT);
        goto fail;
    }
    if (hlen > SL_ST_MAX_HEADER) {
        s = sl_err_at(SL_ECORRUPT, path, 0, "header length %llu is over the limit of %llu bytes",
                      (unsigned long long)hlen, (unsigned long long)SL_ST_MAX_HEADER);
        goto fail;
    }
    f->data_start = 8 + hlen;
    hdr h = {.s = (const char *)f->base + 8, .n = (size_t)hlen, .path = path};
    if ((s = parse_header(&h, f))) goto fail;
    if ((s = validate(f))) goto fail;
    *out = f;
    return SL_OK;
fail:
    sl_st_close(f);
    return s;
}

sl_status sl_st_open_mem(const void *data, size_t size, const char *name, sl_st_file **out) {
    *out = NULL;
    sl_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(name ? name : "<memory>"))) {
        free(f);
        return sl_err(SL_ENOMEM, "out of memory opening a safetensors file");
    }
    /* sl_buf wants a non-NULL pointer to view into, even for an empty input */
    static const uint8_t empty[1];
    f->buf = sl_buf_wrap((void *)(data ? data : empty), size, NULL, NULL);
    if (!f->buf) {
        sl_st_close(f);
        return sl_err(SL_ENOMEM, "out of memory opening a safetensors file");
    }
    f->base = f->buf->data;
    f->size = size;
    return open_buf(f, out);
}

sl_status sl_st_open(const char *path, sl_st_file **out) {
    *out = NULL;
    sl_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return sl_err(SL_ENOMEM, "%s: out of memory opening a safetensors file", path);
    }
    /* a FIFO, socket, device or folder named like a checkpoint is refused at once: open()
     * would block on a FIFO and mmap() fails on the rest with an unhelpful reason */
    int fd;
    uint64_t fsize;
    sl_status s = sl_file_open_read(path, "safetensors file", &fd, &fsize);
    if (s) {
        if (s == SL_EINVAL) { /* not a regular file: the header promises SL_EIO */
            sl_error e;
            sl_err_save(&e);
            e.code = SL_EIO;
            s = sl_err_restore(&e);
        }
        sl_st_close(f);
        return s;
    }
    f->size = fsize;
    void *map = NULL;
    if (f->size > 0) {
        map = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            s = sl_err(SL_EIO, "%s: cannot map %llu bytes: %s", path,
                       (unsigned long long)f->size, strerror(errno));
            close(fd);
            sl_st_close(f);
            return s;
        }
    }
    static const uint8_t empty[1];
    /* guarded: a file that shrinks under the mapping reads as zeros instead of raising
     * SIGBUS, and sl_st_intact reports it; the mapping keeps a duplicate of fd, so a lost
     * range is told from the file's size (sl_buf_lost), the partial last page included */
    f->buf = map ? sl_buf_wrap_file_mapping(map, (size_t)f->size, PROT_READ, fd)
                 : sl_buf_wrap((void *)empty, 0, NULL, NULL);
    close(fd);
    if (!f->buf) {
        if (map) munmap(map, (size_t)f->size);
        sl_st_close(f);
        return sl_err(SL_ENOMEM, "%s: out of memory opening a safetensors file", path);
    }
    f->base = f->buf->data;
    return open_buf(f, out);
}

int sl_st_count(const sl_st_file *f) { return f->n; }

const char *sl_st_name(const sl_st_file *f, int i) {
    return i >= 0 && i < f->n ? f->e[i].name : NULL;
}

sl_status sl_st_get(const sl_st_file *f, const char *name, sl_tensor *out) {
    *out = SL_TENSOR_EMPTY;
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const entry *e = &f->e[f->by_name[mid]];
        int c = strcmp(name, e->name);
        if (c < 0) {
            hi = mid - 1;
        } else if (c > 0) {
            lo = mid + 1;
        } else {
            const uint8_t *p = f->base + f->data_start + e->begin;
            size_t nb = (size_t)(e->end - e->begin);
            size_t esz = sl_dtype_size(e->dt);
            if ((uintptr_t)p % esz == 0)
                return sl_tensor_view(out, f->buf, p, nb, e->dt, e->rank, e->dims);
            sl_status s = sl_tensor_alloc(out, e->dt, e->rank, e->dims);
            if (s) return s;
            memcpy(out->data, p, nb);
            return SL_OK;
        }
    }
    return sl_err(SL_ENOTFOUND, "%s: no tensor named \"%s\"", f->path, name);
}

/* ---- checksums ---------------------------------------------------------------------- */

static int cmp_meta_key(const void *a, const void *b) {
    return strcmp(((const meta *)a)->key, ((const meta *)b)->key);
}

sl_status sl_st_intact(const sl_st_file *f) {
    if (!sl_buf_damaged(f->buf)) return SL_OK;
    struct stat st;
    if (stat(f->path, &st) == 0)
        sl_err(SL_EIO, "%s: shrank from %llu to %llu bytes while being read", f->path,
               (unsigned long long)f->size, (unsigned long long)st.st_size);
    else
        sl_err(SL_EIO, "%s: shrank from %llu bytes while being read (now: %s)", f->path,
               (unsigned long long)f->size, strerror(errno));
    sl_err_hint("another process truncated or rewrote the file in place; write a new file and rename it over the old one instead");
    return SL_EIO;
}

sl_status sl_st_verify(const sl_st_file *f, bool *present) {
    sl_status s = verify_checksums(f, present);
    sl_status si = sl_st_intact(f); /* a shrink explains any mismatch: say that instead */
    return si ? si : s;
}

static sl_status verify_checksums(const sl_st_file *f, bool *present) {
    if (present) *present = false;
    const meta *hm = NULL;
    int ncrc = 0;
    for (int i = 0; i < f->nmeta; i++) {
        if (strcmp(f->m[i].key, SL_ST_CRC_HEADER) == 0) hm = &f->m[i];
        else if (sl__st_is_crc_key(f->m[i].key)) ncrc++;
    }
    if (!hm && ncrc == 0) return SL_OK;
    if (present) *present = true;
    if (!hm)
        return sl_err_at(SL_ECORRUPT, f->path, -1,
                         "the metadata holds tensor checksums (\"%s...\") but no header checksum \"%s\"",
                         SL_ST_CRC_PREFIX, SL_ST_CRC_HEADER);
    uint32_t want;
    if (!parse_crc(hm->val, &want))
        return sl_err_at(SL_ECORRUPT, f->path, hm->at, "metadata \"%s\" is \"%s\", not 8 lowercase hex digits",
                         hm->key, hm->val);
    sl_status s = SL_OK;
    kv *m = malloc((size_t)(f->nmeta ? f->nmeta : 1) * sizeof *m);
    tdesc *t = malloc((size_t)(f->n ? f->n : 1) * sizeof *t);
    meta *byk = malloc((size_t)(f->nmeta ? f->nmeta : 1) * sizeof *byk);
    if (!m || !t || !byk) {
        s = sl_err(SL_ENOMEM, "%s: out of memory verifying checksums", f->path);
        goto done;
    }
    for (int i = 0; i < f->nmeta; i++) m[i] = (kv){f->m[i].key, f->m[i].val};
    for (int i = 0; i < f->n; i++) t[i] = (tdesc){f->e[i].name, f->e[i].dt, f->e[i].rank, f->e[i].dims};
    uint32_t got = sl__st_header_crc(m, f->nmeta, t, f->n);
    if (got != want) {
        s = sl_err_at(SL_ECORRUPT, f->path, hm->at,
                      "the header does not match its checksum (CRC32C %08x, recorded %08x): its metadata or "
                      "tensor entries changed after it was written",
                      (unsigned)got, (unsigned)want);
        goto done;
    }
    memcpy(byk, f->m, (size_t)f->nmeta * sizeof *byk);
    qsort(byk, (size_t)f->nmeta, sizeof *byk, cmp_meta_key);
    size_t lp = strlen(SL_ST_CRC_PREFIX);
    int matched = 0;
    for (int i = 0; i < f->n && !s; i++) {
        const entry *e = &f->e[i];
        char *key = malloc(lp + strlen(e->name) + 1);
        if (!key) {
            s = sl_err(SL_ENOMEM, "%s: out of memory verifying checksums", f->path);
            break;
        }
        sprintf(key, "%s%s", SL_ST_CRC_PREFIX, e->name);
        meta probe = {.key = key};
        const meta *cm = bsearch(&probe, byk, (size_t)f->nmeta, sizeof *byk, cmp_meta_key);
        free(key);
        int64_t off = (int64_t)(f->data_start + e->begin);
        uint32_t rec;
        if (!cm) {
            s = sl_err_at(SL_ECORRUPT, f->path, e->at, "tensor \"%s\" has no checksum (\"%s%s\") in the metadata",
                          e->name, SL_ST_CRC_PREFIX, e->name);
        } else if (!parse_crc(cm->val, &rec)) {
            s = sl_err_at(SL_ECORRUPT, f->path, cm->at, "metadata \"%s\" is \"%s\", not 8 lowercase hex digits",
                          cm->key, cm->val);
        } else {
            matched++;
            uint32_t c = sl_crc32c(0, f->base + f->data_start + e->begin, (size_t)(e->end - e->begin));
            if (c != rec)
                s = sl_err_at(SL_ECORRUPT, f->path, off,
                              "tensor \"%s\" (%llu bytes from here) does not match its checksum (CRC32C %08x, "
                              "recorded %08x): its data changed after it was written",
                              e->name, (unsigned long long)(e->end - e->begin), (unsigned)c, (unsigned)rec);
        }
    }
    if (!s && matched != ncrc) {
        /* a checksum of a tensor the file does not hold */
        for (int i = 0; i < f->nmeta; i++) {
            const meta *x = &f->m[i];
            if (strncmp(x->key, SL_ST_CRC_PREFIX, lp) != 0) continue;
            bool found = false;
            for (int k = 0; k < f->n && !found; k++) found = strcmp(f->e[k].name, x->key + lp) == 0;
            if (!found) {
                s = sl_err_at(SL_ECORRUPT, f->path, x->at, "metadata \"%s\": the file has no tensor \"%s\"", x->key,
                              x->key + lp);
                break;
            }
        }
    }
done:
    free(m);
    free(t);
    free(byk);
    return s;
}

const char *sl_st_meta(const sl_st_file *f, const char *key) {
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->m[i].key, key) == 0) return f->m[i].val;
    return NULL;
}

int sl_st_meta_count(const sl_st_file *f) { return f->nmeta; }

const char *sl_st_meta_key(const sl_st_file *f, int i) {
    return i >= 0 && i < f->nmeta ? f->m[i].key : NULL;
}

const char *sl_st_meta_value(const sl_st_file *f, int i) {
    return i >= 0 && i < f->nmeta ? f->m[i].val : NULL;
}
