/* The CUDA entry points for builds without nvcc (or sanitizer/fuzz builds, which skip
 * CUDA): device discovery says "not built" and the CUDA backend is SL_EUNSUPPORTED, so
 * callers fall back to the CPU backend and GPU tests skip. */
#ifndef SLUICE_HAVE_CUDA
#include "sluice/cuda.h"
#include "train/backend.h"

int sl_cuda_built(void) { return 0; }

sl_status sl_cuda_devices(int *count, char *name, size_t cap) {
    *count = 0;
    if (cap) name[0] = 0;
    return sl_err(SL_EUNSUPPORTED, "this build of Sluice has no CUDA support");
}

sl_status sl__backend_cuda_new(int device, sl_backend **out) {
    (void)device;
    *out = NULL;
    sl_err(SL_EUNSUPPORTED, "CUDA backend: this build of Sluice has no CUDA support");
    sl_err_hint("rebuild with nvcc on the PATH or in /usr/local/cuda (-DSLUICE_CUDA=ON), or use the CPU backend");
    return SL_EUNSUPPORTED;
}
#else
typedef int sl_cuda_none_unused; /* ISO C forbids an empty translation unit */
#endif
