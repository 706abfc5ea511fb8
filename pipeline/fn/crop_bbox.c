/* crop_to_bounding_box (tf.image.crop_to_bounding_box: a fixed box, errors when it does not
 * fit) and distorted_bbox_crop (the Inception crop: tf.image.sample_distorted_bounding_box
 * followed by that crop, sampled as TensorFlow's kernel sample_distorted_bounding_box_op.cc
 * samples it, with our generator in place of Philox). Pixels are copied whole: any numeric
 * dtype, exact values. The output is a fresh tensor; the input is never written.
 *
 * Workload: once per training image (distorted_bbox_crop ahead of a resize to 224 x 224 in
 * TF's ImageNet recipes); images a few hundred pixels on a side, a handful of boxes. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/fn/image.h"

typedef struct {
    sl_fn base;
    char comp[SL_NAME_MAX];
    char boxes[SL_NAME_MAX]; /* distorted_bbox_crop's boxes component, "" for none */
    bool distorted;
    int oy, ox, th, tw;      /* crop_to_bounding_box's box */
    float min_covered, aspect_lo, aspect_hi, area_lo, area_hi; /* float32, as TF's attributes */
    int max_attempts;
    bool use_image;
} bbox_fn;

/* TF's Rectangle: [min_x, max_x) x [min_y, max_y) */
typedef struct {
    int x0, y0, x1, y1;
} rect;

static float rect_area(rect r) { return (float)((r.x1 - r.x0) * (r.y1 - r.y0)); }

static rect rect_intersect(rect a, rect b) {
    rect r = {a.x0 > b.x0 ? a.x0 : b.x0, a.y0 > b.y0 ? a.y0 : b.y0, a.x1 < b.x1 ? a.x1 : b.x1,
              a.y1 < b.y1 ? a.y1 : b.y1};
    if (r.x0 > r.x1 || r.y0 > r.y1) return (rect){0, 0, 0, 0};
    return r;
}

/* SimplePhilox's RandFloat ([0, 1), 24 bits) and Uniform(n) ([0, n)) from our generator */
static float rand_float(sl_rng *r) { return (float)(sl__rng_u64(r) >> 40) * 0x1.0p-24f; }
static int uniform_below(sl_rng *r, int n) { return (int)sl__rng_below(r, (uint64_t)n); }

static bool covers(rect crop, float min_covered, const rect *boxes, int n) {
    if (rect_area(crop) < 1.0f) return false;
    for (int i = 0; i < n; i++) {
        float a = rect_area(boxes[i]);
        if (a < 1.0f) continue;
        if (rect_area(rect_intersect(crop, boxes[i])) / a >= min_covered) return true;
    }
    return false;
}

/* TF's GenerateRandomCrop, line for line. */
static bool random_crop(int W, int H, float min_rel, float max_rel, float aspect, sl_rng *rng, rect *out) {
    if (max_rel <= 0.0f || aspect <= 0.0f || W <= 0 || H <= 0 || min_rel > max_rel) return false;
    const float min_area = min_rel * (float)W * (float)H;
    const float max_area = max_rel * (float)W * (float)H;
    int height = (int)lrintf(sqrtf(min_area / aspect));
    int max_height = (int)lrintf(sqrtf(max_area / aspect));
    if (lrintf((float)max_height * aspect) > W) {
        const float kEps = 0.0000001f;
        max_height = (int)(((double)W + 0.5 - (double)kEps) / (double)aspect);
        if (lrintf((float)max_height * aspect) > W) max_height -= 1;
    }
    if (max_height > H) max_height = H;
    if (height >= max_height) height = max_height;
    if (height < max_height) height += uniform_below(rng, max_height - height + 1);
    int width = (int)lrintf((float)height * aspect);
    float area = (float)(width * height);
    if (area < min_area) {
        height += 1;
        width = (int)lrintf((float)height * aspect);
        area = (float)(width * height);
    }
    if (area > max_area) {
        height -= 1;
        width = (int)lrintf((float)height * aspect);
        area = (float)(width * height);
    }
    if (area < min_area || area > max_area || width > W || height > H || width <= 0 || height <= 0) return false;
    int y = height < H ? uniform_below(rng, H - height) : 0;
    int x = width < W ? uniform_below(rng, W - width) : 0;
    *out = (rect){x, y, x + width, y + height};
    return true;
}

/* The object boxes of the call: from component f->boxes when the element has it with at
 * least one box, else the whole image (or SL_EINVAL without use_image). *boxes is malloc'd. */
static sl_status read_boxes(const bbox_fn *f, const sl_element *e, int W, int H, rect **boxes, int *n) {
    *boxes = NULL;
    *n = 0;
    int bi = -1;
    for (int i = 0; f->boxes[0] && i < e->n; i++)
        if (strcmp(e->names[i], f->boxes) == 0) bi = i;
    char d[128];
    if (bi >= 0) {
        const sl_tensor *t = &e->t[bi];
        bool ok = t->dtype == SL_DT_F32 && (t->rank == 2 || (t->rank == 3 && t->dims[0] == 1)) &&
                  t->dims[t->rank - 1] == 4;
        if (!ok) {
            sl_err(SL_EINVAL, "'%s' is %s; bounding boxes are float32 [n, 4] (ymin, xmin, ymax, xmax)", f->boxes,
                   sl_tensor_describe(t, d, sizeof d));
            sl_err_hint("parse the boxes as float(*) and reshape them to [n, 4]");
            return SL_EINVAL;
        }
        int64_t nb = t->dims[t->rank - 2];
        const float *v = t->data;
        if (nb > 0 && !(*boxes = malloc(sizeof **boxes * (size_t)nb)))
            return sl_err(SL_ENOMEM, "out of memory for %" PRId64 " boxes", nb);
        for (int64_t b = 0; b < nb; b++) {
            const float *q = v + 4 * b;
            for (int k = 0; k < 4; k++)
                if (!(q[k] >= 0.0f && q[k] <= 1.0f)) {
                    free(*boxes);
                    *boxes = NULL;
                    sl_err(SL_EINVAL, "box %" PRId64 " of '%s' has coordinate %g outside [0, 1]", b, f->boxes, q[k]);
                    sl_err_hint("boxes are (ymin, xmin, ymax, xmax) as fractions of the height and width");
                    return SL_EINVAL;
                }
            if (q[0] > q[2] || q[1] > q[3]) {
                free(*boxes);
                *boxes = NULL;
                sl_err(SL_EINVAL, "box %" PRId64 " of '%s' is (%g, %g, %g, %g): ymin > ymax or xmin > xmax", b,
                       f->boxes, q[0], q[1], q[2], q[3]);
                sl_err_hint("boxes are (ymin, xmin, ymax, xmax)");
                return SL_EINVAL;
            }
            (*boxes)[b] = (rect){(int)(q[1] * (float)W), (int)(q[0] * (float)H), (int)(q[3] * (float)W),
                                 (int)(q[2] * (float)H)};
        }
        *n = (int)nb;
    }
    if (*n > 0) return SL_OK;
    if (!f->use_image) {
        sl_err(SL_EINVAL, "no bounding boxes%s%s%s and use_image_if_no_boxes is off", f->boxes[0] ? " in '" : "",
               f->boxes, f->boxes[0] ? "'" : "");
        sl_err_hint("give the boxes, or allow the whole image (use_image_if_no_boxes=true)");
        return SL_EINVAL;
    }
    if (!(*boxes = malloc(sizeof **boxes))) return sl_err(SL_ENOMEM, "out of memory for a box");
    (*boxes)[0] = (rect){0, 0, W, H};
    *n = 1;
    return SL_OK;
}

static sl_status bbox_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const bbox_fn *f = (const bbox_fn *)fn;
    sl_status s = SL_OK;
    int64_t H, W, C;
    const sl_tensor *in = sl__fn_image_input(fn, e, f->comp, &H, &W, &C, &s);
    if (!in) return s;
    char d[128];
    int64_t oy = f->oy, ox = f->ox, th = f->th, tw = f->tw;
    if (f->distorted) {
        if (H > INT32_MAX / 2 || W > INT32_MAX / 2) return sl_err(SL_ERANGE, "'%s' is too large", f->comp);
        rect *boxes;
        int n;
        if ((s = read_boxes(f, e, (int)W, (int)H, &boxes, &n))) return s;
        sl_rng rng = {call->seed};
        rect crop = {0, 0, (int)W, (int)H};
        for (int i = 0; i < f->max_attempts; i++) {
            float aspect = rand_float(&rng) * (f->aspect_hi - f->aspect_lo) + f->aspect_lo;
            rect r;
            if (random_crop((int)W, (int)H, f->area_lo, f->area_hi, aspect, &rng, &r) &&
                covers(r, f->min_covered, boxes, n)) {
                crop = r;
                break;
            }
        }
        free(boxes);
        oy = crop.y0;
        ox = crop.x0;
        th = crop.y1 - crop.y0;
        tw = crop.x1 - crop.x0;
    } else if (oy + th > H || ox + tw > W) {
        sl_err(SL_EINVAL, "the box at row %" PRId64 ", column %" PRId64 " of %" PRId64 "x%" PRId64
               " does not fit '%s' (%s)", oy, ox, th, tw, f->comp, sl_tensor_describe(in, d, sizeof d));
        sl_err_hint("offset + target must be at most the height (and width)");
        return SL_EINVAL;
    }
    if (oy == 0 && ox == 0 && th == H && tw == W) return SL_OK;
    int64_t dims[3] = {th, tw, C};
    sl_tensor out;
    if ((s = sl__fn_out_alloc(call, f->comp, &out, in->dtype, in->rank, dims))) return s;
    size_t px = (size_t)C * sl_dtype_size(in->dtype);
    for (int64_t y = 0; y < th; y++)
        memcpy((uint8_t *)out.data + (size_t)y * (size_t)tw * px,
               (const uint8_t *)in->data + ((size_t)(oy + y) * (size_t)W + (size_t)ox) * px, (size_t)tw * px);
    if ((s = sl_element_set(e, f->comp, &out))) sl_tensor_release(&out);
    return s;
}

static const sl_fn_vt crop_vt = {.name = "crop_to_bounding_box", .apply = bbox_apply};
static const sl_fn_vt distorted_vt = {.name = "distorted_bbox_crop", .apply = bbox_apply};

static sl_status bbox_new(const sl_fn_vt *vt, const char *comp, bbox_fn **out) {
    *out = NULL;
    if (!comp || !*comp || strlen(comp) >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "%s: component name must be 1..%d characters", vt->name, SL_NAME_MAX - 1);
    bbox_fn *f = sl__fn_new(sizeof *f, vt, vt->name);
    if (!f) return SL_ENOMEM;
    snprintf(f->comp, sizeof f->comp, "%s", comp);
    *out = f;
    return SL_OK;
}

sl_status sl_fn_crop_to_bounding_box(const char *comp, int offset_height, int offset_width, int target_height,
                                     int target_width, sl_fn **out) {
    *out = NULL;
    if (offset_height < 0 || offset_width < 0)
        return sl_err(SL_EINVAL, "crop_to_bounding_box: offsets %d, %d must be >= 0", offset_height, offset_width);
    if (target_height < 1 || target_width < 1)
        return sl_err(SL_EINVAL, "crop_to_bounding_box: target %dx%d must be at least 1x1", target_height,
                      target_width);
    bbox_fn *f;
    sl_status s = bbox_new(&crop_vt, comp, &f);
    if (s) return s;
    f->oy = offset_height;
    f->ox = offset_width;
    f->th = target_height;
    f->tw = target_width;
    *out = &f->base;
    return SL_OK;
}

sl_status sl_fn_distorted_bbox_crop(const char *comp, const char *boxes, double min_object_covered,
                                    double aspect_lo, double aspect_hi, double area_lo, double area_hi,
                                    int max_attempts, bool use_image_if_no_boxes, sl_fn **out) {
    *out = NULL;
    const char *name = "distorted_bbox_crop";
    if (boxes && (!*boxes || strlen(boxes) >= SL_NAME_MAX))
        return sl_err(SL_EINVAL, "%s: the boxes component name must be 1..%d characters", name, SL_NAME_MAX - 1);
    if (!(min_object_covered >= 0 && min_object_covered <= 1))
        return sl_err(SL_EINVAL, "%s: min_object_covered %g must be in [0, 1]", name, min_object_covered);
    if (!(aspect_lo > 0 && aspect_lo <= aspect_hi && isfinite(aspect_hi)))
        return sl_err(SL_EINVAL, "%s: aspect_ratio_range [%g, %g] must have 0 < lo <= hi", name, aspect_lo, aspect_hi);
    if (!(area_lo > 0 && area_lo <= area_hi && area_hi <= 1))
        return sl_err(SL_EINVAL, "%s: area_range [%g, %g] must have 0 < lo <= hi <= 1", name, area_lo, area_hi);
    if (max_attempts < 1 || max_attempts > 100000)
        return sl_err(SL_EINVAL, "%s: max_attempts %d must be 1..100000", name, max_attempts);
    bbox_fn *f;
    sl_status s = bbox_new(&distorted_vt, comp, &f);
    if (s) return s;
    f->distorted = true;
    if (boxes) snprintf(f->boxes, sizeof f->boxes, "%s", boxes);
    f->min_covered = (float)min_object_covered;
    f->aspect_lo = (float)aspect_lo;
    f->aspect_hi = (float)aspect_hi;
    f->area_lo = (float)area_lo;
    f->area_hi = (float)area_hi;
    f->max_attempts = max_attempts;
    f->use_image = use_image_if_no_boxes;
    *out = &f->base;
    return SL_OK;
}
