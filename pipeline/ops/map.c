/* map: apply an element function to every element, on `parallelism` worker threads
 * (through the runner), in order unless deterministic is false. Parallelism 1 still uses
 * one worker thread, so the function overlaps with the consumer. Element k's randomness is
 * seeded with mix(stream seed, k).
 *
 * A function's error names the element's origin (file and record offset, when it came
 * from a file), the op and the config statement that wrote the map, then the function:
 * "data/a.tfrecord: byte 1234: op 'train/map' (job.sl:7): parse_example: ...". */
#include <stdlib.h>

#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    sl_fn *fn;
    int parallelism;  /* SL_AUTO or >= 1 */
    bool deterministic;
} map_ds;

typedef struct {
    sl_iter base;
    sl_runner *runner;
} map_it;

typedef struct {
    sl_element e;
} map_job;

static sl_status map_fetch(void *op, sl_iter *in, int64_t seq, void *job, bool *last) {
    map_job *j = job;
    sl_element_init(&j->e);
    return sl__iter_next(in, &j->e);
}

static sl_status map_work(void *op, void *job, int64_t seq, void *tstate, sl_element *out) {
    map_it *m = op;
    map_job *j = job;
    const map_ds *d = (const map_ds *)m->base.ds;
    sl_origin o = j->e.origin; /* (the function may leave the element half-changed) */
    sl_status s = sl__fn_apply(d->fn, &j->e, sl__mix(m->base.seed, (uint64_t)seq), seq, tstate);
    if (s < 0) {
        sl__fn_err_context(d->base.label, d->base.where, &o);
        return s;
    }
    sl_element_move(out, &j->e);
    return SL_OK;
}

static void map_job_clear(void *op, void *job) { sl_element_clear(&((map_job *)job)->e); }

static const sl_runner_ops map_runner_ops = {
    .job_size = sizeof(map_job),
    .fetch = map_fetch,
    .work = map_work,
    .job_clear = map_job_clear,
};

static sl_status map_next(sl_iter *it, sl_element *out) {
    return sl__runner_next(((map_it *)it)->runner, out);
}

static void map_close(sl_iter *it) {
    sl__tune_detach(it);
    sl__runner_stop(((map_it *)it)->runner);
}

static void map_set_par(sl_iter *it, int p) { sl__runner_set_parallelism(((map_it *)it)->runner, p); }
static void map_set_buf(sl_iter *it, int b) { sl__runner_set_capacity(((map_it *)it)->runner, b); }
static const sl_tune_ops map_tune = {.set_parallelism = map_set_par, .set_buffer = map_set_buf};

static const sl_iter_vt map_it_vt = {.next = map_next, .close = map_close};

static sl_status map_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    const map_ds *d = (const map_ds *)ds;
    map_it *m = sl__iter_new(sizeof *m, &map_it_vt, ds, ctx, seed);
    if (!m) return SL_ENOMEM;
    sl_iter *in;
    sl_status s = sl__iter_input(ds, 0, ctx, seed, 0, &in);
    if (s) {
        sl__iter_close(&m->base);
        return s;
    }
    /* auto: threads for twice the CPU budget (idle ones sleep: the tuner may run more threads
     * than cores when they are descheduled, see autotune.c); start where the tuner left the
     * node (a later epoch), else at the budget */
    bool aut = d->parallelism == SL_AUTO;
    int threads = aut ? 2 * ctx->ncpu : d->parallelism;
    int par = aut ? ctx->ncpu : threads, cap = 2 * par + 2;
    if (aut && atomic_load(&m->base.stats->parallelism) > 0) {
        par = atomic_load(&m->base.stats->parallelism);
        cap = atomic_load(&m->base.stats->buffer);
    }
    atomic_store(&m->base.node->auto_par, aut); /* before the workers: the RAM budget applies */
    atomic_store(&m->base.node->auto_buf, aut);
    s = sl__runner_start(&map_runner_ops, m, &m->base, in, d->fn, threads, par, cap,
                         d->deterministic, &m->runner);
    if (s) {
        sl__iter_close(&m->base);
        return s;
    }
    sl__tune_attach(&m->base, aut, aut, threads, &map_tune);
    *out = &m->base;
    return SL_OK;
}

static void map_destroy(sl_dataset *ds) { sl_fn_unref(((map_ds *)ds)->fn); }

static int64_t map_card(const sl_dataset *ds) { return sl_dataset_cardinality(ds->inputs[0]); }

static const sl_ds_vt map_vt = {.name = "map", .make_iter = map_make, .destroy = map_destroy,
                                .cardinality = map_card};

sl_status sl_ds_map(sl_dataset *in, sl_fn *fn, int parallelism, bool deterministic, sl_dataset **out) {
    *out = NULL;
    if (!fn) return sl_err(SL_EINVAL, "map: function is NULL");
    if (parallelism != SL_AUTO && (parallelism < 1 || parallelism > 256))
        return sl_err(SL_EINVAL, "map: parallelism %d must be 1..256 or auto", parallelism);
    map_ds *d = sl__ds_new(sizeof *d, &map_vt, &in, 1);
    if (!d) return sl_errcode();
    d->fn = sl_fn_ref(fn);
    d->parallelism = parallelism;
    d->deterministic = deterministic;
    *out = &d->base;
    return SL_OK;
}

bool sl__ds_as_map(const sl_dataset *ds, sl_fn **fn, int *parallelism, bool *deterministic) {
    if (ds->vt != &map_vt) return false;
    const map_ds *d = (const map_ds *)ds;
    *fn = d->fn;
    *parallelism = d->parallelism;
    *deterministic = d->deterministic;
    return true;
}
