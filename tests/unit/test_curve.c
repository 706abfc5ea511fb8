/* dist/curve.c and the CURVE side of dist/transport.c: key files (keygen round trip, every
 * malformation with its exact message and line), allow-lists, the cluster block's curve
 * statement loaded into sl_tp_curve, and transports over CURVE: an allowed client's messages
 * flow; a client whose key is not allowed, or a plaintext one, gets nothing through (and
 * the refusals are counted); a server keeps serving allowed clients after refusing one; a
 * ring of 3 ranks allreduces exactly over CURVE. */
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "dist/curve_priv.h"
#include "sluice/cluster.h"
#include "sluice/ring.h"
#include "sluice/transport.h"
#include "helper_files.h"
#include "helper_thread.h"
#include "test.h"

/* libzmq is not built with ThreadSanitizer: its lock-free queues between the I/O thread and
 * the caller are invisible to TSan, which then reports the handover of every message. With
 * CURVE the I/O thread decrypts into the message through libsodium, so it joins the list. */
#if defined(__SANITIZE_THREAD__)
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) {
    return "called_from_lib:libzmq.so\nrace:libzmq.so\ncalled_from_lib:libsodium.so\nrace:libsodium.so\n";
}
#endif

/* The test keypairs of ZeroMQ's CURVE test suite (RFC 26 examples). */
static const char SPUB[] = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
static const char SSEC[] = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6";
static const char CPUB[] = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID";
static const char CSEC[] = "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs";

static int have_curve(void) { return zmq_has("curve"); }

static sl_status parse_kp(const char *text, char *pub, char *sec) {
    return sl__curve_parse_keyfile(text, strlen(text), "k", pub, sec);
}

/* A new temporary folder in DIR and a keypair made in it by sl_curve_keygen for the base
 * DIR/NAME, written into BASE (CAP bytes). Returns the keygen's status, or SL_EIO when the
 * folder could not be made. */
static sl_status tmp_keygen(char dir[64], const char *name, char *base, size_t cap) {
    if (!sl_test_mkdtemp(dir, 64, "sl-curve")) return SL_EIO;
    snprintf(base, cap, "%s/%s", dir, name);
    return sl_curve_keygen(base);
}

TEST(test_known_keys) {
    if (!have_curve()) SKIP("libzmq has no CURVE");
    char p[41];
    ASSERT_EQ(zmq_curve_public(p, SSEC), 0);
    ASSERT_STREQ(p, SPUB);
    ASSERT_EQ(zmq_curve_public(p, CSEC), 0);
    ASSERT_STREQ(p, CPUB);
}

TEST(test_keygen_roundtrip) {
    if (!have_curve()) SKIP("libzmq has no CURVE");
    char dir[64], base[128], path[160];
    ASSERT_OK(tmp_keygen(dir, "worker0", base, sizeof base));
    ASSERT_EQ(sl_test_count_files(dir), 2); /* no temporary left behind */
    struct stat sb;
    snprintf(path, sizeof path, "%s.key", base);
    ASSERT_EQ(stat(path, &sb), 0);
    ASSERT_EQ(sb.st_mode & 0777, 0600);
    char pub[41], sec[41], pub2[41], derived[41];
    memset(pub2, 'x', sizeof pub2);
    ASSERT_OK(sl_curve_load_keypair(path, pub, sec));
    ASSERT_EQ(strlen(pub), 40);
    ASSERT_EQ(strlen(sec), 40);
    ASSERT_EQ(zmq_curve_public(derived, sec), 0);
    ASSERT_STREQ(derived, pub);
    snprintf(path, sizeof path, "%s.pub", base);
    ASSERT_OK(sl_curve_load_keypair(path, pub2, NULL));
    ASSERT_STREQ(pub2, pub);
    /* a public file is not a keypair */
    ASSERT_EQ(sl_curve_load_keypair(path, pub2, sec), SL_ECORRUPT);
    char want[300];
    snprintf(want, sizeof want, "%s: no secret-key line (this must be a keypair file, not a public one)", path);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT_CONTAINS(sl_errmsg(), "---> HINT: pass the .key file");
    /* the .pub file's public-key line works in an allow-list (grep public-key *.pub > allowed) */
    char(*keys)[41];
    int n;
    char line[100];
    snprintf(line, sizeof line, "    public-key = \"%s\"\n", pub);
    snprintf(path, sizeof path, "%s/allowed", dir);
    FILE *f = fopen(path, "w");
    ASSERT(f != NULL);
    fputs(line, f);
    fclose(f);
    ASSERT_OK(sl_curve_load_allow(path, &keys, &n));
    ASSERT_EQ(n, 1);
    ASSERT_STREQ(keys[0], pub);
    free(keys);
    unlink(path);
    /* a second keygen replaces both files */
    ASSERT_OK(sl_curve_keygen(base));
    snprintf(path, sizeof path, "%s.key", base);
    ASSERT_OK(sl_curve_load_keypair(path, pub2, sec));
    ASSERT_NE(strcmp(pub2, pub), 0);
    ASSERT_EQ(sl_test_count_files(dir), 2);
    /* unreadable files */
    snprintf(path, sizeof path, "%s/missing.key", dir);
    ASSERT_EQ(sl_curve_load_keypair(path, pub, sec), SL_EIO);
    snprintf(want, sizeof want, "%s: cannot open: No such file or directory", path);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT_EQ(sl_curve_load_allow(path, &keys, &n), SL_EIO);
    ASSERT(keys == NULL);
    ASSERT_EQ(n, 0);
    snprintf(path, sizeof path, "%s/nodir/x", dir);
    ASSERT_EQ(sl_curve_keygen(path), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "cannot create: No such file or directory");
    sl_test_rm_rf(dir);
}

TEST(test_keyfile_parse) {
    if (!have_curve()) SKIP("libzmq has no CURVE");
    char pub[41], sec[41], text[1024];
    /* zcert layout: comments, section names and metadata are ignored; CRLF is fine */
    snprintf(text, sizeof text,
             "#   ****  Generated by zcert  ****\r\n#   ZeroMQ CURVE **Secret** Certificate\r\n\r\nmetadata\r\n"
             "    name = \"w0\"\r\ncurve\r\n    public-key = \"%s\"\r\n    secret-key = \"%s\"   # mine\r\n",
             CPUB, CSEC);
    ASSERT_OK(parse_kp(text, pub, sec));
    ASSERT_STREQ(pub, CPUB);
    ASSERT_STREQ(sec, CSEC);
    /* public only, no trailing newline, tabs */
    snprintf(text, sizeof text, "curve\n\tpublic-key\t=\t\"%s\"", SPUB);
    memset(sec, 'z', sizeof sec);
    ASSERT_OK(parse_kp(text, pub, NULL));
    ASSERT_STREQ(pub, SPUB);
    ASSERT_EQ(sec[0], 'z');
}

static void expect_kp(const char *text, int want_secret, const char *msg) {
    char pub[41] = "untouched", sec[41] = "untouched";
    sl_status s = parse_kp(text, pub, want_secret ? sec : NULL);
    if (s != SL_ECORRUPT) { FAILF("%s: status %d, expected SL_ECORRUPT", text, s); return; }
    if (strcmp(sl_errmsg(), msg) != 0) { FAILF("got \"%s\"\n    expected \"%s\"", sl_errmsg(), msg); return; }
    if (strcmp(pub, "untouched") || strcmp(sec, "untouched")) FAILF("outputs written on failure");
}

TEST(test_keyfile_malformed) {
    if (!have_curve()) SKIP("libzmq has no CURVE");
    char t[1024], bad[41];
    snprintf(t, sizeof t, "curve\n    public-key = \"abc\"\n");
    expect_kp(t, 0, "k:2: public-key is 3 characters; a CURVE key is 40 Z85 characters");
    snprintf(t, sizeof t, "public-key = \"%s0\"\n", CPUB);
    expect_kp(t, 0, "k:1: public-key is 41 characters; a CURVE key is 40 Z85 characters");
    snprintf(bad, sizeof bad, "%s", CPUB);
    bad[7] = '~';
    snprintf(t, sizeof t, "# c\n\npublic-key = \"%s\"\n", bad);
    expect_kp(t, 0, "k:3: public-key: byte 0x7e at column 22 is not a Z85 character");
    bad[7] = ' ';
    snprintf(t, sizeof t, "  public-key = \"%s\"\n", bad);
    expect_kp(t, 0, "k:1: public-key: byte 0x20 at column 24 is not a Z85 character");
    /* 40 Z85 characters whose groups overflow 32 bits */
    snprintf(t, sizeof t, "public-key = \"########################################\"\n");
    expect_kp(t, 0, "k:1: public-key is not valid Z85 (a 5-character group exceeds 32 bits)");
    snprintf(t, sizeof t, "public-key = \"%s\"\nsecret-key = \"%s\"\n", SPUB, CSEC);
    expect_kp(t, 1, "k:2: the secret-key does not belong to the public-key of line 1");
    snprintf(t, sizeof t, "secret-key = \"%s\"\n\n\npublic-key = \"%s\"\n", CSEC, SPUB);
    expect_kp(t, 1, "k:1: the secret-key does not belong to the public-key of line 4");
    /* a mismatched secret-key line fails a public read too: the file is wrong */
    expect_kp(t, 0, "k:1: the secret-key does not belong to the public-key of line 4");
    snprintf(t, sizeof t, "public-key = \"%s\"\n", CPUB);
    expect_kp(t, 1, "k: no secret-key line (this must be a keypair file, not a public one)\n"
                    "---> HINT: pass the .key file made by sluice-launch --keygen, not the .pub file");
    snprintf(t, sizeof t, "curve\n    secret-key = \"%s\"\n", CSEC);
    expect_kp(t, 1, "k: no public-key line (public-key = \"<40 Z85 characters>\")");
    expect_kp("", 0, "k: no public-key line (public-key = \"<40 Z85 characters>\")");
    snprintf(t, sizeof t, "public-key \"%s\"\n", CPUB);
    expect_kp(t, 0, "k:1: expected '=' after public-key at column 12 (public-key = \"<40 Z85 characters>\")");
    snprintf(t, sizeof t, "public-key = %s\n", CPUB);
    expect_kp(t, 0, "k:1: expected '\"' at column 14 (public-key = \"<40 Z85 characters>\")");
    snprintf(t, sizeof t, "public-key = \"%s\n", CPUB);
    expect_kp(t, 0, "k:1: public-key: the closing '\"' is missing");
    snprintf(t, sizeof t, "public-key = \"%s\" x\n", CPUB);
    expect_kp(t, 0, "k:1: unexpected text at column 57 after the public-key");
    snprintf(t, sizeof t, "public-key = \"%s\"\npublic-key = \"%s\"\n", CPUB, CPUB);
    expect_kp(t, 0, "k:2: a second public-key line (the first is line 1)");
    snprintf(t, sizeof t, "public-key = \"%s\"\nsecret-key = \"%s\"\nsecret-key = \"%s\"\n", CPUB, CSEC, CSEC);
    expect_kp(t, 1, "k:3: a second secret-key line (the first is line 2)");
    /* a NUL byte inside the key */
    char nul[80];
    int n = snprintf(nul, sizeof nul, "public-key = \"%s\"", CPUB);
    nul[20] = 0;
    char pub[41];
    ASSERT_EQ(sl__curve_parse_keyfile(nul, (size_t)n, "k", pub, NULL), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "k:1: public-key: byte 0x00 at column 21 is not a Z85 character");
}

TEST(test_allow_list) {
    if (!have_curve()) SKIP("libzmq has no CURVE");
    char t[1024];
    snprintf(t, sizeof t, "# the workers\n\n%s\n   %s   # worker1\ncurvy\n", CPUB, SPUB);
    char(*keys)[41];
    int n;
    /* a short word is not a key */
    ASSERT_EQ(sl__curve_parse_allow(t, strlen(t), "a", &keys, &n), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "a:5: key is 5 characters; a CURVE key is 40 Z85 characters");
    ASSERT(keys == NULL);
    ASSERT_EQ(n, 0);
    /* .pub files concatenated (cat *.pub > allowed): their section names and other
     * properties are skipped, their public-key lines read */
    snprintf(t, sizeof t, "#   ZeroMQ CURVE public certificate\n\nmetadata\n    name = \"w0\"\ncurve\n"
             "    public-key = \"%s\"\n#   again\ncurve\n    public-key = \"%s\"\n", CPUB, SPUB);
    ASSERT_OK(sl__curve_parse_allow(t, strlen(t), "a", &keys, &n));
    ASSERT_EQ(n, 2);
    ASSERT_STREQ(keys[0], CPUB);
    ASSERT_STREQ(keys[1], SPUB);
    free(keys);
    snprintf(t, sizeof t, "# the workers\n\n%s\n   %s   # worker1\n  public-key = \"%s\"\r\n#%s\n", CPUB, SPUB, CPUB,
             SPUB);
    ASSERT_OK(sl__curve_parse_allow(t, strlen(t), "a", &keys, &n));
    ASSERT_EQ(n, 3);
    ASSERT_STREQ(keys[0], CPUB);
    ASSERT_STREQ(keys[1], SPUB);
    ASSERT_STREQ(keys[2], CPUB);
    free(keys);
    snprintf(t, sizeof t, "%s x\n", CPUB);
    ASSERT_EQ(sl__curve_parse_allow(t, strlen(t), "a", &keys, &n), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "a:1: unexpected text at column 42 after the key");
    snprintf(t, sizeof t, "%s\n%.39s\n", CPUB, SPUB);
    ASSERT_EQ(sl__curve_parse_allow(t, strlen(t), "a", &keys, &n), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "a:2: key is 39 characters; a CURVE key is 40 Z85 characters");
    snprintf(t, sizeof t, "\n\n  %.10s\"%.29s\n", CPUB, SPUB);
    ASSERT_EQ(sl__curve_parse_allow(t, strlen(t), "a", &keys, &n), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "a:3: key: byte 0x22 at column 13 is not a Z85 character");
    snprintf(t, sizeof t, "public-key = \"%.20s\"\n", CPUB);
    ASSERT_EQ(sl__curve_parse_allow(t, strlen(t), "a", &keys, &n), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "a:1: public-key is 20 characters; a CURVE key is 40 Z85 characters");
    ASSERT_EQ(sl__curve_parse_allow("# nobody\n\n", 10, "a", &keys, &n), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "a: no keys (an empty allow-list would refuse every connection)");
}

/* ---- transports over CURVE ----------------------------------------------------------- */

static char allow_c[1][41];

static sl_tp_curve keys_for(const char *cpub, const char *csec) {
    sl_tp_curve c;
    memset(&c, 0, sizeof c);
    memcpy(c.server_public, SPUB, 41);
    memcpy(c.server_secret, SSEC, 41);
    memcpy(c.client_public, cpub, 41);
    memcpy(c.client_secret, csec, 41);
    memcpy(allow_c[0], CPUB, 41);
    c.allow = allow_c;
    c.nallow = 1;
    return c;
}

/* Two transports, each with its own keys (NULL: plaintext), connected to each other. */
static int pair2(sl_tp **a, const sl_tp_curve *ka, sl_tp **b, const sl_tp_curve *kb, double timeout_s) {
    const char *addrs[2] = {"127.0.0.1:0", "127.0.0.1:0"};
    sl_tp_opts oa = {.timeout_s = timeout_s, .curve = ka}, ob = {.timeout_s = timeout_s, .curve = kb};
    *a = *b = NULL;
    if (sl_tp_create(0, 2, addrs, &oa, a) || sl_tp_create(1, 2, addrs, &ob, b)) return -1;
    if (sl_tp_set_peer(*a, 1, sl_tp_endpoint(*b)) || sl_tp_set_peer(*b, 0, sl_tp_endpoint(*a))) return -1;
    return sl_tp_connect(*a) || sl_tp_connect(*b) ? -1 : 0;
}

TEST(test_curve_pair) {
    if (!have_curve()) SKIP("libzmq has no CURVE");
    sl_tp_curve k = keys_for(CPUB, CSEC);
    sl_tp *a, *b;
    ASSERT_EQ(pair2(&a, &k, &b, &k, 5), 0);
    static const char hello[] = "over curve";
    sl_msg_hdr h = {.type = SL_MSG_DATA, .dtype = SL_DT_U8, .tensor = 5, .step = 2};
    ASSERT_OK(sl_tp_send_copy(b, 0, &h, hello, sizeof hello));
    sl_msg_hdr g;
    const void *data;
    size_t len;
    ASSERT_OK(sl_tp_recv(a, 1, -1, &g, &data, &len));
    ASSERT_EQ(g.sender, 1);
    ASSERT_EQ(g.tensor, 5);
    ASSERT_EQ(len, sizeof hello);
    ASSERT_MEMEQ(data, hello, sizeof hello);
    static float big[100000];
    for (int i = 0; i < 100000; i++) big[i] = (float)i * 0.5f;
    h.dtype = SL_DT_F32;
    ASSERT_OK(sl_tp_send(a, 1, &h, big, sizeof big, NULL, NULL));
    ASSERT_OK(sl_tp_recv(b, 0, -1, &g, &data, &len));
    ASSERT_EQ(len, sizeof big);
    ASSERT_MEMEQ(data, big, sizeof big);
    ASSERT_OK(sl_tp_flush(a));
    sl_tp_stats st;
    sl_tp_get_stats(a, &st);
    ASSERT_EQ(st.denied, 0);
    ASSERT_EQ(st.received, 1);
    ASSERT_EQ(st.dropped, 0);
    sl_tp_destroy(a);
    sl_tp_destroy(b);
}

static uint64_t denied_after(sl_tp *tp, double limit_s) {
    sl_tp_stats st;
    for (int i = 0; i < (int)(limit_s * 100); i++) {
        sl_tp_get_stats(tp, &st);
        if (st.denied) return st.denied;
        usleep(10000);
    }
    sl_tp_get_stats(tp, &st);
    return st.denied;
}

TEST(test_curve_denied_then_allowed) {
    if (!have_curve()) SKIP("libzmq has no CURVE");
    char xpub[41], xsec[41];
    ASSERT_EQ(zmq_curve_keypair(xpub, xsec), 0);
    sl_tp_curve ka = keys_for(CPUB, CSEC), kx = keys_for(xpub, xsec);
    sl_tp *a, *x;
    ASSERT_EQ(pair2(&a, &ka, &x, &kx, 5), 0);
    sl_msg_hdr h = {.type = SL_MSG_DATA, .dtype = SL_DT_U8};
    sl_status s = sl_tp_send_copy(x, 0, &h, "let me in", 9); /* queued, or refused already */
    ASSERT(s == SL_OK || s == SL_ETIMEDOUT);
    sl_msg_hdr g;
    const void *data;
    size_t len;
    ASSERT_EQ(sl_tp_recv(a, -1, 1.0, &g, &data, &len), SL_ETIMEDOUT);
    ASSERT_STREQ(sl_errmsg(), "rank 0: no message from any peer in 1.0 s\n---> HINT: the peer may be stuck, overloaded "
                              "or unreachable; raise the timeout (cluster { timeout 60s })");
    ASSERT(denied_after(a, 5) >= 1);
    sl_tp_stats st;
    sl_tp_get_stats(a, &st);
    ASSERT_EQ(st.received, 0);
    ASSERT_EQ(st.dropped, 0);
    /* the refused side learns why its messages go nowhere */
    ASSERT_EQ(sl_tp_recv(x, 0, 2.0, &g, &data, &len), SL_EPEER);
    char want[200];
    snprintf(want, sizeof want, "lost rank 0 (%s): it refused this task's CURVE handshake", sl_tp_endpoint(a));
    ASSERT_STREQ(sl_errmsg(), strcat(want, "\n---> HINT: its allow-list lacks this task's client key, it runs without "
                                           "CURVE, or the tasks use different server keys"));

    ASSERT_EQ(sl_tp_recv(x, -1, 0.5, &g, &data, &len), SL_ETIMEDOUT);
    ASSERT_CONTAINS(sl_errmsg(), "---> HINT: rank 0 (");
    ASSERT_CONTAINS(sl_errmsg(), ") refused this task's CURVE handshake");
    sl_tp_destroy(x);
    /* the server still serves an allowed client after refusing a stranger */
    const char *addrs[2] = {"127.0.0.1:0", "127.0.0.1:0"};
    sl_tp_opts oc = {.timeout_s = 5, .curve = &ka};
    sl_tp *c;
    ASSERT_OK(sl_tp_create(1, 2, addrs, &oc, &c));
    ASSERT_OK(sl_tp_set_peer(c, 0, sl_tp_endpoint(a)));
    ASSERT_OK(sl_tp_connect(c));
    ASSERT_OK(sl_tp_send_copy(c, 0, &h, "friend", 6));
    ASSERT_OK(sl_tp_recv(a, 1, -1, &g, &data, &len));
    ASSERT_EQ(len, 6);
    ASSERT_MEMEQ(data, "friend", 6);
    sl_tp_get_stats(c, &st);
    ASSERT_EQ(st.denied, 0);
    sl_tp_destroy(c);
    sl_tp_destroy(a);
}

TEST(test_curve_plaintext_client) {
    if (!have_curve()) SKIP("libzmq has no CURVE");
    sl_tp_curve ka = keys_for(CPUB, CSEC);
    sl_tp *a, *p;
    ASSERT_EQ(pair2(&a, &ka, &p, NULL, 1), 0);
    sl_msg_hdr h = {.type = SL_MSG_DATA, .dtype = SL_DT_U8};
    /* queued unless the handshake already failed: libzmq then drops the link and a send
     * can only time out (which one happens depends on thread timing) */
    sl_status s = sl_tp_send_copy(p, 0, &h, "plain", 5);
    ASSERT(s == SL_OK || s == SL_ETIMEDOUT);
    sl_msg_hdr g;
    const void *data;
    size_t len;
    /* and a CURVE client cannot talk to the plaintext side's inbox either: its dealer saw
     * the failed handshake, and says so (on a loaded machine the handshake's failure may
     * take longer than one wait to be seen: up to 20 waits of 1 s) */
    char want[300];
    snprintf(want, sizeof want, "---> HINT: rank 1 (%s) refused this task's CURVE handshake: its allow-list lacks this "
             "task's client key, it runs without CURVE, or the tasks use different server keys", sl_tp_endpoint(p));
    for (int tries = 0; tries < 20; tries++) {
        ASSERT_EQ(sl_tp_recv(a, -1, 1.0, &g, &data, &len), SL_ETIMEDOUT);
        if (strstr(sl_errmsg(), want)) break;
    }
    sl_tp_stats st;
    sl_tp_get_stats(a, &st);
    ASSERT_EQ(st.received, 0);
    ASSERT_EQ(st.dropped, 0);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT_EQ(sl_tp_recv(p, -1, 1.0, &g, &data, &len), SL_ETIMEDOUT);
    sl_tp_get_stats(p, &st);
    ASSERT_EQ(st.received, 0);
    ASSERT_EQ(st.denied, 0);
    sl_tp_destroy(p);
    sl_tp_destroy(a);
}

TEST(test_curve_bad_opts) {
    if (!have_curve()) SKIP("libzmq has no CURVE");
    const char *addrs[1] = {"127.0.0.1:0"};
    sl_tp_curve k = keys_for(CPUB, CSEC);
    k.server_secret[39] = 0;
    sl_tp_opts o = {.curve = &k};
    sl_tp *tp = (sl_tp *)1;
    ASSERT_EQ(sl_tp_create(0, 1, addrs, &o, &tp), SL_EINVAL);
    ASSERT(tp == NULL);
    ASSERT_STREQ(sl_errmsg(), "transport: curve server secret key is 39 characters; a CURVE key is 40 Z85 characters");
    k = keys_for(CPUB, CSEC);
    k.client_public[3] = '~';
    ASSERT_EQ(sl_tp_create(0, 1, addrs, &o, &tp), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "transport: curve client public key: byte 0x7e at offset 3 is not a Z85 character");
    k = keys_for(CPUB, CSEC);
    k.nallow = 0;
    ASSERT_EQ(sl_tp_create(0, 1, addrs, &o, &tp), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "transport: the CURVE allow-list is empty: every connection would be refused");
    char bad[1][41];
    memcpy(bad[0], "########################################", 41);
    k = keys_for(CPUB, CSEC);
    k.allow = bad;
    ASSERT_EQ(sl_tp_create(0, 1, addrs, &o, &tp), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "curve: allow-list key 0 is not valid Z85");
    /* a single task with CURVE creates and shuts down cleanly (the ZAP thread exits) */
    k = keys_for(CPUB, CSEC);
    ASSERT_OK(sl_tp_create(0, 1, addrs, &o, &tp));
    sl_tp_destroy(tp);
}

/* ---- a ring over CURVE --------------------------------------------------------------- */

/* one rank's part: a ring over tp summing buf[count] (4 KiB chunks) */
typedef struct rjob {
    sl_tp *tp;
    float *buf;
    size_t count;
    sl_test_result res;
} rjob;

static void *ring_main(void *arg) {
    rjob *j = arg;
    sl_ring *r = NULL;
    sl_ring_opts ro = {.chunk_bytes = 4096};
    sl_status s = sl_ring_create(j->tp, &ro, &r);
    if (!s) s = sl_ring_allreduce(r, j->buf, j->count, SL_DT_F32, SL_REDUCE_SUM, 11);
    sl_test_result_set(&j->res, s);
    sl_ring_destroy(r);
    return NULL;
}

TEST(test_curve_ring) {
    if (!have_curve()) SKIP("libzmq has no CURVE");
    enum { N = 3, COUNT = 10007 };
    /* every rank its own client key, all three on the allow-list */
    char pubs[N][41], secs[N][41], allow[N][41];
    for (int i = 0; i < N; i++) {
        ASSERT_EQ(zmq_curve_keypair(pubs[i], secs[i]), 0);
        memcpy(allow[i], pubs[i], 41);
    }
    sl_tp_curve k[N];
    sl_tp *tps[N];
    const char *addrs[N] = {"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"};
    for (int i = 0; i < N; i++) {
        k[i] = keys_for(pubs[i], secs[i]);
        k[i].allow = allow;
        k[i].nallow = N;
        sl_tp_opts o = {.timeout_s = 10, .curve = &k[i]};
        ASSERT_OK(sl_tp_create(i, N, addrs, &o, &tps[i]));
    }
    memset(k, 0, sizeof k); /* copied at create */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            if (i != j) ASSERT_OK(sl_tp_set_peer(tps[i], j, sl_tp_endpoint(tps[j])));
    for (int i = 0; i < N; i++) ASSERT_OK(sl_tp_connect(tps[i]));
    rjob jobs[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        jobs[i] = (rjob){.tp = tps[i], .count = COUNT, .buf = malloc(COUNT * sizeof(float))};
        for (size_t e = 0; e < COUNT; e++) jobs[i].buf[e] = (float)((int)(e % 977) - 400) * (float)(i + 1);
        pthread_create(&th[i], NULL, ring_main, &jobs[i]);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    int wrong = 0;
    for (int i = 0; i < N; i++) {
        if (jobs[i].res.st) { printf("  rank %d: %s\n", i, jobs[i].res.msg); wrong++; continue; }
        for (size_t e = 0; e < COUNT && !wrong; e++)
            if (jobs[i].buf[e] != (float)((int)(e % 977) - 400) * 6.0f) {
                printf("  rank %d [%zu] = %g\n", i, e, jobs[i].buf[e]);
                wrong++;
            }
    }
    sl_tp_stats st;
    uint64_t denied = 0;
    for (int i = 0; i < N; i++) {
        sl_tp_get_stats(tps[i], &st);
        denied += st.denied;
        sl_tp_destroy(tps[i]);
        free(jobs[i].buf);
    }
    ASSERT_EQ(wrong, 0);
    ASSERT_EQ(denied, 0);
}

/* ---- the cluster block's curve statement, loaded -------------------------------------- */

TEST(test_cluster_curve_load) {
    if (!have_curve()) SKIP("libzmq has no CURVE");
    char dir[64], p[256], text[1024];
    ASSERT_OK(tmp_keygen(dir, "server", p, sizeof p));
    snprintf(p, sizeof p, "%s/worker1", dir);
    ASSERT_OK(sl_curve_keygen(p));
    char wpub[41], wsec[41], spub[41], ssec[41];
    snprintf(p, sizeof p, "%s/worker1.key", dir);
    ASSERT_OK(sl_curve_load_keypair(p, wpub, wsec));
    snprintf(p, sizeof p, "%s/server.key", dir);
    ASSERT_OK(sl_curve_load_keypair(p, spub, ssec));
    snprintf(p, sizeof p, "%s/allowed", dir);
    snprintf(text, sizeof text, "# workers\n%s\n%s\n", CPUB, wpub);
    sl_test_write_text(p, text);
    snprintf(text, sizeof text,
             "cluster {\n  worker \"127.0.0.1:1\" \"127.0.0.1:2\"\n  task worker 1\n"
             "  curve server=\"%s/server.key\" client=\"%s/{task}.key\" allow=\"%s/allowed\"\n}\n",
             dir, dir, dir);
    sl_cfg *cfg;
    ASSERT_OK(sl_cfg_parse(text, strlen(text), "c.sl", &cfg));
    sl_cluster c;
    ASSERT_OK(sl_cluster_resolve(NULL, cfg, NULL, &c));
    sl_cfg_free(cfg);
    snprintf(p, sizeof p, "%s/worker1.key", dir);
    ASSERT_STREQ(c.curve_client, p);
    sl_tp_curve k;
    ASSERT_OK(sl_cluster_curve(&c, &k));
    ASSERT_STREQ(k.server_public, spub);
    ASSERT_STREQ(k.server_secret, ssec);
    ASSERT_STREQ(k.client_public, wpub);
    ASSERT_STREQ(k.client_secret, wsec);
    ASSERT_EQ(k.nallow, 2);
    ASSERT_STREQ(k.allow[0], CPUB);
    ASSERT_STREQ(k.allow[1], wpub);
    free(k.allow);
    /* a missing client key file: the error names it, out is zeroed */
    snprintf(p, sizeof p, "%s/worker1.key", dir);
    unlink(p);
    ASSERT_EQ(sl_cluster_curve(&c, &k), SL_EIO);
    char want[300];
    snprintf(want, sizeof want, "cluster curve: %s: cannot open: No such file or directory", p);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT(k.allow == NULL);
    ASSERT_EQ(k.nallow, 0);
    ASSERT_EQ(k.server_public[0], 0);
    sl_cluster_free(&c);
    sl_test_rm_rf(dir);
}

/* A raw CURVE client DEALER at tp's inbox with client keys (pub, sec) and routing id `id`. */
static void *curve_dealer(void *ctx, const sl_tp *tp, const char *pub, const char *sec, const char *id) {
    char ep[128];
    int zero = 0;
    snprintf(ep, sizeof ep, "tcp://%s", sl_tp_endpoint(tp));
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, SPUB, 40);
    zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 40);
    zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 40);
    if (id) zmq_setsockopt(s, ZMQ_ROUTING_ID, id, strlen(id));
    zmq_connect(s, ep);
    return s;
}

static void send_msg(void *s, int type, uint32_t sender, uint64_t job, const char *payload) {
    sl_msg_hdr h = {.type = (uint16_t)type, .dtype = SL_DT_U8, .sender = sender, .job = job,
                    .length = strlen(payload)};
    uint8_t hb[SL_MSG_HDR_SIZE];
    sl_msg_encode(&h, hb);
    zmq_send(s, hb, sizeof hb, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(s, payload, strlen(payload), ZMQ_DONTWAIT);
}

TEST(test_curve_strangers_of_another_job) {
    if (!have_curve()) SKIP("libzmq has no CURVE");
    const uint64_t JOB = 0x1234abcd5678ef01ull;
    sl_tp_curve k = keys_for(CPUB, CSEC);
    const char *addrs[2] = {"127.0.0.1:0", "127.0.0.1:0"};
    sl_tp_opts o = {.timeout_s = 5, .curve = &k, .job_id = JOB};
    sl_tp *a, *b;
    ASSERT_OK(sl_tp_create(0, 2, addrs, &o, &a));
    ASSERT_OK(sl_tp_create(1, 2, addrs, &o, &b));
    ASSERT_OK(sl_tp_set_peer(a, 1, sl_tp_endpoint(b)));
    ASSERT_OK(sl_tp_set_peer(b, 0, sl_tp_endpoint(a)));
    ASSERT_OK(sl_tp_connect(a));
    ASSERT_OK(sl_tp_connect(b));
    /* rank 1's message waits unread at rank 0 while the strangers come */
    sl_msg_hdr h = {.type = SL_MSG_DATA, .dtype = SL_DT_U8}, g;
    ASSERT_OK(sl_tp_send_copy(b, 0, &h, "one", 3));
    usleep(300000);
    void *ctx = zmq_ctx_new();
    char xpub[41], xsec[41];
    ASSERT_EQ(zmq_curve_keypair(xpub, xsec), 0);
    /* two with the allowed key (a leftover task of another job that shares the keys), under
     * rank 1's old plain id and under the transport's id form; one with an unknown key */
    void *s[3] = {curve_dealer(ctx, a, CPUB, CSEC, "r1"), curve_dealer(ctx, a, CPUB, CSEC, "r1.0123456789abcdef"),
                  curve_dealer(ctx, a, xpub, xsec, "r1")};
    for (int i = 0; i < 3; i++) {
        zmq_send(s[i], "garbage", 7, ZMQ_DONTWAIT);
        send_msg(s[i], SL_MSG_ABORT, 1, JOB ^ 1, "injected by a stranger");
        send_msg(s[i], SL_MSG_DATA, 1, JOB + 1, "evil");
    }
    usleep(300000);
    ASSERT_OK(sl_tp_send_copy(b, 0, &h, "two", 3));
    const void *data;
    size_t len;
    ASSERT_OK(sl_tp_recv(a, 1, -1, &g, &data, &len));
    ASSERT_EQ(len, 3);
    ASSERT_MEMEQ(data, "one", 3);
    ASSERT_OK(sl_tp_recv(a, 1, -1, &g, &data, &len));
    ASSERT_EQ(len, 3);
    ASSERT_MEMEQ(data, "two", 3);
    sl_tp_stats st;
    for (int i = 0; i < 20; i++) {
        sl_tp_get_stats(a, &st);
        if (st.dropped >= 6 && st.denied >= 1) break;
        ASSERT_EQ(sl_tp_recv(a, -1, 0.1, &g, &data, &len), SL_ETIMEDOUT);
    }
    sl_tp_get_stats(a, &st);
    ASSERT_EQ(st.dropped, 6); /* the allowed-key strangers' 3 + 3 */
    ASSERT_EQ(st.foreign, 4);
    ASSERT(st.denied >= 1);   /* the unknown key never got in */
    ASSERT_EQ(st.received, 2);
    /* the real peer's ABORT (this job's id) still ends the receive */
    sl_tp_abort(b, "real failure");
    ASSERT_EQ(sl_tp_recv(a, 1, -1, &g, &data, &len), SL_EPEER);
    char want[200];
    snprintf(want, sizeof want, "rank 1 (%s) failed: real failure", sl_tp_endpoint(b));
    ASSERT_STREQ(sl_errmsg(), want);
    for (int i = 0; i < 3; i++) zmq_close(s[i]);
    zmq_ctx_term(ctx);
    sl_tp_destroy(a);
    sl_tp_destroy(b);
}

int main(void) {
    RUN(test_known_keys);
    RUN(test_keygen_roundtrip);
    RUN(test_keyfile_parse);
    RUN(test_keyfile_malformed);
    RUN(test_allow_list);
    RUN(test_curve_pair);
    RUN(test_curve_denied_then_allowed);
    RUN(test_curve_plaintext_client);
    RUN(test_curve_bad_opts);
    RUN(test_curve_ring);
    RUN(test_cluster_curve_load);
    RUN(test_curve_strangers_of_another_job);
    TEST_MAIN_END();
}
