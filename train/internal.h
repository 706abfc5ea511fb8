/* Private to train/ (and its unit tests): what crosses files inside the module, grouped by
 * the file that defines it: what optimizers, strategies, the trainer and the gradient checks
 * need from a model beyond include/sluice/model.h, the checkpoint folder's helpers, the
 * rules by which replicas agree, and the trainer's three parts.
 *
 * Workload: the trainer's parts are read on every training step. */
#ifndef SLUICE_TRAIN_INTERNAL_H
#define SLUICE_TRAIN_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sluice/file.h"
#include "sluice/model.h"
#include "sluice/pipeline.h"
#include "sluice/pool.h"
#include "sluice/step.h"
#include "sluice/tfevents.h"
#include "sluice/train.h"
#include "sluice/util.h"
#include "train/backend.h"

/* ---- train/model.c ---- */

/* The backend the model computes on (borrowed; lives as long as the model). */
sl_backend *sl__model_backend(sl_model *m);

/* The CPU backend's GEMM choices of this process (train/backend_cpu_gemm.c), as checkpoints
 * keep them so that a resumed run multiplies each shape with the GEMM the interrupted one
 * used (the two round differently). The text: one entry per decided shape, in the order met,
 * `TA,TB,M,N,K,G` (TA, TB 0 or 1; M, N, K 1..2^31-1; G `s` for Sluice's GEMM, `b` for
 * OpenBLAS), joined by ';'. _text writes it NUL-terminated into buf (cap bytes) and returns
 * its length, as snprintf does (buf may be NULL with cap 0, to ask the length). _adopt takes
 * a text, refusing it whole with SL_ECORRUPT (the entry and what is wrong) unless every entry
 * is sound; with apply, each shape the process has not chosen yet takes the text's choice
 * (a shape already chosen keeps its own), and *adopted (when not NULL) counts them. */
size_t sl__cpu_gemm_choices_text(char *buf, size_t cap);
sl_status sl__cpu_gemm_choices_adopt(const char *text, bool apply, int *adopted);

/* Kernel launches the model's backend made so far (0 on the CPU): see backend.h. */
uint64_t sl__model_launches(sl_model *m);

/* backend auto that could not open its GPU and uses the CPU: why (the CUDA error, one
 * line); NULL when the model runs on the backend it asked for or no GPU exists. */
const char *sl__model_fallback(const sl_model *m);

/* Floats at the start of the parameter / gradient buffers that a gradient updates. The
 * rest (batchnorm running statistics) is state that optimizers must leave alone. */
size_t sl__model_trainable(const sl_model *m);

/* The gradient buffer (sl_model_grads) has this many floats past its n floats, which the
 * model never reads or writes: a strategy may carry a few values on the gradient's own
 * allreduce there without a copy (the ring strategy's next-batch flag, sluice/step.h). */
#define SL__GRADS_SPARE 1

/* Make train steps also compute the gradient of the loss with respect to the input x
 * (off by default: no layer needs it). Returns the buffer (backend memory, [B, input
 * size] floats for the last step's B, set not accumulated) or NULL when off / on ENOMEM. */
const float *sl__model_input_grad(sl_model *m, bool on);

/* Train steps taken so far, which with the model's seed picks the dropout masks; set it
 * when resuming from a checkpoint to draw the masks of an uninterrupted run (and in
 * gradient checks, to repeat one step's masks). */
uint64_t sl__model_steps(const sl_model *m);
void sl__model_set_steps(sl_model *m, uint64_t steps);

/* ---- train/model_step.c ---- */

/* The bucketed gradient exchange (train/strategy_ring.c): fn is called during every train
 * step's backward pass, on the thread running the step, right after the backward ops of
 * each layer that has parameters were issued (on CUDA queued, not necessarily done), with
 * that layer's first gradient float lo: from then on gradient floats [lo,
 * sl__model_trainable) of this step are final (no later op of the step writes them), and
 * the layers report in decreasing lo. A non-OK return ends the step with that error. fn
 * NULL: none (the default). */
typedef sl_status (*sl__grads_ready_fn)(void *ctx, size_t lo);
void sl__model_on_grads_ready(sl_model *m, sl__grads_ready_fn fn, void *ctx);

/* The first gradient float of each layer that has parameters, in layer order (increasing),
 * into lo[0..cap); returns how many such layers there are (also when more than cap). */
int sl__model_grad_layers(const sl_model *m, size_t *lo, int cap);

/* ---- train/model_plan.c ---- */

/* The name each of specs[0..n) gets in a model: its own (name) or the Keras-style default,
 * "input" for specs[0] and "<kind>_<k>" for the k-th unnamed layer of a kind ("conv2d_2",
 * "add_1"); what sl_model_create names them. names has n entries. */
void sl__model_layer_names(const sl_layer_spec *specs, int n, char (*names)[32]);

/* ---- train/checkpoint.c ---- */

/* The files DIR/PREFIX<digits>SUFFIX (checkpoints, ps shards), highest number first: *out
 * is a malloc'd array of malloc'd paths (free with sl_train_free_list). Returns how many (0
 * when the folder is missing or holds none), SL_EIO when it cannot be listed, or SL_ENOMEM. */
int sl__list_numbered(const char *dir, const char *prefix, const char *suffix, char ***out);
/* The step S of a checkpoint path ".../ckpt-S.safetensors" (the names sl__list_numbered
 * lists), or -1 when its last component is not one. */
int64_t sl__checkpoint_step(const char *path);

/* ---- train/train_config.c ---- */

/* The run's length: c->steps, or c->epochs x steps_per_epoch (0 while that is not known,
 * steps_per_epoch <= 0). SL_ERANGE naming both numbers, *out 0, when the product is past
 * 2^63-1. */
sl_status sl__train_total_steps(const sl_train_config *c, int64_t steps_per_epoch, int64_t *out);

/* ---- train/strategy_agree.c: replicas that end epochs and stop together (sluice/step.h) ---- */

/* What a strategy gives the rules. exchange: the step's gradient exchange (rec->phase
 * SL_STEP_TRAIN) with the replica's next-batch flag riding on it: *more in, 1 when this
 * replica holds a batch for the next step (0 also for a stop request), out: how many
 * replicas do (0..world); it sets reply->applied when it applied the update. sum: add
 * v[0..n) over the replicas in place (every replica passes the same n and tag, a label
 * below 0x10000 checked on receipt; slot r of each block of world ints is replica r's).
 * Their errors end the run. */
typedef struct sl__agree_ops {
    sl_status (*exchange)(void *ctx, const sl_step *rec, sl_step_reply *reply, int *more);
    sl_status (*sum)(void *ctx, int32_t *v, size_t n, uint32_t tag);
} sl__agree_ops;

typedef struct sl__agree {
    sl__agree_ops ops;
    void *ctx;         /* the strategy, for ops */
    int world, rank;
    bool chief;        /* its replies carry the warnings */
    bool uneven;       /* the epoch's last step ended it on some replicas before their data did */
    int64_t *warned;   /* the per-replica end counts last warned about (2 x world), or NULL */
} sl__agree;

/* ag for replica `rank` of `world` over ops (copied) and ctx; chief: the warning replica. */
void sl__agree_init(sl__agree *ag, const sl__agree_ops *ops, void *ctx, int world, int rank, bool chief);
/* Frees what the rules keep (ag stays initialised). */
void sl__agree_free(sl__agree *ag);
/* Answer rec in every phase by the rules of sluice/step.h, through ag's ops:
 * reply->together is set. Errors: the ops', SL_EINVAL for a replica without data while
 * others have some (naming it), SL_ENOMEM. */
sl_status sl__agree_exchange(sl__agree *ag, const sl_step *rec, sl_step_reply *reply);

/* ---- the trainer: train/trainer.c (lifecycle), trainer_step.c, trainer_report.c ---- */

/* precision fp16's dynamic loss scale (sluice/train.h): the scale a step's loss gradient is
 * multiplied by, the finite steps since it last changed, and the steps skipped so far. */
#define SL__LOSS_SCALE_START 65536.0f
#define SL__LOSS_SCALE_GROWTH 2000 /* finite steps in a row before the scale doubles */
typedef struct sl__loss_scaler {
    float scale;
    int64_t good;
    int64_t skipped;
} sl__loss_scaler;

/* After a step whose (exchanged) gradient was `finite` or not: halve the scale and count a
 * skipped step, or count a finite step and double the scale after SL__LOSS_SCALE_GROWTH
 * of them in a row. */
static inline void sl__loss_scale_update(sl__loss_scaler *ls, bool finite) {
    if (!finite) {
        ls->scale *= 0.5f;
        ls->good = 0;
        ls->skipped++;
    } else if (++ls->good == SL__LOSS_SCALE_GROWTH) {
        ls->scale *= 2.0f;
        ls->good = 0;
    }
}

/* The progress bar's state (train/trainer_report.c). */
typedef struct sl__bar {
    double t0;      /* eta: when the loop began, at step step0 */
    int64_t step0;
    double last;    /* when it was last drawn (0: draw at the next step) */
    int len;        /* plain_progress: the length of the bar drawn last (blanked next) */
} sl__bar;

struct sl_trainer {
    const sl_cfg *cfg;         /* borrowed */
    sl_train_config c;
    sl_train_opts opts;
    sl_train_hooks hooks;      /* copy; world_size 1 / chief when none were given */
    sl_model *model;
    sl_optim *optim;
    sl_dataset *train_ds, *eval_ds;
    sl_iter *first_it; /* the first epoch's pipeline, opened by create (see there); NULL once taken */
    sl_tfev_writer *events;    /* RUN_DIR/train/ (train scalars) */
    sl_tfev_writer *eval_events; /* RUN_DIR/eval/ (evaluations; NULL without an eval pipeline) */
    sl_train_summary sum;
    int64_t steps_per_epoch;   /* 0 until known */
    int64_t total_steps;       /* the run's length in steps, 0 until known */
    bool ran;
    bool together;             /* the exchange agrees epoch ends and stops (the BEGIN reply's
                                  together, sluice/step.h): opts.stop only goes into the records */
    int64_t last_save;         /* the step of the last checkpoint this replica saved (0: none) */
    sl__bar bar;
    sl__loss_scaler ls;        /* precision fp16 */
};

/* What one epoch's line, or `log every=N`'s scalars, are made of. */
typedef struct sl__tally {
    double loss_sum;       /* sum of batch mean loss * examples */
    int64_t correct, examples, batches;
    int64_t top5;          /* examples with the label among the 5 highest logits */
    double wait, compute, exchange; /* seconds */
    double t0, t1;         /* the epoch's training began / ended (t1 before its evaluation) */
    uint64_t wire0;        /* the exchange's bytes sent before the epoch (hooks.wire_bytes) */
    int64_t step0;         /* the step the epoch began at */
} sl__tally;

/* One epoch's batches: its pipeline, and two batch slots. While step k computes on slot
 * cur, batch k+1 is already taken from the pipeline and staged (sl_model_stage: an async
 * copy on CUDA that step k does not wait for), named by the handle in hs[]. On the CPU the
 * step reads the element's tensors in place, so an element lives until its step is done. */
typedef struct sl__feed {
    sl_iter *it;           /* this epoch's pipeline */
    sl_iter *next_it;      /* epoch next_for's, opened early (create's first epoch, open_next_early) */
    int64_t next_for;
    sl_element e, el[2];   /* e: the batches a resumed run passes over */
    sl_staged hs[2];
    int cur;
    bool have;             /* slot cur holds the next step's batch (x, y) */
    const sl_tensor *x, *y;
    bool end_seen;         /* the epoch's pipeline ended */
    bool cut;              /* the replicas ended the epoch before this replica's data did */
    int64_t b;             /* batches taken in this epoch */
    int64_t skip;          /* batches of the first epoch a resumed run passes over */
    int64_t spe;           /* steps per epoch when known, for open_next_early */
} sl__feed;

/* The training loop's state across its epochs and steps. */
typedef struct sl__loop {
    sl__feed f;
    int64_t step, epoch;
    int64_t pos_batch;     /* the data position after the last step: batch pos_batch of epoch */
    float lr;
    bool stopped;          /* opts.stop: the run ends at this step boundary */
    bool agreed;           /* the replicas agreed to stop after this step (sluice/step.h) */
    sl__tally a;           /* this epoch */
    sl__tally win;         /* `log every=N`: the steps since the last train scalars */
    struct {
        double epoch_acc;  /* this epoch's evaluation, -1 none */
        double last;       /* the newest evaluation's accuracy, at last_step */
        int64_t last_step;
    } ev;
    struct {
        double t0, wait, busy; /* the loop's start; seconds waiting, and in steps */
        int64_t examples;
    } run;
} sl__loop;

static inline bool sl__tr_chief(const sl_trainer *t) { return t->hooks.is_chief; }

static inline FILE *sl__tr_console(const sl_trainer *t) { return sl__tr_chief(t) ? t->opts.console : NULL; }

/* "warning: ..." on stderr, after what the console holds. */
static void sl__tr_warn(const sl_trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3), unused));
static void sl__tr_warn(const sl_trainer *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (t->opts.console) fflush(t->opts.console);
    fputs("warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* The iterator of the training pipeline for one epoch, from its batch `start`: its shuffle
 * order seeded by the epoch (splitmix64 of the run seed and the epoch). */
static inline sl_status sl__tr_open_epoch_at(sl_trainer *t, int64_t epoch, int64_t start, sl_iter **it) {
    sl_iter_opts io = sl_iter_opts_default();
    io.seed = sl_mix64(t->c.seed * SL_GOLDEN64 + (uint64_t)epoch + 0x632be59bd9b4e019ULL);
    sl_status s = sl_iter_create_at(t->train_ds, &io, start, it);
    if (s) sl_err_prefix("pipeline '%s': ", t->c.data);
    return s;
}

static inline sl_status sl__tr_open_epoch(sl_trainer *t, int64_t epoch, sl_iter **it) {
    return sl__tr_open_epoch_at(t, epoch, 0, it);
}

/* opts.stop (sluice/train.h): this replica's own request (its value, 0: none). */
static inline int sl__tr_own_stop(const sl_trainer *t) { return t->opts.stop ? (int)*t->opts.stop : 0; }

/* Stop at this boundary on this replica's own request: not for replicas that stop
 * together (the exchange's reply says when they do). */
static inline bool sl__tr_stop_requested(const sl_trainer *t) { return sl__tr_own_stop(t) && !t->together; }

static inline uint64_t sl__tr_wire_bytes(const sl_trainer *t) {
    return t->hooks.wire_bytes ? t->hooks.wire_bytes(t->hooks.ctx) : 0;
}

/* -- train/trainer_step.c: the step (slots, exchange, unscale, optimizer) -- */

/* The image and label tensors of a batch of pipeline `pipe`, checked (SL_EINVAL naming the
 * missing component, a dtype other than float32, or shapes other than [B, ...] and [B]). */
sl_status sl__tr_batch_parts(const sl_trainer *t, const char *pipe, const sl_element *e, const sl_tensor **x,
                             const sl_tensor **y);
/* rec through the hooks' exchange (rec's model, cardinality and data filled in here; none:
 * this replica alone) into *out, which starts as this replica's own answer (sluice/step.h);
 * a reply's warning is printed. */
sl_status sl__tr_exchange(sl_trainer *t, sl_step *rec, sl_step_reply *out);
/* Batches in one epoch (the run at `step`), counted by reading it when the pipeline does
 * not know; replicas that agree take the fewest of any (SL_STEP_COUNT). */
sl_status sl__tr_count_batches(sl_trainer *t, int64_t step, int64_t *n);
/* The start of epoch L->epoch: its pipeline (the one opened early when it is this
 * epoch's), the batches a resumed run passes over, the first batch into slot 0, and the
 * replicas' agreement on it (SL_STEP_EPOCH). */
sl_status sl__tr_epoch_begin(sl_trainer *t, sl__loop *L);
/* One training step on slot cur, with batch k+1 taken from the pipeline first: train,
 * exchange, unscale (fp16), optimizer; the reply's epoch end and stop into L. */
sl_status sl__tr_step(sl_trainer *t, sl__loop *L);
/* Open the next epoch's pipeline now when this epoch is in its last tenth. */
void sl__tr_open_next_early(sl_trainer *t, sl__loop *L);
/* Stage slot cur's batch again (an evaluation refilled the staging slots). */
sl_status sl__tr_restage(sl_trainer *t, sl__loop *L);

/* -- train/trainer_report.c: reporting (progress line, epoch lines, scalars) -- */

/* The trainer's progress line, without the leading "\r\033[K":
 *   epochs mode (epochs > 0), steps per epoch known:
 *     "epoch 2/5 [=====>      ] 12/40  loss 0.1234  accuracy 0.9000  eta 1m05s"
 *   steps mode (epochs 0), total_steps > 0:
 *     "step 120/1000 [==>         ]  12%  epoch 3  loss 0.1234  accuracy 0.9000  eta 35s"
 *   else "epoch 1  batch 12  loss ...": no total, no eta (the first epoch's length is not
 *   known yet). epoch is 0-based, b the batches done in it, step the global steps done;
 *   eta_s < 0: unknown (left out). Writes at most cap bytes (NUL included); returns the
 *   length snprintf would. */
int sl__train_progress_line(char *out, size_t cap, int64_t epoch, int64_t epochs, int64_t b, int64_t steps_per_epoch,
                            int64_t step, int64_t total_steps, double loss, double accuracy, double eta_s);
/* Redraw the progress bar (opts.progress, the chief; at most ten times a second). */
void sl__report_progress(sl_trainer *t, const sl__loop *L);
/* Blank the progress bar before a line of its own. */
void sl__report_clear(sl_trainer *t);
/* A step's result and times into a tally. */
void sl__report_account(sl__tally *w, double wait, double compute, double exch, const sl_step_result *r);
/* An evaluation of the chief at `step` (at the end of 0-based epoch `epoch`, -1 elsewhere):
 * the summary's numbers, its console line (line: "eval step N ..."; else the epoch line
 * shows it) and the eval/ (validation/) scalars. */
sl_status sl__report_eval(sl_trainer *t, int64_t step, int64_t epoch, bool line, double loss, double acc, double top5);
/* The epoch line of `epoch` (0-based) at `step` from tally a, and its train/ scalars. */
sl_status sl__report_epoch(sl_trainer *t, int64_t epoch, int64_t step, const sl__tally *a, float lr, double eval_acc);
/* `log every=N`: the train scalars averaged over the steps in w, which then restarts (with
 * layout=keras: batch_* scalars of the epoch so far, tally epoch, as Keras' batch logs). */
sl_status sl__report_window(sl_trainer *t, int64_t step, sl__tally *w, const sl__tally *epoch, float lr);
/* The epoch's pipeline stats, for `sluice-stats --from RUN_DIR/stats.json` (a failure is a
 * warning). */
void sl__report_stats(sl_trainer *t, sl_iter *it);

#endif
