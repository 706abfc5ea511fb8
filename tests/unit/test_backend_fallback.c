/* The backend wrappers (train/backend.c): the fallbacks they supply for a backend's optional
 * ops give the op's floats bit for bit, and their argument checks answer the same on every
 * backend. The backend without the optional ops is the CPU backend with every member of the
 * vtable's optional section (act_backward_set onwards, including any added later) NULL and
 * the required ones as they are: models on it (an MLP, a CNN, a residual network) train and
 * evaluate to exactly the loss, gradients, parameters and optimizer state of the same models
 * on the full CPU backend. The convolutions are narrow enough (kw * c < 32) that the full
 * backend multiplies them through im2col too, as its conv_gemm says, and small enough to run
 * in one chunk of images: over several, a backend with run_tasks sums each chunk's kernel
 * gradient apart and adds them up, which rounds differently from one running sum (the model
 * asks sl__be_has_tasks), so the comparison holds on any CPU. */
#include <math.h>
#include <stddef.h>

#include "sluice/model.h"
#include "test.h"
#include "train/model_impl.h"
#include "train/internal.h"

static uint64_t rng_state = 0x5eed5eedull;

static float frand(void) { /* [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static sl_backend_ops thin_ops;

/* The CPU backend with the optional members of its vtable NULL. */
static sl_status thin_cpu(int threads, sl_backend **out) {
    sl_status s = sl__backend_cpu_new(threads, out);
    if (s) return s;
    thin_ops = *(*out)->ops;
    const size_t at = offsetof(sl_backend_ops, act_backward_set);
    memset((char *)&thin_ops + at, 0, sizeof thin_ops - at);
    (*out)->ops = &thin_ops;
    return SL_OK;
}

static sl_layer_spec L_input(int64_t a, int64_t b, int64_t c) {
    sl_layer_spec s = {.kind = SL_LAYER_INPUT};
    s.shape[0] = a, s.shape[1] = b, s.shape[2] = c;
    s.rank = c ? 3 : b ? 2 : 1;
    return s;
}
static sl_layer_spec L_dense(int units, int act) {
    return (sl_layer_spec){.kind = SL_LAYER_DENSE, .units = units, .activation = act};
}
static sl_layer_spec L_conv(int f, int k, int stride, sl_padding pad, int act) {
    return (sl_layer_spec){.kind = SL_LAYER_CONV2D, .filters = f, .kh = k, .kw = k, .stride = stride, .padding = pad,
                           .activation = act};
}
static sl_layer_spec L_pool(sl_layer_kind k, int size, int stride, sl_padding pad) {
    return (sl_layer_spec){.kind = k, .kh = size, .stride = stride, .padding = pad};
}
static sl_layer_spec L_kind(sl_layer_kind k) { return (sl_layer_spec){.kind = k}; }
static sl_layer_spec L_from(sl_layer_spec s, int a, int b) { /* reads spec a (and b when >= 0) */
    s.inputs[0] = a, s.inputs[1] = b;
    s.ninputs = b >= 0 ? 2 : 1;
    return s;
}

/* The first float where a and b differ, printed; 1 when they do. */
static int differ(const char *model, const char *what, int step, const float *a, const float *b, size_t n) {
    if (!memcmp(a, b, n * sizeof(float))) return 0;
    size_t i = 0;
    while (i < n && !memcmp(a + i, b + i, sizeof(float))) i++;
    printf("  %s: %s after step %d differ at %zu of %zu: %.9g (full) vs %.9g (fallbacks)\n", model, what, step, i, n,
           a[i], b[i]);
    return 1;
}

static int results_differ(const char *model, const char *what, int step, const sl_step_result *a,
                          const sl_step_result *b) {
    if (!memcmp(&a->loss, &b->loss, sizeof a->loss) && a->correct == b->correct && a->top5 == b->top5) return 0;
    printf("  %s: %s %d: loss %.17g / %.17g, correct %lld / %lld, top5 %lld / %lld (full / fallbacks)\n", model, what,
           step, a->loss, b->loss, (long long)a->correct, (long long)b->correct, (long long)a->top5,
           (long long)b->top5);
    return 1;
}

/* The model specs[0..n) on the full CPU backend (0) and on thin_cpu (1), both 2 threads,
 * the same seed: `steps` SGD steps on the same batches, then an eval step. Returns how many
 * comparisons failed (printed), or -1 when a call failed. */
static int same_bits(const char *model, const sl_layer_spec *specs, int n, int B, int steps) {
    sl_model *m[2] = {NULL, NULL};
    sl_optim *opt[2] = {NULL, NULL};
    sl_tensor x = SL_TENSOR_EMPTY, y = SL_TENSOR_EMPTY;
    int bad = -1;
    sl_model_opts o = sl_model_opts_default();
    o.backend = SL_BACKEND_CPU;
    o.threads = 2;
    o.seed = 3;
    o.max_batch = B;
    sl_backend *thin = NULL;
    sl_optim_spec sp = {.kind = SL_OPTIM_SGD, .momentum = 0.9f, .weight_decay = 1e-3f};
    if (sl_model_create(specs, n, &o, &m[0]) || thin_cpu(2, &thin) || sl__model_create_on(specs, n, &o, thin, &m[1]) ||
        sl_optim_create(m[0], &sp, &opt[0]) || sl_optim_create(m[1], &sp, &opt[1])) {
        printf("  %s: create: %s\n", model, sl_errmsg());
        goto done;
    }
    int64_t xd[4] = {B, specs[0].shape[0], specs[0].shape[1], specs[0].shape[2]}, yd[1] = {B};
    if (sl_tensor_alloc(&x, SL_DT_F32, specs[0].rank + 1, xd) || sl_tensor_alloc(&y, SL_DT_I64, 1, yd)) goto done;
    const int classes = sl_model_classes(m[0]);
    size_t np, nx = (size_t)sl_tensor_numel(&x), ns[2];
    const float *g[2], *ig[2], *p[2], *st[2];
    for (int k = 0; k < 2; k++) {
        g[k] = sl_model_grads(m[k], &np);
        p[k] = sl_model_params(m[k], NULL);
        ig[k] = sl__model_input_grad(m[k], true);
        st[k] = sl_optim_state(opt[k], &ns[k], NULL);
    }
    if (!ig[0] || !ig[1] || ns[0] != ns[1]) goto done;
    bad = 0;
    sl_step_result r[2];
    for (int s = 0; s < steps; s++) {
        for (size_t i = 0; i < nx; i++) ((float *)x.data)[i] = frand();
        for (int i = 0; i < B; i++) ((int64_t *)y.data)[i] = (i * 5 + s) % classes;
        for (int k = 0; k < 2; k++)
            if (sl_model_zero_grads(m[k]) || sl_model_train_step(m[k], &x, &y, 1.0f, &r[k]) ||
                sl_optim_step(opt[k], 0.05f)) {
                printf("  %s: step %d on %s: %s\n", model, s, k ? "fallbacks" : "full", sl_errmsg());
                bad = -1;
                goto done;
            }
        size_t nonzero = 0, ntr = sl__model_trainable(m[0]);
        for (size_t i = 0; i < ntr; i++) nonzero += g[0][i] != 0.0f;
        if (nonzero <= ntr / 2) printf("  %s: step %d: %zu of %zu gradients nonzero\n", model, s, nonzero, ntr), bad++;
        bad += results_differ(model, "train step", s, &r[0], &r[1]);
        bad += differ(model, "gradients", s, g[0], g[1], np);
        bad += differ(model, "input gradients", s, ig[0], ig[1], nx);
        bad += differ(model, "parameters", s, p[0], p[1], np); /* batchnorm running stats too */
        bad += differ(model, "optimizer state", s, st[0], st[1], ns[0]);
    }
    for (int k = 0; k < 2; k++)
        if (sl_model_eval_step(m[k], &x, &y, &r[k])) {
            printf("  %s: eval: %s\n", model, sl_errmsg());
            bad = -1;
            goto done;
        }
    bad += results_differ(model, "eval step", steps, &r[0], &r[1]);
done:
    sl_tensor_release(&x);
    sl_tensor_release(&y);
    for (int k = 0; k < 2; k++) {
        sl_optim_free(opt[k]);
        sl_model_free(m[k]);
    }
    return bad;
}

/* Dense layers with each activation fused (bias_act) and as layers, dropout. */
TEST(test_mlp_same_bits) {
    const sl_layer_spec specs[] = {L_input(12, 0, 0), L_dense(16, 1), {.kind = SL_LAYER_DROPOUT, .rate = 0.25f},
                                   L_dense(10, 2), L_dense(8, 3), L_dense(6, 0), L_kind(SL_LAYER_RELU),
                                   L_kind(SL_LAYER_FLATTEN), L_dense(4, 0)};
    ASSERT_EQ(same_bits("mlp", specs, (int)(sizeof specs / sizeof specs[0]), 6, 3), 0);
}

/* A ReLU conv under a tiling max pool (maxpool_relu_backward_set), batchnorm, an overlapping
 * max pool, a 1x1 conv (its input is its im2col), an average pool. */
TEST(test_cnn_same_bits) {
    const sl_layer_spec specs[] = {L_input(8, 8, 3),
                                   L_conv(6, 3, 1, SL_PAD_SAME, 1),
                                   L_pool(SL_LAYER_MAXPOOL, 2, 0, SL_PAD_VALID),
                                   L_conv(5, 3, 1, SL_PAD_SAME, 0),
                                   {.kind = SL_LAYER_BATCHNORM},
                                   L_kind(SL_LAYER_RELU),
                                   L_pool(SL_LAYER_MAXPOOL, 3, 2, SL_PAD_SAME),
                                   L_conv(4, 1, 1, SL_PAD_VALID, 2),
                                   L_pool(SL_LAYER_AVGPOOL, 2, 0, SL_PAD_VALID),
                                   L_kind(SL_LAYER_FLATTEN),
                                   L_dense(4, 0)};
    const int n = (int)(sizeof specs / sizeof specs[0]);
    sl_model_opts o = sl_model_opts_default();
    o.backend = SL_BACKEND_CPU;
    o.max_batch = 6;
    sl_model *m;
    ASSERT_OK(sl_model_create(specs, n, &o, &m));
    bool fused = m->L[1].relu_pool && m->L[0].dout_pre, direct = m->L[6].direct; /* L[0] is the first conv */
    sl_model_free(m);
    ASSERT(fused && direct);
    ASSERT_EQ(same_bits("cnn", specs, n, 6, 3), 0);
}

/* Residual blocks: batchnorm, add, a stride-2 conv beside a 1x1 stride-2 projection, concat,
 * global average pooling. */
TEST(test_resnet_same_bits) {
    sl_layer_spec bn = {.kind = SL_LAYER_BATCHNORM}, add = L_kind(SL_LAYER_ADD), cat = L_kind(SL_LAYER_CONCAT);
    const sl_layer_spec specs[] = {L_input(6, 6, 4),
                                   L_conv(4, 3, 1, SL_PAD_SAME, 0), /* 1 */
                                   bn,
                                   L_kind(SL_LAYER_RELU), /* 3 */
                                   L_conv(4, 3, 1, SL_PAD_SAME, 0),
                                   bn, /* 5 */
                                   L_from(add, 3, 5),
                                   L_kind(SL_LAYER_RELU), /* 7 */
                                   L_conv(6, 3, 2, SL_PAD_SAME, 1), /* 8 */
                                   L_from(L_conv(6, 1, 2, SL_PAD_SAME, 0), 7, -1),
                                   L_from(add, 8, 9), /* 10 */
                                   L_from(cat, 10, 8),
                                   L_kind(SL_LAYER_GLOBAL_AVGPOOL),
                                   L_dense(3, 0)};
    ASSERT_EQ(same_bits("resnet", specs, (int)(sizeof specs / sizeof specs[0]), 5, 3), 0);
}

/* ---- the wrappers one at a time, on host buffers (the CPU backend's memory) ---- */

typedef struct two {
    sl_backend *full, *thin;
} two;

static int two_open(two *t) {
    return sl__backend_cpu_new(2, &t->full) || thin_cpu(2, &t->thin);
}

static void two_close(two *t) {
    sl__backend_free(t->full);
    sl__backend_free(t->thin);
}

static void fill_rand(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = frand();
}

/* bias_act and act_backward_set, each activation: the fallback writes the op's floats; and
 * the wrappers' queries answer what each backend has. */
TEST(test_fused_elementwise_fallbacks) {
    two t;
    ASSERT_OK(two_open(&t));
    ASSERT(t.full->ops->bias_act && t.full->ops->act_backward_set && t.full->ops->maxpool_relu_backward_set);
    ASSERT(!t.thin->ops->bias_act && !t.thin->ops->act_backward_set && !t.thin->ops->maxpool_relu_backward_set);
    ASSERT(sl__be_has_tasks(t.full) && !sl__be_has_tasks(t.thin));
    ASSERT(sl__be_turns_kernels(t.full) && !sl__be_turns_kernels(t.thin));
    enum { R = 9, C = 7, N = R * C };
    float y0[N], bias[C], a[N], b[N], dy[N], da[N], db[N];
    for (int act = SL_ACT_NONE; act <= SL_ACT_SIGMOID; act++) {
        fill_rand(y0, N);
        fill_rand(bias, C);
        memcpy(a, y0, sizeof a);
        memcpy(b, y0, sizeof b);
        ASSERT_OK(sl__be_bias_act(t.full, (sl_act)act, a, bias, R, C));
        ASSERT_OK(sl__be_bias_act(t.thin, (sl_act)act, b, bias, R, C));
        ASSERT_MEMEQ(a, b, sizeof a);
        ASSERT(memcmp(a, y0, sizeof a) != 0);
        fill_rand(dy, N);
        dy[3] = -0.0f; /* set, not added: 0 + -0 is +0 on both */
        for (int i = 0; i < N; i++) da[i] = db[i] = 99.0f;
        ASSERT_OK(sl__be_act_backward_set(t.full, (sl_act)act, a, dy, da, N));
        ASSERT_OK(sl__be_act_backward_set(t.thin, (sl_act)act, a, dy, db, N));
        ASSERT_MEMEQ(da, db, sizeof da);
        ASSERT(signbit(db[3]) == 0);
    }
    two_close(&t);
}

/* maxpool_relu_backward_set against its fallback (through scratch), over a ReLU output with
 * zeros and ties; the fallback leaves no float of dx unwritten. */
TEST(test_maxpool_relu_fallback) {
    two t;
    ASSERT_OK(two_open(&t));
    enum { NB = 2, H = 6, W = 4, CH = 3, K = 2, OH = 3, OW = 2, NIN = NB * H * W * CH, NOUT = NB * OH * OW * CH };
    float x[NIN], relu[NIN], pooled[NOUT], dy[NOUT], da[NIN], db[NIN], scratch[NIN];
    int32_t argmax[NOUT];
    fill_rand(x, NIN);
    x[0] = x[3] = 0.5f; /* a tie in a window */
    ASSERT_OK(sl__be_act_forward(t.full, SL_ACT_RELU, x, relu, NIN));
    ASSERT_OK(sl__be_maxpool_forward(t.full, relu, NB, H, W, CH, K, K, 0, 0, OH, OW, pooled, argmax));
    fill_rand(dy, NOUT);
    for (int i = 0; i < NIN; i++) da[i] = db[i] = 99.0f;
    ASSERT_OK(sl__be_maxpool_relu_backward_set(t.full, dy, pooled, relu, argmax, NB, H, W, CH, K, K, 0, 0, OH, OW, da,
                                               scratch));
    ASSERT_OK(sl__be_maxpool_relu_backward_set(t.thin, dy, pooled, relu, argmax, NB, H, W, CH, K, K, 0, 0, OH, OW, db,
                                               scratch));
    ASSERT_MEMEQ(da, db, sizeof da);
    int zeros = 0;
    for (int i = 0; i < NIN; i++) {
        ASSERT(db[i] != 99.0f);
        zeros += db[i] == 0.0f;
    }
    ASSERT(zeros >= NIN - NOUT && zeros < NIN);
    two_close(&t);
}

/* wr[ky][kx][o][ci] = w[kh-1-ky][kw-1-kx][ci][o], as sl__be_conv_input_grad takes it */
static void turn(const float *w, int kh, int kw, int c, int oc, float *wr) {
    for (int ky = 0; ky < kh; ky++)
        for (int kx = 0; kx < kw; kx++)
            for (int o = 0; o < oc; o++)
                for (int ci = 0; ci < c; ci++)
                    wr[((ky * kw + kx) * oc + o) * c + ci] = w[(((kh - 1 - ky) * kw + (kw - 1 - kx)) * c + ci) * oc + o];
}

/* The convolution wrappers on geometries the full backend multiplies through im2col (its
 * conv_gemm declines them; the thin one has none): on both, exactly the floats of the vtable's
 * im2col, gemm, fill and col2im called as backend.h says, with beta and accumulate honoured
 * over buffers that hold other floats, whether or not a turned kernel is offered; and a 1x1
 * conv as one gemm on its input. */
TEST(test_conv_fallbacks) {
    two t;
    ASSERT_OK(two_open(&t));
    enum { NB = 2, H = 5, W = 4, CH = 3, OC = 4, NX = NB * H * W * CH, NY = NB * H * W * OC, MAXK = 9 * CH };
    float x[NX], w[MAXK * OC], wr[MAXK * OC], dy[NY], col[NB * H * W * MAXK];
    float y[2][NY], g[2][MAXK * OC], dx[2][NX];
    fill_rand(x, NX);
    fill_rand(w, MAXK * OC);
    fill_rand(dy, NY);
    const sl_backend_ops *raw = t.full->ops; /* the required ops, the same in both tables */
    for (int ks = 1; ks <= 3; ks += 2) {
        const int KK = ks * ks * CH, ROWS = NB * H * W, pad = ks / 2; /* same padding, stride 1 */
        const size_t ncol = (size_t)ROWS * KK;
        turn(w, ks, ks, CH, OC, wr);
        for (int k = 0; k < 4; k++) {
            sl_backend *b = k & 1 ? t.thin : t.full;
            bool acc = k & 2;
            for (int r = 0; r < 2; r++) { /* r 0: the wrapper; 1: the ops by hand */
                for (int i = 0; i < NY; i++) y[r][i] = 1.0f + i;
                for (int i = 0; i < KK * OC; i++) g[r][i] = 2.0f - i;
                for (int i = 0; i < NX; i++) dx[r][i] = 3.0f + i;
            }
            ASSERT_OK(sl__be_conv_gemm(b, x, NB, H, W, CH, ks, ks, 1, pad, pad, H, W, w, OC, 0.5f, y[0], col, ncol));
            ASSERT_OK(sl__be_conv_kernel_grad(b, x, NB, H, W, CH, ks, ks, 1, pad, pad, H, W, dy, OC, 1.0f, g[0], col,
                                              ncol));
            ASSERT_OK(sl__be_conv_input_grad(b, dy, NB, H, W, CH, ks, ks, 1, pad, pad, H, W, w, wr, OC, acc, dx[0], col,
                                             ncol));
            const float *m = x;
            if (ks > 1) {
                ASSERT_OK(raw->im2col(t.full, x, NB, H, W, CH, ks, ks, 1, pad, pad, H, W, col));
                m = col;
            }
            ASSERT_OK(raw->gemm(t.full, false, false, ROWS, OC, KK, 1.0f, m, KK, w, OC, 0.5f, y[1], OC));
            ASSERT_OK(raw->gemm(t.full, true, false, KK, OC, ROWS, 1.0f, m, KK, dy, OC, 1.0f, g[1], OC));
            if (ks == 1) {
                ASSERT_OK(raw->gemm(t.full, false, true, ROWS, KK, OC, 1.0f, dy, OC, w, OC, acc ? 1.0f : 0.0f, dx[1],
                                    KK));
            } else {
                ASSERT_OK(raw->gemm(t.full, false, true, ROWS, KK, OC, 1.0f, dy, OC, w, OC, 0.0f, col, KK));
                if (!acc) ASSERT_OK(raw->fill(t.full, dx[1], 0.0f, NX));
                ASSERT_OK(raw->col2im(t.full, col, NB, H, W, CH, ks, ks, 1, pad, pad, H, W, dx[1]));
            }
            if (memcmp(y[0], y[1], sizeof y[0]) || memcmp(g[0], g[1], KK * OC * sizeof(float)) ||
                memcmp(dx[0], dx[1], sizeof dx[0]))
                FAILF("%dx%d conv on the %s backend, accumulate %d: products %s, kernel gradient %s, input gradient %s",
                      ks, ks, k & 1 ? "thin" : "full", (int)acc, memcmp(y[0], y[1], sizeof y[0]) ? "differ" : "agree",
                      memcmp(g[0], g[1], KK * OC * sizeof(float)) ? "differs" : "agrees",
                      memcmp(dx[0], dx[1], sizeof dx[0]) ? "differs" : "agrees");
        }
    }
    two_close(&t);
}

typedef struct task_log {
    int t[8], slot[8], n, fail_at;
} task_log;

static sl_status log_task(void *ctx, int t, int slot) {
    task_log *l = ctx;
    l->t[l->n] = t, l->slot[l->n] = slot, l->n++;
    return t == l->fail_at ? sl_err(SL_EIO, "task %d failed", t) : SL_OK;
}

/* Without run_tasks the tasks run in order on the calling thread in slot 0, up to the first
 * error, which comes back. */
TEST(test_run_tasks_fallback) {
    sl_backend *b;
    ASSERT_OK(thin_cpu(2, &b));
    ASSERT_EQ(sl__be_task_slots(b), 1);
    task_log l = {.fail_at = -1};
    ASSERT_OK(sl__be_run_tasks(b, 5, 4, log_task, &l));
    ASSERT_EQ(l.n, 5);
    for (int i = 0; i < 5; i++) ASSERT(l.t[i] == i && l.slot[i] == 0);
    l = (task_log){.fail_at = 2};
    ASSERT_EQ(sl__be_run_tasks(b, 5, 4, log_task, &l), SL_EIO);
    ASSERT_STREQ(sl_errmsg(), "task 2 failed");
    ASSERT_EQ(l.n, 3);
    ASSERT_EQ(sl__be_run_tasks(b, 1, 0, log_task, &l), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "run_tasks: 1 tasks on 0 slots");
    sl__backend_free(b);
}

/* The checks answer alike on both backends, before anything is written. */
TEST(test_wrapper_checks) {
    two t;
    ASSERT_OK(two_open(&t));
    float y[16], keep[16], d[16], scratch[16];
    int32_t am[4] = {0};
    fill_rand(y, 16);
    fill_rand(d, 16);
    memcpy(keep, y, sizeof y);
    for (int k = 0; k < 2; k++) {
        sl_backend *b = k ? t.thin : t.full;
        ASSERT_EQ(sl__be_bias_act(b, (sl_act)7, y, d, 4, 4), SL_EINVAL);
        ASSERT_STREQ(sl_errmsg(), "bias_act: unknown activation 7");
        ASSERT_MEMEQ(y, keep, sizeof y);
        ASSERT_EQ(sl__be_act_backward_set(b, SL_ACT_TANH, d, y, y, 16), SL_EINVAL);
        ASSERT_STREQ(sl_errmsg(), "act_backward_set: dx is dy (16 floats): the gradient cannot be set in place");
        ASSERT_MEMEQ(y, keep, sizeof y);
        /* windows 3x3 at stride 2 overlap: the fused gradient does not apply */
        ASSERT_EQ(sl__be_maxpool_relu_backward_set(b, d, d, d, am, 1, 4, 4, 1, 3, 2, 0, 0, 1, 1, y, scratch),
                  SL_EINVAL);
        ASSERT_STREQ(sl_errmsg(), "maxpool_relu_backward_set: stride 2 is not the window 3: the windows overlap or "
                                  "leave gaps");
        ASSERT_MEMEQ(y, keep, sizeof y);
        ASSERT_EQ(sl__be_maxpool_forward(b, d, 1, 4, 4, 1, 2, 2, 0, 0, 3, 2, y, am), SL_EINVAL);
        ASSERT_STREQ(sl_errmsg(), "maxpool_forward: bad geometry: 1 images 4x4x1, window 2x2, stride 2, padding top 0 "
                                  "left 0, output 3x2\n---> HINT: sizes >= 1, padding below the window, and every "
                                  "output window starting inside the image");
        ASSERT_MEMEQ(y, keep, sizeof y);
        ASSERT_EQ(sl__be_gemm(b, false, false, 2, 3, 4, 1.0f, d, 3, d, 3, 0.0f, y, 3), SL_EINVAL);
        ASSERT_STREQ(sl_errmsg(), "gemm: row strides 3, 3, 3 below the rows' widths 4, 3, 3 (2x3x4)");
        ASSERT_EQ(sl__be_stage_begin(b, SL_BK_STAGE_SLOTS), SL_EINVAL);
        ASSERT_STREQ(sl_errmsg(), "stage_begin: staging slot 3 outside 0..2");
        ASSERT_EQ(sl__be_copy(b, y + 1, y, 8 * sizeof(float)), SL_EINVAL);
        ASSERT_STREQ(sl_errmsg(), "copy: 32 bytes between ranges 4 bytes apart (they overlap)");
        ASSERT_MEMEQ(y, keep, sizeof y);
        ASSERT_EQ(sl__be_fill(b, NULL, 0.0f, 5), SL_EINVAL);
        ASSERT_STREQ(sl_errmsg(), "fill: x is NULL for 5 floats");
    }
    /* im2col's matrix does not fit the scratch: the fallback says so (the full backend's
     * conv_gemm declines this narrow geometry, so it falls back too) */
    float x[2 * 2 * 2], w[8 * 2];
    fill_rand(x, 8);
    fill_rand(w, 16);
    ASSERT_EQ(sl__be_conv_gemm(t.thin, x, 1, 2, 2, 2, 2, 2, 1, 0, 0, 1, 1, w, 2, 0.0f, y, scratch, 4), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "conv_gemm: scratch of 4 floats below the 8 of im2col's matrix (1 images, 1x1 out, "
                              "2x2x2 window)");
    ASSERT_MEMEQ(y, keep, sizeof y);
    two_close(&t);
}

int main(void) {
    RUN(test_mlp_same_bits);
    RUN(test_cnn_same_bits);
    RUN(test_resnet_same_bits);
    RUN(test_fused_elementwise_fallbacks);
    RUN(test_maxpool_relu_fallback);
    RUN(test_conv_fallbacks);
    RUN(test_run_tasks_fallback);
    RUN(test_wrapper_checks);
    TEST_MAIN_END();
}
