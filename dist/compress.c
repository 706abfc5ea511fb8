/* Gradient codecs with error feedback (sluice/compress.h: the formats, costs and the
 * exactness promise are described there).
 *
 * Workload: one encode of 0.1-100 M floats per replica per step and up to world_size
 * decodes; payloads are outside bytes, validated in full before anything is written. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/compress.h"
#include "sluice/ring.h"
#include "sluice/util.h"

/* ---- little-endian fields ---------------------------------------------------------------- */

static void putf(unsigned char *p, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    sl_store_le32(p, u);
}
static float getf(const unsigned char *p) {
    uint32_t u = sl_load_le32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static void put16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* ---- the spec ------------------------------------------------------------------------------ */

static const char *const NAMES[] = {"none", "fp16", "int8", "sign", "topk"};

sl_status sl_compress_parse(const char *text, sl_compress_spec *out) {
    if (!text) return sl_err(SL_EINVAL, "compress: no codec given");
    for (int k = 0; k < 4; k++)
        if (strcmp(text, NAMES[k]) == 0) {
            *out = (sl_compress_spec){.kind = (sl_compress_kind)k};
            return SL_OK;
        }
    const char *arg = NULL;
    size_t tl = strlen(text);
    if (strncmp(text, "topk:", 5) == 0) arg = text + 5;
    else if (strncmp(text, "topk(", 5) == 0 && tl > 6 && text[tl - 1] == ')') arg = text + 5;
    if (!arg) {
        if (strcmp(text, "topk") == 0)
            return sl_err(SL_EINVAL, "compress 'topk' needs the fraction kept: topk:F or topk(F), e.g. topk:0.01");
        return sl_err(SL_EINVAL, "unknown compression '%s' (the choices: none, fp16, int8, sign, topk:F)", text);
    }
    int paren = text[4] == '(';
    char *end;
    double f = strtod(arg, &end);
    if (end == arg) goto bad;
    if (*end == '%') {
        f /= 100;
        end++;
    }
    if (!(f > 0 && f <= 1)) goto bad;
    long long w = 0;
    if (*end == ',') {
        const char *q = end + 1;
        while (*q == ' ') q++;
        if (strncmp(q, "warmup=", 7) != 0)
            return sl_err(SL_EINVAL, "compress '%s': after the fraction only warmup=STEPS may follow (e.g. "
                                     "topk(0.01, warmup=1800))", text);
        q += 7;
        errno = 0;
        w = strtoll(q, &end, 10);
        if (end == q || errno || w < 0 || w > SL_COMPRESS_WARMUP_MAX || (*end && *end != ')'))
            return sl_err(SL_EINVAL, "compress '%s': warmup= takes the warm-up's steps, an integer in [0, %d] "
                                     "(0: none)", text, SL_COMPRESS_WARMUP_MAX);
    }
    if (paren && *end == ')') end++;
    if (*end != 0) goto bad;
    *out = (sl_compress_spec){.kind = SL_COMPRESS_TOPK, .topk = f, .warmup = w};
    return SL_OK;
bad:
    return sl_err(SL_EINVAL, "compress '%s': the top-k fraction must be a number in (0, 1] (e.g. topk:0.01 or 1%%)",
                  text);
}

const char *sl_compress_name(const sl_compress_spec *spec, char *buf, size_t n) {
    if (!n) return buf;
    int k = spec ? (int)spec->kind : 0;
    if (k < 0 || k > 4) snprintf(buf, n, "?");
    else if (k == SL_COMPRESS_TOPK && spec->warmup > 0)
        snprintf(buf, n, "topk:%g,warmup=%lld", spec->topk, (long long)spec->warmup);
    else if (k == SL_COMPRESS_TOPK) snprintf(buf, n, "topk:%g", spec->topk);
    else snprintf(buf, n, "%s", NAMES[k]);
    return buf;
}

uint32_t sl_compress_topk_k(const sl_compress_spec *spec) {
    if (!spec || spec->kind != SL_COMPRESS_TOPK) return 0;
    double k = ceil(spec->topk * SL_COMPRESS_TOPK_CHUNK - 1e-9);
    if (!(k >= 1)) k = 1;
    if (k > SL_COMPRESS_TOPK_CHUNK) k = SL_COMPRESS_TOPK_CHUNK;
    return (uint32_t)k;
}

double sl_compress_topk_at(const sl_compress_spec *spec, int64_t step) {
    if (!spec || spec->kind != SL_COMPRESS_TOPK) return 0;
    if (spec->warmup <= 0 || step >= spec->warmup) return spec->topk;
    if (step < 0) step = 0;
    /* stage j = floor(4 step / W) in 0..3; 4 step stays far below 2^63 (W <= 1e9) */
    int j = (int)(4 * step / spec->warmup);
    double f = ldexp(0.25, -2 * j); /* 0.25 / 4^j, exact */
    return f > spec->topk ? f : spec->topk;
}

static uint32_t chunk_of(sl_compress_kind k) {
    return k == SL_COMPRESS_INT8 || k == SL_COMPRESS_SIGN ? SL_COMPRESS_CHUNK
           : k == SL_COMPRESS_TOPK                        ? SL_COMPRESS_TOPK_CHUNK
                                                          : 0;
}

static size_t body_size(sl_compress_kind kind, uint32_t k, size_t count) {
    size_t C = chunk_of(kind), full = C ? count / C : 0, rest = C ? count % C : 0;
    switch (kind) {
    case SL_COMPRESS_FP16: return count * 2;
    case SL_COMPRESS_INT8: return count + 4 * (full + (rest ? 1 : 0));
    case SL_COMPRESS_SIGN: return full * (8 + C / 8) + (rest ? 8 + (rest + 7) / 8 : 0);
    case SL_COMPRESS_TOPK: {
        size_t kr = rest < k ? rest : k;
        return full * 6 * (size_t)k + 6 * kr;
    }
    default: return 0;
    }
}

size_t sl_compress_size(const sl_compress_spec *spec, size_t count) {
    if (!spec || spec->kind <= SL_COMPRESS_NONE || spec->kind > SL_COMPRESS_TOPK) return 0;
    return SL_COMPRESS_HEADER + body_size(spec->kind, sl_compress_topk_k(spec), count);
}

/* ---- encode --------------------------------------------------------------------------------- */

/* Top-k selection order: larger |x| first, then the lower index. */
static int before(const float *x, uint32_t a, uint32_t b) {
    float fa = fabsf(x[a]), fb = fabsf(x[b]);
    return fa > fb || (fa == fb && a < b);
}

/* The k indices of x[0..n) that come first in `before` order, ascending, in idx[0..k). A
 * binary heap whose root is the worst kept index. */
static void topk_select(const float *x, uint32_t n, uint32_t k, uint16_t *idx, uint32_t *heap) {
    uint32_t h = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (h < k) {
            uint32_t j = h++;
            heap[j] = i;
            while (j > 0) { /* sift up: the parent must be worse (not before) than the child */
                uint32_t p = (j - 1) / 2;
                if (before(x, heap[p], heap[j])) {
                    uint32_t t = heap[p];
                    heap[p] = heap[j];
                    heap[j] = t;
                    j = p;
                } else break;
            }
        } else if (before(x, i, heap[0])) {
            heap[0] = i;
            uint32_t j = 0;
            for (;;) {
                uint32_t l = 2 * j + 1, r = l + 1, w = j;
                if (l < h && before(x, heap[w], heap[l])) w = l;
                if (r < h && before(x, heap[w], heap[r])) w = r;
                if (w == j) break;
                uint32_t t = heap[w];
                heap[w] = heap[j];
                heap[j] = t;
                j = w;
            }
        }
    }
    /* ascending index order: counting over a bitmap of the chunk */
    unsigned char mark[SL_COMPRESS_TOPK_CHUNK / 8];
    memset(mark, 0, (n + 7) / 8);
    for (uint32_t j = 0; j < h; j++) mark[heap[j] >> 3] |= (unsigned char)(1u << (heap[j] & 7));
    uint32_t o = 0;
    for (uint32_t i = 0; i < n; i++)
        if (mark[i >> 3] & (1u << (i & 7))) idx[o++] = (uint16_t)i;
}

sl_status sl_compress_encode(const sl_compress_spec *spec, const float *x, size_t count, void *out, size_t cap,
                             size_t *len) {
    if (!spec || spec->kind <= SL_COMPRESS_NONE || spec->kind > SL_COMPRESS_TOPK)
        return sl_err(SL_EINVAL, "compress: encode needs a codec (fp16, int8, sign, topk)");
    size_t need = sl_compress_size(spec, count);
    if (cap < need) return sl_err(SL_EINVAL, "compress: a %zu-byte buffer for a %zu-byte payload", cap, need);
    for (size_t i = 0; i < count; i++)
        if (!isfinite(x[i]))
            return sl_err(SL_ERANGE, "compress: gradient value %zu is %s: a diverged gradient is not sent", i,
                          isnan(x[i]) ? "nan" : "inf");
    unsigned char *p = out;
    uint32_t C = chunk_of(spec->kind), k = sl_compress_topk_k(spec);
    memcpy(p, "SLCZ", 4);
    p[4] = (unsigned char)spec->kind;
    p[5] = p[6] = p[7] = 0;
    sl_store_le64(p + 8, count);
    sl_store_le32(p + 16, C);
    sl_store_le32(p + 20, k);
    p += SL_COMPRESS_HEADER;
    switch (spec->kind) {
    case SL_COMPRESS_FP16: {
        uint16_t tmp[512];
        for (size_t i = 0; i < count; i += 512) {
            size_t m = count - i < 512 ? count - i : 512;
            sl_f32_to_f16(x + i, tmp, m);
            for (size_t j = 0; j < m; j++) {
                /* a finite float above 65504 rounds to an infinite half: clamp to the largest */
                if ((tmp[j] & 0x7c00u) == 0x7c00u) tmp[j] = (uint16_t)((tmp[j] & 0x8000u) | 0x7bffu);
                put16(p + 2 * (i + j), tmp[j]);
            }
        }
        break;
    }
    case SL_COMPRESS_INT8:
        for (size_t c0 = 0; c0 < count; c0 += C) {
            size_t m = count - c0 < C ? count - c0 : C;
            float mx = 0;
            for (size_t i = 0; i < m; i++) mx = fmaxf(mx, fabsf(x[c0 + i]));
            float scale = mx / 127.0f;
            putf(p, scale);
            p += 4;
            for (size_t i = 0; i < m; i++) {
                long q = scale > 0 ? lrintf(x[c0 + i] / scale) : 0;
                if (q > 127) q = 127;
                if (q < -127) q = -127;
                *p++ = (unsigned char)(int8_t)q;
            }
        }
        break;
    case SL_COMPRESS_SIGN:
        for (size_t c0 = 0; c0 < count; c0 += C) {
            size_t m = count - c0 < C ? count - c0 : C;
            /* the two reconstruction values of 1-bit SGD: the mean of the values >= 0 and the
             * mean magnitude of those < 0 (the least-squares choice for a sign threshold) */
            double sp = 0, sn = 0;
            size_t np = 0;
            for (size_t i = 0; i < m; i++) {
                double v = x[c0 + i];
                if (v >= 0) {
                    sp += v;
                    np++;
                } else {
                    sn -= v;
                }
            }
            putf(p, np ? (float)(sp / (double)np) : 0.0f);
            putf(p + 4, np < m ? (float)(sn / (double)(m - np)) : 0.0f);
            p += 8;
            size_t nb = (m + 7) / 8;
            memset(p, 0, nb);
            for (size_t i = 0; i < m; i++)
                if (x[c0 + i] >= 0) p[i >> 3] |= (unsigned char)(1u << (i & 7));
            p += nb;
        }
        break;
    case SL_COMPRESS_TOPK: {
        uint32_t heap[SL_COMPRESS_TOPK_CHUNK];
        uint16_t idx[SL_COMPRESS_TOPK_CHUNK];
        for (size_t c0 = 0; c0 < count; c0 += C) {
            uint32_t m = (uint32_t)(count - c0 < C ? count - c0 : C), kc = m < k ? m : k;
            topk_select(x + c0, m, kc, idx, heap);
            for (uint32_t j = 0; j < kc; j++) put16(p + 2 * j, idx[j]);
            p += 2 * kc;
            for (uint32_t j = 0; j < kc; j++) putf(p + 4 * j, x[c0 + idx[j]]);
            p += 4 * kc;
        }
        break;
    }
    default: break;
    }
    *len = need;
    return SL_OK;
}

/* ---- decode ---------------------------------------------------------------------------------- */

static sl_status bad(const char *who, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static sl_status bad(const char *who, size_t off, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sl_err(SL_ECORRUPT, "%s: compressed gradient: byte %zu: %s", who ? who : "payload", off, msg);
    sl_err_hint("the peer runs another codec or version, or the bytes were damaged on the way");
    return SL_ECORRUPT;
}

/* One pass: validate (acc NULL) or add (acc set: only after a validating pass succeeded). */
static sl_status walk(const sl_compress_spec *spec, const unsigned char *b, size_t len, size_t count, float *acc,
                      const char *who) {
    if (!spec || spec->kind <= SL_COMPRESS_NONE || spec->kind > SL_COMPRESS_TOPK)
        return sl_err(SL_EINVAL, "compress: decode needs a codec (fp16, int8, sign, topk)");
    if (len < SL_COMPRESS_HEADER) return bad(who, len, "%zu bytes, shorter than the 24-byte header", len);
    if (memcmp(b, "SLCZ", 4) != 0) return bad(who, 0, "bad magic (not a Sluice compressed gradient)");
    if (b[4] != (unsigned char)spec->kind) {
        char nm[32];
        return bad(who, 4, "codec %u%s%s%s, expected %u (%s)", b[4], b[4] >= 1 && b[4] <= 4 ? " (" : "",
                   b[4] >= 1 && b[4] <= 4 ? NAMES[b[4]] : "", b[4] >= 1 && b[4] <= 4 ? ")" : "", (unsigned)spec->kind,
                   sl_compress_name(spec, nm, sizeof nm));
    }
    if (b[5] || b[6] || b[7]) return bad(who, 5, "reserved bytes are not zero");
    uint64_t n = sl_load_le64(b + 8);
    if (n != count)
        return bad(who, 8, "%llu values, expected %zu", (unsigned long long)n, count);
    uint32_t C = sl_load_le32(b + 16), k = sl_load_le32(b + 20), wantk = sl_compress_topk_k(spec);
    if (C != chunk_of(spec->kind)) return bad(who, 16, "chunk size %u, expected %u", C, chunk_of(spec->kind));
    if (k != wantk) return bad(who, 20, "top-k k %u, expected %u", k, wantk);
    size_t want = SL_COMPRESS_HEADER + body_size(spec->kind, k, count);
    if (len != want) return bad(who, len < want ? len : want, "%zu bytes, expected %zu for %zu values", len, want, count);
    const unsigned char *p = b + SL_COMPRESS_HEADER;
    switch (spec->kind) {
    case SL_COMPRESS_FP16:
        for (size_t i = 0; i < count; i++) {
            uint16_t h = get16(p + 2 * i);
            if ((h & 0x7c00u) == 0x7c00u)
                return bad(who, (size_t)(p - b) + 2 * i, "value %zu is %s", i, (h & 0x3ffu) ? "nan" : "inf");
        }
        if (acc) {
            uint16_t tmp[512];
            float f[512];
            for (size_t i = 0; i < count; i += 512) {
                size_t m = count - i < 512 ? count - i : 512;
                for (size_t j = 0; j < m; j++) tmp[j] = get16(p + 2 * (i + j));
                sl_f16_to_f32(tmp, f, m);
                for (size_t j = 0; j < m; j++) acc[i + j] += f[j];
            }
        }
        break;
    case SL_COMPRESS_INT8:
        for (size_t c0 = 0; c0 < count; c0 += C) {
            size_t m = count - c0 < C ? count - c0 : C;
            float scale = getf(p);
            if (!isfinite(scale) || scale < 0 || scale > FLT_MAX / 127)
                return bad(who, (size_t)(p - b), "chunk %zu: scale %g is not a finite number in [0, FLT_MAX/127]",
                           c0 / C, (double)scale);
            p += 4;
            for (size_t i = 0; i < m; i++) {
                int8_t q = (int8_t)p[i];
                if (q == -128) return bad(who, (size_t)(p - b) + i, "value %zu: int8 -128 (the range is -127..127)", c0 + i);
                if (acc) acc[c0 + i] += (float)q * scale;
            }
            p += m;
        }
        break;
    case SL_COMPRESS_SIGN:
        for (size_t c0 = 0; c0 < count; c0 += C) {
            size_t m = count - c0 < C ? count - c0 : C, nb = (m + 7) / 8;
            float pos = getf(p), neg = getf(p + 4);
            for (int k = 0; k < 2; k++) {
                float v = k ? neg : pos;
                if (!isfinite(v) || v < 0)
                    return bad(who, (size_t)(p - b) + 4 * (size_t)k, "chunk %zu: %s scale %g is not a finite number >= 0",
                               c0 / C, k ? "negative" : "positive", (double)v);
            }
            p += 8;
            if ((m & 7) && (p[nb - 1] >> (m & 7)))
                return bad(who, (size_t)(p - b) + nb - 1, "chunk %zu: padding bits past value %zu are not zero", c0 / C,
                           c0 + m - 1);
            if (acc)
                for (size_t i = 0; i < m; i++) acc[c0 + i] += (p[i >> 3] >> (i & 7) & 1) ? pos : -neg;
            p += nb;
        }
        break;
    case SL_COMPRESS_TOPK:
        for (size_t c0 = 0; c0 < count; c0 += C) {
            uint32_t m = (uint32_t)(count - c0 < C ? count - c0 : C), kc = m < k ? m : k;
            const unsigned char *vals = p + 2 * kc;
            for (uint32_t j = 0; j < kc; j++) {
                uint32_t o = get16(p + 2 * j);
                if (o >= m)
                    return bad(who, (size_t)(p - b) + 2 * j, "chunk %zu: index %u is past the chunk's %u values",
                               c0 / C, o, m);
                if (j > 0 && o <= get16(p + 2 * (j - 1)))
                    return bad(who, (size_t)(p - b) + 2 * j, "chunk %zu: index %u after %u: indices must increase",
                               c0 / C, o, get16(p + 2 * (j - 1)));
                float v = getf(vals + 4 * j);
                if (!isfinite(v))
                    return bad(who, (size_t)(vals - b) + 4 * j, "chunk %zu: the value at index %u is %s", c0 / C, o,
                               isnan(v) ? "nan" : "inf");
                if (acc) acc[c0 + o] += v;
            }
            p += 6 * (size_t)kc;
        }
        break;
    default: break;
    }
    return SL_OK;
}

sl_status sl_compress_check(const sl_compress_spec *spec, const void *data, size_t len, size_t count,
                            const char *who) {
    return walk(spec, data, len, count, NULL, who);
}

sl_status sl_compress_decode_add(const sl_compress_spec *spec, const void *data, size_t len, size_t count, float *acc,
                                 const char *who) {
    sl_status s = walk(spec, data, len, count, NULL, who);
    if (s || !acc) return s;
    return walk(spec, data, len, count, acc, who);
}

/* ---- error feedback ---------------------------------------------------------------------------- */

struct sl_compress_ef {
    sl_compress_spec base; /* as configured (warm-up included) */
    sl_compress_spec spec; /* this step's codec (sl_compress_ef_at): warmup 0 */
    size_t count;
    double *r;   /* the residual */
    float *e;    /* scratch: (float)(g + r), then the decoded values */
};

sl_status sl_compress_ef_create(const sl_compress_spec *spec, size_t count, sl_compress_ef **out) {
    *out = NULL;
    if (!spec || spec->kind <= SL_COMPRESS_NONE || spec->kind > SL_COMPRESS_TOPK)
        return sl_err(SL_EINVAL, "compress: error feedback needs a codec (fp16, int8, sign, topk)");
    sl_compress_ef *ef = calloc(1, sizeof *ef);
    if (ef) {
        ef->r = calloc(count ? count : 1, sizeof *ef->r);
        ef->e = malloc((count ? count : 1) * sizeof *ef->e);
    }
    if (!ef || !ef->r || !ef->e) {
        sl_compress_ef_free(ef);
        return sl_err(SL_ENOMEM, "compress: out of memory for the residual of %zu values", count);
    }
    ef->base = *spec;
    ef->spec = *spec;
    ef->spec.warmup = 0;
    if (spec->kind == SL_COMPRESS_TOPK) ef->spec.topk = sl_compress_topk_at(spec, 0);
    ef->count = count;
    *out = ef;
    return SL_OK;
}

void sl_compress_ef_free(sl_compress_ef *ef) {
    if (!ef) return;
    free(ef->r);
    free(ef->e);
    free(ef);
}

double *sl_compress_ef_residual(sl_compress_ef *ef, size_t *count) {
    if (count) *count = ef->count;
    return ef->r;
}

const sl_compress_spec *sl_compress_ef_spec(const sl_compress_ef *ef) { return &ef->spec; }

void sl_compress_ef_at(sl_compress_ef *ef, int64_t step) {
    if (ef->base.kind == SL_COMPRESS_TOPK) ef->spec.topk = sl_compress_topk_at(&ef->base, step);
}

sl_status sl_compress_ef_step(sl_compress_ef *ef, const float *g, size_t count, void *out, size_t cap, size_t *len,
                              float *sent) {
    if (count != ef->count)
        return sl_err(SL_EINVAL, "compress: %zu gradient values for a residual of %zu", count, ef->count);
    for (size_t i = 0; i < count; i++) ef->e[i] = (float)((double)g[i] + ef->r[i]);
    sl_status s = sl_compress_encode(&ef->spec, ef->e, count, out, cap, len);
    if (s) return s;
    /* what every receiver decodes; the encoder's own bytes always validate */
    memset(ef->e, 0, count * sizeof *ef->e);
    if ((s = walk(&ef->spec, out, *len, count, ef->e, "own payload"))) return s;
    for (size_t i = 0; i < count; i++) ef->r[i] = ((double)g[i] + ef->r[i]) - (double)ef->e[i];
    if (sent) memcpy(sent, ef->e, count * sizeof *sent);
    return SL_OK;
}
