/* Status codes and the per-thread error slot. Messages are formatted once, when an error
 * is raised, into a fixed thread-local buffer, so raising an error never allocates. */
#include <stdio.h>
#include <string.h>

#include "sluice/status.h"

#define MSG_CAP 1024
#define HINT_CAP 512

static _Thread_local sl_status err_code;
static _Thread_local char err_msg[MSG_CAP];
static _Thread_local char err_hint[HINT_CAP];
static _Thread_local char err_full[MSG_CAP + HINT_CAP + 16];

static const struct { sl_status code; const char *name, *text; } codes[] = {
    {SL_OK, "SL_OK", "success"},
    {SL_END, "SL_END", "end of data"},
    {SL_EINVAL, "SL_EINVAL", "invalid argument"},
    {SL_EIO, "SL_EIO", "input/output error"},
    {SL_ECORRUPT, "SL_ECORRUPT", "corrupt data"},
    {SL_ENOMEM, "SL_ENOMEM", "out of memory"},
    {SL_ETIMEDOUT, "SL_ETIMEDOUT", "timed out"},
    {SL_ECANCELED, "SL_ECANCELED", "cancelled"},
    {SL_EPEER, "SL_EPEER", "peer failed"},
    {SL_ENOTFOUND, "SL_ENOTFOUND", "not found"},
    {SL_EUNSUPPORTED, "SL_EUNSUPPORTED", "not supported"},
    {SL_ERANGE, "SL_ERANGE", "out of range"},
    {SL_ESTATE, "SL_ESTATE", "wrong state"},
    {SL_EINTERNAL, "SL_EINTERNAL", "internal error"},
};

const char *sl_strerror(sl_status s) {
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (codes[i].code == s) return codes[i].text;
    return "unknown status";
}

const char *sl_status_name(sl_status s) {
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (codes[i].code == s) return codes[i].name;
    return "SL_E?";
}

const char *sl_errmsg(void) {
    if (!err_hint[0]) return err_msg;
    snprintf(err_full, sizeof err_full, "%s\n---> HINT: %s", err_msg, err_hint);
    return err_full;
}

sl_status sl_errcode(void) { return err_code; }

void sl_err_clear(void) {
    err_code = SL_OK;
    err_msg[0] = 0;
    err_hint[0] = 0;
}

sl_status sl_verr(sl_status code, const char *fmt, va_list ap) {
    err_code = code;
    err_hint[0] = 0;
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    return code;
}

sl_status sl_err(sl_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sl_verr(code, fmt, ap);
    va_end(ap);
    return code;
}

sl_status sl_err_at(sl_status code, const char *path, int64_t offset, const char *fmt, ...) {
    char body[MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    if (path && offset >= 0)
        return sl_err(code, "%s: byte %lld: %s", path, (long long)offset, body);
    if (path) return sl_err(code, "%s: %s", path, body);
    if (offset >= 0) return sl_err(code, "byte %lld: %s", (long long)offset, body);
    return sl_err(code, "%s", body);
}

void sl_err_prefix(const char *fmt, ...) {
    char pre[MSG_CAP], old[MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err_msg, sizeof old);
    snprintf(err_msg, sizeof err_msg, "%s%s", pre, old);
}

void sl_err_hint(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_hint, sizeof err_hint, fmt, ap);
    va_end(ap);
}

void sl_err_save(sl_error *out) {
    out->code = err_code;
    snprintf(out->msg, sizeof out->msg, "%s", sl_errmsg());
}

sl_status sl_err_restore(const sl_error *e) {
    err_code = e->code;
    err_hint[0] = 0;  /* the saved message already carries its hint line */
    snprintf(err_msg, sizeof err_msg, "%s", e->msg);
    return e->code;
}
