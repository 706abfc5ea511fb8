/* Benchmark: CPU time per image of bench_pipeline's per-image work, on one thread of one
 * process, against a plain full decode of the same image — a ratio that load on the
 * machine barely moves, unlike images/s.
 *
 * Each round times, one after another on the calling thread (CLOCK_THREAD_CPUTIME_ID):
 *   full   sl_jpeg_decode of every image at full size to RGB (what bench_pipeline's
 *          TurboJPEG ceiling times);
 *   fast   bench_pipeline's fast-mode element function: decode_jpeg (DCT scaling allowed)
 *          | random_resized_crop 224 (2-tap) | random_flip | normalize, applied the way
 *          map_batch does (sl__fn_apply_to: from the second image of a batch on, the
 *          function may build its result in the batch), then the float32 image copied into
 *          its slot of the 64-image batch unless it is already there;
 *   exact  the same with dct_scaling off and the antialiased resize;
 *   speed  fast mode with decode_jpeg's speed options (dct_method=INTEGER_FAST,
 *          fancy_upscaling=false: sl_fn_set_jpeg_speed).
 * The modes take turns every 50 images. The elements' seeds are the same every round, so
 * every round does the same work. Printed:
 * per mode, the median and min..max over the rounds of CPU ms per image, the ratios of the
 * medians to full decode, and how often fast mode's decode picked a DCT scale below 8/8.
 *
 * Usage: bench_jpeg_cpu [--only full|fast|exact] [DIR] [ROUNDS] [N]
 *   DIR: *.jpg files (default /tmp/sluice-bench/jpeg-2000, bench_pipeline's corpus: run
 *   bench_pipeline once to make it), ROUNDS default 5, N default 2000.
 *   --only MODE: time that mode alone (for a profiler).
 * Ends with
 *   RESULT bench_jpeg_cpu full_ms=F fast_ms=X exact_ms=E fast_vs_full=R dct_scaled=P speed_vs_full=S
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipeline/fn/image.h" /* and pipeline/internal.h: sl__fn_apply, the crop geometry */
#include "sluice/fn.h"
#include "sluice/jpeg.h"

#define BATCH 64
#define MAXROUNDS 32
#define CHUNK 50

enum { FULL, FAST, EXACT, SPEED, NMODES };
static const char *const MODE[NMODES] = {"full", "fast", "exact", "speed"};

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int die(const char *what) {
    fprintf(stderr, "bench_jpeg_cpu: %s: %s\n", what, sl_errmsg());
    return 1;
}

/* bench_pipeline's element function after parse_example; *geom gets its crop. */
static sl_status make_chain(int mode, sl_fn **out, sl_fn **geom) {
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    sl_fn *f[4] = {0};
    sl_status s;
    if ((s = sl_fn_decode_jpeg("image", 3, &f[0]))) goto done;
    if ((s = sl_fn_set_dct_scaling(f[0], mode != EXACT))) goto done;
    if (mode == SPEED && (s = sl_fn_set_jpeg_speed(f[0], true, false))) goto done;
    if ((s = sl_fn_random_resized_crop("image", 224, 224, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &f[1]))) goto done;
    if ((s = sl_fn_set_antialias(f[1], mode == EXACT))) goto done;
    if ((s = sl_fn_random_flip("image", true, false, 0.5, &f[2]))) goto done;
    if ((s = sl_fn_normalize("image", mean, std, 3, true, &f[3]))) goto done;
    s = sl_fn_chain(f, 4, out);
    if (!s) *geom = sl_fn_ref(f[1]);
done:
    for (int i = 0; i < 4; i++) sl_fn_unref(f[i]);
    return s;
}

static uint64_t elem_seed(int i) { return sl__mix(12345, (uint64_t)i); }

int main(int argc, char **argv) {
    int only = -1, rounds = 5, n = 2000, pos = 0;
    const char *dir = "/tmp/sluice-bench/jpeg-2000";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            i++;
            for (int m = 0; m < NMODES; m++)
                if (strcmp(argv[i], MODE[m]) == 0) only = m;
            if (only < 0) return fprintf(stderr, "bench_jpeg_cpu: --only full|fast|exact|speed\n"), 2;
        } else if (pos == 0) {
            dir = argv[i], pos++;
        } else if (pos == 1) {
            rounds = atoi(argv[i]), pos++;
        } else {
            n = atoi(argv[i]);
        }
    }
    if (rounds < 1) rounds = 1;
    if (rounds > MAXROUNDS) rounds = MAXROUNDS;
    char pat[600];
    snprintf(pat, sizeof pat, "%s/*.jpg", dir);
    glob_t g;
    if (glob(pat, 0, NULL, &g) != 0 || g.gl_pathc == 0)
        return fprintf(stderr, "bench_jpeg_cpu: no %s (run bench_pipeline once to make the corpus)\n", pat), 1;
    if ((size_t)n > g.gl_pathc || n < 1) n = (int)g.gl_pathc;

    sl_buf **jpg = calloc((size_t)n, sizeof *jpg);
    for (int i = 0; i < n; i++) {
        FILE *f = fopen(g.gl_pathv[i], "rb");
        if (!f) return fprintf(stderr, "bench_jpeg_cpu: cannot open %s\n", g.gl_pathv[i]), 1;
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        rewind(f);
        jpg[i] = sl_buf_new((size_t)len);
        if (!jpg[i] || fread(jpg[i]->data, 1, (size_t)len, f) != (size_t)len) return die(g.gl_pathv[i]);
        fclose(f);
    }
    globfree(&g);

    sl_fn *chain[NMODES] = {0}, *geom[NMODES] = {0};
    sl_fn_states *st[NMODES] = {0};
    for (int m = FAST; m < NMODES; m++)
        if (make_chain(m, &chain[m], &geom[m]) || sl__fn_states_new(chain[m], &st[m])) return die("chain");
    sl_jpeg_decoder *d;
    if (sl_jpeg_decoder_new(&d)) return die("decoder");
    size_t cap = (size_t)4096 * 4096 * 3;
    uint8_t *full = malloc(cap);
    /* the batch the images go into, as map_batch has it: element k > 0 of a batch may be
     * built in its slot (sl__fn_apply_to), else it is copied there */
    sl_element batch;
    sl_element_init(&batch);
    int64_t bdims[4] = {BATCH, 224, 224, 3};
    sl_tensor bt;
    if (!full || sl_tensor_alloc(&bt, SL_DT_F32, 4, bdims) || sl_element_set(&batch, "image", &bt))
        return die("batch");
    size_t per = sizeof(float) * 224 * 224 * 3;

    /* how often fast mode decodes at a reduced DCT scale (decode_jpeg's rule, its seeds) */
    int scaled = 0, by_num[9] = {0};
    const sl__geom_fn *gf = sl__as_geom(geom[FAST]);
    for (int i = 0; i < n; i++) {
        sl_jpeg_info info;
        if (sl_jpeg_header(d, jpg[i]->data, jpg[i]->size, &info)) return die("header");
        sl__rect r;
        int64_t oh, ow;
        sl__geom_plan(gf, info.height, info.width, sl__mix(elem_seed(i), 1), &r, &oh, &ow);
        int num = sl_jpeg_pick_scale((int)r.w, (int)r.h, (int)ow, (int)oh);
        by_num[num]++;
        scaled += num < 8;
    }

    double ms[NMODES][MAXROUNDS];
    printf("bench_jpeg_cpu: %d images from %s, %d round%s, one thread\n", n, dir, rounds, rounds > 1 ? "s" : "");
    for (int rd = 0; rd < rounds; rd++) {
        double sum[NMODES] = {0};
        /* the modes take turns every CHUNK images, so that a change in the machine's load
         * falls on all of them alike */
        for (int c0 = 0; c0 < n; c0 += CHUNK)
        for (int m = 0; m < NMODES; m++) {
            if (only >= 0 && m != only) continue;
            double t0 = thread_cpu_s();
            for (int i = c0; i < n && i < c0 + CHUNK; i++) {
                const uint8_t *p = jpg[i]->data;
                size_t len = jpg[i]->size;
                if (m == FULL) {
                    if (sl_jpeg_decode(d, p, len, 3, 8, full, cap, NULL, NULL)) return die("decode");
                    continue;
                }
                sl_element e;
                sl_element_init(&e);
                sl_tensor t;
                if (sl_tensor_alloc(&t, SL_DT_BYTES, 0, NULL)) return die("tensor");
                *(sl_bytes *)t.data = (sl_bytes){p, len};
                t.aux = sl_buf_ref(jpg[i]);
                if (sl_element_set(&e, "image", &t)) return die("element");
                int k = i % BATCH;
                sl__fn_dest dest = {&batch, k};
                if (sl__fn_apply_to(chain[m], &e, elem_seed(i), i, st[m], k ? &dest : NULL))
                    return die(MODE[m]);
                const sl_tensor *img = &e.t[sl_element_find(&e, "image")];
                if (img->dtype != SL_DT_F32 || sl_tensor_nbytes(img) != per)
                    return fprintf(stderr, "bench_jpeg_cpu: unexpected output\n"), 1;
                char *slot = (char *)batch.t[0].data + per * (size_t)k;
                if (img->data != slot) memmove(slot, img->data, per);
                sl_element_clear(&e);
            }
            sum[m] += thread_cpu_s() - t0;
        }
        for (int m = 0; m < NMODES; m++) ms[m][rd] = sum[m] * 1e3 / n;
        printf("  round %d:", rd + 1);
        for (int m = 0; m < NMODES; m++)
            if (only < 0 || m == only) printf(" %s %.3f ms", MODE[m], ms[m][rd]);
        printf("\n");
    }

    double med[NMODES] = {0};
    for (int m = 0; m < NMODES; m++) {
        if (only >= 0 && m != only) continue;
        double t[MAXROUNDS];
        memcpy(t, ms[m], sizeof(double) * (size_t)rounds);
        for (int a = 1; a < rounds; a++) /* insertion sort: a handful of values */
            for (int b = a; b > 0 && t[b - 1] > t[b]; b--) {
                double x = t[b];
                t[b] = t[b - 1];
                t[b - 1] = x;
            }
        med[m] = rounds % 2 ? t[rounds / 2] : (t[rounds / 2 - 1] + t[rounds / 2]) / 2;
        printf("  %-5s median %.3f ms/image [%.3f .. %.3f]", MODE[m], med[m], t[0], t[rounds - 1]);
        if (m != FULL && med[FULL] > 0) printf("  %.3f x full", med[m] / med[FULL]);
        printf("\n");
    }
    printf("  fast mode's DCT scale: %.1f%% of images below 8/8 (", 100.0 * scaled / n);
    for (int k = 1; k <= 8; k++)
        if (by_num[k]) printf(" %d/8: %d", k, by_num[k]);
    printf(" )\n");
    printf("RESULT bench_jpeg_cpu full_ms=%.3f fast_ms=%.3f exact_ms=%.3f fast_vs_full=%.3f dct_scaled=%.3f "
           "speed_vs_full=%.3f\n",
           med[FULL], med[FAST], med[EXACT], med[FULL] > 0 ? med[FAST] / med[FULL] : 0, (double)scaled / n,
           med[FULL] > 0 ? med[SPEED] / med[FULL] : 0);

    for (int m = FAST; m < NMODES; m++) {
        sl__fn_states_free(chain[m], st[m]);
        sl_fn_unref(chain[m]);
        sl_fn_unref(geom[m]);
    }
    for (int i = 0; i < n; i++) sl_buf_unref(jpg[i]);
    free(jpg);
    free(full);
    sl_element_clear(&batch);
    sl_jpeg_decoder_free(d);
    return 0;
}
