/* The CPU backend's softmax cross-entropy (train/backend.h softmax_xent and its two halves):
 * per row in double, the loss, argmax and top-5 counts; the rows split across threads, their
 * losses summed in row order afterwards, so the sum does not depend on the thread count.
 *
 * Workload: batch x classes logits (128 x 10 for Fashion-MNIST) per step: microseconds. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "train/backend_cpu_priv.h"

typedef struct xent_ctx {
    const float *logits;
    const int32_t *labels;
    int k;
    double on, off;  /* the target: on at the label, off (smoothing / k) added everywhere */
    float scale;
    float *dlogits;
    double *row_loss;
    unsigned char *row_ok;  /* bit 0: argmax == label; bit 1: label in the top SL_TOPK */
} xent_ctx;

static void xent_rows(void *vc, size_t lo, size_t hi) {
    const xent_ctx *c = vc;
    const int k = c->k;
    for (size_t r = lo; r < hi; r++) {
        const float *z = c->logits + r * k;
        int arg = 0;
        float mx = z[0];
        for (int j = 1; j < k; j++)
            if (z[j] > mx) { mx = z[j]; arg = j; }
        int lab = c->labels[r];
        double sum = 0.0, zsum = 0.0;
        int above = 0; /* logits strictly greater than the label's */
        for (int j = 0; j < k; j++) {
            sum += exp((double)z[j] - mx);
            above += z[j] > z[lab];
        }
        double zl = (double)z[lab] - mx;
        if (c->off != 0.0) { /* smoothing: -sum_j t_j (z_j - mx - log sum) */
            for (int j = 0; j < k; j++) zsum += (double)z[j] - mx;
            c->row_loss[r] = log(sum) - (c->on * zl + c->off * zsum);
        } else {
            c->row_loss[r] = log(sum) - zl;
        }
        c->row_ok[r] = (unsigned char)((arg == lab) | ((above < SL_TOPK && isfinite(z[lab])) << 1));
        if (c->dlogits) {
            float *d = c->dlogits + r * k;
            double inv = 1.0 / sum;
            for (int j = 0; j < k; j++) {
                double p = exp((double)z[j] - mx) * inv;
                d[j] = (float)((p - (j == lab ? c->on : 0.0) - c->off) * c->scale);
            }
        }
    }
}

static sl_status cpu_softmax_xent(sl_backend *bb, const float *logits, const int32_t *labels, int n, int k,
                                  float smoothing, float grad_scale, float *dlogits, double *loss_sum_host,
                                  int64_t *correct_host, int64_t *top5_host) {
    if (n < 0 || k <= 0) return sl_err(SL_EINVAL, "softmax_xent: bad size %d rows of %d logits", n, k);
    if (!(smoothing >= 0.0f && smoothing < 1.0f))
        return sl_err(SL_EINVAL, "softmax_xent: label smoothing %g is outside [0, 1)", smoothing);
    for (int r = 0; r < n; r++)
        if (labels[r] < 0 || labels[r] >= k)
            return sl_err(SL_ERANGE, "softmax_xent: label %d of row %d is outside 0..%d", (int)labels[r], r, k - 1);
    double *row_loss = malloc((size_t)(n ? n : 1) * (sizeof(double) + 1));
    if (!row_loss) return sl_err(SL_ENOMEM, "softmax_xent: out of memory");
    xent_ctx c = {logits, labels, k, 1.0 - (double)smoothing, (double)smoothing / k, grad_scale, dlogits, row_loss,
                  (unsigned char *)(row_loss + n)};
    par_for((cpu_backend *)bb, (size_t)n, (size_t)n * k * 8, xent_rows, &c);
    double loss = 0.0;
    int64_t ok = 0, top = 0;
    for (int r = 0; r < n; r++) { /* fixed order: the sum does not depend on threads */
        loss += row_loss[r];
        ok += c.row_ok[r] & 1;
        top += c.row_ok[r] >> 1;
    }
    free(row_loss);
    if (loss_sum_host) *loss_sum_host = loss;
    if (correct_host) *correct_host = ok;
    if (top5_host) *top5_host = top;
    return SL_OK;
}

/* softmax_xent in two halves: the CPU computes at start and keeps the answer */
static sl_status cpu_xent_start(sl_backend *bb, const float *logits, const int32_t *labels, int n, int k,
                                float smoothing, float grad_scale, float *dlogits) {
    cpu_backend *b = (cpu_backend *)bb;
    b->xent_status = cpu_softmax_xent(bb, logits, labels, n, k, smoothing, grad_scale, dlogits, &b->xent_loss,
                                          &b->xent_correct, &b->xent_top5);
    if (b->xent_status) snprintf(b->xent_msg, sizeof b->xent_msg, "%s", sl_errmsg());
    return b->xent_status == SL_ERANGE ? SL_OK : b->xent_status; /* a bad label is the result's to report */
}

static sl_status cpu_xent_result(sl_backend *bb, double *loss_sum_host, int64_t *correct_host, int64_t *top5_host) {
    cpu_backend *b = (cpu_backend *)bb;
    if (b->xent_status) return sl_err(b->xent_status, "%s", b->xent_msg);
    if (loss_sum_host) *loss_sum_host = b->xent_loss;
    if (correct_host) *correct_host = b->xent_correct;
    if (top5_host) *top5_host = b->xent_top5;
    return SL_OK;
}


/* This file's members of the backend's op table (train/backend_cpu.c). */
void sl__cpu_loss_ops(sl_backend_ops *o) {
    o->softmax_xent = cpu_softmax_xent;
    o->softmax_xent_start = cpu_xent_start, o->softmax_xent_result = cpu_xent_result;
}
