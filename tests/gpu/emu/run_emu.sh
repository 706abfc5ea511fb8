#!/usr/bin/env bash
# Check train/backend_cuda*.cu on a machine WITHOUT a GPU: its kernels are compiled as
# plain C++ against a host emulation of the CUDA runtime and cuBLAS (include/, emu_rt.cc),
# under ASan+UBSan, and tests/unit/test_backend_cuda.c runs them against the CPU backend.
# This checks indexing, reductions, warp-shuffle logic, argument handling, the test itself,
# and the ORDER of work between streams: streams are deferred queues run in an order that
# exposes a missing wait (emu_rt.cc), and the test runs its staging tests in both orders.
# It cannot check timing, real cuBLAS or device math libraries: tests/gpu/run.sh on a GPU
# machine does that. ctest runs this as gpu/emu_backend_cuda (tests/CMakeLists.txt).
#   BUILD=dir   a non-CUDA ASan build of libsluice to link (configured here if missing;
#               default build-emu in the repo)
# Exit status: the test program's (0 all passed, 1 a failure).
set -eu
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
EMU=$ROOT/tests/gpu/emu
B=${BUILD:-$ROOT/build-emu}
case $B in /*) ;; *) B=$ROOT/$B ;; esac
if [ ! -f "$B/CMakeCache.txt" ]; then
    cmake -S "$ROOT" -B "$B" -DSLUICE_CUDA=OFF -DSLUICE_SANITIZE=address -DSLUICE_TESTS=OFF >/dev/null
fi
cmake --build "$B" -j"${JOBS:-2}" --target sluice_static >/dev/null
O=$B/emu
mkdir -p "$O"
FL=(-g -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
    -Wall -Wextra -Wno-unused-parameter)
# the backend's .cu files (train/backend_cuda*.cu) as one translation unit
{ for cu in "$ROOT"/train/backend_cuda*.cu; do
      echo "#line 1 \"train/${cu##*/}\""
      python3 "$EMU/convert.py" "$cu"
  done; } >"$O/backend_emu.cc.new"
# recompile only what changed (the backend takes a while under g++ -O1 with sanitizers)
if ! cmp -s "$O/backend_emu.cc.new" "$O/backend_emu.cc" || [ ! -f "$O/backend_emu.o" ]; then
    mv "$O/backend_emu.cc.new" "$O/backend_emu.cc"
    rm -f "$O/backend_emu.o"
else
    rm -f "$O/backend_emu.cc.new"
fi
[ -f "$O/backend_emu.o" ] && [ "$O/backend_emu.o" -nt "$EMU/include/cuda_runtime.h" ] && [ "$O/backend_emu.o" -nt "$ROOT/train/backend.h" ] &&
    [ "$O/backend_emu.o" -nt "$ROOT/train/backend_cuda_priv.cuh" ] ||
    g++ -std=c++20 "${FL[@]}" -I"$EMU/include" -I"$ROOT/include" -I"$ROOT" -c "$O/backend_emu.cc" -o "$O/backend_emu.o"
g++ -std=c++20 "${FL[@]}" -I"$EMU/include" -I"$ROOT/include" -c "$EMU/emu_rt.cc" -o "$O/emu_rt.o"
gcc -std=c11 -D_GNU_SOURCE -DSL_EMU "${FL[@]}" -I"$ROOT/tests/unit" -I"$ROOT" -I"$ROOT/include" \
    -DSL_TEST_SRC="\"$ROOT\"" -DSL_TEST_SHARED="\"$ROOT/../shared\"" -DSL_TEST_DATA="\"$ROOT/tests/data\"" \
    -DSL_TEST_BIN="\"$B/bin\"" -c "$ROOT/tests/unit/test_backend_cuda.c" -o "$O/test.o"
# emu_rt.o defines the sl_cuda_* entry points too, so the archive's cuda_none.o (which
# would clash with the emulated sl__backend_cuda_new) is never pulled in.
g++ "${FL[@]}" "$O/test.o" "$O/backend_emu.o" "$O/emu_rt.o" "$B/lib/libsluice.a" \
    $(pkg-config --libs openblas zlib libprotobuf-c libturbojpeg libjpeg libzmq) -lpthread -lm -o "$O/test_backend_cuda_emu"
cd "$B"
ASAN_OPTIONS=detect_leaks=1 "$O/test_backend_cuda_emu"
