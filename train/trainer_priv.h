/* What the training loop's files share (train/trainer.c, train/trainer_lockstep.c): the
 * trainer itself and the small helpers both use. Private to train/.
 *
 * Workload: read by the loop on every step. */
#ifndef SLUICE_TRAINER_PRIV_H
#define SLUICE_TRAINER_PRIV_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "sluice/pipeline.h"
#include "sluice/tfevents.h"
#include "sluice/train.h"
#include "sluice/util.h"

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
    int64_t last_save;         /* the step of the last checkpoint this replica saved (0: none) */
    int64_t *warned;           /* lockstep: the per-replica counts last warned about (2 x world), or NULL */
    double run_t0;             /* progress eta: when the loop began, at step run_step0 */
    int64_t run_step0;
    int bar_len;               /* plain_progress: the length of the bar drawn last (blanked next) */
    sl__loss_scaler ls;        /* precision fp16 */
};

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* splitmix64: per-epoch iterator seeds from the run seed. */
static inline uint64_t mix(uint64_t a, uint64_t b) {
    return sl_mix64(a * SL_GOLDEN64 + b + 0x632be59bd9b4e019ULL);
}

static inline bool chief(const sl_trainer *t) { return t->hooks.is_chief; }

/* Replicas that end every epoch together (sluice/train.h: lockstep epochs). */
static inline bool lockstep(const sl_trainer *t) { return t->hooks.world_size > 1 && t->hooks.exchange_more; }

static inline FILE *console(const sl_trainer *t) { return chief(t) ? t->opts.console : NULL; }

static void warnf(const sl_trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3), unused));
static void warnf(const sl_trainer *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (t->opts.console) fflush(t->opts.console);
    fputs("warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* The iterator of the training pipeline for one epoch (its shuffle order seeded by the epoch). */
static inline sl_status open_epoch(sl_trainer *t, int64_t epoch, sl_iter **it) {
    sl_iter_opts io = sl_iter_opts_default();
    io.seed = mix(t->c.seed, (uint64_t)epoch);
    sl_status s = sl_iter_create(t->train_ds, &io, it);
    if (s) sl_err_prefix("pipeline '%s': ", t->c.data);
    return s;
}

/* opts.stop (sluice/train.h): this replica's own request (its value, 0: none) */
static inline int own_stop(const sl_trainer *t) { return t->opts.stop ? (int)*t->opts.stop : 0; }

/* Not for lockstep replicas, which stop together (agree_stop) */
static inline bool stop_requested(const sl_trainer *t) { return own_stop(t) && !lockstep(t); }

/* The run's length (train/train_config.c): c->steps, or c->epochs x steps_per_epoch (0 while
 * that is not known, steps_per_epoch <= 0). SL_ERANGE naming both numbers, *out 0, when the
 * product is past 2^63-1. */
sl_status sl__train_total_steps(const sl_train_config *c, int64_t steps_per_epoch, int64_t *out);

/* ---- lockstep epochs (train/trainer_lockstep.c; sluice/train.h) ---- */

/* At the start: the chief warns when the replicas' batches per epoch, known without
 * reading, differ. Every replica takes part. */
sl_status sl__tr_check_split(sl_trainer *t);
/* After an epoch that ended on some replicas before their data did: the chief warns with
 * the counts (again only when they change). */
sl_status sl__tr_warn_uneven(sl_trainer *t, int64_t epoch, int64_t b, bool ran_out);
/* Batches in one epoch (in lockstep the fewest of any replica). */
sl_status sl__tr_count_batches(sl_trainer *t, int64_t *n);
/* Every replica has a first batch in this epoch, or none has. */
sl_status sl__tr_first_batch(sl_trainer *t, int64_t epoch, bool have);
/* A step's exchange counted fewer next batches than replicas: tell a stop from the data's
 * end (*stop, *more). */
sl_status sl__tr_agree_stop(sl_trainer *t, bool have_next, int mine, int *more, bool *stop);

#endif
