/* Private to pipeline/fn/: the per-op kernels of the augment policies (RandAugment,
 * TrivialAugmentWide, augment_op), torchvision 0.14's transforms/autoaugment.py _apply_op on
 * uint8 tensor images with interpolation NEAREST and fill None (zeros outside), and the
 * magnitude tables of the two policies. Brightness, Color and Contrast are the colour
 * kernels of color.h; the others are here (augment_ops.c).
 *
 * Layout: interleaved HWC uint8, h x w pixels of c channels (c = 1 or 3). */
#ifndef SLUICE_PIPELINE_FN_AUGMENT_OPS_H
#define SLUICE_PIPELINE_FN_AUGMENT_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "sluice/status.h"

/* torchvision's op list, in its _augmentation_space order (RandAugment and TrivialAugmentWide
 * draw an index into it). */
typedef enum sl__aug_op {
    SL__AUG_IDENTITY,
    SL__AUG_SHEAR_X,
    SL__AUG_SHEAR_Y,
    SL__AUG_TRANSLATE_X,
    SL__AUG_TRANSLATE_Y,
    SL__AUG_ROTATE,
    SL__AUG_BRIGHTNESS,
    SL__AUG_COLOR,
    SL__AUG_CONTRAST,
    SL__AUG_SHARPNESS,
    SL__AUG_POSTERIZE,
    SL__AUG_SOLARIZE,
    SL__AUG_AUTOCONTRAST,
    SL__AUG_EQUALIZE,
    SL__AUG_NOPS
} sl__aug_op;

/* torchvision's name of op ("ShearX", ...), or NULL out of range. */
const char *sl__aug_op_name(int op);
/* The op named name (torchvision's spelling, case-insensitive), or -1. */
int sl__aug_op_from_name(const char *name);
/* Does the policy flip the op's magnitude's sign with probability 1/2? */
bool sl__aug_op_signed(int op);
/* Does the op take a magnitude from a table (false: Identity, AutoContrast, Equalize)? */
bool sl__aug_op_has_magnitude(int op);

/* The unsigned magnitude of bin `bin` (0 <= bin < bins, bins >= 2) of op in RandAugment's
 * (trivial false) or TrivialAugmentWide's table, for an h x w image (RandAugment's
 * translations scale with the image): torchvision's float32 linspace values (within one
 * float32 ulp: torch's vectorised linspace rounds some entries the other way) and its
 * Posterize bits, 8 - round(bin / ((bins - 1) / 4 or 6)). 0 for ops without a magnitude. */
float sl__aug_magnitude(bool trivial, int op, int bin, int bins, int64_t h, int64_t w);

/* _apply_op(img, op, magnitude): px (h x w x c, c 1 or 3) transformed in place; tmp is
 * scratch of h * w * c bytes. Geometric ops are F.affine / F.rotate with NEAREST and zero
 * fill, reproducing torchvision's inverse matrix (double), its float32 grid (_gen_affine_grid,
 * the grid's bmm rounded as BLAS does it: x * a, then fma(y, b, .), then + c) and
 * grid_sample's nearest (align_corners=False: fma(g + 1, size / 2, -0.5), fused as torch's
 * AVX2 kernel computes it, then rounded half to even), so rounding ties fall the same way
 * (torch 1.13 / torchvision 0.14 on x86-64 with AVX2; checked against it bit for bit).
 * Posterize takes bits = (int)magnitude (0..8), Solarize a threshold. */
void sl__aug_apply(int op, double magnitude, uint8_t *px, int64_t h, int64_t w, int64_t c, uint8_t *tmp);

/* The kernels by themselves (sl__aug_apply calls them). */
void sl__aug_affine_nearest_u8(const uint8_t *src, uint8_t *dst, int64_t h, int64_t w, int64_t c,
                               const double matrix[6]);
void sl__aug_posterize_u8(uint8_t *px, int64_t n, int bits);
void sl__aug_solarize_u8(uint8_t *px, int64_t n, float threshold);
void sl__aug_autocontrast_u8(uint8_t *px, int64_t npix, int64_t c);
void sl__aug_equalize_u8(uint8_t *px, int64_t npix, int64_t c);
void sl__aug_sharpness_u8(uint8_t *px, int64_t h, int64_t w, int64_t c, double factor, uint8_t *tmp);

#endif
