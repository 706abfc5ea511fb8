/* formats/tfevents.c: file naming, exact Event bytes, write/flush/read round trips, two
 * writers in one folder, and the reader's handling of fields it does not decode and of
 * records that are not Events.
 *
 * Also a helper for tests/integration/test_checkpoint_python.py:
 *     test_tfevents --write-sample DIR   writes one event file in DIR (sample below)
 *     test_tfevents --dump FILE          prints each entry: "version WALL STEP TEXT",
 *                                        "scalar WALL STEP TAG VALUE" or "other WALL STEP" */
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/tfevents.h"
#include "sluice/tfrecord.h"
#include "helper_files.h"
#include "test.h"

static char tmpdir[256];

static const char *mktmp(void) { return sl_test_mkdtemp(tmpdir, sizeof tmpdir, "sl_tfev"); }

/* A reader of PATH, its first event read into *ev. Returns the reader, or NULL (printed) when
 * the open or the read fails. */
static sl_tfev_reader *open_first(const char *path, sl_tfev_event *ev) {
    sl_tfev_reader *r;
    sl_status s = sl_tfev_reader_open(path, &r);
    if (!s && (s = sl_tfev_reader_next(r, ev)) != SL_OK) sl_tfev_reader_close(r);
    if (s) {
        printf("  open_first(%s): %d (%s)\n", path, s, sl_errmsg());
        return NULL;
    }
    return r;
}

/* mktmp, and a writer in the new folder (sl_tfev_open at T) in *w, the path of its file
 * into PATH (CAP bytes). Returns the folder, or NULL (printed) when either fails. */
static const char *mktmp_writer(double t, sl_tfev_writer **w, char *path, size_t cap) {
    const char *dir = mktmp();
    sl_status s = dir ? sl_tfev_open(dir, t, w) : SL_EIO;
    if (s) {
        printf("  mktmp_writer: %s\n", dir ? sl_errmsg() : "no temporary folder");
        return NULL;
    }
    snprintf(path, cap, "%s", sl_tfev_path(*w));
    return dir;
}

/* mktmp, and the path of the file NAME in the new folder into PATH (CAP bytes) */
static const char *mktmp_file(char *path, size_t cap, const char *name) {
    return sl_test_tmp_file(tmpdir, sizeof tmpdir, "sl_tfev", path, cap, name);
}

static void put_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- the sample (also checked from Python) ---------------------------------------- */

#define SAMPLE_T0 1700000000.25

static sl_status write_sample(const char *dir, char *path_out, size_t cap) {
    sl_tfev_writer *w;
    sl_status s = sl_tfev_open(dir, SAMPLE_T0, &w);
    if (s) return s;
    snprintf(path_out, cap, "%s", sl_tfev_path(w));
    for (int step = 0; step < 5 && !s; step++) {
        double t = SAMPLE_T0 + step * 1.5;
        s = sl_tfev_add_scalar(w, "loss", step, 1.0f / (float)(step + 1), t);
        if (!s) s = sl_tfev_add_scalar(w, "accuracy", step, (float)step * 0.2f, t);
        if (!s) s = sl_tfev_add_scalar(w, "learning_rate", step, 0.001f, t);
    }
    if (!s) s = sl_tfev_add_scalar(w, "train/examples_per_s", (int64_t)1 << 40, 12345.5f, SAMPLE_T0 + 100);
    if (!s) s = sl_tfev_add_scalar(w, "neg", -3, -1.5f, SAMPLE_T0 + 101);
    sl_status c = sl_tfev_close(w);
    return s ? s : c;
}

/* ---- tests ------------------------------------------------------------------------ */

TEST(test_name_and_roundtrip) {
    const char *dir = mktmp();
    ASSERT(dir);
    char run[300], want[700], host[256] = "";
    snprintf(run, sizeof run, "%s/runs/mlp", dir); /* created with its parent */
    sl_tfev_writer *w;
    ASSERT_OK(sl_tfev_open(run, 1700000000.5, &w));
    gethostname(host, sizeof host - 1);
    snprintf(want, sizeof want, "%s/events.out.tfevents.1700000000.%s", run, host);
    ASSERT_STREQ(sl_tfev_path(w), want);
    ASSERT_OK(sl_tfev_add_scalar(w, "loss", 1, 0.5f, 1700000001.25));
    ASSERT_OK(sl_tfev_add_scalar(w, "acc", 1, 0.75f, 1700000001.25));
    ASSERT_OK(sl_tfev_add_scalar(w, "big", (int64_t)1 << 40, -2.5f, 1700000002.0));
    ASSERT_OK(sl_tfev_add_scalar(w, "neg", -7, INFINITY, 1700000003.0));
    ASSERT_OK(sl_tfev_flush(w));

    /* readable after a flush, before close */
    struct { sl_tfev_kind kind; double wall; int64_t step; const char *text; float v; } exp[] = {
        {SL_TFEV_VERSION, 1700000000.5, 0, "brain.Event:2", 0},
        {SL_TFEV_SCALAR, 1700000001.25, 1, "loss", 0.5f},
        {SL_TFEV_SCALAR, 1700000001.25, 1, "acc", 0.75f},
        {SL_TFEV_SCALAR, 1700000002.0, (int64_t)1 << 40, "big", -2.5f},
        {SL_TFEV_SCALAR, 1700000003.0, -7, "neg", INFINITY},
    };
    for (int pass = 0; pass < 2; pass++) {
        sl_tfev_reader *r;
        ASSERT_OK(sl_tfev_reader_open(want, &r));
        sl_tfev_event ev;
        for (int i = 0; i < 5; i++) {
            ASSERT_OK(sl_tfev_reader_next(r, &ev));
            ASSERT_EQ(ev.kind, exp[i].kind);
            ASSERT(ev.wall_time == exp[i].wall);
            ASSERT_EQ(ev.step, exp[i].step);
            ASSERT_STREQ(ev.text, exp[i].text);
            ASSERT(ev.value == exp[i].v);
        }
        ASSERT_EQ(sl_tfev_reader_next(r, &ev), SL_END);
        sl_tfev_reader_close(r);
        if (pass == 0) ASSERT_OK(sl_tfev_close(w));
    }
    ASSERT_OK(sl_tfev_close(NULL));
    sl_test_rm_rf(dir);
}

/* The bytes on disk, field by field, as TensorFlow's serializer writes them. */
TEST(test_exact_event_bytes) {
    sl_tfev_writer *w;
    char path[700];
    const char *dir = mktmp_writer(1.5, &w, path, sizeof path);
    ASSERT(dir);
    ASSERT_OK(sl_tfev_add_scalar(w, "loss", 1, 0.25f, 2.0));
    ASSERT_OK(sl_tfev_add_scalar(w, "x", 0, 1.0f, 3.0));
    ASSERT_OK(sl_tfev_close(w));

    uint8_t e0[64], e1[64], e2[64];
    size_t n0 = 0, n1 = 0, n2 = 0;
    double d;
    uint64_t u;
    /* {wall_time: 1.5, file_version: "brain.Event:2"} */
    e0[n0++] = 0x09;
    d = 1.5; memcpy(&u, &d, 8); put_le(e0 + n0, u, 8); n0 += 8;
    e0[n0++] = 0x1a; e0[n0++] = 13; memcpy(e0 + n0, "brain.Event:2", 13); n0 += 13;
    /* {wall_time: 2, step: 1, summary {value {tag: "loss", simple_value: 0.25}}} */
    e1[n1++] = 0x09;
    d = 2.0; memcpy(&u, &d, 8); put_le(e1 + n1, u, 8); n1 += 8;
    e1[n1++] = 0x10; e1[n1++] = 1;
    const uint8_t sum1[] = {0x2a, 13, 0x0a, 11, 0x0a, 4, 'l', 'o', 's', 's', 0x15, 0, 0, 0x80, 0x3e};
    memcpy(e1 + n1, sum1, sizeof sum1); n1 += sizeof sum1;
    /* step 0 is left out, as proto3 does */
    e2[n2++] = 0x09;
    d = 3.0; memcpy(&u, &d, 8); put_le(e2 + n2, u, 8); n2 += 8;
    const uint8_t sum2[] = {0x2a, 10, 0x0a, 8, 0x0a, 1, 'x', 0x15, 0, 0, 0x80, 0x3f};
    memcpy(e2 + n2, sum2, sizeof sum2); n2 += sizeof sum2;

    uint8_t want[256];
    size_t wn = 0;
    wn += sl_tfr_frame(want + wn, e0, n0);
    wn += sl_tfr_frame(want + wn, e1, n1);
    wn += sl_tfr_frame(want + wn, e2, n2);
    size_t n;
    uint8_t *got = sl_test_read_file(path, &n);
    ASSERT(got);
    ASSERT_EQ(n, wn);
    ASSERT_MEMEQ(got, want, wn);
    free(got);
    sl_test_rm_rf(dir);
}

TEST(test_two_writers_same_second) {
    const char *dir = mktmp();
    ASSERT(dir);
    sl_tfev_writer *a, *b;
    ASSERT_OK(sl_tfev_open(dir, 1234567890.0, &a));
    ASSERT_OK(sl_tfev_open(dir, 1234567890.0, &b));
    char want[800];
    snprintf(want, sizeof want, "%s.%ld.1", sl_tfev_path(a), (long)getpid());
    ASSERT_STREQ(sl_tfev_path(b), want);
    ASSERT_OK(sl_tfev_close(a));
    ASSERT_OK(sl_tfev_close(b));
    sl_test_rm_rf(dir);
}

/* Without flush, events reach the file once 64 KiB are queued, and close writes the rest. */
TEST(test_buffer_flushes_when_full) {
    sl_tfev_writer *w;
    char path[700];
    const char *dir = mktmp_writer(0, &w, path, sizeof path); /* now */
    ASSERT(dir);
    struct stat st;
    ASSERT_EQ(stat(path, &st), 0);
    ASSERT_EQ(st.st_size, 16 + 9 + 15); /* the version event is written at once */
    for (int i = 0; i < 5000; i++) ASSERT_OK(sl_tfev_add_scalar(w, "loss", i, (float)i, 0));
    ASSERT_EQ(stat(path, &st), 0);
    ASSERT(st.st_size > 64 * 1024);
    ASSERT_OK(sl_tfev_close(w));
    sl_tfev_event ev;
    sl_tfev_reader *r = open_first(path, &ev);
    ASSERT(r);
    ASSERT_EQ(ev.kind, SL_TFEV_VERSION);
    ASSERT(ev.wall_time > 1.6e9); /* the current time, not 0 */
    for (int i = 0; i < 5000; i++) {
        ASSERT_OK(sl_tfev_reader_next(r, &ev));
        ASSERT_EQ(ev.step, i);
        ASSERT(ev.value == (float)i);
    }
    ASSERT_EQ(sl_tfev_reader_next(r, &ev), SL_END);
    sl_tfev_reader_close(r);
    sl_test_rm_rf(dir);
}

TEST(test_errors) {
    sl_tfev_writer *w = (sl_tfev_writer *)1;
    ASSERT_EQ(sl_tfev_open("", 1, &w), SL_EINVAL);
    ASSERT(w == NULL);
    ASSERT_EQ(sl_tfev_open("/dev/null/run", 1, &w), SL_EIO);
    ASSERT_STREQ(sl_errmsg(), "cannot create event folder /dev/null/run: /dev/null is a character device, not a folder");
    const char *dir = mktmp();
    ASSERT(dir);
    ASSERT_OK(sl_tfev_open(dir, 1, &w));
    ASSERT_EQ(sl_tfev_add_scalar(w, "", 1, 1, 1), SL_EINVAL);
    ASSERT_OK(sl_tfev_close(w));
    sl_tfev_reader *r = (sl_tfev_reader *)1;
    ASSERT_EQ(sl_tfev_reader_open("/nonexistent-sl/events", &r), SL_ENOTFOUND);
    ASSERT(r == NULL);

    /* a TFRecord file whose second record is not an Event */
    char path[400];
    snprintf(path, sizeof path, "%s/bad.tfevents", dir);
    sl_tfr_writer *tw;
    ASSERT_OK(sl_tfr_writer_open(path, NULL, &tw));
    const uint8_t ok[] = {0x1a, 1, 'v'};
    const uint8_t bad[] = {0x0a, 5, 'x'}; /* length past the end */
    const uint8_t wrong[] = {0x09, 1};   /* wall_time field cut short */
    ASSERT_OK(sl_tfr_writer_write(tw, ok, sizeof ok));
    ASSERT_OK(sl_tfr_writer_write(tw, bad, sizeof bad));
    ASSERT_OK(sl_tfr_writer_write(tw, wrong, sizeof wrong));
    ASSERT_OK(sl_tfr_writer_close(tw));
    ASSERT_OK(sl_tfev_reader_open(path, &r));
    sl_tfev_event ev;
    ASSERT_OK(sl_tfev_reader_next(r, &ev));
    ASSERT_EQ(ev.kind, SL_TFEV_VERSION);
    ASSERT_STREQ(ev.text, "v");
    char want[600];
    snprintf(want, sizeof want, "%s: byte 19: record is not a tensorflow.Event (bad protobuf framing)", path);
    ASSERT_EQ(sl_tfev_reader_next(r, &ev), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), want);
    sl_err_clear();
    ASSERT_EQ(sl_tfev_reader_next(r, &ev), SL_ECORRUPT); /* sticky */
    ASSERT_STREQ(sl_errmsg(), want);
    sl_tfev_reader_close(r);
    sl_tfev_reader_close(NULL);
    sl_test_rm_rf(dir);
}

/* Fields the reader does not decode (graph_def, a summary value with an image, unknown
 * fields) are skipped; a summary with two scalars gives two entries. */
TEST(test_reader_skips_other_fields) {
    char path[400];
    const char *dir = mktmp_file(path, sizeof path, "other.tfevents");
    ASSERT(dir);
    sl_tfr_writer *tw;
    ASSERT_OK(sl_tfr_writer_open(path, NULL, &tw));
    /* {step: 5, graph_def: "gd"} */
    const uint8_t graph[] = {0x10, 5, 0x22, 2, 'g', 'd'};
    /* {step: 6, summary {value {tag "a" simple_value 1} value {tag "img" image {..}}
     *  value {node_name "n" tag "b" simple_value -1}}, field 99 varint} */
    const uint8_t multi[] = {
        0x10, 6, 0x2a, 32,
        0x0a, 8, 0x0a, 1, 'a', 0x15, 0, 0, 0x80, 0x3f,
        0x0a, 7, 0x0a, 3, 'i', 'm', 'g', 0x22, 0,
        0x0a, 11, 0x3a, 1, 'n', 0x0a, 1, 'b', 0x15, 0, 0, 0x80, 0xbf,
        0x98, 0x06, 1,
    };
    ASSERT_OK(sl_tfr_writer_write(tw, graph, sizeof graph));
    ASSERT_OK(sl_tfr_writer_write(tw, multi, sizeof multi - 3)); /* without field 99 */
    ASSERT_OK(sl_tfr_writer_write(tw, multi, sizeof multi));
    ASSERT_OK(sl_tfr_writer_close(tw));
    sl_tfev_event ev;
    sl_tfev_reader *r = open_first(path, &ev);
    ASSERT(r);
    ASSERT_EQ(ev.kind, SL_TFEV_OTHER);
    ASSERT_EQ(ev.step, 5);
    ASSERT_STREQ(ev.text, "");
    for (int rep = 0; rep < 2; rep++) {
        ASSERT_OK(sl_tfev_reader_next(r, &ev));
        ASSERT_EQ(ev.kind, SL_TFEV_SCALAR);
        ASSERT_EQ(ev.step, 6);
        ASSERT_STREQ(ev.text, "a");
        ASSERT(ev.value == 1.0f);
        uint64_t off = ev.offset;
        ASSERT_OK(sl_tfev_reader_next(r, &ev));
        ASSERT_EQ(ev.kind, SL_TFEV_SCALAR);
        ASSERT_STREQ(ev.text, "b");
        ASSERT(ev.value == -1.0f);
        ASSERT_EQ(ev.offset, off);
    }
    ASSERT_EQ(sl_tfev_reader_next(r, &ev), SL_END);
    sl_tfev_reader_close(r);
    sl_test_rm_rf(dir);
}

/* Every truncation of a small event file: an error or the events before the cut, never a
 * crash. */
TEST(test_truncated_files) {
    const char *dir = mktmp();
    ASSERT(dir);
    char path[700], cut[800];
    ASSERT_OK(write_sample(dir, path, sizeof path));
    size_t n;
    uint8_t *full = sl_test_read_file(path, &n);
    ASSERT(full);
    snprintf(cut, sizeof cut, "%s/cut", dir);
    int errors = 0;
    for (size_t len = 0; len < n; len += 7) {
        FILE *f = fopen(cut, "wb");
        fwrite(full, 1, len, f);
        fclose(f);
        sl_tfev_reader *r;
        ASSERT_OK(sl_tfev_reader_open(cut, &r));
        sl_tfev_event ev;
        sl_status s;
        while ((s = sl_tfev_reader_next(r, &ev)) == SL_OK) {}
        if (s != SL_END && s != SL_ECORRUPT) {
            FAILF("cut at %zu: status %d", len, s);
            sl_tfev_reader_close(r);
            free(full);
            return;
        }
        errors += s == SL_ECORRUPT;
        sl_tfev_reader_close(r);
    }
    ASSERT(errors > 0);
    free(full);
    sl_test_rm_rf(dir);
}

/* ---- helper modes for the Python test ----------------------------------------------- */

static int dump(const char *path) {
    sl_tfev_reader *r;
    if (sl_tfev_reader_open(path, &r)) {
        fprintf(stderr, "%s\n", sl_errmsg());
        return 1;
    }
    sl_tfev_event ev;
    sl_status s;
    while ((s = sl_tfev_reader_next(r, &ev)) == SL_OK) {
        if (ev.kind == SL_TFEV_VERSION)
            printf("version %.17g %lld %s\n", ev.wall_time, (long long)ev.step, ev.text);
        else if (ev.kind == SL_TFEV_SCALAR)
            printf("scalar %.17g %lld %s %.9g\n", ev.wall_time, (long long)ev.step, ev.text,
                   (double)ev.value);
        else
            printf("other %.17g %lld\n", ev.wall_time, (long long)ev.step);
    }
    sl_tfev_reader_close(r);
    if (s != SL_END) {
        fprintf(stderr, "%s\n", sl_errmsg());
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-sample") == 0) {
        char path[4096];
        if (write_sample(argv[2], path, sizeof path)) {
            fprintf(stderr, "%s\n", sl_errmsg());
            return 1;
        }
        printf("%s\n", path);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "--dump") == 0) return dump(argv[2]);
    RUN(test_name_and_roundtrip);
    RUN(test_exact_event_bytes);
    RUN(test_two_writers_same_second);
    RUN(test_buffer_flushes_when_full);
    RUN(test_errors);
    RUN(test_reader_skips_other_fields);
    RUN(test_truncated_files);
    TEST_MAIN_END();
}
