#!/usr/bin/python3
"""Reference outputs of torchvision's functional ops on small random uint8 images, for the C
tests of Sluice's image functions (tests/unit/test_fn_color.c and its siblings read them).

    /usr/bin/python3 tests/data/torchvision/gen_refs.py [--out DIR] [--seed N] [--size HxW]

writes DIR/refs.bin (default: this script's folder, seed 0). Needs torch and torchvision
(Debian: apt-get install python3-torchvision, 0.14.1). Each op runs on the tensor form
(uint8 [C, H, W]) through torchvision.transforms.functional, the path of tensor images.

Format (little endian), generic so that any op with float parameters fits:
    header:  8 bytes magic b"SLTVREF1", u32 version (1), u32 record count, u64 total file size
    record:  u8 name length, name (ASCII), u32 nparams, nparams x f32 params,
             u32 h, w, c, h*w*c uint8 input (HWC), u32 oh, ow, oc, oh*ow*oc uint8 output (HWC)
    trailer: 8 bytes b"SLTVEND1"
A reader checks the magic, the version, the size against the file's, every length against
what is left, and the trailer.

Ops (params):
    adjust_brightness [factor]      adjust_contrast [factor]     adjust_saturation [factor]
    adjust_hue [hue_factor]         rgb_to_grayscale [num_output_channels]
    rot90 [k]                       (torch.rot90 over H, W: counter-clockwise, tf.image.rot90)
    erase [i, j, h, w, v0, ...]     (F.erase with v of one value or one per channel)
    color_jitter [o0, o1, o2, o3, brightness, contrast, saturation, hue]
                                    (ColorJitter.forward with fn_idx = o0..o3 and those factors)
To add an op: write a function (image uint8 CHW tensor, params) -> uint8 CHW tensor into OPS,
and the cases (op, params, image index) into cases()."""
import argparse
import os
import struct
import sys

import numpy as np
import torch
import torchvision.transforms.functional as F

MAGIC, END, VERSION = b"SLTVREF1", b"SLTVEND1", 1


def f32(x):
    """x as the float32 the C side reads, back as a python float (so both compute alike)."""
    return float(np.float32(x))


def jitter(img, p):
    order, (b, c, s, h) = [int(x) for x in p[:4]], p[4:8]
    for k in order:
        if k == 0:
            img = F.adjust_brightness(img, b)
        elif k == 1:
            img = F.adjust_contrast(img, c)
        elif k == 2:
            img = F.adjust_saturation(img, s)
        else:
            img = F.adjust_hue(img, h)
    return img


def erase(img, p):
    i, j, h, w = (int(x) for x in p[:4])
    v = torch.tensor([int(x) for x in p[4:]], dtype=torch.uint8)[:, None, None]
    return F.erase(img, i, j, h, w, v)


OPS = {
    "adjust_brightness": lambda img, p: F.adjust_brightness(img, p[0]),
    "adjust_contrast": lambda img, p: F.adjust_contrast(img, p[0]),
    "adjust_saturation": lambda img, p: F.adjust_saturation(img, p[0]),
    "adjust_hue": lambda img, p: F.adjust_hue(img, p[0]),
    "rgb_to_grayscale": lambda img, p: F.rgb_to_grayscale(img, int(p[0])),
    "rot90": lambda img, p: torch.rot90(img, int(p[0]), [1, 2]),
    "erase": erase,
    "color_jitter": jitter,
}


def images(seed, h=23, w=17):
    """Three h x w x 3 images and one h x w x 1 (w >= 17, h >= 4), uniform random; the third
    has rows of grey pixels (r = g = b, hue's special case), of pure colours and extremes."""
    rng = np.random.default_rng(seed)
    ims = [rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8) for _ in range(3)]
    g = rng.integers(0, 256, size=(w,), dtype=np.uint8)
    ims[2][0] = np.stack([g, g, g], axis=1)
    ims[2][1] = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 0], [0, 255, 255], [255, 0, 255],
                          [255, 255, 255], [0, 0, 0], [1, 0, 0], [254, 255, 255], [128, 128, 127], [3, 2, 1],
                          [0, 0, 1], [255, 254, 254], [10, 200, 10], [200, 10, 200], [7, 7, 8]]
                         + [[9, 9, 9]] * (w - 17), dtype=np.uint8)
    ims[2][2, :, 0] = ims[2][2, :, 1]  # r = g, b free
    ims[2][3, :, 1] = ims[2][3, :, 2]  # g = b, r free
    ims.append(rng.integers(0, 256, size=(h, w, 1), dtype=np.uint8))
    return ims


def cases(h=23, w=17):
    """(op, params, image index) for h x w images: image 3 is the one-channel one."""
    c = []
    for k, f in enumerate([0.0, 0.37, 1.0, 1.81]):
        c.append(("adjust_brightness", [f], k % 3))
    c.append(("adjust_brightness", [1.3], 3))
    for k, f in enumerate([0.0, 0.5, 1.0, 1.9]):
        c.append(("adjust_contrast", [f], k % 3))
    c += [("adjust_contrast", [0.3], 3), ("adjust_contrast", [1.6], 3)]
    for k, f in enumerate([0.0, 0.6, 1.0, 2.2]):
        c.append(("adjust_saturation", [f], k % 3))
    c.append(("adjust_saturation", [0.4], 3))
    for k, hue in enumerate([-0.5, -0.27, -0.05, 0.0, 0.1, 0.33, 0.5]):
        c.append(("adjust_hue", [hue], k % 3))
    c.append(("adjust_hue", [0.2], 2))
    c.append(("adjust_hue", [0.2], 3))
    for k in range(4):
        c.append(("rgb_to_grayscale", [1 + 2 * (k % 2)], k))
    for k in range(4):
        c.append(("rot90", [k], k % 3))
    c.append(("rot90", [3], 3))
    c += [("erase", [2, 3, 10, 5, 0], 0), ("erase", [0, 0, h, w, 7, 100, 255], 1), ("erase", [h - 1, w - 1, 1, 1, 9], 3)]
    c += [("color_jitter", [0, 1, 2, 3, 0.8, 1.2, 0.7, 0.1], 0), ("color_jitter", [3, 2, 1, 0, 1.3, 0.6, 1.4, -0.2], 1),
          ("color_jitter", [2, 0, 3, 1, 0.9, 1.1, 1.6, 0.45], 2)]
    return c


def run(out_dir, seed, h=23, w=17):
    """Write out_dir/refs.bin for images of h x w from seed; returns (path, records, bytes)."""
    ims = images(seed, h, w)
    recs = []
    for op, params, k in cases(h, w):
        params = [f32(p) for p in params]
        x = ims[k]
        t = torch.from_numpy(x).permute(2, 0, 1).contiguous()
        y = OPS[op](t, params).permute(1, 2, 0).contiguous().numpy()
        assert y.dtype == np.uint8, (op, y.dtype)
        name = op.encode()
        r = struct.pack("<B", len(name)) + name + struct.pack("<I", len(params))
        r += struct.pack("<%df" % len(params), *params)
        r += struct.pack("<3I", *x.shape) + x.tobytes() + struct.pack("<3I", *y.shape) + y.tobytes()
        recs.append(r)
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
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", default="23x17", help="HxW of the images (W >= 17)")
    a = ap.parse_args()
    h, w = (int(x) for x in a.size.split("x"))
    path, n, size = run(a.out, a.seed, h, w)
    print(f"{path}: {n} records, {size} bytes (torch {torch.__version__})")


if __name__ == "__main__":
    sys.exit(main())
