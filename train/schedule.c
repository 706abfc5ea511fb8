/* Learning-rate schedules: a pure function of the step, evaluated once per step on the
 * host, so resuming from a checkpoint at step k gives exactly the rates of a run that never
 * stopped.
 *
 * Warmup (when warmup > 0): lr * step / warmup for step < warmup, so step 0 runs at 0 and
 * the base rate is reached at step `warmup` (Hugging Face's linear warmup). After warmup,
 * with t = step - warmup:
 *   CONSTANT  lr
 *   STEP      lr * gamma^floor(t / step_size)              (step_size <= 0: constant)
 *   COSINE    min_lr + (lr - min_lr) * (1 + cos(pi t / total)) / 2 for t < total, then
 *             min_lr (total <= 0: constant)                (PyTorch's CosineAnnealingLR) */
#include <math.h>

#include "sluice/model.h"

float sl_schedule_lr(const sl_schedule *s, int64_t step) {
    if (step < 0) step = 0;
    if (s->warmup > 0 && step < s->warmup) return (float)((double)s->lr * (double)step / (double)s->warmup);
    int64_t t = step - (s->warmup > 0 ? s->warmup : 0);
    switch (s->kind) {
    case SL_SCHED_STEP:
        if (s->step_size <= 0) return s->lr;
        return (float)((double)s->lr * pow((double)s->gamma, (double)(t / s->step_size)));
    case SL_SCHED_COSINE:
        if (s->total <= 0) return s->lr;
        if (t >= s->total) return s->min_lr;
        return (float)((double)s->min_lr +
                       ((double)s->lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * (double)t / (double)s->total)));
    case SL_SCHED_CONSTANT:
    default:
        return s->lr;
    }
}
