/* Parameter-server frames (layout in sluice/ps.h): the 40-byte prefix after the transport
 * header, and the checks every received frame passes before a server or client uses it.
 *
 * Workload: one decode per request or reply. The finiteness scan touches every float of a
 * shard (up to hundreds of MiB), one 4-byte load each; it reads through memcpy so that a
 * payload at any alignment (a fuzzer's bytes) is fine.
 *
 * Errors name the byte offset from the payload's start; problems with the transport header
 * (type, dtype, flags, offset, round, step) are reported at byte 0, since the header is not
 * part of the payload. */
#include <math.h>
#include <string.h>

#include "ps_internal.h"
#include "sluice/compress.h"
#include "sluice/util.h"

#define WHERE "ps frame"

static const char *type_name(int t) {
    switch (t) {
    case SL_MSG_PUSH: return "PUSH";
    case SL_MSG_PULL: return "PULL";
    case SL_MSG_REPLY: return "REPLY";
    case SL_MSG_HEARTBEAT: return "HEARTBEAT";
    case SL_MSG_INIT: return "INIT";
    case SL_MSG_HELLO: return "HELLO";
    case SL_MSG_BYE: return "BYE";
    case SL_MSG_SUM: return "SUM";
    default: return "?";
    }
}

void sl_ps_frame_encode_prefix(const sl_ps_frame *f, uint8_t out[SL_PS_PREFIX]) {
    uint32_t lr;
    memcpy(&lr, &f->lr, 4);
    sl_store_le32(out, SL_PS_MAGIC);
    sl_store_le32(out + 4, f->plan_hash);
    sl_store_le64(out + 8, f->seq);
    sl_store_le64(out + 16, (uint64_t)f->value);
    sl_store_le32(out + 24, lr);
    sl_store_le32(out + 28, ((f->status | f->codec) & 0xffffu) | (uint32_t)SL_PS_VERSION << 16);
    sl_store_le32(out + 32, f->have);
    sl_store_le32(out + 36, f->lack);
}

sl_status sl_ps_frame_decode(const sl_msg_hdr *h, const void *payload, size_t len, uint32_t expect_hash,
                             size_t shard_len, sl_ps_frame *out) {
    const uint8_t *p = payload;
    int t = h->type;
    if (t < SL_MSG_PUSH || t > SL_MSG_SUM)
        return sl_err_at(SL_ECORRUPT, WHERE, 0, "message type %d is not a ps message", t);
    if (h->dtype != SL_DT_U8) return sl_err_at(SL_ECORRUPT, WHERE, 0, "%s header has dtype %u, expected u8", type_name(t), h->dtype);
    if (h->flags) return sl_err_at(SL_ECORRUPT, WHERE, 0, "%s header has flags 0x%02x, expected 0", type_name(t), h->flags);
    if (h->offset || h->round)
        return sl_err_at(SL_ECORRUPT, WHERE, 0, "%s header has offset %llu and round %u, expected 0", type_name(t),
                         (unsigned long long)h->offset, h->round);
    /* the version first (old frames are shorter), once the bytes that hold it are there */
    if (len < 32)
        return sl_err_at(SL_ECORRUPT, WHERE, (int64_t)len, "%s payload of %zu bytes is shorter than the %d-byte prefix",
                         type_name(t), len, SL_PS_PREFIX);
    if (sl_load_le32(p) != SL_PS_MAGIC)
        return sl_err_at(SL_ECORRUPT, WHERE, 0, "bad magic 0x%08x (expected 0x%08x \"SLPS\")", sl_load_le32(p), SL_PS_MAGIC);
    unsigned version = sl_load_le32(p + 28) >> 16;
    if (version != SL_PS_VERSION)
        return sl_err_at(SL_ECORRUPT, WHERE, 30, "%s frame version %u, expected %d (a worker or ps of another Sluice "
                         "version)", type_name(t), version, SL_PS_VERSION);
    if (len < SL_PS_PREFIX)
        return sl_err_at(SL_ECORRUPT, WHERE, (int64_t)len, "%s payload of %zu bytes is shorter than the %d-byte prefix",
                         type_name(t), len, SL_PS_PREFIX);
    sl_ps_frame f = {.type = t, .ps = (int)h->tensor};
    f.plan_hash = sl_load_le32(p + 4);
    if (expect_hash && f.plan_hash != expect_hash)
        return sl_err_at(SL_ECORRUPT, WHERE, 4, "plan hash 0x%08x, expected 0x%08x", f.plan_hash, expect_hash);
    f.seq = sl_load_le64(p + 8);
    f.value = (int64_t)sl_load_le64(p + 16);
    if (t == SL_MSG_SUM) {
        if (f.value < 0 || f.value > 0xffff)
            return sl_err_at(SL_ECORRUPT, WHERE, 16, "SUM tag %lld is out of range (0..65535)", (long long)f.value);
        if (h->step) return sl_err_at(SL_ECORRUPT, WHERE, 0, "SUM header has step %llu, expected 0",
                                      (unsigned long long)h->step);
    } else if (t == SL_MSG_PUSH) {
        if (f.value < 0) return sl_err_at(SL_ECORRUPT, WHERE, 16, "PUSH step %lld is negative", (long long)f.value);
        if (h->step != (uint64_t)f.value)
            return sl_err_at(SL_ECORRUPT, WHERE, 16, "PUSH step %lld disagrees with the header's step %llu",
                             (long long)f.value, (unsigned long long)h->step);
    } else {
        if (t == SL_MSG_REPLY ? f.value < -1 : f.value != 0)
            return sl_err_at(SL_ECORRUPT, WHERE, 16, "%s value %lld is out of range", type_name(t), (long long)f.value);
        if (h->step) return sl_err_at(SL_ECORRUPT, WHERE, 0, "%s header has step %llu, expected 0", type_name(t),
                                      (unsigned long long)h->step);
    }
    uint32_t lrbits = sl_load_le32(p + 24);
    memcpy(&f.lr, &lrbits, 4);
    if (t == SL_MSG_PUSH ? !(isfinite(f.lr) && f.lr >= 0) : lrbits != 0)
        return sl_err_at(SL_ECORRUPT, WHERE, 24, "%s learning rate %g (bits 0x%08x) is not allowed%s", type_name(t),
                         (double)f.lr, lrbits, t == SL_MSG_PUSH ? " (must be finite and >= 0)" : " (must be 0)");
    f.status = sl_load_le32(p + 28) & 0xffffu;
    if (t == SL_MSG_PUSH) { /* the codec of its data (sluice/compress.h); 0: float32 */
        if (f.status > SL_COMPRESS_TOPK)
            return sl_err_at(SL_ECORRUPT, WHERE, 28, "PUSH codec %u is out of range (0 float32, 1..4 compressed)",
                             f.status);
        f.codec = f.status;
        f.status = 0;
    } else if (t == SL_MSG_REPLY ? f.status > SL_PS_SUMS : f.status != 0) {
        return sl_err_at(SL_ECORRUPT, WHERE, 28, "%s status %u is out of range", type_name(t), f.status);
    }
    f.have = sl_load_le32(p + 32);
    f.lack = sl_load_le32(p + 36);
    if (t == SL_MSG_PUSH) {
        if (f.have > 1 || f.lack > 1 || (f.have && f.lack))
            return sl_err_at(SL_ECORRUPT, WHERE, f.have > 1 ? 32 : 36, "PUSH has-data pair %u/%u is not allowed (0/0, "
                             "1/0 or 0/1)", f.have, f.lack);
    } else if (!(t == SL_MSG_REPLY && f.status == SL_PS_OK)) {
        /* only a PUSH's reply counts; the receiver checks the counts against its workers */
        if (f.have || f.lack)
            return sl_err_at(SL_ECORRUPT, WHERE, f.have ? 32 : 36, "%s has-data pair %u/%u, expected 0/0", type_name(t),
                             f.have, f.lack);
    }
    size_t dlen = len - SL_PS_PREFIX;
    int carries = t == SL_MSG_PUSH || t == SL_MSG_INIT || (t == SL_MSG_REPLY && f.status == SL_PS_OK);
    if (t == SL_MSG_SUM || (t == SL_MSG_REPLY && f.status == SL_PS_SUMS)) {
        if (dlen % 4)
            return sl_err_at(SL_ECORRUPT, WHERE, SL_PS_PREFIX, "%s data of %zu bytes is not a whole number of int32s",
                             type_name(t), dlen);
        f.n = dlen / 4;
        /* a reply adds one flag per worker to the sums */
        size_t max = t == SL_MSG_SUM ? SL_PS_SUM_MAX : 2 * (size_t)SL_PS_SUM_MAX;
        if (f.n < 1 || f.n > max)
            return sl_err_at(SL_ECORRUPT, WHERE, SL_PS_PREFIX, "%s carries %zu counts, expected 1..%zu", type_name(t),
                             f.n, max);
        f.sums = (const int32_t *)(const void *)(p + SL_PS_PREFIX);
    } else if (t == SL_MSG_PUSH && f.codec) {
        /* a compressed gradient: the server validates it against its codec and shard */
        if (dlen < SL_COMPRESS_HEADER)
            return sl_err_at(SL_ECORRUPT, WHERE, SL_PS_PREFIX, "PUSH compressed data of %zu bytes is shorter than its "
                             "%u-byte header", dlen, SL_COMPRESS_HEADER);
        f.comp = p + SL_PS_PREFIX;
        f.comp_len = dlen;
    } else if (t == SL_MSG_REPLY && f.status == SL_PS_REJECT) {
        f.reason = (const char *)p + SL_PS_PREFIX;
        f.n_reason = dlen;
    } else if (carries) {
        if (dlen % 4)
            return sl_err_at(SL_ECORRUPT, WHERE, SL_PS_PREFIX, "%s data of %zu bytes is not a whole number of floats",
                             type_name(t), dlen);
        f.n = dlen / 4;
        if (shard_len && f.n != shard_len)
            return sl_err_at(SL_ECORRUPT, WHERE, SL_PS_PREFIX, "%s carries %zu floats, the shard has %zu", type_name(t),
                             f.n, shard_len);
        const uint8_t *d = p + SL_PS_PREFIX;
        for (size_t i = 0; i < f.n; i++) {
            float v;
            memcpy(&v, d + 4 * i, 4);
            if (!isfinite(v))
                return sl_err_at(SL_ECORRUPT, WHERE, (int64_t)(SL_PS_PREFIX + 4 * i), "%s float %zu is %g", type_name(t),
                                 i, (double)v);
        }
        f.data = (const float *)(const void *)d;
    } else if (dlen) {
        return sl_err_at(SL_ECORRUPT, WHERE, SL_PS_PREFIX, "%s frame has %zu data bytes, expected none", type_name(t),
                         dlen);
    }
    *out = f;
    return SL_OK;
}
