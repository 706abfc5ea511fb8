/* pipeline/: the iterator protocol and the core ops — range, take, skip, repeat, shard,
 * filter, batch (plain and padded), map (parallel, ordered and unordered) and the fused
 * map_batch — plus closing mid-stream, and closing with every op blocked (the cancellation
 * hooks wake them). */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "sluice/example.h"
#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "pipeline/internal.h"
#include "sluice/pool.h"
#include "test.h"

/* Read every element's scalar int64 "value" into out (up to cap); returns the count, or
 * -1 - (index of the failure) on an error. */
static int drain_values(sl_dataset *ds, int64_t *out, int cap) {
    sl_iter *it;
    if (sl_iter_create(ds, NULL, &it)) return -1000;
    sl_element e;
    sl_element_init(&e);
    int n = 0;
    sl_status s;
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        int c = sl_element_find(&e, "value");
        if (c < 0 || n >= cap) { sl_element_clear(&e); sl_iter_close(it); return -2000; }
        out[n++] = *(int64_t *)e.t[c].data;
        sl_element_clear(&e);
    }
    sl_iter_close(it);
    return s == SL_END ? n : -1 - n;
}

TEST(test_range_take_skip_repeat) {
    sl_dataset *r, *t, *k, *rep;
    int64_t v[64];
    ASSERT_OK(sl_ds_range(0, 10, 3, &r));
    ASSERT_EQ(sl_dataset_cardinality(r), 4);
    ASSERT_EQ(drain_values(r, v, 64), 4);
    ASSERT_EQ(v[0], 0); ASSERT_EQ(v[3], 9);
    ASSERT_OK(sl_ds_take(r, 3, &t));
    ASSERT_OK(sl_ds_skip(t, 1, &k));
    ASSERT_EQ(sl_dataset_cardinality(k), 2);
    ASSERT_EQ(drain_values(k, v, 64), 2);
    ASSERT_EQ(v[0], 3); ASSERT_EQ(v[1], 6);
    ASSERT_OK(sl_ds_repeat(k, 3, &rep));
    ASSERT_EQ(sl_dataset_cardinality(rep), 6);
    ASSERT_EQ(drain_values(rep, v, 64), 6);
    ASSERT_EQ(v[4], 3); ASSERT_EQ(v[5], 6);
    sl_dataset_unref(rep);
    ASSERT_OK(sl_ds_repeat(k, 0, &rep));
    ASSERT_EQ(drain_values(rep, v, 64), 0);
    sl_dataset_unref(rep);
    /* forever over an empty input ends instead of spinning */
    sl_dataset *empty, *forever;
    ASSERT_OK(sl_ds_range(0, 0, 1, &empty));
    ASSERT_OK(sl_ds_repeat(empty, SL_INFINITE, &forever));
    ASSERT_EQ(drain_values(forever, v, 64), 0);
    sl_dataset_unref(forever);
    sl_dataset_unref(empty);
    /* take(-1) = all, skip(-1) = none left */
    sl_dataset_unref(t);
    ASSERT_OK(sl_ds_take(r, -1, &t));
    ASSERT_EQ(drain_values(t, v, 64), 4);
    sl_dataset_unref(t);
    sl_dataset_unref(k);
    ASSERT_OK(sl_ds_skip(r, -1, &k));
    ASSERT_EQ(drain_values(k, v, 64), 0);
    sl_dataset_unref(k);
    ASSERT_EQ(sl_ds_range(0, 1, 0, &t), SL_EINVAL);
    ASSERT(t == NULL);
    /* negative step */
    sl_dataset *neg;
    ASSERT_OK(sl_ds_range(5, 0, -2, &neg));
    ASSERT_EQ(sl_dataset_cardinality(neg), 3);
    ASSERT_EQ(drain_values(neg, v, 64), 3);
    ASSERT_EQ(v[2], 1);
    sl_dataset_unref(neg);
    sl_dataset_unref(r);
}

TEST(test_shard_disjoint_covering) {
    sl_dataset *r;
    ASSERT_OK(sl_ds_range(0, 103, 1, &r));
    int seen[103] = {0};
    for (int idx = 0; idx < 4; idx++) {
        sl_dataset *s;
        int64_t v[103];
        ASSERT_OK(sl_ds_shard(r, 4, idx, &s));
        int n = drain_values(s, v, 103);
        ASSERT_EQ(n, sl_dataset_cardinality(s));
        ASSERT_EQ(n, idx < 3 ? 26 : 25);
        for (int i = 0; i < n; i++) {
            ASSERT_EQ(v[i] % 4, idx);
            seen[v[i]]++;
        }
        sl_dataset_unref(s);
    }
    for (int i = 0; i < 103; i++) ASSERT_EQ(seen[i], 1);
    sl_dataset *bad;
    ASSERT_EQ(sl_ds_shard(r, 4, 4, &bad), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "shard: index 4 must be in 0..3 (num 4)");
    sl_dataset_unref(r);
}

static int is_odd(void *ctx, const sl_element *e) {
    (void)ctx;
    return (*(int64_t *)e->t[0].data) % 2 == 1;
}

TEST(test_filter) {
    sl_dataset *r, *f;
    int64_t v[32];
    ASSERT_OK(sl_ds_range(0, 10, 1, &r));
    ASSERT_OK(sl_ds_filter(r, is_odd, NULL, &f));
    ASSERT_EQ(drain_values(f, v, 32), 5);
    for (int i = 0; i < 5; i++) ASSERT_EQ(v[i], 2 * i + 1);
    sl_dataset_unref(f);
    sl_dataset_unref(r);
}

/* value -> {"value": value, "vec": int32[value % 3 + 1] filled with value} */
static sl_status make_vec(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    int64_t v = *(int64_t *)e->t[0].data;
    int64_t len = v % 3 + 1;
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_I32, 1, &len);
    if (s) return s;
    for (int i = 0; i < len; i++) ((int32_t *)t.data)[i] = (int32_t)v;
    return sl_element_set(e, "vec", &t);
}

TEST(test_batch_and_padded) {
    sl_dataset *r, *b;
    ASSERT_OK(sl_ds_range(0, 10, 1, &r));
    sl_batch_opts o = sl_batch_opts_default(4);
    ASSERT_OK(sl_ds_batch(r, &o, &b));
    ASSERT_STREQ(sl_dataset_op(b), "batch");
    ASSERT_EQ(sl_dataset_cardinality(b), 3);
    sl_iter *it;
    ASSERT_OK(sl_iter_create(b, NULL, &it));
    sl_element e;
    sl_element_init(&e);
    int64_t sizes[3];
    for (int k = 0; k < 3; k++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(e.t[0].rank, 1);
        sizes[k] = e.t[0].dims[0];
        ASSERT_EQ(((int64_t *)e.t[0].data)[0], 4 * k);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sizes[0], 4); ASSERT_EQ(sizes[2], 2);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(b);
    o.drop_remainder = true;
    ASSERT_OK(sl_ds_batch(r, &o, &b));
    ASSERT_EQ(sl_dataset_cardinality(b), 2);
    sl_dataset_unref(b);

    /* variable-length vectors: refused unpadded, padded to the batch's longest with -1 */
    sl_fn *fn;
    sl_dataset *m, *pb;
    ASSERT_OK(sl_fn_custom("make_vec", make_vec, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(r, fn, 2, true, &m));
    sl_batch_opts po = sl_batch_opts_default(3);
    ASSERT_OK(sl_ds_batch(m, &po, &b));
    ASSERT_STREQ(sl_dataset_op(b), "map_batch"); /* fused */
    ASSERT_OK(sl_iter_create(b, NULL, &it));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'map_batch': component 'vec' is int32[1] in element 0 but int32[2] in element 1 of the batch\n"
                              "---> HINT: resize or crop to one shape before batching, or use a padded batch");
    sl_iter_close(it);
    sl_dataset_unref(b);
    po.padded = true;
    po.pad_value = -1;
    ASSERT_OK(sl_ds_batch(m, &po, &pb));
    ASSERT_STREQ(sl_dataset_op(pb), "batch"); /* padded: not fused */
    ASSERT_OK(sl_iter_create(pb, NULL, &it));
    ASSERT_OK(sl_iter_next(it, &e));
    int vi = sl_element_find(&e, "vec");
    ASSERT(vi >= 0);
    ASSERT_EQ(e.t[vi].rank, 2);
    ASSERT_EQ(e.t[vi].dims[0], 3);
    ASSERT_EQ(e.t[vi].dims[1], 3);
    int32_t expect[9] = {0, -1, -1, 1, 1, -1, 2, 2, 2};
    ASSERT_MEMEQ(e.t[vi].data, expect, sizeof expect);
    sl_element_clear(&e);
    int batches = 1;
    while (sl_iter_next(it, &e) == SL_OK) { batches++; sl_element_clear(&e); }
    ASSERT_EQ(batches, 4);
    sl_iter_close(it);
    sl_dataset_unref(pb);
    sl_dataset_unref(m);
    sl_fn_unref(fn);
    sl_dataset_unref(r);
}

/* A function that is slow on some elements (so finishing order differs from input order)
 * and fails on multiples of 7. */
static sl_status jittery(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx;
    int64_t v = *(int64_t *)e->t[0].data;
    if (v % 5 == 0) usleep(2000);
    if (v % 7 == 6) return sl_err(SL_EINVAL, "value %lld is unlucky", (long long)v);
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_I64, 0, NULL);
    if (s) return s;
    *(int64_t *)t.data = (int64_t)(call->seed & 0xffff);
    return sl_element_set(e, "seedbits", &t);
}

TEST(test_map_order_errors_seeds) {
    sl_dataset *r;
    ASSERT_OK(sl_ds_range(0, 50, 1, &r));
    sl_fn *fn;
    ASSERT_OK(sl_fn_custom("jittery", jittery, NULL, NULL, &fn));
    int64_t ref_seed[50];
    for (int par = 1; par <= 8; par *= 2) {
        sl_dataset *m;
        ASSERT_OK(sl_ds_map(r, fn, par, true, &m));
        sl_iter *it;
        ASSERT_OK(sl_iter_create(m, NULL, &it));
        sl_element e;
        sl_element_init(&e);
        int n = 0, errors = 0;
        for (int64_t want = 0; want < 50; want++) {
            sl_status s = sl_iter_next(it, &e);
            if (want % 7 == 6) { /* the error comes in order, then the stream goes on */
                ASSERT_EQ(s, SL_EINVAL);
                char msg[80];
                snprintf(msg, sizeof msg, "op 'map': jittery: value %lld is unlucky", (long long)want);
                ASSERT_STREQ(sl_errmsg(), msg);
                errors++;
                continue;
            }
            ASSERT_OK(s);
            ASSERT_EQ(*(int64_t *)e.t[sl_element_find(&e, "value")].data, want);
            int64_t sb = *(int64_t *)e.t[sl_element_find(&e, "seedbits")].data;
            if (par == 1) ref_seed[want] = sb;
            else ASSERT_EQ(sb, ref_seed[want]); /* same seed whatever the parallelism */
            sl_element_clear(&e);
            n++;
        }
        ASSERT_EQ(sl_iter_next(it, &e), SL_END);
        ASSERT_EQ(n, 43);
        ASSERT_EQ(errors, 7);
        sl_iter_close(it);
        sl_dataset_unref(m);
    }
    /* unordered: the same multiset */
    sl_dataset *m;
    ASSERT_OK(sl_ds_map(r, fn, 4, false, &m));
    sl_iter *it;
    ASSERT_OK(sl_iter_create(m, NULL, &it));
    sl_element e;
    sl_element_init(&e);
    int seen[50] = {0}, n = 0;
    sl_status s;
    while ((s = sl_iter_next(it, &e)) != SL_END) {
        if (s == SL_EINVAL) continue;
        ASSERT_OK(s);
        seen[*(int64_t *)e.t[0].data]++;
        sl_element_clear(&e);
        n++;
    }
    ASSERT_EQ(n, 43);
    for (int i = 0; i < 50; i++) ASSERT_EQ(seen[i], i % 7 == 6 ? 0 : 1);
    sl_iter_close(it);
    sl_dataset_unref(m);
    sl_fn_unref(fn);
    sl_dataset_unref(r);
}

static sl_status times_ten(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx;
    int64_t *v = e->t[0].data;
    *v = *v * 10 + (int64_t)(call->seed % 7);
    return SL_OK;
}

/* map then batch (fused) equals map, then batch of a non-map (unfused), element for element */
TEST(test_map_batch_equals_map_then_batch) {
    sl_dataset *r, *m, *fused, *t, *unfused;
    ASSERT_OK(sl_ds_range(0, 1003, 1, &r));
    sl_fn *fn;
    ASSERT_OK(sl_fn_custom("times_ten", times_ten, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(r, fn, 3, true, &m));
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
    sl_fn_unref(fn);
    sl_dataset_unref(r);
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

static sl_status add_ctx(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)call;
    int64_t *v = e->t[0].data;
    *v = *v * 10 + (int64_t)(intptr_t)ctx;
    return SL_OK;
}

/* A chain inside a chain runs its members in order (chains are flattened). */
TEST(test_nested_chain) {
    sl_fn *a, *b, *c, *ab, *abc;
    ASSERT_OK(sl_fn_custom("a", add_ctx, (void *)1, NULL, &a));
    ASSERT_OK(sl_fn_custom("b", add_ctx, (void *)2, NULL, &b));
    ASSERT_OK(sl_fn_custom("c", add_ctx, (void *)3, NULL, &c));
    sl_fn *pair[2] = {a, b};
    ASSERT_OK(sl_fn_chain(pair, 2, &ab));
    sl_fn *outer[2] = {ab, c};
    ASSERT_OK(sl_fn_chain(outer, 2, &abc));
    ASSERT_STREQ(sl_fn_name(abc), "a|b|c");
    sl_dataset *r, *m;
    ASSERT_OK(sl_ds_range(5, 7, 1, &r));
    ASSERT_OK(sl_ds_map(r, abc, 2, true, &m));
    int64_t v[4];
    ASSERT_EQ(drain_values(m, v, 4), 2);
    ASSERT_EQ(v[0], 5123);
    ASSERT_EQ(v[1], 6123);
    sl_dataset_unref(m);
    sl_dataset_unref(r);
    sl_fn_unref(abc);
    sl_fn_unref(ab);
    sl_fn_unref(a);
    sl_fn_unref(b);
    sl_fn_unref(c);
}

static sl_status slow_fn(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)e; (void)call;
    usleep(200);
    return SL_OK;
}

/* Close iterators at every point of a parallel pipeline, many times: no leak, no race,
 * no hang (ASan and TSan runs of this test check the first two). */
TEST(test_close_midstream) {
    sl_dataset *r, *rep, *m, *b, *m2;
    ASSERT_OK(sl_ds_range(0, 1000, 1, &r));
    ASSERT_OK(sl_ds_repeat(r, SL_INFINITE, &rep));
    sl_fn *fn;
    ASSERT_OK(sl_fn_custom("slow", slow_fn, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(rep, fn, 4, true, &m));
    sl_batch_opts o = sl_batch_opts_default(8);
    o.parallelism = 2;
    ASSERT_OK(sl_ds_map_batch(m, fn, &o, &b));
    ASSERT_OK(sl_ds_map(b, fn, 2, false, &m2));
    for (int round = 0; round < 40; round++) {
        sl_iter *it;
        ASSERT_OK(sl_iter_create(m2, NULL, &it));
        sl_element e;
        sl_element_init(&e);
        for (int k = 0; k < round % 5; k++) {
            ASSERT_OK(sl_iter_next(it, &e));
            ASSERT_EQ(e.t[0].dims[0], 8);
            sl_element_clear(&e);
        }
        sl_iter_close(it);
    }
    sl_dataset_unref(m2);
    sl_dataset_unref(b);
    sl_dataset_unref(m);
    sl_fn_unref(fn);
    sl_dataset_unref(rep);
    sl_dataset_unref(r);
}

/* ---- closing a pipeline whose every op is blocked ---- */

static int never(void *ctx, const sl_element *e) {
    (void)ctx;
    usleep(500); /* a slow source that does not eat the CPU the closing thread needs */
    return *(int64_t *)e->t[0].data == -1; /* range never yields -1 */
}

static sl_status spinning_input(void *ctx, const sl_element *e, sl_dataset **out) {
    (void)ctx; (void)e;
    sl_dataset *r;
    sl_status s = sl_ds_range(0, INT64_MAX, 1, &r);
    if (s) return s;
    s = sl_ds_filter(r, never, NULL, out);
    sl_dataset_unref(r);
    return s;
}

static sl_status same(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)e; (void)call;
    return SL_OK;
}

/* interleave (2 workers in inputs that never yield) -> map on 2 runner threads -> prefetch:
 * once it settles, the interleave's consumer, the map's workers and its consumer and the
 * prefetch producer all wait on condition variables. Closing wakes them through the hooks
 * each op registered (and the sources see the cancel at their next element, 0.5 ms apart),
 * so close returns in about a millisecond. The waits' safety-net poll (sl__poll_ms, 50 ms)
 * is set to 20 s here: a wait that is noticed only when its poll runs out makes its close
 * take 20 s, so the bound of 10 s holds by a margin of thousands on any machine, loaded
 * or not, and fails only when a wake-up is missing (with the hooks disabled, or the
 * interleave's workers not waking its consumer when their inputs report the cancel). */
#define CLOSE_BOUND_MS 10000.0

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

TEST(test_close_wakes_blocked_ops) {
    sl_dataset *in, *il, *m, *pf;
    ASSERT_OK(sl_ds_range(0, 4, 1, &in));
    sl_interleave_opts io = sl_interleave_opts_default();
    io.cycle_length = 2;
    io.parallelism = 2;
    ASSERT_OK(sl_ds_interleave(in, spinning_input, NULL, &io, &il));
    sl_fn *fn;
    ASSERT_OK(sl_fn_custom("same", same, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(il, fn, 2, true, &m));
    ASSERT_OK(sl_ds_prefetch(m, 2, &pf));
    enum { ROUNDS = 7 };
    double ms[ROUNDS];
    int poll = sl__poll_ms;
    sl__poll_ms = 20000; /* before any thread of the pipeline starts */
    for (int round = 0; round < ROUNDS; round++) {
        sl_iter *it;
        ASSERT_OK(sl_iter_create(pf, NULL, &it));
        usleep(30000); /* let every thread reach its wait (a thread not there yet is woken too) */
        uint64_t t0 = sl_now_ns();
        sl_iter_close(it);
        ms[round] = (double)(sl_now_ns() - t0) / 1e6;
        printf("  close %d: %.3f ms\n", round, ms[round]);
    }
    sl_dataset_unref(pf);
    sl_dataset_unref(m);
    sl_fn_unref(fn);
    sl_dataset_unref(il);
    sl_dataset_unref(in);
    sl__poll_ms = poll;
    qsort(ms, ROUNDS, sizeof ms[0], cmp_double);
    printf("  close median %.3f ms (min %.3f, max %.3f)\n", ms[ROUNDS / 2], ms[0], ms[ROUNDS - 1]);
    ASSERT(ms[ROUNDS - 1] < CLOSE_BOUND_MS); /* every close: a missed wake-up costs 20 s */
}

int main(void) {
    RUN(test_range_take_skip_repeat);
    RUN(test_shard_disjoint_covering);
    RUN(test_filter);
    RUN(test_batch_and_padded);
    RUN(test_map_order_errors_seeds);
    RUN(test_map_batch_equals_map_then_batch);
    RUN(test_map_batch_mnist_chain);
    RUN(test_nested_chain);
    RUN(test_close_midstream);
    RUN(test_close_wakes_blocked_ops);
    TEST_MAIN_END();
}
