/* core/json.c: the writer (sl_json_put_str in both flavours: plain, only '"', '\\' and
 * control bytes escaped, UTF-8 passed through; SL_JSON_ASCII, json.dumps' ensure_ascii, with
 * invalid UTF-8 read as U+FFFD and astral characters as surrogate pairs; sl_json_fput_str;
 * the growing text buffer), and the reader: the tree it builds (offsets, exact integers,
 * key offsets), its options (message prefix and base offset, the name of the end, keeping
 * duplicate keys, raw bytes, stopping after one value), its byte budget to the byte, the
 * search for repeated keys (sl__first_repeat, also the config language's), and round trips
 * (sl_json_buf_put_tree) and corruption of whole documents. TF_CONFIG's use of the reader is
 * tested in test_cluster.c. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "sluice/json.h"
#include "sluice/util.h"
#include "test.h"

typedef struct {
    char buf[256];
    size_t n;
    int calls;
} sink;

static void put(void *ctx, const char *b, size_t n) {
    sink *k = ctx;
    if (k->n + n < sizeof k->buf) memcpy(k->buf + k->n, b, n);
    k->n += n;
    k->buf[k->n < sizeof k->buf ? k->n : sizeof k->buf - 1] = 0;
    k->calls++;
}

static const char *quote(const void *s, size_t n, unsigned flags) {
    static sink k;
    memset(&k, 0, sizeof k);
    sl_json_put_str(put, &k, s, n, flags);
    return k.buf;
}

TEST(test_plain) {
    ASSERT_STREQ(quote("", 0, 0), "\"\"");
    ASSERT_STREQ(quote("abc", 3, 0), "\"abc\"");
    ASSERT_STREQ(quote("a\"b\\c/d", 7, 0), "\"a\\\"b\\\\c/d\"");
    ASSERT_STREQ(quote("t\tn\n\x01\x1f", 6, 0), "\"t\\u0009n\\u000a\\u0001\\u001f\"");
    ASSERT_STREQ(quote("x\0y", 3, 0), "\"x\\u0000y\"");
    ASSERT_STREQ(quote("caf\xc3\xa9 \xff", 7, 0), "\"caf\xc3\xa9 \xff\""); /* bytes >= 0x80 pass */
    ASSERT_STREQ(quote("\x7f", 1, 0), "\"\x7f\"");
}

TEST(test_ascii) {
    ASSERT_STREQ(quote("a\"b\\c", 5, SL_JSON_ASCII), "\"a\\\"b\\\\c\"");
    ASSERT_STREQ(quote("\n\r\t\b\f\x01\x7f", 7, SL_JSON_ASCII), "\"\\n\\r\\t\\b\\f\\u0001\\u007f\"");
    ASSERT_STREQ(quote("caf\xc3\xa9", 5, SL_JSON_ASCII), "\"caf\\u00e9\"");
    ASSERT_STREQ(quote("\xe2\x82\xac", 3, SL_JSON_ASCII), "\"\\u20ac\"");
    ASSERT_STREQ(quote("\xf0\x9f\x98\x80", 4, SL_JSON_ASCII), "\"\\ud83d\\ude00\""); /* U+1F600 */
    /* invalid: a lone continuation byte, an overlong '/', a truncated sequence, a surrogate */
    ASSERT_STREQ(quote("\x80" "\xc0\xaf" "\xe2\x82" "\xed\xa0\x80", 8, SL_JSON_ASCII),
                 "\"\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\""); /* one per byte */
}

TEST(test_round_trip) {
    const char *texts[] = {"plain", "quote \" and \\ back", "ctl \x01\x02\x1f\n", "utf8 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"};
    for (int f = 0; f < 2; f++) {
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
            const char *q = quote(texts[i], strlen(texts[i]), f ? SL_JSON_ASCII : 0);
            sl_json *j;
            ASSERT_OK(sl_json_parse(q, strlen(q), "J", &j));
            ASSERT_EQ(j->kind, SL_JSON_STRING);
            ASSERT_STREQ(j->str, texts[i]);
            sl_json_free(j);
        }
    }
}

TEST(test_fput) {
    char *mem = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&mem, &len);
    ASSERT(f != NULL);
    sl_json_fput_str(f, "op \"a\"\t1");
    fclose(f);
    ASSERT_STREQ(mem, "\"op \\\"a\\\"\\u00091\"");
    free(mem);
}

/* ---- the text buffer ---- */

TEST(test_buf) {
    sl_json_buf b = {0};
    sl_json_buf_put(&b, "ab", 2);
    sl_json_buf_printf(&b, "[%d,%s]", 7, "x");
    ASSERT_STREQ(b.p, "ab[7,x]");
    ASSERT_EQ(b.len, 7);
    ASSERT(!b.oom);
    char big[300];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = 0;
    sl_json_buf_printf(&b, "%s!", big); /* longer than any fixed scratch: nothing is cut */
    ASSERT_EQ(b.len, 7 + 299 + 1);
    ASSERT_EQ(b.p[b.len - 1], '!');
    ASSERT_EQ(b.p[b.len], 0);
    ASSERT(sl_json_buf_reserve(&b, 5000));
    ASSERT(b.cap >= b.len + 5000 + 1);
    size_t len = b.len;
    sl_json_put_str(sl_json_buf_put_fn, &b, "q\"", 2, 0);
    ASSERT_STREQ(b.p + len, "\"q\\\"\"");
    free(b.p);
    sl_json_buf e = {0};
    sl_json_buf_put(&e, "", 0);
    ASSERT(e.p != NULL); /* an empty text is still a string */
    ASSERT_STREQ(e.p, "");
    free(e.p);
}

/* ---- the reader ---- */

static sl_status parse_o(const char *text, const sl_json_opts *o, sl_json **j) {
    return sl_json_parse_opts(text, strlen(text), o, j);
}

/* The failure's status, *out left NULL, and the whole first line of the message. */
#define ASSERT_FAILS(text, opts, code, msg)                                          \
    do {                                                                             \
        sl_json *_j = (sl_json *)1;                                                  \
        sl_status _s = parse_o((text), (opts), &_j);                                 \
        if (_s != (code)) {                                                          \
            FAILF("%s: status %d (%s), expected %d", (text), _s, sl_errmsg(), (code)); \
            if (_s == SL_OK) sl_json_free(_j);                                       \
            return;                                                                  \
        }                                                                            \
        ASSERT(_j == NULL);                                                          \
        char _line[512];                                                             \
        snprintf(_line, sizeof _line, "%s", sl_errmsg());                            \
        char *_nl = strchr(_line, '\n');                                             \
        if (_nl) *_nl = 0;                                                           \
        ASSERT_STREQ(_line, (msg));                                                  \
    } while (0)

TEST(test_read_tree) {
    const char *t = "{ \"s\" : \"a\\u00e9\", \"n\": [0, -0, 9007199254740993, -9223372036854775808, "
                    "9223372036854775808, 1.0, 2e3, -25e-1], \"t\": true, \"z\": null, \"e\": {}}";
    sl_json *j;
    ASSERT_OK(sl_json_parse(t, strlen(t), "J", &j));
    ASSERT_EQ(j->kind, SL_JSON_OBJECT);
    ASSERT_EQ(j->offset, 0);
    ASSERT_EQ(j->len, 5);
    ASSERT_STREQ(j->keys[0], "s");
    ASSERT_EQ(sl_json_key_offset(j, 0), 2);
    ASSERT_EQ(sl_json_key_offset(j, 1), 19);
    ASSERT_EQ(sl_json_key_offset(j, 4), 134);
    const sl_json *s = sl_json_get(j, "s");
    ASSERT(s && s->kind == SL_JSON_STRING && s->offset == 8 && s->len == 3);
    ASSERT_STREQ(s->str, "a\xc3\xa9");
    const sl_json *n = sl_json_get(j, "n");
    ASSERT(n && n->kind == SL_JSON_ARRAY && n->len == 8 && n->offset == 24);
    static const struct {
        size_t offset, len;
        bool is_int;
        int64_t i;
        double num;
    } want[] = {
        {25, 1, true, 0, 0},
        {28, 2, true, 0, -0.0},
        {32, 16, true, 9007199254740993LL, 9007199254740992.0}, /* exact as an integer only */
        {50, 20, true, INT64_MIN, -9223372036854775808.0},
        {72, 19, false, 0, 9223372036854775808.0}, /* past INT64_MAX: a double only */
        {93, 3, false, 0, 1},
        {98, 3, false, 0, 2000},
        {103, 6, false, 0, -2.5},
    };
    for (int k = 0; k < 8; k++) {
        const sl_json *v = &n->items[k];
        ASSERT_EQ(v->kind, SL_JSON_NUMBER);
        ASSERT_EQ(v->offset, want[k].offset);
        ASSERT_EQ(v->len, want[k].len); /* the literal's length */
        ASSERT_EQ(v->is_int, want[k].is_int);
        if (v->is_int) ASSERT_EQ(v->i, want[k].i);
        ASSERT(v->num == want[k].num);
    }
    ASSERT(signbit(n->items[1].num)); /* -0 stays negative zero as a double */
    ASSERT_EQ(sl_json_get(j, "t")->kind, SL_JSON_BOOL);
    ASSERT(sl_json_get(j, "t")->b);
    ASSERT_EQ(sl_json_get(j, "z")->kind, SL_JSON_NULL);
    const sl_json *e = sl_json_get(j, "e");
    ASSERT(e && e->kind == SL_JSON_OBJECT && e->len == 0 && e->offset == 139);
    sl_json_free(j);
    /* a number of any length (strtod's input was once cut at 63 bytes) */
    char big[400] = "[1";
    memset(big + 2, '0', 300);
    strcpy(big + 302, ".5]");
    ASSERT_OK(sl_json_parse(big, strlen(big), "J", &j));
    ASSERT(j->items[0].num == 1e300);
    ASSERT(!j->items[0].is_int);
    sl_json_free(j);
}

TEST(test_read_messages) {
    /* the syntax errors name the byte and say what is wrong there; each option adds its
     * part (the prefix, the base offset, the end's name) */
    sl_json_opts o = {.what = "f.st", .prefix = "bad header: ", .base = 8, .end_name = "the end of the header"};
    static const struct {
        bool opts;
        const char *text, *msg;
    } bad[] = {
        {false, "[01]", "JSON: byte 1: number with a leading zero"},
        {false, "-012", "JSON: byte 0: number with a leading zero"},
        {false, "\"a\x09\"", "JSON: byte 2: control character 0x09 in a string (escape it)"},
        {false, "\"\\ud83dx\"", "JSON: byte 1: high surrogate \\ud83d without a low surrogate"},
        {false, "\"\\ude00\"", "JSON: byte 1: lone low surrogate \\ude00"},
        {false, "\"\\ud83d\\u0041\"", "JSON: byte 7: bad low surrogate \\u0041 after \\ud83d"},
        {false, "\"\\u0000\"", "JSON: byte 1: \\u0000 is not allowed in a string"},
        {false, "\"\\u12g4\"", "JSON: byte 5: bad hex digit in \\u escape"},
        {true, "[1,", "f.st: byte 11: bad header: expected a value, found the end of the header"},
        {true, "{\"a\":1,\"a\":2}", "f.st: byte 15: bad header: duplicate key \"a\""},
        {true, "[1] x", "f.st: byte 12: bad header: unexpected 'x' after the value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ASSERT_FAILS(bad[i].text, bad[i].opts ? &o : NULL, SL_ECORRUPT, bad[i].msg);
    /* the first repeated key in the document's order, also among many keys (sorted, not
     * compared pairwise: 20000 keys would take 2e8 comparisons) */
    sl_json_buf b = {0};
    sl_json_buf_put(&b, "{", 1);
    for (int k = 0; k < 20000; k++) sl_json_buf_printf(&b, "\"k%d\":%d,", k, k);
    sl_json_buf_printf(&b, "\"b\":1,\"a\":2,\"a\":3,\"b\":4}");
    char want[120];
    snprintf(want, sizeof want, "JSON: byte %zu: duplicate key \"a\"", b.len - 12);
    ASSERT_FAILS(b.p, NULL, SL_ECORRUPT, want);
    b.p[b.len - 11] = 'c'; /* the second "a" becomes "c": the repeated "b" is found */
    snprintf(want, sizeof want, "JSON: byte %zu: duplicate key \"b\"", b.len - 6);
    ASSERT_FAILS(b.p, NULL, SL_ECORRUPT, want);
    b.p[b.len - 5] = 'd';
    sl_json *j;
    ASSERT_OK(sl_json_parse(b.p, b.len, "J", &j));
    ASSERT_EQ(j->len, 20004);
    ASSERT_EQ(sl_json_get(j, "k19999")->i, 19999);
    sl_json_free(j);
    free(b.p);
}

TEST(test_read_options) {
    sl_json *j;
    /* duplicates kept for the caller, in order, with their offsets */
    sl_json_opts o = {.flags = SL_JSON_KEEP_DUPLICATES};
    ASSERT_OK(parse_o("{\"a\":1, \"a\":2}", &o, &j));
    ASSERT_EQ(j->len, 2);
    ASSERT_STREQ(j->keys[1], "a");
    ASSERT_EQ(sl_json_key_offset(j, 1), 8);
    ASSERT_EQ(j->items[1].i, 2);
    sl_json_free(j);
    /* bytes that are not UTF-8 (what the plain writer passes through) */
    ASSERT_FAILS("[\"a\xff\"]", NULL, SL_ECORRUPT, "JSON: byte 3: invalid UTF-8 in a string");
    o.flags = SL_JSON_RAW_BYTES;
    ASSERT_OK(parse_o("[\"a\xff\xc3\"]", &o, &j));
    ASSERT_STREQ(j->items[0].str, "a\xff\xc3");
    ASSERT_EQ(j->items[0].len, 3);
    sl_json_free(j);
    ASSERT_FAILS("[\"a\x01\"]", &o, SL_ECORRUPT, "JSON: byte 3: control character 0x01 in a string (escape it)");
    /* one value, then whatever follows is the caller's */
    size_t end = 0;
    o = (sl_json_opts){.end = &end};
    ASSERT_OK(parse_o("  {\"a\": [1]}   x", &o, &j));
    ASSERT_EQ(end, 12);
    ASSERT_EQ(j->offset, 2);
    sl_json_free(j);
    end = 99;
    ASSERT_FAILS("{\"a\": [1}", &o, SL_ECORRUPT, "JSON: byte 8: expected ',' or ']', found '}'");
    ASSERT_EQ(end, 99); /* untouched on failure */
}

/* Every byte the tree takes is counted: each value sizeof(sl_json), each object member a key
 * pointer and a key offset, each string its bytes and a NUL, each array or object a size_t
 * while it is read. At the total the document reads; one byte less is refused at the value
 * whose count crossed it. */
TEST(test_read_budget) {
    const char *t = "{\"ab\": [1, \"xyz\", {}]}";
    size_t need = 5 * sizeof(sl_json) + sizeof(char *) + sizeof(size_t) + 3 + 4 + 3 * sizeof(size_t);
    sl_json *j;
    sl_json_opts o = {.what = "J", .max_bytes = need};
    ASSERT_OK(parse_o(t, &o, &j));
    sl_json_free(j);
    char want[200];
    o.max_bytes = need - 1;
    snprintf(want, sizeof want, "J: byte 18: its JSON would take more than %zu bytes in memory", need - 1);
    ASSERT_FAILS(t, &o, SL_ECORRUPT, want);
    o.max_bytes = need - sizeof(size_t) - sizeof(sl_json) - 1; /* the string "xyz" crosses it */
    o.prefix = "not ours: ";
    o.max_bytes_text = "4 times its size";
    o.max_bytes_hint = "such files are small";
    ASSERT_FAILS(t, &o, SL_ECORRUPT, "J: byte 11: not ours: its JSON would take more than 4 times its size in memory");
    ASSERT_CONTAINS(sl_errmsg(), "\n---> HINT: such files are small");
    /* a wide array of small values: refused long before it is allocated */
    size_t n = 1u << 20;
    char *wide = malloc(2 * n + 2);
    ASSERT(wide);
    wide[0] = '[';
    for (size_t i = 0; i < n; i++) memcpy(wide + 1 + 2 * i, "0,", 2);
    wide[2 * n] = ']';
    wide[2 * n + 1] = 0;
    o = (sl_json_opts){.what = "W", .max_bytes = 16 * 2 * n};
    sl_status s = parse_o(wide, &o, &j);
    free(wide);
    ASSERT_EQ(s, SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "bytes in memory");
}

static const char DOC[] = "{\"name\": \"caf\\u00e9 \\ud83d\\ude00 \\\"q\\\" \\/ \\b\\f\\n\\r\\t\", \"xs\": [1, -2.5e-3, "
                          "123456789012345678, 0.1, true, false, null, [], {}], \"deep\": {\"a\": [[{\"b\": \"\xe2\x82\xac\"}]]},"
                          " \"\\u00e9\": 3}";

static char *tree_text(const sl_json *v, unsigned flags) {
    sl_json_buf b = {0};
    sl_json_buf_put_tree(&b, v, flags);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* The tree written back is the document without its white space (strings escaped as the
 * writer escapes them, numbers keeping their kind), reads back as the same tree, and writes
 * again as the same text; in the ASCII flavour too. */
TEST(test_read_round_trip) {
    static const char want[] =
        "{\"name\":\"caf\xc3\xa9 \xf0\x9f\x98\x80 \\\"q\\\" / \\u0008\\u000c\\u000a\\u000d\\u0009\","
        "\"xs\":[1,-0.0025000000000000001,123456789012345678,0.10000000000000001,true,false,null,[],{}],"
        "\"deep\":{\"a\":[[{\"b\":\"\xe2\x82\xac\"}]]},\"\xc3\xa9\":3}";
    static const char want_ascii[] =
        "{\"name\":\"caf\\u00e9 \\ud83d\\ude00 \\\"q\\\" / \\b\\f\\n\\r\\t\","
        "\"xs\":[1,-0.0025000000000000001,123456789012345678,0.10000000000000001,true,false,null,[],{}],"
        "\"deep\":{\"a\":[[{\"b\":\"\\u20ac\"}]]},\"\\u00e9\":3}";
    sl_json *a, *b;
    ASSERT_OK(sl_json_parse(DOC, strlen(DOC), "J", &a));
    ASSERT_STREQ(sl_json_get(a, "name")->str, "caf\xc3\xa9 \xf0\x9f\x98\x80 \"q\" / \b\f\n\r\t");
    ASSERT_EQ(sl_json_get(a, "xs")->items[2].i, 123456789012345678LL);
    ASSERT_EQ(sl_json_get(a, "\xc3\xa9")->i, 3);
    char *t = tree_text(a, 0), *ta = tree_text(a, SL_JSON_ASCII);
    ASSERT(t && ta);
    ASSERT_STREQ(t, want);
    ASSERT_STREQ(ta, want_ascii);
    for (int k = 0; k < 2; k++) {
        const char *src = k ? ta : t;
        ASSERT_OK(sl_json_parse(src, strlen(src), "J", &b));
        char *again = tree_text(b, 0);
        sl_json_free(b);
        ASSERT(again);
        ASSERT_STREQ(again, t);
        free(again);
    }
    /* the same document under the smallest budget it fits in reads the same */
    size_t lo = 0, hi = 1u << 20;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        sl_json_opts o = {.max_bytes = mid};
        sl_json *x = NULL;
        if (parse_o(DOC, &o, &x) == SL_OK) {
            sl_json_free(x);
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    sl_json_opts o = {.max_bytes = lo};
    ASSERT_OK(parse_o(DOC, &o, &b));
    char *small = tree_text(b, 0);
    sl_json_free(b);
    ASSERT(small);
    ASSERT_STREQ(small, t);
    ASSERT(lo < 40 * strlen(DOC)); /* proportional to the text */
    free(small);
    free(t);
    free(ta);
    sl_json_free(a);
    /* numbers keep their kind: a non-integer is written with a fraction or an exponent */
    const char *nums = "[1.0, -0.0, 1e2, -0, 100, 1e300, -9223372036854775808, 9223372036854775808]";
    ASSERT_OK(sl_json_parse(nums, strlen(nums), "J", &a));
    t = tree_text(a, 0);
    ASSERT_STREQ(t, "[1.0,-0.0,100.0,0,100,1.0000000000000001e+300,-9223372036854775808,9.2233720368547758e+18]");
    ASSERT_OK(sl_json_parse(t, strlen(t), "J", &b));
    char *again = tree_text(b, 0);
    ASSERT_STREQ(again, t);
    free(again);
    free(t);
    sl_json_free(b);
    sl_json_free(a);
}

/* The first key that repeats an earlier one, in the keys' order, with the one it repeats:
 * the same answer by the pairwise path (up to 16 keys) and the sorted one. */
TEST(test_first_repeat) {
    const char *keys[40] = {"b", NULL, "a", "c", NULL, "a", "b", "a"};
    size_t second, first;
    ASSERT_OK(sl__first_repeat(keys, 8, &second, &first));
    ASSERT_EQ(second, 5);
    ASSERT_EQ(first, 2);
    ASSERT_OK(sl__first_repeat(keys, 5, &second, &first)); /* NULLs are no key */
    ASSERT_EQ(second, 5);
    ASSERT_EQ(first, 5);
    char names[40][12];
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof names[i], "k%d", i);
        keys[i] = names[i];
    }
    keys[11] = NULL;
    ASSERT_OK(sl__first_repeat(keys, 40, &second, &first));
    ASSERT_EQ(second, 40);
    keys[37] = "k30";
    keys[33] = "k20";
    keys[35] = "k20";
    ASSERT_OK(sl__first_repeat(keys, 40, &second, &first));
    ASSERT_EQ(second, 33);
    ASSERT_EQ(first, 20);
    ASSERT_OK(sl__first_repeat(keys + 20, 16, &second, &first)); /* the same, pairwise */
    ASSERT_EQ(second, 13);
    ASSERT_EQ(first, 0);
}

/* Every cut of the document is refused (an object's prefix is never a document), and every
 * byte changed to each of a few others is read or refused, never more: with the offset of a
 * byte inside the text. */
TEST(test_read_corruption) {
    size_t n = strlen(DOC);
    char *buf = malloc(n + 1);
    ASSERT(buf);
    for (size_t cut = 0; cut < n; cut++) {
        sl_json *j = (sl_json *)1;
        sl_status s = sl_json_parse(DOC, cut, "J", &j);
        if (s != SL_ECORRUPT || j != NULL) {
            FAILF("cut at %zu: status %d (%s)", cut, s, sl_errmsg());
            break;
        }
        unsigned long long at;
        if (sscanf(sl_errmsg(), "J: byte %llu:", &at) != 1 || at > cut) {
            FAILF("cut at %zu: %s", cut, sl_errmsg());
            break;
        }
    }
    static const char subs[] = {'"', '\\', '}', ']', ',', ':', '0', '-', 'e', ' ', 0, 1, (char)0xff, (char)0xc3};
    int ok = 0, refused = 0;
    for (size_t i = 0; i < n && !t_cur_failed; i++) {
        for (size_t k = 0; k < sizeof subs; k++) {
            memcpy(buf, DOC, n);
            buf[i] = subs[k];
            sl_json *j = (sl_json *)1;
            sl_status s = sl_json_parse(buf, n, "J", &j);
            unsigned long long at;
            if (s == SL_OK) {
                ok++;
                sl_json_free(j);
            } else if (s == SL_ECORRUPT && j == NULL && sscanf(sl_errmsg(), "J: byte %llu:", &at) == 1 && at <= n) {
                refused++;
            } else {
                FAILF("byte %zu set to 0x%02x: status %d (%s)", i, (unsigned char)subs[k], s, sl_errmsg());
                break;
            }
        }
    }
    ASSERT(ok > 0 && refused > ok);
    free(buf);
}

int main(void) {
    RUN(test_plain);
    RUN(test_ascii);
    RUN(test_round_trip);
    RUN(test_fput);
    RUN(test_buf);
    RUN(test_read_tree);
    RUN(test_read_messages);
    RUN(test_read_options);
    RUN(test_read_budget);
    RUN(test_read_round_trip);
    RUN(test_first_repeat);
    RUN(test_read_corruption);
    TEST_MAIN_END();
}
