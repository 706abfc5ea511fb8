/* CURVE security for the transport: key files, allow-lists, key generation, and the ZAP
 * handler thread that decides which clients a CURVE inbox lets in.
 *
 * Key files follow ZeroMQ's zcert text format (public-key = "..." / secret-key = "..." lines,
 * anything else ignored), so keys made by zcert or `curve_keygen` work as they are. An
 * allow-list has one key per line. A line starting with '#' is a comment: '#' is a Z85
 * character, but no key starts with it ('#' and '$' as a first character make the first
 * 5-character group exceed 32 bits), so a bare key is never mistaken for a comment.
 *
 * Workload: a few small files read once per process; one ZAP request per connection
 * handshake (a handful per task, plus a stranger's retries every ~100 ms). Files are
 * untrusted bytes: every malformed line is an SL_ECORRUPT naming file and line. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "dist/curve_priv.h"
#include "sluice/file.h"
#include "sluice/transport.h"

#define KEY_LEN 40
#define MAX_KEYFILE (1u << 20)  /* a zcert file is a few hundred bytes */
#define MAX_ALLOW (16u << 20)   /* ~400k keys */

static const char Z85[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

static int is_z85(unsigned char c) { return c && strchr(Z85, c) != NULL; }
static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

/* Does key[0..len) decode as a CURVE key? (zmq_z85_decode also rejects 5-character groups
 * above 2^32 - 1, which the alphabet alone does not.) */
static int decodes(const char *key, size_t len, uint8_t bin[32]) {
    char z[KEY_LEN + 1];
    if (len != KEY_LEN) return 0;
    memcpy(z, key, KEY_LEN);
    z[KEY_LEN] = 0;
    return zmq_z85_decode(bin, z) != NULL;
}

/* Validate the key text k[0..klen) found at column col of line `line`; on success copy it
 * into out (NUL-terminated). */
static sl_status check_at(const char *k, size_t klen, const char *name, int line, size_t col, const char *what,
                          char out[41]) {
    for (size_t i = 0; i < klen; i++)
        if (!is_z85((unsigned char)k[i]))
            return sl_err(SL_ECORRUPT, "%s:%d: %s: byte 0x%02x at column %zu is not a Z85 character", name, line, what,
                          (unsigned char)k[i], col + i);
    if (klen != KEY_LEN)
        return sl_err(SL_ECORRUPT, "%s:%d: %s is %zu characters; a CURVE key is %d Z85 characters", name, line, what,
                      klen, KEY_LEN);
    uint8_t bin[32];
    if (!decodes(k, klen, bin))
        return sl_err(SL_ECORRUPT, "%s:%d: %s is not valid Z85 (a 5-character group exceeds 32 bits)", name, line,
                      what);
    memcpy(out, k, KEY_LEN);
    out[KEY_LEN] = 0;
    return SL_OK;
}

sl_status sl__curve_check_key(const char *key, const char *what) {
    size_t n = strnlen(key, KEY_LEN + 1);
    for (size_t i = 0; i < n; i++)
        if (!is_z85((unsigned char)key[i]))
            return sl_err(SL_EINVAL, "%s: byte 0x%02x at offset %zu is not a Z85 character", what,
                          (unsigned char)key[i], i);
    uint8_t bin[32];
    if (n != KEY_LEN) return sl_err(SL_EINVAL, "%s is %zu characters; a CURVE key is %d Z85 characters", what, n, KEY_LEN);
    if (!decodes(key, n, bin)) return sl_err(SL_EINVAL, "%s is not valid Z85", what);
    return SL_OK;
}

/* One line of the buffer: [*p, eol) with the line number; advances *p past the newline. */
typedef struct line_it {
    const char *p, *end;
    int no;
} line_it;

static int next_line(line_it *it, const char **s, size_t *n) {
    if (it->p >= it->end) return 0;
    const char *nl = memchr(it->p, '\n', (size_t)(it->end - it->p));
    const char *e = nl ? nl : it->end;
    *s = it->p;
    *n = (size_t)(e - it->p);
    it->p = nl ? nl + 1 : it->end;
    it->no++;
    return 1;
}

/* If line (trimmed start at column col) is `KEYWORD = "KEY"`, validate it into out and
 * return 1; 0 when the line is not about KEYWORD; a negative status on a malformed one. */
static int key_line(const char *s, size_t n, size_t col, const char *kw, const char *name, int line,
                    char out[41]) {
    size_t kl = strlen(kw), i;
    if (n < kl || memcmp(s, kw, kl) != 0 || (n > kl && !is_space(s[kl]) && s[kl] != '=')) return 0;
    for (i = kl; i < n && is_space(s[i]); i++) {}
    if (i >= n || s[i] != '=')
        return sl_err(SL_ECORRUPT, "%s:%d: expected '=' after %s at column %zu (%s = \"<%d Z85 characters>\")", name,
                      line, kw, col + i, kw, KEY_LEN);
    for (i++; i < n && is_space(s[i]); i++) {}
    if (i >= n || s[i] != '"')
        return sl_err(SL_ECORRUPT, "%s:%d: expected '\"' at column %zu (%s = \"<%d Z85 characters>\")", name, line,
                      col + i, kw, KEY_LEN);
    size_t start = ++i;
    while (i < n && s[i] != '"') i++;
    if (i >= n) return sl_err(SL_ECORRUPT, "%s:%d: %s: the closing '\"' is missing", name, line, kw);
    size_t klen = i - start;
    for (i++; i < n && is_space(s[i]); i++) {}
    if (i < n && s[i] != '#')
        return sl_err(SL_ECORRUPT, "%s:%d: unexpected text at column %zu after the %s", name, line, col + i, kw);
    sl_status st = check_at(s + start, klen, name, line, col + start, kw, out);
    return st ? st : 1;
}

/* key_line for a key a file gives once: 1 when the line is KEYWORD's (its key in out, the
 * line's number in *seen), 0 when it is not, a negative status when it is malformed or
 * repeats an earlier line's keyword. */
static int key_once(const char *s, size_t n, size_t col, const char *kw, const char *name, int line, char out[41],
                    int *seen) {
    char tmp[41];
    int r = key_line(s, n, col, kw, name, line, tmp);
    if (r != 1) return r;
    if (*seen) return sl_err(SL_ECORRUPT, "%s:%d: a second %s line (the first is line %d)", name, line, kw, *seen);
    memcpy(out, tmp, sizeof tmp);
    *seen = line;
    return 1;
}

static void skip_ws(const char **s, size_t *n, size_t *col) {
    while (*n && is_space(**s)) { (*s)++; (*n)--; (*col)++; }
}

sl_status sl__curve_parse_keyfile(const char *buf, size_t len, const char *name, char public_key[41],
                                  char secret_key[41]) {
    char pub[41], sec[41];
    int pub_line = 0, sec_line = 0;
    line_it it = {buf, buf + len, 0};
    const char *s;
    size_t n;
    while (next_line(&it, &s, &n)) {
        size_t col = 1;
        skip_ws(&s, &n, &col);
        if (n == 0 || s[0] == '#') continue;
        int r = key_once(s, n, col, "public-key", name, it.no, pub, &pub_line);
        if (r == 0) r = key_once(s, n, col, "secret-key", name, it.no, sec, &sec_line);
        if (r < 0) return r;
    }
    if (!pub_line) return sl_err(SL_ECORRUPT, "%s: no public-key line (public-key = \"<%d Z85 characters>\")", name, KEY_LEN);
    if (secret_key && !sec_line) {
        sl_err(SL_ECORRUPT, "%s: no secret-key line (this must be a keypair file, not a public one)", name);
        sl_err_hint("pass the .key file made by sluice-launch --keygen, not the .pub file");
        return SL_ECORRUPT;
    }
    if (sec_line) {
        char derived[41];
        if (zmq_curve_public(derived, sec) != 0) {
            sl_err(SL_EUNSUPPORTED, "%s: cannot check the secret key: this libzmq has no CURVE support", name);
            sl_err_hint("install a libzmq built with libsodium (CURVE)");
            return SL_EUNSUPPORTED;
        }
        if (memcmp(derived, pub, KEY_LEN) != 0)
            return sl_err(SL_ECORRUPT, "%s:%d: the secret-key does not belong to the public-key of line %d", name,
                          sec_line, pub_line);
    }
    memcpy(public_key, pub, sizeof pub);
    if (secret_key) memcpy(secret_key, sec, sizeof sec);
    return SL_OK;
}

sl_status sl__curve_parse_allow(const char *buf, size_t len, const char *name, char (**keys)[41], int *n) {
    *keys = NULL;
    *n = 0;
    char (*k)[41] = NULL;
    int cnt = 0, cap = 0;
    sl_status st;
    line_it it = {buf, buf + len, 0};
    const char *s;
    size_t ln;
    while (next_line(&it, &s, &ln)) {
        size_t col = 1;
        skip_ws(&s, &ln, &col);
        while (ln && is_space(s[ln - 1])) ln--;
        if (ln == 0) continue;
        char key[41];
        int r = key_line(s, ln, col, "public-key", name, it.no, key);
        if (r < 0) { st = r; goto fail; }
        if (r == 0) {
            size_t tok = 0;
            while (tok < ln && !is_space(s[tok])) tok++;
            if (s[0] == '#') continue;
            /* the rest of a zcert file: its section names and other properties */
            if ((tok == 5 && !memcmp(s, "curve", 5)) || (tok == 8 && !memcmp(s, "metadata", 8))) continue;
            size_t j = tok;
            while (j < ln && is_space(s[j])) j++;
            if (j > tok && j < ln && s[j] == '=') continue; /* name = "value" (a bare key has no spaces) */
            if (j < ln && s[j] != '#') {
                st = sl_err(SL_ECORRUPT, "%s:%d: unexpected text at column %zu after the key", name, it.no, col + j);
                goto fail;
            }
            if ((st = check_at(s, tok, name, it.no, col, "key", key))) goto fail;
        }
        if (cnt == cap) {
            int nc = cap ? cap * 2 : 16;
            char (*nk)[41] = realloc(k, (size_t)nc * sizeof *nk);
            if (!nk) { st = sl_err(SL_ENOMEM, "%s: out of memory", name); goto fail; }
            k = nk;
            cap = nc;
        }
        memcpy(k[cnt++], key, sizeof key);
    }
    if (cnt == 0) {
        st = sl_err(SL_ECORRUPT, "%s: no keys (an empty allow-list would refuse every connection)", name);
        goto fail;
    }
    *keys = k;
    *n = cnt;
    return SL_OK;
fail:
    free(k);
    return st;
}

/* ---- files ------------------------------------------------------------------------- */

static sl_status read_small(const char *path, size_t max, char **out, size_t *len) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        sl_err(SL_EIO, "%s: cannot open: %s", path, strerror(e));
        if (e == ENOENT) sl_err_hint("make the key files with sluice-launch --keygen PATH");
        return SL_EIO;
    }
    char *b = malloc(max + 1);
    if (!b) { fclose(f); return sl_err(SL_ENOMEM, "%s: out of memory", path); }
    size_t n = fread(b, 1, max + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(b); return sl_err(SL_EIO, "%s: read error", path); }
    if (n > max) { free(b); return sl_err(SL_ECORRUPT, "%s: larger than %zu bytes: not a key file", path, max); }
    *out = b;
    *len = n;
    return SL_OK;
}

/* The file at path read whole and parsed: an allow-list into *keys / *n when keys is not
 * NULL, else a key file into public_key / secret_key. */
static sl_status load(const char *path, char *public_key, char *secret_key, char (**keys)[41], int *n) {
    char *b = NULL;
    size_t len = 0;
    sl_status st = read_small(path, keys ? MAX_ALLOW : MAX_KEYFILE, &b, &len);
    if (st) return st;
    st = keys ? sl__curve_parse_allow(b, len, path, keys, n)
              : sl__curve_parse_keyfile(b, len, path, public_key, secret_key);
    free(b);
    return st;
}

sl_status sl_curve_load_keypair(const char *path, char public_key[41], char secret_key[41]) {
    return load(path, public_key, secret_key, NULL, NULL);
}

sl_status sl_curve_load_allow(const char *path, char (**keys)[41], int *n) {
    *keys = NULL;
    *n = 0;
    return load(path, NULL, NULL, keys, n);
}

/* Write text to the temporary file tmp (PATH.tmp.PID) that becomes path. A failed write (a
 * full disk, a file-size limit) is "PATH: write failed at byte N: REASON" with the hint of
 * sluice/file.h; on failure tmp is removed. */
static sl_status write_tmp(const char *path, const char *tmp, const char *text, mode_t mode) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) return sl_err(SL_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    uint64_t at = 0;
    sl_status st = sl_file_write_all(fd, text, strlen(text), path, &at);
    /* open() honoured the umask; the secret file must be 0600 whatever the umask is */
    if (!st && fchmod(fd, mode) != 0) st = sl_err(SL_EIO, "%s: cannot set mode %o: %s", tmp, (unsigned)mode, strerror(errno));
    if (!st && fsync(fd) != 0) st = sl_file_write_error(path, "cannot sync", at, errno);
    if (close(fd) != 0 && !st) st = sl_file_write_error(path, "cannot close", at, errno);
    if (st) unlink(tmp);
    return st;
}

sl_status sl_curve_keygen(const char *path) {
    char pub[41], sec[41];
    if (!zmq_has("curve") || zmq_curve_keypair(pub, sec) != 0) {
        sl_err(SL_EUNSUPPORTED, "keygen: this libzmq has no CURVE support");
        sl_err_hint("install a libzmq built with libsodium (CURVE)");
        return SL_EUNSUPPORTED;
    }
    char kpath[4096], ppath[4096], ktmp[4200], ptmp[4200], text[512];
    if (snprintf(kpath, sizeof kpath, "%s.key", path) >= (int)sizeof kpath ||
        snprintf(ppath, sizeof ppath, "%s.pub", path) >= (int)sizeof ppath)
        return sl_err(SL_EINVAL, "keygen: path \"%s\" is too long", path);
    snprintf(ktmp, sizeof ktmp, "%s.tmp.%ld", kpath, (long)getpid());
    snprintf(ptmp, sizeof ptmp, "%s.tmp.%ld", ppath, (long)getpid());
    snprintf(text, sizeof text,
             "#   ZeroMQ CURVE secret certificate (sluice)\n"
             "#   Keep it private: whoever holds it can pose as this task.\n\n"
             "curve\n    public-key = \"%s\"\n    secret-key = \"%s\"\n",
             pub, sec);
    sl_status st = write_tmp(kpath, ktmp, text, 0600);
    memset(sec, 0, sizeof sec);
    memset(text, 0, sizeof text);
    if (st) return st;
    snprintf(text, sizeof text,
             "#   ZeroMQ CURVE public certificate (sluice)\n"
             "#   Give it to the peers: add the key to their allow-list.\n\n"
             "curve\n    public-key = \"%s\"\n",
             pub);
    /* both files are whole before either replaces an older one: a new .key beside an older
     * .pub would be a pair that does not match */
    if ((st = write_tmp(ppath, ptmp, text, 0644))) {
        unlink(ktmp);
        return st;
    }
    if (rename(ktmp, kpath) != 0) {
        int e = errno;
        unlink(ktmp);
        unlink(ptmp);
        return sl_err(SL_EIO, "%s: cannot rename %s over it: %s", kpath, ktmp, strerror(e));
    }
    if (rename(ptmp, ppath) != 0) {
        int e = errno;
        unlink(ptmp);
        sl_err(SL_EIO, "%s: cannot rename %s over it: %s", ppath, ptmp, strerror(e));
        sl_err_hint("%s is new and does not match the public key there: run --keygen again", kpath);
        return SL_EIO;
    }
    return SL_OK;
}

/* ---- ZAP handler ------------------------------------------------------------------- */

struct sl__zap {
    void *sock;                     /* REP on inproc://zeromq.zap.01; owned by the thread once it runs */
    pthread_t th;
    uint8_t (*allow)[32];           /* decoded allowed client keys */
    int nallow;
    atomic_uint_least64_t denied;
};

uint64_t sl__zap_denied(const sl__zap *z) {
    return z ? atomic_load(&((sl__zap *)z)->denied) : 0;
}

static int frame_is(zmq_msg_t *m, const char *s) {
    size_t n = strlen(s);
    return zmq_msg_size(m) == n && memcmp(zmq_msg_data(m), s, n) == 0;
}

static int allowed(const sl__zap *z, zmq_msg_t *key) {
    if (zmq_msg_size(key) != 32) return 0;
    for (int i = 0; i < z->nallow; i++)
        if (memcmp(z->allow[i], zmq_msg_data(key), 32) == 0) return 1;
    return 0;
}

/* Receive one whole request; -1 when the context is terminating (or the socket broke). */
static int recv_request(void *sock, zmq_msg_t *f, int cap, int *nf) {
    int more = 1;
    *nf = 0;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, 0) == -1) {
            int e = zmq_errno();
            zmq_msg_close(&m);
            if (e == EINTR) continue;
            for (int i = 0; i < *nf; i++) zmq_msg_close(&f[i]);
            *nf = 0;
            return -1;
        }
        more = zmq_msg_more(&m);
        if (*nf < cap) {
            zmq_msg_init(&f[*nf]);
            zmq_msg_move(&f[(*nf)++], &m);
        }
        zmq_msg_close(&m);
    }
    return 0;
}

static void *zap_main(void *arg) {
    sl__zap *z = arg;
    enum { CAP = 8 };
    zmq_msg_t f[CAP];
    int nf;
    /* RFC 27 request: version, request id, domain, address, routing id, mechanism,
     * credentials (CURVE: the client's 32-byte public key) */
    while (recv_request(z->sock, f, CAP, &nf) == 0) {
        int ok = nf >= 7 && frame_is(&f[0], "1.0") && frame_is(&f[5], "CURVE") && allowed(z, &f[6]);
        if (!ok) atomic_fetch_add(&z->denied, 1);
        const void *rid = nf >= 2 ? zmq_msg_data(&f[1]) : "";
        size_t ridn = nf >= 2 ? zmq_msg_size(&f[1]) : 0;
        char user[41] = "";
        if (ok) zmq_z85_encode(user, zmq_msg_data(&f[6]), 32);
        const char *code = ok ? "200" : "400", *text = ok ? "OK" : "client key not in the allow-list";
        int rc = zmq_send(z->sock, "1.0", 3, ZMQ_SNDMORE);
        if (rc != -1) rc = zmq_send(z->sock, rid, ridn, ZMQ_SNDMORE);
        if (rc != -1) rc = zmq_send(z->sock, code, 3, ZMQ_SNDMORE);
        if (rc != -1) rc = zmq_send(z->sock, text, strlen(text), ZMQ_SNDMORE);
        if (rc != -1) rc = zmq_send(z->sock, user, strlen(user), ZMQ_SNDMORE);
        if (rc != -1) rc = zmq_send(z->sock, "", 0, 0);
        for (int i = 0; i < nf; i++) zmq_msg_close(&f[i]);
        if (rc == -1) break; /* ETERM: the context is going away */
    }
    zmq_close(z->sock);
    return NULL;
}

sl_status sl__zap_start(void *ctx, const char (*allow)[41], int nallow, sl__zap **out) {
    *out = NULL;
    sl_status st;
    sl__zap *z = calloc(1, sizeof *z);
    if (!z) return sl_err(SL_ENOMEM, "curve: out of memory");
    atomic_init(&z->denied, 0);
    if (nallow > 0 && !(z->allow = malloc((size_t)nallow * sizeof *z->allow))) {
        free(z);
        return sl_err(SL_ENOMEM, "curve: out of memory");
    }
    for (int i = 0; i < nallow; i++) {
        char what[48];
        snprintf(what, sizeof what, "curve: allow-list key %d", i);
        if ((st = sl__curve_check_key(allow[i], what))) goto fail;
        zmq_z85_decode(z->allow[i], allow[i]);
    }
    z->nallow = nallow;
    if (!(z->sock = zmq_socket(ctx, ZMQ_REP))) {
        st = sl_err(SL_EIO, "ZAP handler: cannot create its socket: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    int zero = 0;
    if (zmq_setsockopt(z->sock, ZMQ_LINGER, &zero, sizeof zero) == -1 ||
        zmq_bind(z->sock, "inproc://zeromq.zap.01") == -1) {
        st = sl_err(SL_EIO, "ZAP handler: cannot bind inproc://zeromq.zap.01: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    int e = pthread_create(&z->th, NULL, zap_main, z);
    if (e) {
        st = sl_err(SL_EIO, "ZAP handler: cannot start its thread: %s", strerror(e));
        goto fail;
    }
    *out = z;
    return SL_OK;
fail:
    if (z->sock) zmq_close(z->sock);
    free(z->allow);
    free(z);
    return st;
}

void sl__zap_free(sl__zap *z) {
    if (!z) return;
    pthread_join(z->th, NULL);
    free(z->allow);
    free(z);
}
