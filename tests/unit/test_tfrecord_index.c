/* Tests for formats/tfrecord_index.c and formats/tfrecord_index_file.c: the index's offsets
 * against the reader's, the serialized form's round trip and every single-byte change and
 * truncation of it, exact parse messages, stale and damaged caches (appended, head and tail
 * edits of the same size, touched, replaced), an edit the identity cannot see caught by the
 * data CRC on read, compressed and empty files, the three cache places and a cache that
 * cannot be written, skip mode, random reads from threads, and a file that shrinks. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sluice/crc32c.h"
#include "sluice/tfrecord.h"
#include "sluice/tfrecord_index.h"
#include "sluice/util.h"
#include "helper_files.h"
#include "test.h"

static char tmpdir[256];

static const char *tmp(const char *name) {
    static char path[4][512];
    static int k;
    k = (k + 1) & 3;
    snprintf(path[k], sizeof path[k], "%s/%s", tmpdir, name);
    return path[k];
}

/* Deterministic payload for record i of length len. */
static void fill(uint8_t *p, size_t len, uint32_t i) {
    uint32_t x = i * 2654435761u + 1;
    for (size_t k = 0; k < len; k++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[k] = (uint8_t)x;
    }
}

static sl_status write_file(const char *path, sl_compression c, const size_t *lens, size_t n) {
    sl_tfr_write_opts wo = sl_tfr_write_opts_default();
    wo.compression = c;
    sl_tfr_writer *w;
    sl_status s = sl_tfr_writer_open(path, &wo, &w);
    if (s) return s;
    uint8_t *buf = malloc(1 << 17);
    for (size_t i = 0; i < n && !s; i++) {
        fill(buf, lens[i], (uint32_t)i);
        s = sl_tfr_writer_write(w, buf, lens[i]);
    }
    free(buf);
    sl_status c2 = sl_tfr_writer_close(w);
    return s ? s : c2;
}

/* n records of len bytes each. */
static sl_status write_even(const char *path, size_t n, size_t len) {
    size_t *lens = malloc(n * sizeof *lens);
    for (size_t i = 0; i < n; i++) lens[i] = len;
    sl_status s = write_file(path, SL_COMP_NONE, lens, n);
    free(lens);
    return s;
}

/* The offsets sl_tfr_reader_next reports, into off (room for cap); returns how many, or -1
 * when the reader fails. */
static int reader_offsets(const char *path, bool skip, uint64_t *off, int cap) {
    sl_tfr_read_opts o = sl_tfr_read_opts_default();
    o.skip_corrupt = skip;
    sl_tfr_reader *r;
    if (sl_tfr_reader_open(path, &o, &r)) return -1;
    sl_record rec;
    int n = 0;
    sl_status s;
    while ((s = sl_tfr_reader_next(r, &rec)) == SL_OK && n < cap) off[n++] = rec.offset;
    sl_tfr_reader_close(r);
    return s == SL_END ? n : -1;
}

/* 0 when ix's offsets are the reader's for path. */
static int same_as_reader(const sl_tfr_index *ix, const char *path, bool skip) {
    static uint64_t off[4096];
    int n = reader_offsets(path, skip, off, 4096);
    if (n < 0 || n != sl_tfr_index_count(ix)) {
        printf("  %s: reader %d records, index %lld\n", path, n, (long long)sl_tfr_index_count(ix));
        return 1;
    }
    for (int i = 0; i < n; i++)
        if (sl_tfr_index_offset(ix, i) != off[i]) {
            printf("  record %d: index %llu, reader %llu\n", i,
                   (unsigned long long)sl_tfr_index_offset(ix, i), (unsigned long long)off[i]);
            return 1;
        }
    return 0;
}

static sl_tfr_index_opts iopts(const char *cache_dir, bool skip) {
    sl_tfr_index_opts o = sl_tfr_index_opts_default();
    o.cache_dir = cache_dir;
    o.skip_corrupt = skip;
    return o;
}

static sl_status identity_of(const char *path, sl_tfr_file_id *id) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return SL_EIO;
    sl_status s = sl_tfr_file_identity(fd, path, id);
    close(fd);
    return s;
}

/* Rewrite the checksum of an index's bytes after an edit, so the fields behind it are what
 * the parse meets. */
static void fix_crc(uint8_t *b, size_t len) { sl_store_le32(b + len - 4, sl_crc32c(0, b, len - 4)); }

/* ---- stderr: the warnings ---- */

static int saved_stderr = -1;
static char errpath[400];

static void capture_begin(void) {
    fflush(stderr);
    snprintf(errpath, sizeof errpath, "%s/stderr.txt", tmpdir);
    int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    saved_stderr = dup(2);
    dup2(fd, 2);
    close(fd);
}

/* What was written to stderr since capture_begin (static; the next call overwrites it). */
static const char *capture_end(void) {
    static char text[8192];
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    size_t n;
    char *s = (char *)sl_test_read_file(errpath, &n);
    snprintf(text, sizeof text, "%s", s ? s : "");
    free(s);
    return text;
}

/* Entries of dir whose name holds ".tmp." (an index's temporary name). */
static int count_tmp(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* Open path's index with o, capturing stderr into *warn; *built is the index's flag. */
static sl_status open_capture(const char *path, const sl_tfr_index_opts *o, sl_tfr_index **ix,
                              const char **warn) {
    capture_begin();
    sl_status s = sl_tfr_index_open(path, o, ix);
    *warn = capture_end();
    return s;
}

/* Set path's modification time (and access time) to t. */
static int set_mtime(const char *path, struct timespec t) {
    struct timespec ts[2] = {t, t};
    return utimensat(AT_FDCWD, path, ts, 0);
}

static struct timespec mtime_of(const char *path) {
    struct stat st;
    stat(path, &st);
    return st.st_mtim;
}

/* Overwrite byte at of path (same size), keeping its modification time. */
static int poke(const char *path, uint64_t at, uint8_t x) {
    struct timespec t = mtime_of(path);
    int fd = open(path, O_RDWR);
    if (fd < 0) return -1;
    uint8_t b;
    int ok = pread(fd, &b, 1, (off_t)at) == 1;
    b ^= x;
    ok = ok && pwrite(fd, &b, 1, (off_t)at) == 1;
    close(fd);
    return ok && set_mtime(path, t) == 0 ? 0 : -1;
}

/* Replace the record of len bytes at off of path by another sound one of the same length
 * (payload fill(seed)), keeping the file's size and modification time. */
static int rewrite_record(const char *path, uint64_t off, size_t len, uint32_t seed) {
    struct timespec t = mtime_of(path);
    uint8_t *pay = malloc(len), *rec = malloc(len + 16);
    fill(pay, len, seed);
    size_t n = sl_tfr_frame(rec, pay, len);
    int fd = open(path, O_WRONLY);
    int ok = fd >= 0 && pwrite(fd, rec, n, (off_t)off) == (ssize_t)n;
    if (fd >= 0) close(fd);
    free(pay);
    free(rec);
    return ok && set_mtime(path, t) == 0 ? 0 : -1;
}

/* ---- the index and its serialized form ---- */

static const size_t LENS[] = {0, 1, 2, 100, 4096, 5000, 7, 70000, 3};
#define NLENS (sizeof LENS / sizeof LENS[0])

TEST(test_offsets_match_reader_and_round_trip) {
    const char *path = tmp("rt.tfrecord");
    ASSERT_OK(write_file(path, SL_COMP_NONE, LENS, NLENS));
    sl_tfr_index_opts o = iopts("", false);
    sl_tfr_index *ix = (sl_tfr_index *)1;
    ASSERT_OK(sl_tfr_index_open(path, &o, &ix));
    ASSERT_EQ(sl_tfr_index_count(ix), NLENS);
    ASSERT(sl_tfr_index_built(ix));
    ASSERT_EQ(sl_tfr_index_skipped(ix), 0);
    ASSERT_EQ(same_as_reader(ix, path, false), 0);
    ASSERT_U64(sl_tfr_index_offset(ix, -1), UINT64_MAX);
    ASSERT_U64(sl_tfr_index_offset(ix, NLENS), UINT64_MAX);

    sl_tfr_file_id id;
    ASSERT_OK(identity_of(path, &id));
    uint8_t *b;
    size_t len;
    ASSERT_OK(sl_tfr_index_serialize(ix, &id, &b, &len));
    ASSERT_EQ(len, 68 + 8 * NLENS);
    ASSERT_MEMEQ(b, "SLTFRIDX", 8);
    ASSERT_EQ(sl_load_le32(b + 8), 1);
    ASSERT_EQ(sl_load_le32(b + 12), 64);
    ASSERT_U64(sl_load_le64(b + 16), id.size);
    ASSERT_U64(sl_load_le64(b + 24), id.mtime_ns);
    ASSERT_U64(sl_load_le64(b + 32), id.inode);
    ASSERT_U64(sl_load_le32(b + 40), id.crc_head);
    ASSERT_U64(sl_load_le32(b + 44), id.crc_tail);
    ASSERT_EQ(sl_load_le64(b + 48), NLENS);
    ASSERT_EQ(sl_load_le64(b + 56), 0);
    ASSERT_U64(sl_load_le64(b + 64 + 8 * 3), 16 + 1 + 16 + 2 + 16);
    ASSERT_U64(sl_load_le32(b + len - 4), sl_crc32c(0, b, len - 4));

    sl_tfr_index *back;
    ASSERT_OK(sl_tfr_index_parse(b, len, "rt.slidx", &id, &back));
    ASSERT(!sl_tfr_index_built(back));
    ASSERT_EQ(sl_tfr_index_count(back), NLENS);
    for (int64_t i = 0; i < (int64_t)NLENS; i++)
        ASSERT_U64(sl_tfr_index_offset(back, i), sl_tfr_index_offset(ix, i));
    sl_tfr_index_free(back);
    ASSERT_OK(sl_tfr_index_parse(b, len, "rt.slidx", NULL, &back));
    sl_tfr_index_free(back);

    /* the same from memory */
    size_t n;
    uint8_t *data = sl_test_read_file(path, &n);
    sl_tfr_index *mem;
    ASSERT_OK(sl_tfr_index_build_mem(data, n, "mem", false, &mem));
    ASSERT(sl_tfr_index_built(mem));
    ASSERT_EQ(same_as_reader(mem, path, false), 0);
    uint8_t *b2;
    size_t len2;
    ASSERT_OK(sl_tfr_index_serialize(mem, &id, &b2, &len2));
    ASSERT_EQ(len2, len);
    ASSERT_MEMEQ(b2, b, len);
    free(b2);
    /* an identity of another size would not parse: refused */
    sl_tfr_file_id other = id;
    other.size++;
    b2 = (uint8_t *)1;
    ASSERT_EQ(sl_tfr_index_serialize(mem, &other, &b2, &len2), SL_EINVAL);
    ASSERT(b2 == NULL);
    ASSERT_EQ(len2, 0);
    /* NULL: the size alone */
    ASSERT_OK(sl_tfr_index_serialize(mem, NULL, &b2, &len2));
    ASSERT_U64(sl_load_le64(b2 + 16), n);
    ASSERT_U64(sl_load_le64(b2 + 24), 0);
    ASSERT_OK(sl_tfr_index_parse(b2, len2, "x", NULL, &back));
    sl_tfr_index_free(back);
    free(b2);
    free(data);
    free(b);
    sl_tfr_index_free(mem);
    sl_tfr_index_free(ix);
    sl_tfr_index_free(NULL);
}

/* A small index's bytes, with the identity of its file. */
static uint8_t *small_index(size_t *len, sl_tfr_file_id *id) {
    static const size_t lens[] = {10, 0, 300, 5, 77};
    const char *path = tmp("small.tfrecord");
    if (write_file(path, SL_COMP_NONE, lens, 5) || identity_of(path, id)) return NULL;
    sl_tfr_index_opts o = iopts("", false);
    sl_tfr_index *ix;
    uint8_t *b = NULL;
    if (sl_tfr_index_open(path, &o, &ix) == SL_OK) sl_tfr_index_serialize(ix, id, &b, len);
    sl_tfr_index_free(ix);
    return b;
}

TEST(test_every_byte_change_and_truncation_is_corrupt) {
    size_t len;
    sl_tfr_file_id id;
    uint8_t *b = small_index(&len, &id);
    ASSERT(b != NULL);
    ASSERT_EQ(len, 108);
    uint8_t *c = malloc(len + 16);
    long tried = 0;
    for (size_t at = 0; at < len; at++)
        for (int x = 1; x < 256; x++) {
            memcpy(c, b, len);
            c[at] ^= (uint8_t)x;
            for (int w = 0; w < 2; w++) {
                sl_tfr_index *ix = (sl_tfr_index *)1;
                sl_status s = sl_tfr_index_parse(c, len, "i", w ? &id : NULL, &ix);
                if (s != SL_ECORRUPT || ix != NULL) {
                    FAILF("byte %zu ^ 0x%02x: status %d", at, x, s);
                    free(c);
                    free(b);
                    return;
                }
                tried++;
            }
        }
    ASSERT_EQ(tried, 108 * 255 * 2);
    for (size_t cut = 0; cut < len; cut++) {
        sl_tfr_index *ix = (sl_tfr_index *)1;
        ASSERT_EQ(sl_tfr_index_parse(b, cut, "i", NULL, &ix), SL_ECORRUPT);
        ASSERT(ix == NULL);
    }
    /* longer: a byte or a whole offset more */
    memcpy(c, b, len);
    memset(c + len, 0, 16);
    sl_tfr_index *ix = (sl_tfr_index *)1;
    ASSERT_EQ(sl_tfr_index_parse(c, len + 1, "i", NULL, &ix), SL_ECORRUPT);
    ASSERT_EQ(sl_tfr_index_parse(c, len + 8, "i", NULL, &ix), SL_ECORRUPT);
    ASSERT(ix == NULL);
    /* the untouched bytes still parse */
    ASSERT_OK(sl_tfr_index_parse(b, len, "i", &id, &ix));
    sl_tfr_index_free(ix);
    free(c);
    free(b);
}

/* parse(c) is SL_ECORRUPT with exactly the message want. */
static int parse_says(const uint8_t *c, size_t len, const sl_tfr_file_id *id, const char *want) {
    sl_tfr_index *ix = (sl_tfr_index *)1;
    sl_status s = sl_tfr_index_parse(c, len, "i.slidx", id, &ix);
    if (s != SL_ECORRUPT || ix != NULL || strcmp(sl_test_errmsg_line(), want) != 0) {
        printf("  status %d, message\n    \"%s\"\n  wanted\n    \"%s\"\n", s, sl_test_errmsg_line(), want);
        return 1;
    }
    return 0;
}

TEST(test_parse_messages) {
    size_t len;
    sl_tfr_file_id id;
    uint8_t *b = small_index(&len, &id);
    ASSERT(b != NULL);
    uint8_t c[200];
    char want[300];
    uint64_t size = id.size; /* 5 records: 16 * 5 + 392 */
    ASSERT_U64(size, 472);

    ASSERT_EQ(parse_says((const uint8_t *)"hello, world, this is not an index at all; it is a "
                                          "sentence of more than sixty-eight bytes.", 90, NULL,
                         "i.slidx: byte 0: not a Sluice record index (no SLTFRIDX magic)"), 0);
    ASSERT_EQ(parse_says(b, 3, NULL, "i.slidx: truncated: 3 bytes, an index has at least 68"), 0);
    ASSERT_EQ(parse_says(b, 67, NULL, "i.slidx: truncated: 67 bytes, an index has at least 68"), 0);
    ASSERT_EQ(parse_says((const uint8_t *)"SLTFRIDY", 8, NULL,
                         "i.slidx: byte 7: not a Sluice record index (no SLTFRIDX magic)"), 0);

    memcpy(c, b, len);
    sl_store_le32(c + 8, 2);
    ASSERT_EQ(parse_says(c, len, NULL, "i.slidx: byte 8: version 2, this build reads version 1"), 0);
    memcpy(c, b, len);
    sl_store_le32(c + 12, 72);
    ASSERT_EQ(parse_says(c, len, NULL, "i.slidx: byte 12: header size 72, version 1 has 64"), 0);
    ASSERT_EQ(parse_says(b, len - 8, NULL,
                         "i.slidx: byte 48: 5 records need an index of 108 bytes, this one has 100"), 0);
    memcpy(c, b, len);
    sl_store_le64(c + 48, UINT64_MAX / 4);
    ASSERT_EQ(parse_says(c, len, NULL,
                         "i.slidx: byte 48: 4611686018427387903 records need an index of "
                         "36893488147419103292 bytes, this one has 108"), 0);

    memcpy(c, b, len);
    c[64 + 8 * 2] ^= 4;
    snprintf(want, sizeof want, "i.slidx: byte 104: damaged: checksum mismatch (stored 0x%08x, computed 0x%08x)",
             sl_load_le32(c + 104), sl_crc32c(0, c, 104));
    ASSERT_EQ(parse_says(c, len, NULL, want), 0);

    /* stale: the first field that differs, in the documented order */
    sl_tfr_file_id w = id;
    w.size += 32;
    snprintf(want, sizeof want, "i.slidx: stale: the file's size changed (indexed at 472 bytes, now %llu)",
             (unsigned long long)w.size);
    ASSERT_EQ(parse_says(b, len, &w, want), 0);
    w = id;
    w.mtime_ns++;
    w.crc_tail++;
    ASSERT_EQ(parse_says(b, len, &w, "i.slidx: stale: the file's modification time changed"), 0);
    w = id;
    w.inode++;
    ASSERT_EQ(parse_says(b, len, &w, "i.slidx: stale: the file's inode changed (it was replaced)"), 0);
    w = id;
    w.crc_head++;
    ASSERT_EQ(parse_says(b, len, &w, "i.slidx: stale: the file's first 4 KiB changed"), 0);
    w = id;
    w.crc_tail++;
    ASSERT_EQ(parse_says(b, len, &w, "i.slidx: stale: the file's last 4 KiB changed"), 0);
    /* damage is never called stale */
    memcpy(c, b, len);
    c[20] ^= 1;
    snprintf(want, sizeof want, "i.slidx: byte 104: damaged: checksum mismatch (stored 0x%08x, computed 0x%08x)",
             sl_load_le32(c + 104), sl_crc32c(0, c, 104));
    ASSERT_EQ(parse_says(c, len, &id, want), 0);

    /* the fields behind a good checksum: offsets 0, 26, 42, 358, 379 */
    ASSERT_U64(sl_load_le64(b + 64 + 8), 26);
    memcpy(c, b, len);
    sl_store_le64(c + 64 + 16, 26);
    fix_crc(c, len);
    ASSERT_EQ(parse_says(c, len, NULL, "i.slidx: byte 80: damaged: record 2's offset 26 is not at "
                                       "least 16 bytes after record 1's (26)"), 0);
    memcpy(c, b, len);
    sl_store_le64(c + 64 + 16, 41);
    fix_crc(c, len);
    ASSERT_EQ(parse_says(c, len, NULL, "i.slidx: byte 80: damaged: record 2's offset 41 is not at "
                                       "least 16 bytes after record 1's (26)"), 0);
    memcpy(c, b, len);
    sl_store_le64(c + 64 + 32, 457);
    fix_crc(c, len);
    ASSERT_EQ(parse_says(c, len, NULL, "i.slidx: byte 96: damaged: record 4's offset 457 leaves no "
                                       "room for a record in a file of 472 bytes"), 0);
    memcpy(c, b, len);
    sl_store_le64(c + 64 + 32, UINT64_MAX);
    fix_crc(c, len);
    ASSERT_EQ(parse_says(c, len, NULL, "i.slidx: byte 96: damaged: record 4's offset 18446744073709551615 "
                                       "leaves no room for a record in a file of 472 bytes"), 0);
    memcpy(c, b, len);
    sl_store_le64(c + 64, 5);
    fix_crc(c, len);
    ASSERT_EQ(parse_says(c, len, NULL, "i.slidx: byte 64: damaged: the first record is at byte 5, "
                                       "not 0, in an index without skipped records"), 0);
    memcpy(c, b, len);
    sl_store_le64(c + 56, 473);
    fix_crc(c, len);
    ASSERT_EQ(parse_says(c, len, NULL, "i.slidx: byte 56: damaged: 473 skipped records in a file of "
                                       "472 bytes"), 0);
    /* with skipped records, the first may start later */
    memcpy(c, b, len);
    sl_store_le64(c + 56, 1);
    sl_store_le64(c + 64, 5);
    fix_crc(c, len);
    sl_tfr_index *ix;
    ASSERT_OK(sl_tfr_index_parse(c, len, "i", NULL, &ix));
    ASSERT_EQ(sl_tfr_index_skipped(ix), 1);
    ASSERT_U64(sl_tfr_index_offset(ix, 0), 5);
    sl_tfr_index_free(ix);
    /* no records in a file that has bytes, without skipped records */
    memcpy(c, b, 64);
    sl_store_le64(c + 48, 0);
    fix_crc(c, 68);
    ASSERT_EQ(parse_says(c, 68, NULL, "i.slidx: byte 48: damaged: no records in a file of 472 "
                                      "bytes, in an index without skipped records"), 0);
    free(b);
}

/* ---- the cache ---- */

#define EVEN_N 30
#define EVEN_LEN 1000
#define EVEN_REC (16 + EVEN_LEN)

/* Open path's index beside it: SL_OK, the flag built as wanted, the warning text containing
 * want_warn (NULL: no warning at all; else exactly one line), and the offsets the reader's. */
static int open_expect(const char *path, bool want_built, const char *want_warn) {
    sl_tfr_index_opts o = iopts(NULL, false);
    sl_tfr_index *ix;
    const char *warn;
    sl_status s = open_capture(path, &o, &ix, &warn);
    int bad = 0;
    if (s) {
        printf("  open: %d %s\n", s, sl_errmsg());
        return 1;
    }
    if (sl_tfr_index_built(ix) != want_built) {
        printf("  built %d, wanted %d\n", sl_tfr_index_built(ix), want_built);
        bad = 1;
    }
    if (want_warn ? !strstr(warn, want_warn) || count_lines(warn) != 1 : warn[0] != 0) {
        printf("  stderr \"%s\"\n  wanted \"%s\"\n", warn, want_warn ? want_warn : "");
        bad = 1;
    }
    bad |= same_as_reader(ix, path, false);
    sl_tfr_index_free(ix);
    return bad;
}

TEST(test_beside_cache_and_stale_indexes) {
    const char *path = tmp("even.tfrecord");
    char idx[600], want[900];
    snprintf(idx, sizeof idx, "%s.slidx", path);
    ASSERT_OK(write_even(path, EVEN_N, EVEN_LEN));
    unlink(idx);
    ASSERT_EQ(open_expect(path, true, NULL), 0);
    ASSERT_EQ(access(idx, F_OK), 0);
    /* the file holds the index for the file as it is */
    size_t n;
    uint8_t *b = sl_test_read_file(idx, &n);
    sl_tfr_file_id id;
    ASSERT_OK(identity_of(path, &id));
    sl_tfr_index *ix;
    ASSERT_OK(sl_tfr_index_parse(b, n, idx, &id, &ix));
    ASSERT_EQ(sl_tfr_index_count(ix), EVEN_N);
    sl_tfr_index_free(ix);
    free(b);
    ASSERT_EQ(open_expect(path, false, NULL), 0);

    /* appended to */
    uint8_t rec[16 + 50], pay[50];
    fill(pay, 50, 99);
    size_t rl = sl_tfr_frame(rec, pay, 50);
    int fd = open(path, O_WRONLY | O_APPEND);
    ASSERT_EQ(write(fd, rec, rl), (ssize_t)rl);
    close(fd);
    snprintf(want, sizeof want, "sluice warning: %s: stale: the file's size changed (indexed at %d bytes, now %d); rebuilding it\n",
             idx, EVEN_N * EVEN_REC, EVEN_N * EVEN_REC + 66);
    ASSERT_EQ(open_expect(path, true, want), 0);
    ASSERT_EQ(open_expect(path, false, NULL), 0);

    /* the first record rewritten: the same size, the same modification time */
    ASSERT_EQ(rewrite_record(path, 0, EVEN_LEN, 1000), 0);
    snprintf(want, sizeof want, "%s: stale: the file's first 4 KiB changed; rebuilding it", idx);
    ASSERT_EQ(open_expect(path, true, want), 0);
    ASSERT_EQ(open_expect(path, false, NULL), 0);
    /* the last 4 KiB */
    ASSERT_EQ(rewrite_record(path, (uint64_t)EVEN_N * EVEN_REC, 50, 1001), 0);
    snprintf(want, sizeof want, "%s: stale: the file's last 4 KiB changed; rebuilding it", idx);
    ASSERT_EQ(open_expect(path, true, want), 0);
    ASSERT_EQ(open_expect(path, false, NULL), 0);
    /* touched */
    struct timespec t = mtime_of(path);
    t.tv_sec -= 3600;
    ASSERT_EQ(set_mtime(path, t), 0);
    snprintf(want, sizeof want, "%s: stale: the file's modification time changed; rebuilding it", idx);
    ASSERT_EQ(open_expect(path, true, want), 0);
    ASSERT_EQ(open_expect(path, false, NULL), 0);
    /* replaced by a copy: same bytes, same modification time, another inode */
    const char *copy = tmp("even.copy");
    uint8_t *all = sl_test_read_file(path, &n);
    ASSERT_EQ(sl_test_write_file(copy, all, n), 0);
    free(all);
    ASSERT_EQ(set_mtime(copy, t), 0);
    ASSERT_EQ(rename(copy, path), 0);
    snprintf(want, sizeof want, "%s: stale: the file's inode changed (it was replaced); rebuilding it", idx);
    ASSERT_EQ(open_expect(path, true, want), 0);
    ASSERT_EQ(open_expect(path, false, NULL), 0);
    /* --rebuild: built without a word */
    sl_tfr_index_opts o = iopts(NULL, false);
    o.rebuild = true;
    const char *warn;
    ASSERT_OK(open_capture(path, &o, &ix, &warn));
    ASSERT(sl_tfr_index_built(ix));
    ASSERT_STREQ(warn, "");
    sl_tfr_index_free(ix);
    /* no temporary file is left behind */
    ASSERT_EQ(count_tmp(tmpdir), 0);
}

TEST(test_damaged_and_foreign_cache_files) {
    const char *path = tmp("dmg.tfrecord");
    char idx[600], want[900];
    snprintf(idx, sizeof idx, "%s.slidx", path);
    ASSERT_OK(write_even(path, EVEN_N, EVEN_LEN));
    ASSERT_EQ(open_expect(path, true, NULL), 0);
    size_t n;
    uint8_t *b = sl_test_read_file(idx, &n);
    ASSERT_EQ(n, 68 + 8 * EVEN_N);
    /* a flipped byte */
    b[70] ^= 0x10;
    ASSERT_EQ(sl_test_write_file(idx, b, n), 0);
    snprintf(want, sizeof want, "%s: byte %zu: damaged: checksum mismatch (stored 0x%08x, computed 0x%08x); rebuilding it",
             idx, n - 4, sl_load_le32(b + n - 4), sl_crc32c(0, b, n - 4));
    ASSERT_EQ(open_expect(path, true, want), 0);
    ASSERT_EQ(open_expect(path, false, NULL), 0);
    /* cut short */
    ASSERT_EQ(truncate(idx, 30), 0);
    snprintf(want, sizeof want, "%s: truncated: 30 bytes, an index has at least 68; rebuilding it", idx);
    ASSERT_EQ(open_expect(path, true, want), 0);
    /* empty (a crash right after the rename) */
    ASSERT_EQ(truncate(idx, 0), 0);
    snprintf(want, sizeof want, "%s: truncated: 0 bytes, an index has at least 68; rebuilding it", idx);
    ASSERT_EQ(open_expect(path, true, want), 0);
    /* foreign */
    ASSERT_EQ(sl_test_write_text(idx, "{\"offsets\": [0, 1016, 2032]}"), 0);
    snprintf(want, sizeof want, "%s: byte 0: not a Sluice record index (no SLTFRIDX magic); rebuilding it", idx);
    ASSERT_EQ(open_expect(path, true, want), 0);
    ASSERT_EQ(open_expect(path, false, NULL), 0);
    /* huge for its file: refused before it is read */
    ASSERT_EQ(sl_test_sparse_file(idx, 1 << 20), 0);
    ASSERT_EQ(open_expect(path, true, "is 1048576 bytes, more than the limit of"), 0);
    ASSERT_EQ(open_expect(path, false, NULL), 0);
    free(b);
}

/* An edit the identity cannot see (same size, outside the first and last 4 KiB, the
 * modification time set back): the cached index is used, and reading the record finds it. */
TEST(test_middle_edit_caught_on_read) {
    const char *path = tmp("mid.tfrecord");
    ASSERT_OK(write_even(path, EVEN_N, EVEN_LEN));
    sl_tfr_index_opts o = iopts(NULL, false);
    sl_tfr_file *f = (sl_tfr_file *)1;
    ASSERT_OK(sl_tfr_file_open(path, &o, NULL, &f));
    ASSERT(sl_tfr_index_built(sl_tfr_file_index(f)));
    sl_tfr_file_close(f);
    ASSERT_EQ(poke(path, 15 * EVEN_REC + 12 + 500, 0x08), 0);
    ASSERT_OK(sl_tfr_file_open(path, &o, NULL, &f));
    ASSERT(!sl_tfr_index_built(sl_tfr_file_index(f)));
    ASSERT_EQ(sl_tfr_file_count(f), EVEN_N);
    ASSERT_STREQ(sl_tfr_file_path(f), path);
    sl_record rec;
    ASSERT_OK(sl_tfr_file_read(f, 14, &rec));
    ASSERT_OK(sl_tfr_file_read(f, 16, &rec));
    ASSERT_EQ(sl_tfr_file_read(f, 15, &rec), SL_ECORRUPT);
    char want[700];
    snprintf(want, sizeof want, "%s: record 15 at byte %d: corrupt record: data CRC mismatch (stored 0x", path,
             15 * EVEN_REC);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT_CONTAINS(sl_errmsg(), "HINT");
    sl_tfr_file_close(f);
    /* without data CRCs the record is handed out as it is */
    sl_tfr_read_opts ro = sl_tfr_read_opts_default();
    ro.verify_data_crc = false;
    ASSERT_OK(sl_tfr_file_open(path, &o, &ro, &f));
    ASSERT_OK(sl_tfr_file_read(f, 15, &rec));
    ASSERT_EQ(rec.len, EVEN_LEN);
    sl_tfr_file_close(f);

    /* a header edited: the length's CRC */
    ASSERT_EQ(poke(path, 20 * EVEN_REC + 1, 0x01), 0);
    ASSERT_OK(sl_tfr_file_open(path, &o, &ro, &f));
    ASSERT(!sl_tfr_index_built(sl_tfr_file_index(f)));
    ASSERT_EQ(sl_tfr_file_read(f, 20, &rec), SL_ECORRUPT);
    snprintf(want, sizeof want, "%s: record 20 at byte %d: corrupt record: length CRC mismatch (stored 0x", path,
             20 * EVEN_REC);
    ASSERT_CONTAINS(sl_errmsg(), want);
    sl_tfr_file_close(f);
    /* a sound header of another length: the record does not end where the next begins */
    static uint8_t hdr[16 + 900], zeros[900];
    sl_tfr_frame(hdr, zeros, 900);
    struct timespec t = mtime_of(path);
    int fd = open(path, O_WRONLY);
    ASSERT_EQ(pwrite(fd, hdr, 12, 22 * EVEN_REC), 12);
    close(fd);
    ASSERT_EQ(set_mtime(path, t), 0);
    ASSERT_OK(sl_tfr_file_open(path, &o, &ro, &f));
    ASSERT_EQ(sl_tfr_file_read(f, 22, &rec), SL_ECORRUPT);
    snprintf(want, sizeof want, "%s: record 22 at byte %d: corrupt record: record of 900 bytes ends at byte %d, the "
             "index says at byte %d", path, 22 * EVEN_REC, 22 * EVEN_REC + 916, 23 * EVEN_REC);
    ASSERT_STREQ(sl_test_errmsg_line(), want);
    sl_tfr_file_close(f);
    sl_tfr_file_close(NULL);
}

TEST(test_compressed_and_empty_files) {
    static const size_t lens[] = {10, 20, 30};
    char want[700];
    sl_tfr_index_opts o = iopts(NULL, false);
    for (int k = 0; k < 2; k++) {
        const char *path = tmp(k ? "c.zlib" : "c.gz");
        ASSERT_OK(write_file(path, k ? SL_COMP_ZLIB : SL_COMP_GZIP, lens, 3));
        sl_tfr_index *ix = (sl_tfr_index *)1;
        ASSERT_EQ(sl_tfr_index_open(path, &o, &ix), SL_EUNSUPPORTED);
        ASSERT(ix == NULL);
        snprintf(want, sizeof want, "%s: is %s-compressed: a compressed TFRecord file has no random access",
                 path, k ? "ZLIB" : "GZIP");
        ASSERT_STREQ(sl_test_errmsg_line(), want);
        ASSERT_CONTAINS(sl_errmsg(), "HINT");
        sl_tfr_file *f = (sl_tfr_file *)1;
        ASSERT_EQ(sl_tfr_file_open(path, &o, NULL, &f), SL_EUNSUPPORTED);
        ASSERT(f == NULL);
        snprintf(want, sizeof want, "%s.slidx", path);
        ASSERT_EQ(access(want, F_OK), -1);
    }
    /* asking for a compressed reading of a plain file */
    const char *plain = tmp("plain.tfrecord");
    ASSERT_OK(write_file(plain, SL_COMP_NONE, lens, 3));
    sl_tfr_read_opts ro = sl_tfr_read_opts_default();
    ro.compression = SL_COMP_GZIP;
    sl_tfr_file *f = (sl_tfr_file *)1;
    ASSERT_EQ(sl_tfr_file_open(plain, &o, &ro, &f), SL_EUNSUPPORTED);
    ASSERT(f == NULL);
    ro.compression = SL_COMP_NONE;
    ASSERT_OK(sl_tfr_file_open(plain, &o, &ro, &f));
    ASSERT_EQ(sl_tfr_file_count(f), 3);
    sl_tfr_file_close(f);

    /* empty: no records, and an index of none is cached */
    const char *empty = tmp("empty.tfrecord");
    ASSERT_EQ(sl_test_write_file(empty, "", 0), 0);
    sl_tfr_index *ix;
    ASSERT_OK(sl_tfr_index_open(empty, &o, &ix));
    ASSERT_EQ(sl_tfr_index_count(ix), 0);
    ASSERT(sl_tfr_index_built(ix));
    sl_tfr_index_free(ix);
    ASSERT_OK(sl_tfr_file_open(empty, &o, NULL, &f));
    ASSERT(!sl_tfr_index_built(sl_tfr_file_index(f)));
    ASSERT_EQ(sl_tfr_file_count(f), 0);
    sl_record rec;
    ASSERT_EQ(sl_tfr_file_read(f, 0, &rec), SL_ERANGE);
    snprintf(want, sizeof want, "%s: record 0 is out of range: the index has 0 records", empty);
    ASSERT_STREQ(sl_test_errmsg_line(), want);
    sl_tfr_file_close(f);
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 14695981039346656037ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

TEST(test_cache_dir_and_memory_only) {
    char dir[300], cache[400], want[900], got[900];
    ASSERT(sl_test_mkdtemp(dir, sizeof dir, "sluice-test-index-cd") != NULL);
    char path[400], path2[400];
    snprintf(path, sizeof path, "%s/a/shard.tfrecord", dir);
    snprintf(path2, sizeof path2, "%s/b/shard.tfrecord", dir);
    snprintf(cache, sizeof cache, "%s/cache/sub", dir); /* made when missing */
    ASSERT_EQ(mkdir(strcat(strcpy(want, dir), "/a"), 0777), 0);
    ASSERT_EQ(mkdir(strcat(strcpy(want, dir), "/b"), 0777), 0);
    ASSERT_OK(write_even(path, 7, 33));
    ASSERT_OK(write_even(path2, 9, 44));

    char real[PATH_MAX];
    ASSERT(realpath(path, real) != NULL);
    snprintf(want, sizeof want, "%s/shard.tfrecord.%016llx.slidx", cache, (unsigned long long)fnv1a(real));
    ASSERT_OK(sl_tfr_index_cache_path(path, cache, got, sizeof got));
    ASSERT_STREQ(got, want);
    ASSERT_EQ(sl_tfr_index_cache_path(path, cache, got, 20), SL_EINVAL);
    ASSERT_EQ(sl_tfr_index_cache_path(path, "", got, sizeof got), SL_EINVAL);
    ASSERT_EQ(sl_tfr_index_cache_path(tmp("nothing-here"), cache, got, sizeof got), SL_ENOTFOUND);
    ASSERT_OK(sl_tfr_index_cache_path(path, NULL, got, sizeof got));
    snprintf(want, sizeof want, "%s.slidx", path);
    ASSERT_STREQ(got, want);

    sl_tfr_index_opts o = iopts(cache, false);
    sl_tfr_index *ix;
    const char *warn;
    ASSERT_OK(open_capture(path, &o, &ix, &warn));
    ASSERT_STREQ(warn, "");
    ASSERT(sl_tfr_index_built(ix));
    sl_tfr_index_free(ix);
    ASSERT_OK(open_capture(path2, &o, &ix, &warn));
    sl_tfr_index_free(ix);
    ASSERT_EQ(sl_test_count_files(cache), 2); /* one name, two folders: two indexes */
    ASSERT_OK(sl_tfr_index_cache_path(path, cache, got, sizeof got));
    ASSERT_EQ(access(got, F_OK), 0);
    snprintf(want, sizeof want, "%s/a", dir);
    ASSERT_EQ(sl_test_count_files(want), 1); /* nothing beside the file */
    ASSERT_OK(open_capture(path, &o, &ix, &warn));
    ASSERT(!sl_tfr_index_built(ix));
    ASSERT_EQ(same_as_reader(ix, path, false), 0);
    sl_tfr_index_free(ix);
    sl_tfr_file *f;
    ASSERT_OK(sl_tfr_file_open(path2, &o, NULL, &f));
    ASSERT(!sl_tfr_index_built(sl_tfr_file_index(f)));
    ASSERT_EQ(sl_tfr_file_count(f), 9);
    sl_tfr_file_close(f);

    /* in memory only: nothing written, built every time */
    o = iopts("", false);
    for (int k = 0; k < 2; k++) {
        ASSERT_OK(open_capture(path, &o, &ix, &warn));
        ASSERT(sl_tfr_index_built(ix));
        ASSERT_STREQ(warn, "");
        sl_tfr_index_free(ix);
    }
    snprintf(want, sizeof want, "%s/a", dir);
    ASSERT_EQ(sl_test_count_files(want), 1);
    ASSERT_EQ(sl_test_count_files(cache), 2);
    sl_test_rm_rf(dir);
}

/* A cache that cannot be written, even by root: a regular file where a folder must be. */
TEST(test_unwritable_cache_is_a_warning) {
    const char *path = tmp("unw.tfrecord");
    ASSERT_OK(write_even(path, 12, 100));
    const char *blocker = tmp("blocker");
    ASSERT_EQ(sl_test_write_text(blocker, "a file, not a folder"), 0);
    char cache[600], idx[900];
    snprintf(cache, sizeof cache, "%s/idx", blocker);
    ASSERT_OK(sl_tfr_index_cache_path(path, cache, idx, sizeof idx));
    sl_tfr_index_opts o = iopts(cache, false);
    for (int k = 0; k < 2; k++) {
        sl_tfr_index *ix;
        const char *warn;
        ASSERT_OK(open_capture(path, &o, &ix, &warn));
        ASSERT(sl_tfr_index_built(ix));
        ASSERT_EQ(same_as_reader(ix, path, false), 0);
        ASSERT_EQ(count_lines(warn), 1);
        char want[1400];
        snprintf(want, sizeof want, "sluice warning: %s: cannot use the index cache: cannot create index cache "
                 "folder %s: %s is a regular file, not a folder; the index is kept in memory only\n",
                 idx, cache, blocker);
        ASSERT_STREQ(warn, want);
        sl_tfr_index_free(ix);
    }
    /* beside the file, a folder in the index's place: read, then kept in memory */
    char beside[600];
    snprintf(beside, sizeof beside, "%s.slidx", path);
    ASSERT_EQ(mkdir(beside, 0777), 0);
    o = iopts(NULL, false);
    sl_tfr_index *ix;
    const char *warn;
    ASSERT_OK(open_capture(path, &o, &ix, &warn));
    ASSERT(sl_tfr_index_built(ix));
    ASSERT_EQ(count_lines(warn), 1);
    char want[900];
    snprintf(want, sizeof want, "sluice warning: record index '%s': is a directory, not a regular file; the index "
             "is kept in memory only\n", beside);
    ASSERT_STREQ(warn, want);
    sl_tfr_index_free(ix);
    rmdir(beside);
}

TEST(test_not_found_and_not_regular) {
    sl_tfr_index *ix = (sl_tfr_index *)1;
    sl_tfr_index_opts o = iopts(NULL, false);
    ASSERT_EQ(sl_tfr_index_open(tmp("missing.tfrecord"), &o, &ix), SL_ENOTFOUND);
    ASSERT(ix == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "missing.tfrecord");
    ASSERT_EQ(sl_tfr_index_open(tmpdir, &o, &ix), SL_EINVAL);
    ASSERT(ix == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "is a directory");
    sl_tfr_file *f = (sl_tfr_file *)1;
    ASSERT_EQ(sl_tfr_file_open(tmp("missing.tfrecord"), &o, NULL, &f), SL_ENOTFOUND);
    ASSERT(f == NULL);
}

/* ---- bad framing ---- */

TEST(test_bad_framing_strict_and_skip) {
    const char *path = tmp("bad.tfrecord");
    char idx[600], want[900];
    snprintf(idx, sizeof idx, "%s.slidx", path);
    ASSERT_OK(write_even(path, 10, 100));
    ASSERT_EQ(poke(path, 4 * 116 + 9, 0x01), 0);  /* record 4's length CRC */
    ASSERT_EQ(poke(path, 2 * 116 + 50, 0x01), 0); /* record 2's data */
    sl_tfr_index_opts o = iopts(NULL, false);
    sl_tfr_index *ix = (sl_tfr_index *)1;
    ASSERT_EQ(sl_tfr_index_open(path, &o, &ix), SL_ECORRUPT);
    ASSERT(ix == NULL);
    snprintf(want, sizeof want, "%s: byte 464: corrupt record: length CRC mismatch (stored 0x", path);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT_CONTAINS(sl_errmsg(), "--skip-corrupt");
    ASSERT_EQ(access(idx, F_OK), -1);
    /* skip mode: what the reader returns in skip mode (record 2's bad data is left out too) */
    o.skip_corrupt = true;
    ASSERT_OK(sl_tfr_index_open(path, &o, &ix));
    ASSERT_EQ(sl_tfr_index_count(ix), 8);
    ASSERT_EQ(sl_tfr_index_skipped(ix), 2);
    ASSERT_EQ(same_as_reader(ix, path, true), 0);
    sl_tfr_index_free(ix);
    ASSERT_EQ(access(idx, F_OK), 0);
    ASSERT_OK(sl_tfr_index_open(path, &o, &ix));
    ASSERT(!sl_tfr_index_built(ix));
    ASSERT_EQ(sl_tfr_index_skipped(ix), 2);
    sl_tfr_index_free(ix);
    /* a strict open does not take the skipping index: it fails as before, quietly, and the
     * cached index stays */
    o.skip_corrupt = false;
    const char *warn;
    capture_begin();
    sl_status s = sl_tfr_index_open(path, &o, &ix);
    warn = capture_end();
    ASSERT_EQ(s, SL_ECORRUPT);
    ASSERT_STREQ(warn, "");
    o.skip_corrupt = true;
    ASSERT_OK(sl_tfr_index_open(path, &o, &ix));
    ASSERT(!sl_tfr_index_built(ix));
    sl_tfr_index_free(ix);
    /* sl_tfr_file reads what the skip index holds */
    sl_tfr_file *f;
    ASSERT_OK(sl_tfr_file_open(path, &o, NULL, &f));
    sl_record rec;
    for (int64_t i = 0; i < 8; i++) ASSERT_OK(sl_tfr_file_read(f, i, &rec));
    sl_tfr_file_close(f);

    /* only data damaged: the framing is whole, so skip mode indexes every record */
    const char *p2 = tmp("data.tfrecord");
    ASSERT_OK(write_even(p2, 10, 100));
    ASSERT_EQ(poke(p2, 2 * 116 + 50, 0x01), 0);
    ASSERT_OK(sl_tfr_index_open(p2, &o, &ix));
    ASSERT_EQ(sl_tfr_index_count(ix), 10);
    ASSERT_EQ(sl_tfr_index_skipped(ix), 0);
    sl_tfr_index_free(ix);

    /* a cut last record */
    const char *p3 = tmp("cut.tfrecord");
    ASSERT_OK(write_even(p3, 10, 100));
    ASSERT_EQ(truncate(p3, 10 * 116 - 5), 0);
    o = iopts("", false);
    ASSERT_EQ(sl_tfr_index_open(p3, &o, &ix), SL_ECORRUPT);
    snprintf(want, sizeof want, "%s: byte 1044: truncated record: needs 116 bytes (12-byte header, 100 of data, "
             "4-byte CRC) but only 111 are left", p3);
    ASSERT_STREQ(sl_test_errmsg_line(), want);
    ASSERT_EQ(truncate(p3, 9 * 116 + 7), 0);
    ASSERT_EQ(sl_tfr_index_open(p3, &o, &ix), SL_ECORRUPT);
    snprintf(want, sizeof want, "%s: byte 1044: truncated record: header needs 12 bytes, 7 left", p3);
    ASSERT_STREQ(sl_test_errmsg_line(), want);
    o.skip_corrupt = true;
    ASSERT_OK(sl_tfr_index_open(p3, &o, &ix));
    ASSERT_EQ(sl_tfr_index_count(ix), 9);
    ASSERT_EQ(sl_tfr_index_skipped(ix), 1);
    ASSERT_EQ(same_as_reader(ix, p3, true), 0);
    sl_tfr_index_free(ix);

    /* from memory */
    size_t n;
    uint8_t *data = sl_test_read_file(path, &n);
    ASSERT_EQ(sl_tfr_index_build_mem(data, n, "mem", false, &ix), SL_ECORRUPT);
    ASSERT(ix == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "mem: byte 464: corrupt record: length CRC mismatch");
    ASSERT_OK(sl_tfr_index_build_mem(data, n, "mem", true, &ix));
    ASSERT_EQ(same_as_reader(ix, path, true), 0);
    sl_tfr_index_free(ix);
    free(data);
}

/* ---- random access ---- */

TEST(test_file_read_every_record) {
    const char *path = tmp("ra.tfrecord");
    ASSERT_OK(write_file(path, SL_COMP_NONE, LENS, NLENS));
    sl_tfr_index_opts o = iopts("", false);
    sl_tfr_file *f;
    ASSERT_OK(sl_tfr_file_open(path, &o, NULL, &f));
    ASSERT_EQ(sl_tfr_file_count(f), NLENS);
    uint8_t *want = malloc(70000);
    sl_record rec, keep = {0};
    for (int64_t i = NLENS - 1; i >= 0; i--) {
        ASSERT_OK(sl_tfr_file_read(f, i, &rec));
        ASSERT_EQ(rec.len, LENS[i]);
        ASSERT_U64(rec.offset, sl_tfr_index_offset(sl_tfr_file_index(f), i));
        fill(want, LENS[i], (uint32_t)i);
        ASSERT_MEMEQ(rec.data, want, rec.len);
        ASSERT(sl_buf_mapped(rec.buf));
        if (i == 7) keep = rec;
    }
    char msg[700];
    ASSERT_EQ(sl_tfr_file_read(f, -1, &rec), SL_ERANGE);
    snprintf(msg, sizeof msg, "%s: record -1 is out of range: the index has %d records", path, (int)NLENS);
    ASSERT_STREQ(sl_test_errmsg_line(), msg);
    ASSERT_EQ(sl_tfr_file_read(f, NLENS, &rec), SL_ERANGE);
    /* a record outlives the file while its buffer is referenced */
    sl_buf_ref(keep.buf);
    sl_tfr_file_close(f);
    fill(want, LENS[7], 7);
    ASSERT_MEMEQ(keep.data, want, keep.len);
    sl_buf_unref(keep.buf);
    free(want);
}

typedef struct reader_arg {
    const sl_tfr_file *f;
    int seed;
    int bad; /* records that were not what was written */
} reader_arg;

static void *read_all(void *p) {
    reader_arg *a = p;
    uint8_t *want = malloc(EVEN_LEN);
    int64_t n = sl_tfr_file_count(a->f);
    for (int64_t k = 0; k < 4 * n; k++) {
        int64_t i = (k * 7 + a->seed) % n;
        sl_record rec;
        fill(want, EVEN_LEN, (uint32_t)i);
        if (sl_tfr_file_read(a->f, i, &rec) || rec.len != EVEN_LEN || memcmp(rec.data, want, EVEN_LEN) != 0)
            a->bad++;
    }
    free(want);
    return NULL;
}

TEST(test_file_read_from_threads) {
    const char *path = tmp("thr.tfrecord");
    ASSERT_OK(write_even(path, 97, EVEN_LEN));
    sl_tfr_index_opts o = iopts("", false);
    sl_tfr_file *f;
    ASSERT_OK(sl_tfr_file_open(path, &o, NULL, &f));
    pthread_t t[4];
    reader_arg a[4];
    for (int k = 0; k < 4; k++) {
        a[k] = (reader_arg){f, k * 13, 0};
        ASSERT_EQ(pthread_create(&t[k], NULL, read_all, &a[k]), 0);
    }
    for (int k = 0; k < 4; k++) pthread_join(t[k], NULL);
    for (int k = 0; k < 4; k++) ASSERT_EQ(a[k].bad, 0);
    sl_tfr_file_close(f);
}

#define SHR_N 64
#define SHR_LEN 65536
#define SHR_REC (16 + SHR_LEN)

/* In a child: open a file of 64 records of 64 KiB, truncate it to 1 MiB, read records
 * before and after the cut. */
static int shrink_child(void) {
    const char *path = tmp("shr.tfrecord");
    if (write_even(path, SHR_N, SHR_LEN)) return 2;
    sl_tfr_index_opts o = iopts("", false);
    sl_tfr_file *f;
    if (sl_tfr_file_open(path, &o, NULL, &f)) return 3;
    if (truncate(path, 1 << 20) != 0) return 4;
    sl_record rec;
    if (sl_tfr_file_read(f, 2, &rec) != SL_OK) return 5;
    sl_status s = sl_tfr_file_read(f, 40, &rec);
    char want[700];
    snprintf(want, sizeof want, "%s: shrank from %d to 1048576 bytes while being read (at record 40, byte %d)",
             path, SHR_N * SHR_REC, 40 * SHR_REC);
    if (s != SL_EIO || strcmp(sl_test_errmsg_line(), want) != 0) {
        printf("  child: status %d \"%s\"\n  wanted \"%s\"\n", s, sl_test_errmsg_line(), want);
        return 6;
    }
    /* the record cut in two */
    if (sl_tfr_file_read(f, 1048576 / SHR_REC, &rec) != SL_EIO) return 7;
    sl_tfr_file_close(f);
    return 0;
}

TEST(test_file_shrinks_while_open) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        int rc = shrink_child();
        fflush(stdout);
        _exit(rc);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);
}

int main(void) {
    if (!sl_test_mkdtemp(tmpdir, sizeof tmpdir, "sluice-test-tfrecord-index")) return 1;
    RUN(test_offsets_match_reader_and_round_trip);
    RUN(test_every_byte_change_and_truncation_is_corrupt);
    RUN(test_parse_messages);
    RUN(test_beside_cache_and_stale_indexes);
    RUN(test_damaged_and_foreign_cache_files);
    RUN(test_middle_edit_caught_on_read);
    RUN(test_compressed_and_empty_files);
    RUN(test_cache_dir_and_memory_only);
    RUN(test_unwritable_cache_is_a_warning);
    RUN(test_not_found_and_not_regular);
    RUN(test_bad_framing_strict_and_skip);
    RUN(test_file_read_every_record);
    RUN(test_file_read_from_threads);
    RUN(test_file_shrinks_while_open);
    sl_test_rm_rf(tmpdir);
    TEST_MAIN_END();
}
