/* A tiny test harness: each test file is one program; TEST functions run in order from
 * main via RUN(); a failed ASSERT prints file:line and the values and returns from the
 * test. Exit status: 0 all passed, 1 any failed, 77 all skipped (ctest's skip code). */
#ifndef SLUICE_TEST_H
#define SLUICE_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_failed, t_passed, t_skipped, t_cur_failed, t_cur_skipped;

#define TEST(name) static void name(void)

#define RUN(name)                                                         \
    do {                                                                  \
        t_cur_failed = 0; t_cur_skipped = 0;                              \
        name();                                                           \
        if (t_cur_failed) { t_failed++; printf("FAIL %s\n", #name); }     \
        else if (t_cur_skipped) { t_skipped++; printf("SKIP %s\n", #name); } \
        else { t_passed++; printf("ok   %s\n", #name); }                  \
        fflush(stdout);                                                   \
    } while (0)

#define TEST_MAIN_END()                                                   \
    do {                                                                  \
        printf("%d passed, %d failed, %d skipped\n", t_passed, t_failed, t_skipped); \
        return t_failed ? 1 : (t_passed == 0 && t_skipped ? 77 : 0);      \
    } while (0)

#define SKIP(...)                                                         \
    do { printf("  skipped: "); printf(__VA_ARGS__); printf("\n");        \
         t_cur_skipped = 1; return; } while (0)

#define FAILF(...)                                                        \
    do { printf("  %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__);    \
         printf("\n"); t_cur_failed = 1; } while (0)

#define ASSERT(cond)                                                      \
    do { if (!(cond)) { FAILF("ASSERT(%s)", #cond); return; } } while (0)

#define ASSERT_EQ(a, b)                                                   \
    do { long long _a = (long long)(a), _b = (long long)(b);              \
         if (_a != _b) { FAILF("%s == %s: %lld != %lld", #a, #b, _a, _b); return; } } while (0)

#define ASSERT_NE(a, b)                                                   \
    do { long long _a = (long long)(a), _b = (long long)(b);              \
         if (_a == _b) { FAILF("%s != %s: both %lld", #a, #b, _a); return; } } while (0)

#define ASSERT_U64(a, b)                                                  \
    do { unsigned long long _a = (unsigned long long)(a), _b = (unsigned long long)(b); \
         if (_a != _b) { FAILF("%s == %s: 0x%llx != 0x%llx", #a, #b, _a, _b); return; } } while (0)

#define ASSERT_STREQ(a, b)                                                \
    do { const char *_a = (a), *_b = (b);                                 \
         if (!_a || !_b || strcmp(_a, _b) != 0) {                         \
             FAILF("%s == %s:\n    got      \"%s\"\n    expected \"%s\"", #a, #b, \
                   _a ? _a : "(null)", _b ? _b : "(null)"); return; } } while (0)

#define ASSERT_CONTAINS(hay, needle)                                      \
    do { const char *_h = (hay), *_n = (needle);                          \
         if (!_h || !strstr(_h, _n)) {                                    \
             FAILF("\"%s\" does not contain \"%s\"", _h ? _h : "(null)", _n); return; } } while (0)

#define ASSERT_MEMEQ(a, b, n)                                             \
    do { if (memcmp((a), (b), (n)) != 0) { FAILF("memcmp(%s, %s, %zu) != 0", #a, #b, (size_t)(n)); return; } } while (0)

#define ASSERT_OK(expr)                                                   \
    do { int _s = (expr); if (_s != 0) {                                  \
         FAILF("%s returned %d (%s)", #expr, _s, sl_errmsg()); return; } } while (0)

#endif
