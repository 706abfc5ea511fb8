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
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <map>
#include <memory>

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

// __syncthreads for a threaded block: all threads of the block that have not returned yet
// meet here (a thread that returned no longer counts, so early exits do not deadlock).
struct BlockBarrier {
    std::mutex m;
    std::condition_variable cv;
    unsigned active = 0, arrived = 0, gen = 0;
    void release() { arrived = 0; gen++; cv.notify_all(); }
    void sync() {
        std::unique_lock<std::mutex> l(m);
        unsigned g = gen;
        if (++arrived == active) release();
        else cv.wait(l, [&] { return gen != g; });
    }
    void leave() {
        std::lock_guard<std::mutex> l(m);
        active--;
        if (arrived && arrived == active) release();
    }
};
static BlockBarrier *bbar;

void emu_sync(void) { bbar->sync(); }

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

// Blocks run one after another. A threaded kernel gets one OS thread per thread of a block,
// made once per launch and reused for every block.
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
    BlockBarrier bb;
    bbar = &bb;
    std::barrier<> start((std::ptrdiff_t)nt + 1), end((std::ptrdiff_t)nt + 1);
    unsigned long long nblocks = (unsigned long long)g.x * g.y;
    std::vector<std::thread> ts;
    for (unsigned ty = 0; ty < b.y; ty++)
        for (unsigned tx = 0; tx < b.x; tx++)
            ts.emplace_back([&, tx, ty] {
                emu_tid = {tx, ty, 0};
                for (unsigned long long k = 0; k < nblocks; k++) {
                    start.arrive_and_wait();
                    body();
                    bb.leave();
                    end.arrive_and_wait();
                }
            });
    for (unsigned by = 0; by < g.y; by++)
        for (unsigned bx = 0; bx < g.x; bx++) {
            emu_bid = {bx, by, 0};
            bb.active = nt;
            bb.arrived = 0;
            start.arrive_and_wait();
            end.arrive_and_wait();
        }
    for (auto &t : ts) t.join();
    bbar = nullptr;
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
// sanitizers: the model tests push a few GFLOP through it.
__attribute__((optimize("O3"), no_sanitize("address", "undefined")))
static void ref_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *C, int ldc) {
    std::vector<double> acc((size_t)m);
    std::vector<float> brow((size_t)k);
    for (int j = 0; j < n; j++) {
        for (int p = 0; p < k; p++) brow[p] = !tb ? B[p + (size_t)j * ldb] : B[j + (size_t)p * ldb];
        std::fill(acc.begin(), acc.end(), 0.0);
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
