/* Ring collectives over an sl_tp: allreduce (reduce-scatter then allgather), broadcast from
 * any root, barrier.
 *
 * The tensor is cut into one segment per rank; in round s of the reduce-scatter rank r sends
 * segment (r - s) mod n to rank r + 1 and adds segment (r - s - 1) mod n from rank r - 1 into
 * its buffer, then the allgather passes the finished segments around once more. Each segment
 * travels in chunks (opts.chunk_bytes): a chunk is forwarded as soon as it is summed, so
 * while ZeroMQ's I/O thread moves chunk k over the network the calling thread sums chunk
 * k + 1, and every rank works on several chunks at once. Sends are zero-copy from the
 * caller's buffer; allgather forwards the received message itself.
 *
 * Segment g is summed along the fixed path g, g+1, ..., g-1, one addition per hop, so the
 * result depends only on the inputs and the ring size: runs are bit-reproducible, and every
 * rank ends with the same bits (the owner of a finished segment applies the average and the
 * fp16 rounding before sending it, so receivers and owner agree).
 *
 * Workload: one fused gradient buffer of 1-100 MiB per training step, 2-64 ranks. */
#ifndef SLUICE_RING_H
#define SLUICE_RING_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/status.h"
#include "sluice/tensor.h"
#include "sluice/transport.h"
#include "sluice/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sl_reduce_op { SL_REDUCE_SUM = 0, SL_REDUCE_AVG = 1 } sl_reduce_op;

/* How the ranks reach each other. AUTO: through one shared-memory segment when every rank
 * is on this host (the same host name, boot id, user, pid and network namespace and
 * /dev/shm, learned from the peers over the transport at sl_ring_create), else over the
 * transport (ZeroMQ); with ranks on several hosts and some sharing one, the hierarchy:
 * shared memory inside each host, the transport ring among one leader per host, each
 * host's ranks handed the result through their segment (sl_ring_path_name "shm+tcp"; its
 * sums are fixed by the layout, not the flat ring's). SHM: shared memory among all ranks or
 * an error. TCP: always the flat ring over the transport. The shared-memory path among all
 * ranks gives the same bits as the transport's ring for every collective (it sums each
 * element in the ring's order and applies the same fp16 roundings). Every rank must pass
 * the same path (a rank on TCP skips the others' set-up: both fail naming each other). */
typedef enum sl_ring_path { SL_RING_PATH_AUTO = 0, SL_RING_PATH_TCP = 1, SL_RING_PATH_SHM = 2 } sl_ring_path;

typedef struct sl_ring_opts {
    size_t chunk_bytes;   /* bytes per message on the wire; 0 = 8 MiB */
    int fp16;             /* send float32 as float16 (halves the bytes; rounds every hop) */
    sl_ring_path path;    /* AUTO (0), TCP or SHM, above */
    size_t shm_window;    /* shared memory: bytes per rank per pipelined window; 0 = 256 KiB */
    const char *host;     /* this rank's host as a launcher names it (borrowed, read at create);
                             NULL: the host name. Ranks group by it, with the checks above */
} sl_ring_opts;

typedef struct sl_ring sl_ring;

/* A ring over all sl_tp_size(tp) ranks of tp, which must be connected; tp is borrowed and
 * must outlive the ring. Every rank calls it (it is a collective unless opts->path is TCP:
 * the ranks tell each other where they run, and with shared memory rank 0 creates the
 * segment, the others attach, and it is unlinked before any rank returns). SL_OK,
 * SL_ENOMEM; SL_ETIMEDOUT / SL_EPEER naming a peer that did not take part; with path SHM,
 * SL_EUNSUPPORTED when the ranks are not all on this host and SL_EIO / SL_ENOMEM when the
 * segment cannot be made or attached (AUTO then uses the transport and logs why). On
 * failure *out is NULL. */
sl_status sl_ring_create(sl_tp *tp, const sl_ring_opts *opts, sl_ring **out);
void sl_ring_destroy(sl_ring *r); /* NULL is a no-op */

/* "shm", "tcp" or "shm+tcp" (the hierarchy): the path the ring's collectives take. */
const char *sl_ring_path_name(const sl_ring *r);

/* Bytes this rank has written into shared memory for its peers (0 on the transport path,
 * whose bytes sl_tp_get_stats counts): per float32 allreduce of S bytes, S (its copy of the
 * other ranks' slices, then its own slice's sum) -- at 2 ranks exactly what the transport
 * ring sends; per allgather or broadcast (root) of L bytes, L. */
uint64_t sl_ring_shm_bytes(const sl_ring *r);

/* Sum (or average) count elements of buf (SL_DT_F32, or SL_DT_I32 with SL_REDUCE_SUM and
 * no fp16: integers wrap) over all ranks, in place; every rank passes the same count,
 * dtype, op and tensor id (a label carried in every message, checked on receipt). count
 * may be 0 or smaller than the ring. On failure the buffer holds partial sums, the peers
 * were told (SL_MSG_ABORT), and the ring is unusable (later calls give SL_ESTATE):
 * SL_ETIMEDOUT / SL_EPEER naming the peer, SL_EINVAL for bad arguments (ring still usable),
 * SL_EPEER for a peer that sent a different count or dtype. */
sl_status sl_ring_allreduce(sl_ring *r, void *buf, size_t count, sl_dtype dtype,
                            sl_reduce_op op, uint32_t tensor);

/* Elements [lo, hi) of the same allreduce: buf is the whole tensor of count elements (only
 * [lo, hi) is read or written), and every element is summed along exactly the path, and
 * with exactly the operations, that sl_ring_allreduce(buf, count) gives it: the segments
 * are those of the whole count, cut to [lo, hi). So the calls over any partition of
 * [0, count) into ranges, made in the same order on every rank, leave bits identical to
 * one sl_ring_allreduce of the whole tensor (f32, i32 and fp16 alike) -- the bucketed
 * gradient exchange relies on this. Why not allreduce each range as a tensor of its own:
 * segment g's sum starts at rank g (x_g, then x_{g+1} + x_g, ...), so an element's
 * association order, and with fp16 its per-hop roundings, depend on which segment of the
 * whole tensor holds it; a range of its own would cut its segments elsewhere. The price:
 * a range inside one whole-tensor segment travels rank g -> g+1 -> ... (pipelined chunk
 * by chunk) instead of being spread over all ranks; summed over a partition every link
 * carries exactly the bytes of the whole allreduce. Every rank passes the same count, lo,
 * hi, dtype, op and tensor. lo > hi or hi > count: SL_EINVAL (ring still usable); other
 * errors as for allreduce (on failure [lo, hi) holds partial sums). */
sl_status sl_ring_allreduce_range(sl_ring *r, void *buf, size_t count, size_t lo, size_t hi, sl_dtype dtype,
                                  sl_reduce_op op, uint32_t tensor);

/* Copy root's bytes buf[0..len) to every rank's buf (pipelined around the ring). Errors as
 * for allreduce. */
sl_status sl_ring_broadcast(sl_ring *r, void *buf, size_t len, int root, uint32_t tensor);

/* Allgather: all holds n blocks of len bytes (n = the ring's size); this rank's block is
 * all[rank * len .. +len) on entry, and on return every block holds its owner's bytes, on
 * every rank. Ring algorithm: n - 1 rounds, each block forwarded around once, chunked as
 * allreduce; each rank sends and receives (n - 1) * len bytes (an allreduce of the same
 * len bytes sends 2 (n - 1) / n * len). Every rank passes the same len and tensor id (a
 * length mismatch is SL_EPEER naming the peer). Errors as for allreduce. */
sl_status sl_ring_allgather(sl_ring *r, void *all, size_t len, uint32_t tensor);

/* Compressed allreduce with error feedback (sluice/compress.h): buf holds this rank's count
 * float32 values; ef (this rank's residual state, count values) compresses buf + residual
 * into one payload, the ring allgathers every rank's payload, and every rank decodes them
 * in rank order 0..n-1, adding into buf from zero (then dividing by n for SL_REDUCE_AVG):
 * the same payload bytes summed in the same order, so the result is bit-identical on every
 * rank. flag (may be NULL): an int32 that rides along in every payload and comes back as
 * the sum over the ranks. sent (may be NULL): count floats, this rank's own decoded values
 * (what it contributed). Bytes each rank sends and receives per call: (n - 1) * (P + 4 if
 * flag), P = sl_compress_size (int8: about count bytes; sign: count / 7.5; topk F: 6 F
 * count; fp16: 2 count), against 2 (n - 1) / n * 4 count for the float32 ring allreduce:
 * int8 sends 4x less at 2 ranks and breaks even near 8; sign and top-k stay far below
 * it for any ring size this workload has. Errors as for allreduce, plus the codec's:
 * SL_ERANGE for a NaN or Inf in this rank's values (nothing sent), SL_ECORRUPT naming the
 * rank whose payload does not validate (the ring is then unusable). On failure buf is
 * unspecified. */
struct sl_compress_ef;
sl_status sl_ring_allreduce_compressed(sl_ring *r, struct sl_compress_ef *ef, float *buf, size_t count,
                                       sl_reduce_op op, uint32_t tensor, int32_t *flag, float *sent);

/* Return when every rank has entered the barrier. Errors as for allreduce. */
sl_status sl_ring_barrier(sl_ring *r);

/* float32 <-> float16 arrays (sl_f32_to_f16, sl_f16_to_f32): sluice/util.h, included above. */

#ifdef __cplusplus
}
#endif
#endif
