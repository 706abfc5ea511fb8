/* The training loop: a model (sluice/model.h) fed by config pipelines (sluice/from_config.h),
 * with evaluation, checkpoints, --resume, console lines and TensorBoard event files.
 * sluice-train is a thin main over this header; a library user calls the same functions.
 *
 * Configured by a `train` block:
 *
 *     train {
 *         model mlp                      # a `model NAME { }` block
 *         data train                     # the training pipeline [image=COMP] [label=COMP]
 *         eval test every=1              # evaluate every N epochs (or steps=N); `eval none`
 *         epochs 15                      # or: steps N (the last of the two written wins)
 *         optimizer adam lr=0.001        # sgd|adam|adamw lr= [momentum= nesterov= weight_decay=
 *                                        #  decay_exclude=[bias, batchnorm] beta1= beta2= eps=]
 *         label_smoothing 0.1            # loss target (1-e) onehot + e/classes (default 0)
 *         schedule cosine warmup=500     # constant | step every=N gamma=G | cosine [min_lr=]
 *         checkpoint every=1 keep=3      # every N epochs (or steps=N); keep the last K; `checkpoint none`
 *         run_dir "runs/fashion_mlp"     # relative to the current directory
 *         backend auto                   # cpu | cuda | auto
 *         precision fp32                 # fp32 | bf16 | fp16: mixed precision (see below)
 *         device 1                       # this GPU (default: local rank % visible GPUs, sluice/cuda.h)
 *         threads 0                      # CPU backend threads (0: all cores)
 *         seed 1                         # initialisation, dropout, per-epoch shuffle order
 *         strategy none                  # none | ring | ps [mode=async|sync] [staleness=K]
 *                                        #  ring and ps: [compress=none|fp16|int8|sign|topk(F)]
 *         bucket_mb 25                   # strategy ring, compress=none: gradient buckets of 25 MiB
 *                                        #  allreduced during backward (0: off); see below
 *     }
 *
 * Mixed precision (`precision bf16` or `fp16`; default fp32): the model's GEMMs round their
 * inputs to bfloat16 / half and accumulate in float32 (sluice/model.h sl_precision), while
 * parameters, optimizer state and checkpoints stay float32. CUDA runs them on tensor cores;
 * the CPU backend emulates them (the same numbers, no speed-up). fp16 adds dynamic loss
 * scaling: each step's loss gradient is multiplied by the scale S (65536 at the start of
 * a run, a resumed one too); after the gradient exchange, a gradient with any NaN or
 * infinity skips the optimizer step (the parameters stay as they were, the step still
 * counts) and halves S, otherwise the gradient is divided by S before the optimizer, and
 * after 2000 finite steps in a row S doubles. Every replica sees the same exchanged
 * gradient and so makes the same choice; `strategy ps` and `compress=` are refused with
 * fp16. A gradient that is not finite even at S = 1 stops the run (SL_ERANGE). The
 * startup line names the precision when it is not fp32; with fp16 the epoch line ends in
 * "loss scale S (N skipped)" (the steps skipped so far).
 *
 * Batches: the training pipeline's `batch N` is the GLOBAL batch (tf.distribute's
 * convention): with W replicas each replica's pipeline is rewritten to batch N/W (N must be
 * a multiple of W) and reads its own shard (sl_pipeline_env num_shards W, shard_index rank),
 * and the gradients are averaged by the exchange hook, so the update equals one step on a
 * batch of N. Elements carry an "image" float32 [B, ...] and a "label" int64 or int32 [B]
 * component (names configurable with data ... image=X label=Y).
 *
 * Epochs: each epoch iterates the training pipeline afresh with the iterator seed
 * mix(seed, epoch), so a `shuffle` (reshuffle=true, the default) gives every epoch its own
 * order and a resumed run sees exactly the batches the interrupted run would have.
 *
 * Checkpoints are safetensors files RUN_DIR/ckpt-SSSSSSSSS.safetensors (S: the global
 * step): tensors "model/<param name>" (e.g. "model/dense_1/kernel") and "optimizer/state"
 * (the flat optimizer state), metadata format=sluice-checkpoint, version=1, step, epoch and
 * batch (the data position: the next batch to train is batch `batch` of 0-based epoch
 * `epoch`), optimizer_step, model (name), model_hash (of the model block and the `block`
 * definitions it uses), config (file
 * name), steps_per_epoch, batch_size (the global batch), and CRC32Cs of every tensor and of
 * the header (version=2; see sl_train_check_checkpoint). Written crash-safe (temporary name,
 * fsync, rename) by sluice/safetensors.h; the oldest beyond `keep` are deleted (a failed
 * removal is a warning naming the file) once the new one is in place. A checkpoint that
 * cannot be written (a full disk or quota, a file-size limit: "PATH: write failed at byte N:
 * REASON" with a hint, sluice/file.h) ends the run with SL_EIO; its temporary file is
 * removed and every older checkpoint kept. A process that leaves SIGXFSZ at its default
 * action is killed at a file-size limit instead (the sluice-* tools ignore it). Resume
 * loads the newest that passes every check,
 * skipping with a warning that names it and says what is wrong any damaged one (torn,
 * checksum mismatch, inconsistent metadata, NaN or Inf, a FIFO or folder by that name); when
 * none is loadable the run fails naming them. A sound checkpoint of another configuration
 * (model, optimizer, batch, data) stops the run instead. Version 1 checkpoints (written
 * before checksums) still load, with a note that their contents cannot be verified.
 *
 * Run folders: a new run (neither resume nor overwrite) refuses a folder that holds another
 * run's checkpoints or event files (sl_train_prepare_run_dir); overwrite removes them first.
 *
 * Event files: two TensorBoard runs, as Keras' TensorBoard callback writes them, so that
 * `tensorboard --logdir RUN_DIR` draws train and eval curves of the same tag on one chart:
 *   RUN_DIR/train/events.out.tfevents.<time>.<host>  loss, accuracy (the mean over the
 *     epoch, or with `log every=N` over the last N steps), learning_rate, examples_per_sec,
 *     input_wait_fraction, then top5_accuracy (models with more than 5 classes);
 *   RUN_DIR/eval/events.out.tfevents.<time>.<host>   accuracy, loss, then top5_accuracy (more
 *     than 5 classes) of every evaluation (only with an eval pipeline).
 * Console lines: the epoch line has `loss`, `accuracy`, `top5` (more than 5 classes: the share
 * of examples whose label is among the 5 highest logits, ties in, sluice/model.h
 * sl_step_result.top5), and `eval accuracy` / `eval top5` after an epoch's evaluation; an
 * evaluation's own line "eval  step N  loss L  accuracy A  top5 T" likewise. Loss is the
 * label-smoothed cross-entropy with `label_smoothing`, in evaluation too (Keras' and
 * PyTorch's loss functions report it so).
 * Every scalar is tagged with the global step (the same axis in both runs). A resumed run
 * adds a new event file in each folder (TensorBoard reads them as one run). Earlier
 * Sluice versions wrote one file RUN_DIR/events.out.tfevents.* with tags train/loss,
 * eval/accuracy, ...; such files count as another run's (sl_train_prepare_run_dir). */
#ifndef SLUICE_TRAIN_H
#define SLUICE_TRAIN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sluice/compress.h"
#include "sluice/config.h"
#include "sluice/model.h"
#include "sluice/status.h"
#include "sluice/step.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "Every N epochs" or "every N steps"; both 0: never. At most one is non-zero. */
typedef struct sl_train_every {
    int64_t epochs;
    int64_t steps;
} sl_train_every;

typedef struct sl_train_config {
    char model[64];             /* model block name */
    char data[64];              /* training pipeline name */
    char eval[64];              /* evaluation pipeline name; "" for none */
    char image_key[64];         /* component names ("image", "label") */
    char label_key[64];
    sl_train_every eval_every;  /* default every epoch */
    int64_t epochs;             /* exactly one of epochs / steps is > 0 */
    int64_t steps;
    sl_optim_spec optim;        /* default sgd momentum 0.9; decay_exclude=bias | batchnorm | [bias,
                                   batchnorm] | none: weight decay skips biases / batchnorm gamma and
                                   beta (refused with strategy ps and ring compress=topk|sign) */
    float label_smoothing;      /* `label_smoothing E`, 0 <= E < 1 (sl_model_opts.label_smoothing); default 0 */
    sl_schedule schedule;       /* lr in schedule.lr (default 0.01); cosine total 0: the run's length */
    sl_train_every ckpt_every;  /* default never */
    int ckpt_keep;              /* default 3; 0: keep all */
    char run_dir[1024];         /* default "runs/<model>" */
    sl_backend_kind backend;
    sl_precision precision;     /* `precision fp32|bf16|fp16` (above); default fp32 */
    int threads;                /* CPU backend threads, 0: all */
    int device;                 /* `device N`: the GPU to use; -1 (default): local rank % visible GPUs */
    uint64_t seed;
    char strategy[16];          /* "none", "ring", "ps" */
    bool ps_sync;               /* strategy ps mode=sync (default async) */
    int ps_staleness;           /* strategy ps staleness=K; -1 (default): no bound */
    sl_compress_spec compress;  /* strategy ring|ps compress=...; default none (sluice/compress.h) */
    int ring_path;              /* strategy ring path=auto|tcp|shm: an sl_ring_path (sluice/ring.h);
                                   default auto (shared memory when every replica is on one host) */
    int64_t batch;              /* the training pipeline's global batch (its `batch N`) */
    int64_t eval_batch;         /* the evaluation pipeline's batch (0 without one) */
    uint64_t model_hash;        /* FNV-1a over the model block's statements, then over each
                                   `block` definition it uses (also inside other blocks), once
                                   each in order of first use: what the parameters mean */
    int64_t log_every;          /* `log every=N`: train scalars every N steps, averaged over
                                   them; 0 (default): once per epoch, as Keras' update_freq='epoch' */
    bool log_keras;             /* `log layout=keras`: the folders, tags and steps of Keras'
                                   TensorBoard callback (train/ and validation/, epoch_* by epoch,
                                   evaluation_*_vs_iterations, batch_* with every=N); false: Sluice's
                                   (train/ and eval/, the same tags on the global step axis) */
    double bucket_mb;           /* `bucket_mb MB`: gradient buckets for strategy ring (MiB, 0..4096,
                                   fractions allowed; 0: off; default 25); sl_strategy_ring_opts.bucket_bytes */
} sl_train_config;

/* Read the `train { }` block of cfg (borrowed) into *out, filling defaults, and look up
 * the batch sizes of the pipelines it names. Returns SL_OK; SL_ENOTFOUND when there is no
 * train block or a named model/pipeline block is missing, SL_EINVAL / SL_ERANGE for a
 * wrong statement or value — all reported with sl_cfg_err ("FILE:LINE:COL: ..." and a
 * caret) and a hint (the usage, or "did you mean ...?"). *out is unspecified on failure. */
sl_status sl_train_config_parse(const sl_cfg *cfg, sl_train_config *out);

/* ---- replicas: the exchange hook -------------------------------------------------------
 *
 * The loop is the same for one replica and for many: strategies plug in here.
 *   ring allreduce: start broadcasts rank 0's parameters (and optimizer state); each
 *     step's exchange allreduce-averages grads in place and leaves applied false, so every
 *     replica runs the same optimizer step on the same average.
 *   parameter server: start pulls the parameters from the ps tasks; each step's exchange
 *     pushes grads, pulls the fresh parameters into the model (sl_model_set_params) and
 *     sets applied, so the loop skips its own optimizer step.
 * Only the chief (is_chief) evaluates, writes checkpoints, event files and the console
 * lines.
 *
 * Every exchange between replicas goes through one member, exchange, with a step record
 * in and a reply out (sluice/step.h): the gradient of each step, and the few agreements
 * per epoch through which strategy ring and ps mode=sync replicas end every epoch
 * together, stop together, and agree on a cosine schedule's length (sluice/step.h says
 * how). The loop fills the record and acts only on the reply.
 *
 * Overlap (strategy ring with compress=none, `bucket_mb` > 0): the ring strategy registers a
 * callback on the model at start and allreduces the gradient bucket by bucket on a
 * thread of its own while backward still runs (sluice/strategy.h, "Bucketed overlap");
 * the step's exchange then only waits for what is left, with results bit-identical to the
 * unbucketed exchange. A model whose gradient fits one bucket is exchanged unbucketed
 * (nothing could overlap). Compression and `strategy ps` always exchange after backward.
 * The time the loop spends in the steps' exchanges is what remains visible of the
 * exchange: the epoch line reports it ("exchange 1.2 ms/step") and the train/ run logs it
 * as exchange_ms_per_step (replicas only). */
typedef struct sl_train_hooks {
    void *ctx;
    int world_size;  /* replicas (>= 1) */
    int rank;        /* 0..world_size-1: this replica's shard of the training data */
    bool is_chief;
    /* Once the model and optimizer exist (after a resume restored them; *step is where the
     * run starts). The hook may move *step forward (a ps worker rejoining a run resumes
     * where the ps recorded it); the loop then starts at that step's epoch and batch.
     * NULL: nothing. */
    sl_status (*start)(void *ctx, sl_model *m, sl_optim *o, int64_t *step);
    /* Called with each record of the run (sluice/step.h: its phases, in order, and what
     * each field holds); *reply arrives holding this replica's own answer, and the hook
     * changes what its replicas agree on. SL_STEP_TRAIN comes after backward, before the
     * optimizer step: step->grads (backend memory, step->n floats) holds this replica's
     * gradient of its mean batch loss (times step->loss_scale), step->lr the step's
     * scheduled rate; the hook leaves there the gradient the optimizer step applies, or
     * applies the update itself and sets reply->applied. Returns SL_OK, or the error that
     * ends the run (the loop then calls finish with it and returns it): the loop reads
     * neither *reply nor the gradient after a failure, and the parameters may hold part of
     * an update (a ps exchange that pulled some shards). NULL: nothing to exchange (one
     * replica alone); several replicas need it. */
    sl_status (*exchange)(void *ctx, const sl_step *step, sl_step_reply *reply);
    /* At the end of the run, with its result (SL_OK or the error that stopped it): barrier,
     * leave the ring, tell the ps. NULL: nothing. The loop returns the first error. */
    sl_status (*finish)(void *ctx, sl_status result);
    /* Optional (NULL: none). wire_bytes: payload bytes this replica has sent so far; the
     * loop reports the bytes per step in the epoch line ("wire N KiB/step") and as the
     * scalar wire_bytes_per_step (the train/ run). save_state: per-replica state that checkpoints must
     * keep (compression residuals, sluice/strategy.h), called on EVERY replica at each
     * checkpoint step (the chief's checkpoint is written first), with the run folder and the
     * config's keep. load_state: on every replica after start, when the run resumed from the
     * checkpoint of `step`. Their errors stop the run like a checkpoint's. */
    uint64_t (*wire_bytes)(void *ctx);
    const char *wire_path;      /* optional: how the bytes travel ("shm", "tcp"), shown after
                                   the figure: "wire N KiB/step (shm)" */
    sl_status (*save_state)(void *ctx, const char *run_dir, int64_t step, int keep);
    sl_status (*load_state)(void *ctx, const char *run_dir, int64_t step);
} sl_train_hooks;

/* ---- the trainer ---------------------------------------------------------------------- */

typedef struct sl_train_opts {
    const char *run_dir;          /* overrides the config's run_dir; NULL: keep it */
    bool resume;                  /* continue from the newest loadable checkpoint in run_dir */
    bool overwrite;               /* a new run may remove an earlier run's checkpoints and event
                                     files from run_dir (sl_train_prepare_run_dir); without it,
                                     and without resume, their presence fails the run */
    FILE *console;                /* epoch lines and the final "test accuracy"; NULL: silent */
    bool progress;                /* draw a progress bar within epochs on console (a terminal) */
    bool plain_progress;          /* the terminal takes no escape sequences (TERM=dumb): the bar is
                                     redrawn after a carriage return and padded with blanks,
                                     instead of after "ESC[K" */
    const sl_train_hooks *hooks;  /* NULL: one replica; borrowed, must outlive the trainer */
    /* Stop request (e.g. set by the caller's SIGINT handler to the signal number; the
     * library installs none): when *stop is non-zero at a step boundary the loop stops
     * there, the chief writes a checkpoint of that step when checkpoints are on, the final
     * evaluation is skipped, and sl_trainer_run returns SL_OK with summary.stopped true
     * (summary.steps: the step it stopped at; stop_value: *stop; stop_rank: this rank).
     * Replicas whose exchange agrees on stops (strategy ring with several replicas, ps
     * sync: sluice/step.h) stop together: each step's record carries this replica's *stop,
     * and every replica stops after the SAME step, the one whose exchange carried the
     * first request: the chief checkpoints it, and each one's summary names the lowest
     * rank that asked (stop_rank) and its *stop value (stop_value), so a replica that got no
     * signal itself can say why it stopped. A request reaches the others within one step.
     * Async ps workers stop on their own. NULL: never. */
    volatile sig_atomic_t *stop;
    /* GPU placement (sluice/cuda.h sl_cuda_choose_device): device >= 0 wins over the train
     * block's `device` (sluice-train --device N); -1 (default): the block's, else the local
     * rank read from envp (NULL-terminated "NAME=value", e.g. environ; NULL: none) modulo
     * the visible GPUs. Each replica prints the GPU it uses on console; `backend auto` that
     * cannot open its GPU (e.g. taken in exclusive-process mode) warns and uses the CPU. */
    int device;
    const char *const *envp;
    sl_cpu_gemm cpu_gemm;         /* the model's sl_model_opts.cpu_gemm (sluice-train: SLUICE_CPU_GEMM) */
    /* Called on the training thread at the end of every complete epoch, after its epoch
     * line, its evaluation and its checkpoint (epochs: the epochs done, 1 after the first;
     * step: the global step), on every replica. A non-OK return ends the run with that
     * status (checkpoints already written stay). A caller may wait inside it: a test holds
     * the run there (sluice-train --hold-after) while it kills or restarts another task
     * (the ps client's heartbeats keep an async ps worker alive meanwhile; ring and ps
     * sync replicas wait for each other at the next exchange, within its timeout). NULL:
     * none. */
    sl_status (*on_epoch_end)(void *ctx, int64_t epochs, int64_t step);
    void *ctx;
} sl_train_opts;

sl_train_opts sl_train_opts_default(void);

/* What a run did, for the caller and tests. */
typedef struct sl_train_summary {
    int64_t start_step;       /* 0, or the resumed checkpoint's step */
    int64_t steps;            /* global step at the end */
    int64_t epochs_done;      /* complete epochs at the end */
    int64_t steps_per_epoch;  /* 0 until known */
    double train_loss;        /* mean over the last (partial) epoch */
    double train_accuracy;
    double train_top5_accuracy; /* label among the 5 highest logits (sl_step_result.top5) */
    double eval_accuracy;     /* final evaluation; -1 without an eval pipeline */
    double eval_loss;
    double eval_top5_accuracy; /* final evaluation; -1 without an eval pipeline */
    double examples_per_sec;  /* training examples over the run's wall time in the loop */
    double input_wait;        /* fraction of step time waiting for the pipeline */
    double seconds;           /* wall time of sl_trainer_run */
    char resumed_from[1100];  /* checkpoint path, "" when none */
    bool stopped;             /* opts.stop ended the run early (at step `steps`) */
    int stop_value;           /* stopped: the *opts.stop value that ended it (replicas that stop
                                 together: that of stop_rank), e.g. the signal number; else 0 */
    int stop_rank;            /* stopped: the replica that asked (replicas that stop together: the
                                 lowest rank that did; every replica stops at the same step) */
    double loss_scale;        /* precision fp16: the loss scale now (65536 before the first step); else 1 */
    int64_t skipped_steps;    /* precision fp16: steps whose optimizer update was skipped for a
                                 non-finite gradient; else 0 */
} sl_train_summary;

typedef struct sl_trainer sl_trainer;

/* Build everything a run needs from cfg (borrowed, never changed: with replicas the training
 * pipeline's batch is the global batch, built as batch/world_size through the pipeline env's
 * batch_divisor, so one cfg can make several trainers): the config, the model,
 * the optimizer, the pipelines, the run folder (created). opts NULL: defaults. Unless
 * opts->resume, the first epoch's pipeline starts here (its threads fill the shuffle
 * buffer and prefetch while the model is built and the replicas connect); sl_trainer_run
 * also opens each next epoch's pipeline while the last tenth of an epoch trains, so at
 * most two are alive at once. Returns SL_OK and the trainer in *out; on failure *out is
 * NULL and the error is the config's (FILE:LINE:COL), the model's, the pipeline's,
 * SL_ERANGE when `epochs N` times the batches the training pipeline knows it has is past
 * 2^63-1 ("train: 3 epochs x 4611686018427387904 steps per epoch is past 2^63-1"), or SL_EIO
 * for the run folder. */
sl_status sl_trainer_create(const sl_cfg *cfg, const sl_train_opts *opts, sl_trainer **out);

/* The parsed configuration (valid while the trainer lives). */
const sl_train_config *sl_trainer_config(const sl_trainer *t);
/* The model (borrowed). */
sl_model *sl_trainer_model(sl_trainer *t);

/* Train (resuming first when opts.resume), evaluate, checkpoint, log; the last console
 * line is "test accuracy 0.XXXX" when there is an eval pipeline. Returns SL_OK, or the
 * first error from the pipeline (its op and file), the model, a checkpoint write (SL_EIO)
 * or a hook; checkpoints already written stay. Before training: a new run's folder of
 * another run is SL_EINVAL, a failed removal with opts.overwrite SL_EIO
 * (sl_train_prepare_run_dir); with opts.resume, checkpoints that are all damaged are
 * SL_ECORRUPT naming them ("--resume: none of the N checkpoints in DIR is loadable: ..."),
 * a sound one of another configuration SL_EINVAL (sl_train_load_checkpoint), and no
 * checkpoint at all starts from step 0. A NaN or Inf loss is SL_ERANGE; at the first step
 * after a resume its message names the checkpoint the parameters came from. Call once. */
sl_status sl_trainer_run(sl_trainer *t);

/* The summary of the run so far (after sl_trainer_run: of the whole run). */
const sl_train_summary *sl_trainer_summary(const sl_trainer *t);

/* Evaluate the model on the eval pipeline now: mean loss and accuracy over all of it.
 * SL_ESTATE without an eval pipeline. */
sl_status sl_trainer_evaluate(sl_trainer *t, double *loss, double *accuracy);

void sl_trainer_free(sl_trainer *t); /* NULL is a no-op */

/* ---- checkpoints ---------------------------------------------------------------------- */

/* Paths of the checkpoints in run_dir, newest (highest step) first: *out is a malloc'd
 * array of malloc'd strings (free with sl_train_free_list). Returns how many (0 when the
 * folder is missing or holds none), SL_EIO when the folder cannot be listed (naming it and
 * the OS reason), or SL_ENOMEM. */
int sl_train_list_checkpoints(const char *run_dir, char ***out);
void sl_train_free_list(char **list, int n);

/* Where a checkpoint says training stands. */
typedef struct sl_ckpt_position {
    int64_t step, epoch, batch, optimizer_step, steps_per_epoch;
    uint64_t model_hash;
    int64_t batch_size;  /* the run's global batch; 0 in a version 1 file (not recorded) */
    bool verified;       /* its checksums matched; false for a version 1 file (it has none) */
} sl_ckpt_position;

/* What the run being resumed expects of a checkpoint; a zero field is not checked. */
typedef struct sl_ckpt_expect {
    uint64_t model_hash;      /* the model block's hash (sl_train_config.model_hash) */
    int64_t batch_size;       /* the training pipeline's global batch */
    int64_t steps_per_epoch;  /* batches per epoch, when known before training */
} sl_ckpt_expect;

/* Write m's parameters, o's state and pos (step, epoch, batch, steps_per_epoch, batch_size,
 * model_hash) to path as a version 2 checkpoint with checksums (crash-safe). SL_OK or
 * SL_EIO/SL_ENOMEM; on failure the file at path is the old one or none. */
sl_status sl_train_save_checkpoint(const char *path, sl_model *m, sl_optim *o, const char *model_name,
                                   const char *config_name, const sl_ckpt_position *pos);

/* Check a checkpoint without a model, as sl_train_load_checkpoint does before it loads:
 *   - the file: a regular file (a FIFO or folder is refused at once, SL_EIO, saying what
 *     it is), a valid safetensors layout (SL_ECORRUPT with the byte offset);
 *   - format=sluice-checkpoint (SL_ECORRUPT), version 1 or 2 (else SL_EUNSUPPORTED);
 *   - checksums (sluice/safetensors.h): a version 2 file must have them and every one must
 *     match (SL_ECORRUPT naming the tensor or metadata and its byte offset). A version 1
 *     file (written by Sluice before checksums) has none: it is accepted with
 *     pos->verified false, so the caller can say that its contents cannot be verified;
 *   - metadata: step, epoch, batch, optimizer_step, optimizer_size, steps_per_epoch (and
 *     batch_size in version 2) are decimal counts, model_hash 16 hex digits, and they agree:
 *     with steps_per_epoch 0 (no epoch ended yet) epoch is 0 and batch = step; otherwise
 *     batch <= steps_per_epoch and step = epoch * steps_per_epoch + batch; optimizer_step
 *     <= step; optimizer_size = the values of "optimizer/state" (SL_ECORRUPT, naming them);
 *   - every float of "model/..." and "optimizer/state" is finite (SL_ECORRUPT naming the
 *     tensor and the index of the first NaN or Inf);
 *   - `want` (may be NULL): another model_hash, another batch_size, or steps_per_epoch
 *     (or a batch) that the training pipeline no longer has is SL_EINVAL, saying both
 *     values: the checkpoint is sound but belongs to another configuration.
 * On success *pos holds its position; on failure *pos is unchanged. */
sl_status sl_train_check_checkpoint(const char *path, const sl_ckpt_expect *want, sl_ckpt_position *pos);

/* The same over memory (borrowed); `name` labels messages (NULL: "<memory>"). */
sl_status sl_train_check_checkpoint_mem(const void *data, size_t size, const char *name, const sl_ckpt_expect *want,
                                        sl_ckpt_position *pos);

/* sl_train_check_checkpoint, then load path into m and o (o may be NULL) and *pos,
 * checking that every parameter is there with the model's shape and that the optimizer
 * state has the configured optimizer's size. SL_OK; SL_ENOTFOUND; SL_EIO (unreadable, or
 * not a regular file); SL_ECORRUPT (damaged: torn, a checksum, the metadata, a missing
 * tensor, a wrong shape, a non-finite value) naming the file; SL_EUNSUPPORTED (a newer
 * version); SL_EINVAL (a sound checkpoint of another configuration: model, optimizer,
 * batch, data). m and o are unchanged on failure. */
sl_status sl_train_load_checkpoint(const char *path, sl_model *m, sl_optim *o, const sl_ckpt_expect *want,
                                   sl_ckpt_position *pos);

/* Get run_dir ready for a new run (not a resumed one). The files of an earlier run there
 * (checkpoints ckpt-*.safetensors, TensorBoard event files events.out.tfevents.* in
 * run_dir/train, run_dir/eval or, as earlier versions wrote them, run_dir itself, and ps
 * shard checkpoints: shard-*.safetensors in its ps-N folders) would otherwise be resumed
 * later as if they were this run's, or mix with its curves. Without `overwrite` their
 * presence is refused: SL_EINVAL, naming the folder, how many of each kind and the newest
 * checkpoint, with a hint (--resume, --overwrite, another --run-dir); nothing is removed.
 * With `overwrite` they are removed (a line on `console`, which may be NULL); a removal that
 * fails is SL_EIO naming the file and the OS reason (the files before it are gone, the rest
 * stay). A missing folder, or one without such files, is SL_OK. */
sl_status sl_train_prepare_run_dir(const char *run_dir, bool overwrite, FILE *console);

#ifdef __cplusplus
}
#endif
#endif
