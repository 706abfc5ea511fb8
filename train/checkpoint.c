/* Training checkpoints as safetensors files: the model's parameters by name, the optimizer
 * state, and where training stands (step, epoch, batch) in the metadata. The layout is in
 * sluice/train.h. Loading validates everything into host buffers before touching the model,
 * so a torn or foreign file leaves the model as it was and the caller can try an older one.
 * Workload: a few MB to a few hundred MB, written every epoch or every few hundred steps. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sluice/safetensors.h"
#include "sluice/train.h"
#include "train/model_priv.h"

#define CKPT_PREFIX "ckpt-"
#define CKPT_SUFFIX ".safetensors"

static sl_status set_meta_i64(sl_st_writer *w, const char *key, int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return sl_st_writer_set_meta(w, key, buf);
}

sl_status sl_train_save_checkpoint(const char *path, sl_model *m, sl_optim *o, const char *model_name,
                                   const char *config_name, const sl_ckpt_position *pos) {
    size_t np = 0, ns = 0;
    int64_t ostep = 0;
    sl_model_params(m, &np);
    if (o) sl_optim_state(o, &ns, &ostep);
    float *params = malloc((np ? np : 1) * sizeof(float));
    float *state = malloc((ns ? ns : 1) * sizeof(float));
    sl_st_writer *w = NULL;
    sl_status s = SL_OK;
    if (!params || !state) {
        s = sl_err(SL_ENOMEM, "out of memory for a checkpoint of %zu parameters", np);
        goto done;
    }
    if ((s = sl_model_get_params(m, params, np))) goto done;
    if (o && ns && (s = sl_optim_get_state(o, state, ns))) goto done;
    if ((s = sl_st_writer_new(&w))) goto done;
    int count = sl_model_param_count(m);
    for (int i = 0; i < count; i++) {
        const char *name;
        size_t off;
        int rank;
        int64_t dims[4];
        if ((s = sl_model_param_info(m, i, &name, &off, &rank, dims))) goto done;
        char full[256];
        snprintf(full, sizeof full, "model/%s", name);
        if ((s = sl_st_writer_add(w, full, SL_DT_F32, rank, dims, params + off))) goto done;
    }
    int64_t sd = (int64_t)ns;
    if (ns && (s = sl_st_writer_add(w, "optimizer/state", SL_DT_F32, 1, &sd, state))) goto done;
    char hash[32];
    snprintf(hash, sizeof hash, "%016" PRIx64, pos->model_hash);
    if ((s = sl_st_writer_set_meta(w, "format", "sluice-checkpoint")) || (s = sl_st_writer_set_meta(w, "version", "1")) ||
        (s = set_meta_i64(w, "step", pos->step)) || (s = set_meta_i64(w, "epoch", pos->epoch)) ||
        (s = set_meta_i64(w, "batch", pos->batch)) || (s = set_meta_i64(w, "optimizer_step", ostep)) ||
        (s = set_meta_i64(w, "optimizer_size", sd)) ||
        (s = set_meta_i64(w, "steps_per_epoch", pos->steps_per_epoch)) ||
        (s = sl_st_writer_set_meta(w, "model", model_name ? model_name : "")) ||
        (s = sl_st_writer_set_meta(w, "model_hash", hash)) ||
        (s = sl_st_writer_set_meta(w, "config", config_name ? config_name : "")))
        goto done;
    s = sl_st_writer_write(w, path);
done:
    sl_st_writer_free(w);
    free(params);
    free(state);
    return s;
}

static sl_status meta_i64(const sl_st_file *f, const char *path, const char *key, int64_t *out) {
    const char *v = sl_st_meta(f, key);
    char *end;
    if (!v || !*v) return sl_err(SL_ECORRUPT, "%s: checkpoint metadata has no '%s'", path, key);
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*end || errno || x < 0) return sl_err(SL_ECORRUPT, "%s: checkpoint metadata '%s' is '%s', not a count", path, key, v);
    *out = x;
    return SL_OK;
}

sl_status sl_train_load_checkpoint(const char *path, sl_model *m, sl_optim *o, uint64_t expect_hash,
                                   sl_ckpt_position *pos) {
    sl_st_file *f = NULL;
    float *params = NULL, *state = NULL;
    sl_tensor t = SL_TENSOR_EMPTY;
    sl_ckpt_position p = {0};
    sl_status s = sl_st_open(path, &f);
    if (s) return s;
    const char *fmt = sl_st_meta(f, "format");
    if (!fmt || strcmp(fmt, "sluice-checkpoint") != 0) {
        s = sl_err(SL_ECORRUPT, "%s: not a sluice checkpoint (metadata format is '%s')", path, fmt ? fmt : "");
        goto done;
    }
    const char *ver = sl_st_meta(f, "version");
    if (!ver || strcmp(ver, "1") != 0) {
        s = sl_err(SL_EUNSUPPORTED, "%s: checkpoint version '%s' (this build reads version 1)", path, ver ? ver : "");
        goto done;
    }
    int64_t osize = 0;
    if ((s = meta_i64(f, path, "step", &p.step)) || (s = meta_i64(f, path, "epoch", &p.epoch)) ||
        (s = meta_i64(f, path, "batch", &p.batch)) || (s = meta_i64(f, path, "optimizer_step", &p.optimizer_step)) ||
        (s = meta_i64(f, path, "optimizer_size", &osize)) ||
        (s = meta_i64(f, path, "steps_per_epoch", &p.steps_per_epoch)))
        goto done;
    const char *hash = sl_st_meta(f, "model_hash");
    p.model_hash = hash ? strtoull(hash, NULL, 16) : 0;
    if (expect_hash && p.model_hash != expect_hash) {
        s = sl_err(SL_EINVAL, "%s: checkpoint of another model (model '%s', hash %s; this model's hash is %016" PRIx64 ")",
                   path, sl_st_meta(f, "model") ? sl_st_meta(f, "model") : "", hash ? hash : "none", expect_hash);
        sl_err_hint("the model block changed since the checkpoint was written: use another --run-dir, or restore the block");
        goto done;
    }
    size_t np = 0, ns = 0;
    int64_t dummy;
    sl_model_params(m, &np);
    if (o) sl_optim_state(o, &ns, &dummy);
    params = malloc((np ? np : 1) * sizeof(float));
    state = malloc((ns ? ns : 1) * sizeof(float));
    if (!params || !state) {
        s = sl_err(SL_ENOMEM, "out of memory loading %s", path);
        goto done;
    }
    int count = sl_model_param_count(m);
    size_t covered = 0;
    for (int i = 0; i < count; i++) {
        const char *name;
        size_t off;
        int rank;
        int64_t dims[4];
        if ((s = sl_model_param_info(m, i, &name, &off, &rank, dims))) goto done;
        char full[256];
        snprintf(full, sizeof full, "model/%s", name);
        if ((s = sl_st_get(f, full, &t))) {
            if (s == SL_ENOTFOUND) s = sl_err(SL_ECORRUPT, "%s: checkpoint has no tensor '%s'", path, full);
            goto done;
        }
        bool same = t.dtype == SL_DT_F32 && t.rank == rank;
        int64_t numel = 1;
        for (int d = 0; d < rank && same; d++) {
            same = t.dims[d] == dims[d];
            numel *= dims[d];
        }
        if (!same || off + (size_t)numel > np) {
            char got[96];
            s = sl_err(SL_ECORRUPT, "%s: tensor '%s' is %s, not the model's float32 of rank %d", path, full,
                       sl_tensor_describe(&t, got, sizeof got), rank);
            goto done;
        }
        memcpy(params + off, t.data, (size_t)numel * sizeof(float));
        covered += (size_t)numel;
        sl_tensor_release(&t);
    }
    if (covered != np) {
        s = sl_err(SL_EINTERNAL, "%s: the model's named parameters cover %zu of %zu floats", path, covered, np);
        goto done;
    }
    if (o) {
        if ((size_t)osize != ns) {
            s = sl_err(SL_EINVAL, "%s: optimizer state of %" PRId64 " floats, the configured optimizer has %zu", path,
                       osize, ns);
            sl_err_hint("the optimizer changed since the checkpoint was written: resume with the same optimizer");
            goto done;
        }
        if (ns) {
            if ((s = sl_st_get(f, "optimizer/state", &t))) {
                if (s == SL_ENOTFOUND) s = sl_err(SL_ECORRUPT, "%s: checkpoint has no tensor 'optimizer/state'", path);
                goto done;
            }
            if (t.dtype != SL_DT_F32 || sl_tensor_numel(&t) != (int64_t)ns) {
                s = sl_err(SL_ECORRUPT, "%s: 'optimizer/state' has %" PRId64 " values, expected %zu float32", path,
                           sl_tensor_numel(&t), ns);
                goto done;
            }
            memcpy(state, t.data, ns * sizeof(float));
            sl_tensor_release(&t);
        }
    }
    /* everything validated: now change the model */
    if ((s = sl_model_set_params(m, params, np))) goto done;
    if (o && (s = sl_optim_set_state(o, state, ns, p.optimizer_step))) goto done;
    *pos = p;
done:
    sl_tensor_release(&t);
    sl_st_close(f);
    free(params);
    free(state);
    return s;
}

/* ---- listing ------------------------------------------------------------------------- */

typedef struct {
    int64_t step;
    char *path;
} ck_entry;

static int by_step_desc(const void *a, const void *b) {
    const ck_entry *x = a, *y = b;
    return x->step < y->step ? 1 : x->step > y->step ? -1 : strcmp(x->path, y->path);
}

/* PREFIX<digits>SUFFIX exactly: temporaries (".tmp.") and other files are not ours. */
static bool parse_name(const char *name, const char *prefix, const char *suffix, int64_t *step) {
    size_t n = strlen(name), lp = strlen(prefix), ls = strlen(suffix);
    if (n <= lp + ls || strncmp(name, prefix, lp) != 0 || strcmp(name + n - ls, suffix) != 0) return false;
    int64_t v = 0;
    for (size_t i = lp; i < n - ls; i++) {
        if (name[i] < '0' || name[i] > '9' || v > INT64_MAX / 10 - 10) return false;
        v = v * 10 + (name[i] - '0');
    }
    *step = v;
    return true;
}

int sl__list_numbered(const char *dir, const char *prefix, const char *suffix, char ***out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return 0;
    ck_entry *e = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t step;
        if (!parse_name(de->d_name, prefix, suffix, &step)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            ck_entry *ne = realloc(e, (size_t)cap * sizeof *e);
            if (!ne) goto nomem;
            e = ne;
        }
        size_t len = strlen(dir) + strlen(de->d_name) + 2;
        e[n].path = malloc(len);
        if (!e[n].path) goto nomem;
        snprintf(e[n].path, len, "%s/%s", dir, de->d_name);
        e[n++].step = step;
    }
    closedir(d);
    if (n == 0) {
        free(e);
        return 0;
    }
    qsort(e, (size_t)n, sizeof *e, by_step_desc);
    char **list = malloc((size_t)n * sizeof *list);
    if (!list) {
        for (int i = 0; i < n; i++) free(e[i].path);
        free(e);
        return sl_err(SL_ENOMEM, "out of memory listing %s", dir);
    }
    for (int i = 0; i < n; i++) list[i] = e[i].path;
    free(e);
    *out = list;
    return n;
nomem:
    closedir(d);
    for (int i = 0; i < n; i++) free(e[i].path);
    free(e);
    return sl_err(SL_ENOMEM, "out of memory listing %s", dir);
}

int sl_train_list_checkpoints(const char *run_dir, char ***out) {
    return sl__list_numbered(run_dir, CKPT_PREFIX, CKPT_SUFFIX, out);
}

void sl_train_free_list(char **list, int n) {
    if (!list) return;
    for (int i = 0; i < n; i++) free(list[i]);
    free(list);
}

sl_status sl__make_dirs(const char *path, const char *what) {
    char buf[1100];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return sl_err(SL_EINVAL, "%s '%s': empty or too long", what, path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != 0) continue;
        char c = buf[i];
        buf[i] = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return sl_err(SL_EIO, "cannot create %s %s: %s", what, buf, strerror(errno));
        buf[i] = c;
    }
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return sl_err(SL_EIO, "%s %s is not a directory", what, path);
    return SL_OK;
}
