/* pipeline/ops/snapshot.c: a snapshot written by one run is read by the next, bit for bit,
 * without running the upstream; a changed fingerprint writes a snapshot of its own; a
 * truncated, flipped, partial or incomplete snapshot is reported (file and byte) and
 * rebuilt, the elements unchanged; an unwritable folder or a full disk is a warning and
 * the run goes on from its input; two runs writing at once keep one good snapshot. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/config.h"
#include "sluice/from_config.h"
#include "sluice/pipeline.h"
#include "helper_parts.h"
#include "helper_files.h"
#include "helper_snap.h"
#include "test.h"

#define N 10

static char root[256];

static sl_element *ref;
static int nref;

/* One run over a fresh snapshot dataset of upstream up (fingerprint fp): the upstream's
 * calls, its elements compared with ref, stderr captured into *log (freed by the caller). */
static int run(sl_dataset *up, const char *path, const char *fp, int64_t shard_bytes, bool *same, char **log) {
    sl_snapshot_opts o = sl_snapshot_opts_default();
    o.shard_bytes = shard_bytes;
    sl_dataset *s;
    if (sl_ds_snapshot(up, path, fp, &o, &s)) return -1;
    atomic_store(&sl_test_snap_calls, 0);
    sl_element *v;
    int n;
    sl_test_capture_start();
    int st = sl_test_snap_collect(s, &v, &n);
    char *l = sl_test_capture_stop();
    if (log) *log = l;
    else free(l);
    *same = st == SL_END && sl_test_snap_same(ref, nref, v, n);
    sl_test_snap_free(v, n);
    sl_dataset_unref(s);
    return atomic_load(&sl_test_snap_calls);
}

/* Entries of dir whose names contain `part`. */
static int entries(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int k = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.' && strstr(de->d_name, part)) k++;
    closedir(d);
    return k;
}

/* The only snapshot folder under path (PATH/FP), into out. */
static void only_folder(const char *path, char *out, size_t cap) {
    DIR *d = opendir(path);
    struct dirent *de;
    out[0] = 0;
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.' && !strchr(de->d_name, '.')) snprintf(out, cap, "%s/%s", path, de->d_name);
    if (d) closedir(d);
}

static sl_dataset *upstream(int64_t batch) {
    sl_dataset *up;
    if (sl_test_snap_upstream(N, batch, &up)) return NULL;
    sl_test_snap_free(ref, nref);
    sl_test_snap_collect(up, &ref, &nref);
    return up;
}

TEST(test_snapshot_round_trip) {
    char path[300];
    snprintf(path, sizeof path, "%s/rt", root);
    sl_dataset *up = upstream(3); /* batches of 3, 3, 3, 1: the spec's leading dim varies */
    ASSERT(up && nref == 4);
    bool same;
    ASSERT_EQ(run(up, path, "pipeline A", 1 << 20, &same, NULL), N);
    ASSERT(same);
    ASSERT_EQ(entries(path, ""), 1);
    ASSERT_EQ(entries(path, ".tmp."), 0);
    ASSERT_EQ(run(up, path, "pipeline A", 1 << 20, &same, NULL), 0); /* read back: no upstream call */
    ASSERT(same);
    ASSERT_EQ(run(up, path, "pipeline A", 1 << 20, &same, NULL), 0);
    ASSERT(same);
    /* a changed pipeline: its own snapshot beside the first */
    ASSERT_EQ(run(up, path, "pipeline A, batch 4", 1 << 20, &same, NULL), N);
    ASSERT(same);
    ASSERT_EQ(entries(path, ""), 2);
    ASSERT_EQ(run(up, path, "pipeline A, batch 4", 1 << 20, &same, NULL), 0);
    /* cardinality passes through */
    sl_dataset *s;
    ASSERT_OK(sl_ds_snapshot(up, path, "x", NULL, &s));
    ASSERT_EQ(sl_dataset_cardinality(s), 4);
    sl_dataset_unref(s);
    sl_dataset_unref(up);
    sl_test_rm_rf(path);
}

TEST(test_snapshot_graph_fingerprint) {
    char path[300];
    snprintf(path, sizeof path, "%s/graph", root);
    sl_dataset *up = upstream(0);
    bool same;
    ASSERT_EQ(run(up, path, NULL, 1 << 20, &same, NULL), N);
    ASSERT(same);
    ASSERT_EQ(run(up, path, NULL, 1 << 20, &same, NULL), 0);
    ASSERT(same);
    sl_dataset_unref(up);
    /* another graph shape (a batch added): another snapshot */
    up = upstream(2);
    ASSERT_EQ(run(up, path, NULL, 1 << 20, &same, NULL), N);
    ASSERT(same);
    ASSERT_EQ(entries(path, ""), 2);
    sl_dataset_unref(up);
    sl_test_rm_rf(path);
}

/* Damage the written snapshot with `damage`, then check: detected (a warning naming `file`
 * and a byte), rebuilt with the same elements, and read by the run after. */
static void damaged(sl_dataset *up, const char *path, int kind, long at, const char *file) {
    char dir[400], f[500];
    bool same;
    sl_test_rm_rf(path);
    ASSERT_EQ(run(up, path, "d", 256, &same, NULL), N);
    only_folder(path, dir, sizeof dir);
    snprintf(f, sizeof f, "%s/%s", dir, file);
    struct stat st;
    ASSERT_EQ(stat(f, &st), 0);
    if (at < 0) at += (long)st.st_size;
    if (kind == 0) { /* truncate */
        ASSERT_EQ(truncate(f, at), 0);
    } else if (kind == 1) { /* flip a byte */
        FILE *fp = fopen(f, "r+b");
        ASSERT(fp);
        fseek(fp, at, SEEK_SET);
        int ch = fgetc(fp);
        fseek(fp, at, SEEK_SET);
        fputc(ch ^ 0x20, fp);
        fclose(fp);
    } else { /* remove */
        ASSERT_EQ(unlink(f), 0);
    }
    char *log;
    int calls = run(up, path, "d", 256, &same, &log);
    ASSERT(same);
    ASSERT_EQ(calls, N);
    ASSERT_CONTAINS(log, "snapshot damaged, rebuilding it from the input");
    ASSERT_CONTAINS(log, kind == 2 && strcmp(file, "done") == 0 ? "" : f);
    if (kind != 2) ASSERT_CONTAINS(log, ": byte ");
    free(log);
    ASSERT_EQ(run(up, path, "d", 256, &same, NULL), 0);
    ASSERT(same);
    ASSERT_EQ(entries(path, ""), 1);
}

TEST(test_snapshot_damage) {
    char path[300];
    snprintf(path, sizeof path, "%s/dmg", root);
    sl_dataset *up = upstream(0);
    /* shard_bytes 256: about three elements a shard, several shards */
    const long trunc_at[] = {0, 10, 32, 40, -1, -9};
    for (int i = 0; i < 6; i++) {
        damaged(up, path, 0, trunc_at[i], "shard-00000.sls");
        damaged(up, path, 0, trunc_at[i], "shard-00001.sls");
    }
    const long flip_at[] = {0, 9, 20, 33, 36, 45, 60, 100, -3};
    for (int i = 0; i < 9; i++) {
        damaged(up, path, 1, flip_at[i], "shard-00000.sls");
        damaged(up, path, 1, flip_at[i], "shard-00002.sls");
    }
    const long man_at[] = {0, 12, 20, 40, -8, -20};
    for (int i = 0; i < 6; i++) damaged(up, path, 1, man_at[i], "done");
    damaged(up, path, 0, 30, "done");
    damaged(up, path, 2, 0, "shard-00001.sls"); /* a missing shard */
    sl_dataset_unref(up);
    sl_test_rm_rf(path);
}

TEST(test_snapshot_missing_manifest) {
    char path[300], dir[400], f[500];
    snprintf(path, sizeof path, "%s/noman", root);
    sl_dataset *up = upstream(0);
    bool same;
    ASSERT_EQ(run(up, path, "m", 1 << 20, &same, NULL), N);
    only_folder(path, dir, sizeof dir);
    snprintf(f, sizeof f, "%s/done", dir);
    ASSERT_EQ(unlink(f), 0); /* as a run that died before its manifest would look */
    ASSERT_EQ(run(up, path, "m", 1 << 20, &same, NULL), N);
    ASSERT(same);
    ASSERT_EQ(run(up, path, "m", 1 << 20, &same, NULL), 0);
    sl_dataset_unref(up);
    sl_test_rm_rf(path);
}

TEST(test_snapshot_partial_write) {
    char path[300];
    snprintf(path, sizeof path, "%s/part", root);
    sl_dataset *up = upstream(0), *s;
    ASSERT_OK(sl_ds_snapshot(up, path, "p", NULL, &s));
    sl_iter *it;
    sl_element e;
    sl_element_init(&e);
    ASSERT_OK(sl_iter_create(s, NULL, &it));
    for (int i = 0; i < N / 2; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        sl_element_clear(&e);
    }
    sl_iter_close(it); /* stopped half way: nothing kept */
    sl_dataset_unref(s);
    ASSERT_EQ(entries(path, ""), 0);
    /* a writer killed mid-write leaves its temporary folder: a later writer removes it */
    char stale[400];
    snprintf(stale, sizeof stale, "%s/0000000000000000.tmp.999999999.0", path);
    ASSERT_EQ(mkdir(stale, 0777), 0);
    bool same;
    ASSERT_EQ(run(up, path, "p", 1 << 20, &same, NULL), N);
    ASSERT(same);
    ASSERT_EQ(run(up, path, "p", 1 << 20, &same, NULL), 0);
    ASSERT(same);
    sl_dataset_unref(up);
    sl_test_rm_rf(path);
}

TEST(test_snapshot_concurrent_writers) {
    char path[300];
    snprintf(path, sizeof path, "%s/conc", root);
    sl_dataset *up = upstream(0), *s;
    ASSERT_OK(sl_ds_snapshot(up, path, "c", NULL, &s));
    sl_iter *a, *b;
    ASSERT_OK(sl_iter_create(s, NULL, &a));
    ASSERT_OK(sl_iter_create(s, NULL, &b));
    sl_element e;
    sl_element_init(&e);
    int na = 0, nb = 0;
    sl_status sa = SL_OK, sb = SL_OK;
    while (sa == SL_OK || sb == SL_OK) {
        if (sa == SL_OK && (sa = sl_iter_next(a, &e)) == SL_OK) na++, sl_element_clear(&e);
        if (sb == SL_OK && (sb = sl_iter_next(b, &e)) == SL_OK) nb++, sl_element_clear(&e);
    }
    ASSERT_EQ(sa, SL_END);
    ASSERT_EQ(sb, SL_END);
    ASSERT_EQ(na, N);
    ASSERT_EQ(nb, N);
    sl_iter_close(a);
    sl_iter_close(b);
    sl_dataset_unref(s);
    ASSERT_EQ(entries(path, ""), 1); /* one snapshot, no temporaries */
    bool same;
    ASSERT_EQ(run(up, path, "c", 1 << 20, &same, NULL), 0);
    ASSERT(same);
    sl_dataset_unref(up);
    sl_test_rm_rf(path);
}

TEST(test_snapshot_unwritable) {
    char path[300], file[300];
    snprintf(file, sizeof file, "%s/plainfile", root);
    ASSERT_EQ(sl_test_write_text(file, "x"), 0);
    snprintf(path, sizeof path, "%s/snap", file); /* under a regular file: cannot be made */
    sl_dataset *up = upstream(0);
    bool same;
    char *log;
    ASSERT_EQ(run(up, path, "u", 1 << 20, &same, &log), N);
    ASSERT(same);
    ASSERT_CONTAINS(log, "not writing a snapshot, this run goes on from its input");
    ASSERT_CONTAINS(log, file);
    free(log);
    ASSERT_EQ(run(up, path, "u", 1 << 20, &same, NULL), N); /* and again next time */
    ASSERT(same);
    unlink(file);

    /* a full disk, as a file-size limit makes it: a warning, nothing kept */
    snprintf(path, sizeof path, "%s/full", root);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 300;
    signal(SIGXFSZ, SIG_IGN);
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int calls = run(up, path, "f", 1 << 20, &same, &log);
    setrlimit(RLIMIT_FSIZE, &old);
    ASSERT_EQ(calls, N);
    ASSERT(same);
    ASSERT_CONTAINS(log, "snapshot");
    ASSERT_CONTAINS(log, "file-size limit");
    free(log);
    ASSERT_EQ(entries(path, ""), 0);
    ASSERT_EQ(run(up, path, "f", 1 << 20, &same, NULL), N); /* the next run writes it */
    ASSERT_EQ(run(up, path, "f", 1 << 20, &same, NULL), 0);
    sl_dataset_unref(up);
    sl_test_rm_rf(path);
}

TEST(test_snapshot_args) {
    sl_dataset *up = upstream(0), *s;
    ASSERT_EQ(sl_ds_snapshot(up, "", "x", NULL, &s), SL_EINVAL);
    ASSERT(s == NULL);
    sl_snapshot_opts o = sl_snapshot_opts_default();
    o.shard_bytes = 0;
    ASSERT_EQ(sl_ds_snapshot(up, "/tmp/x", "x", &o, &s), SL_EINVAL);
    sl_dataset_unref(up);
}


/* Build pipeline `p` of text (base dir root) and read it all: the elements into *v. */
static int cfg_run(const char *textcfg, sl_element **v, int *n) {
    sl_cfg *cfg;
    *v = NULL;
    *n = 0;
    if (sl_cfg_parse(textcfg, strlen(textcfg), "snap.sl", &cfg)) return -1;
    sl_pipeline_env env = sl_pipeline_env_default();
    env.base_dir = root;
    sl_dataset *ds;
    sl_status s = sl_pipeline_from_config(cfg, "p", &env, &ds);
    sl_cfg_free(cfg);
    if (s) return s;
    s = sl_test_snap_collect(ds, v, n);
    sl_dataset_unref(ds);
    return s;
}

TEST(test_snapshot_config) {
    char path[300];
    snprintf(path, sizeof path, "%s/cfgsnap", root);
    sl_element *a, *b;
    int na, nb;
    const char *c1 = "pipeline p {\n range 0 10\n batch 3\n snapshot \"cfgsnap\" shard_bytes=100\n }\n";
    const char *c1b = "pipeline p {\n  range 0 10   # the same, spaced and commented\n batch 3\n snapshot \"cfgsnap\"\n}\n";
    const char *c2 = "pipeline p {\n range 0 10\n batch 4\n snapshot \"cfgsnap\"\n }\n";
    ASSERT_EQ(cfg_run(c1, &a, &na), SL_END);
    ASSERT_EQ(na, 4);
    ASSERT_EQ(entries(path, ""), 1);
    ASSERT_EQ(cfg_run(c1b, &b, &nb), SL_END);
    ASSERT(sl_test_snap_same(a, na, b, nb));
    ASSERT_EQ(entries(path, ""), 1); /* the same fingerprint: read back */
    sl_test_snap_free(b, nb);
    ASSERT_EQ(cfg_run(c2, &b, &nb), SL_END);
    ASSERT_EQ(nb, 3);
    ASSERT_EQ(entries(path, ""), 2); /* a changed parameter: a new snapshot */
    sl_test_snap_free(b, nb);
    sl_test_snap_free(a, na);

    /* the files' identity: a rewritten file makes another fingerprint */
    char glob[300], cfgtext[800];
    ASSERT_EQ(sl_test_write_parts(glob, sizeof glob), 0);
    snprintf(cfgtext, sizeof cfgtext, "pipeline p {\n files \"%s\"\n snapshot \"filesnap\"\n }\n", glob);
    snprintf(path, sizeof path, "%s/filesnap", root);
    ASSERT_EQ(cfg_run(cfgtext, &a, &na), SL_END);
    ASSERT(na > 0);
    ASSERT_EQ(cfg_run(cfgtext, &b, &nb), SL_END);
    ASSERT(sl_test_snap_same(a, na, b, nb));
    ASSERT_EQ(entries(path, ""), 1);
    sl_test_snap_free(b, nb);
    char part[300];
    sl_test_part_path(part, sizeof part, 0);
    struct timespec ts[2] = {{0, UTIME_OMIT}, {12345, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, part, ts, 0), 0);
    ASSERT_EQ(cfg_run(cfgtext, &b, &nb), SL_END);
    ASSERT(sl_test_snap_same(a, na, b, nb));
    ASSERT_EQ(entries(path, ""), 2);
    sl_test_snap_free(b, nb);

    /* load: a saved range back as a source, with a snapshot after it */
    sl_dataset *r;
    ASSERT_OK(sl_ds_range(0, 7, 1, &r));
    char saved[300];
    snprintf(saved, sizeof saved, "%s/saved", root);
    ASSERT_OK(sl_ds_save(r, saved, NULL));
    sl_dataset_unref(r);
    sl_test_snap_free(a, na);
    ASSERT_EQ(cfg_run("pipeline p {\n load \"saved\"\n batch 2\n snapshot \"ls\"\n}\n", &a, &na), SL_END);
    ASSERT_EQ(na, 4);
    ASSERT_EQ(a[3].t[0].dims[0], 1);
    ASSERT_EQ(((int64_t *)a[3].t[0].data)[0], 6);
    sl_test_snap_free(a, na);
    ASSERT_EQ(cfg_run("pipeline p {\n load \"nothere\"\n}\n", &a, &na), SL_ENOTFOUND);
    ASSERT_CONTAINS(sl_errmsg(), "snap.sl:2");
    ASSERT_EQ(cfg_run("pipeline p {\n range 0 3\n snapshot\n}\n", &a, &na), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "missing");
}

int main(void) {
    if (!sl_test_mkdtemp(root, sizeof root, "snapshot")) return 1;
    RUN(test_snapshot_round_trip);
    RUN(test_snapshot_graph_fingerprint);
    RUN(test_snapshot_damage);
    RUN(test_snapshot_missing_manifest);
    RUN(test_snapshot_partial_write);
    RUN(test_snapshot_concurrent_writers);
    RUN(test_snapshot_unwritable);
    RUN(test_snapshot_args);
    RUN(test_snapshot_config);
    sl_test_snap_free(ref, nref);
    sl_test_rm_rf(root);
    TEST_MAIN_END();
}
