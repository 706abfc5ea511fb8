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
 * empty on failure. */
sl_status sl_idx_read(const char *path, sl_tensor *out);
sl_status sl_idx_read_mem(const void *data, size_t size, const char *name, sl_tensor *out);

/* Write tensor t (a dtype listed above, rank 1..255) to path, gzipped if `gzip`. */
sl_status sl_idx_write(const char *path, const sl_tensor *t, bool gzip);

#ifdef __cplusplus
}
#endif
#endif
