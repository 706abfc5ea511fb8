/* sample_from_datasets: tf.data's weighted mix of several inputs. Each output element is
 * taken from input i with probability w[i] / sum(w) over the inputs still in play.
 *
 * The draw for output element k is a hash of the draw seed (the op's seed mixed with the
 * iterator's stream seed), k and the attempt (how many inputs were found empty while
 * drawing for k): nothing depends on thread timing or on what came before k except which
 * inputs have run out. That is what makes the op seek: the draws before a start position
 * are replayed without reading any data (a hash and a scan of the weights each, tens of
 * millions a second), counting what each input gave and, from the inputs' cardinalities,
 * when each one was found empty; then each input is opened at its count. An input whose
 * length is unknown could run out anywhere before the start, so a dataset with one (of
 * positive weight) does not seek: it gets the vtable without `seek`, chosen at creation.
 *
 * Inputs of weight 0 are never drawn, so never opened. An input's error is returned in
 * place of the element and consumes that input element; the position is not advanced, so
 * the next call draws the same input again. Workload: one draw per element; the op holds
 * no element. */
#include <math.h>

#include "pipeline/internal.h"

typedef struct {
    sl_dataset base;
    double w[SL_DS_MAX_INPUTS]; /* divided by the largest, so their sum cannot overflow */
    uint64_t seed;
    bool stop;                  /* stop_on_empty_dataset */
} sample_ds;

/* The inputs still drawn from, and their weights' sum. */
typedef struct {
    bool alive[SL_DS_MAX_INPUTS];
    double total;
} pool;

typedef struct {
    sl_iter base;
    sl_iter *in[SL_DS_MAX_INPUTS]; /* NULL: weight 0, dropped, or never opened */
    pool p;
    uint64_t draws; /* the draw seed */
    int64_t k;      /* position of the next element */
    int attempt;    /* inputs found empty while drawing for position k */
    bool done;
} sample_it;

static void pool_init(const sample_ds *d, pool *p) {
    for (int i = 0; i < d->base.ninputs; i++) p->alive[i] = d->w[i] > 0;
    p->total = 0;
    for (int i = 0; i < d->base.ninputs; i++)
        if (p->alive[i]) p->total += d->w[i];
}

/* Input i ran out: the others' weights are renormalised by summing them afresh (the same
 * sum, bit for bit, whether the draws are made live or replayed). */
static void pool_drop(const sample_ds *d, pool *p, int i) {
    p->alive[i] = false;
    p->total = 0;
    for (int j = 0; j < d->base.ninputs; j++)
        if (p->alive[j]) p->total += d->w[j];
}

/* The input drawn for position k on attempt a, or -1 when none is left. */
static int draw(const sample_ds *d, const pool *p, uint64_t draws, int64_t k, int a) {
    if (p->total <= 0) return -1;
    uint64_t h = sl__mix(sl__mix(draws, (uint64_t)k), (uint64_t)a);
    double x = (double)(h >> 11) * 0x1.0p-53 * p->total, c = 0;
    int last = -1;
    for (int i = 0; i < d->base.ninputs; i++) {
        if (!p->alive[i]) continue;
        c += d->w[i];
        if (x < c) return i;
        last = i;
    }
    return last; /* x rounded up to the sum */
}

static sl_status sample_next(sl_iter *it, sl_element *out) {
    sample_it *s = (sample_it *)it;
    const sample_ds *d = (const sample_ds *)it->ds;
    for (;;) {
        int i = s->done ? -1 : draw(d, &s->p, s->draws, s->k, s->attempt);
        if (i < 0) {
            s->done = true;
            return SL_END;
        }
        sl_status st = sl__iter_next(s->in[i], out);
        if (st == SL_OK) {
            s->k++;
            s->attempt = 0;
            return SL_OK;
        }
        if (st != SL_END) return st; /* the input's error, unchanged */
        if (d->stop) {
            s->done = true;
            return SL_END;
        }
        pool_drop(d, &s->p, i);
        sl__iter_close(s->in[i]);
        s->in[i] = NULL;
        s->attempt++;
    }
}

/* The draws for positions 0..start-1, without data: counts[i] gets what input i gave, the
 * pool and the attempt what a live iterator would have at `start`. False when the stream
 * ends before `start`. Only for inputs of known cardinality or endless ones. */
static bool replay(const sample_ds *d, sample_it *s, int64_t start, int64_t *counts) {
    int64_t card[SL_DS_MAX_INPUTS];
    for (int i = 0; i < d->base.ninputs; i++) card[i] = sl_dataset_cardinality(d->base.inputs[i]);
    for (int64_t k = 0; k < start; k++) {
        for (;;) {
            int i = draw(d, &s->p, s->draws, k, s->attempt);
            if (i < 0) return false;
            if (card[i] == SL_INFINITE || counts[i] < card[i]) {
                counts[i]++;
                s->attempt = 0;
                break;
            }
            if (d->stop) return false;
            pool_drop(d, &s->p, i);
            s->attempt++;
        }
    }
    return true;
}

static void sample_close(sl_iter *it) {
    sample_it *s = (sample_it *)it;
    for (int i = 0; i < it->ds->ninputs; i++) sl__iter_close(s->in[i]);
}

static const sl_iter_vt sample_it_vt = {.next = sample_next, .close = sample_close};

static sl_status sample_make(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out) {
    const sample_ds *d = (const sample_ds *)ds;
    sample_it *s = sl__iter_new(sizeof *s, &sample_it_vt, ds, ctx, seed);
    if (!s) return SL_ENOMEM;
    s->draws = sl__mix(d->seed, seed);
    s->k = s->base.start;
    pool_init(d, &s->p);
    int64_t counts[SL_DS_MAX_INPUTS] = {0};
    if (s->k && !replay(d, s, s->k, counts)) s->done = true; /* at its end: nothing to open */
    for (int i = 0; i < ds->ninputs && !s->done; i++) {
        if (!s->p.alive[i]) continue;
        sl_status st = sl__iter_input_at(ds, i, ctx, seed, (uint64_t)i, counts[i], &s->in[i]);
        if (st) {
            sl__iter_close(&s->base);
            return st;
        }
    }
    *out = &s->base;
    return SL_OK;
}

static int64_t sample_card(const sl_dataset *ds) {
    const sample_ds *d = (const sample_ds *)ds;
    int64_t sum = 0, one = 0;
    int npos = 0;
    bool endless = false, finite = false, unknown = false, overflow = false;
    for (int i = 0; i < ds->ninputs; i++) {
        if (d->w[i] <= 0) continue; /* never drawn */
        int64_t c = sl_dataset_cardinality(ds->inputs[i]);
        npos++;
        one = c;
        if (c == SL_INFINITE) endless = true;
        else if (c < 0) unknown = true;
        else {
            finite = true;
            if (__builtin_add_overflow(sum, c, &sum)) overflow = true;
        }
    }
    if (npos == 1) return one; /* every draw takes it */
    if (d->stop) /* ends at the first input found empty: when that is depends on the draws */
        return finite || unknown ? SL_UNKNOWN_CARD : SL_INFINITE;
    /* every element of every input of positive weight comes out, until an endless one */
    if (endless) return SL_INFINITE;
    if (unknown || overflow) return SL_UNKNOWN_CARD;
    return sum;
}

static const sl_ds_vt sample_vt = {.name = "sample_from_datasets", .seek = true, .make_iter = sample_make,
                                   .cardinality = sample_card};
/* an input of positive weight whose length is unknown: the draws cannot be replayed */
static const sl_ds_vt sample_noseek_vt = {.name = "sample_from_datasets", .make_iter = sample_make,
                                          .cardinality = sample_card};

sl_status sl_ds_sample_from_datasets(sl_dataset *const *ins, int n, const double *weights, uint64_t seed,
                                     bool stop_on_empty_dataset, sl_dataset **out) {
    *out = NULL;
    if (!ins || n < 1 || n > SL_DS_MAX_INPUTS)
        return sl_err(SL_EINVAL, "sample_from_datasets: %d inputs (must be 1..%d)", n, SL_DS_MAX_INPUTS);
    double w[SL_DS_MAX_INPUTS], most = 0;
    for (int i = 0; i < n; i++) {
        w[i] = weights ? weights[i] : 1.0;
        if (!isfinite(w[i]) || w[i] < 0) {
            sl_err(SL_EINVAL, "sample_from_datasets: weight %d is %g: weights must be finite and >= 0", i, w[i]);
            sl_err_hint("weights are relative: [0.7, 0.3] and [7, 3] are the same mix");
            return SL_EINVAL;
        }
        if (w[i] > most) most = w[i];
    }
    if (most == 0) {
        sl_err(SL_EINVAL, "sample_from_datasets: all %d weights are 0: nothing could be drawn", n);
        sl_err_hint("give at least one input a positive weight");
        return SL_EINVAL;
    }
    bool seek = true;
    for (int i = 0; i < n; i++)
        if (ins[i] && w[i] > 0 && sl_dataset_cardinality(ins[i]) == SL_UNKNOWN_CARD) seek = false;
    sample_ds *d = sl__ds_new(sizeof *d, seek ? &sample_vt : &sample_noseek_vt, ins, n);
    if (!d) return sl_errcode() ? sl_errcode() : SL_ENOMEM;
    for (int i = 0; i < n; i++) d->w[i] = w[i] / most;
    d->seed = seed;
    d->stop = stop_on_empty_dataset;
    sl__ds_param(&d->base, seed);
    sl__ds_param(&d->base, stop_on_empty_dataset);
    *out = &d->base;
    return SL_OK;
}
