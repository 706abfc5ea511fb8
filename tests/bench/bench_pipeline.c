/* Benchmark: the ImageNet-style input pipeline — TFRecords of JPEGs -> parse_example ->
 * decode_jpeg -> random_resized_crop 224 -> random_flip -> normalize -> batch 64 — against
 * PyTorch's DataLoader + torchvision (2 workers, ../shared/anchors/torch_loader.py) on the
 * same images with the same batch, in two fidelity modes, each against the anchor mode that
 * does the same work:
 *
 *   exact  Sluice: the crop decoded at full size (only its rows and columns: the same pixels
 *          as a full decode), antialiased resize (decode_jpeg(dct_scaling=false) |
 *          random_resized_crop(antialias=true)).  vs torch `pil`: PIL decode of the whole
 *          image, RandomResizedCrop with PIL's antialiased bilinear.
 *   fast   Sluice: the crop's rows and columns decoded at the smallest DCT scale that still
 *          covers 224 x 224, 2-tap bilinear resize (decode_jpeg | random_resized_crop(
 *          antialias=false)).  vs torch `tensor`: torchvision.io.decode_jpeg of the whole
 *          image, RandomResizedCrop(antialias=False).
 *   recipe torchvision's current classification reference recipe (what
 *          examples/imagenet_resnet.sl says): exact's decode and crop, then flip,
 *          TrivialAugmentWide, normalize, random erasing (p 0.1) and, on each batch, mixup
 *          (alpha 0.2) or cutmix (alpha 1.0) with one-hot labels (10 classes).  vs
 *          tests/bench/torch_recipe.py: the same transforms as the reference scripts write
 *          them (PIL decode, torchvision's PIL transforms, RandomMixup / RandomCutmix in the
 *          DataLoader's collate function), 2 workers.
 *
 * Both sides report their best of 2 epochs (the anchor's rule: its first epoch forks the
 * workers). Repetitions alternate Sluice and torch, mode by mode, so drift in the machine
 * hits both; medians and min-max over the repetitions are printed. Each Sluice run is a
 * forked child pinned to 2 cores (cpu_budget 2) and again to 1 core (cpu_budget 1): images/s
 * per core at both budgets. Peak resident memory: the Sluice child's max RSS (one process,
 * from wait4); for torch, every process of the DataLoader (the main one and its workers,
 * found through /proc) sampled every 50 ms: the sum of each process's peak RSS (VmHWM), and
 * the peak of the summed RSS (pages shared after fork count once per process in both).
 * CPU time per image of each side (user + system over the whole run, setup and both epochs,
 * every process: wait4 on the Sluice child, and on python, whose reaped workers count) is
 * printed too: on a busy machine it says more than images/s.
 * The TurboJPEG full-decode ceiling (tjDecompress2 to RGB of every image, what
 * ../shared/anchors/tj_ceiling.c times) is measured in each repetition on 1 core and on 2
 * cores (two decoding processes at once).
 *
 * Usage: bench_pipeline [--quick] [N_IMAGES]   (default 2000 images, 3 repetitions;
 *        --quick: 200 images, 1 repetition — a smoke run, not a measurement)
 * Environment: SLUICE_SHARED (default ../shared beside the source tree) for the anchors;
 * SLUICE_BENCH_REPS=N repetitions; SLUICE_BENCH_NO_ANCHOR=1 skips torch (the Sluice side
 * alone, for tuning: no ratio, so no RESULT line and exit 1). Without ../shared, or without
 * the anchor's packages (python3-torch python3-torchvision python3-pil), it exits 1 at once
 * naming the anchor and what is missing; an anchor run that fails ends it so too, and no
 * RESULT line is printed. The corpus comes
 * from ../shared/anchors/make_jpeg_corpus.py (real photos); if that cannot run, synthetic
 * JPEGs are made instead and the output says so (their figures are not the README's).
 * Work files go to /tmp/sluice-bench/. Ends with
 *   RESULT bench_pipeline ratio=R sluice=X anchor=Y unit=images/s mode=M exact=Re fast=Rf
 *          fast_vs_ceiling=C recipe=Rr recipe_sluice=Xr recipe_anchor=Yr
 * where R = min(Re, Rf), Re = exact / pil and Rf = fast / tensor (medians), X and Y the
 * medians of the worse mode, C = fast (median) / the 2-core ceiling (median), Rr = recipe /
 * torch_recipe.py (medians Xr and Yr).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
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
#define MAXREPS 16

enum { EXACT, FAST, RECIPE, NMODES };
static const char *const MODE_NAME[NMODES] = {"exact", "fast", "recipe"};
static const char *const ANCHOR_MODE[NMODES] = {"pil", "tensor", "recipe"};
#define CLASSES 10 /* the corpus' labels: the digit before ".jpg" */

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

/* Stand-in corpus when the real one cannot be made: N JPEGs at quality 90 in the corpus
 * script's sizes, with smooth shapes plus noise (so entropy decoding has work to do). */
static int make_synthetic(const char *dir, int n) {
    static const int sizes[6][2] = {{500, 375}, {500, 333}, {375, 500}, {500, 400}, {640, 480}, {333, 500}};
    mkdir(dir, 0755);
    uint64_t r = 7;
    for (int i = 0; i < n; i++) {
        int w = sizes[i % 6][0], h = sizes[i % 6][1];
        uint8_t *px = malloc((size_t)w * h * 3);
        if (!px) return -1;
        double fx = 0.01 + 0.05 * (i % 7), fy = 0.02 + 0.03 * (i % 5);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int c = 0; c < 3; c++) {
                    r = r * 6364136223846793005ull + 1442695040888963407ull;
                    double v = 128 + 60 * sin(fx * x + c) * cos(fy * y - c) + (double)((r >> 58) & 31) - 16;
                    px[((size_t)y * w + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                }
        uint8_t *jpg;
        size_t len;
        if (sl_jpeg_encode(px, w, h, 3, 90, &jpg, &len)) {
            free(px);
            return die("encode");
        }
        free(px);
        char p[600];
        snprintf(p, sizeof p, "%s/img%05d_%d.jpg", dir, i, i % 10);
        FILE *f = fopen(p, "wb");
        if (!f || fwrite(jpg, 1, len, f) != len) return fprintf(stderr, "cannot write %s\n", p), -1;
        fclose(f);
        free(jpg);
    }
    return n;
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

static sl_status build(const char *rec_dir, int mode, sl_dataset **out) {
    char pat[600];
    snprintf(pat, sizeof pat, "%s/train-*.tfrecord", rec_dir);
    const char *pats[1] = {pat};
    sl_dataset *files = NULL, *recs = NULL, *shuf = NULL, *mapped = NULL, *batched = NULL, *mixed = NULL, *pf = NULL;
    sl_fn *f[7] = {0}, *chain = NULL, *mix = NULL;
    int nf = 0;
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
    if ((s = sl_fn_parse_example("record", specs, 2, &f[nf++]))) goto done;
    if ((s = sl_fn_decode_jpeg("image", 3, &f[nf]))) goto done;
    if ((s = sl_fn_set_dct_scaling(f[nf++], mode == FAST))) goto done;
    if ((s = sl_fn_random_resized_crop("image", 224, 224, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &f[nf]))) goto done;
    if ((s = sl_fn_set_antialias(f[nf++], mode != FAST))) goto done;
    if ((s = sl_fn_random_flip("image", true, false, 0.5, &f[nf++]))) goto done;
    /* the reference recipe: TrivialAugmentWide on the uint8 crop, random erasing (p 0.1) of
     * the normalized tensor, then mixup (alpha 0.2) or cutmix (alpha 1.0) on each batch */
    if (mode == RECIPE && (s = sl_fn_trivial_augment("image", 31, &f[nf++]))) goto done;
    if ((s = sl_fn_normalize("image", mean, std, 3, true, &f[nf++]))) goto done;
    static const float zero[1] = {0};
    if (mode == RECIPE && (s = sl_fn_random_erasing("image", 0.1, 0.02, 0.33, 0.3, 3.3, zero, 1, false, &f[nf++])))
        goto done;
    if ((s = sl_fn_chain(f, nf, &chain))) goto done;
    if ((s = sl_ds_map(shuf, chain, SL_AUTO, true, &mapped))) goto done;
    sl_batch_opts bo = sl_batch_opts_default(BATCH);
    bo.drop_remainder = true;
    if ((s = sl_ds_batch(mapped, &bo, &batched))) goto done;
    sl_dataset *last = batched;
    if (mode == RECIPE) {
        if ((s = sl_fn_mixup_cutmix("image", "label", 0.2, 1.0, CLASSES, &mix))) goto done;
        if ((s = sl_ds_map(batched, mix, SL_AUTO, true, &mixed))) goto done;
        last = mixed;
    }
    s = sl_ds_prefetch(last, 2, &pf);
done:
    sl_dataset_unref(files);
    sl_dataset_unref(recs);
    sl_dataset_unref(shuf);
    sl_dataset_unref(mapped);
    sl_dataset_unref(batched);
    sl_dataset_unref(mixed);
    for (int i = 0; i < 7; i++) sl_fn_unref(f[i]);
    sl_fn_unref(chain);
    sl_fn_unref(mix);
    *out = pf;
    return s;
}

/* One epoch; returns images/s or -1. */
static double run_epoch(sl_dataset *ds, uint64_t seed, int cores, long *images) {
    sl_iter_opts o = sl_iter_opts_default();
    o.seed = seed;
    o.cpu_budget = cores;
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

/* Pin the calling process to its first `cores` allowed CPUs; returns how many it got. */
static int pin(int cores) {
    cpu_set_t all, set;
    if (sched_getaffinity(0, sizeof all, &all) != 0) return cores;
    CPU_ZERO(&set);
    int got = 0;
    for (int c = 0; c < CPU_SETSIZE && got < cores; c++)
        if (CPU_ISSET(c, &all)) {
            CPU_SET(c, &set);
            got++;
        }
    sched_setaffinity(0, sizeof set, &set);
    return got;
}

/* CPU seconds (user + system) of a finished child, its waited-for descendants included. */
static double cpu_s(const struct rusage *ru) {
    return (double)ru->ru_utime.tv_sec + ru->ru_utime.tv_usec * 1e-6 + (double)ru->ru_stime.tv_sec +
           ru->ru_stime.tv_usec * 1e-6;
}
static double last_cpu_s; /* of the last in_child / run_anchor */
static char anchor_last[1024]; /* the last line the last run_anchor printed */

/* A forked child runs fn(arg) and writes one double back; *maxrss_kb gets the child's peak
 * RSS (and last_cpu_s its CPU time). Returns the double, or -1. */
typedef double (*child_fn)(void *arg);
static double in_child(child_fn fn, void *arg, long *maxrss_kb) {
    int p[2];
    if (pipe(p) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(p[0]);
        double v = fn(arg);
        if (write(p[1], &v, sizeof v) != sizeof v) _exit(2);
        fflush(stdout);
        _exit(0);
    }
    close(p[1]);
    double v = -1;
    if (read(p[0], &v, sizeof v) != sizeof v) v = -1;
    close(p[0]);
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) v = -1;
    *maxrss_kb = ru.ru_maxrss;
    last_cpu_s = cpu_s(&ru);
    return v;
}

typedef struct {
    const char *rec_dir;
    int mode, cores, epochs;
    uint64_t seed;
} sluice_job;

static double sluice_child(void *arg) {
    sluice_job *j = arg;
    pin(j->cores);
    sl_dataset *ds;
    if (build(j->rec_dir, j->mode, &ds)) return die("building the pipeline"), -1;
    double best = 0;
    long images = 0;
    for (int ep = 0; ep < j->epochs; ep++) {
        double r = run_epoch(ds, j->seed + (uint64_t)ep, j->cores, &images);
        if (r < 0) return die("pipeline"), -1;
        printf("    sluice %s %d core%s epoch %d: %ld images, %.1f images/s\n", MODE_NAME[j->mode], j->cores,
               j->cores > 1 ? "s" : "", ep + 1, images, r);
        if (r > best) best = r;
    }
    sl_dataset_unref(ds);
    return best;
}

/* ---- the TurboJPEG full-decode ceiling ---- */

typedef struct {
    char **data;
    size_t *len;
    int n;
    double rate;
} ceil_job;

static void *ceil_thread(void *arg) {
    ceil_job *j = arg;
    sl_jpeg_decoder *d;
    j->rate = -1;
    if (sl_jpeg_decoder_new(&d)) return NULL;
    size_t cap = 4096 * 4096 * 3;
    uint8_t *out = malloc(cap);
    double t0 = now();
    for (int i = 0; i < j->n; i++) {
        int w, h;
        if (sl_jpeg_decode(d, (const uint8_t *)j->data[i], j->len[i], 3, 8, out, cap, &w, &h)) {
            fprintf(stderr, "ceiling: %s\n", sl_errmsg());
            free(out);
            sl_jpeg_decoder_free(d);
            return NULL;
        }
    }
    j->rate = j->n / (now() - t0);
    free(out);
    sl_jpeg_decoder_free(d);
    return NULL;
}

typedef struct {
    int cores, n;
    const char *dir;
} ceil_args;

/* images/s of `cores` threads each decoding every image in full, pinned to `cores` CPUs. */
static double ceiling_child(void *arg) {
    const ceil_args *a = arg;
    int cores = a->cores;
    pin(cores);
    char pat[512];
    snprintf(pat, sizeof pat, "%s/*.jpg", a->dir);
    glob_t g;
    if (glob(pat, 0, NULL, &g) != 0) return -1;
    int n = (int)g.gl_pathc < a->n ? (int)g.gl_pathc : a->n;
    ceil_job j = {malloc(sizeof(char *) * (size_t)n), malloc(sizeof(size_t) * (size_t)n), n, 0};
    for (int i = 0; i < n; i++)
        if (!(j.data[i] = read_all(g.gl_pathv[i], &j.len[i]))) return -1;
    ceil_job jobs[8];
    pthread_t th[8];
    for (int c = 0; c < cores; c++) {
        jobs[c] = j;
        pthread_create(&th[c], NULL, ceil_thread, &jobs[c]);
    }
    double sum = 0;
    for (int c = 0; c < cores; c++) {
        pthread_join(th[c], NULL);
        if (jobs[c].rate < 0) return -1;
        sum += jobs[c].rate;
    }
    return sum;
}

/* ---- the anchor, with the memory of its process tree ---- */

typedef struct {
    pid_t root;
    volatile int stop;
    int npids;
    pid_t pids[512];
    long hwm_kb[512];   /* each process's peak RSS (VmHWM), last seen */
    long peak_sum_kb;   /* the peak of the summed VmRSS */
} mem_watch;

static long status_kb(pid_t pid, const char *key) {
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0) {
            v = atol(line + kl);
            break;
        }
    fclose(f);
    return v;
}

static pid_t ppid_of(pid_t pid) {
    char p[64], buf[512];
    snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *rp = strrchr(buf, ')');
    int ppid;
    if (!rp || sscanf(rp + 1, " %*c %d", &ppid) != 1) return -1;
    return ppid;
}

static void *watch_thread(void *arg) {
    mem_watch *m = arg;
    while (!m->stop) {
        /* the tree: the root and every process whose parent is in it (repeat until stable) */
        pid_t tree[512];
        int nt = 0;
        tree[nt++] = m->root;
        pid_t all[4096], par[4096];
        int na = 0;
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d && (e = readdir(d)) && na < 4096)
            if (isdigit((unsigned char)e->d_name[0])) {
                all[na] = atoi(e->d_name);
                par[na] = ppid_of(all[na]);
                na++;
            }
        if (d) closedir(d);
        for (int grew = 1; grew;) {
            grew = 0;
            for (int i = 0; i < na; i++) {
                int in = 0, parent_in = 0;
                for (int k = 0; k < nt; k++) {
                    in |= tree[k] == all[i];
                    parent_in |= tree[k] == par[i];
                }
                if (!in && parent_in && nt < 512) tree[nt++] = all[i], grew = 1;
            }
        }
        long sum = 0;
        for (int k = 0; k < nt; k++) {
            long rss = status_kb(tree[k], "VmRSS:"), hwm = status_kb(tree[k], "VmHWM:");
            if (rss > 0) sum += rss;
            if (hwm <= 0) continue;
            int slot = -1;
            for (int i = 0; i < m->npids; i++)
                if (m->pids[i] == tree[k]) slot = i;
            if (slot < 0 && m->npids < 512) slot = m->npids++, m->pids[slot] = tree[k], m->hwm_kb[slot] = 0;
            if (slot >= 0 && hwm > m->hwm_kb[slot]) m->hwm_kb[slot] = hwm;
        }
        if (sum > m->peak_sum_kb) m->peak_sum_kb = sum;
        usleep(50000);
    }
    return NULL;
}

/* Run cmd (its output echoed, indented) and return the number after the last '=' on the
 * last line containing `key`; *hwm_sum_kb and *peak_sum_kb get the tree's memory. */
static double run_anchor(const char *cmd, const char *key, long *hwm_sum_kb, long *peak_sum_kb, int *nproc) {
    int p[2];
    if (pipe(p) != 0) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        close(p[0]);
        close(p[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    mem_watch *m = calloc(1, sizeof *m);
    m->root = pid;
    pthread_t th;
    pthread_create(&th, NULL, watch_thread, m);
    FILE *f = fdopen(p[0], "r");
    char line[1024];
    double v = -1;
    anchor_last[0] = 0;
    while (fgets(line, sizeof line, f)) {
        printf("    | %s", line);
        snprintf(anchor_last, sizeof anchor_last, "%.*s", (int)strcspn(line, "\n"), line);
        if (strstr(line, key)) {
            char *eq = strrchr(line, '=');
            if (eq) v = atof(eq + 1);
        }
    }
    fclose(f);
    int status;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    wait4(pid, &status, 0, &ru);
    last_cpu_s = cpu_s(&ru); /* python and its reaped DataLoader workers */
    m->stop = 1;
    pthread_join(th, NULL);
    *hwm_sum_kb = 0;
    for (int i = 0; i < m->npids; i++) *hwm_sum_kb += m->hwm_kb[i];
    *peak_sum_kb = m->peak_sum_kb;
    *nproc = m->npids;
    free(m);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? v : -1;
}

/* ---- statistics ---- */

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    double v[MAXREPS];
    int n;
} series;

static void add(series *s, double v) {
    if (s->n < MAXREPS) s->v[s->n++] = v;
}

static double median(const series *s) {
    if (s->n == 0) return 0;
    double t[MAXREPS];
    memcpy(t, s->v, sizeof(double) * (size_t)s->n);
    qsort(t, (size_t)s->n, sizeof *t, cmp_d);
    return s->n % 2 ? t[s->n / 2] : (t[s->n / 2 - 1] + t[s->n / 2]) / 2;
}

static double smin(const series *s) {
    double m = s->n ? s->v[0] : 0;
    for (int i = 1; i < s->n; i++) m = s->v[i] < m ? s->v[i] : m;
    return m;
}

static double smax(const series *s) {
    double m = s->n ? s->v[0] : 0;
    for (int i = 1; i < s->n; i++) m = s->v[i] > m ? s->v[i] : m;
    return m;
}

static void row(const char *what, const series *s, double per, const series *mem_mb, const char *mem_what) {
    printf("  %-30s %9.1f  [%7.1f .. %7.1f]", what, median(s), smin(s), smax(s));
    if (per > 0) printf("  %7.1f/core", median(s) / per);
    else printf("  %12s", "");
    if (mem_mb && mem_mb->n) printf("  %6.0f MB %s", median(mem_mb), mem_what);
    printf("\n");
}

/* Why torch_loader.py cannot run here (into why), or 0 when it can. */
static int torch_missing(const char *loader, char *why, size_t cap) {
    if (access(loader, R_OK) != 0) {
        snprintf(why, cap, "%s not found (SLUICE_SHARED, default ../shared beside the sources)", loader);
        return 1;
    }
    FILE *p = popen("/usr/bin/python3 -c 'import torch, torchvision, PIL' 2>&1", "r");
    if (!p) {
        snprintf(why, cap, "cannot run /usr/bin/python3: %s", strerror(errno));
        return 1;
    }
    char line[512], last[512] = "";
    while (fgets(line, sizeof line, p)) snprintf(last, sizeof last, "%.*s", (int)strcspn(line, "\n"), line);
    if (pclose(p) == 0) return 0;
    snprintf(why, cap, "/usr/bin/python3 cannot import torch, torchvision and PIL (%s): install python3-torch "
             "python3-torchvision python3-pil", last);
    return 1;
}

int main(int argc, char **argv) {
    int quick = 0, n = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else if (atoi(argv[i]) > 0) n = atoi(argv[i]);
        else return fprintf(stderr, "usage: bench_pipeline [--quick] [N_IMAGES]\n"), 2;
    }
    if (n == 0) n = quick ? 200 : 2000;
    int reps = quick ? 1 : 3;
    if (getenv("SLUICE_BENCH_REPS")) reps = atoi(getenv("SLUICE_BENCH_REPS"));
    if (reps < 1) reps = 1;
    if (reps > MAXREPS) reps = MAXREPS;
    const char *shared = getenv("SLUICE_SHARED");
    if (!shared) shared = SLUICE_SRC_DIR "/../shared";
    char loader[600], corpus_py[600];
    snprintf(loader, sizeof loader, "%s/anchors/torch_loader.py", shared);
    snprintf(corpus_py, sizeof corpus_py, "%s/anchors/make_jpeg_corpus.py", shared);
    const char *recipe_py = SLUICE_SRC_DIR "/tests/bench/torch_recipe.py"; /* the recipe's anchor */
    /* a ratio needs its anchor: find out before measuring anything whether it can run */
    int anchors = !getenv("SLUICE_BENCH_NO_ANCHOR");
    char why[1024];
    if (anchors && torch_missing(loader, why, sizeof why)) {
        fprintf(stderr, "bench_pipeline: the anchor torch_loader.py (PyTorch DataLoader + torchvision) cannot run: %s; "
                "no RESULT line\n", why);
        return 1;
    }
    if (!anchors) printf("the anchor torch_loader.py is not run: SLUICE_BENCH_NO_ANCHOR is set (no ratio)\n");

    char jpeg_dir[256], rec_dir[256], cmd[2048];
    snprintf(jpeg_dir, sizeof jpeg_dir, WORK "/jpeg-%d", n);
    snprintf(rec_dir, sizeof rec_dir, WORK "/jpeg-%d-tfrecord", n);
    mkdir(WORK, 0755);
    int synthetic = 0;
    char synth_dir[256];
    snprintf(synth_dir, sizeof synth_dir, WORK "/synthetic-jpeg-%d", n);
    if (count_jpegs(jpeg_dir) < n) {
        int ok = 0;
        if (access(corpus_py, R_OK) == 0) {
            snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s %d >&2", corpus_py, jpeg_dir, n);
            fprintf(stderr, "making the JPEG corpus: %s\n", cmd);
            ok = system(cmd) == 0 && count_jpegs(jpeg_dir) >= n;
        }
        if (!ok) {
            printf("SYNTHETIC CORPUS: the real-photo corpus could not be made (needs %s and python3-pil); "
                   "using synthetic JPEGs, whose figures are not comparable with the README's\n", corpus_py);
            synthetic = 1;
            snprintf(jpeg_dir, sizeof jpeg_dir, "%s", synth_dir);
            snprintf(rec_dir, sizeof rec_dir, WORK "/synthetic-jpeg-%d-tfrecord", n);
            if (count_jpegs(jpeg_dir) < n && make_synthetic(jpeg_dir, n) < 0) return 1;
        }
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
    int cores = sl_cpu_count();
    printf("bench_pipeline: %d images%s, batch %d, %d repetition%s, %d cores online%s\n", n,
           synthetic ? " (synthetic)" : "", BATCH, reps, reps > 1 ? "s" : "", cores,
           quick ? " (--quick: a smoke run, not a measurement)" : "");

    static series sl[NMODES][3], sl_mem[NMODES], an[NMODES], an_hwm[NMODES], an_peak[NMODES], ceil1, ceil2,
        sl_cpu[NMODES], an_cpu[NMODES], ceil_cpu;
    /* images each run handles: 2 epochs of whole batches (the ceiling: every image once per thread) */
    double run_images = 2.0 * (n / BATCH) * BATCH;
    int nproc = 0;
    for (int rep = 0; rep < reps; rep++) {
        printf("repetition %d of %d\n", rep + 1, reps);
        long rss;
        ceil_args ca = {1, n, jpeg_dir};
        double c1 = in_child(ceiling_child, &ca, &rss);
        add(&ceil_cpu, last_cpu_s * 1e3 / n);
        ca.cores = 2;
        double c2 = in_child(ceiling_child, &ca, &rss);
        if (c1 < 0 || c2 < 0) return fprintf(stderr, "bench_pipeline: the decode ceiling failed\n"), 1;
        add(&ceil1, c1);
        add(&ceil2, c2);
        printf("  TurboJPEG full decode: %.1f images/s on 1 core, %.1f on 2 cores\n", c1, c2);
        for (int mode = 0; mode < NMODES; mode++) {
            for (int c = 2; c >= 1; c--) {
                sluice_job j = {rec_dir, mode, c, 2, 1 + (uint64_t)rep * 10};
                double r = in_child(sluice_child, &j, &rss);
                if (r < 0) return fprintf(stderr, "bench_pipeline: the Sluice %s run failed\n", MODE_NAME[mode]), 1;
                add(&sl[mode][c], r);
                if (c == 2) add(&sl_mem[mode], rss / 1024.0);
                if (c == 2) add(&sl_cpu[mode], last_cpu_s * 1e3 / run_images);
                printf("  sluice %-5s %d core%s: best epoch %.1f images/s, peak RSS %.0f MB, CPU %.2f ms/image\n",
                       MODE_NAME[mode], c, c > 1 ? "s" : "", r, rss / 1024.0, last_cpu_s * 1e3 / run_images);
            }
            if (!anchors) continue;
            if (mode == RECIPE)
                snprintf(cmd, sizeof cmd, "exec /usr/bin/python3 %s %s 2 %d 2 nearest", recipe_py, jpeg_dir, BATCH);
            else
                snprintf(cmd, sizeof cmd, "exec /usr/bin/python3 %s %s 2 %d 2 %s", loader, jpeg_dir, BATCH,
                         ANCHOR_MODE[mode]);
            long hwm, peak;
            double t = run_anchor(cmd, "best epoch", &hwm, &peak, &nproc);
            if (t <= 0) {
                fprintf(stderr, "bench_pipeline: the anchor torch_loader.py (mode %s) failed: %s (%s); no RESULT line\n",
                        ANCHOR_MODE[mode], anchor_last[0] ? anchor_last : "no output", cmd);
                return 1;
            }
            add(&an[mode], t);
            add(&an_cpu[mode], last_cpu_s * 1e3 / run_images);
            add(&an_hwm[mode], hwm / 1024.0);
            add(&an_peak[mode], peak / 1024.0);
            printf("  torch %-6s 2 workers: best epoch %.1f images/s, %d processes: sum of peak RSS %.0f MB, "
                   "peak of summed RSS %.0f MB, CPU %.2f ms/image\n", ANCHOR_MODE[mode], t, nproc, hwm / 1024.0,
                   peak / 1024.0, last_cpu_s * 1e3 / run_images);
        }
    }

    printf("\nsummary over %d repetition%s: median [min .. max] images/s\n", reps, reps > 1 ? "s" : "");
    row("TurboJPEG full decode, 1 core", &ceil1, 1, NULL, NULL);
    row("TurboJPEG full decode, 2 cores", &ceil2, 2, NULL, NULL);
    double ratio[NMODES] = {0, 0, 0};
    for (int mode = 0; mode < NMODES; mode++) {
        char what[64];
        snprintf(what, sizeof what, "%s: sluice, cpu_budget 2", MODE_NAME[mode]);
        row(what, &sl[mode][2], 2, &sl_mem[mode], "peak RSS");
        snprintf(what, sizeof what, "%s: sluice, cpu_budget 1", MODE_NAME[mode]);
        row(what, &sl[mode][1], 1, NULL, NULL);
        if (an[mode].n) {
            snprintf(what, sizeof what, "%s: torch %s, 2 workers", MODE_NAME[mode], ANCHOR_MODE[mode]);
            row(what, &an[mode], 0, &an_hwm[mode], "sum of peak RSS");
            printf("  %-30s %56.0f MB peak of summed RSS\n", "", median(&an_peak[mode]));
            ratio[mode] = median(&sl[mode][2]) / median(&an[mode]);
            printf("  %s ratio (sluice / torch %s): %.3f\n", MODE_NAME[mode], ANCHOR_MODE[mode], ratio[mode]);
        }
    }
    printf("  CPU time per image, median (whole runs: setup and both epochs; all processes): full decode %.2f ms",
           median(&ceil_cpu));
    for (int mode = 0; mode < NMODES; mode++) {
        printf(", sluice %s %.2f ms", MODE_NAME[mode], median(&sl_cpu[mode]));
        if (an_cpu[mode].n) printf(", torch %s %.2f ms", ANCHOR_MODE[mode], median(&an_cpu[mode]));
    }
    printf("\n");
    double vs_ceiling = median(&sl[FAST][2]) / median(&ceil2);
    printf("  fast mode / 2-core full-decode ceiling: %.3f; exact mode: %.3f\n", vs_ceiling,
           median(&sl[EXACT][2]) / median(&ceil2));
    if (!an[EXACT].n || !an[FAST].n || !an[RECIPE].n) {
        fflush(stdout);
        fprintf(stderr, "bench_pipeline: the anchor torch_loader.py was not run (SLUICE_BENCH_NO_ANCHOR is set): no ratio, "
                "no RESULT line\n");
        return 1;
    }
    int worse = ratio[EXACT] <= ratio[FAST] ? EXACT : FAST;
    printf("RESULT bench_pipeline ratio=%.3f sluice=%.1f anchor=%.1f unit=images/s mode=%s exact=%.3f fast=%.3f "
           "fast_vs_ceiling=%.3f recipe=%.3f recipe_sluice=%.1f recipe_anchor=%.1f\n", ratio[worse],
           median(&sl[worse][2]), median(&an[worse]), MODE_NAME[worse], ratio[EXACT], ratio[FAST], vs_ceiling,
           ratio[RECIPE], median(&sl[RECIPE][2]), median(&an[RECIPE]));
    return 0;
}
