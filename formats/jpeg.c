/* JPEG header, full, scaled and cropped decode, and encode.
 *
 * Workload: the decode_jpeg / random_crop map functions of an input pipeline, one decoder
 * per worker thread, hundreds to thousands of photos a second of a few hundred pixels a
 * side (ImageNet-like, 4:2:0, quality 75..95), bytes straight from tf.Example features.
 *
 * Full and scaled decodes go through TurboJPEG (tjDecompress2). Cropped decodes (and the
 * rare scaled decode that TurboJPEG cannot express, see tj_picks) go through libjpeg's own
 * API, which TurboJPEG does not expose: jpeg_crop_scanline narrows the columns that are
 * upsampled and color-converted, jpeg_skip_scanlines skips rows above the crop (their
 * Huffman data is still decoded, but, for whole iMCU rows, not their IDCT, upsampling and
 * color conversion), and we stop after its last row with jpeg_abort_decompress: the
 * entropy data below the crop is never read, so damage there goes unnoticed
 * (tf.image.decode_and_crop_jpeg's behaviour too; a progressive file is read whole by
 * jpeg_start_decompress, so its damage is always seen). Both paths use the same libjpeg
 * settings (islow IDCT, fancy upsampling: TurboJPEG's and djpeg's defaults), so a crop
 * equals the full decode cropped.
 *
 * libjpeg reports fatal errors through error_exit, which must not return: ours longjmps to
 * a setjmp taken in the frame of the function that called into libjpeg (never further), and
 * that function resets the decompressor with jpeg_abort_decompress so the handle stays
 * usable. Warnings (corrupt entropy data, premature end of file) are fatal too unless the
 * decoder was made lenient, because a silently grey half-image is worse for training than a
 * skipped one.
 *
 * CMYK / YCCK images (Photoshop, print workflows) are decoded to CMYK and converted to RGB
 * here, assuming Adobe's inverted CMYK (what Photoshop writes, and what TensorFlow and Pillow
 * assume too). */
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <turbojpeg.h>

#include "sluice/jpeg.h"

/* Progressive files can carry thousands of tiny scans, which makes decoding quadratic;
 * TurboJPEG's TJFLAG_LIMITSCANS stops at 500, and the libjpeg path does the same. */
#define MAX_SCANS 500

/* libjpeg error manager; `pub` first so cinfo->err converts back to it. */
typedef struct jerr_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;                  /* set by the function currently inside libjpeg */
    char msg[JMSG_LENGTH_MAX];   /* the reason, formatted when the error was raised */
    int strict;                  /* warnings are errors */
    int warned;                  /* a warning was seen (lenient mode) */
} jerr_mgr;

struct sl_jpeg_decoder {
    tjhandle tj;                           /* TurboJPEG decompressor */
    int lenient;                           /* accept recoverable corruption */
    int fast_dct, fast_upsample;           /* sl_jpeg_decoder_set_speed */
    struct jpeg_decompress_struct cinfo;   /* libjpeg decompressor for crops, reused */
    jerr_mgr jerr;
    struct jpeg_progress_mgr progress;
    int cinfo_ok;                          /* cinfo was created */
    uint8_t *scratch;                      /* CMYK pixels or one cropped row, reused */
    size_t scratch_cap;
    uint8_t *cmyk_view;                    /* sl_jpeg_decode_crop_view's pixels of a CMYK file */
    size_t cmyk_view_cap;
    int tj_nums[32];                       /* TurboJPEG's scaling factors as n/8, -1 if not */
    int tj_nfactors;
    int64_t max_pixels;                    /* decodes refuse larger images (header size) */
};

/* ---- libjpeg callbacks ------------------------------------------------------------- */

static void on_error_exit(j_common_ptr c) {
    jerr_mgr *e = (jerr_mgr *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jb, 1);
}

static void on_emit_message(j_common_ptr c, int level) {
    jerr_mgr *e = (jerr_mgr *)c->err;
    if (level >= 0)
        return; /* trace messages */
    c->err->num_warnings++;
    if (e->strict) {
        (*c->err->format_message)(c, e->msg);
        longjmp(e->jb, 1);
    }
    e->warned = 1;
}

static void on_progress(j_common_ptr c) {
    if (!c->is_decompressor)
        return;
    j_decompress_ptr d = (j_decompress_ptr)c;
    if (d->input_scan_number > MAX_SCANS) {
        jerr_mgr *e = (jerr_mgr *)c->err;
        snprintf(e->msg, sizeof e->msg, "more than %d progressive scans", MAX_SCANS);
        longjmp(e->jb, 1);
    }
}

/* ---- helpers --------------------------------------------------------------------- */

/* *buf (*cap bytes, kept by the decoder) to at least n bytes. */
static sl_status grow_buf(uint8_t **buf, size_t *cap, size_t n) {
    if (n <= *cap)
        return SL_OK;
    uint8_t *p = realloc(*buf, n);
    if (!p)
        return sl_err(SL_ENOMEM, "jpeg: cannot allocate %zu bytes of scratch", n);
    *buf = p;
    *cap = n;
    return SL_OK;
}

static sl_status grow_scratch(sl_jpeg_decoder *d, size_t n) {
    return grow_buf(&d->scratch, &d->scratch_cap, n);
}

/* Adobe CMYK as stored (inverted: 255 = no ink) to RGB or gray, n pixels. */
static void cmyk_convert(const uint8_t *src, uint8_t *dst, size_t n, int channels) {
    for (size_t i = 0; i < n; i++, src += 4) {
        unsigned k = src[3];
        unsigned r = (src[0] * k + 127) / 255, g = (src[1] * k + 127) / 255,
                 b = (src[2] * k + 127) / 255;
        if (channels == 3) {
            dst[0] = (uint8_t)r; dst[1] = (uint8_t)g; dst[2] = (uint8_t)b;
            dst += 3;
        } else {
            /* libjpeg's RGB -> gray weights (0.299, 0.587, 0.114) in 16-bit fixed point */
            *dst++ = (uint8_t)((19595u * r + 38470u * g + 7471u * b + 32768u) >> 16);
        }
    }
}

static int is_cmyk_cs(int cs) { return cs == TJCS_CMYK || cs == TJCS_YCCK; }

static sl_status check_args(const uint8_t *data, size_t len, int channels, int scale_num) {
    if (!data && len)
        return sl_err(SL_EINVAL, "jpeg: NULL data");
    if (channels != 1 && channels != 3)
        return sl_err(SL_EINVAL, "jpeg: channels must be 1 or 3, not %d", channels);
    if (scale_num < 1 || scale_num > 8)
        return sl_err(SL_EINVAL, "jpeg: scale %d/8 must be 1/8..8/8", scale_num);
    if (len == 0)
        return sl_err(SL_ECORRUPT, "jpeg: empty input (0 bytes)");
    if (len > ULONG_MAX)
        return sl_err(SL_ERANGE, "jpeg: input of %zu bytes is too large", len);
    return SL_OK;
}

/* The failure of the last TurboJPEG decode as SL_ECORRUPT (TurboJPEG decodes are strict
 * only: warnings stop them). */
static sl_status tj_fail(sl_jpeg_decoder *d, const char *what) {
    int warn = tjGetErrorCode(d->tj) == TJERR_WARNING;
    sl_err(SL_ECORRUPT, "jpeg: %s: %s", what, tjGetErrorStr2(d->tj));
    if (warn)
        sl_err_hint("the image is damaged or truncated; a lenient decoder would return the "
                    "pixels it could recover");
    return SL_ECORRUPT;
}

/* The scaling factor TurboJPEG would pick for a sw x sh target: the largest whose scaled
 * size fits. When that is not num/8 (tiny images where two factors give the same size),
 * the libjpeg path decodes instead, so that pixels match a crop at num/8 exactly. */
static int tj_picks(const sl_jpeg_decoder *d, int w, int h, int num) {
    int sw, sh;
    sl_jpeg_scaled_size(w, h, num, &sw, &sh);
    int best = -1, best_num = -1;
    for (int i = 0; i < d->tj_nfactors; i++) {
        int n = d->tj_nums[i];
        if (n < 0)
            continue;
        int fw, fh;
        sl_jpeg_scaled_size(w, h, n, &fw, &fh);
        if (fw <= sw && fh <= sh && n > best_num) {
            best_num = n;
            best = i;
        }
    }
    return best < 0 ? -1 : best_num;
}

/* ---- decoder lifetime ------------------------------------------------------------ */

/* d->cinfo created, with our error and progress managers (cinfo_ok set); SL_ENOMEM when
 * libjpeg cannot allocate it. */
static sl_status cinfo_create(sl_jpeg_decoder *d) {
    memset(&d->cinfo, 0, sizeof d->cinfo);
    d->cinfo.err = &d->jerr.pub;
    if (setjmp(d->jerr.jb))
        return sl_err(SL_ENOMEM, "jpeg: jpeg_create_decompress failed: %s", d->jerr.msg);
    jpeg_create_decompress(&d->cinfo);
    d->cinfo.progress = &d->progress;
    d->cinfo_ok = 1;
    return SL_OK;
}

sl_status sl_jpeg_decoder_new(sl_jpeg_decoder **out) {
    if (!out)
        return sl_err(SL_EINVAL, "jpeg: NULL out");
    *out = NULL;
    sl_jpeg_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return sl_err(SL_ENOMEM, "jpeg: cannot allocate a decoder");
    d->max_pixels = SL_JPEG_MAX_PIXELS_DEFAULT;
    d->tj = tjInitDecompress();
    if (!d->tj) {
        sl_err(SL_ENOMEM, "jpeg: tjInitDecompress failed: %s", tjGetErrorStr2(NULL));
        goto fail;
    }
    int nf = 0;
    tjscalingfactor *sf = tjGetScalingFactors(&nf);
    if (!sf || nf <= 0) {
        sl_err(SL_EINTERNAL, "jpeg: tjGetScalingFactors failed: %s", tjGetErrorStr2(NULL));
        goto fail;
    }
    if (nf > 32)
        nf = 32;
    for (int i = 0; i < nf; i++) {
        /* keep n/8 factors only; others (none in libjpeg-turbo 2.1) are never picked */
        int n = -1;
        if (sf[i].denom > 0 && (8 * sf[i].num) % sf[i].denom == 0)
            n = 8 * sf[i].num / sf[i].denom;
        d->tj_nums[i] = n;
    }
    d->tj_nfactors = nf;
    for (int n = 1; n <= 8; n++) {
        int found = 0;
        for (int i = 0; i < nf; i++)
            found |= d->tj_nums[i] == n;
        if (!found) {
            sl_err(SL_EUNSUPPORTED, "jpeg: this TurboJPEG cannot scale by %d/8", n);
            goto fail;
        }
    }

    jpeg_std_error(&d->jerr.pub);
    d->jerr.pub.error_exit = on_error_exit;
    d->jerr.pub.emit_message = on_emit_message;
    d->progress.progress_monitor = on_progress;
    if (cinfo_create(d))
        goto fail;
    *out = d;
    return SL_OK;
fail:
    sl_jpeg_decoder_free(d);
    return sl_errcode();
}

void sl_jpeg_decoder_free(sl_jpeg_decoder *d) {
    if (!d)
        return;
    if (d->tj)
        tjDestroy(d->tj);
    if (d->cinfo_ok)
        jpeg_destroy_decompress(&d->cinfo);
    free(d->scratch);
    free(d->cmyk_view);
    free(d);
}

void sl_jpeg_decoder_set_lenient(sl_jpeg_decoder *d, bool lenient) {
    if (d)
        d->lenient = lenient;
}

void sl_jpeg_decoder_set_speed(sl_jpeg_decoder *d, bool fast_dct, bool fancy_upsampling) {
    if (d) {
        d->fast_dct = fast_dct;
        d->fast_upsample = !fancy_upsampling;
    }
}

void sl_jpeg_decoder_set_max_pixels(sl_jpeg_decoder *d, int64_t max_pixels) {
    if (d)
        d->max_pixels = max_pixels > 0 ? max_pixels : SL_JPEG_MAX_PIXELS_DEFAULT;
}

int64_t sl_jpeg_decoder_max_pixels(const sl_jpeg_decoder *d) {
    return d ? d->max_pixels : SL_JPEG_MAX_PIXELS_DEFAULT;
}

/* Refuse an image over the decoder's pixel limit, before anything is allocated for it. */
static sl_status check_size(const sl_jpeg_decoder *d, const sl_jpeg_info *info) {
    int64_t px = (int64_t)info->width * info->height;
    if (px <= d->max_pixels)
        return SL_OK;
    sl_err(SL_ERANGE, "jpeg: the image is %dx%d (%lld pixels), over the decoder's limit of %lld pixels",
           info->width, info->height, (long long)px, (long long)d->max_pixels);
    sl_err_hint("a header can claim a huge image in a few bytes; if the image is genuine, raise "
                "the limit with sl_jpeg_decoder_set_max_pixels");
    return SL_ERANGE;
}

/* ---- header ---------------------------------------------------------------------- */

/* The libjpeg decompressor, its error manager readied for the call about to be made
 * (warnings fatal unless lenient, none seen yet); the caller then takes the setjmp. NULL
 * (SL_ENOMEM set) when the decompressor cannot be made again after fresh_handles failed. */
static struct jpeg_decompress_struct *libjpeg_begin(sl_jpeg_decoder *d) {
    if (!d->cinfo_ok && cinfo_create(d))
        return NULL;
    d->jerr.strict = !d->lenient;
    d->jerr.warned = 0;
    return &d->cinfo;
}

/* libjpeg's header reader, for files TurboJPEG 2.1 refuses to describe (subsampling it has
 * no TJSAMP_* name for, e.g. 3x1). Only called after TurboJPEG failed. */
static sl_status header_libjpeg(sl_jpeg_decoder *d, const uint8_t *data, size_t len,
                                sl_jpeg_info *out) {
    struct jpeg_decompress_struct *ci = libjpeg_begin(d);
    if (!ci)
        return SL_ENOMEM;
    if (setjmp(d->jerr.jb)) {
        jpeg_abort_decompress(ci);
        return sl_err(SL_ECORRUPT, "jpeg: bad header: %s", d->jerr.msg);
    }
    jpeg_mem_src(ci, data, (unsigned long)len);
    jpeg_read_header(ci, TRUE);
    out->width = (int)ci->image_width;
    out->height = (int)ci->image_height;
    out->components = ci->num_components;
    out->subsamp = -1;
    switch (ci->jpeg_color_space) {
    case JCS_GRAYSCALE: out->colorspace = TJCS_GRAY; break;
    case JCS_RGB: out->colorspace = TJCS_RGB; break;
    case JCS_CMYK: out->colorspace = TJCS_CMYK; break;
    case JCS_YCCK: out->colorspace = TJCS_YCCK; break;
    default: out->colorspace = TJCS_YCbCr; break;
    }
    jpeg_abort_decompress(ci);
    return SL_OK;
}

/* TurboJPEG 2.1's tjDecompressHeader3 leaves its handle mid-header when it fails, so the
 * next header read on the handle fails too ("0 x 0 image") even for a sound file. Start a
 * fresh handle after a failure (keeping the old one if that cannot be had). */
static void tj_reset(sl_jpeg_decoder *d) {
    tjhandle t = tjInitDecompress();
    if (!t)
        return;
    tjDestroy(d->tj);
    d->tj = t;
}

sl_status sl_jpeg_header(sl_jpeg_decoder *d, const uint8_t *data, size_t len, sl_jpeg_info *out) {
    if (!d || !out)
        return sl_err(SL_EINVAL, "jpeg: NULL decoder or info");
    memset(out, 0, sizeof *out);
    sl_status s = check_args(data, len, 3, 8);
    if (s)
        return s;
    int w = 0, h = 0, sub = -1, cs = -1;
    if (tjDecompressHeader3(d->tj, data, (unsigned long)len, &w, &h, &sub, &cs) != 0) {
        const char *why = tjGetErrorStr2(d->tj);
        if (strstr(why, "subsampling"))
            return header_libjpeg(d, data, len, out);
        sl_err(SL_ECORRUPT, "jpeg: bad header: %s", why);
        tj_reset(d);
        return SL_ECORRUPT;
    }
    if (w <= 0 || h <= 0) {
        tj_reset(d);
        return sl_err(SL_ECORRUPT, "jpeg: bad header: %d x %d image", w, h);
    }
    out->width = w;
    out->height = h;
    out->subsamp = sub;
    out->colorspace = cs;
    out->components = cs == TJCS_GRAY ? 1 : is_cmyk_cs(cs) ? 4 : 3;
    return SL_OK;
}

/* ---- sizes ----------------------------------------------------------------------- */

void sl_jpeg_scaled_size(int w, int h, int num, int *sw, int *sh) {
    if (sw)
        *sw = (int)(((long long)w * num + 7) / 8);
    if (sh)
        *sh = (int)(((long long)h * num + 7) / 8);
}

int sl_jpeg_pick_scale(int w, int h, int target_w, int target_h) {
    /* only 1/8, 2/8, 4/8: libjpeg-turbo's SIMD IDCTs cover those (and 8/8); the others use
     * generic C IDCTs (and chroma IDCTs of twice the size) that are slower than a full-size
     * decode */
    for (int num = 1; num < 8; num *= 2) {
        int sw, sh;
        sl_jpeg_scaled_size(w, h, num, &sw, &sh);
        if ((target_w <= 0 || sw >= target_w) && (target_h <= 0 || sh >= target_h))
            return num;
    }
    return 8;
}

/* ---- tables from an earlier image ------------------------------------------------ */

/* libjpeg keeps the quantization and Huffman tables an image defined for the images after
 * it (the "abbreviated datastream" of JPEG's spec: tables sent once, images after), in
 * TurboJPEG's handle as in ours. A file that uses a table it does not carry would then be
 * decoded with the tables of whatever image the decoder saw last: pixels that depend on
 * the order of the data set, a silent wrong answer. So before a decode we look at the
 * markers up to the first scan (a few hundred bytes; the segments are skipped by their
 * lengths): when the file is one sequential scan over every component, and every table that
 * scan uses was defined before it, nothing earlier can leak in. Anything else (progressive
 * and multi-scan files, which may define tables between scans; a missing table; markers
 * we cannot follow) gets fresh handles, on which a missing quantization table is an error
 * and a missing Huffman table the standard one (libjpeg-turbo's rule for Motion-JPEG). */
static int tables_self_contained(const uint8_t *p, size_t n) {
    unsigned q_def = 0, dc_def = 0, ac_def = 0, q_use = 0;
    int sof = -1, nf = 0;
    size_t i = 2;
    if (n < 4 || p[0] != 0xFF || p[1] != 0xD8)
        return 0;
    for (;;) {
        while (i < n && p[i] == 0xFF && i + 1 < n && p[i + 1] == 0xFF)
            i++; /* fill bytes */
        if (i + 4 > n || p[i] != 0xFF)
            return 0;
        int m = p[i + 1];
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) { /* no length */
            i += 2;
            continue;
        }
        if (m == 0xD8 || m == 0xD9)
            return 0;
        size_t seg = (size_t)p[i + 2] << 8 | p[i + 3], b = i + 4, e = i + 2 + seg;
        if (seg < 2 || e > n)
            return 0;
        if (m == 0xDB) { /* DQT: Pq Tq, 64 values of 1 or 2 bytes */
            while (b < e) {
                int id = p[b] & 15;
                size_t vals = (p[b] >> 4) ? 128 : 64;
                if (id > 3 || b + 1 + vals > e)
                    return 0;
                q_def |= 1u << id;
                b += 1 + vals;
            }
        } else if (m == 0xC4) { /* DHT: Tc Th, 16 counts, the values */
            while (b < e) {
                if (b + 17 > e)
                    return 0;
                int id = p[b] & 15;
                size_t vals = 0;
                for (int k = 1; k <= 16; k++)
                    vals += p[b + k];
                if (id > 3 || b + 17 + vals > e)
                    return 0;
                if (p[b] >> 4)
                    ac_def |= 1u << id;
                else
                    dc_def |= 1u << id;
                b += 17 + vals;
            }
        } else if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) { /* SOFn */
            if (sof >= 0 || seg < 8)
                return 0;
            sof = m;
            nf = p[b + 5];
            if (seg != 8 + 3 * (size_t)nf)
                return 0;
            for (int c = 0; c < nf; c++) {
                int id = p[b + 6 + 3 * c + 2];
                if (id > 3)
                    return 0;
                q_use |= 1u << id;
            }
        } else if (m == 0xDA) { /* SOS: Ns, then Cs and Td Ta per component */
            if ((sof != 0xC0 && sof != 0xC1 && sof != 0xC9) || seg < 3 || p[b] != nf ||
                seg != 6 + 2 * (size_t)nf || (q_use & ~q_def))
                return 0;
            if (sof == 0xC9)
                return 1; /* arithmetic coding: no Huffman tables */
            for (int c = 0; c < nf; c++) {
                int td = p[b + 2 + 2 * c] >> 4, ta = p[b + 2 + 2 * c] & 15;
                if (td > 3 || ta > 3 || !(dc_def >> td & 1) || !(ac_def >> ta & 1))
                    return 0;
            }
            return 1;
        }
        i = e;
    }
}

/* New TurboJPEG and libjpeg handles in place of d's, holding no tables. When one cannot be
 * made: SL_ENOMEM, and d keeps its old TurboJPEG handle, or has no libjpeg one (cinfo_ok 0:
 * the next decode tries again). */
static sl_status fresh_handles(sl_jpeg_decoder *d) {
    tjhandle t = tjInitDecompress();
    if (!t)
        return sl_err(SL_ENOMEM, "jpeg: tjInitDecompress failed: %s", tjGetErrorStr2(NULL));
    tjDestroy(d->tj);
    d->tj = t;
    if (d->cinfo_ok)
        jpeg_destroy_decompress(&d->cinfo);
    d->cinfo_ok = 0;
    return cinfo_create(d);
}

/* Fresh handles for a file that could otherwise see an earlier image's tables. */
static sl_status guard_tables(sl_jpeg_decoder *d, const uint8_t *data, size_t len) {
    return tables_self_contained(data, len) ? SL_OK : fresh_handles(d);
}

/* ---- libjpeg decode of a rectangle ------------------------------------------------ */

/* Decode rows [y, y+h) and columns [x, x+w) of the image at scale num/8 into out (w*ch
 * bytes a row). The caller validated the arguments against the header.
 *
 * jpeg_crop_scanline moves the left edge down to an iMCU boundary, and the fancy upsampler
 * treats the crop's edges as image edges (it replicates the last chroma sample instead of
 * interpolating with the neighbour outside), so the outermost columns of a crop can differ
 * from a full decode. We therefore crop wider on each side than asked (clipped to the
 * image) by max_h_samp_factor output pixels, at least one whole sample of every component
 * (a component sample spans max_h / h_samp pixels, fewer where the IDCT scales chroma up)
 * and the fancy upsampler reaches one sample beyond the pixel it makes; then we copy out
 * only the requested columns, whose pixels are then computed from exactly the same chroma
 * samples as in a full decode. (A whole iMCU on each side would cost 10-15% more IDCT,
 * upsampling and color conversion on a typical crop.) Rows need no such margin:
 * jpeg_skip_scanlines keeps the upsampler's context rows (test_jpeg checks 4:2:0 crops at
 * every scale and odd row offsets against the full decode).
 * With view set (and not CMYK, which needs a conversion), the rows are decoded straight
 * into d->scratch, h rows of the widened crop, and *view / *view_stride say where the
 * rectangle is in them: nothing is copied. */
static sl_status crop_libjpeg(sl_jpeg_decoder *d, const uint8_t *data, size_t len, int channels,
                              int num, int x, int y, int w, int h, uint8_t *out, const uint8_t **view,
                              size_t *view_stride) {
    struct jpeg_decompress_struct *ci = libjpeg_begin(d);
    if (!ci)
        return SL_ENOMEM;
    if (setjmp(d->jerr.jb)) {
        jpeg_abort_decompress(ci);
        sl_err(SL_ECORRUPT, "jpeg: decode failed: %s", d->jerr.msg);
        if (!d->lenient)
            sl_err_hint("the image is damaged or truncated");
        return SL_ECORRUPT;
    }
    jpeg_mem_src(ci, data, (unsigned long)len);
    jpeg_read_header(ci, TRUE);
    int cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
    int comps;
    if (cmyk) {
        ci->out_color_space = JCS_CMYK;
        comps = 4;
    } else {
        ci->out_color_space = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
        comps = channels;
    }
    ci->scale_num = (unsigned)num;
    ci->scale_denom = 8;
    ci->dct_method = d->fast_dct ? JDCT_IFAST : JDCT_ISLOW;
    ci->do_fancy_upsampling = d->fast_upsample ? FALSE : TRUE;
    ci->do_block_smoothing = TRUE;
    jpeg_start_decompress(ci);

    int ow = (int)ci->output_width, oh = (int)ci->output_height;
    if (x + w > ow || y + h > oh) {
        jpeg_abort_decompress(ci);
        return sl_err(SL_EINTERNAL, "jpeg: libjpeg output %dx%d smaller than crop end %dx%d",
                      ow, oh, x + w, y + h);
    }
    int margin = ci->num_components > 1 ? ci->max_h_samp_factor : 0;
    int cx0 = x - margin < 0 ? 0 : x - margin;
    int cx1 = x + w + margin > ow ? ow : x + w + margin;
    JDIMENSION xoff = (JDIMENSION)cx0, cw = (JDIMENSION)(cx1 - cx0);
    if (cx0 > 0 || cx1 < ow)
        jpeg_crop_scanline(ci, &xoff, &cw);
    if ((int)xoff > x || (int)(xoff + cw) < x + w) {
        jpeg_abort_decompress(ci);
        return sl_err(SL_EINTERNAL, "jpeg: crop widened to [%u, %u) does not cover [%d, %d)",
                      xoff, xoff + cw, x, x + w);
    }
    /* Read as many rows per call as libjpeg produces at once (rec_outbuf_height, up to
     * 4 here): one row per call costs an extra copy through libjpeg's internal buffer. */
    size_t row_bytes = (size_t)ci->output_width * (size_t)comps; /* output_width == cw now */
    int batch = ci->rec_outbuf_height < 1 ? 1 : ci->rec_outbuf_height > 4 ? 4 : ci->rec_outbuf_height;
    bool in_place = view && !cmyk;
    if (!in_place && !out) { /* a CMYK file the header read did not call CMYK */
        jpeg_abort_decompress(ci);
        return sl_err(SL_EINTERNAL, "jpeg: a %s crop without an output buffer", cmyk ? "CMYK" : "copied");
    }
    sl_status s = grow_scratch(d, row_bytes * (size_t)(in_place ? h : batch));
    if (s) {
        jpeg_abort_decompress(ci);
        return s;
    }
    if (y > 0) {
        JDIMENSION skipped = jpeg_skip_scanlines(ci, (JDIMENSION)y);
        if ((int)skipped != y) {
            jpeg_abort_decompress(ci);
            return sl_err(SL_EINTERNAL, "jpeg: skipped %u rows instead of %d", skipped, y);
        }
    }
    size_t col = (size_t)(x - (int)xoff) * (size_t)comps;
    for (int r = 0; r < h;) {
        JSAMPROW rows[4];
        int want = h - r < batch ? h - r : batch;
        for (int i = 0; i < want; i++)
            rows[i] = d->scratch + (size_t)(in_place ? r + i : i) * row_bytes;
        int got = (int)jpeg_read_scanlines(ci, rows, (JDIMENSION)want);
        if (got <= 0) {
            jpeg_abort_decompress(ci);
            return sl_err(SL_ECORRUPT, "jpeg: decoder stopped at row %d of %d", y + r, oh);
        }
        if (in_place) {
            r += got;
            continue;
        }
        for (int i = 0; i < got; i++, r++) {
            uint8_t *dst = out + (size_t)r * (size_t)w * (size_t)channels;
            if (cmyk)
                cmyk_convert(rows[i] + col, dst, (size_t)w, channels);
            else
                memcpy(dst, rows[i] + col, (size_t)w * (size_t)channels);
        }
    }
    /* Rows below the crop are not decoded, so damage there goes unnoticed: by design. */
    jpeg_abort_decompress(ci);
    if (in_place) {
        *view = d->scratch + col;
        *view_stride = row_bytes;
    }
    return SL_OK;
}

/* ---- public decodes --------------------------------------------------------------- */

/* Has out (cap bytes) room for the w x h pixels of `channels` channels a decode makes? */
static sl_status check_out(const uint8_t *out, size_t cap, int w, int h, int channels, const char *what) {
    size_t need = (size_t)w * (size_t)h * (size_t)channels;
    if (!out || cap < need)
        return sl_err(SL_ERANGE, "jpeg: %s needs %zu bytes (%dx%dx%d), buffer has %zu", what, need, w, h,
                      channels, out ? cap : 0);
    return SL_OK;
}

/* What both decodes check first: the arguments, the header, the size limit; then the size
 * of the image at scale_num / 8 in *sw x *sh. */
static sl_status decode_start(sl_jpeg_decoder *d, const uint8_t *data, size_t len, int channels,
                              int scale_num, sl_jpeg_info *info, int *sw, int *sh) {
    if (!d)
        return sl_err(SL_EINVAL, "jpeg: NULL decoder");
    sl_status s = check_args(data, len, channels, scale_num);
    if (s)
        return s;
    if ((s = sl_jpeg_header(d, data, len, info)) || (s = check_size(d, info)))
        return s;
    sl_jpeg_scaled_size(info->width, info->height, scale_num, sw, sh);
    return guard_tables(d, data, len);
}

sl_status sl_jpeg_decode(sl_jpeg_decoder *d, const uint8_t *data, size_t len, int channels,
                         int scale_num, uint8_t *out, size_t cap, int *out_w, int *out_h) {
    if (out_w)
        *out_w = 0;
    if (out_h)
        *out_h = 0;
    sl_jpeg_info info;
    int sw, sh;
    sl_status s = decode_start(d, data, len, channels, scale_num, &info, &sw, &sh);
    if (s || (s = check_out(out, cap, sw, sh, channels, "output")))
        return s;

    /* Lenient decodes go through libjpeg too: TurboJPEG 2.1 reports a fatal error that
     * follows a warning as a warning (tjGetErrorCode), and such a decode stopped part-way,
     * with rows of the output never written. Our error manager tells the two apart. */
    if (info.subsamp < 0 || d->lenient || tj_picks(d, info.width, info.height, scale_num) != scale_num) {
        s = crop_libjpeg(d, data, len, channels, scale_num, 0, 0, sw, sh, out, NULL, NULL);
    } else {
        int flags = TJFLAG_LIMITSCANS | TJFLAG_STOPONWARNING |
                    (d->fast_dct ? TJFLAG_FASTDCT : 0) | (d->fast_upsample ? TJFLAG_FASTUPSAMPLE : 0);
        if (is_cmyk_cs(info.colorspace)) {
            if ((s = grow_scratch(d, (size_t)sw * (size_t)sh * 4)))
                return s;
            if (tjDecompress2(d->tj, data, (unsigned long)len, d->scratch, sw, 0, sh, TJPF_CMYK,
                              flags) != 0 && (s = tj_fail(d, "decode failed")))
                return s;
            cmyk_convert(d->scratch, out, (size_t)sw * (size_t)sh, channels);
        } else {
            int pf = channels == 3 ? TJPF_RGB : TJPF_GRAY;
            if (tjDecompress2(d->tj, data, (unsigned long)len, out, sw, 0, sh, pf, flags) != 0)
                s = tj_fail(d, "decode failed");
        }
    }
    if (s)
        return s;
    if (out_w)
        *out_w = sw;
    if (out_h)
        *out_h = sh;
    return SL_OK;
}

/* What both crop decodes check: the arguments, the header, the rectangle. */
static sl_status crop_start(sl_jpeg_decoder *d, const uint8_t *data, size_t len, int channels,
                            int scale_num, int x, int y, int w, int h, sl_jpeg_info *info) {
    int sw, sh;
    sl_status s = decode_start(d, data, len, channels, scale_num, info, &sw, &sh);
    if (s)
        return s;
    if (w <= 0 || h <= 0 || x < 0 || y < 0 || x > sw - w || y > sh - h)
        return sl_err(SL_EINVAL, "jpeg: crop %dx%d at (%d, %d) is empty or outside the %dx%d image "
                      "(scale %d/8)", w, h, x, y, sw, sh, scale_num);
    return SL_OK;
}

sl_status sl_jpeg_decode_crop(sl_jpeg_decoder *d, const uint8_t *data, size_t len, int channels,
                              int scale_num, int x, int y, int w, int h, uint8_t *out,
                              size_t cap) {
    sl_jpeg_info info;
    sl_status s = crop_start(d, data, len, channels, scale_num, x, y, w, h, &info);
    if (s || (s = check_out(out, cap, w, h, channels, "crop output")))
        return s;
    return crop_libjpeg(d, data, len, channels, scale_num, x, y, w, h, out, NULL, NULL);
}

sl_status sl_jpeg_decode_crop_view(sl_jpeg_decoder *d, const uint8_t *data, size_t len,
                                   int channels, int scale_num, int x, int y, int w, int h,
                                   const uint8_t **px, size_t *stride) {
    *px = NULL;
    *stride = 0;
    sl_jpeg_info info;
    sl_status s = crop_start(d, data, len, channels, scale_num, x, y, w, h, &info);
    if (s)
        return s;
    const uint8_t *view = NULL;
    size_t view_stride = 0;
    uint8_t *out = NULL;
    if (is_cmyk_cs(info.colorspace)) {
        /* converted into a buffer of its own (crop_libjpeg decodes into scratch) */
        if ((s = grow_buf(&d->cmyk_view, &d->cmyk_view_cap, (size_t)w * (size_t)h * (size_t)channels)))
            return s;
        out = d->cmyk_view;
    }
    if ((s = crop_libjpeg(d, data, len, channels, scale_num, x, y, w, h, out, &view, &view_stride)))
        return s;
    *px = out ? out : view;
    *stride = out ? (size_t)w * (size_t)channels : view_stride;
    return SL_OK;
}

/* ---- encode ---------------------------------------------------------------------- */

sl_status sl_jpeg_encode2(const uint8_t *pixels, int w, int h, int channels, int quality,
                          int subsamp, uint8_t **out, size_t *len) {
    if (out)
        *out = NULL;
    if (len)
        *len = 0;
    if (!pixels || !out || !len)
        return sl_err(SL_EINVAL, "jpeg encode: NULL argument");
    if (w <= 0 || h <= 0 || w > 65500 || h > 65500)
        return sl_err(SL_EINVAL, "jpeg encode: size %dx%d must be 1..65500 a side", w, h);
    if (channels != 1 && channels != 3)
        return sl_err(SL_EINVAL, "jpeg encode: channels must be 1 or 3, not %d", channels);
    if (quality < 1 || quality > 100)
        return sl_err(SL_EINVAL, "jpeg encode: quality %d must be 1..100", quality);
    if (channels == 1)
        subsamp = TJSAMP_GRAY;
    else if (subsamp < 0 || subsamp >= TJ_NUMSAMP || subsamp == TJSAMP_GRAY)
        return sl_err(SL_EINVAL, "jpeg encode: bad color subsampling %d", subsamp);

    sl_status s = SL_OK;
    tjhandle tj = tjInitCompress();
    if (!tj)
        return sl_err(SL_ENOMEM, "jpeg encode: tjInitCompress failed: %s", tjGetErrorStr2(NULL));
    unsigned long cap = tjBufSize(w, h, subsamp);
    unsigned char *buf = (cap == (unsigned long)-1) ? NULL : malloc(cap);
    if (!buf) {
        s = sl_err(SL_ENOMEM, "jpeg encode: cannot allocate %lu bytes", cap);
        goto fail;
    }
    unsigned long n = cap;
    if (tjCompress2(tj, pixels, w, 0, h, channels == 3 ? TJPF_RGB : TJPF_GRAY, &buf, &n,
                    subsamp, quality, TJFLAG_NOREALLOC | TJFLAG_ACCURATEDCT) != 0) {
        s = sl_err(SL_EINTERNAL, "jpeg encode: %s", tjGetErrorStr2(tj));
        goto fail;
    }
    uint8_t *shrunk = realloc(buf, n ? n : 1);
    *out = shrunk ? shrunk : buf;
    *len = n;
    tjDestroy(tj);
    return SL_OK;
fail:
    free(buf);
    tjDestroy(tj);
    return s;
}

sl_status sl_jpeg_encode(const uint8_t *pixels, int w, int h, int channels, int quality,
                         uint8_t **out, size_t *len) {
    return sl_jpeg_encode2(pixels, w, h, channels, quality, TJSAMP_420, out, len);
}
