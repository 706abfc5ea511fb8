/* pipeline/fn/parse_example.c: every dtype and shape of an Example built with sl_exb_*,
 * defaults, `as`, bytes kept as views of the record; each mismatch refused with its message
 * and the element left as it was; bad specs refused. */
#include <stdatomic.h>

#include "pipeline/fn/image.h" /* and pipeline/internal.h */
#include "sluice/example.h"
#include "sluice/fn.h"
#include "helper_fn.h"
#include "test.h"

/* A serialized Example with label=int64 7, image=bytes "abc" and "", x=float [1.5 2.5 3.5],
 * pix=784 floats, empty=a Feature with no list. */
static sl_tensor example_record(size_t offset) {
    sl_exb *b;
    if (sl_exb_new(&b)) abort();
    int64_t label = 7;
    sl_bytes img[2] = {{(const uint8_t *)"abc", 3}, {(const uint8_t *)"", 0}};
    float x[3] = {1.5f, 2.5f, 3.5f}, pix[784];
    for (int i = 0; i < 784; i++) pix[i] = (float)i / 4;
    if (sl_exb_int64s(b, "label", &label, 1) || sl_exb_bytes(b, "image", img, 2) ||
        sl_exb_floats(b, "x", x, 3) || sl_exb_floats(b, "pix", pix, 784) ||
        sl_exb_floats(b, "pix783", pix, 783))
        abort();
    uint8_t *data;
    size_t len;
    if (sl_exb_serialize(b, &data, &len)) abort();
    sl_tensor t = sl_test_bytes(data, len, offset);
    free(data);
    sl_exb_free(b);
    return t;
}

TEST(test_parse_example) {
    sl_feature_spec specs[8] = {
        sl_test_spec("label", SL_DT_I64, 0, 0, 0, 0),
        sl_test_spec("image", SL_DT_BYTES, 1, -1, 0, 0),
        sl_test_spec("x", SL_DT_F32, 1, -1, 0, 0),
        sl_test_spec("pix", SL_DT_F32, 3, 28, 28, 1),
        sl_test_spec("weight", SL_DT_F32, 0, 0, 0, 0),
        sl_test_spec("tag", SL_DT_BYTES, 0, 0, 0, 0),
        sl_test_spec("ids", SL_DT_I64, 1, 2, 0, 0),
        sl_test_spec("label", SL_DT_I64, 1, -1, 0, 0),
    };
    specs[4].has_default = true; specs[4].default_num = 4.25;
    specs[5].has_default = true; specs[5].default_bytes = "none";
    specs[6].has_default = true; specs[6].default_num = -3;
    specs[7].as = "label_vec";
    sl_fn *fn;
    ASSERT_OK(sl_fn_parse_example("record", specs, 8, &fn));
    sl_fn_states *st;
    ASSERT_OK(sl__fn_states_new(fn, &st));
    for (int round = 0; round < 3; round++) { /* the thread state is reused */
        sl_element e;
        sl_test_elem1(&e, "record", example_record((size_t)round));
        int64_t one = 1;
        sl_tensor keep = sl_test_tensor(SL_DT_I64, 0, NULL, &one);
        ASSERT_OK(sl_element_set(&e, "keep", &keep));
        sl_buf *recbuf = sl_buf_ref(e.t[0].aux);
        ASSERT_OK(sl__fn_apply(fn, &e, 0, 0, round == 2 ? NULL : st));
        ASSERT_EQ(e.n, 9);
        ASSERT(sl_test_comp(&e, "record") == NULL);
        ASSERT(sl_test_comp(&e, "keep") != NULL);
        const sl_tensor *t = sl_test_comp(&e, "label");
        ASSERT(t && t->dtype == SL_DT_I64 && t->rank == 0);
        ASSERT_EQ(*(int64_t *)t->data, 7);
        t = sl_test_comp(&e, "image");
        ASSERT(t && t->dtype == SL_DT_BYTES && t->rank == 1 && t->dims[0] == 2);
        const sl_bytes *bv = t->data;
        ASSERT_EQ(bv[0].len, 3);
        ASSERT_MEMEQ(bv[0].ptr, "abc", 3);
        ASSERT_EQ(bv[1].len, 0);
        /* zero-copy: the bytes lie inside the record's buffer, which the output keeps alive */
        ASSERT(bv[0].ptr >= (const uint8_t *)recbuf->data &&
               bv[0].ptr + 3 <= (const uint8_t *)recbuf->data + recbuf->size);
        ASSERT(t->aux == recbuf);
        t = sl_test_comp(&e, "x");
        ASSERT(t && t->rank == 1 && t->dims[0] == 3);
        ASSERT_MEMEQ(t->data, ((float[]){1.5f, 2.5f, 3.5f}), 12);
        t = sl_test_comp(&e, "pix");
        ASSERT(t && t->rank == 3 && t->dims[0] == 28 && t->dims[1] == 28 && t->dims[2] == 1);
        ASSERT(((float *)t->data)[783] == 783 / 4.0f);
        t = sl_test_comp(&e, "weight");
        ASSERT(t && t->dtype == SL_DT_F32 && t->rank == 0 && *(float *)t->data == 4.25f);
        t = sl_test_comp(&e, "tag");
        ASSERT(t && t->dtype == SL_DT_BYTES && t->rank == 0);
        ASSERT_EQ(((sl_bytes *)t->data)->len, 4);
        ASSERT_MEMEQ(((sl_bytes *)t->data)->ptr, "none", 4);
        t = sl_test_comp(&e, "ids");
        ASSERT(t && t->rank == 1 && t->dims[0] == 2);
        ASSERT_MEMEQ(t->data, ((int64_t[]){-3, -3}), 16);
        t = sl_test_comp(&e, "label_vec");
        ASSERT(t && t->rank == 1 && t->dims[0] == 1 && *(int64_t *)t->data == 7);
        sl_element_clear(&e);
        /* the output was the last holder of the record besides us */
        ASSERT_EQ(atomic_load(&recbuf->refs), 1);
        sl_buf_unref(recbuf);
    }
    sl__fn_states_free(fn, st);
    sl_fn_unref(fn);
}

TEST(test_parse_example_errors) {
    struct { sl_feature_spec s; sl_status code; const char *msg; } cases[] = {
        {sl_test_spec("label", SL_DT_F32, 0, 0, 0, 0), SL_EINVAL,
         "parse_example: feature 'label': expected float, found int64"},
        {sl_test_spec("x", SL_DT_I64, 1, -1, 0, 0), SL_EINVAL,
         "parse_example: feature 'x': expected int64, found float"},
        {sl_test_spec("label", SL_DT_BYTES, 0, 0, 0, 0), SL_EINVAL,
         "parse_example: feature 'label': expected bytes, found int64"},
        {sl_test_spec("pix783", SL_DT_F32, 1, 784, 0, 0), SL_EINVAL,
         "parse_example: feature 'pix783': expected 784 values, found 783\n"
         "---> HINT: the spec's shape [784] holds 784 values"},
        {sl_test_spec("x", SL_DT_F32, 0, 0, 0, 0), SL_EINVAL,
         "parse_example: feature 'x': expected 1 value, found 3"},
        {sl_test_spec("x", SL_DT_F32, 2, -1, 2, 0), SL_EINVAL,
         "parse_example: feature 'x': expected a multiple of 2 values, found 3"},
        {sl_test_spec("nope", SL_DT_F32, 0, 0, 0, 0), SL_EINVAL,
         "parse_example: feature 'nope' is missing (and has no default); the record has: "
         "label (int64), image (bytes), x (float), pix (float), pix783 (float)"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        sl_fn *fn;
        ASSERT_OK(sl_fn_parse_example("record", &cases[k].s, 1, &fn));
        sl_element e;
        sl_test_elem1(&e, "record", example_record(0));
        ASSERT_EQ(sl_test_apply(fn, &e, 0), cases[k].code);
        ASSERT_STREQ(sl_errmsg(), cases[k].msg);
        ASSERT_EQ(e.n, 1); /* left as it was */
        ASSERT(sl_test_comp(&e, "record") != NULL);
        sl_element_clear(&e);
        sl_fn_unref(fn);
    }
    /* the brief's example: 'image' shaped 28x28x1 with 783 values */
    sl_exb *b;
    ASSERT_OK(sl_exb_new(&b));
    float pix[783] = {0};
    ASSERT_OK(sl_exb_floats(b, "image", pix, 783));
    uint8_t *data;
    size_t len;
    ASSERT_OK(sl_exb_serialize(b, &data, &len));
    sl_exb_free(b);
    sl_feature_spec s = sl_test_spec("image", SL_DT_F32, 3, 28, 28, 1);
    sl_fn *fn;
    ASSERT_OK(sl_fn_parse_example("record", &s, 1, &fn));
    sl_element e;
    sl_test_elem1(&e, "record", sl_test_bytes(data, len, 0));
    free(data);
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "parse_example: feature 'image': expected 784 values, found 783\n"
                              "---> HINT: the spec's shape [28,28,1] holds 784 values");
    sl_element_clear(&e);
    /* not an Example at all */
    sl_test_elem1(&e, "record", sl_test_bytes("\xff\xff\xff", 3, 0));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_ECORRUPT);
    ASSERT(strncmp(sl_errmsg(), "parse_example: malformed Example in 'record': ", 46) == 0);
    sl_element_clear(&e);
    /* not bytes */
    int64_t v = 1;
    sl_test_elem1(&e, "record", sl_test_tensor(SL_DT_I64, 0, NULL, &v));
    ASSERT_EQ(sl_test_apply(fn, &e, 0), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "parse_example: 'record' is int64[]; parse_example needs one serialized "
                              "Example (a byte string)");
    sl_element_clear(&e);
    sl_fn_unref(fn);
    /* bad specs */
    sl_feature_spec two[2] = {sl_test_spec("a", SL_DT_F32, 0, 0, 0, 0), sl_test_spec("b", SL_DT_F32, 0, 0, 0, 0)};
    two[1].as = "a";
    ASSERT_EQ(sl_fn_parse_example("record", two, 2, &fn), SL_EINVAL);
    ASSERT(fn == NULL);
    ASSERT_STREQ(sl_errmsg(), "parse_example: two specs write component 'a'\n"
                              "---> HINT: give one of them another name with `as`");
    two[1] = sl_test_spec("b", SL_DT_I32, 0, 0, 0, 0);
    ASSERT_EQ(sl_fn_parse_example("record", two, 2, &fn), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "parse_example: feature 'b': dtype int32 is not bytes, int64 or float32\n"
                              "---> HINT: parse as int64 or float32, then cast");
}

int main(void) {
    RUN(test_parse_example);
    RUN(test_parse_example_errors);
    TEST_MAIN_END();
}
