"""Sluice from Python: iterate a pipeline of a Sluice config file as dicts of numpy arrays.

    import sluice
    p = sluice.Pipeline("examples/fashion.sl", "train", seed=1,
                        set={"pipeline.train.files": '"data/fashion/train-*.tfrecord"'})
    for batch in p:                       # one pass (an epoch); iterate again for the next
        x, y = batch["image"], batch["label"]   # numpy arrays, float32[128,28,28,1], int64[128]
    print(p.stats()["ops"][0])             # the stats JSON of the pass, as a dict

What it promises:
  * No copy. Each array is a read-only view of the bytes Sluice produced; its base is a
    sluice.Buffer holding a reference to Sluice's buffer, so the array stays valid after
    the pipeline and its iterator are gone. Byte-string components (dtype "bytes") are the
    exception: they come as numpy object arrays of Python bytes (copied).
  * DLPack. The arrays are sluice.Array, a numpy.ndarray subclass whose __dlpack__ exports
    the same memory even though the array is read-only (numpy's refuses read-only arrays),
    so torch.from_dlpack(a) shares it. Do not write into such a tensor in place: the bytes
    may be a read-only mapping of a TFRecord file (unbatched raw images are views of the
    record), and an in-memory `cache` replays the same buffers in the next pass. Clone
    first (tensor.clone()) if you must modify it.
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
"""
import json as _json
import weakref as _weakref

import numpy as _np

from ._sluice import Buffer, Error, _Iterator, _Pipeline  # noqa: F401

__all__ = ["Pipeline", "Iterator", "Array", "Buffer", "Error", "mix_seed"]
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

    numpy's own __dlpack__ refuses read-only arrays (DLPack cannot say "read-only"); this
    one exports the same memory through a writable view of it, no copy. The consumer's
    tensor must not be written in place (see the module's notes)."""

    def __dlpack__(self, stream=None):
        v = self.view(_np.ndarray)
        v.flags.writeable = True  # allowed: the base (a sluice.Buffer) exports a writable buffer
        return v.__dlpack__(stream=stream) if stream is not None else v.__dlpack__()

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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Pipeline(_Pipeline):
    """A Sluice pipeline built from a config.

    Pipeline(config, name=None, *, text=None, set=None, shard=(0, 1), seed=0,
             base_dir=None, cpu_budget=0, ram_budget=0)

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
    """

    def __init__(self, config=None, name=None, *, text=None, set=None, shard=(0, 1), seed=0,
                 base_dir=None, cpu_budget=0, ram_budget=0):
        index, count = shard
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
                         int(cpu_budget), int(ram_budget))
        self.seed = int(seed) & _M64
        self.epoch = 0  # the pass the next iteration starts
        self._cur = None

    def iter(self, epoch=None, seed=None):
        """Start a pass. epoch=None: the next one (counting from 0). seed=None: derived
        from the pipeline seed and the epoch (pass 0 uses seed itself)."""
        if epoch is None:
            epoch = self.epoch
        self.epoch = epoch + 1
        if seed is None:
            seed = self.seed if epoch == 0 else mix_seed(self.seed, epoch)
        it = Iterator(self._iter(int(seed) & _M64))
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
