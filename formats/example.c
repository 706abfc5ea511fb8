/* tf.train.Example: the zero-copy fast path (sl_example_parse) and the feature table that
 * both decoders fill.
 *
 * Workload: one call per record in the pipeline's hot loop, records from ~20 bytes (a few
 * scalar features) to megabytes (an encoded image in a bytes feature), typically 2-20
 * features. The scanner walks Example -> Features -> map entries -> Feature -> list once,
 * validating everything, and records for each feature its kind, its value count and a view
 * of the winning list message's body; the typed getters decode that body later. Nothing is
 * copied and nothing is allocated except when ex->f must grow.
 *
 * The verdict (accept or reject) and the decoded values mirror protobuf-c 1.4.1, the
 * reference decoder (sl_example_parse_pb), exactly; each rule below was checked against the
 * installed libprotobuf-c with hand-made inputs:
 *   - a field tag is a varint of at most 5 bytes; the field number is its value >> 3,
 *     cut to 32 bits; a ONE-byte tag with field number 0 is rejected, a longer encoding of
 *     field number 0 is an ordinary unknown field.
 *   - wire types 3 and 4 (groups) and 6, 7 are rejected everywhere, even in unknown fields.
 *   - varints (wire type 0) have at most 10 bytes; bits past 64 are dropped.
 *   - a length prefix has at most 5 bytes and must not run past its message.
 *   - a known field with the wrong wire type is an error; unknown fields are skipped.
 *   - Example.features given twice: the map entries of both are concatenated.
 *   - a Feature's oneof given several times: the last occurrence wins, lists are NOT merged.
 *   - a map entry's value given several times: the Features are merged the protobuf-c way:
 *     a later one that has a kind replaces the kind, a later one without a kind keeps the
 *     earlier kind, and if the first two both have no kind protobuf-c fails the whole
 *     message (its merge_messages looks up oneof case 0 and gives up), so we do too.
 *     Python's protobuf accepts that last case; protobuf-c is our reference.
 *   - a map entry without key has key "", without value a Feature with no kind.
 *   - keys are not checked for UTF-8 (protobuf-c does not check). Keys are the exact bytes
 *     they are: a key with a NUL byte inside ("label\0evil") is a key of its own, as in
 *     TensorFlow's parser, and never the same as its part before the NUL ("label"). (It
 *     used to be cut at the NUL, so such a key silently replaced the real "label".)
 *     protobuf-c stores keys as C strings, so the pb path recovers each key's length from
 *     the size of the allocation protobuf-c made for it (see example_pbmem.c).
 *   - FloatList.value: packed (length a multiple of 4) or fixed32 (wire type 5);
 *     Int64List.value: packed varints (each terminated, at most 10 bytes) or varints;
 *     BytesList.value: length-delimited.
 * Duplicate keys: protobuf-c keeps every entry; sl_example keeps one feature per key,
 * with the LAST entry's value, at the position of the key's FIRST appearance. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/example_priv.h"
#include "sluice/example.h"
#include "sluice/util.h"

/* ---- feature table ------------------------------------------------------------------- */

/* Up to this many features a lookup is a linear scan; past it an open-addressing hash of
 * feature indices lives in the same allocation as ex->f (after cap features), so parsing
 * an Example with thousands of keys stays linear. */
#define LINEAR_MAX 8
#define FIRST_CAP 16

static const uint8_t empty_key[1] = {0};

static uint32_t key_hash(const uint8_t *k, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ k[i]) * 16777619u;
    return h;
}

static uint32_t *hash_slots(const sl_example *ex) { return (uint32_t *)(ex->f + ex->cap); }

static void hash_insert(sl_example *ex, size_t idx) {
    uint32_t *tab = hash_slots(ex);
    size_t mask = ex->cap * 2 - 1;
    size_t h = key_hash(ex->f[idx].key.ptr, ex->f[idx].key.len) & mask;
    while (tab[h]) h = (h + 1) & mask;
    tab[h] = (uint32_t)idx + 1;
}

static void hash_rebuild(sl_example *ex) {
    memset(hash_slots(ex), 0, ex->cap * 2 * sizeof(uint32_t));
    for (size_t i = 0; i < ex->n; i++) hash_insert(ex, i);
}

static sl_feature *find(const sl_example *ex, const uint8_t *key, size_t klen) {
    if (ex->n <= LINEAR_MAX) {
        for (size_t i = 0; i < ex->n; i++) {
            const sl_feature *f = &ex->f[i];
            if (f->key.len == klen && (klen == 0 || memcmp(f->key.ptr, key, klen) == 0))
                return (sl_feature *)f;
        }
        return NULL;
    }
    const uint32_t *tab = hash_slots(ex);
    size_t mask = ex->cap * 2 - 1;
    for (size_t h = key_hash(key, klen) & mask; tab[h]; h = (h + 1) & mask) {
        const sl_feature *f = &ex->f[tab[h] - 1];
        if (f->key.len == klen && (klen == 0 || memcmp(f->key.ptr, key, klen) == 0))
            return (sl_feature *)f;
    }
    return NULL;
}

/* The feature for `key`: the existing one (its position kept), or a new zeroed one at the
 * end. SL_ENOMEM when ex->f cannot grow (ex unchanged). */
sl_status sl__example_slot(sl_example *ex, const uint8_t *key, size_t klen, sl_feature **out) {
    sl_feature *f = find(ex, key, klen);
    if (f) {
        *out = f;
        return SL_OK;
    }
    bool grew = false;
    if (ex->n == ex->cap) {
        size_t cap = ex->cap ? ex->cap * 2 : FIRST_CAP;
        if (cap > (SIZE_MAX / 2) / (sizeof(sl_feature) + 2 * sizeof(uint32_t)) || cap > UINT32_MAX / 4)
            return sl_err(SL_ENOMEM, "Example has too many features (%zu)", ex->n);
        sl_feature *nf = realloc(ex->f, cap * sizeof(sl_feature) + cap * 2 * sizeof(uint32_t));
        if (!nf) return sl_err(SL_ENOMEM, "out of memory growing the feature table to %zu", cap);
        ex->f = nf;
        ex->cap = cap;
        grew = true;
    }
    f = &ex->f[ex->n++];
    memset(f, 0, sizeof *f);
    f->key.ptr = klen ? key : empty_key;
    f->key.len = klen;
    if (ex->n > LINEAR_MAX) {
        if (grew || ex->n == LINEAR_MAX + 1) hash_rebuild(ex);
        else hash_insert(ex, ex->n - 1);
    }
    *out = f;
    return SL_OK;
}

void sl__example_reset(sl_example *ex) {
    sl__example_pb_release(ex);
    ex->n = 0;
}

void sl_example_init(sl_example *ex) { memset(ex, 0, sizeof *ex); }

void sl_example_free(sl_example *ex) {
    if (!ex) return;
    sl__example_pb_release(ex);
    free(ex->f);
    memset(ex, 0, sizeof *ex);
}

const sl_feature *sl_example_get(const sl_example *ex, const char *key) {
    if (!ex || !key) return NULL;
    return find(ex, (const uint8_t *)key, strlen(key));
}

const sl_feature *sl_example_get_n(const sl_example *ex, const void *key, size_t klen) {
    if (!ex || (!key && klen)) return NULL;
    return find(ex, klen ? key : empty_key, klen);
}

const char *sl_feat_kind_name(sl_feat_kind k) {
    switch (k) {
    case SL_FEAT_NONE: return "none";
    case SL_FEAT_BYTES: return "bytes";
    case SL_FEAT_FLOAT: return "float";
    case SL_FEAT_INT64: return "int64";
    }
    return "?";
}

/* ---- wire-format primitives ---------------------------------------------------------- */

typedef struct scan {
    const uint8_t *base; /* start of the whole message: error offsets are relative to it */
} scan;

/* Records "byte N: what" and evaluates to SL_ECORRUPT as a constant the compiler can see,
 * so callers' "if (st) return st" paths do not look like they fall through. */
static void corrupt_msg(const scan *s, const uint8_t *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), cold, noinline));
static void corrupt_msg(const scan *s, const uint8_t *at, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sl_err_at(SL_ECORRUPT, NULL, (int64_t)(at - s->base), "%s", msg);
}
#define corrupt(...) (corrupt_msg(__VA_ARGS__), SL_ECORRUPT)

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

static inline sl_status read_tag(const scan *s, const uint8_t **pp, const uint8_t *end,
                                 uint32_t *field, unsigned *wt) {
    const uint8_t *p = *pp;
    uint32_t b = p[0];
    *wt = b & 7;
    if (b < 0x80) {
        if (b < 8) return corrupt(s, p, "field number 0");
        *field = b >> 3;
        *pp = p + 1;
        return SL_OK;
    }
    uint32_t v = (b & 0x7f) >> 3;
    unsigned shift = 4;
    for (size_t i = 1; i < 5; i++, shift += 7) {
        if (p + i >= end) return corrupt(s, p, "truncated field tag");
        b = p[i];
        v |= (b & 0x7f) << shift;
        if (b < 0x80) {
            *field = v;
            *pp = p + i + 1;
            return SL_OK;
        }
    }
    return corrupt(s, p, "field tag longer than 5 bytes");
}

static inline sl_status read_varint(const scan *s, const uint8_t **pp, const uint8_t *end,
                                    uint64_t *out) {
    const uint8_t *p = *pp;
    if (p < end && p[0] < 0x80) {
        *out = p[0];
        *pp = p + 1;
        return SL_OK;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < 10; i++) {
        if (p + i >= end) return corrupt(s, p, "truncated varint");
        uint64_t b = p[i];
        v |= (b & 0x7f) << (7 * i);
        if (b < 0x80) {
            *out = v;
            *pp = p + i + 1;
            return SL_OK;
        }
    }
    return corrupt(s, p, "varint longer than 10 bytes");
}

/* A length prefix and the bytes it covers: [*body, *body + *n) within [*pp, end). */
static inline sl_status read_len(const scan *s, const uint8_t **pp, const uint8_t *end,
                                 const uint8_t **body, size_t *n) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    size_t i = 0;
    for (;; i++) {
        if (i == 5) return corrupt(s, p, "length prefix longer than 5 bytes");
        if (p + i >= end) return corrupt(s, p, "truncated length prefix");
        uint64_t b = p[i];
        v |= (b & 0x7f) << (7 * i);
        if (b < 0x80) break;
    }
    const uint8_t *q = p + i + 1;
    if (v > (uint64_t)(end - q))
        return corrupt(s, p, "length %llu runs past the end of its message (%zu bytes left)",
                       (unsigned long long)v, (size_t)(end - q));
    *body = q;
    *n = (size_t)v;
    *pp = q + v;
    return SL_OK;
}

/* One field of a message: next_tag fills its tag, read_body (wire type 2 only) its bytes. */
typedef struct field {
    const uint8_t *at;   /* the tag's first byte: errors about the field point here */
    uint32_t num;        /* the field number */
    unsigned wt;         /* the wire type */
    const uint8_t *body; /* read_body: the value's bytes, [body, body + len) */
    size_t len;
} field;

/* The tag of the field at *pp; *pp moves past it, to the value. */
static inline sl_status next_tag(const scan *s, const uint8_t **pp, const uint8_t *end, field *f) {
    f->at = *pp;
    return read_tag(s, pp, end, &f->num, &f->wt);
}

/* The length prefix of a length-delimited field's value and the bytes it covers; *pp moves
 * past them. */
static inline sl_status read_body(const scan *s, const uint8_t **pp, const uint8_t *end, field *f) {
    f->body = NULL;
    f->len = 0;
    return read_len(s, pp, end, &f->body, &f->len);
}

static sl_status skip_field(const scan *s, const uint8_t **pp, const uint8_t *end,
                            const uint8_t *tag_at, unsigned wt) {
    uint64_t v;
    const uint8_t *b;
    size_t n = 0;
    switch (wt) {
    case WT_VARINT: return read_varint(s, pp, end, &v);
    case WT_I64:
        if (end - *pp < 8) return corrupt(s, *pp, "truncated fixed64 (%zu bytes left)", (size_t)(end - *pp));
        *pp += 8;
        return SL_OK;
    case WT_LEN: return read_len(s, pp, end, &b, &n);
    case WT_I32:
        if (end - *pp < 4) return corrupt(s, *pp, "truncated fixed32 (%zu bytes left)", (size_t)(end - *pp));
        *pp += 4;
        return SL_OK;
    case 3:
    case 4: return corrupt(s, tag_at, "group (wire type %u) is not supported", wt);
    default: return corrupt(s, tag_at, "invalid wire type %u", wt);
    }
}

static sl_status wrong_wt(const scan *s, const uint8_t *tag_at, const char *what, unsigned wt,
                          unsigned want) {
    return corrupt(s, tag_at, "%s has wire type %u, expected %u", what, wt, want);
}

/* ---- the scanner: validates and counts ---------------------------------------------- */

/* The value fields of a list (field 1, tag f) are counted by one of these, into *c. */
static inline sl_status count_bytes(const scan *s, field *f, const uint8_t **pp, const uint8_t *end,
                                    size_t *c) {
    if (f->wt != WT_LEN) return wrong_wt(s, f->at, "BytesList.value", f->wt, WT_LEN);
    sl_status st = read_body(s, pp, end, f);
    if (st) return st;
    (*c)++;
    return SL_OK;
}

static inline sl_status count_floats(const scan *s, field *f, const uint8_t **pp, const uint8_t *end,
                                     size_t *c) {
    sl_status st;
    if (f->wt == WT_LEN) {
        if ((st = read_body(s, pp, end, f))) return st;
        if (f->len % 4) return corrupt(s, f->at, "packed FloatList of %zu bytes, not a multiple of 4", f->len);
        *c += f->len / 4;
    } else if (f->wt == WT_I32) {
        if (end - *pp < 4) return corrupt(s, *pp, "truncated fixed32 (%zu bytes left)", (size_t)(end - *pp));
        *pp += 4;
        (*c)++;
    } else {
        return corrupt(s, f->at, "FloatList.value has wire type %u, expected 2 or 5", f->wt);
    }
    return SL_OK;
}

/* Packed varints: one value per byte without the continuation bit; a run of 10
 * continuation bytes (an 11-byte varint) or a trailing unterminated one is corrupt. */
static sl_status count_packed_varints(const scan *s, const uint8_t *p, const uint8_t *end, size_t *count) {
    size_t c = 0;
    unsigned run = 0;
    for (const uint8_t *q = p; q < end; q++) {
        if (*q & 0x80) {
            if (++run == 10) return corrupt(s, q - 9, "varint longer than 10 bytes in packed Int64List");
        } else {
            run = 0;
            c++;
        }
    }
    if (run) return corrupt(s, end - run, "truncated varint at the end of packed Int64List");
    *count += c;
    return SL_OK;
}

static inline sl_status count_int64s(const scan *s, field *f, const uint8_t **pp, const uint8_t *end,
                                     size_t *c) {
    uint64_t v;
    sl_status st;
    if (f->wt == WT_LEN) {
        if ((st = read_body(s, pp, end, f))) return st;
        return count_packed_varints(s, f->body, f->body + f->len, c);
    }
    if (f->wt != WT_VARINT)
        return corrupt(s, f->at, "Int64List.value has wire type %u, expected 2 or 0", f->wt);
    if ((st = read_varint(s, pp, end, &v))) return st;
    (*c)++;
    return SL_OK;
}

/* A BytesList, FloatList or Int64List (kind) in [p, end): validated, its values counted.
 * Forced inline, with a constant kind at each call, so each kind gets a loop of its own, as
 * three written out would be: this runs for every list of every record. */
static inline __attribute__((always_inline)) sl_status scan_list(const scan *s, sl_feat_kind kind,
                                                                 const uint8_t *p, const uint8_t *end,
                                                                 size_t *count) {
    size_t c = 0;
    sl_status st;
    while (p < end) {
        field f;
        if ((st = next_tag(s, &p, end, &f))) return st;
        if (f.num == 1) {
            if (kind == SL_FEAT_BYTES) st = count_bytes(s, &f, &p, end, &c);
            else if (kind == SL_FEAT_FLOAT) st = count_floats(s, &f, &p, end, &c);
            else st = count_int64s(s, &f, &p, end, &c);
            if (st) return st;
        } else if ((st = skip_field(s, &p, end, f.at, f.wt))) {
            return st;
        }
    }
    *count = c;
    return SL_OK;
}

typedef struct feat_state {
    sl_feat_kind kind;
    const uint8_t *body;
    size_t body_len;
    size_t count;
} feat_state;

static const char *const kind_field_names[] = {"", "Feature.bytes_list", "Feature.float_list",
                                               "Feature.int64_list"};

/* One Feature message: the last oneof occurrence wins (no merging of lists). */
static sl_status scan_feature(const scan *s, const uint8_t *p, const uint8_t *end, feat_state *fs) {
    sl_status st;
    fs->kind = SL_FEAT_NONE;
    while (p < end) {
        field f;
        size_t c = 0;
        if ((st = next_tag(s, &p, end, &f))) return st;
        if (f.num < 1 || f.num > 3) {
            if ((st = skip_field(s, &p, end, f.at, f.wt))) return st;
            continue;
        }
        if (f.wt != WT_LEN) return wrong_wt(s, f.at, kind_field_names[f.num], f.wt, WT_LEN);
        if ((st = read_body(s, &p, end, &f))) return st;
        const uint8_t *b = f.body, *e = f.body + f.len;
        if (f.num == 1) st = scan_list(s, SL_FEAT_BYTES, b, e, &c);
        else if (f.num == 2) st = scan_list(s, SL_FEAT_FLOAT, b, e, &c);
        else st = scan_list(s, SL_FEAT_INT64, b, e, &c);
        if (st) return st;
        fs->kind = (sl_feat_kind)f.num;
        fs->body = b;
        fs->body_len = f.len;
        fs->count = c;
    }
    return SL_OK;
}

static sl_status scan_entry(const scan *s, sl_example *ex, const uint8_t *p, const uint8_t *end) {
    const uint8_t *key = empty_key;
    size_t klen = 0;
    feat_state acc = {SL_FEAT_NONE, NULL, 0, 0};
    unsigned nval = 0;
    bool first_empty = false;
    sl_status st;
    while (p < end) {
        field f;
        if ((st = next_tag(s, &p, end, &f))) return st;
        if (f.num == 1) {
            if (f.wt != WT_LEN) return wrong_wt(s, f.at, "map entry key", f.wt, WT_LEN);
            if ((st = read_len(s, &p, end, &key, &klen))) return st;
        } else if (f.num == 2) {
            feat_state fs;
            if (f.wt != WT_LEN) return wrong_wt(s, f.at, "map entry value", f.wt, WT_LEN);
            if ((st = read_body(s, &p, end, &f))) return st;
            if ((st = scan_feature(s, f.body, f.body + f.len, &fs))) return st;
            nval++;
            if (fs.kind != SL_FEAT_NONE) {
                acc = fs;
            } else if (nval == 1) {
                first_empty = true;
            } else if (nval == 2 && first_empty) {
                return corrupt(s, f.at, "map entry holds two Features without a kind (protobuf-c, "
                                        "the reference decoder, cannot merge them)");
            }
        } else if ((st = skip_field(s, &p, end, f.at, f.wt))) {
            return st;
        }
    }
    sl_feature *f;
    if ((st = sl__example_slot(ex, key, klen, &f))) return st;
    f->kind = acc.kind;
    f->count = acc.kind == SL_FEAT_NONE ? 0 : acc.count;
    f->body = acc.body;
    f->body_len = acc.body_len;
    f->pb = NULL;
    return SL_OK;
}

static sl_status scan_features(const scan *s, sl_example *ex, const uint8_t *p, const uint8_t *end) {
    sl_status st;
    while (p < end) {
        field f;
        if ((st = next_tag(s, &p, end, &f))) return st;
        if (f.num == 1) {
            if (f.wt != WT_LEN) return wrong_wt(s, f.at, "Features.feature", f.wt, WT_LEN);
            if ((st = read_body(s, &p, end, &f))) return st;
            if ((st = scan_entry(s, ex, f.body, f.body + f.len))) return st;
        } else if ((st = skip_field(s, &p, end, f.at, f.wt))) {
            return st;
        }
    }
    return SL_OK;
}

sl_status sl_example_parse(sl_example *ex, const uint8_t *data, size_t len) {
    sl__example_reset(ex);
    if (!data && len) return sl_err(SL_EINVAL, "sl_example_parse: NULL data with length %zu", len);
    scan s = {data};
    const uint8_t *p = data, *end = data + len;
    bool present = false;
    sl_status st = SL_OK;
    while (p < end) {
        field f;
        if ((st = next_tag(&s, &p, end, &f))) goto fail;
        if (f.num == 1) {
            if (f.wt != WT_LEN) {
                st = wrong_wt(&s, f.at, "Example.features", f.wt, WT_LEN);
                goto fail;
            }
            if ((st = read_body(&s, &p, end, &f))) goto fail;
            if ((st = scan_features(&s, ex, f.body, f.body + f.len))) goto fail;
            present = true;
        } else if ((st = skip_field(&s, &p, end, f.at, f.wt))) {
            goto fail;
        }
    }
    ex->pb = present ? (void *)&sl__example_fast_present : NULL;
    return SL_OK;
fail:
    ex->n = 0;
    ex->pb = NULL;
    if (st == SL_ECORRUPT)
        sl_err_hint("the record is not a serialized tf.train.Example, or it is damaged");
    return st;
}

/* ---- fast-path list decoding (bodies were validated by the scanner) ------------------ */

static sl_status overflow(const scan *s, const uint8_t *at) {
    return corrupt(s, at, "list holds more values than counted");
}

/* The value fields of a list (field 1, tag f) go to one of these, *i values stored so far;
 * another wire type (never in a body the scanner accepted) is skipped like an unknown field. */
static inline sl_status put_floats(const scan *s, field *f, const uint8_t **pp, const uint8_t *end,
                                   float *out, size_t *i, size_t cap) {
    sl_status st;
    if (f->wt == WT_LEN) {
        if ((st = read_body(s, pp, end, f))) return st;
        const uint8_t *b = f->body;
        size_t n = f->len / 4;
        if (n > cap - *i) return overflow(s, f->at);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        for (size_t k = 0; k < n; k++) {
            uint32_t u = sl_load_le32(b + 4 * k);
            memcpy(&out[*i + k], &u, 4);
        }
#else
        if (n) memcpy(out + *i, b, n * 4);
#endif
        *i += n;
        return SL_OK;
    }
    if (f->wt != WT_I32) return skip_field(s, pp, end, f->at, f->wt);
    if (end - *pp < 4) return corrupt(s, *pp, "truncated fixed32");
    if (*i == cap) return overflow(s, f->at);
    uint32_t u = sl_load_le32(*pp);
    memcpy(&out[(*i)++], &u, 4);
    *pp += 4;
    return SL_OK;
}

static inline sl_status put_int64s(const scan *s, field *f, const uint8_t **pp, const uint8_t *end,
                                   int64_t *out, size_t *i, size_t cap) {
    sl_status st;
    uint64_t v;
    if (f->wt == WT_LEN) {
        if ((st = read_body(s, pp, end, f))) return st;
        const uint8_t *q = f->body, *qe = f->body + f->len;
        while (q < qe) {
            if (*i == cap) return overflow(s, q);
            if ((st = read_varint(s, &q, qe, &v))) return st;
            out[(*i)++] = (int64_t)v;
        }
        return SL_OK;
    }
    if (f->wt != WT_VARINT) return skip_field(s, pp, end, f->at, f->wt);
    if (*i == cap) return overflow(s, f->at);
    if ((st = read_varint(s, pp, end, &v))) return st;
    out[(*i)++] = (int64_t)v;
    return SL_OK;
}

static inline sl_status put_bytes(const scan *s, field *f, const uint8_t **pp, const uint8_t *end,
                                  sl_bytes *out, size_t *i, size_t cap) {
    if (f->wt != WT_LEN) return skip_field(s, pp, end, f->at, f->wt);
    sl_status st = read_body(s, pp, end, f);
    if (st) return st;
    if (*i == cap) return overflow(s, f->at);
    out[*i].ptr = f->body;
    out[(*i)++].len = f->len;
    return SL_OK;
}

/* The list body of fe, its values decoded as `kind` into out (room for fe->count); forced
 * inline like scan_list, so each of the three callers below has its own loop. */
static inline __attribute__((always_inline)) sl_status fast_list(const sl_feature *fe, sl_feat_kind kind,
                                                                 void *out) {
    scan s = {fe->body};
    const uint8_t *p = fe->body, *end = fe->body + fe->body_len;
    size_t i = 0, cap = fe->count;
    sl_status st;
    while (p < end) {
        field f;
        if ((st = next_tag(&s, &p, end, &f))) return st;
        if (f.num != 1) st = skip_field(&s, &p, end, f.at, f.wt);
        else if (kind == SL_FEAT_FLOAT) st = put_floats(&s, &f, &p, end, out, &i, cap);
        else if (kind == SL_FEAT_INT64) st = put_int64s(&s, &f, &p, end, out, &i, cap);
        else st = put_bytes(&s, &f, &p, end, out, &i, cap);
        if (st) return st;
    }
    return i == cap ? SL_OK : corrupt(&s, end, "list holds fewer values than counted");
}

sl_status sl__fast_floats(const sl_feature *f, float *out) { return fast_list(f, SL_FEAT_FLOAT, out); }
sl_status sl__fast_int64s(const sl_feature *f, int64_t *out) { return fast_list(f, SL_FEAT_INT64, out); }
sl_status sl__fast_bytes(const sl_feature *f, sl_bytes *out) { return fast_list(f, SL_FEAT_BYTES, out); }
