/* The ring strategy's hooks (sluice/strategy.h): one replica is a plain run, a ps task is
 * refused, and two replicas (threads of this process, over TCP on 127.0.0.1) leave start
 * with rank 0's parameters and exchange with the exact average of their gradients, with
 * equal hash logs. The trainer end to end is tests/integration/test_train_ring.sh. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice/cluster.h"
#include "sluice/config.h"
#include "sluice/model.h"
#include "sluice/strategy.h"
#include "test.h"

/* libzmq is not built with ThreadSanitizer: its lock-free queues between the I/O thread and
 * the caller are invisible to TSan (see tests/integration/tsan_zmq.supp). */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) { return "called_from_lib:libzmq.so\nrace:libzmq.so\n"; }

TEST(test_single_replica) {
    sl_cluster c;
    ASSERT_OK(sl_cluster_resolve(NULL, NULL, NULL, &c));
    ASSERT_EQ(c.world, 1);
    sl_train_hooks h;
    sl_strategy_ring *s;
    ASSERT_OK(sl_strategy_ring_create(&c, NULL, &h, &s));
    ASSERT_EQ(h.world_size, 1);
    ASSERT_EQ(h.rank, 0);
    ASSERT_EQ(h.is_chief, 1);
    ASSERT(h.start == NULL && h.exchange == NULL && h.finish == NULL);
    sl_strategy_ring_free(s);
    sl_cluster_free(&c);
}

TEST(test_ps_task_refused) {
    sl_cluster_args a = {.peers = "127.0.0.1:7000,127.0.0.1:7001", .ps = "127.0.0.1:7100", .task_type = "ps"};
    sl_cluster c;
    ASSERT_OK(sl_cluster_resolve(&a, NULL, NULL, &c));
    sl_train_hooks h;
    sl_strategy_ring *s = (sl_strategy_ring *)&c;
    ASSERT_EQ(sl_strategy_ring_create(&c, NULL, &h, &s), SL_EINVAL);
    ASSERT(s == NULL);
    ASSERT_EQ(h.world_size, 0);
    ASSERT_STREQ(sl_errmsg(),
                 "ring strategy: this process is ps 0, not a ring member (chief or worker)\n"
                 "---> HINT: strategy ring trains on chief and worker tasks only; ps tasks belong to `strategy ps`");
    sl_cluster_free(&c);
}

static const char MODEL[] = "model m {\n  input 4\n  dense 3\n}\n";

typedef struct rep {
    int rank;
    char peers[64];
    uint64_t seed;
    sl_status st;
    float params[32], grads[32];
    size_t np;
    char *log;
    size_t loglen;
    char err[512];
} rep;

static void *replica(void *arg) {
    rep *r = arg;
    sl_cfg *cfg = NULL;
    sl_model *m = NULL;
    sl_optim *o = NULL;
    sl_cluster c = {0};
    sl_strategy_ring *s = NULL;
    FILE *log = open_memstream(&r->log, &r->loglen);
    sl_cluster_args a = {.peers = r->peers, .rank = r->rank, .has_rank = 1};
    sl_model_opts mo = sl_model_opts_default();
    mo.backend = SL_BACKEND_CPU;
    mo.threads = 1;
    mo.seed = r->seed;
    sl_optim_spec os = {.kind = SL_OPTIM_SGD, .momentum = 0.9f};
    sl_train_hooks h;
    sl_status st;
    if ((st = sl_cfg_parse(MODEL, strlen(MODEL), "m.sl", &cfg)) || (st = sl_model_from_config(cfg, "m", &mo, &m)) ||
        (st = sl_optim_create(m, &os, &o)) || (st = sl_cluster_resolve(&a, NULL, NULL, &c)))
        goto out;
    sl_strategy_ring_opts ro = {.timeout_s = 10, .hash_log = log};
    if ((st = sl_strategy_ring_create(&c, &ro, &h, &s))) goto out;
    int64_t step0 = 0;
    if ((st = h.start(h.ctx, m, o, &step0))) goto out;
    size_t np, ng;
    float *p = sl_model_params(m, &np);
    float *g = sl_model_grads(m, &ng);
    r->np = np;
    memcpy(r->params, p, np * sizeof *p);
    /* integer-valued gradients: rank 0 gives i, rank 1 gives 3i + 1; the average is exact */
    for (size_t i = 0; i < ng; i++) g[i] = r->rank == 0 ? (float)i : (float)(3 * i + 1);
    bool applied = true;
    if ((st = h.exchange(h.ctx, m, g, ng, 0, 0.1f, &applied))) goto out;
    if (applied) st = SL_EINVAL;
    memcpy(r->grads, g, ng * sizeof *g);
    if (!st) st = sl_optim_step(o, 0.1f);
    st = h.finish(h.ctx, st);
out:
    if (st) snprintf(r->err, sizeof r->err, "%s", sl_errmsg());
    r->st = st;
    sl_strategy_ring_free(s);
    sl_cluster_free(&c);
    sl_optim_free(o);
    sl_model_free(m);
    sl_cfg_free(cfg);
    fclose(log);
    return NULL;
}

TEST(test_two_replicas) {
    rep r[2];
    memset(r, 0, sizeof r);
    int port = 21000 + (int)(getpid() % 4000) * 2;
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        r[i].rank = i;
        r[i].seed = 1 + (uint64_t)i * 77; /* different initialisations: start must equalise them */
        snprintf(r[i].peers, sizeof r[i].peers, "127.0.0.1:%d,127.0.0.1:%d", port, port + 1);
        pthread_create(&th[i], NULL, replica, &r[i]);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++)
        if (r[i].st) FAILF("rank %d: %s", i, r[i].err);
    ASSERT_OK(r[0].st);
    ASSERT_OK(r[1].st);
    ASSERT_EQ(r[0].np, 15); /* dense 4 -> 3: kernel 12 + bias 3 */
    ASSERT(memcmp(r[0].params, r[1].params, r[0].np * sizeof(float)) == 0);
    for (size_t i = 0; i < r[0].np; i++) {
        ASSERT(r[0].grads[i] == (float)(2 * i) + 0.5f);
        ASSERT(r[1].grads[i] == r[0].grads[i]);
    }
    /* "step 0 params H" and the final "step 1 params H'", the same on both */
    ASSERT(r[0].log && r[1].log);
    ASSERT_STREQ(r[0].log, r[1].log);
    unsigned long long h0, h1;
    ASSERT_EQ(sscanf(r[0].log, "step 0 params %16llx\nstep 1 params %16llx\n", &h0, &h1), 2);
    ASSERT(h0 != h1);
    free(r[0].log);
    free(r[1].log);
}

int main(void) {
    RUN(test_single_replica);
    RUN(test_ps_task_refused);
    RUN(test_two_replicas);
    TEST_MAIN_END();
}
