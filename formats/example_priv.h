/* Private to formats/: what the tf.train.Example files share. example.c holds the feature
 * table and the fast path, example_pbmem.c what sl_example.pb points to, example_pb.c the
 * reference decoder, the typed getters and the encoder, example_json.c the JSON and text
 * output. The calls go one way: example_pb.c -> example.c -> example_pbmem.c, and
 * example_json.c -> example_pbmem.c. */
#ifndef SLUICE_FORMATS_EXAMPLE_PRIV_H
#define SLUICE_FORMATS_EXAMPLE_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/example.h"

/* ---- the feature table and the fast path (formats/example.c) ---- */

/* The feature for `key`: the existing one (its position kept), or a new zeroed one at the
 * end. SL_ENOMEM when ex->f cannot grow (ex unchanged). */
sl_status sl__example_slot(sl_example *ex, const uint8_t *key, size_t klen, sl_feature **out);

/* Empty the table (ex->n = 0, ex->f kept) and release what ex->pb points to. */
void sl__example_reset(sl_example *ex);

/* Decode a feature the fast path scanned (f->pb NULL) into out, room for f->count values.
 * SL_ECORRUPT when the list body holds more or fewer values than counted. */
sl_status sl__fast_floats(const sl_feature *f, float *out);
sl_status sl__fast_int64s(const sl_feature *f, int64_t *out);
sl_status sl__fast_bytes(const sl_feature *f, sl_bytes *out);

/* ---- what sl_example.pb points to (formats/example_pbmem.c) ---- */

/* ex->pb points here after the fast path saw an Example.features field, so that JSON
 * output can tell "features present but empty" from "no features field". */
extern const char sl__example_fast_present;

/* Free the protobuf-c message ex->pb holds (none for NULL or the fast path's marker) and
 * set ex->pb to NULL. */
void sl__example_pb_release(sl_example *ex);

/* 1 when the parsed Example had a features field (even an empty one), else 0. */
int sl__example_has_features(const sl_example *ex);

/* The protobuf-c allocator the reference decoder unpacks with (data: an int set to 1 when
 * an allocation fails), which keeps each allocation's size just before it. */
void *sl__pb_alloc(void *data, size_t n);
void sl__pb_free(void *data, void *p);

/* The length of a key protobuf-c unpacked with sl__pb_alloc, NUL bytes inside included. */
size_t sl__pb_key_len(const char *key);

#endif
