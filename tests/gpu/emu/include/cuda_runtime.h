// Host emulation of the small part of the CUDA runtime that train/backend_cuda.cu uses,
// for checking the kernels' logic on a machine without a GPU. Kernels run on the CPU:
// blocks one after another; threads of a block in sequence, or as fibers (emu_rt.cc) with a
// barrier for kernels that use __syncthreads or warp shuffles.
//
// Streams are deferred queues (emu_rt.cc): kernels, copies and memsets run only when
// something makes them (a stream or event synchronisation, cudaFree, a wait that a running
// stream needs), in an order chosen to expose a missing wait: by default the compute-like
// streams run as early as they may and the copy-like ones (created with a higher priority,
// or carrying host-to-device copies and no kernels) as late as they may; emu_set_order(1) turns that round. Copies read and
// write host memory when they run, as DMA does (pageable sources are captured at the call,
// as the driver's staging does).
#pragma once
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __shared__ static

struct uint3e { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
extern thread_local uint3e emu_tid;
extern uint3e emu_bid;
extern dim3 emu_bdim, emu_gdim;
#define threadIdx emu_tid
#define blockIdx emu_bid
#define blockDim emu_bdim
#define gridDim emu_gdim

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInsufficientDriver = 35,
       cudaErrorNoDevice = 100, cudaErrorInvalidResourceHandle = 400, cudaErrorNotReady = 600,
       cudaErrorDevicesUnavailable = 46 };
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
#define cudaStreamNonBlocking 1
#define cudaEventBlockingSync 1
#define cudaEventDisableTiming 2
struct cudaDeviceProp { char name[256]; };

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t n);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s);
cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t w, size_t h, cudaStream_t s);
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned f, int priority);
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);

static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return std::sqrt(a); }
static inline float atomicAdd(float *p, float v) { float o = *p; *p = o + v; return o; }

// barrier and shuffles for threaded blocks
void emu_sync(void);
extern unsigned long long emu_slots[1024];
#define __syncthreads() emu_sync()
template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int off) {
    unsigned me = emu_tid.x + emu_tid.y * emu_bdim.x;
    unsigned long long b = 0;
    std::memcpy(&b, &v, sizeof v);
    emu_slots[me] = b;
    emu_sync();
    b = emu_slots[me ^ (unsigned)off];
    emu_sync();
    T r;
    std::memcpy(&r, &b, sizeof r);
    return r;
}

// A kernel launch: checks the configuration now (a bad one sets the last error and runs
// nothing), evaluates the arguments now, and queues the kernel on stream st.
bool emu_launch_check(const char *name, dim3 g, dim3 b);
void emu_enqueue_kernel(const char *name, bool threaded, dim3 g, dim3 b, cudaStream_t st, std::function<void()> body);
template <typename K, typename... A>
void emu_launch(const char *name, bool threaded, dim3 g, dim3 b, cudaStream_t st, K kernel, A... args) {
    if (!emu_launch_check(name, g, b)) return;
    emu_enqueue_kernel(name, threaded, g, b, st, [=] { kernel(args...); });
}

// Test hooks (C linkage, tests/unit/test_backend_cuda.c under SL_EMU):
extern "C" {
void emu_set_order(int copy_first);    // 0: compute early, copies late (default); 1: the reverse
int emu_pending_copies(void);          // host-to-device copies queued and not yet run
long long emu_kernel_launches(void);   // kernels launched so far
void emu_set_busy(int busy);           // 1: opening a stream fails as on a GPU taken in exclusive-process mode
}
