/* The launchers that start each process with a rank and a world size but no member list:
 * torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; also
 * what Kubeflow's PyTorchJob sets in each pod), Kubeflow Trainer's torchrun options as
 * PET_NNODES / PET_NODE_RANK / PET_NPROC_PER_NODE / PET_MASTER_ADDR / PET_MASTER_PORT when
 * the pod runs sluice-train itself, and MPICH / Intel MPI's Hydra (PMI_RANK, PMI_SIZE,
 * MPI_LOCALNRANKS, MPI_LOCALRANKID). See cluster.h for the order and the ports.
 *
 * When every rank runs on this host the members are 127.0.0.1 at consecutive ports; when
 * they span hosts this file only records where to meet (cluster_priv.h) and
 * dist/rendezvous.c learns the addresses. Workload: once per process. */
#include <stdio.h>
#include <string.h>

#include "dist/cluster_priv.h"
#include "sluice/util.h"

static const char *const RANK_VAR[SL__ENV_N_] = {"RANK", "PET_NODE_RANK", "PMI_RANK"};

int sl__cluster_env_has(const char *const *envp, sl__cluster_env which) {
    const char *v = sl_env_get(envp, RANK_VAR[which]);
    return v && *v;
}

static int is_loopback(const char *host) {
    return !host || !*host || strncmp(host, "127.", 4) == 0 || strcmp(host, "localhost") == 0 ||
           strcmp(host, "::1") == 0;
}

/* A required count or index: SL_EINVAL naming the variable. */
static sl_status get_num(const char *const *envp, const char *src, const char *name, long min, long max,
                         int required, long *out) {
    const char *v = sl_env_get(envp, name);
    if (!v || !*v) {
        if (!required) return SL_OK;
        sl_err(SL_EINVAL, "%s: %s is not set", src, name);
        sl_err_hint("a %s job sets it for every process; set it too when starting by hand", src);
        return SL_EINVAL;
    }
    if (sl__cluster_parse_int(v, min, max, out))
        return sl_err(SL_EINVAL, "%s: %s=\"%.40s\" is not a number in %ld..%ld", src, name, v, min, max);
    return SL_OK;
}

/* Members 127.0.0.1:base .. base + world - 1. */
static sl_status local_members(sl__cluster_spec *s, long world, int base) {
    if (base + world - 1 > 65535)
        return sl_err(SL_EINVAL, "%s: port base %d + %ld ranks passes 65535", s->src, base, world);
    for (long i = 0; i < world; i++) {
        char a[64];
        snprintf(a, sizeof a, "127.0.0.1:%ld", base + i);
        sl_status st = sl__cluster_add_member(s, SL_TASK_WORKER, a);
        if (st) return st;
    }
    return SL_OK;
}

/* Across hosts: meet at host:port + 1, bring our ring port. */
static sl_status meet(sl__cluster_spec *s, const char *host, const char *hvar, long mport, const char *pvar,
                      int base, long local_rank) {
    if (!host || !*host || mport <= 0) {
        sl_err(SL_EINVAL, "%s: the %d ranks run on several hosts but %s%s%s is not set, so they cannot find each other",
               s->src, s->world_hint, !host || !*host ? hvar : "", (!host || !*host) && mport <= 0 ? " / " : "",
               mport <= 0 ? pvar : "");
        sl_err_hint("set %s to rank 0's host and %s to a free port on it (ports %s + 1 and + 2 onwards are used "
                    "too), or list the members in a cluster block", hvar, pvar, pvar);
        return SL_EINVAL;
    }
    if (strlen(host) >= sizeof s->rdzv_host) return sl_err(SL_EINVAL, "%s: %s is too long", s->src, hvar);
    if (mport + 1 > 65535 || base + local_rank > 65535)
        return sl_err(SL_EINVAL, "%s: %s=%ld leaves no room for the rendezvous and ring ports", s->src, pvar, mport);
    snprintf(s->rdzv_host, sizeof s->rdzv_host, "%s", host);
    s->rdzv_port = (int)mport + 1;
    s->ring_port = base + (int)local_rank;
    return SL_OK;
}

static sl_status from_torchrun(const char *const *envp, int port_base, int explicit_base, sl__cluster_spec *s) {
    strcpy(s->src, "torchrun");
    strcpy(s->vars, "RANK, WORLD_SIZE, MASTER_ADDR");
    long r = 0, n = 0, lr = -1, ln = -1, mport = 0;
    sl_status st;
    if ((st = get_num(envp, s->src, "RANK", 0, 1 << 20, 1, &r)) ||
        (st = get_num(envp, s->src, "WORLD_SIZE", 1, 1 << 20, 1, &n)) ||
        (st = get_num(envp, s->src, "LOCAL_RANK", 0, 1 << 20, 0, &lr)) ||
        (st = get_num(envp, s->src, "LOCAL_WORLD_SIZE", 1, 1 << 20, 0, &ln)) ||
        (st = get_num(envp, s->src, "MASTER_PORT", 1, 65535, 0, &mport)))
        return st;
    if (r >= n) return sl_err(SL_EINVAL, "torchrun: RANK=%ld is not below WORLD_SIZE=%ld", r, n);
    if (ln > n) return sl_err(SL_EINVAL, "torchrun: LOCAL_WORLD_SIZE=%ld is above WORLD_SIZE=%ld", ln, n);
    if (ln > 0 && lr >= ln) return sl_err(SL_EINVAL, "torchrun: LOCAL_RANK=%ld is not below LOCAL_WORLD_SIZE=%ld", lr, ln);
    const char *host = sl_env_get(envp, "MASTER_ADDR");
    int base = explicit_base || mport <= 0 ? port_base : (int)mport + 2;
    s->world_hint = (int)n;
    s->task_type = SL_TASK_WORKER;
    s->task_index = (int)r;
    s->have_task = 1;
    /* one host: every rank is local (LOCAL_WORLD_SIZE says so, or no one says otherwise and
     * the master is this host) */
    if (n == 1 || ln == n || (ln < 0 && is_loopback(host))) return local_members(s, n, base);
    if (lr < 0) {
        if (ln > 1) return sl_err(SL_EINVAL, "torchrun: LOCAL_WORLD_SIZE=%ld but LOCAL_RANK is not set", ln);
        lr = 0;
    }
    return meet(s, host, "MASTER_ADDR", mport, "MASTER_PORT", base, lr);
}

static sl_status from_kubeflow(const char *const *envp, int port_base, int explicit_base, sl__cluster_spec *s) {
    strcpy(s->src, "kubeflow");
    strcpy(s->vars, "PET_NODE_RANK, PET_NNODES, PET_MASTER_ADDR");
    long r = 0, n = 0, mport = 0, per = 1;
    sl_status st;
    const char *nn = sl_env_get(envp, "PET_NNODES");
    if (nn && strchr(nn, ':')) {
        sl_err(SL_EINVAL, "kubeflow: PET_NNODES=\"%.40s\" is an elastic range; sluice-train needs the node count", nn);
        sl_err_hint("give the TrainJob a fixed numNodes");
        return SL_EINVAL;
    }
    if ((st = get_num(envp, s->src, "PET_NODE_RANK", 0, 1 << 20, 1, &r)))
        return st;
    if (!nn || !*nn) return sl_err(SL_EINVAL, "kubeflow: PET_NODE_RANK is set but PET_NNODES is not");
    if ((st = get_num(envp, s->src, "PET_NNODES", 1, 1 << 20, 1, &n)) ||
        (st = get_num(envp, s->src, "PET_MASTER_PORT", 1, 65535, 0, &mport)))
        return st;
    /* PET_NPROC_PER_NODE is torchrun's --nproc-per-node: a number, or auto / cpu / gpu. A pod
     * that runs sluice-train itself runs one process, so anything above 1 means a launcher
     * was meant to start the others (torchrun, which would then set RANK) */
    const char *pp = sl_env_get(envp, "PET_NPROC_PER_NODE");
    if (pp && *pp && sl__cluster_parse_int(pp, 1, 1 << 20, &per) == 0 && per > 1) {
        sl_err(SL_EINVAL, "kubeflow: PET_NPROC_PER_NODE=%ld but this pod started one process, and nothing tells it "
               "which of the %ld it is", per, per);
        sl_err_hint("run `torchrun --no-python sluice-train ...` in the pod (it sets RANK for each process), or set "
                    "numProcPerNode 1");
        return SL_EINVAL;
    }
    if (r >= n) return sl_err(SL_EINVAL, "kubeflow: PET_NODE_RANK=%ld is not below PET_NNODES=%ld", r, n);
    const char *host = sl_env_get(envp, "PET_MASTER_ADDR");
    int base = explicit_base || mport <= 0 ? port_base : (int)mport + 2;
    s->world_hint = (int)n;
    s->task_type = SL_TASK_WORKER;
    s->task_index = (int)r;
    s->have_task = 1;
    if (n == 1 || is_loopback(host)) return local_members(s, n, base);
    return meet(s, host, "PET_MASTER_ADDR", mport, "PET_MASTER_PORT", base, 0);
}

static sl_status from_pmi(const char *const *envp, int port_base, int explicit_base, sl__cluster_spec *s) {
    strcpy(s->src, "pmi");
    strcpy(s->vars, "PMI_RANK, PMI_SIZE");
    long r = 0, n = 0, ln = -1, lr = -1, mport = 0;
    sl_status st;
    if ((st = get_num(envp, s->src, "PMI_RANK", 0, 1 << 20, 1, &r))) return st;
    if (!sl_env_get(envp, "PMI_SIZE")) return sl_err(SL_EINVAL, "pmi: PMI_RANK is set but PMI_SIZE is not");
    if ((st = get_num(envp, s->src, "PMI_SIZE", 1, 1 << 20, 1, &n)) ||
        (st = get_num(envp, s->src, "MPI_LOCALNRANKS", 1, 1 << 20, 0, &ln)) ||
        (st = get_num(envp, s->src, "MPI_LOCALRANKID", 0, 1 << 20, 0, &lr)) ||
        (st = get_num(envp, s->src, "MASTER_PORT", 1, 65535, 0, &mport)))
        return st;
    if (r >= n) return sl_err(SL_EINVAL, "pmi: PMI_RANK=%ld is not below PMI_SIZE=%ld", r, n);
    if (ln > n) return sl_err(SL_EINVAL, "pmi: MPI_LOCALNRANKS=%ld is above PMI_SIZE=%ld", ln, n);
    const char *host = sl_env_get(envp, "MASTER_ADDR");
    int base = explicit_base || mport <= 0 ? port_base : (int)mport + 2;
    s->world_hint = (int)n;
    s->task_type = SL_TASK_WORKER;
    s->task_index = (int)r;
    s->have_task = 1;
    if (n == 1 || ln == n) return local_members(s, n, base);
    if (!host || !*host) {
        sl_err(SL_EINVAL, "pmi: PMI_SIZE=%ld ranks, %s on this host, and nothing gives the other hosts' addresses", n,
               ln > 0 ? "only some" : "not all known to be");
        sl_err_hint("start with `mpiexec -genv MASTER_ADDR <rank 0's host> -genv MASTER_PORT <free port> ...` (the "
                    "ranks then exchange their addresses there), or list the members in a cluster block");
        return SL_EINVAL;
    }
    if (lr < 0) lr = 0;
    return meet(s, host, "MASTER_ADDR", mport, "MASTER_PORT", base, lr);
}

sl_status sl__cluster_from_env(const char *const *envp, sl__cluster_env which, int port_base, int explicit_base,
                               sl__cluster_spec *s) {
    switch (which) {
    case SL__ENV_TORCHRUN: return from_torchrun(envp, port_base, explicit_base, s);
    case SL__ENV_KUBEFLOW: return from_kubeflow(envp, port_base, explicit_base, s);
    case SL__ENV_PMI: return from_pmi(envp, port_base, explicit_base, s);
    default: return sl_err(SL_EINVAL, "cluster: unknown launcher %d", (int)which);
    }
}
