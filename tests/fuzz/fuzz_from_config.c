/* libFuzzer target for pipeline blocks: parse arbitrary config text, build every pipeline
 * in it (file sources resolve under an empty directory, so they fail cleanly), and pull a
 * few elements from those that build — exercising every op's and function's argument
 * checks and error paths. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/from_config.h"
#include "sluice/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sl_log_set_level(-1); /* ignore_errors warnings would flood the output */
    sl_cfg *cfg;
    if (sl_cfg_parse((const char *)data, size, "fuzz.sl", &cfg) != SL_OK) return 0;
    const char *names[8];
    int n = sl_pipeline_names(cfg, names, 8);
    if (n > 8) n = 8;
    sl_pipeline_env env = sl_pipeline_env_default();
    env.base_dir = "/nonexistent-sluice-fuzz";
    for (int i = 0; i < n; i++) {
        sl_dataset *ds;
        if (sl_pipeline_from_config(cfg, names[i], &env, &ds) != SL_OK) continue;
        sl_iter *it;
        if (sl_iter_create(ds, NULL, &it) == SL_OK) {
            sl_element e;
            sl_element_init(&e);
            for (int k = 0; k < 4; k++) {
                sl_status s = sl_iter_next(it, &e);
                sl_element_clear(&e);
                if (s == SL_END) break;
            }
            sl_iter_close(it);
        }
        sl_dataset_unref(ds);
    }
    sl_cfg_free(cfg);
    return 0;
}
