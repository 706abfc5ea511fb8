/* The config language's lexer and parser (syntax only; see include/sluice/config.h).
 *
 * Workload: files of a few hundred lines written by people, parsed once at start-up, plus
 * fuzzed garbage. So the parser favours clear messages over speed: every token knows its
 * line and column, and errors quote the offending line with a caret under it.
 * All nodes live in one arena freed with the tree; arrays are built in temporary vectors
 * and copied into the arena when complete. Nesting depth is bounded so hostile input
 * cannot exhaust the stack.
 *
 * This file builds the tree (lexer, parser, overrides); core/config_read.c reports errors
 * at a spot of the source and reads the tree (lookups, typed reads, did-you-mean). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_priv.h"
#include "sluice/config.h"
#include "sluice/file.h"
#include "sluice/util.h"

#define MAX_DEPTH 64

/* ---- arena ---- */

static void *arena_alloc(sl_cfg *c, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!c->chunks || c->chunks->cap - c->chunks->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        chunk *k = malloc(sizeof *k + cap);
        if (!k) return NULL;
        k->next = c->chunks;
        k->used = 0;
        k->cap = cap;
        c->chunks = k;
    }
    void *p = c->chunks->mem + c->chunks->used;
    c->chunks->used += n;
    memset(p, 0, n);
    return p;
}

static char *arena_strndup(sl_cfg *c, const char *s, size_t n) {
    char *p = arena_alloc(c, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* ---- lexer ---- */

typedef enum {
    T_EOF, T_NL, T_IDENT, T_NUMBER, T_STRING, T_SHAPE,
    T_LBRACE, T_RBRACE, T_LPAREN, T_RPAREN, T_LBRACK, T_RBRACK,
    T_COMMA, T_EQ, T_COLON, T_PIPE, T_ERROR
} tok_kind;

typedef struct {
    tok_kind kind;
    sl_cfg_loc loc;
    const char *start; /* into the source */
    size_t len;
} token;

typedef struct {
    sl_cfg *c;
    const char *p, *end;
    int line;
    const char *line_start;
    int nest;          /* open ( and [: newlines inside are not statement ends */
    token tok, ahead;  /* current token, one token of lookahead */
    bool have_ahead;
    sl_status err;     /* first error; the parse stops at it */
} lexer;

static bool ident_start(int ch) { return isalpha(ch) || ch == '_' || ch == '.' || ch == '/' || ch == '*' || ch == '~'; }
static bool ident_char(int ch) { return isalnum(ch) || ch == '_' || ch == '.' || ch == '-' || ch == '/' || ch == '*' || ch == '~'; }

static sl_cfg_loc here(const lexer *L, const char *at, size_t len) {
    sl_cfg_loc loc = {L->line, (int)(at - L->line_start) + 1, len ? (int)len : 1};
    return loc;
}

static sl_status lex_error(lexer *L, sl_cfg_loc loc, const char *fmt, ...) {
    if (L->err) return L->err;
    va_list ap;
    va_start(ap, fmt);
    sl__cfg_verr_at(L->c, loc, SL_EINVAL, fmt, ap);
    va_end(ap);
    L->err = SL_EINVAL;
    return L->err;
}

static const char *tok_desc(const token *t, char *buf, size_t cap) {
    switch (t->kind) {
    case T_EOF: return "end of file";
    case T_NL: return "end of line";
    case T_ERROR: return "an invalid character";
    default:
        snprintf(buf, cap, "'%.*s'", (int)(t->len > 40 ? 40 : t->len), t->start);
        return buf;
    }
}

/* Skip spaces, tabs, CRs and comments (not newlines). */
static void skip_blank(lexer *L) {
    while (L->p < L->end) {
        char ch = *L->p;
        if (ch == ' ' || ch == '\t' || ch == '\r') L->p++;
        else if (ch == '#') { while (L->p < L->end && *L->p != '\n') L->p++; }
        else if (ch == '\\' && L->p + 1 < L->end && L->p[1] == '\n') { /* explicit line continuation */
            L->p += 2; L->line++; L->line_start = L->p;
        } else break;
    }
}

/* After a newline: does the next non-blank line start with '|'? Then the statement goes on. */
static bool continues_with_pipe(lexer *L) {
    const char *p = L->p;
    while (p < L->end) {
        char ch = *p;
        if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n') p++;
        else if (ch == '#') { while (p < L->end && *p != '\n') p++; }
        else return ch == '|';
    }
    return false;
}

static void lex_number(lexer *L, token *t) {
    const char *p = L->p;
    if (*p == '-' || *p == '+') p++;
    while (p < L->end && (isdigit((unsigned char)*p) || *p == '.')) p++;
    if (p < L->end && (*p == 'e' || *p == 'E')) {
        const char *q = p + 1;
        if (q < L->end && (*q == '-' || *q == '+')) q++;
        if (q < L->end && isdigit((unsigned char)*q)) {
            p = q;
            while (p < L->end && isdigit((unsigned char)*p)) p++;
        }
    }
    t->kind = T_NUMBER;
    /* shape: 28x28x1 */
    if (p < L->end && *p == 'x' && p + 1 < L->end && isdigit((unsigned char)p[1])) {
        t->kind = T_SHAPE;
        while (p < L->end && (*p == 'x' || isdigit((unsigned char)*p))) p++;
    } else if (p < L->end && *p == '/' && p + 1 < L->end && isdigit((unsigned char)p[1])) {
        p++; /* fraction 1/255 */
        while (p < L->end && (isdigit((unsigned char)*p) || *p == '.')) p++;
    } else {
        while (p < L->end && (isalpha((unsigned char)*p) || *p == '%')) p++; /* unit */
    }
    /* anything glued on (e.g. "3a_b") is part of the token so the error shows all of it */
    while (p < L->end && ident_char((unsigned char)*p)) p++;
    t->len = (size_t)(p - L->p);
    L->p = p;
}

static void lex_next(lexer *L, token *t) {
    for (;;) {
        skip_blank(L);
        t->start = L->p;
        t->len = 1;
        t->loc = here(L, L->p, 1);
        if (L->p >= L->end) { t->kind = T_EOF; return; }
        char ch = *L->p;
        if (ch == '\n' || ch == ';') {
            L->p++;
            if (ch == '\n') { L->line++; L->line_start = L->p; }
            if (L->nest > 0) continue;
            if (continues_with_pipe(L)) continue;
            t->kind = T_NL;
            return;
        }
        break;
    }
    char ch = *L->p;
    switch (ch) {
    case '{': t->kind = T_LBRACE; L->p++; return;
    case '}': t->kind = T_RBRACE; L->p++; return;
    case '(': t->kind = T_LPAREN; L->p++; L->nest++; return;
    case ')': t->kind = T_RPAREN; L->p++; if (L->nest) L->nest--; return;
    case '[': t->kind = T_LBRACK; L->p++; L->nest++; return;
    case ']': t->kind = T_RBRACK; L->p++; if (L->nest) L->nest--; return;
    case ',': t->kind = T_COMMA; L->p++; return;
    case '=':
        if (L->p + 1 < L->end && L->p[1] == '=') goto comparison;
        t->kind = T_EQ; L->p++; return;
    case '<': case '>': case '!':
    comparison: /* == != < <= > >= are words, for statements like `filter label < 5` */
        t->kind = T_IDENT;
        t->len = (L->p + 1 < L->end && L->p[1] == '=') ? 2 : 1;
        if (ch == '!' && t->len == 1) {
            t->kind = T_ERROR;
            lex_error(L, t->loc, "unexpected character '!'");
            sl_err_hint("did you mean '!='?");
            L->p++;
            return;
        }
        t->loc.len = (int)t->len;
        L->p += t->len;
        return;
    case ':': t->kind = T_COLON; L->p++; return;
    case '|': t->kind = T_PIPE; L->p++; return;
    case '"': {
        const char *p = L->p + 1;
        while (p < L->end && *p != '"' && *p != '\n') {
            if (*p == '\\' && p + 1 < L->end && p[1] != '\n') p++;
            p++;
        }
        if (p >= L->end || *p != '"') {
            lex_error(L, t->loc, "unterminated string");
            sl_err_hint("close the string with \" on the same line");
            t->kind = T_ERROR;
            return;
        }
        t->kind = T_STRING;
        t->len = (size_t)(p + 1 - L->p);
        L->p = p + 1;
        t->loc.len = (int)t->len;
        return;
    }
    default: break;
    }
    if (isdigit((unsigned char)ch) ||
        ((ch == '-' || ch == '+') && L->p + 1 < L->end &&
         (isdigit((unsigned char)L->p[1]) || (L->p[1] == '.' && L->p + 2 < L->end && isdigit((unsigned char)L->p[2]))))) {
        lex_number(L, t);
        t->loc.len = (int)t->len;
        return;
    }
    if (ident_start((unsigned char)ch)) {
        const char *p = L->p;
        while (p < L->end && ident_char((unsigned char)*p)) p++;
        t->kind = T_IDENT;
        t->len = (size_t)(p - L->p);
        t->loc.len = (int)t->len;
        L->p = p;
        return;
    }
    t->kind = T_ERROR;
    if (isprint((unsigned char)ch)) lex_error(L, t->loc, "unexpected character '%c'", ch);
    else lex_error(L, t->loc, "unexpected byte 0x%02x", (unsigned char)ch);
    L->p++;
}

static void advance(lexer *L) {
    if (L->have_ahead) {
        L->tok = L->ahead;
        L->have_ahead = false;
    } else {
        lex_next(L, &L->tok);
    }
}

static const token *peek(lexer *L) {
    if (!L->have_ahead) {
        lex_next(L, &L->ahead);
        L->have_ahead = true;
    }
    return &L->ahead;
}

/* ---- values ---- */

static sl_status number_value(lexer *L, const token *t, sl_cfg_value *v) {
    char lit[128];
    if (t->len >= sizeof lit) return lex_error(L, t->loc, "number literal too long");
    memcpy(lit, t->start, t->len);
    lit[t->len] = 0;
    v->kind = SL_CV_NUMBER;
    v->text = arena_strndup(L->c, lit, t->len);
    const char *digits = lit + (lit[0] == '-' || lit[0] == '+');
    if (digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
        lex_error(L, t->loc, "hexadecimal number '%s': write it in decimal", lit);
        return L->err; /* strtod would read 0xff as 255, strtoll as 0 */
    }
    char *end;
    errno = 0;
    double a = strtod(lit, &end);
    if (end == lit) return lex_error(L, t->loc, "malformed number '%s'", lit);
    if (*end == '/') { /* fraction */
        char *end2;
        double b = strtod(end + 1, &end2);
        if (end2 == end + 1 || *end2) return lex_error(L, t->loc, "malformed fraction '%s'", lit);
        if (b == 0) return lex_error(L, t->loc, "division by zero in '%s'", lit);
        v->num = a / b;
        v->unit = "";
        v->is_int = false;
        return SL_OK;
    }
    const char *unit = end;
    const sl__cfg_unit *u = sl__cfg_find_unit(unit);
    if (!u) {
        lex_error(L, t->loc, "unknown unit '%s' in '%s'", unit, lit);
        sl_err_hint("units are K M G T, KB MB GB TB, KiB MiB GiB TiB, B, s ms us ns min h, and %%");
        return L->err;
    }
    v->unit = arena_strndup(L->c, unit, strlen(unit));
    v->num = a * u->mult;
    if (!isfinite(v->num)) return lex_error(L, t->loc, "number '%s' is out of range", lit);
    /* integral when the literal's exact value is (not its double: 9007199254740993 stays itself) */
    int64_t iv = 0;
    v->is_int = sl__cfg_literal_int(lit, &iv) == SL_OK;
    v->inum = iv;
    return SL_OK;
}

static sl_status shape_value(lexer *L, const token *t, sl_cfg_value *v) {
    int n = 1;
    for (size_t i = 0; i < t->len; i++) n += t->start[i] == 'x';
    int64_t *dims = arena_alloc(L->c, sizeof *dims * (size_t)n);
    if (!dims) return L->err = sl_err(SL_ENOMEM, "out of memory parsing config");
    const char *p = t->start, *end = t->start + t->len;
    for (int i = 0; i < n; i++) {
        if (p >= end || !isdigit((unsigned char)*p))
            return lex_error(L, t->loc, "malformed shape '%.*s'", (int)t->len, t->start);
        int64_t d = 0;
        while (p < end && isdigit((unsigned char)*p)) {
            if (d > (INT64_MAX - 9) / 10) return lex_error(L, t->loc, "shape dimension too large");
            d = d * 10 + (*p++ - '0');
        }
        dims[i] = d;
        if (i + 1 < n) {
            if (p >= end || *p != 'x') return lex_error(L, t->loc, "malformed shape '%.*s'", (int)t->len, t->start);
            p++;
        }
    }
    if (p != end) return lex_error(L, t->loc, "malformed shape '%.*s'", (int)t->len, t->start);
    v->kind = SL_CV_SHAPE;
    v->ndims = n;
    v->dims = dims;
    v->text = arena_strndup(L->c, t->start, t->len);
    return SL_OK;
}

static sl_status string_value(lexer *L, const token *t, sl_cfg_value *v) {
    char *out = arena_alloc(L->c, t->len);
    if (!out) return L->err = sl_err(SL_ENOMEM, "out of memory parsing config");
    size_t n = 0;
    for (size_t i = 1; i + 1 < t->len; i++) {
        char ch = t->start[i];
        if (ch != '\\') { out[n++] = ch; continue; }
        ch = t->start[++i];
        switch (ch) {
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case '\\': out[n++] = '\\'; break;
        case '"': out[n++] = '"'; break;
        default: {
            sl_cfg_loc loc = t->loc;
            loc.col += (int)i - 1;
            loc.len = 2;
            lex_error(L, loc, "unknown escape '\\%c' in string", ch);
            sl_err_hint("the escapes are \\\" \\\\ \\n \\t \\r");
            return L->err;
        }
        }
    }
    out[n] = 0;
    v->kind = SL_CV_STRING;
    v->text = out;
    return SL_OK;
}

/* growable temporary vector of arguments, copied into the arena when done */
typedef struct {
    sl_cfg_arg *a;
    int n, cap;
} argvec;

static sl_status argvec_push(lexer *L, argvec *av, const sl_cfg_arg *arg) {
    if (av->n == av->cap) {
        int cap = av->cap ? av->cap * 2 : 8;
        sl_cfg_arg *a = realloc(av->a, sizeof *a * (size_t)cap);
        if (!a) return L->err = sl_err(SL_ENOMEM, "out of memory parsing config");
        av->a = a;
        av->cap = cap;
    }
    av->a[av->n++] = *arg;
    return SL_OK;
}

static const sl_cfg_arg *argvec_commit(lexer *L, argvec *av) {
    sl_cfg_arg *a = NULL;
    if (av->n) {
        a = arena_alloc(L->c, sizeof *a * (size_t)av->n);
        if (a) memcpy(a, av->a, sizeof *a * (size_t)av->n);
        else L->err = sl_err(SL_ENOMEM, "out of memory parsing config");
    }
    free(av->a);
    av->a = NULL;
    return a;
}

static sl_status parse_value(lexer *L, sl_cfg_value *v, int depth);

/* A key given twice on one statement (or in one call) is a mistake whichever copy was
 * meant: refuse it, naming both spots (sl__first_repeat stays O(n log n) for hostile input
 * with thousands of options on a line). */
static sl_status check_dup_keys(lexer *L, const sl_cfg_arg *args, int n, const char *what, const char *call) {
    if (n < 2) return SL_OK;
    const char *few[16], **keys = n <= 16 ? few : malloc(sizeof *keys * (size_t)n);
    if (!keys) return L->err = sl_err(SL_ENOMEM, "out of memory parsing config");
    for (int i = 0; i < n; i++) keys[i] = args[i].key;
    size_t second, first; /* the repeat that comes first in the file */
    sl_status s = sl__first_repeat(keys, (size_t)n, &second, &first);
    if (keys != few) free(keys);
    if (s) return L->err = sl_err(SL_ENOMEM, "out of memory parsing config");
    if (second == (size_t)n) return SL_OK;
    const sl_cfg_arg *a = &args[second], *b = &args[first];
    sl_cfg_loc loc = a->kloc;
    loc.len = (int)strlen(a->key);
    if (loc.len < 1) loc.len = 1;
    lex_error(L, loc, "%s '%s'%s%s%s given twice (first at %s:%d:%d)", what, a->key, call ? " of '" : "",
              call ? call : "", call ? "'" : "", L->c->filename, b->kloc.line, b->kloc.col);
    sl_err_hint("keep one of them: a repeated %s is refused rather than one copy silently winning", what);
    return L->err;
}

/* Items of a call "( ... )" or list "[ ... ]"; the opening token is current. */
static sl_status parse_items(lexer *L, sl_cfg_value *v, tok_kind close, bool keyed, int depth) {
    token open = L->tok;
    argvec av = {0};
    advance(L); /* past the opener */
    while (!L->err && L->tok.kind != close) {
        if (L->tok.kind == T_EOF || L->tok.kind == T_RBRACE || L->tok.kind == T_ERROR) {
            char b[64];
            lex_error(L, L->tok.loc, "expected '%c' to close the %s opened at line %d, column %d, found %s",
                      close == T_RPAREN ? ')' : ']', close == T_RPAREN ? "call" : "list",
                      open.loc.line, open.loc.col, tok_desc(&L->tok, b, sizeof b));
            break;
        }
        sl_cfg_arg arg = {0};
        if (keyed && L->tok.kind == T_IDENT &&
            (peek(L)->kind == T_COLON || peek(L)->kind == T_EQ)) {
            arg.key = arena_strndup(L->c, L->tok.start, L->tok.len);
            arg.kloc = L->tok.loc;
            advance(L);
            arg.sep = L->tok.kind == T_COLON ? ':' : '=';
            advance(L);
        }
        if (parse_value(L, &arg.v, depth + 1)) break;
        if (argvec_push(L, &av, &arg)) break;
        if (L->tok.kind == T_COMMA) advance(L);
        else if (L->tok.kind != close) {
            char b[64];
            lex_error(L, L->tok.loc, "expected ',' or '%c' in the %s opened at line %d, column %d, found %s",
                      close == T_RPAREN ? ')' : ']', close == T_RPAREN ? "call" : "list",
                      open.loc.line, open.loc.col, tok_desc(&L->tok, b, sizeof b));
        }
    }
    if (!L->err && keyed) check_dup_keys(L, av.a, av.n, "argument", v->text);
    v->nargs = av.n;
    v->args = argvec_commit(L, &av);
    if (!L->err) advance(L); /* past the closer */
    return L->err;
}

/* One value starting at the current token; leaves the token after it current. */
static sl_status parse_value(lexer *L, sl_cfg_value *v, int depth) {
    char b[64];
    memset(v, 0, sizeof *v);
    v->loc = L->tok.loc;
    if (depth > MAX_DEPTH) return lex_error(L, L->tok.loc, "values nested deeper than %d levels", MAX_DEPTH);
    token t = L->tok;
    switch (t.kind) {
    case T_NUMBER: if (number_value(L, &t, v)) return L->err; advance(L); return SL_OK;
    case T_SHAPE: if (shape_value(L, &t, v)) return L->err; advance(L); return SL_OK;
    case T_STRING: if (string_value(L, &t, v)) return L->err; advance(L); return SL_OK;
    case T_LBRACK:
        v->kind = SL_CV_LIST;
        v->text = "[";
        return parse_items(L, v, T_RBRACK, false, depth);
    case T_IDENT:
        v->text = arena_strndup(L->c, t.start, t.len);
        if (!v->text) return L->err = sl_err(SL_ENOMEM, "out of memory parsing config");
        if (peek(L)->kind == T_LPAREN) {
            v->kind = SL_CV_CALL;
            advance(L);
            return parse_items(L, v, T_RPAREN, true, depth);
        }
        v->kind = SL_CV_IDENT;
        advance(L);
        return SL_OK;
    case T_ERROR: return L->err;
    default:
        return lex_error(L, t.loc, "expected a value, found %s", tok_desc(&t, b, sizeof b));
    }
}

/* ---- statements ---- */

typedef struct {
    sl_cfg_stmt *s;
    int n, cap;
} stmtvec;

static sl_status parse_block(lexer *L, stmtvec *out, bool nested, int depth, sl_cfg_loc open);

/* A statement's arguments, from the current token to the end of the line, a '{' or a '}'
 * (not consumed), into st->args / st->nargs (st->name names it in messages). */
static sl_status parse_args(lexer *L, sl_cfg_stmt *st, int depth) {
    char b[64];
    argvec av = {0};
    while (!L->err) {
        tok_kind k = L->tok.kind;
        if (k == T_NL || k == T_EOF || k == T_LBRACE || k == T_RBRACE) break;
        sl_cfg_arg arg = {0};
        if (k == T_PIPE) {
            arg.v.kind = SL_CV_PIPE;
            arg.v.loc = L->tok.loc;
            arg.v.text = "|";
            advance(L);
        } else if (k == T_IDENT && peek(L)->kind == T_EQ) {
            arg.key = arena_strndup(L->c, L->tok.start, L->tok.len);
            arg.kloc = L->tok.loc;
            arg.sep = '=';
            advance(L);
            advance(L);
            if (L->tok.kind == T_NL || L->tok.kind == T_EOF) {
                lex_error(L, L->tok.loc, "option '%s' has no value after '='", arg.key);
                sl_err_hint("write %s=VALUE with no space after '='", arg.key);
                break;
            }
            if (parse_value(L, &arg.v, depth + 1)) break;
        } else if (k == T_EQ || k == T_COLON || k == T_COMMA || k == T_RPAREN || k == T_RBRACK) {
            lex_error(L, L->tok.loc, "unexpected %s in statement '%s'", tok_desc(&L->tok, b, sizeof b), st->name);
            if (k == T_EQ) sl_err_hint("options are written key=value, the key a plain word");
            break;
        } else if (parse_value(L, &arg.v, depth + 1)) {
            break;
        }
        if (argvec_push(L, &av, &arg)) break;
    }
    if (!L->err) check_dup_keys(L, av.a, av.n, "option", NULL);
    st->nargs = av.n;
    st->args = argvec_commit(L, &av);
    return L->err;
}

static sl_status parse_statement(lexer *L, sl_cfg_stmt *st, int depth) {
    char b[64];
    memset(st, 0, sizeof *st);
    st->name = arena_strndup(L->c, L->tok.start, L->tok.len);
    st->loc = L->tok.loc;
    advance(L);
    if (parse_args(L, st, depth)) return L->err;
    if (L->tok.kind == T_LBRACE) {
        sl_cfg_loc open = L->tok.loc;
        advance(L);
        stmtvec body = {0};
        if (parse_block(L, &body, true, depth + 1, open)) return L->err;
        st->has_body = true;
        st->nbody = body.n;
        st->body = body.s;
        advance(L); /* past '}' */
        if (L->tok.kind != T_NL && L->tok.kind != T_EOF && L->tok.kind != T_RBRACE)
            return lex_error(L, L->tok.loc, "expected end of line after '}', found %s", tok_desc(&L->tok, b, sizeof b));
    }
    return SL_OK;
}

/* Statements until '}' (nested) or end of file; on success the '}' or EOF is current and
 * *out holds an arena array. */
static sl_status parse_block(lexer *L, stmtvec *out, bool nested, int depth, sl_cfg_loc open) {
    char b[64];
    stmtvec v = {0};
    if (depth > MAX_DEPTH) return lex_error(L, L->tok.loc, "blocks nested deeper than %d levels", MAX_DEPTH);
    for (;;) {
        while (L->tok.kind == T_NL) advance(L);
        if (L->err) break;
        if (L->tok.kind == T_EOF) {
            if (nested) {
                lex_error(L, open, "this '{' is never closed");
                sl_err_hint("add the missing '}'");
            }
            break;
        }
        if (L->tok.kind == T_RBRACE) {
            if (!nested) {
                lex_error(L, L->tok.loc, "'}' without a matching '{'");
            }
            break;
        }
        if (L->tok.kind != T_IDENT) {
            if (L->tok.kind != T_ERROR)
                lex_error(L, L->tok.loc, "expected a statement name, found %s", tok_desc(&L->tok, b, sizeof b));
            break;
        }
        if (v.n == v.cap) {
            int cap = v.cap ? v.cap * 2 : 8;
            sl_cfg_stmt *s = realloc(v.s, sizeof *s * (size_t)cap);
            if (!s) { L->err = sl_err(SL_ENOMEM, "out of memory parsing config"); break; }
            v.s = s;
            v.cap = cap;
        }
        if (parse_statement(L, &v.s[v.n], depth)) break;
        v.n++;
    }
    if (!L->err && v.n) {
        sl_cfg_stmt *s = arena_alloc(L->c, sizeof *s * (size_t)v.n);
        if (!s) L->err = sl_err(SL_ENOMEM, "out of memory parsing config");
        else memcpy(s, v.s, sizeof *s * (size_t)v.n);
        free(v.s);
        out->s = s;
        out->n = v.n;
    } else {
        free(v.s);
        out->s = NULL;
        out->n = 0;
    }
    return L->err;
}

static sl_cfg *cfg_new(const char *text, size_t len, const char *filename) {
    sl_cfg *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->filename = strdup(filename ? filename : "<config>");
    c->src = malloc(len + 1);
    if (!c->filename || !c->src) {
        sl_cfg_free(c);
        return NULL;
    }
    memcpy(c->src, text, len);
    c->src[len] = 0;
    c->src_len = len;
    return c;
}

static void lexer_init(lexer *L, sl_cfg *c, const char *text, size_t len) {
    memset(L, 0, sizeof *L);
    L->c = c;
    L->p = text;
    L->end = text + len;
    L->line = 1;
    L->line_start = text;
}

sl_status sl_cfg_parse(const char *text, size_t len, const char *filename, sl_cfg **out) {
    *out = NULL;
    sl_cfg *c = cfg_new(text, len, filename);
    if (!c) return sl_err(SL_ENOMEM, "out of memory parsing config");
    lexer L;
    lexer_init(&L, c, c->src, len); /* lex the NUL-terminated copy */
    /* A NUL byte would silently cut a string (or hide in a comment): a config is text, so
     * any NUL is an error at its line and column. */
    const char *nul = memchr(c->src, 0, len);
    if (nul) {
        for (const char *p = c->src; p < nul; p++)
            if (*p == '\n') {
                L.line++;
                L.line_start = p + 1;
            }
        lex_error(&L, here(&L, nul, 1), "NUL byte (0x00) in the config");
        sl_err_hint("a config is text: remove the NUL byte (a file saved as UTF-16, or a binary file, has them)");
        sl_cfg_free(c);
        return SL_EINVAL;
    }
    advance(&L);
    stmtvec root = {0};
    sl_cfg_loc none = {1, 1, 1};
    if (parse_block(&L, &root, false, 0, none) == SL_OK && L.tok.kind == T_RBRACE) {
        lex_error(&L, L.tok.loc, "'}' without a matching '{'");
    }
    if (L.err) {
        sl_status s = L.err;
        sl_cfg_free(c);
        return s;
    }
    c->root = root.s;
    c->nroot = root.n;
    *out = c;
    return SL_OK;
}

sl_status sl_cfg_parse_file(const char *path, sl_cfg **out) {
    *out = NULL;
    char *buf;
    size_t n;
    sl_status s = sl_file_read_all(path, "config", SL_CFG_MAX_BYTES, "configs are limited to 16 MiB "
                                   "(they are a few KB of text): is this the right file?", &buf, &n);
    if (s) return s;
    s = sl_cfg_parse(buf, n, path, out);
    free(buf);
    return s;
}

void sl_cfg_free(sl_cfg *c) {
    if (!c) return;
    while (c->chunks) {
        chunk *k = c->chunks;
        c->chunks = k->next;
        free(k);
    }
    free(c->filename);
    free(c->src);
    free(c);
}

const sl_cfg_stmt *sl_cfg_root(const sl_cfg *c, int *n) {
    *n = c->nroot;
    return c->root;
}

const char *sl_cfg_filename(const sl_cfg *c) { return c->filename; }

/* ---- overrides ---- */

#define MAX_PATH 32   /* parts of an override's path */
#define MAX_LISTED 8  /* candidates named in an "ambiguous path" message */

/* The first positional argument when it is a word or a string (what names a block), or NULL. */
static const char *first_word(const sl_cfg_stmt *s) {
    const sl_cfg_value *v = sl_cfg_pos(s, 0);
    return v && (v->kind == SL_CV_IDENT || v->kind == SL_CV_STRING) ? v->text : NULL;
}

/* The statements of list named `name` (and, with word non-NULL, whose first word is `word`):
 * how many there are; the first MAX_LISTED of them in m. */
static int matches(sl_cfg_stmt *list, int n, const char *name, const char *word, sl_cfg_stmt **m) {
    int nm = 0;
    for (int k = 0; k < n; k++) {
        if (strcmp(list[k].name, name) != 0) continue;
        if (word) {
            const char *w = first_word(&list[k]);
            if (!w || strcmp(w, word) != 0) continue;
        }
        if (nm < MAX_LISTED) m[nm] = &list[k];
        nm++;
    }
    return nm;
}

/* A path part that matches several statements: going to the first would silently change
 * the wrong one (`--set pipeline.batch=7` with pipelines train and test), so refuse it,
 * name the candidates, and say the paths that pick each when their first words tell them
 * apart. comps[i] is the ambiguous part (with comps[i+1] when `two`: the same name and
 * first word twice). */
static sl_status ambiguous(const sl_cfg *c, const char *assignment, char **comps, int nc, int i, bool two,
                           sl_cfg_stmt **m, int nm) {
    char msg[1536], say[1024];
    size_t n = 0, ns = 0;
    int shown = nm < MAX_LISTED ? nm : MAX_LISTED;
    bool distinct = !two && nm <= MAX_LISTED;
    for (int k = 0; k < shown && distinct; k++) {
        const char *w = first_word(m[k]);
        if (!w || strchr(w, '.') || !*w) distinct = false;
        for (int j = 0; j < k && distinct; j++)
            if (strcmp(first_word(m[j]), w) == 0) distinct = false;
    }
#define ADD(buf, len, ...)                                                                     \
    do {                                                                                       \
        if (len < sizeof buf) len += (size_t)snprintf(buf + len, sizeof buf - len, __VA_ARGS__); \
    } while (0)
    for (int p = 0; p < nc; p++) ADD(msg, n, "%s%s", p ? "." : "", comps[p]);
    ADD(msg, n, " matches ");
    for (int k = 0; k < shown; k++) {
        const char *sep = k == 0 ? "" : (k == nm - 1) ? " and " : ", ";
        const char *w = first_word(m[k]);
        if (distinct) ADD(msg, n, "%s%s '%s'", sep, m[k]->name, w);
        else if (w) ADD(msg, n, "%s%s '%s' at %s:%d:%d", sep, m[k]->name, w, c->filename, m[k]->loc.line, m[k]->loc.col);
        else ADD(msg, n, "%s%s at %s:%d:%d", sep, m[k]->name, c->filename, m[k]->loc.line, m[k]->loc.col);
    }
    if (nm > shown) ADD(msg, n, " and %d more", nm - shown);
    if (distinct) {
        for (int k = 0; k < nm; k++) {
            ADD(say, ns, "%s", k == 0 ? "" : (k == nm - 1) ? " or " : ", ");
            for (int p = 0; p <= i; p++) ADD(say, ns, "%s%s", p ? "." : "", comps[p]);
            ADD(say, ns, ".%s", first_word(m[k]));
            for (int p = i + 1; p < nc; p++) ADD(say, ns, ".%s", comps[p]);
        }
        if (ns >= sizeof say) snprintf(say + sizeof say - 4, 4, "...");
        ADD(msg, n, ": say %s", say);
    }
#undef ADD
    if (n >= sizeof msg) snprintf(msg + sizeof msg - 4, 4, "...");
    sl_err(SL_EINVAL, "override '%s': %s", assignment, msg);
    if (!distinct) sl_err_hint("--set cannot tell these statements apart: edit the file instead");
    return SL_EINVAL;
}

/* Values that came from an override are not in the file: line 0 everywhere inside them, so
 * an interpreter's message about one says so instead of quoting an unrelated line. */
static void mark_override(sl_cfg_value *v) {
    v->loc.line = 0;
    for (int k = 0; k < v->nargs; k++) {
        sl_cfg_arg *a = (sl_cfg_arg *)&v->args[k];
        a->kloc.line = 0;
        mark_override(&a->v);
    }
}

/* What an override's VALUE asks for: one value, removal (`-`), or a whole argument list
 * (`(ARGS...)`). */
typedef enum { SET_VALUE, SET_REMOVE, SET_ARGS } set_kind;

/* "nothing named KEY in STMT to remove", with a did-you-mean over its options and statements */
static sl_status nothing_to_remove(const char *assignment, const sl_cfg_stmt *cur, const char *key) {
    const char *cands[64];
    int n = 0;
    for (int k = 0; k < cur->nargs && n < 64; k++)
        if (cur->args[k].key) cands[n++] = cur->args[k].key;
    for (int k = 0; k < cur->nbody && n < 64; k++) cands[n++] = cur->body[k].name;
    sl_err(SL_EINVAL, "override '%s': nothing named '%s' in %s to remove", assignment, key, cur->name);
    const char *sug = sl_suggest(key, cands, n);
    if (sug) sl_err_hint("did you mean '%s'?", sug);
    return SL_EINVAL;
}

/* An override's value: VALUE (SET_VALUE) into *val, or (ARGS...) (SET_ARGS) into *given,
 * named after the path's last part. Parsed in a scratch lexer whose strings land in c's
 * arena, with messages quoting the value (as "--set"); everything parsed is marked as an
 * override. An error is prefixed with the override's path. */
static sl_status parse_override(sl_cfg *c, const char *path, const char *vtext, size_t vlen, set_kind kind,
                                sl_cfg_value *val, sl_cfg_stmt *given) {
    lexer L;
    lexer_init(&L, c, vtext, vlen);
    char *saved_src = c->src;
    size_t saved_len = c->src_len;
    char *saved_name = c->filename;
    char label[64] = "--set";
    c->src = (char *)vtext; /* so messages quote the value */
    c->src_len = vlen;
    c->filename = label;
    sl_status s;
    if (kind == SET_VALUE) {
        advance(&L);
        s = parse_value(&L, val, 0);
        if (!s && L.tok.kind != T_EOF) s = lex_error(&L, L.tok.loc, "unexpected text after the value");
    } else if (vtext[vlen - 1] != ')') {
        s = lex_error(&L, here(&L, vtext, 1), "this '(' is never closed");
        sl_err_hint("write PATH=(ARGS...), the arguments as on the statement's line, ending with ')'");
    } else {
        L.end = vtext + vlen - 1; /* lex between the parentheses */
        L.p = vtext + 1;
        advance(&L);
        const char *slash = strrchr(path, '.');
        given->name = slash ? slash + 1 : path;
        s = parse_args(&L, given, 0);
        if (!s && L.tok.kind != T_EOF) {
            char b[64];
            s = lex_error(&L, L.tok.loc, "unexpected %s in an argument list", tok_desc(&L.tok, b, sizeof b));
            sl_err_hint("PATH=(ARGS...) sets one statement's arguments: no ';', newline or { } body");
        }
    }
    c->src = saved_src;
    c->src_len = saved_len;
    c->filename = saved_name;
    if (s) {
        sl_err_prefix("override '%s': ", path);
        return s;
    }
    mark_override(val);
    for (int k = 0; k < given->nargs; k++) {
        sl_cfg_arg *a = (sl_cfg_arg *)&given->args[k];
        a->kloc.line = 0;
        mark_override(&a->v);
    }
    return SL_OK;
}

/* The path's last part `key` is not a statement of cur: remove (SET_REMOVE) or set the
 * option key of cur, or add a statement `key` with the value or arguments to cur's body. */
static sl_status set_in(sl_cfg *c, const char *assignment, sl_cfg_stmt *cur, const char *key, set_kind kind,
                        const sl_cfg_value *val, const sl_cfg_stmt *given) {
    int opt = -1;
    for (int k = 0; k < cur->nargs; k++)
        if (cur->args[k].key && strcmp(cur->args[k].key, key) == 0) opt = k;
    if (kind == SET_REMOVE) {
        if (opt < 0) return nothing_to_remove(assignment, cur, key);
        sl_cfg_arg *args = (sl_cfg_arg *)cur->args;
        memmove(args + opt, args + opt + 1, sizeof *args * (size_t)(cur->nargs - opt - 1));
        cur->nargs--;
        return SL_OK;
    }
    if (cur->has_body) { /* append "key value" (or "key ARGS...") to the body */
        sl_cfg_stmt *nb = arena_alloc(c, sizeof *nb * (size_t)(cur->nbody + 1));
        sl_cfg_arg *a = kind == SET_VALUE ? arena_alloc(c, sizeof *a) : NULL;
        char *name = arena_strndup(c, key, strlen(key));
        if (!nb || (kind == SET_VALUE && !a) || !name) return sl_err(SL_ENOMEM, "out of memory");
        if (cur->nbody) memcpy(nb, cur->body, sizeof *nb * (size_t)cur->nbody);
        memset(&nb[cur->nbody], 0, sizeof *nb);
        nb[cur->nbody].name = name;
        nb[cur->nbody].loc = (sl_cfg_loc){0, 1, 1};
        if (kind == SET_VALUE) {
            memset(a, 0, sizeof *a);
            a->v = *val;
            nb[cur->nbody].nargs = 1;
            nb[cur->nbody].args = a;
        } else {
            nb[cur->nbody].nargs = given->nargs;
            nb[cur->nbody].args = given->args;
        }
        cur->body = nb;
        cur->nbody++;
        return SL_OK;
    }
    if (kind == SET_ARGS) {
        if (opt >= 0) sl_err(SL_EINVAL, "override '%s': '%s' is an option of %s: it takes one value", assignment, key, cur->name);
        else sl_err(SL_EINVAL, "override '%s': no '%s' statement inside %s", assignment, key, cur->name);
        sl_err_hint("PATH=(ARGS...) replaces a statement's arguments; an option is set with PATH=VALUE");
        return SL_EINVAL;
    }
    if (opt >= 0) {
        ((sl_cfg_arg *)cur->args)[opt].v = *val;
        return SL_OK;
    }
    sl_cfg_arg *a = arena_alloc(c, sizeof *a * (size_t)(cur->nargs + 1));
    char *k2 = arena_strndup(c, key, strlen(key));
    if (!a || !k2) return sl_err(SL_ENOMEM, "out of memory");
    if (cur->nargs) memcpy(a, cur->args, sizeof *a * (size_t)cur->nargs);
    memset(&a[cur->nargs], 0, sizeof *a);
    a[cur->nargs].key = k2;
    a[cur->nargs].sep = '=';
    a[cur->nargs].v = *val;
    cur->args = a;
    cur->nargs++;
    return SL_OK;
}

sl_status sl_cfg_set(sl_cfg *c, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return sl_err(SL_EINVAL, "override '%s' is not PATH=VALUE", assignment);
    char path[512];
    size_t plen = (size_t)(eq - assignment);
    if (plen >= sizeof path) return sl_err(SL_EINVAL, "override path too long");
    memcpy(path, assignment, plen);
    path[plen] = 0;

    /* the value: parsed in a scratch lexer whose strings land in this arena. `-` is not a
     * value of the language (a lone '-' is a syntax error) and neither is a bare '(', so
     * both are free to mean "remove" and "these arguments". */
    const char *vtext = eq + 1;
    size_t vlen = strlen(vtext);
    set_kind kind = vlen == 1 && vtext[0] == '-' ? SET_REMOVE : vlen >= 1 && vtext[0] == '(' ? SET_ARGS : SET_VALUE;
    sl_cfg_value val;
    memset(&val, 0, sizeof val);
    sl_cfg_stmt given; /* SET_ARGS: the arguments */
    memset(&given, 0, sizeof given);
    if (kind != SET_REMOVE) {
        sl_status s = parse_override(c, path, vtext, vlen, kind, &val, &given);
        if (s) return s;
    }

    char *comps[MAX_PATH];
    int nc = 0;
    if (path[0] == '.' || path[plen - 1] == '.' || strstr(path, ".."))
        return sl_err(SL_EINVAL, "override '%s': the path has an empty part", assignment);
    /* split at the dots in place (not strtok: its state is shared by every thread, and
     * replicas in one process set their configs at once) */
    for (char *tok = path; tok;) {
        char *dot = strchr(tok, '.');
        if (dot) *dot = 0;
        if (nc == MAX_PATH)
            return sl_err(SL_EINVAL, "override '%s': the path has more than %d parts", assignment, MAX_PATH);
        comps[nc++] = tok;
        tok = dot ? dot + 1 : NULL;
    }
    if (nc < 1) return sl_err(SL_EINVAL, "override '%s' has an empty path", assignment);

    /* walk: `owner`/`owner_n` is the list the next statement is found in (for removal) */
    sl_cfg_stmt **owner = &c->root;
    int *owner_n = &c->nroot;
    sl_cfg_stmt *cur = NULL, *target = NULL;
    bool target_two = false; /* the target was named by two parts (pipeline.train) */
    int i = 0;
    while (i < nc) {
        bool last = i == nc - 1;
        sl_cfg_stmt *m[MAX_LISTED];
        int nm = 0;
        /* prefer statements whose first word matches the next component (pipeline train) */
        if (!last) nm = matches(*owner, *owner_n, comps[i], comps[i + 1], m);
        bool consumed_two = nm > 0;
        if (nm == 0) nm = matches(*owner, *owner_n, comps[i], NULL, m);
        if (nm > 1) return ambiguous(c, assignment, comps, nc, i, consumed_two, m, nm);
        sl_cfg_stmt *found = nm ? m[0] : NULL;
        if (!found) {
            if (last && cur) break; /* an option of cur, or a new statement in its body */
            return sl_err(SL_EINVAL, "override '%s': no '%s' statement%s%s", assignment, comps[i],
                          cur ? " inside " : "", cur ? cur->name : "");
        }
        i += consumed_two ? 2 : 1;
        if (i == nc) {
            target = found;
            target_two = consumed_two;
            break;
        }
        cur = found;
        owner = (sl_cfg_stmt **)&cur->body;
        owner_n = &cur->nbody;
    }

    if (target) { /* the path names a statement */
        if (kind == SET_REMOVE) {
            size_t at = (size_t)(target - *owner);
            memmove(target, target + 1, sizeof *target * ((size_t)*owner_n - at - 1));
            (*owner_n)--;
            return SL_OK;
        }
        if (kind == SET_ARGS) {
            target->args = given.args;
            target->nargs = given.nargs;
            return SL_OK;
        }
        if (target_two) {
            sl_err(SL_EINVAL, "override '%s' names a statement, not a value inside it", assignment);
            sl_err_hint("PATH=- removes it; PATH=(ARGS...) replaces its arguments");
            return SL_EINVAL;
        }
        /* replace (or add) the first positional argument */
        for (int k = 0; k < target->nargs; k++)
            if (!target->args[k].key && target->args[k].v.kind != SL_CV_PIPE) {
                ((sl_cfg_arg *)target->args)[k].v = val;
                return SL_OK;
            }
        sl_cfg_arg *a = arena_alloc(c, sizeof *a * (size_t)(target->nargs + 1));
        if (!a) return sl_err(SL_ENOMEM, "out of memory");
        memset(a, 0, sizeof *a);
        a[0].v = val;
        if (target->nargs) memcpy(a + 1, target->args, sizeof *a * (size_t)target->nargs);
        target->args = a;
        target->nargs++;
        return SL_OK;
    }

    /* comps[nc-1] is not a statement of cur: one of its options, or a new statement */
    return set_in(c, assignment, cur, comps[nc - 1], kind, &val, &given);
}
