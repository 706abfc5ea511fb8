/* The per-op kernels of RandAugment and TrivialAugmentWide (augment_ops.h): torchvision 0.14's
 * _apply_op on uint8 tensor images, NEAREST interpolation, zero fill, with its float32
 * arithmetic reproduced step by step so that the outputs equal torchvision's (checked
 * against stored torchvision outputs by tests/unit/test_fn_augment.c).
 *
 * Workload: once or twice per training image (224 x 224 x 3 typically): each kernel is one
 * or two passes over the pixels. */
#include "pipeline/fn/augment_ops.h"

#include <math.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "pipeline/fn/color.h"

static const char *const NAMES[SL__AUG_NOPS] = {
    "Identity",   "ShearX", "ShearY",    "TranslateX", "TranslateY", "Rotate",       "Brightness",
    "Color",      "Contrast", "Sharpness", "Posterize", "Solarize",  "AutoContrast", "Equalize",
};

const char *sl__aug_op_name(int op) { return op >= 0 && op < SL__AUG_NOPS ? NAMES[op] : NULL; }

int sl__aug_op_from_name(const char *name) {
    for (int i = 0; i < SL__AUG_NOPS; i++)
        if (strcasecmp(name, NAMES[i]) == 0) return i;
    return -1;
}

bool sl__aug_op_signed(int op) { return op >= SL__AUG_SHEAR_X && op <= SL__AUG_SHARPNESS; }

bool sl__aug_op_has_magnitude(int op) {
    return op != SL__AUG_IDENTITY && op != SL__AUG_AUTOCONTRAST && op != SL__AUG_EQUALIZE;
}

/* torch.linspace(start, end, steps)[i] in float32: the step in float, each half of the range
 * counted from its own end (torch's scalar formula; its vectorised chunks round some
 * entries one ulp apart). */
static float linspace_at(float start, float end, int steps, int i) {
    float step = (end - start) / (float)(steps - 1);
    if (i < steps / 2) return (float)((double)start + (double)step * i);
    return (float)((double)end - (double)step * (steps - 1 - i));
}

float sl__aug_magnitude(bool trivial, int op, int bin, int bins, int64_t h, int64_t w) {
    float shear = trivial ? 0.99f : 0.3f, color = trivial ? 0.99f : 0.9f;
    switch (op) {
    case SL__AUG_SHEAR_X:
    case SL__AUG_SHEAR_Y: return linspace_at(0.0f, shear, bins, bin);
    case SL__AUG_TRANSLATE_X:
        return linspace_at(0.0f, trivial ? 32.0f : (float)(150.0 / 331.0 * (double)w), bins, bin);
    case SL__AUG_TRANSLATE_Y:
        return linspace_at(0.0f, trivial ? 32.0f : (float)(150.0 / 331.0 * (double)h), bins, bin);
    case SL__AUG_ROTATE: return linspace_at(0.0f, trivial ? 135.0f : 30.0f, bins, bin);
    case SL__AUG_BRIGHTNESS:
    case SL__AUG_COLOR:
    case SL__AUG_CONTRAST:
    case SL__AUG_SHARPNESS: return linspace_at(0.0f, color, bins, bin);
    case SL__AUG_POSTERIZE: {
        /* 8 - (torch.arange(bins) / ((bins - 1) / k)).round().int(): float32 division */
        float q = (float)bin / (float)((bins - 1) / (trivial ? 6.0 : 4.0));
        return (float)(8 - (int)rintf(q));
    }
    case SL__AUG_SOLARIZE: return linspace_at(255.0f, 0.0f, bins, bin);
    default: return 0.0f;
    }
}

/* ---- geometry ---- */

/* torchvision.transforms.functional._get_inverse_affine_matrix (inverted=True), in double. */
static void inverse_affine(double cx, double cy, double angle, double tx, double ty, double shx, double shy,
                           double m[6]) {
    const double deg = M_PI / 180.0; /* math.radians */
    double rot = angle * deg, sx = shx * deg, sy = shy * deg;
    double a = cos(rot - sy) / cos(sy);
    double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    double c = sin(rot - sy) / cos(sy);
    double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    m[0] = d / 1.0;
    m[1] = -b / 1.0;
    m[2] = 0.0;
    m[3] = -c / 1.0;
    m[4] = a / 1.0;
    m[5] = 0.0;
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
}

/* rintf (round half to even, the default rounding mode) for |v| < 2^22, inline: v + 1.5 * 2^23
 * lies where float's spacing is 1, so the sum is rounded to an integer, ties to even. Larger
 * |v| come back unchanged or far outside any image, which is all the caller needs. */
static inline float round_even(float v) {
    if (!(fabsf(v) < 4194304.0f)) return v;
    return (v + 12582912.0f) - 12582912.0f; /* not folded to v: IEEE arithmetic, no -ffast-math */
}

void sl__aug_affine_nearest_u8(const uint8_t *src, uint8_t *dst, int64_t h, int64_t w, int64_t c,
                               const double matrix[6]) {
    /* _gen_affine_grid: theta (float32) transposed, divided by [w / 2, h / 2] */
    float hw = (float)(0.5 * (double)w), hh = (float)(0.5 * (double)h);
    float r00 = (float)matrix[0] / hw, r10 = (float)matrix[1] / hw, r20 = (float)matrix[2] / hw;
    float r01 = (float)matrix[3] / hh, r11 = (float)matrix[4] / hh, r21 = (float)matrix[5] / hh;
    float sx = (float)w / 2, sy = (float)h / 2; /* grid_sample's unnormalize, align_corners=False */
    for (int64_t y = 0; y < h; y++) {
        float by = (float)(-(double)h * 0.5 + 0.5 + (double)y);
        uint8_t *o = dst + (size_t)(y * w * c);
        for (int64_t x = 0; x < w; x++, o += c) {
            float bx = (float)(-(double)w * 0.5 + 0.5 + (double)x);
            /* the bmm of [x, y, 1] with the 3 x 2 matrix, as BLAS accumulates it: x * a, then
             * fma(y, b, .), then + c (fmaf is exact: the FMA instruction or glibc's emulation) */
            float gx = fmaf(by, r10, bx * r00) + r20;
            float gy = fmaf(by, r11, bx * r01) + r21;
            /* grid_sample's unnormalize, (g + 1) * size / 2 - 0.5, fused as torch's AVX2 kernel
             * computes it (a half-way source coordinate then rounds the way torch's does) */
            float ix = round_even(fmaf(gx + 1.0f, sx, -0.5f)), iy = round_even(fmaf(gy + 1.0f, sy, -0.5f));
            if (ix >= 0.0f && ix < (float)w && iy >= 0.0f && iy < (float)h) {
                const uint8_t *sp = src + (size_t)(((int64_t)iy * w + (int64_t)ix) * c);
                for (int64_t k = 0; k < c; k++) o[k] = sp[k];
            } else {
                for (int64_t k = 0; k < c; k++) o[k] = 0;
            }
        }
    }
}

/* ---- pixel ops ---- */

void sl__aug_posterize_u8(uint8_t *px, int64_t n, int bits) {
    if (bits < 0) bits = 0;
    if (bits > 8) bits = 8;
    uint8_t mask = (uint8_t)(-(1 << (8 - bits)) & 0xff);
    for (int64_t i = 0; i < n; i++) px[i] &= mask;
}

void sl__aug_solarize_u8(uint8_t *px, int64_t n, float threshold) {
    for (int64_t i = 0; i < n; i++)
        if ((float)px[i] >= threshold) px[i] = (uint8_t)(255 - px[i]);
}

void sl__aug_autocontrast_u8(uint8_t *px, int64_t npix, int64_t c) {
    for (int64_t k = 0; k < c; k++) {
        uint8_t lo = 255, hi = 0;
        for (int64_t i = 0; i < npix; i++) {
            uint8_t v = px[i * c + k];
            if (v < lo) lo = v;
            if (v > hi) hi = v;
        }
        float minimum = (float)lo, scale = 255.0f / ((float)hi - minimum);
        if (!isfinite(scale)) { /* a flat channel: left as it is */
            minimum = 0.0f;
            scale = 1.0f;
        }
        for (int64_t i = 0; i < npix; i++) {
            float v = ((float)px[i * c + k] - minimum) * scale;
            v = v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v);
            px[i * c + k] = (uint8_t)v;
        }
    }
}

void sl__aug_equalize_u8(uint8_t *px, int64_t npix, int64_t c) {
    for (int64_t k = 0; k < c; k++) {
        int64_t hist[256] = {0}, lut[256];
        for (int64_t i = 0; i < npix; i++) hist[px[i * c + k]]++;
        int last = 255;
        while (last > 0 && hist[last] == 0) last--;
        int64_t step = (npix - hist[last]) / 255; /* the nonzero bins but the last one */
        if (step == 0) continue;
        int64_t cum = 0;
        lut[0] = 0;
        for (int v = 0; v < 255; v++) { /* shifted right by one: lut[v + 1] from cumsum[v] */
            cum += hist[v];
            int64_t q = (cum + step / 2) / step;
            lut[v + 1] = q > 255 ? 255 : q;
        }
        for (int64_t i = 0; i < npix; i++) px[i * c + k] = (uint8_t)lut[px[i * c + k]];
    }
}

void sl__aug_sharpness_u8(uint8_t *px, int64_t h, int64_t w, int64_t c, double factor, uint8_t *tmp) {
    if (w <= 2 || h <= 2) return;
    /* _blurred_degenerate_image: [[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13 in float32, rounded;
     * the border keeps the image's pixels */
    float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    memcpy(tmp, px, (size_t)(h * w * c));
    int64_t row = w * c;
    for (int64_t y = 1; y < h - 1; y++) {
        const uint8_t *a = px + (y - 1) * row, *m = px + y * row, *b = px + (y + 1) * row;
        uint8_t *o = tmp + y * row;
        /* the nine products added in conv2d's order (row by row, left to right) */
        for (int64_t i = c; i < row - c; i++) {
            float acc = k1 * (float)a[i - c];
            acc += k1 * (float)a[i];
            acc += k1 * (float)a[i + c];
            acc += k1 * (float)m[i - c];
            acc += k5 * (float)m[i];
            acc += k1 * (float)m[i + c];
            acc += k1 * (float)b[i - c];
            acc += k1 * (float)b[i];
            acc += k1 * (float)b[i + c];
            o[i] = (uint8_t)(int32_t)((acc + 12582912.0f) - 12582912.0f); /* rintf: acc is in [0, 255.0001] */
        }
    }
    /* _blend(img, blurred, factor) */
    float r = (float)factor, r1 = (float)(1.0 - factor);
    for (int64_t i = 0; i < h * w * c; i++) {
        float v = r * (float)px[i] + r1 * (float)tmp[i];
        v = v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v);
        px[i] = (uint8_t)v;
    }
}

void sl__aug_apply(int op, double mag, uint8_t *px, int64_t h, int64_t w, int64_t c, uint8_t *tmp) {
    double m[6];
    int64_t npix = h * w;
    switch (op) {
    case SL__AUG_SHEAR_X: /* center=[0, 0]: the top-left corner */
        inverse_affine(-(double)w * 0.5, -(double)h * 0.5, 0.0, 0.0, 0.0, atan(mag) * (180.0 / M_PI), 0.0, m);
        break;
    case SL__AUG_SHEAR_Y:
        inverse_affine(-(double)w * 0.5, -(double)h * 0.5, 0.0, 0.0, 0.0, 0.0, atan(mag) * (180.0 / M_PI), m);
        break;
    case SL__AUG_TRANSLATE_X: inverse_affine(0.0, 0.0, 0.0, (double)(int64_t)mag, 0.0, 0.0, 0.0, m); break;
    case SL__AUG_TRANSLATE_Y: inverse_affine(0.0, 0.0, 0.0, 0.0, (double)(int64_t)mag, 0.0, 0.0, m); break;
    case SL__AUG_ROTATE: inverse_affine(0.0, 0.0, -mag, 0.0, 0.0, 0.0, 0.0, m); break; /* F.rotate: -angle */
    case SL__AUG_BRIGHTNESS: sl__adjust_brightness_u8(px, npix, c, (float)(1.0 + mag)); return;
    case SL__AUG_COLOR: sl__adjust_saturation_u8(px, npix, c, (float)(1.0 + mag)); return;
    case SL__AUG_CONTRAST: sl__adjust_contrast_u8(px, npix, c, (float)(1.0 + mag)); return;
    case SL__AUG_SHARPNESS: sl__aug_sharpness_u8(px, h, w, c, 1.0 + mag, tmp); return;
    case SL__AUG_POSTERIZE: sl__aug_posterize_u8(px, npix * c, (int)mag); return;
    case SL__AUG_SOLARIZE: sl__aug_solarize_u8(px, npix * c, (float)mag); return;
    case SL__AUG_AUTOCONTRAST: sl__aug_autocontrast_u8(px, npix, c); return;
    case SL__AUG_EQUALIZE: sl__aug_equalize_u8(px, npix, c); return;
    default: return; /* Identity */
    }
    memcpy(tmp, px, (size_t)(npix * c));
    sl__aug_affine_nearest_u8(tmp, px, h, w, c, m);
}
