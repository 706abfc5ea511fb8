/* The training loop's reporting (sluice/train.h): the progress bar, the epoch and
 * evaluation lines on the chief's console, the TensorBoard scalars of the train/ and eval/
 * runs, and the last epoch's pipeline stats. Called by train/trainer.c and
 * train/trainer_step.c; nothing here changes what is trained.
 *
 * Workload: one tally update per step, a progress redraw at most ten times a second, one
 * line and a few scalars per epoch (or per `log every=N` steps). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sluice/stats.h"
#include "train/internal.h"

/* ---- the progress bar ----------------------------------------------------------------- */

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

void sl__report_progress(sl_trainer *t, const sl__loop *L) {
    FILE *f = sl__tr_console(t);
    if (!f || !t->opts.progress) return;
    double tn = sl_now_s();
    if (tn - t->bar.last < 0.1) return;
    t->bar.last = tn;
    const sl__tally *a = &L->a;
    int64_t step = L->step;
    /* the run's length: steps N, or epochs x steps per epoch once the first epoch is counted */
    int64_t total;
    if (sl__train_total_steps(&t->c, t->steps_per_epoch, &total)) sl_err_clear(); /* past 2^63-1: none shown */
    double eta = -1, dt = tn - t->bar.t0;
    int64_t done = step - t->bar.step0;
    if (total > 0 && done > 0 && dt > 0) eta = (double)(total > step ? total - step : 0) * dt / (double)done;
    char line[256];
    sl__train_progress_line(line, sizeof line, L->epoch, t->c.steps > 0 ? 0 : t->c.epochs, L->f.b, t->steps_per_epoch,
                            step, total, a->examples ? a->loss_sum / (double)a->examples : 0,
                            a->examples ? (double)a->correct / (double)a->examples : 0.0, eta);
    if (t->opts.plain_progress) { /* no ESC[K: blank what is left of the longer line before */
        int n = (int)strlen(line);
        fprintf(f, "\r%s%*s", line, t->bar.len > n ? t->bar.len - n : 0, "");
        t->bar.len = n;
    } else {
        fprintf(f, "\r\033[K%s", line);
    }
    fflush(f);
}

void sl__report_clear(sl_trainer *t) {
    FILE *f = sl__tr_console(t);
    if (!f || !t->opts.progress) return;
    if (!t->opts.plain_progress) {
        fputs("\r\033[K", f);
    } else if (t->bar.len > 0) {
        fprintf(f, "\r%*s\r", t->bar.len, "");
        t->bar.len = 0;
    }
}

/* ---- scalars and lines ---------------------------------------------------------------- */

/* Top-5 accuracy is reported only where it says something: more than 5 classes. */
static bool has_top5(const sl_trainer *t) { return sl_model_classes(t->model) > SL_TOPK; }

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

void sl__report_account(sl__tally *w, double wait, double compute, double exch, const sl_step_result *r) {
    w->wait += wait;
    w->compute += compute;
    w->exchange += exch;
    w->loss_sum += r->loss * (double)r->examples;
    w->correct += r->correct;
    w->top5 += r->top5;
    w->examples += r->examples;
}

/* The epoch-end evaluation is printed on the epoch line instead ("eval accuracy"), so every
 * evaluation shows once on the console. */
sl_status sl__report_eval(sl_trainer *t, int64_t step, int64_t epoch, bool line, double loss, double acc, double top5) {
    t->sum.eval_accuracy = acc;
    t->sum.eval_loss = loss;
    t->sum.eval_top5_accuracy = top5;
    FILE *f = line ? sl__tr_console(t) : NULL;
    if (f) {
        sl__report_clear(t);
        fprintf(f, "eval  step %" PRId64 "  loss %.4f  accuracy %.4f", step, loss, acc);
        if (has_top5(t)) fprintf(f, "  top5 %.4f", top5);
        fputc('\n', f);
        fflush(f);
    }
    sl_status s;
    if (t->c.log_keras) {
        /* Keras: every evaluation against the optimizer's iterations (on_test_end); the
         * one at an epoch's end also by epoch (on_epoch_end's val_* logs) */
        if ((s = eval_scalar(t, "evaluation_loss_vs_iterations", step, loss)) ||
            (s = eval_scalar(t, "evaluation_accuracy_vs_iterations", step, acc)))
            return s;
        if (epoch >= 0 && ((s = eval_scalar(t, "epoch_loss", epoch, loss)) ||
                           (s = eval_scalar(t, "epoch_accuracy", epoch, acc))))
            return s;
    } else {
        if ((s = eval_scalar(t, "accuracy", step, acc)) || (s = eval_scalar(t, "loss", step, loss))) return s;
        if (has_top5(t) && (s = eval_scalar(t, "top5_accuracy", step, top5))) return s;
    }
    if (t->eval_events && (s = sl_tfev_flush(t->eval_events))) return s;
    return SL_OK;
}

/* What a tally over `secs` seconds comes to, and the train scalars made of it. */
typedef struct {
    double loss, acc, top5, eps, wait;
} rates;

static rates rates_of(const sl_trainer *t, const sl__tally *a, double secs) {
    double busy = a->wait + a->compute + a->exchange, n = (double)a->examples;
    return (rates){
        .loss = a->examples ? a->loss_sum / n : 0,
        .acc = a->examples ? (double)a->correct / n : 0,
        .top5 = a->examples ? (double)a->top5 / n : 0,
        .eps = secs > 0 ? n * t->hooks.world_size / secs : 0,
        .wait = busy > 0 ? a->wait / busy : 0,
    };
}

static sl_status rate_scalars(sl_trainer *t, int64_t step, const rates *r, float lr) {
    sl_status s;
    if ((s = scalar(t, "loss", step, r->loss)) || (s = scalar(t, "accuracy", step, r->acc)) ||
        (s = scalar(t, "learning_rate", step, lr)) || (s = scalar(t, "examples_per_sec", step, r->eps)) ||
        (s = scalar(t, "input_wait_fraction", step, r->wait)))
        return s;
    if (has_top5(t) && (s = scalar(t, "top5_accuracy", step, r->top5))) return s;
    return SL_OK;
}

sl_status sl__report_epoch(sl_trainer *t, int64_t epoch, int64_t step, const sl__tally *a, float lr, double eval_acc) {
    rates r = rates_of(t, a, a->t1 - a->t0);
    double loss = r.loss, acc = r.acc, top5 = r.top5, eps = r.eps, wait = r.wait;
    t->sum.train_loss = loss;
    t->sum.train_accuracy = acc;
    t->sum.train_top5_accuracy = top5;
    /* bytes this replica sent per step in the epoch (every replica sends about as many) */
    double wire = step > a->step0 ? (double)(sl__tr_wire_bytes(t) - a->wire0) / (double)(step - a->step0) : 0;
    /* the exchange time left visible after backward (with buckets, what did not overlap it) */
    double xms = step > a->step0 ? 1000.0 * a->exchange / (double)(step - a->step0) : 0;
    FILE *f = sl__tr_console(t);
    if (f) {
        sl__report_clear(t);
        if (t->c.epochs > 0)
            fprintf(f, "epoch %" PRId64 "/%" PRId64, epoch + 1, t->c.epochs);
        else
            fprintf(f, "epoch %" PRId64, epoch + 1);
        fprintf(f, "  step %" PRId64 "  loss %.4f  accuracy %.4f", step, loss, acc);
        if (has_top5(t)) fprintf(f, "  top5 %.4f", top5);
        fprintf(f, "  %.0f examples/s  input wait %.1f%%  lr %.3g", eps, 100 * wait, lr);
        if (eval_acc >= 0) fprintf(f, "  eval accuracy %.4f", eval_acc);
        if (eval_acc >= 0 && has_top5(t)) fprintf(f, "  eval top5 %.4f", t->sum.eval_top5_accuracy);
        if (t->hooks.wire_bytes && step > a->step0) {
            fprintf(f, "  wire %.1f KiB/step", wire / 1024);
            if (t->hooks.wire_path) fprintf(f, " (%s)", t->hooks.wire_path);
        }
        if (t->hooks.world_size > 1 && step > a->step0) fprintf(f, "  exchange %.1f ms/step", xms);
        if (t->c.precision == SL_PRECISION_FP16)
            fprintf(f, "  loss scale %g (%" PRId64 " skipped)", t->sum.loss_scale, t->sum.skipped_steps);
        fprintf(f, "  (%.1f s)\n", sl_now_s() - a->t0);
        fflush(f);
    }
    sl_status s;
    if (t->c.log_keras) {
        /* Keras' on_epoch_end: the epoch's train logs and the learning rate, at the epoch */
        if ((s = scalar(t, "epoch_loss", epoch, loss)) || (s = scalar(t, "epoch_accuracy", epoch, acc)) ||
            (s = scalar(t, "epoch_learning_rate", epoch, lr)))
            return s;
        return t->events ? sl_tfev_flush(t->events) : SL_OK;
    }
    if (t->hooks.wire_bytes && step > a->step0 && (s = scalar(t, "wire_bytes_per_step", step, wire))) return s;
    if (t->hooks.world_size > 1 && step > a->step0 && (s = scalar(t, "exchange_ms_per_step", step, xms))) return s;
    if (t->c.log_every > 0) return t->events ? sl_tfev_flush(t->events) : SL_OK; /* the windows write them */
    if ((s = rate_scalars(t, step, &r, lr))) return s;
    if (t->events && (s = sl_tfev_flush(t->events))) return s;
    return SL_OK;
}

sl_status sl__report_window(sl_trainer *t, int64_t step, sl__tally *w, const sl__tally *epoch, float lr) {
    if (t->c.log_keras) {
        /* Keras' on_train_batch_end with update_freq=N: the batch logs (the epoch's means so
         * far) at the global batch number, when it is a multiple of N */
        rates e = rates_of(t, epoch, sl_now_s() - epoch->t0);
        *w = (sl__tally){.t0 = sl_now_s()};
        sl_status s = scalar(t, "batch_loss", step, e.loss);
        return s ? s : scalar(t, "batch_accuracy", step, e.acc);
    }
    rates r = rates_of(t, w, sl_now_s() - w->t0);
    *w = (sl__tally){.t0 = sl_now_s()};
    return rate_scalars(t, step, &r, lr);
}

void sl__report_stats(sl_trainer *t, sl_iter *it) {
    char sp[1100];
    snprintf(sp, sizeof sp, "%s/stats.json", t->c.run_dir);
    if (sl_stats_write_json(it, sp)) sl__tr_warn(t, "pipeline stats not written: %s", sl_errmsg());
}
