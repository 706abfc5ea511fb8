/* JSON in core (core/json.c): a strict reader (RFC 8259, no extensions) for what launchers
 * hand us (TF_CONFIG), and the string escaping every JSON writer in Sluice uses (stats
 * files, traces, TF_CONFIG, checkpoint headers, Example printing).
 *
 * Workload: small documents (bytes to a few MB), parsed once; strings escaped one at a
 * time as a file is written. */
#ifndef SLUICE_JSON_H
#define SLUICE_JSON_H

#include <stddef.h>
#include <stdio.h>

#include "sluice/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- reading ---- */

typedef enum sl_json_kind {
    SL_JSON_NULL = 1, SL_JSON_BOOL, SL_JSON_NUMBER, SL_JSON_STRING, SL_JSON_ARRAY, SL_JSON_OBJECT
} sl_json_kind;

typedef struct sl_json sl_json;
struct sl_json {
    sl_json_kind kind;
    size_t offset;        /* byte offset where the value starts */
    int b;                /* BOOL */
    double num;           /* NUMBER */
    const char *str;      /* STRING (UTF-8, NUL-terminated; may contain no NULs: \u0000 is rejected) */
    size_t len;           /* STRING: bytes; ARRAY / OBJECT: number of items */
    sl_json *items;       /* ARRAY: the values; OBJECT: the values */
    const char **keys;    /* OBJECT: the keys (duplicates are rejected) */
};

/* Parse len bytes (RFC 8259, no extensions; nesting depth <= 64). `what` labels messages
 * ("TF_CONFIG"). On success *out is the root (free with sl_json_free). On failure *out is
 * NULL and the status is SL_ECORRUPT with "WHAT: byte N: what was wrong", or SL_ENOMEM. */
sl_status sl_json_parse(const char *text, size_t len, const char *what, sl_json **out);
void sl_json_free(sl_json *root); /* NULL is a no-op */
/* The member `key` of an object, or NULL (also when o is not an object). */
const sl_json *sl_json_get(const sl_json *o, const char *key);

/* ---- writing ---- */

/* Where escaped text goes: put(ctx, bytes, n). */
typedef void (*sl_json_put_fn)(void *ctx, const char *bytes, size_t n);

/* Escape flags. 0: '"' and '\\' get a backslash, bytes below 0x20 become \u00XX, every
 * other byte passes through (UTF-8 stays UTF-8). */
#define SL_JSON_ASCII 1u /* Python's json.dumps(ensure_ascii=True): the input is decoded as
                          * UTF-8 (an invalid byte reads as U+FFFD), \" \\ \n \r \t \b \f
                          * are short, every other character outside 0x20..0x7e is \uXXXX
                          * (lowercase hex), past U+FFFF as a surrogate pair */

/* Write s[0..n) as a JSON string literal, quotes included, through put. */
void sl_json_put_str(sl_json_put_fn put, void *ctx, const void *s, size_t n, unsigned flags);

/* The same for a NUL-terminated string to a stdio stream, flags 0. Write errors show in
 * ferror(f), as for fputs. */
void sl_json_fput_str(FILE *f, const char *s);

#ifdef __cplusplus
}
#endif
#endif
