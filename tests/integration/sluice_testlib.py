"""Shared by the Python integration tests (a module, not a test): failure reporting, the
TFRecord framing (masked CRC32C from the `crc32c` module, imported by the caller first so
that a missing module is its skip), a small Fashion-MNIST conversion, and the main() frame
that runs checks in a temporary folder.

    from sluice_testlib import Failure, check, fail, read_tfrecord
    sys.exit(run_checks("test_x", "sluice-x-", [check_a, check_b], need=[TOOL]))
"""
import gzip
import os
import struct
import subprocess
import tempfile
import zlib


class Failure(Exception):
    pass


def check(msg):
    print(f"check: {msg}", flush=True)


def fail(msg):
    raise Failure(msg)


def expect_same(got, want, differs, counted):
    """fail() unless the lists GOT and WANT are equal: with differs(g, w) at the first pair
    that differs, else (one is longer) with counted(len(got), len(want))."""
    if got != want:
        for g, w in zip(got, want):
            if g != w:
                fail(differs(g, w))
        fail(counted(len(got), len(want)))


def masked_crc(data):
    import crc32c
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data):
    """One TFRecord: length, its masked CRC, the data, its masked CRC."""
    head = struct.pack("<Q", len(data))
    return head + struct.pack("<I", masked_crc(head)) + data + struct.pack("<I", masked_crc(data))


def read_tfrecord(path, compressed=False):
    """All records of the TFRecord file PATH, checking both CRCs of each; fail() names PATH
    and the byte offset of the first bad record. COMPRESSED: gzip or zlib is detected by
    its magic bytes (else the file is read as it is)."""
    with open(path, "rb") as f:
        raw = f.read()
    if compressed and raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    elif compressed and len(raw) >= 2 and raw[0] & 0x0F == 8 and (raw[0] * 256 + raw[1]) % 31 == 0:
        raw = zlib.decompress(raw)
    out, off = [], 0
    while off < len(raw):
        if off + 12 > len(raw):
            fail(f"{path}: byte {off}: truncated record header")
        head = raw[off:off + 8]
        (n,) = struct.unpack("<Q", head)
        if masked_crc(head) != struct.unpack("<I", raw[off + 8:off + 12])[0]:
            fail(f"{path}: byte {off}: length CRC mismatch")
        if off + 16 + n > len(raw):
            fail(f"{path}: byte {off}: truncated record data")
        data = raw[off + 12:off + 12 + n]
        if masked_crc(data) != struct.unpack("<I", raw[off + 12 + n:off + 16 + n])[0]:
            fail(f"{path}: byte {off}: data CRC mismatch")
        out.append(data)
        off += 16 + n
    return out


def convert_fashion(bin_dir, out, shards, limit):
    """sluice-record convert fashion-mnist OUT --shards SHARDS --limit LIMIT (raises
    CalledProcessError when it fails)."""
    subprocess.run([os.path.join(bin_dir, "sluice-record"), "convert", "fashion-mnist", out,
                    "--shards", str(shards), "--limit", str(limit)], check=True, stdout=subprocess.DEVNULL)


def run_checks(name, prefix, checks, need=(), env="SLUICE_BIN"):
    """main() of a test: each program in NEED must be built (else: set ENV), then each check(tmp) runs in
    one temporary folder (prefix PREFIX). Returns the exit status: 0 when all passed
    (prints PASS: NAME), 1 on the first Failure (prints it) or a program not built."""
    for b in need:
        if not os.access(b, os.X_OK):
            print(f"FAIL: {b} is not built (set {env})")
            return 1
    try:
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            for c in checks:
                c(tmp)
    except Failure as e:
        print(f"FAIL: {e}")
        return 1
    print(f"PASS: {name}")
    return 0
