/* Private to pipeline/: elements as bytes, and the snapshot folder format that snapshot,
 * save and load share (pipeline/snapfile.c, pipeline/snapfile_io.c).
 *
 * Element payload (little-endian hosts; used by cache files and snapshot chunks):
 *   u32 components, u32 0, then per component: u8 dtype, u8 rank, u16 name length, u32 0,
 *   name (padded to 8), i64 dims[rank], u64 n, then numbers: n data bytes (padded to 8);
 *   bytes: n u64 lengths, the strings one after another (padded to 8).
 *
 * A snapshot folder (DIR) holds:
 *   shard-NNNNN.sls  header: "SLSNAP\0\0", u32 version (1), u32 header size (32),
 *                    u32 shard index, u32 0, u64 the fingerprint's hash, u64 0;
 *                    then chunks, one per element: u32 "SLSC", u32 crc32c of the payload,
 *                    u64 payload size, u32 crc32c of the chunk header's first 16 bytes,
 *                    u32 0, the payload (above), zero padding to 8.
 *   done             the manifest, written last (to done.tmp, fsynced, renamed): "SLSNAPD\0",
 *                    u32 version (1), u32 manifest size, u64 elements, u32 shards,
 *                    u32 components, u32 fingerprint length, u32 0, the fingerprint text
 *                    (padded to 8), per shard u64 elements + u64 bytes (the file's exact
 *                    size), the element spec (per component: u8 dtype, u8 rank, u16 name
 *                    length, u32 0, name padded to 8, i64 dims[rank], -1 where elements
 *                    differ), then u32 crc32c of everything before it, u32 0.
 * A writer fills DIR.tmp.PID.N and renames the whole folder to DIR at the end, so DIR is
 * complete or absent, and two writers never share a file. */
#ifndef SLUICE_PIPELINE_SNAPFILE_H
#define SLUICE_PIPELINE_SNAPFILE_H

#include "pipeline/internal.h"

/* ---- element codec (pipeline/snapfile.c) ---- */

/* Serialize e into *buf (grown as needed, *cap its size); returns the payload size, 0 when
 * memory runs out (*buf is then as it was). */
size_t sl__elem_encode(const sl_element *e, uint8_t **buf, size_t *cap);

/* Decode the payload p[0, size) into *out (empty on entry): numbers are views of `backing`
 * (which holds p), bytes views into it. SL_OK; SL_ENOMEM; or SL_ECORRUPT with *bad_at (the
 * offset in the payload of the bad component) and *why (a static phrase), no error
 * message set. *out is empty on failure. */
sl_status sl__elem_decode(sl_buf *backing, const uint8_t *p, uint64_t size, sl_element *out, uint64_t *bad_at,
                          const char **why);

/* ---- snapshot folders (pipeline/snapfile_io.c) ---- */

#define SL__SNAP_MANIFEST "done"

typedef struct sl__snap_spec {
    sl_dtype dtype;
    int rank;
    int64_t dims[SL_MAX_RANK]; /* -1: differs between elements */
    char name[SL_NAME_MAX];
} sl__snap_spec;

typedef struct sl__snap_manifest {
    char *fingerprint;     /* what the writer was told the data is (text) */
    int64_t elements;
    int nshards;
    int64_t *shard_elems;
    uint64_t *shard_bytes;
    int ncomp;             /* 0 when there are no elements */
    sl__snap_spec spec[SL_ELEM_MAX];
} sl__snap_manifest;

/* Parse a manifest image; `name` labels errors. SL_OK with *out, or SL_ECORRUPT naming
 * name and the byte offset (sl_err_at), or SL_ENOMEM; *out NULL on failure. */
sl_status sl__snap_manifest_parse(const uint8_t *p, size_t n, const char *name, sl__snap_manifest **out);
/* Read DIR/done. SL_ENOTFOUND (no error message) when there is none; else as parse, or
 * SL_EIO. */
sl_status sl__snap_manifest_read(const char *dir, sl__snap_manifest **out);
void sl__snap_manifest_free(sl__snap_manifest *m); /* NULL is a no-op */

typedef struct sl__snap_reader sl__snap_reader;
/* Check that every shard of m is in dir with its size and a sound header (SL_ECORRUPT
 * naming the shard and offset: missing, truncated, wrong header), then read from the first.
 * m is borrowed and must outlive the reader. */
sl_status sl__snap_reader_open(const char *dir, const sl__snap_manifest *m, sl__snap_reader **out);
/* The next element (SL_OK), SL_END after the last one, or SL_ECORRUPT / SL_EIO naming the
 * shard file and the chunk's byte offset (the reader is then at its end). */
sl_status sl__snap_reader_next(sl__snap_reader *r, sl_element *out);
void sl__snap_reader_close(sl__snap_reader *r); /* NULL is a no-op */

typedef struct sl__snap_writer sl__snap_writer;
/* Start writing the folder `dir`: creates dir's parent folders, and writes into
 * dir.tmp.PID.N (the previous temporaries of processes no longer running are removed).
 * shard_bytes: a new shard starts when one reaches it. On failure (SL_EIO naming the
 * folder) *out is NULL and nothing is left. */
sl_status sl__snap_writer_open(const char *dir, const char *fingerprint, int64_t shard_bytes,
                               sl__snap_writer **out);
sl_status sl__snap_writer_add(sl__snap_writer *w, const sl_element *e);
/* Sync the shards, write the manifest, sync, and rename the folder to dir. When dir exists:
 * with replace, the old one is moved aside and removed after (only a snapshot folder: one
 * holding our files only); without, the one already there is kept (another writer finished
 * first) and ours removed: *kept_other = true. Frees w whatever happens. */
sl_status sl__snap_writer_commit(sl__snap_writer *w, bool replace, bool *kept_other);
/* Remove the temporary folder and free w. NULL is a no-op. */
void sl__snap_writer_abort(sl__snap_writer *w);

/* Remove the snapshot folder dir (our files only; the folder is moved aside first, so a
 * reader of it keeps its open files). SL_OK or SL_EIO. */
sl_status sl__snap_remove(const char *dir);

#endif
