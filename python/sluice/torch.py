"""sluice.torch: feed a PyTorch training loop from a Sluice pipeline.

    import torch, sluice.torch
    ds = sluice.torch.IterableDataset("examples/fashion.sl", "train", seed=1)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    for epoch in range(2):
        for batch in loader:              # {"image": float32[128,28,28,1], "label": int64[128]}
            ...

Use batch_size=None (the pipeline batches) and num_workers=0 (the pipeline runs its own
threads, as tf.data and DALI do: DataLoader worker processes would only add copies through
shared memory). Workers are nevertheless handled: with num_workers=W each worker reads a
disjoint part (shard index rank*W + worker of world*W), so nothing is seen twice.

Rank and world size come from torch.distributed when it is initialized, else from the RANK
and WORLD_SIZE environment variables (what torchrun sets), else (0, 1); each rank reads its
own shard of the data (the config's `shard` statement decides by file or by record).

Each `for` over the dataset is one epoch: epoch k's iterator is seeded as
sluice.Pipeline's pass k (set_epoch(k) chooses, as with DistributedSampler). Tensors come
from torch.from_dlpack over Sluice's memory (no copy) and must not be modified in place
(clone() first): see the `sluice` module's notes. The exception: a component that views a
mapped TFRecord file (unbatched raw bytes) comes as a copy when this torch asks for an
old-style (unversioned) DLPack capsule, which cannot say read-only: a write into the shared
mapping would kill the process. copy=True copies such components when they are handed out
(immune to the file being truncated later). Byte-string components are yielded as numpy
object arrays; bfloat16 ones as torch.bfloat16.
"""
import os

import torch
import torch.utils.data

import sluice

__all__ = ["IterableDataset", "rank_and_world"]


def rank_and_world():
    """(rank, world size): torch.distributed when initialized, else RANK / WORLD_SIZE,
    else (0, 1)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    try:
        rank = int(os.environ.get("RANK", "0"))
        world = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError as e:
        raise ValueError(f"RANK / WORLD_SIZE must be integers: {e}") from None
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"RANK={rank} WORLD_SIZE={world}: need 0 <= RANK < WORLD_SIZE")
    return rank, world


def _to_torch(buf):
    a = sluice._to_numpy(buf)
    if a.dtype == object:
        return a
    t = torch.from_dlpack(a)
    if buf.dtype == "bfloat16":
        t = t.view(torch.bfloat16)
    return t


class IterableDataset(torch.utils.data.IterableDataset):
    """A torch IterableDataset over `pipeline NAME { }` of a Sluice config.

    IterableDataset(config, name=None, *, text=None, set=None, seed=0, rank=None,
                    world_size=None, base_dir=None, cpu_budget=0, ram_budget=0, copy=False)

    The arguments are sluice.Pipeline's; rank/world_size default to rank_and_world().
    The pipeline is built lazily, in the process that iterates (so a DataLoader worker
    builds its own after the fork)."""

    def __init__(self, config=None, name=None, *, text=None, set=None, seed=0, rank=None,
                 world_size=None, base_dir=None, cpu_budget=0, ram_budget=0, copy=False):
        super().__init__()
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        self._args = dict(config=config, name=name, text=text, set=set, seed=seed,
                          base_dir=base_dir, cpu_budget=cpu_budget, ram_budget=ram_budget, copy=copy)
        self._rank = rank
        self._world = world_size
        self._pipe = None
        self._pipe_key = None
        self._epoch = None
        self._next_epoch = 0
        self.last_iterator = None

    def __getstate__(self):
        # DataLoader workers started by spawn get a copy without the built pipeline
        st = self.__dict__.copy()
        st["_pipe"] = st["_pipe_key"] = st["last_iterator"] = None
        return st

    def set_epoch(self, epoch):
        """Make the next iteration epoch `epoch` (else epochs count from 0)."""
        self._epoch = int(epoch)

    def shard(self):
        """(index, count) of the part this process reads."""
        if self._rank is None:
            rank, world = rank_and_world()
        else:
            rank, world = int(self._rank), int(self._world)
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            return rank * info.num_workers + info.id, world * info.num_workers
        return rank, world

    def pipeline(self):
        """The sluice.Pipeline this process reads (built on first use)."""
        key = self.shard()
        if self._pipe is None or self._pipe_key != key:
            a = self._args
            self._pipe = sluice.Pipeline(a["config"], a["name"], text=a["text"], set=a["set"],
                                         shard=key, seed=a["seed"], base_dir=a["base_dir"],
                                         cpu_budget=a["cpu_budget"], ram_budget=a["ram_budget"],
                                         copy=a["copy"])
            self._pipe_key = key
        return self._pipe

    def stats(self):
        """The stats dict of the latest epoch (see sluice.Pipeline.stats)."""
        return self.pipeline().stats()

    def __iter__(self):
        p = self.pipeline()
        epoch = self._next_epoch if self._epoch is None else self._epoch
        self._epoch = None
        self._next_epoch = epoch + 1
        it = p.iter(epoch=epoch)
        self.last_iterator = it
        raw = it.buffers()
        try:
            for d in raw:
                yield {k: _to_torch(b) for k, b in d.items()}
        finally:
            it.close()
