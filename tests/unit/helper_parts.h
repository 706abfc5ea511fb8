/* TFRecord files for the ops tests: part-00.tfrecord .. part-05.tfrecord in a temporary
 * folder, seven records each, every record's length (0 to 299 bytes) and bytes a function of
 * its file and index. */
#ifndef SLUICE_TEST_HELPER_PARTS_H
#define SLUICE_TEST_HELPER_PARTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/pipeline.h"

#define SL_TEST_NFILES 6
#define SL_TEST_NREC 7

/* The folder the ops tests write in, /tmp/sl_ops-XXXXXX: made by the first call, which also
 * has it removed (with what is in it) when the program exits; the same path after. Exits
 * with status 1 when it cannot be made. */
const char *sl_test_parts_dir(void);

/* The path of file F, sl_test_parts_dir()/part-NN.tfrecord, into OUT (CAP bytes). */
void sl_test_part_path(char *out, size_t cap, int f);

/* The byte offset of record R in file F. */
uint64_t sl_test_part_offset(int f, int r);

/* Writes (or rewrites) the six files and, when GLOB is not NULL, the pattern that matches
 * them all (sl_test_parts_dir()/part-*.tfrecord) into GLOB (CAP bytes). Returns 0, or -1
 * when a file could not be written. */
int sl_test_write_parts(char *glob, size_t cap);

/* Whether E is exactly record (F, R): one component "record", a bytes scalar holding that
 * record's bytes. */
bool sl_test_part_is(const sl_element *e, int f, int r);

#endif
