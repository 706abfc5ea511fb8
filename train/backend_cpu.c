/* The CPU backend: every op of train/backend.h on host memory, as plain C loops written so the
 * compiler can vectorize their inner dimension, split across the backend's own team of
 * threads when they are big enough to pay for the hand-off (a few tens of microseconds; see
 * par_for). This file holds the backend's state, its tasks, memory and op table; the ops
 * live by concern in train/backend_cpu_*.c (train/backend_cpu_priv.h lists them): the GEMM
 * and its choice of kernels (OpenBLAS or Sluice's AVX-512 GEMM, sl_model_opts.cpu_gemm), the
 * elementwise ops and optimizers, batch normalization, the loss, the convolutions (without
 * im2col on AVX-512F) and pooling.
 *
 * Workload: Fashion-MNIST sized models (MLP 784-256-128-10, the TensorFlow tutorial CNN) at
 * batch 32..512 on a few cores. Per step the GEMMs dominate; im2col/col2im, pooling, bias,
 * activations and the optimizer are memory-bound passes that must stay at a few percent.
 * Threads: up to `threads` parts per op (GEMMs too: OpenBLAS runs single-threaded), claimed
 * by the calling thread and a team of threads - 1 workers. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/pool.h"
#include "train/backend.h"
#include "train/backend_cpu_priv.h"
#include "train/blas_priv.h"
#include "train/cpu_team.h"
#include "train/gemm_avx512.h"

/* ---- parallel loops ---------------------------------------------------------------- */

/* Tasks (run_tasks): one part per thread, each looping over tasks claimed from a counter;
 * the part number is the slot. In bf16 / fp16 mode the GEMMs share the rounding buffer
 * b->lp, so tasks then run one at a time. */
typedef struct task_run {
    sl_status (*fn)(void *ctx, int t, int slot);
    void *ctx;
    int n;
    atomic_int next;
    pthread_mutex_t mu;
    int err_task; /* the lowest failed task (n: none) and its error */
    sl_error err;
} task_run;

static void task_part(void *vc, size_t lo, size_t hi) {
    task_run *r = vc;
    for (size_t slot = lo; slot < hi; slot++)
        for (int t; (t = atomic_fetch_add(&r->next, 1)) < r->n;) {
            if (r->fn(r->ctx, t, (int)slot) == SL_OK) continue;
            pthread_mutex_lock(&r->mu);
            if (t < r->err_task) {
                r->err_task = t;
                sl_err_save(&r->err);
            }
            pthread_mutex_unlock(&r->mu);
            atomic_store(&r->next, r->n); /* skip the tasks not yet claimed */
        }
}

static int cpu_task_slots(sl_backend *bb) {
    cpu_backend *b = (cpu_backend *)bb;
    if (!b->team || b->prec != SL_BK_FP32) return 1;
    return b->threads < MAX_PARTS ? b->threads : MAX_PARTS;
}

static sl_status cpu_run_tasks(sl_backend *bb, int n, int slots, sl_status (*fn)(void *ctx, int t, int slot),
                               void *ctx) {
    cpu_backend *b = (cpu_backend *)bb;
    if (slots > cpu_task_slots(bb)) slots = cpu_task_slots(bb);
    task_run r = {.fn = fn, .ctx = ctx, .n = n, .err_task = n};
    atomic_init(&r.next, 0);
    pthread_mutex_init(&r.mu, NULL);
    if (slots < 2 || n < 2 || !sl__team_run(b->team, slots, (size_t)slots, task_part, &r))
        task_part(&r, 0, 1); /* alone, on slot 0 (the team is busy: nothing was claimed) */
    pthread_mutex_destroy(&r.mu);
    return r.err_task < n ? sl_err_restore(&r.err) : SL_OK;
}

/* ---- memory -------------------------------------------------------------------------- */

static void cpu_destroy(sl_backend *bb) {
    cpu_backend *b = (cpu_backend *)bb;
    sl__team_free(b->team);
    free(b->lp);
    free(b);
}

static sl_status cpu_alloc(sl_backend *b, size_t bytes, void **out) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded == 0) rounded = 64;
    void *p = aligned_alloc(64, rounded);
    if (!p) {
        *out = NULL;
        return sl_err(SL_ENOMEM, "cpu backend: out of memory allocating %zu bytes", bytes);
    }
    memset(p, 0, rounded);
    *out = p;
    return SL_OK;
}

static void cpu_free(sl_backend *b, void *p) { free(p); }

static sl_status cpu_memcpy(sl_backend *b, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memmove(dst, src, bytes);
    return SL_OK;
}

static sl_status cpu_nop(sl_backend *b) { return SL_OK; }

static sl_status cpu_set_precision(sl_backend *bb, sl_bk_precision p) {
    if (p != SL_BK_FP32 && p != SL_BK_BF16 && p != SL_BK_FP16)
        return sl_err(SL_EINVAL, "set_precision: unknown precision %d", (int)p);
    ((cpu_backend *)bb)->prec = p;
    return SL_OK;
}

/* ---- the op table ------------------------------------------------------------------ */

static void cpu_host_free(sl_backend *b, void *p) { free(p); }

static sl_status cpu_slot_nop(sl_backend *b, int slot) { return SL_OK; }

static uint64_t cpu_launches(sl_backend *b) { return 0; } /* no kernels on the CPU */

/* The bucketed exchange reduces the CPU gradient in place: nothing to copy or wait for. */
static sl_status cpu_grads_out_reserve(sl_backend *b, int n) {
    (void)b;
    (void)n;
    return SL_OK;
}
static sl_status cpu_grads_out_start(sl_backend *b, int k, void *host_dst, const void *src, size_t bytes) {
    (void)b;
    (void)k;
    if (host_dst != src && bytes) memcpy(host_dst, src, bytes);
    return SL_OK;
}
static sl_status cpu_grads_out_wait(sl_backend *b, int k) {
    (void)b;
    (void)k;
    return SL_OK;
}

/* The op table: this file's members, then each file's (train/backend_cpu_priv.h), filled in
 * once before the first backend uses it and only read after. */
static sl_backend_ops cpu_ops;
static pthread_once_t cpu_ops_once = PTHREAD_ONCE_INIT;

static void cpu_ops_fill(void) {
    cpu_ops = (sl_backend_ops){
        .name = "cpu",
        .destroy = cpu_destroy,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .to_device = cpu_memcpy,
        .to_host = cpu_memcpy,
        .copy = cpu_memcpy,
        .host_alloc = cpu_alloc,
        .host_free = cpu_host_free,
        .to_device_async = cpu_memcpy,
        .stage_begin = cpu_slot_nop,
        .stage_end = cpu_slot_nop,
        .stage_wait = cpu_slot_nop,
        .stage_release = cpu_slot_nop,
        .sync = cpu_nop,
        .launches = cpu_launches,
        .grads_out_reserve = cpu_grads_out_reserve,
        .grads_out_start = cpu_grads_out_start,
        .grads_out_wait = cpu_grads_out_wait,
        .set_precision = cpu_set_precision,
        .task_slots = cpu_task_slots,
        .run_tasks = cpu_run_tasks,
    };
    sl__cpu_gemm_ops(&cpu_ops);
    sl__cpu_vec_ops(&cpu_ops);
    sl__cpu_norm_ops(&cpu_ops);
    sl__cpu_loss_ops(&cpu_ops);
    sl__cpu_conv_ops(&cpu_ops);
    sl__cpu_pool_ops(&cpu_ops);
}

sl_status sl__backend_cpu_new_gemm(int threads, int gemm, sl_backend **out) {
    *out = NULL;
    if (threads < 0) return sl_err(SL_EINVAL, "cpu backend: threads %d must be >= 0 (0: all cores)", threads);
    if (gemm != SL_CPU_GEMM_AUTO && gemm != SL_CPU_GEMM_BLAS && gemm != SL_CPU_GEMM_AVX512)
        return sl_err(SL_EINVAL, "cpu backend: unknown GEMM choice %d (auto %d, blas %d, avx512 %d)", gemm,
                      SL_CPU_GEMM_AUTO, SL_CPU_GEMM_BLAS, SL_CPU_GEMM_AVX512);
    if (threads == 0) threads = sl_cpu_count();
    cpu_backend *b = calloc(1, sizeof *b);
    if (!b) return sl_err(SL_ENOMEM, "cpu backend: out of memory");
    pthread_once(&cpu_ops_once, cpu_ops_fill);
    b->base.ops = &cpu_ops;
    b->threads = threads;
    /* Sluice's GEMM asked for on a CPU without AVX-512F, or nothing to choose from: OpenBLAS */
    b->gemm = sl__gemm512_available() ? (sl_cpu_gemm)gemm : SL_CPU_GEMM_BLAS;
    if (threads > 1) {
        sl_status s = sl__team_new(threads - 1, &b->team);
        if (s) {
            free(b);
            return s;
        }
    }
    /* Our pool splits the GEMMs; each OpenBLAS call stays on the thread that makes it. */
    openblas_set_num_threads(1);
    *out = &b->base;
    return SL_OK;
}

sl_status sl__backend_cpu_new(int threads, sl_backend **out) {
    return sl__backend_cpu_new_gemm(threads, SL_CPU_GEMM_AUTO, out);
}
