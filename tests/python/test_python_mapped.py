#!/usr/bin/python3
"""Arrays over a mapped TFRecord file, through the `sluice` Python module, when the file
shrinks under them (a shard rewritten in place). Records are written here (raw bytes, each
record's own non-zero pattern), so the test needs neither the tools nor a data set:

  1. unbatched views: after the first element the file is truncated; every later next()
     gives an element whose bytes are exactly its record's, or raises sluice.Error SL_EIO
     naming the file and the record's byte offset, once per lost record: never zeros;
  2. batches (batch stacking the records, and map_batch copying decode_raw's views into
     their slots) are exactly their rows or SL_EIO naming the first lost row's record;
  3. `damaged`: an array held across the truncation says whether its bytes went; one kept
     after its pipeline and iterator were freed keeps its values and says False until the
     file is truncated, then True; arrays of a copy=True pass keep their values and are
     never damaged;
  4. read-only: `a.flags.writeable = True` raises numpy's ValueError, for a view of the
     file and for a batch (a write into the read-only mapping would kill Python with
     SIGSEGV, so it runs in a child);
  5. DLPack: torch.from_dlpack shares a batch's memory (same data pointer); a view of the
     mapped file goes to such an old-style (unversioned) consumer as a copy, which can be
     written; __dlpack__(max_version=(1, 0)) shares either without a copy in a versioned
     capsule flagged DLPACK_FLAG_BITMASK_READ_ONLY.

Run by ctest with PYTHONPATH=build/python; exit 77 (skipped) when the module, numpy or
python3-crc32c is missing (part 5 skips its torch checks without torch).
"""
import ctypes
import gc
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

from sluice_pytests import fail, finish, ok, require_modules

np, sluice, crc32c = require_modules()

NREC, PAYLOAD = 48, 8176
RECSZ = PAYLOAD + 16  # two pages a record
FILESZ = NREC * RECSZ
PATTERNS = [bytes((1 + (r * 31 + k) % 251) for k in range(PAYLOAD)) for r in range(NREC)]


def masked(data):
    c = crc32c.crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def write_records(path):
    with open(path, "wb") as f:
        for p in PATTERNS:
            n = struct.pack("<Q", len(p))
            f.write(n + struct.pack("<I", masked(n)) + p + struct.pack("<I", masked(p)))


def which(b):
    """The record whose bytes b are exactly, else -1."""
    b = bytes(b)
    return next((r for r in range(NREC) if PATTERNS[r] == b), -1)


def lost(rec, size):
    return rec * RECSZ + 12 + PAYLOAD > size


def named(e, path):
    """The record an SL_EIO sluice.Error names ("...: PATH: byte OFFSET: ..."), else -1."""
    m = re.search(re.escape(path) + r": byte (\d+): ", e.message)
    if e.status != "SL_EIO" or not m or int(m.group(1)) % RECSZ:
        return -1
    return int(m.group(1)) // RECSZ


def pipeline(path, body, **kw):
    return sluice.Pipeline(text=f'pipeline p {{\n files "{path}"\n shuffle 64 seed=3\n{body}}}\n', **kw)


UNBATCHED = " map decode_raw(record, uint8, 8176)\n"
BATCH = " batch 4\n"
MAP_BATCH = " map decode_raw(record, uint8, 8176) parallel=1\n batch 4\n"


def rows_of(x):
    return [which(r) for r in x] if x.dtype == object else [which(r) for r in x.reshape(len(x), -1)]


T = tempfile.mkdtemp(prefix="sluice-pytest-mapped-")
try:
    # ---- 1. unbatched views, the file truncated after the first element ----
    for size in (20 * RECSZ + 3000, FILESZ - 100, 0):
        path = os.path.join(T, "u.tfrecord")
        write_records(path)
        it = iter(pipeline(path, UNBATCHED))
        kept = next(it)["record"]
        kept_rec = which(kept)
        os.truncate(path, size)
        seen, bad, eio = {kept_rec}, [], 0
        while True:
            try:
                a = next(it)["record"]
            except StopIteration:
                break
            except sluice.Error as e:
                r = named(e, path)
                if r < 0 or not lost(r, size) or r in seen:
                    bad.append(f"error {e.status}: {e.message}")
                seen.add(r)
                eio += 1
                continue
            r = which(a)
            if r < 0 or lost(r, size) or r in seen:
                bad.append(f"returned as data: record {r}, {int((a == 0).sum())} zero bytes")
            seen.add(r)
        want = sum(lost(r, size) and r != kept_rec for r in range(NREC))
        if not bad and eio == want and len(seen) == NREC:
            ok(f"unbatched views, file cut to {size}: {NREC - 1 - eio} intact elements, {eio} SL_EIO naming "
               "the file and the record's offset, no zeros")
        else:
            fail(f"unbatched views, file cut to {size}: {eio} errors (want {want}), {len(seen)} records seen; "
                 f"{bad[:3]}")
        # ---- 3a. the array held across the truncation ----
        d = getattr(kept, "damaged", None)
        if d is lost(kept_rec, size):
            ok(f"an array held across the cut says damaged={d} (its record {'lost' if d else 'intact'})")
        else:
            fail(f"array held across the cut to {size}: damaged={d!r}, its record lost: {lost(kept_rec, size)}")
        del kept, it
        gc.collect()

    # ---- 2. batches ----
    for what, body, size, settled in (("batch", BATCH, 10 * RECSZ + 3000, 1),
                                      ("map_batch", MAP_BATCH, 8 * RECSZ + 3000, 3)):
        ref_path = os.path.join(T, "ref.tfrecord")
        write_records(ref_path)
        ref = [rows_of(b["record"]) for b in pipeline(ref_path, body)]
        path = os.path.join(T, "b.tfrecord")
        write_records(path)
        it = iter(pipeline(path, body))
        next(it)
        os.truncate(path, size)
        bad, eio, must = [], 0, 0
        for j in range(1, len(ref)):
            first_lost = next((r for r in ref[j] if lost(r, size)), -1)
            must += first_lost >= 0 and j >= settled
            try:
                got = rows_of(next(it)["record"])
                if got != ref[j] or (first_lost >= 0 and j >= settled):
                    bad.append(f"batch {j}: rows {got}, want {ref[j]} (first lost: {first_lost})")
            except sluice.Error as e:
                eio += 1
                r = named(e, path)
                # a batch begun before the cut may have copied its first lost row intact
                ok_rows = [x for x in ref[j] if lost(x, size)] if j < settled else [first_lost]
                if first_lost < 0 or r not in ok_rows:
                    bad.append(f"batch {j}: {e.status} {e.message} (first lost: {first_lost})")
        if not bad and must > 0 and eio >= must and len(ref) == NREC // 4:
            ok(f"{what}, file cut to {size}: every batch is exactly its rows or SL_EIO naming its first lost "
               f"record ({eio} errors)")
        else:
            fail(f"{what}, file cut to {size}: {bad[:3]}")

    # ---- 3b. an array kept after its pipeline is freed; copy=True ----
    path = os.path.join(T, "k.tfrecord")
    write_records(path)
    p = pipeline(path, UNBATCHED)
    it = iter(p)
    a = next(it)["record"]
    rec = which(a)
    try:
        c = next(p.iter(epoch=0, copy=True))["record"]
    except TypeError as e:
        c = None
        fail(f"Pipeline.iter(copy=True): {e}")
    del it, p
    gc.collect()
    before = (which(a), getattr(a, "damaged", None))
    os.truncate(path, 0)
    after = getattr(a, "damaged", None)
    if before == (rec, False) and after is True:
        ok("an array kept after its pipeline was freed keeps its values (damaged=False) until the file "
           "is cut, then says damaged=True")
    else:
        fail(f"array kept after its pipeline: before the cut (record, damaged) {before}, want ({rec}, False); "
             f"after: damaged={after!r}")
    if c is not None:
        if which(c) == rec and c.damaged is False and c.base.address != a.base.address:
            ok("copy=True: the array is a copy made at hand-out: intact after the file is cut, never damaged")
        else:
            fail(f"copy=True array after the cut: record {which(c)} (want {rec}), damaged={c.damaged!r}")
    del a, c
    gc.collect()

    # ---- 4. read-only: numpy refuses, no crash (in a child: a write there would kill us) ----
    write_records(path)
    child = f"""
import sluice
p = sluice.Pipeline(text='pipeline p {{\\n files "{path}"\\n{UNBATCHED.strip()}\\n}}\\n')
for name, a in (("view", next(iter(p))["record"]),
                ("batch", next(iter(sluice.Pipeline(text='pipeline b {{\\n range 0 8\\n batch 4\\n}}\\n')))["value"])):
    try:
        a.flags.writeable = True
        a[0] = 1
        print(name, "written")
    except ValueError as e:
        print(name, "ValueError", e)
"""
    r = subprocess.run([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    want = ("view ValueError cannot set WRITEABLE flag to True of this array\n"
            "batch ValueError cannot set WRITEABLE flag to True of this array\n")
    if r.returncode == 0 and r.stdout == want:
        ok("a.flags.writeable = True raises numpy's ValueError, for a view of the file and for a batch")
    else:
        fail(f"making a sluice.Array writeable: exit {r.returncode}, output {r.stdout!r}")

    # ---- 5. DLPack ----
    view = next(iter(pipeline(path, UNBATCHED)))["record"]
    batch = next(iter(pipeline(path, MAP_BATCH)))["record"]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
    get_ptr.restype, get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    for what, x in (("view of the file", view), ("batch", batch)):
        try:
            cap = x.__dlpack__(max_version=(1, 0))
            name = get_name(cap)
            # DLManagedTensorVersioned: version (u32 major, minor), manager_ctx, deleter, u64 flags,
            # then the DLTensor (data first)
            mt = get_ptr(cap, name)
            major, minor, _, _, flags, data = struct.unpack("<IIQQQQ", ctypes.string_at(mt, 40))
            if name == b"dltensor_versioned" and major == 1 and flags & 1 and data == x.ctypes.data:
                ok(f"{what}: __dlpack__(max_version=(1, 0)) shares it in a versioned capsule flagged read-only")
            else:
                fail(f"{what}: versioned capsule {name!r} version {major}.{minor} flags {flags} data {data:#x} "
                     f"(array at {x.ctypes.data:#x})")
            del cap
        except Exception as e:  # noqa: BLE001 (any failure to export is this check's failure)
            fail(f"{what}: __dlpack__(max_version=(1, 0)): {type(e).__name__}: {e}")
    try:
        import torch
    except ImportError:
        torch = None
        print("skipped part of 5: torch is not installed (apt-get install python3-torch)")
    if torch is not None:
        t = torch.from_dlpack(batch)
        if t.data_ptr() == batch.ctypes.data and tuple(t.shape) == batch.shape:
            ok("torch.from_dlpack(batch) shares its memory (same data pointer)")
        else:
            fail(f"torch.from_dlpack(batch): data_ptr {t.data_ptr():#x}, array {batch.ctypes.data:#x}")
        t = torch.from_dlpack(view)
        if t.data_ptr() != view.ctypes.data and which(t.numpy()) == which(view) >= 0:
            t[0] = 0  # a copy: writable, and the mapped file is untouched
            if which(view) >= 0:
                ok("torch.from_dlpack(view of the mapped file) gets a copy it may write (unversioned DLPack "
                   "cannot say read-only)")
            else:
                fail("writing the torch tensor changed the view")
        else:
            fail(f"torch.from_dlpack(view): data_ptr {t.data_ptr():#x}, view at {view.ctypes.data:#x} "
                 "(shared: a write there would crash)")
finally:
    shutil.rmtree(T, ignore_errors=True)

finish()
