/* pipeline/ops/rebatch.c: tf.data's rebatch. The API reference's examples
 * (range(8).batch(4).rebatch(batch_size=2) and range(16).batch(4).rebatch(batch_size=[2, 1, 1])),
 * batches that span input batches, drop_remainder at the end of input, the sizes refused
 * exactly, and the cardinality. */
#include <stdint.h>

#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "helper_seq.h"
#include "test.h"

static sl_status batched_range(int64_t n, int64_t size, sl_dataset **out) {
    sl_dataset *r;
    sl_status s = sl_ds_range(0, n, 1, &r);
    if (s) return s;
    sl_batch_opts o = sl_batch_opts_default(size);
    s = sl_ds_batch(r, &o, out);
    sl_dataset_unref(r);
    return s;
}

static int rebatched(int64_t n, int64_t size, const int64_t *sizes, int ns, bool drop, char *buf, size_t cap) {
    sl_dataset *b, *ds;
    if (batched_range(n, size, &b)) return -2;
    if (sl_ds_rebatch(b, sizes, ns, drop, &ds)) return -2;
    int k = sl_test_vecs(ds, 0, buf, cap);
    sl_dataset_unref(ds);
    sl_dataset_unref(b);
    return k;
}

/* Dataset.rebatch's examples */
TEST(test_rebatch_doc_examples) {
    char got[512];
    /* [array([0, 1]), array([2, 3]), array([4, 5]), array([6, 7])] */
    ASSERT_EQ(rebatched(8, 4, (int64_t[]){2}, 1, false, got, sizeof got), 4);
    ASSERT_STREQ(got, "[0 1] [2 3] [4 5] [6 7] ");
    /* [array([0, 1]), array([2]), array([3]), array([4, 5]), array([6]), array([7]),
     *  array([8, 9]), array([10]), array([11]), array([12, 13]), array([14]), array([15])] */
    ASSERT_EQ(rebatched(16, 4, (int64_t[]){2, 1, 1}, 3, false, got, sizeof got), 12);
    ASSERT_STREQ(got, "[0 1] [2] [3] [4 5] [6] [7] [8 9] [10] [11] [12 13] [14] [15] ");
}

/* as unbatch then batch: output batches span input batches; the last, smaller one is kept
 * or, with drop_remainder, dropped */
TEST(test_rebatch_spanning_and_remainder) {
    char got[512];
    ASSERT_EQ(rebatched(10, 3, (int64_t[]){4}, 1, false, got, sizeof got), 3);
    ASSERT_STREQ(got, "[0 1 2 3] [4 5 6 7] [8 9] ");
    ASSERT_EQ(rebatched(10, 3, (int64_t[]){4}, 1, true, got, sizeof got), 2);
    ASSERT_STREQ(got, "[0 1 2 3] [4 5 6 7] ");
    ASSERT_EQ(rebatched(7, 2, (int64_t[]){3, 1}, 2, false, got, sizeof got), 3);
    ASSERT_STREQ(got, "[0 1 2] [3] [4 5 6] ");
    ASSERT_EQ(rebatched(8, 2, (int64_t[]){3, 1}, 2, true, got, sizeof got), 4); /* [7] is a full batch of 1 */
    ASSERT_STREQ(got, "[0 1 2] [3] [4 5 6] [7] ");
    ASSERT_EQ(rebatched(9, 2, (int64_t[]){3, 1}, 2, true, got, sizeof got), 4); /* [8] is 1 of 3: dropped */
    ASSERT_STREQ(got, "[0 1 2] [3] [4 5 6] [7] ");
    /* ragged inputs, and input batches of 0 rows */
    sl_dataset *rows, *ds;
    ASSERT_OK(sl_test_from_rows((int64_t[]){1, 2, 3, 4, 5, 6}, (int[]){1, 0, 3, 2}, 4, &rows));
    ASSERT_OK(sl_ds_rebatch(rows, (int64_t[]){2}, 1, false, &ds));
    ASSERT_EQ(sl_test_vecs(ds, 0, got, sizeof got), 3);
    ASSERT_STREQ(got, "[1 2] [3 4] [5 6] ");
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_EQ(sl_test_drain(it), 3);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    sl_dataset_unref(rows);
}

TEST(test_rebatch_errors_and_cardinality) {
    sl_dataset *b, *ds = (sl_dataset *)1, *r, *sc, *none, *dn, *inf, *di;
    ASSERT_OK(batched_range(8, 4, &b));
    ASSERT_EQ(sl_ds_rebatch(b, (int64_t[]){2, 0}, 2, false, &ds), SL_EINVAL);
    ASSERT(ds == NULL);
    ASSERT_STREQ(sl_errmsg(), "rebatch: batch size 1 is 0 (must be 1..16777216)");
    ASSERT_EQ(sl_ds_rebatch(b, (int64_t[]){2}, 0, false, &ds), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "rebatch: 0 batch sizes (must be 1..64)");
    ASSERT_OK(sl_ds_rebatch(b, (int64_t[]){3}, 1, false, &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "rebatch");
    ASSERT_EQ(sl_dataset_cardinality(ds), SL_UNKNOWN_CARD);
    ASSERT_OK(sl_ds_range(0, 3, 1, &r));
    ASSERT_OK(sl_ds_rebatch(r, (int64_t[]){2}, 1, false, &sc));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(sc, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'rebatch': component 'value' is int64[], a scalar: it has no rows to split\n"
                              "---> HINT: unbatch and rebatch split every component along its first dimension: "
                              "batch first");
    sl_iter_close(it);
    ASSERT_OK(sl_ds_take(b, 0, &none));
    ASSERT_OK(sl_ds_rebatch(none, (int64_t[]){2}, 1, true, &dn));
    ASSERT_EQ(sl_dataset_cardinality(dn), 0);
    ASSERT_OK(sl_ds_repeat(b, SL_INFINITE, &inf));
    ASSERT_OK(sl_ds_rebatch(inf, (int64_t[]){3}, 1, false, &di));
    ASSERT_EQ(sl_dataset_cardinality(di), SL_INFINITE);
    sl_dataset_unref(di);
    sl_dataset_unref(inf);
    sl_dataset_unref(dn);
    sl_dataset_unref(none);
    sl_dataset_unref(sc);
    sl_dataset_unref(r);
    sl_dataset_unref(ds);
    sl_dataset_unref(b);
}

int main(void) {
    RUN(test_rebatch_doc_examples);
    RUN(test_rebatch_spanning_and_remainder);
    RUN(test_rebatch_errors_and_cardinality);
    TEST_MAIN_END();
}
