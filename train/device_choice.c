/* Which GPU a replica uses (sluice/cuda.h: sl_cuda_choose_device): local rank % visible
 * GPUs, the local rank from the launcher's variables, an explicit device first. Pure: it
 * reads only the envp it is given. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/cluster.h"
#include "sluice/cuda.h"
#include "sluice/util.h"

/* A decimal 0..65535, nothing else (no sign, no spaces, no trailing text). */
static int parse_rank(const char *v) {
    if (!*v || strlen(v) > 5) return -1;
    int r = 0;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        r = r * 10 + (*p - '0');
    }
    return r <= 65535 ? r : -1;
}

/* "host:port" -> length of the host part ("[::1]:80" keeps the brackets). */
static size_t host_len(const char *addr) {
    const char *c = strrchr(addr, ':');
    return c ? (size_t)(c - addr) : strlen(addr);
}

/* The local rank from TF_CONFIG: ring members (chief, then workers) before this task on the
 * same host. 1: found (*rank set); 0: no usable task / cluster; <0: a JSON error. */
static int tf_config_rank(const char *text, int *rank) {
    sl_json *root = NULL;
    sl_status s = sl_json_parse(text, strlen(text), "TF_CONFIG", &root);
    if (s) return s;
    int found = 0;
    const sl_json *cl = sl_json_get(root, "cluster"), *task = sl_json_get(root, "task");
    const sl_json *ty = task ? sl_json_get(task, "type") : NULL, *ix = task ? sl_json_get(task, "index") : NULL;
    if (cl && cl->kind == SL_JSON_OBJECT && ty && ty->kind == SL_JSON_STRING && ix && ix->kind == SL_JSON_NUMBER) {
        const char *order[2] = {"chief", "worker"};
        int self_k = strcmp(ty->str, "chief") == 0 ? 0 : strcmp(ty->str, "worker") == 0 ? 1 : -1;
        const sl_json *self_list = self_k >= 0 ? sl_json_get(cl, order[self_k]) : NULL;
        double idx = ix->num;
        if (self_list && self_list->kind == SL_JSON_ARRAY && idx >= 0 && idx < (double)self_list->len &&
            idx == (double)(size_t)idx && self_list->items[(size_t)idx].kind == SL_JSON_STRING) {
            const char *me = self_list->items[(size_t)idx].str;
            size_t ml = host_len(me);
            int r = 0;
            for (int k = 0; k <= self_k; k++) {
                const sl_json *l = sl_json_get(cl, order[k]);
                if (!l || l->kind != SL_JSON_ARRAY) continue;
                size_t end = k == self_k ? (size_t)idx : l->len;
                for (size_t i = 0; i < end; i++) {
                    const sl_json *a = &l->items[i];
                    if (a->kind == SL_JSON_STRING && host_len(a->str) == ml && strncmp(a->str, me, ml) == 0) r++;
                }
            }
            *rank = r;
            found = 1;
        }
    }
    sl_json_free(root);
    return found;
}

sl_status sl_cuda_choose_device(const char *const *envp, int explicit_device, int visible, sl_device_choice *out) {
    memset(out, 0, sizeof *out);
    out->device = -1;
    if (explicit_device < -1)
        return sl_err(SL_EINVAL, "device %d: a GPU index must be >= 0", explicit_device);
    if (explicit_device >= 0) {
        if (visible > 0 && explicit_device >= visible) {
            sl_err(SL_EINVAL, "device %d does not exist: this process sees %d GPU%s (0..%d)", explicit_device, visible,
                   visible == 1 ? "" : "s", visible - 1);
            sl_err_hint("CUDA_VISIBLE_DEVICES renumbers the GPUs a process sees from 0");
            return SL_EINVAL;
        }
        out->device = explicit_device;
        out->local_rank = -1;
        snprintf(out->source, sizeof out->source, "device option");
        return SL_OK;
    }
    static const char *const vars[] = {"SLUICE_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK",
                                       "MPI_LOCALRANKID", "SLURM_LOCALID"};
    int rank = -1;
    const char *src = "default";
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = sl_env_get(envp, vars[i]);
        if (!v || !*v) continue;
        rank = parse_rank(v);
        if (rank < 0) {
            sl_err(SL_EINVAL, "%s='%.40s' is not a local rank (a whole number 0..65535)", vars[i], v);
            sl_err_hint("unset it, or set it to this replica's index among the replicas on this host");
            return SL_EINVAL;
        }
        src = vars[i];
        break;
    }
    if (rank < 0) {
        const char *tf = sl_env_get(envp, "TF_CONFIG");
        if (tf && *tf) {
            int r = 0, k = tf_config_rank(tf, &r);
            if (k < 0) return k;
            if (k == 1) {
                rank = r;
                src = "TF_CONFIG";
            }
        }
    }
    if (rank < 0) rank = 0;
    out->local_rank = rank;
    out->device = visible > 0 ? rank % visible : rank;
    snprintf(out->source, sizeof out->source, "%s", src);
    return SL_OK;
}

int sl_cuda_choice_describe(const sl_device_choice *c, int visible, char *out, size_t cap) {
    if (c->local_rank < 0) return snprintf(out, cap, "GPU %d of %d (%s)", c->device, visible, c->source);
    if (strcmp(c->source, "default") == 0) return snprintf(out, cap, "GPU %d of %d (default)", c->device, visible);
    return snprintf(out, cap, "GPU %d of %d (local rank %d from %s)", c->device, visible, c->local_rank, c->source);
}
