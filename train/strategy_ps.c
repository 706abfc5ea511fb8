/* The parameter-server strategy (sluice/strategy.h): the trainer's hooks over an
 * sl_ps_client on the workers, and the ps task's side (sl_ps_task_run): the config's
 * optimizer applied to one shard, and crash-safe shard checkpoints.
 *
 * Only the trainable prefix of the model's flat parameters (train/model.c's layout) goes to
 * the ps tasks; batchnorm running statistics after it stay with each worker. The plan's
 * variables are the model's trainable tensors in flat-offset order, so every task that
 * builds the same model block makes the same plan (and plan hash) whatever its backend.
 *
 * The ps applies each gradient with the CPU backend's elementwise optimizer ops (the same
 * sgd_step / adam_step that sl_optim uses), over its packed shard: since those ops treat
 * every float on its own, the shard after a push is bit for bit the matching slice of what
 * a local optimizer makes of the whole vector. Its optimizer state (velocity, or Adam's m
 * then v) is packed the same way, with its own step count (Adam's bias correction counts
 * updates this shard took).
 *
 * Learning rate in async mode: the server applies each push with lr / A (A: the workers
 * less the dead, sluice/ps.h). The training
 * pipeline's batch is the global batch, split over the workers (sluice/train.h), so the A
 * pushes of one round together stand for one step on the global batch, as one sync round
 * or one ring allreduce does: the same config then trains alike under every strategy.
 * Applying each push at the full rate takes W steps per global batch, which with momentum
 * 0.9 adds the implicit momentum of asynchrony on top (measured on examples/fashion_mlp.sl,
 * 2 workers, 8 epochs: 0.862 test accuracy at the full rate, 0.882 at lr / 2, 0.886 sync). When a worker dies,
 * the others' pushes take its share of the rate.
 * For SGD the decay terms scale the same way; for Adam, whose step size does not depend on
 * the gradient's scale, only the rate can do it. Sync mode applies the mean once with lr.
 *
 * Workload: one push + pull per worker step (KiB to hundreds of MiB), a shard checkpoint
 * every few seconds; a few workers and ps tasks. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/file.h"
#include "sluice/log.h"
#include "sluice/ps.h"
#include "sluice/safetensors.h"
#include "sluice/strategy.h"
#include "train/internal.h"

#define SHARD_PREFIX "shard-"
#define SHARD_SUFFIX ".safetensors"
#define SHARD_FORMAT "sluice-ps-shard"
#define SHARDS_KEPT 2

/* ---- the plan from a model ------------------------------------------------------------ */

typedef struct var {
    size_t off, len;
} var;

static int by_offset(const void *a, const void *b) {
    const var *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The trainable tensors of m in flat order; they must tile [0, trainable) exactly. */
static sl_status model_plan(const sl_model *m, int nps, sl_ps_plan **out) {
    *out = NULL;
    size_t nt = sl__model_trainable(m);
    int count = sl_model_param_count(m);
    if (nt == 0 || count <= 0) return sl_err(SL_EINVAL, "ps strategy: the model has no trainable parameters");
    var *v = calloc((size_t)count, sizeof *v);
    size_t *sizes = calloc((size_t)count, sizeof *sizes);
    sl_status st = SL_OK;
    if (!v || !sizes) {
        st = sl_err(SL_ENOMEM, "ps strategy: out of memory planning %d variables", count);
        goto done;
    }
    int nv = 0;
    for (int i = 0; i < count; i++) {
        size_t off;
        int rank;
        int64_t dims[4];
        if ((st = sl_model_param_info(m, i, NULL, &off, &rank, dims))) goto done;
        if (off >= nt) continue; /* running statistics */
        size_t len = 1;
        for (int d = 0; d < rank; d++) len *= (size_t)dims[d];
        v[nv++] = (var){off, len};
    }
    qsort(v, (size_t)nv, sizeof *v, by_offset);
    size_t at = 0;
    for (int i = 0; i < nv; i++) {
        if (v[i].off != at) {
            st = sl_err(SL_EINTERNAL, "ps strategy: the model's trainable tensors leave a gap at float %zu", at);
            goto done;
        }
        sizes[i] = v[i].len;
        at += v[i].len;
    }
    if (at != nt) {
        st = sl_err(SL_EINTERNAL, "ps strategy: the model's trainable tensors cover %zu of %zu floats", at, nt);
        goto done;
    }
    st = sl_ps_plan_create(sizes, nv, nps, 0, out);
done:
    free(v);
    free(sizes);
    return st;
}

/* Workers first, then the ps tasks: ps.h's rank order. */
static sl_status cluster_addrs(const sl_cluster *c, const char ***out) {
    const char **a = calloc((size_t)(c->world + c->nps), sizeof *a);
    if (!a) return sl_err(SL_ENOMEM, "ps strategy: out of memory");
    for (int i = 0; i < c->world; i++) a[i] = c->ring_addrs[i];
    for (int j = 0; j < c->nps; j++) a[c->world + j] = c->ps_addrs[j];
    *out = a;
    return SL_OK;
}

static double timeout_of(const sl_cluster *c, const sl_strategy_ps_opts *o) {
    return o->timeout_s > 0 ? o->timeout_s : c->timeout_s > 0 ? c->timeout_s : 30.0;
}

/* ---- workers --------------------------------------------------------------------------- */

struct sl_strategy_ps {
    const sl_cluster *c;        /* borrowed */
    sl_strategy_ps_opts o;
    const char **addrs;         /* world + nps (pointing into c) */
    sl_ps_plan *plan;           /* from start */
    sl_ps_client *client;       /* from start */
    float *host;                /* all parameters (start), then staging on non-CPU backends */
    float *ghost;               /* gradient staging on non-CPU backends (trainable floats) */
    size_t np, nt;
    bool joined;
    bool sync;                  /* mode=sync: lockstep epochs (agree), and the workers agree on
                                   their start (agree_start) */
    sl_compress_spec cs;        /* compress= of the train block: pushes compressed */
    sl__agree agree;            /* sync: the epochs' rules, over ps_step and ps_allsum */
};

static bool on_cpu(sl_model *m) { return strcmp(sl_model_backend_name(m), "cpu") == 0; }

static int32_t clamp32(int64_t v) { return v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : (int32_t)v; }

/* What each worker says in agree_start: blocks of world ints, slot r worker r's. */
enum { AG_START, AG_ENTRY, AG_LO, AG_HI, AG_LO_PS, AG_HI_PS, AG_N };
#define TAG_START 0x5053 /* apart from the lockstep rules' tags (1..5, train/strategy_agree.c) */

/* Sync mode, after the join: every worker's start step and the step each ps recorded for it
 * (lowest and highest over the ps tasks) go through one sum on ps 0, so every worker reaches
 * the same verdict (one that refused alone would leave the others training without it).
 * A resumed run must start every worker and every ps shard from the same step: the ps
 * tasks must have recorded the same step for each worker (shards of one round), every
 * worker must start at the same step, and with compression at its checkpoint's step (its
 * residual is of that step). entry: the step the worker's own checkpoint gave (0:
 * none); start: where it starts. SL_EINVAL naming the mismatch; the sum's errors. Only a
 * start of all the workers together is checked: a worker left out of the sum (one that
 * restarted alone while the others train, or one a restored ps stopped waiting for) means
 * the others are elsewhere, and the restarted one goes on where the ps tasks recorded. */
static sl_status agree_start(sl_strategy_ps *s, int64_t entry, int64_t start) {
    const sl_cluster *c = s->c;
    int w = c->world, r = c->rank;
    size_t n = (size_t)AG_N * (size_t)w;
    int32_t *v = calloc(n, sizeof *v);
    uint8_t *took = calloc((size_t)w, 1);
    sl_status st = SL_OK;
    if (!v || !took) {
        st = sl_err(SL_ENOMEM, "out of memory");
        goto done;
    }
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    int lo_ps = 0, hi_ps = 0;
    for (int j = 0; j < c->nps; j++) {
        int64_t x = sl_ps_client_recorded_step(s->client, j);
        if (x < lo) {
            lo = x;
            lo_ps = j;
        }
        if (x > hi) {
            hi = x;
            hi_ps = j;
        }
    }
    int64_t mine[AG_N] = {start, entry, lo, hi, lo_ps, hi_ps};
    for (int k = 0; k < AG_N; k++) v[k * w + r] = clamp32(mine[k]);
    if ((st = sl_ps_client_sum(s->client, v, n, TAG_START, took))) goto done;
    for (int q = 0; q < w; q++)
        if (!took[q]) goto done; /* one worker restarted mid-run: it goes where the ps recorded */
#define AG(k, q) v[(k) * w + (q)]
    for (int q = 0; q < w; q++)
        if (AG(AG_LO, q) != AG(AG_HI, q)) {
            sl_err(SL_EINVAL, "the ps tasks' shards are of different steps: ps %d recorded worker %d's steps up to %d, "
                   "ps %d up to %d", AG(AG_HI_PS, q), q, AG(AG_HI, q), AG(AG_LO_PS, q), AG(AG_LO, q));
            sl_err_hint("each ps task restores its newest shard (RUN_DIR/ps-J); after a job that stopped without the ps "
                        "tasks saving (killed) they can be of different rounds: a synchronous run resumes only from "
                        "shards of one step; start it over (--overwrite) or put back shards of one step");
            st = SL_EINVAL;
            goto done;
        }
    for (int q = 1; q < w; q++) {
        if (AG(AG_START, q) == AG(AG_START, 0)) continue;
        char why[2][96];
        for (int k = 0; k < 2; k++) {
            int who = k ? q : 0;
            int32_t at = AG(AG_START, who), ent = AG(AG_ENTRY, who);
            if (at == 0) snprintf(why[k], sizeof why[k], "a fresh start");
            else if (at == ent) snprintf(why[k], sizeof why[k], "its checkpoint");
            else snprintf(why[k], sizeof why[k], "the ps tasks recorded its steps up to %d", at - 1);
        }
        sl_err(SL_EINVAL, "the workers would start at different steps: worker 0 at step %d (%s), worker %d at step %d "
               "(%s)", AG(AG_START, 0), why[0], q, AG(AG_START, q), why[1]);
        sl_err_hint("a synchronous run resumes only when the chief's checkpoint and the ps tasks' shards are of one "
                    "step: the ps tasks save theirs every few seconds and when they exit; resume from a checkpoint of "
                    "the shards' step, or start over (--overwrite)");
        st = SL_EINVAL;
        goto done;
    }
    /* the ps tasks ahead of a checkpoint: with compression the residual of that step is
     * nowhere (one is saved beside each checkpoint only) */
    for (int q = 0; q < w && s->cs.kind != SL_COMPRESS_NONE; q++) {
        if (AG(AG_ENTRY, q) <= 0 || AG(AG_ENTRY, q) == AG(AG_START, q)) continue;
        char codec[32];
        sl_compress_name(&s->cs, codec, sizeof codec);
        sl_err(SL_EINVAL, "worker %d's checkpoint is of step %d, the ps tasks' shards of step %d: with compress=%s its "
               "residual of step %d is missing", q, AG(AG_ENTRY, q), AG(AG_START, q), codec, AG(AG_START, q));
        sl_err_hint("the ps tasks saved their shards after the last checkpoint (a killed job): resume needs the "
                    "shards of the checkpoint's step; start over (--overwrite) or put back shards of that step");
        st = SL_EINVAL;
        goto done;
    }
#undef AG
done:
    free(v);
    free(took);
    return st;
}

static sl_status ps_start(void *ctx, sl_model *m, sl_optim *o, int64_t *stepp) {
    (void)o; /* the ps tasks run the optimizer */
    sl_strategy_ps *s = ctx;
    const sl_cluster *c = s->c;
    sl_status st;
    sl_model_params(m, &s->np);
    s->nt = sl__model_trainable(m);
    if ((st = model_plan(m, c->nps, &s->plan))) goto fail;
    s->host = malloc(s->np * sizeof(float));
    if (!on_cpu(m)) s->ghost = malloc(s->nt * sizeof(float));
    if (!s->host || (!on_cpu(m) && !s->ghost)) {
        st = sl_err(SL_ENOMEM, "out of memory for %zu parameters", s->np);
        goto fail;
    }
    sl_tp_opts to = {.timeout_s = timeout_of(c, &s->o), .curve = s->o.curve, .job_id = c->job_id};
    sl_ps_client_opts co = {.retry_s = s->o.retry_s};
    if ((st = sl_ps_client_create(s->addrs, c->world, c->rank, s->plan, &to, &co, &s->client))) goto fail;
    if (s->cs.kind != SL_COMPRESS_NONE && (st = sl_ps_client_set_compress(s->client, &s->cs))) goto fail;
    int64_t resume = -1;
    /* the chief offers its initialisation (or its resumed checkpoint); a ps that already
     * holds parameters keeps them, and everyone leaves with the servers' values */
    if ((st = sl_model_get_params(m, s->host, s->np)) || (st = sl_ps_client_join(s->client, s->host, &resume)) ||
        (st = sl_model_set_params(m, s->host, s->np)))
        goto fail;
    s->joined = true;
    int64_t entry = *stepp;
    if (resume >= 0 && resume + 1 > *stepp) {
        /* a restarted worker: its shard's batches up to `resume` are already in the ps. Said
         * aloud, since a fresh run pointed at an old run folder lands here too */
        SL_WARN("ps strategy: worker %d continues at step %" PRId64 " (the ps tasks recorded its steps up to %" PRId64
                "); for a fresh run use a new run folder or remove its ps-* folders",
                c->rank, resume + 1, resume);
        *stepp = resume + 1;
        sl__model_set_steps(m, (uint64_t)*stepp);
    }
    if (s->sync && (st = agree_start(s, entry, *stepp))) goto fail;
    return SL_OK;
fail:
    sl_err_prefix("ps strategy (worker %d of %d): start: ", c->rank, c->world);
    return st;
}

/* The step's push and pull; with more non-NULL (sync mode: sl__agree_ops.exchange) the
 * has-data flag rides on the push. *more in: this worker holds its next batch; out: the
 * workers the step's round counted as holding a next batch, plus those outside the round
 * (dead or done); 0 when no worker of the round holds one; the world size when all do. */
static sl_status ps_step(void *ctx, const sl_step *rec, sl_step_reply *out, int *more) {
    sl_strategy_ps *s = ctx;
    sl_model *m = rec->model;
    float *grads = rec->grads;
    size_t n = rec->n;
    int64_t step = rec->step;
    float lr = rec->lr;
    out->applied = false;
    if (n < s->nt) return sl_err(SL_EINVAL, "ps strategy: exchange of %zu floats, the model trains %zu", n, s->nt);
    sl_backend *bk = sl__model_backend(m);
    float *params = sl_model_params(m, NULL);
    sl_status st;
    bool has_next = more && *more;
    int have = 0, lack = 0;
    /* host memory on the CPU: push from and pull into the model's own buffers */
    const float *g = grads;
    float *into = params;
    if (!on_cpu(m)) {
        if ((st = sl__be_to_host(bk, s->ghost, grads, s->nt * sizeof(float)))) goto fail;
        g = s->ghost;
        into = s->host;
    } else if ((st = sl__be_sync(bk))) {
        goto fail;
    }
    st = more ? sl_ps_client_push_pull_more(s->client, g, step, lr, into, has_next, &have, &lack)
              : sl_ps_client_push_pull(s->client, g, step, lr, into);
    if (st) goto fail;
    if (!on_cpu(m) && ((st = sl__be_to_device(bk, params, s->host, s->nt * sizeof(float))) || (st = sl__be_sync(bk))))
        goto fail;
    out->applied = true;
    if (more) {
        int w = s->c->world;
        if (!have && !lack) *more = has_next ? w : 0; /* no ps counted (restarted since the round): its own flag */
        else if (!lack) *more = w;
        else if (!have) *more = 0;
        else *more = w - lack; /* the dead count as holding one: they do not end the epoch */
    }
    return SL_OK;
fail:
    sl_err_prefix("ps strategy (worker %d): step %" PRId64 ": ", s->c->rank, step);
    return st;
}

/* Sync mode (sl__agree_ops.sum): the counts added over the workers through ps 0. A
 * worker left out of the sum (dead, done, or in a step round after a restart) reads as a
 * copy of the lowest worker that took part: v is blocks of world ints, slot r of each being
 * worker r's (the lockstep rules' layout). */
static sl_status ps_allsum(void *ctx, int32_t *v, size_t n, uint32_t tag) {
    sl_strategy_ps *s = ctx;
    int w = s->c->world;
    uint8_t *took = malloc((size_t)w);
    if (!took) return sl_err(SL_ENOMEM, "ps strategy: out of memory");
    sl_status st = sl_ps_client_sum(s->client, v, n, tag, took);
    int lo = -1, out = -1;
    for (int r = 0; !st && r < w; r++) {
        if (took[r] && lo < 0) lo = r;
        if (!took[r] && out < 0) out = r;
    }
    if (!st && out >= 0 && (lo < 0 || n % (size_t)w)) {
        st = sl_err(SL_EPEER, "ps strategy (worker %d): worker %d took no part in a sum (tag %u) of %zu counts, which "
                    "are not one per worker", s->c->rank, out, tag, n);
    } else if (!st && out >= 0) {
        for (int r = 0; r < w; r++)
            if (!took[r])
                for (size_t k = 0; k < n; k += (size_t)w) v[k + (size_t)r] = v[k + (size_t)lo];
    }
    free(took);
    if (st) sl_err_prefix("ps strategy (worker %d): ", s->c->rank);
    return st;
}

/* Async workers train on their own: only the steps' pushes; sync ones in lockstep epochs. */
static sl_status ps_exchange(void *ctx, const sl_step *rec, sl_step_reply *out) {
    sl_strategy_ps *s = ctx;
    if (s->sync) return sl__agree_exchange(&s->agree, rec, out);
    return rec->phase == SL_STEP_TRAIN ? ps_step(s, rec, out, NULL) : SL_OK;
}

static sl_status ps_finish(void *ctx, sl_status result) {
    sl_strategy_ps *s = ctx;
    sl_status st = SL_OK;
    /* after a failure no BYE: the worker stays in the ps's books until it is declared dead,
     * so a restarted one rejoins where it stopped */
    if (s->client && s->joined && result == SL_OK && (st = sl_ps_client_bye(s->client)))
        sl_err_prefix("ps strategy (worker %d): finish: ", s->c->rank);
    sl_ps_client_free(s->client);
    s->client = NULL;
    return st;
}

static uint64_t ps_wire_bytes(void *ctx) {
    sl_strategy_ps *s = ctx;
    return s->client ? sl_ps_client_sent_bytes(s->client) : 0;
}

/* The worker's residuals (one per ps shard, concatenated in ps order) as its sidecar of the
 * checkpoint (sluice/strategy.h), and back. */
static sl_status ps_state(sl_strategy_ps *s, const char *run_dir, int64_t step, int keep, bool save) {
    if (!s->client || !s->plan) return SL_OK;
    size_t total = 0;
    for (int j = 0; j < s->plan->nps; j++) total += s->plan->shard_len[j];
    double *all = malloc((total ? total : 1) * sizeof *all);
    if (!all) return sl_err(SL_ENOMEM, "ps strategy: out of memory for the residual");
    size_t off = 0, n;
    for (int j = 0; j < s->plan->nps; j++, off += n) {
        double *r = sl_ps_client_residual(s->client, j, &n);
        if (save && r) memcpy(all + off, r, n * sizeof *r);
    }
    char codec[32];
    sl_compress_name(&s->cs, codec, sizeof codec);
    int rank = s->c->rank;
    sl_status st;
    if (save) {
        st = sl_train_save_residual(run_dir, rank, step, codec, all, total, keep);
    } else {
        st = sl_train_load_residual(run_dir, rank, step, codec, all, total);
        if (st == SL_ENOTFOUND) {
            fprintf(stderr, "warning: ps strategy: worker %d: %s: starting compress=%s from a zero residual\n", rank,
                    sl_errmsg(), codec);
            st = SL_OK;
        } else if (!st) {
            off = 0;
            for (int j = 0; j < s->plan->nps; j++, off += n) {
                double *r = sl_ps_client_residual(s->client, j, &n);
                if (r) memcpy(r, all + off, n * sizeof *r);
            }
        }
    }
    free(all);
    if (st) sl_err_prefix("ps strategy: worker %d: %s the compression residual: ", rank, save ? "saving" : "loading");
    return st;
}

static sl_status ps_save_state(void *ctx, const char *run_dir, int64_t step, int keep) {
    return ps_state(ctx, run_dir, step, keep, true);
}
static sl_status ps_load_state(void *ctx, const char *run_dir, int64_t step) {
    return ps_state(ctx, run_dir, step, 0, false);
}

sl_status sl_strategy_ps_create(const sl_cluster *c, const sl_train_config *tc, const sl_strategy_ps_opts *opts,
                                sl_train_hooks *hooks, sl_strategy_ps **out) {
    *out = NULL;
    memset(hooks, 0, sizeof *hooks);
    /* staleness is the servers' business (sl_ps_task_run); sync mode adds lockstep epochs */
    if (!c || c->world < 1 || !c->ring_addrs || !c->tasks)
        return sl_err(SL_EINVAL, "ps strategy: the cluster is not resolved");
    if (c->nps < 1 || !c->ps_addrs) {
        sl_err(SL_EINVAL, "ps strategy: the cluster has no ps tasks");
        sl_err_hint("start ps tasks (sluice-launch -n N --ps M), or list them in TF_CONFIG or a cluster block");
        return SL_EINVAL;
    }
    if (c->rank < 0) {
        const sl_cluster_task *t = &c->tasks[c->self];
        sl_err(SL_EINVAL, "ps strategy: this process is %s %d, not a worker (chief or worker)",
               sl_task_type_name(t->type), t->index);
        sl_err_hint("a ps task runs sl_ps_task_run, not the trainer");
        return SL_EINVAL;
    }
    if (tc && tc->compress.warmup > 0) { /* the ps tasks decode with one k (sluice/compress.h) */
        sl_err(SL_EINVAL, "ps strategy: compress=topk(F, warmup=W): the warm-up is for `strategy ring` only");
        sl_err_hint("drop warmup= under `strategy ps`");
        return SL_EINVAL;
    }
    sl_strategy_ps *s = calloc(1, sizeof *s);
    if (!s) return sl_err(SL_ENOMEM, "ps strategy: out of memory");
    s->c = c;
    if (opts) s->o = *opts;
    sl_status st = cluster_addrs(c, &s->addrs);
    if (st) {
        free(s);
        return st;
    }
    hooks->ctx = s;
    hooks->world_size = c->world;
    hooks->rank = c->rank;
    hooks->is_chief = c->rank == 0;
    hooks->start = ps_start;
    hooks->exchange = ps_exchange;
    hooks->finish = ps_finish;
    hooks->wire_bytes = ps_wire_bytes;
    if (tc && tc->compress.kind != SL_COMPRESS_NONE) {
        s->cs = tc->compress;
        hooks->save_state = ps_save_state;
        hooks->load_state = ps_load_state;
    }
    if (tc && tc->ps_sync) {
        s->sync = true;
        sl__agree_init(&s->agree, &(sl__agree_ops){.exchange = ps_step, .sum = ps_allsum}, s, c->world, c->rank,
                       c->rank == 0);
    }
    *out = s;
    return SL_OK;
}

void sl_strategy_ps_free(sl_strategy_ps *s) {
    if (!s) return;
    sl_ps_client_free(s->client);
    sl_ps_plan_free(s->plan);
    free(s->addrs);
    free(s->host);
    free(s->ghost);
    sl__agree_free(&s->agree);
    free(s);
}

/* ---- the ps task ------------------------------------------------------------------------ */

typedef struct ps_task {
    int index, nworkers;
    sl_optim_spec spec;         /* defaults filled in */
    sl_backend *bk;             /* the CPU model's (borrowed) */
    size_t n;                   /* shard floats */
    float *state;               /* [nstate]: velocity, or m then v; NULL when none */
    size_t nstate;
    int64_t ostep;              /* updates this shard's optimizer took */
    uint32_t plan_hash;
    char dir[1100];             /* RUN_DIR/ps-J */
} ps_task;

static const char *optim_name(sl_optim_kind k) {
    return k == SL_OPTIM_SGD ? "sgd" : k == SL_OPTIM_ADAM ? "adam" : "adamw";
}

static sl_status task_apply(void *ctx, float *params, const float *grad, size_t n, float lr) {
    ps_task *t = ctx;
    if (n != t->n) return sl_err(SL_EINVAL, "ps %d: a gradient of %zu floats for a shard of %zu", t->index, n, t->n);
    if (!(lr >= 0.0f) || !isfinite(lr)) return sl_err(SL_EINVAL, "ps %d: learning rate %g", t->index, lr);
    const sl_optim_spec *sp = &t->spec;
    sl_status st;
    if (sp->kind == SL_OPTIM_SGD)
        st = sl__be_sgd_step(t->bk, params, grad, t->state, n, lr, sp->momentum, sp->nesterov, sp->weight_decay);
    else
        st = sl__be_adam_step(t->bk, params, grad, t->state, t->state + n, n, lr, sp->beta1, sp->beta2, sp->eps,
                              sp->weight_decay, sp->kind == SL_OPTIM_ADAMW, t->ostep + 1);
    if (!st) st = sl__be_sync(t->bk);
    if (st) return st;
    t->ostep++;
    return SL_OK;
}

static sl_status set_meta_i64(sl_st_writer *w, const char *key, int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return sl_st_writer_set_meta(w, key, buf);
}

static sl_status task_save(void *ctx, const float *params, size_t n, const sl_ps_shard_state *ss) {
    ps_task *t = ctx;
    char path[1200], hash[16], *steps = NULL;
    sl_st_writer *w = NULL;
    sl_status st;
    /* "-1,17,17": 21 bytes per entry at most */
    size_t cap = (size_t)(ss->nworkers > 0 ? ss->nworkers : 1) * 22 + 1, len = 0;
    if (!(steps = malloc(cap))) return sl_err(SL_ENOMEM, "ps %d: out of memory for a checkpoint", t->index);
    steps[0] = 0;
    for (int i = 0; i < ss->nworkers; i++)
        len += (size_t)snprintf(steps + len, cap - len, i ? ",%" PRId64 : "%" PRId64, ss->worker_steps[i]);
    snprintf(hash, sizeof hash, "%08" PRIx32, t->plan_hash);
    snprintf(path, sizeof path, "%s/" SHARD_PREFIX "%012" PRId64 SHARD_SUFFIX, t->dir, ss->version);
    int64_t dn = (int64_t)n, ds = (int64_t)t->nstate;
    if ((st = sl_st_writer_new(&w))) goto done;
    sl_st_writer_set_checksums(w, true);
    if ((st = sl_st_writer_add(w, "params", SL_DT_F32, 1, &dn, params)) ||
        (t->nstate && (st = sl_st_writer_add(w, "optimizer/state", SL_DT_F32, 1, &ds, t->state))) ||
        (st = sl_st_writer_set_meta(w, "format", SHARD_FORMAT)) || (st = set_meta_i64(w, "version", ss->version)) ||
        (st = sl_st_writer_set_meta(w, "plan_hash", hash)) || (st = set_meta_i64(w, "ps", t->index)) ||
        (st = sl_st_writer_set_meta(w, "optimizer", optim_name(t->spec.kind))) ||
        (st = set_meta_i64(w, "optimizer_size", ds)) || (st = set_meta_i64(w, "optimizer_step", t->ostep)) ||
        (st = sl_st_writer_set_meta(w, "worker_steps", steps)) || (st = sl_st_writer_write(w, path)))
        goto done;
    /* only now, with the new file in place, drop the ones beyond the last SHARDS_KEPT */
    char **f;
    int nf = sl__list_numbered(t->dir, SHARD_PREFIX, SHARD_SUFFIX, &f);
    for (int i = SHARDS_KEPT; i < nf; i++)
        if (unlink(f[i]) != 0 && errno != ENOENT) SL_WARN("ps %d: cannot remove %s: %s", t->index, f[i], strerror(errno));
    if (nf > 0) sl_train_free_list(f, nf);
done:
    if (st) sl_err_prefix("ps %d: shard checkpoint: ", t->index);
    sl_st_writer_free(w);
    free(steps);
    return st;
}

static sl_status meta_i64(const sl_st_file *f, const char *path, const char *key, int64_t min, int64_t *out) {
    const char *v = sl_st_meta(f, key);
    char *end;
    if (!v || !*v) return sl_err(SL_ECORRUPT, "%s: shard metadata has no '%s'", path, key);
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*end || errno || x < min) return sl_err(SL_ECORRUPT, "%s: shard metadata '%s' is '%s'", path, key, v);
    *out = x;
    return SL_OK;
}

/* Load one shard file into params[n], t's optimizer state and *ss (worker_steps sized for
 * t->nworkers: entries the file lacks are -1). Nothing changes on failure. */
static sl_status load_shard(ps_task *t, const char *path, float *params, sl_ps_shard_state *ss) {
    sl_st_file *f = NULL;
    sl_tensor pt = SL_TENSOR_EMPTY, ot = SL_TENSOR_EMPTY;
    int64_t version, ostep, osize;
    sl_status st = sl_st_open(path, &f);
    if (st) return st;
    if ((st = sl_st_verify(f, NULL))) goto done; /* shards written before checksums have none */
    const char *fmt = sl_st_meta(f, "format"), *hash = sl_st_meta(f, "plan_hash"), *steps = sl_st_meta(f, "worker_steps");
    if (!fmt || strcmp(fmt, SHARD_FORMAT) != 0) {
        st = sl_err(SL_ECORRUPT, "%s: not a ps shard (metadata format is '%s')", path, fmt ? fmt : "");
        goto done;
    }
    char want[16];
    snprintf(want, sizeof want, "%08" PRIx32, t->plan_hash);
    if (!hash || strcmp(hash, want) != 0) {
        st = sl_err(SL_EINVAL, "%s: a shard of plan %s, this model's plan is %s", path, hash ? hash : "(none)", want);
        goto done;
    }
    if ((st = meta_i64(f, path, "version", 0, &version)) || (st = meta_i64(f, path, "optimizer_step", 0, &ostep)) ||
        (st = meta_i64(f, path, "optimizer_size", 0, &osize)))
        goto done;
    if ((size_t)osize != t->nstate) {
        st = sl_err(SL_EINVAL, "%s: optimizer state of %" PRId64 " floats, the configured %s has %zu", path, osize,
                    optim_name(t->spec.kind), t->nstate);
        goto done;
    }
    if ((st = sl_st_get(f, "params", &pt))) goto done;
    if (pt.dtype != SL_DT_F32 || sl_tensor_numel(&pt) != (int64_t)t->n) {
        st = sl_err(SL_ECORRUPT, "%s: 'params' has %" PRId64 " values, the shard %zu float32", path, sl_tensor_numel(&pt),
                    t->n);
        goto done;
    }
    if (t->nstate) {
        if ((st = sl_st_get(f, "optimizer/state", &ot))) goto done;
        if (ot.dtype != SL_DT_F32 || sl_tensor_numel(&ot) != (int64_t)t->nstate) {
            st = sl_err(SL_ECORRUPT, "%s: 'optimizer/state' has %" PRId64 " values, expected %zu float32", path,
                        sl_tensor_numel(&ot), t->nstate);
            goto done;
        }
    }
    if (!steps) {
        st = sl_err(SL_ECORRUPT, "%s: shard metadata has no 'worker_steps'", path);
        goto done;
    }
    /* parse into ss only after everything else passed; a worker beyond the list has none */
    int64_t *ws = ss->worker_steps;
    for (int i = 0; i < t->nworkers; i++) ws[i] = -1;
    const char *p = steps;
    for (int i = 0; *p; i++) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < -1 || (*end && *end != ',') || (*end == ',' && !end[1])) {
            st = sl_err(SL_ECORRUPT, "%s: shard metadata 'worker_steps' is '%s'", path, steps);
            goto done;
        }
        if (i < t->nworkers) ws[i] = x;
        p = *end ? end + 1 : end;
    }
    memcpy(params, pt.data, t->n * sizeof(float));
    if (t->nstate) memcpy(t->state, ot.data, t->nstate * sizeof(float));
    /* the copies are the file's bytes only if it did not shrink meanwhile (the task then
     * fails: the caller does not serve a half-restored shard) */
    if ((st = sl_st_intact(f))) goto done;
    t->ostep = ostep;
    ss->version = version;
done:
    sl_tensor_release(&pt);
    sl_tensor_release(&ot);
    sl_st_close(f);
    return st;
}

/* A ps task's start from its shard checkpoints files[0..nfiles) (newest first): with
 * o->fresh, remove them (only with o->overwrite, else SL_EINVAL); otherwise restore the
 * newest that loads cleanly into params and *ss (*restored true), skipping torn or foreign
 * ones with a warning. */
static sl_status restore_shard(ps_task *t, const sl_strategy_ps_opts *o, FILE *console, char **files, int nfiles,
                               float *params, sl_ps_shard_state *ss, bool *restored) {
    if (o->fresh && nfiles > 0) {
        /* a new run in a used folder: the old shards would hand the workers another run's
         * parameters and step counts */
        if (!o->overwrite) {
            sl_err(SL_EINVAL, "%s holds %d shard checkpoint(s) of an earlier run (newest %s)", t->dir, nfiles, files[0]);
            sl_err_hint("continue that run with --resume, replace it with --overwrite, or choose another --run-dir");
            return SL_EINVAL;
        }
        if (console)
            fprintf(console, "ps %d: %s holds %d shard checkpoint(s) of an earlier run: removing them (--overwrite)\n",
                    t->index, t->dir, nfiles);
        for (int i = 0; i < nfiles; i++)
            if (unlink(files[i]) != 0 && errno != ENOENT)
                return sl_err(SL_EIO, "cannot remove %s (an earlier run's shard checkpoint): %s", files[i],
                              strerror(errno));
    }
    for (int i = 0; i < nfiles && !*restored && !o->fresh; i++) {
        const char *path = files[i];
        if (load_shard(t, path, params, ss) == SL_OK) {
            *restored = true;
            if (console) {
                fprintf(console, "ps %d: restored %s (version %" PRId64 ")\n", t->index, path, ss->version);
                fflush(console);
            }
        } else {
            SL_WARN("ps %d: skipping shard checkpoint: %s", t->index, sl_errmsg());
            if (console) fprintf(console, "ps %d: skipping %s: %s\n", t->index, path, sl_errmsg());
        }
    }
    return SL_OK;
}

sl_status sl_ps_task_run(sl_cfg *cfg, const sl_cluster *c, const sl_strategy_ps_opts *opts, FILE *console,
                         volatile int *stop) {
    sl_strategy_ps_opts o = {0};
    if (opts) o = *opts;
    if (!c || !c->tasks || c->self < 0 || c->self >= c->ntasks || !c->ring_addrs || !c->ps_addrs)
        return sl_err(SL_EINVAL, "ps task: the cluster is not resolved");
    const sl_cluster_task *me = &c->tasks[c->self];
    if (me->type != SL_TASK_PS) {
        sl_err(SL_EINVAL, "ps task: this process is %s %d, not a ps task", sl_task_type_name(me->type), me->index);
        sl_err_hint("chief and worker tasks train with `strategy ps` hooks (sl_strategy_ps_create)");
        return SL_EINVAL;
    }
    sl_train_config tc;
    sl_model *m = NULL;
    sl_optim *probe = NULL;
    sl_ps_plan *plan = NULL;
    sl_ps_server *srv = NULL;
    const char **addrs = NULL;
    float *params = NULL;
    char **files = NULL;
    int nfiles = 0;
    ps_task t = {.index = me->index, .nworkers = c->world};
    int64_t *wsteps = NULL;
    sl_status st;
    if ((st = sl_train_config_parse(cfg, &tc))) return st;
    sl_model_opts mo = sl_model_opts_default();
    mo.backend = SL_BACKEND_CPU;
    /* a push is one memory-bound elementwise pass: more threads would only compete with
     * the workers on the same machine, unless the config asks for them */
    mo.threads = tc.threads > 0 ? tc.threads : 1;
    mo.seed = tc.seed;
    mo.max_batch = 1; /* the ps never runs a step: keep activation buffers minimal */
    if ((st = sl_model_from_config(cfg, tc.model, &mo, &m))) goto fail;
    /* the same validation and defaults as the workers' optimizer */
    if ((st = sl_optim_create(m, &tc.optim, &probe))) goto fail;
    sl_optim_free(probe);
    t.spec = tc.optim;
    if (t.spec.kind != SL_OPTIM_SGD) {
        if (t.spec.beta1 == 0.0f) t.spec.beta1 = 0.9f;
        if (t.spec.beta2 == 0.0f) t.spec.beta2 = 0.999f;
        if (t.spec.eps == 0.0f) t.spec.eps = 1e-8f;
    }
    t.bk = sl__model_backend(m);
    if ((st = model_plan(m, c->nps, &plan))) goto fail;
    if (t.index < 0 || t.index >= plan->nps) {
        st = sl_err(SL_EINVAL, "ps task %d of %d", t.index, plan->nps);
        goto fail;
    }
    t.n = plan->shard_len[t.index];
    t.plan_hash = plan->hash;
    t.nstate = t.spec.kind == SL_OPTIM_SGD ? (t.spec.momentum != 0.0f ? t.n : 0) : 2 * t.n;
    params = calloc(t.n ? t.n : 1, sizeof *params);
    wsteps = malloc((size_t)c->world * sizeof *wsteps);
    if (t.nstate) t.state = calloc(t.nstate, sizeof *t.state);
    if (!params || !wsteps || (t.nstate && !t.state)) {
        st = sl_err(SL_ENOMEM, "ps %d: out of memory for a shard of %zu floats", t.index, t.n);
        goto fail;
    }
    if (snprintf(t.dir, sizeof t.dir, "%s/ps-%d", tc.run_dir, t.index) >= (int)sizeof t.dir) {
        st = sl_err(SL_EINVAL, "ps %d: run folder name too long", t.index);
        goto fail;
    }
    if ((st = sl_mkdirs(t.dir, "ps shard folder"))) goto fail;

    /* the newest shard that loads cleanly; torn or foreign ones are skipped, not fatal: a
     * ps killed mid-run must come back with what it has */
    sl_ps_shard_state ss = {.version = 0, .worker_steps = wsteps, .nworkers = c->world};
    bool restored = false;
    if ((nfiles = sl__list_numbered(t.dir, SHARD_PREFIX, SHARD_SUFFIX, &files)) < 0) {
        st = nfiles;
        nfiles = 0;
        goto fail;
    }
    if ((st = restore_shard(&t, &o, console, files, nfiles, params, &ss, &restored))) goto fail;

    if ((st = cluster_addrs(c, &addrs))) goto fail;
    sl_tp_opts to = {.timeout_s = timeout_of(c, &o), .curve = o.curve, .job_id = c->job_id};
    sl_ps_server_ops ops = {.ctx = &t, .apply = task_apply, .save = task_save};
    sl_ps_server_opts so = {.sync = tc.ps_sync, .staleness = tc.ps_staleness, .ckpt_every_s = o.ckpt_every_s, .stop = stop,
                            .compress = tc.compress};
    if ((st = sl_ps_server_create(addrs, c->world, t.index, plan, &to, &ops, &so, restored ? params : NULL,
                                  restored ? &ss : NULL, &srv)))
        goto fail;
    if (console) {
        fprintf(console, "ps %d: serving %zu floats of %zu (plan %08" PRIx32 ") for %d workers\n", t.index, t.n,
                plan->total, plan->hash, c->world);
        fflush(console);
    }
    st = sl_ps_server_run(srv);
    if (st && st != SL_ECANCELED) goto fail;
    goto done;
fail:
    sl_err_prefix("ps task %d: ", me->index);
done:
    sl_ps_server_free(srv);
    sl_ps_plan_free(plan);
    sl_model_free(m);
    free(addrs);
    free(params);
    if (nfiles > 0) sl_train_free_list(files, nfiles);
    free(wsteps);
    free(t.state);
    return st;
}
