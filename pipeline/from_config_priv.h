/* Private to pipeline/from_config*.c: the pipeline builder the files share.
 * from_config.c builds the ops (the statements, the op table and the driver),
 * from_config_fn.c parses map's function calls, from_config_filter.c builds filter's
 * predicate and evaluates it, and from_config_read.c has the messages, the typed readers
 * and the graph's growth all of them use; from_config_mix.c builds the sources that mix
 * other pipelines (sample, choose); from_config_snapshot.c builds snapshot (and its
 * fingerprint) and the load source; from_config_seq.c builds the sequence ops (zip,
 * concatenate, enumerate, unbatch, rebatch, take_while, scan, unique), using filter's
 * comparison and mix's named pipelines. The calls go one way: from_config.c ->
 * from_config_fn.c, from_config_filter.c and from_config_mix.c -> from_config_read.c. */
#ifndef SLUICE_PIPELINE_FROM_CONFIG_PRIV_H
#define SLUICE_PIPELINE_FROM_CONFIG_PRIV_H

#include "pipeline/internal.h"
#include "sluice/config.h"
#include "sluice/from_config.h"

typedef struct builder builder;
typedef struct op_def op_def;

typedef sl_status (*op_build_fn)(builder *b, const op_def *d, const sl_cfg_stmt *s);

struct op_def {
    const char *name;
    const char *usage;
    const char *opts[8]; /* allowed option keys, NULL-terminated */
    int min_pos, max_pos; /* positional arguments; max -1: any number */
    op_build_fn build;
};

enum { SRC_NONE, SRC_FILES, SRC_RANGE, SRC_MIX, SRC_LOAD };

struct builder {
    const sl_cfg *cfg;
    const char *pname;
    const sl_cfg_stmt *pstmt;  /* the `pipeline NAME { }` statement */
    sl_pipeline_env env;
    char base[4096];           /* directory relative paths start at ("" = cwd) */
    sl_dataset *ds;            /* built so far (one reference) */
    int src;
    const sl_cfg_stmt *src_stmt;
    bool materialised;         /* the files source became datasets */
    int stmt_index;            /* position of the statement being built */
    struct {
        const char *op;
        int n;
    } counts[24];              /* datasets per op so far, for labels */
    int ncounts;
    /* files */
    char **patterns;           /* resolved against base */
    int npatterns;
    char **paths;              /* every matching file, sorted, unique */
    int npaths;
    bool files_shuffle;
    uint64_t files_seed;
    sl_tfr_read_opts ropts;
    const sl_cfg_stmt *interleave_stmt;
    sl_interleave_opts iopts;
    const sl_cfg_stmt *file_shard_stmt;
    int64_t fs_num, fs_index;
    const sl_cfg_stmt *data_shard_stmt; /* a shard by data written among the file statements */
    int64_t ds_num, ds_index;
    const sl_cfg_stmt *global_stmt; /* `shuffle global` right after files */
    sl_global_opts gopts;
    char index_dir[4096];      /* its index_dir=, resolved ("": beside the files) */
    /* builds another pipeline of the file (sl_pipeline_from_config), for sample and choose:
     * a pointer, so that from_config_mix.c does not call back into from_config.c */
    sl_status (*build_named)(const sl_cfg *cfg, const char *name, const sl_pipeline_env *env, sl_dataset **out);
};

/* ---- messages, typed readers, the graph (pipeline/from_config_read.c) ---- */

/* Whether the pending error already carries a hint. */
bool sl__fc_has_hint(void);

/* The op's usage as the hint, unless the error has one. */
void sl__fc_hint_usage(const op_def *d);

/* An error at loc with the op's usage (d non-NULL) as the hint; returns code. */
sl_status sl__fc_err_usage(builder *b, const op_def *d, sl_cfg_loc loc, sl_status code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The spot of `key=value`: the key sits just before the value. */
sl_cfg_loc sl__fc_key_loc(const sl_cfg_arg *a);

/* "a, b, c" into buf (cut at cap); returns buf. */
const char *sl__fc_join(const char *const *words, int n, char *buf, size_t cap);

/* A library call failed while building statement s: prefix the error with where in the
 * config it was written. Returns code. */
sl_status sl__fc_construct_failed(builder *b, const sl_cfg_stmt *s, sl_status code);

/* Values of a statement or a call, each reported at its spot on failure (with d's usage
 * as the hint where d is given); *out is left as it was on failure. */
sl_status sl__fc_read_int(builder *b, const op_def *d, const sl_cfg_value *v, int64_t min, int64_t max,
                          int64_t *out);
sl_status sl__fc_read_bool(builder *b, const sl_cfg_value *v, bool *out);
/* N or auto (SL_AUTO). */
sl_status sl__fc_read_int_or_auto(builder *b, const op_def *d, const sl_cfg_value *v, int64_t min,
                                  int64_t max, int *out);
/* A word or a string (`what` names it in the error). */
sl_status sl__fc_read_word(builder *b, const sl_cfg_value *v, const char *what, const char **out);
/* A component name: a word or string shorter than SL_NAME_MAX. */
sl_status sl__fc_read_comp(builder *b, const sl_cfg_value *v, const char **out);
sl_status sl__fc_read_dtype(builder *b, const sl_cfg_value *v, bool allow_bytes, sl_dtype *out);
/* A size: 224 (square) or 224x200 (height x width). */
sl_status sl__fc_read_size(builder *b, const sl_cfg_value *v, int *h, int *w);
/* A list of numbers (or one number when allow_scalar) into out[0..cap), *n of them. */
sl_status sl__fc_read_numbers(builder *b, const sl_cfg_value *v, bool allow_scalar, double *out, int cap,
                              int *n);
/* [low, high] with 0 < low <= high. */
sl_status sl__fc_read_range2(builder *b, const sl_cfg_value *v, double *lo, double *hi);

/* Label ds "PIPELINE/OP" ("PIPELINE/OP#N" for the op's Nth dataset). */
void sl__fc_label(builder *b, sl_dataset *ds, const char *op);

/* Replace b->ds with next (a new reference, or NULL after a failed constructor, st), label
 * it `op` and note statement s as where it was written. Returns st. */
sl_status sl__fc_chain(builder *b, const sl_cfg_stmt *s, sl_status st, sl_dataset *next, const char *op);

/* ---- map's functions (pipeline/from_config_fn.c) ---- */

/* Bind a call's arguments to the function's parameters (by position, or name=value), then
 * build it into *out (a new reference). Errors name the spot in the config, with a hint. */
sl_status sl__fc_build_call(builder *b, const sl_cfg_value *call, sl_fn **out);

/* A function's usage line, or NULL when there is no function `name`. */
const char *sl__fc_fn_usage(const char *name);

/* "unknown function" at v, with a did-you-mean or the list of functions. SL_EINVAL. */
sl_status sl__fc_unknown_fn(builder *b, const sl_cfg_value *v);

/* ---- filter (pipeline/from_config_filter.c) ---- */

/* The filter statement: `filter COMPONENT OP NUMBER`. */
sl_status sl__fc_build_filter(builder *b, const op_def *d, const sl_cfg_stmt *s);

/* The comparison `COMPONENT OP NUMBER` of statement s (filter, take_while) as a predicate
 * for sl_ds_filter_owned / sl_ds_take_while_owned: *pred, its *ctx (handed to the caller)
 * and *free_ctx. Errors (at the spot, with d's usage or a did-you-mean) leave nothing. */
sl_status sl__fc_read_compare(builder *b, const op_def *d, const sl_cfg_stmt *s, sl_pred_fn *pred, void **ctx,
                              sl_free_fn *free_ctx);

/* The value of a one-element numeric tensor (any numeric dtype, bool as 0/1): an integer
 * in *i (*is_int) or a double in *d (*d is set for integers too). False for anything else. */
bool sl__fc_scalar_value(const sl_tensor *t, int64_t *i, double *d, bool *is_int);

/* ---- mixing pipelines (pipeline/from_config_mix.c) ---- */

/* The sources `sample PIPELINE... [weights=[...]] [seed=N] [stop_on_empty=BOOL]` and
 * `choose PIPELINE... by=PIPELINE [stop_on_empty=BOOL]`: each named pipeline of the file is
 * built by b->build_named with b's environment; a name that is no pipeline of the file, b's
 * own, or one leading back to it is an error at the name. */
sl_status sl__fc_build_sample(builder *b, const op_def *d, const sl_cfg_stmt *s);
sl_status sl__fc_build_choose(builder *b, const op_def *d, const sl_cfg_stmt *s);

/* The pipelines named by s's positional arguments, each checked and built as sample's are
 * (`how` words the errors: "zip", "concatenate"), into ins[0..*n) (new references). On
 * failure those built are released and *n is 0. */
sl_status sl__fc_build_pipelines(builder *b, const op_def *d, const sl_cfg_stmt *s, const char *how,
                                 sl_dataset **ins, int *n);

/* ---- sequence ops (pipeline/from_config_seq.c) ---- */

/* `concatenate PIPELINE...`, `enumerate [start=N] [as=NAME]`, `unbatch`,
 * `rebatch N|[N, ...] [drop_remainder]`, `take_while COMPONENT OP NUMBER`,
 * `scan COMPONENT sum|prod|min|max|count [initial=V] [as=NAME]`, `unique [COMPONENT]`, and
 * the source `zip PIPELINE... [prefix=BOOL]`. */
sl_status sl__fc_build_concatenate(builder *b, const op_def *d, const sl_cfg_stmt *s);
sl_status sl__fc_build_enumerate(builder *b, const op_def *d, const sl_cfg_stmt *s);
sl_status sl__fc_build_unbatch(builder *b, const op_def *d, const sl_cfg_stmt *s);
sl_status sl__fc_build_rebatch(builder *b, const op_def *d, const sl_cfg_stmt *s);
sl_status sl__fc_build_take_while(builder *b, const op_def *d, const sl_cfg_stmt *s);
sl_status sl__fc_build_scan(builder *b, const op_def *d, const sl_cfg_stmt *s);
sl_status sl__fc_build_unique(builder *b, const op_def *d, const sl_cfg_stmt *s);
sl_status sl__fc_build_zip(builder *b, const op_def *d, const sl_cfg_stmt *s);

/* ---- windows and groups (pipeline/from_config_window.c) ---- */

/* `window SIZE [shift=N] [stride=N] [drop_remainder]`, `group_by_window key=COMP [modulo=N]
 * window=N`, `bucket_by_sequence_length COMP boundaries=[...] batch_sizes=[...] [pad=V]
 * [pad_to_bucket_boundary] [no_padding] [drop_remainder]`, `rejection_resample COMP
 * target=[...] [initial=[...]] [seed=N]`. */
sl_status sl__fc_build_window(builder *b, const op_def *d, const sl_cfg_stmt *s);
sl_status sl__fc_build_group_by_window(builder *b, const op_def *d, const sl_cfg_stmt *s);
sl_status sl__fc_build_bucket(builder *b, const op_def *d, const sl_cfg_stmt *s);
sl_status sl__fc_build_rejection_resample(builder *b, const op_def *d, const sl_cfg_stmt *s);

/* ---- snapshot and load (pipeline/from_config_snapshot.c) ---- */

/* `snapshot "PATH" [shard_bytes=N]`: sl_ds_snapshot over b->ds, its fingerprint the
 * canonical text of the statements before it, the env, and the files they read. */
sl_status sl__fc_build_snapshot(builder *b, const op_def *d, const sl_cfg_stmt *s);
/* The source `load "PATH"` (sl_ds_load). */
sl_status sl__fc_build_load(builder *b, const op_def *d, const sl_cfg_stmt *s);

#endif
