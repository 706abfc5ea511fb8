/* The gradient bucket plan (train/buckets.h): greedy fusion of whole layers in backward
 * order. Workload: a few to a few hundred layers, once per run. */
#include "train/buckets.h"

int sl__bucket_plan(const size_t *layer_lo, int nl, size_t n, size_t bucket_floats, sl__bucket *out) {
    if (nl <= 0) return 0;
    for (int i = 0; i < nl; i++)
        if (layer_lo[i] >= n || (i > 0 && layer_lo[i] <= layer_lo[i - 1])) return -1;
    int nb = 0;
    size_t hi = n; /* the open bucket's end */
    for (int i = nl - 1; i >= 0; i--) {
        size_t lo = layer_lo[i];
        if (i == 0 || (bucket_floats > 0 && hi - lo >= bucket_floats)) {
            out[nb++] = (sl__bucket){lo, hi};
            hi = lo;
        }
    }
    return nb;
}
