/* Benchmark: ring allreduce of 64 MiB of float32 over TCP on 127.0.0.1 with 2 and 4 ranks
 * (one process each), beside Open MPI's MPI_Allreduce (../shared/anchors/mpi_allreduce.c,
 * built with mpicc and run with mpirun --mca pml ob1 --mca btl tcp,self) in the same run.
 *
 * Timing follows the anchor: barrier, time one allreduce, take the slowest rank; median of
 * the iterations after one warm-up. Bus bandwidth = bytes/t * 2(n-1)/n (nccl-tests).
 * Prints one line per configuration and ends with
 *   RESULT bench_allreduce ratio=R sluice=X anchor=Y unit=s
 * for the largest rank count (ratio = sluice time / MPI time; <= 1.0 is the goal).
 *
 * Usage: bench_allreduce [floats=16777216] [iters=7] [ranks...=2 4]
 * Environment (for tuning runs): SLUICE_BENCH_CHUNK=bytes per message,
 * SLUICE_BENCH_NO_MPI=1 to skip the anchor (Sluice alone: no ratio, so no RESULT line and
 * exit 1). When the anchor cannot be built (no mpicc: openmpi-bin libopenmpi-dev) it exits
 * 1 at once naming it and what is missing; an MPI run that fails ends it so too, with no
 * RESULT line. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sluice/ring.h"
#include "sluice/transport.h"

#ifndef SLUICE_SRC_DIR
#define SLUICE_SRC_DIR "."
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { MAXR = 16, MAXIT = 64 };

static size_t g_chunk; /* bytes per message; 0 = the ring's default (SLUICE_BENCH_CHUNK) */

static void child(int rank, int n, long count, int iters, int upfd, int downfd, int resfd) {
    const char *a[MAXR];
    for (int k = 0; k < n; k++) a[k] = "127.0.0.1:0";
    sl_tp *tp;
    sl_tp_opts o = {.timeout_s = 60};
    if (sl_tp_create(rank, n, a, &o, &tp)) { fprintf(stderr, "rank %d: %s\n", rank, sl_errmsg()); _exit(1); }
    char ep[64] = {0};
    snprintf(ep, sizeof ep, "%s", sl_tp_endpoint(tp));
    if (write(upfd, ep, sizeof ep) != sizeof ep) _exit(1);
    char all[MAXR][64];
    if (read(downfd, all, (size_t)n * 64) != (ssize_t)n * 64) _exit(1);
    for (int k = 0; k < n; k++)
        if (k != rank) sl_tp_set_peer(tp, k, all[k]);
    sl_ring *r;
    sl_ring_opts ro = {.chunk_bytes = g_chunk};
    if (sl_tp_connect(tp) || sl_ring_create(tp, &ro, &r)) { fprintf(stderr, "rank %d: %s\n", rank, sl_errmsg()); _exit(1); }
    float *x = malloc((size_t)count * 4);
    double t[MAXIT];
    for (int it = 0; it <= iters; it++) {
        for (long i = 0; i < count; i++) x[i] = (float)(rank + 1) * (float)(i % 7);
        sl_status s = sl_ring_barrier(r);
        double t0 = now_s();
        if (!s) s = sl_ring_allreduce(r, x, (size_t)count, SL_DT_F32, SL_REDUCE_SUM, 1);
        double dt = now_s() - t0;
        if (s) { fprintf(stderr, "rank %d: %s\n", rank, sl_errmsg()); _exit(1); }
        if (it) t[it - 1] = dt;
    }
    float want = (float)n * (float)(n + 1) / 2 * 6;
    if (x[6] != want) { fprintf(stderr, "rank %d: wrong sum %g != %g\n", rank, x[6], want); _exit(1); }
    if (write(resfd, t, sizeof(double) * (size_t)iters) < 0) _exit(1);
    sl_ring_barrier(r);
    sl_ring_destroy(r);
    sl_tp_destroy(tp);
    free(x);
    _exit(0);
}

/* Median over iterations of the slowest rank's time, or -1. */
static double run_sluice(int n, long count, int iters) {
    int up[MAXR][2], down[MAXR][2], res[MAXR][2];
    pid_t pid[MAXR];
    for (int i = 0; i < n; i++) {
        if (pipe(up[i]) || pipe(down[i]) || pipe(res[i])) return -1;
        pid[i] = fork();
        if (pid[i] == 0) child(i, n, count, iters, up[i][1], down[i][0], res[i][1]);
    }
    char all[MAXR][64];
    for (int i = 0; i < n; i++)
        if (read(up[i][0], all[i], 64) != 64) return -1;
    for (int i = 0; i < n; i++)
        if (write(down[i][1], all, (size_t)n * 64) < 0) return -1;
    double worst[MAXIT] = {0}, t[MAXIT];
    int ok = 1;
    for (int i = 0; i < n; i++) {
        if (read(res[i][0], t, sizeof(double) * (size_t)iters) != (ssize_t)(sizeof(double) * (size_t)iters)) ok = 0;
        for (int k = 0; ok && k < iters; k++)
            if (t[k] > worst[k]) worst[k] = t[k];
    }
    for (int i = 0; i < n; i++) {
        int st;
        waitpid(pid[i], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) ok = 0;
        close(up[i][0]); close(up[i][1]); close(down[i][0]); close(down[i][1]); close(res[i][0]); close(res[i][1]);
    }
    if (!ok) return -1;
    qsort(worst, (size_t)iters, sizeof *worst, cmpd);
    return worst[iters / 2];
}

static char mpi_last[512]; /* the last line mpirun printed */

static double run_mpi(const char *bin, int n, long count, int iters) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "mpirun --allow-run-as-root --oversubscribe -np %d --mca pml ob1 --mca btl tcp,self %s %ld %d 2>&1", n,
             bin, count, iters);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[512];
    double t = -1;
    mpi_last[0] = 0;
    while (fgets(line, sizeof line, p)) {
        const char *m = strstr(line, "median ");
        if (m) t = atof(m + 7);
        else fprintf(stderr, "mpirun: %s", line);
        snprintf(mpi_last, sizeof mpi_last, "%.*s", (int)strcspn(line, "\n"), line);
    }
    return pclose(p) == 0 ? t : -1;
}

int main(int argc, char **argv) {
    long count = argc > 1 ? atol(argv[1]) : 16777216;
    int iters = argc > 2 ? atoi(argv[2]) : 7;
    int ranks[8] = {2, 4}, nr = 2;
    if (argc > 3) {
        nr = 0;
        for (int i = 3; i < argc && nr < 8; i++) ranks[nr++] = atoi(argv[i]);
    }
    if (iters < 1 || iters > MAXIT || count < 1) { fprintf(stderr, "bad arguments\n"); return 2; }
    signal(SIGPIPE, SIG_IGN);
    const char *ch = getenv("SLUICE_BENCH_CHUNK");
    if (ch) g_chunk = (size_t)atol(ch);
    const char *nompi = getenv("SLUICE_BENCH_NO_MPI");
    char bin[256], src[600];
    snprintf(bin, sizeof bin, "/tmp/sluice_mpi_allreduce_%d", (int)getpid());
    snprintf(src, sizeof src, "%s/../shared/anchors/mpi_allreduce.c", SLUICE_SRC_DIR);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mpicc -O2 %s -o %s", src, bin);
    /* a ratio needs its anchor: find out before measuring anything whether it can run */
    int have_mpi = !(nompi && *nompi);
    if (have_mpi && access(src, R_OK) != 0) {
        fprintf(stderr, "bench_allreduce: the anchor mpi_allreduce.c (Open MPI's MPI_Allreduce) cannot run: %s not found "
                "(../shared beside the sources); no RESULT line\n", src);
        return 1;
    }
    if (have_mpi && system(cmd) != 0) {
        fprintf(stderr, "bench_allreduce: the anchor mpi_allreduce.c (Open MPI's MPI_Allreduce) cannot be built: `%s` "
                "failed (it needs mpicc and mpirun: install openmpi-bin libopenmpi-dev); no RESULT line\n", cmd);
        return 1;
    }
    if (!have_mpi) printf("the anchor MPI_Allreduce is not run: SLUICE_BENCH_NO_MPI is set (no ratio)\n");
    double bytes = (double)count * 4;
    double last_s = -1, last_m = -1;
    for (int k = 0; k < nr; k++) {
        int n = ranks[k];
        if (n < 2 || n > MAXR) continue;
        double ts = run_sluice(n, count, iters);
        double tm = have_mpi ? run_mpi(bin, n, count, iters) : -1;
        double bw = 2.0 * (n - 1) / n;
        printf("ranks=%d floats=%ld (%.0f MiB): sluice ring %.4f s (busbw %.2f GB/s)", n, count, bytes / 1048576, ts,
               ts > 0 ? bytes / ts * bw / 1e9 : 0.0);
        if (tm > 0)
            printf("  MPI_Allreduce %.4f s (busbw %.2f GB/s)  ratio %.3f", tm, bytes / tm * bw / 1e9, ts / tm);
        printf("\n");
        fflush(stdout);
        if (have_mpi && tm <= 0) {
            unlink(bin);
            fprintf(stderr, "bench_allreduce: the anchor MPI_Allreduce failed at %d ranks: %s (mpirun ... %s); no RESULT "
                    "line\n", n, mpi_last[0] ? mpi_last : "no median printed", bin);
            return 1;
        }
        last_s = ts;
        last_m = tm;
    }
    unlink(bin);
    if (last_s < 0) { fprintf(stderr, "bench_allreduce: sluice run failed\n"); return 1; }
    if (last_m <= 0) {
        fflush(stdout);
        fprintf(stderr, "bench_allreduce: the anchor MPI_Allreduce was not run (SLUICE_BENCH_NO_MPI is set): no ratio, "
                "no RESULT line\n");
        return 1;
    }
    printf("RESULT bench_allreduce ratio=%.3f sluice=%.4f anchor=%.4f unit=s\n", last_s / last_m, last_s, last_m);
    return 0;
}
