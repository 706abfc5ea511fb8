/* Benchmark: autotune against hand settings, in the same run, on three pipelines:
 *   jpeg:  the ImageNet-style pipeline of bench_pipeline (TFRecords of JPEGs -> shuffle ->
 *          parse_example | decode_jpeg | random_resized_crop 224 | flip | normalize ->
 *          batch 64 -> prefetch), repeated; its corpus is /tmp/sluice-bench/jpeg-2000-tfrecord
 *          (made by `tests/bench/run bench_pipeline`; skipped, saying so, when missing).
 *          Tunables: the map's parallelism and the prefetch buffer (its interleave reads in
 *          the caller's thread, parallel 0, as bench_pipeline has it, in every setting).
 *   parse: Fashion-MNIST-like tf.Examples (784 raw bytes + a label; written once to
 *          /tmp/sluice-bench/fashion-like) -> interleave (cycle 4, block 16) -> shuffle
 *          10000 -> parse_example | decode_raw | scale -> batch 128 -> prefetch, repeated.
 *          Tunables: interleave's and the map's parallelism, the prefetch buffer.
 *   fetch: the unbalanced one, where "every parallelism = cores" is wrong: the same records ->
 *          map(parse_example) (cheap) -> map(fetch) (each element waits FETCH_US for a remote
 *          read, as a map that reads blobs by key from object storage does, then checksums its
 *          784 bytes: little CPU, much waiting) -> map(decode_raw | scale) (a cheap tail) ->
 *          batch 32 -> prefetch, repeated. Tunables: the three maps' parallelism, the prefetch.
 * Grid: coordinate search from "every parallelism 1, prefetch 2": each tunable parallelism in
 * turn over 1..4 with the others at their best so far, then prefetch 1, 2, 4, 8 (the buffer
 * barely interacts with parallelism: it only absorbs jitter). Each grid point runs RUN_S
 * seconds, measured after WARM_S (the same for auto, whose tuner thus gets WARM_S to settle).
 * Then ROUNDS (5) rounds, each running in a rotating order: auto, the top 3 grid points, and
 * the constant (every parallelism = the CPU count, prefetch 2: what a user who sets
 * num_parallel_calls=cores everywhere gets). Medians of the rounds are compared: a grid
 * point's one measurement is noisy and the grid's max over many noisy runs is biased
 * upwards, so the best of the top 3 by median is "best"; alternating spreads the load other
 * processes put on the machine evenly. Printed per pipeline: every setting's median and
 * min-max, auto / best, auto / constant, and the time auto takes to come within 5% of its
 * final rate (median over the rounds: the first moment from which a 0.5 s window delivers
 * >= 0.95 x the rate of the run's last 40%).
 *
 * Usage: bench_autotune [RUN_S]   (default 3.0). BENCH_QUICK=1: a smoke run (2 s per
 * setting, 2 rounds, grid values 1, 2, 4).
 * Ends with RESULT bench_autotune ratio=R sluice=X anchor=Y unit=elements/s, R = auto /
 * best for the pipeline where that ratio is worst (X: its auto, Y: its best); the line
 * before it gives every pipeline's auto / best and auto / constant (targets: >= 0.95 on
 * every pipeline, auto / constant >= 1.2 on fetch). */
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sluice/crc32c.h"
#include "sluice/example.h"
#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "sluice/pool.h"
#include "sluice/stats.h"
#include "sluice/tfrecord.h"
#include "tests/bench/bench_fashion.h"

#define WORK "/tmp/sluice-bench"
#define JPEG_DIR WORK "/jpeg-2000-tfrecord"
#define PARSE_DIR WORK "/fashion-like"
#define WARM_S 0.5
#define ROUNDS 5
#define NPAR 3         /* tunable parallel ops at most */
#define FETCH_US 1000  /* the fetch pipeline's wait per element */

static double run_s = 3.0;
static int rounds = ROUNDS;
static bool quick;

static double now(void) { return (double)sl_now_ns() * 1e-9; }

typedef struct {
    int par[NPAR]; /* the pipeline's tunable parallel ops, in its order (SL_AUTO: tuned) */
    int prefetch;  /* SL_AUTO: tuned */
} setting;

/* The records of the files matching pat (listed in order; the list repeated forever when
 * repeat_files), interleaved with io, into *out (NULL on failure). */
static sl_status records(const char *pat, bool repeat_files, const sl_interleave_opts *io, sl_dataset **out) {
    const char *pats[1] = {pat};
    sl_dataset *files = NULL, *rf = NULL;
    *out = NULL;
    sl_status st = sl_ds_list_files(pats, 1, true, 1, &files);
    if (!st && repeat_files) st = sl_ds_repeat(files, SL_INFINITE, &rf);
    if (!st) st = sl_ds_interleave_tfrecord(rf ? rf : files, NULL, io, out);
    sl_dataset_unref(files);
    sl_dataset_unref(rf);
    return st;
}

/* in -> batch(size, drop_remainder) -> prefetch(prefetch), into *out (NULL on failure) */
static sl_status batch_prefetch(sl_dataset *in, int size, int prefetch, sl_dataset **out) {
    sl_dataset *batched = NULL;
    sl_batch_opts bo = sl_batch_opts_default(size);
    bo.drop_remainder = true;
    *out = NULL;
    sl_status st = sl_ds_batch(in, &bo, &batched);
    if (!st) st = sl_ds_prefetch(batched, prefetch, out);
    sl_dataset_unref(batched);
    return st;
}

/* the features of the Fashion-MNIST-like records */
static const sl_feature_spec FASHION_SPECS[2] = {
    {.name = "image", .dtype = SL_DT_BYTES},
    {.name = "label", .dtype = SL_DT_I64},
};

static sl_status build_jpeg(setting s, sl_dataset **out) {
    sl_dataset *recs = NULL, *shuf = NULL, *rep = NULL, *mapped = NULL, *pf = NULL;
    sl_fn *f[5] = {0}, *chain = NULL;
    sl_feature_spec specs[2] = {
        {.name = "image/encoded", .as = "image", .dtype = SL_DT_BYTES},
        {.name = "image/class/label", .as = "label", .dtype = SL_DT_I64},
    };
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    sl_status st;
    sl_interleave_opts io = sl_interleave_opts_default();
    io.cycle_length = 4;
    io.parallelism = 0;
    if ((st = records(JPEG_DIR "/train-*.tfrecord", false, &io, &recs))) goto done;
    if ((st = sl_ds_shuffle(recs, 1024, 2, true, &shuf))) goto done;
    if ((st = sl_ds_repeat(shuf, SL_INFINITE, &rep))) goto done;
    if ((st = sl_fn_parse_example("record", specs, 2, &f[0]))) goto done;
    if ((st = sl_fn_decode_jpeg("image", 3, &f[1]))) goto done;
    if ((st = sl_fn_random_resized_crop("image", 224, 224, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &f[2]))) goto done;
    if ((st = sl_fn_random_flip("image", true, false, 0.5, &f[3]))) goto done;
    if ((st = sl_fn_normalize("image", mean, std, 3, true, &f[4]))) goto done;
    if ((st = sl_fn_chain(f, 5, &chain))) goto done;
    if ((st = sl_ds_map(rep, chain, s.par[0], true, &mapped))) goto done;
    st = batch_prefetch(mapped, 64, s.prefetch, &pf);
done:
    sl_dataset_unref(recs);
    sl_dataset_unref(shuf);
    sl_dataset_unref(rep);
    sl_dataset_unref(mapped);
    for (int i = 0; i < 5; i++) sl_fn_unref(f[i]);
    sl_fn_unref(chain);
    *out = pf;
    return st;
}

static sl_status build_parse(setting s, sl_dataset **out) {
    sl_dataset *recs = NULL, *shuf = NULL, *mapped = NULL, *pf = NULL;
    sl_fn *f[3] = {0}, *chain = NULL;
    int64_t dims[3] = {28, 28, 1};
    sl_status st;
    sl_interleave_opts io = sl_interleave_opts_default();
    io.cycle_length = 4;
    io.block_length = 16;
    io.parallelism = s.par[0];
    if ((st = records(PARSE_DIR "/train-*.tfrecord", true, &io, &recs))) goto done;
    if ((st = sl_ds_shuffle(recs, 10000, 1, true, &shuf))) goto done;
    if ((st = sl_fn_parse_example("record", FASHION_SPECS, 2, &f[0]))) goto done;
    if ((st = sl_fn_decode_raw("image", SL_DT_U8, 3, dims, &f[1]))) goto done;
    if ((st = sl_fn_scale("image", 1.0 / 255, &f[2]))) goto done;
    if ((st = sl_fn_chain(f, 3, &chain))) goto done;
    if ((st = sl_ds_map(shuf, chain, s.par[1], true, &mapped))) goto done;
    st = batch_prefetch(mapped, 128, s.prefetch, &pf);
done:
    sl_dataset_unref(recs);
    sl_dataset_unref(shuf);
    sl_dataset_unref(mapped);
    for (int i = 0; i < 3; i++) sl_fn_unref(f[i]);
    sl_fn_unref(chain);
    *out = pf;
    return st;
}

/* Fashion-MNIST-like records: 8 shards x 7500 Examples of 784 pseudo-random bytes. */
static int make_parse_corpus(void) {
    char p[256];
    snprintf(p, sizeof p, PARSE_DIR "/train-00007-of-00008.tfrecord");
    if (access(p, R_OK) == 0) return 0;
    mkdir(WORK, 0755);
    mkdir(PARSE_DIR, 0755);
    sl_exb *b;
    if (sl_exb_new(&b)) return -1;
    uint8_t img[784];
    uint64_t x = 88172645463325252ull;
    for (int s = 0; s < 8; s++) {
        snprintf(p, sizeof p, PARSE_DIR "/train-%05d-of-00008.tfrecord", s);
        sl_tfr_writer *w;
        if (sl_tfr_writer_open(p, NULL, &w)) return -1;
        for (int i = 0; i < 7500; i++) {
            for (int k = 0; k < 784; k++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                img[k] = (uint8_t)x;
            }
            int64_t label = (int64_t)(x % 10);
            sl_bytes v = {img, sizeof img};
            sl_exb_reset(b);
            sl_exb_bytes(b, "image", &v, 1);
            sl_exb_int64s(b, "label", &label, 1);
            uint8_t *ser;
            size_t len;
            if (sl_exb_serialize(b, &ser, &len) || sl_tfr_writer_write(w, ser, len)) return -1;
            free(ser);
        }
        if (sl_tfr_writer_close(w)) return -1;
    }
    sl_exb_free(b);
    return 0;
}

/* fetch: wait FETCH_US (a remote read's latency; a sleep uses no CPU, as a blocked read
 * does), then checksum the image bytes into a new "sum" component */
static sl_status fetch_apply(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx, (void)call;
    struct timespec ts = {0, FETCH_US * 1000L};
    nanosleep(&ts, NULL);
    int i = sl_element_find(e, "image");
    if (i < 0) return sl_err(SL_EINVAL, "fetch: no image component");
    const sl_bytes *v = e->t[i].data; /* parse_example's bytes feature: one view */
    if (e->t[i].dtype != SL_DT_BYTES || sl_tensor_numel(&e->t[i]) < 1)
        return sl_err(SL_EINVAL, "fetch: image is not a bytes feature");
    uint32_t c = 0;
    for (int k = 0; k < 4; k++) c = sl_crc32c(c, v[0].ptr, v[0].len);
    (void)c;
    return SL_OK;
}

static sl_status build_fetch(setting s, sl_dataset **out) {
    sl_dataset *recs = NULL, *m1 = NULL, *m2 = NULL, *m3 = NULL, *pf = NULL;
    sl_fn *parse = NULL, *fetch = NULL, *f[2] = {0}, *tail = NULL;
    int64_t dims[3] = {28, 28, 1};
    sl_status st;
    sl_interleave_opts io = sl_interleave_opts_default();
    io.cycle_length = 4;
    io.block_length = 16;
    io.parallelism = 0;
    if ((st = records(PARSE_DIR "/train-*.tfrecord", true, &io, &recs))) goto done;
    if ((st = sl_fn_parse_example("record", FASHION_SPECS, 2, &parse))) goto done;
    if ((st = sl_fn_custom("fetch", fetch_apply, NULL, NULL, &fetch))) goto done;
    if ((st = sl_fn_decode_raw("image", SL_DT_U8, 3, dims, &f[0]))) goto done;
    if ((st = sl_fn_scale("image", 1.0 / 255, &f[1]))) goto done;
    if ((st = sl_fn_chain(f, 2, &tail))) goto done;
    if ((st = sl_ds_map(recs, parse, s.par[0], true, &m1))) goto done;
    if ((st = sl_ds_map(m1, fetch, s.par[1], true, &m2))) goto done;
    if ((st = sl_ds_map(m2, tail, s.par[2], true, &m3))) goto done;
    st = batch_prefetch(m3, 32, s.prefetch, &pf);
done:
    sl_dataset_unref(recs);
    sl_dataset_unref(m1);
    sl_dataset_unref(m2);
    sl_dataset_unref(m3);
    sl_fn_unref(parse);
    sl_fn_unref(fetch);
    sl_fn_unref(f[0]);
    sl_fn_unref(f[1]);
    sl_fn_unref(tail);
    *out = pf;
    return st;
}

typedef sl_status (*builder)(setting s, sl_dataset **out);

typedef struct {
    const char *name;
    builder build;
    int npar;                /* tunable parallel ops */
    const char *par_names[NPAR];
} pipeline;

#define TL_MAX 200000
static double tl_t[TL_MAX];  /* the auto run's timeline: time of each batch, elements so far */
static long tl_n[TL_MAX];
static int tl_len;

/* Elements (images / examples) per second after the warm-up; -1 on error. The timeline of
 * the run goes to tl_*; *chosen (if not NULL) gets what autotune chose, as text. */
static double measure(const pipeline *p, setting s, char *chosen, size_t cap) {
    sl_dataset *ds;
    if (p->build(s, &ds)) {
        fprintf(stderr, "bench_autotune: build: %s\n", sl_errmsg());
        return -1;
    }
    sl_iter *it;
    if (sl_iter_create(ds, NULL, &it)) {
        sl_dataset_unref(ds);
        return -1;
    }
    sl_element e;
    sl_element_init(&e);
    double t0 = now(), tw = 0;
    long n = 0, all = 0;
    tl_len = 0;
    for (;;) {
        if (sl_iter_next(it, &e) != SL_OK) {
            fprintf(stderr, "bench_autotune: next: %s\n", sl_errmsg());
            break;
        }
        double t = now();
        all += e.t[0].dims[0];
        if (tl_len < TL_MAX) {
            tl_t[tl_len] = t - t0;
            tl_n[tl_len++] = all;
        }
        if (tw == 0 && t - t0 >= WARM_S) {
            tw = t;
            n = 0;
        } else if (tw) {
            n += e.t[0].dims[0];
        }
        sl_element_clear(&e);
        if (t - t0 >= run_s) break;
    }
    double rate = tw ? n / (now() - tw) : -1;
    if (chosen) {
        sl_stats *st;
        chosen[0] = 0;
        if (!sl_iter_stats(it, &st)) {
            size_t len = 0;
            for (int i = 0; i < st->n && len < cap; i++)
                if (st->ops[i].tuned)
                    len += (size_t)snprintf(chosen + len, cap - len, "%s%s=%d", len ? " " : "", st->ops[i].op,
                                            st->ops[i].parallelism > 0 ? st->ops[i].parallelism : st->ops[i].buffer);
            sl_stats_free(st);
        }
    }
    sl_iter_close(it);
    sl_dataset_unref(ds);
    return rate;
}

/* From the timeline: seconds until a 0.5 s window first delivers >= 0.95 x the rate of the
 * run's last 40%; -1 if never */
static double converge_time(void) {
    if (tl_len < 4) return -1;
    double end = tl_t[tl_len - 1], from = 0.6 * end;
    int i0 = 0;
    while (i0 < tl_len - 1 && tl_t[i0] < from) i0++;
    if (end - tl_t[i0] <= 0) return -1;
    double final = (double)(tl_n[tl_len - 1] - tl_n[i0]) / (end - tl_t[i0]);
    const double win = 0.5;
    int j = 0;
    for (double t = 0; t + win <= end; t += 0.02) {
        int a = 0;
        while (a < tl_len && tl_t[a] < t) a++;
        if (j < a) j = a;
        while (j < tl_len - 1 && tl_t[j] < t + win) j++;
        long before = a > 0 ? tl_n[a - 1] : 0;
        if ((double)(tl_n[j] - before) / (tl_t[j] - t) >= 0.95 * final) return t;
    }
    return -1;
}

static void label(const pipeline *p, setting s, char *out, size_t cap) {
    size_t len = 0;
    for (int i = 0; i < p->npar; i++) {
        if (s.par[i] == SL_AUTO) len += (size_t)snprintf(out + len, cap - len, "%s=auto ", p->par_names[i]);
        else len += (size_t)snprintf(out + len, cap - len, "%s=%d ", p->par_names[i], s.par[i]);
    }
    if (s.prefetch == SL_AUTO) snprintf(out + len, cap - len, "prefetch=auto");
    else snprintf(out + len, cap - len, "prefetch=%d", s.prefetch);
}

static double median(const double *v, int n, double *lo, double *hi) {
    double w[16];
    memcpy(w, v, (size_t)n * sizeof *v);
    double m = bench_median(w, n); /* sorts w */
    *lo = w[0];
    *hi = w[n - 1];
    return m;
}

static bool same(const pipeline *p, setting a, setting b) {
    for (int i = 0; i < p->npar; i++)
        if (a.par[i] != b.par[i]) return false;
    return a.prefetch == b.prefetch;
}

typedef struct {
    setting s;
    double rate;
} point;

typedef struct {
    double best, autor, constant, conv;
} outcome;

static int by_rate(const void *a, const void *b) {
    double x = ((const point *)a)->rate, y = ((const point *)b)->rate;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Grid (coordinate search), then ROUNDS rotating rounds of auto, the top 3 and the constant. */
static void bench(const pipeline *p, outcome *o) {
    printf("%s pipeline (%.1f s per setting, measured after %.1f s):\n", p->name, run_s, WARM_S);
    point grid[64];
    int ng = 0;
    setting cur = {{1, 1, 1}, 2};
    const int vals_full[4] = {1, 2, 3, 4}, vals_quick[3] = {1, 2, 4};
    const int *vals = quick ? vals_quick : vals_full;
    int nv = quick ? 3 : 4;
    char lab[160];
    double curr = -1;
    for (int op = 0; op <= p->npar; op++) {
        const int pfs[4] = {1, 2, 4, 8};
        int nvals = op < p->npar ? nv : 4;
        setting bestk = cur;
        double bestr = -1;
        for (int v = 0; v < nvals; v++) {
            setting s = cur;
            if (op < p->npar) s.par[op] = vals[v];
            else s.prefetch = pfs[v];
            double r = -1;
            for (int g = 0; g < ng; g++)
                if (same(p, grid[g].s, s)) r = grid[g].rate;
            if (r < 0) {
                r = measure(p, s, NULL, 0);
                label(p, s, lab, sizeof lab);
                printf("  grid  %-52s %10.1f elements/s\n", lab, r);
                fflush(stdout);
                if (ng < 64) grid[ng++] = (point){s, r};
            }
            if (r > bestr) {
                bestr = r;
                bestk = s;
            }
        }
        cur = bestk;
        curr = bestr;
    }
    (void)curr;
    qsort(grid, (size_t)ng, sizeof *grid, by_rate);
    /* the contenders: auto, the top 3, the constant (if not among them) */
    setting cand[5];
    int nc = 0, top = ng < 3 ? ng : 3, ci = -1;
    setting a = {{SL_AUTO, SL_AUTO, SL_AUTO}, SL_AUTO};
    cand[nc++] = a;
    for (int i = 0; i < top; i++) cand[nc++] = grid[i].s;
    setting k = {{sl_cpu_count(), sl_cpu_count(), sl_cpu_count()}, 2};
    for (int i = 1; i < nc; i++)
        if (same(p, cand[i], k)) ci = i;
    if (ci < 0) {
        ci = nc;
        cand[nc++] = k;
    }
    double r[5][16], conv[16];
    char chosen[256];
    for (int round = 0; round < rounds; round++) {
        for (int j = 0; j < nc; j++) {
            int c = (j + round) % nc;
            r[c][round] = measure(p, cand[c], c == 0 ? chosen : NULL, sizeof chosen);
            if (c == 0) conv[round] = converge_time();
            label(p, cand[c], lab, sizeof lab);
            printf("  round %d %-9s %-44s %10.1f elements/s%s%s\n", round + 1,
                   c == 0 ? "auto" : c == ci ? "constant" : "top", lab, r[c][round], c == 0 ? "  chose: " : "",
                   c == 0 ? chosen : "");
            fflush(stdout);
        }
    }
    double med[5], lo, hi;
    int best = 1;
    for (int c = 0; c < nc; c++) {
        med[c] = median(r[c], rounds, &lo, &hi);
        label(p, cand[c], lab, sizeof lab);
        printf("  %-9s %-44s median %10.1f (min %.1f, max %.1f)\n", c == 0 ? "auto" : c == ci ? "constant" : "top",
               lab, med[c], lo, hi);
        if (c > 0 && c <= top && med[c] > med[best]) best = c;
    }
    if (ci <= top && med[ci] > med[best]) best = ci;
    o->autor = med[0];
    o->best = med[best];
    o->constant = med[ci];
    o->conv = median(conv, rounds, &lo, &hi);
    label(p, cand[best], lab, sizeof lab);
    printf("  %s: auto / best (%s) = %.3f, auto / constant = %.3f; auto within 5%% of its final rate after %.2f s "
           "(median; min %.2f, max %.2f)\n\n",
           p->name, lab, o->autor / o->best, o->autor / o->constant, o->conv, lo, hi);
    fflush(stdout);
}

int main(int argc, char **argv) {
    const char *q = getenv("BENCH_QUICK");
    quick = q && *q && strcmp(q, "0");
    if (quick) {
        run_s = 2.0;
        rounds = 2;
    }
    if (argc > 1) run_s = atof(argv[1]);
    if (run_s < WARM_S + 0.5) run_s = WARM_S + 0.5;
    bool have_jpeg = access(JPEG_DIR "/train-00000-of-00008.tfrecord", R_OK) == 0;
    if (make_parse_corpus()) {
        fprintf(stderr, "bench_autotune: writing %s: %s\n", PARSE_DIR, sl_errmsg());
        return 1;
    }
    printf("bench_autotune%s: %d CPUs; autotune's budget is all of them; %d rounds\n\n", quick ? " (quick)" : "",
           sl_cpu_count(), rounds);
    const pipeline pipes[3] = {
        {"jpeg", build_jpeg, 1, {"map"}},
        {"parse", build_parse, 2, {"interleave", "map"}},
        {"fetch", build_fetch, 3, {"parse", "fetch", "tail"}},
    };
    outcome o[3];
    double worst = INFINITY;
    int w = -1;
    for (int i = 0; i < 3; i++) {
        if (i == 0 && !have_jpeg) {
            printf("jpeg pipeline: skipped: no corpus in %s (run `tests/bench/run bench_pipeline` once)\n\n", JPEG_DIR);
            continue;
        }
        bench(&pipes[i], &o[i]);
        double rr = o[i].autor / o[i].best;
        if (w < 0 || rr < worst) {
            worst = rr;
            w = i;
        }
    }
    printf("auto / best:");
    for (int i = have_jpeg ? 0 : 1; i < 3; i++) printf(" %s %.3f", pipes[i].name, o[i].autor / o[i].best);
    printf(" (target >= 0.95); auto / constant:");
    for (int i = have_jpeg ? 0 : 1; i < 3; i++) printf(" %s %.3f", pipes[i].name, o[i].autor / o[i].constant);
    printf(" (target on fetch >= 1.2)\n");
    printf("RESULT bench_autotune ratio=%.3f sluice=%.1f anchor=%.1f unit=elements/s\n", worst, o[w].autor, o[w].best);
    return 0;
}
