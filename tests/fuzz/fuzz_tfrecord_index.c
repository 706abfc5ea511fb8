/* libFuzzer target for the record index (sluice/tfrecord_index.h). The input is parsed as an
 * index file three ways: as it is; with its fixed fields forced right (magic, version,
 * header size, count for its length, checksum), so the offsets, the skipped count and the
 * file size behind a good checksum are what gets fuzzed; and with an identity to match.
 * Every accepted index must hold its promises (offsets strictly increasing, at least 16
 * apart, each record's framing inside the file) and serialize back to exactly the bytes
 * parsed; every refusal is SL_ECORRUPT with no index. The input is also indexed as
 * TFRecord bytes, strict and skipping, and checked against the reader's own offsets and
 * through a serialize/parse round trip. Seeds: tests/fuzz/seeds/tfrecord_index/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/crc32c.h"
#include "sluice/tfrecord.h"
#include "sluice/tfrecord_index.h"
#include "sluice/util.h"

static void check(int cond) {
    if (!cond) abort();
}

static sl_tfr_file_id id_of(const uint8_t *b) {
    return (sl_tfr_file_id){sl_load_le64(b + 16), sl_load_le64(b + 24), sl_load_le64(b + 32), sl_load_le32(b + 40),
                            sl_load_le32(b + 44)};
}

/* Parse b[0, len); an accepted index is checked and serialized back. */
static void parse_one(const uint8_t *b, size_t len, const sl_tfr_file_id *want) {
    sl_tfr_index *ix = (sl_tfr_index *)1;
    sl_status s = sl_tfr_index_parse(b, len, "fuzz", want, &ix);
    if (s != SL_OK) {
        check(s == SL_ECORRUPT || s == SL_ENOMEM);
        check(ix == NULL);
        return;
    }
    check(len >= 68);
    sl_tfr_file_id id = id_of(b);
    int64_t n = sl_tfr_index_count(ix);
    check(n >= 0 && (uint64_t)n == (len - 68) / 8);
    check(!sl_tfr_index_built(ix) && !sl_tfr_index_cached(ix));
    check(sl_tfr_index_skipped(ix) <= id.size);
    for (int64_t i = 0; i < n; i++) {
        uint64_t off = sl_tfr_index_offset(ix, i);
        check(id.size >= 16 && off <= id.size - 16);
        if (i) check(off >= sl_tfr_index_offset(ix, i - 1) + 16);
        else if (sl_tfr_index_skipped(ix) == 0) check(off == 0);
    }
    check(sl_tfr_index_offset(ix, n) == UINT64_MAX);
    uint8_t *out;
    size_t olen;
    if (sl_tfr_index_serialize(ix, &id, &out, &olen) == SL_OK) {
        check(olen == len && memcmp(out, b, len) == 0);
        free(out);
    }
    sl_tfr_index_free(ix);
}

/* The input's bytes with the fixed fields made right, cut to a whole number of offsets. */
static void parse_fixed(const uint8_t *data, size_t size) {
    if (size < 68) return;
    size_t len = 68 + (size - 68) / 8 * 8;
    uint8_t *b = malloc(len);
    if (!b) return;
    memcpy(b, data, len);
    memcpy(b, "SLTFRIDX", 8);
    sl_store_le32(b + 8, 1);
    sl_store_le32(b + 12, 64);
    sl_store_le64(b + 48, (len - 68) / 8);
    sl_store_le32(b + len - 4, sl_crc32c(0, b, len - 4));
    parse_one(b, len, NULL);
    sl_tfr_file_id id = id_of(b);
    parse_one(b, len, &id);
    id.crc_tail ^= 1;
    sl_tfr_index *ix = (sl_tfr_index *)1;
    check(sl_tfr_index_parse(b, len, "fuzz", &id, &ix) == SL_ECORRUPT && ix == NULL); /* stale */
    free(b);
}

/* The input as TFRecord bytes. Strict: the index is what the strict reader reads without
 * data CRCs (the same framing checks), and it fails exactly where the reader does. Skip:
 * a file with whole framing is indexed in full (the reader, checking data CRCs, returns
 * some of those records); one with broken framing gets exactly the skipping reader's. */
static void build_one(const uint8_t *data, size_t size, bool skip) {
    sl_tfr_index *ix = (sl_tfr_index *)1;
    sl_status s = sl_tfr_index_build_mem(data, size, "fuzz", skip, &ix);
    check(s == SL_OK || s == SL_ENOMEM || (!skip && s == SL_ECORRUPT));
    if (s) check(ix == NULL);
    if (s == SL_ENOMEM) return;
    sl_tfr_read_opts ro = sl_tfr_read_opts_default();
    ro.compression = SL_COMP_NONE;
    ro.skip_corrupt = skip;
    ro.verify_data_crc = skip;
    sl_tfr_reader *r;
    if (sl_tfr_reader_open_mem(data, size, "fuzz", &ro, &r) != SL_OK) {
        sl_tfr_index_free(ix);
        return;
    }
    sl_record rec;
    int64_t i = 0;
    bool same = true;
    sl_status rs;
    while ((rs = sl_tfr_reader_next(r, &rec)) == SL_OK) {
        if (s == SL_OK && sl_tfr_index_offset(ix, i) != rec.offset) same = false;
        i++;
    }
    sl_tfr_reader_close(r);
    if (s != SL_OK) {
        check(rs == SL_ECORRUPT);
        return;
    }
    check(sl_tfr_index_built(ix) && !sl_tfr_index_cached(ix));
    check(rs == SL_END);
    if (skip && sl_tfr_index_skipped(ix) == 0) check(i <= sl_tfr_index_count(ix));
    else check(same && i == sl_tfr_index_count(ix));
    if (!skip) check(sl_tfr_index_skipped(ix) == 0);
    uint8_t *b;
    size_t len;
    if (sl_tfr_index_serialize(ix, NULL, &b, &len) == SL_OK) {
        sl_tfr_index *back;
        check(sl_tfr_index_parse(b, len, "fuzz", NULL, &back) == SL_OK);
        check(sl_tfr_index_count(back) == sl_tfr_index_count(ix));
        check(sl_tfr_index_skipped(back) == sl_tfr_index_skipped(ix));
        for (int64_t k = 0; k < sl_tfr_index_count(ix); k++)
            check(sl_tfr_index_offset(back, k) == sl_tfr_index_offset(ix, k));
        sl_tfr_index_free(back);
        free(b);
    }
    sl_tfr_index_free(ix);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* An exact-size copy, so ASan catches a read one past the end. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    parse_one(copy, size, NULL);
    if (size >= 68) {
        sl_tfr_file_id id = id_of(copy);
        parse_one(copy, size, &id);
    }
    parse_fixed(copy, size);
    build_one(copy, size, false);
    build_one(copy, size, true);
    free(copy);
    return 0;
}
