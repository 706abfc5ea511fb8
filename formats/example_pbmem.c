/* What sl_example.pb points to: the protobuf-c message the reference decoder
 * (sl_example_parse_pb, example_pb.c) unpacked, with the allocator that made it, or the
 * fast path's marker (sl__example_fast_present); releasing it, and telling whether the
 * Example had a features field. The feature table (example.c) releases through here, so
 * this file calls nothing else of the Example files.
 *
 * Workload: once per parsed record (the release), and per allocation of the reference
 * decoder. */
#include <stdlib.h>
#include <string.h>

#include "example.pb-c.h"
#include "formats/example_priv.h"

const char sl__example_fast_present = 1;

void sl__example_pb_release(sl_example *ex) {
    if (ex->pb && ex->pb != (const void *)&sl__example_fast_present) {
        int unused = 0;
        ProtobufCAllocator alloc = {sl__pb_alloc, sl__pb_free, &unused}; /* what unpacked it */
        tensorflow__example__free_unpacked(ex->pb, &alloc);
    }
    ex->pb = NULL;
}

int sl__example_has_features(const sl_example *ex) {
    if (!ex->pb) return ex->n > 0;
    if (ex->pb == (const void *)&sl__example_fast_present) return 1;
    return ((const Tensorflow__Example *)ex->pb)->features != NULL;
}

/* protobuf-c returns NULL for both bad input and a failed allocation; this allocator
 * remembers which one happened. It also keeps each allocation's size just before it:
 * protobuf-c stores a string field as a C string in an allocation of exactly its length
 * + 1 (protobuf-c.c, parse_required_member), so a key's true length, NUL bytes inside
 * included, is that size - 1 (sl__pb_key_len below). */
#define PB_HDR 16 /* keeps malloc's alignment */

void *sl__pb_alloc(void *data, size_t n) {
    uint8_t *p = n <= SIZE_MAX - PB_HDR ? malloc(n + PB_HDR) : NULL;
    if (!p) {
        if (n) *(int *)data = 1;
        return NULL;
    }
    memcpy(p, &n, sizeof n);
    return p + PB_HDR;
}

void sl__pb_free(void *data, void *p) {
    (void)data;
    if (p) free((uint8_t *)p - PB_HDR);
}

size_t sl__pb_key_len(const char *key) {
    if (!key || key == protobuf_c_empty_string) return 0;
    size_t n;
    memcpy(&n, key - PB_HDR, sizeof n);
    size_t c = strlen(key);
    return n >= 1 && n - 1 >= c ? n - 1 : c; /* never shorter than the C string */
}
