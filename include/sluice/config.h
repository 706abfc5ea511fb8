/* The config language: syntax only. Interpreters (pipeline/from_config.c, train/, dist/)
 * give meaning to the tree this parser builds.
 *
 *   # a comment to the end of the line
 *   pipeline train {                          # a statement with a body
 *       files "data/train-*.tfrecord"          # name, then positional arguments
 *       interleave cycle=4 block=16 parallel=auto   # key=value options
 *       map parse_example(image: bytes, label: int64)
 *           | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255)  parallel=auto
 *       batch 128 drop_remainder
 *   }
 *
 * A statement is a name, arguments, and an optional { body } of statements; it ends at the
 * end of the line, or at `;`. A line that starts with `|` continues the statement above, and
 * newlines inside ( ) and [ ] are ignored. Arguments are values, `key=value` options, or the
 * `|` separator (kept as an SL_CV_PIPE value so interpreters can split chains). Values:
 *   numbers     128  -3  0.5  1e-3  1/255 (a fraction)  64MiB 2GB 30s 500ms 10%  (a unit);
 *               decimal only, an integer read exactly (never through a double)
 *   strings     "double quoted, with \" \\ \n \t escapes"
 *   identifiers uint8  auto  true  drop_remainder  a.b-c   (letters, digits, _ . - /  *)
 *               and the comparison words == != < <= > >=  (filter label < 5)
 *   shapes      28x28x1  224x224
 *   lists       [0.485, 0.456, 0.406]
 *   calls       name(arg, key: value, key=value)
 *
 * Errors point at file:line:column, show the line with a caret under the spot, and carry a
 * hint; sl_cfg_err() lets interpreters report their own errors the same way. */
#ifndef SLUICE_CONFIG_H
#define SLUICE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_cfg sl_cfg;

typedef struct sl_cfg_loc {
    int line, col; /* 1-based; col counts bytes */
    int len;       /* length of the token in bytes, for the ~~~ under it (>= 1) */
} sl_cfg_loc;

typedef enum sl_cv_kind {
    SL_CV_NUMBER = 1,
    SL_CV_STRING,
    SL_CV_IDENT,
    SL_CV_SHAPE,
    SL_CV_LIST,
    SL_CV_CALL,
    SL_CV_PIPE,
} sl_cv_kind;

typedef struct sl_cfg_arg sl_cfg_arg;

typedef struct sl_cfg_value {
    sl_cv_kind kind;
    sl_cfg_loc loc;
    const char *text;   /* NUMBER: the literal; STRING: unescaped contents; IDENT/CALL: the name; SHAPE: the literal */
    double num;         /* NUMBER: value after the unit is applied (64MiB -> 67108864, 500ms -> 0.5, 10% -> 0.1) */
    int64_t inum;       /* NUMBER: the integer value when is_int */
    bool is_int;        /* NUMBER: an integral value that fits int64 (after the unit), by the
                           literal's exact value, not its double: 9007199254740993e0 is
                           9007199254740993, 12345678901234567e2 is 1234567890123456700 */
    const char *unit;   /* NUMBER: "" or the unit as written ("MiB", "s", "%") */
    int ndims;          /* SHAPE */
    const int64_t *dims;
    int nargs;          /* LIST: items (keys NULL); CALL: arguments */
    const sl_cfg_arg *args;
} sl_cfg_value;

struct sl_cfg_arg {
    const char *key;    /* NULL for a positional argument */
    char sep;           /* '=' or ':' for keyed arguments, 0 otherwise */
    sl_cfg_loc kloc;    /* keyed arguments: where the key is (line 0: added by an override) */
    sl_cfg_value v;
};

typedef struct sl_cfg_stmt {
    const char *name;
    sl_cfg_loc loc;
    int nargs;
    const sl_cfg_arg *args;
    bool has_body;
    int nbody;
    const struct sl_cfg_stmt *body;
} sl_cfg_stmt;

/* The largest config file sl_cfg_parse_file reads: configs are a few KB of text. */
#define SL_CFG_MAX_BYTES (16u << 20)

/* Parse `len` bytes of `text` (borrowed, need not be NUL-terminated); `filename` labels
 * messages. On success *out owns the whole tree. On failure *out is NULL and the status is
 * SL_EINVAL (syntax) with "FILE:LINE:COL: what\n<line>\n<caret>" plus a hint in sl_errmsg,
 * or SL_ENOMEM. Besides syntax errors, SL_EINVAL is returned for:
 *   - a NUL byte anywhere (inside a string, a comment, or between tokens): "NUL byte (0x00)
 *     in the config" at its line and column (a NUL would otherwise cut a string short);
 *   - a hexadecimal number ("0xff"): "hexadecimal number '0xff': write it in decimal" at it
 *     (the language's numbers are decimal; "-0" is 0);
 *   - a key given twice on one statement or in one call (`shuffle 10 seed=1 seed=2`):
 *     "option 'seed' given twice (first at FILE:LINE:COL)" at the second one (for calls,
 *     "argument 'mean' of 'normalize' given twice ..."), so no copy silently wins. */
sl_status sl_cfg_parse(const char *text, size_t len, const char *filename, sl_cfg **out);

/* Read and parse a file (through sl_file_read_all, sluice/file.h). SL_ENOTFOUND when it
 * does not exist; SL_EINVAL at once for a FIFO, socket, device or directory ("config 'PATH':
 * is a FIFO (named pipe), not a regular file": nothing blocks or reads without end);
 * SL_ERANGE for a file over SL_CFG_MAX_BYTES; SL_EIO for other read errors; then as
 * sl_cfg_parse. */
sl_status sl_cfg_parse_file(const char *path, sl_cfg **out);

void sl_cfg_free(sl_cfg *cfg); /* NULL is a no-op */

/* The top-level statements. */
const sl_cfg_stmt *sl_cfg_root(const sl_cfg *cfg, int *n);
const char *sl_cfg_filename(const sl_cfg *cfg);

/* Apply an override "PATH=VALUE" (as from --set), e.g. "pipeline.train.shuffle.seed=7" or
 * "train.epochs=1". PATH walks statements by name: a statement whose first positional
 * argument is an identifier or string is also matched by name and that argument
 * ("pipeline.train" finds `pipeline train { }`; that reading is preferred when it matches).
 * The last component names an option of the statement reached (replaced, or added when
 * absent) or, when it names a statement itself, that statement's first positional argument
 * is replaced (or added). A missing statement inside a block is appended to the block.
 * VALUE is parsed as one value of the language, except two spellings that are not values:
 *   PATH=-          removes what PATH names: an option ("train.checkpoint.every=-") or a
 *                   whole statement, body and all ("train.epochs=-", "pipeline.test=-");
 *                   SL_EINVAL "nothing named 'KEY' in STMT to remove" when it is absent
 *                   (with a did-you-mean hint). A value "-" is written as a string, quotes included.
 *   PATH=(ARGS...)  replaces the whole argument list of the statement PATH names, ARGS
 *                   written as on the statement's line ("train.checkpoint=(steps=20 keep=3)",
 *                   "pipeline.train.batch=(64 drop_remainder)", "()" for none); a missing
 *                   statement inside a block is added with them; an option path is an error
 *                   (an option takes one value). The body, if any, is kept.
 * Values set by an override carry line 0 in their locations (and nested ones too), so
 * interpreters' messages say "(value given with --set)". Pointers into the tree taken
 * before a successful sl_cfg_set (statements, arguments) may no longer be valid.
 * A component that matches more than one statement is an error, never a guess: with
 * pipelines 'train' and 'test', "pipeline.batch=7" fails with "override 'pipeline.batch=7':
 * pipeline.batch matches pipeline 'train' and pipeline 'test': say pipeline.train.batch or
 * pipeline.test.batch" (candidates without distinct first words are listed by FILE:LINE:COL).
 * SL_EINVAL with a message naming the path on a malformed override (empty path part, more
 * than 32 parts, an unclosed "(", a ';' or '{' inside one), a path that leads nowhere, or an
 * ambiguous one; the tree is unchanged on failure. */
sl_status sl_cfg_set(sl_cfg *cfg, const char *assignment);

/* Lookups. sl_cfg_find: the first statement named `name` among n, or NULL.
 * sl_cfg_opt: the option `key` of s (keys are unique: the parser refuses a repeat), or NULL. sl_cfg_pos: the i-th
 * positional argument (pipes not counted), or NULL. sl_cfg_npos: how many there are. */
const sl_cfg_stmt *sl_cfg_find(const sl_cfg_stmt *stmts, int n, const char *name);
const sl_cfg_value *sl_cfg_opt(const sl_cfg_stmt *s, const char *key);
const sl_cfg_value *sl_cfg_pos(const sl_cfg_stmt *s, int i);
int sl_cfg_npos(const sl_cfg_stmt *s);

/* Report an error at `loc` in the style of syntax errors: sets sl_errmsg to
 * "FILE:LINE:COL: message", the source line, and a caret line; returns code. Add a hint
 * with sl_err_hint afterwards. */
sl_status sl_cfg_err(const sl_cfg *cfg, sl_cfg_loc loc, sl_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Typed reads with range checks; errors are reported with sl_cfg_err at the value.
 * sl_cfg_int: SL_ERANGE "V is outside MIN..MAX" for an integer outside [min, max], one past
 * int64 included ("9223372036854775808 is outside 0..9223372036854775807", never wrapped or
 * clamped); SL_EINVAL "expected an integer, found ..." for anything that is not an integer. */
sl_status sl_cfg_int(const sl_cfg *cfg, const sl_cfg_value *v, int64_t min, int64_t max, int64_t *out);
sl_status sl_cfg_double(const sl_cfg *cfg, const sl_cfg_value *v, double *out);
sl_status sl_cfg_bool(const sl_cfg *cfg, const sl_cfg_value *v, bool *out); /* true/false/yes/no/on/off/1/0 */
/* An identifier or a string. */
sl_status sl_cfg_word(const sl_cfg *cfg, const sl_cfg_value *v, const char **out);
/* Is v the identifier `auto`? */
bool sl_cfg_is_auto(const sl_cfg_value *v);

/* The candidate closest to `word` by edit distance, if close enough to be a plausible typo
 * (distance <= max(1, len/3)); NULL otherwise. For "did you mean ...?" hints. */
const char *sl_suggest(const char *word, const char *const *candidates, int n);

#ifdef __cplusplus
}
#endif
#endif
