/* Training checkpoints as safetensors files: the model's parameters by name, the optimizer
 * state, and where training stands (step, epoch, batch) in the metadata. The layout is in
 * sluice/train.h. Loading validates everything into host buffers before touching the model,
 * so a torn or foreign file leaves the model as it was and the caller can try an older one.
 * A file proves its own integrity: CRC32Cs of every tensor and of the header (written with
 * sl_st_writer_set_checksums, checked with sl_st_verify), metadata whose numbers must agree
 * with each other and with the run being resumed, and only finite floats.
 * Workload: a few MB to a few hundred MB, written every epoch or every few hundred steps. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/file.h"
#include "sluice/log.h"
#include "sluice/safetensors.h"
#include "sluice/strategy.h"
#include "sluice/train.h"
#include "train/internal.h"

#define CKPT_PREFIX "ckpt-"
#define CKPT_SUFFIX ".safetensors"

static sl_status set_meta_i64(sl_st_writer *w, const char *key, int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return sl_st_writer_set_meta(w, key, buf);
}

/* A parameter's view and its tensor name in a checkpoint ("model/" + the model's name). */
typedef struct {
    char full[256];
    size_t off;
    int rank;
    int64_t dims[4];
} param_view;

static sl_status param_view_of(sl_model *m, int i, param_view *v) {
    const char *name;
    sl_status s = sl_model_param_info(m, i, &name, &v->off, &v->rank, v->dims);
    if (!s) snprintf(v->full, sizeof v->full, "model/%s", name);
    return s;
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
    sl_st_writer_set_checksums(w, true);
    int count = sl_model_param_count(m);
    for (int i = 0; i < count; i++) {
        param_view v;
        if ((s = param_view_of(m, i, &v)) ||
            (s = sl_st_writer_add(w, v.full, SL_DT_F32, v.rank, v.dims, params + v.off)))
            goto done;
    }
    int64_t sd = (int64_t)ns;
    if (ns && (s = sl_st_writer_add(w, "optimizer/state", SL_DT_F32, 1, &sd, state))) goto done;
    char hash[32];
    snprintf(hash, sizeof hash, "%016" PRIx64, pos->model_hash);
    if ((s = sl_st_writer_set_meta(w, "format", "sluice-checkpoint")) || (s = sl_st_writer_set_meta(w, "version", "2")) ||
        (s = set_meta_i64(w, "step", pos->step)) || (s = set_meta_i64(w, "epoch", pos->epoch)) ||
        (s = set_meta_i64(w, "batch", pos->batch)) || (s = set_meta_i64(w, "optimizer_step", ostep)) ||
        (s = set_meta_i64(w, "optimizer_size", sd)) ||
        (s = set_meta_i64(w, "steps_per_epoch", pos->steps_per_epoch)) ||
        (s = set_meta_i64(w, "batch_size", pos->batch_size)) ||
        (s = sl_st_writer_set_meta(w, "model", model_name ? model_name : "")) ||
        (s = sl_st_writer_set_meta(w, "model_hash", hash)) ||
        (s = sl_st_writer_set_meta(w, "config", config_name ? config_name : "")))
        goto done;
    /* the CPU GEMM each shape was multiplied with, for a resumed run to keep (the two round
     * differently); none when no shape was chosen (a GPU run, a pinned GEMM) */
    size_t glen = sl__cpu_gemm_choices_text(NULL, 0);
    if (glen) {
        char *g = malloc(glen + 1);
        if (!g) {
            s = sl_err(SL_ENOMEM, "out of memory for a checkpoint's metadata");
            goto done;
        }
        sl__cpu_gemm_choices_text(g, glen + 1);
        s = sl_st_writer_set_meta(w, "cpu_gemm", g);
        free(g);
        if (s) goto done;
    }
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
    if (*end || errno || x < 0 || v[0] < '0' || v[0] > '9')
        return sl_err(SL_ECORRUPT, "%s: checkpoint metadata '%s' is '%s', not a count", path, key, v);
    *out = x;
    return SL_OK;
}

/* The first value of t that is not finite: its index, or -1. */
static int64_t first_nonfinite(const sl_tensor *t) {
    const float *x = t->data;
    int64_t n = sl_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

/* The tensors: the optimizer state matches its recorded size (osize values, none when 0);
 * every float of the model and the state is finite. */
static sl_status check_tensors(const sl_st_file *f, const char *path, int64_t osize) {
    sl_status s = SL_OK;
    sl_tensor t = SL_TENSOR_EMPTY;
    bool have_state = false;
    for (int i = 0; i < sl_st_count(f); i++) {
        const char *name = sl_st_name(f, i);
        bool is_state = strcmp(name, "optimizer/state") == 0;
        if (!is_state && strncmp(name, "model/", 6) != 0) continue;
        if ((s = sl_st_get(f, name, &t))) return s;
        if (is_state) {
            have_state = true;
            if (sl_tensor_numel(&t) != osize) {
                s = sl_err(SL_ECORRUPT, "%s: 'optimizer/state' has %" PRId64 " values; metadata optimizer_size says %" PRId64,
                           path, sl_tensor_numel(&t), osize);
                break;
            }
        }
        int64_t bad = t.dtype == SL_DT_F32 ? first_nonfinite(&t) : -1;
        if (bad >= 0) {
            float v = ((const float *)t.data)[bad];
            s = sl_err(SL_ECORRUPT, "%s: tensor '%s' holds %s at index %" PRId64 " (of %" PRId64 ")", path, name,
                       isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf", bad, sl_tensor_numel(&t));
            sl_err_hint("%s", is_state ? "the optimizer state is damaged: resume from an older checkpoint"
                                       : "the run had diverged or the file is damaged: resume from an older checkpoint");
            break;
        }
        sl_tensor_release(&t);
    }
    sl_tensor_release(&t);
    if (s) return s;
    if (!have_state && osize != 0)
        return sl_err(SL_ECORRUPT, "%s: metadata optimizer_size is %" PRId64 " but there is no 'optimizer/state'", path,
                      osize);
    return SL_OK;
}

/* Everything that can be checked without a model: format, version, checksums, metadata
 * (each number, their agreement, and `want`), finite floats. *p filled on success. */
static sl_status check_file(const sl_st_file *f, const char *path, const sl_ckpt_expect *want,
                            sl_ckpt_position *out) {
    sl_ckpt_position p = {0};
    sl_status s;
    const char *fmt = sl_st_meta(f, "format");
    if (!fmt || strcmp(fmt, "sluice-checkpoint") != 0)
        return sl_err(SL_ECORRUPT, "%s: not a sluice checkpoint (metadata format is '%s')", path, fmt ? fmt : "");
    const char *ver = sl_st_meta(f, "version");
    int version = ver && strcmp(ver, "1") == 0 ? 1 : ver && strcmp(ver, "2") == 0 ? 2 : 0;
    if (!version)
        return sl_err(SL_EUNSUPPORTED, "%s: checkpoint version '%s' (this build reads versions 1 and 2)", path,
                      ver ? ver : "");
    bool present = false;
    if ((s = sl_st_verify(f, &present))) {
        sl_err_prefix("checkpoint ");
        sl_err_hint("the file was damaged after it was written (disk, copy or edit): resume from an older one");
        return s;
    }
    if (version == 2 && !present)
        return sl_err(SL_ECORRUPT, "%s: a version 2 checkpoint without its checksums (metadata '%s')", path,
                      SL_ST_CRC_HEADER);
    p.verified = present;
    int64_t osize = 0;
    if ((s = meta_i64(f, path, "step", &p.step)) || (s = meta_i64(f, path, "epoch", &p.epoch)) ||
        (s = meta_i64(f, path, "batch", &p.batch)) || (s = meta_i64(f, path, "optimizer_step", &p.optimizer_step)) ||
        (s = meta_i64(f, path, "optimizer_size", &osize)) ||
        (s = meta_i64(f, path, "steps_per_epoch", &p.steps_per_epoch)) ||
        (version >= 2 && (s = meta_i64(f, path, "batch_size", &p.batch_size))))
        return s;
    const char *gemm = sl_st_meta(f, "cpu_gemm"); /* optional: a damaged one is not used (load warns) */
    if (gemm && sl__cpu_gemm_choices_adopt(gemm, false, NULL)) sl_err_clear();
    const char *hash = sl_st_meta(f, "model_hash");
    char *hend = NULL;
    if (hash) {
        errno = 0;
        p.model_hash = strtoull(hash, &hend, 16);
    }
    if (!hash || strlen(hash) != 16 || *hend || errno || hash[0] == '-' || hash[0] == '+' || hash[0] == ' ')
        return sl_err(SL_ECORRUPT, "%s: checkpoint metadata 'model_hash' is '%s', not 16 hex digits", path,
                      hash ? hash : "(none)");
    /* the run it belongs to */
    if (want && want->model_hash && p.model_hash != want->model_hash) {
        sl_err(SL_EINVAL, "%s: checkpoint of another model (model '%s', hash %s; this model's hash is %016" PRIx64 ")",
               path, sl_st_meta(f, "model") ? sl_st_meta(f, "model") : "", hash, want->model_hash);
        sl_err_hint("the model block changed since the checkpoint was written: use another --run-dir, or restore the block");
        return SL_EINVAL;
    }
    if (want && want->batch_size && p.batch_size && p.batch_size != want->batch_size) {
        sl_err(SL_EINVAL, "%s: checkpoint of a run with a global batch of %" PRId64 "; the config's batch is %" PRId64,
               path, p.batch_size, want->batch_size);
        sl_err_hint("its step, epoch and batch count batches of %" PRId64 ": resume with that batch, or start a new run "
                    "(--overwrite, or another --run-dir)", p.batch_size);
        return SL_EINVAL;
    }
    /* the numbers must agree: every epoch has steps_per_epoch batches (0 until the first
     * epoch ended), and a position may sit at the end of an epoch (a run that stopped there) */
    if (p.steps_per_epoch == 0) {
        if (p.epoch != 0 || p.step != p.batch)
            return sl_err(SL_ECORRUPT,
                          "%s: inconsistent position: step %" PRId64 ", epoch %" PRId64 ", batch %" PRId64
                          " with no complete epoch recorded (steps_per_epoch 0): expected epoch 0 and batch = step",
                          path, p.step, p.epoch, p.batch);
    } else {
        if (p.batch > p.steps_per_epoch)
            return sl_err(SL_ECORRUPT, "%s: inconsistent position: batch %" PRId64 " of an epoch of %" PRId64 " batches",
                          path, p.batch, p.steps_per_epoch);
        if (p.epoch > (INT64_MAX - p.batch) / p.steps_per_epoch ||
            p.step != p.epoch * p.steps_per_epoch + p.batch)
            return sl_err(SL_ECORRUPT,
                          "%s: inconsistent position: step %" PRId64 " is not epoch %" PRId64 " x %" PRId64
                          " steps per epoch + batch %" PRId64,
                          path, p.step, p.epoch, p.steps_per_epoch, p.batch);
    }
    if (p.optimizer_step > p.step)
        return sl_err(SL_ECORRUPT, "%s: inconsistent position: optimizer step %" PRId64 " is past step %" PRId64, path,
                      p.optimizer_step, p.step);
    if (want && want->steps_per_epoch > 0) {
        if (p.steps_per_epoch > 0 && p.steps_per_epoch != want->steps_per_epoch) {
            sl_err(SL_EINVAL, "%s: checkpoint of a run with %" PRId64 " batches per epoch; the training pipeline now makes %" PRId64,
                   path, p.steps_per_epoch, want->steps_per_epoch);
            sl_err_hint("the training data or its batching changed since the checkpoint was written: restore them, or start a new run");
            return SL_EINVAL;
        }
        if (p.batch > want->steps_per_epoch) {
            sl_err(SL_EINVAL, "%s: checkpoint at batch %" PRId64 " of an epoch; the training pipeline makes %" PRId64 " batches per epoch",
                   path, p.batch, want->steps_per_epoch);
            sl_err_hint("the training data or its batching changed since the checkpoint was written: restore them, or start a new run");
            return SL_EINVAL;
        }
    }
    /* the tensors: the optimizer state matches its recorded size; every float is finite */
    if ((s = check_tensors(f, path, osize))) return s;
    *out = p;
    return SL_OK;
}

sl_status sl_train_check_checkpoint_mem(const void *data, size_t size, const char *name, const sl_ckpt_expect *want,
                                        sl_ckpt_position *pos) {
    sl_st_file *f = NULL;
    if (!name) name = "<memory>";
    sl_status s = sl_st_open_mem(data, size, name, &f);
    if (s) return s;
    s = check_file(f, name, want, pos);
    sl_st_close(f);
    return s;
}

sl_status sl_train_check_checkpoint(const char *path, const sl_ckpt_expect *want, sl_ckpt_position *pos) {
    sl_st_file *f = NULL;
    sl_status s = sl_st_open(path, &f);
    if (s) return s;
    s = check_file(f, path, want, pos);
    sl_st_close(f);
    return s;
}

sl_status sl_train_load_checkpoint(const char *path, sl_model *m, sl_optim *o, const sl_ckpt_expect *want,
                                   sl_ckpt_position *pos) {
    sl_st_file *f = NULL;
    float *params = NULL, *state = NULL;
    sl_tensor t = SL_TENSOR_EMPTY;
    sl_ckpt_position p = {0};
    sl_status s = sl_st_open(path, &f);
    if (s) return s;
    if ((s = check_file(f, path, want, &p))) goto done;
    const char *gemm = sl_st_meta(f, "cpu_gemm");
    if (gemm && sl__cpu_gemm_choices_adopt(gemm, true, NULL)) {
        SL_WARN("%s: metadata 'cpu_gemm' not used: %s (the CPU GEMMs are chosen anew)", path, sl_errmsg());
        sl_err_clear();
    }
    int64_t osize = 0;
    if ((s = meta_i64(f, path, "optimizer_size", &osize))) goto done;
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
        param_view v;
        if ((s = param_view_of(m, i, &v))) goto done;
        const char *full = v.full;
        size_t off = v.off;
        int rank = v.rank;
        const int64_t *dims = v.dims;
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
    /* the copies are the file's bytes only if it did not shrink meanwhile */
    if ((s = sl_st_intact(f))) goto done;
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

int64_t sl__checkpoint_step(const char *path) {
    const char *b = strrchr(path, '/');
    int64_t step;
    return parse_name(b ? b + 1 : path, CKPT_PREFIX, CKPT_SUFFIX, &step) ? step : -1;
}

int sl__list_numbered(const char *dir, const char *prefix, const char *suffix, char ***out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) {
        /* a missing folder holds nothing; an unreadable one must not look empty (a resume
         * would start from step 0) */
        if (errno == ENOENT) return 0;
        return sl_err(SL_EIO, "cannot list %s: %s", dir, strerror(errno));
    }
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

/* ---- run folders --------------------------------------------------------------------- */

typedef struct {
    char **p;
    int n, cap;
} pathlist;

static sl_status pl_add(pathlist *l, const char *dir, const char *name) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        char **np = realloc(l->p, (size_t)cap * sizeof *np);
        if (!np) return sl_err(SL_ENOMEM, "out of memory listing %s", dir);
        l->p = np;
        l->cap = cap;
    }
    size_t len = strlen(dir) + strlen(name) + 2;
    if (!(l->p[l->n] = malloc(len))) return sl_err(SL_ENOMEM, "out of memory listing %s", dir);
    snprintf(l->p[l->n++], len, "%s/%s", dir, name);
    return SL_OK;
}

/* Append a numbered list (sl__list_numbered) to l. */
static sl_status pl_numbered(pathlist *l, const char *dir, const char *prefix, const char *suffix, int *count) {
    char **files;
    int n = sl__list_numbered(dir, prefix, suffix, &files);
    *count = n > 0 ? n : 0;
    if (n < 0) return n;
    sl_status s = SL_OK;
    for (int i = 0; i < n && !s; i++) {
        const char *slash = strrchr(files[i], '/');
        s = pl_add(l, dir, slash ? slash + 1 : files[i]);
    }
    if (n > 0) sl_train_free_list(files, n);
    return s;
}

/* Is name dir_prefix followed by digits only (ps-0, replica-12)? */
static bool numbered_dir(const char *name, const char *dir_prefix) {
    size_t n = strlen(dir_prefix);
    return strncmp(name, dir_prefix, n) == 0 && name[n] >= '0' && name[n] <= '9' &&
           strspn(name + n, "0123456789") == strlen(name + n);
}

/* Append the numbered files PREFIX*.safetensors of the folder run_dir/name (none when it is
 * not a folder) to l, adding their count to *count. */
static sl_status pl_numbered_sub(pathlist *l, const char *run_dir, const char *name, const char *prefix, int *count) {
    char sub[1200];
    snprintf(sub, sizeof sub, "%s/%s", run_dir, name);
    struct stat sb;
    int k = 0;
    sl_status s = SL_OK;
    if (stat(sub, &sb) == 0 && S_ISDIR(sb.st_mode)) s = pl_numbered(l, sub, prefix, ".safetensors", &k);
    *count += k;
    return s;
}

sl_status sl_train_prepare_run_dir(const char *run_dir, bool overwrite, FILE *console) {
    pathlist l = {0};
    int nckpt = 0, nev = 0, nshard = 0, nres = 0;
    sl_status s = pl_numbered(&l, run_dir, CKPT_PREFIX, CKPT_SUFFIX, &nckpt);
    if (s) goto done;
    DIR *d = opendir(run_dir);
    if (!d) {
        if (errno != ENOENT) s = sl_err(SL_EIO, "cannot list the run folder %s: %s", run_dir, strerror(errno));
        goto done;
    }
    struct dirent *de;
    while (!s && (de = readdir(d))) {
        if (strncmp(de->d_name, "events.out.tfevents.", 20) == 0) {
            if (!(s = pl_add(&l, run_dir, de->d_name))) nev++;
        } else if (numbered_dir(de->d_name, "ps-")) {
            s = pl_numbered_sub(&l, run_dir, de->d_name, "shard-", &nshard);
        } else if (numbered_dir(de->d_name, "replica-")) {
            /* compression residuals of the replicas (sl_train_save_residual) */
            s = pl_numbered_sub(&l, run_dir, de->d_name, "residual-", &nres);
        }
    }
    closedir(d);
    /* the TensorBoard runs RUN_DIR/train and RUN_DIR/eval, or validation (sluice/train.h) */
    static const char *const RUNS[] = {"train", "eval", "validation"};
    for (int k = 0; k < 3 && !s; k++) {
        char sub[1200];
        snprintf(sub, sizeof sub, "%s/%s", run_dir, RUNS[k]);
        DIR *sd = opendir(sub);
        if (!sd) {
            if (errno != ENOENT && errno != ENOTDIR)
                s = sl_err(SL_EIO, "cannot list the run folder's %s: %s", sub, strerror(errno));
            continue;
        }
        while (!s && (de = readdir(sd)))
            if (strncmp(de->d_name, "events.out.tfevents.", 20) == 0 && !(s = pl_add(&l, sub, de->d_name))) nev++;
        closedir(sd);
    }
    if (s || l.n == 0) goto done;
    char what[256];
    size_t len = 0;
    if (nckpt)
        len += (size_t)snprintf(what + len, sizeof what - len, "%d checkpoint%s (newest %s)", nckpt, nckpt > 1 ? "s" : "",
                                strrchr(l.p[0], '/') + 1);
    if (nev && len < sizeof what)
        len += (size_t)snprintf(what + len, sizeof what - len, "%s%d TensorBoard event file%s", len ? ", " : "", nev,
                                nev > 1 ? "s" : "");
    if (nshard && len < sizeof what)
        len += (size_t)snprintf(what + len, sizeof what - len, "%s%d ps shard checkpoint%s", len ? ", " : "", nshard,
                                nshard > 1 ? "s" : "");
    if (nres && len < sizeof what)
        snprintf(what + len, sizeof what - len, "%s%d replica residual file%s", len ? ", " : "", nres,
                 nres > 1 ? "s" : "");
    if (!overwrite) {
        s = sl_err(SL_EINVAL, "run folder %s holds another run's files: %s; a new run would mix with them", run_dir, what);
        sl_err_hint("continue that run with --resume, replace it with --overwrite, or choose another --run-dir");
        goto done;
    }
    if (console) {
        fprintf(console, "run folder %s: removing an earlier run's %s (--overwrite)\n", run_dir, what);
        fflush(console);
    }
    for (int i = 0; i < l.n; i++)
        if (unlink(l.p[i]) != 0 && errno != ENOENT) {
            int e = errno;
            s = sl_err(SL_EIO, "cannot remove %s (an earlier run's file in the run folder): %s", l.p[i], strerror(e));
            sl_err_hint("remove it yourself, or choose another --run-dir; a new run must not start beside it");
            goto done;
        }
done:
    for (int i = 0; i < l.n; i++) free(l.p[i]);
    free(l.p);
    return s;
}

/* ---- per-replica residuals (sluice/strategy.h) ------------------------------------------ */

void sl_train_residual_path(const char *run_dir, int rank, int64_t step, char *buf, size_t n) {
    snprintf(buf, n, "%s/replica-%d/residual-%09" PRId64 ".safetensors", run_dir, rank, step);
}

sl_status sl_train_save_residual(const char *run_dir, int rank, int64_t step, const char *codec, const double *r,
                                 size_t n, int keep) {
    char dir[1200], path[1300];
    snprintf(dir, sizeof dir, "%s/replica-%d", run_dir, rank);
    sl_status s = sl_mkdirs(dir, "replica state folder");
    if (s) return s;
    sl_train_residual_path(run_dir, rank, step, path, sizeof path);
    sl_st_writer *w = NULL;
    if ((s = sl_st_writer_new(&w))) return s;
    sl_st_writer_set_checksums(w, true);
    int64_t dims = (int64_t)n;
    char cnt[32];
    snprintf(cnt, sizeof cnt, "%zu", n);
    if (!(s = sl_st_writer_add(w, "residual", SL_DT_F64, 1, &dims, r)) &&
        !(s = sl_st_writer_set_meta(w, "format", "sluice-residual")) && !(s = sl_st_writer_set_meta(w, "version", "1")) &&
        !(s = set_meta_i64(w, "step", step)) && !(s = set_meta_i64(w, "rank", rank)) &&
        !(s = sl_st_writer_set_meta(w, "codec", codec)) && !(s = sl_st_writer_set_meta(w, "count", cnt)))
        s = sl_st_writer_write(w, path);
    sl_st_writer_free(w);
    if (s) return s;
    if (keep > 0) {
        char **list;
        int k = sl__list_numbered(dir, "residual-", ".safetensors", &list);
        for (int i = keep; i < k; i++)
            if (unlink(list[i]) != 0 && errno != ENOENT)
                fprintf(stderr, "warning: cannot remove old residual %s (keep=%d): %s\n", list[i], keep, strerror(errno));
        if (k > 0) sl_train_free_list(list, k);
    }
    return SL_OK;
}

sl_status sl_train_load_residual(const char *run_dir, int rank, int64_t step, const char *codec, double *r, size_t n) {
    char path[1300];
    sl_train_residual_path(run_dir, rank, step, path, sizeof path);
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT)
        return sl_err(SL_ENOTFOUND, "%s: no residual for rank %d at step %" PRId64, path, rank, step);
    sl_st_file *f = NULL;
    sl_tensor t = SL_TENSOR_EMPTY;
    sl_status s = sl_st_open(path, &f);
    if (s) return s;
    bool present = false;
    if ((s = sl_st_verify(f, &present))) goto done;
    const char *fmt = sl_st_meta(f, "format"), *cd = sl_st_meta(f, "codec"), *st = sl_st_meta(f, "step"),
               *rk = sl_st_meta(f, "rank");
    char want_step[32], want_rank[16];
    snprintf(want_step, sizeof want_step, "%" PRId64, step);
    snprintf(want_rank, sizeof want_rank, "%d", rank);
    if (!present || !fmt || strcmp(fmt, "sluice-residual") != 0 || !st || strcmp(st, want_step) != 0 || !rk ||
        strcmp(rk, want_rank) != 0 || !cd) {
        s = sl_err(SL_ECORRUPT, "%s: not the residual of rank %d at step %" PRId64
                   " (format %s, step %s, rank %s, checksums %s)", path, rank, step, fmt ? fmt : "missing",
                   st ? st : "missing", rk ? rk : "missing", present ? "present" : "missing");
        goto done;
    }
    if (strcmp(cd, codec) != 0) {
        s = sl_err(SL_EINVAL, "%s: the residual of compress=%s; this run uses compress=%s", path, cd, codec);
        sl_err_hint("resume with the compression the run was checkpointed with, or start a new run");
        goto done;
    }
    if ((s = sl_st_get(f, "residual", &t))) {
        if (s == SL_ENOTFOUND) s = sl_err(SL_ECORRUPT, "%s: no tensor 'residual'", path);
        goto done;
    }
    if (t.dtype != SL_DT_F64 || t.rank != 1 || t.dims[0] != (int64_t)n) {
        char got[96];
        s = sl_err(SL_EINVAL, "%s: residual is %s, the model's gradient has %zu float64 values", path,
                   sl_tensor_describe(&t, got, sizeof got), n);
        goto done;
    }
    const double *v = t.data;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) {
            s = sl_err(SL_ECORRUPT, "%s: residual value %zu is not finite", path, i);
            goto done;
        }
    memcpy(r, v, n * sizeof *r);
    s = sl_st_intact(f);
done:
    sl_tensor_release(&t);
    sl_st_close(f);
    return s;
}
