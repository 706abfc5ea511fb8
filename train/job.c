/* sl_job_run (sluice/job.h): a config and the environment -> this process's task of the job,
 * run to its end. It chooses the strategy by the train block, resolves the cluster, builds
 * the strategy's hooks (or runs a ps task), creates and runs the trainer, and reports what
 * the task was for the caller to print.
 *
 * Workload: once per process. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/cluster.h"
#include "sluice/file.h"
#include "sluice/job.h"
#include "sluice/log.h"
#include "sluice/strategy.h"
#include "sluice/util.h"
#include "train/evaluator.h"

sl_job_opts sl_job_opts_default(void) { return (sl_job_opts){.device = -1}; }

/* train.run_dir="DIR" (quoted for the config language) into cfg: a ps task reads its run
 * folder from the config */
static sl_status set_run_dir(sl_cfg *cfg, const char *dir) {
    size_t n = strlen(dir);
    char *set = malloc(2 * n + 32);
    if (!set) return sl_err(SL_ENOMEM, "out of memory");
    char *p = set + sprintf(set, "train.run_dir=\"");
    for (size_t i = 0; i < n; i++) {
        if (dir[i] == '"' || dir[i] == '\\') *p++ = '\\';
        *p++ = dir[i];
    }
    strcpy(p, "\"");
    sl_status s = sl_cfg_set(cfg, set);
    free(set);
    return s;
}

/* sluice-launch -n N > 1 over `strategy none`: N separate trainings into one run folder */
static sl_status check_world(const sl_train_config *tc, const char *const *envp) {
    const char *task = sl_env_get(envp, "SLUICE_TASK");
    if (task && strncmp(task, "evaluator", 9) == 0) {
        sl_err(SL_EINVAL, "this task is the evaluator (SLUICE_TASK, from sluice-launch --evaluator) but the train block "
               "says strategy %s: it would train alone into the run folder", tc->strategy);
        sl_err_hint("the evaluator watches the checkpoints of a `strategy ring` or `strategy ps` job");
        return SL_EINVAL;
    }
    /* a launcher that started several processes: each would train alone */
    static const char *const LAUNCHER[][2] = {{"SLUICE_WORLD", "sluice-launch"}, {"WORLD_SIZE", "torchrun"},
                                              {"PET_NNODES", "Kubeflow"}, {"OMPI_COMM_WORLD_SIZE", "mpirun"},
                                              {"PMI_SIZE", "mpiexec"}};
    for (size_t i = 0; i < sizeof LAUNCHER / sizeof LAUNCHER[0]; i++) {
        const char *world = sl_env_get(envp, LAUNCHER[i][0]);
        if (!world || atoi(world) <= 1) continue;
        sl_err(SL_EINVAL, "this task is one of %s replicas (%s, from %s) but the train block says strategy %s: each "
               "would train alone into the same run folder", world, LAUNCHER[i][0], LAUNCHER[i][1], tc->strategy);
        sl_err_hint("set `strategy ring` (or ps) in the train block (or --set train.strategy=ring), or start one "
                    "process");
        return SL_EINVAL;
    }
    return SL_OK;
}

/* The chief's first line in a distributed job: how many replicas, and who said so. */
static void say_world(const sl_cluster *cl, const sl_train_config *tc, FILE *console) {
    if (!console || cl->tasks[cl->self].ring_rank > 0) return;
    if (cl->tasks[cl->self].type == SL_TASK_PS || cl->tasks[cl->self].type == SL_TASK_EVALUATOR) return;
    char from[96];
    if (strcmp(cl->members_source, cl->task_source) == 0)
        snprintf(from, sizeof from, "from %s", cl->members_source);
    else
        snprintf(from, sizeof from, "members from %s, task from %s", cl->members_source, cl->task_source);
    fprintf(console, "cluster: %d replica%s (strategy %s", cl->world, cl->world == 1 ? "" : "s", tc->strategy);
    if (cl->nps) fprintf(console, ", %d ps task%s", cl->nps, cl->nps == 1 ? "" : "s");
    fprintf(console, "), %s%s%s%s%s\n", from, cl->source_vars[0] ? " (" : "", cl->source_vars,
            cl->source_vars[0] ? ")" : "", cl->rendezvous ? ", addresses exchanged at the master" : "");
    fflush(console);
}

/* the ps task of this process: serve its shard until the workers are done or ps_stop */
static sl_status run_ps_task(sl_cfg *cfg, const sl_cluster *cl, const sl_tp_curve *curve, const sl_job_opts *o,
                             bool fresh, sl_job_result *r) {
    r->ps_task = true;
    r->ps_index = cl->tasks[cl->self].index;
    if (o->run_dir) {
        sl_status s = set_run_dir(cfg, o->run_dir);
        if (s) return s;
    }
    if (o->on_role) o->on_role(o->ctx, r);
    sl_strategy_ps_opts po = {.timeout_s = o->timeout_s, .curve = curve, .fresh = fresh, .overwrite = o->overwrite};
    sl_status s = sl_ps_task_run(cfg, cl, &po, o->console, o->ps_stop);
    return s == SL_ECANCELED ? SL_OK : s;
}

/* the evaluator task of this process: evaluate the chief's checkpoints until its final one */
static sl_status run_evaluator_task(sl_cfg *cfg, const sl_cluster *cl, const sl_job_opts *o,
                                    const char *const *envp, sl_job_result *r) {
    r->evaluator = true;
    sl__evaluator_opts eo = {.run_dir = o->run_dir, .job_id = cl->job_id, .console = o->console,
                             .wait_s = o->timeout_s, .device = o->device, .envp = envp, .stop = o->stop};
    sl__evaluator *ev;
    sl_status s = sl__evaluator_create(cfg, &eo, &ev);
    if (s) return s;
    const sl__evaluator_stats *st = sl__evaluator_stats_get(ev);
    snprintf(r->run_dir, sizeof r->run_dir, "%s", st->run_dir);
    if (o->on_role) o->on_role(o->ctx, r);
    s = sl__evaluator_run(ev);
    r->summary.eval_accuracy = st->evaluated ? st->last_accuracy : -1;
    r->summary.eval_loss = st->last_loss;
    r->summary.steps = st->last_step;
    r->summary.stopped = st->stopped;
    r->summary.stop_value = st->stop_value;
    r->evaluated = st->evaluated;
    sl__evaluator_free(ev);
    return s;
}

/* the trainer's options from the job's */
static sl_train_opts train_opts(const sl_job_opts *o, const char *const *envp, bool resume) {
    sl_train_opts to = sl_train_opts_default();
    to.run_dir = o->run_dir;
    to.resume = resume;
    to.overwrite = resume ? false : o->overwrite;
    to.device = o->device;
    to.cpu_gemm = o->cpu_gemm;
    to.envp = envp;
    to.console = o->console;
    to.progress = o->progress && o->console;
    to.plain_progress = o->plain_progress;
    to.on_epoch_end = o->on_epoch_end;
    to.ctx = o->ctx;
    to.stop = o->stop;
    return to;
}

/* The replicas' strategy hooks (ring or ps) into *hooks. */
typedef struct {
    sl_strategy_ring *ring;
    sl_strategy_ps *ps;
    FILE *hash_log;
    char hash_path[4096];
} strategies;

static sl_status make_hooks(const sl_cluster *cl, const sl_train_config *tc, const sl_tp_curve *curve,
                            const sl_job_opts *o, sl_train_hooks *hooks, strategies *st) {
    if (strcmp(tc->strategy, "ps") == 0) {
        sl_strategy_ps_opts po = {.timeout_s = o->timeout_s, .retry_s = o->retry_s, .curve = curve};
        return sl_strategy_ps_create(cl, tc, &po, hooks, &st->ps);
    }
    sl_strategy_ring_opts ro = {.timeout_s = o->timeout_s, .curve = curve, .compress = tc->compress,
                                .optim = tc->optim, .bucket_bytes = (size_t)(tc->bucket_mb * 1048576.0),
                                .ring = {.path = (sl_ring_path)tc->ring_path}};
    if (o->hash_log && cl->world > 1) {
        snprintf(st->hash_path, sizeof st->hash_path, "%s.%d", o->hash_log, cl->rank);
        if (sl_file_fopen_write(st->hash_path, "w", "hash log", &st->hash_log)) {
            sl_err_prefix("--hash-log: ");
            return sl_errcode();
        }
        ro.hash_log = st->hash_log;
        ro.hash_log_name = st->hash_path;
    }
    return sl_strategy_ring_create(cl, &ro, hooks, &st->ring);
}

/* A job whose id is derived from its members' addresses (no SLUICE_JOB_ID) and that has no
 * CURVE keys keeps out other jobs, not strangers: any process that can reach the ports can
 * compute the id and end or disturb the job (an ABORT ends every replica). Said at start by
 * every task, with the way to close it that suits where the members came from. */
static void warn_open_job(const sl_cluster *cl) {
    const char *src = cl->members_source, *how;
    if (strcmp(src, "slurm") == 0)
        how = "export SLUICE_JOB_ID=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ') in the batch script before srun "
              "(Slurm passes it to every task)";
    else if (strcmp(src, "openmpi") == 0)
        how = "SLUICE_JOB_ID=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ') mpirun -x SLUICE_JOB_ID ...";
    else if (strcmp(src, "torchrun") == 0 || strcmp(src, "pmi") == 0)
        how = "start the launcher with SLUICE_JOB_ID=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ') in its environment "
              "(torchrun passes it on; mpiexec -genv SLUICE_JOB_ID ...)";
    else if (strcmp(src, "TF_CONFIG") == 0 || strcmp(src, "kubeflow") == 0)
        how = "give every task the same random SLUICE_JOB_ID beside TF_CONFIG (e.g. from a Kubernetes Secret)";
    else
        how = "give every task the same random SLUICE_JOB_ID (e.g. $(od -An -N8 -tx8 /dev/urandom | tr -d ' '))";
    SL_WARN("this job is open to strangers: its members come from %s and no SLUICE_JOB_ID is set, so its job id is "
            "derived from their addresses and any process that can reach these ports can compute it and end or "
            "disturb the job; to close it, %s, or add `curve` keys to the cluster block (sluice-launch sets a "
            "random SLUICE_JOB_ID itself)", src, how);
}

sl_status sl_job_run(sl_cfg *cfg, const sl_job_opts *opts, sl_job_result *r) {
    sl_job_opts o = opts ? *opts : sl_job_opts_default();
    static const char *const no_env[] = {NULL};
    const char *const *envp = o.envp ? o.envp : no_env;
    memset(r, 0, sizeof *r);
    sl_trainer *t = NULL;
    sl_cluster cl = {0};
    strategies st = {0};
    sl_tp_curve curve;
    memset(&curve, 0, sizeof curve);
    bool have_curve = false;
    sl_status s = SL_OK;
    sl_train_config tc;
    /* a config error here is reported by sl_trainer_create below, with the same message */
    bool is_ring = false, is_ps = false;
    if (sl_train_config_parse(cfg, &tc) == SL_OK) {
        is_ring = strcmp(tc.strategy, "ring") == 0;
        is_ps = strcmp(tc.strategy, "ps") == 0;
        if (!is_ring && !is_ps && (s = check_world(&tc, envp))) goto done;
        snprintf(r->run_dir, sizeof r->run_dir, "%s", o.run_dir ? o.run_dir : tc.run_dir);
    }
    if (is_ring || is_ps) {
        if ((s = sl_cluster_resolve(NULL, cfg, envp, &cl))) {
            sl_err_prefix("strategy %s: ", tc.strategy);
            goto done;
        }
        sl_status cs = sl_cluster_curve(&cl, &curve);
        if (cs == SL_OK) have_curve = true;
        else if (cs != SL_ENOTFOUND && (s = cs)) goto done; /* the message names the curve statement's file */
        if (!have_curve && strcmp(cl.job_source, "SLUICE_JOB_ID") != 0 && cl.ntasks > 1) warn_open_job(&cl);
        say_world(&cl, &tc, o.console);
    }
    /* sluice-launch --restarts says how often this task was started again (SLUICE_RESTART):
     * a restarted task continues its run (its first start already did any overwrite; a ps
     * chief is then moved on by the ps tasks to the step they recorded for it) */
    const char *rs = sl_env_get(envp, "SLUICE_RESTART");
    bool restarted = rs && atoi(rs) > 0;
    if (is_ps && cl.tasks[cl.self].type == SL_TASK_PS) {
        s = run_ps_task(cfg, &cl, have_curve ? &curve : NULL, &o, !o.resume && !restarted, r);
        goto done;
    }
    if ((is_ps || is_ring) && cl.tasks[cl.self].type == SL_TASK_EVALUATOR) {
        s = run_evaluator_task(cfg, &cl, &o, envp, r);
        goto done;
    }
    sl_train_opts to = train_opts(&o, envp, o.resume || restarted);
    sl_train_hooks hooks;
    if (is_ring || is_ps) {
        if ((s = make_hooks(&cl, &tc, have_curve ? &curve : NULL, &o, &hooks, &st))) goto done;
        to.hooks = &hooks;
        /* only the chief talks on the console: the others would repeat its lines */
        if (!hooks.is_chief) to.progress = false;
    }
    r->is_chief = !(is_ring || is_ps) || hooks.is_chief;
    /* replicas that stop together: their exchange agrees on the step (sluice/step.h) */
    r->stop_together = (is_ring && cl.world > 1) || (is_ps && tc.ps_sync);
    if (o.on_role) o.on_role(o.ctx, r);
    if ((s = sl_trainer_create(cfg, &to, &t))) goto done;
    const sl_train_config *c = sl_trainer_config(t);
    r->checkpoints = c->ckpt_every.epochs || c->ckpt_every.steps;
    snprintf(r->run_dir, sizeof r->run_dir, "%s", c->run_dir);
    /* the `finished` marker of an earlier run must not end this run's evaluator */
    bool mark = r->is_chief && r->checkpoints && (is_ring || is_ps);
    if (mark && (s = sl__run_finished_clear(r->run_dir))) goto done;
    s = sl_trainer_run(t);
    r->summary = *sl_trainer_summary(t);
    /* after the final checkpoint: the evaluator task ends once it has evaluated it */
    if (!s && mark && !r->summary.stopped) s = sl__run_finished_write(r->run_dir, cl.job_id, r->summary.steps);
done:
    sl_trainer_free(t);
    sl_strategy_ring_free(st.ring);
    sl_strategy_ps_free(st.ps);
    sl_cluster_free(&cl);
    free(curve.allow);
    if (st.hash_log) { /* the lines are flushed as written: this fails only after a failed one */
        sl_error keep;
        sl_err_save(&keep);
        sl_status hs = sl_file_fclose_write(st.hash_log, st.hash_path, NULL);
        if (s) sl_err_restore(&keep);
        else s = hs;
    }
    return s;
}
