#!/usr/bin/env bash
# The whole test suite, as CI runs it: install what is missing, then build and run every
# test three ways — a plain optimised build, AddressSanitizer + UndefinedBehaviorSanitizer,
# and ThreadSanitizer (unit tests) — then run every libFuzzer target briefly (one target a
# core at a time, scripts/fuzz.sh). The ThreadSanitizer build builds only the unit tests it
# runs, the fuzz build only the fuzz targets. Kept under 15 minutes on 2 cores.
# The fuzzing here is a smoke run, 5 s per target: every target builds, runs its seed corpus
# (a few files, done in the first second) and then a few thousand to a few million inputs of
# its own (fuzz_tfrecord, the slowest, about 2,000 in 5 s); 17 targets, 2 at a time, cost
# 45 s of the run at 5 s each, 90 s at 10. Finding bugs is scripts/fuzz.sh's job, with its
# 60 s default, and longer for a real campaign.
#
#   scripts/test.sh                 everything
#   FUZZ_SECONDS=60 scripts/test.sh longer fuzzing (default 5 s per target)
#   SLUICE_TEST_QUICK=1 scripts/test.sh   plain build only
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=$(nproc 2>/dev/null || echo 2)

bash scripts/deps.sh || { echo "test: installing dependencies failed"; exit 1; }

passed=0 failed=0 skipped=0
failures=()

# run_ctest NAME BUILD_DIR [ctest args...]: counts results from ctest's JUnit output
run_ctest() {
    local name=$1 dir=$2; shift 2
    local junit="$root/$dir/ctest-junit.xml"
    rm -f "$junit"
    (cd "$dir" && ctest --output-on-failure -j"$jobs" --output-junit "$junit" "$@")
    local rc=$?
    if [ -f "$junit" ]; then
        local t f s
        t=$(grep -o 'tests="[0-9]*"' "$junit" | head -1 | tr -dc 0-9)
        f=$(grep -o 'failures="[0-9]*"' "$junit" | head -1 | tr -dc 0-9)
        s=$(grep -o 'skipped="[0-9]*"' "$junit" | head -1 | tr -dc 0-9)
        passed=$((passed + ${t:-0} - ${f:-0} - ${s:-0}))
        failed=$((failed + ${f:-0}))
        skipped=$((skipped + ${s:-0}))
    fi
    if [ $rc -ne 0 ]; then failures+=("$name"); [ -f "$junit" ] || failed=$((failed + 1)); fi
}

build() { # build NAME DIR TARGET cmake-args...  (TARGET: all, or the one target the stage needs)
    local name=$1 dir=$2 target=$3; shift 3
    echo "=== build: $name"
    if ! cmake -S . -B "$dir" "$@" >"$dir.configure.log" 2>&1; then
        cat "$dir.configure.log"; failures+=("$name: configure"); failed=$((failed + 1)); return 1
    fi
    if ! cmake --build "$dir" -j"$jobs" --target "$target" >"$dir.build.log" 2>&1; then
        grep -E -A5 'error|Error' "$dir.build.log" | head -100
        failures+=("$name: build"); failed=$((failed + 1)); return 1
    fi
    grep -E 'warning:' "$dir.build.log" | sort -u | head -20
    return 0
}

mkdir -p build
if build plain build all -DCMAKE_BUILD_TYPE=RelWithDebInfo; then
    echo "=== tests: plain"
    run_ctest plain build
fi

if [ -z "${SLUICE_TEST_QUICK:-}" ]; then
    # build-asan and build-tsan are this script's own (build/ is everyone's): no "Building C
    # object" line per object there (CMAKE_RULE_MESSAGES=OFF), a cmake process less for each,
    # a quarter of a build's CPU time when the compiles themselves are quick; the log (shown
    # on failure) keeps the compiler's messages and make's line naming the failed object
    if build asan build-asan all -DSLUICE_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug -DCMAKE_RULE_MESSAGES=OFF \
        "-DCMAKE_C_FLAGS_DEBUG=-O1 -g -fno-omit-frame-pointer" \
        "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g -fno-omit-frame-pointer"; then
        echo "=== tests: ASan + UBSan"
        run_ctest asan build-asan
    fi
    if build tsan build-tsan sluice_unit_tests -DSLUICE_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_RULE_MESSAGES=OFF; then
        echo "=== tests: TSan (unit)"
        TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/tests/integration/tsan_zmq.supp" \
            run_ctest tsan build-tsan -R '^unit/'
    fi
    echo "=== fuzz: ${FUZZ_SECONDS:-5} s per target"
    if FUZZ_SECONDS=${FUZZ_SECONDS:-5} bash scripts/fuzz.sh; then
        n=$(ls build-fuzz/fuzz/fuzz_* 2>/dev/null | wc -l)
        passed=$((passed + n))
    else
        failures+=("fuzz"); failed=$((failed + 1))
    fi
fi

echo
if [ ${#failures[@]} -gt 0 ]; then echo "failed parts: ${failures[*]}"; fi
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ] && [ ${#failures[@]} -eq 0 ]
