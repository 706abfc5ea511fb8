/* formats/idx.c: round trips (plain and gzip, several dtypes and ranks), the real
 * Fashion-MNIST files (values checked with Python's gzip module), and corruption with the
 * exact status and byte offset. */
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zlib.h>

#include "sluice/idx.h"
#include "helper_files.h"
#include "test.h"

#define FMNIST "/usr/share/datasets/fashion-mnist/"

static char tmp_path[256];
static const char *tmp(const char *name) {
    snprintf(tmp_path, sizeof tmp_path, "/tmp/sl_test_idx_%d_%s", (int)getpid(), name);
    return tmp_path;
}

static int file_exists(const char *p) { return access(p, R_OK) == 0; }

static void roundtrip(sl_dtype dt, int rank, const int64_t *dims, bool gz, const char *name) {
    sl_tensor t = SL_TENSOR_EMPTY, r = SL_TENSOR_EMPTY;
    ASSERT_OK(sl_tensor_alloc(&t, dt, rank, dims));
    size_t nb = sl_tensor_nbytes(&t), n = (size_t)sl_tensor_numel(&t);
    for (size_t i = 0; i < n; i++) {
        switch (dt) {
        case SL_DT_U8: ((uint8_t *)t.data)[i] = (uint8_t)(i * 7 + 3); break;
        case SL_DT_I8: ((int8_t *)t.data)[i] = (int8_t)(i * 7 - 100); break;
        case SL_DT_I16: ((int16_t *)t.data)[i] = (int16_t)(i * 1001 - 30000); break;
        case SL_DT_I32: ((int32_t *)t.data)[i] = (int32_t)(i * 2654435761u); break;
        case SL_DT_F32: ((float *)t.data)[i] = (float)i * -0.37f + 1e-3f; break;
        case SL_DT_F64: ((double *)t.data)[i] = (double)i * 3.14159e10; break;
        default: break;
        }
    }
    const char *p = tmp(name);
    ASSERT_OK(sl_idx_write(p, &t, gz));
    FILE *f = fopen(p, "rb");
    ASSERT(f);
    uint8_t head[4];
    ASSERT_EQ(fread(head, 1, 4, f), 4);
    fclose(f);
    if (gz) {
        ASSERT_EQ(head[0], 0x1f);
        ASSERT_EQ(head[1], 0x8b);
    } else {
        ASSERT_EQ(head[0], 0);
        ASSERT_EQ(head[1], 0);
        ASSERT_EQ(head[3], rank);
    }
    ASSERT_OK(sl_idx_read(p, &r));
    ASSERT_EQ(r.dtype, dt);
    ASSERT_EQ(r.rank, rank);
    for (int i = 0; i < rank; i++)
        ASSERT_EQ(r.dims[i], dims[i]);
    ASSERT_EQ(sl_tensor_nbytes(&r), nb);
    ASSERT_MEMEQ(r.data, t.data, nb);
    unlink(p);
    sl_tensor_release(&t);
    sl_tensor_release(&r);
}

TEST(test_roundtrips) {
    int64_t d1[] = {1000}, d3[] = {7, 28, 29}, d2[] = {13, 5}, d0[] = {0, 4};
    roundtrip(SL_DT_U8, 1, d1, false, "u8r1");
    roundtrip(SL_DT_U8, 1, d1, true, "u8r1.gz");
    roundtrip(SL_DT_U8, 3, d3, false, "u8r3");
    roundtrip(SL_DT_U8, 3, d3, true, "u8r3.gz");
    roundtrip(SL_DT_I32, 2, d2, false, "i32");
    roundtrip(SL_DT_I32, 3, d3, true, "i32.gz");
    roundtrip(SL_DT_F32, 2, d2, false, "f32");
    roundtrip(SL_DT_F32, 3, d3, true, "f32.gz");
    roundtrip(SL_DT_I8, 1, d1, false, "i8");
    roundtrip(SL_DT_I16, 2, d2, true, "i16.gz");
    roundtrip(SL_DT_F64, 2, d2, false, "f64");
    roundtrip(SL_DT_U8, 2, d0, true, "empty.gz");
}

/* The byte layout is big-endian, independently of how we read it back. */
TEST(test_write_layout) {
    sl_tensor t = SL_TENSOR_EMPTY;
    int64_t dims[] = {2};
    ASSERT_OK(sl_tensor_alloc(&t, SL_DT_I32, 1, dims));
    ((int32_t *)t.data)[0] = 0x01020304;
    ((int32_t *)t.data)[1] = -2;
    const char *p = tmp("layout");
    ASSERT_OK(sl_idx_write(p, &t, false));
    FILE *f = fopen(p, "rb");
    uint8_t b[32];
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    const uint8_t want[] = {0, 0, 0x0C, 1, 0, 0, 0, 2, 1, 2, 3, 4, 0xff, 0xff, 0xff, 0xfe};
    ASSERT_EQ(n, sizeof want);
    ASSERT_MEMEQ(b, want, sizeof want);
    sl_tensor r = SL_TENSOR_EMPTY;
    ASSERT_OK(sl_idx_read_mem(want, sizeof want, "mem", &r));
    ASSERT_EQ(((int32_t *)r.data)[0], 0x01020304);
    ASSERT_EQ(((int32_t *)r.data)[1], -2);
    sl_tensor_release(&r);
    const uint8_t fl[] = {0, 0, 0x0D, 1, 0, 0, 0, 1, 0x3f, 0xc0, 0, 0}; /* 1.5f */
    ASSERT_OK(sl_idx_read_mem(fl, sizeof fl, "mem", &r));
    ASSERT_EQ(r.dtype, SL_DT_F32);
    ASSERT(((float *)r.data)[0] == 1.5f);
    sl_tensor_release(&r);
    /* unsupported dtypes and ranks on write */
    t.dtype = SL_DT_I64;
    ASSERT_EQ(sl_idx_write(p, &t, false), SL_EINVAL);
    t.dtype = SL_DT_I32;
    t.rank = 0;
    ASSERT_EQ(sl_idx_write(p, &t, false), SL_EINVAL);
    t.rank = 1;
    ASSERT_EQ(sl_idx_write("/nonexistent-dir/x.idx", &t, false), SL_ENOTFOUND);
    unlink(p);
    sl_tensor_release(&t);
}

TEST(test_fashion_mnist) {
    if (!file_exists(FMNIST "train-labels-idx1-ubyte.gz"))
        SKIP("dataset-fashion-mnist is not installed (" FMNIST ")");
    sl_tensor t = SL_TENSOR_EMPTY;
    ASSERT_OK(sl_idx_read(FMNIST "train-labels-idx1-ubyte.gz", &t));
    ASSERT_EQ(t.dtype, SL_DT_U8);
    ASSERT_EQ(t.rank, 1);
    ASSERT_EQ(t.dims[0], 60000);
    const uint8_t first[] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5}; /* python3 gzip: d[8:18] */
    ASSERT_MEMEQ(t.data, first, sizeof first);
    sl_tensor_release(&t);

    ASSERT_OK(sl_idx_read(FMNIST "train-images-idx3-ubyte.gz", &t));
    ASSERT_EQ(t.dtype, SL_DT_U8);
    ASSERT_EQ(t.rank, 3);
    ASSERT_EQ(t.dims[0], 60000);
    ASSERT_EQ(t.dims[1], 28);
    ASSERT_EQ(t.dims[2], 28);
    const uint8_t *px = t.data;
    uint64_t sum0 = 0, all = 0;
    for (int i = 0; i < 784; i++)
        sum0 += px[i];
    for (size_t i = 0; i < 60000u * 784u; i++)
        all += px[i];
    ASSERT_EQ(sum0, 76247);        /* python3: sum(d[16:16+784]) */
    ASSERT_EQ(all, 3431114169ull); /* python3: sum(d[16:]) */
    const uint8_t row14[] = {0, 0, 1, 4, 6, 7, 2, 0, 0, 0, 0, 0, 237, 226};
    ASSERT_MEMEQ(px + 28 * 14, row14, sizeof row14);
    sl_tensor_release(&t);

    ASSERT_OK(sl_idx_read(FMNIST "t10k-labels-idx1-ubyte.gz", &t));
    ASSERT_EQ(t.dims[0], 10000);
    const uint8_t tfirst[] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
    ASSERT_MEMEQ(t.data, tfirst, sizeof tfirst);
    sl_tensor_release(&t);
    ASSERT_OK(sl_idx_read(FMNIST "t10k-images-idx3-ubyte.gz", &t));
    ASSERT_EQ(t.dims[0], 10000);
    ASSERT_EQ(t.dims[1], 28);
    all = 0;
    for (size_t i = 0; i < 10000u * 784u; i++)
        all += ((uint8_t *)t.data)[i];
    ASSERT_EQ(all, 573469082ull);
    sl_tensor_release(&t);
}

/* A gzip of `p` in memory (zlib's compress with a gzip wrapper). */
static size_t gzip_mem(const uint8_t *p, size_t n, uint8_t *out, size_t cap) {
    z_stream z = {0};
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return 0;
    z.next_in = (Bytef *)p;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    int r = deflate(&z, Z_FINISH);
    size_t len = cap - z.avail_out;
    deflateEnd(&z);
    return r == Z_STREAM_END ? len : 0;
}

TEST(test_corruption) {
    sl_tensor t = SL_TENSOR_EMPTY;
    /* 2x3 uint8 */
    const uint8_t good[] = {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6};
    ASSERT_OK(sl_idx_read_mem(good, sizeof good, "g", &t));
    ASSERT_EQ(t.dims[1], 3);
    ASSERT_EQ(((uint8_t *)t.data)[5], 6);
    sl_tensor_release(&t);

    uint8_t b[sizeof good];
    memcpy(b, good, sizeof b);
    b[1] = 1;
    ASSERT_EQ(sl_idx_read_mem(b, sizeof b, "bad.idx", &t), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "bad.idx: byte 0: bad idx magic 00 01 08 02");
    ASSERT_EQ(t.dtype, SL_DT_INVALID);
    ASSERT(t.buf == NULL);

    memcpy(b, good, sizeof b);
    b[2] = 0x0A;
    ASSERT_EQ(sl_idx_read_mem(b, sizeof b, "bad.idx", &t), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "bad.idx: byte 2: bad idx type 0x0a");

    memcpy(b, good, sizeof b);
    b[3] = 0;
    ASSERT_EQ(sl_idx_read_mem(b, sizeof b, "bad.idx", &t), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "bad.idx: byte 3: bad idx rank 0");

    memcpy(b, good, sizeof b);
    b[3] = 9;
    ASSERT_EQ(sl_idx_read_mem(b, sizeof b, "r9.idx", &t), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_errmsg(), "r9.idx: byte 3: idx rank 9 is valid but tensors have at most 8");

    /* truncated data: 5 of 6 bytes */
    ASSERT_EQ(sl_idx_read_mem(good, sizeof good - 1, "trunc.idx", &t), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "trunc.idx: byte 17: idx dimensions need 6 data bytes after the "
                    "12-byte header, the file has 5");
    ASSERT_CONTAINS(sl_errmsg(), "HINT: the file is truncated");
    /* truncated header */
    ASSERT_EQ(sl_idx_read_mem(good, 10, "h.idx", &t), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "h.idx: byte 10: truncated idx header: 6 of 8 dimension bytes");
    ASSERT_EQ(sl_idx_read_mem(good, 3, "h.idx", &t), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "h.idx: byte 3: truncated idx header: 3 of 4 magic bytes");
    ASSERT_EQ(sl_idx_read_mem(good, 0, "h.idx", &t), SL_ECORRUPT);
    /* trailing bytes */
    uint8_t longer[sizeof good + 2];
    memcpy(longer, good, sizeof good);
    longer[sizeof good] = longer[sizeof good + 1] = 7;
    ASSERT_EQ(sl_idx_read_mem(longer, sizeof longer, "long.idx", &t), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "long.idx: byte 18: idx dimensions need 6 data bytes after the "
                    "12-byte header, the file has 8");
    /* dims whose product overflows */
    const uint8_t huge[] = {0, 0, 0x0E, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                            0xff, 0xff, 0xff, 0xff, 1, 2, 3};
    ASSERT_EQ(sl_idx_read_mem(huge, sizeof huge, "huge.idx", &t), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "huge.idx: byte 4: idx dimensions multiply to more than 2^63");
    /* ... also when another dim is 0 (this one crashed the fuzzer through an int64 overflow) */
    const uint8_t zero[] = {0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
    ASSERT_EQ(sl_idx_read_mem(zero, sizeof zero, "zero.idx", &t), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "zero.idx: byte 4: idx dimensions multiply to more than 2^63");
    const uint8_t zero_ok[] = {0, 0, 8, 3, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    ASSERT_OK(sl_idx_read_mem(zero_ok, sizeof zero_ok, "zero_ok.idx", &t));
    ASSERT_EQ(t.dims[0], 65535);
    ASSERT_EQ(t.dims[1], 0);
    ASSERT_EQ(sl_tensor_numel(&t), 0);
    sl_tensor_release(&t);

    /* gzip: truncated data inside a complete stream, offsets into the decompressed data */
    uint8_t gz[256];
    size_t gn = gzip_mem(good, sizeof good - 2, gz, sizeof gz);
    ASSERT(gn > 0);
    ASSERT_EQ(sl_idx_read_mem(gz, gn, "t.idx.gz", &t), SL_ECORRUPT);
    ASSERT_STREQ(sl_errmsg(), "t.idx.gz: byte 16: idx data is truncated: 4 of 6 data bytes "
                 "(offsets count decompressed bytes)\n---> HINT: the file is truncated");
    /* gzip: extra data */
    gn = gzip_mem(longer, sizeof longer, gz, sizeof gz);
    ASSERT_EQ(sl_idx_read_mem(gz, gn, "x.idx.gz", &t), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "x.idx.gz: byte 18: idx data goes on past the 6 bytes the "
                    "dimensions give (offsets count decompressed bytes)");
    /* gzip: the stream itself cut short */
    gn = gzip_mem(good, sizeof good, gz, sizeof gz);
    ASSERT_OK(sl_idx_read_mem(gz, gn, "ok.gz", &t));
    sl_tensor_release(&t);
    ASSERT_EQ(sl_idx_read_mem(gz, gn - 5, "cut.gz", &t), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "gzip stream is truncated");
    for (size_t n = 0; n < gn; n++) /* every cut: never OK, never a crash */
        ASSERT_EQ(sl_idx_read_mem(gz, n, "cut.gz", &t), SL_ECORRUPT);
    /* gzip: a damaged byte in the deflate data or CRC */
    gz[gn - 6] ^= 0x55;
    ASSERT_EQ(sl_idx_read_mem(gz, gn, "crc.gz", &t), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "gzip stream is damaged");
    /* a gzip header claiming more data than the stream could inflate to */
    const uint8_t big[] = {0, 0, 8, 1, 0x7f, 0xff, 0xff, 0xff};
    gn = gzip_mem(big, sizeof big, gz, sizeof gz);
    ASSERT_EQ(sl_idx_read_mem(gz, gn, "big.gz", &t), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "big.gz: byte 8: idx dimensions need 2147483647 data bytes");

    /* a truncated real-size file on disk: path in the message */
    const char *p = tmp("trunc_file");
    ASSERT_EQ(sl_test_write_file(p, good, sizeof good - 3), 0);
    ASSERT_EQ(sl_idx_read(p, &t), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), p);
    ASSERT_CONTAINS(sl_errmsg(), ": byte 15: idx dimensions need 6");
    unlink(p);
}

TEST(test_not_found) {
    sl_tensor t = SL_TENSOR_EMPTY;
    ASSERT_EQ(sl_idx_read("/nonexistent/train-images-idx3-ubyte", &t), SL_ENOTFOUND);
    ASSERT_CONTAINS(sl_errmsg(), "idx file '/nonexistent/train-images-idx3-ubyte': no such file");
    ASSERT_EQ(t.dtype, SL_DT_INVALID);
    /* not regular files: refused at once, saying what they are (was SL_EIO) */
    ASSERT_EQ(sl_idx_read("/tmp", &t), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "idx file '/tmp': is a directory, not a regular file");
    ASSERT_EQ(sl_idx_read(NULL, &t), SL_EINVAL);
}

/* Issue 11 item 10a: a FIFO blocked open() for ever; refused at once now, for reading and
 * for writing (a child with 10 s before SIGALRM, so old code fails instead of hanging). */
TEST(test_fifo_refused) {
    char fifo[64];
    snprintf(fifo, sizeof fifo, "/tmp/sluice-test-idx-fifo-%d", (int)getpid());
    unlink(fifo);
    ASSERT_EQ(mkfifo(fifo, 0600), 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        sl_tensor t = SL_TENSOR_EMPTY;
        if (sl_idx_read(fifo, &t) != SL_EINVAL || !strstr(sl_errmsg(), "is a FIFO")) _exit(1);
        int64_t dims[1] = {3};
        if (sl_tensor_alloc(&t, SL_DT_U8, 1, dims)) _exit(2);
        memset(t.data, 1, 3);
        if (sl_idx_write(fifo, &t, false) != SL_EINVAL || !strstr(sl_errmsg(), "is a FIFO")) _exit(3);
        sl_tensor_release(&t);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    unlink(fifo);
    ASSERT(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);
}

int main(void) {
    RUN(test_roundtrips);
    RUN(test_write_layout);
    RUN(test_fashion_mnist);
    RUN(test_corruption);
    RUN(test_not_found);
    RUN(test_fifo_refused);
    TEST_MAIN_END();
}
