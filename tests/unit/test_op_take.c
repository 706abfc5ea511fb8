/* pipeline/ops/take.c: the first N elements of an endless input, in order, then the end (at
 * every later call too); take 0 gives nothing; the cardinality is N over an endless input and
 * unknown over an input whose own is unknown. take's counts at 2^63-1 are in test_counts. */
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "test.h"

TEST(test_take_endless_and_unknown) {
    sl_dataset *r, *inf, *t, *none, *odd, *t2;
    ASSERT_OK(sl_ds_range(0, 3, 1, &r));
    ASSERT_OK(sl_ds_repeat(r, SL_INFINITE, &inf));
    ASSERT_OK(sl_ds_take(inf, 7, &t));
    ASSERT_STREQ(sl_dataset_op(t), "take");
    ASSERT_EQ(sl_dataset_cardinality(t), 7);
    int64_t v[16];
    ASSERT_EQ(sl_test_values(t, NULL, v, 16), 7);
    ASSERT_MEMEQ(v, ((int64_t[]){0, 1, 2, 0, 1, 2, 0}), 7 * sizeof(int64_t));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(t, &it, &e));
    ASSERT_EQ(sl_test_drain(it), 7);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    ASSERT_OK(sl_ds_take(inf, 0, &none));
    ASSERT_EQ(sl_dataset_cardinality(none), 0);
    ASSERT_EQ(sl_test_values(none, NULL, v, 16), 0);
    /* over a filter, whose cardinality is unknown: unknown, and the first 2 it keeps */
    ASSERT_OK(sl_ds_filter(r, sl_test_is_odd, NULL, &odd));
    ASSERT_OK(sl_ds_take(odd, 2, &t2));
    ASSERT_EQ(sl_dataset_cardinality(t2), SL_UNKNOWN_CARD);
    ASSERT_EQ(sl_test_values(t2, NULL, v, 16), 1); /* range(0, 3) has one odd value */
    ASSERT_EQ(v[0], 1);
    sl_dataset_unref(t2);
    sl_dataset_unref(odd);
    sl_dataset_unref(none);
    sl_dataset_unref(t);
    sl_dataset_unref(inf);
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_take_endless_and_unknown);
    TEST_MAIN_END();
}
