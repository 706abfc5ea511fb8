// The emulated CUDA runtime and cuBLAS for tests/gpu/emu (see cuda_runtime.h): memory is host
// memory, streams and events are no-ops (everything is synchronous), GEMM is a reference loop.
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cstdio>
#include <memory>

thread_local uint3e emu_tid;
uint3e emu_bid;
dim3 emu_bdim, emu_gdim;
unsigned long long emu_slots[1024];
static std::barrier<> *bar;
static cudaError_t last = cudaSuccess;
int emu_launches;

cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaMalloc(void **p, size_t n) {
    if (n > ((size_t)1 << 40)) return cudaErrorMemoryAllocation;
    *p = malloc(n);  // not zeroed: the backend must zero what it promises to
    if (*p) memset(*p, 0xA5, n);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) { memset(p, v, n); return cudaSuccess; }
cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t w, size_t h, cudaStream_t) {
    for (size_t r = 0; r < h; r++) memset((char *)p + r * pitch, v, w);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) {
    if (!d || !s) return cudaErrorInvalidValue;
    memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { *s = malloc(1); return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t s) { free(s); return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { *e = malloc(1); return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { free(e); return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { cudaError_t e = last; last = cudaSuccess; return e; }
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    default: return "unknown error";
    }
}

void emu_sync(void) { bar->arrive_and_wait(); }

void emu_launch(const char *name, bool threaded, dim3 g, dim3 b, const std::function<void()> &body) {
    emu_launches++;
    unsigned nt = b.x * b.y * b.z;
    if (g.x == 0 || g.y == 0 || nt == 0 || nt > 1024 || g.y > 65535) {
        fprintf(stderr, "emu: bad launch of %s: grid %u,%u block %u,%u\n", name, g.x, g.y, b.x, b.y);
        last = cudaErrorInvalidValue;
        return;
    }
    emu_gdim = g;
    emu_bdim = b;
    for (unsigned by = 0; by < g.y; by++)
        for (unsigned bx = 0; bx < g.x; bx++) {
            emu_bid = {bx, by, 0};
            if (!threaded) {
                for (unsigned ty = 0; ty < b.y; ty++)
                    for (unsigned tx = 0; tx < b.x; tx++) {
                        emu_tid = {tx, ty, 0};
                        body();
                    }
                continue;
            }
            std::barrier<> br((std::ptrdiff_t)nt);
            bar = &br;
            std::vector<std::thread> ts;
            for (unsigned ty = 0; ty < b.y; ty++)
                for (unsigned tx = 0; tx < b.x; tx++)
                    ts.emplace_back([&, tx, ty] {
                        emu_tid = {tx, ty, 0};
                        body();
                        br.arrive_and_drop(); // a thread that returned early no longer counts
                    });
            for (auto &t : ts) t.join();
            bar = nullptr;
        }
}

cublasStatus_t cublasCreate(cublasHandle_t *h) { *h = malloc(1); return 0; }
cublasStatus_t cublasDestroy(cublasHandle_t h) { free(h); return 0; }
cublasStatus_t cublasSetStream(cublasHandle_t, void *) { return 0; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return 0; }
const char *cublasGetStatusString(cublasStatus_t s) { return s ? "CUBLAS_STATUS_INVALID_VALUE" : "CUBLAS_STATUS_SUCCESS"; }
// Column-major reference GEMM with cuBLAS's argument checks.
cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc) {
    int arows = ta == CUBLAS_OP_N ? m : k, brows = tb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) ||
        ldc < (m > 1 ? m : 1)) {
        fprintf(stderr, "emu sgemm: bad args m=%d n=%d k=%d lda=%d ldb=%d ldc=%d\n", m, n, k, lda, ldb, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double acc = 0;
            for (int p = 0; p < k; p++) {
                float a = ta == CUBLAS_OP_N ? A[i + (size_t)p * lda] : A[p + (size_t)i * lda];
                float b = tb == CUBLAS_OP_N ? B[p + (size_t)j * ldb] : B[j + (size_t)p * ldb];
                acc += (double)a * b;
            }
            float *c = &C[i + (size_t)j * ldc];
            *c = *beta == 0.0f ? (float)(*alpha * acc) : (float)(*alpha * acc + *beta * *c);
        }
    return 0;
}
cublasStatus_t cublasSscal(cublasHandle_t, int n, const float *alpha, float *x, int incx) {
    for (int i = 0; i < n; i++) x[(size_t)i * incx] *= *alpha;
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
