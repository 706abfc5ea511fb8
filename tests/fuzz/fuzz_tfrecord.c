/* libFuzzer target for TFRecord framing: arbitrary bytes through sl_tfr_reader_open_mem with
 * AUTO compression (so plain, gzip and zlib paths are all reached), in strict mode and in
 * skip mode, with and without data CRC checks, read to the end. Checks the reader's
 * promises: it terminates, every record lies inside what the stream could hold, skip mode
 * never fails on plain input, resynchronising CRCs each byte at most once, and errors are
 * sticky. Seeds:
 * tests/fuzz/seeds/tfrecord/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/tfrecord.h"

static void check(int cond) {
    if (!cond) abort();
}

static void run(const uint8_t *data, size_t size, bool skip, bool verify) {
    sl_tfr_read_opts o = sl_tfr_read_opts_default();
    o.skip_corrupt = skip;
    o.verify_data_crc = verify;
    sl_tfr_reader *r;
    if (sl_tfr_reader_open_mem(data, size, "fuzz", &o, &r) != SL_OK) return;
    sl_compression c = sl_tfr_reader_compression(r);
    sl_record rec;
    sl_status s;
    uint64_t n = 0, last_end = 0;
    volatile uint8_t sink = 0;
    while ((s = sl_tfr_reader_next(r, &rec)) == SL_OK) {
        check(rec.offset >= last_end);
        last_end = rec.offset + 16 + rec.len;
        if (c == SL_COMP_NONE) {
            check(rec.data >= data && rec.data + rec.len <= data + size);
            check(last_end <= size);
        }
        if (rec.len) sink ^= rec.data[0] ^ rec.data[rec.len - 1]; /* ASan checks the view */
        n++;
    }
    (void)sink;
    /* SL_ERANGE: a record longer than max_record, only where records are inflated */
    check(s == SL_END || s == SL_ECORRUPT || s == SL_ENOMEM || (s == SL_ERANGE && c != SL_COMP_NONE));
    if (skip && c == SL_COMP_NONE) check(s == SL_END);
    if (s != SL_END) check(sl_tfr_reader_next(r, &rec) == s); /* sticky */
    sl_tfr_stats st = sl_tfr_reader_stats(r);
    check(st.records == n);
    if (c == SL_COMP_NONE && s == SL_END) check(st.bytes + 16 * n + st.bytes_skipped == size);
    if (c == SL_COMP_NONE) check(st.resync_bytes_crc <= size); /* resync is linear */
    sl_tfr_reader_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* An exact-size copy, so ASan catches a read one past the end. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    run(copy, size, false, true);
    run(copy, size, true, true);
    run(copy, size, false, false);
    free(copy);
    return 0;
}
