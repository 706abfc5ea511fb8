/* The CPU backend's GEMM (train/backend.h gemm) and its choice of kernels: OpenBLAS's
 * cblas_sgemm or Sluice's AVX-512 GEMM (train/gemm_avx512.h), as sl_model_opts.cpu_gemm
 * says (sluice/model.h). In bf16 / fp16 mode the inputs are rounded first, which emulates
 * mixed precision for tests and as the CUDA backend's reference.
 *
 * The choice is made by measurement, never by a library's or a CPU's name. Under
 * SL_CPU_GEMM_AUTO on a CPU with AVX-512F, the first time the process multiplies a shape
 * (ta, tb, m, n, k) whose parts Sluice's GEMM would take (24 x 24 and up), both GEMMs run on
 * that product's own operands into a scratch C: the slice one thread multiplies (cut to
 * PROBE_MACS multiply-adds), on the calling thread, alternating, PROBE_RUNS times each, the
 * best time of each counting. OpenBLAS is kept for the shape only when MARGIN times faster;
 * otherwise Sluice's, the incumbent. The two round differently (their sums over k run in
 * other orders), so a choice that could flip from run to run would make runs on one machine
 * differ in their last bits: the margin keeps two GEMMs within noise of each other from
 * trading places, the choice is made once per process and kept (for every backend in it),
 * and each is logged at SL_LOG_INFO; a caller that needs runs equal bit for bit pins one
 * (sl_model_opts.cpu_gemm). 1-6 ms per shape on the example models, at the first step. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/log.h"
#include "sluice/model.h"
#include "train/backend_cpu_priv.h"
#include "train/blas_priv.h"
#include "train/gemm_avx512.h"
#include "train/internal.h"

#define MARGIN 1.25                        /* OpenBLAS kept for a shape only when this much faster */
#define PROBE_MACS ((size_t)16 << 20)      /* multiply-adds of one timed run: ~0.2 ms */
#define PROBE_RUNS 3                       /* timed runs of each GEMM per shape */
#define SHAPES_MAX 1024                    /* shapes measured per process; past them, Sluice's */

/* GEMMs are split across our own pool, each part a single-threaded call on a slice of C
 * (OpenBLAS's own workers spin for long after each call, taking a small machine's cores from
 * the loops between GEMMs and from the input pipeline), along the longer of M and N: the one
 * whose operand each part then packs only a slice of. */
typedef struct gemm_ctx {
    bool ta, tb, split_n, own; /* own: sl__gemm512 */
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *a, *b;
    float *c;
} gemm_ctx;

static void gemm_part(void *vc, size_t lo, size_t hi) {
    const gemm_ctx *g = vc;
    /* parts are whole blocks of 16 rows / columns (the last one may be short) */
    int i0 = (int)lo * 16, i1 = (int)hi * 16;
    int lim = g->split_n ? g->n : g->m;
    if (i1 > lim) i1 = lim;
    if (i0 >= i1) return;
    const float *a = g->a, *b = g->b;
    float *c = g->c;
    int m = g->m, n = g->n;
    if (g->split_n) {
        b += g->tb ? (size_t)i0 * g->ldb : (size_t)i0;
        c += i0;
        n = i1 - i0;
    } else {
        a += g->ta ? (size_t)i0 : (size_t)i0 * g->lda;
        c += (size_t)i0 * g->ldc;
        m = i1 - i0;
    }
    if (g->own && sl__gemm512_worth(m, n) &&
        !sl__gemm512(g->ta, g->tb, m, n, g->k, g->alpha, a, g->lda, b, g->ldb, g->beta, c, g->ldc))
        return; /* else (out of memory for its buffers) the BLAS */
    cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans, m, n, g->k,
                g->alpha, a, g->lda, b, g->ldb, g->beta, c, g->ldc);
}

/* ---- the choice under SL_CPU_GEMM_AUTO ------------------------------------------------- */

typedef struct shape_choice {
    bool ta, tb;
    int m, n, k;
    int own; /* 1: Sluice's GEMM, 0: OpenBLAS, -1: being measured (by the thread that added it) */
} shape_choice;

/* The process's choices, in the order first met. Guarded by choice_mu; choice_cv is
 * broadcast when one is decided. Written once each, never removed. */
static shape_choice choices[SHAPES_MAX];
static int nchoices;
static pthread_mutex_t choice_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t choice_cv = PTHREAD_COND_INITIALIZER;

static int find_locked(bool ta, bool tb, int m, int n, int k) {
    for (int i = 0; i < nchoices; i++) {
        const shape_choice *s = &choices[i];
        if (s->m == m && s->n == n && s->k == k && s->ta == ta && s->tb == tb) return i;
    }
    return -1;
}

/* Nanoseconds of g's 16-blocks [0, blocks) multiplied `times` times on this thread. */
static double probe(gemm_ctx *g, size_t blocks, size_t times) {
    uint64_t t0 = sl_now_ns();
    for (size_t i = 0; i < times; i++) gemm_part(g, 0, blocks);
    return (double)(sl_now_ns() - t0);
}

/* Whether Sluice's GEMM is to multiply g's shape: both timed on the slice of C one thread
 * takes (par_for's part, or all of it inside a part of a team's run: a run_tasks task), cut
 * to PROBE_MACS (a smaller one repeated up to that), written into a scratch C (g's C
 * untouched). */
static bool measure(const cpu_backend *b, const gemm_ctx *g0) {
    gemm_ctx g = *g0;
    size_t len = (size_t)(g.split_n ? g.n : g.m), other = (size_t)(g.split_n ? g.m : g.n), blocks = (len + 15) / 16;
    int parts = sl__team_inside() ? 1 : par_parts(b, blocks, (size_t)g.m * g.n * g.k / 16);
    size_t part = (blocks + (size_t)parts - 1) / (size_t)parts, cap = PROBE_MACS / (16 * other * (size_t)g.k);
    if (cap < 6) cap = 6; /* 96 rows or columns at the least: a part the size the tile is tuned on */
    size_t nb = part < cap ? part : cap, cut = nb * 16 < len ? nb * 16 : len;
    if (!sl__gemm512_worth((int)(g.split_n ? other : cut), (int)(g.split_n ? cut : other)))
        return true; /* parts OpenBLAS multiplies either way (below 24 x 24): nothing to choose */
    size_t times = PROBE_MACS / (cut * other * (size_t)g.k);
    times = times < 1 ? 1 : times > 64 ? 64 : times;
    float *c = malloc(cut * other * sizeof(float));
    if (!c) return true; /* nothing to measure with: the incumbent */
    g.c = c;
    g.ldc = (int)(g.split_n ? cut : other);
    g.beta = 0.0f; /* C written, not read */
    double t_blas = INFINITY, t_own = INFINITY;
    for (int r = 0; r < PROBE_RUNS; r++) {
        g.own = false;
        double t = probe(&g, nb, times);
        if (t < t_blas) t_blas = t;
        g.own = true;
        t = probe(&g, nb, times);
        if (t < t_own) t_own = t;
    }
    free(c);
    bool own = !(t_blas * MARGIN < t_own);
    SL_INFO("cpu backend: gemm%s%s %dx%dx%d: Sluice's AVX-512 GEMM %.4f ms, OpenBLAS %.4f ms (a %zux%zu part, best "
            "of %d): %s", g.ta ? " A^T" : "", g.tb ? " B^T" : "", g.m, g.n, g.k, t_own / 1e6 / (double)times,
            t_blas / 1e6 / (double)times, g.split_n ? other : cut, g.split_n ? cut : other, PROBE_RUNS,
            own ? "Sluice's" : "OpenBLAS");
    return own;
}

/* The process's choice for g's shape, measured here when it is the first to meet it; a
 * thread that meets a shape being measured waits for the answer, so every product of one
 * shape in a process runs the same GEMM. */
static bool choose_own(const cpu_backend *b, const gemm_ctx *g) {
    pthread_mutex_lock(&choice_mu);
    int i = find_locked(g->ta, g->tb, g->m, g->n, g->k);
    if (i >= 0) {
        while (choices[i].own < 0) pthread_cond_wait(&choice_cv, &choice_mu);
        bool own = choices[i].own;
        pthread_mutex_unlock(&choice_mu);
        return own;
    }
    if (nchoices == SHAPES_MAX) {
        pthread_mutex_unlock(&choice_mu);
        return true;
    }
    i = nchoices++;
    choices[i] = (shape_choice){g->ta, g->tb, g->m, g->n, g->k, -1};
    pthread_mutex_unlock(&choice_mu);
    bool own = measure(b, g);
    pthread_mutex_lock(&choice_mu);
    choices[i].own = own;
    pthread_cond_broadcast(&choice_cv);
    pthread_mutex_unlock(&choice_mu);
    return own;
}

int sl__cpu_gemm_choice(bool ta, bool tb, int m, int n, int k) {
    pthread_mutex_lock(&choice_mu);
    int i = find_locked(ta, tb, m, n, k), own = i < 0 ? -1 : choices[i].own;
    pthread_mutex_unlock(&choice_mu);
    return own;
}

size_t sl__cpu_gemm_choices_text(char *buf, size_t cap) {
    size_t len = 0;
    if (cap) buf[0] = 0; /* no shape decided yet */
    pthread_mutex_lock(&choice_mu);
    for (int i = 0; i < nchoices; i++) {
        const shape_choice *c = &choices[i];
        if (c->own < 0) continue; /* being measured */
        bool room = len < cap;
        len += (size_t)snprintf(room ? buf + len : NULL, room ? cap - len : 0, "%s%d,%d,%d,%d,%d,%c", len ? ";" : "",
                                c->ta, c->tb, c->m, c->n, c->k, c->own ? 's' : 'b');
    }
    pthread_mutex_unlock(&choice_mu);
    return len;
}

/* One entry "TA,TB,M,N,K,G" of text at *p into *out; *p past it. */
static bool parse_choice(const char **p, shape_choice *out) {
    long long v[5];
    const char *s = *p;
    for (int j = 0; j < 5; j++) {
        if (*s < '0' || *s > '9') return false;
        char *end;
        errno = 0;
        v[j] = strtoll(s, &end, 10);
        if (errno || end == s || *end != ',' || end - s > 10) return false;
        s = end + 1;
    }
    if (v[0] > 1 || v[1] > 1) return false;
    for (int j = 2; j < 5; j++)
        if (v[j] < 1 || v[j] > 2147483647LL) return false;
    if (*s != 's' && *s != 'b') return false;
    *out = (shape_choice){v[0] == 1, v[1] == 1, (int)v[2], (int)v[3], (int)v[4], *s == 's'};
    s++;
    if (*s != ';' && *s != 0) return false;
    if (*s == ';' && s[1] == 0) return false; /* a ';' only between entries */
    *p = *s == ';' ? s + 1 : s;
    return true;
}

sl_status sl__cpu_gemm_choices_adopt(const char *text, bool apply, int *adopted) {
    if (adopted) *adopted = 0;
    if (!text) return sl_err(SL_EINVAL, "CPU GEMM choices: NULL text");
    shape_choice c;
    int n = 0;
    for (const char *p = text; *p; n++) { /* every entry sound before any is taken */
        const char *at = p;
        if (n == SHAPES_MAX) return sl_err(SL_ECORRUPT, "CPU GEMM choices: more than %d shapes", SHAPES_MAX);
        if (!parse_choice(&p, &c))
            return sl_err(SL_ECORRUPT, "CPU GEMM choices: entry %d at byte %td ('%.24s') is not TA,TB,M,N,K,s|b", n + 1,
                          at - text, at);
    }
    if (!apply) return SL_OK;
    int taken = 0;
    pthread_mutex_lock(&choice_mu);
    for (const char *p = text; *p && nchoices < SHAPES_MAX;) {
        parse_choice(&p, &c);
        if (find_locked(c.ta, c.tb, c.m, c.n, c.k) >= 0) continue; /* chosen here already */
        choices[nchoices++] = c;
        taken++;
    }
    pthread_cond_broadcast(&choice_cv);
    pthread_mutex_unlock(&choice_mu);
    if (taken) SL_INFO("cpu backend: %d GEMM choices taken from the checkpoint (of %d there)", taken, n);
    if (adopted) *adopted = taken;
    return SL_OK;
}

sl_status sl_cpu_gemm_parse(const char *name, sl_cpu_gemm *out) {
    static const char *const NAMES[] = {"auto", "blas", "avx512"};
    for (int i = 0; name && i < 3; i++)
        if (strcmp(name, NAMES[i]) == 0) {
            *out = (sl_cpu_gemm)i;
            return SL_OK;
        }
    return sl_err(SL_EINVAL, "CPU GEMM '%s' is none of auto, blas, avx512", name ? name : "(null)");
}

/* ---- mixed precision, emulated ---------------------------------------------------------- */

typedef struct round_ctx {
    const float *src;
    float *dst;
    size_t cols, ld;
    sl_bk_precision prec;
} round_ctx;

/* A GEMM input's rows x cols block src (row stride ld) rounded to bf16 / fp16 and back into
 * dst, a compact float matrix (row stride cols). */
static void round_rows(void *vc, size_t lo, size_t hi) {
    const round_ctx *r = vc;
    const bool bf16 = r->prec == SL_BK_BF16;
    for (size_t i = lo; i < hi; i++) {
        const float *s = r->src + i * r->ld;
        float *d = r->dst + i * r->cols;
        if (bf16)
            for (size_t j = 0; j < r->cols; j++) d[j] = sl_f32_from_bf16(sl_bf16_from_f32(s[j]));
        else
            for (size_t j = 0; j < r->cols; j++) d[j] = sl_f32_from_f16(sl_f16_from_f32(s[j]));
    }
}

/* A (stored ra x ca) and B (rb x cb) rounded into b->lp: *a and *bm then point at the
 * copies, with row strides *lda = ca and *ldb = cb. */
static sl_status round_inputs(cpu_backend *b, const float **a, int *lda, size_t ra, size_t ca, const float **bm,
                              int *ldb, size_t rb, size_t cb) {
    size_t na = ra * ca, need = na + rb * cb;
    if (need > b->lp_cap) {
        float *p = malloc(need * sizeof(float));
        if (!p) return sl_err(SL_ENOMEM, "gemm: out of memory for %zu floats of rounded inputs", need);
        free(b->lp);
        b->lp = p;
        b->lp_cap = need;
    }
    round_ctx ctx = {.src = *a, .dst = b->lp, .cols = ca, .ld = (size_t)*lda, .prec = b->prec};
    par_for(b, ra, na, round_rows, &ctx);
    ctx = (round_ctx){.src = *bm, .dst = b->lp + na, .cols = cb, .ld = (size_t)*ldb, .prec = b->prec};
    par_for(b, rb, rb * cb, round_rows, &ctx);
    *a = b->lp;
    *lda = (int)ca;
    *bm = b->lp + na;
    *ldb = (int)cb;
    return SL_OK;
}

/* ---- the op ------------------------------------------------------------------------------ */

static sl_status cpu_gemm(sl_backend *bb, bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                          const float *bm, int ldb, float beta, float *c, int ldc) {
    cpu_backend *b = (cpu_backend *)bb;
    if (m < 0 || n < 0 || k < 0) return sl_err(SL_EINVAL, "gemm: negative size %dx%dx%d", m, n, k);
    if (m == 0 || n == 0) return SL_OK;
    if (k == 0) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return SL_OK;
    }
    if (b->prec != SL_BK_FP32) {
        sl_status s = round_inputs(b, &a, &lda, (size_t)(ta ? k : m), (size_t)(ta ? m : k), &bm, &ldb,
                                   (size_t)(tb ? n : k), (size_t)(tb ? k : n));
        if (s) return s;
    }
    gemm_ctx g = {ta, tb, n > m, b->gemm == SL_CPU_GEMM_AVX512, m, n, k, lda, ldb, ldc, alpha, beta, a, bm, c};
    if (b->gemm == SL_CPU_GEMM_AUTO && sl__gemm512_worth(m, n)) g.own = choose_own(b, &g);
    size_t blocks = ((size_t)(g.split_n ? n : m) + 15) / 16;
    /* work in multiply-adds / 16: one part per thread once a GEMM is ~1M multiply-adds */
    par_for(b, blocks, (size_t)m * n * k / 16, gemm_part, &g);
    return SL_OK;
}


/* This file's members of the backend's op table (train/backend_cpu.c). */
void sl__cpu_gemm_ops(sl_backend_ops *o) {
    o->gemm = cpu_gemm;
}
