/* The dataset graph: tf.data in C.
 *
 * A dataset (sl_dataset) is an immutable, refcounted description of a stream of elements
 * (sl_element: a small tuple of named tensors). An iterator (sl_iter) created from it owns
 * all mutable state — buffers, threads, random state, position — so one dataset can be
 * iterated many times (epochs, replicas) and concurrently.
 *
 * Construction functions take their input dataset(s) as BORROWED: they take their own
 * reference, so the caller still owns (and must unref) what it passed. Each returns SL_OK
 * and a new dataset with one reference in *out, or an error with *out = NULL.
 *
 * Protocol:   sl_iter_create -> sl_iter_next ... -> SL_END -> sl_iter_close
 * sl_iter_next returns SL_OK with an element, SL_END at the end of the stream (and on every
 * call after it), or an error whose message names the op ("op 'map' (decode_jpeg): ...")
 * and the input's location (file and byte offset when the element came from a file). An
 * error consumes the input that caused it: calling sl_iter_next again goes on with the
 * elements after it where the op can (a corrupt record does not stop the other files; a
 * function that fails on one element does not stop the next), and returns SL_END where it
 * cannot. ignore_errors relies on this to skip and count bad elements.
 * sl_iter_close cancels in-flight work, joins threads and frees everything; it is always
 * safe, also halfway through a parallel pipeline.
 *
 * Parallel ops (map, interleave, map_batch) run up to `parallelism` calls at a time. With
 * deterministic = true (the default) results come in input order and are bit-identical
 * whatever the parallelism and thread timing — random functions included, since each
 * element's randomness is seeded from the pipeline seed and the element's position. With
 * deterministic = false the first finished element is returned first.
 *
 * SL_AUTO for a parallelism or buffer size means "chosen by Sluice" (autotuned while the
 * pipeline runs; the choice is visible in the stats). */
#ifndef SLUICE_PIPELINE_H
#define SLUICE_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "sluice/status.h"
#include "sluice/tensor.h"
#include "sluice/tfrecord.h"
#include "sluice/tfrecord_index.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SL_AUTO (-1)
#define SL_INFINITE (-2)       /* cardinality of an endless dataset; repeat count "forever" */
#define SL_UNKNOWN_CARD (-3)   /* cardinality that cannot be known without reading */

typedef struct sl_dataset sl_dataset;
typedef struct sl_iter sl_iter;
typedef struct sl_fn sl_fn;

sl_dataset *sl_dataset_ref(sl_dataset *ds);  /* returns ds; NULL passes through */
void sl_dataset_unref(sl_dataset *ds);       /* NULL is a no-op */

/* The op's name ("map", "batch", ...). */
const char *sl_dataset_op(const sl_dataset *ds);

/* Number of elements, SL_INFINITE, or SL_UNKNOWN_CARD. Exact whenever it is a number: an op
 * whose exact count would pass 2^63-1 (range, repeat) is refused when it is created, with
 * SL_ERANGE naming the numbers, rather than reporting a wrapped or saturated count. */
int64_t sl_dataset_cardinality(const sl_dataset *ds);

/* Set a label shown in errors and stats instead of the op name (e.g. "map#2" or the
 * config's "train/map"). Only before the first iterator is created. */
void sl_dataset_set_label(sl_dataset *ds, const char *label);

/* ---- sources ------------------------------------------------------------------------- */

/* Integers start, start+step, ... < stop (> stop for negative step): {"value": int64 scalar},
 * exactly the elements of Python's range(start, stop, step) for any int64 values (INT64_MIN,
 * INT64_MAX and step -2^63 included; nothing is computed past the int64 limits), and
 * Python's len() as the cardinality. SL_EINVAL for step 0; SL_ERANGE when there would be
 * more than 2^63-1 elements ("range: start S stop E step K makes N elements, past 2^63-1"). */
sl_status sl_ds_range(int64_t start, int64_t stop, int64_t step, sl_dataset **out);

/* The records of TFRecord files, file after file: {"record": bytes scalar} — a zero-copy
 * view of the record. `paths` may hold glob patterns (expanded, sorted, at creation: a
 * pattern that matches nothing is SL_ENOTFOUND). opts NULL: defaults. */
sl_status sl_ds_tfrecord(const char *const *paths, int n, const sl_tfr_read_opts *opts,
                         sl_dataset **out);

/* File names matching glob patterns: {"filename": bytes scalar}, sorted; with shuffle, in
 * a seeded random order (a new order each epoch when reshuffled by repeat). SL_ENOTFOUND
 * when nothing matches. */
sl_status sl_ds_list_files(const char *const *patterns, int n, bool shuffle, uint64_t seed,
                           sl_dataset **out);

/* The records of TFRecord files (uncompressed) in one seeded random order over all of them,
 * each replica taking its own positions of it (tf.data's shuffle over the whole data set,
 * without a buffer): {"record": bytes scalar}, zero-copy, with its origin. Each epoch's
 * order is a permutation of every record (sl_perm, sluice/util.h), seeded by `seed` and,
 * with reshuffle_each_epoch, the iterator's stream seed (the epoch's: the trainer seeds each
 * epoch, repeat each pass). Replica shard_index of num_shards takes positions shard_index,
 * shard_index + num_shards, ...: shards differ by at most one record, and a global batch
 * of num_shards x B is always the same positions of the order whatever num_shards is. An
 * iterator can start at any element in constant time (sl_iter_create_at).
 * Each file's record index (sluice/tfrecord_index.h) is read or built at creation, under
 * index's options. Paths may be glob patterns (all matches sorted, duplicates dropped).
 * Errors: those of sl_tfr_file_open for a file (SL_EUNSUPPORTED for a compressed one),
 * SL_ENOTFOUND for a pattern that matches nothing, SL_EINVAL for a shard outside
 * 0..num_shards-1; while iterating, a corrupt record is that element's error (skipped and
 * counted with ropts->skip_corrupt). */
typedef struct sl_global_opts {
    int64_t num_shards;         /* replicas reading the data set, >= 1 (default 1) */
    int64_t shard_index;        /* this replica, 0..num_shards-1 */
    uint64_t seed;              /* the order's seed (default 0) */
    bool reshuffle_each_epoch;  /* a new order per iterator stream seed (default true) */
    sl_tfr_index_opts index;    /* where record indexes are cached */
} sl_global_opts;

sl_global_opts sl_global_opts_default(void);

sl_status sl_ds_tfrecord_global(const char *const *paths, int n, const sl_tfr_read_opts *ropts,
                                const sl_global_opts *gopts, sl_dataset **out);

/* ---- transformations ----------------------------------------------------------------- */

/* Given one input element, make the dataset to interleave (e.g. a filename -> its
 * records). *out gets a new reference. */
typedef sl_status (*sl_ds_factory)(void *ctx, const sl_element *elem, sl_dataset **out);

typedef struct sl_interleave_opts {
    int cycle_length;    /* inputs open at once; SL_AUTO: the CPU count */
    int block_length;    /* consecutive elements from each input; default 1 */
    int parallelism;     /* inputs read ahead by worker threads; 0 = read in the caller's thread; SL_AUTO */
    bool deterministic;  /* default true */
} sl_interleave_opts;

sl_interleave_opts sl_interleave_opts_default(void);

/* tf.data's interleave: open cycle_length inputs, take block_length elements from each in
 * turn; when an input ends, the next input element takes its place in the cycle.
 * cycle 2, block 1 over [a1 a2 a3] and [b1 b2] gives a1 b1 a2 b2 a3. */
sl_status sl_ds_interleave(sl_dataset *in, sl_ds_factory factory, void *ctx,
                           const sl_interleave_opts *opts, sl_dataset **out);

/* interleave with the stock factory: each input element's "filename" -> sl_ds_tfrecord. */
sl_status sl_ds_interleave_tfrecord(sl_dataset *filenames, const sl_tfr_read_opts *ropts,
                                    const sl_interleave_opts *opts, sl_dataset **out);

/* Apply fn to every element. fn is borrowed (a reference is taken). */
sl_status sl_ds_map(sl_dataset *in, sl_fn *fn, int parallelism, bool deterministic,
                    sl_dataset **out);

typedef struct sl_batch_opts {
    int64_t size;          /* elements per batch, >= 1 */
    bool drop_remainder;   /* drop a last, smaller batch */
    bool padded;           /* pad variable-size components to the largest in the batch */
    double pad_value;      /* value padding is filled with (bytes: empty string) */
    int parallelism;       /* map_batch only: SL_AUTO or >= 1 */
    bool deterministic;    /* map_batch only */
} sl_batch_opts;

sl_batch_opts sl_batch_opts_default(int64_t size);

/* Stack `size` consecutive elements along a new leading dimension. Every element must have
 * the same components with the same dtypes; shapes must match unless padded (then each
 * component is padded to the largest shape in the batch). Bytes components are copied into
 * one buffer per batch. A mismatch is SL_EINVAL naming the component and both shapes. The
 * cardinality is ceil(n / size) (floor with drop_remainder) for an input of n, exact up to
 * n = 2^63-1. */
sl_status sl_ds_batch(sl_dataset *in, const sl_batch_opts *opts, sl_dataset **out);

/* map fused with batch: each mapped element is written straight into its slot of the
 * batch buffer. sl_ds_batch over sl_ds_map produces this automatically; calling it
 * directly is the same thing. */
sl_status sl_ds_map_batch(sl_dataset *in, sl_fn *fn, const sl_batch_opts *opts,
                          sl_dataset **out);

/* Fill a buffer of `buffer` elements; each output is a uniformly chosen buffered element,
 * replaced by the next input. The order is a permutation seeded by `seed` (and by the epoch
 * when reshuffle_each_epoch and the dataset is repeated). */
sl_status sl_ds_shuffle(sl_dataset *in, int64_t buffer, uint64_t seed, bool reshuffle_each_epoch,
                        sl_dataset **out);

/* Produce elements ahead on a background thread into a buffer of `buffer` (SL_AUTO). */
sl_status sl_ds_prefetch(sl_dataset *in, int64_t buffer, sl_dataset **out);

/* The input `count` times (SL_INFINITE: forever). count 0 gives nothing. SL_ERANGE when the
 * input's known cardinality times count is past 2^63-1 ("repeat: 3 x 4611686018427387904
 * elements is past 2^63-1"); SL_EINVAL for a count below -1 other than SL_INFINITE. */
sl_status sl_ds_repeat(sl_dataset *in, int64_t count, sl_dataset **out);

/* Keep elements whose position i satisfies i % num == index: placed on a list of files it
 * shards by file (each replica reads a disjoint set of files), on records by data. SL_EINVAL
 * for num < 1 ("shard: num N must be >= 1") or index outside 0..num-1. */
sl_status sl_ds_shard(sl_dataset *in, int64_t num, int64_t index, sl_dataset **out);

sl_status sl_ds_take(sl_dataset *in, int64_t count, sl_dataset **out);  /* count < 0: all */
/* count < 0: all; over an endless input (SL_INFINITE) that is SL_EINVAL, since it would
 * never return. */
sl_status sl_ds_skip(sl_dataset *in, int64_t count, sl_dataset **out);

/* Keep elements for which pred returns true (> 0); pred's negative status is an error. */
typedef int (*sl_pred_fn)(void *ctx, const sl_element *elem);
sl_status sl_ds_filter(sl_dataset *in, sl_pred_fn pred, void *ctx, sl_dataset **out);
/* The same, with ctx handed over: free_ctx(ctx, NULL) runs when the dataset is freed, or
 * before returning when creation fails (free_ctx may be NULL). */
sl_status sl_ds_filter_owned(sl_dataset *in, sl_pred_fn pred, void *ctx, sl_free_fn free_ctx,
                             sl_dataset **out);

/* The first pass reads the input and keeps every element (in memory, or in a file at
 * `path`); later passes (epochs) replay them without touching the input. An iterator
 * stopped before the end of its pass discards the partial cache. A cache file that cannot
 * be written (a full disk, a file-size limit) is a warning naming it, the byte and the
 * reason: that pass goes on from its input, nothing is left at `path` (only a complete
 * file there is taken for a cache), and the next pass tries again. In memory, a recording
 * that cannot fit the pipeline's memory (planned as sl_iter_opts.ram_budget says, from the
 * input's size and the first element, then each time it doubles) is dropped the same way,
 * with a warning naming both sizes. */
sl_status sl_ds_cache(sl_dataset *in, const char *path, sl_dataset **out);

/* Skip elements whose production failed (corrupt record, undecodable image...), counting
 * them; see sl_iter_errors_ignored. */
sl_status sl_ds_ignore_errors(sl_dataset *in, sl_dataset **out);

/* Elements of several datasets side by side; ends with the shortest. Component names must
 * not collide (SL_EINVAL). */
sl_status sl_ds_zip(sl_dataset *const *ins, int n, sl_dataset **out);

/* tf.data's sample_from_datasets: each element is taken from input i with probability
 * weights[i] / sum(weights) (weights NULL: all equal). The draw for element k is a hash of
 * `seed`, the pipeline's stream seed and k: the same stream run after run, whatever the
 * thread timing, and another one each epoch under repeat. When the drawn input is empty:
 * with stop_on_empty_dataset the stream ends there; otherwise that input is dropped, the
 * others' weights renormalised, and the stream ends when every input of positive weight
 * is empty. Inputs of weight 0 are never read. An input's error is returned in place of
 * the element (consuming that input element); the next call draws for the same position
 * again, so it reads the same input. Cardinality: that of the only input of positive
 * weight; else, without stop_on_empty_dataset, the sum of theirs (SL_INFINITE when one is
 * endless); with it, SL_INFINITE when they are all endless; otherwise SL_UNKNOWN_CARD.
 * Seeks (sl_iter_create_at) when every input of positive weight has a known cardinality
 * or is endless: the draws before the start are replayed without reading data (time
 * linear in the start, tens of millions of draws a second) and each input opened at what
 * it had given. SL_EINVAL for n outside 1..16, a weight that is negative or not finite
 * ("sample_from_datasets: weight 1 is -0.5: weights must be finite and >= 0"), or all
 * weights 0. */
sl_status sl_ds_sample_from_datasets(sl_dataset *const *ins, int n, const double *weights, uint64_t seed,
                                     bool stop_on_empty_dataset, sl_dataset **out);

/* tf.data's choose_from_datasets: element k comes from input choices[k], `choices` being a
 * dataset of int64 scalars (the component "value", as sl_ds_range makes, or an element's
 * only component). When the chosen input is empty: with stop_on_empty_dataset (tf.data's
 * default: true) the stream ends; otherwise that choice is skipped, and the stream ends
 * when every input is empty (choices that keep naming empty inputs are read and skipped
 * for as long as they come). A choice that is not an int64 scalar, or outside 0..n-1, is
 * SL_EINVAL from sl_iter_next naming its position in the choices and its value ("op
 * 'choose_from_datasets': choice 3 is 7, outside 0..1 (2 inputs)") and consumes that
 * choice; the choices' and the inputs' errors pass through. Cardinality: that of choices
 * when every input is endless, else SL_UNKNOWN_CARD (0 for no choices). Seeks when every
 * input has a known cardinality or is endless: the choices before the start are read
 * (only they) and each input is opened at what it had given. SL_EINVAL for n outside
 * 1..15 (the choices take the 16th input) or choices NULL. */
sl_status sl_ds_choose_from_datasets(sl_dataset *const *ins, int n, sl_dataset *choices, bool stop_on_empty_dataset,
                                     sl_dataset **out);

/* ---- iterating ----------------------------------------------------------------------- */

typedef struct sl_iter_opts {
    uint64_t seed;        /* pipeline seed: random ops derive theirs from it; default 0 */
    int cpu_budget;       /* cores the pipeline may keep busy (autotune); 0: all */
    int64_t ram_budget;   /* bytes of buffers autotune may use; 0: a quarter of RAM. Also
                             the memory plan of the buffers sized by the config (a shuffle's
                             `buffer`, a batch): planned against ram_budget when it is given,
                             else against what the process can still take (sl_mem_available,
                             sluice/util.h); one that cannot fit is SL_ENOMEM from its op at
                             its first element, naming both sizes, instead of growing until
                             the OOM killer ends the process */
} sl_iter_opts;

sl_iter_opts sl_iter_opts_default(void);

/* Start iterating ds. opts NULL: defaults. On failure *out is NULL. */
sl_status sl_iter_create(sl_dataset *ds, const sl_iter_opts *opts, sl_iter **out);

/* The next element into *out, which must be empty (fresh from sl_element_init or cleared);
 * the caller owns what it receives and releases it with sl_element_clear. Returns SL_OK,
 * SL_END, or an error (see above); *out is empty unless SL_OK. An element whose bytes a
 * mapped file took away while it waited in the pipeline is SL_EIO (sl_element_check's
 * message: file, record offset, component), never zeros returned as data. */
sl_status sl_iter_next(sl_iter *it, sl_element *out);

/* Cancel, join, free. NULL is a no-op. */
void sl_iter_close(sl_iter *it);

/* ---- positions and state ---------------------------------------------------------------
 * A stream is a function of the dataset, the seed and the position: element k of an
 * iterator depends only on those (random functions draw per element position, shuffles are
 * seeded), so an iterator can start at any position and give, bit for bit, what a fresh
 * iterator gives after k elements. */

/* sl_iter_create, the iterator's first element being element `start` (>= 0) of the stream.
 * When every op on the way can seek, nothing before it is produced: constant time and
 * memory whatever `start` is. The ops that seek: range, tfrecord_global (`shuffle global`),
 * map, map_batch (and batch over a map), batch, prefetch, take, skip, shard, repeat over an
 * input of known cardinality, zip, and sample_from_datasets / choose_from_datasets over
 * inputs of known or endless length (they replay their draws, not the data: tens of
 * millions a second). Below any other op (interleave, a buffer shuffle,
 * filter, cache, ignore_errors, files read one after another) the iterator is made at 0
 * and the elements before `start` are produced and dropped (sl_iter_replayed says how
 * many); an error met while doing so is returned, with *out NULL. A start past the end
 * gives an iterator at its end (SL_END). SL_EINVAL for start < 0. */
sl_status sl_iter_create_at(sl_dataset *ds, const sl_iter_opts *opts, int64_t start, sl_iter **out);

/* The position of the next element it would return: start + elements returned so far. */
int64_t sl_iter_position(const sl_iter *it);

/* Elements produced and dropped to reach the start (0 when every op could seek). */
int64_t sl_iter_replayed(const sl_iter *it);

/* An iterator's state, SL_ITER_STATE_SIZE bytes: magic "SLITSTAT", version 1, the size,
 * the seed, the position, a fingerprint of the dataset graph (its ops' names and shape) and
 * a CRC32C of the bytes before it, all little-endian. The same bytes on every replica after
 * the same number of elements, whatever the replica count. */
#define SL_ITER_STATE_SIZE 48

/* Write it's state into buf (cap bytes, at least SL_ITER_STATE_SIZE); *len = the bytes
 * written. SL_ERANGE when cap is too small (nothing written). */
sl_status sl_iter_save(const sl_iter *it, uint8_t *buf, size_t cap, size_t *len);

/* An iterator over ds continuing where the saved one stood: sl_iter_create_at with the
 * state's seed (opts->seed is ignored; the rest of opts applies) and position. SL_ECORRUPT
 * for bytes that are not a sound state (the byte offset and what is wrong: magic, version,
 * size, checksum); SL_EINVAL for the state of another pipeline (the fingerprint differs);
 * else what sl_iter_create_at returns. *out NULL on failure. */
sl_status sl_iter_restore(sl_dataset *ds, const sl_iter_opts *opts, const uint8_t *state, size_t len,
                          sl_iter **out);

/* Elements dropped by ignore_errors ops in this iterator so far. */
int64_t sl_iter_errors_ignored(const sl_iter *it);

#ifdef __cplusplus
}
#endif
#endif
