/* Record indexes of uncompressed TFRecord files: the scan that builds one, its file format,
 * the file identity that says whether a cached index still holds, and the cache beside the
 * file or in a folder. See sluice/tfrecord_index.h for the contract; random access over an
 * index is formats/tfrecord_index_file.c.
 *
 * Workload: one scan per shard when its index is missing or stale, thousands of shards per
 * job. The scan reads the 12-byte header of each record from the file's mapping and jumps
 * over the data, so for records of 100 KB it touches one page in 25 and runs at about 30
 * GB/s from the page cache (a page fault per record). For records of a few hundred bytes
 * every cache line holding a header is a miss the loop waits for (the next header's place is
 * known only once this one is read: 200 ns a record, 4 GB/s at 800 bytes), so the scan
 * fills the mapping's page tables ahead (MADV_POPULATE_READ: a prefetch of an unmapped page
 * is dropped) and prefetches every line 16 KiB ahead of the header it reads: 10 GB/s. A
 * cached index is one file of 8 bytes per record, read whole and checked field by field. */
#include "sluice/tfrecord_index.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/tfrecord_index_priv.h"
#include "sluice/crc32c.h"
#include "sluice/file.h"
#include "sluice/log.h"
#include "sluice/util.h"

#define HDR 12     /* uint64 length + uint32 masked CRC of it */
#define FRAME 16   /* HDR + the data's uint32 masked CRC */
#define EDGE 4096  /* bytes at each end of the file whose CRC is in its identity */
#define IX_MAGIC "SLTFRIDX"
#define IX_VERSION 1
#define IX_HEADER 64
#define IX_MIN (IX_HEADER + 4)   /* an index of no records */
#define BASENAME_MAX_CUT 180     /* of the file's name in a cache folder: room for the rest */
#define DENSE_BELOW 16384       /* records shorter than this: every page is read, so read ahead */
#define POPULATE_STEP ((size_t)8 << 20) /* mapped bytes whose page tables are filled at once */
#define PREFETCH_AHEAD 16384     /* bytes past the header being read that are asked for */
#define INITIAL_CAP_MAX ((uint64_t)1 << 20) /* offsets allocated before the scan, at most */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14; older kernels answer EINVAL */
#endif

static const char HINT_CORRUPT[] =
    "the file may be damaged or not a TFRecord file; index it with skip_corrupt "
    "(sluice-record index --skip-corrupt) to leave the bad records out";
static const char HINT_TRUNC[] =
    "the file may have been cut short (an interrupted copy, or a writer that was not "
    "closed); index it with skip_corrupt (sluice-record index --skip-corrupt) to keep the "
    "records before the damage";

sl_tfr_index_opts sl_tfr_index_opts_default(void) {
    return (sl_tfr_index_opts){.cache_dir = NULL, .rebuild = false, .skip_corrupt = false};
}

int64_t sl_tfr_index_count(const sl_tfr_index *ix) { return ix->count; }

uint64_t sl_tfr_index_offset(const sl_tfr_index *ix, int64_t i) {
    return i >= 0 && i < ix->count ? ix->off[i] : UINT64_MAX;
}

bool sl_tfr_index_built(const sl_tfr_index *ix) { return ix->built; }
bool sl_tfr_index_cached(const sl_tfr_index *ix) { return ix->cached; }
uint64_t sl_tfr_index_skipped(const sl_tfr_index *ix) { return ix->skipped; }

void sl_tfr_index_free(sl_tfr_index *ix) {
    if (!ix) return;
    free(ix->off);
    free(ix);
}

/* An index of room for cap offsets (grown by push). */
static sl_tfr_index *index_new(uint64_t size, size_t cap, const char *name) {
    sl_tfr_index *ix = calloc(1, sizeof *ix);
    if (ix && cap && !(ix->off = malloc(cap * sizeof *ix->off))) {
        free(ix);
        ix = NULL;
    }
    if (!ix) {
        sl_err(SL_ENOMEM, "%s: out of memory for a record index of %zu records", name, cap);
        return NULL;
    }
    ix->size = size;
    return ix;
}

const char *sl__tfr_u128_str(char *buf, size_t cap, unsigned __int128 v) {
    char tmp[48];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + (int)(v % 10));
        v /= 10;
    } while (v);
    size_t k = 0;
    while (n && k + 1 < cap) buf[k++] = tmp[--n];
    buf[k] = 0;
    return buf;
}

/* ---- the file's identity ---------------------------------------------------------------- */

static sl_status pread_all(int fd, uint8_t *p, size_t n, uint64_t at, const char *name) {
    for (size_t got = 0; got < n;) {
        ssize_t r = pread(fd, p + got, n - got, (off_t)(at + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return sl_err(SL_EIO, "%s: read failed at byte %llu: %s", name,
                          (unsigned long long)(at + got), strerror(errno));
        if (r == 0)
            return sl_err(SL_EIO, "%s: shrank while its identity was read (no bytes at %llu)",
                          name, (unsigned long long)(at + got));
        got += (size_t)r;
    }
    return SL_OK;
}

sl_status sl_tfr_file_identity(int fd, const char *name, sl_tfr_file_id *id) {
    memset(id, 0, sizeof *id);
    struct stat st;
    if (fstat(fd, &st) != 0) return sl_err(SL_EIO, "%s: cannot stat: %s", name, strerror(errno));
    uint64_t size = (uint64_t)st.st_size;
    uint8_t buf[EDGE];
    size_t n = size < EDGE ? (size_t)size : EDGE;
    sl_status s = pread_all(fd, buf, n, 0, name);
    if (s) return s;
    uint32_t head = sl_crc32c(0, buf, n);
    if ((s = pread_all(fd, buf, n, size - n, name))) return s;
    id->size = size;
    id->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
    id->inode = (uint64_t)st.st_ino;
    id->crc_head = head;
    id->crc_tail = sl_crc32c(0, buf, n);
    return SL_OK;
}

/* ---- the scan ------------------------------------------------------------------------- */

typedef struct scan {
    const uint8_t *p;     /* the file's bytes */
    uint64_t size;
    const char *name;
    const sl_buf *guard;  /* the mapping, when p is one (shrink checks); else NULL */
    uint64_t inode;       /* of the mapped file, for messages */
    size_t populated;     /* p[0, populated) has had its page tables filled */
    bool populate;        /* fill page tables ahead (a mapping of short records) */
    bool prefetch;        /* prefetch every line ahead (short records) */
} scan;

/* Bytes p[at, at + n) of a mapping came back as zeros because the file shrank? Then the
 * error to give instead of bad framing (SL_EIO), else SL_OK. */
static sl_status shrank(const scan *sc, uint64_t at, uint64_t n) {
    if (!sc->guard || !sl_buf_lost(sc->guard, sc->p + at, (size_t)n)) return SL_OK;
    char where[32];
    snprintf(where, sizeof where, "byte %llu", (unsigned long long)at);
    return sl__tfr_shrink_err(sc->name, sc->inode, sc->size, "indexed", where);
}

static sl_status frame_err(const scan *sc, uint64_t at, uint64_t n, const char *hint,
                           const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static sl_status frame_err(const scan *sc, uint64_t at, uint64_t n, const char *hint,
                           const char *fmt, ...) {
    sl_status s = shrank(sc, at, n);
    if (s) return s;
    char body[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    sl_err(SL_ECORRUPT, "%s: byte %llu: %s", sc->name, (unsigned long long)at, body);
    sl_err_hint("%s", hint);
    return SL_ECORRUPT;
}

static sl_status push(sl_tfr_index *ix, size_t *cap, uint64_t off, const char *name) {
    if ((size_t)ix->count == *cap) {
        size_t ncap = *cap < 1024 ? 1024 : *cap * 2;
        uint64_t *n = realloc(ix->off, ncap * sizeof *n);
        if (!n) return sl_err(SL_ENOMEM, "%s: out of memory for a record index of %zu records", name, ncap);
        ix->off = n;
        *cap = ncap;
    }
    ix->off[ix->count++] = off;
    return SL_OK;
}

/* Fill the page tables of the mapping up to POPULATE_STEP past `need`: one call instead of a
 * fault every 16 pages. Only a hint: an error stops asking. */
static void populate_to(scan *sc, uint64_t need) {
    if (!sc->populate || need <= sc->populated) return;
    if (need > sc->size) need = sc->size;
    size_t from = sc->populated & ~(size_t)4095;
    size_t to = sc->size - need > POPULATE_STEP ? (size_t)need + POPULATE_STEP : (size_t)sc->size;
    if (madvise((void *)(sc->p + from), to - from, MADV_POPULATE_READ) != 0) sc->populate = false;
    sc->populated = to;
}

/* The framing scan: every record's length CRC, and that it fits. */
static sl_status scan_framing(scan *sc, sl_tfr_index **out) {
    const uint8_t *p = sc->p;
    const uint64_t size = sc->size;
    /* room for the records if they are all the size of the first (up to 8 MiB of offsets:
     * a first record of 0 bytes says little about the rest) */
    size_t cap = 0;
    if (size >= FRAME) {
        uint64_t first = sl_load_le64(p);
        uint64_t guess = first < size ? size / (FRAME + first) + 1 : 1;
        cap = (size_t)(guess < INITIAL_CAP_MAX ? guess : INITIAL_CAP_MAX);
        sc->prefetch = first < DENSE_BELOW;
        sc->populate = sc->prefetch && sc->guard && size > POPULATE_STEP;
    }
    sl_tfr_index *ix = index_new(size, cap, sc->name);
    if (!ix) return SL_ENOMEM;
    sl_status s = SL_OK;
    uint64_t fetched = 0; /* p[0, fetched) was prefetched */
    for (uint64_t pos = 0; pos < size;) {
        uint64_t left = size - pos;
        if (sc->populate && pos + HDR > sc->populated) populate_to(sc, pos + HDR);
        if (sc->prefetch) {
            uint64_t to = left > PREFETCH_AHEAD ? pos + PREFETCH_AHEAD : size;
            for (; fetched < to; fetched += 64) __builtin_prefetch(p + fetched);
        }
        if (left < HDR) {
            s = frame_err(sc, pos, left, HINT_TRUNC, "truncated record: header needs %d bytes, %llu left",
                          HDR, (unsigned long long)left);
            break;
        }
        const uint8_t *h = p + pos;
        uint64_t len = sl_load_le64(h);
        uint32_t stored = sl_load_le32(h + 8), computed = sl_crc32c_mask(sl_crc32c(0, h, 8));
        if (stored != computed) {
            s = frame_err(sc, pos, HDR, HINT_CORRUPT,
                          "corrupt record: length CRC mismatch (stored 0x%08x, computed 0x%08x)",
                          stored, computed);
            break;
        }
        if (left < FRAME || len > left - FRAME) {
            char need[48];
            s = frame_err(sc, pos, left, HINT_TRUNC,
                          "truncated record: needs %s bytes (12-byte header, %llu of data, 4-byte "
                          "CRC) but only %llu are left",
                          sl__tfr_u128_str(need, sizeof need, (unsigned __int128)len + FRAME),
                          (unsigned long long)len, (unsigned long long)left);
            break;
        }
        if ((s = push(ix, &cap, pos, sc->name))) break;
        pos += FRAME + len;
    }
    if (!s && sc->guard && sl_buf_damaged(sc->guard)) s = shrank(sc, 0, size);
    if (s) {
        sl_tfr_index_free(ix);
        return s;
    }
    *out = ix;
    return SL_OK;
}

/* Skip mode after bad framing: the records sl_tfr_reader_next returns in skip mode. */
static sl_status scan_skipping(scan *sc, sl_tfr_index **out) {
    sl_tfr_read_opts ro = sl_tfr_read_opts_default();
    ro.compression = SL_COMP_NONE;
    ro.skip_corrupt = true;
    sl_tfr_reader *r;
    sl_status s = sl_tfr_reader_open_mem(sc->p, (size_t)sc->size, sc->name, &ro, &r);
    if (s) return s;
    size_t cap = 0;
    sl_tfr_index *ix = index_new(sc->size, 0, sc->name);
    if (!ix) {
        sl_tfr_reader_close(r);
        return SL_ENOMEM;
    }
    sl_record rec;
    while ((s = sl_tfr_reader_next(r, &rec)) == SL_OK)
        if ((s = push(ix, &cap, rec.offset, sc->name))) break;
    uint64_t skipped = sl_tfr_reader_stats(r).corrupt_skipped;
    sl_tfr_reader_close(r);
    if (s == SL_END) s = sc->guard && sl_buf_damaged(sc->guard) ? shrank(sc, 0, sc->size) : SL_OK;
    if (s) {
        sl_tfr_index_free(ix);
        return s;
    }
    ix->skipped = skipped ? skipped : 1; /* the framing scan failed: something was skipped */
    *out = ix;
    return SL_OK;
}

static sl_status build(scan *sc, bool skip_corrupt, sl_tfr_index **out) {
    *out = NULL;
    sl_status s = scan_framing(sc, out);
    if (s == SL_ECORRUPT && skip_corrupt) s = scan_skipping(sc, out);
    if (!s) (*out)->built = true;
    return s;
}

sl_status sl_tfr_index_build_mem(const void *data, size_t size, const char *name,
                                 bool skip_corrupt, sl_tfr_index **out) {
    scan sc = {.p = data, .size = size, .name = name ? name : "<memory>"};
    return build(&sc, skip_corrupt, out);
}

/* ---- the index file ---------------------------------------------------------------------- */

sl_status sl_tfr_index_serialize(const sl_tfr_index *ix, const sl_tfr_file_id *id, uint8_t **out,
                                 size_t *len) {
    *out = NULL;
    *len = 0;
    sl_tfr_file_id sized = {.size = ix->size};
    if (!id) id = &sized;
    if (id->size != ix->size)
        return sl_err(SL_EINVAL, "record index: the identity is of a file of %llu bytes, the index of one of %llu",
                      (unsigned long long)id->size, (unsigned long long)ix->size);
    if ((uint64_t)ix->count > (SIZE_MAX - IX_MIN) / 8)
        return sl_err(SL_ENOMEM, "record index: %lld records do not fit in memory", (long long)ix->count);
    size_t n = IX_MIN + 8 * (size_t)ix->count;
    uint8_t *b = malloc(n);
    if (!b) return sl_err(SL_ENOMEM, "record index: out of memory for %zu bytes", n);
    memcpy(b, IX_MAGIC, 8);
    sl_store_le32(b + 8, IX_VERSION);
    sl_store_le32(b + 12, IX_HEADER);
    sl_store_le64(b + 16, id->size);
    sl_store_le64(b + 24, id->mtime_ns);
    sl_store_le64(b + 32, id->inode);
    sl_store_le32(b + 40, id->crc_head);
    sl_store_le32(b + 44, id->crc_tail);
    sl_store_le64(b + 48, (uint64_t)ix->count);
    sl_store_le64(b + 56, ix->skipped);
    for (int64_t i = 0; i < ix->count; i++) sl_store_le64(b + IX_HEADER + 8 * i, ix->off[i]);
    sl_store_le32(b + n - 4, sl_crc32c(0, b, n - 4));
    *out = b;
    *len = n;
    return SL_OK;
}

/* SL_ECORRUPT "NAME: stale: ..." when the identity recorded at b differs from *want. */
static sl_status check_identity(const uint8_t *b, const char *name, const sl_tfr_file_id *want) {
    uint64_t size = sl_load_le64(b + 16);
    if (size != want->size)
        return sl_err(SL_ECORRUPT, "%s: stale: the file's size changed (indexed at %llu bytes, now %llu)", name,
                      (unsigned long long)size, (unsigned long long)want->size);
    if (sl_load_le64(b + 24) != want->mtime_ns)
        return sl_err(SL_ECORRUPT, "%s: stale: the file's modification time changed", name);
    if (sl_load_le64(b + 32) != want->inode)
        return sl_err(SL_ECORRUPT, "%s: stale: the file's inode changed (it was replaced)", name);
    if (sl_load_le32(b + 40) != want->crc_head)
        return sl_err(SL_ECORRUPT, "%s: stale: the file's first 4 KiB changed", name);
    if (sl_load_le32(b + 44) != want->crc_tail)
        return sl_err(SL_ECORRUPT, "%s: stale: the file's last 4 KiB changed", name);
    return SL_OK;
}

/* The fixed fields: magic, version, header size, length, checksum. */
static sl_status check_shape(const uint8_t *b, size_t len, const char *name) {
    for (size_t k = 0; k < 8 && k < len; k++)
        if (b[k] != (uint8_t)IX_MAGIC[k])
            return sl_err(SL_ECORRUPT, "%s: byte %zu: not a Sluice record index (no %s magic)", name, k, IX_MAGIC);
    if (len < IX_MIN)
        return sl_err(SL_ECORRUPT, "%s: truncated: %zu bytes, an index has at least %d", name, len, IX_MIN);
    uint32_t version = sl_load_le32(b + 8), hsize = sl_load_le32(b + 12);
    if (version != IX_VERSION)
        return sl_err(SL_ECORRUPT, "%s: byte 8: version %u, this build reads version %d", name, version, IX_VERSION);
    if (hsize != IX_HEADER)
        return sl_err(SL_ECORRUPT, "%s: byte 12: header size %u, version %d has %d", name, hsize, IX_VERSION,
                      IX_HEADER);
    uint64_t count = sl_load_le64(b + 48);
    unsigned __int128 need = (unsigned __int128)count * 8 + IX_MIN;
    if (need != len) {
        char nb[48];
        return sl_err(SL_ECORRUPT, "%s: byte 48: %llu records need an index of %s bytes, this one has %zu", name,
                      (unsigned long long)count, sl__tfr_u128_str(nb, sizeof nb, need), len);
    }
    uint32_t stored = sl_load_le32(b + len - 4), computed = sl_crc32c(0, b, len - 4);
    if (stored != computed)
        return sl_err(SL_ECORRUPT, "%s: byte %zu: damaged: checksum mismatch (stored 0x%08x, computed 0x%08x)", name,
                      len - 4, stored, computed);
    return SL_OK;
}

/* The offsets behind a good checksum: only a writer other than ours can get them wrong. */
static sl_status read_offsets(const uint8_t *b, const char *name, sl_tfr_index *ix) {
    const uint64_t size = ix->size;
    if (ix->skipped > size)
        return sl_err(SL_ECORRUPT, "%s: byte 56: damaged: %llu skipped records in a file of %llu bytes", name,
                      (unsigned long long)ix->skipped, (unsigned long long)size);
    if (ix->count == 0 && size > 0 && ix->skipped == 0)
        return sl_err(SL_ECORRUPT, "%s: byte 48: damaged: no records in a file of %llu bytes, in an index "
                      "without skipped records", name, (unsigned long long)size);
    for (int64_t i = 0; i < ix->count; i++) {
        uint64_t off = sl_load_le64(b + IX_HEADER + 8 * i);
        size_t at = IX_HEADER + 8 * (size_t)i;
        if (i == 0 && off != 0 && ix->skipped == 0)
            return sl_err(SL_ECORRUPT, "%s: byte %zu: damaged: the first record is at byte %llu, not 0, in an "
                          "index without skipped records", name, at, (unsigned long long)off);
        if (i > 0 && (off < ix->off[i - 1] || off - ix->off[i - 1] < FRAME))
            return sl_err(SL_ECORRUPT, "%s: byte %zu: damaged: record %lld's offset %llu is not at least 16 "
                          "bytes after record %lld's (%llu)", name, at, (long long)i, (unsigned long long)off,
                          (long long)(i - 1), (unsigned long long)ix->off[i - 1]);
        if (size < FRAME || off > size - FRAME)
            return sl_err(SL_ECORRUPT, "%s: byte %zu: damaged: record %lld's offset %llu leaves no room for a "
                          "record in a file of %llu bytes", name, at, (long long)i, (unsigned long long)off,
                          (unsigned long long)size);
        ix->off[i] = off;
    }
    return SL_OK;
}

sl_status sl_tfr_index_parse(const void *data, size_t len, const char *name,
                             const sl_tfr_file_id *want, sl_tfr_index **out) {
    *out = NULL;
    const uint8_t *b = data;
    if (!name) name = "record index";
    sl_status s = check_shape(b, len, name);
    if (s) return s;
    if (want && (s = check_identity(b, name, want))) return s;
    uint64_t count = sl_load_le64(b + 48); /* len is 68 + 8 * count: it fits */
    sl_tfr_index *ix = index_new(sl_load_le64(b + 16), (size_t)count, name);
    if (!ix) return SL_ENOMEM;
    ix->count = (int64_t)count;
    ix->skipped = sl_load_le64(b + 56);
    if ((s = read_offsets(b, name, ix))) {
        sl_tfr_index_free(ix);
        return s;
    }
    *out = ix;
    return SL_OK;
}

/* ---- where the index lives ------------------------------------------------------------- */

sl_status sl_tfr_index_cache_path(const char *path, const char *cache_dir, char *out, size_t cap) {
    if (cap) out[0] = 0;
    int n;
    if (!cache_dir) {
        n = snprintf(out, cap, "%s.slidx", path);
    } else if (!cache_dir[0]) {
        return sl_err(SL_EINVAL, "%s: its record index is kept in memory only (an empty cache folder): "
                      "it has no file", path);
    } else {
        char *real = realpath(path, NULL);
        if (!real) {
            int e = errno;
            return sl_err(e == ENOENT ? SL_ENOTFOUND : SL_EIO, "%s: cannot find its absolute path: %s", path,
                          strerror(e));
        }
        const char *base = strrchr(real, '/');
        base = base ? base + 1 : real;
        size_t dl = strlen(cache_dir);
        n = snprintf(out, cap, "%s%s%.*s.%016llx.slidx", cache_dir, cache_dir[dl - 1] == '/' ? "" : "/",
                     BASENAME_MAX_CUT, base, (unsigned long long)sl_fnv1a64(SL_FNV64_INIT, real, strlen(real)));
        free(real);
    }
    if (n < 0 || (size_t)n >= cap) {
        if (cap) out[0] = 0;
        return sl_err(SL_EINVAL, "%s: the path of its record index is longer than %zu bytes", path,
                      cap ? cap - 1 : 0);
    }
    return SL_OK;
}

/* Write ix to idx under a temporary name, then rename it into place. */
static sl_status save(const char *idx, const sl_tfr_index *ix, const sl_tfr_file_id *id) {
    static atomic_uint seq;
    sl_status s = sl_file_check_regular(idx, "record index"); /* rename would replace a FIFO */
    if (s && s != SL_ENOTFOUND) return s;
    uint8_t *b;
    size_t len;
    if ((s = sl_tfr_index_serialize(ix, id, &b, &len))) return s;
    char tmp[SL_FILE_MAX_PATH + 48];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", idx, (long)getpid(), atomic_fetch_add(&seq, 1));
    int fd;
    if ((s = sl_file_open_write(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666, "record index", &fd))) {
        free(b);
        return s;
    }
    uint64_t at = 0;
    s = sl_file_write_all(fd, b, len, idx, &at);
    free(b);
    if (close(fd) != 0 && !s) s = sl_file_write_error(idx, "cannot close", at, errno);
    if (!s && rename(tmp, idx) != 0) s = sl_err(SL_EIO, "cannot rename %s over it: %s", tmp, strerror(errno));
    if (s) unlink(tmp);
    return s;
}

/* The first line of the current error message (without its hint), for a warning. */
static const char *err_line(char *buf, size_t cap) {
    snprintf(buf, cap, "%s", sl_errmsg());
    char *nl = strchr(buf, '\n');
    if (nl) *nl = 0;
    return buf;
}

typedef enum cached { CACHE_HIT, CACHE_MISSING, CACHE_REBUILD, CACHE_UNREADABLE } cached;

/* Look for a valid index of the file (identity *id) at idx. */
static cached load(const char *idx, const sl_tfr_file_id *id, bool skip_corrupt, sl_tfr_index **out) {
    char line[1100];
    char *data;
    size_t len;
    /* at most 8 bytes for every 16 of the file: a larger file is not its index */
    uint64_t limit = IX_MIN + id->size / 2;
    sl_status s = sl_file_read_all(idx, "record index", limit, NULL, &data, &len);
    if (s == SL_ENOTFOUND) return CACHE_MISSING;
    if (s && s != SL_ERANGE) {
        SL_WARN("%s; the index is kept in memory only", err_line(line, sizeof line));
        return CACHE_UNREADABLE;
    }
    if (!s) {
        s = sl_tfr_index_parse(data, len, idx, id, out);
        free(data);
    }
    if (s) {
        SL_WARN("%s; rebuilding it", err_line(line, sizeof line));
        return CACHE_REBUILD;
    }
    if ((*out)->skipped && !skip_corrupt) { /* not for an open that fails on damage */
        sl_tfr_index_free(*out);
        *out = NULL;
        return CACHE_REBUILD;
    }
    (*out)->cached = true;
    return CACHE_HIT;
}

/* Where the index goes for o: *idx, or "" for nowhere (in memory, or a warning said why). */
static void place(const char *path, const sl_tfr_index_opts *o, char *idx, size_t cap) {
    char line[1100];
    idx[0] = 0;
    if (o->cache_dir && !o->cache_dir[0]) return;
    if (sl_tfr_index_cache_path(path, o->cache_dir, idx, cap)) {
        SL_WARN("%s; the index is kept in memory only", err_line(line, sizeof line));
        idx[0] = 0;
    } else if (o->cache_dir && sl_mkdirs(o->cache_dir, "index cache folder")) {
        SL_WARN("%s: cannot use the index cache: %s; the index is kept in memory only", idx,
                err_line(line, sizeof line));
        idx[0] = 0;
    }
}

sl_status sl__tfr_index_get(const char *path, int fd, const sl_tfr_file_id *id, const uint8_t *map,
                            const sl_buf *guard, const sl_tfr_index_opts *o, sl_tfr_index **out) {
    *out = NULL;
    sl_error before; /* a success leaves the caller's error slot as it was */
    sl_err_save(&before);
    char idx[SL_FILE_MAX_PATH], line[1100];
    place(path, o, idx, sizeof idx);
    cached c = idx[0] && !o->rebuild ? load(idx, id, o->skip_corrupt, out) : CACHE_MISSING;
    if (c == CACHE_HIT) {
        sl_err_restore(&before);
        return SL_OK;
    }
    sl_buf *mine = NULL;
    sl_status s = SL_OK;
    if (!map && id->size) {
        if ((s = sl__tfr_map(path, fd, id->size, &mine))) return s;
        map = mine->data;
        guard = mine;
        if ((s = sl__tfr_check_plain(path, map, (size_t)id->size))) goto out;
    }
    scan sc = {.p = map, .size = id->size, .name = path, .guard = guard, .inode = id->inode};
    if ((s = build(&sc, o->skip_corrupt, out))) goto out;
    if (idx[0] && c != CACHE_UNREADABLE) {
        if (save(idx, *out, id))
            SL_WARN("%s: cannot save the record index: %s; it is kept in memory only", idx,
                    err_line(line, sizeof line));
        else
            (*out)->cached = true;
    }
    sl_err_restore(&before);
out:
    sl_buf_unref(mine);
    return s;
}

/* ---- opening ---------------------------------------------------------------------------- */

sl_status sl__tfr_map(const char *path, int fd, uint64_t size, sl_buf **buf) {
    *buf = NULL;
    if (size == 0) return SL_OK;
    if (size > SIZE_MAX) return sl_err(SL_EIO, "%s: cannot map %llu bytes: larger than memory", path,
                                       (unsigned long long)size);
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        sl_err(SL_EIO, "%s: cannot map %llu bytes: %s", path, (unsigned long long)size, strerror(errno));
        sl_err_hint("random access needs a file that can be mapped (a local or network file system, "
                    "not a pipe or a FUSE mount without mmap)");
        return SL_EIO;
    }
    if (!(*buf = sl_buf_wrap_file_mapping(map, (size_t)size, PROT_READ, fd))) {
        munmap(map, (size_t)size);
        return sl_err(SL_ENOMEM, "%s: out of memory mapping the file", path);
    }
    return SL_OK;
}

sl_status sl__tfr_check_plain(const char *path, const uint8_t *p, size_t n) {
    sl_tfr_reader *r;
    sl_status s = sl_tfr_reader_open_mem(p, n < 64 ? n : 64, path, NULL, &r); /* AUTO, as the reader */
    if (s == SL_ECORRUPT) return SL_OK; /* not a compressed stream: the scan says what it is */
    if (s) return s;
    sl_compression c = sl_tfr_reader_compression(r);
    sl_tfr_reader_close(r);
    if (c == SL_COMP_NONE) return SL_OK;
    sl_err(SL_EUNSUPPORTED, "%s: is %s-compressed: a compressed TFRecord file has no random access", path,
           c == SL_COMP_GZIP ? "GZIP" : "ZLIB");
    sl_err_hint("an index needs each record at a byte offset of the file: write the file uncompressed (for "
                "GZIP: gunzip -c FILE > PLAIN), or read it front to back (sl_tfr_reader_open; the files "
                "source). If it is not compressed, its first record's header is damaged");
    return SL_EUNSUPPORTED;
}

sl_status sl__tfr_shrink_err(const char *path, uint64_t inode, uint64_t size, const char *what,
                             const char *where) {
    struct stat st;
    char now[32] = "fewer";
    if (stat(path, &st) == 0 && (uint64_t)st.st_ino == inode && (uint64_t)st.st_size < size)
        snprintf(now, sizeof now, "%llu", (unsigned long long)st.st_size);
    sl_err(SL_EIO, "%s: shrank from %llu to %s bytes while being %s (at %s)", path, (unsigned long long)size, now,
           what, where);
    sl_err_hint("the file was truncated or rewritten in place; replace shards by writing a new file and "
                "renaming it over the old one");
    return SL_EIO;
}

sl_status sl_tfr_index_open(const char *path, const sl_tfr_index_opts *opts, sl_tfr_index **out) {
    *out = NULL;
    sl_tfr_index_opts o = opts ? *opts : sl_tfr_index_opts_default();
    int fd;
    sl_status s = sl_file_open_read(path, "TFRecord file", &fd, NULL);
    if (s) {
        if (s == SL_ENOTFOUND && !sl_file_dangling_target(path, NULL, 0))
            sl_err_hint("check the path (and the working directory, for a relative one)");
        return s;
    }
    sl_tfr_file_id id;
    if (!(s = sl_tfr_file_identity(fd, path, &id))) s = sl__tfr_index_get(path, fd, &id, NULL, NULL, &o, out);
    close(fd);
    return s;
}
