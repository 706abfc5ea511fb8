/* Element functions for the unit tests: tensors and elements to apply them to, one
 * function applied outside a pipeline, a feature spec, and a pipeline of range, a map and a
 * batch whose output bytes are gathered. */
#ifndef SLUICE_TEST_HELPER_FN_H
#define SLUICE_TEST_HELPER_FN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/example.h"
#include "sluice/fn.h"
#include "sluice/pipeline.h"

/* A new DT tensor of RANK and DIMS, holding the bytes at VALS (uninitialised when VALS is
 * NULL). Aborts when out of memory. */
sl_tensor sl_test_tensor(sl_dtype dt, int rank, const int64_t *dims, const void *vals);

/* A bytes scalar holding the LEN bytes at DATA, which lie OFFSET bytes into its own buffer
 * (the tensor's aux; the OFFSET bytes before them are 0xee). Aborts when out of memory. */
sl_tensor sl_test_bytes(const void *data, size_t len, size_t offset);

/* Initialises E with the one component NAME = T (handed over). Aborts on failure. */
void sl_test_elem1(sl_element *e, const char *name, sl_tensor t);

/* FN applied to E with SEED, as a map would apply it (no thread state). Returns its status. */
sl_status sl_test_apply(sl_fn *fn, sl_element *e, uint64_t seed);

/* E's component NAME, or NULL when it has none. */
const sl_tensor *sl_test_comp(const sl_element *e, const char *name);

/* A feature spec: NAME as DT, of RANK with dims D0, D1, D2 (the first RANK of them count). */
sl_feature_spec sl_test_spec(const char *name, sl_dtype dt, int rank, int64_t d0, int64_t d1, int64_t d2);

/* The pipeline sl_test_pipe_bytes reads: range(0, count) | map(FN, parallelism, ordered),
 * then, when batch > 0, a batch of that many. */
typedef struct {
    int count;       /* elements in the range */
    int parallelism; /* the map's */
    int batch;       /* > 0: batched by this many; 0: not batched */
    bool fused;      /* the batch fused with the map (map_batch); false: a padded batch,
                      * which is not fused */
    uint64_t seed;   /* the pipeline seed (sl_iter_opts.seed) */
} sl_test_pipe;

/* Reads P's pipeline over FN to its end and returns in *OUT (malloc'd, *LEN bytes; the
 * caller frees it, also after an error) the bytes of every element's component NAME, one
 * after the other. With LIKE, each of those components must have LIKE's dtype and rank,
 * and LIKE's dims where they are >= 0. Returns SL_OK; the status of the call that failed;
 * SL_EINTERNAL when the batch is not the op asked for (map_batch when fused, else batch), or
 * an element has no NAME or one unlike LIKE; SL_ENOMEM. */
sl_status sl_test_pipe_bytes(sl_fn *fn, const sl_test_pipe *p, const char *name, const sl_tensor *like,
                             uint8_t **out, size_t *len);

/* Asserts (test.h) that tensor T has dtype DT and shape D0 x D1. */
#define ASSERT_SHAPE2(t, dt, d0, d1)  \
    do {                              \
        ASSERT_EQ((t)->dtype, dt);    \
        ASSERT_EQ((t)->rank, 2);      \
        ASSERT_EQ((t)->dims[0], d0);  \
        ASSERT_EQ((t)->dims[1], d1);  \
    } while (0)

#endif
