/* Levelled logging to stderr, one fprintf per message so lines from threads don't mix. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sluice/log.h"

int sl_log_level = SL_LOG_WARN;

void sl_log_set_level(int level) { sl_log_level = level; }

void sl__log(int level, const char *file, int line, const char *fmt, ...) {
    static const char *names[] = {"error", "warning", "info", "debug", "trace"};
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    if (level >= SL_LOG_DEBUG)
        fprintf(stderr, "sluice %s [%s:%d]: %s\n", names[level > 4 ? 4 : level], base, line, msg);
    else
        fprintf(stderr, "sluice %s: %s\n", names[level < 0 ? 0 : level], msg);
}
