/* pipeline/ops/save_load.c: sl_ds_save then sl_ds_load gives the same elements bit for bit
 * (bytes, floats with NaN, batches), the cardinality from the manifest; a save replaces the
 * one before; damage is SL_ECORRUPT naming the file and byte; a failed save leaves nothing. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/pipeline.h"
#include "helper_files.h"
#include "helper_iter.h"
#include "helper_snap.h"
#include "test.h"

static char root[256];

TEST(test_save_load_round_trip) {
    char path[300];
    snprintf(path, sizeof path, "%s/saved", root);
    for (int64_t batch = 0; batch <= 4; batch += 4) {
        sl_dataset *up, *ld;
        ASSERT_OK(sl_test_snap_upstream(13, batch, &up));
        sl_element *ref, *got;
        int nref, n;
        ASSERT_EQ(sl_test_snap_collect(up, &ref, &nref), SL_END);
        sl_snapshot_opts o = sl_snapshot_opts_default();
        o.shard_bytes = 300; /* several shards */
        ASSERT_OK(sl_ds_save(up, path, &o)); /* the second time: replaces the first */
        ASSERT_OK(sl_ds_load(path, &ld));
        ASSERT_EQ(sl_dataset_cardinality(ld), nref);
        ASSERT_STREQ(sl_dataset_op(ld), "load");
        atomic_store(&sl_test_snap_calls, 0);
        ASSERT_EQ(sl_test_snap_collect(ld, &got, &n), SL_END);
        ASSERT(sl_test_snap_same(ref, nref, got, n));
        ASSERT_EQ(atomic_load(&sl_test_snap_calls), 0);
        sl_test_snap_free(got, n);
        sl_test_snap_free(ref, nref);
        sl_dataset_unref(ld);
        sl_dataset_unref(up);
    }
    /* an empty dataset saves and loads as empty */
    sl_dataset *r, *ld;
    ASSERT_OK(sl_ds_range(0, 0, 1, &r));
    ASSERT_OK(sl_ds_save(r, path, NULL));
    ASSERT_OK(sl_ds_load(path, &ld));
    ASSERT_EQ(sl_dataset_cardinality(ld), 0);
    sl_element *got;
    int n;
    ASSERT_EQ(sl_test_snap_collect(ld, &got, &n), SL_END);
    ASSERT_EQ(n, 0);
    sl_test_snap_free(got, n);
    sl_dataset_unref(ld);
    sl_dataset_unref(r);
    sl_test_rm_rf(path);
}

/* tf.data's API reference, Dataset.save / Dataset.load: range(2) saved, loaded, printed:
 * 0, 1 (in order; its cardinality known) */
TEST(test_tf_data_save_load_example) {
    char path[300];
    snprintf(path, sizeof path, "%s/example", root);
    sl_dataset *r, *ld;
    ASSERT_OK(sl_ds_range(0, 2, 1, &r));
    ASSERT_OK(sl_ds_save(r, path, NULL));
    ASSERT_OK(sl_ds_load(path, &ld));
    ASSERT_EQ(sl_dataset_cardinality(ld), 2);
    int64_t v[4];
    ASSERT_EQ(sl_test_values(ld, NULL, v, 4), 2);
    ASSERT_EQ(v[0], 0);
    ASSERT_EQ(v[1], 1);
    sl_dataset_unref(ld);
    sl_dataset_unref(r);
    sl_test_rm_rf(path);
}

TEST(test_save_load_errors) {
    char path[300], f[400];
    snprintf(path, sizeof path, "%s/err", root);
    sl_dataset *ld, *up;
    ASSERT_EQ(sl_ds_load(path, &ld), SL_ENOTFOUND);
    ASSERT(ld == NULL);
    ASSERT_OK(sl_test_snap_upstream(8, 0, &up));
    ASSERT_OK(sl_ds_save(up, path, NULL));
    /* a flipped byte in a chunk: SL_ECORRUPT from next, naming the shard and the byte */
    snprintf(f, sizeof f, "%s/shard-00000.sls", path);
    FILE *fp = fopen(f, "r+b");
    ASSERT(fp);
    fseek(fp, 100, SEEK_SET);
    int ch = fgetc(fp);
    fseek(fp, 100, SEEK_SET);
    fputc(ch ^ 1, fp);
    fclose(fp);
    ASSERT_OK(sl_ds_load(path, &ld));
    sl_element *got;
    int n;
    ASSERT_EQ(sl_test_snap_collect(ld, &got, &n), SL_ECORRUPT);
    ASSERT(n < 8);
    char want[500];
    snprintf(want, sizeof want, "%s: byte ", f);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT_CONTAINS(sl_errmsg(), "op 'load'");
    sl_test_snap_free(got, n);
    sl_dataset_unref(ld);
    /* truncated: refused when an iterator is made */
    struct stat st;
    ASSERT_EQ(stat(f, &st), 0);
    ASSERT_EQ(truncate(f, st.st_size - 1), 0);
    ASSERT_OK(sl_ds_load(path, &ld));
    sl_iter *it;
    ASSERT_EQ(sl_iter_create(ld, NULL, &it), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "snapshot shard: truncated");
    sl_dataset_unref(ld);
    /* a damaged manifest: refused by load itself */
    snprintf(f, sizeof f, "%s/done", path);
    ASSERT_EQ(truncate(f, 20), 0);
    ASSERT_EQ(sl_ds_load(path, &ld), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "snapshot manifest: truncated");
    /* an input error: returned, nothing left at the path */
    char p2[300];
    snprintf(p2, sizeof p2, "%s/failed", root);
    sl_dataset *bad;
    ASSERT_OK(sl_test_range_map(20, "fail7", sl_test_fail_mod7, NULL, 1, &bad));
    ASSERT(sl_ds_save(bad, p2, NULL) < 0);
    ASSERT(access(p2, F_OK) != 0);
    ASSERT_EQ(sl_test_count_files(root), 1); /* only "err": no temporary left */
    sl_dataset_unref(bad);
    /* an endless dataset is refused */
    sl_dataset *rep;
    ASSERT_OK(sl_ds_repeat(up, SL_INFINITE, &rep));
    ASSERT_EQ(sl_ds_save(rep, p2, NULL), SL_EINVAL);
    sl_dataset_unref(rep);
    /* an unwritable place: SL_EIO naming it */
    char file[300];
    snprintf(file, sizeof file, "%s/plain", root);
    ASSERT_EQ(sl_test_write_text(file, "x"), 0);
    snprintf(p2, sizeof p2, "%s/sub/saved", file);
    ASSERT_EQ(sl_ds_save(up, p2, NULL), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), file);
    unlink(file);
    sl_dataset_unref(up);
    sl_test_rm_rf(path);
}

int main(void) {
    if (!sl_test_mkdtemp(root, sizeof root, "saveload")) return 1;
    RUN(test_save_load_round_trip);
    RUN(test_tf_data_save_load_example);
    RUN(test_save_load_errors);
    sl_test_rm_rf(root);
    TEST_MAIN_END();
}
