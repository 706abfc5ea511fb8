/* Optimizers (train/optim.c) and learning-rate schedules (train/schedule.c): schedules at
 * exact steps, optimizer steps on a model's flat buffers against hand-computed values,
 * state save/restore, and batchnorm running statistics left alone. */
#include <math.h>
#include <string.h>

#include "sluice/model.h"
#include "test.h"
#include "train/internal.h"

#define ASSERT_CLOSE(a, b, tol)                                                                    \
    do {                                                                                           \
        double _a = (a), _b = (b);                                                                 \
        if (!(fabs(_a - _b) <= (tol))) { FAILF("%s ~ %s: %.9g vs %.9g", #a, #b, _a, _b); return; } \
    } while (0)

TEST(test_schedules) {
    sl_schedule c = {.kind = SL_SCHED_CONSTANT, .lr = 0.1f};
    ASSERT(sl_schedule_lr(&c, 0) == 0.1f);
    ASSERT(sl_schedule_lr(&c, 1000000) == 0.1f);
    /* warmup: lr * step / warmup, base rate reached at step `warmup` */
    c.warmup = 4;
    ASSERT(sl_schedule_lr(&c, 0) == 0.0f);
    ASSERT(sl_schedule_lr(&c, 1) == 0.025f);
    ASSERT(sl_schedule_lr(&c, 2) == 0.05f);
    ASSERT(sl_schedule_lr(&c, 4) == 0.1f);
    ASSERT(sl_schedule_lr(&c, 5) == 0.1f);
    /* step: gamma every step_size steps after warmup */
    sl_schedule s = {.kind = SL_SCHED_STEP, .lr = 1.0f, .step_size = 10, .gamma = 0.5f};
    ASSERT(sl_schedule_lr(&s, 0) == 1.0f);
    ASSERT(sl_schedule_lr(&s, 9) == 1.0f);
    ASSERT(sl_schedule_lr(&s, 10) == 0.5f);
    ASSERT(sl_schedule_lr(&s, 29) == 0.25f);
    ASSERT(sl_schedule_lr(&s, 30) == 0.125f);
    s.warmup = 5;
    ASSERT(sl_schedule_lr(&s, 14) == 1.0f);
    ASSERT(sl_schedule_lr(&s, 15) == 0.5f);
    s.step_size = 0;
    ASSERT(sl_schedule_lr(&s, 100) == 1.0f);
    /* cosine from lr to min_lr over total steps */
    sl_schedule k = {.kind = SL_SCHED_COSINE, .lr = 1.0f, .total = 100, .min_lr = 0.1f};
    ASSERT(sl_schedule_lr(&k, 0) == 1.0f);
    ASSERT_CLOSE(sl_schedule_lr(&k, 50), 0.55, 1e-7);
    ASSERT_CLOSE(sl_schedule_lr(&k, 25), 0.1 + 0.9 * (1 + cos(M_PI / 4)) / 2, 1e-7);
    ASSERT(sl_schedule_lr(&k, 100) == 0.1f);
    ASSERT(sl_schedule_lr(&k, 5000) == 0.1f);
    k.warmup = 10;
    ASSERT(sl_schedule_lr(&k, 5) == 0.5f);
    ASSERT(sl_schedule_lr(&k, 10) == 1.0f);
    ASSERT_CLOSE(sl_schedule_lr(&k, 60), 0.55, 1e-7);
    ASSERT(sl_schedule_lr(&k, 110) == 0.1f);
    ASSERT(sl_schedule_lr(&k, -3) == 0.0f); /* negative steps count as 0 */
}

/* input 2 -> dense 1: three trainable floats (kernel w0, w1, bias b). */
static sl_model *tiny(bool with_bn) {
    sl_layer_spec specs[4] = {{.kind = SL_LAYER_INPUT, .rank = 1, .shape = {2}}};
    int n = 1;
    if (with_bn) {
        specs[n++] = (sl_layer_spec){.kind = SL_LAYER_DENSE, .units = 2};
        specs[n++] = (sl_layer_spec){.kind = SL_LAYER_BATCHNORM};
    }
    specs[n++] = (sl_layer_spec){.kind = SL_LAYER_DENSE, .units = 1};
    sl_model_opts o = sl_model_opts_default();
    o.backend = SL_BACKEND_CPU;
    o.threads = 1;
    o.max_batch = 2;
    sl_model *m = NULL;
    if (sl_model_create(specs, n, &o, &m)) return NULL;
    return m;
}

static void set3(sl_model *m, float a, float b, float c, float ga, float gb, float gc) {
    float *p = sl_model_params(m, NULL), *g = sl_model_grads(m, NULL);
    p[0] = a, p[1] = b, p[2] = c;
    g[0] = ga, g[1] = gb, g[2] = gc;
}

TEST(test_sgd) {
    sl_model *m = tiny(false);
    ASSERT(m);
    float *p = sl_model_params(m, NULL);
    sl_optim *o;
    sl_optim_spec plain = {.kind = SL_OPTIM_SGD};
    ASSERT_OK(sl_optim_create(m, &plain, &o));
    size_t n;
    int64_t step;
    ASSERT(sl_optim_state(o, &n, &step) == NULL);
    ASSERT_EQ(n, 0);
    set3(m, 1, 2, 3, 0.5f, -1, 0);
    ASSERT_OK(sl_optim_step(o, 0.1f));
    ASSERT_CLOSE(p[0], 0.95, 1e-7);
    ASSERT_CLOSE(p[1], 2.1, 1e-6);
    ASSERT(p[2] == 3.0f);
    sl_optim_state(o, &n, &step);
    ASSERT_EQ(step, 1);
    sl_optim_free(o);
    /* momentum 0.9 with weight decay 0.01: g' = g + 0.01 p; v = 0.9 v + g'; p -= lr v */
    sl_optim_spec mom = {.kind = SL_OPTIM_SGD, .momentum = 0.9f, .weight_decay = 0.01f};
    ASSERT_OK(sl_optim_create(m, &mom, &o));
    set3(m, 1, 0, 0, 0.5f, 0, 0);
    ASSERT_OK(sl_optim_step(o, 0.1f)); /* v = 0.51, p = 0.949 */
    ASSERT_CLOSE(p[0], 0.949, 1e-6);
    ASSERT_OK(sl_optim_step(o, 0.1f)); /* g' = 0.50949, v = 0.459 + 0.50949 = 0.96849, p = 0.852151 */
    ASSERT_CLOSE(p[0], 0.852151, 1e-6);
    float *st = sl_optim_state(o, &n, &step);
    ASSERT_EQ(n, 3);
    ASSERT_EQ(step, 2);
    ASSERT_CLOSE(st[0], 0.96849, 1e-6);
    /* state round trip */
    float saved[3];
    ASSERT_OK(sl_optim_get_state(o, saved, 3));
    ASSERT_OK(sl_optim_set_state(o, (float[3]){0, 0, 0}, 3, 7));
    sl_optim_state(o, &n, &step);
    ASSERT_EQ(step, 7);
    ASSERT(st[0] == 0.0f);
    ASSERT_OK(sl_optim_set_state(o, saved, 3, 2));
    ASSERT_CLOSE(st[0], 0.96849, 1e-6);
    ASSERT_EQ(sl_optim_set_state(o, saved, 2, 2), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "sgd: set_state with 2 floats, the state has 3");
    ASSERT_EQ(sl_optim_step(o, -1.0f), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "sgd: learning rate -1 must be finite and >= 0");
    sl_optim_free(o);
    sl_optim_free(NULL);
    /* Nesterov: p -= lr (g' + momentum v) */
    sl_optim_spec nes = {.kind = SL_OPTIM_SGD, .momentum = 0.9f, .nesterov = true};
    ASSERT_OK(sl_optim_create(m, &nes, &o));
    set3(m, 1, 0, 0, 0.5f, 0, 0);
    ASSERT_OK(sl_optim_step(o, 0.1f));
    ASSERT_CLOSE(p[0], 0.905, 1e-6);
    sl_optim_free(o);
    sl_optim_spec bad = {.kind = SL_OPTIM_SGD, .nesterov = true};
    o = (sl_optim *)1;
    ASSERT_EQ(sl_optim_create(m, &bad, &o), SL_EINVAL);
    ASSERT(o == NULL);
    ASSERT_STREQ(sl_errmsg(), "sgd: nesterov needs a momentum > 0\n---> HINT: set momentum=0.9 (or drop nesterov)");
    sl_model_free(m);
}

TEST(test_adam_adamw) {
    sl_model *m = tiny(false);
    ASSERT(m);
    float *p = sl_model_params(m, NULL);
    sl_optim *o;
    sl_optim_spec adam = {.kind = SL_OPTIM_ADAM}; /* defaults 0.9, 0.999, 1e-8 */
    ASSERT_OK(sl_optim_create(m, &adam, &o));
    size_t n;
    int64_t step;
    float *st = sl_optim_state(o, &n, &step);
    ASSERT_EQ(n, 6); /* m then v */
    set3(m, 1, 1, 1, 0.5f, -0.25f, 0);
    ASSERT_OK(sl_optim_step(o, 0.01f)); /* step 1 moves each by lr * sign(g) */
    ASSERT_CLOSE(p[0], 0.99, 1e-6);
    ASSERT_CLOSE(p[1], 1.01, 1e-6);
    ASSERT(p[2] == 1.0f);
    ASSERT_CLOSE(st[0], 0.05, 1e-7);
    ASSERT_CLOSE(st[3], 0.00025, 1e-8);
    /* step 2 with g = 0.1: m = 0.045 + 0.01 = 0.055, v = 0.00024975 + 0.00001 = 0.00025975
     * mhat = 0.055 / 0.19, vhat = 0.00025975 / 0.001999 */
    float *g = sl_model_grads(m, NULL);
    g[0] = 0.1f;
    ASSERT_OK(sl_optim_step(o, 0.01f));
    double mh = 0.055 / 0.19, vh = 0.00025975 / (1 - 0.999 * 0.999);
    ASSERT_CLOSE(p[0], 0.99 - 0.01 * mh / (sqrt(vh) + 1e-8), 1e-6);
    sl_optim_free(o);
    /* AdamW decays the weights directly: p (1 - lr wd) then the Adam step */
    sl_optim_spec adamw = {.kind = SL_OPTIM_ADAMW, .weight_decay = 0.5f};
    ASSERT_OK(sl_optim_create(m, &adamw, &o));
    set3(m, 2, 1, 1, 0.5f, 0, 0);
    ASSERT_OK(sl_optim_step(o, 0.01f));
    ASSERT_CLOSE(p[0], 2 * (1 - 0.005) - 0.01, 1e-6);
    ASSERT_CLOSE(p[1], 1 - 0.005, 1e-6); /* zero gradient: decay only */
    sl_optim_free(o);
    /* Adam with L2 adds wd p to the gradient: a zero gradient still moves p */
    sl_optim_spec l2 = {.kind = SL_OPTIM_ADAM, .weight_decay = 0.5f};
    ASSERT_OK(sl_optim_create(m, &l2, &o));
    set3(m, 2, 1, 1, 0, 0, 0);
    ASSERT_OK(sl_optim_step(o, 0.01f));
    ASSERT_CLOSE(p[0], 1.99, 1e-6);
    sl_optim_free(o);
    sl_optim_spec badb = {.kind = SL_OPTIM_ADAM, .beta1 = 1.0f};
    ASSERT_EQ(sl_optim_create(m, &badb, &o), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "adam: beta1 1 must be in [0, 1)");
    sl_model_free(m);
}

TEST(test_running_stats_untouched) {
    sl_model *m = tiny(true);
    ASSERT(m);
    size_t n, ntr = sl__model_trainable(m);
    float *p = sl_model_params(m, &n), *g = sl_model_grads(m, NULL);
    ASSERT_EQ(n, ntr + 4);
    for (size_t i = 0; i < n; i++) g[i] = 1.0f;
    float stats[4];
    memcpy(stats, p + ntr, sizeof stats);
    sl_optim_spec sgd = {.kind = SL_OPTIM_SGD, .momentum = 0.9f, .weight_decay = 0.1f};
    sl_optim *o;
    ASSERT_OK(sl_optim_create(m, &sgd, &o));
    size_t ns;
    sl_optim_state(o, &ns, NULL);
    ASSERT_EQ(ns, ntr);
    ASSERT_OK(sl_optim_step(o, 0.5f));
    ASSERT_MEMEQ(p + ntr, stats, sizeof stats);
    sl_optim_free(o);
    sl_model_free(m);
}

/* The trainable floats of tiny(true) by kind: 1 where decay_exclude `ex` leaves them alone. */
static int excluded_mask(sl_model *m, unsigned ex, bool *mask, size_t ntr) {
    int n = 0;
    for (int i = 0; i < sl_model_param_count(m); i++) {
        const char *name;
        size_t off, len = 1;
        int rank;
        int64_t dims[4];
        if (sl_model_param_info(m, i, &name, &off, &rank, dims)) return -1;
        for (int k = 0; k < rank; k++) len *= (size_t)dims[k];
        const char *leaf = strrchr(name, '/') + 1;
        bool x = ((ex & SL_DECAY_EXCLUDE_BIAS) && strcmp(leaf, "bias") == 0) ||
                 ((ex & SL_DECAY_EXCLUDE_BATCHNORM) && (strcmp(leaf, "gamma") == 0 || strcmp(leaf, "beta") == 0));
        for (size_t j = 0; j < len && off + j < ntr; j++) {
            mask[off + j] = x;
            n += x;
        }
    }
    return n;
}

/* decay_exclude: with zero gradients, biases and batchnorm gamma/beta stay exactly as they
 * are while kernels decay (by hand for SGD: p (1 - lr wd)); with gradients, the kept
 * floats get exactly the update of weight_decay 0 and the others exactly that of the plain
 * decayed run (state included), for SGD, Adam and AdamW. */
TEST(test_decay_exclude) {
    sl_model *m = tiny(true); /* dense_1 2x2 + bias 2, batchnorm gamma 2 beta 2, dense_2 2x1 + bias 1 */
    ASSERT(m);
    size_t n, ntr = sl__model_trainable(m);
    float *p = sl_model_params(m, &n), *g = sl_model_grads(m, NULL);
    ASSERT_EQ(ntr, 13);
    float p0[17], grad[13];
    for (size_t i = 0; i < n; i++) p0[i] = 1.0f + 0.25f * (float)i;
    bool mask[13] = {0};
    ASSERT_EQ(excluded_mask(m, SL_DECAY_EXCLUDE_BIAS | SL_DECAY_EXCLUDE_BATCHNORM, mask, ntr), 7);
    sl_optim *o;
    /* zero gradients, SGD momentum 0.9, wd 0.1, lr 0.5: a kernel float becomes p - 0.05 p */
    sl_optim_spec sgd = {.kind = SL_OPTIM_SGD, .momentum = 0.9f, .weight_decay = 0.1f,
                         .decay_exclude = SL_DECAY_EXCLUDE_BIAS | SL_DECAY_EXCLUDE_BATCHNORM};
    ASSERT_OK(sl_optim_create(m, &sgd, &o));
    ASSERT_OK(sl_model_set_params(m, p0, n));
    memset(g, 0, ntr * sizeof(float));
    ASSERT_OK(sl_optim_step(o, 0.5f));
    for (size_t i = 0; i < ntr; i++) {
        if (mask[i]) ASSERT(p[i] == p0[i]);
        else ASSERT_CLOSE(p[i], 0.95 * p0[i], 1e-6);
    }
    ASSERT_MEMEQ(p + ntr, p0 + ntr, 4 * sizeof(float)); /* running statistics */
    sl_optim_free(o);
    /* one kind alone: the other decays */
    const unsigned one[2] = {SL_DECAY_EXCLUDE_BIAS, SL_DECAY_EXCLUDE_BATCHNORM};
    for (int t = 0; t < 2; t++) {
        bool mk[13] = {0};
        ASSERT_EQ(excluded_mask(m, one[t], mk, ntr), t == 0 ? 3 : 4);
        sl_optim_spec sp = sgd;
        sp.decay_exclude = one[t];
        ASSERT_OK(sl_optim_create(m, &sp, &o));
        ASSERT_OK(sl_model_set_params(m, p0, n));
        ASSERT_OK(sl_optim_step(o, 0.5f));
        for (size_t i = 0; i < ntr; i++) {
            if (mk[i]) ASSERT(p[i] == p0[i]);
            else ASSERT_CLOSE(p[i], 0.95 * p0[i], 1e-6);
        }
        sl_optim_free(o);
    }
    /* with gradients: bit for bit the decayed run on kernels, the undecayed run elsewhere */
    for (int i = 0; i < 13; i++) grad[i] = (float)((i * 7) % 5) * 0.25f - 0.5f;
    const sl_optim_spec kinds[3] = {
        {.kind = SL_OPTIM_SGD, .momentum = 0.9f, .nesterov = true, .weight_decay = 0.1f},
        {.kind = SL_OPTIM_ADAM, .weight_decay = 0.1f},
        {.kind = SL_OPTIM_ADAMW, .weight_decay = 0.1f},
    };
    for (int t = 0; t < 3; t++) {
        float pr[3][13], sr[3][26];
        for (int run = 0; run < 3; run++) { /* excluded, all decayed, none decayed */
            sl_optim_spec sp = kinds[t];
            if (run == 0) sp.decay_exclude = SL_DECAY_EXCLUDE_BIAS | SL_DECAY_EXCLUDE_BATCHNORM;
            if (run == 2) sp.weight_decay = 0;
            ASSERT_OK(sl_optim_create(m, &sp, &o));
            ASSERT_OK(sl_model_set_params(m, p0, n));
            for (int step = 0; step < 2; step++) {
                memcpy(g, grad, sizeof grad);
                ASSERT_OK(sl_optim_step(o, 0.1f));
            }
            size_t ns;
            float *st = sl_optim_state(o, &ns, NULL);
            ASSERT_EQ(ns, t == 0 ? 13 : 26);
            memcpy(pr[run], p, sizeof pr[run]);
            memcpy(sr[run], st, ns * sizeof(float));
            sl_optim_free(o);
        }
        int moved = 0;
        for (size_t i = 0; i < ntr; i++) {
            int want = mask[i] ? 2 : 1;
            ASSERT(pr[0][i] == pr[want][i]);
            ASSERT(sr[0][i] == sr[want][i]);
            if (t > 0) ASSERT(sr[0][i + 13] == sr[want][i + 13]);
            moved += pr[1][i] != pr[2][i]; /* the decay made a difference */
        }
        ASSERT_EQ(moved, 13);
    }
    sl_optim_spec bad = sgd;
    bad.decay_exclude = 4;
    ASSERT_EQ(sl_optim_create(m, &bad, &o), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "sgd: decay_exclude 0x4 has unknown bits (SL_DECAY_EXCLUDE_BIAS, _BATCHNORM)");
    sl_model_free(m);
}

int main(void) {
    RUN(test_schedules);
    RUN(test_sgd);
    RUN(test_adam_adamw);
    RUN(test_running_stats_untouched);
    RUN(test_decay_exclude);
    TEST_MAIN_END();
}
