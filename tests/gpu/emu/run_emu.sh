#!/usr/bin/env bash
# Check train/backend_cuda.cu on a machine WITHOUT a GPU: its kernels are compiled as
# plain C++ against a host emulation of the CUDA runtime, cuBLAS and cuDNN (include/,
# emu_rt.cc, emu_cudnn.cc),
# under ASan+UBSan, and tests/unit/test_backend_cuda.c runs them against the CPU backend.
# This checks indexing, reductions, warp-shuffle logic, argument handling, the test itself,
# and the ORDER of work between streams: streams are deferred queues run in an order that
# exposes a missing wait (emu_rt.cc), and the test runs its staging tests in both orders.
# It cannot check timing, real cuBLAS or device math libraries: tests/gpu/run.sh on a GPU
# machine does that. ctest runs this as gpu/emu_backend_cuda (tests/CMakeLists.txt).
# The program, tests/test_backend_cuda_emu, is a target of the build (tests/CMakeLists.txt:
# a plain, non-sanitizer build with g++), so the build step compiles it (not in a CUDA
# build: there this script does); this script brings it up to date (nothing to do after a
# build) and runs it.
#   BUILD=dir   a plain build with the tests (configured here if missing, without CUDA or
#               the Python module; default build-emu in the repo)
# Exit status: the test program's (0 all passed, 1 a failure).
set -eu
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
B=${BUILD:-$ROOT/build-emu}
case $B in /*) ;; *) B=$ROOT/$B ;; esac
if [ ! -f "$B/CMakeCache.txt" ]; then
    cmake -S "$ROOT" -B "$B" -DSLUICE_CUDA=OFF -DSLUICE_PYTHON=OFF >/dev/null
fi
if ! cmake --build "$B" -j"${JOBS:-2}" --target test_backend_cuda_emu >"$B/emu_build.log" 2>&1; then
    tail -40 "$B/emu_build.log"
    echo "FAIL: building test_backend_cuda_emu in $B (a sanitizer or fuzz build, or no g++, has no such target)"
    exit 1
fi
cd "$B"
ASAN_OPTIONS=detect_leaks=1 "$B/tests/test_backend_cuda_emu"
