/* The collectives over the transport ring of the ring's members (the algorithm is
 * described in ring.h; ring_api.c holds the public entry points, which choose the path).
 *
 * Workload: one fused gradient buffer (1-100 MiB of float32) per training step on 2-64
 * ranks. The calling thread receives, sums and forwards chunk by chunk; ZeroMQ's I/O thread
 * does the socket work meanwhile, so summing chunk k+1 overlaps sending chunk k, and a rank
 * forwards each chunk the moment it is summed (several chunks of a segment in flight). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring_priv.h"
#include "sluice/ring.h"


void sl__ring_abort(sl_ring *r, const char *why) {
    r->broken = 1;
    if (r->shm) sl__shm_abort(r->shm, why);
    sl_tp_abort(r->tp, why);
}

sl_status sl__ring_failed(sl_ring *r, sl_status s) {
    if (!s || s == SL_ESTATE) return s;
    sl_error e;
    sl_err_save(&e);
    sl__ring_abort(r, e.msg);
    return sl_err_restore(&e);
}

sl_status sl__ring_usable(const sl_ring *r) {
    return r->broken ? sl_err(SL_ESTATE, "ring: an earlier collective failed; the ring must be rebuilt") : SL_OK;
}

static void add_f32(float *restrict d, const float *restrict s, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] += s[i];
}
static void add_i32(int32_t *restrict d, const int32_t *restrict s, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = (int32_t)((uint32_t)d[i] + (uint32_t)s[i]);
}

/* An aligned view of n floats (or int32s) at p, copying into scratch when p is not 4-byte
 * aligned (ZeroMQ does not promise alignment of received payloads). */
static const void *aligned4(sl_ring *r, const void *p, size_t n) {
    if (((uintptr_t)p & 3) == 0) return p;
    if (r->scratch_n < n) {
        float *s = realloc(r->scratch, n * 4);
        if (!s) return NULL;
        r->scratch = s;
        r->scratch_n = n;
    }
    memcpy(r->scratch, p, n * 4);
    return r->scratch;
}

static void free_plain(void *data, void *ctx) { (void)ctx; free(data); }

typedef struct coll {
    sl_ring *r;
    int n, me, prev, next;
    uint64_t seq;
    uint32_t tensor;
    uint8_t dtype, flags;
    size_t esz, wsz;      /* element size in memory and on the wire */
} coll;

/* Send count elements of buf starting at element off as round `round`. */
static sl_status send_chunk(coll *c, char *buf, size_t off, size_t count, uint16_t round) {
    sl_msg_hdr h = {.type = SL_MSG_DATA, .round = round, .dtype = c->dtype, .flags = c->flags,
                    .tensor = c->tensor, .step = c->seq, .offset = off};
    if (c->flags & SL_MSGF_FP16) {
        uint16_t *w = malloc(count * 2 + 1);
        if (!w) return sl_err(SL_ENOMEM, "ring: out of memory");
        sl_f32_to_f16((const float *)buf + off, w, count);
        return sl_tp_send(c->r->tp, c->next, &h, w, count * 2, free_plain, NULL);
    }
    return sl_tp_send(c->r->tp, c->next, &h, buf + off * c->esz, count * c->esz, NULL, NULL);
}

/* A message of a later collective from a rank that is not prev: in the hierarchy, a host
 * leader that finished the ranks' last common collective (the set-up's) sends on the
 * leaders' ring while its neighbour there still waits for its own neighbour in the common
 * one. Kept (copied) until its collective asks for it, instead of being dropped. */
typedef struct sl__early {
    sl_msg_hdr h;
    void *data;
    struct sl__early *next;
} sl__early;

void sl__ring_early_free(sl_ring *r) {
    while (r->early) {
        sl__early *e = r->early;
        r->early = e->next;
        free(e->data);
        free(e);
    }
    if (r->cur) free(r->cur->data);
    free(r->cur);
    r->cur = NULL;
    r->early_bytes = 0;
}

static sl_status keep_early(sl_ring *r, const sl_msg_hdr *h, const void *data) {
    if (r->early_bytes + h->length > ((size_t)1 << 30))
        return sl_err(SL_EPEER, "ring: rank %u (%s) sent more than 1 GiB ahead of this rank's collectives", h->sender,
                      sl_tp_peer_addr(r->tp, (int)h->sender));
    sl__early *e = calloc(1, sizeof *e), **pp = &r->early;
    if (!e || !(e->data = malloc(h->length + 1))) {
        free(e);
        return sl_err(SL_ENOMEM, "ring: out of memory keeping a message of a later collective");
    }
    e->h = *h;
    memcpy(e->data, data, h->length);
    while (*pp) pp = &(*pp)->next; /* in arrival order */
    *pp = e;
    r->early_bytes += h->length;
    return SL_OK;
}

/* The next message from prev: a kept one first, else the transport's. */
static sl_status next_from(coll *c, sl_msg_hdr *h, const void **data) {
    sl_ring *r = c->r;
    if (r->cur) {
        free(r->cur->data);
        free(r->cur);
        r->cur = NULL;
    }
    for (sl__early **pp = &r->early; *pp; pp = &(*pp)->next)
        if ((*pp)->h.sender == (uint32_t)c->prev) {
            r->cur = *pp;
            *pp = r->cur->next;
            r->early_bytes -= r->cur->h.length;
            *h = r->cur->h;
            *data = r->cur->data;
            return SL_OK;
        }
    for (;;) {
        size_t len;
        sl_status s = sl_tp_recv(r->tp, c->prev, -1, h, data, &len);
        if (s) return s;
        if (h->sender != (uint32_t)c->prev && h->step > c->seq) {
            if ((s = keep_early(r, h, *data))) return s;
            continue;
        }
        return SL_OK;
    }
}

/* Send the message just received on to next: without a copy, or from the kept copy. */
static sl_status forward(coll *c, sl_msg_hdr *h, const void *data) {
    if (c->r->cur) return sl_tp_send_copy(c->r->tp, c->next, h, data, h->length);
    return sl_tp_forward(c->r->tp, c->next, h);
}

/* Receive the next message of this collective from prev, which must be (round, off, count).
 * Messages of earlier collectives and from other ranks are dropped and counted. */
static sl_status recv_chunk(coll *c, uint16_t type, uint16_t round, size_t off, size_t count,
                            sl_msg_hdr *h, const void **data) {
    sl_tp *tp = c->r->tp;
    for (;;) {
        sl_status s = next_from(c, h, data);
        if (s) return s;
        if (h->sender != (uint32_t)c->prev || h->step < c->seq) { if (!c->r->cur) sl_tp_drop(tp); continue; }
        size_t want = count * c->wsz;
        if (h->type != type || h->step != c->seq || h->round != round || h->offset != off ||
            h->length != want || h->dtype != c->dtype || h->flags != c->flags || h->tensor != c->tensor) {
            sl_err(SL_EPEER,
                   "rank %d (%s) sent type %u step %llu round %u offset %llu length %llu dtype %s tensor %u; "
                   "expected type %u step %llu round %u offset %zu length %zu dtype %s tensor %u",
                   c->prev, sl_tp_peer_addr(tp, c->prev), h->type, (unsigned long long)h->step, h->round,
                   (unsigned long long)h->offset, (unsigned long long)h->length,
                   sl_dtype_name((sl_dtype)h->dtype), h->tensor, type, (unsigned long long)c->seq, round, off,
                   want, sl_dtype_name((sl_dtype)c->dtype), c->tensor);
            sl_err_hint("every rank must make the same collective calls, in the same order, with the same "
                        "count, dtype, fp16 and compress= setting, and the same ring path");
            return SL_EPEER;
        }
        return SL_OK;
    }
}

static sl_status fail(coll *c, sl_status s) {
    sl_error e;
    sl_err_save(&e);
    sl__ring_abort(c->r, e.msg);
    sl_tp_disconnect(c->r->tp); /* ZeroMQ lets go of the caller's buffer before we return */
    return sl_err_restore(&e);
}

static sl_status begin(sl_ring *r, coll *c, uint32_t tensor) {
    memset(c, 0, sizeof *c);
    sl_status s = sl__ring_usable(r);
    if (s) return s;
    c->r = r;
    if (r->mem) { /* positions on the ring of host leaders */
        c->n = r->nmem;
        c->me = r->pos;
        c->prev = r->mem[(c->me + c->n - 1) % c->n];
        c->next = r->mem[(c->me + 1) % c->n];
    } else {
        c->n = sl_tp_size(r->tp);
        c->me = sl_tp_rank(r->tp);
        c->prev = (c->me + c->n - 1) % c->n;
        c->next = (c->me + 1) % c->n;
    }
    c->seq = ++r->seq;
    c->tensor = tensor;
    return SL_OK;
}

/* begin() for a collective that moves plain bytes (broadcast, allgather, barrier). */
static sl_status begin_bytes(sl_ring *r, coll *c, uint32_t tensor) {
    sl_status s = begin(r, c, tensor);
    if (s) return s;
    c->dtype = SL_DT_U8;
    c->esz = c->wsz = 1;
    return SL_OK;
}

static size_t seg_len(size_t count, int n, int i) {
    return count / (size_t)n + ((size_t)i < count % (size_t)n ? 1 : 0);
}

/* The owner's last touch of a finished chunk: average, and fp16 rounding so the owner keeps
 * exactly what every receiver will decode. */
static void finish_chunk(coll *c, void *buf, size_t off, size_t count, sl_reduce_op op) {
    if (c->dtype != SL_DT_F32) return;
    float *p = (float *)buf + off;
    if (op == SL_REDUCE_AVG)
        for (size_t i = 0; i < count; i++) p[i] /= (float)c->n;
    if (c->flags & SL_MSGF_FP16)
        for (size_t i = 0; i < count; i++) p[i] = sl_f32_from_f16(sl_f16_from_f32(p[i]));
}

/* Segment g of the whole count elements, cut to [lo, hi): its first element and length
 * (0 when they do not meet). */
static size_t seg_cut(size_t count, int n, int g, size_t lo, size_t hi, size_t *len) {
    size_t a = sl__seg_off(count, n, g), b = a + seg_len(count, n, g);
    if (a < lo) a = lo;
    if (b > hi) b = hi;
    *len = b > a ? b - a : 0;
    return a;
}

sl_status sl__ring_tcp_allreduce_range(sl_ring *r, void *buf, size_t count, size_t lo, size_t hi, sl_dtype dtype,
                                       sl_reduce_op op, uint32_t tensor) {
    coll c;
    sl_status s = begin(r, &c, tensor);
    if (s) return s;
    int n = c.n, me = c.me;
    c.dtype = (uint8_t)dtype;
    c.esz = 4;
    c.flags = (r->fp16 && dtype == SL_DT_F32) ? SL_MSGF_FP16 : 0;
    c.wsz = c.flags ? 2 : 4;
    if (n == 1 || hi == lo) return SL_OK; /* averaging over 1 rank divides by 1 */
    size_t chunk = r->chunk_bytes / c.wsz;
    if (chunk == 0) chunk = 1;
    char *b = buf;
    int nrounds = 2 * (n - 1);

    /* round 0: our own segment, straight from the caller's buffer */
    {
        size_t sl, so = seg_cut(count, n, me, lo, hi, &sl);
        for (size_t k = 0; k < sl; k += chunk)
            if ((s = send_chunk(&c, b, so + k, sl - k < chunk ? sl - k : chunk, 0))) return fail(&c, s);
    }
    for (int round = 0; round < nrounds; round++) {
        int rs = round < n - 1;
        int g = rs ? ((me - round - 1) % n + n) % n : ((me - (round - (n - 1))) % n + n) % n;
        size_t sl, so = seg_cut(count, n, g, lo, hi, &sl);
        for (size_t k = 0; k < sl; k += chunk) {
            size_t cn = sl - k < chunk ? sl - k : chunk, off = so + k;
            sl_msg_hdr h;
            const void *data;
            if ((s = recv_chunk(&c, SL_MSG_DATA, (uint16_t)round, off, cn, &h, &data))) return fail(&c, s);
            if (rs) {
                const void *src = data;
                if (c.flags) {
                    if (r->scratch_n < cn) {
                        float *ns = realloc(r->scratch, cn * 4);
                        if (!ns) return fail(&c, sl_err(SL_ENOMEM, "ring: out of memory"));
                        r->scratch = ns;
                        r->scratch_n = cn;
                    }
                    uint16_t tmp[512];
                    for (size_t i = 0; i < cn; i += 512) { /* payload may be unaligned */
                        size_t m = cn - i < 512 ? cn - i : 512;
                        memcpy(tmp, (const char *)data + i * 2, m * 2);
                        sl_f16_to_f32(tmp, r->scratch + i, m);
                    }
                    src = r->scratch;
                } else if (!(src = aligned4(r, data, cn))) {
                    return fail(&c, sl_err(SL_ENOMEM, "ring: out of memory"));
                }
                if (dtype == SL_DT_F32) add_f32((float *)b + off, src, cn);
                else add_i32((int32_t *)b + off, src, cn);
                if (round == n - 2) finish_chunk(&c, b, off, cn, op);
                if ((s = send_chunk(&c, b, off, cn, (uint16_t)(round + 1)))) return fail(&c, s);
            } else {
                if (c.flags) {
                    uint16_t tmp[512];
                    for (size_t i = 0; i < cn; i += 512) {
                        size_t m = cn - i < 512 ? cn - i : 512;
                        memcpy(tmp, (const char *)data + i * 2, m * 2);
                        sl_f16_to_f32(tmp, (float *)b + off + i, m);
                    }
                } else {
                    memcpy(b + off * c.esz, data, cn * c.esz);
                }
                if (round < nrounds - 1) {
                    h.round = (uint16_t)(round + 1);
                    if ((s = forward(&c, &h, data))) return fail(&c, s);
                }
            }
        }
    }
    if ((s = sl_tp_flush(r->tp))) return fail(&c, s);
    return SL_OK;
}

sl_status sl__ring_tcp_broadcast(sl_ring *r, void *buf, size_t len, int root, uint32_t tensor) {
    coll c;
    sl_status s = begin_bytes(r, &c, tensor);
    if (s) return s;
    if (c.n == 1 || len == 0) return SL_OK;
    size_t chunk = r->chunk_bytes;
    for (size_t k = 0; k < len; k += chunk) {
        size_t cn = len - k < chunk ? len - k : chunk;
        if (c.me == root) {
            if ((s = send_chunk(&c, buf, k, cn, 0))) return fail(&c, s);
            continue;
        }
        sl_msg_hdr h;
        const void *data;
        if ((s = recv_chunk(&c, SL_MSG_DATA, 0, k, cn, &h, &data))) return fail(&c, s);
        memcpy((char *)buf + k, data, cn);
        if (c.next != (r->mem ? r->mem[root] : root) && (s = forward(&c, &h, data))) return fail(&c, s);
    }
    if ((s = sl_tp_flush(r->tp))) return fail(&c, s);
    return SL_OK;
}

sl_status sl__ring_tcp_allgather(sl_ring *r, void *all, size_t len, uint32_t tensor) {
    coll c;
    sl_status s = begin_bytes(r, &c, tensor);
    if (s) return s;
    int n = c.n, me = c.me;
    if (n == 1 || len == 0) return SL_OK;
    char *b = all;
    size_t chunk = r->chunk_bytes;
    /* round 0: our own block, zero-copy from the caller's buffer */
    for (size_t k = 0; k < len; k += chunk)
        if ((s = send_chunk(&c, b, (size_t)me * len + k, len - k < chunk ? len - k : chunk, 0))) return fail(&c, s);
    /* round j: the block of rank me - j - 1 arrives from prev and goes on to next, except in
     * the last round (next is its owner) */
    for (int round = 0; round < n - 1; round++) {
        size_t blk = (size_t)((me - round - 1 + 2 * n) % n) * len;
        for (size_t k = 0; k < len; k += chunk) {
            size_t cn = len - k < chunk ? len - k : chunk;
            sl_msg_hdr h;
            const void *data;
            if ((s = recv_chunk(&c, SL_MSG_DATA, (uint16_t)round, blk + k, cn, &h, &data))) return fail(&c, s);
            memcpy(b + blk + k, data, cn);
            if (round < n - 2) {
                h.round = (uint16_t)(round + 1);
                if ((s = forward(&c, &h, data))) return fail(&c, s);
            }
        }
    }
    if ((s = sl_tp_flush(r->tp))) return fail(&c, s);
    return SL_OK;
}

sl_status sl__ring_tcp_barrier(sl_ring *r) {
    coll c;
    sl_status s = begin_bytes(r, &c, 0);
    if (s) return s;
    if (c.n == 1) return SL_OK;
    sl_msg_hdr h = {.type = SL_MSG_BARRIER, .dtype = SL_DT_U8, .step = c.seq};
    const void *data;
    /* round 0: a token goes around once, so rank 0 knows all have entered; round 1 releases */
    for (int round = 0; round < 2; round++) {
        h.round = (uint16_t)round;
        h.step = c.seq;
        h.tensor = 0;
        h.offset = 0;
        if (c.me == 0) {
            if ((s = sl_tp_send_copy(r->tp, c.next, &h, NULL, 0))) return fail(&c, s);
            if (round == 0 && (s = recv_chunk(&c, SL_MSG_BARRIER, 0, 0, 0, &h, &data))) return fail(&c, s);
        } else {
            if ((s = recv_chunk(&c, SL_MSG_BARRIER, (uint16_t)round, 0, 0, &h, &data))) return fail(&c, s);
            if ((round == 0 || c.next != (r->mem ? r->mem[0] : 0)) && (s = sl_tp_send_copy(r->tp, c.next, &h, NULL, 0)))
                return fail(&c, s);
        }
    }
    return SL_OK;
}
