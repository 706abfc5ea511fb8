/* dist/ring.c: allreduce (sum, average, int32, fp16), broadcast and barrier on rings of 2..8
 * ranks (threads in this process over TCP on 127.0.0.1), exact sums of integer-valued
 * floats, bit-identical repeats, and failure: a rank that dies mid-allreduce (a forked
 * process killed with SIGKILL) or stays silent turns into SL_EPEER / SL_ETIMEDOUT naming it. */
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "sluice/compress.h"
#include "sluice/ring.h"
#include "sluice/transport.h"
#include "test.h"

/* libzmq is not built with ThreadSanitizer: its lock-free queues between the I/O thread and
 * the caller are invisible to TSan, which then reports the handover of every message. */
#if defined(__SANITIZE_THREAD__)
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) { return "called_from_lib:libzmq.so\nrace:libzmq.so\n"; }
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t ring_job; /* the job id make_ring gives its transports */

/* n transports bound on ephemeral ports of 127.0.0.1, told each other's ports, connected. */
static int make_ring(int n, double timeout, sl_tp **tps) {
    const char *addrs[16];
    for (int i = 0; i < n; i++) addrs[i] = "127.0.0.1:0";
    sl_tp_opts o = {.timeout_s = timeout, .job_id = ring_job};
    for (int i = 0; i < n; i++)
        if (sl_tp_create(i, n, addrs, &o, &tps[i])) return -1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (i != j && sl_tp_set_peer(tps[i], j, sl_tp_endpoint(tps[j]))) return -1;
    for (int i = 0; i < n; i++)
        if (sl_tp_connect(tps[i])) return -1;
    return 0;
}

typedef struct job {
    sl_tp *tp;
    sl_ring_opts ro;
    int rank, n, what, reps;
    size_t count;
    void *buf;
    sl_dtype dt;
    sl_reduce_op op;
    int root;
    sl_compress_spec cs;  /* DO_CALLRED: the codec */
    int32_t flag;         /* DO_CALLRED: in: this rank's flag; out: the sum */
    int steps;            /* DO_CALLRED: steps of fresh gradients */
    uint64_t hash;        /* DO_CALLRED: FNV-1a over every step's result */
    int cs_mix;           /* DO_CALLRED: rank 1 uses sign instead of cs (a misconfigured replica) */
    const size_t *cuts;   /* DO_RANGES / DO_SEPARATE: ranges [cuts[k+1], cuts[k]) in turn, ncuts + 1 points */
    int ncuts;
    sl_status st;
    char msg[1024];
    char path[8];         /* the path the ring took ("shm", "tcp") */
    double took;
} job;

enum { DO_ALLREDUCE, DO_BROADCAST, DO_BARRIER, DO_ALLGATHER, DO_CALLRED, DO_RANGES, DO_SEPARATE };

static uint64_t fnv_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* Rank r's gradient at step t: different on every rank and step. */
static float grad_at(int rank, int t, size_t i) {
    uint32_t x = (uint32_t)(i * 2654435761u) ^ (uint32_t)(rank * 40503 + t * 977);
    x ^= x >> 15;
    x *= 0x2c1b3c6du;
    x ^= x >> 12;
    return ((float)(x % 20001) - 10000.0f) * 1e-4f;
}

/* steps of compressed allreduce with error feedback; buf ends with the last result */
static sl_status run_callred(job *j, sl_ring *r) {
    sl_compress_ef *ef;
    sl_compress_spec cs = j->cs;
    if (j->cs_mix && j->rank == 1) cs = (sl_compress_spec){SL_COMPRESS_SIGN, 0};
    sl_status st = sl_compress_ef_create(&cs, j->count, &ef);
    if (st) return st;
    float *g = j->buf;
    j->hash = 0xcbf29ce484222325ULL;
    int32_t f = j->flag;
    for (int t = 0; t < (j->steps ? j->steps : 1) && !st; t++) {
        for (size_t i = 0; i < j->count; i++) g[i] = grad_at(j->rank, t, i);
        f = j->flag;
        st = sl_ring_allreduce_compressed(r, ef, g, j->count, SL_REDUCE_AVG, (uint32_t)t, &f, NULL);
        if (!st) j->hash = fnv_bytes(j->hash, g, j->count * sizeof *g);
    }
    j->flag = f;
    sl_compress_ef_free(ef);
    return st;
}

static atomic_int barrier_in;
static atomic_int barrier_bad;

static void *run_job(void *arg) {
    job *j = arg;
    sl_ring *r;
    j->st = sl_ring_create(j->tp, &j->ro, &r);
    if (!j->st) snprintf(j->path, sizeof j->path, "%s", sl_ring_path_name(r));
    double t0 = now_s();
    for (int k = 0; k < (j->reps ? j->reps : 1) && !j->st; k++) {
        if (j->what == DO_ALLREDUCE) j->st = sl_ring_allreduce(r, j->buf, j->count, j->dt, j->op, 7);
        else if (j->what == DO_BROADCAST) j->st = sl_ring_broadcast(r, j->buf, j->count, j->root, 9);
        else if (j->what == DO_ALLGATHER) j->st = sl_ring_allgather(r, j->buf, j->count, 11);
        else if (j->what == DO_CALLRED) j->st = run_callred(j, r);
        else if (j->what == DO_RANGES) /* the buckets of one allreduce, aligned to its segments */
            for (int c = 0; c < j->ncuts && !j->st; c++)
                j->st = sl_ring_allreduce_range(r, j->buf, j->count, j->cuts[c + 1], j->cuts[c], j->dt, j->op, 7);
        else if (j->what == DO_SEPARATE) /* each range as a tensor of its own */
            for (int c = 0; c < j->ncuts && !j->st; c++)
                j->st = sl_ring_allreduce(r, (float *)j->buf + j->cuts[c + 1], j->cuts[c] - j->cuts[c + 1], j->dt,
                                          j->op, 7);
        else {
            atomic_fetch_add(&barrier_in, 1);
            j->st = sl_ring_barrier(r);
            if (atomic_load(&barrier_in) < j->n * (k + 1)) atomic_fetch_add(&barrier_bad, 1);
        }
    }
    j->took = now_s() - t0;
    if (j->st) snprintf(j->msg, sizeof j->msg, "%s", sl_errmsg());
    sl_ring_destroy(r);
    return NULL;
}

/* Run the same job on n ranks; bufs[i] is rank i's buffer. Returns 0 when all succeeded. */
static const char *const *run_hosts; /* run_all: rank i's host label (sl_ring_opts.host), or NULL */

static int run_all(int n, job *tmpl, void **bufs, job *out) {
    sl_tp *tps[16];
    if (make_ring(n, tmpl->ro.chunk_bytes == 1 ? 5 : 30, tps)) { printf("  make_ring: %s\n", sl_errmsg()); return -1; }
    pthread_t th[16];
    for (int i = 0; i < n; i++) {
        out[i] = *tmpl;
        out[i].tp = tps[i];
        out[i].rank = i;
        out[i].n = n;
        out[i].buf = bufs ? bufs[i] : NULL;
        if (run_hosts) out[i].ro.host = run_hosts[i];
        pthread_create(&th[i], NULL, run_job, &out[i]);
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        if (out[i].st) { printf("  rank %d: %s\n", i, out[i].msg); bad = 1; }
    }
    for (int i = 0; i < n; i++) sl_tp_destroy(tps[i]);
    return bad ? -1 : 0;
}

static float val(int rank, size_t i) { return (float)((int)(i % 1000) - 300) * (float)(rank + 1); }

/* After 300 ms (for messages sent to the ranks' inboxes to arrive), the n ranks of tps sum
 * val(rank, i) over 100003 floats twice, each in its thread, in 16 KiB chunks. Returns 0 when
 * every rank returned SL_OK with n * (1+2+3) * val(0, i) everywhere, else 1 (printed). */
static int allreduce_twice(sl_tp **tps, int n) {
    enum { MAX = 8 };
    if (n > MAX) return 1;
    struct timespec ts = {0, 300 * 1000000};
    nanosleep(&ts, NULL);
    size_t len = 100003;
    float *bufs[MAX];
    job jobs[MAX];
    pthread_t th[MAX];
    for (int r = 0; r < n; r++) {
        bufs[r] = malloc(len * 4);
        for (size_t i = 0; i < len; i++) bufs[r][i] = val(r, i);
        jobs[r] = (job){.tp = tps[r], .rank = r, .n = n, .what = DO_ALLREDUCE, .reps = 2, .count = len,
                        .buf = bufs[r], .dt = SL_DT_F32, .op = SL_REDUCE_SUM,
                        .ro = {.chunk_bytes = 16 << 10, .path = SL_RING_PATH_TCP}}; /* the wire under test */
        pthread_create(&th[r], NULL, run_job, &jobs[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    int wrong = 0;
    for (int r = 0; r < n; r++) {
        if (jobs[r].st) { printf("  rank %d: %s\n", r, jobs[r].msg); wrong = 1; }
        for (size_t i = 0; i < len && !wrong; i++)
            if (bufs[r][i] != val(0, i) * 6 * n) wrong = 1; /* sum twice: n * (1+2+3) */
    }
    for (int r = 0; r < n; r++) free(bufs[r]);
    return wrong;
}

TEST(test_allreduce_sum_exact) {
#if defined(__SANITIZE_THREAD__)
    /* under TSan a quarter as long (it took 26 s): still many 64 KiB chunks per segment in
     * flight for odd n, and no multiple of any n */
    size_t big = 250007;
#else
    size_t big = 1000003;
#endif
    for (int n = 2; n <= 8; n++) {
        size_t lens[] = {0, 1, (size_t)n - 1, (size_t)n + 1, big};
        for (int li = 0; li < 5; li++) {
            size_t len = lens[li];
            void *bufs[8];
            for (int r = 0; r < n; r++) {
                float *b = malloc(len * 4 + 4);
                for (size_t i = 0; i < len; i++) b[i] = val(r, i);
                bufs[r] = b;
            }
            job t = {.what = DO_ALLREDUCE, .count = len, .dt = SL_DT_F32, .op = SL_REDUCE_SUM,
                     .ro = {.chunk_bytes = (n % 2) ? 64 << 10 : 0}};
            job out[8];
            int rc = run_all(n, &t, bufs, out);
            int wrong = 0;
            float tri = (float)(n * (n + 1) / 2);
            for (int r = 0; r < n && !wrong; r++)
                for (size_t i = 0; i < len; i++)
                    if (((float *)bufs[r])[i] != val(0, i) * tri) {
                        printf("  n=%d len=%zu rank %d [%zu] = %g, expected %g\n", n, len, r, i,
                               ((float *)bufs[r])[i], val(0, i) * tri);
                        wrong = 1;
                        break;
                    }
            for (int r = 0; r < n; r++) free(bufs[r]);
            ASSERT_EQ(rc, 0);
            ASSERT_EQ(wrong, 0);
        }
    }
}

TEST(test_allreduce_avg_and_int32) {
    int n = 4;
    size_t len = 10007;
    void *bufs[4], *ibufs[4];
    for (int r = 0; r < n; r++) {
        float *b = malloc(len * 4);
        int32_t *ib = malloc(len * 4);
        for (size_t i = 0; i < len; i++) { b[i] = (float)(2 * (r + 1)) * (float)(i % 5); ib[i] = (int32_t)(i * (size_t)(r + 1)) - 5000; }
        bufs[r] = b;
        ibufs[r] = ib;
    }
    job t = {.what = DO_ALLREDUCE, .count = len, .dt = SL_DT_F32, .op = SL_REDUCE_AVG, .ro = {.chunk_bytes = 4096}};
    job out[4];
    ASSERT_EQ(run_all(n, &t, bufs, out), 0);
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < len; i++) ASSERT(((float *)bufs[r])[i] == 5.0f * (float)(i % 5));
    t.dt = SL_DT_I32;
    t.op = SL_REDUCE_SUM;
    ASSERT_EQ(run_all(n, &t, ibufs, out), 0);
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < len; i++) ASSERT_EQ(((int32_t *)ibufs[r])[i], (int32_t)(i * 10) - 20000);
    for (int r = 0; r < n; r++) { free(bufs[r]); free(ibufs[r]); }
}

TEST(test_allreduce_bad_args) {
    sl_tp *tps[1];
    const char *a[] = {"127.0.0.1:0"};
    ASSERT_OK(sl_tp_create(0, 1, a, NULL, &tps[0]));
    sl_ring *r;
    ASSERT_OK(sl_ring_create(tps[0], NULL, &r));
    int32_t x[3] = {1, 2, 3};
    ASSERT_EQ(sl_ring_allreduce(r, x, 3, SL_DT_I32, SL_REDUCE_AVG, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "ring allreduce: int32 supports sum only");
    ASSERT_EQ(sl_ring_allreduce(r, x, 3, SL_DT_F64, SL_REDUCE_SUM, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "ring allreduce: dtype float64 is not supported (float32, int32)");
    ASSERT_EQ(sl_ring_broadcast(r, x, 12, 1, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "ring broadcast: root 1 is not a rank (0..0)");
    /* one rank: sum and average leave the values as they are */
    float f[2] = {1.5f, -2};
    ASSERT_OK(sl_ring_allreduce(r, f, 2, SL_DT_F32, SL_REDUCE_AVG, 0));
    ASSERT(f[0] == 1.5f && f[1] == -2);
    ASSERT_OK(sl_ring_barrier(r));
    sl_ring_destroy(r);
    sl_tp_destroy(tps[0]);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static uint32_t lcg(uint32_t *s) { *s = *s * 1664525u + 1013904223u; return *s >> 8; }

TEST(test_allreduce_bit_reproducible) {
    int n = 5;
    size_t len = 300007;
    float *in[5], *a[5], *b[5];
    uint32_t seed = 42;
    for (int r = 0; r < n; r++) {
        in[r] = malloc(len * 4);
        a[r] = malloc(len * 4);
        b[r] = malloc(len * 4);
        for (size_t i = 0; i < len; i++) in[r][i] = ((float)lcg(&seed) / 16777216.0f - 0.5f) * 3.3f;
        memcpy(a[r], in[r], len * 4);
        memcpy(b[r], in[r], len * 4);
    }
    job t = {.what = DO_ALLREDUCE, .count = len, .dt = SL_DT_F32, .op = SL_REDUCE_AVG, .ro = {.chunk_bytes = 32 << 10}};
    job out[5];
    ASSERT_EQ(run_all(n, &t, (void **)a, out), 0);
    t.ro.chunk_bytes = 0; /* another chunking: the sums are the same additions */
    ASSERT_EQ(run_all(n, &t, (void **)b, out), 0);
    for (int r = 0; r < n; r++) {
        ASSERT_MEMEQ(a[r], a[0], len * 4); /* every rank holds the same bits */
        ASSERT_MEMEQ(a[r], b[r], len * 4); /* and so does the second run */
    }
    /* and the values are the sums, to float rounding */
    for (size_t i = 0; i < len; i += 997) {
        double s = 0;
        for (int r = 0; r < n; r++) s += in[r][i];
        ASSERT(fabs(a[0][i] - s / n) < 1e-5);
    }
    for (int r = 0; r < n; r++) { free(in[r]); free(a[r]); free(b[r]); }
}

/* Ranges of one allreduce (the bucketed gradient exchange): any partition, reduced range
 * by range (backward order: highest first), leaves exactly the bits of the whole
 * allreduce, float32 on 2, 3 and 5 ranks and fp16 on the wire; the same ranges reduced as
 * tensors of their own do not (another association order, other fp16 roundings), which
 * is why sl_ring_allreduce_range exists. */
TEST(test_allreduce_range_identical) {
    size_t count = 10007;
    const size_t cuts[] = {10007, 9000, 7001, 5003, 5002, 1234, 17, 0}; /* one range of a single float */
    int ncuts = 7;
    uint32_t seed = 7;
    float *in[5], *whole[5], *ranged[5], *separate[5];
    for (int r = 0; r < 5; r++) {
        in[r] = malloc(count * 4);
        whole[r] = malloc(count * 4);
        ranged[r] = malloc(count * 4);
        separate[r] = malloc(count * 4);
        for (size_t i = 0; i < count; i++) in[r][i] = ((float)lcg(&seed) / 16777216.0f - 0.5f) * 3.3f;
    }
    const int ns[] = {2, 3, 5, 2};
    for (int c = 0; c < 4; c++) {
        int n = ns[c], fp16 = c == 3;
        for (int r = 0; r < n; r++) {
            memcpy(whole[r], in[r], count * 4);
            memcpy(ranged[r], in[r], count * 4);
            memcpy(separate[r], in[r], count * 4);
        }
        job out[5];
        job t = {.what = DO_ALLREDUCE, .count = count, .dt = SL_DT_F32, .op = SL_REDUCE_AVG,
                 .ro = {.chunk_bytes = 4096, .fp16 = fp16}, .cuts = cuts, .ncuts = ncuts};
        ASSERT_EQ(run_all(n, &t, (void **)whole, out), 0);
        t.what = DO_RANGES;
        ASSERT_EQ(run_all(n, &t, (void **)ranged, out), 0);
        t.what = DO_SEPARATE;
        ASSERT_EQ(run_all(n, &t, (void **)separate, out), 0);
        size_t differ = 0;
        for (int r = 0; r < n; r++) {
            ASSERT_MEMEQ(ranged[r], whole[r], count * 4);
            ASSERT_MEMEQ(whole[r], whole[0], count * 4);
        }
        for (size_t i = 0; i < count; i++) differ += bits(separate[0][i]) != bits(whole[0][i]);
        if (n > 2 || fp16) ASSERT(differ > 0); /* 2 ranks in float32: a + b == b + a, any cut agrees */
        else ASSERT_EQ(differ, 0);
    }
    for (int r = 0; r < 5; r++) { free(in[r]); free(whole[r]); free(ranged[r]); free(separate[r]); }
    /* a range outside the tensor: refused, the ring stays usable */
    sl_tp *tps[1];
    const char *a1[] = {"127.0.0.1:0"};
    ASSERT_OK(sl_tp_create(0, 1, a1, NULL, &tps[0]));
    sl_ring *r1;
    ASSERT_OK(sl_ring_create(tps[0], NULL, &r1));
    float v[4] = {1, 2, 3, 4};
    ASSERT_EQ(sl_ring_allreduce_range(r1, v, 4, 3, 2, SL_DT_F32, SL_REDUCE_SUM, 1), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "ring allreduce: range [3, 2) is not within the 4 elements");
    ASSERT_EQ(sl_ring_allreduce_range(r1, v, 4, 0, 5, SL_DT_F32, SL_REDUCE_SUM, 1), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "ring allreduce: range [0, 5) is not within the 4 elements");
    ASSERT_OK(sl_ring_allreduce_range(r1, v, 4, 1, 3, SL_DT_F32, SL_REDUCE_SUM, 1));
    ASSERT(v[0] == 1 && v[3] == 4);
    sl_ring_destroy(r1);
    sl_tp_destroy(tps[0]);
}

/* Every collective over shared memory and over the transport, on 2, 3 and 4 ranks, with
 * windows and chunks far smaller than the tensors (many windows; ring segments that start
 * and end inside windows): the same bits on every rank and on both paths. */
TEST(test_shm_matches_tcp) {
    enum { MAXN = 4 };
    const size_t count = 10007;
    const size_t cuts[] = {10007, 9000, 7001, 5003, 5002, 1234, 17, 0};
    struct {
        int what;
        sl_dtype dt;
        sl_reduce_op op;
        int fp16;
        sl_compress_spec cs;
    } cases[] = {
        {DO_ALLREDUCE, SL_DT_F32, SL_REDUCE_SUM, 0, {0}}, {DO_ALLREDUCE, SL_DT_F32, SL_REDUCE_AVG, 0, {0}},
        {DO_ALLREDUCE, SL_DT_F32, SL_REDUCE_SUM, 1, {0}}, {DO_ALLREDUCE, SL_DT_F32, SL_REDUCE_AVG, 1, {0}},
        {DO_ALLREDUCE, SL_DT_I32, SL_REDUCE_SUM, 0, {0}}, {DO_RANGES, SL_DT_F32, SL_REDUCE_AVG, 0, {0}},
        {DO_RANGES, SL_DT_F32, SL_REDUCE_SUM, 1, {0}},    {DO_BROADCAST, SL_DT_U8, SL_REDUCE_SUM, 0, {0}},
        {DO_ALLGATHER, SL_DT_U8, SL_REDUCE_SUM, 0, {0}},  {DO_CALLRED, SL_DT_F32, SL_REDUCE_AVG, 0, {SL_COMPRESS_INT8, 0}},
    };
    size_t bytes = (size_t)MAXN * count * 4;
    unsigned char *b[2][MAXN];
    for (int p = 0; p < 2; p++)
        for (int r = 0; r < MAXN; r++) b[p][r] = malloc(bytes);
    for (int n = 2; n <= MAXN; n++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            job out[2][MAXN];
            for (int p = 0; p < 2; p++) {
                for (int r = 0; r < n; r++) {
                    float *f = (float *)(void *)b[p][r];
                    int32_t *q = (int32_t *)(void *)b[p][r];
                    for (size_t i = 0; i < (size_t)MAXN * count; i++) {
                        if (cases[c].dt == SL_DT_I32) q[i] = (int32_t)(i * 2654435761u) ^ (r << 20);
                        else f[i] = grad_at(r, (int)c, i) * (i % 5 ? 1.0f : 777.0f);
                    }
                }
                job t = {.what = cases[c].what, .count = cases[c].what == DO_ALLGATHER ? 3001 : count,
                         .dt = cases[c].dt, .op = cases[c].op, .root = n - 1, .cs = cases[c].cs, .steps = 3,
                         .cuts = cuts, .ncuts = 7,
                         .ro = {.chunk_bytes = 4096, .fp16 = cases[c].fp16, .shm_window = 4096,
                                .path = p ? SL_RING_PATH_SHM : SL_RING_PATH_TCP}};
                ASSERT_EQ(run_all(n, &t, (void **)b[p], out[p]), 0);
                for (int r = 0; r < n; r++) ASSERT_STREQ(out[p][r].path, p ? "shm" : "tcp");
            }
            size_t len = cases[c].what == DO_ALLGATHER ? (size_t)n * 3001 : cases[c].what == DO_BROADCAST ? count : count * 4;
            for (int r = 0; r < n; r++) {
                if (memcmp(b[0][r], b[1][r], len)) FAILF("%d ranks, case %zu: rank %d differs between tcp and shm", n, c, r);
                if (memcmp(b[1][r], b[1][0], len)) FAILF("%d ranks, case %zu: rank %d differs from rank 0", n, c, r);
                if (cases[c].what == DO_CALLRED) ASSERT_U64(out[0][r].hash, out[1][r].hash);
            }
        }
    }
    for (int p = 0; p < 2; p++)
        for (int r = 0; r < MAXN; r++) free(b[p][r]);
}

/* Ranks on several hosts, some sharing one (host labels, as a launcher gives them): shared
 * memory inside each host, a transport ring among the hosts' leaders. Exact sums, the same
 * bits on every rank and on a second run, ranges identical to the whole tensor, broadcast
 * from a rank that leads no host, allgather in rank order, compressed exchange. */
static void hierarchy_body(void) {
    enum { MAXN = 5 };
    static const char *const layouts[][MAXN] = {
        {"a", "a", "b", "b"}, {"a", "b", "a", "b"}, {"a", "a", "a", "b"}, {"x", "y", "y", "z", "y"}};
    const int ns[] = {4, 4, 4, 5};
    const size_t count = 10007;
    const size_t cuts[] = {10007, 9000, 7001, 5003, 5002, 1234, 17, 0};
    float *b[3][MAXN];
    for (int p = 0; p < 3; p++)
        for (int r = 0; r < MAXN; r++) b[p][r] = malloc((size_t)MAXN * count * 4);
    for (int l = 0; l < 4; l++) {
        int n = ns[l];
        run_hosts = layouts[l];
        job out[MAXN];
        /* exact: integer-valued floats */
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < count; i++) b[0][r][i] = val(r, i);
        job t = {.what = DO_ALLREDUCE, .count = count, .dt = SL_DT_F32, .op = SL_REDUCE_SUM,
                 .ro = {.chunk_bytes = 4096, .shm_window = 4096}};
        ASSERT_EQ(run_all(n, &t, (void **)b[0], out), 0);
        for (int r = 0; r < n; r++) {
            ASSERT_STREQ(out[r].path, "shm+tcp");
            for (size_t i = 0; i < count; i++)
                if (b[0][r][i] != val(0, i) * (float)(n * (n + 1) / 2)) {
                    FAILF("layout %d rank %d element %zu: %g", l, r, i, b[0][r][i]);
                    break;
                }
        }
        /* average with fp16 between hosts: whole, again, and as ranges */
        for (int k = 0; k < 3; k++) {
            for (int r = 0; r < n; r++)
                for (size_t i = 0; i < count; i++) b[k][r][i] = grad_at(r, l, i) * (i % 5 ? 1.0f : 777.0f);
            t = (job){.what = k == 2 ? DO_RANGES : DO_ALLREDUCE, .count = count, .dt = SL_DT_F32,
                      .op = SL_REDUCE_AVG, .cuts = cuts, .ncuts = 7,
                      .ro = {.chunk_bytes = 4096, .shm_window = 4096, .fp16 = 1}};
            ASSERT_EQ(run_all(n, &t, (void **)b[k], out), 0);
        }
        for (int r = 0; r < n; r++) {
            ASSERT_MEMEQ(b[0][r], b[0][0], count * 4);
            ASSERT_MEMEQ(b[1][r], b[0][0], count * 4);
            ASSERT_MEMEQ(b[2][r], b[0][0], count * 4);
        }
        for (size_t i = 0; i < count; i += 97) { /* the mean, to float16's precision */
            double want = 0, mag = 0;
            for (int r = 0; r < n; r++) {
                double x = grad_at(r, l, i) * (i % 5 ? 1.0 : 777.0);
                want += x;
                mag += fabs(x);
            }
            want /= n;
            if (fabs(b[0][0][i] - want) > 2e-3 * mag / n + 1e-6)
                FAILF("layout %d element %zu: %g, mean %g", l, i, b[0][0][i], want);
        }
        /* broadcast from rank 2 (a leader in no layout but the second) */
        for (int r = 0; r < n; r++) memset(b[0][r], r == 2 ? 0x5a : r, 7001);
        t = (job){.what = DO_BROADCAST, .count = 7001, .root = 2, .ro = {.chunk_bytes = 4096, .shm_window = 4096}};
        ASSERT_EQ(run_all(n, &t, (void **)b[0], out), 0);
        for (int r = 0; r < n; r++) ASSERT_MEMEQ(b[0][r], b[0][2], 7001);
        /* allgather: block k is rank k's */
        for (int r = 0; r < n; r++) {
            memset(b[0][r], 0, (size_t)n * 3001);
            memset((char *)b[0][r] + (size_t)r * 3001, 'A' + r, 3001);
        }
        t = (job){.what = DO_ALLGATHER, .count = 3001, .ro = {.chunk_bytes = 4096, .shm_window = 4096}};
        ASSERT_EQ(run_all(n, &t, (void **)b[0], out), 0);
        for (int r = 0; r < n; r++)
            for (int k = 0; k < n; k++) ASSERT_EQ(((char *)b[0][r])[(size_t)k * 3001 + 1500], 'A' + k);
        /* compressed: the same bits everywhere */
        t = (job){.what = DO_CALLRED, .count = count, .cs = {SL_COMPRESS_INT8, 0}, .steps = 3,
                  .ro = {.chunk_bytes = 4096, .shm_window = 4096}};
        ASSERT_EQ(run_all(n, &t, (void **)b[0], out), 0);
        for (int r = 0; r < n; r++) ASSERT_U64(out[r].hash, out[0].hash);
        t = (job){.what = DO_BARRIER, .reps = 3, .ro = {.shm_window = 4096}};
        ASSERT_EQ(run_all(n, &t, NULL, out), 0);
    }
    for (int p = 0; p < 3; p++)
        for (int r = 0; r < MAXN; r++) free(b[p][r]);
}

TEST(test_hierarchy) {
    hierarchy_body();
    run_hosts = NULL; /* also after a failed check */
}

/* A rank told to use the transport while the others choose for themselves: it skips the
 * set-up they run, so the first messages disagree; every rank fails naming a peer, none
 * hangs. */
TEST(test_paths_disagree) {
    sl_tp *tps[2];
    ASSERT_EQ(make_ring(2, 5, tps), 0);
    float x[2][64];
    job j[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        j[i] = (job){.tp = tps[i], .rank = i, .n = 2, .what = DO_ALLREDUCE, .count = 64, .buf = x[i],
                     .dt = SL_DT_F32, .op = SL_REDUCE_SUM, .ro = {.path = i ? SL_RING_PATH_AUTO : SL_RING_PATH_TCP}};
        pthread_create(&th[i], NULL, run_job, &j[i]);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        printf("  rank %d: %s\n", i, j[i].msg);
        ASSERT_EQ(j[i].st, SL_EPEER);
        ASSERT_CONTAINS(j[i].msg, i ? "rank 0 (" : "rank 1 (");
    }
    for (int i = 0; i < 2; i++) sl_tp_destroy(tps[i]);
}

TEST(test_fp16_conversion) {
    /* the portable path and F16C agree on every half value and on rounding ties */
    uint16_t h1[65536], h2[65536];
    float f[65536], g[65536];
    for (int i = 0; i < 65536; i++) h1[i] = (uint16_t)i;
    sl__f16c_off = 1;
    sl_f16_to_f32(h1, f, 65536);
    sl__f16c_off = 0;
    sl_f16_to_f32(h1, g, 65536);
    for (int i = 0; i < 65536; i++) {
        if (isnan(f[i])) { ASSERT(isnan(g[i])); continue; }
        ASSERT_U64(bits(f[i]), bits(g[i]));
    }
    uint32_t seed = 7;
    for (int i = 0; i < 65536; i++) {
        uint32_t x = lcg(&seed) << 8 | (lcg(&seed) & 0xff);
        if (i < 20000) x = (x & 0x80001fffu) | ((uint32_t)(100 + i % 50) << 23) | 0x1000u; /* ties and near ties */
        memcpy(&f[i], &x, 4);
        if (isnan(f[i])) f[i] = 1.0f;
    }
    sl__f16c_off = 1;
    sl_f32_to_f16(f, h1, 65536);
    sl__f16c_off = 0;
    sl_f32_to_f16(f, h2, 65536);
    ASSERT_MEMEQ(h1, h2, sizeof h1);
    float one = 1.0f, big = 70000.0f, third = 1.0f / 3;
    uint16_t h;
    sl_f32_to_f16(&one, &h, 1);
    ASSERT_EQ(h, 0x3c00);
    sl_f32_to_f16(&big, &h, 1);
    ASSERT_EQ(h, 0x7c00);
    sl_f32_to_f16(&third, &h, 1);
    ASSERT_EQ(h, 0x3555);
}

TEST(test_allreduce_fp16) {
    int n = 3;
    size_t len = 200003;
    float *bufs[3], *orig[3];
    uint32_t seed = 3;
    for (int r = 0; r < n; r++) {
        bufs[r] = malloc(len * 4);
        orig[r] = malloc(len * 4);
        for (size_t i = 0; i < len; i++) orig[r][i] = bufs[r][i] = (float)lcg(&seed) / 16777216.0f * 2 - 1;
    }
    job t = {.what = DO_ALLREDUCE, .count = len, .dt = SL_DT_F32, .op = SL_REDUCE_SUM,
             .ro = {.chunk_bytes = 100000, .fp16 = 1}};
    job out[3];
    ASSERT_EQ(run_all(n, &t, (void **)bufs, out), 0);
    double worst = 0;
    for (size_t i = 0; i < len; i++) {
        double s = 0, mag = 0;
        for (int r = 0; r < n; r++) { s += orig[r][i]; mag += fabs(orig[r][i]); }
        /* each of the n-1 partial sums and the result is rounded to 11 significant bits */
        double err = fabs(bufs[0][i] - s), tol = (n + 1) * mag * (1.0 / 2048) + 1e-7;
        if (err / tol > worst) worst = err / tol;
        for (int r = 1; r < n; r++) ASSERT_U64(bits(bufs[r][i]), bits(bufs[0][i]));
    }
    ASSERT(worst <= 1.0);
    for (int r = 0; r < n; r++) { free(bufs[r]); free(orig[r]); }
}

TEST(test_broadcast_and_barrier) {
    int n = 5;
    size_t len = 3 << 20 | 5;
    uint8_t *bufs[5];
    for (int r = 0; r < n; r++) {
        bufs[r] = malloc(len);
        for (size_t i = 0; i < len; i++) bufs[r][i] = r == 2 ? (uint8_t)(i * 31 + 7) : 0;
    }
    job t = {.what = DO_BROADCAST, .count = len, .root = 2, .ro = {.chunk_bytes = 64 << 10}};
    job out[8];
    ASSERT_EQ(run_all(n, &t, (void **)bufs, out), 0);
    for (int r = 0; r < n; r++) ASSERT_MEMEQ(bufs[r], bufs[2], len);
    for (int r = 0; r < n; r++) free(bufs[r]);
    for (int nn = 2; nn <= 6; nn += 4) {
        atomic_store(&barrier_in, 0);
        atomic_store(&barrier_bad, 0);
        job b = {.what = DO_BARRIER, .reps = 5};
        ASSERT_EQ(run_all(nn, &b, NULL, out), 0);
        ASSERT_EQ(atomic_load(&barrier_bad), 0);
        ASSERT_EQ(atomic_load(&barrier_in), nn * 5);
    }
}

TEST(test_allgather) {
    for (int n = 2; n <= 5; n += 3) {
        size_t len = 100003;
        uint8_t *bufs[5];
        for (int r = 0; r < n; r++) {
            bufs[r] = calloc((size_t)n, len);
            for (size_t i = 0; i < len; i++) bufs[r][(size_t)r * len + i] = (uint8_t)(i * 31 + 7 * r + 1);
        }
        job t = {.what = DO_ALLGATHER, .count = len, .ro = {.chunk_bytes = 8192}};
        job out[8];
        ASSERT_EQ(run_all(n, &t, (void **)bufs, out), 0);
        for (int r = 0; r < n; r++)
            for (int k = 0; k < n; k++)
                for (size_t i = 0; i < len; i += 997) ASSERT_EQ(bufs[r][(size_t)k * len + i], (uint8_t)(i * 31 + 7 * k + 1));
        for (int r = 1; r < n; r++) ASSERT_MEMEQ(bufs[r], bufs[0], (size_t)n * len);
        for (int r = 0; r < n; r++) free(bufs[r]);
    }
}

/* Compressed allreduce: every codec, 2 and 3 ranks, 20 steps of different gradients with
 * error feedback: every rank holds the same bits after every step (the hash over all the
 * steps' results), the flag is summed, and the result is the average of what the ranks
 * sent (checked against decodes made here, for int8 at step 0). */
TEST(test_allreduce_compressed_identical) {
    const sl_compress_spec specs[] = {{SL_COMPRESS_FP16, 0}, {SL_COMPRESS_INT8, 0}, {SL_COMPRESS_SIGN, 0},
                                      {SL_COMPRESS_TOPK, 0.01}};
    size_t count = 10007;
    for (int n = 2; n <= 3; n++)
        for (int c = 0; c < 4; c++) {
            float *bufs[3];
            for (int r = 0; r < n; r++) bufs[r] = malloc(count * sizeof(float));
            job t = {.what = DO_CALLRED, .count = count, .cs = specs[c], .steps = 20, .ro = {.chunk_bytes = 4096}};
            job out[8];
            ASSERT_EQ(run_all(n, &t, (void **)bufs, out), 0);
            for (int r = 1; r < n; r++) {
                ASSERT_U64(out[r].hash, out[0].hash);
                ASSERT_MEMEQ(bufs[r], bufs[0], count * sizeof(float));
            }
            for (int r = 0; r < n; r++) free(bufs[r]);
        }
    /* one step of int8 on 2 ranks equals the mean of the two decoded payloads */
    float *b2[2] = {malloc(count * 4), malloc(count * 4)};
    job t = {.what = DO_CALLRED, .count = count, .cs = specs[1], .steps = 1, .flag = 1};
    job out[2];
    ASSERT_EQ(run_all(2, &t, (void **)b2, out), 0);
    ASSERT_EQ(out[0].flag, 2);
    ASSERT_EQ(out[1].flag, 2);
    float *want = calloc(count, 4), *g = malloc(count * 4);
    size_t cap = sl_compress_size(&specs[1], count), len;
    unsigned char *p = malloc(cap);
    for (int r = 0; r < 2; r++) {
        for (size_t i = 0; i < count; i++) g[i] = grad_at(r, 0, i);
        ASSERT_OK(sl_compress_encode(&specs[1], g, count, p, cap, &len));
        ASSERT_OK(sl_compress_decode_add(&specs[1], p, len, count, want, NULL));
    }
    for (size_t i = 0; i < count; i++) want[i] /= 2;
    ASSERT_MEMEQ(b2[0], want, count * 4);
    ASSERT_MEMEQ(b2[1], want, count * 4);
    free(b2[0]), free(b2[1]), free(want), free(g), free(p);
    /* a replica with another codec: its payloads have another length, refused naming it */
    float *b3[2] = {malloc(count * 4), malloc(count * 4)};
    job t3 = {.what = DO_CALLRED, .count = count, .cs = specs[1], .steps = 1, .cs_mix = 1};
    ASSERT_EQ(run_all(2, &t3, (void **)b3, out), -1);
    ASSERT_EQ(out[0].st, SL_EPEER);
    ASSERT_CONTAINS(out[0].msg, "rank 1 (");
    ASSERT_CONTAINS(out[0].msg, "same count, dtype, fp16 and compress= setting");
    free(b3[0]), free(b3[1]);
}

TEST(test_silent_peer_times_out) {
    sl_tp *tps[2];
    ASSERT_EQ(make_ring(2, 1.0, tps), 0);
    sl_ring *r;
    sl_ring_opts tcp = {.path = SL_RING_PATH_TCP}; /* rank 1 never creates its ring */
    ASSERT_OK(sl_ring_create(tps[0], &tcp, &r));
    float x[4] = {1, 2, 3, 4};
    double t0 = now_s();
    ASSERT_EQ(sl_ring_allreduce(r, x, 4, SL_DT_F32, SL_REDUCE_SUM, 0), SL_ETIMEDOUT);
    double took = now_s() - t0;
    char want[128];
    snprintf(want, sizeof want, "no message from rank 1 (%s) in 1.0 s", sl_tp_endpoint(tps[1]));
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT(took >= 0.9 && took < 4.0);
    ASSERT_EQ(sl_ring_allreduce(r, x, 4, SL_DT_F32, SL_REDUCE_SUM, 0), SL_ESTATE);
    sl_ring_destroy(r);
    sl_tp_destroy(tps[0]);
    sl_tp_destroy(tps[1]);
}

/* Names in /dev/shm of job `job`'s segments (0 when none). */
static int shm_names_of(uint64_t job) {
    char pre[64];
    snprintf(pre, sizeof pre, "sluice-%016llx-", (unsigned long long)job);
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, pre, strlen(pre))) found++;
    closedir(d);
    return found;
}

/* Ranks as processes: each child binds, sends its endpoint up a pipe, reads everyone's,
 * runs a small allreduce, then a big one as two ranges. The victim takes part in the small
 * one and the first range, then kills or stops itself: the others are then waiting for it
 * inside the second range, a point the victim's code fixes, not a clock. The parent
 * collects each child's status and message; a stopped victim is killed once the others
 * are done. Returns the number of failed checks. */
static void victim_case(sl_ring_path path, int sig, uint64_t job) {
    enum { N = 4, VICTIM = 2 };
    const double timeout = 3.0;
    int up[N][2], down[N][2], res[N][2];
    pid_t pid[N];
    for (int i = 0; i < N; i++) {
        ASSERT_EQ(pipe(up[i]), 0);
        ASSERT_EQ(pipe(down[i]), 0);
        ASSERT_EQ(pipe(res[i]), 0);
        pid[i] = fork();
        ASSERT(pid[i] >= 0);
        if (pid[i] == 0) {
            const char *a[N];
            for (int k = 0; k < N; k++) a[k] = "127.0.0.1:0";
            sl_tp *tp;
            sl_tp_opts o = {.timeout_s = timeout, .job_id = job};
            if (sl_tp_create(i, N, a, &o, &tp)) _exit(3);
            char ep[64] = {0};
            snprintf(ep, sizeof ep, "%s", sl_tp_endpoint(tp));
            if (write(up[i][1], ep, sizeof ep) != sizeof ep) _exit(3);
            char all[N][64];
            if (read(down[i][0], all, sizeof all) != sizeof all) _exit(3);
            for (int k = 0; k < N; k++)
                if (k != i) sl_tp_set_peer(tp, k, all[k]);
            sl_tp_connect(tp);
            sl_ring *r;
            sl_ring_opts ro = {.chunk_bytes = 16 << 10, .path = path};
            if (sl_ring_create(tp, &ro, &r)) _exit(4);
            if (strcmp(sl_ring_path_name(r), path == SL_RING_PATH_SHM ? "shm" : "tcp")) _exit(5);
            size_t len = 1 << 20;
            float *x = calloc(len, 4);
            sl_status s = sl_ring_allreduce(r, x, 1000, SL_DT_F32, SL_REDUCE_SUM, 0);
            if (!s) s = sl_ring_allreduce_range(r, x, len, 0, len / 2, SL_DT_F32, SL_REDUCE_SUM, 0);
            if (i == VICTIM) raise(sig); /* SIGSTOP: the parent kills it later */
            double t0 = now_s();
            if (!s) s = sl_ring_allreduce_range(r, x, len, len / 2, len, SL_DT_F32, SL_REDUCE_SUM, 0);
            char msg[1100];
            snprintf(msg, sizeof msg, "%d %.2f %s", s, now_s() - t0, sl_errmsg());
            if (write(res[i][1], msg, sizeof msg) != sizeof msg) _exit(3);
            sl_ring_destroy(r);
            sl_tp_destroy(tp);
            free(x);
            _exit(0);
        }
    }
    char all[N][64];
    for (int i = 0; i < N; i++) ASSERT_EQ(read(up[i][0], all[i], 64), 64);
    for (int i = 0; i < N; i++) ASSERT_EQ(write(down[i][1], all, sizeof all), (ssize_t)sizeof all);
    char want[96];
    snprintf(want, sizeof want, "rank %d (%s)", VICTIM, all[VICTIM]);
    for (int i = 0; i < N; i++) {
        if (i == VICTIM) continue;
        int stt;
        waitpid(pid[i], &stt, 0);
        ASSERT(WIFEXITED(stt) && WEXITSTATUS(stt) == 0);
        char msg[1100];
        ASSERT_EQ(read(res[i][0], msg, sizeof msg), (ssize_t)sizeof msg);
        int code;
        double took;
        ASSERT_EQ(sscanf(msg, "%d %lf", &code, &took), 2);
        printf("  rank %d: %s\n", i, msg);
        /* the victim's neighbours name it; the others may learn it from their abort */
        if (sig == SIGSTOP) ASSERT(code == SL_ETIMEDOUT || code == SL_EPEER);
        else ASSERT_EQ(code, SL_EPEER);
        ASSERT_CONTAINS(msg, want);
        if (path == SL_RING_PATH_SHM && sig == SIGSTOP) ASSERT_CONTAINS(msg, "stopped");
        ASSERT(took < timeout + 2.0);
    }
    if (sig == SIGSTOP) kill(pid[VICTIM], SIGKILL);
    int stt;
    waitpid(pid[VICTIM], &stt, 0);
    ASSERT(WIFSIGNALED(stt) && WTERMSIG(stt) == SIGKILL);
    ASSERT_EQ(shm_names_of(job), 0);
    for (int i = 0; i < N; i++) {
        close(up[i][0]); close(up[i][1]); close(down[i][0]); close(down[i][1]); close(res[i][0]); close(res[i][1]);
    }
}

TEST(test_killed_rank_is_named) { victim_case(SL_RING_PATH_TCP, SIGKILL, 0x7e57000000000001ull); }
TEST(test_killed_rank_is_named_shm) { victim_case(SL_RING_PATH_SHM, SIGKILL, 0x7e57000000000002ull); }
TEST(test_stopped_rank_is_named_shm) { victim_case(SL_RING_PATH_SHM, SIGSTOP, 0x7e57000000000003ull); }

TEST(test_garbage_during_allreduce) {
    enum { N = 3 };
    sl_tp *tps[N];
    ASSERT_EQ(make_ring(N, 10, tps), 0);
    /* a stranger sends each rank a one-frame message, a junk header and a four-frame message */
    void *ctx = zmq_ctx_new();
    void *raw[N];
    int zero = 0;
    uint8_t junk[SL_MSG_HDR_SIZE];
    memset(junk, 0x5a, sizeof junk);
    for (int i = 0; i < N; i++) {
        char ep[128];
        snprintf(ep, sizeof ep, "tcp://%s", sl_tp_endpoint(tps[i]));
        raw[i] = zmq_socket(ctx, ZMQ_DEALER);
        zmq_setsockopt(raw[i], ZMQ_LINGER, &zero, sizeof zero);
        ASSERT_EQ(zmq_connect(raw[i], ep), 0);
        zmq_send(raw[i], "x", 1, 0);
        zmq_send(raw[i], junk, sizeof junk, ZMQ_SNDMORE);
        zmq_send(raw[i], "payload", 7, 0);
        for (int k = 0; k < 4; k++) zmq_send(raw[i], "abcd", 4, k < 3 ? ZMQ_SNDMORE : 0);
    }
    int wrong = allreduce_twice(tps, N);
    sl_tp_stats st[N];
    for (int r = 0; r < N; r++) sl_tp_get_stats(tps[r], &st[r]);
    for (int i = 0; i < N; i++) zmq_close(raw[i]);
    zmq_ctx_term(ctx);
    for (int r = 0; r < N; r++) sl_tp_destroy(tps[r]);
    ASSERT_EQ(wrong, 0);
    for (int r = 0; r < N; r++) ASSERT_EQ(st[r].dropped, 3);
}

TEST(test_strangers_during_allreduce) {
    /* strangers at every rank's inbox speak for its left neighbour (under the plain id
     * "r<left>", under an id of the transport's own form, and with no id): garbage, an
     * ABORT of another job, and a DATA chunk of another job that would poison the sum */
    enum { N = 3, K = 3 };
    ring_job = 0x00c0ffee5eed1234ull;
    sl_tp *tps[N];
    ASSERT_EQ(make_ring(N, 10, tps), 0);
    ring_job = 0;
    void *ctx = zmq_ctx_new();
    void *raw[N][K];
    int zero = 0;
    static float poison[16];
    for (int i = 0; i < 16; i++) poison[i] = 1e9f;
    for (int i = 0; i < N; i++) {
        int left = (i + N - 1) % N;
        char ep[128], ids[2][40];
        snprintf(ep, sizeof ep, "tcp://%s", sl_tp_endpoint(tps[i]));
        snprintf(ids[0], sizeof ids[0], "r%d", left);
        snprintf(ids[1], sizeof ids[1], "r%d.0123456789abcdef", left);
        for (int k = 0; k < K; k++) {
            void *s = raw[i][k] = zmq_socket(ctx, ZMQ_DEALER);
            zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
            if (k < 2) zmq_setsockopt(s, ZMQ_ROUTING_ID, ids[k], strlen(ids[k]));
            ASSERT_EQ(zmq_connect(s, ep), 0);
            zmq_send(s, "garbage", 7, 0);
            uint8_t hb[SL_MSG_HDR_SIZE];
            sl_msg_hdr h = {.type = SL_MSG_ABORT, .dtype = SL_DT_U8, .sender = (uint32_t)left, .job = 0xbad,
                            .length = 22};
            sl_msg_encode(&h, hb);
            zmq_send(s, hb, sizeof hb, ZMQ_SNDMORE);
            zmq_send(s, "injected by a stranger", 22, 0);
            h = (sl_msg_hdr){.type = SL_MSG_DATA, .dtype = SL_DT_F32, .sender = (uint32_t)left, .tensor = 7,
                             .job = 0x00c0ffee5eed1235ull, .length = sizeof poison};
            sl_msg_encode(&h, hb);
            zmq_send(s, hb, sizeof hb, ZMQ_SNDMORE);
            zmq_send(s, poison, sizeof poison, 0);
        }
    }
    int wrong = allreduce_twice(tps, N);
    /* whatever the ring did not read by itself is dropped now: nothing else is waiting */
    sl_tp_stats st[N];
    for (int r = 0; r < N; r++) {
        sl_msg_hdr g;
        const void *d;
        size_t l;
        for (int k = 0; k < 10; k++) {
            sl_tp_get_stats(tps[r], &st[r]);
            if (st[r].dropped >= 3 * K) break;
            if (sl_tp_recv(tps[r], -1, 0.1, &g, &d, &l) != SL_ETIMEDOUT) wrong = 1;
        }
        sl_tp_get_stats(tps[r], &st[r]);
    }
    for (int i = 0; i < N; i++)
        for (int k = 0; k < K; k++) zmq_close(raw[i][k]);
    zmq_ctx_term(ctx);
    for (int r = 0; r < N; r++) sl_tp_destroy(tps[r]);
    ASSERT_EQ(wrong, 0);
    for (int r = 0; r < N; r++) {
        ASSERT_EQ(st[r].dropped, 3 * K);
        ASSERT_EQ(st[r].foreign, 2 * K);
    }
}

int main(void) {
    RUN(test_allreduce_range_identical);
    RUN(test_fp16_conversion);
    RUN(test_shm_matches_tcp);
    RUN(test_hierarchy);
    RUN(test_paths_disagree);
    RUN(test_allreduce_bad_args);
    RUN(test_killed_rank_is_named);
    RUN(test_killed_rank_is_named_shm);
    RUN(test_stopped_rank_is_named_shm);
    RUN(test_allreduce_sum_exact);
    RUN(test_allreduce_avg_and_int32);
    RUN(test_allreduce_bit_reproducible);
    RUN(test_allreduce_fp16);
    RUN(test_broadcast_and_barrier);
    RUN(test_allgather);
    RUN(test_allreduce_compressed_identical);
    RUN(test_silent_peer_times_out);
    RUN(test_garbage_during_allreduce);
    RUN(test_strangers_during_allreduce);
    TEST_MAIN_END();
}
