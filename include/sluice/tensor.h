/* Refcounted buffers, tensors and elements: the values that flow through a pipeline.
 *
 * An sl_buf owns bytes and is shared by reference count (atomic, so buffers cross threads).
 * An sl_tensor is a typed, shaped view into an sl_buf: slicing never copies, so a record's
 * bytes can become an Example's bytes feature and then a JPEG decoder's input without a
 * memcpy. An sl_element is a small tuple of named tensors ("image", "label"), like a
 * tf.data dict element. */
#ifndef SLUICE_TENSOR_H
#define SLUICE_TENSOR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- buffers ---------------------------------------------------------------------- */

/* Called once when the last reference goes: frees `data` (ctx is the value given at
 * creation). */
typedef void (*sl_free_fn)(void *ctx, void *data);

typedef struct sl_buf {
    atomic_int refs;    /* owned by sl_buf_ref / sl_buf_unref */
    void *data;         /* start of the bytes; read-only after creation */
    size_t size;        /* bytes at data */
    sl_free_fn free_fn; /* releases data when the last reference goes (NULL: nothing to free) */
    void *free_ctx;
    atomic_bool damaged; /* a guarded file mapping whose file shrank under it (sl_buf_damaged) */
} sl_buf;

/* A new buffer of `size` bytes, 64-byte aligned, uninitialised, refcount 1. NULL when
 * memory runs out (and sl_errmsg says so). size 0 is allowed. Buffers of 64 KiB and more
 * are recycled when freed (at most 16 of them and 1 GiB in all are kept), so a pipeline
 * that makes one batch after another reuses memory that is already mapped. */
sl_buf *sl_buf_new(size_t size);

/* A new buffer holding a copy of `data` (borrowed). NULL on ENOMEM. */
sl_buf *sl_buf_copy(const void *data, size_t size);

/* Wrap memory the caller owns: it is handed over, and free_fn(free_ctx, data) runs when the
 * last reference goes (free_fn may be NULL for memory that outlives the buffer). NULL on
 * ENOMEM, in which case nothing was handed over and free_fn is not called. */
sl_buf *sl_buf_wrap(void *data, size_t size, sl_free_fn free_fn, void *free_ctx);

/* Wrap a file mapping made with mmap(2) (`prot` as given to mmap; the mapping is handed
 * over: munmap runs when the last reference goes) and guard it against the file shrinking.
 * Reading a page of a mapping past the end of its file raises SIGBUS, which would kill the
 * process; for a guarded mapping a process-wide SIGBUS handler (installed on first use with
 * sigaction, SA_SIGINFO; faults outside guarded mappings are passed on to the handler that
 * was there before, or get the default action) instead maps zero pages over the rest of the
 * mapping from the faulting page on, marks the buffer damaged and lets the read go on.
 * Readers ask sl_buf_lost (or sl_element_check) after reading and report an error instead
 * of the zeros. NULL on ENOMEM, in which case nothing was handed over.
 *
 * Without the file (this function) a damaged mapping cannot tell which of its bytes are
 * still the file's, so sl_buf_lost calls every range of it lost once it is damaged, and
 * bytes between the file's new end and the end of that page (which read as zeros without
 * any fault: the kernel's rule for the last page of a file) go unseen until then. A program
 * that installs its own SIGBUS handler later replaces this one. */
sl_buf *sl_buf_wrap_mapping(void *addr, size_t len, int prot);

/* sl_buf_wrap_mapping for a mapping of bytes [0, len) of the open file `fd` (borrowed: the
 * buffer keeps a duplicate of it, closed with the mapping, so that sl_buf_lost can compare
 * the file's size when a range might be past its end). At most 256 such duplicates are
 * kept in the process at a time (so views held from many files cannot use up the
 * descriptors the pipeline needs to open the next ones); beyond that, or when dup fails,
 * the mapping is guarded as by sl_buf_wrap_mapping. NULL on ENOMEM, nothing handed over. */
sl_buf *sl_buf_wrap_file_mapping(void *addr, size_t len, int prot, int fd);

/* True once some page of b was lost: a guarded mapping whose file shrank while it was
 * read. False for every other buffer. Says nothing about which bytes: ask sl_buf_lost. */
bool sl_buf_damaged(const sl_buf *b);

/* Are bytes [p, p + n) of b (clipped to b) gone, reading as zeros instead of what the file
 * held? False for a buffer that is not a guarded mapping, and for n == 0. For a guarded
 * mapping it reads one byte of every page of the range and the mapping's last byte, so a
 * page that left with the file faults now and is counted; then the range is lost when it
 * reaches a page the guard replaced, or (for a mapping that knows its file) ends past the
 * file's size at this moment. Cost: a load per page, plus an fstat(2) only when the range
 * lies in the mapping's last page or the mapping is damaged. Bytes can still be lost right
 * after it answers false: a later reader asks again. A file rewritten in place that is back
 * to its old size before the range is read shows its new bytes, which this cannot tell. */
bool sl_buf_lost(const sl_buf *b, const void *p, size_t n);

/* True for a guarded mapping (sl_buf_wrap_mapping, sl_buf_wrap_file_mapping): the only
 * buffers whose bytes a file can take away. */
bool sl_buf_mapped(const sl_buf *b);

/* Take one more reference; returns b. NULL is passed through. */
sl_buf *sl_buf_ref(sl_buf *b);

/* Drop one reference; the last one frees. NULL is a no-op. */
void sl_buf_unref(sl_buf *b);

/* ---- dtypes ----------------------------------------------------------------------- */

typedef enum sl_dtype {
    SL_DT_INVALID = 0,
    SL_DT_U8, SL_DT_I8, SL_DT_U16, SL_DT_I16, SL_DT_I32, SL_DT_U32, SL_DT_I64,
    SL_DT_F16, SL_DT_BF16, SL_DT_F32, SL_DT_F64, SL_DT_BOOL,
    SL_DT_BYTES, /* variable-length byte strings: each element is an sl_bytes view */
    SL_DT_COUNT_
} sl_dtype;

/* A view of a byte string owned elsewhere (by the tensor's aux buffer). */
typedef struct sl_bytes {
    const uint8_t *ptr;
    size_t len;
} sl_bytes;

/* Bytes per element (sizeof(sl_bytes) for SL_DT_BYTES); 0 for SL_DT_INVALID. */
size_t sl_dtype_size(sl_dtype dt);
/* "uint8", "int64", "float32", "bytes", ... (the config language's names). */
const char *sl_dtype_name(sl_dtype dt);
/* Inverse of sl_dtype_name; also accepts "u8", "f32", "float", "int", "double", "string".
 * SL_DT_INVALID for an unknown name. */
sl_dtype sl_dtype_from_name(const char *name);

/* ---- tensors ---------------------------------------------------------------------- */

#define SL_MAX_RANK 8

typedef struct sl_tensor {
    sl_dtype dtype;
    int rank;                   /* 0 = scalar */
    int64_t dims[SL_MAX_RANK];  /* dims[0..rank) */
    void *data;                 /* first element, inside buf */
    sl_buf *buf;                /* owns data; one reference held by this tensor */
    sl_buf *aux;                /* SL_DT_BYTES: owns the bytes the views point into (ref held); else NULL */
} sl_tensor;

/* An all-zero tensor (dtype INVALID, no buffers): safe to release. */
#define SL_TENSOR_EMPTY ((sl_tensor){0})

int64_t sl_tensor_numel(const sl_tensor *t);  /* product of dims (1 for a scalar) */
size_t sl_tensor_nbytes(const sl_tensor *t);  /* numel * dtype size */

/* Allocate a fresh contiguous tensor (uninitialised data) into *t, which must not hold
 * references (it is overwritten). On failure *t is left empty and the status is
 * SL_EINVAL (bad dtype, rank or negative dim) or SL_ENOMEM. */
sl_status sl_tensor_alloc(sl_tensor *t, sl_dtype dt, int rank, const int64_t *dims);

/* Make *t a view of `nbytes` starting at `data` inside buf (taking a reference to buf).
 * Checks that the shape fits in the bytes: SL_EINVAL if numel*size != nbytes or data lies
 * outside buf; *t is left empty on failure. */
sl_status sl_tensor_view(sl_tensor *t, sl_buf *buf, const void *data, size_t nbytes,
                         sl_dtype dt, int rank, const int64_t *dims);

/* Another reference to the same data (no copy): *dst = src, with references taken. */
void sl_tensor_share(sl_tensor *dst, const sl_tensor *src);

/* A copy of src's values in memory of its own, into *dst (which must not hold references):
 * numbers in one fresh buffer; byte strings in one fresh buffer for the strings and one for
 * their views. SL_ENOMEM (and *dst left empty) when memory runs out. The copy never reads
 * a file again, so no later shrink of one can reach it; it reads what src reads now (check
 * src with sl_buf_lost after copying to know that was still the file's). */
sl_status sl_tensor_clone(sl_tensor *dst, const sl_tensor *src);

/* True when bytes t reads are gone from a guarded file mapping: sl_buf_lost over its data,
 * or for byte strings over the span from its first string to the end of its last. */
bool sl_tensor_lost(const sl_tensor *t);

/* Release the references held by *t and leave it empty. Safe on an empty tensor. */
void sl_tensor_release(sl_tensor *t);

/* "uint8[28,28,1]" into out (always NUL-terminated); returns out. */
char *sl_tensor_describe(const sl_tensor *t, char *out, size_t cap);

/* ---- elements --------------------------------------------------------------------- */

#define SL_ELEM_MAX 16
#define SL_NAME_MAX 64

/* Where an element came from, so that an error met while transforming it can name the
 * record: "data/train-3.tfrecord: byte 123456: ...". The tfrecord source sets it; ops that
 * pass whole elements along (map, shuffle, prefetch, filter, take, interleave, ...) keep
 * it, because they move elements with sl_element_move; ops that make new elements out of
 * several (batch, zip) leave it unknown. Plain data: copying an element copies it. */
typedef struct sl_origin {
    const char *path; /* the file, interned by sl_origin_path (never freed); NULL: unknown */
    int64_t offset;   /* byte offset of the record in path (the uncompressed stream) */
} sl_origin;

/* An interned copy of `path`: the same pointer for equal strings, valid until the process
 * ends, so elements can point at it long after the dataset that read the file is gone.
 * Meant for file names (one call per file opened, not per record); thread-safe. NULL when
 * memory runs out (the origin is then simply unknown). */
const char *sl_origin_path(const char *path);

typedef struct sl_element {
    int n;                                   /* components in use */
    char names[SL_ELEM_MAX][SL_NAME_MAX];    /* component names, unique */
    sl_tensor t[SL_ELEM_MAX];
    sl_origin origin;                        /* where it was read from ({0}: unknown) */
} sl_element;

/* Make *e empty (n = 0, origin unknown). Does not release anything: use on fresh memory. */
void sl_element_init(sl_element *e);

/* Release every component and leave *e empty (origin unknown). */
void sl_element_clear(sl_element *e);

/* Index of the component named `name`, or -1. */
int sl_element_find(const sl_element *e, const char *name);

/* Add (or replace) component `name`, taking over the references held by *t (which is left
 * empty). SL_EINVAL if the name is too long or empty, SL_ERANGE if the element is full; on
 * failure *t still holds its references (the caller releases them). */
sl_status sl_element_set(sl_element *e, const char *name, sl_tensor *t);

/* Are the bytes of every component of e still what was read? SL_OK, or SL_EIO when the
 * bytes of some component are gone from a guarded file mapping (sl_buf_lost over a numeric
 * component's bytes, or over the span of a byte-string component's strings), with the
 * message "FILE: byte OFFSET: component 'NAME': its N bytes are gone: the file shrank to M
 * bytes after the record was read" (FILE and OFFSET from e's origin; "the file shrank"
 * without the size when the mapping does not know its file; without "FILE: byte OFFSET: "
 * when the origin is unknown) and a hint. e is left as it was. */
sl_status sl_element_check(const sl_element *e);

/* Into *dst (which must be empty) another reference to each component of e whose bytes
 * are in a guarded file mapping, and e's origin: what to sl_element_check after those bytes
 * were read into something else (a function's result, a batch slot), since the copy does
 * not remember where its bytes came from. Nothing is shared when e views no mapping. */
void sl_element_share_mapped(sl_element *dst, const sl_element *e);

/* Move: *dst takes everything (its origin included) from *src; *src is left empty. dst
 * must be empty. */
void sl_element_move(sl_element *dst, sl_element *src);

#ifdef __cplusplus
}
#endif
#endif
