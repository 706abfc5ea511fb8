#!/usr/bin/python3
"""Sluice's image functions against torchvision on fresh random images: regenerates the
torchvision references (tests/data/torchvision/gen_refs.py) with new seeds and sizes into a
temporary folder and runs the C test programs that read them (test_fn_color, and the other
test_fn_* programs listed below that take a references folder as argv[1]) on it; each
program compares every op within 1 per value and prints the worst difference per op.

Skipped (exit 77, saying why) when torch or torchvision is not importable (Debian:
apt-get install python3-torchvision) or the test programs are not built; the stored
references in tests/data/torchvision are checked by the C tests in every build anyway."""
import os
import subprocess
import sys
import tempfile

SRC = os.environ.get("SLUICE_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TESTS_BIN = os.environ.get("SLUICE_TESTS_BIN", "build/tests")
# the C programs that read a references folder given as argv[1]
PROGRAMS = ["test_fn_color"]


def main():
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError as e:
        print(f"skipped: torchvision is not importable ({e}); apt-get install python3-torchvision")
        return 77
    sys.path.insert(0, os.path.join(SRC, "tests", "data", "torchvision"))
    import gen_refs

    progs = [os.path.join(TESTS_BIN, p) for p in PROGRAMS if os.path.exists(os.path.join(TESTS_BIN, p))]
    if not progs:
        print(f"skipped: none of {PROGRAMS} is built in {TESTS_BIN}")
        return 77
    seed = int.from_bytes(os.urandom(4), "little")
    fails = 0
    for k, (h, w) in enumerate([(23, 17), (64, 48), (131, 97)]):
        with tempfile.TemporaryDirectory(prefix="sluice-tvref-") as d:
            path, n, size = gen_refs.run(d, seed + k, h, w)
            print(f"seed {seed + k}, {h}x{w}: {n} records ({size} bytes), torchvision {torchvision.__version__}")
            for prog in progs:
                r = subprocess.run([prog, d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   timeout=300)
                print(r.stdout.rstrip())
                if r.returncode != 0:
                    print(f"FAIL {os.path.basename(prog)} on seed {seed + k} ({h}x{w}): exit {r.returncode}; "
                          f"reproduce: gen_refs.py --out DIR --seed {seed + k} --size {h}x{w}; {prog} DIR")
                    fails += 1
    print("FAILED" if fails else "ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
