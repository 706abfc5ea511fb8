"""Sluice from Python: iterate a pipeline of a Sluice config file as dicts of numpy arrays.

    import sluice
    p = sluice.Pipeline("examples/fashion.sl", "train", seed=1,
                        set={"pipeline.train.files": '"data/fashion/train-*.tfrecord"'})
    for batch in p:                       # one pass (an epoch); iterate again for the next
        x, y = batch["image"], batch["label"]   # numpy arrays, float32[128,28,28,1], int64[128]
    print(p.stats()["ops"][0])             # the stats JSON of the pass, as a dict

Pipelines can also be built in Python, tf.data-style: sluice.data (Dataset.list_files,
TFRecordDataset, interleave, map, batch, shuffle, prefetch, ...) with the element functions
of sluice.fn (parse_example, decode_raw, decode_jpeg, scale, ...) and Python functions in
map (run on Sluice's threads, the GIL held only for the call); a Dataset writes itself as
config text (to_config()) and iterates as a Pipeline built from it. A config written by
hand can call Python functions too: `map my_fn()` with Pipeline(..., functions={"my_fn": f}).

What it promises:
  * No copy. Each array is a read-only view of the bytes Sluice produced; its base is a
    sluice.Buffer holding a reference to Sluice's buffer, so the array stays valid after
    the pipeline and its iterator are gone. Byte-string components (dtype "bytes") are the
    exception: they come as numpy object arrays of Python bytes (copied). The arrays stay
    read-only: `a.flags.writeable = True` raises numpy's ValueError (the bytes may be a
    read-only mapping of a file, where a write would kill the process); a.copy() is yours.
  * Views of a mapped file. Unbatched components that decode_raw (or parse_example) leave
    as they were in the record are views of the TFRecord file's mapping. When next()
    hands one out, its bytes are checked: if the file shrank since its record was read
    (a shard truncated or rewritten in place), next() raises sluice.Error SL_EIO naming the
    file and the record's byte offset, never zeros as data (batches are checked the same
    way when they are assembled). After that the file can still shrink: the array's bytes
    then read as zeros, and `a.damaged` (sluice.Array; also a.base.damaged, the Buffer's)
    turns True; ask it after reading when the file may be rewritten. Arrays Sluice made
    in its own memory (batches, decoded or scaled images) are never damaged.
  * copy=True (Pipeline(..., copy=True), or p.iter(copy=True)) copies every component that
    views a mapped file into memory of its own when it is handed out, and checks the
    file's bytes after copying: such arrays never change and are never damaged. It costs a
    memcpy of those bytes and an allocation per component per element (batches, already
    in Sluice's memory, are not copied again).
  * DLPack. The arrays are sluice.Array, a numpy.ndarray subclass with its own __dlpack__:
    a consumer asking for DLPack 1.0 (__dlpack__(max_version=(1, 0))) shares the memory in
    a versioned capsule flagged read-only (DLPACK_FLAG_BITMASK_READ_ONLY). An older
    consumer (one calling __dlpack__() without max_version, as torch 1.13 and numpy 1.24
    do: an unversioned capsule cannot say read-only) shares the memory of arrays Sluice made
    itself, so torch.from_dlpack(batch) costs no copy: do not write into that tensor in
    place (an in-memory `cache` replays the same buffers; clone() first); but it gets a
    copy of a view of a mapped file, since a write through a shared tensor there would
    kill the process (copy=False refuses instead, with BufferError).
  * bfloat16 components come as uint16 arrays holding the bits (numpy has no bfloat16);
    sluice.torch turns them into torch.bfloat16 tensors.
  * Errors raise sluice.Error (a RuntimeError) with Sluice's message: FILE:LINE:COL for a
    config mistake, file and byte offset for bad data, and the hint. e.status is the
    status name ("SL_EINVAL"), e.message and e.hint the two parts.
  * The GIL is released while the pipeline is waited on, so other Python threads run.
  * Epochs and seeds: iterating a Pipeline starts a new pass each time. Pass k is seeded
    with `seed` for k = 0 (exactly what `sluice-stats CONFIG --peek N --seed SEED` shows)
    and with a mix of seed and k afterwards, so shuffles change from one pass to the next;
    p.iter(epoch=k) or p.iter(seed=s) chooses explicitly.
  * Resuming. A pass is a function of the pipeline, its seed and the position, so it can
    stop and go on later, bit for bit: it.state() is 48 bytes (the seed, the position and
    a fingerprint of the pipeline, with a checksum) and p.iter(state=those) continues
    where it stood, in this process or another one built from the same config.
    p.iter(start=n) starts a pass at element n. Both are constant time when every op can
    seek (range, files, `shuffle global`, map, batch, prefetch, take, skip, shard,
    repeat, zip, sample, choose, cache, interleave, and a buffer `shuffle`, which reads
    back about its buffer: it.refilled says how many); below any other (filter,
    ignore_errors, compressed files) the elements before the position are produced and
    dropped, and it.replayed says how many.

        it = p.iter()
        for _ in range(100):
            next(it)
        saved = it.state()                    # bytes: store them with the checkpoint
        ...
        it = p.iter(state=saved)              # element 100 of the same pass onwards
"""
import json as _json
import operator as _operator
import weakref as _weakref

import numpy as _np

from ._sluice import Buffer, Error, _Iterator, _Pipeline, _dlpack  # noqa: F401

__all__ = ["Pipeline", "Iterator", "Array", "Buffer", "Error", "mix_seed", "data", "fn"]
__version__ = "0.1.0"

_M64 = 0xFFFFFFFFFFFFFFFF


def mix_seed(seed, epoch):
    """The iterator seed of pass `epoch` (> 0) from the pipeline seed: splitmix64, the
    same mix sluice-train uses for its epochs."""
    z = (seed * 0x9E3779B97F4A7C15 + epoch + 0x632BE59BD9B4E019) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


class Array(_np.ndarray):
    """A numpy array over Sluice's memory (read-only), exportable with DLPack.

    damaged: True once the mapped file this array views shrank and took its bytes (they
    read as zeros then); asked anew at each read; False for memory Sluice made itself.
    __dlpack__: see the module's notes (DLPack 1.0 shares read-only; an older consumer
    shares Sluice's own memory and gets a copy of a view of a mapped file)."""

    def _buffer(self):
        b = self
        while isinstance(b, _np.ndarray):
            b = b.base
        return b if isinstance(b, Buffer) else None

    @property
    def damaged(self):
        b = self._buffer()
        return b is not None and b.damaged

    def __dlpack__(self, stream=None, *, max_version=None, dl_device=None, copy=None):
        if stream is not None and stream != -1:
            raise BufferError("sluice arrays are CPU memory: stream must be None")
        if dl_device is not None and tuple(dl_device) != (1, 0):
            raise BufferError(f"sluice arrays are CPU memory (kDLCPU, 0), not {tuple(dl_device)}")
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        b = self._buffer()
        mapped = b is not None and b.mapped
        if copy is True or (copy is None and mapped and not versioned):
            return _dlpack(_np.array(self, copy=True), versioned, True)
        if mapped and not versioned:
            raise BufferError("this array views a read-only file mapping, and a DLPack consumer before 1.0 "
                              "cannot be told it is read-only: ask with max_version=(1, 0), or allow a copy")
        return _dlpack(self, versioned, False)

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU, device 0


_DTYPES = {
    "uint8": _np.uint8, "int8": _np.int8, "uint16": _np.uint16, "int16": _np.int16,
    "int32": _np.int32, "uint32": _np.uint32, "int64": _np.int64, "float16": _np.float16,
    "bfloat16": _np.uint16, "float32": _np.float32, "float64": _np.float64, "bool": _np.bool_,
}
_DTYPES = {k: _np.dtype(v) for k, v in _DTYPES.items()}


def _to_numpy(buf):
    dt = _DTYPES.get(buf.dtype)
    if dt is None:  # byte strings: copied out
        items = buf.bytes_list()
        a = _np.empty(len(items), dtype=object)
        a[:] = items
        return a.reshape(buf.shape)
    a = _np.ndarray.__new__(Array, buf.shape, dt, buffer=buf)
    a.flags.writeable = False
    return a


def _error(status, message, hint=None):
    e = Error(message + ("\n---> HINT: " + hint if hint else ""))
    e.status, e.code, e.message, e.hint = status, None, message, hint
    return e


_OUT_DTYPES = {"uint8", "int8", "uint16", "int16", "int32", "uint32", "int64", "float16", "float32", "float64",
               "bool"}


def _base_buffer(a):
    b = a
    while isinstance(b, _np.ndarray):
        b = b.base
    return b if isinstance(b, Buffer) else None


def _component(k, v, elem, bufs):
    """One returned component as the tuple pyfn.c reads (see python/src/module_priv.h)."""
    if not isinstance(k, str):
        raise TypeError(f"the map function returned a dict with key {k!r}: component names are str")
    if elem is not None and k in elem and v is elem[k]:
        return (k, 0, bufs[k], None, None)  # the input's own tensor, shared
    if isinstance(v, (bytes, str)):
        v = _np.array([v], dtype=object).reshape(())
    a = v if isinstance(v, _np.ndarray) else _np.asarray(v)
    if a.dtype == object or a.dtype.kind in "SU":
        items = []
        for x in a.reshape(-1).tolist():
            if isinstance(x, str):
                x = x.encode()
            elif not isinstance(x, (bytes, bytearray, memoryview)):
                raise TypeError(f"component '{k}': a byte-string array holds {type(x).__name__}, not bytes")
            items.append(bytes(x))
        return (k, 2, items, "bytes", tuple(a.shape))
    base = _base_buffer(a)
    name = a.dtype.name
    if base is not None and base.dtype == "bfloat16" and name == "uint16":
        name = "bfloat16"
    elif name not in _OUT_DTYPES:
        raise TypeError(f"component '{k}': dtype {name} has no Sluice tensor (Sluice has "
                        f"{', '.join(sorted(_OUT_DTYPES))} and bytes)")
    if not a.flags.c_contiguous:
        a = a.copy(order="C")
        base = None
    return (k, 1, a, name, base)


class _Trampoline:
    """What pyfn.c calls for a Python map function: the element's Buffers as numpy arrays in,
    the returned dict as tuples out. kind "map": fn(element) -> dict; "keep": a filter's
    predicate, adding the bool component _sluice_keep; "drop": removes _sluice_keep."""

    __slots__ = ("fn", "kind")

    def __init__(self, fn, kind="map"):
        self.fn, self.kind = fn, kind

    def __call__(self, bufs):
        if self.kind == "drop":
            return [(k, 0, b, None, None) for k, b in bufs.items() if k != "_sluice_keep"]
        elem = {k: _to_numpy(b) for k, b in bufs.items()}
        if self.kind == "keep":
            keep = self.fn(elem)
            r = [(k, 0, b, None, None) for k, b in bufs.items()]
            return r + [("_sluice_keep", 1, _np.array(bool(_np.asarray(keep)), dtype=_np.bool_), "bool", None)]
        out = self.fn(elem)
        if not isinstance(out, dict):
            raise TypeError(f"the map function returned {type(out).__name__}: it must return a dict "
                            "{component name: array}")
        return [_component(k, v, elem, bufs) for k, v in out.items()]


class Iterator:
    """One pass over a Pipeline: yields {component name: numpy array} dicts in the
    element's order. close() stops it early (it is closed at the end, and when freed)."""

    __slots__ = ("_it", "__weakref__")

    def __init__(self, it):
        self._it = it

    def __iter__(self):
        return self

    def __next__(self):
        d = next(self._it)
        for k, b in d.items():
            d[k] = _to_numpy(b)
        return d

    def buffers(self):
        """The raw form: yields {name: sluice.Buffer} dicts (no numpy involved)."""
        return self._it

    def close(self):
        self._it.close()

    @property
    def closed(self):
        return self._it.closed

    @property
    def errors_ignored(self):
        """Elements an `ignore_errors` statement dropped in this pass so far."""
        return self._it.errors_ignored

    def stats(self):
        """The pipeline's stats (sluice/stats.h's JSON) as a dict: a live snapshot while
        the pass runs, the final one once it has ended."""
        return _json.loads(self._it.stats_json())

    def state(self):
        """Where the pass stands, as 48 bytes (b"SLITSTAT", then the version, the seed, the
        position, a fingerprint of the pipeline's ops and a CRC32C; sluice/pipeline.h's
        sl_iter_save): Pipeline.iter(state=...) continues from there with the same
        elements. The same bytes for the same pipeline, seed and position, on every
        replica and in every process. Also after the end or close(): the position then
        stays where the pass stopped. RuntimeError while another thread is in next()."""
        return self._it.save()

    @property
    def position(self):
        """The position in the pass of the element next() returns next: the start (0, or
        where iter(start=) or iter(state=) put it) plus the elements returned so far."""
        return self._it.position

    @property
    def replayed(self):
        """Elements produced and dropped to reach the start: 0 when every op could seek,
        else the start (an op such as a filter must see what came before)."""
        return self._it.replayed

    @property
    def refilled(self):
        """Elements a buffer shuffle read again to rebuild its buffer at the start (about
        the buffer: its draws are replayed on positions, not on data); 0 from the start."""
        return self._it.refilled

    @property
    def seed(self):
        """The pass's seed (for a pass made from a state: the state's)."""
        return self._it.seed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Pipeline(_Pipeline):
    """A Sluice pipeline built from a config.

    Pipeline(config, name=None, *, text=None, set=None, shard=(0, 1), seed=0,
             base_dir=None, cpu_budget=0, ram_budget=0, copy=False)

    config    path of a .sl file; or None with text="..." holding the config itself.
    name      the `pipeline NAME { }` block; default: "train" if there is one, else the
              only pipeline in the file.
    set       overrides, as sluice-stats --set: a dict {PATH: VALUE} or a list of
              "PATH=VALUE" strings. A str VALUE is config-language text, used as written
              (so a file pattern needs its quotes: '"data/train-*.tfrecord"'); numbers
              and bools are written for you.
    shard     (index, count): this replica's part, the default of the `shard` statement;
              with count > 1 the block must have one (else sluice.Error: every replica
              would read everything).
    seed      the pipeline seed (see the module's notes on epochs).
    base_dir  where relative paths start; default: the config file's folder (for text=,
              the current directory).
    cpu_budget, ram_budget   autotune's limits (0: all cores, a quarter of RAM).
    functions a dict {NAME: callable}: the config's `map NAME()` calls callable(element), a
              dict of numpy arrays, on Sluice's map threads (holding the GIL only for the
              call); it returns the new element, a dict {name: array-like} (numbers, or
              bytes/str for byte strings). Arrays it passes through unchanged are not
              copied. An exception it raises comes out of next() as sluice.Error (with the
              element's file and record offset) whose __cause__ is that exception.
    copy      the passes' default for iter(copy=...): copy views of mapped files at
              hand-out (see the module's notes).
    """

    def __init__(self, config=None, name=None, *, text=None, set=None, shard=(0, 1), seed=0,
                 base_dir=None, cpu_budget=0, ram_budget=0, copy=False, functions=None):
        index, count = shard
        fns = None
        if functions is not None:
            if not isinstance(functions, dict):
                raise TypeError(f"functions must be a dict {{NAME: callable}}, not {type(functions).__name__}")
            fns = {}
            for k, f in functions.items():
                if not callable(f):
                    raise TypeError(f"functions[{k!r}] is {type(f).__name__}, not callable")
                fns[str(k)] = f if isinstance(f, _Trampoline) else _Trampoline(f)
        sets = []
        if isinstance(set, dict):
            for k, v in set.items():
                if isinstance(v, bool):
                    v = "true" if v else "false"
                sets.append(f"{k}={v}")
        elif set is not None:
            sets = [str(s) for s in set]
        super().__init__(None if config is None else str(config), text, name, sets,
                         int(index), int(count), int(seed) & _M64, base_dir,
                         int(cpu_budget), int(ram_budget), fns)
        self.seed = int(seed) & _M64
        self.copy = bool(copy)
        self.epoch = 0  # the pass the next iteration starts
        self._cur = None

    def iter(self, epoch=None, seed=None, copy=None, *, start=0, state=None):
        """Start a pass. epoch=None: the next one (counting from 0). seed=None: derived
        from the pipeline seed and the epoch (pass 0 uses seed itself). copy=None: the
        Pipeline's copy; True: views of mapped files are copied at hand-out.

        start: the position of the pass's first element (element `start` of the same
        pass from the beginning; past the end: an empty pass). ValueError when < 0,
        TypeError when not an int.
        state: bytes from Iterator.state() (bytearray and memoryview are taken as bytes;
        anything else is TypeError): the pass continues where that one stood, with its
        seed and position. The state's seed is the pass's: a seed= (or an epoch= whose
        seed, as above) that differs from it raises ValueError, before anything is built;
        with neither, epoch only counts the pass (the next iteration is epoch + 1).
        Damaged bytes raise sluice.Error SL_ECORRUPT (naming the byte), a state of
        another pipeline sluice.Error SL_EINVAL; start= with state= is ValueError."""
        check = epoch is not None or seed is not None
        if epoch is None:
            epoch = self.epoch
        if seed is None:
            seed = self.seed if epoch == 0 else mix_seed(self.seed, epoch)
        start = _operator.index(start)
        if isinstance(state, (bytearray, memoryview)):
            state = bytes(state)
        elif state is not None and not isinstance(state, bytes):
            raise TypeError(f"state must be bytes (what Iterator.state() returned), not {type(state).__name__}")
        it = Iterator(self._iter(int(seed) & _M64, self.copy if copy is None else bool(copy), start, state, check))
        self.epoch = epoch + 1
        self._cur = _weakref.ref(it)
        return it

    def __iter__(self):
        return self.iter()

    @property
    def cardinality(self):
        """Elements per pass; None when unknown without reading; -1 when endless."""
        return self._cardinality

    def stats(self):
        """Stats (as a dict) of the latest pass: live while it runs, final once it ended."""
        it = self._cur() if self._cur is not None else None
        if it is not None and not it.closed:
            return it.stats()
        js = self._last_stats_json
        if js is None:
            raise _error("SL_ESTATE", f"pipeline '{self.name}': stats(): no pass has run yet",
                         "iterate the pipeline first")
        return _json.loads(js)

    def __repr__(self):
        return f"<sluice.Pipeline {self.name!r} seed={self.seed}>"


from . import fn, data  # noqa: E402  (they use the names above)
