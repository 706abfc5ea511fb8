/* The memory plan of the buffers a config sizes (pipeline/mem_plan.c): a shuffle buffer or
 * a batch that cannot fit the pipeline's memory (ram_budget when given, else what the
 * process can still take) is SL_ENOMEM at its first element, naming the op, both sizes and
 * what to change, instead of growing until the OOM killer ends the process; one that fits
 * runs as before. Elements: int64 scalars of range (8 bytes each). */
#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "sluice/util.h"
#include "test.h"

/* The first next() of ds under ram_budget (0: none given): its status; *got its value. */
static sl_status first(sl_dataset *ds, int64_t ram_budget, int64_t *got) {
    sl_iter_opts o = sl_iter_opts_default();
    o.ram_budget = ram_budget;
    sl_iter *it;
    sl_status s = sl_iter_create(ds, &o, &it);
    if (s) return s;
    sl_element e;
    sl_element_init(&e);
    s = sl_iter_next(it, &e);
    if (!s) *got = *(const int64_t *)e.t[0].data;
    sl_element_clear(&e);
    sl_iter_close(it);
    return s;
}

TEST(test_shuffle_buffer_plan) {
    sl_dataset *r, *sh;
    int64_t v = -1;
    ASSERT_OK(sl_ds_range(0, 10000000, 1, &r));
    ASSERT_OK(sl_ds_shuffle(r, 1000000, 1, true, &sh));
    ASSERT_EQ(first(sh, 1 << 20, &v), SL_ENOMEM);
    ASSERT_CONTAINS(sl_errmsg(), "shuffle");
    ASSERT_CONTAINS(sl_errmsg(), "a shuffle buffer of 1000000 elements of 8 bytes each needs 7.6 MiB, more than the "
                                 "1.0 MiB the pipeline may take (ram_budget)");
    ASSERT_CONTAINS(sl_errmsg(), "HINT: a smaller `shuffle N`");
    ASSERT_OK(first(sh, 16 << 20, &v)); /* fits: as before */
    ASSERT(v >= 0 && v < 10000000);
    sl_dataset_unref(sh);
    /* a buffer larger than its input is planned for the input's elements */
    ASSERT_OK(sl_ds_shuffle(r, INT64_MAX, 1, true, &sh));
    ASSERT_EQ(first(sh, 1 << 20, &v), SL_ENOMEM);
    ASSERT_CONTAINS(sl_errmsg(), "a shuffle buffer of 10000000 elements of 8 bytes each needs 76.3 MiB");
    sl_dataset_unref(sh);
    sl_dataset_unref(r);
    /* no ram_budget: against what the process can still take; 2^62 elements fit nowhere */
    sl_dataset *inf, *rep;
    ASSERT_OK(sl_ds_range(0, 10, 1, &inf));
    ASSERT_OK(sl_ds_repeat(inf, SL_INFINITE, &rep));
    ASSERT_OK(sl_ds_shuffle(rep, (int64_t)1 << 62, 1, true, &sh));
    ASSERT_EQ(first(sh, 0, &v), SL_ENOMEM);
    ASSERT_CONTAINS(sl_errmsg(), "needs 32.0 EiB, more than the ");
    ASSERT_CONTAINS(sl_errmsg(), " this process can still take (");
    sl_dataset_unref(sh);
    ASSERT_OK(sl_ds_shuffle(rep, 1000, 1, true, &sh));
    ASSERT_OK(first(sh, 0, &v));
    ASSERT(v >= 0 && v < 10);
    sl_dataset_unref(sh);
    sl_dataset_unref(rep);
    sl_dataset_unref(inf);
}

TEST(test_batch_plan) {
    sl_dataset *r, *b, *m, *mb;
    ASSERT_OK(sl_ds_range(0, 100, 1, &r));
    sl_batch_opts bo = sl_batch_opts_default(1000000);
    ASSERT_OK(sl_ds_batch(r, &bo, &b));
    int64_t v = -1;
    ASSERT_EQ(first(b, 1 << 20, &v), SL_ENOMEM);
    ASSERT_CONTAINS(sl_errmsg(), "a batch of 1000000 elements of 8 bytes each needs 7.6 MiB, more than the 1.0 MiB "
                                 "the pipeline may take (ram_budget)");
    ASSERT_CONTAINS(sl_errmsg(), "HINT: a smaller `batch N`");
    ASSERT_OK(first(b, 16 << 20, &v));
    ASSERT_EQ(v, 0);
    sl_dataset_unref(b);
    /* fused map_batch: planned from the first mapped element (int64 to float64: 8 bytes) */
    sl_fn *fn;
    ASSERT_OK(sl_fn_cast("value", SL_DT_F64, &fn));
    ASSERT_OK(sl_ds_map(r, fn, 1, true, &m));
    bo = sl_batch_opts_default(4000000);
    ASSERT_OK(sl_ds_batch(m, &bo, &mb));
    ASSERT_EQ(first(mb, 1 << 20, &v), SL_ENOMEM);
    ASSERT_CONTAINS(sl_errmsg(), "a batch of 4000000 elements of 8 bytes each needs 30.5 MiB, more than the 1.0 MiB");
    sl_dataset_unref(mb);
    sl_dataset_unref(m);
    sl_fn_unref(fn);
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_shuffle_buffer_plan);
    RUN(test_batch_plan);
    TEST_MAIN_END();
}
