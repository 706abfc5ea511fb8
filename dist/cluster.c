/* Cluster resolution: explicit arguments, the config's `cluster` block, TF_CONFIG, Slurm and
 * Open MPI variables, in that order (see cluster.h). The environment arrives as an array;
 * nothing here calls getenv. The block's `curve` statement only names key files: its paths
 * get "{task}" expanded once the task is known, and sl_cluster_curve reads them.
 *
 * Workload: once per process, a few to a few hundred tasks. Every error names the source
 * (and the byte offset for TF_CONFIG) and says what to change. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/cluster_priv.h"
#include "sluice/cluster.h"
#include "sluice/util.h"

#define DEFAULT_PORT_BASE 29500

static const char *const TYPE_NAMES[SL_TASK_TYPES_] = {"chief", "worker", "ps", "evaluator"};

const char *sl_task_type_name(sl_task_type t) {
    return (unsigned)t < SL_TASK_TYPES_ ? TYPE_NAMES[t] : "?";
}

int sl_task_type_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < SL_TASK_TYPES_; i++)
        if (strcmp(name, TYPE_NAMES[i]) == 0) return i;
    if (strcmp(name, "master") == 0) return SL_TASK_CHIEF; /* TF 1.x name of the chief */
    return -1;
}

typedef sl__cluster_spec spec;

/* A comma-separated list of addresses. */
static sl_status add_csv(spec *s, int type, const char *csv) {
    const char *p = csv;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char a[300];
        if (n == 0 || n >= sizeof a) return sl_err(SL_EINVAL, "%s: empty or overlong entry in \"%s\"", s->src, csv);
        memcpy(a, p, n);
        a[n] = 0;
        sl_status st = sl__cluster_add_member(s, type, a);
        if (st) return st;
        p += n + (e ? 1 : 0);
        if (e && !*p) return sl_err(SL_EINVAL, "%s: trailing ',' in \"%s\"", s->src, csv);
    }
    return SL_OK;
}

/* ---- sources ----------------------------------------------------------------------- */

static sl_status from_args(const sl_cluster_args *a, spec *s) {
    strcpy(s->src, "args");
    sl_status st;
    if (a->peers && (st = add_csv(s, SL_TASK_WORKER, a->peers))) return st;
    if (a->ps && (st = add_csv(s, SL_TASK_PS, a->ps))) return st;
    if (a->task_type) {
        int t = sl_task_type_from_name(a->task_type);
        if (t < 0) return sl_err(SL_EINVAL, "args: unknown task type \"%s\" (chief, worker, ps, evaluator)", a->task_type);
        if (a->task_index < 0) return sl_err(SL_EINVAL, "args: task index %d is negative", a->task_index);
        s->task_type = t;
        s->task_index = a->task_index;
        s->have_task = 1;
    } else if (a->has_rank) {
        if (a->rank < 0) return sl_err(SL_EINVAL, "args: rank %d is negative", a->rank);
        s->task_type = SL_TASK_WORKER;
        s->task_index = a->rank;
        s->have_task = 1;
    }
    return SL_OK;
}

/* The curve statement's paths as written ({task} not yet expanded). */
typedef struct curve_spec {
    char path[3][1024]; /* server, client, allow */
    int line;           /* of the statement, 0 when there is none */
} curve_spec;

static const char *const CURVE_OPTS[3] = {"server", "client", "allow"};

/* `curve server="..." client="..." allow="..."`: all three options, nothing else. */
static sl_status parse_curve(const sl_cfg *cfg, const sl_cfg_stmt *st, curve_spec *cv) {
    if (cv->line)
        return sl_cfg_err(cfg, st->loc, SL_EINVAL, "a second 'curve' statement (the first is on line %d)", cv->line);
    const char *usage = "curve server=\"server.key\" client=\"{task}.key\" allow=\"allowed\"";
    const sl_cfg_value *got[3] = {NULL, NULL, NULL};
    for (int i = 0; i < st->nargs; i++) {
        const sl_cfg_arg *a = &st->args[i];
        if (!a->key || a->sep != '=') {
            sl_status rc = sl_cfg_err(cfg, a->v.loc, SL_EINVAL, "'curve' takes only the options server=, client= and allow=");
            sl_err_hint("write %s", usage);
            return rc;
        }
        int k = -1;
        for (int j = 0; j < 3; j++)
            if (strcmp(a->key, CURVE_OPTS[j]) == 0) k = j;
        if (k < 0) {
            sl_status rc = sl_cfg_err(cfg, a->v.loc, SL_EINVAL, "unknown option '%s=' of 'curve' (server=, client=, allow=)", a->key);
            const char *sug = sl_suggest(a->key, CURVE_OPTS, 3);
            if (sug) sl_err_hint("did you mean '%s='?", sug);
            return rc;
        }
        if (got[k]) return sl_cfg_err(cfg, a->v.loc, SL_EINVAL, "'curve' has %s= twice", a->key);
        got[k] = &a->v;
    }
    for (int j = 0; j < 3; j++) {
        if (!got[j]) {
            sl_status rc = sl_cfg_err(cfg, st->loc, SL_EINVAL, "'curve' needs %s= (the %s)", CURVE_OPTS[j],
                                      j == 0 ? "server keypair file" : j == 1 ? "client keypair file of this task"
                                                                               : "allow-list file");
            sl_err_hint("write %s", usage);
            return rc;
        }
        const char *w;
        sl_status rc = sl_cfg_word(cfg, got[j], &w);
        if (rc) return rc;
        if (!*w) return sl_cfg_err(cfg, got[j]->loc, SL_EINVAL, "'curve' %s= is an empty path", CURVE_OPTS[j]);
        /* the only placeholder is {task}; each use grows the path by at most 16 bytes */
        size_t grow = 0;
        for (const char *p = w; (p = strchr(p, '{')); p++) {
            if (strncmp(p, "{task}", 6) != 0) {
                const char *e = strchr(p, '}');
                int n = e ? (int)(e - p + 1) : (int)strlen(p);
                return sl_cfg_err(cfg, got[j]->loc, SL_EINVAL, "unknown placeholder '%.*s' in %s= (only {task} is expanded)",
                                  n, p, CURVE_OPTS[j]);
            }
            grow += 16;
        }
        if (strlen(w) + grow >= sizeof cv->path[j])
            return sl_cfg_err(cfg, got[j]->loc, SL_EINVAL, "'curve' %s= path is too long", CURVE_OPTS[j]);
        snprintf(cv->path[j], sizeof cv->path[j], "%s", w);
    }
    cv->line = st->loc.line;
    return SL_OK;
}

/* Copy path into out (cap bytes) with every "{task}" replaced by e.g. "worker0". */
static void expand_task(const char *path, const char *task, char *out, size_t cap) {
    size_t at = 0;
    for (const char *p = path; *p && at + 1 < cap;) {
        if (strncmp(p, "{task}", 6) == 0) {
            at += (size_t)snprintf(out + at, cap - at, "%s", task);
            if (at >= cap) at = cap - 1;
            p += 6;
        } else {
            out[at++] = *p++;
        }
    }
    out[at] = 0;
}

static sl_status from_config(const sl_cfg *cfg, const sl_cfg_stmt *blk, spec *s, int *port_base,
                             double *timeout, curve_spec *cv) {
    strcpy(s->src, "config");
    for (int i = 0; i < blk->nbody; i++) {
        const sl_cfg_stmt *st = &blk->body[i];
        int t = sl_task_type_from_name(st->name);
        sl_status rc;
        if (t >= 0) {
            if (sl_cfg_npos(st) == 0)
                return sl_cfg_err(cfg, st->loc, SL_EINVAL, "'%s' needs at least one \"host:port\"", st->name);
            for (int k = 0; k < sl_cfg_npos(st); k++) {
                const sl_cfg_value *v = sl_cfg_pos(st, k);
                if (v->kind != SL_CV_STRING)
                    return sl_cfg_err(cfg, v->loc, SL_EINVAL, "an address must be a \"host:port\" string");
                if ((rc = sl__cluster_add_member(s, t, v->text))) {
                    sl_error e;
                    sl_err_save(&e);
                    return sl_cfg_err(cfg, v->loc, e.code, "%s", e.msg + strlen("config: "));
                }
            }
        } else if (strcmp(st->name, "task") == 0) {
            const sl_cfg_value *tv = sl_cfg_opt(st, "type"), *iv = sl_cfg_opt(st, "index");
            if (!tv) tv = sl_cfg_pos(st, 0);
            if (!iv) iv = sl_cfg_pos(st, 1);
            const char *w;
            int64_t idx = 0;
            if (!tv) return sl_cfg_err(cfg, st->loc, SL_EINVAL, "'task' needs a type: task worker 0");
            if ((rc = sl_cfg_word(cfg, tv, &w))) return rc;
            int tt = sl_task_type_from_name(w);
            if (tt < 0) {
                rc = sl_cfg_err(cfg, tv->loc, SL_EINVAL, "unknown task type '%s'", w);
                const char *sug = sl_suggest(w, TYPE_NAMES, SL_TASK_TYPES_);
                if (sug) sl_err_hint("did you mean '%s'?", sug);
                return rc;
            }
            if (iv && (rc = sl_cfg_int(cfg, iv, 0, 1 << 20, &idx))) return rc;
            s->task_type = tt;
            s->task_index = (int)idx;
            s->have_task = 1;
        } else if (strcmp(st->name, "port_base") == 0) {
            int64_t pb;
            const sl_cfg_value *v = sl_cfg_pos(st, 0);
            if (!v) return sl_cfg_err(cfg, st->loc, SL_EINVAL, "'port_base' needs a port number");
            if ((rc = sl_cfg_int(cfg, v, 1, 65535, &pb))) return rc;
            *port_base = (int)pb;
        } else if (strcmp(st->name, "timeout") == 0) {
            const sl_cfg_value *v = sl_cfg_pos(st, 0);
            if (!v) return sl_cfg_err(cfg, st->loc, SL_EINVAL, "'timeout' needs a duration: timeout 30s");
            if ((rc = sl_cfg_double(cfg, v, timeout))) return rc;
            if (*timeout <= 0) return sl_cfg_err(cfg, v->loc, SL_EINVAL, "timeout must be > 0");
        } else if (strcmp(st->name, "curve") == 0) {
            if ((rc = parse_curve(cfg, st, cv))) return rc;
        } else {
            static const char *const known[] = {"chief", "worker", "ps", "evaluator", "task", "port_base", "timeout", "curve"};
            rc = sl_cfg_err(cfg, st->loc, SL_EINVAL, "unknown statement '%s' in the cluster block", st->name);
            const char *sug = sl_suggest(st->name, known, 8);
            if (sug) sl_err_hint("did you mean '%s'?", sug);
            return rc;
        }
    }
    return SL_OK;
}

static sl_status from_tf_config(const char *text, spec *s) {
    strcpy(s->src, "TF_CONFIG");
    sl_json *root;
    sl_status st = sl_json_parse(text, strlen(text), "TF_CONFIG", &root);
    if (st) return st;
    if (root->kind != SL_JSON_OBJECT) {
        st = sl_err_at(SL_EINVAL, "TF_CONFIG", (int64_t)root->offset, "expected an object");
        goto out;
    }
    for (size_t i = 0; i < root->len; i++)
        if (strcmp(root->keys[i], "cluster") && strcmp(root->keys[i], "task") && strcmp(root->keys[i], "environment") &&
            strcmp(root->keys[i], "rpc_layer")) {
            st = sl_err_at(SL_EINVAL, "TF_CONFIG", (int64_t)root->items[i].offset, "unknown key \"%s\"", root->keys[i]);
            goto out;
        }
    const sl_json *cl = sl_json_get(root, "cluster"), *task = sl_json_get(root, "task");
    if (cl) {
        if (cl->kind != SL_JSON_OBJECT) {
            st = sl_err_at(SL_EINVAL, "TF_CONFIG", (int64_t)cl->offset, "\"cluster\" must be an object");
            goto out;
        }
        /* a cluster object states the members even when its lists are empty: it must not
         * fall through to a later source or to a single replica */
        s->have_members = 1;
        for (size_t i = 0; i < cl->len; i++) {
            int t = sl_task_type_from_name(cl->keys[i]);
            const sl_json *lst = &cl->items[i];
            if (t < 0) {
                st = sl_err_at(SL_EINVAL, "TF_CONFIG", (int64_t)lst->offset,
                               "unknown job \"%s\" in cluster (chief, worker, ps, evaluator)", cl->keys[i]);
                goto out;
            }
            if (lst->kind != SL_JSON_ARRAY) {
                st = sl_err_at(SL_EINVAL, "TF_CONFIG", (int64_t)lst->offset, "cluster.%s must be a list of \"host:port\"",
                               cl->keys[i]);
                goto out;
            }
            for (size_t k = 0; k < lst->len; k++) {
                if (lst->items[k].kind != SL_JSON_STRING) {
                    st = sl_err_at(SL_EINVAL, "TF_CONFIG", (int64_t)lst->items[k].offset,
                                   "cluster.%s[%zu] must be a \"host:port\" string", cl->keys[i], k);
                    goto out;
                }
                if ((st = sl__cluster_add_member(s, t, lst->items[k].str))) {
                    sl_error e;
                    sl_err_save(&e);
                    st = sl_err_at(e.code, "TF_CONFIG", (int64_t)lst->items[k].offset, "%s",
                                   e.msg + strlen("TF_CONFIG: "));
                    goto out;
                }
            }
        }
    }
    if (task) {
        const sl_json *ty = sl_json_get(task, "type"), *ix = sl_json_get(task, "index");
        if (task->kind != SL_JSON_OBJECT || !ty || ty->kind != SL_JSON_STRING) {
            st = sl_err_at(SL_EINVAL, "TF_CONFIG", (int64_t)(ty ? ty->offset : task->offset),
                           "task must be {\"type\": \"worker\", \"index\": N}");
            goto out;
        }
        int t = sl_task_type_from_name(ty->str);
        if (t < 0) {
            st = sl_err_at(SL_EINVAL, "TF_CONFIG", (int64_t)ty->offset, "unknown task type \"%s\"", ty->str);
            goto out;
        }
        double idx = 0;
        if (ix) {
            if (ix->kind != SL_JSON_NUMBER || ix->num < 0 || ix->num > (1 << 20) || ix->num != (double)(long)ix->num) {
                st = sl_err_at(SL_EINVAL, "TF_CONFIG", (int64_t)ix->offset, "task index must be a non-negative integer");
                goto out;
            }
            idx = ix->num;
        }
        s->task_type = t;
        s->task_index = (int)idx;
        s->have_task = 1;
    }
    st = SL_OK;
out:
    sl_json_free(root);
    return st;
}

/* The job id (transport.h, "Job membership"): SLUICE_JOB_ID when the environment has it
 * (sluice-launch sets a random one per job), else FNV-1a 64 over every task's type, index
 * and address, so that tasks of clusters with different members never take each other's
 * messages. Never 0. */
static sl_status resolve_job_id(const char *const *envp, sl_cluster *out) {
    const sl_cluster *c = out;
    const char *v = sl_env_get(envp, "SLUICE_JOB_ID");
    if (v) {
        uint64_t id = 0;
        size_t n = strlen(v);
        int ok = n >= 1 && n <= 16;
        for (size_t i = 0; ok && i < n; i++) {
            char ch = v[i];
            int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                  : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
            if (d < 0) ok = 0;
            else id = id << 4 | (uint64_t)d;
        }
        if (!ok || id == 0) {
            sl_err(SL_EINVAL, "SLUICE_JOB_ID: \"%.40s\" is not a job id (1 to 16 hex digits, not all zero)", v);
            sl_err_hint("every task of one job needs the same random id, e.g. SLUICE_JOB_ID=$(od -An -N8 -tx8 "
                        "/dev/urandom | tr -d ' '); or unset it to derive one from the cluster spec");
            return SL_EINVAL;
        }
        out->job_id = id;
        snprintf(out->job_source, sizeof out->job_source, "SLUICE_JOB_ID");
        return SL_OK;
    }
    uint64_t h = 0xcbf29ce484222325ull;
    char line[300];
    for (int i = 0; i < c->ntasks; i++) {
        int n = snprintf(line, sizeof line, "%s %d %s\n", sl_task_type_name(c->tasks[i].type), c->tasks[i].index,
                         c->tasks[i].addr);
        for (int k = 0; k < n && k < (int)sizeof line; k++) {
            h ^= (unsigned char)line[k];
            h *= 0x100000001b3ull;
        }
    }
    out->job_id = h ? h : 1;
    snprintf(out->job_source, sizeof out->job_source, "cluster spec");
    return SL_OK;
}

/* Expand a Slurm hostlist: "node[01-03,7],login1" -> node01 node02 node03 node7 login1. */
static sl_status slurm_hosts(const char *list, char ***out, int *n) {
    *out = NULL;
    *n = 0;
    const char *p = list;
    sl_status st = SL_OK;
    while (*p) {
        const char *br = NULL, *q = p;
        while (*q && *q != ',' && *q != '[') q++;
        char prefix[200];
        size_t pl = (size_t)(q - p);
        if (pl >= sizeof prefix) return sl_err(SL_EINVAL, "slurm: host name too long in \"%s\"", list);
        memcpy(prefix, p, pl);
        prefix[pl] = 0;
        if (*q == '[') {
            br = q + 1;
            const char *close = strchr(br, ']');
            if (!close) { st = sl_err(SL_EINVAL, "slurm: unclosed '[' in node list \"%s\"", list); goto fail; }
            const char *r = br;
            while (r < close) {
                const char *e = r;
                while (e < close && *e != ',') e++;
                char a[32] = {0}, b[32] = {0};
                const char *dash = memchr(r, '-', (size_t)(e - r));
                size_t al = (size_t)((dash ? dash : e) - r);
                if (al == 0 || al >= sizeof a) { st = sl_err(SL_EINVAL, "slurm: bad range in node list \"%s\"", list); goto fail; }
                memcpy(a, r, al);
                if (dash) {
                    size_t bl = (size_t)(e - dash - 1);
                    if (bl == 0 || bl >= sizeof b) { st = sl_err(SL_EINVAL, "slurm: bad range in node list \"%s\"", list); goto fail; }
                    memcpy(b, dash + 1, bl);
                } else {
                    memcpy(b, a, al);
                }
                long lo, hi;
                if (sl__cluster_parse_int(a, 0, 1000000, &lo) || sl__cluster_parse_int(b, 0, 1000000, &hi) || hi < lo || hi - lo > 100000) {
                    st = sl_err(SL_EINVAL, "slurm: bad range \"%s-%s\" in node list \"%s\"", a, b, list);
                    goto fail;
                }
                int width = (int)al;
                for (long v = lo; v <= hi; v++) {
                    char **nl = realloc(*out, (size_t)(*n + 1) * sizeof *nl);
                    if (!nl) { st = sl_err(SL_ENOMEM, "cluster: out of memory"); goto fail; }
                    *out = nl;
                    char h[256];
                    snprintf(h, sizeof h, "%s%0*ld", prefix, width, v);
                    if (!(nl[*n] = strdup(h))) { st = sl_err(SL_ENOMEM, "cluster: out of memory"); goto fail; }
                    (*n)++;
                }
                r = e < close ? e + 1 : e;
            }
            q = close + 1;
        } else {
            if (pl == 0) { st = sl_err(SL_EINVAL, "slurm: empty host in node list \"%s\"", list); goto fail; }
            char **nl = realloc(*out, (size_t)(*n + 1) * sizeof *nl);
            if (!nl) { st = sl_err(SL_ENOMEM, "cluster: out of memory"); goto fail; }
            *out = nl;
            if (!(nl[*n] = strdup(prefix))) { st = sl_err(SL_ENOMEM, "cluster: out of memory"); goto fail; }
            (*n)++;
        }
        if (*q == ',') q++;
        else if (*q) { st = sl_err(SL_EINVAL, "slurm: unexpected '%c' in node list \"%s\"", *q, list); goto fail; }
        p = q;
    }
    return SL_OK;
fail:
    for (int i = 0; i < *n; i++) free((*out)[i]);
    free(*out);
    *out = NULL;
    *n = 0;
    return st;
}

static sl_status from_slurm(const char *const *envp, int port_base, spec *s) {
    strcpy(s->src, "slurm");
    const char *rank = sl_env_get(envp, "SLURM_PROCID"), *ntasks = sl_env_get(envp, "SLURM_NTASKS");
    if (!ntasks) ntasks = sl_env_get(envp, "SLURM_NPROCS");
    const char *nodes = sl_env_get(envp, "SLURM_STEP_NODELIST");
    if (!nodes) nodes = sl_env_get(envp, "SLURM_JOB_NODELIST");
    const char *tpn = sl_env_get(envp, "SLURM_STEP_TASKS_PER_NODE");
    if (!tpn) tpn = sl_env_get(envp, "SLURM_TASKS_PER_NODE");
    long r, n;
    if (sl__cluster_parse_int(rank, 0, 1 << 20, &r)) return sl_err(SL_EINVAL, "slurm: SLURM_PROCID=\"%s\" is not a rank", rank);
    if (!ntasks) return sl_err(SL_EINVAL, "slurm: SLURM_PROCID is set but SLURM_NTASKS is not");
    if (sl__cluster_parse_int(ntasks, 1, 1 << 20, &n)) return sl_err(SL_EINVAL, "slurm: SLURM_NTASKS=\"%s\" is not a task count", ntasks);
    if (r >= n) return sl_err(SL_EINVAL, "slurm: SLURM_PROCID=%ld is not below SLURM_NTASKS=%ld", r, n);
    s->world_hint = (int)n;
    s->task_type = SL_TASK_WORKER;
    s->task_index = (int)r;
    s->have_task = 1;
    char **hosts = NULL;
    int nh = 0;
    sl_status st;
    if (!nodes) {
        hosts = malloc(sizeof *hosts);
        if (!hosts || !(hosts[0] = strdup("127.0.0.1"))) { free(hosts); return sl_err(SL_ENOMEM, "cluster: out of memory"); }
        nh = 1;
    } else if ((st = slurm_hosts(nodes, &hosts, &nh))) {
        return st;
    }
    /* tasks per node: "2(x3),1" = 2,2,2,1; without it, spread evenly (block distribution) */
    long *per = calloc((size_t)nh, sizeof *per);
    if (!per) { st = sl_err(SL_ENOMEM, "cluster: out of memory"); goto out; }
    if (tpn) {
        int k = 0;
        const char *p = tpn;
        while (*p) {
            char *end;
            long c = strtol(p, &end, 10), rep = 1;
            if (end == p || c < 1) { st = sl_err(SL_EINVAL, "slurm: bad SLURM_STEP_TASKS_PER_NODE \"%s\"", tpn); goto out; }
            p = end;
            if (strncmp(p, "(x", 2) == 0) {
                rep = strtol(p + 2, &end, 10);
                if (end == p + 2 || *end != ')' || rep < 1) { st = sl_err(SL_EINVAL, "slurm: bad SLURM_STEP_TASKS_PER_NODE \"%s\"", tpn); goto out; }
                p = end + 1;
            }
            for (long j = 0; j < rep; j++) {
                if (k >= nh) { st = sl_err(SL_EINVAL, "slurm: SLURM_STEP_TASKS_PER_NODE \"%s\" names more nodes than the node list (%d)", tpn, nh); goto out; }
                per[k++] = c;
            }
            if (*p == ',') p++;
            else if (*p) { st = sl_err(SL_EINVAL, "slurm: bad SLURM_STEP_TASKS_PER_NODE \"%s\"", tpn); goto out; }
        }
    } else {
        for (int i = 0; i < nh; i++) per[i] = n / nh + (i < n % nh);
    }
    long total = 0;
    for (int i = 0; i < nh; i++) total += per[i];
    if (total != n) {
        st = sl_err(SL_EINVAL, "slurm: the tasks per node add up to %ld but SLURM_NTASKS=%ld", total, n);
        goto out;
    }
    for (int i = 0; i < nh; i++)
        for (long j = 0; j < per[i]; j++) {
            char a[300];
            if (port_base + j > 65535) { st = sl_err(SL_EINVAL, "slurm: port base %d + %ld tasks per node passes 65535", port_base, j); goto out; }
            snprintf(a, sizeof a, "%s:%ld", hosts[i], port_base + j);
            if ((st = sl__cluster_add_member(s, SL_TASK_WORKER, a))) goto out;
        }
    st = SL_OK;
out:
    for (int i = 0; i < nh; i++) free(hosts[i]);
    free(hosts);
    free(per);
    return st;
}

static sl_status from_ompi(const char *const *envp, int port_base, spec *s) {
    strcpy(s->src, "openmpi");
    const char *rank = sl_env_get(envp, "OMPI_COMM_WORLD_RANK"), *size = sl_env_get(envp, "OMPI_COMM_WORLD_SIZE");
    const char *lsize = sl_env_get(envp, "OMPI_COMM_WORLD_LOCAL_SIZE");
    long r, n, ln = -1;
    if (sl__cluster_parse_int(rank, 0, 1 << 20, &r)) return sl_err(SL_EINVAL, "openmpi: OMPI_COMM_WORLD_RANK=\"%s\" is not a rank", rank);
    if (!size) return sl_err(SL_EINVAL, "openmpi: OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not");
    if (sl__cluster_parse_int(size, 1, 1 << 20, &n)) return sl_err(SL_EINVAL, "openmpi: OMPI_COMM_WORLD_SIZE=\"%s\" is not a size", size);
    if (r >= n) return sl_err(SL_EINVAL, "openmpi: OMPI_COMM_WORLD_RANK=%ld is not below OMPI_COMM_WORLD_SIZE=%ld", r, n);
    s->world_hint = (int)n;
    s->task_type = SL_TASK_WORKER;
    s->task_index = (int)r;
    s->have_task = 1;
    if (lsize && sl__cluster_parse_int(lsize, 1, 1 << 20, &ln) == 0 && ln == n) {
        if (port_base + n - 1 > 65535) return sl_err(SL_EINVAL, "openmpi: port base %d + %ld ranks passes 65535", port_base, n);
        for (long i = 0; i < n; i++) {
            char a[64];
            snprintf(a, sizeof a, "127.0.0.1:%ld", port_base + i);
            sl_status st = sl__cluster_add_member(s, SL_TASK_WORKER, a);
            if (st) return st;
        }
    }
    return SL_OK;
}

/* ---- resolution -------------------------------------------------------------------- */

typedef struct {
    const char *addr;
    int k;
} addr_ref;

static int by_addr(const void *a, const void *b) {
    const addr_ref *x = a, *y = b;
    int c = strcmp(x->addr, y->addr);
    return c ? c : (x->k > y->k) - (x->k < y->k);
}

/* out's task table from the members in mem (each type's tasks in order; chief and workers
 * get ring ranks), out->self for task ttype tindex, and the ring's and the ps tasks'
 * address lists. SL_EINVAL when two tasks share an address. On failure what was allocated
 * is left in out for sl_cluster_free. */
static sl_status fill_tasks(const spec *mem, int ttype, int tindex, sl_cluster *out) {
    int nt = 0;
    for (int t = 0; t < SL_TASK_TYPES_; t++) nt += mem->n[t];
    out->tasks = calloc((size_t)nt, sizeof *out->tasks);
    if (!out->tasks) return sl_err(SL_ENOMEM, "cluster: out of memory");
    int k = 0, ring = 0;
    for (int t = 0; t < SL_TASK_TYPES_; t++)
        for (int i = 0; i < mem->n[t]; i++, k++) {
            sl_cluster_task *ct = &out->tasks[k];
            ct->type = (sl_task_type)t;
            ct->index = i;
            ct->ring_rank = (t == SL_TASK_CHIEF || t == SL_TASK_WORKER) ? ring++ : -1;
            snprintf(ct->addr, sizeof ct->addr, "%s", mem->list[t][i]);
            if (t == ttype && i == tindex) out->self = k;
        }
    /* two tasks at one address: sorted by address (then order), neighbours compared, so a
     * launcher's world of a million ranks costs n log n, not n^2 comparisons */
    addr_ref *ord = malloc((size_t)(nt ? nt : 1) * sizeof *ord);
    if (!ord) return sl_err(SL_ENOMEM, "cluster: out of memory");
    for (int i = 0; i < nt; i++) ord[i] = (addr_ref){out->tasks[i].addr, i};
    qsort(ord, (size_t)nt, sizeof *ord, by_addr);
    int dj = -1, dk = -1; /* the duplicate pair whose later task comes first in task order */
    for (int i = 1; i < nt; i++)
        if (strcmp(ord[i - 1].addr, ord[i].addr) == 0 && (dk < 0 || ord[i].k < dk)) {
            int first = i - 1;
            while (first > 0 && strcmp(ord[first - 1].addr, ord[i].addr) == 0) first--;
            dj = ord[first].k;
            dk = ord[i].k;
        }
    free(ord);
    if (dk >= 0)
        return sl_err(SL_EINVAL, "%s: address %s is given to both %s %d and %s %d", mem->src, out->tasks[dk].addr,
                      sl_task_type_name(out->tasks[dj].type), out->tasks[dj].index,
                      sl_task_type_name(out->tasks[dk].type), out->tasks[dk].index);
    out->ntasks = nt;
    out->ring_addrs = calloc((size_t)nt + 1, sizeof *out->ring_addrs);
    out->ps_addrs = calloc((size_t)nt + 1, sizeof *out->ps_addrs);
    if (!out->ring_addrs || !out->ps_addrs) return sl_err(SL_ENOMEM, "cluster: out of memory");
    for (int i = 0, nr = 0, np = 0; i < nt; i++) {
        if (out->tasks[i].ring_rank >= 0) out->ring_addrs[nr++] = out->tasks[i].addr;
        else if (out->tasks[i].type == SL_TASK_PS) out->ps_addrs[np++] = out->tasks[i].addr;
    }
    return SL_OK;
}

sl_status sl_cluster_resolve(const sl_cluster_args *args, const sl_cfg *cfg,
                             const char *const *envp, sl_cluster *out) {
    memset(out, 0, sizeof *out);
    enum { NSRC = 8 };
    spec sp[NSRC];
    memset(sp, 0, sizeof sp);
    sl_status st = SL_OK;
    int port_base = DEFAULT_PORT_BASE;
    double timeout = 0;
    curve_spec cv;
    memset(&cv, 0, sizeof cv);
    long pb;
    int explicit_base = 1;
    if (args && args->port_base) port_base = args->port_base;
    else if (sl__cluster_parse_int(sl_env_get(envp, "SLUICE_PORT_BASE"), 1, 65535, &pb) == 0) port_base = (int)pb;
    else explicit_base = 0;

    if (args && (st = from_args(args, &sp[0]))) goto fail;
    const sl_cfg_stmt *blk = NULL;
    if (cfg) {
        int n;
        const sl_cfg_stmt *root = sl_cfg_root(cfg, &n);
        for (int i = 0; i < n; i++)
            if (strcmp(root[i].name, "cluster") == 0 && root[i].has_body) { blk = &root[i]; break; }
    }
    if (blk) {
        int cpb = 0;
        if ((st = from_config(cfg, blk, &sp[1], &cpb, &timeout, &cv))) goto fail;
        if (cpb && !(args && args->port_base)) port_base = cpb, explicit_base = 1;
    }
    const char *tfc = sl_env_get(envp, "TF_CONFIG");
    if (tfc && *tfc && (st = from_tf_config(tfc, &sp[2]))) goto fail;
    /* a launcher started right above this process comes first: torchrun under srun sets
     * RANK per process while SLURM_PROCID counts the torchrun agents */
    for (int w = SL__ENV_TORCHRUN; w <= SL__ENV_KUBEFLOW; w++)
        if (sl__cluster_env_has(envp, (sl__cluster_env)w) &&
            (st = sl__cluster_from_env(envp, (sl__cluster_env)w, port_base, explicit_base, &sp[3 + w])))
            goto fail;
    if (sl_env_get(envp, "SLURM_PROCID") && (st = from_slurm(envp, port_base, &sp[5]))) goto fail;
    if (sl_env_get(envp, "OMPI_COMM_WORLD_RANK") && (st = from_ompi(envp, port_base, &sp[6]))) goto fail;
    if (sl__cluster_env_has(envp, SL__ENV_PMI) &&
        (st = sl__cluster_from_env(envp, SL__ENV_PMI, port_base, explicit_base, &sp[7])))
        goto fail;

    spec *mem = NULL, *task = NULL;
    for (int i = 0; i < NSRC; i++) {
        if (!mem && sp[i].have_members) mem = &sp[i];
        if (!task && sp[i].have_task) task = &sp[i];
    }
    spec single = {0};
    if (!mem && task && task->rdzv_host[0]) {
        /* ranks on several hosts, addresses nowhere: they meet at the master */
        if ((st = sl__cluster_rendezvous(task, sl_env_get(envp, "SLUICE_JOB_ID"), timeout > 0 ? timeout : 300, &single)))
            goto fail;
        mem = &single;
    }
    if (!mem) {
        if (task && task->world_hint > 1) {
            st = sl_err(SL_EINVAL, "%s: %d tasks but no addresses for them", task->src, task->world_hint);
            sl_err_hint("list the workers in a cluster { worker \"host:port\" ... } block, or pass --peers");
            goto fail;
        }
        strcpy(single.src, "single");
        char a[64];
        snprintf(a, sizeof a, "127.0.0.1:%d", port_base);
        if ((st = sl__cluster_add_member(&single, SL_TASK_WORKER, a))) { sl__cluster_spec_free(&single); goto fail; }
        mem = &single;
    }
    int world = mem->n[SL_TASK_CHIEF] + mem->n[SL_TASK_WORKER];
    int ttype = task ? task->task_type : SL_TASK_WORKER, tindex = task ? task->task_index : 0;
    const char *tsrc = task ? task->src : mem->src;
    if (mem->n[SL_TASK_CHIEF] > 1) {
        st = sl_err(SL_EINVAL, "%s: %d chiefs listed; a cluster has at most one", mem->src, mem->n[SL_TASK_CHIEF]);
        goto fail_single;
    }
    if (world == 0) {
        st = sl_err(SL_EINVAL, "%s: the cluster lists no chief and no worker", mem->src);
        goto fail_single;
    }
    if (task && task->world_hint && task->world_hint != world) {
        st = sl_err(SL_EINVAL, "inconsistent cluster: %s lists %d ring members (chief + workers) but %s says %d tasks",
                    mem->src, world, task->src, task->world_hint);
        sl_err_hint("make the member list and the launcher agree (or drop one of them)");
        goto fail_single;
    }
    if (!task && world > 1) {
        st = sl_err(SL_EINVAL, "%s lists %d ring members but nothing says which one this process is", mem->src, world);
        sl_err_hint("set the task: --rank, `task worker N` in the cluster block, TF_CONFIG's task, or run under "
                    "sluice-launch / srun / mpirun");
        goto fail_single;
    }
    if (tindex >= mem->n[ttype]) {
        st = sl_err(SL_EINVAL, "inconsistent cluster: the task is %s %d (from %s) but %s lists %d %s task%s", sl_task_type_name(ttype),
                    tindex, tsrc, mem->src, mem->n[ttype], sl_task_type_name(ttype), mem->n[ttype] == 1 ? "" : "s");
        goto fail_single;
    }
    if ((st = fill_tasks(mem, ttype, tindex, out))) goto fail_single;
    out->rank = out->tasks[out->self].ring_rank;
    out->world = world;
    out->nps = mem->n[SL_TASK_PS];
    out->timeout_s = timeout;
    if (cv.line) {
        char task[32];
        snprintf(task, sizeof task, "%s%d", sl_task_type_name(ttype), tindex);
        expand_task(cv.path[0], task, out->curve_server, sizeof out->curve_server);
        expand_task(cv.path[1], task, out->curve_client, sizeof out->curve_client);
        expand_task(cv.path[2], task, out->curve_allow, sizeof out->curve_allow);
    }
    if ((st = resolve_job_id(envp, out))) goto fail_single;
    snprintf(out->members_source, sizeof out->members_source, "%s", mem->src);
    snprintf(out->task_source, sizeof out->task_source, "%s", tsrc);
    snprintf(out->source_vars, sizeof out->source_vars, "%s", task ? task->vars : mem->vars);
    out->rendezvous = mem == &single && single.src[0] && strcmp(single.src, "single") != 0;
    sl__cluster_spec_free(&single);
    for (int i = 0; i < NSRC; i++) sl__cluster_spec_free(&sp[i]);
    return SL_OK;
fail_single:
    sl__cluster_spec_free(&single);
fail:
    for (int i = 0; i < NSRC; i++) sl__cluster_spec_free(&sp[i]);
    sl_cluster_free(out);
    return st;
}

void sl_cluster_free(sl_cluster *c) {
    if (!c) return;
    free(c->tasks);
    free(c->ring_addrs);
    free(c->ps_addrs);
    memset(c, 0, sizeof *c);
}

sl_status sl_cluster_ring_addrs(const sl_cluster *c, const char ***addrs) {
    *addrs = c->ring_addrs;
    return c->ring_addrs ? SL_OK : sl_err(SL_ESTATE, "cluster: not resolved");
}
sl_status sl_cluster_ps_addrs(const sl_cluster *c, const char ***addrs) {
    *addrs = c->ps_addrs;
    return c->ps_addrs ? SL_OK : sl_err(SL_ESTATE, "cluster: not resolved");
}

sl_status sl_cluster_curve(const sl_cluster *c, sl_tp_curve *out) {
    memset(out, 0, sizeof *out);
    if (!c->curve_server[0]) return sl_err(SL_ENOTFOUND, "cluster: no curve statement in the cluster block");
    sl_tp_curve k;
    memset(&k, 0, sizeof k);
    sl_status st = sl_curve_load_keypair(c->curve_server, k.server_public, k.server_secret);
    if (!st) st = sl_curve_load_keypair(c->curve_client, k.client_public, k.client_secret);
    if (!st) st = sl_curve_load_allow(c->curve_allow, &k.allow, &k.nallow);
    if (st) {
        sl_err_prefix("cluster curve: ");
        free(k.allow);
        memset(&k, 0, sizeof k);
        return st;
    }
    *out = k;
    memset(&k, 0, sizeof k);
    return SL_OK;
}

typedef struct {
    char *out;
    size_t cap, at; /* at: the length so far, even past cap (snprintf's rule) */
} outbuf;

static void outbuf_put(void *ctx, const char *b, size_t n) {
    outbuf *o = ctx;
    for (size_t i = 0; i < n; i++, o->at++)
        if (o->at + 1 < o->cap) o->out[o->at] = b[i];
    if (o->cap) o->out[o->at < o->cap ? o->at : o->cap - 1] = 0;
}

static size_t put_json_list(char *out, size_t cap, size_t at, const char *name, const char *const *l, int n) {
    at += (size_t)snprintf(at < cap ? out + at : NULL, at < cap ? cap - at : 0, "\"%s\": [", name);
    for (int i = 0; i < n; i++) {
        at += (size_t)snprintf(at < cap ? out + at : NULL, at < cap ? cap - at : 0, "%s", i ? ", " : "");
        outbuf o = {out, cap, at};
        sl_json_put_str(outbuf_put, &o, l[i], strlen(l[i]), 0);
        at = o.at;
    }
    at += (size_t)snprintf(at < cap ? out + at : NULL, at < cap ? cap - at : 0, "]");
    return at;
}

int sl_cluster_tf_config(char *out, size_t cap, const char *const *workers, int nworkers,
                         const char *const *ps, int nps, const char *type, int index) {
    if (nworkers < 0 || nps < 0 || !type || index < 0 || sl_task_type_from_name(type) < 0) return -1;
    size_t at = 0;
    at += (size_t)snprintf(out, cap, "{\"cluster\": {");
    at = put_json_list(out, cap, at, "worker", workers, nworkers);
    if (nps) {
        at += (size_t)snprintf(at < cap ? out + at : NULL, at < cap ? cap - at : 0, ", ");
        at = put_json_list(out, cap, at, "ps", ps, nps);
    }
    at += (size_t)snprintf(at < cap ? out + at : NULL, at < cap ? cap - at : 0,
                           "}, \"task\": {\"type\": \"%s\", \"index\": %d}}", type, index);
    return (int)at;
}
