/* idx files (MNIST, Fashion-MNIST): read plain or gzipped into a host-order tensor, write
 * plain or gzipped.
 *
 * Workload: a handful of files per training run, read once at start-up (the largest is
 * Fashion-MNIST's 47 MB of training images, 26 MB gzipped), so the whole file is read into
 * memory and, when gzipped, inflated straight into the tensor's buffer: no second copy of
 * the decompressed data.
 *
 * Format: 00 00 TYPE RANK, RANK big-endian uint32 dims, then the values big-endian and
 * row-major. The size must match the dims exactly: trailing bytes are corruption too, as
 * they are a sign of a wrong file or a wrong header. Errors name the file and the byte
 * offset (into the decompressed stream for gzipped files, as the message says). */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "sluice/file.h"
#include "sluice/idx.h"

/* Deflate cannot expand data by more than about 1032:1, so a gzipped file whose header
 * claims more than this many bytes per compressed byte is corrupt; checking it first keeps
 * a damaged header from making us allocate gigabytes. */
#define MAX_INFLATE_RATIO 1100

static const struct { int code; sl_dtype dt; } type_map[] = {
    {0x08, SL_DT_U8}, {0x09, SL_DT_I8}, {0x0B, SL_DT_I16},
    {0x0C, SL_DT_I32}, {0x0D, SL_DT_F32}, {0x0E, SL_DT_F64},
};

static sl_dtype dtype_of_code(int code) {
    for (size_t i = 0; i < sizeof type_map / sizeof type_map[0]; i++)
        if (type_map[i].code == code)
            return type_map[i].dt;
    return SL_DT_INVALID;
}

static int code_of_dtype(sl_dtype dt) {
    for (size_t i = 0; i < sizeof type_map / sizeof type_map[0]; i++)
        if (type_map[i].dt == dt)
            return type_map[i].code;
    return -1;
}

/* Reverse each `esize`-byte element in place (big-endian <-> little-endian hosts). */
static void swap_elems(uint8_t *p, size_t n, size_t esize) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    (void)p; (void)n; (void)esize;
#else
    if (esize == 1)
        return;
    for (size_t i = 0; i < n; i++, p += esize)
        for (size_t a = 0, b = esize - 1; a < b; a++, b--) {
            uint8_t t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
#endif
}

/* ---- a byte source over plain or gzipped memory ----------------------------------- */

typedef struct src {
    const uint8_t *p;  /* the file's bytes */
    size_t n;          /* their count */
    size_t pos;        /* plain: next byte; gzip: unused */
    int gz;            /* gzipped */
    z_stream z;        /* gzip: inflater (next_in/avail_in walk p) */
    int z_init;        /* z was initialised */
    int z_end;         /* the last gzip member ended and no other follows */
    uint64_t out_pos;  /* bytes produced so far (decompressed offset) */
    const char *name;  /* for messages */
} src;

static sl_status src_open(src *s, const uint8_t *p, size_t n, const char *name) {
    memset(s, 0, sizeof *s);
    s->p = p;
    s->n = n;
    s->name = name;
    s->gz = n >= 2 && p[0] == 0x1f && p[1] == 0x8b;
    if (!s->gz)
        return SL_OK;
    if (inflateInit2(&s->z, 15 + 16) != Z_OK)
        return sl_err_at(SL_ENOMEM, name, -1, "cannot initialise zlib");
    s->z_init = 1;
    s->z.next_in = (Bytef *)p;
    s->z.avail_in = (uInt)(n > 0x40000000u ? 0x40000000u : n);
    return SL_OK;
}

static void src_close(src *s) {
    if (s->z_init)
        inflateEnd(&s->z);
    s->z_init = 0;
}

static size_t consumed(const src *s) { return (size_t)(s->z.next_in - s->p); }

/* Read up to n bytes into dst; *got < n only at the end of the data. */
static sl_status src_read(src *s, void *dst, size_t n, size_t *got) {
    *got = 0;
    if (!s->gz) {
        size_t k = s->n - s->pos < n ? s->n - s->pos : n;
        memcpy(dst, s->p + s->pos, k);
        s->pos += k;
        s->out_pos += k;
        *got = k;
        return SL_OK;
    }
    uint8_t *d = dst;
    while (*got < n && !s->z_end) {
        size_t want = n - *got;
        s->z.next_out = d + *got;
        s->z.avail_out = (uInt)(want > 0x40000000u ? 0x40000000u : want);
        uInt before = s->z.avail_out;
        if (s->z.avail_in == 0) {
            size_t left = s->n - consumed(s);
            s->z.avail_in = (uInt)(left > 0x40000000u ? 0x40000000u : left);
        }
        int r = inflate(&s->z, Z_NO_FLUSH);
        size_t made = before - s->z.avail_out;
        *got += made;
        s->out_pos += made;
        if (r == Z_STREAM_END) {
            size_t at = consumed(s);
            /* another gzip member may follow (concatenated files, `cat a.gz b.gz`) */
            if (s->n - at >= 2 && s->p[at] == 0x1f && s->p[at + 1] == 0x8b) {
                inflateReset(&s->z);
            } else if (at != s->n) {
                return sl_err_at(SL_ECORRUPT, s->name, (int64_t)at,
                                 "%zu bytes of garbage after the end of the gzip stream",
                                 s->n - at);
            } else {
                s->z_end = 1;
            }
        } else if (r == Z_BUF_ERROR && made == 0) {
            if (consumed(s) >= s->n)
                return sl_err_at(SL_ECORRUPT, s->name, (int64_t)s->n,
                                 "gzip stream is truncated (after %llu decompressed bytes)",
                                 (unsigned long long)s->out_pos);
        } else if (r != Z_OK && r != Z_BUF_ERROR) {
            return sl_err_at(SL_ECORRUPT, s->name, (int64_t)consumed(s),
                             "gzip stream is damaged: %s",
                             s->z.msg ? s->z.msg : zError(r));
        }
    }
    return SL_OK;
}

/* ---- reading ------------------------------------------------------------------------ */

static uint32_t be32(const uint8_t *b) {
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* The 4 magic bytes: 00 00 TYPE RANK, into *dt and *rank (1..SL_MAX_RANK). SL_ECORRUPT (or
 * SL_EUNSUPPORTED for a rank over SL_MAX_RANK) at the offending byte otherwise; `where` ends
 * every message. */
static sl_status read_magic(src *s, const char *name, const char *where, sl_dtype *dt, int *rank) {
    uint8_t head[4];
    size_t got;
    sl_status st;
    if ((st = src_read(s, head, 4, &got)))
        return st;
    if (got < 4) {
        st = sl_err_at(SL_ECORRUPT, name, (int64_t)got,
                       "truncated idx header: %zu of 4 magic bytes%s", got, where);
        return st;
    }
    if (head[0] != 0 || head[1] != 0) {
        st = sl_err_at(SL_ECORRUPT, name, 0,
                       "bad idx magic %02x %02x %02x %02x (expected 00 00 TYPE RANK)%s",
                       head[0], head[1], head[2], head[3], where);
        sl_err_hint("is this an idx (MNIST-style) file?");
        return st;
    }
    *dt = dtype_of_code(head[2]);
    if (*dt == SL_DT_INVALID) {
        st = sl_err_at(SL_ECORRUPT, name, 2,
                       "bad idx type 0x%02x (expected 08, 09, 0B, 0C, 0D or 0E)%s", head[2],
                       where);
        return st;
    }
    *rank = head[3];
    if (*rank == 0) {
        st = sl_err_at(SL_ECORRUPT, name, 3, "bad idx rank 0 (expected 1..255)%s", where);
        return st;
    }
    if (*rank > SL_MAX_RANK) {
        st = sl_err_at(SL_EUNSUPPORTED, name, 3,
                       "idx rank %d is valid but tensors have at most %d dimensions", *rank,
                       SL_MAX_RANK);
        return st;
    }
    return SL_OK;
}

sl_status sl_idx_read_mem(const void *data, size_t size, const char *name, sl_tensor *out) {
    if (!out)
        return sl_err(SL_EINVAL, "idx: NULL out");
    *out = SL_TENSOR_EMPTY;
    if (!data && size)
        return sl_err(SL_EINVAL, "idx: NULL data");
    if (!name)
        name = "<memory>";
    const char *where = "";
    src s;
    sl_status st = src_open(&s, data, size, name);
    if (st)
        return st;
    if (s.gz)
        where = " (offsets count decompressed bytes)";

    sl_dtype dt = SL_DT_INVALID;
    int rank = 0;
    size_t got;
    if ((st = read_magic(&s, name, where, &dt, &rank)))
        goto fail;
    uint8_t db[4 * SL_MAX_RANK];
    if ((st = src_read(&s, db, 4 * (size_t)rank, &got)))
        goto fail;
    if (got < 4 * (size_t)rank) {
        st = sl_err_at(SL_ECORRUPT, name, (int64_t)(4 + got),
                       "truncated idx header: %zu of %d dimension bytes%s", got, 4 * rank,
                       where);
        goto fail;
    }
    int64_t dims[SL_MAX_RANK];
    size_t esize = sl_dtype_size(dt);
    uint64_t nbytes = esize;
    int too_big = 0;
    /* The product of the non-zero dims must fit too: a zero dim does not make
     * 4e9 x 4e9 x 0 sane, and element counts are int64 everywhere else. */
    uint64_t nz = esize;
    for (int i = 0; i < rank; i++) {
        dims[i] = be32(db + 4 * i);
        if (dims[i] == 0) {
            nbytes = 0;
            continue;
        }
        if (nz > (uint64_t)INT64_MAX / (uint64_t)dims[i])
            too_big = 1;
        else
            nz *= (uint64_t)dims[i];
        nbytes *= (uint64_t)dims[i];
    }
    if (too_big)
        nbytes = 0;
    size_t hdr = 4 + 4 * (size_t)rank;
    if (too_big) {
        st = sl_err_at(SL_ECORRUPT, name, 4, "idx dimensions multiply to more than 2^63 "
                       "elements%s", where);
        sl_err_hint("the header is damaged, or this is not an idx file");
        goto fail;
    }
    if (!s.gz) {
        uint64_t have = size - hdr;
        if (nbytes != have) {
            st = sl_err_at(SL_ECORRUPT, name, (int64_t)(nbytes > have ? size : hdr + nbytes),
                           "idx dimensions need %llu data bytes after the %zu-byte header, the "
                           "file has %llu", (unsigned long long)nbytes, hdr,
                           (unsigned long long)have);
            sl_err_hint(nbytes > have ? "the file is truncated" : "the header is wrong, or "
                        "extra bytes were appended");
            goto fail;
        }
    } else if (nbytes > (uint64_t)size * MAX_INFLATE_RATIO) {
        st = sl_err_at(SL_ECORRUPT, name, (int64_t)hdr,
                       "idx dimensions need %llu data bytes, more than %zu gzipped bytes "
                       "can hold", (unsigned long long)nbytes, size);
        goto fail;
    }
    if (nbytes > SIZE_MAX / 2) {
        st = sl_err_at(SL_ERANGE, name, 4, "idx data of %llu bytes is too large",
                       (unsigned long long)nbytes);
        goto fail;
    }
    if ((st = sl_tensor_alloc(out, dt, rank, dims)))
        goto fail;
    if ((st = src_read(&s, out->data, (size_t)nbytes, &got)))
        goto fail;
    if (got < nbytes) {
        st = sl_err_at(SL_ECORRUPT, name, (int64_t)(hdr + got),
                       "idx data is truncated: %llu of %llu data bytes%s",
                       (unsigned long long)got, (unsigned long long)nbytes, where);
        sl_err_hint("the file is truncated");
        goto fail;
    }
    if (s.gz) {
        uint8_t extra;
        if ((st = src_read(&s, &extra, 1, &got)))
            goto fail;
        if (got) {
            st = sl_err_at(SL_ECORRUPT, name, (int64_t)(hdr + nbytes),
                           "idx data goes on past the %llu bytes the dimensions give%s",
                           (unsigned long long)nbytes, where);
            sl_err_hint("the header is wrong, or extra bytes were appended");
            goto fail;
        }
    }
    swap_elems(out->data, (size_t)(nbytes / esize), esize);
    src_close(&s);
    return SL_OK;
fail:
    src_close(&s);
    sl_tensor_release(out);
    return st;
}

sl_status sl_idx_read(const char *path, sl_tensor *out) {
    if (!out)
        return sl_err(SL_EINVAL, "idx: NULL out");
    *out = SL_TENSOR_EMPTY;
    if (!path)
        return sl_err(SL_EINVAL, "idx: NULL path");
    int fd;
    uint64_t fsize;
    sl_status ost = sl_file_open_read(path, "idx file", &fd, &fsize);
    if (ost) {
        if (ost == SL_ENOTFOUND && !sl_file_dangling_target(path, NULL, 0))
            sl_err_hint("check the path; Debian's dataset-fashion-mnist installs "
                        "/usr/share/datasets/fashion-mnist/");
        return ost;
    }
    if (fsize > SIZE_MAX / 2) {
        close(fd);
        return sl_err_at(SL_ERANGE, path, -1, "idx file of %llu bytes is too large",
                         (unsigned long long)fsize);
    }
    size_t n = (size_t)fsize;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        return sl_err_at(SL_ENOMEM, path, -1, "cannot allocate %zu bytes", n);
    }
    size_t have = 0;
    while (have < n) {
        ssize_t r = read(fd, buf + have, n - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return sl_err_at(SL_EIO, path, (int64_t)have, "read failed: %s", strerror(e));
        }
        if (r == 0)
            break; /* shrank while we read: parse what is there */
        have += (size_t)r;
    }
    close(fd);
    sl_status st = sl_idx_read_mem(buf, have, path, out);
    free(buf);
    return st;
}

/* ---- writing ------------------------------------------------------------------------ */

/* Where the bytes go: straight to the file, or through deflate (a gzip stream). Every write
 * goes through sl_file_write_all, so a failure names the file, the offset it stopped at and
 * the reason it had then. */
typedef struct sink {
    int fd;
    const char *name; /* the destination's path, for messages */
    uint64_t at;      /* file offset: bytes written so far */
    int gz;
    z_stream z;       /* gz: the deflater */
    uint8_t out[1 << 16];
} sink;

static sl_status deflate_out(sink *k, const void *p, size_t n, int flush) {
    k->z.next_in = (Bytef *)(uintptr_t)p;
    k->z.avail_in = 0;
    for (;;) {
        /* avail_in is 32 bits: feed at most 1 GiB at a time */
        if (!k->z.avail_in && n) {
            unsigned c = n > (1u << 30) ? (1u << 30) : (unsigned)n;
            k->z.avail_in = c;
            n -= c;
        }
        k->z.next_out = k->out;
        k->z.avail_out = sizeof k->out;
        int r = deflate(&k->z, n ? Z_NO_FLUSH : flush);
        if (r == Z_STREAM_ERROR)
            return sl_err_at(SL_EINTERNAL, k->name, -1, "idx write: deflate failed");
        size_t have = sizeof k->out - k->z.avail_out;
        sl_status s = sl_file_write_all(k->fd, k->out, have, k->name, &k->at);
        if (s)
            return s;
        if (flush == Z_FINISH ? r == Z_STREAM_END : !n && !k->z.avail_in && k->z.avail_out)
            return SL_OK;
    }
}

static sl_status sink_write(sink *k, const void *p, size_t n) {
    if (k->gz)
        return deflate_out(k, p, n, Z_NO_FLUSH);
    return sl_file_write_all(k->fd, p, n, k->name, &k->at);
}

static sl_status write_body(sink *k, const sl_tensor *t, int code) {
    size_t esize = sl_dtype_size(t->dtype);
    uint8_t hdr[4 + 4 * SL_MAX_RANK] = {0, 0, (uint8_t)code, (uint8_t)t->rank};
    for (int i = 0; i < t->rank; i++) {
        uint32_t d = (uint32_t)t->dims[i];
        uint8_t *b = hdr + 4 + 4 * i;
        b[0] = (uint8_t)(d >> 24); b[1] = (uint8_t)(d >> 16); b[2] = (uint8_t)(d >> 8);
        b[3] = (uint8_t)d;
    }
    sl_status st = sink_write(k, hdr, 4 + 4 * (size_t)t->rank);
    uint8_t chunk[1 << 16];
    const uint8_t *p = t->data;
    size_t left = (size_t)sl_tensor_numel(t) * esize;
    while (!st && left) {
        size_t c = left < sizeof chunk ? left : sizeof chunk;
        memcpy(chunk, p, c);
        swap_elems(chunk, c / esize, esize);
        st = sink_write(k, chunk, c);
        p += c;
        left -= c;
    }
    if (!st && k->gz)
        st = deflate_out(k, NULL, 0, Z_FINISH);
    if (!st && fsync(k->fd) != 0)
        st = sl_file_write_error(k->name, "cannot sync", k->at, errno);
    return st;
}

sl_status sl_idx_write(const char *path, const sl_tensor *t, bool gzip) {
    if (!path || !t)
        return sl_err(SL_EINVAL, "idx write: NULL argument");
    int code = code_of_dtype(t->dtype);
    if (code < 0)
        return sl_err_at(SL_EINVAL, path, -1, "idx write: dtype %s has no idx type code",
                         sl_dtype_name(t->dtype));
    if (t->rank < 1 || t->rank > SL_MAX_RANK)
        return sl_err_at(SL_EINVAL, path, -1, "idx write: rank %d must be 1..%d", t->rank,
                         SL_MAX_RANK);
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i] < 0 || t->dims[i] > (int64_t)UINT32_MAX)
            return sl_err_at(SL_EINVAL, path, -1, "idx write: dim %d = %lld does not fit "
                             "in uint32", i, (long long)t->dims[i]);
    if (sl_tensor_numel(t) && !t->data)
        return sl_err_at(SL_EINVAL, path, -1, "idx write: tensor has no data");
    /* an existing path must be a regular file: the rename below would replace a FIFO or a
     * device */
    sl_status st = sl_file_check_regular(path, "idx file");
    if (st && st != SL_ENOTFOUND)
        return st;
    static atomic_uint tmp_seq;
    size_t cap = strlen(path) + 48;
    char *tmp = malloc(cap);
    sink *k = calloc(1, sizeof *k);
    if (!tmp || !k) {
        free(tmp);
        free(k);
        return sl_err_at(SL_ENOMEM, path, -1, "idx write: out of memory");
    }
    snprintf(tmp, cap, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&tmp_seq, 1));
    k->name = path;
    if ((st = sl_file_open_write(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666, "idx file", &k->fd)))
        goto out;
    if (gzip) {
        k->gz = 1;
        /* 15 + 16: a gzip header and trailer around the deflate stream */
        if (deflateInit2(&k->z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
            k->gz = 0;
            st = sl_err_at(SL_ENOMEM, path, -1, "idx write: out of memory for deflate");
        }
    }
    if (!st)
        st = write_body(k, t, code);
    if (k->gz)
        deflateEnd(&k->z);
    if (close(k->fd) != 0 && !st)
        st = sl_file_write_error(path, "cannot close", k->at, errno);
    if (!st && rename(tmp, path) != 0)
        st = sl_err_at(SL_EIO, path, -1, "cannot rename %s over it: %s", tmp, strerror(errno));
    if (st)
        unlink(tmp);
out:
    free(tmp);
    free(k);
    return st;
}
