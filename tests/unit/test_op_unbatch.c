/* pipeline/ops/unbatch.c: tf.data's unbatch. The API reference's example (elements
 * [1, 2, 3], [1, 2], [1, 2, 3, 4] from a generator unbatch to 1 2 3 1 2 1 2 3 4), the
 * string example of tf.data.experimental.unbatch, several components, empty batches,
 * errors (a scalar, leading dimensions that differ) exactly, the end and the cardinality. */
#include <stdint.h>
#include <string.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "helper_seq.h"
#include "test.h"

/* Dataset.unbatch's example: ragged batches from a generator */
TEST(test_unbatch_doc_example) {
    sl_dataset *rows, *ds;
    ASSERT_OK(sl_test_from_rows((int64_t[]){1, 2, 3, 1, 2, 1, 2, 3, 4}, (int[]){3, 2, 4}, 3, &rows));
    ASSERT_OK(sl_ds_unbatch(rows, &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "unbatch");
    ASSERT_EQ(sl_dataset_cardinality(ds), SL_UNKNOWN_CARD);
    int64_t v[16];
    ASSERT_EQ(sl_test_values(ds, NULL, v, 16), 9);
    ASSERT_MEMEQ(v, ((int64_t[]){1, 2, 3, 1, 2, 1, 2, 3, 4}), 9 * sizeof(int64_t));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_EQ(sl_test_drain(it), 9);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    sl_dataset_unref(rows);
}

/* tf.data.experimental.unbatch's example, { ['a', 'b', 'c'], ['a', 'b'], ['a', 'b', 'c', 'd'] }
 * -> 'a' 'b' 'c' 'a' 'b' 'a' 'b' 'c' 'd': the ragged string batches made by rebatch [3, 2, 4] */
TEST(test_unbatch_strings) {
    const char *s[9] = {"a", "b", "c", "a", "b", "a", "b", "c", "d"};
    sl_dataset *src, *b, *ds;
    ASSERT_OK(sl_test_from_strs(s, 9, "value", &src));
    sl_batch_opts o = sl_batch_opts_default(1);
    sl_dataset *rb;
    ASSERT_OK(sl_ds_batch(src, &o, &rb)); /* [1]-row batches of strings */
    ASSERT_OK(sl_ds_rebatch(rb, (int64_t[]){3, 2, 4}, 3, false, &b));
    ASSERT_OK(sl_ds_unbatch(b, &ds));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(b, &it, &e));
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_EQ(e.t[0].rank, 1);
    ASSERT_EQ(e.t[0].dims[0], 3);
    sl_element_clear(&e);
    sl_iter_close(it);
    ASSERT_OK(sl_test_open(ds, &it, &e));
    for (int i = 0; i < 9; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(e.t[0].dtype, SL_DT_BYTES);
        ASSERT_EQ(e.t[0].rank, 0);
        const sl_bytes *x = e.t[0].data;
        ASSERT_EQ(x->len, 1);
        ASSERT_EQ(x->ptr[0], s[i][0]);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    sl_dataset_unref(b);
    sl_dataset_unref(rb);
    sl_dataset_unref(src);
}

/* several components split together; batches of 0 rows give nothing */
TEST(test_unbatch_components_and_empty) {
    sl_dataset *r, *en, *b, *ds, *rows, *ds2;
    ASSERT_OK(sl_ds_range(0, 5, 1, &r));
    ASSERT_OK(sl_ds_enumerate(r, 10, NULL, &en));
    sl_batch_opts o = sl_batch_opts_default(2);
    ASSERT_OK(sl_ds_batch(en, &o, &b));
    ASSERT_OK(sl_ds_unbatch(b, &ds));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    for (int i = 0; i < 5; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(e.n, 2);
        ASSERT_EQ(sl_test_value(&e), i);
        ASSERT_EQ(*(int64_t *)e.t[sl_element_find(&e, "index")].data, 10 + i);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    ASSERT_OK(sl_test_from_rows((int64_t[]){5, 6}, (int[]){0, 2, 0}, 3, &rows));
    ASSERT_OK(sl_ds_unbatch(rows, &ds2));
    int64_t v[4];
    ASSERT_EQ(sl_test_values(ds2, NULL, v, 4), 2);
    ASSERT_EQ(v[0], 5);
    ASSERT_EQ(v[1], 6);
    sl_dataset_unref(ds2);
    sl_dataset_unref(rows);
    sl_dataset_unref(ds);
    sl_dataset_unref(b);
    sl_dataset_unref(en);
    sl_dataset_unref(r);
}

static sl_status add_other3(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    sl_tensor t;
    int64_t d = 3;
    sl_status s = sl_tensor_alloc(&t, SL_DT_I64, 1, &d);
    if (s) return s;
    memset(t.data, 0, 3 * sizeof(int64_t));
    return sl_element_set(e, "other", &t);
}

TEST(test_unbatch_errors_and_cardinality) {
    sl_dataset *r, *ds, *b, *m, *ds2, *none, *dn, *inf, *di;
    ASSERT_OK(sl_ds_range(0, 3, 1, &r));
    ASSERT_OK(sl_ds_unbatch(r, &ds));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'unbatch': component 'value' is int64[], a scalar: it has no rows to split\n"
                              "---> HINT: unbatch and rebatch split every component along its first dimension: "
                              "batch first");
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL); /* each element is consumed: three errors, then the end */
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_batch_opts o = sl_batch_opts_default(2);
    ASSERT_OK(sl_ds_batch(r, &o, &b));
    sl_fn *fn;
    ASSERT_OK(sl_fn_custom("add_other3", add_other3, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(b, fn, 1, true, &m));
    ASSERT_OK(sl_ds_unbatch(m, &ds2));
    ASSERT_OK(sl_test_open(ds2, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'unbatch': component 'other' is int64[3] but component 'value' is int64[2]: their "
                              "first dimensions differ\n---> HINT: every component must have the same number of rows "
                              "(the batch dimension)");
    sl_iter_close(it);
    ASSERT_OK(sl_ds_take(b, 0, &none));
    ASSERT_OK(sl_ds_unbatch(none, &dn));
    ASSERT_EQ(sl_dataset_cardinality(dn), 0);
    ASSERT_OK(sl_ds_repeat(b, SL_INFINITE, &inf));
    ASSERT_OK(sl_ds_unbatch(inf, &di));
    ASSERT_EQ(sl_dataset_cardinality(di), SL_INFINITE);
    sl_dataset_unref(di);
    sl_dataset_unref(inf);
    sl_dataset_unref(dn);
    sl_dataset_unref(none);
    sl_dataset_unref(ds2);
    sl_dataset_unref(m);
    sl_fn_unref(fn);
    sl_dataset_unref(b);
    sl_dataset_unref(ds);
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_unbatch_doc_example);
    RUN(test_unbatch_strings);
    RUN(test_unbatch_components_and_empty);
    RUN(test_unbatch_errors_and_cardinality);
    TEST_MAIN_END();
}
