/* pipeline/ops/concatenate.c: tf.data's concatenate. The API reference's examples (a =
 * range(1, 4), b = range(4, 8): a.concatenate(b) is 1..7; a.concatenate(zip(a, b)) and
 * a.concatenate(from_tensor_slices(["a", "b", "c"])) are refused), the cardinality (a + b,
 * endless, unknown, past 2^63-1), the end, and the seek (sl_iter_create_at, save/restore)
 * giving what iterating from 0 gives. */
#include <stdint.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "helper_seq.h"
#include "test.h"

static sl_status rename_other(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    int c = sl_element_find(e, "value");
    if (c < 0) return sl_err(SL_EINVAL, "no value");
    snprintf(e->names[c], SL_NAME_MAX, "other");
    return SL_OK;
}

/* Dataset.concatenate's example: range(1, 4).concatenate(range(4, 8)) -> [1, 2, 3, 4, 5, 6, 7] */
TEST(test_concatenate_doc_example) {
    sl_dataset *a, *b, *ds;
    ASSERT_OK(sl_ds_range(1, 4, 1, &a));
    ASSERT_OK(sl_ds_range(4, 8, 1, &b));
    ASSERT_OK(sl_ds_concatenate(a, b, &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "concatenate");
    ASSERT_EQ(sl_dataset_cardinality(ds), 7);
    int64_t v[16];
    ASSERT_EQ(sl_test_values(ds, NULL, v, 16), 7);
    ASSERT_MEMEQ(v, ((int64_t[]){1, 2, 3, 4, 5, 6, 7}), 7 * sizeof(int64_t));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_EQ(sl_test_drain(it), 7);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END); /* and at every later call */
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    /* an empty first or second input */
    sl_dataset *none, *d1, *d2;
    ASSERT_OK(sl_ds_range(0, 0, 1, &none));
    ASSERT_OK(sl_ds_concatenate(none, b, &d1));
    ASSERT_OK(sl_ds_concatenate(a, none, &d2));
    ASSERT_EQ(sl_test_values(d1, NULL, v, 16), 4);
    ASSERT_MEMEQ(v, ((int64_t[]){4, 5, 6, 7}), 4 * sizeof(int64_t));
    ASSERT_EQ(sl_test_values(d2, NULL, v, 16), 3);
    ASSERT_EQ(sl_dataset_cardinality(d1), 4);
    sl_dataset_unref(d2);
    sl_dataset_unref(d1);
    sl_dataset_unref(none);
    sl_dataset_unref(ds);
    sl_dataset_unref(b);
    sl_dataset_unref(a);
}

/* The same example's refusals: a.concatenate(zip(a, b)) ("different types <dtype: 'int64'>
 * and (tf.int64, tf.int64)") and a.concatenate(from_tensor_slices(["a", "b", "c"])): here
 * at the first element of the second input, after a's elements, and then the end. */
TEST(test_concatenate_incompatible) {
    sl_dataset *a, *b, *bm, *z, *ds, *d, *ds2;
    ASSERT_OK(sl_ds_range(1, 4, 1, &a));
    ASSERT_OK(sl_ds_range(4, 8, 1, &b));
    sl_fn *fn;
    ASSERT_OK(sl_fn_custom("rename", rename_other, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(b, fn, 1, true, &bm));
    sl_dataset *ins[2] = {a, bm};
    ASSERT_OK(sl_ds_zip(ins, 2, &z));
    ASSERT_OK(sl_ds_concatenate(a, z, &ds));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    for (int i = 1; i <= 3; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(sl_test_value(&e), i);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'concatenate': element 0 of input 1 has {value: int64, other: int64}, input 0's "
                              "elements have {value: int64}\n---> HINT: both datasets must have the same component "
                              "names and dtypes: rename or cast with a map first");
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    const char *strs[3] = {"a", "b", "c"};
    ASSERT_OK(sl_test_from_strs(strs, 3, "value", &d));
    ASSERT_OK(sl_ds_concatenate(a, d, &ds2));
    ASSERT_OK(sl_test_open(ds2, &it, &e));
    ASSERT_EQ(sl_test_drain(it), 3);
    sl_iter_close(it);
    ASSERT_OK(sl_test_open(ds2, &it, &e));
    for (int i = 0; i < 3; i++) ASSERT_OK(sl_test_next_drop(it));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'concatenate': element 0 of input 1 has {value: bytes}, input 0's elements have "
                              "{value: int64}\n---> HINT: both datasets must have the same component names and "
                              "dtypes: rename or cast with a map first");
    sl_iter_close(it);
    /* started inside b: a's first element is read to compare with, the same error */
    ASSERT_OK(sl_iter_create_at(ds2, NULL, 4, &it));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "element 1 of input 1 has {value: bytes}, input 0's elements have {value: int64}");
    sl_iter_close(it);
    sl_dataset *bad;
    ASSERT_EQ(sl_ds_concatenate(a, NULL, &bad), SL_EINVAL);
    ASSERT(bad == NULL);
    sl_dataset_unref(ds2);
    sl_dataset_unref(d);
    sl_dataset_unref(ds);
    sl_dataset_unref(z);
    sl_dataset_unref(bm);
    sl_fn_unref(fn);
    sl_dataset_unref(b);
    sl_dataset_unref(a);
}

TEST(test_concatenate_cardinality) {
    sl_dataset *a, *b, *inf, *odd, *big, *c1, *c2, *c3, *c4;
    ASSERT_OK(sl_ds_range(0, 3, 1, &a));
    ASSERT_OK(sl_ds_range(10, 12, 1, &b));
    ASSERT_OK(sl_ds_repeat(a, SL_INFINITE, &inf));
    ASSERT_OK(sl_ds_filter(a, sl_test_is_odd, NULL, &odd));
    ASSERT_OK(sl_ds_concatenate(inf, b, &c1));
    ASSERT_EQ(sl_dataset_cardinality(c1), SL_INFINITE);
    ASSERT_OK(sl_ds_concatenate(b, inf, &c2));
    ASSERT_EQ(sl_dataset_cardinality(c2), SL_INFINITE);
    ASSERT_OK(sl_ds_concatenate(odd, b, &c3));
    ASSERT_EQ(sl_dataset_cardinality(c3), SL_UNKNOWN_CARD);
    int64_t v[8];
    ASSERT_EQ(sl_test_values(c3, NULL, v, 8), 3);
    ASSERT_MEMEQ(v, ((int64_t[]){1, 10, 11}), 3 * sizeof(int64_t));
    ASSERT_OK(sl_ds_range(0, INT64_MAX, 1, &big));
    ASSERT_EQ(sl_ds_concatenate(big, b, &c4), SL_ERANGE);
    ASSERT(c4 == NULL);
    ASSERT_STREQ(sl_errmsg(), "concatenate: 9223372036854775807 + 2 elements is past 2^63-1\n"
                              "---> HINT: take fewer elements from one of them first");
    sl_dataset_unref(c3);
    sl_dataset_unref(c2);
    sl_dataset_unref(c1);
    sl_dataset_unref(big);
    sl_dataset_unref(odd);
    sl_dataset_unref(inf);
    sl_dataset_unref(b);
    sl_dataset_unref(a);
}

/* every start gives the stream's suffix without producing what is before it; save and
 * restore continue where the saved iterator stood */
TEST(test_concatenate_seek) {
    sl_dataset *a, *b, *ds, *odd, *ds2;
    ASSERT_OK(sl_ds_range(1, 4, 1, &a));
    ASSERT_OK(sl_ds_range(4, 8, 1, &b));
    ASSERT_OK(sl_ds_concatenate(a, b, &ds));
    for (int64_t k = 0; k <= 8; k++) {
        sl_iter *it;
        ASSERT_OK(sl_iter_create_at(ds, NULL, k, &it));
        ASSERT_EQ(sl_iter_replayed(it), 0);
        sl_element e;
        sl_element_init(&e);
        for (int64_t i = k; i < 7; i++) {
            ASSERT_OK(sl_iter_next(it, &e));
            ASSERT_EQ(sl_test_value(&e), i + 1);
            sl_element_clear(&e);
        }
        ASSERT_EQ(sl_iter_next(it, &e), SL_END);
        sl_iter_close(it);
    }
    sl_iter *it, *back;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    for (int i = 0; i < 5; i++) ASSERT_OK(sl_test_next_drop(it));
    uint8_t st[SL_ITER_STATE_SIZE];
    size_t len;
    ASSERT_OK(sl_iter_save(it, st, sizeof st, &len));
    ASSERT_OK(sl_iter_restore(ds, NULL, st, len, &back));
    ASSERT_EQ(sl_iter_replayed(back), 0);
    for (int i = 0; i < 2; i++) {
        sl_element x;
        sl_element_init(&x);
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_OK(sl_iter_next(back, &x));
        ASSERT_EQ(sl_test_value(&x), sl_test_value(&e));
        ASSERT_EQ(sl_test_value(&x), 6 + i);
        sl_element_clear(&e);
        sl_element_clear(&x);
    }
    ASSERT_EQ(sl_iter_next(back, &e), SL_END);
    sl_iter_close(back);
    sl_iter_close(it);
    /* a first input of unknown length: no seek, the elements before the start are replayed */
    ASSERT_OK(sl_ds_filter(a, sl_test_is_odd, NULL, &odd));
    ASSERT_OK(sl_ds_concatenate(odd, b, &ds2));
    ASSERT_OK(sl_iter_create_at(ds2, NULL, 3, &it));
    ASSERT_EQ(sl_iter_replayed(it), 3);
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_EQ(sl_test_value(&e), 5); /* 1 3 | 4 5 6 7 */
    sl_element_clear(&e);
    sl_iter_close(it);
    sl_dataset_unref(ds2);
    sl_dataset_unref(odd);
    sl_dataset_unref(ds);
    sl_dataset_unref(b);
    sl_dataset_unref(a);
}

int main(void) {
    RUN(test_concatenate_doc_example);
    RUN(test_concatenate_incompatible);
    RUN(test_concatenate_cardinality);
    RUN(test_concatenate_seek);
    TEST_MAIN_END();
}
