// The emulated CUDA runtime and cuBLAS for tests/gpu/emu (see cuda_runtime.h): memory is
// host memory, GEMM is a reference loop, and streams are DEFERRED queues.
//
// Nothing queued on a stream runs at the call. Work runs when something needs it:
//   - cudaStreamSynchronize / cudaEventSynchronize / cudaDeviceSynchronize / cudaFree /
//     cudaFreeHost (which synchronise the device on a GPU too), and a device-to-host copy
//     into pageable memory (synchronous on a GPU);
//   - a queued cudaStreamWaitEvent that a running stream reaches runs the recorded stream
//     up to the event first.
// Between those points the "early" streams run as far as they can without forcing
// anything, after every call; the "late" ones run only when forced. Default: compute-like
// streams early, copy-like streams (created with a higher priority, as the backend's copy
// stream is, or carrying only host-to-device copies) late; emu_set_order(1) swaps them.
// So a kernel that reads a staged buffer without waiting for its copy reads stale bytes in
// the default order, and a copy that should wait for compute work (a zero-fill, the last
// reader of a slot) overwrites or is overwritten in the swapped one: a missing wait shows
// up as a wrong result on any machine, whatever the timing.
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cstdio>
#include "sluice/util.h"  // sl_f32_from_f16 / sl_f32_from_bf16: cublasGemmEx's 16-bit inputs
#include <deque>
#include <map>
#include <memory>
#include <sys/mman.h>
#include <ucontext.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif

thread_local uint3e emu_tid;
uint3e emu_bid;
dim3 emu_bdim, emu_gdim;
unsigned long long emu_slots[1024];
static cudaError_t last = cudaSuccess;
static long long launches;
static int order_copy_first;
static int pending_h2d;
static int busy;

// ---- streams ----------------------------------------------------------------------------

struct EmuStream;
struct EmuOp {
    std::function<void()> fn;  // empty for a wait
    EmuStream *wait_on = nullptr;
    unsigned long long wait_pos = 0;
    bool h2d = false;
};
struct EmuStream {
    int priority = 0;
    long long kernels = 0, h2d = 0; // queued so far: kernels (GEMMs, memsets too) and host-to-device copies
    std::deque<EmuOp> q;
    unsigned long long done = 0; // ops run so far (positions are counted from the creation)
    unsigned long long end() const { return done + q.size(); }
};
struct EmuEvent {
    EmuStream *s = nullptr;
    unsigned long long pos = 0;
};
static EmuStream legacy; // stream 0
static std::vector<EmuStream *> streams = {&legacy};
static std::map<char *, size_t> pinned; // cudaMallocHost blocks

static EmuStream *S(cudaStream_t s) { return s ? (EmuStream *)s : &legacy; }
// A copy-like stream: created with a higher priority, or one that has carried host-to-device
// copies and never a kernel. The others (and the legacy stream) are compute-like.
static bool copy_like(const EmuStream *s) { return s->priority < 0 || (s->h2d > 0 && s->kernels == 0); }
static bool early(const EmuStream *s) { return copy_like(s) == (order_copy_first != 0); }

static void run_one(EmuStream *s);
// Run s until `pos` ops have run, forcing whatever its waits need.
static void run_until(EmuStream *s, unsigned long long pos) {
    while (s->done < pos && !s->q.empty()) run_one(s);
}
static void run_one(EmuStream *s) {
    EmuOp op = std::move(s->q.front());
    s->q.pop_front();
    if (op.wait_on) run_until(op.wait_on, op.wait_pos);
    if (op.fn) op.fn();
    if (op.h2d) pending_h2d--;
    s->done++;
}
// The early streams run as far as they can without forcing a late one.
static void progress(void) {
    bool moved = true;
    while (moved) {
        moved = false;
        for (EmuStream *s : streams) {
            if (!early(s)) continue;
            while (!s->q.empty()) {
                const EmuOp &op = s->q.front();
                if (op.wait_on && op.wait_on->done < op.wait_pos && !early(op.wait_on)) break;
                run_one(s);
                moved = true;
            }
        }
    }
}
static void run_all(void) {
    for (bool more = true; more;) {
        more = false;
        for (EmuStream *s : streams)
            if (!s->q.empty()) {
                run_until(s, s->end());
                more = true;
            }
    }
}
static void enqueue(cudaStream_t st, std::function<void()> fn, bool h2d = false, bool copy = false) {
    EmuOp op;
    op.fn = std::move(fn);
    op.h2d = h2d;
    if (h2d) pending_h2d++;
    EmuStream *es = S(st);
    if (h2d) es->h2d++;
    else if (!copy) es->kernels++;
    es->q.push_back(std::move(op));
    progress();
}

static bool is_pinned(const void *p, size_t n) {
    auto it = pinned.upper_bound((char *)p);
    if (it == pinned.begin()) return false;
    --it;
    return (const char *)p >= it->first && (const char *)p + n <= it->first + it->second;
}

extern "C" {
void emu_set_order(int copy_first) {
    run_all();
    order_copy_first = copy_first;
}
int emu_pending_copies(void) { return pending_h2d; }
long long emu_kernel_launches(void) { return launches; }
void emu_set_busy(int b) { busy = b; }
}

// ---- runtime ----------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaMalloc(void **p, size_t n) {
    if (n > ((size_t)1 << 40)) return cudaErrorMemoryAllocation;
    *p = malloc(n);  // not zeroed: the backend must zero what it promises to
    if (*p) memset(*p, 0xA5, n);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p) { run_all(); free(p); return cudaSuccess; }
cudaError_t cudaMallocHost(void **p, size_t n) {
    cudaError_t e = cudaMalloc(p, n);
    if (e == cudaSuccess) pinned[(char *)*p] = n;
    return e;
}
cudaError_t cudaFreeHost(void *p) {
    run_all();
    pinned.erase((char *)p);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st) {
    enqueue(st, [=] { memset(p, v, n); });
    return cudaSuccess;
}
cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t w, size_t h, cudaStream_t st) {
    enqueue(st, [=] {
        for (size_t r = 0; r < h; r++) memset((char *)p + r * pitch, v, w);
    });
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st) {
    if (!d || !s) return cudaErrorInvalidValue;
    if (k == cudaMemcpyHostToDevice && !is_pinned(s, n)) {
        // pageable source: the driver stages it before returning
        auto copy = std::make_shared<std::vector<char>>((const char *)s, (const char *)s + n);
        enqueue(st, [=] { memcpy(d, copy->data(), n); }, true);
        return cudaSuccess;
    }
    enqueue(st, [=] { memmove(d, s, n); }, k == cudaMemcpyHostToDevice, true);
    if (k == cudaMemcpyDeviceToHost && !is_pinned(d, n)) run_until(S(st), S(st)->end()); // pageable: synchronous
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t st) {
    run_until(S(st), S(st)->end());
    progress();
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { run_all(); return cudaSuccess; }
static cudaError_t make_stream(cudaStream_t *s, int priority) {
    if (busy) return cudaErrorDevicesUnavailable;
    EmuStream *es = new EmuStream;
    es->priority = priority;
    streams.push_back(es);
    *s = es;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { return make_stream(s, 0); }
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned, int priority) { return make_stream(s, priority); }
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    *least = 0;
    *greatest = -5;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    EmuStream *es = S(s);
    run_until(es, es->end());
    for (size_t i = 0; i < streams.size(); i++)
        if (streams[i] == es) streams.erase(streams.begin() + (long)i);
    delete es;
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { *e = new EmuEvent; return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete (EmuEvent *)e; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st) {
    EmuEvent *ev = (EmuEvent *)e;
    ev->s = S(st);
    ev->pos = ev->s->end();
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    EmuEvent *ev = (EmuEvent *)e;
    if (ev->s) run_until(ev->s, ev->pos);
    progress();
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t e, unsigned) {
    EmuEvent *ev = (EmuEvent *)e;
    if (!ev->s) return cudaSuccess; // never recorded: nothing to wait for
    EmuOp op;
    op.wait_on = ev->s;
    op.wait_pos = ev->pos;
    S(st)->q.push_back(std::move(op));
    progress();
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { cudaError_t e = last; last = cudaSuccess; return e; }
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorDevicesUnavailable: return "CUDA-capable device(s) is/are busy or unavailable";
    default: return "unknown error";
    }
}

// Threaded blocks run their threads as fibers on this one OS thread (ucontext), switched
// at __syncthreads: a round runs every thread that has not returned up to its next barrier
// (or its return), then the next round starts, so a barrier is where all threads of the
// block that have not returned yet meet (a thread that returned no longer counts, so early
// exits do not deadlock). The threads of a round run in thread order in one round and in
// reverse order in the next (and the other way round in odd blocks), so a read of another
// thread's write that lacks a barrier reads the stale value in some round, whichever of the
// two threads is the lower. No OS thread is made or woken per block: a switch is a
// swapcontext, where one OS thread per thread of a block (as before) spent most of the
// test's time making threads and waking them at barriers. ASan is told of every switch
// (__sanitizer_*_switch_fiber); it still prints its one-line warning that it does not
// fully support swapcontext.
struct Fiber {
    ucontext_t ctx;
    char *stack = nullptr;
    uint3e tid{};
    bool done = false;
#ifdef EMU_ASAN
    void *fake = nullptr;
#endif
};
// 64 KiB a fiber (a kernel's frames are small, even with ASan's redzones), above a guard
// page so that an overflow faults instead of writing into the next stack. Small stacks also
// keep switches cheap: ASan clears the shadow of the whole stack switched to.
static const size_t FIBER_STACK = 64 << 10, FIBER_GUARD = 4096;
static std::vector<Fiber> fibers;      // one per thread of the widest block so far; stacks kept
static Fiber *cur_fiber;                // the fiber running now; null in the scheduler
static ucontext_t sched_ctx;            // the scheduler (run_kernel) while a fiber runs
static const std::function<void()> *cur_body;
#ifdef EMU_ASAN
static const void *sched_bottom;        // the scheduler's stack, for ASan's fiber switches
static size_t sched_size;
#endif

// Into fiber f from the scheduler, back when f reaches a barrier or returns.
static void fiber_enter(Fiber *f) {
    cur_fiber = f;
    emu_tid = f->tid;
#ifdef EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f->stack, FIBER_STACK);
#endif
    if (swapcontext(&sched_ctx, &f->ctx) != 0) {
        perror("emu: swapcontext");
        abort();
    }
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    cur_fiber = nullptr;
}
// From the running fiber back to the scheduler; returns when the scheduler enters it again.
static void fiber_yield(bool done) {
    Fiber *f = cur_fiber;
    f->done = done;
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(done ? nullptr : &f->fake, sched_bottom, sched_size);
#endif
    swapcontext(&f->ctx, &sched_ctx);
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(f->fake, &sched_bottom, &sched_size);
#endif
}
static void fiber_main(void) {
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched_bottom, &sched_size);
#endif
    (*cur_body)();
    fiber_yield(true); // never comes back: the fiber is made afresh for its next block
}

void emu_sync(void) {
    if (!cur_fiber) {
        fprintf(stderr, "emu: __syncthreads or a warp shuffle in a kernel that is not in convert.py's THREADED\n");
        abort();
    }
    fiber_yield(false);
}

bool emu_launch_check(const char *name, dim3 g, dim3 b) {
    launches++;
    unsigned nt = b.x * b.y * b.z;
    if (g.x == 0 || g.y == 0 || nt == 0 || nt > 1024 || g.y > 65535) {
        fprintf(stderr, "emu: bad launch of %s: grid %u,%u block %u,%u\n", name, g.x, g.y, b.x, b.y);
        last = cudaErrorInvalidValue;
        return false;
    }
    return true;
}

// Blocks run one after another; the threads of a threaded kernel's block as fibers (above).
static void run_kernel(bool threaded, dim3 g, dim3 b, const std::function<void()> &body) {
    unsigned nt = b.x * b.y * b.z;
    emu_gdim = g;
    emu_bdim = b;
    if (!threaded) {
        for (unsigned by = 0; by < g.y; by++)
            for (unsigned bx = 0; bx < g.x; bx++) {
                emu_bid = {bx, by, 0};
                for (unsigned ty = 0; ty < b.y; ty++)
                    for (unsigned tx = 0; tx < b.x; tx++) {
                        emu_tid = {tx, ty, 0};
                        body();
                    }
            }
        return;
    }
    while (fibers.size() < nt) {
        fibers.emplace_back();
        void *st = mmap(nullptr, FIBER_GUARD + FIBER_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (st == MAP_FAILED || mprotect(st, FIBER_GUARD, PROT_NONE) != 0) {
            perror("emu: mmap of a fiber stack");
            abort();
        }
        fibers.back().stack = (char *)st + FIBER_GUARD;
    }
    cur_body = &body;
    for (unsigned by = 0; by < g.y; by++)
        for (unsigned bx = 0; bx < g.x; bx++) {
            emu_bid = {bx, by, 0};
            for (unsigned i = 0; i < nt; i++) {
                Fiber &f = fibers[i];
                f.tid = {i % b.x, i / b.x, 0};
                f.done = false;
                getcontext(&f.ctx);
                f.ctx.uc_stack.ss_sp = f.stack;
                f.ctx.uc_stack.ss_size = FIBER_STACK;
                f.ctx.uc_link = nullptr;
                makecontext(&f.ctx, fiber_main, 0);
            }
            for (unsigned round = 0, left = nt; left > 0; round++) {
                bool reverse = ((round + bx + by) & 1) != 0;
                left = 0;
                for (unsigned k = 0; k < nt; k++) {
                    Fiber &f = fibers[reverse ? nt - 1 - k : k];
                    if (f.done) continue;
                    fiber_enter(&f);
                    if (!f.done) left++;
                }
            }
        }
    cur_body = nullptr;
}

void emu_enqueue_kernel(const char *name, bool threaded, dim3 g, dim3 b, cudaStream_t st, std::function<void()> body) {
    (void)name;
    enqueue(st, [=] { run_kernel(threaded, g, b, body); });
}

// ---- cuBLAS -----------------------------------------------------------------------------

struct EmuBlas {
    cudaStream_t stream = nullptr;
};
cublasStatus_t cublasCreate(cublasHandle_t *h) { *h = new EmuBlas; return 0; }
cublasStatus_t cublasDestroy(cublasHandle_t h) { delete (EmuBlas *)h; return 0; }
cublasStatus_t cublasSetStream(cublasHandle_t h, void *s) { ((EmuBlas *)h)->stream = (cudaStream_t)s; return 0; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return 0; }
const char *cublasGetStatusString(cublasStatus_t s) { return s ? "CUBLAS_STATUS_INVALID_VALUE" : "CUBLAS_STATUS_SUCCESS"; }

// Column-major reference GEMM (double accumulation), compiled optimised and without the
// sanitizers: the model tests push a few GFLOP through it. Plain arrays, not std::vector's
// operator[]: that is compiled at the file's -O1, and g++ does not inline it into an O3
// function, which made every multiply-add a call.
__attribute__((optimize("O3"), no_sanitize("address", "undefined")))
static void ref_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *C, int ldc) {
    std::vector<double> accv((size_t)m);
    std::vector<float> browv((size_t)k);
    double *acc = accv.data();
    float *brow = browv.data();
    for (int j = 0; j < n; j++) {
        for (int p = 0; p < k; p++) brow[p] = !tb ? B[p + (size_t)j * ldb] : B[j + (size_t)p * ldb];
        for (int i = 0; i < m; i++) acc[i] = 0.0;
        if (!ta) { // A is m x k column-major: column p contiguous
            for (int p = 0; p < k; p++) {
                double bv = brow[p];
                const float *a = A + (size_t)p * lda;
                for (int i = 0; i < m; i++) acc[i] += (double)a[i] * bv;
            }
        } else { // A^T: row i of op(A) is column i of A, contiguous
            for (int i = 0; i < m; i++) {
                const float *a = A + (size_t)i * lda;
                double t = 0;
                for (int p = 0; p < k; p++) t += (double)a[p] * brow[p];
                acc[i] = t;
            }
        }
        for (int i = 0; i < m; i++) {
            float *c = &C[i + (size_t)j * ldc];
            *c = beta == 0.0f ? (float)(alpha * acc[i]) : (float)(alpha * acc[i] + beta * *c);
        }
    }
}

// Arguments are checked at the call (as cuBLAS does); the product runs on the handle's stream.
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc) {
    int arows = ta == CUBLAS_OP_N ? m : k, brows = tb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) ||
        ldc < (m > 1 ? m : 1)) {
        fprintf(stderr, "emu sgemm: bad args m=%d n=%d k=%d lda=%d ldb=%d ldc=%d\n", m, n, k, lda, ldb, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    float al = *alpha, be = *beta; // host pointer mode: read at the call
    bool tra = ta != CUBLAS_OP_N, trb = tb != CUBLAS_OP_N;
    launches++;
    enqueue(((EmuBlas *)h)->stream, [=] { ref_gemm(tra, trb, m, n, k, al, A, lda, B, ldb, be, C, ldc); });
    return 0;
}
// The mixed-precision form the backend uses: A and B bfloat16 or half (decoded exactly to
// float when the product runs), C float32, float32 compute; anything else is refused as
// cuBLAS refuses an unsupported combination.
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t Atype, int lda, const void *B,
                            cudaDataType_t Btype, int ldb, const void *beta, void *C, cudaDataType_t Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    int arows = ta == CUBLAS_OP_N ? m : k, acols = ta == CUBLAS_OP_N ? k : m;
    int brows = tb == CUBLAS_OP_N ? k : n, bcols = tb == CUBLAS_OP_N ? n : k;
    bool types_ok = (Atype == CUDA_R_16BF || Atype == CUDA_R_16F) && Btype == Atype && Ctype == CUDA_R_32F &&
                    computeType == CUBLAS_COMPUTE_32F && algo == CUBLAS_GEMM_DEFAULT;
    if (!types_ok || m < 0 || n < 0 || k < 0 || lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) ||
        ldc < (m > 1 ? m : 1)) {
        fprintf(stderr, "emu gemmex: bad args types %d %d %d compute %d m=%d n=%d k=%d lda=%d ldb=%d ldc=%d\n",
                (int)Atype, (int)Btype, (int)Ctype, (int)computeType, m, n, k, lda, ldb, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    float al = *(const float *)alpha, be = *(const float *)beta;
    bool tra = ta != CUBLAS_OP_N, trb = tb != CUBLAS_OP_N, half = Atype == CUDA_R_16F;
    const uint16_t *a16 = (const uint16_t *)A, *b16 = (const uint16_t *)B;
    float *c = (float *)C;
    launches++;
    enqueue(((EmuBlas *)h)->stream, [=] {
        // column-major: column j of A holds `arows` values at A + j * lda
        std::vector<float> af((size_t)arows * acols), bf((size_t)brows * bcols);
        for (int j = 0; j < acols; j++)
            for (int i = 0; i < arows; i++) {
                uint16_t v = a16[i + (size_t)j * lda];
                af[i + (size_t)j * arows] = half ? sl_f32_from_f16(v) : sl_f32_from_bf16(v);
            }
        for (int j = 0; j < bcols; j++)
            for (int i = 0; i < brows; i++) {
                uint16_t v = b16[i + (size_t)j * ldb];
                bf[i + (size_t)j * brows] = half ? sl_f32_from_f16(v) : sl_f32_from_bf16(v);
            }
        ref_gemm(tra, trb, m, n, k, al, af.data(), arows > 1 ? arows : 1, bf.data(), brows > 1 ? brows : 1, be, c,
                 ldc);
    });
    return 0;
}
cublasStatus_t cublasSscal(cublasHandle_t h, int n, const float *alpha, float *x, int incx) {
    float al = *alpha;
    launches++;
    enqueue(((EmuBlas *)h)->stream, [=] {
        for (int i = 0; i < n; i++) x[(size_t)i * incx] *= al;
    });
    return 0;
}
extern "C" {
#include "sluice/cuda.h"
int sl_cuda_built(void) { return 1; }
sl_status sl_cuda_devices(int *count, char *name, size_t cap) {
    *count = 1;
    if (cap) snprintf(name, cap, "emulated GPU");
    return SL_OK;
}
}
