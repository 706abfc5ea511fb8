/* Private to train/ (and its unit tests): the CPU backend's team of worker threads, which
 * runs one parallel loop at a time over contiguous parts of a range (train/backend_cpu.c's
 * par_for). The calling thread takes parts too and never waits for a worker that has not
 * started: when the workers are slow to wake it runs every part itself. See cpu_team.c for
 * the claiming protocol and the spin-then-sleep hand-off. */
#ifndef SLUICE_TRAIN_CPU_TEAM_H
#define SLUICE_TRAIN_CPU_TEAM_H

#include <stdbool.h>
#include <stddef.h>

#include "sluice/status.h"

typedef void (*sl__range_fn)(void *ctx, size_t lo, size_t hi);

typedef struct sl__team sl__team;

/* Start `workers` (>= 1) threads, idle until sl__team_run. SL_OK with *out set; SL_ENOMEM
 * or SL_EIO (a thread could not start; those started are stopped) with *out NULL. */
sl_status sl__team_new(int workers, sl__team **out);

/* Stop and join the workers, free the team. NULL is a no-op. No run may be in progress. */
void sl__team_free(sl__team *t);

/* fn(ctx, n * i / parts, n * (i + 1) / parts) for every part i in [0, parts), each exactly
 * once, on the calling thread and the workers; returns when all have returned. parts in
 * 2..64. false, running nothing, when another thread's run is in progress on this team
 * (the caller then runs the loop alone). */
bool sl__team_run(sl__team *t, int parts, size_t n, sl__range_fn fn, void *ctx);

/* true on a thread while it runs a part of a team's run (fn above, on a worker or the
 * caller): that team is taken, so a loop its part starts on it runs alone. */
bool sl__team_inside(void);

#endif
