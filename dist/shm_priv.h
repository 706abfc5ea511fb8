/* The ring's same-host path: one shared-memory segment per ring (dist/shm.c: the segment,
 * its wake-ups and its peers' liveness; dist/ring_shm.c: the collectives over it). Private
 * to dist/; sluice/ring.h is the specification of what the collectives compute.
 *
 * The segment: a header (magic, version, job id, a random key, ranks, sizes), one slot per
 * rank (three progress counters that are futex words, a state, the pid, an abort message),
 * then per rank K windows of shm_window bytes, each with a 64-byte header that says which
 * collective and which window it holds. Rank 0 creates it (shm_open, mode 0600, O_EXCL,
 * every byte allocated up front so a full /dev/shm is an error and never a SIGBUS), tells
 * the name and key to the others over the transport, they attach and check every header
 * field, and it is unlinked once all have attached. */
#ifndef SLUICE_DIST_SHM_PRIV_H
#define SLUICE_DIST_SHM_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/ring.h"
#include "sluice/transport.h"

typedef struct sl__shm sl__shm;

/* Where a rank runs: ranks whose descriptions are equal can share a segment. */
typedef struct sl__shm_where {
    char host[64];     /* gethostname */
    char boot[40];     /* /proc/sys/kernel/random/boot_id */
    uint64_t pidns;    /* inode of /proc/self/ns/pid: pids mean the same process */
    uint64_t netns;    /* inode of /proc/self/ns/net: ranks in other network namespaces (other
                          containers, or hosts simulated with ip netns) count as other hosts */
    uint64_t shm_dev;  /* device and inode of /dev/shm: the same shared-memory filesystem */
    uint64_t shm_ino;
    uint32_t uid;
} sl__shm_where;

/* host: the host's name as a launcher knows it; NULL: gethostname. */
void sl__shm_where_self(sl__shm_where *w, const char *host);
int sl__shm_same_host(const sl__shm_where *a, const sl__shm_where *b);

typedef struct sl__shm_cfg {
    int n, rank;
    uint64_t job;        /* the transport's job id: a segment of another job is refused */
    size_t window;       /* bytes per rank per window (rounded up to 64) */
    double timeout_s;    /* a peer silent this long is named and the collective fails */
    sl_tp *tp;           /* borrowed: names the peers (address) in messages */
    const int *ranks;    /* ranks[k]: the transport rank of segment rank k; NULL: the same */
} sl__shm_cfg;

enum { SL__SHM_NAME = 80 };

/* Rank 0: sweep segments of dead creators, create, allocate and map the segment; name and
 * key are what the others need. SL_EIO (shm_open, mmap), SL_ENOMEM (no room in /dev/shm). */
sl_status sl__shm_create(const sl__shm_cfg *cfg, char name[SL__SHM_NAME], uint64_t *key, sl__shm **out);
/* The other ranks: open, map and check the segment (magic, version, size, job id, key,
 * ranks, this rank's slot free). SL_EIO, SL_EPEER (a segment of another job or layout). */
sl_status sl__shm_attach(const sl__shm_cfg *cfg, const char *name, uint64_t key, sl__shm **out);
void sl__shm_unlink(const char *name); /* ENOENT is fine: another rank was first */
/* Mark this rank as gone (peers waiting on it fail naming it) and unmap. NULL: no-op. */
void sl__shm_close(sl__shm *m);
/* Tell the peers this rank failed (they fail too, with why); the segment is then unusable. */
void sl__shm_abort(sl__shm *m, const char *why);

/* The collectives, as sluice/ring.h defines them (same bits as the transport's ring). */
sl_status sl__shm_allreduce_range(sl__shm *m, void *buf, size_t count, size_t lo, size_t hi, sl_dtype dtype,
                                  sl_reduce_op op, int fp16, uint32_t tensor);
sl_status sl__shm_broadcast(sl__shm *m, void *buf, size_t len, int root, uint32_t tensor);
sl_status sl__shm_allgather(sl__shm *m, void *all, size_t len, uint32_t tensor);
sl_status sl__shm_barrier(sl__shm *m);

/* The first element of segment i when count elements are cut into n (sluice/ring.h): the
 * transport ring and ring_shm.c must cut alike, or their sums would differ. */
static inline size_t sl__seg_off(size_t count, int n, int i) {
    size_t base = count / (size_t)n, rem = count % (size_t)n;
    return (size_t)i * base + ((size_t)i < rem ? (size_t)i : rem);
}

/* ---- between shm.c and ring_shm.c ----------------------------------------------------- */

enum { SL__PH_WRITTEN = 0, SL__PH_REDUCED = 1, SL__PH_DONE = 2, SL__PH_N = 3 };
enum { SL__SHM_ALLREDUCE = 1, SL__SHM_BROADCAST = 2, SL__SHM_ALLGATHER = 3, SL__SHM_BARRIER = 4 };

/* What a window holds: written by its owner before it posts WRITTEN, checked by every
 * reader before it reads a byte of the window. */
typedef struct sl__shm_whdr {
    uint64_t seq;        /* the collective's number on this ring */
    uint64_t win;        /* the window's number on this ring */
    uint64_t count, lo, hi; /* allreduce: elements and range; broadcast/allgather: bytes */
    uint32_t tensor;
    uint8_t kind, dtype, flags, op;
    int32_t root;
    uint32_t pad[3];
} sl__shm_whdr;

struct sl__shm {
    unsigned char *base;
    size_t size, window;
    int n, rank, nslots;
    int spin;                /* polls of a counter before sleeping on it */
    int yield;               /* more ranks than cores: give the core away between polls */
    uint64_t job, seq, win;  /* collectives and windows started on this ring */
    uint64_t written;        /* bytes written into the segment for the peers */
    double timeout_s;
    sl_tp *tp;
    int ranks[64];           /* the transport rank of each segment rank (for messages) */
    char name[SL__SHM_NAME];
    int broken;
};

unsigned char *sl__shm_data(sl__shm *m, int rank, uint64_t win);   /* the window's bytes */
sl__shm_whdr *sl__shm_hdr(sl__shm *m, int rank, uint64_t win);
/* Post that this rank finished phase ph of window win (counters count windows). */
void sl__shm_post(sl__shm *m, int ph, uint64_t win);
/* Wait until rank k has posted phase ph of window win; SL_EPEER naming k when it died,
 * left or failed, SL_ETIMEDOUT when it made no progress within the timeout. */
sl_status sl__shm_wait(sl__shm *m, int k, int ph, uint64_t win);
/* Wait until every other rank posted phase ph of window win. */
sl_status sl__shm_wait_all(sl__shm *m, int ph, uint64_t win);
/* Window win may be written: every peer is done with window win - nslots. */
sl_status sl__shm_wait_free(sl__shm *m, uint64_t win);
/* Check rank k's header of window win against want: SL_EPEER naming k and both sides. */
sl_status sl__shm_check(sl__shm *m, int k, const sl__shm_whdr *want);
/* A failed collective: tell the peers, mark the segment unusable, return s. */
sl_status sl__shm_fail(sl__shm *m, sl_status s);

#endif
