/* Private to pipeline/: how datasets, iterators and functions are put together. Each op
 * (pipeline/ops/NAME.c) defines one sl_ds_vt and one sl_iter_vt; each function
 * (pipeline/fn/NAME.c) one sl_fn_vt. */
#ifndef SLUICE_PIPELINE_INTERNAL_H
#define SLUICE_PIPELINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "sluice/util.h"

#define SL_DS_MAX_INPUTS 16

/* ---- datasets ---- */

typedef struct sl_ictx sl_ictx;

typedef struct sl_ds_vt {
    const char *name;
    /* Make an iterator over ds. `seed` is this iterator's stream seed (see sl__child_seed).
     * On failure *out is NULL and nothing is left running. */
    sl_status (*make_iter)(sl_dataset *ds, sl_ictx *ctx, uint64_t seed, sl_iter **out);
    /* Free the op's own fields (inputs are released by the common code). May be NULL. */
    void (*destroy)(sl_dataset *ds);
    /* Elements, SL_INFINITE or SL_UNKNOWN_CARD. May be NULL (unknown). */
    int64_t (*cardinality)(const sl_dataset *ds);
    /* The op can start an iterator at any element of its stream without producing the ones
     * before it (sl_iter_create_at): its make_iter reads the iterator's `start` after
     * sl__iter_new, opens its inputs at the positions that element needs (sl__iter_input_at)
     * and numbers its elements from there, so that what it gives is, bit for bit, what an
     * iterator from 0 gives after `start` elements, random draws included. An op without it
     * is never asked to start anywhere but 0. */
    bool seek;
    /* The exact number of elements where metadata can tell it (a TFRecord file's record
     * index: this may read or build the index) though the cardinality is unknown;
     * SL_UNKNOWN_CARD when it cannot (the thread's error left as it was). For seeking ops
     * that must know their inputs' lengths (interleave). NULL: the cardinality. */
    int64_t (*count)(sl_dataset *ds);
} sl_ds_vt;

/* Ops embed this as their first member. */
struct sl_dataset {
    atomic_int refs;
    const sl_ds_vt *vt;
    int ninputs;
    sl_dataset *inputs[SL_DS_MAX_INPUTS]; /* references held */
    char label[64];                        /* shown in errors and stats */
    char where[128];                       /* the config statement that made it, "FILE:LINE"
                                            * (from_config sets it); "" if none */
    uint64_t params;                       /* sl__ds_param's mix: in the state's fingerprint */
};

/* Mix a parameter that shapes the stream into ds's fingerprint (sl_iter_save), at
 * creation. Only what is the same on every replica of a job: never a shard's index or
 * count, a replica's files or its share of the global batch (a state is restored into
 * another replica count). */
static inline void sl__ds_param(sl_dataset *ds, uint64_t v) { ds->params = sl_mix2(ds->params + 1, v); }

/* Allocate an op of `size` bytes (>= sizeof(sl_dataset)), zeroed, refcount 1, taking a
 * reference to each input. NULL (and sl_err set) on ENOMEM or too many inputs. */
void *sl__ds_new(size_t size, const sl_ds_vt *vt, sl_dataset *const *inputs, int ninputs);

/* ---- iterators ---- */

typedef struct sl_iter_vt {
    /* Produce the next element into *out (empty on entry). SL_OK, SL_END or an error. */
    sl_status (*next)(sl_iter *it, sl_element *out);
    /* Cancel in-flight work, join threads, close inputs, free the op's state. The common
     * code frees the sl_iter itself afterwards. May be NULL. */
    void (*close)(sl_iter *it);
} sl_iter_vt;

/* Per-op counters, shared by every iterator of one node (pipeline/stats.c turns them into
 * sl_stats). Times are summed over the op's threads (a map with 4 busy workers accrues 4 s
 * of busy time per second). Updated with relaxed atomics: a snapshot is approximate by a
 * few elements, never torn. */
typedef struct sl_op_stats {
    const char *label;
    atomic_llong elements;   /* produced */
    atomic_llong bytes;      /* tensor bytes produced */
    atomic_llong busy_ns;    /* the op's own work: excludes time inside its input's next() and
                              * time blocked on its own workers/producer */
    atomic_llong wait_ns;    /* time waiting on input: inside the input's next() (sequential
                              * ops, prefetch's producer) or fetching input (runner workers) */
    atomic_llong lockq_ns;   /* runner workers: the part of wait_ns spent queued for the input
                              * lock while another worker fetched */
    atomic_llong blocked_ns; /* producers blocked on a full output buffer */
    atomic_llong stall_ns;   /* the op's consumer waited for a result (async ops: prefetch,
                              * runner ops, parallel interleave) */
    atomic_llong empty_hits; /* next() found no result ready (async ops) */
    atomic_llong errors;     /* errors returned */
    atomic_int parallelism;  /* current parallelism (parallel ops) */
    atomic_int threads;      /* worker threads started (the most parallelism can grow to) */
    atomic_int buffer;       /* current buffer capacity (buffered ops) */
    atomic_int buffered;     /* elements in the buffer now */
    atomic_llong buffered_bytes;      /* bytes of the elements in the buffer now */
    atomic_llong buffered_bytes_peak;
    atomic_llong occ_sum;    /* sampled occupancy (elements, x1000) summed, by the tuner thread */
    atomic_llong occ_samples;
    /* runner workers, on a sample of their units (one per worker every ~10 ms): the work's
     * wall time, and of it the thread's CPU time and run-queue wait (runner.c). What is left
     * is time blocked inside the function (I/O, sleeps): it needs no core (autotune.c) */
    atomic_llong samp_wall_ns, samp_cpu_ns, samp_rq_ns;
} sl_op_stats;

/* A point of a node's history: what the tuner chose, and the buffer use, at time t. */
typedef struct sl_op_sample {
    uint32_t t_ms;     /* since the iterator was created */
    int16_t parallelism, buffer;
    float buffered;    /* mean occupancy since the previous sample */
} sl_op_sample;

#define SL_OP_HISTORY 256

/* Setters the tuner calls on the live iterator of a node (either may be NULL). */
typedef struct sl_tune_ops {
    void (*set_parallelism)(sl_iter *it, int parallelism);
    void (*set_buffer)(sl_iter *it, int buffer);
} sl_tune_ops;

/* One node of the running pipeline: an op of the dataset graph, with the counters of all
 * its iterators (several over time: one per epoch under repeat, one per file under
 * interleave). Nodes live as long as the context; their ids are their index in ctx->nodes,
 * in creation order, so the root is node 0 and a node's parent has a smaller id. */
typedef struct sl_op_node {
    int id;
    int parent;               /* the node whose iterator created this one's; -1 for the root */
    int input;                /* which input of the parent (-1: interleave's per-element inputs) */
    const sl_dataset *key;    /* the dataset (identity only; NULL for per-element inputs) */
    char label[64];           /* the dataset's label */
    char op[32];              /* the op's name */
    sl_op_stats stats;
    /* tuning (pipeline/autotune.c); tune_mu guards target, tops, the auto flags, max_par,
     * hist_every, nhist and hist */
    pthread_mutex_t tune_mu;
    sl_iter *target;          /* the node's live iterator the tuner may change, or NULL */
    const sl_tune_ops *tops;
    atomic_bool auto_par, auto_buf; /* SL_AUTO was asked for: the tuner owns the value */
    atomic_int max_par;       /* threads the live iterator started */
    int hist_every;           /* record every k-th sample (doubles when hist is full) */
    int hist_skip;
    int nhist;
    sl_op_sample hist[SL_OP_HISTORY];
} sl_op_node;

/* Ops embed this as their first member. */
struct sl_iter {
    const sl_iter_vt *vt;
    sl_dataset *ds;          /* reference held */
    sl_ictx *ctx;
    uint64_t seed;           /* stream seed of this iterator */
    bool owns_ctx;           /* the root iterator frees the context */
    bool ended;              /* SL_END was returned: keep returning it */
    sl_op_node *node;        /* this op's node in ctx */
    sl_op_stats *stats;      /* = &node->stats, shared by every iterator of the node */
    int64_t start;           /* position in the op's stream of the first element it gives
                              * (0, or what sl__iter_input_at asked of a seeking op) */
    int64_t given;           /* the root: elements sl_iter_next returned */
    int64_t errors;          /* the root: errors sl_iter_next returned (sl_iter_save refuses) */
    int64_t replayed;        /* the root: elements produced and dropped to reach start */
};

/* Cancellation is registered, not polled: an op whose threads wait on its own condition
 * variables registers a hook; closing the pipeline sets ctx->cancelled and runs every hook
 * (on the closing thread), which wakes those threads at once. A hook takes the op's mutex
 * and broadcasts; a waiter checks ctx->cancelled under that same mutex, so no wake-up is
 * lost. Lock order: ctx->cancel_mu before any op's mutex (an op unregisters before it takes
 * its own mutex in close). */
typedef struct sl__cancel_hook {
    struct sl__cancel_hook *next, *prev; /* guarded by ctx->cancel_mu */
    void (*fn)(void *arg);               /* NULL: not registered */
    void *arg;
} sl__cancel_hook;

/* Register h (embedded in the op's iterator) to run fn(arg) when the pipeline is closed;
 * cannot fail. Runs fn at once when the pipeline is already cancelled. */
void sl__cancel_register(sl_ictx *ctx, sl__cancel_hook *h, void (*fn)(void *), void *arg);
/* Remove h; after it returns fn is not running and will not run. A hook never registered
 * (fn NULL, as calloc leaves it) is a no-op. */
void sl__cancel_unregister(sl_ictx *ctx, sl__cancel_hook *h);

/* Shared by every iterator of one sl_iter_create. */
struct sl_ictx {
    sl_iter_opts opts;
    atomic_bool cancelled;       /* set by close: blocking waits give up with SL_ECANCELED */
    pthread_mutex_t cancel_mu;   /* guards cancel_hooks (and setting cancelled with them) */
    sl__cancel_hook *cancel_hooks; /* run by close after setting cancelled */
    atomic_llong errors_ignored; /* counted by ignore_errors */
    atomic_llong refilled;       /* elements ops read again to rebuild their state at a start
                                  * (a buffer shuffle's buffer): sl_iter_refilled */
    int ncpu;                    /* cores available (opts.cpu_budget or the CPU count) */
    bool ram_budget_given;       /* the caller set opts.ram_budget (else it is a default) */
    uint64_t start_ns;           /* when the root iterator was created */
    pthread_mutex_t nodes_mu;    /* guards nodes, nnodes, cap (not the nodes' counters) */
    sl_op_node **nodes;          /* the graph as it has been instantiated so far */
    int nnodes, cap;
    atomic_llong root_next_ns;   /* time inside sl_iter_next of the root (the consumer waiting) */
    atomic_int thread_budget;    /* threads the tuner lets tuned ops run now (autotune.c) */
    atomic_llong buffered_bytes; /* bytes held in every op's buffers now */
    atomic_llong buffered_bytes_peak;
    struct sl_trace *_Atomic trace; /* trace-event recording, or NULL (pipeline/trace.c) */
    struct sl_tuner *tuner;      /* the tuner/sampler thread (pipeline/autotune.c), or NULL */
};

/* ---- stats helpers (pipeline/dataset.c) ---- */

/* The stats clock (sl__now_fast, sl__clock_init) lives in core: sluice/util.h. */

/* The calling op's next() blocked `ns` waiting for its own workers or producer: counted as
 * the op's stall time (not busy, not waiting on input) by the sl__iter_next around it. */
void sl__stats_waited(uint64_t ns);

/* Bytes entered (delta > 0) or left (delta < 0) a node's buffer: keeps the node's and the
 * context's buffered bytes and their peaks. */
void sl__stats_buffered_bytes(sl_ictx *ctx, sl_op_stats *st, long long delta);

/* Tensor bytes of an element, and of n tensors. */
size_t sl__element_bytes(const sl_element *e);
size_t sl__tensors_bytes(const sl_tensor *t, int n);

/* ---- memory plan (pipeline/mem_plan.c) ---- */

/* Bytes of e's components that the element itself holds in memory: views of a mapped file
 * cost only page cache, which the kernel can drop, and are not counted. */
size_t sl__element_owned_bytes(const sl_element *e);

/* A buffer of `n` elements of `each` bytes, `what` it is ("shuffle buffer", "batch"): SL_OK
 * when n x each fits the pipeline's memory (opts.ram_budget when the caller gave one, else
 * what the process can still take), else SL_ENOMEM from op `it` naming both sizes, with
 * `hint`. Called once per buffer, at its first element. */
sl_status sl__buffer_fits(const sl_iter *it, const char *what, int64_t n, size_t each, const char *hint);

/* ---- packed elements (pipeline/packed.c): how ops that hold many elements keep them ---- */

#define SL_PACK_N 2      /* components a packed element keeps in place */
#define SL_PACK_NAMES 32 /* names a holder's table keeps */

typedef struct sl__pack_names {
    int n;
    char names[SL_PACK_NAMES][SL_NAME_MAX];
} sl__pack_names;

typedef struct sl__packed {
    sl_origin origin;
    int n;                   /* components; -1: `big` holds the element whole */
    uint8_t name[SL_PACK_N]; /* indices into the holder's sl__pack_names */
    union {
        sl_tensor t[SL_PACK_N];
        sl_element *big;
    } u;
} sl__packed;

/* Pack e into *p, its names into nt, moving e's references (e is left empty) or, with
 * _shared, taking new ones (e unchanged). false only when an element kept whole finds no
 * memory: e is then as it was and *p holds nothing. */
bool sl__pack(sl__pack_names *nt, sl_element *e, sl__packed *p);
bool sl__pack_shared(sl__pack_names *nt, const sl_element *e, sl__packed *p);
/* *out (fresh or empty) gets p's element, moved (p left empty) or, with _shared, as new
 * references (p unchanged). */
void sl__unpack(const sl__pack_names *nt, sl__packed *p, sl_element *out);
void sl__unpack_shared(const sl__pack_names *nt, const sl__packed *p, sl_element *out);
/* The tensor bytes p holds (what sl__element_bytes says of the element). */
size_t sl__packed_bytes(const sl__packed *p);
/* Release what p holds; p is left empty. */
void sl__packed_clear(sl__packed *p);

/* Small tensors carved from a shared buffer (a slab) instead of one allocation each: the
 * next unused piece of `piece` bytes of *slab (a reference, or NULL), after replacing
 * *slab by a fresh slab of `count` pieces when it is used up (*used counts the pieces
 * handed out). The caller takes a reference to *slab for what it carves. NULL with
 * SL_ENOMEM set when memory runs out (*slab is then NULL). */
void *sl__slab_piece(sl_buf **slab, int *used, size_t piece, int count);

/* Would a buffered op holding `held` elements exceed the RAM budget by taking one more?
 * Only ops the tuner owns (auto) are held back, and an op holding nothing may always take
 * one, so the budget never deadlocks a pipeline. */
bool sl__ram_full(const sl_iter *it, int held);

/* ---- tuning (pipeline/autotune.c) ---- */

/* Register `it` as the live iterator of its node, with setters for what is tunable. max_par
 * is the most parallelism it can run (threads started). Detach in close before anything the
 * setters touch is freed. */
void sl__tune_attach(sl_iter *it, bool auto_par, bool auto_buf, int max_par, const sl_tune_ops *ops);
void sl__tune_detach(sl_iter *it);

/* Start / stop the tuner thread of a root iterator's context (stop joins it). A failure to
 * start is not an error: the pipeline runs with its initial values. */
void sl__tuner_start(sl_ictx *ctx);
void sl__tuner_stop(sl_ictx *ctx);

/* A snapshot of the node list (pointers stay valid while the context lives): up to cap
 * node pointers into out; returns the number of nodes. */
int sl__ctx_nodes(sl_ictx *ctx, sl_op_node **out, int cap);

/* Append a history sample to a node (tune_mu held by the caller). */
void sl__node_sample_locked(sl_ictx *ctx, sl_op_node *n, float buffered);

/* ---- trace (pipeline/trace.c) ---- */

/* Record a complete event (name = label, on the calling thread) if tracing is on. */
void sl__trace_event(sl_ictx *ctx, const char *label, const char *cat, uint64_t t0_ns, uint64_t dur_ns);
/* Name the calling thread in traces ("train/map worker 2"). */
void sl__trace_thread_name(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Write the trace file (if one was asked for) and free the recorder; at root close. */
void sl__trace_finish(sl_ictx *ctx);

/* Allocate an iterator of `size` bytes (>= sizeof(sl_iter)), zeroed, for ds (a reference
 * is taken), attached to the node its creator announced (see sl__iter_input). NULL on
 * ENOMEM. */
void *sl__iter_new(size_t size, const sl_iter_vt *vt, sl_dataset *ds, sl_ictx *ctx, uint64_t seed);

/* sl__iter_input with the input's iterator starting at element `start` of its stream:
 * start 0 is sl__iter_input; otherwise the input's op must seek (sl_ds_vt.seek), else
 * SL_EUNSUPPORTED naming the op (nothing is made). */
sl_status sl__iter_input_at(sl_dataset *ds, int i, sl_ictx *ctx, uint64_t seed, uint64_t salt, int64_t start,
                            sl_iter **out);

/* Make an iterator over input i of ds, with stream seed sl__child_seed(seed, salt). */
sl_status sl__iter_input(sl_dataset *ds, int i, sl_ictx *ctx, uint64_t seed, uint64_t salt,
                         sl_iter **out);

/* Make an iterator over a dataset made while running (interleave's per-element inputs):
 * all of parent's such inputs share one node. */
sl_status sl__iter_make(sl_iter *parent, sl_dataset *ds, uint64_t seed, sl_iter **out);

/* sl__iter_make with the iterator starting at element `start` (as sl__iter_input_at). */
sl_status sl__iter_make_at(sl_iter *parent, sl_dataset *ds, uint64_t seed, int64_t start, sl_iter **out);

/* ds's exact element count through its vt->count (else its cardinality): a number,
 * SL_INFINITE or SL_UNKNOWN_CARD. */
int64_t sl__ds_count(sl_dataset *ds);

/* sl_iter_next for use inside ops: counts stats, honours `ended`. */
sl_status sl__iter_next(sl_iter *it, sl_element *out);

/* Close an inner iterator (the same as sl_iter_close). NULL is a no-op. */
void sl__iter_close(sl_iter *it);

/* Report an error that originates in this op: "op 'LABEL': " + message. Returns code. */
sl_status sl__op_err(const sl_iter *it, sl_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix the current error (raised by a function or a format reader) with the op's label. */
void sl__op_err_prefix(const sl_iter *it);

/* ---- seeds and random numbers ---- */

/* A well-mixed 64-bit hash of (a, b): the stream seed of a child, a per-element seed. */
static inline uint64_t sl__mix(uint64_t a, uint64_t b) { return sl_mix2(a, b); }
static inline uint64_t sl__child_seed(uint64_t seed, uint64_t salt) { return sl_mix2(seed, salt); }

/* splitmix64: small, fast, good enough for augmentation and shuffling. */
typedef struct sl_rng {
    uint64_t s;
} sl_rng;
static inline uint64_t sl__rng_u64(sl_rng *r) { return sl_splitmix64(&r->s); }
/* uniform in [0, 1) with 53 bits */
static inline double sl__rng_double(sl_rng *r) { return (double)(sl__rng_u64(r) >> 11) * 0x1.0p-53; }
/* uniform integer in [0, n), n >= 1, without modulo bias */
uint64_t sl__rng_below(sl_rng *r, uint64_t n);

/* ---- element functions ---- */

typedef struct sl_fn_vt {
    const char *name;
    sl_status (*apply)(const sl_fn *fn, sl_element *e, const sl_fn_call *call);
    void (*destroy)(sl_fn *fn);                        /* free own fields; may be NULL */
    sl_status (*state_new)(const sl_fn *fn, void **st); /* per-thread state; may be NULL */
    void (*state_free)(const sl_fn *fn, void *st);
    /* Called by sl_fn_chain with the functions after this one. Returns how many of them
     * this function absorbs (they will not be called: this function now does their work),
     * 0 for none. May be NULL. */
    int (*plan)(sl_fn *fn, sl_fn *const *downstream, int n);
} sl_fn_vt;

/* Functions embed this as their first member. */
struct sl_fn {
    atomic_int refs;
    const sl_fn_vt *vt;
    char name[64];
};

void *sl__fn_new(size_t size, const sl_fn_vt *vt, const char *name);

/* Per-thread state for every function of fn (a chain's members included): what a map
 * worker creates once and passes to sl__fn_apply. */
typedef struct sl_fn_states sl_fn_states;
sl_status sl__fn_states_new(const sl_fn *fn, sl_fn_states **out);
void sl__fn_states_free(const sl_fn *fn, sl_fn_states *st);

/* Where a fused map_batch wants an element's numeric components: slot k of the batch
 * whose tensors it already allocated (from the batch's element 0). */
typedef struct sl__fn_dest {
    const sl_element *batch;
    int k;
} sl__fn_dest;

/* Apply fn to *e with the element's seed and index; on failure the error names the
 * function ("decode_jpeg: ..."). */
sl_status sl__fn_apply(const sl_fn *fn, sl_element *e, uint64_t seed, int64_t index,
                       sl_fn_states *st);
/* The same, offering dest (NULL: none) to every function that runs: see sl__fn_batch_slot
 * and sl__fn_out_alloc. */
sl_status sl__fn_apply_to(const sl_fn *fn, sl_element *e, uint64_t seed, int64_t index,
                          sl_fn_states *st, const sl__fn_dest *dest);

/* For functions that make a fresh output tensor: sl_tensor_alloc(t, dt, rank, dims), or,
 * when the call was offered a destination whose batch has component `name` with exactly
 * this dtype and element shape, a view of the element's slot in that batch (its data is
 * then written straight into the batch: map_batch finds it there and copies nothing). The
 * function must fill every byte, as with a fresh tensor. Fails as sl_tensor_alloc does. */
sl_status sl__fn_out_alloc(const sl_fn_call *call, const char *name, sl_tensor *t, sl_dtype dt, int rank,
                           const int64_t *dims);

/* For the function offered a destination (sl__fn_apply_to): a view, in *t, of the batch
 * slot its component `comp` will be copied into, when that slot is a dtype tensor of shape dims
 * (rank entries), so the function can write its result there and set the view as the
 * component (the copy then finds it in place). False, *t untouched, when there is no such
 * slot (no batch yet, another shape, not offered one, or comp of the element being
 * processed already lives there: an earlier function built it, and it is this one's input).
 * sl__fn_out_alloc is built on it. */
bool sl__fn_batch_slot(const sl_fn_call *call, const char *comp, sl_dtype dtype, int rank,
                       const int64_t *dims, sl_tensor *t);

/* For a function whose plan() absorbed downstream members of a chain: the member k places
 * after it (k >= 1) and, in *seed, the seed the chain would have called that member with, so
 * the fused work draws exactly the random numbers the unfused chain would. NULL (and *seed
 * untouched) when the function is not running inside a chain or member k is not absorbed
 * there. `call` must be the sl_fn_call the function received from sl__fn_apply. */
const sl_fn *sl__fn_absorbed(const sl_fn_call *call, int k, uint64_t *seed);

/* A function failed on an element that came from `o` inside the op labelled `label` (made
 * by the config statement `where`, or ""): prefix the current error with all of it, so it
 * says which record, which statement and which function, as
 *   "PATH: byte OFFSET: op 'LABEL' (FILE:LINE): FN: what"
 * (the parts that are unknown are left out). The one place map and map_batch word it. */
void sl__fn_err_context(const char *label, const char *where, const sl_origin *o);

/* Component lookup helper for functions: the index of `name` in e, or an SL_EINVAL error
 * "FN: no component 'name' (components: a, b)". */
int sl__fn_component(const sl_fn *fn, const sl_element *e, const char *name, sl_status *err);
/* For functions that read encoded bytes: the one byte string in component `name` of e, in
 * *out. SL_EINVAL "'name' is DESCRIPTION; NEEDS" when the component is not one byte string
 * (needs says what the function wants, e.g. "decode_raw needs one byte string"), or
 * sl__fn_component's error; *out is left alone on failure. t (may be NULL) receives the
 * component's tensor (its aux holds the bytes' buffer, for views). */
sl_status sl__fn_bytes_input(const sl_fn *fn, const sl_element *e, const char *name,
                             const char *needs, sl_bytes *out, const sl_tensor **t);


/* ---- the parallel runner (pipeline/runner.c) ----
 * Worker threads repeatedly: take the input lock, fetch the inputs of one unit of work
 * (one element for map, a batch's worth for map_batch) numbered by a sequence number in
 * fetch order, release the lock, process the unit, and park the result in a slot. The
 * consumer takes results in sequence order (deterministic) or in finishing order. At most
 * `parallelism` units are in flight and at most `capacity` results wait in slots.
 * Lock order: in_mu before mu (a worker never takes in_mu while holding mu). */

typedef struct sl_runner sl_runner;

typedef struct sl_runner_ops {
    size_t job_size;  /* bytes of per-unit scratch handed from fetch to work */
    /* With the input lock held: fetch the inputs of unit `seq` from `in` into job. Return
     * SL_OK (and *last = true if the input ended while fetching: the unit is partial and
     * nothing follows), SL_END if nothing was fetched and the input is over, or an error
     * (the error becomes this unit's result, in order). */
    sl_status (*fetch)(void *op, sl_iter *in, int64_t seq, void *job, bool *last);
    /* On a worker thread, no lock held: turn job into *out (empty on entry). */
    sl_status (*work)(void *op, void *job, int64_t seq, void *tstate, sl_element *out);
    /* Release whatever fetch left in job (after work, or when cancelled). */
    void (*job_clear)(void *op, void *job);
    /* Free allocations the job keeps between units (at stop). May be NULL. */
    void (*job_free)(void *op, void *job);
} sl_runner_ops;

/* Start `nthreads` workers over input iterator `in` (taken over: the runner closes it).
 * Each worker gets its own states of `fn` (sl__fn_states_new, made before any thread
 * starts), passed to work as `tstate`; fn NULL: tstate is NULL. parallelism <= nthreads is
 * the initial number of active workers. Units are numbered from first_seq (an iterator
 * started part-way, sl_iter.start). On failure nothing is left running and `in` has been
 * closed. */
sl_status sl__runner_start(const sl_runner_ops *ops, void *op, sl_iter *owner, sl_iter *in,
                           const sl_fn *fn, int nthreads, int parallelism, int capacity,
                           bool deterministic, int64_t first_seq, sl_runner **out);

/* The next result: SL_OK with *out, SL_END, or a unit's error (restored in this thread). */
sl_status sl__runner_next(sl_runner *r, sl_element *out);

/* Change the number of active workers (1..nthreads) — for autotune. */
void sl__runner_set_parallelism(sl_runner *r, int parallelism);

/* Change how many results may wait (>= 1, at most the slots allocated: 2 * nthreads + 2);
 * for autotune's RAM budget. */
void sl__runner_set_capacity(sl_runner *r, int capacity);

/* Cancel, join, free; closes the input. NULL is a no-op. */
void sl__runner_stop(sl_runner *r);

/* The safety-net poll, in ms, of the op waits that a close wakes through its cancel hooks
 * (interleave's and prefetch's consumers: 50). Only a test changes it: set long, a close
 * that waits for the poll instead of being woken takes that long, far past its usual
 * millisecond, whatever the machine's speed. Defined in runner.c. */
extern int sl__poll_ms;

/* The head of an iterator driven by a runner (map, map_batch): its struct starts with
 * these two fields, so next, the tuner's ops and the start below serve both. */
typedef struct sl__runner_iter {
    sl_iter base;
    sl_runner *runner;
} sl__runner_iter;

/* Open the op's input (input 0 of its dataset) and start its runner over it on fn, with
 * `parallelism` workers, or SL_AUTO: threads for twice the CPU budget (idle ones sleep:
 * the tuner may run more threads than cores when they are descheduled, see autotune.c),
 * starting where the tuner left the node (a later epoch), else at the budget, with
 * cap_mul * parallelism + cap_add results allowed to wait; then attach the tuner. A unit
 * takes per_unit input elements: an iterator starting at unit it->start opens its input at
 * it->start * per_unit and numbers its units from it->start. On failure the iterator has
 * been closed (its close must accept a NULL runner). */
sl_status sl__runner_iter_start(sl__runner_iter *it, const sl_runner_ops *ops, const sl_fn *fn,
                                int parallelism, int cap_mul, int cap_add, bool deterministic,
                                int64_t per_unit);
/* sl_iter_vt.next of such an iterator. */
sl_status sl__runner_iter_next(sl_iter *it, sl_element *out);

/* ---- records as elements (pipeline/ops/tfrecord.c) ---- */

/* *out (empty) = {"record": a bytes scalar viewing rec's payload} with origin (path, the
 * record's offset): the view carved from the slab *views (replaced when used up, *nviews
 * counting its pieces), the tensor holding references to the slab and rec->buf. SL_ENOMEM
 * from op `it` when memory runs out (*out stays empty). */
sl_status sl__record_element(sl_iter *it, sl_buf **views, int *nviews, const sl_record *rec, const char *origin,
                             sl_element *out);

/* ---- file lists (pipeline/ops/list_files.c) ---- */

/* Expand patterns with glob(3) into a malloc'd array of malloc'd strings. Each pattern's
 * matches are sorted (glob's order); with sort_all the whole list is sorted and duplicates
 * dropped. A pattern that matches nothing (a plain path that does not exist included) is
 * SL_ENOTFOUND naming it, with a hint. On failure *out is NULL. `op` names the caller in
 * errors. */
sl_status sl__glob_paths(const char *op, const char *const *patterns, int n, bool sort_all,
                         char ***out, int *nout);

/* Free what sl__glob_paths made (n strings and the array). NULL is a no-op. */
void sl__free_paths(char **paths, int n);

/* ---- interleave (pipeline/ops/interleave.c) ---- */

/* sl_ds_interleave whose dataset owns ctx: ctx_free(ctx) runs when the dataset is freed, and
 * at once when this fails (then *out is NULL). For stock factories with their own options
 * (interleave_tfrecord's read options, pipeline/ops/tfrecord.c). */
sl_status sl__ds_interleave_own(sl_dataset *in, sl_ds_factory factory, void *ctx,
                                void (*ctx_free)(void *), const sl_interleave_opts *opts,
                                sl_dataset **out);

/* ---- batching helpers (pipeline/stack.c) ---- */

/* Fill count values of dtype dt at dst with v (converted as a C cast; bytes: zeros): the
 * padding of `batch ... padded` and of bucket_by_sequence_length. */
void sl__fill_value(void *dst, sl_dtype dt, double v, size_t count);

/* Stack n elements (all with the same component names, dtypes and ranks) into one batch
 * element along a new leading dimension. Shapes must be equal unless opts->padded. Bytes
 * components are copied into one buffer. The inputs are left as they were. Errors name
 * `label` and the component. */
sl_status sl__stack(const sl_element *elems, int n, const sl_batch_opts *opts, const char *label,
                    sl_element *out);

/* Make room for `need` elements in a growable array of empty elements (*arr, *cap):
 * batches gather their elements here, growing as elements arrive, so a huge batch size
 * costs memory only for the elements that really come. SL_ENOMEM leaves the array as it was. */
sl_status sl__elems_reserve(sl_element **arr, int *cap, int need);

/* Batches of opts->size over `in` (drop_remainder counted): SL_INFINITE or SL_UNKNOWN_CARD
 * as the input's cardinality is. For batch and map_batch. */
int64_t sl__batch_card(const sl_dataset *in, const sl_batch_opts *o);

/* ---- rows of batched elements (pipeline/ops/unbatch.c; for unbatch and rebatch) ---- */

/* The rows of e: every component of rank >= 1 with the same leading dimension, into *rows.
 * SL_EINVAL naming op `label` and the component for a scalar or differing dimensions (or
 * an element without components). */
sl_status sl__rows_count(const sl_element *e, const char *label, int64_t *rows);

/* Into *out (empty) views of rows [row, row + k) of every component of e (checked by
 * sl__rows_count): with keep_dim a leading dimension k, without it (k = 1) the row itself.
 * No byte is copied; out keeps e's origin. On failure *out is empty. */
sl_status sl__rows_view(const sl_element *e, int64_t row, int64_t k, bool keep_dim, sl_element *out);

/* The cardinality of rows of `in`: 0 or SL_INFINITE as in's, else SL_UNKNOWN_CARD. */
int64_t sl__rows_card(const sl_dataset *in);

/* Is ds a map (for batch's automatic fusion)? Then its fn, parallelism and determinism. */
bool sl__ds_as_map(const sl_dataset *ds, sl_fn **fn, int *parallelism, bool *deterministic);

/* A map_batch fused from a map: its function's errors name the map (label and config
 * statement) rather than the batch, since that is where the function was written. */
void sl__map_batch_set_fn_site(sl_dataset *mb, const char *label, const char *where);

/* ---- grouping into windows (pipeline/ops/group_by_window.c) ---- */

/* What group_by_window and bucket_by_sequence_length share: elements go to the window of
 * their key; a full window is reduced at once, the rest at the end in ascending key order. */
typedef struct sl__group_spec {
    const char *op;      /* "group_by_window" or "bucket_by_sequence_length": the op's name */
    sl_key_fn key;       /* element -> key */
    void *ctx;           /* of key, window_of and reduce */
    sl_free_fn free_ctx; /* free_ctx(ctx, NULL) when the dataset is freed (or creation fails); may be NULL */
    int64_t window;      /* every key's window size, unless window_of */
    int64_t (*window_of)(void *ctx, int64_t key); /* the window size of key (>= 1); NULL: window */
    /* n elements of key (partial: fewer than its window, flushed at the end) into *out (empty);
     * SL_END drops the window. NULL: sl__stack without padding. Errors name op `it`. */
    sl_status (*reduce)(void *ctx, const sl_iter *it, int64_t key, const sl_element *elems, int n, bool partial,
                        sl_element *out);
} sl__group_spec;

/* A dataset grouping `in` as spec says (spec copied; ctx handed over). */
sl_status sl__ds_group(sl_dataset *in, const sl__group_spec *spec, sl_dataset **out);

#endif
