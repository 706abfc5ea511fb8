/* tfrecord: the records of TFRecord files, file after file, as {"record": bytes scalar}.
 * Zero-copy: the tensor's data is a one-element sl_bytes array (in its own small buffer)
 * pointing into the reader's record buffer (the mmapped file, or the inflate window), and
 * the tensor's aux holds a reference to that buffer so the bytes outlive the reader.
 *
 * Paths may be glob patterns: expanded at creation (each pattern's matches sorted, patterns
 * kept in the given order); one that matches nothing is SL_ENOTFOUND. No paths at all (a
 * replica left without files) is an empty dataset.
 *
 * Errors: a file that cannot be opened, or a corrupt record, is returned as the reader
 * reported it ("FILE: byte OFFSET: what") prefixed with the op's label; the reader is
 * finished after an error, so the next call goes on with the NEXT file. With skip_corrupt
 * the reader skips corrupt records itself; each skipped record is added to the iterator's
 * errors_ignored count (sl_iter_errors_ignored) and logged at WARN level, as is each
 * damaged place in a compressed stream (the reader then resumes at the next gzip member or
 * ends the file), so skipped data is never silent.
 *
 * Each record carries its origin (the file and the record's byte offset, sl_origin), so
 * that an error in a function applied to it later can say which record it was.
 *
 * Workload: a handful to thousands of files of MBs to GBs, records of bytes to MBs. The
 * records' sl_bytes views are carved from slabs of VIEW_SLAB (each record's tensor holds a
 * reference to its slab), so a record costs no allocation of its own.
 *
 * Seek (an iterator starting at element S > 0): each file's record index (sluice/
 * tfrecord_index.h: cached beside the file, built on first use) gives its record count,
 * so the files before S are skipped unread and the file holding S is read from its record
 * through the index, the files after it as usual. A compressed file on the way cannot be
 * indexed: the op then refuses to seek (SL_EUNSUPPORTED) and the stream is replayed.
 *
 * Also interleave_tfrecord: interleave (pipeline/ops/interleave.c) over a stream of file
 * names, each opened as a one-file tfrecord dataset with the given read options. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline/internal.h"
#include "sluice/log.h"

typedef struct {
    sl_dataset base;
    char **paths;
    int n;
    sl_tfr_read_opts opts;
} tfr_ds;

typedef struct {
    sl_iter base;
    int file;              /* index of the file being read (or to open next) */
    sl_tfr_reader *rd;     /* open reader of paths[file], or NULL */
    uint64_t skipped_seen; /* corrupt_skipped already counted for rd */
    uint64_t damage_seen;  /* stream_damage already counted for rd */
    const char *origin;    /* paths[origin_file] interned (sl_origin_path): records' origin */
    int origin_file;       /* which file origin names (-1: none yet) */
    sl_buf *views;         /* the slab the next record's view is carved from (a reference), or NULL */
    int nviews;            /* views of it handed out */
    sl_tfr_file *sf;       /* after a seek: paths[file] opened with its index, read from record si */
    int64_t si;
} tfr_it;

#define VIEW_SLAB 32

static void count_skipped(tfr_it *t, const char *path) {
    if (!t->rd || !((const tfr_ds *)t->base.ds)->opts.skip_corrupt) return;
    sl_tfr_stats st = sl_tfr_reader_stats(t->rd);
    if (st.corrupt_skipped > t->skipped_seen) {
        uint64_t k = st.corrupt_skipped - t->skipped_seen;
        t->skipped_seen = st.corrupt_skipped;
        atomic_fetch_add(&t->base.ctx->errors_ignored, (long long)k);
        SL_WARN("op '%s': %s: skipped %llu corrupt record(s) (%llu so far in this file)", t->base.ds->label,
                path, (unsigned long long)k, (unsigned long long)st.corrupt_skipped);
    }
    if (st.stream_damage > t->damage_seen) {
        /* damage in a compressed stream: what lay in the lost bytes is unknown, so it is
         * counted as one ignored error per damaged place */
        uint64_t k = st.stream_damage - t->damage_seen;
        t->damage_seen = st.stream_damage;
        atomic_fetch_add(&t->base.ctx->errors_ignored, (long long)k);
        SL_WARN("op '%s': %s: damaged %s stream, %llu compressed bytes passed over so far",
                t->base.ds->label, path, sl_compression_name(sl_tfr_reader_compression(t->rd)),
                (unsigned long long)st.compressed_bytes_lost);
    }
}

static void close_reader(tfr_it *t) {
    sl_tfr_reader_close(t->rd);
    t->rd = NULL;
    t->skipped_seen = 0;
    t->damage_seen = 0;
    t->file++;
}

static sl_status tfr_next(sl_iter *it, sl_element *out) {
    tfr_it *t = (tfr_it *)it;
    const tfr_ds *d = (const tfr_ds *)it->ds;
    if (t->sf) { /* the file a seek landed in, read through its index */
        if (t->si < sl_tfr_file_count(t->sf)) {
            if (t->origin_file != t->file) {
                t->origin = sl_origin_path(d->paths[t->file]);
                t->origin_file = t->file;
            }
            sl_record rec;
            sl_status s = sl_tfr_file_read(t->sf, t->si++, &rec);
            if (s) {
                sl__op_err_prefix(it);
                return s; /* that record's error; the next call goes on with the next one */
            }
            return sl__record_element(it, &t->views, &t->nviews, &rec, t->origin, out);
        }
        sl_tfr_file_close(t->sf);
        t->sf = NULL;
        t->file++;
    }
    for (;;) {
        if (!t->rd) {
            if (t->file >= d->n) return SL_END;
            sl_status s = sl_tfr_reader_open(d->paths[t->file], &d->opts, &t->rd);
            if (s) {
                t->rd = NULL;
                t->file++; /* this file is consumed by its error; the next call goes on */
                sl__op_err_prefix(it);
                return s;
            }
        }
        if (t->origin_file != t->file) {
            t->origin = sl_origin_path(d->paths[t->file]);
            t->origin_file = t->file;
        }
        sl_record rec;
        sl_status s = sl_tfr_reader_next(t->rd, &rec);
        count_skipped(t, d->paths[t->file]);
        if (s == SL_END) {
            close_reader(t);
            continue;
        }
        if (s < 0) {
            sl_error e;
            sl_err_save(&e);
            close_reader(t);
            sl_err_restore(&e);
            sl__op_err_prefix(it);
            return s;
        }
        return sl__record_element(it, &t->views, &t->nviews, &rec, t->origin, out);
    }
}

sl_status sl__record_element(sl_iter *it, sl_buf **views, int *nviews, const sl_record *rec, const char *origin,
                             sl_element *out) {
    sl_bytes *v = sl__slab_piece(views, nviews, sizeof(sl_bytes), VIEW_SLAB);
    if (!v) return sl__op_err(it, SL_ENOMEM, "out of memory for record views");
    v->ptr = rec->data;
    v->len = rec->len;
    sl_tensor tt = SL_TENSOR_EMPTY;
    tt.dtype = SL_DT_BYTES;
    tt.data = v;
    tt.buf = sl_buf_ref(*views);
    tt.aux = sl_buf_ref(rec->buf);
    sl_status s = sl_element_set(out, "record", &tt);
    if (s) sl_tensor_release(&tt);
    else out->origin = (sl_origin){.path = origin, .offset = (int64_t)rec->offset};
    return s;
}

static void tfr_close(sl_iter *it) {
    sl_tfr_reader_close(((tfr_it *)it)->rd);
    sl_tfr_file_close(((tfr_it *)it)->sf);
    sl_buf_unref(((tfr_it *)it)->views);
}

static const sl_iter_vt tfr_it_vt = {.next = tfr_next, .close = tfr_close};

/* ---- record counts, kept by file identity ----
 * Seeking (here, and an interleave working out where its inputs stand) needs each file's
 * record count, and an interleave asks again for every iterator it makes part-way: the
 * counts are kept for the process, keyed by the path's hash, device, inode, size and mtime,
 * so a file that changed is counted again from its index (which is rebuilt when stale). */
#define COUNT_MEMO 4096

typedef struct {
    uint64_t key;
    dev_t dev;
    ino_t ino;
    off_t size;
    int64_t mtime_ns;
    int64_t count;
} count_memo;

static count_memo memo[COUNT_MEMO];
static pthread_mutex_t memo_mu = PTHREAD_MUTEX_INITIALIZER;

/* The records of one uncompressed file (its index's count), or an error status (SL_
 * EUNSUPPORTED for a compressed one, with the error set). */
static int64_t file_count(const char *path, bool skip_corrupt) {
    struct stat st;
    if (stat(path, &st) != 0) return sl_err_at(SL_ENOTFOUND, path, -1, "cannot stat: %s", strerror(errno));
    uint64_t key = sl_fnv1a64(SL_FNV64_INIT, path, strlen(path)) ^ (uint64_t)skip_corrupt, mt =
        (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
    count_memo *m = &memo[key % COUNT_MEMO];
    pthread_mutex_lock(&memo_mu);
    bool hit = m->key == key && m->dev == st.st_dev && m->ino == st.st_ino && m->size == st.st_size &&
               m->mtime_ns == (int64_t)mt && m->count >= 0;
    int64_t c = m->count;
    pthread_mutex_unlock(&memo_mu);
    if (hit) return c;
    sl_tfr_index_opts io = sl_tfr_index_opts_default();
    io.skip_corrupt = skip_corrupt;
    sl_tfr_index *ix;
    sl_status s = sl_tfr_index_open(path, &io, &ix);
    if (s) return s;
    c = sl_tfr_index_count(ix);
    sl_tfr_index_free(ix);
    pthread_mutex_lock(&memo_mu);
    *m = (count_memo){key, st.st_dev, st.st_ino, st.st_size, (int64_t)mt, c};
    pthread_mutex_unlock(&memo_mu);
    return c;
}

/* Start at element S: the files before it skipped by their record counts. */
static sl_status tfr_seek(tfr_it *t, int64_t S) {
    const tfr_ds *d = (const tfr_ds *)t->base.ds;
    sl_tfr_index_opts io = sl_tfr_index_opts_default();
    io.skip_corrupt = d->opts.skip_corrupt;
    for (t->file = 0; t->file < d->n; t->file++) {
        int64_t c = file_count(d->paths[t->file], d->opts.skip_corrupt);
        if (c < 0) {
            sl__op_err_prefix(&t->base);
            return (sl_status)c; /* SL_EUNSUPPORTED for a compressed file: the caller replays */
        }
        if (S >= c) {
            S -= c;
            continue;
        }
        sl_status s = sl_tfr_file_open(d->paths[t->file], &io, &d->opts, &t->sf);
        if (s) {
            t->sf = NULL;
            sl__op_err_prefix(&t->base);
            return s;
        }
        if (S >= sl_tfr_file_count(t->sf)) { /* changed since it was counted */
            sl_tfr_file_close(t->sf);
            t->sf = NULL;
            return sl__op_err(&t->base, SL_EIO, "%s: changed while the iterator was being made", d->paths[t->file]);
        }
        t->si = S;
        return SL_OK;
    }
    return SL_OK; /* past the end */
}

/* The records of every file (vt->count), or SL_UNKNOWN_CARD. */
static int64_t tfr_count(sl_dataset *ds) {
    const tfr_ds *d = (const tfr_ds *)ds;
    sl_error keep;
    sl_err_save(&keep);
    int64_t total = 0;
    for (int f = 0; f < d->n; f++) {
        int64_t c = file_count(d->paths[f], d->opts.skip_corrupt);
        if (c < 0) {
            total = SL_UNKNOWN_CARD;
            break;
        }
        total += c;
    }
    sl_err_restore(&keep);
    return total;
}

static sl_status tfr_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    tfr_it *t = sl__iter_new(sizeof *t, &tfr_it_vt, ds, ctx, seed);
    if (!t) return SL_ENOMEM;
    t->origin_file = -1;
    if (t->base.start > 0) {
        sl_status s = tfr_seek(t, t->base.start);
        if (s) {
            sl__iter_close(&t->base);
            return s;
        }
    }
    *out = &t->base;
    return SL_OK;
}

static void tfr_destroy(sl_dataset *ds) {
    tfr_ds *d = (tfr_ds *)ds;
    sl__free_paths(d->paths, d->n);
}

static const sl_ds_vt tfr_vt = {.name = "tfrecord", .seek = true, .make_iter = tfr_make, .destroy = tfr_destroy,
                                .count = tfr_count};

static sl_status tfr_new(char **list, int nl, const sl_tfr_read_opts *opts, sl_dataset **out) {
    tfr_ds *d = sl__ds_new(sizeof *d, &tfr_vt, NULL, 0);
    if (!d) {
        sl__free_paths(list, nl);
        return SL_ENOMEM;
    }
    d->paths = list;
    d->n = nl;
    d->opts = opts ? *opts : sl_tfr_read_opts_default();
    *out = &d->base;
    return SL_OK;
}

sl_status sl_ds_tfrecord(const char *const *paths, int n, const sl_tfr_read_opts *opts,
                         sl_dataset **out) {
    *out = NULL;
    char **list = NULL;
    int nl = 0;
    if (n < 0 || (n > 0 && !paths)) return sl_err(SL_EINVAL, "tfrecord: %d paths", n);
    if (n == 0) return tfr_new(list, nl, opts, out); /* no files: an empty dataset, as in tf.data */
    sl_status s = sl__glob_paths("tfrecord", paths, n, false, &list, &nl);
    if (s) return s;
    return tfr_new(list, nl, opts, out);
}

/* One file, taken literally (no glob: a listed file name may contain '[' or '*'); for
 * interleave's stock factory. A missing file is reported when it is read. */
static sl_status tfrecord_file(const char *path, size_t len, const sl_tfr_read_opts *opts,
                              sl_dataset **out) {
    *out = NULL;
    char **list = malloc(sizeof *list);
    if (!list || !(list[0] = strndup(path, len))) {
        free(list);
        return sl_err(SL_ENOMEM, "tfrecord: out of memory");
    }
    return tfr_new(list, 1, opts, out);
}

/* interleave_tfrecord's factory: element "filename" (bytes scalar) -> that one TFRecord
 * file, read with the options ctx points to (owned by the interleave dataset). */
static sl_status tfrecord_factory(void *ctx, const sl_element *e, sl_dataset **out) {
    const sl_tfr_read_opts *ropts = ctx;
    *out = NULL;
    int c = sl_element_find(e, "filename");
    if (c < 0 || e->t[c].dtype != SL_DT_BYTES || e->t[c].rank != 0)
        return sl_err(SL_EINVAL, "interleave_tfrecord: the input element has no bytes scalar 'filename'");
    const sl_bytes *b = e->t[c].data;
    return tfrecord_file((const char *)b->ptr, b->len, ropts, out);
}

sl_status sl_ds_interleave_tfrecord(sl_dataset *filenames, const sl_tfr_read_opts *ropts,
                                    const sl_interleave_opts *opts, sl_dataset **out) {
    *out = NULL;
    sl_tfr_read_opts *ro = malloc(sizeof *ro);
    if (!ro) return sl_err(SL_ENOMEM, "interleave_tfrecord: out of memory");
    *ro = ropts ? *ropts : sl_tfr_read_opts_default();
    return sl__ds_interleave_own(filenames, tfrecord_factory, ro, free, opts, out);
}
