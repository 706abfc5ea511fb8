"""Sluice's element functions for sluice.data's map: each call returns a function object that
writes itself as a call of the config language (include/sluice/from_config.h, "Functions
inside map"; the table is pipeline/from_config_fn.c), and `|` chains them into one map:

    import sluice
    from sluice import fn
    parse = fn.parse_example({"image": "bytes", "label": "int64"})
    ds = ds.map(parse | fn.decode_raw("image", "uint8", (28, 28, 1)) | fn.scale("image", 1 / 255),
                num_parallel_calls=sluice.data.AUTOTUNE)

Arguments go by position or by name, as in the config language. Python types are checked
here (TypeError for a wrong type, ValueError for a value no function takes, such as a
negative size); the rest (an unknown dtype name, a wrong channel count ...) is checked when
the pipeline is built, as sluice.Error naming the spot in Dataset.to_config()'s text.

  SIZE    224 (square) or (height, width)
  SHAPE   an int (rank 1) or a tuple of ints: (28, 28, 1)
  DTYPE   a name ("uint8", "float32", ...) or a numpy dtype / type (np.float32)
  COMP    a component name (str)

A chain lets a decode see what follows it: decode_jpeg | random_resized_crop decodes only the
crop, at a reduced DCT scale (dct_scaling=False keeps full size); two separate maps do not.
"""
import math as _math
import re as _re

import numpy as _np

__all__ = ["Fn", "Chain", "chain", "Feature", "FixedLenFeature", "VarLenFeature", "parse_example",
           "decode_jpeg", "random_resized_crop", "center_crop", "resize", "random_crop", "random_flip",
           "normalize", "cast", "scale", "decode_raw", "one_hot"]

_WORD = _re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_RESERVED = {"true", "false", "auto", "yes", "no", "on", "off"}


def _quote(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _word_or_string(s):
    return s if _WORD.match(s) and s not in _RESERVED else _quote(s)


def _number(fname, pname, v):
    if isinstance(v, bool) or not isinstance(v, (int, float, _np.integer, _np.floating)):
        raise TypeError(f"{fname}(): {pname} must be a number, not {type(v).__name__}")
    if isinstance(v, (int, _np.integer)):
        return str(int(v))
    v = float(v)
    if not _math.isfinite(v):
        raise ValueError(f"{fname}(): {pname} must be finite, not {v}")
    return repr(v)


def _int(fname, pname, v, lo=None):
    if isinstance(v, bool) or not isinstance(v, (int, _np.integer)):
        raise TypeError(f"{fname}(): {pname} must be an int, not {type(v).__name__}")
    if lo is not None and v < lo:
        raise ValueError(f"{fname}(): {pname} must be >= {lo}, not {v}")
    return str(int(v))


def _fmt_comp(fname, pname, v):
    if not isinstance(v, str):
        raise TypeError(f"{fname}(): {pname} (a component name) must be a str, not {type(v).__name__}")
    if not v or len(v) >= 64:
        raise ValueError(f"{fname}(): {pname}: a component name has 1 to 63 characters")
    return _word_or_string(v)


def _fmt_size(fname, pname, v):
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ValueError(f"{fname}(): {pname} is an int or (height, width), not {len(v)} values")
        return f"{_int(fname, pname, v[0], 1)}x{_int(fname, pname, v[1], 1)}"
    return _int(fname, pname, v, 1)


def _fmt_shape(fname, pname, v):
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_int(fname, pname, d, 0) for d in v) + "]"
    return _int(fname, pname, v, 0)


def _dtype_name(fname, pname, v):
    if isinstance(v, str):
        if not _WORD.match(v):
            raise ValueError(f"{fname}(): {pname}: {v!r} is not a dtype name")
        return v
    try:
        return _np.dtype(v).name
    except TypeError:
        raise TypeError(f"{fname}(): {pname} must be a dtype name or a numpy dtype, not {type(v).__name__}") from None


def _fmt_numbers(fname, pname, v):
    if isinstance(v, (tuple, list, _np.ndarray)):
        return "[" + ", ".join(_number(fname, pname, x) for x in list(v)) + "]"
    return _number(fname, pname, v)


def _fmt_bool(fname, pname, v):
    if not isinstance(v, (bool, _np.bool_)):
        raise TypeError(f"{fname}(): {pname} must be a bool, not {type(v).__name__}")
    return "true" if v else "false"


def _fmt_word(fname, pname, v):
    if not isinstance(v, str) or not _WORD.match(v):
        raise TypeError(f"{fname}(): {pname} must be a word (str), not {v!r}")
    return v


def _fmt_fill(fname, pname, v):
    """a number, a list of numbers, or the word "random" (random_erasing's value)"""
    if isinstance(v, str):
        if v != "random":
            raise ValueError(f"{fname}(): {pname} must be a number, a list of numbers or 'random', not {v!r}")
        return v
    return _fmt_numbers(fname, pname, v)


_FMT = {"comp": _fmt_comp, "size": _fmt_size, "shape": _fmt_shape, "dtype": _dtype_name, "numbers": _fmt_numbers,
        "number": _number, "bool": _fmt_bool, "word": _fmt_word, "fill": _fmt_fill,
        "int": lambda f, p, v: _int(f, p, v, 0), "pos": lambda f, p, v: _int(f, p, v, 1)}


class Fn:
    """One element function: Fn.to_config() is its call in the config language. `a | b`
    chains (a Chain)."""

    __slots__ = ("name", "text")

    def __init__(self, name, text):
        self.name, self.text = name, text

    def to_config(self):
        return self.text

    def __or__(self, other):
        return chain(self, other)

    def __ror__(self, other):
        return chain(other, self)

    def __repr__(self):
        return f"<sluice.fn {self.text}>"


class Chain:
    """Functions run in order in one map (the config's `f(...) | g(...)`)."""

    __slots__ = ("fns",)

    def __init__(self, fns):
        self.fns = tuple(fns)

    def to_config(self):
        return " | ".join(f.to_config() for f in self.fns)

    def __or__(self, other):
        return chain(self, other)

    def __ror__(self, other):
        return chain(other, self)

    def __repr__(self):
        return f"<sluice.fn {self.to_config()}>"


def chain(*fns):
    """fns (Fn or Chain) in order as one Chain."""
    out = []
    for f in fns:
        if isinstance(f, Chain):
            out.extend(f.fns)
        elif isinstance(f, Fn):
            out.append(f)
        else:
            raise TypeError(f"chain(): {type(f).__name__} is not a sluice.fn function "
                            "(a Python function goes in a map of its own)")
    if not out:
        raise ValueError("chain(): no functions")
    return Chain(out)


def _define(name, params, nreq, doc):
    """A function building Fn(name): params [(param, kind)] in positional order, the first
    nreq required."""
    names = [p for p, _ in params]
    kinds = dict(params)

    def make(*args, **kwargs):
        if len(args) > len(names):
            raise TypeError(f"{name}() takes at most {len(names)} positional arguments ({len(args)} given)")
        bound = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in kinds:
                raise TypeError(f"{name}() got an unexpected keyword argument '{k}' (it takes {', '.join(names)})")
            if k in bound:
                raise TypeError(f"{name}() got multiple values for argument '{k}'")
            bound[k] = v
        for p in names[:nreq]:
            if bound.get(p) is None:
                raise TypeError(f"{name}() missing required argument '{p}'")
        parts = []
        for i, p in enumerate(names):
            v = bound.get(p)
            if v is None:
                continue
            text = _FMT[kinds[p]](name, p, v)
            parts.append(text if i < nreq else f"{p}={text}")
        return Fn(name, f"{name}({', '.join(parts)})")

    make.__name__ = make.__qualname__ = name
    make.__doc__ = doc
    return make


_IMG = [("max_pixels", "pos"), ("antialias", "bool")]
decode_jpeg = _define("decode_jpeg", [("comp", "comp"), ("channels", "int"), ("max_pixels", "pos"),
                                      ("dct_scaling", "bool"), ("fancy_upscaling", "bool"), ("dct_method", "word")], 1,
                      "decode_jpeg(comp, channels=0|1|3, max_pixels=89478485, dct_scaling=True, fancy_upscaling=True, "
                      "dct_method='INTEGER_ACCURATE'|'INTEGER_FAST'): tf.io.decode_jpeg, in place, uint8 [h, w, c].")
random_resized_crop = _define("random_resized_crop", [("comp", "comp"), ("size", "size"), ("scale", "numbers"),
                                                      ("ratio", "numbers")] + _IMG, 2,
                              "random_resized_crop(comp, size, scale=(0.08, 1), ratio=(3/4, 4/3), max_pixels=, "
                              "antialias=True): torchvision's RandomResizedCrop.")
center_crop = _define("center_crop", [("comp", "comp"), ("size", "size")] + _IMG, 2,
                      "center_crop(comp, size, max_pixels=, antialias=True): the central size region.")
resize = _define("resize", [("comp", "comp"), ("size", "size")] + _IMG + [("shorter", "pos")], 1,
                 "resize(comp, size) or resize(comp, shorter=N): bilinear (antialiased unless antialias=False).")
random_crop = _define("random_crop", [("comp", "comp"), ("size", "size"), ("padding", "int")], 2,
                      "random_crop(comp, size, padding=0): torchvision's RandomCrop.")
random_flip = _define("random_flip", [("comp", "comp"), ("p", "number"), ("horizontal", "bool"),
                                      ("vertical", "bool")], 1,
                      "random_flip(comp, p=0.5, horizontal=True, vertical=False).")
normalize = _define("normalize", [("comp", "comp"), ("mean", "numbers"), ("std", "numbers"),
                                  ("scale_uint8", "bool")], 3,
                    "normalize(comp, mean, std, scale_uint8=True): (x - mean) / std per channel, float32.")
cast = _define("cast", [("comp", "comp"), ("dtype", "dtype")], 2, "cast(comp, dtype): tf.cast (saturating).")
scale = _define("scale", [("comp", "comp"), ("factor", "number")], 2, "scale(comp, factor): x * factor, float32.")
decode_raw = _define("decode_raw", [("comp", "comp"), ("dtype", "dtype"), ("shape", "shape")], 3,
                     "decode_raw(comp, dtype, shape): tf.io.decode_raw with a shape (little endian, no copy).")
one_hot = _define("one_hot", [("comp", "comp"), ("depth", "pos")], 2,
                  "one_hot(comp, depth): tf.one_hot, float32 [depth].")


# torchvision's image functions and the recipe's augmentations (uint8 images unless said)
adjust_brightness = _define("adjust_brightness", [("comp", "comp"), ("factor", "number")], 2,
                            "adjust_brightness(comp, factor): torchvision's F.adjust_brightness.")
adjust_contrast = _define("adjust_contrast", [("comp", "comp"), ("factor", "number")], 2,
                          "adjust_contrast(comp, factor): torchvision's F.adjust_contrast.")
adjust_saturation = _define("adjust_saturation", [("comp", "comp"), ("factor", "number")], 2,
                            "adjust_saturation(comp, factor): torchvision's F.adjust_saturation.")
adjust_hue = _define("adjust_hue", [("comp", "comp"), ("factor", "number")], 2,
                     "adjust_hue(comp, factor): torchvision's F.adjust_hue, factor in [-0.5, 0.5].")
color_jitter = _define("color_jitter", [("comp", "comp"), ("brightness", "numbers"), ("contrast", "numbers"),
                                        ("saturation", "numbers"), ("hue", "numbers")], 1,
                       "color_jitter(comp, brightness=0, contrast=0, saturation=0, hue=0): torchvision's ColorJitter "
                       "(each a number or (lo, hi)).")
rgb_to_grayscale = _define("rgb_to_grayscale", [("comp", "comp"), ("channels", "pos")], 1,
                           "rgb_to_grayscale(comp, channels=1|3): torchvision's F.rgb_to_grayscale.")
random_grayscale = _define("random_grayscale", [("comp", "comp"), ("p", "number")], 1,
                           "random_grayscale(comp, p=0.1): torchvision's RandomGrayscale.")
rot90 = _define("rot90", [("comp", "comp"), ("k", "int")], 1, "rot90(comp, k=1): tf.image.rot90 (any dtype).")
random_rot90 = _define("random_rot90", [("comp", "comp")], 1, "random_rot90(comp): rot90 with k uniform in 0..3.")
erase = _define("erase", [("comp", "comp"), ("i", "int"), ("j", "int"), ("h", "pos"), ("w", "pos"),
                          ("value", "numbers")], 5, "erase(comp, i, j, h, w, value=0): torchvision's F.erase.")
random_erasing = _define("random_erasing", [("comp", "comp"), ("p", "number"), ("scale", "numbers"),
                                            ("ratio", "numbers"), ("value", "fill")], 1,
                         "random_erasing(comp, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0|[...]|'random'): "
                         "torchvision's RandomErasing (uint8 or float32).")
resize_with_pad = _define("resize_with_pad", [("comp", "comp"), ("size", "size")], 2,
                          "resize_with_pad(comp, size): tf.image.resize_with_pad.")
crop_to_bounding_box = _define("crop_to_bounding_box", [("comp", "comp"), ("offset_height", "int"),
                                                        ("offset_width", "int"), ("target_height", "pos"),
                                                        ("target_width", "pos")], 5,
                               "crop_to_bounding_box(comp, offset_height, offset_width, target_height, target_width): "
                               "tf.image.crop_to_bounding_box.")
distorted_bbox_crop = _define("distorted_bbox_crop", [("comp", "comp"), ("boxes", "comp"),
                                                      ("min_object_covered", "number"),
                                                      ("aspect_ratio_range", "numbers"), ("area_range", "numbers"),
                                                      ("max_attempts", "pos"),
                                                      ("use_image_if_no_bounding_boxes", "bool")], 1,
                              "distorted_bbox_crop(comp, boxes=None, ...): tf.image.sample_distorted_bounding_box "
                              "then the crop (the Inception crop).")
rand_augment = _define("rand_augment", [("comp", "comp"), ("num_ops", "int"), ("magnitude", "int"), ("bins", "pos")],
                       1, "rand_augment(comp, num_ops=2, magnitude=9, bins=31): torchvision's RandAugment.")
trivial_augment = _define("trivial_augment", [("comp", "comp"), ("bins", "pos")], 1,
                          "trivial_augment(comp, bins=31): torchvision's TrivialAugmentWide.")
augment_op = _define("augment_op", [("comp", "comp"), ("op", "word"), ("magnitude", "number")], 2,
                     "augment_op(comp, op, magnitude=0): one of the policies' ops (torchvision's names) at a fixed "
                     "magnitude.")
mixup = _define("mixup", [("image", "comp"), ("label", "comp"), ("alpha", "number"), ("num_classes", "pos"),
                          ("p", "number")], 2,
                "mixup(image, label, alpha=0.2, num_classes=N, p=1.0): a batch function (map after batch): "
                "RandomMixup of torchvision's reference scripts.")
cutmix = _define("cutmix", [("image", "comp"), ("label", "comp"), ("alpha", "number"), ("num_classes", "pos"),
                            ("p", "number")], 2,
                 "cutmix(image, label, alpha=1.0, num_classes=N, p=1.0): a batch function: RandomCutmix.")
mixup_cutmix = _define("mixup_cutmix", [("image", "comp"), ("label", "comp"), ("mixup_alpha", "number"),
                                        ("cutmix_alpha", "number"), ("num_classes", "pos")], 2,
                       "mixup_cutmix(image, label, mixup_alpha=0.2, cutmix_alpha=1.0, num_classes=N): the recipe's "
                       "random choice of mixup and cutmix, per batch.")

__all__ += ["adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_hue", "color_jitter",
            "rgb_to_grayscale", "random_grayscale", "rot90", "random_rot90", "erase", "random_erasing",
            "resize_with_pad", "crop_to_bounding_box", "distorted_bbox_crop", "rand_augment", "trivial_augment",
            "augment_op", "mixup", "cutmix", "mixup_cutmix"]


class Feature:
    """A feature of parse_example: dtype "bytes" | "int64" | "float" (also tf's names:
    "string", "float32", numpy types); shape () for one value, (n, ...) for exactly that many,
    None for any count (a VarLenFeature); default for a missing feature; rename: the output
    component's name."""

    __slots__ = ("dtype", "shape", "default", "rename")

    def __init__(self, dtype, shape=(), default=None, rename=None):
        self.dtype, self.shape, self.default, self.rename = dtype, shape, default, rename

    def to_config(self, key):
        t = self.dtype
        names = {"bytes": "bytes", "string": "bytes", "str": "bytes", "int64": "int64", "int": "int64",
                 "float": "float", "float32": "float"}
        if isinstance(t, str) and t in names:
            t = names[t]
        elif t in (bytes, str, _np.bytes_, _np.str_, object):
            t = "bytes"
        elif t is int:
            t = "int64"
        elif t is float:
            t = "float"
        else:
            try:
                t = {"int64": "int64", "float32": "float"}[_np.dtype(t).name]
            except (TypeError, KeyError):
                raise TypeError(f"parse_example(): feature '{key}': dtype {self.dtype!r} is not bytes, int64 "
                                "or float (tf.train.Example's three kinds)") from None
        opts = []
        if self.shape is None:
            opts.append("*")
        elif isinstance(self.shape, (tuple, list)):
            if len(self.shape) == 1:
                opts.append(_int("parse_example", key, self.shape[0], 0))
            elif len(self.shape) > 1:
                opts.append(_fmt_shape("parse_example", key, self.shape))
        else:
            opts.append(_int("parse_example", key, self.shape, 0))
        if self.default is not None:
            d = self.default
            if isinstance(d, (list, tuple, _np.ndarray)):
                vals = list(_np.asarray(d, dtype=object).reshape(-1))
                if not vals or any(x != vals[0] for x in vals):
                    raise ValueError(f"parse_example(): feature '{key}': a default is one value (used for every "
                                     "element)")
                d = vals[0]
            if isinstance(d, str):
                d = d.encode()
            opts.append("default=" + (_quote(d.decode("latin-1")) if isinstance(d, bytes)
                                      else _number("parse_example", key, d)))
        if self.rename is not None:
            opts.append("as=" + _fmt_comp("parse_example", "rename", self.rename))
        return f"{_word_or_string(key)}: {t}" + (f"({', '.join(opts)})" if opts else "")


def FixedLenFeature(shape, dtype, default_value=None):
    """tf.io.FixedLenFeature: exactly prod(shape) values ([] or (): one)."""
    return Feature(dtype, tuple(shape) if isinstance(shape, (list, tuple)) else shape, default_value)


def VarLenFeature(dtype):
    """tf.io.VarLenFeature: any number of values, as a dense rank-1 array."""
    return Feature(dtype, None)


def parse_example(features=None, input="record", **named):
    """parse_example({"image": "bytes", "label": "int64"}) (or image="bytes", label="int64"):
    tf.io.parse_single_example over the component `input` (default "record", which it
    removes). A feature's value is a dtype (one value) or a Feature / FixedLenFeature /
    VarLenFeature."""
    if features is not None and not isinstance(features, dict):
        raise TypeError(f"parse_example(): features must be a dict {{name: type}}, not {type(features).__name__}")
    specs = dict(features or {})
    specs.update(named)
    if not specs:
        raise ValueError("parse_example(): no features to parse")
    parts = []
    for k, v in specs.items():
        if not isinstance(k, str) or not k:
            raise TypeError(f"parse_example(): feature names are non-empty str, not {k!r}")
        parts.append((v if isinstance(v, Feature) else Feature(v)).to_config(k))
    if input != "record":
        parts.append("input=" + _fmt_comp("parse_example", "input", input))
    return Fn("parse_example", f"parse_example({', '.join(parts)})")
