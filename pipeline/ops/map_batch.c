/* map_batch: map fused with batch. Each unit of parallel work is one whole batch: a worker
 * fetches `size` input elements, applies the function to each and writes every numeric
 * component straight into its slot of the batch tensors (allocated from the first mapped
 * element's shapes), so a mapped element never waits in a queue. From the second element
 * on, the functions are offered the element's slot (sl__fn_batch_slot, sl__fn_out_alloc):
 * scale writes its result there, decode_jpeg builds its fused crop there, and the copy finds
 * it in place. Element k of batch b is
 * seeded as element b*size+k of a plain map would be, so the output equals map then batch.
 *
 * An input error while gathering a batch is returned in order, and the elements already
 * gathered are carried into the next batch (nothing lost). A function error fails the
 * whole batch; put ignore_errors between map and batch to skip single elements instead
 * (that pipeline is not fused). A function's error names the element's origin and the map
 * it was fused from, as map's do (sl__fn_err_context). An element whose bytes (viewed in a
 * file mapping when it reached the batch) were lost to the file shrinking fails the batch
 * with SL_EIO naming its record (sl_element_check), checked after its slot is written, so
 * neither the function's result nor the copy can carry the zeros out as data.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    sl_fn *fn;
    sl_batch_opts opts;
    char fn_label[64];  /* the map this was fused from ("" when made directly) */
    char fn_where[128]; /* and its config statement */
} mb_ds;

typedef struct {
    sl__runner_iter r; /* first: the runner's iterator head */
    sl_element *carry; /* elements fetched before an input error; guarded by the runner's input lock */
    int ncarry, carry_cap;
    atomic_bool planned; /* the batch's memory plan was checked (by the first batch allocated) */
} mb_it;

typedef struct {
    sl_element *elems; /* the batch's elements: grows up to opts.size */
    int cap;
    int n;
} mb_job;

static sl_status mb_fetch(void *op, sl_iter *in, int64_t seq, void *job, bool *last) {
    mb_it *m = op;
    mb_job *j = job;
    const mb_ds *d = (const mb_ds *)m->r.base.ds;
    int size = (int)d->opts.size;
    j->n = 0;
    sl_status rs = sl__elems_reserve(&j->elems, &j->cap, m->ncarry);
    if (rs) return rs;
    for (int k = 0; k < m->ncarry; k++) sl_element_move(&j->elems[j->n++], &m->carry[k]);
    m->ncarry = 0;
    while (j->n < size) {
        sl_status s = sl__elems_reserve(&j->elems, &j->cap, j->n + 1);
        if (s) return s; /* (the elements gathered so far stay in the job: job_clear frees them) */
        s = sl__iter_next(in, &j->elems[j->n]);
        if (s == SL_OK) {
            j->n++;
            continue;
        }
        if (s == SL_END) {
            *last = true;
            if (j->n == 0 || d->opts.drop_remainder) {
                for (int k = 0; k < j->n; k++) sl_element_clear(&j->elems[k]);
                j->n = 0;
                return SL_END;
            }
            return SL_OK;
        }
        /* an input error: keep what we have for the next batch, report the error now */
        if (sl__elems_reserve(&m->carry, &m->carry_cap, j->n) != SL_OK) {
            for (int k = 0; k < j->n; k++) sl_element_clear(&j->elems[k]);
            j->n = 0;
            return s; /* no room to keep them: they are lost with the error */
        }
        for (int k = 0; k < j->n; k++) sl_element_move(&m->carry[m->ncarry++], &j->elems[k]);
        j->n = 0;
        return s;
    }
    return SL_OK;
}

/* Allocate the batch tensors from the first mapped element; the first batch checks the
 * memory plan of a batch of `size` such elements. */
static sl_status alloc_batch(mb_it *m, const sl_element *e0, int n, sl_element *out) {
    if (!atomic_exchange_explicit(&m->planned, true, memory_order_relaxed)) {
        size_t each = 0;
        for (int c = 0; c < e0->n; c++)
            if (e0->t[c].dtype != SL_DT_BYTES) each += sl_tensor_nbytes(&e0->t[c]);
        sl_status s = sl__buffer_fits(&m->r.base, "batch", ((const mb_ds *)m->r.base.ds)->opts.size, each,
                                      "a smaller `batch N`, or smaller elements (resize or crop before batching)");
        if (s) return s;
    }
    for (int c = 0; c < e0->n; c++) {
        const sl_tensor *t = &e0->t[c];
        if (t->dtype == SL_DT_BYTES) continue; /* stacked at the end */
        if (t->rank >= SL_MAX_RANK)
            return sl__op_err(&m->r.base, SL_EINVAL, "component '%s' has rank %d: too many to batch",
                              e0->names[c], t->rank);
        int64_t dims[SL_MAX_RANK];
        dims[0] = n;
        for (int d = 0; d < t->rank; d++) dims[d + 1] = t->dims[d];
        sl_tensor bt;
        sl_status s = sl_tensor_alloc(&bt, t->dtype, t->rank + 1, dims);
        if (!s) s = sl_element_set(out, e0->names[c], &bt);
        if (s) {
            sl_tensor_release(&bt);
            return s;
        }
    }
    return SL_OK;
}

/* Copy element k's numeric components into their slots; keep bytes components in *hold. */
static sl_status write_slot(const mb_it *m, sl_element *e, int k, sl_element *out, sl_element *hold) {
    char b1[96], b2[96];
    int numeric = 0;
    for (int c = 0; c < e->n; c++) {
        sl_tensor *t = &e->t[c];
        if (t->dtype == SL_DT_BYTES) {
            sl_status s = sl_element_set(hold, e->names[c], t);
            if (s) return s;
            continue;
        }
        numeric++;
        int bi = sl_element_find(out, e->names[c]);
        if (bi < 0)
            return sl__op_err(&m->r.base, SL_EINVAL, "element %d of the batch has a component '%s' the first lacks",
                              k, e->names[c]);
        sl_tensor *bt = &out->t[bi];
        bool ok = bt->dtype == t->dtype && bt->rank == t->rank + 1;
        for (int d = 0; ok && d < t->rank; d++) ok = bt->dims[d + 1] == t->dims[d];
        if (!ok) {
            sl_tensor row = *bt;
            row.rank = bt->rank - 1;
            memmove(row.dims, bt->dims + 1, sizeof(int64_t) * (size_t)row.rank);
            sl__op_err(&m->r.base, SL_EINVAL, "component '%s' is %s in element 0 but %s in element %d of the batch",
                       e->names[c], sl_tensor_describe(&row, b1, sizeof b1), sl_tensor_describe(t, b2, sizeof b2), k);
            sl_err_hint("resize or crop to one shape before batching, or use a padded batch");
            if (e->origin.path) sl_err_prefix("%s: byte %lld: ", e->origin.path, (long long)e->origin.offset);
            return SL_EINVAL;
        }
        size_t per = sl_tensor_nbytes(t);
        char *dst = (char *)bt->data + per * (size_t)k;
        if (t->data != dst) memcpy(dst, t->data, per); /* (else written there: sl__fn_out_alloc) */
    }
    int expect = 0;
    for (int c = 0; c < out->n; c++) expect++;
    if (numeric != expect)
        return sl__op_err(&m->r.base, SL_EINVAL, "element %d of the batch has %d numeric components, the first has %d",
                          k, numeric, expect);
    return SL_OK;
}

static sl_status mb_work(void *op, void *job, int64_t seq, void *tstate, sl_element *out) {
    mb_it *m = op;
    mb_job *j = job;
    const mb_ds *d = (const mb_ds *)m->r.base.ds;
    sl_element *holds = NULL; /* bytes components, per element */
    sl_status s = SL_OK;
    for (int k = 0; k < j->n && !s; k++) {
        int64_t index = seq * d->opts.size + k;
        /* the seed a map under a batch would have: its stream seed is the batch's child 0 */
        uint64_t map_seed = sl__child_seed(m->r.base.seed, 0);
        sl_origin o = j->elems[k].origin;
        sl__fn_dest dest = {out, k}; /* element 0 is mapped before the batch is allocated */
        sl_element src; /* what the element views in a file: checked once it is in its slot */
        sl_element_share_mapped(&src, &j->elems[k]);
        s = sl__fn_apply_to(d->fn, &j->elems[k], sl__mix(map_seed, (uint64_t)index), index, tstate,
                            k ? &dest : NULL);
        if (s < 0) {
            /* a function that failed on zeros a shrunk file left: that is the error to report */
            if (sl_element_check(&src)) s = SL_EIO;
            else if (d->fn_label[0]) sl__fn_err_context(d->fn_label, d->fn_where, &o);
            else sl__fn_err_context(d->base.label, d->base.where, &o);
            sl_element_clear(&src);
            break;
        }
        if (k == 0) {
            s = alloc_batch(m, &j->elems[0], j->n, out);
            for (int c = 0; !s && c < j->elems[0].n; c++)
                if (j->elems[0].t[c].dtype == SL_DT_BYTES && !holds) {
                    holds = calloc((size_t)j->n, sizeof *holds);
                    if (!holds) s = sl_err(SL_ENOMEM, "out of memory batching");
                }
            if (s) {
                sl_element_clear(&src);
                break;
            }
        }
        sl_element dummy;
        sl_element_init(&dummy);
        s = write_slot(m, &j->elems[k], k, out, holds ? &holds[k] : &dummy);
        if (holds) holds[k].origin = o; /* its strings are checked again once stacked */
        sl_element_clear(&dummy);
        sl_element_clear(&j->elems[k]); /* numeric data copied out: free it now */
        /* after the copy: bytes the function or the copy read from a shrunk file were zeros */
        if (!s) s = sl_element_check(&src);
        sl_element_clear(&src);
    }
    if (!s && holds) {
        sl_element bytes;
        sl_element_init(&bytes);
        s = sl__stack(holds, j->n, &d->opts, m->r.base.ds->label, &bytes);
        for (int k = 0; !s && k < j->n; k++) s = sl_element_check(&holds[k]);
        for (int c = 0; !s && c < bytes.n; c++) s = sl_element_set(out, bytes.names[c], &bytes.t[c]);
        sl_element_clear(&bytes);
    }
    if (holds) {
        for (int k = 0; k < j->n; k++) sl_element_clear(&holds[k]);
        free(holds);
    }
    return s;
}

static void mb_job_clear(void *op, void *job) {
    mb_job *j = job;
    for (int k = 0; k < j->n; k++) sl_element_clear(&j->elems[k]);
    j->n = 0;
}

static void mb_job_free(void *op, void *job) { free(((mb_job *)job)->elems); }

static const sl_runner_ops mb_runner_ops = {
    .job_size = sizeof(mb_job),
    .fetch = mb_fetch,
    .work = mb_work,
    .job_clear = mb_job_clear,
    .job_free = mb_job_free,
};

static void mb_close(sl_iter *it) {
    mb_it *m = (mb_it *)it;
    sl__tune_detach(it);
    sl__runner_stop(m->r.runner);
    for (int k = 0; k < m->ncarry; k++) sl_element_clear(&m->carry[k]);
    free(m->carry);
}

static const sl_iter_vt mb_it_vt = {.next = sl__runner_iter_next, .close = mb_close};

static sl_status mb_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    const mb_ds *d = (const mb_ds *)ds;
    mb_it *m = sl__iter_new(sizeof *m, &mb_it_vt, ds, ctx, seed);
    if (!m) return SL_ENOMEM;
    sl_status s = sl__runner_iter_start(&m->r, &mb_runner_ops, d->fn, d->opts.parallelism, 1, 1,
                                        d->opts.deterministic, d->opts.size);
    if (!s) *out = &m->r.base;
    return s;
}

static void mb_destroy(sl_dataset *ds) { sl_fn_unref(((mb_ds *)ds)->fn); }

static int64_t mb_card(const sl_dataset *ds) {
    return sl__batch_card(ds->inputs[0], &((const mb_ds *)ds)->opts);
}

static const sl_ds_vt mb_vt = {.name = "map_batch", .seek = true, .make_iter = mb_make, .destroy = mb_destroy,
                               .cardinality = mb_card};

void sl__map_batch_set_fn_site(sl_dataset *ds, const char *label, const char *where) {
    if (ds->vt != &mb_vt) return;
    mb_ds *d = (mb_ds *)ds;
    snprintf(d->fn_label, sizeof d->fn_label, "%s", label ? label : "");
    snprintf(d->fn_where, sizeof d->fn_where, "%s", where ? where : "");
}

sl_status sl_ds_map_batch(sl_dataset *in, sl_fn *fn, const sl_batch_opts *opts, sl_dataset **out) {
    *out = NULL;
    if (!fn) return sl_err(SL_EINVAL, "map_batch: function is NULL");
    if (!opts || opts->size < 1 || opts->size > (1 << 24))
        return sl_err(SL_EINVAL, "map_batch: size must be 1..16777216");
    if (opts->padded) return sl_err(SL_EINVAL, "map_batch: padded batches are not fused; use map then batch");
    if (opts->parallelism != SL_AUTO && (opts->parallelism < 1 || opts->parallelism > 256))
        return sl_err(SL_EINVAL, "map_batch: parallelism %d must be 1..256 or auto", opts->parallelism);
    mb_ds *d = sl__ds_new(sizeof *d, &mb_vt, &in, 1);
    if (!d) return sl_errcode();
    d->fn = sl_fn_ref(fn);
    d->opts = *opts;
    sl__ds_param(&d->base, sl_fnv1a64(SL_FNV64_INIT, sl_fn_name(fn), strlen(sl_fn_name(fn))));
    *out = &d->base;
    return SL_OK;
}
