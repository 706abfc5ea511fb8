/* pipeline/from_config_fn.c: the caller's own map functions (sl_pipeline_env.find_fn), as
 * the Python module registers its Python functions: a call NAME() that is not a stock
 * function is looked up through find_fn; it maps like any function (chained, in parallel,
 * in order), its errors name the op; a stock name is never looked up; SL_ENOTFOUND gives the
 * usual "unknown function" error; arguments, and a failing lookup, are refused at the spot;
 * the dataset keeps the function (and frees it) without the caller's config or env. */
#include <stdint.h>
#include <string.h>

#include "sluice/config.h"
#include "sluice/fn.h"
#include "sluice/from_config.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "test.h"

typedef struct {
    int lookups;  /* find_fn calls */
    int freed;    /* functions freed */
} registry;

static void count_free(void *ctx, void *unused) {
    (void)unused;
    ((registry *)ctx)->freed++;
}

static sl_status add3(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx;
    return sl_test_append_digit((void *)(intptr_t)3, e, call);
}

static sl_status fail7(void *ctx, sl_element *e, const sl_fn_call *call) { return sl_test_fail_mod7(NULL, e, call); }

static sl_status find(void *ctx, const char *name, sl_fn **out) {
    registry *r = ctx;
    r->lookups++;
    if (strcmp(name, "digit3") == 0) return sl_fn_custom("digit3", add3, r, count_free, out);
    if (strcmp(name, "fail7") == 0) return sl_fn_custom("fail7", fail7, r, count_free, out);
    if (strcmp(name, "broken") == 0) return sl_err(SL_ENOMEM, "no memory for function '%s'", name);
    return SL_ENOTFOUND;
}

static sl_status build(const char *text, registry *r, sl_dataset **ds) {
    sl_cfg *c = NULL;
    *ds = NULL;
    if (sl_cfg_parse(text, strlen(text), "t.sl", &c) != SL_OK) {
        printf("  unexpected parse error: %s\n", sl_errmsg());
        return SL_EINTERNAL;
    }
    sl_pipeline_env env = sl_pipeline_env_default();
    if (r) {
        env.find_fn = find;
        env.find_fn_ctx = r;
    }
    sl_status s = sl_pipeline_from_config(c, "t", &env, ds);
    sl_cfg_free(c); /* the dataset must not need the config any more */
    return s;
}

TEST(test_default_env_has_no_lookup) {
    sl_pipeline_env env = sl_pipeline_env_default();
    ASSERT(env.find_fn == NULL);
    ASSERT(env.find_fn_ctx == NULL);
}

TEST(test_custom_function_maps_in_order) {
    static const char *const texts[] = {
        "pipeline t {\n    range 0 6\n    map digit3()\n}\n",
        "pipeline t {\n    range 0 6\n    map digit3() parallel=4\n}\n",
        "pipeline t {\n    range 0 6\n    map digit3() parallel=auto deterministic=true\n}\n",
    };
    for (int k = 0; k < 3; k++) {
        registry r = {0};
        sl_dataset *ds;
        ASSERT_OK(build(texts[k], &r, &ds));
        ASSERT_EQ(r.lookups, 1);
        ASSERT_EQ(sl_dataset_cardinality(ds), 6);
        int64_t v[8];
        ASSERT_EQ(sl_test_values(ds, NULL, v, 8), 6);
        for (int i = 0; i < 6; i++) ASSERT_EQ(v[i], 10 * i + 3);
        ASSERT_EQ(r.freed, 0);
        sl_dataset_unref(ds);
        ASSERT_EQ(r.freed, 1); /* the map held the only reference */
    }
}

TEST(test_custom_function_in_a_chain_and_batch) {
    registry r = {0};
    sl_dataset *ds;
    ASSERT_OK(build("pipeline t {\n    range 0 4\n    map cast(value, int64) | digit3() | digit3()\n}\n", &r, &ds));
    ASSERT_EQ(r.lookups, 2); /* cast is a stock function: never looked up */
    int64_t v[8];
    ASSERT_EQ(sl_test_values(ds, NULL, v, 8), 4);
    for (int i = 0; i < 4; i++) ASSERT_EQ(v[i], 100 * i + 33);
    sl_dataset_unref(ds);
    ASSERT_EQ(r.freed, 2);

    /* fused with batch: the same values, stacked */
    r = (registry){0};
    ASSERT_OK(build("pipeline t {\n    range 0 4\n    map digit3() parallel=2\n    batch 2\n}\n", &r, &ds));
    ASSERT_EQ(sl_dataset_cardinality(ds), 2);
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    for (int b = 0; b < 2; b++) {
        ASSERT_OK(sl_iter_next(it, &e));
        int c = sl_element_find(&e, "value");
        ASSERT(c >= 0);
        ASSERT_EQ(e.t[c].rank, 1);
        ASSERT_EQ(e.t[c].dims[0], 2);
        const int64_t *x = e.t[c].data;
        ASSERT_EQ(x[0], 20 * b + 3);
        ASSERT_EQ(x[1], 20 * b + 13);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    ASSERT_EQ(r.freed, 1);
}

TEST(test_custom_function_error_names_the_op) {
    registry r = {0};
    sl_dataset *ds;
    ASSERT_OK(build("pipeline t {\n    range 0 10\n    map fail7() parallel=3\n}\n", &r, &ds));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    for (int i = 0; i < 6; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(sl_test_value(&e), i);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "t/map");
    ASSERT_CONTAINS(sl_errmsg(), "value 6 is unlucky");
    ASSERT_OK(sl_iter_next(it, &e)); /* the error consumed element 6 */
    ASSERT_EQ(sl_test_value(&e), 7);
    sl_element_clear(&e);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    ASSERT_EQ(r.freed, 1);
}

TEST(test_unknown_names_and_mistakes) {
    registry r = {0};
    sl_dataset *ds;
    /* not the caller's either: the usual error, with the did-you-mean of the stock table */
    ASSERT_EQ(build("pipeline t {\n    range 0 3\n    map scael(value, 2)\n}\n", &r, &ds), SL_EINVAL);
    ASSERT(ds == NULL);
    ASSERT_EQ(r.lookups, 1);
    ASSERT_CONTAINS(sl_errmsg(), "t.sl:3:9: unknown function 'scael' in map");
    ASSERT_CONTAINS(sl_errmsg(), "the functions are parse_example");

    /* arguments to the caller's function: refused at the argument, nothing leaked */
    r = (registry){0};
    ASSERT_EQ(build("pipeline t {\n    range 0 3\n    map digit3(value)\n}\n", &r, &ds), SL_EINVAL);
    ASSERT(ds == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "t.sl:3:16: digit3: the function is the caller's own and takes no arguments");
    ASSERT_CONTAINS(sl_errmsg(), "write digit3()");
    ASSERT_EQ(r.freed, 1);

    /* a failing lookup: its status, prefixed with the call's spot */
    r = (registry){0};
    ASSERT_EQ(build("pipeline t {\n    range 0 3\n    map digit3() | broken()\n}\n", &r, &ds), SL_ENOMEM);
    ASSERT(ds == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "t.sl:3:20: no memory for function 'broken'");
    ASSERT_EQ(r.freed, 1); /* digit3, built before, was released */

    /* without find_fn the name is unknown */
    ASSERT_EQ(build("pipeline t {\n    range 0 3\n    map digit3()\n}\n", NULL, &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "unknown function 'digit3' in map");
}

int main(void) {
    RUN(test_default_env_has_no_lookup);
    RUN(test_custom_function_maps_in_order);
    RUN(test_custom_function_in_a_chain_and_batch);
    RUN(test_custom_function_error_names_the_op);
    RUN(test_unknown_names_and_mistakes);
    TEST_MAIN_END();
}
