/* normalize: (x - mean[c]) / std[c] per channel (the last dimension), to float32; uint8
 * input is first divided by 255 when scale_uint8 (torchvision's ToTensor + Normalize).
 * Each value is computed in float exactly as
 *   v = (float)x; if (uint8 && scale_uint8) v = v / 255.0f; out = (v - mean[c]) / std[c]
 * One mean/std pair applies to every value of any shape; n > 1 pairs need the last
 * dimension to be n.
 *
 * Workload: once per training image (224 x 224 x 3): uint8 input goes through a table of
 * the 256 possible results per channel, built once when the function is made
 * (sl__row_normalize_u8 in image.h). Right after decode_jpeg's crop (and a flip)
 * decode_jpeg runs it on each row it makes (sl__normalize_u8_of gives it the table), straight
 * from the resize's float results (sl__row_normalize_rounded): the same floats. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/fn/image.h"

typedef struct {
    sl_fn base;
    char comp[SL_NAME_MAX];
    int n;             /* channels given (1: all) */
    bool scale_uint8;
    float *mean, *std; /* n each */
    float *lut;        /* n x 256: the result for each uint8 value */
    sl__norm_u8 u8;    /* the table and parameters, as the row operations take them */
} norm_fn;

static inline float norm1(const norm_fn *f, float v, int c) { return (v - f->mean[c]) / f->std[c]; }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
/* sl__row_normalize_rounded's AVX2 loop over whole groups of 24 values (8 lanes, channels
 * in a period of 3 or one mean for all): each result rounded as sl__round_u8 rounds it
 * (truncating v + 0.5), then normalize's arithmetic, (u / 255 - mean) / std, whose divisions
 * and subtraction are the correctly rounded IEEE operations that built the table (norm1):
 * the table's floats. Returns how many values it wrote. */
__attribute__((target("avx2"))) static int64_t rounded_avx2(const float *v, int64_t n,
                                                            const sl__norm_u8 *p, float *o) {
    float mp[24], sp[24];
    for (int k = 0; k < 24; k++) {
        mp[k] = p->mean[p->nl > 1 ? k % 3 : 0];
        sp[k] = p->std[p->nl > 1 ? k % 3 : 0];
    }
    __m256 m[3], sd[3];
    for (int k = 0; k < 3; k++) {
        m[k] = _mm256_loadu_ps(mp + 8 * k);
        sd[k] = _mm256_loadu_ps(sp + 8 * k);
    }
    const __m256 half = _mm256_set1_ps(0.5f), d255 = _mm256_set1_ps(255.0f);
    int64_t i = 0;
    for (; i + 24 <= n; i += 24)
        for (int k = 0; k < 3; k++) {
            __m256i r = _mm256_cvttps_epi32(_mm256_add_ps(_mm256_loadu_ps(v + i + 8 * k), half));
            __m256 u = _mm256_cvtepi32_ps(r);
            if (p->scale) u = _mm256_div_ps(u, d255);
            _mm256_storeu_ps(o + i + 8 * k, _mm256_div_ps(_mm256_sub_ps(u, m[k]), sd[k]));
        }
    return i;
}
#endif

void sl__row_normalize_rounded(const float *v, int64_t n, int64_t c, const sl__norm_u8 *p, float *o) {
    int64_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if ((p->nl == 1 || c == 3) && sl__cpu_has_avx2()) i = rounded_avx2(v, n, p, o);
#endif
    uint8_t u[96]; /* the rest through the uint8 row, 32 pixels at a time (i: channel 0) */
    for (int64_t k; i < n; i += k) {
        k = n - i < 96 ? n - i : 96;
        sl__row_round_u8(v + i, k, u);
        sl__row_normalize_u8(u, k, c, p, o + i);
    }
}

static sl_status norm_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const norm_fn *f = (const norm_fn *)fn;
    sl_status s = SL_OK;
    const sl_tensor *in = sl__fn_numeric_input(fn, e, f->comp, &s);
    if (!in) return s;
    int64_t C = 1;
    if (f->n > 1) {
        C = in->rank ? in->dims[in->rank - 1] : 1;
        if (C != f->n) {
            char d[96];
            return sl_err(SL_EINVAL, "'%s' is %s: %lld channels, but %d means and stds were given",
                          f->comp, sl_tensor_describe(in, d, sizeof d), (long long)C, f->n);
        }
    }
    sl_tensor out; /* straight into the batch under a fused map_batch */
    if ((s = sl__fn_out_alloc(call, f->comp, &out, SL_DT_F32, in->rank, in->dims))) return s;
    int64_t n = sl_tensor_numel(in);
    float *o = out.data;
    if (in->dtype == SL_DT_U8) {
        sl__row_normalize_u8(in->data, n, C, &f->u8, o);
    } else if (in->dtype == SL_DT_F32) {
        const float *x = in->data;
        for (int64_t i = 0; i < n; i++) o[i] = norm1(f, x[i], (int)(i % C));
    } else {
        for (int64_t i = 0; i < n; i++)
            o[i] = norm1(f, (float)sl__num_get_f64(in->data, in->dtype, i), (int)(i % C));
    }
    if ((s = sl_element_set(e, f->comp, &out))) sl_tensor_release(&out);
    return s;
}

static void norm_destroy(sl_fn *fn) {
    norm_fn *f = (norm_fn *)fn;
    free(f->mean);
    free(f->lut);
}

static const sl_fn_vt norm_vt = {.name = "normalize", .apply = norm_apply, .destroy = norm_destroy};

const sl__norm_u8 *sl__normalize_u8_of(const sl_fn *fn, const char *comp, int channels) {
    if (!fn || fn->vt != &norm_vt) return NULL;
    const norm_fn *f = (const norm_fn *)fn;
    if (strcmp(f->comp, comp) != 0 || (f->n > 1 && f->n != channels)) return NULL;
    return &f->u8;
}

sl_status sl_fn_normalize(const char *comp, const float *mean, const float *std, int n,
                          bool scale_uint8, sl_fn **out) {
    *out = NULL;
    if (!comp || !*comp || strlen(comp) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "normalize: component name must be 1..%d characters",
                      SL_NAME_MAX - 1);
    if (n < 1 || n > 4096 || !mean || !std)
        return sl_err(SL_EINVAL, "normalize: %d means/stds given; need 1..4096", n);
    for (int c = 0; c < n; c++)
        if (!(std[c] != 0) || !isfinite(std[c]) || !isfinite(mean[c]))
            return sl_err(SL_EINVAL, "normalize: channel %d has mean %g and std %g; std must be "
                          "finite and non-zero", c, (double)mean[c], (double)std[c]);
    norm_fn *f = sl__fn_new(sizeof *f, &norm_vt, "normalize");
    if (!f) return SL_ENOMEM;
    f->mean = malloc(sizeof(float) * 2 * (size_t)n);
    f->lut = malloc(sizeof(float) * 256 * (size_t)n);
    if (!f->mean || !f->lut) {
        sl_fn_unref(&f->base);
        return sl_err(SL_ENOMEM, "normalize: out of memory");
    }
    f->std = f->mean + n;
    memcpy(f->mean, mean, sizeof(float) * (size_t)n);
    memcpy(f->std, std, sizeof(float) * (size_t)n);
    f->n = n;
    f->scale_uint8 = scale_uint8;
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    for (int c = 0; c < n; c++)
        for (int v = 0; v < 256; v++)
            f->lut[c * 256 + v] = norm1(f, scale_uint8 ? (float)v / 255.0f : (float)v, c);
    f->u8 = (sl__norm_u8){f->lut, n, f->mean, f->std, scale_uint8};
    *out = &f->base;
    return SL_OK;
}
