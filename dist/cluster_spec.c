/* The cluster sources' common pieces (dist/cluster_priv.h): a source's member lists, the
 * address check every listed address passes, and the integer reader of the environment's
 * values. Kept apart so that cluster.c, cluster_env.c and rendezvous.c all build on it
 * without calling each other back. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dist/cluster_priv.h"

typedef sl__cluster_spec spec;

void sl__cluster_spec_free(spec *s) {
    for (int t = 0; t < SL_TASK_TYPES_; t++) {
        for (int i = 0; i < s->n[t]; i++) free(s->list[t][i]);
        free(s->list[t]);
    }
    memset(s, 0, sizeof *s);
}

/* "host:port" with a port in 1..65535 and a host of sane characters. */
static sl_status check_addr(const char *src, const char *addr) {
    const char *colon = strrchr(addr, ':');
    size_t hl = colon ? (size_t)(colon - addr) : 0;
    if (!colon || hl == 0 || hl >= 250)
        return sl_err(SL_EINVAL, "%s: address \"%s\" is not host:port", src, addr);
    for (size_t i = 0; i < hl; i++) {
        char c = addr[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '-' || c == '_'))
            return sl_err(SL_EINVAL, "%s: address \"%s\": bad character '%c' in the host", src, addr, c);
    }
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || p < 1 || p > 65535)
        return sl_err(SL_EINVAL, "%s: address \"%s\": port must be a number in 1..65535", src, addr);
    return SL_OK;
}

sl_status sl__cluster_add_member(spec *s, int type, const char *addr) {
    sl_status st = check_addr(s->src, addr);
    if (st) return st;
    char **nl = s->list[type];
    int n = s->n[type];
    if ((n & (n - 1)) == 0) { /* the list doubles at each power of two: n members cost n log n, not n^2 */
        nl = realloc(nl, (n ? 2 * (size_t)n : 1) * sizeof *nl);
        if (!nl) return sl_err(SL_ENOMEM, "cluster: out of memory");
        s->list[type] = nl;
    }
    if (!(nl[s->n[type]] = strdup(addr))) return sl_err(SL_ENOMEM, "cluster: out of memory");
    s->n[type]++;
    s->have_members = 1;
    return SL_OK;
}

int sl__cluster_parse_int(const char *v, long min, long max, long *out) {
    if (!v || !*v) return -1;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*end || errno || x < min || x > max) return -1;
    *out = x;
    return 0;
}
