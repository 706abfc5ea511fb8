/* snapshot: tf.data's Dataset.snapshot. The first run over the input writes what it gives
 * to a snapshot folder; later runs (other processes, other iterators) whose fingerprint is
 * the same read the folder back instead of running the ops above.
 *
 * The folder is PATH/FP, FP the 16 hex digits of the FNV-1a hash of the fingerprint text;
 * its manifest keeps the whole text, and only a manifest with the very same text is
 * replayed. A pipeline whose fingerprint changed so writes a snapshot of its own beside the
 * old one, never reading it. The format and the crash safety (a folder renamed into place
 * whole, so a run stopped mid-write leaves no snapshot) are in pipeline/snapfile.h.
 *
 * Damage is never trusted. At iterator creation the manifest, every shard's presence, size
 * and header are checked; while reading, every chunk's CRC32C and the element against the
 * manifest's spec. What fails is a warning naming the file and the byte offset ("op 'L':
 * snapshot damaged, rebuilding it: PATH: byte N: snapshot shard: chunk checksum mismatch"):
 * the folder is removed, and the run goes on from the input — skipping the elements it had
 * already given, so the stream is unchanged — writing a new snapshot as it goes.
 *
 * Writing is best effort, like cache's: a folder that cannot be made or written (a full
 * disk, a file-size limit, no permission) is a warning naming the file, the byte and the
 * reason; the run goes on from its input with nothing left behind, and the next run tries
 * again. An error from the input is returned as it is and abandons the snapshot of this run
 * (a snapshot is the input's whole stream or nothing). The snapshot keeps the stream of the
 * run that wrote it: later runs replay it whatever their seed, so random ops whose draws
 * should change between runs go after the snapshot.
 *
 * Workload: expensive preprocessing (decoding, parsing) done once and replayed from local
 * disk by the runs that follow, as a checked, sequential read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/snapfile.h"
#include "sluice/log.h"

typedef struct {
    sl_dataset base;
    char *fp;            /* the fingerprint text */
    char *dir;           /* PATH/FP */
    int64_t shard_bytes;
} snap_ds;

typedef struct {
    sl_iter base;
    sl_iter *in;            /* writing or passing through: the input */
    sl__snap_manifest *m;   /* reading */
    sl__snap_reader *r;     /* reading */
    sl__snap_writer *w;     /* writing; NULL: passing through */
    int64_t given;          /* elements returned */
    int64_t drop;           /* input elements still to drop (already given from a damaged snapshot) */
} snap_it;

static void warn_keep(const char *fmt, const char *label, const char *what) {
    SL_WARN(fmt, label, what);
}

static void stop_writing(snap_it *c, const char *why) {
    const snap_ds *d = (const snap_ds *)c->base.ds;
    SL_WARN("op '%s': not writing the snapshot %s, this run goes on from its input: %s", c->base.ds->label, d->dir,
            why);
    sl__snap_writer_abort(c->w);
    c->w = NULL;
}

/* Go on from the input, writing a snapshot (or passing through when it cannot be written). */
static sl_status start_writing(snap_it *c) {
    snap_ds *d = (snap_ds *)c->base.ds;
    sl_status s = sl__iter_input(c->base.ds, 0, c->base.ctx, c->base.seed, 0, &c->in);
    if (s) return s;
    sl_error keep;
    sl_err_save(&keep);
    if (sl__snap_writer_open(d->dir, d->fp, d->shard_bytes, &c->w) != SL_OK)
        warn_keep("op '%s': not writing a snapshot, this run goes on from its input: %s", c->base.ds->label,
                  sl_errmsg());
    sl_err_restore(&keep);
    return SL_OK;
}

/* The snapshot at d->dir is damaged (the thread's error says where): warn, remove it. */
static void discard(snap_it *c) {
    const snap_ds *d = (const snap_ds *)c->base.ds;
    warn_keep("op '%s': snapshot damaged, rebuilding it from the input: %s", c->base.ds->label, sl_errmsg());
    sl__snap_reader_close(c->r);
    c->r = NULL;
    sl__snap_manifest_free(c->m);
    c->m = NULL;
    if (sl__snap_remove(d->dir) != SL_OK) SL_WARN("op '%s': %s", c->base.ds->label, sl_errmsg());
}

static sl_status snap_next(sl_iter *it, sl_element *out) {
    snap_it *c = (snap_it *)it;
    if (c->r) {
        sl_status s = sl__snap_reader_next(c->r, out);
        if (s == SL_OK) c->given++;
        if (s != SL_ECORRUPT && s != SL_EIO) return s;
        discard(c);
        c->drop = c->given;
        if ((s = start_writing(c))) return s;
    }
    for (;;) {
        sl_status s = sl__iter_next(c->in, out);
        if (s == SL_END) {
            if (c->w) {
                bool other;
                sl_error keep;
                sl_err_save(&keep);
                sl__snap_writer *w = c->w;
                c->w = NULL;
                if (sl__snap_writer_commit(w, false, &other) != SL_OK)
                    warn_keep("op '%s': the snapshot was not kept: %s", it->ds->label, sl_errmsg());
                else if (other)
                    SL_INFO("op '%s': another run finished the same snapshot first; keeping its copy", it->ds->label);
                sl_err_restore(&keep);
            }
            return s;
        }
        if (s < 0) {
            if (c->w && s != SL_ECANCELED) {
                sl_error keep;
                sl_err_save(&keep);
                char why[512];
                snprintf(why, sizeof why, "the input failed at element %lld: %s", (long long)(c->given + c->drop),
                         sl_errmsg());
                stop_writing(c, why);
                sl_err_restore(&keep);
            }
            return s;
        }
        if (c->w) {
            sl_error keep;
            sl_err_save(&keep);
            if (sl__snap_writer_add(c->w, out) != SL_OK) stop_writing(c, sl_errmsg());
            sl_err_restore(&keep);
        }
        if (c->drop > 0) {
            c->drop--;
            sl_element_clear(out);
            continue;
        }
        c->given++;
        return SL_OK;
    }
}

static void snap_close(sl_iter *it) {
    snap_it *c = (snap_it *)it;
    sl__snap_writer_abort(c->w); /* closed before the end: nothing is kept */
    sl__snap_reader_close(c->r);
    sl__snap_manifest_free(c->m);
    sl__iter_close(c->in);
}

static const sl_iter_vt snap_it_vt = {.next = snap_next, .close = snap_close};

static sl_status snap_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    snap_ds *d = (snap_ds *)ds;
    snap_it *c = sl__iter_new(sizeof *c, &snap_it_vt, ds, ctx, seed);
    if (!c) return SL_ENOMEM;
    sl_error keep;
    sl_err_save(&keep);
    sl_status s = sl__snap_manifest_read(d->dir, &c->m);
    if (s == SL_OK && strcmp(c->m->fingerprint, d->fp) != 0) {
        /* another pipeline's snapshot under the same hash: leave it, do not write over it */
        SL_WARN("op '%s': the snapshot %s was written for another fingerprint (a hash collision): this run "
                "reads its input and writes no snapshot", ds->label, d->dir);
        sl__snap_manifest_free(c->m);
        c->m = NULL;
        sl_err_restore(&keep);
        if ((s = sl__iter_input(ds, 0, ctx, seed, 0, &c->in))) goto fail;
        *out = &c->base;
        return SL_OK;
    }
    if (s == SL_OK && (s = sl__snap_reader_open(d->dir, c->m, &c->r)) == SL_OK) {
        sl_err_restore(&keep);
        *out = &c->base;
        return SL_OK;
    }
    if (s == SL_ENOMEM) goto fail;
    if (s == SL_ENOTFOUND && access(d->dir, F_OK) == 0) { /* a folder without its manifest: partial */
        sl_err_at(SL_ECORRUPT, d->dir, 0, "snapshot folder without its manifest '%s' (partial or damaged)",
                  SL__SNAP_MANIFEST);
        s = SL_ECORRUPT;
    }
    if (s != SL_ENOTFOUND) discard(c);
    sl_err_restore(&keep);
    if ((s = start_writing(c))) goto fail;
    *out = &c->base;
    return SL_OK;
fail:
    sl__iter_close(&c->base);
    return s;
}

static void snap_destroy(sl_dataset *ds) {
    snap_ds *d = (snap_ds *)ds;
    free(d->fp);
    free(d->dir);
}

static int64_t snap_card(const sl_dataset *ds) { return sl_dataset_cardinality(ds->inputs[0]); }

static const sl_ds_vt snap_vt = {.name = "snapshot", .make_iter = snap_make, .destroy = snap_destroy,
                                 .cardinality = snap_card};

sl_snapshot_opts sl_snapshot_opts_default(void) {
    sl_snapshot_opts o = {.shard_bytes = (int64_t)256 << 20, .seed = 0};
    return o;
}

/* The graph-shape fingerprint: op names and how they connect (what sl_iter_save checks). */
static uint64_t shape_hash(const sl_dataset *ds) {
    uint64_t h = sl_mix2(sl_fnv1a64(SL_FNV64_INIT, ds->vt->name, strlen(ds->vt->name)), (uint64_t)ds->ninputs);
    for (int i = 0; i < ds->ninputs; i++) h = sl_mix2(h, shape_hash(ds->inputs[i]));
    return h;
}

sl_status sl_ds_snapshot(sl_dataset *in, const char *path, const char *fingerprint, const sl_snapshot_opts *opts,
                         sl_dataset **out) {
    *out = NULL;
    if (!in) return sl_err(SL_EINVAL, "snapshot: the input is NULL");
    if (!path || !path[0]) return sl_err(SL_EINVAL, "snapshot: the path is empty");
    sl_snapshot_opts o = opts ? *opts : sl_snapshot_opts_default();
    if (o.shard_bytes < 1)
        return sl_err(SL_EINVAL, "snapshot: shard_bytes %lld must be >= 1", (long long)o.shard_bytes);
    char shape[64];
    if (!fingerprint) {
        snprintf(shape, sizeof shape, "graph-shape:%016llx", (unsigned long long)shape_hash(in));
        fingerprint = shape;
    }
    uint64_t h = sl_fnv1a64(SL_FNV64_INIT, fingerprint, strlen(fingerprint));
    size_t n = strlen(path) + 20;
    char *dir = malloc(n), *fp = strdup(fingerprint);
    snap_ds *d = dir && fp ? sl__ds_new(sizeof *d, &snap_vt, &in, 1) : NULL;
    if (!d) {
        free(dir);
        free(fp);
        return sl_errcode() ? sl_errcode() : sl_err(SL_ENOMEM, "snapshot: out of memory");
    }
    size_t pl = strlen(path);
    while (pl > 1 && path[pl - 1] == '/') pl--;
    snprintf(dir, n, "%.*s/%016llx", (int)pl, path, (unsigned long long)h);
    d->dir = dir;
    d->fp = fp;
    d->shard_bytes = o.shard_bytes;
    *out = &d->base;
    return SL_OK;
}
