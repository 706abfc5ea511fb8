/* Opening files that come from outside (see include/sluice/file.h): refuse what is not a
 * regular file before anything can block on it, read whole files under a byte limit, and
 * write with every failure (a full disk, a file-size limit, a short write) reported the
 * same way, and make folders (mkdir -p) naming the part in the way. Workload: a handful of opens per job (shards, checkpoints, configs, keys); the
 * writes are buffered by their callers, so write_all sees large blocks, not records. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/file.h"

const char *sl_file_kind(unsigned mode) {
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFLNK: return "a symbolic link";
    default: return "an unknown kind of file";
    }
}

static sl_status not_regular(const char *path, const char *what, unsigned mode) {
    sl_err(SL_EINVAL, "%s '%s': is %s, not a regular file", what, path, sl_file_kind(mode));
    sl_err_hint("give the path of a regular file; pipes, sockets, devices and directories are refused so that nothing can block or read without end");
    return SL_EINVAL;
}

bool sl_file_dangling_target(const char *path, char *out, size_t cap) {
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISLNK(st.st_mode) || stat(path, &st) == 0 || errno != ENOENT) return false;
    if (!out || cap == 0) return true;
    ssize_t n = readlink(path, out, cap - 1);
    if (n < 0) return false;
    out[n] = 0;
    return true;
}

static sl_status os_error(int err, const char *path, const char *what, const char *op) {
    if (err == ENOENT) {
        sl_err(SL_ENOTFOUND, "%s '%s': no such file", what, path);
        char target[4096];
        if (sl_file_dangling_target(path, target, sizeof target))
            sl_err_hint("'%s' is a symbolic link to '%s', which does not exist", path, target);
        return SL_ENOTFOUND;
    }
    /* EISDIR, ENXIO (a socket, or a FIFO opened for writing with no reader), ...: when the
     * path is not a regular file, say what it is rather than the errno's words */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) return not_regular(path, what, st.st_mode);
    return sl_err(SL_EIO, "%s '%s': cannot %s: %s", what, path, op, strerror(err));
}

/* After a non-blocking open: check the kind, then switch to blocking mode. */
static sl_status settle(int fd, const char *path, const char *what, uint64_t *size) {
    struct stat st;
    if (fstat(fd, &st) != 0) return os_error(errno, path, what, "stat");
    if (!S_ISREG(st.st_mode)) return not_regular(path, what, st.st_mode);
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) return os_error(errno, path, what, "fcntl");
    if (size) *size = (uint64_t)st.st_size;
    return SL_OK;
}

sl_status sl_file_open_read(const char *path, const char *what, int *fd, uint64_t *size) {
    *fd = -1;
    if (!what) what = "file";
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (f < 0) return os_error(errno, path, what, "open");
    sl_status s = settle(f, path, what, size);
    if (s) { close(f); return s; }
    *fd = f;
    return SL_OK;
}

sl_status sl_file_fopen_read(const char *path, const char *what, FILE **out) {
    *out = NULL;
    int fd;
    sl_status s = sl_file_open_read(path, what, &fd, NULL);
    if (s) return s;
    FILE *f = fdopen(fd, "rb");
    if (!f) { int e = errno; close(fd); return os_error(e, path, what ? what : "file", "fdopen"); }
    *out = f;
    return SL_OK;
}

sl_status sl_file_open_write(const char *path, int flags, unsigned mode, const char *what, int *fd) {
    *fd = -1;
    if (!what) what = "file";
    /* O_TRUNC is applied only after the kind is known: truncating a device is never wanted */
    int trunc = flags & O_TRUNC;
    int f = open(path, (flags & ~O_TRUNC) | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, (mode_t)mode);
    if (f < 0) return os_error(errno, path, what, "open");
    sl_status s = settle(f, path, what, NULL);
    if (!s && trunc && ftruncate(f, 0) != 0) s = os_error(errno, path, what, "truncate");
    if (s) { close(f); return s; }
    *fd = f;
    return SL_OK;
}

sl_status sl_file_fopen_write(const char *path, const char *mode, const char *what, FILE **out) {
    *out = NULL;
    int append = mode && mode[0] == 'a';
    int fd;
    sl_status s = sl_file_open_write(path, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC),
                                      0666, what, &fd);
    if (s) return s;
    FILE *f = fdopen(fd, append ? "a" : "w");
    if (!f) { int e = errno; close(fd); return os_error(e, path, what ? what : "file", "fdopen"); }
    *out = f;
    return SL_OK;
}

sl_status sl_file_check_regular(const char *path, const char *what) {
    struct stat st;
    if (!what) what = "file";
    if (stat(path, &st) != 0) return os_error(errno, path, what, "stat");
    if (!S_ISREG(st.st_mode)) return not_regular(path, what, st.st_mode);
    return SL_OK;
}

sl_status sl_file_read_all(const char *path, const char *what, uint64_t max_bytes,
                           const char *limit_hint, char **data, size_t *len) {
    *data = NULL;
    *len = 0;
    if (!what) what = "file";
    int fd;
    uint64_t size;
    sl_status s = sl_file_open_read(path, what, &fd, &size);
    if (s) return s;
    if (size > max_bytes) {
        close(fd);
        sl_err(SL_ERANGE, "%s '%s': is %llu bytes, more than the limit of %llu", what, path,
               (unsigned long long)size, (unsigned long long)max_bytes);
        if (limit_hint) sl_err_hint("%s", limit_hint);
        return SL_ERANGE;
    }
    /* read up to one byte past the limit, so a file that grows underneath is caught */
    size_t cap = (size_t)size + 1, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) { close(fd); return sl_err(SL_ENOMEM, "%s '%s': no memory for %zu bytes", what, path, cap); }
    for (;;) {
        if (n == cap) {
            if (n > max_bytes) break;
            size_t ncap = cap * 2 > max_bytes + 1 ? (size_t)max_bytes + 1 : cap * 2;
            if (ncap <= cap) ncap = cap + 1;
            char *nb = realloc(buf, ncap + 1);
            if (!nb) { free(buf); close(fd); return sl_err(SL_ENOMEM, "%s '%s': no memory", what, path); }
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(buf);
            close(fd);
            return os_error(e, path, what, "read");
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (n > max_bytes) {
        free(buf);
        sl_err(SL_ERANGE, "%s '%s': grew past the limit of %llu bytes while being read", what, path,
               (unsigned long long)max_bytes);
        if (limit_hint) sl_err_hint("%s", limit_hint);
        return SL_ERANGE;
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return SL_OK;
}

sl_status sl_file_write_error(const char *name, const char *doing, uint64_t at, int err) {
    if (!err) err = EIO;
    if (doing)
        sl_err(SL_EIO, "%s: %s: %s (write failed at byte %llu)", name, doing, strerror(err), (unsigned long long)at);
    else
        sl_err(SL_EIO, "%s: write failed at byte %llu: %s", name, (unsigned long long)at, strerror(err));
    if (err == ENOSPC || err == EDQUOT) {
        sl_err_hint("the disk (or quota) is full");
    } else if (err == EFBIG) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (uint64_t)rl.rlim_cur <= at)
            sl_err_hint("a file-size limit (ulimit -f) stops writes past %llu bytes: raise it (ulimit -f unlimited) "
                        "or write less", (unsigned long long)rl.rlim_cur);
        else
            sl_err_hint("the file would be larger than its file system allows");
    }
    return SL_EIO;
}

sl_status sl_file_write_all(int fd, const void *data, size_t n, const char *name, uint64_t *at) {
    const uint8_t *p = data;
    while (n) {
        /* Linux writes at most about 2 GiB per call anyway */
        ssize_t k = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return sl_file_write_error(name, NULL, *at, k < 0 ? errno : EIO);
        p += k;
        n -= (size_t)k;
        *at += (uint64_t)k;
    }
    return SL_OK;
}

sl_status sl_file_fclose_write(FILE *f, const char *name, const char *doing) {
    /* stdio keeps what a failed write could not write, so the flush tries it again and
     * fails with the same errno; the file's size is how far the writes got */
    errno = 0;
    int e = 0;
    if (fflush(f) != 0) e = errno ? errno : EIO;
    else if (ferror(f)) e = EIO;
    struct stat st;
    uint64_t at = fstat(fileno(f), &st) == 0 ? (uint64_t)st.st_size : 0;
    errno = 0;
    if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
    return e ? sl_file_write_error(name, doing, at, e) : SL_OK;
}

/* One part of sl_mkdirs's path: a folder afterwards, or the error that names it. */
static sl_status make_part(const char *part, const char *path, const char *what) {
    if (mkdir(part, 0777) == 0) return SL_OK;
    int e = errno;
    bool whole = strcmp(part, path) == 0;
    struct stat st;
    if (e == EEXIST) {
        if (stat(part, &st) == 0) {
            if (S_ISDIR(st.st_mode)) return SL_OK;
            if (whole) return sl_err(SL_EIO, "%s %s is %s, not a folder", what, path, sl_file_kind(st.st_mode));
            return sl_err(SL_EIO, "cannot create %s %s: %s is %s, not a folder", what, path, part, sl_file_kind(st.st_mode));
        }
        e = errno;
        char target[256];
        if (sl_file_dangling_target(part, target, sizeof target))
            return sl_err(SL_EIO, "cannot create %s %s: %s is a symbolic link to '%s', which does not exist", what, path,
                          part, target);
    }
    if (whole) return sl_err(SL_EIO, "cannot create %s %s: %s", what, path, strerror(e));
    return sl_err(SL_EIO, "cannot create %s %s: %s: %s", what, path, part, strerror(e));
}

sl_status sl_mkdirs(const char *path, const char *what) {
    if (!what) what = "folder";
    size_t n = strlen(path);
    if (n == 0) return sl_err(SL_EINVAL, "%s: the path is empty", what);
    if (n >= SL_FILE_MAX_PATH)
        return sl_err(SL_EINVAL, "%s '%.40s...': the path is %zu bytes, longer than %d", what, path, n, SL_FILE_MAX_PATH - 1);
    char buf[SL_FILE_MAX_PATH];
    memcpy(buf, path, n + 1);
    /* each prefix that ends a part, the whole path last; an existing folder is fine */
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != 0) continue;
        char c = buf[i];
        buf[i] = 0;
        sl_status s = make_part(buf, path, what);
        if (s) return s;
        buf[i] = c;
    }
    return SL_OK;
}
