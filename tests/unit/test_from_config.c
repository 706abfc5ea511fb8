/* pipeline/from_config*.c: config blocks -> dataset graphs -> exact elements; every error
 * message exactly (file:line:col, the line, the caret, the hint); --set overrides; shard
 * auto choosing file or data (told apart by which elements come out). */
#include <stdlib.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/config.h"
#include "sluice/example.h"
#include "sluice/from_config.h"
#include "sluice/jpeg.h"
#include "sluice/pipeline.h"
#include "sluice/tfrecord.h"
#include "helper_files.h"
#include "helper_iter.h"
#include "test.h"

static sl_cfg *parse_named(const char *text, const char *filename) {
    sl_cfg *c = NULL;
    if (sl_cfg_parse(text, strlen(text), filename, &c) != SL_OK) {
        printf("  unexpected parse error: %s\n", sl_errmsg());
        return NULL;
    }
    return c;
}

static sl_cfg *parse(const char *text) { return parse_named(text, "p.sl"); }

/* Every int64 value of component `comp` of every element, flattened, into out; sizes[k]
 * gets element k's count of values (when sizes is not NULL). Returns the number of values,
 * or -1 on an error (message printed). */
static int drain(sl_dataset *ds, uint64_t seed, const char *comp, int64_t *out, int cap, int *sizes, int *nelems) {
    sl_iter_opts o = sl_iter_opts_default();
    o.seed = seed;
    sl_iter *it;
    if (sl_iter_create(ds, &o, &it)) {
        printf("  iter_create: %s\n", sl_errmsg());
        return -1;
    }
    sl_element e;
    sl_element_init(&e);
    int n = 0, k = 0;
    sl_status s;
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        int c = sl_element_find(&e, comp);
        if (c < 0 || e.t[c].dtype != SL_DT_I64) {
            printf("  no int64 component '%s'\n", comp);
            sl_element_clear(&e);
            sl_iter_close(it);
            return -1;
        }
        int64_t m = sl_tensor_numel(&e.t[c]);
        for (int64_t i = 0; i < m && n < cap; i++) out[n++] = ((int64_t *)e.t[c].data)[i];
        if (sizes) sizes[k] = (int)m;
        k++;
        sl_element_clear(&e);
    }
    sl_iter_close(it);
    if (nelems) *nelems = k;
    if (s != SL_END) {
        printf("  iteration failed: %s\n", sl_errmsg());
        return -1;
    }
    return n;
}

static sl_status build(const char *text, const char *name, const sl_pipeline_env *env, sl_dataset **ds) {
    sl_cfg *c = parse(text);
    if (!c) return SL_EINTERNAL;
    sl_status s = sl_pipeline_from_config(c, name, env, ds);
    sl_cfg_free(c); /* the dataset must not need the config any more */
    return s;
}

TEST(test_range_ops) {
    sl_dataset *ds;
    ASSERT_OK(build("pipeline p {\n"
                    "    range 0 20      # 0..19\n"
                    "    filter value lt 10\n"
                    "    skip 1\n"
                    "    take 6\n"
                    "    batch 4\n"
                    "}\n",
                    "p", NULL, &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "batch");
    int64_t v[64];
    int sizes[8], ne;
    ASSERT_EQ(drain(ds, 0, "value", v, 64, sizes, &ne), 6);
    ASSERT_EQ(ne, 2);
    ASSERT_EQ(sizes[0], 4);
    ASSERT_EQ(sizes[1], 2);
    for (int i = 0; i < 6; i++) ASSERT_EQ(v[i], i + 1);
    sl_dataset_unref(ds);

    /* step, repeat, drop_remainder, cache, prefetch */
    ASSERT_OK(build("pipeline p {\n range 10 0 -3\n cache\n repeat 2\n batch 3 drop_remainder\n prefetch 2\n}\n",
                    "p", NULL, &ds));
    ASSERT_EQ(drain(ds, 0, "value", v, 64, sizes, &ne), 6); /* 10 7 4 1 10 7 | 4 1 dropped */
    ASSERT_EQ(ne, 2);
    static const int64_t want[] = {10, 7, 4, 1, 10, 7};
    for (int i = 0; i < 6; i++) ASSERT_EQ(v[i], want[i]);
    sl_dataset_unref(ds);

    /* repeat with no count goes on: take bounds it */
    ASSERT_OK(build("pipeline p {\n range 0 2\n repeat\n take 5\n}\n", "p", NULL, &ds));
    ASSERT_EQ(drain(ds, 0, "value", v, 64, NULL, NULL), 5);
    ASSERT_EQ(v[4], 0);
    sl_dataset_unref(ds);
}

TEST(test_filter_comparisons) {
    /* each comparison over 0..9 against 4, written as a symbol in quotes and as a word */
    static const struct { const char *sym, *word; int count; int64_t first; } cases[] = {
        {"==", "eq", 1, 4}, {"!=", "ne", 9, 0}, {"<", "lt", 4, 0},
        {"<=", "le", 5, 0}, {">", "gt", 5, 5}, {">=", "ge", 6, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int form = 0; form < 3; form++) { /* "<" quoted, lt, and < bare */
            char text[256];
            if (form == 0) snprintf(text, sizeof text, "pipeline p {\n range 0 10\n filter value \"%s\" 4\n}\n", cases[i].sym);
            else if (form == 1) snprintf(text, sizeof text, "pipeline p {\n range 0 10\n filter value %s 4\n}\n", cases[i].word);
            else snprintf(text, sizeof text, "pipeline p {\n range 0 10\n filter value %s 4\n}\n", cases[i].sym);
            sl_dataset *ds;
            int64_t v[16];
            ASSERT_OK(build(text, "p", NULL, &ds));
            ASSERT_EQ(drain(ds, 0, "value", v, 16, NULL, NULL), cases[i].count);
            ASSERT_EQ(v[0], cases[i].first);
            sl_dataset_unref(ds);
        }
    }
    /* a fractional bound compares as a number */
    sl_dataset *ds;
    int64_t v[16];
    ASSERT_OK(build("pipeline p {\n range 0 10\n filter value lt 2.5\n}\n", "p", NULL, &ds));
    ASSERT_EQ(drain(ds, 0, "value", v, 16, NULL, NULL), 3);
    sl_dataset_unref(ds);
}

TEST(test_filter_runtime_error_and_ignore_errors) {
    sl_dataset *ds;
    ASSERT_OK(build("pipeline p {\n range 0 3\n filter label lt 5\n}\n", "p", NULL, &ds));
    sl_iter *it;
    ASSERT_OK(sl_iter_create(ds, NULL, &it));
    sl_element e;
    sl_element_init(&e);
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'p/filter': filter label < 5: no component 'label' (the element has: value)");
    sl_iter_close(it);
    sl_dataset_unref(ds);
    /* ignore_errors skips and counts them */
    ASSERT_OK(build("pipeline p {\n range 0 3\n filter label lt 5\n ignore_errors\n}\n", "p", NULL, &ds));
    ASSERT_OK(sl_iter_create(ds, NULL, &it));
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    ASSERT_EQ(sl_iter_errors_ignored(it), 3);
    sl_iter_close(it);
    sl_dataset_unref(ds);
}

TEST(test_map_functions_on_range) {
    sl_dataset *ds;
    ASSERT_OK(build("pipeline p {\n"
                    "    range 0 6\n"
                    "    map cast(value, float32)\n"
                    "        | scale(value, 1/2) parallel=2\n"
                    "    batch 3\n"
                    "}\n",
                    "p", NULL, &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "map_batch"); /* batch right after map fuses */
    sl_iter *it;
    ASSERT_OK(sl_iter_create(ds, NULL, &it));
    sl_element e;
    sl_element_init(&e);
    for (int k = 0; k < 2; k++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(e.t[0].dtype, SL_DT_F32);
        ASSERT_EQ(e.t[0].rank, 1);
        ASSERT_EQ(e.t[0].dims[0], 3);
        for (int i = 0; i < 3; i++) ASSERT(((float *)e.t[0].data)[i] == (float)(3 * k + i) * 0.5f);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    /* one_hot by position and by name give the same thing */
    ASSERT_OK(build("pipeline p {\n range 1 3\n map one_hot(value, depth=4)\n batch 2\n}\n", "p", NULL, &ds));
    ASSERT_OK(sl_iter_create(ds, NULL, &it));
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_EQ(e.t[0].dtype, SL_DT_F32);
    ASSERT_EQ(e.t[0].rank, 2);
    ASSERT_EQ(e.t[0].dims[1], 4);
    static const float hot[8] = {0, 1, 0, 0, 0, 0, 1, 0};
    ASSERT_MEMEQ(e.t[0].data, hot, sizeof hot);
    sl_element_clear(&e);
    sl_iter_close(it);
    sl_dataset_unref(ds);
}

/* ---- files ---- */

static char tmpdir[64];

/* nfiles files DIR/part-K.tfrecord of 4 Examples each: label = 10*K + i, image = "K-i". */
static sl_status write_files(int nfiles, sl_compression comp) {
    sl_exb *b;
    sl_status s = sl_exb_new(&b);
    if (s) return s;
    for (int k = 0; k < nfiles && !s; k++) {
        char path[128];
        snprintf(path, sizeof path, "%s/part-%d.tfrecord%s", tmpdir, k, comp == SL_COMP_GZIP ? ".gz" : "");
        sl_tfr_write_opts wo = sl_tfr_write_opts_default();
        wo.compression = comp;
        sl_tfr_writer *w;
        if ((s = sl_tfr_writer_open(path, &wo, &w))) break;
        for (int i = 0; i < 4 && !s; i++) {
            int64_t label = 10 * k + i;
            char img[16];
            snprintf(img, sizeof img, "%d-%d", k, i);
            sl_bytes ib = {(const uint8_t *)img, strlen(img)};
            uint8_t *ser = NULL;
            size_t len;
            sl_exb_reset(b);
            if (!(s = sl_exb_int64s(b, "label", &label, 1)) && !(s = sl_exb_bytes(b, "image", &ib, 1)) &&
                !(s = sl_exb_serialize(b, &ser, &len)))
                s = sl_tfr_writer_write(w, ser, len);
            free(ser);
        }
        sl_status c = sl_tfr_writer_close(w);
        if (!s) s = c;
    }
    sl_exb_free(b);
    return s;
}

static void clean_dir(void) {
    if (sl_test_rm_rf(tmpdir) != 0) printf("  could not remove %s\n", tmpdir);
}

static sl_status build_in_dir(const char *body, const sl_pipeline_env *env, sl_dataset **ds) {
    char text[1024], fname[128];
    snprintf(text, sizeof text, "pipeline p {\n%s}\n", body);
    snprintf(fname, sizeof fname, "%s/p.sl", tmpdir); /* relative paths start in tmpdir */
    sl_cfg *c = parse_named(text, fname);
    if (!c) return SL_EINTERNAL;
    sl_status s = sl_pipeline_from_config(c, "p", env, ds);
    sl_cfg_free(c);
    return s;
}

#define PARSE_LABELS " map parse_example(label: int64, image: bytes)\n"

TEST(test_files_in_order_and_options) {
    ASSERT(sl_test_mkdtemp(tmpdir, sizeof tmpdir, "sluice-fc"));
    ASSERT_OK(write_files(3, SL_COMP_NONE));
    sl_dataset *ds;
    int64_t v[64];
    ASSERT_OK(build_in_dir(" files \"part-*.tfrecord\"\n" PARSE_LABELS, NULL, &ds));
    ASSERT_EQ(drain(ds, 0, "label", v, 64, NULL, NULL), 12);
    for (int i = 0; i < 12; i++) ASSERT_EQ(v[i], 10 * (i / 4) + i % 4);
    sl_dataset_unref(ds);
    /* several patterns (overlapping ones count each file once), a base_dir from env */
    sl_pipeline_env env = sl_pipeline_env_default();
    env.base_dir = tmpdir;
    sl_cfg *c = parse("pipeline q {\n files \"part-2.tfrecord\" part-1.tfrecord\n" PARSE_LABELS "}\n");
    ASSERT(c);
    ASSERT_OK(sl_pipeline_from_config(c, "q", &env, &ds));
    sl_cfg_free(c);
    ASSERT_EQ(drain(ds, 0, "label", v, 64, NULL, NULL), 8);
    ASSERT_EQ(v[0], 20); /* the files as written, in the order given */
    ASSERT_EQ(v[4], 10);
    sl_dataset_unref(ds);
    /* interleave: cycle 2, block 1 over files 0 and 1, then 2 */
    ASSERT_OK(build_in_dir(" files \"part-*.tfrecord\"\n interleave cycle=2 block=1 parallel=0\n" PARSE_LABELS, NULL, &ds));
    ASSERT_EQ(drain(ds, 0, "label", v, 64, NULL, NULL), 12);
    static const int64_t il[12] = {0, 10, 1, 11, 2, 12, 3, 13, 20, 21, 22, 23};
    for (int i = 0; i < 12; i++) ASSERT_EQ(v[i], il[i]);
    sl_dataset_unref(ds);
    /* the op's parallelism bound is the statement's: 257 is refused at the option, 256 builds */
    ASSERT_EQ(build_in_dir(" files \"part-*.tfrecord\"\n interleave parallel=257\n" PARSE_LABELS, NULL, &ds), SL_ERANGE);
    ASSERT_CONTAINS(sl_errmsg(), "p.sl:3:22: 257 is outside 0..256");
    ASSERT(ds == NULL);
    ASSERT_OK(build_in_dir(" files \"part-*.tfrecord\"\n interleave parallel=256\n" PARSE_LABELS, NULL, &ds));
    sl_dataset_unref(ds);
    /* shuffled files: whole files in some order, each file's records in order */
    ASSERT_OK(build_in_dir(" files \"part-*.tfrecord\" shuffle=true seed=5\n" PARSE_LABELS, NULL, &ds));
    ASSERT_EQ(drain(ds, 0, "label", v, 64, NULL, NULL), 12);
    int seen = 0;
    for (int f = 0; f < 3; f++) {
        int64_t k = v[4 * f] / 10;
        for (int i = 0; i < 4; i++) ASSERT_EQ(v[4 * f + i], 10 * k + i);
        seen |= 1 << k;
    }
    ASSERT_EQ(seen, 7);
    sl_dataset_unref(ds);
    /* feature types: a default for a missing feature, a shape, a renamed output */
    ASSERT_OK(build_in_dir(" files part-1.tfrecord\n"
                           " map parse_example(label: int64(1), extra: int64(2, default=7), image: bytes(as=img))\n"
                           " take 1\n",
                           NULL, &ds));
    sl_iter *it;
    sl_element e;
    sl_element_init(&e);
    ASSERT_OK(sl_iter_create(ds, NULL, &it));
    ASSERT_OK(sl_iter_next(it, &e));
    int li = sl_element_find(&e, "label"), xi = sl_element_find(&e, "extra"), ii = sl_element_find(&e, "img");
    ASSERT(li >= 0 && xi >= 0 && ii >= 0);
    ASSERT_EQ(sl_element_find(&e, "record"), -1);
    ASSERT_EQ(e.t[li].rank, 1);
    ASSERT_EQ(((int64_t *)e.t[li].data)[0], 10);
    ASSERT_EQ(e.t[xi].dims[0], 2);
    ASSERT_EQ(((int64_t *)e.t[xi].data)[1], 7);
    ASSERT_EQ(((sl_bytes *)e.t[ii].data)[0].len, 3);
    ASSERT_MEMEQ(((sl_bytes *)e.t[ii].data)[0].ptr, "1-0", 3);
    sl_element_clear(&e);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    /* a corrupt last record: skip_corrupt=true drops it; without, the error names file and offset */
    {
        char src[128], dst[128];
        snprintf(src, sizeof src, "%s/part-0.tfrecord", tmpdir);
        snprintf(dst, sizeof dst, "%s/bad.rec", tmpdir);
        FILE *in = fopen(src, "rb"), *outf = fopen(dst, "wb");
        ASSERT(in && outf);
        unsigned char buf[4096];
        size_t n = fread(buf, 1, sizeof buf, in);
        ASSERT(n > 16 && n < sizeof buf);
        buf[n - 1] ^= 0xff; /* the last record's data CRC */
        ASSERT_EQ(fwrite(buf, 1, n, outf), n);
        fclose(in);
        fclose(outf);
    }
    ASSERT_OK(build_in_dir(" files bad.rec skip_corrupt=true\n" PARSE_LABELS, NULL, &ds));
    ASSERT_EQ(drain(ds, 0, "label", v, 64, NULL, NULL), 3);
    sl_dataset_unref(ds);
    ASSERT_OK(build_in_dir(" files bad.rec\n" PARSE_LABELS, NULL, &ds));
    ASSERT_OK(sl_iter_create(ds, NULL, &it));
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "op 'p/files': ");
    ASSERT_CONTAINS(sl_errmsg(), "/bad.rec: byte ");
    sl_iter_close(it);
    sl_dataset_unref(ds);
    /* gzip files, with compression given */
    ASSERT_OK(write_files(1, SL_COMP_GZIP));
    ASSERT_OK(build_in_dir(" files \"*.gz\" compression=gzip skip_corrupt=false\n" PARSE_LABELS, NULL, &ds));
    ASSERT_EQ(drain(ds, 0, "label", v, 64, NULL, NULL), 4);
    ASSERT_EQ(v[3], 3);
    sl_dataset_unref(ds);
    clean_dir();
}

/* ---- errors that say where: file, record offset, statement ---- */

/* DIR/NAME of 5 Examples {image: bytes, height: int64, label: int64, raw: bytes}; record
 * `bad` (0-based) is spoiled as `how` says: 'L' lacks label, 'J' has an image that is not a
 * JPEG, 'R' has a raw of 3 bytes instead of 4. The byte offset of each record goes into
 * offs[]. image is a real 8x8 JPEG otherwise. */
static sl_status write_spoiled(const char *name, int bad, char how, uint64_t *offs) {
    uint8_t px[64], *jpg = NULL;
    size_t jlen;
    for (int i = 0; i < 64; i++) px[i] = (uint8_t)(4 * i);
    sl_status s = sl_jpeg_encode(px, 8, 8, 1, 90, &jpg, &jlen);
    if (s) return s;
    sl_exb *b;
    if ((s = sl_exb_new(&b))) {
        free(jpg);
        return s;
    }
    char path[160];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    sl_tfr_write_opts wo = sl_tfr_write_opts_default();
    sl_tfr_writer *w;
    uint64_t off = 0;
    if (!(s = sl_tfr_writer_open(path, &wo, &w))) {
        for (int i = 0; i < 5 && !s; i++) {
            bool spoil = i == bad;
            sl_bytes ib = spoil && how == 'J' ? (sl_bytes){(const uint8_t *)"not a jpeg", 10} : (sl_bytes){jpg, jlen};
            sl_bytes rb = {(const uint8_t *)"abcd", spoil && how == 'R' ? 3 : 4};
            int64_t h = 8, label = i;
            uint8_t *ser = NULL;
            size_t len;
            sl_exb_reset(b);
            if (!(s = sl_exb_bytes(b, "image", &ib, 1)) && !(s = sl_exb_int64s(b, "height", &h, 1)) &&
                !(spoil && how == 'L' ? 0 : (s = sl_exb_int64s(b, "label", &label, 1))) &&
                !(s = sl_exb_bytes(b, "raw", &rb, 1)) && !(s = sl_exb_serialize(b, &ser, &len))) {
                offs[i] = off;
                off += 12 + len + 4; /* length, its CRC, the data, its CRC */
                s = sl_tfr_writer_write(w, ser, len);
            }
            free(ser);
        }
        sl_status c = sl_tfr_writer_close(w);
        if (!s) s = c;
    }
    sl_exb_free(b);
    free(jpg);
    return s;
}

/* Run the pipeline to its first error; its code (SL_END / SL_OK if none), *got elements
 * before it. */
static sl_status first_error(sl_dataset *ds, int *got) {
    sl_iter *it;
    sl_status s = sl_iter_create(ds, NULL, &it);
    if (s) return s;
    sl_element e;
    sl_element_init(&e);
    *got = 0;
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        (*got)++;
        sl_element_clear(&e);
    }
    sl_error err;
    sl_err_save(&err);
    sl_iter_close(it);
    sl_err_restore(&err);
    return s;
}

TEST(test_data_errors_say_where) {
    ASSERT(sl_test_mkdtemp(tmpdir, sizeof tmpdir, "sluice-fc"));
    uint64_t offs[5];
    char want[1024];
    int got;
    sl_dataset *ds;

    /* the 3rd record lacks 'label': the file, the record's offset, the map statement (line
     * 3 of p.sl), the function, and what the record does have */
    ASSERT_OK(write_spoiled("nolabel.tfrecord", 2, 'L', offs));
    ASSERT(offs[2] > 0);
    ASSERT_OK(build_in_dir(" files \"nolabel.tfrecord\"\n"
                           " map parse_example(label: int64, image: bytes)\n", NULL, &ds));
    ASSERT_EQ(first_error(ds, &got), SL_EINVAL);
    ASSERT_EQ(got, 2);
    snprintf(want, sizeof want,
             "%s/nolabel.tfrecord: byte %llu: op 'p/map' (%s/p.sl:3): parse_example: feature 'label' is "
             "missing (and has no default); the record has: image (bytes), height (int64), raw (bytes)",
             tmpdir, (unsigned long long)offs[2], tmpdir);
    ASSERT_STREQ(sl_errmsg(), want);
    sl_dataset_unref(ds);

    /* the same through interleave, shuffle and a map fused with batch (map_batch): the
     * origin travels with the element, the map's statement is still named */
    ASSERT_OK(build_in_dir(" files \"nolabel.tfrecord\"\n interleave cycle=2\n shuffle 3 seed=7\n"
                           " map parse_example(label: int64, image: bytes)\n batch 2\n", NULL, &ds));
    ASSERT_STREQ(sl_dataset_op(ds), "map_batch");
    ASSERT_EQ(first_error(ds, &got), SL_EINVAL);
    snprintf(want, sizeof want,
             "%s/nolabel.tfrecord: byte %llu: op 'p/map' (%s/p.sl:5): parse_example: feature 'label' is missing",
             tmpdir, (unsigned long long)offs[2], tmpdir);
    ASSERT_EQ(strncmp(sl_errmsg(), want, strlen(want)), 0);
    sl_dataset_unref(ds);

    /* ignore_errors still skips and counts them */
    ASSERT_OK(build_in_dir(" files \"nolabel.tfrecord\"\n map parse_example(label: int64, image: bytes)\n"
                           " ignore_errors\n", NULL, &ds));
    sl_iter *it;
    ASSERT_OK(sl_iter_create(ds, NULL, &it));
    int n = sl_test_drain(it);
    ASSERT_EQ(n, 4);
    ASSERT_EQ(sl_iter_errors_ignored(it), 1);
    sl_iter_close(it);
    sl_dataset_unref(ds);

    /* decode_jpeg on bytes that are not a JPEG (4th record) */
    ASSERT_OK(write_spoiled("notjpeg.tfrecord", 3, 'J', offs));
    ASSERT_OK(build_in_dir(" files \"notjpeg.tfrecord\"\n"
                           " map parse_example(image: bytes, label: int64)\n"
                           "     | decode_jpeg(image)\n", NULL, &ds));
    ASSERT_EQ(first_error(ds, &got), SL_ECORRUPT);
    ASSERT_EQ(got, 3);
    snprintf(want, sizeof want, "%s/notjpeg.tfrecord: byte %llu: op 'p/map' (%s/p.sl:3): decode_jpeg: 'image': jpeg: ",
             tmpdir, (unsigned long long)offs[3], tmpdir);
    ASSERT_EQ(strncmp(sl_errmsg(), want, strlen(want)), 0);
    sl_dataset_unref(ds);

    /* decode_raw with a wrong byte count (1st record) */
    ASSERT_OK(write_spoiled("shortraw.tfrecord", 0, 'R', offs));
    ASSERT_OK(build_in_dir(" files \"shortraw.tfrecord\"\n"
                           " map parse_example(raw: bytes, label: int64) | decode_raw(raw, uint8, 4)\n", NULL, &ds));
    ASSERT_EQ(first_error(ds, &got), SL_EINVAL);
    ASSERT_EQ(got, 0);
    snprintf(want, sizeof want, "%s/shortraw.tfrecord: byte 0: op 'p/map' (%s/p.sl:3): decode_raw: 'raw' holds 3 "
             "bytes but uint8[4] needs 4", tmpdir, tmpdir);
    ASSERT_STREQ(sl_errmsg(), want);
    sl_dataset_unref(ds);
    clean_dir();
}

/* Pixel limits in the config: a resize target over max_pixels is refused where it is
 * written; max_pixels= raises it; decode_jpeg(max_pixels=) refuses an image over it. */
TEST(test_max_pixels_option) {
    sl_dataset *ds;
    ASSERT_EQ(build("pipeline p {\n range 0 1\n map resize(image, 100000x100000)\n}\n", "p", NULL, &ds), SL_ERANGE);
    ASSERT_STREQ(sl_errmsg(), "p.sl:3:20: resize: the target 100000x100000 is 10000000000 pixels, over the limit of "
                              "89478485\n     map resize(image, 100000x100000)\n                       ^~~~~~~~~~~~~\n"
                              "---> HINT: if you mean it, raise the limit: resize(..., max_pixels=10000000000)");
    ASSERT_EQ(build("pipeline p {\n range 0 1\n map random_resized_crop(image, 20000)\n}\n", "p", NULL, &ds),
              SL_ERANGE);
    ASSERT_EQ(build("pipeline p {\n range 0 1\n map center_crop(image, 10x10, max_pixels=99)\n}\n", "p", NULL, &ds),
              SL_ERANGE);
    ASSERT_OK(build("pipeline p {\n range 0 1\n map center_crop(image, 10x10, max_pixels=100)\n}\n", "p", NULL, &ds));
    sl_dataset_unref(ds);
    ASSERT_OK(build("pipeline p {\n range 0 1\n map resize(image, 100000x100000, max_pixels=10000000000)\n}\n", "p",
                    NULL, &ds));
    sl_dataset_unref(ds);
    ASSERT_EQ(build("pipeline p {\n range 0 1\n map decode_jpeg(image, max_pixels=0)\n}\n", "p", NULL, &ds),
              SL_ERANGE);
    ASSERT_CONTAINS(sl_errmsg(), "p.sl:3:");

    /* decode_jpeg's limit at work: 8x8 images pass under 64 and fail under 63 */
    ASSERT(sl_test_mkdtemp(tmpdir, sizeof tmpdir, "sluice-fc"));
    uint64_t offs[5];
    int got;
    ASSERT_OK(write_spoiled("ok.tfrecord", -1, 0, offs));
    ASSERT_OK(build_in_dir(" files \"ok.tfrecord\"\n map parse_example(image: bytes) | decode_jpeg(image, max_pixels=64)\n",
                           NULL, &ds));
    ASSERT_EQ(first_error(ds, &got), SL_END);
    ASSERT_EQ(got, 5);
    sl_dataset_unref(ds);
    ASSERT_OK(build_in_dir(" files \"ok.tfrecord\"\n map parse_example(image: bytes) | decode_jpeg(image, max_pixels=63)\n",
                           NULL, &ds));
    ASSERT_EQ(first_error(ds, &got), SL_ERANGE);
    ASSERT_EQ(got, 0);
    char want[512];
    snprintf(want, sizeof want, "%s/ok.tfrecord: byte 0: op 'p/map' (%s/p.sl:3): decode_jpeg: 'image': the JPEG is 8x8 "
             "(64 pixels), over decode_jpeg's limit of 63 pixels\n---> HINT: ", tmpdir, tmpdir);
    ASSERT_EQ(strncmp(sl_errmsg(), want, strlen(want)), 0);
    ASSERT_CONTAINS(sl_errmsg(), "decode_jpeg(image, max_pixels=64)");
    sl_dataset_unref(ds);
    clean_dir();
}

TEST(test_shard_auto_picks_file_or_data) {
    ASSERT(sl_test_mkdtemp(tmpdir, sizeof tmpdir, "sluice-fc"));
    ASSERT_OK(write_files(3, SL_COMP_NONE));
    sl_dataset *ds;
    int64_t v[64];
    sl_pipeline_env env = sl_pipeline_env_default();
    static const struct {
        int shards, index; /* the environment's */
        const char *ops;   /* the pipeline after its files statement */
        int n, nwant;      /* elements, and how many of them are checked */
        int64_t want[8];
    } cases[] = {
        /* 3 files, 2 replicas: by file; replica 1 reads file 1 only */
        {2, 1, " shard auto\n" PARSE_LABELS, 4, 4, {10, 11, 12, 13}},
        /* replica 0 of 2 with interleave: files 0 and 2, interleaved */
        {2, 0, " shard\n interleave cycle=2 block=2\n" PARSE_LABELS, 8, 8, {0, 1, 20, 21, 2, 3, 22, 23}},
        /* 3 files, 4 replicas: by data; replica 1 keeps records 1, 5, 9 */
        {4, 1, " shard auto\n" PARSE_LABELS, 3, 3, {1, 11, 21}},
        /* by data, then interleave: the records of the interleaved stream are sharded */
        {4, 1, " shard\n interleave cycle=3 block=1\n" PARSE_LABELS, 3, 3, {10, 21, 3}},
        /* num/index options beat env; shard data forces data even with enough files */
        {4, 1, " shard data num=2 index=0\n" PARSE_LABELS, 6, 6, {0, 2, 10, 12, 20, 22}},
        /* auto after other ops shards the elements, whatever the file count */
        {3, 2, PARSE_LABELS " shard auto\n", 4, 2, {2, 11}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        env.num_shards = cases[c].shards;
        env.shard_index = cases[c].index;
        char text[256];
        snprintf(text, sizeof text, " files \"part-*.tfrecord\"\n%s", cases[c].ops);
        ASSERT_OK(build_in_dir(text, &env, &ds));
        int n = drain(ds, 0, "label", v, 64, NULL, NULL);
        if (n != cases[c].n) {
            FAILF("case %zu: %d elements, expected %d", c, n, cases[c].n);
            return;
        }
        for (int i = 0; i < cases[c].nwant; i++)
            if (v[i] != cases[c].want[i]) {
                FAILF("case %zu: element %d is %lld, expected %lld", c, i, (long long)v[i], (long long)cases[c].want[i]);
                return;
            }
        sl_dataset_unref(ds);
    }
    /* file sharding on a range source is an error; data is fine */
    ASSERT_EQ(build("pipeline p {\n range 0 10\n shard file\n}\n", "p", &env, &ds), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "p.sl:3:2: shard file needs a files source\n     shard file\n     ^~~~~\n"
                              "---> HINT: use shard data to keep every 3-th element");
    ASSERT_OK(build("pipeline p {\n range 0 10\n shard\n}\n", "p", &env, &ds));
    ASSERT_EQ(drain(ds, 0, "value", v, 64, NULL, NULL), 3);
    ASSERT_EQ(v[2], 8);
    sl_dataset_unref(ds);
    /* explicit file sharding with too few files */
    env.num_shards = 4;
    env.shard_index = 0;
    ASSERT_EQ(build_in_dir(" files \"part-*.tfrecord\"\n shard file\n", &env, &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), ":3:2: shard file: 3 files for 4 shards: some replicas would read nothing\n");
    clean_dir();
}

/* Builds `text`'s pipeline p with env and returns what was logged to stderr meanwhile. */
static void build_capturing_stderr(const char *text, const sl_pipeline_env *env, char *log, size_t cap) {
    char path[] = "/tmp/sluice-fc-log-XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    fflush(stderr);
    dup2(fd, 2);
    sl_dataset *ds = NULL;
    sl_status s = build(text, "p", env, &ds);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    sl_dataset_unref(ds);
    ssize_t n = pread(fd, log, cap - 1, 0);
    log[n > 0 ? n : 0] = 0;
    if (s) snprintf(log, cap, "build failed: %s", sl_errmsg());
    close(fd);
    unlink(path);
}

/* A pipeline read by several replicas with no shard statement: every replica reads all of
 * it, and shard 0 says so once; with a shard statement, or one replica, nothing is said. */
TEST(test_unsharded_pipeline_warns) {
    char log[2048];
    sl_pipeline_env env = sl_pipeline_env_default();
    env.num_shards = 2;
    build_capturing_stderr("pipeline p {\n range 0 10\n batch 2\n}\n", &env, log, sizeof log);
    ASSERT_CONTAINS(log, "pipeline 'p': read by 2 replicas, but it has no `shard` statement, so every replica "
                         "reads all of its data; add `shard auto` after `files` to give each replica its own part");
    env.shard_index = 1;
    build_capturing_stderr("pipeline p {\n range 0 10\n batch 2\n}\n", &env, log, sizeof log);
    ASSERT_STREQ(log, "");
    env.shard_index = 0;
    build_capturing_stderr("pipeline p {\n range 0 10\n shard\n batch 2\n}\n", &env, log, sizeof log);
    ASSERT_STREQ(log, "");
    env.num_shards = 1;
    build_capturing_stderr("pipeline p {\n range 0 10\n batch 2\n}\n", &env, log, sizeof log);
    ASSERT_STREQ(log, "");
}

TEST(test_overrides_change_the_graph) {
    const char *text = "pipeline train {\n range 0 10\n shuffle 4 seed=3\n batch 4\n}\n";
    sl_cfg *c = parse(text);
    ASSERT(c);
    sl_dataset *ds;
    int64_t v[32], w[32];
    int sizes[8], ne;
    ASSERT_OK(sl_pipeline_from_config(c, "train", NULL, &ds));
    ASSERT_EQ(drain(ds, 0, "value", v, 32, sizes, &ne), 10);
    ASSERT_EQ(ne, 3);
    ASSERT_EQ(sizes[0], 4);
    sl_dataset_unref(ds);
    ASSERT_OK(sl_cfg_set(c, "pipeline.train.batch=5"));
    ASSERT_OK(sl_cfg_set(c, "pipeline.train.batch.drop_remainder=true"));
    ASSERT_OK(sl_pipeline_from_config(c, "train", NULL, &ds));
    ASSERT_EQ(drain(ds, 0, "value", w, 32, sizes, &ne), 10);
    ASSERT_EQ(ne, 2);
    ASSERT_EQ(sizes[0], 5);
    ASSERT_EQ(sizes[1], 5);
    for (int i = 0; i < 10; i++) ASSERT_EQ(w[i], v[i]); /* same seed: same order */
    sl_dataset_unref(ds);
    /* a permutation of 0..9 */
    int seen = 0;
    for (int i = 0; i < 10; i++) seen |= 1 << w[i];
    ASSERT_EQ(seen, 1023);
    /* a statement added by an override */
    ASSERT_OK(sl_cfg_set(c, "pipeline.train.take=1"));
    ASSERT_OK(sl_pipeline_from_config(c, "train", NULL, &ds));
    ASSERT_EQ(drain(ds, 0, "value", w, 32, sizes, &ne), 5);
    ASSERT_EQ(ne, 1);
    sl_dataset_unref(ds);
    /* a bad override value is reported as such, with the statement's usage */
    ASSERT_OK(sl_cfg_set(c, "pipeline.train.batch=x"));
    ASSERT_EQ(sl_pipeline_from_config(c, "train", NULL, &ds), SL_EINVAL);
    ASSERT(ds == NULL);
    ASSERT_STREQ(sl_errmsg(), "expected an integer, found a word 'x' (value given with --set)\n"
                              "---> HINT: usage: batch N [drop_remainder] [padded] [pad=VALUE]");
    sl_cfg_free(c);
}

/* `pipeline train` of text built with env.batch_divisor w and drained: returns the number of
 * values (into v), with the elements in *ne and the values per element in *rows when every
 * element has as many (else -1); -1 on a failure (printed). */
static int build_divided(const char *text, int64_t w, int64_t *v, int cap, int *ne, int *rows) {
    sl_pipeline_env env = sl_pipeline_env_default();
    env.batch_divisor = w;
    sl_dataset *ds;
    if (build(text, "train", &env, &ds)) {
        printf("  build: %s\n", sl_errmsg());
        return -1;
    }
    int sizes[64];
    int n = drain(ds, 0, "value", v, cap, sizes, ne);
    sl_dataset_unref(ds);
    *rows = *ne > 0 ? sizes[0] : -1;
    for (int k = 1; k < *ne && k < 64; k++)
        if (sizes[k] != sizes[0]) *rows = -1;
    return n;
}

/* env.batch_divisor W: every `batch N` makes N/W rows (the trainer's global batch over W
 * replicas); 0 and 1 leave it as written; N not a multiple of W is refused at the N. */
TEST(test_batch_divisor) {
    static const char text[] = "pipeline train {\n range 0 256\n batch 128\n}\n";
    ASSERT_EQ(sl_pipeline_env_default().batch_divisor, 0);
    int64_t v[300];
    int ne, rows;
    for (int w = 0; w <= 2; w++) {
        ASSERT_EQ(build_divided(text, w, v, 300, &ne, &rows), 256);
        ASSERT_EQ(ne, w == 2 ? 4 : 2);
        ASSERT_EQ(rows, w == 2 ? 64 : 128);
        for (int i = 0; i < 256; i++) ASSERT_EQ(v[i], i);
    }
    sl_pipeline_env env = sl_pipeline_env_default();
    env.batch_divisor = 3;
    sl_dataset *ds = (sl_dataset *)1;
    ASSERT_EQ(build(text, "train", &env, &ds), SL_EINVAL);
    ASSERT(ds == NULL);
    ASSERT_STREQ(sl_errmsg(), "p.sl:3:8: pipeline 'train': batch 128 does not divide over 3 replicas\n"
                              "     batch 128\n           ^~~\n"
                              "---> HINT: the batch in the config is the global batch: each replica takes "
                              "batch/3, so make it a multiple of 3");
    env.batch_divisor = -2;
    ASSERT_EQ(build(text, "train", &env, &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "pipeline 'train': batch divisor -2 is not valid");
    /* drop_remainder applies to the divided batch: 200 rows in 64s keep 192 */
    ASSERT_EQ(build_divided("pipeline train {\n range 0 200\n batch 128 drop_remainder\n}\n", 2, v, 300, &ne,
                            &rows), 192);
    ASSERT_EQ(ne, 3);
    ASSERT_EQ(rows, 64);
    /* every batch statement: batch 4 then batch 2 is one [2, 4] element as written, four
     * [1, 2] elements divided by 2 */
    ASSERT_EQ(build_divided("pipeline train {\n range 0 8\n batch 4\n batch 2\n}\n", 2, v, 300, &ne, &rows), 8);
    ASSERT_EQ(ne, 4);
    ASSERT_EQ(rows, 2);
}

TEST(test_seeds) {
    /* the same config and seed give the same order; the pipeline seed changes it */
    const char *text = "pipeline p {\n range 0 50\n shuffle 50\n}\n";
    int64_t a[64], b[64], d[64];
    sl_dataset *ds;
    sl_pipeline_env env = sl_pipeline_env_default();
    env.seed = 1;
    ASSERT_OK(build(text, "p", &env, &ds));
    ASSERT_EQ(drain(ds, 1, "value", a, 64, NULL, NULL), 50);
    sl_dataset_unref(ds);
    ASSERT_OK(build(text, "p", &env, &ds));
    ASSERT_EQ(drain(ds, 1, "value", b, 64, NULL, NULL), 50);
    sl_dataset_unref(ds);
    ASSERT_MEMEQ(a, b, sizeof(int64_t) * 50);
    env.seed = 2;
    ASSERT_OK(build(text, "p", &env, &ds));
    ASSERT_EQ(drain(ds, 2, "value", d, 64, NULL, NULL), 50);
    sl_dataset_unref(ds);
    ASSERT(memcmp(a, d, sizeof(int64_t) * 50) != 0);
}

TEST(test_pipeline_names) {
    sl_cfg *c = parse("train { epochs 1 }\npipeline train {\n range 0 1\n}\npipeline \"eval\" {\n range 0 1\n}\n");
    ASSERT(c);
    const char *names[4];
    ASSERT_EQ(sl_pipeline_names(c, names, 4), 2);
    ASSERT_STREQ(names[0], "train");
    ASSERT_STREQ(names[1], "eval");
    ASSERT_EQ(sl_pipeline_names(c, names, 1), 2);
    ASSERT_EQ(sl_pipeline_names(c, NULL, 0), 2);
    sl_dataset *ds;
    ASSERT_EQ(sl_pipeline_from_config(c, "tran", NULL, &ds), SL_ENOTFOUND);
    ASSERT(ds == NULL);
    ASSERT_STREQ(sl_errmsg(), "p.sl: no pipeline 'tran'\n---> HINT: did you mean 'train'? (the pipelines are train, eval)");
    ASSERT_EQ(sl_pipeline_from_config(c, "zzz", NULL, &ds), SL_ENOTFOUND);
    ASSERT_STREQ(sl_errmsg(), "p.sl: no pipeline 'zzz'\n---> HINT: the pipelines are train, eval");
    sl_pipeline_env env = sl_pipeline_env_default();
    env.num_shards = 2;
    env.shard_index = 2;
    ASSERT_EQ(sl_pipeline_from_config(c, "train", &env, &ds), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "pipeline 'train': replica 2 of 2 shards is not valid (index must be in 0..num-1)");
    sl_cfg_free(c);
    c = parse("model m { }\n");
    ASSERT(c);
    ASSERT_EQ(sl_pipeline_from_config(c, "train", NULL, &ds), SL_ENOTFOUND);
    ASSERT_STREQ(sl_errmsg(), "p.sl: no pipeline 'train': the file has no pipeline blocks\n"
                              "---> HINT: define one: pipeline train { files \"PATTERN\" ... }");
    sl_cfg_free(c);
}

/* Each body (inside `pipeline train {` on line 1) fails with exactly this code and message. */
/* A pipeline body that is refused: the status and the whole message (FILE:LINE:COL, the
 * line, the caret, the hint). */
typedef struct refusal {
    const char *body;
    sl_status code;
    const char *msg;
} refusal;

/* Each case's "pipeline train {\nBODY}\n" is refused with its code and exactly its message,
 * and the dataset is left NULL. */
static void check_refusals(const refusal *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char text[512];
        snprintf(text, sizeof text, "pipeline train {\n%s}\n", cases[i].body);
        sl_dataset *ds = (sl_dataset *)1;
        sl_status s = build(text, "train", NULL, &ds);
        if (s != cases[i].code || strcmp(sl_errmsg(), cases[i].msg) != 0) printf("  case %zu:\n", i);
        ASSERT_EQ(s, cases[i].code);
        ASSERT(ds == NULL);
        ASSERT_STREQ(sl_errmsg(), cases[i].msg);
    }
}

TEST(test_error_messages) {
    static const refusal cases[] = {
        {" range 0 3\n shufle 10\n", SL_EINVAL,
         "p.sl:3:2: unknown op 'shufle' in pipeline 'train'\n     shufle 10\n     ^~~~~~\n"
         "---> HINT: did you mean 'shuffle'?"},
        {" range 0 3\n frobnicate\n", SL_EINVAL,
         "p.sl:3:2: unknown op 'frobnicate' in pipeline 'train'\n     frobnicate\n     ^~~~~~~~~~\n"
         "---> HINT: the ops are files, range, shard, interleave, shuffle, map, batch, prefetch, repeat, take, "
         "skip, cache, snapshot, load, ignore_errors, filter, window, group_by_window, bucket_by_sequence_length, "
         "rejection_resample, sample, choose, zip, concatenate, enumerate, unbatch, rebatch, take_while, scan, "
         "unique"},
        {" range 0 3\n map decode_jpg(image)\n", SL_EINVAL,
         "p.sl:3:6: unknown function 'decode_jpg' in map\n     map decode_jpg(image)\n         ^~~~~~~~~~\n"
         "---> HINT: did you mean 'decode_jpeg'?"},
        {" range 0 3\n shuffle 10 sed=3\n", SL_EINVAL,
         "p.sl:3:13: unknown option 'sed' for shuffle\n     shuffle 10 sed=3\n                ^~~~~\n"
         "---> HINT: did you mean 'seed'?"},
        {" range 0 3\n take 2 limit=1\n", SL_EINVAL,
         "p.sl:3:9: unknown option 'limit' for take\n     take 2 limit=1\n            ^~~~~~~\n"
         "---> HINT: take takes no options; usage: take N"},
        {" range 0 3\n take\n", SL_EINVAL,
         "p.sl:3:2: take: missing N\n     take\n     ^~~~\n---> HINT: usage: take N"},
        {" range 0 3\n shuffle seed=1\n", SL_EINVAL,
         "p.sl:3:2: shuffle: missing BUFFER|global\n     shuffle seed=1\n     ^~~~~~~\n"
         "---> HINT: usage: shuffle BUFFER|global [seed=N] [reshuffle=BOOL] [index_dir=\"PATH\"]"},
        {" range 0 3\n take 1 2\n", SL_EINVAL,
         "p.sl:3:9: too many arguments for take\n     take 1 2\n            ^\n---> HINT: usage: take N"},
        {" range 0 3\n batch x\n", SL_EINVAL,
         "p.sl:3:8: expected an integer, found a word 'x'\n     batch x\n           ^\n"
         "---> HINT: usage: batch N [drop_remainder] [padded] [pad=VALUE]"},
        {" range 0 3\n batch 0\n", SL_ERANGE,
         "p.sl:3:8: 0 is outside 1..16777216\n     batch 0\n           ^\n"
         "---> HINT: usage: batch N [drop_remainder] [padded] [pad=VALUE]"},
        {" range 0 3\n batch 4 drop_remaindr\n", SL_EINVAL,
         "p.sl:3:10: unknown batch flag 'drop_remaindr'\n     batch 4 drop_remaindr\n             ^~~~~~~~~~~~~\n"
         "---> HINT: did you mean 'drop_remainder'?"},
        {" range 0 3\n shuffle 8 reshuffle=maybe\n", SL_EINVAL,
         "p.sl:3:22: expected true or false, found 'maybe'\n     shuffle 8 reshuffle=maybe\n                         ^~~~~\n"
         "---> HINT: write true or false (yes/no, on/off, 1/0 also work)"},
        {" batch 4\n", SL_EINVAL,
         "p.sl:1:10: pipeline 'train' has no 'files' statement\n    pipeline train {\n             ^~~~~\n"
         "---> HINT: say what to read first: files \"data/train-*.tfrecord\" (or range START STOP for numbers)"},
        {" batch 4\n range 0 3\n", SL_EINVAL,
         "p.sl:2:2: 'batch' comes before the pipeline's source ('range' at line 3)\n     batch 4\n     ^~~~~\n"
         "---> HINT: the source comes first: move 'range' to the top of the block"},
        {" range 0 3\n range 0 4\n", SL_EINVAL,
         "p.sl:3:2: a pipeline reads one source: 'range' here and 'range' at line 2\n     range 0 4\n     ^~~~~\n"
         "---> HINT: use one files statement with several patterns: files \"a-*.tfrecord\" \"b-*.tfrecord\""},
        {" files \"/nonexistent-sluice/x-*.tfrecord\"\n", SL_ENOTFOUND,
         "p.sl:2:8: no file matches '/nonexistent-sluice/x-*.tfrecord'\n"
         "     files \"/nonexistent-sluice/x-*.tfrecord\"\n"
         "           ^~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\n"
         "---> HINT: check the path; a pattern like \"dir/train-*.tfrecord\" picks several files"},
        {" files 42\n", SL_EINVAL,
         "p.sl:2:8: expected a file pattern in quotes, found '42'\n     files 42\n           ^~\n"
         "---> HINT: usage: files \"GLOB\"... [shuffle=BOOL] [seed=N] [compression=auto|none|gzip|zlib]\n"
         "      [skip_corrupt=BOOL] [verify_crc=BOOL] [max_record=BYTES]"},
        {" range 0 3\n map one_hot(value)\n", SL_EINVAL,
         "p.sl:3:6: one_hot: missing argument 'depth'\n     map one_hot(value)\n         ^~~~~~~\n"
         "---> HINT: usage: one_hot(COMP, DEPTH)"},
        {" range 0 3\n map random_flip(image, prob=0.5)\n", SL_EINVAL,
         "p.sl:3:25: random_flip: unknown parameter 'prob'\n     map random_flip(image, prob=0.5)\n"
         "                            ^~~~~~~~\n"
         "---> HINT: usage: random_flip(COMP, p=0.5, horizontal=true, vertical=false)"},
        {" range 0 3\n map cast(value, int33)\n", SL_EINVAL,
         "p.sl:3:18: unknown dtype 'int33'\n     map cast(value, int33)\n                     ^~~~~\n"
         "---> HINT: did you mean 'int32'?"},
        {" range 0 3\n map cast\n", SL_EINVAL,
         "p.sl:3:6: 'cast' is a function: call it with its arguments\n     map cast\n         ^~~~\n"
         "---> HINT: usage: cast(COMP, DTYPE)"},
        {" range 0 3\n map cast(value, int32) scale(value, 2)\n", SL_EINVAL,
         "p.sl:3:25: expected '|' between functions\n     map cast(value, int32) scale(value, 2)\n"
         "                            ^~~~~\n---> HINT: chain functions with '|': f(...) | g(...)"},
        {" range 0 3\n map cast(value, int32) |\n", SL_EINVAL,
         "p.sl:3:25: nothing after '|'\n     map cast(value, int32) |\n                            ^\n"
         "---> HINT: usage: map FN(...) [| FN(...)]... [parallel=N|auto] [deterministic=BOOL]"},
        {" range 0 3\n map parse_example(label: in64)\n", SL_EINVAL,
         "p.sl:3:27: parse_example: unknown feature type 'in64'\n     map parse_example(label: in64)\n"
         "                              ^~~~\n"
         "---> HINT: did you mean 'int64'? (tf.train.Example holds bytes, int64 and float lists)"},
        {" range 0 3\n map scale(value, 2) parallel=-1\n", SL_ERANGE,
         "p.sl:3:31: -1 is outside 1..4096\n     map scale(value, 2) parallel=-1\n                                  ^~\n"
         "---> HINT: usage: map FN(...) [| FN(...)]... [parallel=N|auto] [deterministic=BOOL]"},
        {" range 0 3\n filter value ~ 3\n", SL_EINVAL,
         "p.sl:3:15: unknown comparison '~'\n     filter value ~ 3\n                  ^\n"
         "---> HINT: compare with == != < <= > >= or eq ne lt le gt ge: filter label < 5"},
        {" range 0 3\n interleave cycle=2\n", SL_EINVAL,
         "p.sl:3:2: interleave reads files: it needs a files source\n     interleave cycle=2\n     ^~~~~~~~~~\n"
         "---> HINT: interleave says how the files are read: write it after files, before the other ops"},
        {" range 0 3\n shard everywhere\n", SL_EINVAL,
         "p.sl:3:8: unknown shard mode 'everywhere'\n     shard everywhere\n           ^~~~~~~~~~\n"
         "---> HINT: shard auto, shard file or shard data"},
        {" range 0 3\n shard num=2 index=2\n", SL_ERANGE,
         "p.sl:3:20: shard index 2 is outside 0..1\n     shard num=2 index=2\n                       ^\n"
         "---> HINT: usage: shard [auto|file|data] [num=N] [index=I]"},
        {" range 0 3\n take 1 | skip 1\n", SL_EINVAL,
         "p.sl:3:9: '|' joins the functions of a map; take takes none\n     take 1 | skip 1\n            ^\n"
         "---> HINT: usage: take N"},
        {" range 0 3\n ignore_errors { }\n", SL_EINVAL,
         "p.sl:3:2: 'ignore_errors' takes no { } block\n     ignore_errors { }\n     ^~~~~~~~~~~~~\n"
         "---> HINT: usage: ignore_errors"},
        {" range 0 3 0\n", SL_EINVAL,
         "p.sl:2:12: range step must not be 0\n     range 0 3 0\n               ^\n---> HINT: usage: range START STOP [STEP]"},
        {" range 0 3\n map normalize(value, mean=[0.5, 0.5], std=[0.2])\n", SL_EINVAL,
         "p.sl:3:44: normalize: mean has 2 values but std has 1\n"
         "     map normalize(value, mean=[0.5, 0.5], std=[0.2])\n                                               ^\n"
         "---> HINT: usage: normalize(COMP, mean=[...], std=[...], scale_uint8=true)"},
    };
    check_refusals(cases, sizeof cases / sizeof cases[0]);
}

TEST(test_relative_paths_follow_the_config_file) {
    ASSERT(sl_test_mkdtemp(tmpdir, sizeof tmpdir, "sluice-fc"));
    ASSERT_OK(write_files(1, SL_COMP_NONE));
    sl_dataset *ds;
    /* a relative pattern that does not exist names where it looked */
    ASSERT_EQ(build_in_dir(" files \"nope-*.tfrecord\"\n", NULL, &ds), SL_ENOTFOUND);
    char want[512];
    snprintf(want, sizeof want,
             "%s/p.sl:2:8: no file matches 'nope-*.tfrecord' (looked for '%s/nope-*.tfrecord')\n"
             "     files \"nope-*.tfrecord\"\n           ^~~~~~~~~~~~~~~~~\n"
             "---> HINT: relative paths start at %s",
             tmpdir, tmpdir, tmpdir);
    ASSERT_STREQ(sl_errmsg(), want);
    /* a cache file lands next to the config */
    int64_t v[16];
    ASSERT_OK(build_in_dir(" files part-0.tfrecord\n" PARSE_LABELS " cache \"cache.bin\"\n repeat 2\n", NULL, &ds));
    ASSERT_EQ(drain(ds, 0, "label", v, 16, NULL, NULL), 8);
    ASSERT_EQ(v[7], 3);
    sl_dataset_unref(ds);
    clean_dir();
}

/* One 12x20 (h x w) grayscale noise JPEG in photo.tfrecord as feature "image". */
static sl_status write_photo(void) {
    uint8_t px[240], *jpg = NULL;
    uint64_t r = 12345;
    for (int i = 0; i < 240; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        px[i] = (uint8_t)(r >> 56);
    }
    size_t jlen, len;
    sl_status s = sl_jpeg_encode(px, 20, 12, 1, 95, &jpg, &jlen);
    if (s) return s;
    sl_exb *b = NULL;
    sl_tfr_writer *w = NULL;
    uint8_t *ser = NULL;
    char path[160];
    snprintf(path, sizeof path, "%s/photo.tfrecord", tmpdir);
    sl_bytes ib = {jpg, jlen};
    if (!(s = sl_exb_new(&b)) && !(s = sl_exb_bytes(b, "image", &ib, 1)) && !(s = sl_exb_serialize(b, &ser, &len)) &&
        !(s = sl_tfr_writer_open(path, NULL, &w))) {
        s = sl_tfr_writer_write(w, ser, len);
        sl_status c = sl_tfr_writer_close(w);
        if (!s) s = c;
    }
    free(ser);
    sl_exb_free(b);
    free(jpg);
    return s;
}

/* The first element's uint8 "image" of the pipeline with map `fns` over photo.tfrecord:
 * its dims into d[3] and its bytes into px (up to cap). Returns its byte count, -1 on error. */
static int photo_through(const char *fns, int64_t *d, uint8_t *px, int cap) {
    char body[512];
    snprintf(body, sizeof body, " files \"photo.tfrecord\"\n map parse_example(image: bytes) | %s\n", fns);
    sl_dataset *ds;
    if (build_in_dir(body, NULL, &ds)) {
        printf("  %s: %s\n", fns, sl_errmsg());
        return -1;
    }
    sl_iter *it;
    sl_element e;
    sl_element_init(&e);
    int n = -1;
    if (!sl_iter_create(ds, NULL, &it)) {
        if (sl_iter_next(it, &e) == SL_OK && e.t[0].dtype == SL_DT_U8 && e.t[0].rank == 3) {
            n = (int)sl_tensor_nbytes(&e.t[0]);
            memcpy(d, e.t[0].dims, 3 * sizeof *d);
            memcpy(px, e.t[0].data, (size_t)(n < cap ? n : cap));
        } else {
            printf("  %s: %s\n", fns, sl_errmsg());
        }
        sl_element_clear(&e);
        sl_iter_close(it);
    }
    sl_dataset_unref(ds);
    return n;
}

/* antialias=, resize(shorter=N) and decode_jpeg(dct_scaling=) in the config: each changes
 * the output it should, the defaults are what the README says, bad values are refused. */
TEST(test_image_options) {
    ASSERT(sl_test_mkdtemp(tmpdir, sizeof tmpdir, "sluice-fc"));
    ASSERT_OK(write_photo());
    int64_t d[3];
    uint8_t a[1024], b[1024];
    /* Resize(6) + CenterCrop(4): 12x20 -> 6x10 -> 4x4 */
    ASSERT_EQ(photo_through("decode_jpeg(image) | resize(image, shorter=6) | center_crop(image, 4)", d, a, 1024), 16);
    ASSERT(d[0] == 4 && d[1] == 4 && d[2] == 1);
    ASSERT_EQ(photo_through("decode_jpeg(image) | resize(image, shorter=6)", d, a, 1024), 60);
    ASSERT(d[0] == 6 && d[1] == 10);
    /* shorter=6 is 6x10 with the same (antialiased, DCT-scaled) pixels */
    ASSERT_EQ(photo_through("decode_jpeg(image) | resize(image, 6x10, antialias=true)", d, b, 1024), 60);
    ASSERT_MEMEQ(a, b, 60);
    ASSERT_EQ(photo_through("decode_jpeg(image, dct_scaling=false) | resize(image, 6x10)", d, a, 1024), 60);
    ASSERT(memcmp(a, b, 60) != 0); /* 4/8 scale decode vs full size */
    ASSERT_EQ(photo_through("decode_jpeg(image, dct_scaling=false) | resize(image, 6x10, antialias=false)", d, b, 1024),
              60);
    ASSERT(memcmp(a, b, 60) != 0); /* antialiased vs 2-tap */
    /* unfused (a flip in between would not do: decode_jpeg absorbs only what follows it
     * directly, so resize a second component) equals fused without DCT scaling */
    ASSERT_EQ(photo_through("decode_jpeg(image, dct_scaling=false) | resize(image, 6x10, antialias=false) | "
                            "random_flip(image, p=0)", d, a, 1024), 60);
    ASSERT_MEMEQ(a, b, 60);
    ASSERT_EQ(photo_through("decode_jpeg(image) | center_crop(image, 4, antialias=false)", d, a, 1024), 16);
    ASSERT_EQ(photo_through("decode_jpeg(image) | center_crop(image, 4)", d, b, 1024), 16);
    ASSERT_MEMEQ(a, b, 16); /* center_crop never resamples */
    ASSERT_EQ(photo_through("decode_jpeg(image) | random_resized_crop(image, 3x5, antialias=false)", d, a, 1024), 15);
    ASSERT(d[0] == 3 && d[1] == 5);

    sl_dataset *ds;
    ASSERT_EQ(build("pipeline p {\n range 0 1\n map resize(image)\n}\n", "p", NULL, &ds), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "p.sl:3:6: resize: missing the size: SIZE (256 or 256x192) or shorter=N (keeps the "
                              "aspect ratio)\n     map resize(image)\n         ^~~~~~\n---> HINT: usage: resize(COMP, "
                              "SIZE, max_pixels=89478485, antialias=true) or resize(COMP, shorter=N, ...)   SIZE: 256 "
                              "or 256x192");
    ASSERT_EQ(build("pipeline p {\n range 0 1\n map resize(image, 7, shorter=6)\n}\n", "p", NULL, &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "p.sl:3:31: resize: give SIZE or shorter=N, not both");
    ASSERT_EQ(build("pipeline p {\n range 0 1\n map resize(image, shorter=0)\n}\n", "p", NULL, &ds), SL_ERANGE);
    ASSERT_CONTAINS(sl_errmsg(), "p.sl:3:");
    ASSERT_EQ(build("pipeline p {\n range 0 1\n map resize(image, shorter=20000)\n}\n", "p", NULL, &ds), SL_ERANGE);
    ASSERT_CONTAINS(sl_errmsg(), "resize: the target 20000x20000 is 400000000 pixels, over the limit of 89478485");
    ASSERT_EQ(build("pipeline p {\n range 0 1\n map random_resized_crop(image, 7, antialias=7)\n}\n", "p", NULL, &ds),
              SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "p.sl:3:");
    ASSERT_EQ(build("pipeline p {\n range 0 1\n map decode_jpeg(image, dct_scaling=maybe)\n}\n", "p", NULL, &ds),
              SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "p.sl:3:");
    /* dct_method= and fancy_upscaling= (tf.io.decode_jpeg's): the fused crop equals decode
     * -> crop under the same settings */
    ASSERT_EQ(photo_through("decode_jpeg(image, dct_scaling=false, dct_method=INTEGER_FAST, fancy_upscaling=false) | "
                            "resize(image, 6x10, antialias=false)", d, a, 1024), 60);
    ASSERT_EQ(photo_through("decode_jpeg(image, dct_method=\"INTEGER_FAST\", fancy_upscaling=false) | "
                            "random_flip(image, p=0) | resize(image, 6x10, antialias=false)", d, b, 1024), 60);
    ASSERT_MEMEQ(a, b, 60);
    ASSERT_EQ(photo_through("decode_jpeg(image, dct_method=INTEGER_ACCURATE, fancy_upscaling=true)", d, a, 1024), 240);
    ASSERT_EQ(photo_through("decode_jpeg(image)", d, b, 1024), 240);
    ASSERT_MEMEQ(a, b, 240); /* the defaults */
    ASSERT_EQ(build("pipeline p {\n range 0 1\n map decode_jpeg(image, dct_method=FASTEST)\n}\n", "p", NULL, &ds),
              SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "p.sl:3:");
    ASSERT_CONTAINS(sl_errmsg(), "decode_jpeg: dct_method 'FASTEST' is not INTEGER_ACCURATE or INTEGER_FAST");
    ASSERT_EQ(build("pipeline p {\n range 0 1\n map decode_jpeg(image, fancy_upscaling=1.5)\n}\n", "p", NULL, &ds),
              SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "p.sl:3:");
    ASSERT_EQ(build("pipeline p {\n range 0 1\n map resize(image, 7, antialis=false)\n}\n", "p", NULL, &ds), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "did you mean 'antialias'?");
    clean_dir();
}

/* Counts at the int64 edges from the config: the two ranges that used to wrap give Python's
 * elements; a count past int64 and a repeat whose product is are refused at FILE:LINE:COL. */
TEST(test_counts_at_int64_edges) {
    static const struct { const char *range; int64_t a, b; } ok[] = {
        {"range 9223372036854775800 9223372036854775807 5", 9223372036854775800LL, 9223372036854775805LL},
        {"range 0 9223372036854775807 4611686018427387904", 0, 4611686018427387904LL},
    };
    for (size_t i = 0; i < 2; i++) {
        char text[160];
        snprintf(text, sizeof text, "pipeline p {\n %s\n take 8\n}\n", ok[i].range);
        sl_dataset *ds;
        ASSERT_OK(build(text, "p", NULL, &ds));
        int64_t v[8];
        int n = drain(ds, 0, "value", v, 8, NULL, NULL);
        sl_dataset_unref(ds);
        ASSERT_EQ(n, 2);
        ASSERT_EQ(v[0], ok[i].a);
        ASSERT_EQ(v[1], ok[i].b);
    }
    static const refusal bad[] = {
        {" range 0 3\n take 9223372036854775808\n", SL_ERANGE,
         "p.sl:3:7: 9223372036854775808 is outside 0..9223372036854775807\n     take 9223372036854775808\n"
         "          ^~~~~~~~~~~~~~~~~~~\n---> HINT: usage: take N"},
        {" range 0 3\n skip 1e30\n", SL_ERANGE,
         "p.sl:3:7: 1e30 is outside 0..9223372036854775807\n     skip 1e30\n          ^~~~\n---> HINT: usage: skip N"},
        {" range 0 4611686018427387904\n repeat 3\n", SL_ERANGE,
         "p.sl:3:2: repeat: 3 x 4611686018427387904 elements is past 2^63-1\n"
         "---> HINT: take fewer elements first, or repeat forever (no count)"},
        {" range -9223372036854775808 9223372036854775807\n", SL_ERANGE,
         "p.sl:2:2: range: start -9223372036854775808 stop 9223372036854775807 step 1 makes 18446744073709551615 "
         "elements, past 2^63-1\n---> HINT: split it into two ranges, or repeat one for an endless stream"},
    };
    check_refusals(bad, sizeof bad / sizeof bad[0]);
}

int main(void) {
    RUN(test_range_ops);
    RUN(test_filter_comparisons);
    RUN(test_filter_runtime_error_and_ignore_errors);
    RUN(test_map_functions_on_range);
    RUN(test_files_in_order_and_options);
    RUN(test_data_errors_say_where);
    RUN(test_max_pixels_option);
    RUN(test_image_options);
    RUN(test_shard_auto_picks_file_or_data);
    RUN(test_unsharded_pipeline_warns);
    RUN(test_overrides_change_the_graph);
    RUN(test_batch_divisor);
    RUN(test_seeds);
    RUN(test_pipeline_names);
    RUN(test_error_messages);
    RUN(test_counts_at_int64_edges);
    RUN(test_relative_paths_follow_the_config_file);
    TEST_MAIN_END();
}
