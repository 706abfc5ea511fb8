/* core/file.c: regular files open; FIFOs, directories, devices and sockets are refused at
 * once (never block); whole-file reads stop at their limit; sl_mkdirs makes a path's
 * missing folders and names the part it could not make. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "helper_files.h"
#include "sluice/file.h"
#include "test.h"

static char dir[256];

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/sl_test_file_%d", (int)getpid());
    mkdir(dir, 0700);
}

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

TEST(test_regular_file_opens) {
    char p[300];
    path_of(p, sizeof p, "reg");
    FILE *f = fopen(p, "wb");
    ASSERT(f);
    fputs("hello", f);
    fclose(f);
    int fd;
    uint64_t size = 0;
    ASSERT_EQ(sl_file_open_read(p, "test file", &fd, &size), SL_OK);
    ASSERT(fd >= 0);
    ASSERT_EQ(size, 5);
    ASSERT_EQ(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    close(fd);
    char *data;
    size_t len;
    ASSERT_EQ(sl_file_read_all(p, NULL, 5, NULL, &data, &len), SL_OK);
    ASSERT_EQ(len, 5);
    ASSERT_STREQ(data, "hello");
    free(data);
    ASSERT_EQ(sl_file_read_all(p, "config", 4, "raise it with --max", &data, &len), SL_ERANGE);
    ASSERT(data == NULL && len == 0);
    ASSERT(strstr(sl_errmsg(), "is 5 bytes, more than the limit of 4"));
    ASSERT(strstr(sl_errmsg(), "HINT: raise it with --max"));
}

TEST(test_fifo_refused_without_blocking) {
    char p[300];
    path_of(p, sizeof p, "fifo");
    unlink(p);
    ASSERT_EQ(mkfifo(p, 0600), 0);
    int fd = 123;
    ASSERT_EQ(sl_file_open_read(p, "TFRecord file", &fd, NULL), SL_EINVAL);
    ASSERT_EQ(fd, -1);
    ASSERT(strstr(sl_errmsg(), "is a FIFO (named pipe), not a regular file"));
    ASSERT(strstr(sl_errmsg(), p));
    ASSERT_EQ(sl_file_open_write(p, O_WRONLY | O_CREAT | O_TRUNC, 0666, "stats file", &fd), SL_EINVAL);
    ASSERT(strstr(sl_errmsg(), "FIFO"));
    char *data;
    size_t len;
    ASSERT_EQ(sl_file_read_all(p, "config", 100, NULL, &data, &len), SL_EINVAL);
    ASSERT_EQ(sl_file_check_regular(p, NULL), SL_EINVAL);
    unlink(p);
}

TEST(test_directory_device_socket_refused) {
    int fd;
    ASSERT_EQ(sl_file_open_read(dir, "checkpoint", &fd, NULL), SL_EINVAL);
    ASSERT(strstr(sl_errmsg(), "is a directory, not a regular file"));
    ASSERT_EQ(sl_file_open_read("/dev/zero", "stats file", &fd, NULL), SL_EINVAL);
    ASSERT(strstr(sl_errmsg(), "is a character device"));
    FILE *f = (FILE *)1;
    ASSERT_EQ(sl_file_fopen_read("/dev/null", NULL, &f), SL_EINVAL);
    ASSERT(f == NULL);
    ASSERT_EQ(sl_file_fopen_write(dir, "w", NULL, &f), SL_EINVAL);
    char p[300];
    path_of(p, sizeof p, "sock");
    unlink(p);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", p);
    ASSERT_EQ(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    ASSERT_EQ(sl_file_open_read(p, NULL, &fd, NULL), SL_EINVAL);
    ASSERT(strstr(sl_errmsg(), "is a socket"));
    close(s);
    unlink(p);
    path_of(p, sizeof p, "missing");
    ASSERT_EQ(sl_file_open_read(p, NULL, &fd, NULL), SL_ENOTFOUND);
    ASSERT(strstr(sl_errmsg(), "no such file"));
}

TEST(test_write_truncates_only_regular) {
    char p[300];
    path_of(p, sizeof p, "w");
    FILE *f;
    ASSERT_EQ(sl_file_fopen_write(p, "w", NULL, &f), SL_OK);
    fputs("abcdef", f);
    fclose(f);
    ASSERT_EQ(sl_file_fopen_write(p, "a", NULL, &f), SL_OK);
    fputs("g", f);
    fclose(f);
    char *data;
    size_t len;
    ASSERT_EQ(sl_file_read_all(p, NULL, 100, NULL, &data, &len), SL_OK);
    ASSERT_STREQ(data, "abcdefg");
    free(data);
    ASSERT_EQ(sl_file_fopen_write(p, "w", NULL, &f), SL_OK);
    fclose(f);
    ASSERT_EQ(sl_file_read_all(p, NULL, 100, NULL, &data, &len), SL_OK);
    ASSERT_EQ(len, 0);
    free(data);
    unlink(p);
}

/* sl_mkdirs: every missing part made, an existing folder fine, and each refusal naming the
 * part that is in the way and what it is. */
TEST(test_mkdirs) {
    char base[300], p[700], want[1600];
    path_of(base, sizeof base, "mk");
    snprintf(p, sizeof p, "%s/a/b/c", base);
    ASSERT_OK(sl_mkdirs(p, "run folder"));
    struct stat st;
    ASSERT(stat(p, &st) == 0 && S_ISDIR(st.st_mode));
    ASSERT_OK(sl_mkdirs(p, "run folder")); /* there already */
    snprintf(p, sizeof p, "%s/a//d/", base); /* doubled and trailing slashes */
    ASSERT_OK(sl_mkdirs(p, NULL));
    snprintf(p, sizeof p, "%s/a/d", base);
    ASSERT(stat(p, &st) == 0 && S_ISDIR(st.st_mode));
    ASSERT_EQ(sl_mkdirs("", "run folder"), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "run folder: the path is empty");
    char *lng = malloc(5001);
    ASSERT(lng);
    memset(lng, 'x', 5000);
    lng[5000] = 0;
    ASSERT_EQ(sl_mkdirs(lng, "run folder"), SL_EINVAL);
    free(lng);
    ASSERT_STREQ(sl_errmsg(), "run folder 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...': the path is 5000 bytes, "
                              "longer than 4095");
    /* a regular file in the way: as the folder itself, and as a part above it */
    char file[400];
    snprintf(file, sizeof file, "%s/f", base);
    ASSERT_EQ(sl_test_write_text(file, "x"), 0);
    ASSERT_EQ(sl_mkdirs(file, "run folder"), SL_EIO);
    snprintf(want, sizeof want, "run folder %s is a regular file, not a folder", file);
    ASSERT_STREQ(sl_errmsg(), want);
    snprintf(p, sizeof p, "%s/f/g/h", base);
    ASSERT_EQ(sl_mkdirs(p, "replica state folder"), SL_EIO);
    snprintf(want, sizeof want, "cannot create replica state folder %s: %s is a regular file, not a folder", p, file);
    ASSERT_STREQ(sl_errmsg(), want);
    ASSERT_EQ(sl_mkdirs("/dev/null/run", "event folder"), SL_EIO);
    ASSERT_STREQ(sl_errmsg(), "cannot create event folder /dev/null/run: /dev/null is a character device, not a folder");
    /* a link to nowhere above it */
    char link[400];
    snprintf(link, sizeof link, "%s/dl", base);
    ASSERT_EQ(symlink("nowhere", link), 0);
    snprintf(p, sizeof p, "%s/dl/x", base);
    ASSERT_EQ(sl_mkdirs(p, NULL), SL_EIO);
    snprintf(want, sizeof want, "cannot create folder %s: %s is a symbolic link to 'nowhere', which does not exist", p, link);
    ASSERT_STREQ(sl_errmsg(), want);
    /* what the system refuses (a part longer than a name may be), with its reason */
    char part[300];
    memset(part, 'n', 256);
    part[256] = 0;
    snprintf(p, sizeof p, "%s/%s/x", base, part);
    ASSERT_EQ(sl_mkdirs(p, "output folder"), SL_EIO);
    snprintf(want, sizeof want, "cannot create output folder %s: %s/%s: %s", p, base, part, strerror(ENAMETOOLONG));
    ASSERT_STREQ(sl_errmsg(), want);
    ASSERT_EQ(sl_test_rm_rf(base), 0);
}

int main(void) {
    setup();
    RUN(test_regular_file_opens);
    RUN(test_fifo_refused_without_blocking);
    RUN(test_directory_device_socket_refused);
    RUN(test_write_truncates_only_regular);
    RUN(test_mkdirs);
    rmdir(dir);
    TEST_MAIN_END();
}
