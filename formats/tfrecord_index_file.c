/* Random access into an uncompressed TFRecord file: the file mapped once, its index (from
 * formats/tfrecord_index.c), and record i handed out as a view into the mapping after its
 * framing and CRCs are checked against what the index says. See sluice/tfrecord_index.h.
 *
 * Workload: a global shuffle reading records of one shard in any order, from several
 * threads at once; each read costs the record's CRC and a few loads (sl_buf_lost: one per
 * page of the record), nothing is locked and nothing is written. A read trusts nothing the
 * index says without checking it against the file: the index was made for the file as it
 * was, and the file may have been edited since in a way its identity does not show. */
#include "sluice/tfrecord_index.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/tfrecord_index_priv.h"
#include "sluice/crc32c.h"
#include "sluice/file.h"
#include "sluice/util.h"

#define HDR 12
#define FRAME 16

static const char HINT_EDITED[] =
    "the file changed after its index was made (an edit of the same size outside its first and "
    "last 4 KiB, with its modification time set back), or it is damaged: check it (sluice-record "
    "verify FILE) and rebuild the index (sluice-record index --rebuild FILE)";

struct sl_tfr_file {
    char *path;          /* as given, for messages */
    sl_buf *buf;         /* the guarded mapping (one reference held); NULL for an empty file */
    const uint8_t *base; /* buf's bytes */
    uint64_t size;       /* mapped */
    uint64_t inode;      /* for shrink messages */
    sl_tfr_index *ix;
    bool verify;         /* check data CRCs */
};

sl_status sl_tfr_file_open(const char *path, const sl_tfr_index_opts *iopts,
                           const sl_tfr_read_opts *ropts, sl_tfr_file **out) {
    *out = NULL;
    sl_tfr_index_opts io = iopts ? *iopts : sl_tfr_index_opts_default();
    sl_tfr_read_opts ro = ropts ? *ropts : sl_tfr_read_opts_default();
    if (ro.compression != SL_COMP_AUTO && ro.compression != SL_COMP_NONE) {
        sl_err(SL_EUNSUPPORTED, "%s: %s compression: a compressed TFRecord file has no random access", path,
               sl_compression_name(ro.compression));
        sl_err_hint("random access reads uncompressed files (compression auto or none)");
        return SL_EUNSUPPORTED;
    }
    sl_tfr_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return sl_err(SL_ENOMEM, "%s: out of memory opening the file", path);
    }
    f->verify = ro.verify_data_crc;
    int fd;
    sl_status s = sl_file_open_read(path, "TFRecord file", &fd, NULL);
    if (s) {
        if (s == SL_ENOTFOUND && !sl_file_dangling_target(path, NULL, 0))
            sl_err_hint("check the path (and the working directory, for a relative one)");
        goto fail;
    }
    sl_tfr_file_id id;
    if ((s = sl_tfr_file_identity(fd, path, &id)) || (s = sl__tfr_map(path, fd, id.size, &f->buf))) goto fail_fd;
    f->size = id.size;
    f->inode = id.inode;
    f->base = f->buf ? f->buf->data : NULL;
    if (f->buf && ro.compression == SL_COMP_AUTO && (s = sl__tfr_check_plain(path, f->base, (size_t)f->size)))
        goto fail_fd;
    if ((s = sl__tfr_index_get(path, fd, &id, f->base, f->buf, &io, &f->ix))) goto fail_fd;
    close(fd);
    *out = f;
    return SL_OK;
fail_fd:
    close(fd);
fail:
    sl_tfr_file_close(f);
    return s;
}

int64_t sl_tfr_file_count(const sl_tfr_file *f) { return f->ix->count; }
const char *sl_tfr_file_path(const sl_tfr_file *f) { return f->path; }
const sl_tfr_index *sl_tfr_file_index(const sl_tfr_file *f) { return f->ix; }

void sl_tfr_file_close(sl_tfr_file *f) {
    if (!f) return;
    sl_buf_unref(f->buf);
    sl_tfr_index_free(f->ix);
    free(f->path);
    free(f);
}

/* Bytes [off, off + n) of the mapping gone with the file? Then SL_EIO, else SL_OK. */
static sl_status lost(const sl_tfr_file *f, int64_t i, uint64_t off, uint64_t n) {
    if (!sl_buf_lost(f->buf, f->base + off, (size_t)n)) return SL_OK;
    char where[64];
    snprintf(where, sizeof where, "record %lld, byte %llu", (long long)i, (unsigned long long)off);
    return sl__tfr_shrink_err(f->path, f->inode, f->size, "read", where);
}

static sl_status corrupt(const sl_tfr_file *f, int64_t i, uint64_t off, uint64_t n, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static sl_status corrupt(const sl_tfr_file *f, int64_t i, uint64_t off, uint64_t n, const char *fmt, ...) {
    sl_status s = lost(f, i, off, n); /* zeros where the file went read as damage */
    if (s) return s;
    char body[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    sl_err(SL_ECORRUPT, "%s: record %lld at byte %llu: corrupt record: %s", f->path, (long long)i,
           (unsigned long long)off, body);
    sl_err_hint("%s", HINT_EDITED);
    return SL_ECORRUPT;
}

sl_status sl_tfr_file_read(const sl_tfr_file *f, int64_t i, sl_record *rec) {
    const sl_tfr_index *ix = f->ix;
    if (i < 0 || i >= ix->count)
        return sl_err(SL_ERANGE, "%s: record %lld is out of range: the index has %lld records", f->path,
                      (long long)i, (long long)ix->count);
    const uint64_t off = ix->off[i];
    const uint64_t end = i + 1 < ix->count ? ix->off[i + 1] : f->size; /* where the index says it ends */
    if (end > f->size || off >= end || end - off < FRAME) /* a parsed index was checked: defensive */
        return sl_err(SL_EINTERNAL, "%s: record %lld: the index's offsets %llu, %llu do not fit a file of %llu bytes",
                      f->path, (long long)i, (unsigned long long)off, (unsigned long long)end,
                      (unsigned long long)f->size);
    const uint8_t *h = f->base + off;
    uint64_t len = sl_load_le64(h);
    uint32_t stored = sl_load_le32(h + 8), computed = sl_crc32c_mask(sl_crc32c(0, h, 8));
    if (stored != computed)
        return corrupt(f, i, off, HDR, "length CRC mismatch (stored 0x%08x, computed 0x%08x)", stored, computed);
    uint64_t room = end - off - FRAME;
    if (len > room || (ix->skipped == 0 && len != room)) {
        char ends[48];
        sl__tfr_u128_str(ends, sizeof ends, (unsigned __int128)off + FRAME + len);
        if (ix->skipped == 0)
            return corrupt(f, i, off, HDR, "record of %llu bytes ends at byte %s, the index says at byte %llu",
                           (unsigned long long)len, ends, (unsigned long long)end);
        return corrupt(f, i, off, HDR, "record of %llu bytes ends at byte %s, past byte %llu where %s",
                       (unsigned long long)len, ends, (unsigned long long)end,
                       i + 1 < ix->count ? "the index's next record begins" : "the file ends");
    }
    const uint8_t *d = h + HDR;
    if (f->verify) {
        stored = sl_load_le32(d + len);
        computed = sl_crc32c_mask(sl_crc32c(0, d, (size_t)len));
        if (stored != computed)
            return corrupt(f, i, off, FRAME + len, "data CRC mismatch (stored 0x%08x, computed 0x%08x)", stored,
                           computed);
    } else {
        (void)*(volatile const uint8_t *)(d + len + 3); /* fault now if it is gone */
    }
    sl_status s = lost(f, i, off, FRAME + len);
    if (s) return s;
    rec->data = d;
    rec->len = (size_t)len;
    rec->offset = off;
    rec->buf = f->buf;
    return SL_OK;
}
