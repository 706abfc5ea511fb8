/* Private to train/ (and its unit tests): the gradient bucket plan of the bucketed ring
 * exchange (train/strategy_ring.c, `bucket_mb` in sluice/train.h).
 *
 * The flat gradient holds the layers' tensors in layer order, and backward produces them
 * last layer first, so a bucket is a contiguous range of whole layers, and the buckets are
 * numbered in backward order: bucket 0 holds the last layers (the highest offsets) and is
 * ready first. Going backward from the last layer, layers join the open bucket until it
 * holds at least `bucket_floats`; then the next bucket opens (Horovod's and PyTorch DDP's
 * greedy fusion, with layers never split). A layer bigger than a bucket is a bucket of
 * its own. */
#ifndef SLUICE_TRAIN_BUCKETS_H
#define SLUICE_TRAIN_BUCKETS_H

#include <stddef.h>

typedef struct sl__bucket {
    size_t lo, hi; /* floats [lo, hi) of the gradient */
} sl__bucket;

/* layer_lo[0..nl): the first gradient float of each layer that has parameters, strictly
 * increasing, the last below n; layer i spans [layer_lo[i], layer_lo[i + 1]), the last one
 * up to n. Writes the buckets into out (room for nl; there are at most nl) in backward
 * order: out[0].hi = n, out[k].lo = out[k + 1].hi, out[last].lo = layer_lo[0]. bucket_floats
 * 0: one bucket. Returns how many, or -1 when layer_lo is not increasing or reaches n
 * (nothing useful written). nl 0: 0 buckets. */
int sl__bucket_plan(const size_t *layer_lo, int nl, size_t n, size_t bucket_floats, sl__bucket *out);

#endif
