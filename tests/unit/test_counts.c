/* Counts at the int64 edges: range's elements and cardinality for any start/stop/step (as
 * Python's len(range(...)), checked against a 128-bit reference), the cardinalities of take,
 * skip, repeat, shard, batch, map_batch and zip over inputs of 2^62 and 2^63-1 elements, the
 * refusals (code and message) where an exact count is past 2^63-1, and the trainer's run
 * length (epochs x steps per epoch) and progress line at the edges. */
#include <stdint.h>
#include <unistd.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "sluice/train.h"
#include "train/internal.h"
#include "helper_iter.h"
#include "test.h"

#define I64MAX INT64_MAX
#define I64MIN INT64_MIN
#define P62 ((int64_t)1 << 62)

/* len(range(start, stop, step)), in 128 bits. */
static __int128 ref_len(int64_t start, int64_t stop, int64_t step) {
    __int128 a = start, z = stop, k = step;
    if (k > 0) return a < z ? (z - a + k - 1) / k : 0;
    return a > z ? (a - z - k - 1) / -k : 0;
}

/* The two reported ranges: exactly Python's elements. */
TEST(test_range_near_int64_max) {
    sl_dataset *r;
    int64_t v[16];
    ASSERT_OK(sl_ds_range(9223372036854775800LL, I64MAX, 5, &r));
    ASSERT_EQ(sl_dataset_cardinality(r), 2);
    int n = sl_test_values(r, NULL, v, 16);
    ASSERT_EQ(n, 2);
    ASSERT_EQ(v[0], 9223372036854775800LL);
    ASSERT_EQ(v[1], 9223372036854775805LL);
    sl_dataset_unref(r);
    ASSERT_OK(sl_ds_range(0, I64MAX, P62, &r));
    ASSERT_EQ(sl_dataset_cardinality(r), 2);
    n = sl_test_values(r, NULL, v, 16);
    ASSERT_EQ(n, 2);
    ASSERT_EQ(v[0], 0);
    ASSERT_EQ(v[1], P62);
    sl_dataset_unref(r);
    /* negative steps near INT64_MIN */
    ASSERT_OK(sl_ds_range(I64MIN + 7, I64MIN, -5, &r));
    ASSERT_EQ(sl_dataset_cardinality(r), 2);
    n = sl_test_values(r, NULL, v, 16);
    ASSERT_EQ(n, 2);
    ASSERT_EQ(v[0], I64MIN + 7);
    ASSERT_EQ(v[1], I64MIN + 2);
    sl_dataset_unref(r);
    ASSERT_OK(sl_ds_range(I64MAX, I64MIN, I64MIN, &r)); /* step -2^63 */
    ASSERT_EQ(sl_dataset_cardinality(r), 2);
    n = sl_test_values(r, NULL, v, 16);
    ASSERT_EQ(n, 2);
    ASSERT_EQ(v[0], I64MAX);
    ASSERT_EQ(v[1], -1);
    sl_dataset_unref(r);
    ASSERT_OK(sl_ds_range(I64MIN, I64MAX, I64MAX, &r));
    ASSERT_EQ(sl_dataset_cardinality(r), 3);
    n = sl_test_values(r, NULL, v, 16);
    ASSERT_EQ(n, 3);
    ASSERT_EQ(v[0], I64MIN);
    ASSERT_EQ(v[1], -1);
    ASSERT_EQ(v[2], I64MAX - 1);
    sl_dataset_unref(r);
}

/* Every start/stop/step among the edges: the cardinality is Python's len() (or the range is
 * refused with SL_ERANGE when that is past 2^63-1), and the first and the last elements are
 * start + i * step, with nothing after the last. */
TEST(test_range_grid_matches_python) {
    static const int64_t ends[] = {I64MIN, I64MIN + 1, -7, -1, 0, 1, 7, I64MAX - 1, I64MAX};
    static const int64_t steps[] = {I64MIN, I64MIN + 1, -5, -1, 1, 2, 5, I64MAX - 1, I64MAX};
    int ne = (int)(sizeof ends / sizeof ends[0]), ns = (int)(sizeof steps / sizeof steps[0]), refused = 0;
    for (int i = 0; i < ne; i++)
        for (int j = 0; j < ne; j++)
            for (int k = 0; k < ns; k++) {
                int64_t a = ends[i], z = ends[j], st = steps[k];
                __int128 want = ref_len(a, z, st);
                sl_dataset *r = NULL;
                sl_status s = sl_ds_range(a, z, st, &r);
                if (want > I64MAX) {
                    if (s != SL_ERANGE) printf("  range(%lld, %lld, %lld): status %d\n", (long long)a, (long long)z,
                                               (long long)st, s);
                    ASSERT_EQ(s, SL_ERANGE);
                    ASSERT(r == NULL);
                    refused++;
                    continue;
                }
                ASSERT_OK(s);
                if (sl_dataset_cardinality(r) != (int64_t)want)
                    printf("  range(%lld, %lld, %lld): cardinality %lld, len() %lld\n", (long long)a, (long long)z,
                           (long long)st, (long long)sl_dataset_cardinality(r), (long long)want);
                ASSERT_EQ(sl_dataset_cardinality(r), (int64_t)want);
                int64_t v[8];
                int first = want < 4 ? (int)want : 4, n = sl_test_values(r, NULL, v, first);
                sl_dataset_unref(r);
                ASSERT_EQ(n, first + (want > first ? 1 : 0));
                for (int e = 0; e < first; e++) ASSERT_EQ(v[e], (int64_t)(a + (__int128)e * st));
                /* the tail: a range starting three elements before the end */
                int tail = want < 3 ? (int)want : 3;
                int64_t a2 = (int64_t)(a + (want - tail) * (__int128)st);
                ASSERT_OK(sl_ds_range(a2, z, st, &r));
                ASSERT_EQ(sl_dataset_cardinality(r), tail);
                n = sl_test_values(r, NULL, v, 8);
                sl_dataset_unref(r);
                if (n != tail)
                    printf("  range(%lld, %lld, %lld): %d elements, len() %d\n", (long long)a2, (long long)z,
                           (long long)st, n, tail);
                ASSERT_EQ(n, tail);
                for (int e = 0; e < tail; e++) ASSERT_EQ(v[e], (int64_t)(a2 + (__int128)e * st));
            }
    ASSERT_EQ(refused, 25); /* step +-1 across 2^63 or more (12 each), step 2 across everything */
}

TEST(test_range_refusals) {
    sl_dataset *r = (sl_dataset *)1;
    ASSERT_EQ(sl_ds_range(I64MIN, I64MAX, 1, &r), SL_ERANGE);
    ASSERT(r == NULL);
    ASSERT_STREQ(sl_errmsg(), "range: start -9223372036854775808 stop 9223372036854775807 step 1 makes "
                              "18446744073709551615 elements, past 2^63-1\n"
                              "---> HINT: split it into two ranges, or repeat one for an endless stream");
    ASSERT_EQ(sl_ds_range(0, I64MIN, -1, &r), SL_ERANGE);
    ASSERT_STREQ(sl_errmsg(), "range: start 0 stop -9223372036854775808 step -1 makes 9223372036854775808 "
                              "elements, past 2^63-1\n"
                              "---> HINT: split it into two ranges, or repeat one for an endless stream");
    /* one fewer is exact */
    ASSERT_OK(sl_ds_range(-1, I64MIN, -1, &r));
    ASSERT_EQ(sl_dataset_cardinality(r), I64MAX);
    sl_dataset_unref(r);
    ASSERT_OK(sl_ds_range(I64MIN, I64MAX, 3, &r));
    ASSERT_EQ(sl_dataset_cardinality(r), 6148914691236517205LL);
    sl_dataset_unref(r);
    ASSERT_EQ(sl_ds_range(0, 1, 0, &r), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "range: step must not be 0");
}

static sl_status pass(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx, (void)e, (void)call;
    return SL_OK;
}

/* take, skip, repeat over 2^62 and 2^63-1 elements; repeat's product refused past 2^63-1. */
TEST(test_take_skip_repeat_edges) {
    sl_dataset *big, *p62, *three, *d, *inf;
    ASSERT_OK(sl_ds_range(0, I64MAX, 1, &big));
    ASSERT_OK(sl_ds_range(0, P62, 1, &p62));
    ASSERT_OK(sl_ds_range(0, 3, 1, &three));
    ASSERT_EQ(sl_dataset_cardinality(big), I64MAX);
    ASSERT_OK(sl_ds_take(big, I64MAX, &d));
    ASSERT_EQ(sl_dataset_cardinality(d), I64MAX);
    sl_dataset_unref(d);
    ASSERT_OK(sl_ds_take(big, I64MAX - 1, &d));
    ASSERT_EQ(sl_dataset_cardinality(d), I64MAX - 1);
    sl_dataset_unref(d);
    ASSERT_OK(sl_ds_skip(big, 1, &d));
    ASSERT_EQ(sl_dataset_cardinality(d), I64MAX - 1);
    sl_dataset_unref(d);
    ASSERT_OK(sl_ds_skip(big, I64MAX, &d));
    ASSERT_EQ(sl_dataset_cardinality(d), 0);
    sl_dataset_unref(d);
    ASSERT_OK(sl_ds_repeat(big, 1, &d));
    ASSERT_EQ(sl_dataset_cardinality(d), I64MAX);
    sl_dataset_unref(d);
    ASSERT_OK(sl_ds_repeat(p62, 1, &d));
    ASSERT_EQ(sl_dataset_cardinality(d), P62);
    sl_dataset_unref(d);
    ASSERT_OK(sl_ds_repeat(three, I64MAX / 3, &d));
    ASSERT_EQ(sl_dataset_cardinality(d), 9223372036854775806LL);
    sl_dataset_unref(d);
    d = (sl_dataset *)1;
    ASSERT_EQ(sl_ds_repeat(p62, 3, &d), SL_ERANGE);
    ASSERT(d == NULL);
    ASSERT_STREQ(sl_errmsg(), "repeat: 3 x 4611686018427387904 elements is past 2^63-1\n"
                              "---> HINT: take fewer elements first, or repeat forever (no count)");
    ASSERT_EQ(sl_ds_repeat(p62, 2, &d), SL_ERANGE);
    ASSERT_STREQ(sl_errmsg(), "repeat: 2 x 4611686018427387904 elements is past 2^63-1\n"
                              "---> HINT: take fewer elements first, or repeat forever (no count)");
    ASSERT_EQ(sl_ds_repeat(three, I64MAX / 3 + 1, &d), SL_ERANGE);
    ASSERT_CONTAINS(sl_errmsg(), "repeat: 3074457345618258603 x 3 elements is past 2^63-1");
    ASSERT_EQ(sl_ds_repeat(big, I64MAX, &d), SL_ERANGE);
    ASSERT_CONTAINS(sl_errmsg(), "repeat: 9223372036854775807 x 9223372036854775807 elements is past 2^63-1");
    /* forever: infinite, whatever the size; over it take is exact and skip stays infinite */
    ASSERT_OK(sl_ds_repeat(big, SL_INFINITE, &inf));
    ASSERT_EQ(sl_dataset_cardinality(inf), SL_INFINITE);
    ASSERT_OK(sl_ds_take(inf, I64MAX, &d));
    ASSERT_EQ(sl_dataset_cardinality(d), I64MAX);
    sl_dataset_unref(d);
    ASSERT_OK(sl_ds_skip(inf, I64MAX, &d));
    ASSERT_EQ(sl_dataset_cardinality(d), SL_INFINITE);
    sl_dataset_unref(d);
    /* skipping all of an endless input would never return */
    d = (sl_dataset *)1;
    ASSERT_EQ(sl_ds_skip(inf, -1, &d), SL_EINVAL);
    ASSERT(d == NULL);
    ASSERT_STREQ(sl_errmsg(), "skip: skipping all (count -1) of an endless input never ends\n"
                              "---> HINT: give skip a count, or take before it");
    sl_dataset_unref(inf);
    sl_dataset_unref(three);
    sl_dataset_unref(p62);
    sl_dataset_unref(big);
}

/* shard and zip over 2^63-1 elements; shard's iteration near the end; num refused by value. */
TEST(test_shard_zip_edges) {
    sl_dataset *big, *d, *tail;
    ASSERT_OK(sl_ds_range(0, I64MAX, 1, &big));
    static const struct { int64_t num, index, card; } cases[] = {
        {I64MAX, 0, 1}, {I64MAX, I64MAX - 1, 1}, {2, 0, 4611686018427387904LL}, {2, 1, 4611686018427387903LL},
        {3, 0, 3074457345618258603LL}, {3, 2, 3074457345618258602LL}, {P62, P62 - 2, 2}, {1, 0, I64MAX},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ASSERT_OK(sl_ds_shard(big, cases[i].num, cases[i].index, &d));
        ASSERT_EQ(sl_dataset_cardinality(d), cases[i].card);
        sl_dataset_unref(d);
    }
    d = (sl_dataset *)1;
    ASSERT_EQ(sl_ds_shard(big, I64MIN, 0, &d), SL_EINVAL);
    ASSERT(d == NULL);
    ASSERT_STREQ(sl_errmsg(), "shard: num -9223372036854775808 must be >= 1");
    ASSERT_EQ(sl_ds_shard(big, 0, 0, &d), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "shard: num 0 must be >= 1");
    ASSERT_EQ(sl_ds_shard(big, 4, 4, &d), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "shard: index 4 must be in 0..3 (num 4)");
    ASSERT_EQ(sl_ds_shard(big, I64MAX, I64MIN, &d), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "shard: index -9223372036854775808 must be in 0..9223372036854775806 "
                              "(num 9223372036854775807)");
    /* positions 3 and 7 of the last ten values */
    ASSERT_OK(sl_ds_range(I64MAX - 10, I64MAX, 1, &tail));
    ASSERT_OK(sl_ds_shard(tail, 4, 3, &d));
    ASSERT_EQ(sl_dataset_cardinality(d), 2);
    int64_t v[8];
    ASSERT_EQ(sl_test_values(d, NULL, v, 8), 2);
    ASSERT_EQ(v[0], I64MAX - 7);
    ASSERT_EQ(v[1], I64MAX - 3);
    sl_dataset_unref(d);
    /* zip ends with the shortest, an endless input included */
    sl_dataset *inf, *ins[3];
    ASSERT_OK(sl_ds_repeat(tail, SL_INFINITE, &inf));
    ins[0] = inf;
    ins[1] = big;
    ins[2] = inf;
    ASSERT_EQ(sl_ds_zip(ins, 3, &d), SL_OK);
    ASSERT_EQ(sl_dataset_cardinality(d), I64MAX);
    sl_dataset_unref(d);
    sl_dataset_unref(inf);
    sl_dataset_unref(tail);
    sl_dataset_unref(big);
}

/* batch and map_batch over 2^63-1 elements: ceil(n / size) without n + size - 1. */
TEST(test_batch_card_edges) {
    sl_dataset *big, *m, *d;
    sl_fn *fn;
    ASSERT_OK(sl_ds_range(0, I64MAX, 1, &big));
    ASSERT_OK(sl_fn_custom("pass", pass, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(big, fn, 1, true, &m));
    static const struct { int64_t size; bool drop; int64_t card; } cases[] = {
        {1, false, I64MAX}, {1, true, I64MAX}, {2, false, 4611686018427387904LL}, {2, true, 4611686018427387903LL},
        {1 << 24, false, 549755813888LL}, {1 << 24, true, 549755813887LL}, {7, false, 1317624576693539401LL},
        {7, true, 1317624576693539401LL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_batch_opts o = sl_batch_opts_default(cases[i].size);
        o.drop_remainder = cases[i].drop;
        ASSERT_OK(sl_ds_batch(big, &o, &d));
        ASSERT_STREQ(sl_dataset_op(d), "batch");
        ASSERT_EQ(sl_dataset_cardinality(d), cases[i].card);
        sl_dataset_unref(d);
        ASSERT_OK(sl_ds_batch(m, &o, &d)); /* fused */
        ASSERT_STREQ(sl_dataset_op(d), "map_batch");
        ASSERT_EQ(sl_dataset_cardinality(d), cases[i].card);
        sl_dataset_unref(d);
    }
    sl_dataset_unref(m);
    sl_fn_unref(fn);
    sl_dataset_unref(big);
}

/* The run's length: steps N, or epochs x steps per epoch, refused past 2^63-1 naming both. */
TEST(test_train_total_steps) {
    sl_train_config c;
    memset(&c, 0, sizeof c);
    int64_t total = -1;
    c.epochs = 3;
    ASSERT_OK(sl__train_total_steps(&c, 40, &total));
    ASSERT_EQ(total, 120);
    ASSERT_OK(sl__train_total_steps(&c, 3074457345618258602LL, &total));
    ASSERT_EQ(total, 9223372036854775806LL);
    ASSERT_OK(sl__train_total_steps(&c, 0, &total)); /* not known yet */
    ASSERT_EQ(total, 0);
    ASSERT_EQ(sl__train_total_steps(&c, P62, &total), SL_ERANGE);
    ASSERT_STREQ(sl_errmsg(), "train: 3 epochs x 4611686018427387904 steps per epoch is past 2^63-1\n"
                              "---> HINT: train for `steps N` instead of `epochs N`");
    c.epochs = INT32_MAX;
    ASSERT_EQ(sl__train_total_steps(&c, (int64_t)1 << 33, &total), SL_ERANGE);
    ASSERT_CONTAINS(sl_errmsg(), "train: 2147483647 epochs x 8589934592 steps per epoch is past 2^63-1");
    c.epochs = 0;
    c.steps = I64MAX / 4;
    ASSERT_OK(sl__train_total_steps(&c, P62, &total));
    ASSERT_EQ(total, I64MAX / 4);
}

/* The progress line's percentage at the largest step counts `steps N` allows. */
TEST(test_progress_line_edges) {
    char b[256];
    int64_t big = I64MAX / 4;
    sl__train_progress_line(b, sizeof b, 0, 0, 1, 0, big, big, 1, 0.5, -1);
    ASSERT_STREQ(b, "step 2305843009213693951/2305843009213693951 [========================] 100%  epoch 1  loss "
                    "1.0000  accuracy 0.5000");
    sl__train_progress_line(b, sizeof b, 0, 0, 1, 0, big / 2, big, 1, 0.5, -1);
    ASSERT_STREQ(b, "step 1152921504606846975/2305843009213693951 [============>           ]  49%  epoch 1  loss "
                    "1.0000  accuracy 0.5000");
    sl__train_progress_line(b, sizeof b, 0, 0, 1, 0, big - 1, big, 1, 0.5, -1);
    ASSERT_CONTAINS(b, "]  99%  epoch 1");
}

/* A trainer over a pipeline of 2^62 batches for 3 epochs is refused before it starts. */
TEST(test_trainer_refuses_epoch_overflow) {
    static const char text[] = "pipeline huge {\n    range 0 4611686018427387904\n    batch 1\n}\n"
                               "model tiny {\n    input 4\n    dense 2\n}\n"
                               "train {\n    model tiny\n    data huge\n    epochs 3\n}\n";
    sl_cfg *cfg;
    ASSERT_OK(sl_cfg_parse(text, strlen(text), "t.sl", &cfg));
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/sluice-test-counts.%d", (int)getpid());
    sl_train_opts o = sl_train_opts_default();
    o.run_dir = dir;
    sl_trainer *t = NULL;
    sl_status s = sl_trainer_create(cfg, &o, &t);
    sl_trainer_free(t);
    sl_cfg_free(cfg);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("  could not remove %s\n", dir);
    ASSERT_EQ(s, SL_ERANGE);
    ASSERT_STREQ(sl_errmsg(), "train: 3 epochs x 4611686018427387904 steps per epoch is past 2^63-1\n"
                              "---> HINT: train for `steps N` instead of `epochs N`");
}

int main(void) {
    RUN(test_range_near_int64_max);
    RUN(test_range_grid_matches_python);
    RUN(test_range_refusals);
    RUN(test_take_skip_repeat_edges);
    RUN(test_shard_zip_edges);
    RUN(test_batch_card_edges);
    RUN(test_train_total_steps);
    RUN(test_progress_line_edges);
    RUN(test_trainer_refuses_epoch_overflow);
    TEST_MAIN_END();
}
