/* pipeline/ops/window.c and flat_map.c: every example of tf.data's API reference for
 * Dataset.window and Dataset.flat_map, with exactly the printed output (each window being
 * one element, the window's elements stacked: what window(...).flat_map(lambda w:
 * w.batch(size)) gives); the partial windows at the end, cardinality, seeking, the end
 * repeated, and the exact error codes. */
#include <stdio.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "sluice/stats.h"
#include "helper_iter.h"
#include "helper_seq.h"
#include "test.h"

static sl_status window_of_range(int64_t n, int64_t size, int64_t shift, int64_t stride, bool drop, sl_dataset **out) {
    sl_dataset *r;
    sl_status s = sl_ds_range(0, n, 1, &r);
    if (s) return s;
    s = sl_ds_window(r, size, shift, stride, drop, out);
    sl_dataset_unref(r);
    return s;
}

#define EXPECT_WINDOWS(n, size, shift, stride, drop, card, want)                  \
    do {                                                                          \
        sl_dataset *w_;                                                           \
        char got_[1024];                                                          \
        ASSERT_OK(window_of_range(n, size, shift, stride, drop, &w_));           \
        ASSERT_EQ(sl_dataset_cardinality(w_), card);                              \
        ASSERT_EQ(sl_test_read_all(w_, "value", got_, sizeof got_), SL_END);              \
        sl_dataset_unref(w_);                                                     \
        ASSERT_STREQ(got_, want);                                                 \
    } while (0)

/* Dataset.window's reference (TF 2.x): range(7).window(3) prints [0, 1, 2] [3, 4, 5] [6];
 * with drop_remainder=True [0, 1, 2] [3, 4, 5]. */
TEST(test_window_3) {
    EXPECT_WINDOWS(7, 3, 0, 1, false, 3, "[0 1 2], [3 4 5], [6]");
    EXPECT_WINDOWS(7, 3, 0, 1, true, 2, "[0 1 2], [3 4 5]");
}

/* Dataset.window's reference (TF 2.0-2.3): range(7).window(2) produces
 * {{0, 1}, {2, 3}, {4, 5}, {6}}; window(3, 2, 1, True) {{0, 1, 2}, {2, 3, 4}, {4, 5, 6}};
 * window(3, 1, 2, True) {{0, 2, 4}, {1, 3, 5}, {2, 4, 6}}. */
TEST(test_window_shift_stride) {
    EXPECT_WINDOWS(7, 2, 0, 1, false, 4, "[0 1], [2 3], [4 5], [6]");
    EXPECT_WINDOWS(7, 3, 2, 1, true, 3, "[0 1 2], [2 3 4], [4 5 6]");
    EXPECT_WINDOWS(7, 3, 1, 2, true, 3, "[0 2 4], [1 3 5], [2 4 6]");
    /* without drop_remainder the buffer drains by `shift`, as tf.data's iterator does */
    EXPECT_WINDOWS(7, 3, 1, 2, false, 7, "[0 2 4], [1 3 5], [2 4 6], [3 5], [4 6], [5], [6]");
    EXPECT_WINDOWS(7, 3, 2, 1, false, 4, "[0 1 2], [2 3 4], [4 5 6], [6]");
    /* shift past the span: the elements between windows are skipped */
    EXPECT_WINDOWS(10, 2, 4, 1, false, 3, "[0 1], [4 5], [8 9]");
    EXPECT_WINDOWS(10, 2, 4, 1, true, 3, "[0 1], [4 5], [8 9]");
    EXPECT_WINDOWS(9, 2, 4, 1, true, 2, "[0 1], [4 5]");
    EXPECT_WINDOWS(0, 3, 0, 1, false, 0, "");
    EXPECT_WINDOWS(2, 3, 0, 1, true, 0, "");
}

/* Dataset.window's reference, the flattening example: range(7).window(3, shift=1,
 * drop_remainder=True).flat_map(lambda x: x.batch(3)) prints [0 1 2] [1 2 3] [2 3 4]
 * [3 4 5] [4 5 6]: sl_ds_window's own output. */
TEST(test_window_flat_map_batch) {
    EXPECT_WINDOWS(7, 3, 1, 1, true, 5, "[0 1 2], [1 2 3], [2 3 4], [3 4 5], [4 5 6]");
}

/* value -> also "b" = value + 4 */
static sl_status add_b(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    int64_t one = 1;
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_I64, 0, &one);
    if (s) return s;
    *(int64_t *)t.data = sl_test_value(e) + 4;
    if ((s = sl_element_set(e, "b", &t))) sl_tensor_release(&t);
    return s;
}

/* Dataset.window's reference, nested elements: from_tensor_slices(([1, 2, 3, 4],
 * [5, 6, 7, 8])).window(2) prints ([1, 2], [5, 6]) ([3, 4], [7, 8]); the dict example
 * {'a': [1, 2, 3, 4]} gives {'a': [1, 2]} {'a': [3, 4]}. Every component is windowed. */
TEST(test_window_nested) {
    sl_dataset *r, *m, *w;
    sl_fn *fn;
    ASSERT_OK(sl_ds_range(1, 5, 1, &r));
    ASSERT_OK(sl_fn_custom("add_b", add_b, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(r, fn, 1, true, &m));
    ASSERT_OK(sl_ds_window(m, 2, 0, 1, false, &w));
    char a[256], b[256];
    ASSERT_EQ(sl_test_read_all(w, "value", a, sizeof a), SL_END);
    ASSERT_EQ(sl_test_read_all(w, "b", b, sizeof b), SL_END);
    ASSERT_STREQ(a, "[1 2], [3 4]");
    ASSERT_STREQ(b, "[5 6], [7 8]");
    sl_dataset_unref(w);
    sl_dataset_unref(m);
    sl_fn_unref(fn);
    sl_dataset_unref(r);
}

/* a row [a b c] (consecutive values) -> range(a, c + 1): its slices */
static sl_status row_slices(void *ctx, const sl_element *e, sl_dataset **out) {
    (void)ctx;
    const sl_tensor *t = &e->t[sl_element_find(e, "value")];
    const int64_t *v = t->data;
    return sl_ds_range(v[0], v[t->dims[0] - 1] + 1, 1, out);
}

static int fm_calls;
static sl_status fail_second(void *ctx, const sl_element *e, sl_dataset **out) {
    if (fm_calls++ == 1) return sl_err(SL_EIO, "row 1 is unreadable");
    return row_slices(ctx, e, out);
}

/* Dataset.flat_map's reference: from_tensor_slices([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
 * .flat_map(from_tensor_slices) gives [1, 2, 3, 4, 5, 6, 7, 8, 9]. The rows are made by
 * window(3) over range(1, 10); the factory gives each row's slices. */
TEST(test_flat_map) {
    sl_dataset *r, *rows, *fm;
    ASSERT_OK(sl_ds_range(1, 10, 1, &r));
    ASSERT_OK(sl_ds_window(r, 3, 0, 1, false, &rows));
    ASSERT_OK(sl_ds_flat_map(rows, row_slices, NULL, &fm));
    ASSERT_STREQ(sl_dataset_op(fm), "flat_map");
    ASSERT_EQ(sl_dataset_cardinality(fm), SL_UNKNOWN_CARD);
    int64_t got[16];
    ASSERT_EQ(sl_test_values(fm, NULL, got, 16), 9);
    for (int i = 0; i < 9; i++) ASSERT_EQ(got[i], i + 1);
    sl_dataset_unref(fm);
    /* a factory error is returned and consumes its row; the stream goes on */
    ASSERT_OK(sl_ds_flat_map(rows, fail_second, NULL, &fm));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(fm, &it, &e));
    for (int i = 1; i <= 3; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(sl_test_value(&e), i);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "row 1 is unreadable");
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_EQ(sl_test_value(&e), 7);
    sl_element_clear(&e);
    ASSERT_EQ(sl_test_drain(it), 2);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(fm);
    ASSERT_EQ(sl_ds_flat_map(rows, NULL, NULL, &fm), SL_EINVAL);
    ASSERT(fm == NULL);
    sl_dataset_unref(rows);
    sl_dataset_unref(r);
}

TEST(test_window_seek) {
    sl_dataset *w;
    ASSERT_OK(window_of_range(7, 3, 2, 1, true, &w));
    sl_iter *it;
    sl_element e;
    sl_element_init(&e);
    ASSERT_OK(sl_iter_create_at(w, NULL, 1, &it));
    ASSERT_EQ(sl_iter_replayed(it), 0);
    char buf[64];
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_STREQ(sl_test_fmt(&e, "value", buf, sizeof buf), "[2 3 4]");
    sl_element_clear(&e);
    ASSERT_EQ(sl_test_drain(it), 1);
    sl_iter_close(it);
    sl_dataset_unref(w);
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

TEST(test_window_errors) {
    sl_dataset *r, *w;
    ASSERT_OK(sl_ds_range(0, 4, 1, &r));
    ASSERT_EQ(sl_ds_window(r, 0, 0, 1, false, &w), SL_EINVAL);
    ASSERT(w == NULL);
    ASSERT_STREQ(sl_errmsg(), "window: size 0 must be 1..16777216");
    ASSERT_EQ(sl_ds_window(r, 3, -1, 1, false, &w), SL_EINVAL);
    ASSERT_EQ(sl_ds_window(r, 3, 1, 0, false, &w), SL_EINVAL);
    ASSERT_EQ(sl_ds_window(r, 1 << 24, 1, 1 << 10, false, &w), SL_ERANGE);
    ASSERT(w == NULL);
    sl_dataset_unref(r);
    /* elements of different shapes in one window: SL_EINVAL naming the component */
    sl_dataset *m;
    ASSERT_OK(sl_test_range_map(4, "ragged", ragged, NULL, 1, &m));
    ASSERT_OK(sl_ds_window(m, 2, 0, 1, false, &w));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(w, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "component 'vec' is int64[1] in element 0 but int64[2] in element 1");
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL); /* the next window, [2 3], differs too */
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(w);
    sl_dataset_unref(m);
}

/* Overlapping windows keep each input element once, by reference: size 100, shift 1 over
 * 1000 int64 scalars buffers at most 100 elements (800 bytes), never a copy per window;
 * each element's bytes are copied only into the stacked windows (901 x 100 x 8 bytes). */
TEST(test_window_shares_elements) {
    sl_dataset *w;
    ASSERT_OK(window_of_range(1000, 100, 1, 1, true, &w));
    ASSERT_EQ(sl_dataset_cardinality(w), 901);
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(w, &it, &e));
    ASSERT_EQ(sl_test_drain(it), 901);
    sl_stats *st;
    ASSERT_OK(sl_iter_stats(it, &st));
    ASSERT_STREQ(st->ops[0].op, "window");
    ASSERT_EQ(st->ops[0].buffered_bytes_peak, 800);
    ASSERT_EQ(st->ops[0].bytes, 901 * 100 * 8);
    sl_stats_free(st);
    sl_iter_close(it);
    sl_dataset_unref(w);
}

int main(void) {
    RUN(test_window_3);
    RUN(test_window_shift_stride);
    RUN(test_window_flat_map_batch);
    RUN(test_window_nested);
    RUN(test_flat_map);
    RUN(test_window_seek);
    RUN(test_window_errors);
    RUN(test_window_shares_elements);
    TEST_MAIN_END();
}
