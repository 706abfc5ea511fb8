/* The ring's collectives over the shared-memory segment (shm.c holds the segment and its
 * waits; sluice/ring.h says what each collective computes).
 *
 * An allreduce moves through windows of shm_window bytes per rank. In window w every rank
 * copies its elements of the window, except its own slice, into its area of the segment
 * (posting WRITTEN), then sums its own slice reading every other rank's copy where it lies
 * and its own elements from its buffer, writing the sum into its buffer and into its area
 * (REDUCED), then copies the other slices' sums from their owners' areas (DONE). Window
 * w + 1 is written before window w is summed, and each rank has three windows in flight,
 * so copying, summing and reading overlap across the ranks. Each rank reads and writes
 * its own buffer once; the segment's windows stay in the caches.
 *
 * The sum of an element takes the transport ring's order: the element lies in segment g of
 * the whole tensor (sluice/ring.h), and the ring adds x_g, x_{g+1}, ..., x_{g-1} in that
 * order, rounding through float16 before every addition with fp16, then divides (average)
 * and rounds once more. Doing the same here makes the two paths bit-identical, so choosing
 * shared memory never changes a result.
 *
 * Workload: a fused gradient buffer (1-100 MiB) or its buckets per step, 2-16 ranks. */
#include <stdlib.h>
#include <string.h>

#include "shm_priv.h"
#include "sluice/util.h"


/* The segment of the whole tensor that holds element i. */
static int seg_of(size_t count, int n, size_t i) {
    size_t base = count / (size_t)n, rem = count % (size_t)n;
    size_t big = rem * (base + 1);
    if (i < big) return (int)(i / (base + 1));
    return (int)(rem + (i - big) / base);
}

enum { BL = 512 };

static void round16(float *a, size_t m) {
    uint16_t h[BL];
    sl_f32_to_f16(a, h, m);
    sl_f16_to_f32(h, a, m);
}

/* acc = x_g; acc = x_{g+t} + acc for t = 1..n-1 (fp16: acc rounded first); then the ring
 * owner's finish (average, fp16 rounding). Written to both outs. */
static void sum_f32(const float *const *src, int n, int g, size_t len, int fp16, int avg, float *out1, float *out2) {
    float acc[BL];
    for (size_t i = 0; i < len; i += BL) {
        size_t m = len - i < BL ? len - i : BL;
        memcpy(acc, src[g] + i, m * sizeof *acc);
        for (int t = 1; t < n; t++) {
            const float *x = src[(g + t) % n] + i;
            if (fp16) round16(acc, m);
            for (size_t j = 0; j < m; j++) acc[j] = x[j] + acc[j];
        }
        if (avg)
            for (size_t j = 0; j < m; j++) acc[j] /= (float)n;
        if (fp16) round16(acc, m);
        memcpy(out1 + i, acc, m * sizeof *acc);
        memcpy(out2 + i, acc, m * sizeof *acc);
    }
}

static void sum_i32(const int32_t *const *src, int n, size_t len, int32_t *out1, int32_t *out2) {
    uint32_t acc[BL];
    for (size_t i = 0; i < len; i += BL) {
        size_t m = len - i < BL ? len - i : BL;
        memcpy(acc, src[0] + i, m * sizeof *acc);
        for (int t = 1; t < n; t++) {
            const int32_t *x = src[t] + i;
            for (size_t j = 0; j < m; j++) acc[j] += (uint32_t)x[j];
        }
        memcpy(out1 + i, acc, m * sizeof *acc);
        memcpy(out2 + i, acc, m * sizeof *acc);
    }
}

static sl_status refused(void) {
    return sl_err(SL_ESTATE, "ring: an earlier collective failed; the ring must be rebuilt");
}

typedef struct ar {
    sl__shm *m;
    char *buf;
    size_t count, lo, hi, per;  /* per: elements per window */
    uint64_t w0;                /* the first window's number */
    sl__shm_whdr want;
    int fp16, avg, i32;
} ar;

/* window w of the collective: elements [*p, *q) */
static void win_range(const ar *a, uint64_t w, size_t *p, size_t *q) {
    *p = a->lo + (size_t)w * a->per;
    *q = a->hi - *p < a->per ? a->hi : *p + a->per;
}

static sl_status ar_write(ar *a, uint64_t w) {
    sl__shm *m = a->m;
    uint64_t gw = a->w0 + w;
    sl_status st = sl__shm_wait_free(m, gw);
    if (st) return st;
    size_t p, q;
    win_range(a, w, &p, &q);
    size_t len = q - p, s0 = sl__seg_off(len, m->n, m->rank), s1 = sl__seg_off(len, m->n, m->rank + 1);
    unsigned char *d = sl__shm_data(m, m->rank, gw);
    memcpy(d, a->buf + p * 4, s0 * 4);
    memcpy(d + s1 * 4, a->buf + (p + s1) * 4, (len - s1) * 4);
    m->written += (s0 + len - s1) * 4;
    sl__shm_whdr *h = sl__shm_hdr(m, m->rank, gw);
    *h = a->want;
    h->win = gw;
    sl__shm_post(m, SL__PH_WRITTEN, gw);
    return SL_OK;
}

static sl_status ar_reduce(ar *a, uint64_t w) {
    sl__shm *m = a->m;
    int n = m->n, me = m->rank;
    uint64_t gw = a->w0 + w;
    sl_status st = sl__shm_wait_all(m, SL__PH_WRITTEN, gw);
    if (st) return st;
    sl__shm_whdr want = a->want;
    want.win = gw;
    for (int k = 0; k < n; k++)
        if (k != me && (st = sl__shm_check(m, k, &want))) return st;
    size_t p, q;
    win_range(a, w, &p, &q);
    size_t len = q - p, i = p + sl__seg_off(len, n, me), end = p + sl__seg_off(len, n, me + 1);
    float *mine = (float *)(void *)sl__shm_data(m, me, gw);
    while (i < end) {
        /* a run of elements in one segment of the whole tensor: one summation order */
        int g = seg_of(a->count, n, i);
        size_t run_end = sl__seg_off(a->count, n, g + 1);
        if (run_end > end) run_end = end;
        const float *src[64];
        for (int k = 0; k < n; k++)
            src[k] = k == me ? (const float *)(void *)(a->buf + i * 4)
                             : (const float *)(void *)sl__shm_data(m, k, gw) + (i - p);
        float *out = (float *)(void *)(a->buf + i * 4), *out2 = mine + (i - p);
        if (a->i32)
            sum_i32((const int32_t *const *)(const void *)src, n, run_end - i, (int32_t *)(void *)out,
                    (int32_t *)(void *)out2);
        else
            sum_f32(src, n, g, run_end - i, a->fp16, a->avg, out, out2);
        m->written += (run_end - i) * 4;
        i = run_end;
    }
    sl__shm_post(m, SL__PH_REDUCED, gw);
    return SL_OK;
}

static sl_status ar_gather(ar *a, uint64_t w) {
    sl__shm *m = a->m;
    int n = m->n;
    uint64_t gw = a->w0 + w;
    sl_status st = sl__shm_wait_all(m, SL__PH_REDUCED, gw);
    if (st) return st;
    size_t p, q;
    win_range(a, w, &p, &q);
    size_t len = q - p;
    for (int k = 0; k < n; k++) {
        if (k == m->rank) continue;
        size_t s0 = sl__seg_off(len, n, k), s1 = sl__seg_off(len, n, k + 1);
        memcpy(a->buf + (p + s0) * 4, sl__shm_data(m, k, gw) + s0 * 4, (s1 - s0) * 4);
    }
    sl__shm_post(m, SL__PH_DONE, gw);
    return SL_OK;
}

sl_status sl__shm_allreduce_range(sl__shm *m, void *buf, size_t count, size_t lo, size_t hi, sl_dtype dtype,
                                  sl_reduce_op op, int fp16, uint32_t tensor) {
    if (m->broken) return refused();
    ar a = {.m = m, .buf = buf, .count = count, .lo = lo, .hi = hi, .per = m->window / 4,
            .fp16 = fp16 && dtype == SL_DT_F32, .avg = op == SL_REDUCE_AVG && dtype == SL_DT_F32,
            .i32 = dtype == SL_DT_I32};
    a.want = (sl__shm_whdr){.seq = ++m->seq, .count = count, .lo = lo, .hi = hi, .tensor = tensor,
                            .kind = SL__SHM_ALLREDUCE, .dtype = (uint8_t)dtype, .flags = (uint8_t)a.fp16,
                            .op = (uint8_t)op, .root = -1};
    uint64_t nw = (hi - lo + a.per - 1) / a.per;
    a.w0 = m->win;
    m->win += nw;
    if (nw == 0) return SL_OK;
    sl_status st = ar_write(&a, 0);
    for (uint64_t w = 0; w < nw && !st; w++) {
        if (w + 1 < nw && (st = ar_write(&a, w + 1))) break;
        if ((st = ar_reduce(&a, w)) || (st = ar_gather(&a, w))) break;
    }
    return st ? sl__shm_fail(m, st) : SL_OK;
}

/* One window of bytes for broadcast (only root writes) or allgather (everyone writes its
 * block's piece; src NULL: nothing to write). */
static sl_status bytes_window(sl__shm *m, const sl__shm_whdr *want, const void *src, size_t len) {
    uint64_t gw = want->win;
    sl_status st = sl__shm_wait_free(m, gw);
    if (st) return st;
    if (src) {
        memcpy(sl__shm_data(m, m->rank, gw), src, len);
        m->written += len;
    }
    *sl__shm_hdr(m, m->rank, gw) = *want;
    sl__shm_post(m, SL__PH_WRITTEN, gw);
    sl__shm_post(m, SL__PH_REDUCED, gw);
    return SL_OK;
}

sl_status sl__shm_broadcast(sl__shm *m, void *buf, size_t len, int root, uint32_t tensor) {
    if (m->broken) return refused();
    sl__shm_whdr want = {.seq = ++m->seq, .count = len, .tensor = tensor, .kind = SL__SHM_BROADCAST,
                         .dtype = SL_DT_U8, .root = root};
    sl_status st = SL_OK;
    for (size_t off = 0; off < len && !st; off += m->window) {
        size_t cn = len - off < m->window ? len - off : m->window;
        want.win = m->win++;
        want.lo = off;
        if ((st = bytes_window(m, &want, m->rank == root ? (char *)buf + off : NULL, cn))) break;
        if (m->rank != root) {
            if ((st = sl__shm_wait(m, root, SL__PH_WRITTEN, want.win)) || (st = sl__shm_check(m, root, &want))) break;
            memcpy((char *)buf + off, sl__shm_data(m, root, want.win), cn);
        }
        sl__shm_post(m, SL__PH_DONE, want.win);
    }
    return st ? sl__shm_fail(m, st) : SL_OK;
}

sl_status sl__shm_allgather(sl__shm *m, void *all, size_t len, uint32_t tensor) {
    if (m->broken) return refused();
    sl__shm_whdr want = {.seq = ++m->seq, .count = len, .tensor = tensor, .kind = SL__SHM_ALLGATHER,
                         .dtype = SL_DT_U8, .root = -1};
    char *b = all;
    sl_status st = SL_OK;
    for (size_t off = 0; off < len && !st; off += m->window) {
        size_t cn = len - off < m->window ? len - off : m->window;
        want.win = m->win++;
        want.lo = off;
        if ((st = bytes_window(m, &want, b + (size_t)m->rank * len + off, cn)) ||
            (st = sl__shm_wait_all(m, SL__PH_WRITTEN, want.win)))
            break;
        for (int k = 0; k < m->n && !st; k++) {
            if (k == m->rank) continue;
            if (!(st = sl__shm_check(m, k, &want))) memcpy(b + (size_t)k * len + off, sl__shm_data(m, k, want.win), cn);
        }
        sl__shm_post(m, SL__PH_DONE, want.win);
    }
    return st ? sl__shm_fail(m, st) : SL_OK;
}

sl_status sl__shm_barrier(sl__shm *m) {
    if (m->broken) return refused();
    sl__shm_whdr want = {.seq = ++m->seq, .win = m->win++, .kind = SL__SHM_BARRIER, .dtype = SL_DT_U8, .root = -1};
    sl_status st = bytes_window(m, &want, NULL, 0);
    if (!st) st = sl__shm_wait_all(m, SL__PH_WRITTEN, want.win);
    for (int k = 0; k < m->n && !st; k++)
        if (k != m->rank) st = sl__shm_check(m, k, &want);
    if (st) return sl__shm_fail(m, st);
    sl__shm_post(m, SL__PH_DONE, want.win);
    return SL_OK;
}
