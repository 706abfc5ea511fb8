#!/usr/bin/python3
"""Interoperability of Sluice's TFRecord/Example code with an independent implementation.

Run with Debian's /usr/bin/python3 (python3-protobuf 4.21, python3-crc32c); TensorFlow is
not needed. This file holds its own TFRecord reader and writer (framing plus masked
CRC32C from the `crc32c` module) and builds tf.train.Example at run time from a
FileDescriptorProto, so nothing here shares code with Sluice. Checks:

  1. files Sluice writes (`sluice-record convert fashion-mnist --shards 2`) read back in
     Python: every CRC valid, 60,000 / 10,000 records in contiguous blocks, and every
     record's label and image bytes equal to the idx source files;
  2. files Python writes (plain, gzip, zlib; every feature kind, packed and unpacked lists,
     empty lists, odd floats, unicode keys, repeated keys, unknown fields) pass
     `sluice-record verify` and `sluice-record cat --json` prints, line for line, what
     json_format prints for each record;
  3. the shared sample files other writers made: `cat --json` equals json_format's output.

About map order: Python's C++-backed maps iterate in hash order, which is neither the
order on the wire nor stable across parses, while Sluice prints features in order of first
appearance on the wire. So the reference line is json_format's own JSON object
(MessageToDict, the same printer MessageToJson uses) with the feature map put in wire order,
dumped exactly as MessageToJson(msg, indent=None) dumps it (json.dumps defaults). For
records with a single feature the test also checks that this equals
MessageToJson(msg, indent=None) character for character.

Exit 0 on success, 1 on the first failure (with a diff), 77 when a module is missing.
"""
import base64
import gzip
import json
import os
import struct
import subprocess
import sys
import zlib

try:
    import crc32c
    from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
except ImportError as e:  # the only reason to skip
    print(f"skipped: python module missing: {e}")
    sys.exit(77)

if not hasattr(crc32c, "crc32c"):
    print("skipped: the crc32c module has no crc32c() function (too old)")
    sys.exit(77)

from sluice_testlib import check, fail, frame, read_tfrecord, run_checks  # noqa: E402

BIN = os.environ.get("SLUICE_BIN", "")
TOOL = os.path.join(BIN, "sluice-record")
SHARED = os.environ.get("SLUICE_SHARED", "/work/shared")
SAMPLES = os.path.join(SHARED, "data", "tfrecord-samples")
FMNIST = "/usr/share/datasets/fashion-mnist"


# ---------------------------------------------------------------- TFRecord framing

def write_tfrecord(path, records, compression="none"):
    raw = b"".join(frame(r) for r in records)
    if compression == "gzip":
        raw = gzip.compress(raw)
    elif compression == "zlib":
        raw = zlib.compress(raw)
    elif compression != "none":
        raise ValueError(compression)
    with open(path, "wb") as f:
        f.write(raw)


# ---------------------------------------------------------------- tf.train.Example

def build_example_classes():
    """Example message classes from descriptors written here: the packed one (as
    TensorFlow's feature.proto) and one whose scalar lists are written unpacked."""
    factory_pool = descriptor_pool.DescriptorPool()
    F = descriptor_pb2.FieldDescriptorProto
    classes = {}
    for package, packed in (("tensorflow", True), ("unpacked", False)):
        fdp = descriptor_pb2.FileDescriptorProto(
            name=f"{package}_example.proto", package=package, syntax="proto3")

        def message(name, fields):
            m = fdp.message_type.add(name=name)
            for fname, num, typ, tname, pk in fields:
                f = m.field.add(name=fname, number=num, label=F.LABEL_REPEATED, type=typ)
                if tname:
                    f.type_name = tname
                f.options.packed = pk
            return m

        message("BytesList", [("value", 1, F.TYPE_BYTES, None, False)])
        message("FloatList", [("value", 1, F.TYPE_FLOAT, None, packed)])
        message("Int64List", [("value", 1, F.TYPE_INT64, None, packed)])
        feat = fdp.message_type.add(name="Feature")
        feat.oneof_decl.add(name="kind")
        for i, (fname, tname) in enumerate(
                (("bytes_list", "BytesList"), ("float_list", "FloatList"),
                 ("int64_list", "Int64List"))):
            feat.field.add(name=fname, number=i + 1, label=F.LABEL_OPTIONAL,
                           type=F.TYPE_MESSAGE, type_name=f".{package}.{tname}", oneof_index=0)
        feats = fdp.message_type.add(name="Features")
        feats.field.add(name="feature", number=1, label=F.LABEL_REPEATED, type=F.TYPE_MESSAGE,
                        type_name=f".{package}.Features.FeatureEntry")
        entry = feats.nested_type.add(name="FeatureEntry")
        entry.field.add(name="key", number=1, label=F.LABEL_OPTIONAL, type=F.TYPE_STRING)
        entry.field.add(name="value", number=2, label=F.LABEL_OPTIONAL, type=F.TYPE_MESSAGE,
                        type_name=f".{package}.Feature")
        entry.options.map_entry = True
        ex = fdp.message_type.add(name="Example")
        ex.field.add(name="features", number=1, label=F.LABEL_OPTIONAL, type=F.TYPE_MESSAGE,
                     type_name=f".{package}.Features")
        factory_pool.Add(fdp)
    factory = message_factory.MessageFactory(factory_pool)
    for package in ("tensorflow", "unpacked"):
        classes[package] = factory.GetPrototype(
            factory_pool.FindMessageTypeByName(f"{package}.Example"))
    return classes["tensorflow"], classes["unpacked"]


Example, UnpackedExample = build_example_classes()


def varint(buf, pos):
    val, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        val |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return val, pos


def fields(buf):
    """(field number, wire type, value) of each field of a message; value is bytes for
    length-delimited fields."""
    pos = 0
    while pos < len(buf):
        tag, pos = varint(buf, pos)
        num, wt = tag >> 3, tag & 7
        if wt == 0:
            val, pos = varint(buf, pos)
        elif wt == 1:
            val, pos = buf[pos:pos + 8], pos + 8
        elif wt == 2:
            n, pos = varint(buf, pos)
            val, pos = buf[pos:pos + n], pos + n
        elif wt == 5:
            val, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wt}")
        yield num, wt, val


def wire_key_order(record):
    """Feature keys in order of first appearance on the wire."""
    order, seen = [], set()
    for num, wt, features in fields(record):
        if num != 1 or wt != 2:
            continue
        for fnum, fwt, entry in fields(features):
            if fnum != 1 or fwt != 2:
                continue
            key = ""
            for enum_, ewt, v in fields(entry):
                if enum_ == 1 and ewt == 2:
                    key = v.decode("utf-8")
            if key not in seen:
                seen.add(key)
                order.append(key)
    return order


def reference_json(record):
    """json_format's JSON for one serialized Example, feature map in wire order."""
    msg = Example()
    msg.ParseFromString(record)
    js = json_format.MessageToDict(msg)
    fmap = js.get("features", {}).get("feature")
    if fmap is not None:
        order = wire_key_order(record)
        if sorted(order) != sorted(fmap):
            fail(f"wire keys {order} != parsed keys {list(fmap)}")
        js["features"]["feature"] = {k: fmap[k] for k in order}
        if len(order) == 1:  # order cannot matter: MessageToJson itself must agree
            direct = json_format.MessageToJson(msg, indent=None)
            if direct != json.dumps(js):
                fail(f"reference construction differs from MessageToJson:\n{direct}\n"
                     f"{json.dumps(js)}")
    return json.dumps(js)


def show_mismatch(where, got, want):
    i = 0
    while i < min(len(got), len(want)) and got[i] == want[i]:
        i += 1
    lo = max(0, i - 60)
    fail(f"{where}: sluice and python differ at character {i}\n"
         f"  sluice: ...{got[lo:i + 60]}...\n"
         f"  python: ...{want[lo:i + 60]}...\n"
         f"  full sluice line: {got[:2000]}\n"
         f"  full python line: {want[:2000]}")


def run_tool(*args, want_rc=0):
    p = subprocess.run([TOOL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != want_rc:
        fail(f"sluice-record {' '.join(args)} exited {p.returncode}, expected {want_rc}\n"
             f"stderr: {p.stderr.decode(errors='replace')[:2000]}")
    return p.stdout.decode("utf-8"), p.stderr.decode("utf-8", errors="replace")


def compare_cat(path, records, label):
    out, _ = run_tool("cat", "--json", path)
    lines = out.split("\n")
    if lines[-1] != "":
        fail(f"{label}: cat --json output does not end with a newline")
    lines = lines[:-1]
    if len(lines) != len(records):
        fail(f"{label}: cat --json printed {len(lines)} lines for {len(records)} records")
    for i, (got, rec) in enumerate(zip(lines, records)):
        want = reference_json(rec)
        if got != want:
            show_mismatch(f"{label} record {i}", got, want)


# ---------------------------------------------------------------- 1. Sluice -> Python

def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    (magic,) = struct.unpack(">I", raw[:4])
    rank = magic & 0xFF
    dims = struct.unpack(f">{rank}I", raw[4:4 + 4 * rank])
    return dims, raw[4 + 4 * rank:]


def check_sluice_written(tmp):
    check("convert fashion-mnist --shards 2 and read every shard in Python")
    out_dir = os.path.join(tmp, "fm")
    run_tool("convert", "fashion-mnist", out_dir, "--shards", "2")
    for split, prefix, n in (("train", "train", 60000), ("test", "t10k", 10000)):
        dims, images = read_idx(os.path.join(FMNIST, f"{prefix}-images-idx3-ubyte.gz"))
        ldims, labels = read_idx(os.path.join(FMNIST, f"{prefix}-labels-idx1-ubyte.gz"))
        if dims[0] != n or ldims[0] != n:
            fail(f"idx {prefix}: {dims[0]} images, {ldims[0]} labels, expected {n}")
        pix = dims[1] * dims[2]
        idx = 0
        for shard in range(2):
            path = os.path.join(out_dir, f"{split}-{shard:05d}-of-00002.tfrecord")
            recs = read_tfrecord(path, compressed=True)  # checks every CRC
            if len(recs) != n // 2:
                fail(f"{path}: {len(recs)} records, expected {n // 2}")
            for rec in recs:
                msg = Example()
                msg.ParseFromString(rec)
                feats = msg.features.feature
                if sorted(feats) != ["image", "label"]:
                    fail(f"{path}: record {idx} has features {sorted(feats)}")
                lab = list(feats["label"].int64_list.value)
                img = list(feats["image"].bytes_list.value)
                if lab != [labels[idx]]:
                    fail(f"{split} record {idx}: label {lab}, idx file says {labels[idx]}")
                if img != [images[idx * pix:(idx + 1) * pix]]:
                    fail(f"{split} record {idx}: image bytes differ from the idx file")
                idx += 1
        if idx != n:
            fail(f"{split}: {idx} records in all, expected {n}")
        print(f"  {split}: {n} records, every CRC, label and image equal to the idx file")


# ---------------------------------------------------------------- 2. Python -> Sluice

def ex_of(cls, spec):
    """Serialized Example from [(key, kind, values)]; kind 'none' makes a Feature with no
    list, values None an empty list that is present."""
    m = cls()
    for key, kind, values in spec:
        f = m.features.feature[key]
        if kind == "none":
            continue
        lst = getattr(f, f"{kind}_list")
        lst.SetInParent()
        if values:
            lst.value.extend(values)
    return m.SerializeToString()


def python_records():
    odd_floats = [0.0, -0.0, 1.0, 0.1, 3.14, 1e30, -1e-30, 123456789.0, 1e-5, 16777216.0,
                  1e16, 1e15, 0.3333333432674408, 3.4028234663852886e38,
                  1.401298464324817e-45, 1.1754943508222875e-38, float("nan"),
                  float("inf"), float("-inf"), 2.5, 100.0, 65504.0, 7e-8]
    recs = [
        ex_of(Example, [("int_feature", "int64", [42])]),
        ex_of(Example, [("float_feature", "float", [3.14])]),
        ex_of(Example, [("byte_feature", "bytes", [b"@ABCD"])]),
        ex_of(Example, [("i", "int64", [0, 1, -1, 2**63 - 1, -2**63, 300, -300])]),
        ex_of(Example, [("f", "float", odd_floats)]),
        ex_of(Example, [("b", "bytes", [b"", bytes(range(256)), b"x" * 1000, b"ab", b"abc"])]),
        ex_of(Example, [("empty_int64", "int64", None)]),
        ex_of(Example, [("empty_float", "float", None)]),
        ex_of(Example, [("empty_bytes", "bytes", None)]),
        ex_of(Example, [("no_kind", "none", None)]),
        ex_of(UnpackedExample, [("unpacked_i", "int64", [1, -2, 3, 2**40])]),
        ex_of(UnpackedExample, [("unpacked_f", "float", [1.5, -0.25, float("inf")])]),
        ex_of(Example, [("\u00fc", "int64", [1])]),
        ex_of(Example, [("\u043a\u043b\u044e\u0447", "bytes", [b"v"])]),
        ex_of(Example, [("\u65e5\u672c/\U0001F600", "float", [1.0])]),
        ex_of(Example, [("quote\" back\\slash\ttab\nnl\x01ctl\x7fdel /", "int64", [7])]),
        ex_of(Example, [("", "int64", [5])]),
        b"",  # an empty Example: {}
        b"\x0a\x00",  # features present but empty: {"features": {}}
        b"\x0a\x00\x0a\x00",  # ... given twice (merged)
        b"\x12\x03abc",  # only an unknown field: {}
        # several features: printed in wire order
        ex_of(Example, [("zeta", "int64", [1]), ("alpha", "float", [2.0]),
                        ("mid", "bytes", [b"m"]), ("b", "none", None),
                        ("a", "int64", None), ("label", "int64", [3]),
                        ("image", "bytes", [b"\x00\x01"])]),
        ex_of(UnpackedExample, [("x", "int64", [1, 2]), ("y", "float", [0.5])]),
    ]
    # A key given twice (two serialized Examples concatenated merge): the last entry wins,
    # the position is the first appearance.
    recs.append(ex_of(Example, [("k", "int64", [1]), ("other", "int64", [2])]) +
                ex_of(Example, [("k", "bytes", [b"second"])]))
    # Unknown fields (field 5 of Example, as a varint and as bytes) are skipped.
    recs.append(ex_of(Example, [("u", "int64", [9])]) + b"\x28\x07" + b"\x2a\x03abc")
    return recs


def check_python_written(tmp):
    recs = python_records()
    for comp in ("none", "gzip", "zlib"):
        path = os.path.join(tmp, f"python-{comp}.tfrecord")
        write_tfrecord(path, recs, comp)
        if read_tfrecord(path, compressed=True) != recs:
            fail("the Python reader does not read back what the Python writer wrote")
        check(f"Python-written {comp} file: sluice-record verify exit 0")
        out, _ = run_tool("verify", path)
        if out != f"{path}: OK, {len(recs)} records\n":
            fail(f"verify printed {out!r}")
        out, _ = run_tool("verify", "--compression", comp, path)
        check(f"Python-written {comp} file: cat --json equals json_format, {len(recs)} lines")
        compare_cat(path, recs, f"python-{comp}")

    check("records that are not Examples: inspect counts them, cat stops at the first")
    path = os.path.join(tmp, "python-not-examples.tfrecord")
    mixed = [recs[0], b"\xff\xff\xff", recs[3], b"\x0b"]
    write_tfrecord(path, mixed)
    out, _ = run_tool("inspect", path)
    if "  examples      2 (not Examples: 2)\n" not in out:
        fail(f"inspect did not count 2 non-Examples:\n{out}")
    second = 16 + len(mixed[0])
    out, err = run_tool("cat", "--json", path, want_rc=1)
    if out != reference_json(recs[0]) + "\n":
        fail(f"cat printed {out!r} before the bad record")
    if f"{path}: byte {second}: record is not a tf.train.Example" not in err:
        fail(f"cat's message does not name the record's offset {second}: {err}")

    check("a Python-written file with a flipped data byte: verify exit 1 naming the offset")
    path = os.path.join(tmp, "python-damaged.tfrecord")
    raw = bytearray(b"".join(frame(r) for r in recs[:3]))
    second = 16 + len(recs[0])
    raw[second + 12 + 3] ^= 0x40
    with open(path, "wb") as f:
        f.write(raw)
    _, err = run_tool("verify", path, want_rc=1)
    if f"{path}: byte {second}:" not in err:
        fail(f"verify's message does not name '{path}: byte {second}:': {err}")


# ---------------------------------------------------------------- 3. other writers

def check_samples():
    for root, _, files in sorted(os.walk(SAMPLES)):
        if os.path.basename(root) == "corrupt":
            continue
        for name in sorted(files):
            if name.endswith(".md"):
                continue
            path = os.path.join(root, name)
            recs = read_tfrecord(path, compressed=True)
            check(f"sample {os.path.relpath(path, SAMPLES)}: {len(recs)} records, "
                  "cat --json equals json_format")
            compare_cat(path, recs, os.path.relpath(path, SAMPLES))


def main():
    return run_checks("test_python_interop", "sluice-interop-",
                      [check_python_written, lambda tmp: check_samples(), check_sluice_written], need=(TOOL,))


if __name__ == "__main__":
    sys.exit(main())
