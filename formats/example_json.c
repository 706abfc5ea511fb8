/* tf.train.Example printing: protobuf's canonical JSON (as Python prints it) and a short
 * one-line summary.
 *
 * Workload: tools and error messages (sluice-record cat, a test's failure output), one
 * Example at a time; clarity over speed.
 *
 * The JSON matches google.protobuf.json_format.MessageToJson(msg, indent=None) of
 * python3-protobuf 4.21 byte for byte (tests/unit/test_example.c holds strings it
 * printed):
 *   - json.dumps separators ", " and ": ", ensure_ascii=True: every character outside
 *     0x20..0x7e is escaped, \" \\ \n \r \t \b \f short, the rest \u00XX (lowercase hex),
 *     characters past U+FFFF as a surrogate pair;
 *   - int64 as decimal strings, bytes as standard base64 with padding;
 *   - float: NaN, Infinity, -Infinity as strings; otherwise type_checkers.ToShortestFloat
 *     (the fewest significant digits, from 6 up, that read back as the same float32)
 *     printed as Python's repr of that double: exponent form when the decimal exponent is
 *     below -4 or at least 16 ("1e-05", "1e+16"), else positional with at least one
 *     decimal ("100.0", "0.0001", "-0.0");
 *   - no features field -> {}, features present but empty -> {"features": {}}, a Feature
 *     with no kind -> {}, an empty list -> {"int64List": {}}.
 * Python's map order is its own (hash order); ours is the order of *ex.
 * Keys that are not valid UTF-8 (protobuf-c accepts them, Python would not) print each
 * invalid byte as \ufffd. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/example_priv.h"
#include "sluice/example.h"
#include "sluice/json.h"

/* ---- the text (core's sl_json_buf) ---------------------------------------------------- */

static void sb_str(sl_json_buf *b, const char *s) { sl_json_buf_put(b, s, strlen(s)); }

static sl_status sb_finish(sl_json_buf *b, sl_status st, char **out, size_t *len) {
    if (!st && !b->p) sl_json_buf_put(b, "", 0); /* an empty summary is still a string */
    if (!st && b->oom) st = sl_err(SL_ENOMEM, "out of memory printing an Example");
    if (st) {
        free(b->p);
        return st;
    }
    *out = b->p;
    if (len) *len = b->len;
    return SL_OK;
}

/* ---- JSON pieces ----------------------------------------------------------------------- */

/* ensure_ascii, as json.dumps: see the file comment */
static void json_string(sl_json_buf *b, const uint8_t *s, size_t n) { sl_json_put_str(sl_json_buf_put_fn, b, s, n, SL_JSON_ASCII); }

static void json_base64(sl_json_buf *b, const uint8_t *s, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (!sl_json_buf_reserve(b, (n + 2) / 3 * 4 + 2)) return;
    char *o = b->p + b->len;
    *o++ = '"';
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *o++ = tab[v >> 18];
        *o++ = tab[(v >> 12) & 63];
        *o++ = tab[(v >> 6) & 63];
        *o++ = tab[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)s[i] << 16;
        *o++ = tab[v >> 18];
        *o++ = tab[(v >> 12) & 63];
        *o++ = '=';
        *o++ = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8;
        *o++ = tab[v >> 18];
        *o++ = tab[(v >> 12) & 63];
        *o++ = tab[(v >> 6) & 63];
        *o++ = '=';
    }
    *o++ = '"';
    *o = 0;
    b->len = (size_t)(o - b->p);
}

/* Python's repr(ToShortestFloat(x)) for a finite float32 x, into out (>= 32 bytes). */
static void py_float(float x, char *out) {
    char tmp[40];
    int p = 6;
    for (; p < 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*g", p, (double)x);
        if ((float)strtod(tmp, NULL) == x) break;
    }
    /* the same p significant digits in exponent form: [-]d.ddde[+-]XX */
    snprintf(tmp, sizeof tmp, "%.*e", p - 1, (double)x);
    char *s = tmp, digits[24];
    size_t nd = 0;
    int neg = 0;
    if (*s == '-') neg = 1, s++;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9') digits[nd++] = *s;
    int e10 = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int decpt = e10 + 1; /* value = 0.DIGITS x 10^decpt */
    char *o = out;
    if (neg) *o++ = '-';
    if (decpt <= -4 || decpt > 16) {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, nd - 1);
            o += nd - 1;
        }
        snprintf(o, 12, "e%c%02d", e10 < 0 ? '-' : '+', e10 < 0 ? -e10 : e10);
        return;
    }
    if (decpt <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -decpt; i++) *o++ = '0';
        memcpy(o, digits, nd);
        o += nd;
    } else if ((size_t)decpt >= nd) {
        memcpy(o, digits, nd);
        o += nd;
        for (size_t i = nd; i < (size_t)decpt; i++) *o++ = '0';
        *o++ = '.';
        *o++ = '0';
    } else {
        memcpy(o, digits, (size_t)decpt);
        o += decpt;
        *o++ = '.';
        memcpy(o, digits + decpt, nd - (size_t)decpt);
        o += nd - (size_t)decpt;
    }
    *o = 0;
}

static void json_float(sl_json_buf *b, float x) {
    char tmp[40];
    if (isnan(x)) sb_str(b, "\"NaN\"");
    else if (isinf(x)) sb_str(b, x < 0 ? "\"-Infinity\"" : "\"Infinity\"");
    else {
        py_float(x, tmp);
        sb_str(b, tmp);
    }
}

/* The values of one feature, copied out into a malloc'd array of `elem` bytes each. */
static sl_status values_of(const sl_feature *f, size_t elem, void **out) {
    *out = malloc(f->count ? f->count * elem : 1);
    if (!*out) return sl_err(SL_ENOMEM, "out of memory for %zu values", f->count);
    sl_status st = SL_OK;
    if (f->kind == SL_FEAT_FLOAT) st = sl_feature_floats(f, *out, f->count);
    else if (f->kind == SL_FEAT_INT64) st = sl_feature_int64s(f, *out, f->count);
    else if (f->kind == SL_FEAT_BYTES) st = sl_feature_bytes(f, *out, f->count);
    if (st) {
        free(*out);
        *out = NULL;
    }
    return st;
}

static sl_status json_feature(sl_json_buf *b, const sl_feature *f) {
    static const char *const names[] = {"", "bytesList", "floatList", "int64List"};
    static const size_t elem[] = {0, sizeof(sl_bytes), sizeof(float), sizeof(int64_t)};
    if (f->kind == SL_FEAT_NONE) {
        sb_str(b, "{}");
        return SL_OK;
    }
    sl_json_buf_printf(b, "{\"%s\": ", names[f->kind]);
    if (f->count == 0) {
        sb_str(b, "{}}");
        return SL_OK;
    }
    void *vals;
    sl_status st = values_of(f, elem[f->kind], &vals);
    if (st) return st;
    sb_str(b, "{\"value\": [");
    for (size_t i = 0; i < f->count; i++) {
        if (i) sl_json_buf_put(b, ", ", 2);
        if (f->kind == SL_FEAT_INT64) {
            sl_json_buf_printf(b, "\"%lld\"", (long long)((const int64_t *)vals)[i]);
        } else if (f->kind == SL_FEAT_FLOAT) {
            json_float(b, ((const float *)vals)[i]);
        } else {
            const sl_bytes *v = &((const sl_bytes *)vals)[i];
            json_base64(b, v->ptr, v->len);
        }
    }
    sb_str(b, "]}}");
    free(vals);
    return SL_OK;
}

sl_status sl_example_to_json(const sl_example *ex, char **out, size_t *len) {
    if (!ex || !out) return sl_err(SL_EINVAL, "sl_example_to_json: NULL argument");
    sl_json_buf b = {0};
    sl_status st = SL_OK;
    if (!sl__example_has_features(ex)) {
        sb_str(&b, "{}");
    } else if (ex->n == 0) {
        sb_str(&b, "{\"features\": {}}");
    } else {
        sb_str(&b, "{\"features\": {\"feature\": {");
        for (size_t i = 0; i < ex->n && !st; i++) {
            if (i) sl_json_buf_put(&b, ", ", 2);
            json_string(&b, ex->f[i].key.ptr, ex->f[i].key.len);
            sl_json_buf_put(&b, ": ", 2);
            st = json_feature(&b, &ex->f[i]);
        }
        sb_str(&b, "}}}");
    }
    return sb_finish(&b, st, out, len);
}

/* ---- one-line summary -------------------------------------------------------------------- */

static void text_key(sl_json_buf *b, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] > 0x20 && s[i] < 0x7f && s[i] != '\\') sl_json_buf_put(b, (const char *)&s[i], 1);
        else sl_json_buf_printf(b, "\\x%02x", s[i]);
    }
}

sl_status sl_example_to_text(const sl_example *ex, int max_values, char **out, size_t *len) {
    if (!ex || !out) return sl_err(SL_EINVAL, "sl_example_to_text: NULL argument");
    static const size_t elem[] = {0, sizeof(sl_bytes), sizeof(float), sizeof(int64_t)};
    sl_json_buf b = {0};
    sl_status st = SL_OK;
    for (size_t i = 0; i < ex->n && !st; i++) {
        const sl_feature *f = &ex->f[i];
        if (i) sl_json_buf_put(&b, " ", 1);
        text_key(&b, f->key.ptr, f->key.len);
        sl_json_buf_printf(&b, "=%s", sl_feat_kind_name(f->kind));
        if (f->kind == SL_FEAT_NONE) continue;
        sl_json_buf_printf(&b, "[%zu]", f->count);
        if (max_values <= 0 || f->count == 0) continue;
        void *vals;
        if ((st = values_of(f, elem[f->kind], &vals))) break;
        size_t show = f->count < (size_t)max_values ? f->count : (size_t)max_values;
        sl_json_buf_put(&b, "{", 1);
        for (size_t k = 0; k < show; k++) {
            if (k) sl_json_buf_put(&b, ",", 1);
            if (f->kind == SL_FEAT_INT64) sl_json_buf_printf(&b, "%lld", (long long)((const int64_t *)vals)[k]);
            else if (f->kind == SL_FEAT_FLOAT) sl_json_buf_printf(&b, "%g", (double)((const float *)vals)[k]);
            else sl_json_buf_printf(&b, "%zu B", ((const sl_bytes *)vals)[k].len);
        }
        if (show < f->count) sl_json_buf_put(&b, ",...", 4);
        sl_json_buf_put(&b, "}", 1);
        free(vals);
    }
    return sb_finish(&b, st, out, len);
}
