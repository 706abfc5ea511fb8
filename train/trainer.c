/* The training loop (sluice/train.h), its lifecycle: the trainer's creation, the run
 * folder, --resume, the strategy's start, the agreements before the first epoch, the event
 * files and the banner, the epochs (evaluations and checkpoints at their boundaries, stop
 * requests) and the run's finish. The step itself is train/trainer_step.c; lines and
 * scalars are train/trainer_report.c.
 *
 * Workload: thousands of steps of a few ms to a few hundred ms each; one console line per
 * epoch, a progress bar redrawn at most ten times a second, a checkpoint every epoch or
 * every few hundred steps. One thread drives everything; the pipeline and the backend have
 * their own. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice/cuda.h"
#include "sluice/file.h"
#include "sluice/from_config.h"
#include "train/internal.h"

sl_train_opts sl_train_opts_default(void) {
    sl_train_opts o = {0};
    o.device = -1;
    return o;
}

/* The replicas' hooks agree with the train block's strategy and batch; with N replicas the
 * pipeline's batch is the global batch, which must divide by N (the training pipeline is
 * built with env.batch_divisor N; cfg is left as the caller wrote it). */
static sl_status check_replicas(sl_trainer *t, int w) {
    sl_status s;
    if (w < 1 || t->hooks.rank < 0 || t->hooks.rank >= w) {
        return sl_err(SL_EINVAL, "trainer hooks: rank %d of world size %d", t->hooks.rank, w);
    }
    if (w > 1 && (!t->hooks.exchange || strcmp(t->c.strategy, "none") == 0)) {
        return sl_err(SL_EINVAL, "%d replicas need a gradient exchange: set `strategy ring` or `strategy ps` in the train block",
               w);
    }
    if (w == 1 && strcmp(t->c.strategy, "none") != 0 && !t->opts.hooks) {
        s = sl_err(SL_EUNSUPPORTED, "strategy %s needs replicas: start them with sluice-launch -n N", t->c.strategy);
        sl_err_hint("for one replica write `strategy none` (or --set train.strategy=none)");
        return s;
    }
    if (w > 1) {
        if (t->c.batch % w != 0) {
            s = sl_err(SL_EINVAL, "pipeline '%s': the global batch %" PRId64 " is not a multiple of the %d replicas",
                   t->c.data, t->c.batch, w);
            sl_err_hint("the batch in the config is the global batch: each replica takes batch/N");
            return s;
        }
    }
    return SL_OK;
}

sl_status sl_trainer_create(const sl_cfg *cfg, const sl_train_opts *opts, sl_trainer **out) {
    *out = NULL;
    sl_trainer *t = calloc(1, sizeof *t);
    if (!t) return sl_err(SL_ENOMEM, "out of memory creating a trainer");
    t->cfg = cfg;
    t->opts = opts ? *opts : sl_train_opts_default();
    if (t->opts.hooks) t->hooks = *t->opts.hooks;
    else t->hooks = (sl_train_hooks){.world_size = 1, .rank = 0, .is_chief = true};
    t->sum.eval_accuracy = -1;
    t->sum.eval_top5_accuracy = -1;
    sl_status s;
    if ((s = sl_train_config_parse(cfg, &t->c))) goto fail;
    int w = t->hooks.world_size;
    if ((s = check_replicas(t, w))) goto fail;
    if (t->opts.run_dir) {
        if (strlen(t->opts.run_dir) >= sizeof t->c.run_dir) {
            s = sl_err(SL_EINVAL, "--run-dir is too long");
            goto fail;
        }
        strcpy(t->c.run_dir, t->opts.run_dir);
    }

    sl_model_opts mo = sl_model_opts_default();
    mo.backend = t->c.backend;
    mo.threads = t->c.threads;
    mo.cpu_gemm = t->opts.cpu_gemm;
    mo.label_smoothing = t->c.label_smoothing;
    mo.precision = t->c.precision;
    /* the optimizer's state is planned with the model (sl_optim_create allocates it) */
    const sl_optim_spec *os = &t->c.optim;
    mo.optimizer_floats = os->kind == SL_OPTIM_SGD ? (os->momentum != 0.0f ? 1 : 0) : 2;
    t->ls = (sl__loss_scaler){.scale = SL__LOSS_SCALE_START};
    t->sum.loss_scale = t->c.precision == SL_PRECISION_FP16 ? t->ls.scale : 1;
    /* GPU placement: --device, else the block's `device`, else local rank % visible GPUs */
    int ngpu = 0;
    sl_device_choice dc = {0};
    if (mo.backend != SL_BACKEND_CPU) {
        char gname[128];
        if (sl_cuda_devices(&ngpu, gname, sizeof gname) != SL_OK) {
            ngpu = 0;
            sl_err_clear();
        }
        int explicit_dev = t->opts.device >= 0 ? t->opts.device : t->c.device;
        /* backend auto without a GPU (or a build without CUDA) trains on the CPU: no choice to make */
        if ((mo.backend == SL_BACKEND_CUDA || ngpu > 0) &&
            (s = sl_cuda_choose_device(t->opts.envp, explicit_dev, ngpu, &dc))) {
            sl_err_prefix("replica %d: choosing a GPU: ", t->hooks.rank);
            goto fail;
        }
        mo.cuda_device = dc.device;
    }
    sl_pipeline_env env = sl_pipeline_env_default();
    env.num_shards = w;
    env.shard_index = t->hooks.rank;
    env.seed = t->c.seed;
    env.batch_divisor = w; /* the config's batch is global: each replica builds batch/w */
    if ((s = sl_pipeline_from_config(cfg, t->c.data, &env, &t->train_ds))) goto fail;
    if (t->c.epochs > 0 && sl_dataset_cardinality(t->train_ds) == SL_INFINITE) {
        s = sl_err(SL_EINVAL, "pipeline '%s' never ends (repeat), so it has no epochs", t->c.data);
        sl_err_hint("train for `steps N` instead of `epochs N`, or drop the repeat (each epoch re-reads the pipeline)");
        goto fail;
    }
    int64_t run_steps; /* epochs x the batches the pipeline knows it has: refused past 2^63-1 */
    if ((s = sl__train_total_steps(&t->c, sl_dataset_cardinality(t->train_ds), &run_steps))) goto fail;
    /* The first epoch's pipeline starts now, so that its shuffle buffer and prefetch fill
     * while the model is built (a GPU's context and cuBLAS take a few hundred ms) and the
     * replicas connect; a resumed run opens its own epoch later. A failure here is not
     * reported: the epoch's own open reports it. */
    if (!t->opts.resume && sl__tr_open_epoch(t, 0, &t->first_it)) {
        t->first_it = NULL;
        sl_err_clear();
    }

    mo.seed = t->c.seed;
    int64_t per_replica = t->c.batch / w;
    mo.max_batch = (int)(per_replica > t->c.eval_batch ? per_replica : t->c.eval_batch);
    if ((s = sl_model_from_config(cfg, t->c.model, &mo, &t->model))) goto fail;
    if (mo.backend != SL_BACKEND_CPU) {
        const char *why = sl__model_fallback(t->model);
        char line[160];
        sl_cuda_choice_describe(&dc, ngpu, line, sizeof line);
        if (why)
            sl__tr_warn(t, "replica %d: %s could not be opened (%s); backend auto uses the CPU", t->hooks.rank, line, why);
        else if (strcmp(sl_model_backend_name(t->model), "cuda") == 0 && t->opts.console)
            fprintf(t->opts.console, "replica %d: %s\n", t->hooks.rank, line);
    }
    if ((s = sl_optim_create(t->model, &t->c.optim, &t->optim))) goto fail;

    if (t->c.eval[0] && sl__tr_chief(t)) {
        sl_pipeline_env eenv = sl_pipeline_env_default();
        eenv.seed = t->c.seed;
        if ((s = sl_pipeline_from_config(cfg, t->c.eval, &eenv, &t->eval_ds))) goto fail;
    }
    if (sl__tr_chief(t) && (s = sl_mkdirs(t->c.run_dir, "run folder"))) goto fail;
    if (t->c.steps > 0) t->total_steps = t->c.steps;
    *out = t;
    return SL_OK;
fail:
    sl_trainer_free(t);
    return s;
}

const sl_train_config *sl_trainer_config(const sl_trainer *t) { return &t->c; }
sl_model *sl_trainer_model(sl_trainer *t) { return t->model; }
const sl_train_summary *sl_trainer_summary(const sl_trainer *t) { return &t->sum; }

void sl_trainer_free(sl_trainer *t) {
    if (!t) return;
    sl_tfev_close(t->events);
    sl_tfev_close(t->eval_events);
    sl_iter_close(t->first_it);
    sl_dataset_unref(t->train_ds);
    sl_dataset_unref(t->eval_ds);
    sl_optim_free(t->optim);
    sl_model_free(t->model);
    free(t);
}
/* ---- evaluation ----------------------------------------------------------------------- */

/* sl_trainer_evaluate, with top-5 accuracy too. */
static sl_status evaluate(sl_trainer *t, double *loss, double *accuracy, double *top5) {
    if (!t->eval_ds) return sl_err(SL_ESTATE, "no eval pipeline (add `eval PIPELINE` to the train block)");
    sl_iter *it;
    sl_status s = sl_iter_create(t->eval_ds, NULL, &it);
    if (s) return s;
    sl_element e;
    sl_element_init(&e);
    double lsum = 0;
    int64_t correct = 0, n = 0, c5 = 0;
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        const sl_tensor *x, *y;
        sl_step_result r = {0};
        sl_staged h;
        if ((s = sl__tr_batch_parts(t, t->c.eval, &e, &x, &y)) || (s = sl_model_stage(t->model, x, y, &h)) ||
            (s = sl_model_eval_staged(t->model, &h, &r))) {
            sl_element_clear(&e);
            break;
        }
        lsum += r.loss * (double)r.examples;
        correct += r.correct;
        c5 += r.top5;
        n += r.examples;
        sl_element_clear(&e);
    }
    sl_iter_close(it);
    if (s != SL_END) return s;
    if (n == 0) return sl_err(SL_EINVAL, "eval pipeline '%s' produced no examples", t->c.eval);
    *loss = lsum / (double)n;
    *accuracy = (double)correct / (double)n;
    *top5 = (double)c5 / (double)n;
    return SL_OK;
}

sl_status sl_trainer_evaluate(sl_trainer *t, double *loss, double *accuracy) {
    double top5;
    return evaluate(t, loss, accuracy, &top5);
}

/* An evaluation at `step` (at the end of 0-based epoch `epoch`, or -1 elsewhere) into the
 * summary, the eval/ scalars and (line) its own console line; *acc_out: its accuracy. */
static sl_status run_eval(sl_trainer *t, int64_t step, int64_t epoch, bool line, double *acc_out) {
    double loss, acc, top5;
    sl_status s = evaluate(t, &loss, &acc, &top5);
    if (s) return s;
    *acc_out = acc;
    return sl__report_eval(t, step, epoch, line, loss, acc, top5);
}

/* ---- checkpoints ---------------------------------------------------------------------- */


static sl_status save(sl_trainer *t, int64_t step, int64_t epoch, int64_t batch) {
    char path[1200];
    snprintf(path, sizeof path, "%s/ckpt-%09" PRId64 ".safetensors", t->c.run_dir, step);
    sl_ckpt_position pos = {.step = step, .epoch = epoch, .batch = batch, .steps_per_epoch = t->steps_per_epoch,
                            .model_hash = t->c.model_hash, .batch_size = t->c.batch};
    /* every replica's own state (compression residuals) beside the chief's checkpoint */
    sl_status s = SL_OK;
    if (sl__tr_chief(t)) s = sl_train_save_checkpoint(path, t->model, t->optim, t->c.model, sl_cfg_filename(t->cfg), &pos);
    if (!s && t->hooks.save_state) s = t->hooks.save_state(t->hooks.ctx, t->c.run_dir, step, t->c.ckpt_keep);
    if (s) return s;
    t->last_save = step;
    if (!sl__tr_chief(t)) return SL_OK;
    if (t->c.ckpt_keep > 0) {
        char **list;
        int n = sl_train_list_checkpoints(t->c.run_dir, &list);
        for (int i = t->c.ckpt_keep; i < n; i++)
            if (unlink(list[i]) != 0 && errno != ENOENT)
                sl__tr_warn(t, "cannot remove old checkpoint %s (keep=%d): %s", list[i], t->c.ckpt_keep, strerror(errno));
        if (n > 0) sl_train_free_list(list, n);
    }
    return SL_OK;
}

/* Temporary files of checkpoint writes that a killed run left behind (never read). */
static void remove_stale(const sl_trainer *t) {
    DIR *d = opendir(t->c.run_dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, "ckpt-", 5) == 0 && strstr(de->d_name, ".safetensors.tmp.")) {
            char p[1400];
            snprintf(p, sizeof p, "%s/%s", t->c.run_dir, de->d_name);
            unlink(p);
        }
    closedir(d);
}

/* What a checkpoint must agree with to be this run's. */
static sl_ckpt_expect expectation(const sl_trainer *t) {
    sl_ckpt_expect want = {.model_hash = t->c.model_hash, .batch_size = t->c.batch};
    /* the epoch's length, when the pipeline knows it (with replicas the chief's shard may
     * differ from the others', so only for one) */
    int64_t card = sl_dataset_cardinality(t->train_ds);
    if (t->hooks.world_size == 1 && card > 0) want.steps_per_epoch = card;
    return want;
}

/* The newest checkpoint that passes every check, into the model and optimizer. A damaged
 * one is skipped with a warning naming it; a sound one of another configuration stops the
 * run; when every one is damaged the run fails naming them. */
static sl_status resume(sl_trainer *t, sl_ckpt_position *pos) {
    char **list;
    int n = sl_train_list_checkpoints(t->c.run_dir, &list);
    if (n < 0) return n;
    sl_ckpt_expect want = expectation(t);
    char names[700];
    size_t len = 0;
    names[0] = 0;
    for (int i = 0; i < n; i++) {
        sl_status s = sl_train_load_checkpoint(list[i], t->model, t->optim, &want, pos);
        if (s == SL_OK) {
            snprintf(t->sum.resumed_from, sizeof t->sum.resumed_from, "%s", list[i]);
            if (!pos->verified)
                sl__tr_warn(t, "checkpoint %s has no checksums (written by an earlier Sluice, version 1): loaded, but its "
                         "contents cannot be verified", list[i]);
            sl_train_free_list(list, n);
            return SL_OK;
        }
        if (s == SL_EINVAL || s == SL_ENOMEM || s == SL_EUNSUPPORTED) {
            /* sound, but another model, optimizer, batch or data; or a newer format */
            sl_train_free_list(list, n);
            return s;
        }
        sl__tr_warn(t, "skipping damaged checkpoint %s: %s", list[i], sl_errmsg());
        if (len < sizeof names)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", list[i]);
    }
    if (n > 0) {
        sl_train_free_list(list, n);
        if (len >= sizeof names) strcpy(names + sizeof names - 5, "...");
        if (n == 1)
            sl_err(SL_ECORRUPT, "--resume: the only checkpoint in %s is not loadable: %s", t->c.run_dir, names);
        else
            sl_err(SL_ECORRUPT, "--resume: none of the %d checkpoints in %s is loadable: %s", n, t->c.run_dir, names);
        sl_err_hint("the warnings above say what is wrong with each; move them away to resume from nothing, or start "
                    "a new run with --overwrite");
        return SL_ECORRUPT;
    }
    if (sl__tr_console(t)) fprintf(sl__tr_console(t), "no checkpoint in %s: starting from step 0\n", t->c.run_dir);
    *pos = (sl_ckpt_position){0};
    return SL_OK;
}

/* The other replicas' --resume: the same checkpoint as the chief's when the run folder is
 * shared (start() then makes all of them agree); none loadable leaves *pos at step 0. */
static void resume_replica(sl_trainer *t, sl_ckpt_position *pos) {
    sl_ckpt_position p = {0};
    sl_ckpt_expect want = expectation(t);
    char **list;
    int n = sl_train_list_checkpoints(t->c.run_dir, &list);
    for (int i = 0; i < n; i++)
        if (sl_train_load_checkpoint(list[i], t->model, t->optim, &want, &p) == SL_OK) {
            *pos = p;
            break;
        }
    if (n > 0) sl_train_free_list(list, n);
}

/* ---- the loop ------------------------------------------------------------------------- */

static bool every_steps(const sl_train_every *e, int64_t step) { return e->steps > 0 && step % e->steps == 0; }
static bool every_epochs(const sl_train_every *e, int64_t epochs_done) {
    return e->epochs > 0 && epochs_done % e->epochs == 0;
}

static bool loop_done(const sl_trainer *t, const sl__loop *L) {
    return t->c.steps > 0 ? L->step >= t->c.steps : L->epoch >= t->c.epochs;
}

/* After a step: logs, the next epoch's early pipeline, the progress bar, checkpoints and
 * evaluations on step counts; *leave when the epoch's steps end here (the step limit, a stop). */
static sl_status after_step(sl_trainer *t, sl__loop *L, bool *leave) {
    sl_status s;
    *leave = false;
    if (sl__tr_chief(t) && t->c.log_every > 0 && L->step % t->c.log_every == 0 &&
        (s = sl__report_window(t, L->step, &L->win, &L->a, L->lr)))
        return s;
    sl__tr_open_next_early(t, L);
    sl__report_progress(t, L);
    if ((sl__tr_chief(t) || t->hooks.save_state) && every_steps(&t->c.ckpt_every, L->step) &&
        (s = save(t, L->step, L->epoch, L->f.b)))
        return s;
    if (sl__tr_chief(t) && t->eval_ds && every_steps(&t->c.eval_every, L->step)) {
        if ((s = run_eval(t, L->step, -1, true, &L->ev.epoch_acc))) return s;
        L->ev.last = L->ev.epoch_acc;
        L->ev.last_step = L->step;
        /* evaluation refilled the staging slots: stage the next batch again */
        if ((s = sl__tr_restage(t, L))) return s;
    }
    if (t->c.steps > 0 && L->step >= t->c.steps) {
        *leave = true;
    } else if (sl__tr_stop_requested(t) || L->agreed) {
        L->stopped = true;
        *leave = true;
    }
    return SL_OK;
}

/* One epoch's steps (to its end, the step limit or a stop). */
static sl_status run_epoch(sl_trainer *t, sl__loop *L) {
    sl_status s;
    L->a = (sl__tally){.t0 = sl_now_s(), .wire0 = sl__tr_wire_bytes(t), .step0 = L->step};
    t->bar.last = 0;
    L->ev.epoch_acc = -1;
    if ((s = sl__tr_epoch_begin(t, L))) return s;
    for (bool leave = false; L->f.have && !leave;)
        if ((s = sl__tr_step(t, L)) || (s = after_step(t, L, &leave))) return s;
    L->a.t1 = sl_now_s();
    if (sl__tr_chief(t)) sl__report_stats(t, L->f.it);
    sl_iter_close(L->f.it);
    L->f.it = NULL;
    if (L->f.b == 0) {
        sl_err(SL_EINVAL, "pipeline '%s' produced no batch in epoch %" PRId64, t->c.data, L->epoch + 1);
        sl_err_hint("check the files pattern, and that drop_remainder does not drop the only batch");
        return SL_EINVAL;
    }
    return SL_OK;
}

/* After an epoch's steps: its count, evaluation, epoch line, the replicas' end of it and
 * its checkpoint; *done when the run ends here. */
static sl_status end_of_epoch(sl_trainer *t, sl__loop *L, bool *done) {
    sl_status s;
    bool full = L->f.end_seen || L->f.cut;
    L->pos_batch = full ? 0 : L->f.b;
    if (full) {
        if (t->steps_per_epoch == 0) t->steps_per_epoch = L->f.b;
        L->epoch++;
        t->sum.epochs_done = L->epoch;
    }
    *done = loop_done(t, L);
    L->stopped = L->stopped && !*done; /* the last step's boundary: the run is simply complete */
    *done = *done || L->stopped;
    if (sl__tr_chief(t) && t->eval_ds && full && !L->stopped && every_epochs(&t->c.eval_every, L->epoch) &&
        L->ev.last_step != L->step) {
        if ((s = run_eval(t, L->step, L->epoch - 1, false, &L->ev.epoch_acc))) return s;
        L->ev.last = L->ev.epoch_acc;
        L->ev.last_step = L->step;
    }
    int64_t ended = full ? L->epoch - 1 : L->epoch;
    if (sl__tr_chief(t) && (s = sl__report_epoch(t, ended, L->step, &L->a, L->lr, L->ev.epoch_acc))) return s;
    sl_step rec = {.phase = SL_STEP_EPOCH_END, .step = L->step, .epoch = ended, .batches = L->f.b,
                   .data_ended = L->f.end_seen};
    sl_step_reply reply;
    if ((s = sl__tr_exchange(t, &rec, &reply))) return s;
    if ((sl__tr_chief(t) || t->hooks.save_state) && full && every_epochs(&t->c.ckpt_every, L->epoch) &&
        (s = save(t, L->step, L->epoch, 0)))
        return s;
    if (full && t->opts.on_epoch_end && (s = t->opts.on_epoch_end(t->opts.ctx, L->epoch, L->step))) return s;
    L->run.wait += L->a.wait;
    L->run.busy += L->a.wait + L->a.compute + L->a.exchange;
    L->run.examples += L->a.examples;
    t->sum.steps = L->step;
    t->sum.steps_per_epoch = t->steps_per_epoch;
    return SL_OK;
}

/* The run's end: the stop report, the final checkpoint and evaluation, the summary. */
static sl_status finish_run(sl_trainer *t, sl__loop *L) {
    sl_status s;
    int64_t step = L->step;
    FILE *f = sl__tr_console(t);
    t->sum.stopped = L->stopped;
    if (L->stopped && !t->together) {
        t->sum.stop_rank = t->hooks.rank;
        t->sum.stop_value = sl__tr_own_stop(t);
    }
    if (L->stopped && f) {
        sl__report_clear(t);
        if (t->together)
            fprintf(f, "stop requested (rank %d): all %d replicas stop at step %" PRId64 "\n", t->sum.stop_rank,
                    t->hooks.world_size, step);
        else
            fprintf(f, "stop requested: stopping at step %" PRId64 "\n", step);
        fflush(f);
    }
    /* the final state is always checkpointed when checkpoints are on */
    if (sl__tr_chief(t) && (t->c.ckpt_every.epochs || t->c.ckpt_every.steps)) {
        char **list;
        int n = sl_train_list_checkpoints(t->c.run_dir, &list);
        char want[1200];
        snprintf(want, sizeof want, "%s/ckpt-%09" PRId64 ".safetensors", t->c.run_dir, step);
        bool have = n > 0 && strcmp(list[0], want) == 0;
        if (n > 0) sl_train_free_list(list, n);
        if (!have && (s = save(t, step, L->epoch, L->pos_batch))) return s;
    } else if (t->hooks.save_state && (t->c.ckpt_every.epochs || t->c.ckpt_every.steps) && t->last_save != step &&
               t->sum.start_step != step && (s = save(t, step, L->epoch, L->pos_batch))) {
        return s; /* the other replicas: the same decision as the chief's, from what they saved */
    }
    if (sl__tr_chief(t) && t->eval_ds && !L->stopped) {
        if (L->ev.last_step != step && (s = run_eval(t, step, -1, true, &L->ev.last))) return s;
        t->sum.eval_accuracy = L->ev.last;
    }
    t->sum.steps = step;
    double secs = sl_now_s() - L->run.t0;
    t->sum.examples_per_sec = secs > 0 ? (double)L->run.examples * t->hooks.world_size / secs : 0;
    t->sum.input_wait = L->run.busy > 0 ? L->run.wait / L->run.busy : 0;
    return SL_OK;
}

static sl_status train_loop(sl_trainer *t, int64_t step, int64_t epoch, int64_t skip) {
    sl__loop L = {.f = {.next_it = t->first_it, .next_for = t->first_it ? 0 : -1, .skip = skip},
                  .step = step,
                  .epoch = epoch,
                  .pos_batch = skip,
                  .ev = {.last = -1, .last_step = -1},
                  .run = {.t0 = sl_now_s()}};
    t->first_it = NULL;
    sl_element_init(&L.f.e);
    sl_element_init(&L.f.el[0]);
    sl_element_init(&L.f.el[1]);
    L.lr = sl_schedule_lr(&t->c.schedule, step);
    L.win.t0 = sl_now_s();
    t->bar.t0 = L.run.t0;
    t->bar.step0 = step;
    t->sum.epochs_done = epoch;
    sl_status s = SL_OK;
    for (bool done = loop_done(t, &L); !done && !s;) {
        if (sl__tr_stop_requested(t)) {
            L.stopped = true;
            break;
        }
        if (!(s = run_epoch(t, &L))) s = end_of_epoch(t, &L, &done);
    }
    if (!s) s = finish_run(t, &L);
    sl_element_clear(&L.f.e);
    sl_element_clear(&L.f.el[0]);
    sl_element_clear(&L.f.el[1]);
    sl_iter_close(L.f.it);
    sl_iter_close(L.f.next_it);
    return s;
}

/* ---- the run -------------------------------------------------------------------------- */

/* Where the run starts (*pos): a new run's folder made ready, or the checkpoint --resume
 * loads (the chief's, with its warnings; the other replicas try the same one). */
static sl_status start_position(sl_trainer *t, sl_ckpt_position *pos) {
    if (!sl__tr_chief(t)) {
        if (t->opts.resume) resume_replica(t, pos);
        return SL_OK;
    }
    /* a new run must not mix with files an earlier run left in its folder */
    if (!t->opts.resume) return sl_train_prepare_run_dir(t->c.run_dir, t->opts.overwrite, sl__tr_console(t));
    return resume(t, pos);
}

/* The strategy's start, and every replica's own checkpointed state (compression residuals)
 * of that step; a start that moved the step (a ps worker rejoining) starts at that step's
 * epoch and batch. */
static sl_status start_hooks(sl_trainer *t, sl_ckpt_position *pos) {
    t->sum.start_step = pos->step;
    if (pos->steps_per_epoch > 0) t->steps_per_epoch = pos->steps_per_epoch;
    if (!t->hooks.start) return SL_OK;
    int64_t st0 = pos->step;
    sl_status s;
    if ((s = t->hooks.start(t->hooks.ctx, t->model, t->optim, &pos->step))) return s;
    if (t->opts.resume && pos->step > 0 && t->hooks.load_state &&
        (s = t->hooks.load_state(t->hooks.ctx, t->c.run_dir, pos->step)))
        return s;
    if (pos->step == st0) return SL_OK;
    if (pos->step < st0)
        return sl_err(SL_EINVAL, "trainer: the start hook moved the start step back from %" PRId64 " to %" PRId64, st0,
                      pos->step);
    if (t->steps_per_epoch == 0 && (s = sl__tr_count_batches(t, pos->step, &t->steps_per_epoch))) return s;
    if (t->steps_per_epoch > 0) {
        pos->epoch = pos->step / t->steps_per_epoch;
        pos->batch = pos->step % t->steps_per_epoch;
    }
    t->sum.start_step = pos->step;
    return SL_OK;
}

/* Before the first epoch: the replicas' agreement on the run (SL_STEP_BEGIN: whether
 * they stop together, their shards), and a cosine schedule's length. */
static sl_status agree_run(sl_trainer *t, int64_t step) {
    sl_step rec = {.phase = SL_STEP_BEGIN, .step = step};
    sl_step_reply reply;
    sl_status s = sl__tr_exchange(t, &rec, &reply);
    if (s) return s;
    t->together = reply.together;
    if (t->c.schedule.kind == SL_SCHED_COSINE && t->c.schedule.total == 0) {
        if (t->c.steps > 0) {
            t->c.schedule.total = t->c.steps - t->c.schedule.warmup;
        } else {
            if (t->steps_per_epoch == 0 && (s = sl__tr_count_batches(t, step, &t->steps_per_epoch))) return s;
            int64_t total;
            if ((s = sl__train_total_steps(&t->c, t->steps_per_epoch, &total))) return s;
            t->c.schedule.total = total - t->c.schedule.warmup;
        }
        if (t->c.schedule.total < 1) t->c.schedule.total = 1;
    }
    return SL_OK;
}

/* The chief's event files, two TensorBoard runs as Keras writes them (RUN_DIR/train and
 * RUN_DIR/eval), and its banner. */
static sl_status open_writers(sl_trainer *t, const sl_ckpt_position *pos) {
    if (!sl__tr_chief(t)) return SL_OK;
    remove_stale(t);
    sl_status s;
    char evdir[1100];
    snprintf(evdir, sizeof evdir, "%s/train", t->c.run_dir);
    if ((s = sl_tfev_open(evdir, 0, &t->events))) return s;
    snprintf(evdir, sizeof evdir, "%s/%s", t->c.run_dir, t->c.log_keras ? "validation" : "eval");
    if (t->eval_ds && (s = sl_tfev_open(evdir, 0, &t->eval_events))) return s;
    FILE *f = sl__tr_console(t);
    if (!f) return SL_OK;
    size_t np;
    sl_model_params(t->model, &np);
    const char *bk = sl_model_backend_name(t->model);
    fprintf(f, "model %s on %s", t->c.model, bk);
    if (t->c.precision != SL_PRECISION_FP32)
        fprintf(f, " (precision %s%s)", sl_precision_name(t->c.precision), strcmp(bk, "cpu") == 0 ? ", emulated" : "");
    fprintf(f, ": %zu parameters; data '%s' (batch %" PRId64 "%s), eval '%s'; ", np, t->c.data, t->c.batch,
            t->hooks.world_size > 1 ? ", global" : "", t->c.eval[0] ? t->c.eval : "none");
    if (t->c.steps > 0) fprintf(f, "%" PRId64 " step%s; ", t->c.steps, t->c.steps == 1 ? "" : "s");
    else fprintf(f, "%" PRId64 " epoch%s; ", t->c.epochs, t->c.epochs == 1 ? "" : "s");
    fprintf(f, "run dir %s\n", t->c.run_dir);
    if (t->sum.resumed_from[0])
        fprintf(f, "resuming from %s at step %" PRId64 " (epoch %" PRId64 ", batch %" PRId64 ")\n", t->sum.resumed_from,
                pos->step, pos->epoch + 1, pos->batch);
    fflush(f);
    return SL_OK;
}

/* The event files of a run that trained to its end (s: its status) are closed here, so
 * that a failed close fails the run; after a failure they close with the trainer. */
static sl_status close_writers(sl_trainer *t, sl_status s) {
    if (!s && t->events) {
        s = sl_tfev_close(t->events);
        t->events = NULL;
    }
    if (t->eval_events) {
        sl_status es = sl_tfev_close(t->eval_events);
        t->eval_events = NULL;
        if (!s) s = es;
    }
    return s;
}

sl_status sl_trainer_run(sl_trainer *t) {
    if (t->ran) return sl_err(SL_ESTATE, "sl_trainer_run: a trainer runs once");
    t->ran = true;
    double t0 = sl_now_s();
    sl_ckpt_position pos = {0};
    sl_status s;
    if (!(s = start_position(t, &pos)) && !(s = start_hooks(t, &pos)) && !(s = agree_run(t, pos.step)) &&
        !(s = open_writers(t, &pos)))
        s = close_writers(t, train_loop(t, pos.step, pos.epoch, pos.batch));
    if (t->hooks.finish) {
        sl_status fs = t->hooks.finish(t->hooks.ctx, s);
        if (!s) s = fs;
    }
    t->sum.seconds = sl_now_s() - t0;
    FILE *f = sl__tr_console(t);
    if (!s && f && t->eval_ds && !t->sum.stopped) {
        fprintf(f, "test accuracy %.4f\n", t->sum.eval_accuracy);
        fflush(f);
    }
    return s;
}
