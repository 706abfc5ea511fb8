/* Benchmark: training throughput of the parameter-server strategy against the ring, on the
 * same model in the same run: 2 workers train Fashion-MNIST's MLP (examples/fashion_mlp.sl:
 * 784-256-128-10, global batch 128, SGD momentum 0.9, CPU backend, 1 thread per task)
 * under `strategy ring`, under `strategy ps` with 1 ps task and with 2 ps tasks.
 *
 * Usage: bench_ps [EPOCHS=6]   (EPOCHS >= 2)
 * Each setting is one `sluice-launch -n 2 [--ps P] -- sluice-train CONFIG` run (fork/exec;
 * the tools come from the bin/ folder beside this benchmark's folder, i.e. build-bench/bin,
 * or SLUICE_BIN): this program builds nothing, so build the tools first:
 *     cmake --build build-bench --target sluice-launch sluice-train sluice-record
 * The config is the example's model, pipeline and optimizer, written to a temp folder with
 * `epochs EPOCHS`, no evaluation and no checkpoints, so that nothing but training runs.
 *
 * Timing: from the chief's epoch lines, which give examples/s over the epoch's training
 * steps only (sluice/train.h: from the first batch to the last exchange, times the number
 * of workers). Epoch 1 is warm-up (process start, the ps join, pipeline buffers filling);
 * epochs 2..EPOCHS are timed, and their rates are combined as total examples over total
 * time (the harmonic mean: every epoch has the same examples). steps/s = examples/s / 128,
 * the global batch: one ring step is one synchronous step of both workers; in a ps job,
 * where each worker pushes its half-batch gradient on its own, two pushes make one step.
 * In a ps job the chief's rate stands for both workers (they read equal shards and share
 * the ps, so they keep the same pace; each run's wall time is printed as a check).
 *
 * Data: data/fashion/ of the source tree when `bash scripts/main.sh` made it, else
 * /tmp/sluice-bench/fashion (converted there with sluice-record when missing). Ends with:
 *   RESULT bench_ps ratio=R sluice=X anchor=Y unit=steps/s
 * where X is the better ps setting's steps/s, Y the ring's, R = X / Y. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/bench/bench_fashion.h"

#ifndef SLUICE_SRC_DIR
#define SLUICE_SRC_DIR "."
#endif

#define WORK BENCH_WORK
#define BATCH 128
#define WORKERS 2

static int executable(const char *dir, const char *tool) {
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, tool);
    return access(p, X_OK) == 0;
}

/* Run argv with stdout to `out` (NULL: inherit) and stderr to the file `err`; call on_line
 * for every stdout line when out is NULL and on_line is set. Returns the exit status (128+N
 * for signal N), or -1 when it could not start. */
typedef void (*line_fn)(void *ctx, const char *line);
static int run(char *const *argv, const char *err, line_fn on_line, void *ctx) {
    int pfd[2];
    if (pipe(pfd)) return -1;
    pid_t p = fork();
    if (p < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (p == 0) {
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (e >= 0) dup2(e, 2);
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        execv(argv[0], argv);
        fprintf(stderr, "bench_ps: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    FILE *f = fdopen(pfd[0], "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f))
        if (on_line) on_line(ctx, line);
    if (f) fclose(f);
    else close(pfd[0]);
    int st;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
}

static void show_tail(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[4096], keep[12][4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) snprintf(keep[n++ % 12], sizeof keep[0], "%s", line);
    fclose(f);
    for (int i = n > 12 ? n - 12 : 0; i < n; i++) fprintf(stderr, "    %s", keep[i % 12]);
}

typedef struct epochs_seen {
    int timed;           /* epochs after the first */
    double secs;         /* their summed time: examples / rate */
    double last_accuracy;
} epochs_seen;

/* "[worker 0] epoch K/E  step S  loss L  accuracy A  top5 T  R examples/s ..." (top5 only
 * with more than 5 classes) */
static void on_line(void *ctx, const char *line) {
    epochs_seen *e = ctx;
    int k, total, at = 0, more = 0;
    long long step;
    double loss, acc, top5, rate;
    if (sscanf(line, "[worker 0] epoch %d/%d  step %lld  loss %lf  accuracy %lf%n", &k, &total, &step, &loss, &acc,
               &at) != 5)
        return;
    if (sscanf(line + at, "  top5 %lf%n", &top5, &more) == 1) at += more;
    if (sscanf(line + at, "  %lf examples/s", &rate) != 1) return;
    e->last_accuracy = acc;
    if (k >= 2 && rate > 0) {
        e->timed++;
        e->secs += 1.0 / rate; /* per example: the epochs have equal examples */
    }
}

typedef struct setting {
    const char *name;
    const char *strategy;
    int nps;
    double steps_s, examples_s, wall_s, accuracy;
} setting;

static int run_setting(const char *bin, const char *cfg, const char *tmp, int port, int epochs, setting *s) {
    char launch[PATH_MAX + 64], train[PATH_MAX + 64], nps[16], pb[16], strategy[64], rundir[PATH_MAX], err[PATH_MAX];
    snprintf(launch, sizeof launch, "%s/sluice-launch", bin);
    snprintf(train, sizeof train, "%s/sluice-train", bin);
    snprintf(nps, sizeof nps, "%d", s->nps);
    snprintf(pb, sizeof pb, "%d", port);
    snprintf(strategy, sizeof strategy, "train.strategy=%s", s->strategy);
    snprintf(rundir, sizeof rundir, "%s/run-%s-%d", tmp, s->strategy, s->nps);
    snprintf(err, sizeof err, "%s/%s-%d.err", tmp, s->strategy, s->nps);
    char *argv[] = {launch, "-n", "2", "--ps", nps, "--port-base", pb, "--", train, (char *)cfg, "--set", strategy,
                    "--run-dir", rundir, NULL};
    epochs_seen e = {0};
    double t0 = bench_now();
    int rc = run(argv, err, on_line, &e);
    s->wall_s = bench_now() - t0;
    if (rc != 0 || e.timed != epochs - 1) {
        fprintf(stderr, "bench_ps: %s: sluice-launch exit %d, %d timed epochs (expected %d); its stderr:\n", s->name, rc,
                e.timed, epochs - 1);
        show_tail(err);
        return 1;
    }
    s->examples_s = e.timed / e.secs;
    s->steps_s = s->examples_s / BATCH;
    s->accuracy = e.last_accuracy;
    return 0;
}

int main(int argc, char **argv) {
    int epochs = argc > 1 ? atoi(argv[1]) : 6;
    if (epochs < 2 || argc > 2) {
        fprintf(stderr, "usage: bench_ps [EPOCHS=6]   (at least 2: the first is warm-up)\n");
        return 2;
    }
    /* the tools: SLUICE_BIN, else ../bin beside this program's folder */
    char bin[PATH_MAX];
    const char *env_bin = getenv("SLUICE_BIN");
    if (env_bin) {
        snprintf(bin, sizeof bin, "%s", env_bin);
    } else {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) {
            fprintf(stderr, "bench_ps: cannot find this program's folder\n");
            return 1;
        }
        self[n] = 0;
        snprintf(bin, sizeof bin, "%s/../bin", dirname(self));
    }
    const char *tools[] = {"sluice-launch", "sluice-train"};
    for (int i = 0; i < 2; i++)
        if (!executable(bin, tools[i])) {
            fprintf(stderr,
                    "bench_ps: %s/%s is not built: this benchmark runs the tools of its build folder,\n"
                    "    cmake --build build-bench --target sluice-launch sluice-train sluice-record\n"
                    "(or set SLUICE_BIN to a folder that has them)\n",
                    bin, tools[i]);
            return 1;
        }

    char data[PATH_MAX], pat[PATH_MAX + 32];
    snprintf(data, sizeof data, "%s/data/fashion", SLUICE_SRC_DIR);
    snprintf(pat, sizeof pat, "%s/train-*-of-00008.tfrecord", data);
    if (bench_have(pat) != 8) {
        snprintf(data, sizeof data, "%s/fashion", WORK);
        snprintf(pat, sizeof pat, "%s/train-*-of-00008.tfrecord", data);
        if (bench_have(pat) != 8) {
            char rec[PATH_MAX + 64];
            snprintf(rec, sizeof rec, "%s/sluice-record", bin);
            char *cv[] = {rec, "convert", "fashion-mnist", data, "--shards", "8", NULL};
            mkdir(WORK, 0777);
            fprintf(stderr, "bench_ps: converting Fashion-MNIST into %s\n", data);
            if (!executable(bin, "sluice-record") || run(cv, "/dev/null", NULL, NULL) != 0 || bench_have(pat) != 8) {
                fprintf(stderr, "bench_ps: no data: run `bash scripts/main.sh` or build sluice-record\n");
                return 1;
            }
        }
    }

    mkdir(WORK, 0777);
    char tmp[] = WORK "/ps-XXXXXX";
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "bench_ps: mkdtemp %s: %s\n", tmp, strerror(errno));
        return 1;
    }
    char cfg[PATH_MAX];
    snprintf(cfg, sizeof cfg, "%s/mlp.sl", tmp);
    FILE *f = fopen(cfg, "w");
    if (!f) {
        fprintf(stderr, "bench_ps: cannot write %s: %s\n", cfg, strerror(errno));
        return 1;
    }
    char pipe[1024];
    bench_fashion_pipeline(pipe, sizeof pipe, data, BATCH, true);
    fprintf(f,
            "%s"
            "model mlp {\n    input 28x28x1\n    flatten\n    dense 256 activation=relu\n"
            "    dense 128 activation=relu\n    dense 10\n}\n"
            "train {\n    model mlp\n    data train\n    epochs %d\n    optimizer sgd lr=0.05 momentum=0.9\n"
            "    schedule cosine\n    backend cpu\n    threads 1\n    seed 1\n    strategy none\n}\n",
            pipe, epochs);
    if (fclose(f)) {
        fprintf(stderr, "bench_ps: cannot write %s\n", cfg);
        return 1;
    }

    setting set[3] = {
        {.name = "ring", .strategy = "ring", .nps = 0},
        {.name = "ps, 1 ps task", .strategy = "ps", .nps = 1},
        {.name = "ps, 2 ps tasks", .strategy = "ps", .nps = 2},
    };
    /* below Linux's ephemeral ports (32768..60999), which other connections take */
    int port = 21000 + (int)(getpid() % 110) * 100;
    printf("bench_ps: fashion MLP 784-256-128-10, %d workers, global batch %d, CPU backend, 1 thread per task;\n"
           "  %d epochs, epochs 2..%d timed from the chief's epoch lines; data %s\n",
           WORKERS, BATCH, epochs, epochs, data);
    fflush(stdout);
    int rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++) {
        if (run_setting(bin, cfg, tmp, port + 10 * i, epochs, &set[i])) {
            rc = 1;
            break;
        }
        printf("  %-15s %7.1f steps/s  (%6.0f examples/s; wall %.1f s; train accuracy %.4f)\n", set[i].name,
               set[i].steps_s, set[i].examples_s, set[i].wall_s, set[i].accuracy);
        fflush(stdout);
    }
    if (rc == 0) {
        int best = set[1].steps_s >= set[2].steps_s ? 1 : 2;
        double ratio = set[best].steps_s / set[0].steps_s;
        printf("ps / ring: 1 ps %.2f, 2 ps %.2f (the better: %s)\n", set[1].steps_s / set[0].steps_s,
               set[2].steps_s / set[0].steps_s, set[best].name);
        printf("RESULT bench_ps ratio=%.2f sluice=%.1f anchor=%.1f unit=steps/s\n", ratio, set[best].steps_s,
               set[0].steps_s);
    }
    /* the temp folder: configs, run folders, each run's stderr */
    char *rm[] = {"/bin/rm", "-rf", tmp, NULL};
    if (rc == 0) run(rm, "/dev/null", NULL, NULL);
    else fprintf(stderr, "bench_ps: kept %s\n", tmp);
    return rc;
}
