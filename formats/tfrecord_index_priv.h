/* Private to formats/: what the record index (formats/tfrecord_index.c: the format, the
 * scan, the cache) shares with random access (formats/tfrecord_index_file.c). The calls go
 * one way: tfrecord_index_file.c -> tfrecord_index.c. */
#ifndef SLUICE_FORMATS_TFRECORD_INDEX_PRIV_H
#define SLUICE_FORMATS_TFRECORD_INDEX_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/tensor.h"
#include "sluice/tfrecord_index.h"

struct sl_tfr_index {
    int64_t count;    /* records */
    uint64_t size;    /* the indexed file's size */
    uint64_t skipped; /* corrupt records skipped while building; 0: each record ends where the next begins */
    bool built;       /* made by a scan, not read from a cache */
    bool cached;      /* found valid in the cache, or written to it */
    uint64_t *off;    /* count header offsets, strictly increasing */
};

/* Map the first `size` bytes of the open regular file fd (borrowed) read-only, guarded
 * against the file shrinking (sl_buf_wrap_file_mapping): *buf, or NULL for size 0. SL_OK;
 * SL_EIO ("PATH: cannot map N bytes: REASON"); SL_ENOMEM. */
sl_status sl__tfr_map(const char *path, int fd, uint64_t size, sl_buf **buf);

/* SL_OK when the first bytes p[0, n) of the file at path are plain TFRecord as the reader's
 * AUTO detection sees them; SL_EUNSUPPORTED "PATH: is GZIP-compressed: ..." (or ZLIB), with
 * a hint, when they are a compressed stream's. */
sl_status sl__tfr_check_plain(const char *path, const uint8_t *p, size_t n);

/* The index of the open file fd at path whose identity is *id, as sl_tfr_index_open gets
 * it: from the cache when valid for *o, else built from map[0, id->size) (map NULL: fd is
 * mapped here and checked to be plain; guard: the sl_buf owning map, for shrink checks) and
 * written to the cache. Results as sl_tfr_index_open; *out NULL on failure. */
sl_status sl__tfr_index_get(const char *path, int fd, const sl_tfr_file_id *id, const uint8_t *map,
                            const sl_buf *guard, const sl_tfr_index_opts *o, sl_tfr_index **out);

/* Set SL_EIO "PATH: shrank from SIZE to M bytes while being WHAT (at WHERE)" with a hint,
 * M found by stat(2) of path when it is still the file of inode `inode`, else "fewer".
 * Returns SL_EIO. */
sl_status sl__tfr_shrink_err(const char *path, uint64_t inode, uint64_t size, const char *what,
                             const char *where);

/* "36893488147419103292": the decimal of v (which may pass 2^64) in buf (cap bytes);
 * returns buf. */
const char *sl__tfr_u128_str(char *buf, size_t cap, unsigned __int128 v);

#endif
