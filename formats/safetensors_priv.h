/* Private to formats/safetensors*.c: what the reader (safetensors.c) and the writer
 * (safetensors_write.c) share. The writer calls into the reader's file, never the other
 * way. */
#ifndef SLUICE_FORMATS_SAFETENSORS_PRIV_H
#define SLUICE_FORMATS_SAFETENSORS_PRIV_H

#include <stdbool.h>
#include <stdint.h>

#include "sluice/tensor.h"

/* A metadata entry and a tensor's description, as the header checksum sees them. */
typedef struct kv {
    const char *k, *v;
} kv;

typedef struct tdesc {
    const char *name;
    sl_dtype dt;
    int rank;
    const int64_t *dims;
} tdesc;

/* numel * size of a shape into *out; false (out untouched) on overflow past INT64_MAX. */
bool sl__st_shape_nbytes(sl_dtype dt, int rank, const int64_t *dims, uint64_t *out);

/* Whether a metadata key is one of the checksum keys (SL_ST_CRC_HEADER, SL_ST_CRC_PREFIX...). */
bool sl__st_is_crc_key(const char *k);

/* CRC32C of the header's canonical form: every metadata entry but SL_ST_CRC_HEADER, sorted
 * by key, as 'M' key NUL value NUL; then every tensor, sorted by name, as 'T' name NUL dtype
 * NUL dims (decimal, ',' between) NUL. Sorts m and t in place. */
uint32_t sl__st_header_crc(kv *m, int nm, tdesc *t, int nt);

#endif
