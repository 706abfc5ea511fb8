/* The statements `snapshot "PATH" [shard_bytes=N]` and the source `load "PATH"`
 * (sl_ds_snapshot, sl_ds_load; include/sluice/from_config.h).
 *
 * A snapshot's fingerprint is text: what the statements before it say, in a canonical form
 * (each statement's name and arguments as parsed, so spacing and comments do not count but
 * every value does), what the env gives them (shards, seed, batch divisor), and the identity
 * (path, size, modification time in ns) of every file they read: the files of `files`, the
 * manifest of a `load`. For `sample` / `choose` sources it also holds every pipeline block
 * of the file (their statements; the identities of their files are not covered). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline/from_config_priv.h"
#include "pipeline/snapfile.h"

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->p ? t->p + t->n : NULL, t->p ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) return;
        if (t->p && t->n + (size_t)k < t->cap) {
            t->n += (size_t)k;
            return;
        }
        size_t ncap = t->cap ? t->cap : 1024;
        while (ncap <= t->n + (size_t)k) ncap *= 2;
        char *np = realloc(t->p, ncap);
        if (!np) {
            t->oom = true;
            return;
        }
        t->p = np;
        t->cap = ncap;
    }
}

static void put_value(text *t, const sl_cfg_value *v);

static void put_args(text *t, const sl_cfg_arg *a, int n) {
    for (int i = 0; i < n; i++) {
        put(t, i ? ", " : "");
        if (a[i].key) put(t, "%s=", a[i].key);
        put_value(t, &a[i].v);
    }
}

static void put_value(text *t, const sl_cfg_value *v) {
    switch (v->kind) {
    case SL_CV_NUMBER: put(t, "%.17g%s", v->num, v->is_int ? "i" : ""); break;
    case SL_CV_STRING: put(t, "\"%zu:%s\"", strlen(v->text), v->text); break;
    case SL_CV_LIST: put(t, "["), put_args(t, v->args, v->nargs), put(t, "]"); break;
    case SL_CV_CALL: put(t, "%s(", v->text), put_args(t, v->args, v->nargs), put(t, ")"); break;
    case SL_CV_PIPE: put(t, "|"); break;
    default: put(t, "%s", v->text ? v->text : "?"); break;
    }
}

static void put_stmt(text *t, const sl_cfg_stmt *s) {
    put(t, "%s ", s->name);
    put_args(t, s->args, s->nargs);
    if (s->has_body) {
        put(t, " {\n");
        for (int i = 0; i < s->nbody; i++) put_stmt(t, &s->body[i]);
        put(t, "}");
    }
    put(t, "\n");
}

static void put_file(text *t, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        put(t, "file %s: missing\n", path);
        return;
    }
    put(t, "file %s size %lld mtime %lld.%09ld\n", path, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
        (long)st.st_mtim.tv_nsec);
}

static sl_status read_path(builder *b, const op_def *d, const sl_cfg_stmt *s, char *out, size_t cap) {
    const sl_cfg_value *v = sl_cfg_pos(s, 0);
    const char *p = "";
    if (sl__fc_read_word(b, v, "a folder path", &p)) return sl__fc_hint_usage(d), sl_errcode();
    int n = (p[0] == '/' || !b->base[0]) ? snprintf(out, cap, "%s", p) : snprintf(out, cap, "%s/%s", b->base, p);
    if (n < 0 || (size_t)n >= cap) return sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "path too long");
    if (!p[0]) return sl__fc_err_usage(b, d, v->loc, SL_EINVAL, "%s: the path is empty", d->name);
    return SL_OK;
}

sl_status sl__fc_build_snapshot(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    char path[4096];
    if (read_path(b, d, s, path, sizeof path)) return sl_errcode();
    sl_snapshot_opts o = sl_snapshot_opts_default();
    const sl_cfg_value *v = sl_cfg_opt(s, "shard_bytes");
    if (v && sl__fc_read_int(b, d, v, 1, INT64_MAX, &o.shard_bytes)) return sl_errcode();
    text t = {0};
    put(&t, "sluice snapshot fingerprint 1\nenv shards %lld index %lld seed %llu batch_divisor %lld\n",
        (long long)b->env.num_shards, (long long)b->env.shard_index, (unsigned long long)b->env.seed,
        (long long)b->env.batch_divisor);
    for (int i = 0; i < b->stmt_index; i++) {
        const sl_cfg_stmt *st = &b->pstmt->body[i];
        put_stmt(&t, st);
        if (!strcmp(st->name, "load")) {
            char lp[4096], man[4200];
            if (read_path(b, d, st, lp, sizeof lp) == SL_OK) {
                snprintf(man, sizeof man, "%s/%s", lp, SL__SNAP_MANIFEST);
                put_file(&t, man);
            }
        }
    }
    for (int i = 0; i < b->npaths; i++) put_file(&t, b->paths[i]);
    if (b->src == SRC_MIX) {
        int n;
        const sl_cfg_stmt *root = sl_cfg_root(b->cfg, &n);
        for (int i = 0; i < n; i++)
            if (!strcmp(root[i].name, "pipeline")) put_stmt(&t, &root[i]);
    }
    if (t.oom) {
        free(t.p);
        return sl_err(SL_ENOMEM, "out of memory building the snapshot's fingerprint");
    }
    sl_dataset *out;
    sl_status st = sl_ds_snapshot(b->ds, path, t.p, &o, &out);
    free(t.p);
    return sl__fc_chain(b, s, st, out, "snapshot");
}

sl_status sl__fc_build_load(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    char path[4096];
    if (read_path(b, d, s, path, sizeof path)) return sl_errcode();
    sl_dataset *out;
    sl_status st = sl_ds_load(path, &out);
    if (st) return sl__fc_construct_failed(b, s, st);
    b->ds = out;
    b->src = SRC_LOAD;
    b->materialised = true;
    sl__fc_label(b, out, "load");
    snprintf(out->where, sizeof out->where, "%s:%d", sl_cfg_filename(b->cfg), s->loc.line);
    return SL_OK;
}
