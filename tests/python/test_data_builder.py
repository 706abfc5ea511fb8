#!/usr/bin/python3
"""sluice.data, the tf.data-style builder (python/sluice/data.py, python/sluice/fn.py) and
map(python_function) (python/src/pyfn.c), on Fashion-MNIST records sluice-record converts here:

  1. a tf.data user's ten-line Fashion-MNIST pipeline gives exactly the batches (bit for
     bit, two epochs, the same seed) of examples/fashion.sl's `train` pipeline; its
     to_config() text, built as a sluice.Pipeline, gives them too;
  2. len() and cardinality() where the count is known; TypeError (tf.data's messages) when
     infinite or unknown;
  3. map(python_function): values in order and the same at num_parallel_calls 1, 4 and
     AUTOTUNE, run on Sluice's threads at 4, deterministic run after run; components passed
     through unchanged are not copied; byte strings and new components come back; the
     Fashion pipeline with a Python function in it equals the reference, with labels changed
     as the function says; filter with a Python predicate or a comparison; zip; a handwritten
     config calling sluice.Pipeline(functions=...);
  4. an exception in the Python function mid-epoch reaches the caller of next() as
     sluice.Error raised from it (__cause__ is the original, its frame in the traceback),
     with the element's file and record byte offset in the message; the pass goes on after it;
     breaking out of a pass with 4 Python map threads in flight closes it (no deadlock);
  5. bad arguments raise TypeError / ValueError as tf.data does; a pattern matching nothing
     is sluice.Error SL_ENOTFOUND when the pipeline is built; options reach the config.

Run by ctest with PYTHONPATH=build/python and SLUICE_BIN; exit 77 (skipped) when the module
or the tools are not built, or the Fashion-MNIST idx files are missing.
"""
import os
import shutil
import struct
import sys
import tempfile
import threading
import traceback

from sluice_pytests import convert_fashion, fail, finish, ok, require, require_modules

np, sluice, crc32c = require_modules()
require("sluice-record")

from sluice import data as sd  # noqa: E402
from sluice import fn  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FASHION_SL = os.path.join(ROOT, "examples", "fashion.sl")


def check(cond, msg):
    (ok if cond else fail)(msg)


def same_batches(a, b):
    """Both lists of dicts hold the same components, dtypes, shapes and bytes."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if list(x) != list(y):
            return False
        for k in x:
            if x[k].dtype != y[k].dtype or x[k].shape != y[k].shape or x[k].tobytes() != y[k].tobytes():
                return False
    return True


def raises(exc, f, what):
    try:
        f()
    except exc as e:
        ok(f"{what}: {exc.__name__} ({e})")
        return e
    except Exception as e:  # noqa: BLE001
        fail(f"{what}: {type(e).__name__} ({e}), expected {exc.__name__}")
        return None
    fail(f"{what}: nothing raised, expected {exc.__name__}")
    return None


T = tempfile.mkdtemp(prefix="sluice-databuilder-")
try:
    convert_fashion(os.path.join(T, "data"), 4, 3000)
    TRAIN = os.path.join(T, "data", "train-*.tfrecord")

    # ---- 1. the tf.data user's pipeline against examples/fashion.sl --------------------
    AUTOTUNE = sd.AUTOTUNE
    ds = (sd.Dataset.list_files(TRAIN, shuffle=False)
          .interleave(sd.TFRecordDataset, cycle_length=4, block_length=16, num_parallel_calls=AUTOTUNE)
          .shuffle(10000, seed=1)
          .map(fn.parse_example({"image": "bytes", "label": "int64"})
               | fn.decode_raw("image", "uint8", (28, 28, 1))
               | fn.scale("image", 1 / 255), num_parallel_calls=AUTOTUNE)
          .batch(128, drop_remainder=True)
          .prefetch(AUTOTUNE))

    ref = sluice.Pipeline(FASHION_SL, "train", set={"pipeline.train.files": f'"{TRAIN}"'})
    ref_epochs = [list(ref), list(ref)]
    got_epochs = [list(ds), list(ds)]
    check(len(ref_epochs[0]) == 3000 // 128, f"the reference pipeline gives {len(ref_epochs[0])} batches of 128")
    check(same_batches(got_epochs[0], ref_epochs[0]), "epoch 0: the builder's batches equal fashion.sl's, bit for bit")
    check(same_batches(got_epochs[1], ref_epochs[1]), "epoch 1 (reshuffled): equal too")
    check(not same_batches(got_epochs[0], got_epochs[1]), "and epochs 0 and 1 differ (reshuffle_each_iteration)")
    b0 = got_epochs[0][0]
    check(b0["image"].dtype == np.float32 and b0["image"].shape == (128, 28, 28, 1) and b0["label"].shape == (128,),
          "batches are float32[128,28,28,1] and int64[128]")
    check(isinstance(b0["image"], sluice.Array), "the arrays are sluice.Array (zero-copy views, as Pipeline's)")

    text = ds.to_config()
    check(text.startswith("pipeline data {") and "interleave cycle=4 block=16 parallel=auto" in text
          and "batch 128 drop_remainder" in text, "to_config() writes a pipeline block")
    p2 = sluice.Pipeline(None, "data", text=text)
    check(same_batches(list(p2), ref_epochs[0]), "to_config()'s text built as sluice.Pipeline gives the same batches")
    named = ds.to_config("train")
    check(named.startswith("pipeline train {"), "to_config(name) names the block")

    # ---- 2. len() and cardinality() ------------------------------------------------------
    r10 = sd.Dataset.range(10)
    check(len(r10) == 10 and r10.cardinality() == 10, "len(range(10)) == 10")
    check(len(r10.batch(3)) == 4 and len(r10.batch(3, drop_remainder=True)) == 3, "batch: 4, drop_remainder: 3")
    check(len(sd.Dataset.range(2, 20, 3)) == 6, "range(2, 20, 3) has 6")
    check(len(r10.take(4)) == 4 and len(r10.skip(4)) == 6 and len(r10.skip(-1)) == 0 and len(r10.take(-1)) == 10,
          "take / skip (and their -1)")
    check(len(r10.repeat(3)) == 30 and len(r10.shard(3, 1)) == 3, "repeat(3) and shard(3, 1)")
    check(r10.repeat().cardinality() == sd.INFINITE_CARDINALITY, "repeat(): INFINITE_CARDINALITY")
    e = raises(TypeError, lambda: len(r10.repeat()), "len() of an endless dataset")
    check(e is not None and str(e) == "The dataset is infinite.", "with tf.data's message")
    check(ds.cardinality() == sd.UNKNOWN_CARDINALITY, "records of files: UNKNOWN_CARDINALITY")
    e = raises(TypeError, lambda: len(ds), "len() of an unknown count")
    check(e is not None and str(e) == "The dataset length is unknown.", "with tf.data's message")
    check(sd.Dataset.list_files(TRAIN).cardinality() == 4, "list_files: the number of files")
    check([int(x["value"]) for x in r10] == list(range(10)), "iterating range gives {'value': int64} elements")

    # ---- 3. map(python_function) ---------------------------------------------------------
    main = threading.get_ident()
    seen_threads = set()

    def triple(e):
        seen_threads.add(threading.get_ident())
        v = e["value"]
        return {"value": v * 3, "square": np.asarray(v * v, dtype=np.int32), "name": f"n{int(v)}"}

    want = [(3 * i, i * i, f"n{i}".encode()) for i in range(200)]
    for par in (None, 1, 4, AUTOTUNE):
        seen_threads.clear()
        got = [(int(x["value"]), int(x["square"]), x["name"][()]) for x in sd.Dataset.range(200).map(triple, par)]
        check(got == want, f"map(python fn, num_parallel_calls={par}): 200 values in order")
        if par == 4:
            check(main not in seen_threads, "at 4 the function ran on Sluice's threads, not the caller's")
    x = next(iter(sd.Dataset.range(5).map(triple, 4)))
    check(x["square"].dtype == np.int32 and x["name"].dtype == object and list(x) == ["value", "square", "name"],
          "dtypes (int32, bytes) and the dict's order come back")
    runs = [[b["label"].tobytes() for b in sd.Dataset.range(300).map(lambda e: {"label": e["value"] % 7}, 4)
             .shuffle(64, seed=5).batch(10)] for _ in range(2)]
    check(runs[0] == runs[1], "deterministic: the same values run after run")

    addrs = {}

    def passthrough(e):
        addrs[int(e["label"])] = e["image"].__array_interface__["data"][0]
        return e

    f1 = os.path.join(T, "data", "train-00000-of-00004.tfrecord")
    parsed = sd.TFRecordDataset(f1).map(fn.parse_example(image="bytes", label="int64")
                                        | fn.decode_raw("image", "uint8", (28, 28, 1)))
    zc = [(int(x["label"]), x["image"].__array_interface__["data"][0]) for x in parsed.map(passthrough).take(1)]
    check(zc and addrs.get(zc[0][0]) == zc[0][1], "lambda e: e passes components through without a copy")

    def relabel(e):
        return {"image": e["image"], "label": 9 - e["label"]}

    ds_py = (sd.Dataset.list_files(TRAIN, shuffle=False)
             .interleave(sd.TFRecordDataset, cycle_length=4, block_length=16, num_parallel_calls=AUTOTUNE)
             .shuffle(10000, seed=1)
             .map(fn.parse_example({"image": "bytes", "label": "int64"})
                  | fn.decode_raw("image", "uint8", (28, 28, 1)) | fn.scale("image", 1 / 255), AUTOTUNE)
             .map(relabel, num_parallel_calls=4)
             .batch(128, drop_remainder=True))
    got = list(ds_py)
    good = len(got) == len(ref_epochs[0]) and all(
        g["image"].tobytes() == r["image"].tobytes() and np.array_equal(g["label"], 9 - r["label"])
        for g, r in zip(got, ref_epochs[0]))
    check(good, "Fashion with a Python function in it: the reference's images, labels 9 - label")

    odd = [int(x["value"]) for x in sd.Dataset.range(20).filter(lambda e: e["value"] % 3 == 0)]
    check(odd == [0, 3, 6, 9, 12, 15, 18], "filter(python predicate)")
    x = next(iter(sd.Dataset.range(20).filter(lambda e: e["value"] > 4)))
    check(list(x) == ["value"], "the predicate's helper component is gone")
    check([int(x["value"]) for x in sd.Dataset.range(20).filter("value < 4")] == [0, 1, 2, 3],
          "filter('value < 4') (the config's comparison)")
    z = list(sd.Dataset.zip(sd.Dataset.range(3), sd.Dataset.range(3).map(lambda e: {"w": e["value"] * 10})))
    check([(int(a["value"]), int(a["w"])) for a in z] == [(0, 0), (1, 10), (2, 20)], "Dataset.zip(a, b) merges dicts")
    z = list(sd.Dataset.zip({"a": sd.Dataset.range(2), "b": sd.Dataset.range(5, 7)}))
    check([(int(a["a.value"]), int(a["b.value"])) for a in z] == [(0, 5), (1, 6)], "Dataset.zip({'a': .., 'b': ..})")
    cat = [int(a["value"]) for a in sd.Dataset.range(2).concatenate(sd.Dataset.range(7, 9))]
    check(cat == [0, 1, 7, 8], "concatenate")
    hand = sluice.Pipeline(None, "p", text="pipeline p {\n    range 0 4\n    map double() parallel=2\n}\n",
                           functions={"double": lambda e: {"value": e["value"] * 2}})
    check([int(a["value"]) for a in hand] == [0, 2, 4, 6], "a handwritten config's map double() (Pipeline(functions=))")

    # ---- 4. an exception mid-epoch ---------------------------------------------------------
    def offsets(path):
        out, pos, data = [], 0, open(path, "rb").read()
        while pos < len(data):
            (n,) = struct.unpack_from("<Q", data, pos)
            out.append(pos)
            pos += 16 + n
        return out

    def boom_fn(e):
        if int(e["value"]) == 37:
            raise ValueError("boom at 37")
        return e

    seen = []
    it = iter(sd.Dataset.range(100).map(boom_fn, num_parallel_calls=4))
    err = None
    try:
        for a in it:
            seen.append(int(a["value"]))
    except sluice.Error as ex:
        err = ex
    check(seen == list(range(37)), "the 37 elements before the failing one came, in order")
    check(err is not None and isinstance(err.__cause__, ValueError) and str(err.__cause__) == "boom at 37",
          "sluice.Error raised from the original ValueError (__cause__)")
    if err is not None and err.__cause__ is not None:
        frames = [f.name for f in traceback.extract_tb(err.__cause__.__traceback__)]
        check("boom_fn" in frames, f"the function's frame is in the traceback ({frames})")
        check("ValueError: boom at 37" in str(err) and "element 37" in str(err) and err.status == "SL_EINVAL",
              f"the message names the exception and the element: {err.message!r}")
        full = "".join(traceback.format_exception(err))
        check("direct cause" in full and "boom_fn" in full, "traceback.format_exception shows the chain")
    check([int(a["value"]) for a in it] == list(range(38, 100)), "the pass goes on after the error")

    offs = offsets(f1)

    recs = [x["image"][()] for x in sd.TFRecordDataset(f1).map(fn.parse_example(image="bytes")).take(10)]
    k = next(i for i in range(5, 10) if recs[i] not in recs[:i])  # record 5 (or the next unique one)

    def bad_label(e):
        if e["image"][()] == recs[k]:
            raise RuntimeError(f"record {k} is not allowed")
        return e

    err = raises(sluice.Error, lambda: list(sd.TFRecordDataset(f1).map(fn.parse_example(image="bytes"))
                                            .map(bad_label, num_parallel_calls=2)), "an exception in a record's map")
    if err is not None:
        check(k >= 5 and f1 in str(err) and f"byte {offs[k]}:" in str(err) and f"element {k}:" in str(err),
              f"the message names the file and the record's byte offset {offs[k]}: {err.message!r}")
        check(isinstance(err.__cause__, RuntimeError), "its __cause__ is the RuntimeError")

    err = raises(sluice.Error, lambda: list(sd.Dataset.range(3).map(lambda e: [1, 2])), "a function returning a list")
    check(err is not None and isinstance(err.__cause__, TypeError) and "must return a dict" in str(err),
          "is sluice.Error from a TypeError saying it must return a dict")
    err = raises(sluice.Error, lambda: list(sd.Dataset.range(3).map(lambda e: {"c": np.zeros(2, np.complex64)})),
                 "a function returning complex numbers")
    check(err is not None and isinstance(err.__cause__, TypeError), "TypeError: no Sluice dtype")

    slow = sd.Dataset.range(100000).map(lambda e: {"v": np.full(1000, e["value"])}, num_parallel_calls=4).prefetch(8)
    it = iter(slow)
    for _ in range(5):
        next(it)
    it.close()
    del it
    ok("closing a pass with 4 Python map threads in flight returns (no deadlock)")

    # ---- 5. bad arguments, build errors, options --------------------------------------------
    r = sd.Dataset.range(10)
    raises(ValueError, lambda: r.batch(0), "batch(0)")
    raises(TypeError, lambda: r.batch("8"), "batch('8')")
    raises(TypeError, lambda: r.batch(2.5), "batch(2.5)")
    raises(TypeError, lambda: r.batch(2, drop_remainder="yes"), "batch(drop_remainder='yes')")
    raises(ValueError, lambda: r.shuffle(0), "shuffle(0)")
    raises(TypeError, lambda: r.shuffle(10, seed="x"), "shuffle(seed='x')")
    raises(ValueError, lambda: r.shard(2, 2), "shard(2, 2)")
    raises(ValueError, lambda: r.shard(0, 0), "shard(0, 0)")
    raises(TypeError, lambda: r.map(3), "map(3)")
    raises(ValueError, lambda: r.map(lambda e: e, num_parallel_calls=0), "map(num_parallel_calls=0)")
    raises(ValueError, lambda: r.map(lambda e: e, num_parallel_calls=-2), "map(num_parallel_calls=-2)")
    raises(ValueError, lambda: r.prefetch(-2), "prefetch(-2)")
    raises(TypeError, lambda: r.repeat("x"), "repeat('x')")
    raises(ValueError, lambda: r.take(-2), "take(-2)")
    raises(TypeError, lambda: r.with_options(3), "with_options(3)")
    raises(TypeError, lambda: r.interleave(sd.TFRecordDataset), "interleave on a range")
    files = sd.Dataset.list_files(TRAIN)
    raises(TypeError, lambda: files.interleave(lambda f: 3), "interleave(function not returning TFRecordDataset)")
    raises(TypeError, lambda: files.map(lambda e: e), "map on list_files")
    raises(TypeError, lambda: iter(files), "iterating list_files")
    raises(TypeError, lambda: sd.TFRecordDataset(3), "TFRecordDataset(3)")
    raises(ValueError, lambda: sd.TFRecordDataset(f1, compression_type="LZ4"), "compression_type='LZ4'")
    raises(TypeError, lambda: sd.Dataset.range(), "range()")
    raises(ValueError, lambda: sd.Dataset.range(0, 5, 0), "range(0, 5, 0)")
    raises(TypeError, lambda: sd.Dataset.zip(r, 3), "zip(ds, 3)")
    raises(TypeError, lambda: fn.decode_raw("image", "uint8"), "decode_raw without a shape")
    raises(TypeError, lambda: fn.scale("image", "x"), "scale(factor='x')")
    raises(ValueError, lambda: fn.resize("image", (0, 3)), "resize to 0x3")
    raises(TypeError, lambda: fn.decode_jpeg("image", channelz=3), "decode_jpeg(channelz=3)")
    raises(TypeError, lambda: fn.parse_example({"x": "complex"}), "parse_example of a complex feature")
    raises(TypeError, lambda: fn.scale("image", 2) | (lambda e: e), "chaining a Python function with |")
    o = sd.Options()
    o.autotune.cpu_budget = -1
    raises(ValueError, lambda: r.with_options(o), "Options.autotune.cpu_budget = -1")
    e = raises(sluice.Error, lambda: len(sd.TFRecordDataset(os.path.join(T, "nothing-*.tfrecord"))),
               "a pattern that matches nothing")
    check(e is not None and e.status == "SL_ENOTFOUND", "is SL_ENOTFOUND when the pipeline is built")
    e = raises(sluice.Error, lambda: len(r.map(fn.cast("value", "int3"))), "cast to 'int3'")
    check(e is not None and "<text>:3:" in str(e), f"names the line of to_config()'s text: {e and e.message!r}")

    o = sd.Options()
    o.autotune.enabled = False
    o.autotune.cpu_budget = 3
    o.deterministic = False
    o.seed = 7
    d = ds.with_options(o)
    t = d.to_config()
    check("auto" not in t and "parallel=3" in t and "cycle=4" in t and "prefetch 2" in t,
          "autotune.enabled=False writes fixed values (the CPU budget, prefetch 2)")
    check(t.count("deterministic=false") == 2, "deterministic=False reaches map and interleave")
    check(d.options().seed == 7 and d.options().autotune.cpu_budget == 3 and ds.options().seed is None,
          "options() merges; the original keeps its own")
    check(len(list(d)) == len(ref_epochs[0]), "the pipeline with those options runs")

    # the rest of tf.data's transformations, with the outputs of its API reference's examples
    def vals(d, k="value"):
        return [e[k].tolist() for e in d]
    R = sd.Dataset.range
    check(vals(R(10).scan("value", "sum")) == [0, 1, 3, 6, 10, 15, 21, 28, 36, 45], "scan: the running sum")
    check(vals(R(10).take_while("value < 5")) == [0, 1, 2, 3, 4], "take_while(x < 5)")
    check(vals(R(7).window(3, 1, 2, True)) == [[0, 2, 4], [1, 3, 5], [2, 4, 6]], "window(3, 1, 2, True)")
    check(vals(R(7).window(3, 2, 1, True)) == [[0, 1, 2], [2, 3, 4], [4, 5, 6]], "window(3, 2, 1, True)")
    check(vals(R(8).batch(4).rebatch([2, 1, 1])) == [[0, 1], [2], [3], [4, 5], [6], [7]], "rebatch([2, 1, 1])")
    check(vals(R(10).group_by_window("value", 5, modulo=2)) == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]],
          "group_by_window(x % 2, window 5)")
    check(vals(R(1, 4).concatenate(R(2, 5)).unique()) == [1, 2, 3, 4], "unique")
    check(vals(R(1, 4).concatenate(R(4, 8))) == [1, 2, 3, 4, 5, 6, 7], "concatenate")
    got = vals(R(400).rejection_resample("value", [0.25] * 4 + [0.0] * 396, initial_dist=[1 / 400] * 400, seed=1))
    check(got and all(v < 4 for v in got), f"rejection_resample keeps only the target's classes: {got[:8]}")
    snap = os.path.join(T, "snap")
    first = vals(R(5).snapshot(snap))
    check(first == [0, 1, 2, 3, 4] and os.listdir(snap), "snapshot: written on the first run")
    check(vals(R(5).snapshot(snap)) == first, "snapshot: the second run replays it")
    raises(ValueError, lambda: R(3).scan("value", "mean"), "scan with an unknown reducer")
    raises(TypeError, lambda: R(3).take_while(lambda e: True), "take_while takes a comparison string")
    t = (fn.trivial_augment("image") | fn.random_erasing("image", p=0.1, value="random")
         | fn.mixup_cutmix("image", "label", num_classes=10)).to_config()
    check(t == "trivial_augment(image) | random_erasing(image, p=0.1, value=random) | "
          "mixup_cutmix(image, label, num_classes=10)", f"the recipe's functions write themselves: {t}")
    raises(ValueError, lambda: fn.random_erasing("image", value="noise"), "random_erasing value='noise'")
finally:
    shutil.rmtree(T, ignore_errors=True)

finish()
