/* The training loop (sluice/train.h): batches from a config pipeline -> train step ->
 * gradient exchange hook -> optimizer step with the scheduled learning rate; evaluation,
 * checkpoints, --resume, console lines and TensorBoard scalars around it.
 *
 * Step time is split three ways, the numbers that say whether the input pipeline is the
 * bottleneck: waiting for the pipeline (sl_iter_next), compute (prefetch + forward +
 * backward + optimizer), and exchange (the hook). The pipeline's own `prefetch` op keeps
 * batch k+1 in the making on its threads while step k computes; sl_model_stage stages
 * the batch for the device (an async copy on CUDA that overlaps step k).
 *
 * Workload: thousands of steps of a few ms to a few hundred ms each; one console line per
 * epoch, a progress bar redrawn at most ten times a second, a checkpoint every epoch or
 * every few hundred steps. One thread drives everything; the pipeline and the backend have
 * their own. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sluice/cuda.h"
#include "sluice/from_config.h"
#include "sluice/pipeline.h"
#include "sluice/stats.h"
#include "sluice/tfevents.h"
#include "sluice/train.h"
#include "sluice/util.h"
#include "train/model_priv.h"
#include "train/trainer_priv.h"

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
    if (!t->hooks.exchange_more != !t->hooks.allsum) {
        return sl_err(SL_EINVAL, "trainer hooks: exchange_more and allsum go together (lockstep epochs need both)");
    }
    if (w > 1 && ((!t->hooks.exchange && !t->hooks.exchange_more) || strcmp(t->c.strategy, "none") == 0)) {
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
    if (!t->opts.resume && open_epoch(t, 0, &t->first_it)) {
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
            warnf(t, "replica %d: %s could not be opened (%s); backend auto uses the CPU", t->hooks.rank, line, why);
        else if (strcmp(sl_model_backend_name(t->model), "cuda") == 0 && t->opts.console)
            fprintf(t->opts.console, "replica %d: %s\n", t->hooks.rank, line);
    }
    if ((s = sl_optim_create(t->model, &t->c.optim, &t->optim))) goto fail;

    if (t->c.eval[0] && chief(t)) {
        sl_pipeline_env eenv = sl_pipeline_env_default();
        eenv.seed = t->c.seed;
        if ((s = sl_pipeline_from_config(cfg, t->c.eval, &eenv, &t->eval_ds))) goto fail;
    }
    if (chief(t) && (s = sl__make_dirs(t->c.run_dir, "run folder"))) goto fail;
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
    free(t->warned);
    free(t);
}

/* ---- batches ------------------------------------------------------------------------- */

/* The image and label tensors of a batch, checked. */
static sl_status batch_parts(const sl_trainer *t, const char *pipe, const sl_element *e, const sl_tensor **x,
                             const sl_tensor **y) {
    int ix = sl_element_find(e, t->c.image_key), iy = sl_element_find(e, t->c.label_key);
    if (ix < 0 || iy < 0) {
        char names[256] = "";
        size_t len = 0;
        for (int i = 0; i < e->n && len < sizeof names; i++)
            len += (size_t)snprintf(names + len, sizeof names - len, i ? ", %s" : "%s", e->names[i]);
        sl_err(SL_EINVAL, "pipeline '%s': its elements have no '%s' component (they have: %s)", pipe,
               ix < 0 ? t->c.image_key : t->c.label_key, names);
        sl_err_hint("name the components with `data %s image=COMPONENT label=COMPONENT` in the train block", pipe);
        return SL_EINVAL;
    }
    *x = &e->t[ix];
    *y = &e->t[iy];
    if ((*x)->dtype != SL_DT_F32) {
        char d[96];
        sl_err(SL_EINVAL, "pipeline '%s': component '%s' is %s; the model takes float32", pipe, t->c.image_key,
               sl_tensor_describe(*x, d, sizeof d));
        sl_err_hint("end the map with scale(%s, 1/255) or cast(%s, float32)", t->c.image_key, t->c.image_key);
        return SL_EINVAL;
    }
    if ((*x)->rank < 1 || (*y)->rank != 1 || (*y)->dims[0] != (*x)->dims[0]) {
        char a[96], b[96];
        sl_err(SL_EINVAL, "pipeline '%s': a batch of %s with labels %s; expected [B, ...] and [B]", pipe,
               sl_tensor_describe(*x, a, sizeof a), sl_tensor_describe(*y, b, sizeof b));
        sl_err_hint("the pipeline must end with `batch N` over scalar labels");
        return SL_EINVAL;
    }
    return SL_OK;
}


/* The next epoch's pipeline, opened while the last tenth of this epoch trains (at least 8
 * steps before its end), so that its shuffle buffer and prefetch fill in the background
 * instead of stalling the next epoch's first steps: on a GPU an epoch of Fashion-MNIST
 * lasts under a second, and refilling a 10,000-record shuffle buffer at its start cost 5 to
 * 25% of the step time. Needs the steps per epoch (spe): known after the first full epoch,
 * or from the dataset's cardinality. At most two pipelines are alive at once; the early
 * iterator is the one the epoch would open (same seed), so results do not change. A
 * failure here is not reported: opening the epoch at its start reports it in its place. */
static void open_next_early(sl_trainer *t, int64_t spe, int64_t epoch, int64_t b, int64_t step, sl_iter **next) {
    if (*next || spe <= 0) return;
    int64_t left = spe - b, lead = spe / 10 > 8 ? spe / 10 : 8;
    if (left > lead) return;
    if (t->c.steps > 0 ? step + left >= t->c.steps : epoch + 1 >= t->c.epochs) return; /* no next epoch */
    if (open_epoch(t, epoch + 1, next)) {
        *next = NULL;
        sl_err_clear();
    }
}

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
        if ((s = batch_parts(t, t->c.eval, &e, &x, &y)) || (s = sl_model_stage(t->model, x, y, &h)) ||
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

/* Top-5 accuracy is reported only where it says something: more than 5 classes. */
static bool has_top5(const sl_trainer *t) { return sl_model_classes(t->model) > SL_TOPK; }

/* ---- checkpoints --------------------------------------------------------------------- */

static sl_status save(sl_trainer *t, int64_t step, int64_t epoch, int64_t batch) {
    char path[1200];
    snprintf(path, sizeof path, "%s/ckpt-%09" PRId64 ".safetensors", t->c.run_dir, step);
    sl_ckpt_position pos = {.step = step, .epoch = epoch, .batch = batch, .steps_per_epoch = t->steps_per_epoch,
                            .model_hash = t->c.model_hash, .batch_size = t->c.batch};
    /* every replica's own state (compression residuals) beside the chief's checkpoint */
    sl_status s = SL_OK;
    if (chief(t)) s = sl_train_save_checkpoint(path, t->model, t->optim, t->c.model, sl_cfg_filename(t->cfg), &pos);
    if (!s && t->hooks.save_state) s = t->hooks.save_state(t->hooks.ctx, t->c.run_dir, step, t->c.ckpt_keep);
    if (s) return s;
    t->last_save = step;
    if (!chief(t)) return SL_OK;
    if (t->c.ckpt_keep > 0) {
        char **list;
        int n = sl_train_list_checkpoints(t->c.run_dir, &list);
        for (int i = t->c.ckpt_keep; i < n; i++)
            if (unlink(list[i]) != 0 && errno != ENOENT)
                warnf(t, "cannot remove old checkpoint %s (keep=%d): %s", list[i], t->c.ckpt_keep, strerror(errno));
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
                warnf(t, "checkpoint %s has no checksums (written by an earlier Sluice, version 1): loaded, but its "
                         "contents cannot be verified", list[i]);
            sl_train_free_list(list, n);
            return SL_OK;
        }
        if (s == SL_EINVAL || s == SL_ENOMEM || s == SL_EUNSUPPORTED) {
            /* sound, but another model, optimizer, batch or data; or a newer format */
            sl_train_free_list(list, n);
            return s;
        }
        warnf(t, "skipping damaged checkpoint %s: %s", list[i], sl_errmsg());
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
    if (console(t)) fprintf(console(t), "no checkpoint in %s: starting from step 0\n", t->c.run_dir);
    *pos = (sl_ckpt_position){0};
    return SL_OK;
}

/* A NaN or Inf loss. Right after parameters were loaded the learning rate is not to blame. */
static sl_status nonfinite_loss(const sl_trainer *t, int64_t step, double loss) {
    if (step == t->sum.start_step && t->sum.resumed_from[0]) {
        sl_err(SL_ERANGE, "step %" PRId64 ": the loss is %g: the parameters loaded from %s produce a non-finite loss",
               step, loss, t->sum.resumed_from);
        sl_err_hint("that checkpoint holds parameters the model cannot use (the run may have been diverging when it "
                    "was written): move it away and resume from an older one");
    } else if (step == t->sum.start_step && step > 0) {
        sl_err(SL_ERANGE, "step %" PRId64 ": the loss is %g: the parameters this run resumed with (from its peers) "
                          "produce a non-finite loss", step, loss);
        sl_err_hint("the parameters the run continues from are unusable: resume from an older checkpoint");
    } else {
        sl_err(SL_ERANGE, "step %" PRId64 ": the loss is %g", step, loss);
        sl_err_hint("lower the learning rate (optimizer lr=) or add a warmup (schedule ... warmup=N)");
    }
    return SL_ERANGE;
}

/* ---- console and events ------------------------------------------------------------- */

/* "eta 5s", "eta 1m05s", "eta 2h03m" */
static int fmt_eta(char *out, size_t cap, double s) {
    long v = (long)(s + 0.5);
    if (v < 60) return snprintf(out, cap, "  eta %lds", v);
    if (v < 3600) return snprintf(out, cap, "  eta %ldm%02lds", v / 60, v % 60);
    return snprintf(out, cap, "  eta %ldh%02ldm", v / 3600, (v % 3600) / 60);
}

static void fill_bar(char *bar, int w, int64_t done, int64_t total) {
    int fill = (int)((double)w * (double)done / (double)total);
    if (fill > w) fill = w;
    for (int i = 0; i < w; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[w] = 0;
}

int sl__train_progress_line(char *out, size_t cap, int64_t epoch, int64_t epochs, int64_t b, int64_t steps_per_epoch,
                            int64_t step, int64_t total_steps, double loss, double accuracy, double eta_s) {
    char bar[32], eta[48] = "";
    if (eta_s >= 0) fmt_eta(eta, sizeof eta, eta_s);
    if (epochs > 0 && steps_per_epoch > 0) {
        fill_bar(bar, 24, b, steps_per_epoch);
        return snprintf(out, cap, "epoch %" PRId64 "/%" PRId64 " [%s] %" PRId64 "/%" PRId64 "  loss %.4f  accuracy %.4f%s",
                        epoch + 1, epochs, bar, b, steps_per_epoch, loss, accuracy, eta);
    }
    if (epochs == 0 && total_steps > 0) {
        fill_bar(bar, 24, step, total_steps);
        int pct = (int)((__int128)100 * step / total_steps); /* 100 * step can pass 2^63-1 */
        return snprintf(out, cap, "step %" PRId64 "/%" PRId64 " [%s] %3d%%  epoch %" PRId64 "  loss %.4f  accuracy %.4f%s",
                        step, total_steps, bar, pct, epoch + 1, loss, accuracy, eta);
    }
    return snprintf(out, cap, "epoch %" PRId64 "  batch %" PRId64 "  loss %.4f  accuracy %.4f", epoch + 1, b, loss,
                    accuracy);
}

static void progress(sl_trainer *t, double *last, int64_t epoch, int64_t b, int64_t step, double loss, int64_t correct,
                     int64_t seen) {
    FILE *f = console(t);
    if (!f || !t->opts.progress) return;
    double tn = now_s();
    if (tn - *last < 0.1) return;
    *last = tn;
    /* the run's length: steps N, or epochs x steps per epoch once the first epoch is counted */
    int64_t total;
    if (sl__train_total_steps(&t->c, t->steps_per_epoch, &total)) sl_err_clear(); /* past 2^63-1: none shown */
    double eta = -1, dt = tn - t->run_t0;
    int64_t done = step - t->run_step0;
    if (total > 0 && done > 0 && dt > 0) eta = (double)(total > step ? total - step : 0) * dt / (double)done;
    char line[256];
    sl__train_progress_line(line, sizeof line, epoch, t->c.steps > 0 ? 0 : t->c.epochs, b, t->steps_per_epoch, step,
                            total, loss, seen ? (double)correct / (double)seen : 0.0, eta);
    if (t->opts.plain_progress) { /* no ESC[K: blank what is left of the longer line before */
        int n = (int)strlen(line);
        fprintf(f, "\r%s%*s", line, t->bar_len > n ? t->bar_len - n : 0, "");
        t->bar_len = n;
    } else {
        fprintf(f, "\r\033[K%s", line);
    }
    fflush(f);
}

static void progress_clear(sl_trainer *t) {
    FILE *f = console(t);
    if (!f || !t->opts.progress) return;
    if (!t->opts.plain_progress) {
        fputs("\r\033[K", f);
    } else if (t->bar_len > 0) {
        fprintf(f, "\r%*s\r", t->bar_len, "");
        t->bar_len = 0;
    }
}

/* A train scalar (RUN_DIR/train/); eval_scalar: an evaluation's (RUN_DIR/eval/). The two
 * runs use the same tags for the same quantities, so TensorBoard overlays them. */
static sl_status scalar(sl_trainer *t, const char *tag, int64_t step, double v) {
    if (!t->events) return SL_OK;
    return sl_tfev_add_scalar(t->events, tag, step, (float)v, 0);
}

static sl_status eval_scalar(sl_trainer *t, const char *tag, int64_t step, double v) {
    if (!t->eval_events) return SL_OK;
    return sl_tfev_add_scalar(t->eval_events, tag, step, (float)v, 0);
}

/* ---- the loop ------------------------------------------------------------------------ */

typedef struct {
    double loss_sum;       /* sum of batch mean loss * examples */
    int64_t correct, examples, batches;
    int64_t top5;          /* examples with the label among the 5 highest logits */
    double wait, compute, exchange; /* seconds */
    double t0, t1;         /* the epoch's training began / ended (t1 before its evaluation) */
    uint64_t wire0;        /* the exchange's bytes sent before the epoch (hooks.wire_bytes) */
    int64_t step0;         /* the step the epoch began at */
} epoch_acc;

static uint64_t wire_bytes(const sl_trainer *t) { return t->hooks.wire_bytes ? t->hooks.wire_bytes(t->hooks.ctx) : 0; }

/* line: print an "eval  step N ..." console line; the epoch-end evaluation is printed on
 * the epoch line instead ("eval accuracy"), so every evaluation shows once on the console. */
static sl_status run_eval(sl_trainer *t, int64_t step, bool line, double *acc_out) {
    double loss, acc, top5;
    sl_status s = evaluate(t, &loss, &acc, &top5);
    if (s) return s;
    t->sum.eval_accuracy = acc;
    t->sum.eval_loss = loss;
    t->sum.eval_top5_accuracy = top5;
    *acc_out = acc;
    FILE *f = line ? console(t) : NULL;
    if (f) {
        progress_clear(t);
        fprintf(f, "eval  step %" PRId64 "  loss %.4f  accuracy %.4f", step, loss, acc);
        if (has_top5(t)) fprintf(f, "  top5 %.4f", top5);
        fputc('\n', f);
        fflush(f);
    }
    if ((s = eval_scalar(t, "accuracy", step, acc)) || (s = eval_scalar(t, "loss", step, loss))) return s;
    if (has_top5(t) && (s = eval_scalar(t, "top5_accuracy", step, top5))) return s;
    if (t->eval_events && (s = sl_tfev_flush(t->eval_events))) return s;
    return SL_OK;
}

/* One console line and the epoch's scalars. */
/* What an accumulation over `secs` seconds comes to, and the train scalars made of it. */
typedef struct {
    double loss, acc, top5, eps, wait;
} acc_rates;

static acc_rates rates_of(const sl_trainer *t, const epoch_acc *a, double secs) {
    double busy = a->wait + a->compute + a->exchange, n = (double)a->examples;
    return (acc_rates){
        .loss = a->examples ? a->loss_sum / n : 0,
        .acc = a->examples ? (double)a->correct / n : 0,
        .top5 = a->examples ? (double)a->top5 / n : 0,
        .eps = secs > 0 ? n * t->hooks.world_size / secs : 0,
        .wait = busy > 0 ? a->wait / busy : 0,
    };
}

static sl_status rate_scalars(sl_trainer *t, int64_t step, const acc_rates *r, float lr) {
    sl_status s;
    if ((s = scalar(t, "loss", step, r->loss)) || (s = scalar(t, "accuracy", step, r->acc)) ||
        (s = scalar(t, "learning_rate", step, lr)) || (s = scalar(t, "examples_per_sec", step, r->eps)) ||
        (s = scalar(t, "input_wait_fraction", step, r->wait)))
        return s;
    if (has_top5(t) && (s = scalar(t, "top5_accuracy", step, r->top5))) return s;
    return SL_OK;
}

static sl_status end_epoch(sl_trainer *t, int64_t epoch, int64_t step, const epoch_acc *a, float lr,
                           double eval_acc) {
    acc_rates r = rates_of(t, a, a->t1 - a->t0);
    double loss = r.loss, acc = r.acc, top5 = r.top5, eps = r.eps, wait = r.wait;
    t->sum.train_loss = loss;
    t->sum.train_accuracy = acc;
    t->sum.train_top5_accuracy = top5;
    /* bytes this replica sent per step in the epoch (every replica sends about as many) */
    double wire = step > a->step0 ? (double)(wire_bytes(t) - a->wire0) / (double)(step - a->step0) : 0;
    /* the exchange time left visible after backward (with buckets, what did not overlap it) */
    double xms = step > a->step0 ? 1000.0 * a->exchange / (double)(step - a->step0) : 0;
    FILE *f = console(t);
    if (f) {
        progress_clear(t);
        if (t->c.epochs > 0)
            fprintf(f, "epoch %" PRId64 "/%" PRId64, epoch + 1, t->c.epochs);
        else
            fprintf(f, "epoch %" PRId64, epoch + 1);
        fprintf(f, "  step %" PRId64 "  loss %.4f  accuracy %.4f", step, loss, acc);
        if (has_top5(t)) fprintf(f, "  top5 %.4f", top5);
        fprintf(f, "  %.0f examples/s  input wait %.1f%%  lr %.3g", eps, 100 * wait, lr);
        if (eval_acc >= 0) fprintf(f, "  eval accuracy %.4f", eval_acc);
        if (eval_acc >= 0 && has_top5(t)) fprintf(f, "  eval top5 %.4f", t->sum.eval_top5_accuracy);
        if (t->hooks.wire_bytes && step > a->step0) fprintf(f, "  wire %.1f KiB/step", wire / 1024);
        if (t->hooks.world_size > 1 && step > a->step0) fprintf(f, "  exchange %.1f ms/step", xms);
        if (t->c.precision == SL_PRECISION_FP16)
            fprintf(f, "  loss scale %g (%" PRId64 " skipped)", t->sum.loss_scale, t->sum.skipped_steps);
        fprintf(f, "  (%.1f s)\n", now_s() - a->t0);
        fflush(f);
    }
    sl_status s;
    if (t->hooks.wire_bytes && step > a->step0 && (s = scalar(t, "wire_bytes_per_step", step, wire))) return s;
    if (t->hooks.world_size > 1 && step > a->step0 && (s = scalar(t, "exchange_ms_per_step", step, xms))) return s;
    if (t->c.log_every > 0) return t->events ? sl_tfev_flush(t->events) : SL_OK; /* log_window writes them */
    if ((s = rate_scalars(t, step, &r, lr))) return s;
    if (t->events && (s = sl_tfev_flush(t->events))) return s;
    return SL_OK;
}

/* `log every=N`: the train scalars averaged over the last N steps (w), then w restarts. */
static sl_status log_window(sl_trainer *t, int64_t step, epoch_acc *w, float lr) {
    acc_rates r = rates_of(t, w, now_s() - w->t0);
    *w = (epoch_acc){.t0 = now_s()};
    return rate_scalars(t, step, &r, lr);
}

static bool every_steps(const sl_train_every *e, int64_t step) { return e->steps > 0 && step % e->steps == 0; }
static bool every_epochs(const sl_train_every *e, int64_t epochs_done) {
    return e->epochs > 0 && epochs_done % e->epochs == 0;
}

/* The training loop's state across its epoch, step and after-step functions. */
typedef struct {
    sl_iter *it;           /* this epoch's pipeline */
    sl_iter *next_it;      /* epoch next_for's, opened early (create's first epoch, open_next_early) */
    int64_t next_for;
    /* Two batch slots: while step k computes on cur, batch k+1 is already taken from the
     * pipeline and staged (sl_model_stage: an async copy on CUDA that step k does not wait
     * for), named by the handle in hs[]. On the CPU the step reads the element's tensors
     * in place, so an element lives until its step is done. */
    sl_element e, el[2];
    sl_staged hs[2];
    int cur;
    bool have_cur;         /* slot cur holds the next step's batch (x, y) */
    const sl_tensor *x, *y;
    bool end_seen;         /* the epoch's pipeline ended */
    bool cut;              /* lockstep ended the epoch before this replica's data did */
    bool uneven;           /* lockstep: the epoch ended on some replicas before their data did */
    bool stopped;          /* opts.stop: the run ends at this step boundary */
    bool agreed;           /* lockstep: the replicas agreed to stop after this step (agree_stop) */
    int64_t step, epoch;
    int64_t b;             /* batches taken in this epoch */
    int64_t skip;          /* batches of the first epoch a resumed run passes over */
    int64_t spe;           /* steps per epoch when known, for open_next_early */
    int64_t pos_batch;     /* the data position after the last step: batch pos_batch of epoch */
    float lr;
    epoch_acc a;           /* this epoch */
    epoch_acc win;         /* `log every=N`: the steps since the last train scalars */
    double last_draw;      /* the progress bar's last drawing */
    double eval_acc;       /* this epoch's evaluation, -1 none */
    double last_eval;      /* the newest evaluation's accuracy, at last_eval_step */
    int64_t last_eval_step;
    double run_t0, busy_wait, busy_all;
    int64_t run_examples;
} loop;

static bool loop_done(const sl_trainer *t, const loop *L) {
    return t->c.steps > 0 ? L->step >= t->c.steps : L->epoch >= t->c.epochs;
}

/* Batch `slot` from the epoch's pipeline, staged: *have, or at the pipeline's end not (and
 * end_seen). *wait: the time the pipeline took to give it. */
static sl_status next_batch(sl_trainer *t, loop *L, int slot, bool *have, const sl_tensor **x, const sl_tensor **y,
                            double *wait) {
    double t0 = now_s();
    sl_status s = sl_iter_next(L->it, &L->el[slot]);
    *wait = now_s() - t0;
    *have = false;
    if (s == SL_END) {
        L->end_seen = true;
        return SL_OK;
    }
    if (s || (s = batch_parts(t, t->c.data, &L->el[slot], x, y)) || (s = sl_model_stage(t->model, *x, *y, &L->hs[slot])))
        return s;
    *have = true;
    return SL_OK;
}

/* The step's gradient exchange through the hooks: *applied when the hook applied the update
 * itself; lockstep: *more in, this replica has the next batch; out, how many replicas do. */
static sl_status exchange(sl_trainer *t, loop *L, bool have_next, bool *applied, int *more) {
    size_t n;
    float *g = sl_model_grads(t->model, &n);
    if (lockstep(t)) {
        int want = own_stop(t); /* read once: the value sent is the value reported */
        if (want) *more = 0;    /* a stop request rides the has-data flag */
        sl_status s = t->hooks.exchange_more(t->hooks.ctx, t->model, g, n, L->step, L->lr, applied, more);
        if (!s && *more < t->hooks.world_size) s = sl__tr_agree_stop(t, have_next, want, more, &L->agreed);
        return s;
    }
    return t->hooks.exchange ? t->hooks.exchange(t->hooks.ctx, t->model, g, n, L->step, L->lr, applied) : SL_OK;
}

static void account(epoch_acc *w, double wait, double compute, double exch, const sl_step_result *r) {
    w->wait += wait;
    w->compute += compute;
    w->exchange += exch;
    w->loss_sum += r->loss * (double)r->examples;
    w->correct += r->correct;
    w->top5 += r->top5;
    w->examples += r->examples;
}

/* precision fp16, after the exchange (every replica holds the same gradient, so all
 * choose alike): a gradient with a NaN or infinity skips the step (*skip) and halves the
 * loss scale; otherwise it is divided by the scale the step used (sluice/train.h). */
static sl_status unscale_grads(sl_trainer *t, int64_t step, bool *skip) {
    size_t n;
    float *g = sl_model_grads(t->model, &n);
    sl_backend *bk = sl__model_backend(t->model);
    double ss = 0;
    sl_status s = bk->ops->sum_squares(bk, g, n, &ss);
    if (s) return s;
    *skip = !isfinite(ss);
    if (!*skip && (s = bk->ops->scale(bk, n, 1.0f / t->ls.scale, g))) return s;
    sl__loss_scale_update(&t->ls, !*skip);
    t->sum.loss_scale = t->ls.scale;
    t->sum.skipped_steps = t->ls.skipped;
    if (*skip && t->ls.scale < 1.0f) {
        sl_err(SL_ERANGE, "precision fp16: the gradient of step %" PRId64 " is not finite even at loss scale 1",
               step + 1);
        sl_err_hint("the model's values overflow half precision (largest 65504): use precision bf16 or fp32");
        return SL_ERANGE;
    }
    return SL_OK;
}

/* One training step on slot cur, with batch k+1 taken from the pipeline first. */
static sl_status train_step(sl_trainer *t, loop *L) {
    sl_status s;
    int nx = L->cur ^ 1;
    bool have_next = false;
    const sl_tensor *nxx = NULL, *nxy = NULL;
    double t1 = now_s(), tw = 0;
    if (!(t->c.steps > 0 && L->step + 1 >= t->c.steps) && (s = next_batch(t, L, nx, &have_next, &nxx, &nxy, &tw)))
        return s;
    sl_step_result r = {0};
    L->lr = sl_schedule_lr(&t->c.schedule, L->step);
    bool fp16 = t->c.precision == SL_PRECISION_FP16, skip = false;
    if ((s = sl_model_zero_grads(t->model)) ||
        (s = sl_model_train_staged(t->model, &L->hs[L->cur], fp16 ? t->ls.scale : 1.0f, &r)))
        return s;
    double t2 = now_s();
    bool applied = false;
    int more = have_next;
    if ((s = exchange(t, L, have_next, &applied, &more))) return s;
    double t3 = now_s();
    if (!applied && fp16 && (s = unscale_grads(t, L->step, &skip))) return s;
    if (!applied && !skip && (s = sl_optim_step(t->optim, L->lr))) return s;
    double t4 = now_s();
    sl_element_clear(&L->el[L->cur]);
    L->cur = nx;
    L->have_cur = have_next;
    L->x = nxx;
    L->y = nxy;
    if (lockstep(t) && more < t->hooks.world_size && have_next) {
        /* another replica is out: this batch stays unused, the epoch ends here */
        sl_element_clear(&L->el[L->cur]);
        L->have_cur = false;
        L->cut = true;
    }
    L->uneven = lockstep(t) && more > 0 && more < t->hooks.world_size;
    if (!isfinite(r.loss)) return nonfinite_loss(t, L->step, r.loss);
    account(&L->a, tw, (t2 - t1 - tw) + (t4 - t3), t3 - t2, &r); /* compute: staging + step + optimizer */
    account(&L->win, tw, (t2 - t1 - tw) + (t4 - t3), t3 - t2, &r);
    L->b++;
    L->step++;
    L->a.batches = L->b;
    return SL_OK;
}

/* After a step: logs, the next epoch's early pipeline, the progress bar, checkpoints and
 * evaluations on step counts; *leave when the epoch's steps end here (the step limit, a stop). */
static sl_status after_step(sl_trainer *t, loop *L, bool *leave) {
    sl_status s;
    *leave = false;
    if (chief(t) && t->c.log_every > 0 && L->step % t->c.log_every == 0 && (s = log_window(t, L->step, &L->win, L->lr)))
        return s;
    if (L->have_cur && !L->next_it) {
        open_next_early(t, L->spe, L->epoch, L->b, L->step, &L->next_it);
        L->next_for = L->epoch + 1;
    }
    progress(t, &L->last_draw, L->epoch, L->b, L->step, L->a.examples ? L->a.loss_sum / (double)L->a.examples : 0,
             L->a.correct, L->a.examples);
    if ((chief(t) || t->hooks.save_state) && every_steps(&t->c.ckpt_every, L->step) &&
        (s = save(t, L->step, L->epoch, L->b)))
        return s;
    if (chief(t) && t->eval_ds && every_steps(&t->c.eval_every, L->step)) {
        if ((s = run_eval(t, L->step, true, &L->eval_acc))) return s;
        L->last_eval = L->eval_acc;
        L->last_eval_step = L->step;
        /* evaluation refilled the staging slots: stage the next batch again */
        if (L->have_cur && (s = sl_model_stage(t->model, L->x, L->y, &L->hs[L->cur]))) return s;
    }
    if (t->c.steps > 0 && L->step >= t->c.steps) {
        *leave = true;
    } else if (stop_requested(t) || L->agreed) {
        L->stopped = true;
        *leave = true;
    }
    return SL_OK;
}

/* This epoch's pipeline: the one opened early when it is this epoch's, else a new one;
 * a resumed run then passes over the batches it had taken. */
static sl_status begin_epoch(sl_trainer *t, loop *L) {
    sl_status s;
    if (L->next_it && L->next_for != L->epoch) {
        sl_iter_close(L->next_it);
        L->next_it = NULL;
    }
    if (L->next_it) { /* opened while the last epoch trained */
        L->it = L->next_it;
        L->next_it = NULL;
    } else if ((s = open_epoch(t, L->epoch, &L->it))) {
        return s;
    }
    /* steps per epoch: counted in the first full epoch, else the cardinality when known */
    L->spe = t->steps_per_epoch > 0 ? t->steps_per_epoch : sl_dataset_cardinality(t->train_ds);
    /* a resumed run continues at the same batch of the same epoch order */
    for (L->b = 0; L->b < L->skip; L->b++) {
        s = sl_iter_next(L->it, &L->e);
        if (s == SL_END) break;
        if (s) return s;
        sl_element_clear(&L->e);
    }
    L->skip = 0;
    return SL_OK;
}

/* One epoch's steps (to its end, the step limit or a stop). */
static sl_status run_epoch(sl_trainer *t, loop *L) {
    sl_status s;
    L->a = (epoch_acc){.t0 = now_s(), .wire0 = wire_bytes(t), .step0 = L->step};
    L->last_draw = 0;
    L->eval_acc = -1;
    L->uneven = L->cut = L->end_seen = L->have_cur = false;
    L->cur = 0;
    L->hs[0] = L->hs[1] = (sl_staged){-1, 0};
    L->x = L->y = NULL;
    if ((s = begin_epoch(t, L))) return s;
    double w;
    if ((s = next_batch(t, L, 0, &L->have_cur, &L->x, &L->y, &w))) return s;
    L->a.wait += w;
    /* lockstep: does every replica have a first batch? (afterwards each exchange tells
     * whether every replica has the next one) */
    if (lockstep(t) && (s = sl__tr_first_batch(t, L->epoch, L->have_cur))) return s;
    for (bool leave = false; L->have_cur && !leave;)
        if ((s = train_step(t, L)) || (s = after_step(t, L, &leave))) return s;
    L->a.t1 = now_s();
    /* the last epoch's pipeline stats, for `sluice-stats --from RUN_DIR/stats.json` */
    if (chief(t)) {
        char sp[1100];
        snprintf(sp, sizeof sp, "%s/stats.json", t->c.run_dir);
        if (sl_stats_write_json(L->it, sp)) warnf(t, "pipeline stats not written: %s", sl_errmsg());
    }
    sl_iter_close(L->it);
    L->it = NULL;
    if (L->b == 0) {
        sl_err(SL_EINVAL, "pipeline '%s' produced no batch in epoch %" PRId64, t->c.data, L->epoch + 1);
        sl_err_hint("check the files pattern, and that drop_remainder does not drop the only batch");
        return SL_EINVAL;
    }
    return SL_OK;
}

/* After an epoch's steps: its count, evaluation, epoch line and checkpoint; *done when the
 * run ends here. */
static sl_status end_of_epoch(sl_trainer *t, loop *L, bool *done) {
    sl_status s;
    bool full = L->end_seen || L->cut;
    L->pos_batch = full ? 0 : L->b;
    if (full) {
        if (t->steps_per_epoch == 0) t->steps_per_epoch = L->b;
        L->epoch++;
        t->sum.epochs_done = L->epoch;
    }
    *done = loop_done(t, L);
    L->stopped = L->stopped && !*done; /* the last step's boundary: the run is simply complete */
    *done = *done || L->stopped;
    if (chief(t) && t->eval_ds && full && !L->stopped && every_epochs(&t->c.eval_every, L->epoch) &&
        L->last_eval_step != L->step) {
        if ((s = run_eval(t, L->step, false, &L->eval_acc))) return s;
        L->last_eval = L->eval_acc;
        L->last_eval_step = L->step;
    }
    if (chief(t) && (s = end_epoch(t, full ? L->epoch - 1 : L->epoch, L->step, &L->a, L->lr, L->eval_acc))) return s;
    if (L->uneven && (s = sl__tr_warn_uneven(t, L->epoch - 1, L->b, L->end_seen))) return s;
    if ((chief(t) || t->hooks.save_state) && full && every_epochs(&t->c.ckpt_every, L->epoch) &&
        (s = save(t, L->step, L->epoch, 0)))
        return s;
    if (full && t->opts.on_epoch_end && (s = t->opts.on_epoch_end(t->opts.ctx, L->epoch, L->step))) return s;
    L->busy_wait += L->a.wait;
    L->busy_all += L->a.wait + L->a.compute + L->a.exchange;
    L->run_examples += L->a.examples;
    t->sum.steps = L->step;
    t->sum.steps_per_epoch = t->steps_per_epoch;
    return SL_OK;
}

/* The run's end: the stop report, the final checkpoint and evaluation, the summary. */
static sl_status finish_run(sl_trainer *t, loop *L) {
    sl_status s;
    int64_t step = L->step;
    t->sum.stopped = L->stopped;
    if (L->stopped && !lockstep(t)) {
        t->sum.stop_rank = t->hooks.rank;
        t->sum.stop_value = own_stop(t);
    }
    if (L->stopped && console(t)) {
        progress_clear(t);
        if (lockstep(t))
            fprintf(console(t), "stop requested (rank %d): all %d replicas stop at step %" PRId64 "\n", t->sum.stop_rank,
                    t->hooks.world_size, step);
        else
            fprintf(console(t), "stop requested: stopping at step %" PRId64 "\n", step);
        fflush(console(t));
    }
    /* the final state is always checkpointed when checkpoints are on */
    if (chief(t) && (t->c.ckpt_every.epochs || t->c.ckpt_every.steps)) {
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
    if (chief(t) && t->eval_ds && !L->stopped) {
        if (L->last_eval_step != step && (s = run_eval(t, step, true, &L->last_eval))) return s;
        t->sum.eval_accuracy = L->last_eval;
    }
    t->sum.steps = step;
    double secs = now_s() - L->run_t0;
    t->sum.examples_per_sec = secs > 0 ? (double)L->run_examples * t->hooks.world_size / secs : 0;
    t->sum.input_wait = L->busy_all > 0 ? L->busy_wait / L->busy_all : 0;
    return SL_OK;
}

static sl_status train_loop(sl_trainer *t, int64_t step, int64_t epoch, int64_t skip) {
    loop L = {.next_it = t->first_it, .next_for = t->first_it ? 0 : -1, .step = step, .epoch = epoch, .skip = skip,
              .pos_batch = skip, .last_eval = -1, .last_eval_step = -1, .run_t0 = now_s()};
    t->first_it = NULL;
    sl_element_init(&L.e);
    sl_element_init(&L.el[0]);
    sl_element_init(&L.el[1]);
    L.lr = sl_schedule_lr(&t->c.schedule, step);
    L.win.t0 = now_s();
    t->run_t0 = L.run_t0;
    t->run_step0 = step;
    t->sum.epochs_done = epoch;
    sl_status s = SL_OK;
    for (bool done = loop_done(t, &L); !done && !s;) {
        if (stop_requested(t)) {
            L.stopped = true;
            break;
        }
        if (!(s = run_epoch(t, &L))) s = end_of_epoch(t, &L, &done);
    }
    if (!s) s = finish_run(t, &L);
    sl_element_clear(&L.e);
    sl_element_clear(&L.el[0]);
    sl_element_clear(&L.el[1]);
    sl_iter_close(L.it);
    sl_iter_close(L.next_it);
    return s;
}

sl_status sl_trainer_run(sl_trainer *t) {
    if (t->ran) return sl_err(SL_ESTATE, "sl_trainer_run: a trainer runs once");
    t->ran = true;
    double t0 = now_s();
    sl_status s = SL_OK;
    sl_ckpt_position pos = {0};
    FILE *f = console(t);
    /* a new run must not mix with files an earlier run left in its folder */
    if (chief(t) && !t->opts.resume && (s = sl_train_prepare_run_dir(t->c.run_dir, t->opts.overwrite, f))) goto done;
    if (t->opts.resume && chief(t) && (s = resume(t, &pos))) goto done;
    if (!chief(t) && t->opts.resume) {
        /* a replica reads the same checkpoint as the chief when the run folder is shared;
         * start() then makes all of them agree */
        sl_ckpt_position p = {0};
        sl_ckpt_expect want = expectation(t);
        char **list;
        int n = sl_train_list_checkpoints(t->c.run_dir, &list);
        for (int i = 0; i < n; i++)
            if (sl_train_load_checkpoint(list[i], t->model, t->optim, &want, &p) == SL_OK) {
                pos = p;
                break;
            }
        if (n > 0) sl_train_free_list(list, n);
    }
    t->sum.start_step = pos.step;
    if (pos.steps_per_epoch > 0) t->steps_per_epoch = pos.steps_per_epoch;
    if (t->hooks.start) {
        int64_t st0 = pos.step;
        if ((s = t->hooks.start(t->hooks.ctx, t->model, t->optim, &pos.step))) goto done;
        /* every replica's own checkpointed state (compression residuals) of that step */
        if (t->opts.resume && pos.step > 0 && t->hooks.load_state &&
            (s = t->hooks.load_state(t->hooks.ctx, t->c.run_dir, pos.step)))
            goto done;
        if (pos.step != st0) {
            /* a ps worker rejoining: start at that step's epoch and batch */
            if (pos.step < st0) {
                s = sl_err(SL_EINVAL, "trainer: the start hook moved the start step back from %" PRId64 " to %" PRId64,
                           st0, pos.step);
                goto done;
            }
            if (t->steps_per_epoch == 0 && (s = sl__tr_count_batches(t, &t->steps_per_epoch))) goto done;
            if (t->steps_per_epoch > 0) {
                pos.epoch = pos.step / t->steps_per_epoch;
                pos.batch = pos.step % t->steps_per_epoch;
            }
            t->sum.start_step = pos.step;
        }
    }
    if (lockstep(t) && (s = sl__tr_check_split(t))) goto done;
    if (t->c.schedule.kind == SL_SCHED_COSINE && t->c.schedule.total == 0) {
        if (t->c.steps > 0) {
            t->c.schedule.total = t->c.steps - t->c.schedule.warmup;
        } else {
            if (t->steps_per_epoch == 0 && (s = sl__tr_count_batches(t, &t->steps_per_epoch))) goto done;
            int64_t total;
            if ((s = sl__train_total_steps(&t->c, t->steps_per_epoch, &total))) goto done;
            t->c.schedule.total = total - t->c.schedule.warmup;
        }
        if (t->c.schedule.total < 1) t->c.schedule.total = 1;
    }
    if (chief(t)) {
        remove_stale(t);
        /* two TensorBoard runs, as Keras writes them: RUN_DIR/train and RUN_DIR/eval */
        char evdir[1100];
        snprintf(evdir, sizeof evdir, "%s/train", t->c.run_dir);
        if ((s = sl_tfev_open(evdir, 0, &t->events))) goto done;
        snprintf(evdir, sizeof evdir, "%s/eval", t->c.run_dir);
        if (t->eval_ds && (s = sl_tfev_open(evdir, 0, &t->eval_events))) goto done;
        if (f) {
            size_t np;
            sl_model_params(t->model, &np);
            const char *bk = sl_model_backend_name(t->model);
            fprintf(f, "model %s on %s", t->c.model, bk);
            if (t->c.precision != SL_PRECISION_FP32)
                fprintf(f, " (precision %s%s)", sl_precision_name(t->c.precision),
                        strcmp(bk, "cpu") == 0 ? ", emulated" : "");
            fprintf(f, ": %zu parameters; data '%s' (batch %" PRId64 "%s), eval '%s'; ", np, t->c.data, t->c.batch,
                    t->hooks.world_size > 1 ? ", global" : "", t->c.eval[0] ? t->c.eval : "none");
            if (t->c.steps > 0) fprintf(f, "%" PRId64 " step%s; ", t->c.steps, t->c.steps == 1 ? "" : "s");
            else fprintf(f, "%" PRId64 " epoch%s; ", t->c.epochs, t->c.epochs == 1 ? "" : "s");
            fprintf(f, "run dir %s\n", t->c.run_dir);
            if (t->sum.resumed_from[0])
                fprintf(f, "resuming from %s at step %" PRId64 " (epoch %" PRId64 ", batch %" PRId64 ")\n",
                        t->sum.resumed_from, pos.step, pos.epoch + 1, pos.batch);
            fflush(f);
        }
    }
    s = train_loop(t, pos.step, pos.epoch, pos.batch);
    if (!s && t->events) {
        s = sl_tfev_close(t->events);
        t->events = NULL;
    }
    if (t->eval_events) {
        sl_status es = sl_tfev_close(t->eval_events);
        t->eval_events = NULL;
        if (!s) s = es;
    }
done:
    if (t->hooks.finish) {
        sl_status fs = t->hooks.finish(t->hooks.ctx, s);
        if (!s) s = fs;
    }
    t->sum.seconds = now_s() - t0;
    if (!s && f && t->eval_ds && !t->sum.stopped) {
        fprintf(f, "test accuracy %.4f\n", t->sum.eval_accuracy);
        fflush(f);
    }
    return s;
}
