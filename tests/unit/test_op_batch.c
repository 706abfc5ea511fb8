/* pipeline/ops/batch.c: batches of 4 with the remainder (or without it), the end repeated;
 * vectors of different lengths refused unpadded and padded to the longest with the pad
 * value. */
#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "test.h"

/* value -> {"value": value, "vec": int32[value % 3 + 1] filled with value} */
static sl_status make_vec(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    int64_t v = *(int64_t *)e->t[0].data;
    int64_t len = v % 3 + 1;
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_I32, 1, &len);
    if (s) return s;
    for (int i = 0; i < len; i++) ((int32_t *)t.data)[i] = (int32_t)v;
    return sl_element_set(e, "vec", &t);
}

TEST(test_batch_and_padded) {
    sl_dataset *r, *b;
    ASSERT_OK(sl_ds_range(0, 10, 1, &r));
    sl_batch_opts o = sl_batch_opts_default(4);
    ASSERT_OK(sl_ds_batch(r, &o, &b));
    ASSERT_STREQ(sl_dataset_op(b), "batch");
    ASSERT_EQ(sl_dataset_cardinality(b), 3);
    sl_iter *it;
    ASSERT_OK(sl_iter_create(b, NULL, &it));
    sl_element e;
    sl_element_init(&e);
    int64_t sizes[3];
    for (int k = 0; k < 3; k++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(e.t[0].rank, 1);
        sizes[k] = e.t[0].dims[0];
        ASSERT_EQ(((int64_t *)e.t[0].data)[0], 4 * k);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sizes[0], 4); ASSERT_EQ(sizes[2], 2);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(b);
    o.drop_remainder = true;
    ASSERT_OK(sl_ds_batch(r, &o, &b));
    ASSERT_EQ(sl_dataset_cardinality(b), 2);
    sl_dataset_unref(b);

    /* variable-length vectors: refused unpadded, padded to the batch's longest with -1 */
    sl_fn *fn;
    sl_dataset *m, *pb;
    ASSERT_OK(sl_fn_custom("make_vec", make_vec, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(r, fn, 2, true, &m));
    sl_batch_opts po = sl_batch_opts_default(3);
    ASSERT_OK(sl_ds_batch(m, &po, &b));
    ASSERT_STREQ(sl_dataset_op(b), "map_batch"); /* fused */
    ASSERT_OK(sl_iter_create(b, NULL, &it));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'map_batch': component 'vec' is int32[1] in element 0 but int32[2] in element 1 of the batch\n"
                              "---> HINT: resize or crop to one shape before batching, or use a padded batch");
    sl_iter_close(it);
    sl_dataset_unref(b);
    po.padded = true;
    po.pad_value = -1;
    ASSERT_OK(sl_ds_batch(m, &po, &pb));
    ASSERT_STREQ(sl_dataset_op(pb), "batch"); /* padded: not fused */
    ASSERT_OK(sl_iter_create(pb, NULL, &it));
    ASSERT_OK(sl_iter_next(it, &e));
    int vi = sl_element_find(&e, "vec");
    ASSERT(vi >= 0);
    ASSERT_EQ(e.t[vi].rank, 2);
    ASSERT_EQ(e.t[vi].dims[0], 3);
    ASSERT_EQ(e.t[vi].dims[1], 3);
    int32_t expect[9] = {0, -1, -1, 1, 1, -1, 2, 2, 2};
    ASSERT_MEMEQ(e.t[vi].data, expect, sizeof expect);
    sl_element_clear(&e);
    int batches = 1;
    while (sl_iter_next(it, &e) == SL_OK) { batches++; sl_element_clear(&e); }
    ASSERT_EQ(batches, 4);
    sl_iter_close(it);
    sl_dataset_unref(pb);
    sl_dataset_unref(m);
    sl_fn_unref(fn);
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_batch_and_padded);
    TEST_MAIN_END();
}
