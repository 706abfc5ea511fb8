/* Pipelines from the config language: turn a `pipeline NAME { ... }` block (parsed by
 * sluice/config.h) into a dataset graph (sluice/pipeline.h).
 *
 *   pipeline train {
 *       files "train-*.tfrecord" shuffle=true          # the source (or: range 0 100)
 *       shard auto                                     # one replica's part (file or data)
 *       interleave cycle=4 block=16 parallel=auto      # read several files at once
 *       shuffle 10000
 *       map parse_example(image: bytes, label: int64)
 *           | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255)  parallel=auto
 *       batch 128 drop_remainder                       # fused with the map above
 *       prefetch auto
 *   }
 *
 * Statements run top to bottom, each one wrapping the dataset built so far; the first
 * must be the source (`files`, `range`, or `sample` / `choose`, which mix other pipelines).
 * `shard` and `interleave` written right after `files` (before any element op) decide how
 * the files are read:
 *
 *   files GLOB... [shuffle=BOOL] [seed=N] [compression=auto|none|gzip|zlib] [skip_corrupt=BOOL]
 *         [verify_crc=BOOL] [max_record=BYTES]
 *       (max_record: the longest record accepted from a compressed file, default 256 MiB;
 *       see sl_tfr_read_opts in tfrecord.h)
 *       TFRecord files ({"record": bytes}). Relative paths are relative to env->base_dir.
 *       Every pattern must match at least one file. With `interleave` the files go through
 *       sl_ds_list_files -> sl_ds_interleave_tfrecord; without it, sl_ds_tfrecord reads
 *       them one after another (pattern by pattern, each one's matches sorted; all files
 *       sorted when sharded by file), or, with shuffle=true, list_files plus an interleave
 *       of one file at a time, in a seeded order that changes every epoch.
 *   range START STOP [STEP]                       {"value": int64} (sl_ds_range)
 *   shard [auto|file|data] [num=N] [index=I]      num/index default to env's shard
 *       file: each replica reads the files whose sorted position i has i % num == index
 *       (only right after `files`); data: every replica reads everything and keeps the
 *       elements i % num == index (written right after `files`: the records, after any
 *       interleave); auto: file when it is right after `files` and there are at least
 *       `num` files, data otherwise. With num 1 it does nothing. By file, when the
 *       files do not divide by num, shard 0 logs a warning (SL_WARN) naming the files per
 *       replica ("pipeline 'train': 3 files do not split evenly over 2 replicas (shard by
 *       file): replica 0 reads 2, replica 1 reads 1; ..."). A pipeline built for
 *       num_shards > 1 that has no shard statement at all is built as written (every
 *       replica reads everything), and shard 0 logs a warning saying so.
 *   interleave [cycle=N|auto] [block=N] [parallel=N|auto] [deterministic=BOOL]
 *   shuffle BUFFER [seed=N] [reshuffle=BOOL]       reshuffle (each epoch) defaults to true
 *   shuffle global [seed=N] [reshuffle=BOOL] [index_dir="PATH"]
 *       Right after `files` (uncompressed), instead of shard / interleave / a buffer:
 *       sl_ds_tfrecord_global over the files' paths, sharded by position for env's
 *       num_shards / shard_index itself; record indexes beside the files, or in index_dir
 *       (relative to the base directory). With a shard or interleave statement, files
 *       shuffle=true, after another op, or over a range: SL_EINVAL at the statement.
 *   map FN(...) [| FN(...)...] [parallel=N|auto] [deterministic=BOOL]
 *   batch N [drop_remainder] [padded] [pad=VALUE]   (also drop_remainder=BOOL, padded=BOOL;
 *       batches of N / env->batch_divisor when that is above 1)
 *   prefetch [N|auto]   repeat [N]   take N   skip N   cache ["PATH"]   ignore_errors
 *   filter COMPONENT OP VALUE                       OP: == != < <= > >= or eq ne lt le gt ge
 *   snapshot "PATH" [shard_bytes=N]
 *       sl_ds_snapshot: the first run writes the stream so far under PATH (relative to the
 *       base directory), later runs with the same fingerprint read it back without running
 *       the statements before it. The fingerprint covers the canonical text of those
 *       statements (names and values as parsed: not spacing or comments), the env's shards,
 *       seed and batch divisor, and the path, size and mtime of every file they read (the
 *       files of `files`, a `load`'s manifest); for `sample` / `choose` sources, every
 *       pipeline block of the file, but not the files those other pipelines read. A changed
 *       pipeline writes a snapshot of its own (PATH/FP); a damaged one is rebuilt.
 *   load "PATH"
 *       A source (sl_ds_load): the elements sl_ds_save wrote to the folder PATH, in order,
 *       cardinality the count saved. A folder that is not a saved dataset is SL_ENOTFOUND
 *       at the statement.
 *   sample PIPELINE... [weights=[W, ...]] [seed=N] [stop_on_empty=BOOL]
 *       A source mixing other pipelines of the file (sl_ds_sample_from_datasets): each
 *       element comes from PIPELINE i with probability W_i / sum(W) (no weights: equal), the
 *       draw a function of the seed and the element's position. stop_on_empty=true ends the
 *       stream at the first pipeline found empty; false (the default) drops that one and
 *       renormalises the others. seed defaults to one derived from env->seed and the
 *       statement's position. Weights: one per pipeline, finite, >= 0, not all 0.
 *   choose PIPELINE... by=CHOICES [stop_on_empty=BOOL]
 *       A source (sl_ds_choose_from_datasets): element k comes from the PIPELINE whose index
 *       (0 for the first) is element k of the pipeline CHOICES, whose elements are int64
 *       scalars (e.g. `range 0 2` then `repeat`). stop_on_empty=true (the default) ends
 *       the stream when the chosen pipeline is empty; false skips that choice.
 *       The pipelines sample and choose name are built whole, with the env this one is
 *       built with (shards, seed, base_dir, batch_divisor), each with its own labels
 *       ("web/map"). A name that is not a pipeline of the file, the pipeline itself, or one
 *       that leads back to it through the pipelines it mixes ("pipeline 'a' would read
 *       itself through 'b': a -> b -> a") is SL_EINVAL at the name, with a hint.
 *
 *   zip PIPELINE... [prefix=BOOL]
 *       A source (sl_ds_zip): element k holds the components of element k of each PIPELINE,
 *       ending with the shortest. Names must not clash (SL_EINVAL at the first element,
 *       naming the component and both inputs); prefix=true renames each pipeline's
 *       components "PIPELINE.COMPONENT" (range pipelines all give "value").
 *   concatenate PIPELINE...                          (sl_ds_concatenate, once per PIPELINE)
 *       The elements so far, then each PIPELINE's; the same component names and dtypes,
 *       else SL_EINVAL at the first element that differs.
 *   enumerate [start=N] [as=NAME]    adds int64 NAME (default index): start, start+1, ...
 *   unbatch                          each element of B rows becomes B elements
 *   rebatch N|[N, ...] [drop_remainder]   (also drop_remainder=BOOL)
 *       The rows re-batched into N rows each, or the sizes of the list in turn; not
 *       divided by env->batch_divisor (it sizes what is already batched).
 *   take_while COMPONENT OP NUMBER   up to the first element where the comparison fails
 *       (the comparison is filter's)
 *   scan COMPONENT sum|prod|min|max|count [initial=NUMBER] [as=NAME]
 *       The running value over the elements so far (this one included) as NAME (default:
 *       COMPONENT, replaced): int64 while the values and initial are integers (past int64
 *       is SL_ERANGE), float64 otherwise. initial defaults to 0 (sum, count), 1 (prod),
 *       the first value (min, max). count counts elements (COMPONENT is not read).
 *   unique [COMPONENT]               first occurrences of COMPONENT's value (int32, int64 or
 *       bytes scalar; default: the element's only component)
 *   window SIZE [shift=N] [stride=N] [drop_remainder]   (also drop_remainder=BOOL)
 *       sl_ds_window: window k is elements k*shift + i*stride (i < SIZE; shift defaults to
 *       SIZE), each window ONE element, its elements stacked along a new leading dim (what
 *       tf.data's window(...).flat_map(lambda w: w.batch(SIZE)) gives). There is no
 *       flat_map statement: `window` and `unbatch` are its config uses.
 *   group_by_window key=COMPONENT [modulo=N] window=N
 *       sl_ds_group_by_window: the key is COMPONENT's integer scalar value (with modulo,
 *       value % N, Python's sign rule); each key's window of N is stacked when full, the
 *       open ones at the end in ascending key order.
 *   bucket_by_sequence_length COMPONENT boundaries=[B, ...] batch_sizes=[N, ...] [pad=VALUE]
 *           [pad_to_bucket_boundary] [no_padding] [drop_remainder]   (flags also =BOOL)
 *       sl_ds_bucket_by_sequence_length: the length is COMPONENT's dim 0; one batch size
 *       more than boundaries; batches padded with VALUE (default 0) to the batch's longest,
 *       or COMPONENT to its bucket's boundary - 1, or not at all.
 *   rejection_resample COMPONENT target=[W, ...] [initial=[W, ...]] [seed=N]
 *       sl_ds_rejection_resample: keeps elements so that the classes (COMPONENT, an int64
 *       scalar in 0..len(target)-1) follow target; initial (the input's distribution,
 *       one weight per class) is estimated online when not given. seed defaults to one
 *       derived from env->seed and the statement's position, as shuffle's does.
 *
 * Functions inside map (every parameter may be given by position or as name=value):
 *   parse_example(FEATURE: TYPE, ..., input=record)   TYPE: bytes | int64 | float, optionally
 *       with a shape and/or a default: int64(default=0), float(4), float(28x28),
 *       int64(*) (any count), bytes(as=NAME) to rename the output component
 *   decode_jpeg(COMP, channels=0|1|3)           random_resized_crop(COMP, SIZE, scale=[lo, hi], ratio=[lo, hi])
 *   center_crop(COMP, SIZE)   resize(COMP, SIZE)   SIZE: 224 (square) or 224x200 (height x width)
 *   random_flip(COMP, p=0.5, horizontal=true, vertical=false)
 *   normalize(COMP, mean=[...], std=[...], scale_uint8=true)
 *   cast(COMP, DTYPE)   scale(COMP, FACTOR)   decode_raw(COMP, DTYPE, SHAPE)   one_hot(COMP, DEPTH)
 *   adjust_brightness(COMP, FACTOR)   adjust_contrast(COMP, FACTOR)   adjust_saturation(COMP, FACTOR)
 *   adjust_hue(COMP, FACTOR)   (torchvision's F.adjust_*, uint8; hue FACTOR in [-0.5, 0.5])
 *   color_jitter(COMP, brightness=0, contrast=0, saturation=0, hue=0)   each N (torchvision's
 *       ColorJitter: [max(0, 1 - N), 1 + N], hue [-N, N]) or [lo, hi]; random order of the four
 *   rgb_to_grayscale(COMP, channels=1|3)   random_grayscale(COMP, p=0.1)   (uint8)
 *   rot90(COMP, k=1)   random_rot90(COMP)   counter-clockwise, as tf.image.rot90
 *   erase(COMP, I, J, H, W, value=0|[v, ...])   a fixed box (F.erase)
 *   random_erasing(COMP, p=0.5, scale=[0.02, 0.33], ratio=[0.3, 3.3], value=0|[v, ...]|random)
 *       torchvision's RandomErasing, uint8 or float32 (after normalize, as its recipes do)
 *   resize_with_pad(COMP, SIZE)   tf.image.resize_with_pad: keep aspect, pad with zeros
 *   crop_to_bounding_box(COMP, OFFSET_HEIGHT, OFFSET_WIDTH, TARGET_HEIGHT, TARGET_WIDTH)
 *   distorted_bbox_crop(COMP, boxes=COMP, min_object_covered=0.1, aspect_ratio_range=[0.75, 1.33],
 *       area_range=[0.05, 1], max_attempts=100, use_image_if_no_bounding_boxes=true)
 *       the Inception crop: tf.image.sample_distorted_bounding_box, then the crop; boxes
 *       (float32 [n, 4], ymin xmin ymax xmax in [0, 1]) from component boxes when given
 *   rand_augment(COMP, num_ops=2, magnitude=9, bins=31)   trivial_augment(COMP, bins=31)
 *       torchvision's RandAugment / TrivialAugmentWide on uint8 images (NEAREST, fill 0)
 *   augment_op(COMP, OP, magnitude=0)   one of their ops by torchvision's name (ShearX, ...)
 *   mixup(IMAGE, LABEL, alpha=0.2, num_classes=N, p=1.0)   cutmix(IMAGE, LABEL, alpha=1.0,
 *       num_classes=N, p=1.0)   mixup_cutmix(IMAGE, LABEL, mixup_alpha=0.2, cutmix_alpha=1.0,
 *       num_classes=N)   batch functions (map after batch): torchvision's reference
 *       RandomMixup / RandomCutmix and the recipe's RandomChoice of the two
 *
 * Every mistake is reported through sl_cfg_err — "FILE:LINE:COL: message", the line, a
 * caret — with a hint (sl_err_hint): unknown ops, functions and options get "did you
 * mean ...?", a wrong value or a missing argument gets the statement's usage. */
#ifndef SLUICE_FROM_CONFIG_H
#define SLUICE_FROM_CONFIG_H

#include <stdint.h>

#include "sluice/config.h"
#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "sluice/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where and as whom the pipeline runs. */
typedef struct sl_pipeline_env {
    int64_t num_shards;   /* replicas reading this pipeline (shard's default num); >= 1 */
    int64_t shard_index;  /* this replica, 0..num_shards-1 (shard's default index) */
    const char *base_dir; /* relative paths (files, cache) start here; NULL: the config
                             file's directory (the directory part of sl_cfg_filename) */
    uint64_t seed;        /* pipeline seed: shuffles without seed= derive theirs from it and
                             from the statement's position */
    int64_t batch_divisor; /* 0 or 1: every `batch N` as written. W > 1: the config's N is a
                              global batch over W replicas, and each `batch N` statement
                              (padded or not; a map before it is fused the same way) makes
                              batches of N/W; drop_remainder and pad apply to the N/W batches.
                              N not a multiple of W is SL_EINVAL at the statement's N
                              ("FILE:LINE:COL: pipeline 'train': batch 128 does not divide
                              over 3 replicas", hinting that the config's batch is the global
                              batch). The trainer passes its world size here for the training
                              pipeline, so the caller's sl_cfg is never rewritten. */
    /* The caller's own map functions (optional; NULL: none). A call NAME() in `map` whose
     * NAME is none of the functions below is looked up with find_fn(find_fn_ctx, NAME,
     * &fn) before it is an "unknown function" error (so a caller's function cannot shadow
     * a stock one). find_fn returns SL_OK with fn a new reference (the map takes it over:
     * the dataset keeps that reference, so what ctx points to must outlive the dataset's use
     * of the function, or be owned by the function's own ctx), SL_ENOTFOUND with fn NULL when
     * NAME is not one of the caller's (the usual "unknown function" error follows, with its
     * did-you-mean), or another negative status, which the build returns prefixed with
     * "FILE:LINE:COL: " of the call. A caller's function takes no arguments: NAME(x) is
     * SL_EINVAL at the argument. It is called on the building thread, while
     * sl_pipeline_from_config runs, never afterwards. A `snapshot` after such a function
     * fingerprints its NAME only, not what it does. */
    sl_status (*find_fn)(void *find_fn_ctx, const char *name, sl_fn **out);
    void *find_fn_ctx;  /* handed to find_fn; borrowed */
} sl_pipeline_env;

/* num_shards 1, shard_index 0, base_dir NULL, seed 0, batch_divisor 0, find_fn NULL. */
sl_pipeline_env sl_pipeline_env_default(void);

/* Build the dataset of `pipeline NAME { ... }` in cfg (borrowed: the dataset keeps nothing
 * of cfg or env). env NULL: defaults. Each op's label is "NAME/op" ("NAME/op#2" for the
 * second of a kind), so runtime errors and stats name the statement.
 * Returns SL_OK with a new dataset (one reference) in *out. On failure *out is NULL and the
 * status is SL_ENOTFOUND for an unknown NAME (the message lists the pipelines there are),
 * SL_EINVAL / SL_ERANGE / SL_ENOTFOUND (a pattern that matches nothing) with a
 * "FILE:LINE:COL" message and hint for a mistake in the block, SL_EINVAL for an invalid env
 * (a shard index outside 0..num_shards-1, a negative batch_divisor),
 * or an op's own error (e.g. SL_ENOMEM). */
sl_status sl_pipeline_from_config(const sl_cfg *cfg, const char *name, const sl_pipeline_env *env,
                                  sl_dataset **out);

/* The names of the `pipeline NAME { }` blocks in cfg, in file order: up to `cap` pointers
 * (into cfg, valid while it lives) into names. Returns how many there are (which may be
 * more than cap; names may be NULL when cap is 0). */
int sl_pipeline_names(const sl_cfg *cfg, const char **names, int cap);

#ifdef __cplusplus
}
#endif
#endif
