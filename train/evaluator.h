/* The sidecar evaluator (the `evaluator` task of a ps or ring job, sluice/job.h): it
 * watches the run folder the chief checkpoints into, evaluates every new checkpoint on the
 * train block's eval pipeline with the trainer's own evaluation (sl_trainer_evaluate), and
 * ends once the chief's final checkpoint is evaluated. Read-only on the run folder except
 * for its own event file in RUN_DIR/eval/; it never talks to the workers or the ps.
 *
 * The chief marks a finished run with RUN_DIR/finished (sl__run_finished_write, after its
 * final checkpoint): one line "job <16 hex digits> step <S>". The evaluator only believes a
 * marker of its own job (cluster job id, SLUICE_JOB_ID under sluice-launch), so a marker
 * left by an earlier run of the folder cannot end it early.
 *
 * Private to train/ (train/job.c and the unit test). Workload: once per checkpoint. */
#ifndef SLUICE_EVALUATOR_H
#define SLUICE_EVALUATOR_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sluice/config.h"
#include "sluice/status.h"

typedef struct sl__evaluator_opts {
    const char *run_dir;        /* overrides the train block's run_dir; NULL: keep */
    uint64_t job_id;            /* the job whose `finished` marker ends the watch */
    FILE *console;              /* one line per evaluated checkpoint; NULL: silent */
    FILE *warn;                 /* warnings (a damaged or vanished checkpoint); NULL: stderr */
    double wait_s;              /* sl__evaluator_run: give up after this long without a new
                                   checkpoint; 0: 600 */
    double poll_s;              /* sl__evaluator_run: seconds between looks; 0: 0.2 */
    int device;                 /* as sl_train_opts.device */
    const char *const *envp;    /* as sl_train_opts.envp */
    volatile sig_atomic_t *stop; /* sl__evaluator_run: nonzero stops the watch; NULL: never */
} sl__evaluator_opts;

typedef struct sl__evaluator_stats {
    int evaluated;              /* checkpoints evaluated */
    int skipped;                /* damaged or vanished checkpoints passed over */
    int64_t last_step;          /* the step of the last evaluated one; -1: none */
    double last_loss, last_accuracy;
    bool stopped;               /* opts.stop ended the watch (its value in stop_value) */
    int stop_value;
    char run_dir[1024];         /* the folder watched */
} sl__evaluator_stats;

typedef struct sl__evaluator sl__evaluator;

/* Build the model and the eval pipeline of cfg's train block (cfg is borrowed and must
 * outlive the evaluator). Nothing is written yet. SL_OK and *out; else *out is NULL and the
 * error is the config's (FILE:LINE:COL), the model's, or SL_EINVAL for a train block
 * without an eval pipeline. */
sl_status sl__evaluator_create(sl_cfg *cfg, const sl__evaluator_opts *opts, sl__evaluator **out);

/* One look at the run folder: every checkpoint newer than the last one looked at is
 * evaluated in step order (a line on console: "evaluator: checkpoint step S: loss L
 * accuracy A"; eval/loss and eval/accuracy at step S in its event file, opened at the first
 * evaluation). A damaged checkpoint is skipped with a warning naming it and what is wrong;
 * one removed (keep= rotation) before it was read is skipped with a note. Checkpoints
 * written before sl__evaluator_create (an earlier run's, or the one a resumed run starts
 * from) are passed over, with one line "evaluator: passing over N checkpoints in DIR written
 * before it started (up to step S)", except the final one of the job's marker. *done is true once
 * the job's `finished` marker is there and its step's checkpoint was looked at. Returns
 * SL_OK; SL_ENOTFOUND when the run folder, seen before, is gone; SL_EINVAL for a sound
 * checkpoint of another configuration; SL_EIO when the event file cannot be written. */
sl_status sl__evaluator_poll(sl__evaluator *ev, bool *done);

/* sl__evaluator_poll every poll_s until done, opts.stop (SL_OK, stats.stopped) or wait_s
 * without a new checkpoint and no marker (SL_ETIMEDOUT, naming the folder and the last
 * step seen). The final checkpoint damaged is SL_ECORRUPT naming it. */
sl_status sl__evaluator_run(sl__evaluator *ev);

const sl__evaluator_stats *sl__evaluator_stats_get(const sl__evaluator *ev);
void sl__evaluator_free(sl__evaluator *ev); /* NULL is a no-op */

/* The chief's marker: write RUN_DIR/finished (via a temporary name and rename) saying the
 * run of job `job_id` ended with its checkpoint of `step`. SL_OK or SL_EIO naming the file. */
sl_status sl__run_finished_write(const char *run_dir, uint64_t job_id, int64_t step);
/* Remove a marker of an earlier run (a new or resumed run starts). SL_OK (also when there is
 * none) or SL_EIO naming the file. */
sl_status sl__run_finished_clear(const char *run_dir);
/* Read the marker: true with *job_id and *step when it is there (a regular file) and well
 * formed (sl__run_finished_parse); anything else is no marker. */
bool sl__run_finished_read(const char *run_dir, uint64_t *job_id, int64_t *step);
/* A marker's text (len bytes, not NUL-terminated): true with *job_id and *step when it is
 * "job HEX step S\n" (S >= 0; what follows the line is ignored, 127 bytes at most in all),
 * false, leaving them alone, for anything else. */
bool sl__run_finished_parse(const char *text, size_t len, uint64_t *job_id, int64_t *step);

#endif
