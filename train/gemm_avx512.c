/* A float32 GEMM on AVX-512 FMAs for the CPU backend (contract in train/gemm_avx512.h).
 *
 * Shape of the work (train/model.c on the CPU): C has a few hundred to a few thousand rows
 * and 10..1024 columns; K is 25..3136. Blocked as BLIS blocks: k in blocks of KC, n in
 * blocks of NC; each (k, n) block of op(B) is packed once into panels NR columns wide
 * (row kk of a panel: NR consecutive floats, zero past n), and a 12 x 32 microkernel keeps
 * 24 accumulators of 16 floats in registers while it walks a panel, each step broadcasting
 * one float of each of its 12 rows of op(A) against two vectors of the panel. op(A) is read
 * where it lies when it can be: stored m x k, its 12 rows as 12 sequential streams; stored
 * k x m (ta), its 12 floats for one kk adjacent. It is copied into k-major 12-row strips
 * (pack_strip) for its last rows when fewer than 12 are left (zero-padded: no read passes
 * the matrix), for products of WIDE columns and more (each strip then meets every panel,
 * the strip in L1 and the panels streaming from L2), and when its row stride is a multiple
 * of 1 KiB (12 rows would share one L1 set). Columns past n are masked on load and store.
 * Tuned on the models' shapes at one thread: 0.97 of the AVX-512 FMA peak on the CNN's
 * second convolution, less on wide products whose B block (1 MiB) outgrows L2.
 *
 * Sums: for each C element, the products over kk are added in order within a k block (one
 * FMA chain per accumulator lane), the first block's alpha * sum added to beta * C (or
 * stored alone when beta == 0, C unread), each later block's alpha * sum added to C. */
#include "train/gemm_avx512.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>


#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SL_GEMM512 1
#include <immintrin.h>
#endif

#define MR 12    /* rows of C per microkernel */
#define NR 32    /* columns of C per microkernel: two 16-float vectors */
#define KC 256   /* k per block: a panel (KC x NR floats, 32 KiB) stays in L1 */
#define NC 1024  /* columns per packed block of B (1 MiB) */
#define MC 96    /* rows of op(A) per pass over the panels (96 KiB at KC: stays in L2) */
#define WIDE 256 /* from this many columns on, a strip of op(A) meets every panel in turn */

#ifdef SL_GEMM512

/* ---- per-thread buffers: the packed B block and a 12-row strip of A ---- */

static pthread_key_t buf_key;
static pthread_once_t buf_once = PTHREAD_ONCE_INIT;
static int buf_key_ok;

static void buf_free(void *p) { free(p); }
static void buf_make_key(void) { buf_key_ok = pthread_key_create(&buf_key, buf_free) == 0; }

#define BP_FLOATS ((size_t)KC * NC)
#define STRIP_FLOATS ((size_t)KC * MR)
#define AP_FLOATS ((size_t)KC * MC)

static float *buffers(void) {
    pthread_once(&buf_once, buf_make_key);
    if (!buf_key_ok) return NULL;
    float *p = pthread_getspecific(buf_key);
    if (p) return p;
    p = aligned_alloc(64, (BP_FLOATS + STRIP_FLOATS + AP_FLOATS) * sizeof(float));
    if (!p) return NULL;
    if (pthread_setspecific(buf_key, p)) {
        free(p);
        return NULL;
    }
    return p;
}

/* ---- packing op(B): rows p0..p0+kc, columns j0..j0+nc into panels of NR ---- */

/* d[i * NR + r] = s[r * ld + i] for r, i < 8 */
__attribute__((target("avx2"))) static inline void transpose8(const float *s, int ld, float *d) {
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(s + (size_t)i * ld);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(d + (size_t)i * NR, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
        _mm256_storeu_ps(d + (size_t)(i + 4) * NR, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
    }
}

__attribute__((target("avx512f"))) static void pack_b(bool tb, const float *b, int ldb, int p0, int kc, int j0, int nc,
                                                      float *bp) {
    for (int jr = 0; jr < nc; jr += NR) {
        int nr = nc - jr < NR ? nc - jr : NR;
        float *d = bp + (size_t)jr * kc;
        if (!tb) {
            __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
            __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : (1u << (nr - 16)) - 1);
            for (int kk = 0; kk < kc; kk++) {
                const float *s = b + (size_t)(p0 + kk) * ldb + j0 + jr;
                float *o = d + (size_t)kk * NR;
                _mm512_store_ps(o, _mm512_maskz_loadu_ps(m0, s));
                _mm512_store_ps(o + 16, _mm512_maskz_loadu_ps(m1, s + 16));
            }
        } else { /* op(B)[kk][j] = b[j * ldb + kk]: column j of the panel is row j of b */
            if (nr < NR) memset(d, 0, (size_t)kc * NR * sizeof(float));
            const float *s = b + (size_t)(j0 + jr) * ldb + p0;
            int c8 = nr / 8 * 8, k8 = kc / 8 * 8;
            for (int c = 0; c < c8; c += 8) /* 8 x 8 blocks transposed in registers */
                for (int kk = 0; kk < k8; kk += 8) transpose8(s + (size_t)c * ldb + kk, ldb, d + (size_t)kk * NR + c);
            for (int c = 0; c < nr; c++)
                for (int kk = c < c8 ? k8 : 0; kk < kc; kk++) d[(size_t)kk * NR + c] = s[(size_t)c * ldb + kk];
        }
    }
}

/* mr (<= MR) rows of op(A), kc each, into a k-major strip zero-padded to MR rows:
 * d[kk * MR + r] = op(A)[r][kk]; a points at op(A)[0][0] (stored m x k, or k x m with ta) */
static void pack_strip(bool ta, const float *a, int lda, int mr, int kc, float *d) {
    if (mr < MR) memset(d, 0, (size_t)kc * MR * sizeof(float));
    if (ta) {
        for (int kk = 0; kk < kc; kk++) memcpy(d + (size_t)kk * MR, a + (size_t)kk * lda, (size_t)mr * sizeof(float));
        return;
    }
    for (int r = 0; r < mr; r++) {
        const float *s = a + (size_t)r * lda;
        for (int kk = 0; kk < kc; kk++) d[(size_t)kk * MR + r] = s[kk];
    }
}

/* ---- the microkernel ---- */

/* The 12 x 32 tile's sums over kc steps. Step kk's floats of op(A) are ak[r * RS], r < 12,
 * with ak = AK (an expression of kk; RS a compile-time constant or a loop invariant in each
 * caller below, so the addressing folds). */
#define KERNEL_LOOP(AK, RS)                                                                   \
    for (int kk = 0; kk < kc; kk++) {                                                         \
        const float *ak = (AK);                                                               \
        __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);                         \
        bp += NR;                                                                             \
        _Pragma("GCC unroll 12") for (int r = 0; r < MR; r++) {                               \
            __m512 x = _mm512_set1_ps(ak[(size_t)r * (RS)]);                                  \
            acc[2 * r] = _mm512_fmadd_ps(x, b0, acc[2 * r]);                                  \
            acc[2 * r + 1] = _mm512_fmadd_ps(x, b1, acc[2 * r + 1]);                          \
        }                                                                                     \
    }

/* C tile (mr x nr at c, row stride ldc) from the sums: first block: alpha * sum + beta * C
 * (C unread when beta == 0); later blocks: C + alpha * sum. */
__attribute__((target("avx512f"))) static inline void store_tile(__m512 *acc, float *c, int ldc, int mr, int nr,
                                                                  float alpha, float beta, bool first) {
    __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
    __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : (1u << (nr - 16)) - 1);
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int r = 0; r < mr; r++) {
        float *cr = c + (size_t)r * ldc;
        __m512 s0 = _mm512_mul_ps(va, acc[2 * r]), s1 = _mm512_mul_ps(va, acc[2 * r + 1]);
        if (!first || beta != 0.0f) {
            __m512 c0 = _mm512_maskz_loadu_ps(m0, cr), c1 = _mm512_maskz_loadu_ps(m1, cr + 16);
            if (first) {
                s0 = _mm512_add_ps(_mm512_mul_ps(vb, c0), s0);
                s1 = _mm512_add_ps(_mm512_mul_ps(vb, c1), s1);
            } else {
                s0 = _mm512_add_ps(c0, s0);
                s1 = _mm512_add_ps(c1, s1);
            }
        }
        _mm512_mask_storeu_ps(cr, m0, s0);
        _mm512_mask_storeu_ps(cr + 16, m1, s1);
    }
}

/* op(A) stored m x k: row r of the tile at a + r * lda, kk consecutive */
__attribute__((target("avx512f"))) static void kern_rows(int kc, const float *a, int lda, const float *bp, float *c,
                                                         int ldc, int nr, float alpha, float beta, bool first) {
    __m512 acc[2 * MR];
    for (int i = 0; i < 2 * MR; i++) acc[i] = _mm512_setzero_ps();
    const size_t L = (size_t)lda;
    KERNEL_LOOP(a + kk, L)
    store_tile(acc, c, ldc, MR, nr, alpha, beta, first);
}

/* op(A) stored k x m (or a packed strip, ld = MR): the tile's 12 floats of step kk adjacent
 * at a + kk * ld; mr of the 12 rows stored */
__attribute__((target("avx512f"))) static void kern_cols(int kc, const float *a, int ld, const float *bp, float *c,
                                                         int ldc, int mr, int nr, float alpha, float beta,
                                                         bool first) {
    __m512 acc[2 * MR];
    for (int i = 0; i < 2 * MR; i++) acc[i] = _mm512_setzero_ps();
    const size_t L = (size_t)ld;
    KERNEL_LOOP(a + (size_t)kk * L, 1)
    store_tile(acc, c, ldc, mr, nr, alpha, beta, first);
}

/* 12 rows of X (train/gemm_avx512.h), each at its own pointer: row r's step kk at p[r][off + kk] */
__attribute__((target("avx512f"))) static void kern_ptrs(int kc, const float *const *p, size_t off, const float *bp,
                                                         float *c, int ldc, int nr, float beta, bool first) {
    __m512 acc[2 * MR];
    for (int i = 0; i < 2 * MR; i++) acc[i] = _mm512_setzero_ps();
    const float *q0 = p[0] + off, *q1 = p[1] + off, *q2 = p[2] + off, *q3 = p[3] + off, *q4 = p[4] + off,
                *q5 = p[5] + off, *q6 = p[6] + off, *q7 = p[7] + off, *q8 = p[8] + off, *q9 = p[9] + off,
                *q10 = p[10] + off, *q11 = p[11] + off;
    for (int kk = 0; kk < kc; kk++) {
        __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);
        bp += NR;
#define ROW(i)                                                      \
    {                                                               \
        __m512 x = _mm512_set1_ps(q##i[kk]);                        \
        acc[2 * i] = _mm512_fmadd_ps(x, b0, acc[2 * i]);            \
        acc[2 * i + 1] = _mm512_fmadd_ps(x, b1, acc[2 * i + 1]);    \
    }
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5) ROW(6) ROW(7) ROW(8) ROW(9) ROW(10) ROW(11)
#undef ROW
    }
    store_tile(acc, c, ldc, MR, nr, 1.0f, beta, first);
}

/* 12 adjacent columns of X, one pointer per step: step kk's 12 floats at p[kk] + off */
__attribute__((target("avx512f"))) static void kern_cptr(int kc, const float *const *p, size_t off, const float *bp,
                                                         float *c, int ldc, int mr, int nr, float beta, bool first) {
    __m512 acc[2 * MR];
    for (int i = 0; i < 2 * MR; i++) acc[i] = _mm512_setzero_ps();
    KERNEL_LOOP(p[kk] + off, 1)
    store_tile(acc, c, ldc, mr, nr, 1.0f, beta, first);
}

bool sl__gemm512_available(void) { return __builtin_cpu_supports("avx512f"); }

#else

bool sl__gemm512_available(void) { return false; }

#endif

sl_status sl__gemm512(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                      int ldb, float beta, float *c, int ldc) {
    if (m < 0 || n < 0 || k < 0) return sl_err(SL_EINVAL, "gemm512: negative size %dx%dx%d", m, n, k);
    if (lda < (ta ? m : k) || ldb < (tb ? k : n) || ldc < n || lda < 1 || ldb < 1 || ldc < 1)
        return sl_err(SL_EINVAL, "gemm512: strides %d, %d, %d below the stored widths of a %dx%dx%d product", lda, ldb,
                      ldc, m, n, k);
    if (!sl__gemm512_available()) return sl_err(SL_EINVAL, "gemm512: this CPU has no AVX-512F");
    if (m == 0 || n == 0) return SL_OK;
    if (k == 0) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return SL_OK;
    }
#ifdef SL_GEMM512
    float *buf = buffers();
    if (!buf) return sl_err(SL_ENOMEM, "gemm512: out of memory for the packing buffers");
    float *bp = buf, *strip = buf + BP_FLOATS, *ap = strip + STRIP_FLOATS;
    for (int j0 = 0; j0 < n; j0 += NC) {
        int nc = n - j0 < NC ? n - j0 : NC;
        for (int p0 = 0; p0 < k; p0 += KC) {
            int kc = k - p0 < KC ? k - p0 : KC;
            bool first = p0 == 0;
            pack_b(tb, b, ldb, p0, kc, j0, nc, bp);
            if (nc >= WIDE) { /* each 12-row strip of op(A) (in L1) against every panel (in L2) */
                for (int i0 = 0; i0 < m; i0 += MR) {
                    int mr = m - i0 < MR ? m - i0 : MR;
                    const float *as = a + (ta ? (size_t)p0 * lda + i0 : (size_t)i0 * lda + p0);
                    int ld = lda;
                    if (!ta || mr < MR) { /* k-major and zero-padded: no L1 aliasing, no read past A */
                        pack_strip(ta, as, lda, mr, kc, strip);
                        as = strip;
                        ld = MR;
                    }
                    for (int jr = 0; jr < nc; jr += NR) {
                        int nr = nc - jr < NR ? nc - jr : NR;
                        kern_cols(kc, as, ld, bp + (size_t)jr * kc, c + (size_t)i0 * ldc + j0 + jr, ldc, mr, nr,
                                  alpha, beta, first);
                    }
                }
                continue;
            }
            /* few panels: MC rows of op(A) at a time (in L2) against each panel in turn (in L1);
             * op(A) stored m x k is read where it lies unless its row stride is a multiple of
             * 1 KiB (12 rows would share one L1 set) */
            bool pack = !ta && lda % 256 == 0;
            for (int i1 = 0; i1 < m; i1 += MC) {
                int mc = m - i1 < MC ? m - i1 : MC, full = mc / MR * MR, mr = mc - full;
                if (pack)
                    for (int q = 0; q < full; q += MR)
                        pack_strip(false, a + (size_t)(i1 + q) * lda + p0, lda, MR, kc, ap + (size_t)q * kc);
                if (mr)
                    pack_strip(ta, a + (ta ? (size_t)p0 * lda + i1 + full : (size_t)(i1 + full) * lda + p0), lda, mr,
                               kc, strip);
                for (int jr = 0; jr < nc; jr += NR) {
                    int nr = nc - jr < NR ? nc - jr : NR;
                    const float *panel = bp + (size_t)jr * kc;
                    for (int i0 = i1; i0 < i1 + full; i0 += MR) {
                        float *ct = c + (size_t)i0 * ldc + j0 + jr;
                        if (pack)
                            kern_cols(kc, ap + (size_t)(i0 - i1) * kc, MR, panel, ct, ldc, MR, nr, alpha, beta, first);
                        else if (ta)
                            kern_cols(kc, a + (size_t)p0 * lda + i0, lda, panel, ct, ldc, MR, nr, alpha, beta, first);
                        else
                            kern_rows(kc, a + (size_t)i0 * lda + p0, lda, panel, ct, ldc, nr, alpha, beta, first);
                    }
                    if (mr)
                        kern_cols(kc, strip, MR, panel, c + (size_t)(i1 + full) * ldc + j0 + jr, ldc, mr, nr, alpha,
                                  beta, first);
                }
            }
        }
    }
    return SL_OK;
#else
    (void)ta, (void)tb, (void)alpha, (void)a, (void)b;
    return sl_err(SL_EINVAL, "gemm512: not built for this target");
#endif
}

/* ---- products with the rows of X at pointers (convolutions without im2col) ---- */

static sl_status x_check(const char *op, int m, int n, int nseg, int seg, int ld, int ldc) {
    if (m < 0 || n < 0 || nseg < 1 || seg < 1 || (size_t)nseg * seg > INT32_MAX)
        return sl_err(SL_EINVAL, "%s: bad size: %d rows, %d columns, %d runs of %d", op, m, n, nseg, seg);
    if (ld < n || ldc < n || ld < 1 || ldc < 1)
        return sl_err(SL_EINVAL, "%s: strides %d, %d below the width %d", op, ld, ldc, n);
    if (!sl__gemm512_available()) return sl_err(SL_EINVAL, "%s: this CPU has no AVX-512F", op);
    return SL_OK;
}

#ifdef SL_GEMM512
/* the mr (< 12) or straddling rows' floats of one block, k-major and zero-padded to 12:
 * d[kk * MR + r] = at(r, kk) */
#define GATHER_STRIP(d, kc, mr, AT)                                                           \
    do {                                                                                      \
        memset((d), 0, (size_t)(kc) * MR * sizeof(float));                                    \
        for (int kk = 0; kk < (kc); kk++)                                                     \
            for (int r = 0; r < (mr); r++) (d)[(size_t)kk * MR + r] = (AT);                   \
    } while (0)
#endif

sl_status sl__gemm512_xw(int m, int n, int nseg, int seg, const float *const *rows, size_t sstride, const float *b,
                         int ldb, float beta, float *c, int ldc) {
    sl_status st = x_check("gemm512_xw", m, n, nseg, seg, ldb, ldc);
    if (st || m == 0 || n == 0) return st;
#ifdef SL_GEMM512
    float *buf = buffers();
    if (!buf) return sl_err(SL_ENOMEM, "gemm512_xw: out of memory for the packing buffers");
    float *bp = buf, *strip = buf + BP_FLOATS;
    for (int j0 = 0; j0 < n; j0 += NC) {
        int nc = n - j0 < NC ? n - j0 : NC;
        for (int s = 0; s < nseg; s++)
            for (int p = 0; p < seg; p += KC) {
                int kc = seg - p < KC ? seg - p : KC;
                bool first = s == 0 && p == 0;
                size_t off = (size_t)s * sstride + (size_t)p;
                pack_b(false, b, ldb, s * seg + p, kc, j0, nc, bp);
                /* 12 rows of X (their runs in L1) against every panel (in L2) */
                for (int i0 = 0; i0 < m; i0 += MR) {
                    int mr = m - i0 < MR ? m - i0 : MR;
                    if (mr < MR) GATHER_STRIP(strip, kc, mr, rows[i0 + r][off + (size_t)kk]);
                    for (int jr = 0; jr < nc; jr += NR) {
                        int nr = nc - jr < NR ? nc - jr : NR;
                        float *ct = c + (size_t)i0 * ldc + j0 + jr;
                        if (mr == MR)
                            kern_ptrs(kc, rows + i0, off, bp + (size_t)jr * kc, ct, ldc, nr, beta, first);
                        else
                            kern_cols(kc, strip, MR, bp + (size_t)jr * kc, ct, ldc, mr, nr, 1.0f, beta, first);
                    }
                }
            }
    }
    return SL_OK;
#else
    (void)sstride, (void)rows, (void)b, (void)beta, (void)c;
    return sl_err(SL_EINVAL, "gemm512_xw: not built for this target");
#endif
}

sl_status sl__gemm512_xtd(int m, int n, int nseg, int seg, const float *const *rows, size_t sstride,
                          const float *d, int ldd, int r0, int r1, float beta, float *c, int ldc) {
    sl_status st = x_check("gemm512_xtd", m, n, nseg, seg, ldd, ldc);
    if (st) return st;
    if (r0 < 0 || r1 < r0 || r1 > nseg * seg)
        return sl_err(SL_EINVAL, "gemm512_xtd: rows %d..%d outside the %d of X^T", r0, r1, nseg * seg);
    if (n == 0 || r0 == r1) return SL_OK;
    if (m == 0) {
        for (int i = r0; i < r1; i++)
            for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return SL_OK;
    }
#ifdef SL_GEMM512
    float *buf = buffers();
    if (!buf) return sl_err(SL_ENOMEM, "gemm512_xtd: out of memory for the packing buffers");
    float *bp = buf, *strip = buf + BP_FLOATS;
    for (int j0 = 0; j0 < n; j0 += NC) {
        int nc = n - j0 < NC ? n - j0 : NC;
        for (int p0 = 0; p0 < m; p0 += KC) {
            int kc = m - p0 < KC ? m - p0 : KC;
            bool first = p0 == 0;
            const float *const *rp = rows + p0;
            pack_b(false, d, ldd, p0, kc, j0, nc, bp);
            for (int g0 = r0; g0 < r1; g0 += MR) {
                int mr = r1 - g0 < MR ? r1 - g0 : MR, s = g0 / seg, j = g0 % seg;
                bool inside = mr == MR && j + MR <= seg; /* 12 adjacent floats of one run */
                if (!inside) {
                    size_t at[MR]; /* where row g0 + r of X^T lies in X's row */
                    for (int r = 0; r < mr; r++) at[r] = (size_t)((g0 + r) / seg) * sstride + (size_t)((g0 + r) % seg);
                    GATHER_STRIP(strip, kc, mr, rp[kk][at[r]]);
                }
                for (int jr = 0; jr < nc; jr += NR) {
                    int nr = nc - jr < NR ? nc - jr : NR;
                    float *ct = c + (size_t)g0 * ldc + j0 + jr;
                    if (inside)
                        kern_cptr(kc, rp, (size_t)s * sstride + (size_t)j, bp + (size_t)jr * kc, ct, ldc, MR, nr, beta,
                                  first);
                    else
                        kern_cols(kc, strip, MR, bp + (size_t)jr * kc, ct, ldc, mr, nr, 1.0f, beta, first);
                }
            }
        }
    }
    return SL_OK;
#else
    (void)sstride, (void)rows, (void)d, (void)beta, (void)c;
    return sl_err(SL_EINVAL, "gemm512_xtd: not built for this target");
#endif
}
