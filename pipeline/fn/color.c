/* torchvision's colour kernels on uint8 images, bit for bit (torchvision 0.14,
 * transforms/functional_tensor.py: rgb_to_grayscale, adjust_brightness, adjust_contrast,
 * adjust_saturation, adjust_hue with _blend, _rgb2hsv and _hsv2rgb). Each line below is one
 * of torch's float32 tensor operations in torchvision's order: a python float meets a uint8
 * tensor as a float32 scalar (so (1 - ratio) is computed in double, then rounded), and
 * .to(uint8) truncates. The build is ISO C (no FP contraction), so no multiply-add fuses.
 *
 * Workload: once or twice per training image (ColorJitter, RandAugment), a 224 x 224 x 3
 * crop; the loops are plain float code the compiler vectorizes. */
#include <math.h>

#include "pipeline/fn/color.h"

/* _blend's last step: clamp(0, 255), then .to(uint8), which truncates. */
static inline uint8_t clamp_u8(float v) {
    if (!(v > 0.0f)) return 0; /* also -0 and NaN (a NaN cannot arise from finite factors) */
    if (v > 255.0f) return 255;
    return (uint8_t)v;
}

void sl__rgb_to_gray_u8(const uint8_t *rgb, int64_t npix, uint8_t *gray) {
    const float wr = 0.2989f, wg = 0.587f, wb = 0.114f;
    for (int64_t i = 0; i < npix; i++) {
        float l = wr * (float)rgb[3 * i] + wg * (float)rgb[3 * i + 1];
        l = l + wb * (float)rgb[3 * i + 2];
        gray[i] = (uint8_t)l; /* at most 0.9999 * 255: no clamp */
    }
}

void sl__adjust_brightness_u8(uint8_t *px, int64_t npix, int64_t c, float factor) {
    /* _blend(img, zeros, f): f * v + (1 - f) * 0, the second term 0 (or -0) */
    const float r = factor, o = (float)(1.0 - (double)factor) * 0.0f;
    int64_t n = npix * c;
    for (int64_t i = 0; i < n; i++) px[i] = clamp_u8(r * (float)px[i] + o);
}

/* _blend(img, other, f) of one value against a float other */
static inline uint8_t blend(float r, float r1, uint8_t v, float other) {
    return clamp_u8(r * (float)v + r1 * other);
}

void sl__adjust_contrast_u8(uint8_t *px, int64_t npix, int64_t c, float factor) {
    if (npix <= 0 || (c != 1 && c != 3)) return;
    /* the float32 mean of the uint8 grayscale: torch sums in float32 (exact below 2^24,
     * and the int64 sum rounded once is what the cascade gives there) and divides by n */
    int64_t sum = 0;
    if (c == 3) {
        const float wr = 0.2989f, wg = 0.587f, wb = 0.114f;
        for (int64_t i = 0; i < npix; i++) {
            float l = wr * (float)px[3 * i] + wg * (float)px[3 * i + 1];
            l = l + wb * (float)px[3 * i + 2];
            sum += (uint8_t)l;
        }
    } else {
        for (int64_t i = 0; i < npix; i++) sum += px[i];
    }
    const float mean = (float)sum / (float)npix;
    const float r = factor, other = (float)(1.0 - (double)factor) * mean;
    int64_t n = npix * c;
    for (int64_t i = 0; i < n; i++) px[i] = clamp_u8(r * (float)px[i] + other);
}

void sl__adjust_saturation_u8(uint8_t *px, int64_t npix, int64_t c, float factor) {
    if (c != 3) return; /* torchvision returns a one-channel image as it is */
    const float wr = 0.2989f, wg = 0.587f, wb = 0.114f;
    const float r = factor, r1 = (float)(1.0 - (double)factor);
    for (int64_t i = 0; i < npix; i++) {
        uint8_t *p = px + 3 * i;
        float l = wr * (float)p[0] + wg * (float)p[1];
        l = l + wb * (float)p[2];
        float g = (float)(uint8_t)l;
        p[0] = blend(r, r1, p[0], g);
        p[1] = blend(r, r1, p[1], g);
        p[2] = blend(r, r1, p[2], g);
    }
}

static inline float clamp01(float v) { return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v); }

/* torch.remainder(a, 1.0) on CPU: fmod, moved into [0, 1) when negative */
static inline float rem1(float a) {
    float m = fmodf(a, 1.0f);
    if (m != 0.0f && m < 0.0f) m += 1.0f;
    return m;
}

void sl__adjust_hue_u8(uint8_t *px, int64_t npix, int64_t c, float hue_factor) {
    if (c != 3) return; /* torchvision returns a one-channel image as it is */
    const float hf = hue_factor;
    for (int64_t k = 0; k < npix; k++) {
        uint8_t *p = px + 3 * k;
        float r = (float)p[0] / 255.0f, g = (float)p[1] / 255.0f, b = (float)p[2] / 255.0f;
        /* _rgb2hsv */
        float maxc = fmaxf(r, fmaxf(g, b)), minc = fminf(r, fminf(g, b));
        int eqc = maxc == minc;
        float cr = maxc - minc;
        float s = cr / (eqc ? 1.0f : maxc);
        float crd = eqc ? 1.0f : cr;
        float rc = (maxc - r) / crd, gc = (maxc - g) / crd, bc = (maxc - b) / crd;
        float hr = (float)(maxc == r) * (bc - gc);
        float hg = (float)(maxc == g && maxc != r) * ((2.0f + rc) - bc);
        float hb = (float)(maxc != g && maxc != r) * ((4.0f + gc) - rc);
        float h = (hr + hg) + hb;
        h = fmodf(h / 6.0f + 1.0f, 1.0f);
        float v = maxc;
        /* the shift */
        h = rem1(h + hf);
        /* _hsv2rgb */
        float i6 = floorf(h * 6.0f);
        float f = h * 6.0f - i6;
        int i = (int)i6;
        float pp = clamp01(v * (1.0f - s));
        float q = clamp01(v * (1.0f - s * f));
        float t = clamp01(v * (1.0f - s * (1.0f - f)));
        i = ((i % 6) + 6) % 6;
        float o0, o1, o2;
        switch (i) {
        case 0: o0 = v; o1 = t; o2 = pp; break;
        case 1: o0 = q; o1 = v; o2 = pp; break;
        case 2: o0 = pp; o1 = v; o2 = t; break;
        case 3: o0 = pp; o1 = q; o2 = v; break;
        case 4: o0 = t; o1 = pp; o2 = v; break;
        default: o0 = v; o1 = pp; o2 = q; break;
        }
        /* * 255, .to(uint8): truncation (values are in [0, 255]) */
        p[0] = (uint8_t)(o0 * 255.0f);
        p[1] = (uint8_t)(o1 * 255.0f);
        p[2] = (uint8_t)(o2 * 255.0f);
    }
}
