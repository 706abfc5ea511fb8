/* pipeline/ops/filter.c: the elements the predicate keeps, in order. */
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "test.h"

TEST(test_filter) {
    sl_dataset *r, *f;
    int64_t v[32];
    ASSERT_OK(sl_ds_range(0, 10, 1, &r));
    ASSERT_OK(sl_ds_filter(r, sl_test_is_odd, NULL, &f));
    ASSERT_EQ(sl_test_values(f, NULL, v, 32), 5);
    for (int i = 0; i < 5; i++) ASSERT_EQ(v[i], 2 * i + 1);
    sl_dataset_unref(f);
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_filter);
    TEST_MAIN_END();
}
