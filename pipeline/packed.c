/* Packed elements, for ops that hold many elements at once (shuffle's buffer, cache's
 * in-memory store). An sl_element is 2.6 KB (room for 16 components) of which a record
 * uses a few lines, so a buffer of sl_elements is tens of MB and each access misses the
 * cache on scattered lines. An element of up to SL_PACK_N components whose names are in
 * the holder's name table keeps only its tensors, name indices and origin (a quarter KB,
 * the lines adjacent); any other element is kept whole on the heap.
 * Workload: one pack and one unpack per element passing through (millions a second). */
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"

/* Index of `name` in the table (added when new), or -1 when the table is full. */
static int name_index(sl__pack_names *nt, const char *name) {
    for (int i = 0; i < nt->n; i++)
        if (strcmp(nt->names[i], name) == 0) return i;
    if (nt->n == SL_PACK_NAMES) return -1;
    memcpy(nt->names[nt->n], name, SL_NAME_MAX);
    return nt->n++;
}

/* *dst (fresh) becomes another reference to src's tensors (no copy). */
static void share_whole(sl_element *dst, const sl_element *src) {
    sl_element_init(dst);
    dst->n = src->n;
    dst->origin = src->origin;
    for (int c = 0; c < src->n; c++) {
        memcpy(dst->names[c], src->names[c], SL_NAME_MAX);
        sl_tensor_share(&dst->t[c], &src->t[c]);
    }
}

static bool pack(sl__pack_names *nt, sl_element *e, bool share, sl__packed *p) {
    int idx[SL_PACK_N];
    bool fits = e->n <= SL_PACK_N;
    for (int i = 0; fits && i < e->n; i++) fits = (idx[i] = name_index(nt, e->names[i])) >= 0;
    p->origin = e->origin;
    if (!fits) {
        sl_element *big = malloc(sizeof *big);
        if (!big) return false;
        if (share) share_whole(big, e);
        else sl_element_move(big, e);
        p->n = -1;
        p->u.big = big;
        return true;
    }
    p->n = e->n;
    for (int i = 0; i < e->n; i++) {
        p->name[i] = (uint8_t)idx[i];
        if (share) sl_tensor_share(&p->u.t[i], &e->t[i]);
        else p->u.t[i] = e->t[i];
    }
    if (!share) {
        e->n = 0;
        e->origin = (sl_origin){0};
    }
    return true;
}

static void unpack(const sl__pack_names *nt, sl__packed *p, bool share, sl_element *out) {
    if (p->n < 0) {
        if (share) {
            share_whole(out, p->u.big);
        } else {
            sl_element_move(out, p->u.big);
            free(p->u.big);
            p->n = 0;
        }
        return;
    }
    out->n = p->n;
    out->origin = p->origin;
    for (int i = 0; i < p->n; i++) {
        memcpy(out->names[i], nt->names[p->name[i]], SL_NAME_MAX);
        if (share) sl_tensor_share(&out->t[i], &p->u.t[i]);
        else out->t[i] = p->u.t[i];
    }
    if (!share) p->n = 0;
}

/* share: only reads e (the cast is for the move case's sake) */
bool sl__pack(sl__pack_names *nt, sl_element *e, sl__packed *p) { return pack(nt, e, false, p); }
bool sl__pack_shared(sl__pack_names *nt, const sl_element *e, sl__packed *p) {
    return pack(nt, (sl_element *)e, true, p);
}

/* share: only reads p */
void sl__unpack(const sl__pack_names *nt, sl__packed *p, sl_element *out) { unpack(nt, p, false, out); }
void sl__unpack_shared(const sl__pack_names *nt, const sl__packed *p, sl_element *out) {
    unpack(nt, (sl__packed *)p, true, out);
}

size_t sl__packed_bytes(const sl__packed *p) {
    return p->n < 0 ? sl__element_bytes(p->u.big) : sl__tensors_bytes(p->u.t, p->n);
}

void sl__packed_clear(sl__packed *p) {
    if (p->n < 0) {
        sl_element_clear(p->u.big);
        free(p->u.big);
    } else {
        for (int i = 0; i < p->n; i++) sl_tensor_release(&p->u.t[i]);
    }
    p->n = 0;
}
