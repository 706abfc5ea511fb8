/* sluice-record's reading commands: inspect (counts, sizes, CRC status and a feature
 * summary), verify (every CRC of every record) and cat (one line per record, text or
 * --json). Called from tools/sluice-record.c's main (tools/tool_record.h); each returns the
 * exit status (tools/tool.h).
 *
 * Workload: files from bytes to gigabytes streamed once, front to back. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/example.h"
#include "sluice/tfrecord.h"
#include "sluice/util.h"
#include "tool.h"
#include "tool_record.h"

static const char *PROG = "sluice-record";

static const char USAGE_INSPECT[] =
    "Usage: sluice-record inspect [--compression C] [--skip-corrupt] FILE...\n"
    "\n"
    "For each file: records, payload bytes, compression, CRC status, smallest and largest\n"
    "record, and for files of tf.train.Example a summary of the features (for each key: kind,\n"
    "how many records have it, min/max value count). Records that do not parse as an Example\n"
    "are counted as such.\n"
    "\n"
    "  --compression C   gzip, zlib or none (default: detected from the first bytes)\n"
    "  --skip-corrupt    skip and count corrupt records instead of stopping at the first\n"
    "  --max-record N    longest record accepted in a compressed (or piped) file, in bytes\n"
    "                    (default 268435456, 256 MiB)\n"
    "FILE may be - for standard input (FIFOs, devices and directories are refused).\n"
    "\n"
    "Exit status: 0 if every file is sound, 1 if any is corrupt or unreadable, 2 usage.\n";

static const char USAGE_VERIFY[] =
    "Usage: sluice-record verify [--compression C] [--skip-corrupt] FILE...\n"
    "\n"
    "Check the length and data CRC of every record of every file. Prints 'FILE: OK, N records'\n"
    "per sound file; for a damaged one the reader's message (file and byte offset) on stderr.\n"
    "\n"
    "  --compression C   gzip, zlib or none (default: detected from the first bytes)\n"
    "  --skip-corrupt    read through damage and report how many records were corrupt\n"
    "                    (and, for a damaged gzip stream, how many compressed bytes were lost)\n"
    "  --max-record N    longest record accepted in a compressed (or piped) file, in bytes\n"
    "                    (default 268435456, 256 MiB)\n"
    "FILE may be - for standard input (FIFOs, devices and directories are refused).\n"
    "\n"
    "Exit status: 0 only if every record of every file is sound, 1 otherwise, 2 usage.\n";

static const char USAGE_CAT[] =
    "Usage: sluice-record cat [--json] [--limit N] [--values N] [--compression C] FILE...\n"
    "\n"
    "Print each record's tf.train.Example on one line: a short text summary, or with --json\n"
    "protobuf's canonical JSON (as Python's json_format.MessageToJson(msg, indent=None)).\n"
    "\n"
    "  --json            canonical JSON, one object per line\n"
    "  --limit N         stop after N records in all (default: all)\n"
    "  --values N        text mode: show at most N values per feature (default 8)\n"
    "  --compression C   gzip, zlib or none (default: detected from the first bytes)\n"
    "  --max-record N    longest record accepted in a compressed (or piped) file, in bytes\n"
    "                    (default 268435456, 256 MiB)\n"
    "FILE may be - for standard input (FIFOs, devices and directories are refused).\n"
    "\n"
    "Exit status: 0 ok, 1 corrupt/unreadable file (or one that shrank while read) or a record\n"
    "that is not an Example, 2 usage.\n";

/* Options every reading command accepts. */
typedef struct common_opts {
    const char *compression; /* NULL: AUTO for reading, NONE for writing */
} common_opts;

int sl__record_parse_compression(const char *prog, const char *name, sl_compression *out) {
    if (!name) {
        *out = SL_COMP_AUTO;
        return SL__EXIT_OK;
    }
    if (sl_compression_parse(name, out) != SL_OK)
        return sl__usage_error(prog, "unknown compression '%s' (expected gzip, zlib or none)",
                               name);
    return SL__EXIT_OK;
}

/* Open FILE for reading, or standard input for "-". */
static sl_status open_input(const char *path, const sl_tfr_read_opts *ro, sl_tfr_reader **r) {
    if (strcmp(path, "-") == 0) return sl_tfr_reader_open_fd(0, "-", ro, r);
    sl_status s = sl_tfr_reader_open(path, ro, r);
    if (s == SL_EINVAL && strstr(sl_errmsg(), "FIFO"))
        sl_err_hint("to read a pipe, give it as standard input: sluice-record COMMAND - < %s", path);
    return s;
}

#define MAX_RECORD_OPT(dest) {"max-record", 0, SL__OPT_INT, (dest), 1, (long long)1 << 62}

/* ---- inspect -------------------------------------------------------------------------- */

/* Per-key summary over a file's Examples. Keys are few (tens), so a small open-addressing
 * table keyed by the bytes is plenty; `order` keeps first-appearance order for printing. */
typedef struct key_stat {
    char *key;
    size_t key_len;
    unsigned kinds;      /* bit (1 << sl_feat_kind) for each kind seen */
    uint64_t records;    /* records that have the key */
    uint64_t min_count, max_count;
} key_stat;

typedef struct key_table {
    key_stat *slots;     /* cap entries, key == NULL for empty */
    size_t cap, n;
    size_t *order;       /* indices into slots, in order of first appearance */
} key_table;

static uint64_t hash_bytes(const uint8_t *p, size_t n) { return sl_fnv1a64(SL_FNV64_INIT, p, n); }

static void key_table_free(key_table *t) {
    for (size_t i = 0; i < t->cap; i++) free(t->slots[i].key);
    free(t->slots);
    free(t->order);
    memset(t, 0, sizeof *t);
}

static sl_status key_table_grow(key_table *t) {
    size_t ncap = t->cap ? t->cap * 2 : 64;
    key_stat *ns = calloc(ncap, sizeof *ns);
    size_t *no = malloc(ncap * sizeof *no);
    if (!ns || !no) {
        free(ns);
        free(no);
        return sl_err(SL_ENOMEM, "out of memory for the feature table");
    }
    /* Re-insert in first-appearance order so `order` stays meaningful. */
    for (size_t k = 0; k < t->n; k++) {
        key_stat *old = &t->slots[t->order[k]];
        size_t j = hash_bytes((const uint8_t *)old->key, old->key_len) & (ncap - 1);
        while (ns[j].key) j = (j + 1) & (ncap - 1);
        ns[j] = *old;
        no[k] = j;
    }
    free(t->slots);
    free(t->order);
    t->slots = ns;
    t->order = no;
    t->cap = ncap;
    return SL_OK;
}

static sl_status key_table_get(key_table *t, const uint8_t *key, size_t len, key_stat **out) {
    if ((t->n + 1) * 2 > t->cap && key_table_grow(t) != SL_OK) return SL_ENOMEM;
    size_t j = hash_bytes(key, len) & (t->cap - 1);
    while (t->slots[j].key) {
        if (t->slots[j].key_len == len && memcmp(t->slots[j].key, key, len) == 0) {
            *out = &t->slots[j];
            return SL_OK;
        }
        j = (j + 1) & (t->cap - 1);
    }
    char *k = malloc(len + 1);
    if (!k) return sl_err(SL_ENOMEM, "out of memory for the feature table");
    if (len) memcpy(k, key, len);
    k[len] = 0;
    t->slots[j] = (key_stat){.key = k, .key_len = len, .min_count = UINT64_MAX};
    t->order[t->n++] = j;
    *out = &t->slots[j];
    return SL_OK;
}

static void print_kinds(unsigned kinds, char *out, size_t cap) {
    out[0] = 0;
    size_t n = 0;
    for (int k = SL_FEAT_NONE; k <= SL_FEAT_INT64; k++) {
        if (!(kinds & (1u << k))) continue;
        int w = snprintf(out + n, cap - n, "%s%s", n ? "|" : "", sl_feat_kind_name(k));
        if (w < 0 || (size_t)w >= cap - n) break;
        n += (size_t)w;
    }
}

typedef struct inspect_opts {
    sl_compression comp;
    bool skip_corrupt;
    long long max_record; /* 0: the default */
} inspect_opts;

/* Inspect one file; prints its report to stdout. Returns SL__EXIT_OK or SL__EXIT_FAIL. */
static int inspect_file(const char *path, const inspect_opts *io) {
    sl_tfr_read_opts ro = sl_tfr_read_opts_default();
    ro.compression = io->comp;
    ro.skip_corrupt = io->skip_corrupt;
    ro.max_record = (uint64_t)io->max_record;
    sl_tfr_reader *r = NULL;
    key_table keys = {0};
    sl_example ex;
    sl_example_init(&ex);
    int rc = SL__EXIT_OK;
    sl_status s = open_input(path, &ro, &r);
    if (s != SL_OK) return sl__fail(PROG);

    uint64_t n = 0, not_examples = 0, min_len = UINT64_MAX, max_len = 0;
    uint64_t min_off = 0, max_off = 0;
    sl__progress bar;
    sl__progress_start(&bar, path, 0);
    char err[1024] = "";
    for (;;) {
        sl_record rec;
        s = sl_tfr_reader_next(r, &rec);
        if (s == SL_END) break;
        if (s != SL_OK) {
            snprintf(err, sizeof err, "%s", sl_errmsg());
            break;
        }
        n++;
        if (rec.len < min_len) min_len = rec.len, min_off = rec.offset;
        if (rec.len > max_len || n == 1) max_len = rec.len, max_off = rec.offset;
        if (sl_example_parse(&ex, rec.data, rec.len) != SL_OK) {
            not_examples++;
        } else {
            for (size_t i = 0; i < ex.n; i++) {
                key_stat *ks = NULL;
                if (key_table_get(&keys, ex.f[i].key.ptr, ex.f[i].key.len, &ks) != SL_OK) {
                    rc = sl__fail(PROG);
                    goto done;
                }
                ks->kinds |= 1u << ex.f[i].kind;
                ks->records++;
                if (ex.f[i].count < ks->min_count) ks->min_count = ex.f[i].count;
                if (ex.f[i].count > ks->max_count) ks->max_count = ex.f[i].count;
            }
        }
        sl__progress_set(&bar, n);
    }
    sl__progress_end(&bar);

    sl_tfr_stats st = sl_tfr_reader_stats(r);
    printf("%s\n", path);
    printf("  compression   %s\n", sl_compression_name(sl_tfr_reader_compression(r)));
    printf("  records       %" PRIu64 "\n", n);
    printf("  payload bytes %" PRIu64 "\n", st.bytes);
    if (err[0]) {
        printf("  crc           CORRUPT after %" PRIu64 " good records (the reader's message is on "
               "stderr)\n", n);
        rc = SL__EXIT_FAIL;
    } else if (st.corrupt_skipped) {
        printf("  crc           CORRUPT: %" PRIu64 " corrupt record%s skipped (%" PRIu64
               " bytes passed over)\n", st.corrupt_skipped, st.corrupt_skipped == 1 ? "" : "s",
               st.bytes_skipped);
        rc = SL__EXIT_FAIL;
    } else {
        printf("  crc           ok (every length and data CRC checked)\n");
    }
    if (n) {
        printf("  smallest      %" PRIu64 " bytes (record at byte %" PRIu64 ")\n", min_len,
               min_off);
        printf("  largest       %" PRIu64 " bytes (record at byte %" PRIu64 ")\n", max_len,
               max_off);
    }
    printf("  examples      %" PRIu64 " (not Examples: %" PRIu64 ")\n", n - not_examples,
           not_examples);
    if (keys.n) {
        int kw = 3, kindw = 4;
        for (size_t k = 0; k < keys.n; k++) {
            const key_stat *ks = &keys.slots[keys.order[k]];
            char kinds[64];
            print_kinds(ks->kinds, kinds, sizeof kinds);
            if ((int)ks->key_len > kw) kw = (int)ks->key_len;
            if ((int)strlen(kinds) > kindw) kindw = (int)strlen(kinds);
        }
        printf("  features      %zu key%s\n", keys.n, keys.n == 1 ? "" : "s");
        printf("    %-*s  %-*s  %-13s  %s\n", kw, "key", kindw, "kind", "records", "values");
        for (size_t k = 0; k < keys.n; k++) {
            const key_stat *ks = &keys.slots[keys.order[k]];
            char kinds[64], recs[48], vals[64];
            print_kinds(ks->kinds, kinds, sizeof kinds);
            snprintf(recs, sizeof recs, "%" PRIu64 "/%" PRIu64, ks->records, n - not_examples);
            if (ks->min_count == ks->max_count)
                snprintf(vals, sizeof vals, "%" PRIu64 " value%s", ks->min_count,
                         ks->min_count == 1 ? "" : "s");
            else
                snprintf(vals, sizeof vals, "%" PRIu64 "..%" PRIu64 " values", ks->min_count,
                         ks->max_count);
            printf("    %-*s  %-*s  %-13s  %s\n", kw, ks->key, kindw, kinds, recs, vals);
        }
    }
    fflush(stdout);
    if (err[0]) fprintf(stderr, "%s: %s\n", PROG, err);
    else if (st.corrupt_skipped)
        fprintf(stderr, "%s: %s: %" PRIu64 " corrupt record%s skipped\n", PROG, path,
                st.corrupt_skipped, st.corrupt_skipped == 1 ? "" : "s");
done:
    sl__progress_end(&bar);
    sl_example_free(&ex);
    key_table_free(&keys);
    sl_tfr_reader_close(r);
    return rc;
}

int sl__record_inspect(int argc, char **argv) {
    const char *prog = "sluice-record inspect";
    common_opts co = {0};
    inspect_opts io = {0};
    sl__opt opts[] = {
        {"compression", 'c', SL__OPT_STR, &co.compression, 0, 0},
        {"skip-corrupt", 0, SL__OPT_FLAG, &io.skip_corrupt, 0, 0},
        MAX_RECORD_OPT(&io.max_record),
        {NULL, 0, 0, NULL, 0, 0},
    };
    int npos = 0;
    switch (sl__args_parse(prog, opts, argc, argv, &npos)) {
    case SL__ARGS_HELP: fputs(USAGE_INSPECT, stdout); return SL__EXIT_OK;
    case SL__ARGS_ERROR: return SL__EXIT_USAGE;
    case SL__ARGS_OK: break;
    }
    if (npos == 0) return sl__usage_error(prog, "missing FILE");
    int rc = sl__record_parse_compression(prog, co.compression, &io.comp);
    if (rc) return rc;
    for (int i = 0; i < npos; i++) {
        if (i) printf("\n");
        if (inspect_file(argv[i], &io) != SL__EXIT_OK) rc = SL__EXIT_FAIL;
    }
    return rc;
}

/* ---- verify --------------------------------------------------------------------------- */

static int verify_file(const char *path, sl_compression comp, bool skip, long long max_record) {
    sl_tfr_read_opts ro = sl_tfr_read_opts_default();
    ro.compression = comp;
    ro.skip_corrupt = skip;
    ro.verify_data_crc = true;
    ro.max_record = (uint64_t)max_record;
    sl_tfr_reader *r = NULL;
    if (open_input(path, &ro, &r) != SL_OK) return sl__fail(PROG);
    sl__progress bar;
    sl__progress_start(&bar, path, 0);
    sl_status s;
    uint64_t n = 0;
    sl_record rec;
    while ((s = sl_tfr_reader_next(r, &rec)) == SL_OK) sl__progress_set(&bar, ++n);
    sl__progress_end(&bar);
    sl_tfr_stats st = sl_tfr_reader_stats(r);
    int rc = SL__EXIT_OK;
    if (s != SL_END) {
        rc = sl__fail(PROG);
        printf("%s: CORRUPT after %" PRIu64 " good records\n", path, n);
    } else if (st.corrupt_skipped || st.stream_damage) {
        const char *pl = st.corrupt_skipped == 1 ? "" : "s";
        fprintf(stderr, "%s: %s: %" PRIu64 " corrupt record%s skipped\n", PROG, path,
                st.corrupt_skipped, pl);
        printf("%s: CORRUPT, %" PRIu64 " good records, %" PRIu64
               " corrupt record%s skipped (%" PRIu64 " bytes passed over)",
               path, n, st.corrupt_skipped, pl, st.bytes_skipped);
        if (st.stream_damage)
            printf(", %" PRIu64 " damaged place%s in the %s stream (%" PRIu64
                   " compressed bytes lost)",
                   st.stream_damage, st.stream_damage == 1 ? "" : "s",
                   sl_compression_name(sl_tfr_reader_compression(r)), st.compressed_bytes_lost);
        printf("\n");
        rc = SL__EXIT_FAIL;
    } else {
        printf("%s: OK, %" PRIu64 " records\n", path, n);
    }
    fflush(stdout);
    sl_tfr_reader_close(r);
    return rc;
}

int sl__record_verify(int argc, char **argv) {
    const char *prog = "sluice-record verify";
    common_opts co = {0};
    bool skip = false;
    long long max_record = 0;
    sl__opt opts[] = {
        {"compression", 'c', SL__OPT_STR, &co.compression, 0, 0},
        {"skip-corrupt", 0, SL__OPT_FLAG, &skip, 0, 0},
        MAX_RECORD_OPT(&max_record),
        {NULL, 0, 0, NULL, 0, 0},
    };
    int npos = 0;
    switch (sl__args_parse(prog, opts, argc, argv, &npos)) {
    case SL__ARGS_HELP: fputs(USAGE_VERIFY, stdout); return SL__EXIT_OK;
    case SL__ARGS_ERROR: return SL__EXIT_USAGE;
    case SL__ARGS_OK: break;
    }
    if (npos == 0) return sl__usage_error(prog, "missing FILE");
    sl_compression comp;
    int rc = sl__record_parse_compression(prog, co.compression, &comp);
    if (rc) return rc;
    for (int i = 0; i < npos; i++)
        if (verify_file(argv[i], comp, skip, max_record) != SL__EXIT_OK) rc = SL__EXIT_FAIL;
    return rc;
}

/* ---- cat ------------------------------------------------------------------------------ */


/* A record's mapped bytes were lost (the file shrank under the reader): the reader's next
 * call reports it with the sizes (SL_EIO, "FILE: shrank from N to M bytes while being
 * read"); should it not, say so here. Returns the status for the caller to report. */
static sl_status shrank(sl_tfr_reader *r, sl_record *rec, const char *path) {
    uint64_t off = rec->offset;
    sl_status s = sl_tfr_reader_next(r, rec);
    if (s == SL_OK || s == SL_END)
        s = sl_err(SL_EIO, "%s: byte %" PRIu64 ": the file shrank while being read", path, off);
    return s;
}

int sl__record_cat(int argc, char **argv) {
    const char *prog = "sluice-record cat";
    common_opts co = {0};
    bool json = false;
    long long limit = -1, values = 8, max_record = 0;
    sl__opt opts[] = {
        {"compression", 'c', SL__OPT_STR, &co.compression, 0, 0},
        MAX_RECORD_OPT(&max_record),
        {"json", 'j', SL__OPT_FLAG, &json, 0, 0},
        {"limit", 'n', SL__OPT_INT, &limit, 0, INT64_MAX},
        {"values", 0, SL__OPT_INT, &values, 0, 1 << 30},
        {NULL, 0, 0, NULL, 0, 0},
    };
    int npos = 0;
    switch (sl__args_parse(prog, opts, argc, argv, &npos)) {
    case SL__ARGS_HELP: fputs(USAGE_CAT, stdout); return SL__EXIT_OK;
    case SL__ARGS_ERROR: return SL__EXIT_USAGE;
    case SL__ARGS_OK: break;
    }
    if (npos == 0) return sl__usage_error(prog, "missing FILE");
    sl_tfr_read_opts ro = sl_tfr_read_opts_default();
    ro.max_record = (uint64_t)max_record;
    int rc = sl__record_parse_compression(prog, co.compression, &ro.compression);
    if (rc) return rc;

    sl_example ex;
    sl_example_init(&ex);
    long long printed = 0;
    for (int i = 0; i < npos && rc == SL__EXIT_OK && (limit < 0 || printed < limit); i++) {
        sl_tfr_reader *r = NULL;
        if (open_input(argv[i], &ro, &r) != SL_OK) {
            rc = sl__fail(PROG);
            break;
        }
        sl_record rec;
        sl_status s = SL_END;
        while ((limit < 0 || printed < limit) && (s = sl_tfr_reader_next(r, &rec)) == SL_OK) {
            sl_status ps = sl_example_parse(&ex, rec.data, rec.len);
            if (sl_buf_damaged(rec.buf)) {
                /* the file shrank after the reader checked this record: its bytes are gone;
                 * the reader's next call says so with the sizes (SL_EIO), reported below */
                s = shrank(r, &rec, argv[i]);
                break;
            }
            if (ps != SL_OK) {
                fprintf(stderr,
                        "%s: %s: byte %" PRIu64 ": record is not a tf.train.Example; in the "
                        "record, %s\n", PROG, argv[i], rec.offset, sl_errmsg());
                rc = SL__EXIT_FAIL;
                break;
            }
            char *line = NULL;
            size_t len = 0;
            s = json ? sl_example_to_json(&ex, &line, &len)
                     : sl_example_to_text(&ex, (int)values, &line, &len);
            if (s != SL_OK && sl_buf_damaged(rec.buf)) { /* shrank while the text was made */
                free(line);
                s = shrank(r, &rec, argv[i]);
                break;
            }
            if (s != SL_OK) {
                rc = sl__failf(PROG, "%s: byte %" PRIu64, argv[i], rec.offset);
                break;
            }
            fwrite(line, 1, len, stdout);
            fputc('\n', stdout);
            free(line);
            printed++;
            if (!sl__stdout_ok()) { /* stop at once: sl__tool_exit says why, with the hint */
                rc = SL__EXIT_FAIL;
                break;
            }
        }
        if (rc == SL__EXIT_OK && (limit < 0 || printed < limit) && s != SL_END)
            rc = sl__fail(PROG);
        sl_tfr_reader_close(r);
    }
    sl_example_free(&ex);
    errno = 0;
    fflush(stdout);
    if (!sl__stdout_ok()) rc = SL__EXIT_FAIL; /* the message is sl__tool_exit's */
    return rc;
}
