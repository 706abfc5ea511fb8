#!/usr/bin/python3
"""Iterator state from Python: it.state(), Pipeline.iter(state=...) and start=, and the torch
adapter's state_dict() / load_state_dict(). The pipelines are `range` ones written here, so
the test needs neither the tools nor a data set:

  1. round trip where every op seeks (range -> one_hot -> batch -> random_flip -> batch): at
     10 seeded random positions p, a pass stopped after p batches, saved with it.state() and
     continued with Pipeline.iter(state=...) gives, bit for bit, batches p.. of an
     uninterrupted pass (replayed 0; the random flips depend on the seed, which the state
     carries); iter(start=p) the same; a state taken in epoch 2 continues epoch 2;
  2. the same through a buffer `shuffle`, which seeks by replaying its draws: the restored
     iterator replays nothing (replayed 0), reads back its buffer of 16 from before its fill
     point (refilled), and the batches are still equal;
  3. the state's bytes: 48 of them starting b"SLITSTAT", equal after the same number of
     elements with the same seed (and for the restored iterator), kept after the end and
     after close(); a flipped byte or a short state is sluice.Error SL_ECORRUPT naming the
     byte; another pipeline's state SL_EINVAL with the hint; a str, int or list TypeError;
     a seed= or epoch= that disagrees with the state's seed ValueError; start < 0 or start=
     with state= ValueError; the old call forms still work;
  4. sluice.torch.IterableDataset: state_dict() (plain values: torch.load(weights_only=True)
     and JSON keep it) in the middle of an epoch, loaded into a new
     dataset, continues with the same batches as the uninterrupted run, and the epochs after
     it are the same too; after an epoch's end it starts the next one; bad dicts ValueError.
     Without torch the adapter runs over a stand-in torch module (its state logic needs no
     tensors: numpy arrays stand in for them).

Run by ctest with PYTHONPATH=build/python; exit 77 (skipped) when the module, numpy or
python3-crc32c is missing.
"""
import io
import json
import random
import sys
import types

from sluice_pytests import fail, finish, ok, require_modules

np, sluice, crc32c = require_modules()

CONFIG = """
pipeline flip {
    range 0 192
    map one_hot(value, 192)
    batch 4
    map random_flip(value, vertical=true)
    batch 2
}
pipeline shuffled {
    range 0 200
    shuffle 16
    batch 4
    map one_hot(value, 200) | random_flip(value, vertical=true)
    batch 2
}
pipeline other {
    range 0 192
    batch 8
}
"""
PSEED, SEED = 3, 11


def values(it, n=None):
    """The "value" arrays of the next n elements of it (all when n is None)."""
    out = []
    for e in it:
        out.append(e["value"])
        if n is not None and len(out) == n:
            break
    return out


def same(a, b):
    return len(a) == len(b) and all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b))


def run(part, fn):
    try:
        fn()
    except Exception as e:  # a missing API on old code: one FAIL, the other parts still run
        fail(f"{part}: {type(e).__name__}: {e}")


# ---- 1. round trip where every op seeks ----
def part1():
    flip = sluice.Pipeline(text=CONFIG, name="flip", seed=PSEED)
    ref = values(flip.iter(seed=SEED))
    plain = np.eye(192, dtype=np.float32).reshape(24, 2, 4, 192)
    flipped = sum(not np.array_equal(ref[j][i], plain[j][i]) for j in range(24) for i in range(2))
    if len(ref) == 24 and ref[0].shape == (2, 4, 192) and 0 < flipped < 48 and not same(ref, values(flip.iter(seed=SEED + 1))):
        ok(f"flip: 24 batches, {flipped} of 48 images flipped, another seed gives other batches")
    else:
        fail(f"flip reference: {len(ref)} batches, {flipped} flipped")
    positions = random.Random(20240611).sample(range(25), 10)
    bad = []
    for p in positions:
        it = flip.iter(seed=SEED)
        head = values(it, p) if p else []
        st, pos = it.state(), it.position
        it.close()
        r = flip.iter(state=st)
        info = (r.position, r.replayed, r.seed)
        rest = values(r)
        if not (same(head, ref[:p]) and pos == p and info == (p, 0, SEED) and same(rest, ref[p:]) and r.position == 24):
            bad.append(f"p={p}: position {pos}, restored (position, replayed, seed) {info}, {len(rest)} batches")
        s = flip.iter(seed=SEED, start=p)
        info = (s.position, s.replayed)
        if not (info == (p, 0) and same(values(s), ref[p:])):
            bad.append(f"start={p}: (position, replayed) {info}")
    if bad:
        fail("flip round trips: " + "; ".join(bad))
    else:
        ok(f"flip: state() at positions {sorted(positions)} continues bit for bit (replayed 0); start=p too")
    e2 = values(flip.iter(epoch=2))
    it = flip.iter(epoch=2)
    values(it, 5)
    st = it.state()
    r = flip.iter(state=st)
    if r.seed == sluice.mix_seed(PSEED, 2) and same(values(r), e2[5:]) and not same(e2, ref):
        ok("a state taken in epoch 2 continues epoch 2 (its seed, mix_seed(seed, 2), is in the state)")
    else:
        fail(f"epoch 2 state: seed {r.seed}, want {sluice.mix_seed(PSEED, 2)}")


# ---- 2. through a buffer shuffle: its buffer read back, nothing replayed ----
def part2():
    sh = sluice.Pipeline(text=CONFIG, name="shuffled", seed=PSEED)
    ref = values(sh.iter(seed=SEED))
    order = [int(np.argmax(x[0, 0])) for x in ref]
    if len(ref) == 25 and order != sorted(order) and not same(ref, values(sh.iter(seed=SEED + 1))):
        ok("shuffled: 25 batches, out of order, another seed gives another order")
    else:
        fail(f"shuffled reference: {len(ref)} batches, first rows {order}")
    positions = random.Random(7).sample(range(1, 26), 10)
    bad = []
    for p in positions:
        it = sh.iter(seed=SEED)
        head = values(it, p)
        st = it.state()
        it.close()
        r = sh.iter(state=st)
        info = (r.position, r.replayed)
        rest = values(r)
        # batch 2 of batch 4: position p is element 8p of the shuffle, its fill point 8p + 16;
        # what it reads again lies before the fill point (the C tests bound it by the buffer)
        if not (same(head, ref[:p]) and info == (p, 0) and 0 < r.refilled <= 8 * p + 16 and same(rest, ref[p:])):
            bad.append(f"p={p}: restored (position, replayed) {info}, refilled {r.refilled}, {len(rest)} batches")
        s = sh.iter(seed=SEED, start=p)
        if (s.position, s.replayed) != (p, 0) or not same(values(s), ref[p:]):
            bad.append(f"start={p}: (position, replayed) {(s.position, s.replayed)}")
    if bad:
        fail("shuffled round trips: " + "; ".join(bad))
    else:
        ok(f"shuffled: state() at positions {sorted(positions)} continues bit for bit, nothing replayed, "
           "its buffer read again")


def expect(what, fn, exc, check=None):
    """fn() must raise exc (and check(e) hold); one FAIL line otherwise."""
    try:
        fn()
        fail(f"{what}: no exception")
    except exc as e:
        if check is None or check(e):
            return True
        fail(f"{what}: {type(e).__name__}: {getattr(e, 'status', '')} {e}")
    except Exception as e:
        fail(f"{what}: {type(e).__name__} instead of {exc.__name__}: {e}")
    return False


# ---- 3. the state's bytes ----
def part3():
    flip = sluice.Pipeline(text=CONFIG, name="flip", seed=PSEED)

    def state_at(n, seed=SEED):
        it = flip.iter(seed=seed)
        values(it, n)
        return it.state()

    st = state_at(5)
    r = flip.iter(state=st)
    if (isinstance(st, bytes) and len(st) == 48 and st[:8] == b"SLITSTAT" and st == state_at(5)
            and r.state() == st and st != state_at(6) and st != state_at(5, SEED + 1)):
        ok("state(): 48 bytes b'SLITSTAT...', the same after 5 elements (and restored), other at 6 or another seed")
    else:
        fail(f"state bytes: {st!r}")
    it = flip.iter(seed=SEED)
    values(it, 3)
    it.close()
    end = flip.iter(seed=SEED)
    values(end)
    late = flip.iter(state=end.state())
    if (it.closed and it.state() == state_at(3) and it.position == 3 and end.closed and end.position == 24
            and late.position == 24 and values(late) == []):
        ok("state() and position are kept after close() and after the end (an end state restores an ended pass)")
    else:
        fail(f"closed states: position {it.position}, end {end.position}")
    want = {0: 0, 9: 8, 13: 12, 17: 44, 25: 44, 33: 44, 45: 44}
    good = 0
    for off, byte in want.items():
        bad = bytearray(st)
        bad[off] ^= 0x01
        good += expect(f"byte {off} flipped", lambda: flip.iter(state=bytes(bad)), sluice.Error,
                       lambda e: e.status == "SL_ECORRUPT" and e.message.startswith(f"iterator state: byte {byte}: "))
    good += expect("47 bytes", lambda: flip.iter(state=st[:47]), sluice.Error,
                   lambda e: e.status == "SL_ECORRUPT" and e.message.startswith("iterator state: byte 12: size 48, 47 bytes"))
    good += expect("no bytes", lambda: flip.iter(state=b""), sluice.Error,
                   lambda e: e.status == "SL_ECORRUPT" and e.message.startswith("iterator state: byte 0: "))
    if good == len(want) + 2:
        ok("a flipped byte (magic, version, size, seed, position, fingerprint, checksum) or a short state: "
           "sluice.Error SL_ECORRUPT naming the byte")
    other = sluice.Pipeline(text=CONFIG, name="other")
    oit = other.iter()
    values(oit, 2)
    if expect("another pipeline's state", lambda: flip.iter(state=oit.state()), sluice.Error,
              lambda e: e.status == "SL_EINVAL" and "saved from another pipeline" in e.message
              and e.hint.startswith("restore a state into the pipeline that saved it")):
        ok("another pipeline's state: sluice.Error SL_EINVAL with the hint")
    good = sum(expect(f"state={v!r}", lambda: flip.iter(state=v), TypeError, lambda e: "state" in str(e))
               for v in ("SLITSTAT", 48, list(st)))
    if good == 3 and same(values(flip.iter(state=bytearray(st))), values(flip.iter(state=st))):
        ok("state= a str, int or list: TypeError; a bytearray is taken as bytes")
    good = expect("seed= other than the state's", lambda: flip.iter(seed=SEED + 1, state=st), ValueError,
                  lambda e: str(SEED + 1) in str(e) and str(SEED) in str(e))
    good += expect("epoch= whose seed is not the state's", lambda: flip.iter(epoch=1, state=st), ValueError)
    good += expect("start=-1", lambda: flip.iter(start=-1), ValueError)
    good += expect("start= and state=", lambda: flip.iter(start=2, state=st), ValueError)
    if good == 4 and flip.iter(seed=SEED, state=st).position == 5:
        ok("seed=/epoch= disagreeing with the state's seed, start < 0, start= with state=: ValueError "
           "(the state's own seed: accepted)")
    p = sluice.Pipeline(text=CONFIG, name="flip", seed=PSEED)
    a = values(p.iter(0, SEED, False))
    b = values(iter(p))
    c = values(p.iter())
    if (same(a, values(flip.iter(seed=SEED))) and same(b, values(flip.iter(seed=sluice.mix_seed(PSEED, 1))))
            and same(c, values(flip.iter(seed=sluice.mix_seed(PSEED, 2)))) and p.epoch == 3):
        ok("old call forms: iter(epoch, seed, copy) positionally, iter(pipeline), epoch counting")
    else:
        fail(f"old call forms: epoch {p.epoch}")


# ---- 4. the torch adapter ----
def stand_in_torch():
    """A module object named torch with what sluice.torch uses outside tensors."""
    t = types.ModuleType("torch")
    t.utils = types.ModuleType("torch.utils")
    t.utils.data = types.ModuleType("torch.utils.data")
    t.utils.data.IterableDataset = type("IterableDataset", (), {})
    t.utils.data.get_worker_info = lambda: None
    t.distributed = types.SimpleNamespace(is_available=lambda: False, is_initialized=lambda: False)
    t.from_dlpack = lambda a: a
    t.bfloat16 = None
    sys.modules.update({"torch": t, "torch.utils": t.utils, "torch.utils.data": t.utils.data})
    return t


def part4():
    try:
        import torch
        real = True
    except ImportError:
        torch = stand_in_torch()
        real = False
        print("part 4 runs over a stand-in torch module: torch is not installed")
    import sluice.torch as storch

    def make(**kw):
        return storch.IterableDataset(text=CONFIG, name="shuffled", seed=5, rank=0, world_size=1, **kw)

    def arrs(ds, n=None):
        out = []
        for b in ds:
            out.append(np.array(b["value"]))
            if n is not None and len(out) == n:
                break
        return out

    ds = make()
    ref = [arrs(ds) for _ in range(3)]
    fresh = make().state_dict()
    if fresh.get("epoch") != 0 or fresh.get("sluice_iter_state") is not None or len(ref[1]) != 25 or same(ref[0], ref[1]):
        fail(f"adapter: fresh state_dict {fresh}, epochs of {[len(r) for r in ref]} batches")
    ds = make()
    arrs(ds)
    gen = iter(ds)
    head = [np.array(next(gen)["value"]) for _ in range(7)]
    sd = ds.state_dict()
    ds2 = make()
    ds2.load_state_dict(sd)
    again = ds2.state_dict()
    rest, nxt = arrs(ds2), arrs(ds2)
    if (sd["epoch"] == 1 and isinstance(sd["sluice_iter_state"], str) and bytes.fromhex(sd["sluice_iter_state"])[:8] == b"SLITSTAT"
            and len(sd["sluice_iter_state"]) == 96
            and again == sd and same(head, ref[1][:7]) and same(rest, ref[1][7:]) and same(nxt, ref[2])):
        ok(f"adapter: state_dict() after 7 batches of epoch 1 ({sorted(sd)}), loaded into a new dataset: "
           "the rest of epoch 1 and epoch 2 equal the uninterrupted run")
    else:
        fail(f"adapter mid-epoch: {sd}, {len(rest)} + {len(nxt)} batches")
    del gen
    ds = make()
    arrs(ds)
    sd = ds.state_dict()
    ds3 = make()
    ds3.load_state_dict(sd)
    if sd["epoch"] == 1 and sd["sluice_iter_state"] is None and same(arrs(ds3), ref[1]):
        ok("adapter: state_dict() after an epoch's end starts the next epoch from its beginning")
    else:
        fail(f"adapter after an epoch: {sd}")
    ds4 = make()
    ds4.load_state_dict(sd)
    ds4.set_epoch(1)
    e1 = arrs(ds4)
    ds5 = make()
    g = iter(ds5)
    next(g)
    sd5 = ds5.state_dict()
    ds6 = make()
    ds6.load_state_dict(sd5)
    good = same(e1, ref[1])
    good &= expect("set_epoch(3) over a loaded epoch-0 state", lambda: ds6.set_epoch(3), ValueError)
    ds6.set_epoch(0)
    good &= same(arrs(ds6), ref[0][1:])
    ds10 = make()
    ds10.load_state_dict(dict(sd5, sluice_iter_state=bytes.fromhex(sd5["sluice_iter_state"])))
    good &= same(arrs(ds10), ref[0][1:])
    if good:
        ok("adapter: set_epoch(k) agreeing with a loaded state resumes it; another k is ValueError; "
           "raw state bytes are taken as the hex")
    if real:
        loader = torch.utils.data.DataLoader(make(), batch_size=None, num_workers=0)
        ds7 = loader.dataset
        li = iter(loader)
        h = [next(li)["value"].numpy().copy() for _ in range(4)]
        sd7 = ds7.state_dict()
        ds8 = make()
        ds8.load_state_dict(sd7)
        l8 = torch.utils.data.DataLoader(ds8, batch_size=None, num_workers=0)
        if same(h, ref[0][:4]) and same([b["value"].numpy() for b in l8], ref[0][4:]):
            ok("adapter through a DataLoader: the state after 4 batches resumes with batch 4")
        else:
            fail(f"adapter through a DataLoader: {sd7}")
        buf = io.BytesIO()
        torch.save(sd7, buf)
        buf.seek(0)
        if torch.load(buf, weights_only=True) == sd7 and json.loads(json.dumps(sd7)) == sd7:
            ok("torch.save / torch.load(weights_only=True) and JSON keep the state_dict as it was")
        else:
            fail("torch.load(weights_only=True) of the state_dict differs")
    st = sd5["sluice_iter_state"]
    bad_dicts = [
        ("not a dict", "state"),
        ("no epoch", {k: v for k, v in sd.items() if k != "epoch"}),
        ("epoch a str", dict(sd, epoch="1")),
        ("epoch negative", dict(sd, epoch=-1)),
        ("epoch a bool", dict(sd, epoch=True)),
        ("state a str that is not hex", dict(sd, sluice_iter_state="SLITSTAT")),
        ("state an int", dict(sd, sluice_iter_state=48)),
        ("no sluice_iter_state", {k: v for k, v in sd.items() if k != "sluice_iter_state"}),
        ("another seed", dict(sd, seed=6)),
        ("another shard", dict(sd, shard=[1, 2])),
    ]
    good = 0
    for what, d in bad_dicts:
        good += expect(f"load_state_dict({what})", lambda: make().load_state_dict(d), ValueError, lambda e: len(str(e)) > 20)
    if good == len(bad_dicts):
        ok("load_state_dict: not a dict, a missing key, a wrong type or value, another seed or shard: ValueError")
    dmg = bytearray.fromhex(st)
    dmg[30] ^= 0xFF
    ds9 = make()
    ds9.load_state_dict(dict(sd, epoch=0, sluice_iter_state=bytes(dmg)))
    if expect("damaged sluice_iter_state", lambda: arrs(ds9), sluice.Error, lambda e: e.status == "SL_ECORRUPT"):
        ok("load_state_dict with damaged state bytes: the next iteration raises sluice.Error SL_ECORRUPT")


# ---- 5. after an error the state is refused, never a resume elsewhere ----
def part5():
    def boom(d):
        if int(d["value"]) == 3:
            raise ValueError("three is refused")
        return d
    p = sluice.Pipeline(text="pipeline bad {\n    range 0 10\n    map boom()\n}\n", functions={"boom": boom})
    it = p.iter()
    got = [int(next(it)["value"]) for _ in range(3)]
    before = it.state()
    if expect("the failing element", lambda: next(it), sluice.Error):
        ok("a Python map function's exception reaches next() as sluice.Error")
    if expect("state() after an error", it.state, sluice.Error,
              lambda e: e.status == "SL_EUNSUPPORTED" and "returned 1 error (and 3 elements)" in e.message
              and "ignore_errors" in e.hint):
        ok("state() after an error: sluice.Error SL_EUNSUPPORTED naming the error count, with the hint")
    rest = [int(e["value"]) for e in it]
    if got + rest == [0, 1, 2, 4, 5, 6, 7, 8, 9] and it.closed and expect(
            "state() after the close", it.state, sluice.Error, lambda e: e.status == "SL_EUNSUPPORTED"):
        ok("the pass goes on after the error, and state() after its close still refuses, saying why")
    r = p.iter(state=before)
    if expect("the state before the error, restored", lambda: next(r), sluice.Error) and \
            [int(e["value"]) for e in r] == [4, 5, 6, 7, 8, 9]:
        ok("the state saved before the error restores there: the failing element fails again, then the rest")


run("part 1 (seekable round trip)", part1)
run("part 2 (shuffle round trip)", part2)
run("part 3 (state bytes)", part3)
run("part 4 (torch adapter)", part4)
run("part 5 (errors)", part5)
finish()
