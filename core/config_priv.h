/* Private to core/config*.c: the parsed tree's owner, shared by the parser (config.c) and
 * the error reporting and typed reads (config_read.c). config.c calls into config_read.c,
 * never the other way. */
#ifndef SLUICE_CORE_CONFIG_PRIV_H
#define SLUICE_CORE_CONFIG_PRIV_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/config.h"

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
} chunk;

struct sl_cfg {
    chunk *chunks;
    char *filename;
    char *src;         /* a NUL-terminated copy of the text, for quoting lines in errors */
    size_t src_len;
    sl_cfg_stmt *root;
    int nroot;
};

/* sl_cfg_err with a va_list: sets the thread's error to "FILE:LINE:COL: message" followed
 * by the source line and a caret under loc (a value given with --set: the message and that
 * note), and returns code. */
sl_status sl__cfg_verr_at(const sl_cfg *c, sl_cfg_loc loc, sl_status code, const char *fmt, va_list ap);

/* A number's unit: its factor as a double (MiB 1048576, ms 0.001) and exactly, mul x 10^exp10. */
typedef struct sl__cfg_unit {
    const char *name; /* "" for none */
    double mult;
    uint64_t mul;
    int exp10;
} sl__cfg_unit;

/* The unit spelled `name`, or NULL. */
const sl__cfg_unit *sl__cfg_find_unit(const char *name);

/* The integer a number literal stands for, computed exactly from its digits, fraction,
 * exponent and unit ("12345678901234567e2", "1.5e3", "3000ms", "-0" is 0): SL_OK with *out;
 * SL_ERANGE when it is an integer past int64; SL_EINVAL when it is not an integer, or not
 * such a literal (a fraction a/b, hex, an unknown unit). */
sl_status sl__cfg_literal_int(const char *lit, int64_t *out);

#endif
