/* pipeline/ops/choose.c: exact streams for given choices with and without stop_on_empty,
 * a choice outside the inputs and one that is no int64 scalar (exact codes and messages),
 * the cardinality, and starting at a position (seeking, and replaying below a filter) or
 * from a saved state giving exactly the rest of the stream. */
#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "sluice/util.h"
#include "helper_iter.h"
#include "test.h"

/* value v -> table[v] (ctx: the table, int64 values) */
static sl_status from_table(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)call;
    int c = sl_element_find(e, "value");
    int64_t *v = e->t[c].data;
    *v = ((const int64_t *)ctx)[*v];
    return SL_OK;
}

/* value v -> a hash of v, modulo 3: random-looking choices that seek as their range does */
static sl_status hashed3(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    int c = sl_element_find(e, "value");
    int64_t *v = e->t[c].data;
    *v = (int64_t)(sl_mix2(99, (uint64_t)*v) % 3);
    return SL_OK;
}

/* The choices `table[0..n)` as a dataset (a map over range(0, n)). */
static sl_status choices_of(const int64_t *table, int64_t n, sl_dataset **out) {
    return sl_test_range_map(n, "from_table", from_table, (void *)table, 1, out);
}

/* Every value of choose(ins, choices_of(table)) into out; returns the count, or -1. */
static int chosen(sl_dataset **ins, int n, const int64_t *table, int64_t nt, bool stop, int64_t *out, int cap) {
    sl_dataset *ch, *mix;
    if (choices_of(table, nt, &ch)) return -1;
    sl_status s = sl_ds_choose_from_datasets(ins, n, ch, stop, &mix);
    sl_dataset_unref(ch);
    if (s) return -1;
    int got = sl_test_values(mix, NULL, out, cap);
    sl_dataset_unref(mix);
    return got;
}

TEST(test_given_choices) {
    sl_dataset *a, *b, *ins[2];
    ASSERT_OK(sl_ds_range(0, 3, 1, &a));
    ASSERT_OK(sl_ds_range(10, 12, 1, &b));
    ins[0] = a;
    ins[1] = b;
    int64_t got[32];
    static const int64_t t1[] = {0, 1, 1, 0, 0};
    ASSERT_EQ(chosen(ins, 2, t1, 5, true, got, 32), 5);
    static const int64_t w1[] = {0, 10, 11, 1, 2};
    ASSERT_MEMEQ(got, w1, sizeof w1);
    /* input 0 chosen a fourth time: the end with stop_on_empty, a skip without */
    static const int64_t t2[] = {0, 0, 0, 0, 1, 1, 1, 0, 1};
    ASSERT_EQ(chosen(ins, 2, t2, 9, true, got, 32), 3);
    for (int i = 0; i < 3; i++) ASSERT_EQ(got[i], i);
    ASSERT_EQ(chosen(ins, 2, t2, 9, false, got, 32), 5);
    static const int64_t w2[] = {0, 1, 2, 10, 11};
    ASSERT_MEMEQ(got, w2, sizeof w2);
    /* both empty: the end, though choices remain (a choices stream that never ends) */
    sl_dataset *r2, *forever, *mix;
    ASSERT_OK(sl_ds_range(0, 2, 1, &r2));
    ASSERT_OK(sl_ds_repeat(r2, SL_INFINITE, &forever));
    ASSERT_OK(sl_ds_choose_from_datasets(ins, 2, forever, false, &mix));
    ASSERT_EQ(sl_dataset_cardinality(mix), SL_UNKNOWN_CARD);
    ASSERT_EQ(sl_test_values(mix, NULL, got, 32), 5);
    static const int64_t w3[] = {0, 10, 1, 11, 2};
    ASSERT_MEMEQ(got, w3, sizeof w3);
    sl_dataset_unref(mix);
    /* endless inputs: one element per choice */
    sl_dataset *ea, *eb, *eins[2], *ch;
    ASSERT_OK(sl_ds_repeat(a, SL_INFINITE, &ea));
    ASSERT_OK(sl_ds_repeat(b, SL_INFINITE, &eb));
    eins[0] = ea;
    eins[1] = eb;
    ASSERT_OK(choices_of(t2, 9, &ch));
    ASSERT_OK(sl_ds_choose_from_datasets(eins, 2, ch, true, &mix));
    ASSERT_EQ(sl_dataset_cardinality(mix), 9);
    ASSERT_STREQ(sl_dataset_op(mix), "choose_from_datasets");
    ASSERT_EQ(sl_test_values(mix, NULL, got, 32), 9);
    static const int64_t w4[] = {0, 1, 2, 0, 10, 11, 10, 1, 11};
    ASSERT_MEMEQ(got, w4, sizeof w4);
    sl_dataset_unref(mix);
    ASSERT_OK(sl_ds_choose_from_datasets(eins, 2, forever, true, &mix));
    ASSERT_EQ(sl_dataset_cardinality(mix), SL_INFINITE);
    sl_dataset_unref(mix);
    sl_dataset_unref(ch);
    sl_dataset_unref(eb);
    sl_dataset_unref(ea);
    sl_dataset_unref(forever);
    sl_dataset_unref(r2);
    sl_dataset_unref(b);
    sl_dataset_unref(a);
}

/* value -> float32 scalar "value" */
static sl_status to_float(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_F32, 0, NULL);
    if (s) return s;
    *(float *)t.data = 1;
    return sl_element_set(e, "value", &t);
}

TEST(test_bad_choices) {
    sl_dataset *a, *b, *ins[2], *ch, *mix = (sl_dataset *)1;
    ASSERT_OK(sl_ds_range(0, 3, 1, &a));
    ASSERT_OK(sl_ds_range(10, 12, 1, &b));
    ins[0] = a;
    ins[1] = b;
    static const int64_t t[] = {0, 5, 1, -1, 0};
    ASSERT_OK(choices_of(t, 5, &ch));
    ASSERT_EQ(sl_ds_choose_from_datasets(ins, 0, ch, true, &mix), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "choose_from_datasets: 0 inputs (must be 1..15)");
    ASSERT(mix == NULL);
    ASSERT_EQ(sl_ds_choose_from_datasets(ins, 2, NULL, true, &mix), SL_EINVAL);
    ASSERT_OK(sl_ds_choose_from_datasets(ins, 2, ch, true, &mix));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(mix, &it, &e));
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_EQ(sl_test_value(&e), 0);
    sl_element_clear(&e);
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_EQ(e.n, 0);
    ASSERT_STREQ(sl_errmsg(), "op 'choose_from_datasets': choice 1 is 5, outside 0..1 (2 inputs)\n"
                              "---> HINT: a choice is the index of an input, 0 for the first");
    ASSERT_OK(sl_iter_next(it, &e)); /* the bad choice is consumed: the stream goes on */
    ASSERT_EQ(sl_test_value(&e), 10);
    sl_element_clear(&e);
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'choose_from_datasets': choice 3 is -1, outside 0..1 (2 inputs)\n"
                              "---> HINT: a choice is the index of an input, 0 for the first");
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_EQ(sl_test_value(&e), 1);
    sl_element_clear(&e);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    /* starting past a bad choice meets it, as producing the elements would */
    ASSERT_EQ(sl_iter_create_at(mix, NULL, 2, &it), SL_EINVAL);
    ASSERT(it == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "choice 1 is 5, outside 0..1");
    sl_dataset_unref(mix);
    /* a float choice */
    sl_dataset *fch;
    ASSERT_OK(sl_test_range_map(2, "to_float", to_float, NULL, 1, &fch));
    ASSERT_OK(sl_ds_choose_from_datasets(ins, 2, fch, true, &mix));
    ASSERT_OK(sl_test_open(mix, &it, &e));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'choose_from_datasets': choice 0 is not an int64 scalar: 'value' float32 of rank 0\n"
                              "---> HINT: the choices are int64 scalars, one per element, as range makes "
                              "(range 0 N | repeat)");
    sl_iter_close(it);
    sl_dataset_unref(mix);
    sl_dataset_unref(fch);
    sl_dataset_unref(ch);
    sl_dataset_unref(b);
    sl_dataset_unref(a);
}

/* Up to cap values from an iterator made at `start`; *replayed gets sl_iter_replayed. */
static int read_at(sl_dataset *ds, int64_t start, int64_t *out, int cap, int64_t *replayed) {
    sl_iter *it;
    if (sl_iter_create_at(ds, NULL, start, &it)) {
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
    return s == SL_OK || s == SL_END ? n : -1;
}

/* range(0, 500), range(10000, 10300) under take, and `third` (range(20000, 20400) if
 * NULL), chosen by 2000 hashed choices */
static sl_status mix3(bool stop, sl_dataset *third, sl_dataset **out) {
    sl_dataset *a, *r, *b, *c = NULL, *ch;
    sl_status s = sl_ds_range(0, 500, 1, &a);
    if (!s) s = sl_ds_range(10000, 20000, 1, &r);
    if (!s) s = sl_ds_take(r, 300, &b);
    if (!s) s = third ? (c = sl_dataset_ref(third), SL_OK) : sl_ds_range(20000, 20400, 1, &c);
    if (!s) s = sl_test_range_map(2000, "hashed3", hashed3, NULL, 1, &ch);
    sl_dataset *ins[3] = {a, b, c};
    if (!s) s = sl_ds_choose_from_datasets(ins, 3, ch, stop, out);
    sl_dataset_unref(ch);
    sl_dataset_unref(c);
    sl_dataset_unref(b);
    sl_dataset_unref(r);
    sl_dataset_unref(a);
    return s;
}

static void check_positions(sl_dataset *mix, const int64_t *full, int nfull, bool replays) {
    uint64_t r = 5;
    for (int t = 0; t < 20; t++) {
        int64_t p = (int64_t)(sl_splitmix64(&r) % (uint64_t)(nfull + 10)), got[200], rep = -2;
        int n = read_at(mix, p, got, 200, &rep);
        int want = p >= nfull ? 0 : (nfull - p < 200 ? (int)(nfull - p) : 200);
        if (n != want) printf("  at %lld\n", (long long)p);
        ASSERT_EQ(n, want);
        for (int i = 0; i < n; i++) ASSERT_EQ(got[i], full[p + i]);
        ASSERT_EQ(rep, replays ? (p < nfull ? p : nfull) : 0);
    }
}

TEST(test_start_anywhere) {
    static int64_t full[2100];
    for (int stop = 0; stop < 2; stop++) {
        sl_dataset *mix;
        ASSERT_OK(mix3(stop, NULL, &mix));
        int nfull = read_at(mix, 0, full, 2100, NULL);
        /* 2000 choices, 1200 elements in all: input 1 (300) runs out first */
        printf("  stop_on_empty=%d: %d elements\n", stop, nfull);
        ASSERT(stop ? nfull > 400 && nfull < 1200 : nfull == 1200);
        check_positions(mix, full, nfull, false);
        if (t_cur_failed) return;
        sl_iter *it, *back;
        sl_element e;
        sl_element_init(&e);
        ASSERT_OK(sl_iter_create(mix, NULL, &it));
        for (int i = 0; i < 251; i++) ASSERT_OK(sl_test_next_drop(it));
        uint8_t st[SL_ITER_STATE_SIZE];
        size_t len;
        ASSERT_OK(sl_iter_save(it, st, sizeof st, &len));
        sl_iter_close(it);
        ASSERT_OK(sl_iter_restore(mix, NULL, st, len, &back));
        ASSERT_EQ(sl_iter_replayed(back), 0);
        for (int i = 251; i < 451; i++) {
            ASSERT_OK(sl_iter_next(back, &e));
            ASSERT_EQ(sl_test_value(&e), full[i]);
            sl_element_clear(&e);
        }
        sl_iter_close(back);
        sl_dataset_unref(mix);
        /* an input below a filter: the same elements, replayed */
        sl_dataset *r, *odd, *fmix;
        ASSERT_OK(sl_ds_range(20000, 20800, 1, &r));
        ASSERT_OK(sl_ds_filter(r, sl_test_is_odd, NULL, &odd));
        ASSERT_OK(mix3(stop, odd, &fmix));
        int nf = read_at(fmix, 0, full, 2100, NULL);
        ASSERT(nf > 400);
        check_positions(fmix, full, nf, true);
        sl_dataset_unref(fmix);
        sl_dataset_unref(odd);
        sl_dataset_unref(r);
    }
}

int main(void) {
    RUN(test_given_choices);
    RUN(test_bad_choices);
    RUN(test_start_anywhere);
    TEST_MAIN_END();
}
