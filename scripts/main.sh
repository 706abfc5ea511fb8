#!/usr/bin/env bash
# The main job: set up (dependencies, build), convert the default data set — Fashion-MNIST
# from Debian's dataset-fashion-mnist — to 8-way sharded TFRecords under data/fashion/,
# verify every record, then train examples/fashion_mlp.sl on them with 2 replicas
# (sluice-launch -n 2, `strategy ring`: each reads 4 of the 8 shards and takes 64 of the
# global batch of 128, gradients averaged by ring allreduce; CPU backend, the cores split
# between them; a minute or so on a few cores) and print the test accuracy as the last line.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target sluice-record sluice-train sluice-launch >/dev/null
out=${SLUICE_DATA:-data/fashion}
build/bin/sluice-record convert fashion-mnist "$out" --shards 8
build/bin/sluice-record verify "$out"/train-*-of-00008.tfrecord "$out"/test-*-of-00008.tfrecord
# The example reads ../data/fashion relative to itself; point it at $out when that moved.
sets=()
if [ "$out" != data/fashion ]; then
    abs=$(cd "$out" && pwd)
    sets=(--set "pipeline.train.files=\"$abs/train-*.tfrecord\"" --set "pipeline.test.files=\"$abs/test-*.tfrecord\"")
fi
# Checkpoints, TensorBoard event files and the pipeline stats go to runs/fashion_mlp
# (written by rank 0, the only replica that prints). Each run of the main job trains anew:
# --overwrite removes what an earlier run left there (sluice-train refuses a used run
# folder without it, or --resume). The launcher prefixes each line with
# "[worker 0] "; the sed takes it off so the last line is `test accuracy 0.XXXX`.
replicas=2
threads=$(($(nproc) / replicas))
[ "$threads" -ge 1 ] || threads=1
build/bin/sluice-launch -n "$replicas" -- build/bin/sluice-train examples/fashion_mlp.sl \
    --set train.strategy=ring --set train.threads="$threads" --overwrite "${sets[@]}" | sed -u 's/^\[worker 0\] //'
