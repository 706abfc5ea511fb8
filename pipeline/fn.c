/* Element-function machinery: reference counting, user functions, chains with their
 * planning pass, per-thread states, and the apply wrapper map ops call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"

void *sl__fn_new(size_t size, const sl_fn_vt *vt, const char *name) {
    sl_fn *fn = calloc(1, size);
    if (!fn) {
        sl_err(SL_ENOMEM, "out of memory creating function '%s'", name);
        return NULL;
    }
    atomic_init(&fn->refs, 1);
    fn->vt = vt;
    snprintf(fn->name, sizeof fn->name, "%s", name);
    return fn;
}

sl_fn *sl_fn_ref(sl_fn *fn) {
    if (fn) atomic_fetch_add_explicit(&fn->refs, 1, memory_order_relaxed);
    return fn;
}

void sl_fn_unref(sl_fn *fn) {
    if (!fn || atomic_fetch_sub_explicit(&fn->refs, 1, memory_order_acq_rel) != 1) return;
    if (fn->vt->destroy) fn->vt->destroy(fn);
    free(fn);
}

const char *sl_fn_name(const sl_fn *fn) { return fn->name; }

/* ---- user functions ---- */

typedef struct {
    sl_fn base;
    sl_fn_apply apply;
    void *ctx;
    sl_free_fn free_ctx;
} custom_fn;

static sl_status custom_apply(const sl_fn *fn, sl_element *e, const sl_fn_call *call) {
    const custom_fn *c = (const custom_fn *)fn;
    return c->apply(c->ctx, e, call);
}

static void custom_destroy(sl_fn *fn) {
    custom_fn *c = (custom_fn *)fn;
    if (c->free_ctx) c->free_ctx(c->ctx, NULL);
}

static const sl_fn_vt custom_vt = {.name = "custom", .apply = custom_apply, .destroy = custom_destroy};

sl_status sl_fn_custom(const char *name, sl_fn_apply apply, void *ctx, sl_free_fn free_ctx,
                       sl_fn **out) {
    *out = NULL;
    if (!apply) return sl_err(SL_EINVAL, "sl_fn_custom: apply is NULL");
    custom_fn *c = sl__fn_new(sizeof *c, &custom_vt, name && *name ? name : "custom");
    if (!c) return SL_ENOMEM;
    c->apply = apply;
    c->ctx = ctx;
    c->free_ctx = free_ctx;
    *out = &c->base;
    return SL_OK;
}

/* ---- chains ---- */

typedef struct {
    sl_fn base;
    int n;
    sl_fn **fns;
    bool *absorbed; /* done by an upstream member that planned for it */
} chain_fn;

static void chain_destroy(sl_fn *fn) {
    chain_fn *c = (chain_fn *)fn;
    for (int i = 0; i < c->n; i++) sl_fn_unref(c->fns[i]);
    free(c->fns);
    free(c->absorbed);
}

static const sl_fn_vt chain_vt = {.name = "chain", .destroy = chain_destroy};

static sl_status chain_flat(sl_fn *const *fns, int n, sl_fn **out);

/* A chain member that is itself a chain contributes its members: chains stay one level
 * deep, which is what states and absorption assume. */
sl_status sl_fn_chain(sl_fn *const *fns, int n, sl_fn **out) {
    *out = NULL;
    if (n < 1) return sl_err(SL_EINVAL, "a function chain needs at least one function");
    int total = 0;
    for (int i = 0; i < n; i++) {
        if (!fns[i]) return sl_err(SL_EINVAL, "function %d of the chain is NULL", i);
        total += fns[i]->vt == &chain_vt ? ((const chain_fn *)fns[i])->n : 1;
    }
    if (total == n) return chain_flat(fns, n, out);
    sl_fn **flat = malloc(sizeof *flat * (size_t)total);
    if (!flat) return sl_err(SL_ENOMEM, "out of memory creating a function chain");
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (fns[i]->vt == &chain_vt) {
            const chain_fn *c = (const chain_fn *)fns[i];
            for (int j = 0; j < c->n; j++) flat[k++] = c->fns[j];
        } else {
            flat[k++] = fns[i];
        }
    }
    sl_status s = chain_flat(flat, total, out);
    free(flat);
    return s;
}

static sl_status chain_flat(sl_fn *const *fns, int n, sl_fn **out) {
    if (n == 1) {
        *out = sl_fn_ref(fns[0]);
        if (fns[0]->vt->plan) fns[0]->vt->plan(fns[0], NULL, 0);
        return SL_OK;
    }
    char name[64];
    size_t len = 0;
    name[0] = 0;
    for (int i = 0; i < n && len < sizeof name; i++)
        len += (size_t)snprintf(name + len, sizeof name - len, i ? "|%s" : "%s", fns[i]->name);
    chain_fn *c = sl__fn_new(sizeof *c, &chain_vt, name);
    if (!c) return SL_ENOMEM;
    c->fns = calloc((size_t)n, sizeof *c->fns);
    c->absorbed = calloc((size_t)n, sizeof *c->absorbed);
    if (!c->fns || !c->absorbed) {
        free(c->fns);
        free(c->absorbed);
        free(c);
        return sl_err(SL_ENOMEM, "out of memory creating a function chain");
    }
    c->n = n;
    for (int i = 0; i < n; i++) c->fns[i] = sl_fn_ref(fns[i]);
    for (int i = 0; i < n; i++) {
        if (c->absorbed[i] || !c->fns[i]->vt->plan) continue;
        int k = c->fns[i]->vt->plan(c->fns[i], c->fns + i + 1, n - i - 1);
        for (int j = 1; j <= k && i + j < n; j++) c->absorbed[i + j] = true;
    }
    *out = &c->base;
    return SL_OK;
}

/* ---- per-thread states ---- */

struct sl_fn_states {
    int n;
    void *st[];
};

static int members(const sl_fn *fn, sl_fn *const **list) {
    if (fn->vt == &chain_vt) {
        const chain_fn *c = (const chain_fn *)fn;
        *list = c->fns;
        return c->n;
    }
    *list = NULL;
    return 1;
}

sl_status sl__fn_states_new(const sl_fn *fn, sl_fn_states **out) {
    sl_fn *const *list;
    int n = members(fn, &list);
    sl_fn_states *st = calloc(1, sizeof *st + sizeof(void *) * (size_t)n);
    if (!st) return sl_err(SL_ENOMEM, "out of memory creating function state");
    st->n = n;
    for (int i = 0; i < n; i++) {
        const sl_fn *f = list ? list[i] : fn;
        if (f->vt->state_new) {
            sl_status s = f->vt->state_new(f, &st->st[i]);
            if (s) {
                st->n = i;
                sl__fn_states_free(fn, st);
                return s;
            }
        }
    }
    *out = st;
    return SL_OK;
}

void sl__fn_states_free(const sl_fn *fn, sl_fn_states *st) {
    if (!st) return;
    sl_fn *const *list;
    members(fn, &list);
    for (int i = 0; i < st->n; i++) {
        const sl_fn *f = list ? list[i] : fn;
        if (f->vt->state_free && st->st[i]) f->vt->state_free(f, st->st[i]);
    }
    free(st);
}

/* What a function receives as its sl_fn_call, with what sl__fn_absorbed needs to find the
 * members it absorbed and their seeds, and the destination sl__fn_out_alloc may use. */
typedef struct {
    sl_fn_call call;       /* first member: the function sees only this */
    const chain_fn *chain; /* the chain being run, NULL outside one */
    int pos;               /* the function's position in the chain */
    uint64_t elem_seed;    /* the seed the chain was applied with */
    const sl__fn_dest *dest; /* map_batch's slot for this element, else NULL */
    const sl_element *elem;  /* the element the function is applied to */
} call_ext;

static sl_status apply_one(const sl_fn *f, sl_element *e, uint64_t seed, int64_t index, void *state,
                           const chain_fn *chain, int pos, uint64_t elem_seed, const sl__fn_dest *dest) {
    call_ext x = {.call = {.seed = seed, .index = index, .state = state},
                  .chain = chain, .pos = pos, .elem_seed = elem_seed, .dest = dest, .elem = e};
    sl_status s = f->vt->apply(f, e, &x.call);
    if (s < 0) sl_err_prefix("%s: ", f->name);
    return s;
}

sl_status sl__fn_apply(const sl_fn *fn, sl_element *e, uint64_t seed, int64_t index, sl_fn_states *st) {
    return sl__fn_apply_to(fn, e, seed, index, st, NULL);
}

sl_status sl__fn_apply_to(const sl_fn *fn, sl_element *e, uint64_t seed, int64_t index, sl_fn_states *st,
                          const sl__fn_dest *dest) {
    if (fn->vt != &chain_vt)
        return apply_one(fn, e, seed, index, st ? st->st[0] : NULL, NULL, 0, seed, dest);
    const chain_fn *c = (const chain_fn *)fn;
    for (int i = 0; i < c->n; i++) {
        if (c->absorbed[i]) continue;
        sl_status s = apply_one(c->fns[i], e, sl__mix(seed, (uint64_t)i), index,
                                st ? st->st[i] : NULL, c, i, seed, dest);
        if (s) return s;
    }
    return SL_OK;
}

bool sl__fn_batch_slot(const sl_fn_call *call, const char *comp, sl_dtype dtype, int rank,
                       const int64_t *dims, sl_tensor *t) {
    const sl__fn_dest *d = ((const call_ext *)call)->dest;
    int bi = d ? sl_element_find(d->batch, comp) : -1;
    if (bi < 0 || rank + 1 > SL_MAX_RANK) return false;
    const sl_tensor *bt = &d->batch->t[bi];
    if (bt->dtype != dtype || dtype == SL_DT_BYTES || bt->rank != rank + 1 || d->k < 0 || d->k >= bt->dims[0] ||
        !bt->buf)
        return false;
    for (int i = 0; i < rank; i++)
        if (bt->dims[i + 1] != dims[i]) return false;
    size_t per = sl_tensor_nbytes(bt) / (size_t)bt->dims[0];
    const char *slot = (const char *)bt->data + per * (size_t)d->k;
    /* an earlier function of the chain built comp there: it is this function's input, so
     * writing the output there too would overwrite what is still being read */
    const sl_element *e = ((const call_ext *)call)->elem;
    int ei = e ? sl_element_find(e, comp) : -1;
    if (ei >= 0 && e->t[ei].data == slot) return false;
    return sl_tensor_view(t, bt->buf, slot, per, dtype, rank, dims) == SL_OK;
}

sl_status sl__fn_out_alloc(const sl_fn_call *call, const char *name, sl_tensor *t, sl_dtype dt, int rank,
                           const int64_t *dims) {
    if (sl__fn_batch_slot(call, name, dt, rank, dims, t)) return SL_OK;
    return sl_tensor_alloc(t, dt, rank, dims);
}

const sl_fn *sl__fn_absorbed(const sl_fn_call *call, int k, uint64_t *seed) {
    const call_ext *x = (const call_ext *)call;
    if (!x->chain || k < 1) return NULL;
    int j = x->pos + k;
    if (j >= x->chain->n || !x->chain->absorbed[j]) return NULL;
    /* every member between must have been absorbed too (by this function) */
    for (int m = x->pos + 1; m < j; m++)
        if (!x->chain->absorbed[m]) return NULL;
    if (seed) *seed = sl__mix(x->elem_seed, (uint64_t)j);
    return x->chain->fns[j];
}

void sl__fn_err_context(const char *label, const char *where, const sl_origin *o) {
    char site[256];
    if (where && *where) snprintf(site, sizeof site, "op '%s' (%s): ", label, where);
    else snprintf(site, sizeof site, "op '%s': ", label);
    if (o && o->path) sl_err_prefix("%s: byte %lld: %s", o->path, (long long)o->offset, site);
    else sl_err_prefix("%s", site);
}

int sl__fn_component(const sl_fn *fn, const sl_element *e, const char *name, sl_status *err) {
    int i = sl_element_find(e, name);
    if (i >= 0) return i;
    char have[512];
    size_t len = 0;
    have[0] = 0;
    for (int k = 0; k < e->n && len < sizeof have; k++)
        len += (size_t)snprintf(have + len, sizeof have - len, k ? ", %s" : "%s", e->names[k]);
    *err = sl_err(SL_EINVAL, "no component '%s' (the element has: %s)", name, e->n ? have : "nothing");
    return -1;
}

sl_status sl__fn_bytes_input(const sl_fn *fn, const sl_element *e, const char *name,
                             const char *needs, sl_bytes *out, const sl_tensor **t) {
    sl_status s = SL_OK;
    int ci = sl__fn_component(fn, e, name, &s);
    if (ci < 0) return s;
    const sl_tensor *in = &e->t[ci];
    char d[96];
    if (in->dtype != SL_DT_BYTES || sl_tensor_numel(in) != 1)
        return sl_err(SL_EINVAL, "'%s' is %s; %s", name, sl_tensor_describe(in, d, sizeof d), needs);
    *out = *(const sl_bytes *)in->data;
    if (t) *t = in;
    return SL_OK;
}
