/* Levelled logging to stderr. The arguments of a log call are not evaluated when its level
 * is off. The level is process state the caller sets (tools read --verbose/--quiet or an
 * environment variable and call sl_log_set_level); the library never reads the environment. */
#ifndef SLUICE_LOG_H
#define SLUICE_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

enum { SL_LOG_ERROR = 0, SL_LOG_WARN = 1, SL_LOG_INFO = 2, SL_LOG_DEBUG = 3, SL_LOG_TRACE = 4 };

extern int sl_log_level; /* default SL_LOG_WARN */

void sl_log_set_level(int level);
void sl__log(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define SL_LOG(level, ...)                                                 \
    do {                                                                   \
        if ((level) <= sl_log_level) sl__log((level), __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)
#define SL_ERROR(...) SL_LOG(SL_LOG_ERROR, __VA_ARGS__)
#define SL_WARN(...) SL_LOG(SL_LOG_WARN, __VA_ARGS__)
#define SL_INFO(...) SL_LOG(SL_LOG_INFO, __VA_ARGS__)
#define SL_DEBUG(...) SL_LOG(SL_LOG_DEBUG, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
