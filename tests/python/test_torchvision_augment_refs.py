#!/usr/bin/python3
"""Sluice's augment ops (rand_augment / trivial_augment's 14 ops) against torchvision on fresh
random images: regenerates tests/data/torchvision/gen_refs_augment.py's references with every
magnitude bin of both policies (--all), new seeds and three sizes into a temporary folder, and
runs test_fn_augment on it (argv[1]); it compares each op within 1 per value and prints the
worst difference per op. The sibling of test_torchvision_refs.py (the colour ops).

Skipped (exit 77, saying why) when torch or torchvision is not importable (Debian:
apt-get install python3-torchvision) or test_fn_augment is not built; the stored references
in tests/data/torchvision/augment are checked by the C test in every build anyway."""
import os
import subprocess
import sys
import tempfile

SRC = os.environ.get("SLUICE_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TESTS_BIN = os.environ.get("SLUICE_TESTS_BIN", "build/tests")


def main():
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
        import torchvision
    except ImportError as e:
        print(f"skipped: torchvision is not importable ({e}); apt-get install python3-torchvision")
        return 77
    sys.path.insert(0, os.path.join(SRC, "tests", "data", "torchvision"))
    import gen_refs_augment

    prog = os.path.join(TESTS_BIN, "test_fn_augment")
    if not os.path.exists(prog):
        print(f"skipped: test_fn_augment is not built in {TESTS_BIN}")
        return 77
    seed = int.from_bytes(os.urandom(4), "little")
    fails = 0
    for k, (h, w) in enumerate([(23, 17), (64, 48), (97, 131)]):
        with tempfile.TemporaryDirectory(prefix="sluice-tvaug-") as d:
            path, n, size = gen_refs_augment.run(d, seed + k, True, h, w)
            print(f"seed {seed + k}, {h}x{w}: {n} records ({size} bytes), torchvision {torchvision.__version__}")
            r = subprocess.run([prog, d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
            print(r.stdout.rstrip())
            if r.returncode != 0:
                print(f"FAIL test_fn_augment on seed {seed + k} ({h}x{w}): exit {r.returncode}; reproduce: "
                      f"gen_refs_augment.py --all --out DIR --seed {seed + k} --size {h}x{w}; {prog} DIR")
                fails += 1
    print("FAILED" if fails else "ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
