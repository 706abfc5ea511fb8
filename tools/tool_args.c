/* Command-line parsing, error reporting, the signal dispositions every tool starts with and
 * the small file helper (read a whole file) of the sluice-* tools; tool.h has the exit-status conventions.
 * Options are few and parsed once, so clarity beats speed: a linear lookup per argument. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sluice/file.h"
#include "sluice/version.h"
#include "tool.h"

void sl__tool_start(void) { signal(SIGXFSZ, SIG_IGN); }

bool sl__tool_version(const char *prog, int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--version") == 0) {
            printf("%s (Sluice) %s\n", prog, sl_version_string());
            return true;
        }
    return false;
}

int sl__usage_error(const char *prog, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help' for more information.\n", prog);
    return SL__EXIT_USAGE;
}

int sl__fail(const char *prog) {
    fprintf(stderr, "%s: %s\n", prog, sl_errmsg());
    return SL__EXIT_FAIL;
}

int sl__failf(const char *prog, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, ": %s\n", sl_errmsg());
    return SL__EXIT_FAIL;
}

/* errno of the first failed write to stdout seen by sl__stdout_ok, for the message at exit
 * (a later fflush may no longer say why). */
static int stdout_errno;

bool sl__stdout_ok(void) {
    if (!ferror(stdout)) return true;
    if (!stdout_errno) stdout_errno = errno ? errno : EIO;
    return false;
}

int sl__tool_exit(const char *prog, int rc) {
    errno = 0;
    int flushed = fflush(stdout);
    int e = errno;
    if (flushed == EOF || ferror(stdout)) {
        if (stdout_errno) e = stdout_errno;
        fprintf(stderr, "%s: writing to standard output failed: %s\n", prog, e ? strerror(e) : "write error");
        /* the hint the file writers give (sluice/file.h): a full disk, a file-size limit */
        struct stat sb;
        uint64_t at = fstat(1, &sb) == 0 && S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : 0;
        sl_file_write_error("standard output", NULL, at, e);
        const char *hint = strstr(sl_errmsg(), "\n---> HINT: ");
        if (hint) fprintf(stderr, "%s\n", hint + 1);
        if (rc == SL__EXIT_OK) rc = SL__EXIT_FAIL;
    }
    /* nowhere left to report a failure to write the messages themselves: the status says it */
    if (fflush(stderr) == EOF || ferror(stderr))
        if (rc == SL__EXIT_OK) rc = SL__EXIT_FAIL;
    return rc;
}

static const sl__opt *find_long(const sl__opt *opts, const char *name, size_t len) {
    for (const sl__opt *o = opts; o && o->name; o++)
        if (strlen(o->name) == len && memcmp(o->name, name, len) == 0) return o;
    return NULL;
}

static const sl__opt *find_short(const sl__opt *opts, char c) {
    for (const sl__opt *o = opts; o && o->name; o++)
        if (o->short_name && o->short_name == c) return o;
    return NULL;
}

/* Store `val` (the option's argument, NULL for a flag) into the option's destination. */
static sl__args_result store(const char *prog, const sl__opt *o, const char *shown,
                             const char *val) {
    switch (o->kind) {
    case SL__OPT_FLAG:
        *(bool *)o->dest = true;
        return SL__ARGS_OK;
    case SL__OPT_STR:
        *(const char **)o->dest = val;
        return SL__ARGS_OK;
    case SL__OPT_INT: {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(val, &end, 10);
        if (!*val || *end || errno == ERANGE) {
            sl__usage_error(prog, "option %s expects an integer, got '%s'", shown, val);
            return SL__ARGS_ERROR;
        }
        if (v < o->min || v > o->max) {
            sl__usage_error(prog, "option %s must be between %lld and %lld, got %lld", shown,
                            o->min, o->max, v);
            return SL__ARGS_ERROR;
        }
        *(long long *)o->dest = v;
        return SL__ARGS_OK;
    }
    }
    return SL__ARGS_ERROR;
}

sl__args_result sl__args_parse(const char *prog, const sl__opt *opts, int argc, char **argv,
                               int *npos) {
    int out = 0;
    bool only_pos = false;
    bool help = false;
    for (int i = 0; i < argc; i++) {
        char *a = argv[i];
        if (only_pos || a[0] != '-' || a[1] == 0) { /* "-" alone is a positional (stdin-ish) */
            argv[out++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_pos = true;
            continue;
        }
        const sl__opt *o;
        const char *val = NULL;
        char shown[80];
        if (a[1] == '-') {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            if (len == 4 && memcmp(name, "help", 4) == 0 && !eq) {
                help = true;
                continue;
            }
            o = find_long(opts, name, len);
            snprintf(shown, sizeof shown, "--%.*s", (int)len, name);
            if (!o) {
                sl__usage_error(prog, "unknown option '%s'", shown);
                return SL__ARGS_ERROR;
            }
            if (eq) {
                if (o->kind == SL__OPT_FLAG) {
                    sl__usage_error(prog, "option %s takes no argument", shown);
                    return SL__ARGS_ERROR;
                }
                val = eq + 1;
            }
        } else {
            if (a[1] == 'h' && a[2] == 0) {
                help = true;
                continue;
            }
            o = find_short(opts, a[1]);
            snprintf(shown, sizeof shown, "-%c", a[1]);
            if (!o) {
                sl__usage_error(prog, "unknown option '%s'", a);
                return SL__ARGS_ERROR;
            }
            if (a[2]) {
                if (o->kind == SL__OPT_FLAG) {
                    sl__usage_error(prog, "option %s takes no argument (got '%s')", shown, a);
                    return SL__ARGS_ERROR;
                }
                val = a + 2;
            }
        }
        if (o->kind != SL__OPT_FLAG && !val) {
            if (i + 1 >= argc) {
                sl__usage_error(prog, "option %s needs an argument", shown);
                return SL__ARGS_ERROR;
            }
            val = argv[++i];
        }
        sl__args_result r = store(prog, o, shown, val);
        if (r != SL__ARGS_OK) return r;
    }
    *npos = out;
    return help ? SL__ARGS_HELP : SL__ARGS_OK;
}

sl_status sl__read_file(const char *path, uint8_t **out, size_t *len) {
    char *data;
    sl_status s = sl_file_read_all(path, NULL, SL__READ_FILE_MAX, "files read whole (images) are limited "
                                   "to 1 GiB", &data, len);
    *out = (uint8_t *)data;
    return s;
}

int sl__take_repeated(const char *prog, const char *name, int argc, char **argv, const char **vals, int *nvals,
                      int *left) {
    size_t nl = strlen(name);
    int out = 0;
    bool only_pos = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool ours = !only_pos && a[0] == '-' && a[1] == '-' && strncmp(a + 2, name, nl) == 0;
        if (!only_pos && strcmp(a, "--") == 0) only_pos = true;
        if (ours && a[2 + nl] == 0) {
            if (i + 1 >= argc) return sl__usage_error(prog, "option --%s needs an argument", name);
            vals[(*nvals)++] = argv[++i];
        } else if (ours && a[2 + nl] == '=') {
            vals[(*nvals)++] = a + 3 + nl;
        } else {
            argv[out++] = argv[i];
        }
    }
    *left = out;
    return -1;
}
