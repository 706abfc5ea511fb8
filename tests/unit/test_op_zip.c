/* pipeline/ops/zip.c: elements side by side up to the shortest input, a component name in
 * two inputs refused at the first element, no inputs refused. */
#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "test.h"

static sl_status rename_other(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    int c = sl_element_find(e, "value");
    if (c < 0) return sl_err(SL_EINVAL, "no value");
    snprintf(e->names[c], SL_NAME_MAX, "other");
    return SL_OK;
}

TEST(test_zip) {
    sl_dataset *a, *b, *bm, *z, *zz;
    ASSERT_OK(sl_ds_range(0, 5, 1, &a));
    ASSERT_OK(sl_ds_range(10, 20, 1, &b));
    sl_fn *fn;
    ASSERT_OK(sl_fn_custom("rename", rename_other, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(b, fn, 1, true, &bm));
    sl_dataset *ins[2] = {a, bm};
    ASSERT_OK(sl_ds_zip(ins, 2, &z));
    ASSERT_EQ(sl_dataset_cardinality(z), 5);
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(z, &it, &e));
    for (int i = 0; i < 5; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(e.n, 2);
        ASSERT_EQ(sl_test_value(&e), i);
        ASSERT_EQ(*(int64_t *)e.t[sl_element_find(&e, "other")].data, 10 + i);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    /* a name in two inputs: known only at the first element */
    sl_dataset *same[2] = {a, b};
    ASSERT_OK(sl_ds_zip(same, 2, &zz));
    ASSERT_OK(sl_iter_create(zz, NULL, &it));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'zip': component 'value' is in input 0 and input 1\n"
                              "---> HINT: rename one of them with a map before zipping");
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(zz);
    ASSERT_EQ(sl_ds_zip(same, 0, &zz), SL_EINVAL);
    ASSERT(zz == NULL);
    sl_dataset_unref(z);
    sl_dataset_unref(bm);
    sl_fn_unref(fn);
    sl_dataset_unref(b);
    sl_dataset_unref(a);
}

int main(void) {
    RUN(test_zip);
    TEST_MAIN_END();
}
