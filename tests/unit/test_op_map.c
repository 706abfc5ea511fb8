/* pipeline/ops/map.c: order, errors in their place and each element's seed the same at
 * every parallelism, unordered the same multiset; a chain inside a chain runs in order. */
#include <unistd.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "test.h"

/* A function that is slow on some elements (so finishing order differs from input order)
 * and fails on multiples of 7. */
static sl_status jittery(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx;
    int64_t v = *(int64_t *)e->t[0].data;
    if (v % 5 == 0) usleep(2000);
    if (v % 7 == 6) return sl_err(SL_EINVAL, "value %lld is unlucky", (long long)v);
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_I64, 0, NULL);
    if (s) return s;
    *(int64_t *)t.data = (int64_t)(call->seed & 0xffff);
    return sl_element_set(e, "seedbits", &t);
}

TEST(test_map_order_errors_seeds) {
    sl_dataset *r;
    ASSERT_OK(sl_ds_range(0, 50, 1, &r));
    sl_fn *fn;
    ASSERT_OK(sl_fn_custom("jittery", jittery, NULL, NULL, &fn));
    int64_t ref_seed[50];
    for (int par = 1; par <= 8; par *= 2) {
        sl_dataset *m;
        ASSERT_OK(sl_ds_map(r, fn, par, true, &m));
        sl_iter *it;
        ASSERT_OK(sl_iter_create(m, NULL, &it));
        sl_element e;
        sl_element_init(&e);
        int n = 0, errors = 0;
        for (int64_t want = 0; want < 50; want++) {
            sl_status s = sl_iter_next(it, &e);
            if (want % 7 == 6) { /* the error comes in order, then the stream goes on */
                ASSERT_EQ(s, SL_EINVAL);
                char msg[80];
                snprintf(msg, sizeof msg, "op 'map': jittery: value %lld is unlucky", (long long)want);
                ASSERT_STREQ(sl_errmsg(), msg);
                errors++;
                continue;
            }
            ASSERT_OK(s);
            ASSERT_EQ(*(int64_t *)e.t[sl_element_find(&e, "value")].data, want);
            int64_t sb = *(int64_t *)e.t[sl_element_find(&e, "seedbits")].data;
            if (par == 1) ref_seed[want] = sb;
            else ASSERT_EQ(sb, ref_seed[want]); /* same seed whatever the parallelism */
            sl_element_clear(&e);
            n++;
        }
        ASSERT_EQ(sl_iter_next(it, &e), SL_END);
        ASSERT_EQ(n, 43);
        ASSERT_EQ(errors, 7);
        sl_iter_close(it);
        sl_dataset_unref(m);
    }
    /* unordered: the same multiset */
    sl_dataset *m;
    ASSERT_OK(sl_ds_map(r, fn, 4, false, &m));
    sl_iter *it;
    ASSERT_OK(sl_iter_create(m, NULL, &it));
    sl_element e;
    sl_element_init(&e);
    int seen[50] = {0}, n = 0;
    sl_status s;
    while ((s = sl_iter_next(it, &e)) != SL_END) {
        if (s == SL_EINVAL) continue;
        ASSERT_OK(s);
        seen[*(int64_t *)e.t[0].data]++;
        sl_element_clear(&e);
        n++;
    }
    ASSERT_EQ(n, 43);
    for (int i = 0; i < 50; i++) ASSERT_EQ(seen[i], i % 7 == 6 ? 0 : 1);
    sl_iter_close(it);
    sl_dataset_unref(m);
    sl_fn_unref(fn);
    sl_dataset_unref(r);
}

/* A chain inside a chain runs its members in order (chains are flattened). */
TEST(test_nested_chain) {
    sl_fn *a, *b, *c, *ab, *abc;
    ASSERT_OK(sl_fn_custom("a", sl_test_append_digit, (void *)1, NULL, &a));
    ASSERT_OK(sl_fn_custom("b", sl_test_append_digit, (void *)2, NULL, &b));
    ASSERT_OK(sl_fn_custom("c", sl_test_append_digit, (void *)3, NULL, &c));
    sl_fn *pair[2] = {a, b};
    ASSERT_OK(sl_fn_chain(pair, 2, &ab));
    sl_fn *outer[2] = {ab, c};
    ASSERT_OK(sl_fn_chain(outer, 2, &abc));
    ASSERT_STREQ(sl_fn_name(abc), "a|b|c");
    sl_dataset *r, *m;
    ASSERT_OK(sl_ds_range(5, 7, 1, &r));
    ASSERT_OK(sl_ds_map(r, abc, 2, true, &m));
    int64_t v[4];
    ASSERT_EQ(sl_test_values(m, NULL, v, 4), 2);
    ASSERT_EQ(v[0], 5123);
    ASSERT_EQ(v[1], 6123);
    sl_dataset_unref(m);
    sl_dataset_unref(r);
    sl_fn_unref(abc);
    sl_fn_unref(ab);
    sl_fn_unref(a);
    sl_fn_unref(b);
    sl_fn_unref(c);
}

int main(void) {
    RUN(test_map_order_errors_seeds);
    RUN(test_nested_chain);
    TEST_MAIN_END();
}
