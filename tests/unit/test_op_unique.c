/* pipeline/ops/unique.c: tf.data's unique. The API reference's examples
 * (from_tensor_slices([1, 37, 2, 37, 2, 1]) gives 1 37 2, sorted [1, 2, 37]; ["b", "a", "b"]
 * gives b'b' b'a', sorted [b'a', b'b']), a key component of a larger element, the dtypes
 * refused exactly, and the cardinality. */
#include <stdint.h>
#include <string.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "helper_seq.h"
#include "test.h"

/* tf.data.experimental.unique's example (and Dataset.unique's, which prints it sorted) */
TEST(test_unique_doc_examples) {
    sl_dataset *src, *ds, *ss, *du;
    ASSERT_OK(sl_test_from_i64((int64_t[]){1, 37, 2, 37, 2, 1}, 6, &src));
    ASSERT_OK(sl_ds_unique(src, NULL, &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "unique");
    ASSERT_EQ(sl_dataset_cardinality(ds), SL_UNKNOWN_CARD);
    int64_t v[8];
    ASSERT_EQ(sl_test_values(ds, NULL, v, 8), 3);
    ASSERT_MEMEQ(v, ((int64_t[]){1, 37, 2}), 3 * sizeof(int64_t));
    const char *strs[3] = {"b", "a", "b"};
    ASSERT_OK(sl_test_from_strs(strs, 3, "value", &ss));
    ASSERT_OK(sl_ds_unique(ss, NULL, &du));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(du, &it, &e));
    const char *want[2] = {"b", "a"};
    for (int i = 0; i < 2; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        const sl_bytes *b = e.t[0].data;
        ASSERT_EQ(b->len, 1);
        ASSERT_EQ(b->ptr[0], want[i][0]);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    /* a fresh set per iterator */
    ASSERT_EQ(sl_test_values(ds, NULL, v, 8), 3);
    sl_dataset_unref(du);
    sl_dataset_unref(ss);
    sl_dataset_unref(ds);
    sl_dataset_unref(src);
}

/* the same example in int32 (tf.data's other integer type); float32 is refused */
TEST(test_unique_int32_and_float) {
    sl_dataset *src, *c32, *u32, *cf, *uf;
    ASSERT_OK(sl_test_from_i64((int64_t[]){1, 37, 2, 37, 2, 1}, 6, &src));
    sl_fn *to32, *tof;
    ASSERT_OK(sl_fn_cast("value", SL_DT_I32, &to32));
    ASSERT_OK(sl_fn_cast("value", SL_DT_F32, &tof));
    ASSERT_OK(sl_ds_map(src, to32, 1, true, &c32));
    ASSERT_OK(sl_ds_unique(c32, NULL, &u32));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(u32, &it, &e));
    const int32_t want[3] = {1, 37, 2};
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(e.t[0].dtype, SL_DT_I32);
        ASSERT_EQ(*(int32_t *)e.t[0].data, want[i]);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    ASSERT_OK(sl_ds_map(src, tof, 1, true, &cf));
    ASSERT_OK(sl_ds_unique(cf, NULL, &uf));
    ASSERT_OK(sl_test_open(uf, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'unique': component 'value' is float32[]: unique needs an int32, int64 or bytes "
                              "scalar\n---> HINT: tf.data's unique takes integer and string scalars only: cast the "
                              "component first");
    sl_iter_close(it);
    sl_dataset_unref(uf);
    sl_dataset_unref(cf);
    sl_dataset_unref(u32);
    sl_dataset_unref(c32);
    sl_fn_unref(tof);
    sl_fn_unref(to32);
    sl_dataset_unref(src);
}

/* many keys (the set grows), and the key as one component of the element, kept whole */
TEST(test_unique_component) {
    sl_dataset *r, *rep, *en, *ds;
    ASSERT_OK(sl_ds_range(0, 1000, 1, &r));
    ASSERT_OK(sl_ds_repeat(r, 3, &rep));
    ASSERT_OK(sl_ds_enumerate(rep, 0, NULL, &en));
    ASSERT_OK(sl_ds_unique(en, "value", &ds));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    for (int i = 0; i < 1000; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(sl_test_value(&e), i);
        ASSERT_EQ(*(int64_t *)e.t[sl_element_find(&e, "index")].data, i);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    sl_dataset_unref(en);
    sl_dataset_unref(rep);
    sl_dataset_unref(r);
}

TEST(test_unique_errors) {
    sl_dataset *r, *en, *d1, *d2, *rows, *d3, *none, *d4, *bad = (sl_dataset *)1;
    ASSERT_OK(sl_ds_range(0, 3, 1, &r));
    ASSERT_OK(sl_ds_enumerate(r, 0, NULL, &en));
    ASSERT_OK(sl_ds_unique(en, NULL, &d1));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(d1, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'unique': the element has 2 components: say which one is the key\n"
                              "---> HINT: unique COMPONENT (sl_ds_unique's component)");
    sl_iter_close(it);
    ASSERT_OK(sl_ds_unique(r, "label", &d2));
    ASSERT_OK(sl_test_open(d2, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'unique': the element has no component 'label'");
    sl_iter_close(it);
    ASSERT_OK(sl_test_from_rows((int64_t[]){1, 2}, (int[]){2}, 1, &rows));
    ASSERT_OK(sl_ds_unique(rows, NULL, &d3));
    ASSERT_OK(sl_test_open(d3, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'unique': component 'value' is int64[2]: unique needs an int32, int64 or bytes "
                              "scalar\n---> HINT: tf.data's unique takes integer and string scalars only: cast the "
                              "component first");
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    ASSERT_EQ(sl_ds_unique(r, "", &bad), SL_EINVAL);
    ASSERT(bad == NULL);
    ASSERT_OK(sl_ds_take(r, 0, &none));
    ASSERT_OK(sl_ds_unique(none, NULL, &d4));
    ASSERT_EQ(sl_dataset_cardinality(d4), 0);
    sl_dataset_unref(d4);
    sl_dataset_unref(none);
    sl_dataset_unref(d3);
    sl_dataset_unref(rows);
    sl_dataset_unref(d2);
    sl_dataset_unref(d1);
    sl_dataset_unref(en);
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_unique_doc_examples);
    RUN(test_unique_int32_and_float);
    RUN(test_unique_component);
    RUN(test_unique_errors);
    TEST_MAIN_END();
}
