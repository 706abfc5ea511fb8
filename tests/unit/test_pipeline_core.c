/* pipeline/: the iterator protocol under closing — closing parallel pipelines mid-stream,
 * many times, and closing one whose every op is blocked (the cancellation hooks wake
 * them). Each op's own tests are in test_op_<op>.c. */
#include <stdlib.h>
#include <unistd.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "pipeline/internal.h"
#include "test.h"

static sl_status slow_fn(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)e; (void)call;
    usleep(200);
    return SL_OK;
}

/* Close iterators at every point of a parallel pipeline, many times: no leak, no race,
 * no hang (ASan and TSan runs of this test check the first two). */
TEST(test_close_midstream) {
    sl_dataset *r, *rep, *m, *b, *m2;
    ASSERT_OK(sl_ds_range(0, 1000, 1, &r));
    ASSERT_OK(sl_ds_repeat(r, SL_INFINITE, &rep));
    sl_fn *fn;
    ASSERT_OK(sl_fn_custom("slow", slow_fn, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(rep, fn, 4, true, &m));
    sl_batch_opts o = sl_batch_opts_default(8);
    o.parallelism = 2;
    ASSERT_OK(sl_ds_map_batch(m, fn, &o, &b));
    ASSERT_OK(sl_ds_map(b, fn, 2, false, &m2));
    for (int round = 0; round < 40; round++) {
        sl_iter *it;
        ASSERT_OK(sl_iter_create(m2, NULL, &it));
        sl_element e;
        sl_element_init(&e);
        for (int k = 0; k < round % 5; k++) {
            ASSERT_OK(sl_iter_next(it, &e));
            ASSERT_EQ(e.t[0].dims[0], 8);
            sl_element_clear(&e);
        }
        sl_iter_close(it);
    }
    sl_dataset_unref(m2);
    sl_dataset_unref(b);
    sl_dataset_unref(m);
    sl_fn_unref(fn);
    sl_dataset_unref(rep);
    sl_dataset_unref(r);
}

/* ---- closing a pipeline whose every op is blocked ---- */

static int never(void *ctx, const sl_element *e) {
    (void)ctx;
    usleep(500); /* a slow source that does not eat the CPU the closing thread needs */
    return *(int64_t *)e->t[0].data == -1; /* range never yields -1 */
}

static sl_status spinning_input(void *ctx, const sl_element *e, sl_dataset **out) {
    (void)ctx; (void)e;
    sl_dataset *r;
    sl_status s = sl_ds_range(0, INT64_MAX, 1, &r);
    if (s) return s;
    s = sl_ds_filter(r, never, NULL, out);
    sl_dataset_unref(r);
    return s;
}

static sl_status same(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)e; (void)call;
    return SL_OK;
}

/* interleave (2 workers in inputs that never yield) -> map on 2 runner threads -> prefetch:
 * once it settles, the interleave's consumer, the map's workers and its consumer and the
 * prefetch producer all wait on condition variables. Closing wakes them through the hooks
 * each op registered (and the sources see the cancel at their next element, 0.5 ms apart),
 * so close returns in about a millisecond. The waits' safety-net poll (sl__poll_ms, 50 ms)
 * is set to 20 s here: a wait that is noticed only when its poll runs out makes its close
 * take 20 s, so the bound of 10 s holds by a margin of thousands on any machine, loaded
 * or not, and fails only when a wake-up is missing (with the hooks disabled, or the
 * interleave's workers not waking its consumer when their inputs report the cancel). */
#define CLOSE_BOUND_MS 10000.0

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

TEST(test_close_wakes_blocked_ops) {
    sl_dataset *in, *il, *m, *pf;
    ASSERT_OK(sl_ds_range(0, 4, 1, &in));
    sl_interleave_opts io = sl_interleave_opts_default();
    io.cycle_length = 2;
    io.parallelism = 2;
    ASSERT_OK(sl_ds_interleave(in, spinning_input, NULL, &io, &il));
    sl_fn *fn;
    ASSERT_OK(sl_fn_custom("same", same, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(il, fn, 2, true, &m));
    ASSERT_OK(sl_ds_prefetch(m, 2, &pf));
    enum { ROUNDS = 7 };
    double ms[ROUNDS];
    int poll = sl__poll_ms;
    sl__poll_ms = 20000; /* before any thread of the pipeline starts */
    for (int round = 0; round < ROUNDS; round++) {
        sl_iter *it;
        ASSERT_OK(sl_iter_create(pf, NULL, &it));
        usleep(30000); /* let every thread reach its wait (a thread not there yet is woken too) */
        uint64_t t0 = sl_now_ns();
        sl_iter_close(it);
        ms[round] = (double)(sl_now_ns() - t0) / 1e6;
        printf("  close %d: %.3f ms\n", round, ms[round]);
    }
    sl_dataset_unref(pf);
    sl_dataset_unref(m);
    sl_fn_unref(fn);
    sl_dataset_unref(il);
    sl_dataset_unref(in);
    sl__poll_ms = poll;
    qsort(ms, ROUNDS, sizeof ms[0], cmp_double);
    printf("  close median %.3f ms (min %.3f, max %.3f)\n", ms[ROUNDS / 2], ms[0], ms[ROUNDS - 1]);
    ASSERT(ms[ROUNDS - 1] < CLOSE_BOUND_MS); /* every close: a missed wake-up costs 20 s */
}

int main(void) {
    RUN(test_close_midstream);
    RUN(test_close_wakes_blocked_ops);
    TEST_MAIN_END();
}
