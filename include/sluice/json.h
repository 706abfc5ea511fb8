/* JSON in core (core/json.c): the one JSON reader in Sluice, strict (RFC 8259, no
 * extensions) with byte offsets in every message and a memory budget, for what launchers
 * hand us (TF_CONFIG), stats files read back, and safetensors headers; and the string
 * escaping and text buffer every JSON writer in Sluice uses (stats files, traces,
 * TF_CONFIG, checkpoint headers, Example printing).
 *
 * Workload: documents of bytes to about 100 MB (a checkpoint's header), parsed once;
 * strings escaped one at a time as a file is written. */
#ifndef SLUICE_JSON_H
#define SLUICE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sluice/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- reading ---- */

typedef enum sl_json_kind {
    SL_JSON_NULL = 1, SL_JSON_BOOL, SL_JSON_NUMBER, SL_JSON_STRING, SL_JSON_ARRAY, SL_JSON_OBJECT
} sl_json_kind;

/* One value of the tree. Only the fields of its kind are set; the unions share room (a
 * tree of small values takes about 40 bytes a value). */
typedef struct sl_json sl_json;
struct sl_json {
    size_t offset;           /* byte offset in the text where the value starts */
    size_t len;              /* STRING: bytes; NUMBER: the literal's length in the text;
                              * ARRAY / OBJECT: number of items */
    union {
        double num;          /* NUMBER (an integer past 2^53 rounded: see i) */
        const char **keys;   /* OBJECT: the keys, in the text's order */
    };
    union {
        const char *str;     /* STRING (UTF-8, NUL-terminated; holds no NUL: \u0000 is rejected) */
        sl_json *items;      /* ARRAY: the values; OBJECT: the values (NULL when len is 0) */
        int64_t i;           /* NUMBER when is_int: the exact value */
    };
    sl_json_kind kind;
    bool b;                  /* BOOL */
    bool is_int;             /* NUMBER: written as an integer (no fraction, no exponent) that
                              * fits int64_t: then `i` holds it exactly */
};

/* Options of sl_json_parse_opts; a zeroed struct (or NULL) is sl_json_parse's behaviour. */
#define SL_JSON_KEEP_DUPLICATES (1u << 8) /* an object may repeat a key: all are kept, in
                                           * order, for the caller to judge */
#define SL_JSON_RAW_BYTES (1u << 9)       /* strings may hold bytes that are not UTF-8, kept
                                           * as they are: what the plain writer below passes
                                           * through from a label that is not UTF-8 */
typedef struct sl_json_opts {
    const char *what;        /* labels messages: a file's path, "TF_CONFIG" (NULL: "JSON") */
    const char *prefix;      /* put before the text of every message ("malformed header JSON: ") */
    int64_t base;            /* added to the byte offsets messages give (not to the tree's):
                              * where the text starts in its file */
    const char *end_name;    /* how messages call the end of the text (NULL: "the end of the input") */
    size_t max_bytes;        /* the most the tree may take (0: no limit), counted as: each value
                              * sizeof(sl_json), each object member a key pointer and a key
                              * offset more, each string its decoded bytes and a NUL, each array
                              * and object a size_t more while the text is read */
    const char *max_bytes_text; /* how its message says the limit ("16 times the file's size";
                              * NULL: "N bytes") */
    const char *max_bytes_hint; /* the hint of that message (NULL: none) */
    unsigned flags;          /* SL_JSON_KEEP_DUPLICATES, SL_JSON_RAW_BYTES */
    size_t *end;             /* non-NULL: read one value (after white space) and set *end to the
                              * offset just past it; what follows is left to the caller.
                              * NULL: only white space may follow the value */
} sl_json_opts;

/* Parse len bytes (RFC 8259, no extensions; nesting depth <= 64; text need not be
 * NUL-terminated). The text is read twice: once to check it and count what the tree needs,
 * once to fill a tree of exactly that size, so no more than that (and the max_bytes limit)
 * is ever allocated. On success *out is the root (free with sl_json_free) and *o->end is set.
 * On failure *out is NULL, *o->end is untouched, and the status is SL_ECORRUPT with "WHAT:
 * byte N: PREFIXwhat was wrong" (N counted from o->base: the byte where it was found; a
 * repeated key is found once its object has been read, so an error later in that object is
 * said first), also when the tree would take more than o->max_bytes ("PREFIXits JSON would
 * take more than TEXT in memory", with o->max_bytes_hint); or SL_ENOMEM. */
sl_status sl_json_parse_opts(const char *text, size_t len, const sl_json_opts *o, sl_json **out);

/* sl_json_parse_opts with only `what` set: the whole text is one value. */
sl_status sl_json_parse(const char *text, size_t len, const char *what, sl_json **out);
void sl_json_free(sl_json *root); /* NULL is a no-op */

/* The member `key` of an object (the first, when SL_JSON_KEEP_DUPLICATES kept several), or
 * NULL (also when o is not an object). */
const sl_json *sl_json_get(const sl_json *o, const char *key);

/* The byte offset in the text of the opening quote of object o's key i (i < o->len). */
size_t sl_json_key_offset(const sl_json *o, size_t i);

/* How messages name the byte text[at]: "'x'" for printable ASCII, "byte 0xNN" otherwise (in
 * buf, cap >= 12), or end_name (NULL: "the end of the input") when at >= len. */
const char *sl_json_show(const char *text, size_t len, size_t at, const char *end_name, char *buf, size_t cap);

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

/* ---- a growing text buffer (what the writers build a document in) ---- */

typedef struct sl_json_buf {
    char *p;                 /* the text, NUL-terminated; NULL until the first put; the caller frees it */
    size_t len, cap;         /* bytes of text (without the NUL); bytes allocated */
    bool oom;                /* an allocation failed: every put since was dropped */
} sl_json_buf;

/* Room for `more` bytes and a NUL after the text (capacity doubles from 256). false, with
 * oom set and the text as it was, when it cannot grow (or oom was set already). */
bool sl_json_buf_reserve(sl_json_buf *b, size_t more);
/* Append n bytes (none when oom). */
void sl_json_buf_put(sl_json_buf *b, const char *s, size_t n);
/* Append printf's output, however long. */
void sl_json_buf_printf(sl_json_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* sl_json_buf_put as an sl_json_put_fn (ctx is the sl_json_buf). */
void sl_json_buf_put_fn(void *b, const char *s, size_t n);

/* Append the tree v as compact JSON (no white space): strings and keys through
 * sl_json_put_str with `flags`, objects' keys in their order (repeats kept), an integer
 * (is_int) exactly, any other number with 17 significant digits and a fraction or an
 * exponent, so it reads back as the same double and stays a non-integer. Read back (with
 * SL_JSON_RAW_BYTES for strings that are not UTF-8 under flags 0, SL_JSON_KEEP_DUPLICATES
 * for repeated keys) it is the same tree, and writing that again gives the same text. */
void sl_json_buf_put_tree(sl_json_buf *b, const sl_json *v, unsigned flags);

#ifdef __cplusplus
}
#endif
#endif
