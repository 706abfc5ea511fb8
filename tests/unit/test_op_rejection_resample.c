/* pipeline/ops/rejection_resample.c: over 20000 elements whose class is 1 for every tenth
 * (an initial distribution of [0.9, 0.1]) resampled to [0.5, 0.5], with initial_dist given
 * and estimated online: the exact counts kept for the fixed seed 42 (pinned: the draw is
 * a hash of the seed, the stream seed and the position), the class shares within 0.02 of
 * the target, the same stream run after run and another for another seed; a target equal
 * to the input's keeping everything; the kept elements in input order; errors (creation
 * and per element, exact codes and messages), cardinality, the end repeated. */
#include <math.h>
#include <stdio.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "test.h"

/* value -> "cls" = value % 10 == 0 (int64 scalar); ctx non-NULL: "cls" = value % 10 */
static sl_status add_cls(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)call;
    int64_t v = sl_test_value(e);
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_I64, 0, NULL);
    if (s) return s;
    *(int64_t *)t.data = ctx ? v % 10 : v % 10 == 0;
    if ((s = sl_element_set(e, "cls", &t))) sl_tensor_release(&t);
    return s;
}

/* Reads ds: counts per class (2), the number kept, whether values increase. */
static sl_status count(sl_dataset *ds, uint64_t pipeline_seed, int64_t *per, int64_t *kept, bool *ordered,
                       uint64_t *hash) {
    sl_iter_opts o = sl_iter_opts_default();
    o.seed = pipeline_seed;
    sl_iter *it;
    sl_element e;
    sl_element_init(&e);
    sl_status s = sl_iter_create(ds, &o, &it);
    if (s) return s;
    per[0] = per[1] = *kept = 0;
    *ordered = true;
    *hash = 1469598103934665603ull;
    int64_t last = -1;
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        int64_t v = sl_test_value(&e);
        per[*(int64_t *)e.t[sl_element_find(&e, "cls")].data]++;
        (*kept)++;
        if (v <= last) *ordered = false;
        last = v;
        *hash = (*hash ^ (uint64_t)v) * 1099511628211ull;
        sl_element_clear(&e);
    }
    if (s == SL_END && sl_iter_next(it, &e) != SL_END) s = SL_EINTERNAL;
    sl_iter_close(it);
    return s;
}

static sl_status resampled(int64_t n, const double *initial, uint64_t seed, sl_dataset **out) {
    sl_dataset *m;
    sl_status s = sl_test_range_map(n, "add_cls", add_cls, NULL, 1, &m);
    if (s) return s;
    const double target[2] = {0.5, 0.5};
    s = sl_ds_rejection_resample(m, "cls", target, 2, initial, seed, out);
    sl_dataset_unref(m);
    return s;
}

TEST(test_resample_given_initial) {
    const double initial[2] = {0.9, 0.1};
    sl_dataset *ds;
    ASSERT_OK(resampled(20000, initial, 42, &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "rejection_resample");
    ASSERT_EQ(sl_dataset_cardinality(ds), SL_UNKNOWN_CARD);
    int64_t per[2], kept;
    bool ordered;
    uint64_t h1, h2;
    ASSERT_EQ(count(ds, 0, per, &kept, &ordered, &h1), SL_END);
    printf("  given: kept %lld: %lld / %lld\n", (long long)kept, (long long)per[0], (long long)per[1]);
    ASSERT_EQ(per[1], 2000); /* class 1 is accepted with probability 1 */
    ASSERT_EQ(per[0], 2000); /* pinned for seed 42 (41 gives 2014, 43 2015: binomial(18000, 1/9)) */
    ASSERT(ordered);
    ASSERT(fabs((double)per[1] / (double)kept - 0.5) < 0.02);
    ASSERT_EQ(count(ds, 0, per, &kept, &ordered, &h2), SL_END);
    ASSERT_U64(h1, h2); /* the same stream again */
    ASSERT_EQ(count(ds, 7, per, &kept, &ordered, &h2), SL_END);
    ASSERT_NE(h1, h2); /* another pipeline seed, another draw */
    sl_dataset_unref(ds);
    ASSERT_OK(resampled(20000, initial, 43, &ds));
    ASSERT_EQ(count(ds, 0, per, &kept, &ordered, &h2), SL_END);
    ASSERT_NE(h1, h2);
    sl_dataset_unref(ds);
}

TEST(test_resample_estimated) {
    sl_dataset *ds;
    ASSERT_OK(resampled(20000, NULL, 42, &ds));
    int64_t per[2], kept;
    bool ordered;
    uint64_t h;
    ASSERT_EQ(count(ds, 0, per, &kept, &ordered, &h), SL_END);
    printf("  estimated: kept %lld: %lld / %lld\n", (long long)kept, (long long)per[0], (long long)per[1]);
    ASSERT_EQ(per[0], 2057); /* pinned for seed 42 */
    ASSERT_EQ(per[1], 2000); /* p_1 stays below p_0: class 1 has the largest ratio, always kept */
    ASSERT(ordered);
    ASSERT(fabs((double)per[1] / (double)kept - 0.5) < 0.02);
    sl_dataset_unref(ds);
    /* a target equal to the input's distribution keeps everything */
    sl_dataset *m;
    ASSERT_OK(sl_test_range_map(1000, "add_cls", add_cls, NULL, 1, &m));
    const double same[2] = {9, 1}; /* normalised: [0.9, 0.1] */
    ASSERT_OK(sl_ds_rejection_resample(m, "cls", same, 2, same, 1, &ds));
    ASSERT_EQ(count(ds, 0, per, &kept, &ordered, &h), SL_END);
    ASSERT_EQ(kept, 1000);
    sl_dataset_unref(ds);
    sl_dataset_unref(m);
}

TEST(test_resample_errors) {
    sl_dataset *m, *ds;
    ASSERT_OK(sl_test_range_map(30, "add_cls", add_cls, (void *)1, 1, &m)); /* classes 0..9 */
    const double t2[2] = {0.5, 0.5}, neg[2] = {0.5, -1}, zero[2] = {0, 0};
    ASSERT_EQ(sl_ds_rejection_resample(m, "cls", t2, 0, NULL, 1, &ds), SL_EINVAL);
    ASSERT(ds == NULL);
    ASSERT_EQ(sl_ds_rejection_resample(m, "cls", neg, 2, NULL, 1, &ds), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "rejection_resample: target weight 1 is -1: weights must be finite and >= 0");
    ASSERT_EQ(sl_ds_rejection_resample(m, "cls", t2, 2, zero, 1, &ds), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "rejection_resample: the initial weights sum to 0");
    ASSERT_EQ(sl_ds_rejection_resample(m, "", t2, 2, NULL, 1, &ds), SL_EINVAL);
    /* class 2 with two classes: that element's error, then the stream goes on */
    ASSERT_OK(sl_ds_rejection_resample(m, "cls", t2, 2, t2, 1, &ds));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_EQ(sl_test_value(&e), 0);
    sl_element_clear(&e);
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_EQ(sl_test_value(&e), 1);
    sl_element_clear(&e);
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'rejection_resample': class 2 of component 'cls' is outside 0..1");
    sl_iter_close(it);
    sl_dataset_unref(ds);
    ASSERT_OK(sl_ds_rejection_resample(m, "value2", t2, 2, NULL, 1, &ds));
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'rejection_resample': no class component 'value2'");
    sl_iter_close(it);
    sl_dataset_unref(ds);
    sl_dataset_unref(m);
    /* a class that is not an integer scalar */
    sl_dataset *r, *w;
    ASSERT_OK(sl_ds_range(0, 4, 1, &r));
    ASSERT_OK(sl_ds_window(r, 2, 0, 1, false, &w));
    ASSERT_OK(sl_ds_rejection_resample(w, "value", t2, 2, NULL, 1, &ds));
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'rejection_resample': class component 'value' is int64[2]: it must be an int64 or "
                              "int32 scalar");
    sl_iter_close(it);
    sl_dataset_unref(ds);
    sl_dataset_unref(w);
    /* empty input: cardinality 0, the end at once and again */
    sl_dataset *z;
    ASSERT_OK(sl_ds_range(0, 0, 1, &z));
    ASSERT_OK(sl_ds_rejection_resample(z, "cls", t2, 2, NULL, 1, &ds));
    ASSERT_EQ(sl_dataset_cardinality(ds), 0);
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    sl_dataset_unref(z);
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_resample_given_initial);
    RUN(test_resample_estimated);
    RUN(test_resample_errors);
    TEST_MAIN_END();
}
