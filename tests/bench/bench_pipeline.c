/* Benchmark: the ImageNet-style input pipeline — TFRecords of JPEGs -> parse_example ->
 * decode_jpeg -> random_resized_crop 224 -> random_flip -> normalize -> batch 64 — against
 * PyTorch's DataLoader + torchvision (2 workers) on the same images, in the same run, plus
 * the single-core TurboJPEG full-decode ceiling times the cores.
 *
 * Usage: bench_pipeline [N_IMAGES]   (default 2000)
 * Needs the anchors' Debian packages (python3-torch python3-torchvision python3-pil; the
 * corpus script fetches plasma-workspace-wallpapers itself). Uses SLUICE_SHARED (default
 * ../shared beside the source tree) for the anchor programs. Work files go to
 * /tmp/sluice-bench/. Ends with:
 *   RESULT bench_pipeline ratio=R sluice=X anchor=Y unit=images/s   (R = X / Y)
 */
#include <dirent.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sluice/example.h"
#include "sluice/fn.h"
#include "sluice/jpeg.h"
#include "sluice/pipeline.h"
#include "sluice/pool.h"
#include "sluice/tfrecord.h"

#define WORK "/tmp/sluice-bench"
#define SHARDS 8
#define BATCH 64

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int die(const char *what) {
    fprintf(stderr, "bench_pipeline: %s: %s\n", what, sl_errmsg());
    return 1;
}

static int count_jpegs(const char *dir) {
    char pat[512];
    snprintf(pat, sizeof pat, "%s/*.jpg", dir);
    glob_t g;
    int n = glob(pat, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    globfree(&g);
    return n;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* The JPEGs as TFRecords with TensorFlow's ImageNet feature names, label = the digit before
 * ".jpg" (as the corpus names them and torch_loader.py reads them). */
static int write_records(const char *jpeg_dir, const char *out_dir, int n) {
    char pat[512];
    snprintf(pat, sizeof pat, "%s/*.jpg", jpeg_dir);
    glob_t g;
    if (glob(pat, 0, NULL, &g) != 0) return -1;
    mkdir(out_dir, 0755);
    sl_tfr_writer *w[SHARDS];
    for (int s = 0; s < SHARDS; s++) {
        char p[600];
        snprintf(p, sizeof p, "%s/train-%05d-of-%05d.tfrecord", out_dir, s, SHARDS);
        if (sl_tfr_writer_open(p, NULL, &w[s])) return die("open shard");
    }
    sl_exb *b;
    sl_jpeg_decoder *d;
    if (sl_exb_new(&b) || sl_jpeg_decoder_new(&d)) return die("setup");
    size_t total = g.gl_pathc < (size_t)n ? g.gl_pathc : (size_t)n;
    for (size_t i = 0; i < total; i++) {
        size_t len;
        char *data = read_all(g.gl_pathv[i], &len);
        if (!data) return -1;
        sl_jpeg_info info;
        if (sl_jpeg_header(d, (const uint8_t *)data, len, &info)) return die(g.gl_pathv[i]);
        const char *p = g.gl_pathv[i];
        int64_t label = p[strlen(p) - 5] - '0', h = info.height, wd = info.width;
        sl_bytes enc = {(const uint8_t *)data, len}, fmt = {(const uint8_t *)"JPEG", 4};
        sl_exb_reset(b);
        sl_exb_bytes(b, "image/encoded", &enc, 1);
        sl_exb_bytes(b, "image/format", &fmt, 1);
        sl_exb_int64s(b, "image/class/label", &label, 1);
        sl_exb_int64s(b, "image/height", &h, 1);
        sl_exb_int64s(b, "image/width", &wd, 1);
        uint8_t *ser;
        size_t slen;
        if (sl_exb_serialize(b, &ser, &slen)) return die("serialize");
        if (sl_tfr_writer_write(w[i * SHARDS / total], ser, slen)) return die("write");
        free(ser);
        free(data);
    }
    for (int s = 0; s < SHARDS; s++)
        if (sl_tfr_writer_close(w[s])) return die("close shard");
    sl_exb_free(b);
    sl_jpeg_decoder_free(d);
    globfree(&g);
    return (int)total;
}

static sl_status build(const char *rec_dir, sl_dataset **out) {
    char pat[600];
    snprintf(pat, sizeof pat, "%s/train-*.tfrecord", rec_dir);
    const char *pats[1] = {pat};
    sl_dataset *files = NULL, *recs = NULL, *shuf = NULL, *mapped = NULL, *batched = NULL, *pf = NULL;
    sl_fn *f[5] = {0}, *chain = NULL;
    sl_feature_spec specs[2] = {
        {.name = "image/encoded", .as = "image", .dtype = SL_DT_BYTES},
        {.name = "image/class/label", .as = "label", .dtype = SL_DT_I64},
    };
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    sl_status s;
    sl_interleave_opts io = sl_interleave_opts_default();
    io.cycle_length = 4;
    io.parallelism = 0; /* reading records is cheap next to decoding them */
    if ((s = sl_ds_list_files(pats, 1, true, 1, &files))) goto done;
    if ((s = sl_ds_interleave_tfrecord(files, NULL, &io, &recs))) goto done;
    if ((s = sl_ds_shuffle(recs, 1024, 2, true, &shuf))) goto done;
    if ((s = sl_fn_parse_example("record", specs, 2, &f[0]))) goto done;
    if ((s = sl_fn_decode_jpeg("image", 3, &f[1]))) goto done;
    if ((s = sl_fn_random_resized_crop("image", 224, 224, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &f[2]))) goto done;
    if ((s = sl_fn_random_flip("image", true, false, 0.5, &f[3]))) goto done;
    if ((s = sl_fn_normalize("image", mean, std, 3, true, &f[4]))) goto done;
    if ((s = sl_fn_chain(f, 5, &chain))) goto done;
    if ((s = sl_ds_map(shuf, chain, SL_AUTO, true, &mapped))) goto done;
    sl_batch_opts bo = sl_batch_opts_default(BATCH);
    bo.drop_remainder = true;
    if ((s = sl_ds_batch(mapped, &bo, &batched))) goto done;
    s = sl_ds_prefetch(batched, 2, &pf);
done:
    sl_dataset_unref(files);
    sl_dataset_unref(recs);
    sl_dataset_unref(shuf);
    sl_dataset_unref(mapped);
    sl_dataset_unref(batched);
    for (int i = 0; i < 5; i++) sl_fn_unref(f[i]);
    sl_fn_unref(chain);
    *out = pf;
    return s;
}

/* One epoch; returns images/s or -1. */
static double run_epoch(sl_dataset *ds, uint64_t seed, long *images) {
    sl_iter_opts o = sl_iter_opts_default();
    o.seed = seed;
    sl_iter *it;
    if (sl_iter_create(ds, &o, &it)) return -1;
    sl_element e;
    sl_element_init(&e);
    double t0 = now();
    long n = 0;
    sl_status s;
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        n += e.t[0].dims[0];
        sl_element_clear(&e);
    }
    double dt = now() - t0;
    sl_iter_close(it);
    if (s != SL_END) return -1;
    *images = n;
    return n / dt;
}

/* Run a command and return the number after the last "= " on the line containing `key`. */
static double run_anchor(const char *cmd, const char *key) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[1024];
    double v = -1;
    while (fgets(line, sizeof line, p)) {
        fputs(line, stdout);
        if (strstr(line, key)) {
            char *eq = strrchr(line, '=');
            if (eq) v = atof(eq + 1);
        }
    }
    return pclose(p) == 0 ? v : -1;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    const char *shared = getenv("SLUICE_SHARED");
    if (!shared) shared = SLUICE_SRC_DIR "/../shared";
    char jpeg_dir[256], rec_dir[256], cmd[2048];
    snprintf(jpeg_dir, sizeof jpeg_dir, WORK "/jpeg-%d", n);
    snprintf(rec_dir, sizeof rec_dir, WORK "/jpeg-%d-tfrecord", n);
    mkdir(WORK, 0755);
    if (count_jpegs(jpeg_dir) < n) {
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/anchors/make_jpeg_corpus.py %s %d >&2", shared, jpeg_dir, n);
        fprintf(stderr, "making the JPEG corpus: %s\n", cmd);
        if (system(cmd) != 0) return fprintf(stderr, "bench_pipeline: corpus script failed\n"), 1;
    }
    char probe[300];
    snprintf(probe, sizeof probe, "%s/train-00000-of-%05d.tfrecord", rec_dir, SHARDS);
    if (access(probe, R_OK) != 0) {
        int w = write_records(jpeg_dir, rec_dir, n);
        if (w < 0) return 1;
        fprintf(stderr, "wrote %d images into %d TFRecord shards\n", w, SHARDS);
    }
    /* warm the page cache for both sides */
    snprintf(cmd, sizeof cmd, "cat %s/*.jpg %s/*.tfrecord > /dev/null", jpeg_dir, rec_dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not pre-read the files\n");

    sl_dataset *ds;
    if (build(rec_dir, &ds)) return die("building the pipeline");
    long images = 0;
    double best = 0;
    for (int rep = 0; rep < 2; rep++) {
        double r = run_epoch(ds, (uint64_t)rep + 1, &images);
        if (r < 0) return die("pipeline");
        printf("sluice epoch %d: %ld images, %.1f images/s\n", rep + 1, images, r);
        if (r > best) best = r;
    }
    sl_dataset_unref(ds);
    if (getenv("SLUICE_BENCH_NO_ANCHOR")) return 0; /* for profiling the Sluice side alone */

    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/anchors/torch_loader.py %s 2 %d 2>&1", shared, jpeg_dir, BATCH);
    double torch = run_anchor(cmd, "images/s");
    if (torch <= 0) return fprintf(stderr, "bench_pipeline: torch anchor failed (%s)\n", cmd), 1;

    snprintf(cmd, sizeof cmd, "cc -O2 %s/anchors/tj_ceiling.c -lturbojpeg -o " WORK "/tj_ceiling && " WORK "/tj_ceiling %s",
             shared, jpeg_dir);
    double ceiling = run_anchor(cmd, "full decode");
    int cores = sl_cpu_count();
    if (ceiling > 0)
        printf("TurboJPEG full-decode ceiling: %.0f images/s/core x %d cores = %.0f images/s; sluice reaches %.2f of it\n",
               ceiling, cores, ceiling * cores, best / (ceiling * cores));
    printf("RESULT bench_pipeline ratio=%.3f sluice=%.1f anchor=%.1f unit=images/s\n", best / torch, best, torch);
    return 0;
}
