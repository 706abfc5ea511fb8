/* The training step (sluice/train.h): batches from the epoch's pipeline into two staging
 * slots, the train step, the strategy's exchange through the step record (sluice/step.h),
 * precision fp16's unscaling, and the optimizer step with the scheduled learning rate.
 * Called by the loop in train/trainer.c.
 *
 * Step time is split three ways, the numbers that say whether the input pipeline is the
 * bottleneck: waiting for the pipeline (sl_iter_next), compute (staging + forward +
 * backward + optimizer), and exchange (the hook). The pipeline's own `prefetch` op keeps
 * batch k+1 in the making on its threads while step k computes; sl_model_stage stages the
 * batch for the device (an async copy on CUDA that overlaps step k).
 *
 * Workload: thousands of steps of a few ms to a few hundred ms each, on one thread. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train/internal.h"

sl_status sl__tr_batch_parts(const sl_trainer *t, const char *pipe, const sl_element *e, const sl_tensor **x,
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

/* ---- the exchange --------------------------------------------------------------------- */

sl_status sl__tr_exchange(sl_trainer *t, sl_step *rec, sl_step_reply *out) {
    rec->model = t->model;
    rec->cardinality = sl_dataset_cardinality(t->train_ds);
    if (rec->cardinality < 0) rec->cardinality = -1;
    rec->data = t->c.data;
    /* this replica's own answer: what one replica alone does */
    *out = (sl_step_reply){.epoch_ends = !rec->holds_next, .holding = rec->holds_next, .steps_per_epoch = rec->batches};
    if (!t->hooks.exchange) return SL_OK;
    sl_status s = t->hooks.exchange(t->hooks.ctx, rec, out);
    if (!s && out->warning[0]) {
        out->warning[sizeof out->warning - 1] = 0;
        sl__tr_warn(t, "%s", out->warning);
    }
    return s;
}

static sl_status count_own_batches(sl_trainer *t, int64_t *n) {
    int64_t card = sl_dataset_cardinality(t->train_ds);
    if (card > 0) {
        *n = card;
        return SL_OK;
    }
    sl_iter *it;
    sl_status s = sl__tr_open_epoch(t, 0, &it);
    if (s) return s;
    sl_element e;
    sl_element_init(&e);
    int64_t k = 0;
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        k++;
        sl_element_clear(&e);
    }
    sl_iter_close(it);
    if (s != SL_END) return s;
    *n = k;
    return SL_OK;
}

sl_status sl__tr_count_batches(sl_trainer *t, int64_t step, int64_t *n) {
    sl_step rec = {.phase = SL_STEP_COUNT, .step = step};
    sl_step_reply reply;
    sl_status s = count_own_batches(t, &rec.batches);
    if (!s) s = sl__tr_exchange(t, &rec, &reply);
    if (!s) *n = reply.steps_per_epoch;
    return s;
}

/* ---- batches -------------------------------------------------------------------------- */

/* Batch `slot` from the epoch's pipeline, staged: *have, or at the pipeline's end not (and
 * end_seen). *wait: the time the pipeline took to give it. */
static sl_status next_batch(sl_trainer *t, sl__feed *f, int slot, bool *have, const sl_tensor **x, const sl_tensor **y,
                            double *wait) {
    double t0 = sl_now_s();
    sl_status s = sl_iter_next(f->it, &f->el[slot]);
    *wait = sl_now_s() - t0;
    *have = false;
    if (s == SL_END) {
        f->end_seen = true;
        return SL_OK;
    }
    if (s || (s = sl__tr_batch_parts(t, t->c.data, &f->el[slot], x, y)) ||
        (s = sl_model_stage(t->model, *x, *y, &f->hs[slot])))
        return s;
    *have = true;
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
void sl__tr_open_next_early(sl_trainer *t, sl__loop *L) {
    sl__feed *f = &L->f;
    if (!f->have || f->next_it) return;
    f->next_for = L->epoch + 1;
    if (f->spe <= 0) return;
    int64_t left = f->spe - f->b, lead = f->spe / 10 > 8 ? f->spe / 10 : 8;
    if (left > lead) return;
    if (t->c.steps > 0 ? L->step + left >= t->c.steps : L->epoch + 1 >= t->c.epochs) return; /* no next epoch */
    if (sl__tr_open_epoch(t, L->epoch + 1, &f->next_it)) {
        f->next_it = NULL;
        sl_err_clear();
    }
}

sl_status sl__tr_restage(sl_trainer *t, sl__loop *L) {
    sl__feed *f = &L->f;
    return f->have ? sl_model_stage(t->model, f->x, f->y, &f->hs[f->cur]) : SL_OK;
}

sl_status sl__tr_epoch_begin(sl_trainer *t, sl__loop *L) {
    sl__feed *f = &L->f;
    sl_status s;
    f->cut = f->end_seen = f->have = false;
    f->cur = 0;
    f->hs[0] = f->hs[1] = (sl_staged){-1, 0};
    f->x = f->y = NULL;
    if (f->next_it && f->next_for != L->epoch) {
        sl_iter_close(f->next_it);
        f->next_it = NULL;
    }
    f->b = 0;
    if (f->next_it && f->skip) { /* opened from the epoch's start: a resumed run starts later */
        sl_iter_close(f->next_it);
        f->next_it = NULL;
    }
    if (f->next_it) { /* opened while the last epoch trained */
        f->it = f->next_it;
        f->next_it = NULL;
    } else if (f->skip) { /* a resumed run continues at the same batch of the same epoch order */
        double t0 = sl_now_s();
        if ((s = sl__tr_open_epoch_at(t, L->epoch, f->skip, &f->it))) return s;
        f->b = sl_iter_position(f->it);
        int64_t replayed = sl_iter_replayed(f->it);
        FILE *con = sl__tr_console(t);
        if (con && replayed)
            fprintf(con, "resume: replayed %" PRId64 " batches of epoch %" PRId64 " to reach batch %" PRId64 " (%.1f s): "
                    "an op of pipeline '%s' cannot start part-way; `shuffle global` can\n", replayed, L->epoch + 1,
                    f->skip, sl_now_s() - t0, t->c.data);
        else if (con && sl_iter_refilled(f->it))
            fprintf(con, "resume: pipeline '%s' started at batch %" PRId64 " of epoch %" PRId64 " in %.1f ms, nothing "
                    "replayed (%" PRId64 " elements read again to rebuild its shuffle buffer)\n", t->c.data, f->skip,
                    L->epoch + 1, 1e3 * (sl_now_s() - t0), sl_iter_refilled(f->it));
        else if (con)
            fprintf(con, "resume: pipeline '%s' started at batch %" PRId64 " of epoch %" PRId64 " in %.1f ms, nothing "
                    "replayed\n", t->c.data, f->skip, L->epoch + 1, 1e3 * (sl_now_s() - t0));
    } else if ((s = sl__tr_open_epoch(t, L->epoch, &f->it))) {
        return s;
    }
    /* steps per epoch: counted in the first full epoch, else the cardinality when known */
    f->spe = t->steps_per_epoch > 0 ? t->steps_per_epoch : sl_dataset_cardinality(t->train_ds);
    f->skip = 0;
    double w;
    if ((s = next_batch(t, f, 0, &f->have, &f->x, &f->y, &w))) return s;
    L->a.wait += w;
    /* does every replica have a first batch? (afterwards each step's exchange tells whether
     * every replica has the next one) */
    sl_step rec = {.phase = SL_STEP_EPOCH, .step = L->step, .epoch = L->epoch, .holds_next = f->have};
    sl_step_reply reply;
    return sl__tr_exchange(t, &rec, &reply);
}

/* ---- the step ------------------------------------------------------------------------- */

/* precision fp16, after the exchange (every replica holds the same gradient, so all
 * choose alike): a gradient with a NaN or infinity skips the step (*skip) and halves the
 * loss scale; otherwise it is divided by the scale the step used (sluice/train.h). */
static sl_status unscale_grads(sl_trainer *t, int64_t step, bool *skip) {
    size_t n;
    float *g = sl_model_grads(t->model, &n);
    sl_backend *bk = sl__model_backend(t->model);
    double ss = 0;
    sl_status s = sl__be_sum_squares(bk, g, n, &ss);
    if (s) return s;
    *skip = !isfinite(ss);
    if (!*skip && (s = sl__be_scale(bk, n, 1.0f / t->ls.scale, g))) return s;
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

sl_status sl__tr_step(sl_trainer *t, sl__loop *L) {
    sl__feed *f = &L->f;
    sl_status s;
    int nx = f->cur ^ 1;
    bool have_next = false;
    const sl_tensor *nxx = NULL, *nxy = NULL;
    double t1 = sl_now_s(), tw = 0;
    if (!(t->c.steps > 0 && L->step + 1 >= t->c.steps) && (s = next_batch(t, f, nx, &have_next, &nxx, &nxy, &tw)))
        return s;
    sl_step_result r = {0};
    L->lr = sl_schedule_lr(&t->c.schedule, L->step);
    bool fp16 = t->c.precision == SL_PRECISION_FP16, skip = false;
    float scale = fp16 ? t->ls.scale : 1.0f;
    if ((s = sl_model_zero_grads(t->model)) || (s = sl_model_train_staged(t->model, &f->hs[f->cur], scale, &r)))
        return s;
    double t2 = sl_now_s();
    sl_step rec = {.phase = SL_STEP_TRAIN, .lr = L->lr, .loss_scale = scale, .step = L->step, .epoch = L->epoch,
                   .batches = f->b, .holds_next = have_next, .stop = sl__tr_own_stop(t)};
    rec.grads = sl_model_grads(t->model, &rec.n);
    sl_step_reply reply;
    if ((s = sl__tr_exchange(t, &rec, &reply))) return s;
    double t3 = sl_now_s();
    if (!reply.applied && fp16 && (s = unscale_grads(t, L->step, &skip))) return s;
    if (!reply.applied && !skip && (s = sl_optim_step(t->optim, L->lr))) return s;
    double t4 = sl_now_s();
    sl_element_clear(&f->el[f->cur]);
    f->cur = nx;
    f->have = have_next;
    f->x = nxx;
    f->y = nxy;
    if (reply.epoch_ends && have_next) {
        /* another replica is out: this batch stays unused, the epoch ends here */
        sl_element_clear(&f->el[f->cur]);
        f->have = false;
        f->cut = true;
    }
    if (reply.stop) {
        L->agreed = true;
        t->sum.stop_rank = reply.stop_rank;
        t->sum.stop_value = reply.stop_value;
    }
    if (!isfinite(r.loss)) return nonfinite_loss(t, L->step, r.loss);
    sl__report_account(&L->a, tw, (t2 - t1 - tw) + (t4 - t3), t3 - t2, &r); /* compute: staging + step + optimizer */
    sl__report_account(&L->win, tw, (t2 - t1 - tw) + (t4 - t3), t3 - t2, &r);
    f->b++;
    L->step++;
    L->a.batches = f->b;
    return SL_OK;
}
