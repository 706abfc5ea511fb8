/* The config language's tree, read: errors that quote the offending spot of the source
 * (sl_cfg_err), lookups of statements and options, typed reads of values, and the
 * did-you-mean suggestions (see include/sluice/config.h). The tree is built by
 * core/config.c.
 *
 * Workload: a few reads per statement at start-up; an error message once. */
#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/config_priv.h"
#include "sluice/config.h"

/* ---- error reporting ---- */

/* Copy line `line` (1-based) of the source into buf, tabs kept, without the newline. */
static void source_line(const sl_cfg *c, int line, char *buf, size_t cap) {
    const char *p = c->src, *end = c->src + c->src_len;
    for (int l = 1; l < line && p < end; p++)
        if (*p == '\n') l++;
    size_t n = 0;
    while (p + n < end && p[n] != '\n' && p[n] != '\r' && n + 1 < cap) n++;
    /* control bytes (a NUL, say) would cut or garble the quoted line: show them as '?' so
     * the caret still lines up under the spot */
    for (size_t i = 0; i < n; i++) buf[i] = ((unsigned char)p[i] < 0x20 && p[i] != '\t') ? '?' : p[i];
    buf[n] = 0;
}

sl_status sl__cfg_verr_at(const sl_cfg *c, sl_cfg_loc loc, sl_status code, const char *fmt, va_list ap) {
    char msg[512], line[256], caret[300];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (loc.line <= 0) /* a value that came from an override, not from the file */
        return sl_err(code, "%s (value given with --set)", msg);
    source_line(c, loc.line, line, sizeof line);
    /* caret line: same whitespace as the source up to the column, so tabs line up */
    size_t n = 0;
    for (int i = 0; i + 1 < loc.col && n + 1 < sizeof caret - 80; i++)
        caret[n++] = (line[i] == '\t') ? '\t' : ' ';
    caret[n++] = '^';
    for (int i = 1; i < loc.len && i < 60 && n + 1 < sizeof caret; i++) caret[n++] = '~';
    caret[n] = 0;
    return sl_err(code, "%s:%d:%d: %s\n    %s\n    %s", c->filename, loc.line, loc.col, msg, line, caret);
}

sl_status sl_cfg_err(const sl_cfg *c, sl_cfg_loc loc, sl_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sl__cfg_verr_at(c, loc, code, fmt, ap);
    va_end(ap);
    return code;
}

/* ---- lookups and typed reads ---- */

const sl_cfg_stmt *sl_cfg_find(const sl_cfg_stmt *stmts, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(stmts[i].name, name) == 0) return &stmts[i];
    return NULL;
}

const sl_cfg_value *sl_cfg_opt(const sl_cfg_stmt *s, const char *key) {
    const sl_cfg_value *v = NULL;
    for (int i = 0; i < s->nargs; i++)
        if (s->args[i].key && strcmp(s->args[i].key, key) == 0) v = &s->args[i].v;
    return v;
}

const sl_cfg_value *sl_cfg_pos(const sl_cfg_stmt *s, int idx) {
    for (int i = 0; i < s->nargs; i++) {
        if (s->args[i].key || s->args[i].v.kind == SL_CV_PIPE) continue;
        if (idx-- == 0) return &s->args[i].v;
    }
    return NULL;
}

int sl_cfg_npos(const sl_cfg_stmt *s) {
    int n = 0;
    for (int i = 0; i < s->nargs; i++) n += !s->args[i].key && s->args[i].v.kind != SL_CV_PIPE;
    return n;
}

static const char *kind_name(sl_cv_kind k) {
    switch (k) {
    case SL_CV_NUMBER: return "a number";
    case SL_CV_STRING: return "a string";
    case SL_CV_IDENT: return "a word";
    case SL_CV_SHAPE: return "a shape";
    case SL_CV_LIST: return "a list";
    case SL_CV_CALL: return "a call";
    case SL_CV_PIPE: return "'|'";
    }
    return "a value";
}

/* ---- number literals ---- */

static const sl__cfg_unit UNITS[] = {
    {"", 1, 1, 0}, {"K", 1e3, 1, 3}, {"M", 1e6, 1, 6}, {"G", 1e9, 1, 9}, {"T", 1e12, 1, 12},
    {"k", 1e3, 1, 3}, {"KB", 1e3, 1, 3}, {"MB", 1e6, 1, 6}, {"GB", 1e9, 1, 9}, {"TB", 1e12, 1, 12}, {"B", 1, 1, 0},
    {"Ki", 1024.0, 1ull << 10, 0}, {"Mi", 1048576.0, 1ull << 20, 0}, {"Gi", 1073741824.0, 1ull << 30, 0},
    {"Ti", 1099511627776.0, 1ull << 40, 0}, {"KiB", 1024.0, 1ull << 10, 0}, {"MiB", 1048576.0, 1ull << 20, 0},
    {"GiB", 1073741824.0, 1ull << 30, 0}, {"TiB", 1099511627776.0, 1ull << 40, 0},
    {"s", 1, 1, 0}, {"ms", 1e-3, 1, -3}, {"us", 1e-6, 1, -6}, {"ns", 1e-9, 1, -9}, {"min", 60, 60, 0},
    {"h", 3600, 3600, 0}, {"%", 0.01, 1, -2},
};

const sl__cfg_unit *sl__cfg_find_unit(const char *name) {
    for (size_t i = 0; i < sizeof UNITS / sizeof UNITS[0]; i++)
        if (strcmp(name, UNITS[i].name) == 0) return &UNITS[i];
    return NULL;
}

typedef unsigned __int128 u128;

/* In 128 bits: the literal is D x 10^e10 x mul, D its significant digits. D has at most 38
 * of them (below 2^127); with more, the literal is an integer only when no fraction is left
 * after its exponent and unit, and then it is past int64 (an integer that fits int64 written
 * with 39 significant digits would need a fraction that a unit's factor cancels: refused). */
sl_status sl__cfg_literal_int(const char *lit, int64_t *out) {
    const char *p = lit;
    bool neg = *p == '-';
    if (*p == '-' || *p == '+') p++;
    char dig[160];
    int nd = 0, nfrac = 0;
    bool point = false, any = false;
    for (; isdigit((unsigned char)*p) || (*p == '.' && !point); p++) {
        if (*p == '.') {
            point = true;
            continue;
        }
        any = true;
        if (point) nfrac++;
        if (nd == 0 && *p == '0') continue; /* leading zeros */
        if (nd == (int)sizeof dig) return SL_EINVAL; /* longer than any literal the parser takes */
        dig[nd++] = *p;
    }
    if (!any) return SL_EINVAL;
    long e10 = 0;
    if ((*p == 'e' || *p == 'E') &&
        (isdigit((unsigned char)p[1]) || ((p[1] == '-' || p[1] == '+') && isdigit((unsigned char)p[2])))) {
        bool eneg = p[1] == '-';
        p += p[1] == '-' || p[1] == '+' ? 2 : 1;
        for (; isdigit((unsigned char)*p); p++)
            if (e10 < 1000000) e10 = e10 * 10 + (*p - '0');
        if (eneg) e10 = -e10;
    }
    const sl__cfg_unit *u = sl__cfg_find_unit(p);
    if (!u) return SL_EINVAL;
    e10 += u->exp10 - nfrac;
    while (nd > 0 && dig[nd - 1] == '0') { /* trailing zeros: a power of ten */
        nd--;
        e10++;
    }
    if (nd > 38) return e10 >= 0 ? SL_ERANGE : SL_EINVAL;
    if (nd == 0) {
        *out = 0;
        return SL_OK;
    }
    const u128 lim = (u128)1 << 64; /* past int64 either way; keeps every product below 2^128 */
    u128 d = 0;
    uint64_t mul = u->mul;
    for (int i = 0; i < nd; i++) d = d * 10 + (u128)(dig[i] - '0');
    if (e10 >= 0) {
        for (long i = 0; i < e10; i++) {
            if (d >= lim) return SL_ERANGE;
            d *= 10;
        }
    } else {
        /* 10^-e10 = 2^k 5^k must divide D x mul: cancel mul's twos and fives first */
        long k2 = -e10, k5 = -e10;
        for (; k2 > 0 && mul % 2 == 0; k2--) mul /= 2;
        for (; k5 > 0 && mul % 5 == 0; k5--) mul /= 5;
        if (k2 >= 127 || k5 >= 55) return SL_EINVAL; /* 2^127 and 5^55 are past any D */
        if (d % ((u128)1 << k2)) return SL_EINVAL;
        d >>= k2;
        for (long i = 0; i < k5; i++) {
            if (d % 5) return SL_EINVAL;
            d /= 5;
        }
    }
    if (d >= lim) return SL_ERANGE;
    d *= mul;
    if (d > (u128)INT64_MAX + (neg ? 1 : 0)) return SL_ERANGE;
    uint64_t m = (uint64_t)d;
    *out = neg ? (m == (uint64_t)1 << 63 ? INT64_MIN : -(int64_t)m) : (int64_t)m;
    return SL_OK;
}

sl_status sl_cfg_int(const sl_cfg *c, const sl_cfg_value *v, int64_t min, int64_t max, int64_t *out) {
    int64_t iv;
    if (v->kind == SL_CV_NUMBER && !v->is_int && sl__cfg_literal_int(v->text, &iv) == SL_ERANGE)
        return sl_cfg_err(c, v->loc, SL_ERANGE, "%s is outside %lld..%lld", v->text, (long long)min, (long long)max);
    if (v->kind != SL_CV_NUMBER || !v->is_int)
        return sl_cfg_err(c, v->loc, SL_EINVAL, "expected an integer, found %s '%s'",
                          v->kind == SL_CV_NUMBER ? "the number" : kind_name(v->kind), v->text);
    if (v->inum < min || v->inum > max)
        return sl_cfg_err(c, v->loc, SL_ERANGE, "%lld is outside %lld..%lld", (long long)v->inum,
                          (long long)min, (long long)max);
    *out = v->inum;
    return SL_OK;
}

sl_status sl_cfg_double(const sl_cfg *c, const sl_cfg_value *v, double *out) {
    if (v->kind != SL_CV_NUMBER)
        return sl_cfg_err(c, v->loc, SL_EINVAL, "expected a number, found %s '%s'", kind_name(v->kind), v->text);
    *out = v->num;
    return SL_OK;
}

sl_status sl_cfg_bool(const sl_cfg *c, const sl_cfg_value *v, bool *out) {
    static const char *yes[] = {"true", "yes", "on", "1"}, *no[] = {"false", "no", "off", "0"};
    if (v->kind == SL_CV_IDENT || v->kind == SL_CV_NUMBER) {
        for (int i = 0; i < 4; i++) {
            if (strcmp(v->text, yes[i]) == 0) { *out = true; return SL_OK; }
            if (strcmp(v->text, no[i]) == 0) { *out = false; return SL_OK; }
        }
    }
    sl_cfg_err(c, v->loc, SL_EINVAL, "expected true or false, found '%s'", v->text);
    sl_err_hint("write true or false (yes/no, on/off, 1/0 also work)");
    return SL_EINVAL;
}

sl_status sl_cfg_word(const sl_cfg *c, const sl_cfg_value *v, const char **out) {
    if (v->kind != SL_CV_IDENT && v->kind != SL_CV_STRING)
        return sl_cfg_err(c, v->loc, SL_EINVAL, "expected a word or a string, found %s '%s'",
                          kind_name(v->kind), v->text);
    *out = v->text;
    return SL_OK;
}

bool sl_cfg_is_auto(const sl_cfg_value *v) {
    return v && v->kind == SL_CV_IDENT && strcmp(v->text, "auto") == 0;
}

static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 1000;
    int row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int cost = a[i - 1] == b[j - 1] ? 0 : 1;
            int best = diag + cost;
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *sl_suggest(const char *word, const char *const *cands, int n) {
    int best = 1000;
    const char *pick = NULL;
    for (int i = 0; i < n; i++) {
        int d = edit_distance(word, cands[i]);
        if (d < best) { best = d; pick = cands[i]; }
    }
    int limit = (int)strlen(word) / 3;
    if (limit < 1) limit = 1;
    return best <= limit ? pick : NULL;
}
