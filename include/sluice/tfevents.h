/* TensorBoard event files: the trainer's scalar logs (loss, accuracy, learning rate,
 * examples/s, input-wait fraction). The trainer writes two runs, RUN_DIR/train and
 * RUN_DIR/eval, one writer each (sluice/train.h); this header knows only folders.
 *
 * A file is TFRecord-framed (see tfrecord.h) serialized tensorflow.Event protos, named
 * DIR/events.out.tfevents.<unix time, 10 digits>.<hostname> (with ".<pid>.<n>" added
 * when that name is taken). The first event carries file_version "brain.Event:2"; each
 * scalar is one Event {wall_time, step, summary {value {tag, simple_value}}}, which
 * TensorBoard's scalars dashboard reads.
 *
 * Only the fields written here are encoded (by hand: no generated code). The reader, for
 * tests and tools, decodes those fields and skips every other one. */
#ifndef SLUICE_TFEVENTS_H
#define SLUICE_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SL_TFEV_FILE_VERSION "brain.Event:2"

/* ---- writer ----------------------------------------------------------------------- */

typedef struct sl_tfev_writer sl_tfev_writer;

/* Create the run folder `dir` (and its parents) if needed, create a new event file in it
 * and queue the file_version event. wall_time (seconds since the epoch) names the file and
 * stamps the first event; pass a value <= 0 for the current time. On failure *out is NULL
 * and the status is SL_EINVAL (empty dir), SL_EIO (cannot create the folder or the file:
 * the message has the path and the OS reason) or SL_ENOMEM. */
sl_status sl_tfev_open(const char *dir, double wall_time, sl_tfev_writer **out);

/* The event file's path. Valid until sl_tfev_close. */
const char *sl_tfev_path(const sl_tfev_writer *w);

/* Queue one scalar event. wall_time <= 0 means now. Events are buffered and written out
 * when the buffer fills (64 KiB), by sl_tfev_flush, and by sl_tfev_close. Returns SL_OK,
 * SL_EINVAL (empty tag), SL_ENOMEM, or the SL_EIO of a write that failed now or earlier:
 * after a failed write every call returns that error again. */
sl_status sl_tfev_add_scalar(sl_tfev_writer *w, const char *tag, int64_t step, float value,
                             double wall_time);

/* Write every queued event to the file (so TensorBoard sees it; no fsync). SL_OK or SL_EIO:
 * "PATH: write failed at byte N: REASON" with a hint for a full disk or quota and for a
 * file-size limit (sluice/file.h's sl_file_write_error). After a failed write the file is
 * cut back to where this flush began, so it still ends on a whole event (the events of the
 * failed flush are lost, the earlier ones read back), and the writer is failed: every call
 * returns that error again. A file-size limit (ulimit -f) kills a process that leaves SIGXFSZ
 * at its default action before the write can fail (sluice/file.h). */
sl_status sl_tfev_flush(sl_tfev_writer *w);

/* Flush, fsync, close and free. Returns the first error seen (SL_EIO). NULL is a no-op
 * returning SL_OK. */
sl_status sl_tfev_close(sl_tfev_writer *w);

/* ---- reader ----------------------------------------------------------------------- */

typedef enum sl_tfev_kind {
    SL_TFEV_VERSION = 1, /* an event with file_version: text is the version */
    SL_TFEV_SCALAR = 2,  /* a summary value with simple_value: text is the tag */
    SL_TFEV_OTHER = 3,   /* any other event (graph, session log, summary without scalars) */
} sl_tfev_kind;

typedef struct sl_tfev_event {
    sl_tfev_kind kind;
    double wall_time;
    int64_t step;
    const char *text;  /* see kind; "" for OTHER. Owned by the reader, valid until the next call */
    float value;       /* SL_TFEV_SCALAR: simple_value */
    uint64_t offset;   /* byte offset of the event's record in the file */
} sl_tfev_event;

typedef struct sl_tfev_reader sl_tfev_reader;

/* Open an event file. On failure *out is NULL: SL_ENOTFOUND, SL_EIO or SL_ENOMEM. */
sl_status sl_tfev_reader_open(const char *path, sl_tfev_reader **out);

/* The next entry into *ev: an event's summary with k scalar values gives k SCALAR entries
 * (same wall_time, step and offset). Returns SL_OK, SL_END after the last, or
 * SL_ECORRUPT (bad framing or CRC, or a record that is not an Event: "PATH: byte OFFSET:
 * what"); after an error the reader returns it again. */
sl_status sl_tfev_reader_next(sl_tfev_reader *r, sl_tfev_event *ev);

/* Close and free. NULL is a no-op. */
void sl_tfev_reader_close(sl_tfev_reader *r);

#ifdef __cplusplus
}
#endif
#endif
