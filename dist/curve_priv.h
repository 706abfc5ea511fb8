/* Private to dist/: the byte-level CURVE key-file parsers (exposed so the fuzzer can call
 * them without files) and the ZAP handler that dist/transport.c runs next to a CURVE inbox. */
#ifndef SLUICE_DIST_CURVE_PRIV_H
#define SLUICE_DIST_CURVE_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/transport.h"

/* Parse the len bytes of a key file (need not be NUL-terminated; NULs are bad bytes);
 * `name` labels messages. secret_key NULL: only the public-key line is required (a secret-key
 * line, if present, must still be well formed and match). SL_OK; SL_ECORRUPT
 * "NAME:LINE: what" or "NAME: no public-key line"; SL_EUNSUPPORTED when a secret key must be
 * checked and libzmq has no CURVE. Outputs are written only on success. */
sl_status sl__curve_parse_keyfile(const char *buf, size_t len, const char *name, char public_key[41],
                                  char secret_key[41]);

/* Parse an allow-list (see transport.h). On success *keys is malloc'd (free()) with *n >= 1
 * entries; an allow-list without keys is SL_ECORRUPT ("NAME: no keys"). On failure *keys is
 * NULL and *n 0. */
sl_status sl__curve_parse_allow(const char *buf, size_t len, const char *name, char (**keys)[41], int *n);

/* Is key[0..40) a well-formed Z85 CURVE key (40 Z85 characters that decode)? On failure
 * SL_EINVAL "WHAT: ..." is recorded. */
sl_status sl__curve_check_key(const char *key, const char *what);

/* The ZAP handler (ZeroMQ RFC 27) of one ZeroMQ context: a thread answering on
 * inproc://zeromq.zap.01, 200 for mechanism CURVE with an allowed client key, 400 for
 * anything else. It exits when the context terminates (its receive fails with ETERM). */
typedef struct sl__zap sl__zap;

/* Bind the handler's socket in ctx (before any CURVE server binds, or the first clients
 * would be let in unchecked) and start its thread. allow[0..nallow) are copied.
 * SL_OK; SL_EINVAL on a malformed key; SL_EIO (ZeroMQ or thread failure); *out NULL then. */
sl_status sl__zap_start(void *ctx, const char (*allow)[41], int nallow, sl__zap **out);
/* Handshakes refused so far (any thread). */
uint64_t sl__zap_denied(const sl__zap *z);
/* Join the thread and free. Call only after zmq_ctx_term(ctx) returned (that is what stops
 * the thread). NULL is a no-op. */
void sl__zap_free(sl__zap *z);

#endif
