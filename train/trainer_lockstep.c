/* The training loop's lockstep epochs (sluice/train.h): replicas that end every epoch
 * together, agree on a first batch, and stop at the same step, through the hooks' small
 * allsum (each agreement with a tag of its own, so replicas out of phase fail instead of
 * mixing). Called by the loop in train/trainer.c.
 *
 * Workload: one small allsum per epoch start, and per step only when a replica runs out or
 * asks to stop. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/util.h"
#include "train/trainer_priv.h"

/* allsum tags: one per kind of agreement, so replicas out of phase fail instead of mixing */
enum { TAG_CARD = 1, TAG_COUNT = 2, TAG_FIRST = 3, TAG_ENDS = 4, TAG_STOP = 5 };

/* Every replica's values, exact: v[k * world + rank] = mine[k] for k < nk (v holds nk *
 * world values). Each value travels as two 32-bit words of the allsum's int32 vector, its
 * high half in the first nk * world words and its low half in the next, both in a slot only
 * its own replica fills (the others add 0): the sum is the value itself, whatever its size,
 * so a count past 2^31 is never clamped. The vector stays blocks of world ints, slot r
 * being replica r's (sluice/train.h allsum). */
static sl_status gather(sl_trainer *t, const int64_t *mine, int nk, uint32_t tag, int64_t *v) {
    int w = t->hooks.world_size;
    size_t n = (size_t)nk * (size_t)w;
    int32_t *words = calloc(2 * n, sizeof *words);
    if (!words) return sl_err(SL_ENOMEM, "out of memory");
    for (int k = 0; k < nk; k++) {
        uint64_t u = (uint64_t)mine[k];
        size_t at = (size_t)k * (size_t)w + (size_t)t->hooks.rank;
        words[at] = (int32_t)(uint32_t)(u >> 32); /* two's complement bits, no overflow */
        words[n + at] = (int32_t)(uint32_t)u;
    }
    sl_status s = t->hooks.allsum(t->hooks.ctx, words, 2 * n, tag);
    for (size_t i = 0; !s && i < n; i++) {
        uint64_t u = (uint64_t)(uint32_t)words[i] << 32 | (uint32_t)words[n + i];
        v[i] = sl_i64_from_bits(u);
    }
    free(words);
    return s;
}

/* Batches per epoch of each replica known without reading (cardinality), at the start:
 * the chief warns when they differ. Every replica takes part. */
sl_status sl__tr_check_split(sl_trainer *t) {
    int w = t->hooks.world_size;
    int64_t *v = calloc((size_t)w, sizeof *v);
    if (!v) return sl_err(SL_ENOMEM, "out of memory");
    int64_t card = sl_dataset_cardinality(t->train_ds);
    int64_t mine = card >= 0 ? card : -1;
    sl_status s = gather(t, &mine, 1, TAG_CARD, v);
    if (s) {
        free(v);
        return s;
    }
    int64_t lo = INT64_MAX, hi = 0;
    bool known = true;
    for (int r = 0; r < w; r++) {
        if (v[r] < 0) known = false;
        if (v[r] < lo) lo = v[r];
        if (v[r] > hi) hi = v[r];
    }
    if (known && lo == 0 && hi > 0) {
        int empty = 0, full = 0;
        for (int r = w - 1; r >= 0; r--) {
            if (v[r] == 0) empty = r;
            else full = r;
        }
        sl_err(SL_EINVAL, "pipeline '%s': rank %d has no batch in an epoch while rank %d has %" PRId64 ": its shard is empty",
               t->c.data, empty, full, v[full]);
        sl_err_hint("give every replica data: at least as many files as replicas with `shard file`, or `shard data`, "
                    "and a batch no larger than a replica's shard");
        free(v);
        return SL_EINVAL;
    }
    if (known && lo != hi && chief(t)) {
        char list[512] = "", unused[512] = "";
        size_t ll = 0, lu = 0;
        for (int r = 0; r < w; r++) {
            if (ll < sizeof list)
                ll += (size_t)snprintf(list + ll, sizeof list - ll, "%srank %d %" PRId64, r ? ", " : "", r, v[r]);
            if (v[r] > lo && lu < sizeof unused)
                lu += (size_t)snprintf(unused + lu, sizeof unused - lu, "%s%" PRId64 " batch%s of rank %d", lu ? ", " : "",
                                       v[r] - lo, v[r] - lo == 1 ? "" : "es", r);
        }
        warnf(t,
              "pipeline '%s': the replicas' shards give unequal batches per epoch (%s): every epoch ends at %" PRId64
              " steps on all replicas (%s unused per epoch); give every replica as many batches to use all the data",
              t->c.data, list, lo, unused);
    }
    free(v);
    return SL_OK;
}

/* After an epoch that some replicas ended before their data did: the chief names the
 * counts (each replica: ran out or not, its batches this epoch: the steps when it ran out,
 * its cardinality or -1 when not), once, and again when they change. */
sl_status sl__tr_warn_uneven(sl_trainer *t, int64_t epoch, int64_t b, bool ran_out) {
    int w = t->hooks.world_size;
    int64_t *v = calloc((size_t)w * 2, sizeof *v);
    if (!v) return sl_err(SL_ENOMEM, "out of memory");
    int64_t card = sl_dataset_cardinality(t->train_ds);
    int64_t mine[2] = {ran_out, ran_out ? b : card > b ? card : -1};
    sl_status s = gather(t, mine, 2, TAG_ENDS, v);
    if (s || !chief(t)) {
        free(v);
        return s;
    }
    bool first = !t->warned;
    if (first && !(t->warned = calloc((size_t)w * 2, sizeof *t->warned))) {
        free(v);
        return sl_err(SL_ENOMEM, "out of memory");
    }
    if (first || memcmp(v, t->warned, (size_t)w * 2 * sizeof *v) != 0) {
        char out[256] = "", unk[256] = "", more[512] = "", unused[512] = "";
        size_t lo = 0, lk = 0, lm = 0, lu = 0;
        int nout = 0, nunk = 0;
        for (int r = 0; r < w; r++) {
            int64_t tot = v[w + r];
            if (v[r]) {
                if (lo < sizeof out) lo += (size_t)snprintf(out + lo, sizeof out - lo, "%s%d", nout ? ", " : "", r);
                nout++;
            } else if (tot < 0) {
                if (lk < sizeof unk) lk += (size_t)snprintf(unk + lk, sizeof unk - lk, "%s%d", nunk ? ", " : "", r);
                nunk++;
            } else {
                if (lm < sizeof more)
                    lm += (size_t)snprintf(more + lm, sizeof more - lm, "%srank %d had %" PRId64, lm ? ", " : "", r, tot);
                if (lu < sizeof unused)
                    lu += (size_t)snprintf(unused + lu, sizeof unused - lu, "%s%" PRId64 " batch%s of rank %d",
                                           lu ? ", " : "", tot - b, tot - b == 1 ? "" : "es", r);
            }
        }
        if (nunk && lm < sizeof more)
            snprintf(more + lm, sizeof more - lm, "%srank%s %s had more", lm ? ", " : "", nunk == 1 ? "" : "s", unk);
        if (nunk && lu < sizeof unused) {
            if (nunk == 1) snprintf(unused + lu, sizeof unused - lu, "%sthe rest of rank %s's batches", lu ? ", " : "", unk);
            else snprintf(unused + lu, sizeof unused - lu, "%sthe rest of the batches of ranks %s", lu ? ", " : "", unk);
        }
        warnf(t, "epoch %" PRId64 ": rank%s %s ran out after %" PRId64 " steps; %s: all replicas end the epoch at %" PRId64
                 " (%s unused)%s",
              epoch + 1, nout == 1 ? "" : "s", out, b, more, b, unused,
              first ? "; give every replica as many batches to use all the data" : "");
        memcpy(t->warned, v, (size_t)w * 2 * sizeof *v);
    }
    free(v);
    return SL_OK;
}

/* Batches in one epoch: needed up front only for a cosine schedule measured in epochs. In
 * lockstep, the fewest of any replica (the epochs end there). */
static sl_status count_own_batches(sl_trainer *t, int64_t *n);
sl_status sl__tr_count_batches(sl_trainer *t, int64_t *n) {
    sl_status s = count_own_batches(t, n);
    if (s || !lockstep(t)) return s;
    int w = t->hooks.world_size;
    int64_t *v = calloc((size_t)w, sizeof *v);
    if (!v) return sl_err(SL_ENOMEM, "out of memory");
    if (!(s = gather(t, n, 1, TAG_COUNT, v)))
        for (int r = 0; r < w; r++)
            if (v[r] < *n) *n = v[r];
    free(v);
    return s;
}

static sl_status count_own_batches(sl_trainer *t, int64_t *n) {
    int64_t card = sl_dataset_cardinality(t->train_ds);
    if (card > 0) {
        *n = card;
        return SL_OK;
    }
    sl_iter *it;
    sl_status s = open_epoch(t, 0, &it);
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

/* Lockstep: every replica has a first batch in this epoch, or none has (the loop then
 * reports the empty epoch); a replica without one while others have some fails them all. */
sl_status sl__tr_first_batch(sl_trainer *t, int64_t epoch, bool have) {
    int w = t->hooks.world_size;
    int64_t *v = calloc((size_t)w, sizeof *v);
    if (!v) return sl_err(SL_ENOMEM, "out of memory");
    int64_t mine = have;
    sl_status s = gather(t, &mine, 1, TAG_FIRST, v);
    int empty = -1, full = -1;
    for (int r = 0; !s && r < w; r++) {
        if (!v[r] && empty < 0) empty = r;
        if (v[r] && full < 0) full = r;
    }
    free(v);
    if (s || empty < 0 || full < 0) return s;
    sl_err(SL_EINVAL, "pipeline '%s': rank %d has no batch in epoch %" PRId64 " while rank %d has: its shard is empty",
           t->c.data, empty, epoch + 1, full);
    sl_err_hint("give every replica data: at least as many files as replicas with `shard file`, or `shard data`, and "
                "a batch no larger than a replica's shard");
    return SL_EINVAL;
}

/* Lockstep: a step's exchange said that fewer than all replicas hold a next batch (*more <
 * world). A replica with a stop request says "no next batch" on the exchange, so this is
 * where the replicas learn of it: they gather each one's real has-next flag and stop value
 * (TAG_STOP). When any asked to stop, every replica stops after this step (*stop true;
 * the summary names the lowest rank that asked and its value) and *more becomes the real
 * count, which says whether the epoch ended here too. Otherwise *more stays the
 * exchange's. Every replica calls it at the same step: *more is the same on all. */
sl_status sl__tr_agree_stop(sl_trainer *t, bool have_next, int mine, int *more, bool *stop) {
    int w = t->hooks.world_size;
    int64_t *v = calloc((size_t)w * 2, sizeof *v);
    if (!v) return sl_err(SL_ENOMEM, "out of memory");
    int64_t vals[2] = {have_next, mine};
    sl_status s = gather(t, vals, 2, TAG_STOP, v);
    if (!s) {
        int have = 0, who = -1;
        for (int r = 0; r < w; r++) {
            have += v[r] != 0;
            if (v[w + r] && who < 0) who = r;
        }
        if (who >= 0) {
            *more = have;
            *stop = true;
            t->sum.stop_rank = who;
            t->sum.stop_value = (int)v[w + who];
        }
    }
    free(v);
    return s;
}

