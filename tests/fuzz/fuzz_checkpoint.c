/* libFuzzer target for the checkpoint checks of train/checkpoint.c
 * (sl_train_check_checkpoint_mem) and the checksums of formats/safetensors.c (sl_st_verify):
 * the format and version, the CRC32Cs of the header and of every tensor, the metadata
 * numbers and their agreement, the finite-value scan. Outside bytes may only give SL_OK,
 * SL_ECORRUPT, SL_EUNSUPPORTED, or SL_EINVAL when an expectation is given, always with a
 * message naming the input; a checkpoint that passes must satisfy every documented
 * invariant (step = epoch * steps_per_epoch + batch, ...). Seeds: tests/fuzz/seeds/checkpoint/
 * (version 2 files with checksums, and version 1 files without, whose metadata mutations
 * reach the consistency checks directly). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/safetensors.h"
#include "sluice/train.h"

static void check_status(sl_status s, bool expect) {
    if (s == SL_OK || s == SL_ECORRUPT || s == SL_EUNSUPPORTED || (expect && s == SL_EINVAL)) {
        if (s != SL_OK && !strstr(sl_errmsg(), "fuzz")) {
            fprintf(stderr, "error without the file's name: %s\n", sl_errmsg());
            abort();
        }
        return;
    }
    fprintf(stderr, "unexpected status %d: %s\n", s, sl_errmsg());
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sl_st_file *f = NULL;
    if (sl_st_open_mem(data, size, "fuzz", &f) == SL_OK) {
        bool present = true;
        sl_status s = sl_st_verify(f, &present);
        check_status(s, false);
        if (s == SL_OK && !present) {
            /* no checksum key at all */
            for (int i = 0; i < sl_st_meta_count(f); i++) {
                const char *k = sl_st_meta_key(f, i);
                if (strcmp(k, SL_ST_CRC_HEADER) == 0 || strncmp(k, SL_ST_CRC_PREFIX, strlen(SL_ST_CRC_PREFIX)) == 0)
                    abort();
            }
        }
        sl_st_close(f);
    }
    static const sl_ckpt_expect wants[] = {{0, 0, 0}, {0x1234, 16, 16}};
    for (int k = 0; k < 2; k++) {
        sl_ckpt_position p = {.step = -1};
        sl_status s = sl_train_check_checkpoint_mem(data, size, "fuzz", k ? &wants[k] : NULL, &p);
        check_status(s, k > 0);
        if (s != SL_OK) {
            if (p.step != -1) abort(); /* unchanged on failure */
            continue;
        }
        if (p.step < 0 || p.epoch < 0 || p.batch < 0 || p.steps_per_epoch < 0 || p.optimizer_step > p.step) abort();
        if (p.steps_per_epoch == 0 && (p.epoch != 0 || p.step != p.batch)) abort();
        if (p.steps_per_epoch > 0 &&
            (p.batch > p.steps_per_epoch || p.step != p.epoch * p.steps_per_epoch + p.batch))
            abort();
        if (k && (p.model_hash != wants[k].model_hash ||
                  (p.batch_size && p.batch_size != wants[k].batch_size) ||
                  (p.steps_per_epoch && p.steps_per_epoch != wants[k].steps_per_epoch)))
            abort();
    }
    return 0;
}
