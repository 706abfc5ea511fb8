/* Stats snapshots of a running pipeline, their JSON form (written by the trainer into its
 * run folder, read back by `sluice-stats --from`), and the bottleneck verdict.
 *
 * Workload: a snapshot every second or so of a graph of 5-50 ops with up to 256 history
 * points each; files of tens of KB. The JSON reader is a small recursive-descent parser for
 * the subset this file writes (objects, arrays, numbers, strings, true/false/null). */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"
#include "sluice/file.h"
#include "sluice/json.h"
#include "sluice/pool.h"
#include "sluice/stats.h"

#define NS 1e-9

sl_status sl_iter_stats(const sl_iter *it, sl_stats **out) {
    *out = NULL;
    sl_ictx *ctx = it->ctx;
    sl_stats *st = calloc(1, sizeof *st);
    if (!st) return sl_err(SL_ENOMEM, "out of memory for stats");
    pthread_mutex_lock(&ctx->nodes_mu);
    int n = ctx->nnodes;
    sl_op_node **nodes = malloc(sizeof *nodes * (size_t)(n ? n : 1));
    if (nodes) memcpy(nodes, ctx->nodes, sizeof *nodes * (size_t)n);
    pthread_mutex_unlock(&ctx->nodes_mu);
    if (!nodes || !(st->ops = calloc((size_t)(n ? n : 1), sizeof *st->ops))) {
        free(nodes);
        sl_stats_free(st);
        return sl_err(SL_ENOMEM, "out of memory for stats");
    }
    st->wall_s = (double)(sl_now_ns() - ctx->start_ns) * NS;
    st->next_s = (double)atomic_load(&ctx->root_next_ns) * NS;
    st->cpu_budget = ctx->ncpu;
    st->thread_budget = atomic_load(&ctx->thread_budget); /* before the ops: see autotune.c */
    st->ram_budget = ctx->opts.ram_budget;
    st->buffered_bytes_peak = atomic_load(&ctx->buffered_bytes_peak);
    st->n = n;
    for (int i = 0; i < n; i++) {
        sl_op_node *nd = nodes[i];
        sl_op_stats *c = &nd->stats;
        sl_op_stat *o = &st->ops[i];
        o->id = nd->id;
        o->parent = nd->parent;
        snprintf(o->label, sizeof o->label, "%s", nd->label);
        snprintf(o->op, sizeof o->op, "%s", nd->op);
        o->elements = atomic_load(&c->elements);
        o->bytes = atomic_load(&c->bytes);
        o->errors = atomic_load(&c->errors);
        o->busy_s = (double)atomic_load(&c->busy_ns) * NS;
        o->wait_s = (double)atomic_load(&c->wait_ns) * NS;
        o->blocked_s = (double)atomic_load(&c->blocked_ns) * NS;
        o->stall_s = (double)atomic_load(&c->stall_ns) * NS;
        o->empty_hits = atomic_load(&c->empty_hits);
        o->parallelism = atomic_load(&c->parallelism);
        o->threads = atomic_load(&c->threads);
        o->buffer = atomic_load(&c->buffer);
        long long ns = atomic_load(&c->occ_samples);
        o->buffered_avg = ns ? (double)atomic_load(&c->occ_sum) / 1000.0 / (double)ns
                             : (double)atomic_load(&c->buffered);
        o->buffered_bytes_peak = atomic_load(&c->buffered_bytes_peak);
        pthread_mutex_lock(&nd->tune_mu);
        o->tuned = nd->auto_par || nd->auto_buf;
        if (nd->nhist && (o->hist = calloc((size_t)nd->nhist, sizeof *o->hist))) {
            o->nhist = nd->nhist;
            for (int k = 0; k < nd->nhist; k++) {
                o->hist[k].t = nd->hist[k].t_ms / 1000.0;
                o->hist[k].parallelism = nd->hist[k].parallelism;
                o->hist[k].buffer = nd->hist[k].buffer;
                o->hist[k].buffered = nd->hist[k].buffered;
            }
        }
        pthread_mutex_unlock(&nd->tune_mu);
    }
    st->elements = n ? st->ops[0].elements : 0;
    free(nodes);
    *out = st;
    return SL_OK;
}

void sl_stats_free(sl_stats *st) {
    if (!st) return;
    for (int i = 0; i < st->n && st->ops; i++) free(st->ops[i].hist);
    free(st->ops);
    free(st);
}

/* ---- writing ---- */

static void print_stats(const sl_stats *st, FILE *f) {
    fprintf(f, "{\"format\": \"sluice-stats\", \"version\": 1,\n \"wall_s\": %.6f, \"next_s\": %.6f, "
               "\"elements\": %lld, \"cpu_budget\": %d, \"thread_budget\": %d, \"ram_budget\": %lld, \"buffered_bytes_peak\": %lld,\n"
               " \"ops\": [",
            st->wall_s, st->next_s, (long long)st->elements, st->cpu_budget, st->thread_budget,
            (long long)st->ram_budget,
            (long long)st->buffered_bytes_peak);
    for (int i = 0; i < st->n; i++) {
        const sl_op_stat *o = &st->ops[i];
        fprintf(f, "%s\n  {\"id\": %d, \"parent\": %d, \"label\": ", i ? "," : "", o->id, o->parent);
        sl_json_fput_str(f, o->label);
        fprintf(f, ", \"op\": ");
        sl_json_fput_str(f, o->op);
        fprintf(f, ", \"elements\": %lld, \"bytes\": %lld, \"errors\": %lld, \"busy_s\": %.6f, \"wait_s\": %.6f, "
                   "\"blocked_s\": %.6f, \"stall_s\": %.6f, \"empty_hits\": %lld, \"parallelism\": %d, "
                   "\"threads\": %d, \"buffer\": %d, \"tuned\": %s, \"buffered_avg\": %.4f, "
                   "\"buffered_bytes_peak\": %lld,\n   \"history\": [",
                (long long)o->elements, (long long)o->bytes, (long long)o->errors, o->busy_s, o->wait_s,
                o->blocked_s, o->stall_s, (long long)o->empty_hits, o->parallelism, o->threads, o->buffer,
                o->tuned ? "true" : "false", o->buffered_avg, (long long)o->buffered_bytes_peak);
        for (int k = 0; k < o->nhist; k++)
            fprintf(f, "%s[%.3f, %d, %d, %.3f]", k ? ", " : "", o->hist[k].t, o->hist[k].parallelism,
                    o->hist[k].buffer, o->hist[k].buffered);
        fprintf(f, "]}");
    }
    fprintf(f, "\n ]}");
}

sl_status sl_stats_fprint(const sl_stats *st, FILE *f) {
    print_stats(st, f);
    return ferror(f) ? sl_err(SL_EIO, "cannot write stats") : SL_OK;
}

sl_status sl_stats_save(const sl_stats *st, const char *path) {
    char tmp[4200];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return sl_err(SL_EINVAL, "stats file '%s': path too long", path);
    /* an existing path must be a regular file: rename() would replace a device or a FIFO */
    sl_status s = sl_file_check_regular(path, "stats file");
    if (s && s != SL_ENOTFOUND) return s;
    FILE *f;
    if ((s = sl_file_fopen_write(tmp, "w", "stats file", &f))) return s;
    print_stats(st, f);
    fputc('\n', f);
    if ((s = sl_file_fclose_write(f, path, "cannot write stats"))) {
        remove(tmp);
        return s;
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return sl_err_at(SL_EIO, path, -1, "cannot write stats: %s", strerror(e));
    }
    return SL_OK;
}

sl_status sl_stats_write_json(const sl_iter *it, const char *path) {
    sl_stats *st;
    sl_status s = sl_iter_stats(it, &st);
    if (s) return s;
    s = sl_stats_save(st, path);
    sl_stats_free(st);
    return s;
}

/* ---- reading: a small JSON parser ---- */

/* The file comes from outside: it is read whole under a byte limit (sl_file_read_all refuses
 * FIFOs, devices and directories at once), and the tree built from it is charged against a
 * memory budget proportional to its size, so no input, however hostile, makes the reader
 * allocate more than about JSON_MEM_FACTOR times the file's size. */
#define JSON_MEM_FACTOR 16
#define JSON_MEM_SLACK (1u << 20)
#define JSON_ALLOC_OVERHEAD 16 /* what malloc keeps per block, charged too */
#define MAX_OPS 65536          /* graphs have tens of ops; the verdict loops are per op */

typedef enum { JNULL, JBOOL, JNUM, JSTR, JARR, JOBJ } jtype;

typedef struct jval {
    unsigned char t;      /* jtype */
    int n;                /* JARR / JOBJ members */
    union {
        double num;       /* JNUM, JBOOL */
        char *str;        /* JSTR */
        struct jval *items; /* JARR / JOBJ values */
    };
    char **keys;          /* JOBJ */
} jval;

typedef struct {
    const char *s, *p, *end;
    const char *path;
    int depth;
    size_t budget;        /* bytes the tree may still take */
} jparser;

static void jfree(jval *v) {
    if (v->t == JSTR) free(v->str);
    if (v->t == JARR || v->t == JOBJ) {
        for (int i = 0; i < v->n; i++) {
            jfree(&v->items[i]);
            if (v->keys) free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
    }
    memset(v, 0, sizeof *v);
}

static sl_status jerr(jparser *j, const char *what) {
    return sl_err_at(SL_ECORRUPT, j->path, (int64_t)(j->p - j->s), "not a sluice-stats file: %s", what);
}

/* Charge n bytes (plus malloc's own) to the budget before allocating them. */
static sl_status jcharge(jparser *j, size_t n) {
    n += JSON_ALLOC_OVERHEAD;
    if (n > j->budget) {
        sl_err_at(SL_ECORRUPT, j->path, (int64_t)(j->p - j->s),
                  "not a sluice-stats file: its JSON would take more than %d times the file's size "
                  "in memory", JSON_MEM_FACTOR);
        sl_err_hint("stats files are a few objects per op; this one is built to exhaust memory, or damaged");
        return SL_ECORRUPT;
    }
    j->budget -= n;
    return SL_OK;
}

static void jws(jparser *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r')) j->p++;
}

static sl_status jvalue(jparser *j, jval *v);

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static sl_status jstring(jparser *j, char **out) {
    j->p++; /* the opening quote */
    /* the decoded string is never longer than its source: allocate that once */
    const char *q = j->p;
    while (q < j->end && *q != '"') q += (*q == '\\' && q + 1 < j->end) ? 2 : 1;
    if (q >= j->end) {
        j->p = j->end;
        return jerr(j, "unterminated string");
    }
    size_t raw = (size_t)(q - j->p);
    sl_status s = jcharge(j, raw + 1);
    if (s) return s;
    char *b = malloc(raw + 1);
    if (!b) return sl_err(SL_ENOMEM, "out of memory reading stats");
    size_t n = 0;
    while (j->p < q) {
        unsigned char c = (unsigned char)*j->p;
        if (c < 0x20) {
            free(b);
            return jerr(j, "a control character inside a string");
        }
        j->p++;
        if (c != '\\') {
            b[n++] = (char)c;
            continue;
        }
        char e = *j->p++;
        if (e == 'u') {
            unsigned code = 0;
            for (int k = 0; k < 4; k++) {
                int h = j->p + k < q ? hexval(j->p[k]) : -1;
                if (h < 0) {
                    free(b);
                    return jerr(j, "a malformed \\u escape");
                }
                code = code * 16 + (unsigned)h;
            }
            if (code == 0) {
                free(b);
                return jerr(j, "\\u0000 inside a string");
            }
            j->p += 4;
            /* UTF-8 (a surrogate half is kept as its 3 bytes: labels are ASCII in practice) */
            if (code < 0x80) {
                b[n++] = (char)code;
            } else if (code < 0x800) {
                b[n++] = (char)(0xc0 | (code >> 6));
                b[n++] = (char)(0x80 | (code & 0x3f));
            } else {
                b[n++] = (char)(0xe0 | (code >> 12));
                b[n++] = (char)(0x80 | ((code >> 6) & 0x3f));
                b[n++] = (char)(0x80 | (code & 0x3f));
            }
            continue;
        }
        switch (e) {
        case 'n': b[n++] = '\n'; break;
        case 't': b[n++] = '\t'; break;
        case 'r': b[n++] = '\r'; break;
        case 'b': b[n++] = '\b'; break;
        case 'f': b[n++] = '\f'; break;
        case '"': case '\\': case '/': b[n++] = e; break;
        default:
            free(b);
            j->p--;
            return jerr(j, "an unknown escape in a string");
        }
    }
    j->p = q + 1;
    b[n] = 0;
    *out = b;
    return SL_OK;
}

static sl_status jpush(jparser *j, jval *v, char *key, jval *item) {
    if ((v->n & (v->n - 1)) == 0) { /* grow at powers of two */
        int cap = v->n ? 2 * v->n : 1;
        if (v->n >= (1 << 29)) return jerr(j, "an array or object too large");
        size_t per = sizeof(jval) + (v->t == JOBJ ? sizeof(char *) : 0);
        sl_status s = jcharge(j, per * (size_t)(cap - v->n));
        if (s) return s;
        jval *ni = realloc(v->items, sizeof *ni * (size_t)cap);
        if (ni) v->items = ni;
        char **nk = v->t == JOBJ ? realloc(v->keys, sizeof *nk * (size_t)cap) : NULL;
        if (nk) v->keys = nk;
        if (!ni || (v->t == JOBJ && !nk)) return sl_err(SL_ENOMEM, "out of memory reading stats");
    }
    v->items[v->n] = *item;
    if (v->t == JOBJ) v->keys[v->n] = key;
    v->n++;
    return SL_OK;
}

static sl_status jcontainer(jparser *j, jval *v, bool obj) {
    v->t = obj ? JOBJ : JARR;
    if (++j->depth > 32) return jerr(j, "nested too deeply");
    j->p++;
    jws(j);
    if (j->p < j->end && *j->p == (obj ? '}' : ']')) {
        j->p++;
        j->depth--;
        return SL_OK;
    }
    for (;;) {
        char *key = NULL;
        jws(j);
        if (obj) {
            if (j->p >= j->end || *j->p != '"') return jerr(j, "expected a key");
            sl_status s = jstring(j, &key);
            if (s) return s;
            jws(j);
            if (j->p >= j->end || *j->p != ':') {
                free(key);
                return jerr(j, "expected ':'");
            }
            j->p++;
        }
        jval item = {0};
        sl_status s = jvalue(j, &item);
        if (!s) s = jpush(j, v, key, &item);
        if (s) {
            free(key);
            jfree(&item);
            return s;
        }
        jws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == (obj ? '}' : ']')) {
            j->p++;
            j->depth--;
            return SL_OK;
        }
        return jerr(j, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

/* The text is NUL-terminated (sl_file_read_all), so the word and number scans below stop
 * at the end of the buffer. */
static sl_status jvalue(jparser *j, jval *v) {
    jws(j);
    if (j->p >= j->end) return jerr(j, "unexpected end of file");
    char c = *j->p;
    if (c == '{' || c == '[') return jcontainer(j, v, c == '{');
    if (c == '"') {
        v->t = JSTR;
        return jstring(j, &v->str);
    }
    if (!strncmp(j->p, "true", 4) || !strncmp(j->p, "false", 5)) {
        v->t = JBOOL;
        v->num = c == 't';
        j->p += c == 't' ? 4 : 5;
        return SL_OK;
    }
    if (!strncmp(j->p, "null", 4)) {
        v->t = JNULL;
        j->p += 4;
        return SL_OK;
    }
    /* a JSON number: strtod alone would also take "nan", "inf" and hex */
    if (!(c == '-' || (c >= '0' && c <= '9'))) return jerr(j, "unexpected character");
    for (const char *q = j->p + 1; q < j->end && (isalnum((unsigned char)*q) || *q == '.' || *q == '+' || *q == '-'); q++)
        if (*q == 'x' || *q == 'X' || *q == 'n' || *q == 'N' || *q == 'i' || *q == 'I')
            return jerr(j, "a malformed number");
    char *e;
    v->num = strtod(j->p, &e);
    if (e == j->p || !isfinite(v->num)) return jerr(j, "a malformed number");
    v->t = JNUM;
    j->p = e;
    return SL_OK;
}

static const jval *jget(const jval *o, const char *key) {
    if (o->t != JOBJ) return NULL;
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->keys[i], key)) return &o->items[i];
    return NULL;
}

static double jnum(const jval *o, const char *key) {
    const jval *v = jget(o, key);
    return v && (v->t == JNUM || v->t == JBOOL) ? v->num : 0;
}

/* A number of the file as an integer in [lo, hi] (out-of-range values are clamped: a
 * float-to-int conversion out of range would be undefined). */
static int64_t jint(const jval *o, const char *key, int64_t lo, int64_t hi) {
    double d = jnum(o, key);
    if (!(d >= (double)lo)) return lo;
    if (d >= (double)hi) return hi;
    return (int64_t)d;
}

static int64_t clamp_num(double d, int64_t lo, int64_t hi) {
    if (!(d >= (double)lo)) return lo;
    if (d >= (double)hi) return hi;
    return (int64_t)d;
}

sl_status sl_stats_load(const char *path, sl_stats **out) {
    return sl_stats_load_max(path, SL_STATS_MAX_BYTES, out);
}

sl_status sl_stats_load_max(const char *path, uint64_t max_bytes, sl_stats **out) {
    *out = NULL;
    char *buf;
    size_t n;
    char hint[160];
    snprintf(hint, sizeof hint, "stats files are a few KB to a few MB; to read a larger one raise the limit "
                                "(sluice-stats --max-bytes N)");
    sl_status s = sl_file_read_all(path, "stats file", max_bytes, hint, &buf, &n);
    if (s) return s;
    size_t budget = n > (SIZE_MAX - JSON_MEM_SLACK) / JSON_MEM_FACTOR ? SIZE_MAX : n * JSON_MEM_FACTOR + JSON_MEM_SLACK;
    jparser j = {buf, buf, buf + n, path, 0, budget};
    jval root = {0};
    s = jvalue(&j, &root);
    sl_stats *st = NULL;
    if (s) goto done;
    jws(&j);
    if (j.p != j.end) {
        s = jerr(&j, "text after the JSON value");
        goto done;
    }
    const jval *top = &root, *wrapped = jget(&root, "stats"); /* sluice-stats --json wraps it */
    if (wrapped && wrapped->t == JOBJ) top = wrapped;
    const jval *fmt = jget(top, "format"), *ops = jget(top, "ops");
    if (!fmt || fmt->t != JSTR || strcmp(fmt->str, "sluice-stats") || jnum(top, "version") != 1 || !ops ||
        ops->t != JARR) {
        j.p = buf;
        s = jerr(&j, "no \"format\": \"sluice-stats\", \"version\": 1 and \"ops\"");
        sl_err_hint("write it with sl_stats_write_json (or sluice-stats --json)");
        goto done;
    }
    if (ops->n > MAX_OPS) {
        s = sl_err_at(SL_ECORRUPT, path, -1, "not a sluice-stats file: %d ops, more than %d", ops->n, MAX_OPS);
        goto done;
    }
    if (!(st = calloc(1, sizeof *st)) || !(st->ops = calloc((size_t)(ops->n ? ops->n : 1), sizeof *st->ops))) {
        s = sl_err(SL_ENOMEM, "out of memory reading %s", path);
        goto done;
    }
    st->wall_s = jnum(top, "wall_s");
    st->next_s = jnum(top, "next_s");
    st->elements = jint(top, "elements", INT64_MIN, INT64_MAX);
    st->cpu_budget = (int)jint(top, "cpu_budget", 0, INT_MAX);
    st->thread_budget = (int)jint(top, "thread_budget", 0, INT_MAX);
    st->ram_budget = jint(top, "ram_budget", INT64_MIN, INT64_MAX);
    st->buffered_bytes_peak = jint(top, "buffered_bytes_peak", INT64_MIN, INT64_MAX);
    st->n = ops->n;
    for (int i = 0; i < ops->n; i++) {
        const jval *o = &ops->items[i];
        sl_op_stat *d = &st->ops[i];
        const jval *lab = jget(o, "label"), *op = jget(o, "op"), *h = jget(o, "history");
        d->id = i;
        /* parents come first; anything else is not ours */
        d->parent = (int)jint(o, "parent", -1, INT_MAX);
        if (d->parent >= i) d->parent = -1;
        snprintf(d->label, sizeof d->label, "%s", lab && lab->t == JSTR ? lab->str : "?");
        snprintf(d->op, sizeof d->op, "%s", op && op->t == JSTR ? op->str : "?");
        d->elements = jint(o, "elements", INT64_MIN, INT64_MAX);
        d->bytes = jint(o, "bytes", INT64_MIN, INT64_MAX);
        d->errors = jint(o, "errors", INT64_MIN, INT64_MAX);
        d->busy_s = jnum(o, "busy_s");
        d->wait_s = jnum(o, "wait_s");
        d->blocked_s = jnum(o, "blocked_s");
        d->stall_s = jnum(o, "stall_s");
        d->empty_hits = jint(o, "empty_hits", INT64_MIN, INT64_MAX);
        d->parallelism = (int)jint(o, "parallelism", INT_MIN, INT_MAX);
        d->threads = (int)jint(o, "threads", INT_MIN, INT_MAX);
        d->buffer = (int)jint(o, "buffer", INT_MIN, INT_MAX);
        d->tuned = jnum(o, "tuned") != 0;
        d->buffered_avg = jnum(o, "buffered_avg");
        d->buffered_bytes_peak = jint(o, "buffered_bytes_peak", INT64_MIN, INT64_MAX);
        if (h && h->t == JARR && h->n > 0 && (d->hist = calloc((size_t)h->n, sizeof *d->hist))) {
            for (int k = 0; k < h->n; k++) {
                const jval *p = &h->items[k];
                if (p->t != JARR || p->n < 4) continue;
                bool nums = true;
                for (int m = 0; m < 4; m++) nums = nums && p->items[m].t == JNUM;
                if (!nums) continue;
                sl_stats_sample *q = &d->hist[d->nhist++];
                q->t = p->items[0].num;
                q->parallelism = (int)clamp_num(p->items[1].num, INT_MIN, INT_MAX);
                q->buffer = (int)clamp_num(p->items[2].num, INT_MIN, INT_MAX);
                q->buffered = p->items[3].num;
            }
        }
    }
done:
    jfree(&root);
    free(buf);
    if (s) {
        sl_stats_free(st);
        return s;
    }
    *out = st;
    return SL_OK;
}

/* ---- shares and the verdict ---- */

/* The op's parallelism averaged over the run (autotune changes it), from its history. */
static double lanes(const sl_stats *st, const sl_op_stat *o) {
    if (o->parallelism <= 0) return 1;
    double sum = 0, span = 0;
    for (int k = 0; k < o->nhist; k++) {
        double t1 = k + 1 < o->nhist ? o->hist[k + 1].t : st->wall_s;
        if (t1 <= o->hist[k].t || o->hist[k].parallelism <= 0) continue;
        sum += o->hist[k].parallelism * (t1 - o->hist[k].t);
        span += t1 - o->hist[k].t;
    }
    return span > 0 ? sum / span : o->parallelism;
}

static double share(const sl_stats *st, const sl_op_stat *o, double t) {
    if (st->wall_s <= 0) return 0;
    double v = t / (st->wall_s * lanes(st, o));
    return v < 0 ? 0 : v > 1 ? 1 : v;
}

double sl_stats_busy(const sl_stats *st, const sl_op_stat *op) { return share(st, op, op->busy_s); }
double sl_stats_waiting(const sl_stats *st, const sl_op_stat *op) { return share(st, op, op->wait_s); }
double sl_stats_blocked(const sl_stats *st, const sl_op_stat *op) { return share(st, op, op->blocked_s); }

static bool is_source(const char *op) {
    return !strcmp(op, "tfrecord") || !strcmp(op, "range") || !strcmp(op, "list_files");
}

static void advise(const sl_stats *st, const sl_op_stat *o, char *out, size_t cap) {
    const char *op = o->op;
    if (!strcmp(op, "map") || !strcmp(op, "map_batch")) {
        if (o->tuned && o->parallelism >= st->cpu_budget)
            snprintf(out, cap, "it already runs on the whole CPU budget (%d): make its function cheaper "
                               "(decode at a reduced size, drop work), or give the pipeline more cores "
                               "(cpu_budget)", st->cpu_budget);
        else if (o->tuned)
            snprintf(out, cap, "autotune holds it at %d of %d cores: other ops need the rest; make its "
                               "function cheaper or raise cpu_budget", o->parallelism, st->cpu_budget);
        else
            snprintf(out, cap, "raise its parallelism (now %d; e.g. parallel=auto so autotune chooses, up "
                               "to %d cores), or make its function cheaper", o->parallelism, st->cpu_budget);
    } else if (!strcmp(op, "interleave") && o->parallelism > 0 && sl_stats_blocked(st, o) > 0.5) {
        snprintf(out, cap, "its readers are ahead (blocked on full buffers %.0f%% of the time): the cost is "
                           "handing records over one at a time on the consumer's side; a larger block "
                           "length, or fewer, larger records, lowers it", 100 * sl_stats_blocked(st, o));
    } else if (!strcmp(op, "interleave")) {
        snprintf(out, cap, "read more inputs at once: raise interleave's parallel (now %d%s) and cycle; "
                           "check the storage's read rate", o->parallelism, o->tuned ? ", chosen by autotune" : "; or auto");
    } else if (is_source(op)) {
        snprintf(out, cap, "the source cannot deliver faster: read several files at once (files with "
                           "interleave parallel=auto), use faster storage, or cache the records");
    } else if (!strcmp(op, "batch")) {
        snprintf(out, cap, "batching copies every element: put the batch right after a map so they fuse "
                           "(map_batch writes elements straight into the batch)");
    } else if (!strcmp(op, "shuffle")) {
        snprintf(out, cap, "the shuffle buffer moves elements one at a time: shuffle file names or "
                           "records before the expensive maps, or use a smaller buffer");
    } else if (!strcmp(op, "filter")) {
        snprintf(out, cap, "its predicate is slow and runs on one thread: filter earlier (before the "
                           "expensive ops) or move the test into a parallel map");
    } else {
        snprintf(out, cap, "this op runs on one thread: make it cheaper, or move its work into a map "
                           "with parallel=auto");
    }
}

int sl_stats_bottleneck(const sl_stats *st, sl_stats_verdict *v) {
    memset(v, 0, sizeof *v);
    v->op = SL_VERDICT_NONE;
    if (st->n == 0 || st->wall_s <= 0 || st->elements == 0) {
        snprintf(v->summary, sizeof v->summary, "no verdict: the pipeline produced nothing yet");
        return v->op;
    }
    double inside = st->next_s / st->wall_s;
    double rate = (double)st->elements / st->wall_s;
    if (inside < 0.15) {
        v->op = SL_VERDICT_CONSUMER;
        snprintf(v->summary, sizeof v->summary,
                 "the pipeline is not the bottleneck: input is ready, the consumer is slow");
        snprintf(v->evidence, sizeof v->evidence,
                 "the consumer spent %.0f%% of the time waiting inside next() (%.1f elements/s); "
                 "%.0f%% went to its own work between calls",
                 100 * inside, rate, 100 * (1 - inside));
        snprintf(v->advice, sizeof v->advice,
                 "speed up the consumer (the training step); the pipeline could even use fewer cores "
                 "(cpu_budget) to leave more to it");
        return v->op;
    }
    int best = -1;
    double bu = -1;
    for (int i = 0; i < st->n; i++) {
        double u = sl_stats_busy(st, &st->ops[i]);
        if (u >= bu - 1e-9) { /* ties: the later (nearer the source) op */
            bu = u;
            best = i;
        }
    }
    const sl_op_stat *o = &st->ops[best];
    if (bu < SL_STATS_SATURATED) {
        /* The consumer waits, yet no op's lanes are even half busy: no op's throughput is
         * the limit. The time goes to latency (the source waiting on storage, a chain of
         * single-threaded hand-offs with no buffer in between), not to work. */
        v->op = SL_VERDICT_UNSATURATED;
        snprintf(v->summary, sizeof v->summary, "no op is saturated");
        if (inside < 0.5) {
            snprintf(v->evidence, sizeof v->evidence,
                     "the busiest op, '%s' (%s), is busy %.0f%% of its lanes' time (under %.0f%%); the "
                     "consumer waited inside next() %.0f%% of the time and spent %.0f%% on its own work "
                     "between calls (%.1f elements/s): the consumer limits the throughput more than any op",
                     o->label, o->op, 100 * bu, 100 * SL_STATS_SATURATED, 100 * inside, 100 * (1 - inside), rate);
            snprintf(v->advice, sizeof v->advice,
                     "speed up the consumer (the training step) first; then a prefetch (buffer=auto) before "
                     "the consumer hides the rest of its wait; more threads for an op would not help");
        } else {
            int ahead = -1; /* an op whose producers sit on full buffers: the wait is downstream of it */
            for (int i = 0; i < st->n; i++)
                if (sl_stats_blocked(st, &st->ops[i]) > 0.5 &&
                    (ahead < 0 || sl_stats_blocked(st, &st->ops[i]) > sl_stats_blocked(st, &st->ops[ahead])))
                    ahead = i;
            if (ahead >= 0) {
                const sl_op_stat *a = &st->ops[ahead];
                snprintf(v->evidence, sizeof v->evidence,
                         "the busiest op, '%s' (%s), is busy %.0f%% of its lanes' time (under %.0f%%), yet the "
                         "consumer waited inside next() %.0f%% of the time (%.1f elements/s), while '%s' is "
                         "blocked on full buffers %.0f%% of the time: the time goes to handing elements over "
                         "one at a time between the ops above it, not to any op's work",
                         o->label, o->op, 100 * bu, 100 * SL_STATS_SATURATED, 100 * inside, rate, a->label,
                         100 * sl_stats_blocked(st, a));
                snprintf(v->advice, sizeof v->advice,
                         "fewer, larger elements between those ops: a larger interleave block, batch earlier, "
                         "or fuse maps into one; more threads would not help");
                return v->op;
            }
            snprintf(v->evidence, sizeof v->evidence,
                     "the busiest op, '%s' (%s), is busy %.0f%% of its lanes' time (under %.0f%%), yet the "
                     "consumer waited inside next() %.0f%% of the time (%.1f elements/s): the pipeline is "
                     "limited by latency (its source waiting on storage, or one-at-a-time hand-offs "
                     "between ops), not by any op's work",
                     o->label, o->op, 100 * bu, 100 * SL_STATS_SATURATED, 100 * inside, rate);
            snprintf(v->advice, sizeof v->advice,
                     "overlap the waits: add a prefetch (buffer=auto) before the consumer, read several "
                     "files at once (interleave parallel=auto); more threads for a busy op would not help");
        }
        return v->op;
    }
    v->op = best;
    snprintf(v->summary, sizeof v->summary, "bottleneck: op '%s' (%s)", o->label, o->op);
    char par[64] = "the time";
    if (o->parallelism > 1) snprintf(par, sizeof par, "its %d threads' time", o->parallelism);
    double second = 0;
    for (int i = 0; i < st->n; i++)
        if (i != best && sl_stats_busy(st, &st->ops[i]) > second) second = sl_stats_busy(st, &st->ops[i]);
    snprintf(v->evidence, sizeof v->evidence,
             "busy %.0f%% of %s, waiting on its input %.0f%%; the consumer waited inside next() "
             "%.0f%% of the time (%.1f elements/s); the next busiest op is at %.0f%%",
             100 * bu, par, 100 * sl_stats_waiting(st, o), 100 * inside, rate, 100 * second);
    advise(st, o, v->advice, sizeof v->advice);
    return v->op;
}
