/* pipeline/ops/tfrecord.c: records of many files byte for byte, missing files, sharding
 * by record, a corrupt record in the middle (its file and offset; skipped and counted with
 * skip_corrupt), and each element's origin (file, offset) through the ops that follow. */
#include "sluice/fn.h"
#include "sluice/log.h"
#include "sluice/pipeline.h"
#include "sluice/tfrecord.h"
#include "helper_parts.h"
#include "test.h"

TEST(test_tfrecord_files) {
    char pat[300];
    ASSERT_OK(sl_test_write_parts(pat, sizeof pat)); /* pat: all six */
    const char *pats[] = {pat};
    sl_dataset *ds;
    ASSERT_OK(sl_ds_tfrecord(pats, 1, NULL, &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "tfrecord");
    sl_iter *it;
    ASSERT_OK(sl_iter_create(ds, NULL, &it));
    sl_element e, keep;
    sl_element_init(&e);
    sl_element_init(&keep);
    for (int f = 0; f < SL_TEST_NFILES; f++)
        for (int r = 0; r < SL_TEST_NREC; r++) {
            ASSERT_OK(sl_iter_next(it, &e));
            ASSERT(sl_test_part_is(&e, f, r));
            if (f == 0 && r == 3) sl_element_move(&keep, &e);
            else sl_element_clear(&e);
        }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    ASSERT(sl_test_part_is(&keep, 0, 3)); /* the record outlives its reader and dataset */
    sl_element_clear(&keep);

    /* a plain path that does not exist, a pattern that matches nothing */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/nope.tfrecord", sl_test_parts_dir());
    const char *m1[] = {missing};
    ASSERT_EQ(sl_ds_tfrecord(m1, 1, NULL, &ds), SL_ENOTFOUND);
    ASSERT(ds == NULL);
    char want[600];
    snprintf(want, sizeof want, "tfrecord: no file matches '%s'\n---> HINT: check the path (relative "
             "paths are resolved from the current directory)", missing);
    ASSERT_STREQ(sl_errmsg(), want);
    snprintf(missing, sizeof missing, "%s/*.nothing", sl_test_parts_dir());
    ASSERT_EQ(sl_ds_list_files(m1, 1, false, 0, &ds), SL_ENOTFOUND);
    snprintf(want, sizeof want, "list_files: no file matches '%s'", missing);
    ASSERT(strncmp(sl_errmsg(), want, strlen(want)) == 0);
    /* no paths at all: empty */
    ASSERT_OK(sl_ds_tfrecord(NULL, 0, NULL, &ds));
    ASSERT_OK(sl_iter_create(ds, NULL, &it));
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds);

    /* shard by data over records: every 3rd record from position 1 */
    char p2[300];
    sl_test_part_path(p2, sizeof p2, 2);
    const char *one[] = {p2};
    sl_dataset *sh;
    ASSERT_OK(sl_ds_tfrecord(one, 1, NULL, &ds));
    ASSERT_OK(sl_ds_shard(ds, 3, 1, &sh));
    ASSERT_OK(sl_iter_create(sh, NULL, &it));
    for (int r = 1; r < SL_TEST_NREC; r += 3) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT(sl_test_part_is(&e, 2, r));
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(sh);
    sl_dataset_unref(ds);
}

/* A corrupt record in file 2 of 0..3: records before it, the error (file and offset),
 * then file 3's records; with skip_corrupt the record is skipped and counted. */
TEST(test_tfrecord_corrupt_middle) {
    ASSERT_OK(sl_test_write_parts(NULL, 0));
    char p[300];
    sl_test_part_path(p, sizeof p, 2);
    uint64_t off = sl_test_part_offset(2, 4);
    FILE *fp = fopen(p, "r+b");
    ASSERT(fp);
    ASSERT_EQ(fseek(fp, (long)(off + 12 + 1), SEEK_SET), 0); /* a data byte of record 4 */
    int ch = fgetc(fp);
    ASSERT_EQ(fseek(fp, (long)(off + 12 + 1), SEEK_SET), 0);
    fputc(ch ^ 0x5a, fp);
    fclose(fp);
    char paths[4][300];
    const char *pp[4];
    for (int f = 0; f < 4; f++) {
        sl_test_part_path(paths[f], sizeof paths[f], f);
        pp[f] = paths[f];
    }
    int old_level = sl_log_level;
    sl_log_set_level(SL_LOG_ERROR); /* the skip warning is expected */
    for (int skip = 0; skip <= 1; skip++) {
        sl_tfr_read_opts ro = sl_tfr_read_opts_default();
        ro.skip_corrupt = skip;
        sl_dataset *ds;
        ASSERT_OK(sl_ds_tfrecord(pp, 4, &ro, &ds));
        sl_iter *it;
        ASSERT_OK(sl_iter_create(ds, NULL, &it));
        sl_element e;
        sl_element_init(&e);
        for (int f = 0; f < 4; f++)
            for (int r = 0; r < SL_TEST_NREC; r++) {
                if (f == 2 && r == 4) {
                    if (skip) continue;
                    ASSERT_EQ(sl_iter_next(it, &e), SL_ECORRUPT);
                    char want[400];
                    snprintf(want, sizeof want, "op 'tfrecord': %s: byte %llu: ", p, (unsigned long long)off);
                    ASSERT_CONTAINS(sl_errmsg(), "data CRC mismatch");
                    if (strncmp(sl_errmsg(), want, strlen(want)) != 0) {
                        FAILF("message: %s", sl_errmsg());
                        return;
                    }
                    break; /* the rest of file 2 is lost: the reader is finished */
                }
                sl_status s = sl_iter_next(it, &e);
                if (s) FAILF("file %d record %d: %d %s", f, r, s, sl_errmsg());
                ASSERT_OK(s);
                ASSERT(sl_test_part_is(&e, f, r));
                sl_element_clear(&e);
            }
        ASSERT_EQ(sl_iter_next(it, &e), SL_END);
        ASSERT_EQ(sl_iter_errors_ignored(it), skip ? 1 : 0);
        sl_iter_close(it);
        sl_dataset_unref(ds);
    }
    sl_log_set_level(old_level);
    ASSERT_OK(sl_test_write_parts(NULL, 0)); /* repair for later tests */
}

static sl_status pass(void *ctx, sl_element *e, const sl_fn_call *call) { return SL_OK; }

/* Fails on record 4 of file 3. */
static sl_status fail_3_4(void *ctx, sl_element *e, const sl_fn_call *call) {
    return sl_test_part_is(e, 3, 4) ? sl_err(SL_EINVAL, "this one is bad") : SL_OK;
}

/* Which (file, record) an origin names: -1 if none matches. */
static int origin_rec(const sl_origin *o) {
    for (int f = 0; f < SL_TEST_NFILES; f++) {
        char p[300];
        sl_test_part_path(p, sizeof p, f);
        if (o->path != sl_origin_path(p)) continue; /* interned: the same pointer */
        for (int r = 0; r < SL_TEST_NREC; r++)
            if ((uint64_t)o->offset == sl_test_part_offset(f, r)) return f * 100 + r;
    }
    return -1;
}

/* Records carry their file and offset through interleave, shuffle, map and prefetch; a
 * batch has none; a function's error names the record. */
TEST(test_element_origin) {
    char pat[300];
    ASSERT_OK(sl_test_write_parts(pat, sizeof pat)); /* pat: all six */
    const char *pats[] = {pat};
    sl_dataset *lf, *il, *sh, *mp, *pf, *bt;
    sl_fn *id, *bad;
    ASSERT_OK(sl_fn_custom("pass", pass, NULL, NULL, &id));
    ASSERT_OK(sl_fn_custom("fail_3_4", fail_3_4, NULL, NULL, &bad));
    ASSERT_OK(sl_ds_list_files(pats, 1, false, 0, &lf));
    sl_interleave_opts io = sl_interleave_opts_default();
    io.cycle_length = 3;
    io.parallelism = 2;
    ASSERT_OK(sl_ds_interleave_tfrecord(lf, NULL, &io, &il));
    ASSERT_OK(sl_ds_shuffle(il, 10, 5, false, &sh));
    ASSERT_OK(sl_ds_map(sh, id, 3, true, &mp));
    ASSERT_OK(sl_ds_prefetch(mp, 2, &pf));
    sl_iter *it;
    ASSERT_OK(sl_iter_create(pf, NULL, &it));
    sl_element e, keep;
    sl_element_init(&e);
    sl_element_init(&keep);
    int seen[SL_TEST_NFILES * 100] = {0}, n = 0;
    while (sl_iter_next(it, &e) == SL_OK) {
        int fr = origin_rec(&e.origin);
        ASSERT(fr >= 0);
        ASSERT(sl_test_part_is(&e, fr / 100, fr % 100)); /* the origin is this element's own */
        ASSERT_EQ(seen[fr]++, 0);
        n++;
        if (fr == 502) sl_element_move(&keep, &e);
        else sl_element_clear(&e);
    }
    ASSERT_EQ(n, SL_TEST_NFILES * SL_TEST_NREC);
    sl_iter_close(it);
    sl_dataset_unref(pf);
    sl_dataset_unref(mp);
    sl_dataset_unref(sh);
    sl_dataset_unref(il);
    /* the origin outlives every dataset that read it */
    char p5[300];
    sl_test_part_path(p5, sizeof p5, 5);
    ASSERT_STREQ(keep.origin.path, p5);
    ASSERT_EQ(keep.origin.offset, (int64_t)sl_test_part_offset(5, 2));
    sl_element_clear(&keep);
    ASSERT(keep.origin.path == NULL);

    /* an in-memory cache's replay keeps each record's origin */
    sl_dataset *src, *ca;
    ASSERT_OK(sl_ds_tfrecord(pats, 1, NULL, &src));
    ASSERT_OK(sl_ds_cache(src, NULL, &ca));
    for (int pass = 0; pass < 2; pass++) {
        ASSERT_OK(sl_iter_create(ca, NULL, &it));
        int k = 0;
        while (sl_iter_next(it, &e) == SL_OK) {
            int fr = origin_rec(&e.origin);
            ASSERT(fr >= 0);
            ASSERT(sl_test_part_is(&e, fr / 100, fr % 100));
            sl_element_clear(&e);
            k++;
        }
        ASSERT_EQ(k, SL_TEST_NFILES * SL_TEST_NREC);
        sl_iter_close(it);
    }
    sl_dataset_unref(ca);
    sl_dataset_unref(src);

    /* a batch's origin is unknown (it has many) */
    ASSERT_OK(sl_ds_tfrecord(pats, 1, NULL, &il));
    sl_batch_opts bo = sl_batch_opts_default(4);
    ASSERT_OK(sl_ds_batch(il, &bo, &bt));
    ASSERT_OK(sl_iter_create(bt, NULL, &it));
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT(e.origin.path == NULL);
    sl_element_clear(&e);
    sl_iter_close(it);
    sl_dataset_unref(bt);

    /* a function's error names the record (map, and map fused with batch) */
    char p3[300], want[600];
    sl_test_part_path(p3, sizeof p3, 3);
    snprintf(want, sizeof want, "%s: byte %llu: op 'map': fail_3_4: this one is bad", p3,
             (unsigned long long)sl_test_part_offset(3, 4));
    ASSERT_OK(sl_ds_map(il, bad, 2, true, &mp));
    for (int fused = 0; fused < 2; fused++) {
        sl_dataset *top = mp;
        if (fused) ASSERT_OK(sl_ds_batch(mp, &bo, &top));
        ASSERT_STREQ(sl_dataset_op(top), fused ? "map_batch" : "map");
        ASSERT_OK(sl_iter_create(top, NULL, &it));
        sl_status st;
        while ((st = sl_iter_next(it, &e)) == SL_OK) sl_element_clear(&e);
        ASSERT_EQ(st, SL_EINVAL);
        ASSERT_STREQ(sl_errmsg(), want);
        sl_iter_close(it);
        if (fused) sl_dataset_unref(top);
    }
    sl_dataset_unref(mp);
    sl_dataset_unref(il);
    sl_dataset_unref(lf);
    sl_fn_unref(id);
    sl_fn_unref(bad);
}

int main(void) {
    RUN(test_tfrecord_files);
    RUN(test_tfrecord_corrupt_middle);
    RUN(test_element_origin);
    TEST_MAIN_END();
}
