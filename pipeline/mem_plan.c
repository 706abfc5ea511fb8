/* The memory plan of the pipeline's config-sized buffers (pipeline/internal.h): a shuffle
 * buffer or a batch whose size times its first element's bytes cannot fit what the pipeline
 * may take is refused at that first element, with both sizes, instead of growing until the
 * OOM killer ends the process. Views of a mapped file cost no memory of their own.
 *
 * Workload: once per buffer, a few small reads under /proc and /sys. */
#include "pipeline/internal.h"
#include "sluice/util.h"

size_t sl__element_owned_bytes(const sl_element *e) {
    size_t bytes = 0;
    for (int i = 0; i < e->n; i++)
        if (!e->t[i].buf || !sl_buf_mapped(e->t[i].buf)) bytes += sl_tensor_nbytes(&e->t[i]);
    return bytes;
}

sl_status sl__buffer_fits(const sl_iter *it, const char *what, int64_t n, size_t each, const char *hint) {
    const sl_ictx *ctx = it->ctx;
    int64_t avail;
    char src[1200] = "ram_budget";
    if (ctx->ram_budget_given) avail = ctx->opts.ram_budget;
    else if (!sl_mem_available(&avail, src, sizeof src)) return SL_OK; /* nothing to plan against */
    double need = (double)n * (double)each;
    if (n <= 0 || need <= (double)avail) return SL_OK;
    char nb[32], ab[32], eb[32];
    sl_mem_format(need, nb, sizeof nb);
    sl_mem_format((double)avail, ab, sizeof ab);
    sl_mem_format((double)each, eb, sizeof eb);
    sl__op_err(it, SL_ENOMEM, "a %s of %lld elements of %s each needs %s, more than the %s %s (%s)", what,
               (long long)n, eb, nb, ab, ctx->ram_budget_given ? "the pipeline may take" : "this process can still take",
               src);
    sl_err_hint("%s", hint);
    return SL_ENOMEM;
}
