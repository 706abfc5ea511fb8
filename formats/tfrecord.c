/* TFRecord files: reader (mmap or streamed, plain/GZIP/ZLIB) and writer.
 *
 * Workload: shards of kilobytes to many gigabytes read front to back by one thread each,
 * records from a few bytes to megabytes. Plain regular files are mmapped once and records
 * are zero-copy views into the mapping (whose sl_buf unmaps when the last view goes), so
 * reading costs little more than the CRCs. Everything else (compressed files, pipes, files
 * that cannot be mapped) goes through a window: bytes are inflated (or read) into an
 * sl_buf, records are views into it, and when the window must move on, a buffer still
 * referenced by a caller is left alone and a fresh one is started.
 *
 * Framing errors name the file, the record's offset in the uncompressed stream and what
 * was wrong, with a hint. Skip mode: after a bad length CRC (or a record that runs past the
 * end) the length cannot be trusted, so we scan forward one byte at a time for a position
 * whose header CRC matches, whose record fits, and whose data CRC matches; after a bad data
 * CRC under a good length CRC the length is trusted and the record is stepped over. Every
 * loop advances by at least one byte, and every read is bounds-checked against the window,
 * so hostile input can neither hang nor overrun us. */
#include "sluice/tfrecord.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "sluice/crc32c.h"

#define HDR 12             /* uint64 length + uint32 masked crc */
#define FTR 4              /* uint32 masked crc of data */
#define IN_CHUNK (1 << 18) /* compressed bytes read per read() */
#define WIN_MIN (1 << 20)  /* smallest decoded window */

static const char HINT_CORRUPT[] =
    "the file may be damaged or not a TFRecord file; read with skip_corrupt "
    "(sluice-record verify --skip-corrupt) to skip bad records";
static const char HINT_TRUNC[] =
    "the file may have been cut short (an interrupted copy, or a writer that was not "
    "closed); read with skip_corrupt (sluice-record verify --skip-corrupt) to keep the "
    "records before the damage";

static inline uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t masked_crc(const void *p, size_t n) {
    return sl_crc32c_mask(sl_crc32c(0, p, n));
}

/* ---- names -------------------------------------------------------------------------- */

const char *sl_compression_name(sl_compression c) {
    switch (c) {
    case SL_COMP_AUTO: return "auto";
    case SL_COMP_NONE: return "none";
    case SL_COMP_GZIP: return "gzip";
    case SL_COMP_ZLIB: return "zlib";
    }
    return "unknown";
}

sl_status sl_compression_parse(const char *name, sl_compression *out) {
    static const struct { const char *name; sl_compression c; } names[] = {
        {"auto", SL_COMP_AUTO}, {"none", SL_COMP_NONE}, {"", SL_COMP_NONE},
        {"gzip", SL_COMP_GZIP}, {"zlib", SL_COMP_ZLIB},
    };
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(name, names[i].name) == 0) {
            *out = names[i].c;
            return SL_OK;
        }
    return sl_err(SL_EINVAL, "unknown compression '%s' (expected none, gzip, zlib or auto)",
                  name ? name : "(null)");
}

sl_tfr_read_opts sl_tfr_read_opts_default(void) {
    return (sl_tfr_read_opts){.compression = SL_COMP_AUTO, .skip_corrupt = false,
                              .verify_data_crc = true};
}

sl_tfr_write_opts sl_tfr_write_opts_default(void) {
    return (sl_tfr_write_opts){.compression = SL_COMP_NONE, .level = -1, .fsync = false};
}

/* ---- reader ------------------------------------------------------------------------- */

struct sl_tfr_reader {
    char *name;               /* for messages */
    sl_tfr_read_opts opts;
    sl_compression comp;      /* resolved */

    /* The window of uncompressed bytes: base[0..end) is valid, base[pos] is the next
     * record; base[0] sits at stream offset base_off. */
    sl_buf *buf;              /* owns base (one reference held by the reader) */
    const uint8_t *base;
    size_t end, pos, cap;     /* cap: room at base (streamed) */
    uint64_t base_off;
    bool eof;                 /* no bytes will follow base[end) */

    /* Streamed input: from fd, or from memory (mem/mem_size). */
    int fd;
    bool from_mem;
    const uint8_t *mem;
    size_t mem_size, mem_pos;
    sl_buf *src_buf;          /* owns mem when it is our mapping of a compressed file */
    uint8_t *in;              /* compressed input chunk (fd source) */
    bool src_eof;
    uint64_t in_off;          /* compressed bytes consumed so far (for messages) */
    z_stream zs;
    bool zs_live, zs_done;    /* inflate initialised; current member finished */

    sl_status failed;         /* sticky error, and its message */
    sl_error err;
    sl_tfr_stats st;
};

static void unmap_fn(void *ctx, void *data) { munmap(data, (size_t)(uintptr_t)ctx); }
static void free_fn(void *ctx, void *data) { free(data); }

/* Record a framing error at stream offset `off`; hint attached. */
static sl_status frame_err(sl_tfr_reader *r, uint64_t off, const char *hint, const char *fmt,
                           ...) __attribute__((format(printf, 4, 5)));
static sl_status frame_err(sl_tfr_reader *r, uint64_t off, const char *hint, const char *fmt,
                           ...) {
    char body[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    sl_err(SL_ECORRUPT, "%s: byte %llu%s: %s", r->name, (unsigned long long)off,
           r->comp == SL_COMP_NONE ? "" : " (uncompressed)", body);
    if (hint) sl_err_hint("%s", hint);
    return SL_ECORRUPT;
}

static sl_status fail(sl_tfr_reader *r, sl_status s) {
    r->failed = s;
    sl_err_save(&r->err);
    return s;
}

/* Read more compressed (or plain) input into zs.next_in. Returns SL_OK (possibly with
 * src_eof set and nothing new) or SL_EIO. */
static sl_status src_fill(sl_tfr_reader *r) {
    if (r->zs.avail_in || r->src_eof) return SL_OK;
    if (r->from_mem) {
        size_t n = r->mem_size - r->mem_pos;
        if (n > UINT_MAX) n = UINT_MAX;
        r->zs.next_in = (Bytef *)(r->mem + r->mem_pos);
        r->zs.avail_in = (uInt)n;
        r->mem_pos += n;
        if (r->mem_pos == r->mem_size) r->src_eof = true;
        return SL_OK;
    }
    for (;;) {
        ssize_t got = read(r->fd, r->in, IN_CHUNK);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return sl_err(SL_EIO, "%s: read failed after byte %llu: %s", r->name,
                          (unsigned long long)r->in_off, strerror(errno));
        if (got == 0) r->src_eof = true;
        r->zs.next_in = r->in;
        r->zs.avail_in = (uInt)got;
        return SL_OK;
    }
}

/* Make room for at least `want` bytes from pos in the window, moving the unread bytes to
 * the front. A buffer that a caller still references is never written again. */
static sl_status win_make_room(sl_tfr_reader *r, size_t want) {
    size_t keep = r->end - r->pos;
    if (r->cap - r->pos >= want && r->cap > r->end) return SL_OK;
    size_t cap = r->cap < WIN_MIN ? WIN_MIN : r->cap;
    while (cap < want || cap - keep < WIN_MIN / 4) {
        if (cap > SIZE_MAX / 2) return sl_err(SL_ENOMEM, "%s: record too large", r->name);
        cap *= 2;
    }
    bool mine = r->buf && atomic_load(&r->buf->refs) == 1;
    if (mine && cap <= r->cap) {
        memmove((uint8_t *)r->base, r->base + r->pos, keep);
    } else {
        uint8_t *nb = malloc(cap);
        if (!nb) return sl_err(SL_ENOMEM, "%s: out of memory for a %zu-byte window", r->name, cap);
        sl_buf *b = sl_buf_wrap(nb, cap, free_fn, NULL);
        if (!b) {
            free(nb);
            return SL_ENOMEM;
        }
        if (keep) memcpy(nb, r->base + r->pos, keep);
        sl_buf_unref(r->buf);
        r->buf = b;
        r->base = nb;
        r->cap = cap;
    }
    r->base_off += r->pos;
    r->end = keep;
    r->pos = 0;
    return SL_OK;
}

/* Produce more uncompressed bytes at base[end..cap). */
static sl_status win_produce(sl_tfr_reader *r) {
    uint8_t *dst = (uint8_t *)r->base + r->end;
    size_t room = r->cap - r->end;
    if (room > UINT_MAX) room = UINT_MAX;
    for (;;) {
        sl_status s = src_fill(r);
        if (s) return s;
        if (r->comp == SL_COMP_NONE) {
            size_t n = r->zs.avail_in < room ? r->zs.avail_in : room;
            memcpy(dst, r->zs.next_in, n);
            r->zs.next_in += n;
            r->zs.avail_in -= (uInt)n;
            r->in_off += n;
            r->end += n;
            if (n == 0 && r->src_eof) r->eof = true;
            if (n || r->eof) return SL_OK;
            continue;
        }
        if (r->zs_done) {
            /* Between members: more input starts another gzip/zlib member (TensorFlow's
             * writer makes one, `cat a.gz b.gz` makes two); none means a clean end. */
            if (r->zs.avail_in == 0) {
                if (r->src_eof) {
                    r->eof = true;
                    return SL_OK;
                }
                continue;
            }
            inflateReset(&r->zs);
            r->zs_done = false;
        }
        r->zs.next_out = dst;
        r->zs.avail_out = (uInt)room;
        uInt in_before = r->zs.avail_in;
        int z = inflate(&r->zs, Z_NO_FLUSH);
        size_t made = room - r->zs.avail_out;
        r->in_off += in_before - r->zs.avail_in;
        r->end += made;
        if (z == Z_STREAM_END) {
            r->zs_done = true;
        } else if (z == Z_BUF_ERROR || (z == Z_OK && made == 0)) {
            if (r->src_eof && r->zs.avail_in == 0) {
                sl_err(SL_ECORRUPT, "%s: byte %llu (compressed): truncated %s stream", r->name,
                       (unsigned long long)r->in_off, sl_compression_name(r->comp));
                sl_err_hint("the file was cut short (an interrupted copy, or a writer that was "
                            "not closed)");
                return SL_ECORRUPT;
            }
        } else if (z != Z_OK) {
            sl_err(SL_ECORRUPT, "%s: byte %llu (compressed): bad %s stream: %s", r->name,
                   (unsigned long long)r->in_off, sl_compression_name(r->comp),
                   r->zs.msg ? r->zs.msg : zError(z));
            sl_err_hint("the file is damaged or not %s-compressed; check the compression option",
                        sl_compression_name(r->comp));
            return SL_ECORRUPT;
        }
        if (made) return SL_OK;
    }
}

/* Ensure base[pos..pos+n) is valid if the stream has that many bytes. Returns SL_OK (check
 * end - pos for what is there) or an error (SL_EIO, SL_ECORRUPT stream, SL_ENOMEM). */
static sl_status ensure_slow(sl_tfr_reader *r, size_t n);
static inline sl_status ensure(sl_tfr_reader *r, size_t n) {
    if (r->end - r->pos >= n || r->eof) return SL_OK;
    return ensure_slow(r, n);
}

static sl_status ensure_slow(sl_tfr_reader *r, size_t n) {
    while (r->end - r->pos < n && !r->eof) {
        /* Grow at most twofold per step, and only as bytes actually arrive, so a forged
         * length costs memory in proportion to the real stream, never a huge malloc. */
        size_t have = r->end - r->pos;
        size_t step = have < WIN_MIN / 2 ? WIN_MIN : 2 * have;
        sl_status s = win_make_room(r, n < step ? n : step);
        if (s) return s;
        s = win_produce(r);
        if (s) return s;
    }
    return SL_OK;
}

/* After a header whose length cannot be trusted: scan forward one byte at a time for the
 * next position holding a complete record whose length CRC and data CRC both match. Counts
 * one corrupt record and the bytes passed over; leaves pos at that record or at the end. */
static sl_status resync(sl_tfr_reader *r) {
    r->st.corrupt_skipped++;
    uint64_t start = r->base_off + r->pos;
    r->pos++;
    for (;;) {
        sl_status s = ensure(r, HDR);
        if (s) return s;
        size_t avail = r->end - r->pos;
        if (avail < HDR) {
            r->pos = r->end;
            break;
        }
        const uint8_t *h = r->base + r->pos;
        uint64_t len = le64(h);
        if (len <= SIZE_MAX - HDR - FTR && masked_crc(h, 8) == le32(h + 8)) {
            s = ensure(r, HDR + len + FTR);
            if (s) return s;
            h = r->base + r->pos;
            if (r->end - r->pos >= HDR + len + FTR &&
                masked_crc(h + HDR, len) == le32(h + HDR + len))
                break;
        }
        r->pos++;
    }
    r->st.bytes_skipped += r->base_off + r->pos - start;
    return SL_OK;
}

sl_status sl_tfr_reader_next(sl_tfr_reader *r, sl_record *rec) {
    if (r->failed) return sl_err_restore(&r->err);
    const bool skip = r->opts.skip_corrupt;
    for (;;) {
        sl_status s = ensure(r, HDR);
        if (s) return fail(r, s);
        size_t avail = r->end - r->pos;
        if (avail == 0) return SL_END;
        uint64_t off = r->base_off + r->pos;
        const uint8_t *h = r->base + r->pos;
        if (avail < HDR) {
            if (skip) {
                r->st.corrupt_skipped++;
                r->st.bytes_skipped += avail;
                r->pos = r->end;
                return SL_END;
            }
            return fail(r, frame_err(r, off, HINT_TRUNC,
                                     "truncated record: header needs %d bytes, %zu left", HDR,
                                     avail));
        }
        uint64_t len = le64(h);
        uint32_t stored = le32(h + 8), computed = masked_crc(h, 8);
        if (stored != computed) {
            if (!skip)
                return fail(r, frame_err(r, off, HINT_CORRUPT,
                                         "corrupt record: length CRC mismatch (stored 0x%08x, "
                                         "computed 0x%08x)",
                                         stored, computed));
            if ((s = resync(r))) return fail(r, s);
            continue;
        }
        bool fits = len <= SIZE_MAX - HDR - FTR;
        if (fits) {
            if ((s = ensure(r, HDR + len + FTR))) return fail(r, s);
            avail = r->end - r->pos;
            h = r->base + r->pos;
            fits = avail >= HDR + len + FTR;
        }
        if (!fits) {
            if (!skip)
                return fail(r, frame_err(r, off, HINT_TRUNC,
                                         "truncated record: needs %llu bytes (12-byte header, "
                                         "%llu of data, 4-byte CRC) but only %zu are left",
                                         (unsigned long long)len + HDR + FTR,
                                         (unsigned long long)len, avail));
            /* The length is sound but the bytes are not all there: maybe the end of the file
             * is missing, maybe bytes went missing inside; later records may survive. */
            if ((s = resync(r))) return fail(r, s);
            continue;
        }
        const uint8_t *d = h + HDR;
        if (r->opts.verify_data_crc) {
            stored = le32(d + len);
            computed = masked_crc(d, len);
            if (stored != computed) {
                if (!skip)
                    return fail(r, frame_err(r, off, HINT_CORRUPT,
                                             "corrupt record: data CRC mismatch (stored 0x%08x, "
                                             "computed 0x%08x)",
                                             stored, computed));
                /* The length passed its CRC: step over the record as it says. */
                r->st.corrupt_skipped++;
                r->st.bytes_skipped += HDR + len + FTR;
                r->pos += HDR + len + FTR;
                continue;
            }
        }
        rec->data = d;
        rec->len = (size_t)len;
        rec->offset = off;
        rec->buf = r->buf;
        r->pos += HDR + len + FTR;
        r->st.records++;
        r->st.bytes += len;
        return SL_OK;
    }
}

sl_tfr_stats sl_tfr_reader_stats(const sl_tfr_reader *r) { return r->st; }

sl_compression sl_tfr_reader_compression(const sl_tfr_reader *r) { return r->comp; }

void sl_tfr_reader_close(sl_tfr_reader *r) {
    if (!r) return;
    if (r->zs_live) inflateEnd(&r->zs);
    sl_buf_unref(r->buf);
    sl_buf_unref(r->src_buf);
    if (r->fd >= 0) close(r->fd);
    free(r->in);
    free(r->name);
    free(r);
}

/* What the first bytes say. A plain file whose first record happens to start with bytes
 * that look like a gzip or zlib header is recognised by its valid length CRC. */
static sl_compression detect(const uint8_t *p, size_t n) {
    if (n >= HDR && masked_crc(p, 8) == le32(p + 8)) return SL_COMP_NONE;
    if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b) return SL_COMP_GZIP;
    if (n >= 2 && (p[0] & 0x0f) == 8 && (p[0] >> 4) <= 7 && ((p[0] << 8) | p[1]) % 31 == 0)
        return SL_COMP_ZLIB;
    return SL_COMP_NONE;
}

static sl_status reader_new(const char *name, const sl_tfr_read_opts *opts, sl_tfr_reader **out) {
    sl_tfr_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->name = strdup(name))) {
        free(r);
        return sl_err(SL_ENOMEM, "%s: out of memory opening a reader", name);
    }
    r->opts = opts ? *opts : sl_tfr_read_opts_default();
    r->fd = -1;
    *out = r;
    return SL_OK;
}

/* Set up the streamed path once the first input bytes sit in zs.next_in. */
static sl_status start_stream(sl_tfr_reader *r) {
    if (r->comp == SL_COMP_AUTO) r->comp = detect(r->zs.next_in, r->zs.avail_in);
    if (r->comp == SL_COMP_NONE) return SL_OK;
    int z = inflateInit2(&r->zs, r->comp == SL_COMP_GZIP ? 16 + 15 : 15);
    if (z != Z_OK) return sl_err(SL_ENOMEM, "%s: inflateInit2 failed: %s", r->name, zError(z));
    r->zs_live = true;
    return SL_OK;
}

/* The whole plain stream is at data[0..size), owned by b (reference handed over). */
static void start_whole(sl_tfr_reader *r, sl_buf *b, const uint8_t *data, size_t size) {
    r->buf = b;
    r->base = data;
    r->end = r->cap = size;
    r->eof = true;
}

sl_status sl_tfr_reader_open_mem(const void *data, size_t size, const char *name,
                                 const sl_tfr_read_opts *opts, sl_tfr_reader **out) {
    *out = NULL;
    sl_tfr_reader *r;
    sl_status s = reader_new(name ? name : "<memory>", opts, &r);
    if (s) return s;
    r->comp = r->opts.compression;
    if (r->comp == SL_COMP_AUTO) r->comp = detect(data, size);
    if (r->comp == SL_COMP_NONE) {
        sl_buf *b = sl_buf_wrap((void *)data, size, NULL, NULL);
        if (!b) goto fail_nomem;
        start_whole(r, b, data, size);
    } else {
        r->from_mem = true;
        r->mem = data;
        r->mem_size = size;
        r->zs.next_in = (Bytef *)data;
        r->zs.avail_in = 0;
        if ((s = src_fill(r)) || (s = start_stream(r))) goto fail;
    }
    *out = r;
    return SL_OK;
fail_nomem:
    s = sl_err(SL_ENOMEM, "%s: out of memory opening a reader", r->name);
fail:
    sl_tfr_reader_close(r);
    return s;
}

sl_status sl_tfr_reader_open(const char *path, const sl_tfr_read_opts *opts,
                             sl_tfr_reader **out) {
    *out = NULL;
    sl_tfr_reader *r;
    sl_status s = reader_new(path, opts, &r);
    if (s) return s;
    r->comp = r->opts.compression;
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) {
        int e = errno;
        s = sl_err(e == ENOENT || e == ENOTDIR ? SL_ENOTFOUND : SL_EIO, "%s: cannot open: %s",
                   path, strerror(e));
        if (e == ENOENT) sl_err_hint("check the path (and the working directory, for a relative one)");
        goto fail;
    }
    struct stat sb;
    if (fstat(r->fd, &sb) != 0) {
        s = sl_err(SL_EIO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (S_ISDIR(sb.st_mode)) {
        s = sl_err(SL_EIO, "%s: is a directory, not a TFRecord file", path);
        goto fail;
    }
    if (S_ISREG(sb.st_mode) && sb.st_size == 0 && r->comp == SL_COMP_AUTO) {
        start_whole(r, NULL, NULL, 0); /* empty: no records */
        r->comp = SL_COMP_NONE;
        goto done;
    }
    if (S_ISREG(sb.st_mode) && sb.st_size > 0 && (uint64_t)sb.st_size <= SIZE_MAX) {
        size_t size = (size_t)sb.st_size;
        void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, r->fd, 0);
        if (map != MAP_FAILED) {
            madvise(map, size, MADV_SEQUENTIAL);
            sl_buf *b = sl_buf_wrap(map, size, unmap_fn, (void *)(uintptr_t)size);
            if (!b) {
                munmap(map, size);
                s = sl_err(SL_ENOMEM, "%s: out of memory opening a reader", path);
                goto fail;
            }
            close(r->fd);
            r->fd = -1;
            if (r->comp == SL_COMP_AUTO) r->comp = detect(map, size);
            if (r->comp == SL_COMP_NONE) {
                start_whole(r, b, map, size);
            } else {
                /* Inflate straight from the mapping. */
                r->src_buf = b;
                r->from_mem = true;
                r->mem = map;
                r->mem_size = size;
                if ((s = src_fill(r)) || (s = start_stream(r))) goto fail;
            }
            goto done;
        }
    }
    /* Pipes, character devices, unmappable files: read() in chunks. */
    r->in = malloc(IN_CHUNK);
    if (!r->in) {
        s = sl_err(SL_ENOMEM, "%s: out of memory opening a reader", path);
        goto fail;
    }
    size_t have = 0;
    while (have < HDR) { /* enough to recognise the compression */
        ssize_t got = read(r->fd, r->in + have, IN_CHUNK - have);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            s = sl_err(SL_EIO, "%s: read failed: %s", path, strerror(errno));
            goto fail;
        }
        if (got == 0) {
            r->src_eof = true;
            break;
        }
        have += (size_t)got;
    }
    r->zs.next_in = r->in;
    r->zs.avail_in = (uInt)have;
    if ((s = start_stream(r))) goto fail;
done:
    *out = r;
    return SL_OK;
fail:
    sl_tfr_reader_close(r);
    return s;
}

/* ---- writer ------------------------------------------------------------------------- */

#define WBUF (1 << 18)

struct sl_tfr_writer {
    int fd;
    char *path;
    sl_compression comp;
    bool fsync;
    uint8_t *out;          /* pending output bytes */
    size_t out_len;
    uint64_t written;      /* bytes handed to write(2) */
    z_stream zs;
    bool zs_live;
    sl_status failed;      /* first error, and its message */
    sl_error err;
};

static sl_status wfail(sl_tfr_writer *w, sl_status s) {
    if (!w->failed) {
        w->failed = s;
        sl_err_save(&w->err);
    }
    return w->failed;
}

static sl_status write_all(sl_tfr_writer *w, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            int e = errno;
            sl_err(SL_EIO, "%s: write failed at byte %llu: %s", w->path,
                   (unsigned long long)w->written, strerror(e));
            if (e == ENOSPC || e == EDQUOT) sl_err_hint("the disk (or quota) is full");
            return wfail(w, SL_EIO);
        }
        p += k;
        n -= (size_t)k;
        w->written += (uint64_t)k;
    }
    return SL_OK;
}

static sl_status flush_out(sl_tfr_writer *w) {
    sl_status s = write_all(w, w->out, w->out_len);
    w->out_len = 0;
    return s;
}

/* Run deflate over what is in zs.next_in with `flush`, writing full buffers out. */
static sl_status deflate_run(sl_tfr_writer *w, int flush) {
    for (;;) {
        w->zs.next_out = w->out + w->out_len;
        w->zs.avail_out = (uInt)(WBUF - w->out_len);
        int z = deflate(&w->zs, flush);
        w->out_len = WBUF - w->zs.avail_out;
        if (z == Z_STREAM_ERROR) {
            sl_err(SL_EINTERNAL, "%s: deflate failed", w->path);
            return wfail(w, SL_EINTERNAL);
        }
        if (w->out_len == WBUF) {
            sl_status s = flush_out(w);
            if (s) return s;
            continue;
        }
        if (flush == Z_FINISH ? z == Z_STREAM_END : w->zs.avail_in == 0) return SL_OK;
    }
}

static sl_status emit(sl_tfr_writer *w, const void *data, size_t n) {
    const uint8_t *p = data;
    if (w->comp == SL_COMP_NONE) {
        if (w->out_len + n <= WBUF) {
            if (n) memcpy(w->out + w->out_len, p, n);
            w->out_len += n;
            return SL_OK;
        }
        sl_status s = flush_out(w);
        if (s) return s;
        if (n >= WBUF) return write_all(w, p, n); /* big payloads skip the copy */
        memcpy(w->out, p, n);
        w->out_len = n;
        return SL_OK;
    }
    while (n) {
        size_t chunk = n > UINT_MAX ? UINT_MAX : n;
        w->zs.next_in = (Bytef *)p;
        w->zs.avail_in = (uInt)chunk;
        sl_status s = deflate_run(w, Z_NO_FLUSH);
        if (s) return s;
        p += chunk;
        n -= chunk;
    }
    return SL_OK;
}

sl_status sl_tfr_writer_open(const char *path, const sl_tfr_write_opts *opts,
                             sl_tfr_writer **out) {
    *out = NULL;
    sl_tfr_write_opts o = opts ? *opts : sl_tfr_write_opts_default();
    if (o.level < -1 || o.level > 9)
        return sl_err(SL_EINVAL, "%s: compression level %d out of range -1..9", path, o.level);
    sl_tfr_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path)) || !(w->out = malloc(WBUF))) {
        if (w) free(w->path);
        free(w);
        return sl_err(SL_ENOMEM, "%s: out of memory opening a writer", path);
    }
    w->comp = o.compression == SL_COMP_AUTO ? SL_COMP_NONE : o.compression;
    w->fsync = o.fsync;
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    sl_status s;
    if (w->fd < 0) {
        s = sl_err(SL_EIO, "%s: cannot create: %s", path, strerror(errno));
        goto fail;
    }
    if (w->comp != SL_COMP_NONE) {
        int z = deflateInit2(&w->zs, o.level, Z_DEFLATED, w->comp == SL_COMP_GZIP ? 16 + 15 : 15,
                             8, Z_DEFAULT_STRATEGY);
        if (z != Z_OK) {
            s = sl_err(SL_ENOMEM, "%s: deflateInit2 failed: %s", path, zError(z));
            goto fail;
        }
        w->zs_live = true;
    }
    *out = w;
    return SL_OK;
fail:
    if (w->fd >= 0) close(w->fd);
    free(w->out);
    free(w->path);
    free(w);
    return s;
}

size_t sl_tfr_frame(uint8_t *out, const void *data, size_t len) {
    put_le64(out, len);
    put_le32(out + 8, masked_crc(out, 8));
    if (len) memcpy(out + HDR, data, len);
    put_le32(out + HDR + len, masked_crc(data, len));
    return HDR + len + FTR;
}

sl_status sl_tfr_writer_write(sl_tfr_writer *w, const void *data, size_t len) {
    if (w->failed) return sl_err_restore(&w->err);
    uint8_t hdr[HDR], ftr[FTR];
    put_le64(hdr, len);
    put_le32(hdr + 8, masked_crc(hdr, 8));
    put_le32(ftr, masked_crc(data, len));
    sl_status s = emit(w, hdr, HDR);
    if (!s && len) s = emit(w, data, len);
    if (!s) s = emit(w, ftr, FTR);
    return s;
}

sl_status sl_tfr_writer_close(sl_tfr_writer *w) {
    if (!w) return SL_OK;
    if (!w->failed && w->zs_live) deflate_run(w, Z_FINISH);
    if (!w->failed) flush_out(w);
    if (!w->failed && w->fsync && fsync(w->fd) != 0) {
        sl_err(SL_EIO, "%s: fsync failed: %s", w->path, strerror(errno));
        wfail(w, SL_EIO);
    }
    if (close(w->fd) != 0 && !w->failed) {
        sl_err(SL_EIO, "%s: close failed: %s", w->path, strerror(errno));
        wfail(w, SL_EIO);
    }
    if (w->zs_live) deflateEnd(&w->zs);
    sl_status s = w->failed ? sl_err_restore(&w->err) : SL_OK;
    free(w->out);
    free(w->path);
    free(w);
    return s;
}
