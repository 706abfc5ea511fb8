/* libFuzzer target for the snapshot / save folder reader (sl_ds_load, the reader that
 * snapshot replays through; format in pipeline/snapfile.h). The input is a folder packed
 * as: u32 little-endian manifest length L, L bytes of manifest ("done"), then the bytes of
 * shard-00000.sls. It is read twice: as it is, and with the manifest's size and checksum
 * fields made right and its first shard's size set to the shard's length, so what lies
 * behind a good checksum (counts, spec, chunks) is what gets fuzzed. Every outcome must be
 * SL_OK/SL_END or SL_ECORRUPT / SL_ENOTFOUND / SL_ENOMEM / SL_EIO, never a crash, and an
 * accepted stream gives at most the manifest's count of elements. Seeds:
 * tests/fuzz/seeds/snapshot/ (one saved range of 3 elements). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/crc32c.h"
#include "sluice/pipeline.h"
#include "sluice/util.h"

static char dir[64];

static void check(int cond) {
    if (!cond) abort();
}

static void put(const char *name, const uint8_t *p, size_t n) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

static void read_folder(void) {
    sl_dataset *ds;
    sl_status s = sl_ds_load(dir, &ds);
    if (s) {
        check(s == SL_ECORRUPT || s == SL_ENOTFOUND || s == SL_ENOMEM || s == SL_EIO);
        check(ds == NULL);
        return;
    }
    int64_t card = sl_dataset_cardinality(ds);
    sl_iter *it;
    if ((s = sl_iter_create(ds, NULL, &it)) == SL_OK) {
        sl_element e;
        sl_element_init(&e);
        int64_t n = 0;
        while ((s = sl_iter_next(it, &e)) == SL_OK) {
            n++;
            sl_element_clear(&e);
        }
        check(s == SL_END || s == SL_ECORRUPT || s == SL_ENOMEM || s == SL_EIO);
        check(n <= card);
        if (s == SL_END) check(n == card);
        sl_iter_close(it);
    } else {
        check(s == SL_ECORRUPT || s == SL_ENOMEM || s == SL_EIO || s == SL_EINVAL);
    }
    sl_dataset_unref(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz-snapshot-%ld", (long)getpid());
        mkdir(dir, 0777);
    }
    if (size < 4) return 0;
    uint32_t ml = sl_load_le32(data);
    if (ml > size - 4) ml = (uint32_t)(size - 4);
    const uint8_t *man = data + 4, *shard = man + ml;
    size_t sl = size - 4 - ml;
    put("done", man, ml);
    put("shard-00000.sls", shard, sl);
    read_folder();
    if (ml >= 64) { /* the fixed fields made right */
        uint8_t *m = malloc(ml);
        if (!m) return 0;
        memcpy(m, man, ml);
        sl_store_le32(m + 12, ml);
        uint32_t fl = sl_load_le32(m + 32);
        size_t at = 40 + ((fl + 7u) & ~7u);
        if (sl_load_le32(m + 24) >= 1 && fl < ml && at + 16 <= ml - 8) sl_store_le64(m + at + 8, sl);
        sl_store_le32(m + ml - 8, sl_crc32c(0, m, ml - 8));
        put("done", m, ml);
        free(m);
        read_folder();
    }
    return 0;
}
