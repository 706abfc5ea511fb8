/* The ring's shared-memory segment: creation, attachment, progress counters with futex
 * wake-ups, and the liveness of the peers (the layout is in shm_priv.h).
 *
 * Workload: 2-16 ranks of one job on one host, a few hundred windows per collective, each
 * window a few hundred KiB; a waiter spins briefly (the peers usually post within
 * microseconds when every rank has a core), then sleeps on the futex in slices of 20 ms,
 * checking between slices whether the peer failed, left, died or stopped.
 *
 * Ranks of one ring may be threads of one process (tests, library users): they share one
 * mapping (a process-wide table keyed by the segment's name), so the same memory is never
 * seen at two addresses by the race detectors nor mapped twice. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shm_priv.h"
#include "sluice/util.h"



#define SHM_MAGIC 0x4d534c53u /* "SLSM" */
#define SHM_VERSION 1
#define SHM_PREFIX "sluice-"

enum { ST_EMPTY = 0, ST_ATTACHED = 1, ST_ABORTED = 2, ST_LEFT = 3 };

typedef struct seg_hdr {
    uint32_t magic, version, n, nslots;
    uint64_t job, key, size, window;
    int32_t creator;
    uint32_t pad[7];
} seg_hdr;

typedef struct rank_slot {
    _Atomic uint32_t prog[SL__PH_N];    /* windows posted in each phase (futex words) */
    _Atomic uint32_t waiters[SL__PH_N]; /* threads sleeping on prog[ph] */
    _Atomic uint32_t state;             /* ST_* */
    _Atomic int32_t pid;                /* 0 until the rank has attached */
    char why[224];                      /* ST_ABORTED: the rank's error message */
} rank_slot;

_Static_assert(sizeof(sl__shm_whdr) == 64, "window header is one cache line");
_Static_assert(sizeof(rank_slot) == 256, "rank slot is 256 bytes");

static size_t up(size_t x, size_t a) { return (x + a - 1) / a * a; }
static size_t off_ranks(void) { return 4096; }
static size_t off_whdr(int n) { return up(off_ranks() + (size_t)n * sizeof(rank_slot), 4096); }
static size_t off_data(int n, int k) { return up(off_whdr(n) + (size_t)n * (size_t)k * sizeof(sl__shm_whdr), 4096); }
static size_t seg_size(int n, int k, size_t w) { return off_data(n, k) + (size_t)n * (size_t)k * w; }

static rank_slot *slot(sl__shm *m, int r) { return (rank_slot *)(m->base + off_ranks()) + r; }

/* Rank k of the segment as the job knows it: its rank in the transport, and its address. */
static int job_rank(const sl__shm *m, int k) { return m->ranks[k]; }
static const char *addr_of(const sl__shm *m, int k) { return m->tp ? sl_tp_peer_addr(m->tp, m->ranks[k]) : "?"; }

unsigned char *sl__shm_data(sl__shm *m, int rank, uint64_t win) {
    return m->base + off_data(m->n, m->nslots) + ((size_t)rank * (size_t)m->nslots + win % (uint64_t)m->nslots) * m->window;
}

sl__shm_whdr *sl__shm_hdr(sl__shm *m, int rank, uint64_t win) {
    return (sl__shm_whdr *)(m->base + off_whdr(m->n)) + (size_t)rank * (size_t)m->nslots + win % (uint64_t)m->nslots;
}

/* ---- where a rank runs ------------------------------------------------------------------ */

void sl__shm_where_self(sl__shm_where *w, const char *host) {
    memset(w, 0, sizeof *w);
    if (host && host[0]) snprintf(w->host, sizeof w->host, "%s", host);
    else gethostname(w->host, sizeof w->host - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(w->boot, sizeof w->boot, f)) w->boot[0] = 0;
        w->boot[strcspn(w->boot, "\n")] = 0;
        fclose(f);
    }
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) == 0) w->pidns = (uint64_t)st.st_ino;
    if (stat("/proc/self/ns/net", &st) == 0) w->netns = (uint64_t)st.st_ino;
    if (stat("/dev/shm", &st) == 0) {
        w->shm_dev = (uint64_t)st.st_dev;
        w->shm_ino = (uint64_t)st.st_ino;
    }
    w->uid = (uint32_t)getuid();
}

int sl__shm_same_host(const sl__shm_where *a, const sl__shm_where *b) {
    return a->host[0] && a->boot[0] && a->pidns && a->shm_ino && !strncmp(a->host, b->host, sizeof a->host) &&
           !strncmp(a->boot, b->boot, sizeof a->boot) && a->pidns == b->pidns && a->netns == b->netns && a->shm_dev == b->shm_dev &&
           a->shm_ino == b->shm_ino && a->uid == b->uid;
}

/* ---- mappings shared by the threads of one process ---------------------------------------- */

typedef struct mapping {
    char name[SL__SHM_NAME];
    unsigned char *base;
    size_t size;
    int refs;
    struct mapping *next;
} mapping;

static pthread_mutex_t maps_mu = PTHREAD_MUTEX_INITIALIZER;
static mapping *maps; /* guarded by maps_mu */

static unsigned char *map_find_locked(const char *name, size_t *size) {
    for (mapping *p = maps; p; p = p->next)
        if (!strcmp(p->name, name)) {
            p->refs++;
            *size = p->size;
            return p->base;
        }
    return NULL;
}

static int map_add_locked(const char *name, unsigned char *base, size_t size) {
    mapping *p = calloc(1, sizeof *p);
    if (!p) return -1;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->base = base;
    p->size = size;
    p->refs = 1;
    p->next = maps;
    maps = p;
    return 0;
}

static void map_release(unsigned char *base) {
    pthread_mutex_lock(&maps_mu);
    for (mapping **pp = &maps; *pp; pp = &(*pp)->next) {
        mapping *p = *pp;
        if (p->base != base) continue;
        if (--p->refs == 0) {
            *pp = p->next;
            munmap(p->base, p->size);
            free(p);
        }
        break;
    }
    pthread_mutex_unlock(&maps_mu);
}

/* ---- segment life --------------------------------------------------------------------------- */

/* 'R' running or sleeping, 'T' stopped, 'Z'/'X' or 0 gone (no such process). */
static char proc_state(int pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return kill(pid, 0) == 0 || errno == EPERM ? 'R' : 0;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    const char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    if (!p || p[1] != ' ') return 'R';
    char c = p[2];
    if (c == 'Z' || c == 'X') return 0;
    if (c == 'T' || c == 't') return 'T';
    return 'R';
}

/* Unlink the segments of this user whose creator no longer runs: what a SIGKILL between
 * create and unlink leaves behind ("sluice-<job>-<pid>-<nonce>"). */
static void sweep(void) {
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, SHM_PREFIX, strlen(SHM_PREFIX))) continue;
        unsigned long long job, nonce;
        int pid;
        if (sscanf(e->d_name, SHM_PREFIX "%16llx-%d-%16llx", &job, &pid, &nonce) != 3 || pid <= 0) continue;
        char path[300];
        struct stat st;
        snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
        if (stat(path, &st) || st.st_uid != getuid() || proc_state(pid)) continue;
        char name[SL__SHM_NAME + 2];
        snprintf(name, sizeof name, "/%.*s", SL__SHM_NAME - 1, e->d_name);
        shm_unlink(name);
    }
    closedir(d);
}

static sl__shm *new_handle(const sl__shm_cfg *cfg, const char *name) {
    sl__shm *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->n = cfg->n;
    m->rank = cfg->rank;
    m->job = cfg->job;
    m->tp = cfg->tp;
    for (int k = 0; k < m->n && k < 64; k++) m->ranks[k] = cfg->ranks ? cfg->ranks[k] : k;
    m->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 30.0;
    m->window = up(cfg->window ? cfg->window : ((size_t)256 << 10), 64);
    m->nslots = 3;
    /* more ranks than cores: a spinning rank would hold the core its peer needs */
    cpu_set_t cs;
    int cpus = sched_getaffinity(0, sizeof cs, &cs) == 0 ? CPU_COUNT(&cs) : 1;
    m->yield = m->n > cpus;
    m->spin = m->n <= cpus ? 4096 : 64;
    snprintf(m->name, sizeof m->name, "%s", name);
    return m;
}

static sl_status claim_slot(sl__shm *m) {
    rank_slot *s = slot(m, m->rank);
    uint32_t want = ST_EMPTY;
    if (!atomic_compare_exchange_strong(&s->state, &want, ST_ATTACHED))
        return sl_err(SL_EPEER, "shared memory %s: rank %d's slot is already taken (pid %d)", m->name, m->rank,
                      (int)s->pid);
    atomic_store(&s->pid, (int32_t)getpid());
    return SL_OK;
}

sl_status sl__shm_create(const sl__shm_cfg *cfg, char name[SL__SHM_NAME], uint64_t *key, sl__shm **out) {
    *out = NULL;
    if (cfg->n < 2 || cfg->n > 64) return sl_err(SL_EINVAL, "shared memory: %d ranks (2..64)", cfg->n);
    sweep();
    uint64_t nonce;
    sl_status st = sl_tp_random_u64(&nonce);
    if (st) return st;
    if ((st = sl_tp_random_u64(key))) return st;
    snprintf(name, SL__SHM_NAME, "/" SHM_PREFIX "%016llx-%d-%016llx", (unsigned long long)cfg->job, (int)getpid(),
             (unsigned long long)nonce);
    sl__shm *m = new_handle(cfg, name);
    if (!m) return sl_err(SL_ENOMEM, "shared memory: out of memory");
    size_t size = seg_size(m->n, m->nslots, m->window);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        st = sl_err(SL_EIO, "shared memory: shm_open(%s): %s", name, strerror(errno));
        free(m);
        return st;
    }
    /* every page now, so a full /dev/shm is this error and never a SIGBUS mid-allreduce */
    int e = posix_fallocate(fd, 0, (off_t)size);
    if (e) {
        st = sl_err(e == ENOSPC ? SL_ENOMEM : SL_EIO, "shared memory: %zu bytes for %d ranks in /dev/shm: %s", size,
                    m->n, strerror(e));
        sl_err_hint("free room in /dev/shm (df -h /dev/shm; a container's default is 64 MiB: --shm-size), use a "
                    "smaller shm window, or ring path tcp");
        close(fd);
        shm_unlink(name);
        free(m);
        return st;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        st = sl_err(SL_EIO, "shared memory: mmap of %zu bytes of %s: %s", size, name, strerror(errno));
        shm_unlink(name);
        free(m);
        return st;
    }
    m->base = p;
    m->size = size;
    seg_hdr *h = (seg_hdr *)m->base;
    *h = (seg_hdr){.magic = SHM_MAGIC, .version = SHM_VERSION, .n = (uint32_t)m->n, .nslots = (uint32_t)m->nslots,
                   .job = m->job, .key = *key, .size = size, .window = m->window, .creator = (int32_t)getpid()};
    pthread_mutex_lock(&maps_mu);
    int bad = map_add_locked(name, m->base, size);
    pthread_mutex_unlock(&maps_mu);
    if (bad) {
        munmap(p, size);
        shm_unlink(name);
        free(m);
        return sl_err(SL_ENOMEM, "shared memory: out of memory");
    }
    if ((st = claim_slot(m))) {
        sl__shm_close(m);
        shm_unlink(name);
        return st;
    }
    *out = m;
    return SL_OK;
}

sl_status sl__shm_attach(const sl__shm_cfg *cfg, const char *name, uint64_t key, sl__shm **out) {
    *out = NULL;
    sl__shm *m = new_handle(cfg, name);
    if (!m) return sl_err(SL_ENOMEM, "shared memory: out of memory");
    sl_status st = SL_OK;
    size_t size = 0;
    pthread_mutex_lock(&maps_mu);
    unsigned char *base = map_find_locked(name, &size);
    if (!base) {
        int fd = shm_open(name, O_RDWR, 0);
        struct stat sb;
        if (fd < 0) {
            st = sl_err(SL_EIO, "shared memory: shm_open(%s): %s", name, strerror(errno));
        } else if (fstat(fd, &sb) || sb.st_uid != getuid() || (size_t)sb.st_size < sizeof(seg_hdr)) {
            st = sl_err(SL_EPEER, "shared memory %s: not a segment of this user (%lld bytes)", name,
                        (long long)sb.st_size);
        } else {
            size = (size_t)sb.st_size;
            void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (p == MAP_FAILED) st = sl_err(SL_EIO, "shared memory: mmap(%s): %s", name, strerror(errno));
            else if (map_add_locked(name, p, size)) {
                munmap(p, size);
                st = sl_err(SL_ENOMEM, "shared memory: out of memory");
            } else {
                base = p;
            }
        }
        if (fd >= 0) close(fd);
    }
    pthread_mutex_unlock(&maps_mu);
    if (st) {
        free(m);
        return st;
    }
    m->base = base;
    m->size = size;
    const seg_hdr *h = (const seg_hdr *)base;
    if (h->magic != SHM_MAGIC || h->version != SHM_VERSION)
        st = sl_err(SL_EPEER, "shared memory %s: magic %08x version %u, expected %08x version %d", name, h->magic,
                    h->version, SHM_MAGIC, SHM_VERSION);
    else if (h->job != m->job || h->key != key)
        st = sl_err(SL_EPEER, "shared memory %s belongs to job %016llx, not this job (%016llx), or its key differs",
                    name, (unsigned long long)h->job, (unsigned long long)m->job);
    else if (h->n != (uint32_t)m->n || h->nslots != (uint32_t)m->nslots || h->window != m->window ||
             h->size != size || size != seg_size(m->n, m->nslots, m->window))
        st = sl_err(SL_EPEER,
                    "shared memory %s: %u ranks, %u windows of %llu bytes, %llu bytes; this rank expects %d ranks, "
                    "%d windows of %zu bytes, %zu bytes",
                    name, h->n, h->nslots, (unsigned long long)h->window, (unsigned long long)h->size, m->n,
                    m->nslots, m->window, seg_size(m->n, m->nslots, m->window));
    else
        st = claim_slot(m);
    if (st) {
        if (st == SL_EPEER) sl_err_hint("every rank of a ring must use the same shm window and job id");
        map_release(m->base);
        free(m);
        return st;
    }
    *out = m;
    return SL_OK;
}

void sl__shm_unlink(const char *name) {
    if (name && name[0]) shm_unlink(name);
}

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts) {
    return syscall(SYS_futex, (uint32_t *)w, op, val, ts, NULL, 0);
}

static void wake_all(sl__shm *m, int r) {
    rank_slot *s = slot(m, r);
    for (int ph = 0; ph < SL__PH_N; ph++) futex(&s->prog[ph], FUTEX_WAKE, INT_MAX, NULL);
}

void sl__shm_close(sl__shm *m) {
    if (!m) return;
    if (m->base) {
        rank_slot *s = slot(m, m->rank);
        uint32_t st = atomic_load(&s->state);
        if (st == ST_ATTACHED) atomic_store(&s->state, ST_LEFT);
        wake_all(m, m->rank);
        map_release(m->base);
    }
    free(m);
}

void sl__shm_abort(sl__shm *m, const char *why) {
    if (!m || !m->base) return;
    m->broken = 1;
    rank_slot *s = slot(m, m->rank);
    if (atomic_load(&s->state) != ST_ATTACHED) return;
    snprintf(s->why, sizeof s->why, "%s", why ? why : "");
    atomic_store(&s->state, ST_ABORTED);
    wake_all(m, m->rank);
}

sl_status sl__shm_fail(sl__shm *m, sl_status s) {
    sl_error e;
    sl_err_save(&e);
    sl__shm_abort(m, e.msg);
    return sl_err_restore(&e);
}

/* ---- progress --------------------------------------------------------------------------------- */

void sl__shm_post(sl__shm *m, int ph, uint64_t win) {
    rank_slot *s = slot(m, m->rank);
    atomic_store(&s->prog[ph], (uint32_t)(win + 1));
    if (atomic_load(&s->waiters[ph])) futex(&s->prog[ph], FUTEX_WAKE, INT_MAX, NULL);
}

static int reached(uint32_t v, uint64_t win) { return (int32_t)(v - (uint32_t)(win + 1)) >= 0; }

static const char *phase_name(int ph) {
    return ph == SL__PH_WRITTEN ? "writing" : ph == SL__PH_REDUCED ? "reducing" : "reading";
}

/* Why rank k will not post: SL_OK when it still may. */
static sl_status peer_gone(sl__shm *m, int k, int ph, uint64_t win) {
    rank_slot *s = slot(m, k);
    uint32_t st = atomic_load(&s->state);
    const char *addr = addr_of(m, k);
    if (st == ST_ABORTED) {
        char why[sizeof s->why];
        memcpy(why, s->why, sizeof why);
        why[sizeof why - 1] = 0;
        return sl_err(SL_EPEER, "rank %d (%s) [pid %d, shared memory] failed: %s", job_rank(m, k), addr, (int)s->pid, why);
    }
    if (st == ST_LEFT)
        return sl_err(SL_EPEER, "rank %d (%s) [pid %d, shared memory] left the ring before %s window %llu",
                      job_rank(m, k), addr,
                      (int)s->pid, phase_name(ph), (unsigned long long)win);
    for (int r = 0; r < m->n; r++) /* a third rank's failure ends this collective too */
        if (r != k && r != m->rank && atomic_load(&slot(m, r)->state) == ST_ABORTED) return peer_gone(m, r, ph, win);
    if (s->pid > 0 && s->pid != (int32_t)getpid() && !proc_state(s->pid))
        return sl_err(SL_EPEER, "rank %d (%s) [pid %d, shared memory] died during collective %llu (window %llu, %s)",
                      job_rank(m, k), addr, (int)s->pid, (unsigned long long)m->seq, (unsigned long long)win,
                      phase_name(ph));
    return SL_OK;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

sl_status sl__shm_wait(sl__shm *m, int k, int ph, uint64_t win) {
    rank_slot *s = slot(m, k);
    /* the peers usually post within microseconds: spin a little before sleeping, and give
     * the core away in between, since ranks may outnumber cores */
    for (int i = 0; i < m->spin; i++) {
        if (reached(atomic_load_explicit(&s->prog[ph], memory_order_acquire), win)) return SL_OK;
        if (m->yield || (i & 255) == 255) sched_yield();
        else cpu_relax();
    }
    double start = sl_now_s(), deadline = start + m->timeout_s;
    for (;;) {
        uint32_t v = atomic_load(&s->prog[ph]);
        if (reached(v, win)) return SL_OK;
        sl_status st = peer_gone(m, k, ph, win);
        if (st) return st;
        double now = sl_now_s();
        if (now >= deadline) {
            char state = proc_state(s->pid);
            const char *addr = addr_of(m, k);
            sl_err(SL_ETIMEDOUT,
                   "rank %d (%s) [pid %d, shared memory] made no progress for %.1f s: collective %llu, window %llu, "
                   "%s%s",
                   job_rank(m, k), addr, (int)s->pid, now - start, (unsigned long long)m->seq, (unsigned long long)win,
                   phase_name(ph), state == 'T' ? "; the process is stopped (SIGSTOP or a debugger)" : "");
            sl_err_hint("every rank must make the same collective calls in the same order; a rank that is slower "
                        "than the timeout needs a longer one");
            return SL_ETIMEDOUT;
        }
        atomic_fetch_add(&s->waiters[ph], 1);
        if (!reached(atomic_load(&s->prog[ph]), win)) {
            double left = deadline - now;
            if (left > 0.02) left = 0.02;
            struct timespec ts = {0, (long)(left * 1e9) + 1};
            futex(&s->prog[ph], FUTEX_WAIT, v, &ts);
        }
        atomic_fetch_sub(&s->waiters[ph], 1);
    }
}

sl_status sl__shm_wait_all(sl__shm *m, int ph, uint64_t win) {
    for (int k = 0; k < m->n; k++) {
        if (k == m->rank) continue;
        sl_status st = sl__shm_wait(m, k, ph, win);
        if (st) return st;
    }
    return SL_OK;
}

sl_status sl__shm_wait_free(sl__shm *m, uint64_t win) {
    if (win < (uint64_t)m->nslots) return SL_OK;
    return sl__shm_wait_all(m, SL__PH_DONE, win - (uint64_t)m->nslots);
}

static const char *kind_name(int k) {
    return k == SL__SHM_ALLREDUCE ? "allreduce" : k == SL__SHM_BROADCAST ? "broadcast" : k == SL__SHM_ALLGATHER ? "allgather" : k == SL__SHM_BARRIER ? "barrier" : "unknown";
}

sl_status sl__shm_check(sl__shm *m, int k, const sl__shm_whdr *want) {
    const sl__shm_whdr *h = sl__shm_hdr(m, k, want->win);
    if (h->seq == want->seq && h->win == want->win && h->count == want->count && h->lo == want->lo &&
        h->hi == want->hi && h->tensor == want->tensor && h->kind == want->kind && h->dtype == want->dtype &&
        h->flags == want->flags && h->op == want->op && h->root == want->root)
        return SL_OK;
    sl_err(SL_EPEER,
           "rank %d (%s) [shared memory] is in %s %llu (window %llu: count %llu, range [%llu, %llu), dtype %s, "
           "flags %u, op %u, root %d, tensor %u); this rank is in %s %llu (window %llu: count %llu, range [%llu, "
           "%llu), dtype %s, flags %u, op %u, root %d, tensor %u)",
           job_rank(m, k), addr_of(m, k), kind_name(h->kind), (unsigned long long)h->seq,
           (unsigned long long)h->win, (unsigned long long)h->count, (unsigned long long)h->lo,
           (unsigned long long)h->hi, sl_dtype_name((sl_dtype)h->dtype), h->flags, h->op, (int)h->root, h->tensor,
           kind_name(want->kind), (unsigned long long)want->seq, (unsigned long long)want->win,
           (unsigned long long)want->count, (unsigned long long)want->lo, (unsigned long long)want->hi,
           sl_dtype_name((sl_dtype)want->dtype), want->flags, want->op, (int)want->root, want->tensor);
    sl_err_hint("every rank must make the same collective calls, in the same order, with the same count, dtype, "
                "fp16 and compress= setting");
    return SL_EPEER;
}
