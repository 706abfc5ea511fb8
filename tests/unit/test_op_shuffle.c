/* pipeline/ops/shuffle.c: seeded permutations (per dataset, per run, per pipeline seed,
 * reshuffled or not under repeat), a small buffer moving nothing far ahead, and elements of
 * many components and names coming out whole. */
#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "test.h"

static bool is_perm(const int64_t *v, int n) {
    char seen[1024] = {0};
    for (int i = 0; i < n; i++) {
        if (v[i] < 0 || v[i] >= n || seen[v[i]]) return false;
        seen[v[i]] = 1;
    }
    return true;
}

TEST(test_shuffle) {
    sl_dataset *r, *s1, *s1b, *s2, *small;
    ASSERT_OK(sl_ds_range(0, 200, 1, &r));
    ASSERT_OK(sl_ds_shuffle(r, 1000, 42, true, &s1));
    ASSERT_OK(sl_ds_shuffle(r, 1000, 42, true, &s1b));
    ASSERT_OK(sl_ds_shuffle(r, 1000, 43, true, &s2));
    ASSERT_OK(sl_ds_shuffle(r, 10, 42, true, &small));
    ASSERT_EQ(sl_dataset_cardinality(s1), 200);
    int64_t a[200], b[200], c[200], d[200], ident[200];
    for (int i = 0; i < 200; i++) ident[i] = i;
    ASSERT_EQ(sl_test_values(s1, NULL, a, 200), 200);
    ASSERT(is_perm(a, 200));
    ASSERT(memcmp(a, ident, sizeof a) != 0);
    ASSERT_EQ(sl_test_values(s1b, NULL, b, 200), 200); /* same seed, another dataset: same order */
    ASSERT_MEMEQ(a, b, sizeof a);
    ASSERT_EQ(sl_test_values(s1, NULL, b, 200), 200); /* run again: same order */
    ASSERT_MEMEQ(a, b, sizeof a);
    ASSERT_EQ(sl_test_values(s2, NULL, c, 200), 200); /* another seed: another order */
    ASSERT(is_perm(c, 200));
    ASSERT(memcmp(a, c, sizeof a) != 0);
    ASSERT_EQ(sl_test_values(small, NULL, d, 200), 200); /* small buffer: still a permutation, */
    ASSERT(is_perm(d, 200));
    for (int i = 0; i < 200; i++) ASSERT(d[i] <= i + 9); /* and nothing moves far ahead */
    sl_iter_opts io = sl_iter_opts_default();
    io.seed = 7; /* the pipeline seed changes the order too */
    ASSERT_EQ(sl_test_values(s1, &io, b, 200), 200);
    ASSERT(memcmp(a, b, sizeof a) != 0);

    /* under repeat: reshuffled epochs differ, and the whole run repeats exactly */
    sl_dataset *rs, *rep, *fixed, *rep2;
    ASSERT_OK(sl_ds_range(0, 50, 1, &rs));
    ASSERT_OK(sl_ds_shuffle(rs, 100, 9, true, &fixed));
    ASSERT_OK(sl_ds_repeat(fixed, 3, &rep));
    int64_t e1[150], e2[150];
    ASSERT_EQ(sl_test_values(rep, NULL, e1, 150), 150);
    ASSERT_EQ(sl_test_values(rep, NULL, e2, 150), 150);
    ASSERT_MEMEQ(e1, e2, sizeof e1);
    for (int ep = 0; ep < 3; ep++) ASSERT(is_perm(e1 + 50 * ep, 50));
    ASSERT(memcmp(e1, e1 + 50, 50 * sizeof(int64_t)) != 0);
    ASSERT(memcmp(e1 + 50, e1 + 100, 50 * sizeof(int64_t)) != 0);
    sl_dataset_unref(rep);
    sl_dataset_unref(fixed);
    /* without reshuffling every epoch has the same order */
    ASSERT_OK(sl_ds_shuffle(rs, 100, 9, false, &fixed));
    ASSERT_OK(sl_ds_repeat(fixed, 3, &rep2));
    ASSERT_EQ(sl_test_values(rep2, NULL, e1, 150), 150);
    ASSERT(is_perm(e1, 50));
    ASSERT_MEMEQ(e1, e1 + 50, 50 * sizeof(int64_t));
    ASSERT_MEMEQ(e1, e1 + 100, 50 * sizeof(int64_t));
    sl_dataset *bad;
    ASSERT_EQ(sl_ds_shuffle(rs, 0, 1, true, &bad), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "shuffle: buffer 0 must be >= 1");
    sl_dataset_unref(rep2);
    sl_dataset_unref(fixed);
    sl_dataset_unref(rs);
    sl_dataset_unref(s1);
    sl_dataset_unref(s1b);
    sl_dataset_unref(s2);
    sl_dataset_unref(small);
    sl_dataset_unref(r);
}

/* value v -> plus ctx components: "a" = 2v, "b" = 3v, ... (ctx 0..3); ctx 9: one component
 * named "cK" (K = v % 40) = 5v instead, so the names outnumber shuffle's name table */
static sl_status add_comps(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)call;
    int k = (int)(intptr_t)ctx;
    int64_t v = *(int64_t *)e->t[0].data;
    for (int i = 0; i < (k == 9 ? 1 : k); i++) {
        sl_tensor t;
        sl_status s = sl_tensor_alloc(&t, SL_DT_I64, 0, NULL);
        if (s) return s;
        char name[16];
        snprintf(name, sizeof name, k == 9 ? "c%d" : "%c", k == 9 ? (int)(v % 40) : 'a' + i);
        *(int64_t *)t.data = v * (k == 9 ? 5 : 2 + i);
        if ((s = sl_element_set(e, name, &t))) {
            sl_tensor_release(&t);
            return s;
        }
    }
    return SL_OK;
}

/* Elements of 1 to 4 components, and components under more names than the buffer keeps
 * packed (kept whole instead), come out in the same order as the plain values, whole. */
TEST(test_shuffle_element_sizes) {
    sl_dataset *r;
    ASSERT_OK(sl_ds_range(0, 300, 1, &r));
    int64_t ref[300];
    for (int k = 0; k <= 9; k++) {
        if (k > 3 && k < 9) continue;
        sl_fn *fn;
        ASSERT_OK(sl_fn_custom("add_comps", add_comps, (void *)(intptr_t)k, NULL, &fn));
        sl_dataset *m, *sh;
        ASSERT_OK(sl_ds_map(r, fn, 1, true, &m));
        ASSERT_OK(sl_ds_shuffle(m, 64, 5, true, &sh));
        sl_iter *it;
        ASSERT_OK(sl_iter_create(sh, NULL, &it));
        sl_element e;
        sl_element_init(&e);
        int n = 0;
        while (sl_iter_next(it, &e) == SL_OK) {
            ASSERT(n < 300);
            int64_t v = sl_test_value(&e);
            if (k == 0) ref[n] = v;
            ASSERT_EQ(v, ref[n]);
            ASSERT_EQ(e.n, 1 + (k == 9 ? 1 : k));
            for (int i = 1; i < e.n; i++) {
                char want[16];
                snprintf(want, sizeof want, k == 9 ? "c%d" : "%c", k == 9 ? (int)(v % 40) : 'a' + i - 1);
                ASSERT_STREQ(e.names[i], want);
                ASSERT_EQ(*(int64_t *)e.t[i].data, v * (k == 9 ? 5 : 1 + i));
            }
            sl_element_clear(&e);
            n++;
        }
        ASSERT_EQ(n, 300);
        ASSERT(is_perm(ref, 300));
        sl_iter_close(it);
        sl_dataset_unref(sh);
        sl_dataset_unref(m);
        sl_fn_unref(fn);
    }
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_shuffle);
    RUN(test_shuffle_element_sizes);
    TEST_MAIN_END();
}
