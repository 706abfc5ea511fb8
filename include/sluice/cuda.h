/* What the CUDA runtime sees, and which GPU a replica uses. Builds without CUDA answer SL_EUNSUPPORTED; builds with it
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

/* ---- which GPU a replica uses (Horovod / torchrun style: local rank % visible GPUs) ----
 *
 * Every replica on a host takes GPU `local_rank % visible`, where visible is the number of
 * devices the CUDA runtime shows this process (CUDA_VISIBLE_DEVICES applies). An explicit
 * device (the train block's `device N`, or sluice-train --device N) wins over everything.
 * Otherwise the local rank comes from the first of these variables that is set (and not
 * empty), the most specific launcher first:
 *   SLUICE_LOCAL_RANK           sluice-launch
 *   OMPI_COMM_WORLD_LOCAL_RANK  Open MPI's mpirun
 *   LOCAL_RANK                  torchrun / torch.distributed.launch
 *   MPI_LOCALRANKID             MPICH / Intel MPI's mpiexec (Hydra)
 *   SLURM_LOCALID               srun
 *   TF_CONFIG                   the ring members (chief, then workers, in list order) before
 *                               this task whose address has the same host as this task's
 * and with none of them, the local rank is 0.
 *
 * The choice is a pure function of its arguments: envp is a NULL-terminated "NAME=value"
 * array (such as `environ`; NULL: none). explicit_device is -1 for none. visible <= 0 (no
 * GPU, or a build without CUDA) gives device = local rank (or the explicit device): the
 * caller falls back or fails when it opens the device.
 * Errors (out zeroed, device -1):
 *   SL_EINVAL "SLUICE_LOCAL_RANK='abc' is not a local rank (a whole number 0..65535)" for a
 *     variable above that is not a decimal number in range, naming the variable;
 *   SL_EINVAL "device 3 does not exist: this process sees 2 GPUs (0..1)" for an explicit
 *     device >= visible (when visible > 0), or below -1;
 *   the JSON reader's SL_ECORRUPT naming TF_CONFIG when TF_CONFIG is the source and is not
 *     JSON (a TF_CONFIG without a usable task and cluster is skipped: local rank 0). */
typedef struct sl_device_choice {
    int device;          /* CUDA device index */
    int local_rank;      /* rank among the replicas on this host; -1 with an explicit device */
    char source[32];     /* "device option", a variable's name above, or "default" */
} sl_device_choice;

sl_status sl_cuda_choose_device(const char *const *envp, int explicit_device, int visible, sl_device_choice *out);

/* One line for the replica's console: "GPU 1 of 4 (local rank 5 from SLURM_LOCALID)",
 * "GPU 2 of 4 (device option)", "GPU 0 of 1 (default)". Returns snprintf's length. */
int sl_cuda_choice_describe(const sl_device_choice *c, int visible, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
