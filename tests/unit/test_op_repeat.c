/* pipeline/ops/repeat.c: -1 and SL_INFINITE both repeat forever; a count below -1 that is not
 * SL_INFINITE is refused with its message; an input of unknown cardinality gives an unknown
 * one, and its elements pass after pass; an empty input has cardinality 0 even forever.
 * repeat's products at 2^63-1 are in test_counts. */
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "test.h"

TEST(test_repeat_counts_and_refusals) {
    sl_dataset *r, *f1, *f2, *odd, *twice, *empty, *none, *bad = (sl_dataset *)1;
    int64_t v[16];
    ASSERT_OK(sl_ds_range(0, 4, 1, &r));
    ASSERT_OK(sl_ds_repeat(r, -1, &f1));
    ASSERT_OK(sl_ds_repeat(r, SL_INFINITE, &f2));
    ASSERT_STREQ(sl_dataset_op(f1), "repeat");
    ASSERT_EQ(sl_dataset_cardinality(f1), SL_INFINITE);
    ASSERT_EQ(sl_dataset_cardinality(f2), SL_INFINITE);
    ASSERT_EQ(sl_test_values(f1, NULL, v, 9), 10); /* more than 9: endless */
    ASSERT_MEMEQ(v, ((int64_t[]){0, 1, 2, 3, 0, 1, 2, 3, 0}), 9 * sizeof(int64_t));
    ASSERT_EQ(sl_ds_repeat(r, -3, &bad), SL_EINVAL);
    ASSERT(bad == NULL);
    ASSERT_STREQ(sl_errmsg(), "repeat: count -3 must be >= 0, or -1 for forever");
    /* a filter's unknown cardinality stays unknown; each pass reads it again */
    ASSERT_OK(sl_ds_filter(r, sl_test_is_odd, NULL, &odd));
    ASSERT_OK(sl_ds_repeat(odd, 2, &twice));
    ASSERT_EQ(sl_dataset_cardinality(twice), SL_UNKNOWN_CARD);
    ASSERT_EQ(sl_test_values(twice, NULL, v, 16), 4);
    ASSERT_MEMEQ(v, ((int64_t[]){1, 3, 1, 3}), 4 * sizeof(int64_t));
    /* nothing, forever: nothing (counted so, and read so) */
    ASSERT_OK(sl_ds_range(0, 0, 1, &empty));
    ASSERT_OK(sl_ds_repeat(empty, SL_INFINITE, &none));
    ASSERT_EQ(sl_dataset_cardinality(none), 0);
    ASSERT_EQ(sl_test_values(none, NULL, v, 16), 0);
    sl_dataset_unref(none);
    sl_dataset_unref(empty);
    sl_dataset_unref(twice);
    sl_dataset_unref(odd);
    sl_dataset_unref(f2);
    sl_dataset_unref(f1);
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_repeat_counts_and_refusals);
    TEST_MAIN_END();
}
