/* CUDA device discovery for builds without nvcc: always "not built". */
#ifndef SLUICE_HAVE_CUDA
#include "sluice/cuda.h"

int sl_cuda_built(void) { return 0; }

sl_status sl_cuda_devices(int *count, char *name, size_t cap) {
    *count = 0;
    if (cap) name[0] = 0;
    return sl_err(SL_EUNSUPPORTED, "this build of Sluice has no CUDA support");
}
#else
typedef int sl_cuda_none_unused; /* ISO C forbids an empty translation unit */
#endif
