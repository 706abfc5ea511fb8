/* What ring.c (the collectives over the transport, the public entry points) and
 * ring_layout.c (where the ranks run: shared memory on one host, the hierarchy across
 * hosts) share. Private to dist/. */
#ifndef SLUICE_DIST_RING_PRIV_H
#define SLUICE_DIST_RING_PRIV_H

#include "shm_priv.h"
#include "sluice/ring.h"

struct sl_ring {
    sl_tp *tp;
    size_t chunk_bytes;
    int fp16;
    int broken;          /* a collective failed: peers are out of step */
    uint64_t seq;        /* transport collectives started; the step field of every message */
    float *scratch;      /* aligned copy of an unaligned float payload */
    size_t scratch_n;
    unsigned char *gather; /* compressed allreduce: every rank's payload */
    size_t gather_n;
    /* The transport ring's members: NULL: every rank of tp in order; else (the hierarchy's
     * ring of host leaders) nmem transport ranks, this rank at position pos. */
    int *mem;
    int nmem, pos;
    sl__shm *shm;        /* this host's segment: all ranks (flat), or this host's ranks (hier) */
    int hier;            /* ranks on several hosts, some sharing one: shared memory inside a
                            host, the transport ring among one leader per host */
    int *lead;           /* hier: lead[k], the transport rank of rank k's host leader */
    int *lidx;           /* hier: lidx[k], rank k's index among its host's ranks */
    int *lpos;           /* hier: lpos[k], the position of rank k's leader in mem */
    int maxg;            /* hier: the most ranks on one host */
    unsigned char *hbuf; /* hier allgather staging */
    size_t hbuf_n;
    struct sl__early *early; /* messages of later collectives from members other than prev */
    struct sl__early *cur;   /* the kept message handed out last (freed at the next receive) */
    size_t early_bytes;
};

void sl__ring_early_free(sl_ring *r);

/* Learn where every rank runs and set up shared memory and the hierarchy (ring_layout.c).
 * Errors as sl_ring_create states. */
sl_status sl__ring_layout(sl_ring *r, const sl_ring_opts *opts);
void sl__ring_layout_free(sl_ring *r);

/* The collectives over the transport ring of r's members (ring.c): positions, not
 * transport ranks, for root. */
sl_status sl__ring_tcp_allreduce_range(sl_ring *r, void *buf, size_t count, size_t lo, size_t hi, sl_dtype dtype,
                                       sl_reduce_op op, uint32_t tensor);
sl_status sl__ring_tcp_broadcast(sl_ring *r, void *buf, size_t len, int root, uint32_t tensor);
sl_status sl__ring_tcp_allgather(sl_ring *r, void *all, size_t len, uint32_t tensor);
sl_status sl__ring_tcp_barrier(sl_ring *r);

/* The hierarchy's collectives (ring_layout.c), as sluice/ring.h defines them. */
sl_status sl__ring_hier_allreduce_range(sl_ring *r, void *buf, size_t count, size_t lo, size_t hi, sl_dtype dtype,
                                        sl_reduce_op op, uint32_t tensor);
sl_status sl__ring_hier_broadcast(sl_ring *r, void *buf, size_t len, int root, uint32_t tensor);
sl_status sl__ring_hier_allgather(sl_ring *r, void *all, size_t len, uint32_t tensor);
sl_status sl__ring_hier_barrier(sl_ring *r);

/* A failed collective: the peers are told (shared memory and transport), the ring unusable. */
void sl__ring_abort(sl_ring *r, const char *why);
/* The end of a collective with status s: on an error (SL_ESTATE aside, which changed
 * nothing) the peers are told and the ring marked unusable; s comes back, its message kept. */
sl_status sl__ring_failed(sl_ring *r, sl_status s);
/* SL_ESTATE once a collective failed, else SL_OK. */
sl_status sl__ring_usable(const sl_ring *r);

#endif
