/* Tests for dist/compress.c (sluice/compress.h): the codecs' round trips and sizes, the
 * exact error-feedback identity over many steps, every corruption the decoder must refuse,
 * and the `compress=` option of the train block (train/train_config.c). */
#include <math.h>
#include <stdint.h>

#include "sluice/compress.h"
#include "sluice/config.h"
#include "sluice/train.h"
#include "test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
/* uniform in [-1, 1) */
static float unif(void) { return (float)((double)(next() >> 11) / 9007199254740992.0 * 2 - 1); }

static const sl_compress_spec FP16 = {SL_COMPRESS_FP16, 0}, INT8 = {SL_COMPRESS_INT8, 0},
                              SIGN = {SL_COMPRESS_SIGN, 0}, TOPK = {SL_COMPRESS_TOPK, 0.01};

TEST(parse_and_names) {
    sl_compress_spec s;
    char b[32];
    ASSERT_OK(sl_compress_parse("int8", &s));
    ASSERT_EQ(s.kind, SL_COMPRESS_INT8);
    ASSERT_OK(sl_compress_parse("topk:0.01", &s));
    ASSERT_EQ(s.kind, SL_COMPRESS_TOPK);
    ASSERT(s.topk == 0.01);
    ASSERT_STREQ(sl_compress_name(&s, b, sizeof b), "topk:0.01");
    ASSERT_EQ(sl_compress_topk_k(&s), 41);
    ASSERT_OK(sl_compress_parse("topk(1%)", &s));
    ASSERT(s.topk == 0.01);
    ASSERT_OK(sl_compress_parse("none", &s));
    ASSERT_EQ(s.kind, SL_COMPRESS_NONE);
    ASSERT_EQ(sl_compress_parse("int4", &s), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "unknown compression 'int4'");
    ASSERT_CONTAINS(sl_errmsg(), "none, fp16, int8, sign, topk:F");
    ASSERT_EQ(sl_compress_parse("topk:0", &s), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "(0, 1]");
    ASSERT_EQ(sl_compress_parse("topk:1.5", &s), SL_EINVAL);
    ASSERT_EQ(sl_compress_parse("topk:0.1x", &s), SL_EINVAL);
    ASSERT_EQ(sl_compress_parse("topk", &s), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "needs the fraction");
}

TEST(sizes) {
    /* header 24 + body: the costs the header states */
    ASSERT_EQ(sl_compress_size(&FP16, 1000), 24 + 2000);
    ASSERT_EQ(sl_compress_size(&INT8, 1024), 24 + 1024 + 8);
    ASSERT_EQ(sl_compress_size(&INT8, 1025), 24 + 1025 + 12);
    ASSERT_EQ(sl_compress_size(&SIGN, 1024), 24 + 2 * (8 + 64));
    ASSERT_EQ(sl_compress_size(&SIGN, 1030), 24 + 2 * (8 + 64) + 8 + 1);
    ASSERT_EQ(sl_compress_size(&TOPK, 8192), 24 + 2 * 41 * 6);
    ASSERT_EQ(sl_compress_size(&TOPK, 8192 + 10), 24 + 2 * 41 * 6 + 10 * 6);
    ASSERT_EQ(sl_compress_size(&TOPK, 0), 24);
    sl_compress_spec none = {0};
    ASSERT_EQ(sl_compress_size(&none, 100), 0);
}

static sl_status roundtrip(const sl_compress_spec *sp, const float *x, size_t n, float *out) {
    size_t cap = sl_compress_size(sp, n), len = 0;
    unsigned char *buf = malloc(cap + 1);
    sl_status s = sl_compress_encode(sp, x, n, buf, cap, &len);
    if (!s && len != cap) s = SL_EINVAL;
    memset(out, 0, n * sizeof *out);
    if (!s) s = sl_compress_decode_add(sp, buf, len, n, out, "test");
    free(buf);
    return s;
}

TEST(roundtrip_values) {
    enum { N = 5000 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    for (int i = 0; i < N; i++) x[i] = unif() * 3;
    x[7] = 0;
    x[8] = -0.0f;
    /* fp16: within half an ulp of the half */
    ASSERT_OK(roundtrip(&FP16, x, N, y));
    for (int i = 0; i < N; i++) ASSERT(fabsf(y[i] - x[i]) <= fabsf(x[i]) * (1.0f / 2048) + 1e-7f);
    /* int8: within half a step of each chunk's scale; the chunk's largest value exact */
    ASSERT_OK(roundtrip(&INT8, x, N, y));
    for (int c = 0; c < N; c += 512) {
        int m = N - c < 512 ? N - c : 512;
        float mx = 0;
        for (int i = 0; i < m; i++) mx = fmaxf(mx, fabsf(x[c + i]));
        for (int i = 0; i < m; i++) ASSERT(fabsf(y[c + i] - x[c + i]) <= mx / 127 * 0.5001f);
    }
    /* sign: the chunk's mean of the values >= 0, or minus the mean magnitude of those < 0 */
    ASSERT_OK(roundtrip(&SIGN, x, N, y));
    for (int c = 0; c < N; c += 512) {
        int m = N - c < 512 ? N - c : 512, np = 0;
        double sp = 0, sn = 0;
        for (int i = 0; i < m; i++) {
            if (x[c + i] >= 0) sp += x[c + i], np++;
            else sn -= x[c + i];
        }
        float pos = (float)(sp / np), neg = (float)(sn / (m - np));
        for (int i = 0; i < m; i++) ASSERT(y[c + i] == (x[c + i] >= 0 ? pos : -neg));
    }
    /* top-k: exactly the 41 largest |x| of each 4096-bucket, the rest 0 */
    ASSERT_OK(roundtrip(&TOPK, x, N, y));
    for (int c = 0; c < N; c += 4096) {
        int m = N - c < 4096 ? N - c : 4096, kept = 0;
        float minkept = INFINITY, maxdropped = 0;
        for (int i = 0; i < m; i++) {
            if (y[c + i] != 0) {
                ASSERT(y[c + i] == x[c + i]);
                kept++;
                minkept = fminf(minkept, fabsf(x[c + i]));
            } else {
                maxdropped = fmaxf(maxdropped, fabsf(x[c + i]));
            }
        }
        ASSERT_EQ(kept, m < 41 ? m : 41);
        ASSERT(minkept >= maxdropped);
    }
    /* decode_add adds */
    for (int i = 0; i < N; i++) y[i] = 1;
    size_t cap = sl_compress_size(&INT8, N), len;
    unsigned char *buf = malloc(cap);
    ASSERT_OK(sl_compress_encode(&INT8, x, N, buf, cap, &len));
    float *z = calloc(N, sizeof *z);
    ASSERT_OK(sl_compress_decode_add(&INT8, buf, len, N, z, NULL));
    ASSERT_OK(sl_compress_decode_add(&INT8, buf, len, N, y, NULL));
    for (int i = 0; i < N; i++) ASSERT(y[i] == 1 + z[i]);
    /* ties in top-k go to the lower index; all-zero chunks are fine */
    float t[10] = {0, 1, -1, 1, 0, 0, 0, 0, 0, 0};
    sl_compress_spec k2 = {SL_COMPRESS_TOPK, 2.0 / 4096};
    float u[10];
    ASSERT_OK(roundtrip(&k2, t, 10, u));
    ASSERT(u[1] == 1 && u[2] == -1 && u[3] == 0);
    float zero[600] = {0};
    float w[600];
    ASSERT_OK(roundtrip(&INT8, zero, 600, w));
    for (int i = 0; i < 600; i++) ASSERT(w[i] == 0);
    ASSERT_OK(roundtrip(&SIGN, zero, 600, w));
    for (int i = 0; i < 600; i++) ASSERT(w[i] == 0);
    /* a float beyond half's range clamps to the largest half */
    float big[2] = {1e6f, -1e6f};
    ASSERT_OK(roundtrip(&FP16, big, 2, u));
    ASSERT(u[0] == 65504.0f && u[1] == -65504.0f);
    free(x), free(y), free(z), free(buf);
}

TEST(encode_refuses_nonfinite) {
    float x[3] = {1, NAN, 2};
    unsigned char buf[256];
    size_t len;
    ASSERT_EQ(sl_compress_encode(&INT8, x, 3, buf, sizeof buf, &len), SL_ERANGE);
    ASSERT_CONTAINS(sl_errmsg(), "gradient value 1 is nan");
    ASSERT_EQ(sl_compress_encode(&INT8, x, 3, buf, 10, &len), SL_EINVAL);
    sl_compress_ef *ef;
    ASSERT_OK(sl_compress_ef_create(&TOPK, 3, &ef));
    x[1] = INFINITY;
    ASSERT_EQ(sl_compress_ef_step(ef, x, 3, buf, sizeof buf, &len, NULL), SL_ERANGE);
    ASSERT_CONTAINS(sl_errmsg(), "is inf");
    size_t n;
    double *r = sl_compress_ef_residual(ef, &n);
    ASSERT_EQ(n, 3);
    ASSERT(r[0] == 0 && r[1] == 0 && r[2] == 0); /* unchanged */
    ASSERT_EQ(sl_compress_ef_step(ef, x, 2, buf, sizeof buf, &len, NULL), SL_EINVAL);
    sl_compress_ef_free(ef);
    sl_compress_spec none = {0};
    ASSERT_EQ(sl_compress_ef_create(&none, 3, &ef), SL_EINVAL);
}

/* The promise of error feedback: over T steps, sum(sent) + final residual == sum(g), bit
 * for bit. Gradients are drawn within [2^-12, 2^3) in magnitude with random signs, so every
 * value involved spans fewer than 53 binades and each float64 addition is exact (see
 * compress.h); the sums are taken in float64 too, which is then exact as well. */
static void ef_identity(const sl_compress_spec *sp, int steps) {
    enum { N = 4500 };
    float *g = malloc(N * sizeof *g), *sent = malloc(N * sizeof *sent);
    double *sg = calloc(N, sizeof *sg), *ss = calloc(N, sizeof *ss);
    sl_compress_ef *ef;
    ASSERT_OK(sl_compress_ef_create(sp, N, &ef));
    size_t cap = sl_compress_size(sl_compress_ef_spec(ef), N), len; /* step 0's: a warm-up's largest */
    unsigned char *buf = malloc(cap);
    double moved = 0;
    for (int t = 0; t < steps; t++) {
        sl_compress_ef_at(ef, t); /* top-k's warm-up: this step's k */
        const sl_compress_spec *cur = sl_compress_ef_spec(ef);
        for (int i = 0; i < N; i++) {
            float m = ldexpf(1.0f + fabsf(unif()), -(int)(next() % 15) + 2);
            g[i] = (next() & 1) ? m : -m;
            /* a gradient as a float32 of 12 significant bits keeps the spans short */
            g[i] = (float)ldexp(rint(ldexp(g[i], 12 - ilogb(g[i]))), ilogb(g[i]) - 12);
            sg[i] += g[i];
        }
        ASSERT_OK(sl_compress_ef_step(ef, g, N, buf, cap, &len, sent));
        ASSERT_EQ(len, sl_compress_size(cur, N));
        ASSERT(cur->kind != SL_COMPRESS_TOPK || cur->topk == sl_compress_topk_at(sp, t));
        /* what was sent is what a receiver decodes */
        float *dec = calloc(N, sizeof *dec);
        ASSERT_OK(sl_compress_decode_add(cur, buf, len, N, dec, "test"));
        ASSERT_MEMEQ(dec, sent, N * sizeof *dec);
        free(dec);
        for (int i = 0; i < N; i++) {
            ss[i] += sent[i];
            moved += fabs(sent[i]);
        }
    }
    size_t n;
    const double *r = sl_compress_ef_residual(ef, &n);
    ASSERT_EQ(n, N);
    int bad = 0;
    for (int i = 0; i < N; i++)
        if (ss[i] + r[i] != sg[i]) bad++;
    if (bad) FAILF("%d of %d values: sum(sent) + residual != sum(g)", bad, N);
    ASSERT(moved > 0);
    sl_compress_ef_free(ef);
    free(g), free(sent), free(sg), free(ss), free(buf);
}

TEST(ef_identity_fp16) { ef_identity(&FP16, 300); }
TEST(ef_identity_int8) { ef_identity(&INT8, 300); }
TEST(ef_identity_sign) { ef_identity(&SIGN, 300); }
TEST(ef_identity_topk) { ef_identity(&TOPK, 300); }
/* the warm-up's four stages (25%, 6.25%, 1.5625%, 1%) and then 1%: k changes, the identity holds */
TEST(ef_identity_topk_warmup) { ef_identity(&(sl_compress_spec){SL_COMPRESS_TOPK, 0.01, 100}, 300); }

/* DGC's sparsity warm-up: the fraction per step, the option's text, and a receiver at
 * another stage refusing the payload. */
TEST(topk_warmup) {
    sl_compress_spec s;
    char b[64];
    ASSERT_OK(sl_compress_parse("topk(0.01,warmup=1800)", &s));
    ASSERT_EQ(s.kind, SL_COMPRESS_TOPK);
    ASSERT(s.topk == 0.01);
    ASSERT_EQ(s.warmup, 1800);
    ASSERT_STREQ(sl_compress_name(&s, b, sizeof b), "topk:0.01,warmup=1800");
    sl_compress_spec back;
    ASSERT_OK(sl_compress_parse(b, &back));
    ASSERT(back.topk == 0.01 && back.warmup == 1800);
    ASSERT_OK(sl_compress_parse("topk:1%, warmup=0", &s));
    ASSERT(s.topk == 0.01 && s.warmup == 0);
    ASSERT_STREQ(sl_compress_name(&s, b, sizeof b), "topk:0.01");
    /* four stages of 450 steps: 25%, 6.25%, 1.5625%, max(1%, 0.390625%); then 1% */
    ASSERT_OK(sl_compress_parse("topk(0.01,warmup=1800)", &s));
    const int64_t at[] = {-3, 0, 449, 450, 899, 900, 1349, 1350, 1799, 1800, 100000};
    const double want[] = {0.25, 0.25, 0.25, 0.0625, 0.0625, 0.015625, 0.015625, 0.01, 0.01, 0.01, 0.01};
    for (int i = 0; i < 11; i++)
        if (sl_compress_topk_at(&s, at[i]) != want[i])
            FAILF("step %lld: fraction %g, want %g", (long long)at[i], sl_compress_topk_at(&s, at[i]), want[i]);
    ASSERT_OK(sl_compress_parse("topk:0.001,warmup=8", &s)); /* stage 3 above F: 0.390625% */
    ASSERT(sl_compress_topk_at(&s, 6) == 0.00390625);
    ASSERT(sl_compress_topk_at(&s, 8) == 0.001);
    ASSERT(sl_compress_topk_at(&TOPK, 0) == 0.01); /* no warm-up */
    ASSERT(sl_compress_topk_at(&INT8, 0) == 0);
    /* the error-feedback state follows the step; a payload of stage 0 does not decode as 1% */
    enum { N = 5000 };
    float *x = malloc(N * sizeof *x), *acc = calloc(N, sizeof *acc);
    for (int i = 0; i < N; i++) x[i] = unif();
    sl_compress_ef *ef;
    ASSERT_OK(sl_compress_ef_create(&(sl_compress_spec){SL_COMPRESS_TOPK, 0.01, 1800}, N, &ef));
    ASSERT_EQ(sl_compress_topk_k(sl_compress_ef_spec(ef)), 1024); /* before any sl_compress_ef_at: step 0 */
    unsigned char *buf = malloc(sl_compress_size(sl_compress_ef_spec(ef), N));
    size_t len;
    sl_compress_ef_at(ef, 1799);
    ASSERT_EQ(sl_compress_topk_k(sl_compress_ef_spec(ef)), 41);
    sl_compress_ef_at(ef, 500);
    ASSERT_EQ(sl_compress_topk_k(sl_compress_ef_spec(ef)), 256);
    ASSERT_EQ(sl_compress_ef_spec(ef)->warmup, 0);
    ASSERT_OK(sl_compress_ef_step(ef, x, N, buf, sl_compress_size(sl_compress_ef_spec(ef), N), &len, NULL));
    ASSERT_EQ(len, 24 + 256 * 6 + 256 * 6); /* 4096 + 904 values: 256 kept of each */
    ASSERT_EQ(sl_compress_decode_add(&TOPK, buf, len, N, acc, "rank 1, step 500"), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "rank 1, step 500: compressed gradient: byte 20: top-k k 256, expected 41");
    for (int i = 0; i < N; i++) ASSERT(acc[i] == 0);
    sl_compress_ef_free(ef);
    free(x), free(acc), free(buf);
    /* bad warm-ups */
    ASSERT_EQ(sl_compress_parse("topk(0.01,warm=5)", &s), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "after the fraction only warmup=STEPS may follow");
    const char *bad[] = {"topk:0.01,warmup=-1", "topk:0.01,warmup=1.5", "topk:0.01,warmup=",
                         "topk(0.01,warmup=2000000000)", "topk:0.01,warmup=99999999999999999999"};
    for (int i = 0; i < 5; i++) {
        s.warmup = 77;
        if (sl_compress_parse(bad[i], &s) != SL_EINVAL) FAILF("'%s' was accepted", bad[i]);
        ASSERT_CONTAINS(sl_errmsg(), "warmup= takes the warm-up's steps, an integer in [0, 1000000000]");
        ASSERT_EQ(s.warmup, 77); /* unchanged */
    }
    ASSERT_EQ(sl_compress_parse("topk:0,warmup=5", &s), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "(0, 1]");
}

/* Error feedback makes top-k send everything eventually: a constant gradient's average
 * over many steps is what was sent, within the residual's bound. */
TEST(ef_topk_converges) {
    enum { N = 4096, T = 400 };
    float *g = malloc(N * sizeof *g), *sent = malloc(N * sizeof *sent);
    double *ss = calloc(N, sizeof *ss);
    for (int i = 0; i < N; i++) g[i] = unif();
    size_t cap = sl_compress_size(&TOPK, N), len;
    unsigned char *buf = malloc(cap);
    sl_compress_ef *ef;
    ASSERT_OK(sl_compress_ef_create(&TOPK, N, &ef));
    for (int t = 0; t < T; t++) {
        ASSERT_OK(sl_compress_ef_step(ef, g, N, buf, cap, &len, sent));
        for (int i = 0; i < N; i++) ss[i] += sent[i];
    }
    double err = 0;
    for (int i = 0; i < N; i++) err = fmax(err, fabs(ss[i] / T - g[i]));
    ASSERT(err < 0.5); /* without feedback most values would never be sent: error ~|g| */
    sl_compress_ef_free(ef);
    free(g), free(sent), free(ss), free(buf);
}

/* Corruption: every kind of bad payload is SL_ECORRUPT naming who, the byte offset and
 * what, and leaves the output unchanged. */
static sl_status corrupt_one(const sl_compress_spec *sp, size_t n, void (*damage)(unsigned char *, size_t *),
                             const char *want) {
    float *x = malloc(n * sizeof *x), *acc = malloc(n * sizeof *acc);
    for (size_t i = 0; i < n; i++) x[i] = unif();
    size_t cap = sl_compress_size(sp, n), len;
    unsigned char *buf = calloc(1, cap + 64);
    sl_status s = sl_compress_encode(sp, x, n, buf, cap, &len);
    if (s) goto out;
    damage(buf, &len);
    for (size_t i = 0; i < n; i++) acc[i] = 5;
    s = sl_compress_decode_add(sp, buf, len, n, acc, "rank 1, step 7");
    for (size_t i = 0; i < n; i++)
        if (acc[i] != 5) {
            s = 999;
            break;
        }
    if (s == SL_ECORRUPT && (!strstr(sl_errmsg(), want) || !strstr(sl_errmsg(), "rank 1, step 7: compressed gradient: byte ")))
        s = 998;
out:
    if (s == 998 || s == 999) printf("  message: %s\n", sl_errmsg());
    free(x), free(acc), free(buf);
    return s;
}

static void d_magic(unsigned char *b, size_t *l) { (void)l; b[0] = 'X'; }
static void d_codec(unsigned char *b, size_t *l) { (void)l; b[4] = 3; }
static void d_codec9(unsigned char *b, size_t *l) { (void)l; b[4] = 9; }
static void d_reserved(unsigned char *b, size_t *l) { (void)l; b[6] = 1; }
static void d_count(unsigned char *b, size_t *l) { (void)l; b[8] ^= 1; }
static void d_chunk(unsigned char *b, size_t *l) { (void)l; b[17] ^= 4; }
static void d_k(unsigned char *b, size_t *l) { (void)l; b[20] ^= 1; }
static void d_short(unsigned char *b, size_t *l) { (void)b; *l -= 1; }
static void d_long(unsigned char *b, size_t *l) { (void)b; *l += 1; }
static void d_tiny(unsigned char *b, size_t *l) { (void)b; *l = 10; }
static void d_scale_nan(unsigned char *b, size_t *l) { (void)l; memcpy(b + 24 + 516, "\x00\x00\xc0\x7f", 4); }
static void d_scale_neg(unsigned char *b, size_t *l) { (void)l; b[24 + 3] |= 0x80; }
static void d_scale_neg2(unsigned char *b, size_t *l) { (void)l; b[24 + 7] |= 0x80; }
static void d_int8_min(unsigned char *b, size_t *l) { (void)l; b[24 + 4 + 100] = 0x80; }
static void d_sign_pad(unsigned char *b, size_t *l) { (void)l; b[*l - 1] |= 0x80; }
static void d_fp16_inf(unsigned char *b, size_t *l) { (void)l; b[24 + 2 * 3] = 0; b[24 + 2 * 3 + 1] = 0x7c; }
static void d_fp16_nan(unsigned char *b, size_t *l) { (void)l; b[24 + 2 * 3] = 1; b[24 + 2 * 3 + 1] = 0xfc; }
/* top-k over 4096 values: 41 u16 offsets at 24, then 41 floats at 24 + 82 */
static void d_topk_range(unsigned char *b, size_t *l) { (void)l; b[24 + 2 * 40] = 0x00; b[24 + 2 * 40 + 1] = 0x10; }
static void d_topk_order(unsigned char *b, size_t *l) {
    (void)l;
    memcpy(b + 24 + 2 * 5, b + 24 + 2 * 4, 2);
}
static void d_topk_value(unsigned char *b, size_t *l) { (void)l; memcpy(b + 24 + 82 + 4 * 2, "\x00\x00\x80\xff", 4); }

TEST(corruption) {
    ASSERT_EQ(corrupt_one(&INT8, 1000, d_magic, "byte 0: bad magic"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&INT8, 1000, d_codec, "byte 4: codec 3 (sign), expected 2 (int8)"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&INT8, 1000, d_codec9, "byte 4: codec 9, expected 2 (int8)"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&INT8, 1000, d_reserved, "byte 5: reserved bytes"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&INT8, 1000, d_count, "byte 8: 1001 values, expected 1000"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&INT8, 1000, d_chunk, "byte 16: chunk size 1536, expected 512"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&TOPK, 4096, d_k, "byte 20: top-k k 40, expected 41"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&INT8, 1000, d_short, "1031 bytes, expected 1032 for 1000 values"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&INT8, 1000, d_long, "1033 bytes, expected 1032"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&SIGN, 1000, d_tiny, "byte 10: 10 bytes, shorter than the 24-byte header"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&INT8, 1000, d_scale_nan, "byte 540: chunk 1: scale nan"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&SIGN, 1000, d_scale_neg, "byte 24: chunk 0: positive scale -"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&SIGN, 1000, d_scale_neg2, "byte 28: chunk 0: negative scale -"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&INT8, 1000, d_int8_min, "byte 128: value 100: int8 -128"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&SIGN, 1001, d_sign_pad, "chunk 1: padding bits past value 1000"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&FP16, 10, d_fp16_inf, "byte 30: value 3 is inf"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&FP16, 10, d_fp16_nan, "byte 30: value 3 is nan"), SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&TOPK, 4096, d_topk_range, "byte 104: chunk 0: index 4096 is past the chunk's 4096 values"),
              SL_ECORRUPT);
    ASSERT_EQ(corrupt_one(&TOPK, 4096, d_topk_order, "byte 34: chunk 0: index"), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "indices must increase");
    ASSERT_EQ(corrupt_one(&TOPK, 4096, d_topk_value, "chunk 0: the value at index"), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "is inf");
    /* a payload decoded with another codec's expectations: refused at the codec byte */
    float x[600];
    for (int i = 0; i < 600; i++) x[i] = unif();
    unsigned char buf[4096];
    size_t len;
    ASSERT_OK(sl_compress_encode(&SIGN, x, 600, buf, sizeof buf, &len));
    ASSERT_EQ(sl_compress_check(&INT8, buf, len, 600, "ps 0"), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "ps 0: compressed gradient: byte 4: codec 3 (sign), expected 2 (int8)");
    ASSERT_OK(sl_compress_check(&SIGN, buf, len, 600, "ps 0"));
    /* every single-byte flip of an int8 payload either decodes or is refused cleanly */
    ASSERT_OK(sl_compress_encode(&TOPK, x, 600, buf, sizeof buf, &len));
    for (size_t i = 0; i < len; i++) {
        unsigned char save = buf[i];
        buf[i] ^= 0xff;
        sl_status s = sl_compress_check(&TOPK, buf, len, 600, NULL);
        ASSERT(s == SL_OK || s == SL_ECORRUPT);
        buf[i] = save;
    }
}

/* The train block's option: `strategy ring|ps compress=...`, errors at file:line. */
static sl_status parse_train(const char *strategy, sl_train_config *tc) {
    char text[1024];
    snprintf(text, sizeof text,
             "model m { input 4; dense 2 }\npipeline p { files \"x\"; batch 4 }\n"
             "train {\n model m\n data p\n %s\n}\n",
             strategy);
    sl_cfg *cfg;
    sl_status s = sl_cfg_parse(text, strlen(text), "job.sl", &cfg);
    if (s) return s;
    s = sl_train_config_parse(cfg, tc);
    sl_cfg_free(cfg);
    return s;
}

TEST(config_option) {
    sl_train_config tc;
    ASSERT_OK(parse_train("strategy ring", &tc));
    ASSERT_EQ(tc.compress.kind, SL_COMPRESS_NONE);
    ASSERT_OK(parse_train("strategy ring compress=int8", &tc));
    ASSERT_EQ(tc.compress.kind, SL_COMPRESS_INT8);
    ASSERT_OK(parse_train("strategy ps mode=sync compress=sign", &tc));
    ASSERT_EQ(tc.compress.kind, SL_COMPRESS_SIGN);
    ASSERT(tc.ps_sync);
    ASSERT_OK(parse_train("strategy ring compress=topk(0.01)", &tc));
    ASSERT_EQ(tc.compress.kind, SL_COMPRESS_TOPK);
    ASSERT(tc.compress.topk == 0.01);
    ASSERT_OK(parse_train("strategy ring compress=\"topk:0.05\"", &tc));
    ASSERT(tc.compress.topk == 0.05);
    ASSERT_OK(parse_train("strategy ring compress=topk(1%)", &tc));
    ASSERT(tc.compress.topk == 0.01);
    ASSERT_OK(parse_train("strategy ring compress=fp16", &tc));
    ASSERT_EQ(tc.compress.kind, SL_COMPRESS_FP16);
    ASSERT_EQ(parse_train("strategy ring compress=int4", &tc), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "job.sl:6:");
    ASSERT_CONTAINS(sl_errmsg(), "unknown compression 'int4'");
    ASSERT_CONTAINS(sl_errmsg(), "did you mean 'int8'?");
    ASSERT_CONTAINS(sl_errmsg(), "none, fp16, int8, sign, topk(F)");
    ASSERT_EQ(parse_train("strategy ring compress=topk(2)", &tc), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "job.sl:6:");
    ASSERT_CONTAINS(sl_errmsg(), "(0, 1]");
    ASSERT_EQ(parse_train("strategy ring compress=topk", &tc), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "needs the fraction");
    ASSERT_EQ(parse_train("strategy ring compress=8", &tc), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "compress= takes a codec name");
    ASSERT_EQ(parse_train("strategy none compress=int8", &tc), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "job.sl:6:");
    ASSERT_CONTAINS(sl_errmsg(), "not of `strategy none`");
    ASSERT_EQ(parse_train("strategy ring compres=int8", &tc), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "did you mean 'compress'");
    /* top-k's warm-up, in steps (ring only) */
    ASSERT_OK(parse_train("strategy ring compress=topk(0.01, warmup=1800)", &tc));
    ASSERT_EQ(tc.compress.kind, SL_COMPRESS_TOPK);
    ASSERT(tc.compress.topk == 0.01 && tc.compress.warmup == 1800);
    ASSERT_OK(parse_train("strategy ring compress=\"topk:0.01,warmup=10\"", &tc));
    ASSERT_EQ(tc.compress.warmup, 10);
    ASSERT_OK(parse_train("strategy ring compress=topk(0.01)", &tc));
    ASSERT_EQ(tc.compress.warmup, 0);
    /* refused at the value (FILE:LINE:COL), each with its message */
    const struct {
        const char *stmt;
        sl_status code;
        const char *want, *want2;
    } bad[] = {
        {"strategy ring compress=topk(0.01, 1800)", SL_EINVAL, "the second argument is warmup=STEPS", "warmup=1800"},
        {"strategy ring compress=topk(0.01, warmup=-5)", SL_ERANGE, "-5 is outside 0..1000000000",
         "warmup=STEPS: the warm-up's steps"},
        {"strategy ring compress=topk(0.01, warmup=2.5)", SL_EINVAL, "job.sl:6:", "warmup=STEPS"},
        {"strategy ring compress=topk(0.01, warmup=10, x=1)", SL_EINVAL, "takes one number", "topk(0.01)"},
        {"strategy ps mode=sync compress=topk(0.01, warmup=100)", SL_EINVAL, "warmup= is an option of `strategy ring`",
         "drop warmup= under `strategy ps`"},
        {"strategy ps compress=\"topk:0.01,warmup=100\"", SL_EINVAL, "warmup= is an option of `strategy ring`",
         "job.sl:6:"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sl_status st = parse_train(bad[i].stmt, &tc);
        if (st != bad[i].code) FAILF("'%s': %d, want %d", bad[i].stmt, st, bad[i].code);
        ASSERT_CONTAINS(sl_errmsg(), "job.sl:6:");
        ASSERT_CONTAINS(sl_errmsg(), bad[i].want);
        ASSERT_CONTAINS(sl_errmsg(), bad[i].want2);
    }
    ASSERT_OK(parse_train("strategy ps mode=sync compress=topk(0.01, warmup=0)", &tc));
    /* --set keeps working: the whole statement, or the option alone */
    const char *text = "model m { input 4; dense 2 }\npipeline p { files \"x\"; batch 4 }\ntrain {\n model m\n data p\n}\n";
    sl_cfg *cfg;
    ASSERT_OK(sl_cfg_parse(text, strlen(text), "job.sl", &cfg));
    ASSERT_OK(sl_cfg_set(cfg, "train.strategy=(ring compress=int8)"));
    ASSERT_OK(sl_train_config_parse(cfg, &tc));
    ASSERT_EQ(tc.compress.kind, SL_COMPRESS_INT8);
    ASSERT_OK(sl_cfg_set(cfg, "train.strategy.compress=topk(0.02)"));
    ASSERT_OK(sl_train_config_parse(cfg, &tc));
    ASSERT_EQ(tc.compress.kind, SL_COMPRESS_TOPK);
    ASSERT(tc.compress.topk == 0.02);
    ASSERT_OK(sl_cfg_set(cfg, "train.strategy.compress=topk(0.02, warmup=40)"));
    ASSERT_OK(sl_train_config_parse(cfg, &tc));
    ASSERT(tc.compress.topk == 0.02 && tc.compress.warmup == 40);
    ASSERT_OK(sl_cfg_set(cfg, "train.strategy.compress=bogus"));
    ASSERT_EQ(sl_train_config_parse(cfg, &tc), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "--set");
    sl_cfg_free(cfg);
}

int main(void) {
    RUN(parse_and_names);
    RUN(sizes);
    RUN(roundtrip_values);
    RUN(encode_refuses_nonfinite);
    RUN(ef_identity_fp16);
    RUN(ef_identity_int8);
    RUN(ef_identity_sign);
    RUN(ef_identity_topk);
    RUN(ef_identity_topk_warmup);
    RUN(topk_warmup);
    RUN(ef_topk_converges);
    RUN(corruption);
    RUN(config_option);
    TEST_MAIN_END();
}
