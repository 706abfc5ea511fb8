/* TFRecord files: reader (mmap or streamed, plain/GZIP/ZLIB) and writer.
 *
 * Workload: shards of kilobytes to many gigabytes read front to back by one thread each,
 * records from a few bytes to megabytes. Plain regular files are mmapped once and records
 * are zero-copy views into the mapping (whose sl_buf unmaps when the last view goes), so
 * reading costs little more than the CRCs. The mapping's page tables are filled 8 MiB
 * ahead of the reader at a time (MADV_POPULATE_READ: one call instead of a page fault per
 * 16 pages; on a 1 GiB file in the page cache, 14-17 -> 18 GB/s). Everything else
 * (compressed files, pipes, files that cannot be mapped) goes through a window: bytes are
 * inflated (or read) into an sl_buf, records are views into it, and when the window must
 * move on, a buffer still referenced by a caller is left alone and a fresh one is started.
 *
 * Framing errors name the file, the record's offset in the uncompressed stream and what
 * was wrong, with a hint. Skip mode: after a bad length CRC (or a record that runs past the
 * end) the length cannot be trusted, so we scan forward one byte at a time for a position
 * whose header CRC matches, whose record fits, and whose data CRC matches (resync: one
 * running CRC for all candidates, so the scan is linear however many false headers claim
 * long records); after a bad data CRC under a good length CRC the length is trusted and the
 * record is stepped over. Every loop advances by at least one byte, and every read is
 * bounds-checked against the window, so hostile input can neither hang nor overrun us.
 *
 * Hostile files (issue 11): the mapping is guarded (sl_buf_wrap_mapping) so a file that
 * shrinks is SL_EIO, not SIGBUS; before reporting bad framing in a mapped file we ask
 * whether it shrank (a shrink inside the file's last page reads zeros without a fault);
 * streamed records are limited to max_record; a damaged compressed stream hands out what
 * was inflated before the damage first (fail mode) or resumes at the next gzip member
 * (skip mode). See tfrecord.h for the contract. */
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
#include "sluice/file.h"
#include "sluice/util.h"

#define HDR 12             /* uint64 length + uint32 masked crc */
#define FTR 4              /* uint32 masked crc of data */
#define IN_CHUNK (1 << 18) /* compressed bytes read per read() */
#define WIN_MIN (1 << 20)  /* smallest decoded window */
#define POPULATE_AHEAD ((size_t)8 << 20) /* mapped bytes whose page tables are filled ahead */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14; older kernels answer EINVAL */
#endif

static const char HINT_CORRUPT[] =
    "the file may be damaged or not a TFRecord file; read with skip_corrupt "
    "(sluice-record verify --skip-corrupt) to skip bad records";
static const char HINT_TRUNC[] =
    "the file may have been cut short (an interrupted copy, or a writer that was not "
    "closed); read with skip_corrupt (sluice-record verify --skip-corrupt) to keep the "
    "records before the damage";

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
                              .verify_data_crc = true, .max_record = SL_TFR_MAX_RECORD_DEFAULT};
}

sl_tfr_write_opts sl_tfr_write_opts_default(void) {
    return (sl_tfr_write_opts){.compression = SL_COMP_NONE, .level = -1, .fsync = false};
}

/* ---- CRC32C of a sub-range from two running CRCs ------------------------------------ */

/* crc(A || B) = x^(8|B|) * crc(A) ^ crc(B) over GF(2) mod the (reflected) Castagnoli
 * polynomial, as zlib's crc32_combine does for its polynomial. Resync uses it to get the
 * CRC of any record candidate's data from one forward pass. */
#define CRC32C_POLY 0x82f63b78u

static uint32_t multmodp(uint32_t a, uint32_t b) {
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

/* x^(8n) mod p. */
static uint32_t x8nmodp(uint64_t n) {
    static _Atomic uint32_t table[64];
    static atomic_bool ready;
    if (!atomic_load_explicit(&ready, memory_order_acquire)) {
        uint32_t p = 1u << 30; /* x^1 */
        for (int k = 0; k < 64; k++) {
            atomic_store_explicit(&table[k], p, memory_order_relaxed);
            p = multmodp(p, p);
        }
        atomic_store_explicit(&ready, true, memory_order_release);
    }
    uint32_t p = 1u << 31; /* x^0 */
    for (int k = 3; n; n >>= 1, k++)
        if (n & 1) p = multmodp(atomic_load_explicit(&table[k & 63], memory_order_relaxed), p);
    return p;
}

/* The CRC of bytes [a, b) given crc_a = crc of [o, a) and crc_b = crc of [o, b). */
static uint32_t crc_between(uint32_t crc_a, uint32_t crc_b, uint64_t len) {
    return crc_b ^ multmodp(x8nmodp(len), crc_a);
}

/* ---- reader ------------------------------------------------------------------------- */

typedef struct cand {     /* a resync candidate: header at p passed its CRC */
    uint64_t p, b;        /* header offset; offset of its data CRC (end of data) */
    uint32_t crc_a;       /* running CRC at the start of its data */
} cand;

#define MAX_CANDS ((size_t)1 << 20) /* resync candidates pending at once (24 MiB) */

struct sl_tfr_reader {
    char *name;               /* for messages */
    sl_tfr_read_opts opts;
    sl_compression comp;      /* resolved */
    uint64_t max_record;      /* streamed input: the record length limit in force */

    /* The window of uncompressed bytes: base[0..end) is valid, base[pos] is the next
     * record; base[0] sits at stream offset base_off. */
    sl_buf *buf;              /* owns base (one reference held by the reader) */
    const uint8_t *base;
    size_t end, pos, cap;     /* cap: room at base (streamed) */
    uint64_t base_off;
    bool eof;                 /* no bytes will follow base[end) */

    /* A file we mapped (plain: buf is the mapping; compressed: src_buf is). */
    bool mapped;              /* plain and mapped: base is the whole file */
    int map_fd;               /* kept open to tell a shrink (fstat) from damage; -1 if none */
    uint64_t map_size;        /* the size we mapped */
    bool populate;            /* fill the mapping's page tables ahead (populate_ahead) */
    size_t populated;         /* base[0..populated) has been asked for */

    /* Streamed input: from fd, or from memory (mem/mem_size). */
    int fd;
    bool own_fd;              /* close fd at close (not for sl_tfr_reader_open_fd) */
    bool from_mem;
    const uint8_t *mem;
    size_t mem_size, mem_pos;
    sl_buf *src_buf;          /* owns mem when it is our mapping of a compressed file */
    uint8_t *in;              /* compressed input chunk (fd source) */
    bool src_eof;
    uint64_t in_off;          /* compressed bytes consumed so far (for messages) */
    z_stream zs;
    bool zs_live, zs_done;    /* inflate initialised; current member finished */

    /* Damage in the compressed stream. Fail mode: the error waits until the bytes inflated
     * before it are used up. Skip mode: after resuming at the next gzip member, `gap` is
     * the uncompressed offset where its bytes begin (records cannot span it). */
    sl_status zerr;
    sl_error zerr_msg;
    bool has_gap;
    uint64_t gap;
    uint64_t resumed_at;      /* in_off of the last resumption (progress guard) */
    bool inflated_any;        /* some output came, or a member ended: the stream is this kind */

    cand *heap;               /* resync candidates, a min-heap on b */
    size_t nheap, capheap;

    sl_status failed;         /* sticky error, and its message */
    sl_error err;
    sl_tfr_stats st;
};

static void free_fn(void *ctx, void *data) { free(data); }

/* A mapped file's record ends at base[need): fill the page tables up to POPULATE_AHEAD
 * beyond it in one call, so the CRC runs over mapped pages instead of faulting them in a
 * few at a time. Only a hint: an error (an old kernel, a file that shrank) stops asking,
 * and the reads themselves report any damage. */
static void populate_ahead(sl_tfr_reader *r, size_t need) {
    if (!r->populate || need <= r->populated) return;
    size_t from = r->populated > r->pos ? r->populated : r->pos;
    from &= ~(size_t)4095; /* the mapping starts on a page */
    size_t to = r->end - need > POPULATE_AHEAD ? need + POPULATE_AHEAD : r->end; /* need <= end */
    if (to > from && madvise((void *)(r->base + from), to - from, MADV_POPULATE_READ) != 0)
        r->populate = false;
    r->populated = to;
}

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

/* Did the file we mapped shrink under us? (a guarded page was replaced, or it is shorter
 * now: bytes past its end on its last page read as zeros without any fault). */
static bool map_shrunk(sl_tfr_reader *r) {
    if (r->map_fd < 0) return false;
    if (sl_buf_damaged(r->mapped ? r->buf : r->src_buf)) return true;
    struct stat sb;
    return fstat(r->map_fd, &sb) == 0 && (uint64_t)sb.st_size < r->map_size;
}

static sl_status shrink_err(sl_tfr_reader *r, uint64_t off) {
    struct stat sb;
    char now[32] = "fewer";
    if (r->map_fd >= 0 && fstat(r->map_fd, &sb) == 0 && (uint64_t)sb.st_size < r->map_size)
        snprintf(now, sizeof now, "%llu", (unsigned long long)sb.st_size);
    sl_err(SL_EIO, "%s: shrank from %llu to %s bytes while being read (at %s byte %llu)", r->name,
           (unsigned long long)r->map_size, now, r->mapped ? "record" : "compressed",
           (unsigned long long)(r->mapped ? off : r->in_off));
    sl_err_hint("the file was truncated or rewritten in place while it was being read; replace "
                "shards by writing a new file and renaming it over the old one");
    return SL_EIO;
}

/* Before reporting bad framing: was it really the file shrinking, or the compressed stream
 * breaking (fail mode) under the bytes we had? Returns that error, or SL_OK. */
static sl_status framing_cause(sl_tfr_reader *r, uint64_t off) {
    if (r->zerr) return sl_err_restore(&r->zerr_msg);
    if (r->map_fd >= 0 && map_shrunk(r)) return shrink_err(r, off);
    return SL_OK;
}

/* Read more compressed (or plain) input into zs.next_in, after the `keep` bytes still
 * unconsumed there (which move to the front of the chunk). Returns SL_OK (possibly with
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

static void src_skip(sl_tfr_reader *r, size_t n) {
    r->zs.next_in += n;
    r->zs.avail_in -= (uInt)n;
    r->in_off += n;
    r->st.compressed_bytes_lost += n;
}

/* The compressed stream broke at zs.next_in (the message is set). Fail mode: keep what was
 * inflated and report the error when it is used up. Skip mode: count the damage, look for
 * the start of another gzip member (1f 8b 08) and go on there, or end the stream; the
 * compressed bytes passed over are counted. One pass over the input: linear. */
static sl_status stream_damage(sl_tfr_reader *r, sl_status code) {
    /* A stream that never inflated anything is not damaged but not compressed this way at
     * all (a wrong compression option, or nothing there): an error in skip mode too. */
    if (!r->opts.skip_corrupt || !r->inflated_any) {
        r->zerr = code;
        sl_err_save(&r->zerr_msg);
        r->eof = true;
        return SL_OK;
    }
    sl_err_clear();
    r->st.stream_damage++;
    /* a member that broke where the last one began: step past its first byte */
    if (r->in_off == r->resumed_at && r->zs.avail_in) src_skip(r, 1);
    while (r->comp == SL_COMP_GZIP) {
        sl_status s = src_fill(r);
        if (s) return s;
        const uint8_t *p = r->zs.next_in;
        size_t n = r->zs.avail_in, i = 0;
        if (n == 0 && r->src_eof) break;
        for (; i + 3 <= n; i++)
            if (p[i] == 0x1f && p[i + 1] == 0x8b && p[i + 2] == 8) break;
        if (i + 3 <= n) {
            src_skip(r, i);
            inflateReset(&r->zs);
            r->zs_done = false;
            r->resumed_at = r->in_off;
            r->has_gap = true;
            r->gap = r->base_off + r->end;
            return SL_OK;
        }
        /* keep a possible start of a magic that a chunk boundary splits */
        size_t keep = n < 2 ? n : 2;
        if (r->src_eof || r->from_mem) keep = 0;
        src_skip(r, n - keep);
        if (keep) {
            memmove(r->in, r->zs.next_in, keep);
            ssize_t got;
            do got = read(r->fd, r->in + keep, IN_CHUNK - keep);
            while (got < 0 && errno == EINTR);
            if (got < 0)
                return sl_err(SL_EIO, "%s: read failed after byte %llu: %s", r->name,
                              (unsigned long long)r->in_off, strerror(errno));
            if (got == 0) r->src_eof = true;
            r->zs.next_in = r->in;
            r->zs.avail_in = (uInt)(keep + (size_t)got);
            if (got == 0) {
                src_skip(r, keep);
                break;
            }
        }
    }
    /* ZLIB has no members to resume at; GZIP had none left: the rest is lost. */
    for (;;) {
        src_skip(r, r->zs.avail_in);
        if (r->src_eof) break;
        sl_status s = src_fill(r);
        if (s) return s;
    }
    r->eof = true;
    return SL_OK;
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
        if (r->src_buf && sl_buf_damaged(r->src_buf)) return shrink_err(r, 0);
        if (made) r->inflated_any = true;
        if (z == Z_STREAM_END) {
            r->zs_done = true;
            r->inflated_any = true;
        } else if (z == Z_BUF_ERROR || (z == Z_OK && made == 0)) {
            if (r->src_eof && r->zs.avail_in == 0) {
                if (r->map_fd >= 0 && map_shrunk(r)) return shrink_err(r, 0);
                sl_err(SL_ECORRUPT, "%s: byte %llu (compressed): truncated %s stream", r->name,
                       (unsigned long long)r->in_off, sl_compression_name(r->comp));
                sl_err_hint("the file was cut short (an interrupted copy, or a writer that was "
                            "not closed)");
                return stream_damage(r, SL_ECORRUPT);
            }
        } else if (z != Z_OK) {
            sl_err(SL_ECORRUPT, "%s: byte %llu (compressed): bad %s stream: %s", r->name,
                   (unsigned long long)r->in_off, sl_compression_name(r->comp),
                   r->zs.msg ? r->zs.msg : zError(z));
            sl_err_hint("the file is damaged or not %s-compressed; check the compression option; "
                        "read with skip_corrupt (sluice-record verify --skip-corrupt) to keep "
                        "what can be recovered",
                        sl_compression_name(r->comp));
            return stream_damage(r, SL_ECORRUPT);
        }
        if (made) return SL_OK;
    }
}

/* Ensure base[pos..pos+n) is valid if the stream has that many bytes. Returns SL_OK (check
 * end - pos for what is there) or an error (SL_EIO, SL_ENOMEM). */
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

/* Make stream bytes up to absolute offset x available if the stream has them; *ok says
 * whether it does. */
static sl_status have_to(sl_tfr_reader *r, uint64_t x, bool *ok) {
    uint64_t at = r->base_off + r->pos;
    *ok = false;
    if (x < at) return SL_OK;
    if (x - at > SIZE_MAX) return SL_OK;
    sl_status s = ensure(r, (size_t)(x - at));
    if (s) return s;
    *ok = r->base_off + r->end >= x;
    return SL_OK;
}

/* ---- resync (skip mode) -------------------------------------------------------------
 * After a header whose length cannot be trusted, the next record is the first position p
 * whose length CRC matches, whose record fits in the stream, and whose data CRC matches.
 * Checking each candidate's data separately costs its length each time, so a crafted run
 * of headers with long, bad data would be quadratic. Instead one running CRC goes forward
 * over the stream, stopping at each candidate's data start (saving the CRC there) and data
 * end (where crc_between gives the data's CRC from the two running values). Candidates
 * wait in a heap ordered by data end; every stream byte is CRC'd once. Pending candidates
 * are capped at MAX_CANDS (only crafted input reaches that; new ones are then passed over).
 * For streamed input, candidates longer than max_record are not records we could return,
 * so the window never needs more than max_record bytes behind the scan. */

static bool heap_push(sl_tfr_reader *r, cand c) {
    if (r->nheap == r->capheap) {
        if (r->capheap >= MAX_CANDS) return false;
        size_t cap = r->capheap ? 2 * r->capheap : 256;
        cand *h = realloc(r->heap, cap * sizeof *h);
        if (!h) return false;
        r->heap = h;
        r->capheap = cap;
    }
    size_t i = r->nheap++;
    while (i && r->heap[(i - 1) / 2].b > c.b) {
        r->heap[i] = r->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    r->heap[i] = c;
    return true;
}

static cand heap_pop(sl_tfr_reader *r) {
    cand top = r->heap[0], last = r->heap[--r->nheap];
    size_t i = 0, n = r->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && r->heap[c + 1].b < r->heap[c].b) c++;
        if (r->heap[c].b >= last.b) break;
        r->heap[i] = r->heap[c];
        i = c;
    }
    if (n) r->heap[i] = last;
    return top;
}

typedef struct cursor {
    uint64_t at;  /* stream offset the CRC has reached */
    uint32_t crc; /* CRC of [origin, at) */
} cursor;

/* Move the running CRC to x (bytes must be in the window). */
static void cursor_to(sl_tfr_reader *r, cursor *c, uint64_t x) {
    if (x <= c->at) return;
    c->crc = sl_crc32c(c->crc, r->base + (size_t)(c->at - r->base_off), (size_t)(x - c->at));
    r->st.resync_bytes_crc += x - c->at;
    c->at = x;
}

/* Does candidate q hold a whole record? Moves the cursor to q.b. */
static sl_status resolve(sl_tfr_reader *r, cursor *c, const cand *q, bool *good) {
    bool ok;
    *good = false;
    sl_status s = have_to(r, q->b + FTR, &ok);
    if (s || !ok) return s;
    cursor_to(r, c, q->b);
    uint64_t a = q->p + HDR;
    uint32_t crc = crc_between(q->crc_a, c->crc, q->b - a);
    *good = sl_crc32c_mask(crc) == sl_load_le32(r->base + (size_t)(q->b - r->base_off));
    return SL_OK;
}

static sl_status resync(sl_tfr_reader *r) {
    r->st.corrupt_skipped++;
    const uint64_t start = r->base_off + r->pos;
    const uint64_t limit = r->mapped ? UINT64_MAX : r->max_record;
    uint64_t s = start + 1, best = 0;
    bool found = false, ok;
    cursor cur = {s, 0};
    r->nheap = 0;
    sl_status st;
    for (;;) {
        /* Decide the candidates whose data ends by s + HDR before the cursor goes there. */
        while (r->nheap && r->heap[0].b <= s + HDR) {
            cand q = heap_pop(r);
            bool good;
            if ((st = resolve(r, &cur, &q, &good))) return st;
            if (good && (!found || q.p < best)) {
                best = q.p;
                found = true;
            }
        }
        if (found) break; /* later candidates start after best */
        if ((st = have_to(r, s + HDR, &ok))) return st;
        if (!ok) break;
        const uint8_t *h = r->base + (size_t)(s - r->base_off);
        uint64_t len = sl_load_le64(h);
        if (len <= limit && masked_crc(h, 8) == sl_load_le32(h + 8)) {
            uint64_t a = s + HDR;
            /* mapped: the whole file is here, so a record that cannot fit is no candidate */
            bool fits = !r->eof || (r->base_off + r->end - a >= FTR &&
                                    len <= r->base_off + r->end - a - FTR);
            if (fits) {
                if (r->nheap == 0) cur = (cursor){a, 0};
                cursor_to(r, &cur, a);
                heap_push(r, (cand){s, a + len, cur.crc});
            }
        }
        s++;
        /* Streamed: let the window drop what no pending candidate can need. */
        if (!r->mapped) {
            uint64_t low = r->nheap ? (s > limit + start ? s - limit : start) : s;
            if (r->nheap == 0) cur = (cursor){s, 0};
            if (low > r->base_off + r->pos && low <= r->base_off + r->end)
                r->pos = (size_t)(low - r->base_off);
        }
    }
    /* Candidates that began before best (or all, at the end of the stream) may still hold
     * an earlier record. */
    while (r->nheap) {
        cand q = heap_pop(r);
        if (found && q.p > best) continue;
        bool good;
        if ((st = resolve(r, &cur, &q, &good))) return st;
        if (good && (!found || q.p < best)) {
            best = q.p;
            found = true;
        }
    }
    uint64_t to = found ? best : r->base_off + r->end;
    r->st.bytes_skipped += to - start;
    r->pos = (size_t)(to - r->base_off);
    return SL_OK;
}

/* "18446744073709551631": the decimal of a + b without overflow. */
static const char *u128_str(char *buf, size_t cap, uint64_t a, uint64_t b) {
    unsigned __int128 v = (unsigned __int128)a + b;
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

/* A record up to a gap (damage in the compressed stream) cannot be whole: skip to it. */
static void skip_to_gap(sl_tfr_reader *r, uint64_t off) {
    r->st.corrupt_skipped++;
    r->st.bytes_skipped += r->gap - off;
    r->pos += (size_t)(r->gap - off);
    r->has_gap = false;
}

sl_status sl_tfr_reader_next(sl_tfr_reader *r, sl_record *rec) {
    if (r->failed) return sl_err_restore(&r->err);
    const bool skip = r->opts.skip_corrupt;
    for (;;) {
        sl_status s = ensure(r, HDR);
        if (s) return fail(r, s);
        size_t avail = r->end - r->pos;
        uint64_t off = r->base_off + r->pos;
        if (r->has_gap && off >= r->gap) r->has_gap = false;
        uint64_t to_gap = r->has_gap ? r->gap - off : UINT64_MAX;
        if (avail == 0) {
            if ((s = framing_cause(r, off))) return fail(r, s);
            return SL_END;
        }
        const uint8_t *h = r->base + r->pos;
        if (r->has_gap && to_gap < HDR && avail >= to_gap) {
            skip_to_gap(r, off);
            continue;
        }
        if (avail < HDR) {
            if ((s = framing_cause(r, off))) return fail(r, s);
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
        uint64_t len = sl_load_le64(h);
        uint32_t stored = sl_load_le32(h + 8), computed = masked_crc(h, 8);
        if (stored != computed) {
            if ((s = framing_cause(r, off))) return fail(r, s);
            if (!skip)
                return fail(r, frame_err(r, off, HINT_CORRUPT,
                                         "corrupt record: length CRC mismatch (stored 0x%08x, "
                                         "computed 0x%08x)",
                                         stored, computed));
            if ((s = resync(r))) return fail(r, s);
            continue;
        }
        if (r->has_gap && (len > to_gap - HDR || to_gap - HDR - len < FTR)) {
            skip_to_gap(r, off);
            continue;
        }
        if (!r->mapped && len > r->max_record) {
            sl_err(SL_ERANGE,
                   "%s: byte %llu%s: record of %llu bytes is larger than the limit of %llu bytes",
                   r->name, (unsigned long long)off, r->comp == SL_COMP_NONE ? "" : " (uncompressed)",
                   (unsigned long long)len, (unsigned long long)r->max_record);
            sl_err_hint("if the record is real, raise the limit: sl_tfr_read_opts.max_record, "
                        "max_record=BYTES on `files` in a config, or sluice-record --max-record BYTES");
            return fail(r, SL_ERANGE);
        }
        bool fits = len <= SIZE_MAX - HDR - FTR;
        if (fits) {
            if ((s = ensure(r, HDR + len + FTR))) return fail(r, s);
            avail = r->end - r->pos;
            h = r->base + r->pos;
            fits = avail >= HDR + len + FTR;
            if (fits) populate_ahead(r, r->pos + HDR + (size_t)len + FTR);
        }
        if (!fits) {
            if ((s = framing_cause(r, off))) return fail(r, s);
            if (!skip) {
                char need[48];
                return fail(r, frame_err(r, off, HINT_TRUNC,
                                         "truncated record: needs %s bytes (12-byte header, "
                                         "%llu of data, 4-byte CRC) but only %zu are left",
                                         u128_str(need, sizeof need, len, HDR + FTR),
                                         (unsigned long long)len, avail));
            }
            /* The length is sound but the bytes are not all there: maybe the end of the file
             * is missing, maybe bytes went missing inside; later records may survive. */
            if ((s = resync(r))) return fail(r, s);
            continue;
        }
        const uint8_t *d = h + HDR;
        if (r->opts.verify_data_crc) {
            stored = sl_load_le32(d + len);
            computed = masked_crc(d, len);
            if (stored != computed) {
                if ((s = framing_cause(r, off))) return fail(r, s);
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
        } else if (r->mapped) {
            (void)*(volatile const uint8_t *)(d + len + FTR - 1); /* fault now if it is gone */
        }
        if (r->mapped && sl_buf_damaged(r->buf)) return fail(r, shrink_err(r, off));
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
    if (r->fd >= 0 && r->own_fd) close(r->fd);
    if (r->map_fd >= 0) close(r->map_fd);
    free(r->heap);
    free(r->in);
    free(r->name);
    free(r);
}

/* What the first bytes say. A plain file whose first record happens to start with bytes
 * that look like a gzip or zlib header is recognised by its valid length CRC. */
static sl_compression detect(const uint8_t *p, size_t n) {
    if (n >= HDR && masked_crc(p, 8) == sl_load_le32(p + 8)) return SL_COMP_NONE;
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
    r->max_record = r->opts.max_record ? r->opts.max_record : SL_TFR_MAX_RECORD_DEFAULT;
    if (r->max_record > ((uint64_t)1 << 62)) r->max_record = (uint64_t)1 << 62; /* no overflow in offsets */
    r->comp = r->opts.compression;
    r->fd = -1;
    r->map_fd = -1;
    r->resumed_at = UINT64_MAX;
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
    if (r->comp == SL_COMP_AUTO) r->comp = detect(data, size);
    if (r->comp == SL_COMP_NONE) {
        sl_buf *b = sl_buf_wrap((void *)data, size, NULL, NULL);
        if (!b) goto fail_nomem;
        start_whole(r, b, data, size);
        r->mapped = true; /* all there: no streamed-record limit */
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

/* Streamed input from r->fd: read enough to recognise the compression. */
static sl_status start_fd(sl_tfr_reader *r) {
    r->in = malloc(IN_CHUNK);
    if (!r->in) return sl_err(SL_ENOMEM, "%s: out of memory opening a reader", r->name);
    size_t have = 0;
    while (have < HDR) {
        ssize_t got = read(r->fd, r->in + have, IN_CHUNK - have);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return sl_err(SL_EIO, "%s: read failed: %s", r->name, strerror(errno));
        if (got == 0) {
            r->src_eof = true;
            break;
        }
        have += (size_t)got;
    }
    r->zs.next_in = r->in;
    r->zs.avail_in = (uInt)have;
    return start_stream(r);
}

sl_status sl_tfr_reader_open_fd(int fd, const char *name, const sl_tfr_read_opts *opts,
                                sl_tfr_reader **out) {
    *out = NULL;
    sl_tfr_reader *r;
    sl_status s = reader_new(name ? name : "<fd>", opts, &r);
    if (s) return s;
    r->fd = fd;
    if ((s = start_fd(r))) {
        sl_tfr_reader_close(r);
        return s;
    }
    *out = r;
    return SL_OK;
}

sl_status sl_tfr_reader_open(const char *path, const sl_tfr_read_opts *opts,
                             sl_tfr_reader **out) {
    *out = NULL;
    sl_tfr_reader *r;
    sl_status s = reader_new(path, opts, &r);
    if (s) return s;
    uint64_t fsize = 0;
    if ((s = sl_file_open_read(path, "TFRecord file", &r->fd, &fsize))) {
        if (s == SL_ENOTFOUND && !sl_file_dangling_target(path, NULL, 0))
            sl_err_hint("check the path (and the working directory, for a relative one)");
        goto fail;
    }
    r->own_fd = true;
    if (fsize == 0 && r->comp == SL_COMP_AUTO) {
        start_whole(r, NULL, NULL, 0); /* empty: no records */
        r->comp = SL_COMP_NONE;
        r->mapped = true;
        goto done;
    }
    if (fsize > 0 && fsize <= SIZE_MAX) {
        size_t size = (size_t)fsize;
        void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, r->fd, 0);
        if (map != MAP_FAILED) {
            madvise(map, size, MADV_SEQUENTIAL);
            sl_buf *b = sl_buf_wrap_file_mapping(map, size, PROT_READ, r->fd);
            if (!b) {
                munmap(map, size);
                s = sl_err(SL_ENOMEM, "%s: out of memory opening a reader", path);
                goto fail;
            }
            r->map_fd = r->fd; /* kept to tell a shrink from damage */
            r->fd = -1;
            r->map_size = fsize;
            if (r->comp == SL_COMP_AUTO) r->comp = detect(map, size);
            if (r->comp == SL_COMP_NONE) {
                start_whole(r, b, map, size);
                r->mapped = true;
                r->populate = size > POPULATE_AHEAD; /* a small file: its faults cost little */
                if (sl_buf_damaged(b)) { /* shrank before detect looked */
                    s = shrink_err(r, 0);
                    goto fail;
                }
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
    /* Files that cannot be mapped: read() in chunks. */
    if ((s = start_fd(r))) goto fail;
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
    sl_status s = sl_file_write_all(w->fd, p, n, w->path, &w->written);
    return s ? wfail(w, s) : SL_OK;
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
    sl_status s = sl_file_open_write(path, O_WRONLY | O_CREAT | O_TRUNC, 0666, "TFRecord file",
                                     &w->fd);
    if (s) goto fail;
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
    sl_store_le64(out, len);
    sl_store_le32(out + 8, masked_crc(out, 8));
    if (len) memcpy(out + HDR, data, len);
    sl_store_le32(out + HDR + len, masked_crc(data, len));
    return HDR + len + FTR;
}

sl_status sl_tfr_writer_write(sl_tfr_writer *w, const void *data, size_t len) {
    if (w->failed) return sl_err_restore(&w->err);
    uint8_t hdr[HDR], ftr[FTR];
    sl_store_le64(hdr, len);
    sl_store_le32(hdr + 8, masked_crc(hdr, 8));
    sl_store_le32(ftr, masked_crc(data, len));
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
