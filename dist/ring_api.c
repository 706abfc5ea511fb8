/* The ring's public entry points (sluice/ring.h): create and destroy, the arguments'
 * checks, and the path each collective takes: the transport ring (ring.c), shared memory
 * among all ranks (ring_shm.c), or the hierarchy (ring_layout.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring_priv.h"
#include "sluice/compress.h"
#include "sluice/ring.h"

sl_status sl_ring_create(sl_tp *tp, const sl_ring_opts *opts, sl_ring **out) {
    *out = NULL;
    sl_ring *r = calloc(1, sizeof *r);
    if (!r) return sl_err(SL_ENOMEM, "ring: out of memory");
    r->tp = tp;
    /* 8 MiB messages: measured best for 64 MiB over loopback TCP at 2 and 4 ranks (1 MiB
     * left Open MPI ahead by 3-10%); smaller tensors simply travel in fewer chunks */
    r->chunk_bytes = opts && opts->chunk_bytes ? opts->chunk_bytes : ((size_t)8 << 20);
    if (r->chunk_bytes < 4) r->chunk_bytes = 4;
    r->fp16 = opts ? opts->fp16 : 0;
    sl_ring_path path = opts ? opts->path : SL_RING_PATH_AUTO;
    if (path != SL_RING_PATH_AUTO && path != SL_RING_PATH_TCP && path != SL_RING_PATH_SHM) {
        free(r);
        return sl_err(SL_EINVAL, "ring: unknown path %d (auto, tcp, shm)", (int)path);
    }
    if (path != SL_RING_PATH_TCP && sl_tp_size(tp) > 1) {
        sl_status s = sl__ring_layout(r, opts);
        if (s) {
            sl_ring_destroy(r);
            return s;
        }
    }
    *out = r;
    return SL_OK;
}

void sl_ring_destroy(sl_ring *r) {
    if (!r) return;
    sl__ring_layout_free(r);
    sl__ring_early_free(r);
    free(r->scratch);
    free(r->gather);
    free(r);
}

const char *sl_ring_path_name(const sl_ring *r) { return !r ? "tcp" : r->hier ? "shm+tcp" : r->shm ? "shm" : "tcp"; }

uint64_t sl_ring_shm_bytes(const sl_ring *r) { return r && r->shm ? r->shm->written : 0; }

static sl_status allreduce_range(sl_ring *r, void *buf, size_t count, size_t lo, size_t hi, sl_dtype dtype,
                                 sl_reduce_op op, uint32_t tensor) {
    if (dtype != SL_DT_F32 && dtype != SL_DT_I32)
        return sl_err(SL_EINVAL, "ring allreduce: dtype %s is not supported (float32, int32)", sl_dtype_name(dtype));
    if (dtype == SL_DT_I32 && op != SL_REDUCE_SUM)
        return sl_err(SL_EINVAL, "ring allreduce: int32 supports sum only");
    if (op != SL_REDUCE_SUM && op != SL_REDUCE_AVG)
        return sl_err(SL_EINVAL, "ring allreduce: unknown reduce op %d", (int)op);
    if (lo > hi || hi > count)
        return sl_err(SL_EINVAL, "ring allreduce: range [%zu, %zu) is not within the %zu elements", lo, hi, count);
    if (hi > lo && !buf) return sl_err(SL_EINVAL, "ring allreduce: NULL buffer");
    if (r->hier) return sl__ring_hier_allreduce_range(r, buf, count, lo, hi, dtype, op, tensor);
    if (r->shm)
        return sl__ring_failed(r, sl__shm_allreduce_range(r->shm, buf, count, lo, hi, dtype, op, r->fp16, tensor));
    return sl__ring_tcp_allreduce_range(r, buf, count, lo, hi, dtype, op, tensor);
}

sl_status sl_ring_allreduce(sl_ring *r, void *buf, size_t count, sl_dtype dtype,
                            sl_reduce_op op, uint32_t tensor) {
    return allreduce_range(r, buf, count, 0, count, dtype, op, tensor);
}

sl_status sl_ring_allreduce_range(sl_ring *r, void *buf, size_t count, size_t lo, size_t hi, sl_dtype dtype,
                                  sl_reduce_op op, uint32_t tensor) {
    return allreduce_range(r, buf, count, lo, hi, dtype, op, tensor);
}

sl_status sl_ring_broadcast(sl_ring *r, void *buf, size_t len, int root, uint32_t tensor) {
    if (root < 0 || root >= sl_tp_size(r->tp))
        return sl_err(SL_EINVAL, "ring broadcast: root %d is not a rank (0..%d)", root, sl_tp_size(r->tp) - 1);
    if (len && !buf) return sl_err(SL_EINVAL, "ring broadcast: NULL buffer");
    if (r->hier) return sl__ring_hier_broadcast(r, buf, len, root, tensor);
    if (r->shm) return sl__ring_failed(r, sl__shm_broadcast(r->shm, buf, len, root, tensor));
    return sl__ring_tcp_broadcast(r, buf, len, root, tensor);
}

sl_status sl_ring_allgather(sl_ring *r, void *all, size_t len, uint32_t tensor) {
    if (len && !all) return sl_err(SL_EINVAL, "ring allgather: NULL buffer");
    if (r->hier) return sl__ring_hier_allgather(r, all, len, tensor);
    if (r->shm) return sl__ring_failed(r, sl__shm_allgather(r->shm, all, len, tensor));
    return sl__ring_tcp_allgather(r, all, len, tensor);
}

sl_status sl_ring_allreduce_compressed(sl_ring *r, sl_compress_ef *ef, float *buf, size_t count, sl_reduce_op op,
                                       uint32_t tensor, int32_t *flag, float *sent) {
    if (!ef) return sl_err(SL_EINVAL, "ring compressed allreduce: no error-feedback state");
    if (count && !buf) return sl_err(SL_EINVAL, "ring compressed allreduce: NULL buffer");
    if (op != SL_REDUCE_SUM && op != SL_REDUCE_AVG)
        return sl_err(SL_EINVAL, "ring compressed allreduce: unknown reduce op %d", (int)op);
    sl_status s = sl__ring_usable(r);
    if (s) return s;
    const sl_compress_spec *sp = sl_compress_ef_spec(ef);
    int n = sl_tp_size(r->tp), me = sl_tp_rank(r->tp);
    size_t L = sl_compress_size(sp, count), blk = L + (flag ? 4 : 0), len;
    if (r->gather_n < blk * (size_t)n) {
        unsigned char *g = realloc(r->gather, blk * (size_t)n);
        if (!g) return sl_err(SL_ENOMEM, "ring: out of memory for %d compressed payloads of %zu bytes", n, blk);
        r->gather = g;
        r->gather_n = blk * (size_t)n;
    }
    unsigned char *mine = r->gather + (size_t)me * blk;
    /* a NaN or Inf is refused before anything is sent: the peers then learn it from the
     * strategy's abort, not from a payload */
    s = sl_compress_ef_step(ef, buf, count, mine, L, &len, sent);
    if (s) return s;
    if (flag) memcpy(mine + L, flag, 4);
    if ((s = sl_ring_allgather(r, r->gather, blk, tensor))) return s;
    /* every rank sums the same payloads in the same order: identical bits everywhere */
    memset(buf, 0, count * sizeof *buf);
    int32_t fsum = 0;
    for (int k = 0; k < n; k++) {
        const unsigned char *p = r->gather + (size_t)k * blk;
        char who[160];
        snprintf(who, sizeof who, "rank %d (%s), collective %llu", k, k == me ? "this rank" : sl_tp_peer_addr(r->tp, k),
                 (unsigned long long)r->seq);
        if ((s = sl_compress_decode_add(sp, p, L, count, buf, who))) return sl__ring_failed(r, s);
        if (flag) {
            int32_t f;
            memcpy(&f, p + L, 4);
            fsum = (int32_t)((uint32_t)fsum + (uint32_t)f);
        }
    }
    if (op == SL_REDUCE_AVG)
        for (size_t i = 0; i < count; i++) buf[i] /= (float)n;
    if (flag) *flag = fsum;
    return SL_OK;
}

sl_status sl_ring_barrier(sl_ring *r) {
    if (r->hier) return sl__ring_hier_barrier(r);
    if (r->shm) return sl__ring_failed(r, sl__shm_barrier(r->shm));
    return sl__ring_tcp_barrier(r);
}
