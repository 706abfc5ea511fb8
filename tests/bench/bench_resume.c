/* Benchmark: the time a resumed run waits for its first batch, ImageNet-style JPEG pipeline
 * at batch B (default 4,000, batch 256: a million images into the epoch), two ways:
 *   state   `files | shuffle global | map decode_jpeg | random_resized_crop 224 |
 *           random_flip | normalize | batch 256`, restored from its iterator state
 *           (sl_iter_save's bytes, printed with their size): the source starts at the
 *           batch's records, nothing before them is read or decoded;
 *   replay  what the example configs cost before their ops could seek: `files | shard |
 *           interleave | shuffle 10000 | the same map | batch 256`, made at 0 and every
 *           batch before B produced and dropped (what sluice-train did on --resume, and
 *           still does below an op that cannot start part-way).
 * Printed beside them, not in the ratio: that replay pipeline started at B as it is now
 * (sl_iter_create_at: the interleave replays its cycle on the files' lengths, the buffer
 * shuffle its draws, and only the records in its buffer are read again, sl_iter_refilled).
 * Both are timed from building the pipeline from its config text (record indexes cached, as
 * on a second run) to holding the first batch. The replay side is measured at a tenth of B
 * (and at B with --full: minutes on two cores) and scaled linearly to B: its cost is one
 * decode per image before B, so it grows linearly; the printed line says which it is.
 * Rounds alternate the two; medians and spread are printed.
 *
 * The data: synthetic 96x72 JPEG photos (gradients and noise, quality 85) in 16 TFRecord
 * shards under /tmp/sluice-bench/resume (made once, about 3 GB; B x 256 + 10% records).
 *
 * Usage: bench_resume [--full] [--batch B] [--rounds N] [DIR]
 * Ends with
 *   RESULT bench_resume ratio=R sluice=STATE_S anchor=REPLAY_S unit=s state_bytes=N
 * (ratio = state / replay: lower is better). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "sluice/config.h"
#include "sluice/example.h"
#include "sluice/file.h"
#include "sluice/from_config.h"
#include "sluice/jpeg.h"
#include "sluice/pipeline.h"
#include "sluice/tfrecord.h"
#include "sluice/util.h"

#define SHARDS 16
#define BATCH 256
#define NIMG 512

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int die(const char *what) {
    fprintf(stderr, "bench_resume: %s: %s\n", what, sl_errmsg());
    return 1;
}

/* The shards, written unless a complete set is there (a marker file says so). */
static int make_data(const char *dir, int64_t records) {
    char marker[600];
    snprintf(marker, sizeof marker, "%s/complete-%lld", dir, (long long)records);
    struct stat st;
    if (stat(marker, &st) == 0) return 0;
    if (sl_mkdirs(dir, "data folder")) return die("mkdir");
    fprintf(stderr, "bench_resume: writing %lld records of synthetic JPEGs to %s (once)\n", (long long)records, dir);
    uint8_t *jpg[NIMG];
    size_t jlen[NIMG];
    uint8_t *px = malloc(96 * 72 * 3);
    uint64_t rs = 7;
    for (int i = 0; i < NIMG; i++) {
        for (int y = 0; y < 72; y++)
            for (int x = 0; x < 96; x++)
                for (int c = 0; c < 3; c++) {
                    int v = (x * (c + 1 + i % 5) * 2 + y * 3 + (int)(sl_splitmix64(&rs) % 24)) & 255;
                    px[(y * 96 + x) * 3 + c] = (uint8_t)v;
                }
        if (sl_jpeg_encode(px, 96, 72, 3, 85, &jpg[i], &jlen[i])) return die("encode");
    }
    free(px);
    sl_exb *ex;
    if (sl_exb_new(&ex)) return die("example");
    for (int s = 0; s < SHARDS; s++) {
        char path[600];
        snprintf(path, sizeof path, "%s/train-%05d-of-%05d.tfrecord", dir, s, SHARDS);
        sl_tfr_writer *w;
        if (sl_tfr_writer_open(path, NULL, &w)) return die("open shard");
        for (int64_t g = s; g < records; g += SHARDS) {
            int i = (int)(g % NIMG);
            sl_bytes img = {.ptr = jpg[i], .len = jlen[i]};
            int64_t label = g % 1000;
            uint8_t *rec;
            size_t n;
            sl_exb_reset(ex);
            if (sl_exb_bytes(ex, "image/encoded", &img, 1) || sl_exb_int64s(ex, "image/class/label", &label, 1) ||
                sl_exb_serialize(ex, &rec, &n))
                return die("example");
            sl_status ws = sl_tfr_writer_write(w, rec, n);
            free(rec);
            if (ws) return die("write");
        }
        if (sl_tfr_writer_close(w)) return die("close shard");
    }
    sl_exb_free(ex);
    for (int i = 0; i < NIMG; i++) free(jpg[i]);
    FILE *f = fopen(marker, "w");
    if (f) fclose(f);
    return 0;
}

static const char MAP[] =
    "    map parse_example(image/encoded: bytes(as=image), image/class/label: int64(as=label))\n"
    "        | decode_jpeg(image, channels=3) | random_resized_crop(image, 224) | random_flip(image)\n"
    "        | normalize(image, mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])  parallel=auto\n"
    "    batch 256 drop_remainder\n";

static sl_dataset *build(const char *dir, bool global) {
    char text[4096], path[700];
    snprintf(text, sizeof text,
             "pipeline train {\n    files \"%s/train-*.tfrecord\"\n%s%s}\n", dir,
             global ? "    shuffle global\n" : "    shard auto\n    interleave cycle=16 block=1 parallel=auto\n"
                                             "    shuffle 10000\n",
             MAP);
    snprintf(path, sizeof path, "%s/bench.sl", dir);
    sl_cfg *cfg;
    if (sl_cfg_parse(text, strlen(text), path, &cfg)) return NULL;
    sl_dataset *ds = NULL;
    sl_pipeline_from_config(cfg, "train", NULL, &ds);
    sl_cfg_free(cfg);
    return ds;
}

static int64_t last_refilled; /* sl_iter_refilled of first_batch's last iterator */

/* Seconds from building the pipeline to holding batch `at`'s elements; *replayed, the
 * batches produced and dropped (drop: made at 0 and the batches before `at` dropped here);
 * the state of the iterator (restored when state_in). */
static double first_batch(const char *dir, bool global, int64_t at, const uint8_t *state_in, int64_t *replayed,
                          uint8_t *state_out, size_t *state_len, bool drop) {
    double t0 = now_s();
    sl_dataset *ds = build(dir, global);
    if (!ds) return -1;
    sl_iter_opts o = sl_iter_opts_default();
    o.seed = 42;
    sl_iter *it;
    sl_status s = state_in ? sl_iter_restore(ds, &o, state_in, SL_ITER_STATE_SIZE, &it)
                           : sl_iter_create_at(ds, &o, drop ? 0 : at, &it);
    if (s) {
        sl_dataset_unref(ds);
        return -1;
    }
    sl_element e;
    sl_element_init(&e);
    int64_t dropped = 0;
    for (; drop && dropped < at && (s = sl_iter_next(it, &e)) == SL_OK; dropped++) sl_element_clear(&e);
    if (!s) s = sl_iter_next(it, &e);
    double t = now_s() - t0;
    sl_element_clear(&e);
    *replayed = drop ? dropped : sl_iter_replayed(it);
    last_refilled = sl_iter_refilled(it);
    if (state_out && sl_iter_save(it, state_out, SL_ITER_STATE_SIZE, state_len)) t = -1;
    sl_iter_close(it);
    sl_dataset_unref(ds);
    return s ? -1 : t;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    bool full = false;
    int64_t at = 4000;
    int rounds = 3;
    const char *dir = "/tmp/sluice-bench/resume";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--full")) full = true;
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) at = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else dir = argv[i];
    }
    if (at < 10 || rounds < 1 || rounds > 20) {
        fprintf(stderr, "usage: bench_resume [--full] [--batch B >= 10] [--rounds 1..20] [DIR]\n");
        return 2;
    }
    int64_t records = (at + 1) * BATCH + at * BATCH / 10;
    if (make_data(dir, records)) return 1;
    int64_t replay_at = full ? at : at / 10;
    /* the state a run saved at batch `at`: taken from an iterator started there */
    uint8_t state[SL_ITER_STATE_SIZE];
    size_t slen = 0;
    int64_t rep;
    if (first_batch(dir, true, at, NULL, &rep, NULL, NULL, false) < 0) return die("state pipeline"); /* builds the indexes */
    {
        sl_dataset *ds = build(dir, true);
        sl_iter_opts o = sl_iter_opts_default();
        o.seed = 42;
        sl_iter *it;
        if (!ds || sl_iter_create_at(ds, &o, at, &it)) return die("state");
        if (sl_iter_save(it, state, sizeof state, &slen)) return die("save");
        sl_iter_close(it);
        sl_dataset_unref(ds);
    }
    printf("bench_resume: %lld records in %d shards; resume at batch %lld (batch %d, %lld images in); state %zu bytes\n",
           (long long)records, SHARDS, (long long)at, BATCH, (long long)(at * BATCH), slen);
    double ts[20], tr[20], tb[20];
    int64_t refilled = 0;
    for (int r = 0; r < rounds; r++) {
        int64_t rs = -1, rr = -1, rb = -1;
        ts[r] = first_batch(dir, true, at, state, &rs, NULL, NULL, false);
        tr[r] = first_batch(dir, false, replay_at, NULL, &rr, NULL, NULL, true);
        tb[r] = first_batch(dir, false, at, NULL, &rb, NULL, NULL, false);
        refilled = last_refilled;
        if (ts[r] < 0 || tr[r] < 0 || tb[r] < 0) return die("round");
        printf("round %d: the buffer-shuffle pipeline started at batch %lld: %.3f s, %lld batches replayed, %lld "
               "records read again for its buffer\n", r + 1, (long long)at, tb[r], (long long)rb, (long long)refilled);
        if (rs != 0 || rr != replay_at) {
            fprintf(stderr, "bench_resume: replayed %lld (state) and %lld (replay, want %lld)\n", (long long)rs,
                    (long long)rr, (long long)replay_at);
            return 1;
        }
        printf("round %d: state %.3f s (0 batches replayed), replay to batch %lld %.1f s\n", r + 1, ts[r],
               (long long)replay_at, tr[r]);
    }
    qsort(ts, (size_t)rounds, sizeof *ts, cmp_d);
    qsort(tr, (size_t)rounds, sizeof *tr, cmp_d);
    qsort(tb, (size_t)rounds, sizeof *tb, cmp_d);
    printf("the buffer-shuffle pipeline started part-way: %.3f s (median; %.3f..%.3f), %lld records read again\n",
           tb[rounds / 2], tb[0], tb[rounds - 1], (long long)refilled);
    double ms = ts[rounds / 2], mr = tr[rounds / 2], scale = (double)at / (double)replay_at;
    printf("time to the first batch at batch %lld: from the state %.3f s (median; %.3f..%.3f); replaying %.1f s "
           "(%s; %.1f..%.1f s at batch %lld)\n", (long long)at, ms, ts[0], ts[rounds - 1], mr * scale,
           full ? "measured" : "measured at a tenth of the batches, scaled linearly", tr[0], tr[rounds - 1],
           (long long)replay_at);
    printf("RESULT bench_resume ratio=%.5f sluice=%.3f anchor=%.1f unit=s state_bytes=%zu\n", ms / (mr * scale), ms,
           mr * scale, slen);
    return 0;
}
