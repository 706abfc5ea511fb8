/* pipeline/ops/list_files.c: overlapping patterns matched once and sorted, sharding by
 * file, shuffled file orders per epoch, and a FIFO among the matches refused at once. */
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sluice/pipeline.h"
#include "helper_parts.h"
#include "test.h"

static int name_file_index(const sl_element *e) {
    int c = sl_element_find(e, "filename");
    if (c < 0) return -1;
    const sl_bytes *b = e->t[c].data;
    char tail[32];
    if (b->len < 16) return -1;
    snprintf(tail, sizeof tail, "%.*s", 16, (const char *)b->ptr + b->len - 16); /* "part-NN.tfrecord" */
    int f;
    return sscanf(tail, "part-%d.tfrecord", &f) == 1 ? f : -1;
}

static int drain_files(sl_dataset *ds, int *out, int cap) {
    sl_iter *it;
    if (sl_iter_create(ds, NULL, &it)) return -1;
    sl_element e;
    sl_element_init(&e);
    int n = 0;
    while (sl_iter_next(it, &e) == SL_OK) {
        if (n < cap) out[n] = name_file_index(&e);
        n++;
        sl_element_clear(&e);
    }
    sl_iter_close(it);
    return n;
}

TEST(test_list_files_shard_by_file) {
    ASSERT_OK(sl_test_write_parts(NULL, 0));
    char pat[300], pat2[300];
    snprintf(pat, sizeof pat, "%s/part-0[3-5].tfrecord", sl_test_parts_dir());
    snprintf(pat2, sizeof pat2, "%s/part-0[0-4].tfrecord", sl_test_parts_dir()); /* overlaps: 03, 04 once */
    const char *pats[] = {pat, pat2};
    sl_dataset *lf;
    ASSERT_OK(sl_ds_list_files(pats, 2, false, 0, &lf));
    ASSERT_EQ(sl_dataset_cardinality(lf), SL_TEST_NFILES);
    int idx[16];
    ASSERT_EQ(drain_files(lf, idx, 16), SL_TEST_NFILES);
    for (int i = 0; i < SL_TEST_NFILES; i++) ASSERT_EQ(idx[i], i); /* sorted */
    /* shard by file: disjoint and covering */
    int seen[SL_TEST_NFILES] = {0};
    for (int k = 0; k < 4; k++) {
        sl_dataset *sh;
        ASSERT_OK(sl_ds_shard(lf, 4, k, &sh));
        int n = drain_files(sh, idx, 16);
        ASSERT_EQ(n, k < 2 ? 2 : 1);
        for (int i = 0; i < n; i++) {
            ASSERT_EQ(idx[i] % 4, k);
            seen[idx[i]]++;
        }
        sl_dataset_unref(sh);
    }
    for (int i = 0; i < SL_TEST_NFILES; i++) ASSERT_EQ(seen[i], 1);
    sl_dataset_unref(lf);

    /* shuffled: a permutation, a new one each epoch, the same ones each run */
    sl_dataset *shuf, *rep;
    ASSERT_OK(sl_ds_list_files(pats, 2, true, 5, &shuf));
    ASSERT_OK(sl_ds_repeat(shuf, 4, &rep));
    int a[32], b[32];
    ASSERT_EQ(drain_files(rep, a, 32), 4 * SL_TEST_NFILES);
    ASSERT_EQ(drain_files(rep, b, 32), 4 * SL_TEST_NFILES);
    ASSERT_MEMEQ(a, b, 4 * SL_TEST_NFILES * sizeof(int));
    int differ = 0;
    for (int ep = 0; ep < 4; ep++) {
        int s[SL_TEST_NFILES] = {0};
        for (int i = 0; i < SL_TEST_NFILES; i++) s[a[ep * SL_TEST_NFILES + i]]++;
        for (int i = 0; i < SL_TEST_NFILES; i++) ASSERT_EQ(s[i], 1);
        if (ep && memcmp(a, a + ep * SL_TEST_NFILES, SL_TEST_NFILES * sizeof(int)) != 0) differ++;
    }
    ASSERT(differ >= 2); /* 6! orders: at most one of three epochs may repeat the first by chance */
    sl_dataset_unref(rep);
    sl_dataset_unref(shuf);
}

/* A FIFO among list_files' matches, or at a cache's path, would block the reader in open()
 * for ever: both are refused at once (in a child with 10 s before SIGALRM, so a reader that
 * blocks fails the test instead of hanging it). */
static int fifo_child(void) {
    char fifo[300], pat[300];
    snprintf(fifo, sizeof fifo, "%s/fifo.tfrecord", sl_test_parts_dir());
    snprintf(pat, sizeof pat, "%s/fifo.*", sl_test_parts_dir());
    unlink(fifo);
    if (mkfifo(fifo, 0600) != 0) return 2;
    const char *pats[1] = {pat};
    sl_dataset *ds = NULL;
    if (sl_ds_list_files(pats, 1, false, 0, &ds) != SL_EINVAL || !strstr(sl_errmsg(), "is a FIFO")) return 3;
    sl_dataset *r, *c;
    if (sl_ds_range(0, 3, 1, &r) || sl_ds_cache(r, fifo, &c)) return 4;
    sl_iter *it = NULL;
    if (sl_iter_create(c, NULL, &it) != SL_EINVAL || !strstr(sl_errmsg(), "is a FIFO")) return 5;
    unlink(fifo);
    return 0;
}

TEST(test_fifo_refused) {
    sl_test_parts_dir(); /* made here, so that this process removes it */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        _exit(fifo_child());
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);
}

int main(void) {
    RUN(test_list_files_shard_by_file);
    RUN(test_fifo_refused);
    TEST_MAIN_END();
}
