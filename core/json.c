/* JSON for every module: the one reader (strict RFC 8259, no extensions) for TF_CONFIG,
 * stats files read back and safetensors headers, and the string escaping and text buffer
 * every JSON writer uses. Errors name the byte offset, so a user can find the typo in a
 * one-line environment variable or a 100 MB header.
 *
 * Workload: documents of a few hundred bytes (TF_CONFIG) to about 100 MB (a checkpoint's
 * header), from outside, parsed once. The text is read twice by the same code: the first
 * pass checks it and counts the values, members and string bytes the tree needs (charging
 * them against the caller's budget as it goes, so a hostile document is refused before
 * anything is allocated for it); the second fills one block of exactly that size. Nesting
 * depth is bounded and every read is bounds-checked; the text need not end in a NUL. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/json.h"
#include "sluice/util.h"

#define MAX_DEPTH 64
#define MEMBER_BYTES (sizeof(const char *) + sizeof(size_t)) /* a key pointer and its offset */

typedef struct parser {
    const char *s;
    size_t len, pos;
    const sl_json_opts *o;
    const char *what;
    sl_status st;            /* the first error */
    bool fill;               /* second pass: write the tree */
    /* first pass: what the tree needs */
    size_t *counts;          /* items of each array and object, in the order they open */
    size_t ncounts, capcounts;
    size_t nvalues, nmembers, nstr; /* values; object members; string bytes with their NULs */
    /* second pass: where the next of each goes in the block */
    size_t ci;               /* next index into counts */
    sl_json *vals;
    unsigned char *mem;      /* per object: its key pointers, then its key offsets */
    char *strs;
} parser;

static int perr(parser *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int perr(parser *p, size_t at, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->st = sl_err_at(SL_ECORRUPT, p->what, p->o->base + (int64_t)at, "%s%s", p->o->prefix ? p->o->prefix : "", msg);
    return -1;
}

static int nomem(parser *p) {
    p->st = sl_err(SL_ENOMEM, "%s: out of memory", p->what);
    return -1;
}

/* First pass: refuse the document once what it needs passes the budget; `at` is where. */
static int charge(parser *p, size_t at) {
    size_t max = p->o->max_bytes;
    if (p->fill || !max) return 0;
    size_t need = p->nvalues * sizeof(sl_json) + p->nmembers * MEMBER_BYTES + p->nstr + p->ncounts * sizeof(size_t);
    if (need <= max) return 0;
    char lim[64];
    if (!p->o->max_bytes_text) snprintf(lim, sizeof lim, "%zu bytes", max);
    perr(p, at, "its JSON would take more than %s in memory", p->o->max_bytes_text ? p->o->max_bytes_text : lim);
    if (p->o->max_bytes_hint) sl_err_hint("%s", p->o->max_bytes_hint);
    return -1;
}

static void skip_ws(parser *p) {
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
                               p->s[p->pos] == '\r'))
        p->pos++;
}

const char *sl_json_show(const char *text, size_t len, size_t at, const char *end_name, char *buf, size_t cap) {
    if (at >= len) return end_name ? end_name : "the end of the input";
    unsigned char c = (unsigned char)text[at];
    if (c >= 32 && c < 127) snprintf(buf, cap, "'%c'", c);
    else snprintf(buf, cap, "byte 0x%02x", c);
    return buf;
}

static const char *show(parser *p, char *buf, size_t cap) {
    return sl_json_show(p->s, p->len, p->pos, p->o->end_name, buf, cap);
}

static int hex4(parser *p, size_t at, unsigned *out) {
    if (p->len - at < 4) return perr(p, at, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[at + (size_t)i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return perr(p, at + (size_t)i, "bad hex digit in \\u escape");
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

/* The code point of the \u escape at p->pos (a surrogate pair read whole), p->pos moved past. */
static int unicode_escape(parser *p, unsigned *out) {
    size_t at = p->pos;
    unsigned u;
    if (hex4(p, at + 2, &u)) return -1;
    p->pos += 6;
    if (u >= 0xd800 && u <= 0xdbff) {
        unsigned lo;
        if (p->len - p->pos < 6 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
            return perr(p, at, "high surrogate \\u%04x without a low surrogate", u);
        if (hex4(p, p->pos + 2, &lo)) return -1;
        if (lo < 0xdc00 || lo > 0xdfff) return perr(p, p->pos, "bad low surrogate \\u%04x after \\u%04x", lo, u);
        p->pos += 6;
        u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
    } else if (u >= 0xdc00 && u <= 0xdfff) {
        return perr(p, at, "lone low surrogate \\u%04x", u);
    } else if (u == 0) {
        return perr(p, at, "\\u0000 is not allowed in a string");
    }
    *out = u;
    return 0;
}

/* A string at p->pos (its opening quote). First pass: checked and its decoded bytes counted;
 * second: decoded into the block, *out set. */
static int parse_string(parser *p, const char **out, size_t *outlen) {
    size_t start = p->pos++;
    char *buf = p->fill ? p->strs : NULL;
    size_t n = 0;
#define PUT(c) do { if (buf) buf[n] = (char)(c); n++; } while (0)
    for (;;) {
        if (p->pos >= p->len) return perr(p, start, "unterminated string");
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20) return perr(p, p->pos, "control character 0x%02x in a string (escape it)", c);
        if (c == '\\') {
            if (p->pos + 1 >= p->len) return perr(p, start, "unterminated string");
            char e = p->s[p->pos + 1];
            const char *map = "\"\"\\\\//b\bf\fn\nr\rt\t", *m = NULL;
            for (int i = 0; map[i]; i += 2)
                if (map[i] == e) { m = map + i + 1; break; }
            if (m) {
                PUT(*m);
                p->pos += 2;
                continue;
            }
            if (e != 'u') {
                if (e > 32 && e < 127) return perr(p, p->pos, "bad escape \\%c", e);
                return perr(p, p->pos, "bad escape 0x%02x", (unsigned char)e);
            }
            unsigned u = 0;
            if (unicode_escape(p, &u)) return -1;
            if (u < 0x80) {
                PUT(u);
            } else if (u < 0x800) {
                PUT(0xc0 | (u >> 6));
                PUT(0x80 | (u & 0x3f));
            } else if (u < 0x10000) {
                PUT(0xe0 | (u >> 12));
                PUT(0x80 | ((u >> 6) & 0x3f));
                PUT(0x80 | (u & 0x3f));
            } else {
                PUT(0xf0 | (u >> 18));
                PUT(0x80 | ((u >> 12) & 0x3f));
                PUT(0x80 | ((u >> 6) & 0x3f));
                PUT(0x80 | (u & 0x3f));
            }
            continue;
        }
        unsigned cp;
        size_t k = c >= 0x80 && (p->o->flags & SL_JSON_RAW_BYTES)
                       ? 1 : utf8_seq((const unsigned char *)p->s + p->pos, p->len - p->pos, &cp);
        if (!k) return perr(p, p->pos, "invalid UTF-8 in a string");
        if (buf) memcpy(buf + n, p->s + p->pos, k);
        n += k;
        p->pos += k;
    }
#undef PUT
    if (buf) {
        buf[n] = 0;
        p->strs += n + 1;
        *out = buf;
        *outlen = n;
        return 0;
    }
    p->nstr += n + 1;
    return charge(p, start);
}

/* The literal's value: strtod wants a NUL-terminated copy (the text may not have one). */
static double literal_value(parser *p, size_t start, size_t n, bool *oom) {
    char tmp[64], *t = n < sizeof tmp ? tmp : malloc(n + 1);
    if (!t) {
        *oom = true;
        return 0;
    }
    memcpy(t, p->s + start, n);
    t[n] = 0;
    double d = strtod(t, NULL);
    if (t != tmp) free(t);
    return d;
}

static int parse_number(parser *p, sl_json *v) {
    size_t start = p->pos, i = p->pos;
    const char *s = p->s;
    bool neg = i < p->len && s[i] == '-', integer = true;
    if (neg) i++;
    if (i >= p->len || !(s[i] >= '0' && s[i] <= '9')) return perr(p, i, "a digit expected in a number");
    size_t digits = i;
    if (s[i] == '0') {
        i++;
        if (i < p->len && s[i] >= '0' && s[i] <= '9') return perr(p, start, "number with a leading zero");
    } else {
        while (i < p->len && s[i] >= '0' && s[i] <= '9') i++;
    }
    size_t digits_end = i;
    if (i < p->len && s[i] == '.') {
        integer = false;
        i++;
        if (i >= p->len || !(s[i] >= '0' && s[i] <= '9')) return perr(p, i, "a digit expected after '.'");
        while (i < p->len && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < p->len && (s[i] == 'e' || s[i] == 'E')) {
        integer = false;
        i++;
        if (i < p->len && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= p->len || !(s[i] >= '0' && s[i] <= '9')) return perr(p, i, "a digit expected in the exponent");
        while (i < p->len && s[i] >= '0' && s[i] <= '9') i++;
    }
    bool oom = false;
    double num = literal_value(p, start, i - start, &oom);
    if (oom) return nomem(p);
    if (!isfinite(num)) return perr(p, start, "number out of range");
    p->pos = i;
    if (!v) return 0;
    v->kind = SL_JSON_NUMBER;
    v->num = num;
    v->len = i - start;
    /* exact when it is an integer within int64: magnitudes up to 2^63 (that one negative only) */
    uint64_t mag = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (size_t k = digits; integer && k < digits_end; k++) {
        unsigned d = (unsigned)(s[k] - '0');
        if (mag > (lim - d) / 10) integer = false;
        else mag = mag * 10 + d;
    }
    if (integer) {
        v->is_int = true;
        v->i = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
    }
    return 0;
}

typedef struct key_at {
    const char *k;
    size_t i;
} key_at;

static int cmp_key_at(const void *a, const void *b) {
    const key_at *x = a, *y = b;
    int c = strcmp(x->k, y->k);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* Sorted, not compared pairwise: a million keys must not take 10^12 steps. */
sl_status sl__first_repeat(const char *const *keys, size_t n, size_t *second, size_t *first) {
    *second = *first = n;
    if (n <= 16) {
        for (size_t j = 1; j < n; j++)
            for (size_t i = 0; keys[j] && i < j; i++)
                if (keys[i] && strcmp(keys[i], keys[j]) == 0) {
                    *second = j;
                    *first = i;
                    return SL_OK;
                }
        return SL_OK;
    }
    key_at *a = malloc(n * sizeof *a);
    if (!a) return sl_err(SL_ENOMEM, "out of memory looking for repeats among %zu keys", n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (keys[i]) a[m++] = (key_at){keys[i], i};
    qsort(a, m, sizeof *a, cmp_key_at);
    /* within a run of equal keys the indices ascend: each one's predecessor came before it */
    for (size_t t = 1; t < m; t++)
        if (a[t].i < *second && strcmp(a[t].k, a[t - 1].k) == 0) {
            *second = a[t].i;
            *first = a[t - 1].i;
        }
    free(a);
    return SL_OK;
}

static int parse_value(parser *p, sl_json *v, int depth);

/* First pass: count the container's items; second: take exactly that many slots for them. */
static int parse_container(parser *p, sl_json *v, int depth, bool is_obj) {
    size_t start = p->pos++, slot = 0, n = 0;
    if (depth >= MAX_DEPTH) return perr(p, start, "nesting deeper than 64 levels");
    sl_json *items = NULL;
    const char **keys = NULL;
    size_t *offs = NULL;
    if (!p->fill) {
        if (p->ncounts == p->capcounts) {
            size_t cap = p->capcounts ? 2 * p->capcounts : 64;
            size_t *nc = realloc(p->counts, cap * sizeof *nc);
            if (!nc) return nomem(p);
            p->counts = nc;
            p->capcounts = cap;
        }
        slot = p->ncounts++;
        p->counts[slot] = 0;
        if (charge(p, start)) return -1;
    } else {
        size_t total = p->counts[p->ci++];
        if (total) {
            items = p->vals;
            p->vals += total;
            if (is_obj) {
                keys = (const char **)(void *)p->mem;
                offs = (size_t *)(void *)(keys + total);
                p->mem += total * MEMBER_BYTES;
            }
        }
    }
    char tmp[24];
    const char closer = is_obj ? '}' : ']';
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == closer) {
        p->pos++;
    } else {
        for (;;) {
            skip_ws(p);
            if (is_obj) {
                if (p->pos >= p->len || p->s[p->pos] != '"')
                    return perr(p, p->pos, "expected a \"key\", found %s", show(p, tmp, sizeof tmp));
                size_t kat = p->pos, kl;
                if (p->fill) {
                    offs[n] = kat;
                } else {
                    p->nmembers++;
                    if (charge(p, kat)) return -1;
                }
                if (parse_string(p, p->fill ? &keys[n] : NULL, &kl)) return -1;
                skip_ws(p);
                if (p->pos >= p->len || p->s[p->pos] != ':')
                    return perr(p, p->pos, "expected ':' after a key, found %s", show(p, tmp, sizeof tmp));
                p->pos++;
            }
            if (parse_value(p, p->fill ? &items[n] : NULL, depth + 1)) return -1;
            n++;
            if (!p->fill) p->counts[slot] = n;
            skip_ws(p);
            if (p->pos < p->len && p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->pos < p->len && p->s[p->pos] == closer) {
                p->pos++;
                break;
            }
            return perr(p, p->pos, is_obj ? "expected ',' or '}', found %s" : "expected ',' or ']', found %s",
                        show(p, tmp, sizeof tmp));
        }
    }
    if (!p->fill) return 0;
    if (is_obj && !(p->o->flags & SL_JSON_KEEP_DUPLICATES)) {
        size_t second, first;
        if ((p->st = sl__first_repeat(keys, n, &second, &first))) return -1;
        if (second < n) return perr(p, offs[second], "duplicate key \"%.100s\"", keys[second]);
    }
    v->kind = is_obj ? SL_JSON_OBJECT : SL_JSON_ARRAY;
    v->len = n;
    v->items = items;
    v->keys = keys;
    return 0;
}

/* v is NULL in the first pass. */
static int parse_value(parser *p, sl_json *v, int depth) {
    skip_ws(p);
    size_t at = p->pos;
    if (v) {
        memset(v, 0, sizeof *v);
        v->offset = at;
    } else {
        p->nvalues++;
        if (charge(p, at)) return -1;
    }
    char tmp[24];
    if (p->pos >= p->len) return perr(p, p->pos, "expected a value, found %s", show(p, tmp, sizeof tmp));
    char c = p->s[p->pos];
    if (c == '{' || c == '[') return parse_container(p, v, depth, c == '{');
    if (c == '"') {
        if (v) v->kind = SL_JSON_STRING;
        size_t n;
        return parse_string(p, v ? &v->str : NULL, v ? &v->len : &n);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
    static const struct { const char *w; sl_json_kind k; bool b; } lits[] = {
        {"true", SL_JSON_BOOL, true}, {"false", SL_JSON_BOOL, false}, {"null", SL_JSON_NULL, false}};
    for (int i = 0; i < 3; i++) {
        size_t wl = strlen(lits[i].w);
        if (p->len - p->pos >= wl && memcmp(p->s + p->pos, lits[i].w, wl) == 0) {
            if (v) {
                v->kind = lits[i].k;
                v->b = lits[i].b;
            }
            p->pos += wl;
            return 0;
        }
    }
    return perr(p, p->pos, "expected a value, found %s", show(p, tmp, sizeof tmp));
}

/* One pass over the whole text; *end gets where the value ends. */
static int parse_doc(parser *p, sl_json *root, size_t *end) {
    p->pos = 0;
    if (parse_value(p, root, 0)) return -1;
    *end = p->pos;
    if (p->o->end) return 0;
    skip_ws(p);
    char tmp[24];
    if (p->pos != p->len) return perr(p, p->pos, "unexpected %s after the value", show(p, tmp, sizeof tmp));
    return 0;
}

sl_status sl_json_parse_opts(const char *text, size_t len, const sl_json_opts *o, sl_json **out) {
    static const sl_json_opts none;
    *out = NULL;
    parser p = {.s = text, .len = len, .o = o ? o : &none, .st = SL_OK};
    p.what = p.o->what ? p.o->what : "JSON";
    size_t end = 0;
    if (parse_doc(&p, NULL, &end)) {
        free(p.counts);
        return p.st;
    }
    /* each count is at most the text's length, so these cannot overflow for any text that fits in memory */
    size_t vbytes = p.nvalues * sizeof(sl_json), mbytes = p.nmembers * MEMBER_BYTES;
    unsigned char *block = malloc(vbytes + mbytes + p.nstr);
    if (!block) {
        free(p.counts);
        return sl_err(SL_ENOMEM, "%s: out of memory for the %zu bytes of its JSON tree", p.what, vbytes + mbytes + p.nstr);
    }
    p.fill = true;
    p.vals = (sl_json *)(void *)block;
    p.mem = block + vbytes;
    p.strs = (char *)block + vbytes + mbytes;
    sl_json *root = p.vals++;
    parse_doc(&p, root, &end);
    free(p.counts);
    if (p.st) {
        free(block);
        return p.st;
    }
    if (p.o->end) *p.o->end = end;
    *out = root;
    return SL_OK;
}

sl_status sl_json_parse(const char *text, size_t len, const char *what, sl_json **out) {
    sl_json_opts o = {.what = what};
    return sl_json_parse_opts(text, len, &o, out);
}

void sl_json_free(sl_json *root) { free(root); } /* the root is the start of its one block */

const sl_json *sl_json_get(const sl_json *o, const char *key) {
    if (!o || o->kind != SL_JSON_OBJECT) return NULL;
    for (size_t i = 0; i < o->len; i++)
        if (strcmp(o->keys[i], key) == 0) return &o->items[i];
    return NULL;
}

size_t sl_json_key_offset(const sl_json *o, size_t i) { return ((const size_t *)(const void *)(o->keys + o->len))[i]; }

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

/* ---- the text buffer ---- */

bool sl_json_buf_reserve(sl_json_buf *b, size_t more) {
    if (b->oom) return false;
    if (b->len + more + 1 <= b->cap) return true;
    size_t c = b->cap ? b->cap : 256;
    while (c < b->len + more + 1) c *= 2;
    char *q = realloc(b->p, c);
    if (!q) {
        b->oom = true;
        return false;
    }
    b->p = q;
    b->cap = c;
    return true;
}

void sl_json_buf_put(sl_json_buf *b, const char *s, size_t n) {
    if (!sl_json_buf_reserve(b, n)) return;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void sl_json_buf_printf(sl_json_buf *b, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    char tmp[128];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        va_end(ap2);
        return;
    }
    if ((size_t)n < sizeof tmp) {
        sl_json_buf_put(b, tmp, (size_t)n);
    } else if (sl_json_buf_reserve(b, (size_t)n)) {
        vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
}

void sl_json_buf_put_fn(void *b, const char *s, size_t n) { sl_json_buf_put(b, s, n); }

void sl_json_buf_put_tree(sl_json_buf *b, const sl_json *v, unsigned flags) {
    switch (v->kind) {
    case SL_JSON_NULL: sl_json_buf_put(b, "null", 4); break;
    case SL_JSON_BOOL: v->b ? sl_json_buf_put(b, "true", 4) : sl_json_buf_put(b, "false", 5); break;
    case SL_JSON_NUMBER:
        if (v->is_int) {
            sl_json_buf_printf(b, "%lld", (long long)v->i);
        } else {
            size_t at = b->len;
            sl_json_buf_printf(b, "%.17g", v->num);
            if (!b->oom && !strpbrk(b->p + at, ".e")) sl_json_buf_put(b, ".0", 2); /* "-0", "100" */
        }
        break;
    case SL_JSON_STRING: sl_json_put_str(sl_json_buf_put_fn, b, v->str, v->len, flags); break;
    case SL_JSON_ARRAY:
    case SL_JSON_OBJECT:
        sl_json_buf_put(b, v->kind == SL_JSON_ARRAY ? "[" : "{", 1);
        for (size_t i = 0; i < v->len; i++) {
            if (i) sl_json_buf_put(b, ",", 1);
            if (v->kind == SL_JSON_OBJECT) {
                sl_json_put_str(sl_json_buf_put_fn, b, v->keys[i], strlen(v->keys[i]), flags);
                sl_json_buf_put(b, ":", 1);
            }
            sl_json_buf_put_tree(b, &v->items[i], flags);
        }
        sl_json_buf_put(b, v->kind == SL_JSON_ARRAY ? "]" : "}", 1);
        break;
    }
}
