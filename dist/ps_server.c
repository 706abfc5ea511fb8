/* The parameter-server loop (protocol in sluice/ps.h): one ps task owns one shard, answers
 * HELLO/INIT/PULL/PUSH from workers, applies gradients (at once, or as the mean of a
 * synchronous round), holds replies to workers too far ahead (staleness bound), tracks
 * which workers are live, and checkpoints through the caller's save callback.
 *
 * Workload: a few workers, one PUSH per worker step, shards of KiB to hundreds of MiB. One
 * thread does everything; sl_tp_recv waits at most TICK_S so the liveness and checkpoint
 * timers run while nobody talks. A reply is one malloc'd frame (prefix + a copy of the
 * parameters, which the next apply changes) handed to ZeroMQ zero-copy.
 *
 * Decisions beyond the header:
 *   - a retried request (same seq as the worker's last one) is never applied twice: when
 *     its reply is still held (sync round, staleness) it is ignored, else answered again;
 *     a PUSH for a step at or below the worker's recorded step (a retry that crossed a ps
 *     restart) is answered without being applied;
 *   - a sync round uses the lr of its lowest-numbered worker, and sums the gradients in
 *     worker order (the mean is the same bits whatever order they arrived in);
 *   - a PUSH to a ps without parameters is answered UNINIT and not applied;
 *   - a frame with another plan hash gets a REJECT and does not make its sender live;
 *   - sync: a round's has-data counts go to every worker of the round with its reply, and a
 *     retry of an answered PUSH gets the same counts again (a ps restarted since answers
 *     0/0: it no longer knows them); a SUM round comes before a step round when both could
 *     form; each worker's last SUM answer is kept to answer its retry;
 *   - a worker has one request outstanding: a new one replaces a pending PUSH or SUM;
 *   - sync: a ps forms no round, step or sum, until every worker has been live once: a
 *     fresh one waits as long as it takes, a restored one at most dead_after_s from the
 *     start of its run (a worker dead before the restart may never come back; it is then
 *     named in a warning and the rounds go on without it). Without the wait a resumed job's
 *     first worker back would take rounds alone: the shard would move on from its restored
 *     step with one worker's gradient, and the others would find it at another step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_internal.h"
#include "sluice/compress.h"
#include "sluice/log.h"

#define TICK_S 0.1

typedef struct wstate {
    int64_t step;        /* last step applied for this worker, -1 none */
    double seen;         /* when its last valid frame came */
    int live, bye;
    int joined;          /* it has been live once (a fresh sync ps's first round waits for all) */
    int dead;            /* left the live set by dying (not BYE); cleared when it comes back */
    int lost_prev;       /* sl_tp_peer_lost at the last check: death is the 0 -> 1 edge */
    int have_seq;
    uint64_t seq;        /* its last request's seq (retries repeat it) */
    int held;            /* a PUSH reply held back by the staleness bound */
    uint64_t held_seq;
    int pending;         /* sync: its gradient waits in grad for the round */
    uint64_t pend_seq;
    int64_t pend_step;
    float pend_lr;
    uint32_t pend_have, pend_lack; /* sync: its has-data pair for the round */
    uint32_t ans_have, ans_lack;   /* the counts of its last round (its replies carry them) */
    int sum_pending;     /* sync: a SUM waits for its round */
    uint64_t sum_seq;
    uint32_t sum_tag;
    size_t sum_n, sum_cap;
    int32_t *sum_v;      /* [sum_n] its counts */
    sl_buf *sum_ans; /* its last SUM's answer (for a retry), with sum_ans_seq */
    uint64_t sum_ans_seq;
    int in_round;        /* scratch of try_round */
    float *grad;         /* sync: [n], allocated at its first sync push */
} wstate;

struct sl_ps_server {
    sl_tp *tp;
    const sl_ps_plan *plan;
    sl_ps_server_ops ops;
    sl_ps_server_opts opts;
    int nw, idx;
    size_t n;            /* floats in the shard */
    float *params;
    float *dec;          /* a compressed PUSH's decoded gradient */
    int have;            /* params hold a shard (restored or INIT) */
    int all_joined;      /* sync: every worker has been live once, or a restored ps stopped waiting */
    int restored;        /* the shard came from a checkpoint (init) */
    double started;      /* when sl_ps_server_run began */
    int64_t saved_version;
    double last_ckpt;
    wstate *w;
    float *acc;          /* sync: the round's sum */
    void *scratch;       /* aligned copy of a misaligned payload */
    size_t scratch_cap;
    sl_ps_server_stats st;
};

/* ---- create / free ----------------------------------------------------------------- */

sl_status sl_ps_server_create(const char *const *addrs, int nworkers, int ps_index, const sl_ps_plan *plan,
                              const sl_tp_opts *tpo, const sl_ps_server_ops *ops, const sl_ps_server_opts *opts,
                              const float *init, const sl_ps_shard_state *init_state, sl_ps_server **out) {
    *out = NULL;
    if (!addrs || !plan || nworkers < 1 || ps_index < 0 || ps_index >= plan->nps)
        return sl_err(SL_EINVAL, "ps server: ps %d of %d with %d workers is out of range", ps_index,
                      plan ? plan->nps : 0, nworkers);
    if (!ops || !ops->apply) return sl_err(SL_EINVAL, "ps server: ops->apply is required");
    if (init && init_state && (init_state->nworkers != nworkers || (nworkers && !init_state->worker_steps)))
        return sl_err(SL_EINVAL, "ps server: restored state is for %d workers, the cluster has %d",
                      init_state->nworkers, nworkers);
    sl_ps_server *s = calloc(1, sizeof *s);
    if (!s) return sl_err(SL_ENOMEM, "ps server: out of memory");
    sl_status st;
    s->plan = plan;
    s->ops = *ops;
    if (opts) s->opts = *opts;
    if (s->opts.dead_after_s <= 0) s->opts.dead_after_s = 10.0;
    if (s->opts.ckpt_every_s <= 0) s->opts.ckpt_every_s = 5.0;
    s->nw = nworkers;
    s->idx = ps_index;
    s->n = plan->shard_len[ps_index];
    s->params = malloc((s->n ? s->n : 1) * sizeof(float));
    s->w = calloc((size_t)nworkers, sizeof *s->w);
    if (!s->params || !s->w) { st = sl_err(SL_ENOMEM, "ps server: out of memory for a shard of %zu floats", s->n); goto fail; }
    for (int i = 0; i < nworkers; i++) s->w[i].step = -1;
    if (init) {
        memcpy(s->params, init, s->n * sizeof(float));
        s->have = 1;
        s->restored = 1;
        if (init_state) {
            s->st.version = init_state->version;
            for (int i = 0; i < nworkers; i++) s->w[i].step = init_state->worker_steps[i];
        }
    }
    s->saved_version = s->st.version;
    st = sl_tp_create(nworkers + ps_index, nworkers + plan->nps, addrs, tpo, &s->tp);
    if (st) { sl_err_prefix("ps %d: ", ps_index); goto fail; }
    st = sl_tp_connect(s->tp);
    if (st) { sl_err_prefix("ps %d: ", ps_index); goto fail; }
    *out = s;
    return SL_OK;
fail:
    sl_ps_server_free(s);
    return st;
}

void sl_ps_server_free(sl_ps_server *s) {
    if (!s) return;
    sl_tp_destroy(s->tp); /* runs every zero-copy release before the buffers go */
    if (s->w)
        for (int i = 0; i < s->nw; i++) {
            free(s->w[i].grad);
            free(s->w[i].sum_v);
            sl_buf_unref(s->w[i].sum_ans);
        }
    free(s->w);
    free(s->params);
    free(s->dec);
    free(s->acc);
    free(s->scratch);
    free(s);
}

const char *sl_ps_server_endpoint(const sl_ps_server *s) { return sl_tp_endpoint(s->tp); }

void sl_ps_server_get_stats(const sl_ps_server *s, sl_ps_server_stats *out) {
    sl_tp_stats ts;
    sl_tp_get_stats(s->tp, &ts);
    *out = s->st;
    out->dropped += ts.dropped; /* frames the transport refused never reach the server */
}

/* ---- replies ----------------------------------------------------------------------- */

static void reply_pair(sl_ps_server *s, int w, uint64_t seq, uint32_t status, int64_t value, const char *reason,
                       uint32_t have, uint32_t lack) {
    size_t rlen = reason ? strlen(reason) : 0;
    size_t nf = status == SL_PS_OK ? s->n : (rlen + 3) / 4;
    sl_buf *b = sl__ps_buf_new(nf);
    if (!b) {
        SL_WARN("ps %d: out of memory for a reply to worker %d; it will retry", s->idx, w);
        return;
    }
    sl_ps_frame f = {.plan_hash = s->plan->hash, .seq = seq, .value = value, .status = status, .have = have,
                     .lack = lack};
    sl_ps_frame_encode_prefix(&f, b->data);
    if (status == SL_PS_OK) memcpy(sl__ps_buf_body(b), s->params, s->n * sizeof(float));
    else {
        b->size = SL_PS_PREFIX + rlen;
        if (rlen) memcpy(sl__ps_buf_body(b), reason, rlen);
    }
    sl_msg_hdr h = {.type = SL_MSG_REPLY, .dtype = SL_DT_U8, .tensor = (uint32_t)s->idx};
    if (sl__ps_buf_send(s->tp, w, &h, b))
        SL_WARN("ps %d: reply to worker %d failed (%s); it will retry", s->idx, w, sl_errmsg());
    sl_buf_unref(b);
}

static void reply(sl_ps_server *s, int w, uint64_t seq, uint32_t status, int64_t value, const char *reason) {
    reply_pair(s, w, seq, status, value, reason, 0, 0);
}

static int64_t min_live_step(const sl_ps_server *s) {
    int64_t m = INT64_MAX;
    for (int i = 0; i < s->nw; i++)
        if (s->w[i].live && s->w[i].step < m) m = s->w[i].step;
    return m;
}

static int too_far_ahead(const sl_ps_server *s, int w) {
    if (s->opts.staleness < 0) return 0;
    return s->w[w].step > min_live_step(s) + s->opts.staleness;
}

/* Answer a worker's PUSH now, or hold the answer while it is too far ahead. */
static void respond_push(sl_ps_server *s, int w, uint64_t seq) {
    if (too_far_ahead(s, w)) {
        s->w[w].held = 1;
        s->w[w].held_seq = seq;
        return;
    }
    s->w[w].held = 0;
    reply_pair(s, w, seq, SL_PS_OK, s->st.version, NULL, s->w[w].ans_have, s->w[w].ans_lack);
}

static void release_held(sl_ps_server *s) {
    for (int i = 0; i < s->nw; i++)
        if (s->w[i].held && s->w[i].live && !too_far_ahead(s, i)) {
            s->w[i].held = 0;
            reply_pair(s, i, s->w[i].held_seq, SL_PS_OK, s->st.version, NULL, s->w[i].ans_have, s->w[i].ans_lack);
        }
}

static sl_status apply(sl_ps_server *s, const float *grad, float lr) {
    sl_status st = s->ops.apply(s->ops.ctx, s->params, grad, s->n, lr);
    if (st) {
        sl_err_prefix("ps %d: apply (version %lld): ", s->idx, (long long)s->st.version);
        return st;
    }
    s->st.version++;
    s->st.applied++;
    return SL_OK;
}

/* Sync: the SUMs with the tag and count of the lowest-numbered worker that sent one are added
 * (64-bit, clamped to int32) and answered; the workers not in it are named in the answer. */
static sl_status sum_round(sl_ps_server *s, int lo) {
    uint32_t tag = s->w[lo].sum_tag;
    size_t n = s->w[lo].sum_n, nw = (size_t)s->nw;
    int64_t *acc = calloc(n, sizeof *acc);
    if (!acc) return sl_err(SL_ENOMEM, "ps %d: out of memory for a sum of %zu counts", s->idx, n);
    for (int i = lo; i < s->nw; i++) {
        wstate *ws = &s->w[i];
        ws->in_round = ws->sum_pending && ws->sum_tag == tag && ws->sum_n == n;
        if (ws->in_round)
            for (size_t k = 0; k < n; k++) acc[k] += ws->sum_v[k];
    }
    for (int i = 0; i < lo; i++) s->w[i].in_round = 0;
    for (int i = lo; i < s->nw; i++) {
        wstate *ws = &s->w[i];
        if (!ws->in_round) continue;
        ws->sum_pending = 0;
        sl_buf_unref(ws->sum_ans);
        ws->sum_ans = sl__ps_buf_new(n + nw);
        if (!ws->sum_ans) {
            free(acc);
            return sl_err(SL_ENOMEM, "ps %d: out of memory for a sum answer of %zu counts to worker %d", s->idx, n, i);
        }
        ws->sum_ans_seq = ws->sum_seq;
        sl_ps_frame f = {.plan_hash = s->plan->hash, .seq = ws->sum_seq, .value = tag, .status = SL_PS_SUMS};
        sl_ps_frame_encode_prefix(&f, ws->sum_ans->data);
        int32_t *out = (int32_t *)(void *)(sl__ps_buf_body(ws->sum_ans));
        for (size_t k = 0; k < n; k++)
            out[k] = acc[k] > INT32_MAX ? INT32_MAX : acc[k] < INT32_MIN ? INT32_MIN : (int32_t)acc[k];
        for (int j = 0; j < s->nw; j++) out[n + (size_t)j] = s->w[j].in_round;
        sl_msg_hdr h = {.type = SL_MSG_REPLY, .dtype = SL_DT_U8, .tensor = (uint32_t)s->idx};
        if (sl__ps_buf_send(s->tp, i, &h, ws->sum_ans))
            SL_WARN("ps %d: sum answer to worker %d failed (%s); it will retry", s->idx, i, sl_errmsg());
    }
    free(acc);
    return SL_OK;
}

/* Sync: once every live worker has a request waiting, a sum round (when any waits in one),
 * else a step round: the mean of the gradients applied once, every worker answered with
 * the round's has-data counts. */
static sl_status try_round(sl_ps_server *s) {
    if (!s->opts.sync) return SL_OK;
    /* the first round waits for every worker (a restored ps: see stop_waiting): a worker
     * that joins late would otherwise find the others in rounds it was not counted in (at
     * one ps and not at another: a SUM on ps 0 then waits for a worker stuck in a step round
     * on ps 1), and a resumed one the shard past the step it resumes from */
    for (int i = 0; i < s->nw && !s->all_joined; i++)
        if (!s->w[i].joined) return SL_OK;
    s->all_joined = 1;
    int npend = 0, first = -1, sfirst = -1;
    for (int i = 0; i < s->nw; i++) {
        if (s->w[i].live && !s->w[i].pending && !s->w[i].sum_pending) return SL_OK;
        if (s->w[i].sum_pending && sfirst < 0) sfirst = i;
        if (s->w[i].pending) {
            npend++;
            if (first < 0) first = i;
        }
    }
    if (sfirst >= 0) {
        sl_status st = sum_round(s, sfirst);
        /* the workers answered are not waiting now: no other round can form yet */
        return st;
    }
    if (!npend) return SL_OK;
    if (!s->acc && !(s->acc = malloc((s->n ? s->n : 1) * sizeof(float))))
        return sl_err(SL_ENOMEM, "ps %d: out of memory for a sync round of %zu floats", s->idx, s->n);
    memcpy(s->acc, s->w[first].grad, s->n * sizeof(float));
    for (int i = first + 1; i < s->nw; i++)
        if (s->w[i].pending)
            for (size_t k = 0; k < s->n; k++) s->acc[k] += s->w[i].grad[k];
    if (npend > 1)
        for (size_t k = 0; k < s->n; k++) s->acc[k] /= (float)npend;
    sl_status st = apply(s, s->acc, s->w[first].pend_lr);
    if (st) return st;
    uint32_t have = 0, lack = 0;
    for (int i = 0; i < s->nw; i++)
        if (s->w[i].pending) {
            have += s->w[i].pend_have;
            lack += s->w[i].pend_lack;
        }
    for (int i = 0; i < s->nw; i++) {
        s->w[i].in_round = s->w[i].pending;
        if (s->w[i].pending) {
            s->w[i].pending = 0;
            s->w[i].step = s->w[i].pend_step;
            s->w[i].ans_have = have;
            s->w[i].ans_lack = lack;
        }
    }
    for (int i = 0; i < s->nw; i++)
        if (s->w[i].in_round) respond_push(s, i, s->w[i].pend_seq);
    release_held(s);
    return SL_OK;
}

/* Sync, a restored ps: dead_after_s after the start, the workers that never came back are
 * left out (a worker that died before the restart may never return); the rounds go on. */
static sl_status stop_waiting(sl_ps_server *s, double now) {
    if (!s->opts.sync || s->all_joined || !s->restored || now - s->started < s->opts.dead_after_s) return SL_OK;
    char missing[256] = "";
    size_t len = 0;
    for (int i = 0; i < s->nw && len < sizeof missing; i++)
        if (!s->w[i].joined) len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d", len ? ", " : "", i);
    s->all_joined = 1;
    SL_WARN("ps %d: worker(s) %s did not come back within %.1f s of the restore (version %lld): the rounds go on "
            "without them", s->idx, missing, s->opts.dead_after_s, (long long)s->st.version);
    return try_round(s);
}

/* A worker leaves the live set: its held reply and pending gradient go with it. */
static sl_status worker_gone(sl_ps_server *s, int w, const char *why) {
    wstate *ws = &s->w[w];
    if (!ws->live) return SL_OK;
    ws->live = 0;
    ws->held = 0;
    ws->pending = 0;
    ws->sum_pending = 0;
    SL_INFO("ps %d: worker %d %s (last step %lld)", s->idx, w, why, (long long)ws->step);
    sl_status st = try_round(s);
    release_held(s);
    return st;
}

static sl_status check_liveness(sl_ps_server *s, double now) {
    for (int i = 0; i < s->nw; i++) {
        wstate *ws = &s->w[i];
        int lost = sl_tp_peer_lost(s->tp, i);
        int edge = lost && !ws->lost_prev;
        ws->lost_prev = lost;
        if (!ws->live) {
            /* never joined: waited for until dead_after_s after this ps's start, and given
             * up only once the chief is done (until then it changes no round or rate) */
            if (i > 0 && !ws->joined && !ws->dead && !ws->bye && s->w[0].bye &&
                now - s->started >= s->opts.dead_after_s) {
                ws->dead = 1;
                SL_WARN("ps %d: worker %d never joined within %.1f s of this ps's start; the chief said BYE, so the "
                        "ps ends without it", s->idx, i, s->opts.dead_after_s);
            }
            continue;
        }
        sl_status st = SL_OK;
        if (edge || now - ws->seen > s->opts.dead_after_s) {
            ws->dead = 1;
            st = worker_gone(s, i, edge ? "is dead: its connection closed" : "is dead: silent too long");
        }
        if (st) return st;
    }
    return SL_OK;
}

static sl_status save(sl_ps_server *s);

/* ---- requests ---------------------------------------------------------------------- */

static void drop(sl_ps_server *s, int w, const char *why) {
    s->st.dropped++;
    SL_DEBUG("ps %d: dropped a frame from rank %d: %s", s->idx, w, why);
}

static sl_status on_push(sl_ps_server *s, int w, const sl_ps_frame *f) {
    wstate *ws = &s->w[w];
    s->st.pushes++;
    if (!s->have) {
        reply(s, w, f->seq, SL_PS_UNINIT, s->st.version, NULL);
        return SL_OK;
    }
    if (ws->have_seq && ws->seq == f->seq) { /* a retry of the last request */
        if (!ws->held && !(ws->pending && ws->pend_seq == f->seq)) respond_push(s, w, f->seq);
        return SL_OK;
    }
    /* a compressed gradient is validated before the push counts (a refused one is not taken
     * as applied when the worker retries it) */
    const float *grad = f->data;
    if (f->codec && f->value > ws->step) {
        char why[600], nm[32], got[32];
        sl_compress_spec gs = {(sl_compress_kind)f->codec, 0};
        if (f->codec != (uint32_t)s->opts.compress.kind) {
            snprintf(why, sizeof why, "ps %d: worker %d's push for step %lld is compressed with %s; this ps takes %s",
                     s->idx, w, (long long)f->value, sl_compress_name(&gs, got, sizeof got),
                     s->opts.compress.kind ? sl_compress_name(&s->opts.compress, nm, sizeof nm) : "float32 only");
            s->st.rejected++;
            SL_WARN("%s", why);
            reply(s, w, f->seq, SL_PS_REJECT, 0, why);
            return SL_OK;
        }
        if (!s->dec && !(s->dec = malloc((s->n ? s->n : 1) * sizeof(float))))
            return sl_err(SL_ENOMEM, "ps %d: out of memory for a decoded gradient", s->idx);
        memset(s->dec, 0, s->n * sizeof(float));
        char who[96];
        snprintf(who, sizeof who, "ps %d: worker %d, step %lld", s->idx, w, (long long)f->value);
        if (sl_compress_decode_add(&s->opts.compress, f->comp, f->comp_len, s->n, s->dec, who)) {
            snprintf(why, sizeof why, "%s", sl_errmsg());
            s->st.dropped++;
            SL_WARN("%s", why);
            reply(s, w, f->seq, SL_PS_REJECT, 0, why);
            return SL_OK;
        }
        grad = s->dec;
    }
    ws->have_seq = 1;
    ws->seq = f->seq;
    ws->held = 0;
    ws->sum_pending = 0;
    ws->ans_have = ws->ans_lack = 0; /* the counts of this push's round, once there is one */
    if (f->value <= ws->step) { /* already applied (a retry across a ps restart) */
        respond_push(s, w, f->seq);
        return SL_OK;
    }
    if (s->opts.sync) {
        if (!ws->grad && !(ws->grad = malloc((s->n ? s->n : 1) * sizeof(float))))
            return sl_err(SL_ENOMEM, "ps %d: out of memory for worker %d's gradient", s->idx, w);
        memcpy(ws->grad, grad, s->n * sizeof(float));
        ws->pending = 1;
        ws->pend_seq = f->seq;
        ws->pend_step = f->value;
        ws->pend_lr = f->lr;
        ws->pend_have = f->have;
        ws->pend_lack = f->lack;
        return try_round(s);
    }
    /* one push from each worker makes one step of the global batch; the dead leave their
     * share to the others (see ps.h) */
    int nalive = s->nw;
    for (int i = 0; i < s->nw; i++) nalive -= s->w[i].dead != 0;
    sl_status st = apply(s, grad, f->lr / (float)(nalive > 0 ? nalive : 1));
    if (st) return st;
    ws->step = f->value;
    respond_push(s, w, f->seq);
    release_held(s);
    return SL_OK;
}

/* Sync mode: a worker's counts wait for the sum round (ps.h). */
static sl_status on_sum(sl_ps_server *s, int w, const sl_ps_frame *f) {
    wstate *ws = &s->w[w];
    if (!s->opts.sync) {
        char why[160];
        snprintf(why, sizeof why, "ps %d runs async rounds: a SUM needs `strategy ps mode=sync` on the ps tasks too",
                 s->idx);
        reply(s, w, f->seq, SL_PS_REJECT, 0, why);
        return SL_OK;
    }
    if (ws->have_seq && ws->seq == f->seq) { /* a retry */
        if (!ws->sum_pending && ws->sum_ans && ws->sum_ans_seq == f->seq) {
            sl_msg_hdr h = {.type = SL_MSG_REPLY, .dtype = SL_DT_U8, .tensor = (uint32_t)s->idx};
            if (sl__ps_buf_send(s->tp, w, &h, ws->sum_ans))
                SL_WARN("ps %d: sum answer to worker %d failed (%s); it will retry", s->idx, w, sl_errmsg());
        }
        return SL_OK;
    }
    if (f->n > ws->sum_cap) {
        int32_t *v = realloc(ws->sum_v, f->n * sizeof *v);
        if (!v) return sl_err(SL_ENOMEM, "ps %d: out of memory for worker %d's %zu counts", s->idx, w, f->n);
        ws->sum_v = v;
        ws->sum_cap = f->n;
    }
    memcpy(ws->sum_v, f->sums, f->n * sizeof *ws->sum_v);
    ws->have_seq = 1;
    ws->seq = f->seq;
    ws->held = 0;
    ws->pending = 0;
    ws->sum_pending = 1;
    ws->sum_seq = f->seq;
    ws->sum_tag = (uint32_t)f->value;
    ws->sum_n = f->n;
    return try_round(s);
}

static sl_status handle(sl_ps_server *s, const sl_msg_hdr *h, const void *data, size_t len) {
    int w = (int)h->sender;
    if (w >= s->nw) { drop(s, w, "not a worker"); return SL_OK; }
    sl_ps_frame f;
    if (!(data = sl__ps_aligned(data, len, &s->scratch, &s->scratch_cap))) {
        drop(s, w, "out of memory for an aligned copy");
        return SL_OK;
    }
    if (sl_ps_frame_decode(h, data, len, 0, 0, &f)) { drop(s, w, sl_errmsg()); return SL_OK; }
    if (f.type == SL_MSG_REPLY) { drop(s, w, "a REPLY sent to a server"); return SL_OK; }
    if (f.ps != s->idx) { drop(s, w, "frame for another ps"); return SL_OK; }
    if (f.plan_hash != s->plan->hash) {
        char why[160];
        snprintf(why, sizeof why, "ps %d: plan hash 0x%08x differs from this ps's 0x%08x (another model or ps count)",
                 s->idx, f.plan_hash, s->plan->hash);
        s->st.rejected++;
        SL_WARN("rejected worker %d: %s", w, why);
        if (f.type != SL_MSG_BYE && f.type != SL_MSG_HEARTBEAT) reply(s, w, f.seq, SL_PS_REJECT, 0, why);
        return SL_OK;
    }
    if ((f.type == SL_MSG_PUSH || f.type == SL_MSG_INIT) && f.n != s->n && !(f.type == SL_MSG_PUSH && f.codec)) {
        drop(s, w, "wrong shard length");
        return SL_OK;
    }
    wstate *ws = &s->w[w];
    ws->seen = sl_now_s();
    if (f.type == SL_MSG_BYE) {
        sl_status st = worker_gone(s, w, "said BYE");
        ws->bye = 1;
        return st;
    }
    if (!ws->live) {
        ws->live = 1;
        ws->joined = 1;
        ws->bye = 0;
        ws->dead = 0;
        SL_INFO("ps %d: worker %d is live (last step %lld)", s->idx, w, (long long)ws->step);
    }
    switch (f.type) {
    case SL_MSG_HEARTBEAT:
        return SL_OK;
    case SL_MSG_HELLO: /* a (re)started worker: forget its previous life's requests */
        ws->have_seq = 0;
        ws->held = 0;
        ws->pending = 0;
        ws->sum_pending = 0;
        sl_buf_unref(ws->sum_ans);
        ws->sum_ans = NULL;
        reply(s, w, f.seq, s->have ? SL_PS_OK : SL_PS_UNINIT, ws->step, NULL);
        return try_round(s);
    case SL_MSG_INIT:
        if (!s->have) {
            memcpy(s->params, f.data, s->n * sizeof(float));
            s->have = 1;
            SL_INFO("ps %d: initialised by worker %d", s->idx, w);
            /* saved before the reply: once any worker is past its join, a restarted ps has a
             * shard to restore and never answers UNINIT to a worker mid-run */
            save(s);
        }
        reply(s, w, f.seq, SL_PS_OK, s->st.version, NULL);
        return SL_OK;
    case SL_MSG_PULL:
        s->st.pulls++;
        reply(s, w, f.seq, s->have ? SL_PS_OK : SL_PS_UNINIT, s->st.version, NULL);
        return SL_OK;
    case SL_MSG_SUM:
        return on_sum(s, w, &f);
    default:
        return on_push(s, w, &f);
    }
}

/* ---- loop -------------------------------------------------------------------------- */

/* A failed save is logged and the server goes on (a full disk may clear before the next);
 * the status is for the last save, whose failure is the server's (ps.h). */
static sl_status save(sl_ps_server *s) {
    if (!s->ops.save || !s->have) return SL_OK;
    int64_t *steps = malloc((size_t)s->nw * sizeof *steps);
    if (!steps) {
        SL_ERROR("ps %d: checkpoint skipped: out of memory", s->idx);
        return sl_err(SL_ENOMEM, "ps %d: checkpoint of version %lld skipped: out of memory", s->idx,
                      (long long)s->st.version);
    }
    for (int i = 0; i < s->nw; i++) steps[i] = s->w[i].step;
    sl_ps_shard_state st = {.version = s->st.version, .worker_steps = steps, .nworkers = s->nw};
    sl_status r = s->ops.save(s->ops.ctx, s->params, s->n, &st);
    if (r) {
        sl_error e;
        sl_err_save(&e);
        SL_ERROR("ps %d: checkpoint of version %lld failed: %s", s->idx, (long long)s->st.version, e.msg);
        sl_err_restore(&e);
    } else {
        s->saved_version = s->st.version;
    }
    free(steps);
    return r;
}

/* The chief said BYE and every other worker said BYE or is dead (ps.h). A worker that has
 * not joined yet is neither: it is on its way (it started late on a loaded machine, and an
 * async chief finished first) until check_liveness gives it up. Ending at the chief's BYE
 * regardless left such a worker's join unanswered until its retry_s ran out, and its shard
 * of the data untrained. */
static int finished(const sl_ps_server *s) {
    if (!s->w[0].bye) return 0;
    for (int i = 1; i < s->nw; i++) {
        const wstate *ws = &s->w[i];
        if (ws->live || (!ws->joined && !ws->dead && !ws->bye)) return 0;
    }
    return 1;
}

sl_status sl_ps_server_run(sl_ps_server *s) {
    s->last_ckpt = s->started = sl_now_s();
    for (;;) {
        /* atomic read: the flag is set by another thread or a signal handler */
        if (s->opts.stop && __atomic_load_n(s->opts.stop, __ATOMIC_RELAXED)) {
            save(s);
            return sl_err(SL_ECANCELED, "ps %d: stopped", s->idx);
        }
        if (finished(s)) return save(s);
        sl_msg_hdr h;
        const void *data;
        size_t len;
        sl_status st = sl_tp_recv(s->tp, -1, TICK_S, &h, &data, &len);
        if (st == SL_OK) {
            st = handle(s, &h, data, len);
            if (st) {
                save(s);
                return st;
            }
        } else if (st == SL_EPEER) {
            SL_WARN("ps %d: %s", s->idx, sl_errmsg()); /* a peer's ABORT: the ps serves on */
        } else if (st != SL_ETIMEDOUT) {
            sl_err_prefix("ps %d: ", s->idx);
            return st;
        }
        double now = sl_now_s();
        st = check_liveness(s, now);
        if (!st) st = stop_waiting(s, now);
        if (st) {
            save(s);
            return st;
        }
        if (now - s->last_ckpt >= s->opts.ckpt_every_s) {
            s->last_ckpt = now;
            if (s->st.version != s->saved_version) save(s);
        }
    }
}
