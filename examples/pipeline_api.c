/* The Fashion-MNIST input pipeline built with the C API (examples/fashion.sl is the same
 * pipeline in the config language), iterated for one epoch:
 *
 *   list_files -> interleave_tfrecord -> shuffle -> map(parse_example | decode_raw | scale)
 *     -> batch (fused with the map) -> prefetch
 *
 *   build/bin/sluice-record convert fashion-mnist data/fashion --shards 8
 *   build/bin/example_pipeline_api data/fashion
 *
 * Prints the first batch's components, then the number of batches and examples/s. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The per-example functions: Example bytes -> image float32[28,28,1] in [0, 1], label int64. */
static sl_status make_fn(sl_fn **out) {
    sl_feature_spec specs[2] = {
        {.name = "image", .dtype = SL_DT_BYTES},  /* rank 0: one value */
        {.name = "label", .dtype = SL_DT_I64},
    };
    const int64_t shape[3] = {28, 28, 1};
    sl_fn *fns[3] = {NULL, NULL, NULL};
    sl_status s = sl_fn_parse_example("record", specs, 2, &fns[0]);
    if (!s) s = sl_fn_decode_raw("image", SL_DT_U8, 3, shape, &fns[1]);
    if (!s) s = sl_fn_scale("image", 1.0 / 255, &fns[2]);
    if (!s) s = sl_fn_chain(fns, 3, out);
    for (int i = 0; i < 3; i++) sl_fn_unref(fns[i]); /* the chain holds its own references */
    return s;
}

/* Each stage wraps the one before; the caller's reference to the previous stage is dropped
 * once the next one holds its own. */
static sl_status build(const char *dir, sl_dataset **out) {
    char pattern[4096];
    snprintf(pattern, sizeof pattern, "%s/train-*.tfrecord", dir);
    const char *patterns[1] = {pattern};
    sl_dataset *ds = NULL, *next = NULL;
    sl_fn *fn = NULL;
    sl_status s = sl_ds_list_files(patterns, 1, true, 1, &ds);
    if (s) goto fail;

    sl_interleave_opts io = sl_interleave_opts_default();
    io.cycle_length = 4;   /* 4 shards open at once */
    io.block_length = 16;  /* 16 records from each in turn */
    io.parallelism = SL_AUTO;
    if ((s = sl_ds_interleave_tfrecord(ds, NULL, &io, &next))) goto fail;
    sl_dataset_unref(ds);
    ds = next;

    if ((s = sl_ds_shuffle(ds, 10000, 1, true, &next))) goto fail;
    sl_dataset_unref(ds);
    ds = next;

    if ((s = make_fn(&fn)) || (s = sl_ds_map(ds, fn, SL_AUTO, true, &next))) goto fail;
    sl_dataset_unref(ds);
    ds = next;

    sl_batch_opts bo = sl_batch_opts_default(128);
    bo.drop_remainder = true;
    if ((s = sl_ds_batch(ds, &bo, &next))) goto fail; /* becomes map_batch */
    sl_dataset_unref(ds);
    ds = next;

    if ((s = sl_ds_prefetch(ds, SL_AUTO, &next))) goto fail;
    sl_dataset_unref(ds);
    sl_fn_unref(fn);
    *out = next;
    return SL_OK;
fail:
    sl_fn_unref(fn);
    sl_dataset_unref(ds);
    return s;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR   (DIR holds train-*.tfrecord from 'sluice-record convert fashion-mnist')\n",
                argv[0]);
        return 2;
    }
    sl_dataset *ds;
    if (build(argv[1], &ds)) {
        fprintf(stderr, "%s: %s\n", argv[0], sl_errmsg());
        return 1;
    }
    sl_iter_opts opts = sl_iter_opts_default();
    opts.seed = 1;
    sl_iter *it;
    if (sl_iter_create(ds, &opts, &it)) {
        fprintf(stderr, "%s: %s\n", argv[0], sl_errmsg());
        sl_dataset_unref(ds);
        return 1;
    }
    sl_element e;
    sl_element_init(&e);
    long long batches = 0, examples = 0;
    double t0 = now_s();
    sl_status s;
    while ((s = sl_iter_next(it, &e)) == SL_OK) {
        int li = sl_element_find(&e, "label");
        if (batches == 0) {
            for (int c = 0; c < e.n; c++) {
                char d[64];
                printf("%s: %s\n", e.names[c], sl_tensor_describe(&e.t[c], d, sizeof d));
            }
            printf("first labels:");
            for (int i = 0; i < 8 && li >= 0 && i < e.t[li].dims[0]; i++)
                printf(" %lld", (long long)((const int64_t *)e.t[li].data)[i]);
            printf("\n");
        }
        batches++;
        examples += li >= 0 ? e.t[li].dims[0] : 0;
        sl_element_clear(&e);
    }
    double dt = now_s() - t0;
    int rc = 0;
    if (s != SL_END) {
        fprintf(stderr, "%s: batch %lld: %s\n", argv[0], batches, sl_errmsg());
        rc = 1;
    }
    printf("%lld batches, %lld examples in %.2f s: %.0f examples/s\n", batches, examples, dt,
           dt > 0 ? (double)examples / dt : 0.0);
    sl_iter_close(it);
    sl_dataset_unref(ds);
    return rc;
}
