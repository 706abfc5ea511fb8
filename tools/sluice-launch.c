/* sluice-launch: start N local replicas (and M parameter-server tasks) of a program, with
 * the environment that tells each who it is, and supervise them; or make CURVE keys.
 *
 *   sluice-launch -n N [--ps M] [--evaluator] [--restarts K] [--port-base P] [--host H]
 *                 [--timeout S] [--grace S] -- PROGRAM ARGS...
 *   sluice-launch --keygen PATH [--keygen PATH]...
 *
 * Each task gets (besides the launcher's own environment):
 *   TF_CONFIG         {"cluster": {"worker": [H:P, H:P+1, ...], "ps": [H:P+N, ...]},
 *                      "task": {"type": "worker"|"ps", "index": I}}  (TensorFlow's format,
 *                     which sl_cluster_resolve reads); the evaluator's (--evaluator) also
 *                     lists "evaluator": [H:P+N+M] and has the task type "evaluator"
 *   SLUICE_TASK       "worker 1" / "ps 0" / "evaluator 0"
 *   SLUICE_RANK       the ring rank (workers) or ps index; SLUICE_WORLD: N; SLUICE_NUM_PS: M
 *   SLUICE_PORT_BASE  P
 *   SLUICE_LOCAL_RANK the worker's index I on this host (workers only): sluice-train puts
 *                     each replica on GPU I % visible GPUs (sluice/cuda.h)
 *   SLUICE_JOB_ID     a random 64-bit id (16 hex digits), new for every launch and the
 *                     same for every task and restart of it: every message carries it,
 *                     so tasks left over from an earlier job on these ports (or any
 *                     other process) cannot end, stall or alter this one
 *                     (sluice/transport.h, "Job membership")
 *   SLUICE_RESTART    how many times this task was restarted: 0 at its first start, R for
 *                     restart R (like TorchElastic's restart count): a restarted ps task
 *                     continues from its shard checkpoints instead of starting a new run
 * Every line a task prints is copied to the launcher's stdout (or stderr, for the task's
 * stderr) with the prefix "[worker 1] "; the launcher's own notes go to stderr, starting
 * with "[launch] " ("[launch] started worker 1 (pid N)" for every start, restarts too).
 *
 * When a task fails (non-zero exit or a signal):
 *   - it is restarted, with the same environment, while it has restarts left (--restarts K,
 *     default 0, counted per task): "[launch] restarting worker 1 (restart 1 of K)";
 *   - else, in a job with ps tasks, a worker other than worker 0 (the chief) is let go:
 *     the ps tasks serve the others and training goes on without it, as TensorFlow's
 *     ParameterServerStrategy does;
 *   - else (a ring job's worker, the chief, a ps) the launcher stops all the others
 *     (SIGTERM to each task's process group, SIGKILL after the grace period) and exits with
 *     the failing task's status (128+signal for a signal).
 * A ring job succeeds when every worker succeeded. A ps job succeeds when worker 0 succeeded
 * and every other worker has exited; the ps tasks then get PS_LINGER_S seconds to return by
 * themselves (a ps returns once every worker said BYE, after its final shard checkpoint)
 * before they are stopped as above. SIGINT / SIGTERM sent to the launcher are forwarded to
 * every task's process group (nothing is restarted then; a second one is forwarded too, and
 * SIGKILL follows --grace S after the first): sluice-train replicas then stop together at
 * the next step boundary with a checkpoint and exit 128 + the signal, which is then the
 * launcher's status too, unless a task exits otherwise while stopping (a failed stop: its
 * status, with a note). A task that itself exits 130 or 143 (a normal exit with that
 * status: sluice-train stopped by a SIGINT / SIGTERM sent to it alone) stops the job the
 * same way without a second signal to anyone: it is not restarted, the others get --grace S
 * to stop by themselves (replicas that stop together stop at the same step as it did), then SIGTERM,
 * then SIGKILL after another --grace S; the launcher exits with its status. (A ps job's
 * worker other than worker 0 that stops so is let go, never restarted.) --timeout S
 * stops all after S seconds and exits 124.
 *
 * --evaluator starts one more task, "evaluator 0" (sluice-train runs it as the job's sidecar
 * evaluator, sluice/job.h): it is never restarted and never stops the others; the job waits
 * for it to end by itself (after the chief's final checkpoint) and is not stopped with the
 * ps tasks. When the job otherwise succeeds, an evaluator that failed makes the launcher
 * exit with its status ("[launch] evaluator 0 exited with status N: training goes on
 * without it" is noted when it happens).
 *
 * A thin supervisor: a handful of tasks, their output relayed line by line through one
 * ppoll loop. Exit status: a task's, 0, 124 (timeout), 1 (--keygen or start-up failed),
 * 2 (wrong usage). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sluice/cluster.h"
#include "sluice/transport.h"
#include "sluice/util.h"
#include "tool.h"

static const char *PROG = "sluice-launch";

/* Seconds the ps tasks get to return by themselves once the workers are done: enough for
 * a ps to notice the last BYE (or a lost worker) and write its final shard checkpoint. */
#define PS_LINGER_S 5.0

static const char USAGE[] =
    "Usage: sluice-launch -n N [--ps M] [--evaluator] [--restarts K] [--port-base P] [--timeout S] -- PROGRAM ARGS...\n"
    "       sluice-launch --keygen PATH [--keygen PATH]...\n"
    "\n"
    "Start N local replicas (workers) and M parameter-server tasks of PROGRAM, each told its\n"
    "place in the cluster through TF_CONFIG (and SLUICE_TASK, SLUICE_RANK, SLUICE_WORLD,\n"
    "SLUICE_NUM_PS, SLUICE_PORT_BASE, SLUICE_RESTART, SLUICE_JOB_ID). Their output is prefixed with \"[worker I] \" / \"[ps I] \";\n"
    "the launcher's own notes (\"[launch] started worker I (pid P)\", ...) go to stderr.\n"
    "A task that fails is restarted while it has restarts left (SLUICE_RESTART tells it\n"
    "which restart it is; a restarted ps continues from its shard checkpoints). Otherwise, with --ps, a worker\n"
    "other than worker 0 may fail and training goes on without it; any other failure stops\n"
    "all tasks and its exit status is returned.\n"
    "\n"
    "  -n, --workers N    replicas to start (1..256)\n"
    "  --ps M             parameter-server tasks (default 0)\n"
    "  --evaluator        one more task, \"evaluator 0\" (port P+N+M): it evaluates the chief's\n"
    "                     checkpoints; the job waits for it, and its failure is the exit status\n"
    "                     of a job that otherwise succeeded\n"
    "  --restarts K       restart a failed task (worker or ps) up to K times (default 0)\n"
    "  --port-base P      worker I listens on P+I, ps J on P+N+J (default 29500)\n"
    "  --host H           the address the tasks use for each other (default 127.0.0.1)\n"
    "  --timeout S        stop everything after S seconds and exit 124 (default: no limit)\n"
    "  --grace S          seconds between SIGTERM and SIGKILL when stopping (default 5)\n"
    "  --keygen PATH      write a new CURVE keypair to PATH.key and its public key to\n"
    "                     PATH.pub, print both paths and exit (repeatable; for the cluster\n"
    "                     block's `curve server=... client=... allow=...`)\n"
    "\n"
    "Exit status: that of the failure that stopped the job (128+N for signal N); 0 when\n"
    "every worker succeeded (with --ps: worker 0 succeeded and the others have exited);\n"
    "124 on --timeout; 1 --keygen failed; 2 wrong usage.\n";

typedef struct task {
    pid_t pid;          /* the running process; 0 once its exit was judged */
    char label[32];     /* "worker 1" / "ps 0" */
    int type_index;     /* I of worker I / ps I */
    char *tf_config;    /* its TF_CONFIG (owned), reused by restarts */
    int fd[2];          /* stdout, stderr pipes (-1 when closed) */
    char *line[2];      /* partial line per stream */
    size_t len[2], cap[2];
    bool running, is_ps, is_eval;
    int restarts;       /* restarts used */
    int status;         /* wait status once exited */
} task;

typedef struct job {
    long long nw, nps, port_base, restarts;
    int eval_code;      /* --evaluator: the evaluator's failure (exit status), 0: none */
    long long timeout, grace; /* --timeout (0: none) and --grace, seconds */
    char job_id[17];    /* SLUICE_JOB_ID: 16 hex digits, random per launch */
    char **prog;
    task *ts;
    int n;
    sigset_t empty;     /* the mask a child starts with */
    /* the event loop's decisions so far */
    double start;       /* when the tasks were started */
    double stop_at;     /* > 0: when SIGKILL follows the SIGTERM */
    double ps_until;    /* > 0: the workers are done; the ps tasks may linger until then; -1: they
                           were told to stop then (SIGKILL at ps_kill_at) */
    double ps_kill_at;  /* > 0: when SIGKILL follows the lingering ps tasks' SIGTERM */
    double term_at;     /* > 0: a task stopped on request; SIGTERM to the rest then */
    int result;         /* the exit status decided so far, -1 none */
    bool stopping;
    int fwd_sig;        /* the signal forwarded to every task (stopping for it) */
} job;

static volatile sig_atomic_t got_signal, got_child;
/* the child of the first SIGCHLD since the last wait: SIGCHLD is blocked outside ppoll and
 * does not queue, so when several tasks exit before the launcher runs, the one pending
 * signal carries the pid of the first to exit, the failure the others' may follow from */
static volatile sig_atomic_t first_child;

/* the task's type as TF_CONFIG names it */
static const char *task_type(const task *t) { return t->is_eval ? "evaluator" : t->is_ps ? "ps" : "worker"; }

static void on_signal(int sig) { got_signal = sig; }
static void on_child(int sig, siginfo_t *info, void *uctx) {
    (void)sig, (void)uctx;
    if (!first_child && info) first_child = (sig_atomic_t)info->si_pid;
    got_child = 1;
}

static void emit(task *t, int s, const char *p, size_t n) {
    FILE *out = s ? stderr : stdout;
    fprintf(out, "[%s] ", t->label);
    fwrite(p, 1, n, out);
    fputc('\n', out);
    fflush(out);
}

/* Read what is available on stream s of t; print complete lines; flush the rest at EOF.
 * Returns true while more may come without blocking (a full buffer was read). */
static bool drain(task *t, int s) {
    char buf[65536];
    ssize_t r = read(t->fd[s], buf, sizeof buf);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) return false;
    if (r <= 0) {
        if (t->len[s]) emit(t, s, t->line[s], t->len[s]);
        t->len[s] = 0;
        close(t->fd[s]);
        t->fd[s] = -1;
        return false;
    }
    for (ssize_t i = 0; i < r; i++) {
        if (buf[i] == '\n') {
            emit(t, s, t->line[s] ? t->line[s] : "", t->len[s]);
            t->len[s] = 0;
            continue;
        }
        if (t->len[s] == t->cap[s]) {
            size_t nc = t->cap[s] ? t->cap[s] * 2 : 256;
            char *nl = realloc(t->line[s], nc);
            if (!nl) continue; /* drop the byte rather than die */
            t->line[s] = nl;
            t->cap[s] = nc;
        }
        t->line[s][t->len[s]++] = buf[i];
    }
    return r == (ssize_t)sizeof buf;
}

/* Before a restart: relay everything the exited process left in its pipes (it is dead, so
 * all it wrote is there), flush partial lines and close them, so the new process's output
 * never mixes with the old one's. Output of stray grandchildren after this is dropped. */
static void drain_dead(task *t) {
    for (int s = 0; s < 2; s++) {
        if (t->fd[s] < 0) continue;
        while (t->fd[s] >= 0 && drain(t, s)) {}
        if (t->fd[s] >= 0) {
            if (t->len[s]) emit(t, s, t->line[s], t->len[s]);
            t->len[s] = 0;
            close(t->fd[s]);
            t->fd[s] = -1;
        }
    }
}

static void signal_all(task *ts, int n, int sig) {
    for (int i = 0; i < n; i++)
        if (ts[i].running) kill(-ts[i].pid, sig);
}

static void reap(task *ts, int n) {
    for (;;) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p <= 0) break;
        for (int i = 0; i < n; i++)
            if (ts[i].pid == p && ts[i].running) {
                ts[i].running = false;
                ts[i].status = st;
            }
    }
}

static int exit_code(int st) {
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return 1;
}

/* "status 3" or "status 137 (signal 9)" */
static const char *status_text(int st, char *buf, size_t cap) {
    if (WIFSIGNALED(st)) snprintf(buf, cap, "status %d (signal %d)", exit_code(st), WTERMSIG(st));
    else snprintf(buf, cap, "status %d", exit_code(st));
    return buf;
}

/* Start (or restart) task t of job j: pipes, fork, the task's environment, exec. Returns 0,
 * or -1 with a message on stderr (pipe or fork failed). */
static int spawn(job *j, task *t) {
    int out[2], err[2];
    if (pipe(out)) { perror(PROG); return -1; }
    if (pipe(err)) { perror(PROG); close(out[0]); close(out[1]); return -1; }
    pid_t p = fork();
    if (p < 0) {
        perror(PROG);
        close(out[0]); close(out[1]); close(err[0]); close(err[1]);
        return -1;
    }
    if (p == 0) {
        setpgid(0, 0);
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(out[0]); close(out[1]); close(err[0]); close(err[1]);
        for (int k = 0; k < j->n; k++)
            for (int s = 0; s < 2; s++)
                if (j->ts[k].fd[s] >= 0) close(j->ts[k].fd[s]);
        char v[64];
        setenv("TF_CONFIG", t->tf_config, 1);
        setenv("SLUICE_TASK", t->label, 1);
        if (!t->is_ps && !t->is_eval) {
            snprintf(v, sizeof v, "%d", t->type_index);
            setenv("SLUICE_LOCAL_RANK", v, 1); /* every worker of a launch is on this host */
        } else {
            unsetenv("SLUICE_LOCAL_RANK");
        }
        snprintf(v, sizeof v, "%d", t->type_index);
        setenv("SLUICE_RANK", v, 1);
        snprintf(v, sizeof v, "%lld", j->nw);
        setenv("SLUICE_WORLD", v, 1);
        snprintf(v, sizeof v, "%lld", j->nps);
        setenv("SLUICE_NUM_PS", v, 1);
        snprintf(v, sizeof v, "%lld", j->port_base);
        setenv("SLUICE_PORT_BASE", v, 1);
        snprintf(v, sizeof v, "%d", t->restarts);
        setenv("SLUICE_RESTART", v, 1);
        setenv("SLUICE_JOB_ID", j->job_id, 1);
        signal(SIGPIPE, SIG_DFL);
        struct sigaction dfl = {0};
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGINT, &dfl, NULL);
        sigaction(SIGTERM, &dfl, NULL);
        sigaction(SIGCHLD, &dfl, NULL);
        sigprocmask(SIG_SETMASK, &j->empty, NULL);
        execvp(j->prog[0], j->prog);
        fprintf(stderr, "%s: cannot run %s: %s\n", PROG, j->prog[0], strerror(errno));
        _exit(127);
    }
    setpgid(p, p); /* also here, so a signal sent right away reaches the group */
    close(out[1]);
    close(err[1]);
    t->pid = p;
    t->running = true;
    t->fd[0] = out[0];
    t->fd[1] = err[0];
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    fprintf(stderr, "[launch] started %s (pid %d)\n", t->label, (int)p);
    fflush(stderr);
    return 0;
}

static int keygen(const char **paths, int n) {
    for (int i = 0; i < n; i++) {
        if (!paths[i][0]) return sl__usage_error(PROG, "--keygen needs a path");
        if (sl_curve_keygen(paths[i])) return sl__failf(PROG, "--keygen %s", paths[i]);
        printf("%s.key\n%s.pub\n", paths[i], paths[i]);
    }
    fflush(stdout);
    return SL__EXIT_OK;
}

/* Addresses host:port_base+i for the n tasks (workers first) and each task's TF_CONFIG
 * into *addr_out and *ts_out; 0, or the exit status (printed). */
static int setup_tasks(const char *host, long long port_base, long long nw, long long nps, bool eval,
                       char ***addr_out, task **ts_out) {
    int n = (int)(nw + nps) + eval;
    char **addr = calloc((size_t)n, sizeof *addr);
    task *ts = calloc((size_t)n, sizeof *ts);
    *addr_out = addr;
    *ts_out = ts;
    if (!addr || !ts) { fprintf(stderr, "%s: out of memory\n", PROG); return SL__EXIT_FAIL; }
    for (int i = 0; i < n; i++) {
        if (asprintf(&addr[i], "%s:%lld", host, port_base + i) < 0) return SL__EXIT_FAIL;
        ts[i].is_eval = eval && i == n - 1;
        ts[i].is_ps = i >= nw && !ts[i].is_eval;
        ts[i].type_index = ts[i].is_ps ? (int)(i - nw) : ts[i].is_eval ? 0 : i;
        snprintf(ts[i].label, sizeof ts[i].label, "%s %d", task_type(&ts[i]), ts[i].type_index);
        ts[i].fd[0] = ts[i].fd[1] = -1;
    }
    for (int i = 0; i < n; i++) {
        char tfc[16384];
        int need = sl_cluster_tf_config(tfc, sizeof tfc, (const char *const *)addr, (int)nw,
                                        (const char *const *)addr + nw, (int)nps, task_type(&ts[i]),
                                        ts[i].type_index);
        if (ts[i].is_eval && need > 0 && (size_t)need < sizeof tfc) {
            /* the evaluator's own list (its task index must be in one), first in its cluster
             * object: {"cluster": {"evaluator": ["H:P"], "worker": ...} */
            static const char head[] = "{\"cluster\": {";
            char base[sizeof tfc];
            memcpy(base, tfc, (size_t)need + 1);
            need = snprintf(tfc, sizeof tfc, "%s\"evaluator\": [\"%s\"], %s", head, addr[i], base + strlen(head));
        }
        if (need < 0 || (size_t)need >= sizeof tfc) { fprintf(stderr, "%s: cluster too large for TF_CONFIG\n", PROG); return SL__EXIT_FAIL; }
        if (!(ts[i].tf_config = strdup(tfc))) { fprintf(stderr, "%s: out of memory\n", PROG); return SL__EXIT_FAIL; }
    }
    return 0;
}

/* SIGINT, SIGTERM and SIGCHLD blocked except inside ppoll (j->empty), their handlers set */
static void setup_signals(job *j) {
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGCHLD);
    sigprocmask(SIG_BLOCK, &block, NULL);
    sigemptyset(&j->empty);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = NULL;
    sa.sa_sigaction = on_child;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* What a task that exited (status tk->status; pid `old`) means for the job: nothing, a
 * restart, a stop on request, or a failure that stops the others. */
static void judge_exit(job *j, task *tk, pid_t old) {
    task *ts = j->ts;
    int n = j->n;
    long long nps = j->nps, grace = j->grace, restarts = j->restarts;
    int code = exit_code(tk->status);
    if (j->fwd_sig && j->result == 128 + j->fwd_sig && code != 0 && code != 128 + SIGINT && code != 128 + SIGTERM &&
        code != 128 + SIGKILL) {
        /* the tasks stop with 128 + the signal; anything else is a stop that failed */
        char why[64];
        fprintf(stderr, "[launch] %s exited with %s while stopping\n", tk->label, status_text(tk->status, why, sizeof why));
        j->result = code;
    }
    if (code == 0 || j->stopping) return;
    if (tk->is_ps && j->ps_until != 0) { /* the workers are done: training is over */
        char why[64];
        status_text(tk->status, why, sizeof why);
        if (WIFEXITED(tk->status) && code < 128) { /* its own failure (its last shard not saved): the job's */
            fprintf(stderr, "[launch] %s exited with %s after the workers finished: the job fails with it\n",
                    tk->label, why);
            if (j->result == 0) j->result = code;
            return;
        }
        fprintf(stderr, "[launch] %s exited with %s after the workers finished\n", tk->label, why);
        return;
    }
    if (tk->is_eval) { /* a sidecar: training goes on, its status is kept for the end */
        char why[64];
        fprintf(stderr, "[launch] %s exited with %s: training goes on without it\n", tk->label,
                status_text(tk->status, why, sizeof why));
        j->eval_code = code;
        return;
    }
    if (WIFEXITED(tk->status) && (code == 128 + SIGINT || code == 128 + SIGTERM)) {
        if (nps > 0 && !tk->is_ps && tk->type_index != 0) {
            /* a ps worker other than the chief: the others train on (never restarted) */
            fprintf(stderr, "[launch] %s stopped on request (status %d): training goes on without it\n", tk->label,
                    code);
            return;
        }
        /* stopped on request at a step boundary: the job stops; replicas that stop together
         * are stopping at the same step already, the others get the grace period */
        fprintf(stderr, "[launch] %s stopped on request (status %d): stopping the job; the others get %lld s "
                "to stop by themselves\n", tk->label, code, grace);
        j->result = code;
        j->fwd_sig = code - 128;
        j->stopping = true;
        j->term_at = sl_now_s() + (double)grace;
        return;
    }
    char why[64];
    status_text(tk->status, why, sizeof why);
    if (tk->restarts < restarts) {
        tk->restarts++;
        fprintf(stderr, "[launch] %s exited with %s\n[launch] restarting %s (restart %d of %lld)\n", tk->label, why,
                tk->label, tk->restarts, restarts);
        drain_dead(tk);
        kill(-old, SIGKILL); /* strays of the old process group would hold its port */
        if (spawn(j, tk) == 0) return;
        /* could not restart (the message is out): stop as for a failure */
    } else if (nps > 0 && !tk->is_ps && tk->type_index != 0) {
        fprintf(stderr, "[launch] %s exited with %s: training goes on without it\n", tk->label, why);
        return;
    }
    fprintf(stderr, "%s: %s %s with status %d; stopping the others\n", PROG, tk->label,
            WIFSIGNALED(tk->status) ? "was killed" : "exited", code);
    j->result = code;
    j->stopping = true;
    j->stop_at = sl_now_s() + (double)grace;
    signal_all(ts, n, SIGTERM);
}

/* After SIGCHLD: judge every task that exited; once every worker is done (the chief fine),
 * the ps tasks get PS_LINGER_S to finish by themselves. */
/* Judge the exited tasks in [from, to). */
static void judge_task(job *j, task *tk) {
    if (tk->running || tk->pid == 0) return;
    pid_t old = tk->pid;
    tk->pid = 0; /* judged */
    judge_exit(j, tk, old);
}

/* The task that exited first (first_child) is judged before the others of the same wait:
 * a replica that failed is the job's status, not a peer that failed because it died. */
static void judge_range(job *j, int from, int to) {
    for (int i = from; i < to; i++)
        if (j->ts[i].pid == (pid_t)first_child) judge_task(j, &j->ts[i]);
    for (int i = from; i < to; i++) judge_task(j, &j->ts[i]);
}

/* The workers' exits are judged first, then whether the workers are done, then the ps tasks
 * and evaluators: a ps that fails in the same wait as the last worker ends is judged knowing
 * the training is over, whatever order the kernel reported them in. */
static void on_children(job *j) {
    reap(j->ts, j->n);
    judge_range(j, 0, (int)j->nw);
    if (!j->stopping && j->nps > 0 && j->ps_until == 0) {
        bool workers_left = false, any_ps = false;
        for (int i = 0; i < j->nw; i++) workers_left |= j->ts[i].running;
        for (int i = (int)j->nw; i < j->nw + j->nps; i++) any_ps |= j->ts[i].running || j->ts[i].pid != 0;
        if (!workers_left) {
            j->result = 0;
            if (any_ps) j->ps_until = sl_now_s() + PS_LINGER_S;
        }
    }
    judge_range(j, (int)j->nw, j->n);
    first_child = 0;
}

/* The deadlines at time t: --timeout, the ps tasks' linger, the SIGTERM after a stop on
 * request, the SIGKILL after the grace period. */
static void on_deadlines(job *j, double t) {
    /* (once the workers are done, the ps tasks' linger is bounded: no timeout then) */
    if (j->timeout && !j->stopping && j->ps_until == 0 && t - j->start >= (double)j->timeout) {
        fprintf(stderr, "%s: --timeout %lld s reached; stopping every task\n", PROG, j->timeout);
        j->result = 124;
        j->stopping = true;
        j->stop_at = t + (double)j->grace;
        signal_all(j->ts, j->n, SIGTERM);
    }
    task *ps = j->ts + j->nw;
    int nps = (int)j->nps;
    if (j->ps_until > 0 && !j->stopping && t >= j->ps_until) { /* the ps tasks did not return by themselves */
        for (int i = 0; i < nps; i++)
            if (ps[i].running)
                fprintf(stderr, "[launch] %s still runs %.0f s after the workers finished: stopping it\n", ps[i].label,
                        PS_LINGER_S);
        /* only the ps tasks: an evaluator still evaluates the final checkpoint */
        j->ps_until = -1;
        j->ps_kill_at = t + (double)j->grace;
        signal_all(ps, nps, SIGTERM);
    }
    if (j->ps_kill_at > 0 && t >= j->ps_kill_at) {
        signal_all(ps, nps, SIGKILL);
        j->ps_kill_at = 0;
    }
    if (j->term_at > 0 && t >= j->term_at) {
        signal_all(j->ts, j->n, SIGTERM);
        j->term_at = 0;
        j->stop_at = t + (double)j->grace;
    }
    if (j->stopping && j->stop_at > 0 && t >= j->stop_at) {
        signal_all(j->ts, j->n, SIGKILL);
        j->stop_at = 0;
    }
}

/* One wait for output, a child or a signal (until the next deadline); false when every
 * task has exited and every pipe is drained. */
static bool poll_once(job *j) {
    struct pollfd pf[2 * 512 + 1];
    task *owner[2 * 512];
    int which[2 * 512], np = 0, running = 0;
    for (int i = 0; i < j->n; i++) {
        if (j->ts[i].running) running++;
        for (int s = 0; s < 2; s++)
            if (j->ts[i].fd[s] >= 0 && np < 2 * 512) {
                pf[np] = (struct pollfd){.fd = j->ts[i].fd[s], .events = POLLIN};
                owner[np] = &j->ts[i];
                which[np++] = s;
            }
    }
    if (running == 0 && np == 0) return false;
    double wait = 1.0, t = sl_now_s();
    if (j->stopping && j->stop_at > t && j->stop_at - t < wait) wait = j->stop_at - t;
    if (j->term_at > t && j->term_at - t < wait) wait = j->term_at - t;
    if (j->timeout && !j->stopping && j->ps_until == 0 && j->start + (double)j->timeout - t < wait)
        wait = j->start + (double)j->timeout - t;
    if (j->ps_until > 0 && !j->stopping && j->ps_until - t < wait) wait = j->ps_until - t;
    if (j->ps_kill_at > t && j->ps_kill_at - t < wait) wait = j->ps_kill_at - t;
    if (wait < 0) wait = 0;
    struct timespec tw = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
    int rc = ppoll(pf, (nfds_t)np, &tw, &j->empty);
    if (rc > 0)
        for (int k = 0; k < np; k++)
            if (pf[k].revents) drain(owner[k], which[k]);
    return true;
}

int main(int argc, char **argv) {
    sl__tool_start();
    if (sl__tool_version(PROG, argc, argv)) return sl__tool_exit(PROG, SL__EXIT_OK);
    long long nw = 0, nps = 0, port_base = 29500, timeout = 0, grace = 5, restarts = 0;
    bool eval = false;
    const char *host = "127.0.0.1";
    const char **keys = calloc((size_t)argc + 1, sizeof *keys);
    if (!keys) { fprintf(stderr, "%s: out of memory\n", PROG); return SL__EXIT_FAIL; }
    int nkeys = 0, nargs = 0;
    int krc = sl__take_repeated(PROG, "keygen", argc - 1, argv + 1, keys, &nkeys, &nargs);
    if (krc >= 0) { free(keys); return krc; }
    sl__opt opts[] = {
        {"workers", 'n', SL__OPT_INT, &nw, 1, 256},
        {"ps", 0, SL__OPT_INT, &nps, 0, 256},
        {"evaluator", 0, SL__OPT_FLAG, &eval, 0, 0},
        {"restarts", 0, SL__OPT_INT, &restarts, 0, 1000000},
        {"port-base", 0, SL__OPT_INT, &port_base, 1, 65535},
        {"host", 0, SL__OPT_STR, &host, 0, 0},
        {"timeout", 0, SL__OPT_INT, &timeout, 0, 1000000},
        {"grace", 0, SL__OPT_INT, &grace, 0, 3600},
        {NULL, 0, 0, NULL, 0, 0},
    };
    int npos = 0;
    switch (sl__args_parse(PROG, opts, nargs, argv + 1, &npos)) {
    case SL__ARGS_HELP: free(keys); fputs(USAGE, stdout); return sl__tool_exit(PROG, SL__EXIT_OK);
    case SL__ARGS_ERROR: free(keys); return SL__EXIT_USAGE;
    default: break;
    }
    if (nkeys > 0) {
        int rc = nw || npos ? sl__usage_error(PROG, "--keygen makes keys and exits: run the job without it")
                            : keygen(keys, nkeys);
        free(keys);
        return rc;
    }
    free(keys);
    char **prog = argv + 1;
    if (nw < 1) return sl__usage_error(PROG, "missing -n N (how many replicas)");
    if (npos == 0) return sl__usage_error(PROG, "missing the program to run (after --)");
    int n = (int)(nw + nps) + eval;
    if (port_base + n - 1 > 65535) return sl__usage_error(PROG, "ports %lld..%lld pass 65535", port_base, port_base + n - 1);
    prog[npos] = NULL;
    char **addr = NULL;
    task *ts = NULL;
    int rc = setup_tasks(host, port_base, nw, nps, eval, &addr, &ts);
    if (rc) return rc;
    job j = {.nw = nw, .nps = nps, .port_base = port_base, .restarts = restarts, .timeout = timeout, .grace = grace,
             .prog = prog, .ts = ts, .n = n, .result = -1};
    uint64_t job_id;
    if (sl_tp_random_u64(&job_id)) {
        fprintf(stderr, "%s: %s\n", PROG, sl_errmsg());
        return SL__EXIT_FAIL;
    }
    snprintf(j.job_id, sizeof j.job_id, "%016llx", (unsigned long long)job_id);
    setup_signals(&j);
    for (int i = 0; i < n; i++)
        if (spawn(&j, &ts[i])) { signal_all(ts, n, SIGKILL); return SL__EXIT_FAIL; }
    j.start = sl_now_s();
    while (poll_once(&j)) {
        if (got_child) {
            got_child = 0;
            on_children(&j);
        }
        if (got_signal) {
            int sig = got_signal;
            got_signal = 0;
            if (!j.stopping) {
                fprintf(stderr, "%s: got signal %d; passing it to every task\n", PROG, sig);
                j.result = 128 + sig;
                j.fwd_sig = sig;
                j.stopping = true;
                j.stop_at = sl_now_s() + (double)grace;
            }
            signal_all(ts, n, sig);
        }
        on_deadlines(&j, sl_now_s());
    }
    for (int i = 0; i < n; i++) {
        free(addr[i]);
        free(ts[i].tf_config);
        free(ts[i].line[0]);
        free(ts[i].line[1]);
    }
    free(addr);
    free(ts);
    /* the job's own failure first; else the evaluator's */
    return sl__tool_exit(PROG, j.result > 0 ? j.result : j.eval_code);
}
