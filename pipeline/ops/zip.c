/* zip: the elements of several datasets side by side, ending with the shortest. Datasets
 * carry no element spec, so a component name that appears in two inputs can only be seen
 * at the first element: that element is SL_EINVAL naming the component and both inputs,
 * and the stream ends there (every element would collide the same way).
 *
 * An error from one input consumes that position in every input (the others' elements at
 * that position are dropped), so the inputs stay aligned; the first input's error in input
 * order is the one returned. */
#include "pipeline/internal.h"

typedef struct {
    sl_iter base;
    sl_iter *in[SL_DS_MAX_INPUTS];
    bool broken; /* a name collision was reported: nothing more */
} zip_it;

static sl_status zip_next(sl_iter *it, sl_element *out) {
    zip_it *z = (zip_it *)it;
    int n = it->ds->ninputs;
    if (z->broken) return SL_END;
    sl_element part;
    sl_element_init(&part);
    sl_status first_err = SL_OK;
    sl_error err;
    bool ended = false;
    int owner[SL_ELEM_MAX]; /* which input each component of out came from */
    for (int i = 0; i < n; i++) {
        sl_status s = sl__iter_next(z->in[i], &part);
        if (s == SL_END) {
            ended = true;
            continue; /* the others still consume this position: all end together */
        }
        if (s < 0) {
            if (!first_err) {
                first_err = s;
                sl_err_save(&err);
            }
            continue;
        }
        if (first_err || ended) {
            sl_element_clear(&part);
            continue;
        }
        for (int c = 0; c < part.n; c++) {
            int prev = sl_element_find(out, part.names[c]);
            if (prev >= 0) {
                sl_status e = sl__op_err(it, SL_EINVAL, "component '%s' is in input %d and input %d",
                                         part.names[c], owner[prev], i);
                sl_err_hint("rename one of them with a map before zipping");
                sl_err_save(&err);
                first_err = e;
                z->broken = true;
                break;
            }
            if (out->n >= SL_ELEM_MAX) {
                first_err = sl__op_err(it, SL_ERANGE, "more than %d components in all", SL_ELEM_MAX);
                sl_err_save(&err);
                z->broken = true;
                break;
            }
            owner[out->n] = i;
            sl_tensor t = part.t[c];
            part.t[c] = SL_TENSOR_EMPTY;
            sl_element_set(out, part.names[c], &t); /* checked above: cannot fail */
        }
        sl_element_clear(&part);
    }
    if (ended && !z->broken) {
        sl_element_clear(out);
        return SL_END;
    }
    if (first_err) {
        sl_element_clear(out);
        return sl_err_restore(&err);
    }
    return SL_OK;
}

static void zip_close(sl_iter *it) {
    zip_it *z = (zip_it *)it;
    for (int i = 0; i < it->ds->ninputs; i++) sl__iter_close(z->in[i]);
}

static const sl_iter_vt zip_it_vt = {.next = zip_next, .close = zip_close};

static sl_status zip_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    zip_it *z = sl__iter_new(sizeof *z, &zip_it_vt, ds, ctx, seed);
    if (!z) return SL_ENOMEM;
    for (int i = 0; i < ds->ninputs; i++) {
        sl_status s = sl__iter_input_at(ds, i, ctx, seed, (uint64_t)i, z->base.start, &z->in[i]);
        if (s) {
            sl__iter_close(&z->base);
            return s;
        }
    }
    *out = &z->base;
    return SL_OK;
}

static int64_t zip_card(const sl_dataset *ds) {
    int64_t best = SL_INFINITE;
    bool unknown = false;
    for (int i = 0; i < ds->ninputs; i++) {
        int64_t c = sl_dataset_cardinality(ds->inputs[i]);
        if (c == SL_UNKNOWN_CARD) unknown = true;
        else if (c >= 0 && (best == SL_INFINITE || c < best)) best = c;
    }
    if (unknown) return best == 0 ? 0 : SL_UNKNOWN_CARD;
    return best;
}

static const sl_ds_vt zip_vt = {.name = "zip", .seek = true, .make_iter = zip_make, .cardinality = zip_card};

sl_status sl_ds_zip(sl_dataset *const *ins, int n, sl_dataset **out) {
    *out = NULL;
    if (!ins || n < 1 || n > SL_DS_MAX_INPUTS)
        return sl_err(SL_EINVAL, "zip: %d inputs (must be 1..%d)", n, SL_DS_MAX_INPUTS);
    sl_dataset *d = sl__ds_new(sizeof *d, &zip_vt, ins, n);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    *out = d;
    return SL_OK;
}
