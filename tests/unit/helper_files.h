/* Files and folders for the unit tests: temporary folders, whole-file reads and writes,
 * recursive removal, and the first line of the last error message. */
#ifndef SLUICE_TEST_HELPER_FILES_H
#define SLUICE_TEST_HELPER_FILES_H

#include <stddef.h>
#include <stdint.h>

/* Makes a new folder /tmp/PREFIX-XXXXXX (mkdtemp) and writes its path into BUF (CAP bytes).
 * Returns BUF, or NULL with BUF set to "" when the folder could not be made. */
char *sl_test_mkdtemp(char *buf, size_t cap, const char *prefix);

/* sl_test_mkdtemp, then the path DIR/NAME of a file in the new folder into PATH (PCAP
 * bytes). Returns DIR, or NULL when the folder could not be made. */
char *sl_test_tmp_file(char *dir, size_t dcap, const char *prefix, char *path, size_t pcap, const char *name);

/* Removes DIR and everything below it (links are removed, not followed). Returns 0, or -1
 * when anything could not be removed (what could be removed is gone). */
int sl_test_rm_rf(const char *dir);

/* The number of entries of DIR other than "." and "..", or 0 when DIR cannot be opened. */
int sl_test_count_files(const char *dir);

/* The whole file at PATH in a malloc'd buffer followed by one NUL byte (text can be used
 * as a string); *N is its length. Returns the buffer (the caller frees it), or NULL when
 * the file cannot be opened or read (*N is then 0). */
uint8_t *sl_test_read_file(const char *path, size_t *n);

/* Writes the N bytes at P to PATH, creating or truncating it. Returns 0, or -1 on any
 * failure (the file may then be partly written). */
int sl_test_write_file(const char *path, const void *p, size_t n);

/* Makes PATH a sparse file of SIZE bytes (created or truncated; no disk used). Returns 0, or
 * -1 when it could not be opened or sized. */
int sl_test_sparse_file(const char *path, long long size);

/* sl_test_write_file with the bytes of the string TEXT (without its NUL). */
int sl_test_write_text(const char *path, const char *text);

/* The first line of sl_errmsg() (the message without its hint), in a static buffer that the
 * next call overwrites. */
const char *sl_test_errmsg_line(void);

#endif
