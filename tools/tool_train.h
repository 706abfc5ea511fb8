/* sluice-train's pieces beside its main (tools/tool_train.c): the usage text, the checks of
 * its option values, the signal handling of a training run and of a ps task, and what it
 * prints when a run was stopped. The job itself is the library's (sluice/job.h).
 *
 * Workload: once per process. Nothing here is thread-safe. */
#ifndef SLUICE_TOOL_TRAIN_H
#define SLUICE_TOOL_TRAIN_H

#include <signal.h>
#include <stdbool.h>

#include "sluice/config.h"
#include "sluice/job.h"

extern const char SL__TRAIN_USAGE[];

/* "--NAME" seconds in (0, 86400] from text into *out; 0, or SL__EXIT_USAGE (printed). */
int sl__train_seconds(const char *prog, const char *name, const char *text, double *out);

/* --hold-after E --hold-until FILE: after epoch E the run waits until FILE exists. */
typedef struct sl__train_hold {
    long long after; /* the epoch (epochs done) to hold after */
    const char *file; /* NULL: no hold */
} sl__train_hold;

/* Hand the hold to the job (jo->on_epoch_end, jo->ctx = h; h must outlive the job); nothing
 * when h->file is NULL. The wait is bounded (SL_ETIMEDOUT after 10 minutes, naming FILE)
 * and a stop signal (sl__train_stop) ends it. */
void sl__train_hold_install(sl__train_hold *h, sl_job_opts *jo);

/* The flags the handlers set: train_stop, the signal that asked a run to stop (the
 * trainer's opts.stop); ps_stop, set when a ps task must stop serving; ps_signal, the first
 * signal a ps task got. */
extern volatile sig_atomic_t sl__train_stop;
extern volatile int sl__ps_stop;
extern volatile sig_atomic_t sl__ps_signal;

/* sl_job_opts.on_role: a ps task stops cleanly on SIGTERM / SIGINT (the first lets the
 * workers finish their step, PS_STOP_LINGER_S at most, a second stops at once; its shard is
 * saved either way); a trainer stops at the next step boundary on the first and ends at
 * once (the default action) on the second. */
void sl__train_on_role(void *ctx, const sl_job_result *r);

/* After a stopped run or ps task: where it stopped, what was saved, and (the chief of a run
 * with checkpoints) the command that resumes it, made from argv. Returns the exit status,
 * 128 + the signal. */
int sl__train_report_stop(const char *prog, const sl_job_result *r, int argc, char **argv);
/* After a run that finished (the chief, not --quiet): on stderr, the run folder and the
 * commands that open it in TensorBoard and profile its input pipeline. */
void sl__train_report_done(const char *prog, const sl_job_result *r, const char *config);

/* --summary: the summary of the model the train block of cfg names (sl_model_summary, built
 * on the CPU), printed on stdout. Returns the exit status: 0, or 1 with the error printed. */
int sl__train_summary(const char *prog, const sl_cfg *cfg);

#endif
