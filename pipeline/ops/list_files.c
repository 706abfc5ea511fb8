/* list_files: file names matching glob patterns, as {"filename": bytes scalar}, sorted (and
 * de-duplicated across patterns); with shuffle, in a random order that is a permutation
 * seeded by mix(seed, stream seed): repeat gives each epoch its own stream seed, so each
 * epoch has a new order, and the same orders run after run.
 *
 * Workload: tens to tens of thousands of shard files, expanded once at creation. Also home
 * of the glob helper tfrecord uses (sl__glob_paths). Every match must be a regular file: a
 * FIFO, socket, device or directory among the matches fails creation with SL_EINVAL naming
 * it (a FIFO would otherwise block its reader for ever). */
#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"
#include "sluice/file.h"

void sl__free_paths(char **paths, int n) {
    if (!paths) return;
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

sl_status sl__glob_paths(const char *op, const char *const *patterns, int n, bool sort_all,
                         char ***out, int *nout) {
    *out = NULL;
    *nout = 0;
    if (n < 1 || !patterns) return sl_err(SL_EINVAL, "%s: no file patterns given", op);
    char **paths = NULL;
    int np = 0, cap = 0;
    sl_status s = SL_OK;
    for (int i = 0; i < n; i++) {
        if (!patterns[i] || !patterns[i][0]) {
            s = sl_err(SL_EINVAL, "%s: pattern %d is empty", op, i);
            goto fail;
        }
        glob_t g;
        int rc = glob(patterns[i], 0, NULL, &g);
        if (rc == GLOB_NOMATCH) {
            globfree(&g);
            s = sl_err(SL_ENOTFOUND, "%s: no file matches '%s'", op, patterns[i]);
            sl_err_hint("check the path (relative paths are resolved from the current directory)");
            goto fail;
        }
        if (rc != 0) {
            globfree(&g);
            s = sl_err(rc == GLOB_NOSPACE ? SL_ENOMEM : SL_EIO, "%s: could not expand '%s' (%s)", op,
                       patterns[i], rc == GLOB_NOSPACE ? "out of memory" : "read error");
            goto fail;
        }
        for (size_t k = 0; k < g.gl_pathc; k++) {
            if (np == cap) {
                int ncap = cap ? 2 * cap : 16;
                char **np2 = realloc(paths, (size_t)ncap * sizeof *paths);
                if (!np2) {
                    globfree(&g);
                    s = sl_err(SL_ENOMEM, "%s: out of memory listing files", op);
                    goto fail;
                }
                paths = np2;
                cap = ncap;
            }
            if (!(paths[np] = strdup(g.gl_pathv[k]))) {
                globfree(&g);
                s = sl_err(SL_ENOMEM, "%s: out of memory listing files", op);
                goto fail;
            }
            np++;
        }
        globfree(&g);
    }
    /* Only regular files: a FIFO would block the reader that opens it, a directory or a
     * device is no data file. Refused here, at once, naming the path. */
    for (int k = 0; k < np; k++)
        if ((s = sl_file_check_regular(paths[k], "matched file"))) {
            sl_err_prefix("%s: ", op);
            goto fail;
        }
    if (sort_all && np > 1) {
        qsort(paths, (size_t)np, sizeof *paths, cmp_str);
        int w = 1;
        for (int r = 1; r < np; r++) {
            if (strcmp(paths[r], paths[w - 1]) == 0) free(paths[r]);
            else paths[w++] = paths[r];
        }
        np = w;
    }
    *out = paths;
    *nout = np;
    return SL_OK;
fail:
    sl__free_paths(paths, np);
    return s;
}

/* A bytes scalar holding a copy of str: one buffer holds both the sl_bytes and the bytes. */
static sl_status bytes_scalar(const char *str, size_t len, sl_tensor *t) {
    *t = SL_TENSOR_EMPTY;
    sl_buf *b = sl_buf_new(sizeof(sl_bytes) + len);
    if (!b) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    uint8_t *p = (uint8_t *)b->data + sizeof(sl_bytes);
    if (len) memcpy(p, str, len);
    sl_bytes *v = b->data;
    v->ptr = p;
    v->len = len;
    t->dtype = SL_DT_BYTES;
    t->rank = 0;
    t->data = b->data;
    t->buf = b;
    t->aux = sl_buf_ref(b);
    return SL_OK;
}

typedef struct {
    sl_dataset base;
    char **paths; /* sorted, unique */
    int n;
    bool shuffle;
    uint64_t seed;
} lf_ds;

typedef struct {
    sl_iter base;
    int *order; /* shuffled positions, or NULL for sorted order */
    int pos;
} lf_it;

static sl_status lf_next(sl_iter *it, sl_element *out) {
    lf_it *l = (lf_it *)it;
    const lf_ds *d = (const lf_ds *)it->ds;
    if (l->pos >= d->n) return SL_END;
    int k = l->order ? l->order[l->pos] : l->pos;
    l->pos++;
    sl_tensor t;
    sl_status s = bytes_scalar(d->paths[k], strlen(d->paths[k]), &t);
    if (s) return s;
    s = sl_element_set(out, "filename", &t);
    if (s) sl_tensor_release(&t);
    return s;
}

static void lf_close(sl_iter *it) { free(((lf_it *)it)->order); }

static const sl_iter_vt lf_it_vt = {.next = lf_next, .close = lf_close};

static sl_status lf_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    const lf_ds *d = (const lf_ds *)ds;
    lf_it *l = sl__iter_new(sizeof *l, &lf_it_vt, ds, ctx, seed);
    if (!l) return SL_ENOMEM;
    if (d->shuffle && d->n > 1) {
        if (!(l->order = malloc((size_t)d->n * sizeof *l->order))) {
            sl__iter_close(&l->base);
            return sl_err(SL_ENOMEM, "op '%s': out of memory", ds->label);
        }
        for (int i = 0; i < d->n; i++) l->order[i] = i;
        sl_rng rng = {sl__mix(d->seed, seed)};
        for (int i = d->n - 1; i > 0; i--) { /* Fisher-Yates */
            int j = (int)sl__rng_below(&rng, (uint64_t)i + 1);
            int tmp = l->order[i];
            l->order[i] = l->order[j];
            l->order[j] = tmp;
        }
    }
    *out = &l->base;
    return SL_OK;
}

static void lf_destroy(sl_dataset *ds) {
    lf_ds *d = (lf_ds *)ds;
    sl__free_paths(d->paths, d->n);
}

static int64_t lf_card(const sl_dataset *ds) { return ((const lf_ds *)ds)->n; }

static const sl_ds_vt lf_vt = {.name = "list_files", .make_iter = lf_make, .destroy = lf_destroy,
                               .cardinality = lf_card};

sl_status sl_ds_list_files(const char *const *patterns, int n, bool shuffle, uint64_t seed,
                           sl_dataset **out) {
    *out = NULL;
    char **paths;
    int np;
    sl_status s = sl__glob_paths("list_files", patterns, n, true, &paths, &np);
    if (s) return s;
    lf_ds *d = sl__ds_new(sizeof *d, &lf_vt, NULL, 0);
    if (!d) {
        sl__free_paths(paths, np);
        return SL_ENOMEM;
    }
    d->paths = paths;
    d->n = np;
    d->shuffle = shuffle;
    d->seed = seed;
    *out = &d->base;
    return SL_OK;
}
