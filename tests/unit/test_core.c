/* core/: status and error messages, buffers, tensors, elements, thread pool. */
#include <pthread.h>
#include <stdatomic.h>

#include "sluice/log.h"
#include "sluice/pool.h"
#include "sluice/status.h"
#include "sluice/tensor.h"
#include "test.h"

TEST(test_status_names) {
    ASSERT_STREQ(sl_status_name(SL_ECORRUPT), "SL_ECORRUPT");
    ASSERT_STREQ(sl_strerror(SL_ECORRUPT), "corrupt data");
    ASSERT_STREQ(sl_strerror(SL_END), "end of data");
    ASSERT_STREQ(sl_strerror(-999), "unknown status");
}

TEST(test_error_context) {
    sl_err_clear();
    ASSERT_STREQ(sl_errmsg(), "");
    ASSERT_EQ(sl_err_at(SL_ECORRUPT, "a.tfrecord", 1234, "data CRC mismatch"), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "a.tfrecord: byte 1234: data CRC mismatch");
    ASSERT_EQ(sl_errcode(), SL_ECORRUPT);
    sl_err_hint("run sluice-record verify %s", "a.tfrecord");
    ASSERT_STREQ(sl_errmsg(), "a.tfrecord: byte 1234: data CRC mismatch\n---> HINT: run sluice-record verify a.tfrecord");
    sl_err_prefix("op 'tfrecord': ");
    ASSERT_STREQ(sl_errmsg(), "op 'tfrecord': a.tfrecord: byte 1234: data CRC mismatch\n---> HINT: run sluice-record verify a.tfrecord");
    sl_error saved;
    sl_err_save(&saved);
    sl_err(SL_EINVAL, "other");
    ASSERT_STREQ(sl_errmsg(), "other");
    ASSERT_EQ(sl_err_restore(&saved), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "byte 1234");
    sl_err_at(SL_EIO, NULL, -1, "plain");
    ASSERT_STREQ(sl_errmsg(), "plain");
    sl_err_at(SL_EIO, "f", -1, "no offset");
    ASSERT_STREQ(sl_errmsg(), "f: no offset");
}

static void *other_thread(void *arg) {
    (void)arg;
    sl_err(SL_EPEER, "from another thread");
    return NULL;
}

TEST(test_error_thread_local) {
    sl_err(SL_EINVAL, "mine");
    pthread_t t;
    pthread_create(&t, NULL, other_thread, NULL);
    pthread_join(t, NULL);
    ASSERT_STREQ(sl_errmsg(), "mine");
}

static int freed_count;
static void count_free(void *ctx, void *data) {
    freed_count++;
    (void)ctx;
    free(data);
}

TEST(test_buf_refcount) {
    freed_count = 0;
    sl_buf *b = sl_buf_wrap(malloc(10), 10, count_free, NULL);
    ASSERT(b);
    sl_buf_ref(b);
    sl_buf_unref(b);
    ASSERT_EQ(freed_count, 0);
    sl_buf_unref(b);
    ASSERT_EQ(freed_count, 1);
    sl_buf_unref(NULL);
    sl_buf *n = sl_buf_new(100);
    ASSERT(n);
    ASSERT_EQ(((uintptr_t)n->data) % 64, 0);
    ASSERT_EQ(n->size, 100);
    sl_buf_unref(n);
    sl_buf *c = sl_buf_copy("hello", 5);
    ASSERT_MEMEQ(c->data, "hello", 5);
    sl_buf_unref(c);
}

/* Large buffers are recycled: a freed 4 MiB buffer comes back for the next request of a
 * similar size, and never for a much smaller one or while still referenced. */
TEST(test_buf_recycling) {
    sl_buf *a = sl_buf_new(4u << 20);
    ASSERT(a);
    memset(a->data, 0x11, a->size);
    void *mem = a->data;
    sl_buf *held = sl_buf_new(4u << 20); /* a second one, still referenced below */
    ASSERT(held);
    ASSERT(held->data != mem);
    sl_buf_unref(a);
    sl_buf *b = sl_buf_new(3u << 20); /* fits in the cached 4 MiB (within 2x) */
    ASSERT(b);
    ASSERT(b->data == mem);
    ASSERT_EQ(b->size, 3u << 20);
    ASSERT_EQ(atomic_load(&b->refs), 1);
    sl_buf_unref(b);
    sl_buf *small = sl_buf_new(1u << 20); /* less than half: a fresh allocation */
    ASSERT(small);
    ASSERT(small->data != mem);
    sl_buf_unref(small);
    sl_buf_unref(held);
}

TEST(test_dtypes) {
    ASSERT_EQ(sl_dtype_size(SL_DT_F32), 4);
    ASSERT_EQ(sl_dtype_size(SL_DT_I64), 8);
    ASSERT_EQ(sl_dtype_size(SL_DT_INVALID), 0);
    ASSERT_EQ(sl_dtype_from_name("uint8"), SL_DT_U8);
    ASSERT_EQ(sl_dtype_from_name("float"), SL_DT_F32);
    ASSERT_EQ(sl_dtype_from_name("nope"), SL_DT_INVALID);
    for (int d = 1; d < SL_DT_COUNT_; d++) ASSERT_EQ(sl_dtype_from_name(sl_dtype_name((sl_dtype)d)), d);
}

TEST(test_tensor_alloc_view) {
    sl_tensor t;
    int64_t dims[3] = {28, 28, 1};
    ASSERT_OK(sl_tensor_alloc(&t, SL_DT_U8, 3, dims));
    ASSERT_EQ(sl_tensor_numel(&t), 784);
    ASSERT_EQ(sl_tensor_nbytes(&t), 784);
    char d[64];
    ASSERT_STREQ(sl_tensor_describe(&t, d, sizeof d), "uint8[28,28,1]");
    sl_tensor v;
    int64_t vd[1] = {28};
    ASSERT_OK(sl_tensor_view(&v, t.buf, (char *)t.data + 28, 28, SL_DT_U8, 1, vd));
    ASSERT_EQ(atomic_load(&t.buf->refs), 2);
    ASSERT_EQ(((uint8_t *)v.data) - ((uint8_t *)t.data), 28);
    sl_tensor_release(&v);
    /* wrong size and out-of-bounds views are refused and leave the view empty */
    ASSERT_EQ(sl_tensor_view(&v, t.buf, t.data, 27, SL_DT_U8, 1, vd), SL_EINVAL);
    ASSERT(v.buf == NULL);
    ASSERT_EQ(atomic_load(&t.buf->refs), 1);
    int64_t big[1] = {785};
    ASSERT_EQ(sl_tensor_view(&v, t.buf, t.data, 785, SL_DT_U8, 1, big), SL_EINVAL);
    int64_t neg[1] = {-1};
    ASSERT_EQ(sl_tensor_alloc(&v, SL_DT_U8, 1, neg), SL_EINVAL);
    ASSERT_EQ(sl_tensor_alloc(&v, SL_DT_U8, 9, dims), SL_EINVAL);
    int64_t huge[2] = {INT64_MAX / 2, 16};
    ASSERT_EQ(sl_tensor_alloc(&v, SL_DT_F32, 2, huge), SL_EINVAL);
    sl_tensor s;
    sl_tensor_share(&s, &t);
    ASSERT_EQ(atomic_load(&t.buf->refs), 2);
    sl_tensor_release(&s);
    sl_tensor_release(&t);
    sl_tensor_release(&t); /* releasing an empty tensor is safe */
}

TEST(test_element) {
    sl_element e;
    sl_element_init(&e);
    sl_tensor a, b;
    int64_t one = 1;
    ASSERT_OK(sl_tensor_alloc(&a, SL_DT_I64, 1, &one));
    ASSERT_OK(sl_tensor_alloc(&b, SL_DT_F32, 0, NULL));
    ASSERT_OK(sl_element_set(&e, "label", &a));
    ASSERT(a.buf == NULL); /* handed over */
    ASSERT_OK(sl_element_set(&e, "image", &b));
    ASSERT_EQ(e.n, 2);
    ASSERT_EQ(sl_element_find(&e, "image"), 1);
    ASSERT_EQ(sl_element_find(&e, "nope"), -1);
    ASSERT_OK(sl_tensor_alloc(&a, SL_DT_U8, 1, &one));
    ASSERT_OK(sl_element_set(&e, "label", &a)); /* replace keeps the count */
    ASSERT_EQ(e.n, 2);
    ASSERT_EQ(e.t[0].dtype, SL_DT_U8);
    ASSERT_OK(sl_tensor_alloc(&a, SL_DT_U8, 1, &one));
    ASSERT_EQ(sl_element_set(&e, "", &a), SL_EINVAL);
    ASSERT(a.buf != NULL); /* still ours on failure */
    sl_tensor_release(&a);
    sl_element f;
    sl_element_init(&f);
    sl_element_move(&f, &e);
    ASSERT_EQ(e.n, 0);
    ASSERT_EQ(f.n, 2);
    sl_element_clear(&f);
    ASSERT_EQ(f.n, 0);
}

static atomic_int counter;
static void add_one(void *arg) { atomic_fetch_add(&counter, (int)(intptr_t)arg); }

TEST(test_pool) {
    sl_pool *p;
    ASSERT_EQ(sl_pool_create(0, &p), SL_EINVAL);
    ASSERT(p == NULL);
    ASSERT_OK(sl_pool_create(4, &p));
    ASSERT_EQ(sl_pool_size(p), 4);
    atomic_store(&counter, 0);
    for (int i = 0; i < 10000; i++) ASSERT_OK(sl_pool_submit(p, add_one, (void *)(intptr_t)1));
    sl_pool_wait(p);
    ASSERT_EQ(atomic_load(&counter), 10000);
    for (int i = 0; i < 1000; i++) ASSERT_OK(sl_pool_submit(p, add_one, (void *)(intptr_t)2));
    sl_pool_destroy(p); /* runs what was queued */
    ASSERT_EQ(atomic_load(&counter), 12000);
    sl_pool_destroy(NULL);
    ASSERT(sl_cpu_count() >= 1);
    uint64_t t0 = sl_now_ns(), t1 = sl_now_ns();
    ASSERT(t1 >= t0);
}

TEST(test_log_lazy) {
    static int evaluated;
    sl_log_set_level(SL_LOG_ERROR);
    SL_DEBUG("%d", evaluated++);
    ASSERT_EQ(evaluated, 0);
    sl_log_set_level(SL_LOG_WARN);
}

int main(void) {
    RUN(test_status_names);
    RUN(test_error_context);
    RUN(test_error_thread_local);
    RUN(test_buf_refcount);
    RUN(test_buf_recycling);
    RUN(test_dtypes);
    RUN(test_tensor_alloc_view);
    RUN(test_element);
    RUN(test_pool);
    RUN(test_log_lazy);
    TEST_MAIN_END();
}
