"""sluice.data: build Sluice pipelines in Python with tf.data's names and semantics.

    import sluice
    from sluice import data as sd, fn
    ds = (sd.Dataset.list_files("data/fashion/train-*.tfrecord", shuffle=False)
          .interleave(sd.TFRecordDataset, cycle_length=4, block_length=16, num_parallel_calls=sd.AUTOTUNE)
          .shuffle(10000, seed=1)
          .map(fn.parse_example({"image": "bytes", "label": "int64"})
               | fn.decode_raw("image", "uint8", (28, 28, 1)) | fn.scale("image", 1 / 255),
               num_parallel_calls=sd.AUTOTUNE)
          .batch(128, drop_remainder=True)
          .prefetch(sd.AUTOTUNE))
    for batch in ds:                 # dicts of numpy arrays, as sluice.Pipeline gives
        ...
    print(ds.to_config())            # the same pipeline in the config language

How it works: a Dataset is a list of config-language statements (include/sluice/from_config.h).
to_config() writes them as `pipeline NAME { ... }` (plus one block per dataset that zip or
concatenate read); iterating builds a sluice.Pipeline from that text, so the C graph is the
one the config language builds, statement for statement. Each method returns a new Dataset;
Python types are checked at the call (TypeError, ValueError as tf.data raises them); what the
config language checks (a file pattern that matches nothing, a bad dtype name) is reported
when the pipeline is first built (iteration, len(), cardinality()), as sluice.Error naming
the line of to_config()'s text.

Where it differs from tf.data:
  * Elements are dicts {component: numpy array}: records are {"record": bytes}, range gives
    {"value": int64}; parse_example names components after the features.
  * Element functions are sluice.fn's (parse_example, decode_raw, decode_jpeg, scale, ...),
    chained with `|` into one map. A plain Python function is also accepted by map (and
    filter): it runs on Sluice's map threads with the GIL held only for the call, takes
    the element as a dict of (read-only) numpy arrays and returns a dict; results come in
    order; an exception it raises reaches the caller of next() as sluice.Error with the
    element's file and record offset, raised from the original exception (its __cause__).
  * interleave reads files: its function must return TFRecordDataset(filename[, compression]).
    shard on list_files shards by file, on records by record (tf.data's every-n-th element
    in both cases, file order sorted).
  * map's num_parallel_calls=None is sequential (parallel=1) and interleave's is 0 (read
    in the caller's thread), as in tf.data; AUTOTUNE lets Sluice's autotune choose.
  * TFRecordDataset(compression_type=None) detects the compression (Sluice's default);
    "" reads the files as uncompressed, "GZIP" and "ZLIB" as such.
  * Relative paths are relative to the current directory when the source was made.
  * Options: autotune.enabled / cpu_budget / ram_budget, deterministic (the default of the
    ops' deterministic=None) and seed (Sluice's pipeline seed, default 0; random functions
    and shuffles without seed= derive theirs from it). With autotune.enabled=False every
    AUTOTUNE becomes a fixed value: the CPU budget (or the CPU count) for parallelism and
    cycle length, 2 for a prefetch buffer.
"""
import glob as _glob
import itertools as _itertools
import operator as _operator
import os as _os
import re as _re

from . import Pipeline, _Trampoline
from . import fn as _fn

__all__ = ["AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "Dataset", "TFRecordDataset", "Options",
           "AutotuneOptions"]

AUTOTUNE = -1
INFINITE_CARDINALITY = -1
UNKNOWN_CARDINALITY = -2

_ids = _itertools.count(1)
_NAME = _re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class _Auto:
    """AUTOTUNE in a statement, written when the options are known."""
    __slots__ = ("what",)

    def __init__(self, what):
        self.what = what  # "parallel" or "buffer"


_PAR, _BUF = _Auto("parallel"), _Auto("buffer")
_DET = object()  # deterministic=None: the options' deterministic, if set


class AutotuneOptions:
    """tf.data.experimental.AutotuneOptions: enabled (default True), cpu_budget (cores; 0 or
    None: all), ram_budget (bytes; 0 or None: a quarter of RAM)."""

    __slots__ = ("enabled", "cpu_budget", "ram_budget")

    def __init__(self):
        self.enabled = self.cpu_budget = self.ram_budget = None


class Options:
    """tf.data.Options: autotune (AutotuneOptions), deterministic (bool or None), and
    Sluice's seed (the pipeline seed, None: 0). merge(other): other's settings win."""

    def __init__(self):
        self.autotune = AutotuneOptions()
        self.deterministic = None
        self.seed = None

    @property
    def experimental_deterministic(self):
        return self.deterministic

    @experimental_deterministic.setter
    def experimental_deterministic(self, v):
        self.deterministic = v

    def merge(self, other):
        if not isinstance(other, Options):
            raise TypeError(f"merge() takes sluice.data.Options, not {type(other).__name__}")
        o = Options()
        for src in (self, other):
            for k in AutotuneOptions.__slots__:
                if getattr(src.autotune, k) is not None:
                    setattr(o.autotune, k, getattr(src.autotune, k))
            for k in ("deterministic", "seed"):
                if getattr(src, k) is not None:
                    setattr(o, k, getattr(src, k))
        return o

    def _check(self):
        a = self.autotune
        for k in ("cpu_budget", "ram_budget"):
            v = getattr(a, k)
            if v is not None:
                v = _index(v, f"autotune.{k}")
                if v < 0:
                    raise ValueError(f"Options.autotune.{k} must be >= 0, not {v}")
        if a.enabled is not None and not isinstance(a.enabled, bool):
            raise TypeError(f"Options.autotune.enabled must be a bool, not {type(a.enabled).__name__}")
        if self.deterministic is not None and not isinstance(self.deterministic, bool):
            raise TypeError(f"Options.deterministic must be a bool, not {type(self.deterministic).__name__}")
        if self.seed is not None:
            _index(self.seed, "Options.seed")


def _index(v, what):
    if isinstance(v, bool):
        raise TypeError(f"{what} must be an int, not bool")
    try:
        return _operator.index(v)
    except TypeError:
        raise TypeError(f"{what} must be an int, not {type(v).__name__}") from None


def _count(v, what, lo):
    v = _index(v, what)
    if v < lo:
        raise ValueError(f"{what} must be >= {lo}, not {v}")
    return v


def _parallel(v, what, lo=1, none=1):
    """num_parallel_calls: None (tf.data: sequential), AUTOTUNE, or N >= lo."""
    if v is None:
        return str(none)
    v = _index(v, what)
    if v == AUTOTUNE:
        return _PAR
    if v < lo:
        raise ValueError(f"{what} must be AUTOTUNE (-1) or >= {lo}, not {v}")
    return str(v)


def _bool(v, what):
    if not isinstance(v, bool):
        raise TypeError(f"{what} must be a bool, not {type(v).__name__}")
    return "true" if v else "false"


def _det(v):
    return _DET if v is None else "deterministic=" + _bool(v, "deterministic")


def _patterns(p, what):
    if isinstance(p, (str, _os.PathLike)):
        p = [p]
    if not isinstance(p, (list, tuple)) or not p:
        raise TypeError(f"{what} must be a file name (str) or a non-empty list of them, not {type(p).__name__}")
    out = []
    for x in p:
        if not isinstance(x, (str, _os.PathLike)):
            raise TypeError(f"{what}: {x!r} is not a file name (str)")
        x = _os.fspath(x)
        if not x or "\n" in x:
            raise ValueError(f"{what}: {x!r} is not a file name")
        out.append(x)
    return out


_COMPRESSION = {None: None, "": "none", "NONE": "none", "GZIP": "gzip", "ZLIB": "zlib", "AUTO": "auto"}


def _compression(c):
    if c is not None and not isinstance(c, str):
        raise TypeError(f"compression_type must be a str, not {type(c).__name__}")
    key = c.upper() if c else c
    if key not in _COMPRESSION:
        raise ValueError(f"compression_type {c!r}: it is one of '', 'GZIP', 'ZLIB' (or None: detect)")
    return _COMPRESSION[key]


class _FileName:
    """What interleave hands its function in place of a file name."""


class _Reader:
    """TFRecordDataset(one file name of interleave): how each file is read."""
    __slots__ = ("compression",)

    def __init__(self, compression):
        self.compression = compression


def _files_stmt(patterns, shuffle, seed, compression):
    parts = ["files"] + [_fn._quote(p) for p in patterns]
    if shuffle is not None:
        parts.append("shuffle=" + _bool(shuffle, "shuffle"))
    if seed is not None:
        parts.append(f"seed={_count(seed, 'seed', 0)}")
    if compression:
        parts.append("compression=" + compression)
    return tuple(parts)


class _ZipMethod:
    """Dataset.zip(a, b, ...) and a.zip(b, ...) (tf.data has the first)."""

    def __get__(self, obj, cls):
        if obj is None:
            return lambda *datasets, name=None: Dataset._zip(datasets)
        return lambda *datasets, name=None: Dataset._zip((obj,) + datasets)


class Dataset:
    """A pipeline being built (see the module's notes). Make one with Dataset.list_files,
    Dataset.range, TFRecordDataset or Dataset.zip; every method returns a new Dataset."""

    __slots__ = ("_stmts", "_subs", "_fns", "_kind", "_fargs", "_opts", "_base", "_pipe")

    def __init__(self, stmts, *, kind="data", subs=(), fns=None, fargs=None, opts=None, base=None):
        self._stmts = tuple(stmts)
        self._subs = tuple(subs)
        self._fns = dict(fns or {})
        self._kind = kind
        self._fargs = fargs
        self._opts = opts if opts is not None else Options()
        self._base = base if base is not None else _os.getcwd()
        self._pipe = None

    def _then(self, *stmt, fns=None, kind="data"):
        if self._kind == "files":
            raise TypeError("list_files gives file names, which Sluice reads through interleave("
                            "sluice.data.TFRecordDataset, ...) or TFRecordDataset(files): call one of them "
                            "first (shard and interleave are what a file list takes)")
        d = Dataset(self._stmts + (stmt,), kind=kind, subs=self._subs, fns={**self._fns, **(fns or {})},
                    opts=self._opts, base=self._base)
        return d

    # ---- sources ----

    @staticmethod
    def list_files(file_pattern, shuffle=None, seed=None, name=None):
        """The files matching file_pattern (a glob, or a list of them), sorted; shuffled each
        epoch unless shuffle=False (tf.data's default is True), seeded by seed (None: from the
        pipeline seed). Read them with interleave(TFRecordDataset, ...)."""
        pats = _patterns(file_pattern, "list_files: file_pattern")
        shuffle = True if shuffle is None else shuffle
        _bool(shuffle, "shuffle")
        if seed is not None:
            _count(seed, "seed", 0)
        fargs = (pats, shuffle, seed)
        return Dataset([_files_stmt(pats, shuffle, seed, None)], kind="files", fargs=fargs)

    @staticmethod
    def range(*args, output_type=None, name=None):
        """range(stop), range(start, stop[, step]): {"value": int64} elements."""
        if not 1 <= len(args) <= 3:
            raise TypeError(f"range() takes 1 to 3 arguments ({len(args)} given)")
        vals = [_index(a, "range()'s arguments") for a in args]
        if len(vals) == 1:
            vals = [0] + vals
        if len(vals) == 3 and vals[2] == 0:
            raise ValueError("range(): step must not be zero")
        return Dataset([("range",) + tuple(str(v) for v in vals)])

    @staticmethod
    def load(path, name=None):
        """tf.data's Dataset.load: the elements sl_ds_save wrote to the folder path."""
        if not isinstance(path, str) or not path:
            raise TypeError(f"load(): path must be a non-empty str, not {path!r}")
        return Dataset([("load", _fn._quote(path))])

    zip = _ZipMethod()

    @staticmethod
    def _zip(datasets):
        if len(datasets) == 1 and isinstance(datasets[0], (tuple, list, dict)):
            datasets = datasets[0]
        named = isinstance(datasets, dict)
        items = list(datasets.items()) if named else [(None, d) for d in datasets]
        if not items:
            raise ValueError("zip(): no datasets")
        subs, fns, opts = [], {}, Options()
        for k, d in items:
            if not isinstance(d, Dataset):
                raise TypeError(f"zip(): {type(d).__name__} is not a sluice.data.Dataset")
            d._check_data("zip")
            if named and (not isinstance(k, str) or not _NAME.match(k)):
                raise ValueError(f"zip(): key {k!r}: keys name the components' prefixes: letters, digits and _")
            subs.append((k if named else f"zip{next(_ids)}", d))
            fns.update(d._fns)
            opts = opts.merge(d._opts)
        stmt = ("zip",) + tuple(n for n, _ in subs) + (("prefix=true",) if named else ())
        return Dataset([stmt], subs=subs, fns=fns, opts=opts, base=items[0][1]._base)

    def _check_data(self, what):
        if self._kind == "files":
            raise TypeError(f"{what}(): a list_files dataset holds file names: read them first "
                            "(interleave(sluice.data.TFRecordDataset, ...))")

    # ---- files ----

    def interleave(self, map_func, cycle_length=None, block_length=None, num_parallel_calls=None,
                   deterministic=None, name=None):
        """Read the files of a list_files dataset, cycle_length at a time (None: Sluice picks),
        block_length records from each in turn (None: 1), num_parallel_calls files read ahead
        by threads (None: in the caller's thread; AUTOTUNE). map_func: TFRecordDataset, or a
        function of a file name returning TFRecordDataset(filename, compression_type=...)."""
        if self._kind != "files":
            raise TypeError("interleave() reads files: call it on Dataset.list_files(...) (Sluice's interleave "
                            "opens files; a function making other datasets is not supported)")
        if not callable(map_func):
            raise TypeError(f"interleave(): map_func must be callable, not {type(map_func).__name__}")
        reader = map_func(_FileName())
        if not isinstance(reader, _Reader):
            raise TypeError("interleave(): map_func must return sluice.data.TFRecordDataset(filename) for the file "
                            f"name it is given, not {type(reader).__name__}")
        parts = ["interleave"]
        if cycle_length is None or _index(cycle_length, "cycle_length") == AUTOTUNE:
            parts.append("cycle=")
            parts.append(_PAR)
        else:
            parts.append(f"cycle={_count(cycle_length, 'cycle_length', 1)}")
        if block_length is not None:
            parts.append(f"block={_count(block_length, 'block_length', 1)}")
        parts += ["parallel=", _parallel(num_parallel_calls, "num_parallel_calls", 0, 0), _det(deterministic)]
        pats, shuffle, seed = self._fargs
        stmts = list(self._stmts)
        stmts[0] = _files_stmt(pats, shuffle, seed, reader.compression)
        return Dataset(stmts + [tuple(parts)], fns=self._fns, opts=self._opts, base=self._base)

    # ---- element ops ----

    def _register(self, f, kind):
        base = _re.sub(r"\W+", "_", getattr(f, "__name__", type(f).__name__)).strip("_")[:40] or "fn"
        return f"py_{base}_{next(_ids)}", _Trampoline(f, kind)

    def map(self, map_func, num_parallel_calls=None, deterministic=None, name=None):
        """map_func: sluice.fn functions (a chain with |, or a list of them), or a Python
        function of the element (a dict of numpy arrays) returning a dict. num_parallel_calls:
        None (sequential), AUTOTUNE or N; deterministic: None (the options', else True)."""
        self._check_data("map")
        par = _parallel(num_parallel_calls, "num_parallel_calls")
        if isinstance(map_func, (list, tuple)):
            map_func = _fn.chain(*map_func)
        if isinstance(map_func, (_fn.Fn, _fn.Chain)):
            return self._then("map", map_func.to_config(), "parallel=", par, _det(deterministic))
        if not callable(map_func):
            raise TypeError(f"map(): map_func must be a sluice.fn function or a Python callable, not "
                            f"{type(map_func).__name__}")
        n, t = self._register(map_func, "map")
        return self._then("map", f"{n}()", "parallel=", par, _det(deterministic), fns={n: t})

    def filter(self, predicate, name=None):
        """Keep the elements where predicate holds: a comparison "COMPONENT OP NUMBER"
        ("label == 3", "label < 5"), or a Python function of the element returning a bool."""
        self._check_data("filter")
        if isinstance(predicate, str):
            if "\n" in predicate or not predicate.strip():
                raise ValueError(f"filter(): {predicate!r} is not a comparison like 'label == 3'")
            return self._then("filter", predicate.strip())
        if not callable(predicate):
            raise TypeError(f"filter(): predicate must be a str like 'label == 3' or a Python callable, not "
                            f"{type(predicate).__name__}")
        k, kt = self._register(predicate, "keep")
        d, dt = self._register(predicate, "drop")
        ds = self._then("map", f"{k}()", "parallel=1", fns={k: kt})._then("filter", "_sluice_keep == 1")
        return ds._then("map", f"{d}()", "parallel=1", fns={d: dt})

    def batch(self, batch_size, drop_remainder=False, num_parallel_calls=None, deterministic=None, name=None):
        """Stack batch_size elements (the last one smaller unless drop_remainder). A map just
        before is fused with it; num_parallel_calls and deterministic are accepted for tf.data's
        signature and have no effect (the fused map's own settings apply)."""
        n = _count(batch_size, "batch_size", 1)
        if num_parallel_calls is not None:
            _parallel(num_parallel_calls, "num_parallel_calls")
        return self._then("batch", str(n), "drop_remainder" if _bool(drop_remainder, "drop_remainder") == "true" else "")

    def padded_batch(self, batch_size, padded_shapes=None, padding_values=None, drop_remainder=False, name=None):
        """batch, each component padded to the batch's longest (padded_shapes must be None)
        with padding_values (a number, default 0)."""
        n = _count(batch_size, "batch_size", 1)
        if padded_shapes is not None:
            raise ValueError("padded_batch(): Sluice pads to each batch's longest: padded_shapes must be None")
        parts = ["batch", str(n), "padded"]
        if padding_values is not None:
            parts.append("pad=" + _fn._number("padded_batch", "padding_values", padding_values))
        if _bool(drop_remainder, "drop_remainder") == "true":
            parts.append("drop_remainder")
        return self._then(*parts)

    def unbatch(self, name=None):
        return self._then("unbatch")

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=None, name=None):
        """A shuffle buffer of buffer_size elements; seed None: derived from the pipeline seed;
        reshuffle_each_iteration (default True): another order each epoch."""
        n = _count(buffer_size, "buffer_size", 1)
        parts = ["shuffle", str(n)]
        if seed is not None:
            parts.append(f"seed={_count(seed, 'seed', 0)}")
        if reshuffle_each_iteration is not None:
            parts.append("reshuffle=" + _bool(reshuffle_each_iteration, "reshuffle_each_iteration"))
        return self._then(*parts)

    def prefetch(self, buffer_size, name=None):
        """Produce up to buffer_size elements ahead (AUTOTUNE: autotuned; 0: no prefetch)."""
        n = _index(buffer_size, "buffer_size")
        if n == AUTOTUNE:
            return self._then("prefetch", _BUF)
        if n < 0:
            raise ValueError(f"buffer_size must be AUTOTUNE (-1) or >= 0, not {n}")
        return self._then("prefetch", str(n)) if n else self._then_nothing()

    def _then_nothing(self):
        self._check_data("this op")
        return Dataset(self._stmts, kind=self._kind, subs=self._subs, fns=self._fns, fargs=self._fargs,
                       opts=self._opts, base=self._base)

    def cache(self, filename="", name=None):
        """Keep the elements of the first epoch (in memory, or in files at filename) and replay them."""
        if not isinstance(filename, (str, _os.PathLike)):
            raise TypeError(f"cache(): filename must be a str, not {type(filename).__name__}")
        filename = _os.fspath(filename)
        return self._then("cache", _fn._quote(filename)) if filename else self._then("cache")

    def shard(self, num_shards, index, name=None):
        """Every num_shards-th element from index on: of the files on a list_files dataset (by
        file, sorted order), of the elements elsewhere."""
        num = _count(num_shards, "num_shards", 1)
        i = _index(index, "index")
        if not 0 <= i < num:
            raise ValueError(f"shard(): index must be in [0, num_shards), not {i} (num_shards {num})")
        if self._kind == "files":
            if any(s[0] == "shard" for s in self._stmts):
                raise ValueError("shard(): the file list is already sharded")
            return Dataset(self._stmts + (("shard", "file", f"num={num}", f"index={i}"),), kind="files",
                           fns=self._fns, fargs=self._fargs, opts=self._opts, base=self._base)
        return self._then("shard", "data", f"num={num}", f"index={i}")

    def repeat(self, count=None, name=None):
        """count times (None or -1: forever)."""
        if count is None or _index(count, "count") == -1:
            return self._then("repeat")
        return self._then("repeat", str(_count(count, "count", 0)))

    def take(self, count, name=None):
        """The first count elements (-1: all)."""
        n = _index(count, "count")
        if n == -1:
            return self._then_nothing()
        return self._then("take", str(_count(n, "count", 0)))

    def skip(self, count, name=None):
        """All but the first count elements (-1: none at all)."""
        n = _index(count, "count")
        if n == -1:
            return self._then("take", "0")
        return self._then("skip", str(_count(n, "count", 0)))

    def enumerate(self, start=0, name=None):
        """Adds the int64 component "index": start, start + 1, ..."""
        return self._then("enumerate", f"start={_index(start, 'start')}")

    def concatenate(self, dataset, name=None):
        """This dataset's elements, then dataset's (the same components and dtypes)."""
        if not isinstance(dataset, Dataset):
            raise TypeError(f"concatenate(): {type(dataset).__name__} is not a sluice.data.Dataset")
        self._check_data("concatenate")
        dataset._check_data("concatenate")
        sub = f"cat{next(_ids)}"
        d = self._then("concatenate", sub, fns=dataset._fns)
        d._subs = self._subs + ((sub, dataset),)
        return d

    # ---- the rest of tf.data's transformations (Sluice's statements: components by name
    # where tf.data takes a function) ----

    def rebatch(self, batch_size, drop_remainder=False, name=None):
        """The rows re-batched into batch_size (an int, or a list of sizes taken in turn)."""
        if isinstance(batch_size, (list, tuple)):
            if not batch_size:
                raise ValueError("rebatch(): batch_size is an empty list")
            size = "[" + ", ".join(str(_count(b, "batch_size", 1)) for b in batch_size) + "]"
        else:
            size = str(_count(batch_size, "batch_size", 1))
        return self._then("rebatch", size, "drop_remainder" if _bool(drop_remainder, "drop_remainder") == "true" else "")

    def take_while(self, predicate, name=None):
        """The elements up to the first one where predicate, a comparison "COMPONENT OP NUMBER"
        ("value < 5"), is false."""
        if not isinstance(predicate, str) or "\n" in predicate or not predicate.strip():
            raise TypeError(f"take_while(): predicate must be a comparison like 'value < 5', not {predicate!r}")
        return self._then("take_while", predicate.strip())

    def scan(self, component, reducer, initial=None, output=None, name=None):
        """The running value of component under reducer ("sum", "prod", "min", "max", "count"),
        as component (or output): tf.data's scan with Sluice's built-in scan functions."""
        if reducer not in ("sum", "prod", "min", "max", "count"):
            raise ValueError(f"scan(): reducer must be sum, prod, min, max or count, not {reducer!r}")
        parts = ["scan", _fn._fmt_comp("scan", "component", component), reducer]
        if initial is not None:
            parts.append("initial=" + _fn._number("scan", "initial", initial))
        if output is not None:
            parts.append("as=" + _fn._fmt_comp("scan", "output", output))
        return self._then(*parts)

    def unique(self, component=None, name=None):
        """First occurrences of component's value (an int or bytes scalar; default: the only
        component)."""
        if component is None:
            return self._then("unique")
        return self._then("unique", _fn._fmt_comp("unique", "component", component))

    def window(self, size, shift=None, stride=1, drop_remainder=False, name=None):
        """Windows of size elements, each ONE element stacked along a new leading dim: what
        tf.data's ds.window(size, shift, stride, drop_remainder).flat_map(lambda w: w.batch(size))
        gives."""
        parts = ["window", str(_count(size, "size", 1))]
        if shift is not None:
            parts.append(f"shift={_count(shift, 'shift', 1)}")
        if stride != 1:
            parts.append(f"stride={_count(stride, 'stride', 1)}")
        if _bool(drop_remainder, "drop_remainder") == "true":
            parts.append("drop_remainder")
        return self._then(*parts)

    def group_by_window(self, key, window_size, modulo=None, name=None):
        """Each key's elements stacked window_size at a time: key a component holding an integer
        scalar (its value % modulo with modulo), tf.data's key_func; the reduce is the batch."""
        parts = ["group_by_window", "key=" + _fn._fmt_comp("group_by_window", "key", key)]
        if modulo is not None:
            parts.append(f"modulo={_count(modulo, 'modulo', 1)}")
        parts.append(f"window={_count(window_size, 'window_size', 1)}")
        return self._then(*parts)

    def bucket_by_sequence_length(self, element_length, bucket_boundaries, bucket_batch_sizes, padding_values=None,
                                  pad_to_bucket_boundary=False, no_padding=False, drop_remainder=False, name=None):
        """tf.data's bucket_by_sequence_length, the length being element_length's (a component's)
        dim 0."""
        bounds = "[" + ", ".join(str(_count(b, "bucket_boundaries", 1)) for b in bucket_boundaries) + "]"
        sizes = "[" + ", ".join(str(_count(b, "bucket_batch_sizes", 1)) for b in bucket_batch_sizes) + "]"
        parts = ["bucket_by_sequence_length", _fn._fmt_comp("bucket_by_sequence_length", "element_length",
                                                            element_length),
                 f"boundaries={bounds}", f"batch_sizes={sizes}"]
        if padding_values is not None:
            parts.append("pad=" + _fn._number("bucket_by_sequence_length", "padding_values", padding_values))
        for flag, v in (("pad_to_bucket_boundary", pad_to_bucket_boundary), ("no_padding", no_padding),
                        ("drop_remainder", drop_remainder)):
            if _bool(v, flag) == "true":
                parts.append(flag)
        return self._then(*parts)

    def rejection_resample(self, class_func, target_dist, initial_dist=None, seed=None, name=None):
        """Keep elements so that the classes (class_func: a component holding an int64 scalar)
        follow target_dist; yields the elements themselves, not tf.data's (class, element)."""
        parts = ["rejection_resample", _fn._fmt_comp("rejection_resample", "class_func", class_func),
                 "target=" + _fn._fmt_numbers("rejection_resample", "target_dist", list(target_dist))]
        if initial_dist is not None:
            parts.append("initial=" + _fn._fmt_numbers("rejection_resample", "initial_dist", list(initial_dist)))
        if seed is not None:
            parts.append(f"seed={_count(seed, 'seed', 0)}")
        return self._then(*parts)

    def snapshot(self, path, shard_bytes=None, name=None):
        """tf.data's snapshot: written under path by the first run, replayed by the next ones
        with the same pipeline."""
        if not isinstance(path, str) or not path:
            raise TypeError(f"snapshot(): path must be a non-empty str, not {path!r}")
        parts = ["snapshot", _fn._quote(path)]
        if shard_bytes is not None:
            parts.append(f"shard_bytes={_count(shard_bytes, 'shard_bytes', 1)}")
        return self._then(*parts)

    def ignore_errors(self, log_warning=False, name=None):
        """Drop the elements whose production failed (counted in the iterator's errors_ignored)."""
        _bool(log_warning, "log_warning")
        return self._then("ignore_errors")

    def apply(self, transformation_func):
        return transformation_func(self)

    # ---- options ----

    def options(self):
        """The options in effect (a copy)."""
        return Options().merge(self._opts)

    def with_options(self, options, name=None):
        """A dataset with options merged over this one's (the new settings win)."""
        if not isinstance(options, Options):
            raise TypeError(f"with_options() takes sluice.data.Options, not {type(options).__name__}")
        options._check()
        return Dataset(self._stmts, kind=self._kind, subs=self._subs, fns=self._fns, fargs=self._fargs,
                       opts=self._opts.merge(options), base=self._base)

    # ---- the config text and the pipeline ----

    def _render_stmt(self, stmt, opts):
        auto = opts.autotune.enabled is not False
        fixed_par = str(opts.autotune.cpu_budget or _os.cpu_count() or 1)
        out, glue = [], False
        for p in stmt:
            if p is _DET:
                p = "" if opts.deterministic is None else "deterministic=" + ("true" if opts.deterministic else "false")
            elif isinstance(p, _Auto):
                p = "auto" if auto else (fixed_par if p.what == "parallel" else "2")
            if not p:
                continue
            if glue:
                out[-1] += p
            else:
                out.append(p)
            glue = p.endswith("=")
        return " ".join(out)

    def _blocks(self, name, opts, seen):
        text = []
        for sub_name, sub in self._subs:
            if sub_name in seen and seen[sub_name] is not sub:
                raise ValueError(f"to_config(): two datasets would be pipeline '{sub_name}'")
            if sub_name not in seen:
                seen[sub_name] = sub
                text += sub._blocks(sub_name, opts, seen)
        body = "\n".join("    " + self._render_stmt(s, opts) for s in self._stmts)
        return text + [f"pipeline {name} {{\n{body}\n}}\n"]

    def to_config(self, name="data"):
        """The pipeline in the config language: `pipeline NAME { ... }`, after the blocks of
        the datasets zip and concatenate read. Python functions appear as py_NAME_N(), which
        only this dataset's iteration can call."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"to_config(): {name!r} is not a pipeline name (letters, digits and _)")
        self._check_data("to_config")
        return "\n".join(self._blocks(name, self._opts, {name: self}))

    def _pipeline(self):
        if self._pipe is None:
            o = self._opts
            self._pipe = Pipeline(None, "data", text=self.to_config("data"), base_dir=self._base,
                                  seed=o.seed or 0, cpu_budget=o.autotune.cpu_budget or 0,
                                  ram_budget=o.autotune.ram_budget or 0, functions=self._fns or None)
        return self._pipe

    def __iter__(self):
        """A new pass (an epoch): dicts of numpy arrays, as sluice.Pipeline's."""
        self._check_data("iter")
        return self._pipeline().iter()

    def as_numpy_iterator(self):
        return iter(self)

    def cardinality(self):
        """Elements per pass: a count, INFINITE_CARDINALITY (-1) or UNKNOWN_CARDINALITY (-2).
        For list_files: the number of files."""
        if self._kind == "files":
            pats = self._fargs[0]
            found = set()
            for p in pats:
                found.update(_glob.glob(p if _os.path.isabs(p) else _os.path.join(self._base, p)))
            return len(found)
        c = self._pipeline().cardinality
        return UNKNOWN_CARDINALITY if c is None else INFINITE_CARDINALITY if c == -1 else c

    def __len__(self):
        c = self.cardinality()
        if c == INFINITE_CARDINALITY:
            raise TypeError("The dataset is infinite.")
        if c == UNKNOWN_CARDINALITY:
            raise TypeError("The dataset length is unknown.")
        return c

    def __bool__(self):
        return True  # not len(): an endless dataset is still a dataset

    def __repr__(self):
        return f"<sluice.data.Dataset: {len(self._stmts)} statement(s), first {' '.join(map(str, self._stmts[0][:2]))}>"


def TFRecordDataset(filenames, compression_type=None, buffer_size=None, num_parallel_reads=None, name=None):
    """The records of filenames (a name, a list of names or globs, or a list_files dataset),
    read one file after another ({"record": bytes} elements), or num_parallel_reads files at
    a time (an interleave of one record from each in turn). compression_type: None (detect),
    "" (none), "GZIP", "ZLIB". buffer_size is accepted and has no effect."""
    comp = _compression(compression_type)
    if isinstance(filenames, _FileName):
        return _Reader(comp)
    if isinstance(filenames, Dataset):
        if filenames._kind != "files":
            raise TypeError("TFRecordDataset(): a dataset of file names must come from Dataset.list_files")
        pats, shuffle, seed = filenames._fargs
        stmts = [_files_stmt(pats, shuffle, seed, comp)] + list(filenames._stmts[1:])
        base, opts = filenames._base, filenames._opts
    else:
        pats = _patterns(filenames, "TFRecordDataset: filenames")
        stmts, base, opts = [_files_stmt(pats, None, None, comp)], None, None
    if num_parallel_reads is not None:
        n = _parallel(num_parallel_reads, "num_parallel_reads", 1)
        stmts.append(("interleave", "cycle=", n, "block=1", "parallel=", n))
    if buffer_size is not None:
        _index(buffer_size, "buffer_size")
    return Dataset(stmts, opts=opts, base=base)
