/* save and load: tf.data's Dataset.save and Dataset.load. save iterates a dataset once and
 * writes its elements to a snapshot folder (the format of pipeline/snapfile.h); load reads
 * such a folder back as a dataset whose cardinality is the manifest's count.
 *
 * save writes PATH.tmp.PID.N and renames it to PATH at the end (a folder already at PATH, if
 * it is a snapshot folder, is replaced), so PATH is the old data or the new, never a mix.
 * load checks the manifest at creation (SL_ENOTFOUND when PATH has none, SL_ECORRUPT for a
 * damaged one), every shard's presence, size and header when an iterator is made, and
 * every chunk as it is read: damage is SL_ECORRUPT naming the shard file and the byte
 * offset, and ends the stream there.
 *
 * Workload: a preprocessed data set written once, read by many later jobs. */
#include <stdlib.h>
#include <string.h>

#include "pipeline/snapfile.h"

sl_status sl_ds_save(sl_dataset *ds, const char *path, const sl_snapshot_opts *opts) {
    if (!ds) return sl_err(SL_EINVAL, "save: the dataset is NULL");
    if (!path || !path[0]) return sl_err(SL_EINVAL, "save: the path is empty");
    sl_snapshot_opts o = opts ? *opts : sl_snapshot_opts_default();
    if (o.shard_bytes < 1) return sl_err(SL_EINVAL, "save: shard_bytes %lld must be >= 1", (long long)o.shard_bytes);
    if (sl_dataset_cardinality(ds) == SL_INFINITE)
        return sl_err(SL_EINVAL, "save: the dataset is endless (a repeat without a count?): it would never finish");
    char dir[4096];
    size_t pl = strlen(path);
    while (pl > 1 && path[pl - 1] == '/') pl--;
    if (pl >= sizeof dir) return sl_err(SL_EINVAL, "save: path too long");
    memcpy(dir, path, pl);
    dir[pl] = 0;
    sl_iter_opts io = sl_iter_opts_default();
    io.seed = o.seed;
    sl_iter *it;
    sl_status s = sl_iter_create(ds, &io, &it);
    if (s) return s;
    sl__snap_writer *w;
    if ((s = sl__snap_writer_open(dir, "saved", o.shard_bytes, &w))) {
        sl_iter_close(it);
        return s;
    }
    sl_element e;
    sl_element_init(&e);
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        s = sl__snap_writer_add(w, &e);
        sl_element_clear(&e);
        if (s) break;
    }
    sl_iter_close(it);
    if (s != SL_END) {
        sl__snap_writer_abort(w);
        return s;
    }
    bool other;
    return sl__snap_writer_commit(w, true, &other);
}

typedef struct {
    sl_dataset base;
    char *dir;
    sl__snap_manifest *m;
} load_ds;

typedef struct {
    sl_iter base;
    sl__snap_reader *r;
} load_it;

static sl_status load_next(sl_iter *it, sl_element *out) {
    load_it *c = (load_it *)it;
    sl_status s = sl__snap_reader_next(c->r, out);
    if (s < 0 && s != SL_END) sl__op_err_prefix(it);
    return s;
}

static void load_close(sl_iter *it) { sl__snap_reader_close(((load_it *)it)->r); }

static const sl_iter_vt load_it_vt = {.next = load_next, .close = load_close};

static sl_status load_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    load_ds *d = (load_ds *)ds;
    load_it *c = sl__iter_new(sizeof *c, &load_it_vt, ds, ctx, seed);
    if (!c) return SL_ENOMEM;
    sl_status s = sl__snap_reader_open(d->dir, d->m, &c->r);
    if (s) {
        sl__op_err_prefix(&c->base);
        sl__iter_close(&c->base);
        return s;
    }
    *out = &c->base;
    return SL_OK;
}

static void load_destroy(sl_dataset *ds) {
    load_ds *d = (load_ds *)ds;
    free(d->dir);
    sl__snap_manifest_free(d->m);
}

static int64_t load_card(const sl_dataset *ds) { return ((const load_ds *)ds)->m->elements; }

static const sl_ds_vt load_vt = {.name = "load", .make_iter = load_make, .destroy = load_destroy,
                                 .cardinality = load_card};

sl_status sl_ds_load(const char *path, sl_dataset **out) {
    *out = NULL;
    if (!path || !path[0]) return sl_err(SL_EINVAL, "load: the path is empty");
    sl__snap_manifest *m;
    sl_status s = sl__snap_manifest_read(path, &m);
    if (s == SL_ENOTFOUND) {
        sl_err(SL_ENOTFOUND, "load: %s is not a saved dataset (no %s/%s)", path, path, SL__SNAP_MANIFEST);
        sl_err_hint("write one with sl_ds_save (a pipeline's `save`), or check the path");
        return SL_ENOTFOUND;
    }
    if (s) return s;
    char *dir = strdup(path);
    load_ds *d = dir ? sl__ds_new(sizeof *d, &load_vt, NULL, 0) : NULL;
    if (!d) {
        free(dir);
        sl__snap_manifest_free(m);
        return sl_err(SL_ENOMEM, "load: out of memory");
    }
    d->dir = dir;
    d->m = m;
    *out = &d->base;
    return SL_OK;
}
