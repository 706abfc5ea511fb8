/* The config-language entries of the colour, rotation, erasing, padding and box-crop
 * functions (pipeline/from_config_fn.c): every one builds and runs in a pipeline, by
 * position and by name, the fixed ones give exactly what their C constructor gives, and
 * wrong arguments are reported at their spot with the usage. */
#include <stdlib.h>

#include "sluice/config.h"
#include "sluice/fn.h"
#include "sluice/from_config.h"
#include "sluice/pipeline.h"
#include "helper_fn.h"
#include "test.h"

/* synth(): a 24x32x3 uint8 image from the element's value, and a float32 box [1, 4] */
static sl_status synth_apply(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    int64_t v = *(int64_t *)e->t[sl_element_find(e, "value")].data;
    int64_t d[3] = {24, 32, 3}, bd[2] = {1, 4};
    sl_tensor t, b;
    sl_status s = sl_tensor_alloc(&t, SL_DT_U8, 3, d);
    if (s) return s;
    for (int i = 0; i < 24 * 32 * 3; i++) ((uint8_t *)t.data)[i] = (uint8_t)(i * 11 + v * 3 + i / 17);
    if ((s = sl_element_set(e, "image", &t))) {
        sl_tensor_release(&t);
        return s;
    }
    if ((s = sl_tensor_alloc(&b, SL_DT_F32, 2, bd))) return s;
    float box[4] = {0.1f, 0.2f, 0.9f, 0.8f};
    memcpy(b.data, box, sizeof box);
    if ((s = sl_element_set(e, "bbox", &b))) sl_tensor_release(&b);
    return s;
}

static sl_status find_fn(void *ctx, const char *name, sl_fn **out) {
    (void)ctx;
    *out = NULL;
    if (strcmp(name, "synth") != 0) return SL_ENOTFOUND;
    return sl_fn_custom("synth", synth_apply, NULL, NULL, out);
}

/* Build `range 0 2 | map synth() | CALL` and take its first element's image into *out
 * (a copy the caller frees; *dims its shape). Returns the build's or the run's status. */
static sl_status run_call(const char *call, sl_tensor *out) {
    char text[1024];
    snprintf(text, sizeof text, "pipeline p {\n range 0 2\n map synth() | %s\n}\n", call);
    sl_cfg *c;
    sl_status s = sl_cfg_parse(text, strlen(text), "p.sl", &c);
    if (s) return s;
    sl_pipeline_env env = sl_pipeline_env_default();
    env.find_fn = find_fn;
    sl_dataset *ds = NULL;
    s = sl_pipeline_from_config(c, "p", &env, &ds);
    sl_cfg_free(c);
    if (s) return s;
    sl_iter *it;
    if ((s = sl_iter_create(ds, NULL, &it))) {
        sl_dataset_unref(ds);
        return s;
    }
    sl_element e;
    sl_element_init(&e);
    if (!(s = sl_iter_next(it, &e))) {
        int k = sl_element_find(&e, "image");
        s = k < 0 ? SL_EINTERNAL : sl_tensor_clone(out, &e.t[k]);
        sl_element_clear(&e);
    }
    sl_iter_close(it);
    sl_dataset_unref(ds);
    return s;
}

TEST(test_every_function_builds_and_runs) {
    static const struct {
        const char *call;
        int64_t h, w, c; /* the output shape; 0: any */
    } cases[] = {
        {"adjust_brightness(image, 1.5)", 24, 32, 3},
        {"adjust_contrast(image, factor=0.5)", 24, 32, 3},
        {"adjust_saturation(image, 2)", 24, 32, 3},
        {"adjust_hue(image, -0.25)", 24, 32, 3},
        {"color_jitter(image, brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)", 24, 32, 3},
        {"color_jitter(image, contrast=[0.5, 0.9], hue=[-0.2, 0.1])", 24, 32, 3},
        {"rgb_to_grayscale(image)", 24, 32, 1},
        {"rgb_to_grayscale(image, channels=3)", 24, 32, 3},
        {"random_grayscale(image, p=1)", 24, 32, 3},
        {"rot90(image)", 32, 24, 3},
        {"rot90(image, k=2)", 24, 32, 3},
        {"random_rot90(image)", 0, 0, 3},
        {"erase(image, 1, 2, 3, 4, value=[1, 2, 3])", 24, 32, 3},
        {"random_erasing(image)", 24, 32, 3},
        {"random_erasing(image, p=1, scale=[0.1, 0.2], ratio=[0.5, 2], value=random)", 24, 32, 3},
        {"resize_with_pad(image, 48x40)", 48, 40, 3},
        {"crop_to_bounding_box(image, 2, 3, 10, 12)", 10, 12, 3},
        {"distorted_bbox_crop(image)", 0, 0, 3},
        {"distorted_bbox_crop(image, boxes=bbox, min_object_covered=0.5, aspect_ratio_range=[0.5, 2], "
         "area_range=[0.1, 1], max_attempts=50, use_image_if_no_bounding_boxes=false)", 0, 0, 3},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        sl_tensor t;
        sl_status s = run_call(cases[k].call, &t);
        if (s) {
            FAILF("%s: %s", cases[k].call, sl_errmsg());
            continue;
        }
        ASSERT_EQ(t.rank, 3);
        if (cases[k].h) ASSERT_EQ(t.dims[0], cases[k].h);
        if (cases[k].w) ASSERT_EQ(t.dims[1], cases[k].w);
        ASSERT_EQ(t.dims[2], cases[k].c);
        sl_tensor_release(&t);
    }
}

TEST(test_fixed_functions_equal_their_constructors) {
    sl_tensor a;
    ASSERT_OK(run_call("adjust_hue(image, 0.3)", &a));
    sl_tensor b;
    ASSERT_OK(run_call("cast(image, uint8)", &b)); /* the input (adjust_hue(0) is not: it truncates) */
    sl_fn *fn;
    ASSERT_OK(sl_fn_adjust_hue("image", 0.3, &fn));
    sl_element e;
    sl_tensor in;
    sl_tensor_share(&in, &b);
    sl_test_elem1(&e, "image", in);
    ASSERT_OK(sl_test_apply(fn, &e, 0));
    ASSERT_MEMEQ(e.t[0].data, a.data, sl_tensor_nbytes(&a));
    sl_element_clear(&e);
    sl_fn_unref(fn);
    sl_tensor_release(&a);
    sl_tensor_release(&b);
}

TEST(test_config_errors) {
    static const struct {
        const char *call, *msg;
    } cases[] = {
        {"adjust_hue(image, 0.7)", "adjust_hue: the hue factor is in [-0.5, 0.5]"},
        {"adjust_brightness(image)", "adjust_brightness: missing argument 'factor'"},
        {"color_jitter(image, hue=0.6)", "color_jitter: hue 0.6 must be in [0, 0.5]"},
        {"color_jitter(image, saturation=[2, 1])",
         "color_jitter: saturation is a number or [lo, hi] with 0 <= lo <= hi <= 1e+06"},
        {"rgb_to_grayscale(image, channels=2)", "rgb_to_grayscale: channels must be 1 or 3"},
        {"random_grayscale(image, p=2)", "random_grayscale: p is a probability: 0 to 1"},
        {"random_erasing(image, scale=[0.1, 2])", "random_erasing: scale is a fraction of the area: at most 1"},
        {"erase(image, 0, 0, 0, 1)", "0 is outside 1..1048576"},
        {"crop_to_bounding_box(image, 0, 0, 30, 10)", "does not fit 'image'"},
        {"distorted_bbox_crop(image, max_attempt=5)", "distorted_bbox_crop: unknown parameter 'max_attempt'"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        sl_tensor t;
        sl_status s = run_call(cases[k].call, &t);
        if (s == SL_OK) {
            FAILF("%s: no error", cases[k].call);
            sl_tensor_release(&t);
            continue;
        }
        ASSERT_CONTAINS(sl_errmsg(), cases[k].msg);
    }
}

int main(void) {
    RUN(test_every_function_builds_and_runs);
    RUN(test_fixed_functions_equal_their_constructors);
    RUN(test_config_errors);
    TEST_MAIN_END();
}
