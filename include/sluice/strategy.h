/* Training strategies: the sl_train_hooks (sluice/train.h) that make N replicas train one
 * model. This header has the ring strategy: synchronous data parallelism over the ring
 * allreduce of sluice/ring.h, as Horovod and MultiWorkerMirroredStrategy do it.
 *
 *   start     broadcast rank 0's parameters, optimizer state and step counters to all
 *             (a fresh run: every replica starts from rank 0's initialisation; a resumed
 *             one: from rank 0's checkpoint). A replica that would start at another step
 *             than rank 0 fails (the replicas must resume from the same checkpoint).
 *   exchange  average the flat gradient over the ring in place (tensor id: the step, so a
 *             replica that fell out of step is an error, not a silent mix); every replica
 *             then takes the same optimizer step on the same bits. On the CPU backend the
 *             gradient is host memory and is reduced where it lies; on CUDA it goes
 *             through a host buffer.
 *   finish    on success a barrier (no replica leaves while another still needs it),
 *             then the transport closes; on failure the peers are told (SL_MSG_ABORT) so
 *             they fail at once instead of after their timeout.
 * Only ring rank 0 is the chief (logs, evaluates, checkpoints).
 *
 * Every replica must run the same number of steps per epoch: with `shard auto` by file,
 * give each replica the same number of records (e.g. shards a multiple of the replicas
 * and equal-sized, plus drop_remainder). A replica that runs out early makes the others
 * fail with an error naming it, within the timeout.
 *
 * Workload: one strategy per process, one exchange per training step. */
#ifndef SLUICE_STRATEGY_H
#define SLUICE_STRATEGY_H

#include <stdio.h>

#include "sluice/cluster.h"
#include "sluice/ring.h"
#include "sluice/status.h"
#include "sluice/train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_strategy_ring_opts {
    double timeout_s;    /* receive timeout: a dead or silent peer fails the step after at most
                            this long; 0: the cluster block's `timeout`, else 30 s */
    sl_ring_opts ring;   /* chunk size, fp16 on the wire */
    FILE *hash_log;      /* NULL, or where to append one line "step S params HASH" per step
                            (HASH: FNV-1a 64 of the parameter bytes after S steps, 16 hex
                            digits) and one for the final parameters: replicas compare their
                            logs to check that they hold bit-identical parameters */
} sl_strategy_ring_opts;

typedef struct sl_strategy_ring sl_strategy_ring;

/* Fill *hooks for this process's place in cluster c (borrowed; must stay resolved while
 * the strategy lives). With c->world 1 the hooks are those of a single replica (rank 0,
 * chief, no callbacks) and nothing is opened. Otherwise the transport binds this rank's
 * address and connects to the peers (ZeroMQ retries until they bind; the first exchange,
 * in start, waits at most the timeout for them). opts NULL: defaults. Returns SL_OK and
 * the strategy in *out (free with sl_strategy_ring_free after the trainer is done);
 * SL_EINVAL when this process is not a ring member (a ps or evaluator task), SL_EIO when
 * the bind fails (the message names the address), SL_ENOMEM. On failure *out is NULL and
 * *hooks is zeroed. */
sl_status sl_strategy_ring_create(const sl_cluster *c, const sl_strategy_ring_opts *opts,
                                  sl_train_hooks *hooks, sl_strategy_ring **out);

void sl_strategy_ring_free(sl_strategy_ring *s); /* NULL is a no-op */

#ifdef __cplusplus
}
#endif
#endif
