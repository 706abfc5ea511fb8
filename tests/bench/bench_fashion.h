/* Fashion-MNIST for the training benchmarks (bench_train, bench_train_gpu): where the
 * 8-way TFRecord shards are, converting them from Debian's idx files when they are missing.
 * Header-only (static functions): each benchmark is one .c file.
 *
 * Looked for, in order: data/fashion/ of the source tree (what `bash scripts/main.sh`
 * makes), then /tmp/sluice-bench/fashion; when neither holds 8 train shards they are
 * converted into the second from the idx files in $SLUICE_FASHION_SRC (default
 * /usr/share/datasets/fashion-mnist, package dataset-fashion-mnist), as
 * `sluice-record convert fashion-mnist --shards 8` writes them (records dealt to shards in
 * contiguous runs, features image: 784 bytes, label: int64). */
#ifndef SLUICE_BENCH_FASHION_H
#define SLUICE_BENCH_FASHION_H

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "sluice/example.h"
#include "sluice/idx.h"
#include "sluice/status.h"
#include "sluice/tfrecord.h"

#define BENCH_WORK "/tmp/sluice-bench"

/* files matching pattern */
static int bench_have(const char *pattern) {
    glob_t g;
    int n = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    globfree(&g);
    return n;
}

static int bench_fail(const char *prog, const char *what) {
    fprintf(stderr, "%s: %s: %s\n", prog, what, sl_errmsg());
    return 1;
}

/* idx -> 8 TFRecord shards per split in dir; 0 or 1 (printed) */
static int bench_fashion_convert(const char *prog, const char *dir) {
    const char *splits[2][3] = {{"train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"},
                                {"test", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}};
    const char *src = getenv("SLUICE_FASHION_SRC");
    if (!src || !*src) src = "/usr/share/datasets/fashion-mnist";
    mkdir(BENCH_WORK, 0777);
    mkdir(dir, 0777);
    sl_exb *b;
    if (sl_exb_new(&b)) return bench_fail(prog, "example builder");
    int rc = 1;
    for (int s = 0; s < 2; s++) {
        char p[700];
        sl_tensor img = SL_TENSOR_EMPTY, lab = SL_TENSOR_EMPTY;
        snprintf(p, sizeof p, "%s/%s", src, splits[s][1]);
        if (sl_idx_read(p, &img)) goto fail_p;
        snprintf(p, sizeof p, "%s/%s", src, splits[s][2]);
        if (sl_idx_read(p, &lab)) goto fail_p;
        int64_t n = img.dims[0];
        for (int k = 0; k < 8; k++) {
            snprintf(p, sizeof p, "%s/%s-%05d-of-00008.tfrecord", dir, splits[s][0], k);
            sl_tfr_writer *w;
            if (sl_tfr_writer_open(p, NULL, &w)) goto fail_p;
            for (int64_t i = n * k / 8; i < n * (k + 1) / 8; i++) {
                sl_bytes im = {(const uint8_t *)img.data + i * 784, 784};
                int64_t y = ((const uint8_t *)lab.data)[i];
                uint8_t *rec;
                size_t len;
                sl_exb_reset(b);
                if (sl_exb_bytes(b, "image", &im, 1) || sl_exb_int64s(b, "label", &y, 1) ||
                    sl_exb_serialize(b, &rec, &len)) {
                    sl_tfr_writer_close(w);
                    goto fail_p;
                }
                sl_status st = sl_tfr_writer_write(w, rec, len);
                free(rec);
                if (st) {
                    sl_tfr_writer_close(w);
                    goto fail_p;
                }
            }
            if (sl_tfr_writer_close(w)) goto fail_p;
        }
        sl_tensor_release(&img);
        sl_tensor_release(&lab);
        continue;
    fail_p:
        bench_fail(prog, p);
        sl_tensor_release(&img);
        sl_tensor_release(&lab);
        goto out;
    }
    rc = 0;
out:
    sl_exb_free(b);
    return rc;
}

/* the shards' folder into data (cap bytes), converting when needed; 0 or 1 (printed) */
static int bench_fashion_data(const char *prog, char *data, size_t cap) {
    char pat[700];
    snprintf(data, cap, "%s/data/fashion", SLUICE_SRC_DIR);
    snprintf(pat, sizeof pat, "%s/train-*-of-00008.tfrecord", data);
    if (bench_have(pat) == 8) return 0;
    snprintf(data, cap, "%s/fashion", BENCH_WORK);
    snprintf(pat, sizeof pat, "%s/train-*-of-00008.tfrecord", data);
    if (bench_have(pat) == 8) return 0;
    fprintf(stderr, "%s: converting Fashion-MNIST into %s\n", prog, data);
    return bench_fashion_convert(prog, data);
}

#endif
