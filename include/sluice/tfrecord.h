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
 * the reader cannot trust the length, so it looks for the next position where a length
 * and its CRC agree, the record fits, and its data CRC matches; that search costs time
 * linear in the bytes it passes over (each is CRC'd once, however many false headers claim
 * long records: stats.resync_bytes_crc counts them).
 *
 * What is only opened: regular files. A FIFO, socket, device or directory given as a path
 * is refused at once (SL_EINVAL, naming the path); to read a pipe, hand its descriptor to
 * sl_tfr_reader_open_fd.
 *
 * Bad input and what happens:
 *   - A file that shrinks while mapped (a shard replaced in place): reading on would raise
 *     SIGBUS; the mapping is guarded (sl_buf_wrap_mapping, tensor.h) so the process lives
 *     and the reader fails with SL_EIO "FILE: shrank from N to M bytes while being read (at
 *     record byte OFFSET)". A record is checked after its CRC pass, before it is returned;
 *     records returned earlier are views into the mapping and read as zeros where the file
 *     is gone: sl_buf_lost(rec.buf, rec.data, rec.len) tells which (the mapping keeps a
 *     duplicate of the file's descriptor to compare its size), and a pipeline checks every
 *     element viewing the mapping when it hands it out (sl_iter_next) and when it copies it
 *     into a batch (sl_element_check: SL_EIO naming the file and the record's offset). With
 *     verify_data_crc off only the record's last byte is touched, so a shrink inside the
 *     last page of the file can go unseen by the reader; those checks still see it. A file
 *     that grows is read as it was when opened.
 *   - Resource limits (streamed input: compressed, or read through a descriptor): a record
 *     may declare a length up to max_record (default SL_TFR_MAX_RECORD_DEFAULT, 256 MiB);
 *     a longer one fails with SL_ERANGE naming the file and the record's offset, in both
 *     modes, before any of it is inflated. The window of inflated bytes held for one record
 *     (or for a resync) is therefore at most about twice max_record. 256 MiB is 100 times
 *     the largest records seen in practice (encoded images, audio clips: a few MiB) and
 *     small enough that a few readers in parallel fit in a worker's memory; protobuf's own
 *     hard limit on one message is 2 GiB. Uncompressed regular files are mapped and need no
 *     memory per record, so there a record is limited only by the file's size.
 *   - A damaged compressed stream: the records inflated before the damage are returned
 *     (each as soon as it is complete and verified). Fail mode: then the stream's error
 *     (SL_ECORRUPT, "FILE: byte N (compressed): bad gzip stream: ..."). Skip mode: the
 *     damage is counted (stats.stream_damage), the reader looks for the start of another
 *     gzip member after it and goes on there (a record cut by the damage is one corrupt
 *     record), or, when there is none (ZLIB, or a one-member GZIP file as TensorFlow
 *     writes), the rest of the input is passed over and counted in
 *     stats.compressed_bytes_lost, and reading ends with SL_END. */
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
    uint64_t max_record;        /* streamed input: longest record accepted, bytes; 0 = the default */
} sl_tfr_read_opts;

#define SL_TFR_MAX_RECORD_DEFAULT ((uint64_t)256 << 20)

/* Defaults: AUTO, fail on corruption, verify data CRCs, max_record 256 MiB. */
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
    uint64_t stream_damage;    /* damaged places in a compressed stream (skip mode) */
    uint64_t compressed_bytes_lost; /* compressed bytes passed over after such damage */
    uint64_t resync_bytes_crc; /* bytes CRC'd while looking for records after damage (<= the stream) */
} sl_tfr_stats;

typedef struct sl_tfr_reader sl_tfr_reader;

/* Open `path` (a regular file) for reading. opts may be NULL for defaults. On failure *out
 * is NULL and the status is SL_ENOTFOUND (no such file), SL_EINVAL (a FIFO, socket, device
 * or directory: refused without blocking), SL_EIO (the OS failed, or the file shrank before
 * it was looked at), SL_ECORRUPT (bad compressed header) or SL_ENOMEM, with a message
 * naming the file. */
sl_status sl_tfr_reader_open(const char *path, const sl_tfr_read_opts *opts, sl_tfr_reader **out);

/* Read from an open descriptor (a pipe, standard input): borrowed, the caller closes it
 * after sl_tfr_reader_close. Always streamed (read(2) in chunks), so max_record applies.
 * `name` labels messages. Same results as sl_tfr_reader_open. */
sl_status sl_tfr_reader_open_fd(int fd, const char *name, const sl_tfr_read_opts *opts,
                                sl_tfr_reader **out);

/* Read from memory (borrowed: it must outlive the reader). `name` labels error messages. */
sl_status sl_tfr_reader_open_mem(const void *data, size_t size, const char *name,
                                 const sl_tfr_read_opts *opts, sl_tfr_reader **out);

/* The next record into *rec. Returns SL_OK, SL_END after the last record, or an error:
 * SL_ECORRUPT (length CRC mismatch, data CRC mismatch, truncated record, bad compressed
 * stream: after the records before the damage) with "FILE: byte OFFSET: what" in
 * sl_errmsg; SL_ERANGE (a record longer than max_record in streamed input); SL_EIO (a read
 * failed, or the file shrank while mapped); SL_ENOMEM. After an error the reader is
 * finished: further calls return the same status again. In skip mode corrupt records and
 * damage in a compressed stream are skipped and counted; only SL_EIO, SL_ERANGE and
 * SL_ENOMEM fail. A truncated last record in skip mode is counted as one corrupt record and
 * reading ends with SL_END. */
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

/* Create (truncate) `path`, a regular file (an existing FIFO, socket, device or directory is
 * refused with SL_EINVAL). On failure *out is NULL: SL_ENOTFOUND (no such directory),
 * SL_EINVAL, or SL_EIO with the OS reason. */
sl_status sl_tfr_writer_open(const char *path, const sl_tfr_write_opts *opts, sl_tfr_writer **out);

/* Append one record (data borrowed). Records are buffered (256 KiB; a larger one is written
 * at once), so a failed write shows here or at the close: SL_EIO "PATH: write failed at byte
 * N: REASON" (sluice/file.h's sl_file_write_error: N is how far the file got, the hint says
 * whether the disk or quota is full or a file-size limit was reached), and every later call
 * returns that error again. The file then holds the N bytes written (its last record cut
 * short); the writer does not remove it: write to a temporary name and remove that on
 * failure, as sluice-record does. A file-size limit (ulimit -f) kills a process that leaves
 * SIGXFSZ at its default action before the write can fail (sluice/file.h). */
sl_status sl_tfr_writer_write(sl_tfr_writer *w, const void *data, size_t len);

/* Flush, finish the compressed stream, optionally fsync, close, free. Returns the first
 * error seen by any write (as above) or by the close. NULL is a no-op returning SL_OK. */
sl_status sl_tfr_writer_close(sl_tfr_writer *w);

/* Frame one record into out (12 + len + 4 bytes, caller-allocated). Returns bytes written. */
size_t sl_tfr_frame(uint8_t *out, const void *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif
