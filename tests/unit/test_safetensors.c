/* formats/safetensors*.c: round trips (every dtype, empty and scalar tensors, metadata),
 * exact error messages for each kind of bad header, every truncation and random byte flips
 * (error or OK, never a crash), crash-safe replace (a half-written temporary file and real
 * SIGKILLs during writes leave the old or the new complete file).
 *
 * Also a helper for tests/integration/test_checkpoint_python.py:
 *     test_safetensors --write-sample DIR   writes DIR/sample.safetensors (values below)
 *     test_safetensors --write-sample-crc DIR   the same with checksums: DIR/sample_crc.safetensors
 *     test_safetensors --dump FILE          prints each tensor: name dtype [dims] hex bytes,
 *                                           then each metadata entry: meta key=value
 *     test_safetensors --verify FILE        prints "verified" or "no checksums" (exit 0), or
 *                                           the error (exit 1) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sluice/crc32c.h"
#include "sluice/safetensors.h"
#include "helper_files.h"
#include "test.h"

/* ---- helpers ---------------------------------------------------------------------- */

static char tmpdir[256];

/* A new temporary folder (in tmpdir), and the path of the file NAME in it into PATH (CAP
 * bytes). Returns the folder, or NULL. */
static const char *mktmp_file(char *path, size_t cap, const char *name) {
    return sl_test_tmp_file(tmpdir, sizeof tmpdir, "sl_st", path, cap, name);
}

/* A file from a header (padded to a multiple of 8 unless pad is false) and `datalen`
 * bytes of data 0, 1, 2, ... */
static uint8_t *mkfile(const char *hdr, size_t datalen, bool pad, size_t *n) {
    size_t h = strlen(hdr), hp = pad ? (h + 7) / 8 * 8 : h;
    *n = 8 + hp + datalen;
    uint8_t *p = malloc(*n);
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)hp >> (8 * i));
    memcpy(p + 8, hdr, h);
    memset(p + 8 + h, ' ', hp - h);
    for (size_t i = 0; i < datalen; i++) p[8 + hp + i] = (uint8_t)i;
    return p;
}

/* Open a made-up file from memory: the status, with the message left in sl_errmsg. */
static sl_status open_hdr(const char *hdr, size_t datalen) {
    size_t n;
    uint8_t *p = mkfile(hdr, datalen, true, &n);
    sl_st_file *f;
    sl_status s = sl_st_open_mem(p, n, "t.st", &f);
    sl_st_close(f);
    free(p);
    return s;
}

/* ---- the sample (also checked from Python) ---------------------------------------- */

static double s_f64[6];
static float s_f32[12];
static const uint16_t s_f16[5] = {0x3C00, 0xC000, 0x3800, 0x7C00, 0x0000};
static const uint16_t s_bf16[4] = {0x3F80, 0xC040, 0x4049, 0x0000};
static const int64_t s_i64[3] = {-1, (int64_t)1 << 40, INT64_MIN};
static const int32_t s_i32[4] = {-7, 0, 7, INT32_MAX};
static const int16_t s_i16[3] = {-300, 300, -32768};
static const int8_t s_i8[4] = {-128, -1, 0, 127};
static const uint32_t s_u32[1] = {4000000000u};
static const uint16_t s_u16[2] = {0, 65535};
static uint8_t s_u8[7];
static const uint8_t s_bool[3] = {1, 0, 1};
static const float s_scalar = 42.5f;

typedef struct spec {
    const char *name;
    sl_dtype dt;
    int rank;
    int64_t dims[3];
    const void *data;
} spec;

static const spec sample[] = {
    {"u8", SL_DT_U8, 1, {7}, s_u8},          {"f32", SL_DT_F32, 2, {3, 4}, s_f32},
    {"bool", SL_DT_BOOL, 1, {3}, s_bool},    {"f64", SL_DT_F64, 2, {2, 3}, s_f64},
    {"f16", SL_DT_F16, 1, {5}, s_f16},       {"bf16", SL_DT_BF16, 2, {2, 2}, s_bf16},
    {"i64", SL_DT_I64, 1, {3}, s_i64},       {"i32", SL_DT_I32, 2, {2, 2}, s_i32},
    {"i16", SL_DT_I16, 1, {3}, s_i16},       {"i8", SL_DT_I8, 1, {4}, s_i8},
    {"u32", SL_DT_U32, 1, {1}, s_u32},       {"u16", SL_DT_U16, 1, {2}, s_u16},
    {"empty", SL_DT_F32, 2, {0, 4}, NULL},   {"scalar", SL_DT_F32, 0, {0}, &s_scalar},
    {"layer.0/w \"q\" \xc3\xbc", SL_DT_I8, 3, {1, 1, 2}, s_i8},
};
#define NSAMPLE ((int)(sizeof sample / sizeof sample[0]))
static const char *meta_kv[][2] = {
    {"step", "1234"},
    {"format", "pt"},
    {"note", "quote \" backslash \\ tab\t newline\n \xc3\xbcnicode \xe6\x97\xa5"},
    {"empty", ""},
};

static void fill_sample(void) {
    for (int i = 0; i < 6; i++) s_f64[i] = i * 1.25 - 2;
    for (int i = 0; i < 12; i++) s_f32[i] = i * 0.5f - 3;
    for (int i = 0; i < 7; i++) s_u8[i] = (uint8_t)(i * 40);
}

static sl_status write_sample_crc(const char *path, bool crc) {
    fill_sample();
    sl_st_writer *w;
    sl_status s = sl_st_writer_new(&w);
    if (s) return s;
    sl_st_writer_set_checksums(w, crc);
    for (int i = 0; i < NSAMPLE && !s; i++)
        s = sl_st_writer_add(w, sample[i].name, sample[i].dt, sample[i].rank, sample[i].dims,
                             sample[i].data);
    for (int i = 0; i < 4 && !s; i++) s = sl_st_writer_set_meta(w, meta_kv[i][0], meta_kv[i][1]);
    if (!s) s = sl_st_writer_write(w, path);
    sl_st_writer_free(w);
    return s;
}

static sl_status write_sample(const char *path) { return write_sample_crc(path, false); }

/* ---- tests ------------------------------------------------------------------------ */

TEST(test_roundtrip_every_dtype) {
    char path[300];
    const char *dir = mktmp_file(path, sizeof path, "ckpt.safetensors");
    ASSERT(dir);
    ASSERT_OK(write_sample(path));
    ASSERT_EQ(sl_test_count_files(dir), 1); /* no temporary file left behind */
    sl_st_file *f;
    ASSERT_OK(sl_st_open(path, &f));
    ASSERT_EQ(sl_st_count(f), NSAMPLE);
    ASSERT_EQ(sl_st_meta_count(f), 4);
    for (int i = 0; i < 4; i++) {
        ASSERT_STREQ(sl_st_meta_key(f, i), meta_kv[i][0]);
        ASSERT_STREQ(sl_st_meta(f, meta_kv[i][0]), meta_kv[i][1]);
    }
    ASSERT(sl_st_meta(f, "absent") == NULL);
    ASSERT(sl_st_meta_key(f, 4) == NULL);
    sl_tensor ts[NSAMPLE];
    for (int i = 0; i < NSAMPLE; i++) {
        const spec *sp = &sample[i];
        sl_tensor *t = &ts[i];
        ASSERT_OK(sl_st_get(f, sp->name, t));
        ASSERT_EQ(t->dtype, sp->dt);
        ASSERT_EQ(t->rank, sp->rank);
        for (int d = 0; d < sp->rank; d++) ASSERT_EQ(t->dims[d], sp->dims[d]);
        size_t nb = sl_tensor_nbytes(t);
        if (nb) ASSERT_MEMEQ(t->data, sp->data, nb);
        ASSERT_EQ((uintptr_t)t->data % sl_dtype_size(sp->dt), 0);
    }
    /* zero-copy: every tensor views the one mapping */
    for (int i = 1; i < NSAMPLE; i++) ASSERT(ts[i].buf == ts[0].buf);
    /* the layout puts 8-byte dtypes first: f64 at data offset 0 */
    ASSERT_STREQ(sl_st_name(f, 0), "f64");
    ASSERT_STREQ(sl_st_name(f, 1), "i64");
    sl_tensor none = SL_TENSOR_EMPTY;
    ASSERT_EQ(sl_st_get(f, "nope", &none), SL_ENOTFOUND);
    char want[400];
    snprintf(want, sizeof want, "%s: no tensor named \"nope\"", path);
    ASSERT_STREQ(sl_errmsg(), want);
    ASSERT(none.buf == NULL);
    sl_st_close(f);
    /* the views outlive the file handle */
    ASSERT_EQ(((const float *)ts[1].data)[11], 2.5f);
    ASSERT_EQ(*(const float *)ts[13].data, 42.5f);
    for (int i = 0; i < NSAMPLE; i++) sl_tensor_release(&ts[i]);
    sl_test_rm_rf(dir);
}

TEST(test_exact_layout) {
    char path[300];
    const char *dir = mktmp_file(path, sizeof path, "small.safetensors");
    ASSERT(dir);
    sl_st_writer *w;
    ASSERT_OK(sl_st_writer_new(&w));
    const uint8_t b[3] = {1, 2, 3};
    const float x[2] = {1.0f, -2.0f};
    int64_t d3 = 3, d2 = 2;
    ASSERT_OK(sl_st_writer_add(w, "b", SL_DT_U8, 1, &d3, b));
    ASSERT_OK(sl_st_writer_add(w, "x", SL_DT_F32, 1, &d2, x));
    ASSERT_OK(sl_st_writer_set_meta(w, "k", "old"));
    ASSERT_OK(sl_st_writer_set_meta(w, "k", "v")); /* the last value wins */
    ASSERT_OK(sl_st_writer_write(w, path));
    sl_st_writer_free(w);
    size_t n;
    uint8_t *p = sl_test_read_file(path, &n);
    ASSERT(p);
    const char hdr[] = "{\"__metadata__\":{\"k\":\"v\"},"
                       "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]}}";
    size_t hl = strlen(hdr), hp = (hl + 7) / 8 * 8;
    ASSERT_EQ(n, 8 + hp + 11);
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--) len = len << 8 | p[i];
    ASSERT_EQ(len, hp);
    ASSERT_MEMEQ(p + 8, hdr, hl);
    for (size_t i = hl; i < hp; i++) ASSERT_EQ(p[8 + i], ' ');
    ASSERT_MEMEQ(p + 8 + hp, x, 8);
    ASSERT_MEMEQ(p + 8 + hp + 8, b, 3);
    free(p);
    sl_test_rm_rf(dir);
}

TEST(test_writer_errors) {
    sl_st_writer *w;
    ASSERT_OK(sl_st_writer_new(&w));
    int64_t d[9] = {2, 2, 1, 1, 1, 1, 1, 1, 1}, neg = -1;
    float x[4] = {0};
    ASSERT_EQ(sl_st_writer_add(w, "", SL_DT_F32, 1, d, x), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "safetensors: a tensor name must not be empty");
    ASSERT_EQ(sl_st_writer_add(w, "__metadata__", SL_DT_F32, 1, d, x), SL_EINVAL);
    ASSERT_EQ(sl_st_writer_add(w, "s", SL_DT_BYTES, 1, d, x), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "safetensors: tensor \"s\": dtype bytes cannot be stored");
    ASSERT_EQ(sl_st_writer_add(w, "r", SL_DT_F32, 9, d, x), SL_EINVAL);
    ASSERT_EQ(sl_st_writer_add(w, "n", SL_DT_F32, 1, &neg, x), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "safetensors: tensor \"n\": dimension 0 is negative (-1)");
    ASSERT_EQ(sl_st_writer_add(w, "z", SL_DT_F32, 1, d, NULL), SL_EINVAL);
    int64_t huge[2] = {INT64_MAX / 2, 4};
    ASSERT_EQ(sl_st_writer_add(w, "h", SL_DT_F32, 2, huge, x), SL_ERANGE);
    ASSERT_OK(sl_st_writer_add(w, "a", SL_DT_F32, 2, d, x));
    ASSERT_EQ(sl_st_writer_add(w, "a", SL_DT_F32, 2, d, x), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "safetensors: tensor \"a\" was already added");
    ASSERT_EQ(sl_st_writer_set_meta(w, "", "v"), SL_EINVAL);
    ASSERT_EQ(sl_st_writer_write(w, "/nonexistent-dir-sl/ckpt.safetensors"), SL_ENOTFOUND);
    ASSERT_CONTAINS(sl_errmsg(), "/nonexistent-dir-sl/ckpt.safetensors.tmp.");
    ASSERT_CONTAINS(sl_errmsg(), "---> HINT: create the folder /nonexistent-dir-sl first");
    sl_st_writer_free(w);
    sl_st_writer_free(NULL);
    sl_st_close(NULL);
    sl_st_file *f = (sl_st_file *)1;
    ASSERT_EQ(sl_st_open("/nonexistent-dir-sl/x.safetensors", &f), SL_ENOTFOUND);
    ASSERT(f == NULL);
}

/* The listed kinds of damage, each with its exact message. */
TEST(test_error_messages) {
    struct {
        const char *hdr;
        size_t datalen;
        sl_status code;
        const char *msg;
    } cases[] = {
        /* malformed JSON */
        {"{\"a\" {}}", 0, SL_ECORRUPT, "t.st: byte 13: malformed header JSON: expected ':' after a key, found '{'"},
        {"[1]", 0, SL_ECORRUPT, "t.st: byte 8: the header is not a JSON object (it must start with '{')"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, SL_ECORRUPT,
         "t.st: byte 64: malformed header JSON: expected ',' or '}', found the end of the header"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}x", 4, SL_ECORRUPT,
         "t.st: byte 62: unexpected bytes after the header's JSON object (only space padding may follow)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, SL_ECORRUPT,
         "t.st: byte 37: shape: expected a non-negative integer, found '-'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4, SL_ECORRUPT,
         "t.st: byte 37: shape: expected a non-negative integer, found a fraction"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4, SL_ECORRUPT,
         "t.st: byte 37: malformed header JSON: number with a leading zero"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", 4,
         SL_ECORRUPT, "t.st: byte 37: shape: integer too large"},
        {"{\"a\\q\":{}}", 0, SL_ECORRUPT, "t.st: byte 11: malformed header JSON: bad escape \\q"},
        {"{\"a\xff\":{}}", 0, SL_ECORRUPT, "t.st: byte 11: malformed header JSON: invalid UTF-8 in a string"},
        {"{\"a\\u0000\":{}}", 0, SL_ECORRUPT, "t.st: byte 11: malformed header JSON: \\u0000 is not allowed in a string"},
        {"{\"a\\ud800\":{}}", 0, SL_ECORRUPT, "t.st: byte 11: malformed header JSON: high surrogate \\ud800 without a low surrogate"},
        {"{\"a", 0, SL_ECORRUPT, "t.st: byte 9: malformed header JSON: unterminated string"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}", 4, SL_ECORRUPT,
         "t.st: byte 61: tensor \"a\": unknown field \"extra\""},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}", 0, SL_ECORRUPT,
         "t.st: byte 28: tensor \"a\": field \"dtype\" given twice"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, SL_ECORRUPT,
         "t.st: byte 13: tensor \"a\" has no \"data_offsets\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, SL_ECORRUPT,
         "t.st: byte 55: data_offsets has more than 2 entries"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4, SL_ECORRUPT,
         "t.st: byte 55: tensor \"a\": data_offsets must be [begin, end], found 1 numbers"},
        /* metadata */
        {"{\"__metadata__\":{\"k\":1}}", 0, SL_ECORRUPT,
         "t.st: byte 29: metadata \"k\": the value must be a string"},
        {"{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, SL_ECORRUPT,
         "t.st: byte 33: duplicate metadata key \"k\""},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, SL_ECORRUPT,
         "t.st: byte 27: \"__metadata__\" given twice"},
        /* dtypes and ranks */
        {"{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, SL_ECORRUPT,
         "t.st: byte 22: tensor \"a\": unknown dtype \"F33\""},
        {"{\"a\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, SL_EUNSUPPORTED,
         "t.st: byte 22: tensor \"a\": dtype U64 is not supported"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
         SL_EUNSUPPORTED, "t.st: byte 35: shape has more than 8 entries"},
        /* offsets */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 12, SL_ECORRUPT,
         "t.st: byte 57: tensor \"a\": data_offsets [0, 12] hold 12 bytes but shape [2, 2] of F32 needs 16"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, SL_ECORRUPT,
         "t.st: byte 55: tensor \"a\": data_offsets [8, 4] end before they begin"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, SL_ECORRUPT,
         "t.st: byte 55: tensor \"a\": data_offsets [0, 8] run past the end of the data (4 bytes)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, SL_ECORRUPT,
         "t.st: byte 108: tensor \"b\": data_offsets [4, 8] overlap tensor \"a\" [0, 8]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, SL_ECORRUPT,
         "t.st: byte 108: tensor \"b\" begins at data byte 8 but the tensors before it end at 4: "
         "the data must be contiguous"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 6, SL_ECORRUPT,
         "t.st: byte 68: 2 bytes after the last tensor's data: the tensors cover 4 of 6 data bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, SL_ECORRUPT,
         "t.st: byte 62: duplicate tensor name \"a\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,4]}}", 4,
         SL_ECORRUPT, "t.st: byte 9: tensor \"a\": shape is too large"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_err_clear();
        sl_status s = open_hdr(cases[i].hdr, cases[i].datalen);
        if (s != cases[i].code) {
            FAILF("case %zu: status %d (%s), expected %d", i, s, sl_errmsg(), cases[i].code);
            continue;
        }
        if (strcmp(sl_test_errmsg_line(), cases[i].msg) != 0) {
            FAILF("case %zu:\n    got      \"%s\"\n    expected \"%s\"", i, sl_test_errmsg_line(), cases[i].msg);
            continue;
        }
    }
    /* valid corner cases: no tensors; empty metadata; whitespace; escapes */
    ASSERT_OK(open_hdr("{}", 0));
    ASSERT_EQ(open_hdr(" {}", 0), SL_ECORRUPT); /* as Hugging Face: the header starts with '{' */
    ASSERT_OK(open_hdr("{ \"__metadata__\" : { } , \"z\\u00fc\\ud83d\\ude00\" : { \"shape\" : [ ] ,"
                       " \"data_offsets\" : [ 0 , 2 ] , \"dtype\" : \"BF16\" } }", 2));
    /* the length field and the file size */
    uint8_t five[5] = {0};
    sl_st_file *f;
    ASSERT_EQ(sl_st_open_mem(five, 5, "t.st", &f), SL_ECORRUPT);
    ASSERT_STREQ(sl_test_errmsg_line(), "t.st: byte 0: file is 5 bytes, too short for the 8-byte header length");
    ASSERT_CONTAINS(sl_errmsg(), "---> HINT: the file was cut short");
    size_t n;
    uint8_t *p = mkfile("{}", 0, true, &n);
    p[0] = 200;
    ASSERT_EQ(sl_st_open_mem(p, n, "t.st", &f), SL_ECORRUPT);
    ASSERT_STREQ(sl_test_errmsg_line(), "t.st: byte 0: header length 200 runs past the end of the file (16 bytes)");
    free(p);
    ASSERT_EQ(sl_st_open_mem(NULL, 0, NULL, &f), SL_ECORRUPT);
    ASSERT_STREQ(sl_test_errmsg_line(), "<memory>: byte 0: file is 0 bytes, too short for the 8-byte header length");
    ASSERT(f == NULL);
}

/* Other writers need not align: a tensor whose data is misaligned for its dtype is copied
 * into an aligned buffer; aligned ones stay views. Also an unpadded header. */
TEST(test_unaligned_tensor_is_copied) {
    const char *hdr = "{\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                      "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1,9]}}";
    size_t n;
    uint8_t *p = mkfile(hdr, 9, false, &n);
    uint8_t *al = aligned_alloc(64, (n + 63) / 64 * 64);
    memcpy(al, p, n);
    sl_st_file *f;
    ASSERT_OK(sl_st_open_mem(al, n, "u.st", &f));
    sl_tensor x, b;
    ASSERT_OK(sl_st_get(f, "x", &x));
    ASSERT_OK(sl_st_get(f, "b", &b));
    ASSERT_EQ((uintptr_t)x.data % 4, 0);
    ASSERT(x.buf != b.buf);
    ASSERT_EQ(*(const uint8_t *)b.data, 0);
    const uint8_t want[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ASSERT_MEMEQ(x.data, want, 8);
    sl_st_close(f);
    sl_tensor_release(&x);
    sl_tensor_release(&b);
    free(al);
    free(p);
}

static uint8_t *sample_bytes(size_t *n) {
    char path[300];
    const char *dir = mktmp_file(path, sizeof path, "s.safetensors");
    if (!dir) return NULL;
    uint8_t *p = write_sample(path) ? NULL : sl_test_read_file(path, n);
    sl_test_rm_rf(dir);
    return p;
}

/* Touch every byte of every tensor, so ASan sees an out-of-bounds view. */
static int touch_all(sl_st_file *f) {
    volatile unsigned sum = 0;
    for (int i = 0; i < sl_st_count(f); i++) {
        sl_tensor t;
        if (sl_st_get(f, sl_st_name(f, i), &t)) return -1;
        for (size_t k = 0; k < sl_tensor_nbytes(&t); k++) sum += ((const uint8_t *)t.data)[k];
        sl_tensor_release(&t);
    }
    (void)sum;
    return 0;
}

TEST(test_every_truncation) {
    size_t n;
    uint8_t *full = sample_bytes(&n);
    ASSERT(full);
    sl_st_file *f;
    ASSERT_OK(sl_st_open_mem(full, n, "s", &f));
    sl_st_close(f);
    for (size_t len = 0; len < n; len++) {
        uint8_t *p = malloc(len ? len : 1);
        memcpy(p, full, len);
        sl_status s = sl_st_open_mem(p, len, "s", &f);
        free(p);
        if (s != SL_ECORRUPT) {
            FAILF("truncated to %zu of %zu bytes: status %d, expected SL_ECORRUPT", len, n, s);
            sl_st_close(f);
            free(full);
            return;
        }
        ASSERT(f == NULL);
    }
    free(full);
}

TEST(test_random_byte_flips) {
    size_t n;
    uint8_t *full = sample_bytes(&n);
    ASSERT(full);
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int ok = 0, bad = 0;
    for (int iter = 0; iter < 600; iter++) {
        uint8_t *p = malloc(n);
        memcpy(p, full, n);
        int flips = 1 + iter % 3;
        for (int k = 0; k < flips; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(rng >> 33) % n;
            /* most flips aimed at the header, where parsing happens */
            if (iter % 4 != 3) at %= 8 + 600 < n ? 8 + 600 : n;
            p[at] ^= (uint8_t)(1u << ((rng >> 20) & 7));
        }
        sl_st_file *f;
        sl_status s = sl_st_open_mem(p, n, "s", &f);
        if (s == SL_OK) {
            ok++;
            if (touch_all(f)) {
                FAILF("flip %d: opened but a listed tensor failed: %s", iter, sl_errmsg());
                sl_st_close(f);
                free(p);
                free(full);
                return;
            }
            sl_st_close(f);
        } else if (s == SL_ECORRUPT || s == SL_EUNSUPPORTED) {
            bad++;
            if (strncmp(sl_errmsg(), "s: byte ", 8) != 0) {
                FAILF("flip %d: message without a location: %s", iter, sl_errmsg());
                free(p);
                free(full);
                return;
            }
        } else {
            FAILF("flip %d: status %d (%s)", iter, s, sl_errmsg());
            free(p);
            free(full);
            return;
        }
        free(p);
    }
    printf("  600 damaged files: %d opened (flips in data bytes), %d refused\n", ok, bad);
    ASSERT(ok > 0 && bad > 0);
    free(full);
}

/* Write two versions; version v's tensor holds v in every element. */
static sl_status write_version(const char *path, float *buf, size_t nfl, int v) {
    for (size_t i = 0; i < nfl; i++) buf[i] = (float)v;
    sl_st_writer *w;
    sl_status s = sl_st_writer_new(&w);
    if (s) return s;
    int64_t d = (int64_t)nfl;
    char vs[16];
    snprintf(vs, sizeof vs, "%d", v);
    s = sl_st_writer_add(w, "w", SL_DT_F32, 1, &d, buf);
    if (!s) s = sl_st_writer_set_meta(w, "version", vs);
    if (!s) s = sl_st_writer_write(w, path);
    sl_st_writer_free(w);
    return s;
}

/* Load path and return its version (checking every element), or -1. */
static int load_version(const char *path, size_t nfl) {
    sl_st_file *f;
    if (sl_st_open(path, &f)) return -1;
    const char *vs = sl_st_meta(f, "version");
    int v = vs ? atoi(vs) : -1;
    sl_tensor t;
    if (sl_st_get(f, "w", &t) || (size_t)sl_tensor_numel(&t) != nfl) v = -1;
    else
        for (size_t i = 0; i < nfl; i++)
            if (((const float *)t.data)[i] != (float)v) v = -1;
    sl_tensor_release(&t);
    sl_st_close(f);
    return v;
}

TEST(test_atomic_replace_half_written_temp) {
    char path[300], other[300], tmp[400];
    const char *dir = mktmp_file(path, sizeof path, "ckpt.safetensors");
    ASSERT(dir);
    snprintf(other, sizeof other, "%s/b.safetensors", dir);
    float buf[1000];
    ASSERT_OK(write_version(path, buf, 1000, 1));
    /* B's bytes as the writer would have streamed them, cut in half: what a kill during
     * the write leaves behind */
    ASSERT_OK(write_version(other, buf, 1000, 2));
    size_t n;
    uint8_t *b = sl_test_read_file(other, &n);
    ASSERT(b);
    unlink(other);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.77", path, (long)getpid());
    sl_test_write_file(tmp, b, n / 2);
    free(b);
    ASSERT_EQ(load_version(path, 1000), 1);
    sl_st_file *f;
    ASSERT_EQ(sl_st_open(tmp, &f), SL_ECORRUPT); /* the half file itself is refused */
    /* the next write replaces the target and ignores the stale temporary file */
    ASSERT_OK(write_version(path, buf, 1000, 3));
    ASSERT_EQ(load_version(path, 1000), 3);
    ASSERT_EQ(sl_test_count_files(dir), 2);
    ASSERT_EQ(sl_st_remove_stale(path), 1);
    ASSERT_EQ(sl_test_count_files(dir), 1);
    ASSERT_EQ(load_version(path, 1000), 3);
    ASSERT_EQ(sl_st_remove_stale(path), 0);
    ASSERT_EQ(sl_st_remove_stale("/nonexistent-dir-sl/x"), SL_ENOTFOUND);
    sl_test_rm_rf(dir);
}

/* Real kills: a child rewrites the checkpoint in a loop (versions 1, 2, 3, ...) and is
 * SIGKILLed at a random moment; the target must always load as one complete version. */
TEST(test_kill_during_write) {
    char path[300];
    const char *dir = mktmp_file(path, sizeof path, "ckpt.safetensors");
    ASSERT(dir);
    size_t nfl = 1 << 19; /* 2 MiB per write */
    float *buf = malloc(nfl * sizeof *buf);
    ASSERT_OK(write_version(path, buf, nfl, 1));
    uint64_t rng = 12345;
    int seen_new = 0;
    for (int round = 0; round < 12; round++) {
        pid_t pid = fork();
        ASSERT(pid >= 0);
        if (pid == 0) {
            for (int v = 2;; v++)
                if (write_version(path, buf, nfl, v)) _exit(3);
        }
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        struct timespec ts = {0, (long)((rng >> 33) % 40000000)}; /* 0..40 ms */
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        ASSERT(WIFSIGNALED(st));
        int v = load_version(path, nfl);
        if (v < 1) {
            FAILF("round %d: the checkpoint does not load after a kill: %s", round, sl_errmsg());
            free(buf);
            return;
        }
        seen_new += v > 1;
    }
    /* a kill in the middle of a write leaves its temporary file behind */
    int stale = sl_test_count_files(dir) - 1;
    printf("  12 kills: the checkpoint loaded every time (%d times a newer version; %d kills "
           "left a partial temporary file)\n", seen_new, stale);
    free(buf);
    ASSERT_EQ(sl_st_remove_stale(path), stale);
    ASSERT_EQ(sl_test_count_files(dir), 1);
    sl_test_rm_rf(dir);
}

/* ---- helper modes for the Python test ----------------------------------------------- */


/* ---- checksums -------------------------------------------------------------------- */

/* The header checksum of the spec (sluice/safetensors.h), computed here independently for
 * one tensor "a" U8 [2] and metadata entries given already sorted by key. */
static uint32_t spec_crc(const char *const (*kv)[2], int n) {
    uint32_t c = 0;
    for (int i = 0; i < n; i++) {
        c = sl_crc32c(c, "M", 1);
        c = sl_crc32c(c, kv[i][0], strlen(kv[i][0]) + 1);
        c = sl_crc32c(c, kv[i][1], strlen(kv[i][1]) + 1);
    }
    return sl_crc32c(c, "Ta\0U8\0" "2", 8);
}

TEST(test_checksums) {
    char path[300];
    const char *dir = mktmp_file(path, sizeof path, "crc.safetensors");
    ASSERT(dir);
    ASSERT_OK(write_sample_crc(path, true));
    size_t n;
    uint8_t *p = sl_test_read_file(path, &n);
    ASSERT(p);
    sl_st_file *f;
    ASSERT_OK(sl_st_open_mem(p, n, "m.st", &f));
    ASSERT_EQ(sl_st_meta_count(f), 4 + NSAMPLE + 1);
    ASSERT_STREQ(sl_st_meta_key(f, 4 + NSAMPLE), "crc32c");
    char want[16];
    snprintf(want, sizeof want, "%08x", (unsigned)sl_crc32c(0, s_f32, sizeof s_f32));
    ASSERT_STREQ(sl_st_meta(f, "crc32c:f32"), want);
    ASSERT_STREQ(sl_st_meta(f, "crc32c:empty"), "00000000");
    bool present = false;
    ASSERT_OK(sl_st_verify(f, &present));
    ASSERT(present);
    /* a changed data byte: named, at its offset */
    sl_tensor t;
    ASSERT_OK(sl_st_get(f, "f32", &t));
    size_t off = (size_t)((const uint8_t *)t.data - p);
    sl_tensor_release(&t);
    sl_st_close(f);
    p[off + 5] ^= 0x10;
    ASSERT_OK(sl_st_open_mem(p, n, "m.st", &f));
    ASSERT_EQ(sl_st_verify(f, &present), SL_ECORRUPT);
    char msg[200];
    snprintf(msg, sizeof msg, "m.st: byte %zu: tensor \"f32\" (48 bytes from here) does not match its checksum", off);
    ASSERT_CONTAINS(sl_errmsg(), msg);
    sl_st_close(f);
    p[off + 5] ^= 0x10;
    /* a changed metadata value (same length, so the layout stays valid) */
    uint8_t *at = (uint8_t *)strstr((char *)p + 8, "\"1234\"");
    ASSERT(at);
    at[4] = '5';
    ASSERT_OK(sl_st_open_mem(p, n, "m.st", &f));
    ASSERT_EQ(sl_st_verify(f, &present), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "m.st: byte ");
    ASSERT_CONTAINS(sl_errmsg(), "the header does not match its checksum");
    sl_st_close(f);
    free(p);
    /* without checksums: nothing to verify */
    ASSERT_OK(write_sample(path));
    ASSERT_OK(sl_st_open(path, &f));
    ASSERT_OK(sl_st_verify(f, &present));
    ASSERT(!present);
    sl_st_close(f);
    /* the keys are reserved */
    sl_st_writer *w;
    ASSERT_OK(sl_st_writer_new(&w));
    ASSERT_EQ(sl_st_writer_set_meta(w, "crc32c", "0"), SL_EINVAL);
    ASSERT_EQ(sl_st_writer_set_meta(w, "crc32c:x", "0"), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "reserved for checksums");
    sl_st_writer_free(w);
    sl_test_rm_rf(dir);

    /* files other writers could make: each inconsistency is named */
    char hdr[400], crc_a[16];
    const uint8_t two[2] = {0, 1}; /* mkfile's data bytes */
    snprintf(crc_a, sizeof crc_a, "%08x", (unsigned)sl_crc32c(0, two, 2));
    const char *const kv_a[][2] = {{"crc32c:a", crc_a}};
    struct {
        const char *meta;
        const char *msg;
    } cases[] = {
        {"\"crc32c:a\":\"%s\"", "but no header checksum \"crc32c\""},
        {"\"crc32c\":\"XYZ\"", "metadata \"crc32c\" is \"XYZ\", not 8 lowercase hex digits"},
        {"\"crc32c\":\"%s\"", "tensor \"a\" has no checksum (\"crc32c:a\") in the metadata"},
        {"\"crc32c\":\"%s\",\"crc32c:a\":\"%s\",\"crc32c:b\":\"00000000\"",
         "metadata \"crc32c:b\": the file has no tensor \"b\""},
        {"\"crc32c\":\"%s\",\"crc32c:a\":\"%s\"", NULL},
    };
    for (int i = 0; i < 5; i++) {
        char head[16];
        uint32_t hc = 0;
        if (i == 2) hc = spec_crc(NULL, 0);
        if (i == 3) {
            const char *const kv3[][2] = {{"crc32c:a", crc_a}, {"crc32c:b", "00000000"}};
            hc = spec_crc(kv3, 2);
        }
        if (i == 4) hc = spec_crc(kv_a, 1);
        snprintf(head, sizeof head, "%08x", (unsigned)hc);
        char meta[200];
        if (i == 0) snprintf(meta, sizeof meta, cases[i].meta, crc_a);
        else if (i == 1) snprintf(meta, sizeof meta, "%s", cases[i].meta);
        else snprintf(meta, sizeof meta, cases[i].meta, head, crc_a);
        snprintf(hdr, sizeof hdr, "{\"__metadata__\":{%s},\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}",
                 meta);
        uint8_t *q = mkfile(hdr, 2, true, &n);
        ASSERT_OK(sl_st_open_mem(q, n, "h.st", &f));
        sl_status s = sl_st_verify(f, &present);
        if (cases[i].msg) {
            if (s != SL_ECORRUPT) printf("  case %d: %s\n", i, sl_errmsg());
            ASSERT_EQ(s, SL_ECORRUPT);
            ASSERT_CONTAINS(sl_errmsg(), "h.st");
            ASSERT_CONTAINS(sl_errmsg(), cases[i].msg);
        } else {
            if (s) printf("  case %d: %s\n", i, sl_errmsg());
            ASSERT_OK(s);
            ASSERT(present);
        }
        sl_st_close(f);
        free(q);
    }
}

/* A FIFO or a folder at the path: refused at once (a FIFO would block open()). */
TEST(test_open_not_regular) {
    char path[300];
    const char *dir = mktmp_file(path, sizeof path, "fifo.safetensors");
    ASSERT(dir);
    ASSERT_EQ(mkfifo(path, 0644), 0);
    sl_st_file *f = (sl_st_file *)1;
    ASSERT_EQ(sl_st_open(path, &f), SL_EIO);
    ASSERT(f == NULL);
    char msg[400];
    snprintf(msg, sizeof msg, "safetensors file '%s': is a FIFO (named pipe), not a regular file", path);
    ASSERT_CONTAINS(sl_errmsg(), msg);
    unlink(path);
    snprintf(path, sizeof path, "%s/dir.safetensors", dir);
    ASSERT_EQ(mkdir(path, 0755), 0);
    ASSERT_EQ(sl_st_open(path, &f), SL_EIO);
    snprintf(msg, sizeof msg, "safetensors file '%s': is a directory, not a regular file", path);
    ASSERT_CONTAINS(sl_errmsg(), msg);
    rmdir(path);
    snprintf(path, sizeof path, "%s/none.safetensors", dir);
    ASSERT_EQ(sl_st_open(path, &f), SL_ENOTFOUND);
    sl_test_rm_rf(dir);
}

static int verify_cmd(const char *path) {
    sl_st_file *f;
    bool present;
    if (sl_st_open(path, &f) || sl_st_verify(f, &present)) {
        fprintf(stderr, "%s\n", sl_errmsg());
        return 1;
    }
    printf("%s\n", present ? "verified" : "no checksums");
    sl_st_close(f);
    return 0;
}

static int dump(const char *path) {
    sl_st_file *f;
    if (sl_st_open(path, &f)) {
        fprintf(stderr, "%s\n", sl_errmsg());
        return 1;
    }
    for (int i = 0; i < sl_st_count(f); i++) {
        sl_tensor t;
        if (sl_st_get(f, sl_st_name(f, i), &t)) {
            fprintf(stderr, "%s\n", sl_errmsg());
            return 1;
        }
        printf("%s %s [", sl_st_name(f, i), sl_st_dtype_name(t.dtype));
        for (int d = 0; d < t.rank; d++) printf(d ? ",%lld" : "%lld", (long long)t.dims[d]);
        printf("] ");
        for (size_t k = 0; k < sl_tensor_nbytes(&t); k++) printf("%02x", ((const uint8_t *)t.data)[k]);
        printf("\n");
        sl_tensor_release(&t);
    }
    for (int i = 0; i < sl_st_meta_count(f); i++)
        printf("meta %s=%s\n", sl_st_meta_key(f, i), sl_st_meta_value(f, i));
    sl_st_close(f);
    return 0;
}

/* A checkpoint truncated by another process after it was opened (mapped): SL_EIO naming
 * the shrink, never SIGBUS (run in a child, so a signal fails the test instead of ending
 * it), and the zeros past the new end are never taken as data. */
static int shrink_child(const char *path) {
    sl_st_writer *w;
    if (sl_st_writer_new(&w)) return 10;
    sl_st_writer_set_checksums(w, true);
    static float big[1 << 18]; /* 1 MiB: many pages past the cut */
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) big[i] = (float)i;
    int64_t dims[1] = {(int64_t)(sizeof big / sizeof big[0])};
    if (sl_st_writer_add(w, "model/w", SL_DT_F32, 1, dims, big) || sl_st_writer_write(w, path)) return 11;
    sl_st_writer_free(w);
    struct stat st0;
    if (stat(path, &st0)) return 12;
    sl_st_file *f;
    if (sl_st_open(path, &f)) return 13;
    if (truncate(path, 65536)) return 14;
    if (sl_st_verify(f, NULL) != SL_EIO) return 15;
    char want[600];
    snprintf(want, sizeof want, "%s: shrank from %lld to 65536 bytes while being read", path, (long long)st0.st_size);
    if (strncmp(sl_errmsg(), want, strlen(want)) != 0) {
        printf("  got: %s\n  want: %s\n", sl_errmsg(), want);
        return 16;
    }
    if (sl_st_intact(f) != SL_EIO) return 17;
    sl_st_close(f);
    return 0;
}

TEST(test_shrink_while_mapped) {
    char path[300];
    const char *dir = mktmp_file(path, sizeof path, "shrink.safetensors");
    ASSERT(dir);
    fflush(stdout);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        alarm(60);
        _exit(shrink_child(path));
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status)) {
        FAILF("the reader died of signal %d", WTERMSIG(status));
        return;
    }
    ASSERT(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-sample") == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/sample.safetensors", argv[2]);
        if (write_sample(path)) {
            fprintf(stderr, "%s\n", sl_errmsg());
            return 1;
        }
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "--write-sample-crc") == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/sample_crc.safetensors", argv[2]);
        if (write_sample_crc(path, true)) {
            fprintf(stderr, "%s\n", sl_errmsg());
            return 1;
        }
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "--dump") == 0) return dump(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--verify") == 0) return verify_cmd(argv[2]);
    RUN(test_roundtrip_every_dtype);
    RUN(test_exact_layout);
    RUN(test_writer_errors);
    RUN(test_error_messages);
    RUN(test_unaligned_tensor_is_copied);
    RUN(test_every_truncation);
    RUN(test_random_byte_flips);
    RUN(test_atomic_replace_half_written_temp);
    RUN(test_kill_during_write);
    RUN(test_checksums);
    RUN(test_open_not_regular);
    RUN(test_shrink_while_mapped);
    TEST_MAIN_END();
}
