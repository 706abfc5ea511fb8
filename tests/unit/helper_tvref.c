/* Reading tests/data/torchvision/refs.bin: see helper_tvref.h. */
#include "helper_tvref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper_fn.h"

const char *sl_tvref_dir(int argc, char **argv, const char *def) { return argc > 1 ? argv[1] : def; }

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#define NEED(k)                                                                          \
    do {                                                                                 \
        if ((size_t)(end - p) < (size_t)(k)) {                                           \
            fprintf(stderr, "%s: record %d runs past the end of the file\n", path, i);   \
            goto fail;                                                                   \
        }                                                                                \
    } while (0)

int sl_tvref_load(const char *dir, sl_tvrefs *refs) {
    memset(refs, 0, sizeof *refs);
    char path[4200];
    snprintf(path, sizeof path, "%s/refs.bin", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open (regenerate with tests/data/torchvision/gen_refs.py)\n", path);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    int i = -1;
    uint8_t *buf = size > 0 ? malloc((size_t)size) : NULL;
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        free(buf);
        fprintf(stderr, "%s: cannot read\n", path);
        return -1;
    }
    fclose(f);
    refs->file = buf;
    const uint8_t *p = buf, *end = buf + size;
    if (size < 32 || memcmp(buf, "SLTVREF1", 8) != 0) {
        fprintf(stderr, "%s: not a reference file (magic)\n", path);
        goto fail;
    }
    uint32_t version = rd32(buf + 8), n = rd32(buf + 12);
    uint64_t total = rd32(buf + 16) | (uint64_t)rd32(buf + 20) << 32;
    if (version != 1 || total != (uint64_t)size || memcmp(end - 8, "SLTVEND1", 8) != 0 || n > 100000) {
        fprintf(stderr, "%s: version %u, size %llu of %ld bytes, or trailer wrong\n", path, version,
                (unsigned long long)total, size);
        goto fail;
    }
    end -= 8;
    p = buf + 24;
    refs->r = calloc(n ? n : 1, sizeof *refs->r);
    if (!refs->r) goto fail;
    for (i = 0; i < (int)n; i++) {
        sl_tvref *r = &refs->r[i];
        NEED(1);
        size_t len = *p++;
        NEED(len + 4);
        if (len >= sizeof r->op) goto fail;
        memcpy(r->op, p, len);
        p += len;
        uint32_t np = rd32(p);
        p += 4;
        if (np > SL_TVREF_MAX_PARAMS) {
            fprintf(stderr, "%s: record %d has %u parameters\n", path, i, np);
            goto fail;
        }
        NEED(4 * np);
        r->nparams = (int)np;
        memcpy(r->params, p, 4 * np); /* little-endian hosts only, like the rest of the suite */
        p += 4 * np;
        for (int k = 0; k < 2; k++) {
            int64_t *d = k ? r->out_dims : r->in_dims;
            NEED(12);
            uint64_t bytes = 1;
            for (int j = 0; j < 3; j++) {
                d[j] = rd32(p + 4 * j);
                bytes *= (uint64_t)d[j];
            }
            p += 12;
            NEED(bytes);
            if (k) r->out = p;
            else r->in = p;
            p += bytes;
        }
    }
    if (p != end) {
        fprintf(stderr, "%s: %ld bytes after the last record\n", path, (long)(end - p));
        goto fail;
    }
    refs->n = (int)n;
    return 0;
fail:
    sl_tvref_free(refs);
    return -1;
}

void sl_tvref_free(sl_tvrefs *refs) {
    free(refs->file);
    free(refs->r);
    memset(refs, 0, sizeof *refs);
}

sl_tensor sl_tvref_input(const sl_tvref *r) { return sl_test_tensor(SL_DT_U8, 3, r->in_dims, r->in); }

int sl_tvref_maxdiff(const sl_tvref *r, const sl_tensor *out) {
    if (out->dtype != SL_DT_U8) return 256;
    bool two = out->rank == 2 && r->out_dims[2] == 1;
    if (!two && out->rank != 3) return 256;
    for (int j = 0; j < (two ? 2 : 3); j++)
        if (out->dims[j] != r->out_dims[j]) return 256;
    int64_t n = r->out_dims[0] * r->out_dims[1] * r->out_dims[2];
    const uint8_t *o = out->data;
    int worst = 0;
    for (int64_t i = 0; i < n; i++) {
        int d = abs((int)o[i] - (int)r->out[i]);
        if (d > worst) worst = d;
    }
    return worst;
}
