/* core/json.c's writer: sl_json_put_str in both flavours (plain: only '"', '\\' and control
 * bytes escaped, UTF-8 passed through; SL_JSON_ASCII: json.dumps' ensure_ascii, with
 * invalid UTF-8 read as U+FFFD and astral characters as surrogate pairs), embedded NULs
 * given by length, and sl_json_fput_str; what it writes reads back through sl_json_parse.
 * (The reader's own tests are in test_cluster.c, where TF_CONFIG uses it.) */
#include <stdlib.h>

#include "sluice/json.h"
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

int main(void) {
    RUN(test_plain);
    RUN(test_ascii);
    RUN(test_round_trip);
    RUN(test_fput);
    TEST_MAIN_END();
}
