/* Cluster resolution: who am I, and who are my peers.
 *
 * A replica learns the cluster from the first source that gives it, in this order:
 *   1. explicit arguments (the command line: --rank, --peers, ...)   source "args"
 *   2. a `cluster` block of the config                              source "config"
 *   3. TF_CONFIG (TensorFlow / Kubeflow TFJob JSON)                 source "TF_CONFIG"
 *   4. torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
 *      MASTER_ADDR, MASTER_PORT; also Kubeflow's PyTorchJob)        source "torchrun"
 *   5. Kubeflow Trainer in a pod that runs sluice-train itself
 *      (PET_NODE_RANK, PET_NNODES, PET_NPROC_PER_NODE,
 *      PET_MASTER_ADDR, PET_MASTER_PORT)                            source "kubeflow"
 *   6. Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST, ...) source "slurm"
 *   7. Open MPI (OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_SIZE)       source "openmpi"
 *   8. MPICH / Intel MPI's Hydra (PMI_RANK, PMI_SIZE,
 *      MPI_LOCALNRANKS, MPI_LOCALRANKID; MASTER_ADDR / MASTER_PORT
 *      when the ranks span hosts)                                   source "pmi"
 *   9. nothing: a single replica (rank 0 of 1)                      source "single"
 * torchrun and Kubeflow come before Slurm and Open MPI: they are the launcher right above
 * this process (`srun torchrun ...` sets SLURM_PROCID per node and RANK per process).
 *
 * Launchers 4, 5 and 8 give a rank and a world size but no member list. When all ranks run
 * on this host (LOCAL_WORLD_SIZE = WORLD_SIZE, MPI_LOCALNRANKS = PMI_SIZE, or a loopback
 * master address with no local size given) the members are 127.0.0.1 at port_base + rank.
 * When they span hosts, sl_cluster_resolve meets the other ranks first (a rendezvous, over
 * ZeroMQ, at the master address and master port + 1, within the cluster block's `timeout`
 * or 300 s): each rank brings its IPv4 address on the route to the master and port_base +
 * its local rank, rank 0 brings the master address, and rank 0 sends everyone the list
 * (SL_ETIMEDOUT naming the ranks that did not come; SL_EINVAL for ranks that disagree on
 * the world size, share a rank or an address; SL_EPEER on another rank when rank 0
 * refused). The port base under these launchers, unless given (args, block, SLUICE_PORT_BASE),
 * is the master port + 2: the master port itself belongs to the launcher (torchrun's store).
 * The member list and the task of this process are resolved separately, each from the
 * first source that has it (a config block usually lists the members but not the task,
 * which then comes from TF_CONFIG, Slurm or Open MPI). When a later source also gives a
 * world size or rank, it must agree with the one chosen, or resolution fails: a launcher
 * that set SLURM_NTASKS=4 for a config that lists 2 workers is a mistake worth stopping.
 *
 * The config block (all statements optional except one member list):
 *   cluster {
 *       chief  "10.0.0.1:29500"                    # at most one; ring rank 0 when present
 *       worker "10.0.0.2:29500" "10.0.0.3:29500"   # ring ranks 1.. (0.. without a chief)
 *       ps     "10.0.0.9:29600"                    # parameter-server tasks (not in the ring)
 *       evaluator "10.0.0.8:29700"                 # not in the ring
 *       task worker 1                              # this process (usually left to the env)
 *       port_base 29500                            # for Slurm / Open MPI addresses
 *       timeout 30s                                # receive timeout of the transport
 *       curve server="keys/server.key" client="keys/{task}.key" allow="keys/allowed"
 *   }
 *
 * `curve` turns on CURVE encryption and the allow-list on every socket (sluice/transport.h):
 * server= the cluster's server keypair file, client= this task's keypair file, allow= the
 * allow-list of client public keys. "{task}" in a path becomes this task's name (worker0,
 * chief0, ps1, ...), so one config serves every task. Paths are relative to the current
 * directory. sluice-launch --keygen makes the files.
 *
 * Ring ranks follow MultiWorkerMirroredStrategy: the chief (if any) is rank 0, then the
 * workers in list order. ps and evaluator tasks have ring rank -1.
 *
 * The job id (sluice/transport.h, "Job membership": every message carries it and a task
 * drops every message of another job) is SLUICE_JOB_ID from envp when set (1 to 16 hex
 * digits, not all zero; sluice-launch sets a random one for each job, and a job started
 * any other way should set one random value on all its tasks), else a hash (FNV-1a 64) of
 * every task's type, index and address: tasks of clusters with different members never
 * mix, while a leftover task of an earlier job with the very same spec is only kept out by
 * SLUICE_JOB_ID. A malformed SLUICE_JOB_ID fails resolution with SL_EINVAL naming it.
 *
 * TF_CONFIG is held to the same standard as the config block: a "cluster" object states
 * the member list even when its lists are empty (an empty worker list is an error naming
 * TF_CONFIG, never a silent single replica), the task's index must be within its list, and
 * no address may be given to two tasks.
 *
 * The library never reads the process environment: callers pass `envp` (a NULL-terminated
 * "NAME=value" array such as `environ`, or NULL for none). Workload: once per process. */
#ifndef SLUICE_CLUSTER_H
#define SLUICE_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/config.h"
#include "sluice/json.h"
#include "sluice/status.h"
#include "sluice/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sl_task_type {
    SL_TASK_CHIEF = 0,
    SL_TASK_WORKER = 1,
    SL_TASK_PS = 2,
    SL_TASK_EVALUATOR = 3,
    SL_TASK_TYPES_
} sl_task_type;

/* "chief", "worker", "ps", "evaluator"; "?" for anything else. */
const char *sl_task_type_name(sl_task_type t);
/* The inverse; -1 for an unknown name. */
int sl_task_type_from_name(const char *name);

typedef struct sl_cluster_task {
    sl_task_type type;
    int index;          /* index within its type's list */
    int ring_rank;      /* rank in the allreduce ring, -1 for ps / evaluator */
    char addr[256];     /* "host:port" */
} sl_cluster_task;

typedef struct sl_cluster {
    int ntasks;
    sl_cluster_task *tasks; /* chief, workers, ps, evaluators, in that order (owned) */
    int self;           /* index into tasks of this process */
    int rank;           /* ring rank of this process (-1 when not a ring member) */
    int world;          /* ring size: chief + workers (>= 1) */
    int nps;            /* number of ps tasks */
    double timeout_s;   /* receive timeout from the config block, 0 = not given */
    char members_source[16]; /* where the member list came from: "args", "config", ... */
    char task_source[16];    /* where this process's task came from */
    const char **ring_addrs; /* world entries, ring-rank order, pointing into tasks (owned) */
    const char **ps_addrs;   /* nps entries (owned) */
    char curve_server[1024]; /* the curve statement's paths, {task} expanded; "" without one */
    char curve_client[1024];
    char curve_allow[1024];
    uint64_t job_id;         /* this job's id, never 0 (see below) */
    char job_source[16];     /* "SLUICE_JOB_ID" or "cluster spec" */
    char source_vars[48];    /* the variables the task came from ("RANK, WORLD_SIZE, MASTER_ADDR"),
                              * "" for sources other than the launchers 4, 5 and 8 */
    int rendezvous;          /* 1 when the members were learnt at the master (see above) */
} sl_cluster;

/* Explicit arguments. Zero-initialise, then set what the command line gave. */
typedef struct sl_cluster_args {
    const char *peers;      /* comma-separated ring members "h:p,h:p" (workers), or NULL */
    const char *ps;         /* comma-separated ps tasks, or NULL */
    const char *task_type;  /* "worker", ... or NULL (= worker when rank is set) */
    int task_index;         /* with task_type */
    int rank;               /* ring rank, or -1 / unset when has_rank is 0 */
    int has_rank;
    int port_base;          /* for Slurm / Open MPI addresses; 0 = the default 29500 */
} sl_cluster_args;

/* Resolve the cluster from args (may be NULL), the config's top-level statements (cfg may
 * be NULL; the first `cluster` statement with a body is read) and envp (may be NULL).
 * On success *out is filled (free with sl_cluster_free). On failure *out is zeroed, and
 * the status is SL_EINVAL with a message naming the source and what is wrong (for
 * TF_CONFIG: "TF_CONFIG: byte N: ..."), SL_ENOMEM, or a rendezvous error (above: only for
 * launchers whose ranks span hosts; it is the one case that touches the network and waits). */
sl_status sl_cluster_resolve(const sl_cluster_args *args, const sl_cfg *cfg,
                             const char *const *envp, sl_cluster *out);

/* Free what sl_cluster_resolve allocated and zero *c. NULL is a no-op. */
void sl_cluster_free(sl_cluster *c);

/* The ring members' addresses in ring-rank order: *addrs points into c (borrowed; valid
 * until sl_cluster_free) and has c->world entries. SL_OK, or SL_ESTATE when c is not a
 * resolved cluster. */
sl_status sl_cluster_ring_addrs(const sl_cluster *c, const char ***addrs);

/* The ps tasks' addresses in index order (c->nps entries), as above. */
sl_status sl_cluster_ps_addrs(const sl_cluster *c, const char ***addrs);

/* Load the key files of c's curve statement into *out (out->allow malloc'd: free() it).
 * SL_ENOTFOUND when c has no curve statement (out zeroed); the errors of
 * sl_curve_load_keypair / sl_curve_load_allow otherwise, with out zeroed. */
sl_status sl_cluster_curve(const sl_cluster *c, sl_tp_curve *out);

/* Build the TF_CONFIG JSON for task (type, index) of the cluster whose members are given
 * as lists (NULL / 0 for an empty list). Writes at most cap bytes including the NUL;
 * returns the length it needed (excluding the NUL), or -1 on a bad argument. */
int sl_cluster_tf_config(char *out, size_t cap, const char *const *workers, int nworkers,
                         const char *const *ps, int nps, const char *type, int index);

/* The JSON reader behind TF_CONFIG (sl_json_parse, sl_json_get): sluice/json.h. */

#ifdef __cplusplus
}
#endif
#endif
