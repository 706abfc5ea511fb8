/* Snapshot folders on disk (the format is in pipeline/snapfile.h): the writer that snapshot
 * and save use, the manifest and the reader that snapshot and load use.
 *
 * Crash safety and concurrency come from the folder rename: a writer fills its own
 * DIR.tmp.PID.N (fsyncing every shard, then the manifest "done", then the folder), and only
 * then renames it to DIR, so DIR is complete or absent; two writers of the same DIR never
 * share a file, and the one that renames second finds DIR there and drops its own copy.
 * What a killed writer leaves (DIR.tmp.PID.N of a process no longer running) is removed by
 * the next writer. Every chunk is checked (header and payload CRC32C, the element against the
 * manifest's spec) as it is read: a damaged folder is SL_ECORRUPT naming the shard file and
 * the byte offset, never data.
 *
 * Workload: one sequential pass, elements of kilobytes to megabytes; reads are pread(2)s of
 * one chunk into a buffer of its own, which the element's tensors then view. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/snapfile.h"
#include "sluice/crc32c.h"
#include "sluice/file.h"
#include "sluice/log.h"

#define SNAP_VERSION 1u
#define SHARD_HDR 32
#define CHUNK_HDR 24
static const char SHARD_MAGIC[8] = "SLSNAP\0";
static const char MAN_MAGIC[8] = "SLSNAPD";
static const char CHUNK_MAGIC[4] = {'S', 'L', 'S', 'C'};
static const char *HINT = "a damaged snapshot is never used: `snapshot` rebuilds it from its input on the next run; "
                          "for `load`, save the data again";

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

static uint64_t fp_hash(const char *fp) { return sl_fnv1a64(SL_FNV64_INIT, fp, strlen(fp)); }

static void shard_name(char *out, size_t cap, const char *dir, int i) {
    snprintf(out, cap, "%s/shard-%05d.sls", dir, i);
}

/* ---- the manifest ---- */

void sl__snap_manifest_free(sl__snap_manifest *m) {
    if (!m) return;
    free(m->fingerprint);
    free(m->shard_elems);
    free(m->shard_bytes);
    free(m);
}

static sl_status man_bad(sl__snap_manifest *m, const char *name, uint64_t at, const char *what) {
    sl__snap_manifest_free(m);
    sl_err_at(SL_ECORRUPT, name, (int64_t)at, "snapshot manifest: %s", what);
    sl_err_hint("%s", HINT);
    return SL_ECORRUPT;
}

sl_status sl__snap_manifest_parse(const uint8_t *p, size_t n, const char *name, sl__snap_manifest **out) {
    *out = NULL;
    sl__snap_manifest *m = calloc(1, sizeof *m);
    if (!m) return sl_err(SL_ENOMEM, "%s: out of memory", name);
    if (n < 40 + 8) return man_bad(m, name, n, "truncated (too short for its header)");
    if (memcmp(p, MAN_MAGIC, 8) != 0) return man_bad(m, name, 0, "bad magic (not a sluice snapshot)");
    uint32_t ver = sl_load_le32(p + 8), size = sl_load_le32(p + 12);
    if (ver != SNAP_VERSION) return man_bad(m, name, 8, "unsupported version");
    if (size != n) return man_bad(m, name, 12, "size does not match the file (truncated or damaged)");
    if (sl_load_le32(p + n - 8) != sl_crc32c(0, p, n - 8)) return man_bad(m, name, n - 8, "checksum mismatch");
    m->elements = (int64_t)sl_load_le64(p + 16);
    uint32_t nsh = sl_load_le32(p + 24), ncomp = sl_load_le32(p + 28), fl = sl_load_le32(p + 32);
    size_t off = 40, end = n - 8;
    if (m->elements < 0) return man_bad(m, name, 16, "bad element count");
    if (ncomp > SL_ELEM_MAX) return man_bad(m, name, 28, "too many components");
    if (fl > end - off || nsh > (end - off - pad8(fl)) / 16) return man_bad(m, name, 24, "bad sizes");
    if (!(m->fingerprint = malloc(fl + 1)) || !(m->shard_elems = calloc(nsh + 1, 8)) ||
        !(m->shard_bytes = calloc(nsh + 1, 8))) {
        sl__snap_manifest_free(m);
        return sl_err(SL_ENOMEM, "%s: out of memory", name);
    }
    memcpy(m->fingerprint, p + off, fl);
    m->fingerprint[fl] = 0;
    off += pad8(fl);
    m->nshards = (int)nsh;
    int64_t total = 0;
    for (uint32_t i = 0; i < nsh; i++, off += 16) {
        m->shard_elems[i] = (int64_t)sl_load_le64(p + off);
        m->shard_bytes[i] = sl_load_le64(p + off + 8);
        if (m->shard_elems[i] < 0 || m->shard_elems[i] > INT64_MAX - total || m->shard_bytes[i] < SHARD_HDR)
            return man_bad(m, name, off, "bad shard entry");
        total += m->shard_elems[i];
    }
    if (total != m->elements) return man_bad(m, name, 16, "the shards' counts do not add up to the element count");
    m->ncomp = (int)ncomp;
    for (uint32_t k = 0; k < ncomp; k++) {
        sl__snap_spec *sp = &m->spec[k];
        if (end - off < 8) return man_bad(m, name, off, "spec truncated");
        sp->dtype = p[off];
        sp->rank = p[off + 1];
        uint16_t nl = (uint16_t)(p[off + 2] | p[off + 3] << 8);
        if (sp->dtype <= SL_DT_INVALID || sp->dtype >= SL_DT_COUNT_ || sp->rank > SL_MAX_RANK || nl == 0 ||
            nl >= SL_NAME_MAX || end - off - 8 < pad8(nl) + 8 * (size_t)sp->rank)
            return man_bad(m, name, off, "bad spec");
        off += 8;
        memcpy(sp->name, p + off, nl);
        sp->name[nl] = 0;
        off += pad8(nl);
        for (int i = 0; i < sp->rank; i++, off += 8) {
            sp->dims[i] = (int64_t)sl_load_le64(p + off);
            if (sp->dims[i] < -1) return man_bad(m, name, off, "bad spec dims");
        }
    }
    if (off != end) return man_bad(m, name, off, "bytes after the spec");
    *out = m;
    return SL_OK;
}

sl_status sl__snap_manifest_read(const char *dir, sl__snap_manifest **out) {
    *out = NULL;
    char path[SL_FILE_MAX_PATH + 16];
    snprintf(path, sizeof path, "%s/%s", dir, SL__SNAP_MANIFEST);
    if (access(path, F_OK) != 0) return SL_ENOTFOUND;
    int fd;
    uint64_t size;
    sl_status s = sl_file_open_read(path, "snapshot manifest", &fd, &size);
    if (s) return s;
    if (size > (64u << 20)) {
        close(fd);
        return man_bad(NULL, path, size, "too large");
    }
    uint8_t *b = malloc(size ? size : 1);
    if (!b) {
        close(fd);
        return sl_err(SL_ENOMEM, "%s: out of memory", path);
    }
    ssize_t got = pread(fd, b, size, 0);
    close(fd);
    if (got < 0 || (uint64_t)got != size) {
        free(b);
        return sl_err_at(SL_EIO, path, got < 0 ? 0 : got, "cannot read the snapshot manifest: %s",
                         got < 0 ? strerror(errno) : "short read");
    }
    s = sl__snap_manifest_parse(b, size, path, out);
    free(b);
    return s;
}

/* ---- the reader ---- */

struct sl__snap_reader {
    char dir[SL_FILE_MAX_PATH];
    char path[SL_FILE_MAX_PATH + 32]; /* the shard being read */
    const sl__snap_manifest *m;
    int shard;       /* being read; nshards: done */
    int fd;          /* -1: none open */
    uint64_t off;    /* next chunk's offset */
    int64_t in_shard; /* elements read from it */
};

static sl_status rd_bad(sl__snap_reader *r, const char *path, uint64_t at, const char *what) {
    sl_err_at(SL_ECORRUPT, path, (int64_t)at, "snapshot shard: %s", what);
    sl_err_hint("%s", HINT);
    if (r) {
        if (r->fd >= 0) close(r->fd);
        r->fd = -1;
        r->shard = r->m->nshards;
    }
    return SL_ECORRUPT;
}

/* Open shard i and check its size and header; fd into *fd. */
static sl_status open_shard(const sl__snap_reader *r, int i, char *path, size_t cap, int *fd) {
    shard_name(path, cap, r->dir, i);
    if (access(path, F_OK) != 0) return rd_bad(NULL, path, 0, "missing (the folder lost a shard)");
    uint64_t size;
    sl_status s = sl_file_open_read(path, "snapshot shard", fd, &size);
    if (s) return s;
    uint8_t h[SHARD_HDR];
    const char *why = NULL;
    uint64_t at = 0;
    if (size != r->m->shard_bytes[i]) why = size < r->m->shard_bytes[i] ? "truncated" : "longer than written", at = size;
    else if (pread(*fd, h, SHARD_HDR, 0) != SHARD_HDR) why = "cannot read the header";
    else if (memcmp(h, SHARD_MAGIC, 8) != 0) why = "bad magic";
    else if (sl_load_le32(h + 8) != SNAP_VERSION) why = "unsupported version", at = 8;
    else if (sl_load_le32(h + 12) != SHARD_HDR) why = "bad header size", at = 12;
    else if (sl_load_le32(h + 16) != (uint32_t)i) why = "shard index does not match its name", at = 16;
    else if (sl_load_le32(h + 20) != 0) why = "bad header (reserved bytes not zero)", at = 20;
    else if (sl_load_le64(h + 24) != fp_hash(r->m->fingerprint)) why = "written for another fingerprint", at = 24;
    if (!why) return SL_OK;
    close(*fd);
    *fd = -1;
    return rd_bad(NULL, path, at, why);
}

sl_status sl__snap_reader_open(const char *dir, const sl__snap_manifest *m, sl__snap_reader **out) {
    *out = NULL;
    sl__snap_reader *r = calloc(1, sizeof *r);
    if (!r) return sl_err(SL_ENOMEM, "%s: out of memory", dir);
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    r->m = m;
    r->fd = -1;
    for (int i = 0; i < m->nshards; i++) {
        int fd;
        sl_status s = open_shard(r, i, r->path, sizeof r->path, &fd);
        if (s) {
            free(r);
            return s;
        }
        close(fd);
    }
    r->shard = -1;
    r->in_shard = 0;
    *out = r;
    return SL_OK;
}

/* Does e match the spec (names, dtypes, ranks, the fixed dims)? */
static const char *spec_mismatch(const sl__snap_manifest *m, const sl_element *e) {
    if (e->n != m->ncomp) return "element has other components than the manifest's spec";
    for (int k = 0; k < m->ncomp; k++) {
        const sl__snap_spec *sp = &m->spec[k];
        int j = sl_element_find(e, sp->name);
        if (j < 0) return "element lacks a component of the spec";
        const sl_tensor *t = &e->t[j];
        if (t->dtype != sp->dtype || t->rank != sp->rank) return "component's dtype or rank differs from the spec";
        for (int i = 0; i < t->rank; i++)
            if (sp->dims[i] >= 0 && t->dims[i] != sp->dims[i]) return "component's shape differs from the spec";
    }
    return NULL;
}

sl_status sl__snap_reader_next(sl__snap_reader *r, sl_element *out) {
    const sl__snap_manifest *m = r->m;
    for (;;) {
        if (r->shard >= m->nshards) return SL_END;
        if (r->fd >= 0 && r->off == m->shard_bytes[r->shard]) {
            if (r->in_shard != m->shard_elems[r->shard])
                return rd_bad(r, r->path, r->off, "fewer elements than the manifest says");
            close(r->fd);
            r->fd = -1;
        }
        if (r->fd < 0) {
            if (++r->shard >= m->nshards) return SL_END;
            sl_status s = open_shard(r, r->shard, r->path, sizeof r->path, &r->fd);
            if (s) {
                r->shard = m->nshards;
                return s;
            }
            r->off = SHARD_HDR;
            r->in_shard = 0;
            continue;
        }
        break;
    }
    uint64_t at = r->off, left = m->shard_bytes[r->shard] - at;
    if (r->in_shard >= m->shard_elems[r->shard]) return rd_bad(r, r->path, at, "more elements than the manifest says");
    uint8_t h[CHUNK_HDR];
    if (left < CHUNK_HDR) return rd_bad(r, r->path, at, "truncated chunk header");
    ssize_t got = pread(r->fd, h, CHUNK_HDR, (off_t)at);
    if (got != CHUNK_HDR) return rd_bad(r, r->path, at, "truncated chunk header (the file shrank)");
    if (memcmp(h, CHUNK_MAGIC, 4) != 0) return rd_bad(r, r->path, at, "bad chunk magic");
    if (sl_load_le32(h + 16) != sl_crc32c(0, h, 16) || sl_load_le32(h + 20) != 0)
        return rd_bad(r, r->path, at, "chunk header checksum mismatch");
    uint64_t size = sl_load_le64(h + 8);
    if (size > left - CHUNK_HDR || pad8(size) > left - CHUNK_HDR)
        return rd_bad(r, r->path, at, "chunk runs past the end of the shard");
    sl_buf *b = sl_buf_new(pad8(size) ? pad8(size) : 1);
    if (!b) return sl_err(SL_ENOMEM, "%s: out of memory reading a %llu-byte chunk", r->path, (unsigned long long)size);
    got = size ? pread(r->fd, b->data, pad8(size), (off_t)(at + CHUNK_HDR)) : 0;
    if (got < 0 || (uint64_t)got != pad8(size)) {
        sl_buf_unref(b);
        return rd_bad(r, r->path, at, "truncated chunk (the file shrank)");
    }
    if (sl_crc32c(0, b->data, size) != sl_load_le32(h + 4)) {
        sl_buf_unref(b);
        return rd_bad(r, r->path, at, "chunk checksum mismatch");
    }
    for (uint64_t i = size; i < pad8(size); i++)
        if (((const uint8_t *)b->data)[i]) {
            sl_buf_unref(b);
            return rd_bad(r, r->path, at + CHUNK_HDR + i, "chunk padding not zero");
        }
    uint64_t bad_at;
    const char *why;
    sl_status s = sl__elem_decode(b, b->data, size, out, &bad_at, &why);
    sl_buf_unref(b);
    if (s == SL_ENOMEM) return sl_err(SL_ENOMEM, "%s: out of memory", r->path);
    if (s) return rd_bad(r, r->path, at + CHUNK_HDR + bad_at, why);
    if ((why = spec_mismatch(m, out))) {
        sl_element_clear(out);
        return rd_bad(r, r->path, at, why);
    }
    r->off = at + CHUNK_HDR + pad8(size);
    r->in_shard++;
    return SL_OK;
}

void sl__snap_reader_close(sl__snap_reader *r) {
    if (!r) return;
    if (r->fd >= 0) close(r->fd);
    free(r);
}

/* ---- removing folders ---- */

/* Our files: shard-NNNNN.sls, done, done.tmp. */
static bool ours(const char *name) {
    return !strcmp(name, SL__SNAP_MANIFEST) || !strcmp(name, SL__SNAP_MANIFEST ".tmp") ||
           (!strncmp(name, "shard-", 6) && strlen(name) == 15 && !strcmp(name + 11, ".sls"));
}

/* Remove our files in dir, then dir (which fails, leaving it, when it holds anything else). */
static int rm_folder(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *de;
    char p[SL_FILE_MAX_PATH + 300];
    while ((de = readdir(d))) {
        if (!ours(de->d_name)) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(d);
    return rmdir(dir);
}

static atomic_uint seq;

sl_status sl__snap_remove(const char *dir) {
    char aside[SL_FILE_MAX_PATH + 64];
    snprintf(aside, sizeof aside, "%s.old.%ld.%u", dir, (long)getpid(), atomic_fetch_add(&seq, 1));
    if (rename(dir, aside) != 0) {
        if (errno == ENOENT) return SL_OK;
        return sl_err(SL_EIO, "cannot move the snapshot folder %s aside: %s", dir, strerror(errno));
    }
    if (rm_folder(aside) != 0)
        return sl_err(SL_EIO, "cannot remove the old snapshot folder %s: %s (it holds files that are not a "
                      "snapshot's)", aside, strerror(errno));
    return SL_OK;
}

/* Remove dir.tmp.PID.N and dir.old.PID.N left by processes that are no longer running. */
static void clean_stale(const char *dir) {
    char parent[SL_FILE_MAX_PATH];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    const char *base = slash ? slash + 1 : dir;
    if (slash) *slash = 0;
    else snprintf(parent, sizeof parent, ".");
    if (slash == parent) snprintf(parent, sizeof parent, "/");
    size_t bl = strlen(base);
    DIR *d = opendir(parent);
    if (!d) return;
    struct dirent *de;
    char p[SL_FILE_MAX_PATH + 300];
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        if (strncmp(n, base, bl) != 0 || (strncmp(n + bl, ".tmp.", 5) != 0 && strncmp(n + bl, ".old.", 5) != 0))
            continue;
        long pid = strtol(n + bl + 5, NULL, 10);
        if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        snprintf(p, sizeof p, "%s/%s", parent, n);
        if (rm_folder(p) == 0) SL_INFO("snapshot: removed %s, left by process %ld that stopped mid-write", p, pid);
    }
    closedir(d);
}

/* ---- the writer ---- */

struct sl__snap_writer {
    char dir[SL_FILE_MAX_PATH];
    char tmp[SL_FILE_MAX_PATH + 64];
    char path[SL_FILE_MAX_PATH + 96]; /* the shard being written */
    char *fp;
    uint64_t fph;
    int64_t shard_bytes;
    FILE *f;            /* the shard being written, NULL between shards */
    uint64_t written;   /* its bytes */
    int nshards, cap;   /* shards started */
    int64_t *selems;
    uint64_t *sbytes;
    int64_t elements;
    int ncomp;
    sl__snap_spec spec[SL_ELEM_MAX];
    uint8_t *scratch;
    size_t scap;
};

void sl__snap_writer_abort(sl__snap_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    rm_folder(w->tmp);
    free(w->fp);
    free(w->selems);
    free(w->sbytes);
    free(w->scratch);
    free(w);
}

sl_status sl__snap_writer_open(const char *dir, const char *fingerprint, int64_t shard_bytes, sl__snap_writer **out) {
    *out = NULL;
    if (strlen(dir) >= SL_FILE_MAX_PATH - 64) return sl_err(SL_EINVAL, "snapshot folder path too long: %s", dir);
    sl__snap_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->fp = strdup(fingerprint))) {
        free(w);
        return sl_err(SL_ENOMEM, "out of memory writing the snapshot %s", dir);
    }
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp.%ld.%u", dir, (long)getpid(), atomic_fetch_add(&seq, 1));
    w->fph = fp_hash(fingerprint);
    w->shard_bytes = shard_bytes > 0 ? shard_bytes : 1;
    char parent[SL_FILE_MAX_PATH];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    sl_status s = SL_OK;
    if (slash && slash != parent) {
        *slash = 0;
        s = sl_mkdirs(parent, "snapshot folder");
    }
    if (!s && mkdir(w->tmp, 0777) != 0)
        s = sl_err(SL_EIO, "cannot create the snapshot folder %s: %s", w->tmp, strerror(errno));
    if (s) {
        free(w->fp);
        free(w);
        return s;
    }
    clean_stale(dir);
    *out = w;
    return SL_OK;
}

static sl_status wr(sl__snap_writer *w, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, w->f) != n) {
        int e = errno;
        struct stat st;
        uint64_t at = fstat(fileno(w->f), &st) == 0 ? (uint64_t)st.st_size : w->written;
        return sl_file_write_error(w->path, NULL, at, e);
    }
    w->written += n;
    return SL_OK;
}

static sl_status sync_close(sl__snap_writer *w) {
    sl_status s = SL_OK;
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0) s = sl_file_write_error(w->path, "syncing", w->written, errno);
    if (fclose(w->f) != 0 && !s) s = sl_file_write_error(w->path, "closing", w->written, errno);
    w->f = NULL;
    if (!s) w->sbytes[w->nshards - 1] = w->written;
    return s;
}

static sl_status start_shard(sl__snap_writer *w) {
    if (w->nshards == w->cap) {
        int ncap = w->cap ? 2 * w->cap : 8;
        int64_t *a = realloc(w->selems, (size_t)ncap * 8);
        if (a) w->selems = a;
        uint64_t *b = a ? realloc(w->sbytes, (size_t)ncap * 8) : NULL;
        if (!b) return sl_err(SL_ENOMEM, "out of memory writing the snapshot %s", w->dir);
        w->sbytes = b;
        w->cap = ncap;
    }
    shard_name(w->path, sizeof w->path, w->tmp, w->nshards);
    sl_status s = sl_file_fopen_write(w->path, "w", "snapshot shard", &w->f);
    if (s) return s;
    w->selems[w->nshards] = 0;
    w->sbytes[w->nshards] = 0;
    w->nshards++;
    w->written = 0;
    uint8_t h[SHARD_HDR] = {0};
    memcpy(h, SHARD_MAGIC, 8);
    sl_store_le32(h + 8, SNAP_VERSION);
    sl_store_le32(h + 12, SHARD_HDR);
    sl_store_le32(h + 16, (uint32_t)(w->nshards - 1));
    sl_store_le64(h + 24, w->fph);
    return wr(w, h, SHARD_HDR);
}

/* Fold e's structure into the spec (the first element sets it). */
static sl_status merge_spec(sl__snap_writer *w, const sl_element *e) {
    if (w->elements == 0) {
        w->ncomp = e->n;
        for (int k = 0; k < e->n; k++) {
            sl__snap_spec *sp = &w->spec[k];
            snprintf(sp->name, sizeof sp->name, "%s", e->names[k]);
            sp->dtype = e->t[k].dtype;
            sp->rank = e->t[k].rank;
            memcpy(sp->dims, e->t[k].dims, sizeof sp->dims);
        }
        return SL_OK;
    }
    bool same = e->n == w->ncomp;
    for (int k = 0; k < w->ncomp && same; k++) {
        sl__snap_spec *sp = &w->spec[k];
        int j = sl_element_find(e, sp->name);
        if (j < 0 || e->t[j].dtype != sp->dtype || e->t[j].rank != sp->rank) {
            same = false;
            break;
        }
        for (int i = 0; i < sp->rank; i++)
            if (sp->dims[i] != e->t[j].dims[i]) sp->dims[i] = -1;
    }
    if (same) return SL_OK;
    char a[128];
    return sl_err(SL_EINVAL, "snapshot %s: element %lld has other components, dtypes or ranks than the first "
                  "(component %s: %s)", w->dir, (long long)w->elements, e->n ? e->names[0] : "-",
                  e->n ? sl_tensor_describe(&e->t[0], a, sizeof a) : "none");
}

sl_status sl__snap_writer_add(sl__snap_writer *w, const sl_element *e) {
    sl_status s;
    if ((s = merge_spec(w, e))) return s;
    if (w->f && w->written >= (uint64_t)w->shard_bytes && (s = sync_close(w))) return s;
    if (!w->f && (s = start_shard(w))) return s;
    size_t size = sl__elem_encode(e, &w->scratch, &w->scap);
    if (!size) return sl_err(SL_ENOMEM, "out of memory writing the snapshot %s", w->dir);
    uint8_t h[CHUNK_HDR] = {0};
    memcpy(h, CHUNK_MAGIC, 4);
    sl_store_le32(h + 4, sl_crc32c(0, w->scratch, size));
    sl_store_le64(h + 8, size);
    sl_store_le32(h + 16, sl_crc32c(0, h, 16));
    static const uint8_t zeros[8];
    if ((s = wr(w, h, CHUNK_HDR)) || (s = wr(w, w->scratch, size)) || (s = wr(w, zeros, pad8(size) - size)))
        return s;
    w->selems[w->nshards - 1]++;
    w->elements++;
    return SL_OK;
}

static sl_status write_manifest(sl__snap_writer *w) {
    size_t fl = strlen(w->fp), n = 40 + pad8(fl) + 16 * (size_t)w->nshards + 8;
    for (int k = 0; k < w->ncomp; k++) n += 8 + pad8(strlen(w->spec[k].name)) + 8 * (size_t)w->spec[k].rank;
    if (n > UINT32_MAX) return sl_err(SL_EINVAL, "snapshot %s: the manifest would pass 4 GiB", w->dir);
    uint8_t *b = calloc(1, n);
    if (!b) return sl_err(SL_ENOMEM, "out of memory writing the snapshot %s", w->dir);
    memcpy(b, MAN_MAGIC, 8);
    sl_store_le32(b + 8, SNAP_VERSION);
    sl_store_le32(b + 12, (uint32_t)n);
    sl_store_le64(b + 16, (uint64_t)w->elements);
    sl_store_le32(b + 24, (uint32_t)w->nshards);
    sl_store_le32(b + 28, (uint32_t)w->ncomp);
    sl_store_le32(b + 32, (uint32_t)fl);
    size_t off = 40;
    memcpy(b + off, w->fp, fl);
    off += pad8(fl);
    for (int i = 0; i < w->nshards; i++, off += 16) {
        sl_store_le64(b + off, (uint64_t)w->selems[i]);
        sl_store_le64(b + off + 8, w->sbytes[i]);
    }
    for (int k = 0; k < w->ncomp; k++) {
        const sl__snap_spec *sp = &w->spec[k];
        size_t nl = strlen(sp->name);
        b[off] = (uint8_t)sp->dtype;
        b[off + 1] = (uint8_t)sp->rank;
        b[off + 2] = (uint8_t)(nl & 0xff);
        b[off + 3] = (uint8_t)(nl >> 8);
        off += 8;
        memcpy(b + off, sp->name, nl);
        off += pad8(nl);
        for (int i = 0; i < sp->rank; i++, off += 8) sl_store_le64(b + off, (uint64_t)sp->dims[i]);
    }
    sl_store_le32(b + off, sl_crc32c(0, b, off));
    char fin[sizeof w->path];
    snprintf(w->path, sizeof w->path, "%s/%s.tmp", w->tmp, SL__SNAP_MANIFEST);
    snprintf(fin, sizeof fin, "%s/%s", w->tmp, SL__SNAP_MANIFEST);
    sl_status s = sl_file_fopen_write(w->path, "w", "snapshot manifest", &w->f);
    w->written = 0;
    if (!s && (s = wr(w, b, n))) {
        fclose(w->f);
        w->f = NULL;
    }
    free(b);
    if (!s) {
        if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0) s = sl_file_write_error(w->path, "syncing", n, errno);
        if (fclose(w->f) != 0 && !s) s = sl_file_write_error(w->path, "closing", n, errno);
        w->f = NULL;
    }
    if (!s && rename(w->path, fin) != 0)
        s = sl_err(SL_EIO, "cannot rename %s to %s: %s", w->path, fin, strerror(errno));
    return s;
}

static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    fsync(fd);
    close(fd);
}

sl_status sl__snap_writer_commit(sl__snap_writer *w, bool replace, bool *kept_other) {
    *kept_other = false;
    sl_status s = SL_OK;
    if (w->f) s = sync_close(w);
    if (!s && w->nshards == 0 && !(s = start_shard(w))) s = sync_close(w); /* no elements: one empty shard */
    if (!s) s = write_manifest(w);
    if (s) {
        sl__snap_writer_abort(w);
        return s;
    }
    sync_dir(w->tmp);
    if (replace && access(w->dir, F_OK) == 0 && (s = sl__snap_remove(w->dir))) {
        sl__snap_writer_abort(w);
        return s;
    }
    if (rename(w->tmp, w->dir) != 0) {
        int e = errno;
        if (!replace && (e == EEXIST || e == ENOTEMPTY)) {
            *kept_other = true;
            sl__snap_writer_abort(w);
            return SL_OK;
        }
        s = sl_err(SL_EIO, "cannot rename the snapshot folder %s to %s: %s", w->tmp, w->dir, strerror(e));
        sl__snap_writer_abort(w);
        return s;
    }
    char parent[SL_FILE_MAX_PATH];
    snprintf(parent, sizeof parent, "%s", w->dir);
    char *slash = strrchr(parent, '/');
    if (slash) {
        *slash = 0;
        sync_dir(slash == parent ? "/" : parent);
    }
    w->tmp[0] = 0; /* nothing to remove */
    free(w->fp);
    free(w->selems);
    free(w->sbytes);
    free(w->scratch);
    free(w);
    return SL_OK;
}
