/* The ring strategy (sluice/strategy.h): the trainer's hooks over one sl_tp + sl_ring. Its
 * replicas run in lockstep epochs (train/strategy_agree.c): the has-data flag rides on
 * the gradient allreduce, and the per-epoch agreements are a small int32 allsum.
 *
 * Workload: one allreduce of the whole flat gradient per step (0.1-100 MiB), one broadcast
 * of parameters and optimizer state at the start, one barrier at the end; 2-64 replicas.
 * The CPU backend's gradient is host memory, so it is reduced in place with no copy; other
 * backends stage it through one host buffer allocated at start. With bucket_bytes the
 * gradient's allreduce runs bucket by bucket on an exchange thread during backward
 * (sluice/strategy.h, "Bucketed overlap"). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sluice/file.h"
#include "sluice/strategy.h"
#include "train/buckets.h"
#include "train/internal.h"

/* Tensor ids of the start-up messages: far above any step number a run reaches, so they
 * never collide with the per-step gradient ids (the step, truncated to 32 bits). */
enum {
    TID_HEADER = 0xfff00001u,
    TID_PARAMS = 0xfff00002u,
    TID_OPTIM = 0xfff00003u,
    TID_STATS = 0xfff00004u,
    TID_ALLSUM = 0xfff10000u, /* | the lockstep rules' tag (< 0x10000) */
};

struct sl_strategy_ring {
    sl_tp *tp;
    sl_ring *ring;
    int rank, world;
    FILE *hash_log;
    char *hash_log_name; /* for messages */
    float *host;        /* staging for non-CPU backends and hashing; n_host floats */
    size_t n_host;
    int64_t last_step;  /* the last exchanged step, -1 before the first */
    sl_model *model;    /* from start (borrowed), for the final hash */
    sl_compress_spec cs; /* compress=...; kind none: float32 (or ring.fp16) allreduce */
    sl_compress_ef *ef; /* this replica's residual, created at the first compressed exchange */
    size_t ef_n;        /* the gradient's length (ef's count) */
    sl_optim_spec optim; /* the train block's optimizer */
    bool dgc;           /* top-k with sgd momentum: momentum corrected locally (see strategy.h) */
    float *u, *sent, *phost; /* dgc: the local velocity, this step's sent values, staged params */
    /* bucketed overlap (bucket_bytes > 0): the plan, and the exchange thread's queue */
    size_t bucket_bytes;
    sl__bucket *plan;   /* nplan buckets over [0, plan_n), backward order */
    int nplan;
    size_t plan_n;      /* the trainable floats: [plan_n, n] is exchange's tail */
    size_t total;       /* the allreduce's count: n + 1 (the has-data flag's float) */
    float *xbuf;        /* what the buckets reduce: the model's gradient (CPU) or xpinned */
    float *xpinned;     /* non-CPU: pinned host copy of the gradient (total floats) */
    sl_backend *bk;     /* the model's backend (borrowed) */
    float *dgrads;      /* the model's gradient (backend memory) */
    int64_t step_next;  /* the step the next backward belongs to */
    bool th_started;
    pthread_t th;
    pthread_mutex_t mu; /* guards what follows */
    pthread_cond_t cv;
    int nsub, ndone;    /* buckets handed to the exchange thread this step / finished by it */
    uint32_t tensor;    /* this step's tensor id */
    bool quit, cancel;  /* the thread ends; queued buckets are skipped (the run failed) */
    sl_status xst;      /* the first failed bucket's error (xerr), SL_OK when none */
    sl_error xerr;
    int xbad;           /* which bucket failed */
    int used;           /* buckets in use since start (0: unbucketed) */
    uint64_t reduced;   /* bucket allreduces completed */
    sl__agree agree;    /* the epochs' rules, over ring_step and ring_allsum */
};

/* FNV-1a 64 over bytes: cheap, and any flipped bit changes it. */
static uint64_t fnv1a(const void *p, size_t n) { return sl_fnv1a64(SL_FNV64_INIT, p, n); }

static bool on_cpu(sl_model *m) { return strcmp(sl_model_backend_name(m), "cpu") == 0; }

static sl_status ensure_host(sl_strategy_ring *s, size_t n) {
    if (s->n_host >= n) return SL_OK;
    float *p = realloc(s->host, (n ? n : 1) * sizeof *p);
    if (!p) return sl_err(SL_ENOMEM, "ring strategy: out of memory for a %zu-float host buffer", n);
    s->host = p;
    s->n_host = n;
    return SL_OK;
}

static sl_status log_hash(sl_strategy_ring *s, sl_model *m, int64_t step) {
    if (!s->hash_log) return SL_OK;
    size_t n;
    float *p = sl_model_params(m, &n);
    if (!on_cpu(m)) {
        sl_status st = ensure_host(s, n);
        if (st || (st = sl_model_get_params(m, s->host, n))) return st;
        p = s->host;
    }
    /* a log cut short would prove nothing: a failed write fails the step */
    errno = 0;
    if (fprintf(s->hash_log, "step %" PRId64 " params %016" PRIx64 "\n", step, fnv1a(p, n * sizeof *p)) < 0 ||
        fflush(s->hash_log) != 0) {
        int e = errno;
        struct stat sb; /* stdio hands whole buffers to write(2): the size is how far it got */
        uint64_t at = fstat(fileno(s->hash_log), &sb) == 0 ? (uint64_t)sb.st_size : 0;
        return sl_file_write_error(s->hash_log_name ? s->hash_log_name : "hash log", NULL, at, e);
    }
    return SL_OK;
}

/* ---- bucketed overlap ----------------------------------------------------------------- */

/* The exchange thread: allreduces the buckets handed to it, in order. It owns the ring's
 * sockets from the moment a bucket is queued until the caller has seen ndone == nsub. */
static void *exchange_thread(void *arg) {
    sl_strategy_ring *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->quit && s->ndone == s->nsub) pthread_cond_wait(&s->cv, &s->mu);
        if (s->quit) break;
        int k = s->ndone;
        bool skip = s->xst != SL_OK || s->cancel;
        uint32_t tensor = s->tensor;
        pthread_mutex_unlock(&s->mu);
        sl_status st = SL_OK;
        sl_error e;
        if (!skip) {
            st = sl__be_grads_out_wait(s->bk, k);
            if (!st)
                st = sl_ring_allreduce_range(s->ring, s->xbuf, s->total, s->plan[k].lo, s->plan[k].hi, SL_DT_F32,
                                             SL_REDUCE_AVG, tensor);
            if (st) sl_err_save(&e);
        }
        pthread_mutex_lock(&s->mu);
        if (st && !s->xst) {
            s->xst = st;
            s->xerr = e;
            s->xbad = k;
        }
        if (!skip && !st) s->reduced++;
        s->ndone++;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* The model's grads-ready callback (training thread, inside backward): hand every bucket
 * whose layers are all done to the exchange thread. */
static sl_status grads_ready(void *ctx, size_t lo) {
    sl_strategy_ring *s = ctx;
    int k;
    pthread_mutex_lock(&s->mu);
    k = s->nsub;
    pthread_mutex_unlock(&s->mu);
    for (; k < s->nplan && lo <= s->plan[k].lo; k++) {
        const sl__bucket *b = &s->plan[k];
        sl_status st = sl__be_grads_out_start(s->bk, k, s->xbuf + b->lo, s->dgrads + b->lo,
                                                   (b->hi - b->lo) * sizeof(float));
        if (st) return st;
        pthread_mutex_lock(&s->mu);
        if (k == 0) s->tensor = (uint32_t)s->step_next;
        s->nsub = k + 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    return SL_OK;
}

/* Wait until the exchange thread has finished every bucket handed to it this step (with
 * cancel: skips those not started), then reset the queue. Returns the first bucket error
 * (as the calling thread's error), SL_OK when none; *issued: how many were handed over. */
static sl_status buckets_wait(sl_strategy_ring *s, bool cancel, int *issued) {
    pthread_mutex_lock(&s->mu);
    if (cancel) s->cancel = true;
    while (s->ndone < s->nsub) pthread_cond_wait(&s->cv, &s->mu);
    sl_status st = s->xst;
    sl_error e = s->xerr;
    int bad = s->xbad;
    if (issued) *issued = s->nsub;
    s->nsub = s->ndone = 0;
    s->xst = SL_OK;
    pthread_mutex_unlock(&s->mu);
    if (st) {
        sl_err_restore(&e);
        sl_err_prefix("bucket %d of %d (floats %zu..%zu): ", bad + 1, s->nplan, s->plan[bad].lo, s->plan[bad].hi);
    }
    return st;
}

/* End the exchange thread. live: the model still exists (finish), so its callback is
 * cleared and the pinned buffer freed; otherwise (sl_strategy_ring_free without finish)
 * the model may be gone: neither is touched (the pinned buffer is left). */
static void buckets_stop(sl_strategy_ring *s, bool live) {
    if (!s->th_started) return;
    pthread_mutex_lock(&s->mu);
    s->cancel = s->quit = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    s->th_started = false;
    if (!live) return;
    if (s->model) sl__model_on_grads_ready(s->model, NULL, NULL);
    if (s->xpinned) sl__be_host_free(s->bk, s->xpinned);
    s->xpinned = NULL;
}

static sl_status buckets_start(sl_strategy_ring *s, sl_model *m) {
    if (s->th_started) return SL_OK;
    size_t n;
    s->dgrads = sl_model_grads(m, &n);
    s->bk = sl__model_backend(m);
    s->plan_n = sl__model_trainable(m);
    s->total = n + SL__GRADS_SPARE;
    int nl = sl__model_grad_layers(m, NULL, 0);
    size_t *lo = malloc((size_t)(nl > 0 ? nl : 1) * sizeof *lo);
    free(s->plan);
    s->plan = malloc((size_t)(nl > 0 ? nl : 1) * sizeof *s->plan);
    if (!lo || !s->plan) {
        free(lo);
        return sl_err(SL_ENOMEM, "ring strategy: out of memory for the bucket plan");
    }
    sl__model_grad_layers(m, lo, nl);
    s->nplan = sl__bucket_plan(lo, nl, s->plan_n, s->bucket_bytes / sizeof(float), s->plan);
    free(lo);
    if (s->nplan < 0) return sl_err(SL_EINVAL, "ring strategy: the model's gradient layout cannot be cut into buckets");
    if (s->nplan < 2) return SL_OK; /* one bucket is ready when backward ends: nothing to overlap */
    sl_status st;
    if ((st = sl__be_grads_out_reserve(s->bk, s->nplan))) return st;
    if (on_cpu(m)) {
        s->xbuf = s->dgrads;
    } else {
        if ((st = sl__be_host_alloc(s->bk, s->total * sizeof(float), (void **)&s->xpinned))) return st;
        s->xbuf = s->xpinned;
    }
    s->nsub = s->ndone = 0;
    s->xst = SL_OK;
    s->quit = s->cancel = false;
    if (pthread_create(&s->th, NULL, exchange_thread, s) != 0) {
        if (s->xpinned) sl__be_host_free(s->bk, s->xpinned);
        s->xpinned = NULL;
        return sl_err(SL_EIO, "ring strategy: cannot start the exchange thread");
    }
    s->th_started = true;
    s->used = s->nplan;
    sl__model_on_grads_ready(m, grads_ready, s);
    return SL_OK;
}

int sl_strategy_ring_buckets(sl_strategy_ring *s, uint64_t *reduced) {
    pthread_mutex_lock(&s->mu);
    int n = s->used;
    if (reduced) *reduced = s->reduced;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static sl_status ring_start(void *ctx, sl_model *m, sl_optim *o, int64_t *stepp) {
    int64_t step = *stepp;
    sl_strategy_ring *s = ctx;
    size_t np, no;
    int64_t ostep;
    sl_model_params(m, &np);
    sl_optim_state(o, &no, &ostep);
    /* step, model steps (dropout masks), optimizer step, sizes: the replicas must agree on
     * where the run stands, or their data positions differ */
    int64_t hdr[5] = {step, (int64_t)sl__model_steps(m), ostep, (int64_t)np, (int64_t)no};
    int64_t mine[5];
    memcpy(mine, hdr, sizeof hdr);
    sl_status st = sl_ring_broadcast(s->ring, hdr, sizeof hdr, 0, TID_HEADER);
    if (st) {
        sl_err_prefix("ring strategy: start (waiting for the replicas): ");
        return st;
    }
    if (hdr[3] != mine[3] || hdr[4] != mine[4])
        return sl_err(SL_EINVAL,
                      "ring strategy: rank %d has %" PRId64 " parameters and %" PRId64
                      " optimizer floats, rank 0 %" PRId64 " and %" PRId64 ": the replicas run different configs",
                      s->rank, mine[3], mine[4], hdr[3], hdr[4]);
    if (hdr[0] != mine[0]) {
        sl_err(SL_EINVAL, "ring strategy: rank %d would start at step %" PRId64 " but rank 0 at step %" PRId64, s->rank,
               mine[0], hdr[0]);
        sl_err_hint("with --resume every replica must see rank 0's checkpoint: give them the same run folder");
        return SL_EINVAL;
    }
    if ((st = ensure_host(s, np > no ? np : no))) return st;
    if ((st = sl_model_get_params(m, s->host, np)) ||
        (st = sl_ring_broadcast(s->ring, s->host, np * sizeof(float), 0, TID_PARAMS)) ||
        (st = sl_model_set_params(m, s->host, np)))
        goto fail;
    if (no > 0) {
        if ((st = sl_optim_get_state(o, s->host, no)) ||
            (st = sl_ring_broadcast(s->ring, s->host, no * sizeof(float), 0, TID_OPTIM)))
            goto fail;
    }
    if ((st = sl_optim_set_state(o, s->host, no, hdr[2]))) goto fail;
    sl__model_set_steps(m, (uint64_t)hdr[1]);
    s->last_step = -1;
    s->model = m;
    s->step_next = hdr[0];
    if (s->bucket_bytes && s->cs.kind == SL_COMPRESS_NONE && (st = buckets_start(s, m))) goto fail;
    return SL_OK;
fail:
    sl_err_prefix("ring strategy: start: ");
    return st;
}

static sl_status ensure_ef(sl_strategy_ring *s, size_t n) {
    if (s->ef && s->ef_n == n) return SL_OK;
    if (s->ef)
        return sl_err(SL_EINVAL, "ring strategy: the gradient had %zu values and now %zu (compression keeps a residual "
                                 "per value)", s->ef_n, n);
    if (s->dgc && (!(s->u = calloc(n ? n : 1, sizeof *s->u)) || !(s->sent = malloc((n ? n : 1) * sizeof *s->sent))))
        return sl_err(SL_ENOMEM, "ring strategy: out of memory for the momentum of %zu values", n);
    sl_status st = sl_compress_ef_create(&s->cs, n, &s->ef);
    if (!st) s->ef_n = n;
    return st;
}

static uint64_t ring_wire_bytes(void *ctx) {
    sl_strategy_ring *s = ctx;
    if (!s->tp) return 0;
    sl_tp_stats ts;
    sl_tp_get_stats(s->tp, &ts);
    return ts.sent_bytes + sl_ring_shm_bytes(s->ring); /* shared memory: what it wrote for the peers */
}

/* The residual's codec, as its sidecar names it: without the warm-up (the residual holds
 * what was not sent, whatever fraction each step kept; a run may resume with another). */
static void codec_name(const sl_strategy_ring *s, char *buf, size_t n) {
    char c[48];
    sl_compress_spec cs = s->cs;
    cs.warmup = 0;
    snprintf(buf, n, "%s%s", sl_compress_name(&cs, c, sizeof c), s->dgc ? "+momentum" : "");
}

/* The residual goes into a per-replica sidecar of the checkpoint (sluice/strategy.h). */
static sl_status ring_save_state(void *ctx, const char *run_dir, int64_t step, int keep) {
    sl_strategy_ring *s = ctx;
    if (s->cs.kind == SL_COMPRESS_NONE) return SL_OK;
    size_t ng = 0;
    if (s->model) sl_model_grads(s->model, &ng);
    sl_status st = ensure_ef(s, s->ef ? s->ef_n : ng);
    if (st) return st;
    char codec[48];
    size_t n;
    const double *r = sl_compress_ef_residual(s->ef, &n);
    codec_name(s, codec, sizeof codec);
    double *all = (double *)r;
    if (s->dgc) { /* the residual, then the velocity */
        if (!(all = malloc(2 * (n ? n : 1) * sizeof *all))) return sl_err(SL_ENOMEM, "ring strategy: out of memory");
        memcpy(all, r, n * sizeof *r);
        for (size_t i = 0; i < n; i++) all[n + i] = s->u[i];
    }
    st = sl_train_save_residual(run_dir, s->rank, step, codec, all, s->dgc ? 2 * n : n, keep);
    if (all != r) free(all);
    if (st) sl_err_prefix("ring strategy: rank %d: saving the compression residual: ", s->rank);
    return st;
}

static sl_status ring_load_state(void *ctx, const char *run_dir, int64_t step) {
    sl_strategy_ring *s = ctx;
    if (s->cs.kind == SL_COMPRESS_NONE || !s->model) return SL_OK;
    size_t ng;
    sl_model_grads(s->model, &ng);
    sl_status st = ensure_ef(s, ng);
    if (st) return st;
    char codec[48];
    size_t n;
    double *r = sl_compress_ef_residual(s->ef, &n);
    codec_name(s, codec, sizeof codec);
    double *all = r;
    if (s->dgc && !(all = malloc(2 * (n ? n : 1) * sizeof *all))) return sl_err(SL_ENOMEM, "ring strategy: out of memory");
    st = sl_train_load_residual(run_dir, s->rank, step, codec, all, s->dgc ? 2 * n : n);
    if (!st && all != r) {
        memcpy(r, all, n * sizeof *r);
        for (size_t i = 0; i < n; i++) s->u[i] = (float)all[n + i];
    }
    if (all != r) free(all);
    if (st == SL_ENOTFOUND) {
        fprintf(stderr, "warning: ring strategy: rank %d: %s: starting compress=%s from a zero residual\n", s->rank,
                sl_errmsg(), codec);
        return SL_OK;
    }
    if (st) sl_err_prefix("ring strategy: rank %d: --resume: ", s->rank);
    return st;
}

/* The compressed exchange of buf[0..n) (host memory; sl_ring_allreduce_compressed), with
 * the has-data flag riding in the payloads as an int32 (*more), and Deep Gradient
 * Compression's momentum correction (the update applied here: *applied). */
static sl_status exchange_compressed(sl_strategy_ring *s, sl_model *m, float *buf, size_t n, int64_t step, float lr,
                                     bool *applied, int *more) {
    bool cpu = on_cpu(m);
    sl_backend *bk = sl__model_backend(m);
    sl_status st;
    /* compressed: the flag rides in the payloads as an int32 and comes back summed */
    if ((st = ensure_ef(s, n))) return st;
    float *p = NULL;
    size_t dgc_n = 0;
    if (s->dgc) {
        /* momentum correction: the velocity u = m u + (g + wd p) is what error feedback
         * accumulates and top-k sends; the replicas then apply the average as plain SGD */
        size_t np;
        p = sl_model_params(m, &np);
        if (np < n) return sl_err(SL_EINVAL, "ring strategy: %zu gradient values for %zu parameters", n, np);
        if (!cpu) {
            if (!s->phost && !(s->phost = malloc(n * sizeof(float))))
                return sl_err(SL_ENOMEM, "ring strategy: out of memory");
            if ((st = sl__be_to_host(bk, s->phost, p, n * sizeof(float)))) return st;
            p = s->phost;
        }
        float mom = s->optim.momentum, wd = s->optim.weight_decay;
        /* the trainable parameters only: running statistics (after them) are averaged below */
        dgc_n = sl__model_trainable(m) < n ? sl__model_trainable(m) : n;
        for (size_t i = 0; i < dgc_n; i++) {
            s->u[i] = mom * s->u[i] + (buf[i] + wd * p[i]);
            buf[i] = s->u[i];
        }
    }
    int32_t flag = *more ? 1 : 0;
    sl_compress_ef_at(s->ef, step); /* top-k's warm-up: this step's fraction, the same on every replica */
    if ((st = sl_ring_allreduce_compressed(s->ring, s->ef, buf, n, SL_REDUCE_AVG, (uint32_t)step, &flag,
                                           s->dgc ? s->sent : NULL))) {
        sl_err_prefix("ring strategy: step %" PRId64 ": ", step);
        return st;
    }
    if (s->dgc) {
        /* momentum factor masking (top-k): what was sent leaves the velocity too */
        if (s->cs.kind == SL_COMPRESS_TOPK)
            for (size_t i = 0; i < dgc_n; i++)
                if (s->sent[i] != 0) s->u[i] = 0;
        for (size_t i = 0; i < dgc_n; i++) p[i] -= lr * buf[i];
        if (!cpu && (st = sl__be_to_device(bk, sl_model_params(m, NULL), p, dgc_n * sizeof(float)))) return st;
        *applied = true;
    }
    if (flag < 0 || flag > s->world)
        return sl_err(SL_EPEER, "ring strategy: step %" PRId64 ": the replicas' has-data flags sum to %d of %d", step,
                      (int)flag, s->world);
    *more = (int)flag;
    return SL_OK;
}

/* Running statistics (batchnorm) are parameters no gradient touches, updated from each
 * replica's own batch: averaged too, so the replicas stay bit-identical. */
static sl_status average_stats(sl_strategy_ring *s, sl_model *m, int64_t step) {
    bool cpu = on_cpu(m);
    sl_backend *bk = sl__model_backend(m);
    sl_status st;
    size_t np, nt = sl__model_trainable(m);
    float *params = sl_model_params(m, &np);
    if (nt < np) {
        size_t k = np - nt;
        float *p = params + nt;
        if (!cpu) {
            if ((st = ensure_host(s, k)) || (st = sl__be_to_host(bk, s->host, p, k * sizeof(float)))) return st;
            p = s->host;
        }
        if ((st = sl_ring_allreduce(s->ring, p, k, SL_DT_F32, SL_REDUCE_AVG, TID_STATS))) {
            sl_err_prefix("ring strategy: step %" PRId64 " (running statistics): ", step);
            return st;
        }
        if (!cpu && (st = sl__be_to_device(bk, params + nt, s->host, k * sizeof(float)))) return st;
    }
    return SL_OK;
}

/* The step's gradient exchange (sl__agree_ops.exchange): the has-data flag rides as
 * float n of the same allreduce (the model's spare gradient float on the CPU,
 * SL__GRADS_SPARE; the staging buffer's otherwise): 1 or 0 per replica, averaged like the
 * gradient to k / world, k the replicas that have a next batch. k / world is exact or
 * within an ulp (fp16: well within 1 / (2 world) for world <= 1024), so every replica
 * rounds it back to the same k. */
static sl_status ring_step(void *ctx, const sl_step *rec, sl_step_reply *out, int *more) {
    sl_strategy_ring *s = ctx;
    sl_model *m = rec->model;
    float *grads = rec->grads;
    size_t n = rec->n;
    int64_t step = rec->step;
    out->applied = false;
    sl_status st;
    /* the parameters now are those after `step` steps: the same on every replica, or the
     * logs differ from here on */
    if ((st = log_hash(s, m, step))) return st;
    bool cpu = on_cpu(m);
    sl_backend *bk = sl__model_backend(m);
    size_t extra = 1; /* the flag's float */
    size_t ng;
    sl_model_grads(m, &ng);
    if (cpu && (grads != sl_model_grads(m, NULL) || n > ng))
        return sl_err(SL_EINVAL, "ring strategy: the exchange takes the model's own gradient buffer");
    float *buf = grads;
    int issued = 0;
    if (s->th_started) {
        /* bucketed: wait for the buckets backward handed over, then the tail */
        st = buckets_wait(s, false, &issued);
        if (st) {
            sl_err_prefix("ring strategy: step %" PRId64 ": ", step);
            return st;
        }
    }
    if (issued > 0) {
        if (issued != s->nplan || grads != s->dgrads || n + extra > s->total) {
            sl_err(SL_EINVAL, "ring strategy: step %" PRId64 ": bucketed exchange of %zu floats at %p, but backward "
                   "handed over %d of %d buckets of the model's %zu floats", step, n, (void *)grads, issued, s->nplan,
                   s->total - SL__GRADS_SPARE);
            sl_err_hint("with bucket_bytes the exchange takes the model's own gradient, after sl_model_train_staged");
            return SL_EINVAL;
        }
        buf = s->xbuf;
        /* the tail: floats no bucket holds (running statistics: zero gradient), the flag */
        if (!cpu && n > s->plan_n &&
            (st = sl__be_to_host(bk, buf + s->plan_n, grads + s->plan_n, (n - s->plan_n) * sizeof(float))))
            return st;
        buf[n] = *more ? 1.0f : 0.0f;
        if ((st = sl_ring_allreduce_range(s->ring, buf, s->total, s->plan_n, n + extra, SL_DT_F32, SL_REDUCE_AVG,
                                          (uint32_t)step))) {
            sl_err_prefix("ring strategy: step %" PRId64 ": ", step);
            return st;
        }
    } else if (!cpu) {
        if ((st = ensure_host(s, n + extra)) || (st = sl__be_to_host(bk, s->host, grads, n * sizeof(float))))
            return st;
        buf = s->host;
    }
    if (issued > 0) {
        /* reduced above */
    } else if (s->cs.kind != SL_COMPRESS_NONE) {
        if ((st = exchange_compressed(s, m, buf, n, step, rec->lr, &out->applied, more))) return st;
        extra = 0; /* the flag came back in the payloads */
    } else {
        buf[n] = *more ? 1.0f : 0.0f;
        if ((st = sl_ring_allreduce(s->ring, buf, n + extra, SL_DT_F32, SL_REDUCE_AVG, (uint32_t)step))) {
            sl_err_prefix("ring strategy: step %" PRId64 ": ", step);
            return st;
        }
    }
    if (extra) {
        float f = buf[n] * (float)s->world;
        if (!(f >= -0.25f && f <= (float)s->world + 0.25f)) /* NaN included */
            return sl_err(SL_EPEER, "ring strategy: step %" PRId64 ": the replicas' has-data flags sum to %g of %d",
                          step, (double)f, s->world);
        *more = (int)lrintf(f);
    }
    if (!cpu && (st = sl__be_to_device(bk, grads, buf, n * sizeof(float)))) return st;
    if ((st = average_stats(s, m, step))) return st;
    s->last_step = step;
    s->step_next = step + 1;
    return SL_OK;
}

/* The lockstep rules' allsum (sl__agree_ops.sum). */
static sl_status ring_allsum(void *ctx, int32_t *v, size_t n, uint32_t tag) {
    sl_strategy_ring *s = ctx;
    if (tag >= 0x10000u) return sl_err(SL_EINVAL, "ring strategy: allsum tag %u is not below 0x10000", tag);
    sl_status st = sl_ring_allreduce(s->ring, v, n, SL_DT_I32, SL_REDUCE_SUM, TID_ALLSUM | tag);
    if (st) sl_err_prefix("ring strategy: agreeing on the data: ");
    return st;
}

static sl_status ring_exchange(void *ctx, const sl_step *rec, sl_step_reply *out) {
    sl_strategy_ring *s = ctx;
    return sl__agree_exchange(&s->agree, rec, out);
}

static void teardown(sl_strategy_ring *s) {
    buckets_stop(s, false);
    sl_ring_destroy(s->ring);
    s->ring = NULL;
    sl_tp_destroy(s->tp);
    s->tp = NULL;
}

static sl_status ring_finish(void *ctx, sl_status result) {
    sl_strategy_ring *s = ctx;
    if (!s->ring) return SL_OK;
    /* the exchange thread lets go of the ring: buckets in flight end, queued ones are skipped */
    if (s->th_started) {
        if (result != SL_OK) {
            sl_error keep;
            sl_err_save(&keep);
            buckets_wait(s, true, NULL);
            sl_err_restore(&keep);
        } else {
            result = buckets_wait(s, false, NULL); /* none are left after an exchange */
        }
        buckets_stop(s, true);
    }
    if (result != SL_OK) {
        /* the peers fail their next receive with our reason instead of waiting out the
         * timeout */
        sl_tp_abort(s->tp, sl_errmsg());
        teardown(s);
        return SL_OK;
    }
    sl_status st = SL_OK;
    /* the final parameters, after the last exchanged step's update */
    if (s->model && s->last_step >= 0 && (st = log_hash(s, s->model, s->last_step + 1))) {
        sl_tp_abort(s->tp, sl_errmsg());
        teardown(s);
        return st;
    }
    if ((st = sl_ring_barrier(s->ring))) sl_err_prefix("ring strategy: final barrier: ");
    else if ((st = sl_tp_flush(s->tp))) sl_err_prefix("ring strategy: ");
    teardown(s);
    return st;
}

sl_status sl_strategy_ring_create(const sl_cluster *c, const sl_strategy_ring_opts *opts, sl_train_hooks *hooks,
                                  sl_strategy_ring **out) {
    *out = NULL;
    memset(hooks, 0, sizeof *hooks);
    sl_strategy_ring_opts o = {0};
    if (opts) o = *opts;
    if (!c || c->world < 1 || !c->ring_addrs) return sl_err(SL_EINVAL, "ring strategy: the cluster is not resolved");
    if (c->rank < 0) {
        const sl_cluster_task *t = &c->tasks[c->self];
        sl_err(SL_EINVAL, "ring strategy: this process is %s %d, not a ring member (chief or worker)",
               sl_task_type_name(t->type), t->index);
        sl_err_hint("strategy ring trains on chief and worker tasks only; ps tasks belong to `strategy ps`");
        return SL_EINVAL;
    }
    sl_strategy_ring *s = calloc(1, sizeof *s);
    if (!s) return sl_err(SL_ENOMEM, "ring strategy: out of memory");
    s->rank = c->rank;
    s->world = c->world;
    s->hash_log = o.hash_log;
    if (o.hash_log && o.hash_log_name && !(s->hash_log_name = strdup(o.hash_log_name))) {
        free(s);
        return sl_err(SL_ENOMEM, "ring strategy: out of memory");
    }
    s->last_step = -1;
    s->cs = o.compress;
    s->optim = o.optim;
    s->bucket_bytes = o.bucket_bytes;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->dgc = (s->cs.kind == SL_COMPRESS_TOPK || s->cs.kind == SL_COMPRESS_SIGN) && o.optim.kind == SL_OPTIM_SGD &&
             o.optim.momentum > 0 && !o.optim.nesterov;
    sl_status st;
    if (c->world > 1) {
        sl_tp_opts to = {.timeout_s = o.timeout_s > 0 ? o.timeout_s : c->timeout_s > 0 ? c->timeout_s : 30.0,
                         .curve = o.curve, .job_id = c->job_id};
        if ((st = sl_tp_create(c->rank, c->world, c->ring_addrs, &to, &s->tp)) || (st = sl_tp_connect(s->tp)) ||
            (st = sl_ring_create(s->tp, &o.ring, &s->ring))) {
            sl_err_prefix("ring strategy (rank %d of %d): ", c->rank, c->world);
            sl_strategy_ring_free(s);
            return st;
        }
        hooks->wire_path = sl_ring_path_name(s->ring);
        sl__agree_init(&s->agree, &(sl__agree_ops){.exchange = ring_step, .sum = ring_allsum}, s, c->world, c->rank,
                       c->rank == 0);
        hooks->start = ring_start;
        hooks->exchange = ring_exchange;
        hooks->finish = ring_finish;
        hooks->wire_bytes = ring_wire_bytes;
        if (o.compress.kind != SL_COMPRESS_NONE) {
            hooks->save_state = ring_save_state;
            hooks->load_state = ring_load_state;
        }
    }
    hooks->ctx = s;
    hooks->world_size = c->world;
    hooks->rank = c->rank;
    hooks->is_chief = c->rank == 0;
    *out = s;
    return SL_OK;
}

void sl_strategy_ring_free(sl_strategy_ring *s) {
    if (!s) return;
    teardown(s);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    sl__agree_free(&s->agree);
    free(s->plan);
    sl_compress_ef_free(s->ef);
    free(s->u);
    free(s->sent);
    free(s->phost);
    free(s->host);
    free(s->hash_log_name);
    free(s);
}
