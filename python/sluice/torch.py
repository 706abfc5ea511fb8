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

Resuming: state_dict() says where this process's reading stands (the epoch and, in the
middle of one, the Sluice iterator's state); load_state_dict() on a new dataset (built with
the same config, seed and shard) makes its next iteration continue there, with the same
batches, and the epochs after it follow as they would have. These are the names torchdata's
StatefulDataLoader calls (in each worker, with num_workers > 0):

    sd = ds.state_dict()                  # with the checkpoint (torch.save takes it)
    ...
    ds = sluice.torch.IterableDataset(...same arguments...)
    ds.load_state_dict(sd)
    for batch in loader: ...              # the batch after the last one seen before
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


def _on_device(batches, device):
    """The batches on device: for CUDA through pinned memory on a side stream, one ahead."""
    if device.type != "cuda":
        for b in batches:
            yield {k: t.to(device) if isinstance(t, torch.Tensor) else t for k, t in b.items()}
        return
    side = torch.cuda.Stream(device=device)

    def stage(b):
        out, keep = {}, []
        with torch.cuda.stream(side):
            for k, t in b.items():
                if isinstance(t, torch.Tensor):
                    h = t.pin_memory()  # a pinned copy of Sluice's buffer: the DMA's source
                    keep.append(h)
                    out[k] = h.to(device, non_blocking=True)
                else:
                    out[k] = t
        ev = torch.cuda.Event()
        ev.record(side)
        return out, ev, keep

    ahead = None
    for b in batches:
        nxt = stage(b)
        if ahead is not None:
            yield _hand_out(ahead, device)
        ahead = nxt
    if ahead is not None:
        yield _hand_out(ahead, device)


def _hand_out(staged, device):
    out, ev, keep = staged
    cur = torch.cuda.current_stream(device)
    cur.wait_event(ev)
    for t in out.values():
        if isinstance(t, torch.Tensor):
            t.record_stream(cur)
    del keep  # the pinned sources: the copy is ordered before anything cur does next
    return out


class IterableDataset(torch.utils.data.IterableDataset):
    """A torch IterableDataset over `pipeline NAME { }` of a Sluice config.

    IterableDataset(config, name=None, *, text=None, set=None, seed=0, rank=None,
                    world_size=None, base_dir=None, cpu_budget=0, ram_budget=0, copy=False,
                    device=None)

    The arguments are sluice.Pipeline's; rank/world_size default to rank_and_world().
    The pipeline is built lazily, in the process that iterates (so a DataLoader worker
    builds its own after the fork).

    device: None (host tensors over Sluice's memory, the default), or where the batches
    should arrive ("cuda", "cuda:1", a torch.device). For a CUDA device each batch is
    copied into pinned memory and from there to the device on a side stream of its own, one
    batch ahead of the one handed out: while the loop computes on batch k, batch k + 1 is
    on its way. A batch is handed out after the consumer's current stream is made to wait
    for its copy (and its tensors are recorded on that stream, so the caching allocator
    does not reuse them early), as DALI's and Lightning's prefetchers do. Byte-string
    components stay on the host. Any other device: a plain .to(device)."""

    def __init__(self, config=None, name=None, *, text=None, set=None, seed=0, rank=None,
                 world_size=None, base_dir=None, cpu_budget=0, ram_budget=0, copy=False, device=None):
        super().__init__()
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        self._device = None if device is None else torch.device(device)
        if self._device is not None and self._device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device={device!r}: this torch sees no CUDA device")
        self._args = dict(config=config, name=name, text=text, set=set, seed=seed,
                          base_dir=base_dir, cpu_budget=cpu_budget, ram_budget=ram_budget, copy=copy)
        self._rank = rank
        self._world = world_size
        self._pipe = None
        self._pipe_key = None
        self._epoch = None
        self._next_epoch = 0
        self._resume = None  # (epoch, state hex or None, shard) from load_state_dict, until used
        self._live = None    # [epoch, iterator, ended] of the latest iteration
        self.last_iterator = None

    def __getstate__(self):
        # DataLoader workers started by spawn get a copy without the built pipeline
        st = self.__dict__.copy()
        st["_pipe"] = st["_pipe_key"] = st["last_iterator"] = st["_live"] = None
        return st

    def set_epoch(self, epoch):
        """Make the next iteration epoch `epoch` (else epochs count from 0). After
        load_state_dict, an epoch other than the loaded one is ValueError (it would drop
        the loaded position); the loaded one keeps it."""
        epoch = int(epoch)
        if self._resume is not None:
            if epoch != self._resume[0]:
                raise ValueError(f"set_epoch({epoch}): the loaded state resumes epoch {self._resume[0]}; "
                                 f"call set_epoch({self._resume[0]}), or load no state")
            return
        self._epoch = epoch

    def _position(self):
        """(epoch, state hex or None): where the next iteration starts, or resumes."""
        if self._resume is not None:
            return self._resume[:2]
        if self._epoch is not None:
            return self._epoch, None
        if self._live is None:
            return self._next_epoch, None
        epoch, it, ended = self._live
        return (epoch + 1, None) if ended else (epoch, it.state().hex())

    def state_dict(self):
        """Where this process's reading stands, as a dict of plain values (torch.save and
        torch.load(weights_only=True) take it, as does JSON):

            epoch               int: the epoch being read (the next one, at an epoch's end)
            sluice_iter_state   str: the position within that epoch, Iterator.state()'s 48
                                bytes in hex (a str: torch's weights-only loader refuses
                                bytes), or None when the epoch starts from its beginning
            seed                int: the dataset's seed
            shard               [index, count]: the part this process reads

        The position is the batches handed out so far (a DataLoader with num_workers=0
        reads none ahead); a state_dict() taken before any iteration, or after
        load_state_dict, says where the next iteration starts."""
        epoch, state = self._position()
        return {"epoch": epoch, "sluice_iter_state": state, "seed": int(self._args["seed"]),
                "shard": list(self.shard())}

    def load_state_dict(self, state_dict):
        """Make the next iteration continue where state_dict() stood: epoch `epoch`,
        from the position in sluice_iter_state (None: from the epoch's beginning), with
        the epoch's own seed; later iterations go on with the next epochs.

        ValueError when state_dict is not a dict, a key is missing, epoch is not an int
        >= 0, sluice_iter_state is neither a hex str nor None (raw bytes are taken too), or
        seed and shard are not this dataset's (a position means nothing in another pass);
        at the next iteration, when this process reads another shard than the one loaded
        (a DataLoader worker given the main process's state). Damaged state bytes, or
        those of another pipeline, raise sluice.Error (SL_ECORRUPT, SL_EINVAL) at the next
        iteration, when the pipeline is built."""
        if not isinstance(state_dict, dict):
            raise ValueError(f"load_state_dict: want the dict state_dict() returned, not {type(state_dict).__name__}")
        for key in ("epoch", "sluice_iter_state", "seed", "shard"):
            if key not in state_dict:
                raise ValueError(f"load_state_dict: the dict has no {key!r} (keys: {sorted(state_dict)}); "
                                 "pass what state_dict() returned")
        epoch, state = state_dict["epoch"], state_dict["sluice_iter_state"]
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"load_state_dict: 'epoch' must be an int >= 0, not {epoch!r}")
        if isinstance(state, str):
            try:
                state = bytes.fromhex(state)
            except ValueError:
                raise ValueError(f"load_state_dict: 'sluice_iter_state' {state[:24]!r}... is not hex "
                                 "(state_dict() writes Iterator.state().hex())") from None
        elif isinstance(state, (bytearray, memoryview)):
            state = bytes(state)
        elif state is not None and not isinstance(state, bytes):
            raise ValueError("load_state_dict: 'sluice_iter_state' must be a hex str (what state_dict() gives), "
                             f"bytes or None, not {type(state).__name__}")
        seed, shard = state_dict["seed"], state_dict["shard"]
        if seed != int(self._args["seed"]):
            raise ValueError(f"load_state_dict: the state was saved with seed={seed!r}, this dataset has "
                             f"seed={self._args['seed']}: its epochs are other passes")
        mine = list(self.shard())
        if not isinstance(shard, (list, tuple)) or list(shard) != mine:
            raise ValueError(f"load_state_dict: the state was saved for shard {shard!r}, this process reads "
                             f"shard {mine} (index, count): another part of the data")
        self._epoch = None
        self._resume = (epoch, None if state is None else state.hex(), mine)

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
        if self._resume is not None:
            epoch, state, shard = self._resume
            if state is not None and list(self.shard()) != shard:
                raise ValueError(f"the loaded state is shard {shard}'s, and this process reads shard "
                                 f"{list(self.shard())}: with DataLoader workers, load each worker's own state "
                                 "in that worker (torchdata's StatefulDataLoader does)")
        else:
            epoch, state = (self._next_epoch if self._epoch is None else self._epoch), None
        p = self.pipeline()
        # the state's seed must be epoch's (iter checks it): a state of another epoch fails here
        it = p.iter(epoch=epoch, state=None if state is None else bytes.fromhex(state))
        self._resume = self._epoch = None
        self._next_epoch = epoch + 1
        self.last_iterator = it
        live = self._live = [epoch, it, False]
        raw = it.buffers()
        try:
            batches = ({k: _to_torch(b) for k, b in d.items()} for d in raw)
            if self._device is not None:
                batches = _on_device(batches, self._device)
            for b in batches:
                yield b
            live[2] = True
        finally:
            it.close()
