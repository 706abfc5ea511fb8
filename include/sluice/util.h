/* The small helpers every module needs, defined once in core/: monotonic timed waits, the
 * cheap stats clock, monotonic seconds, IEEE half and bfloat16 conversion, little-endian
 * loads and stores, and splitmix64 seed mixing. Modules and tools include this header
 * instead of keeping their own copies; names with a double underscore are for Sluice's own
 * files and may change.
 *
 * Workload: the conversions and loads run per element or per tensor value on hot paths, so
 * they are inline or take whole arrays; the waits run a few hundred times a second. */
#ifndef SLUICE_UTIL_H
#define SLUICE_UTIL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sluice/pool.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define SL_UTIL_HD __host__ __device__
#else
#define SL_UTIL_HD
#endif

/* ---- monotonic timed waits (core/wait.c) ----
 * Every timed wait in Sluice goes through these, so a wall-clock step (NTP, a suspended VM)
 * can neither stretch a wait nor end it early. */

/* pthread_cond_init with CLOCK_MONOTONIC. Returns 0, or the errno pthread_cond_init gave
 * (cv is then not initialised). A cv made here must only be waited on with the calls below
 * or pthread_cond_wait. */
int sl_cond_init_mono(pthread_cond_t *cv);

/* Wait on cv (made by sl_cond_init_mono; mu held) until signalled or until sl_now_ns()
 * reaches deadline_ns. Returns 0 when woken (perhaps spuriously) or ETIMEDOUT; mu is held
 * again on return either way. */
int sl_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t deadline_ns);

/* The same with a deadline `ms` milliseconds from now (ms <= 0: ETIMEDOUT at once, without
 * waiting). */
int sl_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int ms);

/* ---- the stats clock (core/clock.c) ----
 * A cheap monotonic clock in the same base as sl_now_ns (so their values mix): on x86-64
 * with an invariant TSC it reads the TSC (~10 ns; clock_gettime is ~25-90 ns), scaled by a
 * factor calibrated once per process; elsewhere it is sl_now_ns. sl__clock_init must have
 * run first (it is cheap after the first call; sl_iter_create calls it). */
extern double sl__tsc_ns_per_tick; /* 0: no usable TSC */
extern uint64_t sl__tsc_base, sl__mono_base;
void sl__clock_init(void);
#if defined(__x86_64__) && !defined(__CUDACC__)
#include <x86intrin.h>
static inline uint64_t sl__now_fast(void) {
    if (sl__tsc_ns_per_tick > 0)
        return sl__mono_base + (uint64_t)(int64_t)((double)(int64_t)(__rdtsc() - sl__tsc_base) * sl__tsc_ns_per_tick);
    return sl_now_ns();
}
#else
static inline uint64_t sl__now_fast(void) { return sl_now_ns(); }
#endif

/* ---- seconds ----
 * sl_now_ns's monotonic clock in seconds, as a double: for deadlines, heartbeats and the
 * durations tools print (not for per-element timing: that is sl__now_fast). */
static inline double sl_now_s(void) { return (double)sl_now_ns() * 1e-9; }

/* ---- IEEE half and bfloat16 (core/half.c) ----
 * float -> 16-bit rounds to nearest, ties to even; values at or beyond the largest finite
 * half after rounding (>= 65520) become infinity; NaN stays a quiet NaN with its sign. The
 * 16-bit -> float direction is exact (every half and bfloat16 is a float). */
uint16_t sl_f16_from_f32(float f);
float sl_f32_from_f16(uint16_t h);
uint16_t sl_bf16_from_f32(float f);
/* The same two roundings on a float's bit pattern (memcpy it out first), inline and
 * callable from CUDA device code too: the conversions above are these, and the CUDA
 * backend's mixed-precision GEMMs round their inputs with them. */
static inline SL_UTIL_HD uint16_t sl__f16_bits(uint32_t x) {
    uint32_t sign = (x >> 16) & 0x8000u, mag = x & 0x7fffffffu;
    if (mag >= 0x7f800000u) /* inf or nan (keep nan quiet and nonzero) */
        return (uint16_t)(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u | ((mag >> 13) & 0x3ffu) : 0));
    if (mag >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (mag < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (mag < 0x33000000u) return (uint16_t)sign; /* < half of the smallest subnormal */
        uint32_t e = mag >> 23, m = (mag & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t q = ((mag >> 13) - (112u << 10)), rem = mag & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1))) q++;
    return (uint16_t)(sign | q);
}
static inline SL_UTIL_HD uint16_t sl__bf16_bits(uint32_t x) {
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
static inline float sl_f32_from_bf16(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Whole arrays, with the CPU's F16C instructions where it has them (same results as the
 * scalar calls above, tested over all 65536 halfs). in and out must not overlap. */
void sl_f32_to_f16(const float *in, uint16_t *out, size_t n);
void sl_f16_to_f32(const uint16_t *in, float *out, size_t n);
extern int sl__f16c_off; /* tests set it to compare the portable path with F16C */

/* ---- little-endian loads and stores (any alignment) ---- */

/* SL__LE(BITS, v): v (a uint32_t or uint64_t) between this machine's byte order and
 * little-endian, either way: nothing on a little-endian machine, a byte swap on a big one. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define SL__LE(bits, v) __builtin_bswap##bits(v)
#else
#define SL__LE(bits, v) (v)
#endif

static inline uint16_t sl_load_le16(const void *p) {
    const uint8_t *b = (const uint8_t *)p;
    return (uint16_t)(b[0] | b[1] << 8);
}
static inline uint32_t sl_load_le32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return SL__LE(32, v);
}
static inline uint64_t sl_load_le64(const void *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return SL__LE(64, v);
}
static inline void sl_store_le16(void *p, uint16_t v) {
    uint8_t *b = (uint8_t *)p;
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
}
static inline void sl_store_le32(void *p, uint32_t v) {
    v = SL__LE(32, v);
    memcpy(p, &v, 4);
}
static inline void sl_store_le64(void *p, uint64_t v) {
    v = SL__LE(64, v);
    memcpy(p, &v, 8);
}

/* The int64 whose two's complement bits are u, with no out-of-range conversion (arithmetic
 * done in uint64 to stay clear of signed overflow, then turned back). */
static inline int64_t sl_i64_from_bits(uint64_t u) {
    return u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

/* ---- an environment passed in (not the process's: tests and libraries give their own) ----
 * NAME's value in envp (a NULL-terminated "NAME=VALUE" array, as environ), or NULL when
 * envp is NULL or has no NAME. */
static inline const char *sl_env_get(const char *const *envp, const char *name) {
    size_t n = strlen(name);
    for (; envp && *envp; envp++)
        if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=') return *envp + n + 1;
    return NULL;
}

/* ---- repeated keys (core/json.c) ----
 * What JSON objects and config statements refuse: among keys[0..n) (NULL entries skipped),
 * the first in their order that repeats an earlier one. SL_OK with *second its index and
 * *first the index of the key it repeats (the earliest), or both n when none repeats;
 * SL_ENOMEM (both n). Sorted beyond 16 keys, so a hostile input of many keys costs
 * O(n log n), not n^2. */
sl_status sl__first_repeat(const char *const *keys, size_t n, size_t *second, size_t *first);

/* ---- memory left to this process (core/mem.c) ----
 * The bytes this process can still allocate before the kernel's OOM killer or its cgroup's
 * limit ends it: the least of MemAvailable (/proc/meminfo) and, for each cgroup level above
 * the process (v2 memory.max, v1 memory.limit_in_bytes), its limit less its use. true with
 * *bytes and, unless source is NULL, where the figure came from ("MemAvailable in
 * /proc/meminfo", or the limit file's path) in source; false when nothing could be read
 * (then nothing is written). Models and pipeline buffers are planned against it. */
bool sl_mem_available(int64_t *bytes, char *source, size_t cap);

/* bytes as "512 bytes", "3.2 MiB", "9.4 GiB", ... into out (cap bytes); a double, so sizes
 * past 2^63 (a plan's product) are said as they are. */
void sl_mem_format(double bytes, char *out, size_t cap);

/* ---- splitmix64 (Steele, Lea, Flood 2014) ----
 * Small, fast and fixed: one seed gives the same numbers on every machine, which the
 * shuffles, augmentations, initialisers and generated data rely on. */

/* The splitmix64 output function: a bijective mix of z. */
static inline SL_UTIL_HD uint64_t sl_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
#define SL_GOLDEN64 0x9e3779b97f4a7c15ull

/* The next number of the generator whose state is *s (any value is a valid state). */
static inline SL_UTIL_HD uint64_t sl_splitmix64(uint64_t *s) { return sl_mix64(*s += SL_GOLDEN64); }

/* A well-mixed hash of (a, b) (two splitmix rounds): child stream seeds, per-element seeds. */
static inline uint64_t sl_mix2(uint64_t a, uint64_t b) {
    uint64_t z = sl_mix64(a + SL_GOLDEN64 * (b + 1));
    return sl_mix64(z + (b ^ 0xd1b54a32d192ed03ull));
}

/* ---- FNV-1a 64 ----
 * Extend h (SL_FNV64_INIT to start) over n bytes: hash tables, fingerprints, checks that
 * any flipped bit changes (not a checksum against deliberate edits). */
#define SL_FNV64_INIT 0xcbf29ce484222325ull
static inline uint64_t sl_fnv1a64(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

/* ---- a random permutation of [0, n), one position at a time ----
 * A balanced Feistel network of six rounds (each a splitmix64 mix of one half and a round
 * key drawn from the seed) over the smallest even number of bits that holds n - 1, walked
 * until it lands below n (at most 4 tries on average: the domain is under 4n). No table:
 * 64 bytes of state whatever n is, and any position in a few dozen nanoseconds, so a
 * shuffle over a billion records costs no memory and a resumed run finds position k at
 * once. The same seed gives the same permutation on every machine. */
typedef struct sl_perm {
    uint64_t n;       /* the permutation is of [0, n) */
    uint64_t mask;    /* one half's bits */
    int half;         /* bits in a half */
    uint64_t key[6];  /* round keys */
} sl_perm;

/* p as the permutation of [0, n) (n >= 1) that `seed` selects. */
void sl_perm_init(sl_perm *p, uint64_t n, uint64_t seed);

/* Where position i (< p->n) goes: a bijection of [0, n). */
uint64_t sl_perm_at(const sl_perm *p, uint64_t i);

#ifdef __cplusplus
}
#endif
#endif
