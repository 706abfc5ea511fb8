/* pipeline/ops/ignore_errors.c: the failed elements are dropped and counted, the others
 * pass in order. */
#include "sluice/fn.h"
#include "sluice/log.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "test.h"

TEST(test_ignore_errors) {
    sl_dataset *m, *ig;
    ASSERT_OK(sl_test_range_map(50, "fail_mod7", sl_test_fail_mod7, NULL, 3, &m));
    ASSERT_OK(sl_ds_ignore_errors(m, &ig));
    int old = sl_log_level;
    sl_log_set_level(SL_LOG_ERROR); /* the warnings are expected */
    sl_iter *it;
    ASSERT_OK(sl_iter_create(ig, NULL, &it));
    sl_element e;
    sl_element_init(&e);
    int n = 0;
    sl_status s;
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        ASSERT(sl_test_value(&e) % 7 != 6);
        n++;
        sl_element_clear(&e);
    }
    sl_log_set_level(old);
    ASSERT_EQ(s, SL_END);
    ASSERT_EQ(n, 43);
    ASSERT_EQ(sl_iter_errors_ignored(it), 7);
    sl_iter_close(it);
    sl_dataset_unref(ig);
    sl_dataset_unref(m);
}

int main(void) {
    RUN(test_ignore_errors);
    TEST_MAIN_END();
}
