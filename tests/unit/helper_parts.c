/* TFRecord files for the ops tests (see helper_parts.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper_files.h"
#include "helper_parts.h"
#include "sluice/tfrecord.h"

static size_t rec_len(int f, int r) { return (size_t)((f * 37 + r * 101) % 300); }

static void rec_fill(uint8_t *p, int f, int r) {
    size_t n = rec_len(f, r);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(f * 31 + r * 7 + i * 13);
}

static char dir[256]; /* sl_test_parts_dir(), once made */

static void remove_dir(void) { sl_test_rm_rf(dir); }

const char *sl_test_parts_dir(void) {
    if (dir[0]) return dir;
    if (!sl_test_mkdtemp(dir, sizeof dir, "sl_ops")) {
        perror("mkdtemp");
        exit(1);
    }
    atexit(remove_dir);
    return dir;
}

void sl_test_part_path(char *out, size_t cap, int f) {
    snprintf(out, cap, "%s/part-%02d.tfrecord", sl_test_parts_dir(), f);
}

uint64_t sl_test_part_offset(int f, int r) {
    uint64_t off = 0;
    for (int k = 0; k < r; k++) off += 16 + rec_len(f, k);
    return off;
}

int sl_test_write_parts(char *glob, size_t cap) {
    if (glob) snprintf(glob, cap, "%s/part-*.tfrecord", sl_test_parts_dir());
    uint8_t buf[400];
    for (int f = 0; f < SL_TEST_NFILES; f++) {
        char p[300];
        sl_test_part_path(p, sizeof p, f);
        sl_tfr_writer *w;
        if (sl_tfr_writer_open(p, NULL, &w)) return -1;
        for (int r = 0; r < SL_TEST_NREC; r++) {
            rec_fill(buf, f, r);
            if (sl_tfr_writer_write(w, buf, rec_len(f, r))) return -1;
        }
        if (sl_tfr_writer_close(w)) return -1;
    }
    return 0;
}

bool sl_test_part_is(const sl_element *e, int f, int r) {
    int c = sl_element_find(e, "record");
    if (c < 0 || e->n != 1 || e->t[c].dtype != SL_DT_BYTES || e->t[c].rank != 0) return false;
    const sl_bytes *b = e->t[c].data;
    uint8_t want[400];
    rec_fill(want, f, r);
    return b->len == rec_len(f, r) && memcmp(b->ptr, want, b->len) == 0;
}
