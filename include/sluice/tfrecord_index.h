/* Record indexes for uncompressed TFRecord files, and random access by record number.
 *
 * An index holds the byte offset of every record of one file, so record i can be read
 * without reading the i records before it (a global shuffle over a data set, reading one
 * shard's records in any order). It is made by scanning the file's framing once and kept
 * on disk (a cache) so later opens skip the scan, for as long as the file is unchanged.
 *
 * Workload: shards from kilobytes to many gigabytes, records from a few bytes to megabytes,
 * thousands of shards opened by one job. Building touches only each record's 12-byte header
 * (the file is mapped; the length's CRC is checked, the data's is not): from the page cache
 * about 10 GB/s for records of 800 bytes and 30 GB/s for records of 100 KB, on one core. A
 * cached index (8 bytes per record) is read whole and checked field by field. The index in
 * memory is 8 bytes per record.
 *
 * When a cached index is used: only when it is valid for the file as it is now. The index
 * file records the file's identity: its size, its modification time in nanoseconds, its
 * inode number and a CRC32C of its first and of its last 4 KiB (the whole file when it is
 * shorter; the two overlap below 8 KiB). Any difference means the file changed (appended
 * to, rewritten, replaced by a rename, touched) and the index is rebuilt. What this cannot
 * see: an edit of the same size, outside the first and last 4 KiB, with the modification
 * time set back (or landing within the file system's timestamp granularity of the index
 * being made). Such an edit is caught when the record is read, by its data CRC
 * (sl_tfr_file_read: SL_ECORRUPT), or, if it hits a header, by the length CRC or the
 * index's offsets, never handed out as a record.
 *
 * Where the index lives (sl_tfr_index_opts.cache_dir):
 *   NULL  beside the file, as PATH.slidx (PATH as given);
 *   ""    nowhere: built in memory on every open, never read from or written to disk;
 *   DIR   DIR/BASENAME.HHHHHHHHHHHHHHHH.slidx, where BASENAME is the last part of the file's
 *         absolute path with symbolic links resolved (realpath(3)), cut to its first 180
 *         bytes, and the 16 lowercase hex digits are the FNV-1a 64-bit hash of that absolute
 *         path, so files of one name in different folders do not collide. DIR is created
 *         (mkdir -p) when missing.
 * sl_tfr_index_cache_path says where, for tools and tests.
 *
 * Index file format (version 1), little-endian, 68 + 8 * count bytes:
 *     byte  0  char[8]  magic "SLTFRIDX"
 *     byte  8  uint32   version, 1
 *     byte 12  uint32   header size, 64 (the byte where the offsets start)
 *     byte 16  uint64   the file's size in bytes
 *     byte 24  uint64   the file's modification time, nanoseconds since the epoch
 *     byte 32  uint64   the file's inode number
 *     byte 40  uint32   CRC32C of the file's first 4 KiB (plain, not TFRecord's masked form)
 *     byte 44  uint32   CRC32C of the file's last 4 KiB (plain)
 *     byte 48  uint64   count: records in the index
 *     byte 56  uint64   corrupt records skipped while building (0 unless skip_corrupt)
 *     byte 64  uint64[count]  the byte offset of each record's header, in file order
 *     then     uint32   CRC32C (plain) of every byte before it
 * A parse accepts exactly this: the magic, version 1, header size 64, a length of exactly
 * 68 + 8 * count, the checksum, offsets strictly increasing and at least 16 bytes apart
 * (the smallest record), each with its 16 bytes of framing inside the file's size, skipped
 * no larger than the file's size, and when skipped is 0 (the index of a file whose framing
 * is whole) a first offset of 0 and at least one record for a non-empty file. A flipped
 * byte anywhere (the checksum catches every error of up to 32 bits), a cut or an extended
 * file is SL_ECORRUPT.
 *
 * Writing: the index is written to DIR/NAME.tmp.PID.N beside its final name and renamed
 * over it, so a reader sees the old index, the new one or none, never half of one. It is
 * not fsynced: an index lost or cut by a crash is found invalid and rebuilt. Two processes
 * indexing one file at once both write, the last rename wins, and either index is right.
 *
 * Bad input and what happens:
 *   - a stale, truncated, damaged or foreign cached index is never used: it is rebuilt and
 *     rewritten, with one SL_WARN line "INDEX: REASON; rebuilding it", REASON being e.g.
 *     "stale: the file's size changed (indexed at 1016 bytes, now 1048)" or "byte 812:
 *     damaged: checksum mismatch (stored 0x..., computed 0x...)";
 *   - a cached index larger than any index of the file can be (68 bytes and 8 for every 16
 *     of the file) is not read: it is rebuilt, with the warning "record index 'INDEX': is N
 *     bytes, more than the limit of M; rebuilding it";
 *   - a cache that cannot be written (a read-only folder, a full disk, a path through a
 *     regular file) or read (a folder in the index's place) is one SL_WARN line naming the
 *     index file and the reason; the index is still returned, kept in memory only;
 *   - a compressed (GZIP or ZLIB) file has no random access: SL_EUNSUPPORTED with a hint;
 *   - bad framing: SL_ECORRUPT "FILE: byte OFFSET: ..." as sl_tfr_reader_next says it, or
 *     with skip_corrupt the file is indexed around the damage (see sl_tfr_index_opts);
 *   - a file that shrinks while it is scanned or read: SL_EIO, never SIGBUS (the mapping is
 *     guarded, sluice/tensor.h's sl_buf_wrap_file_mapping). A file that changes while it is
 *     scanned gets an index with the identity from before the scan, so the next open finds
 *     it stale.
 *
 * Threads: an sl_tfr_index and an sl_tfr_file are immutable once made; any number of
 * threads may read them at once. */
#ifndef SLUICE_TFRECORD_INDEX_H
#define SLUICE_TFRECORD_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/status.h"
#include "sluice/tfrecord.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The offsets of every record of one file; immutable once made. */
typedef struct sl_tfr_index sl_tfr_index;

typedef struct sl_tfr_index_opts {
    const char *cache_dir; /* NULL: beside the file as PATH.slidx; "": in memory only; else
                              DIR/<basename>.<16 hex digits>.slidx (see the top of this file) */
    bool rebuild;          /* do not trust a cached index: scan the file and rewrite it */
    bool skip_corrupt;     /* a corrupt record while building: skip it instead of failing */
} sl_tfr_index_opts;

/* {NULL, false, false}. */
sl_tfr_index_opts sl_tfr_index_opts_default(void);

/* The index of the uncompressed TFRecord file at path (opts NULL: the defaults). Uses the
 * cached index when it is valid for the file as it is now (see the top of this file); else
 * builds one and writes it to the cache (unless cache_dir is ""). Building scans the record
 * framing: each length and its CRC, and that the record fits in the file; data CRCs are
 * checked when records are read (sl_tfr_file_read).
 *
 * skip_corrupt: a file whose framing is whole is indexed by its framing, as without it. A
 * file with bad framing anywhere is indexed as sl_tfr_reader_next reads it in skip mode
 * (sluice/tfrecord.h): the records it returns, in order, so a record with a bad data CRC
 * is then left out as well; sl_tfr_index_skipped counts what was skipped. Such an index is
 * cached, and used again only by opens that skip_corrupt too: an open without it rebuilds,
 * which fails with the damage (and leaves the cached index alone).
 *
 * Returns SL_OK with *out the index; or, with *out NULL: SL_ENOTFOUND (no such file);
 * SL_EINVAL (not a regular file: a folder, FIFO, socket or device, refused without
 * blocking); SL_EUNSUPPORTED ("FILE: is GZIP-compressed: ..." or ZLIB, with a hint: no
 * random access into a compressed stream); SL_ECORRUPT (bad framing without skip_corrupt:
 * "FILE: byte OFFSET: corrupt record: length CRC mismatch ..." or "... truncated record
 * ..."); SL_EIO (the OS failed a read, or the file shrank while it was scanned); SL_ENOMEM.
 * A cache that cannot be read or written is a warning, not an error (see the top). */
sl_status sl_tfr_index_open(const char *path, const sl_tfr_index_opts *opts, sl_tfr_index **out);

/* Records in the index (>= 0). */
int64_t sl_tfr_index_count(const sl_tfr_index *ix);

/* The byte offset of record i's header, for i in [0, count); UINT64_MAX for any other i. */
uint64_t sl_tfr_index_offset(const sl_tfr_index *ix, int64_t i);

/* True when the index was built (or rebuilt) by the call that made it (sl_tfr_index_open,
 * sl_tfr_file_open, sl_tfr_index_build_mem); false when it was read from a cache
 * (sl_tfr_index_parse). */
bool sl_tfr_index_built(const sl_tfr_index *ix);

/* True when the index is in its cache as it is: sl_tfr_index_open or sl_tfr_file_open found
 * it valid there or wrote it there. False when it is kept in memory only (cache_dir "", or
 * a cache that could not be read or written: a warning said why), and for
 * sl_tfr_index_build_mem and sl_tfr_index_parse. */
bool sl_tfr_index_cached(const sl_tfr_index *ix);

/* Corrupt records skipped while building (skip_corrupt), as recorded in the index: 0 for a
 * file whose framing is whole. */
uint64_t sl_tfr_index_skipped(const sl_tfr_index *ix);

/* Free. NULL is a no-op. */
void sl_tfr_index_free(sl_tfr_index *ix);

/* Where sl_tfr_index_open keeps the index of the file at path for cache_dir (NULL, or a
 * folder; see the top of this file), as a NUL-terminated path in out (cap bytes). SL_OK;
 * SL_EINVAL when cache_dir is "" (no file) or the path does not fit in cap; for a folder,
 * SL_ENOTFOUND or SL_EIO when the file's absolute path cannot be found (realpath). */
sl_status sl_tfr_index_cache_path(const char *path, const char *cache_dir, char *out, size_t cap);

/* ---- the serialized form (what the cache file holds), for tests, fuzzing and tools ---- */

/* What identifies a file's contents for its index (see the top of this file). */
typedef struct sl_tfr_file_id {
    uint64_t size, mtime_ns, inode;
    uint32_t crc_head, crc_tail; /* plain CRC32C of the first and the last 4 KiB */
} sl_tfr_file_id;

/* The identity of the open regular file fd (borrowed; its file offset is not moved: the
 * bytes are read with pread). name labels messages. SL_OK; SL_EIO when fstat or a read
 * fails or the file is shorter than fstat said (it shrank), naming the file; *id is then
 * zeroed. */
sl_status sl_tfr_file_identity(int fd, const char *name, sl_tfr_file_id *id);

/* Build the index of the uncompressed TFRecord stream data[0, size) (borrowed, read only
 * during the call), as sl_tfr_index_open builds it (skip_corrupt likewise). name labels
 * messages. SL_OK; SL_ECORRUPT ("NAME: byte OFFSET: ..."); SL_ENOMEM. *out NULL on
 * failure. No compression is detected here: compressed bytes are bad framing. */
sl_status sl_tfr_index_build_mem(const void *data, size_t size, const char *name,
                                 bool skip_corrupt, sl_tfr_index **out);

/* The index file's bytes (the format above) for ix with the identity id (NULL: an identity
 * of the file's size alone, the rest 0): *out is malloc'd (the caller frees it) and *len
 * its length, 68 + 8 * count. SL_OK; SL_EINVAL when id->size is not the size of the file
 * ix indexes (the index would not parse); SL_ENOMEM. *out NULL and *len 0 on failure. */
sl_status sl_tfr_index_serialize(const sl_tfr_index *ix, const sl_tfr_file_id *id, uint8_t **out,
                                 size_t *len);

/* Parse an index file's bytes data[0, len) (borrowed; the index copies what it needs).
 * name labels messages. With want (not NULL), the identity in the index must equal *want.
 * SL_OK with *out the index (sl_tfr_index_built false). SL_ECORRUPT, *out NULL, for
 * anything that is not exactly a valid index, with the byte offset and what is wrong:
 * "NAME: byte 0: not a Sluice record index (no SLTFRIDX magic)", "NAME: truncated: N
 * bytes, ...", "NAME: byte 8: version V, this build reads version 1", "NAME: byte 48: N
 * records need an index of X bytes, this one has L", "NAME: byte L-4: damaged: checksum
 * mismatch (stored 0x..., computed 0x...)", "NAME: byte B: damaged: record I's offset ...";
 * and for a valid index of a different identity, "NAME: stale: the file's size changed
 * (indexed at N bytes, now M)" (or its modification time, inode, first 4 KiB, last 4 KiB:
 * the first field that differs, in that order; the checksum is checked first, so a damaged
 * index is never called stale). SL_ENOMEM. */
sl_status sl_tfr_index_parse(const void *data, size_t len, const char *name,
                             const sl_tfr_file_id *want, sl_tfr_index **out);

/* ---- random access ---- */

/* An uncompressed TFRecord file, mapped, with its index. */
typedef struct sl_tfr_file sl_tfr_file;

/* Open the file at path for random access: map it and get its index as sl_tfr_index_open
 * does (iopts: the index options, NULL for the defaults; the same cache, warnings and
 * results), from the same mapping the records are read from. ropts (NULL: the defaults):
 * verify_data_crc is used by sl_tfr_file_read; compression must be AUTO (detected) or NONE
 * (taken as plain: a compressed file is then bad framing); GZIP or ZLIB is SL_EUNSUPPORTED;
 * skip_corrupt and max_record are not used (iopts->skip_corrupt says how to index, and a
 * mapped record is limited only by the file). Results as sl_tfr_index_open; *out NULL on
 * failure. */
sl_status sl_tfr_file_open(const char *path, const sl_tfr_index_opts *iopts,
                           const sl_tfr_read_opts *ropts, sl_tfr_file **out);

/* Records in the file's index. */
int64_t sl_tfr_file_count(const sl_tfr_file *f);

/* The path as given to sl_tfr_file_open. */
const char *sl_tfr_file_path(const sl_tfr_file *f);

/* The file's index (owned by f: valid until sl_tfr_file_close). */
const sl_tfr_index *sl_tfr_file_index(const sl_tfr_file *f);

/* Record i into *rec: a zero-copy view into the mapping (rec->buf is the guarded mapping,
 * NOT referenced for the caller, as sl_tfr_reader_next: sl_buf_ref it to keep the record
 * past sl_tfr_file_close); rec->offset is the record's header offset. Checks the length's
 * CRC, that the record lies within the file and ends where the index says the next one
 * starts (at or before it, for an index with skipped records), and the data CRC unless
 * verify_data_crc is false. Returns SL_OK; SL_ERANGE for i outside [0, count) ("FILE:
 * record I is out of range: the index has N records"); SL_ECORRUPT "FILE: record I at byte
 * OFFSET: corrupt record: length CRC mismatch ..." (or "... data CRC mismatch ...", "...
 * record of L bytes ends at byte E, the index says at byte X"), e.g. the file was edited
 * after the index was made, with a hint; SL_EIO "FILE: shrank from N to M bytes while
 * being read (at record I, byte OFFSET)" when the file shrank (the mapping lost the
 * record's pages). *rec is written only on SL_OK. Safe to call from any number of threads
 * at once: it changes no state. */
sl_status sl_tfr_file_read(const sl_tfr_file *f, int64_t i, sl_record *rec);

/* Close and free; NULL is a no-op. Records returned stay valid while their buf is
 * referenced. */
void sl_tfr_file_close(sl_tfr_file *f);

#ifdef __cplusplus
}
#endif
#endif
