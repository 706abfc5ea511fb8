/* Message transport between the tasks of a cluster, over ZeroMQ.
 *
 * Every task binds one ROUTER socket (its inbox) on its own address and connects one
 * DEALER socket to each peer's inbox: the inbox thus knows which connection a message came
 * from, and any task can send to any other (a ring uses two neighbours, a parameter server
 * answers whoever asked). Replies never go back through the ROUTER: every send leaves by
 * the sender's own DEALER to the receiver's inbox.
 *
 * A message is two frames: a fixed 56-byte header and a payload (possibly empty):
 *
 *   offset size field
 *        0    4 magic    "SLW1" (0x31574c53 little-endian)
 *        4    2 version  2 (version 1 had no job id and was 48 bytes)
 *        6    2 type     SL_MSG_* below
 *        8    4 sender   rank of the sender (must match the connection's routing id)
 *       12    4 tensor   caller's tensor id
 *       16    8 step     collective sequence number (or training step)
 *       24    8 offset   element offset of the payload in the tensor
 *       32    8 length   payload bytes (must equal the second frame's size)
 *       40    1 dtype    sl_dtype of the payload elements
 *       41    1 flags    SL_MSGF_* below
 *       42    2 round    ring round within a collective
 *       44    4 reserved must be 0
 *       48    8 job      the job id (sl_tp_opts.job_id) of the sender's job
 *
 * All integers are little-endian. The header is validated before anything else in the
 * message is used; a message that fails (a stranger, garbage, a truncated or oversized
 * frame, a stale step) is dropped and counted, never fatal.
 *
 * Job membership. A process that is not part of this job (a stranger on the port, a task
 * left over from an earlier job on the same ports, an impostor using a rank's routing id)
 * must not end, stall or alter the job. Three rules keep it out:
 *   1. Every header carries the job id, and a receiver drops (and counts in
 *      stats.foreign and stats.dropped) every message whose job id differs from its own,
 *      before acting on any other field: an ABORT from another job ends nothing, a DATA
 *      chunk from another job is never summed.
 *   2. A DEALER's routing id is "r<rank>.<16 hex digits>": the rank, then a random 64-bit
 *      nonce drawn afresh by every sl_tp_connect. The inbox reads the rank from the id (and
 *      checks it against the header's sender); anything else is dropped. ROUTER_HANDOVER
 *      is off, so nobody can take over a live connection's id, and since no other process
 *      knows the nonce, an impostor that connects first (under "r1" or any id it can
 *      guess) only ever holds an id of its own: the real rank's connection is never
 *      refused. A task that reconnects (sl_tp_disconnect + sl_tp_connect, or a restarted
 *      process) comes back under a new nonce, so it never waits for its old id to be
 *      released either. The one case left: a link that drops and that ZeroMQ restores
 *      by itself keeps its id, and is taken once the inbox has seen the old link close;
 *      should the old link still look alive there (a half-open TCP connection), the
 *      peer's messages are not delivered and the receive times out naming the peer:
 *      an error, never someone else's messages.
 *   3. Where the job id comes from (sluice/cluster.h: sl_cluster.job_id): sluice-launch
 *      draws a random one per job (SLUICE_JOB_ID in the tasks' environment; set it
 *      yourself to a fresh random value on every task of a job started otherwise), else it
 *      is derived from the cluster spec (a hash of every task's type and address), so that
 *      jobs with different members never mix; such a derived id is no secret, and a job
 *      started that way without CURVE says so at start (sl_job_run's warning).
 * Limits, written down: without CURVE nothing is authenticated. A process that knows the
 * job id (the same user reading a task's environment, or, for a derived id, anyone who
 * knows the cluster spec; a leftover task of an earlier job with the same spec and no
 * SLUICE_JOB_ID) can still speak for a rank. CURVE with an allow-list (below) keeps out
 * every process without an allowed key; the job id then still separates jobs that share
 * keys. Job id 0 means "no id" (library users who set none): it only matches 0.
 *
 * Every receive waits at most the timeout; a peer whose connection closes (the process
 * died) or that stays silent past the timeout turns into SL_EPEER / SL_ETIMEDOUT with a
 * message that names it by rank and address; a peer that never accepted a connection is
 * "rank R (ADDR) never answered within T s". Sends are zero-copy: the payload is handed to
 * ZeroMQ with a free callback (sl_tp_send), so the caller must keep it alive until the
 * callback runs or sl_tp_flush returns.
 *
 * Threads: an sl_tp is used by one thread at a time. Workload: a handful of peers, messages
 * from bytes to a few MiB, many per second. */
#ifndef SLUICE_TRANSPORT_H
#define SLUICE_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/status.h"
#include "sluice/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SL_MSG_MAGIC 0x31574c53u /* "SLW1" */
#define SL_MSG_VERSION 2
#define SL_MSG_HDR_SIZE 56

enum {
    SL_MSG_DATA = 1,      /* a chunk of a tensor (reduce-scatter, allgather, broadcast) */
    SL_MSG_BARRIER = 2,   /* a barrier token */
    SL_MSG_ABORT = 3,     /* the sender failed a collective; the payload is its message */
    SL_MSG_PUSH = 4,      /* parameter servers (sluice/ps.h): a gradient shard */
    SL_MSG_PULL = 5,      /* ask for the parameter shard */
    SL_MSG_REPLY = 6,     /* a ps's answer */
    SL_MSG_HEARTBEAT = 7, /* a worker is alive */
    SL_MSG_INIT = 8,      /* the chief's initial parameter shard */
    SL_MSG_HELLO = 9,     /* a worker joins (or rejoins) */
    SL_MSG_BYE = 10,      /* a worker is done */
    SL_MSG_SUM = 11,      /* int32 counts to add over the workers (sync ps rounds) */
    SL_MSG_TYPES_
};

enum { SL_MSGF_FP16 = 1 }; /* the payload is float16 standing for float32 elements */

typedef struct sl_msg_hdr {
    uint16_t type, round;
    uint8_t dtype, flags;
    uint32_t sender, tensor;
    uint64_t step, offset, length;
    uint64_t job;       /* the sender's job id (sl_tp_send fills it in) */
} sl_msg_hdr;

/* Write h as 56 bytes (magic, version and reserved filled in). */
void sl_msg_encode(const sl_msg_hdr *h, uint8_t out[SL_MSG_HDR_SIZE]);

/* Decode and validate a header frame of `len` bytes. SL_OK, or SL_ECORRUPT with
 * "message header: byte N: what" (wrong size, magic, version, type, dtype, flags,
 * reserved bits, a payload length that disagrees with the dtype). *out is written only on
 * success. */
sl_status sl_msg_decode(const void *buf, size_t len, sl_msg_hdr *out);

/* The inbox's verdict on one received message, the rule sl_tp_recv applies before it uses
 * anything: routing id id[0..idn), header frame hdr[0..hlen) and a payload of plen bytes,
 * received by rank `self` of `n` in job `job`, which accepts payloads up to max_msg bytes.
 * Returns the sender's rank (>= 0, != self) and fills *out when the header is valid, of
 * this job, and agrees with the connection (routing id "r<rank>.<16 hex digits>" naming
 * the header's sender) and the payload (length <= max_msg); SL_MSG_FOREIGN when the header
 * is valid but of another job (whoever sent it); SL_MSG_INVALID otherwise. *out is written
 * only on success. */
enum { SL_MSG_FOREIGN = -1, SL_MSG_INVALID = -2 };
int sl_msg_accept(const void *id, size_t idn, const void *hdr, size_t hlen, size_t plen, int self, int n,
                  uint64_t job, size_t max_msg, sl_msg_hdr *out);

typedef struct sl_tp sl_tp;

/* ---- CURVE security (optional) -------------------------------------------------------
 * With curve set, every task's inbox is a CURVE server using the cluster's server keypair,
 * and every connection a CURVE client using this task's client keypair and the server's
 * public key. A ZAP handler (one thread per transport, on inproc://zeromq.zap.01) accepts a
 * connection only when the client's public key is in the allow-list: a stranger's
 * handshake fails and none of its messages reach sl_tp_recv (counted in stats.denied).
 * Keys are Z85 text (40 characters + NUL).
 *
 * Key files: a keypair file has the lines
 *     public-key = "Z85..."
 *     secret-key = "Z85..."
 * (the format of ZeroMQ's zcert files; other lines and '#' comments are ignored); a public
 * file has only the public-key line. An allow-list file has one key per line, either a bare
 * Z85 key or a public-key = "..." line ('#' comments and blank lines ignored). */
typedef struct sl_tp_curve {
    char server_public[41], server_secret[41]; /* the keypair every inbox serves with */
    char client_public[41], client_secret[41]; /* this task's keypair when it connects */
    char (*allow)[41];                         /* allowed client public keys (owned by caller) */
    int nallow;
} sl_tp_curve;

/* Load a keypair file (public and secret; secret may be NULL to read a public file).
 * SL_OK; SL_EIO when it cannot be read; SL_ECORRUPT "FILE:LINE: what" for a malformed line
 * or key (not 40 Z85 characters, or the secret does not match the public key). Outputs are
 * written only on success. */
sl_status sl_curve_load_keypair(const char *path, char public_key[41], char secret_key[41]);
/* Load an allow-list file into *keys (malloc'd, free with free()) and *n. Errors as above. */
sl_status sl_curve_load_allow(const char *path, char (**keys)[41], int *n);
/* Make a new keypair and write PATH.key (both keys, mode 0600) and PATH.pub (public only),
 * each through PATH.key.tmp.PID / PATH.pub.tmp.PID, renamed once both are whole. SL_OK,
 * SL_EIO naming the file (a failed write, a full disk or a file-size limit: "PATH.key:
 * write failed at byte N: REASON" with a hint, sluice/file.h), SL_EUNSUPPORTED when libzmq
 * has no CURVE. On failure no temporary file is left and an older pair is left as it was. */
sl_status sl_curve_keygen(const char *path);

typedef struct sl_tp_opts {
    double timeout_s;     /* receive timeout; 0 = 30 s */
    size_t max_msg;       /* largest payload accepted; 0 = 1 GiB. Bigger frames drop the link */
    int io_threads;       /* ZeroMQ I/O threads; 0 = 1 */
    const sl_tp_curve *curve; /* NULL: plaintext; else copied at create */
    uint64_t job_id;      /* this job's id (see "Job membership" above); 0 = none */
} sl_tp_opts;

typedef struct sl_tp_stats {
    uint64_t sent, sent_bytes;    /* messages and payload bytes sent */
    uint64_t received, received_bytes;
    uint64_t dropped;             /* invalid or stray messages dropped (foreign included) */
    uint64_t foreign;             /* well-formed messages of another job (other job id) dropped */
    uint64_t denied;              /* CURVE handshakes the ZAP handler refused */
} sl_tp_stats;

/* Create the transport of rank `self` among `n` tasks whose "host:port" addresses are
 * addrs[0..n) (copied). Binds addrs[self] (a numeric host or "localhost" binds that
 * interface, any other name binds all interfaces; port 0 picks a free port, see
 * sl_tp_endpoint). Peers are connected by sl_tp_connect. SL_EINVAL on a bad address or
 * rank, SL_EIO when the bind fails ("transport: rank R cannot bind HOST:PORT: REASON", the
 * address as given, with a hint for a port in use, a port below 1024 or an address of
 * another machine), SL_ENOMEM. *out is NULL on failure. */
sl_status sl_tp_create(int self, int n, const char *const *addrs, const sl_tp_opts *opts,
                       sl_tp **out);

/* Close all sockets without waiting for unsent messages (their free callbacks still run).
 * NULL is a no-op. */
void sl_tp_destroy(sl_tp *tp);

/* This task's bound "host:port" (with the real port when 0 was asked). Borrowed. */
const char *sl_tp_endpoint(const sl_tp *tp);
int sl_tp_rank(const sl_tp *tp);
int sl_tp_size(const sl_tp *tp);
/* The address of `rank` as currently known (borrowed), "?" when out of range. */
const char *sl_tp_peer_addr(const sl_tp *tp, int rank);

/* Replace the address of a peer before sl_tp_connect (for ports picked at bind time).
 * SL_ESTATE after connect, SL_EINVAL on a bad rank or address. */
sl_status sl_tp_set_peer(sl_tp *tp, int rank, const char *addr);

/* Connect to every peer (ZeroMQ connects in the background and retries until the peer
 * binds). SL_OK, or SL_EIO naming the peer ("transport: rank R cannot connect to rank P at
 * ADDR: REASON", for an address ZeroMQ refuses); the transport stays usable for a retry. */
sl_status sl_tp_connect(sl_tp *tp);

/* Close the connections to the peers, dropping what is still queued for them, and wait
 * (at most ~2 s) until ZeroMQ has released every counted zero-copy payload, so the caller
 * may free its buffers. sl_tp_connect connects again. SL_OK or SL_ETIMEDOUT. */
sl_status sl_tp_disconnect(sl_tp *tp);

/* Send header h (h->sender and h->length are filled in) and the payload data[0..len) to
 * rank `to`, zero-copy: free_fn(data, ctx) runs (on a ZeroMQ thread) when ZeroMQ is done
 * with the bytes; pass free_fn NULL to have the transport count the send so that
 * sl_tp_flush can wait for it. Fails with SL_ETIMEDOUT when the peer's queue stays full past
 * the timeout, SL_EINVAL on a bad rank; on failure free_fn has run or will run. */
sl_status sl_tp_send(sl_tp *tp, int to, sl_msg_hdr *h, const void *data, size_t len,
                     void (*free_fn)(void *data, void *ctx), void *ctx);

/* Like sl_tp_send but copies the payload (for small messages). */
sl_status sl_tp_send_copy(sl_tp *tp, int to, sl_msg_hdr *h, const void *data, size_t len);

/* Wait until every zero-copy send made with free_fn NULL has been released by ZeroMQ, at
 * most the timeout: SL_OK or SL_ETIMEDOUT naming the peer whose sends are still queued:
 * "rank R (ADDR) never answered within T s: N sends still queued for it" when no
 * connection to it ever opened (the process never started, or listens elsewhere), "lost
 * rank R (ADDR): connection closed with N sends still queued", or "rank R (ADDR) took
 * nothing for T s: N sends still queued for it". */
sl_status sl_tp_flush(sl_tp *tp);

/* Receive the next valid message of this job (invalid ones, and those of another job, are
 * dropped and counted on the way: sl_msg_accept). `from` is the rank the caller waits for,
 * or -1 for anyone; it only decides which peer a failure is about: messages from any rank
 * are returned and the caller judges them (sl_tp_drop). An SL_MSG_ABORT from a rank of
 * this job fails the receive with SL_EPEER quoting the sender's message ("rank R (ADDR)
 * failed: ..."); one of another job is dropped like any stranger's message. Waits at most
 * timeout_s (< 0: the transport's timeout); when messages of another job were dropped, the
 * timeout's hint says how many and which job id they carried.
 * On success *h is the header and *data / *len the payload, valid until the next
 * sl_tp_recv, sl_tp_forward, sl_tp_drop or sl_tp_destroy. Failures:
 *   SL_ETIMEDOUT  "no message from rank R (ADDR) in T s (N received, M dropped so far)",
 *                 or "rank R: no message from any peer in T s" when from is -1;
 *                 "rank R (ADDR) never answered within T s" when no connection to R
 *                 ever opened;
 *   SL_EPEER      from >= 0, its connection closed and nothing arrived for a grace period
 *                 (min(1 s, timeout/2)): "lost rank R (ADDR): connection closed";
 *   SL_EIO        a ZeroMQ failure (file:line and zmq_strerror).
 * With from = -1 a lost peer is never an error (a server outlives its clients). */
sl_status sl_tp_recv(sl_tp *tp, int from, double timeout_s, sl_msg_hdr *h, const void **data,
                     size_t *len);

/* Send the payload of the last received message on to `to` without copying it, under
 * header h. The payload is consumed (data from sl_tp_recv is no longer valid). */
sl_status sl_tp_forward(sl_tp *tp, int to, sl_msg_hdr *h);

/* Drop the current message and count it as dropped (a stray the caller rejected). */
void sl_tp_drop(sl_tp *tp);

/* Tell every peer this task failed (best effort, never blocks): they fail their next
 * receive with SL_EPEER quoting `why`. */
void sl_tp_abort(sl_tp *tp, const char *why);

/* Has the connection to `rank` closed since connect (the peer died or left)? */
int sl_tp_peer_lost(const sl_tp *tp, int rank);

void sl_tp_get_stats(const sl_tp *tp, sl_tp_stats *out);
/* The job id and the receive timeout this transport was created with. */
uint64_t sl_tp_job_id(const sl_tp *tp);
double sl_tp_timeout_s(const sl_tp *tp);

/* 64 random bits from the kernel (getrandom, else /dev/urandom), never 0: routing-id
 * nonces and sluice-launch's job ids. SL_OK, or SL_EIO when no randomness can be had. */
sl_status sl_tp_random_u64(uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
