/* What the CUDA runtime sees. Builds without CUDA answer SL_EUNSUPPORTED; builds with it
 * answer SL_OK with count 0 on a machine without a usable GPU (no driver, no device). */
#ifndef SLUICE_CUDA_H
#define SLUICE_CUDA_H

#include <stddef.h>

#include "sluice/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices into *count, and the first one's name into name (cap bytes,
 * NUL-terminated; "" when count is 0). */
sl_status sl_cuda_devices(int *count, char *name, size_t cap);

/* Whether this library was built with the CUDA parts. */
int sl_cuda_built(void);

#ifdef __cplusplus
}
#endif
#endif
