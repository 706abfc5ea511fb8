/* Files and folders for the unit tests (see helper_files.h). */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helper_files.h"
#include "sluice/status.h"

char *sl_test_mkdtemp(char *buf, size_t cap, const char *prefix) {
    snprintf(buf, cap, "/tmp/%s-XXXXXX", prefix);
    if (!mkdtemp(buf)) {
        buf[0] = 0;
        return NULL;
    }
    return buf;
}

char *sl_test_tmp_file(char *dir, size_t dcap, const char *prefix, char *path, size_t pcap, const char *name) {
    if (!sl_test_mkdtemp(dir, dcap, prefix)) return NULL;
    snprintf(path, pcap, "%s/%s", dir, name);
    return dir;
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)type;
    (void)ftw;
    return remove(path) == 0 ? 0 : 1;
}

int sl_test_rm_rf(const char *dir) {
    return nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

int sl_test_count_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

uint8_t *sl_test_read_file(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
    uint8_t *p = len >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)len + 1) : NULL;
    if (p && fread(p, 1, (size_t)len, f) != (size_t)len) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (!p) return NULL;
    p[len] = 0;
    *n = (size_t)len;
    return p;
}

int sl_test_write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

int sl_test_sparse_file(const char *path, long long size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return -1;
    int rc = ftruncate(fd, (off_t)size);
    close(fd);
    return rc == 0 ? 0 : -1;
}

int sl_test_write_text(const char *path, const char *text) {
    return sl_test_write_file(path, text, strlen(text));
}

const char *sl_test_errmsg_line(void) {
    static char line[1024];
    snprintf(line, sizeof line, "%s", sl_errmsg());
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    return line;
}
