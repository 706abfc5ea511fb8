/* libFuzzer target for formats/safetensors.c's reader (sl_st_open_mem): the 8-byte length,
 * the strict JSON header parser and the offset validation. Outside bytes may only give
 * SL_OK, SL_ECORRUPT or SL_EUNSUPPORTED, with a message naming the byte offset; a file that
 * opens must hand out every listed tensor, with exactly the bytes its shape needs, all
 * inside the input (every byte is touched so ASan checks it). Seeds:
 * tests/fuzz/seeds/safetensors/. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sl_st_file *f = NULL;
    sl_status s = sl_st_open_mem(data, size, "fuzz", &f);
    if (s != SL_OK && s != SL_ECORRUPT && s != SL_EUNSUPPORTED) {
        fprintf(stderr, "unexpected status %d: %s\n", s, sl_errmsg());
        abort();
    }
    if (s != SL_OK) {
        if (f || strncmp(sl_errmsg(), "fuzz: byte ", 11) != 0) {
            fprintf(stderr, "error without a location: %s\n", sl_errmsg());
            abort();
        }
        return 0;
    }
    volatile uint8_t sum = 0;
    for (int i = 0; i < sl_st_count(f); i++) {
        sl_tensor t;
        if (sl_st_get(f, sl_st_name(f, i), &t) != SL_OK) abort();
        size_t nb = sl_tensor_nbytes(&t);
        if (nb > size) abort();
        const uint8_t *p = t.data;
        for (size_t k = 0; k < nb; k++) sum += p[k];
        sl_tensor_release(&t);
    }
    for (int i = 0; i < sl_st_meta_count(f); i++)
        if (sl_st_meta(f, sl_st_meta_key(f, i)) == NULL) abort();
    (void)sum;
    sl_st_close(f);
    return 0;
}
