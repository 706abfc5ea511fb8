/* pipeline/ops/enumerate.c: tf.data's enumerate. The API reference's examples
 * (from_tensor_slices([1, 2, 3]).enumerate(start=5) gives (5, 1) (6, 2) (7, 3);
 * from_tensor_slices([(7, 8), (9, 10)]).enumerate() gives (0, [7, 8]) (1, [9, 10])), the
 * name, its clash and the int64 limit refused exactly, the cardinality, and the seek. */
#include <stdint.h>

#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "helper_seq.h"
#include "test.h"

static int64_t comp_i64(const sl_element *e, const char *name) {
    int c = sl_element_find(e, name);
    return c < 0 ? -999999 : *(const int64_t *)e->t[c].data;
}

/* Dataset.enumerate's examples */
TEST(test_enumerate_doc_examples) {
    sl_dataset *src, *ds, *rows, *ds2;
    ASSERT_OK(sl_test_from_i64((int64_t[]){1, 2, 3}, 3, &src));
    ASSERT_OK(sl_ds_enumerate(src, 5, NULL, &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "enumerate");
    ASSERT_EQ(sl_dataset_cardinality(ds), 3);
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    for (int i = 0; i < 3; i++) { /* (5, 1) (6, 2) (7, 3) */
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(e.n, 2);
        ASSERT_EQ(comp_i64(&e, "index"), 5 + i);
        ASSERT_EQ(e.t[sl_element_find(&e, "index")].rank, 0);
        ASSERT_EQ(sl_test_value(&e), 1 + i);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    ASSERT_OK(sl_test_from_rows((int64_t[]){7, 8, 9, 10}, (int[]){2, 2}, 2, &rows));
    ASSERT_OK(sl_ds_enumerate(rows, 0, NULL, &ds2));
    ASSERT_OK(sl_test_open(ds2, &it, &e));
    for (int i = 0; i < 2; i++) { /* (0, [7, 8]) (1, [9, 10]) */
        int64_t v[4];
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(comp_i64(&e, "index"), i);
        ASSERT_EQ(sl_test_vec(&e, v, 4), 2);
        ASSERT_EQ(v[0], 7 + 2 * i);
        ASSERT_EQ(v[1], 8 + 2 * i);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds2);
    sl_dataset_unref(rows);
    sl_dataset_unref(ds);
    sl_dataset_unref(src);
}

TEST(test_enumerate_names_and_errors) {
    sl_dataset *r, *ds, *twice, *big, *inf, *di;
    ASSERT_OK(sl_ds_range(0, 3, 1, &r));
    ASSERT_OK(sl_ds_enumerate(r, 0, "step", &ds));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_EQ(comp_i64(&e, "step"), 0);
    sl_element_clear(&e);
    sl_iter_close(it);
    /* a name the element already has */
    ASSERT_OK(sl_ds_enumerate(ds, 0, "step", &twice));
    ASSERT_OK(sl_test_open(twice, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'enumerate': the element already has a component 'step'\n"
                              "---> HINT: give the index another name: enumerate as=NAME (sl_ds_enumerate's name)");
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL); /* it consumed that element: the next one, the same */
    sl_iter_close(it);
    /* past INT64_MAX */
    ASSERT_OK(sl_ds_enumerate(r, INT64_MAX - 1, NULL, &big));
    ASSERT_OK(sl_test_open(big, &it, &e));
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_EQ(comp_i64(&e, "index"), INT64_MAX - 1);
    sl_element_clear(&e);
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_EQ(comp_i64(&e, "index"), INT64_MAX);
    sl_element_clear(&e);
    ASSERT_EQ(sl_iter_next(it, &e), SL_ERANGE);
    ASSERT_STREQ(sl_errmsg(), "op 'enumerate': index 9223372036854775806 + 2 is past 2^63-1");
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset *bad = (sl_dataset *)1;
    ASSERT_EQ(sl_ds_enumerate(r, 0, "", &bad), SL_EINVAL);
    ASSERT(bad == NULL);
    ASSERT_EQ(sl_ds_enumerate(NULL, 0, NULL, &bad), SL_EINVAL);
    /* the cardinality is the input's */
    ASSERT_OK(sl_ds_repeat(r, SL_INFINITE, &inf));
    ASSERT_OK(sl_ds_enumerate(inf, 0, NULL, &di));
    ASSERT_EQ(sl_dataset_cardinality(di), SL_INFINITE);
    sl_dataset_unref(di);
    sl_dataset_unref(inf);
    sl_dataset_unref(big);
    sl_dataset_unref(twice);
    sl_dataset_unref(ds);
    sl_dataset_unref(r);
}

/* sl_iter_create_at(k) and save/restore give what iterating from 0 gives, with no replay */
TEST(test_enumerate_seek) {
    sl_dataset *r, *ds;
    ASSERT_OK(sl_ds_range(0, 10, 1, &r));
    ASSERT_OK(sl_ds_enumerate(r, 100, NULL, &ds));
    for (int64_t k = 0; k <= 10; k++) {
        sl_iter *it;
        sl_element e;
        sl_element_init(&e);
        ASSERT_OK(sl_iter_create_at(ds, NULL, k, &it));
        ASSERT_EQ(sl_iter_replayed(it), 0);
        for (int64_t i = k; i < 10; i++) {
            ASSERT_OK(sl_iter_next(it, &e));
            ASSERT_EQ(sl_test_value(&e), i);
            ASSERT_EQ(comp_i64(&e, "index"), 100 + i);
            sl_element_clear(&e);
        }
        ASSERT_EQ(sl_iter_next(it, &e), SL_END);
        sl_iter_close(it);
    }
    sl_iter *it, *back;
    sl_element e, x;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    sl_element_init(&x);
    for (int i = 0; i < 4; i++) ASSERT_OK(sl_test_next_drop(it));
    uint8_t st[SL_ITER_STATE_SIZE];
    size_t len;
    ASSERT_OK(sl_iter_save(it, st, sizeof st, &len));
    ASSERT_OK(sl_iter_restore(ds, NULL, st, len, &back));
    for (int i = 4; i < 10; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_OK(sl_iter_next(back, &x));
        ASSERT_EQ(comp_i64(&x, "index"), comp_i64(&e, "index"));
        ASSERT_EQ(comp_i64(&x, "index"), 100 + i);
        sl_element_clear(&e);
        sl_element_clear(&x);
    }
    ASSERT_EQ(sl_iter_next(back, &x), SL_END);
    sl_iter_close(back);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_enumerate_doc_examples);
    RUN(test_enumerate_names_and_errors);
    RUN(test_enumerate_seek);
    TEST_MAIN_END();
}
