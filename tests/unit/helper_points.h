/* Test data shared by the trainer tests: a small, learnable TFRecord file. */
#ifndef SLUICE_TEST_HELPER_POINTS_H
#define SLUICE_TEST_HELPER_POINTS_H

#include <stddef.h>

/* Writes DIR/points.tfrecord: 256 tf.Examples, image float(4) in [0, 1) from a fixed
 * generator, label (int64) 1 when x0 + x1 > x2 + x3. Returns 0, or -1 on any failure. */
int sl_test_write_points(const char *dir);

/* A new folder /tmp/sluice-test-NAME.PID (its path in dir, cap bytes) with points.tfrecord
 * in it. Returns 0, or -1 after printing what failed. */
int sl_test_points_tmpdir(const char *name, char *dir, size_t cap);

/* Config text: the pipelines `train` (shuffled, batch 16, drop_remainder) and `test`
 * (batch 32) over points.tfrecord, with components image float(4) and label int64. */
#define SL_TEST_POINTS_PIPELINES                                                                                       \
    "pipeline train {\n    files \"points.tfrecord\"\n    shuffle 64\n"                                             \
    "    map parse_example(image: float(4), label: int64)\n    batch 16 drop_remainder\n}\n"                          \
    "pipeline test {\n    files \"points.tfrecord\"\n"                                                               \
    "    map parse_example(image: float(4), label: int64)\n    batch 32\n}\n"

/* Config text: a model NAME (a string literal) that learns the points: input 4, dense 8 with
 * relu, dense 2. */
#define SL_TEST_POINTS_MODEL(name) "model " name " {\n    input 4\n    dense 8 activation=relu\n    dense 2\n}\n"

/* Config text (a printf format with one %d, the `take`): the pipeline `train` of one of two
 * replicas or workers, its half of points.tfrecord (shard auto), repeated, shuffled, in
 * batches of 16 (the global batch: 8 per replica), cut to `take` batches (a cardinality
 * known without reading). */
#define SL_TEST_POINTS_UNEVEN_PIPELINE                                                                                 \
    "pipeline train {\n    files \"points.tfrecord\"\n    shard auto\n    repeat\n    shuffle 64\n"                 \
    "    map parse_example(image: float(4), label: int64)\n    batch 16 drop_remainder\n    take %d\n}\n"

#endif
