/* sluice-train: train the model of a config file on its pipelines (sluice/train.h).
 *
 *   sluice-train CONFIG [--set PATH=VALUE]... [--resume | --overwrite] [--run-dir DIR]
 *                [--backend cpu|cuda|auto] [--device N] [--quiet] [--timeout S] [--retry S] [--hash-log PREFIX]
 *
 * With `strategy ring` (or --set train.strategy=ring) the process is one replica of a
 * ring: its place comes from sl_cluster_resolve over the config's `cluster` block and the
 * environment (TF_CONFIG and SLUICE_* from sluice-launch, Slurm, Open MPI), and the
 * trainer gets the hooks of sluice/strategy.h. With one replica that is a plain run.
 * With `strategy ps` the chief and workers train with the ps hooks, and a process whose
 * task is a ps serves its shard (sl_ps_task_run) until the workers are done or SIGTERM /
 * SIGINT stops it (its shard is checkpointed on the way out). A cluster block's `curve`
 * statement turns on CURVE encryption for both strategies.
 *
 * A thin main over sl_trainer_*: parse the config, apply the overrides, run, and print the
 * result. The last line on stdout is "test accuracy 0.XXXX" (the final evaluation).
 *
 * Run folders: a new run refuses a folder that holds another run's checkpoints, event files
 * or ps shards (exit 1, naming them) unless --resume continues that run or --overwrite
 * removes them first (a removal that fails is exit 1 naming the file and the reason). A task
 * that sluice-launch restarted (SLUICE_RESTART > 0) continues its run as with --resume.
 * Ctrl-C (SIGINT) or SIGTERM stops a run at the next step boundary: the trainer writes a
 * checkpoint of that step (when checkpoints are on), the tool prints the command that
 * resumes it, and exits 130 (SIGINT) or 143 (SIGTERM), the shell's 128 + signal. A second
 * signal ends the process at once (the default action). Lockstep replicas (strategy ring
 * with several replicas, ps sync) stop together: the request rides the next step's
 * exchange (sluice/train.h, opts.stop), so whichever replicas got the signal (sluice-launch
 * passes it to all; one is enough), every replica stops after the same step, each prints
 * where it stopped, the chief writes the checkpoint and prints the command that resumes
 * the whole job, and all exit 128 + the signal that stopped the run. A ps task that gets
 * the signal keeps serving the workers' last step for up to PS_STOP_LINGER_S seconds (it
 * returns as soon as every worker said BYE), then saves its shard and exits the same way;
 * a second signal stops it at once (its shard saved).
 * Exit status: 0 ok, 1 the config, the data, the model or a write failed (message with
 * file:line:col, or file and byte offset), 2 wrong usage (tools/tool.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice/cluster.h"
#include "sluice/config.h"
#include "sluice/strategy.h"
#include "sluice/train.h"
#include "tool.h"

extern char **environ;

static const char *PROG = "sluice-train";

static const char USAGE[] =
    "Usage: sluice-train CONFIG [OPTIONS]\n"
    "\n"
    "Train the model that CONFIG's `train { }` block names on its pipelines: one line per\n"
    "epoch (loss, accuracy, examples/s, input wait, eval accuracy), checkpoints and\n"
    "TensorBoard event files in the run folder, and finally `test accuracy 0.XXXX`.\n"
    "With `strategy ring` run N replicas: sluice-launch -n N -- sluice-train CONFIG ...\n"
    "With `strategy ps` add parameter servers: sluice-launch -n N --ps M -- sluice-train ...\n"
    "(the same command runs the ps tasks: they serve their shard of the parameters,\n"
    "checkpointed in RUN_DIR/ps-J/, until the workers are done).\n"
    "\n"
    "  --set PATH=VALUE    override a config value, e.g. --set train.epochs=1\n"
    "                      or --set pipeline.train.batch=64 (repeatable)\n"
    "  --resume            continue from the newest checkpoint in the run folder that passes\n"
    "                      its checks (checksums, metadata, finite values); a damaged one is\n"
    "                      skipped with a warning, and none loadable is an error\n"
    "  --overwrite         start a new run in a run folder that holds an earlier run's\n"
    "                      checkpoints, event files or ps shards: remove them first (without\n"
    "                      it, or --resume, such a folder is refused)\n"
    "  --run-dir DIR       where checkpoints and event files go (default: the train block's\n"
    "                      run_dir, relative to the current directory)\n"
    "  --backend B         cpu, cuda or auto (default: the train block's backend)\n"
    "  --device N          the GPU to use (default: the train block's `device`, else the\n"
    "                      local rank from sluice-launch, Open MPI, torchrun or Slurm\n"
    "                      modulo the visible GPUs)\n"
    "  --quiet             print only the final `test accuracy` line\n"
    "  --timeout S         with strategy ring or ps: seconds a replica waits for a peer\n"
    "                      before it fails naming it (default: the cluster block's\n"
    "                      timeout, else 30)\n"
    "  --retry S           with strategy ps: seconds a worker keeps retrying a lost ps\n"
    "                      (it may be restarting) before it fails naming it (default 120)\n"
    "  --hash-log PREFIX   with strategy ring: each replica writes `step S params HASH`\n"
    "                      per step (parameters after S steps) and for the final\n"
    "                      parameters to PREFIX.RANK; equal files = bit-identical replicas\n"
    "  -h, --help          this help\n"
    "\n"
    "Ctrl-C (or SIGTERM) stops at the next step: a checkpoint of that step is written when\n"
    "checkpoints are on, and the command that resumes the run is printed; a second Ctrl-C\n"
    "stops at once. Replicas (strategy ring, ps) stop together at the same step: a signal\n"
    "to sluice-launch (which passes it on) or to any one replica stops them all, the chief\n"
    "checkpoints that step and the ps tasks save their shards.\n"
    "\n"
    "Exit status: 0 trained, 1 error (config, data, model, write), 2 wrong usage,\n"
    "130 stopped by SIGINT (Ctrl-C), 143 stopped by SIGTERM.\n";

static volatile int stop_flag;
static volatile sig_atomic_t ps_signal; /* the first SIGINT / SIGTERM a ps task got */

/* Seconds a ps task keeps serving after its first SIGINT / SIGTERM: the workers got the
 * same signal (sluice-launch passes it to every task) and need the ps for the round of the
 * step they stop after, and a sync job for the stop agreement; they then say BYE and the
 * server returns by itself. Within sluice-launch's default --grace (5 s). */
#define PS_STOP_LINGER_S 3

static void on_signal(int sig) {
    if (sig == SIGALRM || ps_signal) {
        stop_flag = 1;
        return;
    }
    ps_signal = sig;
    alarm(PS_STOP_LINGER_S);
}

/* A ps task stops cleanly (saving its shard) on SIGTERM / SIGINT, which the launcher sends
 * when the workers are done or one failed, or passes on from the user: the first lets the
 * workers finish their step (PS_STOP_LINGER_S at most), a second stops at once. */
static void catch_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGALRM, &sa, NULL);
}

/* A training run stops at the next step boundary on the first SIGINT / SIGTERM (the
 * trainer checks train_stop, sluice/train.h opts.stop); the second ends the process with
 * the default action. Only async-signal-safe calls here. */
static volatile sig_atomic_t train_stop;

static void on_train_signal(int sig) {
    if (train_stop) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    train_stop = sig;
}

static void catch_train_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_train_signal;
    sa.sa_flags = SA_RESTART; /* the library's reads and waits go on; the loop checks the flag */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

/* Shell-quote a for the resume hint (plain words as they are). */
static void put_quoted(FILE *f, const char *a) {
    bool plain = *a != 0;
    for (const char *p = a; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%", *p)) plain = false;
    if (plain) {
        fputs(a, f);
        return;
    }
    fputc('\'', f);
    for (const char *p = a; *p; p++) {
        if (*p == '\'') fputs("'\\''", f);
        else fputc(*p, f);
    }
    fputc('\'', f);
}

/* After a stop request: where the run stopped, what was saved, and the command that
 * resumes it (this command without --overwrite, with --resume; under sluice-launch inside
 * the launch command that starts the whole job). Lockstep replicas all stop at the same
 * step, also those that got no signal themselves (the summary names the replica that did).
 * Returns the exit status: 128 + the signal that stopped the run. */
static int report_stop(const sl_trainer *t, bool is_chief, bool lockstep, int argc, char **argv) {
    const sl_train_config *c = sl_trainer_config(t);
    const sl_train_summary *sum = sl_trainer_summary(t);
    int sig = train_stop ? (int)train_stop : sum->stop_value;
    const char *name = sig == SIGTERM ? "SIGTERM" : "SIGINT (Ctrl-C)";
    char who[96] = "";
    if (lockstep) {
        if (!train_stop) /* the signal reached another replica */
            snprintf(who, sizeof who, " (rank %d got it; every replica stops at this step)", sum->stop_rank);
        else
            snprintf(who, sizeof who, " (every replica stops at this step)");
    }
    fflush(stdout);
    if (!is_chief) {
        /* the chief (worker 0) writes the checkpoints */
        fprintf(stderr, "%s: stopped by %s at step %lld%s\n", PROG, name, (long long)sum->steps, who);
    } else if (c->ckpt_every.epochs || c->ckpt_every.steps) {
        fprintf(stderr, "%s: stopped by %s at step %lld%s; saved checkpoint %s/ckpt-%09lld.safetensors\n", PROG, name,
                (long long)sum->steps, who, c->run_dir, (long long)sum->steps);
        /* under sluice-launch the job is resumed as it was started: all its tasks */
        const char *world = getenv("SLUICE_WORLD"), *nps = getenv("SLUICE_NUM_PS"), *pb = getenv("SLUICE_PORT_BASE");
        bool launched = world && getenv("SLUICE_TASK");
        /* replicas started otherwise (TF_CONFIG, a cluster block, Slurm) each run it */
        fputs(lockstep && !launched ? "---> HINT: resume with (on every replica): " : "---> HINT: resume with: ", stderr);
        if (launched) {
            fprintf(stderr, "sluice-launch -n %s", world);
            if (nps && atoi(nps) > 0) fprintf(stderr, " --ps %s", nps);
            if (pb && atoi(pb) != 29500) fprintf(stderr, " --port-base %s", pb);
            fputs(" -- ", stderr);
        }
        bool has_resume = false;
        for (int i = 0; i < argc; i++) {
            if (strcmp(argv[i], "--overwrite") == 0) continue;
            if (strcmp(argv[i], "--resume") == 0) has_resume = true;
            if (i) fputc(' ', stderr);
            put_quoted(stderr, i == 0 ? PROG : argv[i]);
        }
        if (!has_resume) fputs(" --resume", stderr);
        fputc('\n', stderr);
    } else {
        fprintf(stderr, "%s: stopped by %s at step %lld%s; checkpoints are off (`checkpoint none`): nothing was saved\n",
                PROG, name, (long long)sum->steps, who);
        fputs("---> HINT: add `checkpoint every=1` (epochs) or `checkpoint steps=N` to the train block to be able to "
              "resume a stopped run\n", stderr);
    }
    return 128 + (sig == SIGTERM ? SIGTERM : SIGINT);
}

/* --run-dir for a ps task, which reads the run folder from the config. */
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

int main(int argc, char **argv) {
    if (sl__tool_version(PROG, argc, argv)) return sl__tool_exit(PROG, SL__EXIT_OK);
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    if (!sets) return sl__tool_exit(PROG, sl__failf(PROG, "out of memory"));
    int nsets = 0, nargs = 0, npos = 0;
    int rc = sl__take_repeated(PROG, "set", argc - 1, argv + 1, sets, &nsets, &nargs);
    if (rc >= 0) {
        free(sets);
        return sl__tool_exit(PROG, rc);
    }
    bool resume = false, quiet = false, overwrite = false;
    long long device = -1;
    const char *run_dir = NULL, *backend = NULL, *hash_prefix = NULL, *timeout = NULL, *retry = NULL;
    sl__opt opts[] = {
        {"resume", 0, SL__OPT_FLAG, &resume, 0, 0},
        {"overwrite", 0, SL__OPT_FLAG, &overwrite, 0, 0},
        {"quiet", 'q', SL__OPT_FLAG, &quiet, 0, 0},
        {"run-dir", 0, SL__OPT_STR, &run_dir, 0, 0},
        {"backend", 0, SL__OPT_STR, &backend, 0, 0},
        {"device", 0, SL__OPT_INT, &device, 0, 65535},
        {"timeout", 0, SL__OPT_STR, &timeout, 0, 0},
        {"retry", 0, SL__OPT_STR, &retry, 0, 0},
        {"hash-log", 0, SL__OPT_STR, &hash_prefix, 0, 0},
        {NULL, 0, 0, NULL, 0, 0},
    };
    sl_cfg *cfg = NULL;
    sl_trainer *t = NULL;
    sl_cluster cl = {0};
    sl_strategy_ring *ring = NULL;
    sl_strategy_ps *ps = NULL;
    sl_tp_curve curve;
    memset(&curve, 0, sizeof curve);
    bool have_curve = false;
    sl_train_hooks hooks;
    FILE *hash_log = NULL;
    double timeout_s = 0, retry_s = 0;
    switch (sl__args_parse(PROG, opts, nargs, argv + 1, &npos)) {
    case SL__ARGS_HELP:
        fputs(USAGE, stdout);
        rc = SL__EXIT_OK;
        goto done;
    case SL__ARGS_ERROR: rc = SL__EXIT_USAGE; goto done;
    case SL__ARGS_OK: break;
    }
    if (npos != 1) {
        rc = sl__usage_error(PROG, npos == 0 ? "missing CONFIG" : "one CONFIG file, got %d arguments", npos);
        goto done;
    }
    if (backend && strcmp(backend, "cpu") != 0 && strcmp(backend, "cuda") != 0 && strcmp(backend, "auto") != 0) {
        rc = sl__usage_error(PROG, "--backend must be cpu, cuda or auto, not '%s'", backend);
        goto done;
    }
    if (timeout) {
        char *end;
        timeout_s = strtod(timeout, &end);
        if (end == timeout || *end || !(timeout_s > 0 && timeout_s <= 86400)) {
            rc = sl__usage_error(PROG, "--timeout must be seconds in (0, 86400], not '%s'", timeout);
            goto done;
        }
    }
    if (retry) {
        char *end;
        retry_s = strtod(retry, &end);
        if (end == retry || *end || !(retry_s > 0 && retry_s <= 86400)) {
            rc = sl__usage_error(PROG, "--retry must be seconds in (0, 86400], not '%s'", retry);
            goto done;
        }
    }
    if (resume && overwrite) {
        rc = sl__usage_error(PROG, "--resume continues the run in the folder, --overwrite replaces it: give one");
        goto done;
    }
    if (run_dir && !*run_dir) {
        rc = sl__usage_error(PROG, "--run-dir needs a folder name");
        goto done;
    }
    if (sl_cfg_parse_file(argv[1], &cfg)) {
        rc = sl__fail(PROG);
        goto done;
    }
    for (int i = 0; i < nsets; i++)
        if (sl_cfg_set(cfg, sets[i])) {
            fprintf(stderr, "%s: --set: %s\n", PROG, sl_errmsg());
            rc = SL__EXIT_USAGE;
            goto done;
        }
    if (backend) {
        char set[64];
        snprintf(set, sizeof set, "train.backend=%s", backend);
        if (sl_cfg_set(cfg, set)) {
            rc = sl__fail(PROG);
            goto done;
        }
    }
    sl_train_opts to = sl_train_opts_default();
    to.run_dir = run_dir;
    to.resume = resume;
    to.overwrite = overwrite;
    to.device = (int)device;
    to.envp = (const char *const *)environ;
    to.console = stdout;
    to.progress = !quiet && isatty(STDOUT_FILENO);
    if (quiet) to.console = NULL;
    sl_train_config tc;
    /* a config error here is reported by sl_trainer_create below, with the same message */
    bool is_ring = false, is_ps = false;
    if (sl_train_config_parse(cfg, &tc) == SL_OK) {
        is_ring = strcmp(tc.strategy, "ring") == 0;
        is_ps = strcmp(tc.strategy, "ps") == 0;
        /* sluice-launch -n N > 1 with strategy none would run N separate trainings into
         * one run folder: refuse (SLUICE_WORLD is what sluice-launch tells each task) */
        const char *world = getenv("SLUICE_WORLD");
        if (!is_ring && !is_ps && world && atoi(world) > 1) {
            fprintf(stderr, "%s: this task is one of %s replicas (SLUICE_WORLD, from sluice-launch) but the train "
                    "block says strategy %s: each would train alone into the same run folder\n"
                    "---> HINT: set `strategy ring` (or ps) in the train block, or run one process without "
                    "sluice-launch -n\n", PROG, world, tc.strategy);
            rc = SL__EXIT_FAIL;
            goto done;
        }
    }
    if (is_ring || is_ps) {
        if (sl_cluster_resolve(NULL, cfg, (const char *const *)environ, &cl)) {
            rc = sl__failf(PROG, "strategy %s", tc.strategy);
            goto done;
        }
        sl_status cs = sl_cluster_curve(&cl, &curve);
        if (cs == SL_OK) {
            have_curve = true;
        } else if (cs != SL_ENOTFOUND) {
            rc = sl__fail(PROG); /* the message names the curve statement's file */
            goto done;
        }
    }
    /* sluice-launch --restarts says how often this task was started again (SLUICE_RESTART) */
    const char *rs = getenv("SLUICE_RESTART");
    bool restarted = rs && atoi(rs) > 0;
    if (restarted) {
        /* a restarted task continues its run: it keeps the checkpoints written so far (its
         * first start already did any --overwrite; a new run would refuse the folder); a ps
         * chief is then moved on by the ps tasks to the step they recorded for it */
        to.resume = true;
        to.overwrite = false;
    }
    if (is_ps && cl.tasks[cl.self].type == SL_TASK_PS) {
        if (run_dir && set_run_dir(cfg, run_dir)) {
            rc = sl__fail(PROG);
            goto done;
        }
        catch_stop_signals();
        /* a ps that sluice-launch restarted (SLUICE_RESTART > 0) or a --resume run continues
         * from its shard checkpoints; any other start is a new run */
        sl_strategy_ps_opts po = {.timeout_s = timeout_s, .curve = have_curve ? &curve : NULL,
                                  .fresh = !resume && !restarted, .overwrite = overwrite};
        sl_status s = sl_ps_task_run(cfg, &cl, &po, quiet ? NULL : stdout, &stop_flag);
        if (s && s != SL_ECANCELED) {
            rc = sl__fail(PROG);
            goto done;
        }
        rc = SL__EXIT_OK;
        if (ps_signal) {
            /* stopped with the workers (or alone): the server saved its shard on the way out */
            int sig = (int)ps_signal;
            fflush(stdout);
            fprintf(stderr, "%s: ps %d stopped by %s; its shard is saved in %s/ps-%d\n", PROG,
                    cl.tasks[cl.self].index, sig == SIGTERM ? "SIGTERM" : "SIGINT (Ctrl-C)",
                    run_dir ? run_dir : tc.run_dir, cl.tasks[cl.self].index);
            rc = 128 + (sig == SIGTERM ? SIGTERM : SIGINT);
        }
        goto done;
    }
    if (is_ring) {
        sl_strategy_ring_opts ro = {.timeout_s = timeout_s, .curve = have_curve ? &curve : NULL, .compress = tc.compress,
                                    .optim = tc.optim, .bucket_bytes = (size_t)(tc.bucket_mb * 1048576.0)};
        if (hash_prefix && cl.world > 1) {
            char path[4096];
            snprintf(path, sizeof path, "%s.%d", hash_prefix, cl.rank);
            if (!(hash_log = fopen(path, "w"))) {
                fprintf(stderr, "%s: --hash-log: cannot create %s: %s\n", PROG, path, strerror(errno));
                rc = SL__EXIT_FAIL;
                goto done;
            }
            ro.hash_log = hash_log;
        }
        if (sl_strategy_ring_create(&cl, &ro, &hooks, &ring)) {
            rc = sl__fail(PROG);
            goto done;
        }
    } else if (is_ps) {
        sl_strategy_ps_opts po = {.timeout_s = timeout_s, .retry_s = retry_s, .curve = have_curve ? &curve : NULL};
        if (sl_strategy_ps_create(&cl, &tc, &po, &hooks, &ps)) {
            rc = sl__fail(PROG);
            goto done;
        }
    }
    if (is_ring || is_ps) {
        to.hooks = &hooks;
        /* only the chief talks on the console: the others would repeat its lines */
        if (!hooks.is_chief) to.progress = false;
    }
    /* lockstep replicas stop together: the trainer agrees on the step (sluice/train.h) */
    bool lockstep = (is_ring && cl.world > 1) || (is_ps && tc.ps_sync);
    catch_train_signals();
    to.stop = &train_stop;
    if (sl_trainer_create(cfg, &to, &t)) {
        rc = sl__fail(PROG);
        goto done;
    }
    if (sl_trainer_run(t)) {
        rc = sl__fail(PROG);
        goto done;
    }
    if (sl_trainer_summary(t)->stopped) {
        rc = report_stop(t, !(is_ring || is_ps) || hooks.is_chief, lockstep, argc, argv);
        goto done;
    }
    if (quiet) {
        const sl_train_summary *s = sl_trainer_summary(t);
        if (s->eval_accuracy >= 0) printf("test accuracy %.4f\n", s->eval_accuracy);
    }
    rc = SL__EXIT_OK;
done:
    sl_trainer_free(t);
    sl_strategy_ring_free(ring);
    sl_strategy_ps_free(ps);
    sl_cluster_free(&cl);
    free(curve.allow);
    if (hash_log) fclose(hash_log);
    sl_cfg_free(cfg);
    free(sets);
    return sl__tool_exit(PROG, rc);
}
