/* Status codes and error messages with context.
 *
 * Every fallible function in Sluice returns an sl_status: 0 is success, negative is an
 * error, and SL_END (positive) means "no more data" from an iterator or reader. When a
 * function returns a negative status it also leaves a human-readable message in the calling
 * thread's error slot (sl_errmsg()), with the context a user can act on: which op, which
 * file, which byte offset, which peer, and a hint. The slot is overwritten by the next
 * error on the same thread; successful calls leave it alone. */
#ifndef SLUICE_STATUS_H
#define SLUICE_STATUS_H

#include <stdarg.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int sl_status;

enum {
    SL_OK = 0,
    SL_END = 1,           /* end of data: not an error */
    SL_EINVAL = -1,       /* invalid argument or usage */
    SL_EIO = -2,          /* the operating system failed a read, write, open, ... */
    SL_ECORRUPT = -3,     /* input bytes are malformed (bad CRC, truncated, bad proto, ...) */
    SL_ENOMEM = -4,       /* allocation failed */
    SL_ETIMEDOUT = -5,    /* a wait ran past its deadline */
    SL_ECANCELED = -6,    /* the operation was cancelled (iterator closed, shutdown) */
    SL_EPEER = -7,        /* a remote peer failed or misbehaved */
    SL_ENOTFOUND = -8,    /* a named thing (file, feature, key) does not exist */
    SL_EUNSUPPORTED = -9, /* valid input that this build cannot handle */
    SL_ERANGE = -10,      /* a value is out of the representable or allowed range */
    SL_ESTATE = -11,      /* call not allowed in the object's current state */
    SL_EINTERNAL = -12,   /* a bug in Sluice: please report it */
};

/* A short English description of the code ("corrupt data"). Never NULL; unknown codes
 * give "unknown status". */
const char *sl_strerror(sl_status s);

/* The code's symbolic name ("SL_ECORRUPT"). Never NULL. */
const char *sl_status_name(sl_status s);

/* The calling thread's last error message, "" if none was set since sl_err_clear(). The
 * pointer stays valid until the next sl_err* call on this thread. A hint, when present,
 * follows on its own line as "---> HINT: ...". */
const char *sl_errmsg(void);

/* The status that the last message was recorded with (SL_OK if none). */
sl_status sl_errcode(void);

/* Forget the calling thread's last error. */
void sl_err_clear(void);

/* Record an error message for the calling thread and return `code`, so a failing function
 * can `return sl_err(SL_EINVAL, "batch size %d must be > 0", n);`. Replaces any earlier
 * message and hint. */
sl_status sl_err(sl_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
sl_status sl_verr(sl_status code, const char *fmt, va_list ap);

/* Like sl_err, with a location prefix: "PATH: byte OFFSET: message". Pass offset < 0 to
 * leave the offset out, path NULL to leave the path out. */
sl_status sl_err_at(sl_status code, const char *path, int64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prefix the current message with more context ("op 'map': " + message), for callers that
 * pass an error up from a deeper layer. Keeps the code and hint. */
void sl_err_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Attach (or replace) the hint of the current message. */
void sl_err_hint(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Snapshot of the calling thread's error (code + message), for moving an error from a
 * worker thread to the thread that reports it. */
typedef struct sl_error {
    sl_status code;
    char msg[1024];
} sl_error;
void sl_err_save(sl_error *out);
/* Make `e` the calling thread's error; returns e->code. */
sl_status sl_err_restore(const sl_error *e);

#ifdef __cplusplus
}
#endif
#endif
