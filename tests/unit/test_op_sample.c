/* pipeline/ops/sample.c: each input's share of a million elements against its weight; the
 * exact streams with and without stop_on_empty (against a model of the documented draw
 * rule); errors; the same stream for the same seed (a parallel map below included) and
 * another for another seed; starting at a position (seeking, and replaying below a
 * filter) and a saved state giving exactly the rest of the stream. */
#include <math.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "sluice/util.h"
#include "helper_iter.h"
#include "test.h"

#define BIG 1000000

/* range(base, base + n) repeated forever */
static sl_status endless(int64_t base, int64_t n, sl_dataset **out) {
    sl_dataset *r;
    sl_status s = sl_ds_range(base, base + n, 1, &r);
    if (s) return s;
    s = sl_ds_repeat(r, SL_INFINITE, out);
    sl_dataset_unref(r);
    return s;
}

/* Up to cap "value"s of an iterator made at `start` (seed `seed`) into out; *replayed gets
 * sl_iter_replayed. Returns the count, or -1 on an error (printed). */
static int read_at(sl_dataset *ds, uint64_t seed, int64_t start, int64_t *out, int cap, int64_t *replayed) {
    sl_iter_opts o = sl_iter_opts_default();
    o.seed = seed;
    sl_iter *it;
    if (sl_iter_create_at(ds, &o, start, &it)) {
        printf("  create_at %lld: %s\n", (long long)start, sl_errmsg());
        return -1;
    }
    if (replayed) *replayed = sl_iter_replayed(it);
    sl_element e;
    sl_element_init(&e);
    int n = 0;
    sl_status s = SL_OK;
    while (n < cap && (s = sl_iter_next(it, &e)) == SL_OK) {
        out[n++] = sl_test_value(&e);
        sl_element_clear(&e);
    }
    sl_iter_close(it);
    if (s != SL_OK && s != SL_END) {
        printf("  next: %s\n", sl_errmsg());
        return -1;
    }
    return n;
}

TEST(test_shares_follow_the_weights) {
    sl_dataset *in[3], *mix;
    for (int i = 0; i < 3; i++) ASSERT_OK(endless((int64_t)i * BIG, 1000, &in[i]));
    const double w[3] = {0.5, 0.3, 0.2};
    ASSERT_OK(sl_ds_sample_from_datasets(in, 3, w, 42, false, &mix));
    ASSERT_EQ(sl_dataset_cardinality(mix), SL_INFINITE);
    ASSERT_STREQ(sl_dataset_op(mix), "sample_from_datasets");
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(mix, &it, &e));
    int64_t count[3] = {0}, next[3] = {0};
    bool in_order = true;
    for (int k = 0; k < BIG; k++) {
        ASSERT_OK(sl_iter_next(it, &e));
        int64_t v = sl_test_value(&e);
        int src = (int)(v / BIG);
        ASSERT(src >= 0 && src < 3);
        in_order &= v % BIG == next[src]; /* each input's elements in its own order */
        next[src] = (next[src] + 1) % 1000;
        count[src]++;
        sl_element_clear(&e);
    }
    sl_iter_close(it);
    ASSERT(in_order);
    printf("  shares of %d: %.4f %.4f %.4f (weights 0.5 0.3 0.2)\n", BIG, (double)count[0] / BIG,
           (double)count[1] / BIG, (double)count[2] / BIG);
    for (int i = 0; i < 3; i++) {
        double share = (double)count[i] / BIG;
        ASSERT(share > w[i] - 0.005 && share < w[i] + 0.005);
    }
    sl_dataset_unref(mix);
    for (int i = 0; i < 3; i++) sl_dataset_unref(in[i]);
}

/* The op's documented draw, over inputs of lengths len[] starting at base[]: for element
 * k, attempt a, the input where (mix(mix(mix(seed, stream), k), a) >> 11) / 2^53 times the
 * live weights' sum falls in their running sum (weights divided by the largest). */
static int model(const double *w0, const int64_t *len, const int64_t *base, int n, uint64_t seed, uint64_t stream,
                 bool stop, int64_t *out, int cap) {
    double w[16], most = 0;
    bool alive[16];
    int64_t taken[16] = {0};
    for (int i = 0; i < n; i++) most = w0[i] > most ? w0[i] : most;
    for (int i = 0; i < n; i++) {
        w[i] = w0[i] / most;
        alive[i] = w[i] > 0;
    }
    uint64_t draws = sl_mix2(seed, stream);
    int k = 0, a = 0;
    while (k < cap) {
        double total = 0, c = 0;
        int pick = -1;
        for (int i = 0; i < n; i++) total += alive[i] ? w[i] : 0;
        if (total <= 0) break;
        double x = (double)(sl_mix2(sl_mix2(draws, (uint64_t)k), (uint64_t)a) >> 11) * 0x1.0p-53 * total;
        for (int i = 0; i < n && pick < 0; i++) {
            if (!alive[i]) continue;
            c += w[i];
            if (x < c) pick = i;
        }
        for (int i = n - 1; i >= 0 && pick < 0; i--) pick = alive[i] ? i : -1;
        if (taken[pick] < len[pick]) {
            out[k++] = base[pick] + taken[pick]++;
            a = 0;
            continue;
        }
        if (stop) break;
        alive[pick] = false;
        a++;
    }
    return k;
}

TEST(test_empty_inputs) {
    sl_dataset *in[3], *mix;
    const int64_t len[3] = {3, 5, 2}, base[3] = {0, 10, 20};
    for (int i = 0; i < 3; i++) ASSERT_OK(sl_ds_range(base[i], base[i] + len[i], 1, &in[i]));
    const double w[3] = {2, 1, 1};
    int64_t got[64], want[64];
    /* without stop_on_empty: every element of every input, each input in order */
    ASSERT_OK(sl_ds_sample_from_datasets(in, 3, w, 5, false, &mix));
    ASSERT_EQ(sl_dataset_cardinality(mix), 10);
    sl_iter_opts o = sl_iter_opts_default();
    o.seed = 9;
    int n = sl_test_values(mix, &o, got, 64);
    ASSERT_EQ(n, 10);
    ASSERT_EQ(model(w, len, base, 3, 5, 9, false, want, 64), 10);
    for (int i = 0; i < n; i++) ASSERT_EQ(got[i], want[i]);
    int64_t seen[3] = {0};
    for (int i = 0; i < n; i++) {
        int src = (int)(got[i] / 10);
        ASSERT_EQ(got[i], base[src] + seen[src]++);
    }
    for (int i = 0; i < 3; i++) ASSERT_EQ(seen[i], len[i]);
    int64_t full[64];
    memcpy(full, got, sizeof full);
    sl_dataset_unref(mix);
    /* with it: the same draws, ending at the first input found empty */
    ASSERT_OK(sl_ds_sample_from_datasets(in, 3, w, 5, true, &mix));
    ASSERT_EQ(sl_dataset_cardinality(mix), SL_UNKNOWN_CARD);
    int m = sl_test_values(mix, &o, got, 64);
    int mm = model(w, len, base, 3, 5, 9, true, want, 64);
    printf("  stop_on_empty: %d of the 10 elements before an input was found empty\n", m);
    ASSERT_EQ(m, mm);
    ASSERT(m >= 2 && m < 10);
    for (int i = 0; i < m; i++) ASSERT_EQ(got[i], want[i]);
    for (int i = 0; i < m; i++) ASSERT_EQ(got[i], full[i]); /* a prefix of the stream above */
    sl_dataset_unref(mix);
    /* weight 0: never read; the only input of positive weight gives everything */
    const double w0[3] = {0, 3, 0};
    ASSERT_OK(sl_ds_sample_from_datasets(in, 3, w0, 5, true, &mix));
    ASSERT_EQ(sl_dataset_cardinality(mix), 5);
    ASSERT_EQ(sl_test_values(mix, NULL, got, 64), 5);
    for (int i = 0; i < 5; i++) ASSERT_EQ(got[i], 10 + i);
    sl_dataset_unref(mix);
    /* weights NULL: uniform */
    ASSERT_OK(sl_ds_sample_from_datasets(in, 3, NULL, 5, false, &mix));
    const double w1[3] = {1, 1, 1};
    ASSERT_EQ(sl_test_values(mix, &o, got, 64), 10);
    ASSERT_EQ(model(w1, len, base, 3, 5, 9, false, want, 64), 10);
    for (int i = 0; i < 10; i++) ASSERT_EQ(got[i], want[i]);
    sl_dataset_unref(mix);
    for (int i = 0; i < 3; i++) sl_dataset_unref(in[i]);
}

TEST(test_refusals_and_input_errors) {
    sl_dataset *a, *b, *mix = (sl_dataset *)1;
    ASSERT_OK(sl_ds_range(0, 3, 1, &a));
    ASSERT_OK(sl_test_range_map(10, "fail_mod7", sl_test_fail_mod7, NULL, 1, &b));
    sl_dataset *ins[2] = {a, b};
    const double neg[2] = {1, -0.5}, nan[2] = {NAN, 1}, zero[2] = {0, 0};
    ASSERT_EQ(sl_ds_sample_from_datasets(ins, 2, neg, 0, false, &mix), SL_EINVAL);
    ASSERT(mix == NULL);
    ASSERT_STREQ(sl_errmsg(), "sample_from_datasets: weight 1 is -0.5: weights must be finite and >= 0\n"
                              "---> HINT: weights are relative: [0.7, 0.3] and [7, 3] are the same mix");
    ASSERT_EQ(sl_ds_sample_from_datasets(ins, 2, nan, 0, false, &mix), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "sample_from_datasets: weight 0 is ");
    ASSERT_CONTAINS(sl_errmsg(), "nan: weights must be finite and >= 0");
    ASSERT_EQ(sl_ds_sample_from_datasets(ins, 2, zero, 0, false, &mix), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "sample_from_datasets: all 2 weights are 0: nothing could be drawn\n"
                              "---> HINT: give at least one input a positive weight");
    ASSERT_EQ(sl_ds_sample_from_datasets(ins, 0, NULL, 0, false, &mix), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "sample_from_datasets: 0 inputs (must be 1..16)");
    ASSERT(mix == NULL);
    /* an input's error passes through and consumes that input element */
    const double only_b[2] = {0, 1};
    ASSERT_OK(sl_ds_sample_from_datasets(ins, 2, only_b, 0, false, &mix));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(mix, &it, &e));
    for (int i = 0; i < 10; i++) {
        sl_status s = sl_iter_next(it, &e);
        if (i == 6) {
            ASSERT_EQ(s, SL_EINVAL);
            ASSERT_CONTAINS(sl_errmsg(), "value 6 is unlucky");
            continue;
        }
        ASSERT_OK(s);
        ASSERT_EQ(sl_test_value(&e), i);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(mix);
    sl_dataset_unref(b);
    sl_dataset_unref(a);
}

static sl_status mix3(bool stop, uint64_t seed, sl_dataset *third, sl_dataset **out) {
    sl_dataset *a, *r, *b, *c;
    sl_status s = sl_ds_range(0, 1000, 1, &a);
    if (!s) s = sl_ds_range(10000, 20000, 1, &r);
    if (!s) s = sl_ds_take(r, 700, &b);
    if (!s) s = third ? (c = sl_dataset_ref(third), SL_OK) : sl_ds_range(50000, 51500, 1, &c);
    const double w[3] = {0.5, 0.2, 0.3};
    sl_dataset *ins[3] = {a, b, c};
    if (!s) s = sl_ds_sample_from_datasets(ins, 3, w, seed, stop, out);
    sl_dataset_unref(c);
    sl_dataset_unref(b);
    sl_dataset_unref(r);
    sl_dataset_unref(a);
    return s;
}

TEST(test_same_seed_same_stream) {
    static int64_t x[3200], y[3200];
    sl_dataset *mix, *other, *m1, *m4;
    ASSERT_OK(mix3(false, 11, NULL, &mix));
    ASSERT_EQ(read_at(mix, 3, 0, x, 3200, NULL), 3200);
    ASSERT_EQ(read_at(mix, 3, 0, y, 3200, NULL), 3200);
    ASSERT_MEMEQ(x, y, sizeof x);
    ASSERT_EQ(read_at(mix, 4, 0, y, 3200, NULL), 3200); /* another pipeline seed */
    int same = 0;
    for (int i = 0; i < 3200; i++) same += x[i] == y[i];
    ASSERT(same < 1600);
    ASSERT_OK(mix3(false, 12, NULL, &other)); /* another op seed */
    ASSERT_EQ(read_at(other, 3, 0, y, 3200, NULL), 3200);
    same = 0;
    for (int i = 0; i < 3200; i++) same += x[i] == y[i];
    ASSERT(same < 1600);
    /* a parallel map below: the same stream, element seeds included */
    sl_fn *fn;
    ASSERT_OK(sl_fn_custom("append_seed_digit", sl_test_append_digit, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(mix, fn, 1, true, &m1));
    ASSERT_OK(sl_ds_map(mix, fn, 4, true, &m4));
    ASSERT_EQ(read_at(m1, 3, 0, x, 3200, NULL), 3200);
    for (int run = 0; run < 3; run++) {
        ASSERT_EQ(read_at(m4, 3, 0, y, 3200, NULL), 3200);
        ASSERT_MEMEQ(x, y, sizeof x);
    }
    sl_dataset_unref(m4);
    sl_dataset_unref(m1);
    sl_fn_unref(fn);
    sl_dataset_unref(other);
    sl_dataset_unref(mix);
}

/* 20 positions p: an iterator made at p gives elements [p, p+200) of the full stream, with
 * `replayed` elements replayed (-1: p itself). */
static void check_positions(sl_dataset *mix, const int64_t *full, int nfull, int64_t replayed) {
    uint64_t r = 77;
    for (int t = 0; t < 20; t++) {
        int64_t p = (int64_t)(sl_splitmix64(&r) % (uint64_t)(nfull + 10)), got[200], rep = -2;
        int n = read_at(mix, 3, p, got, 200, &rep);
        int want = p >= nfull ? 0 : (nfull - p < 200 ? (int)(nfull - p) : 200);
        if (n != want) printf("  at %lld\n", (long long)p);
        ASSERT_EQ(n, want);
        for (int i = 0; i < n; i++) ASSERT_EQ(got[i], full[p + i]);
        ASSERT_EQ(rep, replayed >= 0 ? replayed : (p < nfull ? p : nfull));
    }
}

TEST(test_start_anywhere) {
    static int64_t full[4000];
    for (int stop = 0; stop < 2; stop++) {
        sl_dataset *mix;
        ASSERT_OK(mix3(stop, 11, NULL, &mix));
        int nfull = read_at(mix, 3, 0, full, 4000, NULL);
        ASSERT_EQ(nfull, stop ? nfull : 3200);
        ASSERT(nfull > 300);
        check_positions(mix, full, nfull, 0); /* range and take seek: nothing replayed */
        if (t_cur_failed) return;
        /* a state saved mid-mix continues exactly */
        sl_iter_opts o = sl_iter_opts_default();
        o.seed = 3;
        sl_iter *it, *back;
        sl_element e;
        sl_element_init(&e);
        ASSERT_OK(sl_iter_create(mix, &o, &it));
        for (int i = 0; i < 137; i++) ASSERT_OK(sl_test_next_drop(it));
        uint8_t st[SL_ITER_STATE_SIZE];
        size_t len;
        ASSERT_OK(sl_iter_save(it, st, sizeof st, &len));
        sl_iter_close(it);
        ASSERT_OK(sl_iter_restore(mix, NULL, st, len, &back));
        ASSERT_EQ(sl_iter_replayed(back), 0);
        for (int i = 137; i < 337; i++) {
            ASSERT_OK(sl_iter_next(back, &e));
            ASSERT_EQ(sl_test_value(&e), full[i]);
            sl_element_clear(&e);
        }
        sl_iter_close(back);
        sl_dataset_unref(mix);
        /* an input below a filter cannot seek: the same elements, replayed */
        sl_dataset *r, *odd, *fmix;
        ASSERT_OK(sl_ds_range(50000, 53000, 1, &r));
        ASSERT_OK(sl_ds_filter(r, sl_test_is_odd, NULL, &odd)); /* 1500 odd values */
        ASSERT_OK(mix3(stop, 11, odd, &fmix));
        int nf = read_at(fmix, 3, 0, full, 4000, NULL);
        ASSERT_EQ(nf, stop ? nf : 3200);
        check_positions(fmix, full, nf, -1);
        sl_dataset_unref(fmix);
        sl_dataset_unref(odd);
        sl_dataset_unref(r);
    }
}

int main(void) {
    RUN(test_shares_follow_the_weights);
    RUN(test_empty_inputs);
    RUN(test_refusals_and_input_errors);
    RUN(test_same_seed_same_stream);
    RUN(test_start_anywhere);
    TEST_MAIN_END();
}
