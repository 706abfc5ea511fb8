/* The gradient bucket plan (train/buckets.h): whole layers, backward order, greedy to the
 * bucket size, exact ranges; and the plan over a real model's layer offsets. */
#include <stdlib.h>
#include <string.h>

#include "sluice/model.h"
#include "train/buckets.h"
#include "train/internal.h"
#include "test.h"

/* Layers at 0, 100, 150, 160, 400 of n = 1000 floats: sizes 100, 50, 10, 240, 600. */
static const size_t LO[] = {0, 100, 150, 160, 400};

static int plan(size_t bucket, sl__bucket *out) { return sl__bucket_plan(LO, 5, 1000, bucket, out); }

TEST(test_plan_greedy_backward) {
    sl__bucket b[5];
    /* 300 floats: [400, 1000) alone (600 >= 300); then 240, + 10 = 250, + 50 = 300 >= 300:
     * [100, 400); then [0, 100) (the first layer always closes the last bucket) */
    ASSERT_EQ(plan(300, b), 3);
    ASSERT(b[0].lo == 400 && b[0].hi == 1000);
    ASSERT(b[1].lo == 100 && b[1].hi == 400);
    ASSERT(b[2].lo == 0 && b[2].hi == 100);
    /* 1 float: every layer a bucket of its own, last layer first */
    ASSERT_EQ(plan(1, b), 5);
    const size_t want[6] = {1000, 400, 160, 150, 100, 0};
    for (int k = 0; k < 5; k++) ASSERT(b[k].hi == want[k] && b[k].lo == want[k + 1]);
    /* a bucket as big as the gradient, or bigger, or 0: one bucket [0, n) */
    ASSERT_EQ(plan(1000, b), 1);
    ASSERT(b[0].lo == 0 && b[0].hi == 1000);
    ASSERT_EQ(plan(5000, b), 1);
    ASSERT(b[0].lo == 0 && b[0].hi == 1000);
    ASSERT_EQ(plan(0, b), 1);
    ASSERT(b[0].lo == 0 && b[0].hi == 1000);
    /* 600 exactly closes the last layer alone; the rest (400) stays under 600: one more */
    ASSERT_EQ(plan(600, b), 2);
    ASSERT(b[0].lo == 400 && b[0].hi == 1000 && b[1].lo == 0 && b[1].hi == 400);
}

TEST(test_plan_covers_exactly) {
    /* for every size, the buckets tile [layer_lo[0], n) with no gap or overlap, each one
     * starting at a layer boundary, in decreasing order */
    sl__bucket b[5];
    for (size_t size = 1; size <= 1100; size += 7) {
        int nb = plan(size, b);
        ASSERT(nb >= 1 && nb <= 5);
        ASSERT_EQ(b[0].hi, 1000);
        ASSERT_EQ(b[nb - 1].lo, 0);
        for (int k = 0; k < nb; k++) {
            ASSERT(b[k].lo < b[k].hi);
            if (k + 1 < nb) ASSERT_EQ(b[k].lo, b[k + 1].hi);
            int at_layer = 0;
            for (int i = 0; i < 5; i++) at_layer |= LO[i] == b[k].lo;
            ASSERT(at_layer);
            /* every bucket but the last reaches the size */
            if (k + 1 < nb) ASSERT(b[k].hi - b[k].lo >= size);
        }
    }
}

TEST(test_plan_bad_layouts) {
    sl__bucket b[3];
    ASSERT_EQ(sl__bucket_plan(NULL, 0, 10, 4, b), 0);
    ASSERT_EQ(sl__bucket_plan((const size_t[]){0, 5, 5}, 3, 10, 4, b), -1);  /* not increasing */
    ASSERT_EQ(sl__bucket_plan((const size_t[]){0, 6, 3}, 3, 10, 4, b), -1);  /* decreasing */
    ASSERT_EQ(sl__bucket_plan((const size_t[]){0, 10}, 2, 10, 4, b), -1);    /* a layer at n */
    /* a first layer past 0 (the plan starts where the gradients start) */
    ASSERT_EQ(sl__bucket_plan((const size_t[]){3, 6}, 2, 10, 100, b), 1);
    ASSERT(b[0].lo == 3 && b[0].hi == 10);
}

/* A real model: the layers' gradient offsets are what the plan expects, and the grads-ready
 * callback reports each layer with parameters once per step, last layer first. */
static size_t seen[8];
static int nseen;
static sl_status on_ready(void *ctx, size_t lo) {
    (void)ctx;
    if (nseen < 8) seen[nseen] = lo;
    nseen++;
    return SL_OK;
}

TEST(test_model_layers_and_callback) {
    sl_layer_spec L[6] = {{.kind = SL_LAYER_INPUT, .shape = {4}, .rank = 1},
                          {.kind = SL_LAYER_DENSE, .units = 8, .activation = 1},
                          {.kind = SL_LAYER_BATCHNORM},
                          {.kind = SL_LAYER_DROPOUT, .rate = 0.5f},
                          {.kind = SL_LAYER_DENSE, .units = 6, .activation = 1},
                          {.kind = SL_LAYER_DENSE, .units = 2}};
    sl_model_opts o = sl_model_opts_default();
    o.backend = SL_BACKEND_CPU;
    o.threads = 1;
    o.max_batch = 4;
    sl_model *m;
    ASSERT_OK(sl_model_create(L, 6, &o, &m));
    size_t lo[8];
    ASSERT_EQ(sl__model_grad_layers(m, lo, 8), 4); /* dense, batchnorm, dense, dense */
    ASSERT_EQ(sl__model_grad_layers(m, lo, 2), 4); /* counted past cap */
    ASSERT_EQ(sl__model_grad_layers(m, lo, 8), 4);
    ASSERT(lo[0] == 0 && lo[1] == 40 && lo[2] == 56 && lo[3] == 110);
    ASSERT_EQ(sl__model_trainable(m), 124);
    sl__bucket b[4];
    ASSERT_EQ(sl__bucket_plan(lo, 4, sl__model_trainable(m), 60, b), 2);
    ASSERT(b[0].lo == 56 && b[0].hi == 124 && b[1].lo == 0 && b[1].hi == 56);

    const float x[8] = {0.1f, -0.2f, 0.3f, 0.4f, 1, 2, -1, 0.5f};
    sl_tensor tx, ty;
    ASSERT_OK(sl_tensor_alloc(&tx, SL_DT_F32, 2, (const int64_t[]){2, 4}));
    ASSERT_OK(sl_tensor_alloc(&ty, SL_DT_I64, 1, (const int64_t[]){2}));
    memcpy(tx.data, x, sizeof x);
    ((int64_t *)ty.data)[0] = 0;
    ((int64_t *)ty.data)[1] = 1;
    sl__model_on_grads_ready(m, on_ready, NULL);
    ASSERT_OK(sl_model_zero_grads(m));
    ASSERT_OK(sl_model_train_step(m, &tx, &ty, 1.0f, NULL));
    ASSERT_EQ(nseen, 4);
    ASSERT(seen[0] == 110 && seen[1] == 56 && seen[2] == 40 && seen[3] == 0);
    /* evaluation has no backward; NULL turns the callback off */
    ASSERT_OK(sl_model_eval_step(m, &tx, &ty, NULL));
    ASSERT_EQ(nseen, 4);
    sl__model_on_grads_ready(m, NULL, NULL);
    ASSERT_OK(sl_model_train_step(m, &tx, &ty, 1.0f, NULL));
    ASSERT_EQ(nseen, 4);
    sl_model_free(m);
    sl_tensor_release(&tx);
    sl_tensor_release(&ty);
}

int main(void) {
    RUN(test_plan_greedy_backward);
    RUN(test_plan_covers_exactly);
    RUN(test_plan_bad_layouts);
    RUN(test_model_layers_and_callback);
    TEST_MAIN_END();
}
