/* sluice-record: look at, check and make TFRecord files.
 *
 *   sluice-record inspect FILE...        counts, sizes, CRC status and a feature summary
 *   sluice-record verify FILE...         every CRC of every record; exit 0 only if all sound
 *   sluice-record cat FILE...            one line per record (text, or --json)
 *   sluice-record index FILE...          build or check each file's record index
 *   sluice-record convert fashion-mnist OUT --shards N    idx files -> sharded TFRecords
 *   sluice-record convert images DIR OUT --shards N      class folders of JPEGs -> TFRecords
 *
 * A thin main over the library: reading and writing go through sluice/tfrecord.h, Examples
 * through sluice/example.h, images through sluice/jpeg.h, idx through sluice/idx.h.
 * Workload: files from bytes to gigabytes streamed once, front to back; conversions of
 * tens of thousands of small records. Exit status: 0 ok, 1 corrupt/unreadable input or a
 * failed write, 2 wrong usage (tools/tool.h).
 *
 * This file: the usage, convert and main; inspect, verify and cat are in
 * tools/tool_record_read.c, index in tools/tool_record_index.c (tools/tool_record.h). */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/example.h"
#include "sluice/file.h"
#include "sluice/idx.h"
#include "sluice/jpeg.h"
#include "sluice/tfrecord.h"
#include "sluice/util.h"
#include "tool.h"
#include "tool_record.h"

static const char *PROG = "sluice-record";

static const char USAGE[] =
    "Usage: sluice-record COMMAND [OPTIONS] ARGS...\n"
    "\n"
    "Look at, check and make TFRecord files.\n"
    "\n"
    "Commands:\n"
    "  inspect FILE...     records, sizes, compression, CRC status and a feature summary\n"
    "  verify FILE...      check every record's CRCs (exit 0 only if all are sound)\n"
    "  cat FILE...         print each record's Example, one per line (text or --json)\n"
    "  index FILE...       build or check each file's record index (for random access)\n"
    "  convert fashion-mnist OUT --shards N   Fashion-MNIST idx files -> TFRecord shards\n"
    "  convert images DIR OUT --shards N      one folder of JPEGs per class -> TFRecord shards\n"
    "\n"
    "Every command but index takes --compression gzip|zlib|none (input: detected when not\n"
    "given; convert: the output's), and every one -h/--help. A progress bar is drawn on\n"
    "stderr when it is a terminal. Exit status: 0 success, 1 corrupt or unreadable input or\n"
    "failed write, 2 wrong usage.\n"
    "Run 'sluice-record COMMAND --help' for a command's options.\n";

static const char USAGE_CONVERT[] =
    "Usage: sluice-record convert fashion-mnist OUT --shards N [OPTIONS]\n"
    "       sluice-record convert images DIR OUT --shards N [OPTIONS]\n"
    "\n"
    "fashion-mnist: read the idx files {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz from\n"
    "  --src DIR (default /usr/share/datasets/fashion-mnist) and write\n"
    "  OUT/train-00000-of-0000N.tfrecord ... and OUT/test-00000-of-0000N.tfrecord ...\n"
    "  Features: image (784 raw uint8 bytes, or a JPEG with --jpeg), label (int64).\n"
    "images: DIR holds one folder per class (sorted names -> labels 0..K-1, or FIRST..FIRST+K-1\n"
    "  with --first-label) of *.jpg, *.jpeg, *.JPEG files. Writes OUT/SPLIT-0000i-of-0000N.tfrecord\n"
    "  with image/encoded, image/format, image/class/label, image/class/text, image/height,\n"
    "  image/width, image/filename. The files are shuffled with --seed before sharding, so every\n"
    "  shard mixes the classes, as TensorFlow's build_imagenet_data.py does. Every entry that is\n"
    "  not converted is skipped and counted (stderr says why for the first 10, the summary\n"
    "  names the first 3): a file that is not a decodable JPEG, a name without a JPEG ending,\n"
    "  a FIFO, socket, device, folder or dangling symbolic link, in DIR a file that is not a\n"
    "  class folder; none is opened in a way that can block. Hidden names (a leading '.') are\n"
    "  passed over. Exit 1 if no image was written.\n"
    "fashion-mnist, and images with --no-shuffle: records are dealt to shards in contiguous\n"
    "blocks in their original order: shard i of N holds records [i*n/N, (i+1)*n/N) (a skipped\n"
    "image leaves its shard one record short). Files are written under a temporary name and\n"
    "renamed when all are complete.\n"
    "\n"
    "  --shards N        number of output files per split (required, 1..99999)\n"
    "  --compression C   gzip, zlib or none (default none)\n"
    "  --jpeg            fashion-mnist: store each image as a JPEG\n"
    "  --quality Q       JPEG quality 1..100 (default 95)\n"
    "  --src DIR         fashion-mnist: where the idx files are\n"
    "  --limit N         convert only the first N records of each split\n"
    "  --full-decode     images: decode every file to reject damage past the header\n"
    "                    (default: only the header is read, for height and width)\n"
    "  --seed N          images: shuffle seed (default 12345); one seed, one byte-identical output\n"
    "  --no-shuffle      images: keep class-then-file order\n"
    "  --split NAME      images: the shard name prefix (default train; validation, test...)\n"
    "  --validation-fraction F  images: also write validation-*: round(F x n) of each class's\n"
    "                    files (at least 1 and at most n-1 when a class has 2 or more), drawn\n"
    "                    with the seed; the rest go to train-*\n"
    "  --validation-shards N    images: validation shards (default ceil(--shards / 8))\n"
    "  --first-label L   images: label of the first class (default 0; 1 for TensorFlow's\n"
    "                    ImageNet convention, 0 reserved for background)\n"
    "  --strict          images: exit 1 at the first file named like a JPEG that is not a\n"
    "                    readable, decodable one (or an entry of DIR whose kind cannot be told)\n"
    "\n"
    "Exit status: 0 ok, 1 unreadable/corrupt input or failed write, 2 usage.\n";

/* ---- convert: shard writer ------------------------------------------------------------ */

/* Writes `n` records of one split into `shards` files OUT/SPLIT-xxxxx-of-NNNNN.tfrecord,
 * dealing them out in contiguous blocks (shard i holds [i*n/N, (i+1)*n/N)), each under a
 * temporary name until sharded_commit renames them all. */
typedef struct sharded {
    const char *dir, *split;
    int shards, cur;       /* cur: index of the open shard, -1 before the first */
    uint64_t n, written;   /* records in the split, records written so far */
    uint64_t pos;          /* records written or skipped (sharded_skip) so far */
    sl_tfr_write_opts wo;
    sl_tfr_writer *w;
    char **tmp, **final;   /* per shard */
} sharded;

static uint64_t shard_begin(uint64_t n, int shards, int i) {
    return (uint64_t)((unsigned __int128)n * (unsigned)i / (unsigned)shards);
}

static void sharded_abort(sharded *sw) {
    if (sw->w) sl_tfr_writer_close(sw->w);
    sw->w = NULL;
    for (int i = 0; i < sw->shards; i++) {
        if (sw->tmp && sw->tmp[i]) unlink(sw->tmp[i]);
    }
}

static void sharded_free(sharded *sw) {
    for (int i = 0; i < sw->shards; i++) {
        if (sw->tmp) free(sw->tmp[i]);
        if (sw->final) free(sw->final[i]);
    }
    free(sw->tmp);
    free(sw->final);
    sw->tmp = sw->final = NULL;
}

static sl_status sharded_init(sharded *sw, const char *dir, const char *split, int shards,
                              uint64_t n, sl_compression comp) {
    memset(sw, 0, sizeof *sw);
    sw->dir = dir;
    sw->split = split;
    sw->shards = shards;
    sw->cur = -1;
    sw->n = n;
    sw->wo = sl_tfr_write_opts_default();
    sw->wo.compression = comp == SL_COMP_AUTO ? SL_COMP_NONE : comp;
    sw->tmp = calloc((size_t)shards, sizeof *sw->tmp);
    sw->final = calloc((size_t)shards, sizeof *sw->final);
    if (!sw->tmp || !sw->final) return sl_err(SL_ENOMEM, "out of memory");
    for (int i = 0; i < shards; i++) {
        if (asprintf(&sw->final[i], "%s/%s-%05d-of-%05d.tfrecord", dir, split, i, shards) < 0 ||
            asprintf(&sw->tmp[i], "%s/.%s-%05d-of-%05d.tfrecord.tmp%ld", dir, split, i, shards,
                     (long)getpid()) < 0) {
            sw->final[i] = sw->tmp[i] = NULL;
            return sl_err(SL_ENOMEM, "out of memory");
        }
    }
    return SL_OK;
}

/* Make shard `target` the open one, closing the current shard and creating any shards in
 * between (empty when there are more shards than records). */
static sl_status sharded_open_through(sharded *sw, int target) {
    while (sw->cur < target) {
        if (sw->w) {
            sl_status s = sl_tfr_writer_close(sw->w);
            sw->w = NULL;
            if (s != SL_OK) return s;
        }
        sw->cur++;
        sl_status s = sl_tfr_writer_open(sw->tmp[sw->cur], &sw->wo, &sw->w);
        if (s != SL_OK) return s;
    }
    return SL_OK;
}

static sl_status sharded_write(sharded *sw, const void *data, size_t len) {
    int target = sw->cur < 0 ? 0 : sw->cur;
    /* pos < n == shard_begin(n, N, N), so target stays below N. */
    while (sw->pos >= shard_begin(sw->n, sw->shards, target + 1)) target++;
    sl_status s = sharded_open_through(sw, target);
    if (s != SL_OK) return s;
    s = sl_tfr_writer_write(sw->w, data, len);
    if (s != SL_OK) return s;
    sw->written++;
    sw->pos++;
    return SL_OK;
}

/* Pass over the next planned record (an input file that turned out unusable): the shard
 * it was dealt to holds one record fewer, the others keep theirs. */
static void sharded_skip(sharded *sw) { sw->pos++; }

/* Create the trailing (empty) shards and close the last one. The files keep their
 * temporary names until sharded_rename. */
static sl_status sharded_finish(sharded *sw) {
    sl_status s = sharded_open_through(sw, sw->shards - 1);
    if (s != SL_OK) return s;
    s = sl_tfr_writer_close(sw->w);
    sw->w = NULL;
    return s;
}

static sl_status sharded_rename(sharded *sw) {
    for (int i = 0; i < sw->shards; i++) {
        if (rename(sw->tmp[i], sw->final[i]) != 0)
            return sl_err(SL_EIO, "%s: cannot rename to %s: %s", sw->tmp[i], sw->final[i],
                          strerror(errno));
        free(sw->tmp[i]);
        sw->tmp[i] = NULL;
    }
    return SL_OK;
}

/* ---- convert fashion-mnist ------------------------------------------------------------ */

typedef struct convert_opts {
    const char *compression, *src;
    long long shards, quality, limit;
    bool jpeg;
    bool full_decode;      /* images: decode every file, not just its header */
    /* images only: */
    const char *split;          /* shard name prefix (default train) */
    const char *vfrac_arg;      /* --validation-fraction as given */
    double validation_fraction; /* 0: one split */
    long long validation_shards, seed, first_label;
    bool no_shuffle, strict;
} convert_opts;

/* Load one split's images and labels, checking they agree: images uint8 [n,28,28] (any
 * rank-3 HxW works), labels uint8 [n]. */
static int load_idx_split(const char *src, const char *prefix, sl_tensor *img, sl_tensor *lab) {
    char ip[4096], lp[4096];
    snprintf(ip, sizeof ip, "%s/%s-images-idx3-ubyte.gz", src, prefix);
    snprintf(lp, sizeof lp, "%s/%s-labels-idx1-ubyte.gz", src, prefix);
    const char *paths[2] = {ip, lp};
    sl_tensor *dest[2] = {img, lab};
    for (int k = 0; k < 2; k++) {
        sl_status s = sl_idx_read(paths[k], dest[k]);
        if (s != SL_OK) return sl__fail(PROG);
    }
    if (img->dtype != SL_DT_U8 || img->rank != 3) {
        char d[64];
        fprintf(stderr, "%s: %s: expected uint8 images [n,h,w], found %s\n", PROG, ip,
                sl_tensor_describe(img, d, sizeof d));
        return SL__EXIT_FAIL;
    }
    if (lab->dtype != SL_DT_U8 || lab->rank != 1 || lab->dims[0] != img->dims[0]) {
        char d[64];
        fprintf(stderr, "%s: %s: expected uint8 labels [%" PRId64 "], found %s\n", PROG, lp,
                img->dims[0], sl_tensor_describe(lab, d, sizeof d));
        return SL__EXIT_FAIL;
    }
    return SL__EXIT_OK;
}

static int convert_split(const char *out, const char *split, const sl_tensor *img,
                         const sl_tensor *lab, const convert_opts *co, sl_compression comp,
                         sl_exb *b, sharded *sw, uint64_t *count) {
    uint64_t n = (uint64_t)img->dims[0];
    if (co->limit >= 0 && (uint64_t)co->limit < n) n = (uint64_t)co->limit;
    int h = (int)img->dims[1], w = (int)img->dims[2];
    size_t pix = (size_t)h * (size_t)w;
    const uint8_t *images = img->data, *labels = lab->data;
    if (sharded_init(sw, out, split, (int)co->shards, n, comp) != SL_OK) return sl__fail(PROG);
    sl__progress bar;
    sl__progress_start(&bar, split, n);
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *p = images + i * pix;
        uint8_t *enc = NULL, *ser = NULL;
        size_t enc_len = 0, ser_len = 0;
        sl_bytes v = {p, pix};
        int64_t label = labels[i];
        sl_exb_reset(b);
        if (co->jpeg) {
            if (sl_jpeg_encode(p, w, h, 1, (int)co->quality, &enc, &enc_len) != SL_OK) {
                sl__progress_end(&bar);
                return sl__failf(PROG, "%s image %" PRIu64, split, i);
            }
            v = (sl_bytes){enc, enc_len};
        }
        sl_status s = sl_exb_bytes(b, "image", &v, 1);
        if (s == SL_OK) s = sl_exb_int64s(b, "label", &label, 1);
        if (s == SL_OK) s = sl_exb_serialize(b, &ser, &ser_len);
        free(enc);
        if (s == SL_OK) s = sharded_write(sw, ser, ser_len);
        free(ser);
        if (s != SL_OK) {
            sl__progress_end(&bar);
            return sl__failf(PROG, "%s record %" PRIu64, split, i);
        }
        sl__progress_set(&bar, i + 1);
    }
    sl__progress_end(&bar);
    if (sharded_finish(sw) != SL_OK) return sl__fail(PROG);
    *count = n;
    return SL__EXIT_OK;
}

static int convert_fashion_mnist(const char *prog, const char *out, const convert_opts *co,
                                 sl_compression comp) {
    const char *src = co->src ? co->src : "/usr/share/datasets/fashion-mnist";
    sl_tensor img[2] = {SL_TENSOR_EMPTY, SL_TENSOR_EMPTY};
    sl_tensor lab[2] = {SL_TENSOR_EMPTY, SL_TENSOR_EMPTY};
    sharded sw[2];
    memset(sw, 0, sizeof sw);
    sl_exb *b = NULL;
    uint64_t counts[2] = {0, 0};
    static const char *prefixes[2] = {"train", "t10k"}, *splits[2] = {"train", "test"};
    int rc = SL__EXIT_OK;
    double t0 = sl_now_s();
    for (int k = 0; k < 2 && rc == SL__EXIT_OK; k++)
        rc = load_idx_split(src, prefixes[k], &img[k], &lab[k]);
    if (rc) goto done;
    if (sl_mkdirs(out, "output folder") != SL_OK || sl_exb_new(&b) != SL_OK) {
        rc = sl__fail(prog);
        goto done;
    }
    for (int k = 0; k < 2 && rc == SL__EXIT_OK; k++)
        rc = convert_split(out, splits[k], &img[k], &lab[k], co, comp, b, &sw[k], &counts[k]);
    for (int k = 0; k < 2 && rc == SL__EXIT_OK; k++)
        if (sharded_rename(&sw[k]) != SL_OK) rc = sl__fail(PROG);
    if (rc == SL__EXIT_OK)
        printf("wrote %" PRIu64 " train + %" PRIu64 " test records (%s, %s) to %s in %lld+%lld "
               "shards in %.1f s\n",
               counts[0], counts[1], co->jpeg ? "jpeg" : "raw",
               sl_compression_name(comp == SL_COMP_AUTO ? SL_COMP_NONE : comp), out, co->shards,
               co->shards, sl_now_s() - t0);
done:
    for (int k = 0; k < 2; k++) {
        if (rc) sharded_abort(&sw[k]);
        sharded_free(&sw[k]);
        sl_tensor_release(&img[k]);
        sl_tensor_release(&lab[k]);
    }
    sl_exb_free(b);
    return rc;
}

/* ---- convert images ------------------------------------------------------------------- */

typedef struct strlist {
    char **v;
    size_t n, cap;
    /* filled by list_dir, per name: the type bits with symbolic links followed (0 when they
     * cannot be followed), and why not when they cannot (malloc'd; NULL otherwise) */
    unsigned *mode;
    char **why;
} strlist;

static sl_status strlist_push(strlist *l, const char *s) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        char **nv = realloc(l->v, nc * sizeof *nv);
        if (!nv) return sl_err(SL_ENOMEM, "out of memory listing files");
        l->v = nv;
        l->cap = nc;
    }
    if (!(l->v[l->n] = strdup(s))) return sl_err(SL_ENOMEM, "out of memory listing files");
    l->n++;
    return SL_OK;
}

static void strlist_free(strlist *l) {
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i]);
        if (l->why) free(l->why[i]);
    }
    free(l->v);
    free(l->mode);
    free(l->why);
    memset(l, 0, sizeof *l);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* What `path` is, looked at without opening it (opening a FIFO for reading blocks): its type
 * bits with symbolic links followed into *mode, or 0 and a malloc'd reason when the link
 * cannot be followed or the entry cannot be examined at all. */
static char *examine(const char *path, unsigned *mode) {
    struct stat st;
    char *why = NULL, target[4096];
    *mode = 0;
    if (lstat(path, &st) != 0) {
        if (asprintf(&why, "cannot be examined: %s", strerror(errno)) < 0) why = NULL;
    } else if (!S_ISLNK(st.st_mode)) {
        *mode = (unsigned)st.st_mode;
    } else if (stat(path, &st) == 0) {
        *mode = (unsigned)st.st_mode;
    } else {
        int e = errno;
        int r = e == ENOENT && sl_file_dangling_target(path, target, sizeof target)
                    ? asprintf(&why, "is a symbolic link to '%s', which does not exist", target)
                    : asprintf(&why, "is a symbolic link that cannot be followed: %s", strerror(e));
        if (r < 0) why = NULL;
    }
    if (!*mode && !why) why = strdup("cannot be examined: out of memory");
    return why;
}

/* Every name in `dir` but the hidden ones (a leading '.'), sorted bytewise so labels do not
 * depend on the locale, each with what it is (strlist's mode and why). */
static sl_status list_dir(const char *dir, strlist *out) {
    DIR *d = opendir(dir);
    if (!d)
        return sl_err(errno == ENOENT ? SL_ENOTFOUND : SL_EIO, "%s: cannot open directory: %s",
                      dir, strerror(errno));
    struct dirent *e;
    sl_status s = SL_OK;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if ((s = strlist_push(out, e->d_name)) != SL_OK) break;
    }
    closedir(d);
    if (s != SL_OK) return s;
    if (out->n) qsort(out->v, out->n, sizeof *out->v, cmp_str);
    out->mode = calloc(out->n ? out->n : 1, sizeof *out->mode);
    out->why = calloc(out->n ? out->n : 1, sizeof *out->why);
    if (!out->mode || !out->why) return sl_err(SL_ENOMEM, "out of memory listing files");
    for (size_t i = 0; i < out->n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, out->v[i]);
        out->why[i] = examine(p, &out->mode[i]);
    }
    return SL_OK;
}

static bool is_jpeg_name(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot && (strcmp(dot, ".jpg") == 0 || strcmp(dot, ".jpeg") == 0 ||
                   strcmp(dot, ".JPEG") == 0);
}

typedef struct image_item {
    size_t cls;   /* index into the class list */
    char *name;   /* file name inside the class folder (owned by the class's file list) */
} image_item;

/* Items of one class, by file name. */
static int cmp_str_item(const void *a, const void *b) {
    return strcmp(((const image_item *)a)->name, ((const image_item *)b)->name);
}

/* splitmix64: a fixed, portable generator, so one seed gives the same shards everywhere. */
static uint64_t rng_next(uint64_t *x) { return sl_splitmix64(x); }

/* Fisher-Yates: a uniform permutation of v[0..n) drawn from *rng. */
static void shuffle_items(image_item *v, size_t n, uint64_t *rng) {
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(((unsigned __int128)rng_next(rng) * i) >> 64);
        image_item t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

/* The files convert images passed over: how many, the first few by name. */
#define SKIP_NAMED 3
#define SKIP_WARNED 10
typedef struct skip_log {
    size_t n;
    char *first[SKIP_NAMED]; /* "CLASS/FILE" */
} skip_log;

/* Count CLASS/FILE (FILE alone for an entry of DIR itself, cls NULL) as skipped; the first
 * SKIP_WARNED get a line on stderr saying why. */
static void skip_note(skip_log *log, const char *dir, const char *cls, const char *name,
                      const char *why) {
    const char *sep = cls ? "/" : "";
    if (!cls) cls = "";
    if (log->n < SKIP_NAMED && asprintf(&log->first[log->n], "%s%s%s", cls, sep, name) < 0)
        log->first[log->n] = NULL;
    if (log->n < SKIP_WARNED)
        fprintf(stderr, "%s: skipped %s/%s%s%s: %s\n", PROG, dir, cls, sep, name, why);
    else if (log->n == SKIP_WARNED)
        fprintf(stderr, "%s: (further skipped files are counted, not listed)\n", PROG);
    log->n++;
}

/* "skipped N files that are not decodable JPEGs: a/x, b/y, c/z and M more" */
static void skip_print(FILE *f, const skip_log *log) {
    fprintf(f, "skipped %zu %s:", log->n,
            log->n == 1 ? "file that is not a decodable JPEG" : "files that are not decodable JPEGs");
    for (size_t i = 0; i < log->n && i < SKIP_NAMED; i++)
        fprintf(f, "%s %s", i ? "," : "", log->first[i] ? log->first[i] : "?");
    if (log->n > SKIP_NAMED) fprintf(f, " and %zu more", log->n - SKIP_NAMED);
    fputc('\n', f);
}

typedef struct image_ctx {
    const char *dir;
    const strlist *classes;
    const convert_opts *co;
    sl_exb *b;
    sl_jpeg_decoder *dec;
    uint8_t *data, *ser, *pix;
    size_t pix_cap;
    skip_log skips;
    sl__progress bar;
    size_t done;
} image_ctx;

/* The first line of msg (an error about `path`) without the path, which the skip note names
 * once: "PATH: why" and "file 'PATH': why" become "why". */
static const char *reason(const char *msg, const char *path, char *out, size_t cap) {
    size_t pl = strlen(path);
    if (strncmp(msg, path, pl) == 0 && strncmp(msg + pl, ": ", 2) == 0) msg += pl + 2;
    else if (strncmp(msg, "file '", 6) == 0 && strncmp(msg + 6, path, pl) == 0 &&
             strncmp(msg + 6 + pl, "': ", 3) == 0)
        msg += 6 + pl + 3;
    snprintf(out, cap, "%.*s", (int)strcspn(msg, "\n"), msg);
    return out;
}

/* Read and check one file (its JPEG header; every pixel with --full-decode) and write its
 * Example to sw. A file that cannot be read or is not a decodable JPEG is skipped and
 * counted (with --strict: exit 1 naming it); out of memory or a failed write is exit 1. */
static int write_image(image_ctx *x, const image_item *it, sharded *sw) {
    const char *cls = x->classes->v[it->cls];
    char path[4096], why[1024];
    size_t len = 0, ser_len = 0;
    snprintf(path, sizeof path, "%s/%s/%s", x->dir, cls, it->name);
    free(x->data);
    x->data = NULL;
    sl_jpeg_info info;
    sl_status s = sl__read_file(path, &x->data, &len);
    if (s == SL_OK) s = sl_jpeg_header(x->dec, x->data, len, &info);
    if (s == SL_OK && x->co->full_decode) {
        /* Damage past the header (a cut-off entropy stream) only shows when decoding. */
        size_t need = (size_t)info.width * (size_t)info.height * 3;
        if (need > x->pix_cap) {
            free(x->pix);
            x->pix_cap = 0;
            if (!(x->pix = malloc(need))) {
                s = sl_err(SL_ENOMEM, "out of memory for a %dx%d image", info.width,
                           info.height);
            } else {
                x->pix_cap = need;
            }
        }
        int ow, oh;
        if (s == SL_OK) s = sl_jpeg_decode(x->dec, x->data, len, 3, 8, x->pix, x->pix_cap, &ow, &oh);
    }
    if (s != SL_OK) {
        if (s == SL_ENOMEM || x->co->strict) {
            sl__progress_end(&x->bar);
            /* The JPEG layer does not know the path; the message says what was wrong. */
            return strstr(sl_errmsg(), path) ? sl__fail(PROG) : sl__failf(PROG, "%s", path);
        }
        skip_note(&x->skips, x->dir, cls, it->name, reason(sl_errmsg(), path, why, sizeof why));
        sharded_skip(sw);
        return SL__EXIT_OK;
    }
    sl_bytes enc = {x->data, len};
    sl_bytes fmt = {(const uint8_t *)"JPEG", 4};
    sl_bytes text = {(const uint8_t *)cls, strlen(cls)};
    sl_bytes fname = {(const uint8_t *)it->name, strlen(it->name)};
    int64_t label = (int64_t)it->cls + x->co->first_label, hh = info.height, ww = info.width;
    sl_exb_reset(x->b);
    s = sl_exb_bytes(x->b, "image/encoded", &enc, 1);
    if (s == SL_OK) s = sl_exb_bytes(x->b, "image/format", &fmt, 1);
    if (s == SL_OK) s = sl_exb_int64s(x->b, "image/class/label", &label, 1);
    if (s == SL_OK) s = sl_exb_bytes(x->b, "image/class/text", &text, 1);
    if (s == SL_OK) s = sl_exb_int64s(x->b, "image/height", &hh, 1);
    if (s == SL_OK) s = sl_exb_int64s(x->b, "image/width", &ww, 1);
    if (s == SL_OK) s = sl_exb_bytes(x->b, "image/filename", &fname, 1);
    if (s == SL_OK) s = sl_exb_serialize(x->b, &x->ser, &ser_len);
    if (s == SL_OK) s = sharded_write(sw, x->ser, ser_len);
    free(x->ser);
    x->ser = NULL;
    if (s != SL_OK) {
        sl__progress_end(&x->bar);
        return sl__failf(PROG, "%s", path);
    }
    return SL__EXIT_OK;
}

/* An entry that was listed but will not be converted: skipped and counted, or with --strict
 * (when `fatal`) the end of the run: exit 1 naming it. */
static int pass_over(skip_log *skips, bool fatal, const char *dir, const char *cls, const char *name,
                     const char *why) {
    if (!fatal) {
        skip_note(skips, dir, cls, name, why);
        return SL__EXIT_OK;
    }
    fprintf(stderr, "%s: %s/%s%s%s: %s\n", PROG, dir, cls ? cls : "", cls ? "/" : "", name, why);
    return SL__EXIT_FAIL;
}

/* The class folders of dir (sorted) into classes, and each one's entries into *files (an
 * array of classes->n lists, left for the caller to free also on failure), their number
 * into *total. Any other entry of dir is skipped and counted; one whose kind cannot be told
 * (a dangling symbolic link: perhaps a class folder that is gone) ends a --strict run. The
 * exit status, after the message on failure. */
static int list_classes(const char *dir, bool strict, skip_log *skips, strlist *classes, strlist **files,
                        size_t *total) {
    strlist top = {0};
    int rc = list_dir(dir, &top) != SL_OK ? sl__fail(PROG) : SL__EXIT_OK;
    for (size_t i = 0; i < top.n && rc == SL__EXIT_OK; i++) {
        char why[128];
        if (S_ISDIR(top.mode[i])) {
            if (strlist_push(classes, top.v[i]) != SL_OK) rc = sl__fail(PROG);
            continue;
        }
        if (!top.why[i]) snprintf(why, sizeof why, "is %s, not a class folder", sl_file_kind(top.mode[i]));
        rc = pass_over(skips, strict && top.why[i], dir, NULL, top.v[i], top.why[i] ? top.why[i] : why);
    }
    strlist_free(&top);
    if (rc != SL__EXIT_OK) return rc;
    if (classes->n == 0) {
        fprintf(stderr, "%s: %s: no class folders found (expected DIR/CLASS/*.jpg)\n", PROG,
                dir);
        return SL__EXIT_FAIL;
    }
    *files = calloc(classes->n, sizeof **files);
    if (!*files) return sl__failf(PROG, "out of memory");
    *total = 0;
    for (size_t c = 0; c < classes->n; c++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, classes->v[c]);
        if (list_dir(p, &(*files)[c]) != SL_OK) return sl__fail(PROG);
        *total += (*files)[c].n;
    }
    return SL__EXIT_OK;
}

/* Class by class, files sorted: the same tree gives the same items, whatever order the
 * file system lists them in. An entry not named like a JPEG is skipped and counted; one
 * named like one that is not a regular file (a FIFO, a socket, a device, a directory, a
 * dangling symbolic link) too, and it ends a --strict run (the exit status; SL__EXIT_OK
 * otherwise). Validation takes round(n_c * F) of each class's files (at least 1 and at most
 * n_c - 1 when the class has 2 or more), drawn with the seed. */
static int gather_items(const strlist *classes, const strlist *files, const char *dir, const convert_opts *co,
                        int n_splits, skip_log *skips, image_item *items, size_t *n_items, image_item *val,
                        size_t *n_val, uint64_t *rng) {
    for (size_t c = 0; c < classes->n; c++) {
        size_t first = *n_items;
        const strlist *f = &files[c];
        for (size_t i = 0; i < f->n; i++) {
            bool jpeg = is_jpeg_name(f->v[i]), regular = S_ISREG(f->mode[i]);
            if (jpeg && regular) {
                items[(*n_items)++] = (image_item){c, f->v[i]};
                continue;
            }
            char why[128];
            if (!jpeg)
                snprintf(why, sizeof why, "%snot a .jpg, .jpeg or .JPEG file",
                         S_ISDIR(f->mode[i]) ? "is a directory, " : "");
            else if (!f->why[i])
                snprintf(why, sizeof why, "is %s, not a regular file", sl_file_kind(f->mode[i]));
            int rc = pass_over(skips, jpeg && co->strict, dir, classes->v[c], f->v[i],
                               jpeg && f->why[i] ? f->why[i] : why);
            if (rc != SL__EXIT_OK) return rc;
        }
        if (n_splits == 2) {
            size_t nc = *n_items - first;
            size_t nv = (size_t)((double)nc * co->validation_fraction + 0.5);
            if (nc >= 2 && nv < 1) nv = 1;
            if (nc >= 2 && nv > nc - 1) nv = nc - 1;
            if (nc < 2) nv = 0;
            shuffle_items(items + first, nc, rng);
            for (size_t i = 0; i < nv; i++) val[(*n_val)++] = items[first + i];
            /* the rest back in file order, so that --no-shuffle keeps class-then-file order */
            memmove(items + first, items + first + nv, (nc - nv) * sizeof *items);
            *n_items -= nv;
            qsort(items + first, *n_items - first, sizeof *items, cmp_str_item);
            qsort(val + *n_val - nv, nv, sizeof *items, cmp_str_item);
        }
    }
    return SL__EXIT_OK;
}

static int convert_images(const char *prog, const char *dir, const char *out,
                          const convert_opts *co, sl_compression comp) {
    strlist classes = {0};
    strlist *files = NULL;
    image_item *items = NULL;
    size_t n_items = 0;
    /* split 0: --split (default train); split 1: validation with --validation-fraction */
    const char *split_name[2] = {co->split ? co->split : "train", "validation"};
    int split_shards[2] = {(int)co->shards, (int)co->validation_shards};
    size_t split_n[2] = {0, 0};
    image_item *split_items[2] = {NULL, NULL};
    int n_splits = co->validation_fraction > 0 ? 2 : 1;
    sharded sw[2];
    memset(sw, 0, sizeof sw);
    image_ctx x;
    memset(&x, 0, sizeof x);
    x.dir = dir;
    x.classes = &classes;
    x.co = co;
    int rc = SL__EXIT_OK;
    double t0 = sl_now_s();

    size_t total = 0;
    if ((rc = list_classes(dir, co->strict, &x.skips, &classes, &files, &total)) != SL__EXIT_OK) goto done;
    items = calloc(total ? total : 1, sizeof *items);
    split_items[1] = calloc(total ? total : 1, sizeof *items);
    if (!items || !split_items[1]) {
        rc = sl__failf(PROG, "out of memory");
        goto done;
    }
    uint64_t rng = (uint64_t)co->seed;
    if ((rc = gather_items(&classes, files, dir, co, n_splits, &x.skips, items, &n_items, split_items[1],
                           &split_n[1], &rng)) != SL__EXIT_OK)
        goto done;
    split_items[0] = items;
    split_n[0] = n_items;
    for (int k = 0; k < n_splits; k++) {
        if (!co->no_shuffle) shuffle_items(split_items[k], split_n[k], &rng);
        if (co->limit >= 0 && (size_t)co->limit < split_n[k]) split_n[k] = (size_t)co->limit;
    }

    if (sl_mkdirs(out, "output folder") != SL_OK || sl_exb_new(&x.b) != SL_OK ||
        sl_jpeg_decoder_new(&x.dec) != SL_OK) {
        rc = sl__fail(prog);
        goto done;
    }
    for (int k = 0; k < n_splits; k++)
        if (sharded_init(&sw[k], out, split_name[k], split_shards[k], split_n[k], comp) !=
            SL_OK) {
            rc = sl__fail(prog);
            goto done;
        }
    sl__progress_start(&x.bar, "images", split_n[0] + split_n[1]);
    for (int k = 0; k < n_splits && rc == SL__EXIT_OK; k++)
        for (size_t i = 0; i < split_n[k]; i++) {
            if ((rc = write_image(&x, &split_items[k][i], &sw[k])) != SL__EXIT_OK) goto done;
            sl__progress_set(&x.bar, ++x.done);
        }
    sl__progress_end(&x.bar);
    for (int k = 0; k < n_splits; k++)
        if (sharded_finish(&sw[k]) != SL_OK) {
            rc = sl__fail(PROG);
            goto done;
        }
    uint64_t written = sw[0].written + sw[1].written;
    if (written == 0) {
        fprintf(stderr, "%s: %s: no image converted (%zu file%s found); ", PROG, dir, total,
                total == 1 ? "" : "s");
        if (x.skips.n) skip_print(stderr, &x.skips);
        else fputs("no files in the class folders\n", stderr);
        rc = SL__EXIT_FAIL;
        goto done;
    }
    for (int k = 0; k < n_splits; k++)
        if (sharded_rename(&sw[k]) != SL_OK) {
            rc = sl__fail(PROG);
            goto done;
        }
    printf("wrote %" PRIu64 " records of %zu classes to %s:", written, classes.n, out);
    for (int k = 0; k < n_splits; k++)
        printf("%s %s %" PRIu64 " in %d shard%s", k ? "," : "", split_name[k], sw[k].written,
               split_shards[k], split_shards[k] == 1 ? "" : "s");
    if (co->no_shuffle) printf(" (class order)");
    else printf(" (shuffled, seed %lld)", co->seed);
    printf(" in %.1f s\n", sl_now_s() - t0);
    if (x.skips.n) skip_print(stdout, &x.skips);
done:
    for (int k = 0; k < 2; k++) {
        if (rc) sharded_abort(&sw[k]);
        sharded_free(&sw[k]);
    }
    for (size_t i = 0; i < SKIP_NAMED; i++) free(x.skips.first[i]);
    free(x.data);
    free(x.pix);
    free(items);
    free(split_items[1]);
    if (files)
        for (size_t c = 0; c < classes.n; c++) strlist_free(&files[c]);
    free(files);
    strlist_free(&classes);
    sl_exb_free(x.b);
    sl_jpeg_decoder_free(x.dec);
    return rc;
}

static int cmd_convert(int argc, char **argv) {
    const char *prog = "sluice-record convert";
    convert_opts co = {.shards = -1, .quality = 95, .limit = -1, .validation_shards = -1,
                       .seed = -1, .first_label = -1};
    sl__opt opts[] = {
        {"compression", 'c', SL__OPT_STR, &co.compression, 0, 0},
        {"shards", 's', SL__OPT_INT, &co.shards, 1, 99999},
        {"jpeg", 0, SL__OPT_FLAG, &co.jpeg, 0, 0},
        {"quality", 'q', SL__OPT_INT, &co.quality, 1, 100},
        {"src", 0, SL__OPT_STR, &co.src, 0, 0},
        {"limit", 'n', SL__OPT_INT, &co.limit, 0, INT64_MAX},
        {"full-decode", 0, SL__OPT_FLAG, &co.full_decode, 0, 0},
        {"split", 0, SL__OPT_STR, &co.split, 0, 0},
        {"validation-fraction", 0, SL__OPT_STR, &co.vfrac_arg, 0, 0},
        {"validation-shards", 0, SL__OPT_INT, &co.validation_shards, 1, 99999},
        {"seed", 0, SL__OPT_INT, &co.seed, 0, INT64_MAX},
        {"no-shuffle", 0, SL__OPT_FLAG, &co.no_shuffle, 0, 0},
        {"first-label", 0, SL__OPT_INT, &co.first_label, 0, INT32_MAX},
        {"strict", 0, SL__OPT_FLAG, &co.strict, 0, 0},
        {NULL, 0, 0, NULL, 0, 0},
    };
    int npos = 0;
    switch (sl__args_parse(prog, opts, argc, argv, &npos)) {
    case SL__ARGS_HELP: fputs(USAGE_CONVERT, stdout); return SL__EXIT_OK;
    case SL__ARGS_ERROR: return SL__EXIT_USAGE;
    case SL__ARGS_OK: break;
    }
    if (npos == 0) return sl__usage_error(prog, "missing the source kind (fashion-mnist or images)");
    sl_compression comp;
    int rc = sl__record_parse_compression(prog, co.compression, &comp);
    if (rc) return rc;
    if (strcmp(argv[0], "fashion-mnist") == 0) {
        if (npos != 2)
            return sl__usage_error(prog, npos < 2 ? "fashion-mnist: missing OUT"
                                                  : "fashion-mnist: too many arguments");
        if (co.shards < 0) return sl__usage_error(prog, "missing --shards N");
        if (co.full_decode || co.split || co.vfrac_arg || co.validation_shards >= 0 ||
            co.seed >= 0 || co.no_shuffle || co.first_label >= 0 || co.strict)
            return sl__usage_error(prog, "--full-decode, --split, --validation-fraction, "
                                         "--validation-shards, --seed, --no-shuffle, "
                                         "--first-label and --strict apply to images only");
        return convert_fashion_mnist(prog, argv[1], &co, comp);
    }
    if (strcmp(argv[0], "images") == 0) {
        if (npos != 3)
            return sl__usage_error(prog, npos < 3 ? "images: missing DIR or OUT"
                                                  : "images: too many arguments");
        if (co.shards < 0) return sl__usage_error(prog, "missing --shards N");
        if (co.jpeg || co.src)
            return sl__usage_error(prog, "images: --jpeg and --src apply to fashion-mnist only");
        if (co.split && (!co.split[0] || co.split[0] == '.' || strchr(co.split, '/')))
            return sl__usage_error(prog, "--split '%s': expected a name such as train or "
                                         "validation (not empty, no '/', no leading '.')",
                                   co.split);
        if (co.vfrac_arg) {
            char *end;
            errno = 0;
            co.validation_fraction = strtod(co.vfrac_arg, &end);
            if (end == co.vfrac_arg || *end || errno || !(co.validation_fraction > 0) ||
                !(co.validation_fraction < 1))
                return sl__usage_error(prog, "--validation-fraction '%s': expected a number "
                                             "between 0 and 1 (exclusive), such as 0.1",
                                       co.vfrac_arg);
            if (co.split)
                return sl__usage_error(prog, "--split and --validation-fraction do not go "
                                             "together (the latter writes train-* and "
                                             "validation-*)");
            if (co.validation_shards < 0) co.validation_shards = (co.shards + 7) / 8;
        } else if (co.validation_shards >= 0) {
            return sl__usage_error(prog, "--validation-shards needs --validation-fraction");
        }
        if (co.no_shuffle && co.seed >= 0)
            return sl__usage_error(prog, "--seed and --no-shuffle do not go together");
        if (co.seed < 0) co.seed = 12345;
        if (co.first_label < 0) co.first_label = 0;
        return convert_images(prog, argv[1], argv[2], &co, comp);
    }
    return sl__usage_error(prog, "unknown source '%s' (expected fashion-mnist or images)",
                           argv[0]);
}

/* ---- main ----------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    sl__tool_start();
    if (sl__tool_version(PROG, argc, argv)) return sl__tool_exit(PROG, SL__EXIT_OK);
    if (argc < 2) {
        fprintf(stderr, "%s: missing COMMAND\nTry '%s --help' for more information.\n", PROG,
                PROG);
        return sl__tool_exit(PROG, SL__EXIT_USAGE);
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(USAGE, stdout);
        return sl__tool_exit(PROG, SL__EXIT_OK);
    }
    if (strcmp(cmd, "inspect") == 0) return sl__tool_exit(PROG, sl__record_inspect(argc - 2, argv + 2));
    if (strcmp(cmd, "verify") == 0) return sl__tool_exit(PROG, sl__record_verify(argc - 2, argv + 2));
    if (strcmp(cmd, "cat") == 0) return sl__tool_exit(PROG, sl__record_cat(argc - 2, argv + 2));
    if (strcmp(cmd, "index") == 0) return sl__tool_exit(PROG, sl__record_index(argc - 2, argv + 2));
    if (strcmp(cmd, "convert") == 0) return sl__tool_exit(PROG, cmd_convert(argc - 2, argv + 2));
    if (cmd[0] == '-') return sl__tool_exit(PROG, sl__usage_error(PROG, "unknown option '%s' (options follow the COMMAND)", cmd));
    return sl__tool_exit(PROG, sl__usage_error(PROG, "unknown command '%s'", cmd));
}
