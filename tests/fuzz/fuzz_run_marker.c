/* libFuzzer target for the run folder's `finished` marker (train/evaluator.c: the line the
 * chief writes after its final checkpoint and the sidecar evaluator reads): any bytes must
 * parse or be refused without reading past them, and a parsed marker must print back as
 * the same line (the writer's format) and parse again to the same values. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#include "train/evaluator.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint64_t job;
    int64_t step;
    if (!sl__run_finished_parse((const char *)data, size, &job, &step)) return 0;
    if (step < 0) __builtin_trap();
    char line[128];
    int n = snprintf(line, sizeof line, "job %016" PRIx64 " step %" PRId64 "\n", job, step);
    uint64_t job2;
    int64_t step2;
    if (n <= 0 || !sl__run_finished_parse(line, (size_t)n, &job2, &step2) || job2 != job || step2 != step)
        __builtin_trap();
    return 0;
}
