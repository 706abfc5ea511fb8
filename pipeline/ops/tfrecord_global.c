/* tfrecord_global: the records of TFRecord files in one seeded permutation over all of
 * them (`shuffle global`), every replica taking its own positions of that one order.
 *
 * At creation each file is opened with its record index (formats/tfrecord_index.c: built
 * once, then cached beside the file or in a cache folder) and mapped; the dataset holds N,
 * the total record count, and the running count per file. Epoch order: position q of
 * [0, N) is record sl_perm_at(q) of a permutation seeded by the op's seed and, unless
 * reshuffling is off, the iterator's stream seed (which includes the epoch: the trainer
 * seeds each epoch's iterator, repeat each pass). Replica r of R takes positions r, r+R,
 * r+2R, ...: shards are balanced to one record, and a global batch of G = R x B records
 * (B per replica) is always positions [kG, (k+1)G) of the order, whatever R is; so a run
 * resumed at batch k with another replica count continues at the same global position and
 * every record of the epoch is still read once.
 *
 * Element j of replica r is found at once: no buffer, no reading ahead, O(1) state (the
 * permutation's 64 bytes and j), so an iterator seeks to any element in constant time.
 *
 * Workload: data sets of thousands to billions of records in up to thousands of files,
 * read by a map of decoders; the source itself is cheap (a permutation step, a binary
 * search over the files, a CRC pass over the record).
 *
 * Errors: a corrupt record (its CRCs, the index no longer matching the file) is that
 * element's error, "FILE: record I at byte OFFSET: ..." prefixed with the op's label; the
 * next call goes on with the next position. With skip_corrupt it is skipped, counted in
 * sl_iter_errors_ignored and logged. A file that shrank is SL_EIO. */
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"
#include "sluice/log.h"

typedef struct {
    sl_dataset base;
    sl_tfr_file **files;
    const char **origins;   /* each file's path, interned (sl_origin_path) */
    int64_t *first;         /* first[f]: global id of file f's record 0; first[n] = total */
    int n;
    int64_t total;
    sl_tfr_read_opts ropts;
    sl_global_opts g;
} glob_ds;

typedef struct {
    sl_iter base;
    sl_perm perm;
    int64_t j;              /* this replica's next element */
    sl_buf *views;          /* slab of record views (as the tfrecord op) */
    int nviews;
} glob_it;


sl_global_opts sl_global_opts_default(void) {
    sl_global_opts o = {.num_shards = 1, .shard_index = 0, .seed = 0, .reshuffle_each_epoch = true,
                        .index = sl_tfr_index_opts_default()};
    return o;
}

/* The file holding global record g (binary search over the running counts). */
static int file_of(const glob_ds *d, int64_t g) {
    int lo = 0, hi = d->n - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (d->first[mid] <= g) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static sl_status glob_next(sl_iter *it, sl_element *out) {
    glob_it *t = (glob_it *)it;
    const glob_ds *d = (const glob_ds *)it->ds;
    for (;;) {
        /* position j * R + r of the epoch's order, if it exists */
        int64_t q;
        if (__builtin_mul_overflow(t->j, d->g.num_shards, &q) || __builtin_add_overflow(q, d->g.shard_index, &q) ||
            q >= d->total)
            return SL_END;
        t->j++;
        int64_t g = (int64_t)sl_perm_at(&t->perm, (uint64_t)q);
        int f = file_of(d, g);
        int64_t i = g - d->first[f];
        sl_record rec;
        sl_status s = sl_tfr_file_read(d->files[f], i, &rec);
        if (s && d->ropts.skip_corrupt && s == SL_ECORRUPT) {
            atomic_fetch_add(&it->ctx->errors_ignored, 1);
            SL_WARN("op '%s': skipped a corrupt record: %s", it->ds->label, sl_errmsg());
            sl_err_clear();
            continue;
        }
        if (s) {
            sl__op_err_prefix(it);
            return s;
        }
        return sl__record_element(it, &t->views, &t->nviews, &rec, d->origins[f], out);
    }
}

static void glob_close(sl_iter *it) { sl_buf_unref(((glob_it *)it)->views); }

static const sl_iter_vt glob_it_vt = {.next = glob_next, .close = glob_close};

static sl_status glob_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    const glob_ds *d = (const glob_ds *)ds;
    glob_it *t = sl__iter_new(sizeof *t, &glob_it_vt, ds, ctx, seed);
    if (!t) return SL_ENOMEM;
    uint64_t ps = d->g.reshuffle_each_epoch ? sl_mix2(d->g.seed, seed) : sl_mix2(d->g.seed, 0);
    sl_perm_init(&t->perm, d->total > 0 ? (uint64_t)d->total : 1, ps);
    t->j = t->base.start;
    *out = &t->base;
    return SL_OK;
}

static void glob_destroy(sl_dataset *ds) {
    glob_ds *d = (glob_ds *)ds;
    for (int i = 0; i < d->n; i++) sl_tfr_file_close(d->files ? d->files[i] : NULL);
    free(d->files);
    free(d->origins);
    free(d->first);
}

/* This replica's positions: r, r + R, ... below N. */
static int64_t glob_card(const sl_dataset *ds) {
    const glob_ds *d = (const glob_ds *)ds;
    int64_t R = d->g.num_shards, r = d->g.shard_index;
    return d->total > r ? (d->total - r - 1) / R + 1 : 0;
}

static const sl_ds_vt glob_vt = {.name = "tfrecord_global", .seek = true, .make_iter = glob_make,
                                 .destroy = glob_destroy, .cardinality = glob_card};

sl_status sl_ds_tfrecord_global(const char *const *paths, int n, const sl_tfr_read_opts *ropts,
                                const sl_global_opts *gopts, sl_dataset **out) {
    *out = NULL;
    sl_global_opts g = gopts ? *gopts : sl_global_opts_default();
    if (g.num_shards < 1 || g.shard_index < 0 || g.shard_index >= g.num_shards)
        return sl_err(SL_EINVAL, "shuffle global: replica %lld of %lld is not one of 0..%lld", (long long)g.shard_index,
                      (long long)g.num_shards, (long long)g.num_shards - 1);
    char **list = NULL;
    int nfiles = 0;
    sl_status s = sl__glob_paths("shuffle global", paths, n, true, &list, &nfiles);
    if (s) return s;
    glob_ds *d = sl__ds_new(sizeof *d, &glob_vt, NULL, 0);
    if (!d) {
        sl__free_paths(list, nfiles);
        return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    }
    d->ropts = ropts ? *ropts : sl_tfr_read_opts_default();
    if (d->ropts.skip_corrupt) g.index.skip_corrupt = true; /* broken framing: index what can be read */
    d->g = g;
    sl__ds_param(&d->base, g.seed); /* not the shard: replicas share one state */
    sl__ds_param(&d->base, g.reshuffle_each_epoch);
    d->files = calloc((size_t)(nfiles ? nfiles : 1), sizeof *d->files);
    d->origins = calloc((size_t)(nfiles ? nfiles : 1), sizeof *d->origins);
    d->first = calloc((size_t)nfiles + 1, sizeof *d->first);
    if (!d->files || !d->origins || !d->first) {
        s = sl_err(SL_ENOMEM, "shuffle global: out of memory for %d files", nfiles);
        goto fail;
    }
    for (int i = 0; i < nfiles; i++) {
        if ((s = sl_tfr_file_open(list[i], &g.index, &d->ropts, &d->files[i]))) {
            sl_err_prefix("shuffle global: ");
            goto fail;
        }
        d->n = i + 1;
        d->origins[i] = sl_origin_path(list[i]);
        int64_t c = sl_tfr_file_count(d->files[i]);
        if (__builtin_add_overflow(d->first[i], c, &d->first[i + 1])) {
            s = sl_err(SL_ERANGE, "shuffle global: more than 2^63-1 records");
            goto fail;
        }
    }
    d->total = d->first[nfiles];
    sl__free_paths(list, nfiles);
    *out = &d->base;
    return SL_OK;
fail:
    sl__free_paths(list, nfiles);
    sl_dataset_unref(&d->base);
    return s;
}

