/* map: apply an element function to every element, on `parallelism` worker threads
 * (through the runner), in order unless deterministic is false. Parallelism 1 still uses
 * one worker thread, so the function overlaps with the consumer. Element k's randomness is
 * seeded with mix(stream seed, k).
 *
 * A function's error names the element's origin (file and record offset, when it came
 * from a file), the op and the config statement that wrote the map, then the function:
 * "data/a.tfrecord: byte 1234: op 'train/map' (job.sl:7): parse_example: ...". */
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    sl_fn *fn;
    int parallelism;  /* SL_AUTO or >= 1 */
    bool deterministic;
} map_ds;

typedef struct {
    sl__runner_iter r; /* first: the runner's iterator head */
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
    const map_ds *d = (const map_ds *)m->r.base.ds;
    sl_origin o = j->e.origin; /* (the function may leave the element half-changed) */
    /* what the element views in a file: a result computed from it (scale, cast, a decode)
     * no longer views the file, so the hand-out check could not see that its bytes were
     * zeros of a file that shrank; checked here once the function has read them */
    sl_element src;
    sl_element_share_mapped(&src, &j->e);
    sl_status s = sl__fn_apply(d->fn, &j->e, sl__mix(m->r.base.seed, (uint64_t)seq), seq, tstate);
    if (src.n && sl_element_check(&src)) s = SL_EIO; /* the bytes it read were gone: that is the error */
    else if (s < 0) sl__fn_err_context(d->base.label, d->base.where, &o);
    sl_element_clear(&src);
    if (s < 0) return s;
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

static void map_close(sl_iter *it) {
    sl__tune_detach(it);
    sl__runner_stop(((map_it *)it)->r.runner);
}

static const sl_iter_vt map_it_vt = {.next = sl__runner_iter_next, .close = map_close};

static sl_status map_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    const map_ds *d = (const map_ds *)ds;
    map_it *m = sl__iter_new(sizeof *m, &map_it_vt, ds, ctx, seed);
    if (!m) return SL_ENOMEM;
    sl_status s = sl__runner_iter_start(&m->r, &map_runner_ops, d->fn, d->parallelism, 2, 2,
                                        d->deterministic, 1);
    if (!s) *out = &m->r.base;
    return s;
}

static void map_destroy(sl_dataset *ds) { sl_fn_unref(((map_ds *)ds)->fn); }

static int64_t map_card(const sl_dataset *ds) { return sl_dataset_cardinality(ds->inputs[0]); }

static const sl_ds_vt map_vt = {.name = "map", .seek = true, .make_iter = map_make, .destroy = map_destroy,
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
    sl__ds_param(&d->base, sl_fnv1a64(SL_FNV64_INIT, sl_fn_name(fn), strlen(sl_fn_name(fn))));
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
