/* Benchmark: reading and verifying a plain TFRecord file from the page cache with
 * sl_tfr_reader (mmap, zero-copy views, both CRCs checked) against `cat FILE > /dev/null`
 * measured in the same run, plus the tf.Example parse rate of sl_example_parse.
 *
 * Usage: bench_tfrecord [FILE]   (default /tmp/sluice-bench/tfr-1g.tfrecord, made if
 * missing: ~1 GiB of 100 KiB random payloads). Prints MB/s (10^6 bytes/s), best of 3, and
 * ends with: RESULT bench_tfrecord ratio=R sluice=X anchor=Y unit=MB/s (R = X / Y). */
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

#define DEFAULT_DIR "/tmp/sluice-bench"
#define DEFAULT_PATH DEFAULT_DIR "/tfr-1g.tfrecord"
#define REC_LEN (100 * 1024)
#define N_RECS 10486 /* 10486 * (100 KiB + 16) ~= 1 GiB */
#define N_EXAMPLES 100000

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int make_file(const char *path) {
    mkdir(DEFAULT_DIR, 0755);
    fprintf(stderr, "creating %s (~1 GiB)...\n", path);
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    sl_tfr_writer *w;
    if (sl_tfr_writer_open(tmp, NULL, &w) != SL_OK) return -1;
    uint64_t *buf = malloc(REC_LEN);
    uint64_t x = 0x243f6a8885a308d3ull;
    for (int i = 0; i < N_RECS; i++) {
        for (size_t k = 0; k < REC_LEN / 8; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[k] = x;
        }
        if (sl_tfr_writer_write(w, buf, REC_LEN) != SL_OK) break;
    }
    free(buf);
    if (sl_tfr_writer_close(w) != SL_OK) return -1;
    return rename(tmp, path);
}

/* One pass of reading + verifying every record; returns seconds, or -1. */
static double read_pass(const char *path, uint64_t *records, uint64_t *bytes) {
    double t0 = now();
    sl_tfr_read_opts o = sl_tfr_read_opts_default();
    o.compression = SL_COMP_NONE;
    sl_tfr_reader *r;
    if (sl_tfr_reader_open(path, &o, &r) != SL_OK) return -1;
    sl_record rec;
    sl_status s;
    uint64_t n = 0, b = 0;
    while ((s = sl_tfr_reader_next(r, &rec)) == SL_OK) {
        n++;
        b += rec.len;
    }
    sl_tfr_reader_close(r);
    double t = now() - t0;
    if (s != SL_END) return -1;
    *records = n;
    *bytes = b;
    return t;
}

static double cat_pass(const char *path) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cat '%s' > /dev/null", path);
    double t0 = now();
    if (system(cmd) != 0) return -1;
    return now() - t0;
}

/* Build N_EXAMPLES small Examples (an int64 label, a float vector, a short bytes id),
 * frame them into one memory buffer, then time reader + parse over it. */
static int example_bench(void) {
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
    double best = 1e30;
    uint64_t parsed = 0;
    for (int rep = 0; rep < 3; rep++) {
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
        double t = now() - t0;
        if (t < best) best = t;
        parsed = n;
    }
    printf("tf.Example parse: %llu examples (%.1f MB) in %.3f s: %.0f examples/s\n",
           (unsigned long long)parsed, used / 1e6, best, parsed / best);
    free(stream);
    return 0;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : DEFAULT_PATH;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (argc > 1) {
            fprintf(stderr, "bench_tfrecord: %s: %s\n", path, strerror(errno));
            return 1;
        }
        if (make_file(path) != 0 || stat(path, &sb) != 0) {
            fprintf(stderr, "bench_tfrecord: cannot create %s: %s\n", path, sl_errmsg());
            return 1;
        }
    }
    double mb = sb.st_size / 1e6;
    printf("file: %s (%.1f MB), crc32c: %s\n", path, mb, sl_crc32c_impl_name(sl_crc32c_active()));

    /* Warm the page cache. First drop this file's own pages, so that it is cached as a
     * file read from disk is (readahead builds large folios) rather than as the writer left
     * it (4 KiB pages, which make every mapping cost a fault per page); both contenders
     * then read the same cached state. */
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    uint64_t recs = 0, bytes = 0;
    if (cat_pass(path) < 0 || read_pass(path, &recs, &bytes) < 0) {
        fprintf(stderr, "bench_tfrecord: warm-up failed: %s\n", sl_errmsg());
        return 1;
    }
    double best_sl = 1e30, best_cat = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double tc = cat_pass(path);
        double ts = read_pass(path, &recs, &bytes);
        if (tc < 0 || ts < 0) {
            fprintf(stderr, "bench_tfrecord: pass failed: %s\n", sl_errmsg());
            return 1;
        }
        if (tc < best_cat) best_cat = tc;
        if (ts < best_sl) best_sl = ts;
    }
    double sl = mb / best_sl, anchor = mb / best_cat;
    printf("sluice read+verify: %llu records, %.1f MB payload, best %.3f s: %.0f MB/s\n",
           (unsigned long long)recs, bytes / 1e6, best_sl, sl);
    printf("cat > /dev/null:    best %.3f s: %.0f MB/s\n", best_cat, anchor);

    /* CRC alone on one 100 KiB buffer, for reference. */
    uint8_t *buf = malloc(REC_LEN);
    memset(buf, 0x5a, REC_LEN);
    for (int impl = 0; impl < SL_CRC32C_IMPL_COUNT; impl++) {
        if (!sl_crc32c_available(impl)) continue;
        int reps = impl == 0 ? 2000 : 20000;
        uint32_t c = 0;
        double t0 = now();
        for (int i = 0; i < reps; i++) c ^= sl_crc32c_with(impl, c, buf, REC_LEN, NULL);
        double t = now() - t0;
        (void)c;
        printf("crc32c %-8s: %.0f MB/s (crc of the buffer %08x: the same for every implementation)\n",
               sl_crc32c_impl_name(impl), (double)reps * REC_LEN / t / 1e6,
               sl_crc32c_with(impl, 0, buf, REC_LEN, NULL));
    }
    free(buf);

    example_bench();
    printf("RESULT bench_tfrecord ratio=%.3f sluice=%.0f anchor=%.0f unit=MB/s\n", sl / anchor, sl,
           anchor);
    return 0;
}
