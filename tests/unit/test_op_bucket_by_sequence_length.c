/* pipeline/ops/bucket_by_sequence_length.c: every example of tf.data's API reference for
 * bucket_by_sequence_length (tf.data.experimental.bucket_by_sequence_length, the same
 * examples as Dataset.bucket_by_sequence_length) with exactly the printed output: the
 * three buckets, pad_to_bucket_boundary with padding -1, and it with drop_remainder. The
 * reference has no no_padding example: no_padding is tested on equal and unequal lengths.
 * Also a length function, errors (creation and per element) and cardinality. */
#include <stdio.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "helper_seq.h"
#include "test.h"

/* The reference's elements: [[0], [1, 2, 3, 4], [5, 6, 7], [7, 8, 9, 10, 11],
 * [13, 14, 15, 16, 19, 20], [21, 22]]. */
static const int64_t SEQ[6][6] = {{0}, {1, 2, 3, 4}, {5, 6, 7}, {7, 8, 9, 10, 11}, {13, 14, 15, 16, 19, 20}, {21, 22}};
static const int64_t LEN[6] = {1, 4, 3, 5, 6, 2};

/* value k -> "seq" = SEQ[k] as int64 (ctx NULL) or int32 (ctx non-NULL: tf.int32 in the
 * second example); value >= 6: a sequence of `value` zeros */
static sl_status make_seq(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)call;
    int64_t k = sl_test_value(e), n = k < 6 ? LEN[k] : k;
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, ctx ? SL_DT_I32 : SL_DT_I64, 1, &n);
    if (s) return s;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = k < 6 ? SEQ[k][i] : 0;
        if (ctx) ((int32_t *)t.data)[i] = (int32_t)v;
        else ((int64_t *)t.data)[i] = v;
    }
    if ((s = sl_element_set(e, "seq", &t))) sl_tensor_release(&t);
    return s;
}

static sl_status bucketed(int64_t n, bool i32, const sl_bucket_opts *o, char *got, size_t cap) {
    sl_dataset *m, *b;
    sl_status s = sl_test_range_map(n, "make_seq", make_seq, i32 ? (void *)1 : NULL, 1, &m);
    if (s) return s;
    s = sl_ds_bucket_by_sequence_length(m, o, &b);
    sl_dataset_unref(m);
    if (s) return s;
    if (sl_dataset_cardinality(b) != (n ? SL_UNKNOWN_CARD : 0)) s = SL_EINTERNAL;
    if (!s) s = sl_test_read_all(b, "seq", got, cap);
    sl_dataset_unref(b);
    return s;
}

/* "Below is an example to bucketize the input data to the 3 buckets [0, 3), [3, 5),
 * [5, inf) based on sequence length, with batch size 2": boundaries [3, 5], batch sizes
 * [2, 2, 2] print [[1 2 3 4] [5 6 7 0]], [[ 7 8 9 10 11 0] [13 14 15 16 19 20]],
 * [[ 0 0] [21 22]]. */
TEST(test_bucket_example) {
    const int64_t bounds[] = {3, 5}, sizes[] = {2, 2, 2};
    sl_bucket_opts o = {.component = "seq", .boundaries = bounds, .nboundaries = 2, .batch_sizes = sizes};
    char got[1024];
    ASSERT_EQ(bucketed(6, false, &o, got, sizeof got), SL_END);
    ASSERT_STREQ(got, "[[1 2 3 4] [5 6 7 0]], [[7 8 9 10 11 0] [13 14 15 16 19 20]], [[0 0] [21 22]]");
}

/* "Below example uses -1 as padding and it also shows the input data being bucketizied to
 * two buckets [0,3], [4,6]": boundaries [4, 7], batch sizes [2, 2, 2],
 * pad_to_bucket_boundary=True, padding_values=-1 print [[ 0 -1 -1] [ 5 6 7]],
 * [[ 1 2 3 4 -1 -1] [ 7 8 9 10 11 -1]], [[21 22 -1]], [[13 14 15 16 19 20]]; with
 * drop_remainder=True as well, only the first two. */
TEST(test_bucket_pad_to_boundary) {
    const int64_t bounds[] = {4, 7}, sizes[] = {2, 2, 2};
    sl_bucket_opts o = {.component = "seq", .boundaries = bounds, .nboundaries = 2, .batch_sizes = sizes,
                        .pad_value = -1, .pad_to_bucket_boundary = true};
    char got[1024];
    ASSERT_EQ(bucketed(6, true, &o, got, sizeof got), SL_END);
    ASSERT_STREQ(got, "[[0 -1 -1] [5 6 7]], [[1 2 3 4 -1 -1] [7 8 9 10 11 -1]], [[21 22 -1]], [[13 14 15 16 19 20]]");
    o.drop_remainder = true;
    ASSERT_EQ(bucketed(6, true, &o, got, sizeof got), SL_END);
    ASSERT_STREQ(got, "[[0 -1 -1] [5 6 7]], [[1 2 3 4 -1 -1] [7 8 9 10 11 -1]]");
    /* a length at or past the last boundary cannot be padded to a boundary: that element's
     * error (consumed), the others go on */
    const int64_t small[] = {3, 5};
    o.boundaries = small;
    o.drop_remainder = false;
    sl_dataset *m, *b;
    ASSERT_OK(sl_test_range_map(6, "make_seq", make_seq, NULL, 1, &m));
    ASSERT_OK(sl_ds_bucket_by_sequence_length(m, &o, &b));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(b, &it, &e));
    ASSERT_OK(sl_iter_next(it, &e)); /* [1 2 3 4], [5 6 7] padded to 4 */
    char buf[128];
    ASSERT_STREQ(sl_test_fmt(&e, "seq", buf, sizeof buf), "[[1 2 3 4] [5 6 7 -1]]");
    sl_element_clear(&e);
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'bucket_by_sequence_length': pad_to_bucket_boundary needs lengths < 5: element of "
                              "length 5\n---> HINT: add a larger last boundary, or drop pad_to_bucket_boundary");
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL); /* length 6 */
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_STREQ(sl_test_fmt(&e, "seq", buf, sizeof buf), "[[0 -1] [21 22]]");
    sl_element_clear(&e);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(b);
    sl_dataset_unref(m);
}

/* no_padding (tf.data: batch instead of padded_batch): equal lengths batch as they are,
 * different ones are SL_EINVAL naming both shapes. */
TEST(test_bucket_no_padding) {
    const int64_t bounds[] = {3, 5}, sizes[] = {2, 2, 2};
    sl_bucket_opts o = {.component = "seq", .boundaries = bounds, .nboundaries = 2, .batch_sizes = sizes,
                        .no_padding = true};
    sl_dataset *m, *b;
    ASSERT_OK(sl_test_range_map(6, "make_seq", make_seq, NULL, 1, &m));
    ASSERT_OK(sl_ds_bucket_by_sequence_length(m, &o, &b));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(b, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL); /* [1 2 3 4] with [5 6 7] */
    ASSERT_CONTAINS(sl_errmsg(), "component 'seq' is int64[4] in element 0 but int64[3] in element 1 of the batch");
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(b);
    sl_dataset_unref(m);
    /* values 6, 7, 8: zeros of lengths 6, 7, 8, all in bucket 2 with a batch of 1 */
    const int64_t ones[] = {1, 1, 1};
    o.batch_sizes = ones;
    sl_dataset *r, *mm;
    sl_fn *fn;
    ASSERT_OK(sl_ds_range(6, 9, 1, &r));
    ASSERT_OK(sl_fn_custom("make_seq", make_seq, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(r, fn, 1, true, &mm));
    ASSERT_OK(sl_ds_bucket_by_sequence_length(mm, &o, &b));
    char got[256];
    ASSERT_EQ(sl_test_read_all(b, "seq", got, sizeof got), SL_END);
    ASSERT_STREQ(got, "[[0 0 0 0 0 0]], [[0 0 0 0 0 0 0]], [[0 0 0 0 0 0 0 0]]");
    sl_dataset_unref(b);
    sl_dataset_unref(mm);
    sl_fn_unref(fn);
    sl_dataset_unref(r);
}

/* element_length_func as a function: here the value itself */
static sl_status value_len(void *ctx, const sl_element *e, int64_t *len) {
    (void)ctx;
    *len = sl_test_value(e);
    return SL_OK;
}

TEST(test_bucket_length_fn) {
    const int64_t bounds[] = {3}, sizes[] = {2, 3};
    sl_bucket_opts o = {.length = value_len, .boundaries = bounds, .nboundaries = 1, .batch_sizes = sizes};
    sl_dataset *r, *b;
    ASSERT_OK(sl_ds_range(0, 8, 1, &r));
    ASSERT_OK(sl_ds_bucket_by_sequence_length(r, &o, &b));
    ASSERT_STREQ(sl_dataset_op(b), "bucket_by_sequence_length");
    char got[256];
    ASSERT_EQ(sl_test_read_all(b, "value", got, sizeof got), SL_END);
    ASSERT_STREQ(got, "[0 1], [3 4 5], [2], [6 7]");
    sl_dataset_unref(b);
    sl_dataset_unref(r);
}

TEST(test_bucket_errors) {
    sl_dataset *r, *b;
    ASSERT_OK(sl_ds_range(0, 3, 1, &r));
    const int64_t bounds[] = {3, 5}, sizes[] = {2, 2, 2}, bad_bounds[] = {5, 3}, zero[] = {2, 0, 2};
    sl_bucket_opts o = {.component = "seq", .boundaries = bounds, .nboundaries = 2, .batch_sizes = sizes};
    ASSERT_EQ(sl_ds_bucket_by_sequence_length(r, NULL, &b), SL_EINVAL);
    o.nboundaries = 0;
    ASSERT_EQ(sl_ds_bucket_by_sequence_length(r, &o, &b), SL_EINVAL);
    ASSERT(b == NULL);
    o.nboundaries = 2;
    o.boundaries = bad_bounds;
    ASSERT_EQ(sl_ds_bucket_by_sequence_length(r, &o, &b), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "bucket_by_sequence_length: boundary 1 is 3: boundaries must be >= 1 and increasing");
    o.boundaries = bounds;
    o.batch_sizes = zero;
    ASSERT_EQ(sl_ds_bucket_by_sequence_length(r, &o, &b), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "bucket_by_sequence_length: batch size 1 is 0: it must be 1..16777216");
    o.batch_sizes = sizes;
    o.pad_to_bucket_boundary = o.no_padding = true;
    ASSERT_EQ(sl_ds_bucket_by_sequence_length(r, &o, &b), SL_EINVAL);
    o.pad_to_bucket_boundary = o.no_padding = false;
    o.component = NULL;
    ASSERT_EQ(sl_ds_bucket_by_sequence_length(r, &o, &b), SL_EINVAL);
    /* per element: no such component, a scalar */
    o.component = "seq";
    ASSERT_OK(sl_ds_bucket_by_sequence_length(r, &o, &b));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(b, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'bucket_by_sequence_length': no component 'seq' to take the length of");
    sl_iter_close(it);
    sl_dataset_unref(b);
    o.component = "value";
    ASSERT_OK(sl_ds_bucket_by_sequence_length(r, &o, &b));
    ASSERT_OK(sl_test_open(b, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'bucket_by_sequence_length': component 'value' is int64[]: its length is its dim 0, "
                              "so it needs rank >= 1");
    ASSERT_EQ(sl_test_drain(it), 0);
    sl_iter_close(it);
    sl_dataset_unref(b);
    sl_dataset_unref(r);
    char got[16];
    ASSERT_EQ(bucketed(0, false, &o, got, sizeof got), SL_END); /* empty: cardinality 0 */
}

/* value k -> "w" = k + 1 one-letter byte strings "a", "b", ... */
static sl_status make_words(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    int64_t n = sl_test_value(e) + 1;
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_BYTES, 1, &n);
    if (s) return s;
    if (!(t.aux = sl_buf_copy("abcdefgh", 8))) {
        sl_tensor_release(&t);
        return SL_ENOMEM;
    }
    for (int64_t i = 0; i < n; i++) ((sl_bytes *)t.data)[i] = (sl_bytes){(const uint8_t *)t.aux->data + i, 1};
    if ((s = sl_element_set(e, "w", &t))) sl_tensor_release(&t);
    return s;
}

/* byte strings pad with empty strings, to the bucket boundary too */
TEST(test_bucket_bytes) {
    const int64_t bounds[] = {5}, sizes[] = {2, 2};
    sl_bucket_opts o = {.component = "w", .boundaries = bounds, .nboundaries = 1, .batch_sizes = sizes,
                        .pad_to_bucket_boundary = true};
    sl_dataset *m, *b;
    ASSERT_OK(sl_test_range_map(2, "make_words", make_words, NULL, 1, &m));
    ASSERT_OK(sl_ds_bucket_by_sequence_length(m, &o, &b));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(b, &it, &e));
    ASSERT_OK(sl_iter_next(it, &e));
    const sl_tensor *t = &e.t[sl_element_find(&e, "w")];
    ASSERT_EQ(t->rank, 2);
    ASSERT_EQ(t->dims[0], 2);
    ASSERT_EQ(t->dims[1], 4);
    const sl_bytes *v = t->data;
    const char *want[8] = {"a", "", "", "", "a", "b", "", ""};
    for (int i = 0; i < 8; i++) {
        ASSERT_EQ(v[i].len, strlen(want[i]));
        if (v[i].len) ASSERT_MEMEQ(v[i].ptr, want[i], v[i].len);
    }
    sl_element_clear(&e);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(b);
    sl_dataset_unref(m);
}

int main(void) {
    RUN(test_bucket_example);
    RUN(test_bucket_pad_to_boundary);
    RUN(test_bucket_no_padding);
    RUN(test_bucket_length_fn);
    RUN(test_bucket_errors);
    RUN(test_bucket_bytes);
    TEST_MAIN_END();
}
