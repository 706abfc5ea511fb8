/* Private to dist/: what the cluster sources share. dist/cluster.c reads the explicit
 * arguments, the config block, TF_CONFIG, Slurm and Open MPI and resolves; the launchers
 * that start processes by rank alone (torchrun, Kubeflow Trainer's PET_* variables, MPICH /
 * Intel MPI's PMI_*) are read in dist/cluster_env.c; when their ranks span hosts, the
 * members' addresses are not in the environment at all and the ranks exchange them at the
 * master's address (dist/rendezvous.c). */
#ifndef SLUICE_DIST_CLUSTER_PRIV_H
#define SLUICE_DIST_CLUSTER_PRIV_H

#include "sluice/cluster.h"

/* What one source says. Lists hold malloc'd strings. */
typedef struct sl__cluster_spec {
    char **list[SL_TASK_TYPES_];
    int n[SL_TASK_TYPES_];
    int have_members;
    int task_type, task_index, have_task;
    int world_hint;       /* a world size the source states on its own (a launcher), else 0 */
    char src[16];
    char vars[48];        /* the variables it came from, for the start-up line ("RANK, WORLD_SIZE") */
    /* ranks on several hosts whose addresses the environment does not give: they meet at
     * rdzv_host:rdzv_port, each bringing its own address (its host as the route to the
     * master sees it, port ring_port) */
    char rdzv_host[256];  /* "" when no rendezvous is needed */
    int rdzv_port;
    int ring_port;
} sl__cluster_spec;

/* Append addr ("host:port", checked) to the list of `type`; SL_EINVAL naming s->src for a
 * malformed address, SL_ENOMEM. */
sl_status sl__cluster_add_member(sl__cluster_spec *s, int type, const char *addr);
/* v as a decimal integer in [min, max] into *out: 0, or -1 (NULL, empty, not a number, out
 * of range; *out untouched). */
int sl__cluster_parse_int(const char *v, long min, long max, long *out);
void sl__cluster_spec_free(sl__cluster_spec *s);

/* The launchers of dist/cluster_env.c. Each fills *s from envp when its rank variable is
 * set (the caller checks with sl__cluster_env_has): the task, the world size and, when all
 * ranks run on this host, the members 127.0.0.1:port_base + rank; across hosts the
 * rendezvous fields instead. port_base is the one the caller resolved; `explicit_base`
 * says it was given (args, config, SLUICE_PORT_BASE): otherwise a launcher with a master
 * port uses master port + 2 (the master port is the launcher's own store; + 1 the
 * rendezvous). SL_EINVAL naming the variable for a malformed or inconsistent value. */
typedef enum { SL__ENV_TORCHRUN, SL__ENV_KUBEFLOW, SL__ENV_PMI, SL__ENV_N_ } sl__cluster_env;
int sl__cluster_env_has(const char *const *envp, sl__cluster_env which);
sl_status sl__cluster_from_env(const char *const *envp, sl__cluster_env which, int port_base, int explicit_base,
                               sl__cluster_spec *s);

/* The rendezvous: rank 0 (task->task_index 0) listens on task->rdzv_port, every other rank
 * connects to task->rdzv_host:rdzv_port and says its rank, the world size, the job id
 * string (SLUICE_JOB_ID or "") and its own ring address; rank 0 answers everyone with the
 * list in rank order once all world - 1 have come. On success `out` holds the world members
 * (workers, in rank order, src copied from task). Errors, each naming the rendezvous
 * address: SL_ETIMEDOUT after timeout_s (naming the ranks that did not come, or that rank 0
 * did not answer), SL_EINVAL for a rank that brings another world size or a rank already
 * taken, SL_EPEER for rank 0's refusal (its message), SL_EIO for a port that cannot be
 * bound. Messages that are not a rendezvous hello, or of another job, are dropped with a
 * warning. */
sl_status sl__cluster_rendezvous(const sl__cluster_spec *task, const char *job_id, double timeout_s,
                                 sl__cluster_spec *out);

/* The rendezvous' two messages, parsed (dist/rendezvous.c; the fuzz target's entries):
 * a hello "SLRDZV1 hello WORLD RANK JOB ADDR" into its fields (0), or -1 when it is not one
 * (ADDR is checked as a member address); rank 0's answer for a rank of `world` into
 * addrs (world entries `stride` bytes apart, each < 256 bytes): SL_OK, SL_EPEER with a
 * message naming `where` for a refusal or a malformed, short, long or foreign list (one
 * whose entry for `rank` is not self_addr), or 1 when text is not a rendezvous message. */
int sl__rdzv_parse_hello(const char *text, long *world, long *rank, char job[40], char addr[300]);
sl_status sl__rdzv_parse_answer(const char *text, const char *where, int world, int rank, const char *self_addr,
                                char *addrs, size_t stride);

#endif
