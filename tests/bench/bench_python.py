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

    tests/bench/run bench_python [N_BATCHES]     (default 2000)

Ends with: RESULT bench_python ratio=R sluice=X anchor=Y unit=elements/s (R = X / Y).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import sluice

BIN = os.environ.get("SLUICE_BIN", "build/bin")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000

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


T = tempfile.mkdtemp(prefix="sluice-bench-python-")
try:
    subprocess.run([os.path.join(BIN, "sluice-record"), "convert", "fashion-mnist", os.path.join(T, "data"),
                    "--shards", "8"], check=True, stdout=subprocess.DEVNULL)
    cfg = os.path.join(T, "bench.sl")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(name="batched", batch="batch 128 drop_remainder"))
        f.write(CONFIG.format(name="single", batch=""))
    c1, p1 = c_rate(cfg, "single", N * 32), py_rate(cfg, "single", N * 32)
    print(f"unbatched ({N * 32} elements of 28x28x1): C API {c1:.0f} elements/s, Python {p1:.0f} elements/s, "
          f"ratio {p1 / c1:.3f}")
    c, p = c_rate(cfg, "batched", N), py_rate(cfg, "batched", N)
    print(f"batch 128 ({N} batches): C API {c:.1f} batches/s, Python {p:.1f} batches/s")
    print(f"RESULT bench_python ratio={p / c:.3f} sluice={p:.1f} anchor={c:.1f} unit=elements/s")
finally:
    shutil.rmtree(T, ignore_errors=True)
