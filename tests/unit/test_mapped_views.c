/* Zero-copy views of a mapped TFRecord file that shrinks while they are inside a pipeline:
 * no element whose bytes were lost leaves the pipeline as data. The shuffle buffer holds
 * every record (read and CRC-checked before the file shrinks), so each later element is
 * one the reader validated and the file then took away: handed out unbatched (the check in
 * sl_iter_next), stacked by batch, and copied into its slot by map_batch. Each must be
 * SL_EIO "FILE: byte OFFSET: ..." naming the record, or exactly the record's bytes; views
 * kept across the shrink say whether their bytes are gone (sl_element_check). */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/config.h"
#include "sluice/from_config.h"
#include "sluice/pipeline.h"
#include "sluice/tfrecord.h"
#include "helper_files.h"
#include "test.h"

#define NREC 48
#define PAYLOAD 8176             /* + 16 bytes of framing: each record is two pages */
#define RECSZ (PAYLOAD + 16)
#define FILESZ (NREC * RECSZ)

static char dir[256];

static uint8_t pattern(int rec, size_t k) { return (uint8_t)(1 + ((size_t)rec * 31 + k) % 251); }

/* Which record a payload is (its first byte tells), or -1 when it is not exactly one. */
static int which(const uint8_t *p, size_t len) {
    if (len != PAYLOAD) return -1;
    for (int r = 0; r < NREC; r++)
        if (p[0] == pattern(r, 0)) {
            for (size_t k = 0; k < len; k++)
                if (p[k] != pattern(r, k)) return -1;
            return r;
        }
    return -1;
}

static bool lost(int rec, long long size) { return (long long)rec * RECSZ + 12 + PAYLOAD > size; }

static const char *write_records(const char *name) {
    static char path[2][512];
    static int k;
    k ^= 1;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    static uint8_t buf[PAYLOAD];
    sl_tfr_writer *w;
    if (sl_tfr_writer_open(path[k], NULL, &w)) return NULL;
    for (int r = 0; r < NREC; r++) {
        for (size_t i = 0; i < PAYLOAD; i++) buf[i] = pattern(r, i);
        sl_tfr_writer_write(w, buf, PAYLOAD);
    }
    return sl_tfr_writer_close(w) ? NULL : path[k];
}

/* The dataset of `pipeline p { files PATH; shuffle 64; BODY }` (shuffle holds every record). */
static sl_dataset *pipeline(const char *path, const char *body) {
    char text[1500];
    snprintf(text, sizeof text, "pipeline p {\n    files \"%s\"\n    shuffle 64 seed=3\n%s}\n", path, body);
    sl_cfg *cfg;
    sl_dataset *ds = NULL;
    if (sl_cfg_parse(text, strlen(text), "t.sl", &cfg)) return NULL;
    if (sl_pipeline_from_config(cfg, "p", NULL, &ds)) ds = NULL;
    sl_cfg_free(cfg);
    return ds;
}

/* The record an SL_EIO message names: "PATH: byte OFFSET: ..." with OFFSET a record's
 * start; -1 when the message is not that. */
static int named_record(const char *path) {
    const char *m = sl_errmsg();
    size_t n = strlen(path);
    if (strncmp(m, path, n) != 0 || strncmp(m + n, ": byte ", 7) != 0) return -1;
    long long off = strtoll(m + n + 7, NULL, 10);
    return off % RECSZ == 0 && off / RECSZ < NREC ? (int)(off / RECSZ) : -1;
}

/* The message of an element whose record r lost its bytes to a file now `size` long. */
static const char *gone(const char *path, int r, long long size) {
    static char m[700];
    long long off = (long long)r * RECSZ;
    snprintf(m, sizeof m, "%s: byte %lld: component 'record': its %d bytes are gone (file bytes %lld..%lld): "
             "the file shrank to %lld bytes after the record was read", path, off, PAYLOAD, off + 12,
             off + 12 + PAYLOAD, size);
    return m;
}

/* Unbatched: take one element, shrink the file to `size`, then every other element is
 * either intact (its bytes are its record's) or SL_EIO naming its record, once each; the
 * element kept across the shrink is checked too. */
static void unbatched_case(long long size, int *failed) {
    const char *path = write_records("u.tfrecord");
    sl_dataset *ds = path ? pipeline(path, "    map decode_raw(record, uint8, 8176)\n") : NULL;
    sl_iter *it = NULL;
    sl_element kept, e;
    sl_element_init(&kept);
    sl_element_init(&e);
    *failed = 1;
    ASSERT(ds);
    ASSERT_OK(sl_iter_create(ds, NULL, &it));
    ASSERT_OK(sl_iter_next(it, &kept));
    int kept_rec = (int)(kept.origin.offset / RECSZ);
    ASSERT_EQ(which(kept.t[0].data, sl_tensor_nbytes(&kept.t[0])), kept_rec);
    ASSERT_EQ(truncate(path, size), 0);
    bool seen[NREC] = {false};
    seen[kept_rec] = true;
    int ok = 0, eio = 0;
    sl_status s;
    while ((s = sl_iter_next(it, &e)) != SL_END) {
        if (s == SL_OK) {
            int r = which(e.t[0].data, sl_tensor_nbytes(&e.t[0]));
            if (r < 0 || r != e.origin.offset / RECSZ || lost(r, size) || seen[r]) {
                FAILF("shrunk to %lld: element from byte %lld returned as data: record %d", size,
                      (long long)e.origin.offset, r);
                sl_element_clear(&e);
                goto out;
            }
            seen[r] = true;
            ok++;
        } else {
            int r = named_record(path);
            if (s != SL_EIO || r < 0 || !lost(r, size) || seen[r]) {
                FAILF("shrunk to %lld: status %d, record %d: %s", size, s, r, sl_errmsg());
                goto out;
            }
            ASSERT_STREQ(sl_test_errmsg_line(), gone(path, r, size));
            seen[r] = true;
            eio++;
        }
        sl_element_clear(&e);
    }
    int want_lost = 0;
    for (int r = 0; r < NREC; r++) want_lost += lost(r, size) && r != kept_rec;
    ASSERT_EQ(eio, want_lost);
    ASSERT_EQ(ok + eio, NREC - 1);
    /* the element kept across the shrink tells whether its bytes went */
    s = sl_element_check(&kept);
    ASSERT_EQ(s, lost(kept_rec, size) ? SL_EIO : SL_OK);
    if (s) ASSERT_STREQ(sl_test_errmsg_line(), gone(path, kept_rec, size));
    *failed = 0;
out:
    sl_element_clear(&kept);
    sl_iter_close(it);
    sl_dataset_unref(ds);
}

TEST(test_unbatched_views_of_a_shrinking_file) {
    static const long long sizes[] = {
        20 * RECSZ + 3000,   /* inside record 20, mid page: its tail reads zeros without a fault */
        16 * RECSZ,          /* on a page boundary */
        FILESZ - 100,        /* inside the file's last page: nothing faults at all */
        0,                   /* everything */
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int failed;
        unbatched_case(sizes[i], &failed);
        if (failed || t_cur_failed) {
            FAILF("case: shrunk to %lld bytes", sizes[i]);
            return;
        }
    }
}

/* A map whose function copies (cast to float32): its result no longer views the file, so
 * the hand-out check cannot see what it was computed from; map checks the bytes its
 * function read. After the shrink every element is its record's exact values (computed
 * before the shrink: a worker may be ahead) or SL_EIO naming a lost record, never zeros. */
static void copied_case(long long size, int *failed) {
    const char *path = write_records("c.tfrecord");
    sl_dataset *ds =
        path ? pipeline(path, "    map decode_raw(record, uint8, 8176) | cast(record, float32) parallel=1\n") : NULL;
    sl_iter *it = NULL;
    sl_element e;
    sl_element_init(&e);
    *failed = 1;
    ASSERT(ds);
    ASSERT_OK(sl_iter_create(ds, NULL, &it));
    ASSERT_OK(sl_iter_next(it, &e));
    sl_element_clear(&e);
    ASSERT_EQ(truncate(path, size), 0);
    int ok = 0, eio = 0;
    sl_status s;
    while ((s = sl_iter_next(it, &e)) != SL_END) {
        if (s == SL_OK) {
            int r = (int)(e.origin.offset / RECSZ);
            const float *f = e.t[0].data;
            bool exact = e.t[0].dtype == SL_DT_F32 && sl_tensor_nbytes(&e.t[0]) == PAYLOAD * sizeof(float);
            for (size_t k = 0; exact && k < PAYLOAD; k++) exact = f[k] == (float)pattern(r, k);
            if (!exact) {
                FAILF("shrunk to %lld: the element of record %d returned as data with other values", size, r);
                sl_element_clear(&e);
                goto out;
            }
            ok++;
        } else {
            int r = named_record(path);
            if (s != SL_EIO || r < 0 || !lost(r, size)) {
                FAILF("shrunk to %lld: status %d, record %d: %s", size, s, r, sl_errmsg());
                goto out;
            }
            eio++;
        }
        sl_element_clear(&e);
    }
    ASSERT_EQ(ok + eio, NREC - 1);
    if (size == 0) ASSERT(eio >= NREC - 8); /* all but what the one worker had done before */
    *failed = 0;
out:
    sl_iter_close(it);
    sl_dataset_unref(ds);
}

TEST(test_copying_map_of_a_shrinking_file) {
    static const long long sizes[] = {20 * RECSZ + 3000, FILESZ - 100, 0};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int failed;
        copied_case(sizes[i], &failed);
        if (failed || t_cur_failed) {
            FAILF("case: shrunk to %lld bytes", sizes[i]);
            return;
        }
    }
}

/* The record index of each row of every batch of `body`'s pipeline over an intact copy. */
static int reference_batches(const char *body, int rows[][4], int *nrows) {
    const char *path = write_records("ref.tfrecord");
    sl_dataset *ds = path ? pipeline(path, body) : NULL;
    sl_iter *it;
    if (!ds || sl_iter_create(ds, NULL, &it)) return -1;
    sl_element e;
    sl_element_init(&e);
    int nb = 0;
    while (sl_iter_next(it, &e) == SL_OK) {
        const sl_tensor *t = &e.t[0];
        nrows[nb] = (int)t->dims[0];
        for (int k = 0; k < nrows[nb]; k++)
            rows[nb][k] = t->dtype == SL_DT_BYTES
                              ? which(((const sl_bytes *)t->data)[k].ptr, ((const sl_bytes *)t->data)[k].len)
                              : which((const uint8_t *)t->data + (size_t)k * PAYLOAD, PAYLOAD);
        sl_element_clear(&e);
        nb++;
    }
    sl_iter_close(it);
    sl_dataset_unref(ds);
    return nb;
}

/* Batched: after the first batch the file shrinks to `size`. Batch j (j >= settled) is
 * exactly its reference rows when they are all intact, else SL_EIO naming the first lost
 * row's record; before `settled` (batches a worker may have assembled, or begun, before the
 * shrink) it may also be its exact rows, or SL_EIO naming any of its lost rows. */
static void batched_case(const char *body, long long size, int settled, int *failed) {
    int rows[NREC][4], nrows[NREC];
    int nb = reference_batches(body, rows, nrows);
    const char *path = write_records("b.tfrecord");
    sl_dataset *ds = path ? pipeline(path, body) : NULL;
    sl_iter *it = NULL;
    sl_element e;
    sl_element_init(&e);
    *failed = 1;
    ASSERT(nb == NREC / 4 && ds);
    ASSERT_OK(sl_iter_create(ds, NULL, &it));
    ASSERT_OK(sl_iter_next(it, &e));
    sl_element_clear(&e);
    ASSERT_EQ(truncate(path, size), 0);
    int eio = 0, must = 0;
    for (int j = 1; j < nb; j++) {
        int first_lost = -1;
        for (int k = 0; k < nrows[j] && first_lost < 0; k++)
            if (lost(rows[j][k], size)) first_lost = rows[j][k];
        must += first_lost >= 0 && j >= settled;
        sl_status s = sl_iter_next(it, &e);
        if (s == SL_OK && (first_lost < 0 || j < settled)) {
            const sl_tensor *t = &e.t[0];
            for (int k = 0; k < nrows[j]; k++) {
                int r = t->dtype == SL_DT_BYTES
                            ? which(((const sl_bytes *)t->data)[k].ptr, ((const sl_bytes *)t->data)[k].len)
                            : which((const uint8_t *)t->data + (size_t)k * PAYLOAD, PAYLOAD);
                if (r != rows[j][k]) {
                    FAILF("shrunk to %lld: batch %d row %d is record %d, want %d", size, j, k, r, rows[j][k]);
                    goto out;
                }
            }
        } else if (s == SL_EIO && first_lost >= 0) {
            /* a batch being assembled while the file shrank may have copied its first lost
             * row intact: it names a later one */
            int named = named_record(path), row = -1;
            for (int k = 0; k < nrows[j] && row < 0; k++)
                if (rows[j][k] == named && lost(named, size)) row = k;
            if (j < settled && row >= 0) first_lost = named;
            if (strcmp(sl_test_errmsg_line(), gone(path, first_lost, size)) != 0) {
                FAILF("shrunk to %lld: batch %d: message \"%s\", want \"%s\"", size, j, sl_test_errmsg_line(),
                      gone(path, first_lost, size));
                goto out;
            }
            eio++;
        } else {
            FAILF("shrunk to %lld: batch %d (first lost row: record %d): status %d: %s", size, j, first_lost, s,
                  s ? sl_errmsg() : "returned as data");
            goto out;
        }
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    ASSERT(eio >= must && must > 0);
    *failed = 0;
out:
    sl_element_clear(&e);
    sl_iter_close(it);
    sl_dataset_unref(ds);
}

TEST(test_batches_of_a_shrinking_file) {
    int failed;
    /* batch stacks the records' bytes (a copy) */
    batched_case("    batch 4\n", 10 * RECSZ + 3000, 1, &failed);
    if (failed || t_cur_failed) return;
    batched_case("    batch 4\n", FILESZ - 100, 1, &failed);
    if (failed || t_cur_failed) return;
    /* map_batch copies each mapped element into its slot; its one worker may have assembled
     * batches 1 and 2 before the shrink (two in flight), never batch 3 */
    batched_case("    map decode_raw(record, uint8, 8176) parallel=1\n    batch 4\n", 8 * RECSZ + 3000, 3, &failed);
    if (failed || t_cur_failed) return;
    batched_case("    map decode_raw(record, uint8, 8176) parallel=1\n    batch 4\n", FILESZ - 100, 3, &failed);
}

int main(void) {
    if (!sl_test_mkdtemp(dir, sizeof dir, "sluice-test-mapped")) return 1;
    RUN(test_unbatched_views_of_a_shrinking_file);
    RUN(test_batches_of_a_shrinking_file);
    RUN(test_copying_map_of_a_shrinking_file);
    sl_test_rm_rf(dir);
    TEST_MAIN_END();
}
