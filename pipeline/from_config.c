/* Pipelines from the config language: `pipeline NAME { ... }` -> a dataset graph. The
 * statements and functions are specified in include/sluice/from_config.h.
 *
 * Workload: a block of a dozen statements, interpreted once at start-up (per replica), so
 * this file spends its effort on messages, not speed: every mistake is reported at its
 * spot in the file (sl_cfg_err) with a hint, and each op and function is described by a
 * table entry (name, usage, options) that the checks and the did-you-mean hints share.
 *
 * Building is a single pass over the statements. The only look-ahead is for the source:
 * `files`, `shard` and `interleave` written one after another are collected first and the
 * file-reading datasets are made ("materialised") when the first element op arrives, because
 * sharding by file and interleaving change how the files are read, not what follows.
 *
 * This file builds the ops; map's function calls are parsed in from_config_fn.c, filter's
 * comparison is evaluated in from_config_filter.c, and the messages and typed readers all of
 * them use are in from_config_read.c (their shared builder: pipeline/from_config_priv.h). */
#include <glob.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/from_config_priv.h"
#include "sluice/log.h"

#define MAX_FNS 32

/* ---- paths ---- */

static sl_status resolve(builder *b, const sl_cfg_value *v, const char *p, char *out, size_t cap) {
    int n = (p[0] == '/' || !b->base[0]) ? snprintf(out, cap, "%s", p) : snprintf(out, cap, "%s/%s", b->base, p);
    if (n < 0 || (size_t)n >= cap) return sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "path too long");
    return SL_OK;
}

static int cmp_str(const void *a, const void *c) { return strcmp(*(char *const *)a, *(char *const *)c); }

static void free_strs(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* ---- the statements ---- */

static uint64_t default_seed(builder *b) { return sl__mix(b->env.seed, (uint64_t)b->stmt_index + 1); }

static sl_status build_files(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    const sl_cfg_value *v;
    sl_status st = SL_OK;
    int n = sl_cfg_npos(s);
    b->patterns = calloc((size_t)n, sizeof *b->patterns);
    if (!b->patterns) return sl_err(SL_ENOMEM, "out of memory reading the files statement");
    for (int i = 0; i < n; i++) {
        const sl_cfg_value *pv = sl_cfg_pos(s, i);
        const char *pat;
        char full[4096];
        if (pv->kind != SL_CV_STRING && pv->kind != SL_CV_IDENT)
            return sl__fc_err_usage(b, d, pv->loc, SL_EINVAL, "expected a file pattern in quotes, found '%s'", pv->text);
        pat = pv->text;
        if ((st = resolve(b, pv, pat, full, sizeof full))) return st;
        if (!(b->patterns[i] = strdup(full))) return sl_err(SL_ENOMEM, "out of memory");
        b->npatterns = i + 1;
        glob_t g;
        int r = glob(full, 0, NULL, &g);
        if (r == GLOB_NOMATCH || (r == 0 && g.gl_pathc == 0)) {
            if (r == 0) globfree(&g);
            if (strcmp(full, pat) != 0)
                sl_cfg_err(b->cfg, pv->loc, SL_ENOTFOUND, "no file matches '%s' (looked for '%s')", pat, full);
            else
                sl_cfg_err(b->cfg, pv->loc, SL_ENOTFOUND, "no file matches '%s'", pat);
            if (pat[0] != '/')
                sl_err_hint("relative paths start at %s", b->base[0] ? b->base : "the current directory");
            else
                sl_err_hint("check the path; a pattern like \"dir/train-*.tfrecord\" picks several files");
            return SL_ENOTFOUND;
        }
        if (r != 0) return sl_cfg_err(b->cfg, pv->loc, SL_EIO, "cannot list '%s'", full);
        char **np = realloc(b->paths, sizeof *np * (size_t)(b->npaths + (int)g.gl_pathc));
        if (!np) {
            globfree(&g);
            return sl_err(SL_ENOMEM, "out of memory listing files");
        }
        b->paths = np;
        for (size_t k = 0; k < g.gl_pathc; k++) {
            if (!(b->paths[b->npaths] = strdup(g.gl_pathv[k]))) {
                globfree(&g);
                return sl_err(SL_ENOMEM, "out of memory listing files");
            }
            b->npaths++;
        }
        globfree(&g);
    }
    qsort(b->paths, (size_t)b->npaths, sizeof *b->paths, cmp_str);
    int u = 0;
    for (int i = 0; i < b->npaths; i++) {
        if (u > 0 && strcmp(b->paths[u - 1], b->paths[i]) == 0) free(b->paths[i]);
        else b->paths[u++] = b->paths[i];
    }
    b->npaths = u;

    b->ropts = sl_tfr_read_opts_default();
    b->files_seed = default_seed(b);
    if ((v = sl_cfg_opt(s, "shuffle")) && sl__fc_read_bool(b, v, &b->files_shuffle)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "seed"))) {
        int64_t seed;
        if (sl__fc_read_int(b, d, v, 0, INT64_MAX, &seed)) return sl_errcode();
        b->files_seed = (uint64_t)seed;
    }
    if ((v = sl_cfg_opt(s, "compression"))) {
        const char *w = NULL;
        if (sl__fc_read_word(b, v, "a compression", &w) || sl_compression_parse(w, &b->ropts.compression)) {
            sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "unknown compression '%s'", w ? w : v->text);
            sl_err_hint("compression is auto (detect), none, gzip or zlib");
            return SL_EINVAL;
        }
    }
    if ((v = sl_cfg_opt(s, "skip_corrupt")) && sl__fc_read_bool(b, v, &b->ropts.skip_corrupt)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "verify_crc")) && sl__fc_read_bool(b, v, &b->ropts.verify_data_crc)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "max_record"))) { /* bytes; limit on one compressed record (tfrecord.h) */
        int64_t mr;
        if (sl__fc_read_int(b, d, v, 1, (int64_t)1 << 62, &mr)) return sl_errcode();
        b->ropts.max_record = (uint64_t)mr;
    }
    b->src = SRC_FILES;
    return SL_OK;
}

/* A shard by data that was written among the file statements applies to the records. */
static sl_status shard_records(builder *b) {
    if (!b->data_shard_stmt) return SL_OK;
    sl_dataset *out;
    sl_status st = sl_ds_shard(b->ds, b->ds_num, b->ds_index, &out);
    return sl__fc_chain(b, b->data_shard_stmt, st, out, "shard");
}

/* Turn the collected files, shard and interleave statements into datasets. */
static sl_status materialise(builder *b) {
    if (b->src != SRC_FILES || b->materialised) return SL_OK;
    b->materialised = true;
    const sl_cfg_stmt *s = b->src_stmt;
    sl_status st;
    if (b->global_stmt) {
        sl_dataset *g = NULL;
        st = sl_ds_tfrecord_global((const char *const *)b->paths, b->npaths, &b->ropts, &b->gopts, &g);
        if (st) return sl__fc_construct_failed(b, b->global_stmt, st);
        b->ds = g;
        sl__fc_label(b, g, "shuffle");
        return SL_OK;
    }
    bool by_file = b->file_shard_stmt && b->fs_num > 1;
    if (b->interleave_stmt || b->files_shuffle) {
        sl_dataset *lf = NULL, *sh = NULL, *il = NULL;
        st = sl_ds_list_files((const char *const *)b->patterns, b->npatterns, b->files_shuffle,
                              b->files_seed, &lf);
        if (st) return sl__fc_construct_failed(b, s, st);
        sl__fc_label(b, lf, "list_files");
        if (by_file) {
            st = sl_ds_shard(lf, b->fs_num, b->fs_index, &sh);
            sl_dataset_unref(lf);
            if (st) return sl__fc_construct_failed(b, b->file_shard_stmt, st);
            sl__fc_label(b, sh, "shard");
            lf = sh;
        }
        sl_interleave_opts io = b->iopts;
        if (!b->interleave_stmt) { /* shuffled files, read one after another */
            io = sl_interleave_opts_default();
            io.cycle_length = 1;
            io.block_length = 1;
            io.parallelism = 0;
        }
        st = sl_ds_interleave_tfrecord(lf, &b->ropts, &io, &il);
        sl_dataset_unref(lf);
        if (st) return sl__fc_construct_failed(b, b->interleave_stmt ? b->interleave_stmt : s, st);
        b->ds = il;
        sl__fc_label(b, il, b->interleave_stmt ? "interleave" : "files");
        return shard_records(b);
    }
    sl_dataset *tf = NULL;
    if (by_file) {
        const char **mine = calloc((size_t)b->npaths, sizeof *mine);
        if (!mine) return sl_err(SL_ENOMEM, "out of memory");
        int n = 0;
        for (int i = 0; i < b->npaths; i++)
            if (i % b->fs_num == b->fs_index) mine[n++] = b->paths[i];
        st = sl_ds_tfrecord(mine, n, &b->ropts, &tf);
        free(mine);
    } else {
        st = sl_ds_tfrecord((const char *const *)b->patterns, b->npatterns, &b->ropts, &tf);
    }
    if (st) return sl__fc_construct_failed(b, s, st);
    b->ds = tf;
    sl__fc_label(b, tf, "files");
    return shard_records(b);
}

static sl_status build_range(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    int64_t a, z, step = 1;
    if (sl__fc_read_int(b, d, sl_cfg_pos(s, 0), INT64_MIN, INT64_MAX, &a) ||
        sl__fc_read_int(b, d, sl_cfg_pos(s, 1), INT64_MIN, INT64_MAX, &z))
        return sl_errcode();
    if (sl_cfg_pos(s, 2)) {
        if (sl__fc_read_int(b, d, sl_cfg_pos(s, 2), INT64_MIN, INT64_MAX, &step)) return sl_errcode();
        if (step == 0) return sl__fc_err_usage(b, d, sl_cfg_pos(s, 2)->loc, SL_EINVAL, "range step must not be 0");
    }
    sl_dataset *r;
    sl_status st = sl_ds_range(a, z, step, &r);
    if (st) return sl__fc_construct_failed(b, s, st);
    b->ds = r;
    b->src = SRC_RANGE;
    b->materialised = true;
    sl__fc_label(b, r, "range");
    return SL_OK;
}

/* Files that do not split evenly over the replicas (said once, by shard 0): the replicas
 * with fewer files are likely to run out first (under strategy ring every epoch then ends
 * there, sluice/train.h). */
static void uneven_files_warning(const builder *b, int64_t num) {
    int64_t more = b->npaths % num, lo = b->npaths / num;
    char a[64], z[64];
    if (more == 1) snprintf(a, sizeof a, "replica 0 reads %lld", (long long)lo + 1);
    else snprintf(a, sizeof a, "replicas 0-%lld read %lld each", (long long)more - 1, (long long)lo + 1);
    if (num - more == 1) snprintf(z, sizeof z, "replica %lld reads %lld", (long long)more, (long long)lo);
    else snprintf(z, sizeof z, "replicas %lld-%lld read %lld each", (long long)more, (long long)num - 1, (long long)lo);
    SL_WARN("pipeline '%s': %d files do not split evenly over %lld replicas (shard by file): %s, %s; "
            "use a file count that is a multiple of the replicas, or shard data",
            b->pname, b->npaths, (long long)num, a, z);
}

static sl_status build_shard(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    static const char *const modes[] = {"auto", "file", "data"};
    int mode = 0;
    const sl_cfg_value *v = sl_cfg_pos(s, 0);
    if (v) {
        mode = -1;
        for (int i = 0; i < 3; i++)
            if ((v->kind == SL_CV_IDENT || v->kind == SL_CV_STRING) && strcmp(v->text, modes[i]) == 0) mode = i;
        if (mode < 0) {
            sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "unknown shard mode '%s'", v->text);
            const char *sug = sl_suggest(v->text, modes, 3);
            if (sug) sl_err_hint("did you mean '%s'?", sug);
            else sl_err_hint("shard auto, shard file or shard data");
            return SL_EINVAL;
        }
    }
    int64_t num = b->env.num_shards, index = b->env.shard_index;
    if ((v = sl_cfg_opt(s, "num")) && sl__fc_read_int(b, d, v, 1, INT32_MAX, &num)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "index"))) {
        if (sl__fc_read_int(b, d, v, 0, INT32_MAX, &index)) return sl_errcode();
        if (index >= num)
            return sl__fc_err_usage(b, d, v->loc, SL_ERANGE, "shard index %lld is outside 0..%lld", (long long)index,
                             (long long)num - 1);
    } else if (index >= num) {
        return sl__fc_err_usage(b, d, s->loc, SL_ERANGE, "shard index %lld (from the replica) is outside 0..%lld",
                         (long long)index, (long long)num - 1);
    }
    bool at_files = b->src == SRC_FILES && !b->materialised;
    if (mode == 1) {
        if (b->src != SRC_FILES) {
            sl_cfg_err(b->cfg, s->loc, SL_EINVAL, "shard file needs a files source");
            sl_err_hint("use shard data to keep every %lld-th element", (long long)num);
            return SL_EINVAL;
        }
        if (!at_files) {
            sl_cfg_err(b->cfg, s->loc, SL_EINVAL, "shard file must come right after files, before the ops that use records");
            sl_err_hint("move it up, or use shard data here");
            return SL_EINVAL;
        }
        if (b->npaths < num) {
            sl_cfg_err(b->cfg, s->loc, SL_EINVAL, "shard file: %d file%s for %lld shards: some replicas would read nothing",
                       b->npaths, b->npaths == 1 ? "" : "s", (long long)num);
            sl_err_hint("use shard data (or shard auto, which picks data here)");
            return SL_EINVAL;
        }
    }
    bool by_file = mode == 1 || (mode == 0 && at_files && b->npaths >= num);
    const sl_cfg_stmt *before = b->file_shard_stmt ? b->file_shard_stmt : b->data_shard_stmt;
    if (at_files && before) {
        sl_cfg_err(b->cfg, s->loc, SL_EINVAL, "the files are already sharded (line %d)", before->loc.line);
        sl_err_hint("one shard statement per pipeline is enough");
        return SL_EINVAL;
    }
    if (by_file) {
        b->file_shard_stmt = s;
        b->fs_num = num;
        b->fs_index = index;
        if (num > 1 && b->npaths % num && index == 0) uneven_files_warning(b, num);
        return SL_OK;
    }
    if (num == 1) return SL_OK;
    if (at_files) { /* after the reader (and its interleave), which may still follow */
        b->data_shard_stmt = s;
        b->ds_num = num;
        b->ds_index = index;
        return SL_OK;
    }
    sl_status st = materialise(b);
    if (st) return st;
    sl_dataset *out;
    st = sl_ds_shard(b->ds, num, index, &out);
    return sl__fc_chain(b, s, st, out, "shard");
}

static sl_status build_interleave(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    if (b->src != SRC_FILES || b->materialised) {
        sl_cfg_err(b->cfg, s->loc, SL_EINVAL, b->src != SRC_FILES ? "interleave reads files: it needs a files source"
                                                                  : "interleave must come right after files (and shard)");
        sl_err_hint("interleave says how the files are read: write it after files, before the other ops");
        return SL_EINVAL;
    }
    if (b->interleave_stmt) {
        sl_cfg_err(b->cfg, s->loc, SL_EINVAL, "interleave given twice (also at line %d)", b->interleave_stmt->loc.line);
        return SL_EINVAL;
    }
    sl_interleave_opts o = sl_interleave_opts_default();
    const sl_cfg_value *v;
    int64_t n;
    if ((v = sl_cfg_opt(s, "cycle")) && sl__fc_read_int_or_auto(b, d, v, 1, 4096, &o.cycle_length)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "block"))) {
        if (sl__fc_read_int(b, d, v, 1, 1 << 20, &n)) return sl_errcode();
        o.block_length = (int)n;
    }
    if ((v = sl_cfg_opt(s, "parallel")) && sl__fc_read_int_or_auto(b, d, v, 0, 256, &o.parallelism)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "deterministic")) && sl__fc_read_bool(b, v, &o.deterministic)) return sl_errcode();
    b->interleave_stmt = s;
    b->iopts = o;
    return SL_OK;
}

/* `shuffle global`: the files' records in one permutation, read by position (it replaces
 * the reader, the interleave and the shard: the op shards by position itself). */
static sl_status build_shuffle_global(builder *b, const op_def *d, const sl_cfg_stmt *s, int64_t seed,
                                      bool reshuffle) {
    const sl_cfg_stmt *other = b->file_shard_stmt ? b->file_shard_stmt : b->data_shard_stmt
                               ? b->data_shard_stmt : b->interleave_stmt;
    if (b->src != SRC_FILES || b->materialised) {
        sl_cfg_err(b->cfg, s->loc, SL_EINVAL, b->src != SRC_FILES ? "shuffle global reads files by position: it "
                   "needs a files source" : "shuffle global must come right after files");
        sl_err_hint("files \"PATTERN\" then shuffle global, then map, batch, ...");
        return SL_EINVAL;
    }
    if (other || b->files_shuffle) {
        sl_cfg_err(b->cfg, s->loc, SL_EINVAL, "shuffle global with %s (line %d)", other ? other->name : "files shuffle=true",
                   other ? other->loc.line : b->src_stmt->loc.line);
        sl_err_hint("shuffle global orders every record and gives each replica its own positions of that order "
                    "itself: remove the %s", other ? other->name : "files' shuffle=true");
        return SL_EINVAL;
    }
    const sl_cfg_value *v = sl_cfg_opt(s, "index_dir");
    b->gopts = sl_global_opts_default();
    if (v) {
        if (v->kind != SL_CV_STRING) return sl__fc_err_usage(b, d, v->loc, SL_EINVAL, "index_dir is a \"PATH\"");
        if (v->text[0] == '/' || !b->base[0]) snprintf(b->index_dir, sizeof b->index_dir, "%s", v->text);
        else snprintf(b->index_dir, sizeof b->index_dir, "%s/%s", b->base, v->text);
        b->gopts.index.cache_dir = b->index_dir;
    }
    b->gopts.num_shards = b->env.num_shards;
    b->gopts.shard_index = b->env.shard_index;
    b->gopts.seed = (uint64_t)seed;
    b->gopts.reshuffle_each_epoch = reshuffle;
    b->global_stmt = s;
    return materialise(b);
}

static sl_status build_shuffle(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    int64_t buffer, seed;
    bool reshuffle = true;
    const sl_cfg_value *v, *first = sl_cfg_pos(s, 0);
    bool global = first && first->kind == SL_CV_IDENT && strcmp(first->text, "global") == 0;
    if (!global && (v = sl_cfg_opt(s, "index_dir")))
        return sl__fc_err_usage(b, d, v->loc, SL_EINVAL, "index_dir is an option of shuffle global");
    if (!global && sl__fc_read_int(b, d, first, 1, (int64_t)1 << 31, &buffer)) return sl_errcode();
    seed = (int64_t)default_seed(b);
    if ((v = sl_cfg_opt(s, "seed")) && sl__fc_read_int(b, d, v, 0, INT64_MAX, &seed)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "reshuffle")) && sl__fc_read_bool(b, v, &reshuffle)) return sl_errcode();
    if (global) return build_shuffle_global(b, d, s, seed, reshuffle);
    sl_status mst = materialise(b);
    if (mst) return mst;
    sl_dataset *out;
    sl_status st = sl_ds_shuffle(b->ds, buffer, (uint64_t)seed, reshuffle, &out);
    return sl__fc_chain(b, s, st, out, "shuffle");
}

static sl_status build_map(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    sl_fn *fns[MAX_FNS];
    int n = 0;
    bool want_fn = true;
    const sl_cfg_value *last_pipe = NULL;
    sl_status st = SL_OK;
    for (int i = 0; i < s->nargs && !st; i++) {
        const sl_cfg_arg *a = &s->args[i];
        const sl_cfg_value *v = &a->v;
        if (a->key) continue;
        if (v->kind == SL_CV_PIPE) {
            if (want_fn) st = sl__fc_err_usage(b, d, v->loc, SL_EINVAL, "expected a function before '|'");
            want_fn = true;
            last_pipe = v;
        } else if (v->kind == SL_CV_CALL) {
            if (!want_fn) {
                st = sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "expected '|' between functions");
                sl_err_hint("chain functions with '|': f(...) | g(...)");
            } else if (n == MAX_FNS) {
                st = sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "more than %d functions in one map", MAX_FNS);
            } else if ((st = sl__fc_build_call(b, v, &fns[n])) == SL_OK) {
                n++;
                want_fn = false;
            }
        } else if (v->kind == SL_CV_IDENT && sl__fc_fn_usage(v->text)) {
            st = sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "'%s' is a function: call it with its arguments", v->text);
            sl_err_hint("usage: %s", sl__fc_fn_usage(v->text));
        } else if (v->kind == SL_CV_IDENT) {
            st = sl__fc_unknown_fn(b, v);
        } else {
            st = sl__fc_err_usage(b, d, v->loc, SL_EINVAL, "expected a function call like decode_jpeg(image), found '%s'", v->text);
        }
    }
    if (!st && n == 0) st = sl__fc_err_usage(b, d, s->loc, SL_EINVAL, "map needs at least one function");
    if (!st && want_fn && last_pipe) st = sl__fc_err_usage(b, d, last_pipe->loc, SL_EINVAL, "nothing after '|'");
    int par = SL_AUTO;
    bool det = true;
    const sl_cfg_value *v;
    if (!st && (v = sl_cfg_opt(s, "parallel"))) st = sl__fc_read_int_or_auto(b, d, v, 1, 4096, &par);
    if (!st && (v = sl_cfg_opt(s, "deterministic"))) st = sl__fc_read_bool(b, v, &det);
    sl_fn *fn = NULL;
    if (!st) {
        st = sl_fn_chain(fns, n, &fn);
        if (st) sl__fc_construct_failed(b, s, st);
    }
    for (int i = 0; i < n; i++) sl_fn_unref(fns[i]);
    if (st) return st;
    sl_dataset *out;
    st = sl_ds_map(b->ds, fn, par, det, &out);
    sl_fn_unref(fn);
    return sl__fc_chain(b, s, st, out, "map");
}

static sl_status build_batch(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    static const char *const flags[] = {"drop_remainder", "padded"};
    int64_t size;
    if (sl__fc_read_int(b, d, sl_cfg_pos(s, 0), 1, 1 << 24, &size)) return sl_errcode();
    int64_t w = b->env.batch_divisor;
    if (w > 1) {
        if (size % w != 0) {
            sl_cfg_err(b->cfg, sl_cfg_pos(s, 0)->loc, SL_EINVAL,
                       "pipeline '%s': batch %lld does not divide over %lld replicas", b->pname, (long long)size,
                       (long long)w);
            sl_err_hint("the batch in the config is the global batch: each replica takes batch/%lld, so make it a "
                        "multiple of %lld", (long long)w, (long long)w);
            return SL_EINVAL;
        }
        size /= w;
    }
    sl_batch_opts o = sl_batch_opts_default(size);
    for (int i = 1; i < sl_cfg_npos(s); i++) {
        const sl_cfg_value *v = sl_cfg_pos(s, i);
        if (v->kind == SL_CV_IDENT && strcmp(v->text, "drop_remainder") == 0) o.drop_remainder = true;
        else if (v->kind == SL_CV_IDENT && strcmp(v->text, "padded") == 0) o.padded = true;
        else {
            sl_cfg_err(b->cfg, v->loc, SL_EINVAL, "unknown batch flag '%s'", v->text);
            const char *sug = v->kind == SL_CV_IDENT ? sl_suggest(v->text, flags, 2) : NULL;
            if (sug) sl_err_hint("did you mean '%s'?", sug);
            else sl__fc_hint_usage(d);
            return SL_EINVAL;
        }
    }
    const sl_cfg_value *v;
    if ((v = sl_cfg_opt(s, "drop_remainder")) && sl__fc_read_bool(b, v, &o.drop_remainder)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "padded")) && sl__fc_read_bool(b, v, &o.padded)) return sl_errcode();
    if ((v = sl_cfg_opt(s, "pad"))) {
        if (sl_cfg_double(b->cfg, v, &o.pad_value)) return sl_errcode();
        o.padded = true;
    }
    sl_dataset *out;
    sl_status st = sl_ds_batch(b->ds, &o, &out);
    return sl__fc_chain(b, s, st, out, "batch");
}

static sl_status build_prefetch(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    int n = SL_AUTO;
    const sl_cfg_value *v = sl_cfg_pos(s, 0);
    if (v && sl__fc_read_int_or_auto(b, d, v, 1, 1 << 20, &n)) return sl_errcode();
    sl_dataset *out;
    sl_status st = sl_ds_prefetch(b->ds, n, &out);
    return sl__fc_chain(b, s, st, out, "prefetch");
}

static sl_status build_repeat(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    int64_t n = SL_INFINITE;
    const sl_cfg_value *v = sl_cfg_pos(s, 0);
    if (v && sl__fc_read_int(b, d, v, 0, INT64_MAX, &n)) return sl_errcode();
    sl_dataset *out;
    sl_status st = sl_ds_repeat(b->ds, n, &out);
    return sl__fc_chain(b, s, st, out, "repeat");
}

static sl_status build_take_skip(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    int64_t n;
    if (sl__fc_read_int(b, d, sl_cfg_pos(s, 0), 0, INT64_MAX, &n)) return sl_errcode();
    sl_dataset *out;
    bool take = strcmp(d->name, "take") == 0;
    sl_status st = take ? sl_ds_take(b->ds, n, &out) : sl_ds_skip(b->ds, n, &out);
    return sl__fc_chain(b, s, st, out, d->name);
}

static sl_status build_cache(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    const sl_cfg_value *v = sl_cfg_pos(s, 0);
    char full[4096];
    const char *path = NULL;
    if (v) {
        const char *p = "";
        if (sl__fc_read_word(b, v, "a file path", &p)) return sl__fc_hint_usage(d), sl_errcode();
        if (resolve(b, v, p, full, sizeof full)) return SL_EINVAL;
        path = full;
    }
    sl_dataset *out;
    sl_status st = sl_ds_cache(b->ds, path, &out);
    return sl__fc_chain(b, s, st, out, "cache");
}

static sl_status build_ignore_errors(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    sl_dataset *out;
    sl_status st = sl_ds_ignore_errors(b->ds, &out);
    return sl__fc_chain(b, s, st, out, "ignore_errors");
}

/* ---- the op table and the driver ---- */

static const op_def OPS[] = {
    {"files", "files \"GLOB\"... [shuffle=BOOL] [seed=N] [compression=auto|none|gzip|zlib]\n      [skip_corrupt=BOOL] [verify_crc=BOOL] [max_record=BYTES]",
     {"shuffle", "seed", "compression", "skip_corrupt", "verify_crc", "max_record"}, 1, -1, build_files},
    {"range", "range START STOP [STEP]", {0}, 2, 3, build_range},
    {"shard", "shard [auto|file|data] [num=N] [index=I]", {"num", "index"}, 0, 1, build_shard},
    {"interleave", "interleave [cycle=N|auto] [block=N] [parallel=N|auto] [deterministic=BOOL]",
     {"cycle", "block", "parallel", "deterministic"}, 0, 0, build_interleave},
    {"shuffle", "shuffle BUFFER|global [seed=N] [reshuffle=BOOL] [index_dir=\"PATH\"]", {"seed", "reshuffle", "index_dir"},
     1, 1, build_shuffle},
    {"map", "map FN(...) [| FN(...)]... [parallel=N|auto] [deterministic=BOOL]", {"parallel", "deterministic"}, 0,
     -1, build_map},
    {"batch", "batch N [drop_remainder] [padded] [pad=VALUE]", {"drop_remainder", "padded", "pad"}, 1, 3,
     build_batch},
    {"prefetch", "prefetch [N|auto]", {0}, 0, 1, build_prefetch},
    {"repeat", "repeat [N]   (no N: forever)", {0}, 0, 1, build_repeat},
    {"take", "take N", {0}, 1, 1, build_take_skip},
    {"skip", "skip N", {0}, 1, 1, build_take_skip},
    {"cache", "cache [\"PATH\"]   (no PATH: in memory)", {0}, 0, 1, build_cache},
    {"snapshot", "snapshot \"PATH\" [shard_bytes=N]", {"shard_bytes"}, 1, 1, sl__fc_build_snapshot},
    {"load", "load \"PATH\"   (a folder sl_ds_save wrote)", {0}, 1, 1, sl__fc_build_load},
    {"ignore_errors", "ignore_errors", {0}, 0, 0, build_ignore_errors},
    {"filter", "filter COMPONENT OP NUMBER   (OP: == != < <= > >= or eq ne lt le gt ge)", {0}, 3, 3, sl__fc_build_filter},
    {"window", "window SIZE [shift=N] [stride=N] [drop_remainder]", {"shift", "stride", "drop_remainder"}, 1, 2, sl__fc_build_window},
    {"group_by_window", "group_by_window key=COMPONENT [modulo=N] window=N", {"key", "modulo", "window"}, 0, 0, sl__fc_build_group_by_window},
    {"bucket_by_sequence_length", "bucket_by_sequence_length COMPONENT boundaries=[B, ...] batch_sizes=[N, ...] [pad=VALUE] [pad_to_bucket_boundary] [no_padding] [drop_remainder]", {"boundaries", "batch_sizes", "pad", "pad_to_bucket_boundary", "no_padding", "drop_remainder"}, 1, 4, sl__fc_build_bucket},
    {"rejection_resample", "rejection_resample COMPONENT target=[W, ...] [initial=[W, ...]] [seed=N]", {"target", "initial", "seed"}, 1, 1, sl__fc_build_rejection_resample},
    {"sample", "sample PIPELINE... [weights=[W, ...]] [seed=N] [stop_on_empty=BOOL]",
     {"weights", "seed", "stop_on_empty"}, 1, SL_DS_MAX_INPUTS, sl__fc_build_sample},
    {"choose", "choose PIPELINE... by=PIPELINE [stop_on_empty=BOOL]", {"by", "stop_on_empty"}, 1,
     SL_DS_MAX_INPUTS - 1, sl__fc_build_choose},
    {"zip", "zip PIPELINE... [prefix=BOOL]", {"prefix"}, 1, SL_DS_MAX_INPUTS, sl__fc_build_zip},
    {"concatenate", "concatenate PIPELINE...", {0}, 1, SL_DS_MAX_INPUTS, sl__fc_build_concatenate},
    {"enumerate", "enumerate [start=N] [as=NAME]", {"start", "as"}, 0, 0, sl__fc_build_enumerate},
    {"unbatch", "unbatch", {0}, 0, 0, sl__fc_build_unbatch},
    {"rebatch", "rebatch N|[N, ...] [drop_remainder]", {"drop_remainder"}, 1, 2, sl__fc_build_rebatch},
    {"take_while", "take_while COMPONENT OP NUMBER   (OP: == != < <= > >= or eq ne lt le gt ge)", {0}, 3, 3,
     sl__fc_build_take_while},
    {"scan", "scan COMPONENT sum|prod|min|max|count [initial=NUMBER] [as=NAME]", {"initial", "as"}, 2, 2,
     sl__fc_build_scan},
    {"unique", "unique [COMPONENT]", {0}, 0, 1, sl__fc_build_unique},
};
static const int NOPS = (int)(sizeof OPS / sizeof OPS[0]);

static const op_def *find_op(const char *name) {
    for (int i = 0; i < NOPS; i++)
        if (strcmp(OPS[i].name, name) == 0) return &OPS[i];
    return NULL;
}

static bool is_source(const op_def *d) {
    return d->build == build_files || d->build == build_range || d->build == sl__fc_build_sample ||
           d->build == sl__fc_build_load ||
           d->build == sl__fc_build_choose || d->build == sl__fc_build_zip;
}

/* What every statement must satisfy before its own builder runs. */
static sl_status check_stmt(builder *b, const op_def *d, const sl_cfg_stmt *s) {
    if (s->has_body) return sl__fc_err_usage(b, d, s->loc, SL_EINVAL, "'%s' takes no { } block", s->name);
    int npos = 0;
    for (int i = 0; i < s->nargs; i++) {
        const sl_cfg_arg *a = &s->args[i];
        if (a->key) {
            bool ok = false;
            int nopts = 0;
            while (nopts < 8 && d->opts[nopts]) {
                ok |= strcmp(d->opts[nopts], a->key) == 0;
                nopts++;
            }
            if (ok) continue;
            sl_cfg_err(b->cfg, sl__fc_key_loc(a), SL_EINVAL, "unknown option '%s' for %s", a->key, d->name);
            const char *sug = sl_suggest(a->key, d->opts, nopts);
            char list[256];
            if (sug) sl_err_hint("did you mean '%s'?", sug);
            else if (nopts) sl_err_hint("the options of %s are %s", d->name, sl__fc_join(d->opts, nopts, list, sizeof list));
            else sl_err_hint("%s takes no options; usage: %s", d->name, d->usage);
            return SL_EINVAL;
        }
        if (a->v.kind == SL_CV_PIPE) {
            if (d->build == build_map) continue;
            return sl__fc_err_usage(b, d, a->v.loc, SL_EINVAL, "'|' joins the functions of a map; %s takes none", d->name);
        }
        npos++;
        if (d->max_pos >= 0 && npos > d->max_pos)
            return sl__fc_err_usage(b, d, a->v.loc, SL_EINVAL, "too many arguments for %s", d->name);
    }
    if (npos < d->min_pos) {
        /* name the first missing argument from the usage line */
        char what[64] = "argument";
        const char *u = d->usage + strlen(d->name);
        for (int k = 0; k <= npos && *u; k++) {
            while (*u == ' ') u++;
            size_t len = strcspn(u, " ");
            if (k == npos) snprintf(what, sizeof what, "%.*s", (int)len, u);
            u += len;
        }
        return sl__fc_err_usage(b, d, s->loc, SL_EINVAL, "%s: missing %s", d->name, what);
    }
    return SL_OK;
}

static sl_status missing_source(builder *b) {
    const sl_cfg_value *nv = sl_cfg_pos(b->pstmt, 0);
    sl_cfg_err(b->cfg, nv ? nv->loc : b->pstmt->loc, SL_EINVAL, "pipeline '%s' has no 'files' statement", b->pname);
    sl_err_hint("say what to read first: files \"data/train-*.tfrecord\" (or range START STOP for numbers)");
    return SL_EINVAL;
}

static sl_status build_stmt(builder *b, const sl_cfg_stmt *s, const sl_cfg_stmt *all, int n) {
    const op_def *d = find_op(s->name);
    if (!d) {
        const char *names[64]; /* >= NOPS */
        char list[512];
        for (int i = 0; i < NOPS; i++) names[i] = OPS[i].name;
        sl_cfg_err(b->cfg, s->loc, SL_EINVAL, "unknown op '%s' in pipeline '%s'", s->name, b->pname);
        const char *sug = sl_suggest(s->name, names, NOPS);
        if (sug) sl_err_hint("did you mean '%s'?", sug);
        else sl_err_hint("the ops are %s", sl__fc_join(names, NOPS, list, sizeof list));
        return SL_EINVAL;
    }
    sl_status st = check_stmt(b, d, s);
    if (st) return st;
    if (is_source(d)) {
        if (b->src != SRC_NONE) {
            sl_cfg_err(b->cfg, s->loc, SL_EINVAL, "a pipeline reads one source: '%s' here and '%s' at line %d",
                       s->name, b->src_stmt->name, b->src_stmt->loc.line);
            sl_err_hint("use one files statement with several patterns: files \"a-*.tfrecord\" \"b-*.tfrecord\"");
            return SL_EINVAL;
        }
        b->src_stmt = s;
        return d->build(b, d, s);
    }
    if (b->src == SRC_NONE) {
        for (int i = 0; i < n; i++) {
            const op_def *o = find_op(all[i].name);
            if (o && is_source(o)) {
                sl_cfg_err(b->cfg, s->loc, SL_EINVAL, "'%s' comes before the pipeline's source ('%s' at line %d)",
                           s->name, all[i].name, all[i].loc.line);
                sl_err_hint("the source comes first: move '%s' to the top of the block", all[i].name);
                return SL_EINVAL;
            }
        }
        return missing_source(b);
    }
    if (d->build != build_shard && d->build != build_interleave && d->build != build_shuffle && (st = materialise(b)))
        return st;
    return d->build(b, d, s);
}

sl_pipeline_env sl_pipeline_env_default(void) {
    sl_pipeline_env e = {.num_shards = 1, .shard_index = 0, .base_dir = NULL, .seed = 0, .batch_divisor = 0};
    return e;
}

/* The name of a `pipeline NAME { }` statement, or NULL when s is not one. */
static const char *pipeline_name(const sl_cfg_stmt *s) {
    if (strcmp(s->name, "pipeline") != 0 || !s->has_body) return NULL;
    const sl_cfg_value *v = sl_cfg_pos(s, 0);
    return v && (v->kind == SL_CV_IDENT || v->kind == SL_CV_STRING) ? v->text : NULL;
}

int sl_pipeline_names(const sl_cfg *cfg, const char **names, int cap) {
    int n, k = 0;
    const sl_cfg_stmt *root = sl_cfg_root(cfg, &n);
    for (int i = 0; i < n; i++) {
        const char *p = pipeline_name(&root[i]);
        if (!p) continue;
        if (k < cap) names[k] = p;
        k++;
    }
    return k;
}

static sl_status find_pipeline(const sl_cfg *cfg, const char *name, const sl_cfg_stmt **out) {
    int n;
    const sl_cfg_stmt *root = sl_cfg_root(cfg, &n), *found = NULL;
    for (int i = 0; i < n; i++) {
        const char *p = pipeline_name(&root[i]);
        if (!p || strcmp(p, name) != 0) continue;
        if (found) {
            sl_cfg_err(cfg, sl_cfg_pos(&root[i], 0)->loc, SL_EINVAL, "pipeline '%s' is defined twice (first at line %d)",
                       name, found->loc.line);
            sl_err_hint("rename one of them");
            return SL_EINVAL;
        }
        found = &root[i];
    }
    if (found) {
        *out = found;
        return SL_OK;
    }
    const char *names[64];
    int k = sl_pipeline_names(cfg, names, 64);
    if (k > 64) k = 64;
    if (k == 0) {
        sl_err(SL_ENOTFOUND, "%s: no pipeline '%s': the file has no pipeline blocks", sl_cfg_filename(cfg), name);
        sl_err_hint("define one: pipeline %s { files \"PATTERN\" ... }", name);
        return SL_ENOTFOUND;
    }
    char list[512];
    sl_err(SL_ENOTFOUND, "%s: no pipeline '%s'", sl_cfg_filename(cfg), name);
    const char *sug = sl_suggest(name, names, k);
    if (sug) sl_err_hint("did you mean '%s'? (the pipelines are %s)", sug, sl__fc_join(names, k, list, sizeof list));
    else sl_err_hint("the pipelines are %s", sl__fc_join(names, k, list, sizeof list));
    return SL_ENOTFOUND;
}

/* A pipeline read by several replicas without a `shard` statement gives every replica all
 * of its data (tf.data without auto-sharding does the same): legal, but rarely meant, so
 * shard 0 says so once. */
static void unsharded_warning(const builder *b) {
    if (b->global_stmt) return; /* it shards by position */
    if (b->src == SRC_MIX) return; /* what it mixes is sharded (or not) by its own pipelines */
    for (int i = 0; i < b->pstmt->nbody; i++)
        if (strcmp(b->pstmt->body[i].name, "shard") == 0) return;
    SL_WARN("pipeline '%s': read by %lld replicas, but it has no `shard` statement, so every replica "
            "reads all of its data; add `shard auto` after `files` to give each replica its own part",
            b->pname, (long long)b->env.num_shards);
}

sl_status sl_pipeline_from_config(const sl_cfg *cfg, const char *name, const sl_pipeline_env *env,
                                  sl_dataset **out) {
    *out = NULL;
    if (!cfg || !name) return sl_err(SL_EINVAL, "sl_pipeline_from_config: cfg and name are required");
    builder b;
    memset(&b, 0, sizeof b);
    b.cfg = cfg;
    b.build_named = sl_pipeline_from_config;
    b.pname = name;
    b.env = env ? *env : sl_pipeline_env_default();
    if (b.env.num_shards < 1 || b.env.shard_index < 0 || b.env.shard_index >= b.env.num_shards)
        return sl_err(SL_EINVAL, "pipeline '%s': replica %lld of %lld shards is not valid (index must be in 0..num-1)",
                      name, (long long)b.env.shard_index, (long long)b.env.num_shards);
    if (b.env.batch_divisor < 0)
        return sl_err(SL_EINVAL, "pipeline '%s': batch divisor %lld is not valid (0 or 1: as written, W: batch/W)",
                      name, (long long)b.env.batch_divisor);
    if (b.env.base_dir) {
        snprintf(b.base, sizeof b.base, "%s", b.env.base_dir);
    } else {
        const char *fn = sl_cfg_filename(cfg), *slash = strrchr(fn, '/');
        if (slash) snprintf(b.base, sizeof b.base, "%.*s", slash == fn ? 1 : (int)(slash - fn), fn);
    }
    size_t bl = strlen(b.base);
    if (bl > 1 && b.base[bl - 1] == '/') b.base[bl - 1] = 0;
    sl_status st = find_pipeline(cfg, name, &b.pstmt);
    if (st) return st;
    for (int i = 0; i < b.pstmt->nbody && !st; i++) {
        b.stmt_index = i;
        st = build_stmt(&b, &b.pstmt->body[i], b.pstmt->body, b.pstmt->nbody);
    }
    if (!st && b.src == SRC_NONE) st = missing_source(&b);
    if (!st) st = materialise(&b);
    if (!st && b.env.num_shards > 1 && b.env.shard_index == 0) unsharded_warning(&b);
    free_strs(b.patterns, b.npatterns);
    free_strs(b.paths, b.npaths);
    if (st) {
        sl_dataset_unref(b.ds);
        return st;
    }
    *out = b.ds;
    return SL_OK;
}

