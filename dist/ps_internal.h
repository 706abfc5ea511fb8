/* Private helpers shared by the parameter-server files (ps_plan.c, ps_wire.c, ps_server.c,
 * ps_client.c): a refcounted send buffer so one frame can be handed to ZeroMQ zero-copy
 * and re-sent (a retry) without copying, and the monotonic clock. Not installed. */
#ifndef SLUICE_DIST_PS_INTERNAL_H
#define SLUICE_DIST_PS_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/pool.h"
#include "sluice/ps.h"
#include "sluice/util.h"

/* A ps frame payload (prefix + floats) is an sl_buf (64-byte aligned, so the floats after the
 * prefix are aligned): the owner holds one reference, every zero-copy send another, and
 * ZeroMQ drops its reference on its own thread (sl_buf's count is atomic). A reply may be
 * shorter than the buffer: its size is then lowered (never raised). */

/* A buffer of SL_PS_PREFIX + 4 * nfloats bytes with one reference, or NULL. */
sl_buf *sl__ps_buf_new(size_t nfloats);
/* Send b to rank `to` zero-copy under header h (one more reference while ZeroMQ holds it). */
sl_status sl__ps_buf_send(sl_tp *tp, int to, sl_msg_hdr *h, sl_buf *b);
static inline uint8_t *sl__ps_buf_body(sl_buf *b) { return (uint8_t *)b->data + SL_PS_PREFIX; }
static inline float *sl__ps_buf_floats(sl_buf *b) { return (float *)(void *)sl__ps_buf_body(b); }

/* p itself when it is 8-byte aligned, else a copy of p[0..len) in *scratch (grown as
 * needed, free with free()): ZeroMQ may hand over a payload inside its receive buffer at
 * any offset, and the floats after the prefix must be aligned to be read. NULL when out of
 * memory. */
const void *sl__ps_aligned(const void *p, size_t len, void **scratch, size_t *cap);

#endif
