/* sluice-train's pieces beside its main (tools/tool_train.h): usage, option checks, the
 * signal handlers of a training run and of a ps task, and the report of a stopped run.
 *
 * Signals: a training run stops at the next step boundary on the first SIGINT / SIGTERM
 * (the trainer checks sl__train_stop, sluice/train.h opts.stop), and the second ends the
 * process with the default action. A ps task gets the same signal when the workers are done
 * or one failed (sluice-launch sends it), or from the user: the first lets the workers
 * finish their step (PS_STOP_LINGER_S at most: they need the ps for the round of the step
 * they stop after, and a sync job for the stop agreement; within sluice-launch's default
 * --grace of 5 s), a second stops it at once; its shard is saved either way. Only
 * async-signal-safe calls in the handlers.
 *
 * Workload: once per process. */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sluice/model.h"
#include "sluice/train.h"
#include "tool.h"
#include "tool_train.h"

const char SL__TRAIN_USAGE[] =
    "Usage: sluice-train CONFIG [OPTIONS]\n"
    "\n"
    "Train the model that CONFIG's `train { }` block names on its pipelines: one line per\n"
    "epoch (loss, accuracy, top-5 accuracy with more than 5 classes, examples/s, input\n"
    "wait, eval accuracy), checkpoints and TensorBoard event files in the run folder,\n"
    "and finally `test accuracy 0.XXXX`.\n"
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
    "  --summary           print the model's summary (each layer, its output shape, its\n"
    "                      parameters and, in a graph, the layers it reads) and exit\n"
    "                      without training\n"
    "  --hold-after E --hold-until FILE\n"
    "                      after epoch E (its line, evaluation and checkpoint), print\n"
    "                      `held after epoch E (step S) until FILE exists` on stderr and\n"
    "                      wait until FILE exists (at most 10 minutes; a stop signal ends\n"
    "                      the wait): a script can act on a run at a point it controls\n"
    "                      (kill a replica or a ps while the others wait). Every replica\n"
    "                      holds; a task restarted by sluice-launch that resumes past epoch\n"
    "                      E does not hold again\n"
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

int sl__train_seconds(const char *prog, const char *name, const char *text, double *out) {
    char *end;
    *out = strtod(text, &end);
    if (end == text || *end || !(*out > 0 && *out <= 86400))
        return sl__usage_error(prog, "--%s must be seconds in (0, 86400], not '%s'", name, text);
    return 0;
}

/* ---- --hold-after / --hold-until -------------------------------------------------- */

#define HOLD_MAX_S 600

static sl_status hold_epoch_end(void *ctx, int64_t epochs, int64_t step) {
    const sl__train_hold *h = ctx;
    if (!h->file || epochs != h->after) return SL_OK;
    fflush(stdout);
    fprintf(stderr, "sluice-train: held after epoch %lld (step %lld) until %s exists\n", (long long)epochs,
            (long long)step, h->file);
    /* checked every 20 ms: a test's hold, waited for a few seconds, where a file that appears
     * is all a shell script can easily give */
    struct timespec tick = {0, 20 * 1000 * 1000};
    for (long i = 0; i < HOLD_MAX_S * 50L; i++) {
        if (access(h->file, F_OK) == 0 || sl__train_stop) return SL_OK;
        nanosleep(&tick, NULL);
    }
    sl_err(SL_ETIMEDOUT, "--hold-until %s: the file did not appear within %d s of the hold after epoch %lld", h->file,
           HOLD_MAX_S, (long long)epochs);
    return SL_ETIMEDOUT;
}

void sl__train_hold_install(sl__train_hold *h, sl_job_opts *jo) {
    if (!h->file) return;
    jo->on_epoch_end = hold_epoch_end;
    jo->ctx = h;
}

volatile sig_atomic_t sl__train_stop;
volatile int sl__ps_stop;
volatile sig_atomic_t sl__ps_signal;

#define PS_STOP_LINGER_S 3

static void on_ps_signal(int sig) {
    if (sig == SIGALRM || sl__ps_signal) {
        sl__ps_stop = 1;
        return;
    }
    sl__ps_signal = sig;
    alarm(PS_STOP_LINGER_S);
}

static void on_train_signal(int sig) {
    if (sl__train_stop) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    sl__train_stop = sig;
}

void sl__train_on_role(void *ctx, const sl_job_result *r) {
    (void)ctx;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = r->ps_task ? on_ps_signal : on_train_signal;
    sa.sa_flags = SA_RESTART; /* the library's reads and waits go on; the loops check the flags */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (r->ps_task) sigaction(SIGALRM, &sa, NULL);
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
 * the launch command that starts the whole job). Replicas that stop together (ring, ps sync)
 * all stop at one step, also those that got no signal themselves (the summary names the
 * replica that did).
 * Returns the exit status: 128 + the signal that stopped the run. */
static int report_train_stop(const char *prog, const sl_job_result *r, int argc, char **argv) {
    const sl_train_summary *sum = &r->summary;
    bool is_chief = r->is_chief, together = r->stop_together;
    int sig = sl__train_stop ? (int)sl__train_stop : sum->stop_value;
    const char *name = sig == SIGTERM ? "SIGTERM" : "SIGINT (Ctrl-C)";
    char who[96] = "";
    if (together) {
        if (!sl__train_stop) /* the signal reached another replica */
            snprintf(who, sizeof who, " (rank %d got it; every replica stops at this step)", sum->stop_rank);
        else
            snprintf(who, sizeof who, " (every replica stops at this step)");
    }
    fflush(stdout);
    if (!is_chief) {
        /* the chief (worker 0) writes the checkpoints */
        fprintf(stderr, "%s: stopped by %s at step %lld%s\n", prog, name, (long long)sum->steps, who);
    } else if (r->checkpoints) {
        fprintf(stderr, "%s: stopped by %s at step %lld%s; saved checkpoint %s/ckpt-%09lld.safetensors\n", prog, name,
                (long long)sum->steps, who, r->run_dir, (long long)sum->steps);
        /* under sluice-launch the job is resumed as it was started: all its tasks */
        const char *world = getenv("SLUICE_WORLD"), *nps = getenv("SLUICE_NUM_PS"), *pb = getenv("SLUICE_PORT_BASE");
        bool launched = world && getenv("SLUICE_TASK");
        /* replicas started otherwise (TF_CONFIG, a cluster block, Slurm) each run it */
        fputs(together && !launched ? "---> HINT: resume with (on every replica): " : "---> HINT: resume with: ", stderr);
        if (launched) {
            fprintf(stderr, "sluice-launch -n %s", world);
            if (nps && atoi(nps) > 0) fprintf(stderr, " --ps %s", nps);
            if (pb && atoi(pb) != 29500) fprintf(stderr, " --port-base %s", pb);
            fputs(" -- ", stderr);
        }
        bool has_resume = false;
        for (int i = 0; i < argc; i++) {
            if (strcmp(argv[i], "--overwrite") == 0) continue;
            if (strcmp(argv[i], "--hold-after") == 0 || strcmp(argv[i], "--hold-until") == 0) { /* a script's hold */
                i++;
                continue;
            }
            if (strncmp(argv[i], "--hold-after=", 13) == 0 || strncmp(argv[i], "--hold-until=", 13) == 0) continue;
            if (strcmp(argv[i], "--resume") == 0) has_resume = true;
            if (i) fputc(' ', stderr);
            put_quoted(stderr, i == 0 ? prog : argv[i]);
        }
        if (!has_resume) fputs(" --resume", stderr);
        fputc('\n', stderr);
    } else {
        fprintf(stderr, "%s: stopped by %s at step %lld%s; checkpoints are off (`checkpoint none`): nothing was saved\n",
                prog, name, (long long)sum->steps, who);
        fputs("---> HINT: add `checkpoint every=1` (epochs) or `checkpoint steps=N` to the train block to be able to "
              "resume a stopped run\n", stderr);
    }
    return 128 + (sig == SIGTERM ? SIGTERM : SIGINT);
}

/* After a finished run, on stderr (stdout's last line stays "test accuracy ..."): where the
 * run is and the two commands that look into it. */
void sl__train_report_done(const char *prog, const sl_job_result *r, const char *config) {
    const char *d = r->run_dir[0] ? r->run_dir : ".";
    char p[4200];
    snprintf(p, sizeof p, "%s/stats.json", d);
    bool stats = access(p, R_OK) == 0;
    snprintf(p, sizeof p, "%s/eval", d);
    bool eval = access(p, F_OK) == 0;
    snprintf(p, sizeof p, "%s/validation", d);
    const char *vdir = access(p, F_OK) == 0 ? ", validation/" : eval ? ", eval/" : "";
    fflush(stdout);
    fprintf(stderr, "%s: the run is in %s/: %sTensorBoard event files (train/%s)%s\n", prog, d,
            r->checkpoints ? "checkpoints (ckpt-*.safetensors), " : "", vdir,
            stats ? ", the input pipeline's stats (stats.json)" : "");
    fprintf(stderr, "---> HINT: look at the curves: tensorboard --logdir %s\n", d);
    if (stats)
        fprintf(stderr, "---> HINT: find the input pipeline's bottleneck: sluice-stats --from %s/stats.json (or run "
                "it alone: sluice-stats %s)\n", d, config);
    else
        fprintf(stderr, "---> HINT: find the input pipeline's bottleneck: sluice-stats %s\n", config);
}

int sl__train_report_stop(const char *prog, const sl_job_result *r, int argc, char **argv) {
    if (!r->ps_task) return report_train_stop(prog, r, argc, argv);
    /* stopped with the workers (or alone): the server saved its shard on the way out */
    int sig = (int)sl__ps_signal;
    fflush(stdout);
    fprintf(stderr, "%s: ps %d stopped by %s; its shard is saved in %s/ps-%d\n", prog, r->ps_index,
            sig == SIGTERM ? "SIGTERM" : "SIGINT (Ctrl-C)", r->run_dir, r->ps_index);
    return 128 + (sig == SIGTERM ? SIGTERM : SIGINT);
}

int sl__train_summary(const char *prog, const sl_cfg *cfg) {
    sl_train_config c;
    if (sl_train_config_parse(cfg, &c)) return sl__fail(prog);
    sl_model_opts mo = sl_model_opts_default();
    mo.backend = SL_BACKEND_CPU; /* the summary is the same on every backend */
    mo.max_batch = 1;
    mo.threads = 1;
    mo.label_smoothing = c.label_smoothing;
    sl_model *m = NULL;
    char *text = NULL;
    if (sl_model_from_config(cfg, c.model, &mo, &m) || sl_model_summary(m, &text)) {
        sl_model_free(m);
        return sl__fail(prog);
    }
    printf("model %s\n%s", c.model, text);
    free(text);
    sl_model_free(m);
    return SL__EXIT_OK;
}
