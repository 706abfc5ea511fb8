/* Monotonic timed waits on condition variables: the one place Sluice turns a timeout into a
 * pthread deadline. Condition variables are made with CLOCK_MONOTONIC so that a step of the
 * wall clock (NTP, a resumed VM) neither stretches a wait nor ends it early.
 * Workload: a few hundred waits a second (pollers, throttled producers). */
#include <errno.h>
#include <time.h>

#include "sluice/util.h"

int sl_cond_init_mono(pthread_cond_t *cv) {
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc) return rc;
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (!rc) rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

int sl_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t deadline_ns) {
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u), .tv_nsec = (long)(deadline_ns % 1000000000u)};
    return pthread_cond_timedwait(cv, mu, &ts);
}

int sl_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int ms) {
    if (ms <= 0) return ETIMEDOUT;
    return sl_cond_wait_until(cv, mu, sl_now_ns() + (uint64_t)ms * 1000000u);
}
