#!/usr/bin/python3
"""sluice-train killed with SIGKILL at random moments while it writes checkpoints (a config
that checkpoints every 2 steps), ten times in a row (four in a sanitizer build); after each
kill:

  - the newest ckpt-*.safetensors in the run folder loads with json + numpy (the loader of
    test_checkpoint_python.py: header, offsets tiling the data, every tensor readable) and
    its metadata names its own step;
  - the next `sluice-train --resume` prints "resuming from PATH at step S" with S the step
    of that newest checkpoint (or starts from 0 when none was written yet);

then a last --resume runs to the end: exit 0, the last line is `test accuracy 0.XXXX`, the
final checkpoint is at the configured step, and that run's event files (the newest in the
run folder's train/ and eval/, the two TensorBoard runs; none at the top) parse as
TFRecord-framed tensorflow.Event protos (first file_version, then the scalars), with the
same tags for the same quantities (loss, accuracy) in both.

Needs sluice-record and sluice-train in $SLUICE_BIN, the Fashion-MNIST idx files, and
python3-numpy / python3-protobuf / python3-crc32c. Exit 0 pass, 1 fail, 77 skipped.
"""
import glob
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import test_checkpoint_python as tcp  # load_safetensors, read_tfrecord, Event
except SystemExit:  # it exits 77 when a module is missing
    print("skipped: python modules for test_checkpoint_python are missing")
    sys.exit(77)
from sluice_testlib import Failure, check, convert_fashion  # noqa: E402

BIN = os.environ.get("SLUICE_BIN", "build/bin")
FM = "/usr/share/datasets/fashion-mnist"
TOTAL = 400
# Under a sanitizer (3-10x slower) four kills: every kill and resume runs the same save,
# load and resume code that the sanitizer watches; the plain build's ten random kill
# moments are what checks that a checkpoint is whole whenever the kill lands.
KILLS = 4 if os.environ.get("SLUICE_SANITIZE") else 10

CONFIG = """
pipeline train {
    files "data/train-*.tfrecord"
    shuffle 1000
    map parse_example(image: bytes, label: int64) | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255)
    batch 32 drop_remainder
    prefetch 2
}
pipeline test {
    files "data/test-*.tfrecord"
    map parse_example(image: bytes, label: int64) | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255)
    batch 100
}
model small {
    input 28x28x1
    flatten
    dense 64 activation=relu
    dense 10
}
train {
    model small
    data train
    eval test steps=100
    steps %d
    optimizer sgd lr=0.05 momentum=0.9
    checkpoint steps=2 keep=3
    backend cpu
    threads 1
    seed 5
}
""" % TOTAL


def newest_checkpoint(run):
    names = sorted(glob.glob(os.path.join(run, "ckpt-*.safetensors")))
    names = [n for n in names if re.fullmatch(r"ckpt-\d+\.safetensors", os.path.basename(n))]
    return names[-1] if names else None


def check_loads(path):
    """The step of a checkpoint that json + numpy load completely."""
    tensors, meta, header, _ = tcp.load_safetensors(path)
    if meta.get("format") != "sluice-checkpoint":
        raise Failure(f"{path}: metadata format {meta.get('format')!r}")
    step = int(meta["step"])
    if int(os.path.basename(path)[5:-12]) != step:
        raise Failure(f"{path}: named for another step than its metadata step {step}")
    k = tensors.get("model/dense_1/kernel")
    if k is None or k.shape != (784, 64) or not (abs(k).sum() > 0):
        raise Failure(f"{path}: model/dense_1/kernel missing or wrong ({None if k is None else k.shape})")
    if "optimizer/state" not in tensors:
        raise Failure(f"{path}: no optimizer/state")
    return step


def event_tags(path):
    """(number of records, set of scalar tags) of one event file."""
    recs = tcp.read_tfrecord(path)
    tags = set()
    for i, r in enumerate(recs):
        ev = tcp.Event()
        ev.ParseFromString(r)
        if i == 0 and ev.file_version != "brain.Event:2":
            raise Failure(f"{path}: first event is not file_version: {ev}")
        if i > 0:
            for v in ev.summary.value:
                tags.add(v.tag)
    return len(recs), tags


def check_events(train_path, eval_path, trained):
    """The train/ and eval/ runs' newest files: the same tags for the same quantities."""
    n, tags = event_tags(eval_path)
    wants = [(eval_path, tags, "accuracy"), (eval_path, tags, "loss")]
    if trained:  # (a run resumed at the last step only evaluates)
        m, ttags = event_tags(train_path)
        n += m
        wants += [(train_path, ttags, t) for t in ("loss", "accuracy", "learning_rate", "input_wait_fraction",
                                                    "examples_per_sec")]
    for path, have, want in wants:
        if want not in have:
            raise Failure(f"{path}: no scalar {want} (tags: {sorted(have)})")
    return n


def main():
    for tool in ("sluice-record", "sluice-train"):
        if not os.access(os.path.join(BIN, tool), os.X_OK):
            print(f"skipped: {BIN}/{tool} is not built")
            return 77
    if not os.path.exists(os.path.join(FM, "train-labels-idx1-ubyte.gz")):
        print(f"skipped: no Fashion-MNIST idx files in {FM}")
        return 77
    tmp = tempfile.mkdtemp(prefix="sluice-crash-")
    try:
        convert_fashion(BIN, os.path.join(tmp, "data"), 2, 3000)
        cfg = os.path.join(tmp, "crash.sl")
        with open(cfg, "w") as f:
            f.write(CONFIG)
        run = os.path.join(tmp, "run")
        seed = int(os.environ.get("SLUICE_CRASH_SEED", str(int(time.time()))))
        rng = random.Random(seed)
        print(f"check: {KILLS} kills at random times (SLUICE_CRASH_SEED={seed})", flush=True)
        # How long an uninterrupted run takes here (machines and builds differ by 10x and
        # more): kill times are drawn within the time the remaining steps should take.
        calib = os.path.join(tmp, "calib")
        t0 = time.monotonic()
        subprocess.run([os.path.join(BIN, "sluice-train"), cfg, "--run-dir", calib], check=True,
                       stdout=subprocess.DEVNULL, timeout=500)
        full = time.monotonic() - t0
        shutil.rmtree(calib)
        print(f"  an uninterrupted run takes {full:.2f} s", flush=True)
        expect = None  # the step the next --resume must report; None: first run
        kills = 0
        attempt = 0
        while kills < KILLS:
            attempt += 1
            if attempt > 6 * KILLS:
                raise Failure(f"only {kills} kills landed in {attempt} tries: the runs end too fast")
            args = [os.path.join(BIN, "sluice-train"), cfg, "--run-dir", run]
            if expect is not None:
                args.append("--resume")
            out = os.path.join(tmp, f"out{attempt}.txt")
            with open(out, "w") as fo:
                p = subprocess.Popen(args, stdout=fo, stderr=subprocess.STDOUT)
                remaining = full * (TOTAL - (expect or 0)) / TOTAL
                # (+ a third of a run for start-up and resume, so late kills still hit training)
                time.sleep(rng.uniform(0.05, 0.95) * (remaining + full / 3))
                p.kill()
                rc = p.wait()
            text = open(out).read()
            if expect is not None:
                m = re.search(r"resuming from (\S+) at step (\d+)", text)
                if expect == 0:
                    if m or (text and "starting from step 0" not in text and "model small" in text):
                        raise Failure(f"attempt {attempt}: expected a fresh start, got:\n{text}")
                elif not m:
                    if "model small" in text:  # started, so it must have said where it resumed
                        raise Failure(f"attempt {attempt}: no 'resuming from' line:\n{text}")
                elif int(m.group(2)) != expect:
                    raise Failure(f"attempt {attempt}: resumed at step {m.group(2)}, the newest checkpoint "
                                  f"was at step {expect}\n{text}")
            if rc == 0:  # finished before the kill: the run is over, start again from scratch
                shutil.rmtree(run)
                expect = None
                continue
            kills += 1
            newest = newest_checkpoint(run)
            expect = check_loads(newest) if newest else 0
            stale = glob.glob(os.path.join(run, "*.tmp.*"))
            print(f"  kill {kills}: newest checkpoint step {expect}" + (f" ({len(stale)} stale temporary file(s))"
                                                                       if stale else ""), flush=True)
        check("a last --resume runs to the end")
        # (fewer fsyncs: the last run only has to finish, on a machine that may be busy)
        p = subprocess.run([os.path.join(BIN, "sluice-train"), cfg, "--run-dir", run, "--resume",
                            "--set", "train.checkpoint.steps=100"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=500)
        text = p.stdout.decode()
        if p.returncode != 0:
            raise Failure(f"final run exited {p.returncode}:\n{text}\n{p.stderr.decode()}")
        m = re.search(r"resuming from (\S+) at step (\d+)", text)
        if expect and (not m or int(m.group(2)) != expect):
            raise Failure(f"final run did not resume at step {expect}:\n{text}")
        lines = text.rstrip("\n").split("\n")
        if not re.fullmatch(r"test accuracy 0\.\d{4}", lines[-1]):
            raise Failure(f"last line {lines[-1]!r}")
        newest = newest_checkpoint(run)
        if check_loads(newest) != TOTAL:
            raise Failure(f"newest checkpoint {newest} is not at step {TOTAL}")
        if glob.glob(os.path.join(run, "events.out.tfevents.*")):
            raise Failure("an event file at the top of the run folder (they belong in train/ and eval/)")
        newest = {}
        for sub in ("train", "eval"):
            evs = sorted(glob.glob(os.path.join(run, sub, "events.out.tfevents.*")), key=os.path.getmtime)
            if not evs:
                raise Failure(f"no event file in {sub}/")
            newest[sub] = evs[-1]
        n = check_events(newest["train"], newest["eval"], expect != TOTAL)
        print(f"  {lines[-1]}; final checkpoint step {TOTAL}; {n} events in train/ and eval/")
    except Failure as e:
        print(f"FAIL: {e}")
        return 1
    except subprocess.TimeoutExpired as e:
        print(f"FAIL: {e}")
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS: test_train_crash")
    return 0


if __name__ == "__main__":
    sys.exit(main())
