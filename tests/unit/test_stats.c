/* pipeline/stats.c and pipeline/trace.c: exact counters (elements, bytes, the graph's
 * parent links), busy time that excludes the input's time, the JSON round trip, the
 * bottleneck verdict on three constructed pipelines (a slow source, a slow map function, a
 * slow consumer), and a trace file that parses as trace-event JSON. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "sluice/stats.h"
#include "test.h"

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* adds "x": float32[256] */
static sl_status add_x(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx;
    (void)call;
    int64_t dims[1] = {256};
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_F32, 1, dims);
    if (s) return s;
    memset(t.data, 0, 1024);
    s = sl_element_set(e, "x", &t);
    if (s) sl_tensor_release(&t);
    return s;
}

static sl_status nothing(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx;
    (void)e;
    (void)call;
    return SL_OK;
}

static sl_status sleep_1ms(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx;
    (void)e;
    (void)call;
    sleep_us(1000);
    return SL_OK;
}

static int pred_sleep(void *ctx, const sl_element *e) {
    (void)e;
    sleep_us(*(long *)ctx);
    return 1;
}

static const sl_op_stat *find_op(const sl_stats *st, const char *label) {
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->ops[i].label, label)) return &st->ops[i];
    return NULL;
}

TEST(test_counters_exact) {
    sl_dataset *r, *m, *b, *p;
    sl_fn *fn;
    ASSERT_OK(sl_ds_range(0, 100, 1, &r));
    ASSERT_OK(sl_fn_custom("add_x", add_x, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(r, fn, 2, true, &m));
    sl_batch_opts bo = sl_batch_opts_default(10);
    ASSERT_OK(sl_ds_batch(m, &bo, &b)); /* fused: map_batch */
    ASSERT_OK(sl_ds_prefetch(b, 2, &p));
    sl_dataset_set_label(p, "t/prefetch");
    sl_iter *it;
    ASSERT_OK(sl_iter_create(p, NULL, &it));
    sl_element e;
    sl_element_init(&e);
    int n = 0;
    while (sl_iter_next(it, &e) == SL_OK) {
        n++;
        sl_element_clear(&e);
    }
    ASSERT_EQ(n, 10);
    sl_stats *st;
    ASSERT_OK(sl_iter_stats(it, &st));
    ASSERT_EQ(st->n, 3);
    ASSERT_STREQ(st->ops[0].label, "t/prefetch");
    ASSERT_STREQ(st->ops[0].op, "prefetch");
    ASSERT_EQ(st->ops[0].parent, -1);
    ASSERT_STREQ(st->ops[1].op, "map_batch");
    ASSERT_EQ(st->ops[1].parent, 0);
    ASSERT_STREQ(st->ops[2].op, "range");
    ASSERT_EQ(st->ops[2].parent, 1);
    /* per batch: value int64[10] (80 bytes) + x float32[10,256] (10240 bytes) */
    ASSERT_EQ(st->ops[0].elements, 10);
    ASSERT_EQ(st->ops[0].bytes, 10 * (80 + 10240));
    ASSERT_EQ(st->ops[1].elements, 10);
    ASSERT_EQ(st->ops[1].bytes, 10 * (80 + 10240));
    ASSERT_EQ(st->ops[2].elements, 100);
    ASSERT_EQ(st->ops[2].bytes, 800);
    ASSERT_EQ(st->elements, 10);
    ASSERT_EQ(st->ops[1].parallelism, 2);
    ASSERT_EQ(st->ops[1].threads, 2);
    ASSERT_EQ(st->ops[0].buffer, 2);
    ASSERT_EQ(st->ops[0].tuned, 0);
    ASSERT(st->ops[1].busy_s > 0);
    ASSERT(st->buffered_bytes_peak >= 10320 && st->buffered_bytes_peak <= (2 + 6) * 10320);
    ASSERT(st->ops[0].nhist >= 1);
    ASSERT_EQ(st->ops[0].hist[0].buffer, 2);
    ASSERT_EQ(st->ops[1].hist[0].parallelism, 2);

    /* JSON round trip */
    char path[] = "/tmp/sluice-stats-XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    close(fd);
    ASSERT_OK(sl_stats_save(st, path));
    sl_stats *back;
    ASSERT_OK(sl_stats_load(path, &back));
    ASSERT_EQ(back->n, 3);
    for (int i = 0; i < 3; i++) {
        ASSERT_STREQ(back->ops[i].label, st->ops[i].label);
        ASSERT_STREQ(back->ops[i].op, st->ops[i].op);
        ASSERT_EQ(back->ops[i].parent, st->ops[i].parent);
        ASSERT_EQ(back->ops[i].elements, st->ops[i].elements);
        ASSERT_EQ(back->ops[i].bytes, st->ops[i].bytes);
        ASSERT_EQ(back->ops[i].parallelism, st->ops[i].parallelism);
        ASSERT_EQ(back->ops[i].nhist, st->ops[i].nhist);
        ASSERT(fabs(back->ops[i].busy_s - st->ops[i].busy_s) < 2e-6); /* written with 6 decimals */
    }
    ASSERT_EQ(back->elements, 10);
    ASSERT_EQ(back->buffered_bytes_peak, st->buffered_bytes_peak);
    sl_stats_free(back);
    /* not a stats file: SL_ECORRUPT with the offset */
    FILE *f = fopen(path, "w");
    fputs("{\"format\": \"other\"}", f);
    fclose(f);
    ASSERT_EQ(sl_stats_load(path, &back), SL_ECORRUPT);
    ASSERT(back == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "not a sluice-stats file");
    f = fopen(path, "w");
    fputs("{\"format\": \"sluice-stats\", \"ops\": [", f);
    fclose(f);
    ASSERT_EQ(sl_stats_load(path, &back), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "unexpected end of file");
    remove(path);
    ASSERT_EQ(sl_stats_load("/nonexistent/stats.json", &back), SL_ENOTFOUND);

    sl_stats_free(st);
    sl_iter_close(it);
    sl_dataset_unref(p);
    sl_dataset_unref(b);
    sl_dataset_unref(m);
    sl_dataset_unref(r);
    sl_fn_unref(fn);
}

/* take <- filter (sleeps 5 ms per element) <- range, all on the consumer's thread: the
 * filter's time is the filter's, not take's. */
TEST(test_busy_excludes_input) {
    static long us = 5000;
    sl_dataset *r, *fl, *t;
    ASSERT_OK(sl_ds_range(0, 1000, 1, &r));
    ASSERT_OK(sl_ds_filter(r, pred_sleep, &us, &fl));
    sl_dataset_set_label(fl, "slow_filter");
    ASSERT_OK(sl_ds_take(fl, 20, &t));
    sl_iter *it;
    ASSERT_OK(sl_iter_create(t, NULL, &it));
    sl_element e;
    sl_element_init(&e);
    while (sl_iter_next(it, &e) == SL_OK) sl_element_clear(&e);
    sl_stats *st;
    ASSERT_OK(sl_iter_stats(it, &st));
    const sl_op_stat *take = &st->ops[0], *filt = find_op(st, "slow_filter");
    ASSERT(filt);
    ASSERT_EQ(take->elements, 20);
    ASSERT_EQ(filt->elements, 20);
    ASSERT(filt->busy_s >= 0.100);
    ASSERT(take->busy_s < 0.030);
    ASSERT(take->wait_s >= 0.100);
    ASSERT(filt->wait_s < 0.030);
    sl_stats_free(st);
    sl_iter_close(it);
    sl_dataset_unref(t);
    sl_dataset_unref(fl);
    sl_dataset_unref(r);
}

/* Run ds for `seconds`, the consumer sleeping consumer_us between calls; the verdict. */
static int verdict_of(sl_dataset *ds, double seconds, long consumer_us, sl_stats_verdict *v, char *label,
                      size_t cap) {
    sl_iter *it;
    if (sl_iter_create(ds, NULL, &it)) return -100;
    sl_element e;
    sl_element_init(&e);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (sl_iter_next(it, &e) != SL_OK) break;
        sl_element_clear(&e);
        if (consumer_us) sleep_us(consumer_us);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9 > seconds) break;
    }
    sl_stats *st;
    if (sl_iter_stats(it, &st)) return -101;
    int k = sl_stats_bottleneck(st, v);
    snprintf(label, cap, "%s", k >= 0 ? st->ops[k].label : "(consumer)");
    printf("  %s | %s | %s\n", v->summary, v->evidence, v->advice);
    sl_stats_free(st);
    sl_iter_close(it);
    return k;
}

TEST(test_verdict_slow_source) {
    /* the source: a range whose elements each take 1 ms to come (a filter that sleeps right
     * after it, labelled as the source); then a cheap parallel map and a prefetch */
    static long us = 1000;
    sl_dataset *r, *src, *m, *p;
    sl_fn *fn;
    ASSERT_OK(sl_ds_range(0, 1LL << 40, 1, &r));
    ASSERT_OK(sl_ds_filter(r, pred_sleep, &us, &src));
    sl_dataset_set_label(src, "s/source");
    ASSERT_OK(sl_fn_custom("nothing", nothing, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(src, fn, 2, true, &m));
    sl_dataset_set_label(m, "s/map");
    ASSERT_OK(sl_ds_prefetch(m, 2, &p));
    sl_dataset_set_label(p, "s/prefetch");
    sl_stats_verdict v;
    char label[64];
    int k = verdict_of(p, 0.4, 0, &v, label, sizeof label);
    ASSERT(k >= 0);
    ASSERT_STREQ(label, "s/source");
    ASSERT_CONTAINS(v.summary, "bottleneck: op 's/source' (filter)");
    sl_dataset_unref(p);
    sl_dataset_unref(m);
    sl_dataset_unref(src);
    sl_dataset_unref(r);
    sl_fn_unref(fn);
}

TEST(test_verdict_slow_map) {
    sl_dataset *r, *m, *p;
    sl_fn *fn;
    ASSERT_OK(sl_ds_range(0, 1LL << 40, 1, &r));
    ASSERT_OK(sl_fn_custom("sleep_1ms", sleep_1ms, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(r, fn, 2, true, &m));
    sl_dataset_set_label(m, "m/slow_map");
    ASSERT_OK(sl_ds_prefetch(m, 2, &p));
    sl_dataset_set_label(p, "m/prefetch");
    sl_stats_verdict v;
    char label[64];
    int k = verdict_of(p, 0.4, 0, &v, label, sizeof label);
    ASSERT(k >= 0);
    ASSERT_STREQ(label, "m/slow_map");
    ASSERT_CONTAINS(v.summary, "bottleneck: op 'm/slow_map' (map)");
    ASSERT_CONTAINS(v.advice, "raise its parallelism (now 2");
    sl_dataset_unref(p);
    sl_dataset_unref(m);
    sl_dataset_unref(r);
    sl_fn_unref(fn);
}

TEST(test_verdict_slow_consumer) {
    sl_dataset *r, *m, *p;
    sl_fn *fn;
    ASSERT_OK(sl_ds_range(0, 1LL << 40, 1, &r));
    ASSERT_OK(sl_fn_custom("nothing", nothing, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(r, fn, 2, true, &m));
    ASSERT_OK(sl_ds_prefetch(m, 4, &p));
    sl_stats_verdict v;
    char label[64];
    int k = verdict_of(p, 0.5, 10000, &v, label, sizeof label); /* 10 ms a step: a loaded machine too */
    ASSERT_EQ(k, SL_VERDICT_CONSUMER);
    ASSERT_CONTAINS(v.summary, "the pipeline is not the bottleneck: input is ready, the consumer is slow");
    sl_dataset_unref(p);
    sl_dataset_unref(m);
    sl_dataset_unref(r);
    sl_fn_unref(fn);
}

TEST(test_verdict_none) {
    sl_stats st = {0};
    sl_stats_verdict v;
    ASSERT_EQ(sl_stats_bottleneck(&st, &v), SL_VERDICT_NONE);
}

/* The trace: written at close, parsed by Python's json module, every event checked. */
TEST(test_trace_json) {
    if (access("/usr/bin/python3", X_OK) != 0) SKIP("no /usr/bin/python3 to check the JSON with");
    sl_dataset *r, *m, *b, *p;
    sl_fn *fn;
    ASSERT_OK(sl_ds_range(0, 400, 1, &r));
    ASSERT_OK(sl_fn_custom("add_x", add_x, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(r, fn, 2, true, &m));
    sl_dataset_set_label(m, "tr/map");
    sl_batch_opts bo = sl_batch_opts_default(8);
    ASSERT_OK(sl_ds_prefetch(m, 2, &b));
    sl_dataset_set_label(b, "tr/prefetch");
    ASSERT_OK(sl_ds_batch(b, &bo, &p));
    sl_dataset_set_label(p, "tr/batch");
    char path[] = "/tmp/sluice-trace-XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    close(fd);
    sl_iter *it;
    ASSERT_OK(sl_iter_create(p, NULL, &it));
    ASSERT_OK(sl_iter_trace(it, path, 100000));
    ASSERT_EQ(sl_iter_trace(it, path, 10), SL_EINVAL);
    sl_element e;
    sl_element_init(&e);
    int n = 0;
    while (sl_iter_next(it, &e) == SL_OK) {
        n++;
        sl_element_clear(&e);
    }
    ASSERT_EQ(n, 50);
    sl_iter_close(it);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c '\n"
             "import json, sys\n"
             "d = json.load(open(sys.argv[1]))\n"
             "ev = d[\"traceEvents\"]\n"
             "x = [e for e in ev if e[\"ph\"] == \"X\"]\n"
             "m = [e for e in ev if e[\"ph\"] == \"M\" and e[\"name\"] == \"thread_name\"]\n"
             "for e in ev:\n"
             "    for k in (\"ph\", \"ts\", \"pid\", \"tid\", \"name\"): assert k in e, (k, e)\n"
             "    assert isinstance(e[\"ts\"], (int, float)) and isinstance(e[\"tid\"], int), e\n"
             "for e in x: assert isinstance(e[\"dur\"], (int, float)) and e[\"dur\"] >= 0, e\n"
             "names = set(e[\"name\"] for e in x)\n"
             "assert {\"tr/batch\", \"tr/prefetch\", \"tr/map\"} <= names, names\n"
             "assert sum(1 for e in x if e[\"name\"] == \"tr/batch\") == 51, \"batch next() calls\"\n"
             "w = sum(1 for e in x if e[\"name\"] == \"tr/map\" and e[\"cat\"] == \"work\")\n"
             "assert 0 < w <= 400, w  # workers may have started before tracing did\n"
             "tn = set(e[\"args\"][\"name\"] for e in m)\n"
             "assert {\"consumer\", \"tr/map worker 1\", \"tr/map worker 2\", \"tr/prefetch producer\"} <= tn, tn\n"
             "tids = set(e[\"tid\"] for e in m)\n"
             "assert all(e[\"tid\"] in tids for e in x)\n"
             "' %s",
             path);
    int rc = system(cmd);
    remove(path);
    ASSERT_EQ(rc, 0);
    /* writing on request, while running; tracing off: SL_EINVAL */
    ASSERT_OK(sl_iter_create(p, NULL, &it));
    ASSERT_EQ(sl_iter_trace_write(it, path), SL_EINVAL);
    ASSERT_OK(sl_iter_trace(it, NULL, 0));
    ASSERT_OK(sl_iter_next(it, &e));
    sl_element_clear(&e);
    ASSERT_OK(sl_iter_trace_write(it, path));
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c 'import json,sys; json.load(open(sys.argv[1]))' %s", path);
    ASSERT_EQ(system(cmd), 0);
    remove(path);
    sl_iter_close(it);
    sl_dataset_unref(p);
    sl_dataset_unref(b);
    sl_dataset_unref(m);
    sl_dataset_unref(r);
    sl_fn_unref(fn);
}

int main(void) {
    RUN(test_counters_exact);
    RUN(test_busy_excludes_input);
    RUN(test_verdict_slow_source);
    RUN(test_verdict_slow_map);
    RUN(test_verdict_slow_consumer);
    RUN(test_verdict_none);
    RUN(test_trace_json);
    TEST_MAIN_END();
}
