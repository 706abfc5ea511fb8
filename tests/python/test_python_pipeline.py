#!/usr/bin/python3
"""The `sluice` Python module (python/) end to end, on Fashion-MNIST records that
sluice-record converts here:

  1. values: every element of a pass equals what `sluice-stats --peek N --json` prints for
     the same config, overrides, shard and seed (dtype, shape, the CRC32C of all the bytes,
     and every value printed), for an unbatched pipeline with a seeded shuffle and a
     random flip, a sharded one, a batched one and one with a byte-string component;
  2. lifetime: arrays (batched: recycled 1 MiB+ buffers; unbatched: views of the mmapped
     records) keep their values after the pipeline and iterator are deleted, gc runs and
     another pipeline churns through memory;
  3. DLPack: torch.from_dlpack shares memory (data_ptr == the array's address), and the
     tensor outlives the array and the pipeline (skipped part when torch is missing);
  4. errors: sluice.Error (a RuntimeError) with Sluice's message, status and hint for a
     config mistake (FILE:LINE:COL), a missing file, a bad override, a corrupt record (file
     and byte offset; the pass goes on after it), a pipeline name that is not there, and
     shard=(i, n > 1) on a block without a `shard` statement (it would not be split);
  5. the GIL is released while sl_iter_next runs (another thread makes progress meanwhile),
     and a second thread advancing the same iterator meanwhile gets RuntimeError;
  6. stats() returns the stats JSON as a dict; epochs: pass k > 0 is seeded with
     sluice.mix_seed(seed, k) and reshuffles.

Run by ctest with PYTHONPATH=build/python and SLUICE_BIN; exit 77 (skipped) when the module
or the tools are not built, or the Fashion-MNIST idx files are missing.
"""
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from sluice_pytests import BIN, convert_fashion, fail, finish, ok, require, require_modules

np, sluice, crc32c = require_modules()

require("sluice-stats", "sluice-record")

T = tempfile.mkdtemp(prefix="sluice-pytest-")
try:
    convert_fashion(os.path.join(T, "data"), 4, 3000)

    CFG = os.path.join(T, "f.sl")
    with open(CFG, "w") as f:
        f.write("""
pipeline train {
    files "data/train-*.tfrecord"
    shard auto
    shuffle 64
    map parse_example(image: bytes, label: int64) | decode_raw(image, uint8, 28x28x1)
        | random_flip(image) | scale(image, 1/255)
}
pipeline batched {
    files "data/train-*.tfrecord"
    map parse_example(image: bytes, label: int64) | decode_raw(image, uint8, 28x28x1)
    batch 3
}
pipeline raw {
    files "data/test-*.tfrecord"
    map parse_example(image: bytes, label: int64)
}
pipeline big {
    files "data/train-*.tfrecord"
    map parse_example(image: bytes, label: int64) | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255)
    batch 500
}
""")

    def peek(name, n, seed, sets=(), shards=None):
        cmd = [os.path.join(BIN, "sluice-stats"), CFG, "--pipeline", name, "--peek", str(n), "--json",
               "--values", "1000", "--seed", str(seed)]
        for s in sets:
            cmd += ["--set", s]
        if shards:
            cmd += ["--shards", str(shards[1]), "--shard-index", str(shards[0])]
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        return [json.loads(line) for line in out.splitlines()]

    def same(ref, got, what):
        """got: list of element dicts from Python; ref: peek's JSON objects."""
        if len(ref) != len(got):
            return f"{what}: {len(got)} elements, peek printed {len(ref)}"
        for i, (r, g) in enumerate(zip(ref, got)):
            rc = r["components"]
            if list(rc) != list(g):
                return f"{what}: element {i}: components {list(g)}, peek {list(rc)}"
            for name, c in rc.items():
                a = g[name]
                if c["dtype"] == "bytes":
                    if a.dtype != object or list(a.shape) != c["shape"]:
                        return f"{what}: element {i} {name}: {a.dtype}{a.shape}, peek {c['dtype']}{c['shape']}"
                    crc = 0
                    for b in a.flat:
                        crc = crc32c.crc32c(b, crc)
                    lens = [b["len"] for b in c["values"]]
                    if [len(b) for b in a.flat][:len(lens)] != lens:
                        return f"{what}: element {i} {name}: byte string lengths differ"
                else:
                    if str(a.dtype) != c["dtype"] or list(a.shape) != c["shape"]:
                        return f"{what}: element {i} {name}: {a.dtype}{list(a.shape)}, peek {c['dtype']}{c['shape']}"
                    crc = crc32c.crc32c(a.tobytes())
                    vals = c["values"]
                    want = np.array(vals, dtype=a.dtype)
                    if len(vals) != min(a.size, 1000) or not np.array_equal(a.reshape(-1)[:len(vals)], want):
                        return f"{what}: element {i} {name}: values differ from peek's"
                if "%08x" % crc != c["crc32c"]:
                    return f"{what}: element {i} {name}: crc32c {crc:08x}, peek {c['crc32c']}"
        return None

    # ---- 1. values equal sluice-stats --peek --json ----
    cases = [
        ("train, seed 7", "train", 40, 7, (), None),
        ("train, seed 7, shard 1 of 2", "train", 30, 7, (), (1, 2)),
        ("train, --set shuffle=5, seed 3", "train", 20, 3, ("pipeline.train.shuffle=5",), None),
        ("batched", "batched", 12, 0, (), None),
        ("raw (bytes component)", "raw", 6, 0, (), None),
    ]
    for what, name, n, seed, sets, shards in cases:
        ref = peek(name, n, seed, sets, shards)
        p = sluice.Pipeline(CFG, name, seed=seed, set=list(sets), shard=shards or (0, 1))
        got = []
        for e in p:
            got.append(e)
            if len(got) == n:
                break
        err = same(ref, got, what)
        if err:
            fail(err)
        else:
            ok(f"{what}: {n} elements equal sluice-stats --peek --json (dtype, shape, crc32c, values)")
    # the dict form of set= gives the same as the list form
    a = [e["label"].item() for _, e in zip(range(20), sluice.Pipeline(CFG, seed=3, set={"pipeline.train.shuffle": 5}))]
    b = [e["label"].item() for _, e in zip(range(20), sluice.Pipeline(CFG, seed=3, set=["pipeline.train.shuffle=5"]))]
    if a == b and a != [e["label"].item() for _, e in zip(range(20), sluice.Pipeline(CFG, seed=3))]:
        ok("set={PATH: VALUE} equals set=[\"PATH=VALUE\"] and changes the pass")
    else:
        fail(f"set= dict vs list: {a} vs {b}")
    # config text instead of a file (relative paths start at base_dir)
    with open(CFG) as f:
        text = f.read()
    ref = peek("batched", 4, 0)
    got = [e for _, e in zip(range(4), sluice.Pipeline(text=text, name="batched", base_dir=T))]
    err = same(ref, got, "text=")
    fail(err) if err else ok("Pipeline(text=..., base_dir=...) equals the file's pipeline")

    # ---- 2. arrays outlive their pipeline ----
    p = sluice.Pipeline(CFG, "big")
    it = iter(p)
    kept = [next(it) for _ in range(3)]
    copies = [{k: v.copy() for k, v in e.items()} for e in kept]
    p2 = sluice.Pipeline(CFG, "raw")
    unb = [next(iter(sluice.Pipeline(CFG, "batched")))]
    unb_copy = [{k: v.copy() for k, v in e.items()} for e in unb]
    views = [next(iter(sluice.Pipeline(CFG, "train")))]
    views_copy = [{k: v.copy() for k, v in e.items()} for e in views]
    addr = kept[0]["image"].ctypes.data
    del p, it, p2
    gc.collect()
    churn = 0
    for e in sluice.Pipeline(CFG, "big"):  # recycled 1 MiB+ buffers would be reused here
        e["image"].sum()
        churn += 1
    gc.collect()
    good = all(np.array_equal(kept[i][k], copies[i][k]) for i in range(3) for k in copies[i])
    good = good and all(np.array_equal(unb[0][k], unb_copy[0][k]) for k in unb_copy[0])
    good = good and all(np.array_equal(views[0][k], views_copy[0][k]) for k in views_copy[0])
    if good and kept[0]["image"].shape == (500, 28, 28, 1) and kept[0]["image"].ctypes.data == addr and churn == 6:
        ok("arrays keep their values after the pipeline and iterator are deleted, gc and another pass")
    else:
        fail(f"arrays after the pipeline is gone: equal={good}, churn={churn}")
    base = kept[0]["image"].base
    if isinstance(base, sluice.Buffer) and base.address == addr and not kept[0]["image"].flags.writeable:
        ok("an array's base is its sluice.Buffer (same address); arrays are read-only")
    else:
        fail(f"array base {base!r}, writeable {kept[0]['image'].flags.writeable}")
    try:
        kept[0]["image"][0, 0, 0, 0] = 1
        fail("writing into a Sluice array did not raise")
    except ValueError:
        ok("writing into a Sluice array raises ValueError (read-only)")

    # ---- 3. DLPack ----
    try:
        import torch
    except ImportError:
        torch = None
        print("skipped part 3: torch is not installed (apt-get install python3-torch)")
    if torch is not None:
        e = next(iter(sluice.Pipeline(CFG, "big")))
        x = e["image"]
        t = torch.from_dlpack(x)
        ref = x.copy()
        shared = t.data_ptr() == x.ctypes.data == x.base.address
        if shared and t.dtype == torch.float32 and tuple(t.shape) == x.shape:
            ok("torch.from_dlpack(array) shares memory: data_ptr equals the array's address")
        else:
            fail(f"from_dlpack: data_ptr {t.data_ptr():#x}, array {x.ctypes.data:#x}, {t.dtype} {tuple(t.shape)}")
        lab = torch.from_dlpack(e["label"])
        sl = torch.from_dlpack(x[10:20])  # a view of the array: still shared
        if lab.dtype == torch.int64 and sl.data_ptr() == x[10:20].ctypes.data:
            ok("int64 labels and array slices export too (no copy)")
        else:
            fail(f"labels {lab.dtype}, slice data_ptr {sl.data_ptr():#x}")
        del e, x
        gc.collect()
        if np.array_equal(t.numpy(), ref):
            ok("the tensor keeps Sluice's buffer alive after the array and the pipeline are gone")
        else:
            fail("tensor values changed after the array was deleted")
        n = np.from_dlpack(next(iter(sluice.Pipeline(CFG, "big")))["label"])
        if n.dtype == np.int64 and n.shape == (500,):
            ok("numpy.from_dlpack takes them too")
        else:
            fail(f"np.from_dlpack: {n.dtype} {n.shape}")

    # ---- 4. errors ----
    bad = os.path.join(T, "bad.sl")
    with open(bad, "w") as f:
        f.write("pipeline train {\n    files \"data/train-*.tfrecord\"\n    shufle 10\n}\n")
    try:
        sluice.Pipeline(bad)
        fail("a config with an unknown op did not raise")
    except sluice.Error as e:
        s = str(e)
        if (isinstance(e, RuntimeError) and e.status == "SL_EINVAL" and e.code == -1
                and s.startswith(f"{bad}:3:5: unknown op 'shufle'") and e.hint and "shuffle" in e.hint
                and "---> HINT: " in s and e.message == s.split("\n---> HINT: ")[0]):
            ok(f"bad config: sluice.Error {e.status} at FILE:LINE:COL with the hint ({e.hint})")
        else:
            fail(f"bad config: {e.status} {s!r} hint {e.hint!r}")
    try:
        sluice.Pipeline(os.path.join(T, "missing.sl"))
        fail("a missing config did not raise")
    except sluice.Error as e:
        if e.status == "SL_ENOTFOUND" and "missing.sl" in str(e):
            ok("missing config file: sluice.Error SL_ENOTFOUND naming it")
        else:
            fail(f"missing config: {e.status} {e}")
    try:
        sluice.Pipeline(CFG, "train", set=["pipeline.train.nosuch.x=1"])
        fail("a bad override did not raise")
    except sluice.Error as e:
        if e.status == "SL_EINVAL" and str(e).startswith("set: ") and "pipeline.train.nosuch.x=1" in str(e):
            ok(f"bad override: sluice.Error naming it ({e.message.splitlines()[0][:70]})")
        else:
            fail(f"bad override: {e.status} {e}")
    try:
        sluice.Pipeline(CFG, "nosuch")
        fail("an unknown pipeline name did not raise")
    except sluice.Error as e:
        if e.status == "SL_ENOTFOUND" and "nosuch" in str(e) and "batched" in str(e):
            ok("unknown pipeline name: SL_ENOTFOUND listing the pipelines there are")
        else:
            fail(f"unknown pipeline: {e.status} {e}")
    try:
        sluice.Pipeline(CFG, "train", shard=(2, 2))
        fail("shard=(2, 2) did not raise")
    except ValueError as e:
        ok(f"shard=(2, 2): ValueError ({e})")
    try:
        sluice.Pipeline(CFG, "batched", shard=(1, 2))
        fail("shard=(1, 2) on a pipeline without a shard statement did not raise")
    except sluice.Error as e:
        if e.status == "SL_EINVAL" and "pipeline 'batched' has no `shard` statement" in e.message and "shard auto" in e.hint:
            ok("shard=(1, 2) on a block without `shard`: sluice.Error (every replica would read everything)")
        else:
            fail(f"shard without statement: {e.status} {e}")
    # a corrupt record: the error names the file and the byte offset; the pass goes on
    cdir = os.path.join(T, "corrupt")
    os.mkdir(cdir)
    shutil.copy(os.path.join(T, "data", "test-00000-of-00004.tfrecord"), cdir)
    shutil.copy(os.path.join(T, "data", "test-00001-of-00004.tfrecord"), cdir)
    cpath = os.path.join(cdir, "test-00000-of-00004.tfrecord")
    with open(cpath, "r+b") as f:
        data = bytearray(f.read())
    # record framing: u64 length, u32 crc, payload, u32 crc
    off, starts = 0, []
    while off < len(data):
        n = int.from_bytes(data[off:off + 8], "little")
        starts.append(off)
        off += 12 + n + 4
    data[starts[2] + 12 + 100] ^= 0xFF  # inside the 3rd record's payload
    with open(cpath, "wb") as f:
        f.write(data)
    p = sluice.Pipeline(text=f'pipeline c {{\n files "{cdir}/test-*.tfrecord"\n map parse_example(label: int64)\n}}\n')
    it = iter(p)
    got, errs = [], []
    while True:
        try:
            got.append(next(it)["label"].item())
        except StopIteration:
            break
        except sluice.Error as e:
            errs.append(e)
    if (len(errs) == 1 and errs[0].status == "SL_ECORRUPT" and cpath in str(errs[0])
            and f"byte {starts[2]}" in str(errs[0]) and "element 2" in str(errs[0]) and len(got) == 2 + len(starts)):
        ok(f"corrupt record: sluice.Error SL_ECORRUPT naming the file and byte {starts[2]}; "
           f"the pass goes on with the next file ({len(got)} records in all)")
    else:
        fail(f"corrupt record: {len(got)} good (want 2 + {len(starts)}), errors "
             f"{[(e.status, str(e)) for e in errs]}")

    # ---- 5. the GIL is released while the pipeline is waited on ----
    # One next() call that filters N elements to none; another Python thread must run many
    # times inside it. N grows tenfold until the call is long enough for that on this
    # machine (elements, not seconds: a fast machine filters 3M in a few milliseconds).
    stamps = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            stamps.append(time.monotonic())
            time.sleep(0.001)

    th = threading.Thread(target=spin)
    th.start()
    for n in (3_000_000, 30_000_000, 300_000_000, 3_000_000_000):
        slow = sluice.Pipeline(text=f"pipeline s {{\n range 0 {n}\n filter value < 0\n}}\n")
        it = iter(slow)
        t0 = time.monotonic()
        rest = list(it)  # one sl_iter_next call that filters n elements, then the end
        t1 = time.monotonic()
        inside = [s for s in stamps if t0 + 0.1 * (t1 - t0) < s < t1 - 0.1 * (t1 - t0)]
        if rest != [] or len(inside) >= 10:
            break
    stop.set()
    th.join()
    if rest == [] and len(inside) >= 10:
        ok(f"GIL released in next(): another thread ran {len(inside)} times during a {t1 - t0:.2f} s call "
           f"({n} elements)")
    else:
        fail(f"GIL: a call over {n} elements took {t1 - t0:.3f} s, {len(inside)} stamps of the other thread inside it")

    # the same iterator advanced from two threads at once: one of them gets RuntimeError.
    # The two calls overlap only when one is still inside next() when the other comes: an
    # attempt where they did not (both [] and no error) is run again with ten times the
    # elements, so a fast machine still gets an overlap; any other outcome decides.
    def two_threads(n):
        results = {}
        shared = iter(sluice.Pipeline(text=f"pipeline s {{\n range 0 {n}\n filter value < 0\n}}\n"))
        started = threading.Event()

        def advance(who):
            if who == "thread":
                started.set()
            try:
                results[who] = list(shared)
            except RuntimeError as e:
                results[who] = e

        th = threading.Thread(target=advance, args=("thread",))
        th.start()
        started.wait()
        advance("main")
        th.join()
        return results

    for k in range(4):
        results = two_threads(n * 10 ** k)
        errs = [r for r in results.values() if isinstance(r, RuntimeError)]
        if errs or list(results.values()) != [[], []]:
            break
    if (len(errs) == 1 and "already being advanced by another thread" in str(errs[0])
            and [r for r in results.values() if not isinstance(r, RuntimeError)] == [[]]):
        ok("an iterator advanced from two threads at once: the second gets RuntimeError, no crash")
    else:
        fail(f"two threads on one iterator: {results}")

    # ---- 6. stats and epochs ----
    p = sluice.Pipeline(CFG, "train", seed=5)
    e0 = [e["label"].item() for e in p]
    st = p.stats()
    e1 = [e["label"].item() for e in p]
    e1b = [e["label"].item() for e in p.iter(epoch=1)]
    e0b = [e["label"].item() for e in p.iter(seed=5)]
    ops = [o.get("label") for o in st.get("ops", [])]
    if (st.get("format") == "sluice-stats" and st.get("elements") == 3000 and any("train/shuffle" == o for o in ops)
            and sorted(e0) == sorted(e1) and e0 != e1 and e1 == e1b and e0 == e0b):
        ok(f"stats() is the stats JSON ({len(ops)} ops, 3000 elements); pass 1 reshuffles, iter(epoch=1) "
           "and iter(seed=5) reproduce passes 1 and 0")
    else:
        fail(f"stats/epochs: format {st.get('format')} elements {st.get('elements')} ops {ops}; "
             f"e0==e1 {e0 == e1} e1==e1b {e1 == e1b} e0==e0b {e0 == e0b}")
    it = iter(sluice.Pipeline(CFG, "big"))
    next(it)
    live = it.stats()
    if live.get("elements") == 1 and not it.closed:
        it.close()
        ok("a live iterator's stats() snapshot; close() stops it early")
    else:
        fail(f"live stats: {live.get('elements')}")
finally:
    shutil.rmtree(T, ignore_errors=True)

finish()
