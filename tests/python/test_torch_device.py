#!/usr/bin/python3
"""sluice.torch.IterableDataset(device=...): batches delivered on a device.

  1. device="cpu": the same values as device=None, as torch tensors on the CPU;
  2. device="cuda" where this torch sees no CUDA device: RuntimeError saying so, at creation;
  3. where a CUDA device is there (the GPU machine): every batch arrives on it, equal to the
     host batch, through pinned memory on a side stream one batch ahead, also when the
     consumer computes on its own stream between batches.
A range pipeline written here: needs neither the tools nor data. Exit 77 without torch.
"""
from sluice_pytests import fail, finish, ok, require_modules

np, sluice, _ = require_modules()
try:
    import torch
    import sluice.torch as st
except ImportError:
    print("skipped: torch does not import")
    raise SystemExit(77)

TEXT = """
pipeline p {
    range 0 1000
    map scale(value, 0.5)
    batch 64
}
"""

host = [b["value"].clone() for b in st.IterableDataset(text=TEXT, name="p", seed=1)]
cpu = list(st.IterableDataset(text=TEXT, name="p", seed=1, device="cpu"))
if len(cpu) == len(host) == 16 and all(torch.equal(a["value"], b) and a["value"].device.type == "cpu"
                                       for a, b in zip(cpu, host)):
    ok("device='cpu': the same 16 batches")
else:
    fail(f"device='cpu': {len(cpu)} batches, not equal to the {len(host)} host ones")

if not torch.cuda.is_available():
    try:
        st.IterableDataset(text=TEXT, name="p", device="cuda")
        fail("device='cuda' without CUDA was accepted")
    except RuntimeError as e:
        ok(f"device='cuda' without CUDA: {e}") if "sees no CUDA device" in str(e) else fail(f"message: {e}")
    print("(no CUDA device: the copy to the GPU is checked on a machine with one)")
else:
    got = []
    side = torch.cuda.Stream()
    for b in st.IterableDataset(text=TEXT, name="p", seed=1, device="cuda"):
        with torch.cuda.stream(side):  # the consumer's own stream, computing meanwhile
            torch.cuda.current_stream().wait_stream(torch.cuda.default_stream())
            (b["value"] * 2).sum()
        got.append(b["value"].cpu())
    if len(got) == 16 and all(torch.equal(a, b) for a, b in zip(got, host)):
        ok("device='cuda': 16 batches on the GPU, equal to the host ones")
    else:
        fail("device='cuda': batches differ from the host ones")
finish()
