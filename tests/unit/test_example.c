/* formats/example*.c: tf.train.Example decode (fast path and protobuf-c), encode, print.
 *
 * The two decoders must agree on every input, so most tests run both and compare them
 * feature by feature (floats bitwise). Expected JSON strings and encodings were printed by
 * Debian's python3-protobuf 4.21 (/usr/bin/python3) with a tensorflow.Example class built
 * from formats/proto at run time:
 *     json_format.MessageToJson(msg, indent=None)   and   msg.SerializeToString().hex() */
#include <math.h>
#include <float.h>
#include <stdarg.h>
#include <stdint.h>

#include "sluice/example.h"
#include "sluice/status.h"
#include "test.h"

/* ---- a tiny protobuf wire builder for hand-made inputs ------------------------------ */

typedef struct wb {
    uint8_t d[1024];
    size_t n;
} wb;

static void w_raw(wb *w, const void *p, size_t n) {
    if (w->n + n > sizeof w->d) abort(); /* test bug, not a library failure */
    memcpy(w->d + w->n, p, n);
    w->n += n;
}
static void w_varint(wb *w, uint64_t v) {
    do {
        uint8_t b = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) b |= 0x80;
        w_raw(w, &b, 1);
    } while (v);
}
static void w_tag(wb *w, uint32_t field, unsigned wt) { w_varint(w, (uint64_t)field << 3 | wt); }

static wb RAW(const char *hex) {
    wb w = {.n = 0};
    for (const char *h = hex; *h;) {
        if (*h == ' ') { h++; continue; }
        unsigned v;
        if (sscanf(h, "%2x", &v) != 1) abort();
        uint8_t b = (uint8_t)v;
        w_raw(&w, &b, 1);
        h += 2;
    }
    return w;
}
static wb STR(const char *s, size_t n) { wb w = {.n = 0}; w_raw(&w, s, n); return w; }
static wb CAT(wb a, wb b) { w_raw(&a, b.d, b.n); return a; }
static wb CAT3(wb a, wb b, wb c) { return CAT(CAT(a, b), c); }
static wb LD(uint32_t field, wb body) {
    wb w = {.n = 0};
    w_tag(&w, field, 2);
    w_varint(&w, body.n);
    w_raw(&w, body.d, body.n);
    return w;
}
static wb VI(uint32_t field, uint64_t v) { wb w = {.n = 0}; w_tag(&w, field, 0); w_varint(&w, v); return w; }
static wb F32(uint32_t field, float f) { wb w = {.n = 0}; w_tag(&w, field, 5); w_raw(&w, &f, 4); return w; }
static wb KEY(const char *k) { return LD(1, STR(k, strlen(k))); }
static wb VAL(wb feature) { return LD(2, feature); }
static wb ENTRY(const char *k, wb feature) { return CAT(KEY(k), VAL(feature)); }
static wb FEATURES1(wb entry) { return LD(1, entry); }
static wb EX(wb features_body) { return LD(1, features_body); }
static wb EX1(const char *k, wb feature) { return EX(FEATURES1(ENTRY(k, feature))); }
static wb I64(int n, ...) { /* packed Int64List feature */
    wb body = {.n = 0};
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) w_varint(&body, (uint64_t)va_arg(ap, long long));
    va_end(ap);
    return LD(3, LD(1, body));
}
static wb FLT(int n, ...) { /* packed FloatList feature */
    wb body = {.n = 0};
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) { float f = (float)va_arg(ap, double); w_raw(&body, &f, 4); }
    va_end(ap);
    return LD(2, LD(1, body));
}
static wb BYT(int n, ...) { /* BytesList feature of C strings */
    wb body = {.n = 0};
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) { const char *s = va_arg(ap, const char *); body = CAT(body, LD(1, STR(s, strlen(s)))); }
    va_end(ap);
    return LD(1, body);
}
static wb EMPTY(void) { wb w = {.n = 0}; return w; }

/* ---- comparing the two decoders ------------------------------------------------------ */

static char why[512];
static char fast_msg[1024]; /* the fast path's error message from the last both_agree */

/* 1 when a and b hold the same features (keys, kinds, counts, values bitwise). */
static int same(const sl_example *a, const sl_example *b) {
    if (a->n != b->n) { snprintf(why, sizeof why, "n %zu vs %zu", a->n, b->n); return 0; }
    for (size_t i = 0; i < a->n; i++) {
        const sl_feature *x = &a->f[i], *y = &b->f[i];
        if (x->key.len != y->key.len || (x->key.len && memcmp(x->key.ptr, y->key.ptr, x->key.len))) {
            snprintf(why, sizeof why, "feature %zu: keys differ", i); return 0;
        }
        if (x->kind != y->kind || x->count != y->count) {
            snprintf(why, sizeof why, "feature %zu: %s[%zu] vs %s[%zu]", i, sl_feat_kind_name(x->kind),
                     x->count, sl_feat_kind_name(y->kind), y->count); return 0;
        }
        size_t n = x->count;
        if (!n || x->kind == SL_FEAT_NONE) continue;
        size_t esz = x->kind == SL_FEAT_BYTES ? sizeof(sl_bytes) : 8;
        void *va = malloc(n * esz), *vb = malloc(n * esz);
        int ok = 1;
        sl_status sa, sb;
        if (x->kind == SL_FEAT_FLOAT) {
            sa = sl_feature_floats(x, va, n); sb = sl_feature_floats(y, vb, n);
            ok = !sa && !sb && memcmp(va, vb, n * 4) == 0;
        } else if (x->kind == SL_FEAT_INT64) {
            sa = sl_feature_int64s(x, va, n); sb = sl_feature_int64s(y, vb, n);
            ok = !sa && !sb && memcmp(va, vb, n * 8) == 0;
        } else {
            sa = sl_feature_bytes(x, va, n); sb = sl_feature_bytes(y, vb, n);
            ok = !sa && !sb;
            for (size_t k = 0; ok && k < n; k++) {
                const sl_bytes *p = (sl_bytes *)va + k, *q = (sl_bytes *)vb + k;
                ok = p->ptr && q->ptr && p->len == q->len && memcmp(p->ptr, q->ptr, p->len) == 0;
            }
        }
        free(va); free(vb);
        if (!ok) { snprintf(why, sizeof why, "feature %zu: values differ (%d, %d)", i, sa, sb); return 0; }
    }
    return 1;
}

/* Parse with both decoders; 1 when they agree (verdict and content). *st gets the
 * fast path's status. Each input is copied to an exact-size heap block so ASan sees any
 * read past the end. */
static int both_agree(const uint8_t *data, size_t len, sl_status *st_out) {
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, data, len);
    sl_example a, b;
    sl_example_init(&a);
    sl_example_init(&b);
    sl_status sa = sl_example_parse(&a, copy, len);
    snprintf(fast_msg, sizeof fast_msg, "%s", sa ? sl_errmsg() : "");
    sl_status sb = sl_example_parse_pb(&b, copy, len);
    int ok = 1;
    if ((sa == SL_OK) != (sb == SL_OK)) {
        snprintf(why, sizeof why, "verdicts differ: fast %s, pb %s", sl_status_name(sa), sl_status_name(sb));
        ok = 0;
    } else if (sa == SL_OK) {
        ok = same(&a, &b);
        char *ja = NULL, *jb = NULL;
        if (ok && (sl_example_to_json(&a, &ja, NULL) || sl_example_to_json(&b, &jb, NULL) || strcmp(ja, jb))) {
            snprintf(why, sizeof why, "JSON differs");
            ok = 0;
        }
        free(ja); free(jb);
    } else if (sa != SL_ECORRUPT || sb != SL_ECORRUPT) {
        snprintf(why, sizeof why, "unexpected codes %s / %s", sl_status_name(sa), sl_status_name(sb));
        ok = 0;
    }
    if (st_out) *st_out = sa;
    sl_example_free(&a);
    sl_example_free(&b);
    free(copy);
    return ok;
}

static char *summary(const uint8_t *data, size_t len, int pb) {
    sl_example ex;
    sl_example_init(&ex);
    char *s = NULL;
    sl_status st = pb ? sl_example_parse_pb(&ex, data, len) : sl_example_parse(&ex, data, len);
    if (st) s = strdup(sl_status_name(st));
    else if (sl_example_to_text(&ex, 8, &s, NULL)) s = strdup("to_text failed");
    sl_example_free(&ex);
    return s;
}

/* ---- tests --------------------------------------------------------------------------- */

TEST(test_kind_names) {
    ASSERT_STREQ(sl_feat_kind_name(SL_FEAT_NONE), "none");
    ASSERT_STREQ(sl_feat_kind_name(SL_FEAT_BYTES), "bytes");
    ASSERT_STREQ(sl_feat_kind_name(SL_FEAT_FLOAT), "float");
    ASSERT_STREQ(sl_feat_kind_name(SL_FEAT_INT64), "int64");
}

static const float k_floats[] = {1.5f, -0.0f, 0.0f, NAN, INFINITY, -INFINITY, FLT_MAX, FLT_MIN,
                                 1.401298464324817e-45f, -3.25f, 3.14f};
static const int64_t k_ints[] = {0, 1, -1, 42, INT64_MAX, INT64_MIN, 300, -300};

static sl_status build_all_types(uint8_t **out, size_t *len) {
    sl_exb *b;
    sl_status st = sl_exb_new(&b);
    if (st) return st;
    static const uint8_t img[5] = {0, 1, 0, 255, 0};
    sl_bytes bv[4] = {{img, 5}, {(const uint8_t *)"", 0}, {(const uint8_t *)"a\0b", 3}, {img, 0}};
    if ((st = sl_exb_bytes(b, "image", bv, 4)) || (st = sl_exb_floats(b, "f", k_floats, 11)) ||
        (st = sl_exb_int64s(b, "label", k_ints, 8)) || (st = sl_exb_int64s(b, "empty_i", NULL, 0)) ||
        (st = sl_exb_floats(b, "empty_f", NULL, 0)) || (st = sl_exb_bytes(b, "empty_b", NULL, 0)))
        goto done;
    st = sl_exb_serialize(b, out, len);
done:
    sl_exb_free(b);
    return st;
}

static void check_all_types(const sl_example *ex) {
    ASSERT_EQ(ex->n, 6);
    const char *order[] = {"image", "f", "label", "empty_i", "empty_f", "empty_b"};
    for (int i = 0; i < 6; i++) {
        ASSERT_EQ(ex->f[i].key.len, strlen(order[i]));
        ASSERT_MEMEQ(ex->f[i].key.ptr, order[i], strlen(order[i]));
    }
    const sl_feature *img = sl_example_get(ex, "image");
    ASSERT(img != NULL);
    ASSERT_EQ(img->kind, SL_FEAT_BYTES);
    ASSERT_EQ(img->count, 4);
    sl_bytes bv[4];
    ASSERT_OK(sl_feature_bytes(img, bv, 4));
    ASSERT_EQ(bv[0].len, 5);
    ASSERT_MEMEQ(bv[0].ptr, "\0\1\0\377\0", 5);
    ASSERT_EQ(bv[1].len, 0);
    ASSERT(bv[1].ptr != NULL);
    ASSERT_EQ(bv[2].len, 3);
    ASSERT_MEMEQ(bv[2].ptr, "a\0b", 3);
    ASSERT_EQ(bv[3].len, 0);

    const sl_feature *f = sl_example_get(ex, "f");
    ASSERT(f && f->kind == SL_FEAT_FLOAT);
    ASSERT_EQ(f->count, 11);
    float fv[11];
    ASSERT_OK(sl_feature_floats(f, fv, 11));
    ASSERT_MEMEQ(fv, k_floats, sizeof fv); /* bitwise: -0.0 and NaN kept */

    const sl_feature *l = sl_example_get(ex, "label");
    ASSERT(l && l->kind == SL_FEAT_INT64);
    int64_t iv[8];
    ASSERT_OK(sl_feature_int64s(l, iv, 8));
    for (int i = 0; i < 8; i++) ASSERT_EQ(iv[i], k_ints[i]);

    const sl_feature *e1 = sl_example_get(ex, "empty_i"), *e2 = sl_example_get(ex, "empty_f"),
                     *e3 = sl_example_get(ex, "empty_b");
    ASSERT(e1 && e2 && e3);
    ASSERT_EQ(e1->kind, SL_FEAT_INT64);
    ASSERT_EQ(e2->kind, SL_FEAT_FLOAT);
    ASSERT_EQ(e3->kind, SL_FEAT_BYTES);
    ASSERT_EQ(e1->count + e2->count + e3->count, 0);
    ASSERT_OK(sl_feature_int64s(e1, NULL, 0));
    ASSERT(sl_example_get(ex, "missing") == NULL);
    ASSERT(sl_example_get(ex, "imag") == NULL);

    /* wrong kind and too little room: exact codes, nothing written */
    float guard[2] = {7.0f, 7.0f};
    ASSERT_EQ(sl_feature_floats(l, guard, 2), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "feature 'label' holds int64 values, not float");
    ASSERT_EQ(sl_feature_floats(f, guard, 2), SL_ERANGE);
    ASSERT_STREQ(sl_errmsg(), "feature 'f' holds 11 values, room for 2");
    ASSERT(guard[0] == 7.0f && guard[1] == 7.0f);
    ASSERT_EQ(sl_feature_int64s(img, iv, 8), SL_EINVAL);
    ASSERT_EQ(sl_feature_bytes(f, bv, 4), SL_EINVAL);
}

/* Parses buf into ex with PARSE (named NAME in a failure) and checks every type. Returns
 * whether both went well (a failure is printed and fails the test). */
static bool parse_and_check(sl_status (*parse)(sl_example *, const uint8_t *, size_t), const char *name,
                            sl_example *ex, const uint8_t *buf, size_t len) {
    sl_status st = parse(ex, buf, len);
    if (st) {
        FAILF("%s: %s", name, sl_errmsg());
        return false;
    }
    check_all_types(ex);
    return !t_cur_failed;
}

TEST(test_roundtrip_fast) {
    uint8_t *buf; size_t len;
    ASSERT_OK(build_all_types(&buf, &len));
    sl_example ex;
    sl_example_init(&ex);
    parse_and_check(sl_example_parse, "parse", &ex, buf, len);
    sl_example_free(&ex);
    free(buf);
}

TEST(test_roundtrip_pb) {
    uint8_t *buf; size_t len;
    ASSERT_OK(build_all_types(&buf, &len));
    sl_example ex;
    sl_example_init(&ex);
    /* the pb decoder, then the same sl_example reused across decoders */
    if (parse_and_check(sl_example_parse_pb, "parse_pb", &ex, buf, len) &&
        parse_and_check(sl_example_parse, "parse", &ex, buf, len) &&
        parse_and_check(sl_example_parse_pb, "parse_pb", &ex, buf, len))
        sl_example_free(&ex);
    sl_example_free(&ex); /* a freed example is empty and may be freed again */
    free(buf);
}

/* Our encoder's bytes equal python's SerializeToString() for single-feature Examples. */
TEST(test_encoding_matches_python) {
    static const struct { const char *hex; } want[] = {
        {"0a100a0e0a056c6162656c12051a030a0103"},               /* label: int64 [3] */
        {"0a130a110a0178120c120a0a080000c03f00000080"},         /* x: float [1.5, -0.0] */
        {"0a100a0e0a016212090a070a000a03610062"},               /* b: bytes ["", "a\0b"] */
        {"0a090a070a016512021a00"},                             /* e: int64 [] */
        {"0a2b0a290a016e12241a220a20ffffffffffffffffff01ffffffffffffffff7f8080808080808080800100ac02"},
    };
    sl_exb *b;
    ASSERT_OK(sl_exb_new(&b));
    static const int64_t three = 3, big[] = {-1, INT64_MAX, INT64_MIN, 0, 300};
    static const float fx[] = {1.5f, -0.0f};
    sl_bytes bb[2] = {{(const uint8_t *)"", 0}, {(const uint8_t *)"a\0b", 3}};
    for (int i = 0; i < 5; i++) {
        sl_exb_reset(b);
        sl_status st = i == 0 ? sl_exb_int64s(b, "label", &three, 1)
                     : i == 1 ? sl_exb_floats(b, "x", fx, 2)
                     : i == 2 ? sl_exb_bytes(b, "b", bb, 2)
                     : i == 3 ? sl_exb_int64s(b, "e", NULL, 0)
                              : sl_exb_int64s(b, "n", big, 5);
        if (st) { FAILF("add %d: %s", i, sl_errmsg()); sl_exb_free(b); return; }
        uint8_t *out; size_t len;
        if ((st = sl_exb_serialize(b, &out, &len))) { FAILF("serialize: %s", sl_errmsg()); sl_exb_free(b); return; }
        wb w = RAW(want[i].hex);
        int eq = len == w.n && memcmp(out, w.d, len) == 0;
        free(out);
        if (!eq) { FAILF("case %d: encoding differs from python's", i); sl_exb_free(b); return; }
    }
    /* no features: the Features message is still written (0a 00) */
    sl_exb_reset(b);
    uint8_t *out; size_t len;
    ASSERT_OK(sl_exb_serialize(b, &out, &len));
    ASSERT_EQ(len, 2);
    ASSERT_MEMEQ(out, "\x0a\x00", 2);
    free(out);
    sl_exb_free(b);
}

TEST(test_builder_errors) {
    sl_exb *b;
    ASSERT_OK(sl_exb_new(&b));
    int64_t v = 1;
    ASSERT_EQ(sl_exb_int64s(b, "", &v, 1), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "sl_exb: empty feature key");
    ASSERT_OK(sl_exb_int64s(b, "a", &v, 1));
    ASSERT_EQ(sl_exb_floats(b, "a", NULL, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "sl_exb: feature 'a' added twice");
    ASSERT_EQ(sl_exb_int64s(b, "c", NULL, 2), SL_EINVAL);
    sl_bytes bad = {NULL, 3};
    ASSERT_EQ(sl_exb_bytes(b, "d", &bad, 1), SL_EINVAL);
    /* failed adds leave nothing behind: "c" and "d" can still be added */
    ASSERT_OK(sl_exb_int64s(b, "c", &v, 1));
    uint8_t *out; size_t len;
    ASSERT_OK(sl_exb_serialize(b, &out, &len));
    sl_example ex;
    sl_example_init(&ex);
    ASSERT_OK(sl_example_parse(&ex, out, len));
    ASSERT_EQ(ex.n, 2);
    free(out);
    /* reuse after reset, many features (forces slot growth) */
    sl_exb_reset(b);
    char key[16];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "k%d", i);
        int64_t x = i * 7;
        ASSERT_OK(sl_exb_int64s(b, key, &x, 1));
    }
    ASSERT_OK(sl_exb_serialize(b, &out, &len));
    ASSERT_OK(sl_example_parse(&ex, out, len));
    ASSERT_EQ(ex.n, 100);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "k%d", i);
        const sl_feature *f = sl_example_get(&ex, key);
        ASSERT(f != NULL);
        ASSERT_EQ(f - ex.f, i);
        int64_t x;
        ASSERT_OK(sl_feature_int64s(f, &x, 1));
        ASSERT_EQ(x, i * 7);
    }
    ASSERT(both_agree(out, len, NULL));
    free(out);
    sl_example_free(&ex);
    sl_exb_free(b);
    sl_exb_free(NULL);
}

/* Unpacked encodings (fixed32 floats, varint int64s), mixed with packed ones. */
TEST(test_unpacked_lists) {
    wb fl = LD(2, CAT3(F32(1, 1.5f), LD(1, STR("\0\0\0\0\0\0\x80\x3f", 8)), F32(1, -2.0f)));
    wb il = LD(3, CAT3(VI(1, 5), LD(1, RAW("01 02")), VI(1, (uint64_t)-7)));
    wb in = EX(CAT(FEATURES1(ENTRY("f", fl)), FEATURES1(ENTRY("i", il))));
    for (int pb = 0; pb < 2; pb++) {
        sl_example ex;
        sl_example_init(&ex);
        ASSERT_OK(pb ? sl_example_parse_pb(&ex, in.d, in.n) : sl_example_parse(&ex, in.d, in.n));
        float f[4];
        int64_t i[4];
        ASSERT_EQ(ex.n, 2);
        ASSERT_EQ(ex.f[0].count, 4);
        ASSERT_OK(sl_feature_floats(&ex.f[0], f, 4));
        ASSERT(f[0] == 1.5f && f[1] == 0.0f && f[2] == 1.0f && f[3] == -2.0f);
        ASSERT_EQ(ex.f[1].count, 4);
        ASSERT_OK(sl_feature_int64s(&ex.f[1], i, 4));
        ASSERT(i[0] == 5 && i[1] == 1 && i[2] == 2 && i[3] == -7);
        sl_example_free(&ex);
    }
}

/* the valid Example {a: int64 [1]} followed by the bytes HEX (a field appended to it) */
#define A1_THEN(hex) CAT(EX1("a", I64(1, 1LL)), RAW(hex))

/* Hand-made inputs: the verdict and content each decoder gives, and that both agree. */
TEST(test_edge_cases) {
    struct { const char *name; wb in; const char *want; } c[] = {
        {"empty input", EMPTY(), ""},
        {"one int", EX1("a", I64(2, 1LL, 2LL)), "a=int64[2]{1,2}"},
        {"duplicate key: last value, first position",
         EX(CAT3(FEATURES1(ENTRY("a", I64(1, 1LL))), FEATURES1(ENTRY("b", I64(1, 2LL))),
                 FEATURES1(ENTRY("a", FLT(1, 3.0))))), "a=float[1]{3} b=int64[1]{2}"},
        {"features twice: merged",
         CAT(EX1("a", I64(1, 1LL)), EX1("b", BYT(1, "xy"))), "a=int64[1]{1} b=bytes[1]{2 B}"},
        {"features twice, same key", CAT(EX1("a", I64(1, 1LL)), EX1("a", I64(1, 9LL))), "a=int64[1]{9}"},
        {"oneof twice: last wins, no list merge",
         EX1("a", CAT(I64(2, 1LL, 2LL), I64(1, 3LL))), "a=int64[1]{3}"},
        {"oneof twice, other kind", EX1("a", CAT(I64(1, 1LL), FLT(1, 2.5))), "a=float[1]{2.5}"},
        {"value twice: later kind wins", EX(FEATURES1(CAT3(KEY("a"), VAL(I64(1, 1LL)), VAL(FLT(1, 2.0))))),
         "a=float[1]{2}"},
        {"value twice: later empty keeps kind", EX(FEATURES1(CAT3(KEY("a"), VAL(I64(1, 1LL)), VAL(EMPTY())))),
         "a=int64[1]{1}"},
        {"value twice: earlier empty", EX(FEATURES1(CAT3(KEY("a"), VAL(EMPTY()), VAL(I64(1, 4LL))))),
         "a=int64[1]{4}"},
        {"value twice, both empty: protobuf-c rejects",
         EX(FEATURES1(CAT3(KEY("a"), VAL(EMPTY()), VAL(EMPTY())))), "SL_ECORRUPT"},
        {"value three times, first two empty",
         EX(FEATURES1(CAT3(KEY("a"), VAL(EMPTY()), CAT(VAL(EMPTY()), VAL(I64(1, 1LL)))))), "SL_ECORRUPT"},
        {"value three times, empty ones after a kind",
         EX(FEATURES1(CAT3(KEY("a"), VAL(BYT(1, "q")), CAT(VAL(EMPTY()), VAL(EMPTY()))))), "a=bytes[1]{1 B}"},
        {"key twice in one entry: last", EX(FEATURES1(CAT3(KEY("x"), KEY("a"), VAL(I64(1, 1LL))))), "a=int64[1]{1}"},
        {"no key", EX(FEATURES1(VAL(I64(1, 1LL)))), "=int64[1]{1}"},
        {"no value", EX(FEATURES1(KEY("a"))), "a=none"},
        {"empty feature", EX1("a", EMPTY()), "a=none"},
        /* issue 11: keys are exact bytes (these used to be cut at the NUL and merged) */
        {"key with NUL is its own key", EX(FEATURES1(CAT(LD(1, STR("a\0b", 3)), VAL(I64(1, 1LL))))), "a\\x00b=int64[1]{1}"},
        {"keys equal up to NUL stay apart",
         EX(CAT(FEATURES1(CAT(LD(1, STR("a\0b", 3)), VAL(I64(1, 1LL)))),
                FEATURES1(CAT(LD(1, STR("a\0c", 3)), VAL(I64(1, 2LL)))))), "a\\x00b=int64[1]{1} a\\x00c=int64[1]{2}"},
        {"key not UTF-8", EX(FEATURES1(CAT(LD(1, STR("\xff\xfe", 2)), VAL(I64(1, 1LL))))), "\\xff\\xfe=int64[1]{1}"},
        {"empty features", EX(EMPTY()), ""},
        {"unknown fields everywhere",
         CAT3(VI(2, 5),
              EX(CAT3(F32(7, 1.0f), FEATURES1(CAT3(VI(3, 1), KEY("a"),
                      VAL(CAT3(RAW("21 0000000000000000"),
                               LD(3, CAT3(VI(2, 9), LD(1, RAW("0102")), F32(3, 0.0f))),
                               LD(9, RAW("ff")))))), RAW("2a00"))),
              RAW("79 0102030405060708")), "a=int64[2]{1,2}"},
        {"unknown fields in lists",
         EX(CAT(FEATURES1(ENTRY("b", LD(1, CAT3(VI(2, 1), LD(1, STR("z", 1)), F32(2, 1.0f))))),
                FEATURES1(ENTRY("f", LD(2, CAT3(VI(2, 1), F32(1, 0.5f), LD(3, RAW("00")))))))),
         "b=bytes[1]{1 B} f=float[1]{0.5}"},
        {"unknown field number 0, two-byte tag", A1_THEN("80 00 05"), "a=int64[1]{1}"},
        {"field number 0, one-byte tag", A1_THEN("00 05"), "SL_ECORRUPT"},
        {"field number 0 in a Feature, two-byte tag", EX1("a", CAT(I64(1, 1LL), RAW("80 00 05"))), "a=int64[1]{1}"},
        {"field number 0 in a list, one-byte tag", EX1("a", LD(3, CAT(VI(1, 4), RAW("05 00000000")))), "SL_ECORRUPT"},
        {"field number 0 in an entry, 3-byte tag", EX(FEATURES1(CAT(ENTRY("a", I64(1, 1LL)), RAW("82 80 00 00")))),
         "a=int64[1]{1}"},
        {"5-byte tag for field 1", A1_THEN("8a 80 80 80 00 00"), "a=int64[1]{1}"},
        {"5-byte tag, high bits: unknown", A1_THEN("8a 80 80 80 70 00"), "a=int64[1]{1}"},
        {"6-byte tag", A1_THEN("8a 80 80 80 80 00 00"), "SL_ECORRUPT"},
        {"group start", A1_THEN("13 14"), "SL_ECORRUPT"},
        {"group end", A1_THEN("14"), "SL_ECORRUPT"},
        {"wire type 6", A1_THEN("16 00"), "SL_ECORRUPT"},
        {"wire type 7 in a Feature", EX1("a", RAW("27 00")), "SL_ECORRUPT"},
        {"10-byte varint", A1_THEN("18 ffffffffffffffffff7f"), "a=int64[1]{1}"},
        {"11-byte varint", A1_THEN("18 ffffffffffffffffffff01"), "SL_ECORRUPT"},
        {"10-byte packed int64, top bits dropped", EX1("a", LD(3, LD(1, RAW("ffffffffffffffffff7f")))),
         "a=int64[1]{-1}"},
        {"11-byte packed int64", EX1("a", LD(3, LD(1, RAW("ffffffffffffffffffff01")))), "SL_ECORRUPT"},
        {"packed int64 ends mid-varint", EX1("a", LD(3, LD(1, RAW("01 80")))), "SL_ECORRUPT"},
        {"5-byte length", A1_THEN("12 8080808000"), "a=int64[1]{1}"},
        {"6-byte length", A1_THEN("12 808080808000"), "SL_ECORRUPT"},
        {"length 2^32+1", A1_THEN("12 8180808010 78"), "SL_ECORRUPT"},
        {"length 0xffffffff", A1_THEN("12 ffffffff0f 61626364"), "SL_ECORRUPT"},
        {"length past end", A1_THEN("12 05 0000"), "SL_ECORRUPT"},
        {"truncated fixed64", A1_THEN("19 00000000000000"), "SL_ECORRUPT"},
        {"truncated fixed32", A1_THEN("1d 000000"), "SL_ECORRUPT"},
        {"packed floats, 3 bytes", EX1("a", LD(2, LD(1, RAW("000000")))), "SL_ECORRUPT"},
        {"float as varint", EX1("a", LD(2, VI(1, 1))), "SL_ECORRUPT"},
        {"float as fixed64", EX1("a", LD(2, RAW("09 0000000000000000"))), "SL_ECORRUPT"},
        {"int64 as fixed32", EX1("a", LD(3, F32(1, 1.0f))), "SL_ECORRUPT"},
        {"int64 as fixed64", EX1("a", LD(3, RAW("09 0000000000000000"))), "SL_ECORRUPT"},
        {"bytes as varint", EX1("a", LD(1, VI(1, 1))), "SL_ECORRUPT"},
        {"Feature list as varint", EX1("a", VI(3, 1)), "SL_ECORRUPT"},
        {"key as varint", EX(FEATURES1(CAT(VI(1, 1), VAL(I64(1, 1LL))))), "SL_ECORRUPT"},
        {"value as fixed32", EX(FEATURES1(CAT(KEY("a"), F32(2, 1.0f)))), "SL_ECORRUPT"},
        {"entry as varint", EX(VI(1, 1)), "SL_ECORRUPT"},
        {"features as varint", VI(1, 1), "SL_ECORRUPT"},
        {"empty lists", EX(CAT3(FEATURES1(ENTRY("b", LD(1, EMPTY()))), FEATURES1(ENTRY("f", LD(2, EMPTY()))),
                                FEATURES1(ENTRY("i", LD(3, LD(1, EMPTY())))))), "b=bytes[0] f=float[0] i=int64[0]"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        sl_status st;
        if (!both_agree(c[i].in.d, c[i].in.n, &st)) { FAILF("%s: %s", c[i].name, why); return; }
        char *fast = summary(c[i].in.d, c[i].in.n, 0), *pb = summary(c[i].in.d, c[i].in.n, 1);
        int ok = strcmp(fast, c[i].want) == 0 && strcmp(pb, c[i].want) == 0;
        if (!ok) FAILF("%s:\n    fast     \"%s\"\n    pb       \"%s\"\n    expected \"%s\"", c[i].name, fast, pb, c[i].want);
        free(fast);
        free(pb);
        if (!ok) return;
    }
}

/* Issue 11 item 6: a key with a NUL byte was read as the key before the NUL, so
 * "label\0evil" = 7 replaced the real "label" = 3. Keys are exact bytes now, on both
 * decoders, in either order of the entries. */
TEST(test_key_with_nul) {
    wb orders[2] = {
        EX(CAT(FEATURES1(ENTRY("label", I64(1, 3LL))),
               FEATURES1(CAT(LD(1, STR("label\0evil", 10)), VAL(I64(1, 7LL)))))),
        EX(CAT(FEATURES1(CAT(LD(1, STR("label\0evil", 10)), VAL(I64(1, 7LL)))),
               FEATURES1(ENTRY("label", I64(1, 3LL))))),
    };
    for (int o = 0; o < 2; o++)
        for (int pb = 0; pb < 2; pb++) {
            sl_example ex;
            sl_example_init(&ex);
            ASSERT_OK(pb ? sl_example_parse_pb(&ex, orders[o].d, orders[o].n)
                         : sl_example_parse(&ex, orders[o].d, orders[o].n));
            ASSERT_EQ(ex.n, 2);
            int64_t v = 0;
            ASSERT_OK(sl_feature_int64s(sl_example_get(&ex, "label"), &v, 1));
            ASSERT_EQ(v, 3);
            const sl_feature *f = sl_example_get_n(&ex, "label\0evil", 10);
            ASSERT(f != NULL);
            ASSERT_EQ(f->key.len, 10);
            ASSERT_OK(sl_feature_int64s(f, &v, 1));
            ASSERT_EQ(v, 7);
            ASSERT(sl_example_get_n(&ex, "label\0evi", 9) == NULL);
            ASSERT(sl_example_get(&ex, "evil") == NULL);
            sl_example_free(&ex);
        }
    ASSERT(both_agree(orders[0].d, orders[0].n, NULL));
    ASSERT(both_agree(orders[1].d, orders[1].n, NULL));
}

TEST(test_error_messages) {
    sl_example ex;
    sl_example_init(&ex);
    wb in = A1_THEN("18 ff ff");
    ASSERT_EQ(sl_example_parse(&ex, in.d, in.n), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "byte 15: truncated varint\n"
                              "---> HINT: the record is not a serialized tf.train.Example, or it is damaged");
    ASSERT_EQ(ex.n, 0);
    in = A1_THEN("12 05 0000");
    ASSERT_EQ(sl_example_parse(&ex, in.d, in.n), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "byte 15: length 5 runs past the end of its message (2 bytes left)");
    in = EX1("a", LD(2, LD(1, RAW("000000"))));
    ASSERT_EQ(sl_example_parse(&ex, in.d, in.n), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "byte 11: packed FloatList of 3 bytes, not a multiple of 4");
    in = A1_THEN("13");
    ASSERT_EQ(sl_example_parse(&ex, in.d, in.n), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "byte 14: group (wire type 3) is not supported");
    in = EX1("a", LD(3, F32(1, 1.0f)));
    ASSERT_EQ(sl_example_parse(&ex, in.d, in.n), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "byte 11: Int64List.value has wire type 5, expected 2 or 0");
    in = EX(FEATURES1(CAT3(KEY("a"), VAL(EMPTY()), VAL(EMPTY()))));
    ASSERT_EQ(sl_example_parse(&ex, in.d, in.n), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "byte 9: map entry holds two Features without a kind");
    ASSERT_EQ(sl_example_parse_pb(&ex, in.d, in.n), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "protobuf-c rejected the 11-byte Example");
    ASSERT_EQ(sl_example_parse(&ex, NULL, 3), SL_EINVAL);
    ASSERT_OK(sl_example_parse(&ex, NULL, 0));
    ASSERT_OK(sl_example_parse_pb(&ex, NULL, 0));
    ASSERT_EQ(ex.n, 0);
    sl_example_free(&ex);
}

/* A valid Example touching every decoder path: packed and unpacked lists, unknown fields,
 * a duplicate key, an empty list, a feature without kind. */
static wb rich_example(void) {
    wb fl = LD(2, CAT3(F32(1, 1.5f), LD(1, STR("\0\0\x80\x7f\0\0\xc0\x7f", 8)), F32(1, -0.0f)));
    wb il = LD(3, CAT3(VI(1, 5), LD(1, RAW("01 ff01 80808001")), VI(1, (uint64_t)-7)));
    wb bl = BYT(3, "", "ab", "xyz");
    wb e1 = FEATURES1(CAT3(KEY("f"), VAL(fl), VI(5, 1)));
    wb e2 = FEATURES1(ENTRY("i", il));
    wb e3 = FEATURES1(ENTRY("b", bl));
    wb e4 = FEATURES1(ENTRY("f", CAT(I64(1, 3LL), F32(4, 2.0f))));
    wb e5 = FEATURES1(KEY("none"));
    wb e6 = FEATURES1(ENTRY("e", LD(2, EMPTY())));
    return CAT3(EX(CAT3(e1, e2, e3)), VI(3, 300), EX(CAT3(e4, e5, e6)));
}

TEST(test_truncations) {
    wb in = rich_example();
    char *s = summary(in.d, in.n, 0);
    ASSERT_STREQ(s, "f=int64[1]{3} i=int64[5]{5,1,255,2097152,-7} b=bytes[3]{0 B,2 B,3 B} none=none e=float[0]");
    free(s);
    int ok_count = 0;
    for (size_t len = 0; len < in.n; len++) {
        sl_status st;
        if (!both_agree(in.d, len, &st)) { FAILF("prefix %zu: %s", len, why); return; }
        if (st == SL_OK) ok_count++;
        else if (strncmp(fast_msg, "byte ", 5) != 0) { FAILF("prefix %zu: message \"%s\"", len, fast_msg); return; }
    }
    /* only the prefixes that end between top-level fields parse: empty, after the first
     * Example.features, after the unknown varint field */
    ASSERT_EQ(ok_count, 3);
}

TEST(test_byte_flips) {
    wb in = rich_example();
    size_t n_ok = 0, n_bad = 0;
    for (size_t i = 0; i < in.n; i++) {
        for (unsigned x = 1; x < 256; x++) {
            wb m = in;
            m.d[i] ^= (uint8_t)x;
            sl_status st;
            if (!both_agree(m.d, m.n, &st)) { FAILF("byte %zu ^ 0x%02x: %s", i, x, why); return; }
            if (st == SL_OK) n_ok++;
            else n_bad++;
        }
    }
    printf("  byte flips: %zu accepted, %zu rejected, both decoders agree\n", n_ok, n_bad);
    ASSERT(n_ok > 0 && n_bad > 0);
}

TEST(test_many_features_and_duplicates) {
    /* 300 distinct keys, then every key again with a new value: hash path, last wins */
    static uint8_t buf[64 * 1024];
    size_t n = 0;
    char key[16];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 300; i++) {
            snprintf(key, sizeof key, "key%d", i);
            wb e = EX1(key, I64(1, (long long)(round * 1000 + i)));
            memcpy(buf + n, e.d, e.n);
            n += e.n;
        }
    }
    sl_status st;
    ASSERT(both_agree(buf, n, &st));
    ASSERT_EQ(st, SL_OK);
    sl_example ex;
    sl_example_init(&ex);
    ASSERT_OK(sl_example_parse(&ex, buf, n));
    ASSERT_EQ(ex.n, 300);
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof key, "key%d", i);
        const sl_feature *f = sl_example_get(&ex, key);
        ASSERT(f == &ex.f[i]);
        int64_t v;
        ASSERT_OK(sl_feature_int64s(f, &v, 1));
        ASSERT_EQ(v, 1000 + i);
    }
    sl_example_free(&ex);
}

/* Expected strings: python3-protobuf 4.21, MessageToJson(msg, indent=None). */
TEST(test_json_matches_python) {
    static const float fv[] = {
        3.14f, 0.1f, (float)1e-8, (float)1e20, (float)1e16, (float)1e15, (float)123456789.0, 16777216.0f,
        0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1.5f, (float)3.4028234663852886e38,
        (float)1.401298464324817e-45, (float)1.1754943508222875e-38, (float)0.0001, (float)0.00001,
        100.0f, 1234567.0f, (float)0.3, (float)2.5e-5, (float)7e22, (float)9.999999e15, (float)1e-5,
        (float)-123.456, (float)9.5367431640625e-07, (float)0.3333333333333333, 65504.0f,
        (float)0.00030000000000000003, (float)1e-40};
    static const int64_t iv[] = {1, -2, INT64_MAX, INT64_MIN, 0};
    sl_bytes bv[6] = {{(const uint8_t *)"", 0}, {(const uint8_t *)"\0\377", 2}, {(const uint8_t *)"ab", 2},
                      {(const uint8_t *)"abc", 3}, {(const uint8_t *)"abcd", 4}, {(const uint8_t *)"\xfb\xff", 2}};
    struct { wb in; const char *want; } c[] = {
        {EMPTY(), "{}"},
        {EX(EMPTY()), "{\"features\": {}}"},
        {EX1("a", EMPTY()), "{\"features\": {\"feature\": {\"a\": {}}}}"},
        {EX1("a", LD(3, EMPTY())), "{\"features\": {\"feature\": {\"a\": {\"int64List\": {}}}}}"},
        {EMPTY(), "{\"features\": {\"feature\": {\"i\": {\"int64List\": {\"value\": [\"1\", \"-2\", \"9223372036854775807\", \"-9223372036854775808\", \"0\"]}}}}}"},
        {EMPTY(), "{\"features\": {\"feature\": {\"b\": {\"bytesList\": {\"value\": [\"\", \"AP8=\", \"YWI=\", \"YWJj\", \"YWJjZA==\", \"+/8=\"]}}}}}"},
        {EMPTY(), "{\"features\": {\"feature\": {\"f\": {\"floatList\": {\"value\": [3.14, 0.1, 1e-08, 1e+20, 1e+16, 1000000000000000.0, 123456790.0, 16777216.0, 0.0, -0.0, \"NaN\", \"Infinity\", \"-Infinity\", 1.5, 3.4028235e+38, 1.4013e-45, 1.1754944e-38, 0.0001, 1e-05, 100.0, 1234567.0, 0.3, 2.5e-05, 7e+22, 9999999000000000.0, 1e-05, -123.456, 9.536743e-07, 0.33333334, 65504.0, 0.0003, 9.99995e-41]}}}}}"},
        {EX1("k\xc3\xa9y\n\"\\\x01\x7f\x1f/\xe2\x80\xa8\xf0\x9f\x98\x80", I64(1, 7LL)),
         "{\"features\": {\"feature\": {\"k\\u00e9y\\n\\\"\\\\\\u0001\\u007f\\u001f/\\u2028\\ud83d\\ude00\": {\"int64List\": {\"value\": [\"7\"]}}}}}"},
        /* pwnall/tfrecord testdata/singles.tfrecords, records 1-3 (python printed these too) */
        {RAW("0a160a140a0b696e745f6665617475726512051a030a012a"),
         "{\"features\": {\"feature\": {\"int_feature\": {\"int64List\": {\"value\": [\"42\"]}}}}}"},
        {RAW("0a1b0a190a0d666c6f61745f66656174757265120812060a04c3f54840"),
         "{\"features\": {\"feature\": {\"float_feature\": {\"floatList\": {\"value\": [3.14]}}}}}"},
        {RAW("0a1b0a190a0c627974655f6665617475726512090a070a054041424344"),
         "{\"features\": {\"feature\": {\"byte_feature\": {\"bytesList\": {\"value\": [\"QEFCQ0Q=\"]}}}}}"},
    };
    sl_exb *b;
    ASSERT_OK(sl_exb_new(&b));
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        wb in = c[i].in;
        if (i >= 4 && i <= 6) { /* built with the encoder */
            uint8_t *out; size_t len;
            sl_exb_reset(b);
            if (i == 4) ASSERT_OK(sl_exb_int64s(b, "i", iv, 5));
            if (i == 5) ASSERT_OK(sl_exb_bytes(b, "b", bv, 6));
            if (i == 6) ASSERT_OK(sl_exb_floats(b, "f", fv, sizeof fv / sizeof fv[0]));
            ASSERT_OK(sl_exb_serialize(b, &out, &len));
            in.n = 0;
            w_raw(&in, out, len);
            free(out);
        }
        for (int pb = 0; pb < 2; pb++) {
            sl_example ex;
            sl_example_init(&ex);
            ASSERT_OK(pb ? sl_example_parse_pb(&ex, in.d, in.n) : sl_example_parse(&ex, in.d, in.n));
            char *js; size_t len;
            ASSERT_OK(sl_example_to_json(&ex, &js, &len));
            int eq = strcmp(js, c[i].want) == 0 && len == strlen(js);
            if (!eq) FAILF("case %zu (%s):\n    got      %s\n    expected %s", i, pb ? "pb" : "fast", js, c[i].want);
            free(js);
            sl_example_free(&ex);
            if (!eq) { sl_exb_free(b); return; }
        }
    }
    sl_exb_free(b);
}

TEST(test_json_multi_and_text) {
    wb in = EX(CAT3(FEATURES1(ENTRY("label", I64(1, 3LL))), FEATURES1(ENTRY("image", BYT(1, "abcd"))),
                    FEATURES1(ENTRY("w", FLT(3, 0.5, -1.25, 1e-7)))));
    sl_example ex;
    sl_example_init(&ex);
    ASSERT_OK(sl_example_parse(&ex, in.d, in.n));
    char *s;
    ASSERT_OK(sl_example_to_json(&ex, &s, NULL));
    ASSERT_STREQ(s, "{\"features\": {\"feature\": {\"label\": {\"int64List\": {\"value\": [\"3\"]}}, "
                    "\"image\": {\"bytesList\": {\"value\": [\"YWJjZA==\"]}}, "
                    "\"w\": {\"floatList\": {\"value\": [0.5, -1.25, 1e-07]}}}}}");
    free(s);
    ASSERT_OK(sl_example_to_text(&ex, 2, &s, NULL));
    ASSERT_STREQ(s, "label=int64[1]{3} image=bytes[1]{4 B} w=float[3]{0.5,-1.25,...}");
    free(s);
    ASSERT_OK(sl_example_to_text(&ex, 0, &s, NULL));
    ASSERT_STREQ(s, "label=int64[1] image=bytes[1] w=float[3]");
    free(s);
    ASSERT_OK(sl_example_parse(&ex, NULL, 0));
    size_t len = 99;
    ASSERT_OK(sl_example_to_text(&ex, 3, &s, &len));
    ASSERT_STREQ(s, "");
    ASSERT_EQ(len, 0);
    free(s);
    sl_example_free(&ex);
}

/* ---- real files from other writers ---------------------------------------------------- */

/* The records of an uncompressed TFRecord file (framing only, CRCs not checked here:
 * formats/tfrecord.c has its own tests). Returns the number of records, -1 on error. */
static int read_records(const char *path, uint8_t **data, size_t *off, size_t *len, int max) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    *data = malloc((size_t)sz + 1);
    if (fread(*data, 1, (size_t)sz, fp) != (size_t)sz) { fclose(fp); return -1; }
    fclose(fp);
    int n = 0;
    size_t p = 0;
    while (p < (size_t)sz && n < max) {
        uint64_t l;
        if ((size_t)sz - p < 12) return -1;
        memcpy(&l, *data + p, 8);
        if (l > (size_t)sz - p - 16) return -1;
        off[n] = p + 12;
        len[n++] = (size_t)l;
        p += 16 + (size_t)l;
    }
    return p == (size_t)sz ? n : -1;
}

TEST(test_file_singles) {
    uint8_t *data = NULL;
    size_t off[8], len[8];
    int n = read_records(SL_TEST_DATA "/tfrecord-samples/pwnall__tfrecord/testdata__singles.tfrecords",
                         &data, off, len, 8);
    if (n < 0) { free(data); SKIP("testdata__singles.tfrecords not readable"); }
    ASSERT_EQ(n, 3);
    for (int pb = 0; pb < 2; pb++) {
        sl_example ex;
        sl_example_init(&ex);
        int64_t iv;
        float fv;
        sl_bytes bv;
        ASSERT_OK(pb ? sl_example_parse_pb(&ex, data + off[0], len[0]) : sl_example_parse(&ex, data + off[0], len[0]));
        ASSERT_EQ(ex.n, 1);
        ASSERT_OK(sl_feature_int64s(sl_example_get(&ex, "int_feature"), &iv, 1));
        ASSERT_EQ(iv, 42);
        ASSERT_OK(pb ? sl_example_parse_pb(&ex, data + off[1], len[1]) : sl_example_parse(&ex, data + off[1], len[1]));
        ASSERT_OK(sl_feature_floats(sl_example_get(&ex, "float_feature"), &fv, 1));
        ASSERT(fv == 3.14f);
        ASSERT_OK(pb ? sl_example_parse_pb(&ex, data + off[2], len[2]) : sl_example_parse(&ex, data + off[2], len[2]));
        ASSERT_OK(sl_feature_bytes(sl_example_get(&ex, "byte_feature"), &bv, 1));
        ASSERT_EQ(bv.len, 5);
        ASSERT_MEMEQ(bv.ptr, "@ABCD", 5);
        sl_example_free(&ex);
    }
    free(data);
}

TEST(test_file_tfrecord_lite) {
    /* feature0, feature1, feature2, bits of feature3 for each record, printed by python */
    static const struct { int64_t f0, f1; const char *f2; uint32_t f3; } want[42] = {
        {0, 2, "chicken", 0xbf8fd70f}, {1, 4, "goat", 0x3f65eda3}, {1, 3, "horse", 0x3eda22e8},
        {0, 1, "dog", 0xbe83a032}, {0, 0, "cat", 0x40038305}, {0, 0, "cat", 0xbfd157ca},
        {1, 1, "dog", 0xbf8b9957}, {1, 1, "dog", 0x3fa40773}, {0, 0, "cat", 0xbf25d13b},
        {1, 1, "dog", 0x3f2ad2c3}, {0, 2, "chicken", 0xbeb971e9}, {1, 2, "chicken", 0xbfad0d27},
        {1, 3, "horse", 0x3eeff977}, {1, 0, "cat", 0xbfeae407}, {1, 4, "goat", 0x3e9af209},
        {1, 3, "horse", 0xbe98a699}, {0, 2, "chicken", 0xbfa34ca0}, {1, 4, "goat", 0x3f924ea0},
        {1, 2, "chicken", 0xbfd27f43}, {0, 2, "chicken", 0x3f963f56}, {0, 3, "horse", 0x3d3653ef},
        {0, 0, "cat", 0xbf8fd203}, {0, 4, "goat", 0x3f102e58}, {0, 1, "dog", 0x3f19d96f},
        {1, 4, "goat", 0x3ee373f2}, {1, 1, "dog", 0xbf095129}, {0, 1, "dog", 0xbf9815db},
        {1, 4, "goat", 0xbf213ff9}, {1, 2, "chicken", 0xbf98cd2c}, {1, 4, "goat", 0xbf1123e4},
        {0, 3, "horse", 0x3febcdbc}, {1, 3, "horse", 0x3edfa386}, {0, 2, "chicken", 0x400a296b},
        {1, 0, "cat", 0xc00cad42}, {1, 1, "dog", 0x3e973a9a}, {1, 1, "dog", 0xbf672a4a},
        {1, 2, "chicken", 0xbf5c4929}, {1, 3, "horse", 0xbe90f66a}, {0, 2, "chicken", 0xbfafa478},
        {1, 0, "cat", 0x3f7d2a20}, {1, 3, "horse", 0xbf0fa3e9}, {0, 1, "dog", 0xbfb9bd6f},
    };
    uint8_t *data = NULL;
    size_t off[64], len[64];
    int n = read_records(SL_TEST_DATA "/tfrecord-samples/jongwook__tfrecord_lite/tests__test.tfrecord",
                         &data, off, len, 64);
    if (n < 0) { free(data); SKIP("tests__test.tfrecord not readable"); }
    ASSERT_EQ(n, 42);
    sl_example ex;
    sl_example_init(&ex);
    for (int r = 0; r < n; r++) {
        if (!both_agree(data + off[r], len[r], NULL)) { FAILF("record %d: %s", r, why); break; }
        ASSERT_OK(sl_example_parse(&ex, data + off[r], len[r]));
        ASSERT_EQ(ex.n, 4);
        int64_t a, b;
        float f;
        sl_bytes s;
        ASSERT_OK(sl_feature_int64s(sl_example_get(&ex, "feature0"), &a, 1));
        ASSERT_OK(sl_feature_int64s(sl_example_get(&ex, "feature1"), &b, 1));
        ASSERT_OK(sl_feature_bytes(sl_example_get(&ex, "feature2"), &s, 1));
        ASSERT_OK(sl_feature_floats(sl_example_get(&ex, "feature3"), &f, 1));
        uint32_t bits;
        memcpy(&bits, &f, 4);
        ASSERT_EQ(a, want[r].f0);
        ASSERT_EQ(b, want[r].f1);
        ASSERT_EQ(s.len, strlen(want[r].f2));
        ASSERT_MEMEQ(s.ptr, want[r].f2, s.len);
        ASSERT_U64(bits, want[r].f3);
    }
    sl_example_free(&ex);
    free(data);
}

int main(void) {
    RUN(test_kind_names);
    RUN(test_roundtrip_fast);
    RUN(test_roundtrip_pb);
    RUN(test_encoding_matches_python);
    RUN(test_builder_errors);
    RUN(test_unpacked_lists);
    RUN(test_edge_cases);
    RUN(test_key_with_nul);
    RUN(test_error_messages);
    RUN(test_truncations);
    RUN(test_byte_flips);
    RUN(test_many_features_and_duplicates);
    RUN(test_json_matches_python);
    RUN(test_json_multi_and_text);
    RUN(test_file_singles);
    RUN(test_file_tfrecord_lite);
    TEST_MAIN_END();
}
