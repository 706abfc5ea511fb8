/* sluice-launch: start N local replicas (and M parameter-server tasks) of a program, with
 * the environment that tells each who it is, and supervise them.
 *
 *   sluice-launch -n N [--ps M] [--port-base P] [--host H] [--timeout S] [--grace S]
 *                 -- PROGRAM ARGS...
 *
 * Each task gets (besides the launcher's own environment):
 *   TF_CONFIG         {"cluster": {"worker": [H:P, H:P+1, ...], "ps": [H:P+N, ...]},
 *                      "task": {"type": "worker"|"ps", "index": I}}  (TensorFlow's format,
 *                     which sl_cluster_resolve reads)
 *   SLUICE_TASK       "worker 1" / "ps 0"
 *   SLUICE_RANK       the ring rank (workers) or ps index; SLUICE_WORLD: N; SLUICE_NUM_PS: M
 *   SLUICE_PORT_BASE  P
 * Every line a task prints is copied to the launcher's stdout (or stderr, for the task's
 * stderr) with the prefix "[worker 1] ". When a task fails (non-zero exit or a signal) the
 * launcher stops all the others (SIGTERM to each task's process group, SIGKILL after the
 * grace period) and exits with the failing task's status (128+signal for a signal). When
 * every worker has succeeded the ps tasks are stopped the same way and the launcher exits 0.
 * SIGINT / SIGTERM sent to the launcher are forwarded to every task; --timeout S stops all
 * after S seconds and exits 124.
 *
 * A thin supervisor: a handful of tasks, their output relayed line by line through one
 * ppoll loop. Exit status: a task's, 0, 124 (timeout), 2 (wrong usage). */
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
#include "tool.h"

static const char *PROG = "sluice-launch";

static const char USAGE[] =
    "Usage: sluice-launch -n N [--ps M] [--port-base P] [--timeout S] -- PROGRAM ARGS...\n"
    "\n"
    "Start N local replicas (workers) and M parameter-server tasks of PROGRAM, each told its\n"
    "place in the cluster through TF_CONFIG (and SLUICE_TASK, SLUICE_RANK, SLUICE_WORLD,\n"
    "SLUICE_NUM_PS, SLUICE_PORT_BASE). Their output is prefixed with \"[worker I] \" / \"[ps I] \".\n"
    "When one fails, all others are stopped and its exit status is returned.\n"
    "\n"
    "  -n, --workers N    replicas to start (1..256)\n"
    "  --ps M             parameter-server tasks (default 0)\n"
    "  --port-base P      worker I listens on P+I, ps J on P+N+J (default 29500)\n"
    "  --host H           the address the tasks use for each other (default 127.0.0.1)\n"
    "  --timeout S        stop everything after S seconds and exit 124 (default: no limit)\n"
    "  --grace S          seconds between SIGTERM and SIGKILL when stopping (default 5)\n"
    "\n"
    "Exit status: the first failing task's (128+N for signal N), 0 when every worker\n"
    "succeeded, 124 on --timeout, 2 wrong usage.\n";

typedef struct task {
    pid_t pid;
    char label[32];
    int fd[2];          /* stdout, stderr pipes (-1 when closed) */
    char *line[2];      /* partial line per stream */
    size_t len[2], cap[2];
    bool running, is_ps;
    int status;         /* wait status once exited */
} task;

static volatile sig_atomic_t got_signal, got_child;

static void on_signal(int sig) { got_signal = sig; }
static void on_child(int sig) { (void)sig; got_child = 1; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void emit(task *t, int s, const char *p, size_t n) {
    FILE *out = s ? stderr : stdout;
    fprintf(out, "[%s] ", t->label);
    fwrite(p, 1, n, out);
    fputc('\n', out);
    fflush(out);
}

/* Read what is available on stream s of t; print complete lines; flush the rest at EOF. */
static void drain(task *t, int s) {
    char buf[65536];
    ssize_t r = read(t->fd[s], buf, sizeof buf);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (r <= 0) {
        if (t->len[s]) emit(t, s, t->line[s], t->len[s]);
        t->len[s] = 0;
        close(t->fd[s]);
        t->fd[s] = -1;
        return;
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
}

static void signal_all(task *ts, int n, int sig) {
    for (int i = 0; i < n; i++)
        if (ts[i].running) kill(-ts[i].pid, sig);
}

static int reap(task *ts, int n) {
    int exited = 0;
    for (;;) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p <= 0) break;
        for (int i = 0; i < n; i++)
            if (ts[i].pid == p && ts[i].running) {
                ts[i].running = false;
                ts[i].status = st;
                exited++;
            }
    }
    return exited;
}

static int exit_code(int st) {
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return 1;
}

int main(int argc, char **argv) {
    long long nw = 0, nps = 0, port_base = 29500, timeout = 0, grace = 5;
    const char *host = "127.0.0.1";
    sl__opt opts[] = {
        {"workers", 'n', SL__OPT_INT, &nw, 1, 256},
        {"ps", 0, SL__OPT_INT, &nps, 0, 256},
        {"port-base", 0, SL__OPT_INT, &port_base, 1, 65535},
        {"host", 0, SL__OPT_STR, &host, 0, 0},
        {"timeout", 0, SL__OPT_INT, &timeout, 0, 1000000},
        {"grace", 0, SL__OPT_INT, &grace, 0, 3600},
        {NULL, 0, 0, NULL, 0, 0},
    };
    int npos = 0;
    switch (sl__args_parse(PROG, opts, argc - 1, argv + 1, &npos)) {
    case SL__ARGS_HELP: fputs(USAGE, stdout); return SL__EXIT_OK;
    case SL__ARGS_ERROR: return SL__EXIT_USAGE;
    default: break;
    }
    char **prog = argv + 1;
    if (nw < 1) return sl__usage_error(PROG, "missing -n N (how many replicas)");
    if (npos == 0) return sl__usage_error(PROG, "missing the program to run (after --)");
    if (port_base + nw + nps - 1 > 65535) return sl__usage_error(PROG, "ports %lld..%lld pass 65535", port_base, port_base + nw + nps - 1);
    int n = (int)(nw + nps);
    prog[npos] = NULL;

    /* the cluster every task is told about */
    char **addr = calloc((size_t)n, sizeof *addr);
    task *ts = calloc((size_t)n, sizeof *ts);
    if (!addr || !ts) { fprintf(stderr, "%s: out of memory\n", PROG); return SL__EXIT_FAIL; }
    for (int i = 0; i < n; i++) {
        if (asprintf(&addr[i], "%s:%lld", host, port_base + i) < 0) return SL__EXIT_FAIL;
        ts[i].is_ps = i >= nw;
        snprintf(ts[i].label, sizeof ts[i].label, "%s %lld", ts[i].is_ps ? "ps" : "worker", ts[i].is_ps ? i - nw : i);
        ts[i].fd[0] = ts[i].fd[1] = -1;
    }

    sigset_t block, empty;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGCHLD);
    sigprocmask(SIG_BLOCK, &block, NULL);
    sigemptyset(&empty);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = on_child;
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    for (int i = 0; i < n; i++) {
        task *t = &ts[i];
        int out[2], err[2];
        if (pipe(out) || pipe(err)) { perror(PROG); return SL__EXIT_FAIL; }
        int type_index = t->is_ps ? (int)(i - nw) : i;
        char tfc[16384];
        int need = sl_cluster_tf_config(tfc, sizeof tfc, (const char *const *)addr, (int)nw,
                                        (const char *const *)addr + nw, (int)nps, t->is_ps ? "ps" : "worker", type_index);
        if (need < 0 || (size_t)need >= sizeof tfc) { fprintf(stderr, "%s: cluster too large for TF_CONFIG\n", PROG); return SL__EXIT_FAIL; }
        pid_t p = fork();
        if (p < 0) { perror(PROG); signal_all(ts, n, SIGKILL); return SL__EXIT_FAIL; }
        if (p == 0) {
            setpgid(0, 0);
            dup2(out[1], 1);
            dup2(err[1], 2);
            close(out[0]); close(out[1]); close(err[0]); close(err[1]);
            for (int k = 0; k < i; k++) { close(ts[k].fd[0]); close(ts[k].fd[1]); }
            char v[64];
            setenv("TF_CONFIG", tfc, 1);
            setenv("SLUICE_TASK", t->label, 1);
            snprintf(v, sizeof v, "%d", type_index);
            setenv("SLUICE_RANK", v, 1);
            snprintf(v, sizeof v, "%lld", nw);
            setenv("SLUICE_WORLD", v, 1);
            snprintf(v, sizeof v, "%lld", nps);
            setenv("SLUICE_NUM_PS", v, 1);
            snprintf(v, sizeof v, "%lld", port_base);
            setenv("SLUICE_PORT_BASE", v, 1);
            signal(SIGPIPE, SIG_DFL);
            struct sigaction dfl = {0};
            dfl.sa_handler = SIG_DFL;
            sigaction(SIGINT, &dfl, NULL);
            sigaction(SIGTERM, &dfl, NULL);
            sigaction(SIGCHLD, &dfl, NULL);
            sigprocmask(SIG_SETMASK, &empty, NULL);
            execvp(prog[0], prog);
            fprintf(stderr, "%s: cannot run %s: %s\n", PROG, prog[0], strerror(errno));
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
    }

    double start = now_s(), stop_at = 0; /* stop_at: when SIGKILL follows the SIGTERM */
    int result = -1;                      /* the exit status decided so far */
    bool stopping = false;
    for (;;) {
        struct pollfd pf[2 * 512 + 1];
        task *owner[2 * 512];
        int which[2 * 512], np = 0, running = 0;
        for (int i = 0; i < n; i++) {
            if (ts[i].running) running++;
            for (int s = 0; s < 2; s++)
                if (ts[i].fd[s] >= 0 && np < 2 * 512) {
                    pf[np] = (struct pollfd){.fd = ts[i].fd[s], .events = POLLIN};
                    owner[np] = &ts[i];
                    which[np++] = s;
                }
        }
        if (running == 0 && np == 0) break;
        double wait = 1.0, t = now_s();
        if (stopping && stop_at > t && stop_at - t < wait) wait = stop_at - t;
        if (timeout && !stopping && start + (double)timeout - t < wait) wait = start + (double)timeout - t;
        if (wait < 0) wait = 0;
        struct timespec tw = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        int rc = ppoll(pf, (nfds_t)np, &tw, &empty);
        if (rc > 0)
            for (int k = 0; k < np; k++)
                if (pf[k].revents) drain(owner[k], which[k]);
        if (got_child) {
            got_child = 0;
            reap(ts, n);
            for (int i = 0; i < n; i++) {
                if (ts[i].running || ts[i].pid == 0) continue;
                int code = exit_code(ts[i].status);
                if (code != 0 && result < 0 && !stopping) {
                    fprintf(stderr, "%s: %s %s with status %d; stopping the others\n", PROG, ts[i].label,
                            WIFSIGNALED(ts[i].status) ? "was killed" : "exited", code);
                    result = code;
                    stopping = true;
                    stop_at = now_s() + (double)grace;
                    signal_all(ts, n, SIGTERM);
                }
                ts[i].pid = 0; /* judged */
            }
            if (!stopping) { /* every worker done and fine: stop the ps tasks */
                bool workers_left = false;
                for (int i = 0; i < nw; i++) workers_left |= ts[i].running;
                if (!workers_left && nps > 0) {
                    bool any_ps = false;
                    for (int i = (int)nw; i < n; i++) any_ps |= ts[i].running;
                    if (any_ps) {
                        result = 0;
                        stopping = true;
                        stop_at = now_s() + (double)grace;
                        signal_all(ts, n, SIGTERM);
                    }
                }
            }
        }
        if (got_signal) {
            int sig = got_signal;
            got_signal = 0;
            if (!stopping) {
                fprintf(stderr, "%s: got signal %d; passing it to every task\n", PROG, sig);
                result = 128 + sig;
                stopping = true;
                stop_at = now_s() + (double)grace;
            }
            signal_all(ts, n, sig);
        }
        t = now_s();
        if (timeout && !stopping && t - start >= (double)timeout) {
            fprintf(stderr, "%s: --timeout %lld s reached; stopping every task\n", PROG, timeout);
            result = 124;
            stopping = true;
            stop_at = t + (double)grace;
            signal_all(ts, n, SIGTERM);
        }
        if (stopping && stop_at > 0 && t >= stop_at) {
            signal_all(ts, n, SIGKILL);
            stop_at = 0;
        }
    }
    for (int i = 0; i < n; i++) {
        free(addr[i]);
        free(ts[i].line[0]);
        free(ts[i].line[1]);
    }
    free(addr);
    free(ts);
    return result < 0 ? 0 : result;
}
