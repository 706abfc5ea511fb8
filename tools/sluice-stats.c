/* sluice-stats: look at what a configured pipeline produces and how fast.
 *
 *   sluice-stats CONFIG [--pipeline NAME] [--seconds S | --batches N] [--trace FILE]
 *                [--trace-max N] [--json] [--html FILE] [--save FILE] [--cpu-budget N] [--ram-budget BYTES]
 *   sluice-stats --from FILE [--max-bytes N] [--json] [--html FILE]
 *   sluice-stats CONFIG [--pipeline NAME] --peek N [--json] [--values K]
 *   (all with [--set PATH=VALUE]... [--seed N] [--shards N --shard-index I])
 *
 * The profile (the default): build the pipeline from the config file, run it alone as fast
 * as it goes for S seconds (default 5) or N elements, and print a table per op (elements/s,
 * busy, waiting on input, blocked on output, buffer use, the parallelism autotune chose)
 * and the verdict: the bottleneck op, the evidence and what to try, or "no op is saturated"
 * when even the busiest op idles half its time (sluice/stats.h). --trace keeps the first
 * --trace-max events (1,000,000) and warns on standard error when it dropped any.
 * --from reports on a stats file the trainer (sl_stats_write_json) wrote instead.
 *
 * --peek: print the pipeline's first N elements: per component the name, dtype, shape, the
 * first values (for byte strings: their length and an escaped prefix) and the CRC32C of the
 * tensor's bytes, so two runs (or two machines) can be compared at a glance.
 *
 * A thin main over the library. Workload: a config of a few dozen lines, a handful of
 * elements printed. Exit status: 0 ok, 1 the config or the pipeline failed (message with
 * file:line:col, or file and byte offset) or a write failed (standard output, --trace,
 * --html, --save), 2 wrong usage (tools/tool.h). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice/config.h"
#include "sluice/crc32c.h"
#include "sluice/file.h"
#include "sluice/from_config.h"
#include "sluice/json.h"
#include "sluice/pipeline.h"
#include "sluice/stats.h"
#include "sluice/util.h"
#include "tool.h"

static const char *PROG = "sluice-stats";

static const char USAGE[] =
    "Usage: sluice-stats CONFIG [--pipeline NAME] [--seconds S | --batches N] [OPTIONS]\n"
    "       sluice-stats --from FILE [--max-bytes N] [--json] [--html FILE]\n"
    "       sluice-stats CONFIG [--pipeline NAME] --peek N [OPTIONS]\n"
    "\n"
    "Build a pipeline from a config file, run it alone and find its bottleneck: a table per op\n"
    "(elements/s, busy, waiting on input, blocked on output, buffer use, parallelism chosen)\n"
    "and a verdict naming the op that limits the throughput, why, and what to try.\n"
    "\n"
    "  --seconds S         run for S seconds (default 5; the pipeline's end stops it sooner)\n"
    "  --batches N         run for N elements of the pipeline's output instead\n"
    "  --trace FILE        write Chrome trace-event JSON of every op's activity (Perfetto)\n"
    "  --trace-max N       events the trace keeps (default 1000000, about 40 bytes each); later\n"
    "                      ones are dropped and counted, with a warning\n"
    "  --html FILE         write one self-contained page with the table and charts\n"
    "  --save FILE         write the stats file (what the trainer writes; read with --from)\n"
    "  --from FILE         report on a stats file instead of running a pipeline\n"
    "  --max-bytes N       with --from: the largest stats file read (default 64 MiB)\n"
    "  --cpu-budget N      cores the pipeline may use (autotune; default all)\n"
    "  --ram-budget BYTES  bytes of buffers autotune may use (default a quarter of RAM)\n"
    "  --json              the report (or, with --peek, each element) as JSON\n"
    "  --peek N            print the first N elements: per component its dtype, shape, first\n"
    "                      values (byte strings: length and an escaped prefix) and the CRC32C\n"
    "                      of its bytes\n"
    "  --pipeline NAME     which `pipeline NAME { }` block (default: 'train', or the only one)\n"
    "  --values K          values shown per component (default 8, 0..1000)\n"
    "  --set PATH=VALUE    override a config value, e.g. --set pipeline.train.batch=4\n"
    "                      (repeatable; applied in order before the pipeline is built)\n"
    "  --seed N            the pipeline seed (default 0)\n"
    "  --shards N          replicas reading the pipeline (default 1): what `shard` splits by\n"
    "  --shard-index I     this replica, 0..N-1 (default 0)\n"
    "\n"
    "Relative paths in the config are relative to the config file's directory.\n"
    "Exit status: 0 ok, 1 config or pipeline error or a failed write, 2 wrong usage.\n";

typedef struct stats_args {
    const char *config;
    const char *pipeline;
    long long peek;      /* -1: not asked */
    long long values;
    long long seed;
    long long shards, shard_index;
    bool json;
    const char *seconds_s;  /* --seconds, parsed into seconds */
    double seconds;
    long long batches;      /* 0: run by time */
    const char *trace, *html, *save, *from;
    long long cpu_budget, ram_budget;
    long long trace_max;  /* --trace-max: events kept; 0: 1,000,000 */
    long long max_bytes;  /* --from: the file size limit; 0: SL_STATS_MAX_BYTES */
    const char **sets;   /* --set assignments, in order */
    int nsets;
} stats_args;

/* A mode runs over the built dataset; returns the exit status. */
typedef int (*mode_fn)(const stats_args *a, sl_dataset *ds, const char *pname);

/* ---- peek ---- */

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
    case SL_DT_F16: d = (double)sl_f32_from_f16(((const uint16_t *)p)[i]); break;
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
        if (!sl__stdout_ok()) { /* stop at once: main's sl__tool_exit says why */
            rc = SL__EXIT_FAIL;
            break;
        }
    }
    sl_iter_close(it);
    return rc;
}

/* ---- the profile: run the pipeline alone, report per op, name the bottleneck ---- */

static void human_bytes(double b, char *out, size_t cap) {
    const char *u[] = {"B", "KB", "MB", "GB", "TB"};
    int k = 0;
    while (b >= 1000 && k < 4) {
        b /= 1000;
        k++;
    }
    snprintf(out, cap, k ? "%.1f %s" : "%.0f %s", b, u[k]);
}

static int depth_of(const sl_stats *st, int i) {
    int d = 0;
    for (int p = st->ops[i].parent; p >= 0 && d < 32; p = st->ops[p].parent) d++;
    return d;
}

static void par_text(const sl_op_stat *o, char *out, size_t cap) {
    if (o->parallelism <= 0) snprintf(out, cap, "-");
    else snprintf(out, cap, "%d%s", o->parallelism, o->tuned ? " auto" : "");
}

static void buf_text(const sl_op_stat *o, char *out, size_t cap) {
    if (o->buffer <= 0) snprintf(out, cap, "-");
    else snprintf(out, cap, "%.1f/%d%s", o->buffered_avg, o->buffer, o->tuned && o->parallelism <= 0 ? " auto" : "");
}

static void print_table(const sl_stats *st, const char *pname) {
    char peak[32], ram[32];
    human_bytes((double)st->buffered_bytes_peak, peak, sizeof peak);
    human_bytes((double)st->ram_budget, ram, sizeof ram);
    printf("pipeline '%s': %lld elements in %.2f s (%.1f/s); cpu budget %d, peak buffered %s of %s\n\n", pname,
           (long long)st->elements, st->wall_s, st->wall_s > 0 ? st->elements / st->wall_s : 0.0, st->cpu_budget,
           peak, ram);
    int w = 2;
    for (int i = 0; i < st->n; i++) {
        int l = 2 * depth_of(st, i) + (int)strlen(st->ops[i].label);
        if (l > w) w = l;
    }
    printf("%-*s  %-10s %10s %6s %8s %8s %11s %8s\n", w, "op", "kind", "elements/s", "busy", "wait in",
           "blocked", "buffer use", "parallel");
    for (int i = 0; i < st->n; i++) {
        const sl_op_stat *o = &st->ops[i];
        char name[160], par[32], buf[32];
        snprintf(name, sizeof name, "%*s%s", 2 * depth_of(st, i), "", o->label);
        par_text(o, par, sizeof par);
        buf_text(o, buf, sizeof buf);
        printf("%-*s  %-10s %10.1f %5.0f%% %7.0f%% %7.0f%% %11s %8s\n", w, name, o->op,
               st->wall_s > 0 ? o->elements / st->wall_s : 0.0, 100 * sl_stats_busy(st, o),
               100 * sl_stats_waiting(st, o), 100 * sl_stats_blocked(st, o), buf, par);
    }
    sl_stats_verdict v;
    sl_stats_bottleneck(st, &v);
    printf("\nverdict: %s\n", v.summary);
    if (v.evidence[0]) printf("  evidence: %s\n", v.evidence);
    if (v.advice[0]) printf("  try: %s\n", v.advice);
    printf("\n(busy, wait in, blocked: share of the op's threads' time doing its own work, waiting on its\n"
           " input, blocked on a full output buffer; buffer use: mean elements held / capacity)\n");
}

static int print_json_report(const sl_stats *st, const char *pname) {
    sl_stats_verdict v;
    sl_stats_bottleneck(st, &v);
    printf("{\"pipeline\": ");
    sl_json_fput_str(stdout, pname);
    printf(", \"verdict\": {\"op\": ");
    if (v.op >= 0) sl_json_fput_str(stdout, st->ops[v.op].label);
    else printf(v.op == SL_VERDICT_CONSUMER ? "\"(consumer)\"" : "null"); /* none, or none saturated */
    printf(", \"summary\": ");
    sl_json_fput_str(stdout, v.summary);
    printf(", \"evidence\": ");
    sl_json_fput_str(stdout, v.evidence);
    printf(", \"advice\": ");
    sl_json_fput_str(stdout, v.advice);
    printf("},\n\"stats\": ");
    sl_stats_fprint(st, stdout);
    printf("}\n");
    return ferror(stdout) ? SL__EXIT_FAIL : SL__EXIT_OK;
}

/* ---- the HTML page: one file, inline SVG, no scripts ---- */

static void html_str(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

static const char *COLORS[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                               "#7f7f7f", "#bcbd22", "#17becf"};

/* Horizontal stacked bars: busy / waiting on input / blocked on output per op. */
static void svg_shares(FILE *f, const sl_stats *st) {
    int rowh = 26, left = 230, width = 560, h = 40 + rowh * st->n + 30;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
               "font-size=\"12\">\n", left + width + 40, h);
    fprintf(f, "<text x=\"0\" y=\"16\" font-weight=\"bold\">Share of each op's threads' time</text>\n");
    for (int k = 0; k <= 4; k++) {
        int x = left + width * k / 4;
        fprintf(f, "<line x1=\"%d\" y1=\"28\" x2=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>"
                   "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#666\">%d%%</text>\n",
                x, x, 32 + rowh * st->n, x, 46 + rowh * st->n, 25 * k);
    }
    for (int i = 0; i < st->n; i++) {
        const sl_op_stat *o = &st->ops[i];
        int y = 32 + rowh * i;
        double parts[3] = {sl_stats_busy(st, o), sl_stats_waiting(st, o), sl_stats_blocked(st, o)};
        const char *col[3] = {"#d62728", "#1f77b4", "#bbbbbb"};
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", left - 8, y + 16);
        html_str(f, o->label);
        fprintf(f, "</text>\n");
        double x = left;
        for (int k = 0; k < 3; k++) {
            double wd = width * parts[k];
            if (x + wd > left + width) wd = left + width - x;
            if (wd > 0)
                fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>\n", x, y + 3, wd,
                        rowh - 8, col[k]);
            x += wd > 0 ? wd : 0;
        }
    }
    int ly = h - 8;
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"#d62728\"/><text x=\"%d\" y=\"%d\">busy</text>"
               "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"#1f77b4\"/><text x=\"%d\" y=\"%d\">waiting on input</text>"
               "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"#bbbbbb\"/><text x=\"%d\" y=\"%d\">blocked on output</text>\n",
            left, ly - 10, left + 16, ly, left + 80, ly - 10, left + 96, ly, left + 230, ly - 10, left + 246, ly);
    fprintf(f, "</svg>\n");
}

/* Horizontal bars: elements per second per op, on a log axis (one decade per gridline):
 * a batch-level op makes 1/batch as many elements as the record-level ops below it, and on a
 * linear axis its bar would shrink to nothing. Each bar starts at the decade below the
 * slowest op, so every op with a nonzero rate has a visible bar. */
static void svg_throughput(FILE *f, const sl_stats *st) {
    int rowh = 26, left = 230, width = 560, top = 44, h = top + 18 + rowh * st->n;
    double mx = 0, mn = 0;
    for (int i = 0; i < st->n; i++) {
        double r = st->wall_s > 0 ? st->ops[i].elements / st->wall_s : 0;
        if (r > 0 && (mn <= 0 || r < mn)) mn = r;
        mx = fmax(mx, r);
    }
    if (mx <= 0) mx = mn = 1;
    double lo = floor(log10(mn)) - (log10(mn) == floor(log10(mn)) ? 1 : 0), hi = ceil(log10(mx));
    if (hi <= lo) hi = lo + 1;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
               "font-size=\"12\" data-scale=\"log\">\n", left + width + 120, h);
    fprintf(f, "<text x=\"0\" y=\"16\" font-weight=\"bold\">Throughput (elements/s produced by each op; "
               "log scale, one gridline per factor of 10)</text>\n");
    for (int d = (int)lo; d <= (int)hi; d++) {
        double x = left + width * (d - lo) / (hi - lo);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ccc\"/>"
                   "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#666\">%.*f/s</text>\n",
                x, top - 12, x, h - 4, x, top - 16, d < 0 ? -d : 0, pow(10, d));
    }
    for (int i = 0; i < st->n; i++) {
        const sl_op_stat *o = &st->ops[i];
        double r = st->wall_s > 0 ? o->elements / st->wall_s : 0;
        double bw = r > 0 ? width * (log10(r) - lo) / (hi - lo) : 0;
        int y = top - 8 + rowh * i;
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", left - 8, y + 16);
        html_str(f, o->label);
        fprintf(f, "</text><rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>"
                   "<text x=\"%.1f\" y=\"%d\" fill=\"#333\">%.1f/s</text>\n",
                left, y + 3, fmax(1, bw), rowh - 8, COLORS[i % 10], left + fmax(1, bw) + 6, y + 16, r);
    }
    fprintf(f, "</svg>\n");
}

static bool plotted(const sl_op_stat *o, bool choices, bool *dashed) {
    *dashed = false;
    if (o->nhist == 0) return false;
    if (!choices) return o->buffer > 0;
    if (o->parallelism > 0) return true;
    *dashed = true;
    return o->tuned && o->buffer > 0;
}

static double hist_value(const sl_stats_sample *s, bool choices, bool dashed) {
    if (choices) return dashed ? s->buffer : s->parallelism;
    return s->buffer > 0 ? 100.0 * s->buffered / s->buffer : 0;
}

static void svg_history(FILE *f, const sl_stats *st, bool choices) {
    int left = 60, width = 700, height = 220, top = 30;
    double tmax = st->wall_s > 0 ? st->wall_s : 1, vmax = choices ? 1 : 100;
    int nlines = 0;
    bool dashed;
    for (int i = 0; i < st->n; i++) {
        const sl_op_stat *o = &st->ops[i];
        if (!plotted(o, choices, &dashed)) continue;
        nlines++;
        for (int k = 0; k < o->nhist; k++) {
            if (choices) vmax = fmax(vmax, hist_value(&o->hist[k], choices, dashed));
            tmax = fmax(tmax, o->hist[k].t);
        }
    }
    if (choices) vmax = ceil(vmax * 1.1);
    int h = top + height + 40 + 18 * nlines;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
               "font-size=\"12\">\n", left + width + 40, h);
    fprintf(f, "<text x=\"0\" y=\"16\" font-weight=\"bold\">%s</text>\n",
            choices ? "Chosen over time: parallelism (solid) and tuned buffer capacity (dashed)"
                    : "Buffer use over time: mean elements held, % of capacity");
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n", left, top,
            width, height);
    for (int k = 0; k <= 4; k++) {
        double v = vmax * k / 4;
        int y = top + height - (int)(height * k / 4);
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#eee\"/><text x=\"%d\" y=\"%d\" "
                   "text-anchor=\"end\" fill=\"#666\">%.3g%s</text>\n", left, y, left + width, y, left - 6, y + 4, v,
                choices ? "" : "%");
        double t = tmax * k / 4;
        int x = left + width * k / 4;
        /* enough decimals that the five ticks of a short run stay distinct */
        int dec = tmax >= 40 ? 0 : tmax >= 4 ? 1 : tmax >= 0.4 ? 2 : 3;
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#666\">%.*f s</text>\n", x,
                top + height + 16, dec, t);
    }
    if (nlines == 0)
        fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#666\">(no op with %s)</text>\n", left + 20, top + 30,
                choices ? "a parallelism or a tuned buffer" : "a buffer");
    int line = 0;
    for (int i = 0; i < st->n; i++) {
        const sl_op_stat *o = &st->ops[i];
        if (!plotted(o, choices, &dashed)) continue;
        const char *c = COLORS[i % 10];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", c,
                dashed ? " stroke-dasharray=\"6,4\"" : "");
        double lastv = 0;
        for (int k = 0; k < o->nhist; k++) {
            double v = hist_value(&o->hist[k], choices, dashed);
            double x = left + width * o->hist[k].t / tmax, y = top + height - height * v / vmax;
            if (k && choices) fprintf(f, "%.1f,%.1f ", x, top + height - height * lastv / vmax); /* steps */
            fprintf(f, "%.1f,%.1f ", x, y);
            lastv = v;
        }
        /* the last value holds until the end of the run */
        fprintf(f, "%.1f,%.1f\"/>\n", (double)left + width, top + height - height * lastv / vmax);
        int ly = top + height + 34 + 18 * line++;
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"4\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">", left,
                ly - 4, c, left + 20, ly);
        html_str(f, o->label);
        if (choices) fprintf(f, " (%s%s%s)</text>\n", o->op, dashed ? " buffer" : " parallelism", o->tuned ? ", auto" : "");
        else fprintf(f, " (%s, capacity %d now)</text>\n", o->op, o->buffer);
    }
    fprintf(f, "</svg>\n");
}

static int write_html(const sl_stats *st, const char *pname, const char *path) {
    FILE *f;
    if (sl_file_fopen_write(path, "w", "--html file", &f)) return sl__fail(PROG);
    sl_stats_verdict v;
    sl_stats_bottleneck(st, &v);
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>sluice-stats: ");
    html_str(f, pname);
    fprintf(f, "</title>\n<style>body{font-family:sans-serif;margin:24px;max-width:1100px}"
               "table{border-collapse:collapse;font-size:13px}td,th{padding:3px 10px;border-bottom:1px solid #ddd;"
               "text-align:right}td:first-child,th:first-child,td:nth-child(2){text-align:left}"
               ".verdict{background:#fff4e5;border-left:4px solid #ff7f0e;padding:8px 12px;margin:12px 0}"
               "svg{display:block;margin:18px 0}</style></head><body>\n");
    fprintf(f, "<h1>Pipeline '");
    html_str(f, pname);
    char peak[32], ram[32];
    human_bytes((double)st->buffered_bytes_peak, peak, sizeof peak);
    human_bytes((double)st->ram_budget, ram, sizeof ram);
    fprintf(f, "'</h1>\n<p>%lld elements in %.2f s (%.1f/s); CPU budget %d; peak buffered %s of a RAM "
               "budget of %s.</p>\n",
            (long long)st->elements, st->wall_s, st->wall_s > 0 ? st->elements / st->wall_s : 0.0, st->cpu_budget,
            peak, ram);
    fprintf(f, "<div class=\"verdict\"><b>");
    html_str(f, v.summary);
    fprintf(f, "</b><br>");
    html_str(f, v.evidence);
    fprintf(f, "<br><i>Try:</i> ");
    html_str(f, v.advice);
    fprintf(f, "</div>\n<table><tr><th>op</th><th>kind</th><th>elements/s</th><th>busy</th><th>wait in</th>"
               "<th>blocked</th><th>buffer use</th><th>parallel</th></tr>\n");
    for (int i = 0; i < st->n; i++) {
        const sl_op_stat *o = &st->ops[i];
        char par[32], buf[32];
        par_text(o, par, sizeof par);
        buf_text(o, buf, sizeof buf);
        fprintf(f, "<tr><td>%*s", 0, "");
        for (int d = depth_of(st, i); d > 0; d--) fprintf(f, "&nbsp;&nbsp;");
        html_str(f, o->label);
        fprintf(f, "</td><td>%s</td><td>%.1f</td><td>%.0f%%</td><td>%.0f%%</td><td>%.0f%%</td><td>%s</td><td>%s</td></tr>\n",
                o->op, st->wall_s > 0 ? o->elements / st->wall_s : 0.0, 100 * sl_stats_busy(st, o),
                100 * sl_stats_waiting(st, o), 100 * sl_stats_blocked(st, o), buf, par);
    }
    fprintf(f, "</table>\n");
    svg_shares(f, st);
    svg_throughput(f, st);
    svg_history(f, st, true);
    svg_history(f, st, false);
    fprintf(f, "</body></html>\n");
    char name[4200];
    snprintf(name, sizeof name, "--html file '%s'", path);
    if (sl_file_fclose_write(f, name, "writing failed")) {
        unlink(path); /* a cut-off page would pass for the whole report */
        return sl__fail(PROG);
    }
    return SL__EXIT_OK;
}

static int report(const stats_args *a, const sl_stats *st, const char *pname) {
    int rc = SL__EXIT_OK;
    if (a->html) rc = write_html(st, pname, a->html);
    if (a->json) {
        int r2 = print_json_report(st, pname);
        if (!rc) rc = r2;
    } else {
        print_table(st, pname);
    }
    return rc;
}

/* 2612345 -> "2,612,345" */
static void group_digits(int64_t v, char *out, size_t cap) {
    char d[32];
    int n = snprintf(d, sizeof d, "%lld", (long long)v);
    size_t j = 0;
    for (int i = 0; i < n && j + 2 < cap; i++) {
        if (i > 0 && d[i - 1] != '-' && (n - i) % 3 == 0) out[j++] = ',';
        out[j++] = d[i];
        }
    out[j] = 0;
}

static int run_profile(const stats_args *a, sl_dataset *ds, const char *pname) {
    sl_iter_opts io = sl_iter_opts_default();
    io.seed = (uint64_t)a->seed;
    io.cpu_budget = (int)a->cpu_budget;
    io.ram_budget = a->ram_budget;
    sl_iter *it;
    if (sl_iter_create(ds, &io, &it)) return sl__failf(PROG, "pipeline '%s'", pname);
    if (a->trace && sl_iter_trace(it, a->trace, a->trace_max > 0 ? a->trace_max : 1000000)) {
        sl_iter_close(it);
        return sl__fail(PROG);
    }
    sl_element e;
    sl_element_init(&e);
    double t0 = sl_now_s();
    long long n = 0;
    int rc = SL__EXIT_OK;
    for (;;) {
        if (a->batches > 0 && n >= a->batches) break;
        if (a->batches <= 0 && sl_now_s() - t0 >= a->seconds) break;
        sl_status s = sl_iter_next(it, &e);
        if (s == SL_END) break;
        if (s) {
            rc = sl__failf(PROG, "pipeline '%s', element %lld", pname, n);
            break;
        }
        sl_element_clear(&e);
        n++;
    }
    sl_trace_info ti; /* now: writing the trace takes a while, and is not part of the run */
    bool has_ti = a->trace && !sl_iter_trace_info(it, &ti);
    sl_stats *st = NULL;
    if (!rc && sl_iter_stats(it, &st)) rc = sl__fail(PROG);
    if (!rc && a->save && sl_stats_save(st, a->save)) rc = sl__fail(PROG);
    /* write the trace here, not at close, so that a failed write is an error, not a log line */
    if (!rc && a->trace && sl_iter_trace_end(it)) rc = sl__fail(PROG);
    if (!rc && a->trace && has_ti && ti.dropped > 0) {
        char nd[32], nk[32];
        group_digits(ti.dropped, nd, sizeof nd);
        group_digits(ti.recorded, nk, sizeof nk);
        int dig = ti.wall_s < 0.1 ? 3 : 1; /* a short run still shows how much the trace covers */
        fprintf(stderr, "%s: trace: %s events dropped after the first %s (the trace covers %.*f s of %.*f s); "
                        "raise --trace-max\n", PROG, nd, nk, dig, ti.covered_s, dig, ti.wall_s);
    }
    sl_iter_close(it);
    if (!rc) rc = report(a, st, pname);
    sl_stats_free(st);
    return rc;
}

static const struct {
    const char *name; /* the option that selects the mode */
    mode_fn run;
} MODES[] = {
    {"peek", run_peek},
    {"profile", run_profile},
};

/* ---- main ---- */

/* The pipeline to use when --pipeline is not given: 'train', or the only one. */
static const char *default_pipeline(const sl_cfg *cfg) {
    const char *names[64];
    int n = sl_pipeline_names(cfg, names, 64);
    for (int i = 0; i < n && i < 64; i++)
        if (strcmp(names[i], "train") == 0) return names[i];
    return n == 1 ? names[0] : NULL;
}

/* No --pipeline and no default: say which pipelines there are. The exit status. */
static int no_pipeline(const stats_args *a, const sl_cfg *cfg) {
    const char *names[64];
    char list[512];
    int n = sl_pipeline_names(cfg, names, 64);
    size_t len = 0;
    list[0] = 0;
    for (int i = 0; i < n && i < 64 && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, i ? ", %s" : "%s", names[i]);
    if (n == 0) {
        fprintf(stderr, "%s: %s: no `pipeline NAME { }` block in the file\n", PROG, a->config);
        return SL__EXIT_FAIL;
    }
    return sl__usage_error(PROG, "%s has several pipelines (%s): choose one with --pipeline NAME", a->config, list);
}

/* The options that go with a mode (0: --peek, 1: the profile) and with each other.
 * SL__EXIT_OK, or SL__EXIT_USAGE after the message. */
static int check_mode_args(const stats_args *a, int mode) {
    if (mode == 0 && (a->trace || a->trace_max || a->html || a->save || a->seconds_s || a->batches))
        return sl__usage_error(PROG, "--peek prints elements: --seconds, --batches, --trace, --html and --save "
                                     "belong to the profile (leave out --peek)");
    if (a->trace_max && !a->trace)
        return sl__usage_error(PROG, "--trace-max limits the --trace file: give --trace FILE too");
    if (a->shard_index >= a->shards)
        return sl__usage_error(PROG, "--shard-index %lld must be below --shards %lld", a->shard_index, a->shards);
    return SL__EXIT_OK;
}

int main(int argc, char **argv) {
    sl__tool_start();
    if (sl__tool_version(PROG, argc, argv)) return sl__tool_exit(PROG, SL__EXIT_OK);
    stats_args a = {.peek = -1, .values = 8, .shards = 1, .shard_index = 0};
    a.sets = calloc((size_t)argc + 1, sizeof *a.sets);
    if (!a.sets) return sl__tool_exit(PROG, sl__failf(PROG, "out of memory"));
    int nargs = 0, npos = 0;
    int rc = sl__take_repeated(PROG, "set", argc - 1, argv + 1, a.sets, &a.nsets, &nargs);
    if (rc >= 0) {
        free(a.sets);
        return sl__tool_exit(PROG, rc);
    }
    sl__opt opts[] = {
        {"pipeline", 'p', SL__OPT_STR, &a.pipeline, 0, 0},
        {"peek", 0, SL__OPT_INT, &a.peek, 0, 1000000000},
        {"json", 0, SL__OPT_FLAG, &a.json, 0, 0},
        {"values", 0, SL__OPT_INT, &a.values, 0, 1000},
        {"seed", 0, SL__OPT_INT, &a.seed, 0, INT64_MAX},
        {"shards", 0, SL__OPT_INT, &a.shards, 1, 1 << 30},
        {"shard-index", 0, SL__OPT_INT, &a.shard_index, 0, (1 << 30) - 1},
        {"seconds", 0, SL__OPT_STR, &a.seconds_s, 0, 0},
        {"batches", 0, SL__OPT_INT, &a.batches, 1, INT64_MAX},
        {"trace", 0, SL__OPT_STR, &a.trace, 0, 0},
        {"trace-max", 0, SL__OPT_INT, &a.trace_max, 1, 1000000000},
        {"html", 0, SL__OPT_STR, &a.html, 0, 0},
        {"save", 0, SL__OPT_STR, &a.save, 0, 0},
        {"from", 0, SL__OPT_STR, &a.from, 0, 0},
        {"cpu-budget", 0, SL__OPT_INT, &a.cpu_budget, 1, 4096},
        {"ram-budget", 0, SL__OPT_INT, &a.ram_budget, 1, INT64_MAX},
        {"max-bytes", 0, SL__OPT_INT, &a.max_bytes, 1, INT64_MAX},
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
    a.seconds = 5;
    if (a.seconds_s) {
        char *end;
        a.seconds = strtod(a.seconds_s, &end);
        if (end == a.seconds_s || *end || !(a.seconds > 0) || a.seconds > 1e7) {
            rc = sl__usage_error(PROG, "--seconds expects a positive number of seconds, got '%s'", a.seconds_s);
            goto done;
        }
    }
    if (a.seconds_s && a.batches) {
        rc = sl__usage_error(PROG, "--seconds and --batches exclude each other");
        goto done;
    }
    if (a.from) {
        if (npos != 0 || a.peek >= 0) {
            rc = sl__usage_error(PROG, "--from FILE reports on a stats file: no CONFIG and no --peek with it");
            goto done;
        }
        sl_stats *st;
        if (sl_stats_load_max(a.from, a.max_bytes ? (uint64_t)a.max_bytes : SL_STATS_MAX_BYTES, &st)) {
            rc = sl__fail(PROG);
            goto done;
        }
        rc = report(&a, st, a.from);
        sl_stats_free(st);
        goto done;
    }
    if (a.max_bytes) {
        rc = sl__usage_error(PROG, "--max-bytes limits the stats file --from reads: use it with --from");
        goto done;
    }
    if (npos != 1) {
        rc = sl__usage_error(PROG, npos == 0 ? "missing CONFIG" : "one CONFIG file, got %d arguments", npos);
        goto done;
    }
    a.config = argv[1];
    int mode = a.peek >= 0 ? 0 : 1;
    if ((rc = check_mode_args(&a, mode)) != SL__EXIT_OK) goto done;
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
        rc = no_pipeline(&a, cfg);
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
    return sl__tool_exit(PROG, rc);
}
