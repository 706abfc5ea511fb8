/* The CPU backend (train/backend_cpu.c): every op against a naive double-precision
 * reference written here, on random inputs with odd sizes, with 1 and 2 threads (the
 * threaded paths must give the same numbers as the serial ones). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

#include "sluice/pool.h"
#include "test.h"
#include "train/backend.h"
#include "train/backend_cpu_priv.h"
#include "train/blas_priv.h"
#include "train/gemm_avx512.h"
#include "train/internal.h"

static uint64_t rng_state = 12345;

static float frand(void) { /* [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static float *rand_buf(size_t n) {
    float *p = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

static float *copy_buf(const float *x, size_t n) {
    float *p = malloc(n * sizeof(float) + 1);
    memcpy(p, x, n * sizeof(float));
    return p;
}

static double max_abs_diff_d(const float *a, const double *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

#define ASSERT_CLOSE(a, b, tol)                                                                    \
    do {                                                                                           \
        double _a = (a), _b = (b);                                                                 \
        if (!(fabs(_a - _b) <= (tol))) { FAILF("%s ~ %s: %.9g vs %.9g", #a, #b, _a, _b); return; } \
    } while (0)

static sl_backend *backend(int threads) {
    sl_backend *b = NULL;
    if (sl__backend_cpu_new(threads, &b) != SL_OK) return NULL;
    return b;
}

TEST(test_alloc_copy) {
    sl_backend *b = backend(1);
    ASSERT(b);
    ASSERT_STREQ(b->ops->name, "cpu");
    float *p = NULL;
    ASSERT_OK(b->ops->alloc(b, 1000 * sizeof(float), (void **)&p));
    for (int i = 0; i < 1000; i++) ASSERT_EQ(p[i], 0.0f);
    float h[3] = {1, 2, 3}, back[3];
    ASSERT_OK(b->ops->to_device(b, p, h, sizeof h));
    ASSERT_OK(b->ops->copy(b, p + 10, p, sizeof h));
    ASSERT_OK(b->ops->to_host(b, back, p + 10, sizeof back));
    ASSERT_MEMEQ(back, h, sizeof h);
    ASSERT_OK(b->ops->sync(b));
    for (int k = 0; k < SL_BK_STAGE_SLOTS; k++) {
        ASSERT_OK(b->ops->stage_begin(b, k));
        ASSERT_OK(b->ops->stage_end(b, k));
        ASSERT_OK(b->ops->stage_wait(b, k));
        ASSERT_OK(b->ops->stage_release(b, k));
    }
    ASSERT_EQ(b->ops->launches(b), 0u);
    b->ops->free(b, p);
    b->ops->free(b, NULL);
    sl__backend_free(b);
    sl_backend *bad = (sl_backend *)1;
    ASSERT_EQ(sl__backend_cpu_new(-1, &bad), SL_EINVAL);
    ASSERT(bad == NULL);
}

static void gemm_ref(bool ta, bool tb, int m, int n, int k, double alpha, const float *a, int lda, const float *bm,
                     int ldb, double beta, const float *c, int ldc, double *out) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                double av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                double bv = tb ? bm[(size_t)j * ldb + p] : bm[(size_t)p * ldb + j];
                s += av * bv;
            }
            out[(size_t)i * ldc + j] = alpha * s + beta * c[(size_t)i * ldc + j];
        }
}

TEST(test_gemm_all_transposes_and_strides) {
    sl_backend *b = backend(2);
    ASSERT(b);
    /* small (one call), tall (split by rows across threads), wide (split by columns) */
    const int sizes[3][3] = {{7, 5, 9}, {301, 70, 65}, {37, 333, 97}};
    for (int t = 0; t < 12; t++) {
        const int m = sizes[t / 4][0], n = sizes[t / 4][1], k = sizes[t / 4][2];
        bool ta = t & 1, tb = t & 2;
        int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 4;
        float *a = rand_buf((size_t)(ta ? k : m) * lda), *bm = rand_buf((size_t)(tb ? n : k) * ldb);
        float *c = rand_buf((size_t)m * ldc), *c0 = copy_buf(c, (size_t)m * ldc);
        double *ref = malloc((size_t)m * ldc * sizeof(double));
        for (int i = 0; i < m * ldc; i++) ref[i] = c0[i]; /* the padding columns stay as they were */
        gemm_ref(ta, tb, m, n, k, 0.7, a, lda, bm, ldb, 0.3, c0, ldc, ref);
        ASSERT_OK(b->ops->gemm(b, ta, tb, m, n, k, 0.7f, a, lda, bm, ldb, 0.3f, c, ldc));
        double err = max_abs_diff_d(c, ref, (size_t)m * ldc);
        if (err > 1e-5 * k) FAILF("gemm %dx%dx%d ta=%d tb=%d: max error %g", m, n, k, ta, tb, err);
        for (int i = 0; i < m; i++)
            for (int j = n; j < ldc; j++) ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]);
        free(a), free(bm), free(c), free(c0), free(ref);
    }
    /* beta 0 ignores what C held (even NaN); k 0 scales C by beta */
    float a[2] = {1, 2}, bb[2] = {3, 4}, c[1] = {NAN};
    ASSERT_OK(b->ops->gemm(b, false, false, 1, 1, 2, 1.0f, a, 2, bb, 1, 0.0f, c, 1));
    ASSERT_EQ(c[0], 11.0f);
    ASSERT_OK(b->ops->gemm(b, false, false, 1, 1, 0, 1.0f, a, 2, bb, 1, 0.5f, c, 1));
    ASSERT_EQ(c[0], 5.5f);
    ASSERT_EQ(b->ops->gemm(b, false, false, -1, 1, 1, 1.0f, a, 1, bb, 1, 0.0f, c, 1), SL_EINVAL);
    sl__backend_free(b);
}

/* x rounded to bf16 / fp16 and back with core's conversions (sluice/util.h). */
static float round16(float x, sl_bk_precision p) {
    return p == SL_BK_BF16 ? sl_f32_from_bf16(sl_bf16_from_f32(x)) : sl_f32_from_f16(sl_f16_from_f32(x));
}

/* Mixed precision, emulated: the GEMM equals the double-precision reference on inputs
 * rounded with core's conversions (to float32 accumulation), for every transpose, with
 * padded strides and the threaded rounding; the float32 GEMM of the same inputs is
 * farther from that reference than the tolerance (the mode is on); exact cases. */
/* Which GEMM multiplies (sl_model_opts.cpu_gemm): blas gives cblas_sgemm's very floats,
 * avx512 sl__gemm512's (on a CPU without AVX-512F, cblas_sgemm's), auto one of the two as
 * the process measured it for the shape, the same for every later product of the shape and
 * every backend; a product below 24 x 24 is OpenBLAS's and no choice is made for it. */
TEST(test_gemm_choice) {
    const char *names[3] = {"avx512", "auto", "blas"};
    const sl_cpu_gemm values[3] = {SL_CPU_GEMM_AVX512, SL_CPU_GEMM_AUTO, SL_CPU_GEMM_BLAS};
    sl_cpu_gemm g = SL_CPU_GEMM_BLAS;
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(sl_cpu_gemm_parse(names[i], &g));
        ASSERT_EQ(g, values[i]);
    }
    ASSERT_EQ(sl_cpu_gemm_parse("AVX512", &g), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "CPU GEMM 'AVX512' is none of auto, blas, avx512");
    ASSERT_EQ(g, SL_CPU_GEMM_BLAS);
    sl_backend *bad = (sl_backend *)1;
    ASSERT_EQ(sl__backend_cpu_new_gemm(1, 3, &bad), SL_EINVAL);
    ASSERT(bad == NULL);

    const int m = 61, n = 47, k = 300; /* one thread: the product is one call of either */
    float *a = rand_buf((size_t)m * k), *bm = rand_buf((size_t)k * n), *ref[2], *c[4];
    ref[0] = malloc((size_t)m * n * sizeof(float));
    ref[1] = malloc((size_t)m * n * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, bm, k, 0.0f, ref[0], n);
    if (!sl__gemm512_available() || sl__gemm512(false, true, m, n, k, 1.0f, a, k, bm, k, 0.0f, ref[1], n))
        memcpy(ref[1], ref[0], (size_t)m * n * sizeof(float));
    ASSERT_EQ(sl__cpu_gemm_choice(false, true, m, n, k), -1);
    const sl_cpu_gemm kinds[4] = {SL_CPU_GEMM_BLAS, SL_CPU_GEMM_AVX512, SL_CPU_GEMM_AUTO, SL_CPU_GEMM_AUTO};
    for (int i = 0; i < 4; i++) {
        sl_backend *b = NULL;
        ASSERT_OK(sl__backend_cpu_new_gemm(1, kinds[i], &b));
        c[i] = malloc((size_t)m * n * sizeof(float));
        ASSERT_OK(b->ops->gemm(b, false, true, m, n, k, 1.0f, a, k, bm, k, 0.0f, c[i], n));
        sl__backend_free(b);
    }
    int own = sl__cpu_gemm_choice(false, true, m, n, k);
    if (sl__gemm512_available()) ASSERT(own == 0 || own == 1);
    else ASSERT_EQ(own, -1);
    ASSERT_MEMEQ(c[0], ref[0], (size_t)m * n * sizeof(float));
    ASSERT_MEMEQ(c[1], ref[1], (size_t)m * n * sizeof(float));
    ASSERT_MEMEQ(c[2], ref[own == 1], (size_t)m * n * sizeof(float));
    ASSERT_MEMEQ(c[3], c[2], (size_t)m * n * sizeof(float));
    sl_backend *b = NULL;
    ASSERT_OK(sl__backend_cpu_new_gemm(1, SL_CPU_GEMM_AUTO, &b));
    ASSERT_OK(b->ops->gemm(b, false, true, m, 20, k, 1.0f, a, k, bm, k, 0.0f, c[3], 20)); /* below 24 columns */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, 20, k, 1.0f, a, k, bm, k, 0.0f, c[2], 20);
    ASSERT_MEMEQ(c[3], c[2], (size_t)m * 20 * sizeof(float));
    ASSERT_EQ(sl__cpu_gemm_choice(false, true, m, 20, k), -1);
    sl__backend_free(b);
    for (int i = 0; i < 4; i++) free(c[i]);
    free(a), free(bm), free(ref[0]), free(ref[1]);
}

/* The choices as checkpoints keep them: the text lists the decided shapes; a text adopted
 * gives a shape not chosen yet its GEMM (a resumed run multiplies as the interrupted one
 * did), leaves a shape already chosen alone, and a damaged text is refused whole. */
TEST(test_gemm_choices_text) {
    const int m = 53, n = 41, k = 200;
    ASSERT_EQ(sl__cpu_gemm_choice(true, false, m, n, k), -1);
    int adopted = -1;
    ASSERT_OK(sl__cpu_gemm_choices_adopt("1,0,53,41,200,b;0,1,33,34,35,s", true, &adopted));
    ASSERT_EQ(adopted, 2);
    ASSERT_EQ(sl__cpu_gemm_choice(true, false, m, n, k), 0);
    ASSERT_EQ(sl__cpu_gemm_choice(false, true, 33, 34, 35), 1);
    /* the auto GEMM now multiplies that shape with OpenBLAS, without measuring */
    float *a = rand_buf((size_t)k * m), *bm = rand_buf((size_t)k * n), *c = malloc((size_t)m * n * sizeof(float)),
          *want = malloc((size_t)m * n * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, n, k, 1.0f, a, m, bm, n, 0.0f, want, n);
    sl_backend *b = NULL;
    ASSERT_OK(sl__backend_cpu_new_gemm(1, SL_CPU_GEMM_AUTO, &b));
    ASSERT_OK(b->ops->gemm(b, true, false, m, n, k, 1.0f, a, m, bm, n, 0.0f, c, n));
    sl__backend_free(b);
    ASSERT_MEMEQ(c, want, (size_t)m * n * sizeof(float));
    free(a), free(bm), free(c), free(want);
    /* a chosen shape keeps its choice */
    ASSERT_OK(sl__cpu_gemm_choices_adopt("1,0,53,41,200,s", true, &adopted));
    ASSERT_EQ(adopted, 0);
    ASSERT_EQ(sl__cpu_gemm_choice(true, false, m, n, k), 0);
    /* the text holds both, in the order met, and its length is asked with a NULL buffer */
    size_t len = sl__cpu_gemm_choices_text(NULL, 0);
    char *text = malloc(len + 1);
    ASSERT_EQ(sl__cpu_gemm_choices_text(text, len + 1), len);
    ASSERT_EQ(strlen(text), len);
    ASSERT_CONTAINS(text, "1,0,53,41,200,b;0,1,33,34,35,s");
    ASSERT_OK(sl__cpu_gemm_choices_adopt(text, false, NULL)); /* its own text parses */
    free(text);
    /* damaged texts: refused whole, nothing adopted */
    const char *bad[] = {"1,0,53,41", "2,0,1,1,1,s", "0,0,0,1,1,s", "0,0,1,1,1,x", "0,0,1,1,1,s;", "0,0,1,1,1,ss",
                         "0,0,1,1,2147483648,s", "0,0,-1,1,1,s", "0,0,1,1,1,s;;0,0,1,1,2,s", " 0,0,1,1,1,s",
                         "0,0,60,61,62,s;0,0,1,1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        adopted = -1;
        ASSERT_EQ(sl__cpu_gemm_choices_adopt(bad[i], true, &adopted), SL_ECORRUPT);
        ASSERT_EQ(adopted, 0);
        ASSERT_CONTAINS(sl_errmsg(), "CPU GEMM choices: entry ");
    }
    ASSERT_EQ(sl__cpu_gemm_choice(false, false, 60, 61, 62), -1); /* the last one's sound first entry too */
    ASSERT_OK(sl__cpu_gemm_choices_adopt("", true, &adopted));
    ASSERT_EQ(adopted, 0);
}

TEST(test_gemm_mixed_precision) {
    sl_backend *b = backend(2);
    ASSERT(b);
    const int sizes[2][3] = {{7, 5, 9}, {301, 70, 265}};
    for (int t = 0; t < 16; t++) {
        sl_bk_precision p = t & 8 ? SL_BK_FP16 : SL_BK_BF16;
        const int m = sizes[(t >> 2) & 1][0], n = sizes[(t >> 2) & 1][1], k = sizes[(t >> 2) & 1][2];
        bool ta = t & 1, tb = t & 2;
        int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 4;
        size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb, nc = (size_t)m * ldc;
        float *a = rand_buf(na), *bm = rand_buf(nb), *c = rand_buf(nc), *c0 = copy_buf(c, nc);
        float *c32 = copy_buf(c, nc), *ar = copy_buf(a, na), *br = copy_buf(bm, nb), *a0 = copy_buf(a, na);
        for (size_t i = 0; i < na; i++) ar[i] = round16(a[i], p);
        for (size_t i = 0; i < nb; i++) br[i] = round16(bm[i], p);
        double *ref = malloc(nc * sizeof(double));
        for (size_t i = 0; i < nc; i++) ref[i] = c0[i];
        gemm_ref(ta, tb, m, n, k, 0.7, ar, lda, br, ldb, 0.3, c0, ldc, ref);
        ASSERT_OK(b->ops->set_precision(b, p));
        ASSERT_OK(b->ops->gemm(b, ta, tb, m, n, k, 0.7f, a, lda, bm, ldb, 0.3f, c, ldc));
        ASSERT_OK(b->ops->set_precision(b, SL_BK_FP32));
        ASSERT_OK(b->ops->gemm(b, ta, tb, m, n, k, 0.7f, a, lda, bm, ldb, 0.3f, c32, ldc));
        double err = max_abs_diff_d(c, ref, nc), err32 = max_abs_diff_d(c32, ref, nc);
        if (err > 1e-5 * k) FAILF("%s gemm %dx%dx%d ta=%d tb=%d: max error %g", p == SL_BK_BF16 ? "bf16" : "fp16",
                                  m, n, k, ta, tb, err);
        if (!(err32 > 1e-5 * k)) FAILF("fp32 gemm %dx%dx%d: only %g from the rounded reference", m, n, k, err32);
        ASSERT_MEMEQ(a, a0, na * sizeof(float)); /* the inputs themselves are left as they were */
        for (int i = 0; i < m; i++)
            for (int j = n; j < ldc; j++) ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]);
        free(a), free(bm), free(c), free(c0), free(c32), free(ar), free(br), free(a0), free(ref);
    }
    /* exact: 1 + 2^-8 is a tie that bf16 rounds to 1 (even) and fp16 keeps; 70000 is
     * bf16 70144 and beyond fp16's range (infinity) */
    float one_eps[1] = {1.0f + 0x1p-8f}, one[1] = {1.0f}, big[1] = {70000.0f}, c[1];
    ASSERT_OK(b->ops->set_precision(b, SL_BK_BF16));
    ASSERT_OK(b->ops->gemm(b, false, false, 1, 1, 1, 1.0f, one_eps, 1, one, 1, 0.0f, c, 1));
    ASSERT(c[0] == 1.0f);
    ASSERT_OK(b->ops->gemm(b, false, false, 1, 1, 1, 1.0f, big, 1, one, 1, 0.0f, c, 1));
    ASSERT(c[0] == 70144.0f);
    ASSERT_OK(b->ops->set_precision(b, SL_BK_FP16));
    ASSERT_OK(b->ops->gemm(b, false, false, 1, 1, 1, 1.0f, one_eps, 1, one, 1, 0.0f, c, 1));
    ASSERT(c[0] == 1.0f + 0x1p-8f);
    ASSERT_OK(b->ops->gemm(b, false, false, 1, 1, 1, 1.0f, big, 1, one, 1, 0.0f, c, 1));
    ASSERT(isinf(c[0]) && c[0] > 0);
    ASSERT_EQ(b->ops->set_precision(b, (sl_bk_precision)7), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "set_precision: unknown precision 7");
    ASSERT_OK(b->ops->gemm(b, false, false, 1, 1, 1, 1.0f, big, 1, one, 1, 0.0f, c, 1)); /* still fp16 */
    ASSERT(isinf(c[0]));
    sl__backend_free(b);
}

TEST(test_vector_ops) {
    sl_backend *b = backend(2);
    ASSERT(b);
    const size_t n = 200003; /* big enough for the threaded path, odd */
    float *x = rand_buf(n), *y = rand_buf(n), *y0 = copy_buf(y, n);
    ASSERT_OK(b->ops->axpy(b, n, 0.25f, x, y));
    for (size_t i = 0; i < n; i++) ASSERT(y[i] == y0[i] + 0.25f * x[i]);
    ASSERT_OK(b->ops->scale(b, n, -2.0f, y));
    for (size_t i = 0; i < n; i++) ASSERT(y[i] == -2.0f * (y0[i] + 0.25f * x[i]));
    ASSERT_OK(b->ops->fill(b, y, 1.5f, n));
    for (size_t i = 0; i < n; i++) ASSERT(y[i] == 1.5f);
    ASSERT_OK(b->ops->fill(b, y, 0.0f, n - 1));
    ASSERT(y[n - 2] == 0.0f && y[n - 1] == 1.5f);
    double ss = 0, ref = 0;
    ASSERT_OK(b->ops->sum_squares(b, x, n, &ss));
    for (size_t i = 0; i < n; i++) ref += (double)x[i] * x[i];
    ASSERT_CLOSE(ss, ref, 1e-9 * ref);
    free(x), free(y), free(y0);
    sl__backend_free(b);
}

/* The backend's worker team: many parallel ops in a row (each op's parts claimed by the
 * calling thread and the workers), with more workers than cores, give exactly the serial
 * results; two threads driving one backend at once (the second runs its ops alone) too. */
typedef struct {
    sl_backend *b;
    float *x, *y;
    size_t n;
    int rounds;
    sl_status st;
} team_drive;

static void *team_drive_fn(void *arg) {
    team_drive *d = arg;
    for (int r = 0; r < d->rounds && !d->st; r++) {
        d->st = d->b->ops->axpy(d->b, d->n, 0.5f, d->x, d->y);
        if (!d->st) d->st = d->b->ops->scale(d->b, d->n, 0.75f, d->y);
    }
    return NULL;
}

/* y after `rounds` of y = 0.75 * (y + 0.5 x), computed serially */
static void team_expect(const float *x, float *y, size_t n, int rounds) {
    for (int r = 0; r < rounds; r++)
        for (size_t i = 0; i < n; i++) y[i] = 0.75f * (y[i] + 0.5f * x[i]);
}

/* Counts the items run inside a team's run (seen[1]) and outside one (seen[0]). */
static void note_inside(void *ctx, size_t lo, size_t hi) {
    atomic_int *seen = ctx;
    for (size_t i = lo; i < hi; i++) atomic_fetch_add(&seen[sl__team_inside()], 1);
}

TEST(test_team) {
    const size_t n = 100003;
    const int rounds = 300;
    int counts[4] = {1, 2, 3, 7};
    for (int k = 0; k < 4; k++) {
        sl_backend *b = backend(counts[k]);
        ASSERT(b);
        float *x = rand_buf(n), *y = rand_buf(n), *want = copy_buf(y, n);
        team_drive d = {b, x, y, n, rounds, SL_OK};
        team_drive_fn(&d);
        ASSERT_OK(d.st);
        team_expect(x, want, n, rounds);
        for (size_t i = 0; i < n; i++)
            if (y[i] != want[i]) FAILF("threads %d: y[%zu] = %.9g, want %.9g", counts[k], i, y[i], want[i]);
        free(x), free(y), free(want);
        sl__backend_free(b);
    }
    sl_backend *b = backend(2);
    ASSERT(b);
    team_drive d[2];
    float *want[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        d[i] = (team_drive){b, rand_buf(n), rand_buf(n), n, rounds, SL_OK};
        want[i] = copy_buf(d[i].y, n);
        team_expect(d[i].x, want[i], n, rounds);
    }
    for (int i = 0; i < 2; i++) ASSERT(pthread_create(&th[i], NULL, team_drive_fn, &d[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        ASSERT_OK(d[i].st);
        ASSERT(memcmp(d[i].y, want[i], n * sizeof(float)) == 0);
        free(d[i].x), free(d[i].y), free(want[i]);
    }
    sl__backend_free(b);
    /* the parts of a run know they are inside one (a GEMM measured there runs alone) */
    sl__team *t = NULL;
    ASSERT_OK(sl__team_new(1, &t));
    atomic_int seen[2] = {0, 0};
    ASSERT(!sl__team_inside());
    ASSERT(sl__team_run(t, 4, 40, note_inside, seen));
    ASSERT_EQ(atomic_load(&seen[1]), 40);
    ASSERT_EQ(atomic_load(&seen[0]), 0);
    ASSERT(!sl__team_inside());
    sl__team_free(t);
}

TEST(test_bias_add_grad) {
    for (int threads = 1; threads <= 2; threads++) {
        sl_backend *b = backend(threads);
        ASSERT(b);
        size_t sizes[3][2] = {{5, 3}, {1001, 37}, {64, 1}};
        for (int t = 0; t < 3; t++) {
            size_t rows = sizes[t][0], cols = sizes[t][1];
            float *y = rand_buf(rows * cols), *y0 = copy_buf(y, rows * cols), *bias = rand_buf(cols);
            ASSERT_OK(b->ops->bias_add(b, y, bias, rows, cols));
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < cols; c++) ASSERT(y[r * cols + c] == y0[r * cols + c] + bias[c]);
            float *db = rand_buf(cols), *db0 = copy_buf(db, cols);
            ASSERT_OK(b->ops->bias_grad(b, db, y0, rows, cols));
            for (size_t c = 0; c < cols; c++) {
                double s = db0[c];
                for (size_t r = 0; r < rows; r++) s += y0[r * cols + c];
                ASSERT_CLOSE(db[c], s, 1e-4);
            }
            free(y), free(y0), free(bias), free(db), free(db0);
        }
        sl__backend_free(b);
    }
}

TEST(test_activations) {
    sl_backend *b = backend(2);
    ASSERT(b);
    const size_t n = 100001;
    float *x = rand_buf(n), *y = malloc(n * sizeof(float)), *dy = rand_buf(n), *dx = rand_buf(n);
    float *dx0 = copy_buf(dx, n);
    for (int a = SL_ACT_NONE; a <= SL_ACT_SIGMOID; a++) {
        for (size_t i = 0; i < n; i++) x[i] *= 3.0f;
        ASSERT_OK(b->ops->act_forward(b, (sl_act)a, x, y, n));
        memcpy(dx, dx0, n * sizeof(float));
        ASSERT_OK(b->ops->act_backward(b, (sl_act)a, y, dy, dx, n));
        for (size_t i = 0; i < n; i += 7) {
            double xv = x[i], r, d;
            switch (a) {
            case SL_ACT_NONE: r = xv, d = 1; break;
            case SL_ACT_RELU: r = xv > 0 ? xv : 0, d = xv > 0; break;
            case SL_ACT_TANH: r = tanh(xv), d = 1 - r * r; break;
            default: r = 1 / (1 + exp(-xv)), d = r * (1 - r); break;
            }
            ASSERT_CLOSE(y[i], r, 2e-6);
            ASSERT_CLOSE(dx[i], dx0[i] + dy[i] * d, 2e-6);
        }
        for (size_t i = 0; i < n; i++) x[i] /= 3.0f;
    }
    /* in place (y == x) */
    memcpy(y, x, n * sizeof(float));
    ASSERT_OK(b->ops->act_forward(b, SL_ACT_RELU, y, y, n));
    for (size_t i = 0; i < n; i++) ASSERT(y[i] == (x[i] > 0 ? x[i] : 0.0f));
    ASSERT_EQ(b->ops->act_forward(b, (sl_act)9, x, y, n), SL_EINVAL);
    free(x), free(y), free(dy), free(dx), free(dx0);
    sl__backend_free(b);
}

typedef struct geo {
    int n, h, w, c, kh, kw, s, pt, pl, oh, ow;
} geo;

/* The im2col correspondence, walked once for both directions: gather (col[r, k] = x at the
 * window's pixel, 0 outside the image) or scatter (dx at that pixel += col[r, k]). */
static void im2col_walk(const geo *g, bool gather, const float *src, double *dst) {
    size_t K = (size_t)g->kh * g->kw * g->c, r = 0;
    for (int i = 0; i < g->n; i++)
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++, r++)
                for (int ky = 0; ky < g->kh; ky++)
                    for (int kx = 0; kx < g->kw; kx++)
                        for (int ch = 0; ch < g->c; ch++) {
                            int iy = oy * g->s - g->pt + ky, ix = ox * g->s - g->pl + kx;
                            bool in = iy >= 0 && iy < g->h && ix >= 0 && ix < g->w;
                            size_t ci = r * K + ((size_t)ky * g->kw + kx) * g->c + ch;
                            size_t xi = in ? (((size_t)i * g->h + iy) * g->w + ix) * g->c + ch : 0;
                            if (gather) dst[ci] = in ? src[xi] : 0.0;
                            else if (in) dst[xi] += src[ci];
                        }
}

static void im2col_ref(const geo *g, const float *x, double *col) { im2col_walk(g, true, x, col); }
static void col2im_ref(const geo *g, const float *col, double *dx) { im2col_walk(g, false, col, dx); }

static const geo GEOS[] = {
    {2, 7, 6, 3, 3, 2, 1, 1, 0, 7, 5},   /* stride 1, padded top */
    {3, 9, 8, 2, 3, 3, 2, 1, 1, 5, 4},   /* stride 2, SAME-style padding */
    {1, 5, 5, 1, 5, 5, 1, 2, 2, 5, 5},   /* one channel, big kernel (conv1 of the CNN) */
    {2, 6, 7, 4, 2, 3, 2, 0, 0, 3, 3},   /* valid, stride 2 */
    {4, 16, 16, 8, 3, 3, 1, 1, 1, 16, 16}, /* big enough to run threaded */
    {1, 3, 3, 2, 3, 3, 2, 4, 4, 3, 3},   /* windows entirely in the padding */
};

TEST(test_im2col_col2im) {
    for (int threads = 1; threads <= 2; threads++) {
        sl_backend *b = backend(threads);
        ASSERT(b);
        for (size_t gi = 0; gi < sizeof GEOS / sizeof GEOS[0]; gi++) {
            const geo *g = &GEOS[gi];
            size_t nx = (size_t)g->n * g->h * g->w * g->c, ncol = (size_t)g->n * g->oh * g->ow * g->kh * g->kw * g->c;
            float *x = rand_buf(nx), *col = rand_buf(ncol);
            double *ref = calloc(ncol > nx ? ncol : nx, sizeof(double));
            im2col_ref(g, x, ref);
            ASSERT_OK(b->ops->im2col(b, x, g->n, g->h, g->w, g->c, g->kh, g->kw, g->s, g->pt, g->pl, g->oh, g->ow, col));
            for (size_t i = 0; i < ncol; i++)
                if ((double)col[i] != ref[i]) { FAILF("geo %zu im2col[%zu] = %g, expected %g", gi, i, col[i], ref[i]); return; }
            float *dcol = rand_buf(ncol), *dx = rand_buf(nx);
            for (size_t i = 0; i < nx; i++) ref[i] = dx[i];
            col2im_ref(g, dcol, ref);
            ASSERT_OK(b->ops->col2im(b, dcol, g->n, g->h, g->w, g->c, g->kh, g->kw, g->s, g->pt, g->pl, g->oh, g->ow, dx));
            double err = max_abs_diff_d(dx, ref, nx);
            if (err > 1e-5) FAILF("geo %zu col2im error %g", gi, err);
            free(x), free(col), free(ref), free(dcol), free(dx);
        }
        float x = 0, col = 0;
        ASSERT_EQ(b->ops->im2col(b, &x, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, &col), SL_EINVAL);
        sl__backend_free(b);
    }
}

static void pool_ref(const geo *g, bool is_max, const float *x, double *y, int32_t *am) {
    size_t o = 0;
    for (int i = 0; i < g->n; i++)
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++)
                for (int ch = 0; ch < g->c; ch++, o++) {
                    double best = -INFINITY, sum = 0;
                    int cnt = 0, arg = -1;
                    for (int ky = 0; ky < g->kh; ky++)
                        for (int kx = 0; kx < g->kw; kx++) {
                            int iy = oy * g->s - g->pt + ky, ix = ox * g->s - g->pl + kx;
                            if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) continue;
                            int idx = ((i * g->h + iy) * g->w + ix) * g->c + ch;
                            if (x[idx] > best) best = x[idx], arg = idx;
                            sum += x[idx];
                            cnt++;
                        }
                    y[o] = is_max ? (cnt ? best : 0) : (cnt ? sum / cnt : 0);
                    if (am) am[o] = arg;
                }
}

static const geo PGEOS[] = {
    {2, 6, 6, 3, 2, 2, 2, 0, 0, 3, 3},   /* the CNN's 2x2 pools */
    {3, 7, 5, 2, 3, 3, 2, 1, 1, 4, 3},   /* overlapping windows, SAME padding */
    {2, 5, 7, 4, 3, 3, 1, 0, 0, 3, 5},   /* valid, stride 1 */
    {8, 28, 28, 32, 2, 2, 2, 0, 0, 14, 14}, /* threaded */
    {2, 6, 6, 70, 2, 2, 2, 0, 0, 3, 3},  /* channels past one 64-wide group */
    {2, 5, 5, 16, 3, 3, 2, 1, 1, 3, 3},  /* 16 channels (AVX-512's vectors), overlapping, padded */
    {1, 3, 3, 16, 3, 3, 2, 4, 4, 3, 3},  /* windows entirely in the padding */
};

TEST(test_pools) {
    for (int threads = 1; threads <= 2; threads++) {
        sl_backend *b = backend(threads);
        ASSERT(b);
        for (size_t gi = 0; gi < sizeof PGEOS / sizeof PGEOS[0]; gi++) {
            const geo *g = &PGEOS[gi];
            size_t nx = (size_t)g->n * g->h * g->w * g->c, ny = (size_t)g->n * g->oh * g->ow * g->c;
            float *x = rand_buf(nx), *y = rand_buf(ny), *dy = rand_buf(ny), *dx = rand_buf(nx);
            double *ref = calloc(nx, sizeof(double)), *dref = calloc(nx, sizeof(double));
            int32_t *am = malloc(ny * sizeof(int32_t)), *amref = malloc(ny * sizeof(int32_t));
            if (g->c % 16 == 0) /* ReLU outputs: ties (the first cell wins) */
                for (size_t i = 0; i < nx; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
            /* max */
            pool_ref(g, true, x, ref, amref);
            ASSERT_OK(b->ops->maxpool_forward(b, x, g->n, g->h, g->w, g->c, g->kh, g->s, g->pt, g->pl, g->oh, g->ow, y, am));
            for (size_t i = 0; i < ny; i++) {
                ASSERT((double)y[i] == ref[i]);
                ASSERT_EQ(am[i], amref[i]);
            }
            for (size_t i = 0; i < nx; i++) dref[i] = dx[i];
            for (size_t i = 0; i < ny; i++) if (amref[i] >= 0) dref[amref[i]] += dy[i];
            ASSERT_OK(b->ops->maxpool_backward(b, dy, am, g->n, g->h, g->w, g->c, g->kh, g->s, g->pt, g->pl, g->oh,
                                               g->ow, dx));
            ASSERT(max_abs_diff_d(dx, dref, nx) < 1e-5);
            /* average */
            pool_ref(g, false, x, ref, NULL);
            ASSERT_OK(b->ops->avgpool_forward(b, x, g->n, g->h, g->w, g->c, g->kh, g->s, g->pt, g->pl, g->oh, g->ow, y));
            ASSERT(max_abs_diff_d(y, ref, ny) < 1e-6);
            for (size_t i = 0; i < nx; i++) dref[i] = dx[i];
            size_t o = 0;
            for (int i = 0; i < g->n; i++)
                for (int oy = 0; oy < g->oh; oy++)
                    for (int ox = 0; ox < g->ow; ox++)
                        for (int ch = 0; ch < g->c; ch++, o++) {
                            int cnt = 0;
                            for (int pass = 0; pass < 2; pass++)
                                for (int ky = 0; ky < g->kh; ky++)
                                    for (int kx = 0; kx < g->kw; kx++) {
                                        int iy = oy * g->s - g->pt + ky, ix = ox * g->s - g->pl + kx;
                                        if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) continue;
                                        if (pass == 0) cnt++;
                                        else dref[((i * g->h + iy) * g->w + ix) * g->c + ch] += (double)dy[o] / cnt;
                                    }
                        }
            ASSERT_OK(b->ops->avgpool_backward(b, dy, g->n, g->h, g->w, g->c, g->kh, g->s, g->pt, g->pl, g->oh, g->ow, dx));
            ASSERT(max_abs_diff_d(dx, dref, nx) < 1e-5);
            free(x), free(y), free(dy), free(dx), free(ref), free(dref), free(am), free(amref);
        }
        sl__backend_free(b);
    }
}

/* The fused ops against the ops they replace, bit for bit: maxpool_relu_backward_set against
 * fill 0 + maxpool_backward + act_backward_set(RELU) on ReLU outputs with many zeros (whole
 * windows of 0, -0 gradients), over windows that tile the input with padding and with rows
 * and columns no window covers; bias_act against bias_add + act_forward. */
static const geo TGEOS[] = {
    {2, 6, 6, 3, 2, 2, 2, 0, 0, 3, 3},      /* the CNN's 2x2 pools */
    {3, 7, 5, 2, 2, 2, 2, 0, 0, 3, 2},      /* VALID: the last row and column in no window */
    {2, 7, 7, 3, 3, 3, 3, 1, 1, 3, 3},      /* SAME: padding on every side */
    {8, 28, 28, 32, 2, 2, 2, 0, 0, 14, 14}, /* threaded */
    {2, 4, 4, 70, 2, 2, 2, 0, 0, 2, 2},     /* channels past one 64-wide group */
};

TEST(test_fused_pool_relu_and_bias_act) {
    for (int threads = 1; threads <= 2; threads++) {
        sl_backend *b = backend(threads);
        ASSERT(b);
        ASSERT(b->ops->maxpool_relu_backward_set && b->ops->bias_act);
        for (size_t gi = 0; gi < sizeof TGEOS / sizeof TGEOS[0]; gi++) {
            const geo *g = &TGEOS[gi];
            size_t nx = (size_t)g->n * g->h * g->w * g->c, ny = (size_t)g->n * g->oh * g->ow * g->c;
            float *x = rand_buf(nx), *y = rand_buf(ny), *dy = rand_buf(ny), *want = rand_buf(nx), *got = rand_buf(nx);
            int32_t *am = malloc(ny * sizeof(int32_t));
            for (size_t i = 0; i < nx; i++) x[i] = x[i] > 0.3f ? x[i] : 0.0f; /* a ReLU's output */
            for (size_t i = 0; i < ny; i += 7) dy[i] = -0.0f;
            for (size_t i = 0; i < nx; i++) got[i] = NAN; /* every float must be written */
            ASSERT_OK(b->ops->maxpool_forward(b, x, g->n, g->h, g->w, g->c, g->kh, g->s, g->pt, g->pl, g->oh, g->ow, y, am));
            ASSERT_OK(b->ops->fill(b, want, 0.0f, nx));
            ASSERT_OK(b->ops->maxpool_backward(b, dy, am, g->n, g->h, g->w, g->c, g->kh, g->s, g->pt, g->pl, g->oh,
                                               g->ow, want));
            ASSERT_OK(b->ops->act_backward_set(b, SL_ACT_RELU, x, want, want, nx));
            ASSERT_OK(b->ops->maxpool_relu_backward_set(b, dy, y, am, g->n, g->h, g->w, g->c, g->kh, g->s, g->pt, g->pl,
                                                        g->oh, g->ow, got));
            size_t nonzero = 0;
            for (size_t i = 0; i < nx; i++) nonzero += got[i] != 0.0f;
            ASSERT(nonzero > 0 && nonzero < ny);
            ASSERT_MEMEQ(got, want, nx * sizeof(float));
            free(x), free(y), free(dy), free(want), free(got), free(am);
        }
        /* windows that overlap or leave the input are refused, dx untouched */
        float dy[9] = {1}, y[9] = {1}, dx[16], keep[16];
        int32_t am[9] = {0};
        for (int i = 0; i < 16; i++) dx[i] = keep[i] = (float)i;
        ASSERT_EQ(b->ops->maxpool_relu_backward_set(b, dy, y, am, 1, 4, 4, 1, 2, 1, 0, 0, 3, 3, dx), SL_EINVAL);
        ASSERT_EQ(b->ops->maxpool_relu_backward_set(b, dy, y, am, 1, 4, 4, 1, 2, 2, 0, 0, 3, 2, dx), SL_EINVAL);
        ASSERT_EQ(b->ops->maxpool_relu_backward_set(b, dy, y, am, 1, 4, 4, 1, 2, 2, -1, 0, 2, 2, dx), SL_EINVAL);
        ASSERT_EQ(b->ops->maxpool_relu_backward_set(b, dy, y, am, 1, 4, 4, 0, 2, 2, 0, 0, 2, 2, dx), SL_EINVAL);
        ASSERT_MEMEQ(dx, keep, sizeof dx);
        /* bias_act */
        const size_t rows = 1031, cols = 37, n = rows * cols;
        float *yb = rand_buf(n), *bias = rand_buf(cols), *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) yb[i] *= 4.0f;
        for (int a = SL_ACT_NONE; a <= SL_ACT_SIGMOID; a++) {
            memcpy(want, yb, n * sizeof(float));
            memcpy(got, yb, n * sizeof(float));
            ASSERT_OK(b->ops->bias_add(b, want, bias, rows, cols));
            ASSERT_OK(b->ops->act_forward(b, (sl_act)a, want, want, n));
            ASSERT_OK(b->ops->bias_act(b, (sl_act)a, got, bias, rows, cols));
            ASSERT_MEMEQ(got, want, n * sizeof(float));
        }
        memcpy(got, yb, n * sizeof(float));
        ASSERT_EQ(b->ops->bias_act(b, (sl_act)9, got, bias, rows, cols), SL_EINVAL);
        ASSERT_MEMEQ(got, yb, n * sizeof(float));
        free(yb), free(bias), free(want), free(got);
        sl__backend_free(b);
    }
}

/* run_tasks: every task once, claimed in order, slots below the slots asked for and
 * task_slots and never shared by two tasks at once; the lowest failing task's error reaches the caller with its message;
 * ops called inside a task run alone (the team is taken) and still compute. */
typedef struct task_probe {
    sl_backend *b;
    atomic_int runs[64], slot_busy[4];
    atomic_int bad_slot, overlap;
    int fail_from; /* tasks >= this fail */
    int max_slot;  /* slots must be below it */
    float *buf;
} task_probe;

static sl_status probe_task(void *vc, int t, int slot) {
    task_probe *p = vc;
    atomic_fetch_add(&p->runs[t], 1);
    if (slot < 0 || slot >= p->max_slot) {
        atomic_store(&p->bad_slot, 1);
        return SL_OK;
    }
    if (atomic_fetch_add(&p->slot_busy[slot], 1) != 0) atomic_store(&p->overlap, 1);
    sl_status s = p->b->ops->fill(p->b, p->buf + (size_t)t * 100000, (float)t, 100000); /* a threaded op, alone */
    atomic_fetch_sub(&p->slot_busy[slot], 1);
    if (s == SL_OK && t >= p->fail_from) return sl_err(SL_EIO, "task %d failed on purpose", t);
    return s;
}

TEST(test_run_tasks) {
    for (int threads = 1; threads <= 3; threads++) {
        sl_backend *b = backend(threads);
        ASSERT(b);
        ASSERT_EQ(b->ops->task_slots(b), threads);
        task_probe *p = calloc(1, sizeof *p);
        p->b = b;
        p->fail_from = 64;
        p->max_slot = threads < 2 ? threads : 2; /* asked for 2 at most */
        p->buf = malloc(64 * 100000 * sizeof(float));
        ASSERT_OK(b->ops->run_tasks(b, 64, 2, probe_task, p));
        for (int t = 0; t < 64; t++) {
            ASSERT_EQ(atomic_load(&p->runs[t]), 1);
            ASSERT(p->buf[(size_t)t * 100000] == (float)t && p->buf[(size_t)t * 100000 + 99999] == (float)t);
        }
        ASSERT_EQ(atomic_load(&p->bad_slot), 0);
        ASSERT_EQ(atomic_load(&p->overlap), 0);
        /* tasks 40.. fail: the error is task 40's; no task runs twice */
        for (int t = 0; t < 64; t++) atomic_store(&p->runs[t], 0);
        p->fail_from = 40;
        p->max_slot = threads;
        ASSERT_EQ(b->ops->run_tasks(b, 64, 8, probe_task, p), SL_EIO);
        ASSERT(strstr(sl_errmsg(), "task 40 failed on purpose") != NULL);
        for (int t = 0; t < 64; t++) {
            ASSERT(atomic_load(&p->runs[t]) <= 1);
            if (t <= 40) ASSERT_EQ(atomic_load(&p->runs[t]), 1); /* claimed in order: all before 40 ran */
        }
        sl_err_clear();
        ASSERT_OK(b->ops->run_tasks(b, 0, 8, probe_task, p));
        free(p->buf);
        free(p);
        sl__backend_free(b);
    }
    /* bf16 GEMMs share one rounding buffer: one task at a time */
    sl_backend *b = backend(2);
    ASSERT_OK(b->ops->set_precision(b, SL_BK_BF16));
    ASSERT_EQ(b->ops->task_slots(b), 1);
    sl__backend_free(b);
}

TEST(test_softmax_xent) {
    sl_backend *b = backend(2);
    ASSERT(b);
    const int n = 2003, k = 11;
    float *z = rand_buf((size_t)n * k), *d = rand_buf((size_t)n * k);
    int32_t *lab = malloc(n * sizeof(int32_t));
    for (int i = 0; i < n; i++) {
        z[i * k + 3] *= 5;
        lab[i] = (int32_t)(((unsigned)i * 7u) % k);
    }
    z[5 * k + 1] = z[5 * k + 2] = 9.0f; /* a tie: the first maximum wins */
    lab[5] = 1;
    double loss = -1, ref_loss = 0;
    int64_t correct = -1, ref_correct = 0;
    ASSERT_OK(b->ops->softmax_xent(b, z, lab, n, k, 0.0f, 0.5f, d, &loss, &correct, NULL));
    for (int i = 0; i < n; i++) {
        double mx = -INFINITY, sum = 0;
        int arg = 0;
        for (int j = 0; j < k; j++)
            if (z[i * k + j] > mx) mx = z[i * k + j], arg = j;
        for (int j = 0; j < k; j++) sum += exp(z[i * k + j] - mx);
        ref_loss += log(sum) + mx - z[i * k + lab[i]];
        ref_correct += arg == lab[i];
        for (int j = 0; j < k; j++) {
            double p = exp(z[i * k + j] - mx) / sum;
            ASSERT_CLOSE(d[i * k + j], 0.5 * (p - (j == lab[i])), 1e-6);
        }
    }
    ASSERT_CLOSE(loss, ref_loss, 1e-9 * ref_loss);
    ASSERT_EQ(correct, ref_correct);
    /* evaluation: no gradient */
    ASSERT_OK(b->ops->softmax_xent(b, z, lab, n, k, 0.0f, 0.0f, NULL, &loss, &correct, NULL));
    ASSERT_CLOSE(loss, ref_loss, 1e-9 * ref_loss);
    /* a label out of range is SL_ERANGE, and the gradient is left alone */
    lab[17] = k;
    float keep = d[0];
    ASSERT_EQ(b->ops->softmax_xent(b, z, lab, n, k, 0.0f, 1.0f, d, &loss, &correct, NULL), SL_ERANGE);
    ASSERT_STREQ(sl_errmsg(), "softmax_xent: label 11 of row 17 is outside 0..10");
    ASSERT(d[0] == keep);
    lab[17] = -1;
    ASSERT_EQ(b->ops->softmax_xent(b, z, lab, n, k, 0.0f, 1.0f, d, &loss, &correct, NULL), SL_ERANGE);
    free(z), free(d), free(lab);
    sl__backend_free(b);
}

/* Without smoothing the op gives exactly the numbers of plain cross-entropy, computed here
 * the way the op always has: the bits of the loss and of every gradient value. */
TEST(test_softmax_xent_plain_bits) {
    for (int th = 1; th <= 2; th++) {
        sl_backend *b = backend(th);
        ASSERT(b);
        const int n = 301, k = 10;
        float *z = rand_buf((size_t)n * k), *d = rand_buf((size_t)n * k), *ref = rand_buf((size_t)n * k);
        int32_t *lab = malloc(n * sizeof(int32_t));
        for (int i = 0; i < n; i++) lab[i] = (int32_t)(((unsigned)i * 3u) % k);
        const float scale = 1.0f / 301;
        double loss = -1, ref_loss = 0;
        ASSERT_OK(b->ops->softmax_xent(b, z, lab, n, k, 0.0f, scale, d, &loss, NULL, NULL));
        for (int r = 0; r < n; r++) {
            const float *zr = z + r * k;
            float mx = zr[0];
            for (int j = 1; j < k; j++)
                if (zr[j] > mx) mx = zr[j];
            double sum = 0.0;
            for (int j = 0; j < k; j++) sum += exp((double)zr[j] - mx);
            ref_loss += log(sum) - ((double)zr[lab[r]] - mx);
            double inv = 1.0 / sum;
            for (int j = 0; j < k; j++) {
                double p = exp((double)zr[j] - mx) * inv;
                ref[r * k + j] = (float)((p - (j == lab[r] ? 1.0 : 0.0)) * scale);
            }
        }
        ASSERT(loss == ref_loss);
        ASSERT_MEMEQ(d, ref, (size_t)n * k * sizeof(float));
        free(z), free(d), free(ref), free(lab);
        sl__backend_free(b);
    }
}

/* Label smoothing: target t = (1 - e) onehot + e / k (Keras' and PyTorch's label_smoothing),
 * loss -sum t log softmax, gradient (softmax - t) * scale. */
TEST(test_softmax_xent_smoothing) {
    sl_backend *b = backend(2);
    ASSERT(b);
    /* by hand: logits (0, ln 3) give softmax (1/4, 3/4); label 1, e = 0.2: t = (0.1, 0.9),
     * loss = 0.1 ln 4 + 0.9 ln 4/3; the same row with label 0 and logits (0, 0): ln 2 */
    float z2[4] = {0.0f, (float)log(3.0), 0.0f, 0.0f}, d2[4];
    int32_t l2[2] = {1, 0};
    double loss = -1;
    int64_t correct = -1, top5 = -1;
    ASSERT_OK(b->ops->softmax_xent(b, z2, l2, 2, 2, 0.2f, 1.0f, d2, &loss, &correct, &top5));
    ASSERT_CLOSE(loss, 0.1 * log(4.0) + 0.9 * log(4.0 / 3.0) + log(2.0), 1e-6);
    ASSERT_CLOSE(d2[0], 0.25 - 0.1, 1e-6);
    ASSERT_CLOSE(d2[1], 0.75 - 0.9, 1e-6);
    ASSERT_CLOSE(d2[2], 0.5 - 0.9, 1e-6);
    ASSERT_CLOSE(d2[3], 0.5 - 0.1, 1e-6);
    ASSERT_EQ(correct, 2); /* row 1: a tie, the first maximum is the label */
    ASSERT_EQ(top5, 2);
    /* random rows against a double reference, two smoothing values */
    const int n = 257, k = 13;
    float *z = rand_buf((size_t)n * k), *d = rand_buf((size_t)n * k);
    int32_t *lab = malloc(n * sizeof(int32_t));
    for (int i = 0; i < n; i++) lab[i] = (int32_t)(((unsigned)i * 5u) % k);
    const float es[2] = {0.1f, 0.5f};
    for (int t = 0; t < 2; t++) {
        double e = es[t], ref_loss = 0;
        ASSERT_OK(b->ops->softmax_xent(b, z, lab, n, k, es[t], 0.5f, d, &loss, NULL, NULL));
        for (int r = 0; r < n; r++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < k; j++) mx = fmax(mx, z[r * k + j]);
            for (int j = 0; j < k; j++) sum += exp(z[r * k + j] - mx);
            for (int j = 0; j < k; j++) {
                double tj = (1 - e) * (j == lab[r]) + e / k, p = exp(z[r * k + j] - mx) / sum;
                ref_loss -= tj * log(p);
                ASSERT_CLOSE(d[r * k + j], 0.5 * (p - tj), 1e-6);
            }
        }
        ASSERT_CLOSE(loss, ref_loss, 1e-9 * ref_loss);
    }
    /* e outside [0, 1) is refused; the gradient is left alone */
    float keep = d[0];
    const float bad[3] = {1.0f, -0.1f, NAN};
    for (int t = 0; t < 3; t++)
        ASSERT_EQ(b->ops->softmax_xent(b, z, lab, n, k, bad[t], 1.0f, d, &loss, NULL, NULL), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "softmax_xent: label smoothing nan is outside [0, 1)");
    ASSERT(d[0] == keep);
    free(z), free(d), free(lab);
    sl__backend_free(b);
}

/* Top-5: a row counts when fewer than 5 logits are strictly greater than the label's, so
 * logits tied with the label's at the boundary are all in (tf.math.in_top_k); a
 * non-finite label logit never counts. Exact counts through both halves of the op. */
TEST(test_softmax_xent_top5) {
    sl_backend *b = backend(2);
    ASSERT(b);
    enum { K = 8, N = 9 };
    static const float z[N][K] = {
        {9, 1, 2, 3, 4, 5, 6, 7}, /* label 0, the maximum: top-1 and top-5 */
        {9, 8, 7, 6, 5, 4, 3, 2}, /* label 5 (4): 5 greater, out */
        {9, 8, 7, 6, 5, 4, 3, 2}, /* label 4 (5): 4 greater, in */
        {9, 8, 7, 6, 5, 5, 5, 0}, /* label 6 (5): 4 greater, tied with 2 others at the boundary: in */
        {1, 1, 1, 1, 1, 1, 1, 1}, /* label 3: all tied: in top-5; top-1 is the first maximum, index 0: no */
        {2, 2, 2, 2, 2, 1, 0, 0}, /* label 5 (1): 5 tied above it: out */
        {3, 3, 3, 3, 3, 3, 3, 0}, /* label 0: a 7-way tie for the maximum: top-1 and top-5 */
        {0, 1, 2, 3, 4, 5, 6, 7}, /* label 7, the maximum at the end */
        {0, 1, 2, 3, 4, 5, 6, 7}, /* label 0, the minimum: 7 greater, out */
    };
    static const int32_t lab[N] = {0, 5, 4, 6, 3, 5, 0, 7, 0};
    double loss;
    int64_t correct = -1, top5 = -1;
    ASSERT_OK(b->ops->softmax_xent(b, &z[0][0], lab, N, K, 0.0f, 1.0f, NULL, &loss, &correct, &top5));
    ASSERT_EQ(correct, 3); /* rows 0, 6, 7 */
    ASSERT_EQ(top5, 6);    /* rows 0, 2, 3, 4, 6, 7 */
    /* smoothing does not change the counts; the two halves give the same */
    correct = top5 = -1;
    ASSERT_OK(b->ops->softmax_xent_start(b, &z[0][0], lab, N, K, 0.1f, 1.0f, NULL));
    ASSERT_OK(b->ops->softmax_xent_result(b, &loss, &correct, &top5));
    ASSERT_EQ(correct, 3);
    ASSERT_EQ(top5, 6);
    /* rows 1..3 only: 2 */
    ASSERT_OK(b->ops->softmax_xent(b, &z[1][0], lab + 1, 3, K, 0.0f, 1.0f, NULL, &loss, &correct, &top5));
    ASSERT_EQ(correct, 0);
    ASSERT_EQ(top5, 2);
    /* 5 classes or fewer: every row is in the top 5 */
    ASSERT_OK(b->ops->softmax_xent(b, &z[8][0], (const int32_t[]){0}, 1, 5, 0.0f, 1.0f, NULL, &loss, &correct, &top5));
    ASSERT_EQ(correct, 0);
    ASSERT_EQ(top5, 1);
    /* a NaN or infinite label logit is never in */
    float zn[3][K] = {{0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3, 4, 5, 6, 7}};
    zn[0][7] = NAN;
    zn[1][7] = INFINITY;
    zn[2][0] = NAN; /* another logit NaN: not greater than the label's */
    ASSERT_OK(b->ops->softmax_xent(b, &zn[0][0], (const int32_t[]){7, 7, 7}, 3, K, 0.0f, 1.0f, NULL, &loss, NULL,
                                   &top5));
    ASSERT_EQ(top5, 1);
    sl__backend_free(b);
}

TEST(test_dropout) {
    sl_backend *b = backend(2);
    ASSERT(b);
    const size_t n = 300007;
    const float rate = 0.3f;
    float *x = rand_buf(n), *y = malloc(n * sizeof(float)), *m = malloc(n * sizeof(float));
    float *y2 = malloc(n * sizeof(float)), *m2 = malloc(n * sizeof(float));
    ASSERT_OK(b->ops->dropout_forward(b, x, y, m, n, rate, 42));
    size_t kept = 0;
    const float scale = 1.0f / (1.0f - rate);
    const uint64_t thr = (uint64_t)(0.3f * 4294967296.0);
    for (size_t i = 0; i < n; i++) {
        bool keep = sl__bk_rand_u32(42, i) >= thr;
        ASSERT(m[i] == (keep ? scale : 0.0f));
        ASSERT(y[i] == x[i] * m[i]);
        kept += keep;
    }
    double frac = (double)kept / n; /* 1 - rate within 5 standard deviations */
    ASSERT(fabs(frac - 0.7) < 5 * sqrt(0.21 / n));
    /* the same seed gives the same mask (with one thread too); another seed another */
    sl_backend *b1 = backend(1);
    ASSERT_OK(b1->ops->dropout_forward(b1, x, y2, m2, n, rate, 42));
    ASSERT_MEMEQ(m, m2, n * sizeof(float));
    ASSERT_MEMEQ(y, y2, n * sizeof(float));
    ASSERT_OK(b->ops->dropout_forward(b, x, y2, m2, n, rate, 43));
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += m[i] == m2[i];
    ASSERT(same < n * 7 / 10);
    /* the generator itself is pinned: CUDA draws the same numbers */
    ASSERT_U64(sl__bk_rand_u32(0, 0), 0xe220a839u);
    /* backward */
    float *dy = rand_buf(n), *dx = rand_buf(n), *dx0 = copy_buf(dx, n);
    ASSERT_OK(b->ops->dropout_backward(b, dy, m, dx, n));
    for (size_t i = 0; i < n; i++) ASSERT(dx[i] == dx0[i] + dy[i] * m[i]);
    /* rate 0 keeps everything */
    ASSERT_OK(b->ops->dropout_forward(b, x, y2, m2, 1000, 0.0f, 1));
    for (size_t i = 0; i < 1000; i++) ASSERT(m2[i] == 1.0f && y2[i] == x[i]);
    ASSERT_EQ(b->ops->dropout_forward(b, x, y2, m2, 10, 1.0f, 1), SL_EINVAL);
    free(x), free(y), free(m), free(y2), free(m2), free(dy), free(dx), free(dx0);
    sl__backend_free(b);
    sl__backend_free(b1);
}

TEST(test_batchnorm) {
    sl_backend *b = backend(2);
    ASSERT(b);
    const size_t rows = 53;
    const int c = 6;
    const float mom = 0.1f, eps = 1e-3f;
    float *x = rand_buf(rows * c), *y = malloc(rows * c * sizeof(float)), *gamma = rand_buf(c), *beta = rand_buf(c);
    for (size_t i = 0; i < rows * c; i++) x[i] = x[i] * 2 + (float)(i % c);
    float rm[6], rv[6], sm[6], si[6];
    for (int j = 0; j < c; j++) rm[j] = 0.5f, rv[j] = 2.0f;
    ASSERT_OK(b->ops->batchnorm_forward(b, x, y, rows, c, gamma, beta, rm, rv, mom, eps, true, sm, si));
    double mean[6] = {0}, var[6] = {0};
    for (size_t r = 0; r < rows; r++)
        for (int j = 0; j < c; j++) mean[j] += x[r * c + j] / (double)rows;
    for (size_t r = 0; r < rows; r++)
        for (int j = 0; j < c; j++) var[j] += pow(x[r * c + j] - mean[j], 2) / (double)rows;
    for (int j = 0; j < c; j++) {
        double inv = 1 / sqrt(var[j] + eps);
        ASSERT_CLOSE(sm[j], mean[j], 1e-5);
        ASSERT_CLOSE(si[j], inv, 1e-5 * inv);
        ASSERT_CLOSE(rm[j], 0.9 * 0.5 + 0.1 * mean[j], 1e-5);
        ASSERT_CLOSE(rv[j], 0.9 * 2.0 + 0.1 * var[j] * rows / (rows - 1), 1e-5);
        for (size_t r = 0; r < rows; r++)
            ASSERT_CLOSE(y[r * c + j], gamma[j] * (x[r * c + j] - mean[j]) * inv + beta[j], 1e-5);
    }
    /* backward against the closed form */
    float *dy = rand_buf(rows * c), *dx = rand_buf(rows * c), *dx0 = copy_buf(dx, rows * c);
    float dg[6] = {1, 1, 1, 1, 1, 1}, db[6] = {2, 2, 2, 2, 2, 2};
    ASSERT_OK(b->ops->batchnorm_backward(b, x, dy, rows, c, gamma, sm, si, dx, dg, db));
    for (int j = 0; j < c; j++) {
        double inv = 1 / sqrt(var[j] + eps), sdy = 0, sdyx = 0;
        for (size_t r = 0; r < rows; r++) {
            double xh = (x[r * c + j] - mean[j]) * inv;
            sdy += dy[r * c + j];
            sdyx += dy[r * c + j] * xh;
        }
        ASSERT_CLOSE(db[j], 2 + sdy, 1e-4);
        ASSERT_CLOSE(dg[j], 1 + sdyx, 1e-4);
        for (size_t r = 0; r < rows; r++) {
            double xh = (x[r * c + j] - mean[j]) * inv;
            double want = dx0[r * c + j] + gamma[j] * inv / rows * (rows * dy[r * c + j] - sdy - xh * sdyx);
            ASSERT_CLOSE(dx[r * c + j], want, 1e-4);
        }
    }
    /* inference uses the running statistics and leaves them alone */
    float rm2[6], rv2[6];
    memcpy(rm2, rm, sizeof rm);
    memcpy(rv2, rv, sizeof rv);
    ASSERT_OK(b->ops->batchnorm_forward(b, x, y, rows, c, gamma, beta, rm, rv, mom, eps, false, NULL, NULL));
    ASSERT_MEMEQ(rm, rm2, sizeof rm);
    ASSERT_MEMEQ(rv, rv2, sizeof rv);
    for (size_t r = 0; r < rows; r++)
        for (int j = 0; j < c; j++)
            ASSERT_CLOSE(y[r * c + j], gamma[j] * (x[r * c + j] - rm[j]) / sqrt(rv[j] + eps) + beta[j], 1e-5);
    free(x), free(y), free(gamma), free(beta), free(dy), free(dx), free(dx0);
    sl__backend_free(b);
}

/* Big enough to run threaded: the same bits as with one thread. */
TEST(test_batchnorm_threads) {
    const size_t rows = 20011;
    const int c = 7;
    float *x = rand_buf(rows * c), *dy = rand_buf(rows * c), *gamma = rand_buf(c), *beta = rand_buf(c);
    float *out[2][3];
    float stats[2][4][7], dgb[2][2][7];
    for (int t = 0; t < 2; t++) {
        sl_backend *b = backend(t + 1);
        ASSERT(b);
        out[t][0] = malloc(rows * c * sizeof(float)); /* y */
        out[t][1] = calloc(rows * c, sizeof(float));  /* dx */
        out[t][2] = malloc(rows * c * sizeof(float)); /* y at inference */
        for (int j = 0; j < c; j++) stats[t][0][j] = 0, stats[t][1][j] = 1, dgb[t][0][j] = dgb[t][1][j] = 0;
        ASSERT_OK(b->ops->batchnorm_forward(b, x, out[t][0], rows, c, gamma, beta, stats[t][0], stats[t][1], 0.01f,
                                            1e-3f, true, stats[t][2], stats[t][3]));
        ASSERT_OK(b->ops->batchnorm_backward(b, x, dy, rows, c, gamma, stats[t][2], stats[t][3], out[t][1], dgb[t][0],
                                             dgb[t][1]));
        ASSERT_OK(b->ops->batchnorm_forward(b, x, out[t][2], rows, c, gamma, beta, stats[t][0], stats[t][1], 0.01f,
                                            1e-3f, false, NULL, NULL));
        sl__backend_free(b);
    }
    for (int i = 0; i < 3; i++) ASSERT_MEMEQ(out[0][i], out[1][i], rows * c * sizeof(float));
    ASSERT_MEMEQ(stats[0], stats[1], sizeof stats[0]);
    ASSERT_MEMEQ(dgb[0], dgb[1], sizeof dgb[0]);
    /* the batch was normalised: per channel mean 0 and variance 1 before gamma and beta */
    for (int j = 0; j < c; j++) {
        double m = 0, v = 0;
        for (size_t r = 0; r < rows; r++) m += (out[0][0][r * c + j] - beta[j]) / gamma[j];
        m /= rows;
        for (size_t r = 0; r < rows; r++) v += pow((out[0][0][r * c + j] - beta[j]) / gamma[j] - m, 2);
        ASSERT(fabs(m) < 1e-4);
        ASSERT(fabs(v / rows - 1.0) < 1e-2); /* eps 1e-3 against a variance of ~1/3 */
    }
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 3; i++) free(out[t][i]);
    free(x), free(dy), free(gamma), free(beta);
}

TEST(test_sgd_adam_steps) {
    sl_backend *b = backend(1);
    ASSERT(b);
    /* plain SGD with weight decay: p -= lr (g + wd p) */
    float p[2] = {1.0f, -2.0f}, g[2] = {0.5f, 0.25f}, v[2] = {0, 0}, m[2] = {0, 0}, vv[2] = {0, 0};
    ASSERT_OK(b->ops->sgd_step(b, p, g, NULL, 2, 0.1f, 0.0f, false, 0.1f));
    ASSERT_CLOSE(p[0], 1.0 - 0.1 * (0.5 + 0.1), 1e-7);
    ASSERT_CLOSE(p[1], -2.0 - 0.1 * (0.25 - 0.2), 1e-6);
    /* momentum 0.9: v = 0.5, p = 0.95; again: v = 0.95, p = 0.855 */
    p[0] = 1.0f;
    ASSERT_OK(b->ops->sgd_step(b, p, g, v, 1, 0.1f, 0.9f, false, 0.0f));
    ASSERT_CLOSE(v[0], 0.5, 1e-7);
    ASSERT_CLOSE(p[0], 0.95, 1e-7);
    ASSERT_OK(b->ops->sgd_step(b, p, g, v, 1, 0.1f, 0.9f, false, 0.0f));
    ASSERT_CLOSE(v[0], 0.95, 1e-7);
    ASSERT_CLOSE(p[0], 0.855, 1e-7);
    /* Nesterov: p -= lr (g + momentum v): 1 - 0.1 (0.5 + 0.45) = 0.905 */
    p[0] = 1.0f, v[0] = 0.0f;
    ASSERT_OK(b->ops->sgd_step(b, p, g, v, 1, 0.1f, 0.9f, true, 0.0f));
    ASSERT_CLOSE(p[0], 0.905, 1e-7);
    /* Adam step 1: mhat = g, vhat = g^2, p -= lr g / (|g| + eps) */
    p[0] = 1.0f;
    ASSERT_OK(b->ops->adam_step(b, p, g, m, vv, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, false, 1));
    ASSERT_CLOSE(m[0], 0.05, 1e-7);
    ASSERT_CLOSE(vv[0], 0.00025, 1e-8);
    ASSERT_CLOSE(p[0], 0.9, 1e-6);
    /* step 2 with g = 0.5 again: m = 0.095, v = 0.00049975, mhat = 0.5, vhat = 0.25 */
    ASSERT_OK(b->ops->adam_step(b, p, g, m, vv, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, false, 2));
    ASSERT_CLOSE(m[0], 0.095, 1e-7);
    ASSERT_CLOSE(vv[0], 0.00049975, 1e-8);
    ASSERT_CLOSE(p[0], 0.8, 1e-6);
    /* Adam L2: g' = 0.5 + 0.1 * 1 = 0.6; step 1 moves by lr regardless of |g'| */
    p[0] = 1.0f, m[0] = 0.0f, vv[0] = 0.0f;
    ASSERT_OK(b->ops->adam_step(b, p, g, m, vv, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, false, 1));
    ASSERT_CLOSE(m[0], 0.06, 1e-7);
    ASSERT_CLOSE(p[0], 0.9, 1e-6);
    /* AdamW: p = p (1 - lr wd) - lr mhat / (sqrt(vhat) + eps) = 0.99 - 0.1 */
    p[0] = 1.0f, m[0] = 0.0f, vv[0] = 0.0f;
    ASSERT_OK(b->ops->adam_step(b, p, g, m, vv, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, true, 1));
    ASSERT_CLOSE(m[0], 0.05, 1e-7);
    ASSERT_CLOSE(p[0], 0.89, 1e-6);
    ASSERT_EQ(b->ops->adam_step(b, p, g, m, vv, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, false, 0), SL_EINVAL);
    sl__backend_free(b);
    /* big buffers: threaded result equals serial */
    sl_backend *b2 = backend(2), *b1 = backend(1);
    const size_t n = 250001;
    float *pa = rand_buf(n), *pb = copy_buf(pa, n), *gg = rand_buf(n);
    float *ma = calloc(n, 4), *va = calloc(n, 4), *mb = calloc(n, 4), *vb = calloc(n, 4);
    for (int t = 1; t <= 3; t++) {
        ASSERT_OK(b2->ops->adam_step(b2, pa, gg, ma, va, n, 0.01f, 0.9f, 0.999f, 1e-8f, 0.01f, true, t));
        ASSERT_OK(b1->ops->adam_step(b1, pb, gg, mb, vb, n, 0.01f, 0.9f, 0.999f, 1e-8f, 0.01f, true, t));
        ASSERT_OK(b2->ops->sgd_step(b2, pa, gg, ma, n, 0.01f, 0.9f, true, 0.01f));
        ASSERT_OK(b1->ops->sgd_step(b1, pb, gg, mb, n, 0.01f, 0.9f, true, 0.01f));
    }
    ASSERT_MEMEQ(pa, pb, n * sizeof(float));
    free(pa), free(pb), free(gg), free(ma), free(va), free(mb), free(vb);
    sl__backend_free(b1);
    sl__backend_free(b2);
}

int main(void) {
    RUN(test_alloc_copy);
    RUN(test_gemm_all_transposes_and_strides);
    RUN(test_gemm_choice);
    RUN(test_gemm_choices_text);
    RUN(test_gemm_mixed_precision);
    RUN(test_vector_ops);
    RUN(test_team);
    RUN(test_bias_add_grad);
    RUN(test_activations);
    RUN(test_im2col_col2im);
    RUN(test_pools);
    RUN(test_fused_pool_relu_and_bias_act);
    RUN(test_run_tasks);
    RUN(test_softmax_xent);
    RUN(test_softmax_xent_plain_bits);
    RUN(test_softmax_xent_smoothing);
    RUN(test_softmax_xent_top5);
    RUN(test_dropout);
    RUN(test_batchnorm);
    RUN(test_batchnorm_threads);
    RUN(test_sgd_adam_steps);
    TEST_MAIN_END();
}
