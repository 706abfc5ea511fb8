/* JSON for every module: a small, strict reader (RFC 8259, no extensions) for TF_CONFIG and
 * the other documents handed to us, and the string escaping every JSON writer uses. Errors
 * name the byte offset so a user can find the typo in a one-line environment variable.
 *
 * Workload: documents of a few hundred bytes, parsed once per process; the whole tree lives
 * in one arena block list freed at once. Untrusted input (it comes from the environment):
 * nesting depth is bounded and every read is bounds-checked. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/json.h"

#define MAX_DEPTH 64

typedef struct block {
    struct block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} block;

typedef struct root_hdr { /* the root sl_json is the first thing in the first block */
    sl_json v;
    block *blocks;
} root_hdr;

typedef struct parser {
    const char *s;
    size_t len, pos;
    const char *what;
    block *blocks;
    sl_status st;
} parser;

static void *arena(parser *p, size_t n) {
    n = (n + 15) & ~(size_t)15;
    block *b = p->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 4096 ? n : 4096;
        block *nb = malloc(sizeof *nb + cap);
        if (!nb) return NULL;
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        p->blocks = b = nb;
    }
    void *r = b->data + b->used;
    b->used += n;
    return r;
}

static int perr(parser *p, size_t at, const char *fmt, const char *arg) {
    char msg[200];
    snprintf(msg, sizeof msg, fmt, arg);
    p->st = sl_err_at(SL_ECORRUPT, p->what, (int64_t)at, "%s", msg);
    return -1;
}

static int nomem(parser *p) {
    p->st = sl_err(SL_ENOMEM, "%s: out of memory", p->what);
    return -1;
}

static void skip_ws(parser *p) {
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
                               p->s[p->pos] == '\r'))
        p->pos++;
}

static const char *describe(parser *p) {
    static _Thread_local char buf[24];
    if (p->pos >= p->len) return "the end of the input";
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c >= 32 && c < 127) snprintf(buf, sizeof buf, "'%c'", c);
    else snprintf(buf, sizeof buf, "byte 0x%02x", c);
    return buf;
}

static int hex4(parser *p, size_t at, unsigned *out) {
    if (p->len - at < 4) return perr(p, at, "truncated \\u escape%s", "");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[at + (size_t)i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return perr(p, at + (size_t)i, "bad hex digit in \\u escape%s", "");
    }
    *out = v;
    return 0;
}

/* Length of a valid UTF-8 sequence at s[0..n) (its code point in *cp), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n, unsigned *cp) {
    unsigned c = s[0];
    size_t k;
    unsigned min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) { k = 2; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { k = 3; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { k = 4; min = 0x10000; }
    else return 0;
    if (n < k) return 0;
    unsigned v = c & (0xff >> (k + 1));
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return k;
}

static int parse_string(parser *p, const char **out, size_t *outlen) {
    size_t start = p->pos++; /* the opening quote */
    size_t cap = 16, n = 0;
    /* the decoded string is never longer than the source */
    size_t end = start + 1;
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    cap = end - start + 1;
    char *buf = arena(p, cap);
    if (!buf) return nomem(p);
    for (;;) {
        if (p->pos >= p->len) return perr(p, start, "unterminated string%s", "");
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') { p->pos++; break; }
        if (c < 0x20) return perr(p, p->pos, "control character in a string (escape it)%s", "");
        if (c == '\\') {
            if (p->pos + 1 >= p->len) return perr(p, p->pos, "unterminated string%s", "");
            char e = p->s[p->pos + 1];
            const char *map = "\"\"\\\\//b\bf\fn\nr\rt\t";
            const char *m = NULL;
            for (int i = 0; map[i]; i += 2)
                if (map[i] == e) { m = map + i + 1; break; }
            if (m) { buf[n++] = *m; p->pos += 2; continue; }
            if (e != 'u') {
                char what[8];
                if (e > 32 && e < 127) snprintf(what, sizeof what, "\\%c", e);
                else snprintf(what, sizeof what, "0x%02x", (unsigned char)e);
                return perr(p, p->pos, "bad escape %s", what);
            }
            unsigned u;
            if (hex4(p, p->pos + 2, &u)) return -1;
            size_t at = p->pos;
            p->pos += 6;
            if (u >= 0xd800 && u <= 0xdbff) {
                unsigned lo;
                if (p->len - p->pos < 6 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
                    return perr(p, at, "high surrogate without a low surrogate%s", "");
                if (hex4(p, p->pos + 2, &lo)) return -1;
                if (lo < 0xdc00 || lo > 0xdfff) return perr(p, p->pos, "bad low surrogate%s", "");
                p->pos += 6;
                u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
            } else if (u >= 0xdc00 && u <= 0xdfff) {
                return perr(p, at, "lone low surrogate%s", "");
            } else if (u == 0) {
                return perr(p, at, "\\u0000 is not allowed here%s", "");
            }
            if (u < 0x80) buf[n++] = (char)u;
            else if (u < 0x800) { buf[n++] = (char)(0xc0 | (u >> 6)); buf[n++] = (char)(0x80 | (u & 0x3f)); }
            else if (u < 0x10000) {
                buf[n++] = (char)(0xe0 | (u >> 12));
                buf[n++] = (char)(0x80 | ((u >> 6) & 0x3f));
                buf[n++] = (char)(0x80 | (u & 0x3f));
            } else {
                buf[n++] = (char)(0xf0 | (u >> 18));
                buf[n++] = (char)(0x80 | ((u >> 12) & 0x3f));
                buf[n++] = (char)(0x80 | ((u >> 6) & 0x3f));
                buf[n++] = (char)(0x80 | (u & 0x3f));
            }
            continue;
        }
        unsigned cp;
        size_t k = utf8_seq((const unsigned char *)p->s + p->pos, p->len - p->pos, &cp);
        if (!k) return perr(p, p->pos, "invalid UTF-8 in a string%s", "");
        memcpy(buf + n, p->s + p->pos, k);
        n += k;
        p->pos += k;
    }
    buf[n] = 0;
    (void)cap;
    *out = buf;
    *outlen = n;
    return 0;
}

static int parse_number(parser *p, sl_json *v) {
    size_t start = p->pos, i = p->pos;
    const char *s = p->s;
    if (i < p->len && s[i] == '-') i++;
    if (i >= p->len || !(s[i] >= '0' && s[i] <= '9')) return perr(p, i, "a digit expected in a number%s", "");
    if (s[i] == '0') i++;
    else while (i < p->len && s[i] >= '0' && s[i] <= '9') i++;
    if (i < p->len && s[i] == '.') {
        i++;
        if (i >= p->len || !(s[i] >= '0' && s[i] <= '9')) return perr(p, i, "a digit expected after '.'%s", "");
        while (i < p->len && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < p->len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < p->len && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= p->len || !(s[i] >= '0' && s[i] <= '9')) return perr(p, i, "a digit expected in the exponent%s", "");
        while (i < p->len && s[i] >= '0' && s[i] <= '9') i++;
    }
    char tmp[64];
    if (i - start >= sizeof tmp) return perr(p, start, "number too long%s", "");
    memcpy(tmp, s + start, i - start);
    tmp[i - start] = 0;
    v->num = strtod(tmp, NULL);
    if (!isfinite(v->num)) return perr(p, start, "number out of range%s", "");
    v->kind = SL_JSON_NUMBER;
    p->pos = i;
    return 0;
}

static int parse_value(parser *p, sl_json *v, int depth);

/* Items are collected in a temporary growing array, then copied into the arena. */
static int parse_container(parser *p, sl_json *v, int depth, int is_obj) {
    size_t start = p->pos++;
    if (depth >= MAX_DEPTH) return perr(p, start, "nesting deeper than 64 levels%s", "");
    size_t n = 0, cap = 0;
    sl_json *items = NULL;
    const char **keys = NULL;
    int rc = -1;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == (is_obj ? '}' : ']')) { p->pos++; goto done; }
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            sl_json *ni = realloc(items, cap * sizeof *ni);
            if (!ni) { nomem(p); goto out; }
            items = ni;
            if (is_obj) {
                const char **nk = realloc(keys, cap * sizeof *nk);
                if (!nk) { nomem(p); goto out; }
                keys = nk;
            }
        }
        skip_ws(p);
        if (is_obj) {
            if (p->pos >= p->len || p->s[p->pos] != '"') { perr(p, p->pos, "expected a \"key\", found %s", describe(p)); goto out; }
            size_t kat = p->pos, kl;
            if (parse_string(p, &keys[n], &kl)) goto out;
            for (size_t j = 0; j < n; j++)
                if (strcmp(keys[j], keys[n]) == 0) { perr(p, kat, "duplicate key \"%s\"", keys[n]); goto out; }
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') { perr(p, p->pos, "expected ':' after a key, found %s", describe(p)); goto out; }
            p->pos++;
        }
        if (parse_value(p, &items[n], depth + 1)) goto out;
        n++;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') { p->pos++; continue; }
        if (p->pos < p->len && p->s[p->pos] == (is_obj ? '}' : ']')) { p->pos++; break; }
        perr(p, p->pos, is_obj ? "expected ',' or '}', found %s" : "expected ',' or ']', found %s", describe(p));
        goto out;
    }
done:
    v->kind = is_obj ? SL_JSON_OBJECT : SL_JSON_ARRAY;
    v->len = n;
    v->items = NULL;
    v->keys = NULL;
    if (n) {
        if (!(v->items = arena(p, n * sizeof *items))) { nomem(p); goto out; }
        memcpy(v->items, items, n * sizeof *items);
        if (is_obj) {
            if (!(v->keys = arena(p, n * sizeof *keys))) { nomem(p); goto out; }
            memcpy(v->keys, keys, n * sizeof *keys);
        }
    }
    rc = 0;
out:
    free(items);
    free(keys);
    return rc;
}

static int parse_value(parser *p, sl_json *v, int depth) {
    skip_ws(p);
    memset(v, 0, sizeof *v);
    v->offset = p->pos;
    if (p->pos >= p->len) return perr(p, p->pos, "expected a value, found the end of the input%s", "");
    char c = p->s[p->pos];
    if (c == '{' || c == '[') return parse_container(p, v, depth, c == '{');
    if (c == '"') { v->kind = SL_JSON_STRING; return parse_string(p, &v->str, &v->len); }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
    static const struct { const char *w; sl_json_kind k; int b; } lits[] = {
        {"true", SL_JSON_BOOL, 1}, {"false", SL_JSON_BOOL, 0}, {"null", SL_JSON_NULL, 0}};
    for (int i = 0; i < 3; i++) {
        size_t wl = strlen(lits[i].w);
        if (p->len - p->pos >= wl && memcmp(p->s + p->pos, lits[i].w, wl) == 0) {
            v->kind = lits[i].k;
            v->b = lits[i].b;
            p->pos += wl;
            return 0;
        }
    }
    return perr(p, p->pos, "expected a value, found %s", describe(p));
}

sl_status sl_json_parse(const char *text, size_t len, const char *what, sl_json **out) {
    *out = NULL;
    parser p = {.s = text, .len = len, .what = what ? what : "JSON", .st = SL_OK};
    root_hdr *root = arena(&p, sizeof *root);
    if (!root) return sl_err(SL_ENOMEM, "%s: out of memory", p.what);
    if (parse_value(&p, &root->v, 0) == 0) {
        skip_ws(&p);
        if (p.pos != p.len) perr(&p, p.pos, "unexpected %s after the value", describe(&p));
    }
    if (p.st) {
        for (block *b = p.blocks; b;) { block *nx = b->next; free(b); b = nx; }
        return p.st;
    }
    root->blocks = p.blocks;
    *out = &root->v;
    return SL_OK;
}

void sl_json_free(sl_json *rootv) {
    if (!rootv) return;
    root_hdr *root = (root_hdr *)rootv;
    for (block *b = root->blocks; b;) { block *nx = b->next; free(b); b = nx; }
}

const sl_json *sl_json_get(const sl_json *o, const char *key) {
    if (!o || o->kind != SL_JSON_OBJECT) return NULL;
    for (size_t i = 0; i < o->len; i++)
        if (strcmp(o->keys[i], key) == 0) return &o->items[i];
    return NULL;
}

/* ---- writing ---- */

static void put_str_ascii(sl_json_put_fn put, void *ctx, const unsigned char *s, size_t n) {
    char esc[16];
    for (size_t i = 0; i < n;) {
        unsigned cp;
        size_t k = utf8_seq(s + i, n - i, &cp);
        if (!k) {
            cp = 0xfffd;
            k = 1;
        }
        i += k;
        const char *sh = NULL;
        switch (cp) {
        case '"': sh = "\\\""; break;
        case '\\': sh = "\\\\"; break;
        case '\n': sh = "\\n"; break;
        case '\r': sh = "\\r"; break;
        case '\t': sh = "\\t"; break;
        case '\b': sh = "\\b"; break;
        case '\f': sh = "\\f"; break;
        default: break;
        }
        if (sh) {
            put(ctx, sh, 2);
        } else if (cp >= 0x20 && cp < 0x7f) {
            esc[0] = (char)cp;
            put(ctx, esc, 1);
        } else if (cp < 0x10000) {
            put(ctx, esc, (size_t)snprintf(esc, sizeof esc, "\\u%04x", cp));
        } else {
            unsigned v = cp - 0x10000;
            put(ctx, esc, (size_t)snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff)));
        }
    }
}

void sl_json_put_str(sl_json_put_fn put, void *ctx, const void *sv, size_t n, unsigned flags) {
    const unsigned char *s = sv;
    put(ctx, "\"", 1);
    if (flags & SL_JSON_ASCII) {
        put_str_ascii(put, ctx, s, n);
    } else {
        size_t run = 0; /* bytes passed through, not yet handed to put */
        char esc[8];
        for (size_t i = 0; i < n; i++) {
            unsigned char c = s[i];
            if (c != '"' && c != '\\' && c >= 0x20) {
                run++;
                continue;
            }
            if (run) put(ctx, (const char *)s + i - run, run);
            run = 0;
            if (c < 0x20) {
                put(ctx, esc, (size_t)snprintf(esc, sizeof esc, "\\u%04x", c));
            } else {
                esc[0] = '\\';
                esc[1] = (char)c;
                put(ctx, esc, 2);
            }
        }
        if (run) put(ctx, (const char *)s + n - run, run);
    }
    put(ctx, "\"", 1);
}

static void put_file(void *ctx, const char *b, size_t n) { fwrite(b, 1, n, (FILE *)ctx); }

void sl_json_fput_str(FILE *f, const char *s) { sl_json_put_str(put_file, f, s, strlen(s), 0); }
