/* tf.train.Example: decode, encode, and print.
 *
 * Two decoders that must agree on every input:
 *   - sl_example_parse: a zero-copy wire-format scanner (the fast path the pipeline uses).
 *     Keys and values are views into the caller's bytes; nothing is copied until a typed
 *     getter copies values out.
 *   - sl_example_parse_pb: through protobuf-c code generated from formats/example.proto
 *     and formats/feature.proto (same field numbers as TensorFlow's). The reference.
 * Both follow protobuf semantics: unknown fields are skipped, packed and unpacked repeated
 * scalars are both accepted, and for a key that appears twice in the map the last entry
 * wins; a Feature whose oneof appears several times keeps the last one.
 *
 * Encoding goes through protobuf-c (sl_exb_*), so what Sluice writes is what protobuf
 * writes. */
#ifndef SLUICE_EXAMPLE_H
#define SLUICE_EXAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/status.h"
#include "sluice/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sl_feat_kind {
    SL_FEAT_NONE = 0,  /* a Feature with no list set */
    SL_FEAT_BYTES = 1,
    SL_FEAT_FLOAT = 2,
    SL_FEAT_INT64 = 3,
} sl_feat_kind;

/* "none", "bytes", "float", "int64". */
const char *sl_feat_kind_name(sl_feat_kind k);

typedef struct sl_feature {
    sl_bytes key;          /* UTF-8 key, a view (not NUL-terminated) */
    sl_feat_kind kind;
    size_t count;          /* number of values in the list */
    /* private to the decoder that filled it: */
    const uint8_t *body;   /* fast path: encoded list message body; pb path: unused */
    size_t body_len;
    const void *pb;        /* pb path: the protobuf-c Feature */
} sl_feature;

typedef struct sl_example {
    size_t n;              /* distinct features, in order of first appearance */
    sl_feature *f;
    size_t cap;            /* private */
    void *pb;              /* private: protobuf-c message when parsed by sl_example_parse_pb */
} sl_example;

/* Make *ex empty; call once before first use. */
void sl_example_init(sl_example *ex);

/* Free what *ex holds and leave it empty (reusable). */
void sl_example_free(sl_example *ex);

/* Parse `len` bytes of a serialized Example into *ex (previous contents dropped). The
 * bytes are borrowed and must outlive every view taken from *ex. Returns SL_OK or
 * SL_ECORRUPT with the byte offset within the message in sl_errmsg (e.g. "byte 17:
 * truncated varint"); on failure *ex is left empty. SL_ENOMEM possible. */
sl_status sl_example_parse(sl_example *ex, const uint8_t *data, size_t len);

/* The same through protobuf-c. Views point into protobuf-c's unpacked message, owned by
 * *ex until the next parse or free. */
sl_status sl_example_parse_pb(sl_example *ex, const uint8_t *data, size_t len);

/* The feature named `key` (NUL-terminated), or NULL. Keys compare as exact bytes: a key
 * that holds a NUL byte ("label\0evil", 10 bytes) is never found by its part before the
 * NUL ("label"); look it up with sl_example_get_n. */
const sl_feature *sl_example_get(const sl_example *ex, const char *key);

/* The feature whose key is exactly the `klen` bytes at `key`, or NULL. */
const sl_feature *sl_example_get_n(const sl_example *ex, const void *key, size_t klen);

/* Copy all `f->count` values out. `cap` is the room at out, in values. SL_EINVAL if the
 * feature is of another kind, SL_ERANGE if cap < count (nothing written), SL_ECORRUPT for a
 * malformed list (possible only on the fast path, which decodes lazily). */
sl_status sl_feature_floats(const sl_feature *f, float *out, size_t cap);
sl_status sl_feature_int64s(const sl_feature *f, int64_t *out, size_t cap);
/* Byte-string views, valid as long as the parsed bytes (fast path) or *ex (pb path). */
sl_status sl_feature_bytes(const sl_feature *f, sl_bytes *out, size_t cap);

/* ---- encoding ------------------------------------------------------------------- */

typedef struct sl_exb sl_exb;

sl_status sl_exb_new(sl_exb **out);
void sl_exb_free(sl_exb *b);  /* NULL is a no-op */
/* Forget all features; keeps allocations for reuse. */
void sl_exb_reset(sl_exb *b);
/* Add a feature; key and values are copied. SL_EINVAL for an empty key or a key added
 * twice. */
sl_status sl_exb_bytes(sl_exb *b, const char *key, const sl_bytes *vals, size_t n);
sl_status sl_exb_floats(sl_exb *b, const char *key, const float *vals, size_t n);
sl_status sl_exb_int64s(sl_exb *b, const char *key, const int64_t *vals, size_t n);
/* Serialize (features in the order added). *out is malloc'd, the caller frees it. */
sl_status sl_exb_serialize(sl_exb *b, uint8_t **out, size_t *len);

/* ---- printing ------------------------------------------------------------------- */

/* The Example as protobuf's canonical JSON mapping, on one line, as Python's
 * google.protobuf.json_format.MessageToJson(msg, indent=None) prints it:
 *   {"features": {"feature": {"label": {"int64List": {"value": ["3"]}}}}}
 * (int64 as strings, bytes as base64, floats shortest round-trip, NaN/Infinity as
 * strings). Features are printed in the order of *ex. *out is malloc'd, NUL-terminated. */
sl_status sl_example_to_json(const sl_example *ex, char **out, size_t *len);

/* A short human summary on one line: `label=int64[1]{3} image=bytes[1]{784 B}`, at most
 * `max_values` leading values per feature. *out malloc'd. */
sl_status sl_example_to_text(const sl_example *ex, int max_values, char **out, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
