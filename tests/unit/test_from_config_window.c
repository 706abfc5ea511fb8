/* pipeline/from_config_window.c: the statements window, group_by_window,
 * bucket_by_sequence_length and rejection_resample give exactly what the C API gives
 * (tf.data's reference examples where a config can make their input), with labels
 * "PIPELINE/OP"; every refusal with its exact code and its FILE:LINE:COL message. */
#include <stdio.h>
#include <stdlib.h>

#include "sluice/config.h"
#include "sluice/from_config.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "helper_seq.h"
#include "test.h"

static sl_status build(const char *body, sl_dataset **ds) {
    char text[2048];
    snprintf(text, sizeof text, "pipeline p {\n%s}\n", body);
    sl_cfg *c = NULL;
    *ds = NULL;
    if (sl_cfg_parse(text, strlen(text), "w.sl", &c) != SL_OK) {
        printf("  unexpected parse error: %s\n", sl_errmsg());
        return SL_EINTERNAL;
    }
    sl_status s = sl_pipeline_from_config(c, "p", NULL, ds);
    sl_cfg_free(c);
    return s;
}

#define EXPECT_CONFIG(body, comp, want)                                  \
    do {                                                                 \
        sl_dataset *ds_;                                                 \
        char got_[1024];                                                 \
        ASSERT_OK(build(body, &ds_));                                    \
        ASSERT_EQ(sl_test_read_all(ds_, comp, got_, sizeof got_), SL_END);       \
        sl_dataset_unref(ds_);                                           \
        ASSERT_STREQ(got_, want);                                        \
    } while (0)

/* tf.data's Dataset.window examples: range(7).window(3), with drop_remainder,
 * window(3, 2, 1, True) and window(3, 1, 2, True) */
TEST(test_window_statement) {
    EXPECT_CONFIG(" range 0 7\n window 3\n", "value", "[0 1 2], [3 4 5], [6]");
    EXPECT_CONFIG(" range 0 7\n window 3 drop_remainder\n", "value", "[0 1 2], [3 4 5]");
    EXPECT_CONFIG(" range 0 7\n window 3 shift=2 drop_remainder=true\n", "value", "[0 1 2], [2 3 4], [4 5 6]");
    EXPECT_CONFIG(" range 0 7\n window 3 shift=1 stride=2 drop_remainder\n", "value", "[0 2 4], [1 3 5], [2 4 6]");
    sl_dataset *ds;
    ASSERT_OK(build(" range 0 7\n window 3 shift=1\n", &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "window");
    ASSERT_EQ(sl_dataset_cardinality(ds), 7);
    sl_dataset_unref(ds);
}

/* tf.data's Dataset.group_by_window example: range(10), key x % 2, window 5 */
TEST(test_group_by_window_statement) {
    EXPECT_CONFIG(" range 0 10\n group_by_window key=value modulo=2 window=5\n", "value", "[0 2 4 6 8], [1 3 5 7 9]");
    EXPECT_CONFIG(" range -3 3\n group_by_window key=value window=2\n", "value", "[-3], [-2], [-1], [0], [1], [2]");
    EXPECT_CONFIG(" range -3 3\n group_by_window key=value modulo=2 window=4\n", "value", "[-2 0 2], [-3 -1 1]");
}

/* Variable lengths come from `window` here: range(7).window(3) gives lengths 3, 3, 1. */
TEST(test_bucket_statement) {
    EXPECT_CONFIG(" range 0 7\n window 3\n bucket_by_sequence_length value boundaries=[2] batch_sizes=[2, 2]\n", "value",
                  "[[0 1 2] [3 4 5]], [[6]]");
    EXPECT_CONFIG(" range 0 7\n window 3\n bucket_by_sequence_length value boundaries=[5, 8] batch_sizes=[3, 3, 3]"
                  " pad=-1 pad_to_bucket_boundary\n", "value", "[[0 1 2 -1] [3 4 5 -1] [6 -1 -1 -1]]");
    EXPECT_CONFIG(" range 0 7\n window 3\n bucket_by_sequence_length value boundaries=[2] batch_sizes=[2, 2] pad=9 "
                  "drop_remainder\n", "value", "[[0 1 2] [3 4 5]]");
    EXPECT_CONFIG(" range 0 9\n window 3\n bucket_by_sequence_length value boundaries=[2] batch_sizes=[2, 2] "
                  "no_padding=true\n", "value", "[[0 1 2] [3 4 5]], [[6 7 8]]");
    EXPECT_CONFIG(" range 0 7\n window 3\n bucket_by_sequence_length value boundaries=[4] batch_sizes=[3, 1] pad=-7\n",
                  "value", "[[0 1 2] [3 4 5] [6 -7 -7]]");
}

/* the same draws as the C API with the same seed */
TEST(test_rejection_resample_statement) {
    sl_dataset *ds, *r, *rep, *api;
    ASSERT_OK(build(" range 0 2\n repeat 500\n rejection_resample value target=[0.8, 0.2] seed=3\n", &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "rejection_resample");
    ASSERT_OK(sl_ds_range(0, 2, 1, &r));
    ASSERT_OK(sl_ds_repeat(r, 500, &rep));
    const double t[2] = {0.8, 0.2};
    ASSERT_OK(sl_ds_rejection_resample(rep, "value", t, 2, NULL, 3, &api));
    static int64_t a[1001], b[1001];
    int na = sl_test_values(ds, NULL, a, 1000), nb = sl_test_values(api, NULL, b, 1000);
    ASSERT(na > 0 && na < 1000);
    ASSERT_EQ(na, nb);
    ASSERT_MEMEQ(a, b, sizeof a[0] * (size_t)na);
    int ones = 0;
    for (int i = 0; i < na; i++) ones += a[i] == 1;
    printf("  kept %d, %d of class 1\n", na, ones);
    ASSERT(ones * 4 < na - ones); /* class 1 is rarer than class 0 */
    sl_dataset_unref(api);
    sl_dataset_unref(rep);
    sl_dataset_unref(r);
    sl_dataset_unref(ds);
    /* initial given: [0.5, 0.5] towards [0.8, 0.2] keeps class 0 always, class 1 a quarter */
    ASSERT_OK(build(" range 0 2\n repeat 2000\n rejection_resample value target=[0.8, 0.2] initial=[1, 1] seed=5\n", &ds));
    static int64_t c[4001];
    int nc = sl_test_values(ds, NULL, c, 4000), zeros = 0;
    for (int i = 0; i < nc; i++) zeros += c[i] == 0;
    ASSERT_EQ(zeros, 2000);
    ASSERT(abs((nc - zeros) - 500) < 60);
    sl_dataset_unref(ds);
}

/* the first line of the error message (FILE:LINE:COL: what) */
static const char *first_line(char *buf, size_t cap) {
    snprintf(buf, cap, "%s", sl_errmsg());
    char *nl = strchr(buf, '\n');
    if (nl) *nl = 0;
    return buf;
}

TEST(test_window_statement_errors) {
    static const struct {
        const char *body;
        sl_status code;
        const char *line;
    } cases[] = {
        {" range 0 7\n window 0\n", SL_ERANGE, "w.sl:3:9: 0 is outside 1..16777216"},
        {" range 0 7\n window 3 shift=0\n", SL_ERANGE, "w.sl:3:17: 0 is outside 1..9223372036854775807"},
        {" range 0 7\n window 3 drop\n", SL_EINVAL, "w.sl:3:11: unknown window flag 'drop'"},
        {" range 0 7\n window 3 size=2\n", SL_EINVAL, "w.sl:3:11: unknown option 'size' for window"},
        {" range 0 7\n group_by_window window=2\n", SL_EINVAL, "w.sl:3:2: group_by_window: missing key="},
        {" range 0 7\n group_by_window key=value window=0\n", SL_ERANGE, "w.sl:3:35: 0 is outside 1..16777216"},
        {" range 0 7\n bucket_by_sequence_length value boundaries=[3, 5] batch_sizes=[2, 2]\n", SL_EINVAL,
         "w.sl:3:64: 2 batch sizes for 2 boundaries: give one more than the boundaries (3)"},
        {" range 0 7\n bucket_by_sequence_length value boundaries=[5, 3] batch_sizes=[2, 2, 2]\n", SL_EINVAL,
         "w.sl:3:49: boundaries must increase: 3 after 5"},
        {" range 0 7\n bucket_by_sequence_length value boundaries=[3] batch_sizes=[2, 2.5]\n", SL_EINVAL,
         "w.sl:3:65: expected an integer 1..16777216, found '2.5'"},
        {" range 0 7\n bucket_by_sequence_length value batch_sizes=[2]\n", SL_EINVAL,
         "w.sl:3:2: bucket_by_sequence_length: missing boundaries="},
        {" range 0 7\n bucket_by_sequence_length value boundaries=[3] batch_sizes=[2, 2] no_padding "
         "pad_to_bucket_boundary\n", SL_EINVAL, "w.sl:3:2: pad_to_bucket_boundary and no_padding exclude each other"},
        {" range 0 7\n rejection_resample value\n", SL_EINVAL, "w.sl:3:2: rejection_resample: missing target="},
        {" range 0 7\n rejection_resample value target=[0.5, 0.5] initial=[1]\n", SL_EINVAL,
         "w.sl:3:53: initial has 1 weights, target 2: give one per class"},
        {" range 0 7\n rejection_resample value target=[0.5, -0.5]\n", SL_EINVAL,
         "w.sl:3:2: rejection_resample: target weight 1 is -0.5: weights must be finite and >= 0"},
    };
    char buf[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_dataset *ds = (sl_dataset *)1;
        sl_status s = build(cases[i].body, &ds);
        if (s != cases[i].code || strcmp(first_line(buf, sizeof buf), cases[i].line) != 0)
            printf("  case %zu: %s\n", i, sl_errmsg());
        ASSERT_EQ(s, cases[i].code);
        ASSERT(ds == NULL);
        ASSERT_STREQ(first_line(buf, sizeof buf), cases[i].line);
    }
    /* a runtime error names the statement's label */
    sl_dataset *ds;
    ASSERT_OK(build(" range 0 7\n bucket_by_sequence_length value boundaries=[3] batch_sizes=[2, 2]\n", &ds));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'p/bucket_by_sequence_length': component 'value' is int64[]: its length is its "
                              "dim 0, so it needs rank >= 1");
    sl_iter_close(it);
    sl_dataset_unref(ds);
}

int main(void) {
    RUN(test_window_statement);
    RUN(test_group_by_window_statement);
    RUN(test_bucket_statement);
    RUN(test_rejection_resample_statement);
    RUN(test_window_statement_errors);
    TEST_MAIN_END();
}
