/* libFuzzer target for the GPU choice (train/device_choice.c, sluice/cuda.h): the input's
 * lines become the environment ("NAME=value" each, the launcher variables and TF_CONFIG
 * among them), its first byte the visible GPU count and the explicit device; the choice
 * must succeed or fail with a message, and a success must name a GPU that exists. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/cuda.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int visible = data[0] & 7;                              /* 0..7 GPUs */
    int explicit_dev = (data[0] & 0x80) ? (data[0] >> 3 & 15) - 2 : -1; /* -2..13 sometimes */
    char *text = malloc(size);
    if (!text) return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    const char *env[17];
    int n = 0;
    char *p = text;
    while (n < 16 && *p) {
        env[n++] = p;
        char *nl = strchr(p, '\n');
        if (!nl) break;
        *nl = 0;
        p = nl + 1;
    }
    env[n] = NULL;
    sl_device_choice c;
    sl_status s = sl_cuda_choose_device(env, explicit_dev, visible, &c);
    if (s == SL_OK) {
        if (c.device < 0 || (visible > 0 && c.device >= visible) || !c.source[0]) __builtin_trap();
        char line[128];
        if (sl_cuda_choice_describe(&c, visible, line, sizeof line) <= 0) __builtin_trap();
    } else if (c.device != -1 || !sl_errmsg()[0]) {
        __builtin_trap();
    }
    free(text);
    return 0;
}
