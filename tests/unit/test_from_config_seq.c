/* pipeline/from_config_seq.c: the statements zip, concatenate, enumerate, unbatch, rebatch,
 * take_while, scan and unique give what the C API gives on tf.data's API reference examples
 * (zip(a, b), zip(a, d); a.concatenate(b); enumerate(start=5); range(8).batch(4).rebatch(2)
 * and rebatch([2, 1, 1]) over range(16).batch(4); take_while(x < 5); the cumulative-sum
 * scan; unique), and their mistakes are refused with exact codes at FILE:LINE:COL. */
#include <stdlib.h>
#include <string.h>

#include "sluice/config.h"
#include "sluice/from_config.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "helper_seq.h"
#include "test.h"

static sl_status build(const char *text, const char *name, sl_dataset **ds) {
    sl_cfg *c = NULL;
    *ds = NULL;
    if (sl_cfg_parse(text, strlen(text), "seq.sl", &c) != SL_OK) {
        printf("  unexpected parse error: %s\n", sl_errmsg());
        return SL_EINTERNAL;
    }
    sl_status s = sl_pipeline_from_config(c, name, NULL, ds);
    sl_cfg_free(c); /* the dataset must not need the config any more */
    return s;
}

/* the "value"s of pipeline `name` of text, or -1 */
static int values(const char *text, const char *name, int64_t *out, int cap) {
    sl_dataset *ds;
    if (build(text, name, &ds)) {
        printf("  build failed: %s\n", sl_errmsg());
        return -1;
    }
    int n = sl_test_values(ds, NULL, out, cap);
    sl_dataset_unref(ds);
    return n;
}

static int64_t comp(const sl_element *e, const char *name) {
    int c = sl_element_find(e, name);
    return c < 0 ? -999999 : *(const int64_t *)e->t[c].data;
}

static const char *const ABD = "pipeline a {\n    range 1 4\n}\n"
                               "pipeline b {\n    range 4 7\n}\n"
                               "pipeline d {\n    range 13 15\n}\n";

/* Dataset.zip's examples: zip(a, b) -> (1, 4) (2, 5) (3, 6); zip(a, d) -> (1, 13) (2, 14) */
TEST(test_zip_statement) {
    char text[1024];
    sl_dataset *ds;
    snprintf(text, sizeof text, "%spipeline z {\n    zip a b prefix=true\n}\npipeline zd {\n    zip a d prefix=true\n}\n", ABD);
    ASSERT_OK(build(text, "z", &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "zip");
    ASSERT_EQ(sl_dataset_cardinality(ds), 3);
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(e.n, 2);
        ASSERT_EQ(comp(&e, "a.value"), 1 + i);
        ASSERT_EQ(comp(&e, "b.value"), 4 + i);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    ASSERT_OK(build(text, "zd", &ds));
    ASSERT_EQ(sl_dataset_cardinality(ds), 2);
    ASSERT_OK(sl_test_open(ds, &it, &e));
    for (int i = 0; i < 2; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(comp(&e, "a.value"), 1 + i);
        ASSERT_EQ(comp(&e, "d.value"), 13 + i);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    /* without prefix=true the two "value"s clash: sl_ds_zip's error at the first element */
    snprintf(text, sizeof text, "%spipeline z {\n    zip a b\n}\n", ABD);
    ASSERT_OK(build(text, "z", &ds));
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'z/zip': component 'value' is in input 0 and input 1\n"
                              "---> HINT: rename one of them with a map before zipping");
    sl_iter_close(it);
    sl_dataset_unref(ds);
    /* a name that is no pipeline, and the pipeline itself */
    snprintf(text, sizeof text, "%spipeline z {\n    zip a nope\n}\n", ABD);
    ASSERT_EQ(build(text, "z", &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "seq.sl:11:11: no pipeline 'nope' in seq.sl");
    snprintf(text, sizeof text, "%spipeline z {\n    zip a z\n}\n", ABD);
    ASSERT_EQ(build(text, "z", &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "seq.sl:11:11: pipeline 'z' cannot zip itself");
    /* zip is a source: after range it is a second one */
    snprintf(text, sizeof text, "%spipeline z {\n    range 0 3\n    zip a b\n}\n", ABD);
    ASSERT_EQ(build(text, "z", &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "a pipeline reads one source: 'zip' here and 'range' at line 11");
}

/* Dataset.concatenate's example: range(1, 4).concatenate(range(4, 8)) -> 1..7 */
TEST(test_concatenate_statement) {
    int64_t v[16];
    const char *text = "pipeline b {\n    range 4 8\n}\n"
                       "pipeline c {\n    range 1 4\n    concatenate b\n}\n"
                       "pipeline twice {\n    range 0 2\n    concatenate b b\n}\n"
                       "pipeline self {\n    range 0 2\n    concatenate self\n}\n"
                       "pipeline loop1 {\n    range 0 2\n    concatenate loop2\n}\n"
                       "pipeline loop2 {\n    range 0 2\n    concatenate loop1\n}\n";
    ASSERT_EQ(values(text, "c", v, 16), 7);
    ASSERT_MEMEQ(v, ((int64_t[]){1, 2, 3, 4, 5, 6, 7}), 7 * sizeof(int64_t));
    ASSERT_EQ(values(text, "twice", v, 16), 10);
    ASSERT_MEMEQ(v, ((int64_t[]){0, 1, 4, 5, 6, 7, 4, 5, 6, 7}), 10 * sizeof(int64_t));
    sl_dataset *ds;
    ASSERT_OK(build(text, "c", &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "concatenate");
    ASSERT_EQ(sl_dataset_cardinality(ds), 7);
    sl_dataset_unref(ds);
    ASSERT_EQ(build(text, "self", &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "seq.sl:14:17: pipeline 'self' cannot concatenate itself");
    ASSERT_EQ(build(text, "loop1", &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "pipeline 'loop1' would read itself through 'loop2': loop1 -> loop2 -> loop1");
}

/* Dataset.enumerate's example (start=5), with the index's name */
TEST(test_enumerate_statement) {
    sl_dataset *ds;
    const char *text = "pipeline p {\n    range 1 4\n    enumerate start=5\n}\n"
                       "pipeline q {\n    range 0 2\n    enumerate as=step\n}\n"
                       "pipeline bad {\n    range 0 2\n    enumerate 3\n}\n";
    ASSERT_OK(build(text, "p", &ds));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    for (int i = 0; i < 3; i++) { /* (5, 1) (6, 2) (7, 3) */
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(comp(&e, "index"), 5 + i);
        ASSERT_EQ(sl_test_value(&e), 1 + i);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    ASSERT_OK(build(text, "q", &ds));
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_EQ(comp(&e, "step"), 0);
    sl_element_clear(&e);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    ASSERT_EQ(build(text, "bad", &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "seq.sl:11:15: too many arguments for enumerate");
}

/* Dataset.rebatch's examples and Dataset.unbatch over batches */
TEST(test_rebatch_unbatch_statements) {
    sl_dataset *ds;
    char got[512];
    const char *text = "pipeline r2 {\n    range 0 8\n    batch 4\n    rebatch 2\n}\n"
                       "pipeline r211 {\n    range 0 16\n    batch 4\n    rebatch [2, 1, 1]\n}\n"
                       "pipeline drop {\n    range 0 10\n    batch 3\n    rebatch 4 drop_remainder\n}\n"
                       "pipeline drop2 {\n    range 0 10\n    batch 3\n    rebatch 4 drop_remainder=true\n}\n"
                       "pipeline un {\n    range 0 7\n    batch 3\n    unbatch\n}\n"
                       "pipeline zero {\n    range 0 7\n    batch 3\n    rebatch [2, 0]\n}\n"
                       "pipeline flag {\n    range 0 7\n    batch 3\n    rebatch 2 padded\n}\n";
    ASSERT_OK(build(text, "r2", &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "rebatch");
    ASSERT_EQ(sl_test_vecs(ds, 0, got, sizeof got), 4);
    ASSERT_STREQ(got, "[0 1] [2 3] [4 5] [6 7] ");
    sl_dataset_unref(ds);
    ASSERT_OK(build(text, "r211", &ds));
    ASSERT_EQ(sl_test_vecs(ds, 0, got, sizeof got), 12);
    ASSERT_STREQ(got, "[0 1] [2] [3] [4 5] [6] [7] [8 9] [10] [11] [12 13] [14] [15] ");
    sl_dataset_unref(ds);
    for (int i = 0; i < 2; i++) {
        ASSERT_OK(build(text, i ? "drop2" : "drop", &ds));
        ASSERT_EQ(sl_test_vecs(ds, 0, got, sizeof got), 2);
        ASSERT_STREQ(got, "[0 1 2 3] [4 5 6 7] ");
        sl_dataset_unref(ds);
    }
    int64_t v[16];
    ASSERT_EQ(values(text, "un", v, 16), 7);
    ASSERT_MEMEQ(v, ((int64_t[]){0, 1, 2, 3, 4, 5, 6}), 7 * sizeof(int64_t));
    ASSERT_EQ(build(text, "zero", &ds), SL_ERANGE);
    ASSERT_CONTAINS(sl_errmsg(), "seq.sl:");
    ASSERT_EQ(build(text, "flag", &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "unknown rebatch flag 'padded'");
}

/* Dataset.take_while's example: range(10).take_while(lambda x: x < 5) -> 0..4 */
TEST(test_take_while_statement) {
    int64_t v[16];
    sl_dataset *ds;
    const char *text = "pipeline p {\n    range 0 10\n    take_while value < 5\n}\n"
                       "pipeline w {\n    range 0 10\n    take_while value lt 3\n}\n"
                       "pipeline bad {\n    range 0 10\n    take_while value lte 5\n}\n"
                       "pipeline nan {\n    range 0 10\n    take_while value < five\n}\n"
                       "pipeline missing {\n    range 0 10\n    take_while label < 5\n}\n";
    ASSERT_EQ(values(text, "p", v, 16), 5);
    ASSERT_MEMEQ(v, ((int64_t[]){0, 1, 2, 3, 4}), 5 * sizeof(int64_t));
    ASSERT_EQ(values(text, "w", v, 16), 3);
    ASSERT_EQ(build(text, "bad", &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "seq.sl:11:22: unknown comparison 'lte'");
    ASSERT_EQ(build(text, "nan", &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "take_while compares with a number, found 'five'");
    ASSERT_OK(build(text, "missing", &ds));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'missing/take_while': take_while label < 5: no component 'label' (the element has: "
                              "value)");
    sl_iter_close(it);
    sl_dataset_unref(ds);
}

/* Dataset.scan's example (the cumulative sum), and the other built-ins */
TEST(test_scan_statement) {
    int64_t v[16];
    sl_dataset *ds;
    const char *text = "pipeline sum {\n    range 0 10\n    scan value sum\n}\n"
                       "pipeline prod {\n    range 1 6\n    scan value prod\n}\n"
                       "pipeline min {\n    range 0 5\n    scan value min initial=2\n}\n"
                       "pipeline max {\n    range 3 0 -1\n    scan value max as=top\n}\n"
                       "pipeline count {\n    range 10 14\n    scan value count initial=100\n}\n"
                       "pipeline fsum {\n    range 0 4\n    scan value sum initial=0.5\n}\n"
                       "pipeline big {\n    range 9223372036854775806 9223372036854775807\n    repeat 2\n    scan value sum\n}\n"
                       "pipeline bad {\n    range 0 4\n    scan value summ\n}\n"
                       "pipeline badinit {\n    range 0 4\n    scan value sum initial=x\n}\n";
    ASSERT_EQ(values(text, "sum", v, 16), 10); /* [0, 1, 3, 6, 10, 15, 21, 28, 36, 45] */
    ASSERT_MEMEQ(v, ((int64_t[]){0, 1, 3, 6, 10, 15, 21, 28, 36, 45}), 10 * sizeof(int64_t));
    ASSERT_EQ(values(text, "prod", v, 16), 5);
    ASSERT_MEMEQ(v, ((int64_t[]){1, 2, 6, 24, 120}), 5 * sizeof(int64_t));
    ASSERT_EQ(values(text, "min", v, 16), 5);
    ASSERT_MEMEQ(v, ((int64_t[]){0, 0, 0, 0, 0}), 5 * sizeof(int64_t));
    ASSERT_EQ(values(text, "count", v, 16), 4);
    ASSERT_MEMEQ(v, ((int64_t[]){101, 102, 103, 104}), 4 * sizeof(int64_t));
    ASSERT_OK(build(text, "max", &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "scan");
    ASSERT_EQ(sl_dataset_cardinality(ds), 3);
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    for (int i = 0; i < 3; i++) { /* 3 2 1: the running max stays 3, the value is kept */
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(comp(&e, "top"), 3);
        ASSERT_EQ(sl_test_value(&e), 3 - i);
        sl_element_clear(&e);
    }
    sl_iter_close(it);
    sl_dataset_unref(ds);
    ASSERT_OK(build(text, "fsum", &ds));
    ASSERT_OK(sl_test_open(ds, &it, &e));
    const double fw[4] = {0.5, 1.5, 3.5, 6.5};
    for (int i = 0; i < 4; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(e.t[0].dtype, SL_DT_F64);
        ASSERT(*(double *)e.t[0].data == fw[i]);
        sl_element_clear(&e);
    }
    sl_iter_close(it);
    sl_dataset_unref(ds);
    ASSERT_OK(build(text, "big", &ds));
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_OK(sl_test_next_drop(it));
    ASSERT_EQ(sl_iter_next(it, &e), SL_ERANGE);
    ASSERT_STREQ(sl_errmsg(), "op 'big/scan': scan value sum: the running value passes the int64 range\n"
                              "---> HINT: start from a float to scan in float64: initial=0.0");
    sl_iter_close(it);
    sl_dataset_unref(ds);
    ASSERT_EQ(build(text, "bad", &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "seq.sl:32:16: unknown scan 'summ'");
    ASSERT_CONTAINS(sl_errmsg(), "---> HINT: did you mean 'sum'?");
    ASSERT_EQ(build(text, "badinit", &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "initial= is a number, found 'x'");
}

/* Dataset.unique's example, [1, 37, 2, 37, 2, 1] -> 1 37 2, here over 0 1 2 concatenated
 * with themselves */
TEST(test_unique_statement) {
    int64_t v[16];
    sl_dataset *ds;
    const char *text = "pipeline b {\n    range 0 3\n}\n"
                       "pipeline u {\n    range 0 3\n    concatenate b\n    unique\n}\n"
                       "pipeline uv {\n    range 0 3\n    concatenate b\n    enumerate\n    unique value\n}\n"
                       "pipeline bad {\n    range 0 3\n    unique value index\n}\n";
    ASSERT_EQ(values(text, "u", v, 16), 3);
    ASSERT_MEMEQ(v, ((int64_t[]){0, 1, 2}), 3 * sizeof(int64_t));
    ASSERT_EQ(values(text, "uv", v, 16), 3);
    ASSERT_OK(build(text, "u", &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "unique");
    ASSERT_EQ(sl_dataset_cardinality(ds), SL_UNKNOWN_CARD);
    sl_dataset_unref(ds);
    ASSERT_EQ(build(text, "bad", &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "too many arguments for unique");
}

int main(void) {
    RUN(test_zip_statement);
    RUN(test_concatenate_statement);
    RUN(test_enumerate_statement);
    RUN(test_rebatch_unbatch_statements);
    RUN(test_take_while_statement);
    RUN(test_scan_statement);
    RUN(test_unique_statement);
    TEST_MAIN_END();
}
