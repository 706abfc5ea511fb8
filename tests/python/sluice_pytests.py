"""Shared by the Python module's tests, tests/python/test_*.py (a module, not a test): the
skip checks, pass/fail accounting and a Fashion-MNIST conversion.

    from sluice_pytests import BIN, convert_fashion, fail, finish, ok, require, require_modules
    np, sluice, crc32c = require_modules()  # exit 77 (skipped) when one is not importable
    require("sluice-record")      # exit 77 (skipped) when a tool or the idx files are missing
    ok("..."); fail("...")         # fail() counts; the test goes on
    finish()                       # exit 1 if anything failed, else 0
"""
import os
import subprocess
import sys

BIN = os.environ.get("SLUICE_BIN", "build/bin")
FM = "/usr/share/datasets/fashion-mnist"
fails = 0


def require_modules():
    """numpy, the sluice module and crc32c, imported; exits 77 (skipped, saying why) when the
    module (or numpy) or python3-crc32c is not importable."""
    try:
        import numpy
        import sluice
    except ImportError as e:
        print(f"skipped: the sluice Python module is not importable ({e}); build the target sluice_python "
              "(needs python3-dev and python3-numpy) and set PYTHONPATH=build/python")
        sys.exit(77)
    try:
        import crc32c
    except ImportError:
        print("skipped: python3-crc32c is not installed")
        sys.exit(77)
    return numpy, sluice, crc32c


def require(*tools):
    """Exit 77 (skipped, saying why) unless every TOOL is built in BIN and Debian's
    Fashion-MNIST idx files are in FM."""
    for tool in tools:
        if not os.access(os.path.join(BIN, tool), os.X_OK):
            print(f"skipped: {BIN}/{tool} is not built")
            sys.exit(77)
    if not os.path.exists(os.path.join(FM, "train-labels-idx1-ubyte.gz")):
        print(f"skipped: no Fashion-MNIST idx files in {FM}")
        sys.exit(77)


def ok(msg):
    print(f"ok   {msg}")


def fail(msg):
    global fails
    fails += 1
    print(f"FAIL: {msg}")


def convert_fashion(out, shards, limit=None):
    """sluice-record convert fashion-mnist OUT --shards SHARDS [--limit LIMIT] (raises
    CalledProcessError when it fails)."""
    cmd = [os.path.join(BIN, "sluice-record"), "convert", "fashion-mnist", out, "--shards", str(shards)]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def finish():
    """Prints the count of failures and exits: 1 if there were any, else 0."""
    print(f"{'FAILED' if fails else 'passed'}: {fails} failure(s)")
    sys.exit(1 if fails else 0)
