/* safetensors files (Hugging Face's format): the trainer's checkpoints.
 *
 * Format:
 *     uint64 N (little endian)      length of the JSON header
 *     byte   header[N]              {"__metadata__": {"k": "v", ...},
 *                                    "name": {"dtype": "F32", "shape": [2, 3],
 *                                             "data_offsets": [begin, end]}, ...}
 *                                   padded with spaces so that 8 + N is a multiple of 8
 *     byte   data[]                 every tensor's bytes, row-major, little endian;
 *                                   offsets are relative to the start of data
 *
 * dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U32 U16 U8 BOOL, mapped to the sl_dtype of the
 * same width. Other dtypes that the format knows (U64, F8_*) are SL_EUNSUPPORTED; any
 * other name is SL_ECORRUPT.
 *
 * The reader is strict, as Hugging Face's is: the header must be a JSON object whose
 * values are tensor entries (dtype, shape, data_offsets and nothing else) or the string
 * map "__metadata__"; names are unique; each entry's byte count equals its shape times its
 * dtype size; sorted by begin, the entries tile the data section exactly, with no gap, no
 * overlap and no trailing byte. Every error names the file and the byte offset of what is
 * wrong (for header problems, the offset of the JSON token in the file).
 *
 * Checksums (Sluice's addition, inside the format: other readers see plain metadata strings).
 * A writer with sl_st_writer_set_checksums on records, in "__metadata__":
 *     "crc32c:NAME"  for every tensor NAME: the CRC32C (sluice/crc32c.h, unmasked) of its data
 *                    bytes, as 8 lowercase hex digits;
 *     "crc32c"       the CRC32C of the header's canonical form: every other metadata entry
 *                    (the tensor checksums included), sorted by key (bytewise), each as the
 *                    byte 'M', the key, NUL, the value, NUL; then every tensor, sorted by
 *                    name, as 'T', the name, NUL, the dtype name, NUL, the dims in decimal
 *                    joined by ',' (nothing for a scalar), NUL.
 * So any changed byte of a tensor's data, any changed metadata value or tensor entry is
 * caught by sl_st_verify, whatever order another writer puts the entries in. (Changes that
 * leave the JSON's meaning alone, such as its spacing, are not.) The keys "crc32c" and
 * "crc32c:..." are reserved: sl_st_writer_set_meta refuses them.
 *
 * Opening: sl_st_open goes through sl_file_open_read (sluice/file.h), so a FIFO, socket,
 * device or folder at the path is refused at once, naming what it is, and never blocks.
 *
 * Writes are crash-safe: the file is written to a temporary name beside the target
 * (TARGET.tmp.PID.N), fsynced, renamed over the target, and the directory fsynced, so a
 * process killed at any point leaves either the old complete file or the new complete
 * file at the target (and possibly a stale TARGET.tmp.* file, which readers never look
 * at). */
#ifndef SLUICE_SAFETENSORS_H
#define SLUICE_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/status.h"
#include "sluice/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest header accepted on read (Hugging Face's limit too): a bigger length field is
 * taken as corruption rather than allocating for it. */
#define SL_ST_MAX_HEADER ((uint64_t)100 << 20)

/* The format's dtype name ("F32", "BF16", "BOOL") of dt, or NULL for a dtype the format
 * cannot hold (SL_DT_BYTES, SL_DT_INVALID). */
const char *sl_st_dtype_name(sl_dtype dt);

/* ---- writer ----------------------------------------------------------------------- */

typedef struct sl_st_writer sl_st_writer;

/* A new, empty writer in *out. SL_ENOMEM on failure (*out NULL). */
sl_status sl_st_writer_new(sl_st_writer **out);

/* Add a tensor. name and dims are copied; `data` (numel * dtype size bytes, row-major,
 * host order = little endian) is BORROWED and must stay valid and unchanged until
 * sl_st_writer_write returns. data may be NULL only when the tensor has no elements.
 * Returns SL_OK; SL_EINVAL for an empty name, the reserved name "__metadata__", a name
 * already added, a dtype the format cannot hold, rank outside 0..SL_MAX_RANK or a negative
 * dim; SL_ERANGE when the byte count overflows; SL_ENOMEM. On failure the writer is
 * unchanged. */
sl_status sl_st_writer_add(sl_st_writer *w, const char *name, sl_dtype dt, int rank,
                           const int64_t *dims, const void *data);

/* sl_st_writer_add with t's dtype, shape and data (borrowed in the same way; no reference
 * is taken). */
sl_status sl_st_writer_add_tensor(sl_st_writer *w, const char *name, const sl_tensor *t);

/* Metadata keys of the checksums (see the top of this file). */
#define SL_ST_CRC_HEADER "crc32c"
#define SL_ST_CRC_PREFIX "crc32c:"

/* Record checksums of every tensor and of the header when writing (off by default, so a
 * writer makes plain Hugging Face files unless asked). */
void sl_st_writer_set_checksums(sl_st_writer *w, bool on);

/* Set metadata key -> value (both copied; a key set twice keeps the last value). Returns
 * SL_OK, SL_EINVAL for an empty key or a reserved checksum key ("crc32c", "crc32c:..."),
 * or SL_ENOMEM (the writer is then unchanged). */
sl_status sl_st_writer_set_meta(sl_st_writer *w, const char *key, const char *value);

/* Write everything added so far to `path`, crash-safe (see the top of this file): tensors
 * are laid out largest dtype first (then in the order added), so every tensor's data is
 * aligned to its element size in the file and in a mapping of it. The writer keeps its
 * contents and may write again. Returns SL_OK; SL_ENOTFOUND when the directory does not
 * exist; SL_EIO for any failed create, write, fsync or rename, with the OS reason and the
 * path. A failed write (a full disk or quota, a file-size limit) is "PATH: write failed at
 * byte N: REASON" naming the target, with a hint that says which (sluice/file.h's
 * sl_file_write_error). On failure the target is untouched (the old file, or none) and the
 * temporary file has been removed; the one exception is a failed fsync of the folder after
 * the rename (SL_EIO, "fsync of the folder"): the new file is then in place but might not
 * survive a power cut. A file-size limit (ulimit -f) kills a process that leaves SIGXFSZ at
 * its default action in the middle of the write, leaving PATH.tmp.* behind (what
 * sl_st_remove_stale is for); with SIGXFSZ ignored it is an SL_EIO like a full disk. */
sl_status sl_st_writer_write(const sl_st_writer *w, const char *path);

/* Free the writer. NULL is a no-op. */
void sl_st_writer_free(sl_st_writer *w);

/* Remove the temporary files (PATH.tmp.*) that writers of `path` killed mid-write left
 * behind; for a trainer starting or resuming, when no other process writes `path`. Returns
 * the number removed (>= 0), or SL_EIO / SL_ENOTFOUND when the folder cannot be listed. */
int sl_st_remove_stale(const char *path);

/* ---- reader ----------------------------------------------------------------------- */

typedef struct sl_st_file sl_st_file;

/* Map `path` and validate its header (and every offset) in *out. On failure *out is NULL
 * and the status is SL_ENOTFOUND, SL_EIO (an OS error, or the path is not a regular file:
 * "safetensors file 'PATH': is a FIFO (named pipe), not a regular file"), SL_ECORRUPT
 * ("PATH: byte OFFSET: what"),
 * SL_EUNSUPPORTED (a dtype of the format that sl_dtype lacks, or rank > SL_MAX_RANK) or
 * SL_ENOMEM. */
sl_status sl_st_open(const char *path, sl_st_file **out);

/* The same over memory: `data` is BORROWED and must outlive the file and every tensor
 * taken from it. `name` labels messages (NULL: "<memory>"). */
sl_status sl_st_open_mem(const void *data, size_t size, const char *name, sl_st_file **out);

/* Tensors in the file, and the i-th one's name (0 <= i < count; in header order). */
int sl_st_count(const sl_st_file *f);
const char *sl_st_name(const sl_st_file *f, int i);

/* The tensor called `name` into *out (which must hold no references): a zero-copy view
 * whose sl_buf owns the mapping, so it stays valid after sl_st_close. (A tensor whose
 * data is not aligned to its element size in the file, which only other writers make, is
 * copied into an aligned buffer instead.) Returns SL_OK, SL_ENOTFOUND (no such tensor;
 * the message names the file) or SL_ENOMEM; *out is left empty on failure. */
sl_status sl_st_get(const sl_st_file *f, const char *name, sl_tensor *out);

/* The metadata value of `key`, or NULL when absent. Valid until sl_st_close. */
const char *sl_st_meta(const sl_st_file *f, const char *key);

/* Metadata entries (in header order) and the i-th key and value. */
int sl_st_meta_count(const sl_st_file *f);
const char *sl_st_meta_key(const sl_st_file *f, int i);
const char *sl_st_meta_value(const sl_st_file *f, int i);

/* Check the file's checksums (see the top of this file), reading every tensor's bytes once.
 * *present (may be NULL) says whether the file records any. Returns SL_OK when it records
 * none (*present false) or when every one matches; SL_ECORRUPT when one does not, naming
 * the file and the byte offset (the tensor's data, or the metadata key), and the CRC32Cs
 * computed and recorded; also for a malformed checksum value, a tensor without a checksum,
 * a checksum of a tensor the file lacks, or tensor checksums without the header's. SL_ENOMEM. */
sl_status sl_st_verify(const sl_st_file *f, bool *present);

/* SL_OK while the bytes of f are the file's; SL_EIO ("PATH: shrank from N to M bytes while
 * being read") once the file shrank under its mapping (another process truncated it), after
 * which the bytes past the new end read as zeros instead of raising SIGBUS. sl_st_verify
 * checks it too (a shrink is reported instead of the checksum mismatch it causes); a reader
 * that copies tensors out of f calls it after copying, so zeros are never taken as data. */
sl_status sl_st_intact(const sl_st_file *f);

/* Close the file. Tensors taken with sl_st_get stay valid (they hold the mapping). NULL
 * is a no-op. */
void sl_st_close(sl_st_file *f);

#ifdef __cplusplus
}
#endif
#endif
