/* libFuzzer target for what the launchers' cluster sources read from outside
 * (dist/cluster_env.c, dist/rendezvous.c): the first byte picks one of
 *   0: a rendezvous hello as rank 0 receives it from the network;
 *   1: rank 0's answer as another rank receives it (world 1..8, rank from the next bytes);
 *   2: an environment, one NAME=value a line, resolved as a cluster (the master address
 *      variables are dropped, so nothing here touches the network).
 * Checks what each promises (dist/cluster_priv.h, sluice/cluster.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dist/cluster_priv.h"

static void fuzz_env(char *text) {
    const char *env[65];
    int n = 0;
    for (char *line = strtok(text, "\n"); line && n < 64; line = strtok(NULL, "\n"))
        if (strncmp(line, "MASTER_ADDR=", 12) != 0 && strncmp(line, "PET_MASTER_ADDR=", 16) != 0) env[n++] = line;
    env[n] = NULL;
    sl_cluster c;
    if (sl_cluster_resolve(NULL, NULL, env, &c) == SL_OK) {
        if (c.world < 1 || c.self < 0 || c.self >= c.ntasks || c.job_id == 0 || c.rendezvous) __builtin_trap();
        for (int i = 0; i < c.world; i++)
            if (!c.ring_addrs[i] || !strchr(c.ring_addrs[i], ':')) __builtin_trap();
        sl_cluster_free(&c);
    } else if (c.ntasks != 0 || c.tasks) {
        __builtin_trap(); /* a failed resolution leaves *out zeroed */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    int mode = data[0] % 3, world = 1 + data[1] % 8, rank = data[2] % world;
    char *text = malloc(size - 2);
    if (!text) return 0;
    memcpy(text, data + 3, size - 3);
    text[size - 3] = 0;
    if (mode == 0) {
        long w, r;
        char job[40], addr[300];
        if (sl__rdzv_parse_hello(text, &w, &r, job, addr) == 0 && (!strchr(addr, ':') || strlen(job) >= 40))
            __builtin_trap();
    } else if (mode == 1) {
        static char addrs[8][256];
        sl_status st = sl__rdzv_parse_answer(text, "fuzz:1", world, rank, "127.0.0.1:1", addrs[0], sizeof addrs[0]);
        if (st == SL_OK) {
            if (strcmp(addrs[rank], "127.0.0.1:1") != 0) __builtin_trap();
            for (int i = 0; i < world; i++)
                if (!strchr(addrs[i], ':') || strlen(addrs[i]) >= 256) __builtin_trap();
        } else if (st != 1 && st != SL_EPEER) {
            __builtin_trap();
        }
    } else {
        fuzz_env(text);
    }
    free(text);
    return 0;
}
