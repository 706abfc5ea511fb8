/* ignore_errors: drop the elements whose production failed (a corrupt record, an image that
 * does not decode, a function error) and count them in the iterator's errors_ignored
 * (sl_iter_errors_ignored). The first few are logged at WARN level with their message, so
 * a pipeline that silently loses most of its data is still noticed. Cancellation is not an
 * element's failure: SL_ECANCELED passes through. */
#include "pipeline/internal.h"
#include "sluice/log.h"

#define IE_LOG_FIRST 5 /* errors logged per iterator */

typedef struct {
    sl_iter base;
    sl_iter *in;
    int64_t dropped; /* by this iterator */
} ie_it;

static sl_status ie_next(sl_iter *it, sl_element *out) {
    ie_it *g = (ie_it *)it;
    for (;;) {
        sl_status s = sl__iter_next(g->in, out);
        if (s >= 0 || s == SL_ECANCELED) return s;
        atomic_fetch_add(&it->ctx->errors_ignored, 1);
        g->dropped++;
        if (g->dropped <= IE_LOG_FIRST)
            SL_WARN("op '%s': ignoring error %lld: %s%s", it->ds->label, (long long)g->dropped, sl_errmsg(),
                    g->dropped == IE_LOG_FIRST ? " (further errors are counted, not logged)" : "");
    }
}

static void ie_close(sl_iter *it) { sl__iter_close(((ie_it *)it)->in); }

static const sl_iter_vt ie_it_vt = {.next = ie_next, .close = ie_close};

static sl_status ie_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    ie_it *g = sl__iter_new(sizeof *g, &ie_it_vt, ds, ctx, seed);
    if (!g) return SL_ENOMEM;
    sl_status s = sl__iter_input(ds, 0, ctx, seed, 0, &g->in);
    if (s) {
        sl__iter_close(&g->base);
        return s;
    }
    *out = &g->base;
    return SL_OK;
}

static const sl_ds_vt ie_vt = {.name = "ignore_errors", .make_iter = ie_make};

sl_status sl_ds_ignore_errors(sl_dataset *in, sl_dataset **out) {
    *out = NULL;
    sl_dataset *d = sl__ds_new(sizeof *d, &ie_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    *out = d;
    return SL_OK;
}
