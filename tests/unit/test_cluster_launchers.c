/* dist/cluster_env.c and dist/rendezvous.c: clusters from launchers that give a rank and a
 * world size but no member list (torchrun, Kubeflow Trainer's PET_*, MPICH / Intel MPI's
 * PMI_*): members on one host, ports, precedence over Slurm, every malformed variable, and
 * the rendezvous of ranks on several hosts (threads here, each its own "host" by its local
 * rank): the exact member list, a duplicate address, another job's hello, a rank that never
 * comes. Ports: 9000..9399 (9000 + (pid % 40) * 10, see the port plan in
 * tests/integration/lib.sh). */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "sluice/cluster.h"
#include "test.h"

static sl_status from_env(const char *const *env, sl_cluster *c) { return sl_cluster_resolve(NULL, NULL, env, c); }

static int port_base(void) { return 9000 + (int)(getpid() % 40) * 10; }

TEST(test_torchrun_one_host) {
    const char *env[] = {"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                         "MASTER_PORT=29500", "GROUP_RANK=0", NULL};
    sl_cluster c;
    ASSERT_OK(from_env(env, &c));
    ASSERT_EQ(c.world, 2);
    ASSERT_EQ(c.rank, 1);
    ASSERT_STREQ(c.members_source, "torchrun");
    ASSERT_STREQ(c.task_source, "torchrun");
    ASSERT_STREQ(c.source_vars, "RANK, WORLD_SIZE, MASTER_ADDR");
    ASSERT_EQ(c.rendezvous, 0);
    /* the master port is torchrun's store, + 1 the rendezvous: the ring starts at + 2 */
    ASSERT_STREQ(c.ring_addrs[0], "127.0.0.1:29502");
    ASSERT_STREQ(c.ring_addrs[1], "127.0.0.1:29503");
    sl_cluster_free(&c);
    /* no local size and a loopback master: one host; an explicit port base wins */
    const char *env2[] = {"RANK=0", "WORLD_SIZE=3", "MASTER_ADDR=localhost", "MASTER_PORT=40000",
                          "SLUICE_PORT_BASE=31000", NULL};
    ASSERT_OK(from_env(env2, &c));
    ASSERT_EQ(c.world, 3);
    ASSERT_EQ(c.rank, 0);
    ASSERT_STREQ(c.ring_addrs[2], "127.0.0.1:31002");
    sl_cluster_free(&c);
    /* no master port at all: the default base */
    const char *env3[] = {"RANK=0", "WORLD_SIZE=1", NULL};
    ASSERT_OK(from_env(env3, &c));
    ASSERT_STREQ(c.ring_addrs[0], "127.0.0.1:29500");
    sl_cluster_free(&c);
    /* a large world on one host: every member, and the duplicate check in n log n (it was
     * n^2 string comparisons: seconds at 30,000 ranks, found by fuzz_rendezvous) */
    const char *env4[] = {"RANK=29999", "WORLD_SIZE=30000", "MASTER_PORT=1000", NULL};
    ASSERT_OK(from_env(env4, &c));
    ASSERT_EQ(c.world, 30000);
    ASSERT_EQ(c.rank, 29999);
    ASSERT_STREQ(c.ring_addrs[0], "127.0.0.1:1002");
    ASSERT_STREQ(c.ring_addrs[29999], "127.0.0.1:31001");
    sl_cluster_free(&c);
}

TEST(test_torchrun_errors) {
    static const struct { const char *env[6]; const char *msg; } cases[] = {
        {{"RANK=2", "WORLD_SIZE=2"}, "torchrun: RANK=2 is not below WORLD_SIZE=2"},
        {{"RANK=x", "WORLD_SIZE=2"}, "torchrun: RANK=\"x\" is not a number in 0..1048576"},
        {{"RANK=0"}, "torchrun: WORLD_SIZE is not set"},
        {{"RANK=0", "WORLD_SIZE=0"}, "torchrun: WORLD_SIZE=\"0\" is not a number in 1..1048576"},
        {{"RANK=0", "WORLD_SIZE=4", "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2"}, "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"},
        {{"RANK=0", "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=3"}, "LOCAL_WORLD_SIZE=3 is above WORLD_SIZE=2"},
        {{"RANK=0", "WORLD_SIZE=4", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=10.0.0.1"},
         "torchrun: the 4 ranks run on several hosts but MASTER_PORT is not set"},
        {{"RANK=0", "WORLD_SIZE=4", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2", "MASTER_PORT=29500"},
         "torchrun: the 4 ranks run on several hosts but MASTER_ADDR is not set"},
        {{"RANK=0", "WORLD_SIZE=2", "MASTER_PORT=99999", "MASTER_ADDR=h"}, "MASTER_PORT=\"99999\" is not a number"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_cluster c;
        ASSERT_EQ(from_env(cases[i].env, &c), SL_EINVAL);
        ASSERT_CONTAINS(sl_errmsg(), cases[i].msg);
        ASSERT_EQ(c.ntasks, 0);
    }
}

TEST(test_precedence) {
    /* srun torchrun: Slurm counts agents, RANK counts processes; torchrun decides */
    const char *env[] = {"SLURM_PROCID=0", "SLURM_NTASKS=1", "RANK=1", "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2",
                         "LOCAL_RANK=1", NULL};
    sl_cluster c;
    ASSERT_OK(from_env(env, &c));
    ASSERT_EQ(c.rank, 1);
    ASSERT_STREQ(c.task_source, "torchrun");
    sl_cluster_free(&c);
    /* a TF_CONFIG beside them still comes first */
    const char *env2[] = {"RANK=0", "WORLD_SIZE=1",
                          "TF_CONFIG={\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 1}}",
                          NULL};
    ASSERT_OK(from_env(env2, &c));
    ASSERT_STREQ(c.members_source, "TF_CONFIG");
    ASSERT_EQ(c.rank, 1);
    sl_cluster_free(&c);
}

TEST(test_kubeflow) {
    const char *env[] = {"PET_NNODES=2", "PET_NODE_RANK=1", "PET_NPROC_PER_NODE=1", "PET_MASTER_ADDR=127.0.0.1",
                         "PET_MASTER_PORT=23456", NULL};
    sl_cluster c;
    ASSERT_OK(from_env(env, &c));
    ASSERT_EQ(c.world, 2);
    ASSERT_EQ(c.rank, 1);
    ASSERT_STREQ(c.members_source, "kubeflow");
    ASSERT_STREQ(c.source_vars, "PET_NODE_RANK, PET_NNODES, PET_MASTER_ADDR");
    ASSERT_STREQ(c.ring_addrs[0], "127.0.0.1:23458");
    ASSERT_STREQ(c.ring_addrs[1], "127.0.0.1:23459");
    sl_cluster_free(&c);
    const char *autoproc[] = {"PET_NNODES=1", "PET_NODE_RANK=0", "PET_NPROC_PER_NODE=auto", NULL};
    ASSERT_OK(from_env(autoproc, &c));
    ASSERT_EQ(c.world, 1);
    sl_cluster_free(&c);
    static const struct { const char *env[5]; const char *msg; } cases[] = {
        {{"PET_NNODES=2", "PET_NODE_RANK=0", "PET_NPROC_PER_NODE=4"},
         "kubeflow: PET_NPROC_PER_NODE=4 but this pod started one process"},
        {{"PET_NNODES=1:4", "PET_NODE_RANK=0"}, "kubeflow: PET_NNODES=\"1:4\" is an elastic range"},
        {{"PET_NODE_RANK=0"}, "kubeflow: PET_NODE_RANK is set but PET_NNODES is not"},
        {{"PET_NNODES=2", "PET_NODE_RANK=2"}, "kubeflow: PET_NODE_RANK=2 is not below PET_NNODES=2"},
        {{"PET_NNODES=2", "PET_NODE_RANK=1", "PET_MASTER_ADDR=trainjob-node-0-0.trainjob"},
         "the 2 ranks run on several hosts but PET_MASTER_PORT is not set"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ASSERT_EQ(from_env(cases[i].env, &c), SL_EINVAL);
        ASSERT_CONTAINS(sl_errmsg(), cases[i].msg);
    }
}

TEST(test_pmi) {
    const char *env[] = {"PMI_RANK=1", "PMI_SIZE=2", "MPI_LOCALNRANKS=2", "MPI_LOCALRANKID=1", "PMI_FD=5", NULL};
    sl_cluster c;
    ASSERT_OK(from_env(env, &c));
    ASSERT_EQ(c.world, 2);
    ASSERT_EQ(c.rank, 1);
    ASSERT_STREQ(c.members_source, "pmi");
    ASSERT_STREQ(c.source_vars, "PMI_RANK, PMI_SIZE");
    ASSERT_STREQ(c.ring_addrs[0], "127.0.0.1:29500");
    ASSERT_STREQ(c.ring_addrs[1], "127.0.0.1:29501");
    sl_cluster_free(&c);
    const char *far[] = {"PMI_RANK=0", "PMI_SIZE=4", "MPI_LOCALNRANKS=2", NULL};
    ASSERT_EQ(from_env(far, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "pmi: PMI_SIZE=4 ranks, only some on this host");
    const char *nosize[] = {"PMI_RANK=0", NULL};
    ASSERT_EQ(from_env(nosize, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "pmi: PMI_RANK is set but PMI_SIZE is not");
}

/* ---- the rendezvous: one thread per rank ---- */

typedef struct rank_run {
    char env[8][64];
    const char *envp[9];
    const char *cfg_text; /* a cluster block (timeout), or NULL */
    sl_status st;
    char err[512];
    char addrs[4][64];
    int world, rank, rdzv;
} rank_run;

static void *run_rank(void *p) {
    rank_run *r = p;
    sl_cfg *cfg = NULL;
    if (r->cfg_text && sl_cfg_parse(r->cfg_text, strlen(r->cfg_text), "c.sl", &cfg)) {
        r->st = SL_EINVAL;
        return NULL;
    }
    sl_cluster c;
    r->st = sl_cluster_resolve(NULL, cfg, r->envp, &c);
    if (r->st) {
        snprintf(r->err, sizeof r->err, "%s", sl_errmsg());
    } else {
        r->world = c.world;
        r->rank = c.rank;
        r->rdzv = c.rendezvous;
        for (int i = 0; i < c.world && i < 4; i++) snprintf(r->addrs[i], sizeof r->addrs[i], "%s", c.ring_addrs[i]);
        sl_cluster_free(&c);
    }
    sl_cfg_free(cfg);
    return NULL;
}

/* rank i of world n, local rank lr of lws on its "host", master localhost */
static void setup(rank_run *r, int i, int n, int lr, int lws, int mport, const char *job) {
    memset(r, 0, sizeof *r);
    int k = 0;
    snprintf(r->env[k++], 64, "RANK=%d", i);
    snprintf(r->env[k++], 64, "WORLD_SIZE=%d", n);
    snprintf(r->env[k++], 64, "LOCAL_RANK=%d", lr);
    snprintf(r->env[k++], 64, "LOCAL_WORLD_SIZE=%d", lws);
    snprintf(r->env[k++], 64, "MASTER_ADDR=localhost");
    snprintf(r->env[k++], 64, "MASTER_PORT=%d", mport);
    if (job) snprintf(r->env[k++], 64, "SLUICE_JOB_ID=%s", job);
    for (int j = 0; j < k; j++) r->envp[j] = r->env[j];
    r->cfg_text = "cluster {\n    timeout 5s\n}\n";
}

static void run_all(rank_run *r, int n) {
    pthread_t th[4];
    for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, run_rank, &r[i]);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
}

TEST(test_rendezvous) {
    int mp = port_base();
    rank_run r[3];
    /* ranks 0 and 2 on "host A" (local rank 0), rank 1 local rank 1: three distinct addresses */
    setup(&r[0], 0, 3, 0, 2, mp, "5eed");
    setup(&r[1], 1, 3, 1, 2, mp, "5eed");
    setup(&r[2], 2, 3, 0, 2, mp, "5eed");
    run_all(r, 3);
    for (int i = 0; i < 3; i++) {
        if (r[i].st) FAILF("rank %d: %s", i, r[i].err);
        ASSERT_EQ(r[i].world, 3);
        ASSERT_EQ(r[i].rank, i);
        ASSERT_EQ(r[i].rdzv, 1);
        /* rank 0 brings the master address; the others their address on the route to it */
        char a0[64], a1[64];
        snprintf(a0, sizeof a0, "localhost:%d", mp + 2);
        snprintf(a1, sizeof a1, "127.0.0.1:%d", mp + 3);
        ASSERT_STREQ(r[i].addrs[0], a0);
        ASSERT_STREQ(r[i].addrs[1], a1);
        snprintf(a1, sizeof a1, "127.0.0.1:%d", mp + 2);
        ASSERT_STREQ(r[i].addrs[2], a1);
    }
}

TEST(test_rendezvous_errors) {
    int mp = port_base() + 4;
    rank_run r[3];
    /* two ranks with the same local rank on one host: the same address */
    setup(&r[0], 0, 3, 0, 2, mp, NULL);
    setup(&r[1], 1, 3, 1, 2, mp, NULL);
    setup(&r[2], 2, 3, 1, 2, mp, NULL);
    run_all(r, 3);
    ASSERT_EQ(r[0].st, SL_EINVAL);
    ASSERT_CONTAINS(r[0].err, "ranks 1 and 2 both bring the address 127.0.0.1:");
    ASSERT_EQ(r[1].st == SL_EPEER || r[2].st == SL_EPEER, 1);
    /* another job's rank is turned away; rank 0 then waits in vain for rank 1 */
    setup(&r[0], 0, 2, 0, 1, mp, "aaaa");
    setup(&r[1], 1, 2, 0, 1, mp, "bbbb");
    r[0].cfg_text = r[1].cfg_text = "cluster {\n    timeout 1s\n}\n";
    run_all(r, 2);
    ASSERT_EQ(r[1].st, SL_EPEER);
    ASSERT_CONTAINS(r[1].err, "rank 0 refused: another job's rendezvous");
    ASSERT_EQ(r[0].st, SL_ETIMEDOUT);
    ASSERT_CONTAINS(r[0].err, "after 1 s, rank 1 of 2 has not come");
    /* a world size that differs */
    setup(&r[0], 0, 2, 0, 1, mp, NULL);
    setup(&r[1], 1, 3, 0, 1, mp, NULL);
    run_all(r, 2);
    ASSERT_EQ(r[0].st, SL_EINVAL);
    ASSERT_CONTAINS(r[0].err, "says the world is 3, rank 0 says 2");
    ASSERT_EQ(r[1].st, SL_EPEER);
    /* nobody listens: a rank gives up after the timeout, naming the address */
    setup(&r[1], 1, 2, 0, 1, mp, NULL);
    r[1].cfg_text = "cluster {\n    timeout 1s\n}\n";
    run_all(&r[1], 1);
    ASSERT_EQ(r[1].st, SL_ETIMEDOUT);
    char want[96];
    snprintf(want, sizeof want, "rendezvous at localhost:%d: rank 1 had no answer from rank 0 within 1 s", mp + 1);
    ASSERT_CONTAINS(r[1].err, want);
}

int main(void) {
    RUN(test_torchrun_one_host);
    RUN(test_torchrun_errors);
    RUN(test_precedence);
    RUN(test_kubeflow);
    RUN(test_pmi);
    RUN(test_rendezvous);
    RUN(test_rendezvous_errors);
    TEST_MAIN_END();
}
