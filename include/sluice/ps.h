/* Parameter servers: ps tasks own shards of the model's parameters; workers push gradients
 * and pull fresh parameters at their own pace (TensorFlow's ParameterServerStrategy,
 * ps-lite's push/pull). This header is the transport-level half (dist/): the shard plan,
 * the wire frames, the server loop and the worker's client. The training half (the
 * optimizer the server applies, shard checkpoints, the trainer hooks) is in
 * sluice/strategy.h.
 *
 * Cluster: W workers and P ps tasks share one sl_tp (sluice/transport.h) of W + P ranks:
 * worker i is rank i, ps j is rank W + j. Every task binds its own address and connects to
 * all others (a ps answers a worker through its connection to the worker's inbox).
 *
 * ---- the shard plan ---------------------------------------------------------------------
 * The trainable parameters are one flat float32 vector made of variables (sizes[0..nvars)
 * in order). Variables of more than split_floats floats are split into P contiguous parts
 * of equal size (the last part takes the remainder), one per ps; the other variables go
 * whole, largest first (ties: lower variable index first), to the ps with the fewest floats
 * so far (ties: lower ps index). A ps's shard is its segments packed in increasing flat
 * offset order. The plan hash (FNV-1a 32 over P and every segment's ps, offset and length,
 * in flat order) travels in every frame, so a worker with another model is turned away.
 *
 * ---- frames -----------------------------------------------------------------------------
 * A ps message is an sl_tp message (56-byte header carrying the job id, validated by sl_msg_decode) whose
 * payload starts with a 40-byte ps prefix (frame version 2), followed by its data:
 *
 *   offset size field
 *        0    4 magic     "SLPS" (0x53504c53 little-endian)
 *        4    4 plan_hash the sender's plan hash
 *        8    8 seq       request number (replies echo the request's)
 *       16    8 value     PUSH: the worker's step; REPLY: the shard's version (updates
 *                         applied so far); HELLO reply: the worker's last recorded step
 *                         (-1: none); SUM and REPLY(SUMS): the SUM's tag (0..0xffff);
 *                         others 0
 *       24    4 lr        PUSH: learning rate (finite, >= 0); others 0.0
 *       28    2 status    PUSH: the codec of its data (0: n float32; 1 fp16, 2 int8, 3 sign,
 *                         4 topk: one sluice/compress.h payload of the shard's values, which
 *                         the ps validates against its own `compress=` and shard length);
 *                         REPLY: SL_PS_OK, SL_PS_UNINIT (the ps has no parameters yet:
 *                         the chief has not sent INIT), SL_PS_REJECT (wrong plan hash or a
 *                         malformed request; data is then a UTF-8 reason), SL_PS_SUMS (the
 *                         answer to a SUM); requests: 0
 *       30    2 version   SL_PS_VERSION (2). Version 1 frames (a 32-byte prefix whose status
 *                         was 4 bytes) have 0 here, and a version 1 reader sees a version 2
 *                         frame's status out of range: either way the frame is refused.
 *       32    4 have      the has-data flag (sync rounds, lockstep epochs). PUSH: 1 when the
 *                         worker holds a batch for its next step of this epoch, else 0;
 *                         REPLY to a PUSH of a sync round: how many of the round's workers
 *                         said 1. Others 0.
 *       36    4 lack      PUSH: 1 when the worker holds no batch for its next step (have
 *                         and lack are then 0 and 1); both 0: the worker says nothing (an
 *                         async push, or a sync push outside lockstep epochs); 1 and 1 is
 *                         malformed. REPLY to a PUSH of a sync round: how many of the
 *                         round's workers said lack. Others 0 (a REPLY(OK) may carry any
 *                         counts: the worker checks have + lack <= its workers).
 *       40  4*n data      PUSH: the gradient shard (n floats, or the compressed payload); INIT and REPLY(OK): the
 *                         parameter shard; SUM: n int32 counts (1 <= n <= SL_PS_SUM_MAX);
 *                         REPLY(SUMS): the n sums (int32), then one int32 per worker, 1
 *                         when its counts are in the sums, else 0 (at most 2 x SL_PS_SUM_MAX
 *                         values); HELLO/PULL/BYE/HEARTBEAT: none
 *
 * The sl_tp header carries: type (SL_MSG_PUSH, PULL, REPLY, HEARTBEAT, INIT, HELLO, BYE, SUM),
 * dtype SL_DT_U8, flags 0, tensor = the ps index the frame is for
 * or from, step = the worker's step (PUSH) or 0. sl_ps_frame_decode checks every field:
 * magic, version, hash (when expect_hash != 0), a data length that is a multiple of 4 and
 * equals the shard length where the type carries the shard, finite gradient and parameter
 * values, finite lr >= 0, status values, the has-data pair (PUSH: 0/0, 1/0 or 0/1), a SUM's
 * tag and count, zero fields where the type has none. A frame that fails is dropped and
 * counted by the server, which goes on serving.
 *
 * ---- protocol ---------------------------------------------------------------------------
 *   HELLO   worker -> ps   "I am worker i": reply REPLY with value = the worker's last
 *                          recorded step (-1) and the parameters (or status UNINIT).
 *   INIT    chief -> ps    the initial parameter shard. Taken only when the ps has none
 *                          (fresh start); otherwise ignored. Reply: REPLY with the ps's
 *                          parameters (which then win: a restored ps keeps its state).
 *   PULL    worker -> ps   reply: REPLY with the parameters (or UNINIT).
 *   PUSH    worker -> ps   a gradient shard for the worker's step with its lr. Async mode
 *                          (the default): applied at once (apply callback) with lr / A,
 *                          A = the workers less those now dead (the batch is the global
 *                          batch split over the workers: one push from each makes one
 *                          global step; the dead leave their share to the others), reply
 *                          with the new parameters. Sync mode: held until every live worker has
 *                          pushed for this round, then the mean is applied once and every
 *                          waiting worker gets the reply (a ps forms its first round, step
 *                          or sum, only once every worker has been live: the workers start
 *                          together; a restored ps waits at most dead_after_s from its
 *                          start, then goes on without the workers that did not come back,
 *                          naming them in a warning). With a staleness bound k the reply
 *                          to a worker more than k steps ahead of the slowest live worker
 *                          is held until the slowest catches up (or dies). In a sync round
                          the reply's have and lack count the round's workers that said
                          they hold a next batch or not (lockstep epochs: sluice/step.h);
                          in async mode the pair is ignored and answered 0/0. A PUSH that
 *                          repeats the worker's last seq, or is for a step at or below the
 *                          step the ps recorded for it (a client's retry), is answered
 *                          without being applied again.
 *   SUM     worker -> ps   sync mode: int32 counts to add over the workers (the trainer's
 *                          per-epoch agreements). A sum round forms, like a step round, once
 *                          every live worker has a request waiting; it takes the SUMs with
 *                          the tag and count of the lowest-numbered worker that sent one, adds
 *                          them (in 64 bits, clamped to int32) and answers each REPLY(SUMS)
 *                          naming the workers in it. A worker that waits in a step round
 *                          meanwhile (it restarted and is not at the same place) is left out
 *                          of the sum, as a dead one is. Async mode answers REJECT.
 *   HEARTBEAT worker -> ps every heartbeat_s while the worker is otherwise silent; no reply.
 *   BYE     worker -> ps   the worker is done (no reply). It leaves the live set.
 * A worker is live from its first message until BYE, until its connection closes
 * (sl_tp_peer_lost), or until nothing came from it for dead_after_s. A dead worker that
 * sends again (restarted) is live again. The server returns once the chief (worker 0) has
 * said BYE and every other worker has said BYE or is dead; a worker that never joined counts
 * as dead only dead_after_s after the server's start (a warning names it): until then the
 * server waits for it, so a worker that starts after an async chief has finished still
 * trains.
 *
 * Threads: a server or client is used by one thread (a client runs its own heartbeat
 * thread internally, under its lock). Workload: a few workers and ps tasks, one push per
 * worker step, shards of KiB to hundreds of MiB. */
#ifndef SLUICE_PS_H
#define SLUICE_PS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/compress.h"
#include "sluice/status.h"
#include "sluice/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- plan ---- */

typedef struct sl_ps_seg {
    int ps;              /* owner */
    size_t offset, len;  /* in the flat vector */
    size_t shard_offset; /* where it starts in its ps's packed shard */
} sl_ps_seg;

typedef struct sl_ps_plan {
    int nps;
    size_t total;        /* floats in the flat vector */
    int nseg;
    sl_ps_seg *segs;     /* in flat-offset order (owned) */
    size_t *shard_len;   /* [nps] floats per shard (owned) */
    uint32_t hash;
} sl_ps_plan;

/* Plan nvars variables of sizes[i] floats (each >= 1) over nps >= 1 ps tasks. split_floats
 * 0: the default max(1024, total / (4 * nps)). SL_OK and *out (free with sl_ps_plan_free),
 * SL_EINVAL (no variables, a zero size, nps < 1) or SL_ENOMEM; *out NULL on failure. */
sl_status sl_ps_plan_create(const size_t *sizes, int nvars, int nps, size_t split_floats, sl_ps_plan **out);
void sl_ps_plan_free(sl_ps_plan *p); /* NULL is a no-op */
/* Copy ps `ps`'s segments of flat[0..total) into packed[0..shard_len[ps]), and back. */
void sl_ps_plan_gather(const sl_ps_plan *p, int ps, const float *flat, float *packed);
void sl_ps_plan_scatter(const sl_ps_plan *p, int ps, const float *packed, float *flat);

/* ---- frames ---- */

#define SL_PS_MAGIC 0x53504c53u /* "SLPS" */
#define SL_PS_VERSION 2
#define SL_PS_PREFIX 40
#define SL_PS_SUM_MAX 65536     /* counts in one SUM */

enum { SL_PS_OK = 0, SL_PS_UNINIT = 1, SL_PS_REJECT = 2, SL_PS_SUMS = 3 };

typedef struct sl_ps_frame {
    int type;             /* SL_MSG_* of the header */
    int ps;               /* the header's tensor field */
    uint32_t plan_hash;
    uint64_t seq;
    int64_t value;
    float lr;
    uint32_t status;
    uint32_t have, lack;  /* the has-data pair (see the layout) */
    const float *data;    /* points into the payload at byte 40: aligned for float only when
                             the payload is (ZeroMQ may deliver a payload at any offset of its
                             receive buffer: copy a misaligned one before decoding) */
    size_t n;             /* floats in data, or int32 counts in sums */
    const int32_t *sums;  /* SUM and REPLY(SUMS): the counts (payload byte 40, aligned as data
                             is), data is then NULL; else NULL */
    const char *reason;   /* REJECT: the reason text (not NUL-terminated), n_reason bytes */
    size_t n_reason;
    uint32_t codec;       /* PUSH: 0 (data holds n floats) or a sl_compress_kind: comp holds
                             comp_len bytes of a compressed shard (not yet validated beyond
                             its length >= its 24-byte header), data is NULL and n 0 */
    const uint8_t *comp;
    size_t comp_len;
} sl_ps_frame;

/* Validate header h (already decoded by sl_msg_decode) and payload[0..len) as a ps frame.
 * expect_hash: the receiver's plan hash (0: do not check); shard_len: the floats a frame
 * that carries a shard must have (0: do not check). SL_OK and *out filled, or SL_ECORRUPT
 * with "ps frame: byte N: what" (byte offsets count from the payload's start); *out is
 * written only on success. */
sl_status sl_ps_frame_decode(const sl_msg_hdr *h, const void *payload, size_t len, uint32_t expect_hash,
                             size_t shard_len, sl_ps_frame *out);

/* Write the 40-byte prefix of f (magic and version filled in) into out. */
void sl_ps_frame_encode_prefix(const sl_ps_frame *f, uint8_t out[SL_PS_PREFIX]);

/* ---- server ---- */

/* Where a ps shard stands: what a checkpoint saves and a restore gives back. */
typedef struct sl_ps_shard_state {
    int64_t version;        /* updates applied */
    int64_t *worker_steps;  /* [nworkers] last step pushed by each worker, -1 none (owned by caller) */
    int nworkers;
} sl_ps_shard_state;

typedef struct sl_ps_server_ops {
    void *ctx;
    /* Apply gradient grad[0..n) (the mean, in sync mode) to params[0..n) with rate lr,
     * in place. An error stops the server. */
    sl_status (*apply)(void *ctx, float *params, const float *grad, size_t n, float lr);
    /* Called once right after the chief's INIT is taken (before the INIT's reply, so a
     * ps restarted mid-run always finds a shard), every ckpt_every_s seconds when the
     * version moved, and once when the server returns: persist params and st. NULL: no
     * checkpoints. An error is logged (sl_log) and the server goes on; the last save's
     * error, when the workers are done, is what sl_ps_server_run returns (a ps whose last
     * shard could not be written fails: a full disk, a file-size limit). */
    sl_status (*save)(void *ctx, const float *params, size_t n, const sl_ps_shard_state *st);
} sl_ps_server_ops;

typedef struct sl_ps_server_opts {
    bool sync;              /* synchronous rounds */
    int staleness;          /* < 0: no bound; k >= 0: a worker may be at most k steps ahead */
    double dead_after_s;    /* silence after which a worker is dead (and how long a restored
                               sync ps waits for a worker that never came back); 0 = 10 s */
    double ckpt_every_s;    /* 0 = 5 s */
    volatile int *stop;     /* when non-NULL and set, the server saves and returns SL_ECANCELED */
    sl_compress_spec compress; /* the codec compressed PUSHes must use (float32 PUSHes are
                               always taken): a compressed PUSH of another codec is answered
                               REJECT naming both; one that does not validate (sluice/compress.h)
                               is answered REJECT with the decoder's message naming the worker
                               and step, and counted as dropped. Decoded values are applied as
                               a float32 push would be. */
} sl_ps_server_opts;

typedef struct sl_ps_server_stats {
    uint64_t pushes, pulls, applied;
    uint64_t dropped;       /* malformed frames, including those the transport refused */
    uint64_t rejected;      /* frames with another plan hash (answered REJECT) */
    int64_t version;
} sl_ps_server_stats;

typedef struct sl_ps_server sl_ps_server;

/* Create ps `ps_index` of a cluster of nworkers workers and plan->nps ps tasks whose
 * addresses are addrs[0..nworkers+nps) (workers first). Binds addrs[nworkers+ps_index]
 * and connects. tpo: transport options (timeouts, CURVE), may be NULL. init: the
 * restored shard (shard_len floats, copied) and its state, or NULL for a fresh ps that
 * waits for the chief's INIT. plan and ops are borrowed and must outlive the server.
 * SL_OK / SL_EINVAL / SL_EIO (bind) / SL_ENOMEM; *out NULL on failure. */
sl_status sl_ps_server_create(const char *const *addrs, int nworkers, int ps_index, const sl_ps_plan *plan,
                              const sl_tp_opts *tpo, const sl_ps_server_ops *ops, const sl_ps_server_opts *opts,
                              const float *init, const sl_ps_shard_state *init_state, sl_ps_server **out);

/* Serve until done (see the protocol): SL_OK; the error of the last save when it failed
 * (ops.save); SL_ECANCELED when *opts.stop was set; an apply error; SL_EIO from ZeroMQ.
 * Malformed frames never end it. */
sl_status sl_ps_server_run(sl_ps_server *s);

/* The server's bound endpoint (for tests that bind port 0) and counters. */
const char *sl_ps_server_endpoint(const sl_ps_server *s);
void sl_ps_server_get_stats(const sl_ps_server *s, sl_ps_server_stats *out);
void sl_ps_server_free(sl_ps_server *s); /* NULL is a no-op */

/* ---- client (a worker) ---- */

typedef struct sl_ps_client_opts {
    double retry_s;         /* how long a request keeps being retried while a ps is lost or
                               silent (it may be restarting): 0 = 120 s. Then SL_EPEER. */
    double heartbeat_s;     /* 0 = 1 s */
} sl_ps_client_opts;

typedef struct sl_ps_client sl_ps_client;

/* Create worker `worker`'s client (binds addrs[worker], connects to all). Arguments as for
 * the server. *out NULL on failure. */
sl_status sl_ps_client_create(const char *const *addrs, int nworkers, int worker, const sl_ps_plan *plan,
                              const sl_tp_opts *tpo, const sl_ps_client_opts *opts, sl_ps_client **out);

/* Join: HELLO to every ps. The chief (worker 0) sends INIT with its own params (flat,
 * plan->total floats) to each ps that answers UNINIT; other workers wait (retrying PULL)
 * until the chief has done so. On SL_OK flat holds the servers' parameters and
 * *resume_step the highest last step any ps recorded for this worker (-1: none).
 * Failures: SL_EPEER / SL_ETIMEDOUT naming the ps, SL_EINVAL when a ps rejects the plan. */
sl_status sl_ps_client_join(sl_ps_client *c, float *flat, int64_t *resume_step);
/* After a successful join: the last step ps j recorded for this worker (its HELLO answer:
 * -1 none, as from a fresh ps); -1 before a join or for j out of range. */
int64_t sl_ps_client_recorded_step(sl_ps_client *c, int j);

/* Push this worker's gradient (flat, plan->total floats) for `step` with rate lr to every
 * ps, and receive the new parameters into params (flat). A ps that is lost is retried
 * for retry_s (a restarted ps answers from its restored shard). */
sl_status sl_ps_client_push_pull(sl_ps_client *c, const float *grad, int64_t step, float lr, float *params);

/* Sync mode, lockstep epochs (sluice/step.h): push_pull with this worker's has-data
 * flag (has_next: it holds a batch for step + 1 of its epoch). On SL_OK *have and *lack
 * count the workers of the step's round that said they hold one or not: the answer of the
 * ps whose round lacked most (ties: the one that had least), so every worker of a round
 * reads the same pair. 0 and 0 when a ps runs async rounds (it ignores the flag). A reply
 * whose pair is out of range (more than the workers, or 0/0 from one ps while another
 * counted) is dropped like any malformed frame. */
sl_status sl_ps_client_push_pull_more(sl_ps_client *c, const float *grad, int64_t step, float lr, float *params,
                                      bool has_next, int *have, int *lack);

/* Sync mode: add v[0..n) (1 <= n <= SL_PS_SUM_MAX) over the workers, in place, through ps 0
 * (a SUM with tag < 0x10000). took_part (may be NULL): [nworkers], set to 1 for the workers
 * whose counts are in the sums (this one always) and 0 for those left out (dead, done, or
 * waiting in a step round). SL_OK; SL_EINVAL for bad arguments or when ps 0 refuses (async
 * mode: its reason is in the message); otherwise the errors of push_pull. v and took_part
 * are unchanged on failure. */
sl_status sl_ps_client_sum(sl_ps_client *c, int32_t *v, size_t n, uint32_t tag, uint8_t *took_part);

/* Gradient compression with error feedback for this worker's pushes (sluice/compress.h):
 * each ps's shard gets its own residual (shard_len float64 values); a push then sends each
 * shard as one compressed payload (int8: about 1 byte per value, sign 0.13, topk F 6 F,
 * fp16 2, against 4 for float32: a top-k push is a sparse push of (offset, value) pairs).
 * A retry resends the same bytes (the residual moves once per step). spec kind none turns
 * it off. SL_OK, SL_ENOMEM; call before the first push. */
sl_status sl_ps_client_set_compress(sl_ps_client *c, const sl_compress_spec *spec);
/* Ps j's residual (NULL without compression), *n its length; writable (a restore). */
double *sl_ps_client_residual(sl_ps_client *c, int j, size_t *n);
/* Payload bytes this worker has sent (all messages). */
uint64_t sl_ps_client_sent_bytes(sl_ps_client *c);

/* Pull the parameters into flat. */
sl_status sl_ps_client_pull(sl_ps_client *c, float *flat);

/* Tell every ps this worker is done (best effort) and flush. */
sl_status sl_ps_client_bye(sl_ps_client *c);

void sl_ps_client_free(sl_ps_client *c); /* NULL is a no-op */

#ifdef __cplusplus
}
#endif
#endif
