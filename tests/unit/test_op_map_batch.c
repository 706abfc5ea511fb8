/* pipeline/ops/map_batch.c: a map then a batch, fused, equals the map and a batch that is
 * not fused, batch for batch; the Fashion-MNIST chain parse_example | decode_raw | scale
 * writes each image into its slot of the batch with the values scale computes. */
#include "sluice/example.h"
#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "test.h"

/* map then batch (fused) equals map, then batch of a non-map (unfused), element for element */
TEST(test_map_batch_equals_map_then_batch) {
    sl_dataset *m, *fused, *t, *unfused;
    ASSERT_OK(sl_test_range_map(1003, "times_ten", sl_test_append_digit, NULL, 3, &m));
    sl_batch_opts o = sl_batch_opts_default(10);
    ASSERT_OK(sl_ds_batch(m, &o, &fused));
    ASSERT_STREQ(sl_dataset_op(fused), "map_batch");
    sl_batch_opts po = o;
    po.padded = true; /* padded batches are not fused; with equal shapes they pad nothing */
    ASSERT_OK(sl_ds_batch(m, &po, &unfused));
    t = NULL;
    ASSERT_STREQ(sl_dataset_op(unfused), "batch");
    ASSERT_EQ(sl_dataset_cardinality(fused), 101);
    sl_iter *a, *b;
    ASSERT_OK(sl_iter_create(fused, NULL, &a));
    ASSERT_OK(sl_iter_create(unfused, NULL, &b));
    sl_element ea, eb;
    sl_element_init(&ea);
    sl_element_init(&eb);
    int batches = 0;
    for (;;) {
        sl_status sa = sl_iter_next(a, &ea), sb = sl_iter_next(b, &eb);
        ASSERT_EQ(sa, sb);
        if (sa == SL_END) break;
        ASSERT_OK(sa);
        ASSERT_EQ(ea.t[0].dims[0], eb.t[0].dims[0]);
        ASSERT_MEMEQ(ea.t[0].data, eb.t[0].data, sl_tensor_nbytes(&ea.t[0]));
        sl_element_clear(&ea);
        sl_element_clear(&eb);
        batches++;
    }
    ASSERT_EQ(batches, 101);
    sl_iter_close(a);
    sl_iter_close(b);
    sl_dataset_unref(fused);
    sl_dataset_unref(unfused);
    sl_dataset_unref(t);
    sl_dataset_unref(m);
}

/* value v -> {"record": a serialized Example: image, 784 bytes (7v + 3i) % 256, label v} */
static sl_status mnist_record(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx, (void)call;
    int64_t v = *(int64_t *)e->t[0].data;
    uint8_t px[784];
    for (int i = 0; i < 784; i++) px[i] = (uint8_t)((7 * v + 3 * i) % 256);
    sl_exb *b;
    sl_status s = sl_exb_new(&b);
    if (s) return s;
    sl_bytes im = {px, sizeof px};
    uint8_t *rec = NULL;
    size_t len;
    if (!(s = sl_exb_bytes(b, "image", &im, 1)) && !(s = sl_exb_int64s(b, "label", &v, 1)))
        s = sl_exb_serialize(b, &rec, &len);
    sl_exb_free(b);
    if (s) return s;
    sl_buf *rb = sl_buf_copy(rec, len);
    free(rec);
    sl_tensor t;
    if (!rb || (s = sl_tensor_alloc(&t, SL_DT_BYTES, 0, NULL))) {
        sl_buf_unref(rb);
        return rb ? s : SL_ENOMEM;
    }
    *(sl_bytes *)t.data = (sl_bytes){rb->data, len};
    t.aux = rb;
    sl_element_clear(e);
    if ((s = sl_element_set(e, "record", &t))) sl_tensor_release(&t);
    return s;
}

/* Every batch of ds (float32 "image" [B,28,28,1], int64 "label" [B]) appended: the images
 * into *img, the labels into *lab (malloc'd), *n examples. SL_EINTERNAL on another shape. */
static sl_status collect_mnist(sl_dataset *ds, float **img, int64_t **lab, int64_t *n) {
    *img = NULL;
    *lab = NULL;
    *n = 0;
    sl_iter *it;
    sl_status s = sl_iter_create(ds, NULL, &it);
    sl_element e;
    sl_element_init(&e);
    while (!s && (s = sl_iter_next(it, &e)) == SL_OK) {
        int ii = sl_element_find(&e, "image"), li = sl_element_find(&e, "label");
        const sl_tensor *ti = ii < 0 ? NULL : &e.t[ii], *tl = li < 0 ? NULL : &e.t[li];
        if (!ti || !tl || ti->dtype != SL_DT_F32 || ti->rank != 4 || ti->dims[1] * ti->dims[2] * ti->dims[3] != 784 ||
            tl->dtype != SL_DT_I64 || tl->rank != 1 || tl->dims[0] != ti->dims[0]) {
            s = SL_EINTERNAL;
            break;
        }
        int64_t b = ti->dims[0];
        float *ni = realloc(*img, (size_t)(*n + b) * 784 * sizeof(float));
        int64_t *nl = realloc(*lab, (size_t)(*n + b) * sizeof(int64_t));
        if (ni) *img = ni;
        if (nl) *lab = nl;
        if (!ni || !nl) {
            s = SL_ENOMEM;
            break;
        }
        memcpy(*img + *n * 784, ti->data, (size_t)b * 784 * sizeof(float));
        memcpy(*lab + *n, tl->data, (size_t)b * sizeof(int64_t));
        *n += b;
        sl_element_clear(&e);
    }
    sl_element_clear(&e);
    sl_iter_close(it);
    return s == SL_END ? SL_OK : s;
}

/* The Fashion-MNIST map parse_example | decode_raw | scale before a batch: fused into
 * map_batch, decode_raw absorbs the scale and writes each image straight into its slot of
 * the batch; the batches equal those of the same functions run one map each, then a batch
 * that is not fused, and every value is (float)(pixel * (1/255)) as scale computes it. */
TEST(test_map_batch_mnist_chain) {
    sl_feature_spec specs[2] = {{.name = "image", .dtype = SL_DT_BYTES},
                                {.name = "label", .dtype = SL_DT_I64}};
    const int64_t shape[3] = {28, 28, 1};
    sl_fn *fns[4], *chain, *head;
    ASSERT_OK(sl_fn_custom("mnist_record", mnist_record, NULL, NULL, &fns[0]));
    ASSERT_OK(sl_fn_parse_example("record", specs, 2, &fns[1]));
    ASSERT_OK(sl_fn_decode_raw("image", SL_DT_U8, 3, shape, &fns[2]));
    ASSERT_OK(sl_fn_scale("image", 1.0 / 255, &fns[3]));
    ASSERT_OK(sl_fn_chain(fns, 4, &chain));
    ASSERT_OK(sl_fn_chain(fns, 3, &head)); /* the reference: scale in a map of its own */
    sl_dataset *r, *m, *fused, *m1, *m2, *unfused;
    ASSERT_OK(sl_ds_range(0, 203, 1, &r));
    ASSERT_OK(sl_ds_map(r, chain, 3, true, &m));
    sl_batch_opts o = sl_batch_opts_default(16);
    ASSERT_OK(sl_ds_batch(m, &o, &fused));
    ASSERT_STREQ(sl_dataset_op(fused), "map_batch");
    ASSERT_OK(sl_ds_map(r, head, 2, true, &m1));
    ASSERT_OK(sl_ds_map(m1, fns[3], 1, true, &m2));
    sl_batch_opts po = o;
    po.padded = true; /* not fused; with equal shapes it pads nothing */
    ASSERT_OK(sl_ds_batch(m2, &po, &unfused));
    ASSERT_STREQ(sl_dataset_op(unfused), "batch");
    float *img[2];
    int64_t *lab[2], n[2];
    ASSERT_OK(collect_mnist(fused, &img[0], &lab[0], &n[0]));
    ASSERT_OK(collect_mnist(unfused, &img[1], &lab[1], &n[1]));
    ASSERT_EQ(n[0], 203);
    ASSERT_EQ(n[1], 203);
    ASSERT_MEMEQ(img[0], img[1], 203 * 784 * sizeof(float));
    ASSERT_MEMEQ(lab[0], lab[1], 203 * sizeof(int64_t));
    for (int64_t k = 0; k < 203; k++) {
        ASSERT_EQ(lab[0][k], k);
        for (int i = 0; i < 784; i++)
            ASSERT(img[0][k * 784 + i] == (float)((double)((7 * k + 3 * i) % 256) * (1.0 / 255)));
    }
    for (int i = 0; i < 2; i++) {
        free(img[i]);
        free(lab[i]);
    }
    sl_dataset_unref(fused);
    sl_dataset_unref(unfused);
    sl_dataset_unref(m2);
    sl_dataset_unref(m1);
    sl_dataset_unref(m);
    sl_dataset_unref(r);
    sl_fn_unref(chain);
    sl_fn_unref(head);
    for (int i = 0; i < 4; i++) sl_fn_unref(fns[i]);
}

int main(void) {
    RUN(test_map_batch_equals_map_then_batch);
    RUN(test_map_batch_mnist_chain);
    TEST_MAIN_END();
}
