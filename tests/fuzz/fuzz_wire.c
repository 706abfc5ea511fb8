/* libFuzzer target for the wire-message header decoder and the inbox's verdict
 * (dist/transport.c): any bytes, any length.
 *   1. The whole input as a header frame: a header that decodes must encode back to the
 *      same 56 bytes (the format has one spelling), and its fields must be within what the
 *      decoder promises.
 *   2. The input as [k][routing id: k % 32 bytes][header frame: up to 56 bytes][payload]:
 *      sl_msg_accept, for a receiver of the header's own job id and of another, must keep
 *      every promise of transport.h: an accepted message is this job's, from the rank its
 *      routing id "r<rank>.<16 hex>" names (not the receiver, within the job), with the
 *      payload length it claims; a message of another job is SL_MSG_FOREIGN whoever sends
 *      it, never accepted. */
#include <stdint.h>
#include <string.h>

#include "sluice/transport.h"

static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* field by field: the structs' padding bytes are not part of the value */
static int same(const sl_msg_hdr *a, const sl_msg_hdr *b) {
    return a->type == b->type && a->round == b->round && a->dtype == b->dtype && a->flags == b->flags &&
           a->sender == b->sender && a->tensor == b->tensor && a->step == b->step && a->offset == b->offset &&
           a->length == b->length && a->job == b->job;
}

static void check_accept(const uint8_t *id, size_t idn, const uint8_t *hdr, size_t hlen, size_t plen, int self,
                         int n, uint64_t job, size_t max_msg) {
    sl_msg_hdr h, d;
    int decodes = sl_msg_decode(hdr, hlen, &d) == SL_OK;
    int r = sl_msg_accept(id, idn, hdr, hlen, plen, self, n, job, max_msg, &h);
    if (r >= 0) {
        if (!decodes || r >= n || r == self || h.job != job || h.sender != (uint32_t)r || h.length != plen ||
            plen > max_msg || !same(&h, &d))
            __builtin_trap();
        if (idn < 19 || id[0] != 'r' || id[idn - 17] != '.') __builtin_trap();
        for (size_t i = idn - 16; i < idn; i++)
            if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) __builtin_trap();
    } else if (r == SL_MSG_FOREIGN) {
        if (!decodes || d.job == job) __builtin_trap();
    } else if (r == SL_MSG_INVALID) {
        if (decodes && d.job != job) __builtin_trap(); /* another job's header is always FOREIGN */
    } else {
        __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sl_msg_hdr h;
    if (sl_msg_decode(data, size, &h) == SL_OK) {
        if (size != SL_MSG_HDR_SIZE) __builtin_trap();
        if (h.type == 0 || h.type >= SL_MSG_TYPES_ || h.dtype >= SL_DT_COUNT_) __builtin_trap();
        if (h.job != get64(data + 48)) __builtin_trap();
        uint8_t again[SL_MSG_HDR_SIZE];
        sl_msg_encode(&h, again);
        if (memcmp(again, data, SL_MSG_HDR_SIZE) != 0) __builtin_trap();
    }
    if (size < 1) return 0;
    size_t k = data[0] % 32;
    if (size < 1 + k) return 0;
    const uint8_t *id = data + 1, *hdr = data + 1 + k;
    size_t rest = size - 1 - k;
    size_t hlen = rest > SL_MSG_HDR_SIZE ? SL_MSG_HDR_SIZE : rest;
    size_t plen = rest - hlen;
    uint64_t own = hlen == SL_MSG_HDR_SIZE ? get64(hdr + 48) : 0;
    static const int selves[3][2] = {{0, 2}, {1, 2}, {5, 13}};
    for (int s = 0; s < 3; s++) {
        check_accept(id, k, hdr, hlen, plen, selves[s][0], selves[s][1], own, 1 << 20);
        check_accept(id, k, hdr, hlen, plen, selves[s][0], selves[s][1], own ^ 1, 1 << 20);
        check_accept(id, k, hdr, hlen, plen, selves[s][0], selves[s][1], own, plen ? plen - 1 : 0);
    }
    return 0;
}
