#!/usr/bin/python3
"""torchrun (torch.distributed.run's main), as `python3 -m torch.distributed.run` starts it.

Debian bookworm's torch 1.13 under Python 3.11 crashes before starting any process: its
--redirects / --tee defaults ("0") parse to None (Python 3.11 no longer yields the zero
member when iterating the Std flag, so Std.from_str("0") finds nothing), and to_map then
calls None.get. Here None means what "0" means, Std.NONE; where that code is fixed (newer
torch) nothing changes. Usage: torchrun_compat.py TORCHRUN-ARGS...
"""
import sys

try:
    import torch.distributed.elastic.multiprocessing as mp
    import torch.distributed.elastic.multiprocessing.api as api

    _to_map = api.to_map

    def to_map(val_or_map, local_world_size):
        return _to_map(api.Std.NONE if val_or_map is None else val_or_map, local_world_size)

    api.to_map = to_map
    if hasattr(mp, "to_map"):
        mp.to_map = to_map
except (ImportError, AttributeError):
    pass

from torch.distributed.run import main  # noqa: E402

sys.exit(main())
