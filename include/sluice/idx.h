/* idx files, the format of MNIST and Fashion-MNIST: big-endian magic 00 00 TYPE RANK, RANK
 * big-endian uint32 dimensions, then the values in big-endian, row-major. Read gzipped or
 * plain (detected from the gzip magic); written plain or gzipped. */
#ifndef SLUICE_IDX_H
#define SLUICE_IDX_H

#include <stdbool.h>
#include <stddef.h>

#include "sluice/status.h"
#include "sluice/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Read a whole idx file into *out (a fresh tensor in host byte order: 0x08 -> uint8,
 * 0x09 -> int8, 0x0B -> int16, 0x0C -> int32, 0x0D -> float32, 0x0E -> float64).
 * Errors: SL_ENOTFOUND, SL_EIO, SL_ECORRUPT (bad magic, type, rank, or a size that does not
 * match the dimensions: the message names the file and the byte offset). *out is left
 * empty on failure.
 * Details: the size must match exactly (trailing bytes are SL_ECORRUPT too); rank 0 is
 * SL_ECORRUPT, ranks 9..255 are valid idx but SL_EUNSUPPORTED (tensors have SL_MAX_RANK
 * dims); in gzipped files offsets count decompressed bytes (the message says so), and a
 * damaged or truncated gzip stream is SL_ECORRUPT with the compressed offset. Concatenated
 * gzip members are read as one stream. A FIFO, socket, device or directory is refused at
 * once with SL_EINVAL naming the path (include/sluice/file.h). */
sl_status sl_idx_read(const char *path, sl_tensor *out);
/* The same from memory (borrowed; copied into the tensor). `name` is used in messages
 * (NULL: "<memory>"). */
sl_status sl_idx_read_mem(const void *data, size_t size, const char *name, sl_tensor *out);

/* Write tensor t (a dtype listed above, rank 1..255) to path, gzipped if `gzip`.
 * (Rank is at most SL_MAX_RANK in practice; every dim must fit in uint32.) The file is
 * written as PATH.tmp.PID.N, synced and renamed to path. Returns SL_OK, SL_EINVAL (other
 * dtype, rank, dims; or path is an existing FIFO, socket, device or directory),
 * SL_ENOTFOUND (the directory does not exist) or SL_EIO: a failed write (a full disk or
 * quota, a file-size limit) is "PATH: write failed at byte N: REASON" with a hint
 * (sluice/file.h). On failure the temporary file is removed and a file that was at path
 * is left as it was. */
sl_status sl_idx_write(const char *path, const sl_tensor *t, bool gzip);

#ifdef __cplusplus
}
#endif
#endif
