#!/usr/bin/env bash
# Training checks for a machine with an NVIDIA GPU, after tests/gpu/run.sh: with the tools
# and benchmarks of a CUDA build (BUILD, default build-gpu: bin/ and bench/ in it), on
# Fashion-MNIST converted from the idx files in SRC (default
# /usr/share/datasets/fashion-mnist) into BUILD/data/fashion (8 shards):
#   1. examples/fashion_cnn.sl, one epoch, --backend cuda: the epoch line (examples/s,
#      input wait) and the test accuracy;
#   2. the same epoch with --backend cpu on every core of the machine, beside it;
#   3. sluice-launch -n 2 -- sluice-train ... --backend cuda, strategy ring: two replicas on
#      the one GPU (each prints the GPU it uses; both must name the same one);
#   4. bench/bench_train_gpu (when built: -DSLUICE_BENCH=ON), its RESULT line;
#   5. with FULL=1, fashion_cnn's whole 12 epochs on the GPU (the CPU reaches 0.9205);
#   6. with THREAD_SCAN="1 2 4 ...", the CPU backend's examples/s over 30 steps per count of
#      train.threads (no evaluation), to see how the CPU backend scales on this machine.
#   7. with BUCKETS=1, two replicas on the GPU for 60 steps with bucket_mb 0 and 2: the
#      --hash-log files (parameters after every step) must be equal, and each run's
#      `exchange` time per step is printed.
#   8. with PRECISION=1, the epoch of 1. again in `precision bf16` and in `precision fp16`
#      (mixed-precision GEMMs on tensor cores; fp16 with loss scaling): examples/s and test
#      accuracy beside 1.'s float32.
# SKIP_CPU=1 leaves out 2.
# Run from anywhere: bash tests/gpu/train_checks.sh. Logs go to $OUT when it is set (the
# device tool brings that folder back), else to BUILD. A summary is printed last. Exit
# status: 0 when every check passed, 1 otherwise.
set -u
cd "$(dirname "$0")/../.." || exit 1
root=$PWD
BUILD=${BUILD:-build-gpu}
case $BUILD in /*) ;; *) BUILD=$root/$BUILD ;; esac
SRC=${SRC:-/usr/share/datasets/fashion-mnist}
LOGDIR=${OUT:-$BUILD}
mkdir -p "$LOGDIR"
bin=$BUILD/bin
data=$BUILD/data/fashion
status=0
summary=()
note() { summary+=("$*"); echo "-- $*"; }

echo "== data: $SRC -> $data"
if ! ls "$data"/train-0000[0-7]-of-00008.tfrecord >/dev/null 2>&1; then
    "$bin/sluice-record" convert fashion-mnist "$data" --shards 8 --src "$SRC" >"$LOGDIR/convert.log" 2>&1 ||
        { cat "$LOGDIR/convert.log"; echo "converting failed"; exit 1; }
fi
sets=(--set "pipeline.train.files=\"$data/train-*.tfrecord\"" --set "pipeline.test.files=\"$data/test-*.tfrecord\"")

# train NAME BACKEND ARGS...: one run of fashion_cnn, its log in LOGDIR/NAME.log; prints the
# epoch lines and the accuracy
train() {
    local name=$1 backend=$2
    shift 2
    local t0=$SECONDS
    "$bin/sluice-train" examples/fashion_cnn.sl --backend "$backend" --run-dir "$BUILD/runs/$name" --overwrite \
        "${sets[@]}" "$@" >"$LOGDIR/$name.log" 2>&1
    local rc=$?
    cat "$LOGDIR/$name.log"
    local epoch acc
    epoch=$(grep -E '^epoch' "$LOGDIR/$name.log" | tail -1 | grep -oE '[0-9]+ examples/s +input wait [0-9.]+%')
    acc=$(grep -E '^test accuracy' "$LOGDIR/$name.log" | tail -1)
    note "$name: exit $rc in $((SECONDS - t0)) s; last epoch: ${epoch:-?}; ${acc:-no accuracy}"
    [ "$rc" -eq 0 ] && [ -n "$acc" ] || status=1
}

echo "== 1. fashion_cnn, 1 epoch, --backend cuda"
train cnn_cuda_1epoch cuda --set train.epochs=1 ${EXTRA:-}
if [ "${SKIP_CPU:-0}" != 1 ]; then
    echo "== 2. fashion_cnn, 1 epoch, --backend cpu ($(nproc) threads)"
    train cnn_cpu_1epoch cpu --set train.epochs=1 --set train.threads="$(nproc)" ${EXTRA:-}
fi

echo "== 3. sluice-launch -n 2, both replicas on one GPU (strategy ring)"
t0=$SECONDS
"$bin/sluice-launch" -n 2 -- "$bin/sluice-train" examples/fashion_cnn.sl --backend cuda \
    --run-dir "$BUILD/runs/cnn_cuda_2replicas" --overwrite "${sets[@]}" --set train.epochs=1 \
    --set train.strategy=ring ${EXTRA:-} >"$LOGDIR/cnn_cuda_2replicas.log" 2>&1
rc=$?
cat "$LOGDIR/cnn_cuda_2replicas.log"
gpus=$(grep -oE 'replica [0-9]+: GPU [0-9]+ of [0-9]+' "$LOGDIR/cnn_cuda_2replicas.log" | sort -u | paste -sd';')
acc=$(grep -E 'test accuracy' "$LOGDIR/cnn_cuda_2replicas.log" | tail -1)
note "2 replicas: exit $rc in $((SECONDS - t0)) s; placement: ${gpus:-not printed}; ${acc:-no accuracy}"
[ "$rc" -eq 0 ] && [ -n "$acc" ] || status=1
[ "$(grep -oE 'replica [01]: GPU 0 of' "$LOGDIR/cnn_cuda_2replicas.log" | sort -u | wc -l)" -eq 2 ] || { note "2 replicas: expected both on GPU 0"; status=1; }

if [ -x "$BUILD/bench/bench_train_gpu" ]; then
    echo "== 4. bench_train_gpu"
    SLUICE_FASHION_SRC=$SRC "$BUILD/bench/bench_train_gpu" ${BENCH_ARGS:-} 2>&1 | tee "$LOGDIR/bench_train_gpu.log"
    res=$(grep '^RESULT' "$LOGDIR/bench_train_gpu.log")
    note "${res:-bench_train_gpu: no RESULT line}"
    [ -n "$res" ] || status=1
else
    note "bench_train_gpu not built (configure with -DSLUICE_BENCH=ON)"
fi

if [ "${FULL:-0}" = 1 ]; then
    echo "== 5. fashion_cnn, 12 epochs, --backend cuda"
    train cnn_cuda_12epochs cuda ${EXTRA:-}
fi

if [ -n "${THREAD_SCAN:-}" ]; then
    echo "== 6. the CPU backend's scaling: fashion_cnn, 30 steps per thread count"
    scan=""
    for n in $THREAD_SCAN; do
        "$bin/sluice-train" examples/fashion_cnn.sl --backend cpu --set train.threads="$n" --set train.steps=30 \
            --set train.eval=none --set train.checkpoint=none --run-dir "$BUILD/runs/scan" --overwrite "${sets[@]}" \
            >"$LOGDIR/scan_$n.log" 2>&1
        r=$(grep -oE '[0-9]+ examples/s' "$LOGDIR/scan_$n.log" | tail -1)
        echo "threads $n: ${r:-failed}"
        scan="$scan $n:${r%% *}"
    done
    note "cpu threads:examples/s$scan"
fi

if [ "${BUCKETS:-0}" = 1 ]; then
    echo "== 7. bucketed exchange on the GPU: 2 replicas, bucket_mb 0 vs 2"
    for mb in 0 2; do
        "$bin/sluice-launch" -n 2 -- "$bin/sluice-train" examples/fashion_cnn.sl --backend cuda \
            --run-dir "$BUILD/runs/buckets_$mb" --overwrite "${sets[@]}" --set train.steps=60 --set train.eval=none \
            --set train.strategy=ring --set train.bucket_mb="$mb" --hash-log "$BUILD/runs/hash_$mb" \
            >"$LOGDIR/buckets_$mb.log" 2>&1 || { note "bucket_mb $mb: exit $?"; status=1; }
        grep -E '^\[worker 0\] epoch' "$LOGDIR/buckets_$mb.log"
    done
    if cmp -s "$BUILD/runs/hash_0.0" "$BUILD/runs/hash_2.0" && cmp -s "$BUILD/runs/hash_0.1" "$BUILD/runs/hash_2.1"; then
        note "buckets: bucket_mb 2 bit-identical to bucket_mb 0 ($(wc -l <"$BUILD/runs/hash_2.0") hash lines per replica)"
    else
        note "buckets: bucket_mb 2 DIFFERS from bucket_mb 0"
        status=1
    fi
fi

if [ "${PRECISION:-0}" = 1 ]; then
    echo "== 8. fashion_cnn, 1 epoch, --backend cuda, precision bf16 and fp16"
    for p in bf16 fp16; do
        train "cnn_cuda_$p" cuda --set train.epochs=1 --set train.precision="$p" ${EXTRA:-}
    done
fi

echo
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
