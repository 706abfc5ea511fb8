#!/usr/bin/env bash
# The main job: set up (dependencies, build), convert the default data set — Fashion-MNIST
# from Debian's dataset-fashion-mnist — to 8-way sharded TFRecords under data/fashion/,
# and verify every record.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target sluice-record >/dev/null
out=${SLUICE_DATA:-data/fashion}
build/bin/sluice-record convert fashion-mnist "$out" --shards 8
build/bin/sluice-record verify "$out"/train-*-of-00008.tfrecord "$out"/test-*-of-00008.tfrecord
