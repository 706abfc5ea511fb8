/* sluice-record index: make sure each uncompressed TFRecord file has a valid record index
 * (sluice/tfrecord_index.h), building and writing the ones that are missing, stale or
 * damaged, and say how long each build took. Called from tools/sluice-record.c's main
 * (tools/tool_record.h); returns the exit status (tools/tool.h).
 *
 * Workload: a data set's shards indexed once after they are written (or before a job that
 * reads them in a global shuffle), each scanned at several GB/s. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "sluice/file.h"
#include "sluice/tfrecord_index.h"
#include "sluice/util.h"
#include "tool.h"
#include "tool_record.h"

static const char *PROG = "sluice-record";

static const char USAGE_INDEX[] =
    "Usage: sluice-record index [--cache-dir DIR] [--rebuild] [--skip-corrupt] FILE...\n"
    "\n"
    "Make sure each uncompressed TFRecord FILE has a valid record index: the byte offset of\n"
    "every record, for random access (a global shuffle). A valid index is kept; a missing,\n"
    "stale (the file changed) or damaged one is built and written. Prints per file\n"
    "  FILE: N records, index PATH (built in X ms, Y MB/s)\n"
    "  FILE: N records, index PATH (valid, not rebuilt)\n"
    "\n"
    "  --cache-dir DIR   keep the indexes in DIR, as NAME.HASH.slidx (HASH: of the file's\n"
    "                    absolute path), instead of beside each file as FILE.slidx\n"
    "  --rebuild         build and write every index, even a valid one\n"
    "  --skip-corrupt    index around corrupt records instead of failing\n"
    "\n"
    "Compressed (GZIP, ZLIB) files have no random access and are refused.\n"
    "\n"
    "Exit status: 0 if every file has a valid index written, 1 if any file is missing,\n"
    "compressed, corrupt or unreadable or its index could not be written, 2 usage.\n";

static int index_file(const char *path, const sl_tfr_index_opts *o) {
    double t0 = sl_now_s();
    sl_tfr_index *ix;
    if (sl_tfr_index_open(path, o, &ix) != SL_OK) return sl__fail(PROG);
    double secs = sl_now_s() - t0;
    char where[SL_FILE_MAX_PATH];
    if (sl_tfr_index_cache_path(path, o->cache_dir, where, sizeof where) != SL_OK) snprintf(where, sizeof where, "?");
    int rc = SL__EXIT_OK;
    printf("%s: %" PRId64 " records", path, sl_tfr_index_count(ix));
    if (sl_tfr_index_skipped(ix))
        printf(" (%" PRIu64 " corrupt skipped)", sl_tfr_index_skipped(ix));
    if (!sl_tfr_index_cached(ix)) {
        printf(", index not written to %s (kept in memory only: see the warning above)\n", where);
        rc = SL__EXIT_FAIL;
    } else if (sl_tfr_index_built(ix)) {
        struct stat st;
        double mb = stat(path, &st) == 0 ? (double)st.st_size / 1e6 : 0;
        printf(", index %s (built in %.1f ms, %.0f MB/s)\n", where, secs * 1e3, secs > 0 ? mb / secs : 0);
    } else {
        printf(", index %s (valid, not rebuilt)\n", where);
    }
    fflush(stdout);
    sl_tfr_index_free(ix);
    return rc;
}

int sl__record_index(int argc, char **argv) {
    const char *prog = "sluice-record index";
    const char *cache_dir = NULL;
    bool rebuild = false, skip = false;
    sl__opt opts[] = {
        {"cache-dir", 0, SL__OPT_STR, &cache_dir, 0, 0},
        {"rebuild", 0, SL__OPT_FLAG, &rebuild, 0, 0},
        {"skip-corrupt", 0, SL__OPT_FLAG, &skip, 0, 0},
        {NULL, 0, 0, NULL, 0, 0},
    };
    int npos = 0;
    switch (sl__args_parse(prog, opts, argc, argv, &npos)) {
    case SL__ARGS_HELP: fputs(USAGE_INDEX, stdout); return SL__EXIT_OK;
    case SL__ARGS_ERROR: return SL__EXIT_USAGE;
    case SL__ARGS_OK: break;
    }
    if (npos == 0) return sl__usage_error(prog, "missing FILE");
    if (cache_dir && !cache_dir[0]) return sl__usage_error(prog, "--cache-dir needs a folder");
    sl_tfr_index_opts o = sl_tfr_index_opts_default();
    o.cache_dir = cache_dir;
    o.rebuild = rebuild;
    o.skip_corrupt = skip;
    int rc = SL__EXIT_OK;
    for (int i = 0; i < npos; i++)
        if (index_file(argv[i], &o) != SL__EXIT_OK) rc = SL__EXIT_FAIL;
    return rc;
}
