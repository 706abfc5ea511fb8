/* Private to train/: the BLAS the CPU backend calls. cblas.h, plus the OpenBLAS function it
 * uses that OpenBLAS's own cblas.h declares but not every cblas.h does. */
#ifndef SLUICE_TRAIN_BLAS_PRIV_H
#define SLUICE_TRAIN_BLAS_PRIV_H

#include <cblas.h>

/* Threads OpenBLAS itself uses for one call (OpenBLAS's library, -lopenblas). */
void openblas_set_num_threads(int num_threads);

#endif
