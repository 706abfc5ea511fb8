#!/usr/bin/env bash
# Build every libFuzzer target (tests/fuzz/fuzz_*.c) with clang, ASan and UBSan, and run
# each for FUZZ_SECONDS (default 60) from its seed corpus (tests/fuzz/seeds/NAME/ when
# present). Exit 0 only if every target ran clean.
#   scripts/fuzz.sh [TARGET...]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
secs=${FUZZ_SECONDS:-60}
dir=build-fuzz
if ! CC=clang cmake -S . -B "$dir" -DSLUICE_FUZZ=ON -DSLUICE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        >"$dir.configure.log" 2>&1; then
    cat "$dir.configure.log"; exit 1
fi
cmake --build "$dir" -j"$(nproc)" >"$dir.build.log" 2>&1 || { tail -50 "$dir.build.log"; exit 1; }
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in "$dir"/fuzz/fuzz_*; do [ -x "$f" ] && targets+=("$(basename "$f")"); done
fi
rc=0
for t in "${targets[@]}"; do
    seeds="tests/fuzz/seeds/${t#fuzz_}"
    seeds=${seeds%_diff}
    work=$(mktemp -d)
    corpus=("$work")
    [ -d "$seeds" ] && corpus+=("$seeds")
    if ASAN_OPTIONS="${ASAN_OPTIONS:-allocator_may_return_null=1}" "$dir/fuzz/$t" -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 \
            -artifact_prefix="$work/" "${corpus[@]}" >"$work/log" 2>&1; then
        echo "fuzz $t: clean for ${secs} s ($(grep -o 'stat::number_of_executed_units: [0-9]*' "$work/log" | tr -dc 0-9) runs)"
        rm -rf "$work"
    else
        echo "fuzz $t: FAILED (log and crashing input in $work)"
        tail -40 "$work/log"
        rc=1
    fi
done
exit $rc
