/* Private to train/ (and its unit tests and bench_train): a single-threaded float32 GEMM with AVX-512 FMAs,
 * which the CPU backend runs instead of the BLAS where the CPU has AVX-512F and it is the
 * faster (train/backend_cpu_gemm.c decides; sl_model_opts.cpu_gemm). Row-major, the
 * arguments and meaning of cblas_sgemm(CblasRowMajor, ...):
 *   C (m x n, row stride ldc) = alpha * op(A) * op(B) + beta * C
 * op(A) is m x k: A stored m x k (lda >= k) or, with ta, k x m (lda >= m); op(B) is k x n:
 * B stored k x n (ldb >= n) or, with tb, n x k (ldb >= k). beta == 0 writes C without
 * reading it (as a BLAS does: C may hold NaN). The sums run over k in order within blocks of
 * 256, blocks added in order, so a result differs from another BLAS's only by rounding. */
#ifndef SLUICE_TRAIN_GEMM_AVX512_H
#define SLUICE_TRAIN_GEMM_AVX512_H

#include <stdbool.h>
#include <stddef.h>

#include "sluice/status.h"

/* true when this CPU runs AVX-512F and this build has the kernel (x86-64, GCC or Clang). */
bool sl__gemm512_available(void);

/* true when the CPU backend's convolutions multiply on sl__gemm512_xw / _xtd below, without
 * im2col: wherever sl__gemm512_available, whatever GEMM its plain products use (the backend
 * chooses that one per shape, sl_model_opts.cpu_gemm; train/backend_cpu_gemm.c). */
static inline bool sl__gemm512_wanted(void) { return sl__gemm512_available(); }

/* Whether an m x n product is big enough for sl__gemm512 to beat the BLAS: its 12 x 32 tile
 * wastes most of its lanes below 24 x 24 (the CPU backend's parts; bench_train's the same). */
static inline bool sl__gemm512_worth(int m, int n) { return m >= 24 && n >= 24; }

/* The GEMM above. SL_OK; SL_ENOMEM (C untouched) when its per-thread packing buffers (about
 * 1.1 MB, kept for the thread's life) cannot be had; SL_EINVAL (C untouched) for negative
 * sizes, strides below the stored widths, or a CPU without AVX-512F. m, n or k of 0 is as a
 * BLAS does: nothing, nothing, C = beta * C. */
sl_status sl__gemm512(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                      int ldb, float beta, float *c, int ldc);

/* Products for a convolution without its im2col matrix (train/backend_cpu_conv.c). X is a
 * matrix of m rows whose row i is the nseg runs of seg floats at rows[i] + s * sstride,
 * s < nseg, one after another (an output pixel's window in a zero-padded NHWC image: a run
 * per kernel row). Both need seg >= 1 and write C where beta == 0 without reading it.
 *
 * sl__gemm512_xw: C (m x n, row stride ldc) = beta * C + X * B, B stored (nseg * seg) x n
 * (ldb >= n). Each C element's sum runs over k in order within blocks that end at every run's
 * end and every KC (256) floats of a run; blocks are added in order.
 * sl__gemm512_xtd: rows r0..r1-1 of C ((nseg * seg) x n, ldc) = beta * C + X^T * D, D stored
 * m x n (ldd >= n), 0 <= r0 <= r1 <= nseg * seg (other rows untouched). The sums run over the
 * m rows of X in order within blocks of 256, blocks added in order.
 * Both: SL_OK; SL_ENOMEM (C untouched) without the packing buffers; SL_EINVAL (C untouched)
 * for sizes below 1 (m, n of 0: nothing), strides below the widths, or no AVX-512F. The
 * floats of a C row depend on nothing but that row's inputs: parts of C computed apart (rows
 * of X for xw, of X^T for xtd) are the floats of one call. */
sl_status sl__gemm512_xw(int m, int n, int nseg, int seg, const float *const *rows, size_t sstride, const float *b,
                         int ldb, float beta, float *c, int ldc);
sl_status sl__gemm512_xtd(int m, int n, int nseg, int seg, const float *const *rows, size_t sstride,
                          const float *d, int ldd, int r0, int r1, float beta, float *c, int ldc);

#endif
