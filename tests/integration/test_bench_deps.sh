#!/usr/bin/env bash
# scripts/bench-deps.sh and tests/bench/run without installing or benchmarking anything:
# fake dpkg-query, apt-get and sudo on PATH stand for the package database (a file listing
# the installed packages) and an apt-get that fails, as without a network, or installs; a
# fake cmake and a fake benchmark stand for the build and the run. Checked: the exact list
# --check prints, one dpkg-query and no apt-get when nothing is missing, the message naming
# the anchor and the package when it cannot be installed (and then no build and no RESULT
# line), that a RESULT line without a ratio never reaches stdout, and --record (appends the
# run to the results file and regenerates the tables, on a copy of the tree).
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DEPS=$SRC/scripts/bench-deps.sh
RUN=$SRC/tests/bench/run
T=$(mktemp -d /tmp/sluice-bench-deps-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }

# ---- the fakes: dpkg-query answers from $T/installed; every call is logged in $T/calls
mkdir -p "$T/fake"
cat >"$T/fake/dpkg-query" <<'EOF'
#!/bin/bash
echo "dpkg-query $*" >>"$FAKE_DIR/calls"
[ "$1" = -W ] && [ "${2%%=*}" = -f ] || { echo "fake dpkg-query: unexpected arguments: $*" >&2; exit 2; }
shift 2
rc=0
for p in "$@"; do
    if grep -qxF "$p" "$FAKE_DIR/installed"; then printf '%s\tinstall ok installed\n' "$p"
    else echo "dpkg-query: no packages found matching $p" >&2; rc=1; fi
done
exit $rc
EOF
cat >"$T/fake/apt-get" <<'EOF'
#!/bin/bash
echo "apt-get $*" >>"$FAKE_DIR/calls"
[ "${FAKE_APT:-fail}" = ok ] || { echo "E: Failed to fetch (fake: no network)" >&2; exit 100; }
if [ "$1" = install ]; then
    for p in "$@"; do case $p in -*|install) ;; *) echo "$p" >>"$FAKE_DIR/installed" ;; esac; done
fi
exit 0
EOF
cat >"$T/fake/sudo" <<'EOF'
#!/bin/bash
exec "$@"
EOF
cat >"$T/fake/cmake" <<'EOF'
#!/bin/bash
echo "cmake $*" >>"$FAKE_DIR/calls"
EOF
chmod +x "$T/fake"/*
export FAKE_DIR=$T PATH="$T/fake:$PATH"
# every package any benchmark lists, minus the arguments
installed_but() {
    : >"$T/installed"
    for p in coreutils gzip python3 python3-numpy python3-torch python3-torchvision python3-pil \
        openmpi-bin libopenmpi-dev; do
        local skip=0 m
        for m in "$@"; do [ "$p" = "$m" ] && skip=1; done
        [ $skip = 1 ] || echo "$p" >>"$T/installed"
    done
    : >"$T/calls"
}
# run NAME WANT_RC CMD...: stdout/stderr in $T/NAME.{out,err}
run() {
    local name=$1 want=$2
    shift 2
    "$@" >"$T/$name.out" 2>"$T/$name.err" </dev/null
    local rc=$?
    [ "$rc" = "$want" ] && return 0
    fail "$name: exit $rc, expected $want"
    sed 's/^/    /' "$T/$name.err" "$T/$name.out" | tail -20
    return 1
}

# 1. every benchmark in tests/bench has an entry in the table
for b in "$SRC"/tests/bench/bench_*.c "$SRC"/tests/bench/bench_*.py "$SRC"/tests/bench/bench_*.sh; do
    b=$(basename "$b")
    b=${b%.*}
    run "list-$b" 0 "$DEPS" --list "$b" || fail "$b has no entry in scripts/bench-deps.sh"
done
[ $fails = 0 ] && ok "every tests/bench/bench_* is in the table"
run unknown 2 "$DEPS" --check bench_nothing && grep -qxF "bench-deps: unknown benchmark 'bench_nothing' (add its anchors' packages to $DEPS)" "$T/unknown.err" &&
    ok "an unknown benchmark: exit 2 naming it" || { fail "unknown benchmark message:"; cat "$T/unknown.err"; }

# 2. nothing missing: no output, one dpkg-query, no apt-get
installed_but
if run none 0 "$DEPS" --check bench_pipeline; then
    [ ! -s "$T/none.out" ] && ok "--check with everything installed prints nothing" || fail "--check printed: $(cat "$T/none.out")"
fi
: >"$T/calls"
if run none-install 0 "$DEPS" bench_pipeline; then
    [ "$(cat "$T/calls")" = 'dpkg-query -W -f=${Package}\t${Status}\n python3 python3-pil python3-torch python3-torchvision' ] &&
        ok "nothing to install: one dpkg-query over the 4 packages, no apt-get" || { fail "calls:"; cat "$T/calls"; }
    [ ! -s "$T/none-install.err" ] || fail "stderr: $(cat "$T/none-install.err")"
fi

# 3. --check lists exactly what is missing, and installs nothing
installed_but python3-pil python3-torchvision
if run check 0 "$DEPS" --check bench_pipeline; then
    [ "$(cat "$T/check.out")" = "$(printf '%s\n' python3-pil python3-torchvision)" ] &&
        ok "--check bench_pipeline: python3-pil python3-torchvision" || fail "--check printed: $(cat "$T/check.out")"
    grep -q '^apt-get' "$T/calls" && fail "--check ran apt-get"
fi
installed_but openmpi-bin libopenmpi-dev python3-torchvision
run check-mpi 0 "$DEPS" --check bench_allreduce &&
    [ "$(cat "$T/check-mpi.out")" = "$(printf '%s\n' libopenmpi-dev openmpi-bin)" ] &&
    ok "--check bench_allreduce: libopenmpi-dev openmpi-bin" || fail "--check bench_allreduce printed: $(cat "$T/check-mpi.out")"
run check-train 0 "$DEPS" --check bench_train && [ ! -s "$T/check-train.out" ] &&
    ok "--check bench_train: nothing (torch and numpy are there)" || fail "--check bench_train printed: $(cat "$T/check-train.out")"

# 4. apt-get cannot install (no network): exit 1, one line per anchor naming the package
installed_but python3-pil python3-torchvision
if run nonet 1 "$DEPS" bench_pipeline; then
    want="bench bench_pipeline: anchor torch_loader.py needs python3-torchvision python3-pil: not installed (apt-get install -y python3-torchvision python3-pil)
bench bench_pipeline: anchor make_jpeg_corpus.py (the JPEG corpus) needs python3-pil: not installed (apt-get install -y python3-pil)"
    [ "$(grep '^bench bench_pipeline: .* needs ' "$T/nonet.err")" = "$want" ] &&
        ok "not installable: each anchor and the package it needs" || { fail "message:"; cat "$T/nonet.err"; }
    grep -qxF "apt-get install -y -qq --no-install-recommends python3-pil python3-torchvision" "$T/calls" &&
        ok "apt-get was asked for exactly the missing packages" || { fail "apt-get calls:"; cat "$T/calls"; }
fi

# 5. apt-get installs them: exit 0, nothing left to say
installed_but python3-pil python3-torchvision
FAKE_APT=ok run installs 0 "$DEPS" bench_pipeline && ! grep -q 'not installed' "$T/installs.err" &&
    ok "installable: installed, exit 0" || { fail "install run:"; cat "$T/installs.err"; }

# 6. tests/bench/run on a machine where the anchor cannot be installed: exit 1 with the
#    message, no build, no RESULT line
installed_but python3-torchvision
if run benchrun 1 env SLUICE_BENCH_BUILD="$T/build" "$RUN" bench_pipeline; then
    grep -qxF "bench bench_pipeline: anchor torch_loader.py needs python3-torchvision: not installed (apt-get install -y python3-torchvision)" "$T/benchrun.err" &&
        ok "tests/bench/run: the missing anchor package named, exit 1" || { fail "message:"; cat "$T/benchrun.err"; }
    grep -q '^cmake' "$T/calls" && fail "tests/bench/run built the benchmark anyway"
    grep -q '^RESULT' "$T/benchrun.out" && fail "a RESULT line: $(grep '^RESULT' "$T/benchrun.out")"
fi

# 7. a benchmark whose anchor failed at run time prints ratio=0: tests/bench/run withholds
#    that RESULT line and exits 1; a RESULT line with a ratio passes through
installed_but
mkdir -p "$T/build/bench"
printf '#!/bin/sh\necho "anchors skipped: no ratio (the RESULT line carries 0)"\necho "RESULT bench_pipeline ratio=0 sluice=3000.0 anchor=0 unit=images/s mode=none exact=0 fast=0"\n' >"$T/build/bench/bench_pipeline"
printf '#!/bin/sh\necho "RESULT bench_allreduce ratio=0.000 sluice=0.1240 anchor=0.0000 unit=s"\n' >"$T/build/bench/bench_allreduce"
printf '#!/bin/sh\necho "a line"\necho "RESULT bench_tfrecord ratio=1.070 sluice=16433 anchor=15376 unit=MB/s"\n' >"$T/build/bench/bench_tfrecord"
chmod +x "$T/build/bench"/*
for b in bench_pipeline bench_allreduce; do
    if run "zero-$b" 1 env SLUICE_BENCH_BUILD="$T/build" "$RUN" "$b"; then
        grep -q '^RESULT' "$T/zero-$b.out" && fail "$b: a RESULT line without a ratio reached stdout: $(grep '^RESULT' "$T/zero-$b.out")" ||
            ok "$b: no RESULT line without a ratio, exit 1"
        grep -q "^bench $b: no ratio: an anchor did not run (its output above says why); RESULT line withheld: RESULT $b ratio=0" "$T/zero-$b.err" ||
            { fail "$b: no withheld message:"; cat "$T/zero-$b.err"; }
    fi
done
grep -qxF "anchors skipped: no ratio (the RESULT line carries 0)" "$T/zero-bench_pipeline.out" ||
    fail "the benchmark's other lines did not pass through"
if run good 0 env SLUICE_BENCH_BUILD="$T/build" "$RUN" bench_tfrecord; then
    [ "$(cat "$T/good.out")" = "$(printf '%s\n' "a line" "RESULT bench_tfrecord ratio=1.070 sluice=16433 anchor=15376 unit=MB/s")" ] &&
        ok "a RESULT line with a ratio passes through, exit 0" || fail "stdout: $(cat "$T/good.out")"
fi

# 8. --record, on a copy of the tree (the results file and the pages it feeds, the scripts):
#    one line appended with the date, the commit, the machine and the RESULT line; the
#    README's table and docs/benchmarks.md regenerated from it, and --check then content; the
#    argument not passed on to the benchmark; a withheld RESULT line records nothing
C=$T/tree
mkdir -p "$C/tests/bench" "$C/scripts" "$C/docs"
cp "$SRC/tests/bench/run" "$SRC/tests/bench/record.sh" "$SRC/tests/bench/results.tsv" "$C/tests/bench/"
cp "$SRC/scripts/bench-deps.sh" "$SRC/scripts/gen_bench_docs.py" "$C/scripts/"
cp -r "$SRC/README.md" "$SRC/docs" "$C/"
git -C "$C" init -q && git -C "$C" add -A && git -C "$C" -c user.name=t -c user.email=t@t commit -q -m tree
want_commit=$(git -C "$C" describe --always --dirty --abbrev=7)
printf '#!/bin/sh\necho "args: $*"\necho "RESULT bench_tfrecord ratio=2.500 sluice=40000 anchor=16000 unit=MB/s"\n' >"$T/build/bench/bench_tfrecord"
chmod +x "$T/build/bench/bench_tfrecord"
before=$(wc -l <"$C/tests/bench/results.tsv")
if run record 0 env SLUICE_BENCH_BUILD="$T/build" "$C/tests/bench/run" bench_tfrecord --record extra; then
    last=$(tail -n 1 "$C/tests/bench/results.tsv")
    [ "$(wc -l <"$C/tests/bench/results.tsv")" = $((before + 1)) ] &&
        [ "$(printf '%s' "$last" | cut -f1)" = "$(date -u +%F)" ] &&
        [ "$(printf '%s' "$last" | cut -f2)" = "$want_commit" ] &&
        printf '%s' "$last" | cut -f3 | grep -q "$(nproc)-core .*GiB" &&
        [ "$(printf '%s' "$last" | cut -f4)" = "RESULT bench_tfrecord ratio=2.500 sluice=40000 anchor=16000 unit=MB/s" ] &&
        ok "--record: the run appended with date, commit and machine" || fail "--record appended: $last"
    grep -qxF "args: extra" "$T/record.out" && ok "--record is not passed to the benchmark" ||
        fail "the benchmark got: $(grep args: "$T/record.out")"
    grep -q "^| \`bench_tfrecord\` | .* | 2.500 (higher is better) | 40,000 MB/s | 16,000 MB/s | $(date -u +%F), $want_commit, " "$C/README.md" &&
        grep -q "^| \`bench_tfrecord\` | 2.500 (higher is better) | 40,000 | 16,000 | MB/s |" "$C/docs/benchmarks.md" &&
        ok "--record: the README's table and docs/benchmarks.md show the new run" ||
        { fail "tables not regenerated:"; grep bench_tfrecord "$C/README.md"; }
    python3 "$C/scripts/gen_bench_docs.py" --check "$C" >/dev/null && ok "--record: the pages are then what the results file makes" ||
        fail "gen_bench_docs --check after --record"
fi
before=$(wc -l <"$C/tests/bench/results.tsv")
run record-withheld 1 env SLUICE_BENCH_BUILD="$T/build" "$C/tests/bench/run" bench_allreduce --record >/dev/null
[ "$(wc -l <"$C/tests/bench/results.tsv")" = "$before" ] && ok "--record: a withheld RESULT line records nothing" ||
    fail "a withheld RESULT line was recorded: $(tail -n 1 "$C/tests/bench/results.tsv")"

if [ "$fails" -gt 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "PASS: test_bench_deps"
