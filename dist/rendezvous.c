/* The rendezvous of ranks that know their rank, the world size and the master's address,
 * but not each other's addresses (torchrun, Kubeflow or MPICH ranks on several hosts): one
 * exchange over ZeroMQ before the ring exists (cluster_priv.h has the contract).
 *
 * Wire: one text frame each way. A rank says
 *   "SLRDZV1 hello WORLD RANK JOB ADDR"      (JOB: SLUICE_JOB_ID, or "-")
 * and rank 0 answers "SLRDZV1 ok WORLD ADDR0 ADDR1 ..." or "SLRDZV1 err MESSAGE". Rank 0 is
 * a ROUTER bound on every interface at the rendezvous port; the others are DEALERs that
 * connect (ZeroMQ retries until rank 0 is up and sends the queued hello then). A rank's
 * address is its IPv4 address on the route to the master (a UDP socket connected there,
 * nothing sent) with its ring port; rank 0's is the master address itself, which the others
 * have just reached. Workload: once per job start; a few to a few thousand ranks. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "dist/cluster_priv.h"
#include "sluice/log.h"
#include "sluice/util.h"

#define MAGIC "SLRDZV1"
#define HELLO_MAX 1024

/* This host's IPv4 address on the route to host (getaddrinfo + a connected UDP socket). */
static sl_status own_host(const char *host, char *out, size_t cap) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    int r = getaddrinfo(host, "9", &hints, &res);
    if (r || !res) {
        sl_err(SL_EIO, "rendezvous: cannot resolve the master address \"%s\": %s", host, gai_strerror(r));
        sl_err_hint("MASTER_ADDR (or PET_MASTER_ADDR) must name rank 0's host as the other hosts reach it");
        return SL_EIO;
    }
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    int ok = fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
             getsockname(fd, (struct sockaddr *)&me, &len) == 0 && inet_ntop(AF_INET, &me.sin_addr, out, (socklen_t)cap);
    int e = errno;
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    if (!ok) return sl_err(SL_EIO, "rendezvous: no route to the master address \"%s\": %s", host, strerror(e));
    return SL_OK;
}

static sl_status zfail(const char *what, const char *where) {
    return sl_err(SL_EIO, "rendezvous at %s: %s failed: %s", where, what, zmq_strerror(zmq_errno()));
}

/* Receive one message (all its frames) into frames[0..*n); waits at most ms. 0 when a
 * message came, 1 on timeout, -1 on error. Frames past `max` or longer than cap are cut
 * and flagged in *bad. */
static int recv_msg(void *sock, int ms, char frames[][HELLO_MAX], size_t *lens, int max, int *n, int *bad) {
    zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
    int r = zmq_poll(&it, 1, ms);
    if (r < 0) return errno == EINTR ? 1 : -1;
    if (r == 0) return 1;
    *n = 0;
    *bad = 0;
    int more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return -1;
        }
        size_t sz = zmq_msg_size(&m);
        if (*n < max && sz < HELLO_MAX) {
            memcpy(frames[*n], zmq_msg_data(&m), sz);
            frames[*n][sz] = 0;
            lens[*n] = sz;
            (*n)++;
        } else {
            *bad = 1;
        }
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
    return 0;
}

int sl__rdzv_parse_hello(const char *text, long *world, long *rank, char job[40], char addr[300]) {
    char extra[8];
    if (strncmp(text, MAGIC " hello ", strlen(MAGIC) + 7) != 0) return -1;
    if (sscanf(text + strlen(MAGIC) + 7, "%ld %ld %39s %299s %7s", world, rank, job, addr, extra) != 4) return -1;
    sl__cluster_spec chk;
    memset(&chk, 0, sizeof chk);
    strcpy(chk.src, "rendezvous");
    sl_status st = sl__cluster_add_member(&chk, SL_TASK_WORKER, addr);
    sl__cluster_spec_free(&chk);
    if (st) sl_err_clear();
    return st ? -1 : 0;
}

sl_status sl__rdzv_parse_answer(const char *text, const char *where, int world, int rank, const char *self_addr,
                                char *addrs, size_t stride) {
    if (strncmp(text, MAGIC " ", strlen(MAGIC) + 1) != 0) return 1;
    const char *p = text + strlen(MAGIC) + 1;
    if (strncmp(p, "err ", 4) == 0) return sl_err(SL_EPEER, "rendezvous at %s: rank 0 refused: %.400s", where, p + 4);
    long w;
    int used;
    if (sscanf(p, "ok %ld%n", &w, &used) != 1 || w != world)
        return sl_err(SL_EPEER, "rendezvous at %s: rank 0's answer is malformed or for another world size (\"%.60s\")",
                      where, p);
    p += used;
    sl__cluster_spec chk;
    memset(&chk, 0, sizeof chk);
    strcpy(chk.src, "rendezvous");
    sl_status st = SL_OK;
    for (int i = 0; i < world && !st; i++) {
        int u = 0;
        char *a = addrs + (size_t)i * stride;
        if (sscanf(p, " %255s%n", a, &u) != 1) {
            st = sl_err(SL_EPEER, "rendezvous at %s: rank 0's answer lists fewer than %d addresses", where, world);
        } else if (sl__cluster_add_member(&chk, SL_TASK_WORKER, a)) {
            st = sl_err(SL_EPEER, "rendezvous at %s: rank 0's answer gives rank %d a malformed address \"%.60s\"",
                        where, i, a);
        }
        p += u;
    }
    sl__cluster_spec_free(&chk);
    if (!st && *p && strspn(p, " ") != strlen(p))
        st = sl_err(SL_EPEER, "rendezvous at %s: rank 0's answer lists more than %d addresses", where, world);
    if (!st && strcmp(addrs + (size_t)rank * stride, self_addr) != 0)
        st = sl_err(SL_EPEER, "rendezvous at %s: rank 0's list gives rank %d the address %s, not %s", where, rank,
                    addrs + (size_t)rank * stride, self_addr);
    return st;
}

typedef struct member {
    char addr[256];
    char id[256]; /* the ROUTER identity of its connection */
    size_t idlen;
    int came;
} member;

static void reply_all(void *sock, const member *m, int world, const char *text) {
    for (int i = 1; i < world; i++)
        if (m[i].came) {
            zmq_send(sock, m[i].id, m[i].idlen, ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(sock, text, strlen(text), ZMQ_DONTWAIT);
        }
}

static void reply_one(void *sock, const char *id, size_t idlen, const char *msg) {
    char text[600];
    snprintf(text, sizeof text, MAGIC " err %s", msg);
    zmq_send(sock, id, idlen, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(sock, text, strlen(text), ZMQ_DONTWAIT);
}

/* Rank 0: gather every hello, then answer all. */
static sl_status host_rendezvous(void *sock, const char *where, int world, const char *job, const char *self_addr,
                                 double timeout_s, member *m) {
    snprintf(m[0].addr, sizeof m[0].addr, "%s", self_addr);
    m[0].came = 1;
    int have = 1;
    double deadline = sl_now_s() + timeout_s;
    static char frames[3][HELLO_MAX];
    size_t lens[3];
    char fail_msg[512] = "";
    while (have < world) {
        double left = deadline - sl_now_s();
        int n, bad;
        int r = left > 0 ? recv_msg(sock, (int)(left * 1000) + 1, frames, lens, 3, &n, &bad) : 1;
        if (r < 0) return zfail("receive", where);
        if (r == 1 && sl_now_s() >= deadline) {
            char missing[200] = "";
            size_t at = 0;
            int nm = 0;
            for (int i = 1; i < world; i++)
                if (!m[i].came) {
                    if (nm < 8) at += (size_t)snprintf(missing + at, sizeof missing - at, "%s%d", nm ? ", " : "", i);
                    nm++;
                }
            if (nm > 8) snprintf(missing + at, sizeof missing - at, ", ... (%d in all)", nm);
            snprintf(fail_msg, sizeof fail_msg, "rank 0 gave up after %.0f s: rank%s %s did not come", timeout_s,
                     nm > 1 ? "s" : "", missing);
            reply_all(sock, m, world, "SLRDZV1 err the rendezvous timed out");
            sl_err(SL_ETIMEDOUT, "rendezvous at %s: after %.0f s, rank%s %s of %d %s not come", where, timeout_s,
                   nm > 1 ? "s" : "", missing, world, nm > 1 ? "have" : "has");
            sl_err_hint("start every rank within the timeout (the cluster block's `timeout`), with the same world "
                        "size and master address");
            return SL_ETIMEDOUT;
        }
        if (r == 1) continue;
        if (bad || n != 2) {
            SL_WARN("rendezvous at %s: dropped a message that is not a rendezvous hello (%d frames)", where, n);
            continue;
        }
        long w, rk;
        char rjob[40], addr[300];
        if (sl__rdzv_parse_hello(frames[1], &w, &rk, rjob, addr)) {
            SL_WARN("rendezvous at %s: dropped a malformed hello \"%.60s\"", where, frames[1]);
            continue;
        }
        if (strcmp(rjob, job) != 0) {
            SL_WARN("rendezvous at %s: dropped a hello of another job (job id %s from %s; this job's is %s)", where,
                    rjob, addr, job);
            reply_one(sock, frames[0], lens[0], "another job's rendezvous: the job ids differ");
            continue;
        }
        if (w != world) {
            snprintf(fail_msg, sizeof fail_msg, "rank %ld at %s says the world is %ld, rank 0 says %d", rk, addr, w, world);
        } else if (rk < 1 || rk >= world) {
            snprintf(fail_msg, sizeof fail_msg, "a rank %ld from %s, outside 1..%d", rk, addr, world - 1);
        } else if (m[rk].came && strcmp(m[rk].addr, addr) != 0) {
            snprintf(fail_msg, sizeof fail_msg, "rank %ld came twice, from %s and from %s", rk, m[rk].addr, addr);
        } else {
            for (int i = 0; i < world; i++)
                if (i != rk && m[i].came && strcmp(m[i].addr, addr) == 0)
                    snprintf(fail_msg, sizeof fail_msg, "ranks %ld and %ld both bring the address %s",
                             i < rk ? (long)i : rk, i < rk ? rk : (long)i, addr);
        }
        if (fail_msg[0]) {
            char text[600];
            snprintf(text, sizeof text, MAGIC " err %s", fail_msg);
            reply_all(sock, m, world, text);
            reply_one(sock, frames[0], lens[0], fail_msg);
            sl_err(SL_EINVAL, "rendezvous at %s: %s", where, fail_msg);
            sl_err_hint("every rank needs the same world size and a rank of its own (RANK / PET_NODE_RANK / "
                        "PMI_RANK), and ranks on one host distinct LOCAL_RANKs");
            return SL_EINVAL;
        }
        if (!m[rk].came) have++;  /* a rank that came again (restarted) keeps its place */
        m[rk].came = 1;
        snprintf(m[rk].addr, sizeof m[rk].addr, "%s", addr);
        memcpy(m[rk].id, frames[0], lens[0] < sizeof m[rk].id ? lens[0] : sizeof m[rk].id);
        m[rk].idlen = lens[0] < sizeof m[rk].id ? lens[0] : sizeof m[rk].id;
    }
    size_t cap = (size_t)world * 270 + 64, at;
    char *text = malloc(cap);
    if (!text) return sl_err(SL_ENOMEM, "rendezvous: out of memory");
    at = (size_t)snprintf(text, cap, MAGIC " ok %d", world);
    for (int i = 0; i < world; i++) at += (size_t)snprintf(text + at, cap - at, " %s", m[i].addr);
    reply_all(sock, m, world, text);
    free(text);
    return SL_OK;
}

/* Any other rank: say hello, wait for the list. */
static sl_status join_rendezvous(void *sock, const char *where, int world, int rank, const char *job,
                                 const char *self_addr, double timeout_s, member *m) {
    char hello[HELLO_MAX];
    snprintf(hello, sizeof hello, MAGIC " hello %d %d %s %s", world, rank, job, self_addr);
    if (zmq_send(sock, hello, strlen(hello), 0) < 0) return zfail("send", where);
    double deadline = sl_now_s() + timeout_s;
    for (;;) {
        double left = deadline - sl_now_s();
        zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
        int r = left > 0 ? zmq_poll(&it, 1, (int)(left * 1000) + 1) : 0;
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return zfail("poll", where);
        if (r == 0 && sl_now_s() >= deadline) {
            sl_err(SL_ETIMEDOUT, "rendezvous at %s: rank %d had no answer from rank 0 within %.0f s", where, rank, timeout_s);
            sl_err_hint("is rank 0 running, and does the master address reach it from here? every rank must come "
                        "within the timeout (the cluster block's `timeout`)");
            return SL_ETIMEDOUT;
        }
        if (r == 0) continue;
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        int len = zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT);
        if (len < 0) { zmq_msg_close(&msg); return zfail("receive", where); }
        char *text = malloc((size_t)len + 1);
        if (!text) { zmq_msg_close(&msg); return sl_err(SL_ENOMEM, "rendezvous: out of memory"); }
        memcpy(text, zmq_msg_data(&msg), (size_t)len);
        text[len] = 0;
        int more = zmq_msg_more(&msg);
        zmq_msg_close(&msg);
        sl_status st = more ? 1 : sl__rdzv_parse_answer(text, where, world, rank, self_addr, m->addr, sizeof *m);
        free(text);
        if (st == 1) {
            SL_WARN("rendezvous at %s: dropped a message that is not rank 0's answer", where);
            continue;
        }
        return st;
    }
}

sl_status sl__cluster_rendezvous(const sl__cluster_spec *task, const char *job_id, double timeout_s,
                                 sl__cluster_spec *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->src, sizeof out->src, "%s", task->src);
    int world = task->world_hint, rank = task->task_index;
    char where[300], self_addr[300], host[64];
    snprintf(where, sizeof where, "%s:%d", task->rdzv_host, task->rdzv_port);
    const char *job = job_id && *job_id ? job_id : "-";
    sl_status st;
    if (rank == 0) {
        snprintf(self_addr, sizeof self_addr, "%s:%d", task->rdzv_host, task->ring_port);
    } else {
        if ((st = own_host(task->rdzv_host, host, sizeof host))) return st;
        snprintf(self_addr, sizeof self_addr, "%s:%d", host, task->ring_port);
    }
    member *m = calloc((size_t)world, sizeof *m);
    void *ctx = zmq_ctx_new(), *sock = NULL;
    if (!m || !ctx) { st = sl_err(SL_ENOMEM, "rendezvous: out of memory"); goto done; }
    sock = zmq_socket(ctx, rank == 0 ? ZMQ_ROUTER : ZMQ_DEALER);
    if (!sock) { st = zfail("zmq_socket", where); goto done; }
    int linger = 2000, maxsz = rank == 0 ? HELLO_MAX * 2 : -1;
    int64_t max64 = maxsz;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max64, sizeof max64);
    char ep[320];
    if (rank == 0) {
        snprintf(ep, sizeof ep, "tcp://*:%d", task->rdzv_port);
        if (zmq_bind(sock, ep) != 0) {
            st = sl_err(SL_EIO, "rendezvous: rank 0 cannot listen on port %d: %s", task->rdzv_port, zmq_strerror(zmq_errno()));
            sl_err_hint("the rendezvous uses the master port + 1; pick a master port whose next ports are free");
            goto done;
        }
        st = host_rendezvous(sock, where, world, job, self_addr, timeout_s, m);
    } else {
        snprintf(ep, sizeof ep, "tcp://%s:%d", task->rdzv_host, task->rdzv_port);
        if (zmq_connect(sock, ep) != 0) { st = zfail("connect", where); goto done; }
        st = join_rendezvous(sock, where, world, rank, job, self_addr, timeout_s, m);
    }
    for (int i = 0; i < world && !st; i++) st = sl__cluster_add_member(out, SL_TASK_WORKER, m[i].addr);
done:
    if (sock) zmq_close(sock);
    if (ctx) zmq_ctx_term(ctx);
    free(m);
    if (st) sl__cluster_spec_free(out);
    return st;
}
