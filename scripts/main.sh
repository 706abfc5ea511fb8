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
say() { echo "main: $*"; }
say "checking the build dependencies (scripts/deps.sh)..."
bash scripts/deps.sh
# Build every tool and example the documentation uses (sluice-record, -train, -launch, -stats, the
# examples, libsluice.a and libsluice.so), not the tests. The full output is kept in
# build/main-build.log; the progress is shown every 10%, and errors in full.
mkdir -p build
say "configuring (build/, log in build/main-configure.log)..."
if ! cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >build/main-configure.log 2>&1; then
    cat build/main-configure.log >&2
    say "configuring failed" >&2
    exit 1
fi
targets=(sluice_static sluice_shared)
for f in tools/sluice-*.c; do targets+=("$(basename "$f" .c)"); done
for f in examples/*.c; do targets+=("example_$(basename "$f" .c)"); done
say "building ${targets[*]} (about 1-2 minutes on a few cores; nothing to do when already built)..."
t0=$SECONDS
# shown: "[ 42%]" (make) or "[12/140]" (ninja) in 10% steps
if ! cmake --build build -j"$(nproc)" --target "${targets[@]}" 2>&1 | tee build/main-build.log |
    awk '{ p = -1
           if (match($0, /^\[ *[0-9]+%\]/)) p = substr($0, RSTART + 1, RLENGTH - 3) + 0
           else if (match($0, /^\[[0-9]+\/[0-9]+\]/)) { split(substr($0, 2, RLENGTH - 2), f, "/"); p = int(100 * f[1] / f[2]) }
           if (p >= next_p) { printf "main:   build %d%%\n", p; fflush(); next_p = int(p / 10) * 10 + 10 }
           if ($0 ~ /error:|warning:|\*\*\*/) { print; fflush() } }'; then
    grep -E -B2 -A6 'error|Error' build/main-build.log | tail -60 >&2
    say "the build failed (full log: build/main-build.log)" >&2
    exit 1
fi
say "built in $((SECONDS - t0)) s: tools in build/bin/, libraries in build/lib/"
out=${SLUICE_DATA:-data/fashion}
say "converting Fashion-MNIST to $out (8 shards) and verifying every record..."
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
