/* Benchmark: allreduce of float32 among processes on this one host (and, in the hosts part
 * below, among hosts simulated by network namespaces): Sluice's ring
 * (sl_ring_allreduce, one process per rank) with path AUTO (shared memory when every rank
 * is on this host, as here: the line names the path the ring took) and with path TCP (the
 * ZeroMQ transport on 127.0.0.1), beside Open MPI's MPI_Allreduce
 * (../shared/anchors/mpi_allreduce.c, built with mpicc) run by mpirun with its defaults on
 * one host (shared memory) and forced onto TCP (--mca pml ob1 --mca btl tcp,self), all in
 * the same run. Sizes 1, 16 and 64 MiB; 2 and 4 ranks.
 *
 * Timing follows the anchor: barrier, time one allreduce, take the slowest rank; one
 * warm-up, then the median of ITERS iterations is one round's time. ROUNDS rounds
 * alternate the four sides (Sluice AUTO, MPI default, Sluice TCP, MPI TCP; the anchor first
 * on odd rounds), so drift on a shared machine falls on both; printed per configuration:
 * the median over the rounds and its min-max for each side, the ratio of medians
 * (sluice / anchor) and the bus bandwidth (bytes/t * 2(n-1)/n, nccl-tests). The anchor
 * prints its median with 4 decimals and its busbw with 2, too coarse alone for a 1 MiB
 * time: its time is taken from both (the intersection of the two rounding intervals).
 *
 * The limit, in the same run: memcpy of a 64 MiB buffer into another (median of 9), with
 * one thread and with as many threads at once as there are cores (aggregate bytes/s), at the
 * start of every round; the fastest of those rates with no more threads than ranks is the
 * machine's memory-copy bandwidth B (the fastest, because a bound from a slow moment of a
 * shared machine could be beaten at a fast one). An in-place allreduce must at least read
 * every rank's buffer and write every rank's result: N x S bytes read and N x S written,
 * the traffic of N memcpys of S bytes; the N processes share one memory system and no more
 * cores than the machine has copy at once, so t >= N x S / B whatever the algorithm (any
 * algorithm only adds traffic, e.g. copies through a shared segment). It is a bound only
 * where the N buffers do not fit the last-level cache (the line says when they do).
 *
 * Also printed, not in the RESULT: training throughput of examples/fashion_mlp.sl and
 * examples/fashion_cnn.sl (model, pipeline and optimizer as shipped; no evaluation, no
 * checkpoints, CPU backend) on a generated Fashion-MNIST-like TFRecord set (8 shards of
 * random 28x28 images and labels in /tmp/sluice-bench), one replica with all the cores'
 * threads against `sluice-launch -n 2` (strategy ring) with half each: examples/s from the
 * chief's epoch lines, epoch 1 untimed, 3 alternating rounds; about a minute. The tools come
 * from bin/ beside this program's folder, or SLUICE_BIN (this target does not build them:
 * cmake --build DIR --target sluice-launch sluice-train); when they are missing the part is
 * skipped, saying so.
 *
 * Also printed, not in the RESULT (the hosts part, about 3 minutes): hosts simulated by
 * network namespaces (tests/bench/netns_hosts.sh): 3 namespaces 10.79.0.1-3/24, each a veth
 * link into a bridge in a fourth, every link limited each way by tc tbf to 10 Gbit/s, then
 * to 1 Gbit/s; nothing routes out of them. 2 and 3 hosts, 2 ranks on each; 1, 16 and
 * 64 MiB; 3 rounds alternating the sides: Sluice path AUTO (each rank a forked process that
 * enters its host's namespace with setns before its transport binds HOSTIP:0; ranks in
 * different namespaces are different hosts to the ring, so it must take the hierarchy,
 * "shm+tcp": shared memory inside a host, the ZeroMQ ring among the hosts' leaders; any other
 * path ends the bench), Open MPI over TCP (--mca pml ob1 --mca btl tcp,self, the interfaces
 * limited to 10.79.0.0/24; mpirun runs in the bridge's namespace, where its PMIx server listens
 * on TCP for the ranks, and starts each rank in its host through netns_hosts.sh exec) and the
 * flat Sluice ring (path TCP: every rank a ring member on the transport). Per configuration:
 * medians and min-max, the ratio sluice AUTO / MPI tcp (target <= 0.8 at 1 Gbit/s), and the
 * link's bound 2 (H-1)/H x S / rate (each of H hosts must send its share out and take the
 * others' in through its one link). Open MPI's default is not among the sides: it takes every
 * rank for one node (one host name) and would use shared memory across the namespaces. The
 * namespaces are deleted at exit and on SIGINT, SIGTERM and SIGHUP (those of a killed bench by
 * the next one); where `ip netns add` is not permitted the part says so and is skipped; when
 * Open MPI fails across them the part says what failed and prints Sluice's figures without a
 * ratio.
 *
 * Usage: bench_allreduce [sizes=1,16,64] [ranks=2,4] [iters=N] [rounds=5] [train=0] [hosts=2,3]
 *   sizes in MiB; iters per round (default 7 from 32 MiB, 11 from 4 MiB, 31 below; at most
 *   64); train=0 skips the training part; hosts: the host counts of the hosts part, 0 skips it
 *   (iterations per round there: 3 at 64 MiB, 5 at 16 MiB on 1 Gbit/s; 5 and 7 on 10 Gbit/s; 9
 *   at 1 MiB).
 * Environment (for tuning runs): SLUICE_BENCH_CHUNK=bytes per message (sl_ring_opts
 * .chunk_bytes), SLUICE_BENCH_SHM_WINDOW=bytes (.shm_window), SLUICE_BENCH_NO_TRAIN=1 (as
 * train=0), SLUICE_BENCH_NO_HOSTS=1 (as hosts=0), SLUICE_BIN (the tools' folder),
 * SLUICE_BENCH_NO_MPI=1 to skip the anchor (Sluice alone: no ratio, so no RESULT line and
 * exit 1). When the anchor cannot be built
 * (no mpicc: openmpi-bin libopenmpi-dev) it exits 1 at once naming it and what is missing;
 * an MPI or Sluice run that fails ends it so too, with no RESULT line. Ends with
 *   RESULT bench_allreduce ratio=R sluice=X anchor=Y unit=s
 * R = the worst (largest) over the rank counts of Sluice AUTO / MPI default at 64 MiB (the
 * largest size run, when sizes leaves 64 out), X and Y those two medians. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sluice/example.h"
#include "sluice/ring.h"
#include "sluice/tfrecord.h"
#include "sluice/transport.h"

#ifndef SLUICE_SRC_DIR
#define SLUICE_SRC_DIR "."
#endif

#define WORK "/tmp/sluice-bench"
#define MIB 1048576.0

enum { MAXR = 16, MAXIT = 64, MAXROUNDS = 15, MAXSIZES = 8, MAXRANKS = 8 };
enum { SL_AUTO, MPI_DEF, SL_TCP, MPI_TCP, NSIDE };
static const char *const side_cmd[NSIDE] = {"", "", "", "--mca pml ob1 --mca btl tcp,self "};

static size_t g_chunk;  /* bytes per message; 0 = the ring's default (SLUICE_BENCH_CHUNK) */
static size_t g_window; /* shared-memory window; 0 = the ring's default (SLUICE_BENCH_SHM_WINDOW) */
/* The hosts part: while g_netns names this process's namespaces ("sab<pid>"), rank r of a
 * Sluice ring enters host r / HOST_RANKS and mpirun runs as g_mpi_pre says, each rank
 * through g_mpi_wrap; both strings are empty otherwise. */
enum { HOST_RANKS = 2, MAXHOSTS = 3 };
static char g_netns[32], g_mpi_pre[256], g_mpi_wrap[PATH_MAX + 160];

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* median of v[0..n) (sorts a copy) */
static double median(const double *v, int n) {
    double c[MAXIT > MAXROUNDS ? MAXIT : MAXROUNDS];
    memcpy(c, v, sizeof *v * (size_t)n);
    qsort(c, (size_t)n, sizeof *c, cmpd);
    return n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
}

static void minmax(const double *v, int n, double *lo, double *hi) {
    *lo = *hi = v[0];
    for (int i = 1; i < n; i++) {
        if (v[i] < *lo) *lo = v[i];
        if (v[i] > *hi) *hi = v[i];
    }
}

/* ---- Sluice: one forked process per rank ---- */

typedef struct rank_pipes {
    int up[2];   /* child -> parent: its endpoint */
    int down[2]; /* parent -> child: every endpoint */
    int res[2];  /* child -> parent: the path's name, then its iteration times */
} rank_pipes;

static void close_pair(int *p) {
    for (int k = 0; k < 2; k++)
        if (p[k] >= 0) {
            close(p[k]);
            p[k] = -1;
        }
}

static void child(int rank, int n, long count, int iters, sl_ring_path path, rank_pipes *pp) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a bench killed mid-run leaves no rank behind */
    /* only this rank's own ends stay open, so a parent or sibling that dies is seen as EOF */
    for (int k = 0; k < rank; k++) {
        close(pp[k].up[0]);
        close(pp[k].down[1]);
        close(pp[k].res[0]);
    }
    close(pp[rank].up[0]);
    close(pp[rank].down[1]);
    close(pp[rank].res[0]);
    const char *a[MAXR];
    for (int k = 0; k < n; k++) a[k] = "127.0.0.1:0";
    char self[32];
    if (g_netns[0]) { /* this rank's host, before the transport makes its sockets and threads */
        char p[96];
        snprintf(p, sizeof p, "/var/run/netns/%s-h%d", g_netns, rank / HOST_RANKS);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET)) {
            fprintf(stderr, "rank %d: cannot enter %s: %s\n", rank, p, strerror(errno));
            _exit(1);
        }
        close(fd);
        snprintf(self, sizeof self, "10.79.0.%d:0", rank / HOST_RANKS + 1);
        a[rank] = self;
    }
    sl_tp *tp;
    sl_tp_opts o = {.timeout_s = 60};
    if (sl_tp_create(rank, n, a, &o, &tp)) { fprintf(stderr, "rank %d: %s\n", rank, sl_errmsg()); _exit(1); }
    char ep[64] = {0};
    snprintf(ep, sizeof ep, "%s", sl_tp_endpoint(tp));
    if (write(pp[rank].up[1], ep, sizeof ep) != sizeof ep) _exit(1);
    char all[MAXR][64];
    if (read(pp[rank].down[0], all, (size_t)n * 64) != (ssize_t)n * 64) _exit(1);
    for (int k = 0; k < n; k++)
        if (k != rank) sl_tp_set_peer(tp, k, all[k]);
    sl_ring *r;
    sl_ring_opts ro = {.chunk_bytes = g_chunk, .path = path, .shm_window = g_window};
    if (sl_tp_connect(tp) || sl_ring_create(tp, &ro, &r)) { fprintf(stderr, "rank %d: %s\n", rank, sl_errmsg()); _exit(1); }
    float *x = malloc((size_t)count * 4);
    if (!x) { fprintf(stderr, "rank %d: out of memory for %ld floats\n", rank, count); _exit(1); }
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
    if (count > 6 && x[6] != want) { fprintf(stderr, "rank %d: wrong sum %g != %g\n", rank, x[6], want); _exit(1); }
    char name[8] = {0};
    snprintf(name, sizeof name, "%s", sl_ring_path_name(r));
    if (write(pp[rank].res[1], name, sizeof name) != sizeof name) _exit(1);
    if (write(pp[rank].res[1], t, sizeof(double) * (size_t)iters) < 0) _exit(1);
    sl_ring_barrier(r);
    sl_ring_destroy(r);
    sl_tp_destroy(tp);
    free(x);
    _exit(0);
}

typedef struct rank_result {
    char name[8];    /* sl_ring_path_name */
    double t[MAXIT]; /* each iteration's time */
} rank_result;

enum { SILENCE_S = 150 }; /* no rank reports for this long: one hangs (the ranks time out after 60 s) */

/* Every rank's result, read as they come: the first rank that exits without one (EOF) ends
 * the wait at once, so its peers need not time out first. 0, or -1 (said why). */
static int collect(rank_pipes *pp, int n, int iters, rank_result *rr) {
    size_t want = sizeof rr->name + sizeof(double) * (size_t)iters, got[MAXR] = {0};
    int left = n;
    while (left > 0) {
        struct pollfd fds[MAXR];
        int who[MAXR], m = 0;
        for (int i = 0; i < n; i++)
            if (got[i] < want) {
                fds[m] = (struct pollfd){.fd = pp[i].res[0], .events = POLLIN};
                who[m++] = i;
            }
        int k = poll(fds, (nfds_t)m, SILENCE_S * 1000);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            fprintf(stderr, "bench_allreduce: no rank reported for %d s (%d of %d still running)\n", SILENCE_S, left, n);
            return -1;
        }
        for (int j = 0; j < m; j++) {
            if (!fds[j].revents) continue;
            int i = who[j];
            char *dst = got[i] < sizeof rr->name ? rr[i].name + got[i] : (char *)rr[i].t + (got[i] - sizeof rr->name);
            size_t room = got[i] < sizeof rr->name ? sizeof rr->name - got[i] : want - got[i];
            ssize_t r = read(fds[j].fd, dst, room);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                fprintf(stderr, "bench_allreduce: rank %d of %d exited without its times\n", i, n);
                return -1;
            }
            got[i] += (size_t)r;
            if (got[i] == want) left--;
        }
    }
    return 0;
}

/* Median over iterations of the slowest rank's time, or -1 (the ranks' messages on
 * stderr); name: the path every rank's ring took ("shm", "tcp"; "mixed" if they differ). */
static double run_sluice(int n, long count, int iters, sl_ring_path path, char name[8]) {
    rank_pipes pp[MAXR];
    pid_t pid[MAXR];
    int started = 0, ok = 1;
    memset(pp, -1, sizeof pp);
    fflush(NULL);
    for (int i = 0; i < n && ok; i++) {
        if (pipe(pp[i].up) || pipe(pp[i].down) || pipe(pp[i].res)) { ok = 0; break; }
        pid[i] = fork();
        if (pid[i] < 0) { ok = 0; break; }
        if (pid[i] == 0) child(i, n, count, iters, path, pp);
        started++;
        close(pp[i].up[1]);
        close(pp[i].down[0]);
        close(pp[i].res[1]);
        pp[i].up[1] = pp[i].down[0] = pp[i].res[1] = -1;
    }
    char all[MAXR][64];
    for (int i = 0; i < n && ok; i++)
        if (read(pp[i].up[0], all[i], 64) != 64) ok = 0;
    for (int i = 0; i < n && ok; i++)
        if (write(pp[i].down[1], all, (size_t)n * 64) != (ssize_t)n * 64) ok = 0;
    static rank_result rr[MAXR];
    if (ok) ok = collect(pp, n, iters, rr) == 0;
    double worst[MAXIT] = {0};
    name[0] = 0;
    for (int i = 0; i < n && ok; i++) {
        rr[i].name[7] = 0;
        if (!name[0]) snprintf(name, 8, "%s", rr[i].name);
        else if (strcmp(name, rr[i].name)) snprintf(name, 8, "mixed");
        for (int k = 0; k < iters; k++)
            if (rr[i].t[k] > worst[k]) worst[k] = rr[i].t[k];
    }
    for (int i = 0; i < started; i++) {
        int st;
        if (!ok) kill(pid[i], SIGKILL); /* a rank that waits on a dead peer: do not wait out its timeout */
        while (waitpid(pid[i], &st, 0) < 0 && errno == EINTR) {}
        if (!WIFEXITED(st) || WEXITSTATUS(st)) ok = 0;
    }
    for (int i = 0; i < n; i++) {
        close_pair(pp[i].up);
        close_pair(pp[i].down);
        close_pair(pp[i].res);
    }
    if (!ok) return -1;
    qsort(worst, (size_t)iters, sizeof *worst, cmpd);
    return worst[iters / 2];
}

/* ---- the anchor: mpirun ---- */

static char mpi_last[512]; /* the last line mpirun printed */
static double mpi_worst_rel; /* largest relative uncertainty of an MPI time (its printed digits) */

/* The anchor prints "median %.4f s, busbw %.2f GB/s": each value pins the time to a rounding
 * interval; the time is the middle of their intersection (of the tighter one if they miss). */
static double mpi_time(double med, double busbw, double busbytes) {
    double lo1 = fmax(med - 5e-5, 0), hi1 = med + 5e-5;
    double lo2 = busbytes / ((busbw + 0.005) * 1e9);
    double hi2 = busbw > 0.005 ? busbytes / ((busbw - 0.005) * 1e9) : INFINITY;
    double lo = fmax(lo1, lo2), hi = fmin(hi1, hi2);
    if (lo > hi) {
        if (hi1 - lo1 < hi2 - lo2) lo = lo1, hi = hi1;
        else lo = lo2, hi = hi2;
    }
    double t = (lo + hi) / 2;
    if (t > 0 && (hi - lo) / 2 / t > mpi_worst_rel) mpi_worst_rel = (hi - lo) / 2 / t;
    return t;
}

static double run_mpi(const char *bin, int side, int n, long count, int iters) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%smpirun --allow-run-as-root --oversubscribe -np %d %s%s%s %ld %d 2>&1", g_mpi_pre, n,
             side_cmd[side], g_mpi_wrap, bin, count, iters);
    fflush(NULL);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[512];
    double t = -1;
    mpi_last[0] = 0;
    while (fgets(line, sizeof line, p)) {
        const char *m = strstr(line, "median ");
        double med, bw;
        if (m && sscanf(m, "median %lf s, busbw %lf GB/s", &med, &bw) == 2)
            t = mpi_time(med, bw, (double)count * 4 * 2 * (n - 1) / n);
        else fprintf(stderr, "mpirun: %s", line);
        snprintf(mpi_last, sizeof mpi_last, "%.*s", (int)strcspn(line, "\n"), line);
    }
    return pclose(p) == 0 ? t : -1;
}

/* ---- the limit: memory-copy bandwidth ---- */

enum { COPY_BYTES = 64 << 20, COPY_REPS = 9 };

typedef struct copier {
    pthread_barrier_t *bar;
    int id;
    double dt[COPY_REPS + 1]; /* thread 0: each repetition's time, all copies finished */
    int ok;
} copier;

static void *copy_main(void *arg) {
    copier *c = arg;
    unsigned char *src = malloc(COPY_BYTES), *dst = malloc(COPY_BYTES);
    volatile unsigned char sink = 0;
    c->ok = src && dst;
    if (c->ok) {
        memset(src, c->id + 1, COPY_BYTES); /* touch every page before timing */
        memset(dst, 0, COPY_BYTES);
    }
    for (int r = 0; r <= COPY_REPS; r++) {
        pthread_barrier_wait(c->bar);
        double t0 = now_s();
        if (c->ok) memcpy(dst, src, COPY_BYTES);
        pthread_barrier_wait(c->bar);
        c->dt[r] = now_s() - t0;
        if (c->ok) sink = dst[(size_t)r * 4099 % COPY_BYTES]; /* the copy is used */
    }
    (void)sink;
    free(src);
    free(dst);
    return NULL;
}

/* Aggregate bytes/s of `threads` concurrent 64 MiB memcpys (median repetition after one
 * warm-up), or -1. */
static double copy_rate(int threads) {
    pthread_barrier_t bar;
    copier c[MAXR];
    pthread_t th[MAXR];
    if (pthread_barrier_init(&bar, NULL, (unsigned)threads)) return -1;
    int made = 0, ok = 1;
    for (int i = 0; i < threads; i++) {
        c[i] = (copier){.bar = &bar, .id = i};
        if (pthread_create(&th[i], NULL, copy_main, &c[i])) { ok = 0; break; }
        made++;
    }
    if (made < threads) { /* the barrier would never open: not started at all */
        fprintf(stderr, "bench_allreduce: cannot start %d memcpy threads\n", threads);
        exit(1);
    }
    for (int i = 0; i < made; i++) {
        pthread_join(th[i], NULL);
        ok = ok && c[i].ok;
    }
    pthread_barrier_destroy(&bar);
    if (!ok) return -1;
    return (double)threads * COPY_BYTES / median(c[0].dt + 1, COPY_REPS);
}

/* The copy rates of each round: [0] one thread, [1] `threads` at once (0 when 1 core). */
typedef struct copy_rates {
    int threads;
    double r[2][MAXROUNDS];
} copy_rates;

static void measure_copy(copy_rates *cr, int round) {
    cr->r[0][round] = copy_rate(1);
    cr->r[1][round] = cr->threads > 1 ? copy_rate(cr->threads) : 0;
}

/* ---- training throughput (printed only) ---- */

enum { TRAIN_SHARDS = 8, TRAIN_ROUNDS = 3, TRAIN_TIMEOUT_S = 300 };

typedef struct train_model {
    const char *config; /* in examples/ */
    int records;        /* generated training records: an epoch of about a second */
    int epochs;         /* epoch 1 untimed */
} train_model;

static const train_model train_models[2] = {{"fashion_mlp.sl", 16384, 6}, {"fashion_cnn.sl", 4096, 3}};

/* dir/train-0000K-of-00008.tfrecord: `records` examples of random 28x28 uint8 images
 * (feature image, 784 bytes) and labels 0..9 (label, int64), as sluice-record converts
 * Fashion-MNIST; 0 or -1 (printed). The speed of training does not depend on the values. */
static int gen_fashion(const char *dir, int records) {
    if (mkdir(dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "bench_allreduce: mkdir %s: %s\n", dir, strerror(errno));
        return -1;
    }
    sl_exb *b;
    if (sl_exb_new(&b)) return -1;
    uint64_t st = 0x9e3779b97f4a7c15u;
    uint8_t img[784];
    int rc = 0;
    for (int k = 0; k < TRAIN_SHARDS && !rc; k++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/train-%05d-of-%05d.tfrecord", dir, k, TRAIN_SHARDS);
        sl_tfr_writer *w;
        if (sl_tfr_writer_open(p, NULL, &w)) {
            fprintf(stderr, "bench_allreduce: %s: %s\n", p, sl_errmsg());
            rc = -1;
            break;
        }
        for (int i = 0; i < records / TRAIN_SHARDS && !rc; i++) {
            for (int j = 0; j < 784; j++) {
                st ^= st << 13, st ^= st >> 7, st ^= st << 17;
                img[j] = (uint8_t)(st >> 56);
            }
            int64_t y = (int64_t)(st % 10);
            sl_bytes im = {img, sizeof img};
            uint8_t *rec;
            size_t len;
            sl_exb_reset(b);
            if (sl_exb_bytes(b, "image", &im, 1) || sl_exb_int64s(b, "label", &y, 1) || sl_exb_serialize(b, &rec, &len)) {
                rc = -1;
                break;
            }
            if (sl_tfr_writer_write(w, rec, len)) rc = -1;
            free(rec);
        }
        if (sl_tfr_writer_close(w)) rc = -1;
        if (rc) fprintf(stderr, "bench_allreduce: writing %s: %s\n", p, sl_errmsg());
    }
    sl_exb_free(b);
    return rc;
}

typedef struct epoch_rates {
    int timed;      /* epochs after the first */
    double secs;    /* their summed time per example: the epochs have equal examples */
    double exch_ms; /* summed "exchange N ms/step" of those epochs (ring only) */
    int exch_n;
} epoch_rates;

/* "[worker 0] epoch K/E  step S  loss L  accuracy A  top5 T  R examples/s ...  exchange
 * X ms/step ..." (the exchange only under a strategy) */
static void parse_epoch(const char *line, epoch_rates *e) {
    const char *p = line;
    int k, total;
    if (!strncmp(p, "[worker 0] ", 11)) p += 11;
    if (sscanf(p, "epoch %d/%d ", &k, &total) != 2 || k < 2) return;
    const char *r = strstr(p, " examples/s");
    if (!r) return;
    const char *q = r;
    while (q > p && q[-1] != ' ') q--;
    double rate = atof(q);
    if (rate <= 0) return;
    e->timed++;
    e->secs += 1.0 / rate;
    const char *x = strstr(p, "  exchange ");
    if (x) {
        e->exch_ms += atof(x + 11);
        e->exch_n++;
    }
}

/* One `sluice-launch -n REPLICAS` of the model; examples/s over epochs 2.., or -1 (its
 * stderr's tail printed). */
static double run_train(const char *bin, const char *data, const train_model *m, int replicas, int threads, int port,
                        const char *tmp, int round, double *exch_ms) {
    char launch[PATH_MAX], train[PATH_MAX], cfg[PATH_MAX], rundir[PATH_MAX], err[PATH_MAX];
    char n[16], pb[16], to[16], files[PATH_MAX + 40], tfiles[PATH_MAX + 40], ep[40], th[40];
    snprintf(launch, sizeof launch, "%s/sluice-launch", bin);
    snprintf(train, sizeof train, "%s/sluice-train", bin);
    snprintf(cfg, sizeof cfg, "%s/examples/%s", SLUICE_SRC_DIR, m->config);
    snprintf(rundir, sizeof rundir, "%s/run-%.9s-%d-%d", tmp, m->config, replicas, round);
    snprintf(err, sizeof err, "%s.err", rundir);
    snprintf(n, sizeof n, "%d", replicas);
    snprintf(pb, sizeof pb, "%d", port);
    snprintf(to, sizeof to, "%d", TRAIN_TIMEOUT_S);
    snprintf(files, sizeof files, "pipeline.train.files=\"%s/train-*.tfrecord\"", data);
    snprintf(tfiles, sizeof tfiles, "pipeline.test.files=\"%s/train-*.tfrecord\"", data);
    snprintf(ep, sizeof ep, "train.epochs=%d", m->epochs);
    snprintf(th, sizeof th, "train.threads=%d", threads);
    char *argv[40] = {launch, "-n", n, "--port-base", pb, "--timeout", to, "--", train, cfg, "--run-dir", rundir,
                      "--set", files, "--set", tfiles, "--set", "train.eval=-", "--set", "train.checkpoint=-",
                      "--set", "train.backend=cpu", "--set", ep, "--set", th};
    int argc = 26;
    if (replicas > 1) {
        argv[argc++] = "--set";
        argv[argc++] = "train.strategy=ring";
    }
    argv[argc] = NULL;
    int pfd[2];
    if (pipe(pfd)) return -1;
    fflush(NULL);
    pid_t p = fork();
    if (p < 0) return -1;
    if (p == 0) {
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (e >= 0) dup2(e, 2);
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        execv(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    FILE *f = fdopen(pfd[0], "r");
    epoch_rates e = {0};
    char line[4096];
    while (f && fgets(line, sizeof line, f)) parse_epoch(line, &e);
    if (f) fclose(f);
    else close(pfd[0]);
    int st;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(st) || WEXITSTATUS(st) || e.timed != m->epochs - 1) {
        fprintf(stderr, "bench_allreduce: %s with %d replicas: exit %d, %d timed epochs (expected %d); %s:\n",
                m->config, replicas, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), e.timed, m->epochs - 1, err);
        FILE *ef = fopen(err, "r");
        char keep[8][512];
        int k = 0;
        while (ef && fgets(line, sizeof line, ef)) snprintf(keep[k++ % 8], sizeof keep[0], "%s", line);
        if (ef) fclose(ef);
        for (int i = k > 8 ? k - 8 : 0; i < k; i++) fprintf(stderr, "    %s", keep[i % 8]);
        return -1;
    }
    *exch_ms = e.exch_n ? e.exch_ms / e.exch_n : 0;
    return e.timed / e.secs;
}

/* the tools' folder: SLUICE_BIN, else bin/ beside this program's folder; 0 when both tools
 * are there, else -1 with why in why */
static int find_tools(char *bin, size_t cap, char *why, size_t wcap) {
    const char *env = getenv("SLUICE_BIN");
    char self[PATH_MAX];
    ssize_t k;
    if (env && *env) snprintf(bin, cap, "%s", env);
    else if ((k = readlink("/proc/self/exe", self, sizeof self - 1)) > 0) {
        self[k] = 0;
        snprintf(bin, cap, "%s/../bin", dirname(self));
    } else {
        snprintf(why, wcap, "cannot find this program's folder (set SLUICE_BIN)");
        return -1;
    }
    const char *tools[2] = {"sluice-launch", "sluice-train"};
    for (int i = 0; i < 2; i++) {
        char p[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/%s", bin, tools[i]);
        if (access(p, X_OK)) {
            snprintf(why, wcap, "%s is not built (cmake --build BUILD --target sluice-launch sluice-train, or set "
                     "SLUICE_BIN)", p);
            return -1;
        }
    }
    return 0;
}

/* One replica with all the cores against two with half each, per model: printed lines. */
static void train_part(int cores) {
    char bin[PATH_MAX], why[PATH_MAX + 160];
    if (find_tools(bin, sizeof bin, why, sizeof why)) {
        printf("training throughput: skipped: %s\n", why);
        return;
    }
    mkdir(WORK, 0777);
    char tmp[] = WORK "/allreduce-XXXXXX";
    if (!mkdtemp(tmp)) {
        printf("training throughput: skipped: mkdtemp %s: %s\n", tmp, strerror(errno));
        return;
    }
    int threads[2] = {cores, cores / 2 > 0 ? cores / 2 : 1}, reps[2] = {1, 2};
    /* below Linux's ephemeral ports (32768..60999); offsets 60..61 of bench_ps's blocks */
    int port = 21060 + (int)(getpid() % 110) * 100;
    int keep = 0;
    for (int mi = 0; mi < 2; mi++) {
        const train_model *m = &train_models[mi];
        char data[PATH_MAX];
        snprintf(data, sizeof data, "%s/data-%d", tmp, mi);
        if (gen_fashion(data, m->records)) {
            printf("training throughput: %s skipped: the generated data could not be written (above)\n", m->config);
            keep = 1;
            continue;
        }
        double rate[2][TRAIN_ROUNDS], exch[TRAIN_ROUNDS], x = 0;
        int ok = 1;
        for (int r = 0; r < TRAIN_ROUNDS && ok; r++)
            for (int j = 0; j < 2 && ok; j++) {
                int s = r % 2 ? 1 - j : j; /* alternate which goes first */
                rate[s][r] = run_train(bin, data, m, reps[s], threads[s], port, tmp, r, s ? &exch[r] : &x);
                ok = rate[s][r] > 0;
            }
        if (!ok) {
            printf("training throughput: %s: a run failed (its stderr above)\n", m->config);
            keep = 1;
            continue;
        }
        double lo[2], hi[2], md[2];
        for (int s = 0; s < 2; s++) {
            md[s] = median(rate[s], TRAIN_ROUNDS);
            minmax(rate[s], TRAIN_ROUNDS, &lo[s], &hi[s]);
        }
        printf("train %s (%d generated records, epochs 2..%d timed, %d rounds): 1 replica x %d thread%s %.0f "
               "examples/s [%.0f-%.0f]  sluice-launch -n 2 (ring) x %d thread%s %.0f examples/s [%.0f-%.0f]  "
               "2/1 %.2f  exchange %.1f ms/step\n",
               m->config, m->records, m->epochs, TRAIN_ROUNDS, threads[0], threads[0] > 1 ? "s" : "", md[0], lo[0],
               hi[0], threads[1], threads[1] > 1 ? "s" : "", md[1], lo[1], hi[1], md[1] / md[0],
               median(exch, TRAIN_ROUNDS));
        fflush(stdout);
    }
    if (keep) {
        fprintf(stderr, "bench_allreduce: kept %s\n", tmp);
        return;
    }
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd)) fprintf(stderr, "bench_allreduce: could not remove %s\n", tmp);
}

/* ---- the rounds and the report ---- */

typedef struct config {
    int n;                     /* ranks */
    double mib;                /* size */
    long count;                /* floats */
    int iters;                 /* per round */
    double t[NSIDE][MAXROUNDS]; /* each round's median */
    char path[8];              /* the path AUTO took ("shm", "tcp", "mixed") */
} config;

static const char *const side_name[NSIDE] = {"sluice auto", "MPI default", "sluice tcp", "MPI tcp"};

/* "%.3g" seconds: three significant digits at any size */
static const char *secs(char *buf, double t) {
    snprintf(buf, 24, "%.3g", t);
    return buf;
}

/* ratio of medians of sides a (Sluice) and b (the anchor); b < 0 when the anchor was not run */
static double print_pair(const config *c, int a, int b, int rounds, double target) {
    double m[2], lo[2], hi[2], bw = 2.0 * (c->n - 1) / c->n * c->mib * MIB / 1e9;
    int sides[2] = {a, b};
    char s1[24], s2[24], s3[24], label[32];
    for (int k = 0; k < 2; k++) {
        if (sides[k] < 0) continue;
        m[k] = median(c->t[sides[k]], rounds);
        minmax(c->t[sides[k]], rounds, &lo[k], &hi[k]);
    }
    if (a != SL_AUTO) snprintf(label, sizeof label, "sluice tcp");
    else snprintf(label, sizeof label, strcmp(c->path, "shm") ? "sluice auto=%s" : "sluice %s", c->path);
    printf("ranks=%d size=%gMiB: %s %s s [%s-%s]", c->n, c->mib, label, secs(s1, m[0]), secs(s2, lo[0]),
           secs(s3, hi[0]));
    if (b < 0) {
        printf("  busbw %.2f GB/s\n", bw / m[0]);
        return -1;
    }
    printf("  %s %s s [%s-%s]  ratio %.2f (target <= %.1f)  busbw %.2f / %.2f GB/s\n", side_name[b], secs(s1, m[1]),
           secs(s2, lo[1]), secs(s3, hi[1]), m[0] / m[1], target, bw / m[0], bw / m[1]);
    return m[0] / m[1];
}

/* Bytes of the last-level cache, as the kernel reports it (sysconf's cpuid can name the
 * host's cache, not this machine's share of it), else sysconf's; 0 when unknown. */
static long llc_bytes(void) {
    long best = 0;
    int top = 0;
    for (int i = 0; i < 10; i++) {
        char p[96];
        int level = 0;
        long kib = 0;
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(p, "r");
        if (!f) continue;
        if (fscanf(f, "%d", &level) != 1) level = 0;
        fclose(f);
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!(f = fopen(p, "r"))) continue;
        if (fscanf(f, "%ldK", &kib) != 1) kib = 0;
        fclose(f);
        if (level > top && kib > 0) top = level, best = kib * 1024;
    }
    if (best > 0) return best;
    best = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return best > 0 ? best : 0;
}

/* The memory-copy limit of each configuration (see the header): printed lines. */
static void print_limits(const config *cf, int nc, int rounds, int have_mpi, const copy_rates *cr) {
    long llc = llc_bytes();
    double lo[2], hi[2];
    for (int k = 0; k < 2; k++) minmax(cr->r[k], rounds, &lo[k], &hi[k]);
    printf("memcpy of 64 MiB, median of %d, at the start of each round: %.1f GB/s [%.1f-%.1f] with 1 thread", COPY_REPS,
           median(cr->r[0], rounds) / 1e9, lo[0] / 1e9, hi[0] / 1e9);
    if (cr->threads > 1)
        printf(", %.1f GB/s [%.1f-%.1f] with %d at once", median(cr->r[1], rounds) / 1e9, lo[1] / 1e9, hi[1] / 1e9,
               cr->threads);
    printf("; the bound takes the fastest\n");
    for (int i = 0; i < nc; i++) {
        const config *c = &cf[i];
        double b = hi[0];
        if (cr->threads > 1 && cr->threads <= c->n && hi[1] > b) b = hi[1];
        double bytes = c->n * c->mib * MIB, bound = bytes / b;
        char s1[24];
        printf("memcpy %.1f GB/s: an in-place allreduce of %gMiB must at least read and write each rank's buffer "
               "once: >= %s s at %d ranks (sluice %s %.1fx it", b / 1e9, c->mib, secs(s1, bound), c->n, c->path,
               median(c->t[SL_AUTO], rounds) / bound);
        if (have_mpi) printf(", MPI default %.1fx", median(c->t[MPI_DEF], rounds) / bound);
        printf(")");
        if (bytes <= (double)llc)
            printf("  [%d x %gMiB fit the %ld MiB last-level cache: not a bound there]", c->n, c->mib, llc >> 20);
        printf("\n");
    }
}

/* a comma-separated list of numbers into v (at most max); the count, or -1 */
static int parse_list(const char *s, double *v, int max) {
    int n = 0;
    while (*s) {
        char *end;
        double x = strtod(s, &end);
        if (end == s || n == max || !(x > 0)) return -1;
        v[n++] = x;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static int usage(void) {
    fprintf(stderr, "usage: bench_allreduce [sizes=1,16,64] [ranks=2,4] [iters=N] [rounds=5] [train=0] [hosts=2,3]\n"
                    "  (sizes in MiB; iters at most %d; rounds at most %d; ranks 2..%d; hosts 2..%d, 0 skips)\n",
            MAXIT, MAXROUNDS, MAXR, MAXHOSTS);
    return 2;
}

/* Every configuration's ROUNDS rounds, the sides alternating; 0, or 1 after saying why. */
static int run_rounds(config *cf, int nc, int rounds, int have_mpi, const char *bin, copy_rates *cr) {
    static const int order[2][NSIDE] = {{SL_AUTO, MPI_DEF, SL_TCP, MPI_TCP}, {MPI_DEF, SL_AUTO, MPI_TCP, SL_TCP}};
    double t0 = now_s();
    for (int r = 0; r < rounds; r++) {
        measure_copy(cr, r);
        for (int i = 0; i < nc; i++) {
            config *c = &cf[i];
            for (int k = 0; k < NSIDE; k++) {
                int s = order[r % 2][k];
                double t;
                char name[8] = "";
                if (s == MPI_DEF || s == MPI_TCP) {
                    if (!have_mpi) continue;
                    t = run_mpi(bin, s, c->n, c->count, c->iters);
                    if (t <= 0) {
                        fprintf(stderr, "bench_allreduce: the anchor MPI_Allreduce (%s) failed at %d ranks, %g MiB: %s "
                                "(mpirun ... %s); no RESULT line\n", side_name[s], c->n, c->mib,
                                mpi_last[0] ? mpi_last : "no median printed", bin);
                        return 1;
                    }
                } else {
                    t = run_sluice(c->n, c->count, c->iters, s == SL_AUTO ? SL_RING_PATH_AUTO : SL_RING_PATH_TCP, name);
                    if (t <= 0) {
                        fprintf(stderr, "bench_allreduce: the sluice ring (path %s) failed at %d ranks, %g MiB (its "
                                "ranks' messages above); no RESULT line\n", s == SL_AUTO ? "auto" : "tcp", c->n, c->mib);
                        return 1;
                    }
                    if (s == SL_AUTO) {
                        if (!r) snprintf(c->path, sizeof c->path, "%s", name);
                        else if (strcmp(c->path, name)) snprintf(c->path, sizeof c->path, "mixed");
                    }
                }
                c->t[s][r] = t;
            }
        }
        fprintf(stderr, "bench_allreduce: round %d/%d done (%.0f s)\n", r + 1, rounds, now_s() - t0);
    }
    return 0;
}

/* ---- simulated hosts: network namespaces on rate-limited links ---- */

enum { NLINKS = 2, HOST_SIZES = 3, HOST_ROUNDS = 3, MAXHC = MAXHOSTS * NLINKS * HOST_SIZES };
static const char *const link_rate[NLINKS] = {"10gbit", "1gbit"};
static const double link_bps[NLINKS] = {10e9, 1e9};
static const double host_mib[HOST_SIZES] = {1, 16, 64};
static char g_script[PATH_MAX];
static pid_t g_netns_owner;

/* netns_hosts.sh OP g_netns ARGS; its exit status (-1: not run) */
static int netns_script(const char *op, const char *args) {
    char cmd[PATH_MAX + 128];
    snprintf(cmd, sizeof cmd, "bash '%s' %s %s %s", g_script, op, g_netns, args);
    fflush(NULL);
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Delete this process's namespaces (at exit and on a signal as well: async-signal-safe). */
static void netns_down(void) {
    if (!g_netns[0] || getpid() != g_netns_owner) return;
    pid_t p = fork();
    if (p == 0) {
        execl("/bin/bash", "bash", g_script, "down", g_netns, (char *)NULL);
        _exit(127);
    }
    while (p > 0 && waitpid(p, NULL, 0) < 0 && errno == EINTR) {}
    g_netns[0] = 0;
    g_mpi_pre[0] = g_mpi_wrap[0] = 0;
}

static void netns_signal(int sig) {
    netns_down();
    signal(sig, SIG_DFL);
    raise(sig);
}

typedef struct hconfig {
    config c;
    int hosts, link;
} hconfig;

/* One line per configuration: Sluice AUTO (the hierarchy) against MPI over TCP, the flat
 * ring beside them, and the link's bound 2 (H - 1) / H x S / rate (every host must send its
 * share out and take the others' in through its one link, whatever the algorithm). */
static void print_hosts(const hconfig *h, int rounds, int have_mpi) {
    const config *c = &h->c;
    double m[NSIDE], lo[NSIDE], hi[NSIDE];
    for (int s = 0; s < NSIDE; s++) {
        if (s == MPI_DEF || (s == MPI_TCP && !have_mpi)) continue;
        m[s] = median(c->t[s], rounds);
        minmax(c->t[s], rounds, &lo[s], &hi[s]);
    }
    char a[24], b[24], d[24];
    printf("hosts=%d x %d ranks link=%s size=%gMiB: sluice %s %s s [%s-%s]", h->hosts, HOST_RANKS, link_rate[h->link],
           c->mib, c->path, secs(a, m[SL_AUTO]), secs(b, lo[SL_AUTO]), secs(d, hi[SL_AUTO]));
    if (have_mpi) {
        printf("  MPI tcp %s s [%s-%s]  ratio %.2f", secs(a, m[MPI_TCP]), secs(b, lo[MPI_TCP]), secs(d, hi[MPI_TCP]),
               m[SL_AUTO] / m[MPI_TCP]);
        if (link_bps[h->link] == 1e9) printf(" (target <= 0.8)");
    } else printf("  MPI tcp not run (no ratio)");
    printf("; sluice flat tcp %s s [%s-%s]", secs(a, m[SL_TCP]), secs(b, lo[SL_TCP]), secs(d, hi[SL_TCP]));
    double bound = 2.0 * (h->hosts - 1) / h->hosts * c->mib * MIB * 8 / link_bps[h->link];
    printf("  link bound >= %s s (sluice %.2fx)\n", secs(a, bound), m[SL_AUTO] / bound);
}

/* The rounds of one link's configurations, sides alternating; 0, 1 after saying why (a
 * Sluice failure or a path other than shm+tcp), or 2 when tc could not limit the links. An
 * MPI failure clears *have_mpi, said. */
static int host_rounds(hconfig *hc, int nc, int link, int rounds, int *have_mpi, const char *bin) {
    static const int order[2][3] = {{SL_AUTO, MPI_TCP, SL_TCP}, {MPI_TCP, SL_AUTO, SL_TCP}};
    char args[64];
    snprintf(args, sizeof args, "%d %s", MAXHOSTS, link_rate[link]);
    if (netns_script("rate", args)) return 2;
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < nc; i++) {
            hconfig *h = &hc[i];
            config *c = &h->c;
            if (h->link != link) continue;
            int n = c->n;
            for (int k = 0; k < 3; k++) {
                int s = order[r % 2][k];
                char name[8] = "";
                if (s == MPI_TCP) {
                    if (!*have_mpi) continue;
                    c->t[s][r] = run_mpi(bin, s, n, c->count, c->iters);
                    if (c->t[s][r] <= 0) {
                        printf("hosts part: Open MPI over TCP failed across the namespaces at %d hosts, %s, %g MiB: %s; "
                               "the Sluice figures follow without a ratio\n", h->hosts, link_rate[link], c->mib,
                               mpi_last[0] ? mpi_last : "no median printed");
                        *have_mpi = 0;
                    }
                    continue;
                }
                c->t[s][r] = run_sluice(n, c->count, c->iters, s == SL_AUTO ? SL_RING_PATH_AUTO : SL_RING_PATH_TCP, name);
                const char *want = s == SL_AUTO ? "shm+tcp" : "tcp";
                if (c->t[s][r] <= 0 || strcmp(name, want)) {
                    fprintf(stderr, "bench_allreduce: hosts part: the sluice ring (path %s) at %d hosts x %d ranks, %s, "
                            "%g MiB %s%s%s; no RESULT line\n", s == SL_AUTO ? "auto" : "tcp", h->hosts, HOST_RANKS,
                            link_rate[link], c->mib, c->t[s][r] <= 0 ? "failed (its ranks' messages above)" : "took path ",
                            c->t[s][r] <= 0 ? "" : name, c->t[s][r] <= 0 ? "" : ", expected the hierarchy shm+tcp");
                    return 1;
                }
                if (s == SL_AUTO) snprintf(c->path, sizeof c->path, "%s", name);
            }
        }
    return 0;
}

/* The hosts part (header): 0, also when skipped (said why), or 1 after a Sluice failure. */
static int hosts_part(const double *hl, int nh, int have_mpi, const char *bin) {
    snprintf(g_script, sizeof g_script, "%s/tests/bench/netns_hosts.sh", SLUICE_SRC_DIR);
    if (access(g_script, R_OK)) {
        printf("hosts part skipped: %s not found\n", g_script);
        return 0;
    }
    snprintf(g_netns, sizeof g_netns, "sab%d", (int)getpid());
    g_netns_owner = getpid();
    atexit(netns_down);
    signal(SIGINT, netns_signal);
    signal(SIGTERM, netns_signal);
    signal(SIGHUP, netns_signal);
    char args[16];
    snprintf(args, sizeof args, "%d", MAXHOSTS);
    int rc = netns_script("up", args);
    if (rc) {
        if (rc == 3) printf("hosts part skipped: network namespaces not permitted\n");
        else printf("hosts part skipped: the namespaces could not be made (netns_hosts.sh up exit %d, above)\n", rc);
        netns_down();
        return 0;
    }
    snprintf(g_mpi_pre, sizeof g_mpi_pre, "timeout -k 5 120 ip netns exec %s-sw env PMIX_MCA_ptl_tcp_remote_connections=1 "
             "PMIX_MCA_ptl_tcp_if_include=10.79.0.0/24 ", g_netns);
    snprintf(g_mpi_wrap, sizeof g_mpi_wrap, "--mca btl_tcp_if_include 10.79.0.0/24 --mca oob_tcp_if_include 10.79.0.0/24 "
             "/bin/bash '%s' exec %s %d ", g_script, g_netns, HOST_RANKS);
    static hconfig hc[MAXHC];
    int nc = 0;
    for (int l = 0; l < NLINKS; l++)
        for (int k = 0; k < nh; k++)
            for (int j = 0; j < HOST_SIZES; j++) {
                hconfig *h = &hc[nc++];
                memset(h, 0, sizeof *h);
                h->hosts = (int)hl[k];
                h->link = l;
                h->c.n = h->hosts * HOST_RANKS;
                h->c.mib = host_mib[j];
                h->c.count = (long)(host_mib[j] * MIB / 4);
                int slow = link_bps[l] < 5e9;
                h->c.iters = host_mib[j] >= 32 ? (slow ? 3 : 5) : host_mib[j] >= 4 ? (slow ? 5 : 7) : 9;
            }
    printf("hosts part: network namespaces %s-h0..h%d (10.79.0.1-%d/24) on a bridge in %s-sw, every link limited "
           "each way by tc tbf; %d ranks per host; %d rounds, sides alternating\n", g_netns, MAXHOSTS - 1, MAXHOSTS,
           g_netns, HOST_RANKS, HOST_ROUNDS);
    fflush(stdout);
    double t0 = now_s();
    rc = 0;
    for (int l = 0; l < NLINKS && !rc; l++) {
        rc = host_rounds(hc, nc, l, HOST_ROUNDS, &have_mpi, bin);
        fprintf(stderr, "bench_allreduce: hosts part: link %s done (%.0f s)\n", link_rate[l], now_s() - t0);
    }
    netns_down();
    if (rc == 2) printf("hosts part skipped: tc could not limit the links (netns_hosts.sh rate, above)\n");
    for (int i = 0; i < nc && !rc; i++) print_hosts(&hc[i], HOST_ROUNDS, have_mpi);
    fflush(stdout);
    return rc == 1;
}

int main(int argc, char **argv) {
    double sizes[MAXSIZES] = {1, 16, 64}, rk[MAXRANKS] = {2, 4}, hl[MAXHOSTS] = {2, 3};
    int ns = 3, nr = 2, iters = 0, rounds = 5, train = 1, nh = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "sizes=", 6)) ns = parse_list(a + 6, sizes, MAXSIZES);
        else if (!strncmp(a, "ranks=", 6)) nr = parse_list(a + 6, rk, MAXRANKS);
        else if (!strncmp(a, "iters=", 6)) iters = atoi(a + 6);
        else if (!strncmp(a, "rounds=", 7)) rounds = atoi(a + 7);
        else if (!strncmp(a, "train=", 6)) train = atoi(a + 6);
        else if (!strcmp(a, "hosts=0")) nh = 0;
        else if (!strncmp(a, "hosts=", 6) && (nh = parse_list(a + 6, hl, MAXHOSTS)) < 1) return usage();
        else if (strncmp(a, "hosts=", 6)) return usage();
        if (ns < 1 || nr < 1 || iters < 0 || iters > MAXIT || rounds < 1 || rounds > MAXROUNDS) return usage();
    }
    for (int k = 0; k < nr; k++)
        if (rk[k] < 2 || rk[k] > MAXR || rk[k] != (int)rk[k]) return usage();
    for (int k = 0; k < nh; k++)
        if (hl[k] < 2 || hl[k] > MAXHOSTS || hl[k] != (int)hl[k]) return usage();
    signal(SIGPIPE, SIG_IGN);
    const char *env = getenv("SLUICE_BENCH_CHUNK");
    if (env) g_chunk = (size_t)atol(env);
    env = getenv("SLUICE_BENCH_SHM_WINDOW");
    if (env) g_window = (size_t)atol(env);
    env = getenv("SLUICE_BENCH_NO_TRAIN");
    if (env && *env && strcmp(env, "0")) train = 0;
    env = getenv("SLUICE_BENCH_NO_HOSTS");
    if (env && *env && strcmp(env, "0")) nh = 0;
    env = getenv("SLUICE_BENCH_NO_MPI");
    int have_mpi = !(env && *env);
    char bin[256], src[600], cmd[1024];
    snprintf(bin, sizeof bin, "/tmp/sluice_mpi_allreduce_%d", (int)getpid());
    snprintf(src, sizeof src, "%s/../shared/anchors/mpi_allreduce.c", SLUICE_SRC_DIR);
    snprintf(cmd, sizeof cmd, "mpicc -O2 %s -o %s", src, bin);
    /* a ratio needs its anchor: find out before measuring anything whether it can run */
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

    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN), maxthreads = cores < 1 ? 1 : cores > MAXR ? MAXR : cores;
    copy_rates cr = {.threads = maxthreads};
    printf("bench_allreduce: %d cores; %d rounds, each the median of its iterations (slowest rank); sides alternate\n",
           cores, rounds);
    fflush(stdout);

    config cf[MAXSIZES * MAXRANKS];
    int nc = 0;
    for (int k = 0; k < nr; k++)
        for (int j = 0; j < ns; j++) {
            config *c = &cf[nc++];
            memset(c, 0, sizeof *c);
            c->n = (int)rk[k];
            c->mib = sizes[j];
            c->count = (long)(sizes[j] * MIB / 4);
            c->iters = iters ? iters : sizes[j] >= 32 ? 7 : sizes[j] >= 4 ? 11 : 31;
            if (c->count < 1) return usage();
        }
    printf("iterations per round:");
    for (int j = 0; j < ns; j++) printf(" %d at %g MiB%s", cf[j].iters, sizes[j], j + 1 < ns ? "," : "\n");
    fflush(stdout);
    if (run_rounds(cf, nc, rounds, have_mpi, bin, &cr)) {
        unlink(bin);
        return 1;
    }

    /* the RESULT's size: 64 MiB, else the largest run */
    double rsize = 0;
    for (int j = 0; j < ns; j++)
        if (sizes[j] == 64 || (rsize != 64 && sizes[j] > rsize)) rsize = sizes[j];
    double worst = -1, ws = 0, wa = 0;
    for (int i = 0; i < nc; i++) {
        config *c = &cf[i];
        double r = print_pair(c, SL_AUTO, have_mpi ? MPI_DEF : -1, rounds, 0.8);
        print_pair(c, SL_TCP, have_mpi ? MPI_TCP : -1, rounds, 1.0);
        if (c->mib == rsize && r > worst) {
            worst = r;
            ws = median(c->t[SL_AUTO], rounds);
            wa = median(c->t[MPI_DEF], rounds);
        }
    }
    print_limits(cf, nc, rounds, have_mpi, &cr);
    if (mpi_worst_rel > 0.005)
        printf("note: the anchor's printed digits leave an MPI time uncertain by up to %.1f%%\n", mpi_worst_rel * 100);
    fflush(stdout);
    int hosts_failed = nh ? hosts_part(hl, nh, have_mpi, bin) : 0;
    if (!nh) printf("hosts part skipped (hosts=0 or SLUICE_BENCH_NO_HOSTS)\n");
    unlink(bin);
    if (hosts_failed) return 1;
    if (train) train_part(maxthreads);
    else printf("training throughput: skipped (train=0 or SLUICE_BENCH_NO_TRAIN)\n");
    if (!have_mpi) {
        fflush(stdout);
        fprintf(stderr, "bench_allreduce: the anchor MPI_Allreduce was not run (SLUICE_BENCH_NO_MPI is set): no ratio, "
                "no RESULT line\n");
        return 1;
    }
    if (rsize != 64) printf("the RESULT is at %g MiB: 64 MiB was not run\n", rsize);
    printf("RESULT bench_allreduce ratio=%.3f sluice=%.4g anchor=%.4g unit=s\n", worst, ws, wa);
    return 0;
}
