#!/usr/bin/env bash
# GPU checks for a machine with an NVIDIA GPU (e.g. the device tool's H100/H200): configure
# a CUDA build inside the repository, build the two GPU test programs, run them and print
# a summary, then the backend tests again under compute-sanitizer (memcheck, racecheck,
# initcheck, synccheck). Run from anywhere: bash tests/gpu/run.sh
#   BUILD=dir        build directory relative to the repo (default build-gpu)
#   CUDA_ARCHS="90"  CUDA architectures (default: the project's 80;90)
#   JOBS=n           parallel build jobs (default: all cores)
#   SAN_TIMEOUT=s    seconds each compute-sanitizer tool may take (default 600)
#   SAN_TOOLS="..."  the compute-sanitizer tools to run (default: memcheck racecheck initcheck
#                    synccheck; empty: none)
#   PREBUILT=1       skip configure and build: BUILD already holds tests/test_cuda and
#                    tests/test_backend_cuda (built elsewhere with the same CUDA version)
# Logs go to $OUT when it is set (the device tool brings that folder back), else to the
# build directory. Exit status: 0 when both programs pass, 1 otherwise (a skip counts as a
# failure here: this script is meant for a machine that has a GPU).
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
LOGDIR=${OUT:-$BUILD}
mkdir -p "$BUILD" "$LOGDIR"

echo "== GPU"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
else
    echo "nvidia-smi not found"
fi
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    echo "nvcc not found (neither on PATH nor /usr/local/cuda/bin): cannot build the CUDA parts"
    exit 1
fi

if [ "${PREBUILT:-0}" = 1 ]; then
    echo "== prebuilt: $BUILD/tests"
else
    echo "== configure ($BUILD)"
    cfg=(-S . -B "$BUILD" -DSLUICE_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
    [ -n "${CUDA_ARCHS:-}" ] && cfg+=("-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS}")
    if ! cmake "${cfg[@]}" >"$LOGDIR/gpu_configure.log" 2>&1; then
        tail -n 40 "$LOGDIR/gpu_configure.log"
        echo "configure FAILED"
        exit 1
    fi
    grep "sluice: CUDA" "$LOGDIR/gpu_configure.log"

    echo "== build (-j$JOBS)"
    if ! cmake --build "$BUILD" -j"$JOBS" --target test_backend_cuda test_cuda test_strategy_ring >"$LOGDIR/gpu_build.log" 2>&1; then
        grep -E "error|Error" "$LOGDIR/gpu_build.log" | head -n 40
        echo "build FAILED"
        exit 1
    fi
    grep -iE "warning" "$LOGDIR/gpu_build.log" | grep -E "\.cu" | head -n 20
fi

status=0
# test_strategy_ring with SL_TEST_BACKEND=cuda: two ring replicas (threads) on the GPU,
# bucketed and unbucketed exchanges bit-identical
for t in test_cuda test_backend_cuda test_strategy_ring; do
    echo "== $t"
    start=$(date +%s)
    (cd "$BUILD/tests" && SL_TEST_BACKEND=cuda "./$t") >"$LOGDIR/$t.log" 2>&1
    rc=$?
    cat "$LOGDIR/$t.log"
    echo "-- $t: exit $rc in $(( $(date +%s) - start ))s"
    [ "$rc" -eq 0 ] || status=1
done

# the torch adapter's device="cuda" (pinned batches copied on a side stream, one ahead),
# with this machine's python3 and its CUDA torch, when the Python module builds here
if [ "${PREBUILT:-0}" != 1 ] && python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null &&
    cmake --build "$BUILD" -j"$JOBS" --target sluice_python >"$LOGDIR/gpu_python_build.log" 2>&1; then
    echo "== python/test_torch_device"
    PYTHONPATH="$BUILD/python" python3 tests/python/test_torch_device.py >"$LOGDIR/test_torch_device.log" 2>&1
    rc=$?
    cat "$LOGDIR/test_torch_device.log"
    echo "-- test_torch_device: exit $rc"
    [ "$rc" -eq 0 ] || status=1
else
    echo "== python/test_torch_device: skipped (no CUDA torch for python3, or the module did not build)"
fi

# compute-sanitizer over the backend tests when NVIDIA's sanitizer is installed: memcheck
# (out-of-bounds and misaligned accesses, device faults), racecheck (shared-memory hazards),
# initcheck (reads of device memory never written), synccheck (barriers in divergent code).
# test_errors makes CUDA calls fail on purpose (an allocation of 4 PiB, a copy to NULL),
# which the sanitizer counts as API errors: it ran above, outside the sanitizer, and
# SL_TEST_NO_API_ERRORS=1 leaves it out here, so any error the sanitizer reports is real.
san=$(command -v compute-sanitizer || true)
[ -z "$san" ] && [ -x /usr/local/cuda/compute-sanitizer/compute-sanitizer ] && san=/usr/local/cuda/compute-sanitizer/compute-sanitizer
[ -z "$san" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && san=/usr/local/cuda/bin/compute-sanitizer
if [ -n "$san" ]; then
    for tool in ${SAN_TOOLS-memcheck racecheck initcheck synccheck}; do
        echo "== compute-sanitizer --tool $tool test_backend_cuda"
        (cd "$BUILD/tests" && SL_TEST_NO_API_ERRORS=1 timeout "${SAN_TIMEOUT:-600}" "$san" --tool "$tool" --error-exitcode 3 ./test_backend_cuda) \
            >"$LOGDIR/sanitizer_$tool.log" 2>&1
        rc=$?
        tail -n 15 "$LOGDIR/sanitizer_$tool.log"
        echo "-- $tool: exit $rc"
        [ "$rc" -eq 0 ] || status=1
    done
else
    echo "== compute-sanitizer not installed: skipped"
fi

echo "== overall: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
