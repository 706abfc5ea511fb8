/* libFuzzer target for the parameter-server frame decoder (dist/ps_wire.c). The input is a
 * 56-byte transport header followed by the payload: the header must pass sl_msg_decode,
 * then the payload is decoded as a ps frame without checks, against the hash it claims,
 * and against a shard length. A frame that decodes must keep every promise of ps.h: a ps
 * message type, u8 dtype, no flags, a prefix that re-encodes to the same 40 bytes (version
 * 2), finite floats that fill the payload exactly, a finite lr >= 0 and the header's step
 * on a PUSH, status values in range (a PUSH's codec 0..4: 1..4 carry a compressed shard of at
 * least its 24-byte header instead of floats), a has-data pair of 0/0, 1/0 or 0/1 on a PUSH and 0/0
 * where the type has none, a SUM tag below 0x10000 and 1..SL_PS_SUM_MAX int32 counts that
 * fill the payload; and a stricter decode may fail only where a looser one passed. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/ps.h"

static void check(const sl_msg_hdr *h, const uint8_t *p, size_t len, const sl_ps_frame *f) {
    int t = f->type;
    if (t != h->type || t < SL_MSG_PUSH || t > SL_MSG_SUM) __builtin_trap();
    if (h->dtype != SL_DT_U8 || h->flags || f->ps != (int)h->tensor || len < SL_PS_PREFIX) __builtin_trap();
    uint8_t again[SL_PS_PREFIX];
    sl_ps_frame_encode_prefix(f, again);
    if (memcmp(again, p, SL_PS_PREFIX) != 0) __builtin_trap();
    if (p[30] != SL_PS_VERSION || p[31] != 0) __builtin_trap();
    int sums = t == SL_MSG_SUM || (t == SL_MSG_REPLY && f->status == SL_PS_SUMS);
    if (t == SL_MSG_PUSH) {
        if (f->have > 1 || f->lack > 1 || (f->have && f->lack)) __builtin_trap();
    } else if (!(t == SL_MSG_REPLY && f->status == SL_PS_OK) && (f->have || f->lack)) {
        __builtin_trap();
    }
    if (sums) {
        if (f->data || !f->sums || (const uint8_t *)f->sums != p + SL_PS_PREFIX || SL_PS_PREFIX + 4 * f->n != len ||
            f->n < 1 || f->n > (t == SL_MSG_SUM ? SL_PS_SUM_MAX : 2 * (size_t)SL_PS_SUM_MAX))
            __builtin_trap();
        if (t == SL_MSG_SUM && (f->value < 0 || f->value > 0xffff || h->step || f->lr != 0.0f)) __builtin_trap();
        return;
    }
    if (f->sums) __builtin_trap();
    if (t == SL_MSG_PUSH) {
        if (!isfinite(f->lr) || f->lr < 0 || f->value < 0 || (uint64_t)f->value != h->step) __builtin_trap();
    } else if (h->step) {
        __builtin_trap();
    }
    if (t == SL_MSG_REPLY ? f->status > SL_PS_SUMS : f->status != 0) __builtin_trap();
    if (f->codec && (t != SL_MSG_PUSH || f->codec > 4)) __builtin_trap();
    if (f->codec) { /* a compressed push: the bytes after the prefix, at least their header */
        if (f->data || f->n || f->comp != p + SL_PS_PREFIX || f->comp_len != len - SL_PS_PREFIX || f->comp_len < 24)
            __builtin_trap();
    } else if (f->comp || f->comp_len) {
        __builtin_trap();
    } else if (t == SL_MSG_REPLY && f->status == SL_PS_REJECT) {
        if (f->n || f->reason != (const char *)p + SL_PS_PREFIX || f->n_reason != len - SL_PS_PREFIX) __builtin_trap();
    } else if (f->n) {
        if (SL_PS_PREFIX + 4 * f->n != len || (const uint8_t *)f->data != p + SL_PS_PREFIX) __builtin_trap();
        for (size_t i = 0; i < f->n; i++)
            if (!isfinite(f->data[i])) __builtin_trap();
    } else if (len != SL_PS_PREFIX) {
        __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < SL_MSG_HDR_SIZE) return 0;
    sl_msg_hdr h;
    if (sl_msg_decode(data, SL_MSG_HDR_SIZE, &h) != SL_OK) return 0;
    size_t len = size - SL_MSG_HDR_SIZE;
    /* sl_tp_recv payloads are 8-byte aligned; give the decoder the same */
    uint8_t *p = malloc(len ? len : 1);
    if (!p) return 0;
    memcpy(p, data + SL_MSG_HDR_SIZE, len);
    sl_ps_frame loose, strict;
    int ok_loose = sl_ps_frame_decode(&h, p, len, 0, 0, &loose) == SL_OK;
    if (ok_loose) check(&h, p, len, &loose);
    uint32_t hash = len >= 8 ? (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24 : 1;
    size_t shard = len > SL_PS_PREFIX ? (len - SL_PS_PREFIX) / 4 : 3;
    uint32_t hashes[2] = {hash ? hash : 1, 0x6b11c5afu};
    size_t shards[2] = {shard ? shard : 1, 3};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            if (sl_ps_frame_decode(&h, p, len, hashes[a], shards[b], &strict) != SL_OK) continue;
            if (!ok_loose) __builtin_trap(); /* stricter passed where looser failed */
            check(&h, p, len, &strict);
            if (strict.plan_hash != hashes[a] || memcmp(&strict, &loose, sizeof strict) != 0) __builtin_trap();
            int carries = strict.type == SL_MSG_PUSH || strict.type == SL_MSG_INIT ||
                          (strict.type == SL_MSG_REPLY && strict.status == SL_PS_OK);
            if (carries && !strict.codec && strict.n != shards[b]) __builtin_trap();
        }
    free(p);
    return 0;
}
