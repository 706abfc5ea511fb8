/* The parameter-server shard plan (the rule is in sluice/ps.h): which ps owns which floats
 * of the flat parameter vector, each ps's packed shard, and the plan hash that every frame
 * carries. Also the refcounted send buffer and clock the other ps files share.
 *
 * Workload: planned once per task at start-up (a few to a few thousand variables);
 * gather/scatter run once per push/pull on every float of a shard, so they are plain
 * memcpy per segment.
 *
 * Details the header leaves open, decided here:
 *   - split variables are placed first (each ps gets its part), then the whole variables
 *     greedily, so "fewest floats so far" counts the split parts;
 *   - a split variable with fewer floats than ps tasks gives its parts of 0 floats no
 *     segment (the last ps takes the whole variable as the remainder);
 *   - the hash is FNV-1a 32 over little-endian bytes: u32 nps, then per segment in flat
 *     order u32 ps, u64 offset, u64 len. A hash of 0 (which means "do not check" on the
 *     wire) is replaced by 1. */
#include <stdlib.h>
#include <string.h>

#include "ps_internal.h"

sl_buf *sl__ps_buf_new(size_t nfloats) {
    if (nfloats > (SIZE_MAX - SL_PS_PREFIX) / 4) return NULL;
    return sl_buf_new(SL_PS_PREFIX + 4 * nfloats);
}

static void buf_release(void *data, void *ctx) {
    (void)data;
    sl_buf_unref(ctx);
}

sl_status sl__ps_buf_send(sl_tp *tp, int to, sl_msg_hdr *h, sl_buf *b) {
    return sl_tp_send(tp, to, h, b->data, b->size, buf_release, sl_buf_ref(b));
}

const void *sl__ps_aligned(const void *p, size_t len, void **scratch, size_t *cap) {
    if (((uintptr_t)p & 7) == 0) return p;
    if (*cap < len) {
        void *n = realloc(*scratch, len);
        if (!n) return NULL;
        *scratch = n;
        *cap = len;
    }
    memcpy(*scratch, p, len);
    return *scratch;
}

/* ---- plan -------------------------------------------------------------------------- */

static uint32_t fnv(uint32_t h, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) {
        h ^= (uint8_t)(v >> (8 * i));
        h *= 16777619u;
    }
    return h;
}

typedef struct var_ref {
    size_t size;
    int index;
} var_ref;

static int by_size_desc(const void *a, const void *b) {
    const var_ref *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

sl_status sl_ps_plan_create(const size_t *sizes, int nvars, int nps, size_t split_floats, sl_ps_plan **out) {
    *out = NULL;
    if (!sizes || nvars < 1) return sl_err(SL_EINVAL, "ps plan: no variables to place");
    if (nps < 1) return sl_err(SL_EINVAL, "ps plan: %d ps tasks (need at least 1)", nps);
    size_t total = 0;
    for (int i = 0; i < nvars; i++) {
        if (sizes[i] == 0) return sl_err(SL_EINVAL, "ps plan: variable %d has 0 floats", i);
        if (sizes[i] > SIZE_MAX / 4 - total) return sl_err(SL_EINVAL, "ps plan: %d variables overflow size_t", nvars);
        total += sizes[i];
    }
    size_t split = split_floats;
    if (!split) {
        split = total / (4 * (size_t)nps);
        if (split < 1024) split = 1024;
    }
    sl_ps_plan *p = calloc(1, sizeof *p);
    size_t *offs = calloc((size_t)nvars, sizeof *offs);
    int *owner = calloc((size_t)nvars, sizeof *owner); /* -1: split */
    var_ref *order = calloc((size_t)nvars, sizeof *order);
    size_t maxseg = 0;
    for (int i = 0; i < nvars; i++) maxseg += sizes[i] > split ? (size_t)nps : 1;
    if (maxseg > (size_t)INT32_MAX) { free(p); p = NULL; }
    if (p) {
        p->segs = calloc(maxseg, sizeof *p->segs);
        p->shard_len = calloc((size_t)nps, sizeof *p->shard_len);
    }
    if (!p || !offs || !owner || !order || !p->segs || !p->shard_len) {
        sl_ps_plan_free(p);
        free(offs); free(owner); free(order);
        return sl_err(SL_ENOMEM, "ps plan: out of memory for %d variables", nvars);
    }
    p->nps = nps;
    p->total = total;
    size_t *load = p->shard_len; /* floats per ps so far; ends as the shard lengths */
    size_t at = 0;
    int nwhole = 0;
    for (int i = 0; i < nvars; i++) {
        offs[i] = at;
        at += sizes[i];
        if (sizes[i] > split) {
            owner[i] = -1;
            size_t part = sizes[i] / (size_t)nps;
            for (int j = 0; j < nps; j++) load[j] += j + 1 < nps ? part : sizes[i] - part * (size_t)(nps - 1);
        } else {
            order[nwhole++] = (var_ref){sizes[i], i};
        }
    }
    qsort(order, (size_t)nwhole, sizeof *order, by_size_desc);
    for (int k = 0; k < nwhole; k++) {
        int best = 0;
        for (int j = 1; j < nps; j++)
            if (load[j] < load[best]) best = j;
        owner[order[k].index] = best;
        load[best] += order[k].size;
    }
    /* segments in flat order; shard offsets follow from that order per ps */
    size_t *fill = calloc((size_t)nps, sizeof *fill);
    if (!fill) {
        sl_ps_plan_free(p);
        free(offs); free(owner); free(order);
        return sl_err(SL_ENOMEM, "ps plan: out of memory");
    }
    int ns = 0;
    for (int i = 0; i < nvars; i++) {
        if (owner[i] >= 0) {
            p->segs[ns++] = (sl_ps_seg){.ps = owner[i], .offset = offs[i], .len = sizes[i]};
            continue;
        }
        size_t part = sizes[i] / (size_t)nps;
        for (int j = 0; j < nps; j++) {
            size_t len = j + 1 < nps ? part : sizes[i] - part * (size_t)(nps - 1);
            if (len) p->segs[ns++] = (sl_ps_seg){.ps = j, .offset = offs[i] + part * (size_t)j, .len = len};
        }
    }
    p->nseg = ns;
    uint32_t h = fnv(2166136261u, (uint32_t)nps, 4);
    for (int k = 0; k < ns; k++) {
        sl_ps_seg *s = &p->segs[k];
        s->shard_offset = fill[s->ps];
        fill[s->ps] += s->len;
        h = fnv(h, (uint32_t)s->ps, 4);
        h = fnv(h, s->offset, 8);
        h = fnv(h, s->len, 8);
    }
    p->hash = h ? h : 1;
    free(fill); free(offs); free(owner); free(order);
    *out = p;
    return SL_OK;
}

void sl_ps_plan_free(sl_ps_plan *p) {
    if (!p) return;
    free(p->segs);
    free(p->shard_len);
    free(p);
}

void sl_ps_plan_gather(const sl_ps_plan *p, int ps, const float *flat, float *packed) {
    for (int k = 0; k < p->nseg; k++) {
        const sl_ps_seg *s = &p->segs[k];
        if (s->ps == ps) memcpy(packed + s->shard_offset, flat + s->offset, s->len * sizeof(float));
    }
}

void sl_ps_plan_scatter(const sl_ps_plan *p, int ps, const float *packed, float *flat) {
    for (int k = 0; k < p->nseg; k++) {
        const sl_ps_seg *s = &p->segs[k];
        if (s->ps == ps) memcpy(flat + s->offset, packed + s->shard_offset, s->len * sizeof(float));
    }
}
