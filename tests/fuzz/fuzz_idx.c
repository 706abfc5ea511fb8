/* libFuzzer target for formats/idx.c (sl_idx_read_mem), plain and gzipped input. Outside
 * bytes may only produce SL_OK, SL_ECORRUPT or SL_EUNSUPPORTED (rank > 8); a successful read
 * must give a tensor whose size matches its dims. Seeds: tests/fuzz/seeds/idx/. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "sluice/idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sl_tensor t = SL_TENSOR_EMPTY;
    sl_status s = sl_idx_read_mem(data, size, "fuzz", &t);
    if (s != SL_OK && s != SL_ECORRUPT && s != SL_EUNSUPPORTED) {
        fprintf(stderr, "unexpected status %d: %s\n", s, sl_errmsg());
        abort();
    }
    if (s == SL_OK) {
        if (t.rank < 1 || t.rank > SL_MAX_RANK || (sl_tensor_nbytes(&t) && !t.data))
            abort();
        /* touch every byte so ASan checks the buffer really has them */
        volatile uint8_t sum = 0;
        const uint8_t *p = t.data;
        for (size_t i = 0; i < sl_tensor_nbytes(&t); i++)
            sum += p[i];
        (void)sum;
    } else if (t.buf || t.dtype != SL_DT_INVALID) {
        abort();
    }
    sl_tensor_release(&t);
    return 0;
}
