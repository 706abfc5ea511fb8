/* Lockstep epochs (sluice/step.h): the rules by which the replicas of strategy ring and
 * strategy ps mode=sync end every epoch together, agree on a first batch and on the
 * length of an epoch, and stop at the same step. A strategy hands its gradient exchange
 * (with the has-data flag riding on it) and a small int32 allsum to sl__agree_exchange,
 * which answers every phase of the step record; each agreement is an allsum with a tag of
 * its own, so replicas out of phase fail instead of mixing.
 *
 * Workload: the gradient exchange every step; one small allsum per epoch start, and per
 * step only when a replica runs out or asks to stop. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/util.h"
#include "train/internal.h"

/* allsum tags: one per kind of agreement, so replicas out of phase fail instead of mixing */
enum { TAG_CARD = 1, TAG_COUNT = 2, TAG_FIRST = 3, TAG_ENDS = 4, TAG_STOP = 5 };

void sl__agree_init(sl__agree *ag, const sl__agree_ops *ops, void *ctx, int world, int rank, bool chief) {
    *ag = (sl__agree){.ops = *ops, .ctx = ctx, .world = world, .rank = rank, .chief = chief};
}

void sl__agree_free(sl__agree *ag) {
    free(ag->warned);
    ag->warned = NULL;
}

/* Every replica's values, exact: v[k * world + rank] = mine[k] for k < nk (v holds nk *
 * world values). Each value travels as two 32-bit words of the allsum's int32 vector, its
 * high half in the first nk * world words and its low half in the next, both in a slot only
 * its own replica fills (the others add 0): the sum is the value itself, whatever its size,
 * so a count past 2^31 is never clamped. The vector stays blocks of world ints, slot r
 * being replica r's (the allsum's layout, sl__agree_ops). */
static sl_status gather(sl__agree *ag, const int64_t *mine, int nk, uint32_t tag, int64_t *v) {
    int w = ag->world;
    size_t n = (size_t)nk * (size_t)w;
    int32_t *words = calloc(2 * n, sizeof *words);
    if (!words) return sl_err(SL_ENOMEM, "out of memory");
    for (int k = 0; k < nk; k++) {
        uint64_t u = (uint64_t)mine[k];
        size_t at = (size_t)k * (size_t)w + (size_t)ag->rank;
        words[at] = (int32_t)(uint32_t)(u >> 32); /* two's complement bits, no overflow */
        words[n + at] = (int32_t)(uint32_t)u;
    }
    sl_status s = ag->ops.sum(ag->ctx, words, 2 * n, tag);
    for (size_t i = 0; !s && i < n; i++) {
        uint64_t u = (uint64_t)(uint32_t)words[i] << 32 | (uint32_t)words[n + i];
        v[i] = sl_i64_from_bits(u);
    }
    free(words);
    return s;
}

/* Batches per epoch of each replica known without reading (cardinality), at the start:
 * the chief warns when they differ; a shard known to be empty fails every replica. */
static sl_status check_split(sl__agree *ag, const sl_step *rec, sl_step_reply *out) {
    int w = ag->world;
    int64_t *v = calloc((size_t)w, sizeof *v);
    if (!v) return sl_err(SL_ENOMEM, "out of memory");
    int64_t mine = rec->cardinality >= 0 ? rec->cardinality : -1;
    sl_status s = gather(ag, &mine, 1, TAG_CARD, v);
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
               rec->data, empty, full, v[full]);
        sl_err_hint("give every replica data: at least as many files as replicas with `shard file`, or `shard data`, "
                    "and a batch no larger than a replica's shard");
        free(v);
        return SL_EINVAL;
    }
    if (known && lo != hi && ag->chief) {
        char list[512] = "", unused[512] = "";
        size_t ll = 0, lu = 0;
        for (int r = 0; r < w; r++) {
            if (ll < sizeof list)
                ll += (size_t)snprintf(list + ll, sizeof list - ll, "%srank %d %" PRId64, r ? ", " : "", r, v[r]);
            if (v[r] > lo && lu < sizeof unused)
                lu += (size_t)snprintf(unused + lu, sizeof unused - lu, "%s%" PRId64 " batch%s of rank %d", lu ? ", " : "",
                                       v[r] - lo, v[r] - lo == 1 ? "" : "es", r);
        }
        snprintf(out->warning, sizeof out->warning,
                 "pipeline '%s': the replicas' shards give unequal batches per epoch (%s): every epoch ends at %" PRId64
                 " steps on all replicas (%s unused per epoch); give every replica as many batches to use all the data",
                 rec->data, list, lo, unused);
    }
    free(v);
    return SL_OK;
}

/* After an epoch that some replicas ended before their data did: the chief names the
 * counts (each replica: ran out or not, its batches this epoch: the steps when it ran out,
 * its cardinality or -1 when not), once, and again when they change. */
static sl_status warn_uneven(sl__agree *ag, const sl_step *rec, sl_step_reply *out) {
    int w = ag->world;
    int64_t b = rec->batches, card = rec->cardinality;
    bool ran_out = rec->data_ended;
    int64_t *v = calloc((size_t)w * 2, sizeof *v);
    if (!v) return sl_err(SL_ENOMEM, "out of memory");
    int64_t mine[2] = {ran_out, ran_out ? b : card > b ? card : -1};
    sl_status s = gather(ag, mine, 2, TAG_ENDS, v);
    if (s || !ag->chief) {
        free(v);
        return s;
    }
    bool first = !ag->warned;
    if (first && !(ag->warned = calloc((size_t)w * 2, sizeof *ag->warned))) {
        free(v);
        return sl_err(SL_ENOMEM, "out of memory");
    }
    if (first || memcmp(v, ag->warned, (size_t)w * 2 * sizeof *v) != 0) {
        char outs[256] = "", unk[256] = "", more[512] = "", unused[512] = "";
        size_t lo = 0, lk = 0, lm = 0, lu = 0;
        int nout = 0, nunk = 0;
        for (int r = 0; r < w; r++) {
            int64_t tot = v[w + r];
            if (v[r]) {
                if (lo < sizeof outs) lo += (size_t)snprintf(outs + lo, sizeof outs - lo, "%s%d", nout ? ", " : "", r);
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
        snprintf(out->warning, sizeof out->warning,
                 "epoch %" PRId64 ": rank%s %s ran out after %" PRId64 " steps; %s: all replicas end the epoch at %" PRId64
                 " (%s unused)%s",
                 rec->epoch + 1, nout == 1 ? "" : "s", outs, b, more, b, unused,
                 first ? "; give every replica as many batches to use all the data" : "");
        memcpy(ag->warned, v, (size_t)w * 2 * sizeof *v);
    }
    free(v);
    return SL_OK;
}

/* The batches one epoch takes: the fewest that any replica counted (the epochs end there). */
static sl_status count_batches(sl__agree *ag, const sl_step *rec, sl_step_reply *out) {
    int w = ag->world;
    int64_t *v = calloc((size_t)w, sizeof *v);
    if (!v) return sl_err(SL_ENOMEM, "out of memory");
    int64_t n = rec->batches;
    sl_status s = gather(ag, &n, 1, TAG_COUNT, v);
    if (!s)
        for (int r = 0; r < w; r++)
            if (v[r] < n) n = v[r];
    if (!s) out->steps_per_epoch = n;
    free(v);
    return s;
}

/* Every replica has a first batch in this epoch, or none has (the loop then reports the
 * empty epoch); a replica without one while others have some fails them all. */
static sl_status first_batch(sl__agree *ag, const sl_step *rec) {
    int w = ag->world;
    int64_t *v = calloc((size_t)w, sizeof *v);
    if (!v) return sl_err(SL_ENOMEM, "out of memory");
    int64_t mine = rec->holds_next;
    sl_status s = gather(ag, &mine, 1, TAG_FIRST, v);
    int empty = -1, full = -1;
    for (int r = 0; !s && r < w; r++) {
        if (!v[r] && empty < 0) empty = r;
        if (v[r] && full < 0) full = r;
    }
    free(v);
    if (s || empty < 0 || full < 0) return s;
    sl_err(SL_EINVAL, "pipeline '%s': rank %d has no batch in epoch %" PRId64 " while rank %d has: its shard is empty",
           rec->data, empty, rec->epoch + 1, full);
    sl_err_hint("give every replica data: at least as many files as replicas with `shard file`, or `shard data`, and "
                "a batch no larger than a replica's shard");
    return SL_EINVAL;
}

/* A step's exchange counted fewer next batches than replicas (*more < world). A replica
 * with a stop request says "no next batch" on the exchange, so this is where the replicas
 * learn of it: they gather each one's real has-data flag and stop value (TAG_STOP). When
 * any asked to stop, every replica stops after this step (out->stop, naming the lowest
 * rank that asked and its value) and *more becomes the real count, which says whether the
 * epoch ended here too. Otherwise *more stays the exchange's. Every replica calls it at the
 * same step: *more is the same on all. */
static sl_status agree_stop(sl__agree *ag, const sl_step *rec, int *more, sl_step_reply *out) {
    int w = ag->world;
    int64_t *v = calloc((size_t)w * 2, sizeof *v);
    if (!v) return sl_err(SL_ENOMEM, "out of memory");
    int64_t vals[2] = {rec->holds_next, rec->stop};
    sl_status s = gather(ag, vals, 2, TAG_STOP, v);
    if (!s) {
        int have = 0, who = -1;
        for (int r = 0; r < w; r++) {
            have += v[r] != 0;
            if (v[w + r] && who < 0) who = r;
        }
        if (who >= 0) {
            *more = have;
            out->stop = true;
            out->stop_rank = who;
            out->stop_value = (int)v[w + who];
        }
    }
    free(v);
    return s;
}

/* The step's gradient exchange with the has-data flag on it; a stop request rides the flag
 * as "no next batch". */
static sl_status train_step(sl__agree *ag, const sl_step *rec, sl_step_reply *out) {
    int more = rec->stop ? 0 : rec->holds_next;
    sl_status s = ag->ops.exchange(ag->ctx, rec, out, &more);
    if (!s && more < ag->world) s = agree_stop(ag, rec, &more, out);
    if (s) return s;
    out->holding = more;
    out->epoch_ends = more < ag->world;
    ag->uneven = more > 0 && more < ag->world;
    return SL_OK;
}

sl_status sl__agree_exchange(sl__agree *ag, const sl_step *rec, sl_step_reply *out) {
    out->together = true;
    switch (rec->phase) {
    case SL_STEP_TRAIN:
        return train_step(ag, rec, out);
    case SL_STEP_BEGIN:
        return check_split(ag, rec, out);
    case SL_STEP_COUNT:
        return count_batches(ag, rec, out);
    case SL_STEP_EPOCH:
        ag->uneven = false;
        return first_batch(ag, rec);
    case SL_STEP_EPOCH_END:
        if (!ag->uneven) return SL_OK;
        ag->uneven = false;
        return warn_uneven(ag, rec, out);
    }
    return sl_err(SL_EINVAL, "lockstep epochs: step record of unknown phase %d", (int)rec->phase);
}
