/* torchvision reference outputs for the image-function tests: the records that
 * tests/data/torchvision/gen_refs.py writes into refs.bin (its docstring gives the format),
 * read with every length checked, and the comparison of an output with a record's. */
#ifndef SLUICE_TEST_HELPER_TVREF_H
#define SLUICE_TEST_HELPER_TVREF_H

#include <stdbool.h>
#include <stdint.h>

#include "sluice/tensor.h"

#define SL_TVREF_MAX_PARAMS 32

typedef struct sl_tvref {
    char op[64];                       /* the torchvision op's name in gen_refs.py */
    int nparams;
    float params[SL_TVREF_MAX_PARAMS];
    int64_t in_dims[3], out_dims[3];   /* h, w, c */
    const uint8_t *in, *out;           /* HWC uint8, inside the loaded file */
} sl_tvref;

typedef struct sl_tvrefs {
    uint8_t *file; /* the whole file */
    int n;
    sl_tvref *r;
} sl_tvrefs;

/* The folder of the references: argv[1] when argc > 1, else def (the tests pass
 * SL_TEST_DATA "/torchvision"). */
const char *sl_tvref_dir(int argc, char **argv, const char *def);

/* Load DIR/refs.bin into *refs. Returns 0, or -1 with a message printed (missing file, bad
 * magic, version, size or trailer, a record running past the end, too many parameters). */
int sl_tvref_load(const char *dir, sl_tvrefs *refs);
void sl_tvref_free(sl_tvrefs *refs);

/* A uint8 [h, w, c] tensor holding record r's input. Aborts when out of memory. */
sl_tensor sl_tvref_input(const sl_tvref *r);

/* The largest |out - r's output| over the pixels, or 256 when out is not a uint8 tensor of
 * r's output shape (rank 3, or rank 2 for one channel). */
int sl_tvref_maxdiff(const sl_tvref *r, const sl_tensor *out);

#endif
