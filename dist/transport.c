/* ZeroMQ transport: one ROUTER inbox per task, one DEALER per peer (routing id
 * "r<rank>.<random nonce>", fresh at every connect),
 * a socket monitor on every DEALER so a peer's death is seen when its connection closes,
 * and a fixed, validated 56-byte header (job id included) before every payload (layout in transport.h).
 *
 * Workload: a few to a few dozen peers; a ring moves MiB-sized chunks at network speed, a
 * parameter server answers many small requests. Every ZeroMQ call goes through ZCHECK so a
 * failure carries the call's name and zmq_strerror (its source line goes to the debug log,
 * never into the message a user sees); bind and connect, which a user's addresses and
 * machine make fail, say which address and what to change. The exceptions are best-effort
 * calls whose failure leaves nothing to act on: closing, ABORT notices (never block), monitor reads,
 * and zmq_msg_init / zmq_msg_close / zmq_msg_move on valid messages (they cannot fail).
 *
 * Routing ids are not authentication: a stranger may claim "r2.<anything>". It cannot take
 * a live id over (ROUTER_HANDOVER is off) nor block the real rank's id (the nonce is
 * unknown to it), and its messages carry another job id (or none) and are dropped before
 * use: see "Job membership" in transport.h. CURVE with an
 * allow-list is what keeps strangers out: the inbox is then a CURVE server and the ZAP
 * handler of dist/curve.c (bound in this transport's context before the inbox binds, so no
 * handshake slips through unchecked) vets every client key. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "dist/curve_priv.h"
#include "sluice/log.h"
#include "sluice/transport.h"
#include "sluice/util.h"

/* A ZeroMQ call that failed with nothing in the user's hands to explain it (an option on a
 * fresh socket): the user's message names the call and zmq_strerror, with a hint when the
 * process ran out of descriptors; the source line and the whole call go to the debug log.
 * Returns SL_ETIMEDOUT for EAGAIN, else SL_EIO. */
static sl_status zfail(const char *call, const char *file, int line) {
    int e = zmq_errno();
    sl_status code = e == EAGAIN ? SL_ETIMEDOUT : SL_EIO;
    if (SL_LOG_DEBUG <= sl_log_level) sl__log(SL_LOG_DEBUG, file, line, "%s: %s", call, zmq_strerror(e));
    sl_err(code, "transport: %.*s failed: %s", (int)strcspn(call, "("), call, zmq_strerror(e));
    if (e == EMFILE || e == ENFILE)
        sl_err_hint("this process is out of file descriptors or ZeroMQ sockets; raise the limit (ulimit -n)");
    return code;
}

/* Wrap a ZeroMQ call that returns -1 on failure (zfail says what failed). */
#define ZCHECK(call)                                                                   \
    do {                                                                               \
        if ((call) == -1) return zfail(#call, __FILE__, __LINE__);                     \
    } while (0)
#define ZCHECK_GOTO(call, st)                                                          \
    do {                                                                               \
        if ((call) == -1) {                                                            \
            (st) = zfail(#call, __FILE__, __LINE__);                                   \
            goto fail;                                                                 \
        }                                                                              \
    } while (0)

/* Where a user changes the addresses the tasks bind and connect to. */
#define WHERE_ADDRS "sluice-launch --port-base, or the addresses in the cluster block or TF_CONFIG"

#define REFUSED_HINT \
    "its allow-list lacks this task's client key, it runs without CURVE, or the tasks use different server keys"
#define LINGER_MS 200 /* long enough for an ABORT to reach a live peer at close */

struct sl_tp {
    void *ctx;
    void *inbox;          /* ROUTER bound on addrs[self] */
    void **out;           /* DEALER to each peer (NULL for self or before connect) */
    void **mon;           /* PAIR receiving each DEALER's monitor events */
    char **addrs;         /* "host:port" of every rank */
    char endpoint[300];
    int self, n, connected;
    unsigned gen;         /* sl_tp_connect calls so far (names the monitor endpoints) */
    unsigned char *lost;  /* lost[r]: r's connection closed and did not come back */
    unsigned char *seen;  /* seen[r]: a connection to r opened since connect */
    uint64_t job;         /* this job's id, in every header sent, required in every one received */
    uint64_t last_foreign; /* the job id of the last message of another job (for the hint) */
    double *lost_at;      /* when it closed */
    double timeout_s;
    size_t max_msg;
    zmq_msg_t cur;        /* payload of the last received message */
    int have_cur;
    atomic_long inflight; /* zero-copy sends not yet released by ZeroMQ */
    struct peer_count *pc; /* pc[r]: the counted sends to r not yet released */
    sl_tp_stats st;
    int curve;            /* keys below are set */
    char server_public[41], client_public[41], client_secret[41];
    sl__zap *zap;         /* the ZAP handler thread with curve */
    unsigned char *refused; /* refused[r]: r's inbox refused our CURVE handshake */
};

/* The free-callback hint of a counted zero-copy send to one peer. */
struct peer_count {
    sl_tp *tp;
    atomic_long n;
};

/* ---- header ------------------------------------------------------------------------ */

void sl_msg_encode(const sl_msg_hdr *h, uint8_t out[SL_MSG_HDR_SIZE]) {
    sl_store_le32(out, SL_MSG_MAGIC);
    sl_store_le16(out + 4, SL_MSG_VERSION);
    sl_store_le16(out + 6, h->type);
    sl_store_le32(out + 8, h->sender);
    sl_store_le32(out + 12, h->tensor);
    sl_store_le64(out + 16, h->step);
    sl_store_le64(out + 24, h->offset);
    sl_store_le64(out + 32, h->length);
    out[40] = h->dtype;
    out[41] = h->flags;
    sl_store_le16(out + 42, h->round);
    sl_store_le32(out + 44, 0);
    sl_store_le64(out + 48, h->job);
}

sl_status sl_msg_decode(const void *buf, size_t len, sl_msg_hdr *out) {
    const uint8_t *p = buf;
    if (len != SL_MSG_HDR_SIZE)
        return sl_err_at(SL_ECORRUPT, "message header", (int64_t)(len < SL_MSG_HDR_SIZE ? len : SL_MSG_HDR_SIZE),
                         "header frame is %zu bytes, expected %d", len, SL_MSG_HDR_SIZE);
    if (sl_load_le32(p) != SL_MSG_MAGIC)
        return sl_err_at(SL_ECORRUPT, "message header", 0, "bad magic 0x%08x (expected 0x%08x \"SLW1\")",
                         sl_load_le32(p), SL_MSG_MAGIC);
    if (sl_load_le16(p + 4) != SL_MSG_VERSION)
        return sl_err_at(SL_ECORRUPT, "message header", 4, "unsupported version %u (this build speaks %d)",
                         sl_load_le16(p + 4), SL_MSG_VERSION);
    sl_msg_hdr h;
    h.type = sl_load_le16(p + 6);
    if (h.type == 0 || h.type >= SL_MSG_TYPES_)
        return sl_err_at(SL_ECORRUPT, "message header", 6, "unknown message type %u", h.type);
    h.sender = sl_load_le32(p + 8);
    h.tensor = sl_load_le32(p + 12);
    h.step = sl_load_le64(p + 16);
    h.offset = sl_load_le64(p + 24);
    h.length = sl_load_le64(p + 32);
    h.dtype = p[40];
    h.flags = p[41];
    h.round = sl_load_le16(p + 42);
    h.job = sl_load_le64(p + 48);
    if (h.dtype >= SL_DT_COUNT_ || h.dtype == SL_DT_BYTES)
        return sl_err_at(SL_ECORRUPT, "message header", 40, "bad dtype %u", h.dtype);
    if (h.flags & ~(unsigned)SL_MSGF_FP16)
        return sl_err_at(SL_ECORRUPT, "message header", 41, "unknown flags 0x%02x", h.flags);
    if ((h.flags & SL_MSGF_FP16) && h.dtype != SL_DT_F32)
        return sl_err_at(SL_ECORRUPT, "message header", 41, "fp16 flag on a %s payload",
                         sl_dtype_name((sl_dtype)h.dtype));
    if (sl_load_le32(p + 44) != 0)
        return sl_err_at(SL_ECORRUPT, "message header", 44, "reserved bytes are not zero");
    size_t esz = (h.flags & SL_MSGF_FP16) ? 2 : (h.dtype ? sl_dtype_size((sl_dtype)h.dtype) : 1);
    if (esz > 1 && h.length % esz != 0)
        return sl_err_at(SL_ECORRUPT, "message header", 32, "payload length %llu is not a multiple of %zu-byte %s",
                         (unsigned long long)h.length, esz, sl_dtype_name((sl_dtype)h.dtype));
    *out = h;
    return SL_OK;
}

/* ---- addresses --------------------------------------------------------------------- */

/* Split "host:port" into host (NUL-terminated copy) and port. */
static sl_status split_addr(const char *addr, char *host, size_t cap, int *port) {
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    if (!colon || colon == addr || (size_t)(colon - addr) >= cap)
        return sl_err(SL_EINVAL, "address \"%s\" is not host:port", addr ? addr : "(null)");
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || p < 0 || p > 65535)
        return sl_err(SL_EINVAL, "address \"%s\": port must be a number in 0..65535", addr);
    *port = (int)p;
    return SL_OK;
}

static const char *bind_host(const char *host) {
    struct in_addr a;
    if (strcmp(host, "localhost") == 0) return "127.0.0.1";
    if (inet_pton(AF_INET, host, &a) == 1) return host;
    return "*";
}

/* ---- lifecycle --------------------------------------------------------------------- */

static const int one_ = 1;

/* Check the keys, keep what connect needs, and start the ZAP handler of tp's context. */
static sl_status curve_setup(sl_tp *tp, const sl_tp_curve *c) {
    if (!zmq_has("curve")) {
        sl_err(SL_EUNSUPPORTED, "transport: CURVE security is configured but this libzmq has no CURVE support");
        sl_err_hint("install a libzmq built with libsodium, or remove the cluster block's curve statement");
        return SL_EUNSUPPORTED;
    }
    static const char *const what[4] = {"transport: curve server public key", "transport: curve server secret key",
                                         "transport: curve client public key", "transport: curve client secret key"};
    const char *keys[4] = {c->server_public, c->server_secret, c->client_public, c->client_secret};
    for (int i = 0; i < 4; i++) {
        sl_status s = sl__curve_check_key(keys[i], what[i]);
        if (s) return s;
    }
    if (c->nallow < 1 || !c->allow) {
        sl_err(SL_EINVAL, "transport: the CURVE allow-list is empty: every connection would be refused");
        sl_err_hint("list the client public keys of every task in the allow-list file");
        return SL_EINVAL;
    }
    memcpy(tp->server_public, c->server_public, 41);
    memcpy(tp->client_public, c->client_public, 41);
    memcpy(tp->client_secret, c->client_secret, 41);
    tp->server_public[40] = tp->client_public[40] = tp->client_secret[40] = 0;
    sl_status s = sl__zap_start(tp->ctx, (const char(*)[41])c->allow, c->nallow, &tp->zap);
    if (s) return s;
    tp->curve = 1;
    return SL_OK;
}

/* The inbox of rank `self` could not bind `addr` (host, port: its parts): SL_EIO with the
 * address as the user gave it, the OS's reason and what to change. */
static sl_status bind_failed(int self, const char *addr, const char *host, int port, int e) {
    const char *every = strcmp(bind_host(host), "*") == 0 ? " (every interface: a host name is bound as *)" : "";
    sl_err(SL_EIO, "transport: rank %d cannot bind %s%s: %s", self, addr, every, zmq_strerror(e));
    if (e == EADDRINUSE)
        sl_err_hint("another job or process is listening on port %d (ss -ltnp 'sport = :%d' shows which); stop it, "
                    "or choose other ports: " WHERE_ADDRS, port, port);
    else if (e == EACCES && port < 1024)
        sl_err_hint("ports below 1024 need root or CAP_NET_BIND_SERVICE; choose a port from 1024 up: " WHERE_ADDRS);
    else if (e == EACCES)
        sl_err_hint("this process may not listen on port %d (a security policy); choose another: " WHERE_ADDRS, port);
    else if (e == EADDRNOTAVAIL)
        sl_err_hint("%s is not an address of this machine; each task binds the address the cluster lists for it, "
                    "so give every task an address of the machine it runs on (the cluster block or TF_CONFIG)", host);
    else
        sl_err_hint("check this task's address, host:port of this machine (the cluster block, TF_CONFIG or the "
                    "launcher's environment)");
    return SL_EIO;
}

sl_status sl_tp_create(int self, int n, const char *const *addrs, const sl_tp_opts *opts,
                       sl_tp **out) {
    *out = NULL;
    if (n < 1 || self < 0 || self >= n || !addrs)
        return sl_err(SL_EINVAL, "transport: rank %d of %d tasks is out of range", self, n);
    char host[256];
    int port;
    for (int i = 0; i < n; i++) {
        sl_status s = split_addr(addrs[i], host, sizeof host, &port);
        if (s) { sl_err_prefix("transport: rank %d: ", i); return s; }
    }
    sl_status st = SL_ENOMEM;
    sl_tp *tp = calloc(1, sizeof *tp);
    if (!tp) return sl_err(SL_ENOMEM, "transport: out of memory");
    tp->self = self;
    tp->n = n;
    tp->timeout_s = opts && opts->timeout_s > 0 ? opts->timeout_s : 30.0;
    tp->max_msg = opts && opts->max_msg ? opts->max_msg : ((size_t)1 << 30);
    atomic_init(&tp->inflight, 0);
    tp->addrs = calloc((size_t)n, sizeof *tp->addrs);
    tp->out = calloc((size_t)n, sizeof *tp->out);
    tp->mon = calloc((size_t)n, sizeof *tp->mon);
    tp->lost = calloc((size_t)n, 1);
    tp->seen = calloc((size_t)n, 1);
    tp->pc = calloc((size_t)n, sizeof *tp->pc);
    tp->lost_at = calloc((size_t)n, sizeof *tp->lost_at);
    tp->refused = calloc((size_t)n, 1);
    if (!tp->addrs || !tp->out || !tp->mon || !tp->lost || !tp->lost_at || !tp->refused || !tp->seen || !tp->pc)
        goto nomem;
    for (int i = 0; i < n; i++) {
        tp->pc[i].tp = tp;
        atomic_init(&tp->pc[i].n, 0);
    }
    tp->job = opts ? opts->job_id : 0;
    for (int i = 0; i < n; i++)
        if (!(tp->addrs[i] = strdup(addrs[i]))) goto nomem;
    tp->ctx = zmq_ctx_new();
    if (!tp->ctx) { st = zfail("zmq_ctx_new", __FILE__, __LINE__); goto fail; }
    int iot = opts && opts->io_threads > 0 ? opts->io_threads : 1;
    ZCHECK_GOTO(zmq_ctx_set(tp->ctx, ZMQ_IO_THREADS, iot), st);
    if (opts && opts->curve && (st = curve_setup(tp, opts->curve))) goto fail;
    tp->inbox = zmq_socket(tp->ctx, ZMQ_ROUTER);
    if (!tp->inbox) { st = zfail("zmq_socket", __FILE__, __LINE__); goto fail; }
    if (tp->curve) {
        const sl_tp_curve *c = opts->curve;
        ZCHECK_GOTO(zmq_setsockopt(tp->inbox, ZMQ_CURVE_SERVER, &one_, sizeof one_), st);
        ZCHECK_GOTO(zmq_setsockopt(tp->inbox, ZMQ_CURVE_SECRETKEY, c->server_secret, 40), st);
        ZCHECK_GOTO(zmq_setsockopt(tp->inbox, ZMQ_ZAP_DOMAIN, "sluice", 6), st);
    }
    int zero = 0, linger = LINGER_MS;
    int64_t maxsz = (int64_t)tp->max_msg + 64;
    ZCHECK_GOTO(zmq_setsockopt(tp->inbox, ZMQ_LINGER, &linger, sizeof linger), st);
    ZCHECK_GOTO(zmq_setsockopt(tp->inbox, ZMQ_RCVHWM, &zero, sizeof zero), st);
    ZCHECK_GOTO(zmq_setsockopt(tp->inbox, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz), st);
    /* nobody takes over a live connection's routing id (an impostor would cut the real
     * rank off and lose its messages); a peer that reconnects comes back under a new nonce,
     * so it never needs its old id (transport.h, "Job membership") */
    ZCHECK_GOTO(zmq_setsockopt(tp->inbox, ZMQ_ROUTER_HANDOVER, &zero, sizeof zero), st);
    split_addr(addrs[self], host, sizeof host, &port);
    char ep[320];
    if (port) snprintf(ep, sizeof ep, "tcp://%s:%d", bind_host(host), port);
    else snprintf(ep, sizeof ep, "tcp://%s:*", bind_host(host));
    if (zmq_bind(tp->inbox, ep) == -1) {
        st = bind_failed(self, addrs[self], host, port, zmq_errno());
        goto fail;
    }
    char last[320];
    size_t ll = sizeof last;
    ZCHECK_GOTO(zmq_getsockopt(tp->inbox, ZMQ_LAST_ENDPOINT, last, &ll), st);
    const char *lp = strrchr(last, ':');
    snprintf(tp->endpoint, sizeof tp->endpoint, "%s:%s", host, lp ? lp + 1 : "0");
    free(tp->addrs[self]);
    if (!(tp->addrs[self] = strdup(tp->endpoint))) goto nomem;
    *out = tp;
    return SL_OK;
nomem:
    st = sl_err(SL_ENOMEM, "transport: out of memory");
fail:
    sl_tp_destroy(tp);
    return st;
}

const char *sl_tp_endpoint(const sl_tp *tp) { return tp->endpoint; }
int sl_tp_rank(const sl_tp *tp) { return tp->self; }
int sl_tp_size(const sl_tp *tp) { return tp->n; }
const char *sl_tp_peer_addr(const sl_tp *tp, int rank) {
    return rank >= 0 && rank < tp->n ? tp->addrs[rank] : "?";
}
int sl_tp_peer_lost(const sl_tp *tp, int rank) { return rank >= 0 && rank < tp->n && tp->lost[rank]; }
sl_status sl_tp_random_u64(uint64_t *out) {
    uint64_t v = 0;
    for (int tries = 0; tries < 4 && v == 0; tries++) {
        ssize_t got = getrandom(&v, sizeof v, 0);
        if (got != (ssize_t)sizeof v) {
            int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
            got = fd >= 0 ? read(fd, &v, sizeof v) : -1;
            if (fd >= 0) close(fd);
            if (got != (ssize_t)sizeof v)
                return sl_err(SL_EIO, "transport: no random bytes from getrandom or /dev/urandom: %s", strerror(errno));
        }
    }
    if (v == 0) return sl_err(SL_EIO, "transport: the kernel's random source gave zeros");
    *out = v;
    return SL_OK;
}

void sl_tp_get_stats(const sl_tp *tp, sl_tp_stats *out) {
    *out = tp->st;
    out->denied = sl__zap_denied(tp->zap);
}

sl_status sl_tp_set_peer(sl_tp *tp, int rank, const char *addr) {
    if (tp->connected) return sl_err(SL_ESTATE, "transport: set a peer's address before connecting");
    if (rank < 0 || rank >= tp->n) return sl_err(SL_EINVAL, "transport: no rank %d among %d", rank, tp->n);
    char host[256];
    int port;
    sl_status s = split_addr(addr, host, sizeof host, &port);
    if (s) return s;
    char *c = strdup(addr);
    if (!c) return sl_err(SL_ENOMEM, "transport: out of memory");
    free(tp->addrs[rank]);
    tp->addrs[rank] = c;
    return SL_OK;
}

static void close_peers(sl_tp *tp) {
    for (int i = 0; i < tp->n; i++) {
        if (tp->out[i]) {
            zmq_socket_monitor(tp->out[i], NULL, 0);
            zmq_close(tp->out[i]);
            tp->out[i] = NULL;
        }
        if (tp->mon[i]) { zmq_close(tp->mon[i]); tp->mon[i] = NULL; }
    }
    tp->connected = 0;
}

sl_status sl_tp_connect(sl_tp *tp) {
    if (tp->connected) return SL_OK;
    sl_status st = SL_OK;
    tp->gen++;
    for (int i = 0; i < tp->n; i++) {
        if (i == tp->self) continue;
        char host[256], ep[320], id[40], monep[80];
        int port;
        split_addr(tp->addrs[i], host, sizeof host, &port);
        if (port == 0) { st = sl_err(SL_EINVAL, "transport: rank %d's address %s has no port", i, tp->addrs[i]); goto fail; }
        snprintf(ep, sizeof ep, "tcp://%s:%d", strcmp(host, "localhost") ? host : "127.0.0.1", port);
        uint64_t nonce;
        if ((st = sl_tp_random_u64(&nonce))) goto fail;
        snprintf(id, sizeof id, "r%d.%016llx", tp->self, (unsigned long long)nonce);
        void *s = tp->out[i] = zmq_socket(tp->ctx, ZMQ_DEALER);
        if (!s) { st = zfail("zmq_socket", __FILE__, __LINE__); goto fail; }
        int linger = LINGER_MS, hwm = 100000, sndto = (int)(tp->timeout_s * 1000);
        ZCHECK_GOTO(zmq_setsockopt(s, ZMQ_ROUTING_ID, id, strlen(id)), st);
        ZCHECK_GOTO(zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger), st);
        ZCHECK_GOTO(zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm), st);
        ZCHECK_GOTO(zmq_setsockopt(s, ZMQ_SNDTIMEO, &sndto, sizeof sndto), st);
        int events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED;
        if (tp->curve) {
            ZCHECK_GOTO(zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, tp->server_public, 40), st);
            ZCHECK_GOTO(zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, tp->client_public, 40), st);
            ZCHECK_GOTO(zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, tp->client_secret, 40), st);
            events |= ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                      ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
        }
        /* a new name per connect: the last connect's monitor endpoint may still be bound */
        snprintf(monep, sizeof monep, "inproc://sl-tp-mon-%p-%u-%d", (void *)tp, tp->gen, i);
        ZCHECK_GOTO(zmq_socket_monitor(s, monep, events), st);
        tp->mon[i] = zmq_socket(tp->ctx, ZMQ_PAIR);
        if (!tp->mon[i]) { st = zfail("zmq_socket", __FILE__, __LINE__); goto fail; }
        ZCHECK_GOTO(zmq_connect(tp->mon[i], monep), st);
        if (zmq_connect(s, ep) == -1) {
            st = sl_err(SL_EIO, "transport: rank %d cannot connect to rank %d at %s: %s", tp->self, i, tp->addrs[i],
                        zmq_strerror(zmq_errno()));
            sl_err_hint("check rank %d's address, host:port of the machine it runs on (the cluster block, TF_CONFIG "
                        "or the launcher's environment)", i);
            goto fail;
        }
        tp->lost[i] = 0;
        tp->refused[i] = 0;
        tp->seen[i] = 0;
    }
    tp->connected = 1;
    return SL_OK;
fail:
    close_peers(tp);
    return st;
}

static void read_monitor(sl_tp *tp, int i);

/* Wait (bounded) until ZeroMQ has released every counted zero-copy payload; on timeout,
 * name the first peer whose sends are still queued and say what became of it. */
static sl_status wait_inflight(sl_tp *tp, double limit_s) {
    double end = sl_now_s() + limit_s;
    while (atomic_load(&tp->inflight) > 0) {
        if (sl_now_s() > end) {
            int who = -1;
            for (int i = 0; i < tp->n; i++) {
                if (tp->mon[i]) read_monitor(tp, i);
                if (who < 0 && atomic_load(&tp->pc[i].n) > 0) who = i;
            }
            long q = who >= 0 ? atomic_load(&tp->pc[who].n) : atomic_load(&tp->inflight);
            const char *sends = q == 1 ? "send" : "sends";
            if (who < 0)
                return sl_err(SL_ETIMEDOUT, "transport: %ld zero-copy %s still queued after %.1f s", q, sends, limit_s);
            if (tp->refused[who]) {
                sl_err(SL_ETIMEDOUT, "rank %d (%s) refused this task's CURVE handshake: %ld %s still queued for it",
                       who, tp->addrs[who], q, sends);
                sl_err_hint(REFUSED_HINT);
                return SL_ETIMEDOUT;
            }
            if (!tp->seen[who]) {
                sl_err(SL_ETIMEDOUT, "rank %d (%s) never answered within %.1f s: %ld %s still queued for it", who,
                       tp->addrs[who], limit_s, q, sends);
                sl_err_hint("no connection to rank %d ever opened: its process did not start, failed before it "
                            "listened, or listens on another address", who);
                return SL_ETIMEDOUT;
            }
            if (tp->lost[who]) {
                sl_err(SL_ETIMEDOUT, "lost rank %d (%s): connection closed with %ld %s still queued", who,
                       tp->addrs[who], q, sends);
                sl_err_hint("the process of rank %d died or left; see its own output for why", who);
                return SL_ETIMEDOUT;
            }
            return sl_err(SL_ETIMEDOUT, "rank %d (%s) took nothing for %.1f s: %ld %s still queued for it", who,
                          tp->addrs[who], limit_s, q, sends);
        }
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    return SL_OK;
}

sl_status sl_tp_flush(sl_tp *tp) { return wait_inflight(tp, tp->timeout_s); }

sl_status sl_tp_disconnect(sl_tp *tp) {
    close_peers(tp);
    return wait_inflight(tp, 2.0 + LINGER_MS / 1000.0);
}

void sl_tp_destroy(sl_tp *tp) {
    if (!tp) return;
    if (tp->have_cur) zmq_msg_close(&tp->cur);
    close_peers(tp);
    if (tp->inbox) zmq_close(tp->inbox);
    /* terminating the context also stops the ZAP thread (its receive fails with ETERM) */
    if (tp->ctx)
        while (zmq_ctx_term(tp->ctx) == -1 && zmq_errno() == EINTR) {}
    sl__zap_free(tp->zap);
    memset(tp->client_secret, 0, sizeof tp->client_secret);
    free(tp->refused);
    free(tp->seen);
    free(tp->pc);
    if (tp->addrs)
        for (int i = 0; i < tp->n; i++) free(tp->addrs[i]);
    free(tp->addrs);
    free(tp->out);
    free(tp->mon);
    free(tp->lost);
    free(tp->lost_at);
    free(tp);
}

/* ---- send -------------------------------------------------------------------------- */

typedef struct user_free {
    void (*fn)(void *, void *);
    void *ctx;
} user_free;

static void free_counted(void *data, void *hint) {
    (void)data;
    struct peer_count *pc = hint;
    atomic_fetch_sub(&pc->n, 1);
    atomic_fetch_sub(&pc->tp->inflight, 1);
}

static void free_user(void *data, void *hint) {
    user_free *u = hint;
    u->fn(data, u->ctx);
    free(u);
}

static sl_status check_to(sl_tp *tp, int to) {
    if (to < 0 || to >= tp->n || to == tp->self)
        return sl_err(SL_EINVAL, "transport: rank %d cannot send to rank %d (of %d)", tp->self, to, tp->n);
    if (!tp->connected) return sl_err(SL_ESTATE, "transport: sl_tp_connect was not called");
    return SL_OK;
}

/* Send the header frame, then the payload message m (consumed either way). */
static sl_status send_parts(sl_tp *tp, int to, sl_msg_hdr *h, zmq_msg_t *m) {
    uint8_t hb[SL_MSG_HDR_SIZE];
    h->sender = (uint32_t)tp->self;
    h->job = tp->job;
    h->length = zmq_msg_size(m);
    sl_msg_encode(h, hb);
    if (zmq_send(tp->out[to], hb, sizeof hb, ZMQ_SNDMORE) == -1) {
        int e = zmq_errno();
        zmq_msg_close(m);
        if (e == EAGAIN) {
            /* libzmq drops the connection for good after a failed handshake, so sends to
             * such a peer only ever time out: say why */
            if (tp->mon[to]) read_monitor(tp, to);
            if (tp->refused[to]) {
                sl_err(SL_ETIMEDOUT, "transport: cannot send to rank %d (%s): it refused this task's CURVE handshake",
                       to, tp->addrs[to]);
                sl_err_hint(REFUSED_HINT);
                return SL_ETIMEDOUT;
            }
            return sl_err(SL_ETIMEDOUT, "transport: rank %d (%s) took nothing for %.1f s (its queue is full)",
                          to, tp->addrs[to], tp->timeout_s);
        }
        return sl_err(SL_EIO, "transport: cannot send to rank %d (%s): %s", to, tp->addrs[to], zmq_strerror(e));
    }
    size_t len = zmq_msg_size(m);
    if (zmq_msg_send(m, tp->out[to], 0) == -1) {
        int e = zmq_errno();
        zmq_msg_close(m);
        return sl_err(SL_EIO, "transport: cannot send to rank %d (%s): %s", to, tp->addrs[to], zmq_strerror(e));
    }
    tp->st.sent++;
    tp->st.sent_bytes += len;
    return SL_OK;
}

sl_status sl_tp_send(sl_tp *tp, int to, sl_msg_hdr *h, const void *data, size_t len,
                     void (*free_fn)(void *data, void *ctx), void *ctx) {
    sl_status s = check_to(tp, to);
    zmq_msg_t m;
    if (s || len == 0) {
        if (free_fn) free_fn((void *)data, ctx);
        if (s) return s;
        ZCHECK(zmq_msg_init(&m));
        return send_parts(tp, to, h, &m);
    }
    if (free_fn) {
        user_free *u = malloc(sizeof *u);
        if (!u) { free_fn((void *)data, ctx); return sl_err(SL_ENOMEM, "transport: out of memory"); }
        u->fn = free_fn;
        u->ctx = ctx;
        if (zmq_msg_init_data(&m, (void *)data, len, free_user, u) == -1) {
            free_user((void *)data, u);
            return zfail("zmq_msg_init_data", __FILE__, __LINE__);
        }
    } else {
        atomic_fetch_add(&tp->inflight, 1);
        atomic_fetch_add(&tp->pc[to].n, 1);
        if (zmq_msg_init_data(&m, (void *)data, len, free_counted, &tp->pc[to]) == -1) {
            atomic_fetch_sub(&tp->pc[to].n, 1);
            atomic_fetch_sub(&tp->inflight, 1);
            return zfail("zmq_msg_init_data", __FILE__, __LINE__);
        }
    }
    return send_parts(tp, to, h, &m);
}

sl_status sl_tp_send_copy(sl_tp *tp, int to, sl_msg_hdr *h, const void *data, size_t len) {
    sl_status s = check_to(tp, to);
    if (s) return s;
    zmq_msg_t m;
    ZCHECK(zmq_msg_init_size(&m, len));
    if (len) memcpy(zmq_msg_data(&m), data, len);
    return send_parts(tp, to, h, &m);
}

sl_status sl_tp_forward(sl_tp *tp, int to, sl_msg_hdr *h) {
    sl_status s = check_to(tp, to);
    if (s) return s;
    if (!tp->have_cur) return sl_err(SL_ESTATE, "transport: no received message to forward");
    tp->have_cur = 0;
    return send_parts(tp, to, h, &tp->cur);
}

void sl_tp_abort(sl_tp *tp, const char *why) {
    if (!tp->connected) return;
    size_t len = strlen(why);
    if (len > 900) len = 900;
    sl_msg_hdr h = {.type = SL_MSG_ABORT, .dtype = SL_DT_U8};
    uint8_t hb[SL_MSG_HDR_SIZE];
    h.sender = (uint32_t)tp->self;
    h.job = tp->job;
    h.length = len;
    sl_msg_encode(&h, hb);
    for (int i = 0; i < tp->n; i++) {
        if (i == tp->self || !tp->out[i]) continue;
        if (zmq_send(tp->out[i], hb, sizeof hb, ZMQ_SNDMORE | ZMQ_DONTWAIT) == -1) continue;
        zmq_send(tp->out[i], why, len, ZMQ_DONTWAIT);
    }
}

/* ---- receive ----------------------------------------------------------------------- */

void sl_tp_drop(sl_tp *tp) {
    if (tp->have_cur) { zmq_msg_close(&tp->cur); tp->have_cur = 0; }
    tp->st.dropped++;
}

/* Read one monitor event of peer i and update lost[]. */
static void read_monitor(sl_tp *tp, int i) {
    for (;;) {
        zmq_msg_t ev, addr;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, tp->mon[i], ZMQ_DONTWAIT) == -1) { zmq_msg_close(&ev); return; }
        uint16_t event = 0;
        if (zmq_msg_size(&ev) >= 2) memcpy(&event, zmq_msg_data(&ev), 2);
        int more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
        if (more) {
            zmq_msg_init(&addr);
            zmq_msg_recv(&addr, tp->mon[i], 0);
            zmq_msg_close(&addr);
        }
        if (event == ZMQ_EVENT_DISCONNECTED) {
            if (!tp->lost[i]) tp->lost_at[i] = sl_now_s();
            tp->lost[i] = 1;
        } else if (event == ZMQ_EVENT_CONNECTED) {
            tp->lost[i] = 0;
            tp->seen[i] = 1;
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH || event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
            tp->refused[i] = 1;
        } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            tp->refused[i] = 0;
        }
    }
}

/* The rank in a routing id "r<rank>.<16 hex digits>" (what sl_tp_connect sets), or -1 for
 * any other id, this task's own rank, or a rank outside the job. */
static int parse_routing_id(int self, int n, const char *id, size_t idn) {
    if (idn < 2 + 1 + 16 || idn > 1 + 10 + 1 + 16 || id[0] != 'r' || id[idn - 17] != '.') return -1;
    long r = 0;
    size_t i = 1;
    for (; i < idn - 17; i++) {
        if (id[i] < '0' || id[i] > '9' || (i == 1 && id[i] == '0' && idn - 17 > 2)) return -1;
        r = r * 10 + (id[i] - '0');
        if (r >= n) return -1;
    }
    for (i = idn - 16; i < idn; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) return -1;
    return r == self ? -1 : (int)r;
}

int sl_msg_accept(const void *id, size_t idn, const void *hdr, size_t hlen, size_t plen, int self, int n,
                  uint64_t job, size_t max_msg, sl_msg_hdr *out) {
    sl_msg_hdr h;
    if (sl_msg_decode(hdr, hlen, &h) != SL_OK) return SL_MSG_INVALID;
    if (h.job != job) return SL_MSG_FOREIGN;
    int rank = parse_routing_id(self, n, id, idn);
    if (rank < 0 || h.sender != (uint32_t)rank || h.length != plen || h.length > max_msg) return SL_MSG_INVALID;
    *out = h;
    return rank;
}

/* Read all frames of one inbox message. Returns 1 with *h and tp->cur set for a valid
 * message, 0 for a dropped one, or a negative status for an ABORT (or a ZeroMQ failure). */
static int read_inbox(sl_tp *tp, sl_msg_hdr *h) {
    zmq_msg_t parts[3];
    int nparts = 0, more = 1, ok = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, tp->inbox, ZMQ_DONTWAIT) == -1) {
            int e = zmq_errno();
            zmq_msg_close(&m);
            for (int i = 0; i < nparts; i++) zmq_msg_close(&parts[i]);
            if (e == EAGAIN && nparts == 0) return 0;
            return sl_err(SL_EIO, "transport: rank %d: cannot receive from its inbox: %s", tp->self, zmq_strerror(e));
        }
        more = zmq_msg_more(&m);
        if (nparts < 3) {
            zmq_msg_init(&parts[nparts]);
            zmq_msg_move(&parts[nparts++], &m); /* zmq_msg_t must not be copied by value */
        } else {
            ok = 0;
        }
        zmq_msg_close(&m);
    }
    int rank = -1;
    sl_msg_hdr hd;
    if (ok && nparts == 3) {
        const char *id = zmq_msg_data(&parts[0]);
        size_t idn = zmq_msg_size(&parts[0]);
        rank = sl_msg_accept(id, idn, zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]), zmq_msg_size(&parts[2]),
                             tp->self, tp->n, tp->job, tp->max_msg, &hd);
        /* another job's message (a leftover task, a stranger) is never acted on, not even
         * an ABORT */
        if (rank == SL_MSG_FOREIGN) {
            tp->st.foreign++;
            sl_msg_hdr fh;
            if (sl_msg_decode(zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]), &fh) == SL_OK) tp->last_foreign = fh.job;
        }
        ok = rank >= 0;
    } else {
        ok = 0;
    }
    zmq_msg_close(&parts[0]);
    if (nparts > 1) zmq_msg_close(&parts[1]);
    if (!ok) {
        if (nparts > 2) zmq_msg_close(&parts[2]);
        tp->st.dropped++;
        return 0;
    }
    tp->st.received++;
    tp->st.received_bytes += hd.length;
    if (hd.type == SL_MSG_ABORT) {
        char why[1024];
        size_t n = hd.length < sizeof why - 1 ? hd.length : sizeof why - 1;
        memcpy(why, zmq_msg_data(&parts[2]), n);
        why[n] = 0;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)why[i] < 32 && why[i] != '\n') why[i] = '?';
        zmq_msg_close(&parts[2]);
        return sl_err(SL_EPEER, "rank %d (%s) failed: %s", rank, tp->addrs[rank], why);
    }
    zmq_msg_init(&tp->cur);
    zmq_msg_move(&tp->cur, &parts[2]);
    zmq_msg_close(&parts[2]);
    tp->have_cur = 1;
    *h = hd;
    return 1;
}

sl_status sl_tp_recv(sl_tp *tp, int from, double timeout_s, sl_msg_hdr *h, const void **data,
                     size_t *len) {
    if (tp->have_cur) { zmq_msg_close(&tp->cur); tp->have_cur = 0; }
    if (timeout_s < 0) timeout_s = tp->timeout_s;
    double start = sl_now_s(), deadline = start + timeout_s, last_activity = start;
    double grace = timeout_s / 2 < 1.0 ? timeout_s / 2 : 1.0;
    zmq_pollitem_t items[1 + 1024];
    int nmon = 0, monrank[1024];
    items[0] = (zmq_pollitem_t){.socket = tp->inbox, .events = ZMQ_POLLIN};
    for (int i = 0; i < tp->n && nmon < 1024; i++)
        if (tp->mon[i]) {
            items[1 + nmon] = (zmq_pollitem_t){.socket = tp->mon[i], .events = ZMQ_POLLIN};
            monrank[nmon++] = i;
        }
    for (;;) {
        /* Drain what is already queued before judging a closed connection: a peer that sent
         * its last message and then left is not lost. */
        int r = read_inbox(tp, h);
        if (r < 0) return r;
        if (r == 1) {
            *data = zmq_msg_data(&tp->cur);
            *len = zmq_msg_size(&tp->cur);
            return SL_OK;
        }
        double t = sl_now_s();
        if (from >= 0 && from < tp->n && tp->lost[from]) {
            double since = tp->lost_at[from] > last_activity ? tp->lost_at[from] : last_activity;
            if (t - since >= grace) {
                if (tp->refused[from]) {
                    sl_err(SL_EPEER, "lost rank %d (%s): it refused this task's CURVE handshake", from, tp->addrs[from]);
                    sl_err_hint(REFUSED_HINT);
                    return SL_EPEER;
                }
                sl_err(SL_EPEER, "lost rank %d (%s): connection closed", from, tp->addrs[from]);
                sl_err_hint("the process of rank %d died or left; see its own output for why", from);
                return SL_EPEER;
            }
        }
        if (t >= deadline) {
            if (from >= 0 && from < tp->n && tp->mon[from]) read_monitor(tp, from);
            if (from >= 0 && from < tp->n && tp->mon[from] && !tp->seen[from] && !tp->refused[from]) {
                sl_err(SL_ETIMEDOUT, "rank %d (%s) never answered within %.1f s (%llu received, %llu dropped so far)",
                       from, tp->addrs[from], timeout_s, (unsigned long long)tp->st.received,
                       (unsigned long long)tp->st.dropped);
                sl_err_hint("no connection to rank %d ever opened: its process did not start, failed before it "
                            "listened, or listens on another address", from);
                return SL_ETIMEDOUT;
            }
            if (from >= 0 && from < tp->n)
                sl_err(SL_ETIMEDOUT, "no message from rank %d (%s) in %.1f s (%llu received, %llu dropped so far)", from,
                       tp->addrs[from], timeout_s, (unsigned long long)tp->st.received, (unsigned long long)tp->st.dropped);
            else
                sl_err(SL_ETIMEDOUT, "rank %d: no message from any peer in %.1f s", tp->self, timeout_s);
            int refused = -1;
            for (int i = 0; i < tp->n && refused < 0; i++) {
                if (tp->mon[i]) read_monitor(tp, i);
                if (tp->refused[i]) refused = i;
            }
            if (refused >= 0)
                sl_err_hint("rank %d (%s) refused this task's CURVE handshake: %s", refused, tp->addrs[refused],
                            REFUSED_HINT);
            else if (tp->st.foreign)
                sl_err_hint("%llu messages of another job (job id %016llx, this job's is %016llx) were dropped: start "
                            "every task of a job with the same SLUICE_JOB_ID (sluice-launch does), and stop tasks "
                            "left over from an earlier job on these ports",
                            (unsigned long long)tp->st.foreign, (unsigned long long)tp->last_foreign,
                            (unsigned long long)tp->job);
            else
                sl_err_hint("the peer may be stuck, overloaded or unreachable; raise the timeout (cluster { timeout 60s })");
            return SL_ETIMEDOUT;
        }
        double wait = deadline - t;
        if (from >= 0 && from < tp->n && tp->lost[from] && wait > 0.05) wait = 0.05;
        int rc = zmq_poll(items, 1 + nmon, (long)(wait * 1000) + 1);
        if (rc == -1) {
            if (zmq_errno() == EINTR) continue;
            return sl_err(SL_EIO, "transport: rank %d: cannot wait for messages (zmq_poll): %s", tp->self,
                          zmq_strerror(zmq_errno()));
        }
        for (int i = 0; i < nmon; i++)
            if (items[1 + i].revents & ZMQ_POLLIN) read_monitor(tp, monrank[i]);
        if (items[0].revents & ZMQ_POLLIN) last_activity = sl_now_s();
    }
}

uint64_t sl_tp_job_id(const sl_tp *tp) { return tp->job; }
double sl_tp_timeout_s(const sl_tp *tp) { return tp->timeout_s; }
