/* pipeline/stats.c and pipeline/trace.c: exact counters (elements, bytes, the graph's
 * parent links), busy time that excludes the input's time, the JSON round trip, the
 * bottleneck verdict on three constructed pipelines (a slow source, a slow map function, a
 * slow consumer), "no op is saturated" when the busiest op is under 50% busy, a trace that
 * counts what it dropped (sl_iter_trace_info), and a trace file that parses as trace-event
 * JSON. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "sluice/stats.h"
#include "helper_files.h"
#include "helper_iter.h"
#include "test.h"

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {} /* the whole time, even when a signal interrupts it */
}

/* adds "x": float32[256] */
static sl_status add_x(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx;
    (void)call;
    return sl_test_set_f32(e, "x", 256, 0);
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
    int n = sl_test_drain(it);
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
    ASSERT_CONTAINS(sl_errmsg(), "byte 35: not a sluice-stats file: expected a value, found the end of the file");
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

/* verdict_of on IN -> map(the custom function APPLY named NAME, 2 lanes) -> prefetch(BUF),
 * the map and the prefetch labelled MAP_LABEL and PF_LABEL unless NULL; IN NULL: a range
 * 0, 1, ... Releases IN. -102 when the graph is not built. */
static int verdict_of_map(sl_dataset *in, const char *name, sl_fn_apply apply, const char *map_label, int buf,
                          const char *pf_label, double seconds, long consumer_us, sl_stats_verdict *v, char *label,
                          size_t cap) {
    sl_dataset *m = NULL, *p = NULL;
    sl_fn *fn = NULL;
    int k = -102;
    if ((in || !sl_ds_range(0, 1LL << 40, 1, &in)) && !sl_fn_custom(name, apply, NULL, NULL, &fn) &&
        !sl_ds_map(in, fn, 2, true, &m) && !sl_ds_prefetch(m, buf, &p)) {
        if (map_label) sl_dataset_set_label(m, map_label);
        if (pf_label) sl_dataset_set_label(p, pf_label);
        k = verdict_of(p, seconds, consumer_us, v, label, cap);
    }
    sl_dataset_unref(p);
    sl_dataset_unref(m);
    sl_dataset_unref(in);
    sl_fn_unref(fn);
    return k;
}

TEST(test_verdict_slow_source) {
    /* the source: a range whose elements each take 1 ms to come (a filter that sleeps right
     * after it, labelled as the source); then a cheap parallel map and a prefetch */
    static long us = 1000;
    sl_dataset *r, *src;
    ASSERT_OK(sl_ds_range(0, 1LL << 40, 1, &r));
    ASSERT_OK(sl_ds_filter(r, pred_sleep, &us, &src));
    sl_dataset_set_label(src, "s/source");
    sl_stats_verdict v;
    char label[64];
    int k = verdict_of_map(src, "nothing", nothing, "s/map", 2, "s/prefetch", 0.4, 0, &v, label, sizeof label);
    sl_dataset_unref(r);
    ASSERT(k >= 0);
    ASSERT_STREQ(label, "s/source");
    ASSERT_CONTAINS(v.summary, "bottleneck: op 's/source' (filter)");
}

TEST(test_verdict_slow_map) {
    sl_stats_verdict v;
    char label[64];
    int k = verdict_of_map(NULL, "sleep_1ms", sleep_1ms, "m/slow_map", 2, "m/prefetch", 0.4, 0, &v, label,
                           sizeof label);
    ASSERT(k >= 0);
    ASSERT_STREQ(label, "m/slow_map");
    ASSERT_CONTAINS(v.summary, "bottleneck: op 'm/slow_map' (map)");
    ASSERT_CONTAINS(v.advice, "raise its parallelism (now 2");
}

TEST(test_verdict_slow_consumer) {
    sl_stats_verdict v;
    char label[64];
    /* 10 ms a step: a loaded machine too */
    int k = verdict_of_map(NULL, "nothing", nothing, NULL, 4, NULL, 0.5, 10000, &v, label, sizeof label);
    ASSERT_EQ(k, SL_VERDICT_CONSUMER);
    ASSERT_CONTAINS(v.summary, "the pipeline is not the bottleneck: input is ready, the consumer is slow");
}

TEST(test_verdict_none) {
    sl_stats st = {0};
    sl_stats_verdict v;
    ASSERT_EQ(sl_stats_bottleneck(&st, &v), SL_VERDICT_NONE);
}

/* Busiest op ~21% busy while the consumer waits 80% of the time: nothing is saturated, and
 * the verdict says so instead of naming the 21% op "the bottleneck". Built by hand so the
 * shares are exact on a loaded machine. At 60% the same graph names the op, as before. */
TEST(test_verdict_unsaturated) {
    sl_op_stat ops[3] = {{0}};
    const char *labels[3] = {"u/prefetch", "u/map", "u/source"}, *kinds[3] = {"prefetch", "map", "tfrecord"};
    for (int i = 0; i < 3; i++) {
        ops[i].id = i;
        ops[i].parent = i - 1;
        snprintf(ops[i].label, sizeof ops[i].label, "%s", labels[i]);
        snprintf(ops[i].op, sizeof ops[i].op, "%s", kinds[i]);
        ops[i].elements = 1000;
    }
    ops[0].busy_s = 0.25;       /* 5% of 5 s */
    ops[1].parallelism = 4;
    ops[1].busy_s = 4.2;        /* 21% of 4 lanes x 5 s */
    ops[2].busy_s = 0.5;        /* 10% */
    sl_stats st = {.wall_s = 5, .next_s = 4, .elements = 1000, .cpu_budget = 4, .n = 3, .ops = ops};
    sl_stats_verdict v;
    ASSERT_EQ(sl_stats_bottleneck(&st, &v), SL_VERDICT_UNSATURATED);
    ASSERT_STREQ(v.summary, "no op is saturated");
    ASSERT_CONTAINS(v.evidence, "the busiest op, 'u/map' (map), is busy 21% of its lanes' time (under 50%), yet "
                                "the consumer waited inside next() 80% of the time (200.0 elements/s)");
    ASSERT_CONTAINS(v.evidence, "limited by latency");
    ASSERT_CONTAINS(v.advice, "add a prefetch");
    /* the source's producer sits on a full buffer 70% of the time: the hand-offs above it */
    ops[2].blocked_s = 3.5;
    ASSERT_EQ(sl_stats_bottleneck(&st, &v), SL_VERDICT_UNSATURATED);
    ASSERT_STREQ(v.summary, "no op is saturated");
    ASSERT_CONTAINS(v.evidence, "while 'u/source' is blocked on full buffers 70% of the time: the time goes to "
                                "handing elements over one at a time between the ops above it");
    ops[2].blocked_s = 0;
    /* the consumer waits 30% of the time, works 70%: it is the larger limit, and it is said */
    st.next_s = 1.5;
    ASSERT_EQ(sl_stats_bottleneck(&st, &v), SL_VERDICT_UNSATURATED);
    ASSERT_STREQ(v.summary, "no op is saturated");
    ASSERT_CONTAINS(v.evidence, "the consumer waited inside next() 30% of the time and spent 70% on its own "
                                "work between calls (200.0 elements/s): the consumer limits the throughput "
                                "more than any op");
    st.next_s = 4;
    /* just saturated: the op is named, with the old wording */
    ops[1].busy_s = 12.0;       /* 60% */
    ASSERT_EQ(sl_stats_bottleneck(&st, &v), 1);
    ASSERT_STREQ(v.summary, "bottleneck: op 'u/map' (map)");
    ASSERT_CONTAINS(v.evidence, "busy 60% of its 4 threads' time");
    /* at the threshold exactly: saturated */
    ops[1].busy_s = 10.0;
    ASSERT_EQ(sl_stats_bottleneck(&st, &v), 1);
    /* the consumer not waiting still wins over both */
    ops[1].busy_s = 4.2;
    st.next_s = 0.5;
    ASSERT_EQ(sl_stats_bottleneck(&st, &v), SL_VERDICT_CONSUMER);
}

/* A trace that fills its buffer: the exact number kept and dropped, and the time covered. */
TEST(test_trace_info_dropped) {
    sl_dataset *r;
    ASSERT_OK(sl_ds_range(0, 100, 1, &r));
    sl_iter *it;
    ASSERT_OK(sl_iter_create(r, NULL, &it));
    sl_trace_info ti;
    ASSERT_EQ(sl_iter_trace_info(it, &ti), SL_EINVAL); /* tracing off */
    ASSERT_OK(sl_iter_trace(it, NULL, 10));
    sl_element e;
    sl_element_init(&e);
    for (int i = 0; i < 4; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        sl_element_clear(&e);
    }
    ASSERT_OK(sl_iter_trace_info(it, &ti));
    ASSERT_EQ(ti.max_events, 10);
    ASSERT_EQ(ti.recorded, 4);
    ASSERT_EQ(ti.dropped, 0);
    ASSERT(ti.covered_s == ti.wall_s);
    for (int i = 0; i < 26; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        sl_element_clear(&e);
    }
    sleep_us(20000);
    ASSERT_OK(sl_iter_trace_info(it, &ti));
    ASSERT_EQ(ti.recorded, 10);
    ASSERT_EQ(ti.dropped, 20); /* one event per next() of the one op: 30 - 10 */
    ASSERT(ti.covered_s > 0);
    ASSERT(ti.covered_s + 0.015 < ti.wall_s); /* the trace ends before the run does */
    sl_iter_close(it);
    sl_dataset_unref(r);
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
    /* p holds its own references to what it is built on */
    sl_dataset_unref(b);
    sl_dataset_unref(m);
    sl_dataset_unref(r);
    sl_fn_unref(fn);
    char path[] = "/tmp/sluice-trace-XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    close(fd);
    sl_iter *it;
    ASSERT_OK(sl_iter_create(p, NULL, &it));
    ASSERT_OK(sl_iter_trace(it, path, 100000));
    ASSERT_EQ(sl_iter_trace(it, path, 10), SL_EINVAL);
    int n = sl_test_drain(it);
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
    sl_element e;
    sl_element_init(&e);
    ASSERT_OK(sl_iter_next(it, &e));
    sl_element_clear(&e);
    ASSERT_OK(sl_iter_trace_write(it, path));
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c 'import json,sys; json.load(open(sys.argv[1]))' %s", path);
    ASSERT_EQ(system(cmd), 0);
    remove(path);
    sl_iter_close(it);
    sl_dataset_unref(p);
}

/* In a child (so a regression that reads /dev/zero without end cannot take the machine's
 * memory: the child's address space is capped, where the sanitizer allows it): loading
 * /dev/zero is refused at once as a device. */
static int load_dev_zero_in_child(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
        struct rlimit rl = {1ull << 31, 1ull << 31};
        setrlimit(RLIMIT_AS, &rl);
#endif
        alarm(20);
        sl_stats *st = (sl_stats *)1;
        sl_status s = sl_stats_load("/dev/zero", &st);
        int ok = s == SL_EINVAL && st == NULL &&
                 strstr(sl_errmsg(), "stats file '/dev/zero': is a character device, not a regular file");
        if (!ok) printf("  /dev/zero: status %d: %s\n", s, sl_errmsg());
        fflush(stdout);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* sl_stats_load on what is not a stats file of sane size: each refused at once with its
 * code. Before, /dev/zero was read until memory ran out, a FIFO blocked open(), a directory
 * gave a read error, and any size was read whole. */
TEST(test_load_refuses_files) {
    ASSERT_EQ(load_dev_zero_in_child(), 0);
    sl_stats *st = (sl_stats *)1;
    ASSERT_EQ(sl_stats_load("/dev/null", &st), SL_EINVAL); /* a device that ends is still a device */
    ASSERT(st == NULL);
    char dir[] = "/tmp/sluice-statsf-XXXXXX", fifo[80], big[80], small[80], want[200];
    ASSERT(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/fifo.json", dir);
    snprintf(big, sizeof big, "%s/big.json", dir);
    snprintf(small, sizeof small, "%s/small.json", dir);
    ASSERT_EQ(mkfifo(fifo, 0600), 0);
    alarm(20); /* a regression blocks in open(): fail instead of hanging */
    ASSERT_EQ(sl_stats_load(fifo, &st), SL_EINVAL);
    alarm(0);
    snprintf(want, sizeof want, "stats file '%s': is a FIFO (named pipe), not a regular file", fifo);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT_EQ(sl_stats_load(dir, &st), SL_EINVAL);
    snprintf(want, sizeof want, "stats file '%s': is a directory, not a regular file", dir);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT_EQ(sl_test_sparse_file(big, (long long)SL_STATS_MAX_BYTES + 1), 0);
    ASSERT_EQ(sl_stats_load(big, &st), SL_ERANGE);
    snprintf(want, sizeof want, "stats file '%s': is 67108865 bytes, more than the limit of 67108864", big);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT_CONTAINS(sl_errmsg(), "sluice-stats --max-bytes N");
    ASSERT(st == NULL);
    /* the limit is the caller's: a valid file one byte over it is refused, at it read */
    const char *ok_json = "{\"format\": \"sluice-stats\", \"version\": 1, \"wall_s\": 2, \"elements\": 4, "
                          "\"ops\": [{\"label\": \"a\", \"op\": \"map\", \"parent\": -1, \"elements\": 4}]}";
    sl_test_write_text(small, ok_json);
    ASSERT_EQ(sl_stats_load_max(small, strlen(ok_json) - 1, &st), SL_ERANGE);
    ASSERT_OK(sl_stats_load_max(small, strlen(ok_json), &st));
    ASSERT_EQ(st->n, 1);
    ASSERT_EQ(st->ops[0].elements, 4);
    ASSERT_STREQ(st->ops[0].label, "a");
    sl_stats_free(st);
    unlink(small);
    unlink(big);
    unlink(fifo);
    rmdir(dir);
}

/* Hostile JSON: bounded memory, no undefined conversions, exact codes. */
TEST(test_load_hostile_json) {
    char path[] = "/tmp/sluice-statsj-XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    close(fd);
    sl_stats *st = (sl_stats *)1;
    /* 2^20 + 1 zeros: a value each, over 16x the file's 2 MiB */
    size_t n = (1u << 20) + 1, len = 2 * n + 1;
    char *wide = malloc(len + 1);
    ASSERT(wide);
    wide[0] = '[';
    for (size_t i = 0; i < n; i++) memcpy(wide + 1 + 2 * i, "0,", 2);
    wide[len - 1] = ']';
    wide[len] = 0;
    sl_test_write_text(path, wide);
    free(wide);
    ASSERT_EQ(sl_stats_load(path, &st), SL_ECORRUPT);
    ASSERT(st == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "its JSON would take more than 16 times the file's size in memory");
    /* more ops than any graph has */
    size_t nops = 65537;
    char *many = malloc(nops * 3 + 200);
    ASSERT(many);
    size_t k = (size_t)sprintf(many, "{\"format\": \"sluice-stats\", \"version\": 1, \"ops\": [");
    for (size_t i = 0; i < nops; i++) k += (size_t)sprintf(many + k, i ? ",{}" : "{}");
    sprintf(many + k, "]}");
    sl_test_write_text(path, many);
    free(many);
    ASSERT_EQ(sl_stats_load(path, &st), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "not a sluice-stats file: 65537 ops, more than 65536");
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"{\"format\": \"sluice-stats\", \"version\": 1, \"ops\": []} x", "byte 52: not a sluice-stats file: unexpected 'x' after the value"},
        {"{\"format\": \"sluice-stats\", \"version\": 1, \"wall_s\": nan, \"ops\": []}", "byte 51: not a sluice-stats file: expected a value, found 'n'"},
        {"{\"format\": \"sluice-stats\", \"version\": 1, \"wall_s\": -inf, \"ops\": []}", "byte 52: not a sluice-stats file: a digit expected in a number"},
        {"{\"format\": \"sluice-stats\", \"version\": 1, \"wall_s\": 1e999, \"ops\": []}", "byte 51: not a sluice-stats file: number out of range"},
        {"{\"format\": \"sluice-stats\", \"version\": 1, \"ops\": [{\"label\": \"a\\u0000b\"}]}", "byte 61: not a sluice-stats file: \\u0000 is not allowed in a string"},
        {"{\"format\": \"sluice-stats\", \"version\": 1, \"ops\": [{\"label\": \"a\\u00zz\"}]}", "byte 65: not a sluice-stats file: bad hex digit in \\u escape"},
        {"{\"format\": \"sluice-\tstats\", \"version\": 1, \"ops\": []}", "byte 19: not a sluice-stats file: control character 0x09 in a string (escape it)"},
        {"{\"format\": \"sluice-stats\", \"version\": 1, \"ops\": [\"abc", "byte 49: not a sluice-stats file: unterminated string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sl_test_write_text(path, bad[i].json);
        if (sl_stats_load(path, &st) != SL_ECORRUPT || st != NULL) {
            FAILF("case %zu: not SL_ECORRUPT: %s", i, sl_errmsg());
            return;
        }
        ASSERT_CONTAINS(sl_errmsg(), bad[i].msg);
    }
    /* out-of-range numbers are clamped (a float-to-int conversion out of range is undefined),
     * a parent that is not an earlier op becomes -1, escapes decode */
    sl_test_write_text(path, "{\"format\": \"sluice-stats\", \"version\": 1, \"cpu_budget\": -1e300, \"elements\": 1e300, "
                     "\"ops\": [{\"label\": \"caf\\u00e9\\n\", \"parent\": 1e300, \"parallelism\": 1e300, "
                     "\"buffer\": -5e20, \"history\": [[0.5, 1e300, 2, 1], [1, 2], \"x\", [1, 2, 3, 4]]}, "
                     "{\"parent\": 0}, {\"parent\": -7}]}");
    ASSERT_OK(sl_stats_load(path, &st));
    ASSERT_EQ(st->cpu_budget, 0);
    ASSERT_EQ(st->elements, INT64_MAX);
    ASSERT_EQ(st->n, 3);
    ASSERT_STREQ(st->ops[0].label, "caf\xc3\xa9\n");
    ASSERT_EQ(st->ops[0].parent, -1);
    ASSERT_EQ(st->ops[0].parallelism, INT32_MAX);
    ASSERT_EQ(st->ops[0].buffer, INT32_MIN);
    ASSERT_EQ(st->ops[0].nhist, 2);
    ASSERT_EQ(st->ops[0].hist[0].parallelism, INT32_MAX);
    ASSERT_EQ(st->ops[0].hist[1].buffer, 3);
    ASSERT_EQ(st->ops[1].parent, 0);
    ASSERT_EQ(st->ops[2].parent, -1);
    sl_stats_verdict v;
    sl_stats_bottleneck(st, &v); /* no crash on such numbers */
    /* a label that is not UTF-8 (a name cut inside a character) is written as it is, and
     * read back so */
    snprintf(st->ops[0].label, sizeof st->ops[0].label, "caf\xc3");
    ASSERT_OK(sl_stats_save(st, path));
    sl_stats *back;
    ASSERT_OK(sl_stats_load(path, &back));
    ASSERT_STREQ(back->ops[0].label, "caf\xc3");
    sl_stats_free(back);
    sl_stats_free(st);
    remove(path);
}

/* sl_stats_save checks every step and never replaces what is not a regular file. */
TEST(test_save_refuses) {
    sl_stats st = {0};
    sl_op_stat op = {0};
    snprintf(op.label, sizeof op.label, "a");
    snprintf(op.op, sizeof op.op, "map");
    st.n = 1;
    st.ops = &op;
    char dir[] = "/tmp/sluice-statss-XXXXXX", fifo[80], want[200];
    ASSERT(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/fifo.json", dir);
    ASSERT_EQ(mkfifo(fifo, 0600), 0);
    alarm(20);
    ASSERT_EQ(sl_stats_save(&st, fifo), SL_EINVAL);
    alarm(0);
    snprintf(want, sizeof want, "stats file '%s': is a FIFO (named pipe), not a regular file", fifo);
    ASSERT_CONTAINS(sl_errmsg(), want);
    struct stat sb;
    ASSERT_EQ(stat(fifo, &sb), 0);
    ASSERT(S_ISFIFO(sb.st_mode)); /* before, rename() replaced it with the file */
    ASSERT_EQ(sl_stats_save(&st, dir), SL_EINVAL);
    char nodir[100];
    snprintf(nodir, sizeof nodir, "%s/no/s.json", dir);
    ASSERT_EQ(sl_stats_save(&st, nodir), SL_ENOTFOUND);
    unlink(fifo);
    rmdir(dir);
}

/* The trace file is opened by sl_iter_trace (refused at once when it cannot be written)
 * and sl_iter_trace_end reports the write's outcome. */
TEST(test_trace_end) {
    sl_dataset *r;
    ASSERT_OK(sl_ds_range(0, 100, 1, &r));
    sl_iter *it;
    ASSERT_OK(sl_iter_create(r, NULL, &it));
    ASSERT_EQ(sl_iter_trace(it, "/dev/full", 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "trace file '/dev/full': is a character device, not a regular file");
    ASSERT_EQ(sl_iter_trace(it, "/nonexistent/dir/t.json", 0), SL_ENOTFOUND);
    ASSERT_EQ(sl_iter_trace_end(it), SL_EINVAL); /* tracing is off: the failures left nothing on */
    char path[] = "/tmp/sluice-tend-XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    close(fd);
    ASSERT_OK(sl_iter_trace(it, path, 0));
    sl_element e;
    sl_element_init(&e);
    for (int i = 0; i < 5; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        sl_element_clear(&e);
    }
    ASSERT_OK(sl_iter_trace_end(it));
    ASSERT_EQ(sl_iter_trace_end(it), SL_EINVAL); /* written once */
    ASSERT_CONTAINS(sl_errmsg(), "written already");
    char cmd[300];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
                              "assert sum(e[\"ph\"] == \"X\" for e in d[\"traceEvents\"]) == 5' %s", path);
    ASSERT_EQ(system(cmd), 0);
    ASSERT_OK(sl_iter_next(it, &e));
    sl_element_clear(&e);
    sl_iter_close(it); /* writes nothing more: the file still has the 5 events */
    ASSERT_EQ(system(cmd), 0);
    remove(path);
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_counters_exact);
    RUN(test_busy_excludes_input);
    RUN(test_verdict_slow_source);
    RUN(test_verdict_slow_map);
    RUN(test_verdict_slow_consumer);
    RUN(test_verdict_none);
    RUN(test_verdict_unsaturated);
    RUN(test_trace_info_dropped);
    RUN(test_trace_json);
    RUN(test_load_refuses_files);
    RUN(test_load_hostile_json);
    RUN(test_save_refuses);
    RUN(test_trace_end);
    TEST_MAIN_END();
}
