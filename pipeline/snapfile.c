/* Elements as bytes: the payload that cache files (pipeline/ops/cache.c) and snapshot
 * chunks (pipeline/snapfile_io.c) hold, laid out as pipeline/snapfile.h says. Decoding
 * makes views of the buffer holding the bytes (a file mapping, a chunk read into memory),
 * so a replayed element costs no copy; every length and count is checked against the
 * payload before it is used, since the bytes come from disk. */
#include <stdlib.h>
#include <string.h>

#include "pipeline/snapfile.h"

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

size_t sl__elem_encode(const sl_element *e, uint8_t **buf, size_t *cap) {
    size_t size = 8;
    for (int k = 0; k < e->n; k++) {
        const sl_tensor *t = &e->t[k];
        size += 8 + pad8(strlen(e->names[k])) + 8 * (size_t)t->rank + 8;
        if (t->dtype == SL_DT_BYTES) {
            int64_t cnt = sl_tensor_numel(t);
            const sl_bytes *b = t->data;
            size_t total = 0;
            for (int64_t i = 0; i < cnt; i++) total += b[i].len;
            size += 8 * (size_t)cnt + pad8(total);
        } else {
            size += pad8(sl_tensor_nbytes(t));
        }
    }
    if (size > *cap) {
        size_t ncap = *cap ? *cap : 4096;
        while (ncap < size) ncap *= 2;
        uint8_t *np = realloc(*buf, ncap);
        if (!np) return 0;
        *buf = np;
        *cap = ncap;
    }
    uint8_t *p = *buf;
    memset(p, 0, size);
    uint32_t ncomp = (uint32_t)e->n;
    memcpy(p, &ncomp, 4);
    p += 8;
    for (int k = 0; k < e->n; k++) {
        const sl_tensor *t = &e->t[k];
        uint16_t nl = (uint16_t)strlen(e->names[k]);
        p[0] = (uint8_t)t->dtype;
        p[1] = (uint8_t)t->rank;
        memcpy(p + 2, &nl, 2);
        p += 8;
        memcpy(p, e->names[k], nl);
        p += pad8(nl);
        memcpy(p, t->dims, 8 * (size_t)t->rank);
        p += 8 * (size_t)t->rank;
        if (t->dtype == SL_DT_BYTES) {
            uint64_t cnt = (uint64_t)sl_tensor_numel(t);
            const sl_bytes *b = t->data;
            memcpy(p, &cnt, 8);
            p += 8;
            for (uint64_t i = 0; i < cnt; i++) {
                uint64_t len = b[i].len;
                memcpy(p, &len, 8);
                p += 8;
            }
            size_t total = 0;
            for (uint64_t i = 0; i < cnt; i++) {
                if (b[i].len) memcpy(p + total, b[i].ptr, b[i].len);
                total += b[i].len;
            }
            p += pad8(total);
        } else {
            uint64_t nb = sl_tensor_nbytes(t);
            memcpy(p, &nb, 8);
            p += 8;
            if (nb) memcpy(p, t->data, nb);
            p += pad8(nb);
        }
    }
    return size;
}

static sl_status bad(sl_element *out, uint64_t at, const char *what, uint64_t *bad_at, const char **why) {
    sl_element_clear(out);
    *bad_at = at;
    *why = what;
    return SL_ECORRUPT;
}

sl_status sl__elem_decode(sl_buf *backing, const uint8_t *p0, uint64_t size, sl_element *out, uint64_t *bad_at,
                          const char **why) {
    const uint8_t *p = p0, *end = p0 + size;
    if (size < 8) return bad(out, 0, "element header truncated", bad_at, why);
    uint32_t ncomp;
    memcpy(&ncomp, p, 4);
    if (ncomp > SL_ELEM_MAX) return bad(out, 0, "too many components", bad_at, why);
    p += 8;
    for (uint32_t k = 0; k < ncomp; k++) {
        uint64_t here = (uint64_t)(p - p0);
        if (end - p < 8) return bad(out, here, "component header truncated", bad_at, why);
        sl_dtype dt = p[0];
        int rank = p[1];
        uint16_t nl;
        memcpy(&nl, p + 2, 2);
        p += 8;
        if (dt <= SL_DT_INVALID || dt >= SL_DT_COUNT_ || rank > SL_MAX_RANK || nl == 0 || nl >= SL_NAME_MAX)
            return bad(out, here, "bad component header", bad_at, why);
        if ((uint64_t)(end - p) < pad8(nl) + 8 * (uint64_t)rank + 8)
            return bad(out, here, "component truncated", bad_at, why);
        char name[SL_NAME_MAX];
        memcpy(name, p, nl);
        name[nl] = 0;
        p += pad8(nl);
        int64_t dims[SL_MAX_RANK];
        memcpy(dims, p, 8 * (size_t)rank);
        p += 8 * (size_t)rank;
        uint64_t nval;
        memcpy(&nval, p, 8);
        p += 8;
        uint64_t numel = 1;
        for (int i = 0; i < rank; i++) {
            if (dims[i] < 0 || (dims[i] && numel > UINT64_MAX / (uint64_t)dims[i]))
                return bad(out, here, "bad dims", bad_at, why);
            numel *= (uint64_t)dims[i];
        }
        sl_tensor t = SL_TENSOR_EMPTY;
        if (dt == SL_DT_BYTES) {
            if (nval != numel || nval > (uint64_t)(end - p) / 8) return bad(out, here, "bad string count", bad_at, why);
            const uint8_t *lens = p, *data = p + 8 * nval;
            uint64_t total = 0;
            for (uint64_t i = 0; i < nval; i++) {
                uint64_t len;
                memcpy(&len, lens + 8 * i, 8);
                if (len > (uint64_t)(end - data) - total) return bad(out, here, "string runs past the entry", bad_at, why);
                total += len;
            }
            sl_buf *vb = sl_buf_new(nval ? nval * sizeof(sl_bytes) : 1);
            if (!vb) {
                sl_element_clear(out);
                return SL_ENOMEM;
            }
            sl_bytes *v = vb->data;
            uint64_t o = 0;
            for (uint64_t i = 0; i < nval; i++) {
                uint64_t len;
                memcpy(&len, lens + 8 * i, 8);
                v[i].ptr = data + o;
                v[i].len = len;
                o += len;
            }
            t.dtype = dt;
            t.rank = rank;
            memcpy(t.dims, dims, 8 * (size_t)rank);
            t.data = vb->data;
            t.buf = vb;
            t.aux = sl_buf_ref(backing);
            p = (uint64_t)(end - data) >= pad8(total) ? data + pad8(total) : end;
        } else {
            if (nval != numel * sl_dtype_size(dt) || nval > (uint64_t)(end - p))
                return bad(out, here, "data size does not match the shape", bad_at, why);
            if (sl_tensor_view(&t, backing, p, nval, dt, rank, dims)) return bad(out, here, "bad tensor", bad_at, why);
            p += pad8(nval) <= (uint64_t)(end - p) ? pad8(nval) : (uint64_t)(end - p);
        }
        if (sl_element_find(out, name) >= 0 || sl_element_set(out, name, &t) != SL_OK) {
            sl_tensor_release(&t);
            return bad(out, here, "duplicate component", bad_at, why);
        }
    }
    return SL_OK;
}
