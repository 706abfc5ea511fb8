/* Opening files that come from outside: the one place that decides what may be opened.
 *
 * Every path a user names (TFRecords, checkpoints, cache files, stats files, configs, key
 * files) is opened through these functions, so that a FIFO, a socket, a device or a
 * directory is refused at once with a message naming the path and what it is, instead of
 * blocking forever in open() or read(), or reading an endless stream. Opens are non-blocking
 * (a FIFO with no writer cannot stall them) and the descriptor is switched back to blocking
 * mode once it is known to be a regular file.
 *
 * Whole-file reads take a byte limit, so a huge or endless input is refused with a message
 * that says how to raise the limit rather than exhausting memory.
 *
 * Writes: the writers of TFRecord, event, safetensors, stats and idx files, of traces,
 * caches, CURVE key files, the --hash-log and the run marker, and so of checkpoints and ps
 * shards, report a failed write through sl_file_write_error, so a full
 * disk, a full quota and a file-size limit (RLIMIT_FSIZE, `ulimit -f`) read alike:
 * "PATH: write failed at byte N: REASON" and a hint that says which. A file-size limit
 * signals SIGXFSZ first: a process that leaves it at its default action is killed by the
 * kernel at the limit (exit status 153 from a shell), before any writer can react, and
 * whatever it was writing stays behind. The library never changes a signal's disposition;
 * the sluice-* tools ignore SIGXFSZ (and Python does), and then write(2) writes up to the
 * limit (a short write) and fails with EFBIG, which the writers report as above, removing
 * their temporary files.
 *
 * Folders: sl_mkdirs is Sluice's one mkdir -p (run folders, replica and ps shard folders,
 * event folders, the tools' output folders). */
#ifndef SLUICE_FILE_H
#define SLUICE_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sluice/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "a directory", "a FIFO (named pipe)", "a socket", "a character device", "a block device",
 * "a symbolic link", "a regular file" or "an unknown kind of file", for st_mode's type bits. */
const char *sl_file_kind(unsigned mode);

/* True when `path` is a symbolic link whose target does not exist (why a path that lstat
 * finds reads as "no such file"), with the link's text in out (cap bytes; out NULL: only the
 * answer). The openers below say so in the hint of their SL_ENOTFOUND; a caller with a hint
 * of its own for a missing file gives it only when this is false. */
bool sl_file_dangling_target(const char *path, char *out, size_t cap);

/* Open `path` read-only and make sure it is a regular file. On success *fd is an open
 * descriptor (blocking, close-on-exec) and *size (if not NULL) the file's size. On failure
 * *fd is -1, nothing is left open, and the status is SL_ENOTFOUND (no such file),
 * SL_EINVAL ("PATH: is a FIFO (named pipe), not a regular file", directories, sockets,
 * devices) or SL_EIO (any other OS error, with its reason), with a message naming `what`
 * (a noun like "TFRecord file"; NULL for "file") and the path. */
sl_status sl_file_open_read(const char *path, const char *what, int *fd, uint64_t *size);

/* The same as sl_file_open_read, for stdio: *out is an open FILE * ("rb") or NULL. */
sl_status sl_file_fopen_read(const char *path, const char *what, FILE **out);

/* Open `path` for writing with open(2) `flags` (O_WRONLY or O_RDWR, plus O_CREAT, O_TRUNC,
 * O_EXCL, O_APPEND as wanted; O_CLOEXEC is added) and `mode`, and make sure what was opened
 * is a regular file. An existing FIFO, socket, device or directory is refused as above
 * (O_TRUNC is not applied to it). Same results as sl_file_open_read. */
sl_status sl_file_open_write(const char *path, int flags, unsigned mode, const char *what, int *fd);

/* The same for stdio: mode "w" (create/truncate) or "a" (append); *out or NULL. */
sl_status sl_file_fopen_write(const char *path, const char *mode, const char *what, FILE **out);

/* SL_OK when `path` exists and is a regular file (symbolic links followed); otherwise the
 * status and message sl_file_open_read would give, without opening anything. */
sl_status sl_file_check_regular(const char *path, const char *what);

/* Read all of a regular file into a new NUL-terminated malloc'd buffer (*data, *len without
 * the NUL). A file longer than `max_bytes` is refused with SL_ERANGE ("PATH: is N bytes,
 * more than the limit of M"), as is one that grows past it while being read; `limit_hint`
 * (may be NULL) becomes the message's hint and should say how to raise the limit. On
 * failure *data is NULL and *len 0. */
sl_status sl_file_read_all(const char *path, const char *what, uint64_t max_bytes,
                           const char *limit_hint, char **data, size_t *len);

/* Set the error of a failed write to the file `name` at byte `at` (the file offset it
 * failed at) with errno `err` (0 counts as EIO) and return SL_EIO. The message is "NAME:
 * write failed at byte AT: REASON", or with `doing` (e.g. "cannot write stats") "NAME:
 * DOING: REASON (write failed at byte AT)"; the hint says "the disk (or quota) is full" for
 * ENOSPC and EDQUOT, and for EFBIG "a file-size limit (ulimit -f) stops writes past L bytes:
 * raise it (ulimit -f unlimited) or write less" when RLIMIT_FSIZE is L <= AT, or "the file
 * would be larger than its file system allows". */
sl_status sl_file_write_error(const char *name, const char *doing, uint64_t at, int err);

/* write(2) all n bytes of data to fd, at the file offset *at (for messages), which advances
 * by every byte written: a short write (a file-size limit reached, a signal) goes on where it
 * stopped and EINTR is retried, so a write that writes part and then fails reports the
 * offset it stopped at. SL_OK, or sl_file_write_error(name, NULL, *at, errno) (SL_EIO). */
sl_status sl_file_write_all(int fd, const void *data, size_t n, const char *name, uint64_t *at);

/* Flush and close f, a stream that wrote `name` from its first byte (sl_file_fopen_write
 * "w"). SL_OK, or SL_EIO through sl_file_write_error(name, doing, ...) when a write, the
 * flush or the close failed, with the reason of the failed write (stdio keeps the bytes it
 * could not write, so the flush fails again with it) and as the offset the file's size,
 * which is how far the writes got. f is closed in either case; the caller removes the file
 * if it must not stay. */
sl_status sl_file_fclose_write(FILE *f, const char *name, const char *doing);

/* mkdir -p: make `path` and each missing folder above it (mode 0777 less the umask). `what`
 * names the folder in messages ("run folder"; NULL: "folder"). SL_OK when path is a folder
 * afterwards (also when it was one already). SL_EINVAL for an empty path ("WHAT: the path
 * is empty") or one of SL_FILE_MAX_PATH bytes or more. SL_EIO naming the part that could
 * not be made: "cannot create WHAT PATH: PART: REASON" (the OS's), "...: PART is a regular
 * file, not a folder" (any kind but a folder; "WHAT PATH is ..." when PART is PATH), or
 * "...: PART is a symbolic link to 'T', which does not exist". Folders made before a
 * failure stay. */
#define SL_FILE_MAX_PATH 4096
sl_status sl_mkdirs(const char *path, const char *what);

#ifdef __cplusplus
}
#endif
#endif
