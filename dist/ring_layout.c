/* Where the ranks run, and the collectives that follow from it (sluice/ring.h, "path").
 *
 * At sl_ring_create the ranks allgather a description of where each runs (host, boot id,
 * namespaces, /dev/shm; shm.c) over the transport and group the ranks that share a host;
 * the lowest rank of each group of two or more makes a segment for its group, the others
 * attach, and every rank unlinks its group's name once all have attached. Then:
 *   - one group: every collective through the segment (ring_shm.c);
 *   - every rank alone on its host: the transport ring (ring.c);
 *   - otherwise the hierarchy: an allreduce sums inside each host through its segment, the
 *     group leaders (the lowest rank of each host) allreduce those sums on a transport ring
 *     of their own, and each leader hands the result to its host's ranks through the
 *     segment. Across hosts each leader sends 2 (H - 1) / H of the tensor for H hosts,
 *     against 2 (n - 1) / n per rank (and per host link) of the flat ring over n ranks.
 * The sums of the hierarchy are fixed by the layout (which ranks share which host), so
 * runs with the same layout are bit-identical and every rank ends with the same bits; they
 * are not the flat ring's bits (path tcp keeps the flat ring).
 *
 * Workload: 2-64 ranks, a few per host; set up once per ring. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring_priv.h"
#include "sluice/log.h"

/* What a group leader tells the others about its segment (over the transport). */
typedef struct shm_offer {
    int32_t status;           /* the leader's sl_status making it; 0 with no name: no segment */
    uint32_t pad;
    uint64_t key;
    char name[SL__SHM_NAME];
    char why[256];            /* the leader's error when status != 0 */
} shm_offer;

void sl__ring_layout_free(sl_ring *r) {
    sl__shm_close(r->shm);
    r->shm = NULL;
    free(r->mem);
    free(r->lead);
    free(r->lidx);
    free(r->lpos);
    free(r->hbuf);
    r->mem = r->lead = r->lidx = r->lpos = NULL;
}

/* Group the ranks by host: lead[k] = the lowest rank on k's host, lidx[k] = k's index there. */
static int group(const sl__shm_where *w, int n, int *lead, int *lidx, int *maxg) {
    int hosts = 0;
    *maxg = 1;
    for (int k = 0; k < n; k++) {
        lead[k] = k;
        lidx[k] = 0;
        for (int j = 0; j < k; j++)
            if (sl__shm_same_host(&w[j], &w[k])) {
                lead[k] = lead[j];
                break;
            }
        for (int j = 0; j < k; j++) lidx[k] += lead[j] == lead[k];
        if (lead[k] == k) hosts++;
        if (lidx[k] + 1 > *maxg) *maxg = lidx[k] + 1;
    }
    return hosts;
}

/* Make (leader) or attach to (the others) this host's segment; *shm stays NULL alone. The
 * return is the transport's status; *failed is this rank's own failure (0: none), *all_ok
 * whether every rank succeeded (the same answer on every rank), why the reason if not. */
static sl_status make_segments(sl_ring *r, const sl_ring_opts *opts, const int *lead, const int *lidx,
                               sl__shm **shm, sl_status *failed, int *all_ok, char *why, size_t whyn) {
    int n = sl_tp_size(r->tp), me = sl_tp_rank(r->tp);
    int gs = 0, ranks[64];
    for (int k = 0; k < n; k++)
        if (lead[k] == lead[me] && gs < 64) ranks[gs++] = k;
    sl__shm_cfg cfg = {.n = gs, .rank = lidx[me], .job = sl_tp_job_id(r->tp),
                       .window = opts ? opts->shm_window : 0, .timeout_s = sl_tp_timeout_s(r->tp), .tp = r->tp,
                       .ranks = ranks};
    shm_offer *of = calloc((size_t)n, sizeof *of);
    if (!of) return sl_err(SL_ENOMEM, "ring: out of memory");
    sl_status mine = SL_OK;
    if (lead[me] == me && gs >= 2) {
        shm_offer *o = &of[me];
        mine = sl__shm_create(&cfg, o->name, &o->key, shm);
        o->status = mine;
        if (mine) snprintf(o->why, sizeof o->why, "%s", sl_errmsg());
    }
    sl_status s = sl__ring_tcp_allgather(r, of, sizeof *of, 0x53484d32u /* "SHM2" */);
    if (!s) {
        shm_offer *o = &of[lead[me]];
        o->name[sizeof o->name - 1] = 0;
        o->why[sizeof o->why - 1] = 0;
        if (lead[me] != me && gs >= 2) mine = o->status ? o->status : sl__shm_attach(&cfg, o->name, o->key, shm);
        snprintf(why, whyn, "%s", !mine ? "" : lead[me] != me && o->status ? o->why : sl_errmsg());
        int32_t ok = mine == SL_OK;
        s = sl__ring_tcp_allreduce_range(r, &ok, 1, 0, 1, SL_DT_I32, SL_REDUCE_SUM, 0x53484d33u);
        sl__shm_unlink(o->name); /* every rank once all attached: nothing stays in /dev/shm */
        *all_ok = ok == n;
        if (!s && ok != n && !mine) snprintf(why, whyn, "another rank could not attach to its host's segment");
    }
    *failed = mine;
    free(of);
    if (s || !*all_ok) {
        if (s) sl__shm_abort(*shm, sl_errmsg()); /* peers already on the segment learn why */
        sl__shm_close(*shm);
        *shm = NULL;
    }
    return s;
}

sl_status sl__ring_layout(sl_ring *r, const sl_ring_opts *opts) {
    int n = sl_tp_size(r->tp), me = sl_tp_rank(r->tp);
    int must = opts && opts->path == SL_RING_PATH_SHM;
    sl__shm_where *w = calloc((size_t)n, sizeof *w);
    int *lead = calloc((size_t)n, sizeof *lead), *lidx = calloc((size_t)n, sizeof *lidx);
    if (!w || !lead || !lidx) {
        free(w), free(lead), free(lidx);
        return sl_err(SL_ENOMEM, "ring: out of memory");
    }
    sl__shm_where_self(&w[me], opts ? opts->host : NULL);
    sl_status s = sl__ring_tcp_allgather(r, w, sizeof *w, 0x53484d31u /* "SHM1" */);
    int maxg = 1, hosts = s ? n : group(w, n, lead, lidx, &maxg);
    if (!s && must && hosts > 1) {
        int k = 1;
        while (k < n && lead[k] == 0) k++;
        s = sl_err(SL_EUNSUPPORTED, "ring path shm: rank %d (%s) runs on host %.64s (boot %.40s), rank 0 on %.64s", k,
                   k == me ? "this rank" : sl_tp_peer_addr(r->tp, k), w[k].host, w[k].boot, w[0].host);
        sl_err_hint("path shm needs every rank on one host; path auto uses shared memory inside each host");
    }
    free(w);
    if (s || hosts == n) { /* an error, or every rank alone: the transport ring */
        free(lead), free(lidx);
        return s;
    }
    char why[256] = "";
    sl__shm *shm = NULL;
    sl_status failed = SL_OK;
    int all_ok = 0;
    s = make_segments(r, opts, lead, lidx, &shm, &failed, &all_ok, why, sizeof why);
    if (!s && !all_ok && must) s = sl_err(failed ? failed : SL_EIO, "ring path shm: %s", why);
    if (s) {
        free(lead), free(lidx);
        return s;
    }
    if (!all_ok) { /* auto: the transport ring for everyone, as every rank agreed */
        SL_WARN("ring: shared memory not used (%s); collectives go over the transport", why);
        sl_err_clear();
        free(lead), free(lidx);
        return SL_OK;
    }
    r->shm = shm;
    if (hosts == 1) {
        free(lead), free(lidx);
        return SL_OK;
    }
    /* the hierarchy: the transport ring among the host leaders, in rank order */
    r->hier = 1;
    r->lead = lead;
    r->lidx = lidx;
    r->maxg = maxg;
    r->mem = calloc((size_t)hosts, sizeof *r->mem);
    r->lpos = calloc((size_t)n, sizeof *r->lpos);
    if (!r->mem || !r->lpos) return sl_err(SL_ENOMEM, "ring: out of memory");
    for (int k = 0; k < n; k++)
        if (lead[k] == k) {
            if (k == me) r->pos = r->nmem;
            r->mem[r->nmem++] = k;
        }
    for (int k = 0; k < n; k++)
        for (int p = 0; p < r->nmem; p++)
            if (r->mem[p] == lead[k]) r->lpos[k] = p;
    SL_DEBUG("ring: %d ranks on %d hosts: shared memory inside each, a transport ring among %d leaders", n, hosts,
             r->nmem);
    return SL_OK;
}

/* ---- the hierarchy's collectives -------------------------------------------------------- */

static int is_leader(const sl_ring *r) { return r->lead[sl_tp_rank(r->tp)] == sl_tp_rank(r->tp); }

sl_status sl__ring_hier_allreduce_range(sl_ring *r, void *buf, size_t count, size_t lo, size_t hi, sl_dtype dtype,
                                        sl_reduce_op op, uint32_t tensor) {
    sl_status s = sl__ring_usable(r);
    if (s) return s;
    /* this host's sum (exact float32 here: fp16 is for the wire between hosts) */
    if (r->shm && (s = sl__shm_allreduce_range(r->shm, buf, count, lo, hi, dtype, SL_REDUCE_SUM, 0, tensor)))
        return sl__ring_failed(r, s);
    if (is_leader(r)) {
        if ((s = sl__ring_tcp_allreduce_range(r, buf, count, lo, hi, dtype, SL_REDUCE_SUM, tensor))) return s;
        if (op == SL_REDUCE_AVG && dtype == SL_DT_F32) {
            float *p = buf, nf = (float)sl_tp_size(r->tp);
            for (size_t i = lo; i < hi; i++) p[i] /= nf;
        }
    }
    if (r->shm && hi > lo)
        s = sl__shm_broadcast(r->shm, (char *)buf + lo * 4, (hi - lo) * 4, 0, tensor);
    return sl__ring_failed(r, s);
}

sl_status sl__ring_hier_broadcast(sl_ring *r, void *buf, size_t len, int root, uint32_t tensor) {
    sl_status s = sl__ring_usable(r);
    if (s) return s;
    int me = sl_tp_rank(r->tp), mine = r->lead[me] == r->lead[root];
    /* root's host first hands it to its leader, the leaders pass it on, each host takes it */
    if (mine && r->shm && (s = sl__shm_broadcast(r->shm, buf, len, r->lidx[root], tensor))) return sl__ring_failed(r, s);
    if (is_leader(r) && (s = sl__ring_tcp_broadcast(r, buf, len, r->lpos[root], tensor))) return s;
    if (!mine && r->shm) s = sl__shm_broadcast(r->shm, buf, len, 0, tensor);
    return sl__ring_failed(r, s);
}

sl_status sl__ring_hier_allgather(sl_ring *r, void *all, size_t len, uint32_t tensor) {
    sl_status s = sl__ring_usable(r);
    if (s) return s;
    int n = sl_tp_size(r->tp), me = sl_tp_rank(r->tp);
    size_t blk = (size_t)r->maxg * len, need = blk * (size_t)(r->nmem + 1);
    if (r->hbuf_n < need) {
        unsigned char *b = realloc(r->hbuf, need);
        if (!b) return sl_err(SL_ENOMEM, "ring allgather: out of memory for %zu bytes", need);
        r->hbuf = b;
        r->hbuf_n = need;
    }
    /* this host's blocks in host order, then every host's (maxg blocks each), then all */
    unsigned char *host = r->hbuf, *hosts = r->hbuf + blk;
    memcpy(host + (size_t)r->lidx[me] * len, (char *)all + (size_t)me * len, len);
    if (r->shm && (s = sl__shm_allgather(r->shm, host, len, tensor))) return sl__ring_failed(r, s);
    if (is_leader(r)) {
        memcpy(hosts + (size_t)r->pos * blk, host, blk);
        if ((s = sl__ring_tcp_allgather(r, hosts, blk, tensor))) return s;
        for (int k = 0; k < n; k++)
            memcpy((char *)all + (size_t)k * len, hosts + (size_t)r->lpos[k] * blk + (size_t)r->lidx[k] * len, len);
    }
    if (r->shm) s = sl__shm_broadcast(r->shm, all, (size_t)n * len, 0, tensor);
    return sl__ring_failed(r, s);
}

sl_status sl__ring_hier_barrier(sl_ring *r) {
    sl_status s = sl__ring_usable(r);
    if (s) return s;
    if (r->shm && (s = sl__shm_barrier(r->shm))) return sl__ring_failed(r, s);
    if (is_leader(r) && (s = sl__ring_tcp_barrier(r))) return s;
    if (r->shm) s = sl__shm_barrier(r->shm);
    return sl__ring_failed(r, s);
}
