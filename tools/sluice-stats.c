/* sluice-stats: look at what a configured pipeline produces and how fast.
 *
 *   sluice-stats CONFIG [--pipeline NAME] --peek N [--json] [--values K]
 *                [--set PATH=VALUE]... [--seed N] [--shards N --shard-index I]
 *
 * For now only --peek: build the pipeline from the config file (sluice/from_config.h) and
 * print its first N elements: per component the name, dtype, shape, the first values (for
 * byte strings: their length and an escaped prefix) and the CRC32C of the tensor's bytes,
 * so two runs (or two machines) can be compared at a glance. The profiling report (per-op
 * throughput, the bottleneck) is another mode of the same tool: add it to MODES below.
 *
 * A thin main over the library. Workload: a config of a few dozen lines, a handful of
 * elements printed. Exit status: 0 ok, 1 the config or the pipeline failed (message with
 * file:line:col, or file and byte offset), 2 wrong usage (tools/tool.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/config.h"
#include "sluice/crc32c.h"
#include "sluice/from_config.h"
#include "sluice/pipeline.h"
#include "tool.h"

static const char *PROG = "sluice-stats";

static const char USAGE[] =
    "Usage: sluice-stats CONFIG [--pipeline NAME] --peek N [OPTIONS]\n"
    "\n"
    "Build a pipeline from a config file and look at what it produces.\n"
    "\n"
    "  --peek N            print the first N elements: per component its dtype, shape, first\n"
    "                      values (byte strings: length and an escaped prefix) and the CRC32C\n"
    "                      of its bytes\n"
    "  --pipeline NAME     which `pipeline NAME { }` block (default: 'train', or the only one)\n"
    "  --json              one JSON object per element per line\n"
    "  --values K          values shown per component (default 8, 0..1000)\n"
    "  --set PATH=VALUE    override a config value, e.g. --set pipeline.train.batch=4\n"
    "                      (repeatable; applied in order before the pipeline is built)\n"
    "  --seed N            the pipeline seed (default 0)\n"
    "  --shards N          replicas reading the pipeline (default 1): what `shard` splits by\n"
    "  --shard-index I     this replica, 0..N-1 (default 0)\n"
    "\n"
    "Relative paths in the config are relative to the config file's directory.\n"
    "Exit status: 0 ok, 1 config or pipeline error, 2 wrong usage.\n";

typedef struct stats_args {
    const char *config;
    const char *pipeline;
    long long peek;      /* -1: not asked */
    long long values;
    long long seed;
    long long shards, shard_index;
    bool json;
    const char **sets;   /* --set assignments, in order */
    int nsets;
} stats_args;

/* A mode runs over the built dataset; returns the exit status. */
typedef int (*mode_fn)(const stats_args *a, sl_dataset *ds, const char *pname);

/* ---- peek ---- */

static double half_to_double(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* Element i of a numeric tensor, as text: integers exactly, floats with %.6g (%.9g in JSON,
 * where non-finite values become null). */
static void value_text(const sl_tensor *t, int64_t i, bool json, char *out, size_t cap) {
    const void *p = t->data;
    double d;
    switch (t->dtype) {
    case SL_DT_U8: snprintf(out, cap, "%u", ((const uint8_t *)p)[i]); return;
    case SL_DT_I8: snprintf(out, cap, "%d", ((const int8_t *)p)[i]); return;
    case SL_DT_U16: snprintf(out, cap, "%u", ((const uint16_t *)p)[i]); return;
    case SL_DT_I16: snprintf(out, cap, "%d", ((const int16_t *)p)[i]); return;
    case SL_DT_I32: snprintf(out, cap, "%" PRId32, ((const int32_t *)p)[i]); return;
    case SL_DT_U32: snprintf(out, cap, "%" PRIu32, ((const uint32_t *)p)[i]); return;
    case SL_DT_I64: snprintf(out, cap, "%" PRId64, ((const int64_t *)p)[i]); return;
    case SL_DT_BOOL: snprintf(out, cap, "%s", ((const uint8_t *)p)[i] ? "true" : "false"); return;
    case SL_DT_F32: d = ((const float *)p)[i]; break;
    case SL_DT_F64: d = ((const double *)p)[i]; break;
    case SL_DT_F16: d = half_to_double(((const uint16_t *)p)[i]); break;
    case SL_DT_BF16: {
        uint32_t bits = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        d = f;
        break;
    }
    default: snprintf(out, cap, "?"); return;
    }
    if (json && !isfinite(d)) snprintf(out, cap, "null");
    else snprintf(out, cap, json ? "%.9g" : "%.6g", d);
}

/* Up to `max` bytes of s as printable text: \n \t \\ \" and \xNN for the rest; "..." when
 * cut. In JSON mode the backslashes are doubled so the result is a valid JSON string body. */
static void escape_prefix(const sl_bytes *s, size_t max, bool json, char *out, size_t cap) {
    size_t n = 0;
    const char *bs = json ? "\\\\" : "\\";
    for (size_t i = 0; i < s->len && i < max && n + 16 < cap; i++) {
        uint8_t c = s->ptr[i];
        if (c == '"') n += (size_t)snprintf(out + n, cap - n, json ? "\\\"" : "\\\"");
        else if (c == '\\') n += (size_t)snprintf(out + n, cap - n, "%s%s", bs, bs);
        else if (c == '\n') n += (size_t)snprintf(out + n, cap - n, "%sn", bs);
        else if (c == '\t') n += (size_t)snprintf(out + n, cap - n, "%st", bs);
        else if (c >= 0x20 && c < 0x7f) out[n++] = (char)c;
        else n += (size_t)snprintf(out + n, cap - n, "%sx%02x", bs, c);
    }
    if (s->len > max && n + 4 < cap) n += (size_t)snprintf(out + n, cap - n, "...");
    out[n] = 0;
}

/* CRC32C of the tensor's bytes; for byte strings, of the strings' contents one after
 * another. */
static uint32_t tensor_crc(const sl_tensor *t) {
    if (t->dtype != SL_DT_BYTES) return sl_crc32c(0, t->data, sl_tensor_nbytes(t));
    uint32_t crc = 0;
    const sl_bytes *b = t->data;
    for (int64_t i = 0; i < sl_tensor_numel(t); i++) crc = sl_crc32c(crc, b[i].ptr, b[i].len);
    return crc;
}

static void print_text(const sl_element *e, long long index, int values) {
    printf("element %lld\n", index);
    int w = 0, dw = 0;
    char desc[SL_ELEM_MAX][128];
    for (int c = 0; c < e->n; c++) {
        if ((int)strlen(e->names[c]) > w) w = (int)strlen(e->names[c]);
        sl_tensor_describe(&e->t[c], desc[c], sizeof desc[c]);
        if ((int)strlen(desc[c]) > dw) dw = (int)strlen(desc[c]);
    }
    for (int c = 0; c < e->n; c++) {
        const sl_tensor *t = &e->t[c];
        char v[96];
        int64_t n = sl_tensor_numel(t);
        printf("  %-*s  %-*s  crc32c %08x ", w, e->names[c], dw, desc[c], tensor_crc(t));
        if (t->dtype == SL_DT_BYTES) {
            const sl_bytes *b = t->data;
            char esc[256];
            for (int64_t i = 0; i < n && i < values; i++) {
                escape_prefix(&b[i], 24, false, esc, sizeof esc);
                printf(" [len %zu \"%s\"]", b[i].len, esc);
            }
        } else {
            for (int64_t i = 0; i < n && i < values; i++) {
                value_text(t, i, false, v, sizeof v);
                printf(" %s", v);
            }
        }
        if (n > values) printf(" ... (%lld values)", (long long)n);
        printf("\n");
    }
}

static void print_json(const sl_element *e, long long index, int values) {
    printf("{\"index\": %lld, \"components\": {", index);
    for (int c = 0; c < e->n; c++) {
        const sl_tensor *t = &e->t[c];
        char esc[256], v[96];
        int64_t n = sl_tensor_numel(t);
        /* component names are identifiers from the config: no characters to escape but these */
        sl_bytes name = {(const uint8_t *)e->names[c], strlen(e->names[c])};
        escape_prefix(&name, SL_NAME_MAX, true, esc, sizeof esc);
        printf("%s\"%s\": {\"dtype\": \"%s\", \"shape\": [", c ? ", " : "", esc, sl_dtype_name(t->dtype));
        for (int d = 0; d < t->rank; d++) printf(d ? ", %lld" : "%lld", (long long)t->dims[d]);
        printf("], \"numel\": %lld, \"crc32c\": \"%08x\", \"values\": [", (long long)n, tensor_crc(t));
        for (int64_t i = 0; i < n && i < values; i++) {
            if (t->dtype == SL_DT_BYTES) {
                const sl_bytes *b = t->data;
                escape_prefix(&b[i], 24, true, esc, sizeof esc);
                printf("%s{\"len\": %zu, \"prefix\": \"%s\"}", i ? ", " : "", b[i].len, esc);
            } else {
                value_text(t, i, true, v, sizeof v);
                printf("%s%s", i ? ", " : "", v);
            }
        }
        printf("]}");
    }
    printf("}}\n");
}

static int run_peek(const stats_args *a, sl_dataset *ds, const char *pname) {
    sl_iter_opts io = sl_iter_opts_default();
    io.seed = (uint64_t)a->seed;
    sl_iter *it;
    if (sl_iter_create(ds, &io, &it)) return sl__failf(PROG, "pipeline '%s'", pname);
    sl_element e;
    sl_element_init(&e);
    int rc = SL__EXIT_OK;
    for (long long i = 0; i < a->peek; i++) {
        sl_status s = sl_iter_next(it, &e);
        if (s == SL_END) {
            if (!a->json) printf("(end of the pipeline after %lld element%s)\n", i, i == 1 ? "" : "s");
            break;
        }
        if (s) {
            fflush(stdout);
            rc = sl__failf(PROG, "pipeline '%s', element %lld", pname, i);
            break;
        }
        if (a->json) print_json(&e, i, (int)a->values);
        else print_text(&e, i, (int)a->values);
        sl_element_clear(&e);
    }
    sl_iter_close(it);
    return rc;
}

static const struct {
    const char *name; /* the option that selects the mode */
    mode_fn run;
} MODES[] = {
    {"peek", run_peek},
    /* the profiling report will go here */
};

/* ---- main ---- */

/* Take every "--set X" / "--set=X" out of argv (tool_args keeps one value per option);
 * *left is what remains. Returns -1, or the exit status of a usage error. */
static int take_sets(int argc, char **argv, stats_args *a, int *left) {
    int out = 0;
    bool only_pos = false;
    for (int i = 0; i < argc; i++) {
        if (!only_pos && strcmp(argv[i], "--") == 0) only_pos = true;
        if (!only_pos && strcmp(argv[i], "--set") == 0) {
            if (i + 1 >= argc) return sl__usage_error(PROG, "option --set needs an argument");
            a->sets[a->nsets++] = argv[++i];
        } else if (!only_pos && strncmp(argv[i], "--set=", 6) == 0) {
            a->sets[a->nsets++] = argv[i] + 6;
        } else {
            argv[out++] = argv[i];
        }
    }
    *left = out;
    return -1;
}

/* The pipeline to use when --pipeline is not given: 'train', or the only one. */
static const char *default_pipeline(const sl_cfg *cfg) {
    const char *names[64];
    int n = sl_pipeline_names(cfg, names, 64);
    for (int i = 0; i < n && i < 64; i++)
        if (strcmp(names[i], "train") == 0) return names[i];
    return n == 1 ? names[0] : NULL;
}

int main(int argc, char **argv) {
    stats_args a = {.peek = -1, .values = 8, .shards = 1, .shard_index = 0};
    a.sets = calloc((size_t)argc + 1, sizeof *a.sets);
    if (!a.sets) return sl__failf(PROG, "out of memory");
    int nargs = 0, npos = 0;
    int rc = take_sets(argc - 1, argv + 1, &a, &nargs);
    if (rc >= 0) {
        free(a.sets);
        return rc;
    }
    sl__opt opts[] = {
        {"pipeline", 'p', SL__OPT_STR, &a.pipeline, 0, 0},
        {"peek", 0, SL__OPT_INT, &a.peek, 0, 1000000000},
        {"json", 0, SL__OPT_FLAG, &a.json, 0, 0},
        {"values", 0, SL__OPT_INT, &a.values, 0, 1000},
        {"seed", 0, SL__OPT_INT, &a.seed, 0, INT64_MAX},
        {"shards", 0, SL__OPT_INT, &a.shards, 1, 1 << 30},
        {"shard-index", 0, SL__OPT_INT, &a.shard_index, 0, (1 << 30) - 1},
        {NULL, 0, 0, NULL, 0, 0},
    };
    sl_cfg *cfg = NULL;
    sl_dataset *ds = NULL;
    switch (sl__args_parse(PROG, opts, nargs, argv + 1, &npos)) {
    case SL__ARGS_HELP:
        fputs(USAGE, stdout);
        rc = SL__EXIT_OK;
        goto done;
    case SL__ARGS_ERROR: rc = SL__EXIT_USAGE; goto done;
    case SL__ARGS_OK: break;
    }
    if (npos != 1) {
        rc = sl__usage_error(PROG, npos == 0 ? "missing CONFIG" : "one CONFIG file, got %d arguments", npos);
        goto done;
    }
    a.config = argv[1];
    int mode = -1;
    if (a.peek >= 0) mode = 0;
    if (mode < 0) {
        rc = sl__usage_error(PROG, "not implemented yet: only --peek N is available (the profiling report comes later)");
        goto done;
    }
    if (a.shard_index >= a.shards) {
        rc = sl__usage_error(PROG, "--shard-index %lld must be below --shards %lld", a.shard_index, a.shards);
        goto done;
    }
    if (sl_cfg_parse_file(a.config, &cfg)) {
        rc = sl__fail(PROG);
        goto done;
    }
    for (int i = 0; i < a.nsets; i++)
        if (sl_cfg_set(cfg, a.sets[i])) {
            fprintf(stderr, "%s: --set: %s\n", PROG, sl_errmsg());
            rc = SL__EXIT_USAGE;
            goto done;
        }
    const char *pname = a.pipeline ? a.pipeline : default_pipeline(cfg);
    if (!pname) {
        const char *names[64];
        char list[512];
        int n = sl_pipeline_names(cfg, names, 64);
        size_t len = 0;
        list[0] = 0;
        for (int i = 0; i < n && i < 64 && len < sizeof list; i++)
            len += (size_t)snprintf(list + len, sizeof list - len, i ? ", %s" : "%s", names[i]);
        if (n == 0) {
            fprintf(stderr, "%s: %s: no `pipeline NAME { }` block in the file\n", PROG, a.config);
            rc = SL__EXIT_FAIL;
        } else {
            rc = sl__usage_error(PROG, "%s has several pipelines (%s): choose one with --pipeline NAME", a.config, list);
        }
        goto done;
    }
    sl_pipeline_env env = sl_pipeline_env_default();
    env.seed = (uint64_t)a.seed;
    env.num_shards = a.shards;
    env.shard_index = a.shard_index;
    sl_status s = sl_pipeline_from_config(cfg, pname, &env, &ds);
    if (s) {
        fprintf(stderr, "%s: %s\n", PROG, sl_errmsg());
        /* naming a pipeline that is not there is a mistake on the command line */
        rc = s == SL_ENOTFOUND && strstr(sl_errmsg(), ": no pipeline '") ? SL__EXIT_USAGE : SL__EXIT_FAIL;
        goto done;
    }
    rc = MODES[mode].run(&a, ds, pname);
done:
    sl_dataset_unref(ds);
    sl_cfg_free(cfg);
    free(a.sets);
    return rc;
}
