/* libFuzzer target for pipeline blocks: parse arbitrary config text, build every pipeline
 * in it (file sources resolve under an empty directory, so they fail cleanly), and pull a
 * few elements from those that build — exercising every op's and function's argument
 * checks and error paths, then a few from a later element (sl_iter_create_at). Pipelines whose work is unbounded by design are built but not
 * iterated: `range 0 1G` behind a function that fails on every element and ignore_errors
 * skips a billion errors to find one element, as tf.data would, and `repeat` forever over
 * failing elements never ends. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"
#include "sluice/from_config.h"
#include "sluice/log.h"

/* Is the work of pulling a few elements bounded? No huge range, no endless repeat. */
static int bounded(const sl_dataset *ds) {
    const char *op = sl_dataset_op(ds);
    int64_t card = sl_dataset_cardinality(ds);
    if (strcmp(op, "range") == 0 && (card < 0 || card > 100000)) return 0;
    if (strcmp(op, "repeat") == 0 && card == SL_INFINITE) return 0;
    for (int i = 0; i < ds->ninputs; i++)
        if (!bounded(ds->inputs[i])) return 0;
    return 1;
}

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
        if (bounded(ds) && sl_iter_create(ds, NULL, &it) == SL_OK) {
            sl_element e;
            sl_element_init(&e);
            for (int k = 0; k < 4; k++) {
                sl_status s = sl_iter_next(it, &e);
                sl_element_clear(&e);
                if (s == SL_END) break;
            }
            sl_iter_close(it);
            /* and from a later element: seeking ops, or a bounded replay */
            if (sl_iter_create_at(ds, NULL, (int64_t)(size % 37), &it) == SL_OK) {
                for (int k = 0; k < 2; k++) {
                    sl_status s = sl_iter_next(it, &e);
                    sl_element_clear(&e);
                    if (s == SL_END) break;
                }
                sl_iter_close(it);
            }
        }
        sl_dataset_unref(ds);
    }
    sl_cfg_free(cfg);
    return 0;
}
