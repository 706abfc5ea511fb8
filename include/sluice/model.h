/* Models, optimizers and learning-rate schedules: the trainer's building blocks.
 *
 * A model is a graph of layers on one backend (CPU with OpenBLAS, or CUDA), ending in
 * logits for softmax cross-entropy against integer labels. Each layer takes its input from
 * the layer before it unless it names earlier layers (sl_layer_spec.inputs), so residual
 * networks join branches with ADD or CONCAT. Parameters, gradients and
 * optimizer state each live in ONE allocation (backend memory), with each layer's tensors
 * as views, so a whole gradient can be averaged across replicas in one allreduce and a
 * checkpoint is a walk over named views. Layouts are NHWC for images, [in, out] for dense
 * weights and [kh, kw, in_c, out_c] for convolution kernels (TensorFlow's).
 *
 * Initialisation is seeded: He (normal, std sqrt(2/fan_in)) for layers followed by relu,
 * Glorot/Xavier uniform otherwise; biases 0; batchnorm gamma 1, beta 0. Same seed, same
 * parameters, on every backend. */
#ifndef SLUICE_MODEL_H
#define SLUICE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/config.h"
#include "sluice/status.h"
#include "sluice/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sl_backend_kind {
    SL_BACKEND_AUTO = 0, /* CUDA when built with it and a GPU is present, else CPU */
    SL_BACKEND_CPU,
    SL_BACKEND_CUDA,
} sl_backend_kind;

/* What the model's matrix products (dense and conv2d layers, forward and backward) compute
 * in: mixed precision as PyTorch's autocast does it. Parameters, optimizer state,
 * activations and gradients stay float32 (the float32 master weights); in BF16 / FP16 every
 * GEMM rounds its two inputs to bfloat16 / IEEE half (round to nearest even; a half
 * overflows to infinity) and multiplies and accumulates in float32. CUDA: tensor-core
 * GEMMs; CPU: emulated (the same numbers, no speed-up). FP16's narrow range needs loss
 * scaling: the trainer's `precision fp16` does it (sluice/train.h). */
typedef enum sl_precision {
    SL_PRECISION_FP32 = 0, /* the default */
    SL_PRECISION_BF16,
    SL_PRECISION_FP16,
} sl_precision;

/* "fp32", "bf16", "fp16" (NULL for a value that is none of them). */
const char *sl_precision_name(sl_precision p);

/* The CPU backend's GEMM for its plain products (dense layers; convolutions it multiplies
 * through im2col). Its other convolutions run without im2col on Sluice's AVX-512 kernels
 * wherever the CPU has AVX-512F, whatever this says. AUTO, on a CPU with AVX-512F: the first
 * time the process multiplies a shape (m, n, k, transposes), both are timed on it (a thread's
 * part of it, 1-6 ms) and OpenBLAS is kept for that shape only when 1.25x faster, else
 * Sluice's; kept for the process, logged at SL_LOG_INFO. The two round differently, so where
 * they run within noise of that margin two runs may choose, and round, differently: pin BLAS
 * or AVX512 for runs equal bit for bit. Without AVX-512F: OpenBLAS. */
typedef enum sl_cpu_gemm {
    SL_CPU_GEMM_AUTO = 0, /* the default */
    SL_CPU_GEMM_BLAS,     /* OpenBLAS's cblas_sgemm */
    SL_CPU_GEMM_AVX512,   /* Sluice's (parts of 24 x 24 and up; OpenBLAS below) */
} sl_cpu_gemm;

/* "auto", "blas" or "avx512" into *out: SL_OK; else SL_EINVAL naming it, *out untouched. */
sl_status sl_cpu_gemm_parse(const char *name, sl_cpu_gemm *out);

typedef enum sl_layer_kind {
    SL_LAYER_INPUT = 1, /* shape of one example, e.g. 28x28x1; must come first */
    SL_LAYER_FLATTEN,
    SL_LAYER_DENSE,     /* units, activation */
    SL_LAYER_CONV2D,    /* filters, kernel kh x kw, stride, padding, activation */
    SL_LAYER_MAXPOOL,   /* pool k x k, stride, padding */
    SL_LAYER_AVGPOOL,
    SL_LAYER_DROPOUT,   /* rate; identity at evaluation */
    SL_LAYER_BATCHNORM, /* momentum, eps; per channel (last dimension) */
    SL_LAYER_RELU,      /* activations as layers of their own */
    SL_LAYER_TANH,
    SL_LAYER_SIGMOID,
    SL_LAYER_ADD,            /* elementwise sum of 2+ inputs of one shape (residual joins) */
    SL_LAYER_CONCAT,         /* 2+ inputs joined along the last dimension (others equal) */
    SL_LAYER_GLOBAL_AVGPOOL, /* image h x w x c -> vector c: the mean over the cells */
} sl_layer_kind;

/* Most inputs one layer may take (ADD, CONCAT). */
#define SL_MODEL_MAX_INPUTS 8

typedef enum sl_padding { SL_PAD_VALID = 0, SL_PAD_SAME = 1 } sl_padding;

typedef struct sl_layer_spec {
    sl_layer_kind kind;
    int64_t shape[4];  /* INPUT: dims of one example (rank 1..3; images [h, w, c]) */
    int rank;          /* INPUT */
    int units;         /* DENSE */
    int filters;       /* CONV2D */
    int kh, kw;        /* CONV2D kernel, POOL window (kw = kh when 0) */
    int stride;        /* CONV2D / POOL (0: 1 for conv, the window for pools) */
    sl_padding padding;
    int activation;    /* DENSE / CONV2D: 0 none, 1 relu, 2 tanh, 3 sigmoid */
    float rate;        /* DROPOUT */
    float momentum;    /* BATCHNORM: weight of the batch in the running stats (0: 0.01, as Keras momentum 0.99) */
    float eps;         /* BATCHNORM (0: 1e-3) */
    char name[32];     /* optional; default "dense_1", "conv2d_2", ... (Keras style) */
    /* Where the layer's input comes from: ninputs 0 is the layer just before it in the
     * array (a sequential model); otherwise inputs[0..ninputs) are indices into the spec
     * array of EARLIER layers (0 is the input layer). ADD and CONCAT need 2 or more, every
     * other kind exactly one. A layer's output must be used by a later layer, except the
     * last one's (the logits). */
    int inputs[SL_MODEL_MAX_INPUTS];
    int ninputs;
} sl_layer_spec;

typedef struct sl_model sl_model;

typedef struct sl_model_opts {
    sl_backend_kind backend;
    int threads;        /* CPU backend threads; 0: all cores */
    int cuda_device;
    uint64_t seed;      /* initialisation and dropout */
    int max_batch;      /* largest batch a step will see (activation memory is sized for it) */
    float label_smoothing; /* e in [0, 1): the loss's target is (1 - e) onehot + e / classes
                              (Keras' and PyTorch's label_smoothing), in train AND eval steps;
                              0 (default): plain cross-entropy */
    sl_precision precision; /* the GEMMs' precision (above); default SL_PRECISION_FP32 */
    sl_cpu_gemm cpu_gemm;   /* the CPU backend's GEMM (above); default SL_CPU_GEMM_AUTO */
    /* The memory plan, checked before anything is allocated: the host memory the model
     * takes (the CPU backend: parameters, gradients, the optimizer state below, activations
     * and their gradients at max_batch, input staging; CUDA: the staging buffers and the
     * initial values, made on the host: device memory is refused by the allocation itself)
     * must fit mem_limit bytes. 0 (default): what the process can still
     * take (sl_mem_available, sluice/util.h: its cgroup's limit, else MemAvailable); < 0: no
     * check. optimizer_floats: the optimizer state per trainable parameter the caller will
     * allocate on the model's backend (sgd with momentum 1, adam 2; sl_optim_create). */
    int64_t mem_limit;
    int optimizer_floats;
} sl_model_opts;

sl_model_opts sl_model_opts_default(void);

/* Build a model from layer specs (the first must be INPUT) ending in `classes` logits: the
 * last layer must be DENSE with classes units and no activation. Errors: SL_EINVAL naming
 * the layer (index and name) and what is wrong (e.g. "conv2d_1: kernel 5x5 larger than its
 * 4x4 input", "add_1: add of shapes that differ: 8x8x16 (conv2d_3) and 4x4x32
 * (conv2d_4)", an input index that is not an earlier layer, an output no layer uses),
 * SL_EINVAL for a label_smoothing outside [0, 1) or an unknown precision, SL_EUNSUPPORTED for CUDA without a GPU,
 * SL_ENOMEM: a memory plan that does not fit opts.mem_limit, named before anything is
 * allocated ("model: needs 28.1 GiB of memory (N parameters: 8.8 GiB, ...), more than the 21.3 GiB this
 * process can still take (MemAvailable in /proc/meminfo)", with the largest layer in the
 * hint), or an allocation that failed. In backward a layer output used by
 * several layers gets the sum of their gradients. */
sl_status sl_model_create(const sl_layer_spec *layers, int n, const sl_model_opts *opts, sl_model **out);

/* From a `model NAME { ... }` block:
 *     model mlp {
 *         input 28x28x1
 *         flatten
 *         dense 256 activation=relu
 *         dropout 0.2
 *         dense 10
 *     }
 * conv2d FILTERS kernel=5x5 [stride=1] [padding=same|valid] [activation=relu];
 * maxpool 2x2 [stride=2] [padding=...]; avgpool likewise; batchnorm [momentum=] [eps=];
 * relu / tanh / sigmoid; global_avg_pool (h x w x c -> c). Graphs: every layer takes
 * from=NAME to read an earlier layer's output instead of the previous one (the input layer
 * is named "input" unless it has name=); `add A B ...` sums the named outputs (`add A`: the
 * previous layer's output plus A's); `concat A B ...` joins them along the last dimension
 * (`concat A`: the previous one's then A's):
 *         conv2d 16 kernel=3x3 padding=same activation=relu name=stem
 *         conv2d 16 kernel=3x3 padding=same
 *         add stem
 *         relu
 * Blocks, top-level statements beside the models: `block NAME(PARAM, PARAM=DEFAULT) {
 * layers }`, used in a model as `NAME ARGS [PARAM=VALUE] [name=INSTANCE]`: the layers are
 * copied in with the parameters replaced; inside, `in` names the block's input, local
 * names get the instance's name as a prefix ("down_1_proj") and the last layer is named
 * after the instance (default "NAME_K"). Errors at file:line:col (sl_cfg_err) with hints
 * (unknown or later names, shapes of an add or concat that do not match, naming both; a
 * missing or unknown block argument). */
sl_status sl_model_from_config(const sl_cfg *cfg, const char *name, const sl_model_opts *opts,
                               sl_model **out);

void sl_model_free(sl_model *m); /* NULL is a no-op */

/* "cpu" or "cuda". */
const char *sl_model_backend_name(const sl_model *m);

/* The number of classes (the last layer's units). */
int sl_model_classes(const sl_model *m);

/* A one-line-per-layer summary (name, output shape, parameters), Keras style; a graph model
 * (a layer whose input is not the layer before it, or ADD / CONCAT) also gets Keras'
 * "Connected to" column: the names of each layer's inputs. *out malloc'd. */
sl_status sl_model_summary(const sl_model *m, char **out);

/* Top-k accuracy's k (sl_step_result.top5). */
#define SL_TOPK 5

/* Result of a step over one batch. */
typedef struct sl_step_result {
    double loss;      /* mean softmax cross-entropy over the batch (with the model's label_smoothing) */
    int64_t correct;  /* examples whose argmax (the first maximum) equals the label */
    int64_t examples;
    int64_t top5;     /* examples whose label is among the SL_TOPK highest logits: fewer than
                         SL_TOPK logits are strictly greater than the label's (tied logits that
                         straddle the boundary are all in, as tf.math.in_top_k counts them); a
                         label logit that is NaN or infinite never counts. With <= SL_TOPK
                         classes: every example whose label logit is finite */
} sl_step_result;

/* Forward + backward on a batch: x float32 [B, ...input shape], labels int64 (or int32)
 * [B] (host tensors, B <= max_batch). The gradient of the MEAN loss over the batch is
 * ADDED to the model's gradient buffer (zero it with sl_model_zero_grads first).
 * grad_scale multiplies it (1 normally; replicas may pass 1/world to average by summing).
 * SL_EINVAL for a shape or dtype that does not match the input layer, SL_ERANGE for a label
 * outside 0..classes-1 (the message says which example). */
sl_status sl_model_train_step(sl_model *m, const sl_tensor *x, const sl_tensor *labels,
                              float grad_scale, sl_step_result *res);

/* Forward only, in inference mode (dropout off, batchnorm running stats). */
sl_status sl_model_eval_step(sl_model *m, const sl_tensor *x, const sl_tensor *labels,
                             sl_step_result *res);

/* A batch staged for a later step (sl_model_stage): which slot, and which staging. */
typedef struct sl_staged {
    int slot;
    uint64_t id;
} sl_staged;

/* The model's staging slots, used in turn: a handle stays good until this many more
 * batches have been staged. */
#define SL_MODEL_STAGE_SLOTS 3

/* Stage a batch for a later step, so that its copy to the device overlaps the step before
 * it (tf.data's prefetch_to_device): checks x and labels as the steps do (same errors,
 * labels converted to int32), then on CUDA copies them into the next slot's pinned host
 * buffer and queues the copy to the device on the copy stream, recording the slot's own
 * event; on the CPU the step reads x where it is, so x must stay alive and unchanged until
 * the step. *out is the handle to pass to sl_model_train_staged / sl_model_eval_staged.
 * Refilling a slot waits (on the host) only for that slot's previous copy, and the copy
 * waits (on the device) only for the step that last read the slot. */
sl_status sl_model_stage(sl_model *m, const sl_tensor *x, const sl_tensor *labels, sl_staged *out);

/* sl_model_train_step / sl_model_eval_step on a staged batch: the step waits for that
 * batch's copy only, never for the device as a whole; the loss comes back through pinned
 * memory, waited for after the backward pass is queued. SL_ESTATE naming the handle when
 * its slot was refilled since (more than SL_MODEL_STAGE_SLOTS - 1 later stagings) or it was
 * never staged. */
sl_status sl_model_train_staged(sl_model *m, const sl_staged *st, float grad_scale, sl_step_result *res);
sl_status sl_model_eval_staged(sl_model *m, const sl_staged *st, sl_step_result *res);

sl_status sl_model_zero_grads(sl_model *m);

/* The flat parameter and gradient buffers (backend memory) and their length in floats. */
float *sl_model_params(sl_model *m, size_t *n);
float *sl_model_grads(sl_model *m, size_t *n);

/* Copy all parameters to / from host memory (n floats). Includes batchnorm running stats
 * (they are parameters that no gradient touches). */
sl_status sl_model_get_params(sl_model *m, float *host, size_t n);
sl_status sl_model_set_params(sl_model *m, const float *host, size_t n);

/* Named views for checkpoints, in a fixed order: i in 0..count-1 gives "dense_1/kernel"
 * style names, the offset into the flat buffer (floats) and the shape. */
int sl_model_param_count(const sl_model *m);
sl_status sl_model_param_info(const sl_model *m, int i, const char **name, size_t *offset,
                              int *rank, int64_t dims[4]);

/* ---- optimizers ---- */

typedef enum sl_optim_kind { SL_OPTIM_SGD = 1, SL_OPTIM_ADAM, SL_OPTIM_ADAMW } sl_optim_kind;

/* Parameters that weight decay leaves alone (sl_optim_spec.decay_exclude, bits), as
 * common ResNet recipes do (timm's filter_bias_and_bn): told apart by their view names
 * (sl_model_param_info). */
#define SL_DECAY_EXCLUDE_BIAS 1u      /* dense and conv2d biases ("NAME/bias") */
#define SL_DECAY_EXCLUDE_BATCHNORM 2u /* batchnorm gamma and beta ("NAME/gamma", "NAME/beta") */

typedef struct sl_optim_spec {
    sl_optim_kind kind;
    float momentum;     /* SGD */
    bool nesterov;      /* SGD */
    float weight_decay; /* SGD/Adam: L2 added to the gradient; AdamW: decoupled */
    float beta1, beta2, eps; /* Adam/AdamW (0: 0.9, 0.999, 1e-8) */
    unsigned decay_exclude; /* SL_DECAY_EXCLUDE_* bits: these parameters get weight_decay 0
                               (their update is otherwise the same); 0: decay everything */
} sl_optim_spec;

typedef struct sl_optim sl_optim;

/* State (momentum, or Adam's m and v) in one allocation, zeroed. With decay_exclude (and
 * weight_decay > 0) each step runs the backend's update over the contiguous runs of
 * decayed and excluded parameters, with weight_decay and 0. SL_EINVAL for a bad spec
 * (naming the value; unknown decay_exclude bits too), SL_ENOMEM; *out NULL on failure. */
sl_status sl_optim_create(sl_model *m, const sl_optim_spec *spec, sl_optim **out);
void sl_optim_free(sl_optim *o);
/* Apply the model's gradient with learning rate lr; increments the step count. */
sl_status sl_optim_step(sl_optim *o, float lr);
/* The state for checkpoints: the flat buffer (backend memory), its length in floats, and
 * the step count; set restores both. */
float *sl_optim_state(sl_optim *o, size_t *n, int64_t *step);
sl_status sl_optim_get_state(sl_optim *o, float *host, size_t n);
sl_status sl_optim_set_state(sl_optim *o, const float *host, size_t n, int64_t step);

/* ---- learning-rate schedules ---- */

typedef enum sl_sched_kind { SL_SCHED_CONSTANT = 0, SL_SCHED_STEP, SL_SCHED_COSINE } sl_sched_kind;

typedef struct sl_schedule {
    sl_sched_kind kind;
    float lr;            /* base learning rate */
    int64_t warmup;      /* linear warmup steps from 0 (0: none) */
    int64_t step_size;   /* STEP: multiply by gamma every step_size steps (after warmup) */
    float gamma;         /* STEP */
    int64_t total;       /* COSINE: steps over which lr decays to min_lr (after warmup) */
    float min_lr;        /* COSINE */
} sl_schedule;

/* The learning rate at `step` (0-based). */
float sl_schedule_lr(const sl_schedule *s, int64_t step);

#ifdef __cplusplus
}
#endif
#endif
