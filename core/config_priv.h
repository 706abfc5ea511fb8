/* Private to core/config*.c: the parsed tree's owner, shared by the parser (config.c) and
 * the error reporting and typed reads (config_read.c). config.c calls into config_read.c,
 * never the other way. */
#ifndef SLUICE_CORE_CONFIG_PRIV_H
#define SLUICE_CORE_CONFIG_PRIV_H

#include <stdarg.h>
#include <stddef.h>

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

#endif
