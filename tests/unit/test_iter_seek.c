/* Starting an iterator part-way (sl_iter_create_at), its state (sl_iter_save / restore), and
 * the permutation behind the global shuffle (sl_perm). Each seeking pipeline is compared
 * with a full pass element by element, bytes included (random functions draw per element
 * position, so a wrong position shows as a different value); a pipeline with an op that
 * cannot seek gives the same elements by replaying, and says how many it replayed. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice/crc32c.h"
#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "sluice/util.h"
#include "sluice/tfrecord.h"
#include "helper_files.h"
#include "helper_iter.h"
#include "test.h"

/* A hash of an element's names, dtypes, shapes and bytes (numeric components). */
static uint64_t elem_hash(const sl_element *e) {
    uint32_t h = 0;
    for (int i = 0; i < e->n; i++) {
        h = sl_crc32c(h, e->names[i], strlen(e->names[i]));
        h = sl_crc32c(h, &e->t[i].dtype, sizeof e->t[i].dtype);
        h = sl_crc32c(h, e->t[i].dims, sizeof(e->t[i].dims[0]) * (size_t)e->t[i].rank);
        if (e->t[i].dtype == SL_DT_BYTES) { /* the strings, not their views' pointers */
            const sl_bytes *b = e->t[i].data;
            for (int64_t k = 0; k < sl_tensor_numel(&e->t[i]); k++) h = sl_crc32c(h, b[k].ptr, b[k].len);
        } else {
            h = sl_crc32c(h, e->t[i].data, sl_tensor_nbytes(&e->t[i]));
        }
    }
    return (uint64_t)h << 8 | (uint64_t)e->n;
}

/* Up to cap element hashes of ds from position `start` (sl_iter_create_at); returns the
 * count read before the end, -1 on an error. *replayed: what the iterator replayed. */
static int64_t last_refilled; /* sl_iter_refilled of hashes_from's last iterator */

static int hashes_from(sl_dataset *ds, uint64_t seed, int64_t start, uint64_t *out, int cap, int64_t *replayed) {
    sl_iter_opts o = sl_iter_opts_default();
    o.seed = seed;
    sl_iter *it;
    if (sl_iter_create_at(ds, &o, start, &it)) return -1;
    if (replayed) *replayed = sl_iter_replayed(it);
    last_refilled = sl_iter_refilled(it);
    sl_element e;
    sl_element_init(&e);
    int n = 0;
    sl_status s;
    while (n < cap && (s = sl_iter_next(it, &e)) == SL_OK) {
        out[n++] = elem_hash(&e);
        sl_element_clear(&e);
    }
    sl_iter_close(it);
    return n;
}

/* For 25 seeded random starts (and 0, the last element, the end and past it): the elements
 * from there equal the full pass's, and the iterator replayed `want_replay` (0: it seeked). */
static int64_t max_refilled; /* the most sl_iter_refilled over check_starts' starts */
static int64_t end_refilled; /* sl_iter_refilled at the start of the last element */

static void check_starts(sl_dataset *ds, bool seeks) {
    max_refilled = 0;
    enum { CAP = 4096 };
    uint64_t *full = malloc(CAP * sizeof *full), *part = malloc(CAP * sizeof *part);
    ASSERT(full && part);
    int n = hashes_from(ds, 77, 0, full, CAP, NULL);
    ASSERT(n > 10 && n < CAP);
    uint64_t rs = 5;
    for (int k = 0; k < 29; k++) {
        int64_t p = k == 0 ? 0 : k == 1 ? n - 1 : k == 2 ? n : k == 3 ? n + 5 : (int64_t)(sl_splitmix64(&rs) % (uint64_t)n);
        int64_t rep = -1;
        int m = hashes_from(ds, 77, p, part, 40, &rep);
        int want = n - p < 0 ? 0 : n - p > 40 ? 40 : (int)(n - p);
        ASSERT_EQ(m, want);
        for (int i = 0; i < m; i++) ASSERT_U64(part[i], full[p + i]);
        ASSERT_EQ(rep, seeks ? 0 : (p < n ? p : n));
        if (last_refilled > max_refilled) max_refilled = last_refilled;
        if (k == 1) end_refilled = last_refilled;
    }
    free(full);
    free(part);
}

static sl_fn *digit_fn(void) {
    sl_fn *fn;
    if (sl_fn_custom("digit", sl_test_append_digit, NULL, NULL, &fn)) return NULL;
    return fn;
}

TEST(test_map_and_fused_batch_seek) {
    sl_dataset *m, *b, *p;
    ASSERT_OK(sl_test_range_map(1000, "digit", sl_test_append_digit, NULL, 4, &m));
    check_starts(m, true);
    sl_batch_opts bo = sl_batch_opts_default(7);
    ASSERT_OK(sl_ds_batch(m, &bo, &b)); /* fused with the map: map_batch */
    ASSERT_STREQ(sl_dataset_op(b), "map_batch");
    ASSERT_OK(sl_ds_prefetch(b, 3, &p));
    check_starts(p, true);
    sl_dataset_unref(p);
    sl_dataset_unref(b);
    sl_dataset_unref(m);
}

TEST(test_chain_seek) {
    /* range | shard | skip | take | map | repeat | prefetch | batch (not fused: over prefetch) */
    sl_dataset *r, *sh, *sk, *tk, *mp, *rp, *pf, *bt;
    ASSERT_OK(sl_ds_range(0, 3000, 1, &r));
    ASSERT_OK(sl_ds_shard(r, 3, 1, &sh));
    ASSERT_OK(sl_ds_skip(sh, 5, &sk));
    ASSERT_OK(sl_ds_take(sk, 200, &tk));
    sl_fn *fn = digit_fn();
    ASSERT(fn);
    ASSERT_OK(sl_ds_map(tk, fn, 2, true, &mp));
    ASSERT_OK(sl_ds_repeat(mp, 3, &rp));
    ASSERT_OK(sl_ds_prefetch(rp, 4, &pf));
    sl_batch_opts bo = sl_batch_opts_default(9);
    ASSERT_OK(sl_ds_batch(pf, &bo, &bt));
    ASSERT_STREQ(sl_dataset_op(bt), "batch");
    check_starts(rp, true);
    check_starts(bt, true);
    sl_dataset *all[] = {bt, pf, rp, mp, tk, sk, sh, r};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) sl_dataset_unref(all[i]);
    sl_fn_unref(fn);
}

static sl_status rename_other(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)ctx;
    (void)call;
    int c = sl_element_find(e, "value");
    if (c < 0) return sl_err(SL_EINVAL, "no value");
    snprintf(e->names[c], SL_NAME_MAX, "other");
    return SL_OK;
}

TEST(test_zip_seek) {
    sl_dataset *a, *b, *bm, *z;
    ASSERT_OK(sl_test_range_map(500, "digit", sl_test_append_digit, NULL, 3, &a));
    ASSERT_OK(sl_ds_range(1000, 2000, 3, &b));
    sl_fn *fn;
    ASSERT_OK(sl_fn_custom("rename", rename_other, NULL, NULL, &fn));
    ASSERT_OK(sl_ds_map(b, fn, 1, true, &bm));
    sl_dataset *ins[2] = {a, bm};
    ASSERT_OK(sl_ds_zip(ins, 2, &z));
    check_starts(z, true);
    sl_dataset_unref(z);
    sl_dataset_unref(bm);
    sl_dataset_unref(b);
    sl_dataset_unref(a);
    sl_fn_unref(fn);
}

TEST(test_ops_that_cannot_seek_replay) {
    sl_dataset *r, *m, *f;
    ASSERT_OK(sl_ds_range(0, 800, 1, &r));
    sl_fn *fn = digit_fn();
    ASSERT(fn);
    ASSERT_OK(sl_ds_map(r, fn, 2, true, &m));
    ASSERT_OK(sl_ds_filter(m, sl_test_is_odd, NULL, &f));
    check_starts(f, false);
    /* repeat over an input of unknown length cannot seek either */
    sl_dataset *rp;
    ASSERT_OK(sl_ds_repeat(f, 2, &rp));
    check_starts(rp, false);
    sl_dataset_unref(rp);
    sl_dataset_unref(f);
    sl_dataset_unref(m);
    sl_dataset_unref(r);
    sl_fn_unref(fn);
    sl_iter *it;
    ASSERT_OK(sl_ds_range(0, 3, 1, &r));
    ASSERT_EQ(sl_iter_create_at(r, NULL, -1, &it), SL_EINVAL);
    ASSERT(it == NULL);
    sl_dataset_unref(r);
}

/* A buffer shuffle seeks: its draws replayed on positions, only its buffer read back. */
TEST(test_shuffle_seeks_by_its_draws) {
    static const int64_t buffers[] = {1, 2, 64, 799, 800, 5000};
    for (size_t k = 0; k < sizeof buffers / sizeof *buffers; k++) {
        sl_dataset *r, *sh, *m, *rp;
        ASSERT_OK(sl_ds_range(0, 800, 1, &r));
        ASSERT_OK(sl_ds_shuffle(r, buffers[k], 3, true, &sh));
        sl_fn *fn = digit_fn();
        ASSERT(fn);
        ASSERT_OK(sl_ds_map(sh, fn, 2, true, &m));
        check_starts(m, true);
        /* what is read back: the buffer and the gaps read through, far less than the start */
        if (buffers[k] == 64) ASSERT(max_refilled > 0 && max_refilled < 400);
        if (buffers[k] == 1) ASSERT(max_refilled <= 1);
        /* every epoch its own order under repeat, each seeking */
        ASSERT_OK(sl_ds_repeat(m, 3, &rp));
        check_starts(rp, true);
        sl_dataset_unref(rp);
        sl_dataset_unref(m);
        sl_dataset_unref(sh);
        sl_dataset_unref(r);
        sl_fn_unref(fn);
    }
    /* over an input that cannot seek (a filter): replayed at the shuffle, not above it */
    sl_dataset *r, *f, *sh;
    ASSERT_OK(sl_ds_range(0, 900, 1, &r));
    ASSERT_OK(sl_ds_filter(r, sl_test_is_odd, NULL, &f));
    ASSERT_OK(sl_ds_shuffle(f, 50, 9, true, &sh));
    check_starts(sh, true);
    ASSERT(max_refilled > 100); /* it read its input up to the start */
    sl_dataset_unref(sh);
    sl_dataset_unref(f);
    sl_dataset_unref(r);
}

/* TFRecord files read one after another seek by their record indexes (their length is
 * unknown to the shuffle above, which then probes for it near the end). */
TEST(test_tfrecord_and_cache_seek) {
    char dir[256], path[3][300];
    ASSERT(sl_test_mkdtemp(dir, sizeof dir, "sluice-seek"));
    static const int counts[3] = {70, 0, 131};
    for (int f = 0; f < 3; f++) {
        snprintf(path[f], sizeof path[f], "%s/part-%d.tfrecord", dir, f);
        sl_tfr_writer *w;
        sl_tfr_write_opts wo = sl_tfr_write_opts_default();
        ASSERT_OK(sl_tfr_writer_open(path[f], &wo, &w));
        for (int i = 0; i < counts[f]; i++) {
            char rec[64];
            int n = snprintf(rec, sizeof rec, "file %d record %d %.*s", f, i, i % 17, "xxxxxxxxxxxxxxxxx");
            ASSERT_OK(sl_tfr_writer_write(w, rec, (size_t)n));
        }
        ASSERT_OK(sl_tfr_writer_close(w));
    }
    const char *paths[3] = {path[0], path[1], path[2]};
    sl_dataset *t, *sh, *c, *cf;
    ASSERT_OK(sl_ds_tfrecord(paths, 3, NULL, &t));
    check_starts(t, true);
    ASSERT_EQ(max_refilled, 0);
    ASSERT_OK(sl_ds_shuffle(t, 40, 5, true, &sh));
    check_starts(sh, true);
    ASSERT(max_refilled > 0 && end_refilled >= 1 && end_refilled <= 1 + 64);
    /* a memory cache: part-way before it is filled (read through, nothing recorded), then
     * complete (skipped to the start) */
    ASSERT_OK(sl_ds_cache(sh, NULL, &c));
    uint64_t full[201], b[40];
    ASSERT_EQ(hashes_from(c, 77, 150, b, 40, NULL), 40); /* before it is filled */
    ASSERT_EQ(hashes_from(c, 77, 0, full, 201, NULL), 201); /* the pass that fills it */
    ASSERT_MEMEQ(b, full + 150, sizeof b);
    check_starts(c, true); /* complete: skipped to each start */
    char cpath[300];
    snprintf(cpath, sizeof cpath, "%s/cache.bin", dir);
    ASSERT_OK(sl_ds_cache(sh, cpath, &cf));
    ASSERT_EQ(hashes_from(cf, 77, 150, b, 40, NULL), 40);
    ASSERT_MEMEQ(b, full + 150, sizeof b);
    ASSERT(access(cpath, F_OK) != 0); /* no cache file from a pass that started part-way */
    check_starts(cf, true);
    ASSERT(access(cpath, F_OK) == 0);
    check_starts(cf, true); /* replayed from the file, skipping entry headers */
    sl_dataset_unref(cf);
    sl_dataset_unref(c);
    sl_dataset_unref(sh);
    sl_dataset_unref(t);
    /* interleave over the files, in the caller's thread and with workers, cycle 2 and 4,
     * block 1 and 16 (the cycle's walk replayed on the files' lengths), and a buffer
     * shuffle above it (which reads back its buffer only) */
    char pat[300];
    snprintf(pat, sizeof pat, "%s/part-*.tfrecord", dir);
    const char *pats[1] = {pat};
    static const int cfg[][3] = {{2, 1, 0}, {2, 16, 2}, {4, 3, 4}, {1, 5, SL_AUTO}};
    for (size_t k = 0; k < sizeof cfg / sizeof *cfg; k++) {
        sl_dataset *lf, *il, *ils;
        ASSERT_OK(sl_ds_list_files(pats, 1, false, 0, &lf));
        sl_interleave_opts io = sl_interleave_opts_default();
        io.cycle_length = cfg[k][0];
        io.block_length = cfg[k][1];
        io.parallelism = cfg[k][2];
        ASSERT_OK(sl_ds_interleave_tfrecord(lf, NULL, &io, &il));
        check_starts(il, true);
        ASSERT_EQ(max_refilled, 0);
        ASSERT_OK(sl_ds_shuffle(il, 30, 2, true, &ils));
        check_starts(ils, true);
        /* at the last element the buffer holds one: it is read back, not the 200 before it */
        ASSERT(max_refilled > 0 && end_refilled >= 1 && end_refilled <= 1 + 64);
        sl_dataset_unref(ils);
        sl_dataset_unref(il);
        sl_dataset_unref(lf);
    }
    /* a gzip file on the way cannot be indexed: replayed */
    char gz[300];
    snprintf(gz, sizeof gz, "%s/part-z.tfrecord.gz", dir);
    sl_tfr_writer *w;
    sl_tfr_write_opts wo = sl_tfr_write_opts_default();
    wo.compression = SL_COMP_GZIP;
    ASSERT_OK(sl_tfr_writer_open(gz, &wo, &w));
    for (int i = 0; i < 30; i++) ASSERT_OK(sl_tfr_writer_write(w, "gz", 2));
    ASSERT_OK(sl_tfr_writer_close(w));
    const char *zpaths[2] = {gz, path[0]};
    ASSERT_OK(sl_ds_tfrecord(zpaths, 2, NULL, &t));
    check_starts(t, false);
    sl_dataset_unref(t);
    ASSERT_EQ(sl_test_rm_rf(dir), 0);
}

TEST(test_state_round_trip_and_damage) {
    sl_dataset *m, *other;
    ASSERT_OK(sl_test_range_map(300, "digit", sl_test_append_digit, NULL, 4, &m));
    ASSERT_OK(sl_ds_range(0, 300, 1, &other));
    uint64_t full[300];
    ASSERT_EQ(hashes_from(m, 9, 0, full, 300, NULL), 300);
    sl_iter_opts o = sl_iter_opts_default();
    o.seed = 9;
    sl_iter *it;
    sl_element e;
    sl_element_init(&e);
    ASSERT_OK(sl_iter_create(m, &o, &it));
    for (int i = 0; i < 123; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_position(it), 123);
    uint8_t st[SL_ITER_STATE_SIZE + 8], st2[SL_ITER_STATE_SIZE];
    size_t len = 0;
    ASSERT_EQ(sl_iter_save(it, st, SL_ITER_STATE_SIZE - 1, &len), SL_ERANGE);
    ASSERT_EQ(len, 0);
    ASSERT_OK(sl_iter_save(it, st, sizeof st, &len));
    ASSERT_EQ(len, SL_ITER_STATE_SIZE);
    ASSERT_MEMEQ(st, "SLITSTAT", 8);
    sl_iter_close(it);
    /* restored with another seed in opts: the state's seed wins */
    sl_iter_opts o2 = sl_iter_opts_default();
    o2.seed = 1234;
    ASSERT_OK(sl_iter_restore(m, &o2, st, len, &it));
    ASSERT_EQ(sl_iter_replayed(it), 0);
    for (int i = 123; i < 300; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_U64(elem_hash(&e), full[i]);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    /* the same position saves the same bytes */
    ASSERT_OK(sl_iter_save(it, st2, sizeof st2, &len));
    sl_iter_close(it);
    ASSERT_OK(sl_iter_restore(m, NULL, st, SL_ITER_STATE_SIZE, &it));
    uint8_t st3[SL_ITER_STATE_SIZE];
    ASSERT_OK(sl_iter_save(it, st3, sizeof st3, &len));
    ASSERT_MEMEQ(st3, st, SL_ITER_STATE_SIZE);
    sl_iter_close(it);
    /* every damaged byte and every truncation is refused */
    for (int i = 0; i < SL_ITER_STATE_SIZE; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            uint8_t bad[SL_ITER_STATE_SIZE];
            memcpy(bad, st, sizeof bad);
            bad[i] ^= (uint8_t)(1u << bit);
            it = (sl_iter *)1;
            ASSERT_EQ(sl_iter_restore(m, NULL, bad, sizeof bad, &it), SL_ECORRUPT);
            ASSERT(it == NULL);
        }
    }
    for (size_t cut = 0; cut < SL_ITER_STATE_SIZE; cut++) ASSERT_EQ(sl_iter_restore(m, NULL, st, cut, &it), SL_ECORRUPT);
    ASSERT_EQ(sl_iter_restore(m, NULL, st, SL_ITER_STATE_SIZE + 1, &it), SL_ECORRUPT);
    /* another pipeline's state: another shape, or the same shape with other parameters (a
     * longer range, another function name, another shuffle seed) */
    ASSERT_EQ(sl_iter_restore(other, NULL, st, SL_ITER_STATE_SIZE, &it), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "another pipeline");
    sl_dataset *m301, *mname;
    ASSERT_OK(sl_test_range_map(301, "digit", sl_test_append_digit, NULL, 4, &m301));
    ASSERT_OK(sl_test_range_map(300, "digit2", sl_test_append_digit, NULL, 4, &mname));
    ASSERT_EQ(sl_iter_restore(m301, NULL, st, SL_ITER_STATE_SIZE, &it), SL_EINVAL);
    ASSERT_EQ(sl_iter_restore(mname, NULL, st, SL_ITER_STATE_SIZE, &it), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "the same ops with the same parameters");
    sl_dataset_unref(m301);
    sl_dataset_unref(mname);
    sl_dataset *r1, *s1, *s2;
    ASSERT_OK(sl_ds_range(0, 50, 1, &r1));
    ASSERT_OK(sl_ds_shuffle(r1, 10, 1, true, &s1));
    ASSERT_OK(sl_ds_shuffle(r1, 10, 2, true, &s2));
    ASSERT_OK(sl_iter_create_at(s1, NULL, 5, &it));
    uint8_t ss[SL_ITER_STATE_SIZE];
    ASSERT_OK(sl_iter_save(it, ss, sizeof ss, &len));
    sl_iter_close(it);
    ASSERT_EQ(sl_iter_restore(s2, NULL, ss, len, &it), SL_EINVAL);
    ASSERT_OK(sl_iter_restore(s1, NULL, ss, len, &it));
    sl_iter_close(it);
    sl_dataset_unref(s2);
    sl_dataset_unref(s1);
    sl_dataset_unref(r1);
    /* a version 1 state (its fingerprint the graph's shape only: range under map) is read */
    uint8_t v1[SL_ITER_STATE_SIZE];
    memcpy(v1, st, sizeof v1);
    sl_store_le32(v1 + 8, 1);
    uint64_t hr = sl_mix2(sl_fnv1a64(SL_FNV64_INIT, "range", 5), 0);
    sl_store_le64(v1 + 32, sl_mix2(sl_mix2(sl_fnv1a64(SL_FNV64_INIT, "map", 3), 1), hr));
    sl_store_le32(v1 + 44, sl_crc32c(0, v1, 44));
    ASSERT_OK(sl_iter_restore(m, NULL, v1, sizeof v1, &it));
    ASSERT_EQ(sl_iter_position(it), 123);
    ASSERT_OK(sl_iter_next(it, &e));
    ASSERT_U64(elem_hash(&e), full[123]);
    sl_element_clear(&e);
    sl_iter_close(it);
    sl_dataset_unref(other);
    sl_dataset_unref(m);
}

/* An error consumes its input (a batch keeps the rows before it), so after one the position
 * names no place in the stream: the state is refused, never a resume somewhere else. A
 * pipeline that skips its bad elements inside stays resumable, bit for bit. */
TEST(test_state_refused_after_an_error) {
    sl_dataset *m, *t, *b, *ig, *bi;
    ASSERT_OK(sl_test_range_map(40, "fail_mod7", sl_test_fail_mod7, NULL, 3, &m)); /* 6, 13, ... fail */
    ASSERT_OK(sl_ds_take(m, -1, &t)); /* a batch right over the map would fuse with it */
    sl_batch_opts bo = sl_batch_opts_default(4);
    ASSERT_OK(sl_ds_batch(t, &bo, &b));
    sl_iter *it;
    sl_element e;
    sl_element_init(&e);
    uint8_t st[SL_ITER_STATE_SIZE];
    size_t len = 99;
    ASSERT_OK(sl_iter_create(b, NULL, &it));
    ASSERT_OK(sl_iter_next(it, &e)); /* rows 0..3 */
    sl_element_clear(&e);
    ASSERT_OK(sl_iter_save(it, st, sizeof st, &len));
    ASSERT_EQ(len, SL_ITER_STATE_SIZE);
    ASSERT(sl_iter_next(it, &e) < 0); /* row 6 fails; 4 and 5 stay for the next batch */
    ASSERT_OK(sl_iter_next(it, &e));  /* rows 4, 5, 7, 8, where position 2 would be 8..11 */
    ASSERT_EQ(sl_test_value(&e), 4);
    sl_element_clear(&e);
    len = 99;
    ASSERT_EQ(sl_iter_save(it, st, sizeof st, &len), SL_EUNSUPPORTED);
    ASSERT_EQ(len, 0);
    ASSERT_CONTAINS(sl_errmsg(), "returned 1 error (and 2 elements)");
    sl_iter_close(it);
    /* the same pipeline with ignore_errors under the batch: its state restores to the same batches */
    ASSERT_OK(sl_ds_ignore_errors(m, &ig));
    ASSERT_OK(sl_ds_batch(ig, &bo, &bi));
    int64_t full[16];
    int n = 0;
    ASSERT_OK(sl_iter_create(bi, NULL, &it));
    while (n < 16 && sl_iter_next(it, &e) == SL_OK) {
        full[n++] = sl_test_value(&e);
        sl_element_clear(&e);
    }
    sl_iter_close(it);
    ASSERT_EQ(n, 9); /* 40 values less 6, 13, 20, 27, 34: 35, 4 a batch */
    ASSERT_OK(sl_iter_create(bi, NULL, &it));
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        sl_element_clear(&e);
    }
    ASSERT_OK(sl_iter_save(it, st, sizeof st, &len));
    sl_iter_close(it);
    ASSERT_OK(sl_iter_restore(bi, NULL, st, len, &it));
    for (int i = 3; i < n; i++) {
        ASSERT_OK(sl_iter_next(it, &e));
        ASSERT_EQ(sl_test_value(&e), full[i]);
        sl_element_clear(&e);
    }
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(bi);
    sl_dataset_unref(ig);
    sl_dataset_unref(b);
    sl_dataset_unref(t);
    sl_dataset_unref(m);
}

TEST(test_perm_is_a_bijection) {
    static const uint64_t sizes[] = {1, 2, 3, 4, 5, 7, 16, 17, 1000, 4096, 65537, 100003};
    uint8_t *seen = malloc(100003);
    ASSERT(seen);
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        uint64_t n = sizes[k];
        for (uint64_t seed = 0; seed < 3; seed++) {
            sl_perm p;
            sl_perm_init(&p, n, seed);
            memset(seen, 0, n);
            uint64_t fixed = 0;
            for (uint64_t i = 0; i < n; i++) {
                uint64_t v = sl_perm_at(&p, i);
                ASSERT(v < n);
                ASSERT_EQ(seen[v], 0);
                seen[v] = 1;
                fixed += v == i;
            }
            if (n >= 1000) ASSERT(fixed < 20); /* about 1 expected */
        }
    }
    /* seeds give different orders; one seed the same order every time */
    sl_perm a, b, c;
    sl_perm_init(&a, 1000, 1);
    sl_perm_init(&b, 1000, 2);
    sl_perm_init(&c, 1000, 1);
    int same = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        same += sl_perm_at(&a, i) == sl_perm_at(&b, i);
        ASSERT_U64(sl_perm_at(&a, i), sl_perm_at(&c, i));
    }
    ASSERT(same < 20);
    /* fixed values: the order is part of the format of a run (resume across versions) */
    sl_perm_init(&a, 10, 42);
    uint64_t got[10];
    for (int i = 0; i < 10; i++) got[i] = sl_perm_at(&a, (uint64_t)i);
    printf("  perm(10, seed 42): %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu\n", (unsigned long long)got[0],
           (unsigned long long)got[1], (unsigned long long)got[2], (unsigned long long)got[3],
           (unsigned long long)got[4], (unsigned long long)got[5], (unsigned long long)got[6],
           (unsigned long long)got[7], (unsigned long long)got[8], (unsigned long long)got[9]);
    free(seen);
}

int main(void) {
    RUN(test_map_and_fused_batch_seek);
    RUN(test_chain_seek);
    RUN(test_zip_seek);
    RUN(test_ops_that_cannot_seek_replay);
    RUN(test_shuffle_seeks_by_its_draws);
    RUN(test_tfrecord_and_cache_seek);
    RUN(test_state_round_trip_and_damage);
    RUN(test_state_refused_after_an_error);
    RUN(test_perm_is_a_bijection);
    TEST_MAIN_END();
}
