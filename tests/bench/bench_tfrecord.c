/* Benchmark: reading and verifying TFRecord files from the page cache with sl_tfr_reader
 * (mmap, zero-copy views, both CRCs checked; GZIP: inflated through its buffer) against a
 * shell tool that only moves the same bytes, measured alternately in the same run:
 *   big:   ~1 GiB of 100 KiB random payloads       vs `cat FILE > /dev/null`
 *   small: ~256 MiB of 100-byte random payloads    vs `cat FILE > /dev/null` (records/s
 *          matters here: the per-record cost of framing, two CRCs and a view)
 *   gzip:  ~256 MiB (uncompressed) of 1000-byte compressible payloads in one GZIP stream,
 *          as TensorFlow writes it                 vs `zcat FILE > /dev/null`
 * plus the tf.Example parse rate of sl_example_parse. Files are made once in
 * /tmp/sluice-bench (kept). Each case: the file is dropped from and re-read into the page
 * cache, then REPS (5) alternating passes of each side; printed: MB/s (10^6 bytes/s of the
 * record stream, the uncompressed bytes for gzip, the same count for both sides) and
 * records/s, median and min-max.
 *
 * Usage: bench_tfrecord [FILE]   FILE replaces the big case's file (read as it is).
 * BENCH_QUICK=1: files of 64 / 16 / 16 MiB and 3 passes, a smoke run only.
 * Ends with: RESULT bench_tfrecord ratio=R sluice=X anchor=Y unit=MB/s, the big case's
 * medians (R = X / Y); the small and gzip ratios are printed before it. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sluice/crc32c.h"
#include "sluice/example.h"
#include "sluice/tfrecord.h"
#include "tests/bench/bench_fashion.h"

#define DIR "/tmp/sluice-bench"
#define REPS_FULL 5
#define REPS_QUICK 3
#define N_EXAMPLES 100000

typedef struct {
    const char *name;
    char path[512];
    size_t rec_len;     /* payload bytes per record */
    uint64_t nrec;      /* records written */
    sl_compression comp;
    const char *anchor; /* the shell tool */
    int fill;           /* 0: random bytes, 1: compressible text */
} tcase;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Random bytes, or text-like bytes (a 16-letter alphabet with runs of one letter: gzip
 * makes about a third of it, like tf.Examples of small images or tokens). */
static void fill(uint8_t *buf, size_t len, int kind) {
    if (kind == 0) {
        for (size_t k = 0; k < len; k += 8) {
            uint64_t x = next_rand();
            memcpy(buf + k, &x, len - k < 8 ? len - k : 8);
        }
        return;
    }
    for (size_t k = 0; k < len;) {
        uint64_t x = next_rand();
        size_t run = 1 + (x >> 60 > 12 ? (x >> 40) % 24 : 0);
        for (size_t j = 0; j < run && k < len; j++) buf[k++] = (uint8_t)('a' + (x & 15));
    }
}

static int make_file(const tcase *c) {
    mkdir(DIR, 0755);
    fprintf(stderr, "bench_tfrecord: creating %s (%llu records of %zu bytes%s)...\n", c->path,
            (unsigned long long)c->nrec, c->rec_len, c->comp == SL_COMP_GZIP ? ", gzip" : "");
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", c->path);
    sl_tfr_write_opts wo = sl_tfr_write_opts_default();
    wo.compression = c->comp;
    sl_tfr_writer *w;
    if (sl_tfr_writer_open(tmp, &wo, &w) != SL_OK) return -1;
    uint8_t *buf = malloc(c->rec_len + 8);
    if (!buf) return -1;
    sl_status st = SL_OK;
    for (uint64_t i = 0; i < c->nrec && !st; i++) {
        fill(buf, c->rec_len, c->fill);
        st = sl_tfr_writer_write(w, buf, c->rec_len);
    }
    free(buf);
    if (sl_tfr_writer_close(w) != SL_OK || st) return -1;
    return rename(tmp, c->path);
}

/* One pass of reading + verifying every record; returns seconds, or -1. */
static double read_pass(const tcase *c, uint64_t *records, uint64_t *stream_bytes) {
    double t0 = now();
    sl_tfr_read_opts o = sl_tfr_read_opts_default();
    o.compression = c->comp;
    sl_tfr_reader *r;
    if (sl_tfr_reader_open(c->path, &o, &r) != SL_OK) return -1;
    sl_record rec;
    sl_status s;
    uint64_t n = 0, b = 0;
    while ((s = sl_tfr_reader_next(r, &rec)) == SL_OK) {
        n++;
        b += rec.len + 16; /* framing: length, its CRC, the data's CRC */
    }
    sl_tfr_reader_close(r);
    double t = now() - t0;
    if (s != SL_END) return -1;
    *records = n;
    *stream_bytes = b;
    return t;
}

static double anchor_pass(const tcase *c) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s '%s' > /dev/null", c->anchor, c->path);
    double t0 = now();
    if (system(cmd) != 0) return -1;
    return now() - t0;
}

/* v sorted: "median (min-max)" of amount / seconds, into out */
static double rate_line(double *secs, int n, double amount, double unit, char *out, size_t cap) {
    double med = bench_median(secs, n); /* sorts secs */
    snprintf(out, cap, "%.0f (%.0f-%.0f)", amount / med / unit, amount / secs[n - 1] / unit, amount / secs[0] / unit);
    return amount / med / unit;
}

/* Runs one case; *sl_mbs / *an_mbs get the medians in MB/s. */
static int run_case(tcase *c, int reps, bool user_file, double *sl_mbs, double *an_mbs) {
    struct stat sb;
    if (stat(c->path, &sb) != 0) {
        if (user_file) {
            fprintf(stderr, "bench_tfrecord: %s: %s\n", c->path, strerror(errno));
            return -1;
        }
        if (make_file(c) != 0 || stat(c->path, &sb) != 0) {
            fprintf(stderr, "bench_tfrecord: cannot create %s: %s\n", c->path, sl_errmsg());
            return -1;
        }
    }
    /* Warm the page cache. First drop this file's own pages, so that it is cached as a
     * file read from disk is (readahead builds large folios) rather than as the writer left
     * it (4 KiB pages, which make every mapping cost a fault per page); both contenders
     * then read the same cached state. */
    int fd = open(c->path, O_RDONLY);
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    uint64_t recs = 0, bytes = 0;
    if (anchor_pass(c) < 0 || read_pass(c, &recs, &bytes) < 0) {
        fprintf(stderr, "bench_tfrecord: %s: warm-up failed: %s\n", c->name, sl_errmsg());
        return -1;
    }
    double ts[REPS_FULL], ta[REPS_FULL], ts2[REPS_FULL], ta2[REPS_FULL];
    for (int r = 0; r < reps; r++) { /* alternate, the anchor first on odd passes */
        for (int side = 0; side < 2; side++) {
            if ((side == 0) == (r % 2 == 0)) {
                if ((ts[r] = read_pass(c, &recs, &bytes)) < 0) {
                    fprintf(stderr, "bench_tfrecord: %s: %s\n", c->name, sl_errmsg());
                    return -1;
                }
            } else if ((ta[r] = anchor_pass(c)) < 0) {
                fprintf(stderr, "bench_tfrecord: %s: `%s` failed\n", c->name, c->anchor);
                return -1;
            }
        }
        ts2[r] = ts[r];
        ta2[r] = ta[r];
    }
    char s_mb[64], a_mb[64], s_rec[64], a_rec[64];
    *sl_mbs = rate_line(ts, reps, (double)bytes, 1e6, s_mb, sizeof s_mb);
    *an_mbs = rate_line(ta, reps, (double)bytes, 1e6, a_mb, sizeof a_mb);
    rate_line(ts2, reps, (double)recs, 1, s_rec, sizeof s_rec);
    rate_line(ta2, reps, (double)recs, 1, a_rec, sizeof a_rec);
    printf("%s: %s (%.1f MB on disk; %llu records, %.1f MB of record stream)\n", c->name, c->path, sb.st_size / 1e6,
           (unsigned long long)recs, bytes / 1e6);
    printf("  sluice read+verify%s: %s MB/s, %s records/s\n", c->comp == SL_COMP_GZIP ? "+inflate" : "", s_mb, s_rec);
    printf("  %-4s > /dev/null%s:   %s MB/s, %s records/s\n", c->anchor, c->comp == SL_COMP_GZIP ? "        " : "",
           a_mb, a_rec);
    printf("  ratio (medians): %.3f   [median (min-max) of %d alternating passes]\n", *sl_mbs / *an_mbs, reps);
    fflush(stdout);
    return 0;
}

/* Build N_EXAMPLES small Examples (an int64 label, a float vector, a short bytes id),
 * frame them into one memory buffer, then time reader + parse over it. */
static int example_bench(int reps) {
    sl_exb *b;
    if (sl_exb_new(&b) != SL_OK) {
        printf("example: sl_exb_new failed: %s\n", sl_errmsg());
        return -1;
    }
    size_t cap = (size_t)N_EXAMPLES * 160, used = 0;
    uint8_t *stream = malloc(cap);
    for (int i = 0; i < N_EXAMPLES; i++) {
        int64_t label = i % 10;
        float feat[8];
        for (int k = 0; k < 8; k++) feat[k] = (float)(i * 0.5 + k);
        char id[24];
        snprintf(id, sizeof id, "ex-%07d", i);
        sl_bytes idb = {(const uint8_t *)id, strlen(id)};
        sl_exb_reset(b);
        uint8_t *ser;
        size_t len;
        if (sl_exb_int64s(b, "label", &label, 1) || sl_exb_floats(b, "features", feat, 8) ||
            sl_exb_bytes(b, "id", &idb, 1) || sl_exb_serialize(b, &ser, &len)) {
            printf("example: building failed: %s\n", sl_errmsg());
            sl_exb_free(b);
            free(stream);
            return -1;
        }
        if (used + len + 16 > cap) break;
        used += sl_tfr_frame(stream + used, ser, len);
        free(ser);
    }
    sl_exb_free(b);
    double t[REPS_FULL];
    uint64_t parsed = 0;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = now();
        sl_tfr_reader *r;
        if (sl_tfr_reader_open_mem(stream, used, "examples", NULL, &r) != SL_OK) break;
        sl_example ex;
        sl_example_init(&ex);
        sl_record rec;
        uint64_t n = 0;
        while (sl_tfr_reader_next(r, &rec) == SL_OK) {
            if (sl_example_parse(&ex, rec.data, rec.len) != SL_OK) {
                printf("example: parse failed: %s\n", sl_errmsg());
                break;
            }
            n++;
        }
        sl_example_free(&ex);
        sl_tfr_reader_close(r);
        t[rep] = now() - t0;
        parsed = n;
    }
    char line[64];
    rate_line(t, reps, (double)parsed, 1, line, sizeof line);
    printf("tf.Example parse (in memory): %llu examples (%.1f MB): %s examples/s\n", (unsigned long long)parsed,
           used / 1e6, line);
    free(stream);
    return 0;
}

int main(int argc, char **argv) {
    const char *q = getenv("BENCH_QUICK");
    bool quick = q && *q && strcmp(q, "0");
    int reps = quick ? REPS_QUICK : REPS_FULL;
    uint64_t mib = 1 << 20;
    /* sizes: records of 100 KiB (+16 framing) to ~1 GiB, 100 B to ~256 MiB, 1000 B to ~256 MiB */
    uint64_t big = quick ? 64 * mib : 1024 * mib, small = quick ? 16 * mib : 256 * mib;
    tcase cases[3] = {
        {.name = "big records (100 KiB)", .rec_len = 100 * 1024, .comp = SL_COMP_NONE, .anchor = "cat", .fill = 0},
        {.name = "small records (100 B)", .rec_len = 100, .comp = SL_COMP_NONE, .anchor = "cat", .fill = 0},
        {.name = "gzip (1000 B records)", .rec_len = 1000, .comp = SL_COMP_GZIP, .anchor = "zcat", .fill = 1},
    };
    cases[0].nrec = big / (cases[0].rec_len + 16);
    cases[1].nrec = small / (cases[1].rec_len + 16);
    cases[2].nrec = small / (cases[2].rec_len + 16);
    const char *tag = quick ? "quick-" : "";
    snprintf(cases[0].path, sizeof cases[0].path, DIR "/tfr-%s%s.tfrecord", tag, quick ? "64m" : "1g");
    snprintf(cases[1].path, sizeof cases[1].path, DIR "/tfr-%ssmall100.tfrecord", tag);
    snprintf(cases[2].path, sizeof cases[2].path, DIR "/tfr-%stext1000.tfrecord.gz", tag);
    if (argc > 1) snprintf(cases[0].path, sizeof cases[0].path, "%s", argv[1]);
    printf("bench_tfrecord%s: crc32c %s, page cache warm, %d alternating passes per side\n", quick ? " (quick)" : "",
           sl_crc32c_impl_name(sl_crc32c_active()), reps);
    double sl[3], an[3];
    for (int k = 0; k < 3; k++)
        if (run_case(&cases[k], reps, k == 0 && argc > 1, &sl[k], &an[k])) return 1;

    /* CRC alone on one 100 KiB buffer, for reference. */
    size_t blen = 100 * 1024;
    uint8_t *buf = malloc(blen);
    memset(buf, 0x5a, blen);
    for (int impl = 0; impl < SL_CRC32C_IMPL_COUNT; impl++) {
        if (!sl_crc32c_available(impl)) continue;
        int n = (impl == 0 ? 2000 : 20000) / (quick ? 10 : 1);
        uint32_t c = 0;
        double t0 = now();
        for (int i = 0; i < n; i++) c ^= sl_crc32c_with(impl, c, buf, blen, NULL);
        double t = now() - t0;
        (void)c;
        printf("crc32c %-8s: %.0f MB/s (crc of the buffer %08x: the same for every implementation)\n",
               sl_crc32c_impl_name(impl), (double)n * blen / t / 1e6, sl_crc32c_with(impl, 0, buf, blen, NULL));
    }
    free(buf);

    example_bench(reps);
    printf("ratios (sluice / anchor, medians): big %.3f, small %.3f, gzip %.3f\n", sl[0] / an[0], sl[1] / an[1],
           sl[2] / an[2]);
    printf("RESULT bench_tfrecord ratio=%.3f sluice=%.0f anchor=%.0f unit=MB/s\n", sl[0] / an[0], sl[0], an[0]);
    return 0;
}
