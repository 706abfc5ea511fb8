/* Test data shared by the trainer tests: a small, learnable TFRecord file. */
#ifndef SLUICE_TEST_HELPER_POINTS_H
#define SLUICE_TEST_HELPER_POINTS_H

/* Writes DIR/points.tfrecord: 256 tf.Examples, image float(4) in [0, 1) from a fixed
 * generator, label (int64) 1 when x0 + x1 > x2 + x3. Returns 0, or -1 on any failure. */
int sl_test_write_points(const char *dir);

#endif
