/* The dataset and iterator protocol shared by every op: reference counting, the next()
 * wrapper that keeps per-op stats, error labelling, seeds.
 *
 * Stats cost: the next() wrapper reads the clock twice per call and does a handful of
 * relaxed atomic adds. An op's busy time is its own: time spent inside nested next() calls
 * of its inputs on the same thread (a thread-local accumulator) and time it reported as
 * blocked on its own workers (sl__stats_waited) are subtracted. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/internal.h"
#include "sluice/crc32c.h"
#include "sluice/pool.h"

void *sl__ds_new(size_t size, const sl_ds_vt *vt, sl_dataset *const *inputs, int ninputs) {
    if (ninputs < 0 || ninputs > SL_DS_MAX_INPUTS) {
        sl_err(SL_EINVAL, "op '%s': %d inputs (at most %d)", vt->name, ninputs, SL_DS_MAX_INPUTS);
        return NULL;
    }
    for (int i = 0; i < ninputs; i++)
        if (!inputs[i]) {
            sl_err(SL_EINVAL, "op '%s': input %d is NULL", vt->name, i);
            return NULL;
        }
    sl_dataset *ds = calloc(1, size);
    if (!ds) {
        sl_err(SL_ENOMEM, "out of memory creating op '%s'", vt->name);
        return NULL;
    }
    atomic_init(&ds->refs, 1);
    ds->vt = vt;
    ds->ninputs = ninputs;
    for (int i = 0; i < ninputs; i++) ds->inputs[i] = sl_dataset_ref(inputs[i]);
    snprintf(ds->label, sizeof ds->label, "%s", vt->name);
    return ds;
}

sl_dataset *sl_dataset_ref(sl_dataset *ds) {
    if (ds) atomic_fetch_add_explicit(&ds->refs, 1, memory_order_relaxed);
    return ds;
}

void sl_dataset_unref(sl_dataset *ds) {
    if (!ds || atomic_fetch_sub_explicit(&ds->refs, 1, memory_order_acq_rel) != 1) return;
    if (ds->vt->destroy) ds->vt->destroy(ds);
    for (int i = 0; i < ds->ninputs; i++) sl_dataset_unref(ds->inputs[i]);
    free(ds);
}

const char *sl_dataset_op(const sl_dataset *ds) { return ds->vt->name; }

int64_t sl_dataset_cardinality(const sl_dataset *ds) {
    return ds->vt->cardinality ? ds->vt->cardinality(ds) : SL_UNKNOWN_CARD;
}

void sl_dataset_set_label(sl_dataset *ds, const char *label) {
    snprintf(ds->label, sizeof ds->label, "%s", label);
}

/* ---- iterators ---- */

sl_iter_opts sl_iter_opts_default(void) {
    sl_iter_opts o = {0};
    return o;
}

/* ---- the node registry ----
 * An op's make_iter calls sl__iter_new first and creates its inputs after, so the node an
 * iterator belongs to is announced in a thread-local just before make_iter runs and taken
 * by the sl__iter_new that follows. */

typedef struct {
    int parent, input;
    const sl_dataset *key;
    int64_t start; /* the iterator's sl_iter.start */
} node_key;

static _Thread_local node_key announced = {-2, 0, NULL, 0};

static sl_op_node *ctx_node(sl_ictx *ctx, node_key k, const sl_dataset *ds) {
    sl_op_node *n = NULL;
    pthread_mutex_lock(&ctx->nodes_mu);
    for (int i = 0; i < ctx->nnodes && !n; i++) {
        sl_op_node *c = ctx->nodes[i];
        if (c->parent == k.parent && c->input == k.input && c->key == k.key) n = c;
    }
    if (!n && ctx->nnodes == ctx->cap) {
        int cap = ctx->cap ? 2 * ctx->cap : 16;
        sl_op_node **nn = realloc(ctx->nodes, sizeof *nn * (size_t)cap);
        if (nn) {
            ctx->nodes = nn;
            ctx->cap = cap;
        }
    }
    if (!n && ctx->nnodes < ctx->cap && (n = calloc(1, sizeof *n))) {
        n->id = ctx->nnodes;
        n->parent = k.parent;
        n->input = k.input;
        n->key = k.key;
        snprintf(n->label, sizeof n->label, "%s", ds->label);
        snprintf(n->op, sizeof n->op, "%s", ds->vt->name);
        n->stats.label = n->label;
        pthread_mutex_init(&n->tune_mu, NULL);
        n->hist_every = 1;
        ctx->nodes[ctx->nnodes++] = n;
    }
    pthread_mutex_unlock(&ctx->nodes_mu);
    return n;
}

static sl_status make_announced(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, node_key k, sl_iter **out) {
    *out = NULL;
    if (k.start && !ds->vt->seek)
        return sl_err(SL_EUNSUPPORTED, "op '%s' (%s) cannot start at element %lld without producing the ones "
                      "before it", ds->label, ds->vt->name, (long long)k.start);
    node_key saved = announced;
    announced = k;
    sl_status s = ds->vt->make_iter(ds, ctx, seed, out);
    announced = saved;
    return s;
}

void *sl__iter_new(size_t size, const sl_iter_vt *vt, sl_dataset *ds, sl_ictx *ctx, uint64_t seed) {
    node_key k = announced;
    announced.parent = -2; /* consumed: the inputs announce their own */
    if (k.parent == -2) k = (node_key){-1, 0, ds}; /* not announced: a root of its own */
    sl_iter *it = calloc(1, size);
    sl_op_node *node = it ? ctx_node(ctx, k, ds) : NULL;
    if (!node) {
        free(it);
        sl_err(SL_ENOMEM, "out of memory creating an iterator for op '%s'", ds->label);
        return NULL;
    }
    it->vt = vt;
    it->ds = sl_dataset_ref(ds);
    it->ctx = ctx;
    it->seed = seed;
    it->node = node;
    it->stats = &node->stats;
    it->start = k.start;
    return it;
}

sl_status sl__iter_make(sl_iter *parent, sl_dataset *ds, uint64_t seed, sl_iter **out) {
    return make_announced(ds, parent->ctx, seed, (node_key){parent->node->id, -1, NULL}, out);
}

sl_status sl__iter_make_at(sl_iter *parent, sl_dataset *ds, uint64_t seed, int64_t start, sl_iter **out) {
    return make_announced(ds, parent->ctx, seed, (node_key){parent->node->id, -1, NULL, start}, out);
}

int64_t sl__ds_count(sl_dataset *ds) {
    int64_t c = sl_dataset_cardinality(ds);
    if (c == SL_UNKNOWN_CARD && ds->vt->count) c = ds->vt->count(ds);
    return c;
}

sl_status sl__iter_input(sl_dataset *ds, int i, sl_ictx *ctx, uint64_t seed, uint64_t salt,
                         sl_iter **out) {
    return sl__iter_input_at(ds, i, ctx, seed, salt, 0, out);
}

sl_status sl__iter_input_at(sl_dataset *ds, int i, sl_ictx *ctx, uint64_t seed, uint64_t salt, int64_t start,
                            sl_iter **out) {
    /* the parent's node: the most recent node of ds (its iterator is being made now) */
    int parent = -1;
    pthread_mutex_lock(&ctx->nodes_mu);
    for (int k = ctx->nnodes - 1; k >= 0 && parent < 0; k--)
        if (ctx->nodes[k]->key == ds || (ctx->nodes[k]->key == NULL && !strcmp(ctx->nodes[k]->label, ds->label)))
            parent = k;
    pthread_mutex_unlock(&ctx->nodes_mu);
    return make_announced(ds->inputs[i], ctx, sl__child_seed(seed, salt), (node_key){parent, i, ds->inputs[i], start},
                          out);
}

static void free_ctx(sl_ictx *ctx) {
    if (!ctx) return;
    for (int i = 0; i < ctx->nnodes; i++) {
        pthread_mutex_destroy(&ctx->nodes[i]->tune_mu);
        free(ctx->nodes[i]);
    }
    free(ctx->nodes);
    pthread_mutex_destroy(&ctx->nodes_mu);
    pthread_mutex_destroy(&ctx->cancel_mu);
    free(ctx);
}

static sl_status create_at(sl_dataset *ds, const sl_iter_opts *opts, int64_t start, sl_iter **out) {
    *out = NULL;
    if (!ds) return sl_err(SL_EINVAL, "sl_iter_create: dataset is NULL");
    sl__clock_init();
    sl_ictx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return sl_err(SL_ENOMEM, "out of memory creating an iterator");
    ctx->opts = opts ? *opts : sl_iter_opts_default();
    atomic_init(&ctx->cancelled, false);
    pthread_mutex_init(&ctx->cancel_mu, NULL);
    atomic_init(&ctx->errors_ignored, 0);
    atomic_init(&ctx->refilled, 0);
    int ncpu = sl_cpu_count();
    /* an explicit budget is honoured even above the core count (the caller asked for it) */
    ctx->ncpu = ctx->opts.cpu_budget > 0 ? ctx->opts.cpu_budget : ncpu;
    ctx->ram_budget_given = ctx->opts.ram_budget > 0;
    if (ctx->opts.ram_budget <= 0) {
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        ctx->opts.ram_budget = pages > 0 && psize > 0 ? (int64_t)pages * psize / 4 : (int64_t)1 << 30;
    }
    ctx->start_ns = sl_now_ns();
    pthread_mutex_init(&ctx->nodes_mu, NULL);
    sl_iter *it;
    sl_status s = make_announced(ds, ctx, ctx->opts.seed, (node_key){-1, 0, ds, start}, &it);
    if (s) {
        free_ctx(ctx);
        return s;
    }
    it->owns_ctx = true;
    sl__tuner_start(ctx);
    *out = it;
    return SL_OK;
}

sl_status sl_iter_create(sl_dataset *ds, const sl_iter_opts *opts, sl_iter **out) {
    return create_at(ds, opts, 0, out);
}

sl_status sl_iter_create_at(sl_dataset *ds, const sl_iter_opts *opts, int64_t start, sl_iter **out) {
    *out = NULL;
    if (start < 0) return sl_err(SL_EINVAL, "sl_iter_create_at: start %lld must be >= 0", (long long)start);
    sl_status s = create_at(ds, opts, start, out);
    if (s != SL_EUNSUPPORTED || start == 0) return s;
    /* some op cannot seek: from the beginning, dropping what comes before start */
    sl_err_clear();
    sl_iter *it;
    if ((s = create_at(ds, opts, 0, &it))) return s;
    sl_element e;
    sl_element_init(&e);
    while (it->replayed < start) {
        s = sl__iter_next(it, &e);
        if (s == SL_END) break;
        if (s) {
            sl_iter_close(it);
            return s;
        }
        sl_element_clear(&e);
        it->replayed++;
    }
    it->start = it->replayed;
    *out = it;
    return SL_OK;
}

int64_t sl_iter_position(const sl_iter *it) { return it ? it->start + it->given : 0; }

int64_t sl_iter_replayed(const sl_iter *it) { return it ? it->replayed : 0; }

int64_t sl_iter_refilled(const sl_iter *it) { return it ? (int64_t)atomic_load(&it->ctx->refilled) : 0; }

/* The graph: each op's name, input count and (version 2) the parameters it mixed in with
 * sl__ds_param, depth first. Version 1 states (before parameters) have the shape only. */
static uint64_t fingerprint_v(const sl_dataset *ds, int version) {
    uint64_t h = sl_mix2(sl_fnv1a64(SL_FNV64_INIT, ds->vt->name, strlen(ds->vt->name)), (uint64_t)ds->ninputs);
    if (version >= 2) h = sl_mix2(h, ds->params);
    for (int i = 0; i < ds->ninputs; i++) h = sl_mix2(h, fingerprint_v(ds->inputs[i], version));
    return h;
}

static uint64_t fingerprint(const sl_dataset *ds) { return fingerprint_v(ds, 2); }

sl_status sl_iter_save(const sl_iter *it, uint8_t *buf, size_t cap, size_t *len) {
    if (len) *len = 0;
    if (!it || !buf || !len) return sl_err(SL_EINVAL, "sl_iter_save: NULL argument");
    if (cap < SL_ITER_STATE_SIZE)
        return sl_err(SL_ERANGE, "sl_iter_save: a state takes %d bytes, the buffer has %zu", SL_ITER_STATE_SIZE, cap);
    /* An error consumes its input, so the stream after it is no longer what a position
     * names: a batch keeps the rows gathered before a failed one, an op that cannot go on
     * ends early. A state would resume it elsewhere than it stands, silently. */
    if (it->errors) {
        sl_err(SL_EUNSUPPORTED,
               "sl_iter_save: this iterator returned %lld error%s (and %lld elements): its position no longer "
               "names its place in the stream, so a state would resume it elsewhere",
               (long long)it->errors, it->errors == 1 ? "" : "s", (long long)sl_iter_position(it));
        sl_err_hint("skip bad input inside the pipeline (ignore_errors, or files ... skip_corrupt=true) to keep "
                    "it resumable, or start a new iterator");
        return SL_EUNSUPPORTED;
    }
    memset(buf, 0, SL_ITER_STATE_SIZE);
    memcpy(buf, "SLITSTAT", 8);
    sl_store_le32(buf + 8, 2);
    sl_store_le32(buf + 12, SL_ITER_STATE_SIZE);
    sl_store_le64(buf + 16, it->ctx->opts.seed);
    sl_store_le64(buf + 24, (uint64_t)sl_iter_position(it));
    sl_store_le64(buf + 32, fingerprint(it->ds));
    sl_store_le32(buf + 44, sl_crc32c(0, buf, 44));
    *len = SL_ITER_STATE_SIZE;
    return SL_OK;
}

sl_status sl_iter_restore(sl_dataset *ds, const sl_iter_opts *opts, const uint8_t *st, size_t len, sl_iter **out) {
    *out = NULL;
    if (!ds || !st) return sl_err(SL_EINVAL, "sl_iter_restore: NULL argument");
    if (len < 16 || memcmp(st, "SLITSTAT", 8))
        return sl_err(SL_ECORRUPT, "iterator state: byte 0: not an iterator state (%zu bytes, no SLITSTAT magic)", len);
    uint32_t ver = sl_load_le32(st + 8), size = sl_load_le32(st + 12);
    if (ver != 1 && ver != 2)
        return sl_err(SL_ECORRUPT, "iterator state: byte 8: version %u (this Sluice reads 1 and 2)", ver);
    if (size != SL_ITER_STATE_SIZE || len != size)
        return sl_err(SL_ECORRUPT, "iterator state: byte 12: size %u, %zu bytes given (want %d)", size, len,
                      SL_ITER_STATE_SIZE);
    uint32_t crc = sl_load_le32(st + 44), want = sl_crc32c(0, st, 44);
    if (crc != want) return sl_err(SL_ECORRUPT, "iterator state: byte 44: checksum %08x, the bytes give %08x", crc, want);
    int64_t pos = (int64_t)sl_load_le64(st + 24);
    uint64_t fp = sl_load_le64(st + 32);
    if (pos < 0) return sl_err(SL_ECORRUPT, "iterator state: byte 24: position %lld is negative", (long long)pos);
    uint64_t mine = fingerprint_v(ds, (int)ver);
    if (fp != mine) {
        sl_err(SL_EINVAL, "iterator state: saved from another pipeline (fingerprint %016llx, this one %016llx)",
               (unsigned long long)fp, (unsigned long long)mine);
        sl_err_hint("restore a state into the pipeline that saved it: the same ops with the same parameters "
                    "(shuffle buffers and seeds, take/skip/repeat counts, ranges, windows, interleave cycles, "
                    "map functions); only the replica count, its shard and its share of the batch may differ");
        return SL_EINVAL;
    }
    sl_iter_opts o = opts ? *opts : sl_iter_opts_default();
    o.seed = sl_load_le64(st + 16);
    return sl_iter_create_at(ds, &o, pos, out);
}

size_t sl__tensors_bytes(const sl_tensor *t, int n) {
    size_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += sl_tensor_nbytes(&t[i]);
    return bytes;
}

size_t sl__element_bytes(const sl_element *e) { return sl__tensors_bytes(e->t, e->n); }

void *sl__slab_piece(sl_buf **slab, int *used, size_t piece, int count) {
    if (!*slab || *used >= count) {
        sl_buf_unref(*slab);
        *used = 0;
        if (!(*slab = sl_buf_new(piece * (size_t)count))) return NULL;
    }
    return (char *)(*slab)->data + piece * (size_t)(*used)++;
}

/* Time spent in sl__iter_next calls nested in the current one on this thread, and time the
 * current op reported as blocked on its own workers: both are subtracted from its busy
 * time. */
static _Thread_local uint64_t tl_inner_ns, tl_waited_ns;

void sl__stats_waited(uint64_t ns) { tl_waited_ns += ns; }

static void peak_max(atomic_llong *peak, long long v) {
    long long p = atomic_load_explicit(peak, memory_order_relaxed);
    while (v > p && !atomic_compare_exchange_weak_explicit(peak, &p, v, memory_order_relaxed,
                                                           memory_order_relaxed)) {
    }
}

void sl__stats_buffered_bytes(sl_ictx *ctx, sl_op_stats *st, long long delta) {
    long long n = atomic_fetch_add_explicit(&st->buffered_bytes, delta, memory_order_relaxed) + delta;
    long long c = atomic_fetch_add_explicit(&ctx->buffered_bytes, delta, memory_order_relaxed) + delta;
    if (delta > 0) {
        peak_max(&st->buffered_bytes_peak, n);
        peak_max(&ctx->buffered_bytes_peak, c);
    }
}

bool sl__ram_full(const sl_iter *it, int held) {
    if (held <= 0 || !(it->node->auto_buf || it->node->auto_par)) return false;
    return atomic_load_explicit(&it->ctx->buffered_bytes, memory_order_relaxed) >= it->ctx->opts.ram_budget;
}

sl_status sl__iter_next(sl_iter *it, sl_element *out) {
    if (it->ended) return SL_END;
    if (atomic_load_explicit(&it->ctx->cancelled, memory_order_relaxed))
        return sl_err(SL_ECANCELED, "op '%s': iterator was closed", it->ds->label);
#ifdef SL_STATS_OFF /* only to measure what the stats cost (docs/guides/performance.md: "The cost of the stats") */
    sl_status s0 = it->vt->next(it, out);
    if (s0 == SL_END) it->ended = true;
    else if (s0 < 0) sl_element_clear(out);
    return s0;
#endif
    uint64_t inner0 = tl_inner_ns, waited0 = tl_waited_ns;
    tl_inner_ns = tl_waited_ns = 0;
    uint64_t t0 = sl__now_fast();
    sl_status s = it->vt->next(it, out);
    uint64_t dt = sl__now_fast() - t0;
    uint64_t inner = tl_inner_ns, waited = tl_waited_ns;
    tl_inner_ns = inner0 + dt;
    tl_waited_ns = waited0;
    sl_op_stats *st = it->stats;
    long long own = (long long)dt - (long long)inner - (long long)waited;
    atomic_fetch_add_explicit(&st->busy_ns, own > 0 ? own : 0, memory_order_relaxed);
    if (inner) atomic_fetch_add_explicit(&st->wait_ns, (long long)inner, memory_order_relaxed);
    if (waited) atomic_fetch_add_explicit(&st->stall_ns, (long long)waited, memory_order_relaxed);
    if (it->owns_ctx) atomic_fetch_add_explicit(&it->ctx->root_next_ns, (long long)dt, memory_order_relaxed);
    if (atomic_load_explicit(&it->ctx->trace, memory_order_relaxed))
        sl__trace_event(it->ctx, it->node->label, "next", t0, dt);
    if (s == SL_OK) {
        atomic_fetch_add_explicit(&st->elements, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&st->bytes, (long long)sl__element_bytes(out), memory_order_relaxed);
    } else if (s == SL_END) {
        it->ended = true;
    } else {
        atomic_fetch_add_explicit(&st->errors, 1, memory_order_relaxed);
        sl_element_clear(out);
    }
    return s;
}

sl_status sl_iter_next(sl_iter *it, sl_element *out) {
    if (!it || !out) return sl_err(SL_EINVAL, "sl_iter_next: NULL argument");
    sl_status s = sl__iter_next(it, out);
    if (s == SL_OK) it->given++;
    else if (s != SL_END) it->errors++;
    /* The last moment before the caller reads it: an element that waited in a buffer (or a
     * cache replay) viewing a file that shrank since its record was checked is an error,
     * not zeros. Bytes lost after this are the caller's to ask about (sl_element_check). */
    if (s == SL_OK && (s = sl_element_check(out))) {
        sl_element_clear(out);
        it->errors++;
    }
    return s;
}

void sl__iter_close(sl_iter *it) {
    if (!it) return;
    if (it->owns_ctx) {
        sl_ictx *c = it->ctx;
        pthread_mutex_lock(&c->cancel_mu);
        atomic_store(&c->cancelled, true);
        for (sl__cancel_hook *h = c->cancel_hooks; h; h = h->next) h->fn(h->arg);
        pthread_mutex_unlock(&c->cancel_mu);
        sl__tuner_stop(it->ctx); /* before the iterators it tunes go away */
    }
    if (it->vt->close) it->vt->close(it);
    sl_ictx *ctx = it->owns_ctx ? it->ctx : NULL;
    if (ctx) sl__trace_finish(ctx);
    sl_dataset_unref(it->ds);
    free(it);
    free_ctx(ctx);
}

void sl_iter_close(sl_iter *it) { sl__iter_close(it); }

int64_t sl_iter_errors_ignored(const sl_iter *it) {
    return atomic_load(&it->ctx->errors_ignored);
}

sl_status sl__op_err(const sl_iter *it, sl_status code, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sl_err(code, "op '%s': %s", it->ds->label, msg);
}

void sl__op_err_prefix(const sl_iter *it) { sl_err_prefix("op '%s': ", it->ds->label); }

/* ---- cancellation hooks ---- */

void sl__cancel_register(sl_ictx *ctx, sl__cancel_hook *h, void (*fn)(void *), void *arg) {
    pthread_mutex_lock(&ctx->cancel_mu);
    h->fn = fn;
    h->arg = arg;
    h->prev = NULL;
    h->next = ctx->cancel_hooks;
    if (h->next) h->next->prev = h;
    ctx->cancel_hooks = h;
    if (atomic_load(&ctx->cancelled)) fn(arg);
    pthread_mutex_unlock(&ctx->cancel_mu);
}

void sl__cancel_unregister(sl_ictx *ctx, sl__cancel_hook *h) {
    if (!h->fn) return;
    pthread_mutex_lock(&ctx->cancel_mu);
    if (h->prev) h->prev->next = h->next;
    else ctx->cancel_hooks = h->next;
    if (h->next) h->next->prev = h->prev;
    h->fn = NULL;
    pthread_mutex_unlock(&ctx->cancel_mu);
}

/* ---- seeds ---- */

uint64_t sl__rng_below(sl_rng *r, uint64_t n) {
    /* Lemire's multiply-shift with rejection */
    uint64_t x = sl__rng_u64(r);
    __uint128_t m = (__uint128_t)x * n;
    uint64_t lo = (uint64_t)m;
    if (lo < n) {
        uint64_t t = -n % n;
        while (lo < t) {
            x = sl__rng_u64(r);
            m = (__uint128_t)x * n;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}
