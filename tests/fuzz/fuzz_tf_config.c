/* libFuzzer target for the strict JSON reader and TF_CONFIG resolution (core/json.c,
 * dist/cluster.c): parse arbitrary bytes as JSON and walk the tree, then resolve a cluster
 * from them as TF_CONFIG (NUL-terminated, as the environment would hold it) and check what
 * a resolved cluster promises (sluice/cluster.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/cluster.h"

static size_t walk(const sl_json *j) {
    size_t sum = j->offset + (size_t)j->kind;
    if (j->kind == SL_JSON_STRING) sum += strlen(j->str) + j->len;
    if (j->kind == SL_JSON_ARRAY || j->kind == SL_JSON_OBJECT)
        for (size_t i = 0; i < j->len; i++) {
            sum += walk(&j->items[i]);
            if (j->kind == SL_JSON_OBJECT) sum += strlen(j->keys[i]);
        }
    return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sl_json *j;
    if (sl_json_parse((const char *)data, size, "fuzz", &j) == SL_OK) {
        volatile size_t sink = walk(j);
        (void)sink;
        sl_json_free(j);
    }
    char *env0 = malloc(size + 11);
    if (!env0) return 0;
    memcpy(env0, "TF_CONFIG=", 10);
    memcpy(env0 + 10, data, size);
    env0[size + 10] = 0;
    const char *env[] = {env0, NULL};
    sl_cluster c;
    if (sl_cluster_resolve(NULL, NULL, env, &c) == SL_OK) {
        /* what resolution promises: at least one ring member, this task among the tasks and
         * within its list, no address given twice, a job id that is never 0 and the same on
         * every resolve of the same spec */
        if (c.world < 1 || c.self < 0 || c.self >= c.ntasks || c.job_id == 0) __builtin_trap();
        for (int i = 0; i < c.ntasks; i++)
            for (int k = 0; k < i; k++)
                if (strcmp(c.tasks[i].addr, c.tasks[k].addr) == 0) __builtin_trap();
        sl_cluster again;
        if (sl_cluster_resolve(NULL, NULL, env, &again) != SL_OK || again.job_id != c.job_id) __builtin_trap();
        sl_cluster_free(&again);
        sl_cluster_free(&c);
    }
    free(env0);
    return 0;
}
