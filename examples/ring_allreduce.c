/* Example of the replica API: resolve the cluster from the environment (TF_CONFIG as
 * sluice-launch sets it, or Slurm / Open MPI variables), connect the ring, and run an
 * allreduce, a broadcast and a barrier, checking the results exactly.
 *
 *   sluice-launch -n 3 -- example_ring_allreduce [--count N] [--reps R] [--fp16]
 *                                                [--timeout S] [--fail-rank R [--fail-early]]
 *
 * Each rank fills x[i] = (rank + 1) * (i % 7), so the sum is world*(world+1)/2 * (i % 7),
 * exactly. --fail-rank R makes rank R exit with status 3 before the allreduce: its peers see
 * it die and fail naming it. With --fail-early it exits before it connects, so the others
 * wait for it (up to the timeout) and only the launcher stops them (to see the job take the
 * failed rank's status). Exit status: 0 ok, 1 a collective failed or a wrong result. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sluice/cluster.h"
#include "sluice/ring.h"
#include "sluice/transport.h"

extern char **environ;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t count = 1000003;
    int reps = 1, fp16 = 0, fail_rank = -1, fail_early = 0;
    double timeout = 10;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--count") && i + 1 < argc) count = (size_t)atoll(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) timeout = atof(argv[++i]);
        else if (!strcmp(argv[i], "--fail-rank") && i + 1 < argc) fail_rank = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--fp16")) fp16 = 1;
        else if (!strcmp(argv[i], "--fail-early")) fail_early = 1;
        else { fprintf(stderr, "usage: %s [--count N] [--reps R] [--fp16] [--timeout S] [--fail-rank R [--fail-early]]\n", argv[0]); return 2; }
    }
    sl_cluster c;
    if (sl_cluster_resolve(NULL, NULL, (const char *const *)environ, &c)) {
        fprintf(stderr, "cluster: %s\n", sl_errmsg());
        return 1;
    }
    if (c.rank < 0) { fprintf(stderr, "not a ring member (%s)\n", sl_task_type_name(c.tasks[c.self].type)); return 1; }
    const char **addrs;
    sl_cluster_ring_addrs(&c, &addrs);
    sl_tp_opts o = {.timeout_s = c.timeout_s > 0 ? c.timeout_s : timeout, .job_id = c.job_id};
    sl_tp *tp = NULL;
    sl_ring *ring = NULL;
    float *x = malloc(count * 4 + 4);
    int rc = 1;
    if (c.rank == fail_rank && fail_early) { fprintf(stderr, "rank %d: failing on purpose\n", c.rank); exit(3); }
    if (sl_tp_create(c.rank, c.world, addrs, &o, &tp) || sl_tp_connect(tp)) goto fail;
    sl_ring_opts ro = {.fp16 = fp16};
    if (sl_ring_create(tp, &ro, &ring)) goto fail;
    if (c.rank == fail_rank) { fprintf(stderr, "rank %d: failing on purpose\n", c.rank); exit(3); }
    double t0 = now_s();
    for (int r = 0; r < reps; r++) {
        for (size_t i = 0; i < count; i++) x[i] = (float)(c.rank + 1) * (float)(i % 7);
        if (sl_ring_allreduce(ring, x, count, SL_DT_F32, SL_REDUCE_SUM, 1)) goto fail;
    }
    double dt = (now_s() - t0) / reps;
    float tri = (float)(c.world * (c.world + 1) / 2);
    for (size_t i = 0; i < count; i++)
        if (x[i] != tri * (float)(i % 7)) {
            fprintf(stderr, "rank %d: x[%zu] = %g, expected %g\n", c.rank, i, x[i], tri * (float)(i % 7));
            goto out;
        }
    char msg[64] = {0};
    if (c.rank == c.world - 1) snprintf(msg, sizeof msg, "hello from rank %d", c.rank);
    if (sl_ring_broadcast(ring, msg, sizeof msg, c.world - 1, 2) || sl_ring_barrier(ring)) goto fail;
    sl_tp_stats st;
    sl_tp_get_stats(tp, &st);
    printf("rank %d/%d (%s): allreduce of %zu floats ok, %.4f s; broadcast \"%s\"; dropped %llu; path %s\n", c.rank,
           c.world, sl_tp_endpoint(tp), count, dt, msg, (unsigned long long)st.dropped, sl_ring_path_name(ring));
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "rank %d: %s\n", c.rank, sl_errmsg());
out:
    sl_ring_destroy(ring);
    sl_tp_destroy(tp);
    sl_cluster_free(&c);
    free(x);
    return rc;
}
