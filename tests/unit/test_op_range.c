/* pipeline/ops/range.c: steps up and down, the cardinality, step 0 refused; with take, skip
 * and repeat over it (their edges at 2^63-1 are in test_counts). */
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "test.h"

TEST(test_range_take_skip_repeat) {
    sl_dataset *r, *t, *k, *rep;
    int64_t v[64];
    ASSERT_OK(sl_ds_range(0, 10, 3, &r));
    ASSERT_EQ(sl_dataset_cardinality(r), 4);
    ASSERT_EQ(sl_test_values(r, NULL, v, 64), 4);
    ASSERT_EQ(v[0], 0); ASSERT_EQ(v[3], 9);
    ASSERT_OK(sl_ds_take(r, 3, &t));
    ASSERT_OK(sl_ds_skip(t, 1, &k));
    ASSERT_EQ(sl_dataset_cardinality(k), 2);
    ASSERT_EQ(sl_test_values(k, NULL, v, 64), 2);
    ASSERT_EQ(v[0], 3); ASSERT_EQ(v[1], 6);
    ASSERT_OK(sl_ds_repeat(k, 3, &rep));
    ASSERT_EQ(sl_dataset_cardinality(rep), 6);
    ASSERT_EQ(sl_test_values(rep, NULL, v, 64), 6);
    ASSERT_EQ(v[4], 3); ASSERT_EQ(v[5], 6);
    sl_dataset_unref(rep);
    ASSERT_OK(sl_ds_repeat(k, 0, &rep));
    ASSERT_EQ(sl_test_values(rep, NULL, v, 64), 0);
    sl_dataset_unref(rep);
    /* forever over an empty input ends instead of spinning */
    sl_dataset *empty, *forever;
    ASSERT_OK(sl_ds_range(0, 0, 1, &empty));
    ASSERT_OK(sl_ds_repeat(empty, SL_INFINITE, &forever));
    ASSERT_EQ(sl_test_values(forever, NULL, v, 64), 0);
    sl_dataset_unref(forever);
    sl_dataset_unref(empty);
    /* take(-1) = all, skip(-1) = none left */
    sl_dataset_unref(t);
    ASSERT_OK(sl_ds_take(r, -1, &t));
    ASSERT_EQ(sl_test_values(t, NULL, v, 64), 4);
    sl_dataset_unref(t);
    sl_dataset_unref(k);
    ASSERT_OK(sl_ds_skip(r, -1, &k));
    ASSERT_EQ(sl_test_values(k, NULL, v, 64), 0);
    sl_dataset_unref(k);
    ASSERT_EQ(sl_ds_range(0, 1, 0, &t), SL_EINVAL);
    ASSERT(t == NULL);
    /* negative step */
    sl_dataset *neg;
    ASSERT_OK(sl_ds_range(5, 0, -2, &neg));
    ASSERT_EQ(sl_dataset_cardinality(neg), 3);
    ASSERT_EQ(sl_test_values(neg, NULL, v, 64), 3);
    ASSERT_EQ(v[2], 1);
    sl_dataset_unref(neg);
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_range_take_skip_repeat);
    TEST_MAIN_END();
}
