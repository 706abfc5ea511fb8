/* pipeline/ops/take_while.c: tf.data's take_while. The API reference's example
 * (range(10).take_while(lambda x: x < 5) gives 0 1 2 3 4), no reading past the first false,
 * the predicate's error, the cardinality and the refusals. */
#include <stdint.h>

#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "test.h"

static int calls;

static int below5(void *ctx, const sl_element *e) {
    (void)ctx;
    calls++;
    return sl_test_value(e) < 5;
}

static int fails_at_2(void *ctx, const sl_element *e) {
    (void)ctx;
    if (sl_test_value(e) == 2) return sl_err(SL_EINVAL, "value 2 is unlucky");
    return sl_test_value(e) < 4;
}

static int freed;
static void count_free(void *ctx, void *unused) {
    (void)ctx; (void)unused;
    freed++;
}

/* Dataset.take_while's example */
TEST(test_take_while_doc_example) {
    sl_dataset *r, *ds;
    ASSERT_OK(sl_ds_range(0, 10, 1, &r));
    ASSERT_OK(sl_ds_take_while(r, below5, NULL, &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "take_while");
    ASSERT_EQ(sl_dataset_cardinality(ds), SL_UNKNOWN_CARD);
    int64_t v[16];
    calls = 0;
    ASSERT_EQ(sl_test_values(ds, NULL, v, 16), 5);
    ASSERT_MEMEQ(v, ((int64_t[]){0, 1, 2, 3, 4}), 5 * sizeof(int64_t));
    ASSERT_EQ(calls, 6); /* 0..5: nothing after the first false is read */
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_EQ(sl_test_drain(it), 5);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    sl_dataset_unref(r);
}

TEST(test_take_while_errors_and_cardinality) {
    sl_dataset *r, *ds, *none, *dn, *inf, *di, *bad = (sl_dataset *)1;
    ASSERT_OK(sl_ds_range(0, 10, 1, &r));
    ASSERT_OK(sl_ds_take_while(r, fails_at_2, NULL, &ds));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_OK(sl_iter_next(it, &e));
    sl_element_clear(&e);
    ASSERT_OK(sl_iter_next(it, &e));
    sl_element_clear(&e);
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'take_while': value 2 is unlucky");
    ASSERT_OK(sl_iter_next(it, &e)); /* the error consumed 2: 3 is next */
    ASSERT_EQ(sl_test_value(&e), 3);
    sl_element_clear(&e);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    ASSERT_OK(sl_ds_take(r, 0, &none));
    ASSERT_OK(sl_ds_take_while(none, below5, NULL, &dn));
    ASSERT_EQ(sl_dataset_cardinality(dn), 0);
    ASSERT_OK(sl_ds_repeat(r, SL_INFINITE, &inf));
    ASSERT_OK(sl_ds_take_while(inf, below5, NULL, &di));
    ASSERT_EQ(sl_dataset_cardinality(di), SL_UNKNOWN_CARD);
    int64_t v[16];
    ASSERT_EQ(sl_test_values(di, NULL, v, 16), 5); /* an endless input, ended by the predicate */
    ASSERT_EQ(sl_ds_take_while(r, NULL, NULL, &bad), SL_EINVAL);
    ASSERT(bad == NULL);
    ASSERT_STREQ(sl_errmsg(), "take_while: predicate is NULL");
    freed = 0;
    ASSERT_EQ(sl_ds_take_while_owned(r, NULL, NULL, count_free, &bad), SL_EINVAL);
    ASSERT_EQ(freed, 1);
    ASSERT_OK(sl_ds_take_while_owned(r, below5, NULL, count_free, &bad));
    ASSERT_EQ(freed, 1);
    sl_dataset_unref(bad);
    ASSERT_EQ(freed, 2);
    sl_dataset_unref(di);
    sl_dataset_unref(inf);
    sl_dataset_unref(dn);
    sl_dataset_unref(none);
    sl_dataset_unref(ds);
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_take_while_doc_example);
    RUN(test_take_while_errors_and_cardinality);
    TEST_MAIN_END();
}
