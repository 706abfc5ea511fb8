/* cache: the first complete pass over the input is kept; later passes (the next epochs
 * under repeat, other iterators of the same dataset) replay it without touching the input.
 *
 * In memory (path NULL): a pass records every element by reference (sl_tensor_share, no
 * copy), and errors as their messages, so a replay is exactly the stream the input gave.
 * The store belongs to the dataset and is filled lazily — the one exception to datasets
 * being immutable, as in tf.data — under a mutex: the first pass to reach the end installs
 * its recording, later passes replay it. A pass closed before its end discards what it
 * recorded. Functions downstream must not write into the tensors they receive in place
 * (the stock ones never do): replays share the recorded buffers.
 *
 * In a file (path given): a pass writes the elements to PATH.tmp.PID.N and, at its end,
 * writes a footer, flushes, fsyncs and renames it to PATH, so PATH is complete or absent.
 * An iterator created when PATH exists replays it (mmapped privately, tensors are views of
 * the mapping). A write failure (a full disk, a file-size limit) is a warning, "op 'L': not
 * caching to PATH, this pass goes on uncached: PATH.tmp.PID.N: write failed at byte N:
 * REASON" with the hint of sluice/file.h: the temporary file is removed and the pass goes on
 * from its input (nothing is lost: the next pass reads the input again and tries to write
 * the cache again). A truncated or corrupt file is SL_ECORRUPT naming the file and the byte
 * offset; a bad header or footer fails iterator creation, a bad entry is returned by next()
 * and ends the stream there.
 *
 * File format (little-endian hosts; all sections 8-byte aligned):
 *   header  "SLCACHE\0", u32 version (1), u32 header size (16)
 *   entry   u32 "SLCE", u32 kind (1 element, 2 error), u64 payload size, u32 crc32c of the
 *           payload, u32 0, payload, zero padding to 8
 *     element payload (pipeline/snapfile.h, shared with snapshots): u32 components, u32 0,
 *           then per component: u8 dtype, u8 rank,
 *           u16 name length, u32 0, name (padded to 8), i64 dims[rank], u64 n, then
 *           numbers: n data bytes (padded to 8); bytes: n u64 lengths, the strings one
 *           after another (padded to 8)
 *     error payload: i32 code, u32 message length, message
 *   footer  "SLCEND\0\0", u64 entries, u64 footer offset, u32 version, u32 crc32c of the
 *           footer's first 28 bytes
 *
 * Seek (an iterator starting at element S > 0): a complete cache skips S elements of its
 * recording (in memory, an index; in a file, S entry headers walked without decoding); a
 * pass that would fill it instead reads its input from S (which must seek, else the stream
 * is replayed) and records nothing, since a recording must start at 0: the next pass
 * fills the cache.
 *
 * Workload: datasets that fit in RAM (memory) or on local disk (file) after expensive
 * decoding, replayed for tens of epochs. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/snapfile.h"
#include "sluice/crc32c.h"
#include "sluice/file.h"
#include "sluice/log.h"

#define CACHE_VERSION 1u
#define HDR_SIZE 16
#define FOOTER_SIZE 32
#define ENTRY_HDR 24
#define KIND_ELEM 1u
#define KIND_ERR 2u
static const char HDR_MAGIC[8] = "SLCACHE";
static const char FOOT_MAGIC[8] = "SLCEND\0";
static const char ENTRY_MAGIC[4] = {'S', 'L', 'C', 'E'};

/* One recorded element (packed: sl__packed, pipeline/packed.c, about 230 B an entry
 * instead of a 2.6 KB sl_element) or error. */
typedef struct {
    sl_status status; /* SL_OK or an error */
    sl_error *err;    /* the error's message, when status < 0 */
    sl__packed p;     /* the element's tensors shared, when SL_OK */
} centry;

typedef struct {
    centry *v;
    int64_t n, cap;
    sl__pack_names names; /* the names packed entries use */
} clist;

typedef struct {
    sl_dataset base;
    char *path;          /* NULL: in memory */
    pthread_mutex_t mu;  /* guards complete and store */
    bool complete;
    clist store;         /* immutable once complete */
    atomic_uint tmp_seq; /* makes temporary file names unique */
} cache_ds;

enum { MODE_FILL, MODE_REPLAY_MEM, MODE_REPLAY_FILE };

typedef struct {
    sl_iter base;
    int mode;
    /* fill */
    sl_iter *in;
    clist rec;        /* memory: this pass's recording */
    int64_t rec_bytes;  /* memory: the bytes the recorded elements hold themselves */
    int64_t next_plan;  /* memory: rec_bytes at which the plan is checked next (doubling) */
    bool broken;      /* the pass was cancelled: do not install */
    FILE *f;          /* file: the temporary file, NULL once abandoned */
    char *tmp;
    uint64_t written; /* bytes written to f */
    int64_t nentries;
    uint8_t *scratch; /* one entry's payload */
    size_t scap;
    /* replay */
    int64_t pos;      /* memory: next entry; file: next byte offset */
    sl_buf *map;      /* file: the mapping */
    uint64_t body_end;
} cache_it;

/* ---- memory store ---- */

static void clist_free(clist *l) {
    for (int64_t i = 0; i < l->n; i++) {
        sl__packed_clear(&l->v[i].p);
        free(l->v[i].err);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

static bool record(cache_it *c, sl_status s, const sl_element *e) {
    clist *l = &c->rec;
    if (l->n == l->cap) {
        int64_t ncap = l->cap ? 2 * l->cap : 256;
        centry *nv = realloc(l->v, (size_t)ncap * sizeof *nv);
        if (!nv) return false;
        l->v = nv;
        l->cap = ncap;
    }
    centry *ce = &l->v[l->n];
    memset(ce, 0, sizeof *ce);
    ce->status = s;
    if (s < 0) {
        if (!(ce->err = malloc(sizeof *ce->err))) return false;
        sl_err_save(ce->err);
    } else if (!sl__pack_shared(&l->names, e, &ce->p)) {
        return false;
    }
    l->n++;
    return true;
}

/* ---- file writing ---- */

static bool scratch_need(cache_it *c, size_t n) {
    if (n <= c->scap) return true;
    size_t ncap = c->scap ? c->scap : 4096;
    while (ncap < n) ncap *= 2;
    uint8_t *p = realloc(c->scratch, ncap);
    if (!p) return false;
    c->scratch = p;
    c->scap = ncap;
    return true;
}

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

/* Stop writing the cache file: this pass goes on from the input, uncached, and the next
 * pass tries again. Nothing is lost by that, so it is a warning, not the pass's error; the
 * temporary file goes (only PATH counts as a cache, never PATH.tmp.*). */
static void abandon_file(cache_it *c, const char *why) {
    if (!c->f) return;
    SL_WARN("op '%s': not caching to %s, this pass goes on uncached: %s", c->base.ds->label,
            ((const cache_ds *)c->base.ds)->path, why);
    fclose(c->f);
    c->f = NULL;
    unlink(c->tmp);
}

/* A write, flush or sync of the temporary file failed with errno err: abandon it with
 * "TMP: write failed at byte N: REASON" and the hint (sluice/file.h). The thread's error is
 * left as it was: the pass's own status and message are the input's. */
static void write_failed(cache_it *c, int err) {
    sl_error keep;
    sl_err_save(&keep);
    /* stdio hands whole buffers to write(2): the file's size is how far the writes got */
    struct stat st;
    uint64_t at = fstat(fileno(c->f), &st) == 0 ? (uint64_t)st.st_size : c->written;
    sl_file_write_error(c->tmp, NULL, at, err);
    abandon_file(c, sl_errmsg());
    sl_err_restore(&keep);
}

static bool write_bytes(cache_it *c, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, c->f) != n) {
        write_failed(c, errno);
        return false;
    }
    c->written += n;
    return true;
}

static void write_entry(cache_it *c, sl_status s, const sl_element *e) {
    if (!c->f) return;
    size_t size;
    uint32_t kind;
    if (s < 0) {
        kind = KIND_ERR;
        const char *msg = sl_errmsg();
        uint32_t ml = (uint32_t)strlen(msg);
        size = 8 + ml;
        if (!scratch_need(c, size)) {
            abandon_file(c, "out of memory");
            return;
        }
        int32_t code = s;
        memcpy(c->scratch, &code, 4);
        memcpy(c->scratch + 4, &ml, 4);
        memcpy(c->scratch + 8, msg, ml);
    } else {
        kind = KIND_ELEM;
        if (!(size = sl__elem_encode(e, &c->scratch, &c->scap))) {
            abandon_file(c, "out of memory");
            return;
        }
    }
    uint8_t hdr[ENTRY_HDR] = {0};
    uint64_t sz = size;
    uint32_t crc = sl_crc32c(0, c->scratch, size);
    memcpy(hdr, ENTRY_MAGIC, 4);
    memcpy(hdr + 4, &kind, 4);
    memcpy(hdr + 8, &sz, 8);
    memcpy(hdr + 16, &crc, 4);
    static const uint8_t zeros[8];
    if (!write_bytes(c, hdr, ENTRY_HDR) || !write_bytes(c, c->scratch, size) ||
        !write_bytes(c, zeros, pad8(size) - size))
        return;
    c->nentries++;
}

static void finish_file(cache_it *c) {
    if (!c->f) return;
    const cache_ds *d = (const cache_ds *)c->base.ds;
    uint8_t foot[FOOTER_SIZE] = {0};
    uint64_t n = (uint64_t)c->nentries, off = c->written;
    uint32_t ver = CACHE_VERSION;
    memcpy(foot, FOOT_MAGIC, 8);
    memcpy(foot + 8, &n, 8);
    memcpy(foot + 16, &off, 8);
    memcpy(foot + 24, &ver, 4);
    uint32_t crc = sl_crc32c(0, foot, 28);
    memcpy(foot + 28, &crc, 4);
    if (!write_bytes(c, foot, FOOTER_SIZE)) return;
    if (fflush(c->f) != 0 || fsync(fileno(c->f)) != 0) {
        write_failed(c, errno);
        return;
    }
    int closed = fclose(c->f);
    int e = errno;
    c->f = NULL;
    /* only a whole file becomes PATH: replays take PATH, once there, as the complete cache */
    if (closed != 0 || rename(c->tmp, d->path) != 0) {
        if (closed == 0) e = errno;
        SL_WARN("op '%s': not caching to %s, this pass goes on uncached: cannot %s %s: %s", c->base.ds->label,
                d->path, closed ? "close" : "rename it from", c->tmp, strerror(e));
        unlink(c->tmp);
    }
}

/* ---- file replay ---- */

static sl_status corrupt(const cache_it *c, uint64_t off, const char *what) {
    const cache_ds *d = (const cache_ds *)c->base.ds;
    if (c->map && sl_buf_damaged(c->map)) {
        /* the bytes read as zeros because the file shrank while mapped */
        sl_err_at(SL_EIO, d->path, (int64_t)off, "cache file shrank from %zu bytes while being read",
                  c->map->size);
        sl_err_hint("another process truncated or rewrote the cache file; delete it to rebuild it");
        sl__op_err_prefix(&c->base);
        return SL_EIO;
    }
    sl_err_at(SL_ECORRUPT, d->path, (int64_t)off, "cache file: %s", what);
    sl_err_hint("delete the cache file to rebuild it");
    sl__op_err_prefix(&c->base);
    return SL_ECORRUPT;
}

static sl_status open_replay(cache_it *c) {
    const cache_ds *d = (const cache_ds *)c->base.ds;
    int fd;
    uint64_t size;
    /* a FIFO, socket, device or directory at PATH is refused at once (file.h) */
    sl_status os = sl_file_open_read(d->path, "cache file", &fd, &size);
    if (os) {
        sl__op_err_prefix(&c->base);
        return os;
    }
    if (size < HDR_SIZE + FOOTER_SIZE) {
        close(fd);
        return corrupt(c, size, "truncated (too short for header and footer)");
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        sl_err_at(SL_EIO, d->path, -1, "cannot map cache file");
        sl__op_err_prefix(&c->base);
        return SL_EIO;
    }
    /* guarded: a cache file that shrinks under us is an error, not SIGBUS (tensor.h); with
     * its descriptor, so the bytes lost are told from the file's size (sl_buf_lost) */
    c->map = sl_buf_wrap_file_mapping(p, size, PROT_READ | PROT_WRITE, fd);
    close(fd);
    if (!c->map) {
        munmap(p, size);
        return SL_ENOMEM;
    }
    const uint8_t *b = p;
    uint32_t ver, hs;
    memcpy(&ver, b + 8, 4);
    memcpy(&hs, b + 12, 4);
    if (memcmp(b, HDR_MAGIC, 8) != 0) return corrupt(c, 0, "bad magic (not a sluice cache file)");
    if (ver != CACHE_VERSION) return corrupt(c, 8, "unsupported version");
    if (hs != HDR_SIZE) return corrupt(c, 12, "bad header size");
    const uint8_t *f = b + size - FOOTER_SIZE;
    uint64_t foff = size - FOOTER_SIZE, n, off;
    uint32_t fcrc;
    memcpy(&n, f + 8, 8);
    memcpy(&off, f + 16, 8);
    memcpy(&fcrc, f + 28, 4);
    if (memcmp(f, FOOT_MAGIC, 8) != 0 || fcrc != sl_crc32c(0, f, 28))
        return corrupt(c, foff, "no valid footer (truncated or damaged)");
    if (off != foff) return corrupt(c, foff, "footer offset does not match the file size");
    c->pos = HDR_SIZE;
    c->body_end = foff;
    return SL_OK;
}

static sl_status replay_file(cache_it *c, sl_element *out) {
    if ((uint64_t)c->pos >= c->body_end) return SL_END;
    const uint8_t *b = c->map->data;
    uint64_t at = (uint64_t)c->pos;
    c->pos = (int64_t)c->body_end; /* any error below ends the stream */
    if (c->body_end - at < ENTRY_HDR) return corrupt(c, at, "truncated entry header");
    uint32_t kind, crc;
    uint64_t size;
    memcpy(&kind, b + at + 4, 4);
    memcpy(&size, b + at + 8, 8);
    memcpy(&crc, b + at + 16, 4);
    if (memcmp(b + at, ENTRY_MAGIC, 4) != 0) return corrupt(c, at, "bad entry magic");
    if (size > c->body_end - at - ENTRY_HDR) return corrupt(c, at, "entry runs past the end of the data");
    const uint8_t *p = b + at + ENTRY_HDR;
    if (sl_crc32c(0, p, size) != crc || sl_buf_damaged(c->map))
        return corrupt(c, at, "entry checksum mismatch");
    uint64_t next = at + ENTRY_HDR + pad8(size);
    if (kind == KIND_ERR) {
        int32_t code;
        uint32_t ml;
        if (size < 8) return corrupt(c, at, "bad error entry");
        memcpy(&code, p, 4);
        memcpy(&ml, p + 4, 4);
        if (ml > size - 8 || code >= 0) return corrupt(c, at, "bad error entry");
        c->pos = (int64_t)next;
        return sl_err(code, "%.*s", (int)ml, (const char *)p + 8);
    }
    if (kind != KIND_ELEM || size < 8) return corrupt(c, at, "bad entry kind");
    uint64_t bad_at;
    const char *why;
    sl_status ds = sl__elem_decode(c->map, p, size, out, &bad_at, &why);
    if (ds == SL_ENOMEM) return ds;
    if (ds) return corrupt(c, bad_at ? at + ENTRY_HDR + bad_at : at, why);
    c->pos = (int64_t)next;
    return SL_OK;
}

/* Step over S elements of the file (errors recorded among them are stepped over too: a
 * position counts elements), reading entry headers only. */
static sl_status skip_file(cache_it *c, int64_t S) {
    const uint8_t *b = c->map->data;
    while (S > 0 && (uint64_t)c->pos < c->body_end) {
        uint64_t at = (uint64_t)c->pos;
        if (c->body_end - at < ENTRY_HDR) return corrupt(c, at, "truncated entry header");
        uint32_t kind;
        uint64_t size;
        memcpy(&kind, b + at + 4, 4);
        memcpy(&size, b + at + 8, 8);
        if (memcmp(b + at, ENTRY_MAGIC, 4) != 0) return corrupt(c, at, "bad entry magic");
        if (size > c->body_end - at - ENTRY_HDR) return corrupt(c, at, "entry runs past the end of the data");
        if (kind != KIND_ELEM && kind != KIND_ERR) return corrupt(c, at, "bad entry kind");
        if (kind == KIND_ELEM) S--;
        c->pos = (int64_t)(at + ENTRY_HDR + pad8(size));
    }
    return SL_OK;
}

/* ---- the iterator ---- */

/* The memory plan of an in-memory cache: at its first element, the input's size (when
 * known) times that element's own bytes; then, as the recording grows, each time its bytes
 * double. A recording that cannot fit the pipeline's memory is dropped with a warning naming
 * both sizes (the pass goes on uncached: nothing is lost), instead of growing until the OOM
 * killer ends the process. The thread's error is left as it was. */
static bool fits_in_memory(cache_it *c, const sl_element *e) {
    int64_t each = (int64_t)sl__element_owned_bytes(e);
    c->rec_bytes += each;
    int64_t n = 1, size = c->rec_bytes;
    if (c->rec.n == 1) {
        int64_t card = sl_dataset_cardinality(c->base.ds->inputs[0]);
        if (card > 0) n = card, size = each;
        c->next_plan = (int64_t)64 << 20;
    } else if (c->rec_bytes < c->next_plan) {
        return true;
    } else {
        c->next_plan = c->rec_bytes * 2;
    }
    sl_error keep;
    sl_err_save(&keep);
    bool ok = sl__buffer_fits(&c->base, "memory cache", n, (size_t)size,
                              "this pass goes on uncached; cache to a file instead (`cache \"PATH\"`), or "
                              "cache before the decoding") == SL_OK;
    if (!ok) SL_WARN("%s", sl_errmsg());
    sl_err_restore(&keep);
    return ok;
}

static sl_status cache_next(sl_iter *it, sl_element *out) {
    cache_it *c = (cache_it *)it;
    cache_ds *d = (cache_ds *)it->ds;
    if (c->mode == MODE_REPLAY_FILE) return replay_file(c, out);
    if (c->mode == MODE_REPLAY_MEM) {
        if (c->pos >= d->store.n) return SL_END;
        const centry *ce = &d->store.v[c->pos++];
        if (ce->status < 0) return sl_err_restore(ce->err);
        sl__unpack_shared(&d->store.names, &ce->p, out);
        return SL_OK;
    }
    sl_status s = sl__iter_next(c->in, out);
    if (s == SL_ECANCELED) {
        c->broken = true;
        return s;
    }
    if (s == SL_END) {
        if (c->broken) return s;
        if (d->path) {
            finish_file(c);
            return s;
        }
        pthread_mutex_lock(&d->mu);
        if (!d->complete) {
            d->store = c->rec;
            memset(&c->rec, 0, sizeof c->rec);
            d->complete = true;
        }
        pthread_mutex_unlock(&d->mu);
        clist_free(&c->rec);
        c->broken = true; /* nothing more to record */
        return s;
    }
    if (c->broken) return s;
    if (d->path) {
        write_entry(c, s, out);
    } else if (!record(c, s, out)) {
        SL_WARN("op '%s': out of memory recording the cache: this pass is not cached", it->ds->label);
        clist_free(&c->rec);
        c->broken = true;
    } else if (s == SL_OK && !fits_in_memory(c, out)) {
        clist_free(&c->rec);
        c->broken = true;
    }
    return s;
}

static void cache_close(sl_iter *it) {
    cache_it *c = (cache_it *)it;
    if (c->f) { /* closed before the end: discard the partial file */
        fclose(c->f);
        unlink(c->tmp);
    }
    free(c->tmp);
    free(c->scratch);
    clist_free(&c->rec);
    sl_buf_unref(c->map);
    sl__iter_close(c->in);
}

static const sl_iter_vt cache_it_vt = {.next = cache_next, .close = cache_close};

static sl_status cache_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    cache_ds *d = (cache_ds *)ds;
    cache_it *c = sl__iter_new(sizeof *c, &cache_it_vt, ds, ctx, seed);
    if (!c) return SL_ENOMEM;
    sl_status s;
    if (!d->path) {
        pthread_mutex_lock(&d->mu);
        bool complete = d->complete;
        pthread_mutex_unlock(&d->mu);
        if (complete) {
            c->mode = MODE_REPLAY_MEM;
            for (int64_t k = c->base.start; k > 0 && c->pos < d->store.n; c->pos++)
                if (d->store.v[c->pos].status == SL_OK) k--;
            *out = &c->base;
            return SL_OK;
        }
    } else if (access(d->path, F_OK) == 0) {
        c->mode = MODE_REPLAY_FILE;
        if ((s = open_replay(c)) || (s = skip_file(c, c->base.start))) goto fail;
        *out = &c->base;
        return SL_OK;
    }
    if (c->base.start > 0) { /* part-way: read through from the input, record nothing */
        c->mode = MODE_FILL;
        c->broken = true;
        if ((s = sl__iter_input_at(ds, 0, ctx, seed, 0, c->base.start, &c->in))) goto fail;
        *out = &c->base;
        return SL_OK;
    }
    if (d->path) {
        size_t n = strlen(d->path) + 64;
        if (!(c->tmp = malloc(n))) {
            s = sl_err(SL_ENOMEM, "op '%s': out of memory", ds->label);
            goto fail;
        }
        snprintf(c->tmp, n, "%s.tmp.%ld.%u", d->path, (long)getpid(), atomic_fetch_add(&d->tmp_seq, 1));
        sl_error keep;
        sl_err_save(&keep);
        if (sl_file_fopen_write(c->tmp, "w", "cache file", &c->f) != SL_OK) {
            SL_WARN("op '%s': not caching to %s, this pass goes on uncached: %s", ds->label, d->path, sl_errmsg());
            sl_err_restore(&keep);
        } else {
            uint8_t hdr[HDR_SIZE] = {0};
            uint32_t ver = CACHE_VERSION, hs = HDR_SIZE;
            memcpy(hdr, HDR_MAGIC, 8);
            memcpy(hdr + 8, &ver, 4);
            memcpy(hdr + 12, &hs, 4);
            write_bytes(c, hdr, HDR_SIZE);
        }
    }
    c->mode = MODE_FILL;
    if ((s = sl__iter_input(ds, 0, ctx, seed, 0, &c->in))) goto fail;
    *out = &c->base;
    return SL_OK;
fail:
    sl__iter_close(&c->base);
    return s;
}

static void cache_destroy(sl_dataset *ds) {
    cache_ds *d = (cache_ds *)ds;
    clist_free(&d->store);
    free(d->path);
    pthread_mutex_destroy(&d->mu);
}

static int64_t cache_card(const sl_dataset *ds) { return sl_dataset_cardinality(ds->inputs[0]); }

static const sl_ds_vt cache_vt = {.name = "cache", .seek = true, .make_iter = cache_make, .destroy = cache_destroy,
                                  .cardinality = cache_card};

sl_status sl_ds_cache(sl_dataset *in, const char *path, sl_dataset **out) {
    *out = NULL;
    if (path && !path[0]) return sl_err(SL_EINVAL, "cache: path is empty (use NULL for a memory cache)");
    char *p = NULL;
    if (path && !(p = strdup(path))) return sl_err(SL_ENOMEM, "cache: out of memory");
    cache_ds *d = sl__ds_new(sizeof *d, &cache_vt, &in, 1);
    if (!d) {
        free(p);
        return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    }
    d->path = p;
    pthread_mutex_init(&d->mu, NULL);
    atomic_init(&d->tmp_seq, 0);
    *out = &d->base;
    return SL_OK;
}
