/* pipeline/ops/group_by_window.c: the example of tf.data's API reference for
 * Dataset.group_by_window with exactly its printed output; the partial windows flushed at
 * the end in ascending key order (negative keys first), the key function's errors, a
 * window whose shapes differ, cardinality, the end repeated, the exact error codes. */
#include <stdio.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "helper_seq.h"
#include "test.h"

/* key = floor(value mod m) (Python's %), m from ctx; value 99 fails */
static sl_status mod_key(void *ctx, const sl_element *e, int64_t *key) {
    int64_t m = (int64_t)(intptr_t)ctx, v = sl_test_value(e);
    if (v == 99) return sl_err(SL_EIO, "key of 99 is unknown");
    *key = ((v % m) + m) % m;
    return SL_OK;
}

static sl_status minus_key(void *ctx, const sl_element *e, int64_t *key) {
    (void)ctx;
    *key = 10 - sl_test_value(e) * 3; /* 10, 7, 4, 1, -2, -5 */
    return SL_OK;
}

static int freed;
static void count_free(void *ctx, void *unused) { (void)ctx; (void)unused; freed++; }

/* Dataset.group_by_window's reference: range(10), key_func x % 2, reduce_func
 * dataset.batch(window_size), window_size 5 prints [0 2 4 6 8] then [1 3 5 7 9]. */
TEST(test_group_by_window_example) {
    sl_dataset *r, *g;
    ASSERT_OK(sl_ds_range(0, 10, 1, &r));
    ASSERT_OK(sl_ds_group_by_window(r, mod_key, (void *)(intptr_t)2, 5, &g));
    ASSERT_STREQ(sl_dataset_op(g), "group_by_window");
    ASSERT_EQ(sl_dataset_cardinality(g), SL_UNKNOWN_CARD);
    char got[512];
    ASSERT_EQ(sl_test_read_all(g, "value", got, sizeof got), SL_END);
    ASSERT_STREQ(got, "[0 2 4 6 8], [1 3 5 7 9]");
    sl_dataset_unref(g);
    sl_dataset_unref(r);
}

/* End of input flushes the open windows in ascending key order, as tf.data's iterator (a
 * std::map of groups) does; full windows come as soon as they fill. */
TEST(test_group_by_window_flush_order) {
    sl_dataset *r, *g;
    ASSERT_OK(sl_ds_range(0, 11, 1, &r));
    ASSERT_OK(sl_ds_group_by_window(r, mod_key, (void *)(intptr_t)3, 3, &g));
    char got[512];
    ASSERT_EQ(sl_test_read_all(g, "value", got, sizeof got), SL_END);
    ASSERT_STREQ(got, "[0 3 6], [1 4 7], [2 5 8], [9], [10]");
    sl_dataset_unref(g);
    sl_dataset_unref(r);
    ASSERT_OK(sl_ds_range(0, 6, 1, &r));
    ASSERT_OK(sl_ds_group_by_window(r, minus_key, NULL, 2, &g));
    ASSERT_EQ(sl_test_read_all(g, "value", got, sizeof got), SL_END);
    ASSERT_STREQ(got, "[5], [4], [3], [2], [1], [0]");
    sl_dataset_unref(g);
    sl_dataset_unref(r);
    /* an empty input: cardinality 0, nothing */
    ASSERT_OK(sl_ds_range(0, 0, 1, &r));
    ASSERT_OK(sl_ds_group_by_window(r, mod_key, (void *)(intptr_t)2, 5, &g));
    ASSERT_EQ(sl_dataset_cardinality(g), 0);
    ASSERT_EQ(sl_test_read_all(g, "value", got, sizeof got), SL_END);
    ASSERT_STREQ(got, "");
    sl_dataset_unref(g);
    sl_dataset_unref(r);
}

TEST(test_group_by_window_errors) {
    sl_dataset *r, *g;
    ASSERT_OK(sl_ds_range(96, 103, 1, &r)); /* 96 97 98 99 100 101 102 */
    ASSERT_EQ(sl_ds_group_by_window(r, NULL, NULL, 2, &g), SL_EINVAL);
    ASSERT(g == NULL);
    ASSERT_EQ(sl_ds_group_by_window(r, mod_key, NULL, 0, &g), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "group_by_window: window_size 0 must be 1..16777216");
    freed = 0;
    ASSERT_EQ(sl_ds_group_by_window_owned(r, mod_key, (void *)(intptr_t)2, count_free, -1, &g), SL_EINVAL);
    ASSERT_EQ(freed, 1); /* handed over, freed on failure */
    ASSERT_OK(sl_ds_group_by_window_owned(r, mod_key, (void *)(intptr_t)2, count_free, 2, &g));
    /* the key's error consumes element 99, the rest goes on */
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(g, &it, &e));
    char buf[64];
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_STREQ(sl_test_fmt(&e, "value", buf, sizeof buf), "[96 98]");
    sl_element_clear(&e);
    ASSERT_EQ(sl_iter_next(it, &e), SL_EIO);
    ASSERT_STREQ(sl_errmsg(), "op 'group_by_window': key of 99 is unknown");
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_STREQ(sl_test_fmt(&e, "value", buf, sizeof buf), "[97 101]");
    sl_element_clear(&e);
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_STREQ(sl_test_fmt(&e, "value", buf, sizeof buf), "[100 102]");
    sl_element_clear(&e);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    ASSERT_EQ(freed, 1);
    sl_dataset_unref(g);
    ASSERT_EQ(freed, 2);
    sl_dataset_unref(r);
}

/* value -> "vec" int64[value % 2 + 1] */
static sl_status ragged(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    int64_t n = sl_test_value(e) % 2 + 1;
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_I64, 1, &n);
    if (s) return s;
    for (int64_t i = 0; i < n; i++) ((int64_t *)t.data)[i] = i;
    if ((s = sl_element_set(e, "vec", &t))) sl_tensor_release(&t);
    return s;
}

static sl_status one_key(void *ctx, const sl_element *e, int64_t *key) {
    (void)ctx; (void)e;
    *key = 0;
    return SL_OK;
}

TEST(test_group_by_window_shapes) {
    sl_dataset *m, *g;
    ASSERT_OK(sl_test_range_map(4, "ragged", ragged, NULL, 1, &m));
    ASSERT_OK(sl_ds_group_by_window(m, one_key, NULL, 2, &g));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(g, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "op 'group_by_window': component 'vec' is int64[1] in element 0 but int64[2] in element 1");
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(g);
    sl_dataset_unref(m);
}

int main(void) {
    RUN(test_group_by_window_example);
    RUN(test_group_by_window_flush_order);
    RUN(test_group_by_window_errors);
    RUN(test_group_by_window_shapes);
    TEST_MAIN_END();
}
