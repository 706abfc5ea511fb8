/* tf.train.Example through protobuf-c: the reference decoder (sl_example_parse_pb), the
 * typed getters for both decoders, and the encoder (sl_exb_*).
 *
 * Workload: the reference decoder runs in tests, fuzzers and tools that want certainty
 * rather than speed; the encoder runs once per record in writers (sluice-record, dataset
 * converters), with a handful of features per record, so a builder keeps its buffers
 * across sl_exb_reset to avoid allocating per record.
 *
 * Encoding: features in the order added, each map entry as key then value, lists packed
 * (what protobuf-c writes for [packed = true] and proto3 scalars). The Features message is
 * always written, so an Example with no features encodes as 0a 00, as
 * tf.train.Example(features=tf.train.Features(feature={})) does. */
#include <stdlib.h>
#include <string.h>

#include "example.pb-c.h"
#include "formats/example_priv.h"
#include "sluice/example.h"

/* ---- reference decoder --------------------------------------------------------------- */

sl_status sl_example_parse_pb(sl_example *ex, const uint8_t *data, size_t len) {
    sl__example_reset(ex);
    if (!data && len) return sl_err(SL_EINVAL, "sl_example_parse_pb: NULL data with length %zu", len);
    int oom = 0;
    ProtobufCAllocator alloc = {sl__pb_alloc, sl__pb_free, &oom};
    static const uint8_t none[1];
    Tensorflow__Example *m = tensorflow__example__unpack(&alloc, len, data ? data : none);
    if (!m) {
        if (oom) return sl_err(SL_ENOMEM, "out of memory unpacking a %zu-byte Example", len);
        sl_err(SL_ECORRUPT, "protobuf-c rejected the %zu-byte Example", len);
        sl_err_hint("the record is not a serialized tf.train.Example, or it is damaged; "
                    "sl_example_parse names the byte offset");
        return SL_ECORRUPT;
    }
    ex->pb = m;
    if (!m->features) return SL_OK;
    for (size_t i = 0; i < m->features->n_feature; i++) {
        const Tensorflow__Features__FeatureEntry *e = m->features->feature[i];
        const char *key = e->key ? e->key : "";
        sl_feature *f;
        sl_status st = sl__example_slot(ex, (const uint8_t *)key, sl__pb_key_len(e->key), &f);
        if (st) {
            sl__example_reset(ex);
            return st;
        }
        const Tensorflow__Feature *v = e->value;
        f->kind = SL_FEAT_NONE;
        f->count = 0;
        f->body = NULL;
        f->body_len = 0;
        f->pb = NULL;
        if (!v) continue;
        switch (v->kind_case) {
        case TENSORFLOW__FEATURE__KIND_BYTES_LIST:
            f->kind = SL_FEAT_BYTES;
            f->count = v->bytes_list->n_value;
            break;
        case TENSORFLOW__FEATURE__KIND_FLOAT_LIST:
            f->kind = SL_FEAT_FLOAT;
            f->count = v->float_list->n_value;
            break;
        case TENSORFLOW__FEATURE__KIND_INT64_LIST:
            f->kind = SL_FEAT_INT64;
            f->count = v->int64_list->n_value;
            break;
        default: break;
        }
        if (f->kind != SL_FEAT_NONE) f->pb = v;
    }
    return SL_OK;
}

/* ---- typed getters (both decoders) --------------------------------------------------- */

static sl_status check_kind(const sl_feature *f, sl_feat_kind want, size_t cap, const void *out) {
    if (!f) return sl_err(SL_EINVAL, "no feature (NULL)");
    if (f->kind != want)
        return sl_err(SL_EINVAL, "feature '%.*s' holds %s values, not %s",
                      (int)(f->key.len > 200 ? 200 : f->key.len), (const char *)f->key.ptr,
                      sl_feat_kind_name(f->kind), sl_feat_kind_name(want));
    if (cap < f->count)
        return sl_err(SL_ERANGE, "feature '%.*s' holds %zu values, room for %zu",
                      (int)(f->key.len > 200 ? 200 : f->key.len), (const char *)f->key.ptr,
                      f->count, cap);
    if (f->count && !out) return sl_err(SL_EINVAL, "NULL output for %zu values", f->count);
    return SL_OK;
}

sl_status sl_feature_floats(const sl_feature *f, float *out, size_t cap) {
    sl_status st = check_kind(f, SL_FEAT_FLOAT, cap, out);
    if (st) return st;
    if (!f->count) return SL_OK;
    if (f->pb) {
        memcpy(out, ((const Tensorflow__Feature *)f->pb)->float_list->value, f->count * sizeof(float));
        return SL_OK;
    }
    return sl__fast_floats(f, out);
}

sl_status sl_feature_int64s(const sl_feature *f, int64_t *out, size_t cap) {
    sl_status st = check_kind(f, SL_FEAT_INT64, cap, out);
    if (st) return st;
    if (!f->count) return SL_OK;
    if (f->pb) {
        memcpy(out, ((const Tensorflow__Feature *)f->pb)->int64_list->value, f->count * sizeof(int64_t));
        return SL_OK;
    }
    return sl__fast_int64s(f, out);
}

sl_status sl_feature_bytes(const sl_feature *f, sl_bytes *out, size_t cap) {
    sl_status st = check_kind(f, SL_FEAT_BYTES, cap, out);
    if (st) return st;
    if (!f->count) return SL_OK;
    if (f->pb) {
        const Tensorflow__BytesList *bl = ((const Tensorflow__Feature *)f->pb)->bytes_list;
        static const uint8_t empty[1];
        for (size_t i = 0; i < f->count; i++) {
            /* protobuf-c leaves data NULL for an empty string; a view is never NULL */
            out[i].ptr = bl->value[i].data ? bl->value[i].data : empty;
            out[i].len = bl->value[i].len;
        }
        return SL_OK;
    }
    return sl__fast_bytes(f, out);
}

/* ---- encoder ------------------------------------------------------------------------- */

typedef struct exb_feat {
    char *key;            /* NUL-terminated copy */
    size_t key_cap;
    sl_feat_kind kind;
    size_t n;             /* values */
    void *vals;           /* float[n], int64_t[n] or ProtobufCBinaryData[n] */
    size_t vals_cap;      /* bytes at vals */
    uint8_t *blob;        /* bytes features: the copied values back to back */
    size_t blob_cap;
} exb_feat;

struct sl_exb {
    exb_feat *f;          /* slots [0, n) in use; [n, cap) keep their buffers for reuse */
    size_t n, cap;
};

/* protobuf-c's packer counts lengths in 32 bits; stay well inside a protobuf's 2 GiB. */
#define MAX_FEATURE_BYTES ((size_t)1 << 30)

sl_status sl_exb_new(sl_exb **out) {
    sl_exb *b = calloc(1, sizeof *b);
    if (!b) return sl_err(SL_ENOMEM, "out of memory for an Example builder");
    *out = b;
    return SL_OK;
}

void sl_exb_free(sl_exb *b) {
    if (!b) return;
    for (size_t i = 0; i < b->cap; i++) {
        free(b->f[i].key);
        free(b->f[i].vals);
        free(b->f[i].blob);
    }
    free(b->f);
    free(b);
}

void sl_exb_reset(sl_exb *b) {
    if (b) b->n = 0;
}

static sl_status grow(void **buf, size_t *cap, size_t need) {
    if (need <= *cap) return SL_OK;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *p = realloc(*buf, c);
    if (!p) return sl_err(SL_ENOMEM, "out of memory (%zu bytes) in the Example builder", c);
    *buf = p;
    *cap = c;
    return SL_OK;
}

/* A slot for a new feature `key`, with its key copied; its values are not set yet. */
static sl_status add_slot(sl_exb *b, const char *key, size_t nvals, const void *vals, exb_feat **out) {
    if (!b || !key) return sl_err(SL_EINVAL, "sl_exb: NULL builder or key");
    if (!key[0]) return sl_err(SL_EINVAL, "sl_exb: empty feature key");
    if (nvals && !vals) return sl_err(SL_EINVAL, "sl_exb: feature '%s': NULL values for n=%zu", key, nvals);
    for (size_t i = 0; i < b->n; i++)
        if (strcmp(b->f[i].key, key) == 0)
            return sl_err(SL_EINVAL, "sl_exb: feature '%s' added twice", key);
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 8;
        exb_feat *nf = realloc(b->f, cap * sizeof *nf);
        if (!nf) return sl_err(SL_ENOMEM, "out of memory in the Example builder");
        memset(nf + b->cap, 0, (cap - b->cap) * sizeof *nf);
        b->f = nf;
        b->cap = cap;
    }
    exb_feat *f = &b->f[b->n];
    size_t klen = strlen(key);
    sl_status st = grow((void **)&f->key, &f->key_cap, klen + 1);
    if (st) return st;
    memcpy(f->key, key, klen + 1);
    *out = f;
    return SL_OK;
}

sl_status sl_exb_floats(sl_exb *b, const char *key, const float *vals, size_t n) {
    exb_feat *f;
    sl_status st = add_slot(b, key, n, vals, &f);
    if (st) return st;
    if (n > MAX_FEATURE_BYTES / sizeof(float))
        return sl_err(SL_ERANGE, "sl_exb: feature '%s': %zu floats is too many for one Example", key, n);
    if ((st = grow(&f->vals, &f->vals_cap, n * sizeof(float) + 1))) return st;
    if (n) memcpy(f->vals, vals, n * sizeof(float));
    f->kind = SL_FEAT_FLOAT;
    f->n = n;
    b->n++;
    return SL_OK;
}

sl_status sl_exb_int64s(sl_exb *b, const char *key, const int64_t *vals, size_t n) {
    exb_feat *f;
    sl_status st = add_slot(b, key, n, vals, &f);
    if (st) return st;
    if (n > MAX_FEATURE_BYTES / 10)
        return sl_err(SL_ERANGE, "sl_exb: feature '%s': %zu int64s is too many for one Example", key, n);
    if ((st = grow(&f->vals, &f->vals_cap, n * sizeof(int64_t) + 1))) return st;
    if (n) memcpy(f->vals, vals, n * sizeof(int64_t));
    f->kind = SL_FEAT_INT64;
    f->n = n;
    b->n++;
    return SL_OK;
}

sl_status sl_exb_bytes(sl_exb *b, const char *key, const sl_bytes *vals, size_t n) {
    exb_feat *f;
    sl_status st = add_slot(b, key, n, vals, &f);
    if (st) return st;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (vals[i].len && !vals[i].ptr)
            return sl_err(SL_EINVAL, "sl_exb: feature '%s': value %zu is NULL with length %zu", key, i, vals[i].len);
        if (vals[i].len > MAX_FEATURE_BYTES - total || n > MAX_FEATURE_BYTES / 16)
            return sl_err(SL_ERANGE, "sl_exb: feature '%s' is larger than 1 GiB", key);
        total += vals[i].len;
    }
    if ((st = grow(&f->vals, &f->vals_cap, n * sizeof(ProtobufCBinaryData) + 1))) return st;
    if ((st = grow((void **)&f->blob, &f->blob_cap, total + 1))) return st;
    ProtobufCBinaryData *bd = f->vals;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (vals[i].len) memcpy(f->blob + off, vals[i].ptr, vals[i].len);
        bd[i].data = f->blob + off;
        bd[i].len = vals[i].len;
        off += vals[i].len;
    }
    f->kind = SL_FEAT_BYTES;
    f->n = n;
    b->n++;
    return SL_OK;
}

sl_status sl_exb_serialize(sl_exb *b, uint8_t **out, size_t *len) {
    if (!b || !out || !len) return sl_err(SL_EINVAL, "sl_exb_serialize: NULL argument");
    size_t n = b->n;
    /* one scratch allocation for the protobuf-c message tree */
    size_t per = sizeof(Tensorflow__Features__FeatureEntry) + sizeof(Tensorflow__Features__FeatureEntry *) +
                 sizeof(Tensorflow__Feature) + sizeof(Tensorflow__BytesList) +
                 sizeof(Tensorflow__FloatList) + sizeof(Tensorflow__Int64List);
    uint8_t *scratch = malloc(n * per + 1);
    if (!scratch) return sl_err(SL_ENOMEM, "out of memory serializing %zu features", n);
    Tensorflow__Features__FeatureEntry **ptrs = (void *)scratch;
    Tensorflow__Features__FeatureEntry *ents = (void *)(ptrs + n);
    Tensorflow__Feature *feats = (void *)(ents + n);
    Tensorflow__BytesList *bls = (void *)(feats + n);
    Tensorflow__FloatList *fls = (void *)(bls + n);
    Tensorflow__Int64List *ils = (void *)(fls + n);
    for (size_t i = 0; i < n; i++) {
        const exb_feat *f = &b->f[i];
        tensorflow__features__feature_entry__init(&ents[i]);
        tensorflow__feature__init(&feats[i]);
        ents[i].key = f->key;
        ents[i].value = &feats[i];
        ptrs[i] = &ents[i];
        switch (f->kind) {
        case SL_FEAT_BYTES:
            tensorflow__bytes_list__init(&bls[i]);
            bls[i].n_value = f->n;
            bls[i].value = f->vals;
            feats[i].kind_case = TENSORFLOW__FEATURE__KIND_BYTES_LIST;
            feats[i].bytes_list = &bls[i];
            break;
        case SL_FEAT_FLOAT:
            tensorflow__float_list__init(&fls[i]);
            fls[i].n_value = f->n;
            fls[i].value = f->vals;
            feats[i].kind_case = TENSORFLOW__FEATURE__KIND_FLOAT_LIST;
            feats[i].float_list = &fls[i];
            break;
        case SL_FEAT_INT64:
            tensorflow__int64_list__init(&ils[i]);
            ils[i].n_value = f->n;
            ils[i].value = f->vals;
            feats[i].kind_case = TENSORFLOW__FEATURE__KIND_INT64_LIST;
            feats[i].int64_list = &ils[i];
            break;
        default: break;
        }
    }
    Tensorflow__Features fs;
    tensorflow__features__init(&fs);
    fs.n_feature = n;
    fs.feature = ptrs;
    Tensorflow__Example m;
    tensorflow__example__init(&m);
    m.features = &fs;
    size_t sz = tensorflow__example__get_packed_size(&m);
    uint8_t *buf = malloc(sz ? sz : 1);
    if (!buf) {
        free(scratch);
        return sl_err(SL_ENOMEM, "out of memory for a %zu-byte Example", sz);
    }
    size_t w = tensorflow__example__pack(&m, buf);
    free(scratch);
    if (w != sz) {
        free(buf);
        return sl_err(SL_EINTERNAL, "protobuf-c packed %zu bytes, predicted %zu", w, sz);
    }
    *out = buf;
    *len = sz;
    return SL_OK;
}
