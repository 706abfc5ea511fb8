/* dist/shm.c: the ring's shared-memory segment. Another job's segment, a wrong key, a taken
 * rank or another layout are refused with the reason; the segment is mode 0600 and gone
 * from /dev/shm once unlinked; what a SIGKILLed creator left behind is swept by the next
 * creator; a /dev/shm without room is an error, not a SIGBUS; a rank's abort reaches a waiting peer
 * with its message; a peer that left is named. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dist/shm_priv.h"
#include "test.h"

static sl__shm_cfg cfg_of(int n, int rank, uint64_t job) {
    return (sl__shm_cfg){.n = n, .rank = rank, .job = job, .window = 4096, .timeout_s = 1.0};
}

static int exists(const char *name) {
    char path[128];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    struct stat st;
    return stat(path, &st) == 0;
}

TEST(test_attach_checks) {
    char name[SL__SHM_NAME];
    uint64_t key;
    sl__shm *a, *b, *c;
    sl__shm_cfg c0 = cfg_of(2, 0, 0x1111), c1 = cfg_of(2, 1, 0x1111);
    ASSERT_OK(sl__shm_create(&c0, name, &key, &a));
    char path[128];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    struct stat st;
    ASSERT_EQ(stat(path, &st), 0);
    ASSERT_EQ(st.st_mode & 0777, 0600);
    char want[64];
    snprintf(want, sizeof want, "/sluice-%016llx-%d-", 0x1111ull, (int)getpid());
    ASSERT(strncmp(name, want, strlen(want)) == 0);
    /* another job */
    sl__shm_cfg other = cfg_of(2, 1, 0x2222);
    ASSERT_EQ(sl__shm_attach(&other, name, key, &b), SL_EPEER);
    ASSERT_CONTAINS(sl_errmsg(), "belongs to job 0000000000001111, not this job (0000000000002222)");
    ASSERT(b == NULL);
    /* the right job, a wrong key */
    ASSERT_EQ(sl__shm_attach(&c1, name, key ^ 1, &b), SL_EPEER);
    ASSERT_CONTAINS(sl_errmsg(), "or its key differs");
    /* another layout */
    sl__shm_cfg wide = c1;
    wide.window = 8192;
    ASSERT_EQ(sl__shm_attach(&wide, name, key, &b), SL_EPEER);
    ASSERT_CONTAINS(sl_errmsg(), "windows of 4096 bytes");
    /* rank 0's slot is taken */
    sl__shm_cfg dup = cfg_of(2, 0, 0x1111);
    ASSERT_EQ(sl__shm_attach(&dup, name, key, &b), SL_EPEER);
    ASSERT_CONTAINS(sl_errmsg(), "rank 0's slot is already taken");
    /* the rightful rank */
    ASSERT_OK(sl__shm_attach(&c1, name, key, &b));
    ASSERT_EQ(sl__shm_attach(&c1, name, key, &c), SL_EPEER); /* twice: taken */
    sl__shm_unlink(name);
    ASSERT(!exists(name));
    /* unlinked: no other process can open it (this one keeps its mapping) */
    ASSERT_EQ(shm_open(name, O_RDWR, 0), -1);
    ASSERT_EQ(errno, ENOENT);
    sl__shm_close(a);
    sl__shm_close(b);
}

TEST(test_dead_creator_swept) {
    /* a creator killed before it unlinked: its pid is dead, its name stays */
    uint64_t job = 0x5eed0000000000aaull;
    pid_t p = fork();
    ASSERT(p >= 0);
    if (p == 0) {
        char name[SL__SHM_NAME];
        uint64_t key;
        sl__shm *a;
        sl__shm_cfg c0 = cfg_of(2, 0, job);
        if (sl__shm_create(&c0, name, &key, &a)) _exit(1);
        FILE *f = fopen("/dev/null", "w");
        if (f) fclose(f);
        raise(SIGKILL);
    }
    int stt;
    waitpid(p, &stt, 0);
    ASSERT(WIFSIGNALED(stt));
    char left[128];
    snprintf(left, sizeof left, "/sluice-%016llx-%d-", (unsigned long long)job, (int)p);
    int found = 0;
    DIR *d = opendir("/dev/shm");
    ASSERT(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, left + 1, strlen(left) - 1)) found++;
    closedir(d);
    /* found is 1 here, unless a creator in a test running beside this one swept it already:
     * either way, once this creator has run, it must be gone */
    ASSERT(found <= 1);
    /* the next job's creator sweeps it */
    char name[SL__SHM_NAME];
    uint64_t key;
    sl__shm *a;
    sl__shm_cfg c0 = cfg_of(2, 0, job + 1);
    ASSERT_OK(sl__shm_create(&c0, name, &key, &a));
    sl__shm_unlink(name);
    sl__shm_close(a);
    found = 0;
    d = opendir("/dev/shm");
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, left + 1, strlen(left) - 1)) found++;
    closedir(d);
    ASSERT_EQ(found, 0);
}

TEST(test_abort_and_leave_reach_the_waiter) {
    char name[SL__SHM_NAME];
    uint64_t key;
    sl__shm *a, *b;
    sl__shm_cfg c0 = cfg_of(2, 0, 0x3333), c1 = cfg_of(2, 1, 0x3333);
    ASSERT_OK(sl__shm_create(&c0, name, &key, &a));
    ASSERT_OK(sl__shm_attach(&c1, name, key, &b));
    sl__shm_unlink(name);
    /* b fails and says why; a, waiting for b's window, fails at once with b's message */
    sl__shm_abort(b, "rank 1: loss is NaN at step 7");
    ASSERT_EQ(sl__shm_wait(a, 1, SL__PH_WRITTEN, 0), SL_EPEER);
    ASSERT_CONTAINS(sl_errmsg(), "rank 1 (?) [pid ");
    ASSERT_CONTAINS(sl_errmsg(), "failed: rank 1: loss is NaN at step 7");
    /* a collective on a failed segment: refused */
    ASSERT_EQ(sl__shm_barrier(b), SL_ESTATE);
    sl__shm_close(b);
    sl__shm_close(a);

    ASSERT_OK(sl__shm_create(&c0, name, &key, &a));
    ASSERT_OK(sl__shm_attach(&c1, name, key, &b));
    sl__shm_unlink(name);
    sl__shm_close(b);
    ASSERT_EQ(sl__shm_wait(a, 1, SL__PH_WRITTEN, 0), SL_EPEER);
    ASSERT_CONTAINS(sl_errmsg(), "left the ring before writing window 0");
    /* a peer that never posts: the timeout, naming it */
    sl__shm_close(a);
}

TEST(test_silent_peer_times_out) {
    char name[SL__SHM_NAME];
    uint64_t key;
    sl__shm *a, *b;
    sl__shm_cfg c0 = cfg_of(2, 0, 0x4444), c1 = cfg_of(2, 1, 0x4444);
    c0.timeout_s = 0.3;
    ASSERT_OK(sl__shm_create(&c0, name, &key, &a));
    ASSERT_OK(sl__shm_attach(&c1, name, key, &b));
    sl__shm_unlink(name);
    ASSERT_EQ(sl__shm_wait(a, 1, SL__PH_REDUCED, 4), SL_ETIMEDOUT);
    ASSERT_CONTAINS(sl_errmsg(), "made no progress for 0.");
    ASSERT_CONTAINS(sl_errmsg(), "window 4, reducing");
    sl__shm_close(b);
    sl__shm_close(a);
}

TEST(test_no_room) {
    /* more than /dev/shm holds: every page is allocated at create, so this is the error
     * (and nothing is left behind), never a SIGBUS on a later write */
    char name[SL__SHM_NAME];
    uint64_t key;
    sl__shm *a;
    sl__shm_cfg c0 = cfg_of(2, 0, 0x6666);
    c0.window = (size_t)1 << 42;
    sl_status s = sl__shm_create(&c0, name, &key, &a);
    ASSERT(s == SL_ENOMEM || s == SL_EIO);
    ASSERT(a == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "bytes for 2 ranks in /dev/shm");
    ASSERT(!exists(name));
}

TEST(test_where) {
    sl__shm_where a, b;
    sl__shm_where_self(&a, NULL);
    sl__shm_where_self(&b, NULL);
    ASSERT(sl__shm_same_host(&a, &b));
    b.boot[0] ^= 1; /* rebooted: another host as far as memory goes */
    ASSERT(!sl__shm_same_host(&a, &b));
    sl__shm_where_self(&b, NULL);
    b.shm_ino++; /* another container's /dev/shm */
    ASSERT(!sl__shm_same_host(&a, &b));
    sl__shm_where_self(&b, NULL);
    b.netns++; /* another network namespace: another host */
    ASSERT(!sl__shm_same_host(&a, &b));
    sl__shm_where_self(&b, NULL);
    b.uid++;
    ASSERT(!sl__shm_same_host(&a, &b));
    sl__shm_where_self(&b, "node-7"); /* a launcher's name for the host */
    ASSERT_STREQ(b.host, "node-7");
    ASSERT(!sl__shm_same_host(&a, &b));
}

int main(void) {
    RUN(test_attach_checks);
    RUN(test_dead_creator_swept);
    RUN(test_abort_and_leave_reach_the_waiter);
    RUN(test_silent_peer_times_out);
    RUN(test_no_room);
    RUN(test_where);
    TEST_MAIN_END();
}
