/* Test data shared by the trainer tests (see helper_points.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helper_points.h"
#include "sluice/example.h"
#include "sluice/status.h"
#include "sluice/tfrecord.h"

int sl_test_write_points(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/points.tfrecord", dir);
    sl_tfr_writer *w;
    sl_exb *b;
    if (sl_tfr_writer_open(path, NULL, &w)) return -1;
    if (sl_exb_new(&b)) {
        sl_tfr_writer_close(w);
        return -1;
    }
    uint64_t r = 12345;
    int rc = 0;
    for (int i = 0; i < 256 && rc == 0; i++) {
        float x[4];
        for (int j = 0; j < 4; j++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            x[j] = (float)((r >> 40) & 0xffff) / 65536.0f;
        }
        int64_t y = x[0] + x[1] > x[2] + x[3];
        uint8_t *buf;
        size_t len;
        sl_exb_reset(b);
        if (sl_exb_floats(b, "image", x, 4) || sl_exb_int64s(b, "label", &y, 1) || sl_exb_serialize(b, &buf, &len)) {
            rc = -1;
            break;
        }
        if (sl_tfr_writer_write(w, buf, len)) rc = -1;
        free(buf);
    }
    sl_exb_free(b);
    if (sl_tfr_writer_close(w)) rc = -1;
    return rc;
}

int sl_test_points_tmpdir(const char *name, char *dir, size_t cap) {
    snprintf(dir, cap, "/tmp/sluice-test-%s.%d", name, (int)getpid());
    mkdir(dir, 0777);
    if (sl_test_write_points(dir) == 0) return 0;
    printf("cannot write test data in %s: %s\n", dir, sl_errmsg());
    return -1;
}
