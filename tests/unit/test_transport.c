/* dist/transport.c: header encode/decode (round trip and every corruption), send/recv with
 * zero-copy release, forwarding, timeouts, address errors, and a raw ZeroMQ client sending
 * garbage, spoofed, truncated and oversized frames: all dropped and counted, and the
 * transport goes on serving. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "sluice/transport.h"
#include "test.h"

/* libzmq is not built with ThreadSanitizer: its lock-free queues between the I/O thread and
 * the caller are invisible to TSan, which then reports the handover of every message. */
#if defined(__SANITIZE_THREAD__)
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) { return "called_from_lib:libzmq.so\nrace:libzmq.so\n"; }
#endif

static int pair(sl_tp **a, sl_tp **b, const sl_tp_opts *o) {
    const char *addrs[2] = {"127.0.0.1:0", "127.0.0.1:0"};
    if (sl_tp_create(0, 2, addrs, o, a) || sl_tp_create(1, 2, addrs, o, b)) return -1;
    if (sl_tp_set_peer(*a, 1, sl_tp_endpoint(*b)) || sl_tp_set_peer(*b, 0, sl_tp_endpoint(*a))) return -1;
    return sl_tp_connect(*a) || sl_tp_connect(*b) ? -1 : 0;
}

TEST(test_header_roundtrip) {
    sl_msg_hdr h = {.type = SL_MSG_DATA, .round = 513, .dtype = SL_DT_F32, .flags = SL_MSGF_FP16,
                    .sender = 70000, .tensor = 0xdeadbeef, .step = 0x0102030405060708ull,
                    .offset = 1ull << 40, .length = 4096, .job = 0xfedcba9876543210ull};
    uint8_t b[SL_MSG_HDR_SIZE];
    sl_msg_encode(&h, b);
    ASSERT_EQ(b[0], 'S');
    ASSERT_EQ(b[3], '1');
    sl_msg_hdr g;
    ASSERT_OK(sl_msg_decode(b, sizeof b, &g));
    ASSERT_EQ(g.type, h.type);
    ASSERT_EQ(g.round, 513);
    ASSERT_EQ(g.dtype, SL_DT_F32);
    ASSERT_EQ(g.flags, SL_MSGF_FP16);
    ASSERT_EQ(g.sender, 70000);
    ASSERT_U64(g.tensor, 0xdeadbeef);
    ASSERT_U64(g.step, 0x0102030405060708ull);
    ASSERT_U64(g.offset, 1ull << 40);
    ASSERT_U64(g.length, 4096);
    ASSERT_U64(g.job, 0xfedcba9876543210ull);
    ASSERT_EQ(b[48], 0x10); /* the job id is little-endian at byte 48 */
    ASSERT_EQ(b[55], 0xfe);
}

static sl_status corrupt(int at, uint8_t v) {
    sl_msg_hdr h = {.type = SL_MSG_DATA, .dtype = SL_DT_F32, .length = 8};
    uint8_t b[SL_MSG_HDR_SIZE];
    sl_msg_encode(&h, b);
    b[at] = v;
    sl_msg_hdr g;
    return sl_msg_decode(b, sizeof b, &g);
}

TEST(test_header_corruption) {
    uint8_t b[SL_MSG_HDR_SIZE] = {0};
    sl_msg_hdr g;
    ASSERT_EQ(sl_msg_decode(b, 48, &g), SL_ECORRUPT); /* a version-1 header (no job id) */
    ASSERT_STREQ(sl_errmsg(), "message header: byte 48: header frame is 48 bytes, expected 56");
    ASSERT_EQ(sl_msg_decode(b, 0, &g), SL_ECORRUPT);
    ASSERT_EQ(corrupt(0, 'X'), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "message header: byte 0: bad magic 0x31574c58 (expected 0x31574c53 \"SLW1\")");
    ASSERT_EQ(corrupt(4, 1), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "message header: byte 4: unsupported version 1 (this build speaks 2)");
    ASSERT_EQ(corrupt(6, 0), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "message header: byte 6: unknown message type 0");
    ASSERT_EQ(corrupt(6, 99), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "message header: byte 6: unknown message type 99");
    ASSERT_EQ(corrupt(40, 200), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "message header: byte 40: bad dtype 200");
    ASSERT_EQ(corrupt(41, 4), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "message header: byte 41: unknown flags 0x04");
    ASSERT_EQ(corrupt(40, SL_DT_I32), SL_OK);
    ASSERT_EQ(corrupt(45, 1), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "message header: byte 44: reserved bytes are not zero");
    ASSERT_EQ(corrupt(32, 7), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "message header: byte 32: payload length 7 is not a multiple of 4-byte float32");
}

static int released;
static void on_release(void *data, void *ctx) {
    (void)data;
    released += *(int *)ctx;
}

TEST(test_send_recv_forward) {
    sl_tp *a, *b;
    sl_tp_opts o = {.timeout_s = 5};
    ASSERT_EQ(pair(&a, &b, &o), 0);
    static float payload[1000];
    for (int i = 0; i < 1000; i++) payload[i] = (float)i;
    released = 0;
    int one = 1;
    sl_msg_hdr h = {.type = SL_MSG_DATA, .dtype = SL_DT_F32, .tensor = 3, .step = 9, .offset = 12, .round = 2};
    ASSERT_OK(sl_tp_send(a, 1, &h, payload, sizeof payload, on_release, &one));
    sl_msg_hdr g;
    const void *data;
    size_t len;
    ASSERT_OK(sl_tp_recv(b, 0, -1, &g, &data, &len));
    ASSERT_EQ(g.sender, 0);
    ASSERT_EQ(g.length, sizeof payload);
    ASSERT_EQ(len, sizeof payload);
    ASSERT_EQ(g.tensor, 3);
    ASSERT_EQ(g.step, 9);
    ASSERT_EQ(g.offset, 12);
    ASSERT_EQ(g.round, 2);
    ASSERT_MEMEQ(data, payload, sizeof payload);
    /* b forwards the same bytes back to a without copying them */
    g.round = 3;
    ASSERT_OK(sl_tp_forward(b, 0, &g));
    ASSERT_EQ(sl_tp_forward(b, 0, &g), SL_ESTATE);
    ASSERT_OK(sl_tp_recv(a, 1, -1, &g, &data, &len));
    ASSERT_EQ(g.sender, 1);
    ASSERT_EQ(g.round, 3);
    ASSERT_MEMEQ(data, payload, sizeof payload);
    /* counted zero-copy sends are waited for by flush */
    ASSERT_OK(sl_tp_send(a, 1, &h, payload, 400, NULL, NULL));
    ASSERT_OK(sl_tp_recv(b, -1, -1, &g, &data, &len));
    ASSERT_OK(sl_tp_flush(a));
    ASSERT_EQ(released, 1);
    ASSERT_EQ(sl_tp_send(a, 0, &h, payload, 4, NULL, NULL), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "transport: rank 0 cannot send to rank 0 (of 2)");
    sl_tp_stats st;
    sl_tp_get_stats(a, &st);
    ASSERT_EQ(st.sent, 2);
    ASSERT_EQ(st.received, 1);
    ASSERT_EQ(st.dropped, 0);
    /* a receive with nothing coming times out, naming the peer */
    char want[128];
    snprintf(want, sizeof want, "no message from rank 0 (%s) in 0.2 s", sl_tp_endpoint(a));
    ASSERT_EQ(sl_tp_recv(b, 0, 0.2, &g, &data, &len), SL_ETIMEDOUT);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT_EQ(sl_tp_recv(b, -1, 0.2, &g, &data, &len), SL_ETIMEDOUT);
    ASSERT_CONTAINS(sl_errmsg(), "rank 1: no message from any peer in 0.2 s");
    /* an abort from a peer fails the receive with its message */
    sl_tp_abort(a, "disk full");
    ASSERT_EQ(sl_tp_recv(b, 0, -1, &g, &data, &len), SL_EPEER);
    snprintf(want, sizeof want, "rank 0 (%s) failed: disk full", sl_tp_endpoint(a));
    ASSERT_STREQ(sl_errmsg(), want);
    sl_tp_destroy(a);
    sl_tp_destroy(b);
    ASSERT_EQ(released, 1);
}

TEST(test_lost_peer) {
    sl_tp *a, *b;
    sl_tp_opts o = {.timeout_s = 10};
    ASSERT_EQ(pair(&a, &b, &o), 0);
    sl_msg_hdr h = {.type = SL_MSG_DATA, .dtype = SL_DT_U8};
    sl_msg_hdr g;
    const void *data;
    size_t len;
    ASSERT_OK(sl_tp_send_copy(a, 1, &h, "hi", 2));
    ASSERT_OK(sl_tp_recv(b, 0, -1, &g, &data, &len));
    char want[128];
    snprintf(want, sizeof want, "lost rank 0 (%s): connection closed", sl_tp_endpoint(a));
    /* a leaves after sending one more message: b still gets it, then learns a is gone */
    ASSERT_OK(sl_tp_send_copy(a, 1, &h, "bye", 3));
    sl_tp_destroy(a);
    ASSERT_OK(sl_tp_recv(b, 0, -1, &g, &data, &len));
    ASSERT_EQ(len, 3);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ASSERT_EQ(sl_tp_recv(b, 0, -1, &g, &data, &len), SL_EPEER);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT(t1.tv_sec - t0.tv_sec < 5);
    ASSERT_EQ(sl_tp_peer_lost(b, 0), 1);
    sl_tp_destroy(b);
}

static void raw_send(void *s, int nparts, const void *const *parts, const size_t *lens) {
    for (int i = 0; i < nparts; i++) zmq_send(s, parts[i], lens[i], i + 1 < nparts ? ZMQ_SNDMORE : 0);
}

TEST(test_garbage_dropped_and_counted) {
    /* a world of 3 whose rank 2 never shows up: a stranger will claim to be it */
    sl_tp *a, *b;
    sl_tp_opts o = {.timeout_s = 5, .max_msg = 4096};
    const char *addrs[3] = {"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:1"};
    ASSERT_OK(sl_tp_create(0, 3, addrs, &o, &a));
    ASSERT_OK(sl_tp_create(1, 3, addrs, &o, &b));
    ASSERT_OK(sl_tp_set_peer(a, 1, sl_tp_endpoint(b)));
    ASSERT_OK(sl_tp_set_peer(b, 0, sl_tp_endpoint(a)));
    ASSERT_OK(sl_tp_connect(a));
    ASSERT_OK(sl_tp_connect(b));
    void *ctx = zmq_ctx_new();
    char ep[128];
    snprintf(ep, sizeof ep, "tcp://%s", sl_tp_endpoint(b));
    /* a stranger without a routing id, one claiming to be rank 0, one with a bad id */
    void *anon = zmq_socket(ctx, ZMQ_DEALER), *spoof = zmq_socket(ctx, ZMQ_DEALER), *odd = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(spoof, ZMQ_ROUTING_ID, "r2", 2);
    zmq_setsockopt(odd, ZMQ_ROUTING_ID, "r9x", 3);
    void *socks[3] = {anon, spoof, odd};
    for (int i = 0; i < 3; i++) {
        zmq_setsockopt(socks[i], ZMQ_LINGER, &zero, sizeof zero);
        ASSERT_EQ(zmq_connect(socks[i], ep), 0);
    }
    uint8_t good[SL_MSG_HDR_SIZE], wrong_sender[SL_MSG_HDR_SIZE], junk[SL_MSG_HDR_SIZE];
    sl_msg_hdr h = {.type = SL_MSG_DATA, .dtype = SL_DT_U8, .sender = 2, .length = 5};
    sl_msg_encode(&h, good);
    h.sender = 0;
    sl_msg_encode(&h, wrong_sender);
    memset(junk, 0xab, sizeof junk);
    static uint8_t big[1 << 16];
    int dropped = 0;
    {   /* from the anonymous stranger: a valid-looking message is still not from a rank */
        const void *p[] = {good, "hello"};
        size_t l[] = {sizeof good, 5};
        raw_send(anon, 2, p, l);
        dropped++;
    }
    {   const void *p[] = {"garbage"};
        size_t l[] = {7};
        raw_send(spoof, 1, p, l);                     /* one frame */
        dropped++;
        const void *p2[] = {junk, "hello"};
        size_t l2[] = {sizeof junk, 5};
        raw_send(spoof, 2, p2, l2);                   /* bad header */
        dropped++;
        const void *p3[] = {good, "hel"};
        size_t l3[] = {sizeof good, 3};
        raw_send(spoof, 2, p3, l3);                   /* truncated payload */
        dropped++;
        const void *p4[] = {good, "hello", "extra"};
        size_t l4[] = {sizeof good, 5, 5};
        raw_send(spoof, 3, p4, l4);                   /* too many frames */
        dropped++;
        const void *p5[] = {wrong_sender, "hello"};
        size_t l5[] = {sizeof wrong_sender, 5};
        raw_send(spoof, 2, p5, l5);                   /* header says rank 0, link says rank 2 */
        dropped++;
        const void *p6[] = {good, "hel"};
        size_t l6[] = {20, 3};
        raw_send(spoof, 2, p6, l6);                   /* header frame of 20 bytes */
        dropped++;
    }
    {   const void *p[] = {good, "hello"};
        size_t l[] = {sizeof good, 5};
        raw_send(odd, 2, p, l);                        /* routing id "r9x" is no rank */
        dropped++;
        const void *p2[] = {good, big};
        size_t l2[] = {sizeof good, sizeof big};
        raw_send(odd, 2, p2, l2);                      /* over max_msg: ZeroMQ drops the link */
    }
    /* the real rank 0 sends one valid message; the connections are independent, so keep
     * receiving until it came and every piece of garbage was seen (or 10 s passed) */
    sl_msg_hdr rh = {.type = SL_MSG_DATA, .dtype = SL_DT_U8};
    ASSERT_OK(sl_tp_send_copy(a, 1, &rh, "valid", 5));
    sl_msg_hdr g;
    const void *data;
    size_t len;
    sl_tp_stats st;
    int got = 0;
    for (int k = 0; k < 50; k++) {
        sl_status s = sl_tp_recv(b, -1, 0.2, &g, &data, &len);
        if (s == SL_OK) {
            ASSERT_EQ(len, 5);
            ASSERT_MEMEQ(data, "valid", 5);
            ASSERT_EQ(g.sender, 0);
            got++;
        } else {
            ASSERT_EQ(s, SL_ETIMEDOUT);
        }
        sl_tp_get_stats(b, &st);
        if (got && st.dropped >= (uint64_t)dropped) break;
    }
    ASSERT_EQ(got, 1);
    ASSERT_EQ(st.dropped, (uint64_t)dropped);
    ASSERT_EQ(st.received, 1);
    /* and the transport keeps serving */
    ASSERT_OK(sl_tp_send_copy(a, 1, &rh, "again", 5));
    ASSERT_OK(sl_tp_recv(b, 0, -1, &g, &data, &len));
    ASSERT_MEMEQ(data, "again", 5);
    for (int i = 0; i < 3; i++) zmq_close(socks[i]);
    zmq_ctx_term(ctx);
    sl_tp_destroy(a);
    sl_tp_destroy(b);
}

/* A raw DEALER to tp's inbox under routing id `id` (NULL: ZeroMQ's own random id). */
static void *raw_dealer(void *ctx, const sl_tp *tp, const char *id) {
    char ep[128];
    int zero = 0;
    snprintf(ep, sizeof ep, "tcp://%s", sl_tp_endpoint(tp));
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (id) zmq_setsockopt(s, ZMQ_ROUTING_ID, id, strlen(id));
    zmq_connect(s, ep);
    return s;
}

/* Send a well-formed message of job `job` claiming to come from `sender`. */
static void raw_msg(void *s, int type, uint32_t sender, uint64_t job, const char *payload) {
    sl_msg_hdr h = {.type = (uint16_t)type, .dtype = SL_DT_U8, .sender = sender, .job = job,
                    .length = strlen(payload)};
    uint8_t hb[SL_MSG_HDR_SIZE];
    sl_msg_encode(&h, hb);
    zmq_send(s, hb, sizeof hb, ZMQ_SNDMORE);
    zmq_send(s, payload, strlen(payload), 0);
}

/* Receive on tp until a message of this job arrives or `want_dropped` drops were counted
 * and limit_s passed; SL_OK with the message, else the last status. */
static sl_status recv_past_drops(sl_tp *tp, int from, uint64_t want_dropped, sl_msg_hdr *g, const void **data,
                                 size_t *len) {
    sl_status s = SL_ETIMEDOUT;
    for (int k = 0; k < 50; k++) {
        s = sl_tp_recv(tp, from, 0.2, g, data, len);
        if (s != SL_ETIMEDOUT) return s;
        sl_tp_stats st;
        sl_tp_get_stats(tp, &st);
        if (want_dropped && st.dropped >= want_dropped) return s;
    }
    return s;
}

/* Nothing more comes to TP (recv_past_drops to its timeout), and its stats count N messages
 * dropped, N of them from strangers. Uses the test's g, data, len and st. */
#define ASSERT_DROPPED_FOREIGN(tp, n)                                         \
    do {                                                                      \
        ASSERT_EQ(recv_past_drops(tp, -1, n, &g, &data, &len), SL_ETIMEDOUT); \
        sl_tp_get_stats(tp, &st);                                             \
        ASSERT_EQ(st.dropped, n);                                             \
        ASSERT_EQ(st.foreign, n);                                             \
    } while (0)

#define JOB 0x5eed5eed00c0ffeeull

TEST(test_strangers_cannot_end_or_alter_job) {
    sl_tp *a, *b;
    sl_tp_opts o = {.timeout_s = 5, .job_id = JOB};
    ASSERT_EQ(pair(&a, &b, &o), 0);
    void *ctx = zmq_ctx_new();
    /* three strangers at b's inbox: one under the plain id rank 0 used to have, one under
     * an id of the transport's own form (a guessed nonce), one with no id at all */
    void *socks[3] = {raw_dealer(ctx, b, "r0"), raw_dealer(ctx, b, "r0.0123456789abcdef"), raw_dealer(ctx, b, NULL)};
    for (int i = 0; i < 3; i++) {
        zmq_send(socks[i], "garbage", 7, 0);                                   /* (a) garbage */
        raw_msg(socks[i], SL_MSG_ABORT, 0, JOB ^ 1, "injected by a stranger"); /* (b) ABORT, wrong job */
        raw_msg(socks[i], SL_MSG_DATA, 0, JOB + 7, "evil!");                  /* (c) DATA, wrong job */
        raw_msg(socks[i], SL_MSG_ABORT, 0, 0, "a job without id");             /* an old / id-less job */
    }
    sl_msg_hdr g;
    const void *data;
    size_t len;
    sl_tp_stats st;
    /* wait until every stranger's message was seen and dropped: none of them ends b */
    ASSERT_EQ(recv_past_drops(b, -1, 12, &g, &data, &len), SL_ETIMEDOUT);
    sl_tp_get_stats(b, &st);
    ASSERT_EQ(st.dropped, 12);
    ASSERT_EQ(st.foreign, 9);
    ASSERT_EQ(st.received, 0);
    /* a timeout says that messages of another job came */
    ASSERT_EQ(sl_tp_recv(b, 0, 0.1, &g, &data, &len), SL_ETIMEDOUT);
    ASSERT_CONTAINS(sl_errmsg(), "---> HINT: 9 messages of another job (job id 0000000000000000, this job's is "
                                 "5eed5eed00c0ffee) were dropped: start every task of a job with the same SLUICE_JOB_ID");
    /* the real rank 0 still gets through, with exactly what it sent */
    sl_msg_hdr h = {.type = SL_MSG_DATA, .dtype = SL_DT_U8, .tensor = 4};
    ASSERT_OK(sl_tp_send_copy(a, 1, &h, "valid", 5));
    ASSERT_OK(sl_tp_recv(b, 0, -1, &g, &data, &len));
    ASSERT_EQ(g.sender, 0);
    ASSERT_EQ(g.tensor, 4);
    ASSERT_U64(g.job, JOB);
    ASSERT_EQ(len, 5);
    ASSERT_MEMEQ(data, "valid", 5);
    /* and an ABORT from the real peer, with the right job id, still ends the receive */
    sl_tp_abort(a, "real failure");
    ASSERT_EQ(sl_tp_recv(b, 0, -1, &g, &data, &len), SL_EPEER);
    char want[200];
    snprintf(want, sizeof want, "rank 0 (%s) failed: real failure", sl_tp_endpoint(a));
    ASSERT_STREQ(sl_errmsg(), want);
    sl_tp_get_stats(b, &st);
    ASSERT_EQ(st.dropped, 12);
    ASSERT_EQ(st.foreign, 9);
    ASSERT_EQ(st.received, 2);
    for (int i = 0; i < 3; i++) zmq_close(socks[i]);
    zmq_ctx_term(ctx);
    sl_tp_destroy(a);
    sl_tp_destroy(b);
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

TEST(test_impostor_cannot_take_over_a_rank) {
    void *ctx = zmq_ctx_new();
    sl_tp_opts o = {.timeout_s = 5, .job_id = JOB};
    const char *addrs[2] = {"127.0.0.1:0", "127.0.0.1:0"};
    sl_msg_hdr h = {.type = SL_MSG_DATA, .dtype = SL_DT_U8}, g;
    const void *data;
    size_t len;
    sl_tp_stats st;
    /* while: rank 1 is connected and its message waits unread in rank 0's inbox when an
     * impostor connects under "r1" (the routing id rank 1 used to have) */
    sl_tp *a, *b;
    ASSERT_EQ(pair(&a, &b, &o), 0);
    ASSERT_OK(sl_tp_send_copy(b, 0, &h, "one", 3));
    sleep_ms(300);
    void *imp = raw_dealer(ctx, a, "r1");
    raw_msg(imp, SL_MSG_DATA, 1, JOB ^ 0xff, "xyz");
    sleep_ms(300);
    ASSERT_OK(sl_tp_send_copy(b, 0, &h, "two", 3));
    ASSERT_OK(sl_tp_recv(a, 1, -1, &g, &data, &len));
    ASSERT_EQ(g.sender, 1);
    ASSERT_EQ(len, 3);
    ASSERT_MEMEQ(data, "one", 3); /* not lost to a takeover */
    ASSERT_OK(sl_tp_recv(a, 1, -1, &g, &data, &len));
    ASSERT_EQ(len, 3);
    ASSERT_MEMEQ(data, "two", 3);
    ASSERT_DROPPED_FOREIGN(a, 1);
    zmq_close(imp);
    sl_tp_destroy(a);
    sl_tp_destroy(b);
    /* before: the impostor holds "r1" at rank 0's inbox before rank 1 connects; its ABORT
     * (another job's) ends nothing, and rank 1 still gets through */
    ASSERT_OK(sl_tp_create(0, 2, addrs, &o, &a));
    ASSERT_OK(sl_tp_create(1, 2, addrs, &o, &b));
    ASSERT_OK(sl_tp_set_peer(a, 1, sl_tp_endpoint(b)));
    ASSERT_OK(sl_tp_set_peer(b, 0, sl_tp_endpoint(a)));
    ASSERT_OK(sl_tp_connect(a));
    imp = raw_dealer(ctx, a, "r1");
    raw_msg(imp, SL_MSG_ABORT, 1, 42, "injected by a stranger");
    ASSERT_EQ(recv_past_drops(a, -1, 1, &g, &data, &len), SL_ETIMEDOUT);
    ASSERT_OK(sl_tp_connect(b));
    ASSERT_OK(sl_tp_send_copy(b, 0, &h, "real", 4));
    raw_msg(imp, SL_MSG_ABORT, 1, 42, "injected again");
    ASSERT_OK(sl_tp_recv(a, 1, -1, &g, &data, &len));
    ASSERT_EQ(g.sender, 1);
    ASSERT_EQ(len, 4);
    ASSERT_MEMEQ(data, "real", 4);
    ASSERT_DROPPED_FOREIGN(a, 2);
    ASSERT_EQ(st.received, 1);
    /* a reconnect (new nonce) is not refused as a duplicate of the old connection */
    ASSERT_OK(sl_tp_disconnect(b));
    ASSERT_OK(sl_tp_connect(b));
    ASSERT_OK(sl_tp_send_copy(b, 0, &h, "back", 4));
    ASSERT_OK(sl_tp_recv(a, 1, -1, &g, &data, &len));
    ASSERT_MEMEQ(data, "back", 4);
    zmq_close(imp);
    zmq_ctx_term(ctx);
    sl_tp_destroy(a);
    sl_tp_destroy(b);
}

TEST(test_peer_never_started_is_named) {
    /* rank 1's address is a port nobody listens on */
    sl_tp *a, *gone;
    const char *addrs[2] = {"127.0.0.1:0", "127.0.0.1:0"};
    sl_tp_opts o = {.timeout_s = 0.5};
    ASSERT_OK(sl_tp_create(1, 2, addrs, &o, &gone));
    char dead[64];
    snprintf(dead, sizeof dead, "%s", sl_tp_endpoint(gone));
    sl_tp_destroy(gone); /* the port is free again: nothing answers there */
    ASSERT_OK(sl_tp_create(0, 2, addrs, &o, &a));
    ASSERT_OK(sl_tp_set_peer(a, 1, dead));
    ASSERT_OK(sl_tp_connect(a));
    static float x[256];
    sl_msg_hdr h = {.type = SL_MSG_DATA, .dtype = SL_DT_F32};
    ASSERT_OK(sl_tp_send(a, 1, &h, x, sizeof x, NULL, NULL));
    ASSERT_EQ(sl_tp_flush(a), SL_ETIMEDOUT);
    char want[300];
    snprintf(want, sizeof want, "rank 1 (%s) never answered within 0.5 s: 1 send still queued for it\n---> HINT: no "
             "connection to rank 1 ever opened: its process did not start, failed before it listened, or listens on "
             "another address", dead);
    ASSERT_STREQ(sl_errmsg(), want);
    sl_msg_hdr g;
    const void *data;
    size_t len;
    ASSERT_EQ(sl_tp_recv(a, 1, 0.3, &g, &data, &len), SL_ETIMEDOUT);
    snprintf(want, sizeof want, "rank 1 (%s) never answered within 0.3 s (0 received, 0 dropped so far)", dead);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT_OK(sl_tp_disconnect(a));
    sl_tp_destroy(a);
}

TEST(test_random_u64) {
    uint64_t x = 0, y = 0;
    ASSERT_OK(sl_tp_random_u64(&x));
    ASSERT_OK(sl_tp_random_u64(&y));
    ASSERT(x != 0 && y != 0 && x != y);
}

TEST(test_msg_accept) {
    const uint64_t J = 0x0123456789abcdefull;
    sl_msg_hdr h = {.type = SL_MSG_ABORT, .dtype = SL_DT_U8, .sender = 0, .job = J, .length = 4}, g;
    uint8_t hb[SL_MSG_HDR_SIZE];
    sl_msg_encode(&h, hb);
    const char *id = "r0.00ff00ff00ff00ff";
    memset(&g, 0, sizeof g);
    ASSERT_EQ(sl_msg_accept(id, strlen(id), hb, sizeof hb, 4, 1, 2, J, 100, &g), 0);
    ASSERT_U64(g.job, J);
    ASSERT_EQ(g.type, SL_MSG_ABORT);
    /* another job, whoever claims to send it */
    ASSERT_EQ(sl_msg_accept(id, strlen(id), hb, sizeof hb, 4, 1, 2, J + 1, 100, &g), SL_MSG_FOREIGN);
    ASSERT_EQ(sl_msg_accept("x", 1, hb, sizeof hb, 4, 1, 2, 0, 100, &g), SL_MSG_FOREIGN);
    /* ids that are not "r<rank>.<16 hex digits>" of another rank of this job */
    const char *bad[] = {"r0", "r0.00ff00ff00ff00f", "r0.00ff00ff00ff00ff0", "r00.00ff00ff00ff00ff", "r1.00ff00ff00ff00ff",
                         "r2.00ff00ff00ff00ff", "r0.00FF00ff00ff00ff", "r0:00ff00ff00ff00ff", "s0.00ff00ff00ff00ff",
                         "r-0.00ff00ff00ff00f", "r.000ff00ff00ff00ff", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (sl_msg_accept(bad[i], strlen(bad[i]), hb, sizeof hb, 4, 1, 2, J, 100, &g) != SL_MSG_INVALID)
            FAILF("id \"%s\" accepted", bad[i]);
    ASSERT_EQ(sl_msg_accept(id, strlen(id), hb, sizeof hb, 5, 1, 2, J, 100, &g), SL_MSG_INVALID); /* payload size */
    ASSERT_EQ(sl_msg_accept(id, strlen(id), hb, sizeof hb, 4, 1, 2, J, 3, &g), SL_MSG_INVALID);   /* over max_msg */
    ASSERT_EQ(sl_msg_accept(id, strlen(id), hb, 48, 4, 1, 2, J, 100, &g), SL_MSG_INVALID);        /* a v1 header */
    const char *id12 = "r12.00ff00ff00ff00ff";
    h.sender = 12;
    sl_msg_encode(&h, hb);
    ASSERT_EQ(sl_msg_accept(id12, strlen(id12), hb, sizeof hb, 4, 1, 13, J, 100, &g), 12);
    ASSERT_EQ(sl_msg_accept(id, strlen(id), hb, sizeof hb, 4, 1, 13, J, 100, &g), SL_MSG_INVALID); /* sender 12, id 0 */
}

TEST(test_create_errors) {
    sl_tp *t;
    const char *bad[] = {"127.0.0.1:0", "nocolon"};
    ASSERT_EQ(sl_tp_create(0, 2, bad, NULL, &t), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "transport: rank 1: address \"nocolon\" is not host:port");
    ASSERT(t == NULL);
    const char *badport[] = {"127.0.0.1:99999"};
    ASSERT_EQ(sl_tp_create(0, 1, badport, NULL, &t), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "transport: rank 0: address \"127.0.0.1:99999\": port must be a number in 0..65535");
    ASSERT_EQ(sl_tp_create(2, 2, bad, NULL, &t), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "transport: rank 2 of 2 tasks is out of range");
    const char *one[] = {"127.0.0.1:0"};
    sl_tp *first;
    ASSERT_OK(sl_tp_create(0, 1, one, NULL, &first));
    const char *same[] = {sl_tp_endpoint(first)};
    ASSERT_EQ(sl_tp_create(0, 1, same, NULL, &t), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "transport: rank 0 cannot bind 127.0.0.1:");
    ASSERT_CONTAINS(sl_errmsg(), "Address already in use");
    ASSERT_CONTAINS(sl_errmsg(), "---> HINT: another job or process is listening on port");
    sl_tp_destroy(first);
}

/* A listening TCP socket of this process on 127.0.0.1 (an ephemeral port, *port). */
static int listen_loopback(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 1) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* Errors the user's addresses and machine cause say the operation, the address as given, the
 * OS's reason and what to change, and never a source location. */
TEST(test_bind_connect_errors_say_what_to_do) {
    int port, fd = listen_loopback(&port);
    ASSERT(fd >= 0);
    char addr[64], want[1024];
    const char *one[] = {addr};
    sl_tp *t = (sl_tp *)&port;
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    ASSERT_EQ(sl_tp_create(0, 1, one, NULL, &t), SL_EIO);
    ASSERT(t == NULL);
    snprintf(want, sizeof want,
             "transport: rank 0 cannot bind 127.0.0.1:%d: Address already in use\n"
             "---> HINT: another job or process is listening on port %d (ss -ltnp 'sport = :%d' shows which); "
             "stop it, or choose other ports: sluice-launch --port-base, or the addresses in the cluster block or "
             "TF_CONFIG", port, port, port);
    ASSERT_STREQ(sl_errmsg(), want);
    ASSERT(strstr(sl_errmsg(), ".c:") == NULL);
    /* a host name is bound on every interface, which the message says */
    snprintf(addr, sizeof addr, "this-host.invalid:%d", port);
    ASSERT_EQ(sl_tp_create(0, 1, one, NULL, &t), SL_EIO);
    snprintf(want, sizeof want,
             "transport: rank 0 cannot bind this-host.invalid:%d (every interface: a host name is bound as *): "
             "Address already in use\n", port);
    ASSERT(strncmp(sl_errmsg(), want, strlen(want)) == 0);
    close(fd);

    /* an address of another machine (TEST-NET-1) */
    snprintf(addr, sizeof addr, "192.0.2.1:0");
    sl_status s = sl_tp_create(0, 1, one, NULL, &t);
    if (s == SL_OK) { /* net.ipv4.ip_nonlocal_bind=1: any address binds */
        printf("  (192.0.2.1 binds on this machine: not-an-address case not checked)\n");
        sl_tp_destroy(t);
    } else {
        ASSERT_EQ(s, SL_EIO);
        ASSERT_STREQ(sl_errmsg(), "transport: rank 0 cannot bind 192.0.2.1:0: Cannot assign requested address\n"
                                  "---> HINT: 192.0.2.1 is not an address of this machine; each task binds the "
                                  "address the cluster lists for it, so give every task an address of the machine "
                                  "it runs on (the cluster block or TF_CONFIG)");
    }

    /* a peer address ZeroMQ cannot connect to */
    const char *two[] = {"127.0.0.1:0", "127.0.0.1:0"};
    ASSERT_OK(sl_tp_create(0, 2, two, NULL, &t));
    ASSERT_OK(sl_tp_set_peer(t, 1, "no such host:5"));
    ASSERT_EQ(sl_tp_connect(t), SL_EIO);
    ASSERT_STREQ(sl_errmsg(), "transport: rank 0 cannot connect to rank 1 at no such host:5: Invalid argument\n"
                              "---> HINT: check rank 1's address, host:port of the machine it runs on (the cluster "
                              "block, TF_CONFIG or the launcher's environment)");
    sl_tp_destroy(t);
}

int main(void) {
    RUN(test_header_roundtrip);
    RUN(test_header_corruption);
    RUN(test_send_recv_forward);
    RUN(test_lost_peer);
    RUN(test_garbage_dropped_and_counted);
    RUN(test_create_errors);
    RUN(test_bind_connect_errors_say_what_to_do);
    RUN(test_strangers_cannot_end_or_alter_job);
    RUN(test_impostor_cannot_take_over_a_rank);
    RUN(test_peer_never_started_is_named);
    RUN(test_random_u64);
    RUN(test_msg_accept);
    TEST_MAIN_END();
}
