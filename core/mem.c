/* How much memory this process can still take (sluice/util.h sl_mem_available): the
 * tightest of its cgroup's limit less its use (cgroup v2, each level from the process's own
 * group up to the root; cgroup v1's memory controller) and the kernel's MemAvailable. A
 * buffer or a model planned against it is refused with both sizes before it is allocated,
 * instead of growing until the OOM killer ends the process.
 *
 * Workload: a few small reads under /proc and /sys, once per model or pipeline buffer. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/util.h"

/* The first line of path as an int64; "max" (no limit) is INT64_MAX. false when unreadable. */
static bool read_i64(const char *path, int64_t *out) {
    FILE *f = fopen(path, "re");
    if (!f) return false;
    char line[64];
    bool ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (!ok) return false;
    if (strncmp(line, "max", 3) == 0) {
        *out = INT64_MAX;
        return true;
    }
    char *end;
    long long v = strtoll(line, &end, 10);
    if (end == line || v < 0) return false;
    *out = v;
    return true;
}

/* Take limit - use at dir (FILE names of the two files) when it is tighter than *best. */
static void consider(const char *dir, const char *limit_file, const char *use_file, int64_t *best, char *src,
                     size_t cap) {
    char p[1200];
    int64_t limit, use;
    snprintf(p, sizeof p, "%s/%s", dir, limit_file);
    if (!read_i64(p, &limit) || limit == INT64_MAX || limit >= ((int64_t)1 << 60)) return; /* no limit */
    snprintf(p, sizeof p, "%s/%s", dir, use_file);
    if (!read_i64(p, &use)) use = 0;
    int64_t left = limit > use ? limit - use : 0;
    if (left < *best) {
        *best = left;
        snprintf(src, cap, "%s/%s", dir, limit_file);
    }
}

/* The cgroup limits on this process: the tightest limit - use of cgroup v2's levels and of
 * cgroup v1's memory controller, from /proc/self/cgroup. */
static void cgroup_left(int64_t *best, char *src, size_t cap) {
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        const char *path = c2 + 1;
        char dir[1100];
        if (strncmp(line, "0::", 3) == 0) { /* v2: the group and each level above it */
            snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", strcmp(path, "/") == 0 ? "" : path);
            for (;;) {
                consider(dir, "memory.max", "memory.current", best, src, cap);
                char *slash = strrchr(dir, '/');
                if (!slash || slash - dir <= (long)strlen("/sys/fs/cgroup")) break;
                *slash = 0;
            }
        } else if (strstr(c1 + 1, "memory") && (size_t)(c2 - c1 - 1) < 64) { /* v1's memory controller */
            snprintf(dir, sizeof dir, "/sys/fs/cgroup/memory%s", strcmp(path, "/") == 0 ? "" : path);
            consider(dir, "memory.limit_in_bytes", "memory.usage_in_bytes", best, src, cap);
        }
    }
    fclose(f);
}

bool sl_mem_available(int64_t *bytes, char *source, size_t cap) {
    int64_t best = INT64_MAX;
    char src[1200] = "";
    FILE *f = fopen("/proc/meminfo", "re");
    if (f) {
        char line[256];
        long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1 && kb >= 0) {
                best = (int64_t)kb * 1024;
                snprintf(src, sizeof src, "MemAvailable in /proc/meminfo");
                break;
            }
        fclose(f);
    }
    cgroup_left(&best, src, sizeof src);
    if (best == INT64_MAX) return false;
    *bytes = best;
    if (source && cap) snprintf(source, cap, "%s", src);
    return true;
}

void sl_mem_format(double bytes, char *out, size_t cap) {
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
    double v = bytes;
    int u = 0;
    while (v >= 1024.0 && u < 8) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(out, cap, "%.0f bytes", v);
    else snprintf(out, cap, "%.1f %s", v, units[u]);
}
