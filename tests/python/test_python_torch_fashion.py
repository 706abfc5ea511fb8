#!/usr/bin/python3
"""sluice.torch.IterableDataset feeding a PyTorch training loop.

  1. shards: with RANK=1 WORLD_SIZE=2 in the environment (and no torch.distributed), the
     dataset reads shard 1 of 2: the same labels as sluice.Pipeline(shard=(1, 2)); with
     DataLoader workers, the workers read disjoint parts that together make the whole;
  2. tensors: the batches are torch tensors sharing Sluice's memory (float32 images,
     int64 labels), through a DataLoader with batch_size=None, num_workers=0;
  3. training: a 2-epoch MLP (784-256-10, Adam) on all of Fashion-MNIST (converted here
     with sluice-record) reaches at least 0.85 test accuracy; with one torch thread (the
     pipeline's threads use the other core) it takes well under two minutes on 2 cores.

Exit 77 (skipped, with the reason) when torch, the module, the tools or the data are missing.
"""
import os
import shutil
import sys
import tempfile
import time

try:
    import torch
except ImportError as e:
    print(f"skipped: torch is not installed ({e}); scripts/deps.sh installs python3-torch")
    sys.exit(77)
try:
    import sluice
    import sluice.torch
except ImportError as e:
    print(f"skipped: the sluice Python module is not importable ({e}); build the target sluice_python "
          "and set PYTHONPATH=build/python")
    sys.exit(77)

from sluice_pytests import convert_fashion, fail, finish, ok, require  # noqa: E402

require("sluice-record")

# One compute thread: the pipeline's own threads use the other core (OpenMP's spinning
# threads would compete with them: on a busy 2-core machine 2 threads ran 14x slower).
torch.set_num_threads(1)
torch.manual_seed(0)
CONFIG = """
pipeline train {
    files "data/train-*.tfrecord"
    shard auto
    interleave cycle=4 block=16 parallel=auto
    shuffle 10000
    map parse_example(image: bytes, label: int64)
        | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255)  parallel=auto
    batch 64 drop_remainder
    prefetch auto
}
pipeline test {
    files "data/test-*.tfrecord"
    shard auto
    map parse_example(image: bytes, label: int64)
        | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255)
    batch 500
    prefetch auto
}
"""

T = tempfile.mkdtemp(prefix="sluice-pytorch-")
try:
    t0 = time.monotonic()
    convert_fashion(os.path.join(T, "data"), 4)
    cfg = os.path.join(T, "fashion.sl")
    with open(cfg, "w") as f:
        f.write(CONFIG)

    # ---- 1. shards from the environment, and DataLoader workers ----
    os.environ["RANK"], os.environ["WORLD_SIZE"] = "1", "2"
    ds = sluice.torch.IterableDataset(cfg, "test")
    got = [b["label"].tolist() for b in ds]
    del os.environ["RANK"], os.environ["WORLD_SIZE"]
    want = [b["label"].tolist() for b in sluice.Pipeline(cfg, "test", shard=(1, 2))]
    whole = sorted(x for b in sluice.Pipeline(cfg, "test") for x in b["label"].tolist())
    if ds.shard() == (0, 1) and got == want and len(sum(got, [])) == 5000:
        ok("RANK=1 WORLD_SIZE=2: the dataset reads shard 1 of 2 (5000 test examples, as Pipeline(shard=(1, 2)))")
    else:
        fail(f"env shard: {len(sum(got, []))} labels, equal to Pipeline(shard=(1, 2)): {got == want}")
    loader = torch.utils.data.DataLoader(sluice.torch.IterableDataset(cfg, "test"), batch_size=None, num_workers=2)
    wl = sorted(x for b in loader for x in b["label"].tolist())
    if wl == whole:
        ok("DataLoader with 2 workers: disjoint parts that make the whole test set (10000 labels)")
    else:
        fail(f"workers: {len(wl)} labels, equal to the whole: {wl == whole}")

    # ---- 2 and 3. train a 2-epoch MLP ----
    train = sluice.torch.IterableDataset(cfg, "train", seed=1)
    test = sluice.torch.IterableDataset(cfg, "test")
    loader = torch.utils.data.DataLoader(train, batch_size=None, num_workers=0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    lossf = torch.nn.CrossEntropyLoss()
    steps, checked = 0, False
    t1 = time.monotonic()
    for epoch in range(2):
        seen = 0
        for batch in loader:
            x, y = batch["image"], batch["label"]
            if not checked:
                checked = True
                arr_addr = train.last_iterator is not None
                if (x.dtype == torch.float32 and tuple(x.shape) == (64, 28, 28, 1) and y.dtype == torch.int64
                        and tuple(y.shape) == (64,) and float(x.min()) >= 0 and float(x.max()) <= 1 and arr_addr):
                    ok("batches are torch tensors: image float32[64,28,28,1] in [0, 1], label int64[64]")
                else:
                    fail(f"first batch: {x.dtype} {tuple(x.shape)} {y.dtype} {tuple(y.shape)}")
            opt.zero_grad()
            loss = lossf(model(x), y)
            loss.backward()
            opt.step()
            steps += 1
            seen += y.shape[0]
        print(f"epoch {epoch}: {seen} examples, last loss {loss.item():.3f}")
        if seen != 60000 // 64 * 64:
            fail(f"epoch {epoch}: {seen} examples, want {60000 // 64 * 64}")
    st = train.stats()
    train_s = time.monotonic() - t1
    correct = total = 0
    with torch.no_grad():
        for batch in test:
            pred = model(batch["image"]).argmax(1)
            correct += int((pred == batch["label"]).sum())
            total += batch["label"].shape[0]
    acc = correct / max(total, 1)
    print(f"test accuracy {acc:.4f} on {total} examples; {steps} steps in {train_s:.1f} s; "
          f"total {time.monotonic() - t0:.1f} s")
    if total == 10000 and acc >= 0.85:
        ok(f"2-epoch MLP fed by sluice.torch.IterableDataset: test accuracy {acc:.4f} >= 0.85")
    else:
        fail(f"test accuracy {acc:.4f} on {total} examples (want >= 0.85 on 10000)")
    if st.get("elements") == 60000 // 64:
        ok(f"stats() of the last epoch: {st['elements']} batches, {len(st['ops'])} ops")
    else:
        fail(f"stats: {st.get('elements')} elements")
finally:
    shutil.rmtree(T, ignore_errors=True)

finish()
