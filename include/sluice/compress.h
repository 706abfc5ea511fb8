/* Gradient compression for the wire: quantization (fp16, int8, 1-bit sign) and
 * sparsification (top-k), each with error feedback, chosen by
 * `strategy ring|ps compress=none|fp16|int8|sign|topk(F)` in the train block.
 *
 * Codecs (n float32 gradient values -> one payload; bytes per element on the wire):
 *   none   not a codec: the strategies send float32 as before (4 B/element).
 *   fp16   IEEE half, round to nearest even:                        2 B/element.
 *   int8   chunks of SL_COMPRESS_CHUNK (512) values: a float32 scale = max|x| / 127, then
 *          one int8 q = round(x / scale) in [-127, 127] per value; decodes to q * scale:
 *                                                                  1 + 4/512 = 1.008 B/element.
 *   sign   chunks of 512: two float32 scales, P = the mean of the chunk's values >= 0 and
 *          N = the mean magnitude of those < 0 (0 when there are none), then one bit per
 *          value (1: x >= 0, 0: x < 0), LSB first, the last byte's unused bits 0; decodes
 *          to +P or -N (1-bit SGD's reconstruction values, the least-squares pair for a
 *          sign threshold): 1/8 + 8/512 = 0.141 B/element.
 *   topk   chunks (buckets) of SL_COMPRESS_TOPK_CHUNK (4096) values: the k = ceil(F * 4096)
 *          (at least 1; the last, shorter chunk keeps min(k, its length)) values of largest
 *          |x| (ties: the lower index), sent as k uint16 offsets within the chunk, strictly
 *          increasing, then k float32 values; the rest decode to 0: 6 k / 4096 B/element
 *          (F = 0.01: k = 41, 0.060 B/element).
 * Top-k's sparsity warm-up (Deep Gradient Compression, Lin et al. 2018), `topk(F, warmup=W)`:
 * over the first W steps (steps 0..W-1, in four equal stages: stage j holds the steps s with
 * floor(4 s / W) = j) the fraction kept is max(F, 0.25 / 4^j): 25%, 6.25%, 1.5625%, 0.390625%
 * (F = 0.01: 25% -> 6.25% -> 1.5625% -> 1%), then F. The fraction is a function of the step
 * alone (sl_compress_topk_at), so every replica keeps the same k at every step, and a run
 * resumed at step S continues the schedule exactly. W = 0 (the default): no warm-up. The
 * error feedback state follows it with sl_compress_ef_at; a payload then carries the
 * step's k (the header's k field), which the receiver checks against its own schedule.
 * Every payload starts with a 24-byte header (little endian): magic "SLCZ", codec (1 fp16,
 * 2 int8, 3 sign, 4 topk), three zero bytes, the element count (u64), the chunk size (u32:
 * 0 for fp16, 512, 512, 4096) and k (u32: 0 except topk). The payload's size is a function
 * of (codec, k, count) alone (sl_compress_size), so every replica's payload of a step has
 * the same size. Arithmetic: float32 for the scales and the decoded values (a divide per
 * value for int8, compares for top-k); encoding is one pass (top-k: a k-heap per chunk).
 *
 * Error feedback (sl_compress_ef, one per replica): the residual r (float64, one per
 * gradient value, 0 at the start) is what was not sent. Each step
 *     e    = g + r                     (float64)
 *     sent = decode(encode((float)e))  (float32; the payload carries exactly this)
 *     r    = e - sent                  (float64)
 * so sent + r_new == g + r_old exactly whenever both float64 additions are exact, which
 * they are while the values involved (gradients, residuals, decoded values) span fewer
 * than 53 binades from the largest to the smallest nonzero bit: then, bit for bit, the sum
 * over steps of what was sent plus the final residual equals the sum of the gradients
 * (tests/unit/test_compress.c checks it over hundreds of steps). Otherwise each addition
 * rounds once in float64 (relative 2^-53), far below the float32 the model uses. The
 * residual is saved in checkpoints (train/checkpoint.c), so a resumed run continues
 * bit-identically.
 *
 * Decoding validates everything before it touches the output: the header (magic, codec,
 * the zero bytes, count, chunk and k as the receiver expects them), the exact size, every
 * scale finite and >= 0 (int8: at most FLT_MAX / 127), every int8 in [-127, 127], every
 * sign chunk's padding bits 0, every top-k offset below its chunk's length and strictly
 * increasing, every value finite (fp16 and top-k). A violation is SL_ECORRUPT naming `who` (the peer and step the caller
 * passes), the byte offset and what is wrong; the output is then unchanged. Encoding a
 * NaN or Inf is SL_ERANGE naming the index (a diverged gradient is not sent).
 *
 * Workload: 0.1-100 M floats per step per replica; one encode per step, world_size
 * decodes (ring) or one decode per push (ps). */
#ifndef SLUICE_COMPRESS_H
#define SLUICE_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SL_COMPRESS_CHUNK 512u          /* int8 and sign: values per scale */
#define SL_COMPRESS_TOPK_CHUNK 4096u    /* top-k: values per bucket */
#define SL_COMPRESS_HEADER 24u

typedef enum sl_compress_kind {
    SL_COMPRESS_NONE = 0,
    SL_COMPRESS_FP16 = 1,
    SL_COMPRESS_INT8 = 2,
    SL_COMPRESS_SIGN = 3,
    SL_COMPRESS_TOPK = 4,
} sl_compress_kind;

typedef struct sl_compress_spec {
    sl_compress_kind kind;  /* zero-initialised: none */
    double topk;            /* TOPK: the fraction kept, in (0, 1] (after the warm-up) */
    int64_t warmup;         /* TOPK: the warm-up's steps (see the top); 0: none */
} sl_compress_spec;

#define SL_COMPRESS_WARMUP_MAX 1000000000 /* the largest warm-up, in steps */

/* Parse "none", "fp16", "int8", "sign", "topk:F" or "topk(F)" (F a fraction in (0, 1], or
 * a percentage "1%"), each top-k form optionally with a warm-up in steps: "topk:F,warmup=W"
 * or "topk(F,warmup=W)" (W an integer in [0, SL_COMPRESS_WARMUP_MAX]). SL_OK, or SL_EINVAL
 * with a message naming the text and listing the choices; *out unchanged on failure. */
sl_status sl_compress_parse(const char *text, sl_compress_spec *out);

/* "none", "fp16", "int8", "sign", "topk:0.01", "topk:0.01,warmup=1800" into buf (always
 * NUL-terminated; sl_compress_parse reads it back); returns buf. */
const char *sl_compress_name(const sl_compress_spec *spec, char *buf, size_t n);

/* The fraction top-k keeps at step `step` (0-based; a negative step counts as 0): F, or
 * during the warm-up max(F, 0.25 / 4^j) (see the top); 0 for the other codecs. */
double sl_compress_topk_at(const sl_compress_spec *spec, int64_t step);

/* Top-k's k per full chunk: ceil(F * 4096) clamped to [1, 4096]; 0 for the other codecs. */
uint32_t sl_compress_topk_k(const sl_compress_spec *spec);

/* The exact payload size for count values (0 for none). */
size_t sl_compress_size(const sl_compress_spec *spec, size_t count);

/* Encode x[0..count) into out (cap bytes, at least sl_compress_size). SL_OK with *len the
 * size; SL_EINVAL (kind none, cap too small), SL_ERANGE for a NaN or Inf ("gradient value
 * I is nan"); out is unspecified on failure. */
sl_status sl_compress_encode(const sl_compress_spec *spec, const float *x, size_t count, void *out, size_t cap,
                             size_t *len);

/* Validate a payload of len bytes (outside bytes: see the top) that must hold count values
 * of codec spec, and add its decoded values into acc[0..count) (acc[i] += v[i], in index
 * order; top-k touches only its kept indices). `who` names the sender in messages (e.g.
 * "rank 1, step 7"; NULL: "payload"). SL_OK; SL_ECORRUPT with "WHO: compressed gradient:
 * byte OFF: ..." and acc unchanged. */
sl_status sl_compress_decode_add(const sl_compress_spec *spec, const void *data, size_t len, size_t count, float *acc,
                                 const char *who);

/* Validate only (as sl_compress_decode_add, without the output). */
sl_status sl_compress_check(const sl_compress_spec *spec, const void *data, size_t len, size_t count,
                            const char *who);

/* ---- error feedback --------------------------------------------------------------------- */

typedef struct sl_compress_ef sl_compress_ef;

/* Residual state for count values of codec spec (kind != none), all zero. SL_OK,
 * SL_EINVAL (none), SL_ENOMEM. */
sl_status sl_compress_ef_create(const sl_compress_spec *spec, size_t count, sl_compress_ef **out);
void sl_compress_ef_free(sl_compress_ef *ef); /* NULL is a no-op */

/* One step (see the top): add the residual to g[0..count), encode into out (cap bytes),
 * *len its size; sent (may be NULL) receives the decoded values (what every receiver will
 * see); the residual becomes what was not sent. SL_OK; SL_EINVAL (count differs from the
 * state's, cap too small), SL_ERANGE (a NaN or Inf in g + r: the residual is then
 * unchanged). */
sl_status sl_compress_ef_step(sl_compress_ef *ef, const float *g, size_t count, void *out, size_t cap, size_t *len,
                              float *sent);

/* The codec of the next sl_compress_ef_step: that of step `step`, i.e. top-k with the
 * warm-up's fraction (sl_compress_topk_at); the other codecs, and top-k without warm-up,
 * are unchanged. The residual is kept (it holds what was not sent, whatever k was). */
void sl_compress_ef_at(sl_compress_ef *ef, int64_t step);

/* The residual (count float64 values; writable, e.g. to restore a checkpoint's). */
double *sl_compress_ef_residual(sl_compress_ef *ef, size_t *count);
/* The codec the next step encodes with (top-k: the fraction of the step given to
 * sl_compress_ef_at, warmup 0); what a receiver of that step decodes with. */
const sl_compress_spec *sl_compress_ef_spec(const sl_compress_ef *ef);

#ifdef __cplusplus
}
#endif
#endif
