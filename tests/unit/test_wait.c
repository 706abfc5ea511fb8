/* core/wait.c: monotonic condition variables and timed waits. A wait for N ms times out
 * after at least N ms (and not absurdly later), a deadline in the past returns ETIMEDOUT at
 * once, a signal ends a long wait early with 0. sl_now_s is sl_now_ns's clock in seconds. */
#include <errno.h>
#include <unistd.h>

#include "sluice/util.h"
#include "test.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static int flag; /* guarded by mu */

static void *signaller(void *arg) {
    (void)arg;
    usleep(20000);
    pthread_mutex_lock(&mu);
    flag = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return NULL;
}

TEST(test_wait_ms_times_out) {
    ASSERT_EQ(sl_cond_init_mono(&cv), 0);
    pthread_mutex_lock(&mu);
    uint64_t t0 = sl_now_ns();
    int rc = 0;
    while (rc != ETIMEDOUT) rc = sl_cond_wait_ms(&cv, &mu, 30); /* spurious wakeups retry */
    uint64_t dt = sl_now_ns() - t0;
    pthread_mutex_unlock(&mu);
    printf("  30 ms wait took %.2f ms\n", dt / 1e6);
    ASSERT(dt >= 30000000u);
    ASSERT(dt < 5000000000u);
    pthread_mutex_lock(&mu);
    ASSERT_EQ(sl_cond_wait_ms(&cv, &mu, 0), ETIMEDOUT);
    t0 = sl_now_ns();
    ASSERT_EQ(sl_cond_wait_until(&cv, &mu, t0 - 1000000u), ETIMEDOUT);
    ASSERT(sl_now_ns() - t0 < 1000000000u);
    pthread_mutex_unlock(&mu);
    pthread_cond_destroy(&cv);
}

TEST(test_wait_signalled) {
    ASSERT_EQ(sl_cond_init_mono(&cv), 0);
    flag = 0;
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, signaller, NULL), 0);
    pthread_mutex_lock(&mu);
    uint64_t t0 = sl_now_ns(), deadline = t0 + 20000000000ull;
    int rc = 0;
    while (!flag && rc != ETIMEDOUT) rc = sl_cond_wait_until(&cv, &mu, deadline);
    uint64_t dt = sl_now_ns() - t0;
    pthread_mutex_unlock(&mu);
    pthread_join(th, NULL);
    ASSERT_EQ(rc, 0);
    ASSERT_EQ(flag, 1);
    ASSERT(dt < 10000000000ull); /* woken, not timed out at 20 s */
    pthread_cond_destroy(&cv);
}

/* sl_now_s reads the clock sl_now_ns reads (a value between two of its readings), in
 * seconds, and never goes back. */
TEST(test_now_s) {
    for (int i = 0; i < 1000; i++) {
        uint64_t a = sl_now_ns();
        double s = sl_now_s();
        uint64_t b = sl_now_ns();
        if (!(s * 1e9 >= (double)a - 1e3 && s * 1e9 <= (double)b + 1e3)) {
            FAILF("sl_now_s() = %.9f outside [%llu, %llu] ns", s, (unsigned long long)a, (unsigned long long)b);
            return;
        }
    }
    double prev = sl_now_s();
    for (int i = 0; i < 100000; i++) {
        double t = sl_now_s();
        ASSERT(t >= prev);
        prev = t;
    }
}

int main(void) {
    RUN(test_wait_ms_times_out);
    RUN(test_wait_signalled);
    RUN(test_now_s);
    TEST_MAIN_END();
}
