/* libFuzzer target for the stats-file reader (sl_stats_load, what `sluice-stats --from`
 * runs on a file from outside): write the input to a file, load it, and use every field the
 * tools use (the verdict, the shares, the JSON writer). The reader must refuse or accept
 * without crashing, undefined behaviour, or memory beyond its bound (16x the file). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice/stats.h"

static char path[64];

static void remove_file(void) { unlink(path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/fuzz_stats-%d.json", (int)getpid());
        atexit(remove_file);
    }
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    if (size) fwrite(data, 1, size, f);
    fclose(f);
    sl_stats *st = NULL;
    if (sl_stats_load(path, &st) == SL_OK) {
        sl_stats_verdict v;
        sl_stats_bottleneck(st, &v);
        volatile double sink = 0;
        for (int i = 0; i < st->n; i++)
            sink += sl_stats_busy(st, &st->ops[i]) + sl_stats_waiting(st, &st->ops[i]) +
                    sl_stats_blocked(st, &st->ops[i]) + strlen(st->ops[i].label) + st->ops[i].parent;
        (void)sink;
        FILE *out = fopen("/dev/null", "w");
        if (out) {
            sl_stats_fprint(st, out);
            fclose(out);
        }
        sl_stats_free(st);
    }
    return 0;
}
