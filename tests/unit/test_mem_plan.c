/* The memory plan of the buffers a config sizes (pipeline/mem_plan.c): a shuffle buffer or
 * a batch that cannot fit the pipeline's memory (ram_budget when given, else what the
 * process can still take) is SL_ENOMEM at its first element, naming the op, both sizes and
 * what to change, instead of growing until the OOM killer ends the process; one that fits
 * runs as before. Elements: int64 scalars of range (8 bytes each). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

/* An in-memory cache planned from the input's size (known here) and its first element: one
 * that cannot fit is not kept (a warning; the pass goes on uncached, so nothing is lost) and
 * every pass reads its input again; one that fits is replayed. */
static int64_t count_pass(sl_dataset *ds, int64_t ram_budget) {
    sl_iter_opts o = sl_iter_opts_default();
    o.ram_budget = ram_budget;
    sl_iter *it;
    if (sl_iter_create(ds, &o, &it)) return -1;
    sl_element e;
    sl_element_init(&e);
    int64_t n = 0, sum = 0;
    sl_status s;
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        sum += *(const int64_t *)e.t[0].data;
        n++;
        sl_element_clear(&e);
    }
    sl_iter_close(it);
    return s == SL_END && sum == n * (n - 1) / 2 ? n : -1;
}

TEST(test_memory_cache_plan) {
    sl_dataset *r, *c;
    ASSERT_OK(sl_ds_range(0, 200000, 1, &r));
    ASSERT_OK(sl_ds_cache(r, NULL, &c));
    /* 200,000 x 8 bytes = 1.5 MiB past a 1 MiB budget: not cached, both passes exact */
    sl_err_clear();
    FILE *cap = tmpfile(); /* stderr while the passes run: the warnings */
    ASSERT(cap);
    fflush(stderr);
    int saved = dup(2);
    dup2(fileno(cap), 2);
    int64_t n1 = count_pass(c, 1 << 20), n2 = count_pass(c, 1 << 20);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ASSERT_EQ(n1, 200000);
    ASSERT_EQ(n2, 200000);
    long len = ftell(cap);
    char *err = calloc(1, (size_t)len + 1);
    ASSERT(err);
    rewind(cap);
    ASSERT_EQ((long)fread(err, 1, (size_t)len, cap), len);
    fclose(cap);
    ASSERT_CONTAINS(err, "op 'cache': a memory cache of 200000 elements of 8 bytes each needs 1.5 MiB, more than the "
                         "1.0 MiB the pipeline may take (ram_budget)");
    ASSERT_CONTAINS(err, "HINT: this pass goes on uncached");
    free(err);
    ASSERT_EQ(sl_errcode(), SL_OK); /* the warning leaves the thread's error alone */
    /* with room, it is kept and replayed */
    ASSERT_EQ(count_pass(c, 16 << 20), 200000);
    ASSERT_EQ(count_pass(c, 16 << 20), 200000);
    sl_dataset_unref(c);
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_shuffle_buffer_plan);
    RUN(test_batch_plan);
    RUN(test_memory_cache_plan);
    TEST_MAIN_END();
}
