/* safetensors files: the crash-safe writer (sl_st_writer_*) and the clean-up of temporary
 * files a crashed writer left (sl_st_remove_stale). The format, and what a reader checks, is
 * in sluice/safetensors.h; the reader is formats/safetensors.c.
 *
 * Workload: a checkpoint every few minutes of training, from kilobytes to a few gigabytes,
 * with tens to thousands of tensors. The writer streams each borrowed tensor straight to a
 * temporary file in the target's folder (no staging copy), fsyncs it and renames it over
 * the target, so a crash leaves either the old checkpoint or the new one, never a torn
 * file. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/safetensors_priv.h"
#include "sluice/crc32c.h"
#include "sluice/file.h"
#include "sluice/json.h"
#include "sluice/safetensors.h"
#include "sluice/util.h"

/* ---- writer ------------------------------------------------------------------------- */

typedef struct wtensor {
    char *name;
    sl_dtype dt;
    int rank;
    int64_t dims[SL_MAX_RANK];
    const void *data; /* borrowed */
    uint64_t nbytes;
} wtensor;

struct sl_st_writer {
    wtensor *t;
    int n, cap;
    char **mkey, **mval; /* metadata, in the order set */
    int nmeta, capmeta;
    bool checksums;      /* record CRC32Cs in the metadata (sl_st_writer_set_checksums) */
};

sl_status sl_st_writer_new(sl_st_writer **out) {
    *out = calloc(1, sizeof **out);
    return *out ? SL_OK : sl_err(SL_ENOMEM, "out of memory creating a safetensors writer");
}

void sl_st_writer_free(sl_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->t[i].name);
    for (int i = 0; i < w->nmeta; i++) {
        free(w->mkey[i]);
        free(w->mval[i]);
    }
    free(w->t);
    free(w->mkey);
    free(w->mval);
    free(w);
}

sl_status sl_st_writer_add(sl_st_writer *w, const char *name, sl_dtype dt, int rank,
                           const int64_t *dims, const void *data) {
    if (!name || !*name)
        return sl_err(SL_EINVAL, "safetensors: a tensor name must not be empty");
    if (strcmp(name, "__metadata__") == 0)
        return sl_err(SL_EINVAL, "safetensors: \"__metadata__\" is reserved, not a tensor name");
    if (!sl_st_dtype_name(dt))
        return sl_err(SL_EINVAL, "safetensors: tensor \"%s\": dtype %s cannot be stored",
                      name, sl_dtype_name(dt));
    if (rank < 0 || rank > SL_MAX_RANK)
        return sl_err(SL_EINVAL, "safetensors: tensor \"%s\": rank %d outside 0..%d", name,
                      rank, SL_MAX_RANK);
    for (int i = 0; i < rank; i++)
        if (dims[i] < 0)
            return sl_err(SL_EINVAL, "safetensors: tensor \"%s\": dimension %d is negative (%lld)",
                          name, i, (long long)dims[i]);
    uint64_t nb;
    if (!sl__st_shape_nbytes(dt, rank, dims, &nb))
        return sl_err(SL_ERANGE, "safetensors: tensor \"%s\": byte count overflows", name);
    if (nb && !data)
        return sl_err(SL_EINVAL, "safetensors: tensor \"%s\": no data for %llu bytes", name,
                      (unsigned long long)nb);
    /* Linear: a checkpoint has at most a few thousand tensors, added once each. */
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return sl_err(SL_EINVAL, "safetensors: tensor \"%s\" was already added", name);
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        wtensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) return sl_err(SL_ENOMEM, "safetensors: out of memory adding \"%s\"", name);
        w->t = t;
        w->cap = cap;
    }
    wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        return sl_err(SL_ENOMEM, "safetensors: out of memory adding \"%s\"", name);
    t->dt = dt;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    t->data = data;
    t->nbytes = nb;
    w->n++;
    return SL_OK;
}

sl_status sl_st_writer_add_tensor(sl_st_writer *w, const char *name, const sl_tensor *t) {
    return sl_st_writer_add(w, name, t->dtype, t->rank, t->dims, t->data);
}

void sl_st_writer_set_checksums(sl_st_writer *w, bool on) { w->checksums = on; }

sl_status sl_st_writer_set_meta(sl_st_writer *w, const char *key, const char *value) {
    if (!key || !*key) return sl_err(SL_EINVAL, "safetensors: a metadata key must not be empty");
    if (sl__st_is_crc_key(key))
        return sl_err(SL_EINVAL, "safetensors: metadata key \"%s\" is reserved for checksums", key);
    char *v = strdup(value ? value : "");
    if (!v) return sl_err(SL_ENOMEM, "safetensors: out of memory setting metadata");
    for (int i = 0; i < w->nmeta; i++)
        if (strcmp(w->mkey[i], key) == 0) {
            free(w->mval[i]);
            w->mval[i] = v;
            return SL_OK;
        }
    if (w->nmeta == w->capmeta) {
        int cap = w->capmeta ? 2 * w->capmeta : 8;
        char **k = realloc(w->mkey, (size_t)cap * sizeof *k);
        if (k) w->mkey = k;
        char **vv = k ? realloc(w->mval, (size_t)cap * sizeof *vv) : NULL;
        if (!vv) {
            free(v);
            return sl_err(SL_ENOMEM, "safetensors: out of memory setting metadata");
        }
        w->mval = vv;
        w->capmeta = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(v);
        return sl_err(SL_ENOMEM, "safetensors: out of memory setting metadata");
    }
    w->mkey[w->nmeta] = k;
    w->mval[w->nmeta] = v;
    w->nmeta++;
    return SL_OK;
}

/* A JSON string literal. Bytes >= 0x80 pass through: names are expected in UTF-8. */
static void json_str(sl_json_buf *b, const char *s) { sl_json_put_str(sl_json_buf_put_fn, b, s, strlen(s), 0); }

/* Order of tensors in the data section: larger elements first, so each tensor starts at a
 * multiple of its element size (the header is padded to 8). Stable, by index. */
static int *layout_order(const sl_st_writer *w) {
    int *ord = malloc((size_t)(w->n ? w->n : 1) * sizeof *ord);
    if (!ord) return NULL;
    int k = 0;
    for (size_t sz = 8; sz >= 1; sz /= 2)
        for (int i = 0; i < w->n; i++)
            if (sl_dtype_size(w->t[i].dt) == sz) ord[k++] = i;
    return ord;
}

/* The directory part of path ("." when there is none), for the fsync that makes the
 * rename durable. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

/* The header: the metadata meta[0..nm) (when there is any), then the tensors in file order
 * ord with their byte ranges, padded with spaces to a multiple of 8 bytes. An allocation
 * failure leaves hb->oom set. */
static void build_header(const sl_st_writer *w, const int *ord, const kv *meta, int nm, sl_json_buf *hb) {
    sl_json_buf_put(hb, "{", 1);
    bool first = true;
    if (nm) {
        sl_json_buf_put(hb, "\"__metadata__\":{", 16);
        for (int i = 0; i < nm; i++) {
            if (i) sl_json_buf_put(hb, ",", 1);
            json_str(hb, meta[i].k);
            sl_json_buf_put(hb, ":", 1);
            json_str(hb, meta[i].v);
        }
        sl_json_buf_put(hb, "}", 1);
        first = false;
    }
    uint64_t off = 0;
    for (int k = 0; k < w->n; k++) {
        const wtensor *t = &w->t[ord[k]];
        if (!first) sl_json_buf_put(hb, ",", 1);
        first = false;
        json_str(hb, t->name);
        sl_json_buf_printf(hb, ":{\"dtype\":\"%s\",\"shape\":[", sl_st_dtype_name(t->dt));
        for (int d = 0; d < t->rank; d++) sl_json_buf_printf(hb, d ? ",%lld" : "%lld", (long long)t->dims[d]);
        sl_json_buf_printf(hb, "],\"data_offsets\":[%llu,", (unsigned long long)off);
        off += t->nbytes;
        sl_json_buf_printf(hb, "%llu]}", (unsigned long long)off);
    }
    sl_json_buf_put(hb, "}", 1);
    while (!hb->oom && hb->len % 8) sl_json_buf_put(hb, " ", 1);
}

sl_status sl_st_writer_write(const sl_st_writer *w, const char *path) {
    static atomic_uint tmp_counter;
    sl_status s = SL_OK;
    sl_json_buf hb = {0};
    char *tmp = NULL, *dir = NULL;
    int fd = -1, dfd = -1;
    int *ord = layout_order(w);
    if (!ord) return sl_err(SL_ENOMEM, "%s: out of memory writing a checkpoint", path);
    /* the metadata as written: the writer's, then (with checksums) one CRC32C per tensor
     * and the header's; crcs holds the text of the added entries */
    int nm = w->nmeta + (w->checksums ? w->n + 1 : 0);
    kv *meta = malloc((size_t)(nm ? nm : 1) * sizeof *meta);
    kv *sorted = malloc((size_t)(nm ? nm : 1) * sizeof *sorted);
    tdesc *td = malloc((size_t)(w->n ? w->n : 1) * sizeof *td);
    char *crcs = w->checksums ? malloc((size_t)(w->n + 1) * 9) : NULL;
    char **ckeys = w->checksums ? calloc((size_t)(w->n ? w->n : 1), sizeof *ckeys) : NULL;
    if (!meta || !sorted || !td || (w->checksums && (!crcs || !ckeys))) {
        s = sl_err(SL_ENOMEM, "%s: out of memory writing a checkpoint", path);
        goto fail;
    }
    for (int i = 0; i < w->nmeta; i++) meta[i] = (kv){w->mkey[i], w->mval[i]};
    if (w->checksums) {
        for (int k = 0; k < w->n; k++) {
            const wtensor *t = &w->t[k];
            size_t kl = strlen(SL_ST_CRC_PREFIX) + strlen(t->name) + 1;
            if (!(ckeys[k] = malloc(kl))) {
                s = sl_err(SL_ENOMEM, "%s: out of memory writing a checkpoint", path);
                goto fail;
            }
            snprintf(ckeys[k], kl, "%s%s", SL_ST_CRC_PREFIX, t->name);
            snprintf(crcs + 9 * (size_t)k, 9, "%08x", (unsigned)sl_crc32c(0, t->data, (size_t)t->nbytes));
            meta[w->nmeta + k] = (kv){ckeys[k], crcs + 9 * (size_t)k};
            td[k] = (tdesc){t->name, t->dt, t->rank, t->dims};
        }
        memcpy(sorted, meta, (size_t)(nm - 1) * sizeof *sorted);
        snprintf(crcs + 9 * (size_t)w->n, 9, "%08x", (unsigned)sl__st_header_crc(sorted, nm - 1, td, w->n));
        meta[nm - 1] = (kv){SL_ST_CRC_HEADER, crcs + 9 * (size_t)w->n};
    }

    build_header(w, ord, meta, nm, &hb);
    if (hb.oom) {
        s = sl_err(SL_ENOMEM, "%s: out of memory building the header", path);
        goto fail;
    }

    size_t plen = strlen(path);
    if (!(tmp = malloc(plen + 48)) || !(dir = dir_of(path))) {
        s = sl_err(SL_ENOMEM, "%s: out of memory writing a checkpoint", path);
        goto fail;
    }
    snprintf(tmp, plen + 48, "%s.tmp.%ld.%u", path, (long)getpid(),
             atomic_fetch_add(&tmp_counter, 1));
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        int e = errno;
        s = sl_err(e == ENOENT ? SL_ENOTFOUND : SL_EIO, "%s: cannot create: %s", tmp, strerror(e));
        if (e == ENOENT) sl_err_hint("create the folder %s first", dir);
        goto fail;
    }
    uint8_t len8[8];
    sl_store_le64(len8, hb.len);
    /* a failed write names the target: its temporary file is removed below */
    uint64_t at = 0;
    if ((s = sl_file_write_all(fd, len8, 8, path, &at)) || (s = sl_file_write_all(fd, hb.p, hb.len, path, &at)))
        goto fail;
    for (int k = 0; k < w->n; k++) {
        const wtensor *t = &w->t[ord[k]];
        if ((s = sl_file_write_all(fd, t->data, (size_t)t->nbytes, path, &at))) goto fail;
    }
    if (fsync(fd) != 0) {
        s = sl_err(SL_EIO, "%s: fsync failed: %s", tmp, strerror(errno));
        goto fail;
    }
    int rc = close(fd);
    fd = -1;
    if (rc != 0) {
        s = sl_err(SL_EIO, "%s: close failed: %s", tmp, strerror(errno));
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        s = sl_err(SL_EIO, "%s: cannot rename %s over it: %s", path, tmp, strerror(errno));
        goto fail;
    }
    /* From here on the new file is in place; a failed directory fsync only means the
     * rename might not survive a power cut, which is still reported. */
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
        s = sl_err(SL_EIO, "%s: fsync of the folder %s failed: %s", path, dir, strerror(errno));
        if (dfd >= 0) close(dfd);
        goto out;
    }
    close(dfd);
    goto out;
fail:
    if (fd >= 0) close(fd);
    if (tmp && s != SL_ENOTFOUND) unlink(tmp);
out:
    if (ckeys)
        for (int k = 0; k < w->n; k++) free(ckeys[k]);
    free(ckeys);
    free(crcs);
    free(meta);
    free(sorted);
    free(td);
    free(tmp);
    free(dir);
    free(hb.p);
    free(ord);
    return s;
}

int sl_st_remove_stale(const char *path) {
    char *dir = dir_of(path);
    if (!dir) return sl_err(SL_ENOMEM, "%s: out of memory", path);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t blen = strlen(base);
    DIR *d = opendir(dir);
    if (!d) {
        int e = errno;
        sl_status s = sl_err(e == ENOENT ? SL_ENOTFOUND : SL_EIO, "%s: cannot list the folder: %s",
                             dir, strerror(e));
        free(dir);
        return s;
    }
    int removed = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (strncmp(ent->d_name, base, blen) != 0 || strncmp(ent->d_name + blen, ".tmp.", 5) != 0)
            continue;
        char *full = malloc(strlen(dir) + strlen(ent->d_name) + 2);
        if (!full) continue;
        sprintf(full, "%s/%s", dir, ent->d_name);
        if (unlink(full) == 0) removed++;
        free(full);
    }
    closedir(d);
    free(dir);
    return removed;
}
