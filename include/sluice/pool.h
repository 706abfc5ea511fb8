/* A fixed-size thread pool with a FIFO work queue, and a monotonic clock.
 *
 * The pipeline's parallel ops run their calls here. Shutdown follows the usual pattern:
 * set cancelled, broadcast, join. */
#ifndef SLUICE_POOL_H
#define SLUICE_POOL_H

#include <stdint.h>

#include "sluice/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_pool sl_pool;
typedef void (*sl_task_fn)(void *arg);

/* Start a pool of `nthreads` (>= 1) workers. Returns SL_OK and *out, or SL_EINVAL /
 * SL_ENOMEM / SL_EIO (thread creation failed) with *out = NULL and no thread left running. */
sl_status sl_pool_create(int nthreads, sl_pool **out);

/* Queue fn(arg) to run on some worker. SL_ECANCELED once destroy has begun, SL_ENOMEM if
 * the queue entry cannot be allocated; on failure fn is not called. */
sl_status sl_pool_submit(sl_pool *p, sl_task_fn fn, void *arg);

/* Block until every task submitted so far has finished. */
void sl_pool_wait(sl_pool *p);

int sl_pool_size(const sl_pool *p);

/* Run every queued task, stop and join the workers, free the pool. NULL is a no-op. */
void sl_pool_destroy(sl_pool *p);

/* Monotonic nanoseconds since an arbitrary origin. */
uint64_t sl_now_ns(void);

/* Number of CPUs this process may run on (sched_getaffinity), at least 1. */
int sl_cpu_count(void);

#ifdef __cplusplus
}
#endif
#endif
