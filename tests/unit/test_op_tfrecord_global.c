/* pipeline/ops/tfrecord_global.c (`shuffle global`): one permutation over every record of
 * several files, replicas taking interleaved positions. Checked: every record exactly once
 * per epoch for 1-4 replicas, balanced shards, epochs reshuffled (or not), starting at any
 * element with nothing replayed, a run that changes its replica count between batches
 * (2 -> 3 -> 2) still reading each record once, position uniformity by a chi-square test
 * (against a buffer shuffle over an interleave, which fails it), corrupt records, and the
 * config statement. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/from_config.h"
#include "sluice/config.h"
#include "sluice/pipeline.h"
#include "sluice/tfrecord.h"
#include "sluice/util.h"
#include "helper_files.h"
#include "helper_iter.h"
#include "test.h"

#define NREC 10000
static const int PER_FILE[3] = {3000, 5000, 2000};
static char dir[256], paths[3][320];

/* Three files of 3000, 5000 and 2000 records; record g holds "rec-G" (g global, 0..9999). */
static void write_files(void) {
    ASSERT(sl_test_mkdtemp(dir, sizeof dir, "sl-global"));
    int g = 0;
    for (int f = 0; f < 3; f++) {
        snprintf(paths[f], sizeof paths[f], "%s/part-%d.tfrecord", dir, f);
        sl_tfr_writer *w;
        ASSERT_OK(sl_tfr_writer_open(paths[f], NULL, &w));
        for (int i = 0; i < PER_FILE[f]; i++, g++) {
            char rec[32];
            int n = snprintf(rec, sizeof rec, "rec-%d", g);
            ASSERT_OK(sl_tfr_writer_write(w, rec, (size_t)n));
        }
        ASSERT_OK(sl_tfr_writer_close(w));
    }
}

static sl_dataset *global_ds(int64_t R, int64_t r, uint64_t seed, bool reshuffle) {
    const char *ps[3] = {paths[0], paths[1], paths[2]};
    sl_global_opts g = sl_global_opts_default();
    g.num_shards = R;
    g.shard_index = r;
    g.seed = seed;
    g.reshuffle_each_epoch = reshuffle;
    g.index.cache_dir = ""; /* in memory: the tests here do not look at index files */
    sl_dataset *ds = NULL;
    if (sl_ds_tfrecord_global(ps, 3, NULL, &g, &ds)) printf("  %s\n", sl_errmsg());
    return ds;
}

/* The record id an element holds, -1 if it is not "rec-N". */
static int rec_id(const sl_element *e) {
    int c = sl_element_find(e, "record");
    if (c < 0) return -1;
    const sl_bytes *b = e->t[c].data;
    char buf[32];
    if (b->len < 5 || b->len >= sizeof buf) return -1;
    memcpy(buf, b->ptr, b->len);
    buf[b->len] = 0;
    return strncmp(buf, "rec-", 4) ? -1 : atoi(buf + 4);
}

/* Ids of ds from `start` with stream seed `seed` into out (up to cap); returns the count. */
static int ids(sl_dataset *ds, uint64_t seed, int64_t start, int *out, int cap, int64_t *replayed) {
    sl_iter_opts o = sl_iter_opts_default();
    o.seed = seed;
    sl_iter *it;
    if (sl_iter_create_at(ds, &o, start, &it)) return -1;
    if (replayed) *replayed = sl_iter_replayed(it);
    sl_element e;
    sl_element_init(&e);
    int n = 0;
    while (n < cap && sl_iter_next(it, &e) == SL_OK) {
        out[n++] = rec_id(&e);
        sl_element_clear(&e);
    }
    sl_iter_close(it);
    return n;
}

TEST(test_every_record_once_per_epoch) {
    static int got[NREC], seen[NREC];
    for (int64_t R = 1; R <= 4; R++) {
        memset(seen, 0, sizeof seen);
        int total = 0;
        for (int64_t r = 0; r < R; r++) {
            sl_dataset *ds = global_ds(R, r, 5, true);
            ASSERT(ds);
            int n = ids(ds, 11, 0, got, NREC, NULL);
            ASSERT_EQ(n, (NREC - r + R - 1) / R); /* balanced to one record */
            ASSERT_EQ(sl_dataset_cardinality(ds), n);
            for (int i = 0; i < n; i++) {
                ASSERT(got[i] >= 0 && got[i] < NREC);
                seen[got[i]]++;
            }
            total += n;
            sl_dataset_unref(ds);
        }
        ASSERT_EQ(total, NREC);
        for (int i = 0; i < NREC; i++) ASSERT_EQ(seen[i], 1);
    }
}

TEST(test_epochs_reshuffle) {
    static int a[NREC], b[NREC], c[NREC];
    sl_dataset *ds = global_ds(1, 0, 5, true), *fixed = global_ds(1, 0, 5, false);
    ASSERT(ds && fixed);
    ASSERT_EQ(ids(ds, 1, 0, a, NREC, NULL), NREC);
    ASSERT_EQ(ids(ds, 2, 0, b, NREC, NULL), NREC);
    ASSERT_EQ(ids(ds, 1, 0, c, NREC, NULL), NREC);
    int same = 0, sorted = 0;
    for (int i = 0; i < NREC; i++) {
        same += a[i] == b[i];
        sorted += a[i] == i;
        ASSERT_EQ(a[i], c[i]); /* the same stream seed, the same order */
    }
    ASSERT(same < 20);
    ASSERT(sorted < 20);
    ASSERT_EQ(ids(fixed, 1, 0, a, NREC, NULL), NREC);
    ASSERT_EQ(ids(fixed, 2, 0, b, NREC, NULL), NREC);
    ASSERT_MEMEQ(a, b, sizeof a); /* reshuffle off: one order for every epoch */
    sl_dataset_unref(ds);
    sl_dataset_unref(fixed);
}

TEST(test_start_anywhere) {
    static int full[NREC], part[100];
    sl_dataset *ds = global_ds(3, 2, 8, true);
    ASSERT(ds);
    int n = ids(ds, 4, 0, full, NREC, NULL);
    uint64_t rs = 1;
    for (int k = 0; k < 30; k++) {
        int64_t p = (int64_t)(sl_splitmix64(&rs) % (uint64_t)(n + 3)), rep = -1;
        int m = ids(ds, 4, p, part, 100, &rep);
        ASSERT_EQ(rep, 0);
        ASSERT_EQ(m, p >= n ? 0 : n - p < 100 ? n - p : 100);
        for (int i = 0; i < m; i++) ASSERT_EQ(part[i], full[p + i]);
    }
    sl_dataset_unref(ds);
}

/* A global batch of 12: 2 replicas of 6, then 3 of 4, then 2 of 6 again, switching at batch
 * boundaries, each replica starting its pipeline (global | batch) at the batch the run is at:
 * every record of the epoch read once (the last incomplete global batch dropped). */
TEST(test_elastic_replica_counts) {
    static int seen[NREC];
    memset(seen, 0, sizeof seen);
    const int G = 12, plan[][2] = {{2, 100}, {3, 250}, {2, -1}}; /* replicas, batches (-1: to the end) */
    int64_t batch = 0, read = 0;
    for (int phase = 0; phase < 3; phase++) {
        int R = plan[phase][0], steps = plan[phase][1];
        int64_t done = -1;
        for (int r = 0; r < R; r++) {
            sl_dataset *g = global_ds(R, r, 3, true), *b;
            ASSERT(g);
            sl_batch_opts bo = sl_batch_opts_default(G / R);
            bo.drop_remainder = true;
            ASSERT_OK(sl_ds_batch(g, &bo, &b));
            sl_iter_opts o = sl_iter_opts_default();
            o.seed = 21; /* the epoch's: the same for every replica count */
            sl_iter *it;
            ASSERT_OK(sl_iter_create_at(b, &o, batch, &it));
            ASSERT_EQ(sl_iter_replayed(it), 0);
            sl_element e;
            sl_element_init(&e);
            int64_t k = 0;
            while ((steps < 0 || k < steps) && sl_iter_next(it, &e) == SL_OK) {
                int c = sl_element_find(&e, "record");
                ASSERT(c >= 0);
                const sl_bytes *v = e.t[c].data;
                for (int64_t i = 0; i < e.t[c].dims[0]; i++) {
                    char buf[32];
                    memcpy(buf, v[i].ptr, v[i].len);
                    buf[v[i].len] = 0;
                    int id = atoi(buf + 4);
                    ASSERT(id >= 0 && id < NREC);
                    seen[id]++;
                    read++;
                }
                sl_element_clear(&e);
                k++;
            }
            sl_iter_close(it);
            if (done < 0 || k < done) done = k; /* replicas stop together at the fewest */
            sl_dataset_unref(b);
            sl_dataset_unref(g);
        }
        batch += done;
    }
    ASSERT_EQ(batch, NREC / G);
    ASSERT_EQ(read, (int64_t)(NREC / G) * G);
    int twice = 0, missed = 0;
    for (int i = 0; i < NREC; i++) {
        twice += seen[i] > 1;
        missed += seen[i] == 0;
    }
    ASSERT_EQ(twice, 0);
    ASSERT_EQ(missed, NREC % G);
}

/* The chi-square statistic of every record's position over `epochs` epochs (10 bins), and
 * its p-value (upper tail; Wilson-Hilferty for the 9 * NREC degrees of freedom). */
static double position_chi2(sl_dataset *ds, int epochs, double *p) {
    enum { BINS = 10 };
    int *hist = calloc((size_t)NREC * BINS, sizeof *hist), *order = malloc(NREC * sizeof *order);
    if (!hist || !order) return -1;
    for (int ep = 0; ep < epochs; ep++) {
        int n = ids(ds, 1000 + (uint64_t)ep, 0, order, NREC, NULL);
        if (n != NREC) return -1;
        for (int pos = 0; pos < NREC; pos++) hist[order[pos] * BINS + pos * BINS / NREC]++;
    }
    double chi = 0, want = (double)epochs / BINS;
    for (int i = 0; i < NREC * BINS; i++) chi += (hist[i] - want) * (hist[i] - want) / want;
    double k = (double)NREC * (BINS - 1), z = (cbrt(chi / k) - (1 - 2 / (9 * k))) / sqrt(2 / (9 * k));
    *p = 0.5 * erfc(z / sqrt(2));
    free(hist);
    free(order);
    return chi;
}

TEST(test_positions_uniform_chi_square) {
    sl_dataset *g = global_ds(1, 0, 1, true);
    ASSERT(g);
    double p_global = 0, p_buffer = 0;
    double chi_g = position_chi2(g, 200, &p_global);
    ASSERT(chi_g > 0);
    /* what the example configs did before: a buffer shuffle over an interleave of the files */
    const char *ps[3] = {paths[0], paths[1], paths[2]};
    sl_dataset *lf, *il, *sh;
    ASSERT_OK(sl_ds_list_files(ps, 3, false, 0, &lf));
    sl_interleave_opts io = sl_interleave_opts_default();
    io.cycle_length = 3;
    io.block_length = 16;
    io.parallelism = 0;
    ASSERT_OK(sl_ds_interleave_tfrecord(lf, NULL, &io, &il));
    ASSERT_OK(sl_ds_shuffle(il, 1000, 1, true, &sh));
    double chi_b = position_chi2(sh, 200, &p_buffer);
    ASSERT(chi_b > 0);
    printf("  200 epochs of %d records, 10 position bins, %d degrees of freedom: shuffle global chi2 %.0f "
           "(p %.3g); buffer 1000 over interleave chi2 %.0f (p %.3g)\n", NREC, NREC * 9, chi_g, p_global, chi_b,
           p_buffer);
    ASSERT(p_global > 0.01);
    ASSERT(p_buffer < 0.01);
    sl_dataset_unref(sh);
    sl_dataset_unref(il);
    sl_dataset_unref(lf);
    sl_dataset_unref(g);
}

TEST(test_corrupt_record) {
    char d2[256], p2[320];
    ASSERT(sl_test_tmp_file(d2, sizeof d2, "sl-global-bad", p2, sizeof p2, "bad.tfrecord"));
    sl_tfr_writer *w;
    ASSERT_OK(sl_tfr_writer_open(p2, NULL, &w));
    for (int i = 0; i < 10; i++) ASSERT_OK(sl_tfr_writer_write(w, "rec-00000", 9));
    ASSERT_OK(sl_tfr_writer_close(w));
    size_t n;
    uint8_t *bytes = sl_test_read_file(p2, &n);
    ASSERT(bytes && n == 10 * (12 + 9 + 4));
    bytes[3 * 25 + 12 + 4] ^= 1; /* record 3's data: its CRC no longer matches */
    ASSERT_EQ(sl_test_write_file(p2, bytes, n), 0);
    free(bytes);
    const char *ps[1] = {p2};
    for (int skip = 0; skip < 2; skip++) {
        sl_tfr_read_opts ro = sl_tfr_read_opts_default();
        ro.skip_corrupt = skip;
        sl_global_opts g = sl_global_opts_default();
        g.index.cache_dir = "";
        sl_dataset *ds;
        ASSERT_OK(sl_ds_tfrecord_global(ps, 1, &ro, &g, &ds));
        sl_iter *it;
        sl_element e;
        ASSERT_OK(sl_test_open(ds, &it, &e));
        int ok = 0, bad = 0;
        sl_status s;
        while ((s = sl_iter_next(it, &e)) != SL_END) {
            if (s == SL_OK) {
                ok++;
                sl_element_clear(&e);
            } else {
                ASSERT_EQ(s, SL_ECORRUPT);
                ASSERT_CONTAINS(sl_errmsg(), "bad.tfrecord");
                ASSERT_CONTAINS(sl_errmsg(), "byte 75");
                bad++;
            }
        }
        ASSERT_EQ(ok, 9);
        ASSERT_EQ(bad, skip ? 0 : 1);
        ASSERT_EQ(sl_iter_errors_ignored(it), skip ? 1 : 0);
        sl_iter_close(it);
        sl_dataset_unref(ds);
    }
    sl_test_rm_rf(d2);
}

/* The config statement: right after files, sharding by itself. */
TEST(test_config_statement) {
    char cfgp[400], text[1400];
    snprintf(cfgp, sizeof cfgp, "%s/job.sl", dir);
    snprintf(text, sizeof text,
             "pipeline g {\n  files \"part-*.tfrecord\"\n  shuffle global seed=3 index_dir=\"idx\"\n  batch 10 drop_remainder\n}\n"
             "pipeline with_shard {\n  files \"part-*.tfrecord\"\n  shard auto\n  shuffle global\n}\n"
             "pipeline late {\n  files \"part-*.tfrecord\"\n  map parse_example(x: int64)\n  shuffle global\n}\n"
             "pipeline range {\n  range 0 10\n  shuffle global\n}\n");
    ASSERT_EQ(sl_test_write_text(cfgp, text), 0);
    sl_cfg *cfg;
    ASSERT_OK(sl_cfg_parse_file(cfgp, &cfg));
    sl_pipeline_env env = sl_pipeline_env_default();
    env.num_shards = 2;
    env.shard_index = 1;
    env.batch_divisor = 2;
    sl_dataset *ds;
    ASSERT_OK(sl_pipeline_from_config(cfg, "g", &env, &ds));
    ASSERT_EQ(sl_dataset_cardinality(ds), NREC / 2 / 5); /* 5000 records, batches of 10 / 2 */
    sl_dataset_unref(ds);
    char idx[300];
    snprintf(idx, sizeof idx, "%s/idx", dir);
    ASSERT_EQ(sl_test_count_files(idx), 3); /* one index per file in index_dir */
    ASSERT_EQ(sl_pipeline_from_config(cfg, "with_shard", &env, &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "job.sl:9:3:");
    ASSERT_CONTAINS(sl_errmsg(), "shuffle global with shard (line 8)");
    ASSERT_EQ(sl_pipeline_from_config(cfg, "late", &env, &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "shuffle global must come right after files");
    ASSERT_EQ(sl_pipeline_from_config(cfg, "range", &env, &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "needs a files source");
    sl_cfg_free(cfg);
}

int main(void) {
    write_files();
    RUN(test_every_record_once_per_epoch);
    RUN(test_epochs_reshuffle);
    RUN(test_start_anywhere);
    RUN(test_elastic_replica_counts);
    RUN(test_positions_uniform_chi_square);
    RUN(test_corrupt_record);
    RUN(test_config_statement);
    sl_test_rm_rf(dir);
    TEST_MAIN_END();
}
