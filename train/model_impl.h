/* Private to train/model.c, train/model_step.c and train/model_plan.c (and their unit
 * tests): a model's layers and state. model.c builds and frees models, model_step.c runs
 * their train and eval steps, model_plan.c works out the layer graph's shapes, parameter
 * offsets and gradient flow (sl__model_plan) and writes the summary. */
#ifndef SLUICE_TRAIN_MODEL_IMPL_H
#define SLUICE_TRAIN_MODEL_IMPL_H

#include "train/internal.h"

typedef struct layer {
    sl_layer_kind kind;
    char name[32];
    int rank;          /* of the per-example output shape */
    int64_t shape[3];  /* per-example output shape */
    size_t in_size, out_size; /* floats per example */
    /* geometry (CONV2D / POOL): input h x w x c, output oh x ow x oc */
    int h, w, c, oh, ow, oc, kh, kw, stride, pt, pl;
    sl_act act;
    float rate, momentum, eps;
    bool has_params;
    size_t w_off, b_off, nw, nb;  /* kernel/bias or gamma/beta, floats into params */
    size_t rm_off, rv_off;        /* BATCHNORM running mean/var */
    float *out, *dout;            /* activation and its gradient [max_batch, out_size] */
    bool direct;                  /* CONV2D 1x1, stride 1, unpadded: the input is its own im2col */
    int chunk;                    /* CONV2D: images per im2col + GEMM pass */
    int32_t *argmax;              /* MAXPOOL */
    float *mask;                  /* DROPOUT */
    float *save_mean, *save_invstd; /* BATCHNORM */
    int nin;                      /* inputs: src[k] is an earlier layer, -1 the model input */
    int src[SL_MODEL_MAX_INPUTS];
    bool acc[SL_MODEL_MAX_INPUTS]; /* backward adds to input k's gradient (a later consumer set it) */
    bool needs_grad;              /* this layer or one upstream has parameters */
    /* MAXPOOL relu_pool: windows that do not overlap over the output of a ReLU CONV2D read
     * by this pool alone, which is then marked dout_pre. The pool's backward writes the
     * conv's gradient before the ReLU (sl__be_maxpool_relu_backward_set: one pass on a
     * backend with the op), and the conv's backward takes its dout as that. */
    bool relu_pool, dout_pre;
    int hw;                       /* GLOBAL_AVGPOOL: cells per image */
} layer;

typedef struct pview {
    char name[64];
    size_t off;
    int rank;
    int64_t dims[4];
} pview;

#define NSLOTS SL_MODEL_STAGE_SLOTS /* input staging slots, used in turn */

struct sl_model {
    sl_backend *bk;
    bool is_cpu;
    sl_model_opts opts;
    int in_rank;
    int64_t in_shape[3];
    size_t in_size;
    char in_name[32];  /* the input layer's name (what layers name to read it) */
    bool graph;        /* some layer reads other than the layer before it: summary's "Connected to" */
    int nl;
    layer *L;
    int classes;
    float *params, *grads;
    size_t n_params, n_train;
    void *act_mem;   /* every activation, gradient and per-layer buffer */
    float *scratch_a;             /* pre-activation gradients; a relu_pool's before its ReLU */
    float *col, *dcol;            /* per slot: one conv chunk's im2col and its gradient */
    size_t col_floats;            /* of each slot's col and dcol */
    int slots;                    /* conv chunks at once (backend run_tasks; 1: one after another) */
    float *wpart;                 /* per chunk: a conv's kernel and bias gradients (slots > 1) */
    float *wrot;                  /* a stride-1 conv's kernel turned (conv_gemm backends) */
    float *in_grad;  /* [max_batch, in_size] when the input gradient is wanted */
    bool want_in_grad;
    int npv;
    pview *pv;
    uint64_t steps;  /* train steps taken: dropout seeds */
    /* staged inputs (sl_model_stage): on non-CPU backends pinned host buffers and device
     * buffers per slot; on the CPU the caller's x and int32 labels (converted when int64) */
    float *x_dev[NSLOTS];
    int32_t *y_dev[NSLOTS];
    void *stage[NSLOTS];
    const float *slot_x[NSLOTS];
    const int32_t *slot_y[NSLOTS];
    int32_t *slot_labels[NSLOTS]; /* CPU: int32 conversions, max_batch each */
    int64_t slot_b[NSLOTS];
    uint64_t slot_id[NSLOTS];     /* the staging that filled the slot (0: none) */
    uint64_t nstaged;
    int next_slot;
    char fallback[256];      /* backend auto: why the GPU could not be opened ("" when it was not tried or opened) */
    sl__grads_ready_fn ready_fn; /* bucketed exchange: told as backward finishes each layer's gradients */
    void *ready_ctx;
};

/* Plan the layers of specs[0..n) into m (m->L, m->pv, sizes, offsets, m->classes); before
 * the backend exists. SL_EINVAL naming the layer ("model: layer 3 (add_1): ..."), SL_ENOMEM;
 * m->L and m->pv may be left allocated (sl_model_free frees them). */
sl_status sl__model_plan(sl_model *m, const sl_layer_spec *specs, int n);

/* sl_model_create on a backend the caller made, handed over (freed with the model, or here
 * when the create fails); opts' backend, threads and cuda_device are not used. For tests that
 * run a model on a backend of their own (one without the optional ops). */
sl_status sl__model_create_on(const sl_layer_spec *specs, int n, const sl_model_opts *opts, sl_backend *bk,
                              sl_model **out);

#endif
