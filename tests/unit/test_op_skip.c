/* pipeline/ops/skip.c: the elements after the first N, their cardinality; skipping past the
 * end gives nothing (cardinality 0); over an endless input skip starts N elements in; over an
 * input of unknown cardinality it is unknown. skip's counts at 2^63-1 are in test_counts. */
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "test.h"

TEST(test_skip_past_the_end_and_unknown) {
    sl_dataset *r, *k, *past, *inf, *ki, *head, *odd, *ko;
    int64_t v[16];
    ASSERT_OK(sl_ds_range(0, 5, 1, &r));
    ASSERT_OK(sl_ds_skip(r, 2, &k));
    ASSERT_STREQ(sl_dataset_op(k), "skip");
    ASSERT_EQ(sl_dataset_cardinality(k), 3);
    ASSERT_EQ(sl_test_values(k, NULL, v, 16), 3);
    ASSERT_MEMEQ(v, ((int64_t[]){2, 3, 4}), 3 * sizeof(int64_t));
    ASSERT_OK(sl_ds_skip(r, 9, &past));
    ASSERT_EQ(sl_dataset_cardinality(past), 0);
    ASSERT_EQ(sl_test_values(past, NULL, v, 16), 0);
    /* endless: the stream begins 7 elements in (0 1 2 3 4 0 1 | 2 3 4 0 ...) */
    ASSERT_OK(sl_ds_repeat(r, SL_INFINITE, &inf));
    ASSERT_OK(sl_ds_skip(inf, 7, &ki));
    ASSERT_EQ(sl_dataset_cardinality(ki), SL_INFINITE);
    ASSERT_OK(sl_ds_take(ki, 6, &head));
    ASSERT_EQ(sl_test_values(head, NULL, v, 16), 6);
    ASSERT_MEMEQ(v, ((int64_t[]){2, 3, 4, 0, 1, 2}), 6 * sizeof(int64_t));
    /* a filter's cardinality is unknown: so is skip's */
    ASSERT_OK(sl_ds_filter(r, sl_test_is_odd, NULL, &odd));
    ASSERT_OK(sl_ds_skip(odd, 1, &ko));
    ASSERT_EQ(sl_dataset_cardinality(ko), SL_UNKNOWN_CARD);
    ASSERT_EQ(sl_test_values(ko, NULL, v, 16), 1);
    ASSERT_EQ(v[0], 3);
    sl_dataset_unref(ko);
    sl_dataset_unref(odd);
    sl_dataset_unref(head);
    sl_dataset_unref(ki);
    sl_dataset_unref(inf);
    sl_dataset_unref(past);
    sl_dataset_unref(k);
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_skip_past_the_end_and_unknown);
    TEST_MAIN_END();
}
