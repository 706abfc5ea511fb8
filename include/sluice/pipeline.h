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

/* ---- snapshot, save, load (tf.data's Dataset.snapshot / save / load) ----
 * A snapshot folder holds shard files of elements, each element a chunk checked by
 * CRC32C (header and payload), and a manifest ("done": magic, version, element count, the
 * shards' counts and sizes, the element spec: names, dtypes, shapes with -1 where elements
 * differ, and the fingerprint text), written last; the folder is filled under a temporary
 * name and renamed into place whole, so it is complete or absent, and two runs writing the
 * same snapshot never share a file (pipeline/snapfile.h has the byte layout). */
typedef struct sl_snapshot_opts {
    int64_t shard_bytes;  /* a new shard file starts when one reaches this size (default 256 MiB) */
    uint64_t seed;        /* sl_ds_save only: the seed of the iteration it runs (default 0) */
} sl_snapshot_opts;

sl_snapshot_opts sl_snapshot_opts_default(void);

/* The elements of `in`, written to a snapshot under `path` by the first iterator that reads
 * them all, and read back from it by later iterators (later runs) with the same fingerprint,
 * which then run none of the ops of `in`. The snapshot lives in PATH/FP, FP being 16 hex
 * digits of a hash of `fingerprint`; its manifest keeps the whole text, and only the same
 * text replays it: a pipeline with another fingerprint writes its own snapshot beside it.
 * `fingerprint` is what the caller vouches identifies the stream (the config language gives
 * the canonical text of the statements before `snapshot` plus the path, size and mtime of
 * the files they read). NULL: the graph's shape (op names and how they connect, as
 * sl_iter_save checks): WEAKER, since a changed parameter (a batch size, a file's
 * contents) keeps the same fingerprint, so only use NULL for a fixed input.
 * A snapshot that is damaged or partial (a missing or truncated shard, a flipped byte, no
 * manifest) is never used: a warning names the file and the byte offset, it is removed,
 * and the iterator goes on from `in` (skipping what it had given, so the stream does not
 * change) while writing a new one. A snapshot that cannot be written (a full disk, no
 * permission) is a warning naming the file and the reason: the run goes on from `in` and
 * leaves nothing behind. An iterator closed before the end, or an error from `in`, keeps
 * no snapshot. The replayed stream is the writing run's whatever the seed: put random ops
 * that must change between runs after the snapshot. Cardinality: that of `in`.
 * SL_EINVAL for a NULL input, an empty path or shard_bytes < 1. opts NULL: defaults. */
sl_status sl_ds_snapshot(sl_dataset *in, const char *path, const char *fingerprint, const sl_snapshot_opts *opts,
                         sl_dataset **out);

/* Iterate ds once (opts->seed) and write its elements to the folder `path` (a snapshot
 * folder, format as above). The folder is written under PATH.tmp.PID.N and renamed to PATH
 * at the end, replacing a saved dataset already there. Returns SL_OK; SL_EINVAL for an
 * endless ds, elements whose components, dtypes or ranks change, a bad path or shard_bytes;
 * the iteration's error; or SL_EIO naming the file, byte and reason of a failed write. On
 * failure nothing is left at PATH that was not there before. opts NULL: defaults. */
sl_status sl_ds_save(sl_dataset *ds, const char *path, const sl_snapshot_opts *opts);

/* The elements a sl_ds_save wrote to `path`, in order, cardinality the count saved. The
 * manifest is read now: SL_ENOTFOUND when path holds none, SL_ECORRUPT (file, byte) for a
 * damaged one. Iterating checks every shard (SL_ECORRUPT from sl_iter_create for a missing,
 * truncated or foreign one) and every chunk (SL_ECORRUPT from sl_iter_next naming the shard
 * and byte offset, which ends the stream). */
sl_status sl_ds_load(const char *path, sl_dataset **out);

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

/* ---- sequence transformations (tf.data's concatenate, enumerate, unbatch, rebatch,
 * take_while, scan, unique) ---------------------------------------------------------- */

/* tf.data's a.concatenate(b): every element of a, then every element of b. Datasets carry
 * no element spec, so compatibility (the same component names, each with the same dtype;
 * shapes may differ) is checked while iterating: b's elements are compared with a's first
 * one (read from a when the iterator started inside b). The first element of b that does
 * not match is SL_EINVAL from sl_iter_next naming both ("op 'concatenate': element 0 of
 * input 1 has {x: bytes}, input 0's elements have {value: int64}"), and the stream ends
 * there (every later element would differ the same way). Cardinality: a + b (SL_INFINITE
 * when either is endless, else SL_UNKNOWN_CARD when either is unknown). Seeks when a's
 * cardinality is known (or endless); else an iterator started part-way replays. SL_EINVAL
 * for a NULL input; SL_ERANGE when a + b is past 2^63-1 ("concatenate: N + M elements is
 * past 2^63-1"). */
sl_status sl_ds_concatenate(sl_dataset *a, sl_dataset *b, sl_dataset **out);

/* tf.data's enumerate(start): each element with an int64 scalar component `name` (NULL:
 * "index") added, start for the first element, start + 1 for the next... Cardinality: the
 * input's. Seeks when the input does. An element that already has a component `name` is
 * SL_EINVAL from sl_iter_next ("op 'enumerate': the element already has a component
 * 'index'"), one whose index would pass INT64_MAX is SL_ERANGE; both consume the element.
 * SL_EINVAL at creation for a name that is empty or SL_NAME_MAX bytes or longer. */
sl_status sl_ds_enumerate(sl_dataset *in, int64_t start, const char *name, sl_dataset **out);

/* tf.data's unbatch: each input element of B rows (every component of rank >= 1 with the
 * same leading dimension B, which may change from element to element) gives B elements,
 * row i having component c's row i (shape dims[1..]): zero-copy views of the input's
 * buffers. An element with B = 0 gives nothing. A scalar component, or components whose
 * leading dimensions differ, is SL_EINVAL from sl_iter_next naming them, consuming that
 * input element (the next call goes on with the next one). Cardinality: 0 for an empty
 * input, SL_INFINITE for an endless one, else SL_UNKNOWN_CARD (rows per element are known
 * only by reading). */
sl_status sl_ds_unbatch(sl_dataset *in, sl_dataset **out);

/* tf.data's rebatch(batch_size, drop_remainder): the rows of the input's elements (as
 * unbatch gives them) batched again, output batch k holding sizes[k % n] rows (n = 1: one
 * size for every batch). A batch whose rows all lie in one input element is a zero-copy
 * slice of it; one that spans input elements is stacked as batch would stack its rows
 * (their components must then agree in names, dtypes and row shapes: else SL_EINVAL as
 * batch's). At the end of the input the last, smaller batch is returned, or dropped with
 * drop_remainder. Row errors are unbatch's. Cardinality as unbatch's. SL_EINVAL for n
 * outside 1..64 or a size outside 1..16777216. sizes is copied. */
sl_status sl_ds_rebatch(sl_dataset *in, const int64_t *sizes, int n, bool drop_remainder, sl_dataset **out);

/* tf.data's take_while: the input's elements up to (not including) the first one for which
 * pred returns 0; then SL_END (at every later call too, without reading further). pred's
 * negative status is that element's error (the element is consumed; the next call goes on).
 * Cardinality: 0 for an empty input, else SL_UNKNOWN_CARD. SL_EINVAL for a NULL pred. */
sl_status sl_ds_take_while(sl_dataset *in, sl_pred_fn pred, void *ctx, sl_dataset **out);
/* The same, with ctx handed over as in sl_ds_filter_owned. */
sl_status sl_ds_take_while_owned(sl_dataset *in, sl_pred_fn pred, void *ctx, sl_free_fn free_ctx,
                                 sl_dataset **out);

/* tf.data's scan: a stateful map. `state` is the iterator's state (a copy of the initial
 * state at the start of each iterator, sharing its tensors' buffers: replace a component
 * with sl_element_set rather than write into its data); `in` is the input element, handed
 * over (the function may move its tensors out; what is left is released); `out` is empty
 * and receives the output element. Returns SL_OK, or a negative status that is that
 * element's error (the state is left as the function left it; the next call goes on). */
typedef sl_status (*sl_scan_fn)(void *ctx, sl_element *state, sl_element *in, sl_element *out);

/* Scan fn over the input, starting each iterator from a copy of `initial` (borrowed; NULL:
 * an empty state). ctx is handed over: free_ctx(ctx, NULL) runs when the dataset is freed,
 * or before returning when creation fails (free_ctx may be NULL). Cardinality: the
 * input's. An iterator started part-way replays (the state depends on every element
 * before). SL_EINVAL for a NULL fn. */
sl_status sl_ds_scan(sl_dataset *in, const sl_element *initial, sl_scan_fn fn, void *ctx, sl_free_fn free_ctx,
                     sl_dataset **out);

/* tf.data's unique: the input's elements whose key was not seen before in this iterator,
 * in input order (first occurrences). The key is component `component` of the element, or
 * with component NULL its only component; it must be a scalar of int32, int64 (tf.data's
 * integer types) or bytes. Anything else is SL_EINVAL from sl_iter_next naming the
 * component and what it is ("op 'unique': component 'x' is float32[]: unique needs an
 * int32, int64 or bytes scalar"), as is a missing component or, with NULL, an element of
 * several components; the element is consumed. Memory grows with the distinct keys seen.
 * Cardinality: 0 for an empty input, else SL_UNKNOWN_CARD. SL_EINVAL at creation for a
 * component name that is empty or too long. */
sl_status sl_ds_unique(sl_dataset *in, const char *component, sl_dataset **out);

/* ---- windows, groups, buckets, resampling (tf.data's names and semantics) ---- */

/* tf.data's window(size, shift, stride, drop_remainder) as it is mostly used, followed by
 * flat_map(lambda w: w.batch(size)): Sluice elements are tuples of tensors, not nested
 * datasets, so each window is ONE element whose components are the window's elements
 * stacked along a new leading dimension (as sl_ds_batch stacks; shapes must match, else
 * SL_EINVAL from sl_iter_next naming the component and both shapes). Window k holds input
 * elements k*shift + i*stride, i = 0..size-1, those that exist: range(7) with size 3,
 * shift 1, stride 2 gives [0 2 4] [1 3 5] [2 4 6] [3 5] [4 6] [5] [6], or with
 * drop_remainder only the first three. shift 0 means shift = size (tf.data's None).
 * Windows that share elements keep them once (by reference) and copy them only into the
 * stacked windows. Cardinality: ceil(n / shift), with drop_remainder
 * max(0, (n - span) / shift + 1) where span = (size-1)*stride + 1. Seeks (window k starts
 * at input element k*shift). SL_EINVAL for size outside 1..2^24, shift < 0, stride < 1;
 * SL_ERANGE for a span of 2^30 elements or more. */
sl_status sl_ds_window(sl_dataset *in, int64_t size, int64_t shift, int64_t stride, bool drop_remainder,
                       sl_dataset **out);

/* tf.data's flat_map: each input element goes to factory (sl_ds_factory above; ctx
 * borrowed, it must outlive the dataset), whose dataset's elements are produced in order,
 * then the next input element's. The dataset of input element k is iterated with a stream
 * seed derived from the iterator's and k. A factory error, or a factory that gives no
 * dataset (SL_EINVAL), is returned from sl_iter_next and consumes that input element;
 * errors of the inner datasets pass through and their iteration goes on. Cardinality: 0
 * for an empty input, else SL_UNKNOWN_CARD. SL_EINVAL for a NULL factory. The config
 * language has no flat_map statement: its common uses are `window` (windows batched) and
 * `unbatch` (tf.data's flat_map(from_tensor_slices)). */
sl_status sl_ds_flat_map(sl_dataset *in, sl_ds_factory factory, void *ctx, sl_dataset **out);

/* An element's int64 key (group_by_window) or length (bucket_by_sequence_length) into
 * *key. A negative status is that element's error (it is consumed). */
typedef sl_status (*sl_key_fn)(void *ctx, const sl_element *elem, int64_t *key);

/* tf.data's group_by_window(key_func, reduce_func, window_size) with the reduce of its
 * documentation, batching the window: each element goes to the window of key(ctx, elem);
 * a window reaching window_size elements is stacked into one element (as sl_ds_batch
 * stacks) and returned. At the end of the input the windows still open are returned, each
 * stacked, in ascending key order (tf.data's order): range(10) with key x % 2 and window 5
 * gives [0 2 4 6 8] then [1 3 5 7 9]. Errors from sl_iter_next: the key's (consuming the
 * element), a window whose shapes differ (SL_EINVAL; consuming the window), the input's.
 * Cardinality: 0 for an empty input, else SL_UNKNOWN_CARD. SL_EINVAL for a NULL key or a
 * window_size outside 1..2^24. */
sl_status sl_ds_group_by_window(sl_dataset *in, sl_key_fn key, void *ctx, int64_t window_size, sl_dataset **out);
/* The same, with ctx handed over: free_ctx(ctx, NULL) runs when the dataset is freed, or
 * before returning when creation fails (free_ctx may be NULL). */
sl_status sl_ds_group_by_window_owned(sl_dataset *in, sl_key_fn key, void *ctx, sl_free_fn free_ctx,
                                      int64_t window_size, sl_dataset **out);

typedef struct sl_bucket_opts {
    const char *component;      /* the length is this component's dim 0 (and with
                                   pad_to_bucket_boundary, that dim is padded) */
    sl_key_fn length;           /* or the length from a function (NULL: component's dim 0) */
    void *length_ctx;           /* borrowed: must outlive the dataset */
    const int64_t *boundaries;  /* nboundaries increasing upper bounds, >= 1; copied */
    int nboundaries;            /* 1..64 */
    const int64_t *batch_sizes; /* nboundaries + 1 batch sizes, 1..2^24; copied */
    double pad_value;           /* tf.data's padding_values (one value for every component) */
    bool pad_to_bucket_boundary;
    bool no_padding;
    bool drop_remainder;
} sl_bucket_opts;

/* tf.data's bucket_by_sequence_length: bucket i holds the elements of length L with
 * boundaries[i-1] <= L < boundaries[i] (bucket 0 from 0, the last without an upper
 * bound), and is batched (group_by_window over the bucket id) by batch_sizes[i]. Each
 * batch is padded as `batch N padded` pads (every component to the largest shape in the
 * batch, with pad_value; tf.data's padded_shapes=None), or with pad_to_bucket_boundary
 * the component's dim 0 to boundaries[i] - 1, or with no_padding not at all (shapes must
 * match: SL_EINVAL). padded_shapes other than None are not offered. At the end of the
 * input the buckets still open are returned in bucket order, those smaller than their
 * batch size dropped with drop_remainder. Errors from sl_iter_next, each consuming the
 * element: a missing component, a component of rank 0, a negative length, and with
 * pad_to_bucket_boundary a length >= the last boundary ("pad_to_bucket_boundary needs
 * lengths < 5: element of length 6"), all SL_EINVAL. Cardinality: 0 for an empty input,
 * else SL_UNKNOWN_CARD. SL_EINVAL at creation for boundaries that are not increasing or
 * not >= 1, a batch size outside 1..2^24, no component and no length function, or
 * pad_to_bucket_boundary with no_padding or without a component. */
sl_status sl_ds_bucket_by_sequence_length(sl_dataset *in, const sl_bucket_opts *opts, sl_dataset **out);

/* tf.data's rejection_resample(class_func, target_dist, initial_dist, seed): the class of
 * an element is its component `class_component`, an int64 (or int32) scalar in
 * 0..nclasses-1; elements are kept at random so that the classes of the output follow
 * target (nclasses weights, normalised). The input's class distribution p is `initial`
 * (normalised) when given, else estimated as tf.data does: counts that start at 10 per
 * class, updated with each block of 32 input elements before that block is decided. An
 * element of class c is kept with probability (target_c / p_c) / max_k(target_k / p_k).
 * Output: the kept input elements themselves, unchanged, each at most once and in input
 * order; tf.data instead yields (class, element) pairs and, when target and initial differ
 * only partly, mixes in a second, unfiltered pass over the input (so it reads the input
 * twice and may yield an element twice). The class shares converge to target the same way.
 * The keep draw for input element k is a hash of seed, the iterator's stream seed and k:
 * the same elements run after run. Errors from sl_iter_next, each consuming the element: a
 * missing class component, one that is not an int64/int32 scalar, or a class outside
 * 0..nclasses-1 (SL_EINVAL naming the value). Cardinality: 0 for an empty input, else
 * SL_UNKNOWN_CARD. SL_EINVAL at creation for nclasses outside 1..1024, weights that are
 * negative or not finite, target (or initial) summing to 0, or no class component. */
sl_status sl_ds_rejection_resample(sl_dataset *in, const char *class_component, const double *target, int nclasses,
                                   const double *initial, uint64_t seed, sl_dataset **out);

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
 * input of known cardinality, zip, concatenate (a's cardinality known), enumerate, shuffle
 * (a buffer shuffle: it replays its draws on positions and reads back only the elements in
 * its buffer at the start, or, over an input that cannot seek, replays that input without
 * the ops above; sl_iter_refilled counts what it read), and
 * sample_from_datasets / choose_from_datasets over
 * inputs of known or endless length (they replay their draws, not the data: tens of
 * millions a second), and tfrecord (files read one after another: the files before the
 * start skipped by their record indexes, sluice/tfrecord_index.h, built on first use), and
 * cache (a complete one skips to the start; one still to be filled reads its input from
 * the start, records nothing, and leaves the filling to the next pass). Below any other op
 * (interleave, filter, ignore_errors, a compressed TFRecord file) the iterator is made at 0
 * and the elements before `start` are produced and dropped (sl_iter_replayed says how
 * many); an error met while doing so is returned, with *out NULL. A start past the end
 * gives an iterator at its end (SL_END). SL_EINVAL for start < 0. */
sl_status sl_iter_create_at(sl_dataset *ds, const sl_iter_opts *opts, int64_t start, sl_iter **out);

/* The position of the next element it would return: start + elements returned so far. */
int64_t sl_iter_position(const sl_iter *it);

/* Elements produced and dropped to reach the start (0 when every op could seek). */
int64_t sl_iter_replayed(const sl_iter *it);

/* Elements that seeking ops read from their inputs to rebuild their state at the start: a
 * buffer shuffle's buffer (and the few elements between its runs), or, over an input that
 * cannot seek, the shuffle's input up to the start. 0 for an iterator made at 0. */
int64_t sl_iter_refilled(const sl_iter *it);

/* An iterator's state, SL_ITER_STATE_SIZE bytes: magic "SLITSTAT", version 1, the size,
 * the seed, the position, a fingerprint of the dataset graph and a CRC32C of the bytes
 * before it, all little-endian. Version 2 (written now): the fingerprint covers the ops'
 * names, the graph's shape and the parameters that shape the stream and are the same on
 * every replica (shuffle buffer, seed and reshuffling; take, skip and repeat counts; range
 * bounds; window, enumerate and interleave settings; sample seeds; map function names), so
 * a state is refused by a pipeline that differs in one of them; not a shard's index or
 * count, a replica's files or its share of the global batch, which differ between replicas
 * and replica counts. Version 1 states (the shape only) are still read. The same bytes on
 * every replica after the same number of elements, whatever the replica count. */
#define SL_ITER_STATE_SIZE 48

/* Write its state into buf (cap bytes, at least SL_ITER_STATE_SIZE); *len = the bytes
 * written. SL_ERANGE when cap is too small (nothing written). SL_EUNSUPPORTED (nothing
 * written) once sl_iter_next has returned an error: the error consumed its input (a batch
 * keeps the rows gathered before it; an op that cannot go on ends), so no position names
 * where the iterator stands. A pipeline that skips bad input inside (ignore_errors,
 * skip_corrupt=true) returns no errors and stays resumable. */
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
