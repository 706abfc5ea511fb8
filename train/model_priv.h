/* Private to train/ (and its unit tests): what optimizers, the trainer and the gradient
 * checks need from a model beyond include/sluice/model.h. */
#ifndef SLUICE_TRAIN_MODEL_PRIV_H
#define SLUICE_TRAIN_MODEL_PRIV_H

#include <stdbool.h>
#include <stddef.h>

#include "sluice/model.h"
#include "train/backend.h"

/* The backend the model computes on (borrowed; lives as long as the model). */
sl_backend *sl__model_backend(sl_model *m);

/* The name each of specs[0..n) gets in a model: its own (name) or the Keras-style default,
 * "input" for specs[0] and "<kind>_<k>" for the k-th unnamed layer of a kind ("conv2d_2",
 * "add_1"); what sl_model_create names them. names has n entries. */
void sl__model_layer_names(const sl_layer_spec *specs, int n, char (*names)[32]);

/* Kernel launches the model's backend made so far (0 on the CPU): see backend.h. */
uint64_t sl__model_launches(sl_model *m);

/* backend auto that could not open its GPU and uses the CPU: why (the CUDA error, one
 * line); NULL when the model runs on the backend it asked for or no GPU exists. */
const char *sl__model_fallback(const sl_model *m);

/* Floats at the start of the parameter / gradient buffers that a gradient updates. The
 * rest (batchnorm running statistics) is state that optimizers must leave alone. */
size_t sl__model_trainable(const sl_model *m);

/* The gradient buffer (sl_model_grads) has this many floats past its n floats, which the
 * model never reads or writes: a strategy may carry a few values on the gradient's own
 * allreduce there without a copy (the ring strategy's has-data flag, train.h). */
#define SL__GRADS_SPARE 1

/* The bucketed gradient exchange (train/strategy_ring.c): fn is called during every train
 * step's backward pass, on the thread running the step, right after the backward ops of
 * each layer that has parameters were issued (on CUDA queued, not necessarily done), with
 * that layer's first gradient float lo: from then on gradient floats [lo,
 * sl__model_trainable) of this step are final (no later op of the step writes them), and
 * the layers report in decreasing lo. A non-OK return ends the step with that error. fn
 * NULL: none (the default). */
typedef sl_status (*sl__grads_ready_fn)(void *ctx, size_t lo);
void sl__model_on_grads_ready(sl_model *m, sl__grads_ready_fn fn, void *ctx);

/* The first gradient float of each layer that has parameters, in layer order (increasing),
 * into lo[0..cap); returns how many such layers there are (also when more than cap). */
int sl__model_grad_layers(const sl_model *m, size_t *lo, int cap);

/* Make train steps also compute the gradient of the loss with respect to the input x
 * (off by default: no layer needs it). Returns the buffer (backend memory, [B, input
 * size] floats for the last step's B, set not accumulated) or NULL when off / on ENOMEM. */
const float *sl__model_input_grad(sl_model *m, bool on);

/* Train steps taken so far, which with the model's seed picks the dropout masks; set it
 * when resuming from a checkpoint to draw the masks of an uninterrupted run (and in
 * gradient checks, to repeat one step's masks). */
uint64_t sl__model_steps(const sl_model *m);
void sl__model_set_steps(sl_model *m, uint64_t steps);

/* mkdir -p for the trainer's folders (train/checkpoint.c). `what` names the folder in
 * messages ("run folder"). SL_OK when path is a folder afterwards; SL_EINVAL for an empty or
 * too long path, SL_EIO naming the part that could not be made. */
sl_status sl__make_dirs(const char *path, const char *what);

/* The files DIR/PREFIX<digits>SUFFIX (checkpoints, ps shards), highest number first: *out
 * is a malloc'd array of malloc'd paths (free with sl_train_free_list). Returns how many (0
 * when the folder is missing or holds none), SL_EIO when it cannot be listed, or SL_ENOMEM. */
int sl__list_numbered(const char *dir, const char *prefix, const char *suffix, char ***out);
/* The step S of a checkpoint path ".../ckpt-S.safetensors" (the names sl__list_numbered
 * lists), or -1 when its last component is not one. */
int64_t sl__checkpoint_step(const char *path);

/* The trainer's progress line (train/trainer.c), without the leading "\r\033[K":
 *   epochs mode (epochs > 0), steps per epoch known:
 *     "epoch 2/5 [=====>      ] 12/40  loss 0.1234  accuracy 0.9000  eta 1m05s"
 *   steps mode (epochs 0), total_steps > 0:
 *     "step 120/1000 [==>         ]  12%  epoch 3  loss 0.1234  accuracy 0.9000  eta 35s"
 *   else "epoch 1  batch 12  loss ...": no total, no eta (the first epoch's length is not
 *   known yet). epoch is 0-based, b the batches done in it, step the global steps done;
 *   eta_s < 0: unknown (left out). Writes at most cap bytes (NUL included); returns the
 *   length snprintf would. */
int sl__train_progress_line(char *out, size_t cap, int64_t epoch, int64_t epochs, int64_t b, int64_t steps_per_epoch,
                            int64_t step, int64_t total_steps, double loss, double accuracy, double eta_s);

#endif
