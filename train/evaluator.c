/* The sidecar evaluator (train/evaluator.h): a trainer built from the config (never run)
 * lends its model and eval pipeline; each new checkpoint of the run folder is loaded into
 * that model (parameters and batchnorm running stats) and evaluated with
 * sl_trainer_evaluate, so the numbers are the chief's own for the same parameters. Also the
 * chief's `finished` marker.
 *
 * Workload: once per checkpoint; the folder is listed every poll (a few per second). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sluice/file.h"
#include "sluice/pool.h"
#include "sluice/tfevents.h"
#include "sluice/train.h"
#include "sluice/util.h"
#include "train/evaluator.h"
#include "train/internal.h"

struct sl__evaluator {
    sl__evaluator_opts o;
    sl_train_hooks hooks;       /* one replica, the chief: the trainer builds the eval pipeline */
    sl_trainer *t;
    sl_tfev_writer *events;     /* RUN_DIR/eval/, opened at the first evaluation */
    sl_ckpt_expect want;
    bool seen_dir;              /* the run folder existed at some look */
    struct timespec born;       /* when it was created: checkpoints written before are not new */
    int64_t looked;             /* the newest step looked at (evaluated or skipped); -1: none */
    int64_t bad_final;          /* the step of a damaged checkpoint, for the final's error; -1 */
    char bad_msg[600];
    sl__evaluator_stats st;
};

static const char MARKER[] = "finished";

static FILE *warn_to(const sl__evaluator *ev) { return ev->o.warn ? ev->o.warn : stderr; }

sl_status sl__evaluator_create(sl_cfg *cfg, const sl__evaluator_opts *opts, sl__evaluator **out) {
    *out = NULL;
    sl__evaluator *ev = calloc(1, sizeof *ev);
    if (!ev) return sl_err(SL_ENOMEM, "out of memory creating the evaluator");
    ev->o = *opts;
    ev->looked = ev->bad_final = ev->st.last_step = -1;
    ev->hooks = (sl_train_hooks){.world_size = 1, .rank = 0, .is_chief = true};
    clock_gettime(CLOCK_REALTIME, &ev->born);
    sl_train_opts to = sl_train_opts_default();
    to.run_dir = opts->run_dir;
    to.resume = true; /* never opens the training pipeline's first epoch */
    to.device = opts->device;
    to.envp = opts->envp;
    to.hooks = &ev->hooks;
    sl_status s = sl_trainer_create(cfg, &to, &ev->t);
    if (s) {
        sl_err_prefix("evaluator: ");
        free(ev);
        return s;
    }
    const sl_train_config *c = sl_trainer_config(ev->t);
    if (!c->eval[0]) {
        sl__evaluator_free(ev);
        s = sl_err(SL_EINVAL, "evaluator: the train block has no eval pipeline (`eval none`): nothing to evaluate");
        sl_err_hint("name one in the train block (`eval test`), or start the job without an evaluator task");
        return s;
    }
    snprintf(ev->st.run_dir, sizeof ev->st.run_dir, "%s", c->run_dir);
    /* said once it watches: from here on every checkpoint the chief writes is new (a script
     * can start the job's workers after this line and know none is passed over) */
    if (ev->o.console) {
        fprintf(ev->o.console, "evaluator: watching %s for the chief's checkpoints\n", ev->st.run_dir);
        fflush(ev->o.console);
    }
    ev->want = (sl_ckpt_expect){.model_hash = c->model_hash, .batch_size = c->batch};
    *out = ev;
    return SL_OK;
}

const sl__evaluator_stats *sl__evaluator_stats_get(const sl__evaluator *ev) { return &ev->st; }

void sl__evaluator_free(sl__evaluator *ev) {
    if (!ev) return;
    sl_tfev_close(ev->events);
    sl_trainer_free(ev->t);
    free(ev);
}

/* Evaluate the loaded parameters of checkpoint `step`: the line, the scalars. */
static sl_status report(sl__evaluator *ev, int64_t step) {
    double loss, acc;
    sl_status s = sl_trainer_evaluate(ev->t, &loss, &acc);
    if (s) return s;
    ev->st.evaluated++;
    ev->st.last_step = step;
    ev->st.last_loss = loss;
    ev->st.last_accuracy = acc;
    if (ev->o.console) {
        fprintf(ev->o.console, "evaluator: checkpoint step %" PRId64 ": loss %.4f accuracy %.4f\n", step, loss, acc);
        fflush(ev->o.console);
    }
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/eval", ev->st.run_dir);
    /* a failed write (a full disk, a file-size limit) names the event file, the byte and
     * the hint (sluice/tfevents.h): the evaluator fails with it */
    if ((!ev->events && (s = sl_tfev_open(dir, 0, &ev->events))) ||
        (s = sl_tfev_add_scalar(ev->events, "accuracy", step, (float)acc, 0)) ||
        (s = sl_tfev_add_scalar(ev->events, "loss", step, (float)loss, 0)) || (s = sl_tfev_flush(ev->events))) {
        sl_err_prefix("evaluator: ");
        return s;
    }
    return SL_OK;
}

/* Look at checkpoint `path` of `step`: evaluate it, or skip it with a warning. */
static sl_status look_at(sl__evaluator *ev, const char *path, int64_t step) {
    sl_ckpt_position pos;
    sl_status s = sl_train_load_checkpoint(path, sl_trainer_model(ev->t), NULL, &ev->want, &pos);
    ev->looked = step;
    if (s == SL_OK) return report(ev, step);
    if (s == SL_EINVAL || s == SL_ENOMEM || s == SL_EUNSUPPORTED) {
        sl_err_prefix("evaluator: ");
        return s; /* sound but another configuration (or a newer format): not this run's */
    }
    ev->st.skipped++;
    if (s == SL_ENOTFOUND) {
        fprintf(warn_to(ev), "evaluator: checkpoint %s was removed (keep=) before it could be read: skipped\n", path);
        sl_err_clear();
        return SL_OK;
    }
    ev->bad_final = step;
    snprintf(ev->bad_msg, sizeof ev->bad_msg, "%s", sl_errmsg());
    fprintf(warn_to(ev), "warning: evaluator: skipping damaged checkpoint %s: %s\n", path, sl_errmsg());
    sl_err_clear();
    return SL_OK;
}

/* The checkpoint was written before the evaluator started (an earlier run's, or the one a
 * resumed run starts from): not new. A file that is gone reads as new (look_at says so). */
static bool older(const sl__evaluator *ev, const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return false;
    const struct timespec *m = &sb.st_mtim;
    return m->tv_sec < ev->born.tv_sec || (m->tv_sec == ev->born.tv_sec && m->tv_nsec < ev->born.tv_nsec);
}

/* The note for the old checkpoints passed over so far (*old of them, up to old_step). */
static void note_old(const sl__evaluator *ev, int *old, int64_t old_step) {
    if (*old && ev->o.console) {
        fprintf(ev->o.console, "evaluator: passing over %d checkpoint%s in %s written before it started (up to step %" PRId64
                ")\n", *old, *old == 1 ? "" : "s", ev->st.run_dir, old_step);
        fflush(ev->o.console);
    }
    *old = 0;
}

sl_status sl__evaluator_poll(sl__evaluator *ev, bool *done) {
    *done = false;
    const char *dir = ev->st.run_dir;
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        if (!ev->seen_dir) return SL_OK; /* the chief has not made it yet */
        sl_status s = sl_err(SL_ENOTFOUND, "evaluator: the run folder %s is gone", dir);
        sl_err_hint("was it removed or moved while the job ran? the evaluator only reads it");
        return s;
    }
    ev->seen_dir = true;
    /* the marker first: a checkpoint listed after it is at most the final one */
    uint64_t job;
    int64_t final = -1;
    if (!sl__run_finished_read(dir, &job, &final) || job != ev->o.job_id) final = -1;
    char **list;
    int n = sl_train_list_checkpoints(dir, &list);
    if (n < 0) return n;
    sl_status s = SL_OK;
    int old = 0;
    int64_t old_step = -1;
    for (int i = n - 1; i >= 0 && !s; i--) { /* oldest first */
        int64_t step = sl__checkpoint_step(list[i]);
        if (step <= ev->looked) continue;
        if (step != final && older(ev, list[i])) {
            old++;
            old_step = ev->looked = step;
            continue;
        }
        note_old(ev, &old, old_step);
        s = look_at(ev, list[i], step);
    }
    if (n > 0) sl_train_free_list(list, n);
    note_old(ev, &old, old_step);
    if (s) return s;
    if (final >= 0 && ev->looked >= final) {
        if (ev->st.last_step != final) {
            s = ev->bad_final == final
                    ? sl_err(SL_ECORRUPT, "evaluator: the final checkpoint (step %" PRId64 ") is damaged: %s", final,
                             ev->bad_msg)
                    : sl_err(SL_ENOTFOUND, "evaluator: the final checkpoint (step %" PRId64 ") of %s was never readable",
                             final, dir);
            return s;
        }
        *done = true;
    }
    return SL_OK;
}

sl_status sl__evaluator_run(sl__evaluator *ev) {
    double wait = ev->o.wait_s > 0 ? ev->o.wait_s : 600, poll = ev->o.poll_s > 0 ? ev->o.poll_s : 0.2;
    double last_new = sl_now_s();
    int64_t looked = ev->looked;
    for (;;) {
        if (ev->o.stop && *ev->o.stop) {
            ev->st.stopped = true;
            ev->st.stop_value = (int)*ev->o.stop;
            return SL_OK;
        }
        bool done;
        sl_status s = sl__evaluator_poll(ev, &done);
        if (s || done) return s;
        double now = sl_now_s();
        if (ev->looked != looked) {
            looked = ev->looked;
            last_new = now;
        } else if (now - last_new >= wait) {
            if (looked < 0)
                s = sl_err(SL_ETIMEDOUT, "evaluator: no checkpoint in %s after %.0f s", ev->st.run_dir, wait);
            else
                s = sl_err(SL_ETIMEDOUT, "evaluator: no new checkpoint in %s for %.0f s after step %" PRId64
                           ", and the chief did not mark the run finished", ev->st.run_dir, wait, looked);
            sl_err_hint("did the chief end without its final checkpoint? (it needs `checkpoint every=...`); "
                        "--timeout S sets this wait");
            return s;
        }
        struct timespec ts = {(time_t)poll, (long)((poll - (double)(time_t)poll) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

/* ---- the chief's marker ---- */

#define MARKER_MAX 127 /* bytes: a marker is one short line */

static void marker_path(char *out, size_t cap, const char *run_dir) { snprintf(out, cap, "%s/%s", run_dir, MARKER); }

sl_status sl__run_finished_write(const char *run_dir, uint64_t job_id, int64_t step) {
    char path[1100], tmp[1200];
    marker_path(path, sizeof path, run_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f;
    if (sl_file_fopen_write(tmp, "w", "run marker", &f)) { /* refuses a FIFO there */
        char why[512];
        snprintf(why, sizeof why, "%s", sl_errmsg());
        return sl_err(SL_EIO, "cannot create the run marker: %s", why);
    }
    /* a failed write (a full disk, a file-size limit): "PATH: write failed at byte N" and
     * the hint; the older marker stays */
    fprintf(f, "job %016" PRIx64 " step %" PRId64 "\n", job_id, step);
    sl_status s = sl_file_fclose_write(f, path, NULL);
    if (!s && rename(tmp, path) != 0) s = sl_err(SL_EIO, "%s: cannot rename %s over it: %s", path, tmp, strerror(errno));
    if (s) unlink(tmp);
    return s;
}

sl_status sl__run_finished_clear(const char *run_dir) {
    char path[1100];
    marker_path(path, sizeof path, run_dir);
    if (unlink(path) != 0 && errno != ENOENT) return sl_err(SL_EIO, "cannot remove %s: %s", path, strerror(errno));
    return SL_OK;
}

bool sl__run_finished_parse(const char *text, size_t len, uint64_t *job_id, int64_t *step) {
    char line[MARKER_MAX + 1];
    if (len > MARKER_MAX) return false;
    memcpy(line, text, len);
    line[len] = 0;
    uint64_t j;
    int64_t s;
    char end;
    if (sscanf(line, "job %" SCNx64 " step %" SCNd64 "%c", &j, &s, &end) != 3 || end != '\n' || s < 0)
        return false;
    *job_id = j;
    *step = s;
    return true;
}

bool sl__run_finished_read(const char *run_dir, uint64_t *job_id, int64_t *step) {
    char path[1100];
    marker_path(path, sizeof path, run_dir);
    char *text = NULL;
    size_t len = 0;
    /* a regular file of a line: a FIFO, a folder or a large file there is no marker (a
     * blocking open of a FIFO would hang the watch) */
    if (sl_file_read_all(path, "run marker", MARKER_MAX, NULL, &text, &len)) return false;
    bool ok = sl__run_finished_parse(text, len, job_id, step);
    free(text);
    return ok;
}
