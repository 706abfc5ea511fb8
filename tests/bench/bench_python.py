#!/usr/bin/python3
"""Benchmark: the Python module's rate against the C API's, on the same pipeline.

The Fashion-MNIST training pipeline (examples/fashion.sl's: interleave, shuffle 10000,
parse_example | decode_raw | scale, batch 128, prefetch; repeated so it never runs dry),
run for N batches:
  anchor  the C API: `sluice-stats CONFIG --batches N --json` runs the pipeline alone as
          fast as it goes (sl_iter_next in a loop); elements / its wall time;
  sluice  Python: iterating sluice.Pipeline on the same config and seed, each element a
          dict of numpy arrays (zero-copy), for the same N elements; elements / wall time
          (iterator creation included in both).
The same two numbers for the unbatched pipeline (one 28x28 image per element: the
per-element cost of the Python layer) are printed as an extra line.

Then the JPEG pipeline of bench_pipeline (TFRecords of the same JPEG corpus,
/tmp/sluice-bench/jpeg-N: parse_example | decode_jpeg | random_resized_crop 224 | random_flip
| normalize, batch 64 drop_remainder, shuffle 1024, prefetch 2) against PyTorch's DataLoader:
  python  sluice.Pipeline on that config (numpy batches, zero-copy): best of 2 epochs, as
          bench_pipeline reports the C API's rate on it (the first epoch also pays for
          starting the pipeline: threads, buffers, the shuffle buffer's fill);
  torch   ../shared/anchors/torch_loader.py DIR 2 64 2 MODE (DataLoader with 2 workers +
          torchvision, best of 2 epochs), MODE `pil` (PIL decode, antialiased resize: the
          usual training script) and `tensor` (torchvision.io.decode_jpeg, antialias=False);
alternating python, torch pil, torch tensor, REPS (3) times; medians and min-max in
images/s. The corpus comes from ../shared/anchors/make_jpeg_corpus.py (as bench_pipeline's)
and is converted with `sluice-record convert images`. Without ../shared (or its packages:
python3-torch python3-torchvision python3-pil), or when an anchor fails, it exits 1 naming
the anchor and what is missing, before measuring the JPEG pipeline where it can tell, and prints no
RESULT line.
SLUICE_BENCH_JPEG_DIR=DIR uses another folder of *_D.jpg files (D: the label digit).

    tests/bench/run bench_python [N_BATCHES] [--quick]   (default 2000 batches, 2000 JPEGs;
                                                           --quick or SLUICE_BENCH_QUICK=1: 100
                                                           batches, 256 JPEGs, for a smoke run)

Before those (they need no torch, so they print even when the torch anchor cannot run):
  builder  examples/fashion.sl's `train` pipeline (its files overridden to the converted
           shards) built twice: from the .sl file (sluice.Pipeline) and with sluice.data,
           tf.data-style (the same statements, so the same C graph); N batches from each,
           epoch after epoch, alternating REPS times (which one goes first alternates too);
           medians in batches/s and their ratio, builder / config (expected within 3% of 1);
  pymap    the per-element cost of map(python_function) with a trivial function (lambda e: e):
           range(M).map(f, num_parallel_calls=P).batch(128) against range(M).batch(128),
           (t_map - t_plain) / M in microseconds, at P = 1 and 4 (M = N * 128 / 2).

Ends with: RESULT bench_python ratio=R sluice=X anchor=Y unit=batches/s (R = X / Y: the
Fashion pipeline's batches/s, Python over C; target >= 0.9), then for the JPEG pipeline
jpeg_python=, torch_pil=, torch_tensor= (medians, images/s) and
jpeg_vs_torch=jpeg_python / the faster torch mode, jpeg_unit=images/s, then
builder_vs_config=B builder=X config=Y builder_unit=batches/s pymap_us=U pymap4_us=U4 (U: the
map(lambda e: e) overhead per element at P = 1, U4 at P = 4, microseconds).
"""
import glob
import json
import os
import re
import statistics
import shutil
import subprocess
import sys
import tempfile
import time

import sluice
from sluice import data as sd
from sluice import fn as sfn

BIN = os.environ.get("SLUICE_BIN", "build/bin")
HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("SLUICE_SHARED") or os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared"))
ARGS = [a for a in sys.argv[1:] if a != "--quick"]
QUICK = "--quick" in sys.argv[1:] or os.environ.get("SLUICE_BENCH_QUICK", "") not in ("", "0")
N = int(ARGS[0]) if ARGS else (100 if QUICK else 2000)
N_JPEG = 256 if QUICK else 2000   # bench_pipeline's default corpus
REPS = 3
BATCH = 64                        # bench_pipeline's BATCH
WORK = "/tmp/sluice-bench"        # bench_pipeline's work folder (the corpus is shared)

CONFIG = """
pipeline {name} {{
    files "data/train-*.tfrecord"
    interleave cycle=4 block=16 parallel=auto
    shuffle 10000
    map parse_example(image: bytes, label: int64)
        | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255)  parallel=auto
    {batch}
    prefetch auto
    repeat
}}
"""


def c_rate(cfg, name, n):
    out = subprocess.run([os.path.join(BIN, "sluice-stats"), cfg, "--pipeline", name, "--batches", str(n),
                          "--json", "--seed", "1"], check=True, stdout=subprocess.PIPE, text=True).stdout
    st = json.loads(out)["stats"]
    return st["elements"] / st["wall_s"]


def py_rate(cfg, name, n):
    p = sluice.Pipeline(cfg, name, seed=1)
    t0 = time.perf_counter()
    it = iter(p)
    for _ in range(n):
        e = next(it)
        e["image"].shape  # noqa: B018 (touch it)
    dt = time.perf_counter() - t0
    it.close()
    return n / dt


# bench_pipeline.c's build(): the same files, shuffle, functions, batch and prefetch
JPEG_CONFIG = """
pipeline jpeg {{
    files "{rec}/train-*.tfrecord" shuffle=true seed=1
    interleave cycle=4 parallel=0
    shuffle 1024 seed=2
    map parse_example(image/encoded: bytes(as=image), image/class/label: int64(as=label))
        | decode_jpeg(image, channels=3)
        | random_resized_crop(image, 224, scale=[0.08, 1], ratio=[0.75, 1.3333333333])
        | random_flip(image, p=0.5)
        | normalize(image, mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])  parallel=auto
    batch {batch} drop_remainder
    prefetch 2
}}
"""


FASHION_SL = os.path.normpath(os.path.join(HERE, "..", "..", "examples", "fashion.sl"))


def fashion_builder(train):
    """examples/fashion.sl's `train` pipeline, as a tf.data user writes it with sluice.data."""
    return (sd.Dataset.list_files(train, shuffle=False)
            .interleave(sd.TFRecordDataset, cycle_length=4, block_length=16, num_parallel_calls=sd.AUTOTUNE)
            .shuffle(10000, seed=1)
            .map(sfn.parse_example({"image": "bytes", "label": "int64"})
                 | sfn.decode_raw("image", "uint8", (28, 28, 1)) | sfn.scale("image", 1 / 255),
                 num_parallel_calls=sd.AUTOTUNE)
            .batch(128, drop_remainder=True)
            .prefetch(sd.AUTOTUNE))


def batches_rate(make_iter, n):
    """n batches from make_iter(epoch) (epoch after epoch), batches/s, iterator creation included."""
    got, ep, t0 = 0, 0, time.perf_counter()
    while got < n:
        it = make_iter(ep)
        for e in it:
            e["image"].shape  # noqa: B018 (touch it)
            got += 1
            if got == n:
                break
        it.close()
        ep += 1
    return n / (time.perf_counter() - t0)


def builder_vs_config(t):
    """The builder's Fashion pipeline against fashion.sl's; returns the RESULT fields."""
    train = os.path.join(t, "data", "train-*.tfrecord")
    ref = sluice.Pipeline(FASHION_SL, "train", seed=1, set={"pipeline.train.files": f'"{train}"'})
    ds = fashion_builder(train).with_options(_seeded(1))
    built = ds._pipeline()
    res = {"config": [], "builder": []}
    runs = {"config": lambda ep: ref.iter(epoch=ep), "builder": lambda ep: built.iter(epoch=ep)}
    for rep in range(REPS):
        for k in (("config", "builder") if rep % 2 == 0 else ("builder", "config")):  # either one first in turn
            res[k].append(batches_rate(runs[k], N))
    c, b = statistics.median(res["config"]), statistics.median(res["builder"])
    print(f"Fashion train pipeline ({N} batches of 128, {REPS} alternating repetitions): from fashion.sl "
          f"{c:.1f} batches/s (min {min(res['config']):.1f}, max {max(res['config']):.1f}), built with sluice.data "
          f"{b:.1f} batches/s (min {min(res['builder']):.1f}, max {max(res['builder']):.1f}), ratio {b / c:.3f}",
          flush=True)
    return f" builder_vs_config={b / c:.3f} builder={b:.1f} config={c:.1f} builder_unit=batches/s"


def _seeded(seed):
    o = sd.Options()
    o.seed = seed
    return o


def pymap_overhead():
    """map(lambda e: e) per element, microseconds, at num_parallel_calls 1 and 4."""
    m = N * 64

    def run(ds):
        t0 = time.perf_counter()
        for e in ds:
            e["value"].shape  # noqa: B018
        return time.perf_counter() - t0

    out = {}
    for par in (1, 4):
        plain, mapped = [], []
        for _ in range(REPS):
            plain.append(run(sd.Dataset.range(m).batch(128)))
            mapped.append(run(sd.Dataset.range(m).map(lambda e: e, num_parallel_calls=par).batch(128)))
        out[par] = (statistics.median(mapped) - statistics.median(plain)) / m * 1e6
        print(f"map(lambda e: e, num_parallel_calls={par}) over range({m}).batch(128): "
              f"{statistics.median(mapped) * 1e3:.1f} ms against {statistics.median(plain) * 1e3:.1f} ms without: "
              f"{out[par]:.2f} us per element", flush=True)
    return f" pymap_us={out[1]:.2f} pymap4_us={out[4]:.2f}"


def no_result(why):
    """Stop without a RESULT line: an anchor cannot run, and a ratio without it means nothing."""
    print(f"bench_python: {why}; no RESULT line", file=sys.stderr, flush=True)
    sys.exit(1)


def torch_missing():
    """None when torch_loader.py can run, else why not."""
    loader = os.path.join(SHARED, "anchors", "torch_loader.py")
    if not os.path.exists(loader):
        return f"{loader} not found (SLUICE_SHARED, default ../shared beside the sources)"
    r = subprocess.run(["/usr/bin/python3", "-c", "import torch, torchvision, PIL"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        last = (r.stdout.strip().split("\n") or ["?"])[-1]
        return f"/usr/bin/python3 cannot import torch, torchvision and PIL ({last}): install python3-torch " \
               "python3-torchvision python3-pil"
    return None


def jpeg_corpus():
    """(folder of JPEGs, None) or (None, why the comparison cannot run)."""
    d = os.environ.get("SLUICE_BENCH_JPEG_DIR")
    if d:
        return (d, None) if glob.glob(os.path.join(d, "*.jpg")) else (None, f"no *.jpg in {d}")
    d = os.path.join(WORK, f"jpeg-{N_JPEG}")
    if len(glob.glob(os.path.join(d, "*.jpg"))) >= N_JPEG:
        return d, None
    script = os.path.join(SHARED, "anchors", "make_jpeg_corpus.py")
    if not os.path.exists(script):
        return None, f"{SHARED} not found (its anchors make the JPEG corpus and run PyTorch's DataLoader)"
    os.makedirs(WORK, exist_ok=True)
    r = subprocess.run(["/usr/bin/python3", script, d, str(N_JPEG)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        last = r.stdout.strip().split("\n")[-1]
        return None, f"make_jpeg_corpus.py failed ({last}); it needs python3-pil"
    return d, None


def jpeg_records(jpeg_dir, t):
    """The corpus as 8 TFRecord shards (TensorFlow's ImageNet feature names, as bench_pipeline
    writes them), via `sluice-record convert images` on a class-per-folder view of it."""
    view = os.path.join(t, "classes")
    for f in sorted(glob.glob(os.path.join(jpeg_dir, "*.jpg"))):
        label = os.path.basename(f)[-5]  # img00042_2.jpg -> class "2", label 2 (sorted names)
        os.makedirs(os.path.join(view, label), exist_ok=True)
        os.symlink(f, os.path.join(view, label, os.path.basename(f)))
    rec = os.path.join(t, "jpeg-tfrecord")
    subprocess.run([os.path.join(BIN, "sluice-record"), "convert", "images", view, rec, "--shards", "8"],
                   check=True, stdout=subprocess.DEVNULL)
    return rec


def py_jpeg_rate(cfg, epochs=2):
    """Best of `epochs` epochs of sluice.Pipeline, images/s (as bench_pipeline and torch_loader)."""
    p = sluice.Pipeline(cfg, "jpeg", seed=1)
    best = 0.0
    for ep in range(epochs):
        n, t0 = 0, time.perf_counter()
        for e in p.iter(epoch=ep):
            n += e["image"].shape[0]
        best = max(best, n / (time.perf_counter() - t0))
    return best


def torch_rate(jpeg_dir, mode):
    """torch_loader.py's figure (the number after the last '=' of its last line), or None."""
    cmd = ["/usr/bin/python3", os.path.join(SHARED, "anchors", "torch_loader.py"), jpeg_dir, "2", str(BATCH), "2", mode]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = r.stdout.strip().split("\n")
    m = re.search(r"=\s*([0-9.]+)\s*images/s", lines[-1]) if lines else None
    if r.returncode or not m:
        return None, lines[-1] if lines else f"exit {r.returncode}"
    return float(m.group(1)), None


def summary(name, xs):
    return f"{name} median {statistics.median(xs):.1f} (min {min(xs):.1f}, max {max(xs):.1f}) images/s"


def jpeg_vs_torch(t):
    """The JPEG comparison; returns the RESULT fields."""
    jpeg_dir, why = jpeg_corpus()
    if not jpeg_dir:
        no_result(f"the JPEG corpus for the anchor torch_loader.py cannot be made: {why}")
    cfg = os.path.join(t, "jpeg.sl")
    rec = jpeg_records(jpeg_dir, t)
    with open(cfg, "w") as f:
        f.write(JPEG_CONFIG.format(rec=rec, batch=BATCH))
    n_images = len(glob.glob(os.path.join(jpeg_dir, "*.jpg")))
    subprocess.run(f"cat {jpeg_dir}/*.jpg {rec}/*.tfrecord > /dev/null", shell=True)  # page cache, both sides
    print(f"JPEG pipeline ({n_images} images of {jpeg_dir}, batch {BATCH}, crop 224): {REPS} alternating repetitions")
    res = {"python": [], "pil": [], "tensor": []}
    for rep in range(REPS):
        res["python"].append(py_jpeg_rate(cfg))
        line = f"  rep {rep + 1}: sluice.Pipeline {res['python'][-1]:.1f}"
        for mode in ("pil", "tensor"):
            r, err = torch_rate(jpeg_dir, mode)
            if r is None:
                print(line + " images/s", flush=True)
                no_result(f"the anchor torch_loader.py (mode {mode}) failed: {err}")
            res[mode].append(r)
            line += f", torch {mode} {r:.1f}"
        print(line + " images/s", flush=True)
    print("  " + summary("sluice.Pipeline (Python, numpy batches)", res["python"]))
    print("  " + summary("torch DataLoader 2 workers, mode pil", res["pil"]))
    print("  " + summary("torch DataLoader 2 workers, mode tensor", res["tensor"]))
    py = statistics.median(res["python"])
    tp, tt = statistics.median(res["pil"]), statistics.median(res["tensor"])
    print(f"  sluice.Pipeline / torch: {py / tp:.2f} (pil), {py / tt:.2f} (tensor)")
    return f" jpeg_python={py:.1f} torch_pil={tp:.1f} torch_tensor={tt:.1f} jpeg_vs_torch={py / max(tp, tt):.3f}"


T = tempfile.mkdtemp(prefix="sluice-bench-python-")
try:
    subprocess.run([os.path.join(BIN, "sluice-record"), "convert", "fashion-mnist", os.path.join(T, "data"),
                    "--shards", "8"], check=True, stdout=subprocess.DEVNULL)
    builder = builder_vs_config(T) + pymap_overhead()  # no torch needed: printed before its check
    missing = torch_missing()
    if missing:
        no_result(f"the anchor torch_loader.py (PyTorch DataLoader + torchvision) cannot run: {missing}")
    cfg = os.path.join(T, "bench.sl")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(name="batched", batch="batch 128 drop_remainder"))
        f.write(CONFIG.format(name="single", batch=""))
    c1, p1 = c_rate(cfg, "single", N * 32), py_rate(cfg, "single", N * 32)
    print(f"unbatched ({N * 32} elements of 28x28x1): C API {c1:.0f} elements/s, Python {p1:.0f} elements/s, "
          f"ratio {p1 / c1:.3f}")
    c, p = c_rate(cfg, "batched", N), py_rate(cfg, "batched", N)
    print(f"batch 128 ({N} batches): C API {c:.1f} batches/s, Python {p:.1f} batches/s", flush=True)
    extra = jpeg_vs_torch(T)
    print(f"RESULT bench_python ratio={p / c:.3f} sluice={p:.1f} anchor={c:.1f} unit=batches/s{extra} jpeg_unit=images/s"
          f"{builder}")
finally:
    shutil.rmtree(T, ignore_errors=True)
