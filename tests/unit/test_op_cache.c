/* pipeline/ops/cache.c: in memory and in a file, the first full pass records (errors
 * included) and later passes replay it without calling the input; a pass closed early
 * records nothing; elements of many names; a damaged or truncated cache file is refused,
 * naming the file and the byte. */
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "helper_parts.h"
#include "test.h"

static atomic_int calls;

/* The first steps of both functions below: counts the call in `calls`; on the value FAIL,
 * fails with SL_EINVAL and the message WORD; else *V is the element's value and *T a new
 * scalar of DT. */
static sl_status count_call(sl_element *e, int64_t fail, const char *word, sl_dtype dt, int64_t *v, sl_tensor *t) {
    atomic_fetch_add(&calls, 1);
    *v = sl_test_value(e);
    if (*v == fail) return sl_err(SL_EINVAL, "%s", word);
    return sl_tensor_alloc(t, dt, 0, NULL);
}

/* value -> {"value": 2*value (new tensor), "name": bytes "v<value>", "mat": f32[2,3]} */
static sl_status counting(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    int64_t v;
    sl_tensor t;
    sl_status s = count_call(e, 13, "thirteen", SL_DT_I64, &v, &t);
    if (s) return s;
    *(int64_t *)t.data = 2 * v;
    if ((s = sl_element_set(e, "value", &t))) return s;
    int64_t dims[2] = {2, 3};
    if ((s = sl_tensor_alloc(&t, SL_DT_F32, 2, dims))) return s;
    for (int i = 0; i < 6; i++) ((float *)t.data)[i] = (float)v + 0.5f * (float)i;
    if ((s = sl_element_set(e, "mat", &t))) return s;
    char name[32];
    int n = snprintf(name, sizeof name, "v%lld", (long long)v);
    sl_buf *b = sl_buf_new(sizeof(sl_bytes) + (size_t)n);
    if (!b) return SL_ENOMEM;
    memcpy((char *)b->data + sizeof(sl_bytes), name, (size_t)n);
    ((sl_bytes *)b->data)->ptr = (uint8_t *)b->data + sizeof(sl_bytes);
    ((sl_bytes *)b->data)->len = (size_t)n;
    t = SL_TENSOR_EMPTY;
    t.dtype = SL_DT_BYTES;
    t.data = b->data;
    t.buf = b;
    t.aux = sl_buf_ref(b);
    return sl_element_set(e, "name", &t);
}

/* Read one pass; check every element; returns elements, counts errors. */
static int check_pass(sl_iter *it, int n_in, int *errs) {
    sl_element e;
    sl_element_init(&e);
    int n = 0;
    *errs = 0;
    for (int64_t v = 0; v < n_in; v++) {
        sl_status s = sl_iter_next(it, &e);
        if (v == 13) {
            if (s != SL_EINVAL || strcmp(sl_errmsg(), "op 'map': counting: thirteen") != 0) return -100;
            (*errs)++;
            continue;
        }
        if (s) return -1 - (int)v;
        int c = sl_element_find(&e, "mat"), nm = sl_element_find(&e, "name");
        if (sl_test_value(&e) != 2 * v || c < 0 || nm < 0 || e.t[c].rank != 2 || e.t[c].dims[1] != 3 ||
            ((float *)e.t[c].data)[5] != (float)v + 2.5f) {
            sl_element_clear(&e);
            return -200 - (int)v;
        }
        char name[32];
        snprintf(name, sizeof name, "v%lld", (long long)v);
        const sl_bytes *b = e.t[nm].data;
        if (b->len != strlen(name) || memcmp(b->ptr, name, b->len) != 0) {
            sl_element_clear(&e);
            return -400 - (int)v;
        }
        sl_element_clear(&e);
        n++;
    }
    return n;
}

TEST(test_cache_memory) {
    sl_dataset *m, *c, *rep;
    ASSERT_OK(sl_test_range_map(20, "counting", counting, NULL, 2, &m));
    ASSERT_OK(sl_ds_cache(m, NULL, &c));
    ASSERT_EQ(sl_dataset_cardinality(c), 20);
    atomic_store(&calls, 0);
    /* a pass closed early is not cached */
    sl_iter *it;
    ASSERT_OK(sl_iter_create(c, NULL, &it));
    for (int k = 0; k < 5; k++) ASSERT_OK(sl_test_next_drop(it));
    sl_iter_close(it);
    sl_element e;
    sl_element_init(&e);
    int after_partial = atomic_load(&calls);
    ASSERT(after_partial >= 5);
    /* three epochs: the first reads the input, the others replay (errors included) */
    ASSERT_OK(sl_ds_repeat(c, 3, &rep));
    ASSERT_OK(sl_iter_create(rep, NULL, &it));
    int errs;
    for (int ep = 0; ep < 3; ep++) {
        ASSERT_EQ(check_pass(it, 20, &errs), 19);
        ASSERT_EQ(errs, 1);
        ASSERT_EQ(atomic_load(&calls), after_partial + 20);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    /* another iterator of the same dataset replays too */
    ASSERT_OK(sl_iter_create(c, NULL, &it));
    ASSERT_EQ(check_pass(it, 20, &errs), 19);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    ASSERT_EQ(atomic_load(&calls), after_partial + 20);
    sl_dataset_unref(rep);
    sl_dataset_unref(c);
    sl_dataset_unref(m);
}

/* value v -> {"value": v, "k<v % 40>": v + 0.5 (f32 scalar)}: two components (the store's
 * packed entries) whose second name takes 40 values, more than its name table holds (32):
 * the later names' elements are kept whole. v == 7 fails. */
static sl_status two_named(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx; (void)call;
    char name[16];
    snprintf(name, sizeof name, "k%lld", (long long)(sl_test_value(e) % 40));
    int64_t v;
    sl_tensor t;
    sl_status s = count_call(e, 7, "seven", SL_DT_F32, &v, &t);
    if (s) return s;
    *(float *)t.data = (float)v + 0.5f;
    return sl_element_set(e, name, &t);
}

TEST(test_cache_memory_packed) {
    sl_dataset *m, *c;
    ASSERT_OK(sl_test_range_map(100, "two_named", two_named, NULL, 2, &m));
    ASSERT_OK(sl_ds_cache(m, NULL, &c));
    atomic_store(&calls, 0);
    for (int pass = 0; pass < 3; pass++) {
        sl_iter *it;
        sl_element e;
        ASSERT_OK(sl_test_open(c, &it, &e));
        for (int64_t v = 0; v < 100; v++) {
            sl_status st = sl_iter_next(it, &e);
            if (v == 7) {
                ASSERT_EQ(st, SL_EINVAL);
                ASSERT_STREQ(sl_errmsg(), "op 'map': two_named: seven");
                continue;
            }
            ASSERT_OK(st);
            ASSERT_EQ(e.n, 2);
            ASSERT_EQ(sl_test_value(&e), v);
            char name[16];
            snprintf(name, sizeof name, "k%lld", (long long)(v % 40));
            int k = sl_element_find(&e, name);
            ASSERT(k >= 0);
            ASSERT_EQ(e.t[k].dtype, SL_DT_F32);
            ASSERT_EQ(e.t[k].rank, 0);
            ASSERT(*(float *)e.t[k].data == (float)v + 0.5f);
            sl_element_clear(&e);
        }
        ASSERT_EQ(sl_iter_next(it, &e), SL_END);
        sl_iter_close(it);
        ASSERT_EQ(atomic_load(&calls), 100); /* the first pass ran the map; the others replayed */
    }
    sl_dataset_unref(c);
    sl_dataset_unref(m);
}

TEST(test_cache_file) {
    char path[300];
    snprintf(path, sizeof path, "%s/cache.bin", sl_test_parts_dir());
    unlink(path);
    sl_dataset *m, *c, *rep;
    ASSERT_OK(sl_test_range_map(20, "counting", counting, NULL, 2, &m));
    ASSERT_OK(sl_ds_cache(m, path, &c));
    atomic_store(&calls, 0);
    /* closed early: no file */
    sl_iter *it;
    ASSERT_OK(sl_iter_create(c, NULL, &it));
    ASSERT_OK(sl_test_next_drop(it));
    sl_iter_close(it);
    ASSERT(access(path, F_OK) != 0);
    sl_element e;
    sl_element_init(&e);
    /* the first epoch writes, the next ones read the file */
    ASSERT_OK(sl_ds_repeat(c, 3, &rep));
    atomic_store(&calls, 0);
    ASSERT_OK(sl_iter_create(rep, NULL, &it));
    int errs;
    for (int ep = 0; ep < 3; ep++) {
        ASSERT_EQ(check_pass(it, 20, &errs), 19);
        ASSERT_EQ(errs, 1);
        ASSERT_EQ(atomic_load(&calls), 20);
        /* the file appears when the first pass reads its end (as the second begins) */
        if (ep == 1) ASSERT(access(path, F_OK) == 0);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(rep);
    sl_dataset_unref(c);
    /* a new dataset over the same file: no input call at all */
    ASSERT_OK(sl_ds_cache(m, path, &c));
    ASSERT_OK(sl_iter_create(c, NULL, &it));
    ASSERT_EQ(check_pass(it, 20, &errs), 19);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    ASSERT_EQ(atomic_load(&calls), 20);

    /* corruption: a flipped byte inside an entry */
    struct stat st;
    ASSERT_EQ(stat(path, &st), 0);
    FILE *fp = fopen(path, "r+b");
    ASSERT(fp);
    long at = (long)st.st_size / 2;
    ASSERT_EQ(fseek(fp, at, SEEK_SET), 0);
    int ch = fgetc(fp);
    ASSERT_EQ(fseek(fp, at, SEEK_SET), 0);
    fputc(ch ^ 0xff, fp);
    fclose(fp);
    ASSERT_OK(sl_iter_create(c, NULL, &it));
    sl_status s;
    int good = 0;
    while ((s = sl_iter_next(it, &e)) == SL_OK || (s == SL_EINVAL && strstr(sl_errmsg(), "thirteen"))) {
        if (s == SL_OK) good++;
        sl_element_clear(&e);
    }
    ASSERT_EQ(s, SL_ECORRUPT);
    char want[400];
    snprintf(want, sizeof want, "op 'cache': %s: byte ", path);
    if (strncmp(sl_errmsg(), want, strlen(want)) != 0) {
        FAILF("message: %s", sl_errmsg());
        return;
    }
    ASSERT_CONTAINS(sl_errmsg(), "cache file: entry checksum mismatch");
    ASSERT(good > 0 && good < 19);
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);

    /* truncated: refused at creation, naming the file and the offset */
    ASSERT_EQ(truncate(path, st.st_size - 5), 0);
    ASSERT_EQ(sl_iter_create(c, NULL, &it), SL_ECORRUPT);
    ASSERT(it == NULL);
    snprintf(want, sizeof want, "op 'cache': %s: byte %lld: cache file: no valid footer (truncated or damaged)\n"
             "---> HINT: delete the cache file to rebuild it", path, (long long)st.st_size - 5 - 32);
    ASSERT_STREQ(sl_errmsg(), want);
    ASSERT_EQ(truncate(path, 10), 0);
    ASSERT_EQ(sl_iter_create(c, NULL, &it), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "byte 10: cache file: truncated");
    unlink(path);
    sl_dataset_unref(c);
    sl_dataset_unref(m);
}

int main(void) {
    RUN(test_cache_memory);
    RUN(test_cache_memory_packed);
    RUN(test_cache_file);
    TEST_MAIN_END();
}
