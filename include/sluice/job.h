/* A training job's task as one library call: from a parsed config and the environment, run
 * what this process is in the job — a plain single-process run, one replica of a ring, a
 * parameter-server worker or chief, or a ps task serving its shard — to its end. This is
 * what `sluice-train` does (the tool only parses its arguments, installs its signal
 * handlers and prints the outcome), for programs that embed the trainer.
 *
 * The strategy comes from the train block (`strategy none|ring|ps`). With ring or ps the
 * process's place comes from sl_cluster_resolve over the config's `cluster` block and the
 * environment (TF_CONFIG, sluice-launch's SLUICE_*, Slurm, Open MPI), a `curve` statement
 * turns on CURVE encryption, and the trainer gets the hooks of sluice/strategy.h. A task
 * that sluice-launch restarted (SLUICE_RESTART > 0 in the environment) continues its run as
 * with resume. sluice-launch -n N > 1 over `strategy none` (SLUICE_WORLD > 1) is refused:
 * every task would train alone into the same run folder.
 *
 * An `evaluator` task (TF_CONFIG task type "evaluator", sluice-launch --evaluator) of a ring
 * or ps job trains nothing and joins neither the ring nor the ps: it watches the run folder,
 * evaluates every new checkpoint of the chief on the train block's eval pipeline (the
 * trainer's own evaluation, the checkpoint's parameters and batchnorm running stats),
 * prints "evaluator: checkpoint step S: loss L accuracy A" for each on console, writes
 * eval/loss and eval/accuracy at step S to an event file of its own in RUN_DIR/eval/, and
 * returns SL_OK once the chief's final checkpoint is evaluated (the chief writes the marker
 * RUN_DIR/finished after it: "job <job id> step <S>"; only the marker of its own job id
 * counts). A damaged checkpoint is skipped with a warning naming it, one removed by keep=
 * before it was read with a note; those written before it started are passed over (one
 * line), except the final one of its own job. Under `strategy none` an evaluator task
 * (SLUICE_TASK "evaluator 0") is refused with SL_EINVAL. Errors: the run folder gone (SL_ENOTFOUND), no new
 * checkpoint and no marker for opts.timeout_s (0: 600 s; SL_ETIMEDOUT), the final
 * checkpoint damaged (SL_ECORRUPT), a checkpoint of another configuration (SL_EINVAL), a
 * train block without an eval pipeline (SL_EINVAL). opts.stop ends it (summary.stopped).
 *
 * Workload: once per process. */
#ifndef SLUICE_JOB_H
#define SLUICE_JOB_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

#include "sluice/config.h"
#include "sluice/status.h"
#include "sluice/train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_job_result sl_job_result; /* below */

typedef struct sl_job_opts {
    const char *run_dir;             /* overrides the train block's run_dir (ps tasks too); NULL: keep */
    bool resume, overwrite;          /* as sl_train_opts (a ps task: continue from / replace its shards) */
    int device;                      /* the GPU; -1: the train block's, else local rank % visible */
    sl_cpu_gemm cpu_gemm;            /* the trainers' sl_train_opts.cpu_gemm; default auto */
    const char *const *envp;         /* the environment the task reads (e.g. environ: the library reads
                                        none of its own); NULL: an empty one */
    FILE *console;                   /* epoch lines, the final accuracy, ps progress; NULL: silent */
    bool progress;                   /* a progress bar on console (the chief only) */
    bool plain_progress;             /* ... without escape sequences (sl_train_opts.plain_progress) */
    double timeout_s;                /* ring / ps: seconds to wait for a peer; 0: the cluster's, else 30;
                                        an evaluator: seconds to wait for a new checkpoint; 0: 600 */
    double retry_s;                  /* ps workers: seconds to retry a lost ps; 0: 120 */
    const char *hash_log;            /* ring, several replicas: write per-step parameter hashes to
                                        PREFIX.RANK (sluice-train --hash-log); NULL: none */
    volatile sig_atomic_t *stop;     /* training: nonzero (a signal number) stops at the next step
                                        boundary, as sl_train_opts.stop; NULL: never */
    volatile int *ps_stop;           /* a ps task: nonzero stops serving (its shard is saved); NULL: never */
    /* Called once this process's role is known, just before its task starts (a tool
     * installs the signal handlers that suit it there): result->ps_task and ps_index,
     * evaluator, is_chief, stop_together and run_dir are set. NULL: nothing. */
    void (*on_role)(void *ctx, const sl_job_result *result);
    /* A trainer's sl_train_opts.on_epoch_end (every replica; ps tasks and the evaluator have
     * no epochs). NULL: nothing. */
    sl_status (*on_epoch_end)(void *ctx, int64_t epochs, int64_t step);
    void *ctx;                       /* passed to on_role and on_epoch_end */
} sl_job_opts;

sl_job_opts sl_job_opts_default(void);

/* What the task was and how it ended. */
struct sl_job_result {
    bool ps_task;               /* this process served a ps shard (no training summary) */
    bool evaluator;             /* this process was the evaluator task: summary.eval_accuracy and
                                   eval_loss are of the last checkpoint evaluated (-1: none), steps
                                   its step */
    int evaluated;              /* evaluator: checkpoints evaluated */
    int ps_index;               /* ps_task: its index */
    bool is_chief;              /* a trainer that logs, evaluates and checkpoints (rank 0, or alone) */
    bool stop_together;         /* replicas that stop together (ring with several, ps mode=sync) */
    bool checkpoints;           /* the train block writes checkpoints */
    char run_dir[1024];         /* the run folder used */
    sl_train_summary summary;   /* a trainer's (summary.stopped: ended by opts.stop) */
};

/* Run this process's task of the job that cfg describes (cfg is borrowed; the trainer may
 * rewrite its batch for replicas, sl_trainer_create). Returns SL_OK when the task ran to its
 * end or was stopped (result->summary.stopped, or a ps task stopped by ps_stop), with
 * *result filled; else the error (a config error with its FILE:LINE:COL, the cluster's,
 * the trainer's, a peer's), with *result filled as far as it was known. */
sl_status sl_job_run(sl_cfg *cfg, const sl_job_opts *opts, sl_job_result *result);

#ifdef __cplusplus
}
#endif
#endif
