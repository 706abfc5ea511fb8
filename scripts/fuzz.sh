#!/usr/bin/env bash
# Build every libFuzzer target (tests/fuzz/fuzz_*.c) with clang, ASan and UBSan, and run
# each for FUZZ_SECONDS (default 60) from its seed corpus (tests/fuzz/seeds/NAME/ when
# present). Targets run FUZZ_JOBS at a time (default: the number of cores), each a single
# process on its own core for the whole FUZZ_SECONDS, so running them side by side fuzzes
# each exactly as long as running them one after another. Exit 0 only if every target ran
# clean.
#   scripts/fuzz.sh [TARGET...]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
secs=${FUZZ_SECONDS:-60}
par=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
case $par in
    '' | *[!0-9]* | 0*) echo "fuzz: FUZZ_JOBS='$par' is not a positive number of targets to run at once (try FUZZ_JOBS=1)"; exit 2 ;;
esac
dir=build-fuzz
# no "Building C object" line per object (a cmake process each): the log is read on failure,
# where the compiler's messages and make's line naming the failed object are what it needs
if ! CC=clang cmake -S . -B "$dir" -DSLUICE_FUZZ=ON -DSLUICE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_RULE_MESSAGES=OFF >"$dir.configure.log" 2>&1; then
    cat "$dir.configure.log"; exit 1
fi
# only the fuzz targets (and the library they link): the fuzz build runs nothing else
cmake --build "$dir" -j"$(nproc)" --target sluice_fuzz_targets >"$dir.build.log" 2>&1 || { tail -50 "$dir.build.log"; exit 1; }
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in "$dir"/fuzz/fuzz_*; do [ -x "$f" ] && targets+=("$(basename "$f")"); done
fi
# fuzz_one TARGET WORK: fuzz TARGET with WORK as its new-inputs corpus and artifact folder;
# leaves its log in WORK/log and its exit status in WORK/rc
fuzz_one() {
    local t=$1 work=$2 seeds
    seeds="tests/fuzz/seeds/${t#fuzz_}"
    seeds=${seeds%_diff}
    local corpus=("$work")
    [ -d "$seeds" ] && corpus+=("$seeds")
    ASAN_OPTIONS="${ASAN_OPTIONS:-allocator_may_return_null=1}" "$dir/fuzz/$t" -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 \
        -artifact_prefix="$work/" "${corpus[@]}" >"$work/log" 2>&1
    echo $? >"$work/rc"
}
works=() running=0
for t in "${targets[@]}"; do
    if [ "$running" -ge "$par" ]; then wait -n; running=$((running - 1)); fi
    work=$(mktemp -d)
    works+=("$work")
    fuzz_one "$t" "$work" &
    running=$((running + 1))
done
wait
rc=0
for i in "${!targets[@]}"; do
    t=${targets[$i]} work=${works[$i]}
    if [ "$(cat "$work/rc" 2>/dev/null)" = 0 ]; then
        echo "fuzz $t: clean for ${secs} s ($(grep -o 'stat::number_of_executed_units: [0-9]*' "$work/log" | tr -dc 0-9) runs)"
        rm -rf "$work"
    else
        echo "fuzz $t: FAILED (log and crashing input in $work)"
        tail -40 "$work/log"
        rc=1
    fi
done
exit $rc
