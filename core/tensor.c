/* Refcounted buffers, tensors and elements. A buffer made by sl_buf_new carries its bytes
 * in the same allocation as its header (one malloc per buffer); wrapped memory has a free
 * callback instead. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "sluice/tensor.h"
#include "sluice/util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define BUF_ALIGN 64
/* header padded so data stays 64-byte aligned inside one aligned allocation */
#define BUF_HDR ((sizeof(sl_buf) + BUF_ALIGN - 1) / BUF_ALIGN * BUF_ALIGN)

/* Marks a buffer whose bytes live in its own allocation; never called. Such a buffer keeps
 * its allocation's total size in free_ctx. */
static void inline_bytes(void *ctx, void *data) { (void)ctx; (void)data; }

/* Small buffers (a record's view, a label, an image: several per record in a pipeline)
 * come from malloc, aligned by hand, with the pointer malloc gave kept in free_ctx: glibc's
 * aligned_alloc bypasses its per-thread cache and splits a larger chunk on every call,
 * which made each of them several times the cost of a malloc. Marked by this function
 * (never called). */
#define SMALL_MAX ((size_t)64 << 10)
static void small_bytes(void *ctx, void *data) { (void)ctx; (void)data; }

/* Large buffers (batches: hundreds of KB to tens of MB) are recycled instead of freed.
 * glibc serves them with mmap and returns them with munmap (or gives a freed heap top back
 * with madvise), so every new batch would page-fault its memory in again: that was a sixth
 * of a JPEG pipeline's time, and a third of a Fashion-MNIST pipeline's (400 KB batches,
 * when only buffers of 1 MiB and more were kept). A small cache of recently freed large
 * allocations, best fit within 2x, avoids it. Bounded in count and bytes. */
#define CACHE_MIN SMALL_MAX
#define CACHE_SLOTS 16
#define CACHE_MAX_BYTES ((size_t)1 << 30)

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { void *p; size_t total; } cache[CACHE_SLOTS]; /* guarded by cache_mu */
static size_t cache_bytes;                                    /* guarded by cache_mu */

static void *cache_take(size_t total) {
    void *p = NULL;
    pthread_mutex_lock(&cache_mu);
    int best = -1;
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (cache[i].p && cache[i].total >= total && cache[i].total / 2 <= total &&
            (best < 0 || cache[i].total < cache[best].total))
            best = i;
    if (best >= 0) {
        p = cache[best].p;
        cache_bytes -= cache[best].total;
        cache[best].p = NULL;
    }
    pthread_mutex_unlock(&cache_mu);
    return p;
}

/* Keep p (of `total` bytes) for reuse; false if the cache is full. */
static bool cache_put(void *p, size_t total) {
    bool kept = false;
    pthread_mutex_lock(&cache_mu);
    if (cache_bytes + total <= CACHE_MAX_BYTES)
        for (int i = 0; i < CACHE_SLOTS && !kept; i++)
            if (!cache[i].p) {
                cache[i].p = p;
                cache[i].total = total;
                cache_bytes += total;
                kept = true;
            }
    pthread_mutex_unlock(&cache_mu);
    return kept;
}

sl_buf *sl_buf_new(size_t size) {
    if (size > SIZE_MAX - BUF_HDR - BUF_ALIGN) {
        sl_err(SL_ENOMEM, "buffer of %zu bytes is too large", size);
        return NULL;
    }
    size_t total = (BUF_HDR + size + BUF_ALIGN - 1) / BUF_ALIGN * BUF_ALIGN;
    sl_buf *b = NULL;
    if (total >= CACHE_MIN) {
        b = cache_take(total);
        if (b) total = (size_t)(uintptr_t)b->free_ctx; /* the allocation's real size */
    }
    void *raw = NULL;
    if (!b && total < SMALL_MAX && (raw = malloc(total + BUF_ALIGN)))
        b = (sl_buf *)(((uintptr_t)raw + BUF_ALIGN - 1) & ~(uintptr_t)(BUF_ALIGN - 1));
    else if (!b) b = aligned_alloc(BUF_ALIGN, total);
    if (!b) {
        sl_err(SL_ENOMEM, "out of memory allocating a %zu-byte buffer", size);
        return NULL;
    }
    atomic_init(&b->refs, 1);
    atomic_init(&b->damaged, false);
    b->data = (char *)b + BUF_HDR;
    b->size = size;
    b->free_fn = raw ? small_bytes : inline_bytes;
    b->free_ctx = raw ? raw : (void *)(uintptr_t)total;
    return b;
}

sl_buf *sl_buf_copy(const void *data, size_t size) {
    sl_buf *b = sl_buf_new(size);
    if (b && size) memcpy(b->data, data, size);
    return b;
}

sl_buf *sl_buf_wrap(void *data, size_t size, sl_free_fn free_fn, void *free_ctx) {
    sl_buf *b = malloc(sizeof *b);
    if (!b) {
        sl_err(SL_ENOMEM, "out of memory wrapping a buffer");
        return NULL;
    }
    atomic_init(&b->refs, 1);
    atomic_init(&b->damaged, false);
    b->data = data;
    b->size = size;
    b->free_fn = free_fn;
    b->free_ctx = free_ctx;
    return b;
}

/* ---- guarded file mappings ----
 *
 * A file that shrinks while it is mapped (a shard replaced in place, a copy still being
 * written) turns reads past its new end into SIGBUS. Guarded mappings sit in a registry
 * that the SIGBUS handler can walk without locks: chunks of slots that are never freed,
 * linked by an atomic pointer, each slot claimed by a CAS on its `start` (0 = free) and
 * published with release order after len/prot/buf/fd are written. The handler replaces the
 * faulting page and the rest of that mapping by anonymous zero pages (MAP_FIXED), lowers
 * the slot's lost_from to that page and sets the buffer's damaged flag (lock-free atomic
 * stores) and returns, so the read completes.
 *
 * Which bytes are gone (sl_buf_lost): a range reaching past lost_from reads the guard's
 * zeros. A range before it whose pages are all still mapped can only have lost the bytes
 * between the file's new end and the end of that page (zeroed by the kernel, no fault), so
 * touching the range's pages and the mapping's last one (which faults whenever the file
 * lost its last page) leaves one question, asked of the file (fstat) only when the mapping
 * is damaged or the range lies in its last page. */
#define GUARD_SLOTS 256
#define GUARD_MAX_FDS 256 /* file descriptors kept by guarded mappings, process-wide */

typedef struct guard_slot {
    _Atomic uintptr_t start;      /* mapping address; 0: free */
    size_t len;                   /* bytes mapped; written before start is published */
    int prot;
    int fd;                       /* a duplicate of the mapped file's descriptor, or -1 */
    sl_buf *buf;
    _Atomic uint64_t lost_from;   /* offset of the first page the handler replaced; UINT64_MAX: none */
} guard_slot;

typedef struct guard_chunk {
    guard_slot slot[GUARD_SLOTS];
    struct guard_chunk *_Atomic next;
} guard_chunk;

static guard_chunk guard_first;
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER; /* serialises chunk appends */
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static struct sigaction guard_prev; /* the SIGBUS disposition before ours; read by the handler */
static uintptr_t guard_page;        /* the page size; set once with the handler */
static atomic_int guard_fds;        /* descriptors kept by live guarded mappings */

static void guard_on_bus(int sig, siginfo_t *info, void *uctx) {
    uintptr_t a = (uintptr_t)info->si_addr;
    for (guard_chunk *c = &guard_first; c; c = atomic_load_explicit(&c->next, memory_order_acquire))
        for (int i = 0; i < GUARD_SLOTS; i++) {
            guard_slot *g = &c->slot[i];
            uintptr_t start = atomic_load_explicit(&g->start, memory_order_acquire);
            if (!start || a < start || a - start >= g->len) continue;
            uintptr_t pg = guard_page;
            uintptr_t from = a & ~(pg - 1), to = (start + g->len + pg - 1) & ~(pg - 1);
            void *m = mmap((void *)from, to - from, g->prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                           -1, 0);
            if (m == MAP_FAILED) break; /* cannot repair: fall through to the old disposition */
            uint64_t off = from > start ? from - start : 0;
            uint64_t cur = atomic_load(&g->lost_from);
            while (off < cur && !atomic_compare_exchange_weak(&g->lost_from, &cur, off)) {
            }
            atomic_store(&g->buf->damaged, true);
            return;
        }
    if ((guard_prev.sa_flags & SA_SIGINFO) && guard_prev.sa_sigaction) {
        guard_prev.sa_sigaction(sig, info, uctx);
    } else if (guard_prev.sa_handler != SIG_DFL && guard_prev.sa_handler != SIG_IGN) {
        guard_prev.sa_handler(sig);
    } else {
        /* Default action: restore it; returning re-runs the faulting access, which then
         * gets the default action (the process ends with SIGBUS, as without us). */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(SIGBUS, &dfl, NULL);
    }
}

static void guard_install(void) {
    guard_page = (uintptr_t)sysconf(_SC_PAGESIZE);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = guard_on_bus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &guard_prev);
}

static guard_slot *guard_claim(void) {
    for (guard_chunk *c = &guard_first;;) {
        for (int i = 0; i < GUARD_SLOTS; i++) {
            uintptr_t zero = 0;
            /* 1 reserves the slot (no mapping starts at address 1); the handler skips it as
             * its len is not yet trusted: len stays 0 until published */
            if (atomic_compare_exchange_strong(&c->slot[i].start, &zero, 1)) return &c->slot[i];
        }
        guard_chunk *next = atomic_load_explicit(&c->next, memory_order_acquire);
        if (!next) {
            pthread_mutex_lock(&guard_mu);
            next = atomic_load_explicit(&c->next, memory_order_acquire);
            if (!next) {
                next = calloc(1, sizeof *next);
                if (next) atomic_store_explicit(&c->next, next, memory_order_release);
            }
            pthread_mutex_unlock(&guard_mu);
            if (!next) return NULL;
        }
        c = next;
    }
}

static void unmap_guarded(void *ctx, void *data) {
    guard_slot *g = ctx;
    size_t len = g->len;
    g->len = 0;
    if (g->fd >= 0) {
        close(g->fd);
        atomic_fetch_sub(&guard_fds, 1);
    }
    atomic_store_explicit(&g->start, 0, memory_order_release);
    munmap(data, len);
}

/* A duplicate of fd for a guarded mapping, within the process-wide allowance; -1 if none. */
static int keep_fd(int fd) {
    if (fd < 0 || atomic_fetch_add(&guard_fds, 1) >= GUARD_MAX_FDS) {
        if (fd >= 0) atomic_fetch_sub(&guard_fds, 1);
        return -1;
    }
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0) atomic_fetch_sub(&guard_fds, 1);
    return d;
}

sl_buf *sl_buf_wrap_file_mapping(void *addr, size_t len, int prot, int fd) {
    pthread_once(&guard_once, guard_install);
    guard_slot *g = guard_claim();
    if (!g) {
        sl_err(SL_ENOMEM, "out of memory guarding a file mapping");
        return NULL;
    }
    sl_buf *b = sl_buf_wrap(addr, len, unmap_guarded, g);
    if (!b) {
        atomic_store(&g->start, 0);
        return NULL;
    }
    g->len = len;
    g->prot = prot;
    g->fd = keep_fd(fd);
    g->buf = b;
    atomic_store(&g->lost_from, UINT64_MAX);
    atomic_store_explicit(&g->start, (uintptr_t)addr, memory_order_release);
    return b;
}

sl_buf *sl_buf_wrap_mapping(void *addr, size_t len, int prot) {
    return sl_buf_wrap_file_mapping(addr, len, prot, -1);
}

bool sl_buf_damaged(const sl_buf *b) {
    return b && atomic_load_explicit(&((sl_buf *)b)->damaged, memory_order_acquire);
}

bool sl_buf_mapped(const sl_buf *b) { return b && b->free_fn == unmap_guarded; }

/* sl_buf_lost, also giving the file's size when it was asked (else -1) and the range's
 * offsets in the file. */
static bool range_lost(const sl_buf *b, const void *p, size_t n, long long *size, uint64_t *from,
                       uint64_t *to) {
    *size = -1;
    if (!sl_buf_mapped(b) || n == 0) return false;
    guard_slot *g = b->free_ctx;
    uintptr_t lo = (uintptr_t)b->data, hi = lo + b->size, a = (uintptr_t)p, e = a + n;
    if (a < lo) a = lo;
    if (e > hi || e < a) e = hi;
    if (a >= e) return false;
    uintptr_t pg = guard_page;
    for (uintptr_t x = a; x < e; x = (x | (pg - 1)) + 1) (void)*(volatile const char *)x;
    (void)*(volatile const char *)(hi - 1);
    *from = a - lo;
    *to = e - lo;
    bool zeroed = *to > atomic_load(&g->lost_from), damaged = sl_buf_damaged(b);
    if (!damaged && (e - 1) / pg < (hi - 1) / pg) return false;
    struct stat st;
    if (g->fd < 0 || fstat(g->fd, &st) != 0) return damaged;
    *size = (long long)st.st_size;
    return zeroed || *to > (uint64_t)st.st_size;
}

bool sl_buf_lost(const sl_buf *b, const void *p, size_t n) {
    long long size;
    uint64_t from, to;
    return range_lost(b, p, n, &size, &from, &to);
}

sl_buf *sl_buf_ref(sl_buf *b) {
    if (b) atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    return b;
}

void sl_buf_unref(sl_buf *b) {
    if (!b) return;
    if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1) return;
    if (b->free_fn == small_bytes) {
        free(b->free_ctx);
        return;
    }
    if (b->free_fn == inline_bytes) {
        size_t total = (size_t)(uintptr_t)b->free_ctx;
        if (total >= CACHE_MIN && cache_put(b, total)) return;
    } else if (b->free_fn) {
        b->free_fn(b->free_ctx, b->data);
    }
    free(b);
}

/* ---- dtypes ---- */

static const struct { const char *name; size_t size; } dtypes[SL_DT_COUNT_] = {
    [SL_DT_INVALID] = {"invalid", 0}, [SL_DT_U8] = {"uint8", 1},   [SL_DT_I8] = {"int8", 1},
    [SL_DT_U16] = {"uint16", 2},      [SL_DT_I16] = {"int16", 2},  [SL_DT_I32] = {"int32", 4},
    [SL_DT_U32] = {"uint32", 4},      [SL_DT_I64] = {"int64", 8},  [SL_DT_F16] = {"float16", 2},
    [SL_DT_BF16] = {"bfloat16", 2},   [SL_DT_F32] = {"float32", 4}, [SL_DT_F64] = {"float64", 8},
    [SL_DT_BOOL] = {"bool", 1},       [SL_DT_BYTES] = {"bytes", sizeof(sl_bytes)},
};

size_t sl_dtype_size(sl_dtype dt) {
    return (unsigned)dt < SL_DT_COUNT_ ? dtypes[dt].size : 0;
}

const char *sl_dtype_name(sl_dtype dt) {
    return (unsigned)dt < SL_DT_COUNT_ ? dtypes[dt].name : "invalid";
}

sl_dtype sl_dtype_from_name(const char *name) {
    static const struct { const char *alias; sl_dtype dt; } aliases[] = {
        {"u8", SL_DT_U8},       {"i8", SL_DT_I8},        {"u16", SL_DT_U16},
        {"i16", SL_DT_I16},     {"i32", SL_DT_I32},      {"int", SL_DT_I32},
        {"u32", SL_DT_U32},     {"i64", SL_DT_I64},      {"long", SL_DT_I64},
        {"f16", SL_DT_F16},     {"half", SL_DT_F16},     {"bf16", SL_DT_BF16},
        {"f32", SL_DT_F32},     {"float", SL_DT_F32},    {"f64", SL_DT_F64},
        {"double", SL_DT_F64},  {"string", SL_DT_BYTES}, {"byte", SL_DT_U8},
    };
    if (!name) return SL_DT_INVALID;
    for (int i = 1; i < SL_DT_COUNT_; i++)
        if (strcmp(name, dtypes[i].name) == 0) return (sl_dtype)i;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(name, aliases[i].alias) == 0) return aliases[i].dt;
    return SL_DT_INVALID;
}

/* ---- tensors ---- */

int64_t sl_tensor_numel(const sl_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->dims[i];
    return n;
}

size_t sl_tensor_nbytes(const sl_tensor *t) {
    return (size_t)sl_tensor_numel(t) * sl_dtype_size(t->dtype);
}

/* Validate dtype/rank/dims and compute the byte size, guarding against overflow. */
static sl_status shape_bytes(sl_dtype dt, int rank, const int64_t *dims, size_t *out) {
    if ((unsigned)dt >= SL_DT_COUNT_ || dt == SL_DT_INVALID)
        return sl_err(SL_EINVAL, "invalid dtype %d", (int)dt);
    if (rank < 0 || rank > SL_MAX_RANK)
        return sl_err(SL_EINVAL, "rank %d outside 0..%d", rank, SL_MAX_RANK);
    size_t n = sl_dtype_size(dt);
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0) return sl_err(SL_EINVAL, "dimension %d is negative (%lld)", i, (long long)dims[i]);
        if (dims[i] && n > SIZE_MAX / (uint64_t)dims[i])
            return sl_err(SL_EINVAL, "tensor shape overflows size_t");
        n *= (size_t)dims[i];
    }
    *out = n;
    return SL_OK;
}

sl_status sl_tensor_alloc(sl_tensor *t, sl_dtype dt, int rank, const int64_t *dims) {
    size_t n;
    *t = SL_TENSOR_EMPTY;
    sl_status s = shape_bytes(dt, rank, dims, &n);
    if (s) return s;
    sl_buf *b = sl_buf_new(n);
    if (!b) return SL_ENOMEM;
    t->dtype = dt;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    t->data = b->data;
    t->buf = b;
    return SL_OK;
}

sl_status sl_tensor_view(sl_tensor *t, sl_buf *buf, const void *data, size_t nbytes,
                         sl_dtype dt, int rank, const int64_t *dims) {
    size_t n;
    *t = SL_TENSOR_EMPTY;
    sl_status s = shape_bytes(dt, rank, dims, &n);
    if (s) return s;
    if (n != nbytes)
        return sl_err(SL_EINVAL, "a %s tensor of %zu bytes cannot view %zu bytes",
                      sl_dtype_name(dt), n, nbytes);
    const char *lo = buf->data, *p = data;
    if (p < lo || (size_t)(p - lo) > buf->size || nbytes > buf->size - (size_t)(p - lo))
        return sl_err(SL_EINVAL, "view of %zu bytes lies outside its buffer", nbytes);
    t->dtype = dt;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    t->data = (void *)data;
    t->buf = sl_buf_ref(buf);
    return SL_OK;
}

void sl_tensor_share(sl_tensor *dst, const sl_tensor *src) {
    *dst = *src;
    sl_buf_ref(dst->buf);
    sl_buf_ref(dst->aux);
}

sl_status sl_tensor_clone(sl_tensor *dst, const sl_tensor *src) {
    sl_status s = sl_tensor_alloc(dst, src->dtype, src->rank, src->dims);
    if (s) return s;
    if (src->dtype != SL_DT_BYTES) {
        size_t n = sl_tensor_nbytes(src);
        if (n) memcpy(dst->data, src->data, n);
        return SL_OK;
    }
    int64_t n = sl_tensor_numel(src);
    const sl_bytes *v = src->data;
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) total += v[i].len;
    sl_buf *strs = sl_buf_new(total);
    if (!strs) {
        sl_tensor_release(dst);
        return SL_ENOMEM;
    }
    sl_bytes *o = dst->data;
    uint8_t *q = strs->data;
    for (int64_t i = 0; i < n; i++) {
        if (v[i].len) memcpy(q, v[i].ptr, v[i].len);
        o[i] = (sl_bytes){q, v[i].len};
        q += v[i].len;
    }
    dst->aux = strs;
    return SL_OK;
}

void sl_tensor_release(sl_tensor *t) {
    sl_buf_unref(t->buf);
    sl_buf_unref(t->aux);
    *t = SL_TENSOR_EMPTY;
}

char *sl_tensor_describe(const sl_tensor *t, char *out, size_t cap) {
    size_t n = (size_t)snprintf(out, cap, "%s[", sl_dtype_name(t->dtype));
    for (int i = 0; i < t->rank && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, i ? ",%lld" : "%lld", (long long)t->dims[i]);
    if (n < cap) snprintf(out + n, cap - n, "]");
    return out;
}

/* ---- elements ---- */

void sl_element_init(sl_element *e) {
    e->n = 0;
    e->origin = (sl_origin){0};
}

void sl_element_clear(sl_element *e) {
    for (int i = 0; i < e->n; i++) sl_tensor_release(&e->t[i]);
    e->n = 0;
    e->origin = (sl_origin){0};
}

int sl_element_find(const sl_element *e, const char *name) {
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->names[i], name) == 0) return i;
    return -1;
}

sl_status sl_element_set(sl_element *e, const char *name, sl_tensor *t) {
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len >= SL_NAME_MAX)
        return sl_err(SL_EINVAL, "component name must be 1..%d characters", SL_NAME_MAX - 1);
    int i = sl_element_find(e, name);
    if (i >= 0) {
        sl_tensor_release(&e->t[i]);
    } else {
        if (e->n >= SL_ELEM_MAX)
            return sl_err(SL_ERANGE, "element already has %d components; cannot add '%s'",
                          SL_ELEM_MAX, name);
        i = e->n++;
        memcpy(e->names[i], name, len + 1);
    }
    e->t[i] = *t;
    *t = SL_TENSOR_EMPTY;
    return SL_OK;
}

/* The bytes a component reads from a guarded mapping: its data, or for byte strings the
 * span from the first string to the end of the last; false when it reads none. */
static bool mapped_span(const sl_tensor *t, const sl_buf **b, const void **p, size_t *n) {
    if (t->dtype != SL_DT_BYTES) {
        *b = t->buf;
        *p = t->data;
        *n = sl_tensor_nbytes(t);
        return sl_buf_mapped(t->buf);
    }
    if (!sl_buf_mapped(t->aux)) return false;
    const sl_bytes *v = t->data;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int64_t i = 0, k = sl_tensor_numel(t); i < k; i++) {
        if (!v[i].len) continue;
        if ((uintptr_t)v[i].ptr < lo) lo = (uintptr_t)v[i].ptr;
        if ((uintptr_t)v[i].ptr + v[i].len > hi) hi = (uintptr_t)v[i].ptr + v[i].len;
    }
    *b = t->aux;
    *p = (const void *)lo;
    *n = hi > lo ? hi - lo : 0;
    return *n > 0;
}

bool sl_tensor_lost(const sl_tensor *t) {
    const sl_buf *b;
    const void *p;
    size_t n;
    return mapped_span(t, &b, &p, &n) && sl_buf_lost(b, p, n);
}

sl_status sl_element_check(const sl_element *e) {
    for (int c = 0; c < e->n; c++) {
        const sl_buf *b;
        const void *p;
        size_t n;
        long long size;
        uint64_t from, to;
        if (!mapped_span(&e->t[c], &b, &p, &n) || !range_lost(b, p, n, &size, &from, &to)) continue;
        char now[48] = "";
        if (size >= 0) snprintf(now, sizeof now, " to %lld bytes", size);
        sl_err(SL_EIO, "component '%s': its %llu bytes are gone (file bytes %llu..%llu): the file shrank%s after "
               "the record was read", e->names[c], (unsigned long long)(to - from), (unsigned long long)from,
               (unsigned long long)to, now);
        sl_err_hint("the file was truncated or rewritten in place while it was being read; replace shards by "
                    "writing a new file and renaming it over the old one");
        if (e->origin.path) sl_err_prefix("%s: byte %lld: ", e->origin.path, (long long)e->origin.offset);
        return SL_EIO;
    }
    return SL_OK;
}

void sl_element_share_mapped(sl_element *dst, const sl_element *e) {
    sl_element_init(dst);
    dst->origin = e->origin;
    for (int c = 0; c < e->n; c++) {
        if (!sl_buf_mapped(e->t[c].buf) && !sl_buf_mapped(e->t[c].aux)) continue;
        memcpy(dst->names[dst->n], e->names[c], SL_NAME_MAX);
        sl_tensor_share(&dst->t[dst->n++], &e->t[c]);
    }
}

void sl_element_move(sl_element *dst, sl_element *src) {
    dst->n = src->n;
    for (int i = 0; i < src->n; i++) {
        memcpy(dst->names[i], src->names[i], SL_NAME_MAX);
        dst->t[i] = src->t[i];
    }
    dst->origin = src->origin;
    src->n = 0;
    src->origin = (sl_origin){0};
}

/* ---- origins ---- */

/* Interned file names: a chained hash set that only grows (one entry per distinct file a
 * process reads: thousands at most). Entries are never freed, so an element's origin stays
 * valid however long the element lives. */
#define INTERN_BUCKETS 1024

typedef struct intern_entry {
    struct intern_entry *next;
    char path[];
} intern_entry;

static pthread_mutex_t intern_mu = PTHREAD_MUTEX_INITIALIZER;
static intern_entry *intern_tab[INTERN_BUCKETS]; /* guarded by intern_mu */

const char *sl_origin_path(const char *path) {
    if (!path) return NULL;
    uint64_t h = sl_fnv1a64(SL_FNV64_INIT, path, strlen(path));
    size_t b = (size_t)(h % INTERN_BUCKETS);
    const char *found = NULL;
    pthread_mutex_lock(&intern_mu);
    for (intern_entry *e = intern_tab[b]; e && !found; e = e->next)
        if (strcmp(e->path, path) == 0) found = e->path;
    if (!found) {
        size_t len = strlen(path);
        intern_entry *e = malloc(sizeof *e + len + 1);
        if (e) {
            memcpy(e->path, path, len + 1);
            e->next = intern_tab[b];
            intern_tab[b] = e;
            found = e->path;
        }
    }
    pthread_mutex_unlock(&intern_mu);
    return found;
}
