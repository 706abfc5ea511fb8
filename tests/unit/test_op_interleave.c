/* pipeline/ops/interleave.c: interleave against tf.data's algorithm (sequential, parallel,
 * ordered and not), errors from an input in their place, each input's own stream seed,
 * interleave_tfrecord over files, and closing a parallel pipeline over files mid-stream. */
#include <unistd.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "helper_parts.h"
#include "test.h"

/* Factory: input element value k -> range(k*100+1, k*100+1+lens[k]). */
typedef struct {
    const int *lens;
    sl_fn *fail_fn; /* optional map applied to each input */
} fac_ctx;

static sl_status range_factory(void *ctx, const sl_element *e, sl_dataset **out) {
    const fac_ctx *f = ctx;
    int64_t k = sl_test_value(e);
    sl_dataset *r;
    sl_status s = sl_ds_range(k * 100 + 1, k * 100 + 1 + f->lens[k], 1, &r);
    if (s || !f->fail_fn) {
        *out = s ? NULL : r;
        return s;
    }
    s = sl_ds_map(r, f->fail_fn, 1, true, out);
    sl_dataset_unref(r);
    return s;
}

/* tf.data's InterleaveDatasetOp, step by step, as the reference. With mark_mod7, values
 * v % 7 == 6 are errors: written as -v and, as in tf.data, not counted in the block. */
static int ref_interleave_x(const int *lens, int n, int cycle, int block, bool mark_mod7, int64_t *out) {
    int cur[64], pos[64], open = 0, next_in = 0, ci = 0, bi = 0, m = 0;
    for (int j = 0; j < cycle; j++) cur[j] = -1;
    bool end_in = false;
    while (!end_in || open > 0) {
        if (cur[ci] >= 0) {
            if (pos[ci] < lens[cur[ci]]) {
                int64_t v = cur[ci] * 100 + 1 + pos[ci]++;
                if (mark_mod7 && v % 7 == 6) {
                    out[m++] = -v;
                    continue;
                }
                out[m++] = v;
                if (++bi == block) { ci = (ci + 1) % cycle; bi = 0; }
                continue;
            }
            cur[ci] = -1;
            open--;
            ci = (ci + 1) % cycle;
            bi = 0;
        } else if (!end_in) {
            if (next_in == n) end_in = true;
            else { cur[ci] = next_in++; pos[ci] = 0; open++; }
        } else {
            ci = (ci + 1) % cycle;
            bi = 0;
        }
    }
    return m;
}

static int ref_interleave(const int *lens, int n, int cycle, int block, int64_t *out) {
    return ref_interleave_x(lens, n, cycle, block, false, out);
}

static sl_status run_interleave(const int *lens, int n, int cycle, int block, int par, bool det,
                                int64_t *out, int cap) {
    sl_dataset *r, *il;
    fac_ctx f = {lens, NULL};
    sl_status s = sl_ds_range(0, n, 1, &r);
    if (s) return s;
    sl_interleave_opts o = sl_interleave_opts_default();
    o.cycle_length = cycle;
    o.block_length = block;
    o.parallelism = par;
    o.deterministic = det;
    s = sl_ds_interleave(r, range_factory, &f, &o, &il);
    sl_dataset_unref(r);
    if (s) return s;
    int got = sl_test_values(il, NULL, out, cap);
    sl_dataset_unref(il);
    return got;
}

TEST(test_interleave_orders) {
    int64_t v[256], ref[256];
    /* the documented example: cycle 2, block 1 over [a1 a2 a3] and [b1 b2] */
    int lens1[] = {3, 2};
    ASSERT_EQ(run_interleave(lens1, 2, 2, 1, 0, true, v, 256), 5);
    int64_t want1[] = {1, 101, 2, 102, 3};
    ASSERT_MEMEQ(v, want1, sizeof want1);
    /* block 2 with a replacement input: a1 a2 b1 b2 a3 b3 c1 c2 */
    int lens2[] = {3, 3, 2};
    ASSERT_EQ(run_interleave(lens2, 3, 2, 2, 0, true, v, 256), 8);
    int64_t want2[] = {1, 2, 101, 102, 3, 103, 201, 202};
    ASSERT_MEMEQ(v, want2, sizeof want2);
    /* cycle larger than the inputs, with an empty input */
    int lens3[] = {2, 0, 3};
    ASSERT_EQ(run_interleave(lens3, 3, 4, 1, 0, true, v, 256), 5);
    int64_t want3[] = {1, 201, 2, 202, 203};
    ASSERT_MEMEQ(v, want3, sizeof want3);
    /* uneven inputs, many shapes, every parallelism: all equal to tf.data's algorithm */
    int lens4[] = {5, 1, 0, 7, 3, 3, 9, 2, 0, 4, 6, 1};
    for (int cycle = 1; cycle <= 5; cycle++)
        for (int block = 1; block <= 3; block++) {
            int m = ref_interleave(lens4, 12, cycle, block, ref);
            ASSERT_EQ(m, 41);
            int pars[] = {0, 1, 2, 4};
            for (int p = 0; p < 4; p++) {
                int got = run_interleave(lens4, 12, cycle, block, pars[p], true, v, 256);
                if (got != m || memcmp(v, ref, sizeof(int64_t) * (size_t)m) != 0) {
                    FAILF("cycle %d block %d parallelism %d: got %d elements, differs from tf.data's order",
                          cycle, block, pars[p], got);
                    return;
                }
            }
            /* unordered: the same multiset */
            int got = run_interleave(lens4, 12, cycle, block, 3, false, v, 256);
            ASSERT_EQ(got, m);
            int seen[1200] = {0};
            for (int i = 0; i < m; i++) seen[v[i]]++;
            for (int i = 0; i < m; i++) ASSERT_EQ(seen[ref[i]], 1);
        }
    /* bad options */
    sl_dataset *r, *il;
    ASSERT_OK(sl_ds_range(0, 2, 1, &r));
    sl_interleave_opts o = sl_interleave_opts_default();
    o.block_length = 0;
    fac_ctx f = {lens1, NULL};
    ASSERT_EQ(sl_ds_interleave(r, range_factory, &f, &o, &il), SL_EINVAL);
    ASSERT(il == NULL);
    ASSERT_STREQ(sl_errmsg(), "interleave: block_length 0 must be >= 1");
    sl_dataset_unref(r);
}

/* Errors from an input come in order and that input goes on; identical for every
 * parallelism. */
TEST(test_interleave_errors) {
    int lens[] = {9, 4, 12, 3, 8};
    sl_fn *fn;
    ASSERT_OK(sl_fn_custom("fail_mod7", sl_test_fail_mod7, NULL, NULL, &fn));
    fac_ctx f = {lens, fn};
    sl_dataset *r;
    ASSERT_OK(sl_ds_range(0, 5, 1, &r));
    int64_t ref[64];
    int nref = 0;
    int pars[] = {0, 1, 2, 4};
    for (int p = 0; p < 4; p++) {
        sl_interleave_opts o = sl_interleave_opts_default();
        o.cycle_length = 3;
        o.block_length = 2;
        o.parallelism = pars[p];
        sl_dataset *il;
        ASSERT_OK(sl_ds_interleave(r, range_factory, &f, &o, &il));
        sl_iter *it;
        ASSERT_OK(sl_iter_create(il, NULL, &it));
        sl_element e;
        sl_element_init(&e);
        int64_t seq[64];
        int n = 0, errs = 0;
        sl_status s;
        while ((s = sl_iter_next(it, &e)) != SL_END) {
            ASSERT(n < 64);
            if (s == SL_EINVAL) {
                /* "op 'map': fail_mod7: value V is unlucky" -> -V */
                long long bad;
                ASSERT(sscanf(sl_errmsg(), "op 'map': fail_mod7: value %lld is unlucky", &bad) == 1);
                seq[n++] = -bad;
                errs++;
                continue;
            }
            ASSERT_OK(s);
            seq[n++] = sl_test_value(&e);
            sl_element_clear(&e);
        }
        sl_iter_close(it);
        sl_dataset_unref(il);
        /* 36 values, 5 of them bad: 6, 104, 202, 209, 405 */
        ASSERT_EQ(n, 36);
        ASSERT_EQ(errs, 5);
        if (p == 0) {
            memcpy(ref, seq, sizeof seq);
            nref = n;
        } else {
            ASSERT_EQ(n, nref);
            ASSERT_MEMEQ(seq, ref, sizeof(int64_t) * (size_t)n);
        }
    }
    /* each error comes where its element would, and does not count in the block */
    int64_t order[64];
    ASSERT_EQ(ref_interleave_x(lens, 5, 3, 2, true, order), 36);
    ASSERT_MEMEQ(ref, order, 36 * sizeof(int64_t));
    sl_dataset_unref(r);
    sl_fn_unref(fn);
}

/* Factory: any input element -> shuffle(range(0, 20)), reshuffled by its stream seed. */
static sl_status shuffled_factory(void *ctx, const sl_element *e, sl_dataset **out) {
    (void)ctx; (void)e;
    sl_dataset *r;
    sl_status s = sl_ds_range(0, 20, 1, &r);
    if (s) return s;
    s = sl_ds_shuffle(r, 100, 1, true, out);
    sl_dataset_unref(r);
    return s;
}

/* Each input gets its own stream seed (so its random ops differ from the other inputs'),
 * the same at every parallelism and run after run. */
TEST(test_interleave_input_seeds) {
    sl_dataset *r;
    ASSERT_OK(sl_ds_range(0, 4, 1, &r));
    int64_t ref[80], v[80];
    int pars[] = {0, 1, 2, 4, 0};
    for (int p = 0; p < 5; p++) {
        sl_interleave_opts o = sl_interleave_opts_default();
        o.cycle_length = 4;
        o.block_length = 20; /* input k's elements are v[20k .. 20k+19] */
        o.parallelism = pars[p];
        sl_dataset *il;
        ASSERT_OK(sl_ds_interleave(r, shuffled_factory, NULL, &o, &il));
        ASSERT_EQ(sl_test_values(il, NULL, v, 80), 80);
        sl_dataset_unref(il);
        if (p == 0) memcpy(ref, v, sizeof v);
        else ASSERT_MEMEQ(v, ref, sizeof v);
    }
    for (int k = 0; k < 4; k++) {
        char seen[20] = {0};
        for (int i = 0; i < 20; i++) seen[ref[20 * k + i]]++;
        for (int i = 0; i < 20; i++) ASSERT_EQ(seen[i], 1);
        for (int k2 = 0; k2 < k; k2++) ASSERT(memcmp(ref + 20 * k, ref + 20 * k2, 20 * sizeof(int64_t)) != 0);
    }
    sl_dataset_unref(r);
}

/* list_files -> interleave_tfrecord: the records of files 0..5, 2 files at a time, 3
 * records per turn. */
TEST(test_interleave_tfrecord) {
    char pat[300];
    ASSERT_OK(sl_test_write_parts(pat, sizeof pat)); /* pat: all six */
    const char *pats[] = {pat};
    sl_dataset *lf, *il;
    ASSERT_OK(sl_ds_list_files(pats, 1, false, 0, &lf));
    int lens[SL_TEST_NFILES];
    for (int i = 0; i < SL_TEST_NFILES; i++) lens[i] = SL_TEST_NREC;
    int64_t order[SL_TEST_NFILES * SL_TEST_NREC];
    ASSERT_EQ(ref_interleave(lens, SL_TEST_NFILES, 2, 3, order), SL_TEST_NFILES * SL_TEST_NREC);
    for (int par = 0; par <= 2; par++) {
        sl_interleave_opts o = sl_interleave_opts_default();
        o.cycle_length = 2;
        o.block_length = 3;
        o.parallelism = par;
        ASSERT_OK(sl_ds_interleave_tfrecord(lf, NULL, &o, &il));
        sl_iter *it;
        ASSERT_OK(sl_iter_create(il, NULL, &it));
        sl_element e;
        sl_element_init(&e);
        for (int i = 0; i < SL_TEST_NFILES * SL_TEST_NREC; i++) {
            ASSERT_OK(sl_iter_next(it, &e));
            ASSERT(sl_test_part_is(&e, (int)(order[i] / 100), (int)(order[i] % 100) - 1));
            sl_element_clear(&e);
        }
        ASSERT_EQ(sl_iter_next(it, &e), SL_END);
        sl_iter_close(it);
        sl_dataset_unref(il);
    }
    sl_dataset_unref(lf);
}

static sl_status slowish(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)e;
    if (call->index % 3 == 0) usleep(100);
    return SL_OK;
}

/* Close at many points of list_files -> interleave(parallel) -> shuffle -> map -> prefetch
 * (repeated forever), ordered and not: no leak, no race, no hang. */
TEST(test_close_midstream) {
    char pat[300];
    ASSERT_OK(sl_test_write_parts(pat, sizeof pat)); /* pat: all six */
    const char *pats[] = {pat};
    sl_fn *fn;
    ASSERT_OK(sl_fn_custom("slowish", slowish, NULL, NULL, &fn));
    for (int det = 0; det <= 1; det++) {
        sl_dataset *lf, *rep, *il, *sh, *m, *pf, *pf2;
        ASSERT_OK(sl_ds_list_files(pats, 1, true, 3, &lf));
        ASSERT_OK(sl_ds_repeat(lf, SL_INFINITE, &rep));
        sl_interleave_opts o = sl_interleave_opts_default();
        o.cycle_length = 3;
        o.block_length = 2;
        o.parallelism = 2;
        o.deterministic = det;
        ASSERT_OK(sl_ds_interleave_tfrecord(rep, NULL, &o, &il));
        ASSERT_OK(sl_ds_shuffle(il, 16, 1, true, &sh));
        ASSERT_OK(sl_ds_prefetch(sh, 3, &pf));
        ASSERT_OK(sl_ds_map(pf, fn, 2, det, &m));
        ASSERT_OK(sl_ds_prefetch(m, SL_AUTO, &pf2));
        for (int round = 0; round < 30; round++) {
            sl_iter *it;
            ASSERT_OK(sl_iter_create(pf2, NULL, &it));
            sl_element e;
            sl_element_init(&e);
            for (int k = 0; k < (round * 7) % 60; k++) {
                ASSERT_OK(sl_iter_next(it, &e));
                ASSERT_EQ(e.n, 1);
                sl_element_clear(&e);
            }
            if (round % 4 == 1) usleep(1000); /* let the threads fill their buffers */
            sl_iter_close(it);
        }
        sl_dataset_unref(pf2);
        sl_dataset_unref(m);
        sl_dataset_unref(pf);
        sl_dataset_unref(sh);
        sl_dataset_unref(il);
        sl_dataset_unref(rep);
        sl_dataset_unref(lf);
    }
    sl_fn_unref(fn);
}

int main(void) {
    RUN(test_interleave_orders);
    RUN(test_interleave_errors);
    RUN(test_interleave_input_seeds);
    RUN(test_interleave_tfrecord);
    RUN(test_close_midstream);
    TEST_MAIN_END();
}
