/* The step record: what the training loop (sluice/train.h) tells its strategy at each
 * point where replicas may have to agree, and the strategy's reply. The loop fills an
 * sl_step and calls the hooks' one exchange member (sl_train_hooks.exchange); it then acts
 * only on the sl_step_reply: it skips its optimizer step when the strategy applied the
 * update, ends the epoch where the reply says, stops where the reply says, and prints the
 * reply's warning. The replicas' rules (lockstep epochs, below) live with the strategies
 * (train/strategy_agree.c, used by strategy ring and strategy ps mode=sync).
 *
 * Phases, in the order one run calls them (replicas that agree call the same phases at the
 * same steps, so their messages stay in phase):
 *   SL_STEP_COUNT      only while the epoch's length is not known yet (no epoch has ended,
 *                      no checkpoint recorded it), when the loop needs it: after start, when
 *                      start moved the start step (a ps worker rejoining mid-run), and
 *                      after SL_STEP_BEGIN for a cosine schedule measured in epochs.
 *                      `batches` is this replica's (the pipeline's cardinality, else
 *                      counted by reading one epoch); reply.steps_per_epoch is the length
 *                      the loop uses.
 *   SL_STEP_BEGIN      once, after sl_train_hooks.start (and load_state), before the first
 *                      epoch.
 *   SL_STEP_EPOCH      each epoch, once its pipeline has given (or not) the first batch:
 *                      holds_next says whether this replica holds one.
 *   SL_STEP_TRAIN      each training step, after backward and before the optimizer: the
 *                      gradient exchange. The loop has already taken the batch of the
 *                      next step from the pipeline: holds_next says whether it got one
 *                      (false too at the run's last step).
 *   SL_STEP_EPOCH_END  after each epoch's steps (also an epoch cut short by the step limit
 *                      or a stop), after its epoch line and evaluation, before its
 *                      checkpoint.
 *
 * The reply arrives filled with this replica's own answer, as if it trained alone:
 * applied false, together false, epoch_ends = !holds_next, holding = holds_next (1 or 0),
 * stop false, stop_rank and stop_value 0, steps_per_epoch = batches, warning "". A strategy
 * whose replicas train independently (one replica, ps async) changes only `applied` (at
 * SL_STEP_TRAIN) and answers the other phases with SL_OK, leaving the reply as it came;
 * each such replica ends its epochs when its own data ends and stops on its own request
 * at the next step boundary (sluice/train.h opts.stop).
 *
 * Lockstep epochs (strategy ring with several replicas, ps mode=sync: reply.together true
 * in every phase): every replica runs the same number of steps in every epoch, however
 * unequal the shards, as tf.distribute's and Horovod's "does every replica have a batch"
 * agreement does.
 *   - TRAIN: the has-data flag (1 when this replica holds a batch for the next step, else
 *     0) rides on the step's own gradient exchange (strategy ring: one more float of the
 *     allreduce, or an int32 in compressed payloads; ps sync: the push's have/lack pair,
 *     sluice/ps.h), and comes back as the number of replicas that hold one
 *     (reply.holding). When it is below the world size, every replica ends the epoch after
 *     this step (reply.epoch_ends); all begin the next epoch together. Every step that is
 *     taken is taken by all replicas on a batch of their own, so the results stay exact
 *     and bit-identical; a replica's batches beyond the end are left unused.
 *   - Stop requests: a replica whose `stop` is set sends "no batch for the next step" on
 *     that step's exchange, so every replica learns at the same step that some replica is
 *     out; they then agree through a small int32 allsum which were stop requests (each
 *     replica's real flag and stop value) and whether the data really ended there too.
 *     When any asked, every replica stops after that SAME step (reply.stop), and
 *     reply.stop_rank / stop_value name the lowest rank that asked and its value, so a
 *     replica that got no signal itself can say why it stopped; reply.holding is then the
 *     real count. A request reaches the others within one step; nothing is added to a step
 *     that no replica asks to stop.
 *   - EPOCH: every replica has a first batch, or none has; a replica with none while
 *     others have some fails the run on every replica (SL_EINVAL naming it: "pipeline
 *     'train': rank 1 has no batch in epoch 1 while rank 0 has: its shard is empty", with a
 *     hint).
 *   - BEGIN: when every replica's batches per epoch are known without reading
 *     (`cardinality`) and differ, the chief's reply carries the warning ("pipeline
 *     'train': the replicas' shards give unequal batches per epoch (rank 0 13, rank 1 10):
 *     every epoch ends at 10 steps on all replicas (3 batches of rank 0 unused per epoch);
 *     give every replica as many batches to use all the data"); a replica whose shard is
 *     known to be empty while others have batches fails the run on every replica
 *     (SL_EINVAL naming both).
 *   - EPOCH_END: after an epoch that its last step ended on some replicas before their data
 *     did, the chief's reply carries the counts ("epoch 1: rank 1 ran out after 10 steps;
 *     rank 0 had 13: all replicas end the epoch at 10 (3 batches of rank 0 unused); give
 *     every replica as many batches to use all the data"), again only when the counts
 *     change (without the advice then).
 *   - COUNT: the steps per epoch are the fewest of any replica, so the learning rates of a
 *     cosine schedule agree too.
 * Each agreement has an allsum tag of its own, so replicas out of phase fail instead of
 * mixing their counts. Without lockstep (ps async) each replica ends its epochs when its
 * own data ends.
 *
 * Workload: one record per training step, a few per epoch; the record and the reply live
 * on the loop's stack. */
#ifndef SLUICE_STEP_H
#define SLUICE_STEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sl_step_phase {
    SL_STEP_TRAIN = 0, /* a training step: exchange the gradient */
    SL_STEP_BEGIN,     /* once, before the first epoch */
    SL_STEP_COUNT,     /* an epoch's length, before one has ended */
    SL_STEP_EPOCH,     /* an epoch begins */
    SL_STEP_EPOCH_END, /* an epoch's steps are done */
} sl_step_phase;

/* The record the loop fills (read-only to the strategy; every field is set in every phase,
 * those a phase does not use to 0, NULL or false). */
typedef struct sl_step {
    sl_step_phase phase;
    sl_model *model;     /* this replica's model (borrowed) */
    float *grads;        /* TRAIN: the model's gradient buffer (sl_model_grads, backend memory, n
                            floats): this replica's gradient of its mean batch loss times
                            loss_scale. The exchange leaves there what the optimizer step
                            applies (the average, for strategy ring); NULL in other phases */
    size_t n;            /* TRAIN: the gradient's floats */
    float lr;            /* TRAIN: the step's scheduled learning rate */
    float loss_scale;    /* TRAIN: the factor the gradient carries: precision fp16's loss scale,
                            else 1. After the exchange the loop divides it out, or skips the
                            optimizer step when the exchanged gradient is not finite
                            (sluice/train.h); strategies that apply the update themselves are
                            refused with fp16 */
    int64_t step;        /* the global step: TRAIN the step being taken (0-based, the tensor id
                            of its exchange); other phases the steps done */
    int64_t epoch;       /* 0-based: the epoch being trained; EPOCH_END the one that ended */
    int64_t batches;     /* TRAIN: the epoch's batches before this step (a resumed run's passed
                            over included); EPOCH_END: the epoch's batches, its last step's
                            included; COUNT: the batches counted; else 0 */
    int64_t cardinality; /* the training pipeline's batches per epoch known without reading
                            (sl_dataset_cardinality), or -1 when not known */
    bool holds_next;     /* TRAIN: this replica holds a batch for the next step of this epoch;
                            EPOCH: it holds this epoch's first batch */
    bool data_ended;     /* EPOCH_END: this replica's pipeline ended in this epoch (rather than
                            the others ending the epoch before it did) */
    int stop;            /* TRAIN: this replica's stop request, sl_train_opts.stop read once
                            just before the call (the value sent is the value reported); 0:
                            none */
    const char *data;    /* the training pipeline's name, for messages (borrowed) */
} sl_step;

/* The strategy's reply (see above for what it holds when it arrives). */
typedef struct sl_step_reply {
    bool applied;         /* TRAIN: the strategy applied the update itself (strategy ps, the
                             ring's momentum-corrected compression): the loop takes no optimizer
                             step and leaves the loss scale alone */
    bool together;        /* the replicas agreed on this reply (lockstep epochs): epoch_ends,
                             holding, stop and steps_per_epoch are the same on every replica.
                             A strategy sets it in every reply or in none; the loop reads it
                             from the BEGIN reply to know whether stops are agreed */
    bool epoch_ends;      /* TRAIN: this epoch ends after this step (together: on every replica,
                             even one that holds a next batch, which it leaves unused) */
    int holding;          /* TRAIN: the replicas that hold a batch for the next step (together;
                             world size: the epoch goes on) */
    bool stop;            /* TRAIN, together: every replica stops after this step */
    int stop_rank;        /* stop: the lowest rank that asked */
    int stop_value;       /* stop: that rank's request (e.g. the signal number) */
    int64_t steps_per_epoch; /* COUNT: the steps an epoch takes (together: the fewest batches of
                                any replica) */
    char warning[2048];   /* a line the loop prints on stderr as "warning: LINE"; "" for none */
} sl_step_reply;

#ifdef __cplusplus
}
#endif
#endif
