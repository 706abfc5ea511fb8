/* unique: tf.data's unique, the elements whose key (one int32, int64 or bytes scalar
 * component) was not seen before in this iterator, in input order. The keys seen are kept
 * in an open-addressing hash set (byte strings copied into it), so memory grows with the
 * number of distinct keys, as tf.data's does. */
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    char comp[SL_NAME_MAX]; /* "": the element's only component */
} unique_ds;

typedef struct {
    uint64_t hash;
    int64_t ival;  /* integer keys */
    uint8_t *str;  /* bytes keys: an owned copy (NULL for an integer key) */
    size_t len;
    bool used;
} slot;

typedef struct {
    sl_iter base;
    sl_iter *in;
    slot *slots;
    size_t cap, n; /* cap: a power of two */
} unique_it;

static bool slot_eq(const slot *s, uint64_t h, bool is_str, int64_t iv, const sl_bytes *b) {
    if (s->hash != h || (s->str != NULL) != is_str) return false;
    if (!is_str) return s->ival == iv;
    return s->len == b->len && (b->len == 0 || memcmp(s->str, b->ptr, b->len) == 0);
}

static sl_status grow(unique_it *u) {
    size_t cap = u->cap ? u->cap * 2 : 64;
    slot *ns = calloc(cap, sizeof *ns);
    if (!ns) return sl_err(SL_ENOMEM, "op '%s': out of memory for %zu keys", u->base.ds->label, u->n);
    for (size_t i = 0; i < u->cap; i++) {
        if (!u->slots[i].used) continue;
        size_t j = u->slots[i].hash & (cap - 1);
        while (ns[j].used) j = (j + 1) & (cap - 1);
        ns[j] = u->slots[i];
    }
    free(u->slots);
    u->slots = ns;
    u->cap = cap;
    return SL_OK;
}

/* 1: the key is new (and now remembered), 0: seen before, < 0: an error. */
static int insert(unique_it *u, bool is_str, int64_t iv, const sl_bytes *b) {
    if ((u->n + 1) * 4 > u->cap * 3) {
        sl_status s = grow(u);
        if (s) return s;
    }
    uint64_t h = is_str ? sl_fnv1a64(SL_FNV64_INIT, b->ptr, b->len) : sl_mix2((uint64_t)iv, 0x756e69717565ull);
    if (is_str) h = sl_mix2(h, b->len);
    size_t j = h & (u->cap - 1);
    while (u->slots[j].used) {
        if (slot_eq(&u->slots[j], h, is_str, iv, b)) return 0;
        j = (j + 1) & (u->cap - 1);
    }
    slot *s = &u->slots[j];
    if (is_str) {
        if (!(s->str = malloc(b->len ? b->len : 1)))
            return sl_err(SL_ENOMEM, "op '%s': out of memory", u->base.ds->label);
        if (b->len) memcpy(s->str, b->ptr, b->len);
        s->len = b->len;
    }
    s->hash = h;
    s->ival = iv;
    s->used = true;
    u->n++;
    return 1;
}

/* The key component of e, or an error naming what is wrong. */
static sl_status key_of(const sl_iter *it, const sl_element *e, const sl_tensor **key) {
    const unique_ds *d = (const unique_ds *)it->ds;
    char desc[96];
    int c = 0;
    if (d->comp[0]) {
        if ((c = sl_element_find(e, d->comp)) < 0)
            return sl__op_err(it, SL_EINVAL, "the element has no component '%s'", d->comp);
    } else if (e->n != 1) {
        sl__op_err(it, SL_EINVAL, "the element has %d components: say which one is the key", e->n);
        sl_err_hint("unique COMPONENT (sl_ds_unique's component)");
        return SL_EINVAL;
    }
    const sl_tensor *t = &e->t[c];
    if (t->rank != 0 || (t->dtype != SL_DT_I32 && t->dtype != SL_DT_I64 && t->dtype != SL_DT_BYTES)) {
        sl__op_err(it, SL_EINVAL, "component '%s' is %s: unique needs an int32, int64 or bytes scalar", e->names[c],
                   sl_tensor_describe(t, desc, sizeof desc));
        sl_err_hint("tf.data's unique takes integer and string scalars only: cast the component first");
        return SL_EINVAL;
    }
    *key = t;
    return SL_OK;
}

static sl_status unique_next(sl_iter *it, sl_element *out) {
    unique_it *u = (unique_it *)it;
    for (;;) {
        sl_status s = sl__iter_next(u->in, out);
        if (s) return s;
        const sl_tensor *t = NULL;
        if ((s = key_of(it, out, &t))) {
            sl_element_clear(out);
            return s;
        }
        bool is_str = t->dtype == SL_DT_BYTES;
        int64_t iv = 0;
        if (t->dtype == SL_DT_I64) iv = *(const int64_t *)t->data;
        else if (t->dtype == SL_DT_I32) iv = *(const int32_t *)t->data;
        int r = insert(u, is_str, iv, is_str ? (const sl_bytes *)t->data : NULL);
        if (r > 0) return SL_OK;
        sl_element_clear(out);
        if (r < 0) return r;
    }
}

static void unique_close(sl_iter *it) {
    unique_it *u = (unique_it *)it;
    for (size_t i = 0; i < u->cap; i++) free(u->slots[i].str);
    free(u->slots);
    sl__iter_close(u->in);
}

static const sl_iter_vt unique_it_vt = {.next = unique_next, .close = unique_close};

static sl_status unique_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    unique_it *u = sl__iter_new(sizeof *u, &unique_it_vt, ds, ctx, seed);
    if (!u) return SL_ENOMEM;
    sl_status s = sl__iter_input(ds, 0, ctx, seed, 0, &u->in);
    if (s) {
        sl__iter_close(&u->base);
        return s;
    }
    *out = &u->base;
    return SL_OK;
}

static int64_t unique_card(const sl_dataset *ds) {
    return sl_dataset_cardinality(ds->inputs[0]) == 0 ? 0 : SL_UNKNOWN_CARD;
}

static const sl_ds_vt unique_vt = {.name = "unique", .make_iter = unique_make, .cardinality = unique_card};

sl_status sl_ds_unique(sl_dataset *in, const char *component, sl_dataset **out) {
    *out = NULL;
    if (component && (!*component || strlen(component) >= SL_NAME_MAX))
        return sl_err(SL_EINVAL, "unique: component name '%.80s' must be 1..%d bytes", component, SL_NAME_MAX - 1);
    unique_ds *d = sl__ds_new(sizeof *d, &unique_vt, &in, 1);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    if (component) memcpy(d->comp, component, strlen(component) + 1);
    *out = &d->base;
    return SL_OK;
}
