#!/usr/bin/python3
"""Reference outputs of torchvision 0.14's augment ops (transforms/autoaugment.py _apply_op,
interpolation NEAREST, fill None) and magnitude tables, for tests/unit/test_fn_augment.c.

    /usr/bin/python3 tests/data/torchvision/gen_refs_augment.py [--out DIR] [--seed N] [--all] [--size HxW]

writes DIR/refs.bin (default: the augment/ folder next to this script, seed 0) in gen_refs.py's
format (magic SLTVREF1, version 1; records of op name, f32 params, HWC uint8 input and
output), so tests/unit/helper_tvref.h reads it.
Needs torch and torchvision (Debian: apt-get install python3-torchvision, 0.14.1).

Records:
    aug_OP [magnitude]          _apply_op(img, OP, magnitude): OP is torchvision's op name
                                (ShearX, Rotate, ...), magnitude the signed float32 value it
                                gets, taken from the policies' own tables
    ra_table [op, h, w, bins, first, m...]
                                RandAugment._augmentation_space(bins, (h, w))[OPS[op]]: up to
                                16 magnitudes from bin `first` on (the images are 1x1x1
                                placeholders; at most 32 params a record)
    ta_table [op, 0, 0, bins, first, m...]   TrivialAugmentWide._augmentation_space(bins), likewise"""
import argparse
import os
import struct
import sys

import numpy as np
import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms.autoaugment import RandAugment, TrivialAugmentWide, _apply_op

MAGIC, END, VERSION = b"SLTVREF1", b"SLTVEND1", 1
OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast",
       "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"]


def images(seed, h=23, w=17):
    """Three h x w x 3 random images, one h x w x 1, one (h + 1) x (w + 1) x 3 (the other
    parity: the rotations' rounding ties fall elsewhere), and an h x w x 3 one with a flat
    channel and a narrow range (AutoContrast, Equalize); then a 41 x 97 x 1 one."""
    rng = np.random.default_rng(seed)
    ims = [rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8) for _ in range(3)]
    ims.append(rng.integers(0, 256, size=(h, w, 1), dtype=np.uint8))
    ims.append(rng.integers(0, 256, size=(h + 1, w + 1, 3), dtype=np.uint8))
    x = rng.integers(90, 140, size=(h, w, 3), dtype=np.uint8)
    x[..., 1] = 77
    ims.append(x)
    # 41 x 97, one channel: where grid_sample's fused unnormalize decides ShearX's ties
    ims.append(rng.integers(0, 256, size=(41, 97, 1), dtype=np.uint8))
    return ims


def table_recs(name, space, h, w):
    dummy = np.zeros((1, 1, 1), dtype=np.uint8)
    recs = []
    for k, op in enumerate(OPS):
        m, _ = space[op]
        if m.ndim == 0:
            continue
        v = [float(x) for x in m.reshape(-1)]
        for first in range(0, len(v), 16):
            recs.append(record(name, [k, h, w, len(v), first] + v[first:first + 16], dummy, dummy))
    return recs


BINS = 31


def mag(policy, op, bin_, sign, h, w):
    space = (RandAugment()._augmentation_space(BINS, (h, w)) if policy == "ra"
             else TrivialAugmentWide()._augmentation_space(BINS))
    m, _ = space[op]
    return float(m[bin_].item()) * sign if m.ndim > 0 else 0.0


SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast", "Sharpness"}


def all_cases():
    """--all: every bin of both tables, both signs, on the seven images in turn
    (about 1,700 records: for a thorough check against torchvision, not for storing)."""
    c, k = [], 0
    for pol in ("ra", "ta"):
        for op in OPS:
            for b in range(BINS):
                for sign in ((1, -1) if op in SIGNED else (1,)):
                    c.append((op, pol, b, sign, k % 7))
                    k += 1
    return c


def cases(full=False):
    """(op, policy, bin, sign, image index)."""
    if full:
        return all_cases()
    c = [("Identity", "ra", 0, 1, 0)]
    geo = [("ra", 9, 1, 0), ("ta", 30, -1, 1), ("ta", 15, 1, 4), ("ra", 30, -1, 3)]
    for op in ["ShearX", "ShearY", "TranslateX", "TranslateY"]:
        c += [(op,) + g for g in geo]
    c.append(("ShearX", "ra", 20, -1, 6))  # 8 pixels whose source is a rounding tie
    c += [("Rotate",) + g for g in [("ra", 9, 1, 0), ("ta", 20, -1, 1), ("ta", 20, 1, 4), ("ta", 30, 1, 2),
                                      ("ta", 9, -1, 3)]]
    for op in ["Brightness", "Color", "Contrast", "Sharpness"]:
        c += [(op,) + g for g in [("ra", 9, 1, 0), ("ta", 30, -1, 1), ("ta", 18, 1, 2), ("ra", 20, -1, 3)]]
    c += [("Posterize",) + g for g in [("ra", 9, 1, 0), ("ta", 30, 1, 1), ("ta", 4, 1, 3)]]
    c += [("Solarize",) + g for g in [("ra", 9, 1, 0), ("ta", 30, 1, 1), ("ta", 17, 1, 3)]]
    for op in ["AutoContrast", "Equalize"]:
        c += [(op, "ra", 0, 1, k) for k in (0, 3, 5)]
    return c


def record(name, params, x, y):
    n = name.encode()
    r = struct.pack("<B", len(n)) + n + struct.pack("<I", len(params)) + struct.pack("<%df" % len(params), *params)
    return r + struct.pack("<3I", *x.shape) + x.tobytes() + struct.pack("<3I", *y.shape) + y.tobytes()


def run(out_dir, seed, full=False, h=23, w=17):
    ims = images(seed, h, w)
    recs = []
    for op, pol, b, sign, k in cases(full):
        x = ims[k]
        m = float(np.float32(mag(pol, op, b, sign, x.shape[0], x.shape[1])))
        t = torch.from_numpy(x).permute(2, 0, 1).contiguous()
        y = _apply_op(t, op, m, InterpolationMode.NEAREST, None).permute(1, 2, 0).contiguous().numpy()
        assert y.dtype == np.uint8 and y.shape == x.shape, (op, y.dtype, y.shape)
        recs.append(record("aug_" + op, [m], x, y))
    for h, w in [(23, 17), (224, 224)]:
        recs += table_recs("ra_table", RandAugment()._augmentation_space(BINS, (h, w)), h, w)
    recs += table_recs("ta_table", TrivialAugmentWide()._augmentation_space(BINS), 0, 0)
    body = b"".join(recs)
    size = 8 + 4 + 4 + 8 + len(body) + len(END)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "refs.bin")
    with open(path + ".tmp", "wb") as f:
        f.write(MAGIC + struct.pack("<IIQ", VERSION, len(recs), size) + body + END)
    os.replace(path + ".tmp", path)
    return path, len(recs), size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "augment"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--all", action="store_true", help="every bin of both policies (a thorough check)")
    ap.add_argument("--size", default="23x17", help="HxW of the images (default 23x17)")
    a = ap.parse_args()
    h, w = (int(v) for v in a.size.split("x"))
    path, n, size = run(a.out, a.seed, a.all, h, w)
    print(f"{path}: {n} records, {size} bytes (torch {torch.__version__})")


if __name__ == "__main__":
    sys.exit(main())
