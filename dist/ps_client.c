/* A worker's parameter-server client (protocol in sluice/ps.h): join (HELLO, the chief's
 * INIT), push gradients and pull parameters from every ps in parallel, retry requests
 * across a ps restart, and keep the worker live with heartbeats.
 *
 * Workload: one push_pull per training step to a few ps, shards of KiB to hundreds of MiB.
 * A request is one refcounted frame per ps (prefix + the gathered shard) handed to ZeroMQ
 * zero-copy; a retry sends the same frame (same seq) again without copying. Every request
 * goes out to all ps first, then the replies are collected as they come.
 *
 * Retries: a request is re-sent when its ps's connection comes back after closing (a
 * restarted ps) and when no reply came for a while (RESEND_FIRST_S, doubling up to
 * RESEND_MAX_S: the ps may have lost it). The server answers a repeated seq without
 * applying it twice; replies whose seq is not the outstanding one are dropped. After
 * retry_s without an answer the operation fails, naming the ps.
 *
 * Threads: the caller's thread and a heartbeat thread share the transport under mu. The
 * caller's thread sends heartbeats itself while it waits inside an operation (it holds mu
 * then); the heartbeat thread covers the time the caller spends outside the client. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ps_internal.h"
#include "sluice/compress.h"
#include "sluice/log.h"

#define POLL_S 0.05
#define RESEND_FIRST_S 5.0
#define RESEND_MAX_S 30.0
#define UNINIT_RETRY_S 0.2

typedef struct ps_req {
    sl_buf *buf;  /* the request frame (one reference held here) */
    int type;
    uint64_t seq;
    int64_t value;    /* PUSH: the step (the header carries it too) */
    int active;       /* waiting for its reply */
    double sent_at, ivl;
    double send_at;   /* > 0: (re)send at this time (a PULL waiting for the chief's INIT) */
    int lost_seen;    /* its ps's connection closed since the last send */
    int uninit;       /* the last answer was UNINIT */
    double last_send; /* anything sent to this ps (heartbeats fill the silences), under mu */
    int64_t recorded; /* the last join's HELLO answer: this worker's step on this ps, -1 none */
} ps_req;

struct sl_ps_client {
    sl_tp *tp;           /* guarded by mu */
    const sl_ps_plan *plan;
    int nw, np, self;
    double retry_s, heartbeat_s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t hb;
    int hb_started;
    int hb_on;           /* guarded by mu: joined and not yet said BYE */
    int stop;            /* guarded by mu: the heartbeat thread ends */
    uint64_t seq;
    ps_req *req;         /* [np] */
    void *scratch;       /* aligned copy of a misaligned reply */
    size_t scratch_cap;
    uint8_t bye[SL_PS_PREFIX];
    sl_compress_spec cs;  /* pushes compressed with error feedback when kind != none */
    sl_compress_ef **ef;  /* [np]: each shard's residual */
    float *gshard;        /* a gathered shard before compression */
};

static void free_ef(sl_ps_client *c);

/* ---- sending ----------------------------------------------------------------------- */

static sl_status send_req_locked(sl_ps_client *c, int j) {
    ps_req *r = &c->req[j];
    sl_msg_hdr h = {.type = (uint16_t)r->type, .dtype = SL_DT_U8, .tensor = (uint32_t)j,
                    .step = r->type == SL_MSG_PUSH ? (uint64_t)r->value : 0};
    double now = sl_now_s();
    r->sent_at = now;
    r->send_at = 0;
    r->lost_seen = 0;
    r->last_send = now;
    sl_status st = sl__ps_buf_send(c->tp, c->nw + j, &h, r->buf);
    if (st == SL_ETIMEDOUT || st == SL_ENOMEM) { /* a full queue: the resend timer tries again */
        SL_DEBUG("worker %d: send to ps %d: %s", c->self, j, sl_errmsg());
        return SL_OK;
    }
    return st;
}

/* Make a new request of `type` for ps j (data gathered from flat when non-NULL, or the
 * counts sums[0..nsums) of a SUM) with the has-data pair have/lack, and send it, now or
 * after `delay` seconds. */
static sl_status start_req_full_locked(sl_ps_client *c, int j, int type, const float *flat, const int32_t *sums,
                                       size_t nsums, int64_t value, float lr, uint32_t have, uint32_t lack,
                                       double delay) {
    ps_req *r = &c->req[j];
    size_t n = flat ? c->plan->shard_len[j] : sums ? nsums : 0;
    /* a compressed push: the payload's bytes instead of n floats */
    int comp = type == SL_MSG_PUSH && flat && c->ef;
    size_t clen = comp ? sl_compress_size(&c->cs, n) : 0;
    sl_buf_unref(r->buf);
    r->buf = sl__ps_buf_new(comp ? (clen + 3) / 4 : n);
    if (!r->buf) return sl_err(SL_ENOMEM, "worker %d: out of memory for a request of %zu floats to ps %d", c->self, n, j);
    if (comp) r->buf->size = SL_PS_PREFIX + clen;
    r->type = type;
    r->seq = ++c->seq;
    r->value = value;
    r->active = 1;
    r->ivl = RESEND_FIRST_S;
    sl_ps_frame f = {.plan_hash = c->plan->hash, .seq = r->seq, .value = value, .lr = lr, .have = have, .lack = lack,
                     .codec = comp ? (uint32_t)c->cs.kind : 0};
    sl_ps_frame_encode_prefix(&f, r->buf->data);
    if (comp) {
        sl_ps_plan_gather(c->plan, j, flat, c->gshard);
        size_t len;
        sl_status st = sl_compress_ef_step(c->ef[j], c->gshard, n, sl__ps_buf_body(r->buf), clen, &len, NULL);
        if (st) {
            r->active = 0;
            sl_err_prefix("worker %d: push to ps %d: ", c->self, j);
            return st;
        }
    } else if (flat) sl_ps_plan_gather(c->plan, j, flat, sl__ps_buf_floats(r->buf));
    else if (sums) memcpy(sl__ps_buf_body(r->buf), sums, nsums * sizeof *sums);
    if (delay > 0) {
        r->send_at = sl_now_s() + delay;
        return SL_OK;
    }
    return send_req_locked(c, j);
}

static sl_status start_req_locked(sl_ps_client *c, int j, int type, const float *flat, int64_t value, float lr,
                                  double delay) {
    return start_req_full_locked(c, j, type, flat, NULL, 0, value, lr, 0, 0, delay);
}

/* HEARTBEAT to every ps that heard nothing from this worker for heartbeat_s (when joined).
 * Returns when the next one falls due. */
static double heartbeat_locked(sl_ps_client *c) {
    double now = sl_now_s(), next = now + c->heartbeat_s;
    if (!c->hb_on) return next;
    uint8_t pre[SL_PS_PREFIX];
    sl_ps_frame f = {.plan_hash = c->plan->hash};
    sl_ps_frame_encode_prefix(&f, pre);
    for (int j = 0; j < c->np; j++) {
        ps_req *r = &c->req[j];
        if (now - r->last_send >= c->heartbeat_s) {
            sl_msg_hdr h = {.type = SL_MSG_HEARTBEAT, .dtype = SL_DT_U8, .tensor = (uint32_t)j};
            if (sl_tp_send_copy(c->tp, c->nw + j, &h, pre, sizeof pre))
                SL_DEBUG("worker %d: heartbeat to ps %d: %s", c->self, j, sl_errmsg());
            r->last_send = now;
        }
        if (r->last_send + c->heartbeat_s < next) next = r->last_send + c->heartbeat_s;
    }
    return next;
}

static void *heartbeat_main(void *arg) {
    sl_ps_client *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        double wake = heartbeat_locked(c), now = sl_now_s();
        if (wake < now + 0.01) wake = now + 0.01;
        sl_cond_wait_until(&c->cv, &c->mu, (uint64_t)(wake * 1e9));
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- create / free ----------------------------------------------------------------- */

sl_status sl_ps_client_create(const char *const *addrs, int nworkers, int worker, const sl_ps_plan *plan,
                              const sl_tp_opts *tpo, const sl_ps_client_opts *opts, sl_ps_client **out) {
    *out = NULL;
    if (!addrs || !plan || nworkers < 1 || worker < 0 || worker >= nworkers)
        return sl_err(SL_EINVAL, "ps client: worker %d of %d is out of range", worker, nworkers);
    sl_ps_client *c = calloc(1, sizeof *c);
    if (!c) return sl_err(SL_ENOMEM, "ps client: out of memory");
    sl_status st;
    c->plan = plan;
    c->nw = nworkers;
    c->np = plan->nps;
    c->self = worker;
    c->retry_s = opts && opts->retry_s > 0 ? opts->retry_s : 120.0;
    c->heartbeat_s = opts && opts->heartbeat_s > 0 ? opts->heartbeat_s : 1.0;
    /* a restarted worker must not repeat its previous life's seqs: start from the clock */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    c->seq = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) << 8;
    c->req = calloc((size_t)c->np, sizeof *c->req);
    if (!c->req) { free(c); return sl_err(SL_ENOMEM, "ps client: out of memory"); }
    sl_ps_frame f = {.plan_hash = plan->hash};
    sl_ps_frame_encode_prefix(&f, c->bye);
    sl_cond_init_mono(&c->cv);
    pthread_mutex_init(&c->mu, NULL);
    st = sl_tp_create(worker, nworkers + plan->nps, addrs, tpo, &c->tp);
    if (st) { sl_err_prefix("worker %d: ", worker); goto fail; }
    st = sl_tp_connect(c->tp);
    if (st) { sl_err_prefix("worker %d: ", worker); goto fail; }
    if (pthread_create(&c->hb, NULL, heartbeat_main, c)) {
        st = sl_err(SL_ENOMEM, "worker %d: cannot start the heartbeat thread", worker);
        goto fail;
    }
    c->hb_started = 1;
    *out = c;
    return SL_OK;
fail:
    sl_ps_client_free(c);
    return st;
}

void sl_ps_client_free(sl_ps_client *c) {
    if (!c) return;
    if (c->hb_started) {
        pthread_mutex_lock(&c->mu);
        c->stop = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->hb, NULL);
    }
    sl_tp_destroy(c->tp); /* releases every zero-copy reference before the buffers go */
    for (int j = 0; j < c->np; j++) sl_buf_unref(c->req[j].buf);
    free(c->req);
    free(c->scratch);
    free_ef(c);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

/* ---- the request loop -------------------------------------------------------------- */

/* What to do with ps j's answer f to its active request: 0 done, 1 a new request was
 * started (keep waiting), < 0 fail. */
typedef sl_status (*on_reply_fn)(sl_ps_client *c, int j, const sl_ps_frame *f, void *ctx);

static sl_status give_up(sl_ps_client *c, int j, const char *what) {
    double waited = c->retry_s;
    ps_req *r = &c->req[j];
    int rank = c->nw + j;
    if (r->uninit)
        return sl_err(SL_ETIMEDOUT, "worker %d: ps %d (%s) has no parameters after %.1f s of %s (the chief, worker 0, "
                      "did not initialise it)", c->self, j, sl_tp_peer_addr(c->tp, rank), waited, what);
    if (sl_tp_peer_lost(c->tp, rank)) {
        sl_err(SL_EPEER, "worker %d: lost ps %d (%s): connection closed, no answer to %s in %.1f s", c->self, j,
               sl_tp_peer_addr(c->tp, rank), what, waited);
        sl_err_hint("the ps task died and did not come back within retry_s (see its own output for why); with "
                    "CURVE on, a ps whose allow-list lacks this worker's public key drops it the same way");
        return SL_EPEER;
    }
    sl_err(SL_ETIMEDOUT, "worker %d: no answer from ps %d (%s) to %s in %.1f s", c->self, j,
           sl_tp_peer_addr(c->tp, rank), what, waited);
    sl_err_hint("the ps may be down, unreachable, or refusing this worker's key (CURVE allow-list)");
    return SL_ETIMEDOUT;
}

/* Wait until every active request has been answered (and handled by fn). */
static sl_status collect_locked(sl_ps_client *c, on_reply_fn fn, void *ctx, const char *what) {
    double deadline = sl_now_s() + c->retry_s;
    for (;;) {
        int any = 0;
        double now = sl_now_s();
        for (int j = 0; j < c->np; j++) {
            ps_req *r = &c->req[j];
            if (!r->active) continue;
            any = 1;
            if (now >= deadline) return give_up(c, j, what);
            int lost = sl_tp_peer_lost(c->tp, c->nw + j);
            int resend = 0;
            if (lost) r->lost_seen = 1;
            else if (r->lost_seen) resend = 1; /* it came back (restarted): the request may be lost */
            if (r->send_at > 0) resend = now >= r->send_at;
            else if (now - r->sent_at >= r->ivl) {
                resend = 1;
                r->ivl = r->ivl * 2 < RESEND_MAX_S ? r->ivl * 2 : RESEND_MAX_S;
            }
            if (resend) {
                sl_status st = send_req_locked(c, j);
                if (st) return st;
            }
        }
        if (!any) return SL_OK;
        heartbeat_locked(c);
        sl_msg_hdr h;
        const void *data;
        size_t len;
        sl_status st = sl_tp_recv(c->tp, -1, POLL_S, &h, &data, &len);
        if (st == SL_ETIMEDOUT) continue;
        if (st) {
            sl_err_prefix("worker %d: %s: ", c->self, what);
            return st;
        }
        int j = (int)h.sender - c->nw;
        sl_ps_frame f;
        if (j < 0 || j >= c->np || !c->req[j].active || !(data = sl__ps_aligned(data, len, &c->scratch, &c->scratch_cap)) ||
            sl_ps_frame_decode(&h, data, len, 0, c->plan->shard_len[j], &f) || f.type != SL_MSG_REPLY || f.ps != j ||
            f.seq != c->req[j].seq ||
            ((f.status == SL_PS_SUMS) != (c->req[j].type == SL_MSG_SUM) && f.status != SL_PS_REJECT) ||
            f.have > (uint32_t)c->nw || f.lack > (uint32_t)c->nw - f.have) {
            sl_tp_drop(c->tp); /* a stray, a late answer to an earlier request, or garbage */
            continue;
        }
        if (f.status == SL_PS_REJECT) {
            int n = f.n_reason > 400 ? 400 : (int)f.n_reason;
            sl_err(SL_EINVAL, "worker %d: ps %d (%s) rejected %s: %.*s", c->self, j, sl_tp_peer_addr(c->tp, c->nw + j),
                   what, n, f.reason);
            sl_err_hint("every worker and ps must plan the same model over the same number of ps tasks");
            return SL_EINVAL;
        }
        if (f.plan_hash != c->plan->hash) {
            sl_tp_drop(c->tp);
            continue;
        }
        c->req[j].uninit = f.status == SL_PS_UNINIT;
        st = fn(c, j, &f, ctx);
        if (st < 0) return st;
        if (st == 0) c->req[j].active = 0;
    }
}

static void cancel_all(sl_ps_client *c) {
    for (int j = 0; j < c->np; j++) {
        c->req[j].active = 0;
        c->req[j].uninit = 0;
    }
}

static sl_status check_finite(const sl_ps_client *c, const float *v, const char *what) {
    for (size_t i = 0; i < c->plan->total; i++)
        if (!isfinite(v[i]))
            return sl_err(SL_EINVAL, "worker %d: %s float %zu is %g (a ps only takes finite values)", c->self, what, i,
                          (double)v[i]);
    return SL_OK;
}

/* ---- operations -------------------------------------------------------------------- */

typedef struct join_ctx {
    float *flat;
    int64_t resume;
} join_ctx;

static sl_status on_join_reply(sl_ps_client *c, int j, const sl_ps_frame *f, void *ctx) {
    join_ctx *jc = ctx;
    ps_req *r = &c->req[j];
    if (r->type == SL_MSG_HELLO) {
        r->recorded = f->value;
        if (f->value > jc->resume) jc->resume = f->value;
    }
    if (f->status == SL_PS_OK) {
        sl_ps_plan_scatter(c->plan, j, f->data, jc->flat);
        return 0;
    }
    /* UNINIT: the chief initialises it; the others ask again until it has */
    sl_status st = c->self == 0 ? start_req_locked(c, j, SL_MSG_INIT, jc->flat, 0, 0.0f, 0)
                                : start_req_locked(c, j, SL_MSG_PULL, NULL, 0, 0.0f, UNINIT_RETRY_S);
    return st ? st : 1;
}

sl_status sl_ps_client_join(sl_ps_client *c, float *flat, int64_t *resume_step) {
    join_ctx jc = {.flat = flat, .resume = -1};
    pthread_mutex_lock(&c->mu);
    sl_status st = c->self == 0 ? check_finite(c, flat, "initial parameter") : SL_OK;
    for (int j = 0; j < c->np; j++) c->req[j].recorded = -1;
    for (int j = 0; j < c->np && !st; j++) st = start_req_locked(c, j, SL_MSG_HELLO, NULL, 0, 0.0f, 0);
    if (!st) st = collect_locked(c, on_join_reply, &jc, "join");
    if (!st) {
        c->hb_on = 1;
        if (resume_step) *resume_step = jc.resume;
    }
    cancel_all(c);
    pthread_mutex_unlock(&c->mu);
    return st;
}

static sl_status on_params_reply(sl_ps_client *c, int j, const sl_ps_frame *f, void *ctx) {
    if (f->status == SL_PS_UNINIT) {
        sl_err(SL_ESTATE, "worker %d: ps %d (%s) has no parameters (restarted without a checkpoint?)", c->self, j,
               sl_tp_peer_addr(c->tp, c->nw + j));
        sl_err_hint("join again (sl_ps_client_join) so the chief re-initialises it");
        return SL_ESTATE;
    }
    sl_ps_plan_scatter(c->plan, j, f->data, ctx);
    return 0;
}

sl_status sl_ps_client_push_pull(sl_ps_client *c, const float *grad, int64_t step, float lr, float *params) {
    if (step < 0 || !isfinite(lr) || lr < 0)
        return sl_err(SL_EINVAL, "worker %d: push for step %lld with lr %g (need step >= 0, finite lr >= 0)", c->self,
                      (long long)step, (double)lr);
    sl_status st = check_finite(c, grad, "gradient");
    if (st) return st;
    pthread_mutex_lock(&c->mu);
    for (int j = 0; j < c->np && !st; j++) st = start_req_locked(c, j, SL_MSG_PUSH, grad, step, lr, 0);
    if (!st) st = collect_locked(c, on_params_reply, params, "push");
    cancel_all(c);
    pthread_mutex_unlock(&c->mu);
    return st;
}

typedef struct more_ctx {
    float *params;
    uint32_t have, lack;
    int counted;     /* some ps answered with counts */
} more_ctx;

static sl_status on_more_reply(sl_ps_client *c, int j, const sl_ps_frame *f, void *ctx) {
    more_ctx *mc = ctx;
    sl_status st = on_params_reply(c, j, f, mc->params);
    if (st) return st;
    /* 0/0: this ps did not count (async, or restarted since the round); the others decide */
    if (f->have || f->lack) {
        if (!mc->counted || f->lack > mc->lack || (f->lack == mc->lack && f->have < mc->have)) {
            mc->have = f->have;
            mc->lack = f->lack;
        }
        mc->counted = 1;
    }
    return 0;
}

sl_status sl_ps_client_push_pull_more(sl_ps_client *c, const float *grad, int64_t step, float lr, float *params,
                                      bool has_next, int *have, int *lack) {
    if (step < 0 || !isfinite(lr) || lr < 0)
        return sl_err(SL_EINVAL, "worker %d: push for step %lld with lr %g (need step >= 0, finite lr >= 0)", c->self,
                      (long long)step, (double)lr);
    sl_status st = check_finite(c, grad, "gradient");
    if (st) return st;
    more_ctx mc = {.params = params};
    pthread_mutex_lock(&c->mu);
    for (int j = 0; j < c->np && !st; j++)
        st = start_req_full_locked(c, j, SL_MSG_PUSH, grad, NULL, 0, step, lr, has_next, !has_next, 0);
    if (!st) st = collect_locked(c, on_more_reply, &mc, "push");
    cancel_all(c);
    pthread_mutex_unlock(&c->mu);
    if (!st) {
        *have = (int)mc.have;
        *lack = (int)mc.lack;
    }
    return st;
}

typedef struct sum_ctx {
    int32_t *v;
    size_t n;
    uint8_t *took_part;
} sum_ctx;

static sl_status on_sum_reply(sl_ps_client *c, int j, const sl_ps_frame *f, void *ctx) {
    sum_ctx *sc = ctx;
    size_t nw = (size_t)c->nw;
    int32_t flag;
    int bad = f->n != sc->n + nw || (uint32_t)f->value != c->req[j].value;
    for (size_t i = 0; !bad && i < nw; i++) {
        memcpy(&flag, f->sums + sc->n + i, sizeof flag);
        bad = (flag != 0 && flag != 1) || (i == (size_t)c->self && flag != 1);
    }
    if (bad) {
        sl_err(SL_ECORRUPT, "worker %d: ps %d (%s) answered a sum of %zu counts with %zu values (tag %lld, expected "
               "%lld) or bad worker flags", c->self, j, sl_tp_peer_addr(c->tp, c->nw + j), sc->n, f->n,
               (long long)f->value, (long long)c->req[j].value);
        return SL_ECORRUPT;
    }
    memcpy(sc->v, f->sums, sc->n * sizeof *sc->v);
    if (sc->took_part)
        for (size_t i = 0; i < nw; i++) {
            memcpy(&flag, f->sums + sc->n + i, sizeof flag);
            sc->took_part[i] = (uint8_t)flag;
        }
    return 0;
}

sl_status sl_ps_client_sum(sl_ps_client *c, int32_t *v, size_t n, uint32_t tag, uint8_t *took_part) {
    if (!v || n < 1 || n > SL_PS_SUM_MAX || tag > 0xffff)
        return sl_err(SL_EINVAL, "worker %d: a sum of %zu counts with tag %u (need 1..%d counts, tag < 0x10000)", c->self,
                      n, tag, SL_PS_SUM_MAX);
    /* the answer is written only once it is whole */
    int32_t *out = malloc(n * sizeof *out);
    uint8_t *took = malloc((size_t)c->nw);
    if (!out || !took) {
        free(out);
        free(took);
        return sl_err(SL_ENOMEM, "worker %d: out of memory for a sum of %zu counts", c->self, n);
    }
    sum_ctx sc = {.v = out, .n = n, .took_part = took};
    pthread_mutex_lock(&c->mu);
    sl_status st = start_req_full_locked(c, 0, SL_MSG_SUM, NULL, v, n, tag, 0.0f, 0, 0, 0);
    if (!st) st = collect_locked(c, on_sum_reply, &sc, "sum");
    cancel_all(c);
    pthread_mutex_unlock(&c->mu);
    if (!st) {
        memcpy(v, out, n * sizeof *v);
        if (took_part) memcpy(took_part, took, (size_t)c->nw);
    }
    free(out);
    free(took);
    return st;
}

sl_status sl_ps_client_pull(sl_ps_client *c, float *flat) {
    sl_status st = SL_OK;
    pthread_mutex_lock(&c->mu);
    for (int j = 0; j < c->np && !st; j++) st = start_req_locked(c, j, SL_MSG_PULL, NULL, 0, 0.0f, 0);
    if (!st) st = collect_locked(c, on_params_reply, flat, "pull");
    cancel_all(c);
    pthread_mutex_unlock(&c->mu);
    return st;
}

sl_status sl_ps_client_bye(sl_ps_client *c) {
    pthread_mutex_lock(&c->mu);
    c->hb_on = 0;
    int any_lost = 0;
    for (int j = 0; j < c->np; j++) {
        sl_msg_hdr h = {.type = SL_MSG_BYE, .dtype = SL_DT_U8, .tensor = (uint32_t)j};
        if (sl_tp_peer_lost(c->tp, c->nw + j)) any_lost = 1;
        /* counted (free_fn NULL) so the flush below waits until ZeroMQ has sent it */
        if (sl_tp_send(c->tp, c->nw + j, &h, c->bye, sizeof c->bye, NULL, NULL))
            SL_DEBUG("worker %d: BYE to ps %d: %s", c->self, j, sl_errmsg());
    }
    /* a lost ps would hold its BYE until the transport's timeout: best effort, skip */
    sl_status st = any_lost ? SL_OK : sl_tp_flush(c->tp);
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* ---- compression ------------------------------------------------------------------------ */

static void free_ef(sl_ps_client *c) {
    if (c->ef)
        for (int j = 0; j < c->np; j++) sl_compress_ef_free(c->ef[j]);
    free(c->ef);
    c->ef = NULL;
    free(c->gshard);
    c->gshard = NULL;
}

sl_status sl_ps_client_set_compress(sl_ps_client *c, const sl_compress_spec *spec) {
    pthread_mutex_lock(&c->mu);
    free_ef(c);
    c->cs = spec ? *spec : (sl_compress_spec){0};
    sl_status st = SL_OK;
    if (c->cs.kind != SL_COMPRESS_NONE) {
        size_t mx = 1;
        for (int j = 0; j < c->np; j++)
            if (c->plan->shard_len[j] > mx) mx = c->plan->shard_len[j];
        c->ef = calloc(c->np > 0 ? (size_t)c->np : 1, sizeof *c->ef);
        c->gshard = malloc(mx * sizeof *c->gshard);
        if (!c->ef || !c->gshard) st = sl_err(SL_ENOMEM, "worker %d: out of memory for compression state", c->self);
        for (int j = 0; j < c->np && !st; j++) st = sl_compress_ef_create(&c->cs, c->plan->shard_len[j], &c->ef[j]);
        if (st) {
            free_ef(c);
            c->cs = (sl_compress_spec){0};
        }
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

double *sl_ps_client_residual(sl_ps_client *c, int j, size_t *n) {
    if (!c->ef || j < 0 || j >= c->np) {
        if (n) *n = 0;
        return NULL;
    }
    return sl_compress_ef_residual(c->ef[j], n);
}

int64_t sl_ps_client_recorded_step(sl_ps_client *c, int j) {
    if (j < 0 || j >= c->np) return -1;
    pthread_mutex_lock(&c->mu);
    int64_t v = c->req[j].recorded;
    pthread_mutex_unlock(&c->mu);
    return v;
}

uint64_t sl_ps_client_sent_bytes(sl_ps_client *c) {
    pthread_mutex_lock(&c->mu);
    sl_tp_stats ts = {0};
    if (c->tp) sl_tp_get_stats(c->tp, &ts);
    pthread_mutex_unlock(&c->mu);
    return ts.sent_bytes;
}
