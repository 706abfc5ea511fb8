// CUDA device discovery for builds with nvcc. A machine without a driver or a device is
// not an error: it has zero devices, and the CPU backend is used.
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" {
#include "sluice/cuda.h"
}

extern "C" int sl_cuda_built(void) { return 1; }

extern "C" sl_status sl_cuda_devices(int *count, char *name, size_t cap) {
    int n = 0;
    *count = 0;
    if (cap) name[0] = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        cudaGetLastError();
        return SL_OK;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        return SL_OK; /* any driver trouble means "no usable GPU" here */
    }
    *count = n;
    if (n > 0 && cap) {
        cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) snprintf(name, cap, "%s", prop.name);
    }
    return SL_OK;
}
