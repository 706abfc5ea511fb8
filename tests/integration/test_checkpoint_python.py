#!/usr/bin/python3
"""The trainer's files read and written by independent Python code (Debian's /usr/bin/python3
with python3-numpy, python3-protobuf and python3-crc32c; no `safetensors`, TensorFlow or
TensorBoard package needed):

  1. a safetensors file Sluice writes (`test_safetensors --write-sample DIR`) loads with
     json + numpy.frombuffer, as Hugging Face's loader reads it: 8-byte length, JSON header
     padded to 8 bytes, offsets tiling the data section, every tensor aligned to its
     element size, every value and metadata string as written;
  2. a safetensors file Python writes (every dtype, a layout that leaves tensors
     misaligned, unicode names, metadata) reads back through Sluice (`--dump`) with the
     same names, dtypes, shapes, bytes and metadata;
  3. an event file Sluice writes (`test_tfevents --write-sample DIR`) is named
     events.out.tfevents.<10-digit time>.<hostname>, every TFRecord CRC is valid, and every
     record parses as a tensorflow.Event (message classes built here at run time from a
     FileDescriptorProto): first file_version "brain.Event:2", then the scalars written;
  4. an event file Python writes (graph_def, several values per summary, an image value,
     an unknown field) reads through Sluice's reader (`--dump`) as the expected entries;
  5. checksums (sluice/safetensors.h): a file Sluice writes with them
     (`--write-sample-crc DIR`) still loads with json + numpy, and its "crc32c:NAME" and
     "crc32c" entries equal CRC32Cs computed here (a pure-Python CRC32C, so the spec is
     checked independently); a file Python writes with checksums (entries in another
     order) verifies in Sluice (`--verify`), and one changed byte is then caught.

The helper programs come from $SLUICE_TESTS_BIN (the build's tests/ folder).
Exit 0 on success, 1 on the first failure, 77 when a Python module is missing.
"""
import json
import os
import re
import socket
import struct
import subprocess
import sys

try:
    import crc32c
    import numpy as np
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError as e:  # the only reason to skip
    print(f"skipped: python module missing: {e}")
    sys.exit(77)

from sluice_testlib import Failure, check, expect_same, fail, frame, read_tfrecord, run_checks  # noqa: E402,F401 (Failure: for test_train_crash.py)

TESTS_BIN = os.environ.get("SLUICE_TESTS_BIN", "")
ST_BIN = os.path.join(TESTS_BIN, "test_safetensors")
EV_BIN = os.path.join(TESTS_BIN, "test_tfevents")


def run(*args):
    p = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        fail(f"{' '.join(args)} exited {p.returncode}\nstderr: {p.stderr.decode(errors='replace')}")
    return p.stdout.decode("utf-8")


# ---------------------------------------------------------------- safetensors

NP_DTYPE = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8",
            "I32": "<i4", "I16": "<i2", "I8": "i1", "U32": "<u4", "U16": "<u2", "U8": "u1",
            "BOOL": "?"}


def load_safetensors(path):
    """(tensors {name: np.ndarray}, metadata, header, data offset), checking the layout."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        fail(f"{path}: header length {n} past the end ({len(raw)} bytes)")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    pos = 0
    for b, e, k in spans:
        if b != pos:
            fail(f"{path}: tensor {k} begins at {b}, previous data ends at {pos}")
        pos = e
    if pos != len(data):
        fail(f"{path}: tensors cover {pos} of {len(data)} data bytes")
    out = {}
    for k, v in header.items():
        b, e = v["data_offsets"]
        dt = np.dtype(NP_DTYPE[v["dtype"]])
        arr = np.frombuffer(data[b:e], dtype=dt).reshape(v["shape"])
        out[k] = arr
    return out, meta, header, 8 + n


def expected_sample():
    """The values test_safetensors --write-sample writes, computed independently."""
    i = np.arange
    return {
        "u8": (np.array([k * 40 for k in range(7)], dtype="u1"), "U8"),
        "f32": ((i(12, dtype="<f4") * np.float32(0.5) - np.float32(3)).reshape(3, 4), "F32"),
        "bool": (np.array([True, False, True]), "BOOL"),
        "f64": ((i(6, dtype="<f8") * 1.25 - 2).reshape(2, 3), "F64"),
        "f16": (np.array([1.0, -2.0, 0.5, np.inf, 0.0], dtype="<f2"), "F16"),
        "bf16": (np.array([0x3F80, 0xC040, 0x4049, 0x0000], dtype="<u2").reshape(2, 2), "BF16"),
        "i64": (np.array([-1, 1 << 40, -(1 << 63)], dtype="<i8"), "I64"),
        "i32": (np.array([-7, 0, 7, 2**31 - 1], dtype="<i4").reshape(2, 2), "I32"),
        "i16": (np.array([-300, 300, -32768], dtype="<i2"), "I16"),
        "i8": (np.array([-128, -1, 0, 127], dtype="i1"), "I8"),
        "u32": (np.array([4000000000], dtype="<u4"), "U32"),
        "u16": (np.array([0, 65535], dtype="<u2"), "U16"),
        "empty": (np.zeros((0, 4), dtype="<f4"), "F32"),
        "scalar": (np.array(42.5, dtype="<f4"), "F32"),
        "layer.0/w \"q\" \u00fc": (np.array([-128, -1], dtype="i1").reshape(1, 1, 2), "I8"),
    }


EXPECTED_META = {"step": "1234", "format": "pt",
                 "note": "quote \" backslash \\ tab\t newline\n \u00fcnicode \u65e5", "empty": ""}


def check_sluice_safetensors(tmp):
    check("test_safetensors --write-sample: loads with json + numpy, values as written")
    run(ST_BIN, "--write-sample", tmp)
    path = os.path.join(tmp, "sample.safetensors")
    tensors, meta, header, data_start = load_safetensors(path)
    if data_start % 8:
        fail(f"data starts at byte {data_start}, not a multiple of 8")
    if meta != EXPECTED_META:
        fail(f"metadata {meta!r} != {EXPECTED_META!r}")
    want = expected_sample()
    if sorted(tensors) != sorted(want):
        fail(f"tensor names {sorted(tensors)} != {sorted(want)}")
    for name, (arr, dtype) in want.items():
        got = tensors[name]
        if header[name]["dtype"] != dtype:
            fail(f"{name}: dtype {header[name]['dtype']}, expected {dtype}")
        if list(got.shape) != list(arr.shape):
            fail(f"{name}: shape {got.shape}, expected {arr.shape}")
        if got.tobytes() != arr.astype(got.dtype).tobytes():
            fail(f"{name}: values {got!r}, expected {arr!r}")
        if (data_start + header[name]["data_offsets"][0]) % got.dtype.itemsize:
            fail(f"{name}: data not aligned to {got.dtype.itemsize} bytes in the file")
    print(f"  {len(want)} tensors and {len(meta)} metadata entries equal")


def crc32c_py(data, crc=0):
    """CRC32C (Castagnoli, reflected 0x82F63B78), bit by bit: slow, but independent."""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def header_crc(meta, header):
    """The "crc32c" entry's value: the canonical form of sluice/safetensors.h."""
    buf = b""
    for k in sorted(meta, key=lambda k: k.encode("utf-8")):
        if k != "crc32c":
            buf += b"M" + k.encode("utf-8") + b"\0" + meta[k].encode("utf-8") + b"\0"
    for name in sorted(header, key=lambda k: k.encode("utf-8")):
        v = header[name]
        buf += (b"T" + name.encode("utf-8") + b"\0" + v["dtype"].encode() + b"\0" +
                ",".join(str(d) for d in v["shape"]).encode() + b"\0")
    return f"{crc32c_py(buf):08x}"


def check_checksums(tmp):
    check("checksums: Sluice's verify in Python, Python's in Sluice (--verify)")
    if f"{crc32c_py(b'123456789'):08x}" != "e3069283":
        fail("the pure-Python CRC32C is wrong")
    run(ST_BIN, "--write-sample-crc", tmp)
    path = os.path.join(tmp, "sample_crc.safetensors")
    tensors, meta, header, data_start = load_safetensors(path)
    with open(path, "rb") as f:
        raw = f.read()
    want = expected_sample()
    if sorted(tensors) != sorted(want):
        fail(f"tensor names {sorted(tensors)} != {sorted(want)}")
    for name, v in header.items():
        b, e = v["data_offsets"]
        got = meta.get("crc32c:" + name)
        exp = f"{crc32c_py(raw[data_start + b:data_start + e]):08x}"
        if got != exp:
            fail(f"crc32c:{name} is {got!r}, Python computes {exp}")
    if meta.get("crc32c") != header_crc(meta, header):
        fail(f"crc32c is {meta.get('crc32c')!r}, Python computes {header_crc(meta, header)}")
    for k, v in EXPECTED_META.items():
        if meta.get(k) != v:
            fail(f"metadata {k}: {meta.get(k)!r}, expected {v!r}")
    print(f"  {len(header)} tensor checksums and the header's equal Python's")
    # Python writes one, metadata keys in reverse order, tensors in their own order
    arrs = {"w": ("F32", np.arange(6, dtype="<f4").reshape(2, 3)), "b": ("I16", np.array([-1, 7], dtype="<i2")),
            "\u00fcber": ("U8", np.arange(3, dtype="u1"))}
    m = {"zeta": "1", "alpha": "\u00e9t\u00e9"}
    hdr = {}
    for name, (dtype, arr) in arrs.items():
        m["crc32c:" + name] = f"{crc32c_py(np.ascontiguousarray(arr).tobytes()):08x}"
        hdr[name] = {"dtype": dtype, "shape": list(arr.shape)}
    m["crc32c"] = header_crc(m, hdr)
    m = dict(reversed(list(m.items())))
    pth = os.path.join(tmp, "python_crc.safetensors")
    write_safetensors(pth, arrs, m)
    out = run(ST_BIN, "--verify", pth).strip()
    if out != "verified":
        fail(f"--verify of Python's file: {out!r}")
    with open(pth, "rb") as f:
        raw = bytearray(f.read())
    raw[-1] ^= 1  # the last byte of the last tensor's data
    with open(pth, "wb") as f:
        f.write(raw)
    p = subprocess.run([ST_BIN, "--verify", pth], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = p.stderr.decode()
    if p.returncode != 1 or "does not match its checksum" not in err or "\u00fcber" not in err:
        fail(f"--verify of a changed byte: exit {p.returncode}, {err!r}")
    print("  Python's checksums verify in Sluice; one changed byte is named")


def write_safetensors(path, tensors, meta):
    """Hugging Face's layout from json + numpy, in the given (not alignment-friendly) order."""
    header, blobs, off = {}, [], 0
    if meta:
        header["__metadata__"] = meta
    for name, (dtype, arr) in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def check_python_safetensors(tmp):
    check("a Python-written safetensors file reads back through sluice (--dump)")
    rng = np.random.default_rng(7)
    tensors = {
        "odd_u8": ("U8", np.arange(3, dtype="u1")),  # leaves everything after it misaligned
        "w": ("F32", rng.standard_normal((4, 5)).astype("<f4")),
        "d": ("F64", rng.standard_normal(3)),
        "h": ("F16", rng.standard_normal((2, 2)).astype("<f2")),
        "bf": ("BF16", np.array([0x3F80, 0x4000, 0xBF80], dtype="<u2")),
        "l": ("I64", np.array([-5, 1 << 50], dtype="<i8")),
        "i": ("I32", np.array([[1, -2], [3, -4]], dtype="<i4")),
        "s": ("I16", np.array([-1, 2], dtype="<i2")),
        "b": ("I8", np.array([-3], dtype="i1")),
        "flags": ("BOOL", np.array([[True, False, False]])),
        "nothing": ("F32", np.zeros((2, 0, 3), dtype="<f4")),
        "scal": ("I64", np.array(-9, dtype="<i8")),
        "u16": ("U16", np.array([7, 65000], dtype="<u2")),
        "u32": ("U32", np.array([1, 4294967295], dtype="<u4")),
        "\u65e5\u672c/\U0001F600": ("U8", np.array([1, 2], dtype="u1")),
    }
    meta = {"epoch": "3", "data_position": "file=2,record=17", "\u00fc": "\u00e9"}
    path = os.path.join(tmp, "python.safetensors")
    write_safetensors(path, tensors, meta)
    want = []
    for name, (dtype, arr) in tensors.items():
        dims = ",".join(str(d) for d in arr.shape)
        want.append(f"{name} {dtype} [{dims}] {np.ascontiguousarray(arr).tobytes().hex()}")
    for k, v in meta.items():
        want.append(f"meta {k}={v}")
    got = run(ST_BIN, "--dump", path).rstrip("\n").split("\n")
    expect_same(got, want, lambda g, w: f"--dump differs:\n  sluice: {g}\n  python: {w}",
                lambda n, m: f"--dump printed {n} lines, expected {m}")
    print(f"  {len(tensors)} tensors and {len(meta)} metadata entries equal")


# ---------------------------------------------------------------- event files

def build_event_class():
    """tensorflow.Event with the fields of event.proto / summary.proto used here."""
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="sluice_event.proto", package="tensorflow",
                                             syntax="proto3")

    def field(msg, name, num, typ, type_name=None, label=F.LABEL_OPTIONAL, oneof=None):
        f = msg.field.add(name=name, number=num, type=typ, label=label)
        if type_name:
            f.type_name = type_name
        if oneof is not None:
            f.oneof_index = oneof
        return f

    def oneof(msg, name, *specs):
        """a oneof NAME (the message's first) of the fields (name, number, type, type_name)"""
        msg.oneof_decl.add(name=name)
        for fname, num, typ, type_name in specs:
            field(msg, fname, num, typ, type_name, oneof=0)

    image = fdp.message_type.add(name="Image")
    for num, (name, typ) in enumerate([("height", F.TYPE_INT32), ("width", F.TYPE_INT32),
                                       ("colorspace", F.TYPE_INT32), ("encoded_image_string", F.TYPE_BYTES)], 1):
        field(image, name, num, typ)
    summary = fdp.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    field(value, "node_name", 7, F.TYPE_STRING)
    field(value, "tag", 1, F.TYPE_STRING)
    oneof(value, "value", ("simple_value", 2, F.TYPE_FLOAT, None), ("obsolete_old_style_histogram", 3, F.TYPE_BYTES, None),
          ("image", 4, F.TYPE_MESSAGE, ".tensorflow.Image"))
    field(summary, "value", 1, F.TYPE_MESSAGE, ".tensorflow.Summary.Value", label=F.LABEL_REPEATED)
    event = fdp.message_type.add(name="Event")
    field(event, "wall_time", 1, F.TYPE_DOUBLE)
    field(event, "step", 2, F.TYPE_INT64)
    oneof(event, "what", ("file_version", 3, F.TYPE_STRING, None), ("graph_def", 4, F.TYPE_BYTES, None),
          ("summary", 5, F.TYPE_MESSAGE, ".tensorflow.Summary"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    factory = message_factory.MessageFactory(pool)
    return factory.GetPrototype(pool.FindMessageTypeByName("tensorflow.Event"))


Event = build_event_class()

T0 = 1700000000.25


def expected_scalars():
    """(wall_time, step, tag, value) that test_tfevents --write-sample writes."""
    f32 = np.float32
    out = []
    for step in range(5):
        t = T0 + step * 1.5
        out.append((t, step, "loss", float(f32(1.0) / f32(step + 1))))
        out.append((t, step, "accuracy", float(f32(step) * f32(0.2))))
        out.append((t, step, "learning_rate", float(f32(0.001))))
    out.append((T0 + 100, 1 << 40, "train/examples_per_s", 12345.5))
    out.append((T0 + 101, -3, "neg", -1.5))
    return out


def check_sluice_events(tmp):
    check("test_tfevents --write-sample: file name, CRCs, Event protos, values")
    run_dir = os.path.join(tmp, "run")
    path = run(EV_BIN, "--write-sample", run_dir).strip()
    files = os.listdir(run_dir)
    if files != [os.path.basename(path)]:
        fail(f"run folder holds {files}, expected only {os.path.basename(path)}")
    want_name = f"events.out.tfevents.1700000000.{socket.gethostname()}"
    if os.path.basename(path) != want_name:
        fail(f"event file named {os.path.basename(path)}, expected {want_name}")
    if not re.fullmatch(r"events\.out\.tfevents\.\d{10}\..+", os.path.basename(path)):
        fail("event file name does not match TensorBoard's pattern")
    recs = read_tfrecord(path)
    events = []
    for r in recs:
        ev = Event()
        ev.ParseFromString(r)
        if ev.SerializeToString() != r:
            fail(f"an event does not re-serialize to the same bytes: {r.hex()}")
        events.append(ev)
    first = events[0]
    if first.WhichOneof("what") != "file_version" or first.file_version != "brain.Event:2":
        fail(f"first event is not file_version brain.Event:2: {first}")
    if first.wall_time != T0 or first.step != 0:
        fail(f"first event wall_time {first.wall_time} step {first.step}")
    got = []
    for ev in events[1:]:
        if ev.WhichOneof("what") != "summary":
            fail(f"event without a summary: {ev}")
        for v in ev.summary.value:
            if v.WhichOneof("value") != "simple_value":
                fail(f"summary value without simple_value: {v}")
            got.append((ev.wall_time, ev.step, v.tag, v.simple_value))
    want = expected_scalars()
    expect_same(got, want, lambda g, w: f"scalar differs: sluice {g}, expected {w}",
                lambda n, m: f"{n} scalars, expected {m}")
    print(f"  {len(events)} events: the version event and {len(got)} scalars as written")


def check_python_events(tmp):
    check("a Python-written event file reads through sluice's reader (--dump)")
    evs = []
    ev = Event(wall_time=1600000000.5, file_version="brain.Event:2")
    evs.append(ev.SerializeToString())
    ev = Event(wall_time=1600000001.0, step=3, graph_def=b"\x0a\x01x")
    evs.append(ev.SerializeToString())
    ev = Event(wall_time=1600000002.125, step=4)
    ev.summary.value.add(tag="loss", simple_value=0.125)
    ev.summary.value.add(tag="img", image={"height": 1, "width": 1, "encoded_image_string": b"\x89PNG"})
    ev.summary.value.add(tag="acc/top1", simple_value=0.875, node_name="n")
    # an unknown field (number 30, varint) at the end, as a newer writer might add
    evs.append(ev.SerializeToString() + b"\xf0\x01\x07")
    ev = Event(wall_time=1600000003.0, step=-(1 << 62))
    ev.summary.value.add(tag="big", simple_value=3.4028234663852886e38)
    evs.append(ev.SerializeToString())
    path = os.path.join(tmp, "python.tfevents")
    with open(path, "wb") as f:
        f.write(b"".join(frame(e) for e in evs))
    want = [
        "version 1600000000.5 0 brain.Event:2",
        "other 1600000001 3",
        "scalar 1600000002.125 4 loss 0.125",
        "scalar 1600000002.125 4 acc/top1 0.875",
        f"scalar 1600000003 {-(1 << 62)} big {3.4028234663852886e38:.9g}",
    ]
    got = run(EV_BIN, "--dump", path).rstrip("\n").split("\n")
    if got != want:
        fail("--dump differs:\n  sluice: " + "\n          ".join(got) +
             "\n  python: " + "\n          ".join(want))
    print(f"  {len(evs)} events read as {len(want)} entries")


def main():
    return run_checks("test_checkpoint_python", "sluice-ckpt-",
                      [check_sluice_safetensors, check_python_safetensors, check_checksums, check_sluice_events,
                       check_python_events], need=(ST_BIN, EV_BIN), env="SLUICE_TESTS_BIN")


if __name__ == "__main__":
    sys.exit(main())
