/* The CPU backend's AVX-512 GEMM (train/gemm_avx512.h) against a double-precision reference:
 * every transpose pair, edges of the 12 x 32 tile and of the k, row and column blocks, row
 * strides past the stored widths, alpha and beta (beta 0 over NaN), C outside the product
 * left alone, two threads at once, and the argument errors. Skipped on CPUs without AVX-512F. */
#include <math.h>
#include <stdio.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "train/gemm_avx512.h"

static uint32_t rng = 12345;
static float rnd(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

typedef struct prod {
    bool ta, tb;
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
    float *a, *b, *c0, *c;
} prod;

static void prod_init(prod *p, bool ta, bool tb, int m, int n, int k, float alpha, float beta) {
    *p = (prod){ta, tb, m, n, k, (ta ? m : k) + 3, (tb ? k : n) + 5, n + 7, alpha, beta, NULL, NULL, NULL, NULL};
    size_t as = (size_t)(ta ? k : m) * p->lda, bs = (size_t)(tb ? n : k) * p->ldb, cs = (size_t)m * p->ldc;
    p->a = malloc((as ? as : 1) * sizeof(float));
    p->b = malloc((bs ? bs : 1) * sizeof(float));
    p->c0 = malloc((cs ? cs : 1) * sizeof(float));
    p->c = malloc((cs ? cs : 1) * sizeof(float));
    for (size_t i = 0; i < as; i++) p->a[i] = rnd();
    for (size_t i = 0; i < bs; i++) p->b[i] = rnd();
    for (size_t i = 0; i < cs; i++) p->c0[i] = beta == 0.0f ? NAN : rnd();
    /* outside the product (the ldc padding): a sentinel nothing may write */
    for (int i = 0; i < m; i++)
        for (int j = n; j < p->ldc; j++) p->c0[(size_t)i * p->ldc + j] = 777.0f;
    memcpy(p->c, p->c0, (cs ? cs : 1) * sizeof(float));
}

static void prod_free(prod *p) {
    free(p->a), free(p->b), free(p->c0), free(p->c);
}

/* 0 when C matches alpha * op(A) op(B) + beta * C0 within float rounding of the sums, and the
 * padding is untouched; else 1 + the first bad flat index */
static long prod_check(const prod *p) {
    for (int i = 0; i < p->m; i++) {
        for (int j = 0; j < p->ldc; j++) {
            size_t at = (size_t)i * p->ldc + j;
            if (j >= p->n) {
                if (p->c[at] != 777.0f) return (long)at + 1;
                continue;
            }
            double s = 0, mag = 0;
            for (int kk = 0; kk < p->k; kk++) {
                double x = p->ta ? p->a[(size_t)kk * p->lda + i] : p->a[(size_t)i * p->lda + kk];
                double y = p->tb ? p->b[(size_t)j * p->ldb + kk] : p->b[(size_t)kk * p->ldb + j];
                s += x * y;
                mag += fabs(x * y);
            }
            /* the rounding bound of k float additions and two more operations (gamma_{k+3});
             * a product left out or counted twice is ~mag / k off, far past it */
            double want = p->alpha * s, tol = fabs(p->alpha) * mag;
            if (p->beta != 0.0f) {
                want += p->beta * (double)p->c0[at];
                tol += fabs(p->beta * p->c0[at]);
            }
            tol *= (p->k + 3) * 0x1p-24;
            if (!(fabs(p->c[at] - want) <= tol)) return (long)at + 1;
        }
    }
    return 0;
}

static sl_status prod_run(prod *p) {
    return sl__gemm512(p->ta, p->tb, p->m, p->n, p->k, p->alpha, p->a, p->lda, p->b, p->ldb, p->beta, p->c, p->ldc);
}

TEST(test_matches_reference) {
    /* m, n, k: one tile, one short of and one past each of its edges, the k block (256), the
     * row block (96), the wide path (n >= 256) and the column block (1024), the model's shapes */
    static const int shapes[][3] = {{1, 1, 1},     {12, 32, 256},  {11, 31, 255}, {13, 33, 257},  {24, 24, 1},
                                    {25, 64, 800}, {37, 45, 301},  {96, 256, 300}, {97, 257, 513}, {130, 1030, 40},
                                    {600, 64, 25}, {40, 300, 700}, {7, 1025, 3}};
    static const float ab[][2] = {{1.0f, 0.0f}, {-0.5f, 1.0f}, {2.0f, 0.25f}};
    int runs = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int t = 0; t < 4; t++) {
            int v = (int)((si + (size_t)t) % 3);
            prod p;
            prod_init(&p, t & 1, t & 2, shapes[si][0], shapes[si][1], shapes[si][2], ab[v][0], ab[v][1]);
            sl_status s = prod_run(&p);
            long bad = s ? -1 : prod_check(&p);
            if (s || bad)
                FAILF("%dx%dx%d ta %d tb %d alpha %g beta %g: status %d, first bad index %ld", p.m, p.n, p.k, p.ta,
                      p.tb, p.alpha, p.beta, s, bad - 1);
            prod_free(&p);
            if (s || bad) return;
            runs++;
        }
    ASSERT_EQ(runs, 52);
}

/* two threads at once, each with its own packing buffers: the same floats as one alone */
static void *thread_main(void *arg) {
    prod *p = arg;
    for (int r = 0; r < 20; r++)
        if (prod_run(p)) return p;
    return NULL;
}

TEST(test_two_threads) {
    prod p[2], q;
    for (int i = 0; i < 2; i++) prod_init(&p[i], i, !i, 150, 300, 260, 1.0f, 0.0f);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, thread_main, &p[i]);
    void *ret[2];
    for (int i = 0; i < 2; i++) pthread_join(t[i], &ret[i]);
    ASSERT(!ret[0] && !ret[1]);
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(prod_check(&p[i]), 0);
        rng = 12345;
        prod_init(&q, i, !i, 150, 300, 260, 1.0f, 0.0f);
        memcpy(q.a, p[i].a, (size_t)(i ? 260 : 150) * q.lda * sizeof(float));
        memcpy(q.b, p[i].b, (size_t)(!i ? 300 : 260) * q.ldb * sizeof(float));
        ASSERT_EQ(prod_run(&q), SL_OK);
        ASSERT_MEMEQ(q.c, p[i].c, (size_t)150 * q.ldc * sizeof(float));
        prod_free(&q);
        prod_free(&p[i]);
    }
}

TEST(test_degenerate_and_errors) {
    float a[64], b[64], c[64], keep[64];
    for (int i = 0; i < 64; i++) a[i] = b[i] = 1.0f, c[i] = keep[i] = (float)i;
    /* k = 0: C = beta * C; beta 0 writes zeros */
    ASSERT_EQ(sl__gemm512(false, false, 2, 3, 0, 1.0f, a, 1, b, 3, 0.5f, c, 4), SL_OK);
    ASSERT(c[0] == 0.0f && c[1] == 0.5f && c[2] == 1.0f && c[3] == 3.0f && c[4] == 2.0f);
    ASSERT_EQ(sl__gemm512(false, false, 2, 3, 0, 1.0f, a, 1, b, 3, 0.0f, c, 4), SL_OK);
    ASSERT(c[0] == 0.0f && c[2] == 0.0f && c[3] == 3.0f && c[6] == 0.0f && c[7] == 7.0f);
    memcpy(c, keep, sizeof c);
    ASSERT_EQ(sl__gemm512(false, false, 0, 3, 4, 1.0f, a, 4, b, 3, 0.0f, c, 4), SL_OK);
    ASSERT_EQ(sl__gemm512(false, false, 3, 0, 4, 1.0f, a, 4, b, 1, 0.0f, c, 1), SL_OK);
    ASSERT_MEMEQ(c, keep, sizeof c);
    /* errors leave C alone */
    ASSERT_EQ(sl__gemm512(false, false, -1, 3, 4, 1.0f, a, 4, b, 3, 0.0f, c, 3), SL_EINVAL);
    ASSERT_EQ(sl__gemm512(false, false, 2, 3, 4, 1.0f, a, 3, b, 3, 0.0f, c, 3), SL_EINVAL); /* lda < k */
    ASSERT_EQ(sl__gemm512(true, false, 5, 3, 4, 1.0f, a, 4, b, 3, 0.0f, c, 3), SL_EINVAL);  /* ta: lda < m */
    ASSERT_EQ(sl__gemm512(false, true, 2, 3, 4, 1.0f, a, 4, b, 3, 0.0f, c, 3), SL_EINVAL);  /* tb: ldb < k */
    ASSERT_EQ(sl__gemm512(false, false, 2, 3, 4, 1.0f, a, 4, b, 3, 0.0f, c, 2), SL_EINVAL); /* ldc < n */
    ASSERT_MEMEQ(c, keep, sizeof c);
}

int main(void) {
    if (!sl__gemm512_available()) {
        printf("skipped: this CPU has no AVX-512F\n");
        return 77;
    }
    RUN(test_matches_reference);
    RUN(test_two_threads);
    RUN(test_degenerate_and_errors);
    TEST_MAIN_END();
}
