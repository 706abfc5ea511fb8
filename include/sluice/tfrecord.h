/* TFRecord files: streaming reader and writer.
 *
 * Format (TensorFlow's): each record is
 *     uint64 length (little endian)
 *     uint32 masked_crc32c(length bytes)
 *     byte   data[length]
 *     uint32 masked_crc32c(data)
 * optionally inside a GZIP or ZLIB stream covering the whole file.
 *
 * Workload: files from kilobytes to many gigabytes read front to back, record sizes from
 * a few bytes (tf.Example with scalars) to megabytes (encoded images). Uncompressed files
 * are mmapped and records are handed out as zero-copy views; compressed files are inflated
 * through a growing buffer and records are views into it.
 *
 * Errors name the file, the byte offset of the record (in the uncompressed stream) and what
 * was wrong. In skip mode a corrupt record is counted and skipped: after a bad length CRC
 * the reader cannot trust the length, so it scans forward byte by byte for the next
 * position where a length and its CRC agree and the data CRC matches. */
#ifndef SLUICE_TFRECORD_H
#define SLUICE_TFRECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/status.h"
#include "sluice/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sl_compression {
    SL_COMP_AUTO = 0, /* reader: detect from the first bytes (gzip magic 1f 8b, zlib header); writer: none */
    SL_COMP_NONE = 1,
    SL_COMP_GZIP = 2,
    SL_COMP_ZLIB = 3,
} sl_compression;

/* "none", "gzip", "zlib", "auto"; and the inverse (returns SL_EINVAL on an unknown name). */
const char *sl_compression_name(sl_compression c);
sl_status sl_compression_parse(const char *name, sl_compression *out);

typedef struct sl_tfr_read_opts {
    sl_compression compression; /* default AUTO */
    bool skip_corrupt;          /* count and skip corrupt records instead of failing */
    bool verify_data_crc;       /* default true; false skips the data CRC (length CRC is always checked) */
} sl_tfr_read_opts;

/* Defaults: AUTO, fail on corruption, verify data CRCs. */
sl_tfr_read_opts sl_tfr_read_opts_default(void);

typedef struct sl_record {
    const uint8_t *data; /* the payload, valid while buf is referenced (or until the next read) */
    size_t len;
    uint64_t offset;     /* byte offset of the record's header in the (uncompressed) stream */
    sl_buf *buf;         /* owner of data; NOT referenced for the caller: sl_buf_ref it to keep data past the next read */
} sl_record;

typedef struct sl_tfr_stats {
    uint64_t records;          /* good records returned */
    uint64_t bytes;            /* payload bytes returned */
    uint64_t corrupt_skipped;  /* corrupt records skipped (skip mode) */
    uint64_t bytes_skipped;    /* stream bytes passed over while resynchronising */
} sl_tfr_stats;

typedef struct sl_tfr_reader sl_tfr_reader;

/* Open `path` for reading. opts may be NULL for defaults. On failure *out is NULL and the
 * status is SL_ENOTFOUND (no such file), SL_EIO, SL_ECORRUPT (bad compressed header) or
 * SL_ENOMEM, with a message naming the file. */
sl_status sl_tfr_reader_open(const char *path, const sl_tfr_read_opts *opts, sl_tfr_reader **out);

/* Read from memory (borrowed: it must outlive the reader). `name` labels error messages. */
sl_status sl_tfr_reader_open_mem(const void *data, size_t size, const char *name,
                                 const sl_tfr_read_opts *opts, sl_tfr_reader **out);

/* The next record into *rec. Returns SL_OK, SL_END after the last record, or an error:
 * SL_ECORRUPT (length CRC mismatch, data CRC mismatch, truncated record, bad compressed
 * stream) with "FILE: byte OFFSET: what" in sl_errmsg, or SL_EIO. After an error the reader
 * is finished: further calls return the same status again. In skip mode corrupt records
 * are skipped and counted and only SL_EIO or a corrupt compressed stream fail. A truncated
 * last record in skip mode is counted as one corrupt record and reading ends with SL_END. */
sl_status sl_tfr_reader_next(sl_tfr_reader *r, sl_record *rec);

/* Counters so far. */
sl_tfr_stats sl_tfr_reader_stats(const sl_tfr_reader *r);

/* The compression actually in use (AUTO resolved). */
sl_compression sl_tfr_reader_compression(const sl_tfr_reader *r);

/* Close and free. NULL is a no-op. Records already returned stay valid while their buf is
 * referenced. */
void sl_tfr_reader_close(sl_tfr_reader *r);

typedef struct sl_tfr_writer sl_tfr_writer;

typedef struct sl_tfr_write_opts {
    sl_compression compression; /* AUTO or NONE: plain */
    int level;                  /* zlib level 0..9, -1 default */
    bool fsync;                 /* fsync before close returns */
} sl_tfr_write_opts;

sl_tfr_write_opts sl_tfr_write_opts_default(void);

/* Create (truncate) `path`. On failure *out is NULL: SL_EIO with the OS reason. */
sl_status sl_tfr_writer_open(const char *path, const sl_tfr_write_opts *opts, sl_tfr_writer **out);

/* Append one record (data borrowed). SL_EIO on a write failure. */
sl_status sl_tfr_writer_write(sl_tfr_writer *w, const void *data, size_t len);

/* Flush, finish the compressed stream, optionally fsync, close, free. Returns the first
 * error seen by any write or by the close. NULL is a no-op returning SL_OK. */
sl_status sl_tfr_writer_close(sl_tfr_writer *w);

/* Frame one record into out (12 + len + 4 bytes, caller-allocated). Returns bytes written. */
size_t sl_tfr_frame(uint8_t *out, const void *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif
