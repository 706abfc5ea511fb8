/* Benchmark: autotune against a grid of hand settings, in the same run, on two pipelines:
 *   jpeg:  the ImageNet-style pipeline of bench_pipeline (TFRecords of JPEGs -> shuffle ->
 *          parse_example | decode_jpeg | random_resized_crop 224 | flip | normalize ->
 *          batch 64 -> prefetch), repeated; its corpus is /tmp/sluice-bench/jpeg-2000-tfrecord
 *          (made by `tests/bench/run bench_pipeline`). Tunables: the map(_batch)'s
 *          parallelism and the prefetch buffer (its interleave reads in the caller's thread,
 *          parallel 0, as bench_pipeline has it, in every setting).
 *   parse: Fashion-MNIST-like tf.Examples (784 raw bytes + a label; written once to
 *          /tmp/sluice-bench/fashion-like) -> interleave (cycle 4, block 16) -> shuffle
 *          10000 -> parse_example | decode_raw | scale -> batch 128 -> prefetch, repeated.
 *          Tunables: interleave's and the map's parallelism, the prefetch buffer.
 * The grid is "parallelism 1..4 for each parallel op, prefetch 1..8", pruned by coordinate
 * search: every parallelism combination at prefetch 2, then prefetch 1, 4, 8 at the best
 * combination (the prefetch buffer barely interacts with parallelism: it only absorbs
 * jitter). Each setting runs RUN_S seconds and is measured after WARM_S seconds (the same
 * for auto, whose tuner thus gets WARM_S to settle). Then auto and the best grid point run
 * alternately, REPS times each, and the ratio is median(auto) / median(best): the grid's
 * max over many noisy runs is biased upwards, and alternating spreads the load other
 * processes put on the machine evenly over both.
 *
 * Usage: bench_autotune [RUN_S]   (default 2.5)
 * Ends with RESULT bench_autotune ratio=R sluice=X anchor=Y unit=elements/s, R = auto /
 * best grid point for the pipeline where that ratio is worse (X: its auto, Y: its best). */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sluice/example.h"
#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "sluice/pool.h"
#include "sluice/stats.h"
#include "sluice/tfrecord.h"

#define WORK "/tmp/sluice-bench"
#define JPEG_DIR WORK "/jpeg-2000-tfrecord"
#define PARSE_DIR WORK "/fashion-like"
#define WARM_S 0.5
#define REPS 3

static double run_s = 2.5;

static double now(void) { return (double)sl_now_ns() * 1e-9; }

typedef struct {
    int par_il;   /* interleave parallelism (parse pipeline), SL_AUTO */
    int par_map;  /* map parallelism, SL_AUTO */
    int prefetch; /* SL_AUTO */
} setting;

static sl_status build_jpeg(setting s, sl_dataset **out) {
    const char *pats[1] = {JPEG_DIR "/train-*.tfrecord"};
    sl_dataset *files = NULL, *recs = NULL, *shuf = NULL, *rep = NULL, *mapped = NULL, *batched = NULL, *pf = NULL;
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
    if ((st = sl_ds_list_files(pats, 1, true, 1, &files))) goto done;
    if ((st = sl_ds_interleave_tfrecord(files, NULL, &io, &recs))) goto done;
    if ((st = sl_ds_shuffle(recs, 1024, 2, true, &shuf))) goto done;
    if ((st = sl_ds_repeat(shuf, SL_INFINITE, &rep))) goto done;
    if ((st = sl_fn_parse_example("record", specs, 2, &f[0]))) goto done;
    if ((st = sl_fn_decode_jpeg("image", 3, &f[1]))) goto done;
    if ((st = sl_fn_random_resized_crop("image", 224, 224, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &f[2]))) goto done;
    if ((st = sl_fn_random_flip("image", true, false, 0.5, &f[3]))) goto done;
    if ((st = sl_fn_normalize("image", mean, std, 3, true, &f[4]))) goto done;
    if ((st = sl_fn_chain(f, 5, &chain))) goto done;
    if ((st = sl_ds_map(rep, chain, s.par_map, true, &mapped))) goto done;
    sl_batch_opts bo = sl_batch_opts_default(64);
    bo.drop_remainder = true;
    if ((st = sl_ds_batch(mapped, &bo, &batched))) goto done;
    st = sl_ds_prefetch(batched, s.prefetch, &pf);
done:
    sl_dataset_unref(files);
    sl_dataset_unref(recs);
    sl_dataset_unref(shuf);
    sl_dataset_unref(rep);
    sl_dataset_unref(mapped);
    sl_dataset_unref(batched);
    for (int i = 0; i < 5; i++) sl_fn_unref(f[i]);
    sl_fn_unref(chain);
    *out = pf;
    return st;
}

static sl_status build_parse(setting s, sl_dataset **out) {
    const char *pats[1] = {PARSE_DIR "/train-*.tfrecord"};
    sl_dataset *files = NULL, *rf = NULL, *recs = NULL, *shuf = NULL, *mapped = NULL, *batched = NULL, *pf = NULL;
    sl_fn *f[3] = {0}, *chain = NULL;
    sl_feature_spec specs[2] = {
        {.name = "image", .dtype = SL_DT_BYTES},
        {.name = "label", .dtype = SL_DT_I64},
    };
    int64_t dims[3] = {28, 28, 1};
    sl_status st;
    sl_interleave_opts io = sl_interleave_opts_default();
    io.cycle_length = 4;
    io.block_length = 16;
    io.parallelism = s.par_il;
    if ((st = sl_ds_list_files(pats, 1, true, 1, &files))) goto done;
    if ((st = sl_ds_repeat(files, SL_INFINITE, &rf))) goto done;
    if ((st = sl_ds_interleave_tfrecord(rf, NULL, &io, &recs))) goto done;
    if ((st = sl_ds_shuffle(recs, 10000, 1, true, &shuf))) goto done;
    if ((st = sl_fn_parse_example("record", specs, 2, &f[0]))) goto done;
    if ((st = sl_fn_decode_raw("image", SL_DT_U8, 3, dims, &f[1]))) goto done;
    if ((st = sl_fn_scale("image", 1.0 / 255, &f[2]))) goto done;
    if ((st = sl_fn_chain(f, 3, &chain))) goto done;
    if ((st = sl_ds_map(shuf, chain, s.par_map, true, &mapped))) goto done;
    sl_batch_opts bo = sl_batch_opts_default(128);
    bo.drop_remainder = true;
    if ((st = sl_ds_batch(mapped, &bo, &batched))) goto done;
    st = sl_ds_prefetch(batched, s.prefetch, &pf);
done:
    sl_dataset_unref(files);
    sl_dataset_unref(rf);
    sl_dataset_unref(recs);
    sl_dataset_unref(shuf);
    sl_dataset_unref(mapped);
    sl_dataset_unref(batched);
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

typedef sl_status (*builder)(setting s, sl_dataset **out);

/* Elements (images / examples) per second after the warm-up; -1 on error. *chosen gets
 * the parallelism autotune chose, as text. */
static double measure(builder build, setting s, char *chosen, size_t cap) {
    sl_dataset *ds;
    if (build(s, &ds)) {
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
    long n = 0;
    for (;;) {
        if (sl_iter_next(it, &e) != SL_OK) {
            fprintf(stderr, "bench_autotune: next: %s\n", sl_errmsg());
            break;
        }
        double t = now();
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

static void show(const char *name, setting s, double r, const char *extra) {
    char il[16], mp[16], pf[16];
    snprintf(il, sizeof il, s.par_il == SL_AUTO ? "auto" : "%d", s.par_il);
    snprintf(mp, sizeof mp, s.par_map == SL_AUTO ? "auto" : "%d", s.par_map);
    snprintf(pf, sizeof pf, s.prefetch == SL_AUTO ? "auto" : "%d", s.prefetch);
    printf("  %-5s interleave=%-4s map=%-4s prefetch=%-4s %10.1f elements/s%s%s\n", name, il, mp, pf, r,
           extra ? "  " : "", extra ? extra : "");
    fflush(stdout);
}

static double median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Grid then auto for one pipeline; *best_out and *auto_out get the median rates. */
static void bench(const char *name, builder build, bool tune_il, double *best_out, double *auto_out) {
    printf("%s pipeline (%.1f s per setting, measured after %.1f s):\n", name, run_s, WARM_S);
    setting best = {tune_il ? 1 : 0, 1, 2};
    double bestr = -1;
    for (int pi = tune_il ? 1 : 0; pi <= (tune_il ? 4 : 0); pi++)
        for (int pm = 1; pm <= 4; pm++) {
            setting s = {pi, pm, 2};
            double r = measure(build, s, NULL, 0);
            show("grid", s, r, NULL);
            if (r > bestr) {
                bestr = r;
                best = s;
            }
        }
    int pfs[3] = {1, 4, 8};
    setting base = best;
    for (int k = 0; k < 3; k++) {
        setting s = base;
        s.prefetch = pfs[k];
        double r = measure(build, s, NULL, 0);
        show("grid", s, r, NULL);
        if (r > bestr) {
            bestr = r;
            best = s;
        }
    }
    char chosen[256];
    setting a = {tune_il ? SL_AUTO : 0, SL_AUTO, SL_AUTO};
    double ar[REPS], br[REPS];
    for (int r = 0; r < REPS; r++) {
        ar[r] = measure(build, a, chosen, sizeof chosen);
        show("auto", a, ar[r], chosen);
        br[r] = measure(build, best, NULL, 0);
        show("best", best, br[r], "(again)");
    }
    *best_out = median(br, REPS);
    *auto_out = median(ar, REPS);
    printf("  %s: auto %.1f vs best grid point %.1f elements/s (medians of %d alternating runs): ratio %.3f\n\n",
           name, *auto_out, *best_out, REPS, *auto_out / *best_out);
}

int main(int argc, char **argv) {
    if (argc > 1) run_s = atof(argv[1]);
    if (run_s < WARM_S + 0.5) run_s = WARM_S + 0.5;
    if (access(JPEG_DIR "/train-00000-of-00008.tfrecord", R_OK) != 0) {
        fprintf(stderr, "bench_autotune: no JPEG corpus in %s: run `tests/bench/run bench_pipeline` once\n", JPEG_DIR);
        return 1;
    }
    if (make_parse_corpus()) {
        fprintf(stderr, "bench_autotune: writing %s: %s\n", PARSE_DIR, sl_errmsg());
        return 1;
    }
    printf("bench_autotune: %d CPUs; autotune's budget is all of them\n\n", sl_cpu_count());
    double jb, ja, pb, pa;
    bench("jpeg", build_jpeg, false, &jb, &ja);
    bench("parse", build_parse, true, &pb, &pa);
    double rj = ja / jb, rp = pa / pb;
    bool jworse = rj < rp;
    printf("jpeg ratio %.3f, parse ratio %.3f (target >= 0.95)\n", rj, rp);
    printf("RESULT bench_autotune ratio=%.3f sluice=%.1f anchor=%.1f unit=elements/s\n", jworse ? rj : rp,
           jworse ? ja : pa, jworse ? jb : pb);
    return 0;
}
