/* pipeline/ops/scan.c: tf.data's scan. The API reference's example (range(10) with
 * initial_state 0 and scan_func (state + i, state + i) gives 0 1 3 6 10 15 21 28 36 45), a
 * fresh state for every iterator, the function's errors, the cardinality, the replay of
 * an iterator started part-way, and the refusals. */
#include <stdint.h>

#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "test.h"

/* (state, i) -> (state + i, state + i), on the state's "sum" and the element's "value" */
static sl_status cumsum(void *ctx, sl_element *state, sl_element *in, sl_element *out) {
    (void)ctx;
    int c = sl_element_find(state, "sum");
    int64_t s = *(const int64_t *)state->t[c].data + sl_test_value(in);
    if (s == 28 && ctx) return sl_err(SL_EINVAL, "28 is unlucky");
    sl_tensor a, b;
    sl_status st = sl_tensor_alloc(&a, SL_DT_I64, 0, NULL);
    if (st) return st;
    *(int64_t *)a.data = s;
    sl_tensor_share(&b, &a);
    sl_element_set(state, "sum", &a);
    return sl_element_set(out, "value", &b);
}

static int freed;
static void count_free(void *ctx, void *unused) {
    (void)ctx; (void)unused;
    freed++;
}

static sl_status initial_zero(sl_element *init) {
    sl_element_init(init);
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_I64, 0, NULL);
    if (s) return s;
    *(int64_t *)t.data = 0;
    return sl_element_set(init, "sum", &t);
}

/* Dataset.scan's example: the cumulative sum */
TEST(test_scan_doc_example) {
    sl_dataset *r, *ds;
    sl_element init;
    ASSERT_OK(initial_zero(&init));
    ASSERT_OK(sl_ds_range(0, 10, 1, &r));
    ASSERT_OK(sl_ds_scan(r, &init, cumsum, NULL, NULL, &ds));
    sl_element_clear(&init); /* borrowed: the dataset keeps its own reference */
    ASSERT_STREQ(sl_dataset_op(ds), "scan");
    ASSERT_EQ(sl_dataset_cardinality(ds), 10);
    int64_t v[16];
    const int64_t want[10] = {0, 1, 3, 6, 10, 15, 21, 28, 36, 45};
    for (int pass = 0; pass < 2; pass++) { /* each iterator starts from the initial state */
        ASSERT_EQ(sl_test_values(ds, NULL, v, 16), 10);
        ASSERT_MEMEQ(v, want, sizeof want);
    }
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_EQ(sl_test_drain(it), 10);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    /* started part-way: the state needs every element before, so they are replayed */
    ASSERT_OK(sl_iter_create_at(ds, NULL, 4, &it));
    ASSERT_EQ(sl_iter_replayed(it), 4);
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_EQ(sl_test_value(&e), 10);
    sl_element_clear(&e);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    sl_dataset_unref(r);
}

TEST(test_scan_errors_and_refusals) {
    sl_dataset *r, *ds, *inf, *di, *bad = (sl_dataset *)1;
    sl_element init;
    ASSERT_OK(initial_zero(&init));
    ASSERT_OK(sl_ds_range(0, 10, 1, &r));
    freed = 0;
    ASSERT_OK(sl_ds_scan(r, &init, cumsum, (void *)1, count_free, &ds));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    for (int i = 0; i < 7; i++) ASSERT_OK(sl_test_next_drop(it));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'scan': 28 is unlucky");
    ASSERT_OK(sl_iter_next(it, &e)); /* 7 was consumed, the state left at 21: 21 + 8 */
    ASSERT_EQ(sl_test_value(&e), 29);
    sl_element_clear(&e);
    sl_iter_close(it);
    ASSERT_EQ(freed, 0);
    sl_dataset_unref(ds);
    ASSERT_EQ(freed, 1);
    ASSERT_EQ(sl_ds_scan(r, &init, NULL, NULL, count_free, &bad), SL_EINVAL);
    ASSERT(bad == NULL);
    ASSERT_STREQ(sl_errmsg(), "scan: function is NULL");
    ASSERT_EQ(freed, 2);
    ASSERT_OK(sl_ds_repeat(r, SL_INFINITE, &inf));
    ASSERT_OK(sl_ds_scan(inf, &init, cumsum, NULL, NULL, &di));
    ASSERT_EQ(sl_dataset_cardinality(di), SL_INFINITE);
    sl_dataset_unref(di);
    sl_dataset_unref(inf);
    sl_element_clear(&init);
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_scan_doc_example);
    RUN(test_scan_errors_and_refusals);
    TEST_MAIN_END();
}
