/* Training strategies: the sl_train_hooks (sluice/train.h) that make N replicas train one
 * model. This header has the ring strategy and, at its end, the parameter-server strategy.
 * The ring strategy: synchronous data parallelism over the ring
 * allreduce of sluice/ring.h, as Horovod and MultiWorkerMirroredStrategy do it.
 *
 *   start     broadcast rank 0's parameters, optimizer state and step counters to all
 *             (a fresh run: every replica starts from rank 0's initialisation; a resumed
 *             one: from rank 0's checkpoint). A replica that would start at another step
 *             than rank 0 fails (the replicas must resume from the same checkpoint).
 *   exchange  SL_STEP_TRAIN records (sluice/step.h): average the flat gradient over the
 *             ring in place (tensor id: the step, so a replica that fell out of step is an
 *             error, not a silent mix); every replica then takes the same optimizer step
 *             on the same bits. On the CPU backend the gradient is host memory and is
 *             reduced where it lies; on CUDA it goes through a host buffer. The other
 *             phases: the epochs' agreements, below. Every reply is `together`.
 *   finish    on success a barrier (no replica leaves while another still needs it),
 *             then the transport closes; on failure the peers are told (SL_MSG_ABORT) so
 *             they fail at once instead of after their timeout.
 * Only ring rank 0 is the chief (logs, evaluates, checkpoints).
 *
 * Unequal data (shards of different sizes: 3 files over 2 replicas, a filter, a `take`):
 * the replicas end every epoch together, when the first of them runs out, by the rules of
 * sluice/step.h (train/strategy_agree.c). The trainer takes batch k + 1 from its
 * pipeline before step k's exchange, and the replica's next-batch flag (1 or 0) rides on
 * step k's gradient allreduce as one more float: on the CPU it is the model's spare
 * gradient float past the n gradient floats (train/internal.h, SL__GRADS_SPARE), so there
 * is no copy and no extra round trip; on other backends it is the last float of the host
 * staging buffer. The flag is averaged with the gradient and read back as the number of
 * replicas that have a next batch (the reply's `holding`; k / world rounds back to k
 * exactly, fp16 included, for up to 1024 replicas). No gradient of a missing batch is
 * faked (zeros would shrink the average), so every step is the exact average of world
 * batches and the replicas stay bit-identical. The agreements of an epoch's start and end,
 * of the run's start and of a counted epoch (sluice/step.h) are small int32 sums over the
 * ring (SL_REDUCE_SUM, tensor id 0xfff10000 | the agreement's tag). In `steps N` mode the
 * epochs end together the same way, and the next starts on all.
 *
 * Stop requests (Ctrl-C; sluice/train.h opts.stop) ride the same flag: a replica asked to
 * stop sends 0 ("no next batch"), so at that step every replica sees a count below the world
 * size, and one more small sum tells a stop from the data's end (each replica's real flag
 * and stop value). Every replica stops after that same step; rank 0 checkpoints it.
 * Nothing is added to a step that no replica asks to stop.
 *
 * Bucketed overlap (opts.bucket_bytes > 0, the train block's `bucket_mb`; compress=none
 * only): the gradient is cut into buckets of whole layers in backward order
 * (train/buckets.h), and each bucket's allreduce starts on an exchange thread of the
 * strategy as soon as backward has produced its layers' gradients (the model's
 * grads-ready callback; on CUDA the bucket is first copied to pinned host memory on the
 * copy stream behind its layers' kernels, and the exchange thread waits for that copy's
 * event), as Horovod and PyTorch DDP do; exchange then waits for the buckets still in
 * flight, reduces the rest (running statistics' zero gradient and the next-batch flag) and
 * returns. Each bucket is an sl_ring_allreduce_range of the whole n + 1 floats, so every
 * float is summed in the same order as by the unbucketed exchange: the parameters
 * are bit-identical with and without buckets (tests/unit/test_strategy_ring.c). The
 * ring's sockets have one user at a time: the exchange thread from a step's first bucket
 * until exchange has waited for its last, the caller's thread otherwise (start, the
 * epochs' sums, the tail of exchange, finish), handed over under a mutex. A failed bucket fails that
 * step's exchange with the bucket's error. compress=fp16|int8|sign|topk and `strategy
 * ps` keep the unbucketed exchange.
 *
 * Workload: one strategy per process, one exchange per training step. */
#ifndef SLUICE_STRATEGY_H
#define SLUICE_STRATEGY_H

#include <stdio.h>

#include "sluice/cluster.h"
#include "sluice/compress.h"
#include "sluice/ring.h"
#include "sluice/status.h"
#include "sluice/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- gradient compression (sluice/compress.h) -----------------------------------------
 *
 * `strategy ring compress=C` (C: fp16, int8, sign, topk(F); opts.compress): every step each
 * replica adds its residual to its gradient, compresses it (error feedback), and the ring
 * allgathers the payloads; every replica decodes all of them in rank order and averages,
 * so the replicas hold bit-identical averages (sl_ring_allreduce_compressed: what each
 * codec costs on the wire is there). The next-batch flag (sluice/step.h) rides in the
 * payloads as an int32.
 *
 * Top-k or sign with `optimizer sgd momentum=M` (not nesterov): Deep Gradient Compression's
 * momentum correction. Error feedback then accumulates each replica's local velocity
 * u = M u + (g + weight_decay p) instead of the raw gradient, the codec sends it, top-k's
 * coordinates sent are cleared from u as well (momentum factor masking), and every
 * replica applies the average as plain SGD (p -= lr avg; the exchange sets reply->applied, so
 * the optimizer's own momentum stays unused). Plain error feedback on the gradient under a
 * global momentum applies rarely-sent coordinates late and amplified, which cost fashion_mlp
 * about a point; this recovers it (README). The sidecar then holds the residual followed by
 * the velocity (2 n values, codec "topk:F+momentum" or "sign+momentum"). `strategy ps`
 * uses plain error feedback (the ps tasks run the optimizer). compress=topk(F, warmup=W)
 * adds DGC's sparsity warm-up (sluice/compress.h): every replica sets its codec's fraction
 * from the step before each exchange, so a resumed run picks the schedule up at its step;
 * the sidecar's codec leaves the warm-up out. The ps refuses it (SL_EINVAL).
 *
 * Residuals in checkpoints: they are per replica, so each replica writes its own sidecar
 * file RUN_DIR/replica-R/residual-SSSSSSSSS.safetensors at every checkpoint step (the
 * trainer's save_state hook; tensor "residual" float64 [n], metadata format=sluice-residual,
 * version=1, step, rank, codec, count, with CRC32Cs like the checkpoints; the oldest beyond
 * `keep` removed). On --resume each replica loads the one of the step the run resumes from
 * (load_state): a damaged one fails the run naming the file (SL_ECORRUPT), one of another
 * codec fails it too (SL_EINVAL); a missing one (the run was checkpointed without
 * compression) starts from a zero residual with a warning. A new run's folder preparation
 * removes (or, without --overwrite, refuses) earlier runs' residual files. */

/* RUN_DIR/replica-R/residual-SSSSSSSSS.safetensors into buf. */
void sl_train_residual_path(const char *run_dir, int rank, int64_t step, char *buf, size_t n);
/* Write r[0..n) as replica `rank`'s residual at `step` (crash-safe, with checksums); keep >
 * 0: remove that replica's older residual files beyond the newest `keep`. SL_OK, SL_EIO,
 * SL_ENOMEM. */
sl_status sl_train_save_residual(const char *run_dir, int rank, int64_t step, const char *codec, const double *r,
                                 size_t n, int keep);
/* Load it into r[0..n). SL_OK; SL_ENOTFOUND (no file: r unchanged); SL_ECORRUPT naming the
 * file (checksums, metadata of another step or rank, a non-finite value); SL_EINVAL (another
 * codec, or another count than n); SL_EIO. */
sl_status sl_train_load_residual(const char *run_dir, int rank, int64_t step, const char *codec, double *r, size_t n);

typedef struct sl_strategy_ring_opts {
    double timeout_s;    /* receive timeout: a dead or silent peer fails the step after at most
                            this long; 0: the cluster block's `timeout`, else 30 s */
    sl_ring_opts ring;   /* chunk size, fp16 on the wire */
    FILE *hash_log;      /* NULL, or where to append one line "step S params HASH" per step
                            (HASH: FNV-1a 64 of the parameter bytes after S steps, 16 hex
                            digits) and one for the final parameters: replicas compare their
                            logs to check that they hold bit-identical parameters. A
                            failed write (a full disk, a file-size limit) fails the step
                            with SL_EIO, "NAME: write failed at byte N: REASON" and a hint
                            (sluice/file.h): a log cut short would prove nothing */
    const char *hash_log_name; /* hash_log's path, for those messages (copied at create);
                                  NULL: "hash log" */
    const sl_tp_curve *curve; /* NULL: plaintext; else CURVE keys (borrowed, copied at create) */
    sl_compress_spec compress; /* sl_train_config.compress; zero: none (float32, or ring.fp16) */
    sl_optim_spec optim;       /* sl_train_config.optim: with compress=topk and sgd with momentum
                                  (not nesterov) the momentum is corrected locally, see above;
                                  zero: not known (plain error feedback) */
    size_t bucket_bytes;       /* bucketed overlap (above): bytes per bucket (at least; layers are
                                  never split); 0: off, one allreduce after backward. Ignored
                                  with compression or one replica */
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

/* The bucketed exchange's buckets in use since start (0: the exchange is unbucketed:
 * bucket_bytes 0, compression, one replica, a gradient that fits one bucket, or start not
 * yet run), and in *reduced (may be NULL) how many bucket allreduces have completed. */
int sl_strategy_ring_buckets(sl_strategy_ring *s, uint64_t *reduced);

/* ---- strategy ps: parameter servers (sluice/ps.h) ------------------------------------
 *
 * (The ps exchange is not bucketed: a worker pushes its whole gradient after backward;
 * `bucket_mb` applies to strategy ring only.)
 *
 * Configured by `strategy ps [mode=async|sync] [staleness=K]` in the train block
 * (sl_train_config.ps_sync, ps_staleness; default async, no bound) and a cluster with ps
 * tasks (sluice-launch -n W --ps P, TF_CONFIG, or a cluster block).
 *
 * Workers (chief and workers; worker i is sl_train_hooks rank i and reads shard i):
 *   start     join the ps tasks (sl_ps_client_join): the chief initialises a fresh ps with
 *             its parameters; every worker then holds the servers' parameters. A worker
 *             restarted mid-run rejoins: *start_step moves to one past the last step the ps
 *             recorded for it, so it does not train its shard's batches twice.
 *   exchange  SL_STEP_TRAIN records (sluice/step.h): push the gradient with the step's lr
 *             and pull the new parameters into the model; reply->applied = true (the ps ran
 *             the optimizer; the local one is unused). Running statistics (batchnorm)
 *             stay per worker; the chief's are the ones evaluated and checkpointed. Async
 *             mode answers the other phases with nothing (each worker alone); sync mode
 *             (tc->ps_sync) by the epochs' rules, below, with every reply `together`.
 *   finish    BYE to every ps.
 *
 * Unequal data: in async mode (the default) nothing is needed: workers are independent, each
 * pushes its own batches at its own pace and ends its epochs when its own data ends; a
 * worker with fewer batches just finishes first. In sync mode the workers end every epoch
 * together, as ring replicas do (the rules of sluice/step.h, train/strategy_agree.c):
 *   - each push carries the worker's next-batch flag (whether it holds a batch for its
 *     next step; the frame's have/lack pair, sluice/ps.h), and the sync round's reply
 *     tells every worker of the round how many said yes and no. When any said no, every
 *     worker ends the epoch after this step: no step is taken that another worker does not
 *     take, and every round is the exact mean of one real batch from each worker. A worker
 *     outside the round (dead, or done) does not end the epoch: the reply's `holding`
 *     counts it as holding a batch.
 *   - the other agreements (every worker has a first batch, the counts for the warning,
 *     the batches per epoch of a cosine schedule, and whether a "lack" was a stop request)
 *     are SUM rounds on ps 0 (SL_MSG_SUM). A worker left out of a sum (dead, done, or,
 *     after a restart, waiting in a step round) reads as a copy of the lowest worker that
 *     took part.
 * A fresh ps forms no round before every worker has joined, so the workers start together
 * (a late joiner would otherwise find the others in rounds it was not counted in: at ps 0
 * and not at ps 1, a SUM on ps 0 would wait for a worker held in a step round on ps 1).
 * The chief warns with the counts as under the ring ("epoch 1: rank 1 ran out after 10
 * steps; rank 0 had 13: all replicas end the epoch at 10 (3 batches of rank 0 unused)").
 * A worker restarted mid-run starts its epoch where its step count puts it; the epochs line
 * up again at the next epoch end (the first worker out ends it for all). A ps restarted
 * mid-round answers a retried push it had already applied without counts (0/0): that
 * worker then goes by its own flag for that step. A sync worker whose ps tasks run async
 * fails at the start (the ps refuses the SUM, naming the mode). A stop request (Ctrl-C) in
 * sync mode rides the push's flag as a "lack", as under the ring: every worker stops after
 * the same round, the chief checkpoints it, and the ps tasks save their shards when the
 * last worker's BYE ends the server (sluice-train keeps a ps task that got the signal
 * serving for that last round). Async workers stop each on its own.
 *
 * ps tasks (sl_ps_task_run): build the model from the config on the CPU to know the
 * variables, plan the shards (sl_ps_plan_create), restore the newest shard checkpoint of
 * RUN_DIR/ps-J/ (files shard-VVVVVVVVVVVV.safetensors: tensors "params" and
 * "optimizer/state", metadata format=sluice-ps-shard, version, plan_hash, optimizer_step,
 * worker_steps), and serve: each gradient is applied with the config's optimizer
 * (elementwise, on the CPU, over the shard only) as it arrives. Shards are checkpointed every
 * few seconds (crash-safe, last 2 kept) and when the server returns. */
typedef struct sl_strategy_ps_opts {
    double timeout_s;          /* receive timeout per attempt; 0: the cluster's, else 30 s */
    double retry_s;            /* how long a worker waits for a lost ps to come back; 0 = 120 s */
    double ckpt_every_s;       /* ps shard checkpoints; 0 = 5 s */
    const sl_tp_curve *curve;  /* CURVE keys (borrowed), or NULL */
    bool fresh;                /* ps tasks: a new run: never restore an earlier run's shard
                                  checkpoints; their presence fails the task (SL_EINVAL naming the
                                  folder) unless overwrite (sluice-train sets it unless --resume
                                  is given or sluice-launch restarted the task) */
    bool overwrite;            /* with fresh: remove them instead (a failed removal: SL_EIO) */
} sl_strategy_ps_opts;

typedef struct sl_strategy_ps sl_strategy_ps;

/* Fill *hooks for worker c->rank of cluster c (borrowed, must outlive the strategy); tc
 * may be NULL (async hooks; staleness is the ps tasks' business). With tc->ps_sync the
 * exchange answers by the epochs' rules (sluice/step.h). SL_EINVAL when c has no ps
 * tasks or this process is not a chief/worker; SL_ENOMEM. On failure *out NULL and *hooks
 * zeroed. Nothing is opened yet: the plan needs the model, so the start hook plans, binds
 * this worker's address and joins (its errors: SL_EIO when the bind fails, SL_EPEER /
 * SL_ETIMEDOUT naming a ps that does not answer, SL_EINVAL when a ps refuses the plan). */
sl_status sl_strategy_ps_create(const sl_cluster *c, const sl_train_config *tc, const sl_strategy_ps_opts *opts,
                                sl_train_hooks *hooks, sl_strategy_ps **out);
void sl_strategy_ps_free(sl_strategy_ps *s); /* NULL is a no-op */

/* Run this process as ps task c->tasks[c->self] (type SL_TASK_PS) for the training config
 * in cfg (borrowed). Logs to console (NULL: silent) "ps J: serving N floats of M (plan
 * HASH) for W workers" and, after a restore, "ps J: restored FILE (version V)". Returns
 * SL_OK when the workers are done, SL_ECANCELED when *stop was set (stop may be NULL),
 * or the error that stopped it (config, model, bind). */
sl_status sl_ps_task_run(sl_cfg *cfg, const sl_cluster *c, const sl_strategy_ps_opts *opts, FILE *console,
                         volatile int *stop);

#ifdef __cplusplus
}
#endif
#endif
