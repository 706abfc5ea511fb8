/* The stats clock behind sl__now_fast (include/sluice/util.h): the TSC scaled to
 * nanoseconds in sl_now_ns's base, calibrated once per process. The pipeline reads it twice
 * per element per op, so it must cost a few ns, not a system call. */
#include <pthread.h>
#include <stdint.h>

#include "sluice/util.h"

double sl__tsc_ns_per_tick;
uint64_t sl__tsc_base, sl__mono_base;
static pthread_once_t clock_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
#include <cpuid.h>
/* One (monotonic ns, TSC) pair read back to back, with the TSC read on both sides of the
 * clock call: the narrowest of a few tries, so a preemption between the two reads (common on a
 * loaded machine) cannot skew the pair by milliseconds. */
static void clock_pair(uint64_t *mono, uint64_t *tsc) {
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 16; i++) {
        uint64_t a = __rdtsc(), m = sl_now_ns(), b = __rdtsc();
        if (b >= a && b - a < best) {
            best = b - a;
            *mono = m;
            *tsc = a + (b - a) / 2;
        }
    }
}

static void calibrate(void) {
    unsigned a, b, c, d;
    /* invariant TSC: CPUID 0x80000007 EDX bit 8 (constant rate, runs in every C-state) */
    if (!__get_cpuid(0x80000007, &a, &b, &c, &d) || !(d & (1u << 8))) return;
    uint64_t m0 = 0, t0 = 0, m1 = 0, t1 = 0;
    clock_pair(&m0, &t0);
    do { /* 2 ms between two tight pairs: the factor is then good to ~0.01% */
        clock_pair(&m1, &t1);
    } while (m1 - m0 < 2000000);
    if (t1 <= t0) return;
    sl__tsc_base = t0;
    sl__mono_base = m0;
    sl__tsc_ns_per_tick = (double)(m1 - m0) / (double)(t1 - t0);
}
#else
static void calibrate(void) {}
#endif

void sl__clock_init(void) { pthread_once(&clock_once, calibrate); }
