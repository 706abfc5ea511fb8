/* Helpers shared by the sluice-* tools: command-line parsing with GNU-style long options,
 * the usage/exit-status conventions, error reporting, and a progress bar.
 *
 * Conventions every tool follows (so scripts can rely on them):
 *   exit 0  success, and --help / -h (usage on stdout), and --version (sl__tool_version)
 *   exit 1  the work failed: corrupt or unreadable input, a write error (message on stderr,
 *           naming the file and byte offset when there is one), including a failed write to
 *           standard output (sl__tool_exit: every main returns through it)
 *   exit 2  wrong usage: unknown command or option, missing or malformed argument (message
 *           and a "Try 'PROG --help'" hint on stderr)
 *
 * Workload: a handful of options per command, parsed once; a progress bar redrawn at most
 * ten times a second from the tool's main loop. Nothing here is thread-safe. */
#ifndef SLUICE_TOOL_H
#define SLUICE_TOOL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sluice/status.h"

enum { SL__EXIT_OK = 0, SL__EXIT_FAIL = 1, SL__EXIT_USAGE = 2 };

/* ---- options ------------------------------------------------------------------------ */

typedef enum sl__opt_kind {
    SL__OPT_FLAG,   /* dest is bool*: set to true when present */
    SL__OPT_STR,    /* dest is const char**: the argument (a pointer into argv) */
    SL__OPT_INT,    /* dest is long long*: a decimal integer in [min, max] */
} sl__opt_kind;

typedef struct sl__opt {
    const char *name;    /* long name without the dashes ("limit"); NULL ends a table */
    char short_name;     /* 'n' for -n, 0 for none */
    sl__opt_kind kind;
    void *dest;          /* see sl__opt_kind; written only when the option is present */
    long long min, max;  /* SL__OPT_INT: allowed range (inclusive) */
} sl__opt;

typedef enum sl__args_result {
    SL__ARGS_OK = 0,     /* parsed; positionals compacted to the front of argv */
    SL__ARGS_HELP = 1,   /* -h or --help seen: the caller prints its usage to stdout, exit 0 */
    SL__ARGS_ERROR = 2,  /* wrong usage: a message and hint were printed to stderr, exit 2 */
} sl__args_result;

/* Parse argv[0..argc) (argv[0] is NOT skipped: pass argv + 1 to skip the program or
 * command name) against `opts` (terminated by an entry with name NULL). Accepts
 * "--name value", "--name=value", "-n value", "-nvalue", flags anywhere among the
 * positionals, and "--" to end options. -h and --help are always recognised. The
 * positionals are moved, in order, to argv[0..*npos). `prog` names the program or
 * "program command" in messages. On SL__ARGS_ERROR the message is already on stderr;
 * option destinations may have been written for options before the bad one. */
sl__args_result sl__args_parse(const char *prog, const sl__opt *opts, int argc, char **argv,
                               int *npos);

/* The first line of every main, before anything can write a file: set the signal
 * dispositions every tool wants. SIGXFSZ is ignored: at its default action the kernel
 * kills the process when a write reaches a file-size limit (ulimit -f; exit 153, leaving
 * the temporary file it was writing); ignored, the write fails with EFBIG and the library's
 * writers report it like a full disk ("PATH: write failed at byte N: File too large" with a
 * hint naming the limit; sluice/file.h), remove their temporary files and keep the older
 * checkpoint, and the tool exits 1. Children started by sluice-launch inherit the ignored
 * SIGXFSZ across exec. */
void sl__tool_start(void);

/* The line after sl__tool_start: `if (sl__tool_version(PROG, argc, argv)) return
 * sl__tool_exit(PROG, SL__EXIT_OK);`. True when "--version" is among argv[1..argc) before
 * a "--" (anywhere, like --help; after "--" it belongs to the command sluice-launch runs);
 * it has then printed "PROG (Sluice) 0.1.0 (git 705441a)" (sluice/version.h) to stdout. */
bool sl__tool_version(const char *prog, int argc, char **argv);

/* Print "PROG: message" and "Try 'PROG --help' for more information." to stderr and
 * return SL__EXIT_USAGE, so a tool can `return sl__usage_error(...)`. */
int sl__usage_error(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Take every "--NAME X" / "--NAME=X" before a "--" out of argv[0..argc) into vals (room for
 * argc entries), in order, for the options sl__args_parse keeps one value of (--set,
 * --keygen); *left is what remains in argv. Returns -1, or the exit status of a usage
 * error (the option without its argument). */
int sl__take_repeated(const char *prog, const char *name, int argc, char **argv, const char **vals, int *nvals,
                      int *left);

/* Print "PROG: <sl_errmsg()>" (the library's message with its context and hint) to stderr
 * and return SL__EXIT_FAIL. */
int sl__fail(const char *prog);

/* Like sl__fail with a prefix: "PROG: PREFIX: <sl_errmsg()>". */
int sl__failf(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- files -------------------------------------------------------------------------- */

/* Read a whole file into *out (malloc'd, the caller frees; NUL-appended but *len excludes
 * it), through sl_file_read_all (sluice/file.h): SL_ENOTFOUND, SL_EINVAL at once for a FIFO,
 * socket, device or directory, SL_ERANGE over SL__READ_FILE_MAX bytes, SL_EIO; each naming
 * the file. *out NULL on failure. */
#define SL__READ_FILE_MAX (1ull << 30)
sl_status sl__read_file(const char *path, uint8_t **out, size_t *len);

/* ---- output ------------------------------------------------------------------------- */

/* False once a write to stdout has failed (ferror), remembering why for sl__tool_exit. A
 * tool printing much (one line per element) calls it in its loop to stop early. */
bool sl__stdout_ok(void);

/* The last thing main does: `return sl__tool_exit(PROG, rc);`. Flushes stdout and stderr;
 * when a write to stdout failed (at the flush or before: a full disk, a closed pipe's
 * EPIPE with SIGPIPE ignored, /dev/full) it prints "PROG: writing to standard output
 * failed: No space left on device" to stderr and turns an exit status of 0 into 1 (a
 * failure status already chosen is kept). A failed flush of stderr turns 0 into 1 too. */
int sl__tool_exit(const char *prog, int rc);

/* ---- progress bar ------------------------------------------------------------------- */

typedef struct sl__progress {
    bool on;            /* drawing at all: stderr is a terminal */
    const char *label;  /* borrowed */
    uint64_t total;     /* 0: unknown, show a count and rate only */
    uint64_t done;
    double t0, last;    /* start and last redraw (sl_now_s) */
    int width;          /* characters drawn last time, to blank the line on finish */
} sl__progress;

/* Start a bar labelled `label` (borrowed) counting to `total` units (0 = unknown). It draws
 * only when stderr is a terminal (isatty), so output piped to a file or a test stays
 * clean. */
void sl__progress_start(sl__progress *p, const char *label, uint64_t total);

/* Set the count to `done` and redraw if 0.1 s passed since the last redraw. Cheap enough to
 * call per record. */
void sl__progress_set(sl__progress *p, uint64_t done);

/* Erase the bar (the caller prints its own summary). Safe to call twice. */
void sl__progress_end(sl__progress *p);

#endif
