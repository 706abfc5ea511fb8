/* rand_augment, trivial_augment and augment_op: torchvision 0.14's RandAugment and
 * TrivialAugmentWide (transforms/autoaugment.py) on uint8 [h, w, c] images, c 1 or 3,
 * interpolation NEAREST, fill 0, and one fixed op (for tests and for users who want one).
 * The kernels are augment_ops.c's (the colour ones color.c's).
 *
 * Draws, from a generator seeded by the call's seed (so a result depends on the element,
 * not on the thread): rand_augment, for each of num_ops ops: the op, uniform over the 14,
 * then, for a signed op, the sign (an integer draw of 0 or 1: 1 negates); trivial_augment: the op, then for an op with a magnitude its bin (uniform over
 * bins), then for a signed op the sign. torchvision draws the same quantities from torch's
 * generator; the streams are not torch's.
 *
 * Output: a fresh tensor (straight into the batch slot under a fused map_batch), or the input
 * left as it is when every op drawn is Identity.
 *
 * Workload: once per training image, 224 x 224 x 3 uint8 after random_resized_crop. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/fn/augment_ops.h"
#include "pipeline/fn/image.h"

#define MAX_OPS 16

typedef enum { AUG_RAND, AUG_TRIVIAL, AUG_FIXED } aug_kind;

typedef struct {
    sl_fn base;
    char comp[SL_NAME_MAX];
    aug_kind kind;
    int num_ops;      /* rand_augment */
    int magnitude;    /* rand_augment: the bin of every op */
    int bins;         /* rand_augment, trivial_augment */
    int op;           /* augment_op */
    double mag;       /* augment_op: the (signed) magnitude */
} aug_fn;

static sl_status aug_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const aug_fn *f = (const aug_fn *)fn;
    sl_status s = SL_OK;
    int64_t h, w, c;
    const sl_tensor *in = sl__fn_image_input(fn, e, f->comp, &h, &w, &c, &s);
    if (!in) return s;
    if (in->dtype != SL_DT_U8 || (c != 1 && c != 3)) {
        s = sl_err(SL_EINVAL, "component '%s' is %s with %lld channels; the augment ops take uint8 images of 1 or 3 channels",
                   f->comp, sl_dtype_name(in->dtype), (long long)c);
        sl_err_hint("apply it after decode_jpeg and the crops, before cast or normalize");
        return s;
    }
    int ops[MAX_OPS];
    double mags[MAX_OPS];
    int n = 0;
    sl_rng rng = {call->seed};
    if (f->kind == AUG_FIXED) {
        ops[n] = f->op;
        mags[n++] = f->mag;
    } else {
        int nops = f->kind == AUG_RAND ? f->num_ops : 1;
        for (int i = 0; i < nops; i++) {
            int op = (int)sl__rng_below(&rng, SL__AUG_NOPS);
            int bin = f->magnitude;
            if (f->kind == AUG_TRIVIAL) bin = sl__aug_op_has_magnitude(op) ? (int)sl__rng_below(&rng, (uint64_t)f->bins) : 0;
            double m = sl__aug_magnitude(f->kind == AUG_TRIVIAL, op, bin, f->bins, h, w);
            if (sl__aug_op_signed(op) && sl__rng_below(&rng, 2)) m = -m;
            ops[n] = op;
            mags[n++] = m;
        }
    }
    bool any = false;
    for (int i = 0; i < n; i++) any |= ops[i] != SL__AUG_IDENTITY;
    if (!any) return SL_OK;
    size_t bytes = (size_t)(h * w * c);
    uint8_t *tmp = malloc(bytes);
    if (!tmp) return sl_err(SL_ENOMEM, "no memory for a %lldx%lldx%lld scratch image", (long long)h, (long long)w,
                            (long long)c);
    sl_tensor out;
    if ((s = sl__fn_out_alloc(call, f->comp, &out, SL_DT_U8, in->rank, in->dims))) {
        free(tmp);
        return s;
    }
    memcpy(out.data, in->data, bytes);
    for (int i = 0; i < n; i++) sl__aug_apply(ops[i], mags[i], out.data, h, w, c, tmp);
    free(tmp);
    if ((s = sl_element_set(e, f->comp, &out))) sl_tensor_release(&out);
    return s;
}

static const sl_fn_vt rand_vt = {.name = "rand_augment", .apply = aug_apply};
static const sl_fn_vt trivial_vt = {.name = "trivial_augment", .apply = aug_apply};
static const sl_fn_vt fixed_vt = {.name = "augment_op", .apply = aug_apply};

static sl_status aug_new(const sl_fn_vt *vt, const char *comp, aug_fn **out) {
    *out = NULL;
    if (!comp || !*comp || strlen(comp) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "%s: component name must be 1..%d characters", vt->name, SL_NAME_MAX - 1);
    aug_fn *f = sl__fn_new(sizeof *f, vt, vt->name);
    if (!f) return SL_ENOMEM;
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    *out = f;
    return SL_OK;
}

static sl_status check_bins(const char *name, int bins) {
    if (bins < 2 || bins > 1000) {
        sl_err(SL_EINVAL, "%s: bins %d must be 2..1000", name, bins);
        sl_err_hint("torchvision's default is num_magnitude_bins=31");
        return SL_EINVAL;
    }
    return SL_OK;
}

sl_status sl_fn_rand_augment(const char *comp, int num_ops, int magnitude, int bins, sl_fn **out) {
    *out = NULL;
    sl_status s;
    if ((s = check_bins("rand_augment", bins))) return s;
    if (num_ops < 0 || num_ops > MAX_OPS)
        return sl_err(SL_EINVAL, "rand_augment: num_ops %d must be 0..%d", num_ops, MAX_OPS);
    if (magnitude < 0 || magnitude >= bins) {
        sl_err(SL_EINVAL, "rand_augment: magnitude %d must be a bin, 0..%d", magnitude, bins - 1);
        sl_err_hint("magnitude indexes the %d magnitude bins (torchvision's default: 9 of 31)", bins);
        return SL_EINVAL;
    }
    aug_fn *f;
    if ((s = aug_new(&rand_vt, comp, &f))) return s;
    f->kind = AUG_RAND;
    f->num_ops = num_ops;
    f->magnitude = magnitude;
    f->bins = bins;
    *out = &f->base;
    return SL_OK;
}

sl_status sl_fn_trivial_augment(const char *comp, int bins, sl_fn **out) {
    *out = NULL;
    sl_status s;
    if ((s = check_bins("trivial_augment", bins))) return s;
    aug_fn *f;
    if ((s = aug_new(&trivial_vt, comp, &f))) return s;
    f->kind = AUG_TRIVIAL;
    f->bins = bins;
    *out = &f->base;
    return SL_OK;
}

sl_status sl_fn_augment_op(const char *comp, const char *op, double magnitude, sl_fn **out) {
    *out = NULL;
    int k = op ? sl__aug_op_from_name(op) : -1;
    if (k < 0) {
        sl_err(SL_EINVAL, "augment_op: unknown op '%s'", op ? op : "(null)");
        sl_err_hint("the ops are Identity, ShearX, ShearY, TranslateX, TranslateY, Rotate, Brightness, Color, "
                    "Contrast, Sharpness, Posterize, Solarize, AutoContrast, Equalize");
        return SL_EINVAL;
    }
    if (!isfinite(magnitude)) return sl_err(SL_EINVAL, "augment_op: magnitude %g must be finite", magnitude);
    if (k >= SL__AUG_BRIGHTNESS && k <= SL__AUG_SHARPNESS && magnitude < -1)
        return sl_err(SL_EINVAL, "augment_op: %s's magnitude %g must be >= -1 (the factor is 1 + magnitude)",
                      sl__aug_op_name(k), magnitude);
    if (k == SL__AUG_POSTERIZE && !(magnitude >= 0 && magnitude < 9))
        return sl_err(SL_EINVAL, "augment_op: Posterize keeps (int)magnitude bits: 0..8, not %g", magnitude);
    if ((k == SL__AUG_SHEAR_X || k == SL__AUG_SHEAR_Y) && fabs(magnitude) > 100)
        return sl_err(SL_EINVAL, "augment_op: shear %g out of range (|tan| <= 100)", magnitude);
    if ((k == SL__AUG_TRANSLATE_X || k == SL__AUG_TRANSLATE_Y) && fabs(magnitude) > 1e9)
        return sl_err(SL_EINVAL, "augment_op: translation %g out of range", magnitude);
    aug_fn *f;
    sl_status s;
    if ((s = aug_new(&fixed_vt, comp, &f))) return s;
    f->kind = AUG_FIXED;
    f->op = k;
    f->mag = magnitude;
    *out = &f->base;
    return SL_OK;
}
