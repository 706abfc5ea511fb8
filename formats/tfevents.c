/* TensorBoard event files: writer of scalar events and a reader for tests and tools.
 *
 * Workload: a handful of scalars per logging step (loss, accuracy, learning rate,
 * examples/s, input wait), a few per second at most, for hours. Events are framed with
 * tfrecord.h's sl_tfr_frame into a small buffer that goes out with one write(2) when it
 * fills or on flush; the trainer flushes once per epoch or log interval so TensorBoard
 * sees progress while training runs, without a syscall per scalar. (The streaming
 * sl_tfr_writer has no flush, which a live log needs, hence the own buffer.)
 *
 * The Event and Summary protos are encoded by hand: only wall_time (1, double), step (2,
 * int64), file_version (3, string) and summary (5) with Summary.value (1) = {tag (1),
 * simple_value (2, float)} are ever written, and a dozen lines of encoder are simpler than
 * generated code. Zero-valued step is left out, as proto3 serializers do. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sluice/file.h"
#include "sluice/tfevents.h"
#include "sluice/tfrecord.h"

#define FLUSH_AT (64 * 1024)

/* ---- a tiny protobuf writer --------------------------------------------------------- */

typedef struct pbuf {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} pbuf;

static void pb_reserve(pbuf *b, size_t n) {
    if (b->oom || b->len + n <= b->cap) return;
    size_t cap = b->cap ? b->cap : 128;
    while (cap < b->len + n) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return;
    }
    b->p = p;
    b->cap = cap;
}

static void pb_bytes(pbuf *b, const void *data, size_t n) {
    pb_reserve(b, n);
    if (b->oom) return;
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void pb_varint(pbuf *b, uint64_t v) {
    uint8_t tmp[10];
    int k = 0;
    do {
        tmp[k++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_bytes(b, tmp, (size_t)k);
}

static void pb_fixed(pbuf *b, uint64_t v, int n) {
    uint8_t tmp[8];
    for (int i = 0; i < n; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    pb_bytes(b, tmp, (size_t)n);
}

static void pb_tag(pbuf *b, unsigned field, unsigned wire) { pb_varint(b, field << 3 | wire); }

static void pb_lenbytes(pbuf *b, unsigned field, const void *data, size_t n) {
    pb_tag(b, field, 2);
    pb_varint(b, n);
    pb_bytes(b, data, n);
}

static uint64_t double_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- writer ------------------------------------------------------------------------- */

struct sl_tfev_writer {
    int fd;
    char *path;
    pbuf out;          /* framed events not yet written */
    uint64_t written;  /* bytes handed to write(2) */
    sl_status failed;  /* first write error, kept with its message */
    sl_error err;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Frame one serialized event into the pending output. */
static sl_status queue_event(sl_tfev_writer *w, const pbuf *ev) {
    if (ev->oom) return sl_err(SL_ENOMEM, "%s: out of memory encoding an event", w->path);
    pb_reserve(&w->out, ev->len + 16);
    if (w->out.oom) {
        w->out.oom = false;
        return sl_err(SL_ENOMEM, "%s: out of memory queueing an event", w->path);
    }
    w->out.len += sl_tfr_frame(w->out.p + w->out.len, ev->p, ev->len);
    return SL_OK;
}

sl_status sl_tfev_flush(sl_tfev_writer *w) {
    if (w->failed) return sl_err_restore(&w->err);
    uint64_t start = w->written;
    sl_status s = sl_file_write_all(w->fd, w->out.p, w->out.len, w->path, &w->written);
    if (s) {
        /* Take back the part of this flush that was written (a full disk, a file-size
         * limit): the file then ends on a whole record, which TensorBoard reads to the end,
         * not on a cut one. */
        if (ftruncate(w->fd, (off_t)start) == 0) w->written = start;
        w->failed = s;
        sl_err_save(&w->err);
        return s;
    }
    w->out.len = 0;
    return SL_OK;
}

sl_status sl_tfev_open(const char *dir, double wall_time, sl_tfev_writer **out) {
    *out = NULL;
    if (!dir || !*dir) return sl_err(SL_EINVAL, "tfevents: the run folder name is empty");
    sl_status s = sl_mkdirs(dir, "event folder");
    if (s) return s;
    if (wall_time <= 0) wall_time = now_s();
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) strcpy(host, "localhost");
    host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';

    sl_tfev_writer *w = calloc(1, sizeof *w);
    size_t cap = strlen(dir) + strlen(host) + 96;
    if (!w || !(w->path = malloc(cap))) {
        free(w);
        return sl_err(SL_ENOMEM, "%s: out of memory opening an event file", dir);
    }
    w->fd = -1;
    long long secs = (long long)wall_time;
    /* Two writers in one folder in the same second (replicas, a quick restart) must not
     * share a file: the name gets a suffix when taken. */
    for (int attempt = 0; attempt < 100 && w->fd < 0; attempt++) {
        if (attempt == 0)
            snprintf(w->path, cap, "%s/events.out.tfevents.%010lld.%s", dir, secs, host);
        else
            snprintf(w->path, cap, "%s/events.out.tfevents.%010lld.%s.%ld.%d", dir, secs, host,
                     (long)getpid(), attempt);
        w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (w->fd < 0 && errno != EEXIST) break;
    }
    if (w->fd < 0) {
        s = sl_err(SL_EIO, "%s: cannot create: %s", w->path, strerror(errno));
        goto fail;
    }
    pbuf ev = {0};
    pb_tag(&ev, 1, 1);
    pb_fixed(&ev, double_bits(wall_time), 8);
    pb_lenbytes(&ev, 3, SL_TFEV_FILE_VERSION, strlen(SL_TFEV_FILE_VERSION));
    s = queue_event(w, &ev);
    free(ev.p);
    if (s) goto fail;
    /* TensorBoard finds the run as soon as the file has its version record. */
    if ((s = sl_tfev_flush(w))) goto fail;
    *out = w;
    return SL_OK;
fail:
    if (w->fd >= 0) {
        close(w->fd);
        unlink(w->path);
    }
    free(w->out.p);
    free(w->path);
    free(w);
    return s;
}

const char *sl_tfev_path(const sl_tfev_writer *w) { return w->path; }

sl_status sl_tfev_add_scalar(sl_tfev_writer *w, const char *tag, int64_t step, float value,
                             double wall_time) {
    if (w->failed) return sl_err_restore(&w->err);
    if (!tag || !*tag) return sl_err(SL_EINVAL, "%s: a scalar needs a tag", w->path);
    if (wall_time <= 0) wall_time = now_s();
    size_t tlen = strlen(tag);
    pbuf val = {0}, sum = {0}, ev = {0};
    pb_lenbytes(&val, 1, tag, tlen);
    pb_tag(&val, 2, 5);
    pb_fixed(&val, float_bits(value), 4);
    pb_lenbytes(&sum, 1, val.p, val.len);
    pb_tag(&ev, 1, 1);
    pb_fixed(&ev, double_bits(wall_time), 8);
    if (step) {
        pb_tag(&ev, 2, 0);
        pb_varint(&ev, (uint64_t)step);
    }
    pb_lenbytes(&ev, 5, sum.p, sum.len);
    ev.oom |= val.oom | sum.oom;
    sl_status s = queue_event(w, &ev);
    free(val.p);
    free(sum.p);
    free(ev.p);
    if (!s && w->out.len >= FLUSH_AT) s = sl_tfev_flush(w);
    return s;
}

sl_status sl_tfev_close(sl_tfev_writer *w) {
    if (!w) return SL_OK;
    sl_status s = sl_tfev_flush(w);
    if (!s && fsync(w->fd) != 0) s = sl_err(SL_EIO, "%s: fsync failed: %s", w->path, strerror(errno));
    if (close(w->fd) != 0 && !s) s = sl_err(SL_EIO, "%s: close failed: %s", w->path, strerror(errno));
    free(w->out.p);
    free(w->path);
    free(w);
    return s;
}

/* ---- reader ------------------------------------------------------------------------- */

struct sl_tfev_reader {
    sl_tfr_reader *tfr;
    char *path;
    sl_status failed;
    sl_error err;
    /* the current record's decoded entries, handed out one at a time */
    double wall_time;
    int64_t step;
    uint64_t offset;
    char *version;      /* file_version, or NULL */
    char **tags;        /* scalar tags */
    float *vals;
    int nq, capq, iq;   /* scalars queued, capacity, next to hand out */
    bool version_done, other;
};

typedef struct pspan {
    const uint8_t *p, *end;
} pspan;

static bool rd_varint(pspan *r, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return false;
        uint8_t b = *r->p++;
        *v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

/* The next field: number, wire type, and for length-delimited fields the bytes (for
 * fixed fields the bytes too: 8 or 4 of them). false on malformed input. */
static bool rd_field(pspan *r, unsigned *num, unsigned *wt, uint64_t *v, pspan *sub) {
    uint64_t tag;
    if (!rd_varint(r, &tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1FFFFFFF) return false;
    *num = (unsigned)(tag >> 3);
    *wt = (unsigned)(tag & 7);
    size_t n;
    switch (*wt) {
    case 0: return rd_varint(r, v);
    case 1: n = 8; break;
    case 5: n = 4; break;
    case 2:
        if (!rd_varint(r, v) || *v > (uint64_t)(r->end - r->p)) return false;
        n = (size_t)*v;
        break;
    default: return false;
    }
    if ((size_t)(r->end - r->p) < n) return false;
    sub->p = r->p;
    sub->end = r->p + n;
    r->p += n;
    return true;
}

static void clear_record(sl_tfev_reader *r) {
    for (int i = 0; i < r->nq; i++) free(r->tags[i]);
    r->nq = r->iq = 0;
    free(r->version);
    r->version = NULL;
    r->version_done = r->other = false;
}

static sl_status not_event(sl_tfev_reader *r, const char *what) {
    return sl_err_at(SL_ECORRUPT, r->path, (int64_t)r->offset,
                     "record is not a tensorflow.Event (%s)", what);
}

static sl_status push_scalar(sl_tfev_reader *r, pspan tag, float v) {
    if (r->nq == r->capq) {
        int cap = r->capq ? 2 * r->capq : 8;
        char **t = realloc(r->tags, (size_t)cap * sizeof *t);
        if (t) r->tags = t;
        float *f = t ? realloc(r->vals, (size_t)cap * sizeof *f) : NULL;
        if (!f) return sl_err(SL_ENOMEM, "%s: out of memory", r->path);
        r->vals = f;
        r->capq = cap;
    }
    char *s = strndup((const char *)tag.p, (size_t)(tag.end - tag.p));
    if (!s) return sl_err(SL_ENOMEM, "%s: out of memory", r->path);
    r->tags[r->nq] = s;
    r->vals[r->nq++] = v;
    return SL_OK;
}

static sl_status decode_summary(sl_tfev_reader *r, pspan sum) {
    unsigned num, wt;
    uint64_t v;
    pspan val;
    while (sum.p < sum.end) {
        if (!rd_field(&sum, &num, &wt, &v, &val)) return not_event(r, "bad Summary");
        if (num != 1) continue;
        if (wt != 2) return not_event(r, "Summary.value is not a message");
        pspan tag = {(const uint8_t *)"", (const uint8_t *)""}, f;
        bool has_simple = false;
        float simple = 0;
        while (val.p < val.end) {
            if (!rd_field(&val, &num, &wt, &v, &f)) return not_event(r, "bad Summary.Value");
            if (num == 1) {
                if (wt != 2) return not_event(r, "Summary.Value.tag is not a string");
                tag = f;
            } else if (num == 2) {
                if (wt != 5) return not_event(r, "Summary.Value.simple_value is not a float");
                uint32_t u = (uint32_t)f.p[0] | (uint32_t)f.p[1] << 8 | (uint32_t)f.p[2] << 16 |
                             (uint32_t)f.p[3] << 24;
                memcpy(&simple, &u, 4);
                has_simple = true;
            }
        }
        if (has_simple) {
            sl_status s = push_scalar(r, tag, simple);
            if (s) return s;
        }
    }
    return SL_OK;
}

static sl_status decode_event(sl_tfev_reader *r, const uint8_t *data, size_t len) {
    pspan ev = {data, data + len}, f;
    unsigned num, wt;
    uint64_t v;
    r->wall_time = 0;
    r->step = 0;
    while (ev.p < ev.end) {
        if (!rd_field(&ev, &num, &wt, &v, &f)) return not_event(r, "bad protobuf framing");
        switch (num) {
        case 1: {
            if (wt != 1) return not_event(r, "wall_time is not a double");
            uint64_t u = 0;
            for (int i = 7; i >= 0; i--) u = u << 8 | f.p[i];
            memcpy(&r->wall_time, &u, 8);
            break;
        }
        case 2:
            if (wt != 0) return not_event(r, "step is not a varint");
            r->step = (int64_t)v;
            break;
        case 3:
            if (wt != 2) return not_event(r, "file_version is not a string");
            free(r->version);
            if (!(r->version = strndup((const char *)f.p, (size_t)(f.end - f.p))))
                return sl_err(SL_ENOMEM, "%s: out of memory", r->path);
            break;
        case 5: {
            if (wt != 2) return not_event(r, "summary is not a message");
            sl_status s = decode_summary(r, f);
            if (s) return s;
            break;
        }
        default:
            break;
        }
    }
    r->other = !r->version && r->nq == 0;
    return SL_OK;
}

sl_status sl_tfev_reader_open(const char *path, sl_tfev_reader **out) {
    *out = NULL;
    sl_tfev_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return sl_err(SL_ENOMEM, "%s: out of memory opening an event file", path);
    }
    sl_tfr_read_opts o = sl_tfr_read_opts_default();
    o.compression = SL_COMP_NONE;
    sl_status s = sl_tfr_reader_open(path, &o, &r->tfr);
    if (s) {
        free(r->path);
        free(r);
        return s;
    }
    r->version_done = true;
    *out = r;
    return SL_OK;
}

sl_status sl_tfev_reader_next(sl_tfev_reader *r, sl_tfev_event *ev) {
    if (r->failed) return sl_err_restore(&r->err);
    for (;;) {
        *ev = (sl_tfev_event){.wall_time = r->wall_time, .step = r->step, .offset = r->offset,
                              .text = ""};
        if (r->version && !r->version_done) {
            r->version_done = true;
            ev->kind = SL_TFEV_VERSION;
            ev->text = r->version;
            return SL_OK;
        }
        if (r->iq < r->nq) {
            ev->kind = SL_TFEV_SCALAR;
            ev->text = r->tags[r->iq];
            ev->value = r->vals[r->iq++];
            return SL_OK;
        }
        if (r->other) {
            r->other = false;
            ev->kind = SL_TFEV_OTHER;
            return SL_OK;
        }
        clear_record(r);
        sl_record rec;
        sl_status s = sl_tfr_reader_next(r->tfr, &rec);
        if (s == SL_END) return SL_END;
        if (!s) {
            r->offset = rec.offset;
            s = decode_event(r, rec.data, rec.len);
        }
        if (s) {
            clear_record(r);
            r->failed = s;
            sl_err_save(&r->err);
            return s;
        }
    }
}

void sl_tfev_reader_close(sl_tfev_reader *r) {
    if (!r) return;
    clear_record(r);
    free(r->tags);
    free(r->vals);
    sl_tfr_reader_close(r->tfr);
    free(r->path);
    free(r);
}
