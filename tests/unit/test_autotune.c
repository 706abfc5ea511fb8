/* pipeline/autotune.c: the RAM budget holds (peak buffered bytes <= ram_budget + the stated
 * constant: one element per tuned buffered op and per worker thread), the tuned parallelism
 * stays within the thread budget (the CPU budget, up to twice that while other processes
 * deschedule the pipeline's threads) while the pipeline runs and goes where the work is,
 * and the choices land in the stats history. Timing-dependent quantities are asserted as
 * bounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "sluice/pool.h"
#include "sluice/stats.h"
#include "helper_iter.h"
#include "test.h"

#define ELEM_FLOATS 16384 /* 64 KiB per element */

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static sl_status big(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx;
    (void)call;
    return sl_test_set_f32(e, "x", ELEM_FLOATS, 1);
}

/* burn CPU for *ctx microseconds */
static sl_status spin(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)e;
    (void)call;
    uint64_t end = sl_now_ns() + (uint64_t)*(long *)ctx * 1000;
    volatile uint64_t x = 0;
    while (sl_now_ns() < end) x++;
    return SL_OK;
}

static const sl_op_stat *find_op(const sl_stats *st, const char *label) {
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->ops[i].label, label)) return &st->ops[i];
    return NULL;
}

/* Stats whose thread budget and parallelism did not move while they were read: two
 * snapshots in a row that agree (up to 20 tries; NULL if the tuner kept changing them). One
 * snapshot is not atomic: the tuner may raise the budget, raise a parallelism and lower both
 * again between its reads, and under heavy load it did. */
static sl_stats *stable_stats(sl_iter *it) {
    sl_stats *a = NULL, *b = NULL;
    if (sl_iter_stats(it, &a)) return NULL;
    for (int k = 0; k < 20; k++) {
        if (sl_iter_stats(it, &b)) break;
        bool same = a->thread_budget == b->thread_budget && a->n == b->n;
        for (int i = 0; same && i < a->n; i++) same = a->ops[i].parallelism == b->ops[i].parallelism;
        sl_stats_free(a);
        a = b;
        b = NULL;
        if (same) return a;
    }
    sl_stats_free(a);
    sl_stats_free(b);
    return NULL;
}

/* One map of auto_iter: its custom function (APPLY with CTX, named NAME) and its label. */
typedef struct {
    const char *name, *label;
    sl_fn_apply apply;
    void *ctx;
} map_spec;

/* range 0, 1, ... -> one map per entry of MAPS (parallelism SL_AUTO) -> prefetch(SL_AUTO,
 * labelled PF_LABEL unless NULL), in *out, and an iterator over it with CPU_BUDGET and
 * RAM_BUDGET (0: the default) in *it; the datasets and functions in between
 * are released (the pipeline holds its own references). On failure the status is returned
 * (*out and *it NULL, or *it NULL and *out to be released). */
static sl_status auto_iter(const map_spec *maps, int n, const char *pf_label, int cpu_budget, int64_t ram_budget,
                           sl_dataset **out, sl_iter **it) {
    sl_dataset *d;
    *out = NULL;
    *it = NULL;
    sl_status s = sl_ds_range(0, 1LL << 40, 1, &d);
    for (int i = 0; i < n && !s; i++) {
        sl_fn *fn;
        sl_dataset *m;
        s = sl_fn_custom(maps[i].name, maps[i].apply, maps[i].ctx, NULL, &fn);
        if (s) break;
        s = sl_ds_map(d, fn, SL_AUTO, true, &m);
        sl_fn_unref(fn);
        sl_dataset_unref(d);
        d = m;
        if (!s) sl_dataset_set_label(m, maps[i].label);
    }
    if (!s) s = sl_ds_prefetch(d, SL_AUTO, out);
    sl_dataset_unref(d);
    if (s) return s;
    if (pf_label) sl_dataset_set_label(*out, pf_label);
    sl_iter_opts o = sl_iter_opts_default();
    o.cpu_budget = cpu_budget;
    if (ram_budget) o.ram_budget = ram_budget;
    return sl_iter_create(*out, &o, it);
}

TEST(test_ram_budget) {
    const int64_t elem = (int64_t)ELEM_FLOATS * 4 + 8; /* x and the range's value */
    const int cpu = 2;
    const int64_t ram = 2 * elem; /* without the budget: 2*2+2 slots + 2 prefetched = 8 elements */
    const map_spec maps[] = {{"big", "ram/map", big, NULL}};
    sl_dataset *p;
    sl_iter *it;
    ASSERT_OK(auto_iter(maps, 1, "ram/prefetch", cpu, ram, &p, &it));
    /* a slow consumer first (every buffer fills up), then a fast one */
    for (int i = 0; i < 300; i++) {
        ASSERT_OK(sl_test_next_drop(it));
        if (i < 150) sleep_us(2000);
    }
    sl_stats *st;
    ASSERT_OK(sl_iter_stats(it, &st));
    const sl_op_stat *pm = find_op(st, "ram/map"), *pp = find_op(st, "ram/prefetch");
    ASSERT(pm && pp);
    printf("  peak buffered %lld bytes (budget %lld, constant %lld); map capacity %d par %d, prefetch %d\n",
           (long long)st->buffered_bytes_peak, (long long)ram, (long long)((2 * cpu + 1) * elem),
           pm->buffer, pm->parallelism, pp->buffer);
    /* the stated constant: one element per tuned buffered op (1 here) and per worker (cpu) */
    ASSERT(st->buffered_bytes_peak <= ram + (2 * cpu + 1) * elem); /* workers: up to 2 x cpu */
    ASSERT(st->buffered_bytes_peak >= elem);
    ASSERT_EQ(st->ram_budget, ram);
    /* the tuned capacities fit the budget */
    ASSERT(pm->tuned && pp->tuned);
    ASSERT((int64_t)(pm->buffer + pp->buffer) * elem <= ram);
    sl_stats_free(st);
    sl_iter_close(it);
    sl_dataset_unref(p);
}

TEST(test_cpu_budget) {
    static long heavy_us = 300, light_us = 100;
    const int cpu = 4;
    const map_spec maps[] = {{"heavy", "cpu/heavy", spin, &heavy_us}, {"light", "cpu/light", spin, &light_us}};
    sl_dataset *p;
    sl_iter *it;
    ASSERT_OK(auto_iter(maps, 2, NULL, cpu, 0, &p, &it));
    uint64_t t0 = sl_now_ns();
    int checks = 0, max_sum = 0, stable = 0, unstable = 0;
    double h_sum = 0, l_sum = 0; /* their parallelism summed over the checks of the second half */
    int half = 0;
    while (sl_now_ns() - t0 < 800000000ull) {
        ASSERT_OK(sl_test_next_drop(it));
        if ((checks++ & 15) == 0) {
            sl_stats *st = stable_stats(it);
            if (!st) {
                unstable++;
                continue;
            }
            stable++;
            const sl_op_stat *h = find_op(st, "cpu/heavy"), *l = find_op(st, "cpu/light");
            ASSERT(h && l);
            ASSERT_EQ(h->threads, 2 * cpu); /* started for twice the budget; the idle ones sleep */
            ASSERT_EQ(l->threads, 2 * cpu);
            int sum = h->parallelism + l->parallelism;
            if (sum > max_sum) max_sum = sum;
            ASSERT(h->parallelism >= 1 && l->parallelism >= 1);
            ASSERT(st->thread_budget >= cpu && st->thread_budget <= 2 * cpu);
            ASSERT(sum <= st->thread_budget);
            if (sl_now_ns() - t0 >= 400000000ull) {
                h_sum += h->parallelism;
                l_sum += l->parallelism;
                half++;
            }
            sl_stats_free(st);
        }
    }
    ASSERT(stable >= 3 && stable >= unstable); /* the checks did run */
    ASSERT(max_sum <= 2 * cpu);
    sl_stats *st;
    ASSERT_OK(sl_iter_stats(it, &st));
    const sl_op_stat *h = find_op(st, "cpu/heavy"), *l = find_op(st, "cpu/light");
    printf("  chosen: heavy %d, light %d (cpu budget %d, thread budget %d); history points %d\n", h->parallelism,
           l->parallelism, cpu, st->thread_budget, h->nhist);
    /* 3x the work gets at least as many threads: on average over the second half (one
     * instant can catch a choice made from a noisy window on a loaded machine) */
    printf("  mean parallelism over the second half: heavy %.2f, light %.2f\n", half ? h_sum / half : 0, half ? l_sum / half : 0);
    ASSERT(h_sum >= l_sum);
    /* the choices are in the history, the last point is the current choice */
    ASSERT(h->nhist >= 2);
    ASSERT(h->hist[h->nhist - 1].parallelism >= 1 && h->hist[h->nhist - 1].parallelism <= 2 * cpu);
    for (int k = 1; k < h->nhist; k++) ASSERT(h->hist[k].t >= h->hist[k - 1].t);
    sl_stats_free(st);
    sl_iter_close(it);
    sl_dataset_unref(p);
}

/* block for *ctx microseconds (a read from slow storage): no CPU */
static sl_status block(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)e;
    (void)call;
    sleep_us(*(long *)ctx);
    return SL_OK;
}

/* A map whose function blocks (I/O) between two cheap ones: its lanes need next to no core,
 * so it gets more than the CPU budget's worth of them (all its threads, 2 x the budget) and
 * the thread budget grows by them, while the sum of parallelism stays within it. Before the
 * tuner knew blocked work from CPU work, the cheap maps' one lane each used up the budget
 * and the blocking map stayed at 1-2 lanes. */
TEST(test_blocking_map) {
    static long cheap_us = 20, wait_us = 2000;
    const int cpu = 2;
    const map_spec maps[] = {{"cheap", "io/cheap", spin, &cheap_us},
                             {"block", "io/block", block, &wait_us},
                             {"tail", "io/tail", spin, &cheap_us}};
    sl_dataset *p;
    sl_iter *it;
    ASSERT_OK(auto_iter(maps, 3, NULL, cpu, 0, &p, &it));
    uint64_t t0 = sl_now_ns();
    int checks = 0, max_block = 0, max_tb = 0;
    /* up to 3 s; done once the blocking map has held more than the budget's lanes for 0.3 s */
    uint64_t above_since = 0;
    while (sl_now_ns() - t0 < 3000000000ull) {
        ASSERT_OK(sl_test_next_drop(it));
        if ((checks++ & 7) == 0) {
            sl_stats *st = stable_stats(it);
            if (!st) continue;
            const sl_op_stat *c = find_op(st, "io/cheap"), *b = find_op(st, "io/block"), *t = find_op(st, "io/tail");
            ASSERT(c && b && t);
            ASSERT_EQ(b->threads, 2 * cpu);
            int sum = c->parallelism + b->parallelism + t->parallelism, tb = st->thread_budget;
            ASSERT(c->parallelism >= 1 && b->parallelism >= 1 && t->parallelism >= 1);
            if (sum > tb) printf("  at %.3f s: %d + %d + %d > thread budget %d\n", (double)(sl_now_ns() - t0) / 1e9,
                                 c->parallelism, b->parallelism, t->parallelism, tb);
            ASSERT(sum <= tb);
            ASSERT(tb <= 3 * 2 * cpu); /* never more than the threads started */
            if (b->parallelism > max_block) max_block = b->parallelism;
            if (tb > max_tb) max_tb = tb;
            if (b->parallelism > cpu) {
                if (!above_since) above_since = sl_now_ns();
            } else {
                above_since = 0;
            }
            sl_stats_free(st);
            if (above_since && sl_now_ns() - above_since > 300000000ull) break;
        }
    }
    double secs = (double)(sl_now_ns() - t0) / 1e9;
    printf("  blocking map: most lanes %d (cpu budget %d), thread budget up to %d; held above the budget: %s "
           "(%.2f s)\n", max_block, cpu, max_tb, above_since ? "yes" : "no", secs);
    ASSERT(max_block > cpu);
    ASSERT(above_since != 0); /* and kept them, not a passing spike */
    ASSERT(max_tb > cpu);
    sl_iter_close(it);
    sl_dataset_unref(p);
}

/* A fixed parallelism is never touched by the tuner. */
TEST(test_fixed_untouched) {
    static long us = 50;
    sl_dataset *r, *m, *p;
    sl_fn *fn;
    ASSERT_OK(sl_ds_range(0, 3000, 1, &r));
    ASSERT_OK(sl_fn_custom("spin", spin, &us, NULL, &fn));
    ASSERT_OK(sl_ds_map(r, fn, 3, true, &m));
    ASSERT_OK(sl_ds_prefetch(m, 5, &p));
    sl_iter_opts o = sl_iter_opts_default();
    o.cpu_budget = 1;
    sl_iter *it;
    ASSERT_OK(sl_iter_create(p, &o, &it));
    int n = sl_test_drain(it);
    ASSERT_EQ(n, 3000);
    sl_stats *st;
    ASSERT_OK(sl_iter_stats(it, &st));
    ASSERT_EQ(st->ops[0].buffer, 5);
    ASSERT_EQ(st->ops[1].parallelism, 3);
    ASSERT_EQ(st->ops[0].tuned, 0);
    ASSERT_EQ(st->ops[1].tuned, 0);
    sl_stats_free(st);
    sl_iter_close(it);
    sl_dataset_unref(p);
    sl_dataset_unref(m);
    sl_dataset_unref(r);
    sl_fn_unref(fn);
}

int main(void) {
    RUN(test_ram_budget);
    RUN(test_cpu_budget);
    RUN(test_blocking_map);
    RUN(test_fixed_untouched);
    TEST_MAIN_END();
}
