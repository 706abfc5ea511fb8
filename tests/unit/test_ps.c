/* dist/ps_plan.c and dist/ps_wire.c: the shard plan on hand-computed examples (every float
 * owned exactly once, gather/scatter round trip, the hash and what changes it, bad
 * arguments), and ps frames: a round trip for every type and a corruption test in which
 * each field broken gives SL_ECORRUPT with its byte offset. The server and client are in
 * test_ps_server.c. */
#include <math.h>

#include "sluice/ps.h"
#include "test.h"

/* Every float of the flat vector belongs to exactly one segment; each ps's segments tile
 * its shard in flat order. Returns 0 when the plan is consistent. */
static int check_cover(const sl_ps_plan *p) {
    unsigned char *seen = calloc(p->total, 1);
    size_t *fill = calloc((size_t)p->nps, sizeof *fill);
    size_t prev_end = 0;
    int bad = 0;
    for (int k = 0; k < p->nseg && !bad; k++) {
        const sl_ps_seg *s = &p->segs[k];
        if (s->ps < 0 || s->ps >= p->nps || s->len == 0 || s->offset < prev_end || s->offset + s->len > p->total) bad = 1;
        else if (s->shard_offset != fill[s->ps]) bad = 2;
        else {
            for (size_t i = s->offset; i < s->offset + s->len; i++) seen[i]++;
            fill[s->ps] += s->len;
            prev_end = s->offset + s->len;
        }
    }
    for (size_t i = 0; i < p->total && !bad; i++)
        if (seen[i] != 1) bad = 3;
    for (int j = 0; j < p->nps && !bad; j++)
        if (fill[j] != p->shard_len[j]) bad = 4;
    free(seen);
    free(fill);
    return bad;
}

static const size_t SIZES[6] = {200704, 256, 32768, 128, 1280, 10};

TEST(test_plan_one_ps) {
    sl_ps_plan *p;
    ASSERT_OK(sl_ps_plan_create(SIZES, 6, 1, 0, &p));
    ASSERT_EQ(p->nps, 1);
    ASSERT_EQ(p->total, 235146);
    ASSERT_EQ(p->nseg, 6);
    ASSERT_EQ(p->shard_len[0], 235146);
    size_t off = 0;
    for (int k = 0; k < 6; k++) {
        ASSERT_EQ(p->segs[k].ps, 0);
        ASSERT_EQ(p->segs[k].offset, off);
        ASSERT_EQ(p->segs[k].len, SIZES[k]);
        ASSERT_EQ(p->segs[k].shard_offset, off);
        off += SIZES[k];
    }
    ASSERT_EQ(check_cover(p), 0);
    ASSERT_U64(p->hash, 0xd022bd3bu); /* FNV-1a 32 computed by hand (Python) over the rule's bytes */
    sl_ps_plan_free(p);
}

TEST(test_plan_two_ps) {
    sl_ps_plan *p;
    /* default split = max(1024, 235146 / 8) = 29393: the 200704 and 32768 variables are
     * halved (116736 floats each), then 1280 -> ps 0 (tie: lower ps), 256, 128, 10 -> ps 1 */
    ASSERT_OK(sl_ps_plan_create(SIZES, 6, 2, 0, &p));
    ASSERT_EQ(p->nseg, 8);
    ASSERT_EQ(p->shard_len[0], 118016);
    ASSERT_EQ(p->shard_len[1], 117130);
    static const size_t want[8][4] = {
        {0, 0, 100352, 0},           {1, 100352, 100352, 0},      {1, 200704, 256, 100352},
        {0, 200960, 16384, 100352},  {1, 217344, 16384, 100608},  {1, 233728, 128, 116992},
        {0, 233856, 1280, 116736},   {1, 235136, 10, 117120}};
    for (int k = 0; k < 8; k++) {
        ASSERT_EQ(p->segs[k].ps, want[k][0]);
        ASSERT_EQ(p->segs[k].offset, want[k][1]);
        ASSERT_EQ(p->segs[k].len, want[k][2]);
        ASSERT_EQ(p->segs[k].shard_offset, want[k][3]);
    }
    ASSERT_EQ(check_cover(p), 0);
    ASSERT_U64(p->hash, 0x6b11c5afu);
    /* gather then scatter gives the flat vector back, and each ps sees its own floats */
    float *flat = malloc(p->total * sizeof(float)), *back = calloc(p->total, sizeof(float));
    float *s0 = malloc(p->shard_len[0] * sizeof(float)), *s1 = malloc(p->shard_len[1] * sizeof(float));
    for (size_t i = 0; i < p->total; i++) flat[i] = (float)i;
    sl_ps_plan_gather(p, 0, flat, s0);
    sl_ps_plan_gather(p, 1, flat, s1);
    ASSERT_EQ(s0[0], 0);
    ASSERT_EQ(s0[100352], 200960);
    ASSERT_EQ(s0[118015], 235135);
    ASSERT_EQ(s1[0], 100352);
    ASSERT_EQ(s1[100352], 200704);
    ASSERT_EQ(s1[117129], 235145);
    sl_ps_plan_scatter(p, 0, s0, back);
    sl_ps_plan_scatter(p, 1, s1, back);
    ASSERT_MEMEQ(back, flat, p->total * sizeof(float));
    free(flat); free(back); free(s0); free(s1);
    sl_ps_plan_free(p);
}

TEST(test_plan_rules_and_hash) {
    sl_ps_plan *p, *q;
    /* whole variables, largest first, to the ps with the fewest floats (ties: lower index) */
    size_t a[4] = {5, 3, 3, 2};
    ASSERT_OK(sl_ps_plan_create(a, 4, 2, 100, &p));
    ASSERT_EQ(p->shard_len[0], 7); /* 5, then 2 */
    ASSERT_EQ(p->shard_len[1], 6); /* 3, 3 */
    ASSERT_EQ(p->segs[0].ps, 0);
    ASSERT_EQ(p->segs[1].ps, 1);
    ASSERT_EQ(p->segs[2].ps, 1);
    ASSERT_EQ(p->segs[3].ps, 0);
    ASSERT_EQ(p->segs[3].shard_offset, 5);
    ASSERT_EQ(check_cover(p), 0);
    /* the same plan twice has the same hash; another split or ps count changes it */
    ASSERT_OK(sl_ps_plan_create(a, 4, 2, 100, &q));
    ASSERT_U64(q->hash, p->hash);
    sl_ps_plan_free(q);
    ASSERT_OK(sl_ps_plan_create(a, 4, 3, 100, &q));
    ASSERT_NE(q->hash, p->hash);
    ASSERT_EQ(check_cover(q), 0);
    sl_ps_plan_free(q);
    ASSERT_OK(sl_ps_plan_create(a, 4, 2, 4, &q)); /* 5 > 4: split 2 + 3 */
    ASSERT_NE(q->hash, p->hash);
    ASSERT_EQ(q->nseg, 5);
    ASSERT_EQ(q->segs[0].len, 2);
    ASSERT_EQ(q->segs[1].len, 3);
    ASSERT_EQ(q->shard_len[0], 2 + 3 + 2); /* its part, then 3 (tie 2 < 3), then 2 */
    ASSERT_EQ(q->shard_len[1], 3 + 3);
    ASSERT_EQ(check_cover(q), 0);
    sl_ps_plan_free(q);
    size_t b[4] = {5, 3, 3, 3};
    ASSERT_OK(sl_ps_plan_create(b, 4, 2, 100, &q));
    ASSERT_NE(q->hash, p->hash);
    sl_ps_plan_free(q);
    sl_ps_plan_free(p);
    /* equal sizes: lower variable index first; split parts: equal, the last takes the rest */
    size_t c[3] = {10, 7, 4};
    ASSERT_OK(sl_ps_plan_create(c, 3, 3, 4, &p));
    ASSERT_EQ(p->nseg, 7);
    ASSERT_EQ(p->segs[2].len, 4); /* 10 = 3 + 3 + 4 */
    ASSERT_EQ(p->segs[5].len, 3); /* 7 = 2 + 2 + 3 */
    ASSERT_EQ(p->shard_len[0], 5 + 4); /* ps 0 had 5 = the fewest (tie with ps 1) */
    ASSERT_EQ(p->shard_len[1], 5);
    ASSERT_EQ(p->shard_len[2], 7);
    ASSERT_EQ(check_cover(p), 0);
    sl_ps_plan_free(p);
    /* a split variable smaller than the ps count: the last ps takes it whole */
    size_t d[1] = {2};
    ASSERT_OK(sl_ps_plan_create(d, 1, 4, 1, &p));
    ASSERT_EQ(p->nseg, 1);
    ASSERT_EQ(p->segs[0].ps, 3);
    ASSERT_EQ(p->shard_len[0], 0);
    ASSERT_EQ(p->shard_len[3], 2);
    ASSERT_EQ(check_cover(p), 0);
    sl_ps_plan_free(p);
}

TEST(test_plan_errors) {
    sl_ps_plan *p = (sl_ps_plan *)1;
    size_t a[3] = {4, 0, 2};
    ASSERT_EQ(sl_ps_plan_create(a, 0, 2, 0, &p), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "ps plan: no variables to place");
    ASSERT(p == NULL);
    ASSERT_EQ(sl_ps_plan_create(a, 3, 2, 0, &p), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "ps plan: variable 1 has 0 floats");
    ASSERT_EQ(sl_ps_plan_create(a, 1, 0, 0, &p), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "ps plan: 0 ps tasks (need at least 1)");
    sl_ps_plan_free(NULL);
}

/* ---- frames ---- */

typedef struct frame_buf {
    sl_msg_hdr h;
    _Alignas(8) uint8_t b[SL_PS_PREFIX + 64];
    size_t len;
} frame_buf;

static void make(frame_buf *fb, int type, uint32_t status, size_t nfloats) {
    memset(fb, 0, sizeof *fb);
    fb->h = (sl_msg_hdr){.type = (uint16_t)type, .dtype = SL_DT_U8, .tensor = 1};
    sl_ps_frame f = {.plan_hash = 0xabcdef01u, .seq = 0x1122334455667788ull, .status = status};
    if (type == SL_MSG_PUSH) {
        f.value = 41;
        f.lr = 0.125f;
        fb->h.step = 41;
    }
    if (type == SL_MSG_REPLY) f.value = 7;
    sl_ps_frame_encode_prefix(&f, fb->b);
    for (size_t i = 0; i < nfloats; i++) {
        float v = (float)i - 1.5f;
        memcpy(fb->b + SL_PS_PREFIX + 4 * i, &v, 4);
    }
    fb->len = SL_PS_PREFIX + 4 * nfloats;
    fb->h.length = fb->len;
}

static sl_status dec(const frame_buf *fb, size_t shard, sl_ps_frame *f) {
    return sl_ps_frame_decode(&fb->h, fb->b, fb->len, 0xabcdef01u, shard, f);
}

TEST(test_frame_roundtrip) {
    static const int types[] = {SL_MSG_PUSH, SL_MSG_PULL, SL_MSG_REPLY, SL_MSG_HEARTBEAT, SL_MSG_INIT, SL_MSG_HELLO, SL_MSG_BYE};
    for (int k = 0; k < 7; k++) {
        int t = types[k];
        int carries = t == SL_MSG_PUSH || t == SL_MSG_INIT || t == SL_MSG_REPLY;
        frame_buf fb;
        make(&fb, t, 0, carries ? 5 : 0);
        ASSERT_EQ(fb.b[0], 'S');
        ASSERT_EQ(fb.b[3], 'S');
        sl_ps_frame f;
        ASSERT_OK(dec(&fb, carries ? 5 : 0, &f));
        ASSERT_EQ(f.type, t);
        ASSERT_EQ(f.ps, 1);
        ASSERT_U64(f.plan_hash, 0xabcdef01u);
        ASSERT_U64(f.seq, 0x1122334455667788ull);
        ASSERT_EQ(f.value, t == SL_MSG_PUSH ? 41 : t == SL_MSG_REPLY ? 7 : 0);
        ASSERT(f.lr == (t == SL_MSG_PUSH ? 0.125f : 0.0f));
        ASSERT_EQ(f.status, 0);
        ASSERT_EQ(f.n, carries ? 5 : 0);
        if (carries) {
            ASSERT(f.data == (const float *)(const void *)(fb.b + SL_PS_PREFIX));
            ASSERT(f.data[0] == -1.5f && f.data[4] == 2.5f);
        }
        /* expect_hash 0 and shard_len 0 check neither */
        ASSERT_OK(sl_ps_frame_decode(&fb.h, fb.b, fb.len, 0, 0, &f));
    }
    /* replies: UNINIT has no data, REJECT a reason, a HELLO answer may say step -1 */
    frame_buf fb;
    sl_ps_frame f;
    make(&fb, SL_MSG_REPLY, SL_PS_UNINIT, 0);
    ASSERT_OK(dec(&fb, 5, &f));
    ASSERT_EQ(f.status, SL_PS_UNINIT);
    ASSERT_EQ(f.n, 0);
    make(&fb, SL_MSG_REPLY, SL_PS_REJECT, 0);
    memcpy(fb.b + SL_PS_PREFIX, "bad plan", 8);
    fb.len += 8;
    ASSERT_OK(dec(&fb, 5, &f));
    ASSERT_EQ(f.status, SL_PS_REJECT);
    ASSERT_EQ(f.n_reason, 8);
    ASSERT(memcmp(f.reason, "bad plan", 8) == 0);
    make(&fb, SL_MSG_REPLY, SL_PS_OK, 2);
    int64_t m1 = -1;
    memcpy(fb.b + 16, &m1, 8);
    ASSERT_OK(dec(&fb, 2, &f));
    ASSERT_EQ(f.value, -1);
    ASSERT(f.sums == NULL);
    /* the version sits in the upper half of the status word; have/lack after it */
    ASSERT_EQ(fb.b[30], SL_PS_VERSION);
    ASSERT_EQ(fb.b[31], 0);
}

static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_f(frame_buf *fb, size_t at, float v) { memcpy(fb->b + at, &v, 4); }
static void put_i64(frame_buf *fb, size_t at, int64_t v) { memcpy(fb->b + at, &v, 8); }

/* The has-data pair and the SUM frames (sync rounds, lockstep epochs): encoded, decoded and
 * read back exactly. */
/* A PUSH's codec (the status field): 1..4 carry a compressed shard (sluice/compress.h),
 * handed over as bytes for the server to validate; 5 and more are refused, as is a
 * compressed payload shorter than its header. */
TEST(test_frame_compressed_push) {
    frame_buf fb;
    sl_ps_frame f;
    make(&fb, SL_MSG_PUSH, 0, 0);
    sl_ps_frame e = {.plan_hash = 0xabcdef01u, .seq = 9, .value = 41, .lr = 0.125f, .codec = SL_COMPRESS_INT8};
    sl_ps_frame_encode_prefix(&e, fb.b);
    ASSERT_EQ(fb.b[28], 2);
    ASSERT_EQ(fb.b[30], SL_PS_VERSION);
    memset(fb.b + SL_PS_PREFIX, 7, 25); /* 25 bytes: not a whole number of floats */
    fb.len = SL_PS_PREFIX + 25;
    fb.h.length = fb.len;
    ASSERT_OK(dec(&fb, 5, &f)); /* the shard length is the server's to check */
    ASSERT_EQ(f.codec, SL_COMPRESS_INT8);
    ASSERT_EQ(f.status, 0);
    ASSERT(f.data == NULL);
    ASSERT_EQ(f.n, 0);
    ASSERT(f.comp == fb.b + SL_PS_PREFIX);
    ASSERT_EQ(f.comp_len, 25);
    uint8_t again[SL_PS_PREFIX];
    sl_ps_frame_encode_prefix(&f, again);
    ASSERT_MEMEQ(again, fb.b, SL_PS_PREFIX);
    fb.len = SL_PS_PREFIX + 23;
    ASSERT_EQ(dec(&fb, 5, &f), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "byte 40: PUSH compressed data of 23 bytes is shorter than its 24-byte header");
    fb.len = SL_PS_PREFIX + 25;
    fb.b[28] = 5;
    ASSERT_EQ(dec(&fb, 5, &f), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "byte 28: PUSH codec 5 is out of range (0 float32, 1..4 compressed)");
    /* other types keep status 0 */
    make(&fb, SL_MSG_INIT, 0, 2);
    fb.b[28] = 2;
    ASSERT_EQ(dec(&fb, 2, &f), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "INIT status 2 is out of range");
}

TEST(test_frame_has_data_and_sums) {
    frame_buf fb;
    sl_ps_frame f;
    for (int k = 0; k < 3; k++) {
        make(&fb, SL_MSG_PUSH, 0, 3);
        sl_ps_frame e = {.plan_hash = 0xabcdef01u, .seq = 9, .value = 41, .lr = 0.125f, .have = k == 1, .lack = k == 2};
        sl_ps_frame_encode_prefix(&e, fb.b);
        ASSERT_OK(dec(&fb, 3, &f));
        ASSERT_EQ(f.have, k == 1);
        ASSERT_EQ(f.lack, k == 2);
        ASSERT_EQ(fb.b[32], k == 1);
        ASSERT_EQ(fb.b[36], k == 2);
    }
    /* a sync round's reply counts its workers */
    make(&fb, SL_MSG_REPLY, SL_PS_OK, 3);
    put_u32(fb.b + 32, 3);
    put_u32(fb.b + 36, 2);
    ASSERT_OK(dec(&fb, 3, &f));
    ASSERT_EQ(f.have, 3);
    ASSERT_EQ(f.lack, 2);
    /* SUM: int32 counts, any values (-1 is a NaN's bits: not a float check) */
    make(&fb, SL_MSG_SUM, 0, 0);
    put_i64(&fb, 16, 65535);
    int32_t c[3] = {-1, 13, INT32_MIN};
    memcpy(fb.b + SL_PS_PREFIX, c, sizeof c);
    fb.len += sizeof c;
    ASSERT_OK(dec(&fb, 7, &f)); /* the shard length does not apply */
    ASSERT_EQ(f.type, SL_MSG_SUM);
    ASSERT_EQ(f.value, 65535);
    ASSERT_EQ(f.n, 3);
    ASSERT(f.data == NULL);
    ASSERT(f.sums == (const int32_t *)(const void *)(fb.b + SL_PS_PREFIX));
    ASSERT(f.sums[0] == -1 && f.sums[1] == 13 && f.sums[2] == INT32_MIN);
    make(&fb, SL_MSG_REPLY, SL_PS_SUMS, 0);
    memcpy(fb.b + SL_PS_PREFIX, c, sizeof c);
    fb.len += sizeof c;
    ASSERT_OK(dec(&fb, 7, &f));
    ASSERT_EQ(f.status, SL_PS_SUMS);
    ASSERT_EQ(f.n, 3);
    ASSERT(f.sums[0] == -1);
}

/* Decode fb after letting `breakit` spoil it; expect SL_ECORRUPT and message `want`. */
#define CORRUPT(type, status, nfloats, shard, stmt, want)                         \
    do {                                                                          \
        frame_buf fb_;                                                            \
        make(&fb_, type, status, nfloats);                                        \
        { frame_buf *fb = &fb_; (void)fb; stmt; }                                 \
        sl_ps_frame f_;                                                           \
        ASSERT_EQ(dec(&fb_, shard, &f_), SL_ECORRUPT);                            \
        ASSERT_STREQ(sl_errmsg(), want);                                          \
    } while (0)


TEST(test_frame_corruption) {
    CORRUPT(SL_MSG_DATA, 0, 0, 0, (void)0, "ps frame: byte 0: message type 1 is not a ps message");
    CORRUPT(SL_MSG_PULL, 0, 0, 0, fb->h.dtype = 3, "ps frame: byte 0: PULL header has dtype 3, expected u8");
    CORRUPT(SL_MSG_PULL, 0, 0, 0, fb->h.flags = 1, "ps frame: byte 0: PULL header has flags 0x01, expected 0");
    CORRUPT(SL_MSG_PULL, 0, 0, 0, fb->h.offset = 8,
            "ps frame: byte 0: PULL header has offset 8 and round 0, expected 0");
    CORRUPT(SL_MSG_PULL, 0, 0, 0, fb->h.step = 3, "ps frame: byte 0: PULL header has step 3, expected 0");
    CORRUPT(SL_MSG_PULL, 0, 0, 0, fb->len = 31,
            "ps frame: byte 31: PULL payload of 31 bytes is shorter than the 40-byte prefix");
    CORRUPT(SL_MSG_PULL, 0, 0, 0, fb->len = 36,
            "ps frame: byte 36: PULL payload of 36 bytes is shorter than the 40-byte prefix");
    /* a version 1 frame (32-byte prefix, a 4-byte status) names the version */
    CORRUPT(SL_MSG_PULL, 0, 0, 0, (fb->b[30] = 0, fb->len = 32),
            "ps frame: byte 30: PULL frame version 0, expected 2 (a worker or ps of another Sluice version)");
    CORRUPT(SL_MSG_PUSH, 0, 3, 3, fb->b[30] = 3,
            "ps frame: byte 30: PUSH frame version 3, expected 2 (a worker or ps of another Sluice version)");
    CORRUPT(SL_MSG_PULL, 0, 0, 0, fb->b[0] = 'X',
            "ps frame: byte 0: bad magic 0x53504c58 (expected 0x53504c53 \"SLPS\")");
    CORRUPT(SL_MSG_PULL, 0, 0, 0, fb->b[4] ^= 1, "ps frame: byte 4: plan hash 0xabcdef00, expected 0xabcdef01");
    CORRUPT(SL_MSG_PUSH, 0, 3, 3, put_i64(fb, 16, -2), "ps frame: byte 16: PUSH step -2 is negative");
    CORRUPT(SL_MSG_PUSH, 0, 3, 3, fb->h.step = 40,
            "ps frame: byte 16: PUSH step 41 disagrees with the header's step 40");
    CORRUPT(SL_MSG_HELLO, 0, 0, 0, put_i64(fb, 16, 5), "ps frame: byte 16: HELLO value 5 is out of range");
    CORRUPT(SL_MSG_REPLY, 0, 3, 3, put_i64(fb, 16, -2), "ps frame: byte 16: REPLY value -2 is out of range");
    CORRUPT(SL_MSG_PUSH, 0, 3, 3, put_f(fb, 24, -1.0f),
            "ps frame: byte 24: PUSH learning rate -1 (bits 0xbf800000) is not allowed (must be finite and >= 0)");
    CORRUPT(SL_MSG_PUSH, 0, 3, 3, put_f(fb, 24, INFINITY),
            "ps frame: byte 24: PUSH learning rate inf (bits 0x7f800000) is not allowed (must be finite and >= 0)");
    CORRUPT(SL_MSG_INIT, 0, 3, 3, put_f(fb, 24, -0.0f),
            "ps frame: byte 24: INIT learning rate -0 (bits 0x80000000) is not allowed (must be 0)");
    CORRUPT(SL_MSG_REPLY, 4, 0, 3, (void)0, "ps frame: byte 28: REPLY status 4 is out of range");
    /* the has-data pair: a PUSH says 0/0, 1/0 or 0/1; a frame other than a reply none */
    CORRUPT(SL_MSG_PUSH, 0, 3, 3, put_u32(fb->b + 32, 2),
            "ps frame: byte 32: PUSH has-data pair 2/0 is not allowed (0/0, 1/0 or 0/1)");
    CORRUPT(SL_MSG_PUSH, 0, 3, 3, put_u32(fb->b + 36, 0x100),
            "ps frame: byte 36: PUSH has-data pair 0/256 is not allowed (0/0, 1/0 or 0/1)");
    CORRUPT(SL_MSG_PUSH, 0, 3, 3, (put_u32(fb->b + 32, 1), put_u32(fb->b + 36, 1)),
            "ps frame: byte 36: PUSH has-data pair 1/1 is not allowed (0/0, 1/0 or 0/1)");
    CORRUPT(SL_MSG_PULL, 0, 0, 0, put_u32(fb->b + 32, 1), "ps frame: byte 32: PULL has-data pair 1/0, expected 0/0");
    CORRUPT(SL_MSG_REPLY, SL_PS_UNINIT, 0, 3, put_u32(fb->b + 36, 1),
            "ps frame: byte 36: REPLY has-data pair 0/1, expected 0/0");
    CORRUPT(SL_MSG_INIT, 0, 3, 3, put_u32(fb->b + 32, 1), "ps frame: byte 32: INIT has-data pair 1/0, expected 0/0");
    /* SUM: a tag below 0x10000, no lr, no step, 1..SL_PS_SUM_MAX whole int32s */
    CORRUPT(SL_MSG_SUM, 0, 1, 0, put_i64(fb, 16, 65536), "ps frame: byte 16: SUM tag 65536 is out of range (0..65535)");
    CORRUPT(SL_MSG_SUM, 0, 1, 0, put_i64(fb, 16, -1), "ps frame: byte 16: SUM tag -1 is out of range (0..65535)");
    CORRUPT(SL_MSG_SUM, 0, 1, 0, fb->h.step = 3, "ps frame: byte 0: SUM header has step 3, expected 0");
    CORRUPT(SL_MSG_SUM, 0, 1, 0, put_f(fb, 24, 0.5f),
            "ps frame: byte 24: SUM learning rate 0.5 (bits 0x3f000000) is not allowed (must be 0)");
    CORRUPT(SL_MSG_SUM, 0, 0, 0, (void)0, "ps frame: byte 40: SUM carries 0 counts, expected 1..65536");
    CORRUPT(SL_MSG_SUM, 0, 2, 0, fb->len -= 1, "ps frame: byte 40: SUM data of 7 bytes is not a whole number of int32s");
    CORRUPT(SL_MSG_SUM, 0, 1, 0, put_u32(fb->b + 32, 1), "ps frame: byte 32: SUM has-data pair 1/0, expected 0/0");
    CORRUPT(SL_MSG_REPLY, SL_PS_SUMS, 0, 0, (void)0, "ps frame: byte 40: REPLY carries 0 counts, expected 1..131072");
    CORRUPT(SL_MSG_PULL, 1, 0, 0, (void)0, "ps frame: byte 28: PULL status 1 is out of range");
    CORRUPT(SL_MSG_PUSH, 0, 3, 3, fb->len -= 2,
            "ps frame: byte 40: PUSH data of 10 bytes is not a whole number of floats");
    CORRUPT(SL_MSG_PUSH, 0, 3, 4, (void)0, "ps frame: byte 40: PUSH carries 3 floats, the shard has 4");
    CORRUPT(SL_MSG_INIT, 0, 4, 0, put_f(fb, 48, NAN), "ps frame: byte 48: INIT float 2 is nan");
    CORRUPT(SL_MSG_REPLY, 0, 4, 4, put_f(fb, 52, -INFINITY), "ps frame: byte 52: REPLY float 3 is -inf");
    CORRUPT(SL_MSG_HEARTBEAT, 0, 1, 0, (void)0, "ps frame: byte 40: HEARTBEAT frame has 4 data bytes, expected none");
    CORRUPT(SL_MSG_REPLY, SL_PS_UNINIT, 1, 0, (void)0, "ps frame: byte 40: REPLY frame has 4 data bytes, expected none");
    /* *out is left alone on failure */
    frame_buf fb;
    make(&fb, SL_MSG_PULL, 0, 0);
    fb.b[0] = 0;
    sl_ps_frame f;
    memset(&f, 0x5a, sizeof f);
    ASSERT_EQ(dec(&fb, 0, &f), SL_ECORRUPT);
    ASSERT_EQ(f.type, 0x5a5a5a5a);
}

int main(void) {
    RUN(test_plan_one_ps);
    RUN(test_plan_two_ps);
    RUN(test_plan_rules_and_hash);
    RUN(test_plan_errors);
    RUN(test_frame_roundtrip);
    RUN(test_frame_has_data_and_sums);
    RUN(test_frame_compressed_push);
    RUN(test_frame_corruption);
    TEST_MAIN_END();
}
