/* Shared by the image functions: image shapes, the bilinear resampler, and the crop
 * geometry of random_resized_crop / center_crop / resize (also used by decode_jpeg when it
 * absorbs one of them, so the fused and unfused paths pick the same rectangle).
 *
 * Workload: the resampler is on the hot path of an ImageNet-style pipeline — one call per
 * image, typically a few hundred pixels square in and 224 x 224 x 3 out. It precomputes a
 * table of source offsets and weights for the columns and for the rows. Growing rows, it
 * interpolates each needed source row horizontally once into a float row (two rows are
 * cached: neighbouring output rows share source rows), then blends the two rows of each
 * output row. Shrinking rows (the usual crop-then-shrink case), rows are rarely shared, so
 * it blends the two source rows first — contiguous and vectorized — and then interpolates
 * that one float row horizontally, gathering once per output sample (3-channel pixels two
 * per AVX2 step, or one per 4-wide SSE blend). Everything is computed in float in one
 * fixed order, so the result depends only on the inputs, never on the thread or the
 * instruction set. Given a row sink (decode_jpeg's fused path), each finished row of float
 * results goes to the sink, before the rounding, instead of into an image; for a sink that
 * takes its rows mirrored, random_flip's row operation first mirrors the column tables. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/fn/image.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* The row loops below are simple enough for the auto-vectorizer, which -O2 (gcc 12) runs
 * only with its "very cheap" cost model; ask for the full one here. The arithmetic is the
 * same either way (no reassociation, no contraction), so results do not change. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif

sl_status sl__image_shape(const sl_fn *fn, const char *comp, const sl_tensor *t, int64_t *h,
                          int64_t *w, int64_t *c) {
    char d[96];
    if (t->rank != 2 && t->rank != 3)
        return sl_err(SL_EINVAL, "'%s' is %s; an image must be [height, width, channels] or "
                      "[height, width]", comp, sl_tensor_describe(t, d, sizeof d));
    *h = t->dims[0];
    *w = t->dims[1];
    *c = t->rank == 3 ? t->dims[2] : 1;
    if (*h <= 0 || *w <= 0 || *c <= 0)
        return sl_err(SL_EINVAL, "'%s' is an empty image (%s)", comp,
                      sl_tensor_describe(t, d, sizeof d));
    (void)fn;
    return SL_OK;
}

const sl_tensor *sl__fn_image_input(const sl_fn *fn, const sl_element *e, const char *comp,
                                    int64_t *h, int64_t *w, int64_t *c, sl_status *s) {
    int ci = sl__fn_component(fn, e, comp, s);
    if (ci < 0) return NULL;
    const sl_tensor *t = &e->t[ci];
    if ((*s = sl__image_shape(fn, comp, t, h, w, c)) || (*s = sl__need_numeric(comp, t))) return NULL;
    return t;
}

/* ---- the resampler ---- */

typedef struct {
    int64_t o0, o1; /* element offsets of the two source samples */
    float w0, w1;   /* their weights */
} tap;

/* The bilinear samples of output d on an axis of sn samples: its source coordinate
 * r0 + (d + 0.5) * scale - 0.5, clamped below at 0, lies between samples *i0 and *i1 (both
 * the last one at or past it); returns how far it lies from *i0 toward *i1 (0 when equal). */
static inline float bilinear_at(int64_t d, int64_t sn, double r0, double scale, int64_t *i0,
                                int64_t *i1) {
    double src = r0 + ((double)d + 0.5) * scale - 0.5;
    if (src < 0) src = 0;
    *i0 = (int64_t)src;
    if (*i0 > sn - 1) *i0 = sn - 1;
    *i1 = *i0 < sn - 1 ? *i0 + 1 : *i0;
    return *i1 == *i0 ? 0.0f : (float)(src - (double)*i0);
}

/* One axis: output d (of dn) samples source coordinate r0 + (d + 0.5) * rn / dn - 0.5 of
 * sn samples `step` elements apart. */
static void make_taps(tap *t, int64_t dn, int64_t sn, double r0, double rn, int64_t step) {
    double scale = rn / (double)dn;
    for (int64_t d = 0; d < dn; d++) {
        int64_t i0, i1;
        float l = bilinear_at(d, sn, r0, scale, &i0, &i1);
        t[d].o0 = i0 * step;
        t[d].o1 = i1 * step;
        t[d].w1 = l;
        t[d].w0 = 1.0f - l;
    }
}

/* Is the region an integer-aligned window of the output's size? Then resampling is a copy
 * (and must be one: 1 * a + 0 * b is not a for an infinite b). */
static bool is_plain_window(double ry, double rx, double rh, double rw, int64_t dh, int64_t dw) {
    return rh == (double)dh && rw == (double)dw && ry == floor(ry) && rx == floor(rx);
}

#define HROW(T)                                                                             \
    static void hrow_##T(const T *s, const tap *tx, int64_t dw, int64_t c, float *out) {    \
        if (c == 3) {                                                                       \
            for (int64_t x = 0; x < dw; x++) {                                              \
                const T *a = s + tx[x].o0, *b = s + tx[x].o1;                               \
                float w0 = tx[x].w0, w1 = tx[x].w1;                                         \
                out[3 * x + 0] = w0 * (float)a[0] + w1 * (float)b[0];                       \
                out[3 * x + 1] = w0 * (float)a[1] + w1 * (float)b[1];                       \
                out[3 * x + 2] = w0 * (float)a[2] + w1 * (float)b[2];                       \
            }                                                                               \
        } else if (c == 1) {                                                                \
            for (int64_t x = 0; x < dw; x++)                                                \
                out[x] = tx[x].w0 * (float)s[tx[x].o0] + tx[x].w1 * (float)s[tx[x].o1];     \
        } else {                                                                            \
            for (int64_t x = 0; x < dw; x++) {                                              \
                const T *a = s + tx[x].o0, *b = s + tx[x].o1;                               \
                for (int64_t k = 0; k < c; k++)                                             \
                    out[c * x + k] = tx[x].w0 * (float)a[k] + tx[x].w1 * (float)b[k];       \
            }                                                                               \
        }                                                                                   \
    }
HROW(uint8_t)
HROW(float)

/* hrow_float for a source with one readable float past its last element and an output with
 * room for one float past its row (the shrinking path's own buffers): a 3-channel pixel is
 * one 4-wide SSE blend, whose fourth lane the next pixel overwrites. The same float products
 * and sum as the scalar loop, so the same values. */
static void hrow_padded(const float *s, const tap *tx, int64_t dw, int64_t c, float *out) {
#if defined(__SSE2__)
    if (c == 3) {
        for (int64_t x = 0; x < dw; x++) {
            __m128 a = _mm_loadu_ps(s + tx[x].o0), b = _mm_loadu_ps(s + tx[x].o1);
            __m128 v = _mm_add_ps(_mm_mul_ps(_mm_set1_ps(tx[x].w0), a), _mm_mul_ps(_mm_set1_ps(tx[x].w1), b));
            _mm_storeu_ps(out + 3 * x, v);
        }
        return;
    }
#endif
    hrow_float(s, tx, dw, c, out);
}

/* One source row horizontally into out (which has room for one float past its row): the
 * growing path's hrow_uint8_t, with each 3-channel pixel one 4-wide SSE blend (its fourth
 * lane overwritten by the next pixel) while the fourth byte read stays inside the row's
 * sn elements; the rest, and other channel counts, as hrow_uint8_t. Same values. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("avx2"))) static void hrow3_u8_avx2(const uint8_t *s, const tap *tx,
                                                          const float *pw, int64_t dw,
                                                          int64_t sn, float *out);
#endif
static void hrow_row_uint8_t(const uint8_t *s, const tap *tx, const float *pw, int64_t dw, int64_t c,
                             int64_t sn, float *out) {
    int64_t x = 0;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if (pw) { /* (3 channels with AVX2: pair_weights) */
        hrow3_u8_avx2(s, tx, pw, dw, sn, out);
        return;
    }
#endif
    (void)pw;
#if defined(__SSE2__)
    if (c == 3) {
        const __m128i z = _mm_setzero_si128();
        for (; x < dw; x++) {
            if (tx[x].o0 + 3 >= sn || tx[x].o1 + 3 >= sn) { /* a fourth byte past the row */
                hrow_uint8_t(s, tx + x, 1, c, out + c * x);
                continue;
            }
            int32_t pa, pb;
            memcpy(&pa, s + tx[x].o0, 4);
            memcpy(&pb, s + tx[x].o1, 4);
            __m128 a = _mm_cvtepi32_ps(_mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(pa), z), z));
            __m128 b = _mm_cvtepi32_ps(_mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(pb), z), z));
            __m128 v = _mm_add_ps(_mm_mul_ps(_mm_set1_ps(tx[x].w0), a), _mm_mul_ps(_mm_set1_ps(tx[x].w1), b));
            _mm_storeu_ps(out + 3 * x, v);
        }
    }
#endif
    (void)sn;
    if (x < dw) hrow_uint8_t(s, tx + x, dw - x, c, out + c * x);
}

static void hrow_row_float(const float *s, const tap *tx, const float *pw, int64_t dw, int64_t c,
                           int64_t sn, float *out) {
    (void)sn;
    (void)pw;
    hrow_float(s, tx, dw, c, out);
}

/* tmp[i] = w0 * a[i] + w1 * b[i] over n samples: the shrinking path's row blend, the
 * resampler's widest loop. On x86-64 with GCC there is also an AVX2 build of it, picked at
 * the first call where the CPU has it: 8 lanes instead of 4, the same products and sums
 * (AVX2 does not bring FMA, so nothing is contracted), the same values. Picked by hand, not
 * by target_clones: its IFUNC resolver runs before ThreadSanitizer's runtime is up and
 * crashes every program of a TSan build at start. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <stdatomic.h>
bool sl__cpu_has_avx2(void) {
    static atomic_int known = -1; /* -1: not asked yet; asking twice gives the same answer */
    int k = atomic_load_explicit(&known, memory_order_relaxed);
    if (k < 0) {
        __builtin_cpu_init();
        k = __builtin_cpu_supports("avx2") != 0;
        atomic_store_explicit(&known, k, memory_order_relaxed);
    }
    return k;
}
#define BLEND(T)                                                                            \
    static void blend_plain_##T(const T *a, const T *b, float w0, float w1, int64_t n,      \
                                float *tmp) {                                               \
        for (int64_t i = 0; i < n; i++) tmp[i] = w0 * (float)a[i] + w1 * (float)b[i];       \
    }                                                                                       \
    __attribute__((target("avx2"))) static void blend_avx2_##T(const T *a, const T *b,      \
                                                               float w0, float w1,          \
                                                               int64_t n, float *tmp) {     \
        for (int64_t i = 0; i < n; i++) tmp[i] = w0 * (float)a[i] + w1 * (float)b[i];       \
    }                                                                                       \
    static void blend_##T(const T *a, const T *b, float w0, float w1, int64_t n, float *tmp) { \
        if (sl__cpu_has_avx2()) blend_avx2_##T(a, b, w0, w1, n, tmp);                       \
        else blend_plain_##T(a, b, w0, w1, n, tmp);                                         \
    }
#else
bool sl__cpu_has_avx2(void) { return false; }
#define BLEND(T)                                                                            \
    static void blend_##T(const T *a, const T *b, float w0, float w1, int64_t n, float *tmp) { \
        for (int64_t i = 0; i < n; i++) tmp[i] = w0 * (float)a[i] + w1 * (float)b[i];       \
    }
#endif
BLEND(uint8_t)
BLEND(float)

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
/* hrow_padded for 3 channels, two output pixels per 8-lane step: pw holds each pair's
 * weights (w0 of the first pixel 4 times, of the second 4 times, then both w1 likewise),
 * from pair_weights. The same products and sums per lane as hrow_padded; the fourth lane
 * of each pixel lands on the next pixel's first value, written after it (out has room for
 * one float past its row, s one readable float past its last element). */
__attribute__((target("avx2"))) static void hrow3_avx2(const float *s, const tap *tx,
                                                       const float *pw, int64_t dw, float *out) {
    int64_t x = 0;
    for (; x + 2 <= dw; x += 2, pw += 16) {
        __m256 a = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(s + tx[x].o0)),
                                        _mm_loadu_ps(s + tx[x + 1].o0), 1);
        __m256 b = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(s + tx[x].o1)),
                                        _mm_loadu_ps(s + tx[x + 1].o1), 1);
        __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(pw), a),
                                 _mm256_mul_ps(_mm256_loadu_ps(pw + 8), b));
        _mm_storeu_ps(out + 3 * x, _mm256_castps256_ps128(v));
        _mm_storeu_ps(out + 3 * x + 3, _mm256_extractf128_ps(v, 1));
    }
    if (x < dw) {
        __m128 a = _mm_loadu_ps(s + tx[x].o0), b = _mm_loadu_ps(s + tx[x].o1);
        _mm_storeu_ps(out + 3 * x, _mm_add_ps(_mm_mul_ps(_mm_set1_ps(tx[x].w0), a),
                                              _mm_mul_ps(_mm_set1_ps(tx[x].w1), b)));
    }
}

/* hrow_row_uint8_t for 3 channels, two output pixels per 8-lane step (pw as for
 * hrow3_avx2): each pixel's 4 bytes widened to floats; a pair whose fourth byte would lie
 * past the row's sn elements goes through hrow_uint8_t. Same values. */
__attribute__((target("avx2"))) static void hrow3_u8_avx2(const uint8_t *s, const tap *tx,
                                                          const float *pw, int64_t dw,
                                                          int64_t sn, float *out) {
    int64_t x = 0;
    for (; x + 2 <= dw; x += 2, pw += 16) {
        const tap *t = tx + x;
        if (t[0].o0 + 3 >= sn || t[0].o1 + 3 >= sn || t[1].o0 + 3 >= sn || t[1].o1 + 3 >= sn) {
            hrow_uint8_t(s, t, 2, 3, out + 3 * x);
            continue;
        }
        uint32_t a0, a1, b0, b1;
        memcpy(&a0, s + t[0].o0, 4);
        memcpy(&a1, s + t[1].o0, 4);
        memcpy(&b0, s + t[0].o1, 4);
        memcpy(&b1, s + t[1].o1, 4);
        __m256 a = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)(a0 | (uint64_t)a1 << 32))));
        __m256 b = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)(b0 | (uint64_t)b1 << 32))));
        __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(pw), a),
                                 _mm256_mul_ps(_mm256_loadu_ps(pw + 8), b));
        _mm_storeu_ps(out + 3 * x, _mm256_castps256_ps128(v));
        _mm_storeu_ps(out + 3 * x + 3, _mm256_extractf128_ps(v, 1));
    }
    if (x < dw) hrow_uint8_t(s, tx + x, dw - x, 3, out + 3 * x);
}
#endif

/* hrow3_avx2's weights for taps tx (dw outputs): a new array, or NULL where that path does
 * not apply (not 3 channels, no AVX2, no memory: hrow_padded then does the row). */
static float *pair_weights(const tap *tx, int64_t dw, int64_t c) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if (c != 3 || !sl__cpu_has_avx2()) return NULL;
    float *pw = malloc(sizeof(float) * 16 * (size_t)((dw + 1) / 2));
    if (!pw) return NULL;
    for (int64_t x = 0; x < dw; x++) {
        float *p = pw + 16 * (x / 2) + 4 * (x % 2);
        for (int k = 0; k < 4; k++) {
            p[k] = tx[x].w0;
            p[8 + k] = tx[x].w1;
        }
    }
    return pw;
#else
    (void)tx;
    (void)dw;
    (void)c;
    return NULL;
#endif
}

/* One row through the taps: hrow3_avx2 with pw, else hrow_padded. */
static void hrow_fast(const float *s, const tap *tx, const float *pw, int64_t dw, int64_t c, float *out) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if (pw) {
        hrow3_avx2(s, tx, pw, dw, out);
        return;
    }
#endif
    (void)pw;
    hrow_padded(s, tx, dw, c, out);
}

/* The two float row buffers and which source rows they hold. */
typedef struct {
    float *buf[2];
    int64_t key[2];
} row_cache;

/* The slot holding source row r, computing it (into the slot not holding `keep`) if needed. */
#define GET_ROW(T)                                                                          \
    static float *get_row_##T(row_cache *rc, int64_t r, int64_t keep, const T *src,         \
                              int64_t stride, const tap *tx, const float *pw, int64_t dw,   \
                              int64_t c, int64_t sn) {                                      \
        for (int k = 0; k < 2; k++)                                                         \
            if (rc->key[k] == r) return rc->buf[k];                                         \
        int k = rc->key[0] == keep ? 1 : 0;                                                 \
        hrow_row_##T(src + r * stride, tx, pw, dw, c, sn, rc->buf[k]);                      \
        rc->key[k] = r;                                                                     \
        return rc->buf[k];                                                                  \
    }
GET_ROW(uint8_t)
GET_ROW(float)

/* Mirror a table of dw entries of `each` bytes (one per output column) for a sink that
 * takes its rows mirrored: random_flip's row operation on it. */
static sl_status mirror_columns(void *t, int64_t dw, size_t each) {
    uint8_t *m = malloc(each * (size_t)dw);
    if (!m) return sl_err(SL_ENOMEM, "out of memory resizing to a width of %lld", (long long)dw);
    sl__row_flip(t, m, dw, each, true);
    memcpy(t, m, each * (size_t)dw);
    free(m);
    return SL_OK;
}

/* Output row y of the bodies below, made in float at v: handed to the sink, or stored
 * (STORE) into its row of dst. */
#define ROW_OUT(T, STORE, y, v)                                                             \
    if (sink) {                                                                             \
        sink->row(sink->ctx, (y), (v));                                                     \
    } else {                                                                                \
        T *o = dst + (y) * n;                                                               \
        for (int64_t i = 0; i < n; i++) o[i] = STORE((v)[i]);                               \
    }

/* The 2-tap resampler (sl__resample_u8 and sl__resample_f32 without antialias, or with it
 * when nothing shrinks). With a sink, each row of float results goes to it instead. */
#define RESIZE_BODY(T, STORE)                                                               \
    if (!sink && is_plain_window(ry, rx, rh, rw, dh, dw) && ry >= 0 && rx >= 0 &&           \
        (int64_t)ry + dh <= sh && (int64_t)rx + dw <= sw) {                                 \
        for (int64_t y = 0; y < dh; y++)                                                    \
            memcpy(dst + y * dw * c, src + ((int64_t)ry + y) * stride + (int64_t)rx * c,    \
                   (size_t)(dw * c) * sizeof(T));                                           \
        return SL_OK;                                                                       \
    }                                                                                       \
    tap *tx = malloc(sizeof(tap) * (size_t)(dw + dh));                                      \
    float *rows = malloc(sizeof(float) * 3 * (size_t)(dw * c + 1)); /* 2 + a sink's row */  \
    if (!tx || !rows) {                                                                     \
        free(tx);                                                                           \
        free(rows);                                                                         \
        return sl_err(SL_ENOMEM, "out of memory resizing to %lldx%lld", (long long)dh,      \
                      (long long)dw);                                                       \
    }                                                                                       \
    tap *ty = tx + dw;                                                                      \
    make_taps(tx, dw, sw, rx, rw, c);                                                       \
    make_taps(ty, dh, sh, ry, rh, 1);                                                       \
    sl_status s = sink && sink->mirror ? mirror_columns(tx, dw, sizeof(tap)) : SL_OK;       \
    if (s) {                                                                                \
        free(tx);                                                                           \
        free(rows);                                                                         \
        return s;                                                                           \
    }                                                                                       \
    int64_t n = dw * c;                                                                     \
    if (rh > (double)dh) { /* shrinking rows: blend rows first, then gather columns once */  \
        int64_t lo = tx[0].o0, hi = tx[0].o1; /* the source elements a row needs */         \
        for (int64_t x = 1; x < dw; x++) {                                                  \
            if (tx[x].o0 < lo) lo = tx[x].o0;                                               \
            if (tx[x].o1 > hi) hi = tx[x].o1;                                               \
        }                                                                                   \
        hi += c;                                                                            \
        float *tmp = malloc(sizeof(float) * (size_t)(hi - lo + 1)); /* + hrow_padded's */   \
        if (!tmp) {                                                                         \
            free(tx);                                                                       \
            free(rows);                                                                     \
            return sl_err(SL_ENOMEM, "out of memory resizing");                             \
        }                                                                                   \
        for (int64_t x = 0; x < dw; x++) { /* column offsets relative to tmp */             \
            tx[x].o0 -= lo;                                                                 \
            tx[x].o1 -= lo;                                                                 \
        }                                                                                   \
        tmp[hi - lo] = 0;                                                                   \
        float *pw = pair_weights(tx, dw, c);                                                \
        for (int64_t y = 0; y < dh; y++) {                                                  \
            const T *a = src + ty[y].o0 * stride + lo, *b = src + ty[y].o1 * stride + lo;   \
            float w0 = ty[y].w0, w1 = ty[y].w1;                                             \
            blend_##T(a, b, w0, w1, hi - lo, tmp);                                          \
            hrow_fast(tmp, tx, pw, dw, c, rows);                                            \
            ROW_OUT(T, STORE, y, rows)                                                      \
        }                                                                                   \
        free(pw);                                                                           \
        free(tmp);                                                                          \
        free(tx);                                                                           \
        free(rows);                                                                         \
        return SL_OK;                                                                       \
    }                                                                                       \
    float *pw = sizeof(T) == 1 ? pair_weights(tx, dw, c) : NULL;                            \
    row_cache rc = {{rows, rows + dw * c + 1}, {-1, -1}};                                   \
    for (int64_t y = 0; y < dh; y++) {                                                      \
        int64_t r0 = ty[y].o0, r1 = ty[y].o1;                                               \
        const float *a = get_row_##T(&rc, r0, r1, src, stride, tx, pw, dw, c, sw * c);      \
        const float *b = get_row_##T(&rc, r1, r0, src, stride, tx, pw, dw, c, sw * c);      \
        float w0 = ty[y].w0, w1 = ty[y].w1;                                                 \
        if (sink) {                                                                         \
            float *v = rows + 2 * (dw * c + 1);                                             \
            blend_float(a, b, w0, w1, n, v);                                                \
            sink->row(sink->ctx, y, v);                                                     \
            continue;                                                                       \
        }                                                                                   \
        T *o = dst + y * n;                                                                 \
        for (int64_t i = 0; i < n; i++) o[i] = STORE(w0 * a[i] + w1 * b[i]);                \
    }                                                                                       \
    free(pw);                                                                               \
    free(tx);                                                                               \
    free(rows);                                                                             \
    return SL_OK;

#define AS_F32(v) (v)

/* ---- the antialiased resampler ---- */

/* One axis of the antialiased resampler: for each output d, the first source sample
 * start[d], the number of taps n[d] (at most kmax) and their weights wt[d * kmax + k].
 * Shrinking (rn > dn) with antialias, the weights are PIL's / torchvision's antialiased
 * bilinear: a triangle of half-width s = rn / dn centred on r0 + (d + 0.5) * s, over the
 * samples j in [floor(centre - s + 0.5), floor(centre + s + 0.5)) clipped to the image, each
 * weighted tri((j + 0.5 - centre) / s), normalized to sum 1 (in double, then stored as
 * float). Otherwise the two taps of make_taps. */
typedef struct {
    int64_t *start;
    int *n;
    float *wt;
    int kmax;
} kernel;

static void kernel_free(kernel *k) {
    free(k->start);
    free(k->n);
    free(k->wt);
}

static sl_status make_kernel(kernel *k, int64_t dn, int64_t sn, double r0, double rn, bool aa, bool pad) {
    double scale = rn / (double)dn;
    bool wide = aa && scale > 1.0;
    k->kmax = wide ? 2 * (int)ceil(scale) + 1 : 2;
    if (k->kmax > sn) k->kmax = (int)sn;
    k->start = malloc(sizeof(int64_t) * (size_t)dn);
    k->n = malloc(sizeof(int) * (size_t)dn);
    k->wt = malloc(sizeof(float) * (size_t)dn * (size_t)k->kmax);
    if (!k->start || !k->n || !k->wt) {
        kernel_free(k);
        return sl_err(SL_ENOMEM, "out of memory for the resize tables (%lld outputs)", (long long)dn);
    }
    for (int64_t d = 0; d < dn; d++) {
        float *w = k->wt + d * k->kmax;
        if (!wide) {
            /* make_taps' samples, so an axis that grows is plain bilinear */
            int64_t i0, i1;
            float l = bilinear_at(d, sn, r0, scale, &i0, &i1);
            k->start[d] = i0;
            k->n[d] = i1 == i0 ? 1 : 2;
            w[0] = i1 == i0 ? 1.0f : 1.0f - l;
            if (i1 != i0) w[1] = l; /* (kmax is 1 for a one-sample axis) */
            continue;
        }
        double centre = r0 + ((double)d + 0.5) * scale;
        int64_t lo = (int64_t)floor(centre - scale + 0.5), hi = (int64_t)floor(centre + scale + 0.5);
        if (lo < 0) lo = 0;
        if (hi > sn) hi = sn;
        if (hi - lo > k->kmax) hi = lo + k->kmax; /* (cannot happen: the span is < 2s + 1) */
        double ww[64], sum = 0;
        double *wp = hi - lo <= 64 ? ww : NULL;
        double *heap = NULL;
        if (!wp) wp = heap = malloc(sizeof(double) * (size_t)(hi - lo));
        if (!wp) {
            kernel_free(k);
            return sl_err(SL_ENOMEM, "out of memory for the resize tables");
        }
        for (int64_t j = lo; j < hi; j++) {
            double x = fabs(((double)j + 0.5 - centre) / scale);
            wp[j - lo] = x < 1.0 ? 1.0 - x : 0.0;
            sum += wp[j - lo];
        }
        if (hi <= lo || sum <= 0) { /* the window missed every sample: take the nearest */
            int64_t j = (int64_t)floor(centre);
            if (j < 0) j = 0;
            if (j > sn - 1) j = sn - 1;
            k->start[d] = j;
            k->n[d] = 1;
            w[0] = 1.0f;
        } else {
            k->start[d] = lo;
            k->n[d] = (int)(hi - lo);
            for (int64_t j = lo; j < hi; j++) w[j - lo] = (float)(wp[j - lo] / sum);
        }
        free(heap);
    }
    if (pad) /* every output kmax taps (zero weights after its own, start moved left where
              * needed to stay inside the source): fixed-length inner loops. Only for finite
              * inputs (uint8): 0 * inf would be NaN. */
        for (int64_t d = 0; d < dn; d++) {
            float *w = k->wt + d * k->kmax;
            int n = k->n[d];
            int64_t st = k->start[d];
            int64_t nst = st + k->kmax > sn ? sn - k->kmax : st;
            int off = (int)(st - nst);
            for (int i = n - 1; i >= 0; i--) w[i + off] = w[i];
            for (int i = 0; i < off; i++) w[i] = 0.0f;
            for (int i = off + n; i < k->kmax; i++) w[i] = 0.0f;
            k->start[d] = nst;
            k->n[d] = k->kmax;
        }
    return SL_OK;
}

/* Rows first (each output row is a weighted sum of source rows over the columns the
 * horizontal taps need, contiguous and vectorized), then columns (a weighted gather per
 * output sample). Accumulation is in float in a fixed order. */
/* (A blend of uint8 samples needs no clamp before sl__round_u8: see there.) */
#define RESIZE_AA_BODY(T, STORE, PAD)                                                       \
    int64_t n = dw * c;                                                                     \
    kernel kx = {0}, ky = {0};                                                              \
    sl_status s = make_kernel(&kx, dw, sw, rx, rw, true, PAD);                              \
    if (s) return s;                                                                        \
    if ((s = make_kernel(&ky, dh, sh, ry, rh, true, false))) {                              \
        kernel_free(&kx);                                                                   \
        return s;                                                                           \
    }                                                                                       \
    int64_t lo = kx.start[0], hi = kx.start[0] + kx.n[0];                                   \
    for (int64_t x = 1; x < dw; x++) {                                                      \
        if (kx.start[x] < lo) lo = kx.start[x];                                             \
        if (kx.start[x] + kx.n[x] > hi) hi = kx.start[x] + kx.n[x];                         \
    }                                                                                       \
    if (sink && sink->mirror &&                                                             \
        ((s = mirror_columns(kx.start, dw, sizeof *kx.start)) ||                            \
         (s = mirror_columns(kx.n, dw, sizeof *kx.n)) ||                                    \
         (s = mirror_columns(kx.wt, dw, sizeof *kx.wt * (size_t)kx.kmax)))) {               \
        kernel_free(&kx);                                                                   \
        kernel_free(&ky);                                                                   \
        return s;                                                                           \
    }                                                                                       \
    int64_t span = (hi - lo) * c;                                                           \
    float *tmp = malloc(sizeof(float) * (size_t)(span + n));                                \
    if (!tmp) {                                                                             \
        kernel_free(&kx);                                                                   \
        kernel_free(&ky);                                                                   \
        return sl_err(SL_ENOMEM, "out of memory resizing to %lldx%lld", (long long)dh,      \
                      (long long)dw);                                                       \
    }                                                                                       \
    float *orow = tmp + span;                                                               \
    for (int64_t y = 0; y < dh; y++) {                                                      \
        const float *wy = ky.wt + y * ky.kmax;                                              \
        const T *row = src + ky.start[y] * stride + lo * c;                                 \
        float w0 = wy[0];                                                                   \
        for (int64_t i = 0; i < span; i++) tmp[i] = w0 * (float)row[i];                     \
        for (int k = 1; k < ky.n[y]; k++) {                                                 \
            const T *r = row + k * stride;                                                  \
            float wk = wy[k];                                                               \
            for (int64_t i = 0; i < span; i++) tmp[i] += wk * (float)r[i];                  \
        }                                                                                   \
        if (c == 3) {                                                                       \
            for (int64_t x = 0; x < dw; x++) {                                              \
                const float *wx = kx.wt + x * kx.kmax;                                      \
                const float *t = tmp + (kx.start[x] - lo) * 3;                              \
                int nk = kx.n[x];                                                           \
                float a0 = wx[0] * t[0], a1 = wx[0] * t[1], a2 = wx[0] * t[2];              \
                for (int k = 1; k < nk; k++) {                                              \
                    a0 += wx[k] * t[3 * k];                                                 \
                    a1 += wx[k] * t[3 * k + 1];                                             \
                    a2 += wx[k] * t[3 * k + 2];                                             \
                }                                                                           \
                orow[3 * x] = a0;                                                           \
                orow[3 * x + 1] = a1;                                                       \
                orow[3 * x + 2] = a2;                                                       \
            }                                                                               \
        } else {                                                                            \
            for (int64_t x = 0; x < dw; x++) {                                              \
                const float *wx = kx.wt + x * kx.kmax;                                      \
                const float *t = tmp + (kx.start[x] - lo) * c;                              \
                int nk = kx.n[x];                                                           \
                for (int64_t ch = 0; ch < c; ch++) {                                        \
                    float acc = wx[0] * t[ch];                                              \
                    for (int k = 1; k < nk; k++) acc += wx[k] * t[k * c + ch];              \
                    orow[x * c + ch] = acc;                                                 \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
        ROW_OUT(T, STORE, y, orow)                                                          \
    }                                                                                       \
    free(tmp);                                                                              \
    kernel_free(&kx);                                                                       \
    kernel_free(&ky);                                                                       \
    return SL_OK;

/* Antialiased where the region shrinks and antialias is asked for, else 2-tap. */
#define RESAMPLE_BODY(T, STORE, PAD)                                                        \
    if (antialias && (rh > (double)dh || rw > (double)dw)) {                                \
        RESIZE_AA_BODY(T, STORE, PAD)                                                       \
    }                                                                                       \
    RESIZE_BODY(T, STORE)

sl_status sl__resample_u8(bool antialias, const uint8_t *src, int64_t sh, int64_t sw, int64_t c,
                          int64_t stride, double ry, double rx, double rh, double rw, uint8_t *dst,
                          int64_t dh, int64_t dw, const sl__row_sink *sink) {
    RESAMPLE_BODY(uint8_t, sl__round_u8, true)
}

sl_status sl__resample_f32(bool antialias, const float *src, int64_t sh, int64_t sw, int64_t c,
                           int64_t stride, double ry, double rx, double rh, double rw, float *dst,
                           int64_t dh, int64_t dw) {
    const sl__row_sink *sink = NULL; /* (sinks take uint8 resamples only) */
    RESAMPLE_BODY(float, AS_F32, false)
}

/* ---- crop geometry ---- */

const sl__geom_fn *sl__as_geom(const sl_fn *fn) {
    if (fn->vt->apply == sl__geom_apply) return (const sl__geom_fn *)fn;
    return NULL;
}

/* Python's round(): to nearest, ties to even (the default rounding mode's rint). */
static int64_t round_even(double v) { return (int64_t)nearbyint(v); }

sl__rect sl__rrc_rect(int64_t H, int64_t W, double scale_lo, double scale_hi, double ratio_lo,
                      double ratio_hi, uint64_t seed) {
    sl_rng rng = {seed};
    double area = (double)H * (double)W;
    double lr0 = log(ratio_lo), lr1 = log(ratio_hi);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (scale_lo + (scale_hi - scale_lo) * sl__rng_double(&rng));
        double aspect = exp(lr0 + (lr1 - lr0) * sl__rng_double(&rng));
        int64_t w = round_even(sqrt(target * aspect));
        int64_t h = round_even(sqrt(target / aspect));
        if (0 < w && w <= W && 0 < h && h <= H) {
            int64_t i = (int64_t)sl__rng_below(&rng, (uint64_t)(H - h + 1));
            int64_t j = (int64_t)sl__rng_below(&rng, (uint64_t)(W - w + 1));
            return (sl__rect){i, j, h, w};
        }
    }
    /* fallback: the whole image, center-cropped to the nearest allowed aspect ratio */
    double in_ratio = (double)W / (double)H;
    int64_t w = W, h = H;
    if (in_ratio < ratio_lo) {
        h = round_even((double)w / ratio_lo);
    } else if (in_ratio > ratio_hi) {
        w = round_even((double)h * ratio_hi);
    }
    if (h < 1) h = 1;
    if (w < 1) w = 1;
    if (h > H) h = H;
    if (w > W) w = W;
    return (sl__rect){(H - h) / 2, (W - w) / 2, h, w};
}

sl__rect sl__center_rect(int64_t H, int64_t W, int64_t h, int64_t w) {
    if (h > H) h = H;
    if (w > W) w = W;
    return (sl__rect){round_even((double)(H - h) / 2.0), round_even((double)(W - w) / 2.0), h, w};
}

void sl__shorter_size(int64_t H, int64_t W, int64_t n, int64_t *oh, int64_t *ow) {
    /* torchvision: new_long = int(n * long / short), true division then truncation */
    if (W <= H) {
        *ow = n;
        *oh = (int64_t)((double)(n * H) / (double)W);
    } else {
        *oh = n;
        *ow = (int64_t)((double)(n * W) / (double)H);
    }
}

void sl__geom_plan(const sl__geom_fn *g, int64_t H, int64_t W, uint64_t seed, sl__rect *r,
                   int64_t *oh, int64_t *ow) {
    switch (g->kind) {
    case SL__GEOM_RANDOM_RESIZED_CROP:
        *r = sl__rrc_rect(H, W, g->scale_lo, g->scale_hi, g->ratio_lo, g->ratio_hi, seed);
        *oh = g->height;
        *ow = g->width;
        return;
    case SL__GEOM_CENTER_CROP:
        *r = sl__center_rect(H, W, g->height, g->width);
        *oh = r->h;
        *ow = r->w;
        return;
    case SL__GEOM_RESIZE:
    default:
        *r = (sl__rect){0, 0, H, W};
        if (g->shorter > 0) {
            sl__shorter_size(H, W, g->shorter, oh, ow);
            return;
        }
        *oh = g->height;
        *ow = g->width;
        return;
    }
}

sl_status sl__geom_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const sl__geom_fn *g = (const sl__geom_fn *)fn;
    sl_status s = SL_OK;
    const char *comp = g->im.comp;
    int ci = sl__fn_component(fn, e, comp, &s);
    if (ci < 0) return s;
    const sl_tensor *in = &e->t[ci];
    int64_t H, W, C;
    if ((s = sl__image_shape(fn, comp, in, &H, &W, &C))) return s;
    sl__rect r;
    int64_t oh, ow;
    sl__geom_plan(g, H, W, call->seed, &r, &oh, &ow);
    if (r.y == 0 && r.x == 0 && r.h == H && r.w == W && oh == H && ow == W)
        return SL_OK; /* nothing to do: the component stays as it is */
    bool resample = oh != r.h || ow != r.w;
    char d[96];
    if (in->dtype == SL_DT_BYTES || in->dtype == SL_DT_INVALID ||
        (resample && in->dtype != SL_DT_U8 && in->dtype != SL_DT_F32)) {
        s = sl_err(SL_EINVAL, "'%s' is %s; %s needs uint8 or float32 pixels", comp,
                   sl_tensor_describe(in, d, sizeof d), resample ? "resizing" : "cropping");
        sl_err_hint("decode the image first, or cast it to float32");
        return s;
    }
    if ((s = sl__check_pixels(fn, comp, oh, ow, g->im.max_pixels))) return s;
    sl_tensor out;
    int64_t dims[3] = {oh, ow, C};
    if ((s = sl_tensor_alloc(&out, in->dtype, in->rank, dims))) return s;
    size_t es = sl_dtype_size(in->dtype);
    const uint8_t *base = (const uint8_t *)in->data + (size_t)((r.y * W + r.x) * C) * es;
    if (!resample) {
        for (int64_t y = 0; y < oh; y++)
            memcpy((uint8_t *)out.data + (size_t)(y * ow * C) * es, base + (size_t)(y * W * C) * es,
                   (size_t)(ow * C) * es);
    } else if (in->dtype == SL_DT_U8) {
        s = sl__resample_u8(g->antialias, base, r.h, r.w, C, W * C, 0, 0, (double)r.h, (double)r.w,
                            out.data, oh, ow, NULL);
    } else {
        s = sl__resample_f32(g->antialias, (const float *)base, r.h, r.w, C, W * C, 0, 0,
                             (double)r.h, (double)r.w, out.data, oh, ow);
    }
    if (!s) s = sl_element_set(e, comp, &out);
    if (s) sl_tensor_release(&out);
    return s;
}

sl_status sl__image_fn_new(size_t size, const sl_fn_vt *vt, const char *comp, sl__image_fn **out) {
    *out = NULL;
    if (!comp || !*comp || strlen(comp) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "%s: component name must be 1..%d characters", vt->name,
                      SL_NAME_MAX - 1);
    sl__image_fn *im = sl__fn_new(size, vt, vt->name);
    if (!im) return SL_ENOMEM;
    snprintf(im->comp, sizeof im->comp, "%s", comp);
    im->max_pixels = SL_FN_MAX_PIXELS_DEFAULT;
    *out = im;
    return SL_OK;
}

sl_status sl__geom_new(const sl_fn_vt *vt, sl__geom_kind kind, const char *comp, int height,
                       int width, sl__geom_fn **out) {
    *out = NULL;
    sl__image_fn *im;
    sl_status s = sl__image_fn_new(sizeof(sl__geom_fn), vt, comp, &im);
    if (s) return s;
    if (height < 1 || width < 1) {
        sl_fn_unref(&im->base);
        return sl_err(SL_EINVAL, "%s: size %dx%d must be at least 1x1", vt->name, height, width);
    }
    sl__geom_fn *g = (sl__geom_fn *)im;
    g->kind = kind;
    g->height = height;
    g->width = width;
    g->antialias = true;
    *out = g;
    return SL_OK;
}

sl_status sl__check_pixels(const sl_fn *fn, const char *comp, int64_t oh, int64_t ow, int64_t max) {
    if (oh <= max / ow) return SL_OK; /* (oh, ow >= 1) */
    double px = (double)oh * (double)ow;
    sl_err(SL_ERANGE, "'%s': the output would be %lldx%lld (%.0f pixels), over %s's limit of %lld pixels",
           comp, (long long)oh, (long long)ow, px, fn->name, (long long)max);
    sl_err_hint("raise it with %s(%s, ..., max_pixels=%.0f) in the config (sl_fn_set_max_pixels in C), "
                "or ask for a smaller size", fn->name, comp, px);
    return SL_ERANGE;
}

sl_status sl_fn_set_antialias(sl_fn *fn, bool antialias) {
    if (!fn) return sl_err(SL_EINVAL, "sl_fn_set_antialias: function is NULL");
    sl__geom_fn *g = (sl__geom_fn *)sl__as_geom(fn);
    if (!g)
        return sl_err(SL_EINVAL, "%s has no antialias setting (only resize, center_crop and "
                      "random_resized_crop have one)", fn->name);
    g->antialias = antialias;
    return SL_OK;
}
